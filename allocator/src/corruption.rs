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
/// the alignment, so the allocation itself stays aligned.
pub(crate) fn lead(margin: u64, alignment: u64) -> u64 {
    margin.div_ceil(alignment.max(1)) * alignment.max(1)
}

/// Fills everything in `range` outside `[offset, offset + size)` with the
/// pattern. `block_address` is the mapped block's host address.
pub(crate) fn fill(block_address: usize, range: &Range, offset: u64, size: u64) {
    let bytes = mapping::slice_mut(block_address + range.offset as usize, range.size);
    let start = (offset - range.offset) as usize;
    let end = start + size as usize;
    bytes[..start].fill(PATTERN);
    bytes[end..].fill(PATTERN);
}

/// Whether the first and last `margin` bytes of `range` still hold the pattern.
pub(crate) fn intact(block_address: usize, range: &Range, margin: u64) -> bool {
    let bytes = mapping::slice(block_address + range.offset as usize, range.size);
    let margin = (margin as usize).min(bytes.len());
    bytes[..margin].iter().all(|&b| b == PATTERN)
        && bytes[bytes.len() - margin..].iter().all(|&b| b == PATTERN)
}
