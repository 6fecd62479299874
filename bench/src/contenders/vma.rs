//! VMA 3 through vk-mem 0.5: `vmaAllocateMemoryForBuffer` /
//! `vmaAllocateMemoryForImage` with stand-in handles ([`crate::vkdev::stand_in`])
//! whose requirements are the trace's, and `vmaFreeMemory`.

use ash::vk;
use vk_mem::Alloc;

use super::{BaselineOptions, Contender, Placement, Request};
use crate::trace::{TraceDedicated, TraceKind, TraceUsage};
use crate::vkdev::{stand_in, StandInRequirements, VulkanContext};

/// VMA on the shared device.
pub struct Vma {
    allocator: vk_mem::Allocator,
    options: BaselineOptions,
}

impl Vma {
    /// Creates a VMA allocator on the context's device, with
    /// `VK_EXT_memory_budget` when the device has it enabled.
    pub fn new(ctx: &VulkanContext, options: BaselineOptions) -> Result<Self, String> {
        let mut info =
            vk_mem::AllocatorCreateInfo::new(&ctx.instance, &ctx.device, ctx.physical_device);
        info.vulkan_api_version = ctx.api_version;
        if ctx.info.memory_budget {
            info.flags |= vk_mem::AllocatorCreateFlags::EXT_MEMORY_BUDGET;
        }
        // SAFETY: the instance, device and physical device outlive the
        // allocator: the caller drops it before the context.
        let allocator = unsafe { vk_mem::Allocator::new(info) }
            .map_err(|e| format!("vmaCreateAllocator failed: {e}"))?;
        Ok(Self { allocator, options })
    }
}

impl Contender for Vma {
    type Handle = vk_mem::Allocation;

    fn name(&self) -> &'static str {
        "vma"
    }

    #[inline]
    fn allocate(&mut self, r: &Request<'_>) -> Result<Self::Handle, String> {
        use vk::MemoryPropertyFlags as F;
        let (required_flags, preferred_flags) = match r.usage {
            TraceUsage::GpuOnly => (F::empty(), F::DEVICE_LOCAL),
            TraceUsage::Upload => (F::HOST_VISIBLE, F::HOST_COHERENT | F::DEVICE_LOCAL),
            TraceUsage::Readback => (F::HOST_VISIBLE, F::HOST_CACHED | F::HOST_COHERENT),
            TraceUsage::Transient => (F::empty(), F::DEVICE_LOCAL | F::LAZILY_ALLOCATED),
        };
        let mut flags = vk_mem::AllocationCreateFlags::empty();
        if !r.tag_c.is_null() {
            // VMA copies the NUL-terminated name into the allocation (vk-mem
            // 0.5 has no vmaSetAllocationName; this flag does the same).
            #[allow(deprecated)]
            {
                flags |= vk_mem::AllocationCreateFlags::USER_DATA_COPY_STRING;
            }
        }
        let info = vk_mem::AllocationCreateInfo {
            flags,
            usage: vk_mem::MemoryUsage::Unknown,
            required_flags,
            preferred_flags,
            memory_type_bits: 0,
            user_data: r.tag_c as usize,
            priority: 0.0,
        };
        // The driver's dedicated wish reaches VMA through
        // VkMemoryDedicatedRequirements, as for a real resource.
        let handle = stand_in(StandInRequirements {
            size: r.size,
            alignment: r.alignment,
            memory_type_bits: r.memory_type_bits,
            prefers_dedicated: r.dedicated == TraceDedicated::Preferred
                && !self.options.vma_ignore_preferred,
            requires_dedicated: r.dedicated == TraceDedicated::Required,
        });
        // SAFETY: the stand-in handle is only given to this device's
        // requirements queries (answered by the bench) and is stripped from
        // vkAllocateMemory; `user_data` is null or a NUL-terminated string
        // alive across the call (VMA copies it); the allocation is freed with
        // this allocator.
        let result = unsafe {
            match r.kind {
                TraceKind::Buffer => self
                    .allocator
                    .allocate_memory_for_buffer(vk::Handle::from_raw(handle), &info),
                TraceKind::LinearImage | TraceKind::OptimalImage => self
                    .allocator
                    .allocate_memory_for_image(vk::Handle::from_raw(handle), &info),
            }
        };
        result.map_err(|e| format!("vmaAllocateMemoryFor*: {e}"))
    }

    #[inline]
    fn free(&mut self, mut handle: Self::Handle) {
        // SAFETY: `handle` was allocated by this allocator and is freed once.
        unsafe { self.allocator.free_memory(&mut handle) };
    }

    fn placement(&self, handle: &Self::Handle) -> Placement {
        let i = self.allocator.get_allocation_info(handle);
        Placement {
            memory: vk::Handle::as_raw(i.device_memory),
            offset: i.offset,
            size: i.size,
            memory_type: i.memory_type,
        }
    }

    fn begin_frame(&mut self, index: u64) {
        // SAFETY: no other thread uses the allocator.
        unsafe { self.allocator.set_current_frame_index(index as u32) };
    }

    fn memory_report(&self) -> String {
        let Ok(s) = self.allocator.calculate_statistics() else {
            return String::new();
        };
        let t = &s.total;
        format!(
            "{} blocks ({}), {} allocations ({}), {} free ranges, largest {}",
            t.statistics.blockCount,
            super::mib(t.statistics.blockBytes),
            t.statistics.allocationCount,
            super::mib(t.statistics.allocationBytes),
            t.unusedRangeCount,
            super::mib(t.unusedRangeSizeMax),
        )
    }

    fn largest_free_range(&self) -> Option<u64> {
        let s = self.allocator.calculate_statistics().ok()?;
        Some(s.total.unusedRangeSizeMax)
    }
}
