//! Sums of huge sizes (statistics, leak reports, alias groups, the free
//! queue) on a device that grants any size: they saturate or fail, never
//! overflow. Crashes fail one test, in a child process (`in_child`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use vkalloc::alias::AliasRequirement;
use vkalloc::device::{
    DeviceError, DeviceLimits, DeviceMemory, HeapBudget, MappedRange, MemoryAllocateInfo,
    MemoryDevice, MemoryProperties,
};
use vkalloc::sim::{tables, SimDevice};
use vkalloc::{
    AllocationOptions, Allocator, AllocatorDesc, DedicatedPolicy, MemoryUsage, PassInterval,
    ResourceKind,
};

use super::{desc, in_child};

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
