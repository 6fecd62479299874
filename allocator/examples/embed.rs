//! Embedding vkalloc in an engine, every step on a real device and no window:
//!
//! 1. an allocator on an `ash` device in one call ([`Allocator::on_ash`]);
//! 2. a GPU-only vertex buffer, filled through a staging buffer in a
//!    per-frame linear (ring) pool, and a texture in a budgeted TLSF pool
//!    (a streamer's texture pool);
//! 3. what the pool's budget does when it is full ([`Error::PoolExhausted`]);
//! 4. the frame loop: `begin_frame`, statistics every frame, the ring pool
//!    reset once the GPU is done with the frame;
//! 5. the JSON dump and text summary;
//! 6. defragmentation, a pass at a time, the copies done by
//!    [`Allocator::perform_moves`] (the guide's `defragment_a_little`), the
//!    moved buffers' contents checked;
//! 7. transient render targets aliased on one allocation (the guide's
//!    `transients`);
//! 8. teardown: the allocator taken out of its `Arc` and destroyed with
//!    [`Allocator::destroy_all_memory`], which frees all of its memory before
//!    `vkDestroyDevice` and names every leak.
//!
//! The steps are the guide's (`allocator/docs/embedding.md`), whose snippets
//! that need a device are compiled there and run here.
//!
//! `cargo run -p vkalloc --example embed` (any Vulkan 1.1+ device; `cargo
//! xtask test` runs it on lavapipe). It exits non-zero if any step fails.

use std::collections::HashMap;
use std::sync::Arc;

use ash::vk;
use vkalloc::vk::{Aliased, AshDevice, AshDeviceOptions, Movable};
use vkalloc::{
    AliasGroup, AllocationId, AllocationOptions, Allocator, AllocatorDesc, DefragAlgorithm,
    DefragDesc, Defragmentation, Error, LinearMode, MemoryUsage, Move, PassInterval, PoolAlgorithm,
    PoolDesc,
};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Instance, device and one queue: what an engine already has.
struct Gpu {
    _entry: ash::Entry,
    instance: ash::Instance,
    physical_device: vk::PhysicalDevice,
    device: ash::Device,
    queue: vk::Queue,
    queue_family: u32,
    memory_budget: bool,
}

// A minimal instance and device of its own, not the workspace's `gpu-bootstrap`:
// this example builds from the packaged `vkalloc` alone (plus ash).
fn gpu() -> Result<Gpu> {
    // SAFETY: loading the system's Vulkan loader runs its initialisation.
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
    let physical_device = *unsafe { instance.enumerate_physical_devices() }?
        .first()
        .ok_or("no Vulkan device")?;
    // SAFETY: the physical device belongs to the instance.
    let families = unsafe { instance.get_physical_device_queue_family_properties(physical_device) };
    let queue_family = families
        .iter()
        .position(|f| {
            f.queue_flags
                .contains(vk::QueueFlags::TRANSFER | vk::QueueFlags::GRAPHICS)
        })
        .ok_or("no graphics queue")? as u32;
    // SAFETY: as above.
    let extensions = unsafe { instance.enumerate_device_extension_properties(physical_device) }?;
    // Enable VK_EXT_memory_budget where the driver has it: the allocator then
    // reads real heap budgets instead of estimating 80% of each heap.
    let memory_budget = extensions
        .iter()
        .any(|e| e.extension_name_as_c_str() == Ok(ash::ext::memory_budget::NAME));
    let names = if memory_budget {
        vec![ash::ext::memory_budget::NAME.as_ptr()]
    } else {
        vec![]
    };
    let priorities = [1.0];
    let queues = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(queue_family)
        .queue_priorities(&priorities)];
    let info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .enabled_extension_names(&names);
    // SAFETY: valid create info; the family exists.
    let device = unsafe { instance.create_device(physical_device, &info, None) }?;
    // SAFETY: the family was created with one queue.
    let queue = unsafe { device.get_device_queue(queue_family, 0) };
    Ok(Gpu {
        _entry: entry,
        instance,
        physical_device,
        device,
        queue,
        queue_family,
        memory_budget,
    })
}

/// Records `record` into a fresh command buffer, submits it and waits.
fn submit_and_wait(gpu: &Gpu, record: impl FnOnce(vk::CommandBuffer)) -> Result<()> {
    let d = &gpu.device;
    let pool_info = vk::CommandPoolCreateInfo::default().queue_family_index(gpu.queue_family);
    // SAFETY: valid create info on a live device.
    let pool = unsafe { d.create_command_pool(&pool_info, None) }?;
    let alloc = vk::CommandBufferAllocateInfo::default()
        .command_pool(pool)
        .level(vk::CommandBufferLevel::PRIMARY)
        .command_buffer_count(1);
    // SAFETY: the pool is live and used by this thread alone.
    let cmd = unsafe { d.allocate_command_buffers(&alloc) }?[0];
    let begin =
        vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
    // SAFETY: `cmd` is a fresh primary command buffer.
    unsafe { d.begin_command_buffer(cmd, &begin) }?;
    record(cmd);
    // SAFETY: `cmd` is recording; the fence is fresh; the queue is ours and
    // the wait returns only once the work is done, so `pool` can go.
    unsafe {
        d.end_command_buffer(cmd)?;
        let fence = d.create_fence(&vk::FenceCreateInfo::default(), None)?;
        let cmds = [cmd];
        let submit = vk::SubmitInfo::default().command_buffers(&cmds);
        d.queue_submit(gpu.queue, &[submit], fence)?;
        d.wait_for_fences(&[fence], true, u64::MAX)?;
        d.destroy_fence(fence, None);
        d.destroy_command_pool(pool, None);
    }
    Ok(())
}

/// What the engine provides to defragmentation: its resources, found by
/// allocation id (the guide's section 8).
trait Resources {
    /// Takes a resource out to move it (`None`: keep it where it is).
    fn take(&mut self, id: AllocationId) -> Option<Movable>;
    /// Puts a resource back, moved or not: rewrite what names its handle.
    fn put_back(&mut self, resource: Movable);
}

/// Buffers by allocation id.
struct Buffers(HashMap<AllocationId, Movable>);

impl Resources for Buffers {
    fn take(&mut self, id: AllocationId) -> Option<Movable> {
        self.0.remove(&id)
    }

    fn put_back(&mut self, resource: Movable) {
        self.0.insert(resource.allocation().id(), resource);
    }
}

/// One pass; whether the session is done (as in the guide).
///
/// # Safety
/// `queue` (of `family`) is ours for the call, and the GPU is done writing
/// the engine's resources.
unsafe fn defragment_a_little(
    allocator: &Allocator<AshDevice>,
    defrag: &mut Defragmentation,
    queue: vk::Queue,
    family: u32,
    engine: &mut impl Resources,
) -> Result<bool> {
    let moves = defrag.begin_pass(allocator)?;
    let items: Vec<(Move, Movable)> = moves
        .into_iter()
        .filter_map(|mv| engine.take(mv.id()).map(|r| (mv, r))) // `Allocation::id` is stable
        .collect(); // moves left out are cancelled
                    // SAFETY: the caller's promise above.
    let moved = unsafe { allocator.perform_moves(defrag, queue, family, items) };
    let result = match moved {
        Ok(resources) => {
            resources.into_iter().for_each(|r| engine.put_back(r));
            Ok(())
        }
        Err((error, unmoved)) => {
            unmoved.into_iter().for_each(|r| engine.put_back(r));
            Err(error)
        }
    };
    // Old ranges freed, empty blocks released (also after a failure).
    let report = defrag.end_pass(allocator)?;
    result?;
    Ok(report.complete)
}

/// Two transient targets on one allocation (as in the guide).
///
/// # Safety
/// Valid create infos for this device.
unsafe fn transients(
    allocator: &Allocator<AshDevice>,
    gbuffer_info: &vk::ImageCreateInfo<'_>,
    bloom_info: &vk::ImageCreateInfo<'_>,
) -> std::result::Result<(AliasGroup, Aliased<vk::Image>, Aliased<vk::Image>), Error> {
    // SAFETY: valid create infos (the caller's promise).
    let gbuffer = unsafe {
        allocator.image_alias_requirement(gbuffer_info, PassInterval::new(0, 2), "gbuffer")
    }?;
    // SAFETY: as above.
    let bloom =
        unsafe { allocator.image_alias_requirement(bloom_info, PassInterval::new(3, 4), "bloom") }?;
    let group = allocator.allocate_alias_group(
        &[gbuffer, bloom],
        AllocationOptions::usage(MemoryUsage::GpuOnly),
    )?;
    // SAFETY: valid create infos; the group outlives the images (destroyed first).
    let g = unsafe { allocator.create_aliased_image(&group, 0, gbuffer_info) }?;
    // SAFETY: as above.
    let b = unsafe { allocator.create_aliased_image(&group, 1, bloom_info) }?;
    Ok((group, g, b))
}

fn main() -> Result<()> {
    let gpu = gpu()?;

    // 1. The allocator, in one call, shared behind an `Arc` (the type an
    // engine stores: `Arc<Allocator<AshDevice>>`).
    // SAFETY: the device was made from this physical device and instance with
    // Vulkan 1.1; both outlive the allocator (destroyed below, before them);
    // the options say truly whether VK_EXT_memory_budget was enabled.
    let allocator: Arc<Allocator<AshDevice>> = Arc::new(unsafe {
        Allocator::on_ash(
            &gpu.instance,
            gpu.physical_device,
            &gpu.device,
            AshDeviceOptions {
                memory_budget: gpu.memory_budget,
                ..AshDeviceOptions::default()
            },
            AllocatorDesc::default(),
        )
    }?);
    println!("1. allocator on the device ({} memory types)", {
        let stats = allocator.statistics();
        stats.types.len()
    });

    // 2. Pools: a per-frame ring for staging, a budgeted TLSF pool for textures.
    let staging_ring = allocator.create_pool(&PoolDesc {
        usage: MemoryUsage::Upload,
        block_size: 4 << 20,
        min_blocks: 1,
        max_blocks: 1,
        algorithm: PoolAlgorithm::Linear(LinearMode::Ring),
        ..PoolDesc::new("staging ring")
    })?;
    let textures = allocator.create_pool(&PoolDesc {
        usage: MemoryUsage::GpuOnly,
        block_size: 8 << 20,
        max_blocks: 2,
        budget: Some(16 << 20),
        ..PoolDesc::new("textures")
    })?;

    // A GPU-only vertex buffer, filled by a copy from the staging ring.
    let vertices: Vec<u8> = (0..64 * 1024u32).map(|i| (i % 251) as u8).collect();
    let info = |size: usize, usage| {
        vk::BufferCreateInfo::default()
            .size(size as u64)
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
    };
    // SAFETY: valid create infos.
    let vertex_buffer = unsafe {
        allocator.create_buffer(
            &info(
                vertices.len(),
                vk::BufferUsageFlags::VERTEX_BUFFER | vk::BufferUsageFlags::TRANSFER_DST,
            ),
            &AllocationOptions::usage(MemoryUsage::GpuOnly).tagged("mesh vertices"),
        )
    }?;
    // SAFETY: as above.
    let mut staging = unsafe {
        allocator.create_buffer_mapped(
            &info(vertices.len(), vk::BufferUsageFlags::TRANSFER_SRC),
            &AllocationOptions::usage(MemoryUsage::Upload)
                .in_pool(staging_ring)
                .tagged("vertex upload"),
        )
    }?;
    staging.mapped_mut().write(0, &vertices)?;
    allocator.flush(staging.allocation(), 0, vertices.len() as u64)?;
    submit_and_wait(&gpu, |cmd| {
        let region = vk::BufferCopy::default().size(vertices.len() as u64);
        // SAFETY: both buffers are live, bound and have transfer usages.
        unsafe {
            gpu.device
                .cmd_copy_buffer(cmd, staging.raw(), vertex_buffer.raw(), &[region])
        };
    })?;
    println!(
        "2. vertex buffer: {} B at offset {} of memory type {}",
        vertex_buffer.allocation().size(),
        vertex_buffer.allocation().offset(),
        vertex_buffer.allocation().memory_type()
    );

    // 3. The texture pool's hard budget: fill it, and see it refuse.
    let texture_info = |size: u32| {
        vk::ImageCreateInfo::default()
            .image_type(vk::ImageType::TYPE_2D)
            .format(vk::Format::R8G8B8A8_UNORM)
            .extent(vk::Extent3D {
                width: size,
                height: size,
                depth: 1,
            })
            .mip_levels(1)
            .array_layers(1)
            .samples(vk::SampleCountFlags::TYPE_1)
            .tiling(vk::ImageTiling::OPTIMAL)
            .usage(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_DST)
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
            .initial_layout(vk::ImageLayout::UNDEFINED)
    };
    let options = AllocationOptions::usage(MemoryUsage::GpuOnly)
        .in_pool(textures)
        .tagged("texture");
    let mut images = Vec::new();
    let refusal = loop {
        // SAFETY: a valid create info.
        match unsafe { allocator.create_image(&texture_info(1024), &options) } {
            Ok(image) => images.push(image),
            Err(e) => break e,
        }
        if images.len() > 64 {
            return Err("the pool budget never refused".into());
        }
    };
    match refusal {
        // The streamer's cue: evict, or load a coarser mip.
        Error::PoolExhausted { used, budget, .. } => println!(
            "3. texture pool full after {} images: {used} of {budget} B committed",
            images.len()
        ),
        other => return Err(other.into()),
    }

    // 4. Frames: begin, read cheap statistics, reset the ring once the GPU
    // is done with the frame (submit_and_wait waited).
    // SAFETY: the device finished the copy (waited above).
    unsafe { allocator.destroy_buffer(staging) }?;
    for frame in 0..3 {
        allocator.begin_frame();
        let stats = allocator.statistics();
        let heap = &stats.heaps[0];
        println!(
            "4. frame {frame}: {} allocations, heap 0 {} of {} B budget",
            stats.total.allocation_count, heap.budget.usage, heap.budget.budget
        );
        // SAFETY: no mapping of the ring made before is used again (the
        // staging buffer was destroyed above).
        unsafe { allocator.reset_pool(staging_ring) }?;
    }

    // 5. The JSON dump and the text summary.
    let json = allocator.to_json();
    println!(
        "5. JSON dump: {} bytes; summary:\n{}",
        json.len(),
        allocator.summary()
    );

    // 6. Defragmentation: buffers with holes between them, compacted a pass
    // at a time; each buffer's first word, written before, read back after.
    let count = 24u32;
    let mut buffers = Buffers(HashMap::new());
    let mut doomed = Vec::new();
    for i in 0..count {
        // SAFETY: a valid create info.
        let buffer = unsafe {
            allocator.create_buffer(
                &info(
                    256 << 10,
                    vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST,
                ),
                &AllocationOptions::usage(MemoryUsage::GpuOnly).tagged("movable buffer"),
            )
        }?;
        submit_and_wait(&gpu, |cmd| {
            // SAFETY: the buffer is live, bound and has TRANSFER_DST usage.
            unsafe {
                gpu.device
                    .cmd_fill_buffer(cmd, buffer.raw(), 0, 4, 1000 + i)
            };
        })?;
        if i % 2 == 0 {
            doomed.push(buffer);
        } else {
            buffers.put_back(Movable::Buffer(buffer));
        }
    }
    for buffer in doomed {
        // SAFETY: the device is idle (submit_and_wait waited).
        unsafe { allocator.destroy_buffer(buffer) }?;
    }
    let mut session = allocator.begin_defragmentation(
        &DefragDesc::default()
            .with_algorithm(DefragAlgorithm::Full)
            .with_pass_limits(1 << 20, 4),
    )?;
    let mut passes = 0;
    loop {
        passes += 1;
        // SAFETY: the queue is ours (this thread alone submits) and the device
        // is idle.
        if unsafe {
            defragment_a_little(
                &allocator,
                &mut session,
                gpu.queue,
                gpu.queue_family,
                &mut buffers,
            )
        }? {
            break;
        }
        if passes > 64 {
            return Err("defragmentation never completed".into());
        }
    }
    let totals = session.end(&allocator)?;
    if totals.allocations_moved == 0 {
        return Err("defragmentation moved nothing".into());
    }
    // SAFETY: a valid create info.
    let readback = unsafe {
        allocator.create_buffer_mapped(
            &info(4 * count as usize, vk::BufferUsageFlags::TRANSFER_DST),
            &AllocationOptions::usage(MemoryUsage::Readback).tagged("readback"),
        )
    }?;
    let moved: Vec<_> = buffers.0.into_values().collect();
    let mut expected = Vec::new();
    submit_and_wait(&gpu, |cmd| {
        for (slot, m) in moved.iter().enumerate() {
            let Movable::Buffer(b) = m else { continue };
            let region = vk::BufferCopy::default()
                .dst_offset(4 * slot as u64)
                .size(4);
            // SAFETY: both buffers are live, bound and have transfer usages.
            unsafe {
                gpu.device
                    .cmd_copy_buffer(cmd, b.raw(), readback.raw(), &[region])
            };
            expected.push((slot, b.allocation().id()));
        }
    })?;
    allocator.invalidate(readback.allocation(), 0, 4 * count as u64)?;
    let mut words = vec![0u8; 4 * count as usize];
    readback.allocation().read(0, &mut words)?;
    let values: Vec<u32> = words
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    // Odd i were kept: their values are 1000 + odd.
    for (slot, _) in &expected {
        let v = values[*slot];
        if !(1000..1000 + count).contains(&v) || (v - 1000) % 2 != 1 {
            return Err(format!("buffer {slot} holds {v} after defragmentation").into());
        }
    }
    let mut seen: Vec<u32> = expected.iter().map(|(slot, _)| values[*slot]).collect();
    seen.sort();
    seen.dedup();
    if seen.len() != expected.len() {
        return Err("two moved buffers hold the same contents".into());
    }
    println!(
        "6. defragmentation: {passes} passes, {} buffers moved ({} B), {} blocks freed; contents intact",
        totals.allocations_moved, totals.bytes_moved, totals.blocks_freed
    );

    // 7. Transient targets aliased: their lifetimes don't overlap, so they
    // share one allocation.
    let target = |format| {
        vk::ImageCreateInfo::default()
            .image_type(vk::ImageType::TYPE_2D)
            .format(format)
            .extent(vk::Extent3D {
                width: 512,
                height: 512,
                depth: 1,
            })
            .mip_levels(1)
            .array_layers(1)
            .samples(vk::SampleCountFlags::TYPE_1)
            .tiling(vk::ImageTiling::OPTIMAL)
            .usage(vk::ImageUsageFlags::COLOR_ATTACHMENT | vk::ImageUsageFlags::SAMPLED)
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
            .initial_layout(vk::ImageLayout::UNDEFINED)
    };
    let (gbuffer_info, bloom_info) = (
        target(vk::Format::R8G8B8A8_UNORM),
        target(vk::Format::R16G16B16A16_SFLOAT),
    );
    // SAFETY: valid create infos.
    let (group, gbuffer, bloom) = unsafe { transients(&allocator, &gbuffer_info, &bloom_info) }?;
    println!(
        "7. aliased targets: {} B for both, {} B saved",
        group.allocation().size(),
        group.bytes_saved()
    );
    // SAFETY: the device never used them.
    unsafe {
        allocator
            .destroy_aliased_image(gbuffer)
            .map_err(Error::from)?;
        allocator
            .destroy_aliased_image(bloom)
            .map_err(Error::from)?;
    }
    allocator
        .free_alias_group(group)
        .map_err(|e| e.into_parts().0)?;

    // 8. Teardown: give everything back, take the allocator out of its
    // `Arc`, and free all of its memory before the device goes.
    // SAFETY: the device is idle (every submission was waited for).
    unsafe {
        for image in images {
            allocator.destroy_image(image)?;
        }
        allocator.destroy_buffer(vertex_buffer)?;
        allocator.destroy_buffer(readback)?;
        for m in moved {
            if let Movable::Buffer(b) = m {
                allocator.destroy_buffer(b)?;
            }
        }
    }
    allocator.destroy_pool(staging_ring)?;
    allocator.destroy_pool(textures)?;
    let allocator = Arc::into_inner(allocator).ok_or("a clone of the allocator is alive")?;
    // SAFETY: no mapping of this allocator is used after this point (the
    // device is destroyed next).
    let report = unsafe { allocator.destroy_all_memory() };
    println!("8. {report}");
    // SAFETY: the allocator is gone; nothing else uses the device or instance.
    unsafe {
        gpu.device.destroy_device(None);
        gpu.instance.destroy_instance(None);
    }
    if !report.is_empty() {
        return Err("leaks".into());
    }
    Ok(())
}
