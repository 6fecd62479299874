//! The trace corpus (`--corpus`): a parameterised family of generated
//! traces, and a fixed seeded sample of its configurations.
//!
//! A [`CorpusConfig`] sets the resource mix (textures with mip chains,
//! log-uniform 64 KiB..256 MiB; render targets at 1080p/1440p/4K in several
//! formats, some multisampled; geometry, uniform and staging buffers), the
//! churn rate (share of the persistent set replaced per frame), the live
//! budget as a share of the heap, how often the render targets are
//! re-created (a resize) and the dedicated hints. [`sample`] draws
//! `count` configurations from a seed; [`generate`] turns one into a trace.
//!
//! Requirements (size, alignment, `memoryTypeBits`, the dedicated wish) come
//! from a [`Resolve`]r: [`Synthetic`] applies the standard traces' desktop
//! rules (no device needed); [`crate::vkdev::VulkanContext`] creates each
//! buffer or image with its real create info and reads
//! `VkMemoryRequirements2` and `VkMemoryDedicatedRequirements` from the
//! driver (cached per create info).

use std::collections::HashMap;

use ash::vk;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use vkalloc::trace::format::{
    AllocEvent, Trace, TraceDedicated, TraceEvent, TraceHeader, TraceKind, TraceUsage,
};

use crate::trace::Scale;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

/// The seed of the corpus sample when none is given.
pub const DEFAULT_CORPUS_SEED: u64 = 0xc0_2026_1130;

/// Configurations in the standard sample.
pub const DEFAULT_CORPUS_SIZE: usize = 32;

/// A resource, as its create info says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Resource {
    /// A buffer.
    Buffer {
        /// `VkBufferCreateInfo::size`.
        size: u64,
        /// Its usage flags (raw).
        usage: u32,
    },
    /// A 2D optimal-tiling image.
    Image {
        /// Width in pixels.
        width: u32,
        /// Height in pixels.
        height: u32,
        /// `VkFormat` (raw).
        format: i32,
        /// Mip levels.
        mips: u32,
        /// Samples per pixel (1 or 4).
        samples: u32,
        /// Its usage flags (raw).
        usage: u32,
    },
}

/// A resource's memory requirements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// `VkMemoryRequirements::size`.
    pub size: u64,
    /// `VkMemoryRequirements::alignment`.
    pub alignment: u64,
    /// `VkMemoryRequirements::memoryTypeBits`.
    pub memory_type_bits: u32,
    /// The driver's dedicated wish.
    pub dedicated: TraceDedicated,
}

/// Turns create infos into memory requirements.
pub trait Resolve {
    /// The requirements of `r`; `None` when the device can't make it (an
    /// unsupported format or sample count): the generator picks another.
    fn resolve(&mut self, r: &Resource) -> Option<Resolved>;
    /// Bytes of the heap the live budget is a share of.
    fn heap_bytes(&self) -> u64;
    /// Where the requirements come from, for the report.
    fn describe(&self) -> String;
}

/// Requirements by the rules of the standard traces (desktop-like): images
/// aligned to 4 KiB (64 KiB from 4 MiB), buffers to 256 B, every memory
/// type allowed, `preferred` for images of 32 MiB and more; a 2 GiB heap.
#[derive(Clone, Copy, Debug, Default)]
pub struct Synthetic;

/// Bytes per texel block and the block's edge (1 or 4) of the formats used.
fn format_block(format: vk::Format) -> (u64, u64) {
    match format {
        vk::Format::BC1_RGBA_UNORM_BLOCK => (8, 4),
        vk::Format::BC7_UNORM_BLOCK | vk::Format::BC5_UNORM_BLOCK => (16, 4),
        vk::Format::R16G16B16A16_SFLOAT => (8, 1),
        vk::Format::R32G32B32A32_SFLOAT => (16, 1),
        _ => (4, 1),
    }
}

impl Resolve for Synthetic {
    fn resolve(&mut self, r: &Resource) -> Option<Resolved> {
        Some(match *r {
            Resource::Buffer { size, .. } => Resolved {
                size: size.div_ceil(256) * 256,
                alignment: 256,
                memory_type_bits: u32::MAX,
                dedicated: TraceDedicated::None,
            },
            Resource::Image {
                width,
                height,
                format,
                mips,
                samples,
                ..
            } => {
                let (block_bytes, edge) = format_block(vk::Format::from_raw(format));
                let (mut w, mut h) = (u64::from(width), u64::from(height));
                let mut bytes = 0;
                for _ in 0..mips {
                    bytes += w.div_ceil(edge) * h.div_ceil(edge) * block_bytes;
                    w = (w / 2).max(1);
                    h = (h / 2).max(1);
                }
                bytes *= u64::from(samples);
                let alignment = if bytes >= 4 * MIB { 64 * KIB } else { 4 * KIB };
                let size = bytes.div_ceil(alignment) * alignment;
                Resolved {
                    size,
                    alignment,
                    memory_type_bits: u32::MAX,
                    dedicated: if size >= 32 * MIB {
                        TraceDedicated::Preferred
                    } else {
                        TraceDedicated::None
                    },
                }
            }
        })
    }

    fn heap_bytes(&self) -> u64 {
        2 << 30
    }

    fn describe(&self) -> String {
        "synthetic requirements (desktop rules, 2 GiB heap)".into()
    }
}

/// Requirements read from a device, cached per create info.
pub struct DeviceResolver<'a> {
    ctx: &'a crate::vkdev::VulkanContext,
    cache: HashMap<Resource, Option<Resolved>>,
}

impl<'a> DeviceResolver<'a> {
    /// Resolves on `ctx`'s device.
    pub fn new(ctx: &'a crate::vkdev::VulkanContext) -> Self {
        Self {
            ctx,
            cache: HashMap::new(),
        }
    }
}

impl Resolve for DeviceResolver<'_> {
    fn resolve(&mut self, r: &Resource) -> Option<Resolved> {
        if let Some(hit) = self.cache.get(r) {
            return *hit;
        }
        let got = self.ctx.requirements(r).map(|q| Resolved {
            size: q.size,
            alignment: q.alignment,
            memory_type_bits: q.memory_type_bits,
            dedicated: if q.requires_dedicated {
                TraceDedicated::Required
            } else if q.prefers_dedicated {
                TraceDedicated::Preferred
            } else {
                TraceDedicated::None
            },
        });
        self.cache.insert(*r, got);
        got
    }

    fn heap_bytes(&self) -> u64 {
        self.ctx.largest_device_local_heap()
    }

    fn describe(&self) -> String {
        format!(
            "requirements from {} (vkGet*MemoryRequirements2 with VkMemoryDedicatedRequirements)",
            self.ctx.info.name
        )
    }
}

/// How the dedicated wish is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DedicatedHint {
    /// As the resolver (the driver) says.
    Driver,
    /// The driver's, and `preferred` for every render target too (as some
    /// drivers report).
    RenderTargets,
    /// The driver's `required` only; `preferred` dropped.
    RequiredOnly,
}

/// One generator configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct CorpusConfig {
    /// Its index in the sample.
    pub index: usize,
    /// The trace's own seed.
    pub seed: u64,
    /// Relative weights (by count) of new persistent resources: textures
    /// (0.1..1), geometry (0.1..1), small uniform buffers (1..8).
    pub mix: [f64; 3],
    /// Largest texture (bytes of the base level; 64 KiB..256 MiB).
    pub texture_max: u64,
    /// Render target resolution index into [`RESOLUTIONS`].
    pub resolution: usize,
    /// Render targets in the set.
    pub render_targets: usize,
    /// Share of render targets multisampled (4×).
    pub msaa: f64,
    /// Share of the persistent set replaced per frame.
    pub churn: f64,
    /// Staging uploads per frame (mean).
    pub staging_per_frame: f64,
    /// Live budget as a share of the heap.
    pub budget: f64,
    /// Chance per frame that the render targets are re-created at another
    /// resolution.
    pub resize: f64,
    /// The dedicated wish.
    pub dedicated: DedicatedHint,
    /// A live budget in bytes that replaces `budget`'s share of the heap
    /// (the [`sample_independent`] family's; `None` in [`sample`]'s).
    pub budget_bytes: Option<u64>,
}

/// Render target resolutions.
pub const RESOLUTIONS: [(u32, u32, &str); 3] = [
    (1920, 1080, "1080p"),
    (2560, 1440, "1440p"),
    (3840, 2160, "4k"),
];

impl CorpusConfig {
    /// A short name: `corpus-NN-<resolution>-c<churn %>-b<budget %>`, or for
    /// a configuration with a budget in bytes `indep-NN-c<churn %>-b<MiB>m`.
    pub fn name(&self) -> String {
        if let Some(bytes) = self.budget_bytes {
            return format!(
                "indep-{:02}-c{:.1}-b{}m",
                self.index,
                self.churn * 100.0,
                bytes >> 20
            );
        }
        format!(
            "corpus-{:02}-{}-c{:.1}-b{:.0}",
            self.index,
            RESOLUTIONS[self.resolution].2,
            self.churn * 100.0,
            self.budget * 100.0
        )
    }

    /// Every parameter, for the trace header's note.
    pub fn describe(&self) -> String {
        let budget = match self.budget_bytes {
            Some(bytes) => format!("{} MiB", bytes >> 20),
            None => format!("{:.0}% of heap", self.budget * 100.0),
        };
        format!(
            "mix tex/geo/ubo {:.2}/{:.2}/{:.2}, textures up to {} MiB, {} render targets at {} ({:.0}% MSAA), churn {:.1}%/frame, staging {:.1}/frame, budget {budget}, resize {:.2}%/frame, dedicated {:?}",
            self.mix[0],
            self.mix[1],
            self.mix[2],
            self.texture_max >> 20,
            self.render_targets,
            RESOLUTIONS[self.resolution].2,
            self.msaa * 100.0,
            self.churn * 100.0,
            self.staging_per_frame,
            self.resize * 100.0,
            self.dedicated
        )
    }
}

/// A draw log-uniform in `lo..=hi`.
fn log_uniform(rng: &mut ChaCha8Rng, lo: f64, hi: f64) -> f64 {
    rng.gen_range(lo.ln()..=hi.ln()).exp()
}

/// A configuration's mix of textures, geometry and small buffers (drawn in
/// that order: both families draw it alike).
fn draw_mix(rng: &mut ChaCha8Rng) -> [f64; 3] {
    [
        rng.gen_range(0.1..1.0),
        rng.gen_range(0.1..1.0),
        // Most live allocations of an engine are small buffers.
        rng.gen_range(1.0..8.0),
    ]
}

/// `count` configurations drawn from `seed`: the same seed, the same sample.
pub fn sample(seed: u64, count: usize) -> Vec<CorpusConfig> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..count)
        .map(|index| CorpusConfig {
            index,
            seed: rng.gen(),
            mix: draw_mix(&mut rng),
            texture_max: (log_uniform(&mut rng, 4.0, 256.0) as u64).max(1) * MIB,
            resolution: rng.gen_range(0..RESOLUTIONS.len()),
            render_targets: rng.gen_range(2..=12),
            msaa: *[0.0, 0.0, 0.25, 0.5].choose(&mut rng).expect("non-empty"),
            churn: log_uniform(&mut rng, 0.002, 0.1),
            staging_per_frame: rng.gen_range(0.0..4.0),
            budget: rng.gen_range(0.15..0.7),
            resize: *[0.0, 0.0, 0.002, 0.01].choose(&mut rng).expect("non-empty"),
            dedicated: *[
                DedicatedHint::Driver,
                DedicatedHint::Driver,
                DedicatedHint::RenderTargets,
                DedicatedHint::RequiredOnly,
            ]
            .choose(&mut rng)
            .expect("non-empty"),
            budget_bytes: None,
        })
        .collect()
}

/// Operations per trace of the [`sample_independent`] family.
pub const INDEPENDENT_OPS: usize = 100_000;

/// The live budget of the [`sample_independent`] family on lavapipe (on the
/// H200 the trace had 2 GiB).
pub const INDEPENDENT_BUDGET: u64 = 1 << 30;

/// `count` configurations of the family that matches issue 9's independent
/// renderer trace: textures log-uniform from 64 KiB up to 256 MiB with the
/// driver's dedicated hints, geometry, uniform and staging buffers (no
/// render targets), and a live budget of `budget` bytes whatever the heap.
/// The mix, churn and staging rate are drawn from `seed` over the same
/// ranges as [`sample`]'s. (A separate family, so [`sample`]'s
/// configurations for a seed stay what they were.)
pub fn sample_independent(seed: u64, count: usize, budget: u64) -> Vec<CorpusConfig> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..count)
        .map(|index| CorpusConfig {
            index,
            seed: rng.gen(),
            mix: draw_mix(&mut rng),
            texture_max: 256 * MIB,
            resolution: 0,
            render_targets: 0,
            msaa: 0.0,
            churn: log_uniform(&mut rng, 0.002, 0.1),
            staging_per_frame: rng.gen_range(0.0..4.0),
            budget: 0.0,
            resize: 0.0,
            dedicated: DedicatedHint::Driver,
            budget_bytes: Some(budget),
        })
        .collect()
}

/// Operations (allocations and frees) per corpus trace at a scale.
pub fn default_ops(scale: Scale) -> usize {
    match scale {
        Scale::Small => 6_000,
        Scale::Full => 60_000,
    }
}

/// The heap bytes the budget is a share of at a scale: the resolver's heap,
/// at small scale at most 1 GiB (so lavapipe runs stay light).
pub fn heap_for(scale: Scale, heap: u64) -> u64 {
    match scale {
        Scale::Small => heap.min(1 << 30),
        Scale::Full => heap,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Texture,
    Geometry,
    Uniform,
    RenderTarget,
    Staging,
}

struct Live {
    size: u64,
    class: Class,
    dies_at: Option<u64>,
}

/// Builds a trace, keeping the live bytes within the budget.
struct Builder<'r> {
    resolver: &'r mut dyn Resolve,
    rng: ChaCha8Rng,
    events: Vec<TraceEvent>,
    live: HashMap<u64, Live>,
    order: Vec<u64>,
    next_id: u64,
    live_bytes: u64,
    budget: u64,
    frame: u64,
    ops: usize,
    dedicated: DedicatedHint,
}

const COLOUR_FORMATS: [vk::Format; 4] = [
    vk::Format::R8G8B8A8_UNORM,
    vk::Format::R16G16B16A16_SFLOAT,
    vk::Format::B10G11R11_UFLOAT_PACK32,
    vk::Format::A2B10G10R10_UNORM_PACK32,
];
const TEXTURE_FORMATS: [vk::Format; 5] = [
    vk::Format::BC1_RGBA_UNORM_BLOCK,
    vk::Format::BC7_UNORM_BLOCK,
    vk::Format::BC5_UNORM_BLOCK,
    vk::Format::R8G8B8A8_UNORM,
    vk::Format::R16G16B16A16_SFLOAT,
];

impl Builder<'_> {
    fn remove(&mut self, id: u64) {
        if let Some(l) = self.live.remove(&id) {
            self.live_bytes -= l.size;
            self.events.push(TraceEvent::Free { id });
            self.ops += 1;
        }
    }

    /// Frees random persistent resources (not render targets) until `need`
    /// more bytes fit in the budget; false when they can't.
    fn make_room(&mut self, need: u64) -> bool {
        while self.live_bytes + need > self.budget {
            let victims: Vec<u64> = self
                .order
                .iter()
                .copied()
                .filter(|id| {
                    self.live
                        .get(id)
                        .is_some_and(|l| l.class != Class::RenderTarget)
                })
                .collect();
            let Some(&id) = victims.choose(&mut self.rng) else {
                return false;
            };
            self.remove(id);
            self.order.retain(|&x| x != id);
        }
        true
    }

    fn add(&mut self, r: &Resource, class: Class, usage: TraceUsage, dies_at: Option<u64>) -> bool {
        let Some(mut q) = self.resolver.resolve(r) else {
            return false;
        };
        match self.dedicated {
            DedicatedHint::Driver => {}
            DedicatedHint::RenderTargets => {
                if class == Class::RenderTarget && q.dedicated == TraceDedicated::None {
                    q.dedicated = TraceDedicated::Preferred;
                }
            }
            DedicatedHint::RequiredOnly => {
                if q.dedicated == TraceDedicated::Preferred {
                    q.dedicated = TraceDedicated::None;
                }
            }
        }
        if q.size > self.budget / 2 || !self.make_room(q.size) {
            return false;
        }
        let id = self.next_id;
        self.next_id += 1;
        let kind = match r {
            Resource::Buffer { .. } => TraceKind::Buffer,
            Resource::Image { .. } => TraceKind::OptimalImage,
        };
        self.events.push(TraceEvent::Alloc(AllocEvent {
            id,
            size: q.size.max(1),
            alignment: q.alignment.max(1),
            memory_type_bits: q.memory_type_bits,
            kind,
            usage,
            dedicated: q.dedicated,
            tag: match class {
                Class::Texture => "texture",
                Class::Geometry => "geometry",
                Class::Uniform => "uniform",
                Class::RenderTarget => "render-target",
                Class::Staging => "staging",
            }
            .to_owned(),
        }));
        self.ops += 1;
        self.live_bytes += q.size.max(1);
        self.live.insert(
            id,
            Live {
                size: q.size.max(1),
                class,
                dies_at,
            },
        );
        if dies_at.is_none() {
            self.order.push(id);
        }
        true
    }

    fn texture(&mut self, max: u64) -> Resource {
        let target = self
            .rng
            .gen_range((64.0 * KIB as f64).ln()..=(max.max(128 * KIB) as f64).ln())
            .exp();
        let format = *TEXTURE_FORMATS.choose(&mut self.rng).expect("non-empty");
        let (block, edge) = format_block(format);
        let texels = target / block as f64 * (edge * edge) as f64 * 0.75; // 4/3 for the mips
        let wide = self.rng.gen_bool(0.2);
        let side = (texels / if wide { 0.5 } else { 1.0 }).sqrt();
        let w = (side.log2().round() as u32).clamp(6, 14);
        let width = 1u32 << w;
        let height = if wide { width / 2 } else { width };
        let mips = if self.rng.gen_bool(0.9) {
            32 - width.max(height).leading_zeros()
        } else {
            1
        };
        Resource::Image {
            width,
            height,
            format: format.as_raw(),
            mips,
            samples: 1,
            usage: (vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_DST).as_raw(),
        }
    }

    fn render_targets(&mut self, c: &CorpusConfig, resolution: usize) -> Vec<u64> {
        let (w, h, _) = RESOLUTIONS[resolution];
        let mut ids = Vec::new();
        for i in 0..c.render_targets {
            let depth = i == 1;
            let samples = if self.rng.gen_bool(c.msaa) { 4 } else { 1 };
            let (format, usage) = if depth {
                (
                    vk::Format::D32_SFLOAT,
                    vk::ImageUsageFlags::DEPTH_STENCIL_ATTACHMENT | vk::ImageUsageFlags::SAMPLED,
                )
            } else {
                (
                    *COLOUR_FORMATS.choose(&mut self.rng).expect("non-empty"),
                    vk::ImageUsageFlags::COLOR_ATTACHMENT | vk::ImageUsageFlags::SAMPLED,
                )
            };
            // Later targets of a set are often half resolution (bloom, AO).
            let div = if i >= 4 && self.rng.gen_bool(0.5) {
                2
            } else {
                1
            };
            let r = Resource::Image {
                width: w / div,
                height: h / div,
                format: format.as_raw(),
                mips: 1,
                samples,
                usage: usage.as_raw(),
            };
            let id = self.next_id;
            let fallback = Resource::Image {
                width: w / div,
                height: h / div,
                format: if depth {
                    vk::Format::D32_SFLOAT.as_raw()
                } else {
                    vk::Format::R8G8B8A8_UNORM.as_raw()
                },
                mips: 1,
                samples: 1,
                usage: usage.as_raw(),
            };
            if self.add(&r, Class::RenderTarget, TraceUsage::GpuOnly, None)
                || self.add(&fallback, Class::RenderTarget, TraceUsage::GpuOnly, None)
            {
                ids.push(id);
            }
        }
        ids
    }

    fn persistent(&mut self, c: &CorpusConfig) {
        let total: f64 = c.mix.iter().sum();
        let pick = self.rng.gen_range(0.0..total.max(1e-9));
        let (r, class, usage) = if pick < c.mix[0] {
            (
                self.texture(c.texture_max),
                Class::Texture,
                TraceUsage::GpuOnly,
            )
        } else if pick < c.mix[0] + c.mix[1] {
            let size = self
                .rng
                .gen_range((4.0 * KIB as f64).ln()..=(32.0 * MIB as f64).ln())
                .exp() as u64;
            let usage = vk::BufferUsageFlags::VERTEX_BUFFER
                | vk::BufferUsageFlags::INDEX_BUFFER
                | vk::BufferUsageFlags::TRANSFER_DST;
            (
                Resource::Buffer {
                    size: size.div_ceil(256) * 256,
                    usage: usage.as_raw(),
                },
                Class::Geometry,
                TraceUsage::GpuOnly,
            )
        } else {
            let size = self
                .rng
                .gen_range((256.0f64).ln()..=(64.0 * KIB as f64).ln())
                .exp() as u64;
            (
                Resource::Buffer {
                    size: size.div_ceil(256) * 256,
                    usage: vk::BufferUsageFlags::UNIFORM_BUFFER.as_raw(),
                },
                Class::Uniform,
                TraceUsage::Upload,
            )
        };
        self.add(&r, class, usage, None);
    }

    fn staging(&mut self) {
        let size = self
            .rng
            .gen_range((64.0 * KIB as f64).ln()..=(64.0 * MIB as f64).ln())
            .exp() as u64;
        let readback = self.rng.gen_bool(0.1);
        let (usage, flags) = if readback {
            (TraceUsage::Readback, vk::BufferUsageFlags::TRANSFER_DST)
        } else {
            (TraceUsage::Upload, vk::BufferUsageFlags::TRANSFER_SRC)
        };
        let dies = self.frame + self.rng.gen_range(1..=3);
        self.add(
            &Resource::Buffer {
                size: size.div_ceil(256) * 256,
                usage: flags.as_raw(),
            },
            Class::Staging,
            usage,
            Some(dies),
        );
    }
}

/// Generates the trace of `c` with requirements from `resolver`, about
/// `ops` allocations and frees, named [`CorpusConfig::name`].
pub fn generate(c: &CorpusConfig, resolver: &mut dyn Resolve, scale: Scale, ops: usize) -> Trace {
    let heap = heap_for(scale, resolver.heap_bytes());
    let mut b = Builder {
        resolver,
        rng: ChaCha8Rng::seed_from_u64(c.seed),
        events: Vec::new(),
        live: HashMap::new(),
        order: Vec::new(),
        next_id: 0,
        live_bytes: 0,
        budget: c.budget_bytes.unwrap_or((heap as f64 * c.budget) as u64),
        frame: 0,
        ops: 0,
        dedicated: c.dedicated,
    };
    let mut resolution = c.resolution;
    let mut targets = b.render_targets(c, resolution);
    // Load: fill 60..90% of the budget with persistent resources.
    let fill = (b.budget as f64 * b.rng.gen_range(0.6..0.9)) as u64;
    let mut tries = 0;
    while b.live_bytes < fill && b.ops < ops / 3 && tries < 100_000 {
        b.persistent(c);
        tries += 1;
    }
    while b.ops < ops {
        b.events.push(TraceEvent::Frame { index: b.frame });
        b.frame += 1;
        let frame = b.frame;
        let dead: Vec<u64> = b
            .live
            .iter()
            .filter(|(_, l)| l.dies_at.is_some_and(|d| d <= frame))
            .map(|(&id, _)| id)
            .collect();
        let mut dead = dead;
        dead.sort_unstable();
        for id in dead {
            b.remove(id);
        }
        if b.rng.gen_bool(c.resize) {
            for id in std::mem::take(&mut targets) {
                b.remove(id);
                b.order.retain(|&x| x != id);
            }
            resolution = b.rng.gen_range(0..RESOLUTIONS.len());
            targets = b.render_targets(c, resolution);
        }
        let persistent = b.order.len() as f64;
        let mut replace = persistent * c.churn;
        let whole = replace.floor();
        replace = whole + f64::from(u8::from(b.rng.gen_bool(replace - whole)));
        for _ in 0..replace as usize {
            let victims: Vec<u64> = b
                .order
                .iter()
                .copied()
                .filter(|id| {
                    b.live
                        .get(id)
                        .is_some_and(|l| l.class != Class::RenderTarget)
                })
                .collect();
            if let Some(&id) = victims.choose(&mut b.rng) {
                b.remove(id);
                b.order.retain(|&x| x != id);
            }
            b.persistent(c);
        }
        let staging = c.staging_per_frame;
        let n = staging.floor() as usize + usize::from(b.rng.gen_bool(staging.fract()));
        for _ in 0..n {
            b.staging();
        }
        // A per-frame uniform ring slice that dies next frame.
        let r = Resource::Buffer {
            size: 64 * KIB,
            usage: vk::BufferUsageFlags::UNIFORM_BUFFER.as_raw(),
        };
        let next = b.frame + 1;
        b.add(&r, Class::Uniform, TraceUsage::Upload, Some(next));
    }
    let mut header = TraceHeader::new(c.name(), c.seed, scale.as_str());
    header.note = format!("{}; {}", c.describe(), b.resolver.describe());
    Trace {
        header,
        events: b.events,
    }
}

/// The budget, in bytes, that [`generate`] keeps `c`'s live bytes within.
pub fn budget_bytes(c: &CorpusConfig, resolver: &dyn Resolve, scale: Scale) -> u64 {
    c.budget_bytes
        .unwrap_or((heap_for(scale, resolver.heap_bytes()) as f64 * c.budget) as u64)
}

/// Reads one metric from a row.
pub type Metric = fn(&crate::runner::Row) -> f64;

/// The metrics the corpus summary and the Pareto check compare (lower is
/// better for each): name, and how to read it from a row.
pub const METRICS: [(&str, Metric); 7] = [
    ("committed/live", |r| r.committed_to_live_ratio),
    ("peak committed MiB", |r| {
        r.peak_committed_bytes / MIB as f64
    }),
    ("wall ms", |r| r.wall_ms),
    ("vkAllocateMemory", |r| r.device_allocations),
    ("alloc own ns", |r| r.alloc_own_ns_median),
    ("free own ns", |r| r.free_own_ns_median),
    ("allocated MiB", |r| r.device_allocated_bytes / MIB as f64),
];

/// The Pareto metrics: peak committed, wall, driver calls, own times.
const PARETO: [usize; 5] = [1, 2, 3, 4, 5];

fn geomean(values: &[f64]) -> f64 {
    let v: Vec<f64> = values.iter().map(|&x| x.max(1e-9)).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}

/// Whether `a` Pareto-dominates `b`: no worse on every Pareto metric and
/// better on one.
pub fn dominates(a: &crate::runner::Row, b: &crate::runner::Row) -> bool {
    let mut better = false;
    for &i in &PARETO {
        let (x, y) = (METRICS[i].1(a), METRICS[i].1(b));
        if x > y {
            return false;
        }
        better |= x < y;
    }
    better
}

/// The corpus report: per allocator and metric the geometric mean and the
/// worst case (largest) over the traces; per peer the ratio peer/ours
/// (geometric mean, and the worst for ours: the smallest); and per trace
/// whether ours Pareto-dominates each peer.
pub fn format_summary(rows: &[crate::runner::Row]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut allocators: Vec<&str> = Vec::new();
    let mut traces: Vec<&str> = Vec::new();
    for r in rows {
        if !allocators.contains(&r.allocator.as_str()) {
            allocators.push(&r.allocator);
        }
        if !traces.contains(&r.trace.as_str()) {
            traces.push(&r.trace);
        }
    }
    let find = |t: &str, a: &str| rows.iter().find(|r| r.trace == t && r.allocator == a);
    let _ = writeln!(
        out,
        "### Per allocator over {} traces: geometric mean / worst case\n",
        traces.len()
    );
    let _ = write!(out, "| allocator |");
    for (m, _) in METRICS {
        let _ = write!(out, " {m} |");
    }
    let _ = writeln!(out, "\n| --- |{}", " ---: |".repeat(METRICS.len()));
    for a in &allocators {
        let _ = write!(out, "| {a} |");
        for (_, f) in METRICS {
            let v: Vec<f64> = rows.iter().filter(|r| r.allocator == *a).map(f).collect();
            let worst = v.iter().copied().fold(f64::NAN, f64::max);
            let _ = write!(out, " {:.2} / {:.2} |", geomean(&v), worst);
        }
        let _ = writeln!(out);
    }
    if allocators.contains(&"ours") {
        let _ = writeln!(
            out,
            "\n### Peer/ours per metric (> 1: ours better): geometric mean / worst for ours (min), and the trace\n"
        );
        let _ = write!(out, "| peer |");
        for (m, _) in METRICS {
            let _ = write!(out, " {m} |");
        }
        let _ = writeln!(out, "\n| --- |{}", " ---: |".repeat(METRICS.len()));
        for p in allocators.iter().filter(|a| **a != "ours") {
            let _ = write!(out, "| {p} |");
            for (_, f) in METRICS {
                let pairs: Vec<(f64, &str)> = traces
                    .iter()
                    .filter_map(|t| {
                        let (o, q) = (find(t, "ours")?, find(t, p)?);
                        Some((f(q).max(1e-9) / f(o).max(1e-9), *t))
                    })
                    .collect();
                let ratios: Vec<f64> = pairs.iter().map(|x| x.0).collect();
                let worst = pairs.iter().min_by(|x, y| x.0.total_cmp(&y.0));
                match worst {
                    Some((w, t)) => {
                        let _ = write!(out, " {:.2} / {:.2} ({t}) |", geomean(&ratios), w);
                    }
                    None => {
                        let _ = write!(out, " - |");
                    }
                }
            }
            let _ = writeln!(out);
        }
        let _ = writeln!(
            out,
            "\n### Does ours Pareto-dominate? (peak committed, wall, vkAllocateMemory calls, alloc and free own ns medians: no worse on all, better on one)\n"
        );
        let peers: Vec<&str> = allocators
            .iter()
            .copied()
            .filter(|a| *a != "ours")
            .collect();
        let _ = write!(out, "| trace |");
        for p in &peers {
            let _ = write!(out, " vs {p} |");
        }
        let _ = writeln!(out, "\n| --- |{}", " --- |".repeat(peers.len()));
        let mut counts = vec![(0usize, 0usize, 0usize); peers.len()];
        for t in &traces {
            let _ = write!(out, "| {t} |");
            for (k, p) in peers.iter().enumerate() {
                let cell = match (find(t, "ours"), find(t, p)) {
                    (Some(o), Some(q)) => {
                        counts[k].2 += 1;
                        if dominates(o, q) {
                            counts[k].0 += 1;
                            "dominates".to_owned()
                        } else if dominates(q, o) {
                            counts[k].1 += 1;
                            "dominated".to_owned()
                        } else {
                            let worse: Vec<&str> = PARETO
                                .iter()
                                .filter(|&&i| METRICS[i].1(o) > METRICS[i].1(q))
                                .map(|&i| METRICS[i].0)
                                .collect();
                            format!("no (worse: {})", worse.join(", "))
                        }
                    }
                    _ => "-".to_owned(),
                };
                let _ = write!(out, " {cell} |");
            }
            let _ = writeln!(out);
        }
        for (k, p) in peers.iter().enumerate() {
            let _ = writeln!(
                out,
                "\nvs {p}: ours dominates on {} of {} traces, is dominated on {}.",
                counts[k].0, counts[k].2, counts[k].1
            );
        }
    }
    out
}

/// With `--defrag`: per trace, ours' live bytes at the end, committed
/// before and after compaction, and whether after ≤ max(1.1 × live, live +
/// 64 MiB).
pub fn format_defrag(rows: &[crate::runner::Row]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| trace | live at end MiB | committed before MiB | committed after MiB | goal MiB | met | moved MiB | passes | complete | pinned | defrag ms |"
    );
    let _ = writeln!(
        out,
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- | ---: | ---: |"
    );
    let m = |b: f64| b / MIB as f64;
    for r in rows {
        let (Some(live), Some(before), Some(after)) = (
            r.live_at_end_bytes,
            r.committed_before_defrag_bytes,
            r.committed_after_defrag_bytes,
        ) else {
            continue;
        };
        let goal = defrag_goal(live);
        let _ = writeln!(
            out,
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {:.1} | {:.0} | {} | {:.0} | {:.1} |{}",
            r.trace,
            m(live),
            m(before),
            m(after),
            m(goal),
            if after <= goal { "yes" } else { "NO" },
            m(r.defrag_bytes_moved.unwrap_or(0.0)),
            r.defrag_passes.unwrap_or(0.0),
            match r.defrag_complete {
                Some(c) if c >= 1.0 => "yes".to_owned(),
                Some(c) => format!("{:.0}% of runs", c * 100.0),
                None => "-".to_owned(),
            },
            r.defrag_pinned.unwrap_or(0.0),
            r.defrag_ms.unwrap_or(0.0),
            r.defrag_error
                .as_deref()
                .map(|e| format!(" error: {e}"))
                .unwrap_or_default()
        );
    }
    out
}

/// The committed bytes compaction should reach for `live` bytes:
/// max(1.1 × live, live + 64 MiB).
pub fn defrag_goal(live: f64) -> f64 {
    (1.1 * live).max(live + 64.0 * MIB as f64)
}
