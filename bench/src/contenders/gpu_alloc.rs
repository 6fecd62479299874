//! gpu-allocator 0.28 (`Allocator::allocate` / `free`).

use ash::vk;
use gpu_allocator::vulkan::{
    Allocation, AllocationCreateDesc, AllocationScheme, Allocator, AllocatorCreateDesc,
};
use gpu_allocator::{AllocationSizes, AllocatorDebugSettings, MemoryLocation};

use super::{Contender, Placement, Request};
use crate::trace::{TraceDedicated, TraceKind, TraceUsage};
use crate::vkdev::VulkanContext;

/// gpu-allocator on the shared device, with its default block sizes
/// (256 MiB device-local, 64 MiB host-visible) and every log off.
pub struct GpuAllocator {
    allocator: Allocator,
}

impl GpuAllocator {
    /// Creates the allocator on the context's device.
    pub fn new(ctx: &VulkanContext) -> Result<Self, String> {
        // Every log off (the defaults) and no leak report at shutdown.
        let mut debug_settings = AllocatorDebugSettings::default();
        debug_settings.log_leaks_on_shutdown = false;
        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: ctx.instance.clone(),
            device: ctx.device.clone(),
            physical_device: ctx.physical_device,
            debug_settings,
            buffer_device_address: false,
            allocation_sizes: AllocationSizes::default(),
        })
        .map_err(|e| format!("gpu-allocator: {e}"))?;
        Ok(Self { allocator })
    }
}

impl Contender for GpuAllocator {
    type Handle = Allocation;

    fn name(&self) -> &'static str {
        "gpu-allocator"
    }

    #[inline]
    fn allocate(&mut self, r: &Request<'_>) -> Result<Self::Handle, String> {
        let location = match r.usage {
            TraceUsage::GpuOnly | TraceUsage::Transient => MemoryLocation::GpuOnly,
            TraceUsage::Upload => MemoryLocation::CpuToGpu,
            TraceUsage::Readback => MemoryLocation::GpuToCpu,
        };
        let linear = r.kind != TraceKind::OptimalImage;
        let allocation_scheme = match (r.dedicated, r.kind) {
            (TraceDedicated::Required, TraceKind::Buffer) => {
                AllocationScheme::DedicatedBuffer(vk::Buffer::null())
            }
            (TraceDedicated::Required, _) => AllocationScheme::DedicatedImage(vk::Image::null()),
            _ => AllocationScheme::GpuAllocatorManaged,
        };
        self.allocator
            .allocate(&AllocationCreateDesc {
                name: r.tag,
                requirements: vk::MemoryRequirements {
                    size: r.size,
                    alignment: r.alignment,
                    memory_type_bits: r.memory_type_bits,
                },
                location,
                linear,
                allocation_scheme,
            })
            .map_err(|e| format!("gpu-allocator: {e}"))
    }

    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        // A failure here is a bug in the replay; it shows as a leak at the end.
        let _ = self.allocator.free(handle);
    }

    fn placement(&self, handle: &Self::Handle) -> Placement {
        Placement {
            // SAFETY: only reads the handle; nothing is freed or allocated with it.
            memory: vk::Handle::as_raw(unsafe { handle.memory() }),
            offset: handle.offset(),
            size: handle.size(),
            memory_type: u32::MAX,
        }
    }

    fn memory_report(&self) -> String {
        let r = self.allocator.generate_report();
        let mut sizes: Vec<u64> = r.blocks.iter().map(|b| b.size >> 20).collect();
        sizes.sort_unstable();
        format!(
            "{} blocks ({}; MiB each {sizes:?}), {} allocations ({})",
            r.blocks.len(),
            super::mib(r.total_capacity_bytes),
            r.allocations.len(),
            super::mib(r.total_allocated_bytes),
        )
    }

    fn largest_free_range(&self) -> Option<u64> {
        let report = self.allocator.generate_report();
        let mut largest = 0;
        for block in &report.blocks {
            let mut spans: Vec<(u64, u64)> = report.allocations[block.allocations.clone()]
                .iter()
                .map(|a| (a.offset, a.offset + a.size))
                .collect();
            spans.sort_unstable();
            let mut cursor = 0;
            for (start, end) in spans {
                largest = largest.max(start.saturating_sub(cursor));
                cursor = cursor.max(end);
            }
            largest = largest.max(block.size.saturating_sub(cursor));
        }
        Some(largest)
    }
}
