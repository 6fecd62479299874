//! Pool budgets in bytes: usable to the byte (the last block takes what is
//! left of the budget), and `PoolPressure::headroom()` allocatable: a
//! request of up to `headroom()` bytes succeeds whatever the pool holds.
//! Budgets near zero and near `u64::MAX`.

use proptest::prelude::*;
use vkalloc::sim::{tables, SimDevice};
use vkalloc::{
    Allocation, AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, Error, MemoryUsage,
    PoolAlgorithm, PoolDesc, PoolId, ResourceKind,
};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

fn allocator() -> Allocator<SimDevice> {
    Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default()).expect("allocator")
}

fn texture(pool: PoolId, size: u64) -> AllocationDesc<'static> {
    AllocationDesc {
        size,
        alignment: 256,
        kind: ResourceKind::OptimalImage,
        options: AllocationOptions::usage(MemoryUsage::GpuOnly).in_pool(pool),
        ..AllocationDesc::default()
    }
}

fn pool(a: &Allocator<SimDevice>, block_size: u64, budget: Option<u64>) -> PoolId {
    a.create_pool(&PoolDesc {
        usage: MemoryUsage::GpuOnly,
        block_size,
        budget,
        ..PoolDesc::new("textures")
    })
    .expect("pool")
}

/// The report from outside: 24 MiB with 16 MiB blocks gave 16 MiB, and a
/// 5.3 MiB texture failed with 8 MiB of headroom.
#[test]
fn a_budget_is_usable_to_the_byte() {
    let a = allocator();
    let p = pool(&a, 16 * MIB, Some(24 * MIB));
    let tex = 5 * MIB + 300 * KIB;
    // Three fill the first block (15.9 MiB of 16).
    let mut held: Vec<Allocation> = (0..3)
        .map(|_| a.allocate(&texture(p, tex)).expect("texture"))
        .collect();
    let pressure = a.pool_pressure(p).expect("pressure");
    assert_eq!(pressure.pool_committed_bytes, 16 * MIB);
    assert_eq!(pressure.headroom(), 8 * MIB);
    let fourth = a
        .allocate(&texture(p, tex))
        .expect("a texture within the headroom fits");
    held.push(fourth);
    let pressure = a.pool_pressure(p).expect("pressure");
    assert_eq!(
        pressure.pool_committed_bytes,
        24 * MIB,
        "the last block is what was left"
    );
    assert_eq!(pressure.headroom(), 0);
    // The budget is spent: the next one is refused, nothing half-done.
    let refused = a.allocate(&texture(p, tex));
    assert!(
        matches!(refused, Err(Error::PoolExhausted { .. })),
        "{refused:?}"
    );
    for x in held {
        a.free(x).expect("free");
    }
    a.validate().expect("valid");
    a.destroy_pool(p).expect("destroy");
}

/// A budget below one block: the pool's only block is the budget.
#[test]
fn a_budget_below_a_block_is_one_smaller_block() {
    let a = allocator();
    let p = pool(&a, 64 * MIB, Some(10 * MIB + 12345));
    let x = a.allocate(&texture(p, 3 * MIB)).expect("fits");
    let y = a.allocate(&texture(p, 7 * MIB)).expect("fits");
    let pressure = a.pool_pressure(p).expect("pressure");
    assert!(pressure.pool_committed_bytes <= 10 * MIB + 12345);
    a.free(x).expect("free");
    a.free(y).expect("free");
    a.validate().expect("valid");
}

/// Zero and `u64::MAX`: a zero budget holds nothing and says so; the
/// largest budget behaves as none.
#[test]
fn budgets_at_the_extremes() {
    let a = allocator();
    let empty = pool(&a, 16 * MIB, Some(0));
    assert_eq!(a.pool_pressure(empty).expect("pressure").headroom(), 0);
    let refused = a.allocate(&texture(empty, 1));
    assert!(
        matches!(refused, Err(Error::PoolExhausted { .. })),
        "{refused:?}"
    );
    let huge = pool(&a, 16 * MIB, Some(u64::MAX));
    let x = a.allocate(&texture(huge, 20 * MIB)).expect("fits");
    let pressure = a.pool_pressure(huge).expect("pressure");
    assert_eq!(
        pressure.headroom(),
        pressure.heap_budget - pressure.heap_usage
    );
    a.free(x).expect("free");
    a.validate().expect("valid");
}

/// A pool at `max_blocks` can't make a block: its headroom is zero.
#[test]
fn headroom_counts_max_blocks() {
    let a = allocator();
    let p = a
        .create_pool(&PoolDesc {
            usage: MemoryUsage::GpuOnly,
            block_size: 16 * MIB,
            max_blocks: 1,
            budget: Some(64 * MIB),
            ..PoolDesc::new("one block")
        })
        .expect("pool");
    let x = a.allocate(&texture(p, 6 * MIB)).expect("fits");
    let y = a.allocate(&texture(p, 6 * MIB)).expect("fits");
    let pressure = a.pool_pressure(p).expect("pressure");
    assert_eq!(pressure.headroom(), 0, "no block can be made");
    a.free(x).expect("free");
    a.free(y).expect("free");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Whatever the pool holds, a request of up to `headroom()` bytes
    /// succeeds (default options: no debug margins, coherent memory).
    #[test]
    fn headroom_is_allocatable(
        block_kib in 64u64..(64 << 10),
        budget_kib in 0u64..(256 << 10),
        algorithm in 0u8..2,
        held in proptest::collection::vec((1u64..(32 << 10), 0u32..12), 0..12),
        freed in proptest::collection::vec(any::<bool>(), 12),
        fraction in 1u64..=1024,
        alignment_log2 in 0u32..17,
    ) {
        let a = allocator();
        let p = a
            .create_pool(&PoolDesc {
                usage: MemoryUsage::GpuOnly,
                block_size: block_kib * KIB,
                budget: Some(budget_kib * KIB),
                algorithm: if algorithm == 0 {
                    PoolAlgorithm::Tlsf
                } else {
                    PoolAlgorithm::Linear(vkalloc::LinearMode::Stack)
                },
                ..PoolDesc::new("prop")
            })
            .expect("pool");
        // Some allocations, some of them freed again: any state the pool
        // may be in.
        let mut live = Vec::new();
        for (i, &(kib, align)) in held.iter().enumerate() {
            let desc = AllocationDesc { alignment: 1 << align, ..texture(p, kib * KIB) };
            if let Ok(x) = a.allocate(&desc) {
                if freed[i] && algorithm == 0 {
                    a.free(x).expect("free");
                } else {
                    live.push(x);
                }
            }
        }
        let pressure = a.pool_pressure(p).expect("pressure");
        let headroom = pressure.headroom();
        prop_assume!(headroom > 0);
        let size = (headroom / 1024 * fraction).clamp(1, headroom);
        let desc = AllocationDesc { alignment: 1 << alignment_log2, ..texture(p, size) };
        let got = a.allocate(&desc);
        prop_assert!(
            got.is_ok(),
            "{size} bytes (alignment {}) refused with {headroom} of headroom: {got:?} ({pressure:?})",
            1u64 << alignment_log2
        );
        live.push(got.unwrap());
        let after = a.pool_pressure(p).expect("pressure");
        prop_assert!(after.pool_committed_bytes <= budget_kib * KIB, "over budget");
        for x in live {
            a.free(x).expect("free");
        }
        a.validate().expect("valid");
    }
}

/// An empty block the pool keeps counts against its budget: a request that
/// needs the budget (memory of its own, more than half a block) must not be
/// refused while an empty kept block could give it back.
#[test]
fn empty_kept_blocks_give_their_budget_back() {
    let a = allocator();
    let p = pool(&a, 16 * MIB, Some(32 * MIB));
    let mut first: Vec<Allocation> = (0..3)
        .map(|_| a.allocate(&texture(p, 5 * MIB)).expect("fits"))
        .collect();
    let second_block = a.allocate(&texture(p, 5 * MIB)).expect("a second block");
    a.free(second_block).expect("free");
    for x in first.drain(..2) {
        a.free(x).expect("free");
    }
    // 5 MiB live; 32 MiB committed (the second block kept empty).
    let pressure = a.pool_pressure(p).expect("pressure");
    assert_eq!(pressure.pool_allocated_bytes, 5 * MIB);
    let big = a
        .allocate(&texture(p, 12 * MIB))
        .expect("the kept empty block gives its budget back");
    assert!(a.pool_pressure(p).expect("pressure").pool_committed_bytes <= 32 * MIB);
    a.free(big).expect("free");
    for x in first {
        a.free(x).expect("free");
    }
    a.validate().expect("valid");
}

/// A linear ring whose budget is less than its block: one smaller block, a
/// ring over it, frames after frames; refusals are `PoolExhausted`.
#[test]
fn a_ring_under_a_budget_smaller_than_its_block() {
    let a = allocator();
    let ring = a
        .create_pool(&PoolDesc {
            usage: MemoryUsage::Upload,
            block_size: MIB,
            budget: Some(600 * KIB),
            algorithm: PoolAlgorithm::Linear(vkalloc::LinearMode::Ring),
            ..PoolDesc::new("ring")
        })
        .expect("ring");
    let desc = AllocationDesc {
        size: 128 * KIB,
        options: AllocationOptions::usage(MemoryUsage::Upload).in_pool(ring),
        ..AllocationDesc::default()
    };
    let mut live = std::collections::VecDeque::new();
    for frame in 0..32 {
        let m = a.allocate_mapped(&desc).expect("the ring has room");
        live.push_back(m);
        if live.len() == 4 {
            a.free(live.pop_front().expect("oldest"))
                .expect("free in order");
        }
        assert!(
            a.pool_pressure(ring)
                .expect("pressure")
                .pool_committed_bytes
                <= 600 * KIB,
            "frame {frame}"
        );
    }
    let mut extra = Vec::new();
    let refused = loop {
        match a.allocate_mapped(&desc) {
            Ok(m) => extra.push(m),
            Err(e) => break e,
        }
        assert!(extra.len() < 8, "the budget never refused");
    };
    assert!(
        matches!(refused, Error::PoolExhausted { .. }),
        "{refused:?}"
    );
    for m in extra {
        live.push_back(m);
    }
    while let Some(m) = live.pop_front() {
        a.free(m).expect("free in order");
    }
    a.validate().expect("valid");
}
