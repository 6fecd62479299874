//! The TLSF's side of its runs of slots ([`super::runs`]): a small
//! request's slot class, taking and freeing a slot, opening a run over a
//! free range and giving an empty one back.

use super::*;

impl TlsfAllocator {
    /// The slot class of a small request, where runs take it.
    #[inline(always)]
    pub(super) fn slot_class(
        &self,
        size: u64,
        alignment: u64,
        kind: RangeKind,
    ) -> Option<SlotClass> {
        runs::class_of(size, alignment, kind)?.class(u64::from(self.max_run_bytes))
    }

    /// [`Self::allocate_keyed`] in a block that holds runs or is past the
    /// count from which it makes them: the request's slot class is computed
    /// here (into `key`, once per request). Out of line, so the walk over a
    /// list's blocks stays small and the class is not computed ahead for
    /// blocks that never need it.
    #[inline(never)]
    pub(super) fn allocate_classed(
        &mut self,
        request: &RangeRequest,
        key: &mut Option<Option<SlotKey>>,
    ) -> Option<Range> {
        let key = *key
            .get_or_insert_with(|| runs::class_of(request.size, request.alignment, request.kind));
        let max_run_bytes = u64::from(self.max_run_bytes);
        if let Some(key) = key.filter(|k| k.fits(max_run_bytes)) {
            // The common case of a small request: a slot of a run at hand.
            if self.live_runs != 0 {
                let run = self.runs.head(key.index, request.kind);
                if run != NO_RUN && self.live_nodes() < RangeId::MAX_SLOTS {
                    return Some(self.take_slot(run, request.size, request.kind));
                }
            }
            // A block that holds no free range of the request's size has no
            // room for a run of its class either.
            if !self.may_hold(request.size) {
                return None;
            }
            if self.used_count < self.runs_from {
                return self.find_and_commit(request);
            }
            return match key.class(max_run_bytes) {
                Some(class) => self.find_and_commit_small(request, &class),
                None => self.find_and_commit(request),
            };
        }
        if !self.may_hold(request.size) {
            return None;
        }
        self.find_and_commit(request)
    }

    /// Gives back the runs kept empty for their classes' next requests whose
    /// range, with the free ranges beside it, holds `size` bytes; returns
    /// whether there was one. A list of blocks calls it before it makes
    /// memory for a request its blocks refused, so a kept run never stands
    /// between a request and a block's free bytes (nor between a
    /// defragmentation's window and its use); a run too small to matter
    /// stays. (An allocator with nothing live keeps no run.)
    #[cold]
    pub fn release_kept_runs(&mut self, size: u64) -> bool {
        if self.live_runs == 0 || self.capacity - self.used_bytes < size {
            return false;
        }
        let room = |tlsf: &Self, node: u32| {
            let n = &tlsf.nodes[node as usize];
            let free = |other: u32| match tlsf.nodes.get(other as usize) {
                Some(o) if o.state.is_free() => o.size,
                _ => 0,
            };
            n.size + free(n.prev) + free(n.next)
        };
        self.release_empty_runs_where(|tlsf, node| room(tlsf, node) >= size)
    }

    /// Gives back every run with every slot free whose TLSF node `pick`
    /// chooses; returns whether there was one.
    pub(super) fn release_empty_runs_where(&mut self, pick: impl Fn(&Self, u32) -> bool) -> bool {
        let doomed: Vec<(u32, u32)> = self
            .runs
            .empty_runs()
            .filter(|&(_, node)| pick(self, node))
            .collect();
        for &(run, node) in &doomed {
            self.runs.close(run);
            self.release_run(node);
        }
        !doomed.is_empty()
    }

    /// The class of a run of `stride` that [`Self::slot_class`] gave.
    pub(super) fn run_class(&self, stride: u16) -> SlotClass {
        let class = SlotClass::of_stride(u64::from(stride));
        class.within(u64::from(self.max_run_bytes)).unwrap_or(class)
    }

    /// A slot for a small request of `class`: the lowest free slot of the
    /// class's first run with one, else the first slot of a new run (whose
    /// range the placement's node and list name). `None` when neither is
    /// there: the request may still take a range of its own.
    pub(super) fn find_slot(
        &self,
        request: &RangeRequest,
        class: &SlotClass,
    ) -> Option<(Placement, Option<(usize, usize)>)> {
        // At most `runs::SLOT_MAX` (checked where `Site` is defined).
        debug_assert!(class.stride <= runs::SLOT_MAX);
        let stride = class.stride as u16;
        let run = self.runs.head(class.index, request.kind);
        if run != NO_RUN {
            // The slot takes a node.
            if self.live_nodes() + 1 > RangeId::MAX_SLOTS {
                return None;
            }
            let (_, offset) = self.runs.next_slot(run);
            let placement = Placement {
                offset,
                size: request.size,
                site: Site::InRun { run, stride }.placed(),
                epoch: self.epoch,
            };
            return Some((placement, None));
        }
        // A new run takes up to two nodes (padding, tail) and its slot one;
        // none is made below `runs_from` live allocations.
        if self.live_nodes() + 3 > RangeId::MAX_SLOTS || self.used_count < self.runs_from {
            return None;
        }
        let run_request = RangeRequest {
            size: class.run_bytes(),
            alignment: class.run_alignment(),
            kind: request.kind,
        };
        if !self.may_hold(run_request.size) {
            return None;
        }
        let (placement, list) = self.find_listed_plain(&run_request)?;
        let Site::Range { node } = Site::of(&placement) else {
            unreachable!("a range of its own for the run");
        };
        let placement = Placement {
            size: request.size,
            site: Site::NewRun { node, stride }.placed(),
            ..placement
        };
        Some((placement, list))
    }

    /// [`Self::find_and_commit`] for a request of slot class `class` with
    /// no run at hand: a new run, else a range of its own.
    #[inline(never)]
    pub(super) fn find_and_commit_small(
        &mut self,
        request: &RangeRequest,
        class: &SlotClass,
    ) -> Option<Range> {
        if let Some((placement, list)) = self.find_slot(request, class) {
            return Some(self.commit_slot(placement, request.kind, list));
        }
        self.find_and_commit(request)
    }

    /// Commits a slot's placement (from [`Self::find_slot`]): the run it
    /// names, or a new run over the free range it names first.
    pub(super) fn commit_slot(
        &mut self,
        placement: Placement,
        kind: RangeKind,
        list: Option<(usize, usize)>,
    ) -> Range {
        debug_assert_eq!(placement.epoch, self.epoch, "the placement is stale");
        let run = match Site::of(&placement) {
            Site::InRun { run, .. } => run,
            Site::NewRun { node, stride } => self.open_run(placement, node, stride, kind, list),
            Site::Range { .. } => unreachable!("{placement:?} is a range's, not a slot's"),
        };
        self.take_slot(run, placement.size, kind)
    }

    /// Checks a slot's placement handed to [`RangeAllocator::commit`]: the
    /// run it names has that slot free, or the free range it names holds a
    /// new run there.
    pub(super) fn check_slot_placement(&self, placement: &Placement, kind: RangeKind) {
        let fits = match Site::of(placement) {
            Site::InRun { run, stride } => self.runs.get_live(run).is_some_and(|r| {
                r.free != 0
                    && r.kind == kind
                    && u64::from(r.stride) == self.run_class(stride).stride
                    && r.slot_offset(r.free.trailing_zeros()) == placement.offset
            }),
            Site::NewRun { node, stride } => {
                let node = &self.nodes[node as usize];
                node.state.is_free()
                    && node.offset <= placement.offset
                    && placement.offset + self.run_class(stride).run_bytes() <= node.end()
            }
            Site::Range { .. } => false,
        };
        assert!(fits, "{placement:?} does not name a free slot");
    }

    /// Makes a run of `stride` over free node `node` at the placement's
    /// offset, with every slot free.
    #[cold]
    pub(super) fn open_run(
        &mut self,
        placement: Placement,
        node: u32,
        stride: u16,
        kind: RangeKind,
        list: Option<(usize, usize)>,
    ) -> u32 {
        let class = self.run_class(stride);
        let bytes = class.run_bytes();
        let whole = Placement {
            size: bytes,
            site: Site::Range { node }.placed(),
            ..placement
        };
        let range = self.commit_range(whole, kind, list);
        let node = range.id.slot();
        let run = self.runs.open(range.offset, node, &class, kind);
        self.live_runs += 1;
        let n = &mut self.nodes[node as usize];
        n.state = State::Run(kind);
        n.free_next = run;
        // The run is no allocation (its slots are counted one by one), but
        // a used range of its kind to its neighbours (`used_by_kind`).
        self.used_count -= 1;
        self.used_bytes -= bytes;
        run
    }

    /// Takes the lowest free slot of `run` for `size` bytes.
    #[inline(always)]
    pub(super) fn take_slot(&mut self, run: u32, size: u64, kind: RangeKind) -> Range {
        let index = self.new_node(0, size, run, NIL);
        let (slot, offset) = self.runs.take(run, index);
        let node = &mut self.nodes[index as usize];
        node.offset = offset;
        node.next = slot;
        node.state = State::Slot(kind);
        node.generation = node.generation.wrapping_add(1);
        let id = RangeId::from_parts(index, node.generation);
        self.used_count += 1;
        self.used_bytes += size;
        self.epoch = self.epoch.wrapping_add(1);
        Range { id, offset, size }
    }

    /// Frees the slot allocation of node `index`; a run left empty gives
    /// its range back.
    #[inline(always)]
    pub(super) fn free_slot(&mut self, index: u32) {
        let Node {
            size,
            prev: run,
            next: slot,
            ..
        } = self.nodes[index as usize];
        self.release_node(index);
        self.used_count -= 1;
        self.used_bytes -= size;
        if let Some(run_node) = self.runs.give(run, slot) {
            self.release_run(run_node);
        }
        if self.used_count == 0 && self.live_runs != 0 {
            // Nothing live: the runs kept empty go too, so an empty block is
            // one free range again.
            self.release_empty_runs();
        }
        self.epoch = self.epoch.wrapping_add(1);
    }

    /// Gives the range of run node `node` (closed in `runs`) back.
    pub(super) fn release_run(&mut self, node: u32) {
        self.live_runs -= 1;
        let n = &mut self.nodes[node as usize];
        let State::Run(kind) = std::mem::replace(&mut n.state, State::Free) else {
            unreachable!("a run's node holds the run");
        };
        let (prev, next) = (n.prev, n.next);
        self.release_range(node, kind, prev, next);
    }

    /// Gives back every run with every slot free.
    #[cold]
    pub(super) fn release_empty_runs(&mut self) {
        self.release_empty_runs_where(|_, _| true);
    }
}
