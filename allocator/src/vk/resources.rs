//! Create-and-bind helpers: a buffer or image and its memory in one call.

use ash::vk;
use ash::vk::Handle;

use super::AshDevice;
use crate::desc::{AllocationDesc, AllocationOptions, DriverDedicated, ResourceKind};
use crate::device::DedicatedTo;
use crate::{Allocation, Allocator, Error, MappedAllocation};

fn vulkan(call: &'static str) -> impl Fn(vk::Result) -> Error {
    move |result| Error::Vulkan {
        call,
        result: result.as_raw(),
    }
}

fn driver_dedicated(req: &vk::MemoryDedicatedRequirements<'_>) -> DriverDedicated {
    if req.requires_dedicated_allocation == vk::TRUE {
        DriverDedicated::Required
    } else if req.prefers_dedicated_allocation == vk::TRUE {
        DriverDedicated::Preferred
    } else {
        DriverDedicated::None
    }
}

impl Allocator<AshDevice> {
    /// The allocation request for an existing buffer, from its memory
    /// requirements (`vkGetBufferMemoryRequirements2`, with the driver's
    /// dedicated-allocation preference).
    ///
    /// # Safety
    /// `buffer` is a live buffer of this allocator's device.
    pub unsafe fn buffer_desc<'a>(
        &self,
        buffer: vk::Buffer,
        options: &AllocationOptions<'a>,
    ) -> AllocationDesc<'a> {
        let device = self.device().raw();
        let mut dedicated = vk::MemoryDedicatedRequirements::default();
        let mut requirements = vk::MemoryRequirements2::default().push_next(&mut dedicated);
        let info = vk::BufferMemoryRequirementsInfo2::default().buffer(buffer);
        // SAFETY: the caller guarantees `buffer` is live on this device.
        unsafe { device.get_buffer_memory_requirements2(&info, &mut requirements) };
        let r = requirements.memory_requirements;
        AllocationDesc {
            size: r.size,
            alignment: r.alignment,
            memory_type_bits: r.memory_type_bits,
            kind: ResourceKind::Buffer,
            driver_dedicated: driver_dedicated(&dedicated),
            dedicated_to: Some(DedicatedTo::Buffer(buffer.as_raw())),
            options: *options,
        }
    }

    /// The allocation request for an existing image; see [`Self::buffer_desc`].
    ///
    /// # Safety
    /// `image` is a live image of this allocator's device, created with `tiling`.
    pub unsafe fn image_desc<'a>(
        &self,
        image: vk::Image,
        tiling: vk::ImageTiling,
        options: &AllocationOptions<'a>,
    ) -> AllocationDesc<'a> {
        let device = self.device().raw();
        let mut dedicated = vk::MemoryDedicatedRequirements::default();
        let mut requirements = vk::MemoryRequirements2::default().push_next(&mut dedicated);
        let info = vk::ImageMemoryRequirementsInfo2::default().image(image);
        // SAFETY: the caller guarantees `image` is live on this device.
        unsafe { device.get_image_memory_requirements2(&info, &mut requirements) };
        let r = requirements.memory_requirements;
        AllocationDesc {
            size: r.size,
            alignment: r.alignment,
            memory_type_bits: r.memory_type_bits,
            kind: if tiling == vk::ImageTiling::LINEAR {
                ResourceKind::LinearImage
            } else {
                ResourceKind::OptimalImage
            },
            driver_dedicated: driver_dedicated(&dedicated),
            dedicated_to: Some(DedicatedTo::Image(image.as_raw())),
            options: *options,
        }
    }

    /// Creates a buffer, allocates memory for it and binds it.
    ///
    /// On any error nothing is left behind: the buffer is destroyed and the
    /// memory freed.
    ///
    /// # Safety
    /// `info` is a valid `VkBufferCreateInfo` for this device (Vulkan's valid
    /// usage rules; the validation layer checks them).
    ///
    /// # Errors
    /// [`Error::Vulkan`] if creating or binding fails; any allocation error.
    pub unsafe fn create_buffer(
        &self,
        info: &vk::BufferCreateInfo<'_>,
        options: &AllocationOptions<'_>,
    ) -> Result<(vk::Buffer, Allocation), Error> {
        // SAFETY: the caller guarantees `info` is valid.
        unsafe { self.create_buffer_with(info, options, |desc| self.allocate(desc)) }
    }

    /// Creates a buffer in host-visible memory, mapped for its whole life.
    ///
    /// # Safety
    /// As [`Self::create_buffer`].
    ///
    /// # Errors
    /// As [`Self::create_buffer`].
    pub unsafe fn create_buffer_mapped(
        &self,
        info: &vk::BufferCreateInfo<'_>,
        options: &AllocationOptions<'_>,
    ) -> Result<(vk::Buffer, MappedAllocation), Error> {
        // SAFETY: the caller guarantees `info` is valid.
        unsafe { self.create_buffer_with(info, options, |desc| self.allocate_mapped(desc)) }
    }

    /// # Safety
    /// As [`Self::create_buffer`].
    unsafe fn create_buffer_with<A: AsRef<Allocation> + Into<Allocation>>(
        &self,
        info: &vk::BufferCreateInfo<'_>,
        options: &AllocationOptions<'_>,
        allocate: impl FnOnce(&AllocationDesc<'_>) -> Result<A, Error>,
    ) -> Result<(vk::Buffer, A), Error> {
        let device = self.device().raw();
        // SAFETY: the caller guarantees `info` is valid.
        let buffer =
            unsafe { device.create_buffer(info, None) }.map_err(vulkan("vkCreateBuffer"))?;
        // SAFETY: `buffer` was just created on this device.
        let desc = unsafe { self.buffer_desc(buffer, options) };
        let allocation = match allocate(&desc) {
            Ok(a) => a,
            Err(e) => {
                // SAFETY: the buffer is unused and unbound.
                unsafe { device.destroy_buffer(buffer, None) };
                return Err(e);
            }
        };
        let a = allocation.as_ref();
        // SAFETY: the allocation is a range of `desc.size` bytes at an offset
        // aligned as the buffer requires, in a memory type its bits allow.
        let bound = unsafe { device.bind_buffer_memory(buffer, a.vk_memory(), a.offset()) };
        if let Err(e) = bound {
            // SAFETY: the buffer is unused; its memory is given back below.
            unsafe { device.destroy_buffer(buffer, None) };
            self.free(allocation)?;
            return Err(vulkan("vkBindBufferMemory")(e));
        }
        Ok((buffer, allocation))
    }

    /// Creates an image, allocates memory for it and binds it.
    ///
    /// The resource kind (linear or optimal) is read from `info.tiling`.
    ///
    /// # Safety
    /// `info` is a valid `VkImageCreateInfo` for this device.
    ///
    /// # Errors
    /// [`Error::Vulkan`] if creating or binding fails; any allocation error.
    pub unsafe fn create_image(
        &self,
        info: &vk::ImageCreateInfo<'_>,
        options: &AllocationOptions<'_>,
    ) -> Result<(vk::Image, Allocation), Error> {
        let device = self.device().raw();
        // SAFETY: the caller guarantees `info` is valid.
        let image = unsafe { device.create_image(info, None) }.map_err(vulkan("vkCreateImage"))?;
        // SAFETY: `image` was just created on this device with `info.tiling`.
        let desc = unsafe { self.image_desc(image, info.tiling, options) };
        let allocation = match self.allocate(&desc) {
            Ok(a) => a,
            Err(e) => {
                // SAFETY: the image is unused and unbound.
                unsafe { device.destroy_image(image, None) };
                return Err(e);
            }
        };
        // SAFETY: as for buffers in `create_buffer_with`.
        let bound =
            unsafe { device.bind_image_memory(image, allocation.vk_memory(), allocation.offset()) };
        if let Err(e) = bound {
            // SAFETY: the image is unused; its memory is given back below.
            unsafe { device.destroy_image(image, None) };
            self.free(allocation)?;
            return Err(vulkan("vkBindImageMemory")(e));
        }
        Ok((image, allocation))
    }

    /// Destroys a buffer and frees its memory.
    ///
    /// # Safety
    /// `buffer` was made by [`Self::create_buffer`] (or bound to
    /// `allocation`) and the device no longer uses it.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`] if another allocator made the allocation.
    pub unsafe fn destroy_buffer(
        &self,
        buffer: vk::Buffer,
        allocation: impl Into<Allocation>,
    ) -> Result<(), Error> {
        // SAFETY: the caller guarantees the device is done with the buffer.
        unsafe { self.device().raw().destroy_buffer(buffer, None) };
        self.free(allocation)
    }

    /// Destroys an image and frees its memory.
    ///
    /// # Safety
    /// `image` was made by [`Self::create_image`] and the device no longer uses it.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`] if another allocator made the allocation.
    pub unsafe fn destroy_image(
        &self,
        image: vk::Image,
        allocation: impl Into<Allocation>,
    ) -> Result<(), Error> {
        // SAFETY: the caller guarantees the device is done with the image.
        unsafe { self.device().raw().destroy_image(image, None) };
        self.free(allocation)
    }
}
