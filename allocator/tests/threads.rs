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
