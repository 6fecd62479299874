//! Replaying a trace through one contender, timing every operation.
//!
//! Each allocate and free is timed with [`crate::clock`]; the time the counting
//! `vkAllocateMemory`/`vkFreeMemory` wrappers report for calls made inside
//! it is subtracted, and so is the cost of the timer itself (calibrated once),
//! leaving the allocator's own time.

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::time::Instant;

use crate::clock;
use crate::contenders::{Contender, Placement, Request};
use crate::trace::{Trace, TraceEvent, TraceSummary};
use crate::vkdev;

/// One operation of a prepared trace.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// Allocate `requests[request]` into `slot`.
    Alloc {
        /// Where the handle goes.
        slot: u32,
        /// Index into [`Prepared::requests`].
        request: u32,
    },
    /// Free the handle in `slot`.
    Free {
        /// The slot.
        slot: u32,
    },
    /// A frame boundary.
    Frame(u64),
}

/// A trace turned into dense operations, ready to replay.
#[derive(Debug)]
pub struct Prepared<'t> {
    /// The trace's name.
    pub name: String,
    /// Every allocation request, in order.
    pub requests: Vec<Request<'t>>,
    /// The operations.
    pub ops: Vec<Op>,
    /// Handle slots needed (the most allocations live at once).
    pub slots: usize,
    /// The trace's counts.
    pub summary: TraceSummary,
    /// NUL-terminated copies of the tags that [`Request::tag_c`] points into.
    _tags_c: Vec<CString>,
}

impl<'t> Prepared<'t> {
    /// Prepares `trace`, masking `memory_type_bits` with `type_mask` (the
    /// device's types); with `tags` false every request's tag is empty.
    /// Fails on an inconsistent trace or a request that no type of the
    /// device allows.
    pub fn new(trace: &'t Trace, type_mask: u32, tags: bool) -> Result<Self, String> {
        let summary = trace.validate().map_err(|e| e.to_string())?;
        // One NUL-terminated copy per distinct tag; a CString's bytes stay
        // put when the Vec holding it grows.
        let mut tags_c: Vec<CString> = Vec::new();
        let mut tag_index: HashMap<&str, usize> = HashMap::new();
        let mut requests = Vec::with_capacity(summary.allocs as usize);
        let mut ops = Vec::with_capacity(trace.events.len());
        let mut slot_of: HashMap<u64, u32> = HashMap::new();
        let mut free_slots: Vec<u32> = Vec::new();
        let mut slots = 0u32;
        for e in &trace.events {
            match e {
                TraceEvent::Alloc(a) => {
                    let bits = a.memory_type_bits & type_mask;
                    if bits == 0 {
                        return Err(format!(
                            "allocation {} allows none of the device's memory types",
                            a.id
                        ));
                    }
                    let slot = free_slots.pop().unwrap_or_else(|| {
                        slots += 1;
                        slots - 1
                    });
                    slot_of.insert(a.id, slot);
                    ops.push(Op::Alloc {
                        slot,
                        request: requests.len() as u32,
                    });
                    let (tag, tag_c) = if tags && !a.tag.is_empty() {
                        let i = *tag_index.entry(&a.tag).or_insert_with(|| {
                            let c = CString::new(a.tag.replace('\0', " ")).expect("no NUL");
                            tags_c.push(c);
                            tags_c.len() - 1
                        });
                        (a.tag.as_str(), tags_c[i].as_ptr())
                    } else {
                        ("", std::ptr::null())
                    };
                    requests.push(Request {
                        size: a.size,
                        alignment: a.alignment,
                        memory_type_bits: bits,
                        kind: a.kind,
                        usage: a.usage,
                        dedicated: a.dedicated,
                        tag,
                        tag_c,
                    });
                }
                TraceEvent::Free { id } => {
                    let slot = slot_of.remove(id).expect("validated trace");
                    free_slots.push(slot);
                    ops.push(Op::Free { slot });
                }
                TraceEvent::Frame { index } => ops.push(Op::Frame(*index)),
            }
        }
        Ok(Self {
            name: trace.header.name.clone(),
            requests,
            ops,
            slots: slots as usize,
            summary,
            _tags_c: tags_c,
        })
    }
}

/// The median and 99th percentile of a sample, and its mean.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Percentiles {
    /// The median.
    pub median: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The mean.
    pub mean: f64,
}

impl Percentiles {
    /// Of `values` (sorted in place).
    pub fn of(values: &mut [u64]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        values.sort_unstable();
        let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize] as f64;
        let sum: u128 = values.iter().map(|&v| u128::from(v)).sum();
        Self {
            median: at(0.5),
            p99: at(0.99),
            mean: sum as f64 / values.len() as f64,
        }
    }
}

/// What one replay measured.
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    /// Own time per allocate (ns).
    pub alloc_own: Percentiles,
    /// Own time per free (ns).
    pub free_own: Percentiles,
    /// Total time (own + driver) per operation, mean over allocates and frees (ns).
    pub total_ns_per_op: f64,
    /// Time of the whole replay loop, driver included (ms).
    pub wall_ms: f64,
    /// Driver calls and time during the replay.
    pub driver: vkdev::DriverCounters,
    /// Peak bytes of `VkDeviceMemory` during the replay.
    pub peak_committed_bytes: u64,
    /// Peak bytes of live allocations (as asked).
    pub peak_live_bytes: u64,
    /// The largest free range in the allocator's blocks at the end of the trace.
    pub largest_free_range_end: Option<u64>,
    /// Allocations that failed.
    pub failures: u64,
    /// The first failure's message.
    pub first_failure: Option<String>,
    /// Problems found by the overlap check (empty when not checking).
    pub check_errors: Vec<String>,
    /// With `explain_peak`: the allocator's memory report when the peak of
    /// committed bytes was reached.
    pub at_peak: Option<String>,
    /// With `defrag`, for an allocator that compacts: what compaction at the
    /// end of the trace did.
    pub defrag: Option<DefragRun>,
}

/// Compaction at the end of a trace (`--defrag`), before the final frees.
#[derive(Clone, Debug, Default)]
pub struct DefragRun {
    /// Bytes live (as asked) at the end of the trace.
    pub live_at_end_bytes: u64,
    /// `VkDeviceMemory` bytes before compacting.
    pub committed_before_bytes: u64,
    /// `VkDeviceMemory` bytes after compacting.
    pub committed_after_bytes: u64,
    /// The compaction's counters.
    pub stats: crate::compact::CompactStats,
    /// Wall time of the compaction (ms): wrapping the allocations in
    /// buffers, the passes with their GPU copies, unwrapping.
    pub ms: f64,
    /// Why it stopped early, if it did.
    pub error: Option<String>,
}

impl Percentiles {
    /// The same figures converted from clock ticks to nanoseconds.
    pub fn ticks_to_ns(self) -> Self {
        Self {
            median: clock::ticks_to_ns(self.median),
            p99: clock::ticks_to_ns(self.p99),
            mean: clock::ticks_to_ns(self.mean),
        }
    }
}

/// Measures what an empty timed region costs, in clock ticks: the median gap
/// between two [`clock::now`] calls with the driver counter read around
/// them, as the replay loop does.
pub fn calibrate_timer_overhead() -> u64 {
    clock::init();
    let mut samples: Vec<u64> = (0..20_000)
        .map(|_| {
            let d0 = vkdev::driver_ticks();
            let t0 = clock::now();
            let t1 = clock::now();
            let d1 = vkdev::driver_ticks();
            t1.wrapping_sub(t0).saturating_sub(d1 - d0)
        })
        .collect();
    Percentiles::of(&mut samples).median as u64
}

/// Checks that live allocations don't overlap within one `VkDeviceMemory`,
/// are aligned as asked and are at least as large as asked.
#[derive(Default)]
struct OverlapChecker {
    /// Per memory: start → (end, slot).
    live: HashMap<u64, BTreeMap<u64, (u64, u32)>>,
    errors: Vec<String>,
}

impl OverlapChecker {
    fn insert(&mut self, slot: u32, p: Placement, r: &Request<'_>) {
        if self.errors.len() > 20 {
            return;
        }
        if p.size < r.size {
            self.errors.push(format!(
                "slot {slot}: {} bytes given for {} asked",
                p.size, r.size
            ));
        }
        if !p.offset.is_multiple_of(r.alignment) {
            self.errors.push(format!(
                "slot {slot}: offset {} not aligned to {}",
                p.offset, r.alignment
            ));
        }
        let map = self.live.entry(p.memory).or_default();
        let (start, end) = (p.offset, p.offset + r.size);
        if let Some((&s, &(e, other))) = map.range(..end).next_back() {
            if e > start {
                self.errors.push(format!(
                    "slot {slot} [{start}, {end}) overlaps slot {other} [{s}, {e}) in memory {:#x}",
                    p.memory
                ));
            }
        }
        map.insert(start, (end, slot));
    }

    fn remove(&mut self, p: Placement) {
        if let Some(map) = self.live.get_mut(&p.memory) {
            map.remove(&p.offset);
        }
    }
}

/// Replays `prepared` through `c` once; frees what is still live at the end
/// (untimed, after reading the largest free range). With `check`, verifies
/// every placement (slower, untimed).
pub fn run_once<C: Contender>(
    c: &mut C,
    prepared: &Prepared<'_>,
    timer_overhead_ticks: u64,
    check: bool,
) -> RunStats {
    run_once_with(c, prepared, timer_overhead_ticks, check, false, false)
}

/// [`run_once`], and with `explain_peak` a memory report each time the
/// committed bytes reach a new peak (slow: for diagnosis, not timing); with
/// `defrag`, [`Contender::compact`] after the trace, before the final frees
/// (untimed except for [`DefragRun::ms`]).
pub fn run_once_with<C: Contender>(
    c: &mut C,
    prepared: &Prepared<'_>,
    timer_overhead_ticks: u64,
    check: bool,
    explain_peak: bool,
    defrag: bool,
) -> RunStats {
    let mut last_peak = 0u64;
    let mut slots: Vec<Option<C::Handle>> = Vec::with_capacity(prepared.slots);
    slots.resize_with(prepared.slots, || None);
    let mut alloc_ticks: Vec<u64> = Vec::with_capacity(prepared.summary.allocs as usize);
    let mut free_ticks: Vec<u64> = Vec::with_capacity(prepared.summary.frees as usize);
    let mut total_ticks: u128 = 0;
    let mut stats = RunStats::default();
    let mut live_bytes = 0u64;
    let mut sizes: Vec<u64> = vec![0; prepared.slots];
    let mut checker = OverlapChecker::default();
    let mut placements: Vec<Option<Placement>> = if check {
        vec![None; prepared.slots]
    } else {
        Vec::new()
    };

    // `VKALLOC_BENCH_POLLUTE=N`: N bytes written (one byte per 64-byte
    // line) before every operation, untimed, so each timed call starts with
    // its data evicted from the L1 (N = 64 KiB) or the L2 (N = a few MiB):
    // own time with cold caches, a diagnosis, not a benchmark setting.
    let pollute_bytes: usize = std::env::var("VKALLOC_BENCH_POLLUTE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut pollute = vec![0u8; pollute_bytes];
    let mut pollute_round = 0u8;
    vkdev::call_log_mark(&prepared.name, c.name());
    vkdev::reset_counters();
    let wall = Instant::now();
    for op in &prepared.ops {
        if pollute_bytes > 0 {
            pollute_round = pollute_round.wrapping_add(1);
            for i in (0..pollute_bytes).step_by(64) {
                pollute[i] = pollute_round;
            }
            std::hint::black_box(&mut pollute);
        }
        match *op {
            Op::Alloc { slot, request } => {
                let r = &prepared.requests[request as usize];
                let d0 = vkdev::driver_ticks();
                let t0 = clock::now();
                let result = c.allocate(r);
                let t1 = clock::now();
                let d1 = vkdev::driver_ticks();
                let total = t1.wrapping_sub(t0);
                total_ticks += u128::from(total);
                alloc_ticks.push(
                    total
                        .saturating_sub(d1 - d0)
                        .saturating_sub(timer_overhead_ticks),
                );
                match result {
                    Ok(h) => {
                        if check {
                            let p = c.placement(&h);
                            checker.insert(slot, p, r);
                            placements[slot as usize] = Some(p);
                        }
                        slots[slot as usize] = Some(h);
                        sizes[slot as usize] = r.size;
                        live_bytes += r.size;
                        stats.peak_live_bytes = stats.peak_live_bytes.max(live_bytes);
                        if explain_peak {
                            let peak = vkdev::counters().peak_committed_bytes;
                            if peak > last_peak {
                                last_peak = peak;
                                stats.at_peak = Some(format!(
                                    "committed {}, live {}: {}",
                                    crate::contenders::mib(peak),
                                    crate::contenders::mib(live_bytes),
                                    c.memory_report()
                                ));
                            }
                        }
                    }
                    Err(e) => {
                        stats.failures += 1;
                        if stats.first_failure.is_none() {
                            stats.first_failure = Some(format!(
                                "{} bytes ({:?}, {:?}): {e}",
                                r.size, r.kind, r.usage
                            ));
                        }
                    }
                }
            }
            Op::Free { slot } => {
                let Some(h) = slots[slot as usize].take() else {
                    continue; // its allocation failed
                };
                if check {
                    if let Some(p) = placements[slot as usize].take() {
                        checker.remove(p);
                    }
                }
                live_bytes -= sizes[slot as usize];
                let d0 = vkdev::driver_ticks();
                let t0 = clock::now();
                c.free(h);
                let t1 = clock::now();
                let d1 = vkdev::driver_ticks();
                let total = t1.wrapping_sub(t0);
                total_ticks += u128::from(total);
                free_ticks.push(
                    total
                        .saturating_sub(d1 - d0)
                        .saturating_sub(timer_overhead_ticks),
                );
            }
            Op::Frame(index) => c.begin_frame(index),
        }
    }
    stats.wall_ms = wall.elapsed().as_secs_f64() * 1e3;
    stats.driver = vkdev::counters();
    stats.peak_committed_bytes = stats.driver.peak_committed_bytes;
    stats.largest_free_range_end = c.largest_free_range();
    let ops = (alloc_ticks.len() + free_ticks.len()).max(1);
    stats.total_ns_per_op = clock::ticks_to_ns(total_ticks as f64 / ops as f64);
    stats.alloc_own = Percentiles::of(&mut alloc_ticks).ticks_to_ns();
    stats.free_own = Percentiles::of(&mut free_ticks).ticks_to_ns();
    stats.check_errors = checker.errors;
    if defrag {
        let before = vkdev::counters().committed_bytes;
        let start = Instant::now();
        if let Some(result) = c.compact(&mut slots) {
            let ms = start.elapsed().as_secs_f64() * 1e3;
            let (stats_, error) = match result {
                Ok(s) => (s, None),
                Err(e) => (Default::default(), Some(e)),
            };
            stats.defrag = Some(DefragRun {
                live_at_end_bytes: live_bytes,
                committed_before_bytes: before,
                committed_after_bytes: vkdev::counters().committed_bytes,
                stats: stats_,
                ms,
                error,
            });
        }
    }
    for h in slots.into_iter().flatten() {
        c.free(h);
    }
    stats
}
