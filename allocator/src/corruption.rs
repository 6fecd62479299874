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

/// The bytes of `range` inside a mapped block of `block_size` bytes at
/// `block_address`, or `None` when the range is not inside the block.
///
/// The caller holds the lock of the block's list, so the block is live and
/// mapped, and `range` is a live allocation's range (or one being placed),
/// which no other allocation overlaps.
fn range_bytes<'a>(block_address: usize, block_size: u64, range: &Range) -> Option<&'a mut [u8]> {
    let end = range.offset.checked_add(range.size)?;
    if block_address == 0 || end > block_size {
        return None;
    }
    // SAFETY: the range lies inside the block (checked above), the block is
    // mapped while its list's lock is held (blocks are unmapped only after
    // being removed from their list), and the range belongs to one allocation,
    // whose margins only this module touches, under that lock. The slice is
    // dropped before the caller releases the lock.
    Some(unsafe { mapping::slice_mut(block_address + range.offset as usize, range.size) })
}

/// Fills everything in `range` outside `[offset, offset + size)` with the
/// pattern. `block_address` is the mapped block's host address.
pub(crate) fn fill(block_address: usize, block_size: u64, range: &Range, offset: u64, size: u64) {
    let Some(bytes) = range_bytes(block_address, block_size, range) else {
        return;
    };
    let start = offset.saturating_sub(range.offset).min(bytes.len() as u64) as usize;
    let end = (start as u64).saturating_add(size).min(bytes.len() as u64) as usize;
    bytes[..start].fill(PATTERN);
    bytes[end..].fill(PATTERN);
}

/// Whether the first and last `margin` bytes of `range` still hold the
/// pattern. A range outside the block counts as damaged.
pub(crate) fn intact(block_address: usize, block_size: u64, range: &Range, margin: u64) -> bool {
    let Some(bytes) = range_bytes(block_address, block_size, range) else {
        return false;
    };
    let margin = (margin.min(bytes.len() as u64)) as usize;
    bytes[..margin].iter().all(|&b| b == PATTERN)
        && bytes[bytes.len() - margin..].iter().all(|&b| b == PATTERN)
}
