//! Buffers and images of every class, through the allocator, on a real
//! Vulkan device with validation on: each holds its own pattern, written and
//! read back by the GPU, so overlapping allocations or wrong bindings fail.

use ash::vk;
use gpu_tests::resources::{assert_disjoint, image_info, ResourceSet};
use gpu_tests::GpuContext;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vkalloc::range::LinearMode;
use vkalloc::{AllocationOptions, DedicatedPolicy, MemoryUsage, PoolAlgorithm, PoolDesc};

/// Sizes that are odd, tiny, page-sized and larger than a page.
const BUFFER_SIZES: [u64; 7] = [4, 256, 4097, 65_536, 65_537, 300_001, 1 << 20];

/// Extents, square and not, including ones that are not multiples of any tile.
const IMAGE_EXTENTS: [(u32, u32); 5] = [(1, 1), (16, 16), (17, 33), (64, 64), (256, 100)];

fn extent((width, height): (u32, u32)) -> vk::Extent2D {
    vk::Extent2D { width, height }
}

fn opts(usage: MemoryUsage, tag: &str) -> AllocationOptions<'_> {
    AllocationOptions::usage(usage).tagged(tag)
}

fn linear_images_supported(ctx: &GpuContext) -> bool {
    // SAFETY: the physical device belongs to the context's live instance.
    let result = unsafe {
        ctx.instance().get_physical_device_image_format_properties(
            ctx.physical_device(),
            gpu_tests::resources::TEST_IMAGE_FORMAT,
            vk::ImageType::TYPE_2D,
            vk::ImageTiling::LINEAR,
            vk::ImageUsageFlags::TRANSFER_SRC | vk::ImageUsageFlags::TRANSFER_DST,
            vk::ImageCreateFlags::empty(),
        )
    };
    match result {
        Ok(props) => props.max_extent.width >= 256 && props.max_extent.height >= 256,
        Err(_) => false,
    }
}

#[test]
fn buffers_of_every_usage_hold_their_own_bytes() {
    let ctx = GpuContext::for_test();
    let mut set = ResourceSet::new(&ctx, 1);
    for &size in &BUFFER_SIZES {
        set.add_buffer(
            "gpu-only",
            size,
            &opts(MemoryUsage::GpuOnly, "gpu-only"),
            false,
        )
        .unwrap();
        set.add_buffer("upload", size, &opts(MemoryUsage::Upload, "upload"), true)
            .unwrap();
        // Readback memory written the way it is meant to be: by the GPU.
        set.add_buffer(
            "readback",
            size,
            &opts(MemoryUsage::Readback, "readback"),
            false,
        )
        .unwrap();
        set.add_buffer(
            "readback-mapped",
            size,
            &opts(MemoryUsage::Readback, "readback"),
            true,
        )
        .unwrap();
    }
    set.write_all();
    set.check_all();
    // A second round catches a copy that clobbered a subject checked earlier.
    set.check_all();
    set.destroy_all();
    ctx.assert_no_live_allocations();
    ctx.finish();
}

#[test]
fn optimal_images_and_buffers_share_blocks_without_clobbering() {
    let ctx = GpuContext::for_test();
    let mut set = ResourceSet::new(&ctx, 2);
    // Interleaved so that linear and optimal resources sit side by side in
    // the same blocks (buffer-image granularity).
    for (i, &e) in IMAGE_EXTENTS.iter().enumerate() {
        set.add_optimal_image("image", extent(e), &opts(MemoryUsage::GpuOnly, "image"))
            .unwrap();
        set.add_buffer(
            "buffer",
            BUFFER_SIZES[i % BUFFER_SIZES.len()],
            &opts(MemoryUsage::GpuOnly, "buffer"),
            false,
        )
        .unwrap();
    }
    set.write_all();
    set.check_all();
    set.destroy_all();
    ctx.assert_no_live_allocations();
    ctx.finish();
}

#[test]
fn linear_images_written_through_the_mapping() {
    let ctx = GpuContext::for_test();
    assert!(
        linear_images_supported(&ctx),
        "{} supports no linear-tiling R8G8B8A8_UINT transfer image of 256x256: \
         this test needs one (lavapipe and every desktop driver have it)",
        ctx.info().name
    );
    let mut set = ResourceSet::new(&ctx, 3);
    for &e in &IMAGE_EXTENTS {
        set.add_linear_image(
            "linear",
            extent(e),
            &opts(MemoryUsage::Upload, "linear image"),
        )
        .unwrap();
        // Optimal images beside them: where the device has a memory type
        // that is both device-local and host-visible (lavapipe, integrated
        // GPUs), both land in the same blocks and buffer-image granularity
        // matters. GPU-only, since some drivers (NVIDIA) allow no
        // host-visible type for optimal images.
        set.add_optimal_image(
            "optimal",
            extent(e),
            &opts(MemoryUsage::GpuOnly, "optimal image"),
        )
        .unwrap();
    }
    set.write_all();
    set.check_all();
    set.destroy_all();
    ctx.assert_no_live_allocations();
    ctx.finish();
}

#[test]
fn dedicated_on_request_gets_its_own_memory() {
    let ctx = GpuContext::for_test();
    let mut set = ResourceSet::new(&ctx, 4);
    let dedicated = |usage| AllocationOptions {
        dedicated: DedicatedPolicy::Always,
        ..opts(usage, "dedicated")
    };
    // Suballocated neighbours first, so a dedicated allocation wrongly
    // placed in a shared block would show.
    set.add_buffer("shared", 4096, &opts(MemoryUsage::GpuOnly, "shared"), false)
        .unwrap();
    set.add_buffer("dedicated", 65_536, &dedicated(MemoryUsage::GpuOnly), false)
        .unwrap();
    set.add_buffer("dedicated", 10_000, &dedicated(MemoryUsage::Upload), true)
        .unwrap();
    set.add_optimal_image(
        "dedicated",
        extent((64, 64)),
        &dedicated(MemoryUsage::GpuOnly),
    )
    .unwrap();
    set.add_buffer("shared", 4096, &opts(MemoryUsage::GpuOnly, "shared"), false)
        .unwrap();

    let subjects = set.subjects();
    for s in subjects.iter().filter(|s| s.label.starts_with("dedicated")) {
        let a = s.held.allocation();
        assert!(a.is_dedicated(), "{}: not dedicated", s.label);
        assert_eq!(
            a.offset(),
            0,
            "{}: dedicated allocation at a non-zero offset",
            s.label
        );
        for other in subjects.iter().filter(|o| !std::ptr::eq(*o, s)) {
            assert_ne!(
                other.held.allocation().memory(),
                a.memory(),
                "{} shares its VkDeviceMemory with {}",
                s.label,
                other.label
            );
        }
    }
    let stats = ctx.allocator().statistics();
    assert!(
        stats.total.dedicated_count >= 3,
        "statistics count {} dedicated allocations, expected at least 3",
        stats.total.dedicated_count
    );
    set.write_all();
    set.check_all();
    set.destroy_all();
    ctx.assert_no_live_allocations();
    ctx.finish();
}

#[test]
fn transient_attachments_bind_where_supported() {
    let ctx = GpuContext::for_test();
    let lazy = ctx
        .info()
        .has_memory_type_with(vk::MemoryPropertyFlags::LAZILY_ALLOCATED);
    let allocator = ctx.allocator();
    let mut images = Vec::new();
    for (format, usage) in [
        (
            vk::Format::R8G8B8A8_UNORM,
            vk::ImageUsageFlags::COLOR_ATTACHMENT,
        ),
        (
            vk::Format::D32_SFLOAT,
            vk::ImageUsageFlags::DEPTH_STENCIL_ATTACHMENT,
        ),
    ] {
        let info = image_info(
            extent((128, 64)),
            vk::ImageTiling::OPTIMAL,
            vk::ImageLayout::UNDEFINED,
        )
        .format(format)
        .usage(usage | vk::ImageUsageFlags::TRANSIENT_ATTACHMENT);
        // SAFETY: the create info describes a valid attachment image.
        let image =
            unsafe { allocator.create_image(&info, &opts(MemoryUsage::Transient, "transient")) }
                .unwrap_or_else(|e| panic!("transient {format:?} attachment: {e}"));
        let a = image.allocation();
        // SAFETY: `image` is live on this device.
        let req = unsafe { ctx.device().get_image_memory_requirements(image.raw()) };
        assert!(a.size() >= req.size && a.offset() % req.alignment.max(1) == 0);
        assert!(req.memory_type_bits & (1 << a.memory_type()) != 0);
        let flags = ctx.info().memory_properties.memory_types_as_slice()[a.memory_type() as usize]
            .property_flags;
        if lazy && req.memory_type_bits & lazy_types(&ctx) != 0 {
            assert!(
                flags.contains(vk::MemoryPropertyFlags::LAZILY_ALLOCATED),
                "transient attachment in type {} ({flags:?}) although lazily allocated memory exists",
                a.memory_type()
            );
        }
        images.push(image);
    }
    let labelled: Vec<(&str, &vkalloc::Allocation)> = images
        .iter()
        .map(|i| ("transient", i.allocation()))
        .collect();
    assert_disjoint(&labelled);
    for image in images {
        // SAFETY: the images were never used by the device.
        unsafe { allocator.destroy_image(image) }.expect("destroy_image failed");
    }
    ctx.assert_no_live_allocations();
    ctx.finish();
}

fn lazy_types(ctx: &GpuContext) -> u32 {
    ctx.info()
        .memory_properties
        .memory_types_as_slice()
        .iter()
        .enumerate()
        .filter(|(_, t)| {
            t.property_flags
                .contains(vk::MemoryPropertyFlags::LAZILY_ALLOCATED)
        })
        .fold(0, |bits, (i, _)| bits | 1 << i)
}

#[test]
fn raw_allocations_bound_by_hand() {
    let ctx = GpuContext::for_test();
    let mut set = ResourceSet::new(&ctx, 5);
    for &size in &BUFFER_SIZES {
        set.add_raw_buffer("raw", size, &opts(MemoryUsage::GpuOnly, "raw"), false)
            .unwrap();
        set.add_raw_buffer("raw-mapped", size, &opts(MemoryUsage::Upload, "raw"), true)
            .unwrap();
    }
    set.write_all();
    set.check_all();
    set.destroy_all();
    ctx.assert_no_live_allocations();
    ctx.finish();
}

#[test]
fn tlsf_pool_holds_buffers_and_images() {
    let ctx = GpuContext::for_test();
    let allocator = ctx.allocator();
    let pool = allocator
        .create_pool(&PoolDesc {
            usage: MemoryUsage::GpuOnly,
            block_size: 2 << 20,
            max_blocks: 4,
            algorithm: PoolAlgorithm::Tlsf,
            ..PoolDesc::new("test tlsf pool")
        })
        .expect("creating a TLSF pool failed");
    let in_pool = opts(MemoryUsage::GpuOnly, "pooled").in_pool(pool);
    let mut set = ResourceSet::new(&ctx, 6);
    for (i, &size) in BUFFER_SIZES.iter().enumerate() {
        set.add_buffer("pooled", size, &in_pool, false).unwrap();
        set.add_optimal_image(
            "pooled",
            extent(IMAGE_EXTENTS[i % IMAGE_EXTENTS.len()]),
            &in_pool,
        )
        .unwrap();
    }
    // And some outside it, to check pool and default blocks stay apart.
    set.add_buffer(
        "default",
        65_536,
        &opts(MemoryUsage::GpuOnly, "default"),
        false,
    )
    .unwrap();
    for s in set.subjects() {
        let expected = if s.label.starts_with("pooled") {
            Some(pool)
        } else {
            None
        };
        assert_eq!(
            s.held.allocation().pool(),
            expected,
            "{}: wrong pool",
            s.label
        );
    }
    let stats = allocator.statistics();
    let pool_stats = stats
        .pools
        .iter()
        .find(|p| p.name == "test tlsf pool")
        .expect("the pool is missing from statistics");
    assert_eq!(
        pool_stats.usage.allocation_count,
        2 * BUFFER_SIZES.len() as u64
    );
    assert!(pool_stats.usage.block_bytes <= 4 * (2 << 20));

    set.write_all();
    set.check_all();
    set.destroy_all();
    allocator
        .destroy_pool(pool)
        .expect("destroying the emptied pool failed");
    ctx.assert_no_live_allocations();
    ctx.finish();
}

#[test]
fn tlsf_pool_over_its_budget_fails_cleanly() {
    let ctx = GpuContext::for_test();
    let allocator = ctx.allocator();
    let pool = allocator
        .create_pool(&PoolDesc {
            usage: MemoryUsage::GpuOnly,
            block_size: 1 << 20,
            max_blocks: 2,
            budget: Some(2 << 20),
            ..PoolDesc::new("capped pool")
        })
        .expect("creating a capped pool failed");
    let in_pool = opts(MemoryUsage::GpuOnly, "capped").in_pool(pool);
    let mut set = ResourceSet::new(&ctx, 7);
    let mut refused = None;
    for _ in 0..16 {
        // 16 x 256 KiB = 4 MiB > the 2 MiB cap.
        match set.add_buffer("capped", 256 << 10, &in_pool, false) {
            Ok(_) => {}
            Err(err) => {
                refused = Some(err);
                break;
            }
        }
    }
    let err = refused.expect("a pool capped at 2 MiB accepted 4 MiB of buffers");
    assert!(
        matches!(
            err,
            vkalloc::Error::PoolExhausted { .. } | vkalloc::Error::OverBudget { .. }
        ),
        "unexpected error from a full pool: {err:?}"
    );
    assert!(
        set.subjects().len() >= 4,
        "the pool refused before holding 1 MiB"
    );
    // What it did accept is intact.
    set.write_all();
    set.check_all();
    set.destroy_all();
    allocator
        .destroy_pool(pool)
        .expect("destroying the emptied pool failed");
    ctx.assert_no_live_allocations();
    ctx.finish();
}

#[test]
fn linear_pools_hold_upload_buffers_frame_after_frame() {
    let ctx = GpuContext::for_test();
    let allocator = ctx.allocator();
    for mode in [LinearMode::Stack, LinearMode::Ring] {
        let name = format!("linear {mode:?}");
        let pool = allocator
            .create_pool(&PoolDesc {
                usage: MemoryUsage::Upload,
                block_size: 1 << 20,
                min_blocks: 1,
                max_blocks: 1,
                algorithm: PoolAlgorithm::Linear(mode),
                ..PoolDesc::new(name.clone())
            })
            .unwrap_or_else(|e| panic!("creating a linear {mode:?} pool failed: {e}"));
        let in_pool = opts(MemoryUsage::Upload, "per-frame").in_pool(pool);
        // Four "frames": fill, check, then either free one by one in the
        // order the mode is made for, or reset the pool at once (free-at-once)
        // and destroy the buffers after (freeing then does nothing).
        for frame in 0..4u64 {
            let mut set = ResourceSet::new(&ctx, 100 + frame);
            for &size in &[256u64, 4097, 65_536, 1000, 12_345] {
                set.add_buffer(&format!("{mode:?} frame {frame}"), size, &in_pool, true)
                    .unwrap_or_else(|e| panic!("linear {mode:?} pool, frame {frame}: {e}"));
                set.add_raw_buffer(&format!("{mode:?} frame {frame}"), size, &in_pool, true)
                    .unwrap_or_else(|e| panic!("linear {mode:?} pool, frame {frame}: {e}"));
            }
            for s in set.subjects() {
                assert_eq!(s.held.allocation().pool(), Some(pool), "{}", s.label);
            }
            set.write_all();
            set.check_all();
            if frame % 2 == 0 {
                match mode {
                    LinearMode::Stack => while set.destroy_last() {},
                    LinearMode::Ring => while set.destroy_first() {},
                }
                // SAFETY: the pool holds no live allocation.
                unsafe { allocator.reset_pool(pool) }.expect("resetting an empty pool failed");
            } else {
                // SAFETY: the GPU is done with the set (one_shot waits), and
                // its mappings are not touched again: `destroy_all` only
                // destroys the buffers and frees the stale handles (no-ops).
                unsafe { allocator.reset_pool(pool) }
                    .unwrap_or_else(|e| panic!("resetting the linear {mode:?} pool failed: {e}"));
                set.destroy_all();
            }
            let stats = allocator.statistics();
            let pool_stats = stats
                .pools
                .iter()
                .find(|p| p.name == name)
                .expect("pool missing");
            assert_eq!(
                pool_stats.usage.allocation_count, 0,
                "linear {mode:?} pool after frame {frame}: allocations left"
            );
            assert_eq!(
                pool_stats.usage.block_count, 1,
                "the pool's one block was not kept"
            );
        }
        allocator
            .destroy_pool(pool)
            .unwrap_or_else(|e| panic!("destroying the linear {mode:?} pool failed: {e}"));
    }
    ctx.assert_no_live_allocations();
    ctx.finish();
}

/// A random mix of every class alive at once; half freed; a second mix
/// placed in the holes; both checked.
#[test]
fn random_mix_reuses_freed_space_without_clobbering() {
    let ctx = GpuContext::for_test();
    let allocator = ctx.allocator();
    let linear_ok = linear_images_supported(&ctx);
    let pool = allocator
        .create_pool(&PoolDesc {
            usage: MemoryUsage::GpuOnly,
            block_size: 4 << 20,
            ..PoolDesc::new("mix pool")
        })
        .expect("creating a pool failed");
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed);
    let fill = |set: &mut ResourceSet<'_>, count: usize, rng: &mut ChaCha8Rng| {
        for _ in 0..count {
            let size = match rng.gen_range(0..4) {
                0 => rng.gen_range(1..=512),
                1 => rng.gen_range(512..=16 << 10),
                2 => rng.gen_range(16 << 10..=256 << 10),
                _ => rng.gen_range(256 << 10..=1 << 20),
            };
            let side = rng.gen_range(1..=128);
            let e = extent((side, rng.gen_range(1..=128)));
            let pooled = rng.gen_bool(0.25);
            let with_pool =
                |o: AllocationOptions<'static>| if pooled { o.in_pool(pool) } else { o };
            let r = match rng.gen_range(0..7) {
                0 => set.add_buffer(
                    "mix",
                    size,
                    &with_pool(opts(MemoryUsage::GpuOnly, "mix")),
                    false,
                ),
                1 => set.add_buffer("mix", size, &opts(MemoryUsage::Upload, "mix"), true),
                2 => set.add_buffer("mix", size, &opts(MemoryUsage::Readback, "mix"), false),
                3 => set.add_raw_buffer(
                    "mix",
                    size,
                    &with_pool(opts(MemoryUsage::GpuOnly, "mix")),
                    false,
                ),
                4 if linear_ok => set.add_linear_image("mix", e, &opts(MemoryUsage::Upload, "mix")),
                _ => set.add_optimal_image("mix", e, &with_pool(opts(MemoryUsage::GpuOnly, "mix"))),
            };
            r.unwrap_or_else(|err| panic!("allocation failed in the random mix: {err}"));
        }
    };
    let mut first = ResourceSet::new(&ctx, 1000);
    fill(&mut first, 60, &mut rng);
    first.write_all();
    first.check_all();
    let mut coin = ChaCha8Rng::seed_from_u64(7);
    first.destroy_if(|_| coin.gen_bool(0.5));

    let mut second = ResourceSet::new(&ctx, 2000);
    fill(&mut second, 40, &mut rng);
    second.check_placement(&first.allocations());
    second.write_all();
    second.check_all_with(&first.allocations());
    // The second set's writes must not have touched the first's survivors.
    first.check_all_with(&second.allocations());
    first.destroy_all();
    second.destroy_all();
    allocator
        .destroy_pool(pool)
        .expect("destroying the emptied pool failed");
    ctx.assert_no_live_allocations();
    ctx.finish();
}

/// Device-local buffers and images placed in room that a block of another
/// memory type of the same heap keeps, written and read back by the GPU: on
/// a device with a resizable BAR (the H200) the block an upload left empty
/// takes the buffers whose memory type bits allow it (`policy::sibling_types`;
/// the H200's optimal images allow only device-local memory), and the
/// statistics show them in that host-visible type; on a device without such
/// a pair (lavapipe's one type) they land as before.
#[test]
fn gpu_only_resources_in_room_an_upload_left() {
    use vkalloc::device::MemoryPropertyFlags as F;
    let ctx = GpuContext::for_test();
    let allocator = ctx.allocator();
    let upload = allocator
        .allocate(&vkalloc::AllocationDesc {
            size: 32 << 20,
            alignment: 256,
            kind: vkalloc::ResourceKind::Buffer,
            options: opts(MemoryUsage::Upload, "upload"),
            ..vkalloc::AllocationDesc::default()
        })
        .unwrap();
    let upload_type = upload.memory_type();
    allocator.free(upload).unwrap();
    let types = allocator.statistics().types;
    // The upload type is the device-local type's sibling where it shares its
    // heap and has every one of its properties.
    let sibling = types
        .iter()
        .find(|t| t.flags.contains(F::DEVICE_LOCAL) && !t.flags.contains(F::HOST_VISIBLE))
        .is_some_and(|d| {
            let u = &types[upload_type as usize];
            u.index != d.index && u.heap == d.heap && u.flags.contains(d.flags)
        });
    let mut set = ResourceSet::new(&ctx, 4);
    // Buffers first: the device-local type has no block yet.
    let mut allowed = false;
    for &size in &BUFFER_SIZES {
        let subject = set
            .add_buffer("buffer", size, &opts(MemoryUsage::GpuOnly, "buffer"), false)
            .unwrap();
        allowed |= subject.requirements.memory_type_bits & (1 << upload_type) != 0;
    }
    for &e in &IMAGE_EXTENTS {
        set.add_optimal_image("image", extent(e), &opts(MemoryUsage::GpuOnly, "image"))
            .unwrap();
    }
    let in_upload_type = allocator.statistics().types[upload_type as usize]
        .usage
        .allocation_count;
    eprintln!(
        "{}: upload type {upload_type}, sibling of the device-local type: {sibling}, \
         buffers may use it: {allowed}, device-local resources in it: {in_upload_type}",
        ctx.info().name
    );
    if sibling && allowed {
        assert!(
            in_upload_type > 0,
            "the upload type's empty block took no device-local buffer"
        );
    }
    set.write_all();
    set.check_all();
    set.destroy_all();
    ctx.assert_no_live_allocations();
    ctx.finish();
}
