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
    budget: AtomicU64,
    usage: AtomicU64,
    /// Our block bytes when `usage` was read, so later changes can be added.
    ours_then: AtomicU64,
}

/// One heap's counters.
#[derive(Debug, Default)]
pub(crate) struct HeapState {
    /// Device memory committed by this allocator on the heap, including
    /// reservations for allocations in flight.
    pub block_bytes: AtomicU64,
    fetched: Fetched,
}

/// Every heap's counters.
#[derive(Debug)]
pub(crate) struct Budgets {
    heaps: Vec<HeapState>,
    heap_sizes: Vec<u64>,
    from_driver: AtomicBool,
}

impl Budgets {
    pub fn new(props: &MemoryProperties) -> Self {
        Self {
            heaps: props.heaps.iter().map(|_| HeapState::default()).collect(),
            heap_sizes: props.heaps.iter().map(|h| h.size).collect(),
            from_driver: AtomicBool::new(false),
        }
    }

    /// Reads the driver's budgets (if any) and remembers our usage then.
    pub fn refresh(&self, device: &dyn MemoryDevice) {
        let mut out = vec![HeapBudget::default(); self.heaps.len()];
        let from_driver = device.limits().memory_budget && device.heap_budgets(&mut out);
        self.from_driver.store(from_driver, Ordering::Relaxed);
        for (i, heap) in self.heaps.iter().enumerate() {
            let ours = heap.block_bytes.load(Ordering::Relaxed);
            let f = &heap.fetched;
            // Without the extension only our own usage is known.
            let (budget, usage, ours_then) = if from_driver {
                (out[i].budget, out[i].usage, ours)
            } else {
                (self.heap_sizes[i] / 100 * ESTIMATED_BUDGET_PERCENT, 0, 0)
            };
            f.budget.store(budget, Ordering::Relaxed);
            f.usage.store(usage, Ordering::Relaxed);
            f.ours_then.store(ours_then, Ordering::Relaxed);
        }
    }

    /// The heap's budget and estimated usage now.
    pub fn view(&self, heap: u32) -> HeapBudgetView {
        let state = &self.heaps[heap as usize];
        let ours = state.block_bytes.load(Ordering::Relaxed);
        let f = &state.fetched;
        HeapBudgetView {
            block_bytes: ours,
            budget: f.budget.load(Ordering::Relaxed),
            usage: (f.usage.load(Ordering::Relaxed) + ours)
                .saturating_sub(f.ours_then.load(Ordering::Relaxed)),
            from_driver: self.from_driver.load(Ordering::Relaxed),
        }
    }

    /// Bytes the heap can still take within budget.
    pub fn room(&self, heap: u32) -> u64 {
        let v = self.view(heap);
        v.budget.saturating_sub(v.usage)
    }

    /// Counts `bytes` of new device memory on `heap`. With `within_budget`,
    /// refuses (returning the view) when the heap would pass its budget.
    ///
    /// The check and the count are two steps: threads racing to create memory
    /// on one heap can each pass the check and go over together, by at most
    /// one block each. Pools' hard budgets are reserved in one atomic step
    /// (see `memory.rs`).
    pub fn reserve(
        &self,
        heap: u32,
        bytes: u64,
        within_budget: bool,
    ) -> Result<(), HeapBudgetView> {
        if within_budget {
            let view = self.view(heap);
            if view.usage.saturating_add(bytes) > view.budget {
                return Err(view);
            }
        }
        self.heaps[heap as usize]
            .block_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Gives back what [`Self::reserve`] counted.
    pub fn release(&self, heap: u32, bytes: u64) {
        self.heaps[heap as usize]
            .block_bytes
            .fetch_sub(bytes, Ordering::Relaxed);
    }

    pub fn heap_count(&self) -> usize {
        self.heaps.len()
    }
}
