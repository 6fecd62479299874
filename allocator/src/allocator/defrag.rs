//! Defragmentation sessions and passes on the allocator's vectors (types in
//! [`crate::defrag`]), pinning, and alias groups.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use super::Allocator;
use crate::alias::{self, AliasGroup, AliasInfo, AliasRequirement};
use crate::allocation::{Allocation, AllocationId, ListRef, Location};
use crate::block::PoolAlgorithm;
use crate::block_vector::{BlockVector, MoveBudget};
use crate::defrag::{
    CommitError, CommitErrorKind, DefragDesc, DefragError, Defragmentation, Move, PassReport,
    Record,
};
use crate::desc::{AllocationDesc, AllocationOptions};
use crate::device::MemoryDevice;
use crate::error::{Error, FreeError};
use crate::stats::DefragStats;

static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

impl<D: MemoryDevice> Allocator<D> {
    /// Calls `visit` with the vector of `list`; `None` when its pool is gone.
    fn with_vector<R>(&self, list: ListRef, visit: impl FnOnce(&BlockVector) -> R) -> Option<R> {
        match list {
            ListRef::Type(t) => self.types.get(t as usize).map(|ts| visit(&ts.vector)),
            ListRef::Pool(id) => self.pool(id).ok().map(|p| visit(&p.vector)),
        }
    }

    /// Starts a defragmentation session (see [`crate::defrag`]).
    ///
    /// # Errors
    /// [`DefragError::UnknownPool`] or [`DefragError::LinearPool`] for a
    /// pool named in `desc.pools`.
    pub fn begin_defragmentation(&self, desc: &DefragDesc) -> Result<Defragmentation, DefragError> {
        if let Some(pools) = &desc.pools {
            for &id in pools {
                let pool = self.pool(id).map_err(|_| DefragError::UnknownPool(id))?;
                if matches!(pool.desc.algorithm, PoolAlgorithm::Linear(_)) {
                    return Err(DefragError::LinearPool(id));
                }
            }
        }
        self.end_abandoned_passes();
        Ok(Defragmentation {
            allocator: self.id,
            session: NEXT_SESSION.fetch_add(1, Ordering::Relaxed),
            desc: desc.clone(),
            stats: DefragStats::default(),
            pass: 0,
            open: None,
            abandoned: std::sync::Arc::clone(&self.abandoned),
        })
    }

    /// Ends the passes of sessions dropped with a pass open (see
    /// [`Defragmentation`]), as their `end_pass` would have; their totals go
    /// to the allocator's.
    pub(crate) fn end_abandoned_passes(&self) {
        let passes = std::mem::take(&mut *self.abandoned.lock());
        for records in passes {
            let stats = self.finish_pass(records);
            self.add_defrag_totals(&stats);
        }
    }

    /// What [`Defragmentation::end_pass`] does with a pass's `records`:
    /// frees the old ranges of committed moves and the destinations of the
    /// others, clears every mark, then releases blocks that became empty.
    /// Returns what the pass did.
    fn finish_pass(&self, records: Vec<Record>) -> DefragStats {
        let mut stats = DefragStats {
            passes: 1,
            ..DefragStats::default()
        };
        let mut touched: Vec<ListRef> = Vec::new();
        for r in &records {
            let committed = r.old.is_some().then_some(&r.dest_location);
            self.with_vector(r.list, |v| v.resolve_move(&r.source, r.id, committed));
            if !touched.contains(&r.list) {
                touched.push(r.list);
            }
        }
        // Blocks freed: what the touched vectors held before the frees, less
        // what they hold after (frees release surplus empty blocks too).
        let held = |touched: &[ListRef]| {
            touched.iter().fold((0u64, 0u64), |(n, b), &list| {
                let usage = self.with_vector(list, |v| v.usage()).unwrap_or_default();
                (n + u64::from(usage.block_count), b + usage.block_bytes)
            })
        };
        let (blocks_before, bytes_before) = held(&touched);
        let committed: Vec<(ListRef, Location, u64)> = records
            .iter()
            .filter(|r| r.old.is_some())
            .map(|r| (r.list, r.dest_location, r.id))
            .collect();
        for r in records {
            let doomed = match (r.old, r.dest) {
                (Some(old), _) => {
                    stats.allocations_moved += 1;
                    stats.bytes_moved += r.size;
                    old
                }
                (None, Some(dest)) => {
                    stats.moves_cancelled += 1;
                    dest
                }
                (None, None) => continue,
            };
            if let Err(e) = self.free(doomed) {
                log::error!(
                    "vkalloc: defragmentation could not free a range: {}",
                    e.error()
                );
            }
        }
        for (list, dest, id) in &committed {
            self.with_vector(*list, |v| v.settle_committed(dest, *id));
        }
        let env = self.env();
        for &list in &touched {
            self.with_vector(list, |v| {
                v.release_empty(env);
            });
        }
        let (blocks_after, bytes_after) = held(&touched);
        stats.blocks_freed = blocks_before.saturating_sub(blocks_after);
        stats.bytes_freed = bytes_before.saturating_sub(bytes_after);
        stats
    }

    /// Marks an allocation movable or not by defragmentation (pin what the
    /// GPU uses in flight, or what the caller can't re-create). Takes effect
    /// at the next pass; a move already handed out stays valid (drop it to
    /// keep the allocation in place).
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`] if another allocator made it;
    /// [`Error::UnknownPool`] if its pool is gone; [`Error::InvalidAlias`]
    /// for making an alias group's allocation movable (its members'
    /// resources are bound into it: it never moves). A stale handle of a
    /// reset pool is a no-op.
    pub fn set_movable(&self, allocation: &Allocation, movable: bool) -> Result<(), Error> {
        let location = allocation.location;
        if location.allocator != self.id {
            return Err(Error::ForeignAllocation);
        }
        let set = self
            .with_vector(location.list, |v| {
                v.with_meta(&location, allocation.id, |m| {
                    if movable && m.aliased {
                        return false;
                    }
                    m.pinned = !movable;
                    true
                })
            })
            .ok_or_else(|| match location.list {
                ListRef::Pool(id) => Error::UnknownPool(id),
                ListRef::Type(_) => Error::Invariant("memory type vanished".into()),
            })?;
        match set {
            Some(false) => Err(Error::InvalidAlias(
                "an alias group's allocation never moves: its members are bound into it",
            )),
            _ => Ok(()),
        }
    }

    /// Whether defragmentation may move the allocation.
    pub fn is_movable(&self, allocation: &Allocation) -> bool {
        let location = allocation.location;
        location.allocator == self.id
            && !allocation.dedicated
            && self
                .with_vector(location.list, |v| {
                    !v.is_linear()
                        && v.with_meta(&location, allocation.id, |m| !m.pinned && !m.aliased)
                            .unwrap_or(false)
                })
                .unwrap_or(false)
    }

    /// Allocates one allocation for several aliased resources (see
    /// [`crate::alias`]): members with overlapping lifetimes get disjoint
    /// bytes, the others share. The allocation is never moved by
    /// defragmentation.
    ///
    /// # Errors
    /// [`Error::InvalidAlias`], [`Error::InvalidAlignment`] or
    /// [`Error::NoCompatibleMemoryType`] for inconsistent members; any error
    /// of [`Self::allocate`].
    pub fn allocate_alias_group(
        &self,
        members: &[AliasRequirement<'_>],
        options: AllocationOptions<'_>,
    ) -> Result<AliasGroup, Error> {
        let packing = alias::pack(members, self.hot.granularity)?;
        // Pinned as it is placed: a pass running meanwhile never sees it
        // movable before its members are recorded below.
        let allocation = self.allocate(&AllocationDesc {
            size: packing.size,
            alignment: packing.alignment,
            memory_type_bits: packing.memory_type_bits,
            kind: packing.kind,
            options: AllocationOptions {
                pinned: true,
                ..options
            },
            ..AllocationDesc::default()
        })?;
        let infos: Vec<AliasInfo> = members
            .iter()
            .zip(&packing.members)
            .map(|(r, m)| AliasInfo {
                offset: m.offset,
                size: m.size,
                kind: m.kind.name().to_string(),
                first_pass: m.lifetime.first,
                last_pass: m.lifetime.last,
                tag: (!r.tag.is_empty()).then(|| r.tag.to_string()),
            })
            .collect();
        let location = allocation.location;
        self.with_vector(location.list, |v| {
            v.set_aliases(&location, allocation.id, infos)
        });
        Ok(AliasGroup {
            allocation,
            members: packing.members,
        })
    }

    /// Frees an alias group. Destroy every resource bound to it first.
    ///
    /// # Errors
    /// As [`Self::free`]; the group's allocation comes back in the error.
    pub fn free_alias_group(&self, group: AliasGroup) -> Result<(), FreeError> {
        self.free(group.allocation)
    }

    fn add_defrag_totals(&self, stats: &DefragStats) {
        self.defrag_totals.lock().add(stats);
    }

    pub(super) fn defrag_totals(&self) -> DefragStats {
        *self.defrag_totals.lock()
    }
}

impl Defragmentation {
    /// Begins a pass: plans and reserves moves within the pass limits, and
    /// hands them out. An empty list means nothing is left to move; end the
    /// pass (its report says `complete`).
    ///
    /// # Errors
    /// [`DefragError::PassOpen`] while a pass is open;
    /// [`DefragError::ForeignAllocator`] for another allocator.
    pub fn begin_pass<D: MemoryDevice>(
        &mut self,
        allocator: &Allocator<D>,
    ) -> Result<Vec<Move>, DefragError> {
        if allocator.id != self.allocator {
            return Err(DefragError::ForeignAllocator);
        }
        if self.open.is_some() {
            return Err(DefragError::PassOpen);
        }
        allocator.end_abandoned_passes();
        self.pass += 1;
        let mut budget = MoveBudget {
            bytes: self.desc.max_bytes_per_pass,
            allocations: self.desc.max_allocations_per_pass,
        };
        let mut records: Vec<Record> = Vec::new();
        let desc = &self.desc;
        let env = allocator.env();
        allocator.for_each_vector(|vector, pool| {
            if desc.memory_types & (1u32 << vector.memory_type) == 0 {
                return;
            }
            let wanted = match (vector.list_ref(), &desc.pools) {
                (ListRef::Type(_), _) => desc.default_blocks,
                (ListRef::Pool(_), None) => pool.is_some(),
                (ListRef::Pool(id), Some(ids)) => ids.contains(&id),
            };
            if !wanted || vector.is_linear() {
                return;
            }
            for planned in vector.plan_moves(env, desc.algorithm, &mut budget) {
                records.push(Record {
                    list: vector.list_ref(),
                    source: planned.source,
                    id: planned.id,
                    size: planned.size,
                    source_memory: planned.source_memory,
                    source_offset: planned.source_offset,
                    dest_location: planned.dest.location,
                    dest: Some(planned.dest),
                    old: None,
                });
            }
        });
        // A recorded trace sees each destination as an allocation, so the
        // frees that follow (of the old range, or the cancelled destination)
        // name allocations it knows.
        #[cfg(feature = "trace")]
        for d in records.iter().filter_map(|r| r.dest.as_ref()) {
            let desc = AllocationDesc {
                size: d.size,
                memory_type_bits: 1 << d.memory_type,
                kind: d.kind,
                ..AllocationDesc::default()
            };
            allocator.record(|r| r.alloc(&desc, d.memory, d.offset));
        }
        let moves = records
            .iter()
            .enumerate()
            .filter_map(|(index, r)| {
                let dest = r.dest.as_ref()?;
                Some(Move {
                    session: self.session,
                    pass: self.pass,
                    index,
                    id: AllocationId(r.id),
                    size: r.size,
                    memory_type: dest.memory_type,
                    kind: dest.kind,
                    pool: dest.pool(),
                    source_memory: r.source_memory,
                    source_offset: r.source_offset,
                    dest_memory: dest.memory,
                    dest_offset: dest.offset,
                })
            })
            .collect();
        self.open = Some(records);
        Ok(moves)
    }

    /// Commits a move: `old` (the move's source, whose contents the caller
    /// has copied) is handed over, to be freed when the pass ends, and the
    /// destination comes back as the allocation to keep (same id).
    ///
    /// # Errors
    /// The move and `old` come back in the [`CommitError`]:
    /// [`CommitErrorKind::StalePass`] for a move of another session or an
    /// ended pass; [`CommitErrorKind::SourceFreed`] when the source was freed
    /// during the pass (the move is void: drop it);
    /// [`CommitErrorKind::WrongAllocation`] when `old` is not the source.
    pub fn commit<D: MemoryDevice>(
        &mut self,
        allocator: &Allocator<D>,
        mv: Move,
        old: Allocation,
    ) -> Result<Allocation, CommitError> {
        let refuse = |kind, mv, allocation| {
            Err(CommitError {
                kind,
                parts: Box::new((mv, allocation)),
            })
        };
        if mv.session != self.session || mv.pass != self.pass || allocator.id != self.allocator {
            return refuse(CommitErrorKind::StalePass, mv, old);
        }
        let Some(record) = self.open.as_mut().and_then(|r| r.get_mut(mv.index)) else {
            return refuse(CommitErrorKind::StalePass, mv, old);
        };
        if record.dest.is_none() {
            return refuse(CommitErrorKind::StalePass, mv, old);
        }
        if old.location != record.source || old.id != record.id {
            let freed = allocator
                .with_vector(record.list, |v| v.source_freed(record.id))
                .unwrap_or(true);
            let kind = if freed {
                CommitErrorKind::SourceFreed
            } else {
                CommitErrorKind::WrongAllocation
            };
            return refuse(kind, mv, old);
        }
        let new = record.dest.take().expect("checked above");
        // A pin set on the source while its move was out (`set_movable`:
        // pins take effect at the next pass, a move already handed out stays
        // valid) goes to the allocation that replaces it. `old` is ours
        // now, so no other call changes its record meanwhile.
        let pinned = allocator
            .with_vector(record.list, |v| {
                v.with_meta(&old.location, old.id, |m| m.pinned)
            })
            .flatten()
            .unwrap_or(false);
        if pinned {
            allocator.with_vector(new.location.list, |v| {
                v.with_meta(&new.location, new.id, |m| m.pinned = true)
            });
        }
        record.old = Some(old);
        Ok(new)
    }

    /// Whether the move's source was freed during the pass (so the move is
    /// void and need not be copied).
    pub fn is_cancelled<D: MemoryDevice>(&self, allocator: &Allocator<D>, mv: &Move) -> bool {
        match self.open.as_ref().and_then(|r| r.get(mv.index)) {
            Some(record) if mv.session == self.session && mv.pass == self.pass => allocator
                .with_vector(record.list, |v| v.source_freed(record.id))
                .unwrap_or(true),
            _ => true,
        }
    }

    /// Ends the open pass: frees the old ranges of committed moves and the
    /// destinations of the others, then releases blocks that became empty
    /// (above each list's `min_blocks`).
    ///
    /// # Errors
    /// [`DefragError::NoPassBegun`]; [`DefragError::ForeignAllocator`] for
    /// another allocator (the pass stays open).
    pub fn end_pass<D: MemoryDevice>(
        &mut self,
        allocator: &Allocator<D>,
    ) -> Result<PassReport, DefragError> {
        if allocator.id != self.allocator {
            return Err(DefragError::ForeignAllocator);
        }
        let records = self.open.take().ok_or(DefragError::NoPassBegun)?;
        let moves = records.len() as u64;
        let stats = allocator.finish_pass(records);
        self.stats.add(&stats);
        allocator.add_defrag_totals(&stats);
        Ok(PassReport {
            moves,
            stats,
            complete: moves == 0,
        })
    }

    /// Ends the session, ending an open pass first; returns its totals.
    ///
    /// # Errors
    /// [`DefragError::ForeignAllocator`] for another allocator (the session
    /// comes back untouched inside nothing: end it with its own allocator).
    pub fn end<D: MemoryDevice>(
        mut self,
        allocator: &Allocator<D>,
    ) -> Result<DefragStats, DefragError> {
        if allocator.id != self.allocator {
            return Err(DefragError::ForeignAllocator);
        }
        if self.open.is_some() {
            self.end_pass(allocator)?;
        }
        Ok(self.stats)
    }
}
