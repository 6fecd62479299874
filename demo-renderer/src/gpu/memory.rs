//! The renderer's one door to device memory: every buffer, image and render
//! target is created here, through the vkalloc allocator.
//!
//! The wrapper keeps the renderer's calls in the allocator's vocabulary
//! (usages, pools, tags) and holds the `Arc<Allocator>`; the overlay and the
//! report read only its public statistics.
//!
//! INTERIM: until `vkalloc`'s `Allocator` lands, this file backs the same calls
//! with one `vkAllocateMemory` per resource so the renderer can be brought up.

use std::collections::HashMap;
use std::sync::Mutex;

use ash::vk;

use super::{Context, GpuError, VkCheck};

/// Which memory a resource wants (the allocator's presets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryUsage {
    /// Device-local, never mapped.
    GpuOnly,
    /// Host-visible, written by the CPU once per use (staging, uniforms).
    Upload,
    /// Host-visible and cached, read by the CPU (frame readback).
    Readback,
}

/// A pool created with [`GpuMemory::create_pool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolId(u32);

/// Kind of pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    /// General-purpose (TLSF).
    General,
    /// A ring buffer: allocations are freed in the order they were made.
    Ring,
}

/// Options for one resource.
#[derive(Clone, Copy, Debug)]
pub struct MemOptions<'a> {
    /// The memory preset.
    pub usage: MemoryUsage,
    /// A pool, or the allocator's default blocks.
    pub pool: Option<PoolId>,
    /// Give the resource its own `VkDeviceMemory` (render targets).
    pub dedicated: bool,
    /// A debugging name.
    pub tag: &'a str,
}

impl<'a> MemOptions<'a> {
    /// Default blocks of `usage`, tagged `tag`.
    pub fn new(usage: MemoryUsage, tag: &'a str) -> Self {
        Self { usage, pool: None, dedicated: false, tag }
    }
    /// In pool `pool`.
    pub fn in_pool(mut self, pool: PoolId) -> Self {
        self.pool = Some(pool);
        self
    }
    /// With its own memory.
    pub fn dedicated(mut self) -> Self {
        self.dedicated = true;
        self
    }
}

/// The memory behind one resource; give it back to [`GpuMemory`] to free it.
#[derive(Debug)]
pub struct Memory {
    memory: vk::DeviceMemory,
    size: u64,
    ptr: *mut u8,
    pool: Option<PoolId>,
}

// SAFETY: the pointer is a persistent mapping owned by the allocation; access is
// synchronised by the renderer (one writer per allocation).
unsafe impl Send for Memory {}
// SAFETY: as above.
unsafe impl Sync for Memory {}

impl Memory {
    /// Bytes of the allocation.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The mapped pointer of a host-visible allocation, or null.
    pub fn mapped_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Copies `bytes` into the mapped allocation at `offset`.
    ///
    /// Panics when the allocation is not mapped or the range is out of bounds
    /// (both are programming errors).
    pub fn write(&self, offset: u64, bytes: &[u8]) {
        assert!(!self.ptr.is_null(), "write to an unmapped allocation");
        assert!(offset + bytes.len() as u64 <= self.size, "write out of bounds");
        // SAFETY: the range was checked against the mapped size; the GPU does not use
        // this range now (the renderer waits for its fences before reuse).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(offset as usize), bytes.len()) };
    }

    /// Copies from the mapped allocation at `offset` into `out`.
    pub fn read(&self, offset: u64, out: &mut [u8]) {
        assert!(!self.ptr.is_null(), "read from an unmapped allocation");
        assert!(offset + out.len() as u64 <= self.size, "read out of bounds");
        // SAFETY: as in `write`; the GPU finished writing (fence waited).
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(offset as usize), out.as_mut_ptr(), out.len()) };
    }
}

#[derive(Default)]
struct Counters {
    blocks: u64,
    block_bytes: u64,
    allocations: u64,
    allocation_bytes: u64,
    pools: HashMap<PoolId, (String, u64, u64)>,
}

/// The allocator as the renderer uses it.
pub struct GpuMemory {
    device: ash::Device,
    props: vk::PhysicalDeviceMemoryProperties,
    counters: Mutex<Counters>,
    next_pool: Mutex<u32>,
}

impl GpuMemory {
    /// Creates the allocator for `ctx`'s device.
    pub fn new(ctx: &Context) -> Result<Self, GpuError> {
        // SAFETY: plain query.
        let props = unsafe { ctx.instance.get_physical_device_memory_properties(ctx.physical_device) };
        Ok(Self { device: ctx.device.clone(), props, counters: Mutex::default(), next_pool: Mutex::new(0) })
    }

    /// Creates a pool named `name` of `kind` for `usage`, with blocks of `block_size`
    /// bytes and an optional byte budget.
    pub fn create_pool(
        &self,
        name: &str,
        usage: MemoryUsage,
        kind: PoolKind,
        block_size: u64,
        budget: Option<u64>,
    ) -> Result<PoolId, GpuError> {
        let _ = (usage, kind, block_size, budget);
        let mut n = self.next_pool.lock().unwrap();
        *n += 1;
        let id = PoolId(*n);
        self.counters.lock().unwrap().pools.insert(id, (name.to_owned(), 0, 0));
        Ok(id)
    }

    fn find_type(&self, bits: u32, usage: MemoryUsage) -> Option<u32> {
        let want = match usage {
            MemoryUsage::GpuOnly => vk::MemoryPropertyFlags::DEVICE_LOCAL,
            MemoryUsage::Upload => vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT,
            MemoryUsage::Readback => vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT,
        };
        (0..self.props.memory_type_count)
            .find(|&i| bits & (1 << i) != 0 && self.props.memory_types[i as usize].property_flags.contains(want))
            .or_else(|| (0..self.props.memory_type_count).find(|&i| bits & (1 << i) != 0))
    }

    fn allocate(&self, req: vk::MemoryRequirements, opts: &MemOptions<'_>) -> Result<Memory, GpuError> {
        let ty = self.find_type(req.memory_type_bits, opts.usage).ok_or_else(|| GpuError::Alloc {
            what: opts.tag.to_owned(),
            reason: "no memory type".into(),
        })?;
        let info = vk::MemoryAllocateInfo::default().allocation_size(req.size).memory_type_index(ty);
        // SAFETY: valid allocate info for this device.
        let memory = unsafe { self.device.allocate_memory(&info, None) }.map_err(|e| GpuError::Alloc {
            what: opts.tag.to_owned(),
            reason: e.to_string(),
        })?;
        let ptr = if opts.usage != MemoryUsage::GpuOnly {
            // SAFETY: the type is host-visible (chosen above); the whole range is mapped once.
            unsafe { self.device.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }
                .check("vkMapMemory")? as *mut u8
        } else {
            std::ptr::null_mut()
        };
        let mut c = self.counters.lock().unwrap();
        c.blocks += 1;
        c.block_bytes += req.size;
        c.allocations += 1;
        c.allocation_bytes += req.size;
        if let Some(p) = opts.pool.and_then(|p| c.pools.get_mut(&p)) {
            p.1 += 1;
            p.2 += req.size;
        }
        Ok(Memory { memory, size: req.size, ptr, pool: opts.pool })
    }

    fn release(&self, m: Memory) {
        // SAFETY: the caller guarantees the GPU is done with the resource bound to it.
        unsafe { self.device.free_memory(m.memory, None) };
        let mut c = self.counters.lock().unwrap();
        c.blocks -= 1;
        c.block_bytes -= m.size;
        c.allocations -= 1;
        c.allocation_bytes -= m.size;
        if let Some(p) = m.pool.and_then(|p| c.pools.get_mut(&p)) {
            p.1 -= 1;
            p.2 -= m.size;
        }
    }

    /// Creates an image and binds memory to it.
    pub fn create_image(&self, info: &vk::ImageCreateInfo<'_>, opts: &MemOptions<'_>) -> Result<(vk::Image, Memory), GpuError> {
        // SAFETY: a valid create info from the caller.
        let image = unsafe { self.device.create_image(info, None) }.check("vkCreateImage")?;
        // SAFETY: `image` is live.
        let req = unsafe { self.device.get_image_memory_requirements(image) };
        let mem = match self.allocate(req, opts) {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: unused image.
                unsafe { self.device.destroy_image(image, None) };
                return Err(e);
            }
        };
        // SAFETY: fresh memory of a compatible type and enough size.
        unsafe { self.device.bind_image_memory(image, mem.memory, 0) }.check("vkBindImageMemory")?;
        Ok((image, mem))
    }

    /// Creates a buffer and binds memory to it.
    pub fn create_buffer(&self, info: &vk::BufferCreateInfo<'_>, opts: &MemOptions<'_>) -> Result<(vk::Buffer, Memory), GpuError> {
        // SAFETY: a valid create info from the caller.
        let buffer = unsafe { self.device.create_buffer(info, None) }.check("vkCreateBuffer")?;
        // SAFETY: `buffer` is live.
        let req = unsafe { self.device.get_buffer_memory_requirements(buffer) };
        let mem = match self.allocate(req, opts) {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: unused buffer.
                unsafe { self.device.destroy_buffer(buffer, None) };
                return Err(e);
            }
        };
        // SAFETY: fresh memory of a compatible type and enough size.
        unsafe { self.device.bind_buffer_memory(buffer, mem.memory, 0) }.check("vkBindBufferMemory")?;
        Ok((buffer, mem))
    }

    /// Creates a persistently mapped buffer (usage must be `Upload` or `Readback`).
    pub fn create_buffer_mapped(
        &self,
        info: &vk::BufferCreateInfo<'_>,
        opts: &MemOptions<'_>,
    ) -> Result<(vk::Buffer, Memory), GpuError> {
        assert!(opts.usage != MemoryUsage::GpuOnly, "a mapped buffer needs Upload or Readback memory");
        self.create_buffer(info, opts)
    }

    /// Makes the CPU's reads of a readback allocation see the GPU's writes.
    pub fn invalidate(&self, _m: &Memory) {}

    /// Makes the GPU see the CPU's writes to an upload allocation.
    pub fn flush(&self, _m: &Memory) {}

    /// Destroys an image and frees its memory.
    ///
    /// # Safety
    /// The GPU must be done with the image.
    pub unsafe fn destroy_image(&self, image: vk::Image, m: Memory) {
        // SAFETY: per the contract above.
        unsafe { self.device.destroy_image(image, None) };
        self.release(m);
    }

    /// Destroys a buffer and frees its memory.
    ///
    /// # Safety
    /// The GPU must be done with the buffer.
    pub unsafe fn destroy_buffer(&self, buffer: vk::Buffer, m: Memory) {
        // SAFETY: per the contract above.
        unsafe { self.device.destroy_buffer(buffer, None) };
        self.release(m);
    }

    /// Starts a frame (refreshes budgets).
    pub fn begin_frame(&self, _frame: u64) {}

    /// The allocator's statistics as JSON.
    pub fn statistics_json(&self) -> serde_json::Value {
        let c = self.counters.lock().unwrap();
        serde_json::json!({
            "block_count": c.blocks, "block_bytes": c.block_bytes,
            "allocation_count": c.allocations, "allocation_bytes": c.allocation_bytes,
            "pools": c.pools.values().map(|(n, a, b)| serde_json::json!({"name": n, "allocation_count": a, "allocation_bytes": b})).collect::<Vec<_>>(),
        })
    }

    /// Bytes allocated through `pool`.
    pub fn pool_bytes(&self, pool: PoolId) -> u64 {
        self.counters.lock().unwrap().pools.get(&pool).map(|p| p.2).unwrap_or(0)
    }

    /// A text summary of the allocator's state.
    pub fn summary(&self) -> String {
        let c = self.counters.lock().unwrap();
        format!("{} blocks, {} bytes; {} allocations, {} bytes", c.blocks, c.block_bytes, c.allocations, c.allocation_bytes)
    }

    /// Destroys a pool (it must be empty).
    pub fn destroy_pool(&self, pool: PoolId) {
        self.counters.lock().unwrap().pools.remove(&pool);
    }
}
