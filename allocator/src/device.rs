//! The device seam: the only way the allocator reaches a Vulkan device.
//!
//! The core of the crate never names Vulkan. It sees a device as plain data
//! (its [`MemoryProperties`] and [`DeviceLimits`]) plus a handful of `unsafe`
//! calls (allocate, free, map, unmap, flush, invalidate, budget). Two
//! implementations exist: [`crate::vk::AshDevice`] on a real device, and
//! `crate::sim::SimDevice` (feature `sim`), a simulated device that carries the memory tables
//! of real GPUs and injects failures.

use std::fmt;
use std::ptr::NonNull;

use serde::{Deserialize, Serialize};

use crate::allocation::Allocation;
use crate::external::ExternalMemoryHandleTypes;
use crate::priority::MemoryPriority;

/// Bits of `VkMemoryPropertyFlags`, with the same values as Vulkan.
///
/// A plain `u32` newtype so the core stays free of `ash`; [`crate::vk`]
/// converts from and to `ash::vk::MemoryPropertyFlags`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MemoryPropertyFlags(pub u32);

impl MemoryPropertyFlags {
    /// No property.
    pub const NONE: Self = Self(0);
    /// `VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT`.
    pub const DEVICE_LOCAL: Self = Self(0x1);
    /// `VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT`: the memory can be mapped.
    pub const HOST_VISIBLE: Self = Self(0x2);
    /// `VK_MEMORY_PROPERTY_HOST_COHERENT_BIT`: no flush or invalidate needed.
    pub const HOST_COHERENT: Self = Self(0x4);
    /// `VK_MEMORY_PROPERTY_HOST_CACHED_BIT`: fast host reads.
    pub const HOST_CACHED: Self = Self(0x8);
    /// `VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT`: tile memory on mobile GPUs.
    pub const LAZILY_ALLOCATED: Self = Self(0x10);
    /// `VK_MEMORY_PROPERTY_PROTECTED_BIT`.
    pub const PROTECTED: Self = Self(0x20);
    /// `VK_MEMORY_PROPERTY_DEVICE_COHERENT_BIT_AMD`.
    pub const DEVICE_COHERENT_AMD: Self = Self(0x40);
    /// `VK_MEMORY_PROPERTY_DEVICE_UNCACHED_BIT_AMD`.
    pub const DEVICE_UNCACHED_AMD: Self = Self(0x80);

    /// Whether every bit of `other` is set in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any bit of `other` is set in `self`.
    pub const fn intersects(self, other: Self) -> bool {
        self.0 & other.0 != 0
    }

    /// Whether no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The number of set bits.
    pub const fn count(self) -> u32 {
        self.0.count_ones()
    }
}

impl std::ops::BitOr for MemoryPropertyFlags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl std::ops::BitAnd for MemoryPropertyFlags {
    type Output = Self;
    fn bitand(self, rhs: Self) -> Self {
        Self(self.0 & rhs.0)
    }
}

impl std::ops::Not for MemoryPropertyFlags {
    type Output = Self;
    fn not(self) -> Self {
        Self(!self.0)
    }
}

impl std::ops::BitOrAssign for MemoryPropertyFlags {
    fn bitor_assign(&mut self, rhs: Self) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for MemoryPropertyFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(MemoryPropertyFlags, &str); 8] = [
            (MemoryPropertyFlags::DEVICE_LOCAL, "DEVICE_LOCAL"),
            (MemoryPropertyFlags::HOST_VISIBLE, "HOST_VISIBLE"),
            (MemoryPropertyFlags::HOST_COHERENT, "HOST_COHERENT"),
            (MemoryPropertyFlags::HOST_CACHED, "HOST_CACHED"),
            (MemoryPropertyFlags::LAZILY_ALLOCATED, "LAZILY_ALLOCATED"),
            (MemoryPropertyFlags::PROTECTED, "PROTECTED"),
            (
                MemoryPropertyFlags::DEVICE_COHERENT_AMD,
                "DEVICE_COHERENT_AMD",
            ),
            (
                MemoryPropertyFlags::DEVICE_UNCACHED_AMD,
                "DEVICE_UNCACHED_AMD",
            ),
        ];
        if self.is_empty() {
            return f.write_str("NONE");
        }
        let mut first = true;
        for (flag, name) in NAMES {
            if self.contains(flag) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        let unknown = self.0 & !0xff;
        if unknown != 0 {
            if !first {
                f.write_str("|")?;
            }
            write!(f, "{unknown:#x}")?;
        }
        Ok(())
    }
}

impl fmt::Display for MemoryPropertyFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// One `VkMemoryHeap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryHeap {
    /// The heap's size in bytes, as the driver reports it.
    pub size: u64,
    /// Whether `VK_MEMORY_HEAP_DEVICE_LOCAL_BIT` is set.
    pub device_local: bool,
}

/// One `VkMemoryType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryType {
    /// The type's property flags.
    pub flags: MemoryPropertyFlags,
    /// The heap the type draws from.
    pub heap_index: u32,
}

/// A device's memory heaps and types: `VkPhysicalDeviceMemoryProperties` as
/// plain data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryProperties {
    /// The memory types, indexed as Vulkan indexes them (at most 32).
    pub types: Vec<MemoryType>,
    /// The memory heaps (at most 16).
    pub heaps: Vec<MemoryHeap>,
}

impl MemoryProperties {
    /// The heap of memory type `type_index`.
    ///
    /// # Panics
    /// If `type_index` is out of range: callers only pass indices they got
    /// from this table.
    pub fn heap_of(&self, type_index: u32) -> u32 {
        self.types[type_index as usize].heap_index
    }

    /// A mask with one bit per memory type that exists.
    pub fn all_types_mask(&self) -> u32 {
        if self.types.len() >= 32 {
            u32::MAX
        } else {
            (1u32 << self.types.len()) - 1
        }
    }
}

/// The limits and capabilities of a device that the allocator obeys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceLimits {
    /// `bufferImageGranularity`: linear and optimal resources never share a
    /// page of this size inside one block.
    pub buffer_image_granularity: u64,
    /// `maxMemoryAllocationCount`: live `VkDeviceMemory` objects at most.
    pub max_memory_allocation_count: u32,
    /// `nonCoherentAtomSize`: flush and invalidate ranges are rounded to it.
    pub non_coherent_atom_size: u64,
    /// `maxMemoryAllocationSize` (Vulkan 1.1); `u64::MAX` when unknown.
    pub max_memory_allocation_size: u64,
    /// Whether `VK_EXT_memory_budget` is enabled, so [`MemoryDevice::heap_budgets`] reports real figures.
    pub memory_budget: bool,
    /// Whether `VK_EXT_memory_priority` is enabled: [`MemoryAllocateInfo::priority`]
    /// reaches the driver (otherwise it is not passed on).
    #[serde(default)]
    pub memory_priority: bool,
    /// Whether `VK_EXT_pageable_device_local_memory` is enabled:
    /// [`MemoryDevice::set_memory_priority`] may be called.
    #[serde(default)]
    pub pageable_device_local_memory: bool,
    /// Whether the instance has `VK_EXT_debug_utils` enabled:
    /// [`MemoryDevice::set_memory_name`] may be called, and the allocator
    /// names every memory object it makes ([`crate::names`]).
    #[serde(default)]
    pub debug_utils: bool,
    /// The external memory handle types whose extensions are enabled
    /// (`VK_KHR_external_memory_fd`: [`ExternalMemoryHandleTypes::OPAQUE_FD`]):
    /// what pools may export and memory may be imported as.
    #[serde(default)]
    pub external_memory: ExternalMemoryHandleTypes,
}

impl Default for DeviceLimits {
    fn default() -> Self {
        Self {
            buffer_image_granularity: 1,
            max_memory_allocation_count: 4096,
            non_coherent_atom_size: 1,
            max_memory_allocation_size: u64::MAX,
            memory_budget: false,
            memory_priority: false,
            pageable_device_local_memory: false,
            debug_utils: false,
            external_memory: ExternalMemoryHandleTypes::NONE,
        }
    }
}

/// What a heap's budget says, from `VK_EXT_memory_budget`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeapBudget {
    /// Bytes this process may use in the heap before it risks failures or
    /// eviction (`heapBudget`).
    pub budget: u64,
    /// Bytes the whole process uses in the heap now (`heapUsage`).
    pub usage: u64,
}

/// An opaque `VkDeviceMemory` handle (its raw `u64`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceMemory(pub u64);

/// A resource named by raw Vulkan handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DedicatedResource {
    /// A `VkBuffer`.
    Buffer(u64),
    /// A `VkImage`.
    Image(u64),
}

/// The resource a dedicated allocation is made for
/// (`VkMemoryDedicatedAllocateInfo`).
///
/// The driver reads the handle when the memory is allocated, so a value can
/// only be made with the `unsafe` [`DedicatedTo::new`]: safe code can pass
/// one along, never invent one. The create-and-bind helpers in
/// [`crate::vk`] make it for you.
///
/// ```compile_fail
/// use vkalloc::{DedicatedResource, DedicatedTo};
/// let forged = DedicatedTo::new(DedicatedResource::Image(0xdead)); // error: `unsafe` fn
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DedicatedTo(DedicatedResource);

impl DedicatedTo {
    /// Names `resource` for a dedicated allocation.
    ///
    /// # Safety
    /// For as long as this value (or a copy) may be passed in an
    /// [`crate::AllocationDesc`], `resource` is a live buffer or image of the
    /// allocator's device, not yet bound to memory, whose memory requirements
    /// gave that request's size and memory type bits (the valid usage of
    /// `VkMemoryDedicatedAllocateInfo`).
    pub unsafe fn new(resource: DedicatedResource) -> Self {
        Self(resource)
    }

    /// The resource named.
    pub fn resource(self) -> DedicatedResource {
        self.0
    }
}

/// A buffer or image whose memory a [`crate::FreeQueue`] frees after destroying
/// it. Made only through the `unsafe` [`RetiredResource::new`] (the
/// `destroy_*_after` methods of [`crate::FreeQueue`] with feature `ash` make it for
/// you), so safe code can't queue a made-up handle for destruction.
#[derive(Debug)]
pub struct RetiredResource {
    resource: DedicatedResource,
    allocation: Allocation,
}

impl RetiredResource {
    /// Pairs a resource with the memory bound to it, for a [`crate::FreeQueue`].
    ///
    /// # Safety
    /// `resource` is a live buffer or image of the device of the allocator
    /// that made `allocation`, bound to it; nothing else destroys it; and
    /// once the GPU has reached the value it is queued with, the device no
    /// longer uses it and no view of it is left (it is destroyed then).
    pub unsafe fn new(resource: DedicatedResource, allocation: Allocation) -> Self {
        Self {
            resource,
            allocation,
        }
    }

    /// The resource.
    pub fn resource(&self) -> DedicatedResource {
        self.resource
    }

    /// Its memory.
    pub fn allocation(&self) -> &Allocation {
        &self.allocation
    }

    /// The resource's handle and its memory, apart: the caller destroys the
    /// handle and frees the memory itself.
    pub fn into_parts(self) -> (DedicatedResource, Allocation) {
        (self.resource, self.allocation)
    }
}

/// One call to `vkAllocateMemory`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryAllocateInfo {
    /// Bytes to allocate.
    pub size: u64,
    /// The memory type index.
    pub memory_type: u32,
    /// The resource the memory is dedicated to, if any.
    pub dedicated: Option<DedicatedTo>,
    /// Its priority (`VkMemoryPriorityAllocateInfoEXT`), passed on only
    /// where [`DeviceLimits::memory_priority`] says the extension is enabled.
    pub priority: Option<MemoryPriority>,
    /// Handle types to allocate the memory exportable with
    /// (`VkExportMemoryAllocateInfo`); empty for memory that is not exported.
    pub export: ExternalMemoryHandleTypes,
    /// A file descriptor to import the memory from
    /// (`VkImportMemoryFdInfoKHR`, [`ExternalMemoryHandleTypes::OPAQUE_FD`]),
    /// borrowed for the call: the device imports a duplicate, and the caller
    /// keeps (and closes) its own.
    pub import_fd: Option<i32>,
}

/// A range of a mapped `VkDeviceMemory` to flush or invalidate
/// (`VkMappedMemoryRange`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MappedRange {
    /// The memory object.
    pub memory: DeviceMemory,
    /// Offset in bytes from the start of the memory object; a multiple of
    /// `nonCoherentAtomSize`.
    pub offset: u64,
    /// Bytes; a multiple of `nonCoherentAtomSize`, or reaching the end of the
    /// memory object.
    pub size: u64,
}

/// A failure reported by the device (a `VkResult` error code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// `VK_ERROR_OUT_OF_DEVICE_MEMORY`.
    #[error("the device is out of memory in this heap")]
    OutOfDeviceMemory,
    /// `VK_ERROR_OUT_OF_HOST_MEMORY`.
    #[error("the host is out of memory")]
    OutOfHostMemory,
    /// `VK_ERROR_TOO_MANY_OBJECTS`: past `maxMemoryAllocationCount`.
    #[error("too many device memory objects")]
    TooManyObjects,
    /// `VK_ERROR_MEMORY_MAP_FAILED`.
    #[error("mapping the memory failed")]
    MemoryMapFailed,
    /// `VK_ERROR_DEVICE_LOST`.
    #[error("the device was lost")]
    DeviceLost,
    /// Any other `VkResult` error code.
    #[error("the device returned VkResult {0}")]
    Other(i32),
}

/// The device seam: everything the allocator asks of a Vulkan device.
///
/// Implementations must be `Send + Sync`: the allocator calls them from any
/// thread, holding no lock of its own across [`MemoryDevice::allocate_memory`]
/// and [`MemoryDevice::free_memory`] other than the lock of the memory type or
/// pool being grown.
///
/// # Safety
/// The allocator hands out safe views of mapped memory
/// ([`crate::MappedAllocation::as_mut_slice`], `write`, `read`) on the word
/// of the device, so an implementation promises, for as long as the
/// allocator (or any allocation it made) uses it:
/// - [`Self::memory_properties`] and [`Self::limits`] return the same valid
///   values every time (heap indices in range, at most 32 types and 16 heaps).
/// - A successful [`Self::allocate_memory`] returns a memory object of at
///   least `info.size` bytes that no other live allocation of this device
///   shares.
/// - A successful [`Self::map_memory`] returns the address of the first of
///   `size` host bytes (the object's allocated size) that are readable and
///   writable, that nothing else reads or writes except through that mapping,
///   and that stay valid until [`Self::unmap_memory`] or
///   [`Self::free_memory`] of that object, even after the device value itself
///   is dropped (a dropped device leaves its mapped objects' host bytes in
///   place: the allocator keeps the blocks of leaked mappings rather than free
///   memory a safe slice may still point into).
pub unsafe trait MemoryDevice: Send + Sync {
    /// The device's memory heaps and types. Constant for the device's life.
    fn memory_properties(&self) -> &MemoryProperties;

    /// The limits the allocator obeys. Constant for the device's life.
    fn limits(&self) -> &DeviceLimits;

    /// Fills `out` (one entry per heap) with the current budget and usage
    /// from `VK_EXT_memory_budget`, and returns `true`; returns `false` and
    /// leaves `out` untouched where the extension is missing.
    fn heap_budgets(&self, out: &mut [HeapBudget]) -> bool;

    /// `vkAllocateMemory`.
    ///
    /// # Safety
    /// - `info.memory_type` is an index into [`Self::memory_properties`]'s types.
    /// - `info.size` is non-zero and at most `maxMemoryAllocationSize`.
    /// - If `info.dedicated` is set, the handle names a live buffer or image of
    ///   this device that is not yet bound to memory, and `info.size` equals
    ///   its memory requirements' size.
    /// - `info.export` holds only types of [`DeviceLimits::external_memory`].
    /// - If `info.import_fd` is set, it is an open file descriptor of memory
    ///   exported with `OPAQUE_FD` from a memory object of `info.size` bytes
    ///   and a compatible memory type, and `OPAQUE_FD` is in
    ///   [`DeviceLimits::external_memory`].
    unsafe fn allocate_memory(
        &self,
        info: &MemoryAllocateInfo,
    ) -> Result<DeviceMemory, DeviceError>;

    /// `vkFreeMemory`.
    ///
    /// # Safety
    /// - `memory` was returned by [`Self::allocate_memory`] of this device and
    ///   is not freed yet.
    /// - No resource bound to it is still in use by the device, and it is not
    ///   mapped (call [`Self::unmap_memory`] first).
    unsafe fn free_memory(&self, memory: DeviceMemory);

    /// `vkMapMemory` of the whole memory object; returns the host address of
    /// its first byte.
    ///
    /// # Safety
    /// - `memory` is live, of a `HOST_VISIBLE` type, and not mapped already.
    unsafe fn map_memory(&self, memory: DeviceMemory) -> Result<NonNull<u8>, DeviceError>;

    /// `vkUnmapMemory`.
    ///
    /// # Safety
    /// - `memory` is live and mapped, and no pointer into the mapping is used
    ///   after the call.
    unsafe fn unmap_memory(&self, memory: DeviceMemory);

    /// `vkFlushMappedMemoryRanges`: makes host writes visible to the device.
    ///
    /// # Safety
    /// - Every range's memory is live and mapped, and each range lies inside
    ///   it, aligned as [`MappedRange`] says.
    unsafe fn flush_ranges(&self, ranges: &[MappedRange]) -> Result<(), DeviceError>;

    /// `vkInvalidateMappedMemoryRanges`: makes device writes visible to the host.
    ///
    /// # Safety
    /// - As for [`Self::flush_ranges`].
    unsafe fn invalidate_ranges(&self, ranges: &[MappedRange]) -> Result<(), DeviceError>;

    /// `vkDestroyBuffer` or `vkDestroyImage`: destroys a resource whose
    /// memory the allocator frees right after (a [`crate::FreeQueue`]
    /// retiring a buffer or image).
    ///
    /// # Safety
    /// - `resource` is a live buffer or image of this device, the device no
    ///   longer uses it, no view of it is left, and it is not destroyed again.
    unsafe fn destroy_resource(&self, resource: DedicatedResource);

    /// `vkSetDeviceMemoryPriorityEXT`: changes the priority of a memory
    /// object.
    ///
    /// # Safety
    /// - `memory` is live, and [`DeviceLimits::pageable_device_local_memory`]
    ///   is `true` (the extension is enabled).
    unsafe fn set_memory_priority(&self, memory: DeviceMemory, priority: MemoryPriority);

    /// `vkSetDebugUtilsObjectNameEXT` of a memory object: names it for
    /// debuggers and validation messages ([`crate::names`]).
    ///
    /// # Safety
    /// - `memory` is live, and [`DeviceLimits::debug_utils`] is `true` (the
    ///   instance has the extension enabled).
    unsafe fn set_memory_name(&self, memory: DeviceMemory, name: &str);
    /// Milliseconds on a monotonic clock: the allocator's idle release
    /// ([`crate::StrategySettings::idle_release_ms`]) reads it. The default
    /// is the process's monotonic clock (`std::time::Instant`); a simulated
    /// device gives its own, which tests move by hand.
    fn monotonic_ms(&self) -> u64 {
        process_ms()
    }
}

/// Milliseconds since the first call in this process, on
/// `std::time::Instant`'s monotonic clock.
pub fn process_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// A shared device is a device: tests keep an `Arc<SimDevice>` to inspect it
/// while the allocator owns a clone.
// SAFETY: every call goes to the inner device, which keeps the contract.
unsafe impl<T: MemoryDevice + ?Sized> MemoryDevice for std::sync::Arc<T> {
    fn memory_properties(&self) -> &MemoryProperties {
        (**self).memory_properties()
    }

    fn limits(&self) -> &DeviceLimits {
        (**self).limits()
    }

    fn heap_budgets(&self, out: &mut [HeapBudget]) -> bool {
        (**self).heap_budgets(out)
    }

    fn monotonic_ms(&self) -> u64 {
        (**self).monotonic_ms()
    }

    unsafe fn allocate_memory(
        &self,
        info: &MemoryAllocateInfo,
    ) -> Result<DeviceMemory, DeviceError> {
        // SAFETY: the caller upholds the same contract for the inner device.
        unsafe { (**self).allocate_memory(info) }
    }

    unsafe fn free_memory(&self, memory: DeviceMemory) {
        // SAFETY: as above.
        unsafe { (**self).free_memory(memory) }
    }

    unsafe fn map_memory(&self, memory: DeviceMemory) -> Result<NonNull<u8>, DeviceError> {
        // SAFETY: as above.
        unsafe { (**self).map_memory(memory) }
    }

    unsafe fn unmap_memory(&self, memory: DeviceMemory) {
        // SAFETY: as above.
        unsafe { (**self).unmap_memory(memory) }
    }

    unsafe fn flush_ranges(&self, ranges: &[MappedRange]) -> Result<(), DeviceError> {
        // SAFETY: as above.
        unsafe { (**self).flush_ranges(ranges) }
    }

    unsafe fn invalidate_ranges(&self, ranges: &[MappedRange]) -> Result<(), DeviceError> {
        // SAFETY: as above.
        unsafe { (**self).invalidate_ranges(ranges) }
    }

    unsafe fn destroy_resource(&self, resource: DedicatedResource) {
        // SAFETY: as above.
        unsafe { (**self).destroy_resource(resource) }
    }

    unsafe fn set_memory_priority(&self, memory: DeviceMemory, priority: MemoryPriority) {
        // SAFETY: as above.
        unsafe { (**self).set_memory_priority(memory, priority) }
    }

    unsafe fn set_memory_name(&self, memory: DeviceMemory, name: &str) {
        // SAFETY: as above.
        unsafe { (**self).set_memory_name(memory, name) }
    }
}
