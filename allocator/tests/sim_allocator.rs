//! The allocator against the simulated device: the memory tables of real
//! GPUs, injected failures, budgets, pools, dedicated allocations, threads.
//!
//! After every scenario: `validate()` holds, statistics show nothing live,
//! the simulated device saw no contract violation, and once the allocator is
//! dropped no device memory is left.

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vkalloc::device::{DedicatedResource, DedicatedTo, DeviceError, DeviceMemory, MemoryDevice};
use vkalloc::sim::{tables, FailurePlan, GpuTable, SimDevice};
use vkalloc::{
    Allocation, AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, DedicatedPolicy,
    DriverDedicated, Error, LinearMode, MemoryUsage, PoolAlgorithm, PoolDesc, ResourceKind,
};

const MIB: u64 = 1 << 20;

fn new_allocator(sim: &Arc<SimDevice>) -> Allocator<Arc<SimDevice>> {
    Allocator::new(Arc::clone(sim), AllocatorDesc::default()).expect("allocator")
}

fn desc(
    size: u64,
    alignment: u64,
    kind: ResourceKind,
    usage: MemoryUsage,
) -> AllocationDesc<'static> {
    AllocationDesc {
        size,
        alignment,
        kind,
        options: AllocationOptions::usage(usage),
        ..AllocationDesc::default()
    }
}

/// Live allocations by memory object, to check that none overlap.
#[derive(Default)]
struct Shadow {
    live: BTreeMap<(DeviceMemory, u64), u64>,
}

impl Shadow {
    fn insert(&mut self, a: &Allocation) {
        let key = (a.memory(), a.offset());
        if let Some((&(m, off), &size)) = self.live.range(..=key).next_back() {
            assert!(
                m != a.memory() || off + size <= a.offset(),
                "overlaps the previous allocation"
            );
        }
        if let Some((&(m, off), _)) = self.live.range(key..).next() {
            assert!(
                m != a.memory() || a.offset() + a.size() <= off,
                "overlaps the next allocation"
            );
        }
        if a.size() > 1 {
            // Alignment is checked by the caller against what it asked.
        }
        self.live.insert(key, a.size());
    }

    fn remove(&mut self, a: &Allocation) {
        assert!(self.live.remove(&(a.memory(), a.offset())).is_some());
    }
}

/// Checks the end state: nothing live, invariants hold, no violations; then
/// drops the allocator and checks the device holds no memory.
fn finish(sim: &Arc<SimDevice>, allocator: Allocator<Arc<SimDevice>>) {
    allocator.validate().expect("invariants hold");
    let stats = allocator.statistics();
    assert_eq!(stats.total.allocation_count, 0, "{}", allocator.summary());
    assert_eq!(stats.total.allocation_bytes, 0);
    assert!(allocator.leaks().is_empty());
    drop(allocator);
    assert_eq!(sim.live_objects(), 0, "device memory left after drop");
    assert_eq!(
        sim.violations(),
        0,
        "contract violations: {:?}",
        sim.violation_log()
    );
}

#[test]
fn every_usage_on_every_gpu_table() {
    for table in tables::all_tables() {
        let sim = Arc::new(SimDevice::new(table.clone()));
        let allocator = new_allocator(&sim);
        let mut shadow = Shadow::default();
        let mut live = Vec::new();
        for usage in [
            MemoryUsage::GpuOnly,
            MemoryUsage::Upload,
            MemoryUsage::Readback,
            MemoryUsage::Transient,
        ] {
            for (i, &size) in [256u64, 4096, 65536, 3 * MIB, 40 * MIB].iter().enumerate() {
                let kind = [
                    ResourceKind::Buffer,
                    ResourceKind::OptimalImage,
                    ResourceKind::LinearImage,
                ][i % 3];
                let a = allocator
                    .allocate(&desc(size, 256, kind, usage))
                    .unwrap_or_else(|e| panic!("{}: {usage:?} {size}: {e}", table.name));
                assert_eq!(a.offset() % 256, 0);
                let flags = table.memory_properties.types[a.memory_type() as usize].flags;
                let resolved = usage.resolve(&table.memory_properties, u32::MAX, size, &[]);
                assert!(
                    flags.contains(resolved.required),
                    "{}: {usage:?}",
                    table.name
                );
                shadow.insert(&a);
                live.push(a);
            }
        }
        allocator.validate().unwrap();
        for a in live {
            shadow.remove(&a);
            allocator.free(a).unwrap();
        }
        finish(&sim, allocator);
    }
}

#[test]
fn mapped_memory_holds_what_was_written() {
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = new_allocator(&sim);
    let mut live = Vec::new();
    for i in 0..200u32 {
        let size = 64 + (i as u64 * 97) % 5000;
        let mut m = allocator
            .allocate_mapped(&desc(size, 64, ResourceKind::Buffer, MemoryUsage::Upload))
            .unwrap();
        m.as_mut_slice().fill(i as u8);
        live.push((i as u8, m));
    }
    for (pattern, m) in &live {
        assert!(
            m.as_slice().iter().all(|b| b == pattern),
            "pattern {pattern} clobbered"
        );
    }
    for (_, m) in live {
        allocator.free(m).unwrap();
    }
    finish(&sim, allocator);
}

#[test]
fn device_only_memory_cannot_be_mapped() {
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = new_allocator(&sim);
    let a = allocator
        .allocate(&desc(4096, 256, ResourceKind::Buffer, MemoryUsage::GpuOnly))
        .unwrap();
    assert!(!a.is_host_visible());
    let a = a
        .into_mapped()
        .expect_err("device-local memory is not mappable");
    allocator.free(a).unwrap();
    // On a mobile GPU every ordinary type is host-visible: GpuOnly memory maps.
    let sim2 = Arc::new(SimDevice::new(tables::mobile_tiler()));
    let allocator2 = new_allocator(&sim2);
    let a = allocator2
        .allocate(&desc(4096, 256, ResourceKind::Buffer, MemoryUsage::GpuOnly))
        .unwrap();
    let mapped = a.into_mapped().expect("mobile memory is host-visible");
    allocator2.free(mapped).unwrap();
    finish(&sim, allocator);
    finish(&sim2, allocator2);
}

#[test]
fn bad_requests_get_typed_errors() {
    let sim = Arc::new(SimDevice::new(tables::amd_discrete()));
    let allocator = new_allocator(&sim);
    let d = desc(0, 1, ResourceKind::Buffer, MemoryUsage::GpuOnly);
    assert_eq!(allocator.allocate(&d).unwrap_err(), Error::ZeroSize);
    let d = desc(64, 3, ResourceKind::Buffer, MemoryUsage::GpuOnly);
    assert_eq!(
        allocator.allocate(&d).unwrap_err(),
        Error::InvalidAlignment(3)
    );
    let mut d = desc(64, 4, ResourceKind::Buffer, MemoryUsage::GpuOnly);
    d.memory_type_bits = 0;
    assert!(matches!(
        allocator.allocate(&d),
        Err(Error::NoCompatibleMemoryType { .. })
    ));
    // Only type 0 (device-local, not host-visible) allowed, mapping required.
    d.memory_type_bits = 1;
    assert!(matches!(
        allocator.allocate_mapped(&d),
        Err(Error::NoCompatibleMemoryType { .. })
    ));
    d.driver_dedicated = DriverDedicated::Required;
    d.options.dedicated = DedicatedPolicy::Never;
    assert_eq!(
        allocator.allocate(&d).unwrap_err(),
        Error::DedicatedRequired
    );
    // An allocation from another allocator is refused, and stays valid.
    let other_sim = Arc::new(SimDevice::new(tables::amd_discrete()));
    let other = new_allocator(&other_sim);
    let a = other
        .allocate(&desc(64, 4, ResourceKind::Buffer, MemoryUsage::GpuOnly))
        .unwrap();
    // The refused free hands the allocation back, so its owner frees it.
    let refused = allocator.free(a).unwrap_err();
    assert_eq!(refused.error(), &Error::ForeignAllocation);
    let a = refused.into_allocation();
    let mut m = allocator
        .allocate_mapped(&desc(64, 4, ResourceKind::Buffer, MemoryUsage::Upload))
        .unwrap();
    assert!(matches!(
        m.write(60, &[0; 8]),
        Err(Error::OutOfBounds { .. })
    ));
    let mut buf = [0u8; 8];
    assert!(matches!(
        m.read(u64::MAX, &mut buf),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        allocator.flush(&m, 0, 65),
        Err(Error::OutOfBounds { .. })
    ));
    allocator.free(m).unwrap();
    other.free(a).unwrap();
    assert!(other.leaks().is_empty(), "nothing lost to the foreign free");
    finish(&sim, allocator);
}

#[test]
fn every_injected_allocate_failure_is_survived() {
    // Fail call N for every N a workload makes; each run must end clean.
    let workload = |allocator: &Allocator<Arc<SimDevice>>, rng: &mut ChaCha8Rng| {
        let mut live = Vec::new();
        let mut errors = 0;
        for i in 0..300 {
            let size = if i % 17 == 0 {
                200 * MIB
            } else {
                rng.gen_range(1..4 * MIB)
            };
            let usage = [MemoryUsage::GpuOnly, MemoryUsage::Upload][i % 2];
            let mut d = desc(size, 1 << rng.gen_range(0..12), ResourceKind::Buffer, usage);
            if i % 5 == 0 {
                d.driver_dedicated = DriverDedicated::Preferred;
                d.kind = ResourceKind::OptimalImage;
            }
            match allocator.allocate(&d) {
                Ok(a) => live.push(a),
                Err(
                    Error::OutOfDeviceMemory { .. }
                    | Error::OutOfHostMemory
                    | Error::MapFailed
                    | Error::TooManyAllocations { .. },
                ) => errors += 1,
                Err(e) => panic!("unexpected error {e}"),
            }
            if live.len() > 40 {
                let a = live.swap_remove(rng.gen_range(0..live.len()));
                allocator.free(a).unwrap();
            }
        }
        for a in live {
            allocator.free(a).unwrap();
        }
        errors
    };
    let baseline = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = new_allocator(&baseline);
    assert_eq!(workload(&allocator, &mut ChaCha8Rng::seed_from_u64(1)), 0);
    let calls = baseline.allocate_calls();
    finish(&baseline, allocator);
    assert!(
        calls > 5,
        "the workload creates device memory ({calls} calls)"
    );
    for n in 1..=calls {
        for error in [DeviceError::OutOfDeviceMemory, DeviceError::OutOfHostMemory] {
            let sim = Arc::new(
                SimDevice::builder(tables::nvidia_discrete())
                    .failures(
                        FailurePlan::new()
                            .fail_allocate_call(n)
                            .allocate_error(error),
                    )
                    .build(),
            );
            let allocator = new_allocator(&sim);
            workload(&allocator, &mut ChaCha8Rng::seed_from_u64(1));
            assert!(sim.failed_allocate_calls() >= 1, "call {n} was injected");
            finish(&sim, allocator);
        }
    }
    // Map failures and a byte ceiling.
    for plan in [
        FailurePlan::new().fail_map_calls_from(2),
        FailurePlan::new().fail_above_live_bytes(300 * MIB),
        FailurePlan::new().fail_allocate_calls_from(3),
    ] {
        let sim = Arc::new(
            SimDevice::builder(tables::nvidia_discrete())
                .failures(plan)
                .build(),
        );
        let allocator = new_allocator(&sim);
        let errors = workload(&allocator, &mut ChaCha8Rng::seed_from_u64(2));
        assert!(errors > 0, "{plan:?} caused failures");
        finish(&sim, allocator);
    }
}

#[test]
fn out_of_memory_falls_back_to_the_next_type() {
    // Device-local heap of 64 MiB: GPU-only allocations spill to system memory.
    let sim = Arc::new(
        SimDevice::builder(tables::nvidia_discrete())
            .heap_capacity(0, 64 * MIB)
            .build(),
    );
    let allocator = new_allocator(&sim);
    let props = sim.memory_properties().clone();
    let mut live = Vec::new();
    let mut spilled = 0;
    for _ in 0..40 {
        let a = allocator
            .allocate(&desc(
                4 * MIB,
                256,
                ResourceKind::Buffer,
                MemoryUsage::GpuOnly,
            ))
            .unwrap();
        if props.heap_of(a.memory_type()) != 0 {
            spilled += 1;
        }
        live.push(a);
    }
    assert!(
        spilled > 0,
        "allocations past the device-local heap went elsewhere"
    );
    assert!(sim.live_bytes(0) <= 64 * MIB);
    for a in live {
        allocator.free(a).unwrap();
    }
    finish(&sim, allocator);
}

#[test]
fn budgets_are_kept_when_asked() {
    let sim = Arc::new(
        SimDevice::builder(tables::nvidia_h200())
            .heap_budget(0, 512 * MIB)
            .build(),
    );
    let allocator = new_allocator(&sim);
    let mut d = desc(
        100 * MIB,
        256,
        ResourceKind::OptimalImage,
        MemoryUsage::Custom(vkalloc::select::TypeFlags::new(
            vkalloc::device::MemoryPropertyFlags::DEVICE_LOCAL,
            vkalloc::device::MemoryPropertyFlags::NONE,
            vkalloc::device::MemoryPropertyFlags::HOST_VISIBLE,
        )),
    );
    d.options.within_budget = true;
    d.options.dedicated = DedicatedPolicy::Always;
    let mut live = Vec::new();
    let err = loop {
        match allocator.allocate(&d) {
            Ok(a) => live.push(a),
            Err(e) => break e,
        }
        assert!(live.len() < 10, "budget never reached");
    };
    assert!(
        matches!(
            err,
            Error::OverBudget { .. } | Error::NoTypeWithinBudget { .. }
        ),
        "{err}"
    );
    assert!(sim.live_bytes(0) <= 512 * MIB);
    assert_eq!(live.len(), 5);
    // Without the flag the request goes over budget.
    d.options.within_budget = false;
    live.push(allocator.allocate(&d).unwrap());
    for a in live {
        allocator.free(a).unwrap();
    }
    finish(&sim, allocator);
}

#[test]
fn device_memory_object_limit_is_respected() {
    let sim = Arc::new(
        SimDevice::builder(tables::nvidia_discrete())
            .max_memory_allocation_count(8)
            .build(),
    );
    let allocator = new_allocator(&sim);
    let mut live = Vec::new();
    let mut d = desc(
        40 * MIB,
        256,
        ResourceKind::OptimalImage,
        MemoryUsage::GpuOnly,
    );
    d.driver_dedicated = DriverDedicated::Preferred;
    // Preferred-dedicated images fall back to blocks once objects run short.
    for _ in 0..12 {
        live.push(allocator.allocate(&d).unwrap());
    }
    assert!(sim.live_objects() <= 8);
    assert!(live.iter().any(|a| !a.is_dedicated()));
    d.driver_dedicated = DriverDedicated::Required;
    let mut refused = false;
    for _ in 0..10 {
        match allocator.allocate(&d) {
            Ok(a) => live.push(a),
            Err(Error::TooManyAllocations { limit: 8 }) => {
                refused = true;
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(refused);
    assert_eq!(sim.violations(), 0);
    for a in live {
        allocator.free(a).unwrap();
    }
    finish(&sim, allocator);
}

#[test]
fn dedicated_allocations_follow_the_policy() {
    let sim = Arc::new(SimDevice::new(tables::nvidia_h200()));
    let allocator = new_allocator(&sim);
    let image = |size: u64, driver: DriverDedicated| AllocationDesc {
        driver_dedicated: driver,
        // SAFETY: the simulated device never dereferences the handle.
        dedicated_to: Some(unsafe { DedicatedTo::new(DedicatedResource::Image(7)) }),
        ..desc(size, 1024, ResourceKind::OptimalImage, MemoryUsage::GpuOnly)
    };
    let required = allocator
        .allocate(&image(MIB, DriverDedicated::Required))
        .unwrap();
    assert!(required.is_dedicated());
    let small_preferred = allocator
        .allocate(&image(8 * MIB, DriverDedicated::Preferred))
        .unwrap();
    assert!(
        !small_preferred.is_dedicated(),
        "below the threshold: shares a block"
    );
    let large_preferred = allocator
        .allocate(&image(64 * MIB, DriverDedicated::Preferred))
        .unwrap();
    assert!(large_preferred.is_dedicated());
    let huge = allocator
        .allocate(&image(300 * MIB, DriverDedicated::None))
        .unwrap();
    assert!(huge.is_dedicated(), "larger than half a block");
    let mut asked = image(MIB, DriverDedicated::None);
    asked.options.dedicated = DedicatedPolicy::Always;
    let asked = allocator.allocate(&asked).unwrap();
    assert!(asked.is_dedicated());
    let stats = allocator.statistics();
    assert_eq!(stats.total.dedicated_count, 4);
    for a in [required, small_preferred, large_preferred, huge, asked] {
        allocator.free(a).unwrap();
    }
    finish(&sim, allocator);
}

#[test]
fn blocks_grow_with_use_and_empty_ones_are_kept_then_trimmed() {
    let sim = Arc::new(SimDevice::new(tables::nvidia_h200()));
    let allocator = new_allocator(&sim);
    let a = allocator
        .allocate(&desc(1024, 256, ResourceKind::Buffer, MemoryUsage::GpuOnly))
        .unwrap();
    let first = allocator.statistics().total.block_bytes;
    assert_eq!(first, 4 * MIB, "a small program starts with a small block");
    let mut live = vec![a];
    for _ in 0..30 {
        live.push(
            allocator
                .allocate(&desc(
                    16 * MIB,
                    256,
                    ResourceKind::Buffer,
                    MemoryUsage::GpuOnly,
                ))
                .unwrap(),
        );
    }
    // Blocks grow with the live set (about a quarter of it each): few
    // blocks, and what is committed stays close to what is live.
    let stats = allocator.statistics();
    assert!(stats.total.block_count <= 16, "{}", allocator.summary());
    assert!(
        stats.total.block_bytes <= stats.total.allocation_bytes / 3 * 4,
        "{}",
        allocator.summary()
    );
    let calls = sim.allocate_calls();
    let frees = sim.stats().free_calls;
    for a in live.drain(..) {
        allocator.free(a).unwrap();
    }
    // Emptied blocks are kept for reuse: below the committed high-water
    // mark they can't raise the peak, and nothing is freed yet.
    let kept = allocator.statistics().total;
    assert!(kept.block_count >= 1, "an empty block kept for reuse");
    assert_eq!(kept.block_bytes, stats.total.block_bytes);
    assert_eq!(sim.stats().free_calls, frees);
    live.push(
        allocator
            .allocate(&desc(MIB, 256, ResourceKind::Buffer, MemoryUsage::GpuOnly))
            .unwrap(),
    );
    assert_eq!(sim.allocate_calls(), calls, "the kept block was reused");
    allocator.free(live.pop().unwrap()).unwrap();
    // Frames pass with nothing live: the high-water marks decay and the
    // kept memory is freed, all but a little.
    for _ in 0..3000 {
        allocator.begin_frame();
    }
    let trimmed = allocator.statistics().total;
    assert!(sim.stats().free_calls > frees);
    assert!(trimmed.block_bytes <= 64 * MIB, "{}", allocator.summary());
    allocator.trim();
    assert_eq!(allocator.statistics().total.block_count, 0);
    finish(&sim, allocator);
}

#[test]
fn pools_keep_their_hard_budget() {
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = new_allocator(&sim);
    let pool = allocator
        .create_pool(&PoolDesc {
            block_size: 16 * MIB,
            budget: Some(64 * MIB),
            min_blocks: 1,
            ..PoolDesc::new("textures")
        })
        .unwrap();
    assert_eq!(allocator.statistics().pools[0].usage.block_count, 1);
    let d = AllocationDesc {
        options: AllocationOptions::usage(MemoryUsage::GpuOnly)
            .in_pool(pool)
            .tagged("texture"),
        ..desc(
            3 * MIB,
            4096,
            ResourceKind::OptimalImage,
            MemoryUsage::GpuOnly,
        )
    };
    let mut live = Vec::new();
    let err = loop {
        match allocator.allocate(&d) {
            Ok(a) => live.push(a),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::PoolExhausted { .. }), "{err}");
    assert_eq!(
        live.len(),
        4 * 5,
        "four 16 MiB blocks of five 3 MiB textures"
    );
    assert!(allocator.statistics().pools[0].usage.block_bytes <= 64 * MIB);
    // A large texture goes dedicated, counted against the budget too.
    let big = AllocationDesc {
        size: 40 * MIB,
        ..d
    };
    assert!(matches!(
        allocator.allocate(&big),
        Err(Error::PoolExhausted { .. })
    ));
    assert!(matches!(
        allocator.destroy_pool(pool),
        Err(Error::PoolNotEmpty { .. })
    ));
    let json = allocator.to_json();
    assert!(json.contains("\"texture\""));
    for a in live.drain(..) {
        allocator.free(a).unwrap();
    }
    let a = allocator.allocate(&big).unwrap();
    assert!(a.is_dedicated());
    allocator.free(a).unwrap();
    allocator.destroy_pool(pool).unwrap();
    assert_eq!(
        allocator.allocate(&d).unwrap_err(),
        Error::UnknownPool(pool)
    );
    finish(&sim, allocator);
}

#[test]
fn linear_ring_pool_for_per_frame_data() {
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete_rebar()));
    let allocator = new_allocator(&sim);
    let ring = allocator
        .create_pool(&PoolDesc {
            usage: MemoryUsage::Upload,
            block_size: MIB,
            min_blocks: 1,
            max_blocks: 1,
            algorithm: PoolAlgorithm::Linear(LinearMode::Ring),
            ..PoolDesc::new("frame ring")
        })
        .unwrap();
    let d = AllocationDesc {
        options: AllocationOptions::usage(MemoryUsage::Upload).in_pool(ring),
        ..desc(60_000, 256, ResourceKind::Buffer, MemoryUsage::Upload)
    };
    let mut frames: Vec<Vec<_>> = Vec::new();
    for frame in 0..50u8 {
        let mut this = Vec::new();
        for _ in 0..5 {
            let mut m = allocator.allocate_mapped(&d).unwrap();
            m.as_mut_slice().fill(frame);
            this.push(m);
        }
        frames.push(this);
        if frames.len() > 2 {
            for m in frames.remove(0) {
                assert!(m.as_slice().iter().all(|&b| b + 2 == frame));
                allocator.free(m).unwrap();
            }
        }
    }
    assert_eq!(sim.allocate_calls(), 1, "the ring never grew");
    let too_big = AllocationDesc { size: 2 * MIB, ..d };
    assert!(matches!(
        allocator.allocate(&too_big),
        Err(Error::TooLarge { .. })
    ));
    // Free-at-once: reset, then old handles free as no-ops.
    // SAFETY: the old handles are only freed below, never read or written.
    unsafe { allocator.reset_pool(ring) }.unwrap();
    assert_eq!(allocator.statistics().pools[0].usage.allocation_count, 0);
    for m in frames.into_iter().flatten() {
        allocator.free(m).unwrap();
    }
    allocator.validate().unwrap();
    allocator.destroy_pool(ring).unwrap();
    finish(&sim, allocator);
}

#[test]
fn leaks_are_reported_with_their_tags() {
    let sim = Arc::new(SimDevice::new(tables::lavapipe()));
    let allocator = new_allocator(&sim);
    let d = AllocationDesc {
        options: AllocationOptions::usage(MemoryUsage::GpuOnly).tagged("forgotten mesh"),
        ..desc(1000, 16, ResourceKind::Buffer, MemoryUsage::GpuOnly)
    };
    let _leaked = allocator.allocate(&d).unwrap(); // Never freed: a leak.
    let leaks = allocator.leaks();
    assert_eq!(leaks.len(), 1);
    assert_eq!(leaks[0].tag.as_deref(), Some("forgotten mesh"));
    assert!(allocator.summary().contains("1 allocations"));
    let report = allocator.destroy();
    assert_eq!(report.leaks, leaks);
    assert!(report.to_string().contains("tag 'forgotten mesh'"));
    // lavapipe's only type is host-visible: a leaked handle could still map
    // the block, so it is kept rather than freed under it.
    assert_eq!(report.blocks_kept, 1);
    assert_eq!(sim.live_objects(), 1);

    // Device-only memory can't be reached through a leaked handle: freed.
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = new_allocator(&sim);
    let _leaked = allocator.allocate(&d).unwrap();
    drop(allocator);
    assert_eq!(
        sim.live_objects(),
        0,
        "the allocator frees device-only blocks even when allocations leaked"
    );
}

#[test]
fn threads_share_one_allocator() {
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = Arc::new(new_allocator(&sim));
    let pool = allocator
        .create_pool(&PoolDesc {
            usage: MemoryUsage::Upload,
            block_size: 8 * MIB,
            ..PoolDesc::new("thread pool")
        })
        .unwrap();
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let allocator = Arc::clone(&allocator);
            std::thread::spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(t);
                let mut live: Vec<(u8, vkalloc::MappedAllocation)> = Vec::new();
                for i in 0..3000u32 {
                    if live.len() > 50 || (!live.is_empty() && rng.gen_bool(0.4)) {
                        let (p, m) = live.swap_remove(rng.gen_range(0..live.len()));
                        assert!(
                            m.as_slice().iter().all(|&b| b == p),
                            "thread {t}: pattern lost"
                        );
                        allocator.free(m).unwrap();
                    } else {
                        let mut options = AllocationOptions::usage(MemoryUsage::Upload);
                        if t % 2 == 1 {
                            options = options.in_pool(pool);
                        }
                        let d = AllocationDesc {
                            options,
                            ..desc(
                                rng.gen_range(1..200_000),
                                64,
                                ResourceKind::Buffer,
                                MemoryUsage::Upload,
                            )
                        };
                        let mut m = allocator.allocate_mapped(&d).unwrap();
                        let p = (t as u8) << 6 | (i % 64) as u8;
                        m.as_mut_slice().fill(p);
                        live.push((p, m));
                    }
                }
                for (p, m) in live {
                    assert!(m.as_slice().iter().all(|&b| b == p));
                    allocator.free(m).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    allocator.destroy_pool(pool).unwrap();
    let allocator = Arc::into_inner(allocator).unwrap();
    finish(&sim, allocator);
}

#[test]
fn statistics_and_dump_are_consistent() {
    let sim = Arc::new(SimDevice::new(tables::amd_discrete()));
    let allocator = new_allocator(&sim);
    let mut live = Vec::new();
    for i in 1..50u64 {
        live.push(
            allocator
                .allocate(&desc(
                    i * 10_000,
                    256,
                    ResourceKind::Buffer,
                    MemoryUsage::GpuOnly,
                ))
                .unwrap(),
        );
    }
    let (even, odd): (Vec<_>, Vec<_>) = live.drain(..).enumerate().partition(|(i, _)| i % 2 == 0);
    for (_, a) in even {
        allocator.free(a).unwrap();
    }
    live.extend(odd.into_iter().map(|(_, a)| a));
    let details = allocator.detailed_statistics();
    assert!(details.largest_free > 0 && details.free_range_count > 1);
    let json: serde_json::Value = serde_json::from_str(&allocator.to_json()).unwrap();
    assert_eq!(json["schema"], "vkalloc-dump");
    assert_eq!(json["schema_version"], vkalloc::snapshot::SCHEMA_VERSION);
    let counted: u64 = json["lists"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|l| l["blocks"].as_array().unwrap())
        .map(|b| b["allocation_count"].as_u64().unwrap())
        .sum();
    assert_eq!(counted, allocator.statistics().total.allocation_count);
    let _ = GpuTable::from_json(&tables::lavapipe().to_json()).unwrap();
    for a in live.drain(..) {
        allocator.free(a).unwrap();
    }
    finish(&sim, allocator);
}

#[test]
fn non_coherent_memory_is_flushed_in_whole_atoms() {
    // A phone-like type that is cached but not coherent.
    let mut table = tables::lavapipe();
    table.memory_properties.types[0].flags = vkalloc::device::MemoryPropertyFlags::DEVICE_LOCAL
        | vkalloc::device::MemoryPropertyFlags::HOST_VISIBLE
        | vkalloc::device::MemoryPropertyFlags::HOST_CACHED;
    let sim = Arc::new(SimDevice::new(table));
    let allocator = new_allocator(&sim);
    let mut live = Vec::new();
    for size in [1u64, 63, 64, 65, 1000] {
        let mut m = allocator
            .allocate_mapped(&desc(size, 4, ResourceKind::Buffer, MemoryUsage::Upload))
            .unwrap();
        assert_eq!(
            m.offset() % 64,
            0,
            "non-coherent allocations start on an atom"
        );
        m.as_mut_slice().fill(0xAB);
        allocator.flush(&m, 0, size).unwrap();
        allocator.invalidate(&m, size / 2, size - size / 2).unwrap();
        live.push(m);
    }
    let mut dedicated = desc(1000, 4, ResourceKind::Buffer, MemoryUsage::Upload);
    dedicated.options.dedicated = DedicatedPolicy::Always;
    let m = allocator.allocate_mapped(&dedicated).unwrap();
    // 1000 bytes is not a whole number of atoms: the range reaches the end.
    allocator.flush(&m, 990, 10).unwrap();
    live.push(m);
    assert_eq!(sim.flush_calls(), 6);
    assert_eq!(sim.invalidate_calls(), 5);
    assert_eq!(sim.violations(), 0, "{:?}", sim.violation_log());
    for m in live {
        allocator.free(m).unwrap();
    }
    finish(&sim, allocator);
}

#[cfg(feature = "trace")]
#[test]
fn a_recorded_trace_reads_back() {
    use std::io::Write;
    use std::sync::Mutex;
    use vkalloc::trace::{Trace, TraceEvent};

    /// A writer the test can read after the allocator hands it back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = new_allocator(&sim);
    let before = allocator
        .allocate(&desc(100, 4, ResourceKind::Buffer, MemoryUsage::GpuOnly))
        .unwrap();
    let out = Shared::default();
    allocator
        .start_recording(Box::new(out.clone()), "test")
        .unwrap();
    allocator.begin_frame();
    let a = allocator
        .allocate(&desc(
            4096,
            256,
            ResourceKind::OptimalImage,
            MemoryUsage::GpuOnly,
        ))
        .unwrap();
    let m = allocator
        .allocate_mapped(&desc(64, 4, ResourceKind::Buffer, MemoryUsage::Upload))
        .unwrap();
    allocator.free(a).unwrap();
    allocator.free(before).unwrap(); // Allocated before recording: not in the trace.
    allocator.begin_frame();
    allocator.stop_recording().unwrap().unwrap();
    allocator.free(m).unwrap();
    let bytes = out.0.lock().unwrap().clone();
    let trace = Trace::read(&bytes[..]).unwrap();
    let summary = trace.validate().unwrap();
    assert_eq!((summary.allocs, summary.frees, summary.frames), (2, 1, 2));
    assert!(matches!(trace.events[1], TraceEvent::Alloc(ref e) if e.size == 4096));
    finish(&sim, allocator);
}

#[test]
fn corruption_margins_catch_writes_past_the_end() {
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = Allocator::new(
        Arc::clone(&sim),
        AllocatorDesc::default().with_debug_margin(16),
    )
    .unwrap();
    let mut live = Vec::new();
    for i in 0..20u64 {
        let mut m = allocator
            .allocate_mapped(&desc(
                100 + i,
                64,
                ResourceKind::Buffer,
                MemoryUsage::Upload,
            ))
            .unwrap();
        assert_eq!(m.offset() % 64, 0, "margins keep the alignment");
        m.as_mut_slice().fill(1);
        live.push(m);
    }
    assert_eq!(allocator.check_corruption(), 0);
    // Write 4 bytes past the end of one allocation, as a buggy shader would.
    let victim = &live[7];
    let end = victim.as_ptr() as usize + victim.size() as usize;
    // SAFETY: the bytes after the allocation are its margin, inside the same
    // mapped block; the test damages them on purpose.
    unsafe { std::ptr::write_bytes(end as *mut u8, 0, 4) };
    assert_eq!(allocator.check_corruption(), 1);
    for m in live {
        allocator.free(m).unwrap();
    }
    assert_eq!(allocator.statistics().corruptions_detected, 1);
    // Device-local memory has no margins and still allocates.
    let a = allocator
        .allocate(&desc(100, 64, ResourceKind::Buffer, MemoryUsage::GpuOnly))
        .unwrap();
    allocator.free(a).unwrap();
    finish(&sim, allocator);
}

#[test]
fn recycled_dedicated_memory_becomes_a_new_shared_block() {
    // A freed 64 MiB texture's memory is kept; a 60 MiB buffer that needs a
    // new block (one of 64 MiB would be made) is placed in that memory
    // instead: no driver call, and the memory is a shared block now.
    let sim = Arc::new(SimDevice::new(tables::nvidia_h200()));
    let allocator = new_allocator(&sim);
    let image = AllocationDesc {
        driver_dedicated: DriverDedicated::Preferred,
        ..desc(
            64 * MIB,
            1024,
            ResourceKind::OptimalImage,
            MemoryUsage::GpuOnly,
        )
    };
    let a = allocator.allocate(&image).unwrap();
    assert!(a.is_dedicated());
    let memory = a.memory();
    allocator.free(a).unwrap();
    assert_eq!(sim.live_objects(), 1, "kept for reuse");
    let calls = sim.allocate_calls();
    let b = allocator
        .allocate(&desc(
            60 * MIB,
            256,
            ResourceKind::Buffer,
            MemoryUsage::GpuOnly,
        ))
        .unwrap();
    assert!(!b.is_dedicated());
    assert_eq!(b.memory(), memory);
    assert_eq!(sim.allocate_calls(), calls);
    // It is a shared block: a small buffer fits beside.
    let c = allocator
        .allocate(&desc(
            MIB / 2,
            256,
            ResourceKind::Buffer,
            MemoryUsage::GpuOnly,
        ))
        .unwrap();
    assert_eq!(c.memory(), memory);
    assert_eq!(sim.allocate_calls(), calls);
    allocator.validate().unwrap();
    allocator.free(b).unwrap();
    allocator.free(c).unwrap();
    allocator.validate().unwrap();
    allocator.trim();
    assert_eq!(sim.live_objects(), 0);
    finish(&sim, allocator);
}

#[test]
fn near_a_full_heap_a_large_request_gets_memory_of_its_own() {
    // lavapipe (one 2 GiB heap, 256 MiB blocks): 1,400 MiB in memory of
    // its own and a shared block of 82 MiB holding 1 MiB. A 100 MiB buffer
    // (above a quarter of the largest block) finds no room; the committed
    // target cuts its block to about its size, so it gets memory of its own
    // of its size in whole 64 KiB, naming no resource (reusable).
    let sim = Arc::new(SimDevice::new(tables::lavapipe()));
    let allocator = new_allocator(&sim);
    let buffer = |size: u64| desc(size, 256, ResourceKind::Buffer, MemoryUsage::GpuOnly);
    let mut live: Vec<_> = (0..7)
        .map(|_| allocator.allocate(&buffer(200 * MIB)).unwrap())
        .collect();
    live.push(allocator.allocate(&buffer(MIB)).unwrap());
    let calls = sim.allocate_calls();
    let a = allocator.allocate(&buffer(100 * MIB + 1000)).unwrap();
    assert!(a.is_dedicated());
    assert_eq!(a.size(), 100 * MIB + 1000);
    let info = sim.memory_info(a.memory()).unwrap();
    assert_eq!(info.size, 100 * MIB + (64 << 10));
    assert!(info.dedicated.is_none(), "names no resource: reusable");
    assert_eq!(sim.allocate_calls(), calls + 1);
    allocator.validate().unwrap();
    for x in live.into_iter().chain([a]) {
        allocator.free(x).unwrap();
    }
    allocator.trim();
    finish(&sim, allocator);
}

#[test]
fn on_a_free_heap_a_large_request_takes_room_in_a_block_or_a_new_block() {
    // The H200: nothing cuts a block, so a 100 MiB buffer gets a new shared
    // block (128 MiB, its room left for the next request), not memory of
    // its own; a later large request is placed where a block has room.
    let sim = Arc::new(SimDevice::new(tables::nvidia_h200()));
    let allocator = new_allocator(&sim);
    let buffer = |size: u64| desc(size, 256, ResourceKind::Buffer, MemoryUsage::GpuOnly);
    let a = allocator.allocate(&buffer(100 * MIB + 1000)).unwrap();
    assert!(!a.is_dedicated());
    assert_eq!(sim.memory_info(a.memory()).unwrap().size, 128 * MIB);
    // A block with room: 120 MiB placed in a block of its own (the
    // caller's choice, never dedicated), then freed: the empty block is kept.
    let never = AllocationDesc {
        options: AllocationOptions {
            dedicated: DedicatedPolicy::Never,
            ..AllocationOptions::usage(MemoryUsage::GpuOnly)
        },
        ..buffer(120 * MIB)
    };
    let big = allocator.allocate(&never).unwrap();
    assert!(!big.is_dedicated());
    let block = big.memory();
    assert_ne!(block, a.memory());
    allocator.free(big).unwrap();
    let calls = sim.allocate_calls();
    let b = allocator.allocate(&buffer(90 * MIB)).unwrap();
    assert!(!b.is_dedicated());
    assert_eq!(b.memory(), block, "the room in the block");
    assert_eq!(sim.allocate_calls(), calls);
    allocator.validate().unwrap();
    for x in [a, b] {
        allocator.free(x).unwrap();
    }
    allocator.trim();
    finish(&sim, allocator);
}

#[test]
fn beside_memory_of_its_own_a_new_block_keeps_to_the_shared_blocks_target() {
    // lavapipe: one 2 GiB heap, 256 MiB blocks. Seven 200 MiB buffers get
    // memory of their own (above half a block): 1,400 MiB live, all of it
    // exact. A small buffer then needs the first shared block. Counted over
    // every live byte, the committed target would allow a quarter of 1,400
    // MiB more (a full 256 MiB block); over the shared blocks it allows
    // nothing, so the block is what the heap share leaves: 1/8 of the 648
    // MiB left, 82 MiB in whole 2 MiB. `MinTime`: `Balanced` caps a 2 GiB
    // heap's blocks at 1/32 of it (64 MiB) first, which would hide the
    // target this checks.
    let sim = Arc::new(SimDevice::new(tables::lavapipe()));
    let allocator = Allocator::new(
        Arc::clone(&sim),
        AllocatorDesc::for_strategy(vkalloc::Strategy::MinTime),
    )
    .expect("allocator");
    let buffer = |size: u64| desc(size, 256, ResourceKind::Buffer, MemoryUsage::GpuOnly);
    let textures: Vec<_> = (0..7)
        .map(|_| allocator.allocate(&buffer(200 * MIB)).unwrap())
        .collect();
    assert!(textures.iter().all(Allocation::is_dedicated));
    let small = allocator.allocate(&buffer(MIB)).unwrap();
    assert!(!small.is_dedicated());
    let block = sim.memory_info(small.memory()).unwrap().size;
    assert_eq!(block, 82 * MIB, "a block of {} MiB", block / MIB);
    allocator.validate().unwrap();
    for x in textures.into_iter().chain([small]) {
        allocator.free(x).unwrap();
    }
    allocator.trim();
    finish(&sim, allocator);
}

#[test]
fn memory_of_its_own_is_reused_by_a_request_a_few_bytes_larger() {
    // lavapipe's two 85.3 MiB textures (a 64 MiB level and its mips), 768
    // bytes apart, each preferring memory of its own: the memory made for
    // the smaller serves the larger.
    let sim = Arc::new(SimDevice::new(tables::nvidia_h200()));
    let allocator = new_allocator(&sim);
    let image = |size: u64| AllocationDesc {
        driver_dedicated: DriverDedicated::Preferred,
        ..desc(size, 1024, ResourceKind::OptimalImage, MemoryUsage::GpuOnly)
    };
    let a = allocator.allocate(&image(89_478_656)).unwrap();
    assert!(a.is_dedicated());
    let memory = a.memory();
    allocator.free(a).unwrap();
    let calls = sim.allocate_calls();
    let b = allocator.allocate(&image(89_479_424)).unwrap();
    assert!(b.is_dedicated());
    assert_eq!(b.memory(), memory);
    assert_eq!(sim.allocate_calls(), calls);
    allocator.free(b).unwrap();
    allocator.trim();
    finish(&sim, allocator);
}

#[test]
fn freed_dedicated_memory_is_reused_for_similar_sizes() {
    let sim = Arc::new(SimDevice::new(tables::nvidia_h200()));
    let allocator = new_allocator(&sim);
    let image = |size: u64, driver: DriverDedicated| AllocationDesc {
        driver_dedicated: driver,
        // SAFETY: the simulated device never dereferences the handle.
        dedicated_to: Some(unsafe { DedicatedTo::new(DedicatedResource::Image(9)) }),
        ..desc(size, 1024, ResourceKind::OptimalImage, MemoryUsage::GpuOnly)
    };
    let a = allocator
        .allocate(&image(100 * MIB, DriverDedicated::Preferred))
        .unwrap();
    assert!(a.is_dedicated());
    let calls = sim.allocate_calls();
    let memory = a.memory();
    assert!(sim.memory_info(memory).is_some());
    allocator.free(a).unwrap();
    assert_eq!(sim.live_objects(), 1, "kept for reuse");
    allocator.validate().unwrap();
    // A slightly smaller texture takes the kept memory: no driver call.
    let b = allocator
        .allocate(&image(95 * MIB, DriverDedicated::Preferred))
        .unwrap();
    assert_eq!(sim.allocate_calls(), calls);
    assert_eq!(b.memory(), memory);
    // Much smaller, or required dedicated memory, gets fresh memory.
    let c = allocator
        .allocate(&image(60 * MIB, DriverDedicated::Preferred))
        .unwrap();
    allocator.free(b).unwrap();
    let d = allocator
        .allocate(&image(95 * MIB, DriverDedicated::Required))
        .unwrap();
    assert_ne!(d.memory(), memory);
    assert_eq!(sim.allocate_calls(), calls + 2);
    allocator.free(c).unwrap();
    allocator.free(d).unwrap();
    allocator.validate().unwrap();
    allocator.trim();
    assert_eq!(sim.live_objects(), 0, "trim frees kept memory");
    finish(&sim, allocator);
}

#[test]
fn a_texture_the_driver_prefers_dedicated_takes_memory_of_its_own_as_a_small_share_of_the_live_set()
{
    // The H200 prefers memory of its own for textures from 32 MiB; below
    // `honour_dedicated_preference_from` (64 MiB) they share blocks, but
    // where one is at most 1/16 of its type's live bytes (a block made for
    // it would mostly hold smaller allocations, which keep it once the
    // texture is freed) and the type is not host-visible.
    let sim = Arc::new(SimDevice::new(tables::nvidia_h200()));
    let allocator = new_allocator(&sim);
    let preferred = |size, kind, usage| AllocationDesc {
        driver_dedicated: DriverDedicated::Preferred,
        ..desc(size, 1024, kind, usage)
    };
    let texture = |size| preferred(size, ResourceKind::OptimalImage, MemoryUsage::GpuOnly);
    let staging = |size| preferred(size, ResourceKind::Buffer, MemoryUsage::Upload);
    // Little live: a shared block.
    let first = allocator.allocate(&texture(42 * MIB)).unwrap();
    assert!(!first.is_dedicated());
    let first_staging = allocator.allocate(&staging(40 * MIB)).unwrap();
    assert!(!first_staging.is_dedicated());
    // Live sets of more than 16 such requests, in device memory and in the
    // host-visible upload type.
    let mut live = Vec::new();
    for usage in [MemoryUsage::GpuOnly, MemoryUsage::Upload] {
        for _ in 0..28 {
            live.push(
                allocator
                    .allocate(&desc(24 * MIB, 256, ResourceKind::Buffer, usage))
                    .unwrap(),
            );
        }
    }
    let own = allocator.allocate(&texture(42 * MIB)).unwrap();
    assert!(own.is_dedicated());
    assert_eq!(own.memory_type(), first.memory_type());
    // Host-visible staging, a texture below half of the threshold and one
    // the driver has no preference for still share blocks.
    let shared = [
        allocator.allocate(&staging(40 * MIB)).unwrap(),
        allocator.allocate(&texture(31 * MIB)).unwrap(),
        allocator
            .allocate(&desc(
                42 * MIB,
                1024,
                ResourceKind::OptimalImage,
                MemoryUsage::GpuOnly,
            ))
            .unwrap(),
    ];
    assert_ne!(shared[0].memory_type(), own.memory_type());
    assert!(shared.iter().all(|a| !a.is_dedicated()));
    // Freed, its memory serves the next texture of its size: no call.
    let memory = own.memory();
    allocator.free(own).unwrap();
    let calls = sim.allocate_calls();
    let again = allocator.allocate(&texture(42 * MIB)).unwrap();
    assert!(again.is_dedicated());
    assert_eq!(again.memory(), memory);
    assert_eq!(sim.allocate_calls(), calls);
    allocator.validate().unwrap();
    for a in live
        .into_iter()
        .chain(shared)
        .chain([first, first_staging, again])
    {
        allocator.free(a).unwrap();
    }
    allocator.trim();
    finish(&sim, allocator);
}

#[test]
fn shared_blocks_grow_from_their_own_bytes_once_the_live_set_is_twice_the_largest_block() {
    // A small buffer's new block is a quarter of the type's live bytes; once
    // those are at least twice the largest block (256 MiB), memory of its
    // own no longer counts (it never goes in a shared block), down to 1/8 of
    // the largest block.
    let block_for_small_buffer = |textures: usize| {
        let sim = Arc::new(SimDevice::new(tables::nvidia_h200()));
        let allocator = new_allocator(&sim);
        let texture = AllocationDesc {
            driver_dedicated: DriverDedicated::Preferred,
            ..desc(
                100 * MIB,
                1024,
                ResourceKind::OptimalImage,
                MemoryUsage::GpuOnly,
            )
        };
        let own: Vec<_> = (0..textures)
            .map(|_| allocator.allocate(&texture).unwrap())
            .collect();
        assert!(own.iter().all(Allocation::is_dedicated));
        let small = allocator
            .allocate(&desc(MIB, 256, ResourceKind::Buffer, MemoryUsage::GpuOnly))
            .unwrap();
        assert!(!small.is_dedicated());
        assert_eq!(small.memory_type(), own[0].memory_type());
        let size = sim.memory_info(small.memory()).unwrap().size;
        for a in own.into_iter().chain([small]) {
            allocator.free(a).unwrap();
        }
        allocator.trim();
        finish(&sim, allocator);
        size
    };
    // 300 MiB live, all of its own: a quarter of it (in whole 2 MiB), as before.
    assert_eq!(block_for_small_buffer(3), 76 * MIB);
    // 600 MiB: the shared bytes (1 MiB), at least 32 MiB; not 150 MiB.
    assert_eq!(block_for_small_buffer(6), 32 * MIB);
}

#[test]
fn pinned_readback_memory_outlives_device_growth_past_the_peak() {
    // The H200: readback goes to system memory (type 3, heap 1), which the
    // driver pins at 0.24 ms a MiB; uploads to the resizable BAR (type 4,
    // device memory).
    let sim = Arc::new(SimDevice::new(tables::nvidia_h200()));
    let allocator = new_allocator(&sim);
    let buffer = |size, usage| desc(size, 256, ResourceKind::Buffer, usage);
    // Two readbacks at once: two blocks of system memory.
    let small = allocator
        .allocate(&buffer(40 * MIB, MemoryUsage::Readback))
        .unwrap();
    let large = allocator
        .allocate(&buffer(100 * MIB, MemoryUsage::Readback))
        .unwrap();
    assert_ne!(small.memory(), large.memory());
    let upload = allocator
        .allocate(&buffer(48 * MIB, MemoryUsage::Upload))
        .unwrap();
    let (pinned_type, upload_type) = (large.memory_type(), upload.memory_type());
    assert_ne!(pinned_type, upload_type);
    let type_bytes = |t: u32| allocator.statistics().types[t as usize].usage.block_bytes;
    let (pinned_bytes, upload_bytes) = (type_bytes(pinned_type), type_bytes(upload_type));
    allocator.free(small).unwrap();
    allocator.free(large).unwrap();
    allocator.free(upload).unwrap();
    // The emptied blocks are kept (below the committed peak).
    assert_eq!(sim.stats().free_calls, 0);
    // Device memory grows far past the allocator's committed peak: kept
    // memory of the other types makes way, device memory (the upload
    // block) first, then the smaller pinned block; the largest pinned
    // block stays (it costs ten times device memory to make again, and
    // freeing it makes no room in the device heap). The buffers may not use
    // the upload type: its kept block's room would take them instead
    // (`a_device_local_request_takes_room_a_sibling_type_keeps`).
    let mut live = Vec::new();
    for _ in 0..40 {
        live.push(
            allocator
                .allocate(&AllocationDesc {
                    memory_type_bits: !(1 << upload_type),
                    ..buffer(16 * MIB, MemoryUsage::GpuOnly)
                })
                .unwrap(),
        );
    }
    assert!(upload_bytes > 0);
    assert_eq!(type_bytes(upload_type), 0, "{}", allocator.summary());
    let kept = type_bytes(pinned_type);
    assert!(
        (100 * MIB..pinned_bytes).contains(&kept),
        "{kept} of {pinned_bytes}: {}",
        allocator.summary()
    );
    // The kept readback block serves the next large readback without a call.
    let calls = sim.allocate_calls();
    let again = allocator
        .allocate(&buffer(100 * MIB, MemoryUsage::Readback))
        .unwrap();
    assert_eq!(sim.allocate_calls(), calls);
    allocator.free(again).unwrap();
    for a in live {
        allocator.free(a).unwrap();
    }
    // Device memory kept is released within seconds of frames; pinned
    // memory is still kept then, and released in the end: its committed
    // high-water mark decays over about a minute of frames.
    let device_type = allocator
        .statistics()
        .types
        .iter()
        .find(|t| t.index != pinned_type && t.usage.block_bytes > 64 * MIB)
        .map(|t| t.index)
        .expect("the device blocks");
    for _ in 0..1000 {
        allocator.begin_frame();
    }
    assert!(
        type_bytes(device_type) <= 64 * MIB,
        "{}",
        allocator.summary()
    );
    assert_eq!(type_bytes(pinned_type), kept, "{}", allocator.summary());
    for _ in 0..60_000 {
        allocator.begin_frame();
    }
    assert_eq!(type_bytes(pinned_type), 0, "{}", allocator.summary());
    finish(&sim, allocator);
}

#[test]
fn runs_kept_empty_give_their_room_back_before_a_pool_refuses() {
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = new_allocator(&sim);
    let pool = allocator
        .create_pool(&PoolDesc {
            block_size: 16 * MIB,
            min_blocks: 1,
            max_blocks: 1,
            ..PoolDesc::new("one block")
        })
        .unwrap();
    let buffer = |size| AllocationDesc {
        options: AllocationOptions::usage(MemoryUsage::GpuOnly).in_pool(pool),
        ..desc(size, 256, ResourceKind::Buffer, MemoryUsage::GpuOnly)
    };
    // Enough small buffers for the block to make runs (`RUNS_FROM` live
    // allocations), then a 20 KiB one in a run of its size class (four
    // slots: 80 KiB).
    let small: Vec<_> = (0..vkalloc::range::tlsf::RUNS_FROM)
        .map(|_| allocator.allocate(&buffer(100)).unwrap())
        .collect();
    let mid = allocator.allocate(&buffer(20 << 10)).unwrap();
    // The rest of the block in 64 KiB buffers, until the pool refuses.
    let mut fill = Vec::new();
    let err = loop {
        match allocator.allocate(&buffer(64 << 10)) {
            Ok(a) => fill.push(a),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::PoolExhausted { .. }), "{err}");
    // Freed, the 20 KiB buffer's run stays for its class, empty; a 64 KiB
    // request needs its room, and gets it rather than a refusal.
    allocator.free(mid).unwrap();
    let again = allocator.allocate(&buffer(64 << 10)).unwrap();
    allocator.validate().unwrap();
    assert_eq!(allocator.statistics().pools[0].usage.block_count, 1);
    for a in fill.into_iter().chain(small).chain([again]) {
        allocator.free(a).unwrap();
    }
    allocator.validate().unwrap();
    allocator.destroy_pool(pool).unwrap();
    finish(&sim, allocator);
}

/// `AllocatorDesc::small_runs_from` decides when small requests take slots of
/// runs: from the first allocation with 0, never with `u32::MAX`, and not
/// before the default's 2,048 live allocations. 200-byte buffers are packed
/// at 200 bytes in ranges of their own and at their size class's stride (208)
/// in a run.
#[test]
fn small_runs_from_decides_when_small_requests_take_slots() {
    let steps = |runs_from: u32| {
        let sim = Arc::new(SimDevice::new(tables::nvidia_h200()));
        let allocator = Allocator::new(
            Arc::clone(&sim),
            AllocatorDesc::default().with_small_runs_from(runs_from),
        )
        .unwrap();
        let live: Vec<Allocation> = (0..8)
            .map(|_| {
                allocator
                    .allocate(&desc(200, 1, ResourceKind::Buffer, MemoryUsage::GpuOnly))
                    .unwrap()
            })
            .collect();
        assert!(live.iter().all(|a| a.memory() == live[0].memory()));
        let steps: Vec<u64> = live
            .windows(2)
            .map(|w| w[1].offset() - w[0].offset())
            .collect();
        allocator.validate().unwrap();
        for a in live {
            allocator.free(a).unwrap();
        }
        finish(&sim, allocator);
        steps
    };
    assert_eq!(steps(0), [208; 7], "slots of one run from the first");
    assert_eq!(steps(u32::MAX), [200; 7], "ranges of their own");
    assert_eq!(
        steps(AllocatorDesc::default().small_runs_from),
        [200; 7],
        "no run below the default count"
    );
}

/// A device-local request that the device-local type's blocks have no room
/// for takes room in a block that the same heap's host-visible type keeps
/// (a resizable BAR: an upload left it empty), and no memory is made for it.
/// Not where the host-visible device memory is a heap of its own (no
/// resizable BAR), not where the request's memory type bits rule the
/// sibling out, not in a pool, not for a request that chose its dedicated
/// policy.
#[test]
fn a_device_local_request_takes_room_a_sibling_type_keeps() {
    let texture = |bits: u32| AllocationDesc {
        memory_type_bits: bits,
        ..desc(
            8 * MIB,
            64 << 10,
            ResourceKind::OptimalImage,
            MemoryUsage::GpuOnly,
        )
    };
    for (table, sibling) in [
        (tables::nvidia_h200(), Some(4)),
        (tables::nvidia_discrete_rebar(), Some(4)),
        (tables::nvidia_discrete(), None),
    ] {
        let name = table.name.clone();
        let sim = Arc::new(SimDevice::new(table));
        let allocator = new_allocator(&sim);
        // An upload's block, left empty and kept.
        let upload = allocator
            .allocate(&desc(
                40 * MIB,
                256,
                ResourceKind::Buffer,
                MemoryUsage::Upload,
            ))
            .unwrap();
        let upload_type = upload.memory_type();
        allocator.free(upload).unwrap();
        let calls = sim.allocate_calls();
        let a = allocator.allocate(&texture(u32::MAX)).unwrap();
        match sibling {
            Some(t) => {
                assert_eq!(upload_type, t, "{name}");
                assert_eq!(
                    a.memory_type(),
                    t,
                    "{name}: placed in the kept upload block"
                );
                assert_eq!(sim.allocate_calls(), calls, "{name}: no memory made");
                assert!(a.is_host_visible(), "{name}");
            }
            None => {
                assert_eq!(a.memory_type(), 1, "{name}");
                assert_eq!(sim.allocate_calls(), calls + 1, "{name}");
            }
        }
        // Memory type bits without the sibling: a block of the device-local type.
        let b = allocator.allocate(&texture(1 << 1)).unwrap();
        assert_eq!(b.memory_type(), 1, "{name}");
        // A request that chose its dedicated policy stays in its own type.
        let c = allocator
            .allocate(&AllocationDesc {
                options: AllocationOptions {
                    dedicated: DedicatedPolicy::Never,
                    ..AllocationOptions::usage(MemoryUsage::GpuOnly)
                },
                ..texture(u32::MAX)
            })
            .unwrap();
        assert_eq!(c.memory_type(), 1, "{name}");
        // A pool of the device-local type makes its own block.
        let pool = allocator
            .create_pool(&PoolDesc {
                block_size: 16 * MIB,
                ..PoolDesc::new("device-local")
            })
            .unwrap();
        let d = allocator
            .allocate(&AllocationDesc {
                options: AllocationOptions {
                    pool: Some(pool),
                    ..AllocationOptions::usage(MemoryUsage::GpuOnly)
                },
                ..texture(u32::MAX)
            })
            .unwrap();
        assert_eq!(d.memory_type(), 1, "{name}");
        allocator.validate().expect("invariants hold");
        for x in [a, b, c, d] {
            allocator.free(x).unwrap();
        }
        allocator.destroy_pool(pool).unwrap();
        finish(&sim, allocator);
    }
}
