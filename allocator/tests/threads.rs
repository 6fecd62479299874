//! Threads on one allocator: many threads allocating and freeing in one
//! memory type (the type's blocks are sharded under contention) and in pools
//! of their own, with `validate()`, the statistics and the leak report
//! agreeing at the end; and a single thread committing exactly the blocks it
//! did before the vectors were sharded.

use std::sync::{Arc, Barrier};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vkalloc::sim::{tables, SimDevice};
use vkalloc::{
    AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, MappedAllocation, MemoryUsage,
    PoolDesc, PoolId, ResourceKind,
};

const LIVE: usize = 64;

/// 256 B to 1 MiB, uniform in log2.
fn size(rng: &mut ChaCha8Rng) -> u64 {
    let bits = rng.gen_range(8.0f64..=20.0);
    (2f64.powf(bits) as u64).max(256)
}

fn desc(size: u64, pool: Option<PoolId>) -> AllocationDesc<'static> {
    let mut options = AllocationOptions::usage(MemoryUsage::Upload);
    if let Some(pool) = pool {
        options = options.in_pool(pool);
    }
    AllocationDesc {
        size,
        alignment: 256,
        kind: ResourceKind::Buffer,
        options,
        ..AllocationDesc::default()
    }
}

/// Each thread keeps `LIVE` mapped buffers, each filled with its own byte,
/// and replaces one at a time `rounds` times; every buffer is checked before
/// it is freed. Returns the live buffers at the end (with their bytes) so
/// the caller can compare the statistics with them while they are live.
fn churn(
    allocator: &Allocator<Arc<SimDevice>>,
    seed: u64,
    rounds: u32,
    pool: Option<PoolId>,
) -> Vec<(u8, MappedAllocation)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut live: Vec<(u8, MappedAllocation)> = Vec::with_capacity(LIVE);
    let fill = |rng: &mut ChaCha8Rng, n: u32| {
        let mut m = allocator.allocate_mapped(&desc(size(rng), pool)).unwrap();
        let byte = (seed as u8).wrapping_mul(31).wrapping_add(n as u8);
        m.as_mut_slice().fill(byte);
        (byte, m)
    };
    for n in 0..LIVE as u32 {
        live.push(fill(&mut rng, n));
    }
    for n in 0..rounds {
        let i = rng.gen_range(0..live.len());
        let (byte, old) = std::mem::replace(&mut live[i], fill(&mut rng, n));
        assert!(
            holds(&old, byte),
            "thread {seed}: a neighbour wrote into a live buffer"
        );
        allocator.free(old).unwrap();
    }
    live
}

/// Whether every byte of `m` is `byte` (compared a page at a time: fast
/// in debug builds too).
fn holds(m: &MappedAllocation, byte: u8) -> bool {
    let page = [byte; 4096];
    m.as_slice()
        .chunks(page.len())
        .all(|c| c == &page[..c.len()])
}

fn run_threads(threads: u64, pools: bool) {
    let sim = Arc::new(SimDevice::new(tables::nvidia_h200()));
    let allocator = Arc::new(Allocator::new(Arc::clone(&sim), AllocatorDesc::default()).unwrap());
    let pool_ids: Vec<Option<PoolId>> = (0..threads)
        .map(|t| {
            pools.then(|| {
                allocator
                    .create_pool(&PoolDesc {
                        usage: MemoryUsage::Upload,
                        block_size: 16 << 20,
                        ..PoolDesc::new(format!("thread {t}"))
                    })
                    .unwrap()
            })
        })
        .collect();
    let start = Arc::new(Barrier::new(threads as usize));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let allocator = Arc::clone(&allocator);
            let start = Arc::clone(&start);
            let pool = pool_ids[t as usize];
            std::thread::spawn(move || {
                start.wait();
                churn(&allocator, t, 3000, pool)
            })
        })
        .collect();
    let live: Vec<(u8, MappedAllocation)> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();

    // Everything still live: the counters, the blocks and the dump agree.
    allocator
        .validate()
        .expect("invariants hold after the threads");
    let stats = allocator.statistics();
    assert_eq!(stats.total.allocation_count, threads * LIVE as u64);
    let asked: u64 = live.iter().map(|(_, m)| m.size()).sum();
    assert!(stats.total.allocation_bytes >= asked);
    let details = allocator.detailed_statistics();
    let listed: usize = details
        .lists
        .iter()
        .flat_map(|l| &l.blocks)
        .map(|b| b.allocations.len())
        .sum();
    assert_eq!(listed as u64, stats.total.allocation_count);
    let blocks: usize = details.lists.iter().map(|l| l.blocks.len()).sum();
    assert_eq!(blocks as u32, stats.total.block_count);
    assert_eq!(allocator.leaks().len(), live.len());
    let snapshot = allocator.snapshot();
    let in_snapshot: usize = snapshot
        .lists
        .iter()
        .flat_map(|l| &l.blocks)
        .map(|b| b.allocations.len())
        .sum();
    assert_eq!(in_snapshot, live.len());
    assert!(allocator.to_json().contains("\"allocations\""));

    for (byte, m) in live {
        assert!(holds(&m, byte));
        allocator.free(m).unwrap();
    }
    for pool in pool_ids.into_iter().flatten() {
        allocator.destroy_pool(pool).unwrap();
    }
    all_returned(allocator, &sim);
}

/// With every allocation freed: the invariants hold, nothing is counted or
/// reported as leaked, a trim frees every block, and once the allocator is
/// dropped the device holds no memory and saw no contract broken.
fn all_returned(allocator: Arc<Allocator<Arc<SimDevice>>>, sim: &SimDevice) {
    allocator.validate().expect("invariants hold at the end");
    let allocator = Arc::into_inner(allocator).unwrap();
    let stats = allocator.statistics();
    assert_eq!(stats.total.allocation_count, 0);
    assert_eq!(stats.total.allocation_bytes, 0);
    assert!(allocator.leaks().is_empty());
    allocator.trim();
    assert_eq!(allocator.statistics().total.block_count, 0);
    drop(allocator);
    assert_eq!(sim.live_objects(), 0, "device memory left after drop");
    assert_eq!(sim.violations(), 0, "{:?}", sim.violation_log());
}

#[test]
fn eight_threads_in_one_memory_type() {
    run_threads(8, false);
}

#[test]
fn eight_threads_with_a_pool_each() {
    run_threads(8, true);
}

/// The blocks one thread commits for the bench's workload (64 live buffers
/// of 256 B to 1 MiB, 5000 replacements): after every step, the most blocks
/// and bytes committed. Measured on the unsharded vector (commit 2dbc3db) as
/// `(1, 32 MiB)` with blocks doubling from 1/8 of the block size; with the
/// adaptive policy (`policy.rs`: blocks of about a quarter of the live set,
/// at least 4 MiB) it is `(5, 20 MiB)`. A single thread never opens a second
/// shard, so sharding must not change it.
#[test]
fn one_thread_commits_no_more_blocks_than_before() {
    let sim = Arc::new(SimDevice::new(tables::nvidia_h200()));
    let allocator = Allocator::new(Arc::clone(&sim), AllocatorDesc::default()).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut live = Vec::new();
    let mut most = (0u32, 0u64);
    let mut note = |allocator: &Allocator<Arc<SimDevice>>| {
        let usage = allocator.statistics().total;
        most.0 = most.0.max(usage.block_count);
        most.1 = most.1.max(usage.block_bytes);
    };
    for _ in 0..LIVE {
        live.push(allocator.allocate(&desc(size(&mut rng), None)).unwrap());
        note(&allocator);
    }
    for _ in 0..5000 {
        let i = rng.gen_range(0..live.len());
        let old = std::mem::replace(
            &mut live[i],
            allocator.allocate(&desc(size(&mut rng), None)).unwrap(),
        );
        allocator.free(old).unwrap();
        note(&allocator);
    }
    assert_eq!(most, (MOST_BLOCKS, MOST_BYTES));
    for a in live {
        allocator.free(a).unwrap();
    }
    allocator.validate().unwrap();
}

const MOST_BLOCKS: u32 = 5;
const MOST_BYTES: u64 = 20 << 20;

/// Threads free each other's allocations (a buffer made under one thread's
/// home shard, or a borrowed one, freed by another thread) while a further
/// thread ends frames, trims, and reads the statistics, the snapshot and the
/// JSON dump without pause: no buffer is written by a neighbour, no call
/// fails or deadlocks, and at the end the counters, the blocks and the
/// device agree and every block goes back.
#[test]
fn threads_free_each_others_buffers_while_frames_trims_and_dumps_run() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    const WORKERS: u64 = 6;
    let sim = Arc::new(SimDevice::new(tables::nvidia_h200()));
    let allocator = Arc::new(Allocator::new(Arc::clone(&sim), AllocatorDesc::default()).unwrap());
    // Buffers handed from one thread to another, each with its fill byte.
    let mailbox: Arc<Mutex<Vec<(u8, MappedAllocation)>>> = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(WORKERS as usize + 1));
    let observer = {
        let (allocator, done, start) = (
            Arc::clone(&allocator),
            Arc::clone(&done),
            Arc::clone(&start),
        );
        std::thread::spawn(move || {
            start.wait();
            let mut rounds = 0u32;
            while !done.load(Ordering::Relaxed) {
                allocator.begin_frame();
                // Read while the workers run (their sums are of moments
                // apart: checked per block in the snapshot below instead).
                let _ = allocator.statistics();
                if rounds % 8 == 0 {
                    // Each block taken under its shard's lock: its
                    // allocations lie inside it, apart, and add up to its
                    // count and bytes.
                    for b in allocator.snapshot().lists.iter().flat_map(|l| &l.blocks) {
                        let mut spans: Vec<(u64, u64)> = b
                            .allocations
                            .iter()
                            .map(|a| (a.offset, a.offset + a.size))
                            .collect();
                        spans.sort_unstable();
                        assert!(
                            spans.windows(2).all(|w| w[0].1 <= w[1].0),
                            "overlapping allocations"
                        );
                        assert!(
                            spans.last().is_none_or(|s| s.1 <= b.size),
                            "an allocation past its block"
                        );
                        assert_eq!(spans.len(), b.allocation_count as usize);
                    }
                    // The dump is whole JSON whatever the threads do (it
                    // may list no block at all before they allocate).
                    let dump: serde_json::Value =
                        serde_json::from_str(&allocator.to_json()).expect("the dump is JSON");
                    assert!(dump.is_object());
                }
                if rounds % 4 == 0 {
                    allocator.trim();
                }
                rounds += 1;
            }
            rounds
        })
    };
    let workers: Vec<_> = (0..WORKERS)
        .map(|t| {
            let (allocator, mailbox, start) = (
                Arc::clone(&allocator),
                Arc::clone(&mailbox),
                Arc::clone(&start),
            );
            std::thread::spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(100 + t);
                let mut own: Vec<(u8, MappedAllocation)> = Vec::new();
                start.wait();
                for n in 0..1500u32 {
                    // Up to 4 MiB: new blocks, emptied blocks and large
                    // requests beside the small ones.
                    let bits = rng.gen_range(8.0f64..=22.0);
                    let size = (2f64.powf(bits) as u64).max(256);
                    let mut m = allocator.allocate_mapped(&desc(size, None)).unwrap();
                    let byte = (t as u8).wrapping_mul(37).wrapping_add(n as u8);
                    m.as_mut_slice().fill(byte);
                    if rng.gen_bool(0.5) {
                        mailbox.lock().unwrap().push((byte, m));
                    } else {
                        own.push((byte, m));
                    }
                    // Free someone's buffer: from the mailbox (most likely
                    // another thread's) or one of its own.
                    let taken = if rng.gen_bool(0.5) {
                        let mut mb = mailbox.lock().unwrap();
                        let len = mb.len();
                        (len > 0).then(|| mb.swap_remove(rng.gen_range(0..len)))
                    } else {
                        let len = own.len();
                        (len > 0).then(|| own.swap_remove(rng.gen_range(0..len)))
                    };
                    if let Some((byte, m)) = taken {
                        assert!(holds(&m, byte), "a neighbour wrote into a live buffer");
                        allocator.free(m).unwrap();
                    }
                    if own.len() + mailbox.lock().unwrap().len() > 400 {
                        let (byte, m) = own
                            .pop()
                            .unwrap_or_else(|| mailbox.lock().unwrap().pop().unwrap());
                        assert!(holds(&m, byte));
                        allocator.free(m).unwrap();
                    }
                }
                own
            })
        })
        .collect();
    let mut left: Vec<(u8, MappedAllocation)> = workers
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    done.store(true, Ordering::Relaxed);
    assert!(observer.join().unwrap() > 0);
    left.append(&mut mailbox.lock().unwrap());

    allocator
        .validate()
        .expect("invariants hold after the threads");
    let stats = allocator.statistics();
    assert_eq!(stats.total.allocation_count, left.len() as u64);
    assert_eq!(allocator.leaks().len(), left.len());
    for (byte, m) in left {
        assert!(holds(&m, byte));
        allocator.free(m).unwrap();
    }
    all_returned(allocator, &sim);
}

/// Threads making device-local textures race threads whose uploads leave
/// the upload type's blocks empty (the H200: a resizable BAR, so those
/// blocks' room takes textures the device-local blocks can't hold), while
/// another thread trims: no call fails or deadlocks, some textures land in
/// the upload type, the upload buffers still read back what was written,
/// and at the end `validate()` holds and every block goes back.
#[test]
fn textures_take_room_in_upload_blocks_while_uploads_come_and_go() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    let sim = Arc::new(SimDevice::new(tables::nvidia_h200()));
    let allocator = Arc::new(Allocator::new(Arc::clone(&sim), AllocatorDesc::default()).unwrap());
    // A texture in the block an upload left empty, live while the threads
    // run: that block's room is shared by racing uploads and textures.
    let texture = |size| AllocationDesc {
        size,
        alignment: 64 << 10,
        kind: ResourceKind::OptimalImage,
        options: AllocationOptions::usage(MemoryUsage::GpuOnly),
        ..AllocationDesc::default()
    };
    let upload = allocator
        .allocate(&AllocationDesc {
            size: 40 << 20,
            alignment: 256,
            kind: ResourceKind::Buffer,
            options: AllocationOptions::usage(MemoryUsage::Upload),
            ..AllocationDesc::default()
        })
        .unwrap();
    allocator.free(upload).unwrap();
    let resident = allocator.allocate(&texture(8 << 20)).unwrap();
    assert!(
        resident.is_host_visible(),
        "placed in the upload type's block"
    );
    let in_sibling = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(5));
    let mut handles = Vec::new();
    for worker in 0..4u64 {
        let (allocator, in_sibling, start) = (
            Arc::clone(&allocator),
            Arc::clone(&in_sibling),
            Arc::clone(&start),
        );
        handles.push(std::thread::spawn(move || {
            let mut rng = ChaCha8Rng::seed_from_u64(worker);
            let uploads = worker % 2 == 0;
            start.wait();
            let mut live: Vec<vkalloc::Allocation> = Vec::new();
            for round in 0..1500u32 {
                if uploads {
                    let size = rng.gen_range(1u64..=24) << 20;
                    let fill = (round % 251) as u8;
                    let mut staging = allocator
                        .allocate_mapped(&AllocationDesc {
                            size,
                            alignment: 256,
                            kind: ResourceKind::Buffer,
                            options: AllocationOptions::usage(MemoryUsage::Upload),
                            ..AllocationDesc::default()
                        })
                        .unwrap();
                    staging.write(0, &vec![fill; 4096]).unwrap();
                    staging.write(size - 4096, &vec![fill; 4096]).unwrap();
                    let mut back = [0u8; 4096];
                    staging.read(size - 4096, &mut back).unwrap();
                    assert!(back.iter().all(|&b| b == fill), "an upload was overwritten");
                    allocator.free(staging).unwrap();
                } else {
                    let size = rng.gen_range(1u64..=8) << 20;
                    let a = allocator.allocate(&texture(size)).unwrap();
                    if a.is_host_visible() {
                        in_sibling.fetch_add(1, Ordering::Relaxed);
                    }
                    live.push(a);
                    if live.len() > 24 {
                        let i = rng.gen_range(0..live.len());
                        allocator.free(live.swap_remove(i)).unwrap();
                    }
                }
            }
            for a in live {
                allocator.free(a).unwrap();
            }
        }));
    }
    let trimmer = {
        let (allocator, done) = (Arc::clone(&allocator), Arc::clone(&done));
        std::thread::spawn(move || {
            start.wait();
            while !done.load(Ordering::Relaxed) {
                allocator.begin_frame();
                allocator.trim();
                std::thread::yield_now();
            }
        })
    };
    for h in handles {
        h.join().unwrap();
    }
    done.store(true, Ordering::Relaxed);
    trimmer.join().unwrap();
    allocator.validate().unwrap();
    assert_eq!(allocator.statistics().total.allocation_count, 1);
    allocator.free(resident).unwrap();
    // How many of the threads' textures took upload-type room depends on
    // the interleaving; printed, not checked.
    println!(
        "textures in the upload type: {}",
        in_sibling.load(Ordering::Relaxed)
    );
    allocator.validate().unwrap();
    allocator.trim();
    drop(allocator);
    assert_eq!(sim.live_objects(), 0);
    assert_eq!(sim.violations(), 0, "{:?}", sim.violation_log());
}
