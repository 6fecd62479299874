//! Memory requirements from create infos, without a resource (Vulkan 1.3's
//! `vkGetDeviceBufferMemoryRequirements` / `vkGetDeviceImageMemoryRequirements`),
//! on a real device with validation on: they equal those of created
//! resources, the memory type they lead to is the one `create_*` picks, and
//! the fallback (a throwaway resource, on an allocator told the device lacks
//! the commands) gives the same answers.

use ash::vk;
use gpu_tests::resources::image_info;
use gpu_tests::GpuContext;
use vkalloc::vk::{AshDevice, AshDeviceOptions};
use vkalloc::{
    AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, Error, MemoryUsage, PassInterval,
};

fn buffer_infos() -> Vec<vk::BufferCreateInfo<'static>> {
    [
        (4, vk::BufferUsageFlags::UNIFORM_BUFFER),
        (4097, vk::BufferUsageFlags::STORAGE_BUFFER),
        (
            1 << 20,
            vk::BufferUsageFlags::VERTEX_BUFFER | vk::BufferUsageFlags::TRANSFER_DST,
        ),
        (3 << 20, vk::BufferUsageFlags::TRANSFER_SRC),
    ]
    .into_iter()
    .map(|(size, usage)| {
        vk::BufferCreateInfo::default()
            .size(size)
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
    })
    .collect()
}

fn image_infos() -> Vec<vk::ImageCreateInfo<'static>> {
    let mut out = Vec::new();
    for (w, h) in [(1, 1), (17, 33), (256, 100), (1024, 1024)] {
        let extent = vk::Extent2D {
            width: w,
            height: h,
        };
        out.push(image_info(
            extent,
            vk::ImageTiling::OPTIMAL,
            vk::ImageLayout::UNDEFINED,
        ));
    }
    let mut mipped = image_info(
        vk::Extent2D {
            width: 512,
            height: 512,
        },
        vk::ImageTiling::OPTIMAL,
        vk::ImageLayout::UNDEFINED,
    );
    mipped.mip_levels = 10;
    mipped.usage |= vk::ImageUsageFlags::SAMPLED;
    out.push(mipped);
    out
}

/// Size, alignment, type bits, kind and the driver's wish.
fn key(
    d: &AllocationDesc<'_>,
) -> (
    u64,
    u64,
    u32,
    vkalloc::ResourceKind,
    vkalloc::DriverDedicated,
) {
    (
        d.size,
        d.alignment,
        d.memory_type_bits,
        d.kind,
        d.driver_dedicated,
    )
}

/// An allocator on the context's device told it lacks maintenance4.
fn without_maintenance4(ctx: &GpuContext) -> Allocator<AshDevice> {
    // SAFETY: the context's device was made from its physical device of its
    // instance with Vulkan 1.1+, outlives this allocator (dropped before
    // `finish`), and nothing claimed here is untrue (less is claimed).
    unsafe {
        Allocator::on_ash(
            ctx.instance(),
            ctx.physical_device(),
            ctx.device(),
            AshDeviceOptions::default(),
            AllocatorDesc::default(),
        )
    }
    .expect("allocator")
}

#[test]
fn requirements_from_create_infos_match_created_resources() {
    let ctx = GpuContext::for_test();
    assert!(
        ctx.info().api_version >= vk::API_VERSION_1_3,
        "this test needs a Vulkan 1.3 device (lavapipe is one)"
    );
    let allocator = ctx.allocator();
    assert!(allocator.device().reads_requirements_from_create_infos());
    let fallback = without_maintenance4(&ctx);
    assert!(!fallback.device().reads_requirements_from_create_infos());
    let options = AllocationOptions::usage(MemoryUsage::GpuOnly).tagged("probe");

    for info in buffer_infos() {
        // SAFETY: valid create infos.
        let (read, thrown) = unsafe {
            (
                allocator
                    .buffer_requirements(&info, &options)
                    .expect("read"),
                fallback
                    .buffer_requirements(&info, &options)
                    .expect("fallback"),
            )
        };
        assert_eq!(read.dedicated_to, None);
        assert_eq!(key(&read), key(&thrown), "{info:?}");
        // SAFETY: as above.
        let buffer = unsafe { allocator.create_buffer(&info, &options) }.expect("buffer");
        // SAFETY: the buffer is live; the request is only compared.
        let made = unsafe { allocator.buffer_desc(buffer.raw(), &options) };
        assert_eq!(key(&read), key(&made), "{info:?}");
        assert_eq!(
            allocator.memory_type_for(&read),
            Ok(buffer.allocation().memory_type())
        );
        // SAFETY: never used by the device.
        unsafe { allocator.destroy_buffer(buffer) }.expect("destroy");
    }
    for info in image_infos() {
        // SAFETY: valid create infos.
        let (read, thrown) = unsafe {
            (
                allocator.image_requirements(&info, &options).expect("read"),
                fallback
                    .image_requirements(&info, &options)
                    .expect("fallback"),
            )
        };
        assert_eq!(key(&read), key(&thrown), "{info:?}");
        // SAFETY: as above.
        let image = unsafe { allocator.create_image(&info, &options) }.expect("image");
        // SAFETY: the image is live; the request is only compared.
        let made = unsafe { allocator.image_desc(image.raw(), info.tiling, &options) };
        assert_eq!(key(&read), key(&made), "{info:?}");
        assert_eq!(
            allocator.memory_type_for(&read),
            Ok(image.allocation().memory_type())
        );
        // Alias requirements read the same way, with and without.
        let lifetime = PassInterval::new(0, 1);
        // SAFETY: valid create info.
        let (a, b) = unsafe {
            (
                allocator
                    .image_alias_requirement(&info, lifetime, "a")
                    .expect("alias"),
                fallback
                    .image_alias_requirement(&info, lifetime, "b")
                    .expect("alias"),
            )
        };
        assert_eq!(
            (a.size, a.alignment, a.memory_type_bits),
            (b.size, b.alignment, b.memory_type_bits)
        );
        assert_eq!(a.size, read.size);
        // SAFETY: never used by the device.
        unsafe { allocator.destroy_image(image) }.expect("destroy");
    }
    drop(fallback);
    ctx.assert_no_live_allocations();
    ctx.finish();
}

#[test]
fn a_disjoint_image_is_refused_with_a_typed_error() {
    let ctx = GpuContext::for_test();
    let mut info = image_info(
        vk::Extent2D {
            width: 64,
            height: 64,
        },
        vk::ImageTiling::OPTIMAL,
        vk::ImageLayout::UNDEFINED,
    );
    info.format = vk::Format::G8_B8R8_2PLANE_420_UNORM;
    info.flags = vk::ImageCreateFlags::DISJOINT;
    // The create info is refused before any Vulkan call reads it.
    // SAFETY: no Vulkan call is made with it (refused up front).
    let refused = unsafe {
        ctx.allocator()
            .image_requirements(&info, &AllocationOptions::default())
    };
    assert!(matches!(refused, Err(Error::NotEnabled(_))), "{refused:?}");
    ctx.finish();
}
