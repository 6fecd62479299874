//! The renderer's one door to device memory: every buffer, image and render
//! target is created here, through the vkalloc [`Allocator`].
//!
//! The wrapper keeps the renderer's calls short (usage, pool, tag), turns
//! allocator errors into [`GpuError`]s naming the resource, and exposes only the
//! allocator's public statistics to the report and the overlay.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;
use vkalloc::vk::{AshDevice, AshDeviceOptions};
use vkalloc::{
    Allocation, AllocationOptions, Allocator, AllocatorDesc, DedicatedPolicy, MappedAllocation,
};

/// A buffer and its memory, as the allocator hands it out; give it back through
/// [`GpuMemory::destroy_buffer`].
pub use vkalloc::vk::Buffer;
/// An image and its memory; give it back through [`GpuMemory::destroy_image`].
pub use vkalloc::vk::Image;
/// A buffer in persistently mapped host-visible memory.
pub use vkalloc::vk::MappedBuffer;

pub use vkalloc::{LinearMode, MemoryPriority, MemoryUsage, PoolAlgorithm, PoolDesc, PoolId};

/// The memory priority of the texture pool's blocks: streamed data, evicted
/// before render targets when video memory is oversubscribed
/// (`VK_EXT_memory_priority`, where the device has it).
pub const TEXTURE_PRIORITY: MemoryPriority = MemoryPriority::LOW;
/// The memory priority of render targets' own memory: touched every frame,
/// kept resident longest.
pub const TARGET_PRIORITY: MemoryPriority = MemoryPriority::HIGHEST;

/// One allocation shared by resources whose lifetimes in a frame don't overlap.
pub use vkalloc::AliasGroup;
/// A pass interval: when an alias group member's contents are live.
pub use vkalloc::PassInterval;
/// An image bound on a member of an [`AliasGroup`].
pub type AliasedImage = vkalloc::vk::Aliased<vk::Image>;

use super::{Context, GpuError};

/// Options for one resource.
#[derive(Clone, Copy, Debug)]
pub struct MemOptions<'a> {
    /// The memory preset.
    pub usage: MemoryUsage,
    /// A pool, or the allocator's default blocks.
    pub pool: Option<PoolId>,
    /// Give the resource its own `VkDeviceMemory` (render targets).
    pub dedicated: bool,
    /// Fail with an over-budget error instead of exceeding the heap budget.
    pub within_budget: bool,
    /// A debugging name (leak reports, JSON dumps).
    pub tag: &'a str,
    /// A full pool is an outcome the caller handles (a staging ring that it
    /// drains and retries, a page atlas that tries a smaller shape): that
    /// failure writes no message and no heap dump.
    pub full_is_expected: bool,
    /// The memory priority of its own memory (`VK_EXT_memory_priority`).
    pub priority: Option<vkalloc::MemoryPriority>,
}

impl<'a> MemOptions<'a> {
    /// Default blocks of `usage`, tagged `tag`.
    pub fn new(usage: MemoryUsage, tag: &'a str) -> Self {
        Self {
            usage,
            pool: None,
            dedicated: false,
            within_budget: false,
            tag,
            full_is_expected: false,
            priority: None,
        }
    }
    /// With a memory priority (for its own memory: see
    /// [`vkalloc::AllocationOptions::priority`]).
    pub fn with_priority(mut self, priority: vkalloc::MemoryPriority) -> Self {
        self.priority = Some(priority);
        self
    }
    /// In pool `pool`.
    pub fn in_pool(mut self, pool: PoolId) -> Self {
        self.pool = Some(pool);
        self
    }
    /// A full pool is handled by the caller: no heap dump when it is.
    pub fn full_is_expected(mut self) -> Self {
        self.full_is_expected = true;
        self
    }
    /// With its own memory.
    pub fn dedicated(mut self) -> Self {
        self.dedicated = true;
        self
    }

    fn to_vkalloc(self) -> AllocationOptions<'a> {
        AllocationOptions {
            usage: self.usage,
            pool: self.pool,
            dedicated: if self.dedicated {
                DedicatedPolicy::Always
            } else {
                DedicatedPolicy::Auto
            },
            tag: self.tag,
            within_budget: self.within_budget,
            pinned: false,
            priority: self.priority,
        }
    }
}

/// What [`GpuMemory::allocate_memory`] asks of the allocator: memory for an
/// optimal image's blocks, with no resource of its own.
fn memory_desc<'a>(
    size: u64,
    alignment: u64,
    memory_type_bits: u32,
    opts: &MemOptions<'a>,
) -> vkalloc::AllocationDesc<'a> {
    vkalloc::AllocationDesc {
        size,
        alignment,
        memory_type_bits,
        kind: vkalloc::ResourceKind::OptimalImage,
        driver_dedicated: Default::default(),
        dedicated_to: None,
        options: opts.to_vkalloc(),
    }
}

fn alloc_err(tag: &str, e: vkalloc::Error) -> GpuError {
    GpuError::Alloc {
        what: tag.to_owned(),
        source: e,
    }
}

/// Allocations and frees made through [`GpuMemory`] since it was created (the
/// overlay's timeline), and where to write a dump when an allocation fails.
#[derive(Debug, Default)]
struct Ops {
    allocations: AtomicU64,
    frees: AtomicU64,
    failure_dumps: AtomicU64,
    dump_dir: Mutex<Option<PathBuf>>,
}

/// The allocator as the renderer uses it. Drop it before the device.
pub struct GpuMemory {
    allocator: Arc<Allocator<AshDevice>>,
    ops: Arc<Ops>,
}

impl GpuMemory {
    /// Creates the allocator for `ctx`'s device.
    pub fn new(ctx: &Context) -> Result<Self, GpuError> {
        // SAFETY: the physical device belongs to the instance and the device was created
        // from it with Vulkan 1.3; the Context outlives this GpuMemory (the renderer drops
        // it first); `memory_budget`, `memory_priority` and `pageable_memory` say
        // whether their extensions were enabled.
        let allocator = unsafe {
            Allocator::on_ash(
                &ctx.instance,
                ctx.physical_device,
                &ctx.device,
                AshDeviceOptions {
                    memory_budget: ctx.info.memory_budget,
                    memory_priority: ctx.info.memory_priority,
                    pageable_device_local_memory: ctx.info.pageable_memory,
                    // The demo needs Vulkan 1.3: requirements come from create infos.
                    maintenance4: true,
                    ..AshDeviceOptions::default()
                },
                AllocatorDesc::default(),
            )
        }
        .map_err(|e| alloc_err("allocator", e))?;
        Ok(Self {
            allocator: Arc::new(allocator),
            ops: Arc::default(),
        })
    }

    /// Another handle to the same allocator and counters (the overlay's renderer keeps one).
    pub fn share(&self) -> GpuMemory {
        GpuMemory {
            allocator: self.allocator.clone(),
            ops: self.ops.clone(),
        }
    }

    /// Allocations and frees made through this door so far.
    pub fn op_counts(&self) -> (u64, u64) {
        (
            self.ops.allocations.load(Ordering::Relaxed),
            self.ops.frees.load(Ordering::Relaxed),
        )
    }

    /// Writes a JSON dump into `dir` whenever an allocation fails (the first few failures).
    pub fn dump_on_failure(&self, dir: PathBuf) {
        *self.ops.dump_dir.lock().unwrap_or_else(|e| e.into_inner()) = Some(dir);
    }

    fn failed(&self, tag: &str, e: vkalloc::Error) -> GpuError {
        let dir = self
            .ops
            .dump_dir
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let n = self.ops.failure_dumps.fetch_add(1, Ordering::Relaxed);
        if let (Some(dir), true) = (dir, n < 4) {
            let path = dir.join(format!("heap-alloc-failure-{n}.json"));
            match std::fs::write(&path, self.allocator.to_json()) {
                Ok(()) => eprintln!(
                    "allocation of '{tag}' failed ({e}); heap dump in {}",
                    path.display()
                ),
                Err(w) => log::error!("cannot write {}: {w}", path.display()),
            }
        }
        alloc_err(tag, e)
    }

    /// [`Self::counted`], except that a full pool is no failure to report
    /// (no message, no heap dump) where the caller said it expects one
    /// ([`MemOptions::full_is_expected`]: it tries a smaller size next).
    fn counted_or_full<T>(
        &self,
        r: Result<T, vkalloc::Error>,
        opts: &MemOptions<'_>,
    ) -> Result<T, GpuError> {
        match r {
            Err(e @ vkalloc::Error::PoolExhausted { .. }) if opts.full_is_expected => {
                Err(alloc_err(opts.tag, e))
            }
            r => self.counted(r, opts.tag),
        }
    }

    fn counted<T>(&self, r: Result<T, vkalloc::Error>, tag: &str) -> Result<T, GpuError> {
        match r {
            Ok(v) => {
                self.ops.allocations.fetch_add(1, Ordering::Relaxed);
                Ok(v)
            }
            Err(e) => Err(self.failed(tag, e)),
        }
    }

    /// Writes the allocator's JSON dump (schema version 2) to `path`.
    pub fn write_dump(&self, path: &std::path::Path) -> std::io::Result<()> {
        std::fs::write(path, self.allocator.to_json())
    }

    /// The allocator, for statistics.
    pub fn allocator(&self) -> &Arc<Allocator<AshDevice>> {
        &self.allocator
    }

    /// Creates a pool named `name`.
    pub fn create_pool(
        &self,
        name: &str,
        usage: MemoryUsage,
        algorithm: PoolAlgorithm,
        block_size: u64,
        max_blocks: u32,
        budget: Option<u64>,
    ) -> Result<PoolId, GpuError> {
        self.create_pool_with(&PoolDesc {
            usage,
            algorithm,
            block_size,
            max_blocks,
            budget,
            ..PoolDesc::new(name)
        })
    }

    /// Creates a pool from a full description (a memory priority, say).
    pub fn create_pool_with(&self, desc: &PoolDesc) -> Result<PoolId, GpuError> {
        self.allocator
            .create_pool(desc)
            .map_err(|e| alloc_err(&desc.name, e))
    }

    /// Destroys a pool (it must be empty).
    pub fn destroy_pool(&self, pool: PoolId) {
        if let Err(e) = self.allocator.destroy_pool(pool) {
            log::error!("destroy_pool: {e}");
        }
    }

    /// Creates an image and binds memory to it.
    pub fn create_image(
        &self,
        info: &vk::ImageCreateInfo<'_>,
        opts: &MemOptions<'_>,
    ) -> Result<Image, GpuError> {
        // SAFETY: the renderer builds valid create infos (the validation layer checks them).
        let r = unsafe { self.allocator.create_image(info, &opts.to_vkalloc()) };
        self.counted_or_full(r, opts)
    }

    /// Creates a buffer and binds memory to it.
    pub fn create_buffer(
        &self,
        info: &vk::BufferCreateInfo<'_>,
        opts: &MemOptions<'_>,
    ) -> Result<Buffer, GpuError> {
        // SAFETY: as in `create_image`.
        let r = unsafe { self.allocator.create_buffer(info, &opts.to_vkalloc()) };
        self.counted(r, opts.tag)
    }

    /// Creates a persistently mapped buffer (usage `Upload` or `Readback`).
    pub fn create_buffer_mapped(
        &self,
        info: &vk::BufferCreateInfo<'_>,
        opts: &MemOptions<'_>,
    ) -> Result<MappedBuffer, GpuError> {
        // SAFETY: as in `create_image`.
        let r = unsafe {
            self.allocator
                .create_buffer_mapped(info, &opts.to_vkalloc())
        };
        self.counted_or_full(r, opts)
    }

    /// Allocates one alias group for images: each is `(create info, lifetime, tag)`;
    /// images whose lifetimes don't overlap share bytes. Bind each with
    /// [`Self::create_aliased_image`], member `i` for the `i`-th image.
    pub fn create_alias_group(
        &self,
        images: &[(vk::ImageCreateInfo<'_>, PassInterval, &str)],
        opts: &MemOptions<'_>,
    ) -> Result<AliasGroup, GpuError> {
        let mut requirements = Vec::with_capacity(images.len());
        for (info, lifetime, tag) in images {
            // SAFETY: as in `create_image`.
            let r = unsafe { self.allocator.image_alias_requirement(info, *lifetime, tag) };
            requirements.push(r.map_err(|e| alloc_err(tag, e))?);
        }
        let r = self
            .allocator
            .allocate_alias_group(&requirements, opts.to_vkalloc());
        self.counted(r, opts.tag)
    }

    /// Creates an image and binds it on member `member` of `group` (its contents are
    /// undefined after another member was used: its first use in a frame is a
    /// transition from `UNDEFINED`).
    pub fn create_aliased_image(
        &self,
        group: &AliasGroup,
        member: usize,
        info: &vk::ImageCreateInfo<'_>,
        tag: &str,
    ) -> Result<AliasedImage, GpuError> {
        // SAFETY: as in `create_image`; the caller frees the group only after
        // destroying the image (`destroy_aliased_image`).
        unsafe { self.allocator.create_aliased_image(group, member, info) }
            .map_err(|e| alloc_err(tag, e))
    }

    /// Destroys an image bound on an alias group member (the memory stays with the group).
    ///
    /// # Safety
    /// The GPU must be done with the image, and its views destroyed.
    pub unsafe fn destroy_aliased_image(&self, image: AliasedImage) {
        // SAFETY: per the contract above.
        if let Err(e) = unsafe { self.allocator.destroy_aliased_image(image) } {
            // This allocator made every aliased image of the renderer.
            log::error!("destroying an aliased image: {}", e.error());
        }
    }

    /// Frees an alias group; destroy every image bound on it first.
    pub fn free_alias_group(&self, group: AliasGroup) {
        self.ops.frees.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.allocator.free_alias_group(group) {
            log::error!("free_alias_group: {e}");
        }
    }

    /// Makes the CPU's reads of a readback allocation see the GPU's writes.
    pub fn invalidate(&self, m: &MappedAllocation) {
        if let Err(e) = self.allocator.invalidate(m, 0, m.size()) {
            log::error!("invalidate: {e}");
        }
    }

    /// Makes the GPU see the CPU's writes to an upload allocation.
    pub fn flush(&self, m: &MappedAllocation) {
        if let Err(e) = self.allocator.flush(m, 0, m.size()) {
            log::error!("flush: {e}");
        }
    }

    /// Destroys an image and frees its memory.
    ///
    /// # Safety
    /// The GPU must be done with the image.
    pub unsafe fn destroy_image(&self, image: Image) {
        self.ops.frees.fetch_add(1, Ordering::Relaxed);
        // SAFETY: per the contract above; the image was made by `create_image`
        // on this allocator.
        if let Err(e) = unsafe { self.allocator.destroy_image(image) } {
            log::error!("destroy_image: {e}");
        }
    }

    /// Allocates memory with no resource of its own: a sparse image's pages and
    /// mip tails, bound by `vkQueueBindSparse`. `memory_type_bits` and
    /// `alignment` come from the image's `VkMemoryRequirements`.
    pub fn allocate_memory(
        &self,
        size: u64,
        alignment: u64,
        memory_type_bits: u32,
        opts: &MemOptions<'_>,
    ) -> Result<Allocation, GpuError> {
        let desc = memory_desc(size, alignment, memory_type_bits, opts);
        let r = self.allocator.allocate(&desc);
        self.counted(r, opts.tag)
    }

    /// [`Self::allocate_memory`] from a pool that may be full: `Ok(None)` when
    /// the pool's hard budget or block cap refuses it ([`vkalloc::Error::PoolExhausted`]),
    /// an expected answer for a streamer that fills its pool (no failure dump,
    /// no message); every other failure as [`Self::allocate_memory`]'s.
    pub fn try_allocate_memory(
        &self,
        size: u64,
        alignment: u64,
        memory_type_bits: u32,
        opts: &MemOptions<'_>,
    ) -> Result<Option<Allocation>, GpuError> {
        let desc = memory_desc(size, alignment, memory_type_bits, opts);
        match self.allocator.allocate(&desc) {
            Err(vkalloc::Error::PoolExhausted { .. }) => Ok(None),
            r => self.counted(r, opts.tag).map(Some),
        }
    }

    /// Frees memory of [`Self::allocate_memory`].
    ///
    /// # Safety
    /// Nothing may use the memory any more: no resource bound to it that the
    /// GPU may still read (a sparse binding is unbound and the unbinding done).
    pub unsafe fn free_memory(&self, allocation: Allocation) {
        self.ops.frees.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.allocator.free(allocation) {
            log::error!("free_memory: {}", e.error());
        }
    }

    /// Frees what `queue` holds for GPU progress up to `done` (every entry with
    /// `None`, for teardown), counting the frees.
    pub fn collect_frees(&self, queue: &vkalloc::FreeQueue, done: Option<u64>) {
        let c = match done {
            Some(v) => queue.collect(&self.allocator, v),
            None => queue.collect_all(&self.allocator),
        };
        self.ops.frees.fetch_add(c.freed as u64, Ordering::Relaxed);
        for e in c.failures {
            log::error!("deferred free: {}", e.error());
        }
    }

    /// Destroys a buffer (mapped or not) and frees its memory.
    ///
    /// # Safety
    /// The GPU must be done with the buffer.
    pub unsafe fn destroy_buffer<A>(&self, buffer: Buffer<A>)
    where
        A: Into<Allocation> + AsRef<Allocation> + std::fmt::Debug,
    {
        self.ops.frees.fetch_add(1, Ordering::Relaxed);
        // SAFETY: per the contract above; the buffer was made by `create_buffer*`
        // on this allocator.
        if let Err(e) = unsafe { self.allocator.destroy_buffer(buffer) } {
            log::error!("destroy_buffer: {e}");
        }
    }

    /// Starts a frame (refreshes heap budgets).
    pub fn begin_frame(&self, _frame: u64) {
        self.allocator.begin_frame();
    }

    /// Starts writing every allocation and free to a trace at `path` (the
    /// bench's format), named `name`.
    pub fn record_trace(&self, path: &std::path::Path, name: &str) -> Result<(), String> {
        let file = std::fs::File::create(path).map_err(|e| e.to_string())?;
        self.allocator
            .start_recording(Box::new(std::io::BufWriter::new(file)), name)
            .map_err(|e| e.to_string())
    }

    /// Stops the trace that [`GpuMemory::record_trace`] started and flushes
    /// it; the first write error, if any.
    pub fn finish_trace(&self) -> Result<(), String> {
        match self.allocator.stop_recording() {
            Some(Ok(mut writer)) => std::io::Write::flush(&mut writer).map_err(|e| e.to_string()),
            Some(Err(e)) => Err(e.to_string()),
            None => Ok(()),
        }
    }

    /// The allocator's cheap statistics, as JSON.
    pub fn statistics_json(&self) -> serde_json::Value {
        serde_json::to_value(self.allocator.statistics()).unwrap_or(serde_json::Value::Null)
    }

    /// Bytes allocated in `pool`.
    pub fn pool_bytes(&self, pool: PoolId) -> u64 {
        self.allocator
            .statistics()
            .pools
            .iter()
            .find(|p| p.index == pool.index())
            .map(|p| p.usage.allocation_bytes)
            .unwrap_or(0)
    }

    /// Pressure on `pool`: its and its heap's usage against their budgets and its
    /// largest free range (`None` if the pool is gone).
    pub fn pool_pressure(&self, pool: PoolId) -> Option<vkalloc::PoolPressure> {
        self.allocator.pool_pressure(pool).ok()
    }

    /// A snapshot of every block and allocation (the overlay takes one per frame).
    pub fn snapshot(&self) -> vkalloc::Snapshot {
        self.allocator.snapshot()
    }

    /// The allocator's text summary.
    pub fn summary(&self) -> String {
        self.allocator.summary()
    }
}
