//! `bench threads`: allocation throughput with 1..N threads on one allocator.
//!
//! Each thread keeps [`LIVE`] host-visible buffers of 256 B to 1 MiB (uniform
//! in log2) and replaces one at a time (free one, allocate one: a *pair*);
//! the figure is pairs per second summed over the threads, over a fixed
//! wall-clock window after every thread has filled its set. Two modes:
//! `type` (every thread in one memory type, the allocator's default blocks)
//! and `pools` (a pool of one memory type per thread). Contenders: vkalloc,
//! VMA (vk-mem; internally synchronised, a `VmaPool` per thread in `pools`)
//! and gpu-allocator behind a `Mutex` (in `pools`, an allocator and mutex
//! per thread: it has no pools). With `--sim`, vkalloc alone on the
//! simulated device (the H200's memory table): no driver under it.
//!
//! `cargo run --release -p bench -- threads --help` lists the options.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use ash::vk;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vk_mem::Alloc;
use vkalloc::device::MemoryDevice;
use vkalloc::sim::{tables, SimDevice};
use vkalloc::vk::{AshDevice, AshDeviceOptions};
use vkalloc::{
    AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, MemoryUsage, PoolDesc, PoolId,
    ResourceKind,
};

use crate::runner::Spread;
use crate::vkdev::{self, stand_in, StandInRequirements, VulkanContext};

/// Live buffers per thread.
pub const LIVE: usize = 64;

/// Alignment asked for every buffer.
const ALIGNMENT: u64 = 256;

const HELP: &str = "\
bench threads: alloc+free pairs per second with 1..N threads, vkalloc vs VMA vs gpu-allocator

USAGE: cargo run --release -p bench -- threads [OPTIONS]

  --threads A,B,..   thread counts (default 1,2,4,8,16)
  --modes M,..       type (every thread in one memory type), pools (a pool per thread);
                     default type,pools
  --allocators A,..  subset of ours,vma,gpu-allocator (default all)
  --seconds S        measured window per run (default 0.5)
  --reps N           repetitions per cell, alternating allocators (default 5); medians
  --sim              vkalloc alone on the simulated device (H200 table), no Vulkan
  --device N         physical device index (default as the main bench)
  --no-memory-budget don't enable VK_EXT_memory_budget
";

/// Where a run's buffers go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every thread in one memory type.
    Type,
    /// A pool (of the same memory type) per thread.
    Pools,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Type => "type",
            Mode::Pools => "pools",
        }
    }
}

/// The options.
#[derive(Clone, Debug)]
pub struct Config {
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Modes.
    pub modes: Vec<Mode>,
    /// Contenders by name.
    pub allocators: Vec<String>,
    /// The measured window.
    pub window: Duration,
    /// Repetitions per cell.
    pub reps: usize,
    /// vkalloc on the simulated device.
    pub sim: bool,
    /// Physical device index.
    pub device: Option<usize>,
    /// Enable `VK_EXT_memory_budget`.
    pub memory_budget: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            threads: vec![1, 2, 4, 8, 16],
            modes: vec![Mode::Type, Mode::Pools],
            allocators: vec!["ours".into(), "vma".into(), "gpu-allocator".into()],
            window: Duration::from_millis(500),
            reps: 5,
            sim: false,
            device: None,
            memory_budget: true,
        }
    }
}

fn parse(args: &[String]) -> Result<Config, String> {
    let mut c = Config::default();
    let mut it = args.iter();
    let list = |v: Option<&String>, flag: &str| -> Result<Vec<String>, String> {
        let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
        Ok(v.split(',').map(str::to_string).collect())
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--threads" => {
                c.threads = list(it.next(), arg)?
                    .iter()
                    .map(|s| s.parse::<usize>().map_err(|e| format!("--threads: {e}")))
                    .collect::<Result<_, _>>()?;
                if c.threads.contains(&0) {
                    return Err("--threads: 0 threads".into());
                }
            }
            "--modes" => {
                c.modes = list(it.next(), arg)?
                    .iter()
                    .map(|s| match s.as_str() {
                        "type" => Ok(Mode::Type),
                        "pools" => Ok(Mode::Pools),
                        other => Err(format!("--modes: unknown mode {other:?}")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--allocators" => {
                c.allocators = list(it.next(), arg)?;
                if let Some(bad) = c
                    .allocators
                    .iter()
                    .find(|a| !["ours", "vma", "gpu-allocator"].contains(&a.as_str()))
                {
                    return Err(format!("--allocators: unknown allocator {bad:?}"));
                }
            }
            "--seconds" => {
                let s: f64 = it
                    .next()
                    .ok_or("--seconds needs a value")?
                    .parse()
                    .map_err(|e| format!("--seconds: {e}"))?;
                if !(s > 0.0 && s < 3600.0) {
                    return Err("--seconds: between 0 and 3600".into());
                }
                c.window = Duration::from_secs_f64(s);
            }
            "--reps" => {
                c.reps = it
                    .next()
                    .ok_or("--reps needs a value")?
                    .parse()
                    .map_err(|e| format!("--reps: {e}"))?;
                c.reps = c.reps.max(1);
            }
            "--sim" => c.sim = true,
            "--device" => {
                c.device = Some(
                    it.next()
                        .ok_or("--device needs a value")?
                        .parse()
                        .map_err(|e| format!("--device: {e}"))?,
                )
            }
            "--no-memory-budget" => c.memory_budget = false,
            "-h" | "--help" => {
                print!("{HELP}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (see threads --help)")),
        }
    }
    if c.sim {
        c.allocators.retain(|a| a == "ours");
        if c.allocators.is_empty() {
            return Err("--sim runs vkalloc only: add ours to --allocators".into());
        }
    }
    Ok(c)
}

/// An allocator shared by threads.
trait Shared: Sync {
    type Handle: Send;
    /// A thread's pool (`pools` mode).
    type Pool: Send + Sync;
    fn make_pool(&self, thread: usize) -> Result<Self::Pool, String>;
    fn allocate(&self, size: u64, pool: Option<&Self::Pool>) -> Result<Self::Handle, String>;
    fn free(&self, handle: Self::Handle, pool: Option<&Self::Pool>);
    fn drop_pool(&self, pool: Self::Pool);
}

/// 256 B to 1 MiB, uniform in log2.
fn buffer_size(rng: &mut ChaCha8Rng) -> u64 {
    let bits = rng.gen_range(8.0f64..=20.0);
    (2f64.powf(bits) as u64).max(256)
}

/// One run: `threads` threads, each filling its set, then replacing one
/// buffer at a time until the window closes. Returns pairs per second.
fn run<S: Shared>(shared: &S, threads: usize, mode: Mode, window: Duration) -> Result<f64, String> {
    let pools: Vec<Option<S::Pool>> = (0..threads)
        .map(|t| match mode {
            Mode::Type => Ok(None),
            Mode::Pools => shared.make_pool(t).map(Some),
        })
        .collect::<Result<_, _>>()?;
    let stop = AtomicBool::new(false);
    let ready = Barrier::new(threads + 1);
    let done = Barrier::new(threads + 1);
    let result = std::thread::scope(|s| {
        let workers: Vec<_> = pools
            .iter()
            .enumerate()
            .map(|(t, pool)| {
                let (stop, ready, done) = (&stop, &ready, &done);
                s.spawn(move || -> Result<u64, String> {
                    let pool = pool.as_ref();
                    let mut rng = ChaCha8Rng::seed_from_u64(0x7468_7265 ^ t as u64);
                    let mut live = Vec::with_capacity(LIVE);
                    let mut error = None;
                    for _ in 0..LIVE {
                        match shared.allocate(buffer_size(&mut rng), pool) {
                            Ok(h) => live.push(h),
                            Err(e) => {
                                error = Some(e);
                                break;
                            }
                        }
                    }
                    // Sizes and slots drawn ahead, so the loop times the
                    // allocator, not the generator.
                    let plan: Vec<(usize, u64)> = (0..4096)
                        .map(|_| (rng.gen_range(0..LIVE), buffer_size(&mut rng)))
                        .collect();
                    ready.wait();
                    let mut pairs = 0u64;
                    if error.is_none() {
                        'outer: while !stop.load(Ordering::Relaxed) {
                            // The flag is read every 64 pairs: written once,
                            // it costs no shared traffic.
                            for _ in 0..64 {
                                let (slot, size) = plan[(pairs % 4096) as usize];
                                match shared.allocate(size, pool) {
                                    Ok(h) => {
                                        let old = std::mem::replace(&mut live[slot], h);
                                        shared.free(old, pool);
                                    }
                                    Err(e) => {
                                        error = Some(e);
                                        break 'outer;
                                    }
                                }
                                pairs += 1;
                            }
                        }
                    }
                    done.wait();
                    for h in live {
                        shared.free(h, pool);
                    }
                    match error {
                        Some(e) => Err(e),
                        None => Ok(pairs),
                    }
                })
            })
            .collect();
        ready.wait();
        let start = Instant::now();
        std::thread::sleep(window);
        stop.store(true, Ordering::Relaxed);
        done.wait();
        let elapsed = start.elapsed().as_secs_f64();
        let mut total = 0u64;
        for w in workers {
            total += w.join().map_err(|_| "a worker panicked".to_string())??;
        }
        Ok(total as f64 / elapsed)
    });
    for pool in pools.into_iter().flatten() {
        shared.drop_pool(pool);
    }
    result
}

// ---- vkalloc ---------------------------------------------------------------

struct Ours<D: MemoryDevice> {
    allocator: Allocator<D>,
    memory_type_bits: u32,
}

impl<D: MemoryDevice> Shared for Ours<D> {
    type Handle = vkalloc::Allocation;
    type Pool = PoolId;

    fn make_pool(&self, thread: usize) -> Result<PoolId, String> {
        self.allocator
            .create_pool(&PoolDesc {
                usage: MemoryUsage::Upload,
                ..PoolDesc::new(format!("thread {thread}"))
            })
            .map_err(|e| format!("vkalloc: {e}"))
    }

    #[inline]
    fn allocate(&self, size: u64, pool: Option<&PoolId>) -> Result<Self::Handle, String> {
        let mut options = AllocationOptions::usage(MemoryUsage::Upload);
        if let Some(&pool) = pool {
            options = options.in_pool(pool);
        }
        self.allocator
            .allocate(&AllocationDesc {
                size,
                alignment: ALIGNMENT,
                memory_type_bits: self.memory_type_bits,
                kind: ResourceKind::Buffer,
                options,
                ..AllocationDesc::default()
            })
            .map_err(|e| format!("vkalloc: {e}"))
    }

    #[inline]
    fn free(&self, handle: Self::Handle, _pool: Option<&PoolId>) {
        // A failure is a bug; it shows in the leak report at the end.
        let _ = self.allocator.free(handle);
    }

    fn drop_pool(&self, pool: PoolId) {
        let _ = self.allocator.destroy_pool(pool);
    }
}

// ---- VMA -------------------------------------------------------------------

struct Vma {
    allocator: Arc<vk_mem::Allocator>,
    memory_type_bits: u32,
}

impl Vma {
    fn info() -> vk_mem::AllocationCreateInfo {
        use vk::MemoryPropertyFlags as F;
        // As the main bench's `upload`.
        vk_mem::AllocationCreateInfo {
            usage: vk_mem::MemoryUsage::Unknown,
            required_flags: F::HOST_VISIBLE,
            preferred_flags: F::HOST_COHERENT | F::DEVICE_LOCAL,
            ..Default::default()
        }
    }
}

impl Shared for Vma {
    type Handle = vk_mem::Allocation;
    type Pool = vk_mem::AllocatorPool;

    fn make_pool(&self, _thread: usize) -> Result<Self::Pool, String> {
        // SAFETY: a plain query of the allocator's memory types.
        let memory_type_index = unsafe {
            self.allocator
                .find_memory_type_index(self.memory_type_bits, &Self::info())
        }
        .map_err(|e| format!("vmaFindMemoryTypeIndex: {e}"))?;
        self.allocator
            .create_pool(&vk_mem::PoolCreateInfo {
                memory_type_index,
                ..Default::default()
            })
            .map_err(|e| format!("vmaCreatePool: {e}"))
    }

    #[inline]
    fn allocate(&self, size: u64, pool: Option<&Self::Pool>) -> Result<Self::Handle, String> {
        let handle = stand_in(StandInRequirements {
            size,
            alignment: ALIGNMENT,
            memory_type_bits: self.memory_type_bits,
            prefers_dedicated: false,
            requires_dedicated: false,
        });
        let info = Self::info();
        let buffer = vk::Handle::from_raw(handle);
        // SAFETY: the stand-in handle only reaches this device's requirements
        // queries (answered by the bench, per thread) and is stripped from
        // vkAllocateMemory; the allocation is freed with this allocator.
        let result = unsafe {
            match pool {
                Some(pool) => pool.allocate_memory_for_buffer(buffer, &info),
                None => self.allocator.allocate_memory_for_buffer(buffer, &info),
            }
        };
        result.map_err(|e| format!("vmaAllocateMemoryForBuffer: {e}"))
    }

    #[inline]
    fn free(&self, mut handle: Self::Handle, _pool: Option<&Self::Pool>) {
        // SAFETY: `handle` was allocated by this allocator (or one of its
        // pools) and is freed once.
        unsafe { self.allocator.free_memory(&mut handle) };
    }

    fn drop_pool(&self, pool: Self::Pool) {
        drop(pool);
    }
}

// ---- gpu-allocator -----------------------------------------------------------

struct GpuAlloc {
    /// The shared allocator (`type` mode).
    allocator: Mutex<gpu_allocator::vulkan::Allocator>,
    ctx: GpuAllocCtx,
}

/// What a new gpu-allocator needs.
struct GpuAllocCtx {
    instance: ash::Instance,
    device: ash::Device,
    physical_device: vk::PhysicalDevice,
    memory_type_bits: u32,
}

impl GpuAllocCtx {
    fn create(&self) -> Result<gpu_allocator::vulkan::Allocator, String> {
        let mut debug_settings = gpu_allocator::AllocatorDebugSettings::default();
        debug_settings.log_leaks_on_shutdown = false;
        gpu_allocator::vulkan::Allocator::new(&gpu_allocator::vulkan::AllocatorCreateDesc {
            instance: self.instance.clone(),
            device: self.device.clone(),
            physical_device: self.physical_device,
            debug_settings,
            buffer_device_address: false,
            allocation_sizes: gpu_allocator::AllocationSizes::default(),
        })
        .map_err(|e| format!("gpu-allocator: {e}"))
    }
}

impl Shared for GpuAlloc {
    type Handle = gpu_allocator::vulkan::Allocation;
    /// gpu-allocator has no pools: a thread's "pool" is an allocator of its
    /// own behind a mutex of its own.
    type Pool = Mutex<gpu_allocator::vulkan::Allocator>;

    fn make_pool(&self, _thread: usize) -> Result<Self::Pool, String> {
        self.ctx.create().map(Mutex::new)
    }

    #[inline]
    fn allocate(&self, size: u64, pool: Option<&Self::Pool>) -> Result<Self::Handle, String> {
        let desc = gpu_allocator::vulkan::AllocationCreateDesc {
            name: "",
            requirements: vk::MemoryRequirements {
                size,
                alignment: ALIGNMENT,
                memory_type_bits: self.ctx.memory_type_bits,
            },
            location: gpu_allocator::MemoryLocation::CpuToGpu,
            linear: true,
            allocation_scheme: gpu_allocator::vulkan::AllocationScheme::GpuAllocatorManaged,
        };
        pool.unwrap_or(&self.allocator)
            .lock()
            .map_err(|_| "gpu-allocator: poisoned".to_string())?
            .allocate(&desc)
            .map_err(|e| format!("gpu-allocator: {e}"))
    }

    #[inline]
    fn free(&self, handle: Self::Handle, pool: Option<&Self::Pool>) {
        if let Ok(mut a) = pool.unwrap_or(&self.allocator).lock() {
            let _ = a.free(handle);
        }
    }

    fn drop_pool(&self, pool: Self::Pool) {
        drop(pool);
    }
}

// ---- the table ---------------------------------------------------------------

/// One cell's runs.
struct Cell {
    mode: Mode,
    threads: usize,
    allocator: String,
    runs: Vec<f64>,
}

fn measure<S: Shared>(
    shared: &S,
    mode: Mode,
    threads: usize,
    window: Duration,
) -> Result<f64, String> {
    run(shared, threads, mode, window)
}

/// Runs every cell `reps` times, the allocators alternating within each
/// repetition, and prints the table.
fn run_all(c: &Config) -> Result<(), String> {
    let mut cells: Vec<Cell> = Vec::new();
    let mut record = |mode: Mode, threads: usize, name: &str, v: f64| match cells
        .iter_mut()
        .find(|x| x.mode == mode && x.threads == threads && x.allocator == name)
    {
        Some(cell) => cell.runs.push(v),
        None => cells.push(Cell {
            mode,
            threads,
            allocator: name.to_string(),
            runs: vec![v],
        }),
    };
    let device;
    if c.sim {
        device = "simulated device (nvidia_h200 table)".to_string();
        let ours = Ours {
            allocator: Allocator::new(
                SimDevice::new(tables::nvidia_h200()),
                AllocatorDesc::default(),
            )
            .map_err(|e| format!("vkalloc: {e}"))?,
            memory_type_bits: u32::MAX,
        };
        for _ in 0..c.reps {
            for &mode in &c.modes {
                for &t in &c.threads {
                    record(mode, t, "ours", measure(&ours, mode, t, c.window)?);
                }
            }
        }
        leak_check(&ours.allocator)?;
    } else {
        let ctx = VulkanContext::new(c.device, c.memory_budget)?;
        device = ctx.info.name.clone();
        // The bench's stand-in requirement queries are timed into a shared
        // counter by default: with threads, that would be a shared atomic
        // on VMA's path only.
        vkdev::time_requirement_queries(false);
        let mask = ctx.all_types_mask();
        let want = |n: &str| c.allocators.iter().any(|a| a == n);
        let ours = if want("ours") {
            // SAFETY: the device outlives the allocator (dropped at the end of
            // this block, before `ctx`); `memory_budget` says whether the
            // extension was enabled.
            let allocator = unsafe {
                Allocator::on_ash(
                    &ctx.instance,
                    ctx.physical_device,
                    &ctx.device,
                    AshDeviceOptions {
                        memory_budget: ctx.info.memory_budget,
                        ..AshDeviceOptions::default()
                    },
                    AllocatorDesc::default(),
                )
            }
            .map_err(|e| format!("vkalloc: {e}"))?;
            Some(Ours::<AshDevice> {
                allocator,
                memory_type_bits: mask,
            })
        } else {
            None
        };
        let vma = if want("vma") {
            let mut info =
                vk_mem::AllocatorCreateInfo::new(&ctx.instance, &ctx.device, ctx.physical_device);
            info.vulkan_api_version = ctx.api_version;
            if ctx.info.memory_budget {
                info.flags |= vk_mem::AllocatorCreateFlags::EXT_MEMORY_BUDGET;
            }
            // SAFETY: the instance and devices outlive the allocator (dropped
            // at the end of this block).
            let allocator = unsafe { vk_mem::Allocator::new(info) }
                .map_err(|e| format!("vmaCreateAllocator: {e}"))?;
            Some(Vma {
                allocator: Arc::new(allocator),
                memory_type_bits: mask,
            })
        } else {
            None
        };
        let gpu = if want("gpu-allocator") {
            let g = GpuAllocCtx {
                instance: ctx.instance.clone(),
                device: ctx.device.clone(),
                physical_device: ctx.physical_device,
                memory_type_bits: mask,
            };
            Some(GpuAlloc {
                allocator: Mutex::new(g.create()?),
                ctx: g,
            })
        } else {
            None
        };
        for _ in 0..c.reps {
            for &mode in &c.modes {
                for &t in &c.threads {
                    if let Some(o) = &ours {
                        record(mode, t, "ours", measure(o, mode, t, c.window)?);
                    }
                    if let Some(v) = &vma {
                        record(mode, t, "vma", measure(v, mode, t, c.window)?);
                    }
                    if let Some(g) = &gpu {
                        record(mode, t, "gpu-allocator", measure(g, mode, t, c.window)?);
                    }
                }
            }
        }
        if let Some(o) = &ours {
            leak_check(&o.allocator)?;
        }
        drop((ours, vma, gpu));
        vkdev::time_requirement_queries(true);
    }
    print_table(c, &device, &cells);
    Ok(())
}

/// Every buffer was freed: vkalloc's invariants and counters agree.
fn leak_check<D: MemoryDevice>(allocator: &Allocator<D>) -> Result<(), String> {
    allocator
        .validate()
        .map_err(|e| format!("vkalloc: validate after the runs: {e}"))?;
    let live = allocator.statistics().total.allocation_count;
    if live != 0 {
        return Err(format!("vkalloc: {live} allocations live after the runs"));
    }
    Ok(())
}

fn print_table(c: &Config, device: &str, cells: &[Cell]) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "\n## Threads: alloc+free pairs/s, {LIVE} live host-visible buffers of 256 B..1 MiB per thread\n"
    );
    println!(
        "device: {device}; {cores} hardware threads; window {:.2} s; median of {} (min..max)\n",
        c.window.as_secs_f64(),
        c.reps
    );
    let median = |mode: Mode, t: usize, name: &str| {
        cells
            .iter()
            .find(|x| x.mode == mode && x.threads == t && x.allocator == name)
            .map(|x| Spread::of(x.runs.iter().copied()))
    };
    for &mode in &c.modes {
        println!("### mode `{}`\n", mode.name());
        let mut header = "| threads |".to_string();
        let mut rule = "| ---: |".to_string();
        for a in &c.allocators {
            header += &format!(" {a} pairs/s |");
            rule += " ---: |";
        }
        header += " ours vs 1 thread | vma/ours | gpu-allocator/ours |";
        rule += " ---: | ---: | ---: |";
        println!("{header}\n{rule}");
        let one = median(mode, c.threads.iter().copied().min().unwrap_or(1), "ours");
        for &t in &c.threads {
            let mut row = format!("| {t} |");
            for a in &c.allocators {
                match median(mode, t, a) {
                    Some(s) => {
                        row += &format!(" {} ({}..{}) |", si(s.median), si(s.min), si(s.max))
                    }
                    None => row += " - |",
                }
            }
            let ours = median(mode, t, "ours");
            let ratio = |other: Option<Spread>| match (other, ours) {
                (Some(o), Some(us)) if us.median > 0.0 => format!("{:.2}", o.median / us.median),
                _ => "-".to_string(),
            };
            let scale = match (ours, one) {
                (Some(us), Some(o)) if o.median > 0.0 => format!("{:.2}x", us.median / o.median),
                _ => "-".to_string(),
            };
            row += &format!(
                " {scale} | {} | {} |",
                ratio(median(mode, t, "vma")),
                ratio(median(mode, t, "gpu-allocator"))
            );
            println!("{row}");
        }
        println!();
    }
}

/// 1234567 -> "1.23M".
fn si(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// The `threads` subcommand: `args` are the arguments after `threads`.
pub fn main(args: &[String]) -> Result<(), String> {
    let c = parse(args)?;
    run_all(&c)
}
