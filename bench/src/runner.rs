//! Runs traces through every contender, alternating, and aggregates the
//! repetitions into rows: medians with min..max.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::contenders::gpu_alloc::GpuAllocator;
use crate::contenders::ours::Ours;
use crate::contenders::vma::Vma;
use crate::contenders::{BaselineOptions, Contender, CONTENDERS};
use crate::replay::{run_once_with, Prepared, RunStats};
use crate::trace::Trace;
use crate::vkdev::{self, VulkanContext};

/// Settings of a benchmark run.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Repetitions per trace and contender.
    pub reps: usize,
    /// Contenders to run, from [`CONTENDERS`].
    pub contenders: Vec<String>,
    /// Check every placement (slower; for tests).
    pub check: bool,
    /// How baselines get requests they can't express.
    pub baseline: BaselineOptions,
    /// Print a line per run to stderr.
    pub verbose: bool,
    /// Give every allocator the trace's tags as allocation names.
    pub tags: bool,
    /// Record what each allocator's memory looked like at its committed peak
    /// (slows the replay; for diagnosis).
    pub explain_peak: bool,
    /// Compact ours at the end of each trace ([`crate::compact`]).
    pub defrag: bool,
    /// Ours' strategy (`--strategy`).
    pub strategy: vkalloc::Strategy,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            reps: 5,
            contenders: CONTENDERS.iter().map(|s| s.to_string()).collect(),
            check: false,
            baseline: BaselineOptions::default(),
            verbose: false,
            tags: false,
            explain_peak: false,
            defrag: false,
            strategy: vkalloc::Strategy::default(),
        }
    }
}

/// A figure over the repetitions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// The median.
    pub median: f64,
    /// The smallest.
    pub min: f64,
    /// The largest.
    pub max: f64,
}

impl Spread {
    /// Of `values` (any order).
    pub fn of(values: impl IntoIterator<Item = f64>) -> Self {
        let mut v: Vec<f64> = values.into_iter().collect();
        if v.is_empty() {
            return Self::default();
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Self {
            median,
            min: v[0],
            max: v[n - 1],
        }
    }
}

/// One trace × allocator: what `target/bench/allocators.json` holds per row.
///
/// The plain fields are medians over the repetitions; `spread` gives each
/// one's min..max. Own times exclude the time inside `vkAllocateMemory` /
/// `vkFreeMemory` and the timer's own cost.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    /// The trace's name.
    pub trace: String,
    /// `ours`, `vma` or `gpu-allocator`.
    pub allocator: String,
    /// Ours' strategy (`balanced`, `min-memory`, `min-time`); `None` for
    /// the peers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    /// Repetitions.
    pub reps: usize,
    /// Allocations in the trace.
    pub allocs: u64,
    /// Frees in the trace.
    pub frees: u64,
    /// Median own ns per allocate (median of the runs' medians).
    pub alloc_own_ns_median: f64,
    /// Median own ns per free.
    pub free_own_ns_median: f64,
    /// 99th percentile own ns per allocate (median over runs).
    pub alloc_own_ns_p99: f64,
    /// 99th percentile own ns per free.
    pub free_own_ns_p99: f64,
    /// Mean own ns per allocate.
    pub alloc_own_ns_mean: f64,
    /// Mean own ns per free.
    pub free_own_ns_mean: f64,
    /// Own time (ns) for allocate + free at the median: the sum of the two medians.
    pub alloc_free_own_ns_median: f64,
    /// Mean total ns (own + driver) per operation.
    pub total_ns_per_op: f64,
    /// Wall time of the replay (ms), driver included.
    pub wall_ms: f64,
    /// `vkAllocateMemory` calls.
    pub device_allocations: f64,
    /// `vkFreeMemory` calls during the trace (teardown excluded).
    pub device_frees: f64,
    /// Bytes passed to the successful `vkAllocateMemory` calls, summed over
    /// the trace: with a driver whose allocation cost grows with the size
    /// (the H200's), what `driver_ms` is made of.
    #[serde(default)]
    pub device_allocated_bytes: f64,
    /// Time inside `vkAllocateMemory` and `vkFreeMemory` (ms).
    pub driver_ms: f64,
    /// Peak `VkDeviceMemory` bytes.
    pub peak_committed_bytes: f64,
    /// Peak live bytes (as asked).
    pub peak_live_bytes: f64,
    /// `peak_committed_bytes / peak_live_bytes`.
    pub committed_to_live_ratio: f64,
    /// Largest free range inside the allocator's blocks at the end of the trace.
    pub largest_free_range_end: Option<f64>,
    /// Failed allocations (median).
    pub failures: f64,
    /// The first failure's message, if any run had one.
    pub first_failure: Option<String>,
    /// Problems the placement check found (with `--check`): overlaps,
    /// misalignment, short allocations. Must be empty.
    pub check_errors: Vec<String>,
    /// With `--explain-peak`: the allocator's memory at its committed peak (last repetition).
    pub at_peak: Option<String>,
    /// Bytes of `VkDeviceMemory` still live after the allocator was dropped (must be 0).
    pub leaked_bytes: u64,
    /// The calibrated cost of the timer, subtracted from every operation (ns).
    pub timer_overhead_ns: f64,
    /// The device's name.
    pub device: String,
    /// min..max over the repetitions, per field above.
    pub spread: BTreeMap<String, Spread>,
    /// With `--defrag` (ours): bytes live at the end of the trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_at_end_bytes: Option<f64>,
    /// With `--defrag`: `VkDeviceMemory` bytes at the end of the trace,
    /// before compacting (median).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed_before_defrag_bytes: Option<f64>,
    /// With `--defrag`: `VkDeviceMemory` bytes after compacting (median).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed_after_defrag_bytes: Option<f64>,
    /// With `--defrag`: bytes the compaction moved (median).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defrag_bytes_moved: Option<f64>,
    /// With `--defrag`: the compaction's wall time (ms, median), GPU copies
    /// and the wrapping buffers included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defrag_ms: Option<f64>,
    /// With `--defrag`: passes run (median).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defrag_passes: Option<f64>,
    /// With `--defrag`: live allocations that could not be moved (median).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defrag_pinned: Option<f64>,
    /// With `--defrag`: the share of repetitions whose compaction ran to a
    /// pass with nothing to move (1: all; less: stopped by the pass or time
    /// limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defrag_complete: Option<f64>,
    /// With `--defrag`: the first compaction error, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defrag_error: Option<String>,
}

/// Runs one contender over `prepared` once, building and dropping it.
/// Returns the stats and the bytes it leaked.
pub fn run_contender(
    name: &str,
    ctx: &VulkanContext,
    prepared: &Prepared<'_>,
    timer_overhead_ticks: u64,
    config: &RunConfig,
) -> Result<(RunStats, u64), String> {
    fn go<C: Contender>(
        mut c: C,
        prepared: &Prepared<'_>,
        overhead: u64,
        config: &RunConfig,
    ) -> (RunStats, u64) {
        let before = vkdev::counters().committed_bytes;
        let stats = run_once_with(
            &mut c,
            prepared,
            overhead,
            config.check,
            config.explain_peak,
            config.defrag,
        );
        drop(c);
        let after = vkdev::counters().committed_bytes;
        (stats, after.saturating_sub(before))
    }
    Ok(match name {
        "ours" => go(
            Ours::new(ctx, config.strategy)?,
            prepared,
            timer_overhead_ticks,
            config,
        ),
        "vma" => go(
            Vma::new(ctx, config.baseline)?,
            prepared,
            timer_overhead_ticks,
            config,
        ),
        "gpu-allocator" => go(
            GpuAllocator::new(ctx)?,
            prepared,
            timer_overhead_ticks,
            config,
        ),
        other => return Err(format!("unknown allocator {other:?}")),
    })
}

/// Runs `trace` through every configured contender `reps` times, rotating
/// their order each repetition, and returns one row per contender.
pub fn bench_trace(
    ctx: &VulkanContext,
    trace: &Trace,
    timer_overhead_ticks: u64,
    config: &RunConfig,
) -> Result<Vec<Row>, String> {
    let prepared = Prepared::new(trace, ctx.all_types_mask(), config.tags)?;
    let names = &config.contenders;
    let mut runs: Vec<Vec<RunStats>> = vec![Vec::new(); names.len()];
    let mut leaks = vec![0u64; names.len()];
    for rep in 0..config.reps.max(1) {
        for k in 0..names.len() {
            let i = (k + rep) % names.len();
            let (stats, leaked) =
                run_contender(&names[i], ctx, &prepared, timer_overhead_ticks, config)?;
            if config.verbose {
                eprintln!(
                    "  {:<16} {:<14} rep {rep}: alloc {:.0} ns, free {:.0} ns, wall {:.1} ms, {} vkAllocateMemory",
                    prepared.name,
                    names[i],
                    stats.alloc_own.median,
                    stats.free_own.median,
                    stats.wall_ms,
                    stats.driver.allocate_calls
                );
            }
            leaks[i] = leaks[i].max(leaked);
            runs[i].push(stats);
        }
    }
    Ok(names
        .iter()
        .zip(runs)
        .zip(leaks)
        .map(|((name, runs), leaked)| {
            aggregate(
                &prepared,
                name,
                &runs,
                leaked,
                crate::clock::ticks_to_ns(timer_overhead_ticks as f64),
                &ctx.info.name,
                config.strategy,
            )
        })
        .collect())
}

fn aggregate(
    prepared: &Prepared<'_>,
    name: &str,
    runs: &[RunStats],
    leaked_bytes: u64,
    timer_overhead_ns: f64,
    device: &str,
    strategy: vkalloc::Strategy,
) -> Row {
    let mut spread = BTreeMap::new();
    let mut field = |key: &'static str, f: &dyn Fn(&RunStats) -> f64| {
        let s = Spread::of(runs.iter().map(f));
        spread.insert(key.to_owned(), s);
        s.median
    };
    let alloc_own_ns_median = field("alloc_own_ns_median", &|r| r.alloc_own.median);
    let free_own_ns_median = field("free_own_ns_median", &|r| r.free_own.median);
    let alloc_own_ns_p99 = field("alloc_own_ns_p99", &|r| r.alloc_own.p99);
    let free_own_ns_p99 = field("free_own_ns_p99", &|r| r.free_own.p99);
    let alloc_own_ns_mean = field("alloc_own_ns_mean", &|r| r.alloc_own.mean);
    let free_own_ns_mean = field("free_own_ns_mean", &|r| r.free_own.mean);
    let alloc_free_own_ns_median = field("alloc_free_own_ns_median", &|r| {
        r.alloc_own.median + r.free_own.median
    });
    let total_ns_per_op = field("total_ns_per_op", &|r| r.total_ns_per_op);
    let wall_ms = field("wall_ms", &|r| r.wall_ms);
    let device_allocations = field("device_allocations", &|r| r.driver.allocate_calls as f64);
    let device_frees = field("device_frees", &|r| r.driver.free_calls as f64);
    let device_allocated_bytes = field("device_allocated_bytes", &|r| {
        r.driver.allocate_bytes as f64
    });
    let driver_ms = field("driver_ms", &|r| {
        (r.driver.allocate_ns + r.driver.free_ns) as f64 / 1e6
    });
    let peak_committed_bytes = field("peak_committed_bytes", &|r| r.peak_committed_bytes as f64);
    let peak_live_bytes = field("peak_live_bytes", &|r| r.peak_live_bytes as f64);
    let committed_to_live_ratio = field("committed_to_live_ratio", &|r| {
        r.peak_committed_bytes as f64 / (r.peak_live_bytes.max(1)) as f64
    });
    let failures = field("failures", &|r| r.failures as f64);
    let defrag = runs.iter().all(|r| r.defrag.is_some()) && !runs.is_empty();
    let mut dfield = |key: &'static str, f: &dyn Fn(&crate::replay::DefragRun) -> f64| {
        defrag.then(|| field(key, &|r| r.defrag.as_ref().map(f).unwrap_or(0.0)))
    };
    let live_at_end_bytes = dfield("live_at_end_bytes", &|d| d.live_at_end_bytes as f64);
    let committed_before_defrag_bytes = dfield("committed_before_defrag_bytes", &|d| {
        d.committed_before_bytes as f64
    });
    let committed_after_defrag_bytes = dfield("committed_after_defrag_bytes", &|d| {
        d.committed_after_bytes as f64
    });
    let defrag_bytes_moved = dfield("defrag_bytes_moved", &|d| d.stats.bytes_moved as f64);
    let defrag_ms = dfield("defrag_ms", &|d| d.ms);
    let defrag_passes = dfield("defrag_passes", &|d| d.stats.passes as f64);
    let defrag_pinned = dfield("defrag_pinned", &|d| d.stats.pinned as f64);
    let largest_free_range_end = if runs.iter().all(|r| r.largest_free_range_end.is_some()) {
        Some(field("largest_free_range_end", &|r| {
            r.largest_free_range_end.unwrap_or(0) as f64
        }))
    } else {
        None
    };
    Row {
        trace: prepared.name.clone(),
        allocator: name.to_owned(),
        strategy: (name == "ours").then(|| strategy.name().to_owned()),
        reps: runs.len(),
        allocs: prepared.summary.allocs,
        frees: prepared.summary.frees,
        alloc_own_ns_median,
        free_own_ns_median,
        alloc_own_ns_p99,
        free_own_ns_p99,
        alloc_own_ns_mean,
        free_own_ns_mean,
        alloc_free_own_ns_median,
        total_ns_per_op,
        wall_ms,
        device_allocations,
        device_frees,
        device_allocated_bytes,
        driver_ms,
        peak_committed_bytes,
        peak_live_bytes,
        committed_to_live_ratio,
        largest_free_range_end,
        failures,
        first_failure: runs.iter().find_map(|r| r.first_failure.clone()),
        check_errors: runs
            .iter()
            .flat_map(|r| r.check_errors.iter().cloned())
            .take(10)
            .collect(),
        at_peak: runs.iter().rev().find_map(|r| r.at_peak.clone()),
        leaked_bytes,
        timer_overhead_ns,
        device: device.to_owned(),
        spread,
        live_at_end_bytes,
        committed_before_defrag_bytes,
        committed_after_defrag_bytes,
        defrag_bytes_moved,
        defrag_ms,
        defrag_passes,
        defrag_pinned,
        defrag_complete: defrag.then(|| {
            runs.iter()
                .filter(|r| r.defrag.as_ref().is_some_and(|d| d.stats.complete))
                .count() as f64
                / runs.len() as f64
        }),
        defrag_error: runs
            .iter()
            .find_map(|r| r.defrag.as_ref().and_then(|d| d.error.clone())),
    }
}

fn mib(bytes: f64) -> String {
    format!("{:.1}", bytes / (1024.0 * 1024.0))
}

/// `value` with the min..max over repetitions in parentheses when they differ.
fn with_range(row: &Row, key: &str, value: f64, digits: usize) -> String {
    match row.spread.get(key) {
        Some(s) if s.max > s.min => format!(
            "{:.*} ({:.*}..{:.*})",
            digits, value, digits, s.min, digits, s.max
        ),
        _ => format!("{value:.digits$}"),
    }
}

/// The result table, as GitHub Markdown: one block per trace, then the
/// ratios theirs/ours (> 1 means ours wins).
pub fn format_table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| trace | allocator | alloc own ns med (p99) | free own ns med (p99) | alloc+free ns (min..max) | total ns/op | wall ms (min..max) | vkAllocateMemory (min..max) | allocated MiB | peak committed MiB | peak live MiB | ratio | largest free at end MiB |"
    );
    let _ = writeln!(
        out,
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} ({:.0}) | {:.0} ({:.0}) | {} | {:.0} | {} | {} | {} | {} | {} | {:.2} | {} |",
            r.trace,
            r.allocator,
            r.alloc_own_ns_median,
            r.alloc_own_ns_p99,
            r.free_own_ns_median,
            r.free_own_ns_p99,
            with_range(r, "alloc_free_own_ns_median", r.alloc_free_own_ns_median, 0),
            r.total_ns_per_op,
            with_range(r, "wall_ms", r.wall_ms, 1),
            with_range(r, "device_allocations", r.device_allocations, 0),
            mib(r.device_allocated_bytes),
            mib(r.peak_committed_bytes),
            mib(r.peak_live_bytes),
            r.committed_to_live_ratio,
            r.largest_free_range_end.map(mib).unwrap_or_else(|| "-".into()),
        );
    }
    let ratios = format_ratios(rows);
    if !ratios.is_empty() {
        out.push('\n');
        out.push_str(&ratios);
    }
    out
}

/// Ratios theirs/ours per trace and baseline: > 1 means ours is faster,
/// makes fewer calls, or commits less.
pub fn format_ratios(rows: &[Row]) -> String {
    let mut out = String::new();
    let ours: BTreeMap<&str, &Row> = rows
        .iter()
        .filter(|r| r.allocator == "ours")
        .map(|r| (r.trace.as_str(), r))
        .collect();
    if ours.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "| trace | theirs/ours | alloc own | free own | alloc+free own | wall | vkAllocateMemory calls | allocated bytes | peak committed |"
    );
    let _ = writeln!(
        out,
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let ratio = |a: f64, b: f64| {
        if b > 0.0 {
            format!("{:.2}", a / b)
        } else {
            "-".into()
        }
    };
    for r in rows.iter().filter(|r| r.allocator != "ours") {
        let Some(o) = ours.get(r.trace.as_str()) else {
            continue;
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.trace,
            r.allocator,
            ratio(r.alloc_own_ns_median, o.alloc_own_ns_median),
            ratio(r.free_own_ns_median, o.free_own_ns_median),
            ratio(r.alloc_free_own_ns_median, o.alloc_free_own_ns_median),
            ratio(r.wall_ms, o.wall_ms),
            ratio(r.device_allocations, o.device_allocations),
            ratio(r.device_allocated_bytes, o.device_allocated_bytes),
            ratio(r.peak_committed_bytes, o.peak_committed_bytes),
        );
    }
    out
}
