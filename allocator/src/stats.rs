//! Statistics: cheap counters safe to read every frame, detailed statistics
//! on demand, a JSON dump and a text summary.
//!
//! Vocabulary: a *block* is one `VkDeviceMemory`; an *allocation* is a range
//! inside a block. A dedicated allocation is a block holding one allocation.
//!
//! The JSON dump (`Allocator::to_json`) writes a [`crate::Snapshot`]; its
//! versioned schema is documented in [`crate::report`].
//!
//! An allocation holding an alias group lists its members under `aliases`
//! (`offset` inside the allocation, `size`, `kind`, `first_pass`,
//! `last_pass`, `tag`); `alias_member_count` and `aliased_bytes_saved` sum
//! them up, and `statistics.defragmentation` holds the defragmentation
//! totals.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::budget::HeapBudgetView;

/// Cheap counters of blocks and allocations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// `VkDeviceMemory` objects, dedicated ones included.
    pub block_count: u32,
    /// Bytes in those objects.
    pub block_bytes: u64,
    /// Live allocations.
    pub allocation_count: u64,
    /// Bytes of live allocations, as asked (no padding).
    pub allocation_bytes: u64,
    /// Dedicated allocations among the blocks.
    pub dedicated_count: u32,
}

impl Usage {
    /// Adds another set of counters (each saturating at its maximum).
    pub fn add(&mut self, other: &Usage) {
        self.block_count = self.block_count.saturating_add(other.block_count);
        self.block_bytes = self.block_bytes.saturating_add(other.block_bytes);
        self.allocation_count = self.allocation_count.saturating_add(other.allocation_count);
        self.allocation_bytes = self.allocation_bytes.saturating_add(other.allocation_bytes);
        self.dedicated_count = self.dedicated_count.saturating_add(other.dedicated_count);
    }

    /// Bytes committed but not allocated (free space and padding in blocks).
    pub fn unused_bytes(&self) -> u64 {
        self.block_bytes.saturating_sub(self.allocation_bytes)
    }
}

/// A vector's block counters, updated with relaxed atomics, so reading them
/// takes no lock (allocations are counted per shard: [`ShardCounters`]).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    blocks: AtomicU32,
    block_bytes: AtomicU64,
    dedicated: AtomicU32,
}

impl Counters {
    pub fn add_block(&self, bytes: u64, dedicated: bool) {
        self.blocks.fetch_add(1, Ordering::Relaxed);
        self.block_bytes.fetch_add(bytes, Ordering::Relaxed);
        if dedicated {
            self.dedicated.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn remove_block(&self, bytes: u64, dedicated: bool) {
        self.blocks.fetch_sub(1, Ordering::Relaxed);
        self.block_bytes.fetch_sub(bytes, Ordering::Relaxed);
        if dedicated {
            self.dedicated.fetch_sub(1, Ordering::Relaxed);
        }
    }

    pub fn snapshot(&self) -> Usage {
        Usage {
            block_count: self.blocks.load(Ordering::Relaxed),
            block_bytes: self.block_bytes.load(Ordering::Relaxed),
            dedicated_count: self.dedicated.load(Ordering::Relaxed),
            ..Usage::default()
        }
    }
}

/// One shard's allocation counters (see [`crate::block_vector`]): written
/// only by the holder of the shard's lock, read without it. The lock
/// already orders the writers, so an update is a relaxed load and store of
/// each counter rather than an atomic read-modify-write (no `lock`-prefixed
/// instruction on the allocate and free paths); a reader still sees every
/// value whole. A writer that does not hold the shard's lock would lose
/// counts (never memory safety): every caller passes the locked list.
#[derive(Debug, Default)]
pub(crate) struct ShardCounters {
    allocations: AtomicU64,
    allocation_bytes: AtomicU64,
}

impl ShardCounters {
    /// Counts one allocation of `bytes`; `_locked` is the shard's list,
    /// locked, which proves the caller serialises the writers.
    #[inline]
    pub fn add_allocation(&self, _locked: &mut crate::block_list::BlockList, bytes: u64) {
        let count = self.allocations.load(Ordering::Relaxed);
        self.allocations
            .store(count.wrapping_add(1), Ordering::Relaxed);
        let total = self.allocation_bytes.load(Ordering::Relaxed);
        self.allocation_bytes
            .store(total.wrapping_add(bytes), Ordering::Relaxed);
    }

    /// Uncounts `count` allocations of `bytes` in all, under the shard's
    /// lock (as [`Self::add_allocation`]).
    #[inline]
    pub fn remove_allocations(
        &self,
        _locked: &mut crate::block_list::BlockList,
        count: u64,
        bytes: u64,
    ) {
        let live = self.allocations.load(Ordering::Relaxed);
        self.allocations
            .store(live.wrapping_sub(count), Ordering::Relaxed);
        let total = self.allocation_bytes.load(Ordering::Relaxed);
        self.allocation_bytes
            .store(total.wrapping_sub(bytes), Ordering::Relaxed);
    }

    /// The counters now (no block counts: a vector counts its blocks once).
    pub fn snapshot(&self) -> Usage {
        Usage {
            allocation_count: self.allocations.load(Ordering::Relaxed),
            allocation_bytes: self.allocation_bytes.load(Ordering::Relaxed),
            ..Usage::default()
        }
    }
}

/// A heap's cheap statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeapStatistics {
    /// The heap's index.
    pub index: u32,
    /// The heap's size.
    pub size: u64,
    /// Whether the heap is device-local.
    pub device_local: bool,
    /// Blocks and allocations of every type on the heap.
    pub usage: Usage,
    /// The heap's budget.
    pub budget: HeapBudgetView,
}

/// A memory type's cheap statistics (default blocks and pools together).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeStatistics {
    /// The memory type's index.
    pub index: u32,
    /// Its heap.
    pub heap: u32,
    /// Its property flags.
    pub flags: crate::device::MemoryPropertyFlags,
    /// Blocks and allocations of this type.
    pub usage: Usage,
}

/// A pool's cheap statistics.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolStatistics {
    /// The pool's slot index.
    pub index: u32,
    /// Its name.
    pub name: String,
    /// Its memory type.
    pub memory_type: u32,
    /// Its hard budget, if any.
    pub budget: Option<u64>,
    /// Its blocks and allocations.
    pub usage: Usage,
}

/// Cheap statistics: counters read without taking any lock; safe every frame.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Statistics {
    /// Totals over every heap.
    pub total: Usage,
    /// Per heap.
    pub heaps: Vec<HeapStatistics>,
    /// Per memory type.
    pub types: Vec<TypeStatistics>,
    /// Per pool.
    pub pools: Vec<PoolStatistics>,
    /// Live `VkDeviceMemory` objects against `maxMemoryAllocationCount`.
    pub device_memory_objects: u32,
    /// `vkAllocateMemory` calls so far (refused ones included); the
    /// difference between two readings is the calls in between.
    #[serde(default)]
    pub device_memory_allocations_total: u64,
    /// `VkDeviceMemory` objects released so far (`vkFreeMemory`, and calls
    /// the driver refused).
    #[serde(default)]
    pub device_memory_frees_total: u64,
    /// Allocations freed with a damaged corruption margin (see
    /// [`crate::AllocatorDesc::debug_margin`]).
    pub corruptions_detected: u64,
    /// Defragmentation totals over every session so far.
    #[serde(default)]
    pub defragmentation: DefragStats,
}

/// What defragmentation did: per pass ([`crate::PassReport::stats`]), per
/// session ([`crate::Defragmentation::statistics`]) or over the allocator's
/// life ([`Statistics::defragmentation`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefragStats {
    /// Passes ended.
    pub passes: u64,
    /// Bytes of allocations moved (committed moves, sizes as asked).
    pub bytes_moved: u64,
    /// Allocations moved (committed moves).
    pub allocations_moved: u64,
    /// Moves handed out but not committed (dropped, cancelled, or their
    /// source freed during the pass).
    pub moves_cancelled: u64,
    /// Blocks released because they became empty.
    pub blocks_freed: u64,
    /// Bytes of those blocks.
    pub bytes_freed: u64,
}

impl DefragStats {
    /// Adds another set of counters.
    pub fn add(&mut self, other: &DefragStats) {
        self.passes += other.passes;
        self.bytes_moved += other.bytes_moved;
        self.allocations_moved += other.allocations_moved;
        self.moves_cancelled += other.moves_cancelled;
        self.blocks_freed += other.blocks_freed;
        self.bytes_freed += other.bytes_freed;
    }
}

/// One allocation in a detailed dump.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationInfo {
    /// Offset in the block.
    pub offset: u64,
    /// Bytes.
    pub size: u64,
    /// Layout class: `linear`, `optimal` or `unknown`.
    pub kind: String,
    /// Debugging tag, if given.
    pub tag: Option<String>,
    /// Resources aliased on this allocation (see [`crate::AliasGroup`]),
    /// each with its offset inside the allocation and its lifetime.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<crate::alias::AliasInfo>,
}

/// One block in detailed statistics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockInfo {
    /// Bytes of device memory.
    pub size: u64,
    /// Whether it is a dedicated allocation.
    pub dedicated: bool,
    /// Whether it is persistently mapped.
    pub mapped: bool,
    /// Live allocations.
    pub allocation_count: u32,
    /// Bytes of live allocations.
    pub allocation_bytes: u64,
    /// Free ranges.
    pub free_range_count: u32,
    /// The largest free range.
    pub largest_free: u64,
    /// `1 - largest_free / total_free`; 0 when nothing or one range is free.
    pub fragmentation: f64,
    /// Live allocations in address order.
    pub allocations: Vec<AllocationInfo>,
    /// Free ranges in address order, as `[offset, size]`.
    pub free_ranges: Vec<[u64; 2]>,
}

/// Detailed statistics of one block list (a memory type's default blocks or a pool).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ListDetails {
    /// The memory type.
    pub memory_type: u32,
    /// The pool's name, or `None` for a memory type's default blocks.
    pub pool: Option<String>,
    /// Its blocks.
    pub blocks: Vec<BlockInfo>,
}

/// Detailed statistics: every block, its allocations and free ranges.
/// Slower: walks every block under its lock; for debugging and tools.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DetailedStatistics {
    /// The cheap counters at the same time.
    pub statistics: Statistics,
    /// Every block list that holds a block.
    pub lists: Vec<ListDetails>,
    /// The largest free range in any block.
    pub largest_free: u64,
    /// Free ranges in all blocks.
    pub free_range_count: u64,
    /// Free bytes in all blocks.
    pub free_bytes: u64,
    /// Resources aliased on shared allocations (alias group members).
    #[serde(default)]
    pub alias_member_count: u64,
    /// Bytes aliasing saves: the sum of alias members' sizes minus the bytes
    /// the allocations they share hold in their blocks (each allocation's
    /// range: its size plus any alignment padding in front and debug
    /// margins). Without padding or margins it is the sum of the groups'
    /// [`crate::alias::AliasGroup::bytes_saved`], which subtracts the size
    /// asked.
    #[serde(default)]
    pub aliased_bytes_saved: u64,
}

/// Formats a byte count for people: `1.50 GiB`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}
