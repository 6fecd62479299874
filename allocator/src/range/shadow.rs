//! A shadow model for tests: the live ranges of a range allocator kept in a
//! `BTreeMap`, and a driver that runs operations on an allocator and checks
//! it against the model after each one.
//!
//! The operations are steps with explicit arguments (`Driver::allocate`,
//! `Driver::free_id`, `Driver::stale_free`, `Driver::clear`,
//! `Driver::drain`), so that the fuzz targets in `fuzz/` can drive them
//! from their input; the unit tests pick them at random (`run_suite`).
//! Compiled for tests and with the `shadow` feature (which `fuzz/harness`
//! enables); not part of the crate's API.

use std::collections::{BTreeMap, HashMap};

#[cfg(test)]
use rand::{Rng, SeedableRng};
#[cfg(test)]
use rand_chacha::ChaCha8Rng;

use super::{Range, RangeAllocator, RangeError, RangeId, RangeKind, RangeRequest};

/// What an algorithm promises about where it puts a request and when it may
/// refuse one. `w` below is the worst case of a request: its size plus
/// `max(alignment, granularity) - 1`, plus `granularity - 1` when a live
/// allocation follows the gap (granularity terms only above 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// TLSF: anywhere; refused only when no free range has `w + w / 32` bytes.
    GoodFit,
    /// Linear stack: after the newest allocation; refused only when the
    /// space there is below `w`.
    Stack,
    /// Linear ring: after the newest allocation, else before the oldest by
    /// wrapping around; refused only when both spaces are below `w`.
    Ring,
    /// Buddy: each range takes an aligned power-of-two block of
    /// `max(size, alignment, granularity)` rounded up; refused only when no
    /// aligned block of that size is free of every live range's block.
    Buddy,
}

/// The parameter sets every algorithm runs with: capacity, granularity and
/// the number of operations. They add up to more than 140,000 operations.
#[cfg(test)]
pub(crate) const SUITE: [(u64, u64, usize); 10] = [
    (0, 1, 300),
    (1, 1, 1_500),
    (1000, 1, 10_000),
    (4096, 1024, 10_000),
    (1 << 16, 65536, 12_000),
    (1 << 20, 1, 30_000),
    (1 << 20, 1024, 30_000),
    ((3 << 20) + 12345, 65536, 20_000),
    (1 << 28, 65536, 20_000),
    (u64::MAX, 1024, 8_000),
];

/// How often the driver checks everything (validate, both walks).
#[cfg(test)]
const FULL_CHECK_EVERY: usize = 97;

/// Runs [`SUITE`] on allocators from `make(capacity, granularity)` and
/// returns the number of operations run.
#[cfg(test)]
pub(crate) fn run_suite(
    policy: Policy,
    make: impl Fn(u64, u64) -> Box<dyn RangeAllocator>,
) -> usize {
    let mut total = 0;
    for (seed, &(capacity, granularity, ops)) in SUITE.iter().enumerate() {
        let mut allocator = make(capacity, granularity);
        let context =
            format!("{policy:?}, capacity {capacity}, granularity {granularity}, seed {seed}");
        let mut driver = Driver::new(allocator.as_mut(), policy, granularity, context);
        driver.run(seed as u64, ops);
        total += driver.ops;
    }
    total
}

/// The granularity rule, written out apart from the allocators' own: only
/// two linear or two optimal ranges may share a page.
fn conflict(a: RangeKind, b: RangeKind) -> bool {
    !matches!(
        (a, b),
        (RangeKind::Linear, RangeKind::Linear) | (RangeKind::Optimal, RangeKind::Optimal)
    )
}

/// Whether the last byte before `end` and the byte at `start` share a page,
/// also written out apart from the allocators' own.
fn same_page(end: u64, start: u64, granularity: u64) -> bool {
    granularity > 1 && (end - 1) / granularity == start / granularity
}

/// A live allocation in the model.
#[derive(Clone, Copy, Debug)]
struct Live {
    id: RangeId,
    size: u64,
    /// The power-of-two block it holds under [`Policy::Buddy`].
    block: u64,
    kind: RangeKind,
    /// The order it was allocated in.
    seq: u64,
}

/// The model: live ranges by offset, by allocation order and by id.
#[derive(Debug, Default)]
struct Shadow {
    by_offset: BTreeMap<u64, Live>,
    /// Allocation order to offset.
    by_seq: BTreeMap<u64, u64>,
    /// Live ids, for picking one at random.
    ids: Vec<RangeId>,
    /// Id to offset and place in `ids`.
    index_of: HashMap<RangeId, (u64, usize)>,
    bytes: u64,
    next_seq: u64,
}

impl Shadow {
    fn insert(&mut self, range: Range, kind: RangeKind, block: u64) {
        let live = Live {
            id: range.id,
            size: range.size,
            block,
            kind,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        self.by_offset.insert(range.offset, live);
        self.by_seq.insert(live.seq, range.offset);
        self.index_of
            .insert(range.id, (range.offset, self.ids.len()));
        self.ids.push(range.id);
        self.bytes += range.size;
    }

    fn remove(&mut self, id: RangeId) {
        let (offset, index) = self.index_of.remove(&id).expect("not live in the model");
        self.ids.swap_remove(index);
        if let Some(&moved) = self.ids.get(index) {
            self.index_of.get_mut(&moved).unwrap().1 = index;
        }
        let live = self.by_offset.remove(&offset).unwrap();
        self.by_seq.remove(&live.seq);
        self.bytes -= live.size;
    }

    fn clear(&mut self) {
        *self = Shadow {
            next_seq: self.next_seq,
            ..Shadow::default()
        };
    }

    fn oldest(&self) -> Option<RangeId> {
        let (_, offset) = self.by_seq.first_key_value()?;
        Some(self.by_offset[offset].id)
    }

    fn newest(&self) -> Option<RangeId> {
        let (_, offset) = self.by_seq.last_key_value()?;
        Some(self.by_offset[offset].id)
    }

    fn end_of(&self, offset: u64) -> u64 {
        offset + self.by_offset[&offset].size
    }

    /// The largest aligned power-of-two block of at least `min_block` bytes
    /// outside every live range's block (0 if none): what a buddy allocator
    /// with eager merging must be able to hand out.
    fn largest_buddy_block(&self, capacity: u64, min_block: u64) -> u64 {
        let largest_in = |start: u64, end: u64| {
            (0..64)
                .rev()
                .map(|order| 1u64 << order)
                .find(|&size| {
                    start
                        .checked_next_multiple_of(size)
                        .and_then(|o| o.checked_add(size))
                        .is_some_and(|block_end| block_end <= end)
                })
                .unwrap_or(0)
        };
        let mut best = 0;
        let mut at = 0u64;
        for (&start, live) in &self.by_offset {
            if start > at {
                best = best.max(largest_in(at, start));
            }
            at = start + live.block;
        }
        if capacity > at {
            best = best.max(largest_in(at, capacity));
        }
        if best < min_block {
            0
        } else {
            best
        }
    }

    /// The free ranges: everything outside live ranges, in address order.
    fn gaps(&self, capacity: u64) -> Vec<(u64, u64)> {
        let mut gaps = Vec::new();
        let mut offset = 0;
        for (&start, live) in &self.by_offset {
            if start > offset {
                gaps.push((offset, start - offset));
            }
            offset = start + live.size;
        }
        if capacity > offset {
            gaps.push((offset, capacity - offset));
        }
        gaps
    }

    /// The spaces a linear allocator may use next, as `(start, end, whether a
    /// live allocation follows)`, in the order it tries them.
    fn linear_gaps(&self, capacity: u64, policy: Policy) -> Vec<(u64, u64, bool)> {
        let (Some((_, &oldest)), Some((_, &newest))) =
            (self.by_seq.first_key_value(), self.by_seq.last_key_value())
        else {
            return vec![(0, capacity, false)];
        };
        let newest_end = self.end_of(newest);
        match policy {
            Policy::Ring if newest < oldest => vec![(newest_end, oldest, true)],
            Policy::Ring => vec![(newest_end, capacity, false), (0, oldest, true)],
            _ => vec![(newest_end, capacity, false)],
        }
    }
}

/// Runs operations on one allocator against a shadow model (`Shadow`).
pub struct Driver<'a> {
    allocator: &'a mut dyn RangeAllocator,
    policy: Policy,
    granularity: u64,
    capacity: u64,
    shadow: Shadow,
    /// Recently freed ids, for stale frees.
    dead: Vec<RangeId>,
    /// Says which run failed.
    context: String,
    ops: usize,
    refusals: usize,
    /// Ring placements that wrapped around.
    wraps: usize,
}

impl<'a> Driver<'a> {
    /// A driver for an allocator with nothing live; `granularity` is the one
    /// it was made with, `context` names the run in failure messages.
    pub fn new(
        allocator: &'a mut dyn RangeAllocator,
        policy: Policy,
        granularity: u64,
        context: String,
    ) -> Self {
        let capacity = allocator.capacity();
        Driver {
            allocator,
            policy,
            granularity,
            capacity,
            shadow: Shadow::default(),
            dead: Vec::new(),
            context,
            ops: 0,
            refusals: 0,
            wraps: 0,
        }
    }

    /// Live allocations in the model.
    pub fn live_count(&self) -> usize {
        self.shadow.ids.len()
    }

    /// Operations run so far (allocations, refused ones included, frees,
    /// stale frees and clears).
    pub fn ops(&self) -> usize {
        self.ops
    }

    /// The live allocation at `index` (below [`Self::live_count`]) in an
    /// arbitrary but deterministic order.
    pub fn live_id(&self, index: usize) -> Option<RangeId> {
        self.shadow.ids.get(index).copied()
    }

    /// The oldest live allocation.
    pub fn oldest(&self) -> Option<RangeId> {
        self.shadow.oldest()
    }

    /// The newest live allocation.
    pub fn newest(&self) -> Option<RangeId> {
        self.shadow.newest()
    }

    /// A recently freed id (one of the last 64), by `index` modulo their
    /// number; `None` when nothing was freed yet.
    pub fn dead_id(&self, index: usize) -> Option<RangeId> {
        match self.dead.len() {
            0 => None,
            n => Some(self.dead[index % n]),
        }
    }

    /// The gaps any request may take: the gaps between live allocations
    /// less the allocator's runs ([`RangeAllocator::for_each_run`]), whose
    /// free slots take only their own class.
    fn open_gaps(&self) -> Vec<(u64, u64)> {
        let mut runs = Vec::new();
        self.allocator
            .for_each_run(&mut |offset, size| runs.push((offset, offset + size)));
        let mut open = Vec::new();
        for (start, size) in self.shadow.gaps(self.capacity) {
            let (mut at, end) = (start, start + size);
            for &(run_start, run_end) in runs.iter().filter(|r| r.1 > start && r.0 < end) {
                if run_start > at {
                    open.push((at, run_start - at));
                }
                at = at.max(run_end);
            }
            if end > at {
                open.push((at, end - at));
            }
        }
        open
    }

    /// Checks the cheap counters after an operation; [`Self::full_check`]
    /// checks everything.
    pub fn check_counts(&self) {
        assert_eq!(
            self.allocator.allocation_count() as usize,
            self.shadow.ids.len(),
            "{}",
            self.context
        );
        assert_eq!(
            self.allocator.allocated_bytes(),
            self.shadow.bytes,
            "{}",
            self.context
        );
    }

    /// Allocates `request` (`size` non-zero, `alignment` a power of two,
    /// as the trait asks), with [`RangeAllocator::allocate`] or with `find`
    /// twice (checking it is pure) then `commit`; checks the placement or
    /// the refusal against the model.
    pub fn allocate(&mut self, request: &RangeRequest, via_find: bool) -> Option<Range> {
        self.ops += 1;
        let runs_before = self.has_runs();
        let range = if !via_find {
            self.allocator.allocate(request)
        } else {
            let placement = self.allocator.find(request);
            assert_eq!(
                placement,
                self.allocator.find(request),
                "{}: find is not pure",
                self.context
            );
            placement.map(|placement| {
                let range = self.allocator.commit(placement, request.kind);
                assert_eq!(range.offset, placement.offset, "{}", self.context);
                range
            })
        };
        match range {
            Some(range) => {
                self.wraps += usize::from(self.check_placed(request, &range, runs_before));
                let block = self.buddy_block(request).unwrap_or(0);
                self.shadow.insert(range, request.kind, block);
            }
            None => {
                self.refusals += 1;
                self.check_refusal(request);
            }
        }
        range
    }

    /// Frees a live allocation and expects success.
    pub fn free_id(&mut self, id: RangeId) {
        self.ops += 1;
        assert!(self.allocator.is_live(id), "{}", self.context);
        assert_eq!(self.allocator.free(id), Ok(()), "{}", self.context);
        assert!(!self.allocator.is_live(id), "{}", self.context);
        self.shadow.remove(id);
        if self.dead.len() < 64 {
            self.dead.push(id);
        } else {
            let slot = (self.ops * 7) % 64;
            self.dead[slot] = id;
        }
    }

    /// [`Self::stale_free`] of an id made up from `raw`, which no allocator
    /// handed out (a [`RangeId`] cannot be made outside the crate).
    pub fn made_up_free(&mut self, raw: u32) {
        self.stale_free(RangeId(raw));
    }

    /// Frees an id that is not live (a dead one or a made-up one) and
    /// expects a refusal; does nothing when `id` is live.
    pub fn stale_free(&mut self, id: RangeId) {
        if self.shadow.index_of.contains_key(&id) {
            return; // The slot came back at the same generation: the id is live again.
        }
        self.ops += 1;
        assert!(!self.allocator.is_live(id), "{}", self.context);
        assert_eq!(
            self.allocator.free(id),
            Err(RangeError::UnknownId(id)),
            "{}",
            self.context
        );
    }

    /// Frees every allocation at once and checks the allocator is empty.
    pub fn clear(&mut self) {
        self.allocator.clear();
        self.shadow.clear();
        self.ops += 1;
        self.check_empty();
    }

    /// Frees every live range one by one: `order % 3` is 0 for a
    /// pseudo-random order seeded by `order`, 1 for oldest first, 2 for
    /// newest first; then checks the allocator is empty.
    pub fn drain(&mut self, order: u64) {
        let mut state = order;
        self.drain_with(|shadow| match order % 3 {
            0 => {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                shadow.ids[(state >> 33) as usize % shadow.ids.len()]
            }
            1 => shadow.oldest().expect("not empty"),
            _ => shadow.newest().expect("not empty"),
        });
    }

    fn drain_with(&mut self, mut next: impl FnMut(&Shadow) -> RangeId) {
        while !self.shadow.ids.is_empty() {
            let id = next(&self.shadow);
            self.free_id(id);
        }
        self.check_empty();
    }

    /// Random operations, checked as they go.
    #[cfg(test)]
    fn run(&mut self, seed: u64, ops: usize) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut filling = true;
        let mut next_check = FULL_CHECK_EVERY;
        while self.ops < ops {
            if rng.gen_ratio(1, 300) {
                filling = !filling;
            }
            match rng.gen_range(0..1000) {
                0 => self.clear(),
                1..=2 => self.random_drain(&mut rng),
                3..=22 => self.random_stale_free(&mut rng),
                _ if self.shadow.ids.is_empty()
                    || rng.gen_bool(if filling { 0.7 } else { 0.3 }) =>
                {
                    self.random_allocate(&mut rng)
                }
                _ => self.random_free(&mut rng),
            }
            self.check_counts();
            if self.ops >= next_check {
                self.full_check();
                next_check = self.ops + FULL_CHECK_EVERY;
            }
        }
        self.full_check();
        self.random_drain(&mut rng);
        let allocations = self.shadow.next_seq as usize;
        let ring_stuck = self.policy == Policy::Ring && self.capacity >= 1000 && self.wraps == 0;
        let vacuous = allocations < ops / 10 || self.refusals == 0 || ring_stuck;
        assert!(
            self.capacity == 0 || !vacuous,
            "{}: a vacuous run",
            self.context
        );
    }

    #[cfg(test)]
    fn random_request(&self, rng: &mut ChaCha8Rng) -> RangeRequest {
        let capacity = self.capacity.max(1);
        let size = match rng.gen_range(0..100) {
            // Exactly the size of a free range, to try exact fits.
            0..=2 if self.capacity > 0 => {
                let gaps = self.shadow.gaps(self.capacity);
                gaps.get(rng.gen_range(0..gaps.len().max(1)))
                    .map_or(1, |gap| gap.1)
            }
            0..=54 => rng.gen_range(1..=capacity.saturating_mul(2).min(64)),
            55..=89 => rng.gen_range(1..=(capacity / 128).max(1)),
            90..=98 => rng.gen_range(1..=(capacity / 8).max(1)),
            _ => rng.gen_range(1..=capacity.saturating_mul(2)),
        };
        let alignment = match rng.gen_range(0..100) {
            0..=34 => 1,
            35..=89 => 1 << rng.gen_range(1..=8),
            90..=98 => 1 << rng.gen_range(9..=16),
            _ => 1 << 20,
        };
        let kind = match rng.gen_range(0..10) {
            0..=3 => RangeKind::Linear,
            4..=7 => RangeKind::Optimal,
            _ => RangeKind::Unknown,
        };
        RangeRequest {
            size,
            alignment,
            kind,
        }
    }

    #[cfg(test)]
    fn random_allocate(&mut self, rng: &mut ChaCha8Rng) {
        let request = self.random_request(rng);
        let via_find = rng.gen_bool(0.5);
        self.allocate(&request, via_find);
    }

    #[cfg(test)]
    fn random_free(&mut self, rng: &mut ChaCha8Rng) {
        let id = match self.policy {
            Policy::Stack if rng.gen_bool(0.5) => self.shadow.newest().unwrap(),
            Policy::Ring if rng.gen_bool(0.5) => self.shadow.oldest().unwrap(),
            _ => self.shadow.ids[rng.gen_range(0..self.shadow.ids.len())],
        };
        self.free_id(id);
    }

    /// Frees a dead id (or a made-up one) and expects a refusal.
    #[cfg(test)]
    fn random_stale_free(&mut self, rng: &mut ChaCha8Rng) {
        let id = match self.dead.len() {
            0 => RangeId(rng.gen()),
            n => self.dead[rng.gen_range(0..n)],
        };
        self.stale_free(id);
    }

    /// Frees every live range, in random order or in the mode's own order.
    #[cfg(test)]
    fn random_drain(&mut self, rng: &mut ChaCha8Rng) {
        let order = rng.gen_range(0..3);
        self.drain_with(|shadow| match order {
            0 => shadow.ids[rng.gen_range(0..shadow.ids.len())],
            1 => shadow.oldest().unwrap(),
            _ => shadow.newest().unwrap(),
        });
    }

    /// The smallest buddy block at or above `granularity` that holds
    /// `request` (`None`: beyond 2^63).
    fn buddy_block(&self, request: &RangeRequest) -> Option<u64> {
        let min_block = self.granularity.max(1).checked_next_power_of_two()?;
        request
            .size
            .max(request.alignment)
            .max(min_block)
            .checked_next_power_of_two()
    }

    /// The smallest block a buddy allocator of this granularity makes.
    fn min_buddy_block(&self) -> u64 {
        self.granularity
            .max(1)
            .checked_next_power_of_two()
            .unwrap_or(1 << 63)
    }

    /// The worst case of `request`, with or without a live range after it.
    fn worst_case(&self, request: &RangeRequest, followed: bool) -> Option<u64> {
        let g = self.granularity;
        let start = request.size.checked_add(request.alignment.max(g) - 1)?;
        if followed && g > 1 {
            start.checked_add(g - 1)
        } else {
            Some(start)
        }
    }

    /// Whether the allocator holds runs ([`RangeAllocator::for_each_run`]).
    fn has_runs(&self) -> bool {
        let mut any = false;
        self.allocator.for_each_run(&mut |_, _| any = true);
        any
    }

    /// Checks a new range against the model (`runs_before`: the allocator
    /// held runs before it was placed); says whether it wrapped around.
    fn check_placed(&self, request: &RangeRequest, range: &Range, runs_before: bool) -> bool {
        let context = &self.context;
        let end = range.offset.checked_add(range.size);
        assert_eq!(range.size, request.size, "{context}");
        assert_eq!(
            range.offset % request.alignment,
            0,
            "{context}: {request:?} at {range:?}"
        );
        assert!(
            end.is_some_and(|end| end <= self.capacity),
            "{context}: {range:?} out of bounds"
        );
        assert!(
            !self.shadow.index_of.contains_key(&range.id),
            "{context}: {range:?} reuses a live id"
        );
        let end = end.unwrap();
        if let Some((&offset, before)) = self.shadow.by_offset.range(..range.offset).next_back() {
            let before_end = offset + before.size;
            assert!(
                before_end <= range.offset,
                "{context}: {range:?} overlaps {before:?}"
            );
            let conflict = conflict(before.kind, request.kind);
            assert!(
                !(conflict && same_page(before_end, range.offset, self.granularity)),
                "{context}: {range:?}"
            );
        }
        if let Some((&offset, after)) = self.shadow.by_offset.range(range.offset..).next() {
            assert!(end <= offset, "{context}: {range:?} overlaps {after:?}");
            let conflict = conflict(after.kind, request.kind);
            assert!(
                !(conflict && same_page(end, offset, self.granularity)),
                "{context}: {range:?}"
            );
        }
        if self.policy == Policy::Buddy {
            let block = self
                .buddy_block(request)
                .expect("placed, so it had a block");
            assert_eq!(
                range.offset % block,
                0,
                "{context}: {range:?} not on its block"
            );
            if let Some((&offset, before)) = self.shadow.by_offset.range(..range.offset).next_back()
            {
                assert!(
                    offset + before.block <= range.offset,
                    "{context}: {range:?} in {before:?}'s block"
                );
            }
            if let Some((&offset, _)) = self.shadow.by_offset.range(range.offset..).next() {
                assert!(
                    range.offset + block <= offset,
                    "{context}: {range:?}'s block overlaps"
                );
            }
            return false;
        }
        if self.shadow.ids.is_empty() && !runs_before {
            assert_eq!(range.offset, 0, "{context}: the first range is not at 0");
        }
        if self.policy != Policy::GoodFit {
            let gaps = self.shadow.linear_gaps(self.capacity, self.policy);
            let used = gaps
                .iter()
                .position(|&(start, gap_end, _)| start <= range.offset && end <= gap_end);
            assert!(used.is_some(), "{context}: {range:?} is outside {gaps:?}");
            if used == Some(1) {
                let (start, gap_end, followed) = gaps[0];
                let worst = self.worst_case(request, followed);
                assert!(
                    worst.is_none_or(|worst| gap_end - start < worst),
                    "{context}: {range:?} skips {gaps:?}"
                );
            }
            return used == Some(1);
        }
        false
    }

    fn check_refusal(&self, request: &RangeRequest) {
        let context = &self.context;
        if self.policy == Policy::Buddy {
            if let Some(block) = self.buddy_block(request) {
                let largest = self
                    .shadow
                    .largest_buddy_block(self.capacity, self.min_buddy_block());
                assert!(
                    largest < block,
                    "{context}: refused {request:?} with a free block of {largest}"
                );
            }
            return;
        }
        if self.shadow.ids.is_empty() && !self.has_runs() {
            assert!(
                request.size > self.capacity,
                "{context}: an empty allocator refused {request:?}"
            );
        }
        if self.policy == Policy::GoodFit {
            let largest = self.open_gaps().iter().map(|gap| gap.1).max().unwrap_or(0);
            if let Some(bound) = self
                .worst_case(request, true)
                .and_then(|w| w.checked_add(w / 32))
            {
                assert!(
                    largest < bound,
                    "{context}: refused {request:?} with a free range of {largest}"
                );
            }
        } else {
            for (start, end, followed) in self.shadow.linear_gaps(self.capacity, self.policy) {
                if let Some(worst) = self.worst_case(request, followed) {
                    assert!(
                        end - start < worst,
                        "{context}: refused {request:?} with [{start}, {end}) free"
                    );
                }
            }
        }
    }

    /// Compares everything the allocator reports with the model:
    /// `validate`, both walks, the largest free range.
    pub fn full_check(&self) {
        let context = &self.context;
        if let Err(error) = self.allocator.validate() {
            panic!("{context}: {error}");
        }
        let mut allocations = Vec::new();
        self.allocator
            .for_each_allocation(&mut |offset, size, kind| allocations.push((offset, size, kind)));
        let expected: Vec<_> = self
            .shadow
            .by_offset
            .iter()
            .map(|(&offset, l)| (offset, l.size, l.kind))
            .collect();
        assert_eq!(allocations, expected, "{context}");
        let mut free = Vec::new();
        self.allocator
            .for_each_free(&mut |offset, size| free.push((offset, size)));
        assert_eq!(free, self.shadow.gaps(self.capacity), "{context}");
        let largest = match self.policy {
            Policy::GoodFit => self.open_gaps().iter().map(|gap| gap.1).max(),
            Policy::Buddy => Some(
                self.shadow
                    .largest_buddy_block(self.capacity, self.min_buddy_block()),
            ),
            _ => self
                .shadow
                .linear_gaps(self.capacity, self.policy)
                .iter()
                .map(|gap| gap.1 - gap.0)
                .max(),
        };
        assert_eq!(
            self.allocator.largest_free(),
            largest.unwrap_or(0),
            "{context}"
        );
    }

    /// Checks that an allocator with nothing live is back to one free range.
    fn check_empty(&self) {
        assert!(self.shadow.ids.is_empty());
        assert_eq!(self.allocator.allocation_count(), 0, "{}", self.context);
        assert_eq!(self.allocator.allocated_bytes(), 0, "{}", self.context);
        let mut free = Vec::new();
        self.allocator
            .for_each_free(&mut |offset, size| free.push((offset, size)));
        let whole = if self.capacity > 0 {
            vec![(0, self.capacity)]
        } else {
            vec![]
        };
        assert_eq!(free, whole, "{}", self.context);
        let largest = if self.policy == Policy::GoodFit {
            // A TLSF may keep empty runs for their classes: the rest is open.
            self.open_gaps().iter().map(|gap| gap.1).max().unwrap_or(0)
        } else if self.policy == Policy::Buddy {
            // The largest root: the top binary digit of the capacity.
            let top = if self.capacity == 0 {
                0
            } else {
                1u64 << (63 - self.capacity.leading_zeros())
            };
            if top < self.min_buddy_block() {
                0
            } else {
                top
            }
        } else {
            self.capacity
        };
        assert_eq!(self.allocator.largest_free(), largest, "{}", self.context);
        if let Err(error) = self.allocator.validate() {
            panic!("{}: {error}", self.context);
        }
    }
}
