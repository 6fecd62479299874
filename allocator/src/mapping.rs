//! Host access to persistently mapped blocks: the one place outside
//! [`crate::vk`] and [`crate::sim`] that turns addresses into slices.
//!
//! Both functions are `unsafe`: the lifetime they return is unbounded, and
//! only the caller knows how long the bytes stay mapped and unaliased.

/// The bytes at `address..address + len` of a mapped block.
///
/// # Safety
/// - `address..address + len` lies inside one block mapped by the allocator,
///   and the block stays mapped for the whole lifetime `'a`.
/// - No mutable reference to any of these bytes exists during `'a`.
pub(crate) unsafe fn slice<'a>(address: usize, len: u64) -> &'a [u8] {
    debug_assert!(address != 0);
    // SAFETY: the caller guarantees the bytes are mapped for `'a` and not
    // mutably aliased; `len` fits in `usize` because it lies inside a mapping.
    unsafe { std::slice::from_raw_parts(address as *const u8, len as usize) }
}

/// The bytes at `address..address + len` of a mapped block, mutable.
///
/// # Safety
/// As [`slice`], and no other reference to these bytes exists during `'a`.
pub(crate) unsafe fn slice_mut<'a>(address: usize, len: u64) -> &'a mut [u8] {
    debug_assert!(address != 0);
    // SAFETY: as in `slice`; the caller guarantees exclusive access for `'a`.
    unsafe { std::slice::from_raw_parts_mut(address as *mut u8, len as usize) }
}
