//! The whole `Allocator` on the simulated device: a GPU table picked by the
//! input, fuzzed heap capacities, budgets, object limits and injected
//! failures, then a sequence of allocations (every usage preset, pools,
//! dedicated policies, mapped memory with writes and reads, sizes near
//! `u64::MAX`, odd alignments), frees (also into a second allocator), pool
//! resets, trims and statistics.
//!
//! After every operation: `validate()` holds, the simulated device saw no
//! contract violation, no two live allocations overlap in one memory object,
//! the cheap counters match the live allocations (in total and per pool),
//! and every byte written to mapped memory reads back. Errors are fine;
//! panics, overflows and sanitizer reports are findings.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use crate::handle::{kind, small_runs_from, Handle};
use crate::interpreter::{self, Target};
use crate::ops::{self, Alloc, Ranges, Sim};
use arbitrary::Arbitrary;
use vkalloc::device::{DedicatedResource, DedicatedTo, DeviceError, MemoryPropertyFlags};
use vkalloc::select::TypeFlags;
use vkalloc::sim::{self, FailurePlan, GpuTable, SimDevice};
use vkalloc::{
    Allocation, AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, DedicatedPolicy,
    DriverDedicated, Error, LinearMode, MappedAllocation, MemoryUsage, PoolAlgorithm, PoolDesc,
    PoolId,
};

// ---- The allocator's API, in one place --------------------------------------
//
// Every call into `Allocator` goes through these helpers, so a change of the
// public API is an edit here.

fn new_allocator(sim: &Sim, desc: AllocatorDesc) -> Result<Alloc, Error> {
    Allocator::new(Arc::clone(sim), desc)
}

/// A request with the resource named for a dedicated allocation.
fn request<'a>(
    mut desc: AllocationDesc<'a>,
    dedicated_to: Option<DedicatedTo>,
) -> AllocationDesc<'a> {
    desc.dedicated_to = dedicated_to;
    desc
}

fn allocate(allocator: &Alloc, desc: &AllocationDesc<'_>) -> Result<Allocation, Error> {
    allocator.allocate(desc)
}

fn allocate_mapped(
    allocator: &Alloc,
    desc: &AllocationDesc<'_>,
) -> Result<MappedAllocation, Error> {
    allocator.allocate_mapped(desc)
}

/// Frees; on an error, the allocation comes back.
#[allow(clippy::result_large_err)]
fn free(allocator: &Alloc, allocation: Allocation) -> Result<(), (Error, Option<Allocation>)> {
    allocator.free(allocation).map_err(|e| {
        let (error, allocation) = e.into_parts();
        (error, Some(allocation))
    })
}

fn create_pool(allocator: &Alloc, desc: &PoolDesc) -> Result<PoolId, Error> {
    allocator.create_pool(desc)
}

fn destroy_pool(allocator: &Alloc, id: PoolId) -> Result<(), Error> {
    allocator.destroy_pool(id)
}

/// Resets a pool. The target never touches the memory of an allocation
/// freed by the reset again, other than passing its handle to `free`.
fn reset_pool(allocator: &Alloc, id: PoolId) -> Result<(), Error> {
    // SAFETY: the target never reads or writes through a handle the reset
    // freed; it only passes it to `free`.
    unsafe { allocator.reset_pool(id) }
}

fn flush(allocator: &Alloc, a: &MappedAllocation, offset: u64, size: u64) -> Result<(), Error> {
    allocator.flush(a, offset, size)
}

fn invalidate(
    allocator: &Alloc,
    a: &MappedAllocation,
    offset: u64,
    size: u64,
) -> Result<(), Error> {
    allocator.invalidate(a, offset, size)
}

// ---- The input ---------------------------------------------------------------

const MIB: u64 = 1 << 20;
/// Heaps are capped at this many bytes, so that mapped memory (real host
/// memory in the simulated device) stays small.
const HEAP_CAP: u64 = 1 << 30;
/// Bytes one write or read moves at most.
const MAX_IO: usize = 64;

/// Kept inputs away from the findings listed in
/// `allocator/tests/fuzz_findings.rs` while they were open; they are fixed,
/// so the target now goes through them.
const AVOID_KNOWN_FINDINGS: bool = false;

/// The target's input: a setup, then its operations (as the interpreter's
/// input, which it decodes the same as).
#[derive(Arbitrary, Debug)]
pub struct Input(interpreter::Input<Setup, Op>);

/// What the allocators and the simulated device start from.
#[derive(Arbitrary, Debug)]
struct Setup {
    /// Index into `sim::all_tables()`, modulo their number.
    table: u8,
    /// Per heap: capacity in 16 MiB steps (modulo 64, plus 1); the heap's
    /// size if smaller. Heaps past the list get `HEAP_CAP`.
    heap_capacity: Vec<u8>,
    max_objects: Option<u8>,
    memory_budget: Option<bool>,
    /// Memory types (by bit) that lose `HOST_COHERENT`: none of the tables
    /// has a non-coherent type.
    non_coherent: u32,
    failures: Failures,
    desc: Desc,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct Failures {
    allocate: Option<(bool, u8)>,
    error: u8,
    live_bytes: Option<u32>,
    map: Option<(bool, u8)>,
}

impl Failures {
    fn plan(self) -> FailurePlan {
        let mut plan = FailurePlan::new();
        plan = match self.allocate {
            Some((true, n)) => plan.fail_allocate_calls_from(n.into()),
            Some((false, n)) => plan.fail_allocate_call(n.into()),
            None => plan,
        };
        plan = plan.allocate_error(match self.error % 4 {
            0 => DeviceError::OutOfDeviceMemory,
            1 => DeviceError::OutOfHostMemory,
            2 => DeviceError::TooManyObjects,
            _ => DeviceError::Other(-13),
        });
        if let Some(bytes) = self.live_bytes {
            plan = plan.fail_above_live_bytes(u64::from(bytes) << 8);
        }
        match self.map {
            Some((true, n)) => plan.fail_map_calls_from(n.into()),
            Some((false, n)) => plan.fail_map_call(n.into()),
            None => plan,
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Desc {
    block_size: Bytes,
    honour_dedicated_from: Bytes,
    keep_empty_blocks: u8,
    debug_margin: Margin,
    recycle_bytes: Bytes,
    /// Picks `small_runs_from`: runs of slots from the first allocation, from
    /// a few, or at the default (which few inputs reach).
    small_runs: u8,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Margin {
    Off,
    Small(u8),
    Any(u64),
}

impl Desc {
    fn get(&self) -> AllocatorDesc {
        let mut block_size = self.block_size.get();
        if AVOID_KNOWN_FINDINGS && block_size > 1 << 62 {
            // Finding `huge_block_size_does_not_overflow`.
            block_size >>= 2;
        }
        if AVOID_KNOWN_FINDINGS && block_size == 0 {
            // Finding `zero_block_size_allocates_no_empty_memory`.
            block_size = 1;
        }
        AllocatorDesc::default()
            .with_block_size(block_size)
            .with_honour_dedicated_preference_from(self.honour_dedicated_from.get())
            .with_keep_empty_blocks(u32::from(self.keep_empty_blocks % 4))
            .with_debug_margin(match self.debug_margin {
                Margin::Off => 0,
                Margin::Small(n) => n.into(),
                // Finding `huge_debug_margin_does_not_overflow`.
                Margin::Any(n) if AVOID_KNOWN_FINDINGS => n % (1 << 20),
                Margin::Any(n) => n,
            })
            .with_recycle_bytes(self.recycle_bytes.get())
            .with_small_runs_from(small_runs_from(self.small_runs))
    }
}

/// A byte count, skewed towards the interesting ones.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Bytes {
    Default,
    Tiny(u8),
    Small(u16),
    Medium(u32),
    Pow2(u8),
    NearMax(u16),
    Any(u64),
}

impl Bytes {
    fn get(self) -> u64 {
        match self {
            Bytes::Default => 32 * MIB,
            Bytes::Tiny(n) => n.into(),
            Bytes::Small(n) => n.into(),
            Bytes::Medium(n) => n.into(),
            Bytes::Pow2(e) => 1 << (e % 64),
            Bytes::NearMax(n) => u64::MAX - u64::from(n),
            Bytes::Any(n) => n,
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Alignment {
    Pow2(u8),
    Zero,
    Any(u64),
}

impl Alignment {
    fn get(self) -> u64 {
        match self {
            Alignment::Pow2(e) => 1 << (e % 64),
            Alignment::Zero => 0,
            Alignment::Any(n) => n,
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Usage {
    GpuOnly,
    Upload,
    Readback,
    Transient,
    Custom {
        required: u8,
        preferred: u8,
        not_preferred: u8,
    },
}

impl Usage {
    fn get(self) -> MemoryUsage {
        match self {
            Usage::GpuOnly => MemoryUsage::GpuOnly,
            Usage::Upload => MemoryUsage::Upload,
            Usage::Readback => MemoryUsage::Readback,
            Usage::Transient => MemoryUsage::Transient,
            Usage::Custom {
                required,
                preferred,
                not_preferred,
            } => MemoryUsage::Custom(TypeFlags {
                required: MemoryPropertyFlags(required.into()),
                preferred: MemoryPropertyFlags(preferred.into()),
                not_preferred: MemoryPropertyFlags(not_preferred.into()),
            }),
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum TypeBits {
    All,
    Some(u32),
}

impl TypeBits {
    fn get(self) -> u32 {
        match self {
            TypeBits::All => u32::MAX,
            TypeBits::Some(bits) => bits,
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct Req {
    size: Bytes,
    alignment: Alignment,
    type_bits: TypeBits,
    kind: u8,
    driver_dedicated: u8,
    dedicated: u8,
    dedicated_to: Option<(bool, u64)>,
    usage: Usage,
    /// Index into every pool id made so far (live or destroyed).
    pool: Option<u8>,
    tagged: bool,
    within_budget: bool,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct PoolReq {
    usage: Usage,
    memory_type: Option<u8>,
    type_bits: TypeBits,
    block_size: Bytes,
    min_blocks: u8,
    max_blocks: u8,
    algorithm: u8,
    budget: Option<Bytes>,
}

/// An offset inside (or past) an allocation.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Offset {
    Start(u16),
    FromEnd(u16),
    Any(u64),
}

impl Offset {
    fn get(self, size: u64) -> u64 {
        match self {
            Offset::Start(n) => n.into(),
            Offset::FromEnd(n) => size.wrapping_sub(n.into()),
            Offset::Any(n) => n,
        }
    }
}

/// One operation of the input.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Op {
    Allocate(Req),
    AllocateMapped(Req),
    /// `Allocation::into_mapped` on a live unmapped allocation.
    IntoMapped {
        index: u16,
    },
    Write {
        index: u16,
        offset: Offset,
        len: u8,
        byte: u8,
    },
    Read {
        index: u16,
        offset: Offset,
        len: u8,
    },
    Flush {
        index: u16,
        offset: Offset,
        size: Offset,
        invalidate: bool,
    },
    Free {
        index: u16,
    },
    /// Free into the second allocator: refused.
    FreeForeign {
        index: u16,
    },
    /// Free an allocation its pool's reset freed already.
    FreeStale {
        index: u16,
    },
    CreatePool(PoolReq),
    DestroyPool {
        index: u8,
    },
    ResetPool {
        index: u8,
    },
    Trim,
    BeginFrame,
    SetFailures(Failures),
    SetHeap {
        heap: u8,
        capacity: u8,
        budget: Option<u8>,
        external: u8,
    },
    Statistics,
    DetailedStatistics,
    Json,
    Summary,
    Leaks,
    CheckCorruption,
}

// ---- The shadow ----------------------------------------------------------------

struct Live {
    handle: Handle,
    /// The pool's index in `State::pool_ids`.
    pool: Option<usize>,
    /// Bytes written, by offset in the allocation.
    written: BTreeMap<u64, u8>,
}

struct State {
    sim: Sim,
    allocator: Alloc,
    other: Alloc,
    live: Vec<Live>,
    /// Allocations freed by a pool reset, still held.
    stale: Vec<Handle>,
    /// Allocations lost to a refused free (still live in the allocator).
    leaked: u64,
    leaked_by_pool: HashMap<usize, u64>,
    /// Live ranges by memory object and offset, to check that none overlap.
    ranges: Ranges,
    /// Every pool id made, live or destroyed.
    pool_ids: Vec<PoolId>,
    pool_live: Vec<bool>,
}

fn tables() -> &'static [GpuTable] {
    static TABLES: OnceLock<Vec<GpuTable>> = OnceLock::new();
    TABLES.get_or_init(sim::all_tables)
}

impl State {
    fn new(setup: &Setup) -> Option<State> {
        let tables = tables();
        let mut table = tables[usize::from(setup.table) % tables.len()].clone();
        let coherent = table.clone();
        for (i, ty) in table.memory_properties.types.iter_mut().enumerate() {
            if setup.non_coherent & (1 << (i % 32)) != 0 {
                ty.flags = MemoryPropertyFlags(ty.flags.0 & !MemoryPropertyFlags::HOST_COHERENT.0);
            }
        }
        if table.validate().is_err() {
            table = coherent;
        }
        let heap_sizes: Vec<u64> = table
            .memory_properties
            .heaps
            .iter()
            .map(|h| h.size)
            .collect();
        let mut builder = SimDevice::builder(table).failures(setup.failures.plan());
        for (heap, &size) in heap_sizes.iter().enumerate() {
            let capacity = setup
                .heap_capacity
                .get(heap)
                .map_or(HEAP_CAP, |&c| (u64::from(c % 64) + 1) * 16 * MIB);
            builder = builder.heap_capacity(heap as u32, capacity.min(size));
        }
        if let Some(count) = setup.max_objects {
            builder = builder.max_memory_allocation_count(count.into());
        }
        if let Some(present) = setup.memory_budget {
            builder = builder.memory_budget(present);
        }
        let sim = Arc::new(builder.build());
        let desc = setup.desc.get();
        let allocator = new_allocator(&sim, desc).ok()?;
        let other = new_allocator(&sim, desc).ok()?;
        Some(State {
            sim,
            allocator,
            other,
            live: Vec::new(),
            stale: Vec::new(),
            leaked: 0,
            leaked_by_pool: HashMap::new(),
            ranges: Ranges::new(1),
            pool_ids: Vec::new(),
            pool_live: Vec::new(),
        })
    }

    fn live_index(&self, index: u16) -> Option<usize> {
        (!self.live.is_empty()).then(|| usize::from(index) % self.live.len())
    }

    fn pool_index(&self, index: u8) -> Option<usize> {
        (!self.pool_ids.is_empty()).then(|| usize::from(index) % self.pool_ids.len())
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Allocate(req) => self.allocate(req, false),
            Op::AllocateMapped(req) => self.allocate(req, true),
            Op::IntoMapped { index } => {
                let Some(i) = self.live_index(index) else {
                    return;
                };
                if !matches!(self.live[i].handle, Handle::Plain(_)) {
                    return;
                }
                let mut live = self.live.swap_remove(i);
                let Handle::Plain(a) = live.handle else {
                    unreachable!("checked above")
                };
                let visible = a.is_host_visible();
                live.handle = match a.into_mapped() {
                    Ok(mapped) => {
                        assert!(visible, "a device-only allocation was mapped");
                        Handle::Mapped(mapped)
                    }
                    Err(a) => {
                        assert!(!visible, "a host-visible allocation was not mapped");
                        Handle::Plain(a)
                    }
                };
                self.live.push(live);
            }
            Op::Write {
                index,
                offset,
                len,
                byte,
            } => {
                let Some(i) = self.live_index(index) else {
                    return;
                };
                let live = &mut self.live[i];
                let Handle::Mapped(mapped) = &mut live.handle else {
                    return;
                };
                let size = mapped.size();
                let offset = offset.get(size);
                let data: Vec<u8> = (0..usize::from(len) % (MAX_IO + 1))
                    .map(|k| byte.wrapping_add(k as u8))
                    .collect();
                let fits = offset
                    .checked_add(data.len() as u64)
                    .is_some_and(|end| end <= size);
                match mapped.write(offset, &data) {
                    Ok(()) => {
                        assert!(fits, "a write past the end was accepted");
                        for (k, &b) in data.iter().enumerate() {
                            live.written.insert(offset + k as u64, b);
                        }
                    }
                    Err(Error::OutOfBounds { .. }) => assert!(!fits, "an in-bounds write failed"),
                    Err(e) => panic!("write: unexpected {e:?}"),
                }
            }
            Op::Read { index, offset, len } => {
                let Some(i) = self.live_index(index) else {
                    return;
                };
                let live = &self.live[i];
                let Handle::Mapped(mapped) = &live.handle else {
                    return;
                };
                let size = mapped.size();
                let offset = offset.get(size);
                let mut out = vec![0u8; usize::from(len) % (MAX_IO + 1)];
                let fits = offset
                    .checked_add(out.len() as u64)
                    .is_some_and(|end| end <= size);
                match mapped.read(offset, &mut out) {
                    Ok(()) => {
                        assert!(fits, "a read past the end was accepted");
                        for (k, &b) in out.iter().enumerate() {
                            if let Some(&w) = live.written.get(&(offset + k as u64)) {
                                assert_eq!(b, w, "byte {} changed", offset + k as u64);
                            }
                        }
                    }
                    Err(Error::OutOfBounds { .. }) => assert!(!fits, "an in-bounds read failed"),
                    Err(e) => panic!("read: unexpected {e:?}"),
                }
            }
            Op::Flush {
                index,
                offset,
                size,
                invalidate: inv,
            } => {
                let Some(i) = self.live_index(index) else {
                    return;
                };
                let Handle::Mapped(mapped) = &self.live[i].handle else {
                    return;
                };
                let total = mapped.size();
                let (offset, size) = (offset.get(total), size.get(total));
                let fits = offset.checked_add(size).is_some_and(|end| end <= total);
                let result = if inv {
                    invalidate(&self.allocator, mapped, offset, size)
                } else {
                    flush(&self.allocator, mapped, offset, size)
                };
                match result {
                    Ok(()) => assert!(fits, "a flush past the end was accepted"),
                    Err(Error::OutOfBounds { .. }) => assert!(!fits, "an in-bounds flush failed"),
                    Err(_) => {}
                }
            }
            Op::Free { index } => {
                if let Some(i) = self.live_index(index) {
                    self.free_live(i);
                }
            }
            Op::FreeForeign { index } => {
                let Some(i) = self.live_index(index) else {
                    return;
                };
                let live = self.remove_live(i);
                match free(&self.other, live.handle.into_allocation()) {
                    Ok(()) => panic!("another allocator freed an allocation"),
                    Err((Error::ForeignAllocation, back)) => match back {
                        Some(a) => {
                            // Handed back: give it to its own allocator.
                            free(&self.allocator, a).expect("free after a foreign free");
                        }
                        None => {
                            self.leaked += 1;
                            if let Some(p) = live.pool {
                                *self.leaked_by_pool.entry(p).or_default() += 1;
                            }
                        }
                    },
                    Err((e, _)) => panic!("foreign free: unexpected {e:?}"),
                }
            }
            Op::FreeStale { index } => {
                if self.stale.is_empty() {
                    return;
                }
                let handle = self
                    .stale
                    .swap_remove(usize::from(index) % self.stale.len());
                self.free_stale(handle);
            }
            Op::CreatePool(req) => self.create_pool(req),
            Op::DestroyPool { index } => {
                let Some(p) = self.pool_index(index) else {
                    return;
                };
                let held = self.live.iter().any(|l| l.pool == Some(p))
                    || self.leaked_by_pool.get(&p).is_some_and(|&n| n > 0);
                match destroy_pool(&self.allocator, self.pool_ids[p]) {
                    Ok(()) => {
                        assert!(self.pool_live[p], "a destroyed pool was destroyed again");
                        assert!(!held, "a pool with live allocations was destroyed");
                        self.pool_live[p] = false;
                    }
                    Err(Error::PoolNotEmpty { .. }) => assert!(held, "an empty pool was refused"),
                    Err(Error::UnknownPool(_)) => assert!(!self.pool_live[p]),
                    Err(e) => panic!("destroy_pool: unexpected {e:?}"),
                }
            }
            Op::ResetPool { index } => {
                let Some(p) = self.pool_index(index) else {
                    return;
                };
                match reset_pool(&self.allocator, self.pool_ids[p]) {
                    Ok(()) => {
                        assert!(self.pool_live[p]);
                        let mut i = 0;
                        while i < self.live.len() {
                            if self.live[i].pool == Some(p) {
                                let live = self.remove_live(i);
                                self.stale.push(live.handle);
                            } else {
                                i += 1;
                            }
                        }
                        self.leaked -= self.leaked_by_pool.remove(&p).unwrap_or(0);
                    }
                    Err(Error::UnknownPool(_)) => assert!(!self.pool_live[p]),
                    Err(e) => panic!("reset_pool: unexpected {e:?}"),
                }
            }
            Op::Trim
            | Op::BeginFrame
            | Op::Statistics
            | Op::DetailedStatistics
            | Op::Json
            | Op::Leaks
            | Op::CheckCorruption => unreachable!("the interpreter runs the common operations"),
            Op::SetFailures(failures) => self.sim.set_failure_plan(failures.plan()),
            Op::SetHeap {
                heap,
                capacity,
                budget,
                external,
            } => {
                let heaps = self.allocator.statistics().heaps;
                let h = usize::from(heap) % heaps.len();
                let cap = ((u64::from(capacity % 64) + 1) * 16 * MIB).min(heaps[h].size);
                self.sim.set_heap_capacity(h as u32, cap);
                self.sim
                    .set_heap_budget(h as u32, budget.map(|b| u64::from(b) * 4 * MIB));
                self.sim
                    .set_external_usage(h as u32, u64::from(external % 16) * 4 * MIB);
            }
            Op::Summary => {
                let _ = self.allocator.summary();
            }
        }
    }

    fn allocate(&mut self, req: Req, mapped: bool) {
        let pool = req
            .pool
            .and_then(|p| self.pool_index(p))
            .map(|p| (p, self.pool_ids[p]));
        let mut size = req.size.get();
        let shared = req.dedicated % 3 == 2 || pool.is_some();
        if AVOID_KNOWN_FINDINGS && shared && size > 1 << 62 {
            // Findings `size_near_max_with_margins_does_not_overflow` and
            // `size_near_max_in_non_coherent_memory_does_not_overflow`.
            size >>= 2;
        }
        let desc = AllocationDesc {
            size,
            alignment: req.alignment.get(),
            memory_type_bits: req.type_bits.get(),
            kind: kind(req.kind),
            driver_dedicated: match req.driver_dedicated % 3 {
                0 => DriverDedicated::None,
                1 => DriverDedicated::Preferred,
                _ => DriverDedicated::Required,
            },
            options: AllocationOptions {
                usage: req.usage.get(),
                pool: pool.map(|(_, id)| id),
                dedicated: match req.dedicated % 3 {
                    0 => DedicatedPolicy::Auto,
                    1 => DedicatedPolicy::Always,
                    _ => DedicatedPolicy::Never,
                },
                tag: if req.tagged { "fuzz" } else { "" },
                within_budget: req.within_budget,
                pinned: false,
                priority: None,
            },
            ..AllocationDesc::default()
        };
        let to = req.dedicated_to.map(|(image, handle)| {
            let resource = if image {
                DedicatedResource::Image(handle)
            } else {
                DedicatedResource::Buffer(handle)
            };
            // SAFETY: the simulated device never dereferences the handle.
            unsafe { DedicatedTo::new(resource) }
        });
        let desc = request(desc, to);
        let result = if mapped {
            allocate_mapped(&self.allocator, &desc).map(Handle::Mapped)
        } else {
            allocate(&self.allocator, &desc).map(Handle::Plain)
        };
        let handle = match result {
            Ok(handle) => handle,
            Err(Error::ZeroSize) => return assert_eq!(desc.size, 0),
            Err(Error::InvalidAlignment(_)) => {
                return assert!(desc.alignment > 1 && !desc.alignment.is_power_of_two())
            }
            Err(_) => return,
        };
        let a = handle.allocation();
        ops::check_new(a, &desc);
        assert_ne!(desc.size, 0);
        if mapped {
            assert!(a.is_host_visible(), "mapped memory is not host-visible");
        }
        if desc.driver_dedicated == DriverDedicated::Required {
            assert!(a.is_dedicated(), "required dedicated memory is shared");
        }
        self.ranges
            .claim(ops::key(a), a.size(), a.kind(), "a new allocation");
        let mut live = Live {
            handle,
            pool: pool.map(|(p, _)| p),
            written: BTreeMap::new(),
        };
        live.handle.touch_ends(&mut live.written);
        self.live.push(live);
    }

    fn create_pool(&mut self, req: PoolReq) {
        let desc = PoolDesc {
            usage: req.usage.get(),
            memory_type: req.memory_type.map(|t| u32::from(t % 40)),
            memory_type_bits: req.type_bits.get(),
            block_size: req.block_size.get(),
            min_blocks: u32::from(req.min_blocks % 4),
            max_blocks: u32::from(req.max_blocks % 8),
            algorithm: match req.algorithm % 3 {
                0 => PoolAlgorithm::Tlsf,
                1 => PoolAlgorithm::Linear(LinearMode::Stack),
                _ => PoolAlgorithm::Linear(LinearMode::Ring),
            },
            budget: req.budget.map(Bytes::get),
            ..PoolDesc::new(format!("pool{}", self.pool_ids.len()))
        };
        if let Ok(id) = create_pool(&self.allocator, &desc) {
            assert!(
                !self
                    .pool_ids
                    .iter()
                    .zip(&self.pool_live)
                    .any(|(&old, &live)| live && old == id),
                "a live pool's id was handed out again"
            );
            self.pool_ids.push(id);
            self.pool_live.push(true);
        }
    }

    fn remove_live(&mut self, i: usize) -> Live {
        let live = self.live.swap_remove(i);
        self.ranges.release(ops::key(live.handle.allocation()));
        live
    }

    fn free_live(&mut self, i: usize) {
        // Check what was written first: freeing checks the margins too.
        self.check_written(i);
        let live = self.remove_live(i);
        if let Err((e, _)) = free(&self.allocator, live.handle.into_allocation()) {
            panic!("free: unexpected {e:?}");
        }
    }

    /// Frees an allocation a pool reset freed already: a no-op, or
    /// `UnknownPool` once the pool is gone.
    fn free_stale(&self, handle: Handle) {
        if AVOID_KNOWN_FINDINGS && self.allocator.desc().debug_margin > 0 {
            // Finding `freeing_a_handle_freed_by_reset_pool_reads_no_freed_memory`:
            // the margins are checked before the pool's epoch, in memory
            // that may be gone. Drop the handle instead (that is allowed).
            return;
        }
        match free(&self.allocator, handle.into_allocation()) {
            Ok(()) | Err((Error::UnknownPool(_), _)) => {}
            Err((e, _)) => panic!("stale free: unexpected {e:?}"),
        }
    }

    fn check_written(&self, i: usize) {
        let live = &self.live[i];
        live.handle.check_written(&live.written, &"an allocation");
    }

    fn expected_count(&self) -> u64 {
        self.live.len() as u64 + self.leaked
    }
}

impl Target for State {
    const NAME: &'static str = "allocator_sim";
    type Setup = Setup;
    type Op = Op;

    fn new(setup: &Setup) -> Option<State> {
        State::new(setup)
    }

    crate::ops::common_of_op!();

    fn apply(&mut self, op: Op, _number: u64) {
        State::apply(self, op);
    }

    fn allocator(&self) -> &Alloc {
        &self.allocator
    }

    fn expected_count(&self) -> u64 {
        State::expected_count(self)
    }

    /// Checks everything after an operation.
    fn check(&self) {
        let pools = self
            .pool_ids
            .iter()
            .enumerate()
            .filter(|&(p, _)| self.pool_live[p]);
        let pools = pools.map(|(p, &id)| {
            let expected = self.live.iter().filter(|l| l.pool == Some(p)).count() as u64
                + self.leaked_by_pool.get(&p).copied().unwrap_or(0);
            (p, id, expected)
        });
        ops::check_allocator(&self.allocator, &self.sim, self.expected_count(), pools);
        let live_pools = self.pool_live.iter().filter(|&&live| live).count();
        assert_eq!(
            self.allocator.statistics().pools.len(),
            live_pools,
            "live pools"
        );
        for i in 0..self.live.len() {
            self.check_written(i);
        }
    }

    /// Frees everything, then drops the allocators and checks that the
    /// device holds no memory.
    fn finish(mut self) {
        while !self.live.is_empty() {
            self.free_live(self.live.len() - 1);
        }
        for handle in std::mem::take(&mut self.stale) {
            self.free_stale(handle);
        }
        self.check();
        let State {
            sim,
            allocator,
            other,
            ..
        } = self;
        drop(other);
        drop(allocator);
        assert_eq!(sim.live_objects(), 0, "device memory left after drop");
        assert_eq!(sim.violations(), 0, "{:?}", sim.violation_log());
    }
}

/// Runs one input: the setup, every operation with the checks after each,
/// then the end (everything freed, no device memory left).
pub fn run(input: Input) {
    interpreter::run::<State>(input.0);
}
