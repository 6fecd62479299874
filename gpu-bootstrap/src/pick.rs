//! Which physical device to run on.

use ash::vk;

use crate::BootstrapError;

/// How to pick the physical device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DevicePick {
    /// The device at this index of `vkEnumeratePhysicalDevices`.
    Index(usize),
    /// The first discrete GPU, else the first device.
    FirstDiscreteElseFirst,
}

/// Picks a physical device of `instance` (a live instance) and returns its
/// index and handle.
///
/// # Errors
/// [`BootstrapError::NoDevice`] when there is none,
/// [`BootstrapError::BadDeviceIndex`] for an index out of range,
/// [`BootstrapError::Vulkan`] when the enumeration fails.
pub fn pick_physical_device(
    instance: &ash::Instance,
    pick: DevicePick,
) -> Result<(usize, vk::PhysicalDevice), BootstrapError> {
    // SAFETY: a plain query on a live instance.
    let devices = unsafe { instance.enumerate_physical_devices() }.map_err(|result| {
        BootstrapError::Vulkan {
            call: "vkEnumeratePhysicalDevices",
            result,
        }
    })?;
    if devices.is_empty() {
        return Err(BootstrapError::NoDevice);
    }
    let index = match pick {
        DevicePick::Index(index) if index < devices.len() => index,
        DevicePick::Index(index) => {
            return Err(BootstrapError::BadDeviceIndex {
                index,
                count: devices.len(),
            })
        }
        DevicePick::FirstDiscreteElseFirst => devices
            .iter()
            .position(|&pd| {
                // SAFETY: `pd` came from this live instance.
                let props = unsafe { instance.get_physical_device_properties(pd) };
                props.device_type == vk::PhysicalDeviceType::DISCRETE_GPU
            })
            .unwrap_or(0),
    };
    Ok((index, devices[index]))
}
