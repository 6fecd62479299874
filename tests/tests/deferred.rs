//! Deferred destruction on a real device with validation on: buffers and
//! images queued in a [`FreeQueue`] while a submission still uses them are
//! destroyed, and their memory freed, only once the timeline semaphore says
//! the GPU is done. Destroying one early would be a validation error
//! (`VUID-vkDestroyBuffer-buffer-00922`), which `finish` turns into a failure.

use ash::vk;
use gpu_tests::resources::image_info;
use gpu_tests::{GpuContext, LayoutTransition};
use vkalloc::{AllocationOptions, FreeQueue, MemoryUsage};

const SIZE: u64 = 64 * 64 * 4;

#[test]
fn queued_resources_are_destroyed_after_the_timeline_value() {
    let ctx = GpuContext::for_test();
    assert!(
        ctx.info().timeline_semaphore,
        "the device has no timeline semaphores (Vulkan 1.2)"
    );
    let device = ctx.device();
    let allocator = ctx.allocator();
    let buffer_info = |usage| {
        vk::BufferCreateInfo::default()
            .size(SIZE)
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
    };
    // SAFETY: valid create infos (non-zero size, supported usage, exclusive).
    let mut staging = unsafe {
        allocator.create_buffer_mapped(
            &buffer_info(vk::BufferUsageFlags::TRANSFER_SRC),
            &AllocationOptions::usage(MemoryUsage::Upload).tagged("staging"),
        )
    }
    .expect("staging buffer");
    staging
        .mapped_mut()
        .write(0, &[7u8; SIZE as usize])
        .expect("write");
    allocator
        .flush(staging.allocation(), 0, SIZE)
        .expect("flush");
    // SAFETY: as above.
    let target = unsafe {
        allocator.create_buffer(
            &buffer_info(vk::BufferUsageFlags::TRANSFER_DST),
            &AllocationOptions::usage(MemoryUsage::GpuOnly).tagged("target"),
        )
    }
    .expect("target buffer");
    let extent = vk::Extent2D {
        width: 64,
        height: 64,
    };
    // SAFETY: a valid 64x64 color image create info.
    let image = unsafe {
        allocator.create_image(
            &image_info(extent, vk::ImageTiling::OPTIMAL, vk::ImageLayout::UNDEFINED),
            &AllocationOptions::usage(MemoryUsage::GpuOnly).tagged("texture"),
        )
    }
    .expect("image");

    let mut type_info = vk::SemaphoreTypeCreateInfo::default()
        .semaphore_type(vk::SemaphoreType::TIMELINE)
        .initial_value(0);
    let semaphore_info = vk::SemaphoreCreateInfo::default().push_next(&mut type_info);
    let pool_info = vk::CommandPoolCreateInfo::default().queue_family_index(ctx.queue_family());
    // SAFETY: the device is live and has timeline semaphores enabled.
    let (semaphore, pool) = unsafe {
        (
            device
                .create_semaphore(&semaphore_info, None)
                .expect("semaphore"),
            device.create_command_pool(&pool_info, None).expect("pool"),
        )
    };
    let cmd_info = vk::CommandBufferAllocateInfo::default()
        .command_pool(pool)
        .level(vk::CommandBufferLevel::PRIMARY)
        .command_buffer_count(1);
    // SAFETY: the pool is this test's own.
    let cmd = unsafe { device.allocate_command_buffers(&cmd_info) }.expect("command buffer")[0];
    // SAFETY: `cmd` is new; every handle recorded is live and bound, with
    // the usages the copies need; the image goes to TRANSFER_DST first.
    unsafe {
        device
            .begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default())
            .expect("begin");
        ctx.cmd_copy_buffer(cmd, staging.raw(), target.raw(), SIZE);
        ctx.cmd_image_barrier(
            cmd,
            image.raw(),
            LayoutTransition::UNDEFINED_TO_TRANSFER_DST,
        );
        ctx.cmd_copy_buffer_to_image(cmd, staging.raw(), image.raw(), extent);
        device.end_command_buffer(cmd).expect("end");
    }
    // The submission waits for value 1, which the host signals only after
    // the first collect: the GPU is certainly still on it then.
    let waits = [1u64];
    let signals = [2u64];
    let wait_stages = [vk::PipelineStageFlags::TRANSFER];
    let mut timeline = vk::TimelineSemaphoreSubmitInfo::default()
        .wait_semaphore_values(&waits)
        .signal_semaphore_values(&signals);
    let semaphores = [semaphore];
    let cmds = [cmd];
    let submit = vk::SubmitInfo::default()
        .wait_semaphores(&semaphores)
        .wait_dst_stage_mask(&wait_stages)
        .signal_semaphores(&semaphores)
        .command_buffers(&cmds)
        .push_next(&mut timeline);
    ctx.with_queue(|queue, _| {
        // SAFETY: the queue is held; the command buffer is recorded and its
        // resources stay alive until value 2 (they are queued below).
        unsafe { device.queue_submit(queue, &[submit], vk::Fence::null()) }.expect("submit")
    });

    let retired = FreeQueue::new();
    // SAFETY: the submission is the only use of these, and it signals 2.
    unsafe {
        retired.destroy_buffer_after(staging, 2);
        retired.destroy_buffer_after(target, 2);
        retired.destroy_image_after(image, 2);
    }
    assert_eq!(retired.len(), 3);
    // SAFETY: the semaphore is live.
    let reached = unsafe { device.get_semaphore_counter_value(semaphore) }.expect("counter");
    assert_eq!(
        reached, 0,
        "the GPU can't pass value 1 before the host signals it"
    );
    let early = retired.collect(allocator, reached);
    assert_eq!((early.destroyed, early.freed), (0, 0));
    assert_eq!(allocator.statistics().total.allocation_count, 3);

    let signal = vk::SemaphoreSignalInfo::default()
        .semaphore(semaphore)
        .value(1);
    let wait = vk::SemaphoreWaitInfo::default()
        .semaphores(&semaphores)
        .values(&signals);
    // SAFETY: the semaphore is live; 1 is above its value.
    unsafe {
        device.signal_semaphore(&signal).expect("signal");
        device.wait_semaphores(&wait, u64::MAX).expect("wait");
    }
    // SAFETY: as above.
    let reached = unsafe { device.get_semaphore_counter_value(semaphore) }.expect("counter");
    assert_eq!(reached, 2);
    let done = retired.collect(allocator, reached);
    assert_eq!((done.destroyed, done.freed), (3, 3));
    assert!(done.freed_bytes >= 3 * SIZE, "{} B freed", done.freed_bytes);
    assert!(done.failures.is_empty() && done.refused_resources.is_empty());
    assert!(retired.is_empty());
    // SAFETY: the GPU is done with both (waited above).
    unsafe {
        device.destroy_command_pool(pool, None);
        device.destroy_semaphore(semaphore, None);
    }
    ctx.assert_no_live_allocations();
    ctx.finish();
}
