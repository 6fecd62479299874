//! Memory requirements from a create info, without a resource: Vulkan 1.3 /
//! `VK_KHR_maintenance4`'s `vkGetDeviceBufferMemoryRequirements` and
//! `vkGetDeviceImageMemoryRequirements` where the device has them
//! ([`super::AshDeviceOptions::maintenance4`]), a throwaway resource created
//! and destroyed at once where not. Alias requirements
//! ([`Allocator::image_alias_requirement`]) read them here too.

use ash::vk;

use super::AshDevice;
use crate::desc::{AllocationDesc, AllocationOptions, DriverDedicated, ResourceKind};
use crate::{Allocator, Error};

/// A resource's memory requirements and what the driver said of dedicated
/// memory for it.
pub(super) struct Requirements {
    pub memory: vk::MemoryRequirements,
    pub dedicated: DriverDedicated,
}

pub(super) fn driver_dedicated(req: &vk::MemoryDedicatedRequirements<'_>) -> DriverDedicated {
    if req.requires_dedicated_allocation == vk::TRUE {
        DriverDedicated::Required
    } else if req.prefers_dedicated_allocation == vk::TRUE {
        DriverDedicated::Preferred
    } else {
        DriverDedicated::None
    }
}

/// The requirements of a buffer created with `info`.
///
/// # Safety
/// `info` is a valid `VkBufferCreateInfo` for `device`.
pub(super) unsafe fn of_buffer_info(
    device: &AshDevice,
    info: &vk::BufferCreateInfo<'_>,
) -> Result<Requirements, Error> {
    let raw = device.raw();
    let mut dedicated = vk::MemoryDedicatedRequirements::default();
    let mut out = vk::MemoryRequirements2::default().push_next(&mut dedicated);
    if let Some(fns) = device.requirements_fns() {
        let query = vk::DeviceBufferMemoryRequirements::default().create_info(info);
        // SAFETY: the command was loaded for this live device; `info` is
        // valid (the caller's promise) and `out` a valid output chain.
        unsafe { (fns.buffer)(raw.handle(), &query, &mut out) };
    } else {
        // SAFETY: the caller guarantees `info` is valid.
        let buffer =
            unsafe { raw.create_buffer(info, None) }.map_err(super::vulkan("vkCreateBuffer"))?;
        let query = vk::BufferMemoryRequirementsInfo2::default().buffer(buffer);
        // SAFETY: `buffer` is live; it is destroyed right after, never bound
        // nor used.
        unsafe {
            raw.get_buffer_memory_requirements2(&query, &mut out);
            raw.destroy_buffer(buffer, None);
        }
    }
    let memory = out.memory_requirements;
    Ok(Requirements {
        memory,
        dedicated: driver_dedicated(&dedicated),
    })
}

/// The requirements of an image created with `info`.
///
/// # Safety
/// `info` is a valid `VkImageCreateInfo` for `device`.
pub(super) unsafe fn of_image_info(
    device: &AshDevice,
    info: &vk::ImageCreateInfo<'_>,
) -> Result<Requirements, Error> {
    if info.flags.contains(vk::ImageCreateFlags::DISJOINT) {
        return Err(Error::NotEnabled(
            "a DISJOINT multi-planar image binds memory per plane, which vkalloc's image helpers \
             do not do: create it without DISJOINT, or bind its planes yourself",
        ));
    }
    let raw = device.raw();
    let mut dedicated = vk::MemoryDedicatedRequirements::default();
    let mut out = vk::MemoryRequirements2::default().push_next(&mut dedicated);
    if let Some(fns) = device.requirements_fns() {
        let query = vk::DeviceImageMemoryRequirements::default().create_info(info);
        // SAFETY: as for buffers; not DISJOINT, so no plane aspect is needed.
        unsafe { (fns.image)(raw.handle(), &query, &mut out) };
    } else {
        // SAFETY: the caller guarantees `info` is valid.
        let image =
            unsafe { raw.create_image(info, None) }.map_err(super::vulkan("vkCreateImage"))?;
        let query = vk::ImageMemoryRequirementsInfo2::default().image(image);
        // SAFETY: `image` is live; it is destroyed right after, never bound
        // nor used.
        unsafe {
            raw.get_image_memory_requirements2(&query, &mut out);
            raw.destroy_image(image, None);
        }
    }
    let memory = out.memory_requirements;
    Ok(Requirements {
        memory,
        dedicated: driver_dedicated(&dedicated),
    })
}

fn image_kind(tiling: vk::ImageTiling) -> ResourceKind {
    if tiling == vk::ImageTiling::LINEAR {
        ResourceKind::LinearImage
    } else {
        ResourceKind::OptimalImage
    }
}

impl Allocator<AshDevice> {
    /// The allocation request a buffer created with `info` would make, read
    /// without creating it where the device has Vulkan 1.3 or
    /// `VK_KHR_maintenance4` ([`super::AshDeviceOptions::maintenance4`]; a
    /// throwaway buffer is created and destroyed otherwise). With
    /// [`Allocator::memory_type_for`] it says where the buffer would live;
    /// its `size` is what the buffer would cost.
    ///
    /// The request names no resource (`dedicated_to` is `None`): memory
    /// allocated with it and bound later is not a dedicated allocation in
    /// Vulkan's sense, so it can't serve a resource whose driver requires
    /// one (`driver_dedicated` is then [`DriverDedicated::Required`]:
    /// create such resources with [`Allocator::create_buffer`]).
    ///
    /// # Safety
    /// `info` is a valid `VkBufferCreateInfo` for this device.
    ///
    /// # Errors
    /// [`Error::Vulkan`] when the throwaway buffer can't be created.
    pub unsafe fn buffer_requirements<'a>(
        &self,
        info: &vk::BufferCreateInfo<'_>,
        options: &AllocationOptions<'a>,
    ) -> Result<AllocationDesc<'a>, Error> {
        // SAFETY: the caller guarantees `info` is valid.
        let r = unsafe { of_buffer_info(self.device(), info) }?;
        Ok(AllocationDesc {
            size: r.memory.size,
            alignment: r.memory.alignment,
            memory_type_bits: r.memory.memory_type_bits,
            kind: ResourceKind::Buffer,
            driver_dedicated: r.dedicated,
            dedicated_to: None,
            options: *options,
        })
    }

    /// The allocation request an image created with `info` would make; see
    /// [`Self::buffer_requirements`].
    ///
    /// # Safety
    /// `info` is a valid `VkImageCreateInfo` for this device.
    ///
    /// # Errors
    /// [`Error::NotEnabled`] for a `DISJOINT` image (its planes bind
    /// separately); [`Error::Vulkan`] when the throwaway image can't be
    /// created.
    pub unsafe fn image_requirements<'a>(
        &self,
        info: &vk::ImageCreateInfo<'_>,
        options: &AllocationOptions<'a>,
    ) -> Result<AllocationDesc<'a>, Error> {
        // SAFETY: the caller guarantees `info` is valid.
        let r = unsafe { of_image_info(self.device(), info) }?;
        Ok(AllocationDesc {
            size: r.memory.size,
            alignment: r.memory.alignment,
            memory_type_bits: r.memory.memory_type_bits,
            kind: image_kind(info.tiling),
            driver_dedicated: r.dedicated,
            dedicated_to: None,
            options: *options,
        })
    }
}
