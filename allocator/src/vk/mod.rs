//! The allocator on a real device through `ash`: the [`AshDevice`] seam and
//! create-and-bind helpers for buffers and images.
//!
//! This module and `crate::sim` (feature `sim`) are the only places that name Vulkan
//! handles; together with `memory.rs` and `mapping.rs` they hold every
//! `unsafe` block of the crate.

mod bound;
mod deferred;
mod device;
#[cfg(unix)]
mod external;
mod moves;
mod requirements;
mod resources;

use resources::vulkan;

pub use bound::{Buffer, DestroyError, Image, ImageInfo, MappedBuffer, MappedImage};
pub use device::{AshDevice, AshDeviceOptions};
#[cfg(unix)]
pub use external::{ExportedMemory, ImportDesc};
pub use moves::{Aliased, Movable, MoveError, PreparedMove};

use ash::vk;

use crate::device::MemoryPropertyFlags;

impl From<vk::MemoryPropertyFlags> for MemoryPropertyFlags {
    fn from(flags: vk::MemoryPropertyFlags) -> Self {
        MemoryPropertyFlags(flags.as_raw())
    }
}

impl From<MemoryPropertyFlags> for vk::MemoryPropertyFlags {
    fn from(flags: MemoryPropertyFlags) -> Self {
        vk::MemoryPropertyFlags::from_raw(flags.0)
    }
}

impl crate::Allocator<AshDevice> {
    /// An allocator on an `ash` device, in one call: reads the device's
    /// memory properties and limits and sets the allocator up.
    ///
    /// ```no_run
    /// # fn demo(instance: &ash::Instance, physical_device: ash::vk::PhysicalDevice, device: &ash::Device) -> Result<(), vkalloc::Error> {
    /// use vkalloc::{Allocator, AllocatorDesc, vk::AshDeviceOptions};
    /// // SAFETY: `device` was made from `physical_device` of `instance` with
    /// // Vulkan 1.1+, both outlive the allocator, and VK_EXT_memory_budget
    /// // was enabled (as the options say).
    /// let allocator = unsafe {
    ///     Allocator::on_ash(instance, physical_device, device, AshDeviceOptions { memory_budget: true, ..Default::default() }, AllocatorDesc::default())
    /// }?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Safety
    /// As [`AshDevice::new`]: `device` was created from `physical_device`
    /// of `instance` with Vulkan 1.1 or later, both stay alive until the
    /// allocator is dropped, and `options` says truly what was enabled.
    ///
    /// # Errors
    /// As [`crate::Allocator::new`].
    pub unsafe fn on_ash(
        instance: &ash::Instance,
        physical_device: vk::PhysicalDevice,
        device: &ash::Device,
        options: AshDeviceOptions,
        desc: crate::AllocatorDesc,
    ) -> Result<Self, crate::Error> {
        // SAFETY: the caller upholds `AshDevice::new`'s contract.
        let device = unsafe { AshDevice::new(instance, physical_device, device.clone(), options) };
        Self::new(device, desc)
    }
}

impl crate::Allocation {
    /// The memory as an `ash` handle, to bind or copy with.
    pub fn vk_memory(&self) -> vk::DeviceMemory {
        use ash::vk::Handle;
        vk::DeviceMemory::from_raw(self.memory().0)
    }
}

/// The allocator on `ash` can be shared between threads.
#[allow(dead_code)]
fn assert_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<crate::Allocator<AshDevice>>();
    check::<crate::Allocation>();
    check::<crate::MappedAllocation>();
}
