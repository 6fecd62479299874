//! Reads a real device's memory table and prints it as a simulated-device
//! table (`vkalloc::sim::GpuTable` JSON), ready to keep in
//! `allocator/src/sim/tables/`.
//!
//! `cargo run --example dump_memory_table -- [DEVICE_INDEX] [NAME]`
//!
//! Besides the heaps, types and limits, it probes from which image size the
//! driver prefers a dedicated allocation (`prefersDedicatedAllocation`).

use ash::vk;
use vkalloc::device::MemoryDevice;
use vkalloc::sim::GpuTable;
use vkalloc::vk::{AshDevice, AshDeviceOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let index: usize = args.first().map(|s| s.parse()).transpose()?.unwrap_or(0);
    // A minimal instance and device of its own, not the workspace's `gpu-bootstrap`:
    // this example builds from the packaged `vkalloc` alone (plus ash).
    // SAFETY: loading the system's Vulkan loader runs its initialisation; we
    // trust the installed loader.
    let entry = unsafe { ash::Entry::load() }?;
    let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_1);
    // SAFETY: the create info is valid and outlives the call.
    let instance = unsafe {
        entry.create_instance(
            &vk::InstanceCreateInfo::default().application_info(&app),
            None,
        )
    }?;
    // SAFETY: the instance is live.
    let physical = unsafe { instance.enumerate_physical_devices() }?;
    let physical_device = *physical
        .get(index)
        .ok_or("no Vulkan device at that index")?;
    // SAFETY: the physical device belongs to the instance.
    let props = unsafe { instance.get_physical_device_properties(physical_device) };
    let name = props
        .device_name_as_c_str()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    // SAFETY: as above.
    let extensions = unsafe { instance.enumerate_device_extension_properties(physical_device) }?;
    let budget = extensions
        .iter()
        .any(|e| e.extension_name_as_c_str() == Ok(ash::ext::memory_budget::NAME));
    let priorities = [1.0];
    let queue = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(0)
        .queue_priorities(&priorities)];
    let names = if budget {
        vec![ash::ext::memory_budget::NAME.as_ptr()]
    } else {
        vec![]
    };
    let info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queue)
        .enabled_extension_names(&names);
    // SAFETY: valid create info; queue family 0 exists on every device.
    let device = unsafe { instance.create_device(physical_device, &info, None) }?;
    // SAFETY: the device was made from this instance and physical device with
    // Vulkan 1.1, both outlive `seam`, and the budget flag is what we enabled.
    let seam = unsafe {
        AshDevice::new(
            &instance,
            physical_device,
            device.clone(),
            AshDeviceOptions {
                memory_budget: budget,
                ..AshDeviceOptions::default()
            },
        )
    };
    let threshold = dedicated_threshold(&device);
    let driver = format!(
        "driver version {:#x}, Vulkan {}.{}.{}",
        props.driver_version,
        vk::api_version_major(props.api_version),
        vk::api_version_minor(props.api_version),
        vk::api_version_patch(props.api_version)
    );
    let table = GpuTable {
        name: args.get(1).cloned().unwrap_or_else(|| name.to_lowercase().replace([' ', '(', ')', ','], "_")),
        source: format!(
            "read off the device '{name}' ({driver}) by `cargo run --example dump_memory_table` on {}",
            today()
        ),
        memory_properties: seam.memory_properties().clone(),
        limits: *seam.limits(),
        dedicated_image_threshold: threshold,
    };
    println!("{}", table.to_json());
    drop(seam);
    // SAFETY: nothing created from the device is alive any more.
    unsafe { device.destroy_device(None) };
    // SAFETY: the device is destroyed.
    unsafe { instance.destroy_instance(None) };
    Ok(())
}

/// The smallest square RGBA8 optimal image, in bytes, for which the driver
/// prefers a dedicated allocation; `None` if it never does up to 16384².
fn dedicated_threshold(device: &ash::Device) -> Option<u64> {
    for side in (8..=14).map(|p| 1u32 << p) {
        let info = vk::ImageCreateInfo::default()
            .image_type(vk::ImageType::TYPE_2D)
            .format(vk::Format::R8G8B8A8_UNORM)
            .extent(vk::Extent3D {
                width: side,
                height: side,
                depth: 1,
            })
            .mip_levels(1)
            .array_layers(1)
            .samples(vk::SampleCountFlags::TYPE_1)
            .tiling(vk::ImageTiling::OPTIMAL)
            .usage(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_DST);
        // SAFETY: a valid create info for a common format every device supports.
        let image = unsafe { device.create_image(&info, None) }.ok()?;
        let mut dedicated = vk::MemoryDedicatedRequirements::default();
        let mut req = vk::MemoryRequirements2::default().push_next(&mut dedicated);
        // SAFETY: the image is live.
        unsafe {
            device.get_image_memory_requirements2(
                &vk::ImageMemoryRequirementsInfo2::default().image(image),
                &mut req,
            )
        };
        let size = req.memory_requirements.size;
        // SAFETY: the image is unused and unbound.
        unsafe { device.destroy_image(image, None) };
        if dedicated.prefers_dedicated_allocation == vk::TRUE {
            return Some(size);
        }
    }
    None
}

fn today() -> String {
    std::process::Command::new("date")
        .arg("+%Y-%m-%d")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|| "an unknown date".into())
}
