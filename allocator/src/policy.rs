//! The allocation policy of a memory type's default blocks, as pure
//! functions: how large the next block is, and how much freed memory (empty
//! blocks and recycled dedicated memory) a type keeps for reuse.
//!
//! The goal is a bounded ratio of committed to live bytes without paying for
//! it in `vkAllocateMemory` calls (0.1–7 ms each on some drivers):
//!
//! - **Growth relative to the live set.** A new block is about
//!   1/[`GROWTH_DIVISOR`] of the bytes the type already holds live, at least
//!   [`MIN_BLOCK_SIZE`] and at most the type's largest block (the
//!   [`crate::AllocatorDesc::block_size`], smaller on small heaps), and never
//!   smaller than the request. A part-filled new block therefore wastes at
//!   most about a quarter of the live set, whatever the trace; the number of
//!   blocks grows with the logarithm of the live set, as with doubling.
//! - **The heap.** A block is never made larger than what is left of the heap
//!   (its budget where the driver reports one, else its size, less what the
//!   process uses of it) when a smaller one can still hold the request, so
//!   the allocator does not commit past a heap that its live set fits in
//!   twice.
//! - **A committed target near a full heap.** A new block is no larger
//!   than the larger of 1/[`HEAP_SHARE_DIVISOR`] of what is left of the
//!   heap and what keeps the committed bytes in use of the type's shared
//!   blocks within 1 + 1/[`COMMITTED_TARGET_DIVISOR`] of the live bytes in
//!   them, or below its committed high-water mark ([`block_room`]); never
//!   smaller than the request. The growth step counts textures with memory
//!   of their own; without the target, a block made for a small request at
//!   the live peak of a heap mostly filled by them (lavapipe's 2 GiB) is a
//!   quarter of the live set and mostly empty. The target leaves memory of
//!   its own out on both sides: it holds exactly its allocation, and
//!   counted in, it would let one new block be a quarter of the textures'
//!   bytes too. A large heap never binds it.
//! - **Recycled dedicated memory up to the live set.** The recycle bin
//!   holds up to the type's live bytes, between 1/16 of the heap and the
//!   configured bytes ([`recycle_cap`]): 1/16 of a small heap is less than
//!   any texture given memory of its own there.
//! - **Large requests near a full heap: room in a block, else memory of
//!   their own.** A request above 1/[`LARGE_REQUEST_DIVISOR`] of the type's
//!   largest block ([`large_request`]) goes where an existing block has
//!   room; where none has, and the committed target cuts the block the
//!   policy would make for it ([`large_request_takes_own`]), it gets memory
//!   of its own of its size: that block would be about the request anyway,
//!   and would outlive it, held by the small allocations placed beside it.
//!   Elsewhere (a heap the live set leaves mostly free) it gets a new block
//!   as any request: the block's room serves the next mid-size request.
//! - **Recyclable memory of its own in whole granules.** Memory of its own
//!   that names no resource (and may be reused) is made in whole
//!   [`DEDICATED_GRANULE`]s ([`recyclable_size`]), so that freed memory
//!   serves a later request a few bytes larger (textures of one size class
//!   differ by their mip tails).
//! - **Retention with hysteresis.** Freed memory kept for reuse is bounded by
//!   [`retain_limit`]: the larger of 1/[`RETAIN_DIVISOR`] of the live set and
//!   the distance from the live set up to 9/8 of its recent high-water mark,
//!   at least [`MIN_BLOCK_SIZE`]. It is applied before new device memory is
//!   made: memory that only refills what was recently live barely raises the
//!   committed peak above the live peak, so a steady churn reuses its memory
//!   instead of freeing and reallocating it every frame; after the live set
//!   shrinks, the high-water mark decays ([`decay_high_water`]) and the
//!   surplus is freed.
//! - **Retention below the committed peak.** A type also keeps what fits
//!   below its own committed high-water mark ([`retain_below_peak`]):
//!   memory kept there can't raise a peak already reached, and each byte of
//!   it reused is a byte not passed to `vkAllocateMemory` again (whose cost
//!   grows with the size on the H200). That mark decays toward the bytes in
//!   use ([`decay_committed_high`], slower than the live one). New memory
//!   that would pass the allocator's committed peak (all types) by more than
//!   1/[`PEAK_TOLERANCE_DIVISOR`] first frees kept memory of its own type,
//!   then of the other types, so keeping memory in one type does not raise
//!   the peak when another grows.
//! - **Room in a sibling type before new memory.** Where a type's blocks
//!   have no room for a request, the existing blocks of a sibling type
//!   ([`sibling_types`]: the same heap, every property and more) take it
//!   before memory is made: on a GPU with a resizable BAR, the blocks that
//!   transient uploads leave empty hold device-local data instead of being
//!   freed while the device-local type makes the same bytes again.
//! - **Pinned system memory is kept longer.** In a [`pinned_heap`] (system
//!   memory a discrete GPU reaches over the bus: readback, and uploads
//!   without a resizable BAR) the driver pins what it allocates, an order
//!   of magnitude dearer per byte than device memory. There the committed
//!   high-water mark decays over about a minute, not seconds, and another
//!   type's growth past the committed peak frees it only after the other
//!   types' kept device memory, smallest block first, and never its largest
//!   kept block: freeing it makes no room in a device heap. Its own type's
//!   limits still bound it.
//! - **A point on the front, from the strategy and the heap's pressure.**
//!   Everything above is the time end. [`point`] says, per decision, how
//!   far a vector moves towards the memory end: [`crate::Strategy::MinMemory`]
//!   always (16 MiB blocks, nothing kept, nothing recycled),
//!   [`crate::Strategy::MinTime`] never (and keeps all freed memory until
//!   its heap is 7/8 used), [`crate::Strategy::Balanced`] as its heap's
//!   usage passes 3/4 and 7/8 of its budget.
//! - **Kept memory comes back without frames.** Once a type's live bytes
//!   fall below half their high-water mark ([`fell_from_peak`]) the
//!   allocator arms a release; the first allocation or free after the
//!   strategy's idle time ([`crate::StrategySettings::idle_release_ms`],
//!   on the device's clock) frees what the live set alone does not keep
//!   and drops both marks, `begin_frame` or not.

#![forbid(unsafe_code)]

use crate::device::MemoryPropertyFlags;

/// A new block holds about 1/4 of the type's live bytes.
pub(crate) const GROWTH_DIVISOR: u64 = 4;

/// The smallest default block.
pub(crate) const MIN_BLOCK_SIZE: u64 = 4 << 20;

/// Blocks of at least this size are whole multiples of it (drivers map
/// device memory in 2 MiB pages).
const GRANULE: u64 = 2 << 20;

/// Freed memory kept regardless of the high-water mark: 1/8 of the live set;
/// and the margin above the high-water mark: 1/8 of it.
pub(crate) const RETAIN_DIVISOR: u64 = 8;

/// Each frame the high-water mark moves 1/64 of the way down to the live set
/// (half way in 44 frames).
pub(crate) const HIGH_WATER_DECAY: u64 = 64;

/// Each frame the committed high-water mark moves 1/256 of the way down to
/// the bytes in use (half way in 177 frames, about 3 s at 60 frames/s).
pub(crate) const COMMITTED_DECAY: u64 = 256;

/// New memory may pass the allocator's committed high-water mark by 1/16
/// of it before other memory types' kept memory is freed to make way.
pub(crate) const PEAK_TOLERANCE_DIVISOR: u64 = 16;

/// `size` rounded up to whole [`GRANULE`]s (saturating).
fn round_up(size: u64) -> u64 {
    size.checked_next_multiple_of(GRANULE).unwrap_or(u64::MAX)
}

/// `size` rounded up to the next power of two (saturating).
fn size_class(size: u64) -> u64 {
    size.checked_next_power_of_two().unwrap_or(u64::MAX)
}

/// A new block's size for small requests with `live` bytes live: about a
/// quarter of them, at least [`MIN_BLOCK_SIZE`].
pub(crate) fn growth_step(live: u64) -> u64 {
    round_up((live / GROWTH_DIVISOR).max(MIN_BLOCK_SIZE))
}

/// Once a type's live bytes reach [`SHARED_GROWTH_FROM`] times its
/// largest block, its shared blocks grow from the bytes live in them
/// ([`growth_live`]).
pub(crate) const SHARED_GROWTH_FROM: u64 = 2;

/// The live bytes a type's next shared block is sized from
/// ([`growth_step`]), where it holds `live` bytes live (or its recent
/// high-water mark), `own` of them in memory of its own, and its largest
/// block is `max_block`: `live`, or where that is at least
/// [`SHARED_GROWTH_FROM`] times `max_block`, `live` less `own`, at least a
/// quarter of that bound (a growth step of at least 1/8 of `max_block`).
///
/// Applied to memory types that are not host-visible (a discrete GPU's
/// device memory), as [`minor_preference_takes_own`]: on lavapipe's one
/// host-visible type it moved a standard trace by +14% in the simulator.
///
/// Memory of its own never goes in a shared block. On the H200's
/// independent family 1.5-1.9 GiB of the 2 GiB live set are textures of
/// their own, so a quarter of the live set made blocks of 190-256 MiB for
/// the 300-400 MiB of small allocations, and at the committed peaks those
/// blocks held 2-30% of their bytes. Below the bound (the standard corpus's
/// live sets of a few hundred MiB, whose memory of its own is a few render
/// targets) the step is left as it was: there, sizing from the shared bytes
/// alone moved single traces' committed peaks by up to +7.9%
/// (BENCHMARKS.md).
pub(crate) fn growth_live(live: u64, own: u64, max_block: u64) -> u64 {
    let from = max_block.saturating_mul(SHARED_GROWTH_FROM);
    if live < from {
        live
    } else {
        live.saturating_sub(own).max(from / 4)
    }
}

/// The size of the next default block for a request of `needed` bytes.
///
/// - `live`: bytes the memory type holds in live allocations;
/// - `max_block`: the type's largest block;
/// - `heap_free`: bytes of the heap not used by the process;
/// - `scarce`: device memory objects are running short
///   (`maxMemoryAllocationCount`): then the largest block, so the objects
///   left hold as much as they can;
/// - `room`: [`block_room`] (`u64::MAX`: no committed target): where it is
///   more than 1/[`HEAP_SHARE_DIVISOR`] of `heap_free`, the block is at
///   most that (at least the request rounded up, and [`MIN_BLOCK_SIZE`]).
///
/// Never less than `needed`: a request larger than `max_block` gets a block
/// of its own size (the caller decides whether that is allowed).
pub(crate) fn block_size(
    needed: u64,
    live: u64,
    max_block: u64,
    heap_free: u64,
    scarce: bool,
    room: u64,
) -> u64 {
    let grow = if scarce { max_block } else { growth_step(live) };
    let mut size = grow.min(max_block);
    if size < needed {
        // A request larger than the growth step: a block of the next size
        // class, so that it is reused by requests of about the same size.
        size = size_class(needed).min(max_block.max(needed));
    }
    if !scarce {
        // Near a heap the live set fills, no more than the committed
        // target allows: a block made for a small request at the live peak
        // would otherwise be a quarter of the live set and mostly empty.
        let room = round_up(room.max(heap_free / HEAP_SHARE_DIVISOR));
        size = size.min(room.max(round_up(needed)).max(MIN_BLOCK_SIZE));
    }
    // Past what is left of the heap: no more than the request needs.
    if size > heap_free {
        size = heap_free.max(needed);
    }
    size.max(needed)
}

/// A new block may bring a type's committed bytes in use up to
/// 1 + 1/[`COMMITTED_TARGET_DIVISOR`] of its live bytes (the request's
/// included) before it shrinks toward the request ([`block_room`]).
pub(crate) const COMMITTED_TARGET_DIVISOR: u64 = 4;

/// Whatever the live set, a new block may take 1/[`HEAP_SHARE_DIVISOR`] of
/// what is left of the heap: the committed target binds only on a heap that
/// the live set fills a good part of.
pub(crate) const HEAP_SHARE_DIVISOR: u64 = 8;

/// How large a new block may be without raising the type's committed bytes
/// much past its live ones, for a request of `needed` bytes with `live`
/// bytes live in shared blocks, `in_use` committed bytes of shared blocks
/// holding them (kept memory left out: it is freed before new memory
/// passes the committed peak; memory of its own left out of both: it holds
/// exactly its allocation) and
/// `below_peak` bytes left below the type's committed high-water mark
/// (memory made there raises no peak): the larger of what keeps `in_use`
/// within 1 + 1/[`COMMITTED_TARGET_DIVISOR`] of the live bytes and
/// `below_peak`. [`block_size`] applies it only where it is more than
/// 1/[`HEAP_SHARE_DIVISOR`] of the heap that is left.
pub(crate) fn block_room(live: u64, in_use: u64, needed: u64, below_peak: u64) -> u64 {
    let live = live.saturating_add(needed);
    live.saturating_add(live / COMMITTED_TARGET_DIVISOR)
        .saturating_sub(in_use)
        .max(below_peak)
}

/// Bytes of freed memory (empty blocks and recycled dedicated memory) a
/// memory type may keep with `live` bytes live and a high-water mark of
/// `high_water` (see the module documentation).
pub(crate) fn retain_limit(live: u64, high_water: u64) -> u64 {
    let peak = high_water.saturating_add(high_water / RETAIN_DIVISOR);
    (live / RETAIN_DIVISOR)
        .max(peak.saturating_sub(live))
        .max(MIN_BLOCK_SIZE)
}

/// The high-water mark after a frame: the live set if it is higher, else
/// 1/[`HIGH_WATER_DECAY`] of the way down to it.
pub(crate) fn decay_high_water(high_water: u64, live: u64) -> u64 {
    decay(high_water, live, HIGH_WATER_DECAY)
}

/// `high` moved 1/`divisor` of the way down to `floor` (rounded up), or
/// `floor` if it is higher.
fn decay(high: u64, floor: u64, divisor: u64) -> u64 {
    if floor >= high {
        floor
    } else {
        high - (high - floor).div_ceil(divisor)
    }
}

/// Bytes of freed memory a memory type may keep so that its committed
/// bytes, once `needed` more are made, stay within `committed_high`, their
/// recent high-water mark, with `in_use` bytes committed in memory that
/// holds live allocations.
///
/// Memory kept below a committed peak the type has already reached cannot
/// raise that peak, and every byte of it reused is a byte not passed to
/// `vkAllocateMemory` again (whose cost grows with the size on some
/// drivers: 6.8 ms for 256 MiB on the H200). This is what keeps a staging
/// block that a 40 MiB upload left empty, every few frames, rather than
/// freeing it and making it again.
pub(crate) fn retain_below_peak(committed_high: u64, in_use: u64, needed: u64) -> u64 {
    committed_high.saturating_sub(in_use.saturating_add(needed))
}

/// The committed high-water mark after a frame: 1/[`COMMITTED_DECAY`] of
/// the way down to `in_use` (the committed bytes that hold live
/// allocations), so what is kept below it is released over a few seconds
/// once it goes unused; in a [`pinned_heap`], 1/[`PINNED_COMMITTED_DECAY`]
/// of the way (about a minute). (It rises when memory is made, not here: a
/// mark that rose to what is committed would never release what is kept.)
pub(crate) fn decay_committed_high(committed_high: u64, in_use: u64, pinned: bool) -> u64 {
    let divisor = if pinned {
        PINNED_COMMITTED_DECAY
    } else {
        COMMITTED_DECAY
    };
    decay(committed_high, in_use, divisor)
}

/// Where one decision sits on the front between committed memory and
/// driver calls ([`point`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Point {
    /// The largest new default block (`u64::MAX`: the type's own largest).
    pub block_cap: u64,
    /// Freed memory is kept within the retention limits ([`retain_limit`],
    /// [`retain_below_peak`]); without it, empty blocks beyond the list's
    /// `keep_empty` count are freed as they empty and all kept memory before
    /// new memory is made.
    pub retain: bool,
    /// Without `retain`: freed memory is still kept below the type's
    /// committed high-water mark ([`retain_below_peak`]), where it raises
    /// no committed peak (new memory trims it to the room below the mark
    /// first) and saves the calls of a churn: the strict memory end of a
    /// full heap keeps none.
    pub below_peak: bool,
    /// Freed memory of its own goes in the recycle bin.
    pub recycle: bool,
    /// Kept memory is not trimmed to the retention limits: only when the
    /// heap runs short, or the allocator has been idle
    /// ([`crate::StrategySettings::idle_release_ms`]).
    pub keep_all: bool,
}

impl Point {
    /// The time end: today's adaptive policy, unchanged.
    pub const TIME: Point = Point {
        block_cap: u64::MAX,
        retain: true,
        below_peak: true,
        recycle: true,
        keep_all: false,
    };
    /// Part way: new blocks at most 1/[`PRESSURE_BLOCK_DIVISOR`] of the
    /// type's largest; freed memory kept and recycled as at the time end.
    const MIDDLE: Point = Point {
        block_cap: 0,
        retain: true,
        below_peak: true,
        recycle: true,
        keep_all: false,
    };
    /// The memory end of a heap near full: nothing kept.
    pub const MEMORY: Point = Point {
        block_cap: crate::strategy::MIN_MEMORY_BLOCK_SIZE,
        retain: false,
        below_peak: false,
        recycle: false,
        keep_all: false,
    };
    /// [`crate::Strategy::MinMemory`]'s point: the memory end, keeping
    /// only what lies below the committed peak. Without it, the simulated
    /// H200's streaming-churn trace made a block per burst: modelled driver
    /// time 2,583 ms against 69 at the time end.
    pub const MIN_MEMORY: Point = Point {
        below_peak: true,
        ..Point::MEMORY
    };
}

/// Between 3/4 and 7/8 of its budget used, a heap's new blocks are at most
/// 1/4 of the type's largest block (64 MiB of 256).
pub(crate) const PRESSURE_BLOCK_DIVISOR: u64 = 4;

/// The point a decision of `strategy` sits at on a heap the process uses
/// `usage` bytes of, against `limit` (its budget, from
/// `VK_EXT_memory_budget`, else its size), for a type whose largest block
/// is `max_block`:
///
/// - [`crate::Strategy::MinMemory`]: the memory end, always, keeping
///   what lies below the committed peak ([`Point::MIN_MEMORY`]);
/// - [`crate::Strategy::MinTime`]: the time end, keeping all freed memory
///   ([`Point::keep_all`]) until the heap is at 7/8 of its limit, then the
///   time end as `Balanced` has it;
/// - [`crate::Strategy::Balanced`]: the time end below 3/4 of the limit
///   (the H200's 141 GB with any trace here: the default before
///   strategies, unchanged), new blocks cut to
///   1/[`PRESSURE_BLOCK_DIVISOR`] of the largest up to 7/8, and the memory
///   end above: there the next block that does not fit fails the
///   application, and a 16 MiB block or freed memory given back may be
///   what lets it fit.
///
/// The thresholds, measured in the simulator on lavapipe's 2 GiB heap
/// (docs/experiments/policy-strategies.md): sliding from 1/2 and 3/4, with
/// no recycling in between, took the recorded 4K streaming trace from 40
/// to 131 `vkAllocateMemory` calls at the same committed peak; from 3/4
/// and 7/8 it stays at 40, and the held-out 2 GiB family (seed 13) fails
/// 43 allocations against 49 before strategies, at 1.16x the calls.
pub(crate) fn point(strategy: crate::Strategy, usage: u64, limit: u64, max_block: u64) -> Point {
    // Compared in u128: usage and limit may be anything a driver reports.
    let (usage, limit) = (u128::from(usage), u128::from(limit));
    let rising = usage * 4 >= limit * 3;
    let near_full = usage * 8 >= limit * 7;
    match strategy {
        crate::Strategy::MinMemory => Point::MIN_MEMORY,
        crate::Strategy::MinTime if !near_full => Point {
            keep_all: true,
            ..Point::TIME
        },
        crate::Strategy::MinTime => Point::TIME,
        crate::Strategy::Balanced => {
            let point = if near_full {
                Point::MEMORY
            } else if rising {
                Point {
                    block_cap: (max_block / PRESSURE_BLOCK_DIVISOR).max(MIN_BLOCK_SIZE),
                    ..Point::MIDDLE
                }
            } else {
                Point::TIME
            };
            // Only a cap below the type's largest block changes anything.
            match budget_block_cap(limit) {
                cap if cap < max_block => Point {
                    block_cap: point.block_cap.min(cap),
                    ..point
                },
                _ => point,
            }
        }
    }
}

/// A `Balanced` heap's new default blocks are at most
/// 1/[`BUDGET_BLOCK_DIVISOR`] of its limit (budget, else size), at any
/// pressure ([`budget_block_cap`]).
///
/// Blocks made while a heap is below 3/4 of its limit outlive the slide to
/// the memory end, and their holes are what fails an application whose
/// budget is near its live set. In the simulator, lavapipe's table with
/// every heap capped at 1.15x each trace's peak live bytes, four corpus
/// seeds (156 traces; docs/experiments/policy-strategies.md, *The budget
/// sizes the blocks*): no cap 115 traces with a failed allocation (1,024
/// allocations), 1/32 16 (37), 1/64 1 (6). 1/64 costs 5.4x the modelled
/// driver time uncapped on that 2 GiB heap and fails the full compaction's
/// goal there (640 MiB committed for 540 live, goal 604); 1/32 costs 1.7x
/// (committed/live geomean 1.30 -> 1.22) and meets it (576). A heap of
/// 8 GiB or more keeps its 256 MiB blocks (the H200's 141 GB: unchanged).
pub(crate) const BUDGET_BLOCK_DIVISOR: u128 = 32;

/// The largest new default block of a `Balanced` heap whose limit is
/// `limit` bytes (compared in u128, as [`point`] reads it):
/// 1/[`BUDGET_BLOCK_DIVISOR`] of it, at least [`MIN_BLOCK_SIZE`].
fn budget_block_cap(limit: u128) -> u64 {
    u64::try_from(limit / BUDGET_BLOCK_DIVISOR)
        .unwrap_or(u64::MAX)
        .max(MIN_BLOCK_SIZE)
}

/// The empty blocks above `min_blocks` a pool of `strategy` keeps, where
/// the allocator's [`crate::AllocatorDesc::keep_empty_blocks`] is
/// `configured`: none at the memory end, all at the time end (its
/// `max_blocks` bounds them), `configured` at `Balanced`.
pub(crate) fn pool_keep_empty(strategy: crate::Strategy, configured: u32) -> u32 {
    match strategy {
        crate::Strategy::MinMemory => 0,
        crate::Strategy::Balanced => configured,
        crate::Strategy::MinTime => u32::MAX,
    }
}

/// Whether a memory type whose live bytes fell to `live` from a recent
/// high-water mark of `high_water` holds memory kept for a churn that may
/// not come back: the live set halved. Its kept memory is released once the
/// allocator has been idle ([`crate::StrategySettings::idle_release_ms`]).
/// A steady churn (the live set within 9/8 of its mark) never asks.
pub(crate) fn fell_from_peak(live: u64, high_water: u64) -> bool {
    live < high_water / 2
}

/// In a [`pinned_heap`] the committed high-water mark moves 1/4096 of the
/// way down each frame (half way in 2,839 frames, about 47 s at 60
/// frames/s).
pub(crate) const PINNED_COMMITTED_DECAY: u64 = 4096;

/// Whether a heap is system memory that a device with memory of its own
/// reaches over the bus (the heap is not `DEVICE_LOCAL`, another heap is):
/// the readback and non-BAR upload memory of a discrete GPU.
///
/// The driver pins such memory when it is allocated, which costs an order
/// of magnitude more per byte than device memory: on the H200 0.94 ms +
/// 0.24 ms per MiB against 0.02 ms per MiB, and frees 1.2 ms against
/// 0.02 ms per MiB (BENCHMARKS.md, *What a driver call costs on the H200*).
/// Memory freed there is kept below the type's committed peak for about a
/// minute instead of seconds ([`decay_committed_high`]), and another type's
/// growth past the allocator's committed peak frees it last, smallest block
/// first, and never the largest block kept (`OtherTypes::release_others`,
/// `BlockVector::release_retained`). On a device whose heaps are all
/// `DEVICE_LOCAL` (integrated, mobile, lavapipe) nothing is pinned.
pub(crate) fn pinned_heap(heap_device_local: bool, device_has_device_local: bool) -> bool {
    !heap_device_local && device_has_device_local
}

/// The properties a sibling type may have beyond the ones of the type whose
/// request it takes ([`sibling_types`]): none that changes how the GPU or
/// the CPU reaches the memory (not `HOST_CACHED`: the GPU snoops cached
/// system memory, and write-combined staging memory is what uploads ask
/// for).
const SIBLING_EXTRA: MemoryPropertyFlags = MemoryPropertyFlags(
    MemoryPropertyFlags::DEVICE_LOCAL.0
        | MemoryPropertyFlags::HOST_VISIBLE.0
        | MemoryPropertyFlags::HOST_COHERENT.0,
);

/// The memory types whose existing blocks may hold a request for memory
/// type `index` that `index`'s own blocks have no room for, as a bit mask,
/// given every type's properties and heap: the other types of the same heap
/// that have every property of `index` and, beyond them, only
/// `DEVICE_LOCAL`, `HOST_VISIBLE` or `HOST_COHERENT` (never cached where
/// `index` is not, lazily allocated, protected or a vendor's special
/// memory).
///
/// The request is placed only where such a block already has room
/// (`BlockVector::allocate_in_existing`); no memory is made for it there. On
/// a discrete GPU with a resizable BAR the device-local type's sibling is
/// the `DEVICE_LOCAL | HOST_VISIBLE` type of the same heap, where transient
/// uploads leave blocks empty or part-used between frames: a buffer placed
/// there (or an image, where its memory type bits allow: not the H200's
/// optimal images) is memory not made twice. Same heap, so the heap's budget is
/// untouched; every property asked for is kept, so the allocation is what
/// its request allows (and more: it may be mapped). Without a resizable
/// BAR the host-visible device memory is a small heap of its own, and no
/// type is a sibling of the device-local one.
///
/// Measured in the simulator (BENCHMARKS.md, *Room in a sibling type*):
/// committed/live and driver time lower together on every GPU table with
/// such a pair, the standard corpus and held-out seeds alike.
pub(crate) fn sibling_types(types: &[(MemoryPropertyFlags, u32)], index: usize) -> u32 {
    let Some(&(flags, heap)) = types.get(index) else {
        return 0;
    };
    types
        .iter()
        .enumerate()
        .take(32)
        .filter(|&(t, &(f, h))| {
            t != index && h == heap && f.contains(flags) && f.0 & !flags.0 & !SIBLING_EXTRA.0 == 0
        })
        .fold(0, |mask, (t, _)| mask | 1 << t)
}

/// The bytes of freed dedicated memory a memory type's recycle bin may hold
/// with `live` bytes live: the live bytes, at least `heap_share` (the
/// configured bytes, at most 1/16 of the heap) and at most `configured`
/// ([`crate::AllocatorDesc::recycle_bytes`]).
///
/// On a small heap 1/16 of it can be less than any texture the driver gives
/// memory of its own (lavapipe's 2 GiB heap: 128 MiB, and textures above
/// half the 256 MiB block are dedicated), so nothing would ever be kept; a
/// bin as large as the live set keeps one without holding more than the
/// live set again ([`retain_limit`] and the committed peak still trim it
/// before new memory is made).
pub(crate) fn recycle_cap(heap_share: u64, configured: u64, live: u64) -> u64 {
    configured.min(heap_share.max(live))
}

/// Requests above 1/4 of the type's largest block are large
/// ([`large_request`]); those above half of it always get memory of their
/// own (`Allocator::wants_dedicated`).
pub(crate) const LARGE_REQUEST_DIVISOR: u64 = 4;

/// Whether a request of `size` bytes, in a memory type whose largest block
/// is `max_block`, is large: placed where an existing block has room, and
/// otherwise given memory of its own where [`large_request_takes_own`]
/// says so, else a new block.
pub(crate) fn large_request(size: u64, max_block: u64) -> bool {
    size > max_block / LARGE_REQUEST_DIVISOR
}

/// Whether a large request that found no room in an existing block gets
/// memory of its own rather than a new shared block, where [`block_size`]
/// would make `planned` bytes for it with the committed target
/// ([`block_room`]) and `untargeted` bytes without it: where the target
/// cuts the block.
///
/// A cut block is about the request (85 MiB texture, 86 MiB block) and
/// outlives it, held by the small allocations placed beside it; memory of
/// its own is freed with it, or kept for the next of about its size. Where
/// nothing cuts the block (a heap the live set leaves mostly free: the
/// H200's), the block is a quarter of the live set and its room serves the
/// next mid-size request; memory of its own there left the blocks without
/// that room (the simulated H200's corpus-31: 1.44 -> 1.69).
pub(crate) fn large_request_takes_own(planned: u64, untargeted: u64) -> bool {
    planned < untargeted
}

/// A request the driver prefers dedicated, below
/// `AllocatorDesc::honour_dedicated_preference_from` but at least half of
/// it, gets memory of its own (in device memory that is not host-visible)
/// where it is at most 1/[`MINOR_PREFERENCE_SHARE`] of the type's live
/// bytes ([`minor_preference_takes_own`]).
pub(crate) const MINOR_PREFERENCE_SHARE: u64 = 16;

/// Whether a request of `size` bytes that the driver prefers dedicated, in
/// a memory type that is not host-visible and holds `live` bytes live, gets
/// memory of its own although it is below `honour_from`
/// (`AllocatorDesc::honour_dedicated_preference_from`): where it is at
/// least half of `honour_from` and at most 1/[`MINOR_PREFERENCE_SHARE`] of
/// the live bytes.
///
/// The block the policy makes for such a request is a quarter of the live
/// set ([`growth_step`], up to the largest block), four times the request
/// or more, and the small allocations placed in the rest of it keep it
/// alive once the texture is freed: on the H200's independent family, at
/// the committed peaks, shared blocks of 190-256 MiB holding 2-5 MiB where
/// textures of 32-43 MiB had been. Memory of its own is freed with the
/// texture, or kept for the next of about its size ([`reuse_for_dedicated`];
/// streamed textures come in a few sizes). Where the request is a larger
/// share of the live set (a renderer's 4K targets, 57-64 MiB in a few
/// hundred MiB) a shared block is mostly the request itself and its room
/// serves the next mid-size one, so nothing changes there. Host-visible
/// memory is left out: requests there are staging buffers that live a few
/// frames, and memory of their own would be made and freed for each (the
/// H200 pins system memory at about 1 ms a call and 0.24 ms a MiB).
pub(crate) fn minor_preference_takes_own(size: u64, honour_from: u64, live: u64) -> bool {
    size < honour_from
        && size >= honour_from / 2
        && size.saturating_mul(MINOR_PREFERENCE_SHARE) <= live
}

/// Memory of its own that names no resource (and may be reused) is made
/// in whole multiples of 64 KiB.
pub(crate) const DEDICATED_GRANULE: u64 = 64 << 10;

/// The bytes of recyclable memory of its own made for a request of `size`
/// bytes: `size` rounded up to whole [`DEDICATED_GRANULE`]s (`size` itself
/// where that overflows).
///
/// Freed memory is reused for requests of at least its size
/// ([`reuse_for_dedicated`]); two textures of one size class differ by a
/// few hundred bytes of mip tail (lavapipe: 89,478,656 and 89,479,424
/// bytes), so without the rounding the larger never reuses the smaller's
/// memory. At most 64 KiB more per allocation of memory of its own (0.1%
/// of a 64 MiB one).
pub(crate) fn recyclable_size(size: u64) -> u64 {
    size.checked_next_multiple_of(DEDICATED_GRANULE)
        .unwrap_or(size)
}

/// Reused memory may be at most 1/8 larger than the allocation it holds.
pub(crate) const REUSE_SLACK_DIVISOR: u64 = 8;

/// Of kept memory of `sizes` (in the order kept, oldest first), the one to
/// reuse for a dedicated allocation of `size` bytes: the smallest of at
/// least `size` and at most 1/[`REUSE_SLACK_DIVISOR`] more (of equal
/// sizes the oldest); its index.
///
/// Kept memory is recycled dedicated memory (memory that names no
/// resource); reusing it saves a `vkAllocateMemory` and its bytes (which the
/// H200 charges per MiB).
pub(crate) fn reuse_for_dedicated(sizes: impl Iterator<Item = u64>, size: u64) -> Option<usize> {
    let limit = size.saturating_add(size / REUSE_SLACK_DIVISOR);
    sizes
        .enumerate()
        .filter(|&(_, s)| s >= size && s <= limit)
        .min_by_key(|&(i, s)| (s, i))
        .map(|(i, _)| i)
}

/// Of recycled dedicated memory of `sizes` (oldest first), the one to make
/// a new shared block of, for a request of `needed` bytes where a block of
/// `planned` bytes would otherwise be made: the largest of `needed` up to
/// `planned` bytes (of equal sizes the oldest); its index.
///
/// Memory already committed instead of new memory: the committed bytes do
/// not grow by more than the planned block would have grown them, and the
/// driver is not called. Without this, recycled memory of a size no later
/// texture asks for is freed before new memory is made
/// ([`retain_below_peak`]) and a block of about its size made again.
pub(crate) fn reuse_for_block(
    sizes: impl Iterator<Item = u64>,
    needed: u64,
    planned: u64,
) -> Option<usize> {
    sizes
        .enumerate()
        .filter(|&(_, s)| s >= needed && s <= planned)
        .min_by_key(|&(i, s)| (std::cmp::Reverse(s), i))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const HEAP: u64 = 1 << 40;

    #[test]
    fn siblings_share_the_heap_and_every_property() {
        use MemoryPropertyFlags as F;
        let dl = F::DEVICE_LOCAL;
        let upload = F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT;
        let staging = F::HOST_VISIBLE | F::HOST_COHERENT;
        let readback = staging | F::HOST_CACHED;
        // A discrete GPU with a resizable BAR (the H200's layout).
        let rebar = [
            (F::NONE, 1),
            (dl, 0),
            (staging, 1),
            (readback, 1),
            (upload, 0),
        ];
        assert_eq!(
            sibling_types(&rebar, 1),
            1 << 4,
            "device-local: the BAR type"
        );
        assert_eq!(
            sibling_types(&rebar, 4),
            0,
            "nothing has more than the BAR type"
        );
        assert_eq!(sibling_types(&rebar, 2), 0, "staging: not cached readback");
        assert_eq!(sibling_types(&rebar, 3), 0);
        assert_eq!(sibling_types(&rebar, 0), 1 << 2, "not the cached type");
        assert_eq!(sibling_types(&rebar, 5), 0, "no such type");
        // Without a resizable BAR the BAR type is a heap of its own.
        let mut bar = rebar;
        bar[4].1 = 2;
        assert_eq!(sibling_types(&bar, 1), 0);
        // Lazily allocated and protected memory are nobody's sibling.
        let mobile = [
            (dl | F::HOST_VISIBLE | F::HOST_COHERENT, 0),
            (dl | F::LAZILY_ALLOCATED, 0),
            (dl | F::PROTECTED, 0),
            (dl, 0),
        ];
        assert_eq!(sibling_types(&mobile, 3), 1);
        assert_eq!(sibling_types(&mobile, 1), 0);
        assert_eq!(sibling_types(&mobile, 0), 0);
    }

    #[test]
    fn first_blocks_are_small() {
        assert_eq!(
            block_size(256, 0, 256 * MIB, HEAP, false, u64::MAX),
            MIN_BLOCK_SIZE
        );
        assert_eq!(
            block_size(256, 8 * MIB, 256 * MIB, HEAP, false, u64::MAX),
            MIN_BLOCK_SIZE
        );
    }

    #[test]
    fn blocks_grow_with_the_live_set_up_to_the_largest_block() {
        assert_eq!(
            block_size(256, 100 * MIB, 256 * MIB, HEAP, false, u64::MAX),
            26 * MIB
        );
        assert_eq!(
            block_size(256, 400 * MIB, 256 * MIB, HEAP, false, u64::MAX),
            100 * MIB
        );
        assert_eq!(
            block_size(256, 4000 * MIB, 256 * MIB, HEAP, false, u64::MAX),
            256 * MIB
        );
        // A small heap's largest block wins over the live set.
        assert_eq!(
            block_size(256, 4000 * MIB, 32 * MIB, HEAP, false, u64::MAX),
            32 * MIB
        );
    }

    #[test]
    fn a_block_always_holds_the_request() {
        // Larger than the growth step: the next power of two.
        assert_eq!(
            block_size(10 * MIB + 1, 0, 256 * MIB, HEAP, false, u64::MAX),
            16 * MIB
        );
        assert_eq!(
            block_size(40 * MIB, 400 * MIB, 256 * MIB, HEAP, false, u64::MAX),
            100 * MIB
        );
        assert_eq!(
            block_size(200 * MIB, 400 * MIB, 256 * MIB, HEAP, false, u64::MAX),
            256 * MIB
        );
        assert_eq!(
            block_size(300 * MIB, 0, 256 * MIB, HEAP, false, u64::MAX),
            300 * MIB
        );
        assert_eq!(
            block_size(u64::MAX, 0, 256 * MIB, HEAP, false, u64::MAX),
            u64::MAX
        );
        assert_eq!(
            block_size(u64::MAX - 5, 0, u64::MAX, u64::MAX, false, u64::MAX),
            u64::MAX
        );
        // Even past the heap.
        assert_eq!(
            block_size(64 * MIB, 0, 256 * MIB, MIB, false, u64::MAX),
            64 * MIB
        );
    }

    #[test]
    fn scarce_objects_get_the_largest_block() {
        assert_eq!(
            block_size(MIB, 0, 256 * MIB, HEAP, true, u64::MAX),
            256 * MIB
        );
        assert_eq!(
            block_size(300 * MIB, 0, 256 * MIB, HEAP, true, u64::MAX),
            300 * MIB
        );
    }

    #[test]
    fn blocks_shrink_to_what_is_left_of_the_heap() {
        assert_eq!(
            block_size(MIB, 800 * MIB, 256 * MIB, 100 * MIB, false, u64::MAX),
            100 * MIB
        );
        assert_eq!(
            block_size(MIB, 800 * MIB, 256 * MIB, 3 * MIB, false, u64::MAX),
            3 * MIB
        );
        assert_eq!(
            block_size(5 * MIB, 0, 256 * MIB, 3 * MIB, false, u64::MAX),
            5 * MIB
        );
    }

    #[test]
    fn growth_keeps_the_slack_of_a_new_block_bounded() {
        // However the live set grows, the newest block is at most a quarter
        // of it (above the smallest block), and the count stays logarithmic.
        let mut live = 0u64;
        let mut committed = 0u64;
        let mut blocks = 0;
        while live < 8 << 30 {
            let size = block_size(64 * 1024, live, 256 * MIB, HEAP, false, u64::MAX);
            assert!(
                size <= (live / 4 + GRANULE).max(MIN_BLOCK_SIZE),
                "{size} for {live}"
            );
            committed += size;
            blocks += 1;
            live = committed;
        }
        assert!(blocks < 64, "{blocks} blocks");
    }

    #[test]
    fn near_a_full_heap_a_new_block_keeps_committed_within_the_target() {
        // lavapipe at its live peak: 1000 MiB live (850 of it in dedicated
        // textures) in 1100 MiB, 900 MiB of the 2 GiB heap left. The growth
        // step would be 250 MiB, mostly empty; the target (5/4 of the live
        // bytes) leaves 151 MiB, more than 900/8.
        let room = block_room(1000 * MIB, 1100 * MIB, MIB, 0);
        assert_eq!(room, 1001 * MIB + 1001 * MIB / 4 - 1100 * MIB);
        assert_eq!(
            block_size(MIB, 1000 * MIB, 256 * MIB, 900 * MIB, false, room),
            152 * MIB
        );
        // Committed already at the target: the request rounded up (at least
        // the smallest block) or an eighth of the heap left, the larger
        // (in whole 2 MiB granules).
        let room = block_room(1000 * MIB, 1300 * MIB, 20 * MIB + 1, 0);
        assert_eq!(room, 0);
        assert_eq!(
            block_size(20 * MIB + 1, 1000 * MIB, 256 * MIB, 900 * MIB, false, room),
            114 * MIB
        );
        assert_eq!(
            block_size(20 * MIB + 1, 1000 * MIB, 256 * MIB, 160 * MIB, false, room),
            22 * MIB
        );
        assert_eq!(
            block_size(MIB, 1000 * MIB, 256 * MIB, 16 * MIB, false, room),
            MIN_BLOCK_SIZE
        );
        // A request larger than the growth step: its size class shrinks too.
        assert_eq!(
            block_size(70 * MIB, 100 * MIB, 256 * MIB, 160 * MIB, false, room),
            70 * MIB
        );
        // Memory below the committed high-water mark raises no peak: the
        // room reaches up to it.
        assert_eq!(
            block_room(1000 * MIB, 1300 * MIB, MIB, 200 * MIB),
            200 * MIB
        );
        // A large heap (the H200's) is never near full: the growth step.
        assert_eq!(
            block_size(MIB, 1000 * MIB, 256 * MIB, HEAP, false, 0),
            250 * MIB
        );
        // Objects running short: the largest block regardless.
        assert_eq!(
            block_size(MIB, 1000 * MIB, 256 * MIB, 900 * MIB, true, 0),
            256 * MIB
        );
        assert_eq!(block_room(u64::MAX, 0, u64::MAX, 0), u64::MAX);
    }

    #[test]
    fn the_recycle_bin_holds_up_to_the_live_set_between_the_heap_share_and_the_configured_bytes() {
        // lavapipe: 512 MiB configured, 1/16 of the 2 GiB heap is 128 MiB,
        // less than any dedicated texture there.
        assert_eq!(recycle_cap(128 * MIB, 512 * MIB, 1000 * MIB), 512 * MIB);
        assert_eq!(recycle_cap(128 * MIB, 512 * MIB, 300 * MIB), 300 * MIB);
        assert_eq!(recycle_cap(128 * MIB, 512 * MIB, 0), 128 * MIB);
        // The H200: the heap's share is the configured bytes already.
        assert_eq!(recycle_cap(512 * MIB, 512 * MIB, 2048 * MIB), 512 * MIB);
        // Reuse turned off stays off.
        assert_eq!(recycle_cap(0, 0, 2048 * MIB), 0);
    }

    #[test]
    fn retention_covers_the_recent_high_water_mark() {
        assert_eq!(retain_limit(800 * MIB, 0), 100 * MIB);
        // Up to 9/8 of the high-water mark.
        assert_eq!(retain_limit(800 * MIB, 1000 * MIB), 325 * MIB);
        assert_eq!(retain_limit(0, 64 * MIB), 72 * MIB);
        // At least one smallest block.
        assert_eq!(retain_limit(0, 0), MIN_BLOCK_SIZE);
        assert_eq!(retain_limit(u64::MAX, u64::MAX), u64::MAX / 8);
    }

    #[test]
    fn memory_below_the_committed_peak_is_kept() {
        // 64 MiB committed at the peak, nothing in use: a 64 MiB empty
        // staging block is kept, and reused for a 40 MiB upload.
        assert_eq!(retain_below_peak(64 * MIB, 0, 0), 64 * MIB);
        assert_eq!(retain_below_peak(64 * MIB, 0, 40 * MIB), 24 * MIB);
        // New memory that would pass the peak: nothing kept.
        assert_eq!(retain_below_peak(64 * MIB, 30 * MIB, 40 * MIB), 0);
        assert_eq!(retain_below_peak(0, 0, 0), 0);
        assert_eq!(retain_below_peak(u64::MAX, u64::MAX, u64::MAX), 0);
        assert_eq!(retain_below_peak(u64::MAX, 0, 0), u64::MAX);
    }

    #[test]
    fn the_committed_peak_decays_to_what_is_in_use() {
        // 1/256 of the way down to the bytes in use.
        assert_eq!(decay_committed_high(256 * MIB, 0, false), 255 * MIB);
        assert_eq!(decay_committed_high(512 * MIB, 256 * MIB, false), 511 * MIB);
        // Never below what is in use.
        assert_eq!(decay_committed_high(10, 9, false), 9);
        assert_eq!(decay_committed_high(10, 20, false), 20);
        // Kept memory is released in the end, whatever is committed.
        let mut high = 1024 * MIB;
        for _ in 0..5000 {
            high = decay_committed_high(high, 16 * MIB, false);
        }
        assert_eq!(high, 16 * MIB);
        assert_eq!(
            decay_committed_high(u64::MAX, 0, false),
            u64::MAX - (u64::MAX / 256 + 1)
        );
    }

    #[test]
    fn pinned_memory_is_kept_about_a_minute() {
        // 1/4096 of the way down in a pinned heap, never below what is in use.
        assert_eq!(decay_committed_high(4096 * MIB, 0, true), 4095 * MIB);
        assert_eq!(decay_committed_high(10, 20, true), 20);
        // Half way down after about 2,839 frames, not 177.
        let (mut pinned, mut device) = (1024 * MIB, 1024 * MIB);
        for _ in 0..177 {
            pinned = decay_committed_high(pinned, 0, true);
            device = decay_committed_high(device, 0, false);
        }
        assert!(
            device <= 515 * MIB && pinned > 980 * MIB,
            "{device} {pinned}"
        );
        for _ in 177..2839 {
            pinned = decay_committed_high(pinned, 0, true);
        }
        assert!((511 * MIB..=513 * MIB).contains(&pinned), "{pinned}");
        // Released in the end.
        for _ in 0..200_000 {
            pinned = decay_committed_high(pinned, 0, true);
        }
        assert_eq!(pinned, 0);
    }

    #[test]
    fn only_system_memory_beside_device_memory_is_pinned() {
        // A discrete GPU's host heap.
        assert!(pinned_heap(false, true));
        // Its device heap; an integrated or mobile device's heaps, all
        // device-local; a device that reports none (a host heap only).
        assert!(!pinned_heap(true, true));
        assert!(!pinned_heap(false, false));
    }

    #[test]
    fn dedicated_allocations_reuse_the_closest_kept_memory_within_an_eighth() {
        let sizes = [100 * MIB, 64 * MIB, 72 * MIB, 64 * MIB];
        assert_eq!(reuse_for_dedicated(sizes.into_iter(), 64 * MIB), Some(1));
        assert_eq!(reuse_for_dedicated(sizes.into_iter(), 63 * MIB), Some(1));
        assert_eq!(reuse_for_dedicated(sizes.into_iter(), 90 * MIB), Some(0));
        // More than 1/8 larger, or smaller: not reused.
        assert_eq!(reuse_for_dedicated(sizes.into_iter(), 56 * MIB), None);
        assert_eq!(reuse_for_dedicated(sizes.into_iter(), 101 * MIB), None);
        assert_eq!(reuse_for_dedicated(std::iter::empty(), 1), None);
        assert_eq!(
            reuse_for_dedicated([u64::MAX].into_iter(), u64::MAX - 1),
            Some(0)
        );
    }

    #[test]
    fn a_new_block_takes_the_largest_recycled_memory_up_to_its_planned_size() {
        let sizes = [100 * MIB, 64 * MIB, 200 * MIB, 100 * MIB, 20 * MIB];
        // A 65 MiB request that would get a 128 MiB block takes 100 MiB
        // (the oldest of two), not 200 (larger than planned) or 64 (too small).
        assert_eq!(
            reuse_for_block(sizes.into_iter(), 65 * MIB, 128 * MIB),
            Some(0)
        );
        assert_eq!(
            reuse_for_block(sizes.into_iter(), 64 * MIB, 64 * MIB),
            Some(1)
        );
        assert_eq!(
            reuse_for_block(sizes.into_iter(), 8 * MIB, 256 * MIB),
            Some(2)
        );
        assert_eq!(reuse_for_block(sizes.into_iter(), 8 * MIB, 16 * MIB), None);
        assert_eq!(
            reuse_for_block(sizes.into_iter(), 201 * MIB, 256 * MIB),
            None
        );
        assert_eq!(reuse_for_block(std::iter::empty(), 1, u64::MAX), None);
    }

    #[test]
    fn large_requests_are_those_above_a_quarter_of_the_largest_block() {
        assert!(!large_request(64 * MIB, 256 * MIB));
        assert!(large_request(64 * MIB + 1, 256 * MIB));
        assert!(large_request(100 * MIB, 256 * MIB));
        // A small heap's largest block (32 MiB): above 8 MiB.
        assert!(!large_request(8 * MIB, 32 * MIB));
        assert!(large_request(9 * MIB, 32 * MIB));
        assert!(!large_request(0, 0));
        assert!(large_request(1, 0));
        assert!(large_request(u64::MAX, u64::MAX));
    }

    #[test]
    fn shared_blocks_grow_from_the_shared_bytes_once_the_live_set_is_large() {
        let block = 256 * MIB;
        // Below twice the largest block: the live bytes, memory of its own
        // included (a renderer's targets).
        assert_eq!(growth_live(500 * MIB, 300 * MIB, block), 500 * MIB);
        // The H200 family: 2 GiB live, 1.7 GiB of it textures of their own.
        assert_eq!(growth_live(2048 * MIB, 1700 * MIB, block), 348 * MIB);
        assert_eq!(
            growth_step(growth_live(2048 * MIB, 1700 * MIB, block)),
            88 * MIB
        );
        // At least a quarter of the bound: a step of 1/8 of the largest block.
        assert_eq!(growth_live(512 * MIB, 512 * MIB, block), 128 * MIB);
        assert_eq!(growth_live(4096 * MIB, 4096 * MIB, block), 128 * MIB);
        assert_eq!(growth_live(u64::MAX, 0, u64::MAX), u64::MAX);
        assert_eq!(growth_live(0, 0, 0), 0);
    }

    #[test]
    fn a_minor_preference_takes_memory_of_its_own_as_a_small_share_of_the_live_set() {
        let honour_from = 64 * MIB;
        // The H200's streamed textures (32 and 42.7 MiB) in a live set of
        // 2 GiB: memory of their own.
        assert!(minor_preference_takes_own(
            32 * MIB,
            honour_from,
            2048 * MIB
        ));
        assert!(minor_preference_takes_own(
            43 * MIB,
            honour_from,
            2048 * MIB
        ));
        // From 1/16 of the live bytes down, not above.
        assert!(minor_preference_takes_own(40 * MIB, honour_from, 640 * MIB));
        assert!(!minor_preference_takes_own(
            40 * MIB,
            honour_from,
            640 * MIB - 1
        ));
        // A 4K target in a renderer's 600 MiB: a shared block.
        assert!(!minor_preference_takes_own(
            63 * MIB,
            honour_from,
            600 * MIB
        ));
        // Below half of the threshold, or at it (honoured anyway): not this rule.
        assert!(!minor_preference_takes_own(
            32 * MIB - 1,
            honour_from,
            2048 * MIB
        ));
        assert!(!minor_preference_takes_own(
            64 * MIB,
            honour_from,
            2048 * MIB
        ));
        // A threshold of 0 honours every preference already.
        assert!(!minor_preference_takes_own(0, 0, u64::MAX));
        assert!(!minor_preference_takes_own(u64::MAX, u64::MAX, u64::MAX));
        assert!(minor_preference_takes_own(u64::MAX / 2, u64::MAX, u64::MAX));
    }

    #[test]
    fn a_large_request_takes_memory_of_its_own_where_the_target_cuts_its_block() {
        const GIB: u64 = 1 << 30;
        let block =
            |live, heap_free, room| block_size(86 * MIB, live, 256 * MIB, heap_free, false, room);
        // lavapipe near its peak: 1.3 GiB committed of a 2 GiB heap, the
        // shared blocks at their target: the block is cut to the request.
        let (planned, untargeted) = (block(GIB, 700 * MIB, 0), block(GIB, 700 * MIB, u64::MAX));
        assert_eq!(planned, 88 * MIB);
        assert_eq!(untargeted, 256 * MIB);
        assert!(large_request_takes_own(planned, untargeted));
        // A heap left mostly free: nothing cuts it.
        let (planned, untargeted) = (block(GIB, 100 * GIB, 0), block(GIB, 100 * GIB, u64::MAX));
        assert_eq!(planned, untargeted);
        assert!(!large_request_takes_own(planned, untargeted));
    }

    #[test]
    fn recyclable_memory_is_made_in_whole_granules() {
        assert_eq!(recyclable_size(64 * MIB), 64 * MIB);
        assert_eq!(recyclable_size(64 * MIB + 1), 64 * MIB + DEDICATED_GRANULE);
        assert_eq!(recyclable_size(1), DEDICATED_GRANULE);
        // lavapipe's two 85.3 MiB textures get memory of one size, so each
        // reuses the other's.
        let (a, b) = (recyclable_size(89_478_656), recyclable_size(89_479_424));
        assert_eq!(a, b);
        assert_eq!(reuse_for_dedicated([a].into_iter(), 89_479_424), Some(0));
        assert_eq!(
            reuse_for_dedicated([89_478_656].into_iter(), 89_479_424),
            None
        );
        assert_eq!(recyclable_size(u64::MAX), u64::MAX);
        assert_eq!(recyclable_size(0), 0);
    }

    proptest::proptest! {
        #[test]
        fn recyclable_size_covers_the_request_within_a_granule(size in 0u64..u64::MAX) {
            let made = recyclable_size(size);
            proptest::prop_assert!(made >= size);
            if made != size {
                proptest::prop_assert_eq!(made % DEDICATED_GRANULE, 0);
                proptest::prop_assert!(made - size < DEDICATED_GRANULE);
            }
        }
    }

    #[test]
    fn balanced_slides_from_the_time_end_to_the_memory_end_with_pressure() {
        use crate::Strategy;
        let block = 256 * MIB;
        // Plentiful: the time end (today's policy).
        assert_eq!(point(Strategy::Balanced, 0, HEAP, block), Point::TIME);
        assert_eq!(
            point(Strategy::Balanced, HEAP / 4 * 3 - 1, HEAP, block),
            Point::TIME
        );
        // Three quarters of the limit: smaller blocks, still kept and recycled.
        let middle = point(Strategy::Balanced, HEAP / 4 * 3, HEAP, block);
        assert_eq!(middle.block_cap, 64 * MIB);
        assert!(middle.retain && middle.recycle && !middle.keep_all);
        // Seven eighths: the memory end.
        assert_eq!(
            point(Strategy::Balanced, HEAP / 8 * 7 - 1, HEAP, block).block_cap,
            64 * MIB
        );
        assert_eq!(
            point(Strategy::Balanced, HEAP / 8 * 7, HEAP, block),
            Point::MEMORY
        );
        assert_eq!(
            point(Strategy::Balanced, u64::MAX, 0, block),
            Point {
                block_cap: MIN_BLOCK_SIZE,
                ..Point::MEMORY
            }
        );
        const { assert!(!Point::MEMORY.retain && !Point::MEMORY.recycle) };
        assert_eq!(Point::MEMORY.block_cap, 16 * MIB);
        // A small type's largest block: never below the smallest block.
        assert_eq!(
            point(Strategy::Balanced, HEAP / 4 * 3, HEAP, 8 * MIB).block_cap,
            MIN_BLOCK_SIZE
        );
    }

    #[test]
    fn balanced_blocks_are_at_most_a_thirty_second_of_the_budget() {
        use crate::Strategy;
        let block = 256 * MIB;
        // A heap of 8 GiB or more: the type's own largest block.
        assert_eq!(point(Strategy::Balanced, 0, 8 << 30, block), Point::TIME);
        // 2 GiB: 64 MiB blocks at every pressure below the memory end's 16 MiB.
        for usage in [0, (2 << 30) / 4 * 3] {
            assert_eq!(
                point(Strategy::Balanced, usage, 2 << 30, block).block_cap,
                64 * MIB
            );
        }
        assert_eq!(
            point(Strategy::Balanced, 2 << 30, 2 << 30, block).block_cap,
            16 * MIB
        );
        // A budget near a small live set: the smallest block, never less.
        assert_eq!(
            point(Strategy::Balanced, 0, 100 * MIB, block).block_cap,
            MIN_BLOCK_SIZE
        );
        // The other strategies keep their points.
        assert_eq!(
            point(Strategy::MinTime, 0, 2 << 30, block).block_cap,
            u64::MAX
        );
        assert_eq!(
            point(Strategy::MinMemory, 0, 2 << 30, block),
            Point::MIN_MEMORY
        );
    }

    #[test]
    fn the_ends_hold_whatever_the_pressure_but_min_time_yields_near_the_limit() {
        use crate::Strategy;
        for usage in [0, HEAP / 2, HEAP] {
            assert_eq!(
                point(Strategy::MinMemory, usage, HEAP, 256 * MIB),
                Point::MIN_MEMORY
            );
        }
        let time = point(Strategy::MinTime, HEAP / 8 * 7 - 1, HEAP, 256 * MIB);
        assert!(time.keep_all && time.retain && time.recycle);
        assert_eq!(time.block_cap, u64::MAX);
        assert_eq!(point(Strategy::MinTime, HEAP, HEAP, 256 * MIB), Point::TIME);
    }

    #[test]
    fn pools_keep_empty_blocks_by_strategy() {
        use crate::Strategy;
        assert_eq!(pool_keep_empty(Strategy::MinMemory, 1), 0);
        assert_eq!(pool_keep_empty(Strategy::Balanced, 3), 3);
        assert_eq!(pool_keep_empty(Strategy::MinTime, 1), u32::MAX);
    }

    #[test]
    fn kept_memory_is_released_when_idle_only_after_the_live_set_halved() {
        assert!(fell_from_peak(0, 2));
        assert!(fell_from_peak(499, 1000));
        assert!(!fell_from_peak(500, 1000));
        assert!(!fell_from_peak(0, 0));
        assert!(!fell_from_peak(u64::MAX, u64::MAX));
    }

    #[test]
    fn the_high_water_mark_rises_at_once_and_decays_slowly() {
        assert_eq!(decay_high_water(0, 10), 10);
        assert_eq!(decay_high_water(640, 0), 630);
        assert_eq!(decay_high_water(1, 0), 0);
        let mut hw = 1000 * MIB;
        for _ in 0..400 {
            hw = decay_high_water(hw, 0);
        }
        assert!(hw < 10 * MIB);
        assert_eq!(
            decay_high_water(u64::MAX, 0),
            u64::MAX - (u64::MAX / 64 + 1)
        );
    }
}
