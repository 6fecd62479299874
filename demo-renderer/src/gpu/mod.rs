//! The Vulkan layer: instance, device, queues, debug messenger, the swapchain,
//! and the memory adapter through which every resource reaches vkalloc.
//!
//! Only this module and [`crate::frame`] hold `unsafe` Vulkan calls.

pub mod context;
pub mod memory;
pub mod ownership;
pub mod swapchain;
pub mod util;

pub use context::{Context, ContextDesc, UploadQueue};
pub use memory::GpuMemory;

/// Errors of the Vulkan layer, each saying what to change.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// The Vulkan loader could not be loaded.
    #[error("cannot load the Vulkan loader (libvulkan.so.1): {0}; install a Vulkan driver (e.g. `apt-get install mesa-vulkan-drivers`)")]
    Loader(String),
    /// No physical device supports Vulkan 1.3 with the features the demo needs.
    #[error("no usable Vulkan device: {0}")]
    NoDevice(String),
    /// A Vulkan call failed.
    #[error("{call} failed: {result}")]
    Vk {
        /// The call that failed.
        call: &'static str,
        /// What it returned.
        result: ash::vk::Result,
    },
    /// An allocation through the allocator failed.
    #[error("allocation of {what} failed: {reason}")]
    Alloc {
        /// The resource.
        what: String,
        /// The allocator's error.
        reason: String,
    },
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

/// Turns an `ash` result into a [`GpuError`] naming the call.
pub(crate) trait VkCheck<T> {
    fn check(self, call: &'static str) -> Result<T, GpuError>;
}

impl<T> VkCheck<T> for Result<T, ash::vk::Result> {
    fn check(self, call: &'static str) -> Result<T, GpuError> {
        self.map_err(|result| GpuError::Vk { call, result })
    }
}
