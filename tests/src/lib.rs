//! GPU test harness for `vkalloc`: a real Vulkan device (lavapipe in CI), the
//! validation layer, and an [`Allocator`] on it.
//!
//! Every integration test in `tests/tests/` (one test binary, `gpu`: each file
//! a module of `tests/tests/main.rs`) starts with
//! [`GpuContext::for_test`] and ends with [`GpuContext::finish`]:
//!
//! ```no_run
//! let ctx = gpu_tests::GpuContext::for_test();
//! // ... create resources through ctx.allocator(), record work with ctx.one_shot(...)
//! ctx.finish(); // destroys everything; panics if the validation layer reported an error
//! ```
//!
//! There is no skipping: with no Vulkan device the test fails and says how to
//! get one (install `mesa-vulkan-drivers`, or run `cargo xtask test`).
//!
//! Environment:
//! - `VKALLOC_REQUIRE_VALIDATION=1` (set by `cargo xtask test`): fail when
//!   `VK_LAYER_KHRONOS_validation` is missing instead of running without it.
//! - `VKALLOC_DEVICE_INDEX=N`: use the N-th physical device (default 0).
//! - `VK_DRIVER_FILES`: the Vulkan loader's choice of driver (`cargo xtask`
//!   pins lavapipe unless told `--driver system`).
#![warn(missing_docs)]

mod commands;
mod messenger;
pub mod pattern;
pub mod resources;

use std::ffi::{c_char, CStr};
use std::fmt;
use std::sync::Arc;

use ash::vk;
use gpu_bootstrap::{
    ApiVersion, BootstrapError, DeviceDesc, DevicePick, DeviceSupport, Feature, InstanceDesc,
    Messenger, QueueRequest, Validation,
};
use parking_lot::Mutex;
use vkalloc::vk::{AshDevice, AshDeviceOptions};
use vkalloc::{Allocator, AllocatorDesc, LeakReport};

pub use commands::{LayoutTransition, COLOR_LAYER, COLOR_RANGE};
pub use messenger::MessageCounters;

/// The allocator type every GPU test uses.
pub type GpuAllocator = Allocator<AshDevice>;

const REQUIRE_VALIDATION_ENV: &str = "VKALLOC_REQUIRE_VALIDATION";
const DEVICE_INDEX_ENV: &str = "VKALLOC_DEVICE_INDEX";

/// Why a [`GpuContext`] could not be made.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The Vulkan loader (`libvulkan.so.1`) could not be loaded.
    #[error(
        "cannot load the Vulkan loader ({0}): install libvulkan1 and mesa-vulkan-drivers \
         (sudo apt-get install -y libvulkan1 mesa-vulkan-drivers), or run `cargo xtask test`, \
         which installs them"
    )]
    NoLoader(String),
    /// The loader found no physical device.
    #[error(
        "no Vulkan device found: install mesa-vulkan-drivers (lavapipe, a CPU driver) or a GPU \
         driver, or run `cargo xtask test`, which installs lavapipe and points the loader at it \
         (VK_DRIVER_FILES={driver_files})"
    )]
    NoDevice {
        /// The value of `VK_DRIVER_FILES` the process ran with.
        driver_files: String,
    },
    /// `VKALLOC_DEVICE_INDEX` names a device that does not exist.
    #[error("{DEVICE_INDEX_ENV}={index} but only {count} Vulkan device(s) exist: pick 0..{count}")]
    BadDeviceIndex {
        /// The index asked for.
        index: usize,
        /// Devices found.
        count: usize,
    },
    /// Validation was required but the layer is not installed.
    #[error(
        "{REQUIRE_VALIDATION_ENV}=1 but VK_LAYER_KHRONOS_validation is not available: install \
         vulkan-validationlayers (sudo apt-get install -y vulkan-validationlayers), or set \
         VK_LAYER_PATH to the folder holding VkLayer_khronos_validation.json"
    )]
    NoValidationLayer,
    /// The device is older than Vulkan 1.1, which the allocator needs.
    #[error("device {name} supports only Vulkan {version}; the tests need 1.1 or newer")]
    TooOld {
        /// The device's name.
        name: String,
        /// Its API version, as `major.minor.patch`.
        version: String,
    },
    /// The device has no queue that can copy.
    #[error("device {0} has no queue family with graphics, compute or transfer support")]
    NoQueue(String),
    /// The device lacks a feature, extension or queue the harness asked for
    /// (the message names it).
    #[error(transparent)]
    Device(BootstrapError),
    /// A Vulkan call failed.
    #[error("{call} failed: {result}")]
    Vulkan {
        /// The Vulkan function.
        call: &'static str,
        /// Its result code.
        result: vk::Result,
    },
    /// The allocator refused to start.
    #[error("creating the allocator failed: {0}")]
    Allocator(vkalloc::Error),
}

fn no_device() -> HarnessError {
    HarnessError::NoDevice {
        driver_files: std::env::var("VK_DRIVER_FILES").unwrap_or_else(|_| "<unset>".into()),
    }
}

/// The harness's error for a failure of the shared start-up.
fn bootstrap_err(e: BootstrapError) -> HarnessError {
    match e {
        BootstrapError::Loader(reason) => HarnessError::NoLoader(reason),
        BootstrapError::NoValidationLayer => HarnessError::NoValidationLayer,
        BootstrapError::LoaderTooOld { found, .. } => HarnessError::TooOld {
            name: "the Vulkan loader".into(),
            version: found,
        },
        BootstrapError::NoDevice => no_device(),
        // The loader's answers when it finds no driver at all.
        BootstrapError::Vulkan {
            call: "vkCreateInstance",
            result: vk::Result::ERROR_INCOMPATIBLE_DRIVER,
        }
        | BootstrapError::Vulkan {
            call: "vkEnumeratePhysicalDevices",
            result: vk::Result::ERROR_INITIALIZATION_FAILED,
        } => no_device(),
        BootstrapError::Vulkan { call, result } => HarnessError::Vulkan { call, result },
        BootstrapError::BadDeviceIndex { index, count } => {
            HarnessError::BadDeviceIndex { index, count }
        }
        e @ (BootstrapError::Unsupported { .. }
        | BootstrapError::NoQueueFamily { .. }
        | BootstrapError::QueueFamilyTwice { .. }) => HarnessError::Device(e),
    }
}

fn vk_err(call: &'static str) -> impl FnOnce(vk::Result) -> HarnessError {
    move |result| HarnessError::Vulkan { call, result }
}

/// What the harness learnt about the device it runs on.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// `deviceName`.
    pub name: String,
    /// The API version used (the lower of the instance's and the device's).
    pub api_version: u32,
    /// Whether `VK_LAYER_KHRONOS_validation` is on.
    pub validation: bool,
    /// Whether `VK_EXT_memory_budget` is enabled.
    pub memory_budget: bool,
    /// Whether the `timelineSemaphore` feature (Vulkan 1.2) is enabled.
    pub timeline_semaphore: bool,
    /// Whether `VK_EXT_memory_priority` is enabled (and the allocator told).
    pub memory_priority: bool,
    /// Whether `VK_EXT_pageable_device_local_memory` is enabled (and the
    /// allocator told).
    pub pageable_device_local_memory: bool,
    /// Whether `VK_KHR_external_memory_fd` is enabled (and the allocator told).
    pub external_memory_fd: bool,
    /// `VkPhysicalDeviceLimits`.
    pub limits: vk::PhysicalDeviceLimits,
    /// The memory heaps and types.
    pub memory_properties: vk::PhysicalDeviceMemoryProperties,
}

impl DeviceInfo {
    /// Whether some memory type has all of `flags`.
    pub fn has_memory_type_with(&self, flags: vk::MemoryPropertyFlags) -> bool {
        self.memory_properties
            .memory_types_as_slice()
            .iter()
            .any(|t| t.property_flags.contains(flags))
    }
}

/// A Vulkan instance, device, queue and allocator for one test.
///
/// Create with [`GpuContext::new`] (or [`GpuContext::for_test`], which panics
/// with a helpful message), end with [`GpuContext::finish`]. The context is
/// `Send + Sync`: threads may share it by reference (for example through
/// `std::thread::scope`), and [`GpuContext::one_shot`] serializes queue use.
pub struct GpuContext {
    allocator: Option<Arc<GpuAllocator>>,
    device: ash::Device,
    instance: ash::Instance,
    physical_device: vk::PhysicalDevice,
    queue_family: u32,
    /// The queue and the command pool, locked together: both need external
    /// synchronization.
    submit: Mutex<Submitter>,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    /// Boxed so its address, given to the messenger, never changes.
    counters: Box<MessageCounters>,
    info: DeviceInfo,
    finished: bool,
    // Declared last: the loader library stays loaded until everything else is gone.
    _entry: ash::Entry,
}

// Tests share a context between threads by reference.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<GpuContext>();
};

struct Submitter {
    queue: vk::Queue,
    pool: vk::CommandPool,
}

impl fmt::Debug for GpuContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GpuContext")
            .field("device", &self.info.name)
            .field("validation", &self.info.validation)
            .field("errors", &self.counters.errors())
            .finish_non_exhaustive()
    }
}

/// Builds the context step by step, so a failure part-way destroys what
/// was already made.
struct Partial {
    entry: ash::Entry,
    counters: Box<MessageCounters>,
    instance: Option<ash::Instance>,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    device: Option<ash::Device>,
    pool: vk::CommandPool,
}

impl Drop for Partial {
    fn drop(&mut self) {
        // SAFETY: every handle here was created by this `Partial`, nothing
        // else uses them (a successful build takes them out first), and they
        // are destroyed children first: pool, device, messenger, instance.
        unsafe {
            if let Some(device) = self.device.take() {
                if self.pool != vk::CommandPool::null() {
                    device.destroy_command_pool(self.pool, None);
                }
                device.destroy_device(None);
            }
            if let Some((loader, messenger)) = self.debug.take() {
                loader.destroy_debug_utils_messenger(messenger, None);
            }
            if let Some(instance) = self.instance.take() {
                instance.destroy_instance(None);
            }
        }
    }
}

fn env_flag(name: &str) -> bool {
    std::env::var(name)
        .map(|v| v == "1" || v.eq_ignore_ascii_case("true"))
        .unwrap_or(false)
}

fn version_string(v: u32) -> String {
    format!(
        "{}.{}.{}",
        vk::api_version_major(v),
        vk::api_version_minor(v),
        vk::api_version_patch(v)
    )
}

fn name_of(raw: &[c_char]) -> String {
    // SAFETY: Vulkan's fixed-size name arrays are NUL-terminated; the slice
    // covers the whole array, so the scan stops inside it.
    let bytes: &[u8] = unsafe { std::slice::from_raw_parts(raw.as_ptr().cast(), raw.len()) };
    CStr::from_bytes_until_nul(bytes)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl GpuContext {
    /// A context for a test: like [`GpuContext::new`], but panics with a
    /// message that says what to install when no device can be had. GPU tests
    /// never skip.
    pub fn for_test() -> Self {
        match Self::new() {
            Ok(ctx) => ctx,
            Err(err) => panic!("GPU test harness: {err}"),
        }
    }

    /// Loads Vulkan, creates an instance (with validation when available, and
    /// always when `VKALLOC_REQUIRE_VALIDATION=1`), a debug messenger that
    /// counts errors, a device with one queue, a command pool and an
    /// [`Allocator`].
    ///
    /// # Errors
    /// See [`HarnessError`]: each variant says what to install or set.
    pub fn new() -> Result<Self, HarnessError> {
        Self::with_desc(AllocatorDesc::default())
    }

    /// As [`GpuContext::new`], with the allocator configured by `desc`.
    ///
    /// # Errors
    /// As [`GpuContext::new`].
    pub fn with_desc(desc: AllocatorDesc) -> Result<Self, HarnessError> {
        let entry = gpu_bootstrap::load_entry().map_err(bootstrap_err)?;
        let mut partial = Partial {
            entry,
            counters: Box::default(),
            instance: None,
            debug: None,
            device: None,
            pool: vk::CommandPool::null(),
        };
        let require_validation = env_flag(REQUIRE_VALIDATION_ENV);

        // --- instance ----------------------------------------------------
        let counters_ptr: *const MessageCounters = &*partial.counters;
        let instance_desc = InstanceDesc {
            application_name: Some(c"vkalloc gpu-tests"),
            engine_name: Some(c"vkalloc"),
            api_version: ApiVersion::LoaderUpTo {
                min: vk::API_VERSION_1_1,
                max: vk::API_VERSION_1_3,
            },
            validation: if require_validation {
                Validation::Required
            } else {
                Validation::IfInstalled
            },
            // Synchronization validation: hazards between commands (a copy
            // racing a read, a missing barrier) are reported as errors too.
            sync_validation: true,
            messenger: Some(Messenger {
                severities: messenger::severities(),
                types: messenger::message_types(),
                callback: Some(messenger::callback),
                user_data: counters_ptr as *mut std::ffi::c_void,
                // Chained so that instance creation and destruction are reported too.
                report_instance_lifetime: true,
                without_validation: true,
            }),
            ..InstanceDesc::default()
        };
        // SAFETY: the messenger's user data is the boxed counters its callback
        // expects; the box outlives the messenger and the instance (`Partial`
        // and `Drop` destroy them first).
        let created = unsafe { gpu_bootstrap::create_instance(&partial.entry, &instance_desc) }
            .map_err(bootstrap_err)?;
        let (instance, validation, api_version) =
            (created.instance, created.validation, created.api_version);
        partial.instance = Some(instance.clone());
        partial.debug = created.debug;
        // The messenger exists exactly where the instance has VK_EXT_debug_utils.
        let debug_utils_available = partial.debug.is_some();
        if !validation {
            eprintln!(
                "GPU test harness: warning: VK_LAYER_KHRONOS_validation not found, running without \
                 validation (install vulkan-validationlayers)"
            );
        }

        // --- physical device ---------------------------------------------
        let index = match std::env::var(DEVICE_INDEX_ENV) {
            Ok(v) => v.trim().parse::<usize>().unwrap_or(usize::MAX),
            Err(_) => 0,
        };
        let (_, physical_device) =
            gpu_bootstrap::pick_physical_device(&instance, DevicePick::Index(index))
                .map_err(bootstrap_err)?;
        // SAFETY: `physical_device` came from this live instance, created at
        // `api_version`.
        let support = unsafe { DeviceSupport::query(&instance, physical_device, api_version) }
            .map_err(bootstrap_err)?;
        // SAFETY: as above.
        let memory_properties =
            unsafe { instance.get_physical_device_memory_properties(physical_device) };
        let properties = support.properties;
        let name = name_of(&properties.device_name);
        if properties.api_version < vk::API_VERSION_1_1 {
            return Err(HarnessError::TooOld {
                name,
                version: version_string(properties.api_version),
            });
        }
        // The version both the instance and the device have: what the feature
        // structs and the allocator's options go by.
        let api_version = support.api_version;

        // Prefer a family that does everything, then compute, then transfer.
        let family_score = |flags: vk::QueueFlags| {
            if flags.contains(vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE) {
                3
            } else if flags.contains(vk::QueueFlags::COMPUTE) {
                2
            } else if flags.contains(vk::QueueFlags::TRANSFER) {
                1
            } else {
                0
            }
        };
        let queue_family = support
            .queue_families
            .iter()
            .enumerate()
            .filter(|(_, f)| f.queue_count > 0 && family_score(f.queue_flags) > 0)
            .max_by_key(|(i, f)| (family_score(f.queue_flags), std::cmp::Reverse(*i)))
            .map(|(i, _)| i as u32)
            .ok_or_else(|| HarnessError::NoQueue(name.clone()))?;

        // --- device --------------------------------------------------------
        // Timeline semaphores (core in 1.2) where the device has them: the
        // deferred-destruction tests count GPU progress with one. Memory
        // priority and pageable device-local memory where the driver offers
        // them (the sparse lavapipe, the H200): the priority tests use them.
        // Exporting and importing file descriptors, where the driver can.
        let memory_budget = support.has_extension(ash::ext::memory_budget::NAME);
        let external_memory_fd = support.has_extension(ash::khr::external_memory_fd::NAME);
        let timeline_semaphore = support.supports(Feature::TimelineSemaphore);
        let memory_priority = support.supports(Feature::MemoryPriority);
        let pageable = memory_priority && support.supports(Feature::PageableDeviceLocalMemory);
        let mut extensions = Vec::new();
        if memory_budget {
            extensions.push(ash::ext::memory_budget::NAME);
        }
        if external_memory_fd {
            extensions.push(ash::khr::external_memory_fd::NAME);
        }
        let wanted = [
            (timeline_semaphore, Feature::TimelineSemaphore),
            (memory_priority, Feature::MemoryPriority),
            (pageable, Feature::PageableDeviceLocalMemory),
        ];
        let features: Vec<Feature> = wanted.iter().filter(|w| w.0).map(|w| w.1).collect();
        let device_desc = DeviceDesc {
            queues: &[QueueRequest {
                family: queue_family,
                count: 1,
            }],
            extensions: &extensions,
            features: &features,
        };
        // SAFETY: `instance` is the live instance `support` was queried from.
        let device = unsafe { gpu_bootstrap::create_device(&instance, &support, &device_desc) }
            .map_err(bootstrap_err)?;
        partial.device = Some(device.clone());

        // SAFETY: the device was created with one queue in `queue_family`.
        let queue = unsafe { device.get_device_queue(queue_family, 0) };
        let pool_info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(queue_family)
            .flags(vk::CommandPoolCreateFlags::TRANSIENT);
        // SAFETY: the device is live; the family exists on it.
        partial.pool = unsafe { device.create_command_pool(&pool_info, None) }
            .map_err(vk_err("vkCreateCommandPool"))?;

        // --- allocator -----------------------------------------------------
        // SAFETY: `device` was created from `physical_device` of `instance`,
        // with VK_EXT_memory_budget enabled exactly when `memory_budget` is
        // true (and the priority extensions exactly when their flags are); the context keeps the device alive until the allocator is
        // dropped (`finish` and `Drop` drop the allocator first).
        let allocator = unsafe {
            Allocator::on_ash(
                &instance,
                physical_device,
                &device,
                AshDeviceOptions {
                    memory_budget,
                    memory_priority,
                    pageable_device_local_memory: pageable,
                    // Vulkan 1.3 makes vkGetDeviceBufferMemoryRequirements core.
                    maintenance4: api_version >= vk::API_VERSION_1_3,
                    // Memory (and, when the desc asks, resources) named for
                    // validation messages.
                    debug_utils: debug_utils_available,
                    external_memory_fd,
                    ..AshDeviceOptions::default()
                },
                desc,
            )
        }
        .map_err(HarnessError::Allocator)?;

        let info = DeviceInfo {
            name,
            api_version,
            validation,
            memory_budget,
            timeline_semaphore,
            memory_priority,
            pageable_device_local_memory: pageable,
            external_memory_fd,
            limits: properties.limits,
            memory_properties,
        };
        eprintln!(
            "GPU test harness: {} (Vulkan {}), validation {}, memory budget {}",
            info.name,
            version_string(info.api_version),
            if validation { "on" } else { "OFF" },
            if memory_budget { "on" } else { "off" },
        );

        // Success: take the handles out of `partial` so its Drop leaves them.
        let pool = std::mem::replace(&mut partial.pool, vk::CommandPool::null());
        partial.device = None;
        partial.instance = None;
        let debug = partial.debug.take();
        let counters = std::mem::take(&mut partial.counters);
        // `counters` moved out of `partial` but the Box's heap address, which
        // the messenger holds, is unchanged.
        let entry = partial.entry.clone();
        drop(partial);

        Ok(GpuContext {
            allocator: Some(Arc::new(allocator)),
            device,
            instance,
            physical_device,
            queue_family,
            submit: Mutex::new(Submitter { queue, pool }),
            debug,
            counters,
            info,
            finished: false,
            _entry: entry,
        })
    }

    /// The allocator. Clone the `Arc` to share it with threads; every clone
    /// must be dropped before [`GpuContext::finish`].
    pub fn allocator(&self) -> &Arc<GpuAllocator> {
        self.allocator
            .as_ref()
            .expect("the allocator is only taken by finish/drop")
    }

    /// The logical device.
    pub fn device(&self) -> &ash::Device {
        &self.device
    }

    /// The instance.
    pub fn instance(&self) -> &ash::Instance {
        &self.instance
    }

    /// The physical device in use.
    pub fn physical_device(&self) -> vk::PhysicalDevice {
        self.physical_device
    }

    /// The queue family of the one queue.
    pub fn queue_family(&self) -> u32 {
        self.queue_family
    }

    /// Calls `use_queue` with the queue and its family, holding the lock
    /// that [`GpuContext::one_shot`] takes (the queue needs external
    /// synchronization).
    pub fn with_queue<R>(&self, use_queue: impl FnOnce(vk::Queue, u32) -> R) -> R {
        let submit = self.submit.lock();
        use_queue(submit.queue, self.queue_family)
    }

    /// What the harness learnt about the device.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Validation messages of error severity so far.
    pub fn validation_errors(&self) -> u32 {
        self.counters.errors()
    }

    /// Validation messages of warning severity so far.
    pub fn validation_warnings(&self) -> u32 {
        self.counters.warnings()
    }

    /// Returns the number of validation errors so far and forgets them: for
    /// a test that provokes an error on purpose, so [`GpuContext::finish`]
    /// still passes.
    pub fn take_validation_errors(&self) -> u32 {
        self.counters.take_errors()
    }

    /// The text of the first validation errors so far (for a test that
    /// provokes one on purpose and checks what it says).
    pub fn first_validation_errors(&self) -> Vec<String> {
        self.counters.first_errors()
    }

    /// Records commands with `record`, submits them on the queue and waits
    /// for them to finish. Returns what `record` returns.
    ///
    /// Calls from several threads are serialized.
    ///
    /// # Panics
    /// If a Vulkan call fails (a test failure).
    pub fn one_shot<R>(&self, record: impl FnOnce(vk::CommandBuffer) -> R) -> R {
        let submit = self.submit.lock();
        let alloc_info = vk::CommandBufferAllocateInfo::default()
            .command_pool(submit.pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool belongs to this device and is externally
        // synchronized by the `submit` lock held for the whole function.
        let cmd = unsafe { self.device.allocate_command_buffers(&alloc_info) }
            .expect("vkAllocateCommandBuffers failed")[0];
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: `cmd` was just allocated and is in the initial state.
        unsafe { self.device.begin_command_buffer(cmd, &begin) }
            .expect("vkBeginCommandBuffer failed");
        let result = record(cmd);
        // SAFETY: `cmd` is recording; the fence is new; the queue is
        // externally synchronized by the `submit` lock; waiting on the fence
        // before freeing the command buffer and the fence makes both idle.
        unsafe {
            self.device
                .end_command_buffer(cmd)
                .expect("vkEndCommandBuffer failed");
            let fence = self
                .device
                .create_fence(&vk::FenceCreateInfo::default(), None)
                .expect("vkCreateFence failed");
            let cmds = [cmd];
            let submit_info = vk::SubmitInfo::default().command_buffers(&cmds);
            self.device
                .queue_submit(submit.queue, &[submit_info], fence)
                .expect("vkQueueSubmit failed");
            self.device
                .wait_for_fences(&[fence], true, u64::MAX)
                .expect("vkWaitForFences failed");
            self.device.destroy_fence(fence, None);
            self.device.free_command_buffers(submit.pool, &cmds);
        }
        result
    }

    /// Checks that the allocator's invariants hold ([`Allocator::validate`])
    /// and that its statistics count no live allocation.
    ///
    /// # Panics
    /// If either does not hold, with the allocator's summary.
    pub fn assert_no_live_allocations(&self) {
        let allocator = self.allocator();
        if let Err(err) = allocator.validate() {
            panic!("allocator invariant broken: {err}\n{}", allocator.summary());
        }
        let stats = allocator.statistics();
        assert_eq!(
            stats.total.allocation_count,
            0,
            "the allocator still counts {} live allocation(s) ({} B) after everything was freed:\n{}",
            stats.total.allocation_count,
            stats.total.allocation_bytes,
            allocator.summary()
        );
    }

    /// Checks that the test freed every allocation and that the allocator's
    /// invariants hold, destroys the allocator, the device and the instance
    /// in that order, then panics if anything was wrong or if the validation
    /// layer reported any error during the test. Every test ends with it.
    ///
    /// # Panics
    /// If an allocation is still live (a leak, listed with its tag), an
    /// allocator invariant is broken, a validation error was reported, or a
    /// clone of [`GpuContext::allocator`] is still alive (it would outlive
    /// the device).
    pub fn finish(mut self) {
        self.finished = true;
        let mut problems = Vec::new();
        if let Some(allocator) = &self.allocator {
            let leaks = allocator.leaks();
            if !leaks.is_empty() {
                let listed: Vec<String> = leaks
                    .iter()
                    .take(16)
                    .map(|l| {
                        format!(
                            "  {} B at offset {} of memory type {}{}, tag {:?}",
                            l.size,
                            l.offset,
                            l.memory_type,
                            l.pool
                                .as_deref()
                                .map(|p| format!(" in pool '{p}'"))
                                .unwrap_or_default(),
                            l.tag.as_deref().unwrap_or("")
                        )
                    })
                    .collect();
                problems.push(format!(
                    "{} allocation(s) were never freed:\n{}",
                    leaks.len(),
                    listed.join("\n")
                ));
            }
            if let Err(err) = allocator.validate() {
                problems.push(format!("allocator invariant broken: {err}"));
            }
        }
        self.teardown();
        let errors = self.counters.errors();
        if errors > 0 {
            problems.push(format!(
                "the validation layer reported {errors} error(s) during this test (warnings: {}); \
                 the first:\n{}",
                self.counters.warnings(),
                self.counters.first_errors().join("\n")
            ));
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    /// Ends a test that leaves allocations behind on purpose, as an engine
    /// tearing down does: checks the allocator's invariants, takes the
    /// allocator out of its `Arc` and hands it to `teardown` (which destroys
    /// it and returns its leak report), then destroys the device and the
    /// instance and returns the report.
    ///
    /// # Panics
    /// If an allocator invariant is broken, a clone of the allocator is still
    /// alive, or the validation layer reported an error during the test or
    /// the device's destruction (memory left allocated, say:
    /// `VUID-vkDestroyDevice-device-00378`).
    pub fn finish_with(mut self, teardown: impl FnOnce(GpuAllocator) -> LeakReport) -> LeakReport {
        let shared = self
            .allocator
            .take()
            .expect("the allocator is only taken by finish/drop");
        let Ok(allocator) = Arc::try_unwrap(shared) else {
            panic!("finish_with while other clones of the allocator Arc are alive");
        };
        if let Err(err) = allocator.validate() {
            panic!("allocator invariant broken: {err}");
        }
        let report = teardown(allocator);
        self.finished = true;
        self.teardown();
        let errors = self.counters.errors();
        assert!(
            errors == 0,
            "the validation layer reported {errors} error(s) during this test or at the device's \
             destruction (warnings: {}); the first:\n{}",
            self.counters.warnings(),
            self.counters.first_errors().join("\n")
        );
        report
    }

    fn teardown(&mut self) {
        if let Some(allocator) = self.allocator.take() {
            match Arc::try_unwrap(allocator) {
                Ok(allocator) => drop(allocator),
                Err(shared) => {
                    let count = Arc::strong_count(&shared);
                    // Leak it rather than free memory behind a live user's back,
                    // and with it the device, the instance, and the counters
                    // their messenger still points at.
                    std::mem::forget(shared);
                    std::mem::forget(std::mem::take(&mut self.counters));
                    if !std::thread::panicking() {
                        panic!(
                            "GpuContext torn down while {} other clone(s) of the allocator Arc are \
                             alive: drop them (join the threads) before ctx.finish()",
                            count - 1
                        );
                    }
                    return;
                }
            }
        }
        let pool = std::mem::replace(&mut self.submit.lock().pool, vk::CommandPool::null());
        // SAFETY: the allocator, the only other user of the device, is gone;
        // every submission was waited for in `one_shot`; children are
        // destroyed before parents, and the messenger before the instance,
        // while the counters it points at are still alive.
        unsafe {
            if pool != vk::CommandPool::null() {
                self.device.device_wait_idle().ok();
                self.device.destroy_command_pool(pool, None);
                self.device.destroy_device(None);
                if let Some((loader, messenger)) = self.debug.take() {
                    loader.destroy_debug_utils_messenger(messenger, None);
                }
                self.instance.destroy_instance(None);
            }
        }
    }
}

impl Drop for GpuContext {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if std::thread::panicking() {
            // The test already failed, and its resources are probably still
            // alive: destroying the device now would only bury the real
            // failure under validation errors about them. Leak everything
            // (the process ends soon) and keep the messenger's counters alive.
            if let Some(allocator) = self.allocator.take() {
                std::mem::forget(allocator);
            }
            std::mem::forget(std::mem::take(&mut self.counters));
            return;
        }
        self.teardown();
        let errors = self.counters.errors();
        assert!(
            errors == 0,
            "the validation layer reported {errors} error(s) during this test (the test did not \
             call ctx.finish()); the first:\n{}",
            self.counters.first_errors().join("\n")
        );
    }
}

/// The name libtest gives the test function `test` declared in the module
/// `module_path` (its `module_path!()`): the module path without the crate's
/// name, then the function, for a child process that runs one test of this
/// binary (`current_exe() --exact NAME`).
///
/// ```
/// assert_eq!(gpu_tests::libtest_name("gpu::priority", "t"), "priority::t");
/// assert_eq!(gpu_tests::libtest_name("priority", "t"), "t");
/// ```
pub fn libtest_name(module_path: &str, test: &str) -> String {
    match module_path.split_once("::") {
        Some((_, module)) => format!("{module}::{test}"),
        None => test.to_string(),
    }
}
