//! [`SimDevice`]: a [`MemoryDevice`] with no GPU behind it.

use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::tables::GpuTable;
use crate::device::{
    DedicatedResource, DedicatedTo, DeviceError, DeviceLimits, DeviceMemory, HeapBudget,
    MappedRange, MemoryAllocateInfo, MemoryDevice, MemoryProperties, MemoryPropertyFlags,
};
use crate::priority::MemoryPriority;

/// `VK_ERROR_UNKNOWN`, returned for calls that break the seam's contract.
const VK_ERROR_UNKNOWN: i32 = -13;

/// When a counted call fails on purpose.
///
/// Calls are numbered from 1, counting from when the [`FailurePlan`] was
/// installed (at [`SimDeviceBuilder::build`] or
/// [`SimDevice::set_failure_plan`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CallFailure {
    /// No call fails.
    #[default]
    Never,
    /// Call number `n` fails; the calls before and after it succeed.
    Once(u64),
    /// Call number `n` and every later call fail.
    From(u64),
}

impl CallFailure {
    /// Whether call number `n` (from 1) fails.
    pub const fn fails(self, n: u64) -> bool {
        match self {
            Self::Never => false,
            Self::Once(at) => n == at,
            Self::From(at) => n >= at,
        }
    }
}

/// Failures to inject into a [`SimDevice`], built with chained calls.
///
/// ```
/// use vkalloc::device::DeviceError;
/// use vkalloc::sim::FailurePlan;
///
/// let plan = FailurePlan::new()
///     .fail_allocate_call(3)
///     .allocate_error(DeviceError::OutOfHostMemory)
///     .fail_above_live_bytes(1 << 30);
/// # let _ = plan;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailurePlan {
    /// Which `allocate_memory` calls fail with [`FailurePlan::allocate_error`].
    pub allocate: CallFailure,
    /// The error injected allocate calls return.
    pub allocate_error: DeviceError,
    /// `allocate_memory` fails with `OutOfDeviceMemory` whenever the live
    /// bytes over all heaps would pass this total.
    pub live_byte_limit: Option<u64>,
    /// Which `map_memory` calls fail with `MemoryMapFailed`.
    pub map: CallFailure,
}

impl Default for FailurePlan {
    fn default() -> Self {
        Self::new()
    }
}

impl FailurePlan {
    /// A plan with no failures.
    pub const fn new() -> Self {
        Self {
            allocate: CallFailure::Never,
            allocate_error: DeviceError::OutOfDeviceMemory,
            live_byte_limit: None,
            map: CallFailure::Never,
        }
    }

    /// Allocate call number `n` fails; the others succeed.
    pub const fn fail_allocate_call(mut self, n: u64) -> Self {
        self.allocate = CallFailure::Once(n);
        self
    }

    /// Allocate call number `n` and all later ones fail.
    pub const fn fail_allocate_calls_from(mut self, n: u64) -> Self {
        self.allocate = CallFailure::From(n);
        self
    }

    /// The error injected allocate calls return (by default
    /// `OutOfDeviceMemory`).
    pub const fn allocate_error(mut self, error: DeviceError) -> Self {
        self.allocate_error = error;
        self
    }

    /// Allocations fail once the live bytes over all heaps would pass
    /// `total`.
    pub const fn fail_above_live_bytes(mut self, total: u64) -> Self {
        self.live_byte_limit = Some(total);
        self
    }

    /// Map call number `n` fails; the others succeed.
    pub const fn fail_map_call(mut self, n: u64) -> Self {
        self.map = CallFailure::Once(n);
        self
    }

    /// Map call number `n` and all later ones fail.
    pub const fn fail_map_calls_from(mut self, n: u64) -> Self {
        self.map = CallFailure::From(n);
        self
    }
}

/// A call that broke the [`MemoryDevice`] contract. A well-behaved allocator
/// causes none; [`SimDevice`] records them instead of panicking, so tests can
/// assert that there were none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Violation {
    /// `allocate_memory` with a type index out of range, a size of zero, or a
    /// size past `maxMemoryAllocationSize`.
    BadAllocateInfo(MemoryAllocateInfo),
    /// `free_memory` of a handle that was never allocated.
    FreeUnknown(DeviceMemory),
    /// `free_memory` of a handle freed before.
    DoubleFree(DeviceMemory),
    /// `free_memory` of memory that is still mapped.
    FreeWhileMapped(DeviceMemory),
    /// `map_memory` of memory that is not live.
    MapNotLive(DeviceMemory),
    /// `map_memory` of memory whose type is not `HOST_VISIBLE`.
    MapNotHostVisible(DeviceMemory),
    /// `map_memory` of memory that is mapped already.
    MapAlreadyMapped(DeviceMemory),
    /// `unmap_memory` of memory that is not live.
    UnmapNotLive(DeviceMemory),
    /// `unmap_memory` of memory that is not mapped.
    UnmapNotMapped(DeviceMemory),
    /// `destroy_resource` of a resource destroyed before.
    DestroyedTwice(DedicatedResource),
    /// `set_memory_priority` without `pageable_device_local_memory` in the
    /// limits, or of memory that is not live.
    SetPriority(DeviceMemory),
    /// `set_memory_name` without `debug_utils` in the limits, or of memory
    /// that is not live.
    SetName(DeviceMemory),
    /// A flush or invalidate range that is not live and mapped, lies outside
    /// its memory, or is not aligned to `nonCoherentAtomSize`.
    BadRange {
        /// The range as passed.
        range: MappedRange,
        /// What is wrong with it.
        problem: RangeProblem,
    },
}

/// What is wrong with a flush or invalidate range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeProblem {
    /// The memory is not live.
    NotLive,
    /// The memory is not mapped.
    NotMapped,
    /// The size is zero.
    Empty,
    /// The range reaches past the end of the memory.
    OutOfBounds,
    /// The offset is not a multiple of `nonCoherentAtomSize`.
    OffsetNotAligned,
    /// The size is not a multiple of `nonCoherentAtomSize` and the range does
    /// not reach the end of the memory.
    SizeNotAligned,
}

/// What the simulated device knows of one live memory object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimMemoryInfo {
    /// Bytes allocated.
    pub size: u64,
    /// The memory type index.
    pub memory_type: u32,
    /// The heap of that type.
    pub heap: u32,
    /// The resource the memory is dedicated to, if any.
    pub dedicated: Option<DedicatedTo>,
    /// Whether it is mapped now.
    pub mapped: bool,
    /// Its priority as a driver would see it: the one it was allocated with
    /// where `memory_priority` is in the limits (else `None`), or the last
    /// one set by `set_memory_priority`.
    pub priority: Option<MemoryPriority>,
}

/// One heap's figures in a [`SimStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimHeapStats {
    /// Bytes the heap can hold before allocations fail.
    pub capacity: u64,
    /// The budget [`MemoryDevice::heap_budgets`] reports.
    pub budget: u64,
    /// Bytes used by simulated other processes (counted against capacity and
    /// in the reported usage).
    pub external_usage: u64,
    /// Bytes of live memory objects.
    pub live_bytes: u64,
    /// The most live bytes there have ever been.
    pub peak_bytes: u64,
    /// Successful `allocate_memory` calls in this heap.
    pub allocate_calls: u64,
    /// Bytes of those calls, summed.
    pub allocated_bytes: u64,
    /// `free_memory` calls of this heap's objects.
    pub free_calls: u64,
    /// Bytes of those objects, summed.
    pub freed_bytes: u64,
}

/// A snapshot of a [`SimDevice`]'s counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// `allocate_memory` calls, failed ones included.
    pub allocate_calls: u64,
    /// `allocate_memory` calls that returned an error.
    pub failed_allocate_calls: u64,
    /// Bytes of the successful `allocate_memory` calls, summed (what a
    /// driver whose allocation cost grows with the size is paid for).
    pub allocated_bytes: u64,
    /// `free_memory` calls, bad ones included.
    pub free_calls: u64,
    /// `map_memory` calls, failed ones included.
    pub map_calls: u64,
    /// `unmap_memory` calls.
    pub unmap_calls: u64,
    /// `flush_ranges` calls.
    pub flush_calls: u64,
    /// `invalidate_ranges` calls.
    pub invalidate_calls: u64,
    /// Live memory objects.
    pub live_objects: u64,
    /// The most live memory objects there have ever been.
    pub peak_objects: u64,
    /// Contract violations recorded.
    pub violations: u64,
    /// Per heap.
    pub heaps: Vec<SimHeapStats>,
}

/// A simulated Vulkan device: a [`GpuTable`]'s heaps and types, capacity
/// limits, failure injection and contract checks, with host memory behind
/// mapped memory.
///
/// - Each heap holds up to its capacity (the heap's size unless set smaller,
///   so tests run out of memory quickly); an allocation past it fails with
///   `OutOfDeviceMemory`.
/// - At most `maxMemoryAllocationCount` objects live at once; one more fails
///   with `TooManyObjects`.
/// - A [`FailurePlan`] makes chosen calls fail.
/// - With `memory_budget` in the table's limits, [`MemoryDevice::heap_budgets`]
///   reports each heap's budget (its capacity unless set) and usage (live
///   bytes plus simulated external usage). Going over budget does not fail.
/// - Mapping hands out real host memory, allocated on the first map of each
///   object and kept until it is freed, so data written survives an unmap and
///   a later map. Unmapped objects never get host memory, so tables with
///   140 GiB heaps cost nothing.
/// - Contract breaches are counted as [`Violation`]s, never panics.
///
/// All methods take `&self`; the device is `Send + Sync`.
#[derive(Debug)]
pub struct SimDevice {
    name: String,
    props: MemoryProperties,
    limits: DeviceLimits,
    dedicated_image_threshold: Option<u64>,
    allocate_calls: AtomicU64,
    free_calls: AtomicU64,
    map_calls: AtomicU64,
    unmap_calls: AtomicU64,
    flush_calls: AtomicU64,
    invalidate_calls: AtomicU64,
    budget_calls: AtomicU64,
    /// The simulated monotonic clock ([`MemoryDevice::monotonic_ms`]):
    /// still unless [`SimDevice::advance_clock`] moves it.
    clock_ms: AtomicU64,
    state: Mutex<State>,
}

/// The mutable part of a [`SimDevice`].
#[derive(Debug)]
struct State {
    /// The next handle to hand out; handles are never reused.
    next_handle: u64,
    objects: HashMap<u64, Object>,
    heaps: Vec<HeapState>,
    live_total: u64,
    peak_objects: u64,
    failed_allocate_calls: u64,
    /// Bytes of the successful allocations, summed.
    allocated_bytes: u64,
    plan: FailurePlan,
    /// Allocate and map call counts when the plan was installed.
    plan_allocate_base: u64,
    plan_map_base: u64,
    violations: Vec<Violation>,
    /// Resources destroyed through `destroy_resource`, oldest first.
    destroyed: Vec<DedicatedResource>,
}

#[derive(Debug)]
struct HeapState {
    capacity: u64,
    budget: Option<u64>,
    external: u64,
    live: u64,
    peak: u64,
    allocate_calls: u64,
    allocated_bytes: u64,
    free_calls: u64,
    freed_bytes: u64,
}

#[derive(Debug)]
struct Object {
    info: MemoryAllocateInfo,
    heap: u32,
    mapped: bool,
    priority: Option<MemoryPriority>,
    /// Its debug name, once set.
    name: Option<String>,
    /// Host memory behind the mapping; empty until the first map.
    backing: Vec<u8>,
}

/// The first handle a [`SimDevice`] hands out. Handles start well above zero
/// so that a zero or small made-up handle is never mistaken for a live one.
const FIRST_HANDLE: u64 = 0x1000;

/// Sets up a [`SimDevice`]; from [`SimDevice::builder`].
#[derive(Clone, Debug)]
pub struct SimDeviceBuilder {
    table: GpuTable,
    capacities: Vec<Option<u64>>,
    budgets: Vec<Option<u64>>,
    plan: FailurePlan,
}

impl SimDeviceBuilder {
    /// Heap `heap` holds `bytes` at most (by default, its size).
    ///
    /// # Panics
    /// If the table has no heap `heap`.
    pub fn heap_capacity(mut self, heap: u32, bytes: u64) -> Self {
        *heap_slot(&mut self.capacities, heap) = Some(bytes);
        self
    }

    /// Heap `heap` reports a budget of `bytes` (by default, its capacity).
    ///
    /// # Panics
    /// If the table has no heap `heap`.
    pub fn heap_budget(mut self, heap: u32, bytes: u64) -> Self {
        *heap_slot(&mut self.budgets, heap) = Some(bytes);
        self
    }

    /// Whether the device says the instance has `VK_EXT_debug_utils`, so
    /// the allocator names its memory ([`SimDevice::memory_name`]).
    pub fn debug_utils(mut self, enabled: bool) -> Self {
        self.table.limits.debug_utils = enabled;
        self
    }

    /// Whether the device reports `VK_EXT_memory_priority` and
    /// `VK_EXT_pageable_device_local_memory` (the table says by default).
    pub fn memory_priority(mut self, memory_priority: bool, pageable: bool) -> Self {
        self.table.limits.memory_priority = memory_priority;
        self.table.limits.pageable_device_local_memory = pageable;
        self
    }

    /// Overrides `maxMemoryAllocationCount`, in the limits the device reports
    /// too, so tests reach the count limit quickly.
    pub fn max_memory_allocation_count(mut self, count: u32) -> Self {
        self.table.limits.max_memory_allocation_count = count;
        self
    }

    /// Overrides whether the device has `VK_EXT_memory_budget`.
    pub fn memory_budget(mut self, present: bool) -> Self {
        self.table.limits.memory_budget = present;
        self
    }

    /// Failures to inject, counting calls from the device's creation.
    pub fn failures(mut self, plan: FailurePlan) -> Self {
        self.plan = plan;
        self
    }

    /// The device.
    pub fn build(self) -> SimDevice {
        let heaps = self
            .table
            .memory_properties
            .heaps
            .iter()
            .zip(self.capacities.iter().zip(&self.budgets))
            .map(|(heap, (capacity, budget))| HeapState {
                capacity: capacity.unwrap_or(heap.size),
                budget: *budget,
                external: 0,
                live: 0,
                peak: 0,
                allocate_calls: 0,
                allocated_bytes: 0,
                free_calls: 0,
                freed_bytes: 0,
            })
            .collect();
        SimDevice {
            name: self.table.name,
            props: self.table.memory_properties,
            limits: self.table.limits,
            dedicated_image_threshold: self.table.dedicated_image_threshold,
            allocate_calls: AtomicU64::new(0),
            free_calls: AtomicU64::new(0),
            map_calls: AtomicU64::new(0),
            unmap_calls: AtomicU64::new(0),
            budget_calls: AtomicU64::new(0),
            clock_ms: AtomicU64::new(0),
            flush_calls: AtomicU64::new(0),
            invalidate_calls: AtomicU64::new(0),
            state: Mutex::new(State {
                next_handle: FIRST_HANDLE,
                objects: HashMap::new(),
                heaps,
                live_total: 0,
                peak_objects: 0,
                failed_allocate_calls: 0,
                allocated_bytes: 0,
                plan: self.plan,
                plan_allocate_base: 0,
                plan_map_base: 0,
                violations: Vec::new(),
                destroyed: Vec::new(),
            }),
        }
    }
}

/// The entry for heap `heap`, panicking with a clear message when there is
/// none.
fn heap_slot<T>(slots: &mut [T], heap: u32) -> &mut T {
    let count = slots.len();
    slots
        .get_mut(heap as usize)
        .unwrap_or_else(|| panic!("heap {heap} does not exist; the table has {count} heaps"))
}

impl SimDevice {
    /// A device with `table`'s figures, full capacity and no failures.
    ///
    /// # Panics
    /// If `table` fails [`GpuTable::validate`].
    pub fn new(table: GpuTable) -> Self {
        Self::builder(table).build()
    }

    /// A builder to set capacities, budgets and failures.
    ///
    /// # Panics
    /// If `table` fails [`GpuTable::validate`].
    pub fn builder(table: GpuTable) -> SimDeviceBuilder {
        if let Err(error) = table.validate() {
            panic!("cannot simulate an impossible device: {error}");
        }
        let heaps = table.memory_properties.heaps.len();
        SimDeviceBuilder {
            table,
            capacities: vec![None; heaps],
            budgets: vec![None; heaps],
            plan: FailurePlan::new(),
        }
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The image size from which the simulated driver prefers dedicated
    /// memory; see [`GpuTable::dedicated_image_threshold`].
    pub fn dedicated_image_threshold(&self) -> Option<u64> {
        self.dedicated_image_threshold
    }

    /// Whether the simulated driver would prefer dedicated memory for an image
    /// of `size` bytes.
    pub fn prefers_dedicated_image(&self, size: u64) -> bool {
        self.dedicated_image_threshold
            .is_some_and(|threshold| size >= threshold)
    }

    /// Installs a new failure plan; its calls count from now.
    pub fn set_failure_plan(&self, plan: FailurePlan) {
        let mut state = self.state.lock();
        state.plan = plan;
        state.plan_allocate_base = self.allocate_calls.load(Ordering::Relaxed);
        state.plan_map_base = self.map_calls.load(Ordering::Relaxed);
    }

    /// Sets heap `heap`'s capacity. Live objects stay even when they now pass
    /// it; new allocations fail until they fit again.
    ///
    /// # Panics
    /// If there is no heap `heap`.
    pub fn set_heap_capacity(&self, heap: u32, bytes: u64) {
        heap_slot(&mut self.state.lock().heaps, heap).capacity = bytes;
    }

    /// Moves the simulated clock ([`MemoryDevice::monotonic_ms`]) on by
    /// `ms` milliseconds: the device's time passes only here, so a test
    /// sees the allocator idle for exactly as long as it says.
    pub fn advance_clock(&self, ms: u64) {
        self.clock_ms.fetch_add(ms, Ordering::Relaxed);
    }

    /// Sets the budget heap `heap` reports; `None` reports its capacity.
    ///
    /// # Panics
    /// If there is no heap `heap`.
    pub fn set_heap_budget(&self, heap: u32, bytes: Option<u64>) {
        heap_slot(&mut self.state.lock().heaps, heap).budget = bytes;
    }

    /// Simulates other processes using `bytes` of heap `heap`: counted in the
    /// reported usage and against the capacity.
    ///
    /// # Panics
    /// If there is no heap `heap`.
    pub fn set_external_usage(&self, heap: u32, bytes: u64) {
        heap_slot(&mut self.state.lock().heaps, heap).external = bytes;
    }

    /// `allocate_memory` calls so far, failed ones included.
    pub fn allocate_calls(&self) -> u64 {
        self.allocate_calls.load(Ordering::Relaxed)
    }

    /// `allocate_memory` calls that returned an error.
    pub fn failed_allocate_calls(&self) -> u64 {
        self.state.lock().failed_allocate_calls
    }

    /// `heap_budgets` calls so far (`vkGetPhysicalDeviceMemoryProperties2`
    /// with `VK_EXT_memory_budget`: about 10 µs each on the H200's driver),
    /// on a device that reports budgets.
    pub fn budget_calls(&self) -> u64 {
        self.budget_calls.load(Ordering::Relaxed)
    }

    /// `free_memory` calls so far.
    pub fn free_calls(&self) -> u64 {
        self.free_calls.load(Ordering::Relaxed)
    }

    /// `map_memory` calls so far, failed ones included.
    pub fn map_calls(&self) -> u64 {
        self.map_calls.load(Ordering::Relaxed)
    }

    /// `unmap_memory` calls so far.
    pub fn unmap_calls(&self) -> u64 {
        self.unmap_calls.load(Ordering::Relaxed)
    }

    /// `flush_ranges` calls so far.
    pub fn flush_calls(&self) -> u64 {
        self.flush_calls.load(Ordering::Relaxed)
    }

    /// `invalidate_ranges` calls so far.
    pub fn invalidate_calls(&self) -> u64 {
        self.invalidate_calls.load(Ordering::Relaxed)
    }

    /// Live memory objects.
    pub fn live_objects(&self) -> u64 {
        self.state.lock().objects.len() as u64
    }

    /// The live memory objects, in allocation order: what a leak check looks
    /// at.
    pub fn live_memory(&self) -> Vec<DeviceMemory> {
        let mut live: Vec<_> = self
            .state
            .lock()
            .objects
            .keys()
            .map(|&h| DeviceMemory(h))
            .collect();
        live.sort_unstable();
        live
    }

    /// Bytes of live memory objects in heap `heap` (zero for a heap that
    /// does not exist).
    pub fn live_bytes(&self, heap: u32) -> u64 {
        self.state
            .lock()
            .heaps
            .get(heap as usize)
            .map_or(0, |h| h.live)
    }

    /// Bytes of live memory objects over all heaps.
    pub fn live_bytes_total(&self) -> u64 {
        self.state.lock().live_total
    }

    /// The most live bytes heap `heap` has held (zero for a heap that does
    /// not exist).
    pub fn peak_bytes(&self, heap: u32) -> u64 {
        self.state
            .lock()
            .heaps
            .get(heap as usize)
            .map_or(0, |h| h.peak)
    }

    /// What the device knows of `memory`, or `None` when it is not live.
    pub fn memory_info(&self, memory: DeviceMemory) -> Option<SimMemoryInfo> {
        self.state
            .lock()
            .objects
            .get(&memory.0)
            .map(|object| SimMemoryInfo {
                size: object.info.size,
                memory_type: object.info.memory_type,
                heap: object.heap,
                dedicated: object.info.dedicated,
                mapped: object.mapped,
                priority: object.priority,
            })
    }

    /// Contract violations so far; a well-behaved allocator leaves this at
    /// zero.
    pub fn violations(&self) -> u64 {
        self.state.lock().violations.len() as u64
    }

    /// The debug name of live memory object `memory`, if one was set
    /// ([`crate::names`]).
    pub fn memory_name(&self, memory: DeviceMemory) -> Option<String> {
        self.state
            .lock()
            .objects
            .get(&memory.0)
            .and_then(|o| o.name.clone())
    }

    /// The buffers and images destroyed through
    /// [`MemoryDevice::destroy_resource`] (a [`crate::FreeQueue`] retiring
    /// them), oldest first. The simulated device has no resources of its
    /// own: it records the handles it was asked to destroy.
    pub fn destroyed_resources(&self) -> Vec<DedicatedResource> {
        self.state.lock().destroyed.clone()
    }

    /// Every contract violation so far, oldest first.
    pub fn violation_log(&self) -> Vec<Violation> {
        self.state.lock().violations.clone()
    }

    /// A snapshot of every counter.
    pub fn stats(&self) -> SimStats {
        let state = self.state.lock();
        SimStats {
            allocate_calls: self.allocate_calls(),
            failed_allocate_calls: state.failed_allocate_calls,
            allocated_bytes: state.allocated_bytes,
            free_calls: self.free_calls(),
            map_calls: self.map_calls(),
            unmap_calls: self.unmap_calls(),
            flush_calls: self.flush_calls(),
            invalidate_calls: self.invalidate_calls(),
            live_objects: state.objects.len() as u64,
            peak_objects: state.peak_objects,
            violations: state.violations.len() as u64,
            heaps: state
                .heaps
                .iter()
                .map(|heap| SimHeapStats {
                    capacity: heap.capacity,
                    budget: heap.budget.unwrap_or(heap.capacity),
                    external_usage: heap.external,
                    live_bytes: heap.live,
                    peak_bytes: heap.peak,
                    allocate_calls: heap.allocate_calls,
                    allocated_bytes: heap.allocated_bytes,
                    free_calls: heap.free_calls,
                    freed_bytes: heap.freed_bytes,
                })
                .collect(),
        }
    }

    /// Checks flush or invalidate ranges, recording a violation for each bad
    /// one.
    fn check_ranges(&self, ranges: &[MappedRange]) {
        let atom = self.limits.non_coherent_atom_size.max(1);
        let mut state = self.state.lock();
        for range in ranges {
            let problem = match state.objects.get(&range.memory.0) {
                None => Some(RangeProblem::NotLive),
                Some(object) => {
                    let size = object.info.size;
                    let end = range.offset.checked_add(range.size);
                    if !object.mapped {
                        Some(RangeProblem::NotMapped)
                    } else if range.size == 0 {
                        Some(RangeProblem::Empty)
                    } else if !matches!(end, Some(end) if end <= size) {
                        Some(RangeProblem::OutOfBounds)
                    } else if range.offset % atom != 0 {
                        Some(RangeProblem::OffsetNotAligned)
                    } else if range.size % atom != 0 && end != Some(size) {
                        Some(RangeProblem::SizeNotAligned)
                    } else {
                        None
                    }
                }
            };
            if let Some(problem) = problem {
                state.violate(Violation::BadRange {
                    range: *range,
                    problem,
                });
            }
        }
    }
}

impl State {
    fn violate(&mut self, violation: Violation) {
        log::warn!("simulated device: contract violation: {violation:?}");
        self.violations.push(violation);
    }

    fn fail_allocate(&mut self, error: DeviceError) -> Result<DeviceMemory, DeviceError> {
        self.failed_allocate_calls += 1;
        Err(error)
    }
}

/// A simulated device dropped with memory still mapped leaves that memory's
/// host bytes in place (leaked), as `vkUnmapMemory` was never called for
/// it: a mapping that outlives the allocator (an allocation leaked while
/// mapped, whose block the allocator keeps) stays valid however the device
/// was owned ([`MemoryDevice`]'s contract).
impl Drop for SimDevice {
    fn drop(&mut self) {
        let state = self.state.get_mut();
        for object in state.objects.values_mut() {
            if object.mapped {
                std::mem::forget(std::mem::take(&mut object.backing));
            }
        }
    }
}

// SAFETY: the properties and limits are fixed at build; each object gets
// host memory of its own size at its first map (`zeroed_backing`), which
// moves only when the object is freed and is leaked where the device is
// dropped with the object still mapped (`Drop` above); allocations never
// share an object.
unsafe impl MemoryDevice for SimDevice {
    fn memory_properties(&self) -> &MemoryProperties {
        &self.props
    }

    fn limits(&self) -> &DeviceLimits {
        &self.limits
    }

    fn monotonic_ms(&self) -> u64 {
        self.clock_ms.load(Ordering::Relaxed)
    }

    fn heap_budgets(&self, out: &mut [HeapBudget]) -> bool {
        if !self.limits.memory_budget {
            return false;
        }
        self.budget_calls.fetch_add(1, Ordering::Relaxed);
        let state = self.state.lock();
        for (slot, heap) in out.iter_mut().zip(&state.heaps) {
            *slot = HeapBudget {
                budget: heap.budget.unwrap_or(heap.capacity),
                usage: heap.live.saturating_add(heap.external),
            };
        }
        true
    }

    unsafe fn allocate_memory(
        &self,
        info: &MemoryAllocateInfo,
    ) -> Result<DeviceMemory, DeviceError> {
        let call = self.allocate_calls.fetch_add(1, Ordering::Relaxed) + 1;
        let mut state = self.state.lock();
        let Some(ty) = self.props.types.get(info.memory_type as usize) else {
            state.violate(Violation::BadAllocateInfo(*info));
            return state.fail_allocate(DeviceError::Other(VK_ERROR_UNKNOWN));
        };
        if info.size == 0 || info.size > self.limits.max_memory_allocation_size {
            state.violate(Violation::BadAllocateInfo(*info));
            return state.fail_allocate(DeviceError::Other(VK_ERROR_UNKNOWN));
        }
        if state.plan.allocate.fails(call - state.plan_allocate_base) {
            let error = state.plan.allocate_error;
            return state.fail_allocate(error);
        }
        if state.objects.len() as u64 >= u64::from(self.limits.max_memory_allocation_count) {
            return state.fail_allocate(DeviceError::TooManyObjects);
        }
        let heap_index = ty.heap_index;
        let heap = &state.heaps[heap_index as usize];
        let heap_after = heap
            .live
            .saturating_add(heap.external)
            .saturating_add(info.size);
        if heap_after > heap.capacity {
            return state.fail_allocate(DeviceError::OutOfDeviceMemory);
        }
        let total_after = state.live_total.saturating_add(info.size);
        if state
            .plan
            .live_byte_limit
            .is_some_and(|limit| total_after > limit)
        {
            return state.fail_allocate(DeviceError::OutOfDeviceMemory);
        }

        let handle = state.next_handle;
        state.next_handle += 1;
        state.objects.insert(
            handle,
            Object {
                info: *info,
                heap: heap_index,
                mapped: false,
                priority: info.priority.filter(|_| self.limits.memory_priority),
                name: None,
                backing: Vec::new(),
            },
        );
        state.live_total = total_after;
        state.allocated_bytes = state.allocated_bytes.saturating_add(info.size);
        state.peak_objects = state.peak_objects.max(state.objects.len() as u64);
        let heap = &mut state.heaps[heap_index as usize];
        heap.live += info.size;
        heap.peak = heap.peak.max(heap.live);
        heap.allocate_calls += 1;
        heap.allocated_bytes = heap.allocated_bytes.saturating_add(info.size);
        Ok(DeviceMemory(handle))
    }

    unsafe fn free_memory(&self, memory: DeviceMemory) {
        self.free_calls.fetch_add(1, Ordering::Relaxed);
        let mut state = self.state.lock();
        let Some(object) = state.objects.remove(&memory.0) else {
            let violation = if (FIRST_HANDLE..state.next_handle).contains(&memory.0) {
                Violation::DoubleFree(memory)
            } else {
                Violation::FreeUnknown(memory)
            };
            state.violate(violation);
            return;
        };
        if object.mapped {
            state.violate(Violation::FreeWhileMapped(memory));
        }
        state.live_total -= object.info.size;
        let heap = &mut state.heaps[object.heap as usize];
        heap.live -= object.info.size;
        heap.free_calls += 1;
        heap.freed_bytes = heap.freed_bytes.saturating_add(object.info.size);
    }

    unsafe fn map_memory(&self, memory: DeviceMemory) -> Result<NonNull<u8>, DeviceError> {
        let call = self.map_calls.fetch_add(1, Ordering::Relaxed) + 1;
        let mut state = self.state.lock();
        let violation = match state.objects.get(&memory.0) {
            None => Some(Violation::MapNotLive(memory)),
            Some(object) => {
                let flags = self.props.types[object.info.memory_type as usize].flags;
                if !flags.contains(MemoryPropertyFlags::HOST_VISIBLE) {
                    Some(Violation::MapNotHostVisible(memory))
                } else if object.mapped {
                    Some(Violation::MapAlreadyMapped(memory))
                } else {
                    None
                }
            }
        };
        if let Some(violation) = violation {
            state.violate(violation);
            return Err(DeviceError::MemoryMapFailed);
        }
        if state.plan.map.fails(call - state.plan_map_base) {
            return Err(DeviceError::MemoryMapFailed);
        }
        let object = state
            .objects
            .get_mut(&memory.0)
            .expect("the object was found above under the same lock");
        if object.backing.is_empty() && object.info.size > 0 {
            let size =
                usize::try_from(object.info.size).map_err(|_| DeviceError::OutOfHostMemory)?;
            object.backing = zeroed_backing(size).ok_or(DeviceError::MemoryMapFailed)?;
        }
        // `Vec::as_mut_ptr` creates no reference to the contents, so the
        // pointer stays valid across later `as_mut_ptr` calls and moves of
        // the `Vec` (its buffer does not move) until the object is freed.
        let pointer =
            NonNull::new(object.backing.as_mut_ptr()).ok_or(DeviceError::MemoryMapFailed)?;
        object.mapped = true;
        Ok(pointer)
    }

    unsafe fn unmap_memory(&self, memory: DeviceMemory) {
        self.unmap_calls.fetch_add(1, Ordering::Relaxed);
        let mut state = self.state.lock();
        match state.objects.get_mut(&memory.0) {
            None => state.violate(Violation::UnmapNotLive(memory)),
            Some(object) if !object.mapped => state.violate(Violation::UnmapNotMapped(memory)),
            Some(object) => object.mapped = false,
        }
    }

    unsafe fn flush_ranges(&self, ranges: &[MappedRange]) -> Result<(), DeviceError> {
        self.flush_calls.fetch_add(1, Ordering::Relaxed);
        self.check_ranges(ranges);
        Ok(())
    }

    unsafe fn invalidate_ranges(&self, ranges: &[MappedRange]) -> Result<(), DeviceError> {
        self.invalidate_calls.fetch_add(1, Ordering::Relaxed);
        self.check_ranges(ranges);
        Ok(())
    }

    unsafe fn set_memory_priority(&self, memory: DeviceMemory, priority: MemoryPriority) {
        let enabled = self.limits.pageable_device_local_memory;
        let mut state = self.state.lock();
        match state.objects.get_mut(&memory.0) {
            Some(object) if enabled => object.priority = Some(priority),
            _ => state.violate(Violation::SetPriority(memory)),
        }
    }

    unsafe fn set_memory_name(&self, memory: DeviceMemory, name: &str) {
        let enabled = self.limits.debug_utils;
        let mut state = self.state.lock();
        match state.objects.get_mut(&memory.0) {
            Some(object) if enabled => object.name = Some(name.to_owned()),
            _ => state.violate(Violation::SetName(memory)),
        }
    }

    unsafe fn destroy_resource(&self, resource: DedicatedResource) {
        let mut state = self.state.lock();
        if state.destroyed.contains(&resource) {
            state.violate(Violation::DestroyedTwice(resource));
        } else {
            state.destroyed.push(resource);
        }
    }
}

/// `size` zeroed bytes of host memory, or `None` when the host can't give
/// them (a huge simulated heap mapped at once): the map then fails as a
/// driver's would, instead of aborting the process. The operating system
/// hands out zero pages lazily, so only the pages a test touches cost memory.
fn zeroed_backing(size: usize) -> Option<Vec<u8>> {
    let layout = std::alloc::Layout::array::<u8>(size).ok()?;
    if layout.size() == 0 {
        return Some(Vec::new());
    }
    // SAFETY: the layout has a non-zero size (checked above).
    let pointer = unsafe { std::alloc::alloc_zeroed(layout) };
    if pointer.is_null() {
        return None;
    }
    // SAFETY: `pointer` was allocated by the global allocator with the layout
    // of `size` bytes of alignment 1 (a `Vec<u8>`'s own), and all `size`
    // bytes are initialised (zeroed).
    Some(unsafe { Vec::from_raw_parts(pointer, size, size) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::tables;

    const MIB: u64 = 1 << 20;

    fn info(memory_type: u32, size: u64) -> MemoryAllocateInfo {
        MemoryAllocateInfo {
            size,
            memory_type,
            dedicated: None,
            priority: None,
            export: Default::default(),
            import_fd: None,
        }
    }

    /// Allocates through the seam. The simulated device checks every part of
    /// the contract itself, so breaking it only records a violation.
    fn alloc(device: &SimDevice, memory_type: u32, size: u64) -> Result<DeviceMemory, DeviceError> {
        // SAFETY: `SimDevice` validates the call and records violations
        // instead of relying on the contract.
        unsafe { device.allocate_memory(&info(memory_type, size)) }
    }

    fn free(device: &SimDevice, memory: DeviceMemory) {
        // SAFETY: as in `alloc`; nothing is mapped by these tests when they
        // free, unless they test that violation.
        unsafe { device.free_memory(memory) }
    }

    fn map(device: &SimDevice, memory: DeviceMemory) -> Result<NonNull<u8>, DeviceError> {
        // SAFETY: as in `alloc`.
        unsafe { device.map_memory(memory) }
    }

    fn unmap(device: &SimDevice, memory: DeviceMemory) {
        // SAFETY: as in `alloc`; the tests drop their pointers before.
        unsafe { device.unmap_memory(memory) }
    }

    fn range(memory: DeviceMemory, offset: u64, size: u64) -> MappedRange {
        MappedRange {
            memory,
            offset,
            size,
        }
    }

    #[test]
    fn send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<SimDevice>();
    }

    #[test]
    fn allocates_and_frees_with_counters() {
        let device = SimDevice::new(tables::nvidia_h200());
        let a = alloc(&device, 1, 64 * MIB).unwrap();
        let b = alloc(&device, 4, 16 * MIB).unwrap();
        let c = alloc(&device, 2, MIB).unwrap();
        assert_ne!(a, b);
        assert_eq!(device.live_objects(), 3);
        assert_eq!(device.live_bytes(0), 80 * MIB);
        assert_eq!(device.live_bytes(1), MIB);
        assert_eq!(device.live_bytes_total(), 81 * MIB);
        assert_eq!(
            device.memory_info(b),
            Some(SimMemoryInfo {
                size: 16 * MIB,
                memory_type: 4,
                heap: 0,
                dedicated: None,
                mapped: false,
                priority: None,
            })
        );
        free(&device, a);
        assert_eq!(device.live_bytes(0), 16 * MIB);
        assert_eq!(device.peak_bytes(0), 80 * MIB);
        assert_eq!(device.live_memory(), vec![b, c]);
        free(&device, b);
        free(&device, c);
        let stats = device.stats();
        assert_eq!(stats.allocate_calls, 3);
        assert_eq!(stats.allocated_bytes, 81 * MIB);
        assert_eq!(stats.free_calls, 3);
        assert_eq!(stats.live_objects, 0);
        assert_eq!(stats.peak_objects, 3);
        assert_eq!(stats.heaps[0].peak_bytes, 80 * MIB);
        assert_eq!(stats.violations, 0);
        assert_eq!(device.memory_info(a), None);
    }

    #[test]
    fn capacity_runs_out() {
        let device = SimDevice::builder(tables::nvidia_discrete())
            .heap_capacity(0, 10 * MIB)
            .build();
        let a = alloc(&device, 1, 6 * MIB).unwrap();
        assert_eq!(
            alloc(&device, 1, 5 * MIB),
            Err(DeviceError::OutOfDeviceMemory)
        );
        // Other heaps are unaffected, and exactly filling the heap works.
        alloc(&device, 2, 5 * MIB).unwrap();
        let b = alloc(&device, 1, 4 * MIB).unwrap();
        assert_eq!(alloc(&device, 1, 1), Err(DeviceError::OutOfDeviceMemory));
        free(&device, a);
        alloc(&device, 1, 6 * MIB).unwrap();
        assert_eq!(device.failed_allocate_calls(), 2);
        // Simulated other processes take room too.
        free(&device, b);
        device.set_external_usage(0, 3 * MIB);
        assert_eq!(
            alloc(&device, 1, 2 * MIB),
            Err(DeviceError::OutOfDeviceMemory)
        );
        alloc(&device, 1, MIB).unwrap();
        device.set_heap_capacity(0, 100 * MIB);
        alloc(&device, 1, 50 * MIB).unwrap();
        assert_eq!(device.violations(), 0);
    }

    #[test]
    fn huge_heaps_cost_nothing_until_mapped() {
        // 128 GiB in objects of 2 GiB (under the driver's 4 GiB - 2 MiB cap).
        let device = SimDevice::new(tables::nvidia_h200());
        let mut held = Vec::new();
        for _ in 0..64 {
            held.push(alloc(&device, 1, 2 << 30).unwrap());
        }
        assert_eq!(device.live_bytes(0), 128 << 30);
        // The heap has 143,771 MiB: six more fit, the seventh does not.
        for _ in 0..6 {
            held.push(alloc(&device, 1, 2 << 30).unwrap());
        }
        assert_eq!(
            alloc(&device, 1, 2 << 30),
            Err(DeviceError::OutOfDeviceMemory)
        );
        for memory in held {
            free(&device, memory);
        }
    }

    #[test]
    fn nth_allocate_call_fails_once() {
        let device = SimDevice::builder(tables::lavapipe())
            .failures(FailurePlan::new().fail_allocate_call(2))
            .build();
        assert!(alloc(&device, 0, MIB).is_ok());
        assert_eq!(alloc(&device, 0, MIB), Err(DeviceError::OutOfDeviceMemory));
        assert!(alloc(&device, 0, MIB).is_ok());
        assert!(alloc(&device, 0, MIB).is_ok());
        assert_eq!(device.failed_allocate_calls(), 1);
    }

    #[test]
    fn allocate_calls_fail_from_n_on_with_the_chosen_error() {
        let device = SimDevice::new(tables::amd_discrete());
        alloc(&device, 0, MIB).unwrap();
        // Counting restarts when a plan is installed.
        device.set_failure_plan(
            FailurePlan::new()
                .fail_allocate_calls_from(3)
                .allocate_error(DeviceError::OutOfHostMemory),
        );
        assert!(alloc(&device, 0, MIB).is_ok());
        assert!(alloc(&device, 0, MIB).is_ok());
        for _ in 0..5 {
            assert_eq!(alloc(&device, 0, MIB), Err(DeviceError::OutOfHostMemory));
        }
        device.set_failure_plan(FailurePlan::new());
        assert!(alloc(&device, 0, MIB).is_ok());
        assert_eq!(device.allocate_calls(), 9);
    }

    #[test]
    fn live_byte_total_fails() {
        let device = SimDevice::builder(tables::nvidia_discrete())
            .failures(FailurePlan::new().fail_above_live_bytes(10 * MIB))
            .build();
        let a = alloc(&device, 1, 6 * MIB).unwrap();
        // The total spans heaps.
        assert_eq!(
            alloc(&device, 2, 5 * MIB),
            Err(DeviceError::OutOfDeviceMemory)
        );
        alloc(&device, 2, 4 * MIB).unwrap();
        assert_eq!(alloc(&device, 3, 1), Err(DeviceError::OutOfDeviceMemory));
        free(&device, a);
        alloc(&device, 3, 6 * MIB).unwrap();
    }

    #[test]
    fn object_count_is_limited() {
        let device = SimDevice::builder(tables::nvidia_discrete())
            .max_memory_allocation_count(3)
            .build();
        assert_eq!(device.limits().max_memory_allocation_count, 3);
        let held: Vec<_> = (0..3).map(|_| alloc(&device, 1, MIB).unwrap()).collect();
        assert_eq!(alloc(&device, 1, MIB), Err(DeviceError::TooManyObjects));
        free(&device, held[1]);
        alloc(&device, 2, MIB).unwrap();
        assert_eq!(alloc(&device, 2, MIB), Err(DeviceError::TooManyObjects));
    }

    #[test]
    fn map_write_unmap_map_read() {
        let device = SimDevice::new(tables::nvidia_discrete());
        let memory = alloc(&device, 3, 4096).unwrap();
        let pointer = map(&device, memory).unwrap();
        // SAFETY: the mapping is 4096 bytes of host memory owned by the
        // device, live until `memory` is freed, and nothing else touches it.
        let bytes = unsafe { std::slice::from_raw_parts_mut(pointer.as_ptr(), 4096) };
        assert!(bytes.iter().all(|&b| b == 0));
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = (i % 251) as u8;
        }
        unmap(&device, memory);
        assert_eq!(device.memory_info(memory).map(|m| m.mapped), Some(false));
        let again = map(&device, memory).unwrap();
        assert_eq!(again, pointer, "the backing stays where it was");
        // SAFETY: as above; the earlier slice is no longer used.
        let bytes = unsafe { std::slice::from_raw_parts(again.as_ptr(), 4096) };
        assert!(bytes.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
        unmap(&device, memory);
        free(&device, memory);
        assert_eq!(device.map_calls(), 2);
        assert_eq!(device.unmap_calls(), 2);
        assert_eq!(device.violations(), 0);
    }

    #[test]
    fn mappings_of_different_objects_are_separate() {
        let device = SimDevice::new(tables::lavapipe());
        let a = alloc(&device, 0, 256).unwrap();
        let b = alloc(&device, 0, 256).unwrap();
        let pa = map(&device, a).unwrap();
        let pb = map(&device, b).unwrap();
        // SAFETY: two live 256-byte mappings, each used through one slice.
        let (sa, sb) = unsafe {
            (
                std::slice::from_raw_parts_mut(pa.as_ptr(), 256),
                std::slice::from_raw_parts_mut(pb.as_ptr(), 256),
            )
        };
        sa.fill(0xaa);
        sb.fill(0x55);
        assert!(sa.iter().all(|&x| x == 0xaa));
        assert!(sb.iter().all(|&x| x == 0x55));
        unmap(&device, a);
        unmap(&device, b);
        free(&device, a);
        free(&device, b);
        assert_eq!(device.violations(), 0);
    }

    #[test]
    fn injected_map_failures() {
        let device = SimDevice::builder(tables::lavapipe())
            .failures(FailurePlan::new().fail_map_call(2))
            .build();
        let memory = alloc(&device, 0, 64).unwrap();
        map(&device, memory).unwrap();
        unmap(&device, memory);
        assert_eq!(map(&device, memory), Err(DeviceError::MemoryMapFailed));
        assert_eq!(device.memory_info(memory).map(|m| m.mapped), Some(false));
        map(&device, memory).unwrap();
        unmap(&device, memory);
        device.set_failure_plan(FailurePlan::new().fail_map_calls_from(1));
        assert_eq!(map(&device, memory), Err(DeviceError::MemoryMapFailed));
        assert_eq!(map(&device, memory), Err(DeviceError::MemoryMapFailed));
        free(&device, memory);
        // Injected failures are not violations.
        assert_eq!(device.violations(), 0);
    }

    #[test]
    fn contract_violations_are_counted() {
        let device = SimDevice::new(tables::nvidia_discrete());
        let local = alloc(&device, 1, 4096).unwrap();
        let host = alloc(&device, 2, 4096).unwrap();

        assert_eq!(map(&device, local), Err(DeviceError::MemoryMapFailed));
        map(&device, host).unwrap();
        assert_eq!(map(&device, host), Err(DeviceError::MemoryMapFailed));
        unmap(&device, local);
        free(&device, host); // Still mapped.
        free(&device, host); // Twice.
        free(&device, DeviceMemory(7)); // Never allocated.
        unmap(&device, host); // Not live.
        assert_eq!(map(&device, host), Err(DeviceError::MemoryMapFailed));
        assert_eq!(
            alloc(&device, 9, 64),
            Err(DeviceError::Other(VK_ERROR_UNKNOWN))
        );
        assert_eq!(
            alloc(&device, 1, 0),
            Err(DeviceError::Other(VK_ERROR_UNKNOWN))
        );

        assert_eq!(
            device.violation_log(),
            vec![
                Violation::MapNotHostVisible(local),
                Violation::MapAlreadyMapped(host),
                Violation::UnmapNotMapped(local),
                Violation::FreeWhileMapped(host),
                Violation::DoubleFree(host),
                Violation::FreeUnknown(DeviceMemory(7)),
                Violation::UnmapNotLive(host),
                Violation::MapNotLive(host),
                Violation::BadAllocateInfo(info(9, 64)),
                Violation::BadAllocateInfo(info(1, 0)),
            ]
        );
        assert_eq!(device.violations(), 10);
        // The freed-while-mapped object is gone all the same.
        assert_eq!(device.live_objects(), 1);
        assert_eq!(device.live_bytes(1), 0);
    }

    #[test]
    fn flush_and_invalidate_ranges_are_checked() {
        // nonCoherentAtomSize is 64 on lavapipe.
        let device = SimDevice::new(tables::lavapipe());
        let memory = alloc(&device, 0, 1000).unwrap();
        let unmapped = alloc(&device, 0, 1000).unwrap();
        map(&device, memory).unwrap();
        let good = [
            range(memory, 0, 64),
            range(memory, 128, 256),
            range(memory, 960, 40), // Reaches the end.
            range(memory, 0, 1000),
        ];
        // SAFETY: the simulated device checks the ranges itself.
        unsafe {
            device.flush_ranges(&good).unwrap();
            device.invalidate_ranges(&good).unwrap();
        }
        assert_eq!(device.violations(), 0);
        let bad = [
            range(memory, 32, 64),
            range(memory, 0, 100),
            range(memory, 960, 64),
            range(memory, 64, 0),
            range(memory, u64::MAX - 63, 64),
            range(unmapped, 0, 64),
            range(DeviceMemory(1), 0, 64),
        ];
        // SAFETY: as above.
        unsafe { device.flush_ranges(&bad).unwrap() };
        let problems: Vec<_> = device
            .violation_log()
            .into_iter()
            .map(|violation| match violation {
                Violation::BadRange { problem, .. } => problem,
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            problems,
            vec![
                RangeProblem::OffsetNotAligned,
                RangeProblem::SizeNotAligned,
                RangeProblem::OutOfBounds,
                RangeProblem::Empty,
                RangeProblem::OutOfBounds,
                RangeProblem::NotMapped,
                RangeProblem::NotLive,
            ]
        );
        assert_eq!(device.flush_calls(), 2);
        assert_eq!(device.invalidate_calls(), 1);
    }

    #[test]
    fn budgets_follow_the_table() {
        let device = SimDevice::builder(tables::nvidia_discrete_rebar())
            .heap_budget(0, 8 << 30)
            .build();
        let memory = alloc(&device, 1, 100 * MIB).unwrap();
        device.set_external_usage(1, MIB);
        let mut budgets = [HeapBudget::default(); 3];
        assert!(device.heap_budgets(&mut budgets));
        assert_eq!(
            budgets,
            [
                HeapBudget {
                    budget: 8 << 30,
                    usage: 100 * MIB
                },
                HeapBudget {
                    budget: 16 << 30,
                    usage: MIB
                },
                HeapBudget::default(),
            ]
        );
        // Going over budget does not fail; only capacity does.
        device.set_heap_budget(0, Some(MIB));
        alloc(&device, 1, 100 * MIB).unwrap();
        device.set_heap_budget(0, None);
        assert!(device.heap_budgets(&mut budgets[..1]));
        assert_eq!(budgets[0].budget, 10 << 30);
        assert_eq!(budgets[0].usage, 200 * MIB);
        free(&device, memory);

        // lavapipe has no VK_EXT_memory_budget: nothing is written.
        let lavapipe = SimDevice::new(tables::lavapipe());
        let mut untouched = [HeapBudget {
            budget: 1,
            usage: 2,
        }];
        assert!(!lavapipe.heap_budgets(&mut untouched));
        assert_eq!(
            untouched,
            [HeapBudget {
                budget: 1,
                usage: 2
            }]
        );
        let with = SimDevice::builder(tables::lavapipe())
            .memory_budget(true)
            .build();
        assert!(with.heap_budgets(&mut untouched));
        assert_eq!(untouched[0].budget, 2 << 30);
    }

    #[test]
    fn dedicated_preference_follows_the_table() {
        let h200 = SimDevice::new(tables::nvidia_h200());
        assert!(h200.prefers_dedicated_image(64 * MIB));
        assert!(!h200.prefers_dedicated_image(MIB));
        assert!(!SimDevice::new(tables::amd_discrete()).prefers_dedicated_image(u64::MAX));
        // SAFETY: the simulated device never dereferences the handle.
        let image = unsafe { DedicatedTo::new(DedicatedResource::Image(42)) };
        let dedicated = MemoryAllocateInfo {
            size: 64 * MIB,
            memory_type: 1,
            dedicated: Some(image),
            priority: None,
            export: Default::default(),
            import_fd: None,
        };
        // SAFETY: the simulated device checks the call itself.
        let memory = unsafe { h200.allocate_memory(&dedicated) }.unwrap();
        assert_eq!(h200.memory_info(memory).unwrap().dedicated, Some(image));
    }

    #[test]
    #[should_panic(expected = "heap 5 does not exist")]
    fn builder_rejects_missing_heaps() {
        let _ = SimDevice::builder(tables::lavapipe()).heap_capacity(5, MIB);
    }

    #[test]
    #[should_panic(expected = "impossible device")]
    fn impossible_tables_are_refused() {
        let mut table = tables::lavapipe();
        table.memory_properties.types[0].heap_index = 1;
        let _ = SimDevice::new(table);
    }

    #[test]
    fn threads_allocate_concurrently() {
        let device = SimDevice::builder(tables::nvidia_h200())
            .heap_capacity(0, 1000 * MIB)
            .build();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..100 {
                        let memory = alloc(&device, 1, MIB).unwrap();
                        let host = alloc(&device, 3, 4096).unwrap();
                        let pointer = map(&device, host).unwrap();
                        // SAFETY: this thread's own live 4096-byte mapping.
                        unsafe { pointer.as_ptr().write_bytes(0x5a, 4096) };
                        unmap(&device, host);
                        free(&device, host);
                        free(&device, memory);
                    }
                });
            }
        });
        let stats = device.stats();
        assert_eq!(stats.allocate_calls, 800);
        assert_eq!(stats.free_calls, 800);
        assert_eq!(stats.live_objects, 0);
        assert!(stats.heaps[0].peak_bytes <= 4 * MIB);
        assert_eq!(stats.violations, 0);
    }
}
