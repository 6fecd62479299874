//! The allocator on a real device through `ash`: the [`AshDevice`] seam and
//! create-and-bind helpers for buffers and images.
//!
//! This module and [`crate::sim`] are the only places that name Vulkan
//! handles; together with `memory.rs` and `mapping.rs` they hold every
//! `unsafe` block of the crate.

mod bound;
mod device;
mod resources;

pub use bound::{Buffer, DestroyError, Image, ImageInfo, MappedBuffer, MappedImage};
pub use device::{AshDevice, AshDeviceOptions};

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
