//! Freed dedicated memory kept for a later allocation of about the same
//! size, so streaming textures in and out doesn't call `vkAllocateMemory`
//! and `vkFreeMemory` each time (0.1–7 ms per call on some drivers).
//!
//! Only memory made without `VkMemoryDedicatedAllocateInfo` can be reused:
//! memory that names a resource can only ever hold that resource.

#![forbid(unsafe_code)]

use std::collections::VecDeque;

use crate::block::Block;

/// Empty dedicated blocks of one memory type, oldest first, under a byte cap
/// ([`crate::policy::recycle_cap`]).
#[derive(Debug)]
pub(crate) struct RecycleBin {
    blocks: VecDeque<Block>,
    bytes: u64,
    /// The cap whatever the live set: the heap's share.
    heap_share: u64,
    /// The cap however large the live set: the configured bytes.
    configured: u64,
}

impl RecycleBin {
    /// A bin that keeps between `heap_share` and `configured` bytes (the
    /// live bytes when between them).
    pub fn new(heap_share: u64, configured: u64) -> Self {
        Self {
            blocks: VecDeque::new(),
            bytes: 0,
            heap_share,
            configured,
        }
    }

    /// The kept block to reuse for a dedicated allocation of `size` bytes
    /// ([`crate::policy::reuse_for_dedicated`]), removed from the bin.
    pub fn take(&mut self, size: u64) -> Option<Block> {
        let index = crate::policy::reuse_for_dedicated(self.blocks.iter().map(|b| b.size), size)?;
        self.remove(index)
    }

    /// The kept block to make a new shared block of, for a request of
    /// `needed` bytes where a block of `planned` bytes would be made
    /// ([`crate::policy::reuse_for_block`]), removed from the bin.
    pub fn take_for_block(&mut self, needed: u64, planned: u64) -> Option<Block> {
        let index =
            crate::policy::reuse_for_block(self.blocks.iter().map(|b| b.size), needed, planned)?;
        self.remove(index)
    }

    fn remove(&mut self, index: usize) -> Option<Block> {
        let block = self.blocks.remove(index)?;
        self.bytes -= block.size;
        Some(block)
    }

    /// Keeps `block` for reuse with `live` bytes live in the memory type;
    /// returns the blocks to destroy (the oldest, or `block` itself when it
    /// alone passes the cap).
    pub fn keep(&mut self, block: Block, live: u64) -> Vec<Block> {
        let cap = crate::policy::recycle_cap(self.heap_share, self.configured, live);
        if block.size > cap {
            return vec![block];
        }
        self.bytes += block.size;
        self.blocks.push_back(block);
        self.evict_above(cap)
    }

    /// Bytes kept.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Removes the oldest blocks until at most `cap` bytes are kept; returns
    /// them.
    pub fn evict_above(&mut self, cap: u64) -> Vec<Block> {
        let mut doomed = Vec::new();
        while self.bytes > cap {
            let old = self
                .blocks
                .pop_front()
                .expect("bytes > 0 means blocks exist");
            self.bytes -= old.size;
            doomed.push(old);
        }
        doomed
    }

    /// Every kept block, removed.
    pub fn drain(&mut self) -> Vec<Block> {
        self.bytes = 0;
        self.blocks.drain(..).collect()
    }

    /// The kept blocks.
    pub fn iter(&self) -> impl Iterator<Item = &Block> {
        self.blocks.iter()
    }
}
