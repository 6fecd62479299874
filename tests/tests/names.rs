//! Debug names on a real device with validation on: every memory object
//! the allocator makes is named (`vkalloc block type 0 pool 'textures' tlsf
//! #3`), and with `AllocatorDesc::name_resources` buffers and images are
//! named from their tags. Vulkan can't read a name back, so a deliberate
//! validation error (binding a bound buffer again, which the layer reports
//! and does not pass on) must name both the buffer and its memory.

use ash::vk;
use gpu_tests::resources::image_info;
use gpu_tests::GpuContext;
use vkalloc::{AllocationOptions, AllocatorDesc, DedicatedPolicy, MemoryUsage, PoolDesc};

#[test]
fn validation_messages_name_the_memory_and_the_resource() {
    let ctx = GpuContext::with_desc(AllocatorDesc::default().with_resource_names(true))
        .unwrap_or_else(|e| panic!("GPU test harness: {e}"));
    assert!(
        ctx.info().validation,
        "this test reads names back from validation messages"
    );
    let allocator = ctx.allocator();
    assert!(allocator.device().options().debug_utils);
    let info = vk::BufferCreateInfo::default()
        .size(4096)
        .usage(vk::BufferUsageFlags::TRANSFER_DST)
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    let options = AllocationOptions {
        dedicated: DedicatedPolicy::Always,
        ..AllocationOptions::usage(MemoryUsage::GpuOnly).tagged("vertex-buffer-42")
    };
    // SAFETY: a valid create info.
    let buffer = unsafe { allocator.create_buffer(&info, &options) }.expect("buffer");
    let pool = allocator
        .create_pool(&PoolDesc {
            block_size: 4 << 20,
            ..PoolDesc::new("textures")
        })
        .expect("pool");
    // SAFETY: a valid create info.
    let image = unsafe {
        allocator.create_image(
            &image_info(
                vk::Extent2D {
                    width: 32,
                    height: 32,
                },
                vk::ImageTiling::OPTIMAL,
                vk::ImageLayout::UNDEFINED,
            ),
            &AllocationOptions::usage(MemoryUsage::GpuOnly)
                .in_pool(pool)
                .tagged("albedo"),
        )
    }
    .expect("image");
    assert_eq!(ctx.validation_errors(), 0, "naming is valid usage");

    // SAFETY: binding a bound buffer again breaks VUID-vkBindBufferMemory-buffer-07459;
    // the validation layer reports it and skips the call, so the driver never
    // sees it.
    let _ = unsafe {
        ctx.device().bind_buffer_memory(
            buffer.raw(),
            buffer.allocation().vk_memory(),
            buffer.allocation().offset(),
        )
    };
    // SAFETY: the same, for the image in the pool's block.
    let _ = unsafe {
        ctx.device().bind_image_memory(
            image.raw(),
            image.allocation().vk_memory(),
            image.allocation().offset(),
        )
    };
    let messages = ctx.first_validation_errors().join("\n");
    assert!(ctx.take_validation_errors() >= 2, "{messages}");
    let memory_type = buffer.allocation().memory_type();
    for name in [
        "vertex-buffer-42".to_owned(),
        format!("vkalloc dedicated type {memory_type} 'vertex-buffer-42' #"),
        "albedo".to_owned(),
        format!(
            "vkalloc block type {} pool 'textures' tlsf #",
            image.allocation().memory_type()
        ),
    ] {
        assert!(messages.contains(&name), "no {name:?} in:\n{messages}");
    }
    // SAFETY: never used by the device.
    unsafe {
        allocator.destroy_buffer(buffer).expect("destroy");
        allocator.destroy_image(image).expect("destroy");
    }
    allocator.destroy_pool(pool).expect("empty pool");
    ctx.finish();
}
