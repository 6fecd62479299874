//! The allocator: memory types' default blocks, pools, dedicated
//! allocations, budgets and statistics, over any [`MemoryDevice`].
//!
//! Every list of blocks, a memory type's default blocks or a pool's, is a
//! [`BlockVector`]; the allocator picks the vector and the placement, the
//! vector does the rest. Split by concern:
//! - this file: the allocator's state, creation, frames and trace recording;
//! - [`placement`]: allocate, free, flush and invalidate (the one path);
//! - [`pools`]: creating, resetting and destroying pools, trimming;
//! - [`diagnostics`]: statistics, the JSON dump, leaks, corruption, validation;
//! - [`teardown`]: `destroy`, `destroy_all_memory` and drop.
//!
//! Locking: each vector has its own locks, one per shard (see
//! [`crate::block_vector`]), so threads allocating from different types or
//! pools never wait on each other, and threads in one type or pool spread
//! over its shards. Device memory is created and freed outside those locks.
//! The pool table is replicated, a read-write lock per replica
//! ([`pool_table`]): pool allocations, frees and statistics take their
//! thread's replica for reading (briefly, to clone an `Arc`); adding or
//! removing a pool takes every replica for writing, never across a driver
//! call.

mod defrag;
mod diagnostics;
mod external;
mod placement;
mod pool_table;
mod pools;
mod priority;
mod teardown;

#[cfg(feature = "trace")]
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

#[cfg(feature = "trace")]
use parking_lot::Mutex;

use crate::allocation::ListRef;
use crate::block::PoolAlgorithm;
use crate::block_list::ListConfig;
use crate::block_vector::{BlockVector, Env, OtherTypes, VectorConfig};
use crate::budget::Budgets;
use crate::device::{MemoryDevice, MemoryPropertyFlags};
use crate::error::Error;
use crate::memory::{self, ObjectCount};
use crate::pool::{PoolDesc, PoolId};
use crate::strategy::Strategy;
#[cfg(feature = "trace")]
use crate::trace::{Recorder, TraceError};
use crate::type_cache::TypeCache;

pub use diagnostics::{Leak, LeakReport};

/// How the allocator sizes blocks and when it makes dedicated allocations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AllocatorDesc {
    /// Where the allocator sits between committed memory and driver calls
    /// ([`Strategy`]); [`Self::for_strategy`] fills the fields below with
    /// its settings, and it decides what the fields don't say: whether
    /// freed memory is kept at all ([`Strategy::MinMemory`] keeps none),
    /// how long an idle allocator keeps it, and (for
    /// [`Strategy::Balanced`], the default) how block sizes, retention and
    /// recycling tighten as a heap's usage nears its budget.
    pub strategy: Strategy,
    /// The largest default block on heaps larger than 1 GiB (smaller heaps
    /// use 1/8 of their size). Below it, a memory type's next block is sized
    /// from what the type holds (see the crate's `policy` module): about a
    /// quarter of its live bytes (or of their recent high-water mark), at
    /// least 4 MiB, so the part of a new block not yet used stays a bounded
    /// share of the live set and small programs don't pay for a large block
    /// up front; a request larger than that gets a block of the next power
    /// of two; and no block is made larger than what is left of its heap
    /// when a smaller one holds the request.
    pub block_size: u64,
    /// A driver's `prefersDedicatedAllocation` is honoured for allocations of
    /// at least this many bytes (64 MiB by default); smaller ones share
    /// blocks, saving `vkAllocateMemory` calls (which cost 0.1–7 ms each on
    /// some drivers). On the H200's corpus, 64 MiB rather than 32 MiB kept
    /// committed/live at 1.75 (1.74) and cut the calls from 67 to 40 and the
    /// wall time by a quarter (BENCHMARKS.md, "The adaptive policy").
    /// A preferred allocation of at least half this size also gets memory
    /// of its own in a memory type that is not host-visible where it is at
    /// most 1/16 of the type's live bytes: a block made for it would mostly
    /// hold smaller allocations, which keep the block once it is freed (a
    /// streamer's 32-43 MiB textures in a live set of 2 GiB on the H200).
    pub honour_dedicated_preference_from: u64,
    /// Empty blocks kept per memory type (or pool, above its `min_blocks`) for
    /// reuse instead of being freed at once. A memory type's default blocks
    /// may keep more while the bytes kept (empty blocks and recycled
    /// dedicated memory, see [`Self::recycle_bytes`]) stay within its
    /// retention limit: the larger of 1/8 of its live bytes and the distance
    /// up to 9/8 of their recent high-water mark, at least 4 MiB. Kept memory
    /// above the limit is freed before new device memory is created (all of
    /// it when the heap is short) and, once the limit is passed twice over,
    /// at [`Allocator::begin_frame`]; the high-water mark falls 1/64 of the
    /// way to the live bytes each frame, so memory kept for a steady churn is
    /// reused rather than freed and made again every frame. A type also keeps
    /// what stays below its own committed high-water mark (which falls 1/256
    /// of the way to the bytes in use each frame), unless new memory would
    /// pass the allocator's committed peak by more than 1/16: then kept
    /// memory of that type, then of the others, is freed first (see
    /// `policy.rs`). Frames are not needed for kept memory to come back:
    /// once a type's live bytes have fallen below half their high-water
    /// mark, the first allocation or free after the strategy's idle time
    /// ([`crate::StrategySettings::idle_release_ms`]) frees what the live
    /// set alone does not keep. How much is kept at all depends on
    /// [`Self::strategy`] and, for [`Strategy::Balanced`], on the heap's
    /// pressure.
    pub keep_empty_blocks: u32,
    /// Bytes of corruption margin before and after each allocation in
    /// host-visible shared blocks, filled with a pattern and checked on free
    /// (see [`crate::corruption`]). 0 (the default) turns the check off.
    pub debug_margin: u64,
    /// Bytes of freed dedicated memory kept per memory type for reuse by a
    /// later allocation of about the same size (at most 1/8 larger); at most
    /// 1/16 of the type's heap or, when more, the type's live bytes (so a
    /// small heap whose live set is mostly large textures still keeps one),
    /// and within the retention limit of
    /// [`Self::keep_empty_blocks`] whenever new memory is made. A driver's *preference* for dedicated memory
    /// is then met with a memory object of the allocation's own that does not
    /// name the resource, so it can be reused; *required* dedicated memory
    /// always names it. 0 turns reuse off (and preferred dedicated memory
    /// names the resource).
    pub recycle_bytes: u64,
    /// Live allocations a TLSF block holds before its small requests (up to
    /// 32 KiB) take slots of runs: ranges cut into equal slots of one size
    /// class, whose allocation and free touch a bitmap and one node instead
    /// of free lists and neighbours (see [`crate::range::TlsfAllocator`]).
    /// The default, [`crate::range::tlsf::RUNS_FROM`] (2,048), makes them
    /// where the TLSF's own lines go cold (many thousands of small buffers);
    /// below it the size classes' rounding would cost committed memory for
    /// little time. 0 makes runs from the first allocation, `u32::MAX`
    /// never. Linear pools have no runs.
    pub small_runs_from: u32,
    /// Name buffers and images created by the allocator
    /// (`Allocator::create_buffer`, `create_image`) from their tags with
    /// `VK_EXT_debug_utils`, where the device says the instance has it
    /// ([`crate::device::DeviceLimits::debug_utils`]). Memory objects are
    /// always named there ([`crate::names`]).
    pub name_resources: bool,
}

impl Default for AllocatorDesc {
    /// [`Self::for_strategy`] of [`Strategy::Balanced`].
    fn default() -> Self {
        Self::for_strategy(Strategy::default())
    }
}

/// Builders for the fields, since the struct is `#[non_exhaustive]`:
///
/// ```
/// let desc = vkalloc::AllocatorDesc::default()
///     .with_debug_margin(16)
///     .with_recycle_bytes(0);
/// assert_eq!(desc.recycle_bytes, 0);
/// ```
impl AllocatorDesc {
    /// The same settings with [`Self::name_resources`] set.
    pub fn with_resource_names(self, name_resources: bool) -> Self {
        Self {
            name_resources,
            ..self
        }
    }

    /// The settings of `strategy` ([`Strategy::settings`]), no corruption
    /// margin, and runs of slots from [`crate::range::tlsf::RUNS_FROM`]
    /// live allocations.
    pub fn for_strategy(strategy: Strategy) -> Self {
        let s = strategy.settings();
        Self {
            strategy,
            block_size: s.block_size,
            honour_dedicated_preference_from: s.honour_dedicated_preference_from,
            keep_empty_blocks: s.keep_empty_blocks,
            debug_margin: 0,
            recycle_bytes: s.recycle_bytes,
            small_runs_from: crate::range::tlsf::RUNS_FROM,
            name_resources: false,
        }
    }

    /// The same settings with `strategy` and its block size, dedicated
    /// threshold, kept blocks and recycle bin ([`Self::for_strategy`]);
    /// the corruption margin and [`Self::small_runs_from`] stay. Call it
    /// before the builders of those fields.
    pub fn with_strategy(self, strategy: Strategy) -> Self {
        Self {
            debug_margin: self.debug_margin,
            small_runs_from: self.small_runs_from,
            name_resources: self.name_resources,
            ..Self::for_strategy(strategy)
        }
    }

    /// The same settings with [`Self::block_size`] set.
    pub fn with_block_size(self, bytes: u64) -> Self {
        Self {
            block_size: bytes,
            ..self
        }
    }

    /// The same settings with [`Self::honour_dedicated_preference_from`] set.
    pub fn with_honour_dedicated_preference_from(self, bytes: u64) -> Self {
        Self {
            honour_dedicated_preference_from: bytes,
            ..self
        }
    }

    /// The same settings with [`Self::keep_empty_blocks`] set.
    pub fn with_keep_empty_blocks(self, blocks: u32) -> Self {
        Self {
            keep_empty_blocks: blocks,
            ..self
        }
    }

    /// The same settings with corruption margins of `bytes` (see
    /// [`Self::debug_margin`]).
    pub fn with_debug_margin(self, bytes: u64) -> Self {
        Self {
            debug_margin: bytes,
            ..self
        }
    }

    /// The same settings with [`Self::recycle_bytes`] set.
    pub fn with_recycle_bytes(self, bytes: u64) -> Self {
        Self {
            recycle_bytes: bytes,
            ..self
        }
    }

    /// The same settings with [`Self::small_runs_from`] set.
    pub fn with_small_runs_from(self, live: u32) -> Self {
        Self {
            small_runs_from: live,
            ..self
        }
    }
}

/// The smallest block size a memory type gets.
const MIN_BLOCK_SIZE: u64 = 1 << 20;

/// Heaps up to this size get blocks of 1/8 of the heap.
const SMALL_HEAP_MAX: u64 = 1 << 30;

/// One memory type's state, on whole cache lines (`repr(C)`): the
/// vector's first line is all an allocation reads of it.
#[derive(Debug)]
#[repr(C, align(64))]
struct TypeState {
    /// The type's default blocks (and its `non_coherent` flag).
    vector: BlockVector,
    flags: MemoryPropertyFlags,
    /// The types whose blocks' room may take this type's requests
    /// ([`crate::policy::sibling_types`]), a bit per type.
    siblings: u32,
}

/// A pool's state: its description and its blocks.
#[derive(Debug)]
struct PoolState {
    desc: PoolDesc,
    vector: BlockVector,
}

#[derive(Clone, Debug, Default)]
struct PoolSlot {
    generation: u32,
    pool: Option<Arc<PoolState>>,
    /// Taken by a `create_pool` that is creating the pool's first blocks
    /// outside the table's lock.
    reserved: bool,
}

static NEXT_ALLOCATOR_ID: AtomicU32 = AtomicU32::new(1);

/// A Vulkan memory suballocator over a [`MemoryDevice`].
///
/// `Send + Sync`: share it between threads behind an `Arc`. See the crate
/// documentation for a tour.
//
// `repr(C)`, on whole cache lines: what every allocation and free reads of
// the allocator itself (the types, the limits and settings copied into
// `hot`, the frame, the id, the object count, the heaps' counters) fills
// its first two lines; the rest follows.
#[repr(C, align(64))]
pub struct Allocator<D: MemoryDevice> {
    types: Vec<TypeState>,
    hot: Hot,
    frame: AtomicU64,
    pub(crate) id: u32,
    /// A memory type keeps freed memory after its live set halved
    /// ([`OtherTypes::arm_idle_release`]): every allocation and free reads
    /// it, and only when set the clock ([`Self::poll_idle`]).
    idle_armed: AtomicBool,
    /// Whether `recorder` holds a recorder: checked without locking.
    #[cfg(feature = "trace")]
    recording: AtomicBool,
    objects: ObjectCount,
    budgets: Budgets,
    type_cache: TypeCache,
    device: D,
    desc: AllocatorDesc,
    pools: pool_table::PoolTable,
    corruptions: AtomicU64,
    /// The next allocation id.
    next_id: AtomicU64,
    /// Defragmentation totals over every session.
    defrag_totals: parking_lot::Mutex<crate::stats::DefragStats>,
    /// Open passes of dropped defragmentation sessions, ended at the next
    /// frame, trim, session, pass, `leaks`, pool destruction or teardown
    /// ([`crate::Defragmentation`]).
    abandoned: crate::defrag::Abandoned,
    #[cfg(feature = "trace")]
    recorder: Mutex<Option<Recorder>>,
    /// Set by [`Self::destroy`], which reports leaks itself.
    leaks_reported: bool,
    /// When `idle_armed` was set, on [`MemoryDevice::monotonic_ms`]'s clock.
    idle_since_ms: AtomicU64,
}

/// The device's limits and the settings the allocation path reads, copied
/// next to the allocator's other hot fields (the device's own copy lies
/// wherever `D` keeps it, the settings among the cold ones).
#[derive(Clone, Copy, Debug)]
struct Hot {
    /// `maxMemoryAllocationSize`.
    max_allocation_size: u64,
    /// `bufferImageGranularity`.
    granularity: u64,
    /// [`AllocatorDesc::debug_margin`].
    debug_margin: u64,
    /// `maxMemoryAllocationCount`.
    max_allocation_count: u32,
}

// The layout [`Allocator`] promises: the hot fields within its first two
// cache lines (the heaps' counters' vector and flag at the start of
// `budgets`).
#[cfg(feature = "sim")]
const _: () = {
    assert!(std::mem::offset_of!(Allocator<crate::sim::SimDevice>, budgets) + 32 <= 128);
};

impl<D: MemoryDevice> std::fmt::Debug for Allocator<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocator")
            .field("id", &self.id)
            .field("desc", &self.desc)
            .field("types", &self.types.len())
            .finish_non_exhaustive()
    }
}

impl<D: MemoryDevice> Allocator<D> {
    /// An allocator over `device`.
    ///
    /// # Errors
    /// [`Error::Invariant`] when the device reports no memory type or heap,
    /// more than 32 types, or a type on a heap that does not exist; and after
    /// 2^32 - 1 allocators in one process (each has an id of its own, which
    /// its allocations and pools carry: ids never repeat).
    pub fn new(device: D, desc: AllocatorDesc) -> Result<Self, Error> {
        let id = NEXT_ALLOCATOR_ID
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1))
            .map_err(|_| {
                Error::Invariant(
                    "this process made 2^32 - 1 allocators: their ids, which tell one allocator's \
                     allocations from another's, are spent"
                        .into(),
                )
            })?;
        let props = device.memory_properties().clone();
        let limits = *device.limits();
        let bad_heap = props
            .types
            .iter()
            .any(|t| t.heap_index as usize >= props.heaps.len());
        if props.types.is_empty() || props.heaps.is_empty() || props.types.len() > 32 || bad_heap {
            return Err(Error::Invariant(format!(
                "device reports {} memory types and {} heaps{}",
                props.types.len(),
                props.heaps.len(),
                if bad_heap {
                    ", and a type on a missing heap"
                } else {
                    ""
                }
            )));
        }
        let properties: Vec<(MemoryPropertyFlags, u32)> = props
            .types
            .iter()
            .map(|t| (t.flags, t.heap_index))
            .collect();
        let types = props
            .types
            .iter()
            .enumerate()
            .map(|(index, t)| {
                let heap_size = props.heaps[t.heap_index as usize].size;
                // At least 1 MiB (a block size of 0 would ask the driver for
                // empty memory), at most what one allocation may be.
                let block_size = if heap_size <= SMALL_HEAP_MAX {
                    heap_size / 8
                } else {
                    desc.block_size
                }
                .max(MIN_BLOCK_SIZE)
                .min(limits.max_memory_allocation_size)
                .max(1);
                let host_visible = t.flags.contains(MemoryPropertyFlags::HOST_VISIBLE);
                let pinned = crate::policy::pinned_heap(
                    props.heaps[t.heap_index as usize].device_local,
                    props.heaps.iter().any(|h| h.device_local),
                );
                TypeState {
                    flags: t.flags,
                    siblings: crate::policy::sibling_types(&properties, index),
                    vector: BlockVector::new(VectorConfig {
                        memory_type: index as u32,
                        heap: t.heap_index,
                        host_visible,
                        non_coherent: host_visible
                            && !t.flags.contains(MemoryPropertyFlags::HOST_COHERENT),
                        pinned,
                        algorithm: PoolAlgorithm::Tlsf,
                        list: ListConfig {
                            block_size,
                            fixed_block_size: false,
                            min_blocks: 0,
                            keep_empty: desc.keep_empty_blocks,
                        },
                        caps: None,
                        recycle_bytes: desc.recycle_bytes,
                        recycle_heap_share: desc.recycle_bytes.min(heap_size / 16),
                        list_ref: ListRef::Type(index as u32),
                        pool_name: None,
                        runs_from: desc.small_runs_from,
                        strategy: desc.strategy,
                    }),
                }
            })
            .collect();
        let budgets = Budgets::new(&props);
        budgets.refresh(&device);
        Ok(Self {
            id,
            hot: Hot {
                max_allocation_size: limits.max_memory_allocation_size,
                granularity: limits.buffer_image_granularity,
                debug_margin: desc.debug_margin,
                max_allocation_count: limits.max_memory_allocation_count,
            },
            device,
            desc,
            types,
            pools: pool_table::PoolTable::new(),
            budgets,
            objects: ObjectCount::default(),
            type_cache: TypeCache::new(),
            corruptions: AtomicU64::new(0),
            frame: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
            defrag_totals: parking_lot::Mutex::new(crate::stats::DefragStats::default()),
            abandoned: Default::default(),
            #[cfg(feature = "trace")]
            recording: AtomicBool::new(false),
            #[cfg(feature = "trace")]
            recorder: Mutex::new(None),
            leaks_reported: false,
            idle_armed: AtomicBool::new(false),
            idle_since_ms: AtomicU64::new(0),
        })
    }

    /// The device the allocator works on.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The settings the allocator was made with.
    pub fn desc(&self) -> &AllocatorDesc {
        &self.desc
    }

    /// Frames counted by [`Allocator::begin_frame`] so far.
    pub fn frame(&self) -> u64 {
        self.frame.load(Ordering::Relaxed)
    }

    /// Reads heap budgets afresh (`VK_EXT_memory_budget`) every 16 frames,
    /// or every frame while a heap's usage is above 3/4 of its budget (a
    /// read costs about 10 µs on some drivers; between reads the usage is
    /// this allocator's own changes added to the last read), lets each memory
    /// type's high-water mark decay and frees kept memory far above its
    /// retention limit (see [`AllocatorDesc::keep_empty_blocks`]), advances
    /// the frame counter that allocations' ages are counted in, and marks a
    /// frame boundary in a recorded trace; call once a frame. It first ends
    /// the passes of defragmentation sessions dropped with a pass open (see
    /// [`crate::Defragmentation`]).
    pub fn begin_frame(&self) {
        self.end_abandoned_passes();
        let frame = self.frame.load(Ordering::Relaxed);
        self.budgets.refresh_at_frame(&self.device, frame + 1);
        for ts in &self.types {
            ts.vector.end_frame(self.env());
        }
        self.budgets.decay_committed_high();
        let _frame = self.frame.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "trace")]
        self.record(|r| r.frame(_frame));
    }

    #[cfg(feature = "trace")]
    /// Starts recording every allocation and free as a trace (format in
    /// [`crate::trace::format`]), written to `writer`. Replaces a recording
    /// already running, whose result is dropped. The header's `note` holds
    /// the device's memory types ([`crate::trace::memory_types_note`]).
    ///
    /// # Errors
    /// [`TraceError`] when the header can't be written.
    pub fn start_recording(
        &self,
        writer: Box<dyn Write + Send>,
        name: &str,
    ) -> Result<(), TraceError> {
        let note = crate::trace::memory_types_note(&self.device.memory_properties().types);
        let recorder = Recorder::with_note(writer, name, note)?;
        *self.recorder.lock() = Some(recorder);
        self.recording.store(true, Ordering::Release);
        Ok(())
    }

    #[cfg(feature = "trace")]
    /// Stops recording and hands back the writer, flushed. `None` when no
    /// recording was running.
    ///
    /// # Errors
    /// The first write error met while recording.
    pub fn stop_recording(&self) -> Option<Result<Box<dyn Write + Send>, TraceError>> {
        self.recording.store(false, Ordering::Release);
        self.recorder.lock().take().map(Recorder::finish)
    }

    #[cfg(feature = "trace")]
    fn record(&self, event: impl FnOnce(&mut Recorder)) {
        if self.recording.load(Ordering::Relaxed) {
            if let Some(recorder) = self.recorder.lock().as_mut() {
                event(recorder);
            }
        }
    }

    // ---- shared internals -------------------------------------------------

    /// Kept memory armed for release ([`OtherTypes::arm_idle_release`]):
    /// once the strategy's idle time has passed since, every memory type
    /// gives back what its live set alone does not keep
    /// ([`BlockVector::release_idle`]). Read on every allocation and free
    /// while armed, so memory comes back at the first call after the idle
    /// time, whether or not the application counts frames.
    #[cold]
    #[inline(never)]
    pub(crate) fn poll_idle(&self) {
        let now = self.device.monotonic_ms();
        let since = self.idle_since_ms.load(Ordering::Acquire);
        let idle = self.desc.strategy.settings().idle_release_ms;
        if now.saturating_sub(since) < idle || !self.idle_armed.swap(false, Ordering::AcqRel) {
            return;
        }
        for ts in &self.types {
            ts.vector.release_idle(self.env());
        }
    }

    /// Whether memory is armed for release when idle (read on every
    /// allocation and free).
    #[inline(always)]
    pub(crate) fn idle_armed(&self) -> bool {
        self.idle_armed.load(Ordering::Relaxed)
    }

    fn env(&self) -> Env<'_> {
        Env {
            memory: memory::Context {
                device: &self.device,
                objects: &self.objects,
                budgets: &self.budgets,
            },
            allocator: self.id,
            granularity: self.hot.granularity,
            next_id: &self.next_id,
            frame: self.frame.load(Ordering::Relaxed),
            others: self,
        }
    }

    fn pool(&self, id: PoolId) -> Result<Arc<PoolState>, Error> {
        self.pools
            .read()
            .get(id.index as usize)
            .filter(|s| s.generation == id.generation && id.allocator == self.id)
            .and_then(|s| s.pool.clone())
            .ok_or(Error::UnknownPool(id))
    }

    fn live_pools(&self) -> Vec<Arc<PoolState>> {
        self.pools
            .read()
            .iter()
            .filter_map(|s| s.pool.clone())
            .collect()
    }

    /// Calls `visit` for every block vector: each memory type's default
    /// blocks, then each live pool's (with its description).
    pub(crate) fn for_each_vector(&self, mut visit: impl FnMut(&BlockVector, Option<&PoolDesc>)) {
        for ts in &self.types {
            visit(&ts.vector, None);
        }
        for pool in self.live_pools() {
            visit(&pool.vector, Some(&pool.desc));
        }
    }
}

impl<D: MemoryDevice> OtherTypes for Allocator<D> {
    fn release_others(&self, except: u32, bytes: u64) -> u64 {
        // Device memory first: pinned system memory (`policy::pinned_heap`)
        // costs the driver an order of magnitude more to make again, and
        // freeing it makes no room in a device heap. It goes last, and its
        // largest kept block stays (`BlockVector::release_retained`).
        let mut freed = 0u64;
        for pinned in [false, true] {
            for ts in &self.types {
                if freed >= bytes {
                    return freed;
                }
                if ts.vector.memory_type != except && ts.vector.pinned == pinned {
                    freed += ts.vector.release_retained(self.env(), bytes - freed);
                }
            }
        }
        freed
    }

    fn arm_idle_release(&self) {
        if !self.idle_armed.load(Ordering::Relaxed) {
            self.idle_since_ms
                .store(self.device.monotonic_ms(), Ordering::Release);
            self.idle_armed.store(true, Ordering::Release);
        }
    }

    fn place_in_siblings(
        &self,
        memory_type: u32,
        desc: &crate::AllocationDesc<'_>,
    ) -> Option<crate::Allocation> {
        let mut siblings = self.types.get(memory_type as usize)?.siblings & desc.memory_type_bits;
        while siblings != 0 {
            let sibling = siblings.trailing_zeros();
            siblings &= siblings - 1;
            // A placement the sibling can't make (its alignment or size
            // rules) is no room there.
            let Ok(placement) = self.shared_placement(sibling, desc) else {
                continue;
            };
            let vector = &self.types[sibling as usize].vector;
            if let Some(Ok(allocation)) = vector.allocate_in_existing(self.env(), &placement, desc)
            {
                return Some(allocation);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use crate::defrag::DefragDesc;
    use crate::sim::{tables, SimDevice};
    use crate::{AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, MemoryUsage};

    /// An allocator with the default description on the simulated H200.
    fn h200() -> Allocator<SimDevice> {
        Allocator::new(
            SimDevice::new(tables::nvidia_h200()),
            AllocatorDesc::default(),
        )
        .unwrap()
    }

    fn upload(size: u64) -> AllocationDesc<'static> {
        AllocationDesc {
            size,
            options: AllocationOptions::usage(MemoryUsage::Upload),
            ..AllocationDesc::default()
        }
    }

    /// Allocates `desc` on another thread while shard 0 of `vector` is
    /// held, letting shard 0 go once that thread has opened another shard
    /// (it then waits for shard 0's lock before it makes memory).
    fn allocate_while_shard_0_is_busy(
        allocator: &Allocator<SimDevice>,
        vector: &crate::block_vector::BlockVector,
        desc: &AllocationDesc<'_>,
    ) -> crate::Allocation {
        let open = vector.open_shards();
        std::thread::scope(|s| {
            let busy = vector.hold_shard(0);
            let other = s.spawn(|| allocator.allocate(desc).unwrap());
            while vector.open_shards() == open {
                std::thread::yield_now();
            }
            drop(busy);
            other.join().unwrap()
        })
    }

    /// A thread that finds the only shard busy opens a second one; the
    /// allocation records it, a free from another thread finds it, and the
    /// counters, `validate()`, the dump and defragmentation see both shards.
    #[test]
    fn a_busy_shard_opens_another_and_frees_find_their_shard() {
        let allocator = h200();
        // Fills its block (the policy's smallest): the next allocation finds
        // no room in shard 0.
        let first = allocator
            .allocate(&upload(crate::policy::MIN_BLOCK_SIZE))
            .unwrap();
        let vector = &allocator.types[first.memory_type as usize].vector;
        assert_eq!((vector.open_shards(), first.location.shard), (1, 0));
        let second = allocate_while_shard_0_is_busy(&allocator, vector, &upload(4096));
        assert_eq!((vector.open_shards(), second.location.shard), (2, 1));
        // Shard 0 was busy, then full, so shard 1 made a block of its own,
        // of the policy's smallest size (little is live).
        assert_ne!(second.memory, first.memory);
        let usage = allocator.statistics().total;
        assert_eq!((usage.block_count, usage.allocation_count), (2, 2));
        assert_eq!(usage.block_bytes, 2 * crate::policy::MIN_BLOCK_SIZE);
        allocator.validate().unwrap();
        assert_eq!(allocator.detailed_statistics().lists[0].blocks.len(), 2);
        assert_eq!(allocator.leaks().len(), 2);

        // This thread's later allocations go to its home among the two
        // shards (its home index depends on the threads started before it);
        // a free of shard 1's allocation from here goes to shard 1.
        let third = allocator.allocate(&upload(4096)).unwrap();
        assert!(third.location.shard < 2);
        // Moves stay inside a shard: each shard has one block here, so a
        // move (a compaction, with `Full`) keeps its memory object.
        let full = DefragDesc::default().with_algorithm(crate::defrag::DefragAlgorithm::Full);
        let mut session = allocator.begin_defragmentation(&full).unwrap();
        for mv in session.begin_pass(&allocator).unwrap() {
            assert_eq!(mv.source().0, mv.destination().0);
        }
        session.end_pass(&allocator).unwrap();
        allocator.validate().unwrap();
        allocator.free(second).unwrap();
        allocator.validate().unwrap();
        allocator.free(first).unwrap();
        allocator.free(third).unwrap();
        allocator.validate().unwrap();
        assert_eq!(allocator.statistics().total.allocation_count, 0);
        assert!(allocator.leaks().is_empty());
        allocator.trim();
        assert_eq!(allocator.statistics().total.block_count, 0);
    }

    /// A thread whose home shard is busy borrows another for that allocation
    /// and keeps its home: once the home is free again, it allocates there.
    /// (Adopting the borrowed shard moved threads onto each other's homes;
    /// on the H200, 16 threads in one type ran 5.5M pairs/s that way, 40-48M
    /// keeping their homes.)
    #[test]
    fn a_thread_borrows_a_free_shard_and_keeps_its_home() {
        use std::sync::mpsc::channel;
        let allocator = h200();
        // Shard 0's block full; shards 1 and 2 each with a block with room
        // (the second opener's request doesn't fit the first's room: 5 MiB
        // makes an 8 MiB block).
        let first = allocator
            .allocate(&upload(crate::policy::MIN_BLOCK_SIZE))
            .unwrap();
        let vector = &allocator.types[first.memory_type as usize].vector;
        // Three shards open: each opened by a thread that found the open
        // ones busy (and let go once it had opened one: it then waits for
        // them before it makes memory).
        let mut opened = Vec::new();
        for (busy, size) in [(1, 4096), (2, 5 << 20)] {
            opened.push(std::thread::scope(|s| {
                let held: Vec<_> = (0..busy).map(|i| vector.hold_shard(i)).collect();
                let other = s.spawn(|| allocator.allocate(&upload(size)).unwrap());
                while vector.open_shards() == busy {
                    std::thread::yield_now();
                }
                drop(held);
                other.join().unwrap()
            }));
        }
        assert_eq!(vector.open_shards(), 3);
        assert_eq!(opened[0].location.shard, 1);
        assert_eq!(opened[1].location.shard, 2);
        let (to_main, from_worker) = channel::<usize>();
        let (to_worker, from_main) = channel::<()>();
        let shared = &allocator;
        let shards = std::thread::scope(|s| {
            let worker = s.spawn(move || {
                let a = shared.allocate(&upload(4096)).unwrap();
                to_main.send(usize::from(a.location.shard)).unwrap();
                from_main.recv().unwrap(); // the main thread holds a's shard
                let b = shared.allocate(&upload(4096)).unwrap();
                to_main.send(usize::from(b.location.shard)).unwrap();
                from_main.recv().unwrap(); // and let it go
                let c = shared.allocate(&upload(4096)).unwrap();
                let shards = [a.location.shard, b.location.shard, c.location.shard];
                for x in [a, b, c] {
                    shared.free(x).unwrap();
                }
                shards
            });
            let home = from_worker.recv().unwrap();
            let held = vector.hold_shard(home);
            to_worker.send(()).unwrap();
            let borrowed = from_worker.recv().unwrap();
            assert_ne!(borrowed, home);
            drop(held);
            to_worker.send(()).unwrap();
            worker.join().unwrap()
        });
        assert_eq!(shards[2], shards[0], "the home stays: {shards:?}");
        allocator.free(first).unwrap();
        for x in opened {
            allocator.free(x).unwrap();
        }
        allocator.validate().unwrap();
        assert!(allocator.leaks().is_empty());
    }

    /// Issue 37: a thread sent to a new shard (the first one busy) waits for
    /// the first one's lock and takes the room in its block rather than
    /// making a block of its own.
    #[test]
    fn a_new_shard_takes_the_room_of_a_busy_one_before_making_memory() {
        let allocator = h200();
        let first = allocator.allocate(&upload(4096)).unwrap();
        let vector = &allocator.types[first.memory_type as usize].vector;
        let second = allocate_while_shard_0_is_busy(&allocator, vector, &upload(4096));
        assert_eq!(vector.open_shards(), 2);
        assert_eq!(second.location.shard, 0);
        assert_eq!(second.memory, first.memory);
        let usage = allocator.statistics().total;
        assert_eq!((usage.block_count, usage.allocation_count), (1, 2));
        allocator.free(first).unwrap();
        allocator.free(second).unwrap();
        allocator.validate().unwrap();
    }

    const MIB: u64 = 1 << 20;

    /// Issue 37's rule where a request would get memory of its own: a
    /// thread that finds the other shards busy waits for their locks and
    /// takes the room in their blocks before that memory is made.
    ///
    /// On the simulated lavapipe (2 GiB heap) the budget caps new blocks
    /// at 64 MiB. Shard 0 holds `own` buffers of 200 MiB in memory of their
    /// own, 1 MiB in a shared block and an empty block of `empty` bytes (a
    /// buffer placed in a block of its size, then freed: the block is
    /// kept); `path` checks which path `request` takes, then a thread in
    /// shard 1, every other shard busy whenever it only tries a lock, asks
    /// for `request` bytes and must get the empty block.
    fn takes_a_busy_shards_room(
        own: usize,
        empty: u64,
        request: u64,
        path: impl FnOnce(&Allocator<std::sync::Arc<SimDevice>>, &crate::block_vector::BlockVector),
    ) {
        use crate::DedicatedPolicy;
        let sim = std::sync::Arc::new(SimDevice::new(tables::lavapipe()));
        let allocator = Allocator::new(sim.clone(), AllocatorDesc::default()).unwrap();
        let buffer = |size: u64| AllocationDesc {
            size,
            alignment: 256,
            options: AllocationOptions::usage(MemoryUsage::GpuOnly),
            ..AllocationDesc::default()
        };
        let mut live: Vec<_> = (0..own)
            .map(|_| allocator.allocate(&buffer(200 * MIB)).unwrap())
            .collect();
        assert!(live.iter().all(|a| a.is_dedicated()));
        let never = AllocationDesc {
            options: AllocationOptions {
                dedicated: DedicatedPolicy::Never,
                ..AllocationOptions::usage(MemoryUsage::GpuOnly)
            },
            ..buffer(empty)
        };
        let filler = allocator.allocate(&never).unwrap();
        let block = filler.memory;
        live.push(allocator.allocate(&buffer(MIB)).unwrap());
        allocator.free(filler).unwrap();
        assert!(sim.memory_info(block).is_some(), "the empty block is kept");
        let vector = &allocator.types[live[own].memory_type as usize].vector;
        vector.open_for_test(2);
        let calls = sim.allocate_calls();
        // Shard 1, every other shard busy whenever it only tries a lock.
        crate::block_vector::contend_for_test(1, true);
        path(&allocator, vector);
        let large = allocator.allocate(&buffer(request));
        crate::block_vector::contend_for_test(0, false);
        let large = large.unwrap();
        assert!(
            !large.is_dedicated(),
            "memory of its own beside an empty block"
        );
        assert_eq!(large.memory, block);
        assert_eq!(usize::from(large.location.shard), 0);
        assert_eq!(sim.allocate_calls(), calls, "no memory made");
        allocator.validate().unwrap();
        for a in live.into_iter().chain([large]) {
            allocator.free(a).unwrap();
        }
        allocator.trim();
        allocator.validate().unwrap();
    }

    /// A request given memory of its own only because the policy's cap
    /// cuts the type's block below twice its size (`cap_only`).
    #[test]
    fn a_request_the_cap_makes_dedicated_takes_a_busy_shards_room() {
        let request = 100 * MIB + 1000;
        takes_a_busy_shards_room(7, 200 * MIB, request, |allocator, vector| {
            let cap = vector.block_cap(allocator.env());
            assert!(
                cap < vector.block_size && request > cap / 2 && request <= vector.block_size / 2
            );
        });
    }

    /// A large request (above a quarter of the capped block, at most half
    /// of it) near a full heap, where the committed target cuts the block
    /// the policy would make for it: memory of its own
    /// (`large_request_takes_own`) only once no shard has room.
    #[test]
    fn a_large_request_takes_a_busy_shards_room_before_memory_of_its_own() {
        let request = 20 * MIB;
        takes_a_busy_shards_room(6, 500 * MIB, request, |allocator, vector| {
            let cap = vector.block_cap(allocator.env());
            assert!(request > cap / 4 && request <= cap / 2);
            assert!(vector.large_request_takes_own(allocator.env(), request));
        });
    }

    /// A pool at its block cap doesn't fail for being sharded: a thread
    /// sent to a new shard (the first one busy) can't create a block, and
    /// takes the room left in the first shard's block.
    #[test]
    fn a_capped_pool_uses_the_room_of_other_shards() {
        let allocator = h200();
        let pool = allocator
            .create_pool(&crate::PoolDesc {
                usage: MemoryUsage::Upload,
                block_size: 1 << 20,
                max_blocks: 1,
                ..crate::PoolDesc::new("capped")
            })
            .unwrap();
        let in_pool = AllocationDesc {
            options: AllocationOptions::usage(MemoryUsage::Upload).in_pool(pool),
            ..upload(4096)
        };
        let first = allocator.allocate(&in_pool).unwrap();
        let state = allocator.pool(pool).unwrap();
        let vector = &state.vector;
        let second = std::thread::scope(|s| {
            let busy = vector.hold_shard(0);
            let other = s.spawn(|| allocator.allocate(&in_pool));
            // Once the other thread has opened shard 1 it can only succeed
            // in shard 0's block: let it have the lock.
            while vector.open_shards() < 2 {
                std::thread::yield_now();
            }
            drop(busy);
            other.join().unwrap()
        })
        .expect("room in shard 0's block");
        assert_eq!(second.memory, first.memory);
        assert_eq!(allocator.statistics().total.block_count, 1);
        allocator.free(first).unwrap();
        allocator.free(second).unwrap();
        allocator.validate().unwrap();
        allocator.destroy_pool(pool).unwrap();
    }

    /// The count of empty blocks a list keeps is the vector's, not each
    /// shard's: a pool keeping one empty block, whose two shards each empty
    /// a block, keeps one of them (counting only its own shard's, each kept
    /// one: two).
    #[test]
    fn a_pool_keeps_its_count_of_empty_blocks_over_all_its_shards() {
        let allocator = h200();
        assert_eq!(allocator.desc.keep_empty_blocks, 1);
        let pool = allocator
            .create_pool(&crate::PoolDesc {
                usage: MemoryUsage::Upload,
                block_size: 1 << 20,
                max_blocks: 4,
                strategy: crate::Strategy::Balanced,
                ..crate::PoolDesc::new("two shards")
            })
            .unwrap();
        let part = AllocationDesc {
            options: AllocationOptions::usage(MemoryUsage::Upload).in_pool(pool),
            ..upload(400 << 10)
        };
        let state = allocator.pool(pool).unwrap();
        state.vector.open_for_test(2);
        // Shard 0's block takes two, leaving too little for a third (one of
        // three quarters of a block or more is a block of its own, released
        // whole): shard 1 waits for shard 0's lock, finds too little room
        // and makes its own.
        let mut live = Vec::new();
        for shard in [0, 0, 1] {
            crate::block_vector::contend_for_test(shard, true);
            let a = allocator.allocate(&part).unwrap();
            assert_eq!(usize::from(a.location.shard), shard);
            live.push(a);
        }
        crate::block_vector::contend_for_test(0, false);
        assert_ne!(live[0].memory, live[2].memory);
        assert_eq!(allocator.statistics().total.block_count, 2);
        for a in live {
            allocator.free(a).unwrap();
        }
        assert_eq!(allocator.statistics().total.block_count, 1);
        allocator.validate().unwrap();
        allocator.destroy_pool(pool).unwrap();
    }

    /// What [`committed_with_shards`] saw: committed bytes once the set is
    /// filled, at the end, and at most; live bytes at the end.
    #[derive(Debug)]
    struct Committed {
        filled: u64,
        end: u64,
        peak: u64,
        live: u64,
    }

    /// The bench's `device` workload (`bench threads`): 261 device-local
    /// buffers of 64 KiB..16 MiB (~750 MiB) dealt round-robin over
    /// `shards` stand-in threads, then 2,000 replacements, each by the
    /// stand-in thread that owns the slot. One thread plays them all, in a
    /// fixed order: each allocates in its own shard and, with more than one
    /// shard, finds every other shard busy whenever it only tries a lock
    /// (`contend_for_test`: the worst a crowd of threads can do; the locks
    /// it waits for it gets). The sizes and slots are the same whatever
    /// `shards` is.
    fn committed_with_shards(shards: usize) -> Committed {
        use rand::{Rng, SeedableRng};
        let allocator = h200();
        let desc = |size| AllocationDesc {
            size,
            alignment: 256,
            options: AllocationOptions::usage(MemoryUsage::GpuOnly),
            ..AllocationDesc::default()
        };
        let size = |rng: &mut rand_chacha::ChaCha8Rng| {
            (2f64.powf(rng.gen_range(16.0f64..=24.0)) as u64).max(256)
        };
        let probe = allocator.allocate(&desc(4096)).unwrap();
        let vector = &allocator.types[probe.memory_type as usize].vector;
        allocator.free(probe).unwrap();
        allocator.trim();
        vector.open_for_test(shards);
        let contended = shards > 1;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(37);
        let mut peak = 0;
        let mut note = |allocator: &Allocator<SimDevice>| {
            peak = peak.max(allocator.statistics().total.block_bytes);
        };
        let mut live = Vec::new();
        for i in 0..261 {
            crate::block_vector::contend_for_test(i % shards, contended);
            live.push(allocator.allocate(&desc(size(&mut rng))).unwrap());
            note(&allocator);
        }
        let filled = allocator.statistics().total.block_bytes;
        for _ in 0..2000 {
            let slot = rng.gen_range(0..live.len());
            let new_size = size(&mut rng);
            crate::block_vector::contend_for_test(slot % shards, contended);
            let new = allocator.allocate(&desc(new_size)).unwrap();
            allocator
                .free(std::mem::replace(&mut live[slot], new))
                .unwrap();
            note(&allocator);
        }
        crate::block_vector::contend_for_test(0, false);
        assert_eq!(vector.open_shards(), shards);
        let total = allocator.statistics().total;
        let seen = Committed {
            filled,
            end: total.block_bytes,
            peak,
            live: total.allocation_bytes,
        };
        allocator.validate().unwrap();
        for a in live {
            allocator.free(a).unwrap();
        }
        allocator.validate().unwrap();
        seen
    }

    /// Issue 37: shards that grow side by side commit at most 1.2x what one
    /// list commits for the same live set (once filled, at the end and at
    /// the peak), even where every thread finds the others' shards busy.
    /// Before: each shard sized its blocks from the whole vector's live
    /// bytes, made them while room lay in shards it found busy, and kept
    /// an empty block of its own.
    #[test]
    fn shards_commit_about_what_one_list_commits_for_the_same_live_set() {
        let one = committed_with_shards(1);
        for shards in [2, 4, 8] {
            let many = committed_with_shards(shards);
            println!("{shards} shards: {many:?}; 1 shard: {one:?}");
            assert_eq!(many.live, one.live, "the same live set");
            let within = |many: u64, one: u64| many * 5 <= one * 6;
            assert!(
                within(many.filled, one.filled)
                    && within(many.end, one.end)
                    && within(many.peak, one.peak),
                "{shards} shards commit more than 1.2x one list: {many:?} against {one:?}"
            );
        }
    }

    /// One thread never opens a second shard.
    #[test]
    fn one_thread_uses_one_shard() {
        let allocator = h200();
        let live: Vec<_> = (0..500u64)
            .map(|i| allocator.allocate(&upload(256 << (i % 12))).unwrap())
            .collect();
        let t = live[0].memory_type as usize;
        assert_eq!(allocator.types[t].vector.open_shards(), 1);
        assert!(live.iter().all(|a| a.location.shard == 0));
        for a in live {
            allocator.free(a).unwrap();
        }
        allocator.validate().unwrap();
    }

    /// The driver's budgets are read every 16 frames, not every frame (a
    /// read costs about 10 µs on the H200), and every frame while a heap is
    /// near its budget; other processes' usage shows within 16 frames.
    #[test]
    fn budgets_are_read_every_sixteen_frames_and_every_frame_near_the_budget() {
        let allocator = h200();
        let device = allocator.device();
        let at_start = device.budget_calls();
        for _ in 0..160 {
            allocator.begin_frame();
        }
        assert_eq!(device.budget_calls() - at_start, 10);
        // Another process takes 1 GiB of heap 0: seen within 16 frames.
        device.set_external_usage(0, 1 << 30);
        let before = allocator.budgets.view(0).usage;
        for _ in 0..16 {
            allocator.begin_frame();
        }
        assert_eq!(allocator.budgets.view(0).usage, before + (1 << 30));
        // Near the budget (above 3/4 of it): every frame.
        device.set_heap_budget(0, Some(1 << 30));
        for _ in 0..16 {
            allocator.begin_frame();
        }
        let near = device.budget_calls();
        for _ in 0..10 {
            allocator.begin_frame();
        }
        assert_eq!(device.budget_calls() - near, 10);
    }
}
