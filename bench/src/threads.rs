//! `bench threads`: allocation throughput and committed memory with 1..N
//! threads on one allocator.
//!
//! Two workloads. `upload`: each thread keeps [`LIVE`] host-visible buffers
//! of 256 B to 1 MiB (uniform in log2), so the live set grows with the
//! threads. `device`: device-local buffers of 64 KiB to 16 MiB (uniform in
//! log2), [`DEVICE_LIVE`] of them (about 750 MiB) shared out over the
//! threads, so every thread count holds the same live set: the initial
//! sizes come from one sequence, dealt round-robin. Each thread replaces
//! one buffer at a time (free one, allocate one: a *pair*); the figure is
//! pairs per second summed over the threads, over a fixed wall-clock window
//! after every thread has filled its set. Beside it, each run records the
//! committed and live bytes once every thread has filled its set (the
//! *warm-up*) and once every thread has stopped at the window's end: ours
//! from its statistics, VMA from `vmaCalculateStatistics`, gpu-allocator
//! from its report (summed over its allocators in `pools`). Every run gets
//! a fresh allocator, so no run starts with another's blocks.
//!
//! Two modes: `type` (every thread in one memory type, the allocator's
//! default blocks) and `pools` (a pool of one memory type per thread).
//! Contenders: vkalloc, VMA (vk-mem; internally synchronised, a `VmaPool`
//! per thread in `pools`) and gpu-allocator behind a `Mutex` (in `pools`, an
//! allocator and mutex per thread: it has no pools). With `--sim`, vkalloc
//! alone on the simulated device (the H200's memory table): no driver under
//! it.
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

/// Live buffers per thread (`upload`).
pub const LIVE: usize = 64;

/// Live buffers over all the threads (`device`): 64 KiB to 16 MiB uniform
/// in log2 averages (16 MiB - 64 KiB) / ln 256 = 2.87 MiB, so about 750 MiB.
pub const DEVICE_LIVE: usize = 261;

const MIB: f64 = (1u64 << 20) as f64;

/// Alignment asked for every buffer.
const ALIGNMENT: u64 = 256;

const HELP: &str = "\
bench threads: alloc+free pairs per second and committed memory with 1..N threads,
vkalloc vs VMA vs gpu-allocator

USAGE: cargo run --release -p bench -- threads [OPTIONS]

  --threads A,B,..   thread counts (default 1,2,4,8,16)
  --workloads W,..   upload (64 host-visible buffers of 256 B..1 MiB per thread),
                     device (261 device-local buffers of 64 KiB..16 MiB, ~750 MiB,
                     over all the threads); default upload,device
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

/// What the threads allocate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// [`LIVE`] host-visible buffers of 256 B..1 MiB per thread.
    Upload,
    /// [`DEVICE_LIVE`] device-local buffers of 64 KiB..16 MiB over all the
    /// threads.
    Device,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Upload => "upload",
            Workload::Device => "device",
        }
    }

    /// A buffer size: uniform in log2 over the workload's range.
    fn size(self, rng: &mut ChaCha8Rng) -> u64 {
        let (low, high) = match self {
            Workload::Upload => (8.0, 20.0),
            Workload::Device => (16.0, 24.0),
        };
        let bits = rng.gen_range(low..=high);
        (2f64.powf(bits) as u64).max(256)
    }

    /// The sizes thread `t` of `threads` fills its set with.
    fn initial(self, t: usize, threads: usize) -> Vec<u64> {
        match self {
            Workload::Upload => {
                let mut rng = ChaCha8Rng::seed_from_u64(0x7468_7265 ^ t as u64);
                (0..LIVE).map(|_| self.size(&mut rng)).collect()
            }
            Workload::Device => {
                // One sequence dealt round-robin: the same live set for
                // every thread count.
                let mut rng = ChaCha8Rng::seed_from_u64(0x6465_7669);
                (0..DEVICE_LIVE)
                    .map(|_| self.size(&mut rng))
                    .enumerate()
                    .filter(|(i, _)| i % threads == t)
                    .map(|(_, s)| s)
                    .collect()
            }
        }
    }

    fn description(self) -> String {
        match self {
            Workload::Upload => {
                format!("{LIVE} live host-visible buffers of 256 B..1 MiB per thread")
            }
            Workload::Device => format!(
                "{DEVICE_LIVE} live device-local buffers of 64 KiB..16 MiB (~750 MiB) over all the threads"
            ),
        }
    }
}

/// The options.
#[derive(Clone, Debug)]
pub struct Config {
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Workloads.
    pub workloads: Vec<Workload>,
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
            workloads: vec![Workload::Upload, Workload::Device],
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
            "--workloads" => {
                c.workloads = list(it.next(), arg)?
                    .iter()
                    .map(|s| match s.as_str() {
                        "upload" => Ok(Workload::Upload),
                        "device" => Ok(Workload::Device),
                        other => Err(format!("--workloads: unknown workload {other:?}")),
                    })
                    .collect::<Result<_, _>>()?;
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

/// Committed and live bytes of a contender at one moment.
#[derive(Clone, Copy, Debug, Default)]
struct Memory {
    /// Bytes of device memory the allocator holds.
    committed: u64,
    /// Bytes of live allocations.
    live: u64,
}

/// An allocator shared by threads.
trait Shared: Sync {
    type Handle: Send;
    /// A thread's pool (`pools` mode).
    type Pool: Send + Sync;
    fn make_pool(&self, thread: usize, workload: Workload) -> Result<Self::Pool, String>;
    fn allocate(
        &self,
        size: u64,
        workload: Workload,
        pool: Option<&Self::Pool>,
    ) -> Result<Self::Handle, String>;
    fn free(&self, handle: Self::Handle, pool: Option<&Self::Pool>);
    /// Committed and live bytes, the threads' pools included.
    fn memory(&self, pools: &[Option<Self::Pool>]) -> Memory;
    fn drop_pool(&self, pool: Self::Pool);
}

/// What one run measured.
#[derive(Clone, Copy, Debug)]
struct Run {
    /// Pairs per second, summed over the threads.
    pairs: f64,
    /// The slowest and the fastest thread's pairs per second.
    per_thread: (f64, f64),
    /// Once every thread had filled its set.
    warm: Memory,
    /// Once every thread had stopped, at the window's end.
    end: Memory,
}

/// One run: `threads` threads, each filling its set, then replacing one
/// buffer at a time until the window closes.
fn run<S: Shared>(
    shared: &S,
    threads: usize,
    mode: Mode,
    workload: Workload,
    window: Duration,
) -> Result<Run, String> {
    let pools: Vec<Option<S::Pool>> = (0..threads)
        .map(|t| match mode {
            Mode::Type => Ok(None),
            Mode::Pools => shared.make_pool(t, workload).map(Some),
        })
        .collect::<Result<_, _>>()?;
    let stop = AtomicBool::new(false);
    // Filled, go, stopped, released: the main thread reads the memory
    // between the first two and the last two, while no thread allocates.
    let filled = Barrier::new(threads + 1);
    let go = Barrier::new(threads + 1);
    let stopped = Barrier::new(threads + 1);
    let released = Barrier::new(threads + 1);
    let result = std::thread::scope(|s| {
        let workers: Vec<_> = pools
            .iter()
            .enumerate()
            .map(|(t, pool)| {
                let (stop, filled, go, stopped, released) =
                    (&stop, &filled, &go, &stopped, &released);
                s.spawn(move || -> Result<u64, String> {
                    let pool = pool.as_ref();
                    let initial = workload.initial(t, threads);
                    let mut rng = ChaCha8Rng::seed_from_u64(0x7468_7265 ^ t as u64);
                    let mut live = Vec::with_capacity(initial.len());
                    let mut error = None;
                    for &size in &initial {
                        match shared.allocate(size, workload, pool) {
                            Ok(h) => live.push(h),
                            Err(e) => {
                                error = Some(e);
                                break;
                            }
                        }
                    }
                    // Sizes and slots drawn ahead, so the loop times the
                    // allocator, not the generator.
                    let slots = live.len().max(1);
                    let plan: Vec<(usize, u64)> = (0..4096)
                        .map(|_| (rng.gen_range(0..slots), workload.size(&mut rng)))
                        .collect();
                    filled.wait();
                    go.wait();
                    let mut pairs = 0u64;
                    if error.is_none() && !live.is_empty() {
                        'outer: while !stop.load(Ordering::Relaxed) {
                            // The flag is read every 64 pairs: written once,
                            // it costs no shared traffic.
                            for _ in 0..64 {
                                let (slot, size) = plan[(pairs % 4096) as usize];
                                match shared.allocate(size, workload, pool) {
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
                    stopped.wait();
                    released.wait();
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
        filled.wait();
        let warm = shared.memory(&pools);
        go.wait();
        let start = Instant::now();
        std::thread::sleep(window);
        stop.store(true, Ordering::Relaxed);
        stopped.wait();
        let elapsed = start.elapsed().as_secs_f64();
        let end = shared.memory(&pools);
        released.wait();
        let mut total = 0u64;
        let mut per_thread = (f64::INFINITY, 0.0f64);
        for w in workers {
            let pairs = w.join().map_err(|_| "a worker panicked".to_string())??;
            total += pairs;
            let rate = pairs as f64 / elapsed;
            per_thread = (per_thread.0.min(rate), per_thread.1.max(rate));
        }
        Ok(Run {
            pairs: total as f64 / elapsed,
            per_thread,
            warm,
            end,
        })
    });
    for pool in pools.into_iter().flatten() {
        shared.drop_pool(pool);
    }
    result
}

/// The usage each workload asks for.
fn usage(workload: Workload) -> MemoryUsage {
    match workload {
        Workload::Upload => MemoryUsage::Upload,
        Workload::Device => MemoryUsage::GpuOnly,
    }
}

// ---- vkalloc ---------------------------------------------------------------

struct Ours<D: MemoryDevice> {
    allocator: Allocator<D>,
    memory_type_bits: u32,
}

impl<D: MemoryDevice> Shared for Ours<D> {
    type Handle = vkalloc::Allocation;
    type Pool = PoolId;

    fn make_pool(&self, thread: usize, workload: Workload) -> Result<PoolId, String> {
        self.allocator
            .create_pool(&PoolDesc {
                usage: usage(workload),
                ..PoolDesc::new(format!("thread {thread}"))
            })
            .map_err(|e| format!("vkalloc: {e}"))
    }

    #[inline]
    fn allocate(
        &self,
        size: u64,
        workload: Workload,
        pool: Option<&PoolId>,
    ) -> Result<Self::Handle, String> {
        let mut options = AllocationOptions::usage(usage(workload));
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

    fn memory(&self, _pools: &[Option<PoolId>]) -> Memory {
        let total = self.allocator.statistics().total;
        Memory {
            committed: total.block_bytes,
            live: total.allocation_bytes,
        }
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
    fn info(workload: Workload) -> vk_mem::AllocationCreateInfo {
        use vk::MemoryPropertyFlags as F;
        // As the main bench's `upload` and `gpu_only`.
        let (required_flags, preferred_flags) = match workload {
            Workload::Upload => (F::HOST_VISIBLE, F::HOST_COHERENT | F::DEVICE_LOCAL),
            Workload::Device => (F::empty(), F::DEVICE_LOCAL),
        };
        vk_mem::AllocationCreateInfo {
            usage: vk_mem::MemoryUsage::Unknown,
            required_flags,
            preferred_flags,
            ..Default::default()
        }
    }
}

impl Shared for Vma {
    type Handle = vk_mem::Allocation;
    type Pool = vk_mem::AllocatorPool;

    fn make_pool(&self, _thread: usize, workload: Workload) -> Result<Self::Pool, String> {
        // SAFETY: a plain query of the allocator's memory types.
        let memory_type_index = unsafe {
            self.allocator
                .find_memory_type_index(self.memory_type_bits, &Self::info(workload))
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
    fn allocate(
        &self,
        size: u64,
        workload: Workload,
        pool: Option<&Self::Pool>,
    ) -> Result<Self::Handle, String> {
        let handle = stand_in(StandInRequirements {
            size,
            alignment: ALIGNMENT,
            memory_type_bits: self.memory_type_bits,
            prefers_dedicated: false,
            requires_dedicated: false,
        });
        let info = Self::info(workload);
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

    fn memory(&self, _pools: &[Option<Self::Pool>]) -> Memory {
        // The total covers the custom pools too.
        match self.allocator.calculate_statistics() {
            Ok(stats) => Memory {
                committed: stats.total.statistics.blockBytes,
                live: stats.total.statistics.allocationBytes,
            },
            Err(_) => Memory::default(),
        }
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

    fn make_pool(&self, _thread: usize, _workload: Workload) -> Result<Self::Pool, String> {
        self.ctx.create().map(Mutex::new)
    }

    #[inline]
    fn allocate(
        &self,
        size: u64,
        workload: Workload,
        pool: Option<&Self::Pool>,
    ) -> Result<Self::Handle, String> {
        let desc = gpu_allocator::vulkan::AllocationCreateDesc {
            name: "",
            requirements: vk::MemoryRequirements {
                size,
                alignment: ALIGNMENT,
                memory_type_bits: self.ctx.memory_type_bits,
            },
            location: match workload {
                Workload::Upload => gpu_allocator::MemoryLocation::CpuToGpu,
                Workload::Device => gpu_allocator::MemoryLocation::GpuOnly,
            },
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

    fn memory(&self, pools: &[Option<Self::Pool>]) -> Memory {
        let mut memory = Memory::default();
        for a in std::iter::once(&self.allocator).chain(pools.iter().flatten()) {
            if let Ok(a) = a.lock() {
                let report = a.generate_report();
                memory.committed += report.total_capacity_bytes;
                memory.live += report.total_allocated_bytes;
            }
        }
        memory
    }

    fn drop_pool(&self, pool: Self::Pool) {
        drop(pool);
    }
}

// ---- the table ---------------------------------------------------------------

/// One cell's runs.
struct Cell {
    workload: Workload,
    mode: Mode,
    threads: usize,
    allocator: String,
    runs: Vec<Run>,
}

/// The cells, and how each run is recorded into them.
#[derive(Default)]
struct Cells(Vec<Cell>);

impl Cells {
    fn record(&mut self, key: (Workload, Mode, usize), name: &str, run: Run) {
        let (workload, mode, threads) = key;
        match self.0.iter_mut().find(|x| {
            x.workload == workload && x.mode == mode && x.threads == threads && x.allocator == name
        }) {
            Some(cell) => cell.runs.push(run),
            None => self.0.push(Cell {
                workload,
                mode,
                threads,
                allocator: name.to_string(),
                runs: vec![run],
            }),
        }
    }

    fn get(&self, key: (Workload, Mode, usize), name: &str) -> Option<&Cell> {
        let (workload, mode, threads) = key;
        self.0.iter().find(|x| {
            x.workload == workload && x.mode == mode && x.threads == threads && x.allocator == name
        })
    }
}

/// Every cell's key, in the order they run within a repetition.
fn keys(c: &Config) -> Vec<(Workload, Mode, usize)> {
    let mut keys = Vec::new();
    for &workload in &c.workloads {
        for &mode in &c.modes {
            for &t in &c.threads {
                keys.push((workload, mode, t));
            }
        }
    }
    keys
}

/// Runs every cell `reps` times, the allocators alternating within each
/// repetition (each run on an allocator of its own), and prints the table.
fn run_all(c: &Config) -> Result<(), String> {
    let mut cells = Cells::default();
    let device;
    if c.sim {
        device = "simulated device (nvidia_h200 table)".to_string();
        for _ in 0..c.reps {
            for key in keys(c) {
                let ours = Ours {
                    allocator: Allocator::new(
                        SimDevice::new(tables::nvidia_h200()),
                        AllocatorDesc::default(),
                    )
                    .map_err(|e| format!("vkalloc: {e}"))?,
                    memory_type_bits: u32::MAX,
                };
                let (workload, mode, t) = key;
                cells.record(key, "ours", run(&ours, t, mode, workload, c.window)?);
                leak_check(&ours.allocator)?;
            }
        }
    } else {
        let ctx = VulkanContext::new(c.device, c.memory_budget)?;
        device = ctx.info.name.clone();
        // The bench's stand-in requirement queries are timed into a shared
        // counter by default: with threads, that would be a shared atomic
        // on VMA's path only.
        vkdev::time_requirement_queries(false);
        let mask = ctx.all_types_mask();
        let want = |n: &str| c.allocators.iter().any(|a| a == n);
        for _ in 0..c.reps {
            for key in keys(c) {
                let (workload, mode, t) = key;
                if want("ours") {
                    // SAFETY: the device outlives the allocator (dropped at
                    // the end of this block, before `ctx`); `memory_budget`
                    // says whether the extension was enabled.
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
                    let ours = Ours::<AshDevice> {
                        allocator,
                        memory_type_bits: mask,
                    };
                    cells.record(key, "ours", run(&ours, t, mode, workload, c.window)?);
                    leak_check(&ours.allocator)?;
                }
                if want("vma") {
                    let mut info = vk_mem::AllocatorCreateInfo::new(
                        &ctx.instance,
                        &ctx.device,
                        ctx.physical_device,
                    );
                    info.vulkan_api_version = ctx.api_version;
                    if ctx.info.memory_budget {
                        info.flags |= vk_mem::AllocatorCreateFlags::EXT_MEMORY_BUDGET;
                    }
                    // SAFETY: the instance and devices outlive the allocator
                    // (dropped at the end of this block).
                    let allocator = unsafe { vk_mem::Allocator::new(info) }
                        .map_err(|e| format!("vmaCreateAllocator: {e}"))?;
                    let vma = Vma {
                        allocator: Arc::new(allocator),
                        memory_type_bits: mask,
                    };
                    cells.record(key, "vma", run(&vma, t, mode, workload, c.window)?);
                }
                if want("gpu-allocator") {
                    let g = GpuAllocCtx {
                        instance: ctx.instance.clone(),
                        device: ctx.device.clone(),
                        physical_device: ctx.physical_device,
                        memory_type_bits: mask,
                    };
                    let gpu = GpuAlloc {
                        allocator: Mutex::new(g.create()?),
                        ctx: g,
                    };
                    cells.record(
                        key,
                        "gpu-allocator",
                        run(&gpu, t, mode, workload, c.window)?,
                    );
                }
            }
        }
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

/// A cell's medians: pairs/s (spread), the slowest and fastest thread's
/// pairs/s, and the committed and live bytes.
struct Medians {
    pairs: Spread,
    per_thread: (f64, f64),
    warm_committed: f64,
    end_committed: f64,
    end_live: f64,
}

impl Medians {
    fn of(cell: &Cell) -> Self {
        let m = |f: &dyn Fn(&Run) -> f64| Spread::of(cell.runs.iter().map(f)).median;
        Self {
            pairs: Spread::of(cell.runs.iter().map(|r| r.pairs)),
            per_thread: (m(&|r| r.per_thread.0), m(&|r| r.per_thread.1)),
            warm_committed: m(&|r| r.warm.committed as f64),
            end_committed: m(&|r| r.end.committed as f64),
            end_live: m(&|r| r.end.live as f64),
        }
    }
}

fn print_table(c: &Config, device: &str, cells: &Cells) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    for &workload in &c.workloads {
        println!(
            "\n## Threads, workload `{}`: alloc+free pairs/s and committed MiB, {}\n",
            workload.name(),
            workload.description()
        );
        println!(
            "device: {device}; {cores} hardware threads; window {:.2} s; median of {} (min..max); \
             committed MiB once the sets are filled -> at the window's end, and live MiB at the end\n",
            c.window.as_secs_f64(),
            c.reps
        );
        for &mode in &c.modes {
            print_mode(c, cells, workload, mode);
        }
    }
}

fn print_mode(c: &Config, cells: &Cells, workload: Workload, mode: Mode) {
    let medians = |t: usize, name: &str| cells.get((workload, mode, t), name).map(Medians::of);
    println!(
        "### workload `{}`, mode `{}`\n",
        workload.name(),
        mode.name()
    );
    let mut header = "| threads |".to_string();
    let mut rule = "| ---: |".to_string();
    for a in &c.allocators {
        header += &format!(" {a} pairs/s |");
        rule += " ---: |";
    }
    header += " ours vs 1 thread | vma/ours | gpu-allocator/ours | ours per thread pairs/s |";
    rule += " ---: | ---: | ---: | ---: |";
    for a in &c.allocators {
        header += &format!(" {a} committed MiB | {a} live MiB |");
        rule += " ---: | ---: |";
    }
    header += " ours committed vs 1 thread |";
    rule += " ---: |";
    println!("{header}\n{rule}");
    let lowest = c.threads.iter().copied().min().unwrap_or(1);
    let one = medians(lowest, "ours");
    for &t in &c.threads {
        let mut row = format!("| {t} |");
        for a in &c.allocators {
            match medians(t, a) {
                Some(m) => {
                    let s = m.pairs;
                    row += &format!(" {} ({}..{}) |", si(s.median), si(s.min), si(s.max));
                }
                None => row += " - |",
            }
        }
        let ours = medians(t, "ours");
        let ratio = |other: Option<Medians>| match (other, &ours) {
            (Some(o), Some(us)) if us.pairs.median > 0.0 => {
                format!("{:.2}", o.pairs.median / us.pairs.median)
            }
            _ => "-".to_string(),
        };
        let scale = match (&ours, &one) {
            (Some(us), Some(o)) if o.pairs.median > 0.0 => {
                format!("{:.2}x", us.pairs.median / o.pairs.median)
            }
            _ => "-".to_string(),
        };
        let per_thread = ours.as_ref().map_or("-".to_string(), |m| {
            format!("{}..{}", si(m.per_thread.0), si(m.per_thread.1))
        });
        row += &format!(
            " {scale} | {} | {} | {per_thread} |",
            ratio(medians(t, "vma")),
            ratio(medians(t, "gpu-allocator"))
        );
        for a in &c.allocators {
            match medians(t, a) {
                Some(m) => {
                    row += &format!(
                        " {:.0} -> {:.0} | {:.0} |",
                        m.warm_committed / MIB,
                        m.end_committed / MIB,
                        m.end_live / MIB
                    )
                }
                None => row += " - | - |",
            }
        }
        let committed = match (&ours, &one) {
            (Some(us), Some(o)) if o.end_committed > 0.0 => {
                format!("{:.2}x", us.end_committed / o.end_committed)
            }
            _ => "-".to_string(),
        };
        row += &format!(" {committed} |");
        println!("{row}");
    }
    println!();
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
