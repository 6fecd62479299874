//! The allocators compared, behind one trait.

use crate::trace::{TraceDedicated, TraceKind, TraceUsage};

pub mod gpu_alloc;
pub mod ours;
pub mod vma;

/// One allocation request as every contender receives it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// Bytes.
    pub size: u64,
    /// Alignment, a power of two.
    pub alignment: u64,
    /// Allowed memory types, already masked to the device's.
    pub memory_type_bits: u32,
    /// Resource kind.
    pub kind: TraceKind,
    /// Usage preset.
    pub usage: TraceUsage,
    /// The driver's dedicated wish.
    pub dedicated: TraceDedicated,
    /// Debugging name; empty when tags are off.
    pub tag: &'a str,
    /// The same name NUL-terminated (for VMA), or null when tags are off.
    /// Points into [`crate::replay::Prepared`], valid while it lives.
    pub tag_c: *const std::ffi::c_char,
}

/// Where an allocation landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The raw `VkDeviceMemory`.
    pub memory: u64,
    /// Offset in it.
    pub offset: u64,
    /// Bytes reserved (at least the request's size).
    pub size: u64,
    /// Memory type index.
    pub memory_type: u32,
}

/// An allocator under test.
///
/// All contenders share one `ash::Device` whose `vkAllocateMemory` and
/// `vkFreeMemory` are counted ([`crate::vkdev`]).
pub trait Contender {
    /// A live allocation.
    type Handle;
    /// `"ours"`, `"vma"`, `"gpu-allocator"`.
    fn name(&self) -> &'static str;
    /// Allocates; the error is a message.
    fn allocate(&mut self, request: &Request<'_>) -> Result<Self::Handle, String>;
    /// Frees.
    fn free(&mut self, handle: Self::Handle);
    /// Where `handle` is (for overlap checks; not timed).
    fn placement(&self, handle: &Self::Handle) -> Placement;
    /// A frame boundary.
    fn begin_frame(&mut self, _index: u64) {}
    /// The largest free range inside the allocator's device memory blocks,
    /// where it can be had.
    fn largest_free_range(&self) -> Option<u64>;
    /// A one-line account of the allocator's device memory (blocks,
    /// dedicated allocations, free bytes), for `--explain-peak`.
    fn memory_report(&self) -> String {
        String::new()
    }
    /// With `--defrag`, at the end of a trace before the final frees:
    /// compacts the allocator's memory, moving the allocations in `live`
    /// (their handles are replaced by the moved ones). `None` for an
    /// allocator the bench does not defragment (the baselines).
    fn compact(
        &mut self,
        _live: &mut [Option<Self::Handle>],
    ) -> Option<Result<crate::compact::CompactStats, String>> {
        None
    }
}

/// Formats bytes as MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// Which contenders exist, in run order.
pub const CONTENDERS: [&str; 3] = ["ours", "vma", "gpu-allocator"];

/// How the baselines are given requests they can't express exactly.
#[derive(Clone, Copy, Debug, Default)]
pub struct BaselineOptions {
    /// Hide `dedicated: preferred` from VMA (its own rule only: dedicated above
    /// half a block) instead of reporting `prefersDedicatedAllocation`.
    pub vma_ignore_preferred: bool,
}

/// What each contender is given for each trace field, for the report.
pub const REQUEST_MAPPING: &str = "\
- ours: `Allocator::allocate` with the trace's size, alignment, memoryTypeBits, kind, usage preset \
(gpu_only/upload/readback/transient -> MemoryUsage::GpuOnly/Upload/Readback/Transient), the driver's \
dedicated wish (DriverDedicated::None/Preferred/Required, DedicatedPolicy::Auto, no resource handle); \
the tag only with `--tags` (off by default for all three: release engines don't name allocations).
- VMA (vk-mem 0.5): `vmaAllocateMemoryForBuffer` for buffers and `vmaAllocateMemoryForImage` for images, \
given a stand-in handle for which the bench's device function table answers \
vkGetBufferMemoryRequirements2 / vkGetImageMemoryRequirements2 with the trace's size, alignment, \
memoryTypeBits and dedicated wish (prefers/requiresDedicatedAllocation). So VMA knows buffers from images \
for bufferImageGranularity (images as IMAGE_UNKNOWN: vmaAllocateMemoryForImage doesn't know the tiling) and \
honours the driver's dedicated wish as it does with a real resource (`--vma-ignore-preferred` hides \
`preferred`); the stand-in is removed from vkAllocateMemory's VkMemoryDedicatedAllocateInfo, and the \
answered queries count as driver time. (Raw `vmaAllocateMemory` would make every allocation of unknown \
kind, which conflicts with all neighbours under NVIDIA's 1 KiB granularity and made VMA's TLSF search \
~100x slower there.) usage VMA_MEMORY_USAGE_UNKNOWN with flags instead of Auto* (which need a create \
info): gpu_only -> preferred DEVICE_LOCAL; upload -> required HOST_VISIBLE, preferred \
HOST_COHERENT|DEVICE_LOCAL; readback -> required HOST_VISIBLE, preferred HOST_CACHED|HOST_COHERENT; \
transient -> preferred DEVICE_LOCAL|LAZILY_ALLOCATED. With `--tags`, the tag is given as the \
allocation's name (VMA_ALLOCATION_CREATE_USER_DATA_COPY_STRING_BIT, which copies it).
- gpu-allocator 0.28: gpu_only/transient -> MemoryLocation::GpuOnly, upload -> CpuToGpu, readback -> \
GpuToCpu; kind buffer/linear_image -> linear: true, optimal_image -> false; tag -> name (empty \
unless `--tags`). dedicated \
required -> AllocationScheme::DedicatedBuffer/DedicatedImage with a null handle (a VkDeviceMemory of \
its own, with a VkMemoryDedicatedAllocateInfo naming no resource, since the trace has none); preferred -> \
GpuAllocatorManaged (gpu-allocator never asks the driver; its caller chooses).";
