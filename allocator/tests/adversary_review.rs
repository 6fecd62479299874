//! Adversarial review of vkalloc's public API: probes that safe code (no
//! `unsafe` in the caller) can't cause undefined behaviour, panics,
//! overflows, leaks or lost allocations.
//!
//! Every test asserts the behaviour that is right; a failing test is a
//! defect. Written from outside (2026-12-03): the defects they found are
//! fixed (a pool destroyed under an allocation in flight, mappings that
//! died with a simulated device the allocator owned, a safe device trait,
//! unchecked sums, alias members sharing a granularity page, debug panics
//! of the public range allocators). Probes whose failure mode is a crash (a
//! use after free, a panic inside `Drop`) run their body in a child process
//! (`in_child`), so that the crash fails that one test instead of killing
//! the whole test binary.
//!
//! Two probes (`corruption_check_while_*`) pass at run time either way: the
//! defect they showed (`check_corruption` making a `&mut` over the bytes a
//! caller's slice held) is an aliasing violation that only Miri reports;
//! with the margins read alone, Miri (Stacked Borrows) is clean:
//!
//! ```text
//! cargo +nightly miri test -p vkalloc --test adversary_review -- corruption_check_while
//! ```

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use vkalloc::alias::AliasRequirement;
use vkalloc::device::{
    DeviceError, DeviceLimits, DeviceMemory, HeapBudget, MappedRange, MemoryAllocateInfo,
    MemoryDevice, MemoryProperties,
};
use vkalloc::range::{
    LinearAllocator, LinearMode, RangeAllocator, RangeError, RangeKind, RangeRequest, TlsfAllocator,
};
use vkalloc::sim::{tables, SimDevice};
use vkalloc::{
    AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, DedicatedPolicy, DefragAlgorithm,
    DefragDesc, Error, MemoryUsage, PassInterval, PoolAlgorithm, PoolDesc, ResourceKind,
};

const MIB: u64 = 1 << 20;

/// The end of a probe: nothing leaked, every memory object freed, no
/// misuse of the simulated device.
fn assert_clean_end(sim: &Arc<SimDevice>, allocator: Allocator<Arc<SimDevice>>) {
    let report = allocator.destroy();
    assert!(report.is_empty(), "{report}");
    assert_eq!(sim.live_objects(), 0);
    assert_eq!(sim.violations(), 0, "{:?}", sim.violation_log());
}

/// Runs `body` in a child process (this test binary, filtered to `test`),
/// and fails unless the child exits cleanly. Inside the child, runs `body`.
fn in_child(test: &str, body: impl FnOnce()) {
    const VAR: &str = "VKALLOC_ADVERSARY_CHILD";
    if std::env::var(VAR).as_deref() == Ok(test) {
        body();
        return;
    }
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(VAR, test)
        .output()
        .expect("spawn the child test");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{test}: the child died or failed: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
}

fn desc(size: u64, usage: MemoryUsage) -> AllocationDesc<'static> {
    AllocationDesc {
        size,
        alignment: 16,
        kind: ResourceKind::Buffer,
        options: AllocationOptions::usage(usage),
        ..AllocationDesc::default()
    }
}

// ---------------------------------------------------------------------------
// Mappings that outlive their allocator when the allocator owns its device.
// ---------------------------------------------------------------------------

/// `soundness.rs::a_leaked_mapping_outlives_the_allocator_safely` keeps an
/// `Arc<SimDevice>` alive outside the allocator. Here the allocator owns the
/// device (the crate's own quick-start does this): dropping the allocator
/// drops the device, and with it the host memory behind every "kept" mapped
/// block. A safe `write` through the leaked mapping then touches freed
/// memory.
#[test]
fn leaked_dedicated_mapping_survives_dropping_an_allocator_that_owns_its_device() {
    in_child(
        "leaked_dedicated_mapping_survives_dropping_an_allocator_that_owns_its_device",
        || {
            let allocator = Allocator::new(
                SimDevice::new(tables::nvidia_discrete()),
                AllocatorDesc::default(),
            )
            .unwrap();
            let mut d = desc(64 * MIB, MemoryUsage::Upload);
            d.options.dedicated = DedicatedPolicy::Always;
            let mut leaked = allocator.allocate_mapped(&d).unwrap();
            drop(allocator);
            // Safe code only: the block was "kept" for this mapping.
            leaked.write(0, &[0xAB; 4096]).unwrap();
            leaked.write(64 * MIB - 4096, &[0xCD; 4096]).unwrap();
            let mut out = [0u8; 16];
            leaked.read(0, &mut out).unwrap();
            assert_eq!(out, [0xAB; 16]);
            drop(leaked);
        },
    );
}

/// The same with a small allocation in a shared block, via `destroy`.
#[test]
fn leaked_shared_mapping_survives_destroying_an_allocator_that_owns_its_device() {
    in_child(
        "leaked_shared_mapping_survives_destroying_an_allocator_that_owns_its_device",
        || {
            let allocator = Allocator::new(
                SimDevice::new(tables::nvidia_discrete()),
                AllocatorDesc::default(),
            )
            .unwrap();
            let mut leaked = allocator
                .allocate_mapped(&desc(4096, MemoryUsage::Upload))
                .unwrap();
            let report = allocator.destroy();
            assert_eq!(report.blocks_kept, 1);
            for _ in 0..64 {
                // Churn the host heap so the freed backing gets reused.
                let v = vec![0x11u8; 8 * MIB as usize];
                std::hint::black_box(&v);
            }
            leaked.write(0, &[0x5A; 4096]).unwrap();
            let mut out = [0u8; 4096];
            leaked.read(0, &mut out).unwrap();
            assert_eq!(out, [0x5A; 4096]);
            drop(leaked);
        },
    );
}

// ---------------------------------------------------------------------------
// A device that grants any size and maps nothing (for the sums below).
// ---------------------------------------------------------------------------

/// A `MemoryDevice` that hands out handles of any size and never maps them.
/// `MemoryDevice` is an `unsafe trait` (a safe implementation could return a
/// dangling mapping, and the allocator builds safe slices over mappings):
/// this one keeps the contract only because the tests that use it never map.
#[derive(Debug)]
struct HugeDevice {
    props: MemoryProperties,
    limits: DeviceLimits,
    next: AtomicU64,
}

impl HugeDevice {
    fn with_table(table: vkalloc::sim::GpuTable) -> Self {
        Self {
            props: table.memory_properties,
            limits: table.limits,
            next: AtomicU64::new(0x1000),
        }
    }
}

// SAFETY: fixed properties and limits, a new handle per allocation; no test
// maps its memory (`map_memory` refuses).
unsafe impl MemoryDevice for HugeDevice {
    fn memory_properties(&self) -> &MemoryProperties {
        &self.props
    }
    fn limits(&self) -> &DeviceLimits {
        &self.limits
    }
    fn heap_budgets(&self, _out: &mut [HeapBudget]) -> bool {
        false
    }
    unsafe fn allocate_memory(
        &self,
        _info: &MemoryAllocateInfo,
    ) -> Result<DeviceMemory, DeviceError> {
        Ok(DeviceMemory(self.next.fetch_add(1, Ordering::Relaxed)))
    }
    unsafe fn free_memory(&self, _memory: DeviceMemory) {}
    unsafe fn map_memory(&self, _memory: DeviceMemory) -> Result<NonNull<u8>, DeviceError> {
        Err(DeviceError::MemoryMapFailed)
    }
    unsafe fn unmap_memory(&self, _memory: DeviceMemory) {}
    unsafe fn flush_ranges(&self, _ranges: &[MappedRange]) -> Result<(), DeviceError> {
        Ok(())
    }
    unsafe fn invalidate_ranges(&self, _ranges: &[MappedRange]) -> Result<(), DeviceError> {
        Ok(())
    }
    unsafe fn destroy_resource(&self, _resource: vkalloc::DedicatedResource) {}
    unsafe fn set_memory_priority(
        &self,
        _memory: DeviceMemory,
        _priority: vkalloc::MemoryPriority,
    ) {
    }
    unsafe fn set_memory_name(&self, _memory: DeviceMemory, _name: &str) {}
}

// ---------------------------------------------------------------------------
// Sums of huge sizes in statistics, leak reports and alias groups.
// ---------------------------------------------------------------------------

/// Two device-only allocations of 2^63 bytes each, in two types on two
/// heaps, on a device that grants any size (the simulated device
/// can't: its own byte counter saturates at 2^64 and then underflows on
/// free). Not reachable on real hardware; shows the allocator's own sums are
/// unchecked.
fn two_huge_allocations() -> (Allocator<HugeDevice>, Vec<vkalloc::Allocation>) {
    let device = HugeDevice::with_table(tables::nvidia_discrete());
    let allocator = Allocator::new(device, AllocatorDesc::default()).unwrap();
    let mut live = Vec::new();
    for bits in [1 << 1, 1 << 0] {
        let mut d = desc(1 << 63, MemoryUsage::GpuOnly);
        d.memory_type_bits = bits;
        d.options.dedicated = DedicatedPolicy::Always;
        live.push(
            allocator
                .allocate(&d)
                .unwrap_or_else(|e| panic!("type bits {bits}: {e:?}")),
        );
    }
    (allocator, live)
}

#[test]
fn statistics_of_huge_allocations_do_not_overflow() {
    in_child("statistics_of_huge_allocations_do_not_overflow", || {
        let (allocator, live) = two_huge_allocations();
        let stats = catch_unwind(AssertUnwindSafe(|| allocator.statistics()));
        assert!(stats.is_ok(), "statistics() panicked");
        let summary = catch_unwind(AssertUnwindSafe(|| allocator.summary()));
        assert!(summary.is_ok(), "summary() panicked");
        let json = catch_unwind(AssertUnwindSafe(|| allocator.to_json()));
        assert!(json.is_ok(), "to_json() panicked");
        for a in live {
            allocator.free(a).unwrap();
        }
    });
}

#[test]
fn leak_report_of_huge_leaks_does_not_overflow() {
    in_child("leak_report_of_huge_leaks_does_not_overflow", || {
        let (allocator, live) = two_huge_allocations();
        std::mem::forget(live);
        let report = allocator.destroy();
        assert_eq!(report.leaks.len(), 2);
        let text = catch_unwind(AssertUnwindSafe(|| (report.bytes(), report.to_string())));
        assert!(text.is_ok(), "LeakReport::bytes / Display panicked");
    });
}

/// Dropping (not destroying) an allocator with those leaks formats the
/// report inside `Drop` (eprintln in debug builds).
#[test]
fn dropping_an_allocator_with_huge_leaks_does_not_panic() {
    in_child(
        "dropping_an_allocator_with_huge_leaks_does_not_panic",
        || {
            let (allocator, live) = two_huge_allocations();
            std::mem::forget(live);
            let dropped = catch_unwind(AssertUnwindSafe(move || drop(allocator)));
            assert!(dropped.is_ok(), "Allocator::drop panicked");
        },
    );
}

/// Two members of 2^63 bytes with disjoint lifetimes share one 2^63-byte
/// allocation; their sizes sum past u64::MAX.
#[test]
fn alias_group_bytes_saved_does_not_overflow() {
    in_child("alias_group_bytes_saved_does_not_overflow", || {
        let sim = SimDevice::builder(tables::nvidia_discrete())
            .heap_capacity(0, u64::MAX)
            .heap_budget(0, u64::MAX)
            .build();
        let allocator = Allocator::new(sim, AllocatorDesc::default()).unwrap();
        let member = |first, last| AliasRequirement {
            size: 1 << 63,
            alignment: 256,
            memory_type_bits: 1 << 1,
            kind: ResourceKind::OptimalImage,
            lifetime: PassInterval::new(first, last),
            tag: "huge",
        };
        let group = allocator
            .allocate_alias_group(
                &[member(0, 1), member(2, 3)],
                AllocationOptions {
                    dedicated: DedicatedPolicy::Always,
                    ..AllocationOptions::usage(MemoryUsage::GpuOnly)
                },
            )
            .unwrap();
        assert_eq!(group.allocation().size(), 1 << 63);
        let saved = catch_unwind(AssertUnwindSafe(|| group.bytes_saved()));
        assert!(saved.is_ok(), "AliasGroup::bytes_saved panicked");
        let details = catch_unwind(AssertUnwindSafe(|| allocator.detailed_statistics()));
        assert!(details.is_ok(), "detailed_statistics panicked");
        allocator.free_alias_group(group).unwrap();
    });
}

/// `FreeQueue` sums the sizes it frees and holds unchecked.
#[test]
fn free_queue_byte_counts_do_not_overflow() {
    in_child("free_queue_byte_counts_do_not_overflow", || {
        let (allocator, live) = two_huge_allocations();
        let queue = vkalloc::FreeQueue::new();
        for a in live {
            queue.free_after(a, 1);
        }
        let pending = catch_unwind(AssertUnwindSafe(|| queue.pending_bytes()));
        assert!(pending.is_ok(), "FreeQueue::pending_bytes panicked");
        let collected = catch_unwind(AssertUnwindSafe(|| queue.collect(&allocator, 1)));
        assert!(collected.is_ok(), "FreeQueue::collect panicked");
        // A panic in the middle of `collect` drops the rest of the batch:
        // those allocations are lost, not freed.
        assert_eq!(allocator.statistics().total.allocation_count, 0);
    });
}

// ---------------------------------------------------------------------------
// Pools destroyed while another thread allocates in them.
// ---------------------------------------------------------------------------

/// `destroy_pool` checks the live count under the pool table's write lock,
/// but `allocate` (placement.rs `allocate_in_pool`) clones the pool's `Arc`
/// under the read lock and allocates after dropping it. An allocation that
/// starts before the destroy and finishes after it lands in the torn-down
/// vector: `Ok` from a pool that no longer exists, whose `free` then fails
/// with `UnknownPool`, and whose block (created after the teardown) is
/// never freed.
#[test]
fn an_allocation_racing_destroy_pool_is_refused_or_freeable() {
    use std::sync::atomic::AtomicBool;
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = Arc::new(Allocator::new(Arc::clone(&sim), AllocatorDesc::default()).unwrap());
    let mut orphans = 0u32;
    let (mut leaked_blocks, mut freed_under_live) = (0u32, 0u32);
    let mut rounds = 0u32;
    let start = std::time::Instant::now();
    // Before the pool's gate, the race showed within one or two rounds.
    while start.elapsed() < std::time::Duration::from_secs(3)
        && (leaked_blocks == 0 || freed_under_live == 0)
    {
        rounds += 1;
        let pool = allocator
            .create_pool(&PoolDesc {
                usage: MemoryUsage::GpuOnly,
                block_size: MIB,
                ..PoolDesc::new("racing")
            })
            .unwrap();
        let go = Arc::new(AtomicBool::new(false));
        let worker = {
            let (allocator, go) = (Arc::clone(&allocator), Arc::clone(&go));
            std::thread::spawn(move || {
                let mut d = desc(4096, MemoryUsage::GpuOnly);
                d.options.pool = Some(pool);
                let mut orphans = Vec::new();
                go.store(true, Ordering::Release);
                loop {
                    match allocator.allocate(&d) {
                        Ok(a) => {
                            let memory = a.memory();
                            if let Err(refused) = allocator.free(a) {
                                assert_eq!(refused.error(), &Error::UnknownPool(pool));
                                orphans.push(memory);
                                std::mem::forget(refused);
                            }
                        }
                        Err(Error::UnknownPool(_)) => return orphans,
                        Err(e) => panic!("{e:?}"),
                    }
                }
            })
        };
        while !go.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        loop {
            match allocator.destroy_pool(pool) {
                Ok(()) => break,
                Err(Error::PoolNotEmpty { .. }) => std::hint::spin_loop(),
                Err(e) => panic!("{e:?}"),
            }
        }
        // `destroy_pool` has returned: its teardown is over.
        for memory in worker.join().unwrap() {
            orphans += 1;
            if sim.memory_info(memory).is_some() {
                leaked_blocks += 1;
            } else {
                freed_under_live += 1;
            }
        }
    }
    let allocator = Arc::try_unwrap(allocator).unwrap();
    let report = allocator.destroy();
    assert_eq!(
        orphans,
        0,
        "after {rounds} rounds: {orphans} allocations were made in a destroyed pool \
         and could not be freed: {freed_under_live} in memory destroy_pool freed while \
         they were live, {leaked_blocks} in memory nobody will ever free \
         ({} device memory objects left alive after destroy)",
        sim.live_objects()
    );
    assert!(report.is_empty(), "{report}");
    assert_eq!(sim.live_objects(), 0, "device memory leaked");
}

// ---------------------------------------------------------------------------
// Defragmentation.
// ---------------------------------------------------------------------------

/// Holes in host-visible memory with margins: 64 allocations, every other
/// one freed. Returns the kept ones, mapped.
fn fragmented_mapped(allocator: &Allocator<Arc<SimDevice>>) -> Vec<vkalloc::MappedAllocation> {
    let mut kept = Vec::new();
    for i in 0..64u64 {
        let mut m = allocator
            .allocate_mapped(&desc(48 * 1024 + i * 64, MemoryUsage::Upload))
            .unwrap();
        if i % 2 == 0 {
            allocator.free(m).unwrap();
        } else {
            let tag = i as u8;
            m.as_mut_slice().fill(tag);
            kept.push(m);
        }
    }
    kept
}

fn margins_allocator() -> (Arc<SimDevice>, Allocator<Arc<SimDevice>>) {
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = Allocator::new(
        Arc::clone(&sim),
        AllocatorDesc::default().with_debug_margin(64),
    )
    .unwrap();
    (sim, allocator)
}

/// A session dropped with a pass open after a commit: the allocator ends
/// the pass the session gave up (at its next frame, trim, session, pass, or
/// `leaks()`), as `end_pass` would have: the old allocations handed over at
/// `commit` are freed, not lost and not leaked; the caller's own handles free
/// cleanly, and the allocator stays valid. (`defrag_sessions.rs` checks that
/// the next session plans as if the pass had ended.)
#[test]
fn dropping_a_session_after_commits_loses_no_allocation() {
    let (sim, allocator) = margins_allocator();
    // Half of 192 allocations of ~48 KiB kept: more than the first 4 MiB
    // block holds, so there is a sparse block to empty into another.
    let mut kept = Vec::new();
    for i in 0..192u64 {
        let m = allocator
            .allocate_mapped(&desc(48 * 1024 + i * 64, MemoryUsage::Upload))
            .unwrap();
        kept.push(m);
    }
    let kept: Vec<_> = kept
        .into_iter()
        .enumerate()
        .filter_map(|(i, m)| {
            if i % 2 == 0 {
                allocator.free(m).unwrap();
                None
            } else {
                Some(m)
            }
        })
        .collect();
    let mut live: Vec<vkalloc::Allocation> = kept.into_iter().map(Into::into).collect();
    let mut defrag = allocator
        .begin_defragmentation(&DefragDesc::default().with_algorithm(DefragAlgorithm::Full))
        .unwrap();
    let moves = defrag.begin_pass(&allocator).unwrap();
    assert!(!moves.is_empty());
    let committed = moves.len();
    for mv in moves {
        let i = live.iter().position(|a| a.id() == mv.id()).unwrap();
        let old = live.swap_remove(i);
        live.push(defrag.commit(&allocator, mv, old).unwrap());
    }
    drop(defrag); // a pass is open
    for a in live {
        allocator.free(a).unwrap();
    }
    allocator.validate().unwrap();
    // The handed-over sources were freed with the pass the drop gave up.
    assert!(committed > 0);
    let leaks = allocator.leaks();
    assert!(
        leaks.is_empty(),
        "nothing is kept for a dropped session: {leaks:?}"
    );
    assert_eq!(allocator.statistics().total.allocation_count, 0);
    drop(allocator);
    assert_eq!(sim.violations(), 0);
}

/// Two sessions with passes open at once on one allocator, ended out of
/// order, with mapped allocations and margins: no allocation is moved by
/// both, the moved mappings never overlap a live one, no margin breaks.
#[test]
fn two_interleaved_sessions_never_double_move() {
    let (sim, allocator) = margins_allocator();
    let kept = fragmented_mapped(&allocator);
    let mut live: Vec<vkalloc::MappedAllocation> = kept;
    let full = DefragDesc::default().with_algorithm(DefragAlgorithm::Full);
    let mut a = allocator.begin_defragmentation(&full).unwrap();
    let mut b = allocator
        .begin_defragmentation(&DefragDesc::default())
        .unwrap();
    for _round in 0..4 {
        let moves_a = a.begin_pass(&allocator).unwrap();
        let moves_b = b.begin_pass(&allocator).unwrap();
        let ids_a: Vec<_> = moves_a.iter().map(|m| m.id()).collect();
        for mv in &moves_b {
            assert!(
                !ids_a.contains(&mv.id()),
                "one allocation moved by two sessions"
            );
        }
        for (session, moves) in [(&mut b, moves_b), (&mut a, moves_a)] {
            for mv in moves {
                let i = live.iter().position(|x| x.id() == mv.id()).unwrap();
                let old = live.swap_remove(i);
                let mut m = session
                    .commit(&allocator, mv, old.into())
                    .unwrap()
                    .into_mapped()
                    .unwrap();
                // Copy the contents as a GPU would.
                let tag = m.id().0 as u8;
                m.as_mut_slice().fill(tag);
                live.push(m);
            }
        }
        a.end_pass(&allocator).unwrap();
        b.end_pass(&allocator).unwrap();
        allocator.validate().unwrap();
        assert_eq!(allocator.check_corruption(), 0);
    }
    a.end(&allocator).unwrap();
    b.end(&allocator).unwrap();
    let mut spans: Vec<(usize, usize)> = live
        .iter()
        .map(|m| (m.as_ptr() as usize, m.as_ptr() as usize + m.size() as usize))
        .collect();
    spans.sort();
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "live mappings overlap");
    }
    for x in live {
        allocator.free(x).unwrap();
    }
    assert_eq!(allocator.statistics().corruptions_detected, 0);
    assert_clean_end(&sim, allocator);
}

// ---------------------------------------------------------------------------
// Linear pools: ring wrap, stack misuse, kinds, margins.
// ---------------------------------------------------------------------------

/// Live mapped allocations must never overlap, and a linear and an optimal
/// resource must never share a `bufferImageGranularity` page of one memory.
fn check_disjoint(live: &[vkalloc::MappedAllocation], granularity: u64) {
    let mut spans: Vec<(u64, u64, u64, ResourceKind)> = live
        .iter()
        .map(|m| (m.memory().0, m.offset(), m.offset() + m.size(), m.kind()))
        .collect();
    spans.sort_by_key(|s| (s.0, s.1));
    for w in spans.windows(2) {
        let (a, b) = (w[0], w[1]);
        if a.0 != b.0 {
            continue;
        }
        assert!(a.2 <= b.1, "overlap: {a:?} {b:?}");
        if a.3.range_kind().conflicts_with(b.3.range_kind()) {
            assert!(
                (a.2 - 1) / granularity != b.1 / granularity,
                "linear and optimal share a granularity page: {a:?} {b:?}"
            );
        }
    }
    // Host addresses agree with the offsets.
    let mut ptrs: Vec<(usize, usize)> = live
        .iter()
        .map(|m| (m.as_ptr() as usize, m.as_ptr() as usize + m.size() as usize))
        .collect();
    ptrs.sort();
    for w in ptrs.windows(2) {
        assert!(w[0].1 <= w[1].0, "host mappings overlap");
    }
}

#[test]
fn ring_and_stack_pools_survive_random_misuse() {
    use rand::{Rng, SeedableRng};
    for (mode, margin) in [
        (LinearMode::Ring, 0),
        (LinearMode::Ring, 32),
        (LinearMode::Stack, 0),
        (LinearMode::Stack, 32),
    ] {
        let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
        let allocator = Allocator::new(
            Arc::clone(&sim),
            AllocatorDesc::default().with_debug_margin(margin),
        )
        .unwrap();
        let block = 256 * 1024 + 77; // not a multiple of anything
        let pool = allocator
            .create_pool(&PoolDesc {
                usage: MemoryUsage::Upload,
                block_size: block,
                min_blocks: 1,
                max_blocks: 1,
                algorithm: PoolAlgorithm::Linear(mode),
                budget: Some(block),
                ..PoolDesc::new("linear")
            })
            .unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut live: std::collections::VecDeque<vkalloc::MappedAllocation> = Default::default();
        let mut made = 0u32;
        for step in 0..20_000u32 {
            if rng.gen_bool(0.55) {
                let size = match rng.gen_range(0..10) {
                    0 => block,
                    1 => block - 1,
                    2 => 1,
                    _ => rng.gen_range(1..=block / 8),
                };
                let kind = [
                    ResourceKind::Buffer,
                    ResourceKind::OptimalImage,
                    ResourceKind::LinearImage,
                    ResourceKind::Unknown,
                ][rng.gen_range(0..4)];
                let alignment = [0, 1, 16, 256, 4096, 1 << 20][rng.gen_range(0..6)];
                let d = AllocationDesc {
                    size,
                    alignment,
                    kind,
                    options: AllocationOptions::usage(MemoryUsage::Upload).in_pool(pool),
                    ..AllocationDesc::default()
                };
                match allocator.allocate_mapped(&d) {
                    Ok(mut m) => {
                        made += 1;
                        assert_eq!(m.offset() % alignment.max(1), 0);
                        assert_eq!(m.size(), size);
                        m.as_mut_slice().fill(step as u8);
                        live.push_back(m);
                    }
                    Err(
                        Error::PoolExhausted { .. }
                        | Error::TooLarge { .. }
                        | Error::OutOfDeviceMemory { .. },
                    ) => {}
                    Err(e) => panic!("{mode:?} step {step}: {e:?}"),
                }
            } else if !live.is_empty() {
                // Mostly the order the mode likes, sometimes any.
                let i = match (mode, rng.gen_bool(0.8)) {
                    (LinearMode::Ring, true) => 0,
                    (LinearMode::Stack, true) => live.len() - 1,
                    _ => rng.gen_range(0..live.len()),
                };
                let m = live.remove(i).unwrap();
                allocator.free(m).unwrap();
            }
            if step % 97 == 0 {
                let v: Vec<_> = live.drain(..).collect();
                check_disjoint(&v, 1024);
                live.extend(v);
                allocator.validate().unwrap();
                assert_eq!(allocator.check_corruption(), 0, "{mode:?} step {step}");
            }
        }
        eprintln!("{mode:?} margin {margin}: {made} allocations made");
        assert!(made > 2000, "{mode:?}: only {made} allocations made");
        for m in live {
            allocator.free(m).unwrap();
        }
        assert_eq!(allocator.statistics().corruptions_detected, 0);
        allocator.destroy_pool(pool).unwrap();
        let report = allocator.destroy();
        assert!(report.is_empty(), "{report}");
        assert_eq!(sim.live_objects(), 0);
        assert_eq!(sim.violations(), 0, "{:?}", sim.violation_log());
    }
}

// ---------------------------------------------------------------------------
// Flush / invalidate ranges of dedicated, recycled and pooled memory.
// ---------------------------------------------------------------------------

/// The mobile table with its cached type made non-coherent (as in
/// `soundness.rs`).
fn non_coherent_table() -> vkalloc::sim::GpuTable {
    let json = tables::mobile_tiler().to_json().replace(
        "DEVICE_LOCAL|HOST_VISIBLE|HOST_COHERENT|HOST_CACHED",
        "DEVICE_LOCAL|HOST_VISIBLE|HOST_CACHED",
    );
    vkalloc::sim::GpuTable::from_json(&json).unwrap()
}

/// Every flush and invalidate range the allocator builds is inside its
/// memory, atom-aligned, or reaching the memory's end (the simulated device
/// records any other as a violation): dedicated memory of odd sizes, memory
/// recycled for a smaller allocation, a pool's dedicated allocations, and
/// ranges at every edge.
#[test]
fn flush_ranges_stay_inside_dedicated_and_recycled_memory() {
    let sim = Arc::new(SimDevice::new(non_coherent_table()));
    let allocator = Allocator::new(
        Arc::clone(&sim),
        AllocatorDesc::default().with_debug_margin(16),
    )
    .unwrap();
    let pool = allocator
        .create_pool(&PoolDesc {
            memory_type: Some(1),
            block_size: 1000, // not a multiple of the 64-byte atom
            max_blocks: 2,
            ..PoolDesc::new("odd")
        })
        .unwrap();
    let sizes = [1u64, 63, 65, 1000, 4097, 3 * MIB + 1, 9 * MIB - 3];
    let mut made = 0;
    for round in 0..3 {
        let mut live = Vec::new();
        for &size in &sizes {
            for (dedicated, pool) in [
                (DedicatedPolicy::Always, None),
                (DedicatedPolicy::Auto, None),
                (DedicatedPolicy::Never, None),
                (DedicatedPolicy::Auto, Some(pool)),
            ] {
                let mut d = desc(size, MemoryUsage::Readback);
                d.memory_type_bits = 1 << 1;
                d.options.dedicated = dedicated;
                d.options.pool = pool;
                let mut m = match allocator.allocate_mapped(&d) {
                    Ok(m) => m,
                    Err(e) => {
                        eprintln!("size {size} {dedicated:?} pool {}: {e:?}", pool.is_some());
                        continue;
                    }
                };
                made += 1;
                let len = m.size();
                m.write(len - 1, &[1]).unwrap();
                for (o, n) in [
                    (0, len),
                    (len - 1, 1),
                    (0, 1),
                    (len / 2, len - len / 2),
                    (len, 0),
                ] {
                    allocator.flush(&m, o, n).unwrap();
                    allocator.invalidate(&m, o, n).unwrap();
                }
                assert!(m.write(len, &[1]).is_err());
                assert!(allocator.flush(&m, len, 1).is_err());
                live.push(m);
            }
        }
        assert_eq!(
            sim.violations(),
            0,
            "round {round}: {:?}",
            sim.violation_log()
        );
        // Free in an order that feeds the recycle bin, then reuse it with
        // slightly smaller requests next round.
        for m in live {
            allocator.free(m).unwrap();
        }
        allocator.validate().unwrap();
    }
    assert!(made >= 60, "{made} allocations made");
    assert_eq!(allocator.statistics().corruptions_detected, 0);
    allocator.destroy_pool(pool).unwrap();
    assert_clean_end(&sim, allocator);
}

// ---------------------------------------------------------------------------
// Alias groups.
// ---------------------------------------------------------------------------

/// Members whose lifetimes overlap are live on the GPU at once; a buffer
/// and an optimal-tiling image among them must not share a
/// `bufferImageGranularity` page (1024 bytes on this table), which Vulkan
/// counts as aliasing. (`alias::pack` placed them by bytes only until
/// 2026-12-03.)
#[test]
fn alias_members_live_together_respect_buffer_image_granularity() {
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = Allocator::new(Arc::clone(&sim), AllocatorDesc::default()).unwrap();
    let granularity = sim.limits().buffer_image_granularity;
    assert_eq!(granularity, 1024);
    let members = [
        AliasRequirement {
            size: 4100,
            alignment: 256,
            memory_type_bits: u32::MAX,
            kind: ResourceKind::OptimalImage,
            lifetime: PassInterval::new(0, 2),
            tag: "image",
        },
        AliasRequirement {
            size: 100,
            alignment: 16,
            memory_type_bits: u32::MAX,
            kind: ResourceKind::Buffer,
            lifetime: PassInterval::new(1, 3),
            tag: "buffer",
        },
    ];
    let group = allocator
        .allocate_alias_group(&members, AllocationOptions::usage(MemoryUsage::GpuOnly))
        .unwrap();
    let placed = group.members();
    let base = group.allocation().offset();
    let (image, buffer) = (&placed[0], &placed[1]);
    assert!(image.lifetime.overlaps(&buffer.lifetime));
    let image_last_page = (base + image.offset + image.size - 1) / granularity;
    let buffer_first_page = (base + buffer.offset) / granularity;
    let overlap_bytes =
        image.offset < buffer.offset + buffer.size && buffer.offset < image.offset + image.size;
    assert!(!overlap_bytes);
    assert!(
        image_last_page < buffer_first_page,
        "image [{}, {}) and buffer [{}, {}) are live together on one {granularity}-byte page",
        image.offset,
        image.offset + image.size,
        buffer.offset,
        buffer.offset + buffer.size
    );
    allocator.free_alias_group(group).unwrap();
}

/// An alias group's allocation never moves (its members' resources are
/// bound into it): `set_movable(.., true)` is refused with a typed error,
/// and a full defragmentation pass over a block holding it and scattered
/// movable allocations plans no move of it. (Before 2026-12-03 the call
/// unpinned it and the planner, which looked only at the pin, could hand
/// out moves that `commit` then refused.)
#[test]
fn an_alias_group_is_never_made_movable() {
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = Allocator::new(Arc::clone(&sim), AllocatorDesc::default()).unwrap();
    let member = |first, last| AliasRequirement {
        size: 64 * 1024,
        alignment: 256,
        memory_type_bits: u32::MAX,
        kind: ResourceKind::OptimalImage,
        lifetime: PassInterval::new(first, last),
        tag: "pass target",
    };
    let mut scattered = Vec::new();
    for _ in 0..16 {
        scattered.push(
            allocator
                .allocate(&desc(64 * 1024, MemoryUsage::GpuOnly))
                .unwrap(),
        );
    }
    let group = allocator
        .allocate_alias_group(
            &[member(0, 1), member(2, 3)],
            AllocationOptions::usage(MemoryUsage::GpuOnly),
        )
        .unwrap();
    assert!(matches!(
        allocator.set_movable(group.allocation(), true),
        Err(Error::InvalidAlias(_))
    ));
    assert!(!allocator.is_movable(group.allocation()));
    allocator.set_movable(group.allocation(), false).unwrap();
    // Holes around it, then a full pass: everything else may move.
    let keep: Vec<_> = scattered
        .into_iter()
        .enumerate()
        .filter_map(|(i, a)| {
            if i % 2 == 0 {
                allocator.free(a).unwrap();
                None
            } else {
                Some(a)
            }
        })
        .collect();
    let mut defrag = allocator
        .begin_defragmentation(&DefragDesc::default().with_algorithm(DefragAlgorithm::Full))
        .unwrap();
    let moves = defrag.begin_pass(&allocator).unwrap();
    assert!(
        moves.iter().all(|m| m.id() != group.allocation().id()),
        "a move of the alias group's allocation was planned"
    );
    drop(moves);
    defrag.end_pass(&allocator).unwrap();
    defrag.end(&allocator).unwrap();
    for a in keep {
        allocator.free(a).unwrap();
    }
    allocator.free_alias_group(group).unwrap();
    assert_clean_end(&sim, allocator);
}

/// Odd alias inputs get typed errors, never a panic.
#[test]
fn alias_groups_refuse_bad_members_with_typed_errors() {
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = Allocator::new(Arc::clone(&sim), AllocatorDesc::default()).unwrap();
    let m = |size, alignment, first, last| AliasRequirement {
        size,
        alignment,
        memory_type_bits: u32::MAX,
        kind: ResourceKind::Buffer,
        lifetime: PassInterval::new(first, last),
        tag: "",
    };
    let options = AllocationOptions::usage(MemoryUsage::GpuOnly);
    let cases: Vec<Vec<AliasRequirement<'_>>> = vec![
        vec![m(u64::MAX, 1, 0, 0), m(1, 1, 0, 0)],
        vec![
            m(u64::MAX - 5, 1 << 63, 0, 1),
            m(u64::MAX - 5, 1 << 63, 1, 2),
        ],
        vec![
            m(1 << 63, 1 << 63, 0, u32::MAX),
            m(1 << 63, 1 << 63, u32::MAX, u32::MAX),
        ],
        vec![m(8, 3, 0, 0)],
        vec![m(8, 1 << 63, 0, 0), m(8, 1 << 63, 0, 0)],
    ];
    for members in cases {
        match allocator.allocate_alias_group(&members, options) {
            Ok(group) => {
                let placed = group.members();
                for (i, a) in placed.iter().enumerate() {
                    assert_eq!((group.allocation().offset() + a.offset) % a.alignment, 0);
                    assert!(a.offset + a.size <= group.allocation().size());
                    for b in &placed[i + 1..] {
                        if a.lifetime.overlaps(&b.lifetime) {
                            assert!(a.offset + a.size <= b.offset || b.offset + b.size <= a.offset);
                        }
                    }
                }
                allocator.free_alias_group(group).unwrap();
            }
            Err(
                Error::TooLarge { .. }
                | Error::InvalidAlignment(_)
                | Error::OutOfDeviceMemory { .. }
                | Error::NoCompatibleMemoryType { .. },
            ) => {}
            Err(e) => panic!("{members:?}: {e:?}"),
        }
    }
    allocator.validate().unwrap();
    let report = allocator.destroy();
    assert!(report.is_empty(), "{report}");
    assert_eq!(sim.live_objects(), 0);
}

// ---------------------------------------------------------------------------
// Corruption checks while the caller holds slices (run under Miri).
// ---------------------------------------------------------------------------

/// A small allocator with margins and one live mapped allocation in a
/// 4 KiB pool block (small enough for Miri).
fn margin_pool_allocation() -> (
    Allocator<SimDevice>,
    vkalloc::PoolId,
    vkalloc::MappedAllocation,
) {
    let allocator = Allocator::new(
        SimDevice::new(tables::lavapipe()),
        AllocatorDesc::default().with_debug_margin(16),
    )
    .unwrap();
    let pool = allocator
        .create_pool(&PoolDesc {
            usage: MemoryUsage::Upload,
            block_size: 4096,
            max_blocks: 1,
            ..PoolDesc::new("small")
        })
        .unwrap();
    let mut d = desc(64, MemoryUsage::Upload);
    d.options.pool = Some(pool);
    let m = allocator.allocate_mapped(&d).unwrap();
    (allocator, pool, m)
}

/// `check_corruption` builds a `&mut [u8]` over each live allocation's
/// whole range (corruption.rs `range_bytes`), including the bytes the caller
/// may be borrowing through `as_mut_slice`: two live `&mut` to the same
/// bytes. Nothing observable at run time; Miri (`cargo +nightly miri test -p
/// vkalloc --test adversary_review -- corruption_check_while`) reports the
/// aliasing violation when the caller's slice is used after the check.
#[test]
fn corruption_check_while_a_mutable_slice_is_live() {
    let (allocator, pool, mut m) = margin_pool_allocation();
    let bytes = m.as_mut_slice();
    bytes[0] = 1;
    assert_eq!(allocator.check_corruption(), 0);
    bytes[1] = 2; // the caller's `&mut` is still live
    assert_eq!(m.as_slice()[..2], [1, 2]);
    allocator.free(m).unwrap();
    allocator.destroy_pool(pool).unwrap();
}

/// The same with a shared slice: the check's `&mut` invalidates it.
#[test]
fn corruption_check_while_a_shared_slice_is_live() {
    let (allocator, pool, mut m) = margin_pool_allocation();
    m.write(0, &[7]).unwrap();
    let bytes = m.as_slice();
    assert_eq!(allocator.check_corruption(), 0);
    assert_eq!(bytes[0], 7);
    allocator.free(m).unwrap();
    allocator.destroy_pool(pool).unwrap();
}

// ---------------------------------------------------------------------------
// Edge values of pools and defragmentation descriptions.
// ---------------------------------------------------------------------------

#[test]
fn pool_budgets_and_counts_at_their_extremes_get_typed_errors() {
    let sim = Arc::new(
        SimDevice::builder(tables::nvidia_discrete())
            .max_memory_allocation_count(64)
            .build(),
    );
    let allocator = Allocator::new(Arc::clone(&sim), AllocatorDesc::default()).unwrap();
    let base = PoolDesc {
        usage: MemoryUsage::Upload,
        block_size: 64 * 1024,
        ..PoolDesc::new("edge")
    };
    let variants = [
        PoolDesc {
            budget: Some(0),
            ..base.clone()
        },
        PoolDesc {
            budget: Some(1),
            ..base.clone()
        },
        PoolDesc {
            budget: Some(u64::MAX),
            ..base.clone()
        },
        PoolDesc {
            budget: Some(0),
            min_blocks: 1,
            ..base.clone()
        },
        PoolDesc {
            min_blocks: u32::MAX,
            max_blocks: u32::MAX,
            ..base.clone()
        },
        PoolDesc {
            max_blocks: 0,
            ..base.clone()
        },
        PoolDesc {
            block_size: 1,
            max_blocks: 3,
            ..base.clone()
        },
        PoolDesc {
            block_size: u64::MAX,
            ..base.clone()
        },
        PoolDesc {
            memory_type: Some(u32::MAX),
            ..base.clone()
        },
        PoolDesc {
            memory_type_bits: 0,
            ..base.clone()
        },
        PoolDesc {
            block_size: 1,
            algorithm: PoolAlgorithm::Linear(LinearMode::Ring),
            ..base.clone()
        },
        PoolDesc {
            block_size: u64::MAX,
            algorithm: PoolAlgorithm::Linear(LinearMode::Stack),
            ..base.clone()
        },
    ];
    for (i, pool_desc) in variants.iter().enumerate() {
        let pool = match allocator.create_pool(pool_desc) {
            Ok(pool) => pool,
            Err(
                Error::InvalidPool(_)
                | Error::TooManyAllocations { .. }
                | Error::NoCompatibleMemoryType { .. }
                | Error::PoolExhausted { .. },
            ) => {
                assert_eq!(sim.live_objects(), 0, "variant {i}");
                continue;
            }
            Err(e) => panic!("variant {i}: {e:?}"),
        };
        let mut live = Vec::new();
        for size in [1, 2, 4096, 64 * 1024, 64 * 1024 + 1, 1 << 40, u64::MAX] {
            for dedicated in [
                DedicatedPolicy::Auto,
                DedicatedPolicy::Always,
                DedicatedPolicy::Never,
            ] {
                let mut d = desc(size, MemoryUsage::Upload);
                d.options.pool = Some(pool);
                d.options.dedicated = dedicated;
                match allocator.allocate_mapped(&d) {
                    Ok(mut m) => {
                        let n = m.size();
                        m.write(n - 1, &[1]).unwrap();
                        live.push(m);
                    }
                    Err(
                        Error::PoolExhausted { .. }
                        | Error::TooLarge { .. }
                        | Error::OutOfDeviceMemory { .. }
                        | Error::OutOfHostMemory
                        | Error::MapFailed
                        | Error::TooManyAllocations { .. },
                    ) => {}
                    Err(e) => panic!("variant {i} size {size} {dedicated:?}: {e:?}"),
                }
            }
        }
        if let Some(budget) = pool_desc.budget {
            let used = allocator.pool_pressure(pool).unwrap().pool_committed_bytes;
            assert!(
                used <= budget,
                "variant {i}: {used} committed over a budget of {budget}"
            );
        }
        for m in live {
            allocator.free(m).unwrap();
        }
        allocator.validate().unwrap();
        allocator.destroy_pool(pool).unwrap();
    }
    assert_clean_end(&sim, allocator);
}

#[test]
fn defrag_descriptions_at_their_extremes_do_not_panic() {
    let sim = Arc::new(SimDevice::new(tables::amd_discrete()));
    let allocator = Allocator::new(
        Arc::clone(&sim),
        AllocatorDesc::default().with_block_size(4 * MIB),
    )
    .unwrap();
    let mut live = Vec::new();
    for i in 0..200u64 {
        let a = allocator
            .allocate(&desc(4096 + (i % 7) * 1000, MemoryUsage::GpuOnly))
            .unwrap();
        if i % 3 == 0 {
            allocator.free(a).unwrap();
        } else {
            live.push(a);
        }
    }
    let algorithms = [
        DefragAlgorithm::Fast,
        DefragAlgorithm::Full,
        DefragAlgorithm::Room {
            bytes: 0,
            alignment: 0,
        },
        DefragAlgorithm::Room {
            bytes: u64::MAX,
            alignment: u64::MAX,
        },
        DefragAlgorithm::Room {
            bytes: 3 * 4096,
            alignment: 3,
        },
        DefragAlgorithm::Room {
            bytes: 64 * 1024,
            alignment: 1 << 63,
        },
        DefragAlgorithm::Room {
            bytes: 64 * 1024,
            alignment: u64::MAX,
        },
        DefragAlgorithm::Room {
            bytes: 4 * MIB,
            alignment: 4096,
        },
        DefragAlgorithm::Room {
            bytes: 4 * MIB + 1,
            alignment: 1,
        },
    ];
    for algorithm in algorithms {
        for (bytes, count, types) in [
            (0, 0, u32::MAX),
            (u64::MAX, u32::MAX, u32::MAX),
            (1, 1, 0),
            (8192, 3, 1 << 31),
        ] {
            let desc = DefragDesc::default()
                .with_algorithm(algorithm)
                .with_pass_limits(bytes, count)
                .with_memory_types(types);
            let result = catch_unwind(AssertUnwindSafe(|| {
                let mut defrag = allocator.begin_defragmentation(&desc).unwrap();
                for _ in 0..3 {
                    for mv in defrag.begin_pass(&allocator).unwrap() {
                        if let Some(i) = live.iter().position(|a| a.id() == mv.id()) {
                            let old = live.swap_remove(i);
                            live.push(defrag.commit(&allocator, mv, old).unwrap());
                        }
                    }
                    defrag.end_pass(&allocator).unwrap();
                }
                defrag.end(&allocator).unwrap();
            }));
            assert!(
                result.is_ok(),
                "{algorithm:?} limits ({bytes}, {count}, {types:#x}) panicked"
            );
            allocator.validate().unwrap();
        }
    }
    for a in live {
        allocator.free(a).unwrap();
    }
    let report = allocator.destroy();
    assert!(report.is_empty(), "{report}");
    assert_eq!(sim.live_objects(), 0);
}

// ---------------------------------------------------------------------------
// The public range allocators with odd inputs.
// ---------------------------------------------------------------------------

/// `vkalloc::range` is public and safe. Odd requests (size 0, alignments that
/// are not powers of two, sizes and capacities near u64::MAX) must give
/// `None` or a valid range, never a panic; what each one panics with is
/// collected and reported at once.
#[test]
fn public_range_allocators_do_not_panic_on_odd_requests() {
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut panics = Vec::new();
    let capacities = [0u64, 1, 4096, u64::MAX];
    let requests = [
        (0u64, 1u64),
        (1, 0),
        (1, 3),
        (16, 48),
        (1, u64::MAX),
        (u64::MAX, 1),
        (u64::MAX, 1 << 63),
        ((1 << 63) + 1, 1),
    ];
    type Make = fn(u64) -> Box<dyn RangeAllocator>;
    let makers: [(&str, Make); 4] = [
        ("tlsf", |c| Box::new(TlsfAllocator::new(c, 1024))),
        ("ring", |c| {
            Box::new(LinearAllocator::new(c, LinearMode::Ring, 1024))
        }),
        ("stack", |c| {
            Box::new(LinearAllocator::new(c, LinearMode::Stack, 1024))
        }),
        ("buddy", |c| {
            Box::new(vkalloc::range::BuddyAllocator::new(c, 256))
        }),
    ];
    for (name, make) in makers {
        for capacity in capacities {
            for (size, alignment) in requests {
                for kind in [RangeKind::Linear, RangeKind::Optimal] {
                    let r = catch_unwind(AssertUnwindSafe(|| {
                        let mut a = make(capacity);
                        // A neighbour of the other kind first.
                        let _ = a.allocate(&RangeRequest {
                            size: 100,
                            alignment: 1,
                            kind: RangeKind::Unknown,
                        });
                        let req = RangeRequest {
                            size,
                            alignment,
                            kind,
                        };
                        if let Some(range) = a.allocate(&req) {
                            assert!(range
                                .offset
                                .checked_add(range.size)
                                .is_some_and(|e| e <= capacity));
                            assert!(range.size >= size);
                            a.free(range.id).unwrap();
                        }
                        a.validate().unwrap();
                    }));
                    if let Err(p) = r {
                        let msg = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        panics.push(format!(
                            "{name} capacity {capacity} size {size} alignment {alignment}: {msg}"
                        ));
                    }
                }
            }
        }
        // Odd granularities at construction.
        for granularity in [3u64, u64::MAX] {
            let r = catch_unwind(AssertUnwindSafe(|| {
                let mut a = make_with_granularity(name, granularity);
                let _ = a.allocate(&RangeRequest {
                    size: 10,
                    alignment: 1,
                    kind: RangeKind::Linear,
                });
                let _ = a.allocate(&RangeRequest {
                    size: 10,
                    alignment: 1,
                    kind: RangeKind::Optimal,
                });
                a.validate().unwrap();
            }));
            if r.is_err() {
                panics.push(format!("{name} granularity {granularity}: panicked"));
            }
        }
    }
    std::panic::set_hook(quiet);
    panics.dedup();
    assert!(
        panics.is_empty(),
        "{} panics:\n{}",
        panics.len(),
        panics.join("\n")
    );
}

fn make_with_granularity(name: &str, granularity: u64) -> Box<dyn RangeAllocator> {
    match name {
        "tlsf" => Box::new(TlsfAllocator::new(1 << 20, granularity)),
        "ring" => Box::new(LinearAllocator::new(1 << 20, LinearMode::Ring, granularity)),
        "stack" => Box::new(LinearAllocator::new(
            1 << 20,
            LinearMode::Stack,
            granularity,
        )),
        _ => Box::new(vkalloc::range::BuddyAllocator::new(1 << 20, granularity)),
    }
}

/// The public range allocators' ids carry an 8-bit generation: a stale id
/// whose slot was reused 256 times frees the live range now in that slot
/// (documented for TLSF as a limit; here is what it costs a caller of the
/// public API: a live range freed by someone else's stale handle).
/// A known limit, not fixed: `RangeId` packs a slot and an 8-bit generation
/// into 32 bits; widening it changes every range allocator's id layout. Not
/// reachable through `Allocator`, whose `Allocation` carries its own id.
#[test]
#[ignore = "known limit of the public range allocators (8-bit id generation), documented; run with --ignored"]
fn a_stale_range_id_never_frees_another_live_range() {
    let mut tlsf = TlsfAllocator::new(1 << 20, 1);
    let req = RangeRequest {
        size: 64,
        alignment: 1,
        kind: RangeKind::Linear,
    };
    let stale = tlsf.allocate(&req).unwrap();
    tlsf.free(stale.id).unwrap();
    let mut current = None;
    for _ in 0..4096 {
        let r = tlsf.allocate(&req).unwrap();
        if r.id == stale.id {
            current = Some(r);
            break;
        }
        tlsf.free(r.id).unwrap();
    }
    let Some(current) = current else {
        return; // the slot was never reused with the same id: fine
    };
    // `current` is live; `stale` was freed long ago.
    let refused = tlsf.free(stale.id);
    assert!(
        matches!(refused, Err(RangeError::UnknownId(_))) && tlsf.allocation_count() == 1,
        "a stale id freed the live range {current:?}"
    );
}
