//! Per-heap accounting: the bytes this allocator has committed, and the
//! heap's budget, from `VK_EXT_memory_budget` where the device has it and an
//! estimate otherwise.
//!
//! Budgets matter only when device memory is created (a new block or a
//! dedicated allocation); suballocating inside a block never changes them.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::device::{HeapBudget, MemoryDevice, MemoryProperties};

/// Share of a heap's size taken as its budget when the device can't say
/// (VMA uses the same 80%).
const ESTIMATED_BUDGET_PERCENT: u64 = 80;

/// [`Budgets::refresh_at_frame`] reads the driver's budgets at most every
/// this many frames while every heap's estimated usage is at most 3/4 of
/// its budget.
///
/// The read (`vkGetPhysicalDeviceMemoryProperties2` with
/// `VK_EXT_memory_budget`) cost 4-15 µs on the H200's driver (580.159.04),
/// once a frame: the allocators that read it every frame (vkalloc then, and
/// VMA, which reads it in `vmaSetCurrentFrameIndex`) spent 5-21 ms of wall
/// time outside their allocations and frees on the standard corpus's traces
/// of 1,000-2,100 frames, gpu-allocator (which reads no budget) none
/// (BENCHMARKS.md, *Where the wall time between driver calls went*).
/// Between reads the usage is estimated from this allocator's own changes,
/// which are exact; what goes stale is the other processes' usage, for at
/// most 16 frames (a quarter of a second at 60 frames/s) while the heaps
/// are not near their budgets.
pub(crate) const BUDGET_REFRESH_FRAMES: u64 = 16;

/// A heap's budget as the allocator sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeapBudgetView {
    /// Bytes this allocator has in device memory objects on the heap.
    pub block_bytes: u64,
    /// Bytes the process may use on the heap.
    pub budget: u64,
    /// Bytes the whole process uses on the heap, estimated since the last refresh.
    pub usage: u64,
    /// Whether `budget` and `usage` come from `VK_EXT_memory_budget`.
    pub from_driver: bool,
}

/// The last budget read, as atomics so that reading it takes no lock (it is
/// read on every allocation to rank memory types).
#[derive(Debug, Default)]
struct Fetched {
    /// A sequence lock over the three values: odd while [`Budgets::refresh`]
    /// writes them; a reader retries until it read one even, unchanged
    /// sequence, so it never combines one read's usage with another's
    /// `ours_then`.
    seq: AtomicU64,
    budget: AtomicU64,
    usage: AtomicU64,
    /// Our bytes the driver held when `usage` was read (`created`, read
    /// before the driver's figures), so later changes can be added.
    ours_then: AtomicU64,
}

impl Fetched {
    /// `(budget, usage, ours_then)` of one refresh.
    #[inline]
    fn read(&self) -> (u64, u64, u64) {
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let v = (
                self.budget.load(Ordering::Relaxed),
                self.usage.load(Ordering::Relaxed),
                self.ours_then.load(Ordering::Relaxed),
            );
            std::sync::atomic::fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return v;
            }
        }
    }
}

/// One heap's counters, alone on a cache line: every allocation reads them
/// (the memory type memo's room check), and 32 bytes at any offset of a
/// `Vec` would straddle two lines for some heaps.
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct HeapState {
    /// Device memory committed by this allocator on the heap, including
    /// reservations for allocations in flight.
    pub block_bytes: AtomicU64,
    /// Device memory the driver holds for this allocator on the heap: raised
    /// after `vkAllocateMemory` returns, lowered before `vkFreeMemory`, so at
    /// any instant it is at most what the driver counts (what is in flight
    /// is in `block_bytes` alone).
    pub created: AtomicU64,
    /// Bytes of every [`Budgets::note_freeing`] so far (only grows): a
    /// refresh subtracts what was freed while it read the driver's usage,
    /// which may or may not count it.
    freed: AtomicU64,
    fetched: Fetched,
    /// The largest allocation the memory type memo places in ReBAR memory
    /// on this heap (its size over [`crate::select::REBAR_HEAP_FRACTION`]):
    /// constant, kept on the line the memo reads the heap's room from.
    pub rebar_limit: u64,
}

/// Every heap's counters. `repr(C)`: what an allocation reads (the heaps'
/// vector and `from_driver`) first.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Budgets {
    heaps: Vec<HeapState>,
    from_driver: AtomicBool,
    /// The recent high-water mark of [`Self::committed`] (the allocation
    /// policy's, see [`crate::policy::retain_below_peak`]).
    committed_high: AtomicU64,
    /// The frame of the last [`Self::refresh_at_frame`] read.
    refreshed_at: AtomicU64,
    heap_sizes: Vec<u64>,
    /// One [`Self::refresh`] at a time (the sequence locks have one writer).
    refreshing: parking_lot::Mutex<()>,
}

impl Budgets {
    pub fn new(props: &MemoryProperties) -> Self {
        Self {
            heaps: props
                .heaps
                .iter()
                .map(|h| HeapState {
                    rebar_limit: h.size / crate::select::REBAR_HEAP_FRACTION,
                    ..HeapState::default()
                })
                .collect(),
            heap_sizes: props.heaps.iter().map(|h| h.size).collect(),
            from_driver: AtomicBool::new(false),
            committed_high: AtomicU64::new(0),
            refreshed_at: AtomicU64::new(0),
            refreshing: parking_lot::Mutex::new(()),
        }
    }

    /// `bytes` of device memory on `heap` that the driver now holds (after
    /// `vkAllocateMemory` returned).
    pub fn note_created(&self, heap: u32, bytes: u64) {
        self.heaps[heap as usize]
            .created
            .fetch_add(bytes, Ordering::AcqRel);
    }

    /// `bytes` of device memory on `heap` about to be freed (before
    /// `vkFreeMemory`).
    pub fn note_freeing(&self, heap: u32, bytes: u64) {
        let state = &self.heaps[heap as usize];
        // `created` first, then `freed`: a refresh that read `created` with
        // these bytes in it reads `freed` after this add (see `refresh`).
        state.created.fetch_sub(bytes, Ordering::SeqCst);
        state.freed.fetch_add(bytes, Ordering::SeqCst);
    }

    /// Device memory this allocator has committed on every heap.
    pub fn committed(&self) -> u64 {
        self.heaps
            .iter()
            .map(|h| h.block_bytes.load(Ordering::Relaxed))
            .fold(0, u64::saturating_add)
    }

    /// The recent high-water mark of [`Self::committed`].
    pub fn committed_high(&self) -> u64 {
        self.committed_high.load(Ordering::Relaxed)
    }

    /// Raises the committed high-water mark to what is committed now (after
    /// memory was created).
    pub fn note_committed(&self) {
        self.committed_high
            .fetch_max(self.committed(), Ordering::Relaxed);
    }

    /// Once a frame: the committed high-water mark moves
    /// 1/[`crate::policy::COMMITTED_DECAY`] of the way down to what is
    /// committed now.
    pub fn decay_committed_high(&self) {
        let committed = self.committed();
        let high = self.committed_high();
        self.committed_high.store(
            crate::policy::decay_committed_high(high, committed, false),
            Ordering::Relaxed,
        );
    }

    /// Reads the driver's budgets (if any) and remembers our usage then.
    pub fn refresh(&self, device: &dyn MemoryDevice) {
        let has_extension = device.limits().memory_budget;
        self.refresh_with(|out| has_extension && device.heap_budgets(out));
    }

    /// [`Self::refresh`] with the driver's read given as `read_driver`
    /// (`VkPhysicalDeviceMemoryBudgetPropertiesEXT`'s figures into `out`;
    /// false where the device has none).
    fn refresh_with(&self, read_driver: impl FnOnce(&mut [HeapBudget]) -> bool) {
        let _one = self.refreshing.lock();
        // What the driver holds for us (`ours_then`) must be at most what
        // its usage counts of ours, or the estimate (usage + ours now -
        // ours then) comes out low. `created` is read before the driver's
        // figures: memory made meanwhile is then counted twice (the
        // driver's and ours since), never missed; memory in flight is in
        // `block_bytes`, which the estimate adds. Memory freed meanwhile
        // may be in `created` and gone from the driver's usage: every byte
        // whose `note_freeing` came after the `created` read is in `freed`
        // between the two reads around the driver's (a free lowers
        // `created` before it adds to `freed`, and both before
        // `vkFreeMemory`), so those bytes are taken off.
        let before: Vec<(u64, u64)> = self
            .heaps
            .iter()
            .map(|h| {
                let freed = h.freed.load(Ordering::SeqCst);
                (freed, h.created.load(Ordering::SeqCst))
            })
            .collect();
        let mut out = vec![HeapBudget::default(); self.heaps.len()];
        let from_driver = read_driver(&mut out);
        let ours: Vec<u64> = self
            .heaps
            .iter()
            .zip(&before)
            .map(|(h, &(freed_before, created))| {
                let freed_meanwhile = h.freed.load(Ordering::SeqCst).wrapping_sub(freed_before);
                created.saturating_sub(freed_meanwhile)
            })
            .collect();
        self.from_driver.store(from_driver, Ordering::Relaxed);
        for (i, heap) in self.heaps.iter().enumerate() {
            let f = &heap.fetched;
            // Without the extension only our own usage is known.
            let (budget, usage, ours_then) = if from_driver {
                (out[i].budget, out[i].usage, ours[i])
            } else {
                (self.heap_sizes[i] / 100 * ESTIMATED_BUDGET_PERCENT, 0, 0)
            };
            f.seq.fetch_add(1, Ordering::AcqRel);
            f.budget.store(budget, Ordering::Relaxed);
            f.usage.store(usage, Ordering::Relaxed);
            f.ours_then.store(ours_then, Ordering::Relaxed);
            f.seq.fetch_add(1, Ordering::Release);
        }
    }

    /// Once a frame (`frame`, counted from 0): reads the driver's budgets
    /// ([`Self::refresh`]) when [`BUDGET_REFRESH_FRAMES`] frames have passed
    /// since the last read here, or when a heap's estimated usage is above
    /// 3/4 of its budget; otherwise the estimate (the last read plus this
    /// allocator's own changes since) stands. Returns whether it read.
    pub fn refresh_at_frame(&self, device: &dyn MemoryDevice, frame: u64) -> bool {
        let last = self.refreshed_at.load(Ordering::Relaxed);
        let near = (0..self.heaps.len() as u32).any(|heap| {
            let v = self.view(heap);
            v.usage > v.budget - v.budget / 4
        });
        if frame.saturating_sub(last) < BUDGET_REFRESH_FRAMES && !near {
            return false;
        }
        self.refresh(device);
        self.refreshed_at.store(frame, Ordering::Relaxed);
        true
    }

    /// The heap's budget and estimated usage now.
    #[inline]
    pub fn view(&self, heap: u32) -> HeapBudgetView {
        let state = &self.heaps[heap as usize];
        let ours = state.block_bytes.load(Ordering::Relaxed);
        let (budget, usage_then, ours_then) = state.fetched.read();
        HeapBudgetView {
            block_bytes: ours,
            budget,
            usage: usage_then.saturating_add(ours).saturating_sub(ours_then),
            from_driver: self.from_driver.load(Ordering::Relaxed),
        }
    }

    /// The pressure on `heap`: the bytes the process uses of it (estimated
    /// since the last refresh) and its limit, the driver's budget where
    /// `VK_EXT_memory_budget` gives one, else the heap's size
    /// ([`crate::policy::point`]).
    pub fn pressure(&self, heap: u32) -> (u64, u64) {
        let view = self.view(heap);
        let limit = if view.from_driver {
            view.budget
        } else {
            self.heap_sizes[heap as usize]
        };
        (view.usage, limit)
    }

    /// Bytes of the heap the process does not use (its size less the usage
    /// estimated since the last refresh), whatever the budget.
    pub fn free_bytes(&self, heap: u32) -> u64 {
        self.heap_sizes[heap as usize].saturating_sub(self.view(heap).usage)
    }

    /// Bytes the process may still take of `heap` before its usage passes
    /// the limit of [`Self::pressure`] (the driver's budget, else the
    /// heap's size), and never more than [`Self::free_bytes`]: what the
    /// policy sizes new blocks from and frees kept memory for.
    pub fn policy_free_bytes(&self, heap: u32) -> u64 {
        let (usage, limit) = self.pressure(heap);
        limit.saturating_sub(usage).min(self.free_bytes(heap))
    }

    /// [`HeapState::rebar_limit`] of `heap`.
    #[inline]
    pub fn rebar_limit(&self, heap: u32) -> u64 {
        self.heaps[heap as usize].rebar_limit
    }

    /// Bytes the heap can still take within budget (asked on every
    /// allocation by the memory type memo: inlined across crates).
    #[inline]
    pub fn room(&self, heap: u32) -> u64 {
        let v = self.view(heap);
        v.budget.saturating_sub(v.usage)
    }

    /// Counts `bytes` of new device memory on `heap`. With `within_budget`,
    /// refuses (returning the view) when the heap would pass its budget.
    ///
    /// The check and the count are one compare-and-swap on the heap's
    /// counter: threads racing to create memory on one heap can't pass the
    /// check together and go over the budget between them.
    pub fn reserve(
        &self,
        heap: u32,
        bytes: u64,
        within_budget: bool,
    ) -> Result<(), HeapBudgetView> {
        let state = &self.heaps[heap as usize];
        if !within_budget {
            state.block_bytes.fetch_add(bytes, Ordering::AcqRel);
            return Ok(());
        }
        let (budget, usage_then, ours_then) = state.fetched.read();
        let usage = |ours: u64| usage_then.saturating_add(ours).saturating_sub(ours_then);
        state
            .block_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |ours| {
                let fits = usage(ours).checked_add(bytes).is_some_and(|u| u <= budget);
                fits.then(|| ours.saturating_add(bytes))
            })
            .map(|_| ())
            .map_err(|ours| HeapBudgetView {
                block_bytes: ours,
                budget,
                usage: usage(ours),
                from_driver: self.from_driver.load(Ordering::Relaxed),
            })
    }

    /// Gives back what [`Self::reserve`] counted.
    pub fn release(&self, heap: u32, bytes: u64) {
        self.heaps[heap as usize]
            .block_bytes
            .fetch_sub(bytes, Ordering::AcqRel);
    }

    pub fn heap_count(&self) -> usize {
        self.heaps.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_peak_spans_every_heap_and_decays() {
        let props = crate::sim::tables::nvidia_h200().memory_properties;
        let budgets = Budgets::new(&props);
        budgets
            .reserve(0, 300 << 20, false)
            .expect("no budget asked");
        budgets
            .reserve(1, 212 << 20, false)
            .expect("no budget asked");
        assert_eq!(budgets.committed(), 512 << 20);
        assert_eq!(budgets.committed_high(), 0);
        budgets.note_committed();
        assert_eq!(budgets.committed_high(), 512 << 20);
        // Memory freed: the mark stays, then falls 1/256 of the gap a frame.
        budgets.release(0, 256 << 20);
        budgets.note_committed();
        assert_eq!(budgets.committed_high(), 512 << 20);
        budgets.decay_committed_high();
        assert_eq!(budgets.committed_high(), 511 << 20);
        for _ in 0..4000 {
            budgets.decay_committed_high();
        }
        assert_eq!(budgets.committed_high(), budgets.committed());
    }

    /// Threads released together at the edge of the budget: room for two
    /// reservations, eight threads asking; exactly two get one. (The race
    /// this guards against, a check and an add in two steps, has a window of
    /// nanoseconds: on this 2-core machine the old code passed this test too,
    /// so the guarantee rests on the single compare-and-swap, and the test
    /// checks its arithmetic under contention.)
    #[test]
    fn racing_reservations_stop_at_the_budget() {
        let device = crate::sim::SimDevice::new(crate::sim::tables::lavapipe());
        let props = device.memory_properties().clone();
        const THREADS: usize = 8;
        for _ in 0..500 {
            let budgets = Budgets::new(&props);
            budgets.refresh(&device);
            // Without the extension the budget is 80% of the heap.
            let budget = budgets.view(0).budget;
            budgets.reserve(0, budget - 2 * 7, true).expect("fits");
            let gate = std::sync::Barrier::new(THREADS);
            let granted = std::sync::atomic::AtomicU32::new(0);
            std::thread::scope(|s| {
                for _ in 0..THREADS {
                    s.spawn(|| {
                        gate.wait();
                        if budgets.reserve(0, 7, true).is_ok() {
                            granted.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
            });
            let committed = budgets.view(0).block_bytes;
            assert!(
                committed <= budget,
                "{committed} B committed, budget {budget} B"
            );
            assert_eq!(granted.into_inner(), 2);
        }
    }

    /// Memory freed while a refresh reads the driver's usage is gone from
    /// that usage but was in the allocator's count of what the driver held
    /// for it: subtracting the count read before would take the freed bytes
    /// off twice, and the estimate would come out low by them (the heap went
    /// past its budget by a few MiB in `races.rs`' probe).
    #[test]
    fn memory_freed_during_a_refresh_is_not_subtracted_twice() {
        const MIB: u64 = 1 << 20;
        let props = crate::sim::tables::nvidia_h200().memory_properties;
        let budgets = Budgets::new(&props);
        // 10 MiB of ours, created; another process uses 5 MiB.
        budgets.reserve(0, 10 * MIB, false).unwrap();
        budgets.note_created(0, 10 * MIB);
        budgets.refresh_with(|out| {
            // 4 MiB freed after the refresh began: the driver's usage no
            // longer counts it.
            budgets.note_freeing(0, 4 * MIB);
            out[0] = HeapBudget {
                budget: 64 * MIB,
                usage: 5 * MIB + 6 * MIB,
            };
            true
        });
        budgets.release(0, 4 * MIB);
        assert_eq!(budgets.view(0).usage, 11 * MIB, "5 MiB theirs + 6 MiB ours");
        // Memory made during a refresh may be counted twice (on the safe
        // side), never missed.
        budgets.refresh_with(|out| {
            budgets.reserve(0, 2 * MIB, false).unwrap();
            budgets.note_created(0, 2 * MIB);
            out[0] = HeapBudget {
                budget: 64 * MIB,
                usage: 5 * MIB + 8 * MIB,
            };
            true
        });
        assert!(budgets.view(0).usage >= 13 * MIB);
    }
}
