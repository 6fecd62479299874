//! Range allocators: where allocations go inside one block, in safe code that
//! knows nothing of Vulkan (like VMA's virtual blocks).
//!
//! Metadata lives outside the managed memory. Every algorithm works in two
//! steps: [`RangeAllocator::find`] looks for a place and changes nothing;
//! [`RangeAllocator::commit`] takes it. Failing between the two leaves nothing
//! to undo.

#![forbid(unsafe_code)]

pub mod buddy;
pub mod linear;
pub(crate) mod runs;
/// The shadow model the property tests and the fuzz targets check the
/// algorithms against; built for tests and with the `shadow` feature only.
#[cfg(any(test, feature = "shadow"))]
#[doc(hidden)]
pub mod shadow;
pub mod tlsf;

pub use buddy::BuddyAllocator;
pub use linear::{LinearAllocator, LinearMode};
pub use tlsf::TlsfAllocator;

/// How a range's contents are laid out, for `bufferImageGranularity`: a
/// linear resource (buffer, linear-tiling image) and an optimal-tiling image
/// never share a granularity page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum RangeKind {
    /// Buffers and linear-tiling images.
    Linear,
    /// Optimal-tiling images.
    Optimal,
    /// Unknown contents: conflicts with both kinds.
    Unknown,
}

impl RangeKind {
    /// Whether ranges of these kinds must not share a granularity page: a
    /// linear and an optimal range conflict, and an unknown range conflicts
    /// with every kind, itself included.
    pub fn conflicts_with(self, other: RangeKind) -> bool {
        self != other || self == RangeKind::Unknown
    }
}

/// What to allocate inside a range allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeRequest {
    /// Bytes, non-zero.
    pub size: u64,
    /// Alignment of the start, a power of two.
    pub alignment: u64,
    /// The contents' layout, for buffer-image granularity.
    pub kind: RangeKind,
}

/// A place found by [`RangeAllocator::find`], valid until the allocator is
/// next changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Offset of the allocation's first byte (aligned as asked).
    pub offset: u64,
    /// Bytes of the allocation (as asked).
    pub size: u64,
    /// What the algorithm that found it takes.
    pub(crate) site: Site,
    /// The allocator's change count when it was found, to catch a stale
    /// placement in debug builds (0 where the algorithm keeps none).
    pub(crate) epoch: u64,
}

/// What a [`Placement`] takes, in the terms of the algorithm that found it;
/// each algorithm reads its own variant and refuses the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Site {
    /// A [`LinearAllocator`]'s: the offset says it all.
    Linear,
    /// A [`BuddyAllocator`]'s: the free block of order `from` at the
    /// offset, split down to order `want`.
    Buddy {
        /// The order of the free block taken.
        from: u8,
        /// The order the request needs.
        want: u8,
    },
    /// A [`TlsfAllocator`]'s.
    Tlsf(tlsf::Site),
}

/// A live allocation's handle inside one range allocator: made by the
/// allocators alone ([`RangeAllocator::allocate`], [`RangeAllocator::commit`]),
/// never from a number outside the crate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RangeId(u32);

/// A committed allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Range {
    /// The handle to free it with.
    pub id: RangeId,
    /// Offset of its first byte.
    pub offset: u64,
    /// Its size in bytes, as asked.
    pub size: u64,
}

/// A broken invariant found by [`RangeAllocator::validate`], or a bad handle.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// The handle names no live allocation (freed twice, or never allocated here).
    #[error("range {0:?} is not a live allocation of this allocator")]
    UnknownId(RangeId),
    /// An internal invariant does not hold: a bug in the allocator.
    #[error("range allocator invariant broken: {0}")]
    Invariant(String),
}

/// A range allocator: hands out ranges of `[0, capacity)`.
pub trait RangeAllocator: Send + std::fmt::Debug {
    /// Bytes managed.
    fn capacity(&self) -> u64;
    /// Looks for a place for `request`; changes nothing.
    fn find(&self, request: &RangeRequest) -> Option<Placement>;
    /// Takes a place that [`Self::find`] returned, with no change in between.
    fn commit(&mut self, placement: Placement, kind: RangeKind) -> Range;
    /// [`Self::find`] then [`Self::commit`].
    fn allocate(&mut self, request: &RangeRequest) -> Option<Range> {
        let placement = self.find(request)?;
        Some(self.commit(placement, request.kind))
    }
    /// Frees a live allocation.
    fn free(&mut self, id: RangeId) -> Result<(), RangeError>;
    /// Whether `id` names a live allocation (not freed, not stale).
    fn is_live(&self, id: RangeId) -> bool;
    /// Frees every allocation at once.
    fn clear(&mut self);
    /// Live allocations.
    fn allocation_count(&self) -> u32;
    /// Bytes in live allocations (sizes as asked, without alignment padding).
    fn allocated_bytes(&self) -> u64;
    /// The largest free range's size, counted cheaply where the algorithm can:
    /// the largest place any request may take, so the gaps inside a TLSF's
    /// runs ([`Self::for_each_run`]) are left out.
    fn largest_free(&self) -> u64;
    /// Calls `visit(offset, size)` for every free range, in address order:
    /// the gaps between live allocations, which tile the capacity with them.
    fn for_each_free(&self, visit: &mut dyn FnMut(u64, u64));
    /// Calls `visit(offset, size)` for every range the algorithm holds for
    /// small allocations of one size class (a TLSF's runs), in address order:
    /// the gaps inside them take only requests of that class and kind, not
    /// any request, so they are not counted by [`Self::largest_free`].
    fn for_each_run(&self, visit: &mut dyn FnMut(u64, u64)) {
        let _ = visit;
    }
    /// Calls `visit(offset, size, kind)` for every live allocation, in address order.
    fn for_each_allocation(&self, visit: &mut dyn FnMut(u64, u64, RangeKind)) {
        self.for_each_allocation_slot(&mut |offset, size, kind, _| visit(offset, size, kind));
    }
    /// [`Self::for_each_allocation`] with each allocation's id slot
    /// ([`RangeId`]'s low bits), so a caller can find what it keeps per slot.
    fn for_each_allocation_slot(&self, visit: &mut dyn FnMut(u64, u64, RangeKind, u32));
    /// Checks every invariant of the data structure; slow, for tests and debugging.
    fn validate(&self) -> Result<(), RangeError>;
}

// Helpers shared by the algorithms.

impl RangeId {
    /// Low bits of an id that hold a slot index; the high bits hold the
    /// slot's generation, so that a stale id is told from a live one.
    pub(crate) const SLOT_BITS: u32 = 24;
    /// The number of slots an id can name.
    pub(crate) const MAX_SLOTS: u32 = 1 << Self::SLOT_BITS;

    /// The id of slot `slot` (below [`Self::MAX_SLOTS`]) at `generation`.
    pub(crate) const fn from_parts(slot: u32, generation: u8) -> Self {
        debug_assert!(slot < Self::MAX_SLOTS);
        RangeId(((generation as u32) << Self::SLOT_BITS) | slot)
    }

    /// The slot the id names.
    pub(crate) fn slot(self) -> u32 {
        self.0 & (Self::MAX_SLOTS - 1)
    }

    /// The slot's generation when the id was handed out.
    pub(crate) fn generation(self) -> u8 {
        (self.0 >> Self::SLOT_BITS) as u8
    }
}

/// A requested alignment as a power of two: a power of two as it is, any
/// other value rounded up to the next one (0 counts as 1); `None` when no
/// such power fits in a `u64`. (The range allocators are public: a bad
/// alignment gets this rounding, or `None`, never a panic.)
#[inline]
pub(crate) fn checked_alignment(alignment: u64) -> Option<u64> {
    // The common case (every caller's) answered with one test; the same
    // value as the rounding below, which a power of two leaves alone.
    if alignment.is_power_of_two() {
        return Some(alignment);
    }
    alignment.max(1).checked_next_power_of_two()
}

/// `bufferImageGranularity` as the algorithms use it: a power of two, at
/// least 1 (any other value rounded up to the next one, past `2^63` to
/// `2^63`; never a panic).
pub(crate) fn checked_granularity(granularity: u64) -> u64 {
    granularity
        .max(1)
        .checked_next_power_of_two()
        .unwrap_or(1 << 63)
}

/// Rounds `value` up to a multiple of `alignment`, a power of two; `None` on
/// overflow.
pub(crate) fn align_up(value: u64, alignment: u64) -> Option<u64> {
    Some(value.checked_add(alignment - 1)? & !(alignment - 1))
}

/// Whether a range that ends at `end` (exclusive, non-empty) and a range that
/// starts at `start >= end` touch the same granularity page.
pub(crate) fn same_page(end: u64, start: u64, granularity: u64) -> bool {
    granularity > 1 && (end - 1) / granularity == start / granularity
}

/// A free gap as an algorithm sees it while placing a request: its bounds
/// and the live allocations right before and after it, as `(end, kind)` and
/// `(offset, kind)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gap {
    /// The gap's first byte.
    pub start: u64,
    /// One past the gap's last byte.
    pub end: u64,
    /// The end and kind of the closest live allocation before the gap.
    pub before: Option<(u64, RangeKind)>,
    /// The offset and kind of the closest live allocation after the gap.
    pub after: Option<(u64, RangeKind)>,
}

impl Gap {
    /// The lowest offset in the gap for `size` bytes aligned to `alignment`
    /// (a power of two) that keeps the buffer-image granularity rule with the
    /// neighbours, if any.
    ///
    /// A conflicting neighbour before the gap pushes the start up to the next
    /// page; a conflicting neighbour after it that would share the last page
    /// makes the gap unfit (the start is already as low as it can be).
    pub(crate) fn place(
        &self,
        size: u64,
        alignment: u64,
        kind: RangeKind,
        granularity: u64,
    ) -> Option<u64> {
        let mut start = align_up(self.start, alignment)?;
        if let Some((before_end, before_kind)) = self.before {
            if before_kind.conflicts_with(kind) && same_page(before_end, start, granularity) {
                start = align_up(start, granularity)?;
            }
        }
        let end = start.checked_add(size)?;
        if end > self.end {
            return None;
        }
        if let Some((after_start, after_kind)) = self.after {
            if after_kind.conflicts_with(kind) && same_page(end, after_start, granularity) {
                return None;
            }
        }
        Some(start)
    }
}
