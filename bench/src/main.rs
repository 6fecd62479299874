//! `cargo run --release -p bench -- [options]`: replays the standard traces
//! (or given trace files) through vkalloc, VMA and gpu-allocator on one
//! Vulkan device, prints a table with ratios theirs/ours and writes
//! `target/bench/allocators.json`. Run with `--help` for the options.

use std::fs;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use bench::contenders::{BaselineOptions, CONTENDERS, REQUEST_MAPPING};
use bench::corpus::{self, DeviceResolver, DEFAULT_CORPUS_SEED, DEFAULT_CORPUS_SIZE};
use bench::range_bench;
use bench::replay::calibrate_timer_overhead;
use bench::runner::{bench_trace, format_table, RunConfig, Spread};
use bench::sim_replay::{self, SimResolver};
use bench::trace::{generate, Scale, Trace, DEFAULT_SEED, STANDARD_TRACES};
use bench::vkdev::{list_devices, VulkanContext};

const HELP: &str = "\
bench: vkalloc vs VMA (vk-mem 0.5) vs gpu-allocator 0.28, side by side on one Vulkan device

USAGE: cargo run --release -p bench -- [OPTIONS]
       cargo run --release -p bench -- threads [OPTIONS]   (threads benchmark; threads --help)

  --trace FILE           replay this trace file (repeatable) instead of the standard traces
  --traces A,B           only these standard traces (default: all of
                         renderer-mix,streaming-churn,frame-transient,many-small,fragmentation)
  --traces DIR           (an existing directory) also replay every DIR/*.jsonl trace
  --defrag               compact ours at the end of each trace (Full defragmentation, GPU
                         copies) before the final frees; rows gain live_at_end_bytes,
                         committed_before/after_defrag_bytes, defrag_bytes_moved, defrag_ms
  --corpus               run the trace corpus: a seeded sample of generator configurations
                         (requirements from the device), the demo's recorded traces
                         (bench/traces/recorded/*.jsonl, or those of --traces DIR), and the
                         standard traces; prints worst case, geometric mean, Pareto check
  --corpus-seed N        the corpus sample's seed (default 825173086512)
  --corpus-size N        configurations in the sample (default 32)
  --corpus-ops N         operations per corpus trace (default 6000 at small scale, 60000 full;
                         100000 with --corpus-independent)
  --corpus-independent   the corpus sample is of the family of issue 9's independent renderer
                         trace instead (traces indep-NN-...: textures 64 KiB..256 MiB with the
                         driver's dedicated hints, geometry, uniforms, staging, no render
                         targets, a live budget in bytes); recorded and standard traces still
                         load (--only indep keeps the family alone)
  --corpus-budget-mib N  that family's live budget (default 1024; the issue's H200 trace: 2048)
  --only A,B             run only the traces whose names start with A or B (after loading:
                         corpus-17,many-small picks one corpus trace and one standard trace)
  --scale small|full     standard trace scale (default small; full is for a real GPU)
  --seed N               standard trace seed (default 1592598566)
  --reps N               repetitions per trace and allocator, alternating (default 5)
  --allocators A,B       subset of ours,vma,gpu-allocator (default all)
  --strategy S           ours' strategy: balanced (default), min-memory or min-time; every row
                         of ours carries it (`strategy`), with --corpus and --trace alike
  --heap-cap F           with --sim: every heap holds F x the trace's peak live bytes (capacity
                         and the budget ours reads); rows gain cap_bytes, failed allocations
                         count in failures
  --device N             physical device index (default: first discrete GPU, else the first)
  --list-devices         list the physical devices and exit
  --out PATH             JSON rows (default target/bench/allocators.json); a Markdown table
                         is written beside it (.md) and the range results to range.json
  --write-traces DIR     write the standard traces to DIR/<name>.<scale>.jsonl and exit
  --save-traces DIR      also write every trace replayed (the corpus's with the requirements
                         this device resolved) to DIR/<name>.jsonl, for `--sim ... --trace`
  --table-from FILE      print the table of an allocators.json written earlier and exit
  --check                verify every placement (aligned, no overlap) while replaying
  --explain-peak         print each allocator's memory at its committed peak (slows the replay)
  --sim TABLE            replay ours only on the simulated device with a built-in GPU table
                         (nvidia_h200, lavapipe, nvidia_discrete, ...; no Vulkan needed): the
                         standard traces, or with --corpus the sample with synthetic
                         requirements (the table's dedicated-image threshold and heap);
                         prints peak committed/live and driver calls per trace (no times)
  --tags                 give every allocator (and --sim) the trace's tags as allocation names (off by default)
  --vma-ignore-preferred give VMA no dedicated hint for `preferred` (its own rule only)
  --no-memory-budget     don't enable VK_EXT_memory_budget even where present
  --no-range             skip the range-allocator benchmark
  --range-only           run only the range-allocator benchmark (no Vulkan needed)
  -v, --verbose          a line per run

Environment: VKALLOC_BENCH_DESC=block_size=N,keep_empty_blocks=N,recycle_bytes=N,
honour_dedicated_preference_from=N,small_runs_from=N sets ours' AllocatorDesc (policy experiments only).
VKALLOC_BENCH_POLLUTE=N writes N bytes (a byte per 64-byte line) before every timed
operation: own time with the caches cold (64 KiB: the L1; a few MiB: the L2), a diagnosis.
With --sim: VKALLOC_SIM_PLACEMENT_HASH=1 prints a hash of every placement per trace;
VKALLOC_SIM_TIME=1 the quartiles of each call's time here (VKALLOC_BENCH_POLLUTE applies);
VKALLOC_SIM_MARK=1 the address
of the marks loaded around each call (to cut a lackey memory trace into calls);
VKALLOC_SIM_PREFER_FROM=BYTES: the corpus's images and staging buffers of at least BYTES
prefer dedicated memory (the H200's driver: 33554432) instead of the table's image threshold.
VKALLOC_SIM_PEAK_BREAKDOWN=1 prints, per trace, where the committed bytes sat at the committed
peak, per memory type: live bytes in shared blocks, free space in blocks that hold allocations,
empty blocks kept, the recycle bin, memory of its own; device and pinned types summed apart.
";

struct Args {
    traces: Vec<PathBuf>,
    only: Option<Vec<String>>,
    scale: Scale,
    seed: u64,
    reps: usize,
    allocators: Vec<String>,
    device: Option<usize>,
    list_devices: bool,
    out: PathBuf,
    write_traces: Option<PathBuf>,
    /// `--save-traces`: where the replayed traces are written.
    save_traces: Option<PathBuf>,
    table_from: Option<PathBuf>,
    check: bool,
    tags: bool,
    explain_peak: bool,
    baseline: BaselineOptions,
    memory_budget: bool,
    range: bool,
    range_only: bool,
    verbose: bool,
    trace_dir: Option<PathBuf>,
    defrag: bool,
    corpus: bool,
    corpus_seed: u64,
    corpus_size: usize,
    corpus_ops: Option<usize>,
    /// `--corpus-independent`: the sample is [`corpus::sample_independent`]'s.
    corpus_independent: bool,
    corpus_budget: u64,
    /// `--only`: name prefixes of the traces to keep.
    name_prefixes: Option<Vec<String>>,
    sim: Option<String>,
    /// `--strategy`: ours' strategy.
    strategy: vkalloc::Strategy,
    /// `--heap-cap`: heaps capped at this times the trace's peak live bytes.
    heap_cap: Option<f64>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        traces: Vec::new(),
        only: None,
        scale: Scale::Small,
        seed: DEFAULT_SEED,
        reps: 5,
        allocators: CONTENDERS.iter().map(|s| s.to_string()).collect(),
        device: None,
        list_devices: false,
        out: PathBuf::from("target/bench/allocators.json"),
        write_traces: None,
        save_traces: None,
        table_from: None,
        check: false,
        tags: false,
        explain_peak: false,
        baseline: BaselineOptions::default(),
        memory_budget: true,
        range: true,
        range_only: false,
        verbose: false,
        trace_dir: None,
        defrag: false,
        corpus: false,
        corpus_seed: DEFAULT_CORPUS_SEED,
        corpus_size: DEFAULT_CORPUS_SIZE,
        corpus_ops: None,
        corpus_independent: false,
        corpus_budget: corpus::INDEPENDENT_BUDGET,
        name_prefixes: None,
        sim: None,
        strategy: vkalloc::Strategy::default(),
        heap_cap: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--trace" => a.traces.push(value("--trace")?.into()),
            "--traces" => {
                let v = value("--traces")?;
                if Path::new(&v).is_dir() {
                    a.trace_dir = Some(v.into());
                    continue;
                }
                let list: Vec<String> = v.split(',').map(str::to_owned).collect();
                for t in &list {
                    if !STANDARD_TRACES.contains(&t.as_str()) {
                        return Err(format!("unknown standard trace {t:?}"));
                    }
                }
                a.only = Some(list);
            }
            "--scale" => a.scale = value("--scale")?.parse()?,
            "--seed" => {
                a.seed = value("--seed")?
                    .parse()
                    .map_err(|e| format!("--seed: {e}"))?
            }
            "--reps" => {
                a.reps = value("--reps")?
                    .parse()
                    .map_err(|e| format!("--reps: {e}"))?
            }
            "--allocators" => {
                a.allocators = value("--allocators")?
                    .split(',')
                    .map(str::to_owned)
                    .collect();
                for n in &a.allocators {
                    if !CONTENDERS.contains(&n.as_str()) {
                        return Err(format!("unknown allocator {n:?}"));
                    }
                }
            }
            "--device" => {
                a.device = Some(
                    value("--device")?
                        .parse()
                        .map_err(|e| format!("--device: {e}"))?,
                )
            }
            "--list-devices" => a.list_devices = true,
            "--out" => a.out = value("--out")?.into(),
            "--write-traces" => a.write_traces = Some(value("--write-traces")?.into()),
            "--save-traces" => a.save_traces = Some(value("--save-traces")?.into()),
            "--table-from" => a.table_from = Some(value("--table-from")?.into()),
            "--check" => a.check = true,
            "--tags" => a.tags = true,
            "--explain-peak" => a.explain_peak = true,
            "--sim" => a.sim = Some(value("--sim")?),
            "--strategy" => a.strategy = value("--strategy")?.parse()?,
            "--heap-cap" => {
                let f: f64 = value("--heap-cap")?
                    .parse()
                    .map_err(|e| format!("--heap-cap: {e}"))?;
                if !(f.is_finite() && f > 0.0) {
                    return Err(format!("--heap-cap {f}: a positive number"));
                }
                a.heap_cap = Some(f);
            }
            "--vma-ignore-preferred" => a.baseline.vma_ignore_preferred = true,
            "--no-memory-budget" => a.memory_budget = false,
            "--no-range" => a.range = false,
            "--range-only" => a.range_only = true,
            "-v" | "--verbose" => a.verbose = true,
            "--defrag" => a.defrag = true,
            "--corpus" => a.corpus = true,
            "--corpus-seed" => {
                a.corpus_seed = value("--corpus-seed")?
                    .parse()
                    .map_err(|e| format!("--corpus-seed: {e}"))?
            }
            "--corpus-size" => {
                a.corpus_size = value("--corpus-size")?
                    .parse()
                    .map_err(|e| format!("--corpus-size: {e}"))?
            }
            "--corpus-ops" => {
                a.corpus_ops = Some(
                    value("--corpus-ops")?
                        .parse()
                        .map_err(|e| format!("--corpus-ops: {e}"))?,
                )
            }
            "--corpus-independent" => a.corpus_independent = true,
            "--corpus-budget-mib" => {
                let mib: u64 = value("--corpus-budget-mib")?
                    .parse()
                    .map_err(|e| format!("--corpus-budget-mib: {e}"))?;
                a.corpus_budget = mib
                    .checked_mul(1 << 20)
                    .filter(|&b| b > 0)
                    .ok_or("--corpus-budget-mib: out of range")?;
            }
            "--only" => {
                a.name_prefixes = Some(value("--only")?.split(',').map(str::to_owned).collect())
            }
            "-h" | "--help" => {
                print!("{HELP}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    Ok(a)
}

fn standard_names(a: &Args) -> Vec<String> {
    a.only
        .clone()
        .unwrap_or_else(|| STANDARD_TRACES.iter().map(|s| s.to_string()).collect())
}

fn write_traces(a: &Args, dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for name in standard_names(a) {
        let trace = generate(&name, a.seed, a.scale).expect("standard trace");
        let path = dir.join(format!("{name}.{}.jsonl", a.scale));
        let file = fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        trace
            .write(BufWriter::new(file))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let s = trace.validate().map_err(|e| e.to_string())?;
        println!(
            "{}: {} allocs, {} frees, {} frames, peak {} live / {:.1} MiB",
            path.display(),
            s.allocs,
            s.frees,
            s.frames,
            s.peak_live_count,
            s.peak_live_bytes as f64 / (1 << 20) as f64
        );
    }
    Ok(())
}

/// `--save-traces DIR`: every trace as replayed here, requirements included,
/// so a simulated replay (`--sim TABLE --trace FILE`) sees this device's.
fn save_traces(traces: &[Trace], dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for t in traces {
        // A trace's name comes from its file for recorded traces: only
        // letters, digits, '.', '_' and '-' reach the path, so no name
        // leaves `dir`.
        let name: String = t
            .header
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let name = name.trim_start_matches('.');
        let path = dir.join(format!("{name}.jsonl"));
        let file = fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        t.write(BufWriter::new(file))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    println!("{} traces written to {}", traces.len(), dir.display());
    Ok(())
}

fn run_range(a: &Args, out_dir: &Path) -> Result<(), String> {
    let reps = a.reps.max(1);
    let seqs = range_bench::standard_sequences(a.seed, a.scale == Scale::Full);
    println!(
        "\n## Range allocators alone (no Vulkan), ns per operation, median of {reps} (min..max)\n"
    );
    println!("| sequence | allocator | alloc ns | free ns | vma/ours alloc | vma/ours free |");
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    let mut json = Vec::new();
    for seq in &seqs {
        let mut per: Vec<(&'static str, Vec<range_bench::RangeRun>)> = Vec::new();
        for _ in 0..reps {
            for (name, run) in range_bench::run_all(seq) {
                match per.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, v)) => v.push(run),
                    None => per.push((name, vec![run])),
                }
            }
        }
        let spreads: Vec<(&str, Spread, Spread, u64)> = per
            .iter()
            .map(|(n, runs)| {
                (
                    *n,
                    Spread::of(runs.iter().map(|r| r.alloc_ns)),
                    Spread::of(runs.iter().map(|r| r.free_ns)),
                    runs.iter().map(|r| r.failures).max().unwrap_or(0),
                )
            })
            .collect();
        for (name, alloc, free, failures) in &spreads {
            // Compare each VMA row with ours of the same algorithm family.
            let ours_name = if name.starts_with("vma-virtual-linear") {
                spreads.iter().find(|s| s.0.starts_with("ours-linear"))
            } else if name.starts_with("vma-virtual-tlsf") {
                spreads.iter().find(|s| s.0 == "ours-tlsf")
            } else {
                None
            };
            let (ra, rf) = match ours_name {
                Some(o) => (
                    format!("{:.2}", alloc.median / o.1.median),
                    format!("{:.2}", free.median / o.2.median),
                ),
                None => (String::new(), String::new()),
            };
            println!(
                "| {} | {} | {:.1} ({:.1}..{:.1}) | {:.1} ({:.1}..{:.1}) | {} | {} |{}",
                seq.name,
                name,
                alloc.median,
                alloc.min,
                alloc.max,
                free.median,
                free.min,
                free.max,
                ra,
                rf,
                if *failures > 0 {
                    format!(" {failures} failed")
                } else {
                    String::new()
                }
            );
            json.push(serde_json::json!({
                "sequence": seq.name,
                "allocator": name,
                "alloc_ns_median": alloc.median,
                "free_ns_median": free.median,
                "alloc_ns": alloc,
                "free_ns": free,
                "failures": failures,
                "reps": reps,
            }));
        }
    }
    // Fragmentation: the smallest block each general-purpose algorithm runs
    // the random sequence in, against the peak of live bytes.
    if let Some(seq) = seqs.iter().find(|s| s.name == "tlsf-random") {
        let live = range_bench::peak_live(seq);
        let tlsf = range_bench::capacity_needed(|c| vkalloc::range::TlsfAllocator::new(c, 1), seq);
        let buddy =
            range_bench::capacity_needed(|c| vkalloc::range::BuddyAllocator::new(c, 1), seq);
        println!(
            "\n{}: peak live {:.1} MiB; the smallest block that runs it without a failure: \
             ours-tlsf {:.1} MiB ({:.2}x live), ours-buddy {:.1} MiB ({:.2}x live)",
            seq.name,
            live as f64 / 1048576.0,
            tlsf as f64 / 1048576.0,
            tlsf as f64 / live as f64,
            buddy as f64 / 1048576.0,
            buddy as f64 / live as f64,
        );
        json.push(serde_json::json!({
            "sequence": seq.name,
            "peak_live_bytes": live,
            "capacity_needed_bytes": { "ours-tlsf": tlsf, "ours-buddy": buddy },
        }));
    }
    let path = out_dir.join("range.json");
    fs::write(
        &path,
        serde_json::to_string_pretty(&json).expect("serializable"),
    )
    .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(())
}

/// `bench/traces/recorded`, from the working directory (the repository
/// root) or from where the bench was built.
fn recorded_dir() -> Option<PathBuf> {
    [
        PathBuf::from("bench/traces/recorded"),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/recorded"),
    ]
    .into_iter()
    .find(|p| p.is_dir())
}

/// `dir`'s `*.jsonl` files, sorted.
fn trace_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    Ok(files)
}

fn read_trace(p: &Path) -> Result<Trace, String> {
    let f = fs::File::open(p).map_err(|e| format!("{}: {e}", p.display()))?;
    Trace::read(BufReader::new(f)).map_err(|e| format!("{}: {e}", p.display()))
}

/// A recorded trace (`--record-trace` of the demo) holds the recording
/// device's `memory_type_bits`, which name other types on another device:
/// when its note's memory types differ from `ctx`'s, every request may use
/// any type (the replayer masks them to the device's, and usage decides).
fn adapt_recorded(t: Trace, ctx: &VulkanContext) -> Trace {
    widen_types(t, &ctx.memory_type_flags())
}

/// [`adapt_recorded`] for a device whose memory types have `flags`.
fn widen_types(mut t: Trace, flags: &[u32]) -> Trace {
    let Some(recorded) = vkalloc::trace::memory_types_of_note(&t.header.note) else {
        return t;
    };
    if recorded == flags {
        return t;
    }
    for e in &mut t.events {
        if let vkalloc::trace::TraceEvent::Alloc(a) = e {
            a.memory_type_bits = u32::MAX;
        }
    }
    println!(
        "{}: recorded on other memory types ({}): memory_type_bits widened to every type",
        t.header.name, t.header.note
    );
    t
}

/// The traces to run: with `--corpus`, the sample's traces (requirements
/// from `ctx`), then those of `--traces DIR` (by default the recorded ones
/// in `bench/traces/recorded`), then the standard traces;
/// otherwise the `--trace` files (and `--traces DIR`) or the standard traces.
/// The corpus sample's configurations and operations per trace.
fn corpus_configs(a: &Args) -> (Vec<corpus::CorpusConfig>, usize) {
    if a.corpus_independent {
        let configs = corpus::sample_independent(a.corpus_seed, a.corpus_size, a.corpus_budget);
        (configs, a.corpus_ops.unwrap_or(corpus::INDEPENDENT_OPS))
    } else {
        let configs = corpus::sample(a.corpus_seed, a.corpus_size);
        (
            configs,
            a.corpus_ops.unwrap_or_else(|| corpus::default_ops(a.scale)),
        )
    }
}

fn load_traces(a: &Args, ctx: &VulkanContext) -> Result<Vec<Trace>, String> {
    let mut traces = Vec::new();
    if a.corpus {
        let (configs, ops) = corpus_configs(a);
        let mut resolver = DeviceResolver::new(ctx);
        println!(
            "corpus: seed {} (--corpus-seed), {} configurations, {ops} operations each, scale {}",
            a.corpus_seed,
            configs.len(),
            a.scale
        );
        for c in &configs {
            let t = corpus::generate(c, &mut resolver, a.scale, ops);
            println!("  {}: {}", c.name(), c.describe());
            traces.push(t);
        }
    }
    for p in &a.traces {
        traces.push(adapt_recorded(read_trace(p)?, ctx));
    }
    // The corpus includes the demo's recorded traces (bench/traces/recorded)
    // unless `--traces DIR` names another directory.
    let recorded = a.corpus.then(recorded_dir).flatten();
    if let Some(dir) = a.trace_dir.as_ref().or(recorded.as_ref()) {
        for p in trace_files(dir)? {
            traces.push(adapt_recorded(read_trace(&p)?, ctx));
        }
    }
    if a.corpus || (a.traces.is_empty() && a.trace_dir.is_none()) {
        for n in standard_names(a) {
            traces.push(generate(&n, a.seed, a.scale).expect("standard trace"));
        }
    }
    // Rows are keyed by trace name: a second trace of a name (a recorded
    // file of a standard trace, say) becomes `<name>#2`.
    let mut seen = std::collections::HashMap::<String, usize>::new();
    for t in &mut traces {
        let n = seen.entry(t.header.name.clone()).or_insert(0);
        *n += 1;
        if *n > 1 {
            t.header.name = format!("{}#{n}", t.header.name);
        }
    }
    if let Some(prefixes) = &a.name_prefixes {
        traces.retain(|t| {
            prefixes
                .iter()
                .any(|p| t.header.name.starts_with(p.as_str()))
        });
        if traces.is_empty() {
            return Err(format!(
                "--only {}: no trace of that name",
                prefixes.join(",")
            ));
        }
    }
    Ok(traces)
}

fn run() -> Result<(), String> {
    let a = parse_args()?;
    if a.list_devices {
        for line in list_devices()? {
            println!("{line}");
        }
        return Ok(());
    }
    if let Some(dir) = &a.write_traces {
        return write_traces(&a, dir);
    }
    if let Some(path) = &a.table_from {
        let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let rows: Vec<bench::runner::Row> =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        print!("{}", format_table(&rows));
        return Ok(());
    }
    let out_dir = a
        .out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    if a.range_only {
        return run_range(&a, &out_dir);
    }
    if let Some(table) = &a.sim {
        return run_sim(&a, table);
    }

    if a.heap_cap.is_some() {
        return Err(
            "--heap-cap runs with --sim only: on a device the budget ours reads can't be capped yet"
                .into(),
        );
    }
    let ctx = VulkanContext::new(a.device, a.memory_budget)?;
    let i = &ctx.info;
    println!(
        "device {}: {} ({}), {}, Vulkan {}, VK_EXT_memory_budget {}",
        i.index,
        i.name,
        i.device_type,
        i.driver,
        i.api_version,
        if i.memory_budget { "on" } else { "off" }
    );
    println!("memory types: {}", i.memory_types.join("; "));
    println!("memory heaps: {}", i.memory_heaps.join("; "));
    let traces = load_traces(&a, &ctx)?;
    if let Some(dir) = &a.save_traces {
        save_traces(&traces, dir)?;
    }
    let overhead = calibrate_timer_overhead();
    println!(
        "clock: {}; timer overhead subtracted per operation: {:.1} ns",
        bench::clock::describe(),
        bench::clock::ticks_to_ns(overhead as f64)
    );

    let config = RunConfig {
        reps: a.reps,
        contenders: a.allocators.clone(),
        check: a.check,
        baseline: a.baseline,
        verbose: a.verbose,
        tags: a.tags,
        explain_peak: a.explain_peak,
        defrag: a.defrag,
        strategy: a.strategy,
    };
    let mut rows = Vec::new();
    for trace in &traces {
        let s = trace.validate().map_err(|e| e.to_string())?;
        eprintln!(
            "{} ({}, {} allocs, {} frees, peak {} live / {:.1} MiB) ...",
            trace.header.name,
            trace.header.scale,
            s.allocs,
            s.frees,
            s.peak_live_count,
            s.peak_live_bytes as f64 / (1 << 20) as f64
        );
        let r = bench_trace(&ctx, trace, overhead, &config)?;
        for row in &r {
            if row.failures > 0.0 {
                eprintln!(
                    "  warning: {} had {} failed allocations: {}",
                    row.allocator,
                    row.failures,
                    row.first_failure.as_deref().unwrap_or("")
                );
            }
            if let Some(p) = &row.at_peak {
                eprintln!("  {} at peak: {p}", row.allocator);
            }
            for e in &row.check_errors {
                eprintln!("  error: {}: {e}", row.allocator);
            }
            if row.leaked_bytes > 0 {
                eprintln!(
                    "  warning: {} left {} bytes of VkDeviceMemory after being dropped",
                    row.allocator, row.leaked_bytes
                );
            }
        }
        rows.extend(r);
    }
    drop(ctx);

    let mut table = format_table(&rows);
    println!(
        "\n## Allocators, median of {} runs each (own = outside vkAllocateMemory/vkFreeMemory)\n",
        a.reps.max(1)
    );
    println!("{table}");
    if a.corpus {
        let summary = corpus::format_summary(&rows);
        println!(
            "\n## Trace corpus (seed {}, {} configurations, scale {}, ours' strategy {})\n\n{summary}",
            a.corpus_seed, a.corpus_size, a.scale, a.strategy
        );
        table.push_str(&format!(
            "\n## Trace corpus (seed {}, ours' strategy {})\n\n{summary}",
            a.corpus_seed, a.strategy
        ));
    }
    if a.defrag {
        let d = corpus::format_defrag(&rows);
        println!("\n## Ours compacted at the end of each trace (--defrag)\n\n{d}");
        table.push_str(&format!("\n## --defrag\n\n{d}"));
    }
    fs::write(
        &a.out,
        serde_json::to_string_pretty(&rows).expect("serializable"),
    )
    .map_err(|e| format!("{}: {e}", a.out.display()))?;
    let md = a.out.with_extension("md");
    fs::write(&md, format!("{table}\n{REQUEST_MAPPING}\n"))
        .map_err(|e| format!("{}: {e}", md.display()))?;
    println!("wrote {} and {}", a.out.display(), md.display());
    if a.range {
        run_range(&a, &out_dir)?;
    }
    Ok(())
}

/// `--sim TABLE`: ours alone on the simulated device.
fn run_sim(a: &Args, name: &str) -> Result<(), String> {
    let table = vkalloc::sim::table(name).ok_or_else(|| {
        format!(
            "--sim: unknown table {name:?} (one of {})",
            vkalloc::sim::TABLE_NAMES.join(", ")
        )
    })?;
    let desc = bench::contenders::ours::desc_from_env(a.strategy)?;
    let mut traces = Vec::new();
    if a.corpus {
        let mut resolver = SimResolver::new(table.clone());
        let (configs, ops) = corpus_configs(a);
        for c in configs {
            traces.push(corpus::generate(&c, &mut resolver, a.scale, ops));
        }
    }
    for p in &a.traces {
        traces.push(read_trace(p)?);
    }
    // As on a device: the corpus includes the demo's recorded traces, their
    // memory types widened when they were recorded on other ones.
    let recorded = a.corpus.then(recorded_dir).flatten();
    if let Some(dir) = a.trace_dir.as_ref().or(recorded.as_ref()) {
        let flags: Vec<u32> = table
            .memory_properties
            .types
            .iter()
            .map(|t| t.flags.0)
            .collect();
        for p in trace_files(dir)? {
            traces.push(widen_types(read_trace(&p)?, &flags));
        }
    }
    if a.corpus || (a.traces.is_empty() && a.trace_dir.is_none()) {
        for n in standard_names(a) {
            traces.push(generate(&n, a.seed, a.scale).expect("standard trace"));
        }
    }
    if let Some(prefixes) = &a.name_prefixes {
        traces.retain(|t| {
            prefixes
                .iter()
                .any(|p| t.header.name.starts_with(p.as_str()))
        });
    }
    println!(
        "simulated device {} ({} memory types), {} traces, corpus seed {}, scale {}, {desc:?}",
        table.name,
        table.memory_properties.types.len(),
        traces.len(),
        a.corpus_seed,
        a.scale
    );
    let mut rows = Vec::new();
    for t in &traces {
        let row = sim_replay::replay_capped(t, &table, desc, a.explain_peak, a.tags, a.heap_cap)?;
        if let Some(p) = &row.at_peak {
            println!("  {} at peak: {p}", row.trace);
        }
        if let Some(c) = &row.churn_report {
            println!("  {} {c}", row.trace);
        }
        rows.push(row);
    }
    let largest_heap = sim_replay::largest_heap(&table);
    print!("\n{}", sim_replay::format_rows(&rows, largest_heap));
    Ok(())
}

fn main() -> ExitCode {
    // `bench threads ...`: the threads benchmark (bench::threads), its own options.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("threads") => bench::threads::main(&args[1..]),
        _ => run(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}
