//! A list of blocks of one memory type: a memory type's default blocks, or a
//! pool's. It places allocations in existing blocks, picks the size of the
//! next block, and decides which empty blocks to keep.
//!
//! The list never calls the device: creating and freeing device memory is the
//! allocator's job, done outside the list's lock.

#![forbid(unsafe_code)]

use crate::block::Block;
use crate::range::{Range, RangeError, RangeId, RangeRequest};

/// How a list grows and shrinks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ListConfig {
    /// The size blocks grow to.
    pub block_size: u64,
    /// Whether blocks have `block_size` bytes (pools: the last one within a
    /// pool's budget may have fewer, what is left of the budget), or start
    /// small and grow with use (default blocks).
    pub fixed_block_size: bool,
    pub min_blocks: u32,
    /// Empty blocks kept beyond `min_blocks` for reuse (at most; a growing
    /// list also bounds their bytes when it grows, see
    /// [`crate::policy::retain_limit`]).
    pub keep_empty: u32,
}

/// Blocks of one memory type.
///
/// `repr(C)`, what every allocation reads first: behind the shard's lock
/// byte (the `Mutex`'s first field), `blocks` and `shared` share its cache
/// line; `ids` sits last, on the line of the shard's counters (see
/// `block_vector::Shard`).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct BlockList {
    /// Every block, dedicated ones included; `None` marks a free slot.
    blocks: Vec<Option<Block>>,
    /// Indices of the blocks that suballocate (not dedicated), oldest first:
    /// the order [`Self::allocate`] tries them in.
    shared: Vec<u32>,
    config: ListConfig,
    free_slots: Vec<u32>,
    /// Bytes of the dedicated blocks (each holds one live allocation).
    dedicated_bytes: u64,
    /// Ids of allocations freed while a defragmentation move of theirs was
    /// pending; cleared when the move's pass ends.
    pub cancelled: std::collections::HashSet<u64>,
    /// Allocation ids taken from the allocator's counter in batches, so
    /// that the shared counter is touched once per [`ID_BATCH`] allocations.
    pub ids: std::ops::Range<u64>,
}

// The layout [`BlockList`] promises: `blocks` and `shared` within the
// first 56 bytes, so on the cache line of the lock byte that precedes the
// list in its `Mutex`.
const _: () = {
    assert!(std::mem::offset_of!(BlockList, shared) + std::mem::size_of::<Vec<u32>>() <= 56);
};

/// How many allocation ids a list takes from the allocator's counter at once.
pub(crate) const ID_BATCH: u64 = 64;

/// Block sizes to try, halving from the first down to a smallest one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sizes(Option<u64>, u64);

impl Iterator for Sizes {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        let size = self.0?;
        let half = size / 2;
        self.0 = (half >= self.1 && half >= MIN_BLOCK_SIZE && size != half).then_some(half);
        Some(size)
    }
}

/// The smallest block a growing list starts with.
const MIN_BLOCK_SIZE: u64 = 1 << 20;

impl BlockList {
    pub fn new(config: ListConfig) -> Self {
        Self {
            config,
            blocks: Vec::new(),
            free_slots: Vec::new(),
            dedicated_bytes: 0,
            shared: Vec::new(),
            cancelled: std::collections::HashSet::new(),
            ids: 0..0,
        }
    }

    /// Places `request` in an existing block: the oldest block that holds
    /// it (first fit over the blocks in the order they were made).
    ///
    /// Oldest first packs small allocations into the long-lived blocks, so
    /// that a newer block, made for a large request, holds little else and
    /// empties when that request is freed (it can then be freed or reused
    /// whole). Trying the block of the last allocation first instead spread
    /// small allocations over every new block and left them all partly used
    /// (BENCHMARKS.md, "Placement across blocks: oldest first").
    ///
    /// Always inlined (a plain `#[inline]` was declined): with the range
    /// algorithm's work out of line (`TlsfAllocator::find_and_commit`), what
    /// is left is the loop, and a call of its own cost a frame and the
    /// result through memory (~33 instructions per allocation).
    #[inline(always)]
    pub fn allocate(&mut self, request: &RangeRequest) -> Option<(u32, Range)> {
        // The request's slot class, computed by the first block that needs it.
        let mut key = None;
        for &index in &self.shared {
            let block = self.blocks[index as usize]
                .as_mut()
                .expect("listed block exists");
            if let Some(range) = block.allocate_keyed(request, &mut key) {
                return Some((index, range));
            }
        }
        None
    }

    /// [`Self::allocate`] once more after the blocks gave back the runs they
    /// kept empty for their classes where those could make room for the
    /// request ([`Block::release_kept_runs`]), for a request the blocks
    /// refused: before the caller makes memory for it. `None` at once where
    /// no block gave one back.
    #[cold]
    pub fn allocate_reclaiming(&mut self, request: &RangeRequest) -> Option<(u32, Range)> {
        let mut released = false;
        for &index in &self.shared {
            if let Some(block) = self.blocks[index as usize].as_mut() {
                released |= block.release_kept_runs(request.size);
            }
        }
        if !released {
            return None;
        }
        self.allocate(request)
    }

    /// The sizes to try for a new block that must hold `needed` bytes, best
    /// first: a growing list sizes it by [`crate::policy::block_size`] from
    /// the memory type's `live` bytes, the heap's free bytes and whether
    /// memory objects are `scarce`, at most `limit` (the point on the front,
    /// [`crate::policy::Point::block_cap`]) or `needed` where that is more;
    /// a fixed list uses its block size, or `limit` (what is left of its
    /// pool's budget) where that is less and still holds `needed` (so a byte
    /// budget is usable to the byte); then smaller sizes down to `needed`,
    /// for when the device is short.
    pub fn next_block_sizes(
        &self,
        needed: u64,
        live: u64,
        heap_free: u64,
        scarce: bool,
        room: u64,
        limit: u64,
    ) -> std::iter::Take<Sizes> {
        let full = self.config.block_size;
        let (first, smallest) = if self.config.fixed_block_size {
            // A fixed list's blocks are at most its block size: a larger
            // request can never fit, and no block is worth creating for it.
            if needed > full {
                return Sizes(None, 0).take(0);
            }
            // The last block takes the rest of the budget. Where even that
            // can't hold the request, the full size is tried, and refused
            // with the pool's budget in the error.
            let size = if needed <= limit {
                full.min(limit)
            } else {
                full
            };
            (size, size)
        } else {
            (
                crate::policy::block_size(needed, live, full.min(limit), heap_free, scarce, room),
                needed,
            )
        };
        Sizes(Some(first), smallest).take(4)
    }

    /// The next allocation id: from this list's batch, refilled from
    /// `counter` when spent.
    pub fn next_id(&mut self, counter: &std::sync::atomic::AtomicU64) -> u64 {
        if let Some(id) = self.ids.next() {
            return id;
        }
        let start = counter.fetch_add(ID_BATCH, std::sync::atomic::Ordering::Relaxed);
        self.ids = start + 1..start + ID_BATCH;
        start
    }

    /// Whether the list holds no block.
    pub fn is_empty(&self) -> bool {
        self.blocks.iter().all(Option::is_none)
    }

    /// Adds a block; returns its index.
    pub fn insert(&mut self, block: Block) -> u32 {
        let dedicated = block.is_dedicated();
        if dedicated {
            self.dedicated_bytes += block.size;
        }
        let index = match self.free_slots.pop() {
            Some(slot) => {
                self.blocks[slot as usize] = Some(block);
                slot
            }
            None => {
                self.blocks.push(Some(block));
                (self.blocks.len() - 1) as u32
            }
        };
        if !dedicated {
            self.shared.push(index);
        }
        index
    }

    pub fn block(&self, index: u32) -> Option<&Block> {
        self.blocks.get(index as usize)?.as_ref()
    }

    pub fn block_mut(&mut self, index: u32) -> Option<&mut Block> {
        self.blocks.get_mut(index as usize)?.as_mut()
    }

    /// Removes a block from the list and hands it back for destruction.
    pub fn remove(&mut self, index: u32) -> Option<Block> {
        let block = self.blocks.get_mut(index as usize)?.take()?;
        if block.is_dedicated() {
            self.dedicated_bytes -= block.size;
        }
        self.free_slots.push(index);
        self.shared.retain(|&i| i != index);
        Some(block)
    }

    /// Frees a range; returns whether its block is now empty, in which case
    /// the caller asks [`Self::release_emptied`] which block to destroy.
    /// (The hot path moves no `Block` around: only a `bool` comes back.)
    #[inline]
    pub fn free(&mut self, index: u32, id: RangeId, offset: u64) -> Result<bool, RangeError> {
        let block = self.block_mut(index).ok_or(RangeError::UnknownId(id))?;
        block.free(id, offset)
    }

    /// After [`Self::free`] emptied block `index`: the block that should now
    /// be destroyed, a dedicated block, or an empty block beyond what the
    /// list keeps. `elsewhere` counts the empty blocks the vector's other
    /// shards hold: the `keep_empty` count is the vector's, not each
    /// shard's. `retain` is asked, only for a shared block and only when
    /// more empty blocks are held than kept, for the bytes of empty blocks
    /// the list may keep beyond the count (see
    /// [`Self::release_surplus_empty`]).
    #[cold]
    pub fn release_emptied(
        &mut self,
        index: u32,
        elsewhere: u32,
        retain: impl FnOnce(u64) -> u64,
    ) -> Option<Block> {
        if self.block(index)?.is_dedicated() {
            return self.remove(index);
        }
        self.release_surplus_empty(elsewhere, retain)
    }

    /// The smallest empty shared block, if more blocks are empty (with the
    /// `elsewhere` ones of the other shards) than the list keeps and they
    /// hold more than `retain_bytes(empty bytes)` (the larger ones are
    /// kept: they serve more requests). Never below `min_blocks`.
    /// `retain_bytes` is given the list's empty bytes ([`Self::empty_bytes`])
    /// and called only when the count and `min_blocks` allow a release (the
    /// common emptied block, the one empty block a list keeps, asks nothing).
    fn release_surplus_empty(
        &mut self,
        elsewhere: u32,
        retain_bytes: impl FnOnce(u64) -> u64,
    ) -> Option<Block> {
        let mut empty = 0u32;
        let mut bytes = 0u64;
        let mut smallest: Option<(u32, u64)> = None;
        for &i in &self.shared {
            let b = self.blocks[i as usize]
                .as_ref()
                .expect("listed block exists");
            if b.is_empty() {
                empty += 1;
                bytes += b.size;
                if smallest.is_none_or(|(_, size)| b.size < size) {
                    smallest = Some((i, b.size));
                }
            }
        }
        let above_min = self.shared.len() as u32 > self.config.min_blocks;
        if empty.saturating_add(elsewhere) > self.config.keep_empty
            && above_min
            && bytes > retain_bytes(bytes)
        {
            return self.remove(smallest?.0);
        }
        None
    }

    /// Bytes of the list's dedicated blocks (memory of their own, each
    /// holding one live allocation).
    pub fn dedicated_bytes(&self) -> u64 {
        self.dedicated_bytes
    }

    /// The empty shared blocks: (index, size).
    pub fn empty_blocks(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.shared.iter().filter_map(|&i| {
            let b = self.blocks[i as usize].as_ref()?;
            b.is_empty().then_some((i, b.size))
        })
    }

    /// Bytes in empty shared blocks.
    pub fn empty_bytes(&self) -> u64 {
        self.empty_blocks().map(|(_, size)| size).sum()
    }

    /// The empty shared block `index` removed, unless the list is down to
    /// `min_blocks` or the block is not an empty shared one.
    pub fn take_empty_block(&mut self, index: u32) -> Option<Block> {
        let empty = self.blocks.get(index as usize)?.as_ref()?.is_empty();
        if !empty
            || !self.shared.contains(&index)
            || self.shared.len() as u32 <= self.config.min_blocks
        {
            return None;
        }
        self.remove(index)
    }

    /// Empty shared blocks removed, largest first, until at least `bytes`
    /// are taken or none is left (never below `min_blocks`).
    pub fn take_empty_bytes(&mut self, bytes: u64) -> Vec<Block> {
        let mut empty: Vec<(u32, u64)> = self.empty_blocks().collect();
        empty.sort_by_key(|&(i, size)| (std::cmp::Reverse(size), i));
        let mut taken = 0u64;
        let mut out = Vec::new();
        for (i, size) in empty {
            if taken >= bytes || self.shared.len() as u32 <= self.config.min_blocks {
                break;
            }
            taken += size;
            out.extend(self.remove(i));
        }
        out
    }

    /// Every empty shared block above `min_blocks`, removed (for trimming).
    pub fn take_empty(&mut self) -> Vec<Block> {
        let mut out = Vec::new();
        let candidates: Vec<u32> = self
            .shared
            .iter()
            .copied()
            .filter(|&i| {
                self.blocks[i as usize]
                    .as_ref()
                    .is_some_and(Block::is_empty)
            })
            .collect();
        for i in candidates {
            if self.shared.len() as u32 <= self.config.min_blocks {
                break;
            }
            out.extend(self.remove(i));
        }
        out
    }

    /// Every block, with its index.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Block)> {
        self.blocks
            .iter()
            .enumerate()
            .filter_map(|(i, b)| Some((i as u32, b.as_ref()?)))
    }

    /// Every block, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Block> {
        self.blocks.iter_mut().flatten()
    }

    /// Removes every block (allocator or pool teardown).
    pub fn drain(&mut self) -> Vec<Block> {
        self.shared.clear();
        self.dedicated_bytes = 0;
        self.free_slots.clear();
        self.blocks.drain(..).flatten().collect()
    }

    /// Checks the list's own bookkeeping and every block's invariants.
    pub fn validate(&self) -> Result<(), String> {
        let dedicated: u64 = self
            .iter()
            .filter(|(_, b)| b.is_dedicated())
            .map(|(_, b)| b.size)
            .sum();
        if dedicated != self.dedicated_bytes {
            return Err(format!(
                "dedicated bytes counted {}, listed {dedicated}",
                self.dedicated_bytes
            ));
        }
        for (i, block) in self.iter() {
            let listed = self.shared.contains(&i);
            if listed == block.is_dedicated() {
                return Err(format!("block {i}: shared list membership is wrong"));
            }
            block.validate().map_err(|e| format!("block {i}: {e}"))?;
        }
        for &i in &self.shared {
            if self.block(i).is_none() {
                return Err(format!("shared list names missing block {i}"));
            }
        }
        for &i in &self.free_slots {
            if self.block(i).is_some() {
                return Err(format!("free slot {i} holds a block"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceMemory;
    use crate::pool::PoolAlgorithm;
    use crate::range::RangeKind;

    const MIB: u64 = 1 << 20;

    fn list() -> BlockList {
        BlockList::new(ListConfig {
            block_size: 64 * MIB,
            fixed_block_size: false,
            min_blocks: 0,
            keep_empty: 1,
        })
    }

    fn block(handle: u64, size: u64) -> Block {
        Block::new(
            DeviceMemory(handle),
            size,
            0,
            PoolAlgorithm::Tlsf,
            1,
            crate::range::tlsf::RUNS_FROM,
        )
    }

    fn request(size: u64) -> RangeRequest {
        RangeRequest {
            size,
            alignment: 256,
            kind: RangeKind::Linear,
        }
    }

    /// A small allocation after a large one in a newer block goes to the
    /// oldest block with room, so the newer block empties with the large one.
    #[test]
    fn small_allocations_go_to_the_oldest_block_with_room() {
        let mut list = list();
        let old = list.insert(block(1, 16 * MIB));
        let (_, filler) = list
            .allocate(&request(15 * MIB))
            .expect("fits the old block");
        let new = list.insert(block(2, 64 * MIB));
        let (at, large) = list
            .allocate(&request(60 * MIB))
            .expect("fits the new block");
        assert_eq!(at, new);
        let (at, _) = list.allocate(&request(MIB / 2)).expect("fits");
        assert_eq!(at, old, "the small allocation went to the newer block");
        assert_eq!(list.free(new, large.id, large.offset), Ok(true));
        assert_eq!(list.free(old, filler.id, filler.offset), Ok(false));
        assert!(list.block(new).is_some_and(Block::is_empty));
    }

    /// Only an empty shared block is taken by index, and never below
    /// `min_blocks`.
    #[test]
    fn an_empty_block_is_taken_by_index() {
        let mut list = list();
        let used = list.insert(block(1, 16 * MIB));
        let (_, held) = list.allocate(&request(MIB)).expect("fits");
        let empty = list.insert(block(2, 32 * MIB));
        let listed: Vec<_> = list.empty_blocks().collect();
        assert_eq!(listed, [(empty, 32 * MIB)]);
        assert_eq!(list.empty_bytes(), 32 * MIB);
        assert!(list.take_empty_block(used).is_none(), "not empty");
        assert!(list.take_empty_block(99).is_none(), "no such block");
        assert_eq!(list.take_empty_block(empty).map(|b| b.size), Some(32 * MIB));
        assert!(list.take_empty_block(empty).is_none(), "taken already");
        assert_eq!(list.free(used, held.id, held.offset), Ok(true));
        let mut kept = BlockList::new(ListConfig {
            min_blocks: 1,
            ..list.config
        });
        let only = kept.insert(block(3, 16 * MIB));
        assert!(kept.take_empty_block(only).is_none(), "min_blocks keeps it");
    }
}
