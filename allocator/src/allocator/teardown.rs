//! The allocator going away: [`Allocator::destroy`] and drop, which free
//! every block but those a leaked mapping may still reach, and
//! [`Allocator::destroy_all_memory`], for an engine about to destroy its
//! device, which frees them too.
//!
//! Vulkan frees nothing with the device: every `VkDeviceMemory` must be
//! freed before `vkDestroyDevice` (`VUID-vkDestroyDevice-device-00378`).
//! A block kept for a leaked [`crate::MappedAllocation`] is never freed by
//! `destroy` or drop (safe code could still write through the mapping), so
//! only `destroy_all_memory`, whose caller promises that no mapping is used
//! again, leaves the device with no memory of this allocator.

use super::Allocator;
use crate::allocator::diagnostics::LeakReport;
use crate::block_vector::LeakedBlocks;
use crate::device::MemoryDevice;

impl<D: MemoryDevice> Allocator<D> {
    /// Frees everything and returns the leak report: every allocation still
    /// live, named. Dropping the allocator does the same, but can only write
    /// the report to `log` (and stderr in debug builds).
    ///
    /// Blocks that hold leaked allocations and are mapped are kept (see
    /// [`LeakReport::blocks_kept`]): a leaked [`crate::MappedAllocation`]
    /// may still touch them, and freeing them would make that a use after
    /// free. Nothing frees them afterwards, not even the device's
    /// destruction: an engine about to destroy its device calls
    /// [`Self::destroy_all_memory`] instead.
    pub fn destroy(mut self) -> LeakReport {
        self.leaks_reported = true;
        let leaks = self.leaks();
        let blocks_kept = self.teardown(LeakedBlocks::Keep);
        LeakReport { leaks, blocks_kept }
    }

    /// Frees every block, leaked allocations' included, and returns the
    /// leak report naming them ([`LeakReport::blocks_kept`] is 0): for an
    /// engine about to destroy its device (`vkDestroyDevice` requires every
    /// memory object freed). Behind an `Arc`, take the allocator out first
    /// (`Arc::into_inner`), once every other holder is gone.
    ///
    /// ```
    /// # use vkalloc::sim::{tables, SimDevice};
    /// # use vkalloc::{AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, MemoryUsage};
    /// let allocator = std::sync::Arc::new(Allocator::new(
    ///     SimDevice::new(tables::lavapipe()),
    ///     AllocatorDesc::default(),
    /// )?);
    /// let staging = allocator.allocate_mapped(&AllocationDesc {
    ///     size: 4096,
    ///     options: AllocationOptions::usage(MemoryUsage::Upload).tagged("forgotten"),
    ///     ..AllocationDesc::default()
    /// })?;
    /// drop(staging); // a leak: never freed
    /// let allocator = std::sync::Arc::into_inner(allocator).expect("the last holder");
    /// // SAFETY: no mapping of this allocator is used after this point.
    /// let report = unsafe { allocator.destroy_all_memory() };
    /// assert_eq!(report.leaks.len(), 1);
    /// assert_eq!(report.leaks[0].tag.as_deref(), Some("forgotten"));
    /// assert_eq!(report.blocks_kept, 0);
    /// # Ok::<(), vkalloc::Error>(())
    /// ```
    ///
    /// # Safety
    /// No [`crate::MappedAllocation`] of this allocator, nor a slice or
    /// pointer taken from one, may be read or written after the call: the
    /// memory behind a leaked one is freed. (As for any free, the GPU must
    /// be done with the memory.)
    pub unsafe fn destroy_all_memory(mut self) -> LeakReport {
        self.leaks_reported = true;
        let leaks = self.leaks();
        let blocks_kept = self.teardown(LeakedBlocks::Free);
        LeakReport { leaks, blocks_kept }
    }

    /// Frees every block of every vector, pools first, with mapped blocks
    /// that still hold an allocation as `leaked` says; returns how many
    /// were kept.
    fn teardown(&mut self, leaked: LeakedBlocks) -> usize {
        let mut kept = 0;
        let pools: Vec<_> = self
            .pools
            .take()
            .into_iter()
            .filter_map(|s| s.pool)
            .collect();
        for pool in pools {
            kept += pool.vector.teardown(self.env(), leaked);
        }
        for ts in &self.types {
            kept += ts.vector.teardown(self.env(), leaked);
        }
        kept
    }
}

impl<D: MemoryDevice> Drop for Allocator<D> {
    fn drop(&mut self) {
        if self.leaks_reported {
            // `destroy` already tore everything down.
            return;
        }
        let leaks = self.leaks();
        let blocks_kept = self.teardown(LeakedBlocks::Keep);
        let report = LeakReport { leaks, blocks_kept };
        if !report.is_empty() {
            log::error!("{report}");
            if cfg!(debug_assertions) {
                eprintln!("{report}");
            }
        }
    }
}
