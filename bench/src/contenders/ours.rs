//! vkalloc, raw `Allocator::allocate` / `free`.

use vkalloc::vk::{AshDevice, AshDeviceOptions};
use vkalloc::{AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, DedicatedPolicy};

use super::{Contender, Placement, Request};
use crate::vkdev::VulkanContext;

/// vkalloc on the shared device, with its default settings.
pub struct Ours {
    allocator: Allocator<AshDevice>,
}

impl Ours {
    /// Creates the allocator on the context's device.
    pub fn new(ctx: &VulkanContext) -> Result<Self, String> {
        // SAFETY: the device outlives the allocator (the caller drops it
        // before the context), and `memory_budget` says whether the
        // extension was enabled on it.
        let allocator = unsafe {
            Allocator::on_ash(
                &ctx.instance,
                ctx.physical_device,
                &ctx.device,
                AshDeviceOptions {
                    memory_budget: ctx.info.memory_budget,
                },
                AllocatorDesc::default(),
            )
        }
        .map_err(|e| format!("vkalloc: {e}"))?;
        Ok(Self { allocator })
    }

    /// The allocator, for statistics.
    pub fn allocator(&self) -> &Allocator<AshDevice> {
        &self.allocator
    }
}

impl Contender for Ours {
    type Handle = vkalloc::Allocation;

    fn name(&self) -> &'static str {
        "ours"
    }

    #[inline]
    fn allocate(&mut self, r: &Request<'_>) -> Result<Self::Handle, String> {
        let desc = AllocationDesc {
            size: r.size,
            alignment: r.alignment,
            memory_type_bits: r.memory_type_bits,
            kind: r.kind.into(),
            driver_dedicated: r.dedicated.into(),
            dedicated_to: None,
            options: AllocationOptions {
                usage: r.usage.into(),
                pool: None,
                dedicated: DedicatedPolicy::Auto,
                tag: r.tag,
                within_budget: false,
            },
        };
        self.allocator
            .allocate(&desc)
            .map_err(|e| format!("vkalloc: {e}"))
    }

    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        // A failure here is a bug; it shows as a leak at the end of the run.
        let _ = self.allocator.free(handle);
    }

    fn placement(&self, h: &Self::Handle) -> Placement {
        Placement {
            memory: h.memory().0,
            offset: h.offset(),
            size: h.size(),
            memory_type: h.memory_type(),
        }
    }

    fn begin_frame(&mut self, _index: u64) {
        self.allocator.begin_frame();
    }

    fn largest_free_range(&self) -> Option<u64> {
        Some(self.allocator.detailed_statistics().largest_free)
    }

    fn memory_report(&self) -> String {
        let d = self.allocator.detailed_statistics();
        let (mut shared, mut shared_bytes, mut shared_used, mut empty, mut empty_bytes) =
            (0, 0, 0, 0, 0);
        let (mut dedicated, mut dedicated_bytes) = (0, 0);
        let mut sizes = Vec::new();
        for list in &d.lists {
            for b in &list.blocks {
                if b.dedicated {
                    dedicated += 1;
                    dedicated_bytes += b.size;
                } else {
                    shared += 1;
                    shared_bytes += b.size;
                    shared_used += b.allocation_bytes;
                    sizes.push(b.size >> 20);
                    if b.allocation_count == 0 {
                        empty += 1;
                        empty_bytes += b.size;
                    }
                }
            }
        }
        format!(
            "{dedicated} dedicated ({}); {shared} shared blocks ({}, {} used; MiB each {sizes:?}), {empty} empty ({})",
            super::mib(dedicated_bytes),
            super::mib(shared_bytes),
            super::mib(shared_used),
            super::mib(empty_bytes),
        )
    }
}
