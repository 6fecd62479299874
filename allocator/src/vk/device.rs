//! [`AshDevice`]: the device seam on `ash`.

use std::ptr::NonNull;

use ash::vk;
use ash::vk::Handle;

use crate::device::{
    DedicatedResource, DedicatedTo, DeviceError, DeviceLimits, DeviceMemory, HeapBudget,
    MappedRange, MemoryAllocateInfo, MemoryDevice, MemoryHeap, MemoryProperties, MemoryType,
};
use crate::external::ExternalMemoryHandleTypes;
use crate::priority::MemoryPriority;

/// What the application enabled on the device that the allocator uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AshDeviceOptions {
    /// `VK_EXT_memory_budget` is enabled on the device (and the instance is
    /// Vulkan 1.1 or has `VK_KHR_get_physical_device_properties2`).
    pub memory_budget: bool,
    /// The `bufferDeviceAddress` feature is enabled on the device: every
    /// memory object is then allocated with
    /// `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT`, so any buffer of the
    /// allocator may take a device address (as VMA's and gpu-allocator's
    /// options of that name do). Without it, [`crate::Allocator::create_buffer`]
    /// refuses a buffer with `SHADER_DEVICE_ADDRESS` usage
    /// ([`crate::Error::NotEnabled`]).
    pub buffer_device_address: bool,
    /// `VK_EXT_memory_priority` is enabled on the device (with its
    /// `memoryPriority` feature): allocations and pools with a
    /// [`crate::MemoryPriority`] are allocated with
    /// `VkMemoryPriorityAllocateInfoEXT`. Without it their priorities are
    /// not passed on ([`crate::priority`]).
    pub memory_priority: bool,
    /// `VK_EXT_pageable_device_local_memory` is enabled on the device (with
    /// its `pageableDeviceLocalMemory` feature): priorities can be changed
    /// later ([`crate::Allocator::set_priority`],
    /// [`crate::Allocator::set_pool_priority`]).
    pub pageable_device_local_memory: bool,
    /// The device is Vulkan 1.3 (the instance's `apiVersion` and the
    /// device's are 1.3 or later) or has `VK_KHR_maintenance4` enabled:
    /// memory requirements are read from a create info
    /// (`vkGetDeviceBufferMemoryRequirements`) instead of a throwaway
    /// resource ([`crate::Allocator::buffer_requirements`]).
    pub maintenance4: bool,
    /// The instance has `VK_EXT_debug_utils` enabled: every memory object
    /// is named for what it is (`vkalloc block type 1 pool 'textures' tlsf
    /// #3`, see [`crate::names`]), and buffers and images from their tags
    /// when [`crate::AllocatorDesc::name_resources`] asks for it, so
    /// RenderDoc, Nsight and validation messages say what a handle is.
    pub debug_utils: bool,
    /// `VK_KHR_external_memory_fd` is enabled on the device (Vulkan 1.1
    /// makes `VK_KHR_external_memory` core): pools may export
    /// [`crate::ExternalMemoryHandleTypes::OPAQUE_FD`] memory
    /// ([`crate::PoolDesc::export`], `Allocator::export_fd`) and file
    /// descriptors may be imported (`Allocator::import_fd`).
    pub external_memory_fd: bool,
}

/// A Vulkan 1.1+ device seen through `ash`.
///
/// Holds clones of the `ash` function tables; the caller keeps the
/// `VkInstance` and `VkDevice` alive until the [`crate::Allocator`] that owns
/// this is dropped.
pub struct AshDevice {
    instance: ash::Instance,
    physical_device: vk::PhysicalDevice,
    device: ash::Device,
    properties: MemoryProperties,
    limits: DeviceLimits,
    options: AshDeviceOptions,
    /// `vkSetDeviceMemoryPriorityEXT`, loaded when the options say the
    /// extension is enabled.
    pageable: Option<ash::ext::pageable_device_local_memory::Device>,
    /// `vkGetDevice{Buffer,Image}MemoryRequirements`, loaded when the
    /// options say the device has them.
    requirements: Option<RequirementsFns>,
    /// `vkSetDebugUtilsObjectNameEXT`, loaded when the options say the
    /// instance has the extension.
    debug_utils: Option<ash::ext::debug_utils::Device>,
    /// `vkGetMemoryFdKHR`, loaded when the options say the extension is
    /// enabled.
    external_memory_fd: Option<ash::khr::external_memory_fd::Device>,
}

/// The two commands of Vulkan 1.3 / `VK_KHR_maintenance4` that read memory
/// requirements from a create info.
#[derive(Clone, Copy)]
pub(super) struct RequirementsFns {
    pub buffer: vk::PFN_vkGetDeviceBufferMemoryRequirements,
    pub image: vk::PFN_vkGetDeviceImageMemoryRequirements,
}

/// A device command by its core name, else by its `KHR` name; `None` when
/// the device has neither.
///
/// # Safety
/// `device` is a live device of `instance`.
unsafe fn device_command(
    instance: &ash::Instance,
    device: vk::Device,
    core: &std::ffi::CStr,
    khr: &std::ffi::CStr,
) -> vk::PFN_vkVoidFunction {
    // SAFETY: the caller guarantees the device is live; the names are
    // NUL-terminated.
    unsafe {
        instance
            .get_device_proc_addr(device, core.as_ptr())
            .or_else(|| instance.get_device_proc_addr(device, khr.as_ptr()))
    }
}

impl RequirementsFns {
    /// # Safety
    /// `device` is a live device of `instance`.
    unsafe fn load(instance: &ash::Instance, device: vk::Device) -> Option<Self> {
        // SAFETY: as the caller promises.
        let buffer = unsafe {
            device_command(
                instance,
                device,
                c"vkGetDeviceBufferMemoryRequirements",
                c"vkGetDeviceBufferMemoryRequirementsKHR",
            )
        }?;
        // SAFETY: as above.
        let image = unsafe {
            device_command(
                instance,
                device,
                c"vkGetDeviceImageMemoryRequirements",
                c"vkGetDeviceImageMemoryRequirementsKHR",
            )
        }?;
        // SAFETY: the loader returned these for exactly these commands,
        // whose signatures the PFN types spell.
        unsafe {
            Some(Self {
                buffer: std::mem::transmute::<
                    unsafe extern "system" fn(),
                    vk::PFN_vkGetDeviceBufferMemoryRequirements,
                >(buffer),
                image: std::mem::transmute::<
                    unsafe extern "system" fn(),
                    vk::PFN_vkGetDeviceImageMemoryRequirements,
                >(image),
            })
        }
    }
}

impl std::fmt::Debug for AshDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AshDevice")
            .field("device", &self.device.handle())
            .field("properties", &self.properties)
            .field("limits", &self.limits)
            .finish()
    }
}

/// The one table from `VkResult` to the seam's [`DeviceError`].
pub(super) fn device_error(result: vk::Result) -> DeviceError {
    match result {
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY => DeviceError::OutOfDeviceMemory,
        vk::Result::ERROR_OUT_OF_HOST_MEMORY => DeviceError::OutOfHostMemory,
        vk::Result::ERROR_TOO_MANY_OBJECTS => DeviceError::TooManyObjects,
        vk::Result::ERROR_MEMORY_MAP_FAILED => DeviceError::MemoryMapFailed,
        vk::Result::ERROR_DEVICE_LOST => DeviceError::DeviceLost,
        other => DeviceError::Other(other.as_raw()),
    }
}

impl AshDevice {
    /// Reads the device's memory properties and limits.
    ///
    /// # Safety
    /// - `physical_device` belongs to `instance`, and `device` was created
    ///   from it with Vulkan 1.1 or later.
    /// - `instance` and `device` stay alive until this value is dropped and
    ///   no mapped allocation of the allocator that owns it is left (one leaked
    ///   while mapped outlives the allocator, and `vkDestroyDevice` would unmap
    ///   its memory under it).
    /// - `options` says truly what was enabled.
    pub unsafe fn new(
        instance: &ash::Instance,
        physical_device: vk::PhysicalDevice,
        device: ash::Device,
        options: AshDeviceOptions,
    ) -> Self {
        // SAFETY: the caller guarantees `physical_device` belongs to `instance`.
        let raw = unsafe { instance.get_physical_device_memory_properties(physical_device) };
        let mut maintenance3 = vk::PhysicalDeviceMaintenance3Properties::default();
        let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut maintenance3);
        // SAFETY: as above; Vulkan 1.1 makes the query core.
        unsafe { instance.get_physical_device_properties2(physical_device, &mut props2) };
        let limits = props2.properties.limits;
        let max_memory_allocation_size = maintenance3.max_memory_allocation_size;
        let properties = MemoryProperties {
            types: raw.memory_types[..raw.memory_type_count as usize]
                .iter()
                .map(|t| MemoryType {
                    flags: t.property_flags.into(),
                    heap_index: t.heap_index,
                })
                .collect(),
            heaps: raw.memory_heaps[..raw.memory_heap_count as usize]
                .iter()
                .map(|h| MemoryHeap {
                    size: h.size,
                    device_local: h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL),
                })
                .collect(),
        };
        let requirements = if options.maintenance4 {
            // SAFETY: the caller guarantees `device` is a live device of `instance`.
            unsafe { RequirementsFns::load(instance, device.handle()) }
        } else {
            None
        };
        let debug_utils = options
            .debug_utils
            .then(|| ash::ext::debug_utils::Device::new(instance, &device));
        let external_memory_fd = options
            .external_memory_fd
            .then(|| ash::khr::external_memory_fd::Device::new(instance, &device));
        let pageable = options
            .pageable_device_local_memory
            .then(|| ash::ext::pageable_device_local_memory::Device::new(instance, &device));
        Self {
            instance: instance.clone(),
            physical_device,
            device,
            properties,
            limits: DeviceLimits {
                buffer_image_granularity: limits.buffer_image_granularity.max(1),
                max_memory_allocation_count: limits.max_memory_allocation_count,
                non_coherent_atom_size: limits.non_coherent_atom_size.max(1),
                max_memory_allocation_size: if max_memory_allocation_size == 0 {
                    u64::MAX
                } else {
                    max_memory_allocation_size
                },
                memory_budget: options.memory_budget,
                memory_priority: options.memory_priority,
                pageable_device_local_memory: options.pageable_device_local_memory,
                debug_utils: options.debug_utils,
                external_memory: if options.external_memory_fd {
                    ExternalMemoryHandleTypes::OPAQUE_FD
                } else {
                    ExternalMemoryHandleTypes::NONE
                },
            },
            pageable,
            requirements,
            debug_utils,
            external_memory_fd,
            options,
        }
    }

    /// What the application said it enabled.
    pub fn options(&self) -> AshDeviceOptions {
        self.options
    }

    /// The `ash` device.
    pub fn raw(&self) -> &ash::Device {
        &self.device
    }

    /// The `ash` instance.
    pub fn instance(&self) -> &ash::Instance {
        &self.instance
    }

    /// The physical device.
    pub fn physical_device(&self) -> vk::PhysicalDevice {
        self.physical_device
    }

    /// Whether memory requirements are read from create infos (the options
    /// said Vulkan 1.3 or `VK_KHR_maintenance4`, and the device has the
    /// commands); otherwise a throwaway resource is created for them.
    pub fn reads_requirements_from_create_infos(&self) -> bool {
        self.requirements.is_some()
    }

    pub(super) fn external_memory_fd(&self) -> Option<&ash::khr::external_memory_fd::Device> {
        self.external_memory_fd.as_ref()
    }

    pub(super) fn requirements_fns(&self) -> Option<RequirementsFns> {
        self.requirements
    }

    /// Names a Vulkan object of this device for debuggers
    /// (`vkSetDebugUtilsObjectNameEXT`); nothing where the options say the
    /// instance lacks `VK_EXT_debug_utils`. A name with a NUL byte is cut
    /// there; a failure of the call is logged, never returned (names are
    /// for debugging).
    ///
    /// # Safety
    /// `object` is a live object of this device.
    pub(super) unsafe fn name_object<T: Handle>(&self, object: T, name: &str) {
        let Some(debug_utils) = &self.debug_utils else {
            return;
        };
        let name = name.split('\0').next().unwrap_or_default();
        let Ok(name) = std::ffi::CString::new(name) else {
            return;
        };
        let info = vk::DebugUtilsObjectNameInfoEXT::default()
            .object_handle(object)
            .object_name(&name);
        // SAFETY: the caller guarantees the object is live on this device;
        // the extension is enabled on its instance (the options say so).
        if let Err(e) = unsafe { debug_utils.set_debug_utils_object_name(&info) } {
            log::warn!("vkalloc: vkSetDebugUtilsObjectNameEXT failed: {e}");
        }
    }
}

fn range(r: &MappedRange) -> vk::MappedMemoryRange<'static> {
    vk::MappedMemoryRange::default()
        .memory(vk::DeviceMemory::from_raw(r.memory.0))
        .offset(r.offset)
        .size(r.size)
}

// SAFETY: the properties and limits are read once in `new`; memory comes from
// `vkAllocateMemory` and mappings from `vkMapMemory` of the whole object,
// valid until `vkUnmapMemory`, `vkFreeMemory` or `vkDestroyDevice`, which
// `new`'s caller promises not to call while a mapping of the allocator's is
// alive.
unsafe impl MemoryDevice for AshDevice {
    fn memory_properties(&self) -> &MemoryProperties {
        &self.properties
    }

    fn limits(&self) -> &DeviceLimits {
        &self.limits
    }

    fn heap_budgets(&self, out: &mut [HeapBudget]) -> bool {
        if !self.limits.memory_budget {
            return false;
        }
        let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
        let mut props = vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
        // SAFETY: the instance and physical device are alive (the contract of
        // `new`), and VK_EXT_memory_budget is enabled, so the chained struct
        // is valid to fill.
        unsafe {
            self.instance
                .get_physical_device_memory_properties2(self.physical_device, &mut props)
        };
        for (i, slot) in out.iter_mut().enumerate().take(vk::MAX_MEMORY_HEAPS) {
            *slot = HeapBudget {
                budget: budget.heap_budget[i],
                usage: budget.heap_usage[i],
            };
        }
        true
    }

    unsafe fn allocate_memory(
        &self,
        info: &MemoryAllocateInfo,
    ) -> Result<DeviceMemory, DeviceError> {
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default();
        match info.dedicated.map(DedicatedTo::resource) {
            Some(DedicatedResource::Buffer(b)) => {
                dedicated = dedicated.buffer(vk::Buffer::from_raw(b))
            }
            Some(DedicatedResource::Image(i)) => {
                dedicated = dedicated.image(vk::Image::from_raw(i))
            }
            None => {}
        }
        let mut flags =
            vk::MemoryAllocateFlagsInfo::default().flags(vk::MemoryAllocateFlags::DEVICE_ADDRESS);
        let mut priority = vk::MemoryPriorityAllocateInfoEXT::default()
            .priority(info.priority.map_or(0.5, MemoryPriority::get));
        let mut allocate = vk::MemoryAllocateInfo::default()
            .allocation_size(info.size)
            .memory_type_index(info.memory_type);
        if info.dedicated.is_some() {
            allocate = allocate.push_next(&mut dedicated);
        }
        if self.options.buffer_device_address {
            allocate = allocate.push_next(&mut flags);
        }
        if self.options.memory_priority && info.priority.is_some() {
            allocate = allocate.push_next(&mut priority);
        }
        let mut export = vk::ExportMemoryAllocateInfo::default()
            .handle_types(vk::ExternalMemoryHandleTypeFlags::from_raw(info.export.0));
        if !info.export.is_empty() {
            allocate = allocate.push_next(&mut export);
        }
        // The driver takes ownership of an imported descriptor when the
        // import succeeds: it gets a duplicate, and the caller keeps its own.
        #[cfg(unix)]
        let import = match info.import_fd {
            Some(fd) => {
                use std::os::fd::{AsRawFd, BorrowedFd};
                // SAFETY: the caller guarantees `fd` is open for the call.
                let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
                let duplicate = borrowed
                    .try_clone_to_owned()
                    .map_err(|_| DeviceError::OutOfHostMemory)?;
                Some((duplicate.as_raw_fd(), duplicate))
            }
            None => None,
        };
        #[cfg(not(unix))]
        if info.import_fd.is_some() {
            // VK_ERROR_INVALID_EXTERNAL_HANDLE: no file descriptors here.
            return Err(DeviceError::Other(-1_000_072_003));
        }
        #[cfg(unix)]
        let mut import_info = vk::ImportMemoryFdInfoKHR::default()
            .handle_type(vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD)
            .fd(import.as_ref().map_or(-1, |(fd, _)| *fd));
        #[cfg(unix)]
        if import.is_some() {
            allocate = allocate.push_next(&mut import_info);
        }
        // SAFETY: the caller upholds the trait's contract (valid type, size,
        // unbound dedicated target, enabled export types, an import
        // descriptor of matching memory).
        let result = unsafe { self.device.allocate_memory(&allocate, None) };
        #[cfg(unix)]
        if let (Ok(_), Some((_, duplicate))) = (&result, import) {
            // The driver owns the duplicate now.
            let _ = std::os::fd::IntoRawFd::into_raw_fd(duplicate);
        }
        result
            .map(|m| DeviceMemory(m.as_raw()))
            .map_err(device_error)
    }

    unsafe fn free_memory(&self, memory: DeviceMemory) {
        // SAFETY: the caller guarantees the memory is live, unmapped and unused.
        unsafe {
            self.device
                .free_memory(vk::DeviceMemory::from_raw(memory.0), None)
        }
    }

    unsafe fn map_memory(&self, memory: DeviceMemory) -> Result<NonNull<u8>, DeviceError> {
        // SAFETY: the caller guarantees the memory is live, host-visible and
        // not mapped yet.
        let ptr = unsafe {
            self.device.map_memory(
                vk::DeviceMemory::from_raw(memory.0),
                0,
                vk::WHOLE_SIZE,
                vk::MemoryMapFlags::empty(),
            )
        }
        .map_err(device_error)?;
        NonNull::new(ptr.cast()).ok_or(DeviceError::MemoryMapFailed)
    }

    unsafe fn unmap_memory(&self, memory: DeviceMemory) {
        // SAFETY: the caller guarantees the memory is live and mapped.
        unsafe {
            self.device
                .unmap_memory(vk::DeviceMemory::from_raw(memory.0))
        }
    }

    unsafe fn flush_ranges(&self, ranges: &[MappedRange]) -> Result<(), DeviceError> {
        let ranges: Vec<_> = ranges.iter().map(range).collect();
        // SAFETY: the caller guarantees each range is inside live mapped
        // memory and aligned to nonCoherentAtomSize.
        unsafe { self.device.flush_mapped_memory_ranges(&ranges) }.map_err(device_error)
    }

    unsafe fn invalidate_ranges(&self, ranges: &[MappedRange]) -> Result<(), DeviceError> {
        let ranges: Vec<_> = ranges.iter().map(range).collect();
        // SAFETY: as for `flush_ranges`.
        unsafe { self.device.invalidate_mapped_memory_ranges(&ranges) }.map_err(device_error)
    }

    unsafe fn set_memory_priority(&self, memory: DeviceMemory, priority: MemoryPriority) {
        let Some(pageable) = &self.pageable else {
            // The caller checked `pageable_device_local_memory`, which is
            // set exactly when the table is loaded: not reached.
            return;
        };
        // SAFETY: the caller guarantees `memory` is live on this device; the
        // extension is enabled (the options say so) and its function loaded.
        unsafe {
            (pageable.fp().set_device_memory_priority_ext)(
                self.device.handle(),
                vk::DeviceMemory::from_raw(memory.0),
                priority.get(),
            )
        }
    }

    unsafe fn set_memory_name(&self, memory: DeviceMemory, name: &str) {
        // SAFETY: the caller guarantees `memory` is live on this device.
        unsafe { self.name_object(vk::DeviceMemory::from_raw(memory.0), name) }
    }

    unsafe fn destroy_resource(&self, resource: DedicatedResource) {
        match resource {
            // SAFETY: the caller guarantees the buffer is live on this
            // device, unused, and destroyed once.
            DedicatedResource::Buffer(b) => unsafe {
                self.device.destroy_buffer(vk::Buffer::from_raw(b), None)
            },
            // SAFETY: as for buffers.
            DedicatedResource::Image(i) => unsafe {
                self.device.destroy_image(vk::Image::from_raw(i), None)
            },
        }
    }
}
