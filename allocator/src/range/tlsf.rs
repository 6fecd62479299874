//! Two-level segregated fit (TLSF): a general-purpose range allocator whose
//! find, commit and free all take constant time.

use std::fmt;

use super::runs::{self, Runs, SlotClass, SlotKey, NO_RUN};
use super::{
    checked_alignment, checked_granularity, same_page, Gap, Placement, Range, RangeAllocator,
    RangeError, RangeId, RangeKind, RangeRequest,
};

mod slots;

/// Log2 of the number of second-level lists per size class.
const SL_LOG2: u32 = 5;
/// Second-level lists per size class.
const SL_COUNT: usize = 1 << SL_LOG2;
/// Sizes below this go to the linear class (class 0), one list per byte size.
const LINEAR_LIMIT: u64 = SL_COUNT as u64;
/// Size classes: the linear class, then one per power of two from
/// `LINEAR_LIMIT` up to `2^63`.
const FL_COUNT: usize = (u64::BITS - SL_LOG2) as usize + 1;
/// How many ranges of the list that holds the request's own size
/// [`TlsfAllocator::find`] tries when the good-fit list fails.
const SCAN_LIMIT: usize = 8;
/// No node.
const NIL: u32 = u32::MAX;
/// The live allocations from which a TLSF makes runs for small requests.
/// Below, its nodes and records stay within a core's caches and a range of
/// its own costs a request about what a slot does, while it packs tighter
/// than a run of size classes (held-out family traces: committed +1-5%
/// with runs made from the first allocation, none from here); above, a
/// TLSF call misses on its nodes, their neighbours and lists, and slots cut
/// those misses (BENCHMARKS.md, "Runs of equal slots for small requests").
pub const RUNS_FROM: u32 = 2048;

// A slot's stride is at most `runs::SLOT_MAX`: a `u16` keeps `Placement` in
// 32 bytes (with a `u32`, 40, and a range's find and commit ~10
// instructions more).
const _: () = assert!(runs::SLOT_MAX <= u16::MAX as u64);

/// What a TLSF's [`Placement`] takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Site {
    /// A range of its own, cut from free node `node`.
    Range {
        /// The free node.
        node: u32,
    },
    /// The first slot of a new run of `stride`-byte slots, made over free
    /// node `node`.
    NewRun {
        /// The free node the run takes.
        node: u32,
        /// The run's stride, from [`TlsfAllocator::slot_class`].
        stride: u16,
    },
    /// The lowest free slot of live run `run` (of [`runs`]).
    InRun {
        /// The run.
        run: u32,
        /// The run's stride, to check a placement handed back.
        stride: u16,
    },
}

impl Site {
    /// The TLSF site of `placement`; a placement that another algorithm
    /// found is a caller's bug (as a stale one is).
    #[inline(always)]
    fn of(placement: &Placement) -> Site {
        match placement.site {
            super::Site::Tlsf(site) => site,
            _ => panic!("{placement:?} was not found by a TLSF"),
        }
    }

    /// As a [`Placement`]'s.
    #[inline(always)]
    fn placed(self) -> super::Site {
        super::Site::Tlsf(self)
    }
}

/// What a node of the slab is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// A free range, in its free list.
    Free,
    /// A live allocation of this kind.
    Used(RangeKind),
    /// A range cut into slots for small allocations of this kind (a run of
    /// [`runs`]); its `free_next` names the run. Used, to its neighbours.
    Run(RangeKind),
    /// A live allocation of this kind in a slot of a run: not in the
    /// address order; its `prev` names the run and `next` the slot.
    Slot(RangeKind),
    /// An unused slot, in the chain of vacant slots.
    Vacant,
}

impl State {
    /// Whether this is [`State::Free`] (a tag compare; the derived `==`
    /// also compares a `Used` payload).
    #[inline(always)]
    fn is_free(self) -> bool {
        matches!(self, State::Free)
    }
}

/// A range of the block (free or used), or a vacant slot of the slab.
#[derive(Clone, Copy, Debug)]
struct Node {
    offset: u64,
    size: u64,
    /// The node right before this one in address order.
    prev: u32,
    /// The node right after this one in address order.
    next: u32,
    /// The previous node of the same free list.
    free_prev: u32,
    /// The next node of the same free list, or the next vacant slot.
    free_next: u32,
    state: State,
    /// Bumped each time the slot becomes a live allocation; part of its id.
    generation: u8,
}

impl Node {
    fn end(&self) -> u64 {
        self.offset + self.size
    }
}

/// The size class and list of a free range of `size` bytes (rounding down).
#[inline]
fn mapping(size: u64) -> (usize, usize) {
    if size < LINEAR_LIMIT {
        return (0, size as usize);
    }
    let shift = u64::BITS - 1 - size.leading_zeros() - SL_LOG2;
    // `size >> shift` is in [SL_COUNT, 2 * SL_COUNT): dropping its top bit
    // is subtracting SL_COUNT, and the mask tells the compiler the list
    // index is in bounds (no check on every look-up of a list head).
    (
        shift as usize + 1,
        (size >> shift) as usize & (SL_COUNT - 1),
    )
}

/// `size` rounded up to the smallest size of the next list, so that every
/// range of the list that [`mapping`] gives for the result holds `size`
/// bytes. `None` on overflow.
#[inline]
fn round_up_to_list(size: u64) -> Option<u64> {
    if size < LINEAR_LIMIT {
        return Some(size);
    }
    let shift = u64::BITS - 1 - size.leading_zeros() - SL_LOG2;
    size.checked_add((1 << shift) - 1)
}

/// The smallest size that list `(fl, sl)` holds.
fn list_min_size(fl: usize, sl: usize) -> u64 {
    if fl == 0 {
        sl as u64
    } else {
        ((SL_COUNT + sl) as u64) << (fl - 1)
    }
}

/// A TLSF range allocator.
///
/// Free ranges sit in segregated lists: class 0 holds sizes below 32, one
/// list per byte size; class `fl >= 1` holds sizes in `[2^(fl+4), 2^(fl+5))`,
/// split into 32 lists of equal width. Two bitmaps say which lists are
/// non-empty, so the first list at or above a size is found with two
/// bit scans:
///
/// ```text
/// fl_bitmap: u64, one bit per class
///   bit  59 ..  5  4  3  2  1  0
///         0 ..  1  0  0  1  0  1
///               |        |     '- class 0: sizes 0..32, 1 byte per list
///               |        '------- class 2: sizes 64..128, 2 bytes per list
///               '---------------- class 5: sizes 512..1024, 16 bytes per list
/// sl_bitmaps[5]: u32, one bit per list of class 5
///   bit  31 ..  3  2  1  0
///         0 ..  0  1  0  0
///                  '- list 2: free ranges of 544..560 bytes
/// heads[5][2] -> node -> node -> NIL   (linked through free_prev and free_next)
/// ```
///
/// Every range, free or used, is a node of a slab (`Vec<Node>`, outside the
/// managed memory) linked to its neighbours in address order; the nodes tile
/// `[0, capacity)` exactly and no two free nodes are adjacent, since a freed
/// range merges with its free neighbours at once. A [`RangeId`] is the node's
/// slot index plus an 8-bit generation, so a stale id is refused (unless the
/// slot was reused 256 times since). At most 2^24 ranges, free and used,
/// exist at once; past that, `find` refuses.
///
/// [`RangeAllocator::find`] probes at most three places, in this order:
/// 1. the head of the first non-empty list whose ranges all hold `size`
///    bytes (good fit), taken if alignment and granularity let it fit;
/// 2. up to 8 ranges of the list that holds `size` itself, whose ranges may
///    or may not be large enough (this also lets a request fit a range of
///    nearly its own size, for example the whole empty block);
/// 3. the head of the first non-empty list whose ranges all hold the worst
///    case, `size + max(alignment, granularity) - 1` plus `granularity - 1`
///    for the page after the end (granularity terms only when it is above
///    1); any range there fits, so this probe never fails when such a list
///    exists.
///
/// So a request is refused only if no free range has at least
/// `w + w / 32` bytes, where `w` is that worst case (or if its size is 0).
/// Alignment padding in front of an allocation becomes a free range of its
/// own (the range before a free range is always used, so there is nothing
/// to merge it with).
///
/// Once the allocator holds [`RUNS_FROM`] live allocations, a small request
/// (up to 32 KiB of a known kind) first takes the lowest free slot of a run
/// of its size class: a range of this TLSF cut into equal slots, so an
/// allocation or a free of a slot touches the run's bitmap and the slot's
/// node, not the neighbours and free lists a range of its own would. A run
/// is at most 1/64 of the capacity; where that is fewer than 4 slots (a
/// small block), or no run fits, the request takes a range of its own as
/// below. [`TlsfAllocator::without_runs`] makes one without runs,
/// [`TlsfAllocator::with_runs_from`] one that makes them sooner or later.
///
/// For `bufferImageGranularity`, a candidate is checked against the used
/// ranges right before and after it: a conflicting one before it on the
/// same page pushes the start up to the next page, and a conflicting one
/// after it on the same page rules the candidate out. Checking the closest
/// used neighbours is enough, since the rule already holds between them and
/// the ranges further away.
pub struct TlsfAllocator {
    capacity: u64,
    granularity: u64,
    nodes: Vec<Node>,
    /// The node at offset 0, or `NIL` when the capacity is 0.
    first: u32,
    /// The first vacant slot, chained through `free_next`.
    vacant: u32,
    vacant_count: u32,
    fl_bitmap: u64,
    /// The second-level bitmaps and the list heads are boxed to keep the
    /// allocator itself small.
    sl_bitmaps: Box<[u32; FL_COUNT]>,
    heads: Box<[[u32; SL_COUNT]; FL_COUNT]>,
    used_count: u32,
    /// Live allocations by kind (`RangeKind` as an index): where none
    /// conflicts with a request's kind, [`Self::fit`] reads no neighbour.
    used_by_kind: [u32; 3],
    used_bytes: u64,
    /// The runs of slots that small requests take (boxed with their
    /// lists' heads, to keep the allocator itself small).
    runs: Box<Runs>,
    /// The most bytes a run takes (0: no runs; runs are far smaller than
    /// `u32::MAX`).
    max_run_bytes: u32,
    /// Live runs (as `runs` counts them), here where a request reads it
    /// without a look behind `runs`' box: 0 in most blocks of few small
    /// allocations.
    live_runs: u32,
    /// The live allocations from which a small request with no run at hand
    /// makes one ([`RUNS_FROM`] unless set).
    runs_from: u32,
    /// Bumped on every change, to catch a stale placement in debug builds.
    epoch: u64,
}

impl TlsfAllocator {
    /// An allocator of `capacity` bytes, all free, that keeps linear and
    /// optimal ranges on separate pages of `buffer_image_granularity` bytes
    /// (a power of two; 0 or 1 when the device needs no separation).
    pub fn new(capacity: u64, buffer_image_granularity: u64) -> Self {
        let mut this = TlsfAllocator {
            capacity,
            granularity: checked_granularity(buffer_image_granularity),
            nodes: Vec::new(),
            first: NIL,
            vacant: NIL,
            vacant_count: 0,
            fl_bitmap: 0,
            sl_bitmaps: Box::new([0; FL_COUNT]),
            heads: Box::new([[NIL; SL_COUNT]; FL_COUNT]),
            used_count: 0,
            used_by_kind: [0; 3],
            used_bytes: 0,
            runs: Box::new(Runs::new()),
            max_run_bytes: (capacity / runs::CAPACITY_SHARE).min(u64::from(u32::MAX)) as u32,
            live_runs: 0,
            runs_from: RUNS_FROM,
            epoch: 0,
        };
        // The lists were made empty above: only the whole range to add (a
        // second fill of the 7.5 KiB of list heads is most of a new
        // block's work outside the driver).
        this.seed();
        this
    }

    /// Makes runs for small requests from `live` live allocations on (the
    /// default is [`RUNS_FROM`]; 0: from the first).
    pub fn with_runs_from(mut self, live: u32) -> Self {
        self.runs_from = live;
        self
    }

    /// An allocator that places every request in a range of its own, with
    /// no runs of slots for small requests (the classic TLSF).
    pub fn without_runs(capacity: u64, buffer_image_granularity: u64) -> Self {
        let mut this = Self::new(capacity, buffer_image_granularity);
        this.max_run_bytes = 0;
        this
    }

    /// [`RangeAllocator::allocate`] for a list of blocks that tries it in
    /// turn: `key` holds the request's slot class ([`runs::class_of`]) once
    /// a block computed it, so it is computed at most once per request, and
    /// only where a block may take a slot or open a run. A block with no
    /// run below [`Self::with_runs_from`]'s count (most blocks) places the
    /// request in a range of its own, or refuses it, inline: a full block
    /// costs a list walk a shift and a compare, as in a TLSF without runs.
    #[inline(always)]
    pub(crate) fn allocate_keyed(
        &mut self,
        request: &RangeRequest,
        key: &mut Option<Option<SlotKey>>,
    ) -> Option<Range> {
        if self.live_runs == 0 {
            // No slot to take: a full block is refused at once.
            if !self.may_hold(request.size) {
                return None;
            }
            if self.used_count < self.runs_from {
                return self.find_and_commit(request);
            }
        }
        self.allocate_classed(request, key)
    }

    /// The buffer-image granularity in use (at least 1).
    pub fn granularity(&self) -> u64 {
        self.granularity
    }

    /// Makes every slot vacant (keeping generations) and the whole capacity
    /// one free range.
    fn reset(&mut self) {
        self.vacant = NIL;
        for index in (0..self.nodes.len()).rev() {
            let node = &mut self.nodes[index];
            node.state = State::Vacant;
            node.free_next = self.vacant;
            self.vacant = index as u32;
        }
        self.vacant_count = self.nodes.len() as u32;
        self.fl_bitmap = 0;
        *self.sl_bitmaps = [0; FL_COUNT];
        *self.heads = [[NIL; SL_COUNT]; FL_COUNT];
        self.used_count = 0;
        self.used_by_kind = [0; 3];
        self.used_bytes = 0;
        self.runs.clear();
        self.live_runs = 0;
        self.seed();
    }

    /// On empty lists and counts: the whole capacity one free range.
    fn seed(&mut self) {
        self.first = NIL;
        if self.capacity > 0 {
            self.first = self.new_node(0, self.capacity, NIL, NIL);
            self.insert_free(self.first);
        }
        self.epoch = self.epoch.wrapping_add(1);
    }

    /// Takes a slot for a free node (not yet in any list).
    #[inline(always)]
    fn new_node(&mut self, offset: u64, size: u64, prev: u32, next: u32) -> u32 {
        let fields = |generation| Node {
            offset,
            size,
            prev,
            next,
            free_prev: NIL,
            free_next: NIL,
            state: State::Free,
            generation,
        };
        if self.vacant == NIL {
            self.nodes.push(fields(0));
            return self.nodes.len() as u32 - 1;
        }
        let index = self.vacant;
        let node = &mut self.nodes[index as usize];
        self.vacant = node.free_next;
        self.vacant_count -= 1;
        *node = fields(node.generation);
        index
    }

    /// Gives a slot back.
    #[inline(always)]
    fn release_node(&mut self, index: u32) {
        let node = &mut self.nodes[index as usize];
        node.state = State::Vacant;
        node.free_next = self.vacant;
        self.vacant = index;
        self.vacant_count += 1;
    }

    /// Slots holding ranges.
    #[inline]
    fn live_nodes(&self) -> u32 {
        self.nodes.len() as u32 - self.vacant_count
    }

    /// Puts a free node at the head of its list.
    #[inline(always)]
    fn insert_free(&mut self, index: u32) {
        let (fl, sl) = mapping(self.nodes[index as usize].size);
        let head = self.heads[fl][sl];
        let node = &mut self.nodes[index as usize];
        node.free_prev = NIL;
        node.free_next = head;
        if head != NIL {
            self.nodes[head as usize].free_prev = index;
        }
        self.heads[fl][sl] = index;
        self.sl_bitmaps[fl] |= 1 << sl;
        self.fl_bitmap |= 1 << fl;
    }

    /// Takes a free node out of its list.
    #[inline(always)]
    fn remove_free(&mut self, index: u32) {
        let Node {
            size,
            free_prev,
            free_next,
            ..
        } = self.nodes[index as usize];
        if free_prev != NIL {
            self.nodes[free_prev as usize].free_next = free_next;
        } else {
            let (fl, sl) = mapping(size);
            self.heads[fl][sl] = free_next;
            if free_next == NIL {
                self.sl_bitmaps[fl] &= !(1 << sl);
                if self.sl_bitmaps[fl] == 0 {
                    self.fl_bitmap &= !(1 << fl);
                }
            }
        }
        if free_next != NIL {
            self.nodes[free_next as usize].free_prev = free_prev;
        }
    }

    /// Splits node `index` at offset `at` (strictly inside it); the new node
    /// holds `[at, end)`, is free and in no list.
    #[inline(always)]
    fn split(&mut self, index: u32, at: u64) -> u32 {
        let Node {
            offset, size, next, ..
        } = self.nodes[index as usize];
        let tail = self.new_node(at, offset + size - at, index, next);
        if next != NIL {
            self.nodes[next as usize].prev = tail;
        }
        let node = &mut self.nodes[index as usize];
        node.next = tail;
        node.size = at - offset;
        tail
    }

    /// Merges the node after `index` into it and gives its slot back.
    #[inline(always)]
    fn absorb_next(&mut self, index: u32) {
        let next = self.nodes[index as usize].next;
        let Node {
            size, next: after, ..
        } = self.nodes[next as usize];
        if after != NIL {
            self.nodes[after as usize].prev = index;
        }
        let node = &mut self.nodes[index as usize];
        node.size += size;
        node.next = after;
        self.release_node(next);
    }

    /// The first non-empty list at or after `(fl, sl)`.
    #[inline]
    fn first_nonempty(&self, fl: usize, sl: usize) -> Option<(usize, usize)> {
        let in_class = self.sl_bitmaps[fl] & (u32::MAX << sl);
        if in_class != 0 {
            return Some((fl, in_class.trailing_zeros() as usize));
        }
        let above = self.fl_bitmap & (u64::MAX << (fl + 1));
        if above == 0 {
            return None;
        }
        let fl = above.trailing_zeros() as usize;
        Some((fl, self.sl_bitmaps[fl].trailing_zeros() as usize))
    }

    /// Where free node `index` would take `size` bytes, if it can.
    #[inline]
    fn fit(&self, index: u32, size: u64, alignment: u64, kind: RangeKind) -> Option<u64> {
        let node = &self.nodes[index as usize];
        // A neighbour is read only if it may share a page with the request
        // and hold a conflicting kind: not when no live allocation of the
        // block conflicts with `kind` (a block of buffers alone), nor across
        // a page boundary. (Each neighbour read is a node of its own, often
        // a cache line the allocation would not otherwise touch.)
        let check = self.granularity > 1 && self.may_conflict(kind);
        let neighbour = |other: u32, boundary: u64| {
            if !check || boundary % self.granularity == 0 {
                return None;
            }
            match self.nodes.get(other as usize).map(|n| n.state) {
                Some(State::Used(kind) | State::Run(kind)) => Some(kind),
                _ => None,
            }
        };
        let gap = Gap {
            start: node.offset,
            end: node.end(),
            before: neighbour(node.prev, node.offset).map(|kind| (node.offset, kind)),
            after: neighbour(node.next, node.end()).map(|kind| (node.end(), kind)),
        };
        gap.place(size, alignment, kind, self.granularity)
    }

    /// Whether some live allocation of the block conflicts with `kind` under
    /// buffer-image granularity ([`RangeKind::conflicts_with`]).
    #[inline(always)]
    fn may_conflict(&self, kind: RangeKind) -> bool {
        let [linear, optimal, unknown] = self.used_by_kind;
        match kind {
            RangeKind::Linear => optimal + unknown != 0,
            RangeKind::Optimal => linear + unknown != 0,
            RangeKind::Unknown => linear + optimal + unknown != 0,
        }
    }

    /// Checks the head of the first non-empty list at or after the one that
    /// [`mapping`] gives for `list_size`.
    /// The placement comes with the list whose head it takes.
    #[inline(always)]
    fn probe_head(
        &self,
        list_size: u64,
        request: &RangeRequest,
        alignment: u64,
    ) -> Option<(Placement, Option<(usize, usize)>)> {
        let (fl, sl) = mapping(list_size);
        let (fl, sl) = self.first_nonempty(fl, sl)?;
        let head = self.heads[fl][sl];
        let offset = self.fit(head, request.size, alignment, request.kind)?;
        Some((self.placement(head, offset, request), Some((fl, sl))))
    }

    /// Whether some free range may hold `size` bytes: false only when no
    /// list from the one of `size` up holds a range (then none does: a
    /// lower list's ranges are all smaller). A class above `size`'s is
    /// read from `fl_bitmap` alone; `size`'s own class from its lists'
    /// bitmap.
    #[inline(always)]
    fn may_hold(&self, size: u64) -> bool {
        // `mapping` gives a class below FL_COUNT (60) for every size.
        match self.fl_bitmap >> mapping(size).0 {
            0 => false,
            1 => self.class_may_hold(size),
            _ => true,
        }
    }

    /// [`Self::may_hold`] when only the class of `size` holds free ranges:
    /// whether a list of that class from the one of `size` up holds one.
    /// Out of line: the common case (a class above holds one) stays a shift
    /// and a compare in a list of blocks' loop.
    #[inline(never)]
    fn class_may_hold(&self, size: u64) -> bool {
        let (fl, sl) = mapping(size);
        self.sl_bitmaps[fl] >> sl != 0
    }

    /// [`RangeAllocator::find`], with the list whose head the placement
    /// takes, where it takes one (`None`: a range further down a list).
    #[inline(always)]
    fn find_listed(&self, request: &RangeRequest) -> Option<(Placement, Option<(usize, usize)>)> {
        let alignment = checked_alignment(request.alignment)?;
        if let Some(class) = self.slot_class(request.size, alignment, request.kind) {
            if let Some(found) = self.find_slot(request, &class) {
                return Some(found);
            }
        }
        self.find_listed_plain(request)
    }

    /// [`Self::find_listed`] for a range of its own (no run).
    #[inline(always)]
    fn find_listed_plain(
        &self,
        request: &RangeRequest,
    ) -> Option<(Placement, Option<(usize, usize)>)> {
        let alignment = checked_alignment(request.alignment)?;
        if request.size == 0 || request.size > self.capacity {
            return None;
        }
        // A commit takes up to two more nodes: the padding and the tail.
        if self.live_nodes() + 2 > RangeId::MAX_SLOTS {
            return None;
        }
        if let Some(found) = round_up_to_list(request.size)
            .and_then(|list_size| self.probe_head(list_size, request, alignment))
        {
            return Some(found);
        }
        if let Some(placement) = self.probe_own_list(request, alignment) {
            return Some((placement, None));
        }
        let worst = self
            .worst_case_size(request.size, alignment)
            .and_then(round_up_to_list)?;
        self.probe_head(worst, request, alignment)
    }

    /// [`RangeAllocator::find`] and [`RangeAllocator::commit`] in one call
    /// (the allocate path): the placement is not handed back through
    /// memory and checked against its node again (it was found here, under
    /// the same borrow), and a range taken from a list's head leaves the
    /// list without its size class computed a second time.
    #[inline(never)]
    fn find_and_commit(&mut self, request: &RangeRequest) -> Option<Range> {
        let (placement, list) = self.find_listed_plain(request)?;
        Some(self.commit_range(placement, request.kind, list))
    }

    /// Commits `placement` (found by [`Self::find_listed`], no change in
    /// between): its node is taken out of its free list (the head of
    /// `list`, where given), padding and tail split off as free ranges.
    #[inline(always)]
    fn commit_listed(
        &mut self,
        placement: Placement,
        kind: RangeKind,
        list: Option<(usize, usize)>,
    ) -> Range {
        match Site::of(&placement) {
            Site::Range { .. } => self.commit_range(placement, kind, list),
            Site::NewRun { .. } | Site::InRun { .. } => self.commit_slot(placement, kind, list),
        }
    }

    /// Gives the range of node `index`, just marked free, back to the free
    /// lists, merged with its free neighbours (`prev` and `next`, the node's,
    /// read by the caller with its state).
    #[inline(always)]
    fn release_range(&mut self, mut index: u32, kind: RangeKind, prev: u32, next: u32) {
        self.used_by_kind[kind as usize] -= 1;
        if next != NIL && self.nodes[next as usize].state.is_free() {
            self.remove_free(next);
            self.absorb_next(index);
        }
        if prev != NIL && self.nodes[prev as usize].state.is_free() {
            self.remove_free(prev);
            self.absorb_next(prev);
            index = prev;
        }
        self.insert_free(index);
        self.epoch = self.epoch.wrapping_add(1);
    }

    /// Commits a placement of a range of its own (or of a new run).
    #[inline(always)]
    fn commit_range(
        &mut self,
        placement: Placement,
        kind: RangeKind,
        list: Option<(usize, usize)>,
    ) -> Range {
        debug_assert_eq!(placement.epoch, self.epoch, "the placement is stale");
        let Site::Range { node: index } = Site::of(&placement) else {
            unreachable!("{placement:?} is a slot's, not a range's");
        };
        let node = self.nodes[index as usize];
        let end = placement.offset + placement.size;
        debug_assert!(
            node.state.is_free() && node.offset <= placement.offset && end <= node.end(),
            "{placement:?} does not lie in a free range"
        );
        match list {
            Some((fl, sl)) => self.remove_head(index, fl, sl),
            None => self.remove_free(index),
        }
        let mut used = index;
        if placement.offset > node.offset {
            // The free node stays in front as the padding.
            used = self.split(index, placement.offset);
            self.insert_free(index);
        }
        if end < node.end() {
            let tail = self.split(used, end);
            self.insert_free(tail);
        }
        let node = &mut self.nodes[used as usize];
        node.state = State::Used(kind);
        node.generation = node.generation.wrapping_add(1);
        let id = RangeId::from_parts(used, node.generation);
        self.used_count += 1;
        self.used_by_kind[kind as usize] += 1;
        self.used_bytes += placement.size;
        self.epoch = self.epoch.wrapping_add(1);
        Range {
            id,
            offset: placement.offset,
            size: placement.size,
        }
    }

    /// [`Self::remove_free`] for the head of list `(fl, sl)`: no previous
    /// node to unlink, and the list known.
    #[inline(always)]
    fn remove_head(&mut self, index: u32, fl: usize, sl: usize) {
        debug_assert_eq!(self.heads[fl][sl], index, "not the list's head");
        let free_next = self.nodes[index as usize].free_next;
        self.heads[fl][sl] = free_next;
        if free_next == NIL {
            self.sl_bitmaps[fl] &= !(1 << sl);
            if self.sl_bitmaps[fl] == 0 {
                self.fl_bitmap &= !(1 << fl);
            }
        } else {
            self.nodes[free_next as usize].free_prev = NIL;
        }
    }

    /// Checks up to [`SCAN_LIMIT`] ranges of the list holding `request.size`.
    fn probe_own_list(&self, request: &RangeRequest, alignment: u64) -> Option<Placement> {
        let (fl, sl) = mapping(request.size);
        let mut index = self.heads[fl][sl];
        for _ in 0..SCAN_LIMIT {
            if index == NIL {
                break;
            }
            if let Some(offset) = self.fit(index, request.size, alignment, request.kind) {
                return Some(self.placement(index, offset, request));
            }
            index = self.nodes[index as usize].free_next;
        }
        None
    }

    /// The lowest place for `request` that starts below `below`, walking the
    /// ranges in address order (O(ranges): for compaction, not the hot
    /// path). Changes nothing; commit the result with
    /// [`RangeAllocator::commit`].
    pub fn find_lowest(&self, request: &RangeRequest, below: u64) -> Option<Placement> {
        self.find_lowest_after(request, below, self.first)
    }

    /// Calls `visit(offset, size, hint)` for every free range in address
    /// order; `hint` names the range for [`Self::find_lowest_from`].
    pub fn for_each_free_hinted(&self, visit: &mut dyn FnMut(u64, u64, u32)) {
        let mut index = self.first;
        while index != NIL {
            let node = &self.nodes[index as usize];
            if node.state.is_free() {
                visit(node.offset, node.size, index);
            }
            index = node.next;
        }
    }

    /// [`Self::find_lowest`] for a caller that knows no free range below
    /// `offset` can hold `request`: the walk starts at the range at `offset`,
    /// named by its `hint` from [`Self::for_each_free_hinted`]. The range may
    /// have been allocated from since (an allocation at its start keeps the
    /// hint's offset). A hint that no longer names a range at `offset` (freed
    /// and merged since) is ignored and the walk starts at offset 0, so the
    /// answer is the same either way.
    pub fn find_lowest_from(
        &self,
        request: &RangeRequest,
        below: u64,
        offset: u64,
        hint: u32,
    ) -> Option<Placement> {
        let start = match self.nodes.get(hint as usize) {
            Some(n)
                if matches!(n.state, State::Free | State::Used(_) | State::Run(_))
                    && n.offset == offset =>
            {
                hint
            }
            _ => self.first,
        };
        self.find_lowest_after(request, below, start)
    }

    /// The walk of [`Self::find_lowest`] from node `start`.
    fn find_lowest_after(
        &self,
        request: &RangeRequest,
        below: u64,
        start: u32,
    ) -> Option<Placement> {
        let alignment = checked_alignment(request.alignment)?;
        if request.size == 0 || self.live_nodes() + 2 > RangeId::MAX_SLOTS {
            return None;
        }
        let mut index = start;
        while index != NIL {
            let node = &self.nodes[index as usize];
            if node.offset >= below {
                return None;
            }
            if node.state.is_free() && node.size >= request.size {
                if let Some(offset) = self.fit(index, request.size, alignment, request.kind) {
                    return (offset < below).then(|| self.placement(index, offset, request));
                }
            }
            index = node.next;
        }
        None
    }

    /// The size of a range that holds `size` bytes at any offset, whatever
    /// the neighbours.
    #[inline]
    fn worst_case_size(&self, size: u64, alignment: u64) -> Option<u64> {
        let g = self.granularity;
        if g > 1 {
            size.checked_add(alignment.max(g) - 1)?.checked_add(g - 1)
        } else {
            size.checked_add(alignment - 1)
        }
    }

    /// The placement of a range of its own at `offset` in free node `node`.
    #[inline(always)]
    fn placement(&self, node: u32, offset: u64, request: &RangeRequest) -> Placement {
        Placement {
            offset,
            size: request.size,
            site: Site::Range { node }.placed(),
            epoch: self.epoch,
        }
    }

    /// Error for a broken invariant.
    fn broken<T>(what: String) -> Result<T, RangeError> {
        Err(RangeError::Invariant(format!("tlsf: {what}")))
    }

    /// Checks the nodes in address order, and the counts.
    /// Returns the free nodes walked.
    fn validate_tiling(&self) -> Result<u32, RangeError> {
        let (mut offset, mut prev, mut walked) = (0u64, NIL, 0usize);
        let (mut free, mut used, mut used_bytes) = (0u32, 0u32, 0u64);
        let mut by_kind = [0u32; 3];
        let (mut runs, mut slots) = (0u32, 0usize);
        let mut last_used: Option<(u64, RangeKind)> = None;
        let mut index = self.first;
        while index != NIL {
            walked += 1;
            if walked > self.nodes.len() {
                return Self::broken("the address-order list loops".into());
            }
            let Some(node) = self.nodes.get(index as usize) else {
                return Self::broken(format!("node {index} is out of the slab"));
            };
            if node.offset != offset || node.size == 0 || node.prev != prev {
                return Self::broken(format!("node {index} {node:?} does not follow {offset}"));
            }
            match node.state {
                State::Vacant => return Self::broken(format!("vacant node {index} in use")),
                State::Free => {
                    if prev != NIL && self.nodes[prev as usize].state.is_free() {
                        return Self::broken(format!("free nodes {prev} and {index} are adjacent"));
                    }
                    free += 1;
                }
                State::Slot(_) => {
                    return Self::broken(format!("slot node {index} in the address order"));
                }
                State::Used(kind) | State::Run(kind) => {
                    if let Some((end, last_kind)) = last_used {
                        if last_kind.conflicts_with(kind)
                            && same_page(end, node.offset, self.granularity)
                        {
                            return Self::broken(format!(
                                "node {index} shares a page with a conflicting one"
                            ));
                        }
                    }
                    last_used = Some((node.end(), kind));
                    by_kind[kind as usize] += 1;
                    if let State::Run(_) = node.state {
                        let (count, bytes) = self.validate_run(index, node, kind)?;
                        runs += 1;
                        slots += count as usize;
                        used += count;
                        used_bytes += bytes;
                    } else {
                        used += 1;
                        used_bytes += node.size;
                    }
                }
            }
            let Some(end) = node.offset.checked_add(node.size) else {
                return Self::broken(format!("node {index} {node:?} ends past u64::MAX"));
            };
            offset = end;
            prev = index;
            index = node.next;
        }
        if offset != self.capacity {
            return Self::broken(format!("the nodes end at {offset}, not {}", self.capacity));
        }
        if by_kind != self.used_by_kind {
            return Self::broken(format!(
                "live allocations by kind {by_kind:?}, counted {:?}",
                self.used_by_kind
            ));
        }
        if (used, used_bytes) != (self.used_count, self.used_bytes) {
            return Self::broken(format!("counted {used} used ({used_bytes} bytes)"));
        }
        if (walked + slots) as u32 + self.vacant_count != self.nodes.len() as u32 {
            return Self::broken(format!(
                "{walked} nodes, {slots} slots and {} vacant slots",
                self.vacant_count
            ));
        }
        if runs != self.runs.live() || runs != self.live_runs {
            return Self::broken(format!(
                "{runs} runs walked, {} live, {} counted",
                self.runs.live(),
                self.live_runs
            ));
        }
        if let Err(what) = self.runs.validate() {
            return Self::broken(format!("runs: {what}"));
        }
        Ok(free)
    }

    /// Checks the run of node `index` and its slots' nodes; returns its
    /// allocations and their bytes.
    fn validate_run(
        &self,
        index: u32,
        node: &Node,
        kind: RangeKind,
    ) -> Result<(u32, u64), RangeError> {
        let broken = |what: String| Err(RangeError::Invariant(format!("tlsf: {what}")));
        let Some(run) = self.runs.get_live(node.free_next) else {
            return broken(format!("run node {index} names no live run"));
        };
        let stride = u64::from(run.stride);
        if run.node != index
            || run.offset != node.offset
            || run.bytes() != node.size
            || run.kind != kind
            || run.offset % (1 << stride.trailing_zeros()) != 0
        {
            return broken(format!("run node {index} {node:?} holds {run:?}"));
        }
        let (mut count, mut bytes) = (0u32, 0u64);
        for slot in (0..u32::from(run.slots)).filter(|&s| run.is_used(s)) {
            let n = run.nodes[slot as usize];
            match self.nodes.get(n as usize) {
                Some(s)
                    if s.state == State::Slot(kind)
                        && s.prev == node.free_next
                        && s.next == slot
                        && s.offset == run.slot_offset(slot)
                        && s.size > 0
                        && s.size <= stride =>
                {
                    count += 1;
                    bytes += s.size;
                }
                other => {
                    return broken(format!("slot {slot} of run node {index}: {other:?}"));
                }
            }
        }
        Ok((count, bytes))
    }

    /// Checks the free lists, the bitmaps and the vacant chain.
    fn validate_lists(&self, free: u32) -> Result<(), RangeError> {
        let mut seen = vec![false; self.nodes.len()];
        let mut listed = 0u32;
        for fl in 0..FL_COUNT {
            if ((self.fl_bitmap >> fl) & 1 == 1) != (self.sl_bitmaps[fl] != 0) {
                return Self::broken(format!("first-level bit {fl} is wrong"));
            }
            for sl in 0..SL_COUNT {
                let mut index = self.heads[fl][sl];
                if ((self.sl_bitmaps[fl] >> sl) & 1 == 1) != (index != NIL) {
                    return Self::broken(format!("second-level bit {fl}/{sl} is wrong"));
                }
                let mut prev = NIL;
                while index != NIL {
                    let Some(node) = self.nodes.get(index as usize) else {
                        return Self::broken(format!("listed node {index} is out of the slab"));
                    };
                    if seen[index as usize] || node.state != State::Free || node.free_prev != prev {
                        return Self::broken(format!("node {index} is badly listed in {fl}/{sl}"));
                    }
                    if mapping(node.size) != (fl, sl) || node.size < list_min_size(fl, sl) {
                        return Self::broken(format!(
                            "node {index} of {} bytes in list {fl}/{sl}",
                            node.size
                        ));
                    }
                    seen[index as usize] = true;
                    listed += 1;
                    prev = index;
                    index = node.free_next;
                }
            }
        }
        if listed != free {
            return Self::broken(format!("{listed} listed free nodes, {free} in the walk"));
        }
        let (mut index, mut vacant) = (self.vacant, 0u32);
        while index != NIL {
            match self.nodes.get(index as usize) {
                Some(node) if node.state == State::Vacant && !seen[index as usize] => {
                    seen[index as usize] = true;
                    vacant += 1;
                    index = node.free_next;
                }
                _ => return Self::broken(format!("vacant chain holds node {index}")),
            }
        }
        if vacant != self.vacant_count {
            return Self::broken(format!(
                "{vacant} chained vacant slots, {} counted",
                self.vacant_count
            ));
        }
        Ok(())
    }
}

impl RangeAllocator for TlsfAllocator {
    fn capacity(&self) -> u64 {
        self.capacity
    }

    /// [`Self::find`] then [`Self::commit`], refusing at once (inline, no
    /// call) a request that no free range can hold: every free range of at
    /// least `request.size` bytes sits in the list `mapping(size)` gives or
    /// a later one, so empty bitmaps from that list up mean `find` would
    /// fail too (a full block, passed over by a list of blocks).
    #[inline]
    fn allocate(&mut self, request: &RangeRequest) -> Option<Range> {
        self.allocate_keyed(request, &mut None)
    }

    fn find(&self, request: &RangeRequest) -> Option<Placement> {
        self.find_listed(request).map(|(placement, _)| placement)
    }

    #[inline]
    fn commit(&mut self, placement: Placement, kind: RangeKind) -> Range {
        debug_assert_eq!(placement.epoch, self.epoch, "the placement is stale");
        let Site::Range { node } = Site::of(&placement) else {
            self.check_slot_placement(&placement, kind);
            return self.commit_slot(placement, kind, None);
        };
        let node = &self.nodes[node as usize];
        assert!(
            node.state.is_free()
                && node.offset <= placement.offset
                && placement.offset + placement.size <= node.end(),
            "{placement:?} does not lie in a free range"
        );
        self.commit_listed(placement, kind, None)
    }

    #[inline(always)]
    fn free(&mut self, id: RangeId) -> Result<(), RangeError> {
        let index = id.slot();
        let node = match self.nodes.get_mut(index as usize) {
            Some(node) if node.generation == id.generation() => node,
            _ => return Err(RangeError::UnknownId(id)),
        };
        let kind = match node.state {
            State::Used(kind) => kind,
            State::Slot(_) => {
                self.free_slot(index);
                return Ok(());
            }
            _ => return Err(RangeError::UnknownId(id)),
        };
        node.state = State::Free;
        let Node {
            size, prev, next, ..
        } = *node;
        self.used_count -= 1;
        self.used_bytes -= size;
        self.release_range(index, kind, prev, next);
        if self.used_count == 0 && self.live_runs != 0 {
            self.release_empty_runs();
        }
        Ok(())
    }

    fn is_live(&self, id: RangeId) -> bool {
        self.nodes.get(id.slot() as usize).is_some_and(|node| {
            matches!(node.state, State::Used(_) | State::Slot(_))
                && node.generation == id.generation()
        })
    }

    fn clear(&mut self) {
        self.reset();
    }

    fn allocation_count(&self) -> u32 {
        self.used_count
    }

    fn allocated_bytes(&self) -> u64 {
        self.used_bytes
    }

    fn largest_free(&self) -> u64 {
        if self.fl_bitmap == 0 {
            return 0;
        }
        let fl = (u64::BITS - 1 - self.fl_bitmap.leading_zeros()) as usize;
        let sl = (u32::BITS - 1 - self.sl_bitmaps[fl].leading_zeros()) as usize;
        let (mut index, mut largest) = (self.heads[fl][sl], 0);
        while index != NIL {
            let node = &self.nodes[index as usize];
            largest = largest.max(node.size);
            index = node.free_next;
        }
        largest
    }

    fn for_each_free(&self, visit: &mut dyn FnMut(u64, u64)) {
        // The start of the gap being walked: free ranges, free slots and the
        // slots' bytes past their allocations, up to the next allocation.
        let mut gap: Option<u64> = None;
        let mut close = |gap: &mut Option<u64>, at: u64| {
            if let Some(start) = gap.take().filter(|&start| start < at) {
                visit(start, at - start);
            }
        };
        let mut index = self.first;
        while index != NIL {
            let node = &self.nodes[index as usize];
            match node.state {
                State::Free => {
                    gap.get_or_insert(node.offset);
                }
                State::Run(_) => {
                    let run = self.runs.get(node.free_next);
                    for slot in 0..u32::from(run.slots) {
                        let start = run.slot_offset(slot);
                        if !run.is_used(slot) {
                            gap.get_or_insert(start);
                            continue;
                        }
                        close(&mut gap, start);
                        let used = self.nodes[run.nodes[slot as usize] as usize].size;
                        if used < u64::from(run.stride) {
                            gap = Some(start + used);
                        }
                    }
                }
                _ => close(&mut gap, node.offset),
            }
            index = node.next;
        }
        close(&mut gap, self.capacity);
    }

    fn for_each_run(&self, visit: &mut dyn FnMut(u64, u64)) {
        let mut index = self.first;
        while index != NIL {
            let node = &self.nodes[index as usize];
            if let State::Run(_) = node.state {
                visit(node.offset, node.size);
            }
            index = node.next;
        }
    }

    fn for_each_allocation_slot(&self, visit: &mut dyn FnMut(u64, u64, RangeKind, u32)) {
        let mut index = self.first;
        while index != NIL {
            let node = &self.nodes[index as usize];
            match node.state {
                // A live allocation's id slot is its node's index.
                State::Used(kind) => visit(node.offset, node.size, kind, index),
                State::Run(kind) => {
                    let run = self.runs.get(node.free_next);
                    for slot in (0..u32::from(run.slots)).filter(|&s| run.is_used(s)) {
                        let slot_node = run.nodes[slot as usize];
                        let n = &self.nodes[slot_node as usize];
                        visit(n.offset, n.size, kind, slot_node);
                    }
                }
                _ => {}
            }
            index = node.next;
        }
    }

    fn validate(&self) -> Result<(), RangeError> {
        if (self.capacity == 0) != (self.first == NIL) {
            return Self::broken(format!(
                "first node {} for capacity {}",
                self.first, self.capacity
            ));
        }
        let free = self.validate_tiling()?;
        self.validate_lists(free)
    }
}

impl fmt::Debug for TlsfAllocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsfAllocator")
            .field("capacity", &self.capacity)
            .field("granularity", &self.granularity)
            .field("allocations", &self.used_count)
            .field("allocated_bytes", &self.used_bytes)
            .field("runs", &self.runs.live())
            .field("slots", &self.nodes.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
