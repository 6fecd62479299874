//! Memory priorities on a real device with validation on.
//!
//! Where the driver has `VK_EXT_memory_priority` and
//! `VK_EXT_pageable_device_local_memory` (the sparse lavapipe of
//! `cargo xtask test`, named by `VKALLOC_SPARSE_DRIVER`; the H200), pools,
//! dedicated images and buffers are allocated with priorities and changed
//! later, and the validation layer checks every `VkMemoryPriorityAllocateInfoEXT`
//! and `vkSetDeviceMemoryPriorityEXT`. Where it has neither (the system
//! lavapipe of Debian 12), allocation works the same and changes are refused
//! with `NotEnabled`.

use std::path::Path;
use std::process::Command;

use ash::vk;
use gpu_tests::resources::image_info;
use gpu_tests::GpuContext;
use vkalloc::{AllocationOptions, DedicatedPolicy, Error, MemoryPriority, MemoryUsage, PoolDesc};

/// Set in the child process that runs [`priorities_where_the_driver_has_them`]'s body.
const CHILD: &str = "VKALLOC_PRIORITY_CHILD";

fn p(v: f32) -> MemoryPriority {
    MemoryPriority::new(v).expect("in range")
}

/// Pools, dedicated resources and shared ones with priorities; changes
/// later. Returns whether the changes were accepted.
fn exercise(ctx: &GpuContext) -> bool {
    let allocator = ctx.allocator();
    let pool = allocator
        .create_pool(&PoolDesc {
            block_size: 8 << 20,
            priority: Some(p(0.3)),
            ..PoolDesc::new("textures")
        })
        .expect("pool");
    let image = |extent, options: &AllocationOptions<'_>| {
        // SAFETY: a valid color image create info.
        unsafe {
            allocator.create_image(
                &image_info(
                    vk::Extent2D {
                        width: extent,
                        height: extent,
                    },
                    vk::ImageTiling::OPTIMAL,
                    vk::ImageLayout::UNDEFINED,
                ),
                options,
            )
        }
        .expect("image")
    };
    let texture = image(
        64,
        &AllocationOptions::usage(MemoryUsage::GpuOnly).in_pool(pool),
    );
    let target = image(
        512,
        &AllocationOptions {
            dedicated: DedicatedPolicy::Always,
            ..AllocationOptions::usage(MemoryUsage::GpuOnly).with_priority(MemoryPriority::HIGHEST)
        },
    );
    let info = vk::BufferCreateInfo::default()
        .size(1 << 16)
        .usage(vk::BufferUsageFlags::TRANSFER_DST)
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    // SAFETY: a valid buffer create info.
    let buffer = unsafe {
        allocator.create_buffer(
            &info,
            &AllocationOptions::usage(MemoryUsage::GpuOnly).with_priority(p(0.8)),
        )
    }
    .expect("buffer");
    assert!(target.allocation().is_dedicated());

    let changed = allocator.set_priority(target.allocation(), p(0.1));
    let pool_changed = allocator.set_pool_priority(pool, p(0.9));
    let accepted = if ctx.info().pageable_device_local_memory {
        changed.expect("set_priority with the extension");
        pool_changed.expect("set_pool_priority with the extension");
        assert_eq!(allocator.pool_priority(pool), Ok(Some(p(0.9))));
        true
    } else {
        assert!(matches!(changed, Err(Error::NotEnabled(_))), "{changed:?}");
        assert!(
            matches!(pool_changed, Err(Error::NotEnabled(_))),
            "{pool_changed:?}"
        );
        assert_eq!(allocator.pool_priority(pool), Ok(Some(p(0.3))));
        false
    };
    if !buffer.allocation().is_dedicated() {
        let shared = allocator.set_priority(buffer.allocation(), p(0.5));
        if accepted {
            assert_eq!(shared, Err(Error::NotDedicated));
        } else {
            assert!(matches!(shared, Err(Error::NotEnabled(_))), "{shared:?}");
        }
    }
    // SAFETY: never used by the device.
    unsafe {
        allocator.destroy_image(texture).expect("destroy");
        allocator.destroy_image(target).expect("destroy");
        allocator.destroy_buffer(buffer).expect("destroy");
    }
    allocator.destroy_pool(pool).expect("empty pool");
    accepted
}

/// Whatever the driver: priorities given at allocation never fail, and
/// changes work exactly where the extension is enabled.
#[test]
fn priorities_on_this_driver() {
    let ctx = GpuContext::for_test();
    let accepted = exercise(&ctx);
    assert_eq!(accepted, ctx.info().pageable_device_local_memory);
    ctx.finish();
}

/// On the driver that has both extensions (the sparse lavapipe), in a child
/// process pointed at it: priorities reach the driver, changes are
/// accepted, and the validation layer reports nothing.
#[test]
fn priorities_where_the_driver_has_them() {
    if std::env::var_os(CHILD).is_some() {
        let ctx = GpuContext::for_test();
        assert!(
            ctx.info().memory_priority && ctx.info().pageable_device_local_memory,
            "the driver in VKALLOC_SPARSE_DRIVER lacks VK_EXT_memory_priority or \
             VK_EXT_pageable_device_local_memory"
        );
        assert!(ctx.allocator().memory_priority_enabled());
        assert!(exercise(&ctx));
        ctx.finish();
        return;
    }
    let driver = match std::env::var("VKALLOC_SPARSE_DRIVER") {
        Ok(path) if Path::new(&path).is_file() => path,
        other => panic!(
            "VKALLOC_SPARSE_DRIVER={other:?} names no ICD manifest: this test needs a driver with \
             VK_EXT_memory_priority (Mesa 25 lavapipe); run it through `cargo xtask test`, which \
             provisions one, or set VKALLOC_SPARSE_DRIVER (`cargo xtask setup` prints it)"
        ),
    };
    let name = gpu_tests::libtest_name(module_path!(), "priorities_where_the_driver_has_them");
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            name.as_str(),
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD, "1")
        .env("VK_DRIVER_FILES", &driver)
        .env("VK_ICD_FILENAMES", &driver)
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child on {driver} failed:\n{stdout}\n{stderr}"
    );
}
