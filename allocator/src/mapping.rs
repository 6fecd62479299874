//! Host access to persistently mapped blocks: the one place outside
//! [`crate::vk`] and [`crate::sim`] that turns addresses into slices.

/// The bytes at `address..address + len` of a mapped block.
///
/// `address` must be the host address of a live allocation of `len` bytes in
/// a mapped block; [`crate::MappedAllocation`] guarantees it by construction.
pub(crate) fn slice<'a>(address: usize, len: u64) -> &'a [u8] {
    debug_assert!(address != 0);
    // SAFETY: `address` points into a block mapped by the allocator for the
    // whole life of the allocation (blocks are unmapped only when they hold no
    // allocation), `len` bytes fit inside the allocation, and no two live
    // allocations overlap, so no other slice aliases these bytes mutably. The
    // returned lifetime is tied by the caller to a borrow of the allocation.
    unsafe { std::slice::from_raw_parts(address as *const u8, len as usize) }
}

/// The bytes at `address..address + len` of a mapped block, mutable.
///
/// As [`slice`]; the caller holds the allocation mutably borrowed.
pub(crate) fn slice_mut<'a>(address: usize, len: u64) -> &'a mut [u8] {
    debug_assert!(address != 0);
    // SAFETY: as in `slice`; the caller borrows the allocation mutably for the
    // returned lifetime, so this is the only reference to these bytes.
    unsafe { std::slice::from_raw_parts_mut(address as *mut u8, len as usize) }
}
