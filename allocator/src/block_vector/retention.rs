//! Retention of freed memory: the empty blocks and recycled dedicated
//! memory a vector keeps for reuse, bounded by the live high-water mark
//! ([`crate::policy::retain_limit`]) and the committed high-water mark
//! ([`crate::policy::retain_below_peak`]), decayed once a frame and released
//! when another memory type needs room or the allocator has been idle.

#![forbid(unsafe_code)]

use std::sync::atomic::Ordering;

use super::{BlockVector, Env};

impl BlockVector {
    /// Raises the high-water mark to `peak`; returns the retention limit
    /// ([`crate::policy::retain_limit`]) with `live` bytes live.
    pub(super) fn retain_limit(&self, live: u64, peak: u64) -> u64 {
        let high_water = self.high_water.fetch_max(peak, Ordering::Relaxed).max(peak);
        crate::policy::retain_limit(live, high_water)
    }

    /// Raises the committed high-water mark to the vector's committed bytes
    /// (after memory was created).
    pub(super) fn note_committed(&self, env: Env<'_>) {
        let committed = self.blocks.snapshot().block_bytes;
        self.committed_high.fetch_max(committed, Ordering::Relaxed);
        env.memory.budgets.note_committed();
    }

    /// The bytes of freed memory the vector may keep: the larger of
    /// [`crate::policy::retain_limit`] (with `live` bytes live and a peak of
    /// `peak`) and what keeps its committed bytes within their high-water
    /// mark when `needed` more are made ([`crate::policy::retain_below_peak`]),
    /// with `committed` bytes committed of which `retained` are kept.
    fn keep_limit(&self, live: u64, peak: u64, committed: u64, retained: u64, needed: u64) -> u64 {
        let in_use = committed.saturating_sub(retained);
        let high = self.committed_high.load(Ordering::Relaxed);
        self.retain_limit(live, peak)
            .max(crate::policy::retain_below_peak(high, in_use, needed))
    }

    /// Bytes of memory of its own holding live allocations, in the shards
    /// not busy right now (a policy estimate, like [`Self::retained_bytes`]).
    pub(super) fn dedicated_bytes(&self) -> u64 {
        let mut bytes = 0;
        for shard in 0..self.open_shards() {
            if let Some(list) = self.try_shard(shard) {
                bytes += list.dedicated_bytes();
            }
        }
        bytes
    }

    /// Bytes of freed memory kept: empty shared blocks and the recycle bin.
    /// Shards busy right now are skipped (a policy estimate: it never waits
    /// for another thread's lock).
    pub(super) fn retained_bytes(&self) -> u64 {
        let mut bytes = self.recycle.as_ref().map_or(0, |b| b.lock().bytes());
        for shard in 0..self.open_shards() {
            if let Some(list) = self.try_shard(shard) {
                bytes += list.empty_bytes();
            }
        }
        bytes
    }

    /// Frees kept memory (the recycle bin's oldest first, then the largest
    /// empty blocks of the shards not busy right now) until at most `limit`
    /// bytes are kept.
    fn trim_retained(&self, env: Env<'_>, limit: u64) {
        let retained = self.retained_bytes();
        let Some(mut excess) = retained.checked_sub(limit).filter(|&e| e > 0) else {
            return;
        };
        let mut doomed = Vec::new();
        if let Some(bin) = &self.recycle {
            let mut bin = bin.lock();
            let keep = bin.bytes().saturating_sub(excess);
            doomed = bin.evict_above(keep);
        }
        excess = excess.saturating_sub(doomed.iter().map(|b| b.size).sum());
        for shard in 0..self.open_shards() {
            if excess == 0 {
                break;
            }
            let Some(mut list) = self.try_shard(shard) else {
                continue;
            };
            let taken = list.take_empty_bytes(excess);
            drop(list);
            excess = excess.saturating_sub(taken.iter().map(|b| b.size).sum());
            doomed.extend(taken);
        }
        for block in doomed {
            self.destroy_block(env, block);
        }
    }

    /// Before `needed` bytes of new device memory are created: raises the
    /// high-water mark and frees kept memory above the retention limit (all
    /// of it when the heap can't hold `needed` more bytes), so what is
    /// committed next does not sit beside memory nobody reuses.
    pub(super) fn make_room(&self, env: Env<'_>, needed: u64) {
        if !self.adaptive() {
            return;
        }
        let usage = self.usage();
        let live = usage.allocation_bytes;
        let retained = self.retained_bytes();
        let point = self.point(env);
        let heap_short = env.memory.budgets.policy_free_bytes(self.heap) < needed;
        if point.keep_all {
            // The time end keeps what it has until the heap runs short.
            if heap_short {
                self.trim_retained(env, 0);
            }
            return;
        }
        let mut limit = self.keep_limit(
            live,
            live.saturating_add(needed),
            usage.block_bytes,
            retained,
            needed,
        );
        if heap_short || (!point.retain && !point.below_peak) {
            limit = 0;
        } else if !point.retain {
            let high = self.committed_high.load(Ordering::Relaxed);
            let in_use = usage.block_bytes.saturating_sub(retained);
            limit = crate::policy::retain_below_peak(high, in_use, needed);
        }
        // The allocator's committed peak: what is kept here, then in the
        // other memory types, makes way for the new memory before it passes
        // that peak.
        let budgets = env.memory.budgets;
        let kept = retained.min(limit);
        let over = budgets
            .committed()
            .saturating_add(needed)
            .saturating_sub(retained - kept)
            .saturating_sub(budgets.committed_high());
        let limit = kept.saturating_sub(over);
        let over = over.saturating_sub(kept);
        self.trim_retained(env, limit);
        // Hysteresis: the other types' memory is freed in whole blocks and
        // made again when they next need it; a small overshoot of the peak
        // costs less than that.
        let tolerance = budgets.committed_high() / crate::policy::PEAK_TOLERANCE_DIVISOR;
        if over > tolerance {
            env.others.release_others(self.memory_type, over);
        }
    }

    /// Frees kept memory down to the retention limit of the live set alone
    /// ([`crate::policy::retain_limit`] with no high-water mark), at most
    /// `bytes` of it; returns the bytes freed. For another memory type that
    /// makes new memory. In a pinned heap the largest kept block stays and
    /// empty blocks go smallest first ([`crate::policy::pinned_heap`]).
    pub fn release_retained(&self, env: Env<'_>, bytes: u64) -> u64 {
        if !self.adaptive() || bytes == 0 {
            return 0;
        }
        // Down to what the live set alone keeps (its high-water mark left
        // out: the peak that matters is the allocator's).
        let floor = if self.point(env).retain {
            crate::policy::retain_limit(self.live_bytes(), 0)
        } else {
            0
        };
        let retained = self.retained_bytes();
        if self.pinned {
            return self.release_pinned(env, bytes, floor, retained);
        }
        let excess = retained.saturating_sub(floor).min(bytes);
        if excess == 0 {
            return 0;
        }
        self.trim_retained(env, retained - excess);
        retained.saturating_sub(self.retained_bytes())
    }

    /// [`Self::release_retained`] in a pinned heap
    /// ([`crate::policy::pinned_heap`]): the empty blocks of the shards not
    /// busy right now go smallest first, down to `floor` bytes of the
    /// `retained` and never the largest of them (one of equal ones), at most
    /// `bytes`; returns the bytes freed.
    fn release_pinned(&self, env: Env<'_>, bytes: u64, floor: u64, retained: u64) -> u64 {
        // The shards not busy, all locked at once (`try_lock` never waits,
        // so no order among them is needed): the choice is over all their
        // empty blocks.
        let mut lists: Vec<_> = (0..self.open_shards())
            .filter_map(|shard| self.try_shard(shard))
            .collect();
        let mut empty: Vec<(u64, usize, u32)> = lists
            .iter()
            .enumerate()
            .flat_map(|(k, list)| list.empty_blocks().map(move |(i, size)| (size, k, i)))
            .collect();
        empty.sort_unstable();
        let Some(&(largest, _, _)) = empty.last() else {
            return 0;
        };
        empty.pop();
        let excess = retained.saturating_sub(floor.max(largest)).min(bytes);
        let mut doomed = Vec::new();
        let mut freed = 0u64;
        for (size, k, i) in empty {
            if freed >= excess {
                break;
            }
            if let Some(block) = lists[k].take_empty_block(i) {
                freed += size;
                doomed.push(block);
            }
        }
        drop(lists);
        for block in doomed {
            self.destroy_block(env, block);
        }
        freed
    }

    /// Once a frame: the high-water marks decay, the live one toward the
    /// live set ([`crate::policy::decay_high_water`]), the committed one
    /// toward the bytes in use ([`crate::policy::decay_committed_high`]), and
    /// kept memory above the retention limit is freed.
    pub fn end_frame(&self, env: Env<'_>) {
        if !self.adaptive() {
            return;
        }
        let usage = self.usage();
        let live = usage.allocation_bytes;
        let old = self.high_water.load(Ordering::Relaxed);
        let high_water = crate::policy::decay_high_water(old, live);
        self.high_water.store(high_water, Ordering::Relaxed);
        let limit = crate::policy::retain_limit(live, high_water);
        let committed = usage.block_bytes;
        let retained = self.retained_bytes();
        let in_use = committed.saturating_sub(retained);
        let old = self.committed_high.load(Ordering::Relaxed);
        let high = crate::policy::decay_committed_high(old, in_use, self.pinned);
        self.committed_high.store(high, Ordering::Relaxed);
        let below_peak = crate::policy::retain_below_peak(high, in_use, 0);
        let point = self.point(env);
        if point.keep_all {
            return;
        }
        if !point.retain {
            let limit = if point.below_peak { below_peak } else { 0 };
            if retained > limit.saturating_mul(2) || !point.below_peak {
                self.trim_retained(env, limit);
            }
            return;
        }
        // Hysteresis: what is kept passes twice the larger of the two
        // limits (memory is freed in whole blocks: a mark just below what is
        // kept would free a block that the next frame makes again).
        if retained > limit.max(below_peak).saturating_mul(2) {
            self.trim_retained(env, limit.max(below_peak));
        }
    }

    /// The allocator has been idle since this type's live bytes fell below
    /// half their high-water mark ([`crate::policy::fell_from_peak`]): the
    /// marks drop to the live bytes and the bytes in use, and kept memory
    /// is freed down to what the live set alone keeps
    /// ([`crate::policy::retain_limit`] with no mark; at most one smallest
    /// block when nothing is live).
    pub fn release_idle(&self, env: Env<'_>) {
        if !self.adaptive() {
            return;
        }
        let usage = self.usage();
        let live = usage.allocation_bytes;
        self.high_water.store(live, Ordering::Relaxed);
        let retained = self.retained_bytes();
        let in_use = usage.block_bytes.saturating_sub(retained);
        self.committed_high.store(in_use, Ordering::Relaxed);
        self.trim_retained(env, crate::policy::retain_limit(live, 0));
    }
}
