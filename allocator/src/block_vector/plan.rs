//! Defragmentation planning: which allocations of a vector's TLSF blocks a
//! pass moves and where ([`BlockVector::plan_moves`]), each destination
//! reserved until the pass resolves the move.

#![forbid(unsafe_code)]

use std::sync::atomic::Ordering;

use super::{BlockVector, Env, SharedPlacement};
use crate::allocation::{Allocation, Location};
use crate::block::Meta;
use crate::block_list::BlockList;
use crate::defrag::DefragAlgorithm;
use crate::desc::AllocationDesc;
use crate::range::{Range, RangeRequest};

/// How many bytes and allocations a pass may still move.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MoveBudget {
    pub bytes: u64,
    pub allocations: u32,
}

/// A move planned by [`BlockVector::plan_moves`]: the source's place and
/// id, and the reserved destination.
#[derive(Debug)]
pub(crate) struct PlannedMove {
    pub source: Location,
    pub id: u64,
    /// The bytes asked for.
    pub size: u64,
    pub source_memory: crate::device::DeviceMemory,
    pub source_offset: u64,
    pub dest: Allocation,
}

/// One step of a plan: move what `source` holds into `dests`, tried in
/// order (a destination equal to the source only at a lower offset).
struct Step {
    source: u32,
    dests: Vec<u32>,
    /// Only if every allocation of the block may move (`Fast`).
    whole: bool,
}

/// A block's free ranges in address order with their running largest size:
/// finds the lowest free range of at least `size` bytes in O(log ranges).
/// Compaction inside a block asks it before the walk of
/// [`crate::block::Block::allocate_lowest_from`]: a candidate that can't
/// move lower (most of them, in a block of many small allocations) costs a
/// binary search, and one that can starts its walk at that range, since
/// none below it holds the size (alignment and granularity are still the
/// walk's to check). Built before moves into the block, it over-reports
/// free space afterwards, never under-reports: a "no" stays true.
#[derive(Default)]
struct LowestFree {
    /// Each range's offset and its allocator's hint.
    starts: Vec<(u64, u32)>,
    /// `largest[i]` = the largest size among the first `i + 1` ranges.
    largest: Vec<u64>,
}

impl LowestFree {
    fn of(block: &crate::block::Block) -> Self {
        let mut ranges = Vec::new();
        block.for_each_free_hinted(&mut |offset, size, hint| ranges.push((offset, size, hint)));
        Self::from_free(ranges)
    }

    /// From free `(offset, size, hint)` ranges in address order.
    fn from_free(ranges: impl IntoIterator<Item = (u64, u64, u32)>) -> Self {
        let mut index = Self::default();
        let mut largest = 0u64;
        for (offset, size, hint) in ranges {
            largest = largest.max(size);
            index.starts.push((offset, hint));
            index.largest.push(largest);
        }
        index
    }

    /// The lowest free range of at least `size` bytes, if it starts below
    /// `below`: its offset and hint.
    fn lowest(&self, size: u64, below: u64) -> Option<(u64, u32)> {
        // The first range whose running maximum reaches `size` is the lowest
        // range of at least `size` bytes.
        let first = self.largest.partition_point(|&m| m < size);
        self.starts
            .get(first)
            .copied()
            .filter(|&(offset, _)| offset < below)
    }
}

/// The order in which a pass empties and fills a list's TLSF blocks.
///
/// `Fast`: blocks fullest first; each block, emptiest first, into the
/// fuller ones. `Full`: a *keep set* is chosen, the blocks holding a pinned
/// allocation and then the largest blocks (fullest first among equals)
/// until they can hold the live bytes plus 1/16; every other block is
/// emptied into the keep set, emptiest first, and each kept block is
/// compacted toward its lowest offsets.
/// The range request that places `meta`'s allocation again (a move's
/// destination): its whole committed range, at its alignment and kind.
fn move_request(meta: &Meta) -> RangeRequest {
    RangeRequest {
        size: meta.range.size,
        alignment: meta.alignment.max(1),
        kind: meta.kind.range_kind(),
    }
}

/// Windows [`room_window`] dry-runs at most, cheapest first.
const ROOM_WINDOWS_CHECKED: usize = 32;

/// The window [`DefragAlgorithm::Room`] empties: `(block, start, end)` of
/// the `bytes`-long range, its start aligned to `alignment`, in a TLSF block,
/// overlapping the fewest bytes of allocations, none of them pinned, moving,
/// reserved or larger than `max_move`. `None` when a free range of `bytes`
/// exists already (nothing to do) or no window qualifies.
fn room_window(
    list: &BlockList,
    bytes: u64,
    alignment: u64,
    max_move: u64,
) -> Option<(u32, u64, u64)> {
    let tlsf = || list.iter().filter(|(_, b)| b.is_tlsf());
    if bytes == 0 || tlsf().any(|(_, b)| b.largest_free() >= bytes.saturating_add(alignment - 1)) {
        return None;
    }
    // Every qualifying window with its cost; the cheapest that the free
    // ranges outside it can take (by a best-fit dry run) wins.
    let mut windows: Vec<(u64, u32, u64)> = Vec::new();
    for (index, block) in tlsf() {
        if block.size < bytes {
            continue;
        }
        // (offset, size, movable), in address order.
        let mut spans: Vec<(u64, u64, bool)> = block
            .live_metas()
            .map(|m| {
                let movable =
                    !(m.pinned || m.moving || m.reserved || m.aliased) && m.range.size <= max_move;
                (m.range.offset, m.range.size, movable)
            })
            .collect();
        spans.sort_unstable_by_key(|s| s.0);
        let mut bytes_before = Vec::with_capacity(spans.len() + 1);
        let mut stuck_before = Vec::with_capacity(spans.len() + 1);
        let (mut sum, mut stuck) = (0u64, 0u32);
        bytes_before.push(0);
        stuck_before.push(0);
        for s in &spans {
            sum += s.1;
            stuck += u32::from(!s.2);
            bytes_before.push(sum);
            stuck_before.push(stuck);
        }
        // Windows that start where an allocation ends, or end where one
        // starts (or at the block's ends): the cheapest is among them.
        let starts = std::iter::once(0)
            .chain(std::iter::once(block.size - bytes))
            .chain(spans.iter().map(|s| s.0 + s.1))
            .chain(spans.iter().filter_map(|s| s.0.checked_sub(bytes)));
        for raw in starts {
            let Some(start) = raw.checked_next_multiple_of(alignment) else {
                continue;
            };
            let Some(end) = start.checked_add(bytes).filter(|&e| e <= block.size) else {
                continue;
            };
            let first = spans.partition_point(|s| s.0 + s.1 <= start);
            let last = spans.partition_point(|s| s.0 < end);
            if last < first || stuck_before[last] != stuck_before[first] {
                continue;
            }
            windows.push((bytes_before[last] - bytes_before[first], index, start));
        }
    }
    windows.sort_unstable();
    windows.dedup();
    // The dry run walks every free range: bound the windows it checks, so a
    // pool of many small allocations and no feasible window stays linear.
    windows
        .into_iter()
        .take(ROOM_WINDOWS_CHECKED)
        .map(|(_, index, start)| (index, start, start + bytes))
        .find(|&w| room_outside(list, w))
}

/// Whether the allocations overlapping window `(block, start, end)` fit the
/// free ranges outside it, placed largest first into the smallest range
/// that holds each at its alignment (a dry run of
/// [`BlockVector::plan_room`]'s placements).
fn room_outside(list: &BlockList, (window_block, start, end): (u32, u64, u64)) -> bool {
    // Free spans (offset, size) outside the window.
    let mut free: Vec<(u64, u64)> = Vec::new();
    let mut inside: Vec<(u64, u64)> = Vec::new();
    for (index, block) in list.iter().filter(|(_, b)| b.is_tlsf()) {
        block.for_each_free(&mut |offset, size| {
            let span_end = offset + size;
            if index != window_block || span_end <= start || offset >= end {
                free.push((offset, size));
                return;
            }
            if offset < start {
                free.push((offset, start - offset));
            }
            if span_end > end {
                free.push((end, span_end - end));
            }
        });
        if index == window_block {
            inside.extend(
                block
                    .live_metas()
                    .filter(|m| m.range.offset < end && m.range.offset + m.range.size > start)
                    .map(|m| (m.range.size, m.alignment.max(1))),
            );
        }
    }
    inside.sort_unstable_by(|a, b| b.cmp(a));
    for (size, alignment) in inside {
        let pad = |offset: u64| offset.next_multiple_of(alignment) - offset;
        let Some(best) = free
            .iter()
            .enumerate()
            .filter(|(_, &(offset, span))| pad(offset).saturating_add(size) <= span)
            .min_by_key(|(_, &(_, span))| span)
            .map(|(i, _)| i)
        else {
            return false;
        };
        let (offset, span) = free.swap_remove(best);
        let used = pad(offset) + size;
        if pad(offset) > 0 {
            free.push((offset, pad(offset)));
        }
        if span > used {
            free.push((offset + used, span - used));
        }
    }
    true
}

fn plan_steps(list: &BlockList, algorithm: DefragAlgorithm) -> Vec<Step> {
    struct B {
        index: u32,
        size: u64,
        allocated: u64,
        pinned: bool,
    }
    let mut blocks: Vec<B> = list
        .iter()
        .filter(|(_, b)| b.is_tlsf())
        .map(|(index, b)| B {
            index,
            size: b.size,
            allocated: b.allocated_bytes(),
            pinned: b.live_metas().any(|m| m.pinned || m.aliased),
        })
        .collect();
    blocks.sort_by(|a, b| b.allocated.cmp(&a.allocated).then(a.index.cmp(&b.index)));
    match algorithm {
        // Planned by `BlockVector::plan_room` instead.
        DefragAlgorithm::Room { .. } => Vec::new(),
        DefragAlgorithm::Fast => (0..blocks.len())
            .rev()
            .map(|pos| Step {
                source: blocks[pos].index,
                dests: blocks[..pos].iter().map(|b| b.index).collect(),
                whole: true,
            })
            .collect(),
        DefragAlgorithm::Full => {
            let live: u64 = blocks.iter().map(|b| b.allocated).sum();
            let target = live.saturating_add(live / 16);
            let mut keep: Vec<u32> = Vec::new();
            let mut capacity = 0u64;
            for b in blocks.iter().filter(|b| b.pinned) {
                capacity = capacity.saturating_add(b.size);
                keep.push(b.index);
            }
            // Then the largest blocks while more than one is needed, and to
            // finish, the smallest block that covers what is left (fullest
            // among equals).
            while capacity < target {
                let need = target - capacity;
                let rest = blocks.iter().filter(|b| !keep.contains(&b.index));
                let covering = rest
                    .clone()
                    .filter(|b| b.size >= need)
                    .min_by(|a, b| a.size.cmp(&b.size).then(b.allocated.cmp(&a.allocated)));
                let pick = covering.or_else(|| {
                    rest.max_by(|a, b| a.size.cmp(&b.size).then(a.allocated.cmp(&b.allocated)))
                });
                let Some(b) = pick else {
                    break;
                };
                capacity = capacity.saturating_add(b.size);
                keep.push(b.index);
            }
            // `blocks` is fullest first: keep that order for destinations.
            let dests: Vec<u32> = blocks
                .iter()
                .map(|b| b.index)
                .filter(|i| keep.contains(i))
                .collect();
            let mut steps: Vec<Step> = blocks
                .iter()
                .rev()
                .filter(|b| !keep.contains(&b.index))
                .map(|b| Step {
                    source: b.index,
                    dests: dests.clone(),
                    whole: false,
                })
                .collect();
            steps.extend(dests.iter().rev().map(|&i| Step {
                source: i,
                dests: vec![i],
                whole: false,
            }));
            steps
        }
    }
}

impl BlockVector {
    /// Plans defragmentation moves out of this vector's TLSF blocks within
    /// `budget`, reserving each destination: the source is marked moving, the
    /// destination reserved (neither is planned again until the pass ends).
    /// Linear vectors and dedicated blocks are skipped.
    ///
    /// Blocks are ordered fullest first; sources are taken from the
    /// emptiest, and go only into fuller blocks (and, for `Full`, to a lower
    /// offset of their own block). `Fast` skips a block that holds a pinned
    /// allocation (it can't be emptied). Planning stops at a block that
    /// received a destination in this pass.
    pub fn plan_moves(
        &self,
        env: Env<'_>,
        algorithm: DefragAlgorithm,
        budget: &mut MoveBudget,
    ) -> Vec<PlannedMove> {
        let mut moves = Vec::new();
        if self.is_linear() {
            return moves;
        }
        // Moves stay inside a shard: each shard is planned on its own.
        for shard in 0..self.open_shards() {
            let mut list = self.shards[shard].list.lock();
            let more = match algorithm {
                DefragAlgorithm::Room { bytes, alignment } => self.plan_room(
                    env,
                    shard,
                    &mut list,
                    (bytes, alignment),
                    budget,
                    &mut moves,
                ),
                _ => self.plan_shard(env, shard, &mut list, algorithm, budget, &mut moves),
            };
            if !more {
                break;
            }
        }
        moves
    }

    /// Plans the moves of [`DefragAlgorithm::Room`] in one shard: the window
    /// of `bytes` (start aligned to `alignment`) holding the fewest movable
    /// bytes, emptied largest allocation first into free ranges outside it.
    /// `false` when the budget is spent.
    fn plan_room(
        &self,
        env: Env<'_>,
        shard: usize,
        list: &mut BlockList,
        (bytes, alignment): (u64, u64),
        budget: &mut MoveBudget,
        moves: &mut Vec<PlannedMove>,
    ) -> bool {
        let Some(window) = room_window(list, bytes, alignment.max(1), budget.bytes) else {
            return true;
        };
        let (block_index, start, end) = window;
        let Some(block) = list.block(block_index) else {
            return true;
        };
        let mut inside: Vec<Meta> = block
            .live_metas()
            .filter(|m| m.range.offset < end && m.range.offset + m.range.size > start)
            .cloned()
            .collect();
        inside.sort_by_key(|m| std::cmp::Reverse(m.range.size));
        let dests: Vec<u32> = list
            .iter()
            .filter(|(_, b)| b.is_tlsf())
            .map(|(i, _)| i)
            .collect();
        let epoch = self.epoch.load(Ordering::Relaxed);
        // Free ranges of the window that a destination search took: held
        // until planning ends so that no destination lands in the window.
        let mut held: Vec<(u32, Range)> = Vec::new();
        let mut more = true;
        for meta in inside {
            if budget.allocations == 0 {
                more = false;
                break;
            }
            if meta.range.size > budget.bytes {
                more = false;
                break;
            }
            let request = move_request(&meta);
            let mut placed = None;
            'search: for &dest in &dests {
                while let Some(range) = list.block_mut(dest).and_then(|b| b.allocate(&request)) {
                    let in_window = dest == block_index
                        && range.offset < end
                        && range.offset + range.size > start;
                    if in_window {
                        held.push((dest, range));
                        continue;
                    }
                    placed = Some((dest, range));
                    break 'search;
                }
            }
            let Some(placed) = placed else {
                // No room outside the window for this one: later passes may
                // find some once other moves have ended.
                continue;
            };
            self.reserve_move(
                env,
                shard,
                list,
                block_index,
                placed,
                &meta,
                epoch,
                budget,
                moves,
            );
        }
        for (index, range) in held {
            if let Some(b) = list.block_mut(index) {
                // The range was taken just above and is not an allocation.
                let _ = b.free(range.id, range.offset);
            }
        }
        more
    }

    /// Plans one shard's moves into `moves`; `false` when the budget is spent.
    fn plan_shard(
        &self,
        env: Env<'_>,
        shard: usize,
        list: &mut BlockList,
        algorithm: DefragAlgorithm,
        budget: &mut MoveBudget,
        moves: &mut Vec<PlannedMove>,
    ) -> bool {
        let steps = plan_steps(list, algorithm);
        let mut received = std::collections::HashSet::new();
        let epoch = self.epoch.load(Ordering::Relaxed);
        for step in steps {
            let src = step.source;
            if algorithm == DefragAlgorithm::Fast && received.contains(&src) {
                break;
            }
            let Some(block) = list.block(src) else {
                continue;
            };
            let busy = |m: &Meta| m.pinned || m.moving || m.reserved || m.aliased;
            if step.whole && block.live_metas().any(busy) {
                continue;
            }
            let mut candidates: Vec<Meta> =
                block.live_metas().filter(|m| !busy(m)).cloned().collect();
            // The source's own free ranges, for compaction inside it: built
            // once, as planning only shrinks free ranges (destinations are
            // reserved, sources freed when the pass ends), so a range it
            // says is the lowest that could hold a size stays so.
            let mut own_free: Option<LowestFree> = None;
            match algorithm {
                DefragAlgorithm::Fast => {
                    candidates.sort_by_key(|m| std::cmp::Reverse(m.range.size))
                }
                DefragAlgorithm::Full | DefragAlgorithm::Room { .. } => {
                    candidates.sort_by_key(|m| std::cmp::Reverse(m.range.offset))
                }
            }
            for meta in candidates {
                if budget.allocations == 0 {
                    return false;
                }
                if meta.range.size > budget.bytes {
                    continue;
                }
                let request = move_request(&meta);
                let mut placed = None;
                for &dest in &step.dests {
                    let Some(block) = list.block_mut(dest) else {
                        continue;
                    };
                    let range = if dest == src {
                        // Compaction inside the block: only lower.
                        let index = own_free.get_or_insert_with(|| LowestFree::of(block));
                        let Some(start) = index.lowest(request.size, meta.range.offset) else {
                            continue;
                        };
                        block.allocate_lowest_from(&request, meta.range.offset, start)
                    } else {
                        block.allocate(&request)
                    };
                    let Some(range) = range else {
                        continue;
                    };
                    placed = Some((dest, range));
                    break;
                }
                let Some((dest, range)) = placed else {
                    continue;
                };
                if dest != src {
                    received.insert(dest);
                }
                self.reserve_move(
                    env,
                    shard,
                    list,
                    src,
                    (dest, range),
                    &meta,
                    epoch,
                    budget,
                    moves,
                );
            }
        }
        true
    }

    /// Records the move of `meta` (in block `src`) to `range` of block
    /// `dest` (already taken from that block): the destination becomes a
    /// reserved allocation with the source's id, the source is marked moving,
    /// and the budget is charged.
    #[allow(clippy::too_many_arguments)]
    fn reserve_move(
        &self,
        env: Env<'_>,
        shard: usize,
        list: &mut BlockList,
        src: u32,
        (dest, range): (u32, Range),
        meta: &Meta,
        epoch: u32,
        budget: &mut MoveBudget,
        moves: &mut Vec<PlannedMove>,
    ) {
        let request = move_request(meta);
        let tag: String = list
            .block(src)
            .and_then(|b| b.tags.get(&meta.range.offset))
            .map(|t| t.to_string())
            .unwrap_or_default();
        let placement = SharedPlacement {
            request,
            lead: meta.lead,
            margin: meta.margin,
        };
        let desc = AllocationDesc {
            size: meta.size,
            alignment: meta.alignment,
            kind: meta.kind,
            options: crate::desc::AllocationOptions::default().tagged(&tag),
            ..AllocationDesc::default()
        };
        let dest_allocation =
            self.finish(env, shard, list, dest, range, &placement, &desc, meta.id);
        if let Some(b) = list.block_mut(dest) {
            b.with_live_meta(range.id, meta.id, |m| {
                m.reserved = true;
                // A move keeps the allocation's age.
                m.frame = meta.frame;
            });
        }
        if let Some(b) = list.block_mut(src) {
            b.with_live_meta(meta.range.id, meta.id, |m| m.moving = true);
        }
        budget.bytes -= meta.range.size;
        budget.allocations -= 1;
        moves.push(PlannedMove {
            source: Location {
                allocator: env.allocator,
                list: self.list_ref,
                shard: shard as u8,
                block: src,
                range: meta.range,
                epoch,
            },
            id: meta.id,
            size: meta.size,
            source_memory: list
                .block(src)
                .map_or(crate::device::DeviceMemory(0), |b| b.memory),
            source_offset: meta.range.offset + meta.lead,
            dest: dest_allocation,
        });
    }

    /// Clears a planned move's marks: the source is no longer moving, a
    /// committed destination no longer reserved, and a cancellation noted
    /// for it forgotten.
    pub fn resolve_move(&self, source: &Location, id: u64, dest: Option<&Location>) {
        // A committed move's source is freed next, and its destination is
        // still reserved: both stay marked until then
        // ([`Self::settle_committed`]), so no other session's pass plans
        // either of them meanwhile (a source about to be freed, handed out as
        // a move, would be copied from freed memory).
        if dest.is_some() {
            return;
        }
        let Ok(mut list) = self.lock(source.shard) else {
            return;
        };
        list.cancelled.remove(&id);
        if let Some(b) = list.block_mut(source.block) {
            b.with_live_meta(source.range.id, id, |m| m.moving = false);
        }
    }

    /// After `end_pass` freed a committed move's source: its destination
    /// (`dest`, the allocation now named `id`) is an ordinary allocation,
    /// and the mark the source's free left in `cancelled` goes.
    pub fn settle_committed(&self, dest: &Location, id: u64) {
        // A move's destination is in its source's shard.
        let Ok(mut list) = self.lock(dest.shard) else {
            return;
        };
        list.cancelled.remove(&id);
        if let Some(b) = list.block_mut(dest.block) {
            b.with_live_meta(dest.range.id, id, |m| m.reserved = false);
        }
    }

    /// Whether the allocation `id`, source of a pending move, was freed.
    pub fn source_freed(&self, id: u64) -> bool {
        self.shards[..self.open_shards()]
            .iter()
            .any(|s| s.list.lock().cancelled.contains(&id))
    }
}

#[cfg(test)]
mod lowest_free_tests {
    use super::LowestFree;
    use proptest::prelude::*;

    proptest! {
        /// `lowest` agrees with a scan of the ranges.
        #[test]
        fn lowest_matches_a_scan(
            sizes in prop::collection::vec((1u64..64, 1u64..64), 0..40),
            size in 1u64..80,
            below in 0u64..3000,
        ) {
            // Free ranges in address order with allocated gaps between them.
            let mut offset = 0;
            let ranges: Vec<(u64, u64)> = sizes
                .iter()
                .map(|&(gap, len)| {
                    offset += gap;
                    let r = (offset, len);
                    offset += len;
                    r
                })
                .collect();
            let index = LowestFree::from_free(
                ranges.iter().enumerate().map(|(i, &(o, l))| (o, l, i as u32)),
            );
            let scan = ranges
                .iter()
                .enumerate()
                .find(|&(_, &(_, l))| l >= size)
                .map(|(i, &(o, _))| (o, i as u32))
                .filter(|&(o, _)| o < below);
            prop_assert_eq!(index.lowest(size, below), scan);
        }
    }
}
