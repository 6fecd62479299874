//! Create-and-bind helpers: a buffer or image and its memory in one call,
//! handed out as one typed value ([`Buffer`], [`MappedBuffer`], [`Image`])
//! and destroyed as one, so an image's memory can't be passed where a
//! buffer's is expected.

use ash::vk;
use ash::vk::Handle;

use super::bound::{Buffer, DestroyError, Image, MappedBuffer};
use super::requirements::driver_dedicated;
use super::AshDevice;
use crate::desc::{AllocationDesc, AllocationOptions, ResourceKind};
use crate::device::{DedicatedResource, DedicatedTo, DeviceError};
use crate::error::DeviceCall;
use crate::{Allocation, Allocator, Error};

/// A failed resource call as an [`Error`]: memory errors through the one
/// table ([`super::device::device_error`], then the seam's), anything else
/// as [`Error::Vulkan`] naming the call.
pub(super) fn vulkan(call: &'static str) -> impl Fn(vk::Result) -> Error {
    move |result| match super::device::device_error(result) {
        DeviceError::Other(raw) => Error::Vulkan { call, result: raw },
        e => Error::from_device(e, DeviceCall::default()),
    }
}

impl Allocator<AshDevice> {
    /// The allocation request for an existing buffer, from its memory
    /// requirements (`vkGetBufferMemoryRequirements2`, with the driver's
    /// dedicated-allocation preference).
    ///
    /// # Safety
    /// `buffer` is a live buffer of this allocator's device, not bound to
    /// memory, and stays so while the returned request (which names it for a
    /// dedicated allocation) is used.
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
            // SAFETY: the caller guarantees `buffer` is live on this device;
            // its requirements gave this request's size and bits.
            dedicated_to: Some(unsafe {
                DedicatedTo::new(DedicatedResource::Buffer(buffer.as_raw()))
            }),
            options: *options,
        }
    }

    /// The allocation request for an existing image; see [`Self::buffer_desc`].
    ///
    /// # Safety
    /// `image` is a live image of this allocator's device, created with
    /// `tiling`, not bound to memory, and stays so while the returned request
    /// is used.
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
            // SAFETY: as in `buffer_desc`.
            dedicated_to: Some(unsafe {
                DedicatedTo::new(DedicatedResource::Image(image.as_raw()))
            }),
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
    ) -> Result<Buffer, Error> {
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
    ) -> Result<MappedBuffer, Error> {
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
    ) -> Result<Buffer<A>, Error> {
        if info
            .usage
            .contains(vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS)
            && !self.device().options().buffer_device_address
        {
            return Err(Error::NotEnabled(
                "a buffer with SHADER_DEVICE_ADDRESS usage needs memory allocated with \
                 VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT: enable bufferDeviceAddress on the \
                 device and set AshDeviceOptions::buffer_device_address",
            ));
        }
        let device = self.device().raw();
        // SAFETY: the caller guarantees `info` is valid.
        let buffer =
            unsafe { device.create_buffer(info, None) }.map_err(vulkan("vkCreateBuffer"))?;
        // SAFETY: `buffer` was just created on this device and is unbound.
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
            // Our own fresh allocation: freeing it cannot fail.
            let _ = self.free(allocation);
            return Err(vulkan("vkBindBufferMemory")(e));
        }
        if self.desc().name_resources && !options.tag.is_empty() {
            // SAFETY: the buffer was just created on this device.
            unsafe { self.device().name_object(buffer, options.tag) };
        }
        Ok(Buffer::new(buffer, allocation, info.size).with_usage(info.usage))
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
    ) -> Result<Image, Error> {
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
            // Our own fresh allocation: freeing it cannot fail.
            let _ = self.free(allocation);
            return Err(vulkan("vkBindImageMemory")(e));
        }
        if self.desc().name_resources && !options.tag.is_empty() {
            // SAFETY: the image was just created on this device.
            unsafe { self.device().name_object(image, options.tag) };
        }
        Ok(Image::new(image, allocation, info))
    }

    /// Destroys a buffer and frees its memory.
    ///
    /// # Safety
    /// The device no longer uses the buffer (its command buffers have
    /// completed), and no view of it is left.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`] if another allocator made the buffer:
    /// nothing is destroyed and the buffer comes back in the error.
    pub unsafe fn destroy_buffer<A: Into<Allocation> + AsRef<Allocation> + std::fmt::Debug>(
        &self,
        buffer: Buffer<A>,
    ) -> Result<(), DestroyError<Buffer<A>>> {
        if !self.owns(buffer.allocation().as_ref()) {
            return Err(DestroyError::new(Error::ForeignAllocation, buffer));
        }
        let (raw, allocation) = buffer.into_raw_parts();
        // SAFETY: the caller guarantees the device is done with the buffer,
        // which this allocator's device created.
        unsafe { self.device().raw().destroy_buffer(raw, None) };
        // Checked above: this allocator made it, so freeing cannot fail.
        let _ = self.free(allocation);
        Ok(())
    }

    /// Destroys an image and frees its memory.
    ///
    /// # Safety
    /// The device no longer uses the image, and no view of it is left.
    ///
    /// # Errors
    /// As [`Self::destroy_buffer`].
    pub unsafe fn destroy_image<A: Into<Allocation> + AsRef<Allocation> + std::fmt::Debug>(
        &self,
        image: Image<A>,
    ) -> Result<(), DestroyError<Image<A>>> {
        if !self.owns(image.allocation().as_ref()) {
            return Err(DestroyError::new(Error::ForeignAllocation, image));
        }
        let (raw, allocation) = image.into_raw_parts();
        // SAFETY: the caller guarantees the device is done with the image,
        // which this allocator's device created.
        unsafe { self.device().raw().destroy_image(raw, None) };
        // Checked above: this allocator made it, so freeing cannot fail.
        let _ = self.free(allocation);
        Ok(())
    }
}
