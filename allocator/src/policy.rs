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
//!   (its size, less what the process uses of it) when a smaller one can still
//!   hold the request, so the allocator does not commit past a heap that
//!   its live set fits in twice, whether or not the driver reports budgets.
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

#![forbid(unsafe_code)]

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

/// The size of the next default block for a request of `needed` bytes.
///
/// - `live`: bytes the memory type holds in live allocations;
/// - `max_block`: the type's largest block;
/// - `heap_free`: bytes of the heap not used by the process;
/// - `scarce`: device memory objects are running short
///   (`maxMemoryAllocationCount`): then the largest block, so the objects
///   left hold as much as they can.
///
/// Never less than `needed`: a request larger than `max_block` gets a block
/// of its own size (the caller decides whether that is allowed).
pub(crate) fn block_size(
    needed: u64,
    live: u64,
    max_block: u64,
    heap_free: u64,
    scarce: bool,
) -> u64 {
    let grow = if scarce { max_block } else { growth_step(live) };
    let mut size = grow.min(max_block);
    if size < needed {
        // A request larger than the growth step: a block of the next size
        // class, so that it is reused by requests of about the same size.
        size = size_class(needed).min(max_block.max(needed));
    }
    // Past what is left of the heap: no more than the request needs.
    if size > heap_free {
        size = heap_free.max(needed);
    }
    size.max(needed)
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
/// once it goes unused. (It rises when memory is made, not here: a mark that
/// rose to what is committed would never release what is kept.)
pub(crate) fn decay_committed_high(committed_high: u64, in_use: u64) -> u64 {
    decay(committed_high, in_use, COMMITTED_DECAY)
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
    fn first_blocks_are_small() {
        assert_eq!(block_size(256, 0, 256 * MIB, HEAP, false), MIN_BLOCK_SIZE);
        assert_eq!(
            block_size(256, 8 * MIB, 256 * MIB, HEAP, false),
            MIN_BLOCK_SIZE
        );
    }

    #[test]
    fn blocks_grow_with_the_live_set_up_to_the_largest_block() {
        assert_eq!(block_size(256, 100 * MIB, 256 * MIB, HEAP, false), 26 * MIB);
        assert_eq!(
            block_size(256, 400 * MIB, 256 * MIB, HEAP, false),
            100 * MIB
        );
        assert_eq!(
            block_size(256, 4000 * MIB, 256 * MIB, HEAP, false),
            256 * MIB
        );
        // A small heap's largest block wins over the live set.
        assert_eq!(block_size(256, 4000 * MIB, 32 * MIB, HEAP, false), 32 * MIB);
    }

    #[test]
    fn a_block_always_holds_the_request() {
        // Larger than the growth step: the next power of two.
        assert_eq!(
            block_size(10 * MIB + 1, 0, 256 * MIB, HEAP, false),
            16 * MIB
        );
        assert_eq!(
            block_size(40 * MIB, 400 * MIB, 256 * MIB, HEAP, false),
            100 * MIB
        );
        assert_eq!(
            block_size(200 * MIB, 400 * MIB, 256 * MIB, HEAP, false),
            256 * MIB
        );
        assert_eq!(block_size(300 * MIB, 0, 256 * MIB, HEAP, false), 300 * MIB);
        assert_eq!(block_size(u64::MAX, 0, 256 * MIB, HEAP, false), u64::MAX);
        assert_eq!(
            block_size(u64::MAX - 5, 0, u64::MAX, u64::MAX, false),
            u64::MAX
        );
        // Even past the heap.
        assert_eq!(block_size(64 * MIB, 0, 256 * MIB, MIB, false), 64 * MIB);
    }

    #[test]
    fn scarce_objects_get_the_largest_block() {
        assert_eq!(block_size(MIB, 0, 256 * MIB, HEAP, true), 256 * MIB);
        assert_eq!(block_size(300 * MIB, 0, 256 * MIB, HEAP, true), 300 * MIB);
    }

    #[test]
    fn blocks_shrink_to_what_is_left_of_the_heap() {
        assert_eq!(
            block_size(MIB, 800 * MIB, 256 * MIB, 100 * MIB, false),
            100 * MIB
        );
        assert_eq!(
            block_size(MIB, 800 * MIB, 256 * MIB, 3 * MIB, false),
            3 * MIB
        );
        assert_eq!(block_size(5 * MIB, 0, 256 * MIB, 3 * MIB, false), 5 * MIB);
    }

    #[test]
    fn growth_keeps_the_slack_of_a_new_block_bounded() {
        // However the live set grows, the newest block is at most a quarter
        // of it (above the smallest block), and the count stays logarithmic.
        let mut live = 0u64;
        let mut committed = 0u64;
        let mut blocks = 0;
        while live < 8 << 30 {
            let size = block_size(64 * 1024, live, 256 * MIB, HEAP, false);
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
        assert_eq!(decay_committed_high(256 * MIB, 0), 255 * MIB);
        assert_eq!(decay_committed_high(512 * MIB, 256 * MIB), 511 * MIB);
        // Never below what is in use.
        assert_eq!(decay_committed_high(10, 9), 9);
        assert_eq!(decay_committed_high(10, 20), 20);
        // Kept memory is released in the end, whatever is committed.
        let mut high = 1024 * MIB;
        for _ in 0..5000 {
            high = decay_committed_high(high, 16 * MIB);
        }
        assert_eq!(high, 16 * MIB);
        assert_eq!(
            decay_committed_high(u64::MAX, 0),
            u64::MAX - (u64::MAX / 256 + 1)
        );
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
