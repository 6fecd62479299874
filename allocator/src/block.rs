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
pub(crate) use crate::pool::PoolAlgorithm;
use crate::range::{
    LinearAllocator, Range, RangeAllocator, RangeError, RangeId, RangeKind, RangeRequest,
    TlsfAllocator,
};

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
    /// Live records with a mark the free path must undo ([`Meta::is_marked`]:
    /// a pending move's source, declared aliases). While it is 0 (always,
    /// outside defragmentation and alias groups) a free reads no record: the
    /// record's cache line is one of the few a free would otherwise miss.
    pub marked: u32,
    pub size: u64,
    /// The alias members declared on live allocations, by their range's
    /// slot (only those with some: [`Meta::aliased`]).
    pub aliases: HashMap<u32, Vec<crate::alias::AliasInfo>>,
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
    assert!(std::mem::offset_of!(Block, marked) + 4 <= 192);
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
/// Plain data (`Copy`, no `Drop`): [`Block::set_meta`] writes a record over
/// the slot's old one without reading it (a read of a record nobody touched
/// lately is a cache miss the allocate path would wait for), and a free
/// reads none unless the block has marked records ([`Block::marked`]). An
/// alias group's member list, rare, is kept beside the records
/// ([`Block::aliases`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Meta {
    /// Whether the slot's record was written by [`Block::set_meta`]. A free
    /// leaves it set (it need not touch the record): the allocation is live
    /// only while its range is too ([`Block::live_metas`] asks both).
    pub live: bool,
    /// The source of a defragmentation move not yet resolved.
    pub moving: bool,
    /// Not to be moved by defragmentation.
    pub pinned: bool,
    /// A defragmentation move's destination, not yet handed to the caller.
    pub reserved: bool,
    /// Alias members are declared on this allocation (in [`Block::aliases`]).
    pub aliased: bool,
    /// The resource kind.
    pub kind: ResourceKind,
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

// The layout [`Meta`] promises: no larger than this (it was 104 bytes with
// the alias list inline).
const _: () = {
    assert!(std::mem::size_of::<Meta>() <= 80);
};

impl Meta {
    /// Whether the record has a mark a free must undo: the source of a
    /// pending move (the free cancels it), or declared aliases (dropped).
    pub fn is_marked(&self) -> bool {
        self.moving || self.aliased
    }
}

/// The `RangeId` of a dedicated block's single range.
const DEDICATED_RANGE: RangeId = RangeId::from_parts(0, 0);

impl Block {
    /// A block placing allocations with `algorithm` (a TLSF makes runs of
    /// slots from `runs_from` live allocations).
    pub fn new(
        memory: DeviceMemory,
        size: u64,
        host_address: usize,
        algorithm: PoolAlgorithm,
        granularity: u64,
        runs_from: u32,
    ) -> Self {
        let algo = match algorithm {
            PoolAlgorithm::Tlsf => {
                Algo::Tlsf(TlsfAllocator::new(size, granularity).with_runs_from(runs_from))
            }
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
            marked: 0,
            aliases: HashMap::new(),
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
            marked: 0,
            aliases: HashMap::new(),
        }
    }

    /// Gives an empty dedicated block a new allocation of `kind` (its record
    /// is set next, by [`Self::set_meta`]). The freed allocation's record
    /// goes: a record reads as live while its range is, and the range is
    /// live again from here.
    pub fn reuse_dedicated(&mut self, kind: RangeKind) {
        self.generation += 1;
        self.meta.clear();
        self.marked = 0;
        self.aliases.clear();
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
        self.allocate_keyed(request, &mut None)
    }

    /// [`Self::allocate`] for a list of blocks that tries it in turn: `key`
    /// carries the request's slot class from the first block that computed
    /// it to the next ([`crate::range::TlsfAllocator`]'s `allocate_keyed`).
    #[inline(always)]
    pub fn allocate_keyed(
        &mut self,
        request: &RangeRequest,
        key: &mut Option<Option<crate::range::runs::SlotKey>>,
    ) -> Option<Range> {
        let range = match &mut self.algo {
            Algo::Tlsf(t) => t.allocate_keyed(request, key)?,
            Algo::Linear(l) => l.allocate(request)?,
            Algo::Dedicated { .. } => return None,
        };
        self.generation += 1;
        Some(range)
    }

    /// Gives back the TLSF's runs kept empty for their classes whose room
    /// could hold `size` bytes; returns whether there was one
    /// ([`TlsfAllocator::release_kept_runs`]).
    pub fn release_kept_runs(&mut self, size: u64) -> bool {
        let released = match &mut self.algo {
            Algo::Tlsf(t) => t.release_kept_runs(size),
            _ => false,
        };
        self.generation += u64::from(released);
        released
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
            if self.marked != 0 {
                self.unmark_freed(id);
            }
        }
        result
    }

    /// After the free of range `id` in a block with marked records: its
    /// record's marks go (its alias list dropped), and the count with them.
    #[cold]
    #[inline(never)]
    fn unmark_freed(&mut self, id: RangeId) {
        if let Some(meta) = self.meta.get_mut(id.slot() as usize) {
            if meta.live && meta.range.id == id {
                if meta.is_marked() {
                    self.marked -= 1;
                }
                if meta.aliased {
                    self.aliases.remove(&id.slot());
                }
                meta.live = false;
                meta.moving = false;
                meta.aliased = false;
            }
        }
    }

    /// Whether `id` names a live allocation of the block.
    pub fn is_live(&self, id: RangeId) -> bool {
        match &self.algo {
            Algo::Tlsf(t) => t.is_live(id),
            Algo::Linear(l) => l.is_live(id),
            Algo::Dedicated { live, .. } => *live && id == DEDICATED_RANGE,
        }
    }

    /// Frees every allocation (linear pools' free-at-once).
    pub fn clear(&mut self) {
        self.generation += 1;
        self.tags.clear();
        self.meta.clear();
        self.marked = 0;
        self.aliases.clear();
        match &mut self.algo {
            Algo::Tlsf(t) => t.clear(),
            Algo::Linear(l) => l.clear(),
            Algo::Dedicated { live, .. } => *live = false,
        }
    }

    /// Records what is known of a new live allocation in `range` (a
    /// placement's `alignment`, `lead`, `margin`, and the `size` and `kind`
    /// asked, made in `frame`): the record is stored over the slot's old one
    /// (a freed allocation's: unmarked, see [`Self::marked`]) without
    /// reading it, its flags cleared.
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
        let meta = Meta {
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
            aliased: false,
            frame,
        };
        match self.meta.get_mut(slot) {
            Some(old) => *old = meta,
            // A new slot (a block's slots are handed out in rising order
            // while it fills).
            None => self.push_meta(slot, meta),
        }
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

    /// Declares `members` on the live allocation with range `id`, if its id
    /// is `alloc_id` (an alias group: also pinned, since its members are
    /// bound into it). `None` when there is none.
    pub fn set_aliases(
        &mut self,
        id: RangeId,
        alloc_id: u64,
        members: Vec<crate::alias::AliasInfo>,
    ) -> Option<()> {
        let aliased = !members.is_empty();
        self.with_live_meta(id, alloc_id, |m| {
            m.aliased = aliased;
            m.pinned = true;
        })?;
        if aliased {
            self.aliases.insert(id.slot(), members);
        } else {
            self.aliases.remove(&id.slot());
        }
        Some(())
    }

    /// Calls `change` with the record of the live allocation with range
    /// `id`, if its id is `alloc_id`; `None` when there is none. Counted as
    /// a change (the caller may edit what a snapshot shows, its aliases),
    /// and [`Self::marked`] follows what `change` did to the record's marks.
    pub fn with_live_meta<R>(
        &mut self,
        id: RangeId,
        alloc_id: u64,
        change: impl FnOnce(&mut Meta) -> R,
    ) -> Option<R> {
        self.generation += 1;
        if !self.is_live(id) {
            return None;
        }
        let meta = self
            .meta
            .get_mut(id.slot() as usize)
            .filter(|m| m.live && m.id == alloc_id && m.range.id == id)?;
        let was = meta.is_marked();
        let result = change(meta);
        match (was, meta.is_marked()) {
            (false, true) => self.marked += 1,
            (true, false) => self.marked -= 1,
            _ => {}
        }
        Some(result)
    }

    /// The live allocations' records.
    pub fn live_metas(&self) -> impl Iterator<Item = &Meta> {
        self.meta
            .iter()
            .filter(|m| m.live && self.is_live(m.range.id))
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
        let marked = self.live_metas().filter(|m| m.is_marked()).count() as u32;
        let aliased = self.live_metas().filter(|m| m.aliased).count();
        if aliased != self.aliases.len()
            || self
                .live_metas()
                .any(|m| m.aliased != self.aliases.contains_key(&m.range.id.slot()))
        {
            return Err(RangeError::Invariant(format!(
                "{aliased} records with aliases, {} alias lists",
                self.aliases.len()
            )));
        }
        if marked != self.marked {
            return Err(RangeError::Invariant(format!(
                "{marked} marked allocation records counted as {}",
                self.marked
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range::{RangeKind, RangeRequest};

    fn place(block: &mut Block, id: u64) -> Range {
        let range = block
            .allocate(&RangeRequest {
                size: 256,
                alignment: 256,
                kind: RangeKind::Linear,
            })
            .expect("room");
        block.set_meta(id, range, 256, 0, 0, 256, ResourceKind::Buffer, 0);
        range
    }

    /// A free reads no record while none is marked; marks (a pending move,
    /// declared aliases) are counted, and a free of a marked record undoes
    /// its marks and drops its alias list. A slot's next record is written
    /// over the freed one.
    #[test]
    fn marked_records_are_counted_and_unmarked_by_their_free() {
        let mut block = Block::new(DeviceMemory(1), 1 << 20, 0, PoolAlgorithm::Tlsf, 1, 0);
        let (a, b, c) = (
            place(&mut block, 1),
            place(&mut block, 2),
            place(&mut block, 3),
        );
        assert_eq!(block.marked, 0);
        block.with_live_meta(a.id, 1, |m| m.moving = true).unwrap();
        let member = crate::alias::AliasInfo {
            offset: 0,
            size: 256,
            kind: "buffer".into(),
            first_pass: 0,
            last_pass: 1,
            tag: None,
        };
        block.set_aliases(b.id, 2, vec![member]).unwrap();
        assert_eq!(block.marked, 2);
        assert!(block
            .live_metas()
            .any(|m| m.id == 2 && m.pinned && m.aliased));
        // The wrong allocation id, or a freed range, finds no record.
        assert!(block.with_live_meta(a.id, 9, |_| ()).is_none());
        block.validate().unwrap();

        assert!(!block.free(b.id, b.offset).unwrap());
        assert_eq!(block.marked, 1);
        assert!(block.aliases.is_empty());
        assert!(block.with_live_meta(b.id, 2, |_| ()).is_none());
        block.validate().unwrap();

        block.with_live_meta(a.id, 1, |m| m.moving = false).unwrap();
        assert_eq!(block.marked, 0);

        // A free in a block without marks leaves the record as it was (not
        // read), no longer live since its range is not.
        assert!(!block.free(c.id, c.offset).unwrap());
        assert!(block.meta[c.id.slot() as usize].live);
        assert!(block.live_metas().all(|m| m.id != 3));
        block.validate().unwrap();

        // A new allocation in a freed slot gets a fresh record.
        let d = place(&mut block, 4);
        assert!(block
            .live_metas()
            .any(|m| m.id == 4 && !m.moving && !m.aliased));
        block.validate().unwrap();
        assert!(!block.free(a.id, a.offset).unwrap());
        assert!(block.free(d.id, d.offset).unwrap());
        block.validate().unwrap();
    }
}
