//! Several threads share one allocator on a real device, allocating and
//! freeing host-visible buffers at random (seeded), each writing a unique
//! pattern into what it holds and checking it before freeing.

use std::sync::Arc;

use ash::vk;
use gpu_tests::{pattern, GpuAllocator, GpuContext};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vkalloc::vk::MappedBuffer;
use vkalloc::{
    AllocationDesc, AllocationOptions, MappedAllocation, MemoryUsage, PoolDesc, PoolId,
    ResourceKind,
};

const THREADS: u64 = 4;
const OPERATIONS_PER_THREAD: usize = 1500;
const MAX_LIVE_PER_THREAD: usize = 48;

/// What one thread holds.
enum Held {
    /// A buffer made by `create_buffer_mapped`.
    Buffer(MappedBuffer, u64),
    /// Raw mapped memory from `allocate_mapped`.
    Raw(MappedAllocation, u64),
}

impl Held {
    fn memory(&self) -> &MappedAllocation {
        match self {
            Held::Buffer(b, _) => b.allocation(),
            Held::Raw(m, _) => m,
        }
    }

    fn seed(&self) -> u64 {
        match self {
            Held::Buffer(_, seed) | Held::Raw(_, seed) => *seed,
        }
    }
}

fn random_size(rng: &mut ChaCha8Rng) -> u64 {
    match rng.gen_range(0..10) {
        0..=5 => rng.gen_range(1..=1024),
        6..=8 => rng.gen_range(1024..=64 << 10),
        _ => rng.gen_range(64 << 10..=1 << 20),
    }
}

fn check_and_free(allocator: &GpuAllocator, thread: u64, held: Held) {
    let m = held.memory();
    allocator
        .invalidate(m, 0, m.size())
        .unwrap_or_else(|e| panic!("thread {thread}: invalidate failed: {e}"));
    if let Err(err) = pattern::check(held.seed(), m.as_slice()) {
        panic!(
            "thread {thread}: allocation of {} B at memory {:#x} offset {} lost its pattern \
             (another live allocation overlaps it): {err}",
            m.size(),
            m.memory().0,
            m.offset()
        );
    }
    match held {
        // SAFETY: the device never used the buffer (host-only test).
        Held::Buffer(buffer, _) => unsafe { allocator.destroy_buffer(buffer) }
            .unwrap_or_else(|e| panic!("thread {thread}: destroy_buffer failed: {e}")),
        Held::Raw(m, _) => allocator
            .free(m)
            .unwrap_or_else(|e| panic!("thread {thread}: free failed: {e}")),
    }
}

fn worker(allocator: Arc<GpuAllocator>, thread: u64, pool: PoolId) -> usize {
    let mut rng = ChaCha8Rng::seed_from_u64(0xA110C + thread);
    let mut held: Vec<Held> = Vec::new();
    let mut seed = thread << 48;
    let mut peak = 0;
    for _ in 0..OPERATIONS_PER_THREAD {
        let allocate = held.is_empty() || (held.len() < MAX_LIVE_PER_THREAD && rng.gen_bool(0.55));
        if !allocate {
            let victim = rng.gen_range(0..held.len());
            check_and_free(&allocator, thread, held.swap_remove(victim));
            continue;
        }
        seed += 1;
        let size = random_size(&mut rng);
        let usage = if rng.gen_bool(0.5) {
            MemoryUsage::Upload
        } else {
            MemoryUsage::Readback
        };
        let mut options = AllocationOptions::usage(usage).tagged("stress");
        // Thread 0 and 1 also use a shared pool, so pool locks are contended.
        if thread < 2 && usage == MemoryUsage::Upload && rng.gen_bool(0.5) {
            options = options.in_pool(pool);
        }
        let mut item = if rng.gen_bool(0.5) {
            let info = vk::BufferCreateInfo::default()
                .size(size)
                .usage(vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST)
                .sharing_mode(vk::SharingMode::EXCLUSIVE);
            // SAFETY: the create info is valid and outlives the call.
            let buffer =
                unsafe { allocator.create_buffer_mapped(&info, &options) }.unwrap_or_else(|e| {
                    panic!("thread {thread}: create_buffer_mapped({size} B) failed: {e}")
                });
            Held::Buffer(buffer, seed)
        } else {
            let desc = AllocationDesc {
                size,
                alignment: 1 << rng.gen_range(0..9),
                memory_type_bits: u32::MAX,
                kind: ResourceKind::Buffer,
                options,
                ..AllocationDesc::default()
            };
            let m = allocator.allocate_mapped(&desc).unwrap_or_else(|e| {
                panic!("thread {thread}: allocate_mapped({size} B) failed: {e}")
            });
            assert_eq!(
                m.offset() % desc.alignment,
                0,
                "thread {thread}: misaligned allocation"
            );
            Held::Raw(m, seed)
        };
        let m = match &mut item {
            Held::Buffer(b, _) => b.mapped_mut(),
            Held::Raw(m, _) => m,
        };
        pattern::fill(seed, m.as_mut_slice());
        let len = m.size();
        allocator
            .flush(m, 0, len)
            .unwrap_or_else(|e| panic!("thread {thread}: flush failed: {e}"));
        held.push(item);
        peak = peak.max(held.len());
    }
    for item in held.drain(..) {
        check_and_free(&allocator, thread, item);
    }
    peak
}

#[test]
fn threads_share_one_allocator() {
    let ctx = GpuContext::for_test();
    let pool = ctx
        .allocator()
        .create_pool(&PoolDesc {
            usage: MemoryUsage::Upload,
            block_size: 4 << 20,
            ..PoolDesc::new("stress pool")
        })
        .expect("creating the stress pool failed");
    let handles: Vec<_> = (0..THREADS)
        .map(|thread| {
            let allocator = Arc::clone(ctx.allocator());
            std::thread::Builder::new()
                .name(format!("stress-{thread}"))
                .spawn(move || worker(allocator, thread, pool))
                .expect("spawning a thread failed")
        })
        .collect();
    let mut failures = Vec::new();
    for (thread, handle) in handles.into_iter().enumerate() {
        match handle.join() {
            Ok(peak) => assert!(
                peak > 8,
                "thread {thread} never held more than {peak} allocations"
            ),
            Err(panic) => failures.push(format!(
                "thread {thread}: {}",
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "stress threads failed:\n{}",
        failures.join("\n")
    );

    let allocator = ctx.allocator();
    allocator
        .validate()
        .expect("allocator invariants after the stress run");
    let stats = allocator.statistics();
    assert_eq!(
        stats.total.allocation_count,
        0,
        "live allocations left:\n{}",
        allocator.summary()
    );
    assert_eq!(stats.total.allocation_bytes, 0);
    allocator
        .destroy_pool(pool)
        .expect("destroying the stress pool failed");
    ctx.assert_no_live_allocations();
    ctx.finish();
}
