//! Memory pressure of a pool, for a streamer that must stay ahead of failing
//! allocations: how much of the pool's hard budget is committed and allocated,
//! the largest free range in its blocks (so that "fits by bytes, not by range"
//! can be told apart from "does not fit"), and the usage and budget of the heap
//! the pool lives on (from `VK_EXT_memory_budget` where the device has it).
//!
//! Read it every frame *before* allocating: an allocation that would fail shows
//! here first as `headroom()` and `largest_free_range` below the request.

/// A pool's and its heap's usage against their budgets, at one instant.
/// Read with [`crate::Allocator::pool_pressure`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolPressure {
    /// The pool's hard byte budget, if it has one.
    pub pool_budget: Option<u64>,
    /// Bytes of device memory the pool's blocks hold (what counts against its budget).
    pub pool_committed_bytes: u64,
    /// Bytes of live allocations in the pool.
    pub pool_allocated_bytes: u64,
    /// The pool's blocks (memory of its own not counted).
    pub pool_block_count: u32,
    /// The pool's `max_blocks`.
    pub pool_max_blocks: u32,
    /// The pool's block size.
    pub pool_block_size: u64,
    /// Whether the pool is linear (a request larger than a block never fits).
    pub pool_linear: bool,
    /// The largest free range in any of the pool's blocks: the largest request
    /// that fits without a new block.
    pub largest_free_range: u64,
    /// The heap the pool's memory type lives on.
    pub heap_index: u32,
    /// Bytes the process uses on that heap (driver figure where `VK_EXT_memory_budget`
    /// is present, else the allocator's estimate).
    pub heap_usage: u64,
    /// Bytes the process may use on that heap.
    pub heap_budget: u64,
}

impl PoolPressure {
    /// Bytes the pool may still commit: what is left of its own budget and
    /// of the heap's, whichever is smaller; 0 once it holds `max_blocks`
    /// blocks; at most a block in a linear pool.
    ///
    /// What it promises: a request of up to `headroom()` bytes, with any
    /// alignment and the default [`crate::DedicatedPolicy::Auto`], succeeds
    /// whatever the pool holds (a pool's last block takes what is left of
    /// its budget, so a byte budget is usable to the byte), unless another
    /// thread takes the room first or the device itself is out of memory.
    /// The bytes counted are the block's: where the allocator adds to a
    /// request (corruption margins, [`crate::AllocatorDesc::debug_margin`],
    /// on host-visible memory; non-coherent memory rounded to whole
    /// `nonCoherentAtomSize`), the request must fit with them. A larger
    /// request may still fit: in the free ranges of the pool's blocks
    /// (`largest_free_range`), in the budget of the empty blocks the pool
    /// keeps (a request the budget refuses first frees them and tries
    /// again), and at `max_blocks`, a request of more than half a block
    /// (which takes memory of its own).
    pub fn headroom(&self) -> u64 {
        if self.pool_block_count >= self.pool_max_blocks {
            return 0;
        }
        let heap_left = self.heap_budget.saturating_sub(self.heap_usage);
        let left = match self.pool_budget {
            Some(b) => b.saturating_sub(self.pool_committed_bytes).min(heap_left),
            None => heap_left,
        };
        if self.pool_linear {
            left.min(self.pool_block_size)
        } else {
            left
        }
    }

    /// Free bytes inside the pool's blocks (committed but not allocated).
    pub fn free_in_blocks(&self) -> u64 {
        self.pool_committed_bytes
            .saturating_sub(self.pool_allocated_bytes)
    }

    /// Whether the free bytes inside the blocks would hold `size` but no single
    /// range does: fragmentation, not size, blocks it (unless a new block fits).
    pub fn fragmented_for(&self, size: u64) -> bool {
        self.free_in_blocks() >= size && self.largest_free_range < size
    }
}

#[cfg(test)]
mod tests {
    use crate::sim::{tables, SimDevice};
    use crate::{
        AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, MemoryUsage, PoolAlgorithm,
        PoolDesc, ResourceKind,
    };

    const MIB: u64 = 1 << 20;

    #[test]
    fn pressure_follows_the_pool() {
        let a = Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default())
            .expect("allocator");
        let pool = a
            .create_pool(&PoolDesc {
                usage: MemoryUsage::GpuOnly,
                algorithm: PoolAlgorithm::Tlsf,
                block_size: 4 * MIB,
                budget: Some(8 * MIB),
                ..PoolDesc::new("textures")
            })
            .expect("pool");
        let p0 = a.pool_pressure(pool).expect("pressure");
        assert_eq!(p0.pool_budget, Some(8 * MIB));
        assert_eq!(p0.pool_allocated_bytes, 0);
        assert_eq!(p0.headroom(), 8 * MIB.min(p0.heap_budget - p0.heap_usage));
        let desc = |size| AllocationDesc {
            size,
            alignment: 256,
            kind: ResourceKind::Buffer,
            options: AllocationOptions::usage(MemoryUsage::GpuOnly).in_pool(pool),
            ..AllocationDesc::default()
        };
        let x = a.allocate(&desc(MIB)).expect("x");
        let y = a.allocate(&desc(MIB)).expect("y");
        let z = a.allocate(&desc(MIB)).expect("z");
        let p1 = a.pool_pressure(pool).expect("pressure");
        assert_eq!(p1.pool_allocated_bytes, 3 * MIB);
        assert!(p1.pool_committed_bytes >= 3 * MIB);
        assert!(p1.largest_free_range <= p1.pool_committed_bytes - 3 * MIB);
        assert!(p1.headroom() <= 8 * MIB - p1.pool_committed_bytes);
        // Free the middle one: 2 MiB free in the block, but not in one range
        // when the block is exactly 4 MiB.
        a.free(y).expect("free");
        let p2 = a.pool_pressure(pool).expect("pressure");
        assert_eq!(p2.pool_allocated_bytes, 2 * MIB);
        assert!(p2.largest_free_range >= MIB);
        if p2.pool_committed_bytes == 4 * MIB {
            assert!(p2.fragmented_for(2 * MIB));
        }
        a.free(x).expect("free");
        a.free(z).expect("free");
        a.destroy_pool(pool).expect("destroy");
        assert!(a.pool_pressure(pool).is_err());
    }
}
