//! Device memory objects: the one module of the core that calls the device
//! seam's `unsafe` functions. It creates and destroys `VkDeviceMemory`
//! objects with every reservation that goes with them (the object count under
//! `maxMemoryAllocationCount`, the pool's hard budget, the heap's budget) and
//! maps host-visible ones for their whole life.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::budget::Budgets;
use crate::device::{
    DedicatedTo, DeviceMemory, MappedRange, MemoryAllocateInfo, MemoryDevice, RetiredResource,
};
use crate::error::{DeviceCall, Error};
use crate::external::ExternalMemoryHandleTypes;
use crate::names::MemoryLabel;
use crate::pool::PoolId;
use crate::priority::{AtomicPriority, MemoryPriority};

/// A pool's hard caps, reserved before device memory is created so that
/// threads racing to grow the pool can't pass them together.
#[derive(Debug)]
pub(crate) struct PoolCaps {
    pub id: PoolId,
    /// Bytes committed (and in flight).
    pub committed: AtomicU64,
    pub budget: u64,
    /// Shared blocks (and in flight).
    pub blocks: AtomicU32,
    pub max_blocks: u32,
    /// Handle types every memory object of the pool is exportable with.
    pub export: ExternalMemoryHandleTypes,
    /// The priority new blocks are made with ([`crate::PoolDesc::priority`],
    /// changed by [`crate::Allocator::set_pool_priority`]).
    pub priority: AtomicPriority,
}

impl PoolCaps {
    fn reserve(&self, size: u64, shared_block: bool) -> Result<(), Error> {
        let budget = self.budget;
        let committed = self
            .committed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                c.checked_add(size).filter(|&n| n <= budget)
            });
        let used = committed.map_err(|used| Error::PoolExhausted {
            pool: self.id,
            requested: size,
            used,
            budget,
        })?;
        if shared_block {
            let max = self.max_blocks;
            let full = self
                .blocks
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                    (b < max).then_some(b + 1)
                })
                .is_err();
            if full {
                self.committed.fetch_sub(size, Ordering::AcqRel);
                return Err(Error::PoolExhausted {
                    pool: self.id,
                    requested: size,
                    used,
                    budget: budget.min(u64::from(self.max_blocks).saturating_mul(size)),
                });
            }
        }
        Ok(())
    }

    fn release(&self, size: u64, shared_block: bool) {
        self.committed.fetch_sub(size, Ordering::AcqRel);
        if shared_block {
            self.blocks.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// What to create.
pub(crate) struct MemoryRequest<'a> {
    pub memory_type: u32,
    pub heap: u32,
    pub size: u64,
    pub dedicated_to: Option<DedicatedTo>,
    pub host_visible: bool,
    pub within_budget: bool,
    pub pool: Option<&'a PoolCaps>,
    /// Whether the memory becomes a shared block (counted in `max_blocks`).
    pub shared_block: bool,
    /// Its priority (`VK_EXT_memory_priority`).
    pub priority: Option<MemoryPriority>,
    /// What it is, for its debug name ([`crate::names`]).
    pub label: MemoryLabel<'a>,
    /// Handle types to make it exportable with (its pool's).
    pub export: ExternalMemoryHandleTypes,
    /// A file descriptor to import it from (borrowed; see
    /// [`MemoryAllocateInfo::import_fd`]).
    pub import_fd: Option<i32>,
}

/// A created memory object.
pub(crate) struct CreatedMemory {
    pub memory: DeviceMemory,
    /// Host address of its first byte, or 0 when not host-visible.
    pub host_address: usize,
}

/// Live `VkDeviceMemory` objects, kept under `maxMemoryAllocationCount`,
/// and how many were ever made and freed (touched next to driver calls only).
#[derive(Debug, Default)]
pub(crate) struct ObjectCount(pub AtomicU32, AtomicU64, AtomicU64);

impl ObjectCount {
    fn reserve(&self, limit: u32) -> Result<(), Error> {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .map(|_| ())
            .map_err(|_| Error::TooManyAllocations { limit })?;
        self.1.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn release(&self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
        self.2.fetch_add(1, Ordering::Relaxed);
    }

    /// `vkAllocateMemory` calls and objects released so far (a call the
    /// driver refuses counts in both: its reservation is released at once).
    pub fn totals(&self) -> (u64, u64) {
        (
            self.1.load(Ordering::Relaxed),
            self.2.load(Ordering::Relaxed),
        )
    }

    /// Live objects now (read on every allocation's placement decision:
    /// inlined across crates).
    #[inline]
    pub fn get(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
}

/// What every memory object counts against: the device, the object count
/// and the heap budgets.
#[derive(Clone, Copy)]
pub(crate) struct Context<'a> {
    pub device: &'a dyn MemoryDevice,
    pub objects: &'a ObjectCount,
    pub budgets: &'a Budgets,
}

impl Context<'_> {
    /// Whether a quarter or less of `maxMemoryAllocationCount` is left (the
    /// point from which dedicated memory is no longer made by choice).
    pub fn objects_scarce(&self) -> bool {
        let limit = self.device.limits().max_memory_allocation_count;
        self.objects.get() >= limit - limit / 4
    }
}

/// A memory object to destroy, with what it was counted against.
pub(crate) struct Doomed<'a> {
    pub heap: u32,
    pub memory: DeviceMemory,
    pub size: u64,
    pub host_address: usize,
    /// The pool it belongs to, and whether it is a shared block there.
    pub pool: Option<(&'a PoolCaps, bool)>,
}

/// Creates (and maps) a memory object, reserving everything it counts
/// against first; on any failure every reservation is given back.
pub(crate) fn create(cx: Context<'_>, request: &MemoryRequest<'_>) -> Result<CreatedMemory, Error> {
    let Context {
        device,
        objects,
        budgets,
    } = cx;
    let limits = device.limits();
    if request.size > limits.max_memory_allocation_size {
        return Err(Error::TooLarge {
            size: request.size,
            max: limits.max_memory_allocation_size,
        });
    }
    objects.reserve(limits.max_memory_allocation_count)?;
    if let Some(pool) = request.pool {
        if let Err(e) = pool.reserve(request.size, request.shared_block) {
            objects.release();
            return Err(e);
        }
    }
    let release_caps = || {
        objects.release();
        if let Some(pool) = request.pool {
            pool.release(request.size, request.shared_block);
        }
    };
    if let Err(view) = budgets.reserve(request.heap, request.size, request.within_budget) {
        release_caps();
        return Err(Error::OverBudget {
            heap: request.heap,
            requested: request.size,
            budget: view.budget,
            usage: view.usage,
        });
    }
    let rollback = || {
        budgets.release(request.heap, request.size);
        release_caps();
    };
    let info = MemoryAllocateInfo {
        size: request.size,
        memory_type: request.memory_type,
        dedicated: request.dedicated_to,
        priority: request.priority,
        export: request.export,
        import_fd: request.import_fd,
    };
    // SAFETY: `memory_type` comes from the device's own table (selection
    // only returns existing types), `size` is non-zero (requests of zero bytes
    // are refused up front) and at most `maxMemoryAllocationSize` (checked
    // above); a dedicated target is the caller's live, unbound resource whose
    // requirements gave `size` (the contract of `AllocationDesc::dedicated_to`);
    // export types were checked against the device's when the pool was made,
    // and an import descriptor is the caller's promise (`Allocator::import_fd`).
    let memory = match unsafe { device.allocate_memory(&info) } {
        Ok(memory) => {
            budgets.note_created(request.heap, request.size);
            name(device, objects, memory, &request.label);
            memory
        }
        Err(e) => {
            rollback();
            return Err(Error::from_device(
                e,
                DeviceCall {
                    size: request.size,
                    limit: limits.max_memory_allocation_count,
                },
            ));
        }
    };
    let host_address = if request.host_visible {
        // SAFETY: `memory` was just created, is of a HOST_VISIBLE type, and
        // nobody else has mapped it.
        match unsafe { device.map_memory(memory) } {
            Ok(ptr) => ptr.as_ptr() as usize,
            Err(_) => {
                budgets.note_freeing(request.heap, request.size);
                // SAFETY: `memory` is live, unmapped, and nothing is bound to it.
                unsafe { device.free_memory(memory) };
                rollback();
                return Err(Error::MapFailed);
            }
        }
    } else {
        0
    };
    Ok(CreatedMemory {
        memory,
        host_address,
    })
}

/// Unmaps and frees a memory object made by [`create`], and gives back its
/// reservations.
///
/// The caller guarantees that no allocation in it is still handed out, or
/// that the allocator is being dropped (resources still bound to it are then
/// the caller's leak, reported before this is called).
pub(crate) fn destroy(cx: Context<'_>, doomed: Doomed<'_>) {
    let Context {
        device,
        objects,
        budgets,
    } = cx;
    let Doomed {
        heap,
        memory,
        size,
        host_address,
        pool,
    } = doomed;
    if host_address != 0 {
        // SAFETY: the memory was mapped by `create` and stays mapped until
        // here; no pointer into it outlives its allocations, which are gone.
        unsafe { device.unmap_memory(memory) };
    }
    budgets.note_freeing(heap, size);
    // SAFETY: the memory was made by `create` on this device, is freed once
    // (its block is removed from its list first), and is unmapped.
    unsafe { device.free_memory(memory) };
    budgets.release(heap, size);
    objects.release();
    if let Some((pool, shared_block)) = pool {
        pool.release(size, shared_block);
    }
}

/// Destroys the buffer or image of a queued [`RetiredResource`] (its memory
/// is freed by the caller right after).
///
/// The caller checked that the allocator whose device this is made the
/// resource's memory.
pub(crate) fn destroy_retired(device: &dyn MemoryDevice, retired: &RetiredResource) {
    // SAFETY: `RetiredResource::new`'s caller promised that the resource is
    // a live resource of the device of the allocator that made its memory
    // (this one: checked by the caller), that nothing else destroys it, and
    // that the device is done with it by the time its queue is collected.
    // The value is consumed right after, so it is destroyed once.
    unsafe { device.destroy_resource(retired.resource()) }
}

/// Names a live memory object for debuggers ([`crate::names`]) where the
/// instance has `VK_EXT_debug_utils`; its serial is the count of
/// `vkAllocateMemory` calls made so far.
///
/// The caller holds `memory` (just created, or under the lock of the list
/// or bin that owns it).
pub(crate) fn name(
    device: &dyn MemoryDevice,
    objects: &ObjectCount,
    memory: DeviceMemory,
    label: &MemoryLabel<'_>,
) {
    if !device.limits().debug_utils {
        return;
    }
    let name = label.name(objects.totals().0);
    // SAFETY: the memory is live (the caller holds it) and the extension
    // is enabled (checked above).
    unsafe { device.set_memory_name(memory, &name) };
}

/// Changes the priority of a live memory object.
///
/// # Errors
/// [`Error::NotEnabled`] where the device lacks
/// `VK_EXT_pageable_device_local_memory` (nothing changes).
///
/// The caller holds the lock of the list that owns `memory` (so it is not
/// freed meanwhile) and checked that the block is live.
pub(crate) fn set_priority(
    device: &dyn MemoryDevice,
    memory: DeviceMemory,
    priority: MemoryPriority,
) -> Result<(), Error> {
    if !device.limits().pageable_device_local_memory {
        return Err(Error::NotEnabled(PAGEABLE_NOT_ENABLED));
    }
    // SAFETY: the memory is a live block (the caller's lock keeps it so)
    // and the extension is enabled (checked above).
    unsafe { device.set_memory_priority(memory, priority) };
    Ok(())
}

/// What [`Error::NotEnabled`] says when a priority can't be changed.
pub(crate) const PAGEABLE_NOT_ENABLED: &str =
    "changing a memory priority needs VK_EXT_pageable_device_local_memory: enable the extension \
     and its pageableDeviceLocalMemory feature on the device, and set \
     AshDeviceOptions::pageable_device_local_memory";

/// Flushes one range of a mapped block.
///
/// The caller built `range` from a live mapped allocation, rounded to
/// `nonCoherentAtomSize` inside its block.
pub(crate) fn flush(device: &dyn MemoryDevice, range: &MappedRange) -> Result<(), Error> {
    // SAFETY: the range's memory is a live block, mapped for its whole life,
    // and the range lies inside it, aligned as `MappedRange` requires.
    unsafe { device.flush_ranges(std::slice::from_ref(range)) }
        .map_err(|e| Error::from_device(e, DeviceCall::default()))
}

/// Invalidates one range of a mapped block; as [`flush`].
pub(crate) fn invalidate(device: &dyn MemoryDevice, range: &MappedRange) -> Result<(), Error> {
    // SAFETY: as in `flush`.
    unsafe { device.invalidate_ranges(std::slice::from_ref(range)) }
        .map_err(|e| Error::from_device(e, DeviceCall::default()))
}
