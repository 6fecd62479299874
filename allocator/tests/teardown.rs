//! Tearing an allocator down on the simulated device, in the orders an
//! engine may: with leaked mappings (kept by `destroy` and drop, freed by
//! `destroy_all_memory`), with defragmentation sessions dropped or still
//! open, with a `FreeQueue` collected before or after.

use std::sync::Arc;

use vkalloc::sim::{tables, SimDevice};
use vkalloc::{
    AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, DefragAlgorithm, DefragDesc,
    FreeQueue, LinearMode, MemoryUsage, PoolAlgorithm, PoolDesc, ResourceKind,
};

fn buffer(size: u64, usage: MemoryUsage, tag: &str) -> AllocationDesc<'_> {
    AllocationDesc {
        size,
        kind: ResourceKind::Buffer,
        options: AllocationOptions::usage(usage).tagged(tag),
        ..AllocationDesc::default()
    }
}

/// Leaked mappings in default blocks, a TLSF pool and a linear ring, and a
/// leaked device-only allocation: `destroy` keeps the mapped blocks (the
/// device still holds them), `destroy_all_memory` frees every one and names
/// every leak.
#[test]
fn destroy_all_memory_frees_what_destroy_keeps() {
    for table in [
        tables::lavapipe(),
        tables::nvidia_h200(),
        tables::amd_discrete(),
    ] {
        for free_all in [false, true] {
            let sim = Arc::new(SimDevice::new(table.clone()));
            let allocator =
                Allocator::new(Arc::clone(&sim), AllocatorDesc::default()).expect("allocator");
            let tlsf = allocator
                .create_pool(&PoolDesc {
                    usage: MemoryUsage::Upload,
                    block_size: 1 << 20,
                    ..PoolDesc::new("uploads")
                })
                .expect("pool");
            let ring = allocator
                .create_pool(&PoolDesc {
                    usage: MemoryUsage::Upload,
                    block_size: 1 << 20,
                    min_blocks: 1,
                    max_blocks: 1,
                    algorithm: PoolAlgorithm::Linear(LinearMode::Ring),
                    ..PoolDesc::new("ring")
                })
                .expect("ring");
            let mut leaked = Vec::new();
            leaked.push(
                allocator
                    .allocate_mapped(&buffer(4096, MemoryUsage::Upload, "staging"))
                    .expect("mapped"),
            );
            for (pool, tag) in [(tlsf, "in pool"), (ring, "in ring")] {
                let desc = AllocationDesc {
                    options: AllocationOptions::usage(MemoryUsage::Upload)
                        .in_pool(pool)
                        .tagged(tag),
                    ..buffer(512, MemoryUsage::Upload, tag)
                };
                leaked.push(allocator.allocate_mapped(&desc).expect("mapped in pool"));
            }
            let device_only = allocator
                .allocate(&buffer(4096, MemoryUsage::GpuOnly, "mesh"))
                .expect("device-only");
            for m in &mut leaked {
                m.as_mut_slice().fill(7);
            }
            let report = if free_all {
                drop(leaked);
                // SAFETY: the mappings were dropped above; none is used again.
                unsafe { allocator.destroy_all_memory() }
            } else {
                let report = allocator.destroy();
                // The kept blocks are still ours: the mappings work.
                for m in &mut leaked {
                    m.as_mut_slice().fill(9);
                    assert!(m.as_slice().iter().all(|&b| b == 9));
                }
                drop(leaked);
                report
            };
            let mut tags: Vec<_> = report.leaks.iter().filter_map(|l| l.tag.clone()).collect();
            tags.sort();
            assert_eq!(tags, ["in pool", "in ring", "mesh", "staging"]);
            if free_all {
                assert_eq!(report.blocks_kept, 0);
                assert_eq!(sim.live_objects(), 0, "device memory left for the device");
            } else {
                assert!(report.blocks_kept >= 2, "{report}");
                assert_eq!(sim.live_objects(), report.blocks_kept as u64);
                assert!(report.to_string().contains("destroy_all_memory"));
            }
            assert_eq!(sim.violations(), 0, "{:?}", sim.violation_log());
            drop(device_only);
        }
    }
}

fn fragmented(allocator: &Allocator<Arc<SimDevice>>) -> Vec<vkalloc::Allocation> {
    let mut kept = Vec::new();
    for i in 0..128u64 {
        let size = (16 + (i * 37) % 96) << 10;
        let desc = AllocationDesc {
            alignment: 256,
            ..buffer(size, MemoryUsage::GpuOnly, "frag")
        };
        kept.push(allocator.allocate(&desc).expect("allocate"));
    }
    // Every third freed once all are placed: holes.
    let mut held = Vec::new();
    for (i, a) in kept.into_iter().enumerate() {
        if i % 3 == 0 {
            allocator.free(a).expect("free");
        } else {
            held.push(a);
        }
    }
    held
}

fn small_blocks(sim: &Arc<SimDevice>) -> Allocator<Arc<SimDevice>> {
    Allocator::new(
        Arc::clone(sim),
        AllocatorDesc::default().with_block_size(4 << 20),
    )
    .expect("allocator")
}

/// A session dropped mid-pass, then the allocator destroyed before any
/// frame: the teardown ends the pass first, so nothing of the session is
/// reported as leaked.
#[test]
fn teardown_ends_a_dropped_sessions_pass() {
    let sim = Arc::new(SimDevice::new(tables::lavapipe()));
    let allocator = small_blocks(&sim);
    let mut live = fragmented(&allocator);
    let mut defrag = allocator
        .begin_defragmentation(
            &DefragDesc::default()
                .with_algorithm(DefragAlgorithm::Full)
                .with_pass_limits(1 << 20, 16),
        )
        .expect("session");
    let moves = defrag.begin_pass(&allocator).expect("pass");
    assert!(!moves.is_empty());
    for (i, mv) in moves.into_iter().enumerate() {
        if i % 2 == 0 {
            let at = live.iter().position(|a| a.id() == mv.id()).expect("live");
            let old = live.swap_remove(at);
            live.push(defrag.commit(&allocator, mv, old).expect("commit"));
        }
    }
    drop(defrag);
    for a in live {
        allocator.free(a).expect("free");
    }
    let report = allocator.destroy();
    assert!(report.is_empty(), "{report}");
    assert_eq!(sim.live_objects(), 0);
    assert_eq!(sim.violations(), 0, "{:?}", sim.violation_log());
}

/// A session with a pass still open outlives its allocator: the teardown
/// names the pass's reserved destinations as leaks (it can't know the
/// session), and dropping the session afterwards touches nothing.
#[test]
fn a_session_outliving_its_allocator_is_harmless() {
    let sim = Arc::new(SimDevice::new(tables::lavapipe()));
    let allocator = small_blocks(&sim);
    let live = fragmented(&allocator);
    let mut defrag = allocator
        .begin_defragmentation(
            &DefragDesc::default()
                .with_algorithm(DefragAlgorithm::Full)
                .with_pass_limits(1 << 20, 16),
        )
        .expect("session");
    let moves = defrag.begin_pass(&allocator).expect("pass");
    let pending = moves.len();
    assert!(pending > 0);
    drop(moves);
    let held = live.len();
    let report = allocator.destroy();
    assert_eq!(report.leaks.len(), held + pending, "{report}");
    // Lavapipe's memory is host-visible: blocks holding leaks are kept.
    assert_eq!(sim.live_objects(), report.blocks_kept as u64);
    drop(defrag);
    drop(live);
    assert_eq!(sim.live_objects(), report.blocks_kept as u64);
    assert_eq!(sim.violations(), 0, "{:?}", sim.violation_log());
}

/// A `FreeQueue` collected before the teardown leaves nothing to report.
#[test]
fn a_free_queue_is_collected_before_teardown() {
    let sim = Arc::new(SimDevice::new(tables::nvidia_h200()));
    let allocator = Allocator::new(Arc::clone(&sim), AllocatorDesc::default()).expect("allocator");
    let queue = FreeQueue::new();
    for frame in 0..4 {
        let a = allocator
            .allocate(&buffer(64 << 10, MemoryUsage::GpuOnly, "frame data"))
            .expect("allocate");
        queue.free_after(a, frame);
    }
    let collected = queue.collect_all(&allocator);
    assert_eq!(collected.freed, 4);
    assert!(collected.failures.is_empty());
    let report = allocator.destroy();
    assert!(report.is_empty(), "{report}");
    assert_eq!(sim.live_objects(), 0);
}
