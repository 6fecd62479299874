//! What a `vkQueueBindSparse` costs on this driver, by the shape of the binds.
//!
//! The tile streamer binds 64 KiB pages to the tiles of sparse 8K images; on
//! the H200 a frame's submission waits about 35 us per bind region
//! (BENCHMARKS.md, *Where the frame waits: the binds*). This measures the
//! driver alone, with nothing else on the queue: one region per tile (fresh
//! pages, pages still bound to other tiles, tiles whose binding is replaced,
//! unbinds), runs of 16 tiles in a row, 16 x 16 and 4 x 4 rectangles, one call
//! per bind, and the binds split over 8 images. Each shape binds 256 tiles;
//! the time is from the call to its fence, median of the repetitions.
//!
//! ```sh
//! cargo run --release -p demo-renderer --example sparse_binds -- [REPS]
//! ```
//!
//! Prints one line per shape and the device's queue families. Needs
//! `sparseBinding` and `sparseResidencyImage2D`; uses BC7 where the device
//! supports it (RGBA8 else: lavapipe).

use std::time::Instant;

use ash::vk;
use gpu_bootstrap::{
    BootstrapError, DeviceDesc, DevicePick, DeviceSupport, Feature, InstanceDesc, QueueRequest,
};

/// Tiles bound by each shape.
const TILES: u32 = 256;

fn main() {
    let reps = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5usize);
    if let Err(e) = run(reps.max(1)) {
        eprintln!("sparse_binds: {e}");
        std::process::exit(1);
    }
}

/// The device, its sparse-binding graphics queue, and what the shapes need.
struct Bench {
    instance: ash::Instance,
    device: ash::Device,
    queue: vk::Queue,
    /// A second queue of the same family, where it has one.
    side: Option<vk::Queue>,
    /// Up to four queues of the family, the first `queue` (binds split
    /// over them).
    all: Vec<vk::Queue>,
    family: u32,
    /// A software rasterizer (lavapipe): fewer fills.
    cpu: bool,
    fence: vk::Fence,
    /// The fills' fence, command pool and buffer (the GPU kept busy while
    /// the binds run).
    fill_fence: vk::Fence,
    pool: vk::CommandPool,
    fill: vk::Buffer,
    fill_memory: vk::DeviceMemory,
    format: vk::Format,
    /// Tile size in texels.
    tile: (u32, u32),
    page: u64,
    memory: vk::DeviceMemory,
}

/// `count` binds of one tile each, tiles `first..` of level 0 row by row
/// (32 tiles a row), to pages `page0..` in the same order.
fn one_tile_binds(first: u32, count: u32, page0: u64) -> Vec<Bind> {
    (first..first + count)
        .map(|t| Bind {
            x: t % 32,
            y: t / 32,
            w: 1,
            h: 1,
            page: Some(page0 + u64::from(t - first)),
        })
        .collect()
}

/// One `vkQueueBindSparse`'s binds: per image, its binds.
type Call = Vec<(vk::Image, Vec<Bind>)>;

/// One bind: a tile of level 0 at `(x, y)` tiles, `(w, h)` tiles large, to
/// `page` (or unbound: `None`).
#[derive(Clone, Copy)]
struct Bind {
    x: u32,
    y: u32,
    w: u32,
    h: u32,
    page: Option<u64>,
}

fn run(reps: usize) -> Result<(), String> {
    let entry = gpu_bootstrap::load_entry().map_err(|e| e.to_string())?;
    // SAFETY: no extensions, no messenger: nothing for the caller to keep alive.
    let instance = unsafe { gpu_bootstrap::create_instance(&entry, &InstanceDesc::default()) }
        .map_err(|e| e.to_string())?
        .instance;
    let r = Bench::new(&instance).and_then(|b| {
        let r = b.shapes(reps).and_then(|()| b.overlap(reps));
        b.destroy();
        r
    });
    // SAFETY: every child object was destroyed by `Bench::destroy`.
    unsafe { instance.destroy_instance(None) };
    r
}

impl Bench {
    fn new(instance: &ash::Instance) -> Result<Self, String> {
        let (_, pick) =
            gpu_bootstrap::pick_physical_device(instance, DevicePick::FirstDiscreteElseFirst)
                .map_err(|e| match e {
                    BootstrapError::NoDevice => "no Vulkan device".to_string(),
                    e => e.to_string(),
                })?;
        // SAFETY: `pick` came from this live instance, created at Vulkan 1.3.
        let support = unsafe { DeviceSupport::query(instance, pick, vk::API_VERSION_1_3) }
            .map_err(|e| e.to_string())?;
        let (props, families) = (support.properties, &support.queue_families);
        let name = support.name();
        println!("device: {name}");
        for (i, f) in families.iter().enumerate() {
            println!("queue family {i}: {:?} x{}", f.queue_flags, f.queue_count);
        }
        let sparse = [Feature::SparseBinding, Feature::SparseResidencyImage2D];
        if !sparse.iter().all(|&f| support.supports(f)) {
            return Err(format!("{name}: no sparse residency of 2D images"));
        }
        let family = families
            .iter()
            .position(|f| {
                f.queue_flags
                    .contains(vk::QueueFlags::GRAPHICS | vk::QueueFlags::SPARSE_BINDING)
            })
            .ok_or("no graphics queue that binds sparse memory")? as u32;
        let bc = support.supports(Feature::TextureCompressionBc);
        let mut features = sparse.to_vec();
        if bc {
            features.push(Feature::TextureCompressionBc);
        }
        let count = families[family as usize].queue_count.min(4);
        let desc = DeviceDesc {
            queues: &[QueueRequest { family, count }],
            features: &features,
            ..DeviceDesc::default()
        };
        // SAFETY: `instance` is the live instance `support` was queried from.
        let device = unsafe { gpu_bootstrap::create_device(instance, &support, &desc) }
            .map_err(|e| e.to_string())?;
        // SAFETY: the family was created with `count` queues.
        let queue = unsafe { device.get_device_queue(family, 0) };
        // SAFETY: as above.
        let side = (count > 1).then(|| unsafe { device.get_device_queue(family, 1) });
        // SAFETY: as above.
        let all = (0..count)
            .map(|i| unsafe { device.get_device_queue(family, i) })
            .collect();
        let format = if bc {
            vk::Format::BC7_UNORM_BLOCK
        } else {
            vk::Format::R8G8B8A8_UNORM
        };
        let mut bench = Self {
            instance: instance.clone(),
            device,
            queue,
            side,
            all,
            family,
            cpu: props.device_type == vk::PhysicalDeviceType::CPU,
            fence: vk::Fence::null(),
            fill_fence: vk::Fence::null(),
            pool: vk::CommandPool::null(),
            fill: vk::Buffer::null(),
            fill_memory: vk::DeviceMemory::null(),
            format,
            tile: (0, 0),
            page: 0,
            memory: vk::DeviceMemory::null(),
        };
        match bench.finish_new(pick) {
            Ok(()) => Ok(bench),
            Err(e) => {
                bench.destroy();
                Err(e)
            }
        }
    }

    /// The fence, the tile size and page, and 4096 pages of device memory.
    fn finish_new(&mut self, pick: vk::PhysicalDevice) -> Result<(), String> {
        let d = &self.device;
        // SAFETY: a valid create info.
        self.fence = unsafe { d.create_fence(&vk::FenceCreateInfo::default(), None) }
            .map_err(|e| format!("vkCreateFence: {e}"))?;
        let image = self.image()?;
        // SAFETY: the image is live; destroyed right after the queries.
        let (reqs, sparse) = unsafe {
            let r = (
                d.get_image_memory_requirements(image),
                d.get_image_sparse_memory_requirements(image),
            );
            d.destroy_image(image, None);
            r
        };
        let gran = sparse
            .iter()
            .find(|r| {
                r.format_properties
                    .aspect_mask
                    .contains(vk::ImageAspectFlags::COLOR)
            })
            .ok_or("no colour sparse requirements")?
            .format_properties
            .image_granularity;
        self.tile = (gran.width, gran.height);
        self.page = reqs.alignment;
        // SAFETY: plain query.
        let mem_props = unsafe { self.instance.get_physical_device_memory_properties(pick) };
        let ty = (0..mem_props.memory_type_count)
            .find(|&i| {
                reqs.memory_type_bits & (1 << i) != 0
                    && mem_props.memory_types[i as usize]
                        .property_flags
                        .contains(vk::MemoryPropertyFlags::DEVICE_LOCAL)
            })
            .or_else(|| (0..32).find(|&i| reqs.memory_type_bits & (1 << i) != 0))
            .ok_or("no memory type for sparse images")?;
        // SAFETY: a valid allocate info.
        self.memory = unsafe {
            d.allocate_memory(
                &vk::MemoryAllocateInfo::default()
                    .allocation_size(4096 * self.page)
                    .memory_type_index(ty),
                None,
            )
        }
        .map_err(|e| format!("vkAllocateMemory: {e}"))?;
        self.make_fill(&mem_props)?;
        println!(
            "format {:?}, tile {}x{} texels, page {} KiB, memory type {ty}",
            self.format,
            self.tile.0,
            self.tile.1,
            self.page >> 10
        );
        Ok(())
    }

    /// A 256 MiB device buffer to fill
    /// (the GPU's work while binds run beside it).
    fn make_fill(&mut self, props: &vk::PhysicalDeviceMemoryProperties) -> Result<(), String> {
        let d = &self.device;
        let size = 256u64 << 20;
        // SAFETY: valid create infos; each handle is stored for `destroy`.
        unsafe {
            self.fill_fence = d
                .create_fence(&vk::FenceCreateInfo::default(), None)
                .map_err(|e| format!("vkCreateFence: {e}"))?;
            self.pool = d
                .create_command_pool(
                    &vk::CommandPoolCreateInfo::default().queue_family_index(self.family),
                    None,
                )
                .map_err(|e| format!("vkCreateCommandPool: {e}"))?;
            self.fill = d
                .create_buffer(
                    &vk::BufferCreateInfo::default()
                        .size(size)
                        .usage(vk::BufferUsageFlags::TRANSFER_DST),
                    None,
                )
                .map_err(|e| format!("vkCreateBuffer: {e}"))?;
            let reqs = d.get_buffer_memory_requirements(self.fill);
            let ty = (0..props.memory_type_count)
                .find(|&i| {
                    reqs.memory_type_bits & (1 << i) != 0
                        && props.memory_types[i as usize]
                            .property_flags
                            .contains(vk::MemoryPropertyFlags::DEVICE_LOCAL)
                })
                .ok_or("no device-local type for the fill buffer")?;
            self.fill_memory = d
                .allocate_memory(
                    &vk::MemoryAllocateInfo::default()
                        .allocation_size(reqs.size)
                        .memory_type_index(ty),
                    None,
                )
                .map_err(|e| format!("vkAllocateMemory: {e}"))?;
            d.bind_buffer_memory(self.fill, self.fill_memory, 0)
                .map_err(|e| format!("vkBindBufferMemory: {e}"))?;
        }
        Ok(())
    }

    /// Submits `fills` fills of the fill buffer on the main queue, signalling
    /// the fill fence.
    fn submit_fill(&self, fills: u32) -> Result<vk::CommandBuffer, String> {
        let d = &self.device;
        // SAFETY: the pool is live and used by this thread only; the
        // command buffer is freed by the caller after the fence.
        unsafe {
            let cmd = d
                .allocate_command_buffers(
                    &vk::CommandBufferAllocateInfo::default()
                        .command_pool(self.pool)
                        .command_buffer_count(1),
                )
                .map_err(|e| format!("vkAllocateCommandBuffers: {e}"))?[0];
            d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default())
                .map_err(|e| format!("vkBeginCommandBuffer: {e}"))?;
            for i in 0..fills {
                d.cmd_fill_buffer(cmd, self.fill, 0, vk::WHOLE_SIZE, i);
            }
            d.end_command_buffer(cmd)
                .map_err(|e| format!("vkEndCommandBuffer: {e}"))?;
            let cmds = [cmd];
            d.queue_submit(
                self.queue,
                &[vk::SubmitInfo::default().command_buffers(&cmds)],
                self.fill_fence,
            )
            .map_err(|e| format!("vkQueueSubmit: {e}"))?;
            Ok(cmd)
        }
    }

    /// Waits for the fill fence, resets it and frees `cmd`.
    fn wait_fill(&self, cmd: vk::CommandBuffer) -> Result<(), String> {
        let d = &self.device;
        // SAFETY: the fence was submitted with `cmd`; after it, `cmd` is
        // no longer in use.
        unsafe {
            d.wait_for_fences(&[self.fill_fence], true, u64::MAX)
                .map_err(|e| format!("vkWaitForFences: {e}"))?;
            d.reset_fences(&[self.fill_fence])
                .map_err(|e| format!("vkResetFences: {e}"))?;
            d.free_command_buffers(self.pool, &[cmd]);
        }
        Ok(())
    }

    /// The GPU kept busy by fills on the main queue while 256 one-tile binds
    /// go to the same queue (behind the fills) or to the second queue of the
    /// family (beside them). Prints the medians.
    fn overlap(&self, reps: usize) -> Result<(), String> {
        // About 10 ms of the H200's time (32 GiB written); two on a CPU device.
        let fills = if self.cpu { 2 } else { 128 };
        let mut t = [
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
        ];
        for rep in 0..=reps {
            let image = self.image()?;
            let binds = |first: u32, page0: u64| -> Call {
                vec![(image, one_tile_binds(first, TILES, page0))]
            };
            let r = (|| -> Result<[f64; 7], String> {
                let started = Instant::now();
                let cmd = self.submit_fill(fills)?;
                self.wait_fill(cmd)?;
                let alone = started.elapsed().as_secs_f64();
                let cmd = self.submit_fill(fills)?;
                let behind = self.bind(self.queue, &[binds(0, 0)])?;
                self.wait_fill(cmd)?;
                let (beside, fill_beside) = match self.side {
                    Some(side) => {
                        let started = Instant::now();
                        let cmd = self.submit_fill(fills)?;
                        let bind = self.bind(side, &[binds(256, 512)])?;
                        self.wait_fill(cmd)?;
                        (bind, started.elapsed().as_secs_f64())
                    }
                    None => (f64::NAN, f64::NAN),
                };
                let side_alone = match self.side {
                    Some(side) => self.bind(side, &[binds(512, 1024)])?,
                    None => f64::NAN,
                };
                let split = |n: usize| -> Result<f64, String> {
                    if self.all.len() < n {
                        return Ok(f64::NAN);
                    }
                    let mut tiles = binds(768, 1536).swap_remove(0).1;
                    let per = tiles.len() / n;
                    let mut parts = Vec::new();
                    for &q in self.all.iter().take(n).rev() {
                        let part = tiles.split_off(tiles.len() - per);
                        parts.push((q, vec![(image, part)]));
                    }
                    self.bind_split(parts)
                };
                let split2 = split(2)?;
                let split4 = split(4)?;
                Ok([
                    alone,
                    behind,
                    beside,
                    fill_beside,
                    side_alone,
                    split2,
                    split4,
                ])
            })();
            // SAFETY: every submission above was waited for.
            unsafe {
                let _ = self.device.device_wait_idle();
                self.device.destroy_image(image, None);
            }
            let r = r?;
            if rep > 0 {
                for (v, x) in t.iter_mut().zip(r) {
                    v.push(x);
                }
            }
        }
        let med = |v: &Vec<f64>| {
            let mut v = v.clone();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2] * 1e3
        };
        println!("fills alone on the main queue: {:.3} ms", med(&t[0]));
        println!(
            "256 one-tile binds on the main queue behind the fills (call to fence): {:.3} ms",
            med(&t[1])
        );
        println!(
            "256 one-tile binds on the second queue beside the fills: {:.3} ms; the fills then took {:.3} ms",
            med(&t[2]),
            med(&t[3])
        );
        println!(
            "256 one-tile binds on the second queue, nothing else: {:.3} ms",
            med(&t[4])
        );
        println!(
            "256 one-tile binds split over 2 queues at once, nothing else: {:.3} ms",
            med(&t[5])
        );
        println!(
            "256 one-tile binds split over 4 queues at once, nothing else: {:.3} ms",
            med(&t[6])
        );
        Ok(())
    }

    /// Binds at once, one `vkQueueBindSparse` per queue, each with a fence
    /// of its own; seconds until all are done.
    fn bind_split(&self, parts: Vec<(vk::Queue, Call)>) -> Result<f64, String> {
        let d = &self.device;
        let mut fences = Vec::new();
        for _ in &parts {
            // SAFETY: a valid create info; destroyed below.
            match unsafe { d.create_fence(&vk::FenceCreateInfo::default(), None) } {
                Ok(f) => fences.push(f),
                Err(e) => {
                    // SAFETY: unused fences.
                    unsafe { fences.iter().for_each(|&f| d.destroy_fence(f, None)) };
                    return Err(format!("vkCreateFence: {e}"));
                }
            }
        }
        let started = Instant::now();
        let mut result = Ok(());
        let mut submitted = 0;
        for ((queue, call), &fence) in parts.iter().zip(&fences) {
            // The parts bind different tiles.
            if let Err(e) = self.submit(*queue, call, fence) {
                result = Err(e);
                break;
            }
            submitted += 1;
        }
        // SAFETY: the first `submitted` fences were submitted above; every
        // fence is destroyed once waited for (or never submitted).
        unsafe {
            if submitted > 0 {
                if let Err(e) = d.wait_for_fences(&fences[..submitted], true, u64::MAX) {
                    // Maybe still pending: the fences are left, not destroyed.
                    return Err(format!("vkWaitForFences: {e}"));
                }
            }
            let seconds = started.elapsed().as_secs_f64();
            fences.iter().for_each(|&f| d.destroy_fence(f, None));
            result.map(|()| seconds)
        }
    }

    /// One `vkQueueBindSparse` of `call` on `queue`, signalling `fence`
    /// (or none). The callers bind whole tiles of level 0 of live images to
    /// the live memory, tiles no other pending bind names, while nothing
    /// else uses the images.
    fn submit(&self, queue: vk::Queue, call: &Call, fence: vk::Fence) -> Result<(), String> {
        let binds: Vec<Vec<vk::SparseImageMemoryBind>> =
            call.iter().map(|(_, bs)| self.image_binds(bs)).collect();
        let infos: Vec<vk::SparseImageMemoryBindInfo> = call
            .iter()
            .zip(&binds)
            .map(|((image, _), b)| {
                vk::SparseImageMemoryBindInfo::default()
                    .image(*image)
                    .binds(b)
            })
            .collect();
        let info = vk::BindSparseInfo::default().image_binds(&infos);
        // SAFETY: every image and the memory are live; the regions are whole
        // tiles of level 0 inside the images; no pending work uses them (the
        // callers' contract above); `fence` is unsignalled and not pending.
        unsafe { self.device.queue_bind_sparse(queue, &[info], fence) }
            .map_err(|e| format!("vkQueueBindSparse: {e}"))
    }

    /// An unbound sparse 8K image of one level.
    fn image(&self) -> Result<vk::Image, String> {
        let info = vk::ImageCreateInfo::default()
            .flags(vk::ImageCreateFlags::SPARSE_BINDING | vk::ImageCreateFlags::SPARSE_RESIDENCY)
            .image_type(vk::ImageType::TYPE_2D)
            .format(self.format)
            .extent(vk::Extent3D {
                width: 8192,
                height: 8192,
                depth: 1,
            })
            .mip_levels(1)
            .array_layers(1)
            .samples(vk::SampleCountFlags::TYPE_1)
            .tiling(vk::ImageTiling::OPTIMAL)
            .usage(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_DST)
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
            .initial_layout(vk::ImageLayout::UNDEFINED);
        // SAFETY: a valid create info; the device supports sparse residency.
        unsafe { self.device.create_image(&info, None) }.map_err(|e| format!("vkCreateImage: {e}"))
    }

    /// Binds `calls` (each a list of `(image, binds)`), one
    /// `vkQueueBindSparse` per call, the last with the fence; waits for it.
    /// Seconds from the first call to the fence.
    fn bind(&self, queue: vk::Queue, calls: &[Call]) -> Result<f64, String> {
        let d = &self.device;
        let started = Instant::now();
        for (i, call) in calls.iter().enumerate() {
            let fence = if i + 1 == calls.len() {
                self.fence
            } else {
                vk::Fence::null()
            };
            self.submit(queue, call, fence)?;
        }
        // SAFETY: the fence is live and was submitted just above.
        unsafe {
            d.wait_for_fences(&[self.fence], true, u64::MAX)
                .map_err(|e| format!("vkWaitForFences: {e}"))?;
            d.reset_fences(&[self.fence])
                .map_err(|e| format!("vkResetFences: {e}"))?;
        }
        Ok(started.elapsed().as_secs_f64())
    }

    /// `bs` as Vulkan's binds of level 0.
    fn image_binds(&self, bs: &[Bind]) -> Vec<vk::SparseImageMemoryBind> {
        bs.iter()
            .map(|b| vk::SparseImageMemoryBind {
                subresource: vk::ImageSubresource {
                    aspect_mask: vk::ImageAspectFlags::COLOR,
                    mip_level: 0,
                    array_layer: 0,
                },
                offset: vk::Offset3D {
                    x: (b.x * self.tile.0) as i32,
                    y: (b.y * self.tile.1) as i32,
                    z: 0,
                },
                extent: vk::Extent3D {
                    width: b.w * self.tile.0,
                    height: b.h * self.tile.1,
                    depth: 1,
                },
                memory: if b.page.is_some() {
                    self.memory
                } else {
                    vk::DeviceMemory::null()
                },
                memory_offset: b.page.unwrap_or(0) * self.page,
                flags: vk::SparseMemoryBindFlags::empty(),
            })
            .collect()
    }

    /// Every shape, `reps` times (after one unmeasured round); prints the
    /// medians.
    fn shapes(&self, reps: usize) -> Result<(), String> {
        let names = [
            "one region a tile, fresh pages",
            "one region a tile, pages bound to other tiles",
            "one region a tile, replacing the tiles' pages",
            "one region a tile, unbind",
            "runs of 16 tiles in a row",
            "one 16x16 rectangle",
            "16 rectangles of 4x4",
            "one call a tile",
            "one region a tile over 8 images",
            "one region a tile, 1024 tiles",
        ];
        let mut seconds = vec![Vec::new(); names.len()];
        for rep in 0..=reps {
            let mut images = Vec::new();
            let r = self.round(&mut images);
            // SAFETY: the fence wait covered every bind; nothing uses them.
            unsafe {
                let _ = self.device.queue_wait_idle(self.queue);
                for i in images {
                    self.device.destroy_image(i, None);
                }
            }
            let round = r?;
            if rep > 0 {
                for (s, t) in seconds.iter_mut().zip(round) {
                    s.push(t);
                }
            }
        }
        println!("shape | regions | ms (median of {reps}) | us a region | us a tile");
        let regions = [256, 256, 256, 256, 16, 1, 16, 256, 256, 1024];
        let tiles = [256, 256, 256, 256, 256, 256, 256, 256, 256, 1024];
        for (i, name) in names.iter().enumerate() {
            let mut s = seconds[i].clone();
            s.sort_by(f64::total_cmp);
            let med = s[s.len() / 2];
            println!(
                "{name} | {} | {:.3} | {:.1} | {:.1}",
                regions[i],
                med * 1e3,
                med * 1e6 / f64::from(regions[i]),
                med * 1e6 / f64::from(tiles[i])
            );
        }
        Ok(())
    }

    /// One round of every shape on new images (pushed to `images` for the
    /// caller to destroy); the seconds of each.
    fn round(&self, images: &mut Vec<vk::Image>) -> Result<Vec<f64>, String> {
        let single = |first: u32, page0: u64| one_tile_binds(first, TILES, page0);
        let mut out = Vec::new();
        let new_image = |images: &mut Vec<vk::Image>| -> Result<vk::Image, String> {
            let i = self.image()?;
            images.push(i);
            Ok(i)
        };
        let a = new_image(images)?;
        out.push(self.bind(self.queue, &[vec![(a, single(0, 0))]])?);
        out.push(self.bind(self.queue, &[vec![(a, single(256, 0))]])?);
        out.push(self.bind(self.queue, &[vec![(a, single(0, 256))]])?);
        let unbind: Vec<Bind> = single(0, 0)
            .into_iter()
            .map(|b| Bind { page: None, ..b })
            .collect();
        out.push(self.bind(self.queue, &[vec![(a, unbind)]])?);
        let b = new_image(images)?;
        let rows: Vec<Bind> = (0..16)
            .map(|r| Bind {
                x: 0,
                y: r,
                w: 16,
                h: 1,
                page: Some(512 + u64::from(r) * 16),
            })
            .collect();
        out.push(self.bind(self.queue, &[vec![(b, rows)]])?);
        let c = new_image(images)?;
        out.push(self.bind(
            self.queue,
            &[vec![(
                c,
                vec![Bind {
                    x: 0,
                    y: 0,
                    w: 16,
                    h: 16,
                    page: Some(768),
                }],
            )]],
        )?);
        let e = new_image(images)?;
        let rects: Vec<Bind> = (0..16)
            .map(|r| Bind {
                x: (r % 4) * 4,
                y: (r / 4) * 4,
                w: 4,
                h: 4,
                page: Some(1024 + u64::from(r) * 16),
            })
            .collect();
        out.push(self.bind(self.queue, &[vec![(e, rects)]])?);
        let f = new_image(images)?;
        let calls: Vec<Call> = single(0, 1280)
            .into_iter()
            .map(|b| vec![(f, vec![b])])
            .collect();
        out.push(self.bind(self.queue, &calls)?);
        let mut eight = Vec::new();
        for k in 0..8u32 {
            let g = new_image(images)?;
            let binds: Vec<Bind> = single(0, 1536 + u64::from(k) * 32)
                .into_iter()
                .take(32)
                .collect();
            eight.push((g, binds));
        }
        out.push(self.bind(self.queue, &[eight])?);
        let h = new_image(images)?;
        let many = one_tile_binds(0, 1024, 2048);
        out.push(self.bind(self.queue, &[vec![(h, many)]])?);
        Ok(out)
    }

    fn destroy(&self) {
        // SAFETY: the queue is idle after `shapes` (or nothing was
        // submitted); the handles are live or null.
        unsafe {
            let _ = self.device.device_wait_idle();
            if self.fill != vk::Buffer::null() {
                self.device.destroy_buffer(self.fill, None);
            }
            for m in [self.memory, self.fill_memory] {
                if m != vk::DeviceMemory::null() {
                    self.device.free_memory(m, None);
                }
            }
            if self.pool != vk::CommandPool::null() {
                self.device.destroy_command_pool(self.pool, None);
            }
            if self.fill_fence != vk::Fence::null() {
                self.device.destroy_fence(self.fill_fence, None);
            }
            if self.fence != vk::Fence::null() {
                self.device.destroy_fence(self.fence, None);
            }
            self.device.destroy_device(None);
        }
    }
}
