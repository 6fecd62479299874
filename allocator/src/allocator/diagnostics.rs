//! What the allocator tells about itself: cheap and detailed statistics,
//! the JSON dump and text summary, leaks, corruption checks, validation,
//! and the leak report it gives when it goes away (see [`super::teardown`]).

#![forbid(unsafe_code)]

use std::fmt;
use std::sync::atomic::Ordering;

use super::Allocator;
use crate::block_list::BlockList;
use crate::corruption;
use crate::device::MemoryDevice;
use crate::error::Error;
use crate::pool::PoolId;
use crate::pressure::PoolPressure;
use crate::stats::{
    BlockInfo, DetailedStatistics, HeapStatistics, ListDetails, PoolStatistics, Statistics,
    TypeStatistics, Usage,
};

/// A leaked allocation, found when the allocator is dropped or asked.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Leak {
    /// The memory type.
    pub memory_type: u32,
    /// The pool's name, if it came from a pool.
    pub pool: Option<String>,
    /// Offset in its block.
    pub offset: u64,
    /// Bytes.
    pub size: u64,
    /// Its tag, if one was given.
    pub tag: Option<String>,
}

impl fmt::Display for Leak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} bytes at offset {} of memory type {}",
            self.size, self.offset, self.memory_type
        )?;
        if let Some(pool) = &self.pool {
            write!(f, " in pool '{pool}'")?;
        }
        if let Some(tag) = &self.tag {
            write!(f, ", tag '{tag}'")?;
        }
        Ok(())
    }
}

/// Every allocation still live when the allocator went away, each named.
///
/// Returned by [`Allocator::destroy`]; an allocator that is simply dropped
/// writes the same report through `log` and, in debug builds, on stderr.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[must_use = "a leak report is only useful if someone reads it"]
pub struct LeakReport {
    /// The leaked allocations.
    pub leaks: Vec<Leak>,
    /// Blocks kept allocated and mapped because a leaked allocation in them
    /// may still be read or written through its mapping. Nothing frees them
    /// later: Vulkan does not free memory with the device (destroying the
    /// device while they exist is invalid usage,
    /// `VUID-vkDestroyDevice-device-00378`), so they stay until the process
    /// exits. An engine tearing down frees them with
    /// [`Allocator::destroy_all_memory`], whose report has none.
    pub blocks_kept: usize,
}

impl LeakReport {
    /// Whether nothing leaked.
    pub fn is_empty(&self) -> bool {
        self.leaks.is_empty()
    }

    /// Bytes leaked (saturating at `u64::MAX`).
    pub fn bytes(&self) -> u64 {
        self.leaks
            .iter()
            .fold(0u64, |s, l| s.saturating_add(l.size))
    }
}

impl fmt::Display for LeakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("vkalloc: no leaks");
        }
        write!(
            f,
            "vkalloc: allocator dropped with {} live allocations ({} bytes)",
            self.leaks.len(),
            self.bytes()
        )?;
        if self.blocks_kept > 0 {
            write!(
                f,
                "; {} mapped blocks kept (not freed) for their leaked mappings: free them before destroying the device with Allocator::destroy_all_memory",
                self.blocks_kept
            )?;
        }
        for leak in &self.leaks {
            write!(f, "\n  leaked {leak}")?;
        }
        Ok(())
    }
}

impl<D: MemoryDevice> Allocator<D> {
    /// Cheap statistics: per heap, type and pool, from atomic counters. Takes
    /// no list lock; the pool table's read lock is held briefly. Each counter
    /// is read on its own: while other threads allocate and free, one
    /// reading may pair a block's count with its bytes from a moment apart
    /// (a block counted before its bytes, say); quiescent, it is exact
    /// ([`Self::validate`] checks it against the blocks).
    pub fn statistics(&self) -> Statistics {
        let props = self.device.memory_properties();
        let mut stats = Statistics {
            heaps: props
                .heaps
                .iter()
                .enumerate()
                .map(|(i, h)| HeapStatistics {
                    index: i as u32,
                    size: h.size,
                    device_local: h.device_local,
                    usage: Usage::default(),
                    budget: self.budgets.view(i as u32),
                })
                .collect(),
            device_memory_objects: self.objects.get(),
            device_memory_allocations_total: self.objects.totals().0,
            device_memory_frees_total: self.objects.totals().1,
            corruptions_detected: self.corruptions.load(Ordering::Relaxed),
            defragmentation: self.defrag_totals(),
            ..Statistics::default()
        };
        // A type's usage: its default blocks and every pool of the type.
        let mut by_type: Vec<Usage> = self.types.iter().map(|ts| ts.vector.usage()).collect();
        for pool in self.live_pools() {
            let usage = pool.vector.usage();
            by_type[pool.vector.memory_type as usize].add(&usage);
            stats.pools.push(PoolStatistics {
                index: pool.id().index,
                name: pool.desc.name.clone(),
                memory_type: pool.vector.memory_type,
                budget: pool.desc.budget,
                usage,
            });
        }
        for (i, (ts, usage)) in self.types.iter().zip(by_type).enumerate() {
            stats.heaps[ts.vector.heap as usize].usage.add(&usage);
            stats.total.add(&usage);
            stats.types.push(TypeStatistics {
                index: i as u32,
                heap: ts.vector.heap,
                flags: ts.flags,
                usage,
            });
        }
        stats
    }

    /// The pressure on `pool` and on its heap, cheap enough to read every
    /// frame before allocating: the pool's counters and budget (atomics), the
    /// largest free range of its blocks (its list locked briefly, one look at
    /// each block's largest size class), and the heap's usage and budget.
    ///
    /// # Errors
    /// [`Error::UnknownPool`] if `pool` was destroyed.
    pub fn pool_pressure(&self, pool: PoolId) -> Result<PoolPressure, Error> {
        let state = self.pool(pool)?;
        let vector = &state.vector;
        let usage = vector.usage();
        let heap = self.budgets.view(vector.heap);
        let (blocks, max_blocks) = vector.pool_blocks().unwrap_or((0, u32::MAX));
        Ok(PoolPressure {
            pool_budget: state.desc.budget,
            pool_block_count: blocks,
            pool_max_blocks: max_blocks,
            pool_block_size: vector.block_size,
            pool_linear: vector.is_linear(),
            pool_committed_bytes: usage.block_bytes,
            pool_allocated_bytes: usage.allocation_bytes,
            largest_free_range: vector.largest_free(),
            heap_index: vector.heap,
            heap_usage: heap.usage,
            heap_budget: heap.budget,
        })
    }

    /// Detailed statistics: every block with its allocations and free
    /// ranges. Locks each list in turn; meant for debugging and tools, not
    /// every frame.
    pub fn detailed_statistics(&self) -> DetailedStatistics {
        let mut details = DetailedStatistics {
            statistics: self.statistics(),
            ..DetailedStatistics::default()
        };
        self.for_each_vector(|vector, pool| {
            let mut blocks: Vec<BlockInfo> = Vec::new();
            vector.for_each_list(|list| {
                blocks.extend(list.iter().map(|(_, b)| BlockInfo::of(b)));
            });
            if blocks.is_empty() {
                return;
            }
            for b in &blocks {
                for a in &b.allocations {
                    if !a.aliases.is_empty() {
                        details.alias_member_count += a.aliases.len() as u64;
                        let sum = a.aliases.iter().fold(0u64, |s, m| s.saturating_add(m.size));
                        details.aliased_bytes_saved = details
                            .aliased_bytes_saved
                            .saturating_add(sum.saturating_sub(a.size));
                    }
                }
                details.largest_free = details.largest_free.max(b.largest_free);
                details.free_range_count += b.free_range_count as u64;
                details.free_bytes += b.free_ranges.iter().map(|r| r[1]).sum::<u64>();
            }
            details.lists.push(ListDetails {
                memory_type: vector.memory_type,
                pool: pool.map(|p| p.name.clone()),
                blocks,
            });
        });
        details
    }

    /// The detailed statistics as JSON (schema in [`crate::stats`]).
    pub fn to_json(&self) -> String {
        // The snapshot takes the detailed statistics by value: no copy of
        // every allocation's record on the way to the dump.
        crate::report::snapshot_to_json(&self.snapshot())
    }

    /// A text summary a person can read: heaps against budget, then each
    /// memory type and pool in use.
    pub fn summary(&self) -> String {
        crate::report::summary(&self.statistics())
    }

    /// Checks the corruption margins of every live allocation (see
    /// [`crate::AllocatorDesc::debug_margin`]); returns how many are damaged.
    /// Slow: reads every margin under each list's lock.
    pub fn check_corruption(&self) -> u64 {
        let margin = self.desc.debug_margin;
        if margin == 0 {
            return 0;
        }
        let mut damaged = 0;
        self.for_each_vector(|vector, _| {
            vector.for_each_list(|list: &BlockList| {
                for (_, block) in list.iter() {
                    if block.host_address == 0 || block.is_dedicated() {
                        continue;
                    }
                    block.for_each_allocation(&mut |offset, size, _| {
                        let range = crate::range::Range {
                            id: crate::range::RangeId(0),
                            offset,
                            size,
                        };
                        if !corruption::intact(block.host_address, block.size, &range, margin) {
                            damaged += 1;
                        }
                    });
                }
            })
        });
        damaged
    }

    /// Live allocations: what would be reported as leaked if the allocator
    /// were dropped now. Like a drop, it first ends the open passes of
    /// dropped defragmentation sessions (see [`crate::Defragmentation`]), so
    /// their moves are not counted.
    pub fn leaks(&self) -> Vec<Leak> {
        self.end_abandoned_passes();
        let mut leaks = Vec::new();
        self.for_each_vector(|vector, pool| {
            vector.for_each_list(|list| {
                for (_, block) in list.iter() {
                    block.for_each_allocation(&mut |offset, size, _| {
                        leaks.push(Leak {
                            memory_type: vector.memory_type,
                            pool: pool.map(|p| p.name.clone()),
                            offset,
                            size,
                            tag: block.tags.get(&offset).map(|t| t.to_string()),
                        })
                    });
                }
            })
        });
        leaks
    }

    /// Checks every invariant: each block's range allocator, each list's
    /// bookkeeping, and that the cheap counters match the blocks. Slow; for
    /// tests and debugging. Call it when no other thread is allocating.
    ///
    /// # Errors
    /// [`Error::Invariant`] naming the first broken invariant.
    pub fn validate(&self) -> Result<(), Error> {
        let mut objects = 0u32;
        let mut first_error = None;
        self.for_each_vector(|vector, pool| {
            if first_error.is_some() {
                return;
            }
            let name = match pool {
                Some(p) => format!("pool '{}'", p.name),
                None => format!("memory type {}", vector.memory_type),
            };
            match vector.validate(&name) {
                Ok((_, n)) => objects += n,
                Err(e) => first_error = Some(e),
            }
        });
        if let Some(e) = first_error {
            return Err(e);
        }
        if objects != self.objects.get() {
            return Err(Error::Invariant(format!(
                "{} device memory objects counted but {objects} blocks exist",
                self.objects.get()
            )));
        }
        Ok(())
    }
}
