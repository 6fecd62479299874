//! Corruption margins: with [`crate::AllocatorDesc::debug_margin`] set, every
//! allocation in a host-visible shared block gets that many bytes before and
//! after it, filled with a pattern and checked when it is freed (and by
//! [`crate::Allocator::check_corruption`]). A write past either end of an
//! allocation shows up as a changed pattern.
//!
//! Only host-visible memory can be checked, since the host must read it;
//! dedicated allocations have no margins (their memory is exactly the
//! resource's size).

use crate::mapping;
use crate::range::Range;

/// The byte the margins are filled with.
pub const PATTERN: u8 = 0xDC;

/// Bytes before the allocation inside its range: the margin rounded up to
/// the alignment, so the allocation itself stays aligned. `None` when that
/// does not fit in a `u64`.
pub(crate) fn lead(margin: u64, alignment: u64) -> Option<u64> {
    let alignment = alignment.max(1);
    margin.div_ceil(alignment).checked_mul(alignment)
}

/// The bytes `[start, end)` of a mapped block of `block_size` bytes at
/// `block_address`, or `None` when they are not inside the block. Only a
/// margin is ever asked for: never the allocation's own bytes, which the
/// caller may be reading or writing through its own slice meanwhile.
///
/// The caller holds the lock of the block's list, so the block is live and
/// mapped, and `[start, end)` is a margin of a live allocation's range (or
/// of one being placed), which no other allocation overlaps.
fn margin_bytes<'a>(
    block_address: usize,
    block_size: u64,
    start: u64,
    end: u64,
) -> Option<&'a mut [u8]> {
    if block_address == 0 || start > end || end > block_size {
        return None;
    }
    // SAFETY: the bytes lie inside the block (checked above), the block is
    // mapped while its list's lock is held (blocks are unmapped only after
    // being removed from their list), and they are a margin of one
    // allocation's range: outside what its handle's slices cover, touched
    // only by this module, under that lock. The slice is dropped before the
    // caller releases the lock.
    Some(unsafe { mapping::slice_mut(block_address + start as usize, end - start) })
}

/// Fills everything in `range` outside `[offset, offset + size)` with the
/// pattern. `block_address` is the mapped block's host address.
pub(crate) fn fill(block_address: usize, block_size: u64, range: &Range, offset: u64, size: u64) {
    let Some(range_end) = range.offset.checked_add(range.size) else {
        return;
    };
    let start = offset.clamp(range.offset, range_end);
    let end = start.saturating_add(size).min(range_end);
    for (a, b) in [(range.offset, start), (end, range_end)] {
        if let Some(bytes) = margin_bytes(block_address, block_size, a, b) {
            bytes.fill(PATTERN);
        }
    }
}

/// Whether the first and last `margin` bytes of `range` still hold the
/// pattern. A range outside the block counts as damaged.
pub(crate) fn intact(block_address: usize, block_size: u64, range: &Range, margin: u64) -> bool {
    let Some(range_end) = range.offset.checked_add(range.size) else {
        return false;
    };
    let margin = margin.min(range.size / 2);
    [
        (range.offset, range.offset + margin),
        (range_end - margin, range_end),
    ]
    .into_iter()
    .all(|(a, b)| {
        margin_bytes(block_address, block_size, a, b)
            .is_some_and(|bytes| bytes.iter().all(|&x| x == PATTERN))
    })
}
