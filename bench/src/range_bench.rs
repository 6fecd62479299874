//! Range allocators alone, no Vulkan: vkalloc's TLSF and linear allocators
//! against VMA's virtual blocks (TLSF and linear) on the same operation
//! sequences.
//!
//! Operations are timed in batches of the same kind (a few hundred
//! allocates, then a few hundred frees) so the timer's cost does not swamp
//! operations of a few tens of nanoseconds; each figure is a batch's time
//! divided by its operations.

use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vkalloc::range::{
    BuddyAllocator, LinearAllocator, LinearMode, RangeAllocator, RangeId, RangeKind, RangeRequest,
    TlsfAllocator,
};

/// A range allocator under test.
pub trait RangeContender {
    /// A live allocation.
    type Handle;
    /// Allocates `size` bytes aligned to `alignment`.
    fn alloc(&mut self, size: u64, alignment: u64) -> Option<Self::Handle>;
    /// Frees one allocation.
    fn free(&mut self, h: Self::Handle);
    /// Frees everything.
    fn clear(&mut self);
}

/// vkalloc's TLSF or linear allocator (granularity 1: no kinds involved).
pub struct OursRange<A: RangeAllocator>(pub A);

impl<A: RangeAllocator> RangeContender for OursRange<A> {
    type Handle = RangeId;
    #[inline]
    fn alloc(&mut self, size: u64, alignment: u64) -> Option<RangeId> {
        self.0
            .allocate(&RangeRequest {
                size,
                alignment,
                kind: RangeKind::Linear,
            })
            .map(|r| r.id)
    }
    #[inline]
    fn free(&mut self, h: RangeId) {
        let _ = self.0.free(h);
    }
    fn clear(&mut self) {
        self.0.clear();
    }
}

/// A VMA virtual block.
pub struct VmaVirtual(vk_mem::VirtualBlock);

impl VmaVirtual {
    /// A virtual block of `capacity` bytes, with the linear algorithm when `linear`.
    pub fn new(capacity: u64, linear: bool) -> Self {
        let flags = if linear {
            vk_mem::VirtualBlockCreateFlags::VMA_VIRTUAL_BLOCK_CREATE_LINEAR_ALGORITHM_BIT
        } else {
            vk_mem::VirtualBlockCreateFlags::empty()
        };
        let block = vk_mem::VirtualBlock::new(vk_mem::VirtualBlockCreateInfo {
            size: capacity,
            flags,
            allocation_callbacks: None,
        })
        .expect("vmaCreateVirtualBlock");
        Self(block)
    }
}

impl RangeContender for VmaVirtual {
    type Handle = vk_mem::VirtualAllocation;
    #[inline]
    fn alloc(&mut self, size: u64, alignment: u64) -> Option<Self::Handle> {
        // SAFETY: the block is live; the allocation is freed with it.
        unsafe {
            self.0.allocate(vk_mem::VirtualAllocationCreateInfo {
                size,
                alignment,
                user_data: 0,
                flags: vk_mem::VirtualAllocationCreateFlags::empty(),
            })
        }
        .ok()
        .map(|(a, _offset)| a)
    }
    #[inline]
    fn free(&mut self, mut h: Self::Handle) {
        // SAFETY: `h` is a live allocation of this block, freed once.
        unsafe { self.0.free(&mut h) };
    }
    fn clear(&mut self) {
        // SAFETY: the caller drops every handle of the block with this call.
        unsafe { self.0.clear() };
    }
}

impl Drop for VmaVirtual {
    fn drop(&mut self) {
        // VMA asserts (in debug builds) that a destroyed block is empty.
        self.clear();
    }
}

/// One step of a sequence.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// Allocate into a slot.
    Alloc {
        slot: u32,
        size: u64,
        alignment: u64,
    },
    /// Free a slot.
    Free { slot: u32 },
    /// Free everything (and forget every slot).
    Clear,
    /// The end of a timed batch.
    Mark,
}

/// A named operation sequence.
pub struct Sequence {
    /// Its name.
    pub name: &'static str,
    /// Bytes the allocator manages.
    pub capacity: u64,
    steps: Vec<Step>,
    slots: usize,
}

fn log_size(rng: &mut ChaCha8Rng, lo: u64, hi: u64) -> u64 {
    let s = rng.gen_range((lo as f64).ln()..=(hi as f64).ln()).exp() as u64;
    s.clamp(lo, hi)
}

/// Random allocate/free at a steady ~8,000 live allocations of
/// 256 B–256 KiB with alignments 16–4096, in a 1 GiB block.
pub fn tlsf_random(seed: u64, rounds: usize) -> Sequence {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut steps = Vec::new();
    let mut live: Vec<u32> = Vec::new();
    let mut free_slots: Vec<u32> = Vec::new();
    let mut slots = 0u32;
    const LIVE: usize = 8192;
    const BATCH: usize = 512;
    let mut new_slot = |free_slots: &mut Vec<u32>| {
        free_slots.pop().unwrap_or_else(|| {
            slots += 1;
            slots - 1
        })
    };
    let alloc = |rng: &mut ChaCha8Rng, steps: &mut Vec<Step>, slot| {
        let size = log_size(rng, 256, 256 * 1024);
        let alignment = 1u64 << rng.gen_range(4..=12);
        steps.push(Step::Alloc {
            slot,
            size,
            alignment,
        });
    };
    for _ in 0..LIVE {
        let s = new_slot(&mut free_slots);
        alloc(&mut rng, &mut steps, s);
        live.push(s);
    }
    steps.push(Step::Mark);
    for _ in 0..rounds {
        for _ in 0..BATCH {
            let i = rng.gen_range(0..live.len());
            let s = live.swap_remove(i);
            steps.push(Step::Free { slot: s });
            free_slots.push(s);
        }
        steps.push(Step::Mark);
        for _ in 0..BATCH {
            let s = new_slot(&mut free_slots);
            alloc(&mut rng, &mut steps, s);
            live.push(s);
        }
        steps.push(Step::Mark);
    }
    Sequence {
        name: "tlsf-random",
        capacity: 1 << 30,
        steps,
        slots: slots as usize,
    }
}

/// Per-frame allocations freed all at once: 2,000 allocations of
/// 64 B–64 KiB (alignment 256) then a clear, in a 256 MiB block.
pub fn linear_frame(seed: u64, frames: usize) -> Sequence {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut steps = Vec::new();
    for _ in 0..frames {
        for slot in 0..2000 {
            steps.push(Step::Alloc {
                slot,
                size: log_size(&mut rng, 64, 64 * 1024),
                alignment: 256,
            });
        }
        steps.push(Step::Mark);
        steps.push(Step::Clear);
        steps.push(Step::Mark);
    }
    Sequence {
        name: "linear-free-at-once",
        capacity: 256 << 20,
        steps,
        slots: 2000,
    }
}

/// A ring: a window of 1,000 live allocations of 64 B–64 KiB; each new one
/// frees the oldest, in a 64 MiB block (so it wraps around).
pub fn linear_ring(seed: u64, rounds: usize) -> Sequence {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut steps = Vec::new();
    const WINDOW: u32 = 1000;
    const BATCH: u32 = 250;
    let mut next = 0u32;
    let mut oldest = 0u32;
    for _ in 0..WINDOW {
        steps.push(Step::Alloc {
            slot: next % (WINDOW + BATCH),
            size: log_size(&mut rng, 64, 64 * 1024),
            alignment: 256,
        });
        next += 1;
    }
    steps.push(Step::Mark);
    for _ in 0..rounds {
        for _ in 0..BATCH {
            steps.push(Step::Free {
                slot: oldest % (WINDOW + BATCH),
            });
            oldest += 1;
        }
        steps.push(Step::Mark);
        for _ in 0..BATCH {
            steps.push(Step::Alloc {
                slot: next % (WINDOW + BATCH),
                size: log_size(&mut rng, 64, 64 * 1024),
                alignment: 256,
            });
            next += 1;
        }
        steps.push(Step::Mark);
    }
    Sequence {
        name: "linear-ring",
        capacity: 64 << 20,
        steps,
        slots: (WINDOW + BATCH) as usize,
    }
}

/// What one run of a sequence measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct RangeRun {
    /// Mean ns per allocate (batches of allocates only; setup batch excluded).
    pub alloc_ns: f64,
    /// Mean ns per free (or per freed allocation for a clear).
    pub free_ns: f64,
    /// Allocations that failed.
    pub failures: u64,
}

/// Runs `seq` through `c`.
pub fn run<C: RangeContender>(c: &mut C, seq: &Sequence) -> RangeRun {
    let mut handles: Vec<Option<C::Handle>> = Vec::with_capacity(seq.slots);
    handles.resize_with(seq.slots, || None);
    let (mut alloc_ns, mut allocs, mut free_ns, mut frees) = (0u128, 0u64, 0u128, 0u64);
    let mut failures = 0;
    let (mut batch_allocs, mut batch_frees) = (0u64, 0u64);
    let mut live = 0u64;
    let mut cleared = false;
    let mut t = Instant::now();
    for step in &seq.steps {
        match *step {
            Step::Alloc {
                slot,
                size,
                alignment,
            } => {
                match c.alloc(size, alignment) {
                    Some(h) => {
                        handles[slot as usize] = Some(h);
                        live += 1;
                    }
                    None => failures += 1,
                }
                batch_allocs += 1;
            }
            Step::Free { slot } => {
                if let Some(h) = handles[slot as usize].take() {
                    c.free(h);
                    live -= 1;
                }
                batch_frees += 1;
            }
            Step::Clear => {
                c.clear();
                batch_frees += live;
                live = 0;
                cleared = true;
            }
            Step::Mark => {
                let ns = t.elapsed().as_nanos();
                if batch_frees == 0 {
                    alloc_ns += ns;
                    allocs += batch_allocs;
                } else if batch_allocs == 0 {
                    free_ns += ns;
                    frees += batch_frees;
                }
                if cleared {
                    // The clear freed them all; forget the handles (untimed).
                    handles.iter_mut().for_each(|h| *h = None);
                    cleared = false;
                }
                batch_allocs = 0;
                batch_frees = 0;
                t = Instant::now();
            }
        }
    }
    for h in handles.iter_mut() {
        if let Some(h) = h.take() {
            c.free(h);
        }
    }
    RangeRun {
        alloc_ns: alloc_ns as f64 / allocs.max(1) as f64,
        free_ns: free_ns as f64 / frees.max(1) as f64,
        failures,
    }
}

/// The standard sequences at a size that runs in well under a second each.
pub fn standard_sequences(seed: u64, full: bool) -> Vec<Sequence> {
    let k = if full { 10 } else { 1 };
    vec![
        tlsf_random(seed, 200 * k),
        linear_frame(seed, 50 * k),
        linear_ring(seed, 400 * k),
    ]
}

/// The contenders for a sequence: `(name, run)`.
pub fn run_all(seq: &Sequence) -> Vec<(&'static str, RangeRun)> {
    let mut out = Vec::new();
    let cap = seq.capacity;
    match seq.name {
        "tlsf-random" => {
            out.push((
                "ours-tlsf",
                run(&mut OursRange(TlsfAllocator::new(cap, 1)), seq),
            ));
            out.push((
                "ours-buddy",
                run(&mut OursRange(BuddyAllocator::new(cap, 1)), seq),
            ));
            out.push((
                "vma-virtual-tlsf",
                run(&mut VmaVirtual::new(cap, false), seq),
            ));
        }
        "linear-free-at-once" => {
            out.push((
                "ours-linear-stack",
                run(
                    &mut OursRange(LinearAllocator::new(cap, LinearMode::Stack, 1)),
                    seq,
                ),
            ));
            out.push((
                "vma-virtual-linear",
                run(&mut VmaVirtual::new(cap, true), seq),
            ));
            out.push((
                "ours-tlsf",
                run(&mut OursRange(TlsfAllocator::new(cap, 1)), seq),
            ));
            out.push((
                "vma-virtual-tlsf",
                run(&mut VmaVirtual::new(cap, false), seq),
            ));
        }
        _ => {
            out.push((
                "ours-linear-ring",
                run(
                    &mut OursRange(LinearAllocator::new(cap, LinearMode::Ring, 1)),
                    seq,
                ),
            ));
            out.push((
                "vma-virtual-linear",
                run(&mut VmaVirtual::new(cap, true), seq),
            ));
            out.push((
                "ours-tlsf",
                run(&mut OursRange(TlsfAllocator::new(cap, 1)), seq),
            ));
            out.push((
                "vma-virtual-tlsf",
                run(&mut VmaVirtual::new(cap, false), seq),
            ));
        }
    }
    out
}

/// Bytes live at the sequence's peak (sizes as asked).
pub fn peak_live(seq: &Sequence) -> u64 {
    let mut sizes = vec![0u64; seq.slots];
    let (mut live, mut peak) = (0u64, 0u64);
    for step in &seq.steps {
        match *step {
            Step::Alloc { slot, size, .. } => {
                sizes[slot as usize] = size;
                live += size;
                peak = peak.max(live);
            }
            Step::Free { slot } => live -= std::mem::take(&mut sizes[slot as usize]),
            Step::Clear => {
                sizes.iter_mut().for_each(|s| *s = 0);
                live = 0;
            }
            Step::Mark => {}
        }
    }
    peak
}

/// The smallest capacity (to 1/64 of the peak live bytes) at which `make`'s
/// allocator runs `seq` without a failed allocation: external and internal
/// fragmentation in one number, whatever the algorithm's placement rule.
pub fn capacity_needed<A: RangeAllocator>(make: impl Fn(u64) -> A, seq: &Sequence) -> u64 {
    let live = peak_live(seq).max(1);
    let step = (live / 64).max(1);
    let fits = |capacity: u64| run(&mut OursRange(make(capacity)), seq).failures == 0;
    let (mut lo, mut hi) = (live, live);
    while !fits(hi) {
        lo = hi;
        hi = hi.saturating_mul(2);
        if hi == u64::MAX {
            return hi;
        }
    }
    while hi - lo > step {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}
