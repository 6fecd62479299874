//! Frees ordered by GPU progress. A renderer that stops using a resource in
//! frame `n` cannot destroy it nor free its memory until the GPU has
//! finished frame `n`; rather than keep its own graveyard, it hands the
//! allocation, or the whole buffer or image (feature `ash`:
//! `FreeQueue::destroy_buffer_after`, `destroy_image_after`), to a
//! [`FreeQueue`] with the timeline-semaphore value (or frame index) after
//! which the GPU no longer touches it, and calls [`FreeQueue::collect`] with
//! the value the GPU has reached. Built on [`Allocator::free`] and the device
//! seam's [`MemoryDevice::destroy_resource`].
//!
#![cfg_attr(feature = "sim", doc = "```")]
#![cfg_attr(not(feature = "sim"), doc = "```ignore")]
//! use vkalloc::{Allocator, AllocatorDesc, AllocationDesc, AllocationOptions, FreeQueue, MemoryUsage, ResourceKind};
//! use vkalloc::sim::{SimDevice, tables};
//!
//! let allocator = Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default())?;
//! let queue = FreeQueue::new();
//! let a = allocator.allocate(&AllocationDesc {
//!     size: 4096,
//!     kind: ResourceKind::Buffer,
//!     options: AllocationOptions::usage(MemoryUsage::GpuOnly),
//!     ..AllocationDesc::default()
//! })?;
//! queue.free_after(a, 7); // the GPU uses it until timeline value 7
//! assert_eq!(queue.collect(&allocator, 6).freed, 0);
//! assert_eq!(queue.collect(&allocator, 7).freed, 1);
//! assert_eq!(allocator.statistics().total.allocation_count, 0);
//! # Ok::<(), vkalloc::Error>(())
//! ```

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::device::MemoryDevice;
pub use crate::device::RetiredResource;
use crate::{Allocation, Allocator, Error};

/// Destroys a queued resource's handle (through the device seam) and frees
/// its memory: `Err` when it was not destroyed (another allocator made its
/// memory), else the free's own result (its pool may have been destroyed
/// since, for one).
fn retire<D: MemoryDevice>(
    resource: RetiredResource,
    allocator: &Allocator<D>,
) -> Result<Result<(), crate::FreeError>, RefusedResource> {
    if !allocator.owns(resource.allocation()) {
        return Err(RefusedResource {
            error: Error::ForeignAllocation,
            resource: Box::new(resource),
        });
    }
    crate::memory::destroy_retired(allocator.device(), &resource);
    let (_, allocation) = resource.into_parts();
    Ok(allocator.free(allocation))
}

/// A queued resource the allocator would not destroy: another allocator
/// made its memory. Nothing was destroyed; the resource comes back (queue
/// it where it belongs, or destroy it with [`RetiredResource::into_parts`]).
#[derive(Debug)]
#[must_use = "the resource inside leaks unless it is destroyed where it belongs"]
pub struct RefusedResource {
    error: Error,
    // Boxed as `FreeError` boxes its allocation: refusals are rare.
    resource: Box<RetiredResource>,
}

impl RefusedResource {
    /// Why it was refused.
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// The resource, untouched.
    pub fn into_resource(self) -> RetiredResource {
        *self.resource
    }
}

/// One thing waiting in a [`FreeQueue`].
#[derive(Debug)]
enum Retired {
    Allocation(Allocation),
    Resource(RetiredResource),
}

impl Retired {
    fn size(&self) -> u64 {
        match self {
            Retired::Allocation(a) => a.size(),
            Retired::Resource(r) => r.allocation().size(),
        }
    }
}

/// Allocations, buffers and images waiting for the GPU to pass a timeline
/// value. `Send + Sync`: any thread may queue, any thread may collect.
#[derive(Debug, Default)]
pub struct FreeQueue {
    pending: Mutex<BTreeMap<u64, Vec<Retired>>>,
}

/// What one [`FreeQueue::collect`] did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Collected {
    /// Allocations freed (those of destroyed resources included).
    pub freed: usize,
    /// Their bytes.
    pub freed_bytes: u64,
    /// Buffers and images destroyed (their memory is counted in `freed`).
    pub destroyed: usize,
    /// Frees the allocator refused (a programming error such as a foreign
    /// allocation, or a retired resource whose pool was destroyed since: its
    /// handle was destroyed, its memory was not freed), each with its
    /// allocation handed back.
    pub failures: Vec<crate::FreeError>,
    /// Resources the allocator refused to destroy (their memory is
    /// another allocator's), each handed back untouched.
    pub refused_resources: Vec<RefusedResource>,
}

impl FreeQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Vec<Retired>>> {
        // A panic while holding the lock leaves the map consistent (every
        // operation on it is a single insert or split), so poisoning is ignored.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, item: Retired, value: u64) {
        self.lock().entry(value).or_default().push(item);
    }

    /// Queues `allocation` to be freed once the GPU has reached `value`
    /// (a timeline-semaphore value or frame index that only grows).
    pub fn free_after(&self, allocation: impl Into<Allocation>, value: u64) {
        self.push(Retired::Allocation(allocation.into()), value);
    }

    /// Queues a buffer or image to be destroyed, and its memory freed, once
    /// the GPU has reached `value`. With feature `ash`,
    /// `FreeQueue::destroy_buffer_after` and `destroy_image_after` take the
    /// crate's own `vk::Buffer` and `vk::Image` values.
    pub fn destroy_after(&self, resource: RetiredResource, value: u64) {
        self.push(Retired::Resource(resource), value);
    }

    /// Destroys and frees everything queued with a value at most
    /// `completed`, the value the GPU has reached. Runs outside the queue's
    /// lock; a resource is destroyed before its memory is freed.
    pub fn collect<D: MemoryDevice>(&self, allocator: &Allocator<D>, completed: u64) -> Collected {
        let ready = {
            let mut pending = self.lock();
            let later = match completed.checked_add(1) {
                Some(next) => pending.split_off(&next),
                None => BTreeMap::new(),
            };
            std::mem::replace(&mut *pending, later)
        };
        Self::retire_all(allocator, ready.into_values().flatten())
    }

    /// Destroys and frees everything queued, whatever its value: for
    /// teardown, once the device is idle.
    pub fn collect_all<D: MemoryDevice>(&self, allocator: &Allocator<D>) -> Collected {
        let all = std::mem::take(&mut *self.lock());
        Self::retire_all(allocator, all.into_values().flatten())
    }

    fn retire_all<D: MemoryDevice>(
        allocator: &Allocator<D>,
        items: impl Iterator<Item = Retired>,
    ) -> Collected {
        let mut c = Collected::default();
        for item in items {
            let size = item.size();
            let freed = match item {
                Retired::Allocation(a) => match allocator.free(a) {
                    Ok(()) => true,
                    Err(refused) => {
                        c.failures.push(refused);
                        false
                    }
                },
                Retired::Resource(r) => match retire(r, allocator) {
                    Ok(Ok(())) => {
                        c.destroyed += 1;
                        true
                    }
                    Ok(Err(failed)) => {
                        c.destroyed += 1;
                        c.failures.push(failed);
                        false
                    }
                    Err(refused) => {
                        c.refused_resources.push(refused);
                        false
                    }
                },
            };
            if freed {
                c.freed += 1;
                c.freed_bytes = c.freed_bytes.saturating_add(size);
            }
        }
        c
    }

    /// Allocations and resources waiting.
    pub fn len(&self) -> usize {
        self.lock().values().map(Vec::len).sum()
    }

    /// Whether nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Bytes waiting to be freed.
    pub fn pending_bytes(&self) -> u64 {
        self.lock()
            .values()
            .flatten()
            .fold(0u64, |s, r| s.saturating_add(r.size()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::sim::{tables, SimDevice};
    use crate::{AllocationDesc, AllocationOptions, AllocatorDesc, MemoryUsage, ResourceKind};

    fn alloc(a: &Allocator<SimDevice>, size: u64) -> Allocation {
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
    fn frees_in_gpu_order() {
        let a = Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default())
            .expect("allocator");
        let q = FreeQueue::new();
        // Queued out of order: values need not arrive sorted.
        q.free_after(alloc(&a, 1000), 3);
        q.free_after(alloc(&a, 2000), 1);
        q.free_after(alloc(&a, 3000), 2);
        q.free_after(alloc(&a, 4000), 2);
        assert_eq!(q.len(), 4);
        assert_eq!(q.pending_bytes(), 10_000);
        let c = q.collect(&a, 0);
        assert_eq!(c.freed, 0);
        assert_eq!(a.statistics().total.allocation_count, 4);
        let c = q.collect(&a, 2);
        assert_eq!(c.freed, 3);
        assert_eq!(c.freed_bytes, 9000);
        assert!(c.failures.is_empty());
        assert_eq!(a.statistics().total.allocation_count, 1);
        assert_eq!(q.len(), 1);
        let c = q.collect(&a, u64::MAX);
        assert_eq!(c.freed, 1);
        assert!(q.is_empty());
        assert_eq!(a.statistics().total.allocation_count, 0);
        assert!(a.validate().is_ok());
    }

    #[test]
    fn foreign_allocation_is_reported_not_lost_silently() {
        let a = Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default())
            .expect("allocator");
        let b = Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default())
            .expect("allocator");
        let q = FreeQueue::new();
        q.free_after(alloc(&b, 4096), 1);
        let c = q.collect(&a, 1);
        assert_eq!(c.freed, 0);
        assert!(q.is_empty());
        // `b` still holds it (it was refused, not freed), and it came back.
        assert_eq!(b.statistics().total.allocation_count, 1);
        let refused = c.failures.into_iter().next().expect("one refusal");
        assert_eq!(refused.error(), &crate::Error::ForeignAllocation);
        b.free(refused.into_allocation())
            .expect("its owner frees it");
        assert_eq!(b.statistics().total.allocation_count, 0);
    }

    #[test]
    fn threads_queue_and_collect() {
        let a = Arc::new(
            Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default())
                .expect("allocator"),
        );
        let q = Arc::new(FreeQueue::new());
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let (a, q) = (Arc::clone(&a), Arc::clone(&q));
                std::thread::spawn(move || {
                    for i in 0..50u64 {
                        q.free_after(alloc(&a, 512), t * 100 + i);
                        if i % 10 == 0 {
                            q.collect(&a, t * 100 + i / 2);
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("thread");
        }
        q.collect(&a, u64::MAX);
        assert!(q.is_empty());
        assert_eq!(a.statistics().total.allocation_count, 0);
    }
}
