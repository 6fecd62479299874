//! Defragmentation and aliasing on a real device with validation (and
//! synchronization validation) on: pattern-filled buffers and images
//! survive passes byte for byte; two images aliased on one allocation are
//! used one after the other.

use ash::vk;
use gpu_tests::resources::{image_info, readback_buffer, upload_buffer, ResourceSet};
use gpu_tests::{pattern, GpuContext, LayoutTransition};
use vkalloc::vk::Movable;
use vkalloc::{
    AllocationOptions, AllocatorDesc, DefragAlgorithm, DefragDesc, MemoryUsage, PassInterval,
};

fn opts(tag: &str) -> AllocationOptions<'_> {
    AllocationOptions::usage(MemoryUsage::GpuOnly).tagged(tag)
}

#[test]
fn buffers_and_images_survive_defragmentation_byte_for_byte() {
    let ctx = GpuContext::with_desc(AllocatorDesc::default().with_block_size(8 << 20))
        .expect("GPU context");
    let allocator = ctx.allocator();
    let mut set = ResourceSet::new(&ctx, 41);
    for i in 0..48u64 {
        if i % 3 == 0 {
            let side = 16 + (i as u32 % 5) * 24;
            set.add_optimal_image(
                "image",
                vk::Extent2D {
                    width: side,
                    height: side / 2 + 1,
                },
                &opts("image"),
            )
            .unwrap();
        } else {
            set.add_buffer("buffer", 4096 + i * 7919, &opts("buffer"), false)
                .unwrap();
        }
    }
    // A mapped buffer too: its moves are dropped, so cancelled.
    set.add_buffer(
        "mapped",
        65536,
        &AllocationOptions::usage(MemoryUsage::Upload).tagged("mapped"),
        true,
    )
    .unwrap();
    set.write_all();
    // Fragment: every other resource goes.
    let mut n = 0;
    set.destroy_if(|_| {
        n += 1;
        n % 2 == 0
    });
    set.check_all();
    let before = allocator.statistics().total;
    let stats = set.defragment(
        &DefragDesc::default().with_algorithm(DefragAlgorithm::Full),
        16,
    );
    let after = allocator.statistics().total;
    println!(
        "lavapipe: {} moves, {} bytes moved, {} blocks freed, committed {} -> {} bytes (live {})",
        stats.allocations_moved,
        stats.bytes_moved,
        stats.blocks_freed,
        before.block_bytes,
        after.block_bytes,
        after.allocation_bytes
    );
    assert!(stats.allocations_moved > 0, "something moved");
    assert!(after.block_bytes <= before.block_bytes);
    set.check_all();
    set.destroy_all();
    ctx.assert_no_live_allocations();
    assert_eq!(ctx.validation_errors(), 0);
    ctx.finish();
}

/// An image with several mips and layers moves whole: every subresource
/// read back after the move holds its pattern.
#[test]
fn every_mip_and_layer_of_an_image_moves() {
    let ctx = GpuContext::with_desc(AllocatorDesc::default().with_block_size(4 << 20))
        .expect("GPU context");
    let allocator = ctx.allocator();
    let (mips, layers, side) = (4u32, 3u32, 64u32);
    let info = image_info(
        vk::Extent2D {
            width: side,
            height: side,
        },
        vk::ImageTiling::OPTIMAL,
        vk::ImageLayout::UNDEFINED,
    )
    .mip_levels(mips)
    .array_layers(layers);
    // A hole in front of the image, so Full compaction moves it down.
    let filler_info = vk::BufferCreateInfo::default()
        .size(1 << 20)
        .usage(vk::BufferUsageFlags::TRANSFER_DST)
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    // SAFETY: valid create infos for this device.
    let filler = unsafe { allocator.create_buffer(&filler_info, &opts("filler")) }.unwrap();
    // SAFETY: as above.
    let image = unsafe { allocator.create_image(&info, &opts("mipped")) }.unwrap();
    // The subresources, each with its pattern, through one staging buffer.
    let texel = 4u64;
    let mut regions = Vec::new();
    let mut offset = 0u64;
    for mip in 0..mips {
        let s = (side >> mip).max(1);
        for layer in 0..layers {
            regions.push((mip, layer, s, offset));
            offset += u64::from(s) * u64::from(s) * texel;
        }
    }
    let total = offset;
    let staging = upload_buffer(&ctx, total, 77, "staging");
    let copies: Vec<vk::BufferImageCopy> = regions
        .iter()
        .map(|&(mip, layer, s, offset)| vk::BufferImageCopy {
            buffer_offset: offset,
            buffer_row_length: 0,
            buffer_image_height: 0,
            image_subresource: vk::ImageSubresourceLayers {
                aspect_mask: vk::ImageAspectFlags::COLOR,
                mip_level: mip,
                base_array_layer: layer,
                layer_count: 1,
            },
            image_offset: vk::Offset3D::default(),
            image_extent: vk::Extent3D {
                width: s,
                height: s,
                depth: 1,
            },
        })
        .collect();
    let whole = vk::ImageSubresourceRange {
        aspect_mask: vk::ImageAspectFlags::COLOR,
        base_mip_level: 0,
        level_count: mips,
        base_array_layer: 0,
        layer_count: layers,
    };
    let barrier = |image: vk::Image, t: LayoutTransition| {
        vk::ImageMemoryBarrier::default()
            .image(image)
            .old_layout(t.old)
            .new_layout(t.new)
            .src_access_mask(t.src_access)
            .dst_access_mask(t.dst_access)
            .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
            .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
            .subresource_range(whole)
    };
    let device = ctx.device();
    ctx.one_shot(|cmd| {
        // SAFETY: `cmd` is recording; the handles are live; one_shot waits.
        unsafe {
            let t = LayoutTransition::UNDEFINED_TO_TRANSFER_DST;
            device.cmd_pipeline_barrier(
                cmd,
                t.src_stage,
                t.dst_stage,
                vk::DependencyFlags::empty(),
                &[],
                &[],
                &[barrier(image.raw(), t)],
            );
            device.cmd_copy_buffer_to_image(
                cmd,
                staging.raw(),
                image.raw(),
                vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                &copies,
            );
            let t = LayoutTransition::TRANSFER_DST_TO_SRC;
            device.cmd_pipeline_barrier(
                cmd,
                t.src_stage,
                t.dst_stage,
                vk::DependencyFlags::empty(),
                &[],
                &[],
                &[barrier(image.raw(), t)],
            );
        }
    });
    // SAFETY: the submission that used them has completed.
    unsafe { allocator.destroy_buffer(staging) }.unwrap();
    // SAFETY: never used by the device.
    unsafe { allocator.destroy_buffer(filler) }.unwrap();

    // One pass, done by hand: prepare, record on our command buffer, finish.
    let mut defrag = allocator
        .begin_defragmentation(&DefragDesc::default().with_algorithm(DefragAlgorithm::Full))
        .unwrap();
    let mut moves = defrag.begin_pass(allocator).unwrap();
    let mv = moves
        .iter()
        .position(|m| m.id() == image.allocation().id())
        .map(|i| moves.swap_remove(i))
        .expect("the image moves down into the hole");
    drop(moves);
    let old_place = (image.allocation().memory(), image.allocation().offset());
    // SAFETY: the image is live and idle.
    let prepared = unsafe {
        allocator.prepare_move(
            mv,
            Movable::Image {
                image,
                layout: vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
            },
        )
    }
    .unwrap();
    // SAFETY: `cmd` is recording; one_shot waits for the copies.
    ctx.one_shot(|cmd| unsafe { allocator.cmd_record_moves(cmd, std::slice::from_ref(&prepared)) });
    // SAFETY: the copies completed.
    let moved = unsafe { allocator.finish_move(&mut defrag, prepared) }.unwrap();
    let report = defrag.end_pass(allocator).unwrap();
    assert_eq!(report.stats.allocations_moved, 1);
    defrag.end(allocator).unwrap();
    allocator.validate().unwrap();
    let Movable::Image { image, layout } = moved else {
        panic!("an image moves as an image")
    };
    assert_eq!(layout, vk::ImageLayout::TRANSFER_SRC_OPTIMAL);
    assert_ne!(
        (image.allocation().memory(), image.allocation().offset()),
        old_place
    );

    let readback = readback_buffer(&ctx, total);
    ctx.one_shot(|cmd| {
        // SAFETY: the image is in TRANSFER_SRC_OPTIMAL (the move kept it);
        // the buffer is live; one_shot waits.
        unsafe {
            device.cmd_copy_image_to_buffer(
                cmd,
                image.raw(),
                vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
                readback.raw(),
                &copies,
            );
            ctx.cmd_transfer_barrier(cmd);
        }
    });
    let m = readback.allocation();
    allocator.invalidate(m, 0, m.size()).unwrap();
    pattern::check(77, &m.as_slice()[..total as usize])
        .unwrap_or_else(|e| panic!("after the move: {e}"));
    // SAFETY: every submission using them has completed.
    unsafe {
        allocator.destroy_buffer(readback).unwrap();
        allocator.destroy_image(image).unwrap();
    }
    ctx.assert_no_live_allocations();
    assert_eq!(ctx.validation_errors(), 0);
    ctx.finish();
}

/// Two images on one allocation, used one after the other: the second
/// starts from UNDEFINED after the switch; validation stays silent.
#[test]
fn two_images_aliased_on_one_allocation() {
    let ctx = GpuContext::for_test();
    let allocator = ctx.allocator();
    let a_info = image_info(
        vk::Extent2D {
            width: 64,
            height: 64,
        },
        vk::ImageTiling::OPTIMAL,
        vk::ImageLayout::UNDEFINED,
    );
    let b_info = image_info(
        vk::Extent2D {
            width: 32,
            height: 48,
        },
        vk::ImageTiling::OPTIMAL,
        vk::ImageLayout::UNDEFINED,
    );
    // SAFETY: valid create infos.
    let (a_req, b_req) = unsafe {
        (
            allocator
                .image_alias_requirement(&a_info, PassInterval::new(0, 1), "first")
                .unwrap(),
            allocator
                .image_alias_requirement(&b_info, PassInterval::new(2, 3), "second")
                .unwrap(),
        )
    };
    let group = allocator
        .allocate_alias_group(&[a_req, b_req], opts("transients"))
        .unwrap();
    assert_eq!(group.member(0).unwrap().offset, 0);
    assert_eq!(
        group.member(1).unwrap().offset,
        0,
        "disjoint lifetimes share"
    );
    assert_eq!(
        group.allocation().size(),
        a_req.size.max(b_req.size),
        "sized to the largest member"
    );
    let details = allocator.detailed_statistics();
    assert_eq!(details.alias_member_count, 2);
    assert!(details.aliased_bytes_saved >= a_req.size.min(b_req.size));
    // SAFETY: valid create infos; the group outlives the images.
    let (a, b) = unsafe {
        (
            allocator.create_aliased_image(&group, 0, &a_info).unwrap(),
            allocator.create_aliased_image(&group, 1, &b_info).unwrap(),
        )
    };
    let a_bytes = 64 * 64 * 4;
    let b_bytes = 32 * 48 * 4;
    let a_src = upload_buffer(&ctx, a_bytes, 5, "a");
    let b_src = upload_buffer(&ctx, b_bytes, 6, "b");
    let a_out = readback_buffer(&ctx, a_bytes);
    let b_out = readback_buffer(&ctx, b_bytes);
    ctx.one_shot(|cmd| {
        // SAFETY: `cmd` is recording; every handle is live; one_shot waits.
        // Pass 0-1 use `a`; then `b` takes the memory over, from UNDEFINED,
        // after a barrier that orders it behind every use of `a`.
        unsafe {
            let ea = vk::Extent2D {
                width: 64,
                height: 64,
            };
            let eb = vk::Extent2D {
                width: 32,
                height: 48,
            };
            ctx.cmd_image_barrier(cmd, a.raw(), LayoutTransition::UNDEFINED_TO_TRANSFER_DST);
            ctx.cmd_copy_buffer_to_image(cmd, a_src.raw(), a.raw(), ea);
            ctx.cmd_image_barrier(cmd, a.raw(), LayoutTransition::TRANSFER_DST_TO_SRC);
            ctx.cmd_copy_image_to_buffer(cmd, a.raw(), a_out.raw(), ea);
            // The switch: `b` starts undefined, after `a`'s reads and writes.
            let switch = LayoutTransition {
                src_stage: vk::PipelineStageFlags::TRANSFER,
                src_access: vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE,
                ..LayoutTransition::UNDEFINED_TO_TRANSFER_DST
            };
            ctx.cmd_image_barrier(cmd, b.raw(), switch);
            ctx.cmd_copy_buffer_to_image(cmd, b_src.raw(), b.raw(), eb);
            ctx.cmd_image_barrier(cmd, b.raw(), LayoutTransition::TRANSFER_DST_TO_SRC);
            ctx.cmd_copy_image_to_buffer(cmd, b.raw(), b_out.raw(), eb);
            ctx.cmd_transfer_barrier(cmd);
        }
    });
    for (out, seed, len) in [(&a_out, 5, a_bytes), (&b_out, 6, b_bytes)] {
        let m = out.allocation();
        allocator.invalidate(m, 0, m.size()).unwrap();
        pattern::check(seed, &m.as_slice()[..len as usize]).unwrap();
    }
    // SAFETY: every submission using them has completed.
    unsafe {
        allocator.destroy_aliased_image(a).unwrap();
        allocator.destroy_aliased_image(b).unwrap();
        for buffer in [a_src, b_src, a_out, b_out] {
            allocator.destroy_buffer(buffer).unwrap();
        }
    }
    allocator.free_alias_group(group).unwrap();
    ctx.assert_no_live_allocations();
    assert_eq!(ctx.validation_errors(), 0);
    ctx.finish();
}
