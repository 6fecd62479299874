//! `FreeQueue` retiring resources on the simulated device: handles are
//! destroyed (through the device seam) before their memory is freed, in GPU
//! order, and a resource whose memory another allocator made comes back
//! untouched.

use std::sync::Arc;

use vkalloc::sim::{tables, SimDevice};
use vkalloc::{
    Allocation, AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, DedicatedResource,
    FreeQueue, MemoryUsage, ResourceKind, RetiredResource,
};

fn alloc<D: vkalloc::device::MemoryDevice>(a: &Allocator<D>, size: u64) -> Allocation {
    a.allocate(&AllocationDesc {
        size,
        alignment: 256,
        kind: ResourceKind::Buffer,
        options: AllocationOptions::usage(MemoryUsage::GpuOnly),
        ..AllocationDesc::default()
    })
    .expect("allocate")
}

#[test]
fn resources_are_destroyed_before_their_memory_is_freed() {
    let device = Arc::new(SimDevice::new(tables::lavapipe()));
    let a = Allocator::new(Arc::clone(&device), AllocatorDesc::default()).expect("allocator");
    let q = FreeQueue::new();
    let buffer = DedicatedResource::Buffer(0xb0f);
    let image = DedicatedResource::Image(0x1e);
    // SAFETY: the simulated device only records the handles it destroys.
    q.destroy_after(unsafe { RetiredResource::new(buffer, alloc(&a, 1000)) }, 5);
    // SAFETY: as above.
    q.destroy_after(unsafe { RetiredResource::new(image, alloc(&a, 3000)) }, 6);
    q.free_after(alloc(&a, 500), 5);
    assert_eq!(q.len(), 3);
    assert_eq!(q.pending_bytes(), 4500);
    let c = q.collect(&a, 4);
    assert_eq!((c.freed, c.destroyed), (0, 0));
    assert!(device.destroyed_resources().is_empty());
    let c = q.collect(&a, 5);
    assert_eq!((c.freed, c.destroyed, c.freed_bytes), (2, 1, 1500));
    assert_eq!(device.destroyed_resources(), vec![buffer]);
    assert_eq!(a.statistics().total.allocation_count, 1);
    let c = q.collect_all(&a);
    assert_eq!((c.freed, c.destroyed), (1, 1));
    assert_eq!(device.destroyed_resources(), vec![buffer, image]);
    assert_eq!(a.statistics().total.allocation_count, 0);
    assert_eq!(device.violations(), 0);
}

#[test]
fn foreign_resource_is_handed_back_untouched() {
    let device = Arc::new(SimDevice::new(tables::lavapipe()));
    let a = Allocator::new(Arc::clone(&device), AllocatorDesc::default()).expect("allocator");
    let b = Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default())
        .expect("allocator");
    let q = FreeQueue::new();
    let buffer = DedicatedResource::Buffer(0xb0f);
    // SAFETY: the simulated device only records the handles it destroys.
    q.destroy_after(unsafe { RetiredResource::new(buffer, alloc(&b, 4096)) }, 1);
    let c = q.collect(&a, 1);
    assert_eq!((c.freed, c.destroyed), (0, 0));
    assert!(device.destroyed_resources().is_empty(), "nothing destroyed");
    let refused = c.refused_resources.into_iter().next().expect("one refusal");
    assert_eq!(refused.error(), &vkalloc::Error::ForeignAllocation);
    let back = refused.into_resource();
    assert_eq!(back.resource(), buffer);
    q.destroy_after(back, 1);
    let c = q.collect(&b, 1);
    assert_eq!((c.freed, c.destroyed), (1, 1));
    assert_eq!(b.statistics().total.allocation_count, 0);
}
