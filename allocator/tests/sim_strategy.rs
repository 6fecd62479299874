//! Strategies and kept memory on the simulated device: memory comes back
//! without frames (as the frees return under pressure, or at the first call
//! once the strategy's idle time has passed on the device's clock), and
//! each strategy keeps what it says.

use std::sync::Arc;

use vkalloc::sim::{tables, SimDevice};
use vkalloc::{
    Allocation, AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, MemoryUsage,
    ResourceKind, Strategy,
};

const MIB: u64 = 1 << 20;

fn buffer(size: u64) -> AllocationDesc<'static> {
    AllocationDesc {
        size,
        alignment: 256,
        kind: ResourceKind::Buffer,
        options: AllocationOptions::usage(MemoryUsage::GpuOnly),
        ..AllocationDesc::default()
    }
}

fn h200(strategy: Strategy) -> (Arc<SimDevice>, Allocator<Arc<SimDevice>>) {
    let sim = Arc::new(SimDevice::new(tables::nvidia_h200()));
    let allocator =
        Allocator::new(Arc::clone(&sim), AllocatorDesc::for_strategy(strategy)).expect("allocator");
    (sim, allocator)
}

/// Per memory type: (blocks, bytes) of device memory the allocator holds.
fn blocks_per_type(allocator: &Allocator<Arc<SimDevice>>) -> Vec<(u32, u64)> {
    allocator
        .statistics()
        .types
        .iter()
        .map(|t| (t.usage.block_count, t.usage.block_bytes))
        .collect()
}

/// At most one empty block in every memory type, nothing live.
fn at_most_one_block_per_type(allocator: &Allocator<Arc<SimDevice>>) -> bool {
    let stats = allocator.statistics();
    stats.total.allocation_count == 0 && stats.types.iter().all(|t| t.usage.block_count <= 1)
}

fn allocate_n(allocator: &Allocator<Arc<SimDevice>>, size: u64, n: u64) -> Vec<Allocation> {
    (0..n)
        .map(|_| allocator.allocate(&buffer(size)).expect("allocation"))
        .collect()
}

fn free_all(allocator: &Allocator<Arc<SimDevice>>, live: Vec<Allocation>) {
    for a in live {
        allocator.free(a).expect("free");
    }
}

/// The case: the simulated H200 filled to out of memory, then
/// everything freed, with no frame and no trim. Before strategies, 146
/// empty 256 MiB blocks (about 35 GiB) stayed in the device-local type
/// until `trim()`. Balanced frees empty blocks as they return while the
/// heap is above 7/8 of its budget, keeps the rest for a churn below it,
/// and gives that back at the first call once a second has passed.
#[test]
fn a_full_heap_gives_its_memory_back_without_frames() {
    let (sim, allocator) = h200(Strategy::Balanced);
    let mut live = Vec::new();
    while let Ok(a) = allocator.allocate(&buffer(64 * MIB)) {
        live.push(a);
    }
    assert!(live.len() > 1000, "{} allocations", live.len());
    let peak = sim.stats().heaps[0].peak_bytes;
    free_all(&allocator, live);
    // Under pressure the frees gave memory back as they returned.
    assert!(sim.stats().heaps[0].live_bytes <= peak / 8 * 7);
    sim.advance_clock(1_000);
    let a = allocator.allocate(&buffer(4096)).expect("allocation");
    allocator.free(a).expect("free");
    assert!(
        at_most_one_block_per_type(&allocator),
        "{:?}",
        blocks_per_type(&allocator)
    );
    allocator.validate().expect("invariants");
    drop(allocator);
    assert_eq!(sim.live_objects(), 0);
}

/// Where memory is plentiful, Balanced keeps freed memory for a churn that
/// may come back; without frames it goes back at the first call once a
/// second has passed on the device's clock, not before.
#[test]
fn kept_memory_goes_back_at_the_first_call_after_a_second_idle() {
    let (sim, allocator) = h200(Strategy::Balanced);
    let live = allocate_n(&allocator, MIB, 4096);
    free_all(&allocator, live);
    let kept = allocator.statistics().total.block_count;
    assert!(kept > 1, "kept {kept} blocks for the churn");
    // A second not yet passed: a call keeps it all.
    sim.advance_clock(999);
    let a = allocator.allocate(&buffer(4096)).expect("allocation");
    allocator.free(a).expect("free");
    assert_eq!(allocator.statistics().total.block_count, kept);
    // The first call after it gives back all but what the live set keeps.
    sim.advance_clock(1);
    let a = allocator.allocate(&buffer(4096)).expect("allocation");
    let after = blocks_per_type(&allocator);
    assert!(after.iter().all(|&(blocks, _)| blocks <= 1), "{after:?}");
    allocator.free(a).expect("free");
    assert!(at_most_one_block_per_type(&allocator));
    allocator.validate().expect("invariants");
}

/// A steady churn never arms the release: the live set stays near its
/// high-water mark, so memory is kept however long the calls go on.
#[test]
fn a_steady_churn_keeps_its_memory_however_long_it_runs() {
    let (sim, allocator) = h200(Strategy::Balanced);
    let mut live = allocate_n(&allocator, MIB, 1024);
    let made = allocator.statistics().device_memory_allocations_total;
    for round in 0..50 {
        sim.advance_clock(100);
        // A tenth of the live set freed and made again each round.
        let freed: Vec<_> = live.drain(..102).collect();
        free_all(&allocator, freed);
        live.extend(allocate_n(&allocator, MIB, 102));
        assert_eq!(
            allocator.statistics().device_memory_allocations_total,
            made,
            "round {round}: no new device memory"
        );
    }
    free_all(&allocator, live);
}

/// MinMemory makes 16 MiB blocks and keeps freed memory only below its
/// committed peak: a churn refills it without raising the peak; once idle
/// a second, every empty block goes back.
#[test]
fn min_memory_keeps_only_what_lies_below_its_peak() {
    let (sim, allocator) = h200(Strategy::MinMemory);
    let live = allocate_n(&allocator, MIB, 512);
    let stats = allocator.statistics();
    assert!(stats.total.block_bytes <= stats.total.block_count as u64 * 16 * MIB);
    let peak = stats.total.block_bytes;
    free_all(&allocator, live);
    // The churn comes back: no new memory, no higher peak.
    let made = allocator.statistics().device_memory_allocations_total;
    let live = allocate_n(&allocator, MIB, 512);
    assert_eq!(allocator.statistics().device_memory_allocations_total, made);
    assert_eq!(allocator.statistics().total.block_bytes, peak);
    free_all(&allocator, live);
    sim.advance_clock(1_000);
    let a = allocator.allocate(&buffer(4096)).expect("allocation");
    allocator.free(a).expect("free");
    assert!(at_most_one_block_per_type(&allocator));
}

/// MinTime keeps what it freed for its idle time (5 s), then gives it back.
#[test]
fn min_time_keeps_freed_memory_until_idle() {
    let (sim, allocator) = h200(Strategy::MinTime);
    let live = allocate_n(&allocator, MIB, 4096);
    let committed = allocator.statistics().total.block_bytes;
    free_all(&allocator, live);
    assert_eq!(allocator.statistics().total.block_bytes, committed);
    sim.advance_clock(4_999);
    let a = allocator.allocate(&buffer(4096)).expect("allocation");
    allocator.free(a).expect("free");
    assert_eq!(allocator.statistics().total.block_bytes, committed);
    sim.advance_clock(1);
    let a = allocator.allocate(&buffer(4096)).expect("allocation");
    allocator.free(a).expect("free");
    assert!(at_most_one_block_per_type(&allocator));
}

/// A budget that caps `Balanced`'s blocks (4 GiB: 128 MiB blocks) changes
/// only what the cap decides: a mid-size image the driver prefers dedicated,
/// which the minor-preference rule gives memory of its own, still gets it
/// though an existing block has room (review of the budget cap).
#[test]
fn the_budget_cap_leaves_a_drivers_minor_preference_its_own_memory() {
    use vkalloc::DriverDedicated;
    for budget in [16u64 << 30, 4 << 30] {
        let mut builder = SimDevice::builder(tables::nvidia_h200()).memory_budget(true);
        for heap in 0..tables::nvidia_h200().memory_properties.heaps.len() as u32 {
            builder = builder.heap_budget(heap, budget);
        }
        let sim = Arc::new(builder.build());
        let allocator =
            Allocator::new(Arc::clone(&sim), AllocatorDesc::default()).expect("allocator");
        let mut held: Vec<Allocation> = (0..250)
            .map(|_| allocator.allocate(&buffer(4 * MIB)).expect("a buffer"))
            .collect();
        for a in held.drain(..12) {
            allocator.free(a).expect("free");
        }
        let image = AllocationDesc {
            kind: ResourceKind::OptimalImage,
            driver_dedicated: DriverDedicated::Preferred,
            ..buffer(40 * MIB)
        };
        let texture = allocator.allocate(&image).expect("the image");
        assert!(
            texture.is_dedicated(),
            "budget {} GiB: the driver's preference was overridden by the cap",
            budget >> 30
        );
        allocator.free(texture).expect("free");
        for a in held {
            allocator.free(a).expect("free");
        }
        allocator.validate().expect("valid");
    }
}
