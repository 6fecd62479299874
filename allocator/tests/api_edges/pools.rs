//! Pools at their edges: destroyed while another thread allocates in them,
//! linear pools (ring wrap, stack misuse, kinds, margins), budgets and
//! counts at their extremes.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use vkalloc::range::LinearMode;
use vkalloc::sim::{tables, SimDevice};
use vkalloc::{
    AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, DedicatedPolicy, Error,
    MemoryUsage, PoolAlgorithm, PoolDesc, ResourceKind,
};

use super::{assert_clean_end, desc, MIB};

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
