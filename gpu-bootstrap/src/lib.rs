//! The workspace's one Vulkan start-up, shared by the demo, the GPU tests and
//! the bench: load the loader, create an instance ([`create_instance`], with
//! the validation layer and a `VK_EXT_debug_utils` messenger when the caller
//! asks), pick a physical device ([`pick_physical_device`]).
//!
//! Each caller's differences (API version, application name, whether a missing
//! validation layer is an error, whether the messenger also reports instance
//! creation, which device is picked) are typed options of [`InstanceDesc`] and
//! [`DevicePick`], not copies of this code. The logical device is one builder
//! too: [`DeviceSupport`] says what a physical device supports, each caller
//! decides from it which queues, extensions and [`Feature`]s it asks for, and
//! [`create_device`] checks them (a missing one is
//! [`BootstrapError::Unsupported`], naming it), chains the feature structs the
//! device's API version allows, and creates the device.
//!
//! The allocator's own examples (`allocator/examples/`) do not use this crate:
//! they build from the packaged `vkalloc` alone, so they keep a minimal
//! instance setup of their own.

#![warn(missing_docs)]

mod device;
mod instance;
mod pick;

pub use device::{create_device, DeviceDesc, DeviceSupport, Feature, QueueRequest};
pub use instance::{
    create_instance, load_entry, ApiVersion, InstanceDesc, Messenger, Validation, VulkanInstance,
};
pub use pick::{pick_physical_device, DevicePick};

use ash::vk;

/// Why start-up failed. Each variant says what to install or change.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// The Vulkan loader library could not be loaded.
    #[error("no Vulkan loader ({0}); install one (e.g. `libvulkan1`)")]
    Loader(String),
    /// The validation layer was required and is not installed.
    #[error(
        "VK_LAYER_KHRONOS_validation is required and not installed (install vulkan-validationlayers)"
    )]
    NoValidationLayer,
    /// The loader's instance version is below the lowest the caller accepts.
    #[error("the Vulkan loader supports Vulkan {found}; at least {needed} is needed (update the loader, e.g. Debian's `libvulkan1`)")]
    LoaderTooOld {
        /// The loader's version, `major.minor.patch`.
        found: String,
        /// The lowest accepted, `major.minor.patch`.
        needed: String,
    },
    /// The instance has no physical device.
    #[error("the Vulkan loader found no physical device (install a driver, e.g. `mesa-vulkan-drivers` for lavapipe, or point VK_DRIVER_FILES at one; `vulkaninfo --summary` lists what the loader sees)")]
    NoDevice,
    /// A device index beyond the instance's devices was asked for.
    #[error("device index {index} is out of range: there are {count} devices (pick one of 0..{count}; `vulkaninfo --summary` lists them)")]
    BadDeviceIndex {
        /// The index asked for.
        index: usize,
        /// How many devices there are.
        count: usize,
    },
    /// The device lacks features or extensions the caller asked for.
    #[error("{device} (Vulkan {api_version}) does not support {}: pick another device, or update its driver", missing.join(", "))]
    Unsupported {
        /// `deviceName`.
        device: String,
        /// The API version the instance and the device share.
        api_version: String,
        /// The missing features (by their Vulkan names) and extensions.
        missing: Vec<String>,
    },
    /// A queue family the device does not have, or more queues than it has.
    #[error("queue family {family} with {count} queues: the device has no such family or fewer queues in it ({families} families; pick a family from the device's queue family properties)")]
    NoQueueFamily {
        /// The family asked for.
        family: u32,
        /// The queues asked for.
        count: u32,
        /// How many families the device has.
        families: usize,
    },
    /// A queue family was asked for in two requests.
    #[error("queue family {family} is asked for twice: ask for it once, with all its queues")]
    QueueFamilyTwice {
        /// The family.
        family: u32,
    },
    /// A Vulkan call failed.
    #[error("{call} failed: {result} (the driver refused it; run with the validation layer to learn why)")]
    Vulkan {
        /// The Vulkan function.
        call: &'static str,
        /// What it returned.
        result: vk::Result,
    },
}

/// `major.minor.patch` of a Vulkan version number.
pub fn version_string(v: u32) -> String {
    format!(
        "{}.{}.{}",
        vk::api_version_major(v),
        vk::api_version_minor(v),
        vk::api_version_patch(v)
    )
}
