//! A Vulkan instance and device whose `vkAllocateMemory` and `vkFreeMemory`
//! are wrapped to count calls, time them and track committed bytes.
//!
//! The wrapping happens in the device's function table: the `ash::Device`
//! handed to every allocator is built with [`ash::Device::load_with`], which
//! returns [`counting_allocate_memory`] / [`counting_free_memory`] for those
//! two names and the driver's pointers for everything else. VMA (through
//! vk-mem, which copies its function pointers from that `ash::Device`),
//! gpu-allocator and vkalloc all call through the same table, so they are
//! measured the same way.
//!
//! The counters are process-wide: replay one allocator at a time.
//!
//! The table also answers `vkGetBufferMemoryRequirements2` and
//! `vkGetImageMemoryRequirements2` for *stand-in* handles ([`stand_in`]):
//! handles that name no Vulkan object, for which it returns requirements the
//! caller set. That lets VMA allocate through `vmaAllocateMemoryForBuffer` /
//! `vmaAllocateMemoryForImage` (so it knows buffers from images, and hears
//! the driver's dedicated wish, as with a real resource) with a trace's exact
//! requirements. `vkAllocateMemory` strips a `VkMemoryDedicatedAllocateInfo`
//! naming a stand-in before the driver sees it.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use ash::vk;
use ash::vk::Handle;
use gpu_bootstrap::{BootstrapError, DeviceDesc, DevicePick, DeviceSupport, QueueRequest};

use crate::clock;

/// The driver's own entry points, saved before the wrapped table is built.
#[derive(Clone, Copy)]
struct RealFns {
    allocate_memory: vk::PFN_vkAllocateMemory,
    free_memory: vk::PFN_vkFreeMemory,
    buffer_requirements2: Option<vk::PFN_vkGetBufferMemoryRequirements2>,
    image_requirements2: Option<vk::PFN_vkGetImageMemoryRequirements2>,
}

/// The high bits that mark a stand-in handle.
const STAND_IN_TAG: u64 = 0x5a5a_0000_0000_0000;
const STAND_IN_MASK: u64 = 0xffff_0000_0000_0000;

/// What the requirements queries answer for a stand-in handle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StandInRequirements {
    /// `VkMemoryRequirements::size`.
    pub size: u64,
    /// `VkMemoryRequirements::alignment`.
    pub alignment: u64,
    /// `VkMemoryRequirements::memoryTypeBits`.
    pub memory_type_bits: u32,
    /// `VkMemoryDedicatedRequirements::prefersDedicatedAllocation`.
    pub prefers_dedicated: bool,
    /// `VkMemoryDedicatedRequirements::requiresDedicatedAllocation`.
    pub requires_dedicated: bool,
}

thread_local! {
    static STAND_IN: Cell<StandInRequirements> = const { Cell::new(StandInRequirements {
        size: 0,
        alignment: 1,
        memory_type_bits: 0,
        prefers_dedicated: false,
        requires_dedicated: false,
    }) };
    static STAND_IN_SEQ: Cell<u64> = const { Cell::new(0) };
}

/// A stand-in handle (usable as a `VkBuffer` or `VkImage` with this
/// device's requirements queries only) whose memory requirements, on this
/// thread and until the next call, are `r`.
#[inline]
pub fn stand_in(r: StandInRequirements) -> u64 {
    STAND_IN.with(|c| c.set(r));
    STAND_IN_SEQ.with(|c| {
        let n = c.get().wrapping_add(1) & !STAND_IN_MASK;
        c.set(n);
        STAND_IN_TAG | n.max(1)
    })
}

fn is_stand_in(raw: u64) -> bool {
    raw & STAND_IN_MASK == STAND_IN_TAG
}

/// Fills `out` (and a chained `VkMemoryDedicatedRequirements`) from the
/// stand-in requirements.
///
/// # Safety
/// `out` is a valid `VkMemoryRequirements2` whose chain is valid.
unsafe fn fill_stand_in(out: *mut vk::MemoryRequirements2<'_>) {
    let r = STAND_IN.with(Cell::get);
    // SAFETY: the caller passes a valid output structure and chain.
    unsafe {
        (*out).memory_requirements = vk::MemoryRequirements {
            size: r.size,
            alignment: r.alignment,
            memory_type_bits: r.memory_type_bits,
        };
        let mut next = (*out).p_next as *mut vk::BaseOutStructure<'_>;
        while !next.is_null() {
            if (*next).s_type == vk::StructureType::MEMORY_DEDICATED_REQUIREMENTS {
                let d = next as *mut vk::MemoryDedicatedRequirements<'_>;
                (*d).prefers_dedicated_allocation = r.prefers_dedicated.into();
                (*d).requires_dedicated_allocation = r.requires_dedicated.into();
            }
            next = (*next).p_next;
        }
    }
}

/// `vkGetBufferMemoryRequirements2`, answering stand-in handles; timed as
/// driver time.
///
/// # Safety
/// As `vkGetBufferMemoryRequirements2`.
pub unsafe extern "system" fn stand_in_buffer_requirements2(
    device: vk::Device,
    p_info: *const vk::BufferMemoryRequirementsInfo2<'_>,
    p_out: *mut vk::MemoryRequirements2<'_>,
) {
    let start = clock::now();
    // SAFETY: the caller passes valid structures, as the command requires.
    unsafe {
        if is_stand_in((*p_info).buffer.as_raw()) {
            fill_stand_in(p_out);
        } else if let Some(f) = REAL.get().and_then(|r| r.buffer_requirements2) {
            f(device, p_info, p_out);
        }
    }
    if TIME_QUERIES.load(Ordering::Relaxed) {
        DRIVER_TICKS.fetch_add(clock::now().wrapping_sub(start), Ordering::Relaxed);
    }
}

/// `vkGetImageMemoryRequirements2`, answering stand-in handles; timed as
/// driver time.
///
/// # Safety
/// As `vkGetImageMemoryRequirements2`.
pub unsafe extern "system" fn stand_in_image_requirements2(
    device: vk::Device,
    p_info: *const vk::ImageMemoryRequirementsInfo2<'_>,
    p_out: *mut vk::MemoryRequirements2<'_>,
) {
    let start = clock::now();
    // SAFETY: the caller passes valid structures, as the command requires.
    unsafe {
        if is_stand_in((*p_info).image.as_raw()) {
            fill_stand_in(p_out);
        } else if let Some(f) = REAL.get().and_then(|r| r.image_requirements2) {
            f(device, p_info, p_out);
        }
    }
    if TIME_QUERIES.load(Ordering::Relaxed) {
        DRIVER_TICKS.fetch_add(clock::now().wrapping_sub(start), Ordering::Relaxed);
    }
}

static REAL: OnceLock<RealFns> = OnceLock::new();

/// Whether the stand-in requirement queries add their time to the driver
/// time (on by default; `bench threads` turns it off, since the shared
/// counter would put a contended atomic on VMA's path alone).
static TIME_QUERIES: AtomicBool = AtomicBool::new(true);

/// Turns the timing of the requirement queries on or off.
pub fn time_requirement_queries(on: bool) {
    TIME_QUERIES.store(on, Ordering::Relaxed);
}

static ALLOC_CALLS: AtomicU64 = AtomicU64::new(0);
static ALLOC_BYTES: AtomicU64 = AtomicU64::new(0);
static ALLOC_FAILURES: AtomicU64 = AtomicU64::new(0);
static FREE_CALLS: AtomicU64 = AtomicU64::new(0);
static ALLOC_TICKS: AtomicU64 = AtomicU64::new(0);
static FREE_TICKS: AtomicU64 = AtomicU64::new(0);
static DRIVER_TICKS: AtomicU64 = AtomicU64::new(0);
static COMMITTED: AtomicU64 = AtomicU64::new(0);
static PEAK_COMMITTED: AtomicU64 = AtomicU64::new(0);
static LIVE_OBJECTS: AtomicU64 = AtomicU64::new(0);

/// Size of every live `VkDeviceMemory`, by raw handle.
fn sizes() -> &'static Mutex<HashMap<u64, u64>> {
    static SIZES: OnceLock<Mutex<HashMap<u64, u64>>> = OnceLock::new();
    SIZES.get_or_init(|| Mutex::new(HashMap::new()))
}

/// `VKALLOC_BENCH_CALL_LOG=FILE`: a line per wrapped driver call, for
/// finding what a driver's allocation cost depends on (size, memory type):
/// `A <bytes> <memory type> <ns> <ok>` and `F <bytes> <ns>`, after a
/// `# <trace> <allocator>` line per replay ([`call_log_mark`]).
fn call_log() -> Option<&'static Mutex<std::io::BufWriter<std::fs::File>>> {
    static LOG: OnceLock<Option<Mutex<std::io::BufWriter<std::fs::File>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let path = std::env::var_os("VKALLOC_BENCH_CALL_LOG")?;
        match std::fs::File::create(&path) {
            Ok(f) => Some(Mutex::new(std::io::BufWriter::new(f))),
            Err(e) => {
                eprintln!("VKALLOC_BENCH_CALL_LOG {}: {e}", path.to_string_lossy());
                None
            }
        }
    })
    .as_ref()
}

fn call_log_line(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    if let Some(Ok(mut w)) = call_log().map(Mutex::lock) {
        // A diagnostic log: a failed write loses lines, not the run.
        let _ = w.write_fmt(line);
        let _ = w.write_all(b"\n");
    }
}

/// Starts a replay's section of the call log (`VKALLOC_BENCH_CALL_LOG`),
/// and flushes what came before.
pub fn call_log_mark(trace: &str, allocator: &str) {
    call_log_line(format_args!("# {trace} {allocator}"));
    if let Some(Ok(mut w)) = call_log().map(Mutex::lock) {
        let _ = std::io::Write::flush(&mut *w);
    }
}

/// `vkAllocateMemory` with counting: forwards to the driver, then records
/// the call, its duration (the wrapper's bookkeeping included) and the bytes.
///
/// # Safety
/// As `vkAllocateMemory`: the pointers are valid as the Vulkan spec requires.
pub unsafe extern "system" fn counting_allocate_memory(
    device: vk::Device,
    p_allocate_info: *const vk::MemoryAllocateInfo<'_>,
    p_allocator: *const vk::AllocationCallbacks<'_>,
    p_memory: *mut vk::DeviceMemory,
) -> vk::Result {
    let start = clock::now();
    let Some(real) = REAL.get() else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // A VkMemoryDedicatedAllocateInfo naming a stand-in handle (VMA puts it
    // first in the chain) must not reach the driver: allocate with a copy of
    // the info that skips it.
    // SAFETY: the caller passes a valid info and chain.
    let mut stripped = unsafe { *p_allocate_info };
    let first = stripped.p_next as *const vk::MemoryDedicatedAllocateInfo<'_>;
    // SAFETY: a non-null `p_next` points to a structure that starts with
    // `sType` and `pNext`; it is read as a dedicated info only when its
    // `sType` says it is one.
    unsafe {
        if !first.is_null()
            && (*first).s_type == vk::StructureType::MEMORY_DEDICATED_ALLOCATE_INFO
            && (is_stand_in((*first).buffer.as_raw()) || is_stand_in((*first).image.as_raw()))
        {
            stripped.p_next = (*first).p_next;
        }
    }
    // SAFETY: the caller passes what vkAllocateMemory expects (`stripped` is
    // its info less a leading structure); `real` is the driver's
    // vkAllocateMemory for this device.
    let result = unsafe { (real.allocate_memory)(device, &stripped, p_allocator, p_memory) };
    ALLOC_CALLS.fetch_add(1, Ordering::Relaxed);
    if result == vk::Result::SUCCESS {
        // SAFETY: on success the driver wrote `*p_memory`; `p_allocate_info`
        // is valid for the call.
        let (size, memory) = unsafe { ((*p_allocate_info).allocation_size, (*p_memory).as_raw()) };
        if let Ok(mut map) = sizes().lock() {
            map.insert(memory, size);
        }
        ALLOC_BYTES.fetch_add(size, Ordering::Relaxed);
        let now = COMMITTED.fetch_add(size, Ordering::Relaxed) + size;
        PEAK_COMMITTED.fetch_max(now, Ordering::Relaxed);
        LIVE_OBJECTS.fetch_add(1, Ordering::Relaxed);
    } else {
        ALLOC_FAILURES.fetch_add(1, Ordering::Relaxed);
    }
    let ticks = clock::now().wrapping_sub(start);
    ALLOC_TICKS.fetch_add(ticks, Ordering::Relaxed);
    DRIVER_TICKS.fetch_add(ticks, Ordering::Relaxed);
    if call_log().is_some() {
        call_log_line(format_args!(
            "A {} {} {:.0} {}",
            stripped.allocation_size,
            stripped.memory_type_index,
            clock::ticks_to_ns(ticks as f64),
            u8::from(result == vk::Result::SUCCESS)
        ));
    }
    result
}

/// `vkFreeMemory` with counting.
///
/// # Safety
/// As `vkFreeMemory`.
pub unsafe extern "system" fn counting_free_memory(
    device: vk::Device,
    memory: vk::DeviceMemory,
    p_allocator: *const vk::AllocationCallbacks<'_>,
) {
    let start = clock::now();
    let Some(real) = REAL.get() else {
        return;
    };
    // SAFETY: the caller passes what vkFreeMemory expects; `real` is the
    // driver's vkFreeMemory for this device.
    unsafe { (real.free_memory)(device, memory, p_allocator) };
    let mut freed = None;
    if memory != vk::DeviceMemory::null() {
        FREE_CALLS.fetch_add(1, Ordering::Relaxed);
        let size = sizes()
            .lock()
            .ok()
            .and_then(|mut m| m.remove(&memory.as_raw()))
            .unwrap_or(0);
        COMMITTED.fetch_sub(size, Ordering::Relaxed);
        LIVE_OBJECTS.fetch_sub(1, Ordering::Relaxed);
        freed = Some(size);
    }
    let ticks = clock::now().wrapping_sub(start);
    FREE_TICKS.fetch_add(ticks, Ordering::Relaxed);
    DRIVER_TICKS.fetch_add(ticks, Ordering::Relaxed);
    // Outside the timed part, as for allocations.
    if let (Some(size), Some(_)) = (freed, call_log()) {
        let ns = clock::ticks_to_ns(ticks as f64);
        call_log_line(format_args!("F {size} {ns:.0}"));
    }
}

/// Clock ticks ([`crate::clock`]) spent inside the wrapped
/// `vkAllocateMemory` and `vkFreeMemory` since the last [`reset_counters`].
#[inline]
pub fn driver_ticks() -> u64 {
    DRIVER_TICKS.load(Ordering::Relaxed)
}

/// What the wrapped functions counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverCounters {
    /// `vkAllocateMemory` calls (failed ones included).
    pub allocate_calls: u64,
    /// `vkAllocateMemory` calls that failed.
    pub allocate_failures: u64,
    /// Bytes of the successful `vkAllocateMemory` calls, summed
    /// (`allocationSize`): on drivers whose allocation cost grows with the
    /// size, what the driver time is made of.
    pub allocate_bytes: u64,
    /// `vkFreeMemory` calls with a non-null handle.
    pub free_calls: u64,
    /// Nanoseconds inside `vkAllocateMemory`.
    pub allocate_ns: u64,
    /// Nanoseconds inside `vkFreeMemory`.
    pub free_ns: u64,
    /// Bytes of live `VkDeviceMemory` now.
    pub committed_bytes: u64,
    /// The most bytes of live `VkDeviceMemory` since the last reset.
    pub peak_committed_bytes: u64,
    /// Live `VkDeviceMemory` objects now.
    pub live_objects: u64,
}

/// Reads the counters.
pub fn counters() -> DriverCounters {
    DriverCounters {
        allocate_calls: ALLOC_CALLS.load(Ordering::Relaxed),
        allocate_failures: ALLOC_FAILURES.load(Ordering::Relaxed),
        allocate_bytes: ALLOC_BYTES.load(Ordering::Relaxed),
        free_calls: FREE_CALLS.load(Ordering::Relaxed),
        allocate_ns: clock::ticks_to_ns(ALLOC_TICKS.load(Ordering::Relaxed) as f64) as u64,
        free_ns: clock::ticks_to_ns(FREE_TICKS.load(Ordering::Relaxed) as f64) as u64,
        committed_bytes: COMMITTED.load(Ordering::Relaxed),
        peak_committed_bytes: PEAK_COMMITTED.load(Ordering::Relaxed),
        live_objects: LIVE_OBJECTS.load(Ordering::Relaxed),
    }
}

/// Zeroes the call counts and times, and sets the peak to what is committed now.
pub fn reset_counters() {
    for c in [
        &ALLOC_CALLS,
        &ALLOC_BYTES,
        &ALLOC_FAILURES,
        &FREE_CALLS,
        &ALLOC_TICKS,
        &FREE_TICKS,
        &DRIVER_TICKS,
    ] {
        c.store(0, Ordering::Relaxed);
    }
    PEAK_COMMITTED.store(COMMITTED.load(Ordering::Relaxed), Ordering::Relaxed);
}

/// What the benchmark reports about the device.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DeviceInfo {
    /// Index among the instance's physical devices.
    pub index: usize,
    /// `deviceName`.
    pub name: String,
    /// `deviceType`, e.g. `DISCRETE_GPU`, `CPU`.
    pub device_type: String,
    /// `driverName` and `driverInfo` (Vulkan 1.2), e.g. `llvmpipe, Mesa 22.3.6`.
    pub driver: String,
    /// The API version used (the lower of the device's and 1.3), as `major.minor.patch`.
    pub api_version: String,
    /// Whether `VK_EXT_memory_budget` is enabled.
    pub memory_budget: bool,
    /// `bufferImageGranularity`.
    pub buffer_image_granularity: u64,
    /// Each memory type as `index: FLAGS (heap h)`.
    pub memory_types: Vec<String>,
    /// Each heap as `index: size MiB [DEVICE_LOCAL]`.
    pub memory_heaps: Vec<String>,
}

/// One line per physical device: index, name, type.
pub fn list_devices() -> Result<Vec<String>, String> {
    let entry = gpu_bootstrap::load_entry().map_err(|e| e.to_string())?;
    let instance = create_instance(&entry)?;
    // SAFETY: the instance is live; it is destroyed below and nothing
    // created from it outlives that.
    let out = unsafe {
        let list = instance.enumerate_physical_devices().unwrap_or_default();
        let out = list
            .iter()
            .enumerate()
            .map(|(i, &pd)| {
                let p = instance.get_physical_device_properties(pd);
                format!(
                    "{i}: {} ({:?})",
                    cstr_to_string(&p.device_name),
                    p.device_type
                )
            })
            .collect();
        instance.destroy_instance(None);
        out
    };
    Ok(out)
}

fn cstr_to_string(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn create_instance(entry: &ash::Entry) -> Result<ash::Instance, String> {
    let desc = gpu_bootstrap::InstanceDesc {
        application_name: Some(c"vkalloc-bench"),
        ..gpu_bootstrap::InstanceDesc::default()
    };
    // SAFETY: no extensions, no messenger: nothing for the caller to keep alive.
    unsafe { gpu_bootstrap::create_instance(entry, &desc) }
        .map(|created| created.instance)
        .map_err(|e| e.to_string())
}

/// A Vulkan instance and a device with counting memory functions.
pub struct VulkanContext {
    // Kept alive: the loader library must stay loaded while the instance lives.
    _entry: ash::Entry,
    /// The instance.
    pub instance: ash::Instance,
    /// The selected physical device.
    pub physical_device: vk::PhysicalDevice,
    /// The device, its `vkAllocateMemory`/`vkFreeMemory` wrapped.
    pub device: ash::Device,
    /// The Vulkan API version the device is used at (for VMA).
    pub api_version: u32,
    /// What the device is.
    pub info: DeviceInfo,
}

impl VulkanContext {
    /// Creates an instance and a device on physical device `index`, or by
    /// default on the first discrete GPU (else the first device). Fails if
    /// there is no Vulkan device.
    pub fn new(index: Option<usize>, want_memory_budget: bool) -> Result<Self, String> {
        let entry = gpu_bootstrap::load_entry().map_err(|e| e.to_string())?;
        let instance = create_instance(&entry)?;
        // SAFETY: the instance is live. On error paths it is destroyed
        // before returning, with nothing created from it left.
        match unsafe { Self::with_instance(&instance, index, want_memory_budget) } {
            Ok((physical_device, device, api_version, info)) => Ok(Self {
                _entry: entry,
                instance,
                physical_device,
                device,
                api_version,
                info,
            }),
            Err(e) => {
                // SAFETY: nothing created from the instance is alive.
                unsafe { instance.destroy_instance(None) };
                Err(e)
            }
        }
    }

    /// # Safety
    /// `instance` is live.
    unsafe fn with_instance(
        instance: &ash::Instance,
        index: Option<usize>,
        want_memory_budget: bool,
    ) -> Result<(vk::PhysicalDevice, ash::Device, u32, DeviceInfo), String> {
        // SAFETY: (whole function) every call gets the live instance and
        // handles enumerated from it, with create infos that outlive the call;
        // the pointers vkGetDeviceProcAddr returns for the two requirements
        // queries have those commands' signatures, as transmuted.
        unsafe {
            let pick = match index {
                Some(i) => DevicePick::Index(i),
                None => DevicePick::FirstDiscreteElseFirst,
            };
            let (index, pd) = gpu_bootstrap::pick_physical_device(instance, pick).map_err(|e| match e {
                BootstrapError::NoDevice => "no Vulkan physical device found (is a driver such as Mesa's lavapipe installed?)".to_string(),
                BootstrapError::BadDeviceIndex { index, count } => format!(
                    "--device {index}: only {count} devices (0..{})",
                    count - 1
                ),
                e => e.to_string(),
            })?;
            let props = instance.get_physical_device_properties(pd);
            let api_version = props.api_version.min(vk::API_VERSION_1_3);
            let mut driver_props = vk::PhysicalDeviceDriverProperties::default();
            let driver = if api_version >= vk::API_VERSION_1_2 {
                let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut driver_props);
                instance.get_physical_device_properties2(pd, &mut p2);
                format!(
                    "{}, {}",
                    cstr_to_string(&driver_props.driver_name),
                    cstr_to_string(&driver_props.driver_info)
                )
            } else {
                format!("driver version {:#x}", props.driver_version)
            };
            let support = DeviceSupport::query(instance, pd, vk::API_VERSION_1_3)
                .map_err(|e| e.to_string())?;
            let memory_budget =
                want_memory_budget && support.has_extension(ash::ext::memory_budget::NAME);
            let mem = instance.get_physical_device_memory_properties(pd);

            let extensions: &[&CStr] = if memory_budget {
                &[ash::ext::memory_budget::NAME]
            } else {
                &[]
            };
            let desc = DeviceDesc {
                queues: &[QueueRequest {
                    family: 0,
                    count: 1,
                }],
                extensions,
                ..DeviceDesc::default()
            };
            let plain = gpu_bootstrap::create_device(instance, &support, &desc)
                .map_err(|e| e.to_string())?;
            let handle = plain.handle();
            let gdpa = instance.fp_v1_0().get_device_proc_addr;
            let lookup = |name: &CStr| -> *const c_void {
                match gdpa(handle, name.as_ptr()) {
                    Some(f) => f as *const c_void,
                    None => std::ptr::null(),
                }
            };
            let real = RealFns {
                allocate_memory: plain.fp_v1_0().allocate_memory,
                free_memory: plain.fp_v1_0().free_memory,
                buffer_requirements2: gdpa(handle, c"vkGetBufferMemoryRequirements2".as_ptr())
                    .map(|f| std::mem::transmute::<_, vk::PFN_vkGetBufferMemoryRequirements2>(f)),
                image_requirements2: gdpa(handle, c"vkGetImageMemoryRequirements2".as_ptr())
                    .map(|f| std::mem::transmute::<_, vk::PFN_vkGetImageMemoryRequirements2>(f)),
            };
            let saved = *REAL.get_or_init(|| real);
            if saved.allocate_memory as usize != real.allocate_memory as usize
                || saved.free_memory as usize != real.free_memory as usize
            {
                plain.destroy_device(None);
                return Err(
                    "a second device with other memory entry points: one driver per process".into(),
                );
            }
            let device = ash::Device::load_with(
                |name| {
                    if name == c"vkAllocateMemory" {
                        counting_allocate_memory as *const c_void
                    } else if name == c"vkFreeMemory" {
                        counting_free_memory as *const c_void
                    } else if name == c"vkGetBufferMemoryRequirements2" {
                        stand_in_buffer_requirements2 as *const c_void
                    } else if name == c"vkGetImageMemoryRequirements2" {
                        stand_in_image_requirements2 as *const c_void
                    } else {
                        lookup(name)
                    }
                },
                handle,
            );

            let flag_names = |f: vk::MemoryPropertyFlags| format!("{f:?}");
            let info = DeviceInfo {
                index,
                name: cstr_to_string(&props.device_name),
                device_type: format!("{:?}", props.device_type),
                driver,
                api_version: format!(
                    "{}.{}.{}",
                    vk::api_version_major(props.api_version),
                    vk::api_version_minor(props.api_version),
                    vk::api_version_patch(props.api_version)
                ),
                memory_budget,
                buffer_image_granularity: props.limits.buffer_image_granularity,
                memory_types: mem
                    .memory_types_as_slice()
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        format!(
                            "{i}: {} (heap {})",
                            flag_names(t.property_flags),
                            t.heap_index
                        )
                    })
                    .collect(),
                memory_heaps: mem
                    .memory_heaps_as_slice()
                    .iter()
                    .enumerate()
                    .map(|(i, h)| {
                        format!(
                            "{i}: {} MiB{}",
                            h.size >> 20,
                            if h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL) {
                                " DEVICE_LOCAL"
                            } else {
                                ""
                            }
                        )
                    })
                    .collect(),
            };
            Ok((pd, device, api_version, info))
        }
    }

    /// Bytes of the largest `DEVICE_LOCAL` heap (else the largest heap).
    pub fn largest_device_local_heap(&self) -> u64 {
        // SAFETY: the instance and physical device are live.
        let mem = unsafe {
            self.instance
                .get_physical_device_memory_properties(self.physical_device)
        };
        let heaps = mem.memory_heaps_as_slice();
        heaps
            .iter()
            .filter(|h| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
            .map(|h| h.size)
            .max()
            .or_else(|| heaps.iter().map(|h| h.size).max())
            .unwrap_or(0)
    }

    /// The driver's memory requirements for a resource: creates the buffer
    /// or image with that create info, reads `VkMemoryRequirements2` with a
    /// chained `VkMemoryDedicatedRequirements` (through the table's
    /// requirements queries, which pass real handles to the driver), and
    /// destroys it. `None` when the device does not support the image's
    /// format, usage or sample count, or creating it fails.
    pub fn requirements(&self, r: &crate::corpus::Resource) -> Option<StandInRequirements> {
        let mut dedicated = vk::MemoryDedicatedRequirements::default();
        let mut out = vk::MemoryRequirements2::default().push_next(&mut dedicated);
        match *r {
            crate::corpus::Resource::Buffer { size, usage } => {
                let info = vk::BufferCreateInfo::default()
                    .size(size.max(1))
                    .usage(vk::BufferUsageFlags::from_raw(usage))
                    .sharing_mode(vk::SharingMode::EXCLUSIVE);
                // SAFETY: a valid create info; the buffer is destroyed
                // below and never bound or used.
                unsafe {
                    let buffer = self.device.create_buffer(&info, None).ok()?;
                    let query = vk::BufferMemoryRequirementsInfo2::default().buffer(buffer);
                    self.device
                        .get_buffer_memory_requirements2(&query, &mut out);
                    self.device.destroy_buffer(buffer, None);
                }
            }
            crate::corpus::Resource::Image {
                width,
                height,
                format,
                mips,
                samples,
                usage,
            } => {
                let format = vk::Format::from_raw(format);
                let usage = vk::ImageUsageFlags::from_raw(usage);
                let samples = vk::SampleCountFlags::from_raw(samples);
                // SAFETY: the instance and physical device are live.
                let props = unsafe {
                    self.instance.get_physical_device_image_format_properties(
                        self.physical_device,
                        format,
                        vk::ImageType::TYPE_2D,
                        vk::ImageTiling::OPTIMAL,
                        usage,
                        vk::ImageCreateFlags::empty(),
                    )
                }
                .ok()?;
                if !props.sample_counts.contains(samples)
                    || props.max_extent.width < width
                    || props.max_extent.height < height
                    || props.max_mip_levels < mips
                {
                    return None;
                }
                let info = vk::ImageCreateInfo::default()
                    .image_type(vk::ImageType::TYPE_2D)
                    .format(format)
                    .extent(vk::Extent3D {
                        width,
                        height,
                        depth: 1,
                    })
                    .mip_levels(mips)
                    .array_layers(1)
                    .samples(samples)
                    .tiling(vk::ImageTiling::OPTIMAL)
                    .usage(usage)
                    .sharing_mode(vk::SharingMode::EXCLUSIVE)
                    .initial_layout(vk::ImageLayout::UNDEFINED);
                // SAFETY: a create info the device supports (checked above);
                // the image is destroyed below and never bound or used.
                unsafe {
                    let image = self.device.create_image(&info, None).ok()?;
                    let query = vk::ImageMemoryRequirementsInfo2::default().image(image);
                    self.device.get_image_memory_requirements2(&query, &mut out);
                    self.device.destroy_image(image, None);
                }
            }
        }
        let m = out.memory_requirements;
        Some(StandInRequirements {
            size: m.size,
            alignment: m.alignment,
            memory_type_bits: m.memory_type_bits,
            prefers_dedicated: dedicated.prefers_dedicated_allocation == vk::TRUE,
            requires_dedicated: dedicated.requires_dedicated_allocation == vk::TRUE,
        })
    }

    /// The property flags of each of the device's memory types.
    pub fn memory_type_flags(&self) -> Vec<u32> {
        // SAFETY: the instance and physical device are live.
        let mem = unsafe {
            self.instance
                .get_physical_device_memory_properties(self.physical_device)
        };
        mem.memory_types[..(mem.memory_type_count as usize).min(vk::MAX_MEMORY_TYPES)]
            .iter()
            .map(|t| t.property_flags.as_raw())
            .collect()
    }

    /// A mask with one bit per memory type of the device.
    pub fn all_types_mask(&self) -> u32 {
        // SAFETY: the instance and physical device are live.
        let mem = unsafe {
            self.instance
                .get_physical_device_memory_properties(self.physical_device)
        };
        if mem.memory_type_count >= 32 {
            u32::MAX
        } else {
            (1u32 << mem.memory_type_count) - 1
        }
    }
}

impl Drop for VulkanContext {
    fn drop(&mut self) {
        // SAFETY: every allocator built on the device was dropped before the
        // context (callers own them for shorter), so nothing uses the device.
        unsafe {
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}
