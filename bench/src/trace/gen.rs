//! The standard traces: synthetic allocation patterns of a renderer,
//! deterministic from a seed and a scale.
//!
//! | name | what it does |
//! | --- | --- |
//! | `renderer-mix` | 4K render targets (recreated on resize), textures 64 KiB–256 MiB (32 MiB at small scale), vertex and index buffers, uniforms, staging that dies a few frames later, readback; assets loaded in bursts, evicted under a budget, level changes |
//! | `streaming-churn` | 8K texture mip chains swapped finer and coarser by a streamer under a fixed budget, with a staging buffer per upload |
//! | `frame-transient` | per-frame uniforms, staging, scratch buffers and transient attachments that all die at the frame's end, over a small persistent set |
//! | `many-small` | at least 100,000 live small buffers (64 B–4 KiB), built with churn, then churned |
//! | `fragmentation` | interleaved small and large buffers and images; the large ones freed, then requests just too big for the holes; survivors spread over the blocks |
//!
//! `small` runs in seconds on lavapipe (its heap is 2 GiB: peak live stays
//! under about 700 MiB); `full` is for a real GPU (peak live up to ~12 GiB).
//! Every allocation allows every memory type (`memory_type_bits` =
//! `0xffffffff`); a replayer masks that to its device's types.
//! The dedicated wish follows what an NVIDIA driver reports: preferred for
//! optimal-tiling images of 32 MiB and more, otherwise none.
//! Allocations live at the end of a trace are left live (a program's state
//! before teardown), so end-of-trace statistics show a steady state.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use vkalloc::trace::format::{
    AllocEvent, Trace, TraceDedicated, TraceEvent, TraceHeader, TraceKind, TraceUsage,
};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

/// How big a standard trace is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scale {
    /// Seconds on lavapipe; peak live well under lavapipe's 2 GiB heap.
    Small,
    /// For a real GPU: more operations and gigabytes live.
    Full,
}

impl Scale {
    /// `"small"` or `"full"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scale::Small => "small",
            Scale::Full => "full",
        }
    }

    fn pick<T>(self, small: T, full: T) -> T {
        match self {
            Scale::Small => small,
            Scale::Full => full,
        }
    }
}

impl fmt::Display for Scale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scale {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "small" => Ok(Scale::Small),
            "full" => Ok(Scale::Full),
            other => Err(format!("unknown scale {other:?} (small or full)")),
        }
    }
}

/// The names of the standard traces, in the order they are run.
pub const STANDARD_TRACES: [&str; 5] = [
    "renderer-mix",
    "streaming-churn",
    "frame-transient",
    "many-small",
    "fragmentation",
];

/// The seed used when none is given.
pub const DEFAULT_SEED: u64 = 0x5eed_2026;

/// Generates the standard trace `name`; `None` for an unknown name.
pub fn generate(name: &str, seed: u64, scale: Scale) -> Option<Trace> {
    let mut g = Gen::new(name, seed, scale);
    match name {
        "renderer-mix" => renderer_mix(&mut g),
        "streaming-churn" => streaming_churn(&mut g),
        "frame-transient" => frame_transient(&mut g),
        "many-small" => many_small(&mut g),
        "fragmentation" => fragmentation(&mut g),
        _ => return None,
    }
    Some(g.finish())
}

/// Generates every standard trace.
pub fn generate_all(seed: u64, scale: Scale) -> Vec<Trace> {
    STANDARD_TRACES
        .iter()
        .map(|n| generate(n, seed, scale).expect("standard trace"))
        .collect()
}

/// The trace being built.
struct Gen {
    header: TraceHeader,
    scale: Scale,
    rng: ChaCha8Rng,
    events: Vec<TraceEvent>,
    next_id: u64,
    sizes: HashMap<u64, u64>,
    live_bytes: u64,
    frame: u64,
}

/// What to allocate.
#[derive(Clone, Copy)]
struct Req {
    size: u64,
    alignment: u64,
    kind: TraceKind,
    usage: TraceUsage,
    tag: &'static str,
}

impl Gen {
    fn new(name: &str, seed: u64, scale: Scale) -> Self {
        // Mix the name into the seed so traces differ for one seed.
        let mut h = seed ^ 0x9e37_79b9_7f4a_7c15;
        for b in name.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        Self {
            header: TraceHeader::new(name, seed, scale.as_str()),
            scale,
            rng: ChaCha8Rng::seed_from_u64(h),
            events: Vec::new(),
            next_id: 0,
            sizes: HashMap::new(),
            live_bytes: 0,
            frame: 0,
        }
    }

    fn alloc(&mut self, r: Req) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let size = r.size.max(1);
        let dedicated = if r.kind == TraceKind::OptimalImage && size >= 32 * MIB {
            TraceDedicated::Preferred
        } else {
            TraceDedicated::None
        };
        self.events.push(TraceEvent::Alloc(AllocEvent {
            id,
            size,
            alignment: r.alignment,
            memory_type_bits: u32::MAX,
            kind: r.kind,
            usage: r.usage,
            dedicated,
            tag: r.tag.to_owned(),
        }));
        self.sizes.insert(id, size);
        self.live_bytes += size;
        id
    }

    fn free(&mut self, id: u64) {
        let size = self.sizes.remove(&id).expect("free of a live id");
        self.live_bytes -= size;
        self.events.push(TraceEvent::Free { id });
    }

    fn frame(&mut self) {
        self.events.push(TraceEvent::Frame { index: self.frame });
        self.frame += 1;
    }

    /// A size drawn log-uniformly from `[lo, hi]`, rounded up to `round`.
    fn log_size(&mut self, lo: u64, hi: u64, round: u64) -> u64 {
        let (l, h) = ((lo as f64).ln(), (hi as f64).ln());
        let s = self.rng.gen_range(l..=h).exp() as u64;
        s.clamp(lo, hi).div_ceil(round) * round
    }

    fn finish(self) -> Trace {
        Trace {
            header: self.header,
            events: self.events,
        }
    }
}

/// Bytes of a 2D image with `levels` mips (or a full chain when `None`),
/// `bpp` bytes per pixel, block-compressed formats (`bpp` 1) in 4×4 blocks.
fn image_bytes(width: u64, height: u64, bpp: u64, mips: bool) -> u64 {
    let (mut w, mut h) = (width, height);
    let mut total = 0;
    loop {
        let (bw, bh) = if bpp == 1 {
            (w.div_ceil(4) * 4, h.div_ceil(4) * 4)
        } else {
            (w, h)
        };
        total += bw * bh * bpp;
        if !mips || (w == 1 && h == 1) {
            break;
        }
        w = (w / 2).max(1);
        h = (h / 2).max(1);
    }
    total
}

/// The alignment a desktop driver reports for an optimal-tiling image.
fn image_alignment(size: u64) -> u64 {
    if size >= 4 * MIB {
        64 * KIB
    } else {
        4 * KIB
    }
}

fn image(size: u64, usage: TraceUsage, tag: &'static str) -> Req {
    let alignment = image_alignment(size);
    Req {
        size: size.div_ceil(alignment) * alignment,
        alignment,
        kind: TraceKind::OptimalImage,
        usage,
        tag,
    }
}

fn buffer(size: u64, alignment: u64, usage: TraceUsage, tag: &'static str) -> Req {
    Req {
        size,
        alignment,
        kind: TraceKind::Buffer,
        usage,
        tag,
    }
}

/// A texture of 64 KiB–`max` bytes: block-compressed, RGBA8 or RGBA16F, square
/// or 2:1, mostly with a full mip chain.
fn texture(g: &mut Gen, max: u64) -> Req {
    loop {
        let bpp = match g.rng.gen_range(0..10) {
            0..=5 => 1,
            6..=8 => 4,
            _ => 8,
        };
        // 128..=16384, most often 512..=2048.
        let dim_log = *[7u32, 8, 9, 9, 10, 10, 10, 11, 11, 11, 12, 12, 13, 14]
            .choose(&mut g.rng)
            .expect("non-empty");
        let w = 1u64 << dim_log;
        let h = if g.rng.gen_bool(0.2) { w / 2 } else { w };
        let mips = g.rng.gen_bool(0.9);
        let size = image_bytes(w, h, bpp, mips);
        if (64 * KIB..=max).contains(&size) {
            return image(size, TraceUsage::GpuOnly, "texture");
        }
    }
}

/// Render targets for a `w`×`h` frame: HDR colour, depth, G-buffer, bloom
/// chain, a transient MSAA depth and a shadow map.
fn render_targets(g: &mut Gen, w: u64, h: u64) -> Vec<u64> {
    let mut ids = vec![
        g.alloc(image(w * h * 8, TraceUsage::GpuOnly, "rt-hdr-colour")),
        g.alloc(image(w * h * 4, TraceUsage::GpuOnly, "rt-depth")),
        g.alloc(image(w * h * 4, TraceUsage::GpuOnly, "rt-gbuffer-albedo")),
        g.alloc(image(w * h * 4, TraceUsage::GpuOnly, "rt-gbuffer-normal")),
        g.alloc(image(w * h * 4, TraceUsage::GpuOnly, "rt-gbuffer-material")),
        g.alloc(image(w * h * 4, TraceUsage::Transient, "rt-msaa-depth")),
        g.alloc(image(4096 * 4096 * 4, TraceUsage::GpuOnly, "rt-shadow")),
    ];
    let (mut bw, mut bh) = (w / 2, h / 2);
    for _ in 0..5 {
        ids.push(g.alloc(image(bw * bh * 8, TraceUsage::GpuOnly, "rt-bloom")));
        bw /= 2;
        bh /= 2;
    }
    ids
}

/// One loaded asset: textures and a mesh.
struct Asset {
    ids: Vec<u64>,
}

/// Loads an asset: up to four textures (stopping once `upload_room` bytes
/// of staging are used), a mesh and maybe a storage buffer.
fn load_asset(g: &mut Gen, staging: &mut Vec<(u64, u64)>, upload_room: u64) -> Asset {
    let mut ids = Vec::new();
    let textures = g.rng.gen_range(1..=4);
    // Textures up to 256 MiB at full scale; up to 32 MiB at small scale, so
    // peak live stays well inside lavapipe's 2 GiB heap.
    let max = g.scale.pick(32 * MIB, 256 * MIB);
    let mut uploaded = 0;
    for _ in 0..textures {
        if uploaded >= upload_room {
            break;
        }
        let t = texture(g, max);
        let size = t.size;
        uploaded += size;
        ids.push(g.alloc(t));
        // A staging buffer for the upload, freed two or three frames later.
        let s = g.alloc(buffer(size, 64, TraceUsage::Upload, "staging"));
        let die = g.frame + g.rng.gen_range(1..=2);
        staging.push((die, s));
    }
    let vertices = g.log_size(16 * KIB, 16 * MIB, 16);
    ids.push(g.alloc(buffer(vertices, 16, TraceUsage::GpuOnly, "vertex")));
    let indices = (vertices / 3).max(4 * KIB).div_ceil(16) * 16;
    ids.push(g.alloc(buffer(indices, 16, TraceUsage::GpuOnly, "index")));
    if g.rng.gen_bool(0.3) {
        let storage = g.log_size(64 * KIB, 8 * MIB, 256);
        ids.push(g.alloc(buffer(storage, 256, TraceUsage::GpuOnly, "storage")));
    }
    Asset { ids }
}

fn free_asset(g: &mut Gen, asset: Asset) {
    for id in asset.ids {
        g.free(id);
    }
}

fn asset_bytes(g: &Gen, a: &Asset) -> u64 {
    a.ids.iter().map(|id| g.sizes[id]).sum()
}

fn renderer_mix(g: &mut Gen) {
    let frames = g.scale.pick(400, 4000);
    let budget = g.scale.pick(128 * MIB, 10 * 1024 * MIB);
    // Bytes of staging a frame may start (an upload cap, as streamers have).
    let upload_cap = g.scale.pick(32 * MIB, 1024 * MIB);
    let (w, h) = (3840u64, 2160u64);

    g.frame();
    let mut targets = render_targets(g, w, h);
    let globals = [
        g.alloc(buffer(4 * MIB, 256, TraceUsage::Upload, "uniform-ring")),
        g.alloc(buffer(MIB, 256, TraceUsage::Readback, "readback")),
        g.alloc(buffer(256 * KIB, 256, TraceUsage::GpuOnly, "indirect")),
        g.alloc(buffer(32 * MIB, 256, TraceUsage::GpuOnly, "light-grid")),
    ];
    let _ = globals;
    let mut assets: Vec<Asset> = Vec::new();
    let mut asset_total = 0u64;
    let mut staging: Vec<(u64, u64)> = Vec::new();
    let mut per_frame: Vec<(u64, u64)> = Vec::new();
    let mut loading_until = 12u64;

    for f in 1..frames {
        g.frame();
        // Retire staging and per-frame buffers whose frame has come.
        for list in [&mut staging, &mut per_frame] {
            let mut keep = Vec::with_capacity(list.len());
            let mut dead = Vec::new();
            for &(die, id) in list.iter() {
                if die <= f {
                    dead.push(id);
                } else {
                    keep.push((die, id));
                }
            }
            *list = keep;
            for id in dead {
                g.free(id);
            }
        }
        // A level change now and then: most assets go, a loading burst follows.
        if f % g.scale.pick(130, 700) == 0 {
            assets.shuffle(&mut g.rng);
            let keep = assets.len() * 3 / 10;
            for a in assets.drain(keep..).collect::<Vec<_>>() {
                asset_total -= asset_bytes(g, &a);
                free_asset(g, a);
            }
            loading_until = f + 10;
        }
        // A resolution change now and then: every render target is recreated.
        if f % g.scale.pick(170, 900) == 0 {
            for id in targets.drain(..) {
                g.free(id);
            }
            let (nw, nh) = if g.rng.gen_bool(0.5) {
                (2560, 1440)
            } else {
                (w, h)
            };
            targets = render_targets(g, nw, nh);
        }
        // Streaming in: a burst while loading, a trickle otherwise.
        let loads = if f < loading_until {
            g.scale.pick(12, 40)
        } else {
            g.rng.gen_range(0..=2)
        };
        let mut uploaded = 0;
        for _ in 0..loads {
            if uploaded >= upload_cap {
                break;
            }
            let before = staging.len();
            let a = load_asset(g, &mut staging, upload_cap - uploaded);
            uploaded += staging[before..]
                .iter()
                .map(|(_, id)| g.sizes[id])
                .sum::<u64>();
            asset_total += asset_bytes(g, &a);
            assets.push(a);
            // Evict random older assets while over budget.
            while asset_total > budget && assets.len() > 1 {
                let i = g.rng.gen_range(0..assets.len() - 1);
                let a = assets.swap_remove(i);
                asset_total -= asset_bytes(g, &a);
                free_asset(g, a);
            }
        }
        // Per-frame uniforms and a few dynamic buffers, alive for the frames in flight.
        for _ in 0..g.rng.gen_range(4..=12) {
            let size = g.log_size(256, 64 * KIB, 256);
            let id = g.alloc(buffer(size, 256, TraceUsage::Upload, "uniforms"));
            per_frame.push((f + 2, id));
        }
        if g.rng.gen_bool(0.2) {
            let size = g.log_size(64 * KIB, 4 * MIB, 64);
            let id = g.alloc(buffer(size, 64, TraceUsage::Upload, "dynamic-vertex"));
            per_frame.push((f + 2, id));
        }
        if g.rng.gen_bool(0.05) {
            let size = g.log_size(4 * KIB, MIB, 256);
            let id = g.alloc(buffer(size, 256, TraceUsage::Readback, "readback"));
            per_frame.push((f + 3, id));
        }
    }
}

/// Bytes of a block-compressed or RGBA8 texture of `dim`² whose finest
/// resident mip is `level`.
fn chain_bytes(dim: u64, bpp: u64, level: u32) -> u64 {
    let d = (dim >> level).max(1);
    image_bytes(d, d, bpp, true)
}

fn streaming_churn(g: &mut Gen) {
    let textures = g.scale.pick(24usize, 256);
    let budget = g.scale.pick(256 * MIB, 8 * 1024 * MIB);
    let upload_cap = g.scale.pick(96 * MIB, 1024 * MIB);
    let frames = g.scale.pick(500u64, 5000);
    let swaps_per_frame = g.scale.pick(6u32, 10);
    const COARSEST: u32 = 6; // 128² for an 8K texture.

    struct Tex {
        dim: u64,
        bpp: u64,
        level: u32,
        wanted: u32,
        id: u64,
    }
    g.frame();
    let mut tex: Vec<Tex> = (0..textures)
        .map(|_| {
            // Mostly 8K block-compressed, some 4K RGBA8.
            let (dim, bpp) = if g.rng.gen_bool(0.8) {
                (8192, 1)
            } else {
                (4096, 4)
            };
            let id = g.alloc(image(
                chain_bytes(dim, bpp, COARSEST),
                TraceUsage::GpuOnly,
                "stream-texture",
            ));
            Tex {
                dim,
                bpp,
                level: COARSEST,
                wanted: g.rng.gen_range(0..=COARSEST),
                id,
            }
        })
        .collect();
    let mut resident: u64 = tex.iter().map(|t| chain_bytes(t.dim, t.bpp, t.level)).sum();
    let mut staging: Vec<u64> = Vec::new();
    let swap = |g: &mut Gen, t: &mut Tex, level: u32, resident: &mut u64| {
        let old = chain_bytes(t.dim, t.bpp, t.level);
        let new = chain_bytes(t.dim, t.bpp, level);
        let id = g.alloc(image(new, TraceUsage::GpuOnly, "stream-texture"));
        g.free(t.id);
        t.id = id;
        t.level = level;
        *resident = *resident - old + new;
    };

    for _ in 1..frames {
        g.frame();
        for id in std::mem::take(&mut staging) {
            g.free(id);
        }
        // The camera moves: wanted levels drift.
        for _ in 0..g.rng.gen_range(2..=8) {
            let i = g.rng.gen_range(0..tex.len());
            let t = &mut tex[i];
            t.wanted = if g.rng.gen_bool(0.5) {
                t.wanted.saturating_sub(g.rng.gen_range(1..=2))
            } else {
                (t.wanted + g.rng.gen_range(1..=2)).min(COARSEST)
            };
        }
        let mut uploaded = 0;
        for _ in 0..swaps_per_frame {
            // A texture whose resident level is not the wanted one moves a
            // level towards it.
            let pending: Vec<usize> = (0..tex.len())
                .filter(|&j| tex[j].level != tex[j].wanted)
                .collect();
            let Some(&i) = pending.choose(&mut g.rng) else {
                break;
            };
            let (level, wanted) = (tex[i].level, tex[i].wanted);
            if wanted < level {
                if uploaded >= upload_cap {
                    continue;
                }
                let new_level = level - 1;
                let t = &tex[i];
                let upload =
                    chain_bytes(t.dim, t.bpp, new_level) - chain_bytes(t.dim, t.bpp, level);
                uploaded += upload;
                let s = g.alloc(buffer(upload, 64, TraceUsage::Upload, "stream-staging"));
                staging.push(s);
                swap(g, &mut tex[i], new_level, &mut resident);
            } else if wanted > level {
                swap(g, &mut tex[i], level + 1, &mut resident);
            }
            // Over budget: drop the finest mip of the finest textures.
            while resident > budget {
                let j = (0..tex.len())
                    .min_by_key(|&j| (tex[j].level, j))
                    .expect("textures");
                if tex[j].level >= COARSEST {
                    break;
                }
                let l = tex[j].level + 1;
                swap(g, &mut tex[j], l, &mut resident);
                tex[j].wanted = tex[j].wanted.max(l);
            }
        }
    }
}

fn frame_transient(g: &mut Gen) {
    let frames = g.scale.pick(300u64, 3000);
    g.frame();
    for _ in 0..20 {
        let size = g.log_size(MIB, 16 * MIB, 256);
        g.alloc(buffer(size, 256, TraceUsage::GpuOnly, "persistent"));
    }
    for _ in 1..frames {
        g.frame();
        let mut ids = Vec::new();
        for _ in 0..g.rng.gen_range(20..=60) {
            let size = g.log_size(256, 64 * KIB, 256);
            ids.push(g.alloc(buffer(size, 256, TraceUsage::Upload, "frame-uniforms")));
        }
        for _ in 0..g.rng.gen_range(2..=10) {
            let size = g.log_size(4 * KIB, 4 * MIB, 64);
            ids.push(g.alloc(buffer(size, 64, TraceUsage::Upload, "frame-staging")));
        }
        for _ in 0..g.rng.gen_range(1..=5) {
            let size = g.log_size(64 * KIB, 2 * MIB, 256);
            ids.push(g.alloc(buffer(size, 256, TraceUsage::GpuOnly, "frame-scratch")));
        }
        for _ in 0..g.rng.gen_range(0..=2) {
            let size = g.log_size(MIB, 16 * MIB, 4096);
            ids.push(g.alloc(image(size, TraceUsage::Transient, "frame-attachment")));
        }
        // The frame ends: everything it made dies, in the order it was made.
        for id in ids {
            g.free(id);
        }
    }
}

fn small_buffer(g: &mut Gen) -> Req {
    let size = match g.rng.gen_range(0..10) {
        0..=2 => 256,
        3..=4 => 512,
        5 => 1024,
        _ => g.log_size(64, 4 * KIB, 16),
    };
    let alignment = *[16u64, 64, 256].choose(&mut g.rng).expect("non-empty");
    let usage = if g.rng.gen_bool(0.8) {
        TraceUsage::GpuOnly
    } else {
        TraceUsage::Upload
    };
    buffer(size, alignment, usage, "small")
}

fn many_small(g: &mut Gen) {
    let target = g.scale.pick(100_000usize, 500_000);
    let churn = g.scale.pick(50_000usize, 250_000);
    let mut live: Vec<u64> = Vec::with_capacity(target + target / 8);
    g.frame();
    let mut made = 0usize;
    // Grow to `target` live, freeing a random one after every ten.
    while live.len() < target {
        let r = small_buffer(g);
        live.push(g.alloc(r));
        made += 1;
        if made.is_multiple_of(10) {
            let i = g.rng.gen_range(0..live.len());
            let id = live.swap_remove(i);
            g.free(id);
        }
        if made.is_multiple_of(5000) {
            g.frame();
        }
    }
    // Churn at the peak: free a random one, make a new one.
    for n in 0..churn {
        let i = g.rng.gen_range(0..live.len());
        let id = live.swap_remove(i);
        g.free(id);
        let r = small_buffer(g);
        live.push(g.alloc(r));
        if n % 5000 == 0 {
            g.frame();
        }
    }
}

fn fragmentation(g: &mut Gen) {
    let rounds = g.scale.pick(8u32, 16);
    let pairs = g.scale.pick(800usize, 8000);
    let mut survivors: Vec<u64> = Vec::new();
    for round in 0..rounds {
        g.frame();
        // Keep the total bounded: a random half of the older survivors go.
        survivors.shuffle(&mut g.rng);
        let keep = survivors.len() / 2;
        for id in survivors.drain(keep..).collect::<Vec<_>>() {
            g.free(id);
        }
        let small = g.log_size(2 * KIB, 16 * KIB, 256) << (round % 3);
        let large = small * g.rng.gen_range(3..=6);
        // Interleave small and large, buffers and optimal images (so
        // bufferImageGranularity matters between neighbours).
        let mut smalls = Vec::with_capacity(pairs);
        let mut larges = Vec::with_capacity(pairs);
        for i in 0..pairs {
            let kind_small = if i % 2 == 0 {
                TraceKind::Buffer
            } else {
                TraceKind::OptimalImage
            };
            let jitter = g.rng.gen_range(0..4) * 256;
            smalls.push(g.alloc(Req {
                size: small + jitter,
                alignment: 256,
                kind: kind_small,
                usage: TraceUsage::GpuOnly,
                tag: "frag-small",
            }));
            let kind_large = if i % 3 == 0 {
                TraceKind::OptimalImage
            } else {
                TraceKind::Buffer
            };
            larges.push(g.alloc(Req {
                size: large + jitter,
                alignment: 256,
                kind: kind_large,
                usage: TraceUsage::GpuOnly,
                tag: "frag-large",
            }));
        }
        // Free every large one, newest first: holes between live smalls.
        for id in larges.into_iter().rev() {
            g.free(id);
        }
        g.frame();
        // Requests just too big for those holes.
        let mut bigger = Vec::new();
        for _ in 0..pairs / 2 {
            bigger.push(g.alloc(buffer(
                large + 4 * KIB + 256,
                256,
                TraceUsage::GpuOnly,
                "frag-bigger",
            )));
        }
        // Free three smalls in four, leaving survivors spread over every block.
        for (i, id) in smalls.into_iter().enumerate() {
            if i % 4 == 3 {
                survivors.push(id);
            } else {
                g.free(id);
            }
        }
        // Free every other bigger one, then fill with mixed sizes.
        for (i, id) in bigger.into_iter().enumerate() {
            if i % 2 == 0 {
                g.free(id);
            } else {
                survivors.push(id);
            }
        }
        for _ in 0..pairs / 2 {
            let size = g.log_size(small / 2, large * 2, 256);
            let kind = if g.rng.gen_bool(0.5) {
                TraceKind::Buffer
            } else {
                TraceKind::OptimalImage
            };
            survivors.push(g.alloc(Req {
                size,
                alignment: 256,
                kind,
                usage: TraceUsage::GpuOnly,
                tag: "frag-fill",
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_valid() {
        for name in STANDARD_TRACES {
            let a = generate(name, 1, Scale::Small).unwrap();
            let b = generate(name, 1, Scale::Small).unwrap();
            assert_eq!(a, b, "{name} is not deterministic");
            let c = generate(name, 2, Scale::Small).unwrap();
            assert_ne!(a.events, c.events, "{name} ignores its seed");
            let s = a.validate().unwrap();
            assert!(
                s.peak_live_bytes < 900 * MIB,
                "{name}: small peak live {} MiB",
                s.peak_live_bytes / MIB
            );
            if name == "many-small" {
                assert!(s.peak_live_count >= 100_000);
            }
        }
    }

    #[test]
    fn image_sizes() {
        // 8K BC7 with all mips: 64 MiB + a third.
        let b = image_bytes(8192, 8192, 1, true);
        assert!(b > 85 * MIB && b < 86 * MIB, "{b}");
        assert_eq!(image_bytes(256, 256, 4, false), 256 * KIB);
    }
}
