//! A binary buddy range allocator: every allocation takes an aligned
//! power-of-two block, split from a larger one and merged back with its buddy
//! when both are free (the seed article's answer to external fragmentation,
//! and gpu-alloc's algorithm). Here to be measured against TLSF
//! (`cargo xtask bench -- --range`): it trades internal fragmentation (a
//! request is rounded up to a power of two) for free space that never
//! splinters below the block sizes in use.
//!
//! Layout: `[0, capacity)` is cut into the aligned power-of-two regions of
//! `capacity`'s binary digits, largest first (a capacity of 3 MiB is a 2 MiB
//! region at 0 and a 1 MiB region at 2 MiB), each the root of a buddy tree.
//! Blocks are at least the minimum block, the buffer-image granularity
//! rounded up to a power of two, so two allocations never share a
//! granularity page and no kind check is needed. Free blocks are kept per
//! order in address order; a request takes the lowest block of the smallest
//! order that fits, splitting it down.
//!
//! Costs: allocate and free are O(orders × log blocks); walks sort the live
//! ranges by address.

#![forbid(unsafe_code)]

use std::collections::BTreeSet;

use super::{Placement, Range, RangeAllocator, RangeError, RangeId, RangeKind, RangeRequest, Site};

/// Orders of blocks: 2^0 to 2^63 bytes.
const ORDERS: usize = 64;

/// One allocation slot.
#[derive(Clone, Copy, Debug)]
struct Slot {
    live: bool,
    generation: u8,
    offset: u64,
    size: u64,
    order: u8,
    kind: RangeKind,
}

/// A buddy allocator over `[0, capacity)`.
#[derive(Clone)]
pub struct BuddyAllocator {
    capacity: u64,
    min_order: u32,
    /// Free blocks' offsets, per order.
    free: Vec<BTreeSet<u64>>,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    count: u32,
    bytes: u64,
}

/// The block order a request needs (`None`: larger than any block can be).
fn order_for(size: u64, alignment: u64, min_order: u32) -> Option<u32> {
    let need = size.max(alignment).max(1u64 << min_order);
    let block = need.checked_next_power_of_two()?;
    Some(block.trailing_zeros())
}

impl BuddyAllocator {
    /// An allocator of `capacity` bytes whose blocks are at least
    /// `granularity` bytes (rounded up to a power of two; 1 means no minimum).
    pub fn new(capacity: u64, granularity: u64) -> Self {
        let min_order = granularity
            .max(1)
            .checked_next_power_of_two()
            .map_or(63, u64::trailing_zeros);
        let mut allocator = Self {
            capacity,
            min_order,
            free: vec![BTreeSet::new(); ORDERS],
            slots: Vec::new(),
            free_slots: Vec::new(),
            count: 0,
            bytes: 0,
        };
        allocator.reset();
        allocator
    }

    /// The smallest block, in bytes.
    pub fn min_block(&self) -> u64 {
        1 << self.min_order
    }

    /// Bytes held by live allocations' blocks (sizes rounded up to their
    /// blocks): what the allocator has handed out, padding included.
    pub fn block_bytes(&self) -> u64 {
        self.slots
            .iter()
            .filter(|s| s.live)
            .map(|s| 1u64 << s.order)
            .sum()
    }

    /// The roots: the aligned regions of `capacity`'s binary digits, largest
    /// first, those below the minimum block left out.
    fn reset(&mut self) {
        for list in &mut self.free {
            list.clear();
        }
        let mut offset = 0u64;
        for order in (0..ORDERS as u32).rev() {
            if self.capacity & (1u64 << order) != 0 {
                if order >= self.min_order {
                    self.free[order as usize].insert(offset);
                }
                offset += 1u64 << order;
            }
        }
    }

    fn live_sorted(&self) -> Vec<(u32, &Slot)> {
        let mut live: Vec<(u32, &Slot)> =
            (0u32..).zip(&self.slots).filter(|(_, s)| s.live).collect();
        live.sort_unstable_by_key(|(_, s)| s.offset);
        live
    }

    fn broken<T>(what: String) -> Result<T, RangeError> {
        Err(RangeError::Invariant(what))
    }
}

impl RangeAllocator for BuddyAllocator {
    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn find(&self, request: &RangeRequest) -> Option<Placement> {
        if self.free_slots.is_empty() && self.slots.len() >= RangeId::MAX_SLOTS as usize {
            return None;
        }
        let want = order_for(request.size, request.alignment, self.min_order)?;
        let (order, &offset) =
            (want as usize..ORDERS).find_map(|o| self.free[o].first().map(|offset| (o, offset)))?;
        Some(Placement {
            offset,
            size: request.size,
            site: Site::Buddy {
                from: order as u8,
                want: want as u8,
            },
            epoch: 0,
        })
    }

    fn commit(&mut self, placement: Placement, kind: RangeKind) -> Range {
        let Site::Buddy { from, want } = placement.site else {
            panic!("{placement:?} was not found by a buddy allocator");
        };
        let (from, want) = (usize::from(from), usize::from(want));
        let offset = placement.offset;
        let removed = self.free[from].remove(&offset);
        debug_assert!(removed, "a placement from find, with no change since");
        // Split down: the upper halves stay free.
        for order in (want..from).rev() {
            self.free[order].insert(offset + (1u64 << order));
        }
        let slot = match self.free_slots.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(Slot {
                    live: false,
                    generation: 0,
                    offset: 0,
                    size: 0,
                    order: 0,
                    kind,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let s = &mut self.slots[slot as usize];
        *s = Slot {
            live: true,
            generation: s.generation,
            offset,
            size: placement.size,
            order: want as u8,
            kind,
        };
        self.count += 1;
        self.bytes += placement.size;
        Range {
            id: RangeId::from_parts(slot, s.generation),
            offset,
            size: placement.size,
        }
    }

    fn is_live(&self, id: RangeId) -> bool {
        self.slots
            .get(id.slot() as usize)
            .is_some_and(|s| s.live && s.generation == id.generation())
    }

    fn free(&mut self, id: RangeId) -> Result<(), RangeError> {
        let index = id.slot() as usize;
        let slot = match self.slots.get_mut(index) {
            Some(s) if s.live && s.generation == id.generation() => s,
            _ => return Err(RangeError::UnknownId(id)),
        };
        slot.live = false;
        slot.generation = slot.generation.wrapping_add(1);
        let (mut offset, mut order) = (slot.offset, slot.order as usize);
        self.count -= 1;
        self.bytes -= slot.size;
        self.free_slots.push(index as u32);
        // Merge with the buddy while it is free; a root's buddy would lie
        // past the capacity or in another root, never in its free list.
        while order + 1 < ORDERS {
            let buddy = offset ^ (1u64 << order);
            let parent_end = (offset & buddy).checked_add(1u64 << (order + 1));
            if parent_end.is_none_or(|end| end > self.capacity) || !self.free[order].remove(&buddy)
            {
                break;
            }
            offset &= buddy;
            order += 1;
        }
        self.free[order].insert(offset);
        Ok(())
    }

    fn clear(&mut self) {
        for (index, slot) in self.slots.iter_mut().enumerate() {
            if slot.live {
                slot.live = false;
                slot.generation = slot.generation.wrapping_add(1);
                self.free_slots.push(index as u32);
            }
        }
        self.count = 0;
        self.bytes = 0;
        self.reset();
    }

    fn allocation_count(&self) -> u32 {
        self.count
    }

    fn allocated_bytes(&self) -> u64 {
        self.bytes
    }

    /// The largest free block: the largest request that surely fits.
    fn largest_free(&self) -> u64 {
        (0..ORDERS)
            .rev()
            .find(|&o| !self.free[o].is_empty())
            .map_or(0, |o| 1u64 << o)
    }

    /// Free bytes between live allocations (block padding included), in
    /// address order, as for every algorithm.
    fn for_each_free(&self, visit: &mut dyn FnMut(u64, u64)) {
        let mut at = 0u64;
        for (_, s) in self.live_sorted() {
            if s.offset > at {
                visit(at, s.offset - at);
            }
            at = s.offset + s.size;
        }
        if self.capacity > at {
            visit(at, self.capacity - at);
        }
    }

    fn for_each_allocation_slot(&self, visit: &mut dyn FnMut(u64, u64, RangeKind, u32)) {
        for (slot, s) in self.live_sorted() {
            visit(s.offset, s.size, s.kind, slot);
        }
    }

    fn validate(&self) -> Result<(), RangeError> {
        // Every block, free or live, with its order: they must tile the
        // roots without overlap, each aligned to its size, and no two free
        // buddies may both be free.
        let mut blocks: Vec<(u64, u32, bool)> = Vec::new();
        for (order, list) in self.free.iter().enumerate() {
            for &offset in list {
                blocks.push((offset, order as u32, false));
            }
        }
        let (mut count, mut bytes) = (0u32, 0u64);
        for s in self.slots.iter().filter(|s| s.live) {
            if s.size == 0 || s.size > 1u64 << s.order {
                return Self::broken(format!(
                    "slot at {} of {} bytes in order {}",
                    s.offset, s.size, s.order
                ));
            }
            blocks.push((s.offset, u32::from(s.order), true));
            count += 1;
            bytes += s.size;
        }
        if (count, bytes) != (self.count, self.bytes) {
            return Self::broken(format!(
                "counted {count} allocations of {bytes} bytes, kept {} of {}",
                self.count, self.bytes
            ));
        }
        blocks.sort_unstable();
        let mut at = 0u64;
        for &(offset, order, live) in &blocks {
            let size = 1u64 << order;
            if order < self.min_order || offset % size != 0 || offset < at {
                return Self::broken(format!(
                    "block at {offset} of order {order} (previous end {at})"
                ));
            }
            let end = offset.checked_add(size).filter(|&e| e <= self.capacity);
            let Some(end) = end else {
                return Self::broken(format!(
                    "block at {offset} of order {order} past the capacity"
                ));
            };
            if !live && order + 1 < ORDERS as u32 {
                let buddy = offset ^ size;
                if self.free[order as usize].contains(&buddy)
                    && (offset & buddy)
                        .checked_add(size * 2)
                        .is_some_and(|e| e <= self.capacity)
                {
                    return Self::broken(format!(
                        "free buddies at {offset} and {buddy}, order {order}"
                    ));
                }
            }
            at = end;
        }
        Ok(())
    }
}

impl std::fmt::Debug for BuddyAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuddyAllocator")
            .field("capacity", &self.capacity)
            .field("min_block", &self.min_block())
            .field("allocations", &self.count)
            .field("allocated_bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range::shadow::{run_suite, Policy};

    fn request(size: u64, alignment: u64) -> RangeRequest {
        RangeRequest {
            size,
            alignment,
            kind: RangeKind::Linear,
        }
    }

    #[test]
    fn splits_and_merges_back() {
        let mut b = BuddyAllocator::new(1 << 20, 256);
        let a = b.allocate(&request(1000, 1)).unwrap();
        assert_eq!((a.offset, a.size), (0, 1000));
        assert_eq!(b.block_bytes(), 1024);
        let c = b.allocate(&request(3000, 1)).unwrap();
        assert_eq!(
            c.offset, 4096,
            "the lowest 4 KiB block past the split 1 KiB ones"
        );
        assert_eq!(b.largest_free(), 512 << 10);
        b.validate().unwrap();
        b.free(a.id).unwrap();
        b.free(c.id).unwrap();
        assert_eq!(b.largest_free(), 1 << 20, "everything merged back");
        assert_eq!(b.free(a.id), Err(RangeError::UnknownId(a.id)));
        b.validate().unwrap();
    }

    #[test]
    fn roots_follow_the_binary_digits_of_the_capacity() {
        let mut b = BuddyAllocator::new(3 << 20, 1);
        assert_eq!(b.largest_free(), 2 << 20);
        let big = b.allocate(&request(2 << 20, 1)).unwrap();
        let next = b.allocate(&request(1 << 20, 1)).unwrap();
        assert_eq!((big.offset, next.offset), (0, 2 << 20));
        assert!(b.allocate(&request(1, 1)).is_none());
        assert!(BuddyAllocator::new(3 << 20, 1)
            .allocate(&request(2_500_000, 1))
            .is_none());
        b.validate().unwrap();
    }

    #[test]
    fn huge_and_odd_requests_are_refused_not_wrapped() {
        let mut b = BuddyAllocator::new(u64::MAX, 1024);
        assert!(b.allocate(&request(u64::MAX, 1)).is_none());
        assert!(b.allocate(&request((1 << 63) + 1, 1)).is_none());
        let r = b.allocate(&request(1 << 62, 1 << 62)).unwrap();
        assert_eq!(r.offset % (1 << 62), 0);
        b.validate().unwrap();
    }

    #[test]
    fn random_operations_match_the_shadow() {
        let ops = run_suite(Policy::Buddy, |capacity, granularity| {
            Box::new(BuddyAllocator::new(capacity, granularity))
        });
        assert!(ops >= 100_000, "{ops} operations");
    }
}
