//! Linear allocation: a bump allocator that works as a stack or as a ring
//! buffer, for per-frame, staging and uniform memory.

use std::collections::VecDeque;
use std::fmt;

use super::{
    checked_alignment, checked_granularity, same_page, Gap, Placement, Range, RangeAllocator,
    RangeError, RangeId, RangeKind, RangeRequest, Site,
};

/// How a [`LinearAllocator`] takes freed memory back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinearMode {
    /// Memory comes back when the newest allocations are freed (LIFO);
    /// allocation never wraps around.
    Stack,
    /// Memory comes back when the oldest allocations are freed (FIFO), and
    /// allocation wraps around to offset 0 once the end is reached and the
    /// front is free: a ring buffer.
    Ring,
}

/// An allocation, live or freed but not yet taken back.
#[derive(Clone, Copy, Debug)]
struct Entry {
    offset: u64,
    size: u64,
    kind: RangeKind,
    /// The id slot of a live entry.
    slot: u32,
    freed: bool,
}

impl Entry {
    fn end(&self) -> u64 {
        self.offset + self.size
    }
}

/// Where an id points.
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// The allocation sequence number of the entry.
    seq: u64,
    /// Bumped each time the slot gets a live allocation; part of its id.
    generation: u8,
    live: bool,
}

/// A linear range allocator: allocations go at increasing addresses.
///
/// Entries sit in a `VecDeque` in allocation order; entry `i` has the
/// allocation sequence number `front_seq + i`, and an id names a slot of a
/// generation-checked slab that holds that number, so free finds its entry
/// in constant time. Any live allocation can be freed in any order: it is
/// only marked, and its memory comes back once the freed entries reach the
/// end the mode takes back from (popping is amortized constant time). In
/// [`LinearMode::Ring`] freed entries are also taken back from the newest
/// end, which only helps. When no live allocation is left, the allocator is
/// back to its empty state and allocates from offset 0 again.
///
/// [`RangeAllocator::largest_free`] reports the largest range the next
/// allocation could use (the space after the newest allocation, or in ring
/// mode the space before the oldest one), not holes left by freed entries
/// that are not yet taken back; [`RangeAllocator::for_each_free`] reports
/// every byte outside live allocations.
pub struct LinearAllocator {
    capacity: u64,
    mode: LinearMode,
    granularity: u64,
    entries: VecDeque<Entry>,
    /// The sequence number of `entries[0]`.
    front_seq: u64,
    slots: Vec<Slot>,
    vacant_slots: Vec<u32>,
    live_count: u32,
    live_bytes: u64,
    /// Bumped on every change, to catch a stale placement in debug builds.
    epoch: u64,
}

impl LinearAllocator {
    /// An empty allocator of `capacity` bytes in `mode`, that keeps linear
    /// and optimal ranges on separate pages of `buffer_image_granularity`
    /// bytes (a power of two; 0 or 1 when the device needs no separation).
    pub fn new(capacity: u64, mode: LinearMode, buffer_image_granularity: u64) -> Self {
        LinearAllocator {
            capacity,
            mode,
            granularity: checked_granularity(buffer_image_granularity),
            entries: VecDeque::new(),
            front_seq: 0,
            slots: Vec::new(),
            vacant_slots: Vec::new(),
            live_count: 0,
            live_bytes: 0,
            epoch: 0,
        }
    }

    /// The mode it was made with.
    pub fn mode(&self) -> LinearMode {
        self.mode
    }

    /// The buffer-image granularity in use (at least 1).
    pub fn granularity(&self) -> u64 {
        self.granularity
    }

    /// Whether the newest entries lie below the oldest (ring mode only).
    fn wrapped(&self) -> bool {
        match (self.entries.front(), self.entries.back()) {
            (Some(front), Some(back)) => back.offset < front.offset,
            _ => false,
        }
    }

    /// The gaps the next allocation may use, in the order they are tried:
    /// the one after the newest entry, then in ring mode the one before the
    /// oldest, reached by wrapping around.
    fn gaps(&self) -> [Option<Gap>; 2] {
        let (Some(front), Some(back)) = (self.entries.front(), self.entries.back()) else {
            return [
                Some(Gap {
                    start: 0,
                    end: self.capacity,
                    before: None,
                    after: None,
                }),
                None,
            ];
        };
        let before = Some((back.end(), back.kind));
        let after = Some((front.offset, front.kind));
        if self.wrapped() {
            return [
                Some(Gap {
                    start: back.end(),
                    end: front.offset,
                    before,
                    after,
                }),
                None,
            ];
        }
        let tail = Gap {
            start: back.end(),
            end: self.capacity,
            before,
            after: None,
        };
        let head = Gap {
            start: 0,
            end: front.offset,
            before: None,
            after,
        };
        [Some(tail), (self.mode == LinearMode::Ring).then_some(head)]
    }

    /// Drops freed entries from the ends the mode takes memory back from.
    fn reclaim(&mut self) {
        while self.entries.back().is_some_and(|entry| entry.freed) {
            self.entries.pop_back();
        }
        if self.mode == LinearMode::Ring {
            while self.entries.front().is_some_and(|entry| entry.freed) {
                self.entries.pop_front();
                self.front_seq += 1;
            }
        }
        if self.entries.is_empty() {
            self.front_seq = 0;
        }
    }

    /// Live entries in address order.
    fn live_by_address(&self) -> impl Iterator<Item = &Entry> {
        let split = match self.entries.front() {
            Some(front) if self.wrapped() => {
                self.entries.partition_point(|e| e.offset >= front.offset)
            }
            _ => self.entries.len(),
        };
        self.entries
            .range(split..)
            .chain(self.entries.range(..split))
            .filter(|e| !e.freed)
    }

    /// Error for a broken invariant.
    fn broken(what: String) -> Result<(), RangeError> {
        Err(RangeError::Invariant(format!("linear: {what}")))
    }

    /// Checks the entries' order and bounds, and the counts.
    fn validate_entries(&self) -> Result<(), RangeError> {
        let (mut wraps, mut live, mut bytes) = (0, 0u32, 0u64);
        let mut prev: Option<&Entry> = None;
        for entry in &self.entries {
            if entry.size == 0
                || entry
                    .offset
                    .checked_add(entry.size)
                    .is_none_or(|end| end > self.capacity)
            {
                return Self::broken(format!("entry {entry:?} is out of bounds"));
            }
            if let Some(prev) = prev {
                if entry.offset < prev.offset {
                    wraps += 1;
                } else if entry.offset < prev.end() {
                    return Self::broken(format!("entries {prev:?} and {entry:?} overlap"));
                }
            }
            if !entry.freed {
                live += 1;
                bytes += entry.size;
            }
            prev = Some(entry);
        }
        let wrap_limit = if self.mode == LinearMode::Ring { 1 } else { 0 };
        let (front, back) = (self.entries.front(), self.entries.back());
        let laps_overlap = match (front, back) {
            (Some(front), Some(back)) => wraps == 1 && back.end() > front.offset,
            _ => false,
        };
        if wraps > wrap_limit || laps_overlap {
            return Self::broken(format!("entries wrap {wraps} times"));
        }
        let front_freed = self.mode == LinearMode::Ring && front.is_some_and(|e| e.freed);
        if front_freed || back.is_some_and(|e| e.freed) {
            return Self::broken("a freed entry was not taken back".into());
        }
        if (live, bytes) != (self.live_count, self.live_bytes) {
            return Self::broken(format!("counted {live} live entries of {bytes} bytes"));
        }
        if self.entries.is_empty() && self.front_seq != 0 {
            return Self::broken("empty, but the sequence does not restart".into());
        }
        let mut last: Option<&Entry> = None;
        for entry in self.live_by_address() {
            if let Some(last) = last {
                if last.kind.conflicts_with(entry.kind)
                    && same_page(last.end(), entry.offset, self.granularity)
                {
                    return Self::broken(format!("{last:?} and {entry:?} share a page"));
                }
            }
            last = Some(entry);
        }
        Ok(())
    }

    /// Checks that ids and live entries match one to one.
    fn validate_slots(&self) -> Result<(), RangeError> {
        let mut vacant = vec![false; self.slots.len()];
        for &slot in &self.vacant_slots {
            match self.slots.get(slot as usize) {
                Some(s) if !s.live && !vacant[slot as usize] => vacant[slot as usize] = true,
                _ => return Self::broken(format!("vacant slot {slot} is wrong")),
            }
        }
        let mut live = 0;
        for (index, slot) in self.slots.iter().enumerate() {
            if !slot.live {
                if !vacant[index] {
                    return Self::broken(format!("slot {index} is lost"));
                }
                continue;
            }
            live += 1;
            let entry = slot
                .seq
                .checked_sub(self.front_seq)
                .and_then(|i| self.entries.get(i as usize));
            if !entry.is_some_and(|e| !e.freed && e.slot == index as u32) {
                return Self::broken(format!("slot {index} points to {entry:?}"));
            }
        }
        if live != self.live_count {
            return Self::broken(format!(
                "{live} live slots for {} allocations",
                self.live_count
            ));
        }
        Ok(())
    }
}

impl RangeAllocator for LinearAllocator {
    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn find(&self, request: &RangeRequest) -> Option<Placement> {
        let alignment = checked_alignment(request.alignment)?;
        if request.size == 0
            || (self.vacant_slots.is_empty() && self.slots.len() as u32 >= RangeId::MAX_SLOTS)
        {
            return None;
        }
        let offset =
            self.gaps().into_iter().flatten().find_map(|gap| {
                gap.place(request.size, alignment, request.kind, self.granularity)
            })?;
        Some(Placement {
            offset,
            size: request.size,
            site: Site::Linear,
            epoch: self.epoch,
        })
    }

    fn commit(&mut self, placement: Placement, kind: RangeKind) -> Range {
        debug_assert_eq!(placement.epoch, self.epoch, "the placement is stale");
        debug_assert!(
            placement.site == Site::Linear,
            "{placement:?} was not found by a linear allocator"
        );
        assert!(
            placement
                .offset
                .checked_add(placement.size)
                .is_some_and(|end| end <= self.capacity),
            "{placement:?} is out of bounds"
        );
        let seq = self.front_seq + self.entries.len() as u64;
        let slot = match self.vacant_slots.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(Slot {
                    seq,
                    generation: 0,
                    live: false,
                });
                self.slots.len() as u32 - 1
            }
        };
        let entry = &mut self.slots[slot as usize];
        entry.seq = seq;
        entry.live = true;
        entry.generation = entry.generation.wrapping_add(1);
        let id = RangeId::from_parts(slot, entry.generation);
        self.entries.push_back(Entry {
            offset: placement.offset,
            size: placement.size,
            kind,
            slot,
            freed: false,
        });
        self.live_count += 1;
        self.live_bytes += placement.size;
        self.epoch = self.epoch.wrapping_add(1);
        Range {
            id,
            offset: placement.offset,
            size: placement.size,
        }
    }

    fn is_live(&self, id: RangeId) -> bool {
        self.slots
            .get(id.slot() as usize)
            .is_some_and(|slot| slot.live && slot.generation == id.generation())
    }

    fn free(&mut self, id: RangeId) -> Result<(), RangeError> {
        let slot = match self.slots.get_mut(id.slot() as usize) {
            Some(slot) if slot.live && slot.generation == id.generation() => slot,
            _ => return Err(RangeError::UnknownId(id)),
        };
        slot.live = false;
        let entry = &mut self.entries[(slot.seq - self.front_seq) as usize];
        debug_assert!(!entry.freed && entry.slot == id.slot());
        entry.freed = true;
        self.live_count -= 1;
        self.live_bytes -= entry.size;
        self.vacant_slots.push(id.slot());
        self.reclaim();
        self.epoch = self.epoch.wrapping_add(1);
        Ok(())
    }

    fn clear(&mut self) {
        for entry in self.entries.drain(..).filter(|e| !e.freed) {
            self.slots[entry.slot as usize].live = false;
            self.vacant_slots.push(entry.slot);
        }
        self.front_seq = 0;
        self.live_count = 0;
        self.live_bytes = 0;
        self.epoch = self.epoch.wrapping_add(1);
    }

    fn allocation_count(&self) -> u32 {
        self.live_count
    }

    fn allocated_bytes(&self) -> u64 {
        self.live_bytes
    }

    fn largest_free(&self) -> u64 {
        self.gaps()
            .into_iter()
            .flatten()
            .map(|gap| gap.end - gap.start)
            .max()
            .unwrap_or(0)
    }

    fn for_each_free(&self, visit: &mut dyn FnMut(u64, u64)) {
        let mut offset = 0;
        for entry in self.live_by_address() {
            if entry.offset > offset {
                visit(offset, entry.offset - offset);
            }
            offset = entry.end();
        }
        if self.capacity > offset {
            visit(offset, self.capacity - offset);
        }
    }

    fn for_each_allocation_slot(&self, visit: &mut dyn FnMut(u64, u64, RangeKind, u32)) {
        for entry in self.live_by_address() {
            visit(entry.offset, entry.size, entry.kind, entry.slot);
        }
    }

    fn validate(&self) -> Result<(), RangeError> {
        self.validate_entries()?;
        self.validate_slots()
    }
}

impl fmt::Debug for LinearAllocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinearAllocator")
            .field("capacity", &self.capacity)
            .field("mode", &self.mode)
            .field("granularity", &self.granularity)
            .field("allocations", &self.live_count)
            .field("allocated_bytes", &self.live_bytes)
            .field("entries", &self.entries.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range::shadow::{run_suite, Policy};

    fn request(size: u64, alignment: u64, kind: RangeKind) -> RangeRequest {
        RangeRequest {
            size,
            alignment,
            kind,
        }
    }

    fn linear(size: u64) -> RangeRequest {
        request(size, 1, RangeKind::Linear)
    }

    fn free_ranges(allocator: &LinearAllocator) -> Vec<(u64, u64)> {
        let mut free = Vec::new();
        allocator.for_each_free(&mut |offset, size| free.push((offset, size)));
        free
    }

    #[test]
    fn zero_capacity_holds_nothing() {
        for mode in [LinearMode::Stack, LinearMode::Ring] {
            let mut allocator = LinearAllocator::new(0, mode, 1);
            assert_eq!(allocator.allocate(&linear(1)), None);
            assert_eq!(allocator.largest_free(), 0);
            assert!(free_ranges(&allocator).is_empty());
            assert_eq!(
                allocator.free(RangeId(0)),
                Err(RangeError::UnknownId(RangeId(0)))
            );
            allocator.validate().unwrap();
        }
    }

    #[test]
    fn exact_fit_and_too_large() {
        for mode in [LinearMode::Stack, LinearMode::Ring] {
            let mut allocator = LinearAllocator::new(1000, mode, 1);
            assert_eq!(allocator.allocate(&linear(1001)), None);
            let whole = allocator.allocate(&linear(1000)).unwrap();
            assert_eq!(whole.offset, 0);
            assert_eq!(allocator.allocate(&linear(1)), None);
            allocator.free(whole.id).unwrap();
            assert_eq!(free_ranges(&allocator), [(0, 1000)]);
            allocator.validate().unwrap();
        }
    }

    #[test]
    fn stack_takes_memory_back_from_the_top() {
        let mut stack = LinearAllocator::new(1000, LinearMode::Stack, 1);
        let [a, b, c] = [100, 200, 300].map(|size| stack.allocate(&linear(size)).unwrap());
        assert_eq!([a.offset, b.offset, c.offset], [0, 100, 300]);
        stack.free(b.id).unwrap();
        assert_eq!(stack.largest_free(), 400);
        assert_eq!(free_ranges(&stack), [(100, 200), (600, 400)]);
        stack.free(c.id).unwrap();
        assert_eq!(stack.largest_free(), 900);
        assert_eq!(stack.allocate(&linear(50)).unwrap().offset, 100);
        stack.free(a.id).unwrap();
        assert_eq!(stack.allocation_count(), 1);
        stack.validate().unwrap();
        // Freeing from the bottom takes nothing back while the top is live.
        assert_eq!(stack.allocate(&linear(900)), None);
    }

    #[test]
    fn ring_wraps_around() {
        let mut ring = LinearAllocator::new(1000, LinearMode::Ring, 1);
        let a = ring.allocate(&linear(400)).unwrap();
        let b = ring.allocate(&linear(400)).unwrap();
        assert_eq!(ring.allocate(&linear(300)), None);
        ring.free(a.id).unwrap();
        assert_eq!(ring.largest_free(), 400);
        let c = ring.allocate(&linear(300)).unwrap();
        assert_eq!(c.offset, 0);
        let d = ring.allocate(&linear(100)).unwrap();
        assert_eq!(d.offset, 300);
        assert_eq!(ring.allocate(&linear(1)), None);
        assert_eq!(free_ranges(&ring), [(800, 200)]);
        let mut live = Vec::new();
        ring.for_each_allocation(&mut |offset, size, _| live.push((offset, size)));
        assert_eq!(live, [(0, 300), (300, 100), (400, 400)]);
        ring.validate().unwrap();
        ring.free(b.id).unwrap();
        assert_eq!(ring.allocate(&linear(600)).unwrap().offset, 400);
        ring.free(c.id).unwrap();
        ring.free(d.id).unwrap();
        ring.validate().unwrap();
        assert_eq!(ring.largest_free(), 400);
    }

    #[test]
    fn ring_takes_back_freed_newest_too() {
        let mut ring = LinearAllocator::new(1000, LinearMode::Ring, 1);
        let a = ring.allocate(&linear(400)).unwrap();
        let b = ring.allocate(&linear(400)).unwrap();
        ring.free(b.id).unwrap();
        assert_eq!(ring.allocate(&linear(600)).unwrap().offset, 400);
        ring.free(a.id).unwrap();
        ring.validate().unwrap();
    }

    #[test]
    fn huge_alignment() {
        let mut allocator = LinearAllocator::new(4 << 20, LinearMode::Stack, 1);
        assert_eq!(allocator.allocate(&linear(1)).unwrap().offset, 0);
        assert_eq!(
            allocator
                .allocate(&request(1, 1 << 20, RangeKind::Linear))
                .unwrap()
                .offset,
            1 << 20
        );
        assert_eq!(
            allocator.allocate(&request(1, 1 << 22, RangeKind::Linear)),
            None
        );
        assert_eq!(
            free_ranges(&allocator),
            [(1, (1 << 20) - 1), ((1 << 20) + 1, (3 << 20) - 1)]
        );
        allocator.validate().unwrap();
    }

    #[test]
    fn granularity_separates_kinds() {
        for g in [1, 1024, 65536] {
            let mut allocator = LinearAllocator::new(16 * 65536, LinearMode::Stack, g);
            assert_eq!(allocator.allocate(&linear(10)).unwrap().offset, 0);
            assert_eq!(allocator.allocate(&linear(10)).unwrap().offset, 10);
            let optimal = allocator
                .allocate(&request(10, 1, RangeKind::Optimal))
                .unwrap();
            assert_eq!(optimal.offset, if g == 1 { 20 } else { g });
            let unknown = allocator
                .allocate(&request(10, 1, RangeKind::Unknown))
                .unwrap();
            assert_eq!(unknown.offset, if g == 1 { 30 } else { 2 * g });
            allocator.validate().unwrap();
        }
    }

    #[test]
    fn ring_wrap_keeps_granularity_with_the_oldest() {
        let mut ring = LinearAllocator::new(4096, LinearMode::Ring, 1024);
        let a = ring.allocate(&request(600, 1, RangeKind::Optimal)).unwrap();
        let b = ring
            .allocate(&request(3000, 1, RangeKind::Optimal))
            .unwrap();
        assert_eq!(b.offset, 600);
        ring.free(a.id).unwrap();
        // [0, 600) is free but ends on the optimal range's page.
        assert_eq!(ring.allocate(&linear(100)), None);
        assert_eq!(
            ring.allocate(&request(600, 1, RangeKind::Optimal))
                .unwrap()
                .offset,
            0
        );
        ring.validate().unwrap();
    }

    #[test]
    fn stale_and_double_free_are_refused() {
        for mode in [LinearMode::Stack, LinearMode::Ring] {
            let mut allocator = LinearAllocator::new(1 << 16, mode, 1);
            let first = allocator.allocate(&linear(100)).unwrap();
            allocator.free(first.id).unwrap();
            assert_eq!(
                allocator.free(first.id),
                Err(RangeError::UnknownId(first.id))
            );
            let second = allocator.allocate(&linear(100)).unwrap();
            assert_eq!(second.id.slot(), first.id.slot());
            assert_eq!(
                allocator.free(first.id),
                Err(RangeError::UnknownId(first.id))
            );
            assert_eq!(
                allocator.free(RangeId(7)),
                Err(RangeError::UnknownId(RangeId(7)))
            );
            assert_eq!(allocator.allocation_count(), 1);
            allocator.validate().unwrap();
        }
    }

    #[test]
    fn clear_frees_everything() {
        for mode in [LinearMode::Stack, LinearMode::Ring] {
            let mut allocator = LinearAllocator::new(1 << 16, mode, 1024);
            let ids: Vec<RangeId> = (1..20)
                .map(|s| allocator.allocate(&linear(s * 10)).unwrap().id)
                .collect();
            allocator.free(ids[3]).unwrap();
            allocator.clear();
            assert_eq!(
                (allocator.allocation_count(), allocator.allocated_bytes()),
                (0, 0)
            );
            assert_eq!(free_ranges(&allocator), [(0, 1 << 16)]);
            assert_eq!(allocator.largest_free(), 1 << 16);
            for &id in &ids {
                assert_eq!(allocator.free(id), Err(RangeError::UnknownId(id)));
            }
            allocator.validate().unwrap();
            assert_eq!(allocator.allocate(&linear(10)).unwrap().offset, 0);
        }
    }

    #[test]
    fn stack_random_operations_match_the_shadow() {
        let ops = run_suite(Policy::Stack, |capacity, granularity| {
            Box::new(LinearAllocator::new(
                capacity,
                LinearMode::Stack,
                granularity,
            ))
        });
        assert!(ops >= 100_000, "{ops} operations");
    }

    #[test]
    fn ring_random_operations_match_the_shadow() {
        let ops = run_suite(Policy::Ring, |capacity, granularity| {
            Box::new(LinearAllocator::new(
                capacity,
                LinearMode::Ring,
                granularity,
            ))
        });
        assert!(ops >= 100_000, "{ops} operations");
    }
}
