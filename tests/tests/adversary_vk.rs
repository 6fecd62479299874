//! Adversarial probes of the allocator's real-device layer (`allocator/src/vk/`,
//! `allocation.rs`, `memory.rs`) on lavapipe with the validation layer on.
//!
//! Each test asserts the correct behaviour: a failing test is a defect.
//! Probes that may crash run in a child process (`in_child`). Written from
//! outside (2026-12-03); the five defects they found are fixed: memory for
//! device-address buffers (`AshDeviceOptions::buffer_device_address`, or a
//! typed refusal), a move of a `PREINITIALIZED` image (refused), a prepared
//! move that could not be given up (`Allocator::cancel_move`), and aliased
//! resources created or destroyed through another allocator
//! (`ForeignAllocation`). The multi-planar images' copy aspects and the
//! dedicated requirement of aliased images could not be tried on lavapipe
//! (no YCbCr; no driver-required dedicated memory).
//!
//! Run: `VK_DRIVER_FILES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json
//! VKALLOC_REQUIRE_VALIDATION=1 cargo test -p gpu-tests --test gpu adversary_vk::`.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use ash::vk;
use gpu_bootstrap::{
    ApiVersion, DeviceDesc, DevicePick, DeviceSupport, Feature, InstanceDesc, Messenger,
    QueueRequest, Validation,
};
use gpu_tests::resources::image_info;
use gpu_tests::GpuContext;
use vkalloc::device::MemoryDevice;
use vkalloc::vk::{AshDeviceOptions, Movable};
use vkalloc::{
    AllocationOptions, Allocator, AllocatorDesc, DedicatedPolicy, DefragAlgorithm, DefragDesc,
    Error, MemoryUsage, PassInterval,
};

// ---------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------

/// Runs `body` in a child process (this test binary, filtered to `test`),
/// and fails unless the child exits cleanly and its test passed.
fn in_child(test: &str, body: impl FnOnce()) {
    const VAR: &str = "VKALLOC_ADVERSARY_VK_CHILD";
    if std::env::var(VAR).as_deref() == Ok(test) {
        body();
        return;
    }
    let name = gpu_tests::libtest_name(module_path!(), test);
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env(VAR, test)
        .output()
        .expect("spawn the child test");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{test}: the child died or failed: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
}

/// Moves `image` (idle on the device, in `layout`) by `mv` with
/// `perform_moves` on the context's queue; the image that comes back, moved
/// or not.
fn perform_image_move(
    ctx: &GpuContext,
    defrag: &mut vkalloc::Defragmentation,
    mv: vkalloc::Move,
    image: vkalloc::vk::Image,
    layout: vk::ImageLayout,
) -> vkalloc::vk::Image {
    let allocator = ctx.allocator();
    let moved = ctx
        .with_queue(|queue, family| {
            // SAFETY: the queue is held for the call; the caller says the
            // image is idle and in `layout`.
            unsafe {
                allocator.perform_moves(
                    defrag,
                    queue,
                    family,
                    vec![(mv, Movable::Image { image, layout })],
                )
            }
        })
        .map_err(|(e, _)| e)
        .expect("perform_moves");
    match moved.into_iter().next() {
        Some(Movable::Image { image, .. }) => image,
        other => panic!("an image went in, {other:?} came back"),
    }
}

fn buffer_info(size: u64, usage: vk::BufferUsageFlags) -> vk::BufferCreateInfo<'static> {
    vk::BufferCreateInfo::default()
        .size(size)
        .usage(usage)
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
}

fn copyable() -> vk::BufferUsageFlags {
    vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST
}

fn gpu(tag: &str) -> AllocationOptions<'_> {
    AllocationOptions::usage(MemoryUsage::GpuOnly).tagged(tag)
}

/// A context whose allocator packs everything into small blocks, so a
/// freed filler leaves a hole defragmentation moves the next resource into.
fn small_block_ctx() -> GpuContext {
    GpuContext::with_desc(AllocatorDesc::default().with_block_size(1 << 20)).expect("GPU context")
}

// ---------------------------------------------------------------------------
// A device of our own, with features the shared harness does not enable.
// ---------------------------------------------------------------------------

#[derive(Default)]
struct Errors {
    count: AtomicU32,
    messages: Mutex<Vec<String>>,
}

unsafe extern "system" fn count_errors(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user_data: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: Vulkan passes null or callback data valid for this call.
    let message = unsafe { data.as_ref() }
        .and_then(|d| {
            // SAFETY: as above; the strings are NUL-terminated or null.
            unsafe { d.message_as_c_str() }.map(|s| s.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    eprintln!("[own device {severity:?}] {message}");
    if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
        // SAFETY: `user_data` is the boxed `Errors` of the `OwnDevice`, which
        // outlives the messenger.
        if let Some(e) = unsafe { (user_data as *const Errors).as_ref() } {
            e.count.fetch_add(1, Ordering::SeqCst);
            e.messages.lock().unwrap().push(message);
        }
    }
    vk::FALSE
}

/// An instance with validation and a device with `bufferDeviceAddress`
/// enabled, and an allocator on it.
struct OwnDevice {
    allocator: Option<Allocator<vkalloc::vk::AshDevice>>,
    device: ash::Device,
    debug: (ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT),
    instance: ash::Instance,
    errors: Box<Errors>,
    _entry: ash::Entry,
}

impl OwnDevice {
    fn new(options: AshDeviceOptions) -> Self {
        let entry = gpu_bootstrap::load_entry().expect("Vulkan loader");
        let errors: Box<Errors> = Box::default();
        let desc = InstanceDesc {
            api_version: ApiVersion::Exactly(vk::API_VERSION_1_2),
            validation: Validation::Required,
            messenger: Some(Messenger {
                severities: vk::DebugUtilsMessageSeverityFlagsEXT::ERROR
                    | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
                types: vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                    | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION,
                callback: Some(count_errors),
                user_data: &*errors as *const Errors as *mut c_void,
                report_instance_lifetime: false,
                without_validation: false,
            }),
            ..InstanceDesc::default()
        };
        // SAFETY: the user data is the boxed `Errors` that `count_errors`
        // expects; the box outlives the messenger (destroyed in `finish`).
        let created = unsafe { gpu_bootstrap::create_instance(&entry, &desc) }.expect("instance");
        let (instance, debug) = (created.instance, created.debug.expect("messenger"));
        let (_, pd) =
            gpu_bootstrap::pick_physical_device(&instance, DevicePick::Index(0)).expect("devices");
        // SAFETY: `pd` came from this live instance, created at Vulkan 1.2.
        let support = unsafe { DeviceSupport::query(&instance, pd, vk::API_VERSION_1_2) }
            .expect("device support");
        let device_desc = DeviceDesc {
            queues: &[QueueRequest {
                family: 0,
                count: 1,
            }],
            features: &[Feature::BufferDeviceAddress],
            ..DeviceDesc::default()
        };
        // SAFETY: `instance` is the live instance `support` was queried from.
        let device = unsafe { gpu_bootstrap::create_device(&instance, &support, &device_desc) }
            .expect("a device with bufferDeviceAddress");
        // SAFETY: the device is of `pd` of `instance`, Vulkan 1.2; both outlive
        // the allocator (dropped first in `finish`).
        let allocator =
            unsafe { Allocator::on_ash(&instance, pd, &device, options, AllocatorDesc::default()) }
                .expect("allocator");
        Self {
            allocator: Some(allocator),
            device,
            debug,
            instance,
            errors,
            _entry: entry,
        }
    }

    fn allocator(&self) -> &Allocator<vkalloc::vk::AshDevice> {
        self.allocator.as_ref().unwrap()
    }

    /// Tears down and returns the validation errors seen.
    fn finish(mut self) -> Vec<String> {
        drop(self.allocator.take());
        // SAFETY: everything made on the device is gone; children first.
        unsafe {
            self.device.destroy_device(None);
            self.debug
                .0
                .destroy_debug_utils_messenger(self.debug.1, None);
            self.instance.destroy_instance(None);
        }
        let _ = self.errors.count.load(Ordering::SeqCst);
        std::mem::take(&mut *self.errors.messages.lock().unwrap())
    }
}

// ---------------------------------------------------------------------------
// 1. Create infos whose pNext/usage constrain the memory: ignored.
// ---------------------------------------------------------------------------

/// A buffer with `SHADER_DEVICE_ADDRESS` usage on a device with
/// `bufferDeviceAddress` enabled (a valid `VkBufferCreateInfo`, so
/// `create_buffer`'s contract is kept) must be bound to memory allocated
/// with `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT`
/// (VUID-vkBindBufferMemory-bufferDeviceAddress-03339). Before 2026-12-03
/// the allocator never chained `VkMemoryAllocateFlagsInfo`: a validation
/// error. Now, without `AshDeviceOptions::buffer_device_address`, a typed
/// refusal that names the option; with it, the buffer is bound cleanly.
#[test]
fn device_address_buffer_is_bound_to_device_address_memory() {
    let info = buffer_info(
        64 * 1024,
        vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
    );
    let plain = OwnDevice::new(AshDeviceOptions::default());
    // SAFETY: a valid create info on a device with bufferDeviceAddress.
    let refused = unsafe { plain.allocator().create_buffer(&info, &gpu("bda")) };
    assert!(
        matches!(refused, Err(vkalloc::Error::NotEnabled(_))),
        "{refused:?}"
    );
    let errors = plain.finish();
    assert!(errors.is_empty(), "{}", errors.join("\n"));

    let own = OwnDevice::new(AshDeviceOptions {
        buffer_device_address: true,
        ..AshDeviceOptions::default()
    });
    let allocator = own.allocator();
    // SAFETY: a valid create info on a device with bufferDeviceAddress.
    let buffer = unsafe { allocator.create_buffer(&info, &gpu("bda")) }.expect("create_buffer");
    // SAFETY: the buffer is live and was created with SHADER_DEVICE_ADDRESS.
    let address = unsafe {
        own.device
            .get_buffer_device_address(&vk::BufferDeviceAddressInfo::default().buffer(buffer.raw()))
    };
    assert_ne!(address, 0);
    // SAFETY: never used by the device.
    unsafe { allocator.destroy_buffer(buffer) }.expect("destroy_buffer");
    let errors = own.finish();
    assert!(
        errors.is_empty(),
        "validation errors for a device-address buffer made by create_buffer:\n{}",
        errors.join("\n")
    );
}

// ---------------------------------------------------------------------------
// 2. Defragmentation moves of real resources.
// ---------------------------------------------------------------------------

/// Creates a filler buffer, then `make`'s resource behind it, frees the
/// filler, and begins a full defragmentation pass: returns the session and
/// the move of the resource (if one was planned) with the other moves
/// dropped.
fn hole_before<R>(
    ctx: &GpuContext,
    make: impl FnOnce() -> R,
    id_of: impl Fn(&R) -> vkalloc::AllocationId,
) -> (vkalloc::Defragmentation, Option<vkalloc::Move>, R) {
    let allocator = ctx.allocator();
    // SAFETY: a valid create info.
    let filler =
        unsafe { allocator.create_buffer(&buffer_info(256 * 1024, copyable()), &gpu("filler")) }
            .expect("filler");
    let r = make();
    // SAFETY: never used by the device.
    unsafe { allocator.destroy_buffer(filler) }.expect("destroy filler");
    let mut defrag = allocator
        .begin_defragmentation(&DefragDesc::default().with_algorithm(DefragAlgorithm::Full))
        .expect("begin_defragmentation");
    let moves = defrag.begin_pass(allocator).expect("begin_pass");
    let id = id_of(&r);
    let mv = moves.into_iter().find(|m| m.id() == id);
    (defrag, mv, r)
}

/// A linear image created `PREINITIALIZED`, written by the host, and moved
/// in its true layout (`PREINITIALIZED`). The move's last barrier takes the
/// new image to `PREINITIALIZED`, which no barrier may name as its new
/// layout (VUID-VkImageMemoryBarrier-newLayout-01198): `perform_moves`
/// should refuse the layout (or pick a legal one), not record it.
#[test]
fn moving_a_preinitialized_image_records_only_legal_barriers() {
    let ctx = small_block_ctx();
    let allocator = ctx.allocator();
    let info = image_info(
        vk::Extent2D {
            width: 32,
            height: 32,
        },
        vk::ImageTiling::LINEAR,
        vk::ImageLayout::PREINITIALIZED,
    );
    let (mut defrag, mv, image) = hole_before(
        &ctx,
        || {
            // SAFETY: a valid create info (linear, transfer usage, preinitialized).
            unsafe {
                allocator.create_image(&info, &AllocationOptions::usage(MemoryUsage::GpuOnly))
            }
            .expect("create_image")
        },
        |i| i.allocation().id(),
    );
    let mv = mv.expect("defragmentation planned a move of the image into the hole");
    // The image was never used by the device; PREINITIALIZED is its layout.
    let back = perform_image_move(
        &ctx,
        &mut defrag,
        mv,
        image,
        vk::ImageLayout::PREINITIALIZED,
    );
    defrag.end(allocator).expect("end");
    // SAFETY: perform_moves waited for its copies.
    unsafe { allocator.destroy_image(back) }.expect("destroy_image");
    let errors = ctx.validation_errors();
    ctx.assert_no_live_allocations();
    assert_eq!(
        errors, 0,
        "the move recorded an illegal barrier (see stderr)"
    );
    ctx.finish();
}

/// A prepared move holds two Vulkan objects (the caller's old resource and
/// the new one bound at the destination). The three-step path
/// (`prepare_move`, `cmd_record_moves` in the caller's own command buffer,
/// `finish_move`) has no way back when the caller's submission fails:
/// `finish_move` requires the copy to have completed, and the crate's
/// `unprepare` is private. Dropping the prepared move (the only safe choice)
/// loses the caller's buffer and its allocation and leaks the new buffer.
#[test]
fn an_abandoned_prepared_move_loses_nothing() {
    let ctx = small_block_ctx();
    let allocator = ctx.allocator();
    let (defrag, mv, buffer) = hole_before(
        &ctx,
        || {
            // SAFETY: a valid create info.
            unsafe { allocator.create_buffer(&buffer_info(4096, copyable()), &gpu("moved")) }
                .expect("create_buffer")
        },
        |b| b.allocation().id(),
    );
    let mv = mv.expect("defragmentation planned a move of the buffer");
    // SAFETY: the buffer is live on this allocator's device.
    let prepared = unsafe { allocator.prepare_move(mv, Movable::Buffer(buffer)) }
        .map_err(|e| e.error)
        .expect("prepare_move");
    // The caller's own submission of the copy failed: give up on the move.
    // Before 2026-12-03 no public call cancelled a `PreparedMove` (dropping
    // it leaked the new buffer and the caller's). `cancel_move` hands the
    // old buffer back, still bound where it was.
    // SAFETY: prepared here; the copy was never submitted.
    let back = unsafe { allocator.cancel_move(prepared) };
    let Movable::Buffer(buffer) = back else {
        panic!("a buffer was prepared, {back:?} came back");
    };
    defrag.end(allocator).expect("end");
    // SAFETY: never used by the device.
    unsafe { allocator.destroy_buffer(buffer) }.expect("destroy_buffer");
    let leaks = allocator.leaks();
    assert!(
        leaks.is_empty(),
        "abandoning a prepared move lost {} allocation(s): {leaks:?}",
        leaks.len()
    );
    ctx.finish();
}

/// A move of one allocator's resource prepared and finished on another
/// allocator of the same device: refused, nothing leaks, validation silent.
#[test]
fn a_move_finished_on_another_allocator_is_refused_cleanly() {
    let ctx = small_block_ctx();
    let allocator = ctx.allocator();
    // SAFETY: the context's device outlives this allocator (dropped below).
    let other = unsafe {
        Allocator::on_ash(
            ctx.instance(),
            ctx.physical_device(),
            ctx.device(),
            AshDeviceOptions {
                memory_budget: ctx.info().memory_budget,
                ..AshDeviceOptions::default()
            },
            AllocatorDesc::default(),
        )
    }
    .expect("second allocator");
    let (mut defrag, mv, buffer) = hole_before(
        &ctx,
        || {
            // SAFETY: a valid create info.
            unsafe { allocator.create_buffer(&buffer_info(4096, copyable()), &gpu("moved")) }
                .expect("create_buffer")
        },
        |b| b.allocation().id(),
    );
    let mv = mv.expect("a move");
    let back = ctx.with_queue(|queue, family| {
        // SAFETY: the queue is held; the buffer is live on this (shared)
        // device and idle.
        unsafe {
            other.perform_moves(
                &mut defrag,
                queue,
                family,
                vec![(mv, Movable::Buffer(buffer))],
            )
        }
    });
    let back = back.map_err(|(e, _)| e).expect("perform_moves");
    defrag.end(allocator).expect("end");
    for m in back {
        let Movable::Buffer(b) = m else { panic!() };
        // SAFETY: idle.
        unsafe { allocator.destroy_buffer(b) }.expect("destroy on its own allocator");
    }
    assert!(other.leaks().is_empty());
    drop(other);
    ctx.assert_no_live_allocations();
    ctx.finish();
}

// ---------------------------------------------------------------------------
// 3. Resources of one allocator handed to another's (another device's)
//    unsafe functions whose contracts do not forbid it.
// ---------------------------------------------------------------------------

fn alias_group_with_image(ctx: &GpuContext) -> (vkalloc::AliasGroup, vk::ImageCreateInfo<'static>) {
    let info = image_info(
        vk::Extent2D {
            width: 16,
            height: 16,
        },
        vk::ImageTiling::OPTIMAL,
        vk::ImageLayout::UNDEFINED,
    );
    let allocator = ctx.allocator();
    // SAFETY: a valid create info.
    let req = unsafe { allocator.image_alias_requirement(&info, PassInterval::new(0, 1), "a") }
        .expect("requirement");
    let group = allocator
        .allocate_alias_group(&[req], gpu("group"))
        .expect("group");
    (group, info)
}

/// `destroy_aliased_image`'s contract asks only that "the device no longer
/// uses the image, and no view of it is left". An `Aliased` handle does not
/// say which allocator (device) made it, and the function takes it without
/// a check, so another device's `vkDestroyImage` gets it
/// (VUID-vkDestroyImage-image-parent), and the image is leaked on its own
/// device. `destroy_image` refuses the same mistake with ForeignAllocation.
#[test]
fn destroy_aliased_image_on_another_device_is_refused() {
    in_child("destroy_aliased_image_on_another_device_is_refused", || {
        let a = GpuContext::for_test();
        let b = GpuContext::for_test();
        let (group, info) = alias_group_with_image(&a);
        // SAFETY: a valid create info; the group outlives the image.
        let image = unsafe { a.allocator().create_aliased_image(&group, 0, &info) }.unwrap();
        // SAFETY: the device never used the image and no view of it exists:
        // the documented contract holds. (It is `a`'s image, not `b`'s: the
        // contract does not ask; the call checks.)
        let refused = unsafe { b.allocator().destroy_aliased_image(image) }
            .expect_err("another allocator's aliased image is refused");
        assert_eq!(refused.error(), &vkalloc::Error::ForeignAllocation);
        // SAFETY: as above, on its own allocator.
        unsafe { a.allocator().destroy_aliased_image(refused.into_resource()) }.unwrap();
        let errors_a = a.take_validation_errors();
        let errors_b = b.take_validation_errors();
        a.allocator().free_alias_group(group).unwrap();
        assert_eq!(
            (errors_a, errors_b),
            (0, 0),
            "destroying an aliased image through another device's allocator"
        );
        a.finish();
        b.finish();
    });
}

/// `create_aliased_buffer`'s contract: "`info` is a valid create info for
/// this device; the group outlives the buffer". A group of another
/// allocator on another device passes both, and its memory is bound to this
/// device's buffer (VUID-vkBindBufferMemory-memory-parent).
#[test]
fn create_aliased_buffer_refuses_another_allocators_group() {
    in_child(
        "create_aliased_buffer_refuses_another_allocators_group",
        || {
            let a = GpuContext::for_test();
            let b = GpuContext::for_test();
            let info = buffer_info(4096, copyable());
            let allocator = a.allocator();
            // SAFETY: a valid create info.
            let req =
                unsafe { allocator.buffer_alias_requirement(&info, PassInterval::new(0, 1), "a") }
                    .unwrap();
            let group = allocator
                .allocate_alias_group(&[req], gpu("group"))
                .unwrap();
            // SAFETY: a valid create info for `b`'s device; the group outlives
            // the buffer (it is destroyed first).
            let made = unsafe { b.allocator().create_aliased_buffer(&group, 0, &info) };
            let errors_b = b.take_validation_errors();
            assert!(
                matches!(made, Err(vkalloc::Error::ForeignAllocation)),
                "{made:?}"
            );
            let errors_after = b.take_validation_errors();
            allocator.free_alias_group(group).unwrap();
            assert_eq!(
            errors_b, 0,
            "create_aliased_buffer bound another device's memory (then {errors_after} more on destroy)"
        );
            a.finish();
            b.finish();
        },
    );
}

/// Regression: a buffer destroyed through another allocator (another
/// device) comes back untouched, and destroys cleanly on its own.
#[test]
fn destroy_buffer_on_another_device_comes_back() {
    let a = GpuContext::for_test();
    let b = GpuContext::for_test();
    // SAFETY: valid create infos.
    let (buffer, image) = unsafe {
        (
            a.allocator()
                .create_buffer(&buffer_info(1000, copyable()), &gpu("a"))
                .unwrap(),
            a.allocator()
                .create_image(
                    &image_info(
                        vk::Extent2D {
                            width: 8,
                            height: 8,
                        },
                        vk::ImageTiling::OPTIMAL,
                        vk::ImageLayout::UNDEFINED,
                    ),
                    &gpu("a"),
                )
                .unwrap(),
        )
    };
    // SAFETY: never used.
    let err = unsafe { b.allocator().destroy_buffer(buffer) }.unwrap_err();
    assert!(matches!(err.error(), Error::ForeignAllocation));
    let buffer = err.into_resource();
    // SAFETY: never used.
    let err = unsafe { b.allocator().destroy_image(image) }.unwrap_err();
    let image = err.into_resource();
    // SAFETY: never used.
    unsafe {
        a.allocator().destroy_buffer(buffer).unwrap();
        a.allocator().destroy_image(image).unwrap();
    }
    a.finish();
    b.finish();
}

// ---------------------------------------------------------------------------
// 4. Sizes at and past the device's limits.
// ---------------------------------------------------------------------------

/// A buffer larger than `maxMemoryAllocationSize` (and than the only heap):
/// refused with an error, nothing left behind, no validation error, for
/// every dedicated policy and for mapped creation.
#[test]
fn a_buffer_past_max_memory_allocation_size_fails_cleanly() {
    let ctx = GpuContext::for_test();
    let allocator = ctx.allocator();
    let max = allocator.device().limits().max_memory_allocation_size;
    let size = max.saturating_add(1 << 20).min(u64::MAX / 2);
    for policy in [
        DedicatedPolicy::Auto,
        DedicatedPolicy::Always,
        DedicatedPolicy::Never,
    ] {
        let options = AllocationOptions {
            dedicated: policy,
            ..gpu("huge")
        };
        // SAFETY: a valid create info (within maxBufferSize on lavapipe).
        let made = unsafe { allocator.create_buffer(&buffer_info(size, copyable()), &options) };
        match made {
            Ok(b) => {
                // SAFETY: never used.
                unsafe { allocator.destroy_buffer(b) }.unwrap();
                panic!("a {size}-byte buffer was allocated past the {max}-byte limit ({policy:?})");
            }
            Err(e) => println!("{policy:?}: {e}"),
        }
        // SAFETY: as above.
        let made =
            unsafe { allocator.create_buffer_mapped(&buffer_info(size, copyable()), &options) };
        assert!(made.is_err(), "mapped {policy:?}");
    }
    ctx.assert_no_live_allocations();
    assert_eq!(ctx.validation_errors(), 0);
    ctx.finish();
}

// ---------------------------------------------------------------------------
// 5. Mapped access at the edges.
// ---------------------------------------------------------------------------

/// Mapped buffers of odd sizes: write/read/flush/invalidate up to the end
/// succeed, one byte past the end is refused, overflowing offsets are
/// refused; nothing reaches the driver out of range.
#[test]
fn mapped_access_stops_at_the_allocation_end() {
    let ctx = GpuContext::for_test();
    let allocator = ctx.allocator();
    for size in [1u64, 63, 64, 65, 4095, 4097] {
        for policy in [DedicatedPolicy::Auto, DedicatedPolicy::Always] {
            let options = AllocationOptions {
                dedicated: policy,
                ..AllocationOptions::usage(MemoryUsage::Upload)
            };
            // SAFETY: a valid create info.
            let mut b =
                unsafe { allocator.create_buffer_mapped(&buffer_info(size, copyable()), &options) }
                    .unwrap();
            let len = b.allocation().size();
            assert!(len >= size);
            let m = b.mapped_mut();
            m.write(len - 1, &[7]).unwrap();
            assert!(m.write(len, &[7]).is_err());
            assert!(m.write(u64::MAX, &[7]).is_err());
            let mut one = [0u8];
            m.read(len - 1, &mut one).unwrap();
            assert_eq!(one, [7]);
            assert!(m.read(len, &mut one).is_err());
            assert_eq!(m.as_slice().len() as u64, len);
            let m = b.allocation();
            allocator.flush(m, 0, len).unwrap();
            allocator.invalidate(m, len - 1, 1).unwrap();
            assert!(allocator.flush(m, len, 1).is_err());
            assert!(allocator.flush(m, 1, u64::MAX).is_err());
            assert!(allocator.invalidate(m, u64::MAX, 2).is_err());
            // SAFETY: never used.
            unsafe { allocator.destroy_buffer(b) }.unwrap();
        }
    }
    ctx.assert_no_live_allocations();
    assert_eq!(ctx.validation_errors(), 0);
    ctx.finish();
}

/// Regression (holds): a buffer whose create info chains
/// `VkExternalMemoryBufferCreateInfo` binds to the allocator's plain
/// memory without a validation error. Vulkan only constrains the other
/// direction (exportable memory must name one of the buffer's handle types,
/// VUID-vkBindBufferMemory-memory-02726), so ignoring the chain is legal;
/// the buffer is simply not exportable through the allocator.
#[test]
fn exportable_buffer_is_bound_to_exportable_memory() {
    let ctx = GpuContext::for_test();
    let handle = vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;
    let query = vk::PhysicalDeviceExternalBufferInfo::default()
        .usage(copyable())
        .handle_type(handle);
    let mut props = vk::ExternalBufferProperties::default();
    // SAFETY: the physical device belongs to the live instance (Vulkan 1.1).
    unsafe {
        ctx.instance()
            .get_physical_device_external_buffer_properties(
                ctx.physical_device(),
                &query,
                &mut props,
            )
    };
    let features = props.external_memory_properties.external_memory_features;
    assert!(
        features.contains(vk::ExternalMemoryFeatureFlags::EXPORTABLE),
        "the device cannot export OPAQUE_FD buffers: {features:?}"
    );
    let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(handle);
    let info = buffer_info(4096, copyable()).push_next(&mut external);
    // SAFETY: a valid create info (the handle type is exportable here).
    let buffer =
        unsafe { ctx.allocator().create_buffer(&info, &gpu("exportable")) }.expect("create_buffer");
    let errors = ctx.take_validation_errors();
    // SAFETY: never used.
    unsafe { ctx.allocator().destroy_buffer(buffer) }.unwrap();
    ctx.finish();
    assert_eq!(
        errors, 0,
        "create_buffer bound an exportable buffer to plain memory"
    );
}

/// Regression: a depth/stencil image with several mips and layers, in
/// `GENERAL` layout, moves with copies and barriers naming both aspects;
/// validation (with synchronization validation) stays silent.
#[test]
fn a_depth_stencil_image_moves_with_both_aspects() {
    let ctx = small_block_ctx();
    let allocator = ctx.allocator();
    let info = vk::ImageCreateInfo::default()
        .image_type(vk::ImageType::TYPE_2D)
        .format(vk::Format::D32_SFLOAT_S8_UINT)
        .extent(vk::Extent3D {
            width: 37,
            height: 21,
            depth: 1,
        })
        .mip_levels(3)
        .array_layers(2)
        .samples(vk::SampleCountFlags::TYPE_1)
        .tiling(vk::ImageTiling::OPTIMAL)
        .usage(
            vk::ImageUsageFlags::TRANSFER_SRC
                | vk::ImageUsageFlags::TRANSFER_DST
                | vk::ImageUsageFlags::DEPTH_STENCIL_ATTACHMENT,
        )
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
        .initial_layout(vk::ImageLayout::UNDEFINED);
    let (mut defrag, mv, image) = hole_before(
        &ctx,
        // SAFETY: a valid create info (lavapipe supports this format optimally).
        || unsafe { allocator.create_image(&info, &gpu("depth")) }.expect("create_image"),
        |i| i.allocation().id(),
    );
    let mv = mv.expect("a move of the depth image");
    let old_place = (image.allocation().memory(), image.allocation().offset());
    ctx.one_shot(|cmd| {
        let barrier = vk::ImageMemoryBarrier::default()
            .old_layout(vk::ImageLayout::UNDEFINED)
            .new_layout(vk::ImageLayout::GENERAL)
            .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
            .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
            .dst_access_mask(vk::AccessFlags::TRANSFER_WRITE)
            .image(image.raw())
            .subresource_range(vk::ImageSubresourceRange {
                aspect_mask: vk::ImageAspectFlags::DEPTH | vk::ImageAspectFlags::STENCIL,
                base_mip_level: 0,
                level_count: 3,
                base_array_layer: 0,
                layer_count: 2,
            });
        // SAFETY: recording; the image is live; one_shot waits.
        unsafe {
            ctx.device().cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::TOP_OF_PIPE,
                vk::PipelineStageFlags::TRANSFER,
                vk::DependencyFlags::empty(),
                &[],
                &[],
                &[barrier],
            )
        };
    });
    // The image is idle, in GENERAL.
    let image = perform_image_move(&ctx, &mut defrag, mv, image, vk::ImageLayout::GENERAL);
    defrag.end(allocator).expect("end");
    assert_ne!(
        (image.allocation().memory(), image.allocation().offset()),
        old_place,
        "the image moved"
    );
    // SAFETY: perform_moves waited.
    unsafe { allocator.destroy_image(image) }.unwrap();
    ctx.assert_no_live_allocations();
    assert_eq!(ctx.validation_errors(), 0);
    ctx.finish();
}
