//! A block: one `VkDeviceMemory`, its range allocator and its mapping.
//!
//! A dedicated allocation is a block too, whose algorithm holds exactly one
//! range, so the code above sees every block the same way.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::desc::ResourceKind;
use crate::device::DeviceMemory;
use crate::range::{
    LinearAllocator, LinearMode, Range, RangeAllocator, RangeError, RangeId, RangeKind,
    RangeRequest, TlsfAllocator,
};

/// The algorithm a block list places allocations with.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum PoolAlgorithm {
    /// General purpose: TLSF, O(1) allocate and free in any order.
    #[default]
    Tlsf,
    /// Linear: a stack or a ring buffer, for per-frame and staging memory;
    /// [`crate::Allocator::reset_pool`] frees everything at once.
    Linear(LinearMode),
}

/// How a block places its allocations.
///
/// An explicit tag (`repr(u8)`): every allocation and free matches on it,
/// and a tag compare costs less than decoding a niche in the TLSF's fields.
#[derive(Debug)]
#[repr(u8)]
pub(crate) enum Algo {
    Tlsf(TlsfAllocator),
    Linear(LinearAllocator),
    /// A dedicated allocation: the whole block, one range.
    Dedicated {
        kind: RangeKind,
        live: bool,
    },
}

/// One `VkDeviceMemory` object and what lives in it.
///
/// Laid out for the allocate and free paths (`repr(C)`, on whole cache
/// lines): the algorithm (its tag and the TLSF's fields), the records'
/// vector, then the memory, host address and generation they also touch,
/// within the first three lines; what only block creation, snapshots and
/// tags read after them.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct Block {
    pub algo: Algo,
    /// What the allocator knows of each live allocation, indexed by its
    /// range's slot (see [`Meta`]).
    pub meta: Vec<Meta>,
    pub memory: DeviceMemory,
    /// Host address of the block's first byte if it is mapped, else 0.
    pub host_address: usize,
    /// Bumped by every change a snapshot can see (allocate, free, clear,
    /// an allocation's record); a block's own counter, so the hot path
    /// touches no shared cache line.
    pub generation: u64,
    pub size: u64,
    /// Unique among every block this process makes (never reused, unlike a
    /// `VkDeviceMemory` handle): with `generation`, the key that lets a
    /// snapshot reuse what it saw of an unchanged block.
    pub uid: u64,
    /// Debugging tags of the live allocations that have one, by offset
    /// (shared with snapshots, which clone a pointer, not the text).
    pub tags: HashMap<u64, Arc<str>, OffsetHash>,
    /// Whether the memory was made without `VkMemoryDedicatedAllocateInfo`,
    /// so a later allocation may reuse it.
    pub recyclable: bool,
}

// The layout [`Block`] promises: the hot fields within three cache lines.
const _: () = {
    assert!(std::mem::offset_of!(Block, generation) + 8 <= 192);
};

/// Hashes a block offset with one multiply: offsets are distinct integers,
/// so SipHash's protection against chosen keys buys nothing here and costs
/// most of a lookup (on the allocate and free paths, and per record in a
/// snapshot).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct OffsetHasher(u64);

impl std::hash::Hasher for OffsetHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        let h = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // Fold the high bits down: hashbrown picks buckets with the low bits
        // and tags with the top seven.
        self.0 = h ^ (h >> 29);
    }
}

/// The hasher of [`Block::tags`].
pub(crate) type OffsetHash = std::hash::BuildHasherDefault<OffsetHasher>;

/// Block uids; taken once per block made (a `vkAllocateMemory`), never on
/// the allocation path.
static NEXT_BLOCK_UID: AtomicU64 = AtomicU64::new(1);

fn next_uid() -> u64 {
    NEXT_BLOCK_UID.fetch_add(1, Ordering::Relaxed)
}

/// What a block knows of one of its allocations beyond its range: enough to
/// place it again elsewhere (defragmentation) and to find it by id.
///
/// Laid out for the cache (`repr(C)`, fields in this order): the fields a
/// free reads and writes (`live`, `moving`, `aliases`) are the record's
/// first 32 bytes, so a free of a record nobody touched lately mostly
/// misses one line (in Rust's own order they lay 75 bytes apart: two lines,
/// at some offsets three, of the 104-byte records); `id` and `range`, read
/// when a move is pending, follow.
#[derive(Clone, Debug, Default)]
#[repr(C)]
pub(crate) struct Meta {
    /// Whether the slot holds a live allocation.
    pub live: bool,
    /// The source of a defragmentation move not yet resolved.
    pub moving: bool,
    /// Not to be moved by defragmentation.
    pub pinned: bool,
    /// A defragmentation move's destination, not yet handed to the caller.
    pub reserved: bool,
    /// The resource kind.
    pub kind: ResourceKind,
    /// Alias members declared on this allocation.
    pub aliases: Vec<crate::alias::AliasInfo>,
    /// The allocation's stable id (kept across defragmentation moves).
    pub id: u64,
    /// The committed range (margins and padding included).
    pub range: Range,
    /// The alignment the range was placed with.
    pub alignment: u64,
    /// Bytes from the range's start to the allocation.
    pub lead: u64,
    /// The corruption margin around it (0: none).
    pub margin: u64,
    /// The bytes asked for.
    pub size: u64,
    /// The allocator's frame when it was made (kept across moves).
    pub frame: u64,
}

// The layout [`Meta`] promises: no larger than Rust's own, the free
// path's fields in its first 32 bytes.
const _: () = {
    assert!(std::mem::size_of::<Meta>() == 104);
    assert!(
        std::mem::offset_of!(Meta, aliases) + std::mem::size_of::<Vec<crate::alias::AliasInfo>>()
            <= 32
    );
};

/// The `RangeId` of a dedicated block's single range.
const DEDICATED_RANGE: RangeId = RangeId(0);

impl Block {
    /// A block placing allocations with `algorithm`.
    pub fn new(
        memory: DeviceMemory,
        size: u64,
        host_address: usize,
        algorithm: PoolAlgorithm,
        granularity: u64,
    ) -> Self {
        let algo = match algorithm {
            PoolAlgorithm::Tlsf => Algo::Tlsf(TlsfAllocator::new(size, granularity)),
            PoolAlgorithm::Linear(mode) => {
                Algo::Linear(LinearAllocator::new(size, mode, granularity))
            }
        };
        Self {
            memory,
            size,
            host_address,
            algo,
            tags: HashMap::default(),
            recyclable: false,
            meta: Vec::new(),
            uid: next_uid(),
            generation: 0,
        }
    }

    /// A dedicated block holding one live allocation of `kind`; `recyclable`
    /// when it names no resource in `VkMemoryDedicatedAllocateInfo`.
    pub fn dedicated(
        memory: DeviceMemory,
        size: u64,
        host_address: usize,
        kind: RangeKind,
        recyclable: bool,
    ) -> Self {
        Self {
            memory,
            size,
            host_address,
            algo: Algo::Dedicated { kind, live: true },
            tags: HashMap::default(),
            recyclable,
            meta: Vec::new(),
            uid: next_uid(),
            generation: 0,
        }
    }

    /// Gives an empty dedicated block a new allocation of `kind`.
    pub fn reuse_dedicated(&mut self, kind: RangeKind) {
        self.generation += 1;
        self.algo = Algo::Dedicated { kind, live: true };
    }

    /// The range of a dedicated block's allocation.
    pub fn dedicated_range(&self) -> Range {
        Range {
            id: DEDICATED_RANGE,
            offset: 0,
            size: self.size,
        }
    }

    pub fn is_dedicated(&self) -> bool {
        matches!(self.algo, Algo::Dedicated { .. })
    }

    /// Places `request` in this block, if it fits.
    #[inline]
    pub fn allocate(&mut self, request: &RangeRequest) -> Option<Range> {
        let range = match &mut self.algo {
            Algo::Tlsf(t) => t.allocate(request),
            Algo::Linear(l) => l.allocate(request),
            Algo::Dedicated { .. } => None,
        };
        self.generation += u64::from(range.is_some());
        range
    }

    /// Places `request` at the lowest offset below `below` that fits (TLSF
    /// blocks only; for compaction), for a caller that knows no free range
    /// below `offset` can hold it: the walk starts at the free range at
    /// `offset` named by `hint` (from [`Self::for_each_free_hinted`]; a stale
    /// hint only makes the walk start at offset 0).
    pub fn allocate_lowest_from(
        &mut self,
        request: &RangeRequest,
        below: u64,
        (offset, hint): (u64, u32),
    ) -> Option<Range> {
        match &mut self.algo {
            Algo::Tlsf(t) => {
                let placement = t.find_lowest_from(request, below, offset, hint)?;
                self.generation += 1;
                Some(t.commit(placement, request.kind))
            }
            _ => None,
        }
    }

    /// Calls `visit(offset, size, hint)` for every free range of a TLSF
    /// block, in address order (nothing for other blocks).
    pub fn for_each_free_hinted(&self, visit: &mut dyn FnMut(u64, u64, u32)) {
        if let Algo::Tlsf(t) = &self.algo {
            t.for_each_free_hinted(visit);
        }
    }

    /// Frees the range `id` at `offset` of this block. Always inlined into
    /// the vector's free (the hot path): a call of its own costs a frame
    /// and the `Result`'s copy through memory.
    ///
    /// Returns whether the block is now empty ([`Self::is_empty`]), read in
    /// the same match on the algorithm as the free.
    #[inline(always)]
    pub fn free(&mut self, id: RangeId, offset: u64) -> Result<bool, RangeError> {
        let result = match &mut self.algo {
            Algo::Tlsf(t) => t.free(id).map(|()| t.allocation_count() == 0),
            Algo::Linear(l) => l.free(id).map(|()| l.allocation_count() == 0),
            Algo::Dedicated { live, .. } if *live && id == DEDICATED_RANGE => {
                *live = false;
                Ok(true)
            }
            Algo::Dedicated { .. } => Err(RangeError::UnknownId(id)),
        };
        if result.is_ok() {
            self.generation += 1;
            if !self.tags.is_empty() {
                self.tags.remove(&offset);
            }
            if let Some(meta) = self.meta.get_mut(id.slot() as usize) {
                meta.live = false;
                // Most allocations declare no aliases: an empty list (no
                // capacity) is already what `Vec::new()` would put there.
                if meta.aliases.capacity() != 0 {
                    meta.aliases = Vec::new();
                }
            }
        }
        result
    }

    /// Frees every allocation (linear pools' free-at-once).
    pub fn clear(&mut self) {
        self.generation += 1;
        self.tags.clear();
        self.meta.clear();
        match &mut self.algo {
            Algo::Tlsf(t) => t.clear(),
            Algo::Linear(l) => l.clear(),
            Algo::Dedicated { live, .. } => *live = false,
        }
    }

    /// Records what is known of a new live allocation in `range` (a
    /// placement's `alignment`, `lead`, `margin`, and the `size` and `kind`
    /// asked, made in `frame`), written field by field into the slot's
    /// [`Meta`]: no whole record is built and moved (the allocate path's
    /// one record per call). The slot's alias list is replaced by an empty
    /// one and its flags cleared, as a fresh `Meta` would have them.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn set_meta(
        &mut self,
        id: u64,
        range: Range,
        alignment: u64,
        lead: u64,
        margin: u64,
        size: u64,
        kind: ResourceKind,
        frame: u64,
    ) {
        self.generation += 1;
        let slot = range.id.slot() as usize;
        if self.meta.len() <= slot {
            // A new slot (a block's slots are handed out in rising order
            // while it fills): the record is pushed as built, not written
            // over a default one.
            self.push_meta(
                slot,
                Meta {
                    live: true,
                    id,
                    range,
                    alignment,
                    lead,
                    margin,
                    size,
                    kind,
                    pinned: false,
                    moving: false,
                    reserved: false,
                    aliases: Vec::new(),
                    frame,
                },
            );
            return;
        }
        // Destructured without `..`: a field added to `Meta` must be set here.
        let Meta {
            live,
            id: meta_id,
            range: meta_range,
            alignment: meta_alignment,
            lead: meta_lead,
            margin: meta_margin,
            size: meta_size,
            kind: meta_kind,
            pinned,
            moving,
            reserved,
            aliases,
            frame: meta_frame,
        } = &mut self.meta[slot];
        *live = true;
        *meta_id = id;
        *meta_range = range;
        *meta_alignment = alignment;
        *meta_lead = lead;
        *meta_margin = margin;
        *meta_size = size;
        *meta_kind = kind;
        *pinned = false;
        *moving = false;
        *reserved = false;
        // A freed record's list is already empty without capacity (the
        // free path replaces one that has some): only then is there
        // anything to drop and replace.
        if aliases.capacity() != 0 {
            *aliases = Vec::new();
        }
        *meta_frame = frame;
    }

    /// Stores `meta` as the record of slot `slot`, at or past the end of
    /// the records (slots skipped on the way get empty records). Out of
    /// line. (Growing by one `resize` per new slot, then overwriting the
    /// default record, cost ~200 instructions per new slot on the traces
    /// that fill blocks.)
    #[cold]
    #[inline(never)]
    fn push_meta(&mut self, slot: usize, meta: Meta) {
        // Pushed one by one: the gap is a slot or two (the free ranges
        // split off beside allocations hold the slots in between), and
        // `resize` cost more per call than the records it wrote.
        while self.meta.len() < slot {
            self.meta.push(Meta::default());
        }
        self.meta.push(meta);
    }

    /// Pins the allocation just placed in range `id` (its record was set by
    /// [`Self::set_meta`] under the same lock).
    #[cold]
    pub fn pin(&mut self, id: RangeId) {
        if let Some(m) = self.meta.get_mut(id.slot() as usize) {
            m.pinned = true;
        }
    }

    /// The live allocation with range `id`, if its id is `alloc_id` (counted
    /// as a change: the caller may edit what a snapshot shows, its aliases).
    pub fn live_meta_mut(&mut self, id: RangeId, alloc_id: u64) -> Option<&mut Meta> {
        self.generation += 1;
        self.meta
            .get_mut(id.slot() as usize)
            .filter(|m| m.live && m.id == alloc_id && m.range.id == id)
    }

    /// The live allocations' records.
    pub fn live_metas(&self) -> impl Iterator<Item = &Meta> {
        self.meta.iter().filter(|m| m.live)
    }

    /// Whether the block places with TLSF (the one algorithm defragmentation moves from and into).
    pub fn is_tlsf(&self) -> bool {
        matches!(self.algo, Algo::Tlsf(_))
    }

    fn ranges(&self) -> Option<&dyn RangeAllocator> {
        match &self.algo {
            Algo::Tlsf(t) => Some(t),
            Algo::Linear(l) => Some(l),
            Algo::Dedicated { .. } => None,
        }
    }

    /// Live allocations (matched per algorithm, not through the trait
    /// object of [`Self::ranges`]: every free asks, through
    /// [`Self::is_empty`]).
    #[inline]
    pub fn allocation_count(&self) -> u32 {
        match &self.algo {
            Algo::Dedicated { live, .. } => u32::from(*live),
            Algo::Tlsf(t) => t.allocation_count(),
            Algo::Linear(l) => l.allocation_count(),
        }
    }

    pub fn allocated_bytes(&self) -> u64 {
        match &self.algo {
            Algo::Dedicated { live, .. } => u64::from(*live) * self.size,
            _ => self.ranges().map_or(0, |r| r.allocated_bytes()),
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.allocation_count() == 0
    }

    /// The largest free range (the whole block for an empty dedicated one).
    pub fn largest_free(&self) -> u64 {
        match self.ranges() {
            Some(r) => r.largest_free(),
            None if self.is_empty() => self.size,
            None => 0,
        }
    }

    /// Calls `visit(offset, size)` for every free range, in address order.
    pub fn for_each_free(&self, visit: &mut dyn FnMut(u64, u64)) {
        match self.ranges() {
            Some(r) => r.for_each_free(visit),
            None => {
                if self.is_empty() {
                    visit(0, self.size)
                }
            }
        }
    }

    /// Calls `visit(offset, size, kind)` for every live allocation.
    /// [`Block::for_each_allocation`] with each allocation's id slot (the
    /// index of its [`Meta`]).
    pub fn for_each_allocation_slot(&self, visit: &mut dyn FnMut(u64, u64, RangeKind, u32)) {
        match &self.algo {
            Algo::Dedicated { kind, live } => {
                if *live {
                    visit(0, self.size, *kind, DEDICATED_RANGE.slot())
                }
            }
            _ => {
                if let Some(r) = self.ranges() {
                    r.for_each_allocation_slot(visit)
                }
            }
        }
    }

    pub fn for_each_allocation(&self, visit: &mut dyn FnMut(u64, u64, RangeKind)) {
        self.for_each_allocation_slot(&mut |offset, size, kind, _| visit(offset, size, kind));
    }

    pub fn validate(&self) -> Result<(), RangeError> {
        let records = self.live_metas().count() as u32;
        if records != self.allocation_count() {
            return Err(RangeError::Invariant(format!(
                "{records} allocation records for {} live allocations",
                self.allocation_count()
            )));
        }
        if let Some(m) = self
            .live_metas()
            .find(|m| m.range.offset.saturating_add(m.range.size) > self.size)
        {
            return Err(RangeError::Invariant(format!(
                "allocation record at {} of {} bytes passes the block's end",
                m.range.offset, m.range.size
            )));
        }
        match self.ranges() {
            Some(r) => {
                r.validate()?;
                if r.capacity() != self.size {
                    return Err(RangeError::Invariant(format!(
                        "block of {} bytes manages {} bytes",
                        self.size,
                        r.capacity()
                    )));
                }
                Ok(())
            }
            None => Ok(()),
        }
    }
}
