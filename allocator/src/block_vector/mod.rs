//! A block vector: the one owner of a list of blocks, whether a memory type's
//! default blocks or a pool's. Allocating, freeing, trimming, resetting and
//! tearing down are written here once; the allocator decides *which* vector
//! and *how* (dedicated or shared, the range request), the vector does the
//! rest. What a vector keeps of freed memory is in `retention.rs`, how it
//! plans defragmentation moves in `plan.rs`.
//!
//! Locking: the vector's blocks are split into *shards*, each a list with
//! its own mutex and counters on cache lines of its own. A vector starts
//! with one shard; a thread that finds every shard in use (its `try_lock`
//! fails on each) opens the next one, up to [`MAX_SHARDS`], so shards appear
//! only under contention and a single thread never commits more blocks than
//! one list would. A thread allocates in its *home* shard (a thread-local
//! hint), falls over to any free one, and a free goes to the shard that
//! holds the block (recorded in the allocation's location). Allocation ids
//! come from the allocator's counter in batches per shard. No lock or atomic
//! written on the allocate/free path is shared by the whole vector.
//!
//! Memory: the shards grow as one list would (issue 37: four threads had
//! committed 1.6x what one thread did for the same live set). Before a
//! shard makes memory, it looks for room in every other shard, waiting for
//! each lock in turn (`allocate_in_other_shards` with `Wait::Yes`): a driver call
//! costs far more than the wait. A new block is sized from the
//! shard's share of the live bytes (`shard_share`), so shards that grow at
//! once add up to one list's growth; and the count of empty blocks kept is
//! the vector's, not each shard's (`empty_blocks_elsewhere`).
//!
//! Device memory is created and freed outside the shards' locks (see
//! [`crate::memory`]); a lock is held only while a range is found and
//! committed, or freed. Code that visits every shard (reset, validate,
//! statistics) takes the shards' locks in index order; the allocation path
//! holds at most one lock while it only *tries* others, and waits for
//! another shard's lock only while it holds none, so no order can deadlock.
//! A block is counted once: in the shard that holds it (its allocations in
//! that shard's counters, its bytes in the vector's block counters).

#![forbid(unsafe_code)]

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Mutex, MutexGuard};

use crate::allocation::{Allocation, ListRef, Location};
use crate::block::{Block, Meta, PoolAlgorithm};
use crate::block_list::{BlockList, ListConfig};
use crate::corruption;
use crate::desc::AllocationDesc;
use crate::device::DedicatedTo;
use crate::error::Error;
use crate::memory::{self, Doomed, MemoryRequest, PoolCaps};
use crate::priority::MemoryPriority;
use crate::range::{Range, RangeRequest};
use crate::recycle::RecycleBin;
use crate::stats::{Counters, ShardCounters, Usage};

mod plan;
mod retention;

pub(crate) use plan::MoveBudget;

/// What a vector needs from its allocator for one operation.
#[derive(Clone, Copy)]
pub(crate) struct Env<'a> {
    /// The device, object count and heap budgets.
    pub memory: memory::Context<'a>,
    /// The allocator's id, stamped into every allocation.
    pub allocator: u32,
    /// `bufferImageGranularity`.
    pub granularity: u64,
    /// Where new allocations' ids come from.
    pub next_id: &'a std::sync::atomic::AtomicU64,
    /// The allocator's frame counter ([`crate::Allocator::begin_frame`]),
    /// recorded in each allocation for its age.
    pub frame: u64,
    /// The allocator's other memory types: their kept memory, freed when
    /// new memory would raise the allocator's committed peak
    /// ([`BlockVector::make_room`]), and their room, taken before new memory
    /// is made ([`OtherTypes::place_in_siblings`]).
    pub others: &'a dyn OtherTypes,
}

/// An allocator's memory types as one of them sees the others.
pub(crate) trait OtherTypes {
    /// Frees kept memory (empty blocks, recycled dedicated memory) of memory
    /// types other than `except`, down to each type's own retention limit
    /// ([`crate::policy::retain_limit`]), until `bytes` are freed; returns the
    /// bytes freed.
    fn release_others(&self, except: u32, bytes: u64) -> u64;

    /// Places `desc`, which memory type `memory_type`'s default blocks have
    /// no room for, in room that the existing blocks of its siblings have
    /// ([`crate::policy::sibling_types`]), making no memory; `None` where
    /// none has room (a sibling that can't take it for any other reason,
    /// closed or its placement rules, counts as no room: the type's own
    /// path then decides).
    fn place_in_siblings(&self, memory_type: u32, desc: &AllocationDesc<'_>) -> Option<Allocation>;

    /// A memory type's live bytes fell below half their recent high-water
    /// mark with freed memory kept ([`crate::policy::fell_from_peak`]): the
    /// allocator releases it once it has been idle a while
    /// ([`crate::StrategySettings::idle_release_ms`]).
    fn arm_idle_release(&self);
}

/// How a vector's blocks are configured.
#[derive(Debug)]
pub(crate) struct VectorConfig {
    pub memory_type: u32,
    pub heap: u32,
    pub host_visible: bool,
    /// `HOST_VISIBLE` without `HOST_COHERENT` (see [`BlockVector::non_coherent`]).
    pub non_coherent: bool,
    /// The type's heap is system memory a discrete device reaches over the
    /// bus ([`crate::policy::pinned_heap`]).
    pub pinned: bool,
    pub algorithm: PoolAlgorithm,
    pub list: ListConfig,
    /// The pool's caps; `None` for a memory type's default blocks.
    pub caps: Option<PoolCaps>,
    /// Bytes of freed dedicated memory kept for reuse (0: none): at most
    /// this ([`crate::AllocatorDesc::recycle_bytes`]) ...
    pub recycle_bytes: u64,
    /// ... and at least this, its share of the heap (1/16), or the live
    /// bytes if between them ([`crate::policy::recycle_cap`]).
    pub recycle_heap_share: u64,
    pub list_ref: ListRef,
    /// Live allocations from which a TLSF block makes runs of slots
    /// ([`crate::AllocatorDesc::small_runs_from`]).
    pub runs_from: u32,
    /// The pool's name (debug names); `None` for default blocks.
    pub pool_name: Option<Box<str>>,
    /// Where the vector's decisions sit on the front
    /// ([`crate::policy::point`]).
    pub strategy: crate::Strategy,
}

/// A shared-block placement: the range to find and where the allocation
/// starts inside it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SharedPlacement {
    pub request: RangeRequest,
    /// Bytes from the range's start to the allocation (the corruption
    /// margin's lead, else 0).
    pub lead: u64,
    /// The corruption margin filled around the allocation (0: none).
    pub margin: u64,
}

/// A dedicated placement: the memory object's size and whether it names the
/// resource (`VkMemoryDedicatedAllocateInfo`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct DedicatedPlacement {
    pub size: u64,
    /// The resource to name in `VkMemoryDedicatedAllocateInfo`, if any.
    pub named: Option<DedicatedTo>,
    /// Whether the memory may be reused for another allocation once freed
    /// (only memory that names no resource).
    pub recyclable: bool,
    /// A file descriptor to import the memory from (borrowed).
    pub import_fd: Option<i32>,
}

/// The error of a free that names a block the list doesn't hold (a bug).
#[cold]
fn missing_block(block: u32) -> Error {
    Error::Invariant(format!("free: block {block} does not exist"))
}

/// Whether a search of the other shards waits for their locks
/// ([`BlockVector::allocate_in_other_shards`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Only shards whose lock is free now.
    No,
    /// Each shard's lock in turn.
    Yes,
}

/// The error of a location that names a shard the vector doesn't have.
#[cold]
fn missing_shard(shard: u8) -> Error {
    Error::Invariant(format!("shard {shard} does not exist"))
}

/// A range allocator's refusal of a free, as the allocator's error (a bug).
#[cold]
fn invariant(e: crate::range::RangeError) -> Error {
    Error::Invariant(e.to_string())
}

/// Which kind of list a vector holds: where its allocations may take
/// memory of their own, and which of the adaptive policy's shortcuts apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ListKind {
    /// A memory type's default blocks (TLSF): sized and bounded by the
    /// adaptive policy, with a recycle bin and sibling types.
    Default,
    /// A TLSF pool's blocks: the size and count its description gives.
    Pool,
    /// A linear pool's blocks: its whole capacity, no memory of their own
    /// unless the driver requires it.
    LinearPool,
}

/// What freeing found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FreeOutcome {
    /// The range was freed.
    Freed,
    /// The range was freed, and its corruption margins were damaged.
    Corrupted,
    /// The pool was reset since the allocation was made: nothing to do.
    AlreadyFree,
}

/// The most shards a vector opens (a linear vector keeps one: its ring or
/// stack is one block).
pub(crate) const MAX_SHARDS: usize = 16;

thread_local! {
    /// This thread's preferred shard, taken modulo a vector's open shards;
    /// `usize::MAX` until the thread first allocates.
    static HOME: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Hands each thread a different first home.
static NEXT_HOME: AtomicUsize = AtomicUsize::new(0);

#[cfg(test)]
thread_local! {
    /// Tests: this thread finds every shard but the one it locks first busy
    /// when it only tries their locks (see `contend_for_test`).
    static CONTENDED: Cell<bool> = const { Cell::new(false) };
}

/// Tests: from now on this thread allocates in shard `home` (taken modulo
/// the open shards) and, with `contended`, finds every other shard busy
/// whenever it only *tries* a lock (the worst a crowd of threads can do to
/// it; a lock it waits for it still gets). A deterministic stand-in for
/// threads colliding.
#[cfg(test)]
pub(crate) fn contend_for_test(home: usize, contended: bool) {
    set_home(home);
    CONTENDED.with(|c| c.set(contended));
}

/// What a teardown does with mapped blocks that still hold an allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeakedBlocks {
    /// Kept allocated and mapped: a leaked mapping may still use them.
    Keep,
    /// Freed with the rest: the caller promised no mapping is used again.
    Free,
}

/// What [`BlockVector::close`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Close {
    /// Closed: it held no allocation.
    Closed,
    /// Another call closed it first.
    AlreadyClosed,
    /// Not closed: it holds this many allocations.
    Live(u64),
}

/// This thread's home index (a hint: callers take it modulo what they have).
pub(crate) fn home() -> usize {
    HOME.with(|h| {
        let home = h.get();
        if home != usize::MAX {
            return home;
        }
        let home = NEXT_HOME.fetch_add(1, Ordering::Relaxed);
        h.set(home);
        home
    })
}

fn set_home(shard: usize) {
    HOME.with(|h| h.set(shard));
}

/// One shard: a list of blocks, its lock and its counters, alone on its
/// cache lines (128 bytes: adjacent-line prefetch pairs 64-byte lines).
/// `repr(C)`: the counters follow the list, on the line of its `ids`, so an
/// allocation touches two of the shard's lines (the lock's and this one).
#[derive(Debug)]
#[repr(C, align(128))]
struct Shard {
    list: Mutex<BlockList>,
    /// Allocations of this shard (the vector's are the sum), written under
    /// `list`'s lock.
    counters: ShardCounters,
}

/// One list of blocks with everything that counts it.
///
/// `repr(C)`: what an allocation and a free read (the shards, the block
/// size, the open count, the list, the type's flags, the epoch) fills the
/// first cache line; what policy, pools and the recycle bin read follows.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct BlockVector {
    /// The shards; only the first `open` are used.
    shards: Box<[Shard]>,
    /// The size blocks grow to (pools: every block's size).
    pub block_size: u64,
    /// Shards in use, at least 1; grows under contention, never shrinks.
    open: AtomicUsize,
    list_ref: ListRef,
    pub memory_type: u32,
    pub heap: u32,
    /// Bumped by [`Self::reset`]: allocations of an older epoch are free.
    epoch: AtomicU32,
    pub host_visible: bool,
    /// The type's heap is system memory a discrete device reaches over the
    /// bus: memory freed there is kept longer ([`crate::policy::decay_committed_high`]).
    pub pinned: bool,
    pub algorithm: PoolAlgorithm,
    /// `HOST_VISIBLE` without `HOST_COHERENT`: shared allocations are
    /// padded to `nonCoherentAtomSize` so flushing one never touches a
    /// neighbour.
    pub non_coherent: bool,
    /// Set by [`Self::close`] (a pool being destroyed) while it holds every
    /// shard's lock; read by every placement under the lock of the shard it
    /// places in, so a placement either ends before the close counts the
    /// allocations or sees the vector closed and places nothing. (On the
    /// second line: written once, it stays shared in every core's cache.)
    closed: AtomicBool,
    /// Live allocations from which a new TLSF block makes runs of slots
    /// (read when a block is made).
    runs_from: u32,
    /// The pool's caps; `None` for default blocks.
    pub caps: Option<PoolCaps>,
    /// Freed dedicated blocks kept for reuse (default blocks only).
    recycle: Option<Mutex<RecycleBin>>,
    /// The vector's blocks (recycled ones included): created and freed
    /// rarely, next to a driver call, so one set of counters serves every
    /// shard. Allocations are counted per shard.
    blocks: Counters,
    /// The recent high-water mark of the live bytes, for the retention
    /// policy of default blocks ([`crate::policy`]); updated when memory is
    /// created, when a block empties and once a frame.
    high_water: AtomicU64,
    /// The recent high-water mark of the vector's committed bytes (blocks
    /// and recycle bin): raised when memory is created, decayed once a frame
    /// ([`crate::policy::decay_committed_high`]). Freed memory below it is
    /// kept ([`crate::policy::retain_below_peak`]).
    committed_high: AtomicU64,
    /// The pool's name, for debug names of its memory; `None` for default
    /// blocks.
    pool_name: Option<Box<str>>,
    /// [`VectorConfig::strategy`].
    strategy: crate::Strategy,
}

// The layout [`BlockVector`] promises: its hot fields in its first 64 bytes.
const _: () = {
    assert!(std::mem::offset_of!(BlockVector, non_coherent) < 64);
};

// The layout [`Shard`] promises: the counters on one cache line (and
// `BlockList`'s own assertion: its hot fields on the lock's line).
const _: () = {
    assert!(
        std::mem::offset_of!(Shard, counters) / 64
            == (std::mem::offset_of!(Shard, counters) + 15) / 64
    );
};

impl BlockVector {
    pub fn new(config: VectorConfig) -> Self {
        let count = if matches!(config.algorithm, PoolAlgorithm::Linear(_)) {
            1
        } else {
            MAX_SHARDS
        };
        let shards = (0..count)
            .map(|i| {
                let list = if i == 0 {
                    config.list
                } else {
                    // A pool's `min_blocks` live in the first shard.
                    ListConfig {
                        min_blocks: 0,
                        ..config.list
                    }
                };
                Shard {
                    list: Mutex::new(BlockList::new(list)),
                    counters: ShardCounters::default(),
                }
            })
            .collect();
        Self {
            memory_type: config.memory_type,
            heap: config.heap,
            host_visible: config.host_visible,
            pinned: config.pinned,
            algorithm: config.algorithm,
            non_coherent: config.non_coherent,
            block_size: config.list.block_size,
            caps: config.caps,
            epoch: AtomicU32::new(0),
            closed: AtomicBool::new(false),
            list_ref: config.list_ref,
            runs_from: config.runs_from,
            shards,
            open: AtomicUsize::new(1),
            recycle: (config.recycle_bytes > 0).then(|| {
                Mutex::new(RecycleBin::new(
                    config.recycle_heap_share,
                    config.recycle_bytes,
                ))
            }),
            blocks: Counters::default(),
            high_water: AtomicU64::new(0),
            committed_high: AtomicU64::new(0),
            pool_name: config.pool_name,
            strategy: config.strategy,
        }
    }

    /// The largest new default block the policy would make now
    /// ([`crate::policy::Point::block_cap`]; `u64::MAX`: [`Self::block_size`]).
    pub fn block_cap(&self, env: Env<'_>) -> u64 {
        self.point(env).block_cap
    }

    /// Where this vector's next decision sits on the front, from the
    /// pressure on its heap ([`crate::policy::point`]). Default blocks
    /// only: a pool's blocks keep the size and count its description gives.
    fn point(&self, env: Env<'_>) -> crate::policy::Point {
        let (usage, limit) = env.memory.budgets.pressure(self.heap);
        crate::policy::point(self.strategy, usage, limit, self.block_size)
    }

    /// Which kind of list the vector holds: a memory type's default blocks,
    /// a pool's, or a linear pool's. Whether it is a pool's (it has caps) is
    /// read from the list it names: on the cache line the allocation reads
    /// anyway.
    #[inline]
    pub fn kind(&self) -> ListKind {
        let in_pool = matches!(self.list_ref, ListRef::Pool(_));
        debug_assert_eq!(in_pool, self.caps.is_some());
        // A type's default blocks are always TLSF.
        debug_assert!(in_pool || !self.is_linear());
        match (in_pool, self.is_linear()) {
            (false, _) => ListKind::Default,
            (true, false) => ListKind::Pool,
            (true, true) => ListKind::LinearPool,
        }
    }

    /// Whether the adaptive policy ([`crate::policy`]) sizes this vector's
    /// blocks and bounds what it keeps: a memory type's default blocks (a
    /// pool's blocks have the size and count its description gives).
    fn adaptive(&self) -> bool {
        self.caps.is_none()
    }

    /// Bytes of live allocations in the vector (every shard's counters).
    fn live_bytes(&self) -> u64 {
        self.usage().allocation_bytes
    }

    /// The vector's blocks and allocations: every shard's counters summed
    /// (recycled blocks included). Takes no lock.
    pub fn usage(&self) -> Usage {
        let mut usage = self.blocks.snapshot();
        for shard in &self.shards[..self.open_shards()] {
            usage.add(&shard.counters.snapshot());
        }
        usage
    }

    /// How many shards are open.
    pub fn open_shards(&self) -> usize {
        self.open.load(Ordering::Acquire).min(self.shards.len())
    }

    /// Locks a shard to allocate in: the thread's home if free, else any
    /// open shard that is free; if every open shard is busy, opens the next
    /// one (up to [`MAX_SHARDS`]), else waits for the home.
    ///
    /// Inline up to the home's lock (the common case); the search for
    /// another shard is out of line.
    #[inline]
    fn lock_any(&self) -> (usize, MutexGuard<'_, BlockList>) {
        if self.shards.len() == 1 {
            return (0, self.shards[0].list.lock());
        }
        let open = self.open_shards();
        // One open shard (every single-threaded program): no thread-local
        // look-up.
        let home = if open == 1 { 0 } else { home() % open };
        if let Some(list) = self.shards[home].list.try_lock() {
            return (home, list);
        }
        self.lock_any_contended(home, open)
    }

    /// [`Self::lock_any`] once the home shard (`home`, of `open` open
    /// shards) was busy.
    #[inline(never)]
    fn lock_any_contended(&self, home: usize, open: usize) -> (usize, MutexGuard<'_, BlockList>) {
        for step in 1..open {
            let shard = (home + step) % open;
            // Borrowed, not adopted: the home stays. Adopting the shard
            // that happened to be free moved threads onto each other's
            // homes, where they collided again (H200, 16 threads in one
            // type: 5.5M pairs/s adopting, 40-43M keeping the home).
            if let Some(list) = self.try_shard(shard) {
                return (shard, list);
            }
        }
        if open < self.shards.len() {
            // Only one racing thread opens shard `open`; the others see it
            // open and lock it too: the next try spreads them.
            let _ = self
                .open
                .compare_exchange(open, open + 1, Ordering::AcqRel, Ordering::Relaxed);
            set_home(open);
            return (open, self.shards[open].list.lock());
        }
        (home, self.shards[home].list.lock())
    }

    /// Locks `shard`'s list.
    #[inline]
    fn lock(&self, shard: u8) -> Result<MutexGuard<'_, BlockList>, Error> {
        match self.shards.get(usize::from(shard)) {
            Some(s) => Ok(s.list.lock()),
            None => Err(missing_shard(shard)),
        }
    }

    /// Opens `count` shards at once (tests: as many threads as that
    /// collided).
    #[cfg(test)]
    pub(crate) fn open_for_test(&self, count: usize) {
        self.open
            .store(count.clamp(1, self.shards.len()), Ordering::Release);
    }

    /// Holds `shard`'s lock (tests: a thread that finds it busy).
    #[cfg(test)]
    pub(crate) fn hold_shard(&self, shard: usize) -> MutexGuard<'_, BlockList> {
        self.shards[shard].list.lock()
    }

    /// Every shard's list, locked in index order: the unopened ones too, so
    /// a shard opened by a racing allocation can't escape a reset or a
    /// teardown (an unopened shard's list is empty and its lock free).
    fn lock_all(&self) -> Vec<MutexGuard<'_, BlockList>> {
        self.shards.iter().map(|s| s.list.lock()).collect()
    }

    /// Whether the vector places with a linear algorithm.
    pub fn is_linear(&self) -> bool {
        matches!(self.algorithm, PoolAlgorithm::Linear(_))
    }

    /// The corruption margin this vector's shared allocations get from the
    /// allocator's `debug_margin`: all of it where its memory is
    /// host-visible (the margin is written and checked through the
    /// mapping), none elsewhere.
    #[inline]
    pub fn margin(&self, debug_margin: u64) -> u64 {
        if self.host_visible {
            debug_margin
        } else {
            0
        }
    }

    /// Places a request in the free range of an existing block (the
    /// thread's shard, then the others free right now), making no block;
    /// `None` where none has room.
    pub fn allocate_in_existing(
        &self,
        env: Env<'_>,
        placement: &SharedPlacement,
        desc: &AllocationDesc<'_>,
    ) -> Option<Result<Allocation, Error>> {
        self.allocate_in_blocks(env, placement, desc, Wait::No)
    }

    /// Places a request about to be given memory of its own in an existing
    /// block, as [`Self::allocate_in_existing`] does, and then in the other
    /// shards whose locks were busy, waiting for each in turn: making
    /// memory is a driver call, and memory made while room lay in a busy
    /// shard multiplies the committed bytes by the threads (issue 37, as
    /// [`Self::allocate_shared`] does before a new block). `None` where no
    /// block has room.
    pub fn allocate_in_existing_before_memory(
        &self,
        env: Env<'_>,
        placement: &SharedPlacement,
        desc: &AllocationDesc<'_>,
    ) -> Option<Result<Allocation, Error>> {
        self.allocate_in_blocks(env, placement, desc, Wait::Yes)
    }

    /// [`Self::allocate_in_existing`] (`Wait::No`) or
    /// [`Self::allocate_in_existing_before_memory`] (`Wait::Yes`).
    fn allocate_in_blocks(
        &self,
        env: Env<'_>,
        placement: &SharedPlacement,
        desc: &AllocationDesc<'_>,
        wait: Wait,
    ) -> Option<Result<Allocation, Error>> {
        let (shard, mut list) = self.lock_any();
        if self.is_closed() {
            return Some(Err(self.closed_error()));
        }
        if let Some((block, range)) = list
            .allocate(&placement.request)
            .or_else(|| list.allocate_reclaiming(&placement.request))
        {
            let id = list.next_id(env.next_id);
            return Some(self.finish_ok(env, shard, &mut list, block, range, placement, desc, id));
        }
        drop(list);
        match wait {
            Wait::No => self.allocate_in_other_shards(env, shard, placement, desc, Wait::No),
            Wait::Yes => self.allocate_in_all_other_shards(env, shard, placement, desc),
        }
    }

    /// The room of every shard other than `shard` before memory is made:
    /// those free right now first, then each of the others' locks waited
    /// for in turn (holding none).
    fn allocate_in_all_other_shards(
        &self,
        env: Env<'_>,
        shard: usize,
        placement: &SharedPlacement,
        desc: &AllocationDesc<'_>,
    ) -> Option<Result<Allocation, Error>> {
        self.allocate_in_other_shards(env, shard, placement, desc, Wait::No)
            .or_else(|| self.allocate_in_other_shards(env, shard, placement, desc, Wait::Yes))
    }

    /// Places a request in the blocks of the shards other than `shard`;
    /// `None` where none has room.
    ///
    /// - [`Wait::No`]: only the shards whose lock is free right now (no
    ///   waiting for another thread), their blocks' free ranges;
    /// - [`Wait::Yes`]: each shard's lock in turn (holding no other), the
    ///   kept runs of their blocks included: the vector's room, all of it,
    ///   before memory is made. Making memory is a driver call; waiting for
    ///   a lock held while another thread places or frees one range costs
    ///   far less, and a shard that grew while room lay in the others
    ///   multiplied the committed memory by the threads (issue 37).
    fn allocate_in_other_shards(
        &self,
        env: Env<'_>,
        shard: usize,
        placement: &SharedPlacement,
        desc: &AllocationDesc<'_>,
        wait: Wait,
    ) -> Option<Result<Allocation, Error>> {
        let open = self.open_shards();
        for other in (0..open).filter(|&o| o != shard) {
            let list = match wait {
                Wait::No => self.try_shard(other),
                Wait::Yes => Some(self.shards[other].list.lock()),
            };
            let Some(mut list) = list else {
                continue;
            };
            if self.is_closed() {
                return Some(Err(self.closed_error()));
            }
            let placed = match wait {
                Wait::No => list.allocate(&placement.request),
                Wait::Yes => list
                    .allocate(&placement.request)
                    .or_else(|| list.allocate_reclaiming(&placement.request)),
            };
            if let Some((block, range)) = placed {
                let id = list.next_id(env.next_id);
                return Some(
                    self.finish_ok(env, other, &mut list, block, range, placement, desc, id),
                );
            }
        }
        None
    }

    /// Another thread's shard, if its lock is free right now (tests may
    /// have every other shard found busy: see `contend_for_test`).
    #[inline]
    fn try_shard(&self, shard: usize) -> Option<MutexGuard<'_, BlockList>> {
        #[cfg(test)]
        if CONTENDED.with(Cell::get) {
            return None;
        }
        self.shards[shard].list.try_lock()
    }

    /// How many empty shared blocks the open shards other than `shard`
    /// hold, of those free right now (a policy estimate: it never waits).
    #[cold]
    fn empty_blocks_elsewhere(&self, shard: usize) -> u32 {
        if self.open_shards() <= 1 {
            return 0;
        }
        (0..self.open_shards())
            .filter(|&other| other != shard)
            .filter_map(|other| self.try_shard(other))
            .map(|list| list.empty_blocks().count() as u32)
            .sum()
    }

    /// The part of `live` (the vector's live bytes or their mark; `total`
    /// are its live bytes now) that shard `shard` sizes its next block
    /// from: in proportion to the shard's own live bytes, so that shards
    /// that grow side by side add up to the growth of one list (a quarter
    /// of the live set, not a quarter per shard: issue 37). With one shard
    /// open, `live` itself; a shard that holds nothing yet, an equal share.
    fn shard_share(&self, shard: usize, live: u64, total: u64) -> u64 {
        let open = self.open_shards() as u64;
        if open <= 1 {
            return live;
        }
        let own = self
            .shards
            .get(shard)
            .map_or(0, |s| s.counters.snapshot().allocation_bytes);
        if own == 0 || total == 0 {
            return live / open;
        }
        // In u128: `live` and `own` may be anything up to a heap's size.
        let share = u128::from(live) * u128::from(own.min(total)) / u128::from(total);
        u64::try_from(share).unwrap_or(live)
    }

    /// The sizes to try for a new block of `list` (the shard locked) that
    /// must hold `needed` bytes, best first
    /// ([`BlockList::next_block_sizes`]); with `target`, cut to the committed
    /// target of the shared blocks ([`crate::policy::block_room`]) where the
    /// policy applies one.
    fn new_block_sizes(
        &self,
        env: Env<'_>,
        shard: usize,
        list: &BlockList,
        needed: u64,
        target: bool,
    ) -> std::iter::Take<crate::block_list::Sizes> {
        let usage = self.usage();
        let adaptive = self.adaptive();
        // This shard's empty and dedicated blocks are counted here: the
        // others are only tried (this one's lock is held).
        let own = if adaptive {
            self.dedicated_bytes()
                .saturating_add(list.dedicated_bytes())
        } else {
            0
        };
        let room = if target && adaptive {
            let retained = self.retained_bytes().saturating_add(list.empty_bytes());
            let high = self.committed_high.load(Ordering::Relaxed);
            // The target is the shared blocks': memory of its own holds
            // exactly its allocation and would dilute it.
            crate::policy::block_room(
                usage.allocation_bytes.saturating_sub(own),
                usage
                    .block_bytes
                    .saturating_sub(retained)
                    .saturating_sub(own),
                needed,
                high.saturating_sub(usage.block_bytes),
            )
        } else {
            u64::MAX
        };
        let live = usage
            .allocation_bytes
            .max(self.high_water.load(Ordering::Relaxed));
        let live = if adaptive && !self.host_visible {
            crate::policy::growth_live(live, own, self.block_size)
        } else {
            live
        };
        // Each shard grows by its share: the shards together by the
        // vector's growth.
        let live = self.shard_share(shard, live, usage.allocation_bytes);
        // The most a new block should take: the point on the front's cap
        // where the policy sizes blocks, else what is left of a pool's budget.
        let limit = if adaptive {
            self.point(env).block_cap
        } else {
            self.caps.as_ref().map_or(u64::MAX, |caps| {
                caps.budget
                    .saturating_sub(caps.committed.load(Ordering::Acquire))
            })
        };
        list.next_block_sizes(
            needed,
            live,
            env.memory.budgets.policy_free_bytes(self.heap),
            env.memory.objects_scarce(),
            room,
            limit,
        )
    }

    /// Whether a large request of `needed` bytes that found no room in an
    /// existing block ([`Self::allocate_in_existing`]) gets memory of its
    /// own rather than a new shared block: where the committed target cuts
    /// the block the policy would make for it
    /// ([`crate::policy::large_request_takes_own`]).
    pub fn large_request_takes_own(&self, env: Env<'_>, needed: u64) -> bool {
        let (shard, list) = self.lock_any();
        let planned = self.new_block_sizes(env, shard, &list, needed, true).next();
        let untargeted = self
            .new_block_sizes(env, shard, &list, needed, false)
            .next();
        drop(list);
        match (planned, untargeted) {
            (Some(planned), Some(untargeted)) => {
                crate::policy::large_request_takes_own(planned, untargeted)
            }
            _ => false,
        }
    }

    /// Places an allocation in an existing block, or in a new one.
    ///
    /// # Errors
    /// [`Error::TooLarge`] when no block the vector may create can hold the
    /// range; any error of creating device memory.
    pub fn allocate_shared(
        &self,
        env: Env<'_>,
        placement: &SharedPlacement,
        desc: &AllocationDesc<'_>,
    ) -> Result<Allocation, Error> {
        let (shard, mut list) = self.lock_any();
        if self.is_closed() {
            return Err(self.closed_error());
        }
        if let Some((block, range)) = list.allocate(&placement.request) {
            let id = list.next_id(env.next_id);
            // The common case: built here, in the caller's slot.
            return Ok(self.finish(env, shard, &mut list, block, range, placement, desc, id));
        }
        self.allocate_shared_new(env, placement, desc, shard, list)
    }

    /// [`Self::allocate_shared`] once the locked shard's blocks (`list`)
    /// had no room: another shard's, recycled memory or a new block. Out of
    /// line: the `Block`s it holds (aligned to cache lines) and its large
    /// frame stay off the common path's stack.
    #[inline(never)]
    fn allocate_shared_new(
        &self,
        env: Env<'_>,
        placement: &SharedPlacement,
        desc: &AllocationDesc<'_>,
        shard: usize,
        mut list: MutexGuard<'_, BlockList>,
    ) -> Result<Allocation, Error> {
        // Runs kept empty in the blocks give their room back before memory
        // is made.
        if let Some((block, range)) = list.allocate_reclaiming(&placement.request) {
            let id = list.next_id(env.next_id);
            return self.finish_ok(env, shard, &mut list, block, range, placement, desc, id);
        }
        drop(list);
        // Room in another shard's blocks costs less than a new block: look
        // in the ones that are free right now, then wait for the others'
        // locks (one at a time, holding none).
        if let Some(result) = self.allocate_in_all_other_shards(env, shard, placement, desc) {
            return result;
        }
        // Sized once no shard had room (the home's lock taken again: its
        // own empty and dedicated bytes are read under it).
        let sizes: Vec<u64> = {
            let list = self.shards[shard].list.lock();
            self.new_block_sizes(env, shard, &list, placement.request.size, true)
                .collect()
        };
        // Room in a sibling type's blocks (the same heap, every property of
        // this type and more) costs less than memory made here: mostly the
        // blocks a transient upload type keeps empty on a device with a
        // resizable BAR. A type's default blocks only, for a request that
        // left the choice of memory to the allocator.
        if self.kind() == ListKind::Default
            && desc.options.dedicated == crate::desc::DedicatedPolicy::Auto
        {
            if let Some(allocation) = env.others.place_in_siblings(self.memory_type, desc) {
                return Ok(allocation);
            }
        }
        let too_large = Error::TooLarge {
            size: desc.size,
            max: self.block_size,
        };
        let mut last_error = too_large.clone();
        // The block to be made, not the request: what it adds beyond the
        // request counts against the committed high-water mark too.
        let first = sizes.first().copied().unwrap_or(placement.request.size);
        // Recycled dedicated memory of about the block's size is a block
        // already made.
        if let Some(block) = self.recycled_as_shared(env, placement.request.size, first) {
            let mut list = self.shards[shard].list.lock();
            if self.is_closed() {
                drop(list);
                self.destroy_block(env, block);
                return Err(self.closed_error());
            }
            let index = list.insert(block);
            if let Some(range) = list
                .block_mut(index)
                .and_then(|b| b.allocate(&placement.request))
            {
                let id = list.next_id(env.next_id);
                return self.finish_ok(env, shard, &mut list, index, range, placement, desc, id);
            }
            let block = list.remove(index);
            drop(list);
            if let Some(block) = block {
                self.destroy_block(env, block);
            }
        }
        self.make_room(env, first.max(placement.request.size));
        for size in sizes {
            let block = match self.create_block(env, size, desc.options.within_budget) {
                Ok(block) => block,
                Err(e @ Error::OutOfDeviceMemory { .. }) => {
                    last_error = e;
                    continue;
                }
                Err(e) => {
                    // A cap or budget: no smaller block helps either.
                    last_error = e;
                    break;
                }
            };
            let mut list = self.shards[shard].list.lock();
            if self.is_closed() {
                drop(list);
                self.destroy_block(env, block);
                return Err(self.closed_error());
            }
            let index = list.insert(block);
            let range = list
                .block_mut(index)
                .and_then(|b| b.allocate(&placement.request));
            match range {
                Some(range) => {
                    let id = list.next_id(env.next_id);
                    return self
                        .finish_ok(env, shard, &mut list, index, range, placement, desc, id);
                }
                None => {
                    // Alignment or granularity padding made the request larger
                    // than the whole block: give the block back.
                    let block = list.remove(index);
                    drop(list);
                    if let Some(block) = block {
                        self.destroy_block(env, block);
                    }
                    last_error = too_large.clone();
                }
            }
        }
        // No new block (a pool's caps, a budget, the device): another
        // shard's blocks may still have room, this time waiting for their
        // locks, one at a time, so a capped pool never fails for being
        // sharded.
        for other in 0..self.open_shards() {
            let mut list = self.shards[other].list.lock();
            if self.is_closed() {
                return Err(self.closed_error());
            }
            if let Some((block, range)) = list.allocate(&placement.request) {
                let id = list.next_id(env.next_id);
                return self.finish_ok(env, other, &mut list, block, range, placement, desc, id);
            }
        }
        Err(last_error)
    }

    /// Gives an allocation memory of its own, reusing freed dedicated memory
    /// of about the same size where the vector keeps some.
    ///
    /// # Errors
    /// Any error of creating device memory.
    pub fn allocate_dedicated(
        &self,
        env: Env<'_>,
        placement: &DedicatedPlacement,
        desc: &AllocationDesc<'_>,
    ) -> Result<Allocation, Error> {
        let kind = desc.kind.range_kind();
        let priority = desc.options.priority.or_else(|| self.pool_priority());
        // Memory made with a priority of its own is not reused for another
        // request (which may want another).
        let recyclable = self.recycle.is_some() && placement.recyclable && priority.is_none();
        let reused = match &self.recycle {
            Some(bin) if recyclable => bin.lock().take(placement.size),
            _ => None,
        };
        let block = match reused {
            Some(mut block) => {
                block.reuse_dedicated(kind);
                // Named for its new holder.
                memory::name(
                    env.memory.device,
                    env.memory.objects,
                    block.memory,
                    &self.label(Some(desc.options.tag)),
                );
                block
            }
            None => {
                self.make_room(env, placement.size);
                let created = memory::create(
                    env.memory,
                    &MemoryRequest {
                        memory_type: self.memory_type,
                        heap: self.heap,
                        size: placement.size,
                        dedicated_to: placement.named,
                        host_visible: self.host_visible,
                        within_budget: desc.options.within_budget,
                        pool: self.caps.as_ref(),
                        shared_block: false,
                        priority,
                        label: self.label(Some(desc.options.tag)),
                        export: self.export(),
                        import_fd: placement.import_fd,
                    },
                )?;
                self.blocks.add_block(placement.size, true);
                self.note_committed(env);
                Block::dedicated(
                    created.memory,
                    placement.size,
                    created.host_address,
                    kind,
                    recyclable,
                )
            }
        };
        let range = block.dedicated_range();
        let (shard, mut list) = self.lock_any();
        if self.is_closed() {
            drop(list);
            self.destroy_block(env, block);
            return Err(self.closed_error());
        }
        let index = list.insert(block);
        let whole = SharedPlacement {
            request: RangeRequest {
                size: placement.size,
                alignment: 1,
                kind,
            },
            lead: 0,
            margin: 0,
        };
        let id = list.next_id(env.next_id);
        self.finish_ok(env, shard, &mut list, index, range, &whole, desc, id)
    }

    /// Frees `location`'s range. The corruption margins are checked under
    /// the lock, while the block is known to be live, and only when the
    /// allocation is still current (a reset pool's stale handles touch
    /// nothing).
    ///
    /// `env` is called only when the block empties (to destroy or recycle
    /// it): the common free never builds an [`Env`].
    /// `debug_margin` is the allocator's: it is checked only if this
    /// vector's memory is host-visible ([`Self::margin`], the margin its
    /// allocations got).
    ///
    /// # Errors
    /// [`Error::Invariant`] if the location names no live range (a bug),
    /// boxed: the result of the common free fits in two registers.
    pub fn free<'e>(
        &self,
        env: &dyn Fn() -> Env<'e>,
        location: &Location,
        debug_margin: u64,
    ) -> Result<FreeOutcome, Box<Error>> {
        // The shard looked up once, for its lock and its counters.
        let Some(shard) = self.shards.get(usize::from(location.shard)) else {
            return Err(Box::new(missing_shard(location.shard)));
        };
        let mut list = shard.list.lock();
        if self.epoch.load(Ordering::Relaxed) != location.epoch {
            return Ok(FreeOutcome::AlreadyFree);
        }
        let Some(block) = list.block(location.block) else {
            return Err(Box::new(missing_block(location.block)));
        };
        // The record is read only where some record of the block is marked
        // (`Block::marked`): a free of an unmarked block touches no record.
        let moving = if block.marked != 0 {
            block
                .meta
                .get(location.range.id.slot() as usize)
                .filter(|m| m.live && m.moving && m.range.id == location.range.id)
                .map(|m| m.id)
        } else {
            None
        };
        let margin = self.margin(debug_margin);
        let corrupted = margin > 0
            && block.host_address != 0
            && !block.is_dedicated()
            && !corruption::intact(block.host_address, block.size, &location.range, margin);
        let emptied = list
            .free(location.block, location.range.id, location.range.offset)
            .map_err(|e| Box::new(invariant(e)))?;
        if emptied {
            self.free_emptied(env, list, location, moving);
        } else {
            Self::freed_in_shard(shard, &mut list, location, moving);
        }
        Ok(if corrupted {
            FreeOutcome::Corrupted
        } else {
            FreeOutcome::Freed
        })
    }

    /// The end of [`Self::free`] under the shard's lock: the counters, and a
    /// pending move of the allocation cancelled.
    #[inline]
    fn freed_under_lock(&self, list: &mut BlockList, location: &Location, moving: Option<u64>) {
        Self::freed_in_shard(
            &self.shards[usize::from(location.shard)],
            list,
            location,
            moving,
        );
    }

    /// [`Self::freed_under_lock`] with the shard at hand.
    #[inline]
    fn freed_in_shard(
        shard: &Shard,
        list: &mut BlockList,
        location: &Location,
        moving: Option<u64>,
    ) {
        shard
            .counters
            .remove_allocations(list, 1, location.range.size);
        if let Some(id) = moving {
            list.cancelled.insert(id);
        }
    }

    /// The end of [`Self::free`] when the range's block is now empty (rare:
    /// kept off the hot path, which then never moves a `Block`): the block
    /// is released if the list keeps no more empty ones, and destroyed (or
    /// recycled) once the lock is dropped.
    #[cold]
    #[inline(never)]
    fn free_emptied<'e>(
        &self,
        env: &dyn Fn() -> Env<'e>,
        mut list: MutexGuard<'_, BlockList>,
        location: &Location,
        moving: Option<u64>,
    ) {
        // Empty blocks past the `keep_empty` count are kept within the
        // retention limit (default blocks; a pool keeps only the count).
        // When a shared block of default blocks empties, before the counters
        // drop the freed range, the live high-water mark is raised to the
        // live bytes (what the retention limit of later frees and frames
        // starts from); the limit itself is asked only when the list holds
        // more empty blocks than it keeps. It takes the recycle bin's lock
        // under the shard's, the one nesting of the two (no path takes a
        // shard's lock while holding the bin's).
        let live = if self.adaptive()
            && list
                .block(location.block)
                .is_some_and(|b| !b.is_dedicated())
        {
            let live = self.live_bytes();
            // Read first: the mark is usually above the live bytes, and a
            // load is cheaper than `fetch_max`'s locked compare-and-swap.
            if live > self.high_water.load(Ordering::Relaxed) {
                self.high_water.fetch_max(live, Ordering::Relaxed);
            }
            live
        } else {
            0
        };
        // The list's own empty bytes (given by the list) are counted here:
        // the other shards are only tried (this one's lock is held).
        let point = self.adaptive().then(|| self.point(env()));
        let retain = |own_empty: u64| {
            let Some(point) = point else {
                return 0;
            };
            if point.keep_all {
                return u64::MAX;
            }
            if !point.retain && !point.below_peak {
                return 0;
            }
            let elsewhere = self.retained_bytes();
            let in_use = self
                .usage()
                .block_bytes
                .saturating_sub(elsewhere.saturating_add(own_empty));
            let high = self.committed_high.load(Ordering::Relaxed);
            // The frame's hysteresis (see `end_frame`): kept until twice
            // the room below the committed high-water mark; new memory
            // trims it to the room itself first (`make_room`).
            let below_peak = crate::policy::retain_below_peak(high, in_use, 0);
            let limit = if point.retain {
                self.retain_limit(live.saturating_sub(location.range.size), live)
            } else {
                0
            }
            .max(below_peak.saturating_mul(2));
            limit.saturating_sub(elsewhere)
        };
        // The empty blocks the other shards hold (those free right now):
        // the count a vector keeps is the vector's.
        let elsewhere = self.empty_blocks_elsewhere(usize::from(location.shard));
        let doomed = list.release_emptied(location.block, elsewhere, retain);
        self.freed_under_lock(&mut list, location, moving);
        drop(list);
        let recycle = point.is_some_and(|p| p.recycle);
        if let Some(block) = doomed {
            let doomed = match &self.recycle {
                Some(bin) if block.recyclable && recycle => {
                    bin.lock().keep(block, self.live_bytes())
                }
                _ => vec![block],
            };
            let env = env();
            for block in doomed {
                self.destroy_block(env, block);
            }
        }
        // Memory kept after the live set halved is released once the
        // allocator has been idle a while, frames or not.
        if point.is_some()
            && crate::policy::fell_from_peak(
                self.live_bytes(),
                self.high_water.load(Ordering::Relaxed),
            )
            && self.retained_bytes() > 0
        {
            env().others.arm_idle_release();
        }
    }

    /// Creates `count` empty blocks of the full block size up front (a
    /// pool's `min_blocks`).
    ///
    /// # Errors
    /// The first error of creating device memory; the blocks made before it
    /// stay in the list (the caller tears the vector down).
    pub fn reserve_blocks(&self, env: Env<'_>, count: u32) -> Result<(), Error> {
        for _ in 0..count {
            let block = self.create_block(env, self.block_size, false)?;
            self.shards[0].list.lock().insert(block);
        }
        Ok(())
    }

    /// Frees every allocation at once (a linear pool's per-frame reset):
    /// dedicated blocks are released, shared blocks kept and cleared, and
    /// every handle made before becomes stale.
    pub fn reset(&self, env: Env<'_>) {
        let doomed = {
            // Every shard locked while the epoch moves: a free sees either
            // the old epoch and its range, or the new one.
            let mut lists = self.lock_all();
            self.epoch.fetch_add(1, Ordering::Relaxed);
            let mut doomed: Vec<Block> = Vec::new();
            for (shard, list) in lists.iter_mut().enumerate() {
                let mut count = 0u64;
                let mut bytes = 0u64;
                let mut dedicated = Vec::new();
                for (index, block) in list.iter() {
                    count += block.allocation_count() as u64;
                    bytes += block.allocated_bytes();
                    if block.is_dedicated() {
                        dedicated.push(index);
                    }
                }
                doomed.extend(dedicated.into_iter().filter_map(|i| list.remove(i)));
                list.iter_mut().for_each(Block::clear);
                self.shards[shard]
                    .counters
                    .remove_allocations(list, count, bytes);
            }
            doomed
        };
        for block in doomed {
            self.destroy_block(env, block);
        }
    }

    /// Frees every empty block above `min_blocks`, and the kept dedicated
    /// memory.
    pub fn trim(&self, env: Env<'_>) {
        let mut blocks: Vec<Block> = self
            .lock_all()
            .iter_mut()
            .flat_map(|l| l.take_empty())
            .collect();
        if let Some(bin) = &self.recycle {
            blocks.extend(bin.lock().drain());
        }
        for block in blocks {
            self.destroy_block(env, block);
        }
    }

    /// Closes the vector (a pool being destroyed) if it holds no allocation:
    /// under every shard's lock, so no placement is half done, and every
    /// later one sees it closed ([`Self::is_closed`]) and places nothing.
    pub fn close(&self) -> Close {
        let _all = self.lock_all();
        if self.is_closed() {
            return Close::AlreadyClosed;
        }
        let live = self.usage().allocation_count;
        if live > 0 {
            return Close::Live(live);
        }
        self.closed.store(true, Ordering::Relaxed);
        Close::Closed
    }

    /// Whether [`Self::close`] closed it. Read under a shard's lock (which
    /// orders it after the close, whose locks it waited for).
    #[inline(always)]
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// What a placement in a closed vector returns.
    #[cold]
    fn closed_error(&self) -> Error {
        match &self.caps {
            Some(caps) => Error::UnknownPool(caps.id),
            None => Error::Invariant("a memory type's blocks were closed".into()),
        }
    }

    /// Frees every block (the pool or allocator is going away). A block
    /// that still holds allocations and is mapped is *leaked*, not freed,
    /// unless `leaked` says to free it: a leaked [`crate::MappedAllocation`]
    /// may still read and write it, and that must never touch freed memory.
    /// Returns how many were leaked.
    pub fn teardown(&self, env: Env<'_>, leaked_blocks: LeakedBlocks) -> usize {
        let mut blocks: Vec<Block> = self.lock_all().iter_mut().flat_map(|l| l.drain()).collect();
        if let Some(bin) = &self.recycle {
            blocks.extend(bin.lock().drain());
        }
        let mut leaked = 0;
        for block in blocks {
            if leaked_blocks == LeakedBlocks::Keep && block.host_address != 0 && !block.is_empty() {
                leaked += 1;
                continue;
            }
            self.destroy_block(env, block);
        }
        leaked
    }

    /// A pool's shared blocks (those being made included) and its
    /// `max_blocks`; `None` for default blocks.
    pub fn pool_blocks(&self) -> Option<(u32, u32)> {
        self.caps
            .as_ref()
            .map(|caps| (caps.blocks.load(Ordering::Acquire), caps.max_blocks))
    }

    /// The largest free range in any shared block (the largest request that
    /// fits without a new block). Locks the list briefly: one look at each
    /// block's largest size class.
    pub fn largest_free(&self) -> u64 {
        let mut largest = 0;
        self.for_each_list(|list| {
            largest = list
                .iter()
                .filter(|(_, b)| !b.is_dedicated())
                .map(|(_, b)| b.largest_free())
                .fold(largest, u64::max);
        });
        largest
    }

    /// Which list this is.
    pub fn list_ref(&self) -> ListRef {
        self.list_ref
    }

    /// Calls `change` with the record of the live allocation at `location`
    /// with id `id`; `None` when there is none (a reset pool's stale handle).
    pub fn with_meta<R>(
        &self,
        location: &Location,
        id: u64,
        change: impl FnOnce(&mut Meta) -> R,
    ) -> Option<R> {
        let mut list = self.lock(location.shard).ok()?;
        if self.epoch.load(Ordering::Relaxed) != location.epoch {
            return None;
        }
        list.block_mut(location.block)?
            .with_live_meta(location.range.id, id, change)
    }

    /// Declares alias `members` on the live allocation at `location` with id
    /// `id` (and pins it); `None` when there is none.
    pub fn set_aliases(
        &self,
        location: &Location,
        id: u64,
        members: Vec<crate::alias::AliasInfo>,
    ) -> Option<()> {
        let mut list = self.lock(location.shard).ok()?;
        if self.epoch.load(Ordering::Relaxed) != location.epoch {
            return None;
        }
        list.block_mut(location.block)?
            .set_aliases(location.range.id, id, members)
    }

    /// Frees every empty shared block above `min_blocks`; returns how many.
    pub fn release_empty(&self, env: Env<'_>) -> usize {
        let blocks: Vec<Block> = self
            .lock_all()
            .iter_mut()
            .flat_map(|l| l.take_empty())
            .collect();
        let released = blocks.len();
        for block in blocks {
            self.destroy_block(env, block);
        }
        released
    }

    /// What the vector's memory is, for its debug name: a shared block, or
    /// with `Some(tag)` dedicated memory.
    fn label<'a>(&'a self, dedicated: Option<&'a str>) -> crate::names::MemoryLabel<'a> {
        crate::names::MemoryLabel {
            memory_type: self.memory_type,
            pool: self.pool_name.as_deref(),
            algorithm: self.algorithm,
            dedicated,
        }
    }

    /// The memory object holding the allocation at `location`, and its size.
    ///
    /// # Errors
    /// [`Error::InvalidPool`] when its pool was reset since.
    pub fn block_of(
        &self,
        location: &crate::allocation::Location,
    ) -> Result<(crate::device::DeviceMemory, u64), Error> {
        self.with_block_at(location, |block| Ok((block.memory, block.size)))
    }

    /// Runs `f` on the block holding the allocation at `location`, under its
    /// shard's lock (so its memory is not freed meanwhile).
    ///
    /// # Errors
    /// [`Error::InvalidPool`] when its pool was reset since; what `f` returns.
    fn with_block_at<R>(
        &self,
        location: &crate::allocation::Location,
        f: impl FnOnce(&Block) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let shard = self
            .shards
            .get(usize::from(location.shard))
            .ok_or_else(|| missing_shard(location.shard))?;
        let list = shard.list.lock();
        if self.epoch.load(Ordering::Relaxed) != location.epoch {
            return Err(Error::InvalidPool(
                "the allocation's pool was reset since: it holds no memory",
            ));
        }
        let block = list
            .block(location.block)
            .ok_or_else(|| missing_block(location.block))?;
        f(block)
    }

    /// The handle types the pool's memory is exportable with.
    pub fn export(&self) -> crate::external::ExternalMemoryHandleTypes {
        self.caps.as_ref().map(|c| c.export).unwrap_or_default()
    }

    /// The priority of the pool's new blocks (`None` outside pools).
    pub fn pool_priority(&self) -> Option<MemoryPriority> {
        self.caps.as_ref().and_then(|c| c.priority.get())
    }

    /// Changes the priority of the dedicated allocation at `location`
    /// under its shard's lock (so its memory is not freed meanwhile).
    ///
    /// # Errors
    /// [`Error::NotDedicated`] for an allocation in a shared block;
    /// [`Error::InvalidPool`] when its pool was reset since (it holds no
    /// memory); [`Error::NotEnabled`] without the extension.
    pub fn set_dedicated_priority(
        &self,
        device: &dyn crate::device::MemoryDevice,
        location: &crate::allocation::Location,
        priority: MemoryPriority,
    ) -> Result<(), Error> {
        self.with_block_at(location, |block| {
            if !block.is_dedicated() {
                return Err(Error::NotDedicated);
            }
            memory::set_priority(device, block.memory, priority)
        })
    }

    /// Sets the pool's priority: its new blocks get it, and every shared
    /// block it has now is changed (under each shard's lock); dedicated
    /// allocations keep the priority they were made with. A block being made by
    /// another thread during the call may keep the old priority.
    ///
    /// # Errors
    /// [`Error::NotEnabled`] without the extension (nothing changes).
    pub fn set_pool_priority(
        &self,
        device: &dyn crate::device::MemoryDevice,
        priority: MemoryPriority,
    ) -> Result<(), Error> {
        let Some(caps) = &self.caps else {
            return Err(Error::Invariant("a pool's vector without caps".into()));
        };
        if !device.limits().pageable_device_local_memory {
            return Err(Error::NotEnabled(memory::PAGEABLE_NOT_ENABLED));
        }
        caps.priority.set(priority);
        for list in self.lock_all() {
            for (_, block) in list.iter().filter(|(_, b)| !b.is_dedicated()) {
                memory::set_priority(device, block.memory, priority)?;
            }
        }
        Ok(())
    }

    /// Calls `visit` with each open shard's list in turn, under its lock.
    pub fn for_each_list(&self, mut visit: impl FnMut(&BlockList)) {
        for shard in &self.shards[..self.open_shards()] {
            visit(&shard.list.lock());
        }
    }

    /// Calls `visit` for each kept dedicated block, under the bin's lock.
    pub fn for_each_recycled(&self, visit: &mut dyn FnMut(&Block)) {
        if let Some(bin) = &self.recycle {
            bin.lock().iter().for_each(visit);
        }
    }

    /// Checks the list and the recycle bin, and that the counters match
    /// them. Returns the vector's usage and its device memory objects.
    ///
    /// # Errors
    /// [`Error::Invariant`] naming what is wrong.
    pub fn validate(&self, name: &str) -> Result<(Usage, u32), Error> {
        let mut usage = Usage::default();
        let mut objects = 0u32;
        let lists = self.lock_all();
        let open = self.open_shards();
        for (shard, list) in lists.iter().enumerate() {
            // Shards open only in order: none past the open ones holds a block.
            if shard >= open && !list.is_empty() {
                return Err(Error::Invariant(format!(
                    "{name}: shard {shard} holds blocks but only {open} are open"
                )));
            }
            list.validate()
                .map_err(|e| Error::Invariant(format!("{name}: shard {shard}: {e}")))?;
            for (_, block) in list.iter() {
                objects += 1;
                usage.add(&Usage {
                    block_count: 1,
                    block_bytes: block.size,
                    allocation_count: block.allocation_count() as u64,
                    allocation_bytes: block.allocated_bytes(),
                    dedicated_count: u32::from(block.is_dedicated()),
                });
            }
        }
        drop(lists);
        let mut kept_ok = true;
        self.for_each_recycled(&mut |block| {
            kept_ok &= block.is_empty() && block.is_dedicated();
            objects += 1;
            usage.add(&Usage {
                block_count: 1,
                block_bytes: block.size,
                dedicated_count: 1,
                ..Usage::default()
            });
        });
        if !kept_ok {
            return Err(Error::Invariant(format!(
                "{name}: a kept block is not an empty dedicated block"
            )));
        }
        let counted = self.usage();
        if counted != usage {
            return Err(Error::Invariant(format!(
                "{name}: counters {counted:?} but blocks hold {usage:?}"
            )));
        }
        Ok((usage, objects))
    }

    fn create_block(&self, env: Env<'_>, size: u64, within_budget: bool) -> Result<Block, Error> {
        let created = memory::create(
            env.memory,
            &MemoryRequest {
                memory_type: self.memory_type,
                heap: self.heap,
                size,
                dedicated_to: None,
                host_visible: self.host_visible,
                within_budget,
                pool: self.caps.as_ref(),
                shared_block: true,
                priority: self.pool_priority(),
                label: self.label(None),
                export: self.export(),
                import_fd: None,
            },
        )?;
        self.blocks.add_block(size, false);
        self.note_committed(env);
        Ok(Block::new(
            created.memory,
            size,
            created.host_address,
            self.algorithm,
            env.granularity,
            self.runs_from,
        ))
    }

    /// Recycled dedicated memory for a new shared block that must hold
    /// `needed` bytes, where one of `planned` bytes would be made
    /// ([`crate::policy::reuse_for_block`]), made a shared block: memory
    /// already committed instead of new memory. Not in pools (no recycle
    /// bin) nor linear lists.
    fn recycled_as_shared(&self, env: Env<'_>, needed: u64, planned: u64) -> Option<Block> {
        if self.kind() != ListKind::Default {
            return None;
        }
        let old = self
            .recycle
            .as_ref()?
            .lock()
            .take_for_block(needed, planned)?;
        self.blocks.remove_block(old.size, true);
        self.blocks.add_block(old.size, false);
        Some(Block::new(
            old.memory,
            old.size,
            old.host_address,
            self.algorithm,
            env.granularity,
            self.runs_from,
        ))
    }

    fn destroy_block(&self, env: Env<'_>, block: Block) {
        let dedicated = block.is_dedicated();
        self.blocks.remove_block(block.size, dedicated);
        memory::destroy(
            env.memory,
            Doomed {
                heap: self.heap,
                memory: block.memory,
                size: block.size,
                host_address: block.host_address,
                pool: self.caps.as_ref().map(|caps| (caps, !dedicated)),
            },
        );
    }

    /// [`Self::finish`] as the allocate path's rarer places return it (a new
    /// block, another shard): the `Allocation` is built in place in the
    /// `Result` (no copy on the way out). The common place (room in an
    /// existing block of the locked shard) inlines [`Self::finish`] instead:
    /// a call with nine arguments cost ~20 instructions per allocation.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn finish_ok(
        &self,
        env: Env<'_>,
        shard: usize,
        list: &mut BlockList,
        block_index: u32,
        range: Range,
        placement: &SharedPlacement,
        desc: &AllocationDesc<'_>,
        id: u64,
    ) -> Result<Allocation, Error> {
        Ok(self.finish(env, shard, list, block_index, range, placement, desc, id))
    }

    /// Records a committed range as a handed-out allocation with id `id`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn finish(
        &self,
        env: Env<'_>,
        shard: usize,
        list: &mut BlockList,
        block_index: u32,
        range: Range,
        placement: &SharedPlacement,
        desc: &AllocationDesc<'_>,
        id: u64,
    ) -> Allocation {
        self.shards[shard].counters.add_allocation(list, range.size);
        let block = list
            .block_mut(block_index)
            .expect("the block that just placed the range is in the list");
        // The range holds `lead + size + margin` bytes (checked when the
        // request was built), so neither sum overflows.
        let offset = range.offset + placement.lead;
        if placement.margin > 0 && block.host_address != 0 && !block.is_dedicated() {
            corruption::fill(block.host_address, block.size, &range, offset, desc.size);
        }
        if !desc.options.tag.is_empty() {
            block.tags.insert(range.offset, desc.options.tag.into());
        }
        block.set_meta(
            id,
            range,
            placement.request.alignment,
            placement.lead,
            placement.margin,
            desc.size,
            desc.kind,
            env.frame,
        );
        if desc.options.pinned {
            block.pin(range.id);
        }
        Allocation {
            id,
            memory: block.memory,
            offset,
            size: desc.size,
            memory_type: self.memory_type,
            kind: desc.kind,
            host_address: if block.host_address == 0 {
                0
            } else {
                block.host_address + offset as usize
            },
            dedicated: block.is_dedicated(),
            location: Location {
                allocator: env.allocator,
                list: self.list_ref,
                shard: shard as u8,
                block: block_index,
                range,
                epoch: self.epoch.load(Ordering::Relaxed),
            },
        }
    }
}
