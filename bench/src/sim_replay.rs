//! `bench --sim TABLE`: replays traces through vkalloc alone on the
//! simulated device ([`vkalloc::sim::SimDevice`]) with one of its GPU tables
//! (the H200's, read off the real driver, among them), so the allocation
//! policy on a device with several memory types can be explored here, with
//! no GPU. Only what the simulator knows exactly is reported: peak committed
//! bytes (the device's live `VkDeviceMemory` bytes), peak live bytes,
//! `vkAllocateMemory` / `vkFreeMemory` calls and the bytes allocated (the
//! driver-time proxy on the H200, whose allocation cost grows with the
//! size); with `explain`, where those bytes went and when memory was freed.
//! There is no wall time: the simulator's calls cost nothing.
//!
//! Requirements come from [`SimResolver`]: the standard traces' desktop rules
//! ([`crate::corpus::Synthetic`]), with the driver's dedicated preference
//! taken from the table (`dedicated_image_threshold`) and the heap size from
//! the table's largest device-local heap.

use vkalloc::sim::{GpuTable, SimDevice};
use vkalloc::trace::format::{Trace, TraceDedicated, TraceEvent};
use vkalloc::{Allocator, AllocatorDesc};

use crate::corpus::{Resolve, Resolved, Resource, Synthetic};

/// Requirements for the simulated device: [`Synthetic`]'s rules, with the
/// table's dedicated-image threshold and heap size.
#[derive(Clone, Debug)]
pub struct SimResolver {
    table: GpuTable,
    /// `VKALLOC_SIM_PREFER_FROM`: images and staging buffers of at least
    /// this many bytes prefer dedicated memory (instead of the table's
    /// image threshold).
    prefer_from: Option<u64>,
}

impl SimResolver {
    /// Resolves for `table`; with `VKALLOC_SIM_PREFER_FROM=BYTES` set,
    /// images and staging buffers (transfer-only usage) of at least BYTES
    /// prefer dedicated memory, as the H200's driver set it on the saved
    /// traces (images and staging buffers from 32 MiB), where the table's
    /// threshold (64 MiB, probed with power-of-four images only) is coarser.
    pub fn new(table: GpuTable) -> Self {
        let prefer_from = std::env::var("VKALLOC_SIM_PREFER_FROM")
            .ok()
            .and_then(|v| v.parse().ok());
        Self { table, prefer_from }
    }
}

impl Resolve for SimResolver {
    fn resolve(&mut self, r: &Resource) -> Option<Resolved> {
        let mut got = Synthetic.resolve(r)?;
        const STAGING: u32 = 0x1 | 0x2; // TRANSFER_SRC | TRANSFER_DST
        let prefers = match (r, self.prefer_from) {
            (Resource::Image { .. }, Some(from)) => got.size >= from,
            (Resource::Image { .. }, None) => self.table.prefers_dedicated_image(got.size),
            (Resource::Buffer { usage, .. }, Some(from)) => {
                usage & !STAGING == 0 && got.size >= from
            }
            (Resource::Buffer { .. }, None) => false,
        };
        got.dedicated = if prefers {
            TraceDedicated::Preferred
        } else {
            TraceDedicated::None
        };
        Some(got)
    }

    fn heap_bytes(&self) -> u64 {
        let heaps = &self.table.memory_properties.heaps;
        heaps
            .iter()
            .filter(|h| h.device_local)
            .map(|h| h.size)
            .max()
            .or_else(|| heaps.iter().map(|h| h.size).max())
            .unwrap_or(0)
    }

    fn describe(&self) -> String {
        format!(
            "synthetic requirements on the simulated table {} (dedicated images from {:?} bytes)",
            self.table.name, self.table.dedicated_image_threshold
        )
    }
}

/// What one trace's replay on the simulated device came to.
#[derive(Clone, Debug, PartialEq)]
pub struct SimRow {
    /// The trace's name.
    pub trace: String,
    /// Ours' strategy ([`vkalloc::Strategy::name`]).
    pub strategy: String,
    /// With `--heap-cap F`: every heap's capacity and budget, F times the
    /// trace's peak live bytes (allocations past it fail, counted in
    /// `failures`).
    pub cap_bytes: Option<u64>,
    /// The most device memory (bytes of live `VkDeviceMemory`) at any time.
    pub peak_committed_bytes: u64,
    /// The most bytes of live allocations (as the trace asked) at any time.
    pub peak_live_bytes: u64,
    /// `vkAllocateMemory` calls.
    pub allocate_calls: u64,
    /// Bytes of the successful `vkAllocateMemory` calls, summed over the
    /// trace (the driver-time proxy on drivers whose allocation cost grows
    /// with the size).
    pub allocated_bytes: u64,
    /// `vkFreeMemory` calls.
    pub free_calls: u64,
    /// What the driver calls (the final frees included) would cost on the
    /// H200, by [`h200_driver_ms`].
    pub h200_driver_ms: f64,
    /// The most device memory while the live bytes were at most half the
    /// largest heap's size.
    pub peak_committed_at_half_heap_bytes: u64,
    /// Allocations that failed (the first error in `first_failure`).
    pub failures: u64,
    /// The first failure's message.
    pub first_failure: Option<String>,
    /// With `explain`: where the memory sat at the committed peak.
    pub at_peak: Option<String>,
    /// With `explain`: where the allocated bytes went and when device memory
    /// was freed during the trace.
    pub churn_report: Option<String>,
}

/// Where a trace's `vkAllocateMemory` bytes went (per memory type, shared
/// blocks or dedicated memory) and when memory was freed (by a free, before
/// new memory was made, or at a frame).
#[derive(Default)]
struct Churn {
    /// (memory type, dedicated) -> (calls, bytes).
    made: std::collections::BTreeMap<(u32, bool), (u64, u64)>,
    /// Dedicated allocations served without a call (the recycle bin).
    reused: (u64, u64),
    /// Freed bytes: during a free, during an allocation, at a frame.
    freed: [u64; 3],
}

impl Churn {
    fn report(&self) -> String {
        let made: Vec<String> = self
            .made
            .iter()
            .map(|((t, d), (n, b))| {
                format!(
                    "type {t} {}: {n} calls / {:.0} MiB",
                    if *d { "dedicated" } else { "blocks" },
                    mib(*b)
                )
            })
            .collect();
        format!(
            "allocated: {}; dedicated reused without a call: {} / {:.0} MiB; freed MiB: by frees {:.0}, before new memory {:.0}, at frames {:.0}",
            made.join(", "),
            self.reused.0,
            mib(self.reused.1),
            mib(self.freed[0]),
            mib(self.freed[1]),
            mib(self.freed[2]),
        )
    }
}

impl SimRow {
    /// Peak committed / peak live.
    pub fn ratio(&self) -> f64 {
        self.peak_committed_bytes as f64 / self.peak_live_bytes.max(1) as f64
    }

    /// Allocated bytes / peak committed: 1 when no device memory was ever
    /// freed and made again.
    pub fn churn(&self) -> f64 {
        self.allocated_bytes as f64 / self.peak_committed_bytes.max(1) as f64
    }
}

/// Bytes in MiB.
fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// Replays `trace` through a new allocator with `desc` on a simulated device
/// of `table`; with `explain`, records where the memory sat at the
/// committed peak.
///
/// # Errors
/// A message when the trace is inconsistent or the allocator can't be made.
pub fn replay(
    trace: &Trace,
    table: &GpuTable,
    desc: AllocatorDesc,
    explain: bool,
    tags: bool,
) -> Result<SimRow, String> {
    replay_capped(trace, table, desc, explain, tags, None)
}

/// [`replay`] with every heap capped at `cap` times the trace's peak live
/// bytes (`--heap-cap`): the heaps' capacity (the device refuses memory
/// past it) and the budget the allocator reads (`VK_EXT_memory_budget`,
/// turned on).
///
/// # Errors
/// As [`replay`]; a cap that is not a positive finite number.
pub fn replay_capped(
    trace: &Trace,
    table: &GpuTable,
    desc: AllocatorDesc,
    explain: bool,
    tags: bool,
    cap: Option<f64>,
) -> Result<SimRow, String> {
    let summary = trace.validate().map_err(|e| e.to_string())?;
    let largest_heap = largest_heap(table);
    let cap_bytes = match cap {
        Some(f) if f.is_finite() && f > 0.0 => Some((summary.peak_live_bytes as f64 * f) as u64),
        Some(f) => return Err(format!("--heap-cap {f}: a positive number")),
        None => None,
    };
    let device = match cap_bytes {
        Some(bytes) => {
            let mut b = SimDevice::builder(table.clone()).memory_budget(true);
            for heap in 0..table.memory_properties.heaps.len() as u32 {
                b = b.heap_capacity(heap, bytes).heap_budget(heap, bytes);
            }
            b.build()
        }
        None => SimDevice::new(table.clone()),
    };
    let allocator = Allocator::new(device, desc).map_err(|e| format!("vkalloc: {e}"))?;
    let mut live = std::collections::HashMap::new();
    let mut live_bytes = 0u64;
    let mut row = SimRow {
        trace: trace.header.name.clone(),
        strategy: desc.strategy.name().to_owned(),
        cap_bytes,
        peak_committed_bytes: 0,
        peak_live_bytes: 0,
        allocate_calls: 0,
        allocated_bytes: 0,
        free_calls: 0,
        h200_driver_ms: 0.0,
        peak_committed_at_half_heap_bytes: 0,
        failures: 0,
        first_failure: None,
        at_peak: None,
        churn_report: None,
    };
    let mut churn = Churn::default();
    let mut committed_before = 0u64;
    let mut placements = PlacementHash::from_env();
    let call_log = std::env::var_os("VKALLOC_SIM_CALL_LOG").is_some();
    let mut frame = 0u64;
    let mut times = OwnTimes::from_env();
    let breakdown = std::env::var_os("VKALLOC_SIM_PEAK_BREAKDOWN").is_some();
    let mut at_peak_breakdown = None;
    if std::env::var_os("VKALLOC_SIM_MARK").is_some() {
        eprintln!("marks {:p}", &MARK);
    }
    for (index, event) in trace.events.iter().enumerate() {
        let before = call_log.then(|| allocator.device().stats());
        let mut placed = None;
        let allocated_before = allocator.device().stats().allocated_bytes;
        match event {
            TraceEvent::Alloc(a) => {
                let mut desc = a.desc();
                if !tags {
                    // As the device replay does without `--tags`.
                    desc.options.tag = "";
                }
                let samples = times.as_mut().map(|t| &mut t.alloc);
                let result = timed(0, samples, || allocator.allocate(&desc));
                match result {
                    Ok(allocation) => {
                        if let Some(p) = placements.as_mut() {
                            p.add(a.id, &allocation);
                        }
                        placed = Some((allocation.memory_type(), allocation.is_dedicated()));
                        if explain {
                            let stats = allocator.device().stats();
                            let made = stats.allocated_bytes - allocated_before;
                            let key = (allocation.memory_type(), allocation.is_dedicated());
                            if made > 0 {
                                let e = churn.made.entry(key).or_default();
                                e.0 += 1;
                                e.1 += made;
                            } else if key.1 {
                                churn.reused.0 += 1;
                                churn.reused.1 += allocation.size();
                            }
                        }
                        live_bytes += a.size;
                        live.insert(a.id, allocation);
                    }
                    Err(e) => {
                        row.failures += 1;
                        row.first_failure.get_or_insert_with(|| e.to_string());
                    }
                }
            }
            TraceEvent::Free { id } => {
                if let Some(allocation) = live.remove(id) {
                    live_bytes -= allocation.size();
                    let samples = times.as_mut().map(|t| &mut t.free);
                    let result = timed(2, samples, || allocator.free(allocation));
                    result.map_err(|e| format!("vkalloc: free: {e}"))?;
                }
            }
            TraceEvent::Frame { .. } => allocator.begin_frame(),
        }
        let committed: u64 = allocator
            .device()
            .stats()
            .heaps
            .iter()
            .map(|h| h.live_bytes)
            .sum();
        if explain {
            let made = allocator.device().stats().allocated_bytes - allocated_before;
            let freed = (committed_before + made).saturating_sub(committed);
            let when = match event {
                TraceEvent::Free { .. } => 0,
                TraceEvent::Alloc(_) => 1,
                TraceEvent::Frame { .. } => 2,
            };
            churn.freed[when] += freed;
        }
        if let Some(before) = before {
            log_calls(
                &trace.header.name,
                index,
                frame,
                event,
                placed,
                &before,
                &allocator.device().stats(),
                live_bytes,
                committed,
            );
        }
        if let TraceEvent::Frame { .. } = event {
            frame += 1;
        }
        committed_before = committed;
        row.peak_live_bytes = row.peak_live_bytes.max(live_bytes);
        if live_bytes <= largest_heap / 2 {
            row.peak_committed_at_half_heap_bytes =
                row.peak_committed_at_half_heap_bytes.max(committed);
        }
        if committed > row.peak_committed_bytes {
            row.peak_committed_bytes = committed;
            if explain {
                row.at_peak = Some(memory_report(&allocator, live_bytes));
            }
            if breakdown {
                at_peak_breakdown = Some(PeakBreakdown::of(&allocator, live_bytes));
            }
        }
    }
    if let Some(b) = at_peak_breakdown {
        eprintln!("{}", b.line(&row.trace, row.peak_live_bytes));
    }
    // In id order: the end's frees decide which kept blocks are freed
    // before the allocator is dropped, so a map's order would make the
    // free count vary from run to run.
    let mut rest: Vec<_> = live.drain().collect();
    rest.sort_unstable_by_key(|(id, _)| *id);
    for (_, allocation) in rest {
        allocator
            .free(allocation)
            .map_err(|e| format!("vkalloc: free: {e}"))?;
    }
    let stats = allocator.device().stats();
    row.allocate_calls = stats.allocate_calls;
    row.allocated_bytes = stats.allocated_bytes;
    if explain {
        row.churn_report = Some(churn.report());
    }
    row.free_calls = stats.free_calls;
    row.h200_driver_ms = h200_driver_ms(table, &stats);
    if let Some(p) = placements {
        eprintln!("placement hash {}: {:016x}", row.trace, p.hash);
    }
    if let Some(t) = times {
        t.print(&row.trace);
    }
    Ok(row)
}

/// `VKALLOC_SIM_CALL_LOG=1`: one line on stderr per trace event that made
/// or freed device memory: the event (an allocation's size, kind, usage and
/// dedicated wish), and per heap the calls and MiB made and freed, with the
/// live and committed bytes after it.
#[allow(clippy::too_many_arguments)]
fn log_calls(
    name: &str,
    index: usize,
    frame: u64,
    event: &TraceEvent,
    placed: Option<(u32, bool)>,
    before: &vkalloc::sim::SimStats,
    after: &vkalloc::sim::SimStats,
    live: u64,
    committed: u64,
) {
    if before.allocate_calls == after.allocate_calls && before.free_calls == after.free_calls {
        return;
    }
    let what = match event {
        TraceEvent::Alloc(a) => format!(
            "alloc {} {:.2} MiB {:?} {:?} {:?} -> type {} {}",
            a.id,
            mib(a.size),
            a.kind,
            a.usage,
            a.dedicated,
            placed.map_or(-1, |p| i64::from(p.0)),
            if placed.is_some_and(|p| p.1) {
                "own"
            } else {
                "block"
            }
        ),
        TraceEvent::Free { id } => format!("free {id}"),
        TraceEvent::Frame { .. } => "frame".to_owned(),
    };
    let heaps: Vec<String> = before
        .heaps
        .iter()
        .zip(&after.heaps)
        .enumerate()
        .filter(|(_, (b, a))| b.allocate_calls != a.allocate_calls || b.free_calls != a.free_calls)
        .map(|(i, (b, a))| {
            format!(
                "heap {i}: +{} {:.1} MiB, -{} {:.1} MiB",
                a.allocate_calls - b.allocate_calls,
                mib(a.allocated_bytes - b.allocated_bytes),
                a.free_calls - b.free_calls,
                mib(a.freed_bytes - b.freed_bytes)
            )
        })
        .collect();
    eprintln!(
        "call {name} #{index} f{frame} {what} | {} | live {:.1} committed {:.1}",
        heaps.join("; "),
        mib(live),
        mib(committed)
    );
}

/// Loaded (and nothing else) right before and after each timed allocate
/// (0, 1) and free (2, 3): with `VKALLOC_SIM_MARK=1` the replay prints their
/// address, so a memory trace (`valgrind --tool=lackey --trace-mem=yes`)
/// can be cut into calls, e.g. to count the cache lines each call touches.
static MARK: [std::sync::atomic::AtomicU64; 4] =
    [const { std::sync::atomic::AtomicU64::new(0) }; 4];

thread_local! {
    /// `VKALLOC_BENCH_POLLUTE=N` with `VKALLOC_SIM_TIME`: N bytes written
    /// (one byte per 64-byte line) before each timed call, untimed, as the
    /// device replay does: own time with the L1 (64 KiB) or the L2 evicted.
    static POLLUTE: std::cell::RefCell<(u8, Vec<u8>)> = std::cell::RefCell::new((
        0,
        vec![
            0;
            std::env::var("VKALLOC_BENCH_POLLUTE")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        ],
    ));
}

/// Runs `call` between the loads of `MARK[first]` and `MARK[first + 1]`
/// (see [`MARK`]), its time in clock ticks pushed to `samples` where given
/// (`VKALLOC_SIM_TIME`).
fn timed<T>(first: usize, samples: Option<&mut Vec<u64>>, call: impl FnOnce() -> T) -> T {
    use std::sync::atomic::Ordering::Relaxed;
    if samples.is_some() {
        POLLUTE.with(|p| {
            let mut p = p.borrow_mut();
            let (round, bytes) = &mut *p;
            if !bytes.is_empty() {
                *round = round.wrapping_add(1);
                for i in (0..bytes.len()).step_by(64) {
                    bytes[i] = *round;
                }
                std::hint::black_box(&mut *bytes);
            }
        });
    }
    std::hint::black_box(MARK[first].load(Relaxed));
    let t0 = crate::clock::now();
    let result = call();
    let t1 = crate::clock::now();
    std::hint::black_box(MARK[first + 1].load(Relaxed));
    if let Some(samples) = samples {
        samples.push(t1.wrapping_sub(t0));
    }
    result
}

/// `VKALLOC_SIM_TIME=1`: each allocate and free timed with [`crate::clock`]
/// (the simulated device's work inside included, no timer overhead taken
/// out), the quartiles printed to stderr per trace: this machine's wall
/// time, a rough proxy for own time on a device.
struct OwnTimes {
    alloc: Vec<u64>,
    free: Vec<u64>,
}

impl OwnTimes {
    fn from_env() -> Option<Self> {
        std::env::var_os("VKALLOC_SIM_TIME").map(|_| {
            crate::clock::init();
            Self {
                alloc: Vec::new(),
                free: Vec::new(),
            }
        })
    }

    fn print(mut self, trace: &str) {
        let quartiles = |v: &mut Vec<u64>| {
            v.sort_unstable();
            let at = |q: usize| {
                let i = (v.len() * q / 4).min(v.len().saturating_sub(1));
                v.get(i)
                    .map_or(0.0, |&t| crate::clock::ticks_to_ns(t as f64))
            };
            format!("{:.0} / {:.0} / {:.0}", at(1), at(2), at(3))
        };
        let a = quartiles(&mut self.alloc);
        let f = quartiles(&mut self.free);
        eprintln!("own time {trace}: allocate {a} ns, free {f} ns (quartiles)");
    }
}

/// `VKALLOC_SIM_PLACEMENT_HASH=1`: every allocation's (trace id, memory
/// object numbered by first use, offset, size, memory type) folded into one
/// hash per trace, printed to stderr, to check that a change to the
/// allocator's code places every allocation where it did before.
struct PlacementHash {
    hash: u64,
    memories: std::collections::HashMap<vkalloc::device::DeviceMemory, u64>,
}

impl PlacementHash {
    fn from_env() -> Option<Self> {
        std::env::var_os("VKALLOC_SIM_PLACEMENT_HASH").map(|_| Self {
            hash: 0xcbf2_9ce4_8422_2325,
            memories: std::collections::HashMap::new(),
        })
    }

    fn add(&mut self, id: u64, allocation: &vkalloc::Allocation) {
        let next = self.memories.len() as u64;
        let memory = *self.memories.entry(allocation.memory()).or_insert(next);
        for word in [
            id,
            memory,
            allocation.offset(),
            allocation.size(),
            u64::from(allocation.memory_type()),
        ] {
            // FNV-1a over the word's bytes.
            for byte in word.to_le_bytes() {
                self.hash = (self.hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
}

/// A driver's `vkAllocateMemory` / `vkFreeMemory` cost in one heap, in ms:
/// a fixed part per call and a part per MiB.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DriverCost {
    /// `vkAllocateMemory`, per call.
    pub allocate_ms: f64,
    /// `vkAllocateMemory`, per MiB allocated.
    pub allocate_ms_per_mib: f64,
    /// `vkFreeMemory`, per call.
    pub free_ms: f64,
    /// `vkFreeMemory`, per MiB freed.
    pub free_ms_per_mib: f64,
}

/// The H200's driver cost, fitted (least squares) over 14,404 allocations
/// and as many frees of the three allocators replaying the corpus there
/// (driver 580.159.04; BENCHMARKS.md, *What a driver call costs on the
/// H200*), for memory in a `DEVICE_LOCAL` heap.
pub const H200_DEVICE_COST: DriverCost = DriverCost {
    allocate_ms: 0.02,
    allocate_ms_per_mib: 0.021,
    free_ms: 0.0,
    free_ms_per_mib: 0.017,
};

/// [`H200_DEVICE_COST`] for the host heap: system memory the driver pins,
/// an order of magnitude dearer per MiB.
pub const H200_HOST_COST: DriverCost = DriverCost {
    allocate_ms: 0.94,
    allocate_ms_per_mib: 0.237,
    free_ms: 1.22,
    free_ms_per_mib: 0.030,
};

/// What `stats`' calls would cost on the H200 ([`H200_DEVICE_COST`],
/// [`H200_HOST_COST`]), in ms, each
/// heap by whether `table` says it is `DEVICE_LOCAL`. A model for comparing
/// policies offline, not a measurement; on other tables it says what the
/// H200's driver would charge for the same calls.
pub fn h200_driver_ms(table: &GpuTable, stats: &vkalloc::sim::SimStats) -> f64 {
    stats
        .heaps
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let device_local = table
                .memory_properties
                .heaps
                .get(i)
                .is_some_and(|heap| heap.device_local);
            let c = if device_local {
                H200_DEVICE_COST
            } else {
                H200_HOST_COST
            };
            h.allocate_calls as f64 * c.allocate_ms
                + mib(h.allocated_bytes) * c.allocate_ms_per_mib
                + h.free_calls as f64 * c.free_ms
                + mib(h.freed_bytes) * c.free_ms_per_mib
        })
        .sum()
}

/// Where `allocator`'s memory sits, per memory type: dedicated memory,
/// shared blocks (sizes and bytes used) and kept memory (empty blocks and
/// recycled dedicated memory).
pub fn memory_report(allocator: &Allocator<SimDevice>, live_bytes: u64) -> String {
    let mib = crate::contenders::mib;
    let stats = allocator.statistics();
    let details = allocator.detailed_statistics();
    let mut out = format!("live {}", mib(live_bytes));
    for t in stats.types.iter().filter(|t| t.usage.block_count > 0) {
        let (mut dedicated, mut dedicated_bytes, mut listed) = (0, 0, 0);
        let mut blocks = Vec::new();
        for list in details.lists.iter().filter(|l| l.memory_type == t.index) {
            for b in &list.blocks {
                listed += b.size;
                if b.dedicated {
                    dedicated += 1;
                    dedicated_bytes += b.size;
                } else {
                    blocks.push(format!("{}/{}", b.allocation_bytes >> 20, b.size >> 20));
                }
            }
        }
        out.push_str(&format!(
            "; type {} ({:?}): {} in {} objects, {} allocated; {dedicated} dedicated ({}); shared used/size MiB [{}]; recycle bin {}",
            t.index,
            t.flags,
            mib(t.usage.block_bytes),
            t.usage.block_count,
            mib(t.usage.allocation_bytes),
            mib(dedicated_bytes),
            blocks.join(" "),
            mib(t.usage.block_bytes.saturating_sub(listed)),
        ));
    }
    out
}

/// `VKALLOC_SIM_PEAK_BREAKDOWN=1`: where the committed bytes sat at the
/// committed peak, per memory type, in five parts that sum to them: live
/// bytes in shared blocks, free space in shared blocks that hold
/// allocations, empty shared blocks kept, recycled dedicated memory kept
/// (the recycle bin) and memory of its own (dedicated, live).
struct PeakBreakdown {
    /// Live bytes at the committed peak (all types).
    live: u64,
    /// Per memory type: (index, pinned, the five parts).
    types: Vec<(u32, bool, [u64; 5])>,
}

/// The names of [`PeakBreakdown`]'s parts.
const BREAKDOWN_PARTS: [&str; 5] = ["shared-live", "free-in-used", "empty-kept", "bin", "own"];

impl PeakBreakdown {
    fn of(allocator: &Allocator<SimDevice>, live: u64) -> Self {
        let stats = allocator.statistics();
        let details = allocator.detailed_statistics();
        let any_device_local = stats.heaps.iter().any(|h| h.device_local);
        let mut types = Vec::new();
        for t in stats.types.iter().filter(|t| t.usage.block_count > 0) {
            let heap_local = stats
                .heaps
                .iter()
                .find(|h| h.index == t.heap)
                .is_some_and(|h| h.device_local);
            let mut parts = [0u64; 5];
            let mut listed = 0;
            for list in details.lists.iter().filter(|l| l.memory_type == t.index) {
                for b in &list.blocks {
                    listed += b.size;
                    if b.dedicated {
                        parts[4] += b.size;
                    } else if b.allocation_count == 0 {
                        parts[2] += b.size;
                    } else {
                        parts[0] += b.allocation_bytes;
                        parts[1] += b.size.saturating_sub(b.allocation_bytes);
                    }
                }
            }
            parts[3] = t.usage.block_bytes.saturating_sub(listed);
            types.push((t.index, !heap_local && any_device_local, parts));
        }
        Self { live, types }
    }

    /// One line: the committed bytes, the peak live bytes and the live
    /// bytes at the committed peak, then the parts (MiB) summed over the
    /// device-memory types and over the pinned ones, then per type.
    fn line(&self, trace: &str, peak_live: u64) -> String {
        let sum = |pinned: bool| {
            let mut s = [0u64; 5];
            for (_, _, parts) in self.types.iter().filter(|t| t.1 == pinned) {
                for (a, b) in s.iter_mut().zip(parts) {
                    *a += b;
                }
            }
            s
        };
        let fmt = |parts: &[u64; 5]| {
            BREAKDOWN_PARTS
                .iter()
                .zip(parts)
                .map(|(n, b)| format!("{n} {:.1}", mib(*b)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let committed: u64 = self.types.iter().flat_map(|t| t.2).sum();
        let per_type: Vec<String> = self
            .types
            .iter()
            .map(|(i, p, parts)| {
                format!(
                    "type {i}{}: {}",
                    if *p { " (pinned)" } else { "" },
                    fmt(parts)
                )
            })
            .collect();
        format!(
            "peak breakdown {trace}: committed {:.1} MiB, peak live {:.1}, live at the peak {:.1}; device: {}; pinned: {}; {}",
            mib(committed),
            mib(peak_live),
            mib(self.live),
            fmt(&sum(false)),
            fmt(&sum(true)),
            per_type.join("; ")
        )
    }
}

/// The size of `table`'s largest heap.
pub fn largest_heap(table: &GpuTable) -> u64 {
    table
        .memory_properties
        .heaps
        .iter()
        .map(|h| h.size)
        .max()
        .unwrap_or(0)
}

/// The geometric mean of `values` (1 for none).
pub fn geomean(values: impl Iterator<Item = f64>) -> f64 {
    let (mut sum, mut n) = (0.0, 0u32);
    for v in values {
        sum += v.max(f64::MIN_POSITIVE).ln();
        n += 1;
    }
    if n == 0 {
        1.0
    } else {
        (sum / f64::from(n)).exp()
    }
}

/// A Markdown table of `rows`, then the geometric mean and worst case of
/// committed/live and `vkAllocateMemory` calls, and the traces that commit
/// past the largest heap while their live set is at most half of it.
pub fn format_rows(rows: &[SimRow], largest_heap: u64) -> String {
    let mut out = String::from(
        "| trace | strategy | cap MiB | peak live MiB | peak committed MiB | committed/live | vkAllocateMemory | allocated MiB | vkFreeMemory | H200-model driver ms | failures |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {:.1} | {:.1} | {:.2} | {} | {:.1} | {} | {:.1} | {} |\n",
            r.trace,
            r.strategy,
            r.cap_bytes
                .map_or_else(|| "-".to_owned(), |b| format!("{:.1}", mib(b))),
            r.peak_live_bytes as f64 / (1 << 20) as f64,
            r.peak_committed_bytes as f64 / (1 << 20) as f64,
            r.ratio(),
            r.allocate_calls,
            r.allocated_bytes as f64 / (1 << 20) as f64,
            r.free_calls,
            r.h200_driver_ms,
            r.failures
        ));
    }
    let worst = |f: &dyn Fn(&SimRow) -> f64| rows.iter().map(f).fold(0.0, f64::max);
    out.push_str(&format!(
        "\nfailures: {} traces, {} allocations; committed/live: geomean {:.2}, worst {:.2}; peak committed MiB: geomean {:.1}, worst {:.1}; vkAllocateMemory: geomean {:.1}, worst {}; allocated MiB: geomean {:.1}, worst {:.1}; allocated/peak committed: geomean {:.2}, worst {:.2}; H200-model driver ms: geomean {:.1}, worst {:.1}; traces over the heap with live <= heap/2: {}\n",
        rows.iter().filter(|r| r.failures > 0).count(),
        rows.iter().map(|r| r.failures).sum::<u64>(),
        geomean(rows.iter().map(SimRow::ratio)),
        worst(&|r| r.ratio()),
        geomean(rows.iter().map(|r| mib(r.peak_committed_bytes))),
        worst(&|r| mib(r.peak_committed_bytes)),
        geomean(rows.iter().map(|r| r.allocate_calls as f64)),
        worst(&|r| r.allocate_calls as f64),
        geomean(rows.iter().map(|r| mib(r.allocated_bytes))),
        worst(&|r| mib(r.allocated_bytes)),
        geomean(rows.iter().map(SimRow::churn)),
        worst(&|r| r.churn()),
        geomean(rows.iter().map(|r| r.h200_driver_ms)),
        worst(&|r| r.h200_driver_ms),
        rows.iter()
            .filter(|r| r.peak_committed_at_half_heap_bytes > largest_heap)
            .count()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{generate, Scale, DEFAULT_SEED};

    #[test]
    fn replays_a_standard_trace_on_the_h200_table() {
        let table = vkalloc::sim::nvidia_h200();
        let trace = generate("streaming-churn", DEFAULT_SEED, Scale::Small).unwrap();
        let row = replay(&trace, &table, AllocatorDesc::default(), true, false).unwrap();
        assert_eq!(row.failures, 0, "{:?}", row.first_failure);
        assert!(row.peak_live_bytes > 0);
        assert!(row.peak_committed_bytes >= row.peak_live_bytes);
        assert!(row.allocate_calls > 0);
        // Every byte committed at the peak was allocated once at least.
        assert!(row.allocated_bytes >= row.peak_committed_bytes);
        // Everything was freed at the end: one vkFreeMemory per object, save
        // what the allocator still keeps (dropped with it).
        assert!(row.free_calls <= row.allocate_calls);
        let at_peak = row.at_peak.clone().unwrap();
        assert!(at_peak.contains("type 1"), "{at_peak}");
        // The same trace, the same figures.
        let again = replay(&trace, &table, AllocatorDesc::default(), false, false).unwrap();
        assert_eq!(
            (again.peak_committed_bytes, again.allocate_calls),
            (row.peak_committed_bytes, row.allocate_calls)
        );
        let text = format_rows(&[row], 1 << 40);
        assert!(text.contains("streaming-churn"), "{text}");
    }

    #[test]
    fn the_h200_model_charges_pinned_memory_more() {
        let table = vkalloc::sim::nvidia_h200();
        let heap = |device_local: bool| {
            table
                .memory_properties
                .heaps
                .iter()
                .position(|h| h.device_local == device_local)
                .expect("the H200 has both heaps")
        };
        let stats_in = |i: usize| {
            let mut stats = vkalloc::sim::SimStats {
                heaps: vec![Default::default(); table.memory_properties.heaps.len()],
                ..Default::default()
            };
            stats.heaps[i] = vkalloc::sim::SimHeapStats {
                allocate_calls: 1,
                allocated_bytes: 64 << 20,
                free_calls: 1,
                freed_bytes: 64 << 20,
                ..Default::default()
            };
            stats
        };
        let device = h200_driver_ms(&table, &stats_in(heap(true)));
        let host = h200_driver_ms(&table, &stats_in(heap(false)));
        // 64 MiB: about 2.4 ms in device memory, 19 ms pinned (BENCHMARKS.md).
        assert!((2.0..3.0).contains(&device), "{device}");
        assert!((17.0..21.0).contains(&host), "{host}");
    }

    #[test]
    fn the_resolver_takes_the_tables_dedicated_threshold_and_heap() {
        let mut h200 = SimResolver::new(vkalloc::sim::nvidia_h200());
        let big = Resource::Image {
            width: 8192,
            height: 8192,
            format: ash::vk::Format::R8G8B8A8_UNORM.as_raw(),
            mips: 1,
            samples: 1,
            usage: 0,
        };
        assert_eq!(
            h200.resolve(&big).unwrap().dedicated,
            TraceDedicated::Preferred
        );
        assert!(h200.heap_bytes() > 100 << 30);
        let mut lavapipe = SimResolver::new(vkalloc::sim::lavapipe());
        assert_eq!(
            lavapipe.resolve(&big).unwrap().dedicated,
            TraceDedicated::None
        );
        assert_eq!(lavapipe.heap_bytes(), 2 << 30);
        assert!((geomean([2.0, 8.0].into_iter()) - 4.0).abs() < 1e-9);
    }
}
