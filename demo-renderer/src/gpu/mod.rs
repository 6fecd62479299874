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
    #[error("allocation of {what} failed: {source}")]
    Alloc {
        /// The resource.
        what: String,
        /// The allocator's error.
        #[source]
        source: vkalloc::Error,
    },
    /// The overlay's renderer or its layout thread failed.
    #[error("allocation of {what} failed: {reason}")]
    Overlay {
        /// What it was making.
        what: String,
        /// Its error.
        reason: String,
    },
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

impl GpuError {
    /// The allocator's error, where an allocation failed.
    pub fn alloc_error(&self) -> Option<&vkalloc::Error> {
        match self {
            Self::Alloc { source, .. } => Some(source),
            _ => None,
        }
    }

    /// Whether the allocator found no room: a pool at its cap, a heap over
    /// its budget or out of memory, too many allocations, or a request larger
    /// than what could ever fit there. A streamer recovers (evicts, waits, or
    /// takes a coarser level); any other error (a bad request, a lost
    /// device, a broken invariant) is not room to make and goes up.
    pub fn is_no_room(&self) -> bool {
        use vkalloc::Error as E;
        matches!(
            self.alloc_error(),
            Some(
                E::PoolExhausted { .. }
                    | E::OverBudget { .. }
                    | E::NoTypeWithinBudget { .. }
                    | E::OutOfDeviceMemory { .. }
                    | E::TooManyAllocations { .. }
                    | E::TooLarge { .. }
            )
        )
    }
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
