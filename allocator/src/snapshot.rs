//! Snapshots: every heap, block list, block and allocation as plain data, for
//! overlays, heap maps and the JSON dump.
//!
//! A [`Snapshot`] is what [`Allocator::snapshot`] returns and what
//! [`Allocator::to_json`] writes (schema in [`crate::report`]). It is plain,
//! serde-serialisable data, so a tool can read it back from a dump with
//! `serde_json` and draw the same picture a live program draws.
//!
//! Cost: the snapshot walks each block list (each shard of a memory type's or
//! pool's blocks) under that list's lock, one list at a time, so a thread allocating from another memory type or pool never
//! waits for it, and one allocating from the same list waits at most for that
//! list's walk. Records share the allocator's tag strings (an [`Arc`] clone,
//! not a copy) and name their layout class with a static string, so a record
//! costs no heap allocation of its own.
//!
//! Per frame, [`Allocator::refresh_snapshot`] updates an earlier snapshot in
//! place: a block that has not changed since (same [`BlockSnapshot::id`] and
//! [`BlockSnapshot::generation`]) keeps its records and is not walked, so a
//! frame that touched a few blocks pays for those blocks only, whatever the
//! number of live allocations elsewhere. The overlay takes one per frame.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::block::Block;
use crate::device::{MemoryDevice, MemoryPropertyFlags};
use crate::range::RangeKind;
use crate::stats::{AllocationInfo, BlockInfo, DetailedStatistics, Statistics};
use crate::Allocator;

/// The version of the snapshot's (and the JSON dump's) schema; bumped on any
/// incompatible change.
pub const SCHEMA_VERSION: u32 = 2;

/// One live allocation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationRecord {
    /// Offset in its block, in bytes.
    pub offset: u64,
    /// Bytes.
    pub size: u64,
    /// Layout class: `linear` (buffers, linear images), `optimal` (optimal
    /// images) or `unknown`.
    pub kind: Cow<'static, str>,
    /// Debugging tag, if one was given (shared with the allocator).
    #[serde(default)]
    pub tag: Option<Arc<str>>,
    /// Whether the allocation is dedicated (owns its block).
    #[serde(default)]
    pub dedicated: bool,
    /// Frames since it was made ([`Snapshot::allocator_frame`] minus
    /// `made_in_frame`), where the allocator knows it.
    #[serde(default)]
    pub age_frames: Option<u64>,
    /// The allocator's frame counter ([`Allocator::begin_frame`]) when it was
    /// made; a defragmentation move keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub made_in_frame: Option<u64>,
    /// Resources aliased on this allocation (an alias group's members),
    /// each with its offset inside the allocation and its lifetime.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<crate::alias::AliasInfo>,
}

/// One block (`VkDeviceMemory`) and what it holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockSnapshot {
    /// The block's id, unique in this process for its lifetime and never
    /// reused (0 in dumps from before schema 2 had it).
    #[serde(default)]
    pub id: u64,
    /// How many changes the block had seen when this was taken: equal ids and
    /// generations mean equal contents.
    #[serde(default)]
    pub generation: u64,
    /// Bytes of device memory.
    pub size: u64,
    /// Whether it is a dedicated allocation.
    pub dedicated: bool,
    /// Whether it is persistently mapped.
    #[serde(default)]
    pub mapped: bool,
    /// Live allocations.
    pub allocation_count: u32,
    /// Bytes of live allocations.
    pub allocation_bytes: u64,
    /// Free ranges.
    pub free_range_count: u32,
    /// The largest free range, in bytes.
    pub largest_free: u64,
    /// `1 - largest_free / total_free`; 0 when nothing or one range is free.
    pub fragmentation: f64,
    /// Live allocations in address order. Ranges may overlap where memory is aliased.
    pub allocations: Vec<AllocationRecord>,
    /// Free ranges in address order, as `[offset, size]`.
    #[serde(default)]
    pub free_ranges: Vec<[u64; 2]>,
}

/// The name of a layout class in records and dumps.
fn kind_name(kind: RangeKind) -> &'static str {
    match kind {
        RangeKind::Linear => "linear",
        RangeKind::Optimal => "optimal",
        RangeKind::Unknown => "unknown",
    }
}

impl BlockSnapshot {
    /// What `block` holds now; the caller holds its list's lock.
    pub(crate) fn of(block: &Block) -> Self {
        let mut free_ranges = Vec::new();
        block.for_each_free(&mut |offset, size| free_ranges.push([offset, size]));
        let total_free: u64 = free_ranges.iter().map(|r| r[1]).sum();
        let largest_free = free_ranges.iter().map(|r| r[1]).max().unwrap_or(0);
        let dedicated = block.is_dedicated();
        let mut allocations = Vec::with_capacity(block.allocation_count() as usize);
        let tagged = !block.tags.is_empty();
        block.for_each_allocation_slot(&mut |offset, size, kind, slot| {
            let made_in_frame = block
                .meta
                .get(slot as usize)
                .filter(|m| m.live && m.range.offset == offset)
                .map(|m| m.frame);
            allocations.push(AllocationRecord {
                offset,
                size,
                kind: Cow::Borrowed(kind_name(kind)),
                tag: if tagged {
                    block.tags.get(&offset).cloned()
                } else {
                    None
                },
                dedicated,
                age_frames: None,
                made_in_frame,
                aliases: Vec::new(),
            })
        });
        for meta in block.live_metas().filter(|m| m.aliased) {
            let at = allocations.partition_point(|a| a.offset < meta.range.offset);
            if let Some(a) = allocations
                .get_mut(at)
                .filter(|a| a.offset == meta.range.offset)
            {
                a.aliases = block
                    .aliases
                    .get(&meta.range.id.slot())
                    .cloned()
                    .unwrap_or_default();
            }
        }
        Self {
            id: block.uid,
            generation: block.generation,
            size: block.size,
            dedicated,
            mapped: block.host_address != 0,
            allocation_count: block.allocation_count(),
            allocation_bytes: block.allocated_bytes(),
            free_range_count: free_ranges.len() as u32,
            largest_free,
            fragmentation: if total_free == 0 {
                0.0
            } else {
                1.0 - largest_free as f64 / total_free as f64
            },
            allocations,
            free_ranges,
        }
    }

    /// Free bytes (the sum of the free ranges, saturating: a snapshot read
    /// back from a dump is input).
    pub fn free_bytes(&self) -> u64 {
        self.free_ranges
            .iter()
            .fold(0u64, |s, r| s.saturating_add(r[1]))
    }
}

/// The blocks of one memory type's default list or of one pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ListSnapshot {
    /// The memory type.
    pub memory_type: u32,
    /// The memory type's heap.
    #[serde(default)]
    pub heap: u32,
    /// The memory type's property flags.
    #[serde(default)]
    pub flags: MemoryPropertyFlags,
    /// The pool's name, or `None` for the memory type's default blocks.
    #[serde(default)]
    pub pool: Option<String>,
    /// The pool's hard budget, if any.
    #[serde(default)]
    pub pool_budget: Option<u64>,
    /// Its blocks.
    pub blocks: Vec<BlockSnapshot>,
}

/// Every heap, block list, block and allocation at one moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The caller's frame number when it was taken, if the caller set it.
    #[serde(default)]
    pub frame: Option<u64>,
    /// The allocator's frame counter ([`Allocator::begin_frame`]) when it was
    /// taken: what allocations' ages are counted against.
    #[serde(default)]
    pub allocator_frame: u64,
    /// The cheap counters: per heap (our usage, the driver's usage and
    /// budget), per memory type and per pool.
    pub statistics: Statistics,
    /// Every block list that holds a block.
    pub lists: Vec<ListSnapshot>,
    /// The largest free range in any block.
    pub largest_free: u64,
    /// Free ranges in all blocks.
    pub free_range_count: u64,
    /// Free bytes in all blocks.
    pub free_bytes: u64,
    /// Resources aliased on shared allocations (alias group members).
    #[serde(default)]
    pub alias_member_count: u64,
    /// Bytes aliasing saves: the members' sizes minus the ranges their
    /// allocations hold (as [`crate::stats::DetailedStatistics::aliased_bytes_saved`]).
    #[serde(default)]
    pub aliased_bytes_saved: u64,
}

impl BlockInfo {
    /// What `block` holds now (the snapshot's walk, as owned strings).
    pub(crate) fn of(block: &Block) -> Self {
        let b = BlockSnapshot::of(block);
        Self {
            size: b.size,
            dedicated: b.dedicated,
            mapped: b.mapped,
            allocation_count: b.allocation_count,
            allocation_bytes: b.allocation_bytes,
            free_range_count: b.free_range_count,
            largest_free: b.largest_free,
            fragmentation: b.fragmentation,
            allocations: b
                .allocations
                .into_iter()
                .map(|a| AllocationInfo {
                    offset: a.offset,
                    size: a.size,
                    kind: a.kind.into_owned(),
                    tag: a.tag.map(|t| String::from(&*t)),
                    aliases: a.aliases,
                })
                .collect(),
            free_ranges: b.free_ranges,
        }
    }
}

impl Snapshot {
    /// Builds a snapshot from detailed statistics (moving, not copying, the tags).
    pub fn from_details(details: DetailedStatistics) -> Self {
        let stats = details.statistics;
        let lists = details
            .lists
            .into_iter()
            .map(|l| {
                let ty = stats.types.iter().find(|t| t.index == l.memory_type);
                let pool_budget = l.pool.as_ref().and_then(|name| {
                    stats
                        .pools
                        .iter()
                        .find(|p| &p.name == name && p.memory_type == l.memory_type)
                        .and_then(|p| p.budget)
                });
                ListSnapshot {
                    memory_type: l.memory_type,
                    heap: ty.map_or(0, |t| t.heap),
                    flags: ty.map_or(MemoryPropertyFlags::NONE, |t| t.flags),
                    pool: l.pool,
                    pool_budget,
                    blocks: l
                        .blocks
                        .into_iter()
                        .map(|b| BlockSnapshot {
                            id: 0,
                            generation: 0,
                            size: b.size,
                            dedicated: b.dedicated,
                            mapped: b.mapped,
                            allocation_count: b.allocation_count,
                            allocation_bytes: b.allocation_bytes,
                            free_range_count: b.free_range_count,
                            largest_free: b.largest_free,
                            fragmentation: b.fragmentation,
                            allocations: b
                                .allocations
                                .into_iter()
                                .map(|a| AllocationRecord {
                                    offset: a.offset,
                                    size: a.size,
                                    kind: Cow::Owned(a.kind),
                                    tag: a.tag.map(Arc::from),
                                    dedicated: b.dedicated,
                                    age_frames: None,
                                    made_in_frame: None,
                                    aliases: a.aliases,
                                })
                                .collect(),
                            free_ranges: b.free_ranges,
                        })
                        .collect(),
                }
            })
            .collect();
        Self {
            frame: None,
            allocator_frame: 0,
            statistics: stats,
            lists,
            largest_free: details.largest_free,
            free_range_count: details.free_range_count,
            free_bytes: details.free_bytes,
            alias_member_count: details.alias_member_count,
            aliased_bytes_saved: details.aliased_bytes_saved,
        }
    }

    /// Live allocations over every block.
    pub fn allocation_count(&self) -> u64 {
        self.blocks().map(|b| b.allocations.len() as u64).sum()
    }

    /// Every block of every list.
    pub fn blocks(&self) -> impl Iterator<Item = &BlockSnapshot> {
        self.lists.iter().flat_map(|l| l.blocks.iter())
    }

    /// Recomputes the totals over every block (free ranges, aliasing).
    fn total_up(&mut self) {
        let (mut largest, mut ranges, mut bytes, mut members, mut saved) = (0, 0, 0u64, 0, 0u64);
        let now = self.allocator_frame;
        for a in self
            .lists
            .iter_mut()
            .flat_map(|l| l.blocks.iter_mut())
            .flat_map(|b| b.allocations.iter_mut())
        {
            a.age_frames = a.made_in_frame.map(|made| now.saturating_sub(made));
        }
        for b in self.lists.iter().flat_map(|l| l.blocks.iter()) {
            largest = b.largest_free.max(largest);
            ranges += b.free_range_count as u64;
            bytes = bytes.saturating_add(b.free_bytes());
            for a in b.allocations.iter().filter(|a| !a.aliases.is_empty()) {
                members += a.aliases.len() as u64;
                let sum = a.aliases.iter().fold(0u64, |s, m| s.saturating_add(m.size));
                saved = saved.saturating_add(sum.saturating_sub(a.size));
            }
        }
        self.largest_free = largest;
        self.free_range_count = ranges;
        self.free_bytes = bytes;
        self.alias_member_count = members;
        self.aliased_bytes_saved = saved;
    }
}

impl<D: MemoryDevice> Allocator<D> {
    /// A snapshot of every heap, block and allocation (see [`crate::snapshot`]).
    ///
    /// Takes each block list's lock in turn, never two at once.
    pub fn snapshot(&self) -> Snapshot {
        let mut snapshot = Snapshot::default();
        self.refresh_snapshot(&mut snapshot);
        snapshot
    }

    /// Brings `snapshot` (one this allocator took earlier, or an empty one) up
    /// to date: fresh counters, and each block walked again only if it changed
    /// since; unchanged blocks keep their records. Locks as
    /// [`Allocator::snapshot`] does. `snapshot.frame` is left as it was.
    ///
    #[cfg_attr(feature = "sim", doc = "```")]
    #[cfg_attr(not(feature = "sim"), doc = "```ignore")]
    /// # use vkalloc::{sim::{tables, SimDevice}, Allocator, AllocatorDesc, Snapshot};
    /// let allocator = Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default())?;
    /// let mut snapshot = Snapshot::default();
    /// for _frame in 0..3 {
    ///     allocator.refresh_snapshot(&mut snapshot); // cheap when little changed
    /// }
    /// assert_eq!(snapshot.allocation_count(), 0);
    /// # Ok::<(), vkalloc::Error>(())
    /// ```
    pub fn refresh_snapshot(&self, snapshot: &mut Snapshot) {
        let statistics = self.statistics();
        let mut seen: HashMap<(u64, u64), BlockSnapshot> = snapshot
            .lists
            .drain(..)
            .flat_map(|l| l.blocks)
            .filter(|b| b.id != 0)
            .map(|b| ((b.id, b.generation), b))
            .collect();
        let mut lists = Vec::new();
        self.for_each_vector(|vector, pool| {
            let mut blocks: Vec<BlockSnapshot> = Vec::new();
            vector.for_each_list(|list| {
                blocks.extend(list.iter().map(|(_, b)| {
                    seen.remove(&(b.uid, b.generation))
                        .unwrap_or_else(|| BlockSnapshot::of(b))
                }))
            });
            if blocks.is_empty() {
                return;
            }
            let memory_type = vector.memory_type;
            let ty = statistics.types.iter().find(|t| t.index == memory_type);
            let pool_name = pool.map(|p| p.name.clone());
            let pool_budget = pool_name.as_ref().and_then(|name| {
                statistics
                    .pools
                    .iter()
                    .find(|p| &p.name == name && p.memory_type == memory_type)
                    .and_then(|p| p.budget)
            });
            lists.push(ListSnapshot {
                memory_type,
                heap: ty.map_or(0, |t| t.heap),
                flags: ty.map_or(MemoryPropertyFlags::NONE, |t| t.flags),
                pool: pool_name,
                pool_budget,
                blocks,
            });
        });
        snapshot.statistics = statistics;
        snapshot.lists = lists;
        snapshot.allocator_frame = self.frame();
        snapshot.total_up();
    }
}

#[cfg(test)]
mod tests {
    use crate::sim::{tables, SimDevice};
    use crate::{
        AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, MemoryUsage, PoolDesc,
        ResourceKind,
    };

    #[test]
    fn snapshot_agrees_with_detailed_statistics_and_the_dump() {
        let allocator =
            Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default()).unwrap();
        let pool = allocator
            .create_pool(&PoolDesc {
                usage: MemoryUsage::GpuOnly,
                block_size: 1 << 20,
                budget: Some(8 << 20),
                ..PoolDesc::new("textures")
            })
            .unwrap();
        let mut live = Vec::new();
        for i in 0..40u64 {
            let mut options = AllocationOptions::usage(if i % 3 == 0 {
                MemoryUsage::Upload
            } else {
                MemoryUsage::GpuOnly
            })
            .tagged(if i % 2 == 0 { "even" } else { "odd" });
            if i % 5 == 0 {
                options.pool = Some(pool);
            }
            live.push(
                allocator
                    .allocate(&AllocationDesc {
                        size: 4096 * (1 + i % 7),
                        alignment: 256,
                        kind: if i % 4 == 0 {
                            ResourceKind::OptimalImage
                        } else {
                            ResourceKind::Buffer
                        },
                        options,
                        ..AllocationDesc::default()
                    })
                    .unwrap(),
            );
        }
        // Free every third to leave holes.
        let mut kept = Vec::new();
        for (i, a) in live.into_iter().enumerate() {
            if i % 3 == 1 {
                allocator.free(a).unwrap();
            } else {
                kept.push(a);
            }
        }
        let details = allocator.detailed_statistics();
        let snap = allocator.snapshot();
        assert_eq!(snap.statistics, details.statistics);
        assert_eq!(snap.lists.len(), details.lists.len());
        assert_eq!(snap.allocation_count(), kept.len() as u64);
        assert_eq!(
            snap.allocation_count(),
            details.statistics.total.allocation_count
        );
        assert_eq!(snap.free_bytes, details.free_bytes);
        for (s, d) in snap.lists.iter().zip(&details.lists) {
            assert_eq!(s.memory_type, d.memory_type);
            assert_eq!(s.pool, d.pool);
            assert_eq!(s.blocks.len(), d.blocks.len());
            for (sb, db) in s.blocks.iter().zip(&d.blocks) {
                assert_eq!(sb.size, db.size);
                assert_eq!(sb.free_ranges, db.free_ranges);
                assert_eq!(sb.allocation_bytes, db.allocation_bytes);
                let ranges: Vec<_> = sb.allocations.iter().map(|a| (a.offset, a.size)).collect();
                let expected: Vec<_> = db.allocations.iter().map(|a| (a.offset, a.size)).collect();
                assert_eq!(ranges, expected);
                assert!(sb.allocations.iter().all(|a| a.tag.is_some()));
            }
        }
        let pooled = snap.lists.iter().find(|l| l.pool.is_some()).unwrap();
        assert_eq!(pooled.pool_budget, Some(8 << 20));
        // The dump carries the snapshot and reads back as one.
        let json: serde_json::Value = serde_json::from_str(&allocator.to_json()).unwrap();
        assert_eq!(json["schema_version"], super::SCHEMA_VERSION);
        let back: super::Snapshot = serde_json::from_value(json).unwrap();
        assert_eq!(back.statistics, snap.statistics);
        assert_eq!(back.lists.len(), snap.lists.len());
        for (b, s) in back.blocks().zip(snap.blocks()) {
            assert_eq!(b.allocations, s.allocations);
            assert_eq!(b.free_ranges, s.free_ranges);
            assert!((b.fragmentation - s.fragmentation).abs() < 1e-9);
        }
        for a in kept {
            allocator.free(a).unwrap();
        }
        allocator.destroy_pool(pool).unwrap();
    }

    #[test]
    fn a_refreshed_snapshot_equals_a_fresh_one() {
        let allocator =
            Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default()).unwrap();
        let pool = allocator
            .create_pool(&PoolDesc {
                usage: MemoryUsage::GpuOnly,
                block_size: 1 << 20,
                ..PoolDesc::new("pool")
            })
            .unwrap();
        let mut kept = Vec::new();
        let mut snapshot = super::Snapshot::default();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..400u64 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            if seed % 3 == 0 && !kept.is_empty() {
                let i = (seed as usize / 3) % kept.len();
                allocator.free(kept.swap_remove(i)).unwrap();
            } else {
                let mut options = AllocationOptions::usage(MemoryUsage::GpuOnly).tagged("t");
                if seed % 5 == 0 {
                    options.pool = Some(pool);
                }
                kept.push(
                    allocator
                        .allocate(&AllocationDesc {
                            size: 256 * (1 + seed % 64),
                            alignment: 256,
                            kind: ResourceKind::Buffer,
                            options,
                            ..AllocationDesc::default()
                        })
                        .unwrap(),
                );
            }
            if step % 7 == 0 {
                allocator.refresh_snapshot(&mut snapshot);
                assert_eq!(snapshot, allocator.snapshot(), "step {step}");
            }
        }
        // Unchanged blocks are carried over: a refresh with nothing changed
        // keeps every record.
        allocator.refresh_snapshot(&mut snapshot);
        let before = snapshot.clone();
        allocator.refresh_snapshot(&mut snapshot);
        assert_eq!(snapshot, before);
        assert_eq!(snapshot.allocation_count(), kept.len() as u64);
        for a in kept {
            allocator.free(a).unwrap();
        }
        allocator.destroy_pool(pool).unwrap();
    }

    #[test]
    fn records_carry_their_age_in_frames() {
        let allocator =
            Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default()).unwrap();
        let desc = AllocationDesc {
            size: 4096,
            alignment: 256,
            kind: ResourceKind::Buffer,
            options: AllocationOptions::usage(MemoryUsage::GpuOnly),
            ..AllocationDesc::default()
        };
        let old = allocator.allocate(&desc).unwrap();
        for _ in 0..5 {
            allocator.begin_frame();
        }
        let new = allocator.allocate(&desc).unwrap();
        allocator.begin_frame();
        let mut snapshot = super::Snapshot::default();
        allocator.refresh_snapshot(&mut snapshot);
        let ages: Vec<_> = snapshot
            .blocks()
            .flat_map(|b| b.allocations.iter().map(|a| (a.offset, a.age_frames)))
            .collect();
        assert_eq!(snapshot.allocator_frame, 6);
        assert!(ages.contains(&(old.offset(), Some(6))), "{ages:?}");
        assert!(ages.contains(&(new.offset(), Some(1))), "{ages:?}");
        // Unchanged blocks are reused, and their ages still move on.
        allocator.begin_frame();
        allocator.refresh_snapshot(&mut snapshot);
        let oldest = snapshot
            .blocks()
            .flat_map(|b| &b.allocations)
            .filter_map(|a| a.age_frames)
            .max();
        assert_eq!(oldest, Some(7));
        allocator.free(old).unwrap();
        allocator.free(new).unwrap();
    }
}
