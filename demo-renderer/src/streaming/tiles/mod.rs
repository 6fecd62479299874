//! Streaming by tiles: each map is one sparse image (`VK_IMAGE_CREATE_SPARSE_RESIDENCY_BIT`)
//! holding its whole mip chain in address space only. Its mip tail is bound at
//! start and always resident; finer levels are bound one tile (one memory page,
//! typically 64 KiB: 256 x 256 texels of BC7) at a time, where the camera
//! looks. A close-up wants level 0 of the few hundred tiles on screen, not the
//! whole 64 MiB level: partial residency is what lets a 256 MiB budget show 8K
//! materials at full detail.
//!
//! - [`geometry`]: tile grids, cells, footprints (pure).
//! - [`policy`]: scores, loads, evictions, residency maps (pure, property-tested).
//! - [`pages`]: which page each load binds, so runs of tiles bind as one region
//!   (pure, property-tested).
//! - [`TileStreamer`]: the images, their pages (memory from the texture pool,
//!   whose hard budget is the texture budget), `vkQueueBindSparse`, threaded
//!   reads of tile rectangles from the KTX2 files, the copies, and the
//!   residency map the shaders read.
//! - [`mapped`]: each KTX2 file mapped read-only, the tile reads' source.
//!
//! # A frame
//!
//! The renderer waits for each frame, so when [`TileStreamer::prepare`] runs the
//! GPU has only the last frame's spare loads left (below), which it waits
//! for before touching a page. (With `--tune tiles.plan-early=1` the plan, the
//! pages and the binds were made already, after the last frame's submission
//! ([`TileStreamer::plan_ahead`], from the feedback of the frame before it
//! and the cast of this frame's views): the plan's CPU time overlaps the
//! GPU's frame, and the binds start as soon as that frame ends. They wait on
//! a semaphore signalled after everything submitted before them, so a page
//! taken from an evicted tile, which the frame in flight may still sample,
//! changes only after it; the frame in flight's residency map is left as it
//! is until `prepare`. Off by default: the older feedback costs frames.)
//! It plans from the last frame's per-cell feedback; an evicted
//! tile leaves the residency map and its page goes to the spare pages, still
//! bound there (no unbind); the loads take spare pages first, then new ones
//! from the pool, and are bound in one `vkQueueBindSparse` that signals a
//! semaphore and is not waited for on the CPU. While the driver binds, worker
//! threads read the tiles into mapped staging; one submission, waiting on that
//! semaphore, copies them and the new residency map, and is not waited for
//! either: the frame's submission comes after it on the same queue, ordered by
//! its barriers, and the next `prepare` (after the renderer's wait for the
//! frame) finds it done. Binds and copies go by regions of adjacent tiles of a
//! row (`bind_regions`, `runs`), and [`pages::assign`] gives runs pages that
//! follow each other in memory: the driver's cost goes by binds (NVIDIA: about
//! 26 us each, measured when the binds were waited for), and the report's
//! `bind_ms`, `sparse_binds` and `plan_ms` show it.
//!
//! The loads only the coming views want ([`policy::LoadKind::Ahead`]; with
//! `--tune tiles.late-spare=all` every spare load) do not go that way: they take
//! their pages in `prepare`, inside the budget, and wait for
//! [`TileStreamer::after_submit`], which the renderer calls once the frame
//! is submitted: their bind, reads and copies (on a command buffer of their
//! own, from staging slots after the frame's) then overlap the GPU's frame
//! instead of delaying it, and the next frame's map names them. The frame in
//! flight reads none of it: those tiles are absent from its map, their pages
//! spare or new; and it would hardly have drawn them: on lavapipe the frames
//! are the same either way (`tests/tiles.rs` requires it); on the H200, whose
//! sampler is clamped to the map's level, a few frames read such a tile
//! when it is resident a frame early (BENCHMARKS.md). A load made before the
//! frame takes a parent kept back along.
//!
//! # Stale bindings
//!
//! An evicted tile stays bound to its page, which a later load binds to
//! another tile: one bind per load instead of an unbind and a bind (on NVIDIA
//! the binds were most of the streamer's frame time). Two tiles then alias
//! one page, which Vulkan allows without `sparseResidencyAliased` under the
//! ordinary aliasing rules (the specification's "Sparse Memory Aliasing"): the
//! stale tile's contents are undefined, and the residency map keeps samples
//! off tiles that are not resident. Where the sampler clamps its own level of
//! detail (`shaderResourceMinLod`, the H200) none reaches one. Where the
//! shaders bias the level instead (lavapipe), the bias is computed from the
//! lowest level of detail a conforming sampler may compute, plus 1/8 of a
//! level (`tile_lift` in `pbr_shading.glsl`): llvmpipe's own computation
//! falls short of the rule by more than 1/16 (found by drawing a run with
//! the pages reversed, `--tune tiles.reversed-pages`: with a margin of 1/128, 88 of
//! 240 frames changed; `tests/tiles.rs` now requires none). Either way the page is the streamer's own
//! allocation: no memory outside it is read. Two things would write or free
//! a stale tile's memory, and neither happens: a layout
//! transition of its level (the sparse images stay in `GENERAL` from their
//! creation on: copies and sampling use it, no transition follows), and a
//! freed `VkDeviceMemory` under it (spare pages stay allocated from the pool,
//! inside its hard budget, until [`TileStreamer::destroy`]).
//!
//! # The residency map
//!
//! Per material, per cell, two levels ([`sample::CellLevels`],
//! [`policy::residency_map`]): the finest whose tiles, and those of every
//! coarser level, are resident over the cell's footprint, its texels widened
//! by the filter's reach ([`geometry::filter_margin`], 10 texels of the level
//! with 4x anisotropy: a cell inside one tile of a coarse level needs that
//! tile alone), and the same over the cell's own texels. The shaders read it
//! (`tile_level` in `pbr_shading.glsl`, mirrored and property-tested by
//! [`sample::tile_level`]): a sample uses the inner level where its filter
//! stays in the cell or reaches only neighbours no finer, else the widened
//! one, and the sampler's level of detail never goes finer than that, so no
//! sample reads a tile the map calls absent (`tests/tiles.rs` draws a run
//! with the pages reversed and requires the same frames). Where the device has
//! `shaderResourceMinLod` the `_MINLOD` shader variants pass it as the
//! sampler's own minimum LOD (`textureGradClampARB` / `textureClampARB`);
//! elsewhere (lavapipe) `tile_lift` raises the LOD by a bias in fragment
//! shaders and by scaled gradients in compute shaders, which assumes the
//! specification's isotropic LOD formula.

pub mod atlas;
pub mod geometry;
pub mod lookahead;
pub mod mapped;
pub mod pages;
pub mod policy;
pub mod sample;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ash::vk;
use material_baker::ktx2::{Format, Reader};
use rayon::prelude::*;
use vkalloc::Allocation;

use crate::gpu::memory::{Buffer, Image, MappedBuffer, MemOptions, MemoryUsage, PoolId};
use crate::gpu::util::OneShot;
use crate::gpu::{Context, GpuError, GpuMemory, VkCheck};
use crate::materials::textures::TextureSet;
use geometry::{MapTiles, TileRef};
use policy::{LoadKind, TileInput, UNSEEN};

/// Cells per side of a material's grid, at most (32: one cell per level-0 tile
/// of an 8K BC map).
pub const MAX_CELLS: u32 = 32;
/// Groups of runs a frame's reads are cut into, at most (each read on rayon's pool).
const READERS: usize = 8;

/// One sparse map (with a page atlas: the texture set's own image of its
/// tail, `image` null: the streamer owns neither).
struct SparseMap {
    image: vk::Image,
    view: vk::ImageView,
    path: PathBuf,
    format: Format,
    /// The map's file, opened once at build: its tail levels are read
    /// through it, and its tile rectangles where `mapped` is `None`
    /// (positioned reads, shared by the reader threads).
    reader: Reader,
    /// The same file mapped read-only: tile rectangles are copied out of it
    /// (unless `--tune tiles.pread=1`, or the file could not be mapped).
    mapped: Option<mapped::MappedFile>,
}

/// What [`TileStreamer::prepare`] did.
#[derive(Clone, Copy, Debug, Default)]
pub struct TileFrame {
    /// Tiles bound and filled.
    pub loads: u32,
    /// Tiles evicted: out of the residency map, their pages spare (still
    /// bound; see the module's "Stale bindings").
    pub evictions: u32,
    /// File bytes read into staging.
    pub upload_bytes: u64,
    /// Wall seconds the reads took.
    pub read_seconds: f64,
    /// Seconds the policy took to plan.
    pub plan_seconds: f64,
    /// Seconds in `vkQueueBindSparse` (not waited for).
    pub bind_seconds: f64,
    /// `VkSparseImageMemoryBind`s given to the driver (a region of adjacent
    /// tiles each).
    pub binds: u32,
    /// Runs of horizontally adjacent tiles among the tiles bound (the fewest
    /// binds they could take).
    pub runs: u32,
    /// Seconds waited at the start for the last copies' submission (0 when
    /// the renderer's wait for the frame already covered it).
    pub wait_seconds: f64,
    /// Seconds recording and submitting the copies from staging.
    pub copy_seconds: f64,
    /// Seconds taking the loads' pages (spare and new) and assigning them.
    pub page_seconds: f64,
    /// Seconds refreshing the residency map.
    pub map_seconds: f64,
    /// Bytes every region the feedback saw at its wanted level would take
    /// (tiles and mip tails).
    pub wanted_bytes: u64,
    /// Wanted tiles not resident after this frame's loads.
    pub missing: u64,
    /// Of the loads planned, those of tiles the present view wants.
    pub wanted_loads: u32,
}

impl TileFrame {
    /// Adds `other`'s work (loads, bytes, binds and their seconds; its runs
    /// were counted by the `prepare` that planned them).
    fn absorb(&mut self, other: &TileFrame) {
        self.loads += other.loads;
        self.upload_bytes += other.upload_bytes;
        self.read_seconds += other.read_seconds;
        self.bind_seconds += other.bind_seconds;
        self.binds += other.binds;
        self.copy_seconds += other.copy_seconds;
    }
}

/// The loads (with their `kinds`) to make before the frame's submission and
/// those that can wait for it (the kinds `late` defers), each sorted. A load
/// made now takes its parent along when the parent was kept back, so that
/// nothing the frame loads waits for a tile kept back.
fn split_late(
    maps: &[MapTiles],
    loads: &[TileRef],
    kinds: &[LoadKind],
    late: LateSpare,
) -> (Vec<TileRef>, Vec<TileRef>) {
    let mut later: std::collections::BTreeSet<TileRef> = loads
        .iter()
        .zip(kinds.iter().chain(std::iter::repeat(&LoadKind::Wanted)))
        .filter(|(_, &k)| late.defers(k))
        .map(|(&t, _)| t)
        .collect();
    let mut now: Vec<TileRef> = loads
        .iter()
        .copied()
        .filter(|t| !later.contains(t))
        .collect();
    let mut k = 0;
    while k < now.len() {
        let t = now[k];
        k += 1;
        if t.level + 1 < maps[t.map as usize].tail_first {
            let parent = TileRef {
                level: t.level + 1,
                x: t.x / 2,
                y: t.y / 2,
                ..t
            };
            if later.remove(&parent) {
                now.push(parent);
            }
        }
    }
    now.sort_unstable();
    (now, later.into_iter().collect())
}

/// Adjacent tiles of one row of one level, read and staged together: `len`
/// loads from `start` in the sorted loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    start: usize,
    len: u32,
}

/// Runs of horizontally adjacent full tiles in `loads` (sorted by map, level,
/// row, column), at most `max` long.
fn runs(maps: &[MapTiles], loads: &[TileRef], max: u32) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for (i, t) in loads.iter().enumerate() {
        let m = &maps[t.map as usize];
        let full = |t: &TileRef| {
            (t.x + 1) * m.tile_w <= m.side(t.level) && (t.y + 1) * m.tile_h <= m.side(t.level)
        };
        if let Some(r) = out.last_mut() {
            let p = loads[r.start + r.len as usize - 1];
            if r.len < max
                && (p.map, p.level, p.y) == (t.map, t.level, t.y)
                && p.x + 1 == t.x
                && full(&p)
                && full(t)
            {
                r.len += 1;
                continue;
            }
        }
        out.push(Run { start: i, len: 1 });
    }
    out
}

/// A tile and the page it binds: memory and offset (`None`: unbind).
type TileBind = (TileRef, Option<(vk::DeviceMemory, u64)>);

/// One memory binding of a region: its first tile, how many tiles of that
/// row it spans, and the memory and offset of the first (`None`: unbind).
type Region = (TileRef, u32, Option<(vk::DeviceMemory, u64)>);

/// The regions that bind `changes`: horizontally adjacent tiles of one row of
/// one level join one region when every tile is unbound, or when their pages
/// follow each other in one memory object (`page` bytes apart: a region's
/// blocks take its memory in order, row-major). Each region is one
/// `VkSparseImageMemoryBind`, and the driver's cost goes by binds (NVIDIA:
/// about 26 us each, BENCHMARKS.md). A region ends at a tile that reaches the
/// level's edge (the extent is clamped there).
fn bind_regions(maps: &[MapTiles], changes: &[TileBind], page: u64) -> Vec<Region> {
    let mut sorted = changes.to_vec();
    sorted.sort_unstable_by_key(|c| c.0);
    let mut out: Vec<Region> = Vec::new();
    for (t, mem) in sorted {
        let m = &maps[t.map as usize];
        let full = |t: &TileRef| {
            (t.x + 1) * m.tile_w <= m.side(t.level) && (t.y + 1) * m.tile_h <= m.side(t.level)
        };
        if let Some((first, count, first_mem)) = out.last_mut() {
            let last_x = first.x + *count - 1;
            let last = TileRef {
                x: last_x,
                ..*first
            };
            let joins = (first.map, first.level, first.y) == (t.map, t.level, t.y)
                && last_x + 1 == t.x
                && full(&last)
                && match (*first_mem, mem) {
                    (None, None) => true,
                    (Some((a, off)), Some((b, at))) => {
                        a == b && off + u64::from(*count) * page == at
                    }
                    _ => false,
                };
            if joins {
                *count += 1;
                continue;
            }
        }
        out.push((t, 1, mem));
    }
    out
}

/// The page atlas of `--residency atlas` ([`atlas`]): its images, slots and
/// page table.
struct AtlasState {
    /// Where slots are (the same in every atlas image).
    layout: atlas::AtlasLayout,
    /// Per atlas (one per map format): the image and its view.
    images: Vec<(Image, vk::ImageView)>,
    /// Which slot each tile holds, the free slots, the page table.
    slots: atlas::SlotTable,
    /// Bytes of the atlas images' memory.
    bytes: u64,
    /// Bytes of the texture set's own images (the tails), for the wanted
    /// bytes (the set counts them as resident itself).
    set_tail_bytes: u64,
    /// The level probe and its view.
    probe: Option<(Image, vk::ImageView)>,
}

/// The tile streamer of one texture set.
pub struct TileStreamer {
    maps: Vec<MapTiles>,
    sparse: Vec<SparseMap>,
    g: u32,
    page: u64,
    type_bits: u32,
    pool: PoolId,
    pages: Vec<Vec<Option<Allocation>>>,
    /// Bytes of the allocations in `pages` (kept as they change: summing
    /// `pages` walks every tile of every map).
    page_bytes: u64,
    /// Pages of evicted tiles, for the next loads: allocated from the pool
    /// and maybe still bound to the tile they held (module doc).
    spare: Vec<Allocation>,
    resident: Vec<Vec<bool>>,
    /// Maps whose file could not be read: they load no more tiles.
    blocked: Vec<bool>,
    tails: Vec<Allocation>,
    tail_bytes: u64,
    /// Per material: its tiles changed since the residency map's last refresh.
    changed: Vec<bool>,
    /// The maps' footprints in the cell grid, for the residency map's
    /// refreshes (built once the layouts and the grid are known).
    footprints: policy::Footprints,
    /// Per material, per cell: the level the shaders may sample down to.
    map_words: Vec<u32>,
    map_host: Option<MappedBuffer>,
    map_gpu: Option<Buffer>,
    map_dirty: bool,
    staging: Option<MappedBuffer>,
    /// Staging bytes per load.
    slot: u64,
    max_loads: usize,
    one_shot: OneShot,
    /// The copies of the spare loads kept back ([`Self::after_submit`]).
    late_shot: OneShot,
    /// Spare loads whose pages are taken and whose binds, reads and copies
    /// wait for [`Self::after_submit`].
    deferred: Option<Deferred>,
    /// `--tune tiles.late-spare`: the kinds of spare loads that wait for the
    /// frame's submission.
    late: LateSpare,
    /// Signalled by each `vkQueueBindSparse`, waited on by the copies'
    /// submission that follows it.
    bound: vk::Semaphore,
    /// A bind signalled `bound` and no submission has waited on it yet.
    bind_signalled: bool,
    /// Signalled by an empty submission after everything the frame in flight
    /// submitted, waited on by the binds of a plan made ahead
    /// ([`Self::plan_ahead`]): they rebind pages that frame may still read.
    gate: vk::Semaphore,
    /// The next frame's plan, made after this frame's submission
    /// ([`Self::plan_ahead`]); its reads, copies and map wait for `prepare`.
    planned: Option<Planned>,
    /// `--tune tiles.plan-early=1`: the renderer plans each frame's tiles after
    /// the last frame's submission.
    plan_early: bool,
    /// Calls of [`TileStreamer::prepare`] after the pre-fill.
    frames: u64,
    /// `--tune tiles.freeze-after`: after this many frames, residency stays as it is.
    freeze_after: Option<u64>,
    /// `--tune tiles.ahead-share`: the look-ahead's loads per frame are at most
    /// `max_loads / ahead_share`.
    ahead_share: usize,
    /// `--tune tiles.max-spare`: loads per frame of tiles the present view does not
    /// want, at most.
    max_spare: usize,
    /// `--tune tiles.max-ring`: loads per frame of the margin and the ring, at most
    /// ([`DEFAULT_MAX_RING`]).
    max_ring: usize,
    /// `--tune tiles.spare-hysteresis` ([`policy::TileInput::spare_hysteresis`]).
    spare_hysteresis: u64,
    /// Per map, per tile: the page key of a resident tile's page
    /// ([`policy::TileInput::page_keys`]; `u64::MAX` for none).
    page_keys: Vec<Vec<u64>>,
    /// Each page memory object's number in the page keys, by raw handle.
    page_objects: HashMap<u64, u64>,
    /// Not `--tune tiles.evict-by-pages=0`: the plan is given the page keys.
    evict_by_pages: bool,
    /// `--tune tiles.cast-present`: the present view is cast into the look-ahead on
    /// every frame.
    cast_present: bool,
    /// `--tune tiles.reversed-pages`: loads take pages in descending memory order.
    reversed_pages: bool,
    /// `--tune tiles.pread=1`: tiles are read with `pread`, not from a
    /// mapping of the file.
    pread: bool,
    /// `--tune fail-reads`: reads of files whose path contains this fail.
    fail_reads: Option<String>,
    /// With `--residency atlas`: tiles are copied into a page atlas instead
    /// of bound to pages of sparse images.
    atlas: Option<AtlasState>,
}

/// Sparse tiles' look-ahead loads a frame: a frame's loads / 16 (over a
/// look-ahead of 16 frames, one frame's worth), since every load is a sparse
/// bind that the queue serialises (BENCHMARKS.md, *What a sparse bind costs*).
pub const TILES_AHEAD_SHARE: usize = 16;

/// The page atlas's look-ahead loads a frame: a frame's loads / 4. Its loads
/// are copies and page-table words, no binds, so the coming views may take
/// four times the sparse tiles' share. On the H200 (4K, 64 materials of 8K BC
/// maps at 1 GiB) it took the worst frame from 39.99 to 44.3 dB, the mean mip
/// deficit from 0.047 to 0.005 and every cut's refill to 0 ms, for a GPU p99
/// within 1.01x of streaming off's (1/8: 39.99 dB; BENCHMARKS.md, *The
/// atlas's look-ahead share*).
pub const ATLAS_AHEAD_SHARE: usize = 4;

/// Loads per frame of the margin and the ring (tiles a present cell scores
/// but does not want) at most, unless `--tune tiles.max-ring` says otherwise: a
/// per-frame cap on speculative operations (256 pages of 64 KiB: 16 MiB), so
/// that they do not stretch the frame. On the H200 with 64 materials at 1
/// GiB it took the GPU frame time's p99 from 1.3-1.5x streaming off's to
/// 1.08-1.10x, with every frame still at 40 dB or more (BENCHMARKS.md).
pub const DEFAULT_MAX_RING: usize = 256;

/// Which spare loads wait for the frame's submission (`--tune tiles.late-spare`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LateSpare {
    /// None: every load before the submission.
    None,
    /// Those only the coming views want ([`LoadKind::Ahead`]): the frame
    /// wants none of them (on lavapipe it draws the same; on the H200 a few
    /// frames above 50 dB differ).
    Future,
    /// Every spare load (the look-ahead's, the margin's, the ring's).
    All,
}

impl LateSpare {
    /// Without `--tune tiles.late-spare`.
    pub const DEFAULT: Self = Self::Future;

    /// Whether a load of `kind` waits for the submission.
    fn defers(self, kind: LoadKind) -> bool {
        match (self, kind) {
            (_, LoadKind::Wanted) | (Self::None, _) => false,
            (Self::Future, k) => k == LoadKind::Ahead,
            (Self::All, _) => true,
        }
    }
}

/// Why [`TileStreamer::new`] made no tile streamer.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The device, a map format or the budget can't stream these textures by
    /// tiles (what to use instead is said): levels where `--residency auto`
    /// asked, else the run stops with it.
    #[error("{0}")]
    Refused(String),
    /// The device or the allocator failed otherwise.
    #[error(transparent)]
    Gpu(#[from] GpuError),
}

/// What a frame's tile plan goes on: per material, `g * g` cells each (the
/// layout of [`policy::TileInput`]). [`Default`]: nothing (for a frame
/// planned already, [`TileStreamer::plan_ahead`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct PlanInputs<'a> {
    /// The present view's wanted levels ([`policy::TileInput::wants`]).
    pub wants: &'a [u8],
    /// Its hits ([`policy::TileInput::hits`]).
    pub hits: &'a [u32],
    /// The look-ahead's wanted levels and hits ([`policy::TileInput::ahead_wants`]).
    pub ahead: (&'a [u8], &'a [u32]),
    /// The present view's own cast within the look-ahead, empty for none
    /// ([`policy::TileInput::cast_wants`]).
    pub cast: (&'a [u8], &'a [u32]),
}

/// A frame's tile changes planned, their pages taken and bound; the reads,
/// copies and residency map left for [`TileStreamer::prepare`].
struct Planned {
    /// The plan's figures so far.
    frame: TileFrame,
    /// The loads made before the frame's submission (sorted).
    loads: Vec<TileRef>,
    /// The spare loads kept back for after it, and their pages.
    later: Vec<TileRef>,
    late_binds: Vec<TileBind>,
}

/// Spare loads kept back by [`TileStreamer::prepare`] for
/// [`TileStreamer::after_submit`]: their pages are taken (and counted) but
/// neither bound nor filled.
struct Deferred {
    /// Sorted (the staging layout: load `k` at slot `base + k`).
    loads: Vec<TileRef>,
    /// Each load's page.
    binds: Vec<TileBind>,
    /// The first staging slot after the frame's own loads'.
    base: usize,
}

/// Whether every format of `set` can be a sparse 2D image with one sample.
fn formats_supported(ctx: &Context, set: &TextureSet) -> bool {
    set.textures.iter().all(|t| {
        // SAFETY: a plain query of this instance's physical device.
        let props = unsafe {
            ctx.instance
                .get_physical_device_sparse_image_format_properties(
                    ctx.physical_device,
                    t.format,
                    vk::ImageType::TYPE_2D,
                    vk::SampleCountFlags::TYPE_1,
                    vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_DST,
                    vk::ImageTiling::OPTIMAL,
                )
        };
        props
            .iter()
            .any(|p| p.aspect_mask.contains(vk::ImageAspectFlags::COLOR))
    })
}

/// The map's file mapped read-only for its tile reads, unless `pread`
/// (`--tune tiles.pread`) or the mapping fails (then read row by row).
fn open_mapped(reader: &Reader, pread: bool) -> Option<mapped::MappedFile> {
    if pread {
        return None;
    }
    match mapped::MappedFile::open(reader) {
        Ok(m) => Some(m),
        Err(e) => {
            eprintln!("streaming: {e}; its tiles are read row by row");
            None
        }
    }
}

impl TileStreamer {
    /// Makes a sparse image for every texture of `set` (which holds the mip
    /// tails the level streamer would use; they stay as they are), binds and
    /// fills each image's mip tail, and points the descriptors at the sparse
    /// images. [`StartError::Refused`] when the device, a format or the
    /// budget can't (then stream by levels, or stop with it if tiles were
    /// asked for).
    /// Into a page atlas where `cfg` asks for [`ResidencyMode::Atlas`](crate::streaming::ResidencyMode::Atlas);
    /// `cfg.anisotropy` is the sampler's largest (0: off): it sets how far
    /// past a cell its samples may read ([`geometry::filter_margin`]).
    pub fn new(
        ctx: &Context,
        mem: &GpuMemory,
        set: &TextureSet,
        cfg: &crate::streaming::StreamConfig,
    ) -> Result<Self, StartError> {
        let atlas = cfg.residency == crate::streaming::ResidencyMode::Atlas;
        let (upload_budget, budget, anisotropy) = (cfg.upload_budget, cfg.budget, cfg.anisotropy);
        let tuning = &cfg.tuning;
        let tt = tuning.tiles;
        if atlas && (!ctx.info.bindless || set.textures.is_empty()) {
            return Err(StartError::Refused(format!(
                "{} has no bindless texture array with non-uniform indexing, which the page \
                 atlas's sampling needs; use --residency tiles or levels",
                ctx.info.name
            )));
        }
        if !atlas
            && (!ctx.info.sparse_tiles || set.textures.is_empty() || !formats_supported(ctx, set))
        {
            return Err(StartError::Refused(format!(
                "{} has no sparse residency for these textures (sparseBinding, \
                 sparseResidencyImage2D, a graphics queue with sparse binding, and sparse \
                 support for every texture format); use --residency levels or auto",
                ctx.info.name
            )));
        }
        let d = &ctx.device;
        // SAFETY: valid create info on a live device.
        let bound = unsafe { d.create_semaphore(&vk::SemaphoreCreateInfo::default(), None) }
            .check("vkCreateSemaphore")?;
        let one_shot = match OneShot::new(ctx) {
            Ok(o) => o,
            Err(e) => {
                // SAFETY: the semaphore was never used.
                unsafe { d.destroy_semaphore(bound, None) };
                return Err(e.into());
            }
        };
        let late_shot = match OneShot::new(ctx) {
            Ok(o) => o,
            Err(e) => {
                one_shot.destroy(d);
                // SAFETY: the semaphore was never used.
                unsafe { d.destroy_semaphore(bound, None) };
                return Err(e.into());
            }
        };
        // SAFETY: valid create info on a live device.
        let gate = match unsafe { d.create_semaphore(&vk::SemaphoreCreateInfo::default(), None) }
            .check("vkCreateSemaphore")
        {
            Ok(g) => g,
            Err(e) => {
                late_shot.destroy(d);
                one_shot.destroy(d);
                // SAFETY: the semaphore was never used.
                unsafe { d.destroy_semaphore(bound, None) };
                return Err(e.into());
            }
        };
        let mut s = Self {
            maps: Vec::new(),
            sparse: Vec::new(),
            g: 1,
            page: 0,
            type_bits: u32::MAX,
            pool: set.texture_pool,
            pages: Vec::new(),
            page_bytes: 0,
            spare: Vec::new(),
            resident: Vec::new(),
            blocked: Vec::new(),
            tails: Vec::new(),
            tail_bytes: 0,
            changed: Vec::new(),
            footprints: policy::Footprints::new([], 1),
            map_words: Vec::new(),
            map_host: None,
            map_gpu: None,
            map_dirty: true,
            staging: None,
            slot: 0,
            max_loads: 0,
            frames: 0,
            freeze_after: tt.freeze_after,
            ahead_share: tt.ahead_share.unwrap_or(if atlas {
                ATLAS_AHEAD_SHARE
            } else {
                TILES_AHEAD_SHARE
            }),
            max_spare: tt.max_spare,
            max_ring: tt.max_ring,
            spare_hysteresis: tt.spare_hysteresis,
            page_keys: Vec::new(),
            page_objects: HashMap::new(),
            evict_by_pages: tt.evict_by_pages,
            cast_present: tt.cast_present,
            reversed_pages: tt.reversed_pages,
            pread: tt.pread,
            fail_reads: tuning.fail_reads.clone(),
            one_shot,
            late_shot,
            deferred: None,
            late: tt.late_spare,
            bound,
            bind_signalled: false,
            gate,
            planned: None,
            plan_early: tt.plan_early,
            atlas: None,
        };
        let built = if atlas {
            s.evict_by_pages = false;
            s.build_atlas(ctx, mem, set, upload_budget, budget, anisotropy)
        } else {
            s.build(ctx, mem, set, upload_budget, budget, anisotropy)
        };
        match built {
            Ok(()) => Ok(s),
            Err(e) => {
                ctx.wait_idle();
                s.destroy(ctx, mem, set);
                Err(e)
            }
        }
    }

    fn build(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        set: &TextureSet,
        upload_budget: u64,
        budget: u64,
        anisotropy: u32,
    ) -> Result<(), StartError> {
        let d = &ctx.device;
        let mut tail_binds = Vec::new();
        let mut small_binds = Vec::new();
        let pread = self.pread;
        for t in &set.textures {
            let reader = Reader::open(&t.path).map_err(|e| GpuError::Other(e.to_string()))?;
            let levels = reader.levels.len() as u32;
            let (width, height, format) = (reader.width, reader.height, reader.format);
            let info = vk::ImageCreateInfo::default()
                .flags(
                    vk::ImageCreateFlags::SPARSE_BINDING | vk::ImageCreateFlags::SPARSE_RESIDENCY,
                )
                .image_type(vk::ImageType::TYPE_2D)
                .format(t.format)
                .extent(vk::Extent3D {
                    width,
                    height,
                    depth: 1,
                })
                .mip_levels(levels)
                .array_layers(1)
                .samples(vk::SampleCountFlags::TYPE_1)
                .tiling(vk::ImageTiling::OPTIMAL)
                .usage(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_DST)
                .sharing_mode(vk::SharingMode::EXCLUSIVE)
                .initial_layout(vk::ImageLayout::UNDEFINED);
            // SAFETY: a valid create info (the format supports sparse residency).
            let image = unsafe { d.create_image(&info, None) }.check("vkCreateImage")?;
            // SAFETY: the image is live.
            let (reqs, sparse) = unsafe {
                (
                    d.get_image_memory_requirements(image),
                    d.get_image_sparse_memory_requirements(image),
                )
            };
            let view = {
                // SAFETY: the image is live; every level, one layer.
                let r = unsafe {
                    d.create_image_view(
                        &vk::ImageViewCreateInfo::default()
                            .image(image)
                            .view_type(vk::ImageViewType::TYPE_2D)
                            .format(t.format)
                            .subresource_range(vk::ImageSubresourceRange {
                                aspect_mask: vk::ImageAspectFlags::COLOR,
                                base_mip_level: 0,
                                level_count: levels,
                                base_array_layer: 0,
                                layer_count: 1,
                            }),
                        None,
                    )
                };
                match r {
                    Ok(v) => v,
                    Err(e) => {
                        // SAFETY: unused, unbound.
                        unsafe { d.destroy_image(image, None) };
                        return Err(GpuError::Vk {
                            call: "vkCreateImageView",
                            result: e,
                        }
                        .into());
                    }
                }
            };
            let mapped = open_mapped(&reader, pread);
            self.sparse.push(SparseMap {
                image,
                view,
                path: t.path.clone(),
                format,
                reader,
                mapped,
            });
            let Some(sr) = sparse.iter().find(|r| {
                r.format_properties
                    .aspect_mask
                    .contains(vk::ImageAspectFlags::COLOR)
            }) else {
                return Err(StartError::Refused(format!(
                    "{}: the driver gives no colour sparse memory requirements",
                    t.path.display()
                )));
            };
            let gran = sr.format_properties.image_granularity;
            if gran.width == 0 || gran.height == 0 || reqs.alignment == 0 {
                return Err(StartError::Refused(format!(
                    "{}: the driver gives a zero sparse granularity or alignment",
                    t.path.display()
                )));
            }
            self.page = self.page.max(reqs.alignment);
            self.type_bits &= reqs.memory_type_bits;
            let driver_tail = sr.image_mip_tail_first_lod.min(levels);
            let mut map = MapTiles {
                size: width,
                levels,
                tile_w: gran.width,
                tile_h: gran.height,
                tail_first: driver_tail,
                margin: geometry::filter_margin(anisotropy),
            };
            // Levels of one tile or less before the driver's mip tail (lavapipe
            // has no mip tail: every level down to 1x1 is a tile of its own)
            // join the always-resident tail, a page each.
            let single = (0..driver_tail).find(|&l| map.grid(l) == (1, 1));
            if let Some(first) = single {
                for level in first..driver_tail {
                    let page = match mem.allocate_memory(
                        reqs.alignment,
                        reqs.alignment,
                        reqs.memory_type_bits,
                        &MemOptions::new(MemoryUsage::GpuOnly, "sparse mip tail")
                            .in_pool(self.pool),
                    ) {
                        Ok(a) => a,
                        Err(e) if e.is_no_room() => {
                            return Err(StartError::Refused(self.too_small(set, budget)))
                        }
                        Err(e) => return Err(e.into()),
                    };
                    let side = map.side(level);
                    small_binds.push((
                        image,
                        vk::SparseImageMemoryBind {
                            subresource: vk::ImageSubresource {
                                aspect_mask: vk::ImageAspectFlags::COLOR,
                                mip_level: level,
                                array_layer: 0,
                            },
                            offset: vk::Offset3D::default(),
                            extent: vk::Extent3D {
                                width: side,
                                height: side,
                                depth: 1,
                            },
                            memory: page.vk_memory(),
                            memory_offset: page.offset(),
                            flags: vk::SparseMemoryBindFlags::empty(),
                        },
                    ));
                    self.tail_bytes += page.size();
                    self.tails.push(page);
                }
                map.tail_first = first;
            }
            self.push_tiles(map);
            if map.tail_first < levels && sr.image_mip_tail_size > 0 {
                let tail = match mem.allocate_memory(
                    sr.image_mip_tail_size,
                    reqs.alignment,
                    reqs.memory_type_bits,
                    &MemOptions::new(MemoryUsage::GpuOnly, "sparse mip tail").in_pool(self.pool),
                ) {
                    Ok(a) => a,
                    Err(e) if e.is_no_room() => {
                        return Err(StartError::Refused(self.too_small(set, budget)))
                    }
                    Err(e) => return Err(e.into()),
                };
                self.tail_bytes += tail.size();
                tail_binds.push((
                    image,
                    vk::SparseMemoryBind {
                        resource_offset: sr.image_mip_tail_offset,
                        size: sr.image_mip_tail_size,
                        memory: tail.vk_memory(),
                        memory_offset: tail.offset(),
                        flags: vk::SparseMemoryBindFlags::empty(),
                    },
                ));
                self.tails.push(tail);
            }
        }
        if self.type_bits == 0 {
            return Err(StartError::Refused(
                "the sparse images share no memory type with each other".into(),
            ));
        }
        // The mip tails: bound, then filled from the files.
        let binds: Vec<[vk::SparseMemoryBind; 1]> = tail_binds.iter().map(|b| [b.1]).collect();
        let opaque: Vec<vk::SparseImageOpaqueMemoryBindInfo> = tail_binds
            .iter()
            .zip(&binds)
            .map(|(b, m)| {
                vk::SparseImageOpaqueMemoryBindInfo::default()
                    .image(b.0)
                    .binds(m)
            })
            .collect();
        let smalls: Vec<[vk::SparseImageMemoryBind; 1]> =
            small_binds.iter().map(|b| [b.1]).collect();
        let image_binds: Vec<vk::SparseImageMemoryBindInfo> = small_binds
            .iter()
            .zip(&smalls)
            .map(|(b, m)| vk::SparseImageMemoryBindInfo::default().image(b.0).binds(m))
            .collect();
        self.bind_sparse(ctx, &opaque, &image_binds, None)?;
        let mut tail_levels = Vec::new();
        let mut tail_total = 0u64;
        for (i, (m, s)) in self.maps.iter().zip(&self.sparse).enumerate() {
            for level in m.tail_first..m.levels {
                let side = m.side(level);
                let bytes = s.format.level_bytes(side, side);
                tail_levels.push((i, level, tail_total, bytes));
                tail_total += bytes.next_multiple_of(16);
            }
        }
        let mut tail_staging = mem.create_buffer_mapped(
            &vk::BufferCreateInfo::default()
                .size(tail_total.max(16))
                .usage(vk::BufferUsageFlags::TRANSFER_SRC),
            &MemOptions::new(MemoryUsage::Upload, "sparse tail staging"),
        )?;
        let filled = (|| {
            let out = tail_staging.mapped_mut().as_mut_slice();
            for &(i, level, off, bytes) in &tail_levels {
                self.sparse[i]
                    .reader
                    .read_level_into(
                        level as usize,
                        &mut out[off as usize..(off + bytes) as usize],
                    )
                    .map_err(|e| GpuError::Other(e.to_string()))?;
            }
            Ok::<(), GpuError>(())
        })();
        if let Err(e) = filled {
            // SAFETY: never used by the GPU.
            unsafe { mem.destroy_buffer(tail_staging) };
            return Err(e.into());
        }
        mem.flush(tail_staging.allocation());
        let src = tail_staging.raw();
        let images: Vec<vk::Image> = self.sparse.iter().map(|s| s.image).collect();
        let maps = self.maps.clone();
        let after = self.take_bind_signal();
        let record = |cmd| {
            // SAFETY: recording; the images are live and their tails bound
            // (the submission waits for the bind).
            unsafe {
                let to_dst: Vec<vk::ImageMemoryBarrier2> = images
                    .iter()
                    .zip(&maps)
                    .map(|(&image, m)| {
                        vk::ImageMemoryBarrier2::default()
                            .src_stage_mask(vk::PipelineStageFlags2::NONE)
                            .dst_stage_mask(vk::PipelineStageFlags2::COPY)
                            .dst_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
                            .old_layout(vk::ImageLayout::UNDEFINED)
                            .new_layout(vk::ImageLayout::GENERAL)
                            .image(image)
                            .subresource_range(color_levels(0, m.levels))
                    })
                    .collect();
                d.cmd_pipeline_barrier2(
                    cmd,
                    &vk::DependencyInfo::default().image_memory_barriers(&to_dst),
                );
                for &(i, level, off, _) in &tail_levels {
                    let side = maps[i].side(level);
                    let region = [vk::BufferImageCopy::default()
                        .buffer_offset(off)
                        .image_subresource(vk::ImageSubresourceLayers {
                            aspect_mask: vk::ImageAspectFlags::COLOR,
                            mip_level: level,
                            base_array_layer: 0,
                            layer_count: 1,
                        })
                        .image_extent(vk::Extent3D {
                            width: side,
                            height: side,
                            depth: 1,
                        })];
                    d.cmd_copy_buffer_to_image(
                        cmd,
                        src,
                        images[i],
                        vk::ImageLayout::GENERAL,
                        &region,
                    );
                }
                copies_to_shaders(d, cmd);
            }
        };
        // SAFETY: `after` is the tails' bind's signal, consumed here alone.
        let r = unsafe { self.one_shot.submit(ctx, after, record) }
            .and_then(|()| self.one_shot.wait(ctx));
        // SAFETY: the submission finished (or never started).
        unsafe { mem.destroy_buffer(tail_staging) };
        r?;

        self.build_maps_and_staging(ctx, mem, upload_budget, budget)?;
        for (i, s) in self.sparse.iter().enumerate() {
            set.write_view_in(d, i, s.view, vk::ImageLayout::GENERAL);
        }
        Ok(())
    }

    /// A map's tile layout and its empty per-tile state.
    fn push_tiles(&mut self, map: MapTiles) {
        self.maps.push(map);
        self.pages
            .push((0..map.tile_count()).map(|_| None).collect());
        self.resident.push(vec![false; map.tile_count()]);
        self.page_keys.push(vec![u64::MAX; map.tile_count()]);
        self.blocked.push(false);
    }

    /// [`Self::build`] for a page atlas ([`atlas`]): the texture set's own
    /// images keep the tails (levels of at most [`atlas::TAIL_TEXELS`] a
    /// side, loaded already) and stay in the descriptors; finer levels are
    /// tiles of [`atlas::tile_side`]. One atlas image per map format, all
    /// with the same slots, takes what the texture pool's budget has left;
    /// their views and the level probe go after the textures in the
    /// bindless array, and the page table in the residency map's buffer.
    fn build_atlas(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        set: &TextureSet,
        upload_budget: u64,
        budget: u64,
        anisotropy: u32,
    ) -> Result<(), StartError> {
        let d = &ctx.device;
        let pread = self.pread;
        let mut readers = Vec::new();
        for t in &set.textures {
            readers.push(Reader::open(&t.path).map_err(|e| GpuError::Other(e.to_string()))?);
        }
        let tile = atlas::tile_side(readers.iter().map(|r| r.format));
        let border = atlas::BORDER_TEXELS;
        let mut formats: Vec<(Format, vk::Format)> = Vec::new();
        let mut of_map = Vec::new();
        for (t, reader) in set.textures.iter().zip(readers) {
            let levels = reader.levels.len() as u32;
            if reader.width != reader.height {
                return Err(StartError::Refused(format!(
                    "{}: the page atlas takes square maps ({} x {})",
                    t.path.display(),
                    reader.width,
                    reader.height
                )));
            }
            let map = MapTiles {
                size: reader.width,
                levels,
                tile_w: tile,
                tile_h: tile,
                tail_first: t.base_level.min(levels),
                margin: geometry::filter_margin(anisotropy),
            };
            let bs = reader.format.block_side();
            if (0..map.tail_first)
                .any(|l| !map.side(l).is_multiple_of(bs) || map.side(l) < 2 * border)
            {
                return Err(StartError::Refused(format!(
                    "{}: a streamed level is not whole {bs}x{bs} blocks or narrower than its \
                     border; the page atlas needs levels of whole blocks",
                    t.path.display()
                )));
            }
            let k = match formats.iter().position(|f| f.0 == reader.format) {
                Some(k) => k,
                None => {
                    formats.push((reader.format, t.format));
                    formats.len() - 1
                }
            };
            of_map.push(k);
            let mapped = open_mapped(&reader, pread);
            self.sparse.push(SparseMap {
                image: vk::Image::null(),
                view: t.view,
                path: t.path.clone(),
                format: reader.format,
                reader,
                mapped,
            });
            self.push_tiles(map);
        }
        let n = set.textures.len() as u32;
        if formats.len() + 1 > crate::materials::textures::ATLAS_ELEMENTS as usize {
            return Err(StartError::Refused(format!(
                "{} map formats: the bindless array has room for {} atlases",
                formats.len(),
                crate::materials::textures::ATLAS_ELEMENTS - 1
            )));
        }
        // Slots: as many in each atlas as the pool's budget left takes (a
        // 256th kept for the images' alignment, and a fiftieth fewer each
        // time the pool refuses), at most every tile of its maps, at most
        // what the image size limit holds.
        let side = tile + 2 * border;
        let slot_bytes: Vec<u64> = formats
            .iter()
            .map(|f| f.0.level_bytes(side, side))
            .collect();
        let free = mem.pool_pressure(self.pool).map_or(budget, |p| {
            p.pool_budget
                .unwrap_or(budget)
                .saturating_sub(p.pool_allocated_bytes)
        });
        let per_slot: u64 = slot_bytes.iter().sum::<u64>().max(1);
        let most_tiles = (0..formats.len())
            .map(|k| {
                (0..self.maps.len())
                    .filter(|&i| of_map[i] == k)
                    .map(|i| self.maps[i].tile_count() as u64)
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0);
        // SAFETY: a plain query of this instance's physical device.
        let limits = unsafe {
            ctx.instance
                .get_physical_device_properties(ctx.physical_device)
        }
        .limits;
        // (Maps of no streamed level, all tail, still get a slot: the atlas
        // exists, its page table empty.)
        let mut want = (free - free / 256) / per_slot;
        want = want.min(most_tiles.max(1));
        let mut images: Vec<(Image, vk::ImageView)> = Vec::new();
        let mut layout = None;
        for _attempt in 0..24 {
            let Some(l) =
                atlas::AtlasLayout::fit(tile, border, want, limits.max_image_dimension2_d)
            else {
                break;
            };
            match self.make_atlases(ctx, mem, &formats, &l) {
                Ok(Some(made)) => {
                    images = made;
                    layout = Some(l);
                    break;
                }
                // The pool refused (alignment, its blocks' granularity): a
                // fiftieth fewer.
                Ok(None) => want = u64::from(l.slots()) * 49 / 50,
                Err(e) => return Err(e.into()),
            }
        }
        let Some(layout) = layout else {
            return Err(StartError::Refused(format!(
                "--texture-budget {budget} B leaves no room for a page atlas after the {} maps' \
                 tails ({} B): a slot of every format takes {per_slot} B; raise \
                 --texture-budget or use --residency levels",
                set.textures.len(),
                set.allocated_bytes()
            )));
        };
        let bytes = images.iter().map(|(i, _)| i.allocation().size()).sum();
        let probe = crate::materials::textures::create_level_probe(ctx, mem);
        let probe = match probe {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: `make_atlases` waited for its one submission; no
                // descriptor names them yet.
                unsafe { Self::free_atlases(ctx, mem, images) };
                return Err(e.into());
            }
        };
        for (k, (_, view)) in images.iter().enumerate() {
            set.write_view_in(d, n as usize + k, *view, vk::ImageLayout::GENERAL);
        }
        let probe_element = n + formats.len() as u32;
        set.write_view(d, probe_element as usize, probe.1);
        let mut entries = Vec::new();
        let mut bases = Vec::new();
        let mut total = atlas::HEADER_WORDS + self.maps.len() * atlas::MAP_WORDS;
        for (i, m) in self.maps.iter().enumerate() {
            bases.push(total);
            entries.push(atlas::MapEntry {
                base: total as u32,
                size: m.size,
                tail_first: m.tail_first,
                tile,
                border,
                atlas_element: n + of_map[i] as u32,
                per_row: layout.per_row,
            });
            total += m.tile_count();
        }
        let table = atlas::page_table(
            probe_element,
            &entries,
            total - atlas::HEADER_WORDS - self.maps.len() * atlas::MAP_WORDS,
        );
        self.page = slot_bytes.iter().copied().max().unwrap_or(0);
        let tile_counts: Vec<usize> = self.maps.iter().map(MapTiles::tile_count).collect();
        self.atlas = Some(AtlasState {
            layout,
            images,
            slots: atlas::SlotTable::new(
                of_map,
                &tile_counts,
                layout.slots(),
                slot_bytes,
                table,
                bases,
            ),
            bytes,
            set_tail_bytes: set.allocated_bytes(),
            probe: Some(probe),
        });
        self.build_maps_and_staging(ctx, mem, upload_budget, budget)?;
        Ok(())
    }

    /// One atlas image of `layout` per format, in the texture pool, each in
    /// `GENERAL` (copies and sampling use it, as the sparse images do), with
    /// its view: `None` when the pool refuses one (the others freed).
    fn make_atlases(
        &self,
        ctx: &Context,
        mem: &GpuMemory,
        formats: &[(Format, vk::Format)],
        layout: &atlas::AtlasLayout,
    ) -> Result<Option<Vec<(Image, vk::ImageView)>>, GpuError> {
        let d = &ctx.device;
        let (w, h) = layout.extent();
        let mut made: Vec<(Image, vk::ImageView)> = Vec::new();
        for &(_, format) in formats {
            let info = vk::ImageCreateInfo::default()
                .image_type(vk::ImageType::TYPE_2D)
                .format(format)
                .extent(vk::Extent3D {
                    width: w,
                    height: h,
                    depth: 1,
                })
                .mip_levels(1)
                .array_layers(1)
                .samples(vk::SampleCountFlags::TYPE_1)
                .tiling(vk::ImageTiling::OPTIMAL)
                .usage(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_DST)
                .sharing_mode(vk::SharingMode::EXCLUSIVE)
                .initial_layout(vk::ImageLayout::UNDEFINED);
            let opts = MemOptions::new(MemoryUsage::GpuOnly, "page atlas")
                .in_pool(self.pool)
                .full_is_expected();
            let image = match mem.create_image(&info, &opts) {
                Ok(i) => i,
                Err(e) if e.is_no_room() => {
                    // SAFETY: never used by the GPU, named by no descriptor.
                    unsafe { Self::free_atlases(ctx, mem, made) };
                    return Ok(None);
                }
                Err(e) => {
                    // SAFETY: as above.
                    unsafe { Self::free_atlases(ctx, mem, made) };
                    return Err(e);
                }
            };
            // SAFETY: the image is live and bound, with one level.
            match unsafe { crate::gpu::util::texture_view(d, image.raw(), format, 1) } {
                Ok(v) => made.push((image, v)),
                Err(e) => {
                    // SAFETY: never used by the GPU, named by no descriptor.
                    unsafe {
                        mem.destroy_image(image);
                        Self::free_atlases(ctx, mem, made);
                    }
                    return Err(e);
                }
            }
        }
        let raws: Vec<vk::Image> = made.iter().map(|(i, _)| i.raw()).collect();
        let r = self.one_shot.run(ctx, |cmd| {
            let to_general: Vec<vk::ImageMemoryBarrier2> = raws
                .iter()
                .map(|&image| {
                    vk::ImageMemoryBarrier2::default()
                        .dst_stage_mask(vk::PipelineStageFlags2::COPY)
                        .dst_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
                        .old_layout(vk::ImageLayout::UNDEFINED)
                        .new_layout(vk::ImageLayout::GENERAL)
                        .image(image)
                        .subresource_range(color_levels(0, 1))
                })
                .collect();
            // SAFETY: recording; the images are live, bound and unused.
            unsafe {
                d.cmd_pipeline_barrier2(
                    cmd,
                    &vk::DependencyInfo::default().image_memory_barriers(&to_general),
                );
            }
        });
        if let Err(e) = r {
            // SAFETY: the one-shot was waited for, or its submission or wait
            // failed (the device lost); no descriptor names them.
            unsafe { Self::free_atlases(ctx, mem, made) };
            return Err(e);
        }
        Ok(Some(made))
    }

    /// Destroys atlas images and their views.
    ///
    /// # Safety
    /// No pending GPU work uses them, and no descriptor the GPU will read
    /// names them.
    unsafe fn free_atlases(ctx: &Context, mem: &GpuMemory, images: Vec<(Image, vk::ImageView)>) {
        for (image, view) in images {
            // SAFETY: the contract above.
            unsafe {
                ctx.device.destroy_image_view(view, None);
                mem.destroy_image(image);
            }
        }
    }

    /// The cells, the residency map (with a page atlas, the page table in its
    /// buffer) and the staging of [`Self::build`] and [`Self::build_atlas`],
    /// once the maps are known; uploads the map.
    fn build_maps_and_staging(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        upload_budget: u64,
        budget: u64,
    ) -> Result<(), GpuError> {
        // Cells, residency maps, staging.
        self.g = geometry::cells_per_side(&self.maps, MAX_CELLS);
        self.footprints = policy::Footprints::new(&self.maps, self.g);
        let materials = self.maps.len() / policy::MAPS_PER_MATERIAL;
        let cells = (self.g * self.g) as usize;
        self.map_words = vec![0; materials * cells];
        self.refresh_map();
        let words = self
            .map_words
            .len()
            .max(self.atlas.as_ref().map_or(0, |a| a.slots.table().len()));
        let map_bytes = (words.max(4) * 4) as u64;
        self.map_host = Some(
            mem.create_buffer_mapped(
                &vk::BufferCreateInfo::default()
                    .size(map_bytes)
                    .usage(vk::BufferUsageFlags::TRANSFER_SRC),
                &MemOptions::new(MemoryUsage::Upload, "tile residency map staging"),
            )?,
        );
        self.map_gpu =
            Some(mem.create_buffer(
                &vk::BufferCreateInfo::default().size(map_bytes).usage(
                    vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_DST,
                ),
                &MemOptions::new(MemoryUsage::GpuOnly, "tile residency map"),
            )?);
        self.slot = self
            .maps
            .iter()
            .zip(&self.sparse)
            .map(|(m, s)| match self.atlas.as_ref() {
                Some(a) => s.format.level_bytes(a.layout.side(), a.layout.side()),
                None => s.format.level_bytes(m.tile_w, m.tile_h),
            })
            .max()
            .unwrap_or(0)
            .next_multiple_of(256)
            .max(256);
        let staging = upload_budget.min(budget).max(self.slot);
        self.max_loads = (staging / self.slot).clamp(1, 1 << 16) as usize;
        self.staging = Some(
            mem.create_buffer_mapped(
                &vk::BufferCreateInfo::default()
                    .size(self.max_loads as u64 * self.slot)
                    .usage(vk::BufferUsageFlags::TRANSFER_SRC),
                &MemOptions::new(MemoryUsage::Upload, "tile staging"),
            )?,
        );
        self.upload(ctx, mem, &[], &[], 0, false)
    }

    /// Why the budget can't take the always-resident pages (mip tails, and
    /// levels of one tile or less where the driver has no mip tail).
    fn too_small(&self, set: &TextureSet, budget: u64) -> String {
        format!(
            "--texture-budget {budget} B is too small for streaming by tiles: the {} maps' \
             always-resident pages (mip tails, and levels of one tile or less where the driver \
             has no mip tail: {} pages of {} KiB bound so far) and the textures' own tails \
             ({} B) do not fit; raise --texture-budget or use --residency levels",
            set.textures.len(),
            self.tails.len(),
            self.page.max(1) >> 10,
            set.allocated_bytes()
        )
    }

    /// Whether every frame casts its own view into the look-ahead
    /// (`--tune tiles.cast-present`).
    pub fn cast_present(&self) -> bool {
        self.cast_present
    }

    /// Cells per side of a material's grid (the shaders' `tiles.x`).
    pub fn cells_per_side(&self) -> u32 {
        self.g
    }

    /// The residency map buffer (set 0, binding 3) and its size.
    pub fn map_buffer(&self) -> (vk::Buffer, u64) {
        self.map_gpu
            .as_ref()
            .map_or((vk::Buffer::null(), 0), |b| (b.raw(), b.size()))
    }

    /// The filter's margin every map's footprints are widened by
    /// ([`geometry::filter_margin`]), for the shaders' `tile_level`.
    pub fn margin(&self) -> u32 {
        self.maps.first().map_or(0, |m| m.margin)
    }

    /// The residency map the next frame draws with, per material and cell
    /// ([`sample::CellLevels::word`]).
    pub fn map(&self) -> &[u32] {
        &self.map_words
    }

    /// Bytes of memory bound now: tiles and mip tails.
    pub fn bytes(&self) -> u64 {
        if let Some(a) = self.atlas.as_ref() {
            return a.bytes + self.tail_bytes;
        }
        debug_assert_eq!(
            self.page_bytes,
            self.pages
                .iter()
                .flatten()
                .flatten()
                .map(Allocation::size)
                .sum::<u64>()
        );
        self.page_bytes + self.tail_bytes
    }

    /// Map `i`'s finest level with a tile resident (the first level of its
    /// always-resident tail when none) and the bytes of its tile pages.
    pub fn map_residency(&self, i: usize) -> (u32, u64) {
        let (Some(m), Some(res), Some(pages)) =
            (self.maps.get(i), self.resident.get(i), self.pages.get(i))
        else {
            return (0, 0);
        };
        let finest = (0..m.tail_first)
            .find(|&l| {
                let start = m.level_start(l);
                let (w, h) = m.grid(l);
                res[start..start + (w * h) as usize].iter().any(|&r| r)
            })
            .unwrap_or(m.tail_first);
        let bytes = match self.atlas.as_ref() {
            Some(a) => a.slots.map_bytes(i),
            None => pages.iter().flatten().map(Allocation::size).sum(),
        };
        (finest, bytes)
    }

    /// Whether tiles go to a page atlas ([`atlas`]) instead of sparse images.
    pub fn is_atlas(&self) -> bool {
        self.atlas.is_some()
    }

    /// The longest run of adjacent tiles a read and a copy take: one tile
    /// in a page atlas (each its own slot), 32 else.
    fn run_cap(&self) -> u32 {
        if self.atlas.is_some() {
            1
        } else {
            32
        }
    }

    /// Recomputes the residency map of the materials whose tiles changed
    /// since the last refresh (all of them the first time): with 64 materials
    /// on the H200 the whole map took 10.5 ms a frame.
    fn refresh_map(&mut self) {
        let cells = (self.g * self.g) as usize;
        let materials = self.maps.len() / policy::MAPS_PER_MATERIAL;
        self.changed.resize(materials, true);
        // The changed materials' maps, shared over threads (each material's
        // words are its own slice): with 64 materials on the H200, 1,100 tile
        // loads a frame touch most of them.
        let mut changed: Vec<(usize, &mut [u32])> = self
            .map_words
            .chunks_mut(cells.max(1))
            .enumerate()
            .take(materials)
            .filter(|(m, _)| std::mem::take(&mut self.changed[*m]))
            .collect();
        let (fp, maps, resident) = (&self.footprints, &self.maps, &self.resident);
        let refresh = |(m, words): &mut (usize, &mut [u32])| {
            let rm = policy::residency_map_in(fp, maps, *m, resident);
            for (w, l) in words.iter_mut().zip(rm) {
                *w = l.word();
            }
        };
        // A few materials take about 100 microseconds each at 8K: on rayon's
        // pool past 4 of them.
        if changed.len() <= 4 {
            changed.iter_mut().for_each(refresh);
        } else {
            changed.par_iter_mut().for_each(refresh);
        }
        #[cfg(debug_assertions)]
        for m in 0..materials {
            let full = policy::residency_map(&self.maps, self.g, m, &self.resident);
            debug_assert!(
                self.map_words[m * cells..(m + 1) * cells]
                    .iter()
                    .zip(&full)
                    .all(|(&w, &l)| w == l.word()),
                "material {m}: residency map out of date"
            );
        }
        self.map_dirty = true;
    }

    /// Sets tile `t` resident or not, and marks its material's residency map
    /// for the next [`Self::refresh_map`].
    fn set_resident(&mut self, t: TileRef, resident: bool) {
        let idx = self.maps[t.map as usize].index(t.level, t.x, t.y);
        self.resident[t.map as usize][idx] = resident;
        if let Some(a) = self.atlas.as_mut() {
            // The page table names a tile's slot once its copy is recorded
            // (the table's upload follows the copies), never before.
            a.slots.set_resident(t.map as usize, idx, resident);
        }
        let m = t.map as usize / policy::MAPS_PER_MATERIAL;
        if let Some(c) = self.changed.get_mut(m) {
            *c = true;
        }
    }

    /// One `vkQueueBindSparse` of `opaque` and `image` binds, not waited
    /// for: it signals [`Self::bound`], which the next copies' submission
    /// waits on ([`Self::take_bind_signal`]); it waits on `wait` first
    /// (the gate of [`Self::plan_ahead`]'s binds, signalled just before).
    fn bind_sparse(
        &mut self,
        ctx: &Context,
        opaque: &[vk::SparseImageOpaqueMemoryBindInfo<'_>],
        image: &[vk::SparseImageMemoryBindInfo<'_>],
        wait: Option<vk::Semaphore>,
    ) -> Result<(), GpuError> {
        if opaque.is_empty() && image.is_empty() {
            return Ok(());
        }
        if self.bind_signalled {
            // A bind whose signal no submission waited on: signalling the
            // binary semaphore again is invalid. Not reached: the copies'
            // submission follows every bind; an error rather than a guess.
            return Err(GpuError::Other(
                "tile streamer: a sparse bind's signal was never waited on".into(),
            ));
        }
        let signal = [self.bound];
        let waits: Vec<vk::Semaphore> = wait.into_iter().collect();
        let info = vk::BindSparseInfo::default()
            .wait_semaphores(&waits)
            .image_opaque_binds(opaque)
            .image_binds(image)
            .signal_semaphores(&signal);
        let d = &ctx.device;
        // SAFETY: the graphics queue supports sparse binding (`sparse_tiles`);
        // every image and memory is live; no pending work uses these images'
        // regions (the caller's frame order: the renderer waited for the last
        // frame, `prepare` for the last copies), or the bind waits on `wait`,
        // signalled after all of it (`plan_ahead`); `bound` has no pending
        // signal (`bind_signalled` is false), `wait` one, signalled just before.
        unsafe {
            d.queue_bind_sparse(ctx.queue, &[info], vk::Fence::null())
                .check("vkQueueBindSparse")?;
        }
        self.bind_signalled = true;
        Ok(())
    }

    /// Which loads wait for the frame's submission (`--tune tiles.late-spare`), for
    /// the start-up log.
    pub fn late_line(&self) -> &'static str {
        match self.late {
            LateSpare::None => "every load before the frame's submission",
            LateSpare::Future => "the coming views' loads after the frame's submission",
            LateSpare::All => "every spare load after the frame's submission",
        }
    }

    /// The semaphore a submission must wait on before touching memory bound
    /// since the last such submission, once: `None` when nothing was bound.
    fn take_bind_signal(&mut self) -> Option<vk::Semaphore> {
        std::mem::take(&mut self.bind_signalled).then_some(self.bound)
    }

    /// Binds (`Some`) or unbinds (`None`) the tiles of `changes`, a region
    /// of adjacent tiles per bind where [`bind_regions`] joins them.
    /// [`Self::prepare`] only binds (evictions keep their pages bound); the
    /// unbind form stays for a caller that must take memory back from a tile.
    fn bind_tiles(
        &mut self,
        ctx: &Context,
        changes: &[TileBind],
        wait: Option<vk::Semaphore>,
    ) -> Result<u32, GpuError> {
        let mut per_image: HashMap<u32, Vec<vk::SparseImageMemoryBind>> = HashMap::new();
        for (t, count, mem) in bind_regions(&self.maps, changes, self.page) {
            let m = &self.maps[t.map as usize];
            let side = m.side(t.level);
            let (x, y) = (t.x * m.tile_w, t.y * m.tile_h);
            let (memory, memory_offset) = mem.unwrap_or((vk::DeviceMemory::null(), 0));
            per_image
                .entry(t.map)
                .or_default()
                .push(vk::SparseImageMemoryBind {
                    subresource: vk::ImageSubresource {
                        aspect_mask: vk::ImageAspectFlags::COLOR,
                        mip_level: t.level,
                        array_layer: 0,
                    },
                    offset: vk::Offset3D {
                        x: x as i32,
                        y: y as i32,
                        z: 0,
                    },
                    extent: vk::Extent3D {
                        width: (m.tile_w * count).min(side - x),
                        height: m.tile_h.min(side - y),
                        depth: 1,
                    },
                    memory,
                    memory_offset,
                    flags: vk::SparseMemoryBindFlags::empty(),
                });
        }
        let mut keys: Vec<u32> = per_image.keys().copied().collect();
        keys.sort_unstable();
        let infos: Vec<vk::SparseImageMemoryBindInfo> = keys
            .iter()
            .map(|k| {
                vk::SparseImageMemoryBindInfo::default()
                    .image(self.sparse[*k as usize].image)
                    .binds(&per_image[k])
            })
            .collect();
        self.bind_sparse(ctx, &[], &infos, wait)?;
        Ok(per_image.values().map(|v| v.len() as u32).sum())
    }

    /// Plans and carries out this frame's tile changes from `inputs`: the
    /// last frame's per-cell feedback and the look-ahead's cells.
    /// The spare loads `--tune tiles.late-spare` names wait for
    /// [`Self::after_submit`]. Where [`Self::plan_ahead`] planned this frame
    /// after the last one's submission, that plan is carried out and the
    /// inputs here are not used.
    pub fn prepare(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        inputs: PlanInputs<'_>,
        prefill: bool,
    ) -> Result<TileFrame, GpuError> {
        let planned = match self.planned.take() {
            Some(p) => Some(p),
            None => self.plan(ctx, mem, inputs, prefill, false)?,
        };
        match planned {
            Some(p) => self.finish(ctx, mem, p),
            None => Ok(TileFrame::default()),
        }
    }

    /// Whether the renderer should plan each frame's tiles after the last
    /// frame's submission ([`Self::plan_ahead`]; `--tune tiles.plan-early=1`).
    pub fn plans_early(&self) -> bool {
        self.plan_early
    }

    /// After a frame's submission, while the GPU draws it: plans the next
    /// frame's tile changes ([`Self::prepare`]'s inputs, from the feedback of
    /// the frame before this one), takes their pages and binds them, so that
    /// the plan's CPU time overlaps the GPU's frame and the binds start on the
    /// queue as soon as the frame ends, instead of after the renderer's wait
    /// for it. The binds wait on a semaphore signalled after everything
    /// submitted so far: an evicted tile's page goes to another tile only
    /// once the frame in flight, which may sample it, is done. The next
    /// [`Self::prepare`] reads, copies and maps the loads. Nothing the frame
    /// in flight reads changes before that: its residency map stays as it is.
    pub fn plan_ahead(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        inputs: PlanInputs<'_>,
    ) -> Result<(), GpuError> {
        if self.planned.is_none() {
            self.planned = self.plan(ctx, mem, inputs, false, true)?;
        }
        Ok(())
    }

    /// Whether a plan made by [`Self::plan_ahead`] waits for [`Self::prepare`].
    pub fn has_plan(&self) -> bool {
        self.planned.is_some()
    }

    /// Signals [`Self::gate`] from an empty submission: its signal covers
    /// every command submitted to the queue before it (the frame in flight,
    /// its copies, the late loads' copies).
    fn signal_gate(&self, ctx: &Context) -> Result<(), GpuError> {
        let signal = [vk::SemaphoreSubmitInfo::default()
            .semaphore(self.gate)
            .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)];
        let submit = [vk::SubmitInfo2::default().signal_semaphore_infos(&signal)];
        // SAFETY: the queue is the renderer's, used from this thread alone;
        // `gate` has no pending signal: each signal is followed by a bind
        // that waits on it (`plan`), and the next signal comes a frame later,
        // after submissions that waited for that bind.
        unsafe {
            ctx.device
                .queue_submit2(ctx.queue, &submit, vk::Fence::null())
                .check("vkQueueSubmit2")
        }
    }

    /// The plan of [`Self::prepare`] (`early`: of [`Self::plan_ahead`], with
    /// the frame before still in flight): evictions, pages and binds.
    /// `None` when residency is frozen (`--tune tiles.freeze-after`).
    fn plan(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        inputs: PlanInputs<'_>,
        prefill: bool,
        early: bool,
    ) -> Result<Option<Planned>, GpuError> {
        let PlanInputs {
            wants,
            hits,
            ahead,
            cast,
        } = inputs;
        // Frozen after `n` frames; at 0 the pre-fill too (the mip tails alone).
        if self.freeze_after.is_some_and(|n| self.frames >= n) {
            return Ok(None);
        }
        if !prefill {
            self.frames += 1;
        }
        // Spare loads kept back by the last call, for a caller that did not
        // call `after_submit` after its frame's submission: done now.
        let flushed = self.after_submit(ctx, mem)?;
        // The last copies read staging and wrote pages that this frame may
        // give to other tiles: done before anything here touches them (in a
        // frame, the renderer's wait for the last frame covered them). Early,
        // the gate orders the binds after them on the GPU, and `finish`
        // waits before staging is written.
        let waiting = Instant::now();
        if !early {
            self.one_shot.wait(ctx)?;
        }
        let wait_seconds = waiting.elapsed().as_secs_f64();
        let pressure = mem.pool_pressure(self.pool);
        let free_bytes = pressure.map_or(0, |p| {
            p.pool_budget
                .unwrap_or(u64::MAX)
                .saturating_sub(p.pool_allocated_bytes)
        });
        // A page atlas: each format's slots are a class of their own.
        let free_by_class: Vec<u64> = self
            .atlas
            .as_ref()
            .map_or(Vec::new(), |a| a.slots.free_by_class());
        let classes: Vec<u8> = self
            .atlas
            .as_ref()
            .map_or(Vec::new(), |a| a.slots.classes());
        let input = TileInput {
            maps: &self.maps,
            g: self.g,
            wants,
            hits,
            resident: &self.resident,
            blocked: &self.blocked,
            free_pages: match self.atlas.as_ref() {
                Some(a) => a.slots.free_total() as u64,
                None => free_bytes / self.page.max(1) + self.spare.len() as u64,
            },
            max_loads: self.max_loads,
            ahead_wants: ahead.0,
            ahead_hits: ahead.1,
            cast_wants: cast.0,
            cast_hits: cast.1,
            // A sixteenth of a frame's loads: the reads are waited for, and
            // over a look-ahead of 16 frames that is one frame's worth. Before
            // the first frame (the pre-fill), as many as a frame may load.
            max_ahead_loads: if prefill {
                self.max_loads
            } else {
                self.max_loads.div_ceil(self.ahead_share)
            },
            max_spare_loads: if prefill {
                self.max_loads
            } else {
                self.max_spare
            },
            max_ring_loads: if prefill {
                self.max_loads
            } else {
                self.max_ring
            },
            spare_hysteresis: self.spare_hysteresis,
            page_keys: if self.evict_by_pages {
                &self.page_keys
            } else {
                &[]
            },
            classes: &classes,
            free_by_class: &free_by_class,
        };
        let planning = Instant::now();
        let plan = policy::plan(&input);
        let mut frame = TileFrame {
            wanted_bytes: plan.wanted * self.page
                + self.tail_bytes
                + self.atlas.as_ref().map_or(0, |a| a.set_tail_bytes),
            missing: plan.missing,
            wanted_loads: plan.wanted_loads.min(u64::from(u32::MAX)) as u32,
            plan_seconds: planning.elapsed().as_secs_f64(),
            wait_seconds,
            ..TileFrame::default()
        };
        frame.absorb(&flushed);
        // The spare loads kept back last frame are bound, filled and in the
        // map from here on; their copies (and reads of staging) are done
        // before any page or staging slot is touched below (early: before
        // their pages are bound again, by the gate, and before staging is
        // written, in `finish`).
        let waiting = Instant::now();
        if !early {
            self.late_shot.wait(ctx)?;
        }
        frame.wait_seconds += waiting.elapsed().as_secs_f64();
        let mut binding = Duration::ZERO;
        // Evictions: out of the map, their pages spare and still bound (the
        // module's "Stale bindings"): no unbind.
        self.retire(&plan.evictions);
        frame.evictions = plan.evictions.len() as u32;
        // Loads: a page each. The candidates are every spare page and, where
        // they are too few, new pages from the pool as long as it gives them;
        // `pages::assign` picks which page each tile takes, so that runs of
        // adjacent tiles get pages that follow each other in memory and bind
        // as one region (`bind_regions`). Candidates left over stay spare.
        let paging = Instant::now();
        if self.atlas.is_some() {
            // A slot each, in the atlas of the load's format: no bind.
            let (loads, kinds) = self.accept_slots(&plan.loads, &plan.kinds);
            frame.missing += (plan.loads.len() - loads.len()) as u64;
            let late = if prefill { LateSpare::None } else { self.late };
            let (now, later) = split_late(&self.maps, &loads, &kinds, late);
            self.take_slots(&now);
            self.take_slots(&later);
            frame.runs = loads.len() as u32;
            frame.page_seconds = paging.elapsed().as_secs_f64();
            return Ok(Some(Planned {
                frame,
                loads: now,
                later,
                late_binds: Vec::new(),
            }));
        }
        let mut candidates: Vec<Allocation> = std::mem::take(&mut self.spare);
        while candidates.len() < plan.loads.len() {
            let opts = MemOptions::new(MemoryUsage::GpuOnly, "texture tile").in_pool(self.pool);
            // The pool's free bytes can hold fewer pages than they count
            // (gaps between tails): a refusal ends the loads here.
            match mem.try_allocate_memory(self.page, self.page, self.type_bits, &opts) {
                Ok(Some(a)) => candidates.push(a),
                Ok(None) => break,
                Err(e) if e.is_no_room() => break,
                Err(e) => {
                    self.spare = candidates;
                    return Err(e);
                }
            }
        }
        let got = plan.loads.len().min(candidates.len());
        // The frame's own loads now; the spare ones after its submission
        // (outside the pre-fill, and unless `--tune tiles.late-spare` says no).
        let late = if prefill { LateSpare::None } else { self.late };
        let (now, later) = split_late(&self.maps, &plan.loads[..got], &plan.kinds, late);
        let taken = self
            .take_pages(&now, &mut candidates)
            .and_then(|(b, r)| Ok((b, r, self.take_pages(&later, &mut candidates)?)));
        self.spare.extend(candidates);
        let (binds, now_runs, (late_binds, late_runs)) = taken?;
        frame.runs = now_runs + late_runs;
        frame.page_seconds = paging.elapsed().as_secs_f64();
        frame.missing += (plan.loads.len() - got) as u64;
        let loads = now;
        if !binds.is_empty() {
            let b = Instant::now();
            let bound = if early {
                self.signal_gate(ctx)
                    .and_then(|()| self.bind_tiles(ctx, &binds, Some(self.gate)))
            } else {
                self.bind_tiles(ctx, &binds, None)
            };
            match bound {
                Ok(n) => frame.binds += n,
                Err(e) => {
                    self.retire(&loads);
                    self.retire(&later);
                    return Err(e);
                }
            }
            binding += b.elapsed();
        }
        frame.bind_seconds = binding.as_secs_f64();
        Ok(Some(Planned {
            frame,
            loads,
            later,
            late_binds,
        }))
    }

    /// Carries out `planned`: the reads of its loads into staging, the
    /// residency map, and the copies (not waited for); its spare loads kept
    /// back for [`Self::after_submit`].
    fn finish(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        planned: Planned,
    ) -> Result<TileFrame, GpuError> {
        let Planned {
            mut frame,
            loads,
            later,
            late_binds,
        } = planned;
        // Staging is written below: the copies that read it are done (waited
        // for already where the plan was made here).
        let waiting = Instant::now();
        self.one_shot.wait(ctx)?;
        self.late_shot.wait(ctx)?;
        frame.wait_seconds += waiting.elapsed().as_secs_f64();
        // Reads into staging, on worker threads, by runs of adjacent tiles
        // (`loads` is sorted).
        let runs = runs(&self.maps, &loads, self.run_cap());
        let started = Instant::now();
        let failed = self.read(&loads, &runs, 0);
        frame.read_seconds = started.elapsed().as_secs_f64();
        let runs = self.drop_failed(&loads, runs, &failed);
        // `loads` keeps its order (the staging layout); the runs left name
        // the tiles that arrived.
        let arrived = self.arrive(&loads, &runs);
        frame.upload_bytes = arrived * self.slot;
        frame.loads = arrived as u32;
        if self.changed.iter().any(|&c| c) || self.changed.is_empty() {
            let mapping = Instant::now();
            self.refresh_map();
            frame.map_seconds = mapping.elapsed().as_secs_f64();
        }
        if !later.is_empty() {
            self.deferred = Some(Deferred {
                base: loads.len(),
                loads: later,
                binds: late_binds,
            });
        }
        let copying = Instant::now();
        self.upload(ctx, mem, &loads, &runs, 0, false)?;
        frame.copy_seconds = copying.elapsed().as_secs_f64();
        Ok(frame)
    }

    /// After the frame's submission: binds, reads and copies the spare loads
    /// [`Self::prepare`] kept back (`--tune tiles.late-spare`), on the same queue,
    /// not waited for, and marks them resident: the next frame's residency
    /// map names them, and its submission comes after their copies. Nothing
    /// the frame in flight reads changes: the tiles are absent from its map,
    /// and their pages were spare or new. [`Self::prepare`] calls it for a
    /// caller that did not.
    pub fn after_submit(&mut self, ctx: &Context, mem: &GpuMemory) -> Result<TileFrame, GpuError> {
        let Some(Deferred { loads, binds, base }) = self.deferred.take() else {
            return Ok(TileFrame::default());
        };
        let mut frame = TileFrame::default();
        let b = Instant::now();
        match self.bind_tiles(ctx, &binds, None) {
            Ok(n) => frame.binds = n,
            Err(e) => {
                self.retire(&loads);
                return Err(e);
            }
        }
        frame.bind_seconds = b.elapsed().as_secs_f64();
        let runs = runs(&self.maps, &loads, self.run_cap());
        let started = Instant::now();
        let failed = self.read(&loads, &runs, base);
        frame.read_seconds = started.elapsed().as_secs_f64();
        let runs = self.drop_failed(&loads, runs, &failed);
        let arrived = self.arrive(&loads, &runs);
        frame.upload_bytes = arrived * self.slot;
        frame.loads = arrived as u32;
        let copying = Instant::now();
        self.upload(ctx, mem, &loads, &runs, base, true)?;
        frame.copy_seconds = copying.elapsed().as_secs_f64();
        Ok(frame)
    }

    /// Of `loads` (with their `kinds`), those the page atlas has free slots
    /// for, in the plan's order (the rest are missing this frame).
    fn accept_slots(&self, loads: &[TileRef], kinds: &[LoadKind]) -> (Vec<TileRef>, Vec<LoadKind>) {
        let Some(a) = self.atlas.as_ref() else {
            return (loads.to_vec(), kinds.to_vec());
        };
        let ok = a.slots.accept(loads.iter().map(|t| t.map as usize));
        let kinds = kinds.iter().chain(std::iter::repeat(&LoadKind::Wanted));
        loads
            .iter()
            .zip(kinds)
            .zip(ok)
            .filter(|(_, ok)| *ok)
            .map(|((&t, &k), _)| (t, k))
            .unzip()
    }

    /// Gives each of `loads` a slot of its map's atlas ([`Self::accept_slots`]
    /// left only loads that have one). The page table names it once the
    /// tile arrives ([`Self::set_resident`]).
    fn take_slots(&mut self, loads: &[TileRef]) {
        let Some(a) = self.atlas.as_mut() else {
            return;
        };
        // (`page_bytes` counts sparse pages alone: the atlas's bytes are its
        // images', `bytes`.)
        for t in loads {
            let idx = self.maps[t.map as usize].index(t.level, t.x, t.y);
            let took = a.slots.take(t.map as usize, idx);
            debug_assert!(took.is_some(), "a load accepted without a slot: {t:?}");
        }
    }

    /// Takes a page for each of `loads` (sorted) from `candidates`, which
    /// keeps the rest; records them as the tiles' pages. The binds to make,
    /// and the runs of adjacent tiles among the loads.
    fn take_pages(
        &mut self,
        loads: &[TileRef],
        candidates: &mut Vec<Allocation>,
    ) -> Result<(Vec<TileBind>, u32), GpuError> {
        if loads.is_empty() {
            return Ok((Vec::new(), 0));
        }
        let load_runs: Vec<u32> = runs(&self.maps, loads, u32::MAX)
            .iter()
            .map(|r| r.len)
            .collect();
        let at: Vec<pages::PageAt> = candidates
            .iter()
            .map(|a| (ash::vk::Handle::as_raw(a.vk_memory()), a.offset()))
            .collect();
        // `assign` gives each load its own candidate (the caller keeps the
        // loads within the candidates), so neither error below is reached.
        let internal = || GpuError::Other("tile streamer: pages::assign broke its contract".into());
        let pick = if self.reversed_pages {
            // The check's order: pages in descending memory order, most of
            // them others than `assign` would give (see `--tune tiles.reversed-pages`).
            let mut order: Vec<usize> = (0..at.len()).collect();
            order.sort_unstable_by_key(|&i| std::cmp::Reverse(at[i]));
            order.truncate(loads.len());
            Some(order)
        } else {
            pages::assign(&load_runs, &at, self.page)
        };
        let Some(pick) = pick.filter(|p| p.len() == loads.len()) else {
            return Err(internal());
        };
        let mut slots: Vec<Option<Allocation>> =
            std::mem::take(candidates).into_iter().map(Some).collect();
        let mut binds = Vec::with_capacity(loads.len());
        for (&t, &i) in loads.iter().zip(&pick) {
            let Some(a) = slots.get_mut(i).and_then(Option::take) else {
                *candidates = slots.into_iter().flatten().collect();
                return Err(internal());
            };
            binds.push((t, Some((a.vk_memory(), a.offset()))));
            let idx = self.maps[t.map as usize].index(t.level, t.x, t.y);
            let objects = self.page_objects.len() as u64;
            let object = *self
                .page_objects
                .entry(ash::vk::Handle::as_raw(a.vk_memory()))
                .or_insert(objects);
            if let Some(k) = self
                .page_keys
                .get_mut(t.map as usize)
                .and_then(|m| m.get_mut(idx))
            {
                *k = (object << 32) | (a.offset() / self.page.max(1));
            }
            self.page_bytes += a.size();
            self.pages[t.map as usize][idx] = Some(a);
        }
        *candidates = slots.into_iter().flatten().collect();
        Ok((binds, load_runs.len() as u32))
    }

    /// The runs of `runs` whose reads did not fail (`failed`: indices into
    /// `runs` and why). A failed run's tiles are retired (their pages spare,
    /// still bound) and their map loads no more tiles, keeping what it has
    /// (the shaders never named these tiles).
    fn drop_failed(
        &mut self,
        loads: &[TileRef],
        runs: Vec<Run>,
        failed: &[(usize, String)],
    ) -> Vec<Run> {
        if failed.is_empty() {
            return runs;
        }
        let mut lost = Vec::new();
        for (k, e) in failed {
            let run = runs[*k];
            let tiles = &loads[run.start..run.start + run.len as usize];
            let map = tiles[0].map as usize;
            if !self.blocked[map] {
                self.blocked[map] = true;
                eprintln!("streaming: {e}; texture {map} keeps the tiles it has");
            }
            lost.extend_from_slice(tiles);
        }
        self.retire(&lost);
        let bad: std::collections::HashSet<usize> = failed.iter().map(|f| f.0).collect();
        runs.into_iter()
            .enumerate()
            .filter(|(k, _)| !bad.contains(k))
            .map(|(_, r)| r)
            .collect()
    }

    /// Marks the tiles of `runs` (into `loads`) resident; how many.
    fn arrive(&mut self, loads: &[TileRef], runs: &[Run]) -> u64 {
        let mut arrived = 0u64;
        for run in runs {
            for &t in &loads[run.start..run.start + run.len as usize] {
                self.set_resident(t, true);
                arrived += 1;
            }
        }
        arrived
    }

    /// Marks `tiles` absent and moves their pages to the spare pages, bound
    /// where they are (the module's "Stale bindings"): the shaders stop
    /// sampling them with the next residency map.
    fn retire(&mut self, tiles: &[TileRef]) {
        for t in tiles {
            let idx = self.maps[t.map as usize].index(t.level, t.x, t.y);
            if let Some(a) = self.atlas.as_mut() {
                a.slots.release(t.map as usize, idx);
            }
            if let Some(a) = self.pages[t.map as usize][idx].take() {
                self.page_bytes -= a.size();
                self.spare.push(a);
            }
            if let Some(k) = self
                .page_keys
                .get_mut(t.map as usize)
                .and_then(|m| m.get_mut(idx))
            {
                *k = u64::MAX;
            }
            self.set_resident(*t, false);
        }
    }

    /// Reads `loads` (sorted, grouped in `runs`) into staging: run `r` at
    /// slot `base + runs[r].start`, its rows spanning the run's tiles (one
    /// copy out of the file's mapping, or one positioned read, per block row
    /// of a run, not per tile), runs shared
    /// over up to [`READERS`] groups on rayon's pool. `runs` cover `loads` in order.
    fn read(&mut self, loads: &[TileRef], runs: &[Run], base: usize) -> Vec<(usize, String)> {
        if loads.is_empty() {
            return Vec::new();
        }
        // Failure injection for the tests, as the level mechanism's.
        let refuse = self.fail_reads.clone();
        let refuse = refuse.as_deref();
        let slot = self.slot as usize;
        let maps = &self.maps;
        let sparse = &self.sparse;
        let atlas_layout = self.atlas.as_ref().map(|a| a.layout);
        let staging = self.staging.as_mut().expect("built");
        let mut rest =
            &mut staging.mapped_mut().as_mut_slice()[base * slot..(base + loads.len()) * slot];
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, READERS)
            .min(runs.len());
        // Cut the runs into `threads` groups of about equal tiles.
        let per = loads.len().div_ceil(threads.max(1));
        let mut groups: Vec<(&[Run], &mut [u8])> = Vec::new();
        let mut first = 0;
        let mut tiles = 0;
        for (k, r) in runs.iter().enumerate() {
            tiles += r.len as usize;
            if tiles >= per || k + 1 == runs.len() {
                let bytes = (r.start + r.len as usize - runs[first].start) * slot;
                let (head, tail) = std::mem::take(&mut rest).split_at_mut(bytes);
                groups.push((&runs[first..=k], head));
                rest = tail;
                first = k + 1;
                tiles = 0;
            }
        }
        let group_lens: Vec<usize> = groups.iter().map(|g| g.0.len()).collect();
        // On rayon's pool (its threads are already running: no thread is
        // started per frame); a reader that panics fails its group's runs.
        let results: Vec<std::thread::Result<Vec<(usize, String)>>> = groups
            .into_par_iter()
            .map(|(group, dst)| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let base = group.first().map_or(0, |r| r.start);
                    let mut failed = Vec::new();
                    for (k, run) in group.iter().enumerate() {
                        let t = loads[run.start];
                        let s = &sparse[t.map as usize];
                        if refuse.is_some_and(|r| s.path.to_string_lossy().contains(r)) {
                            failed.push((
                                k,
                                format!("{}: read refused (--tune fail-reads)", s.path.display()),
                            ));
                            continue;
                        }
                        let m = &maps[t.map as usize];
                        let r = &s.reader;
                        let bs = s.format.block_side();
                        let side = m.side(t.level);
                        let level = t.level as usize;
                        if let Some(layout) = atlas_layout.as_ref() {
                            // One tile a run: its slot, border included,
                            // from the level's wrapped blocks.
                            let bytes = s.format.level_bytes(layout.side(), layout.side()) as usize;
                            let at = (run.start - base) * slot;
                            let read = atlas::assemble_slot(
                                layout,
                                bs,
                                s.format.block_bytes() as usize,
                                side,
                                (t.x, t.y),
                                &mut dst[at..at + bytes],
                                |xy, wh, out| match &s.mapped {
                                    Some(m) => m.read_level_rect_into(r, level, xy, wh, out),
                                    None => r.read_level_rect_into(level, xy, wh, out),
                                },
                            );
                            if let Err(e) = read {
                                failed.push((k, e.to_string()));
                            }
                            continue;
                        }
                        let (x, y) = (t.x * m.tile_w, t.y * m.tile_h);
                        let w = (m.tile_w * run.len).min(side - x);
                        let h = m.tile_h.min(side - y);
                        let bytes = s.format.level_bytes(w, h) as usize;
                        let at = (run.start - base) * slot;
                        let (xy, wh) = ((x / bs, y / bs), (w.div_ceil(bs), h.div_ceil(bs)));
                        let out = &mut dst[at..at + bytes];
                        let read = match &s.mapped {
                            Some(m) => m.read_level_rect_into(r, level, xy, wh, out),
                            None => r.read_level_rect_into(level, xy, wh, out),
                        };
                        if let Err(e) = read {
                            failed.push((k, e.to_string()));
                        }
                    }
                    failed
                }))
            })
            .collect();
        // Failures as indices into `runs`.
        let mut out = Vec::new();
        let mut first = 0;
        for (result, len) in results.into_iter().zip(group_lens) {
            match result {
                Ok(f) => out.extend(f.into_iter().map(|(k, e)| (first + k, e))),
                Err(_) => out.extend(
                    (first..first + len).map(|k| (k, "a reader thread panicked".to_string())),
                ),
            }
            first += len;
        }
        out
    }

    /// Copies the staged `loads` (from slot `base` on) into their tiles and,
    /// when it changed and this is not the `late` submission, the residency
    /// map to the GPU, in one submission that waits on the bind before it
    /// and is not waited for (the module's "A frame"). The `late` one (the
    /// spare loads after the frame's submission) goes on its own command
    /// buffer: the frame's copies may still be running.
    fn upload(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        loads: &[TileRef],
        runs: &[Run],
        base: usize,
        late: bool,
    ) -> Result<(), GpuError> {
        let map_dirty = self.map_dirty && !late;
        if loads.is_empty() && !map_dirty && !self.bind_signalled {
            return Ok(());
        }
        let after = self.take_bind_signal();
        let d = &ctx.device;
        if let Some(s) = self.staging.as_ref() {
            mem.flush(s.allocation());
        }
        // With a page atlas the shaders read the page table in the map's place.
        let words: &[u32] = match self.atlas.as_ref() {
            Some(a) => a.slots.table(),
            None => &self.map_words,
        };
        let map_bytes = (words.len() * 4) as u64;
        if map_dirty {
            let host = self.map_host.as_mut().expect("built");
            host.mapped_mut()
                .write(0, bytemuck::cast_slice(words))
                .map_err(|e| GpuError::Other(format!("tile residency map: {e}")))?;
            mem.flush(host.allocation());
        }
        // Each staged tile's atlas image and slot origin, with a page atlas.
        // (A tile without a slot, which `take_slots` never leaves among the
        // loads, is not copied: its entry stays 0, so nothing samples it.)
        let slots: Vec<(usize, vk::Image, (u32, u32))> = match self.atlas.as_ref() {
            Some(a) => runs
                .iter()
                .enumerate()
                .filter_map(|(r, run)| {
                    let t = loads[run.start];
                    let idx = self.maps[t.map as usize].index(t.level, t.x, t.y);
                    let k = a.slots.atlas_of(t.map as usize);
                    let slot = a.slots.slot(t.map as usize, idx)?;
                    Some((r, a.images[k].0.raw(), a.layout.origin(slot)))
                })
                .collect(),
            None => Vec::new(),
        };
        let atlas_side = self.atlas.as_ref().map(|a| a.layout.side());
        let dirty = map_dirty && map_bytes > 0;
        let staging = self.staging.as_ref().map(|b| b.raw());
        let map_src = self.map_host.as_ref().map(|b| b.raw());
        let map_dst = self.map_gpu.as_ref().map(|b| b.raw());
        let maps = &self.maps;
        let sparse = &self.sparse;
        let slot = self.slot;
        let record = |cmd| {
            // SAFETY: recording; every buffer and image is live, the tiles are
            // bound (the submission waits for the bind), no earlier work is
            // pending (the last frame was waited for).
            unsafe {
                // The last frame's sampling and map reads come before these
                // writes (the images stay in GENERAL: no layout transition,
                // which could touch stale tiles' pages).
                let before = [vk::MemoryBarrier2::default()
                    .src_stage_mask(
                        vk::PipelineStageFlags2::FRAGMENT_SHADER
                            | vk::PipelineStageFlags2::COMPUTE_SHADER,
                    )
                    .dst_stage_mask(vk::PipelineStageFlags2::COPY)];
                d.cmd_pipeline_barrier2(
                    cmd,
                    &vk::DependencyInfo::default().memory_barriers(&before),
                );
                if let (Some(src), Some(span)) = (staging, atlas_side) {
                    // A page atlas: one tile a run, its slot whole; in waves
                    // of slot columns ([`atlas::copy_wave`]), a barrier
                    // between waves.
                    let mut order: Vec<usize> = (0..slots.len()).collect();
                    order.sort_by_key(|&k| atlas::copy_wave(slots[k].2 .0 / span.max(1)));
                    let mut wave = None;
                    for k in order {
                        let (r, image, (x, y)) = slots[k];
                        let run = &runs[r];
                        let w = atlas::copy_wave(x / span.max(1));
                        if wave.is_some_and(|last| last != w) {
                            let between = [vk::MemoryBarrier2::default()
                                .src_stage_mask(vk::PipelineStageFlags2::COPY)
                                .src_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
                                .dst_stage_mask(vk::PipelineStageFlags2::COPY)
                                .dst_access_mask(vk::AccessFlags2::TRANSFER_WRITE)];
                            d.cmd_pipeline_barrier2(
                                cmd,
                                &vk::DependencyInfo::default().memory_barriers(&between),
                            );
                        }
                        wave = Some(w);
                        let region = [vk::BufferImageCopy::default()
                            .buffer_offset((base + run.start) as u64 * slot)
                            .buffer_row_length(span)
                            .buffer_image_height(span)
                            .image_subresource(vk::ImageSubresourceLayers {
                                aspect_mask: vk::ImageAspectFlags::COLOR,
                                mip_level: 0,
                                base_array_layer: 0,
                                layer_count: 1,
                            })
                            .image_offset(vk::Offset3D {
                                x: x as i32,
                                y: y as i32,
                                z: 0,
                            })
                            .image_extent(vk::Extent3D {
                                width: span,
                                height: span,
                                depth: 1,
                            })];
                        d.cmd_copy_buffer_to_image(
                            cmd,
                            src,
                            image,
                            vk::ImageLayout::GENERAL,
                            &region,
                        );
                    }
                } else if let Some(src) = staging {
                    // One region per run: its rows span the run's tiles in
                    // staging, as they span them in the image.
                    for run in runs {
                        let t = loads[run.start];
                        let m = &maps[t.map as usize];
                        let side = m.side(t.level);
                        let (x, y) = (t.x * m.tile_w, t.y * m.tile_h);
                        let region = [vk::BufferImageCopy::default()
                            .buffer_offset((base + run.start) as u64 * slot)
                            .buffer_row_length(m.tile_w * run.len)
                            .buffer_image_height(m.tile_h)
                            .image_subresource(vk::ImageSubresourceLayers {
                                aspect_mask: vk::ImageAspectFlags::COLOR,
                                mip_level: t.level,
                                base_array_layer: 0,
                                layer_count: 1,
                            })
                            .image_offset(vk::Offset3D {
                                x: x as i32,
                                y: y as i32,
                                z: 0,
                            })
                            .image_extent(vk::Extent3D {
                                width: (m.tile_w * run.len).min(side - x),
                                height: m.tile_h.min(side - y),
                                depth: 1,
                            })];
                        d.cmd_copy_buffer_to_image(
                            cmd,
                            src,
                            sparse[t.map as usize].image,
                            vk::ImageLayout::GENERAL,
                            &region,
                        );
                    }
                }
                if let (true, Some(src), Some(dst)) = (dirty, map_src, map_dst) {
                    d.cmd_copy_buffer(
                        cmd,
                        src,
                        dst,
                        &[vk::BufferCopy {
                            src_offset: 0,
                            dst_offset: 0,
                            size: map_bytes,
                        }],
                    );
                }
                copies_to_shaders(d, cmd);
            }
        };
        let shot = if late {
            &self.late_shot
        } else {
            &self.one_shot
        };
        // SAFETY: `after` is the signal of the bind just before (this
        // frame's, or its late loads'), consumed here alone.
        if let Err(e) = unsafe { shot.submit(ctx, after, record) } {
            // Nothing waited on the bind's signal: it is still pending.
            self.bind_signalled = after.is_some();
            return Err(e);
        }
        if !late {
            self.map_dirty = false;
        }
        Ok(())
    }

    /// Frees every page, tail, image, buffer and sync object; the device must
    /// be idle. The descriptors go back to `set`'s own tail images.
    pub fn destroy(&mut self, ctx: &Context, mem: &GpuMemory, set: &TextureSet) {
        let d = &ctx.device;
        for (i, t) in set.textures.iter().enumerate() {
            if i < self.sparse.len() {
                set.write_view(d, i, t.view);
            }
        }
        for s in self.sparse.drain(..) {
            if s.image == vk::Image::null() {
                // A page atlas's map: the view is the texture set's own.
                continue;
            }
            // SAFETY: the device is idle; the descriptors no longer name them.
            unsafe {
                d.destroy_image_view(s.view, None);
                d.destroy_image(s.image, None);
            }
        }
        if let Some(mut a) = self.atlas.take() {
            // SAFETY: the device is idle; the atlases' and the probe's
            // elements of the bindless array are not read again (partially
            // bound, and no frame that reads them follows).
            unsafe { Self::free_atlases(ctx, mem, std::mem::take(&mut a.images)) };
            if let Some((image, view)) = a.probe.take() {
                // SAFETY: as for the atlases just above.
                unsafe {
                    d.destroy_image_view(view, None);
                    mem.destroy_image(image);
                }
            }
        }
        let pages = self.pages.iter_mut().flatten().filter_map(Option::take);
        for a in pages.chain(self.spare.drain(..)) {
            // SAFETY: the images bound to them are destroyed.
            unsafe { mem.free_memory(a) };
        }
        self.page_bytes = 0;
        for a in self.tails.drain(..) {
            // SAFETY: as above.
            unsafe { mem.free_memory(a) };
        }
        for b in [self.map_host.take(), self.staging.take()]
            .into_iter()
            .flatten()
        {
            // SAFETY: the device is idle.
            unsafe { mem.destroy_buffer(b) };
        }
        if let Some(b) = self.map_gpu.take() {
            // SAFETY: the device is idle.
            unsafe { mem.destroy_buffer(b) };
        }
        self.one_shot.destroy(d);
        self.late_shot.destroy(d);
        self.deferred = None;
        // SAFETY: the device is idle: no bind signals it, no submission waits on it.
        unsafe {
            d.destroy_semaphore(self.bound, None);
            d.destroy_semaphore(self.gate, None);
        }
        self.bound = vk::Semaphore::null();
        self.gate = vk::Semaphore::null();
        self.bind_signalled = false;
        self.planned = None;
    }
}

/// `count` levels from `level`, one layer, colour.
fn color_levels(level: u32, count: u32) -> vk::ImageSubresourceRange {
    vk::ImageSubresourceRange {
        aspect_mask: vk::ImageAspectFlags::COLOR,
        base_mip_level: level,
        level_count: count,
        base_array_layer: 0,
        layer_count: 1,
    }
}

/// Transfer writes before shader reads (sampling and storage-buffer reads),
/// with no layout transition (the sparse images stay in `GENERAL`).
///
/// # Safety
/// `cmd` is recording.
unsafe fn copies_to_shaders(d: &ash::Device, cmd: vk::CommandBuffer) {
    let shaders =
        vk::PipelineStageFlags2::FRAGMENT_SHADER | vk::PipelineStageFlags2::COMPUTE_SHADER;
    let reads = vk::AccessFlags2::SHADER_SAMPLED_READ | vk::AccessFlags2::SHADER_STORAGE_READ;
    let after = [vk::MemoryBarrier2::default()
        .src_stage_mask(vk::PipelineStageFlags2::COPY)
        .src_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
        .dst_stage_mask(shaders)
        .dst_access_mask(reads)];
    // SAFETY: per the contract.
    unsafe { d.cmd_pipeline_barrier2(cmd, &vk::DependencyInfo::default().memory_barriers(&after)) };
}

/// Wanted levels and hits of `materials` materials' cells from the feedback
/// words (`lod x16`, hits per cell), as [`policy`] takes them.
pub fn cells_from_feedback(words: &[u32]) -> (Vec<u8>, Vec<u32>) {
    let mut wants = Vec::with_capacity(words.len() / 2);
    let mut hits = Vec::with_capacity(words.len() / 2);
    for c in words.chunks_exact(2) {
        wants.push(if c[1] == 0 || c[0] == u32::MAX {
            UNSEEN
        } else {
            (c[0] / 16).min(u32::from(UNSEEN) - 1) as u8
        });
        hits.push(c[1]);
    }
    (wants, hits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(size: u32, tile: u32) -> MapTiles {
        MapTiles {
            size,
            levels: 32 - size.leading_zeros(),
            tile_w: tile,
            tile_h: tile,
            tail_first: 2,
            margin: geometry::filter_margin(4),
        }
    }

    fn t(map: u32, level: u32, x: u32, y: u32) -> TileRef {
        TileRef { map, level, x, y }
    }

    #[test]
    fn runs_join_adjacent_tiles_of_one_row_only() {
        let maps = vec![map(1024, 128); 2];
        let mut loads = vec![
            t(0, 0, 1, 0),
            t(0, 0, 2, 0),
            t(0, 0, 3, 0),
            t(0, 0, 5, 0), // a gap
            t(0, 0, 6, 1), // another row
            t(0, 1, 7, 1), // another level (x 7 is past level 1's grid: not full)
            t(1, 0, 7, 1), // another map
        ];
        loads.sort_unstable();
        let r = runs(&maps, &loads, 32);
        assert_eq!(
            r,
            vec![
                Run { start: 0, len: 3 },
                Run { start: 3, len: 1 },
                Run { start: 4, len: 1 },
                Run { start: 5, len: 1 },
                Run { start: 6, len: 1 },
            ]
        );
        // The cap splits a long row.
        let row: Vec<TileRef> = (0..8).map(|x| t(0, 0, x, 2)).collect();
        assert_eq!(
            runs(&maps, &row, 3),
            vec![
                Run { start: 0, len: 3 },
                Run { start: 3, len: 3 },
                Run { start: 6, len: 2 },
            ]
        );
        // A 2 x 2 block, sorted: two runs of two (row by row, not column by
        // column).
        let mut block = vec![t(0, 0, 1, 1), t(0, 0, 0, 1), t(0, 0, 1, 0), t(0, 0, 0, 0)];
        block.sort_unstable();
        assert_eq!(
            runs(&maps, &block, 32),
            vec![Run { start: 0, len: 2 }, Run { start: 2, len: 2 }]
        );
        // Every load is in exactly one run, in order.
        let covered: usize = r.iter().map(|r| r.len as usize).sum();
        assert_eq!(covered, loads.len());
        assert!(r
            .windows(2)
            .all(|w| w[0].start + w[0].len as usize == w[1].start));
    }

    #[test]
    fn split_late_keeps_back_the_kinds_asked_and_never_a_parent_of_a_load_made_now() {
        use LoadKind::{Ahead, Ring, Wanted};
        // tail_first 2: level 0 tiles have parents at level 1, level 1 none.
        let maps = vec![map(1024, 128); 2];
        let loads = vec![
            t(0, 0, 2, 2), // wanted, its parent (0, 1, 1, 1) a ring load
            t(0, 1, 1, 1),
            t(0, 0, 6, 6), // a ring load, its parent the look-ahead's
            t(0, 1, 3, 3),
            t(1, 1, 0, 0), // the look-ahead's, no parent (level 1)
            t(1, 0, 4, 0), // wanted, its parent not loaded this frame
        ];
        let kinds = vec![Wanted, Ring, Ring, Ahead, Ahead, Wanted];
        let sorted = |mut v: Vec<TileRef>| {
            v.sort_unstable();
            v
        };
        // None: every load now, sorted.
        let (now, later) = split_late(&maps, &loads, &kinds, LateSpare::None);
        assert_eq!((now, later), (sorted(loads.clone()), vec![]));
        // All spare ones back, but the wanted load's parent comes along.
        let (now, later) = split_late(&maps, &loads, &kinds, LateSpare::All);
        assert_eq!(
            now,
            sorted(vec![t(0, 0, 2, 2), t(0, 1, 1, 1), t(1, 0, 4, 0)])
        );
        assert_eq!(
            later,
            sorted(vec![t(0, 0, 6, 6), t(0, 1, 3, 3), t(1, 1, 0, 0)])
        );
        // The coming views' alone: the ring load made now takes its
        // look-ahead parent along.
        let (now, later) = split_late(&maps, &loads, &kinds, LateSpare::Future);
        assert_eq!(later, vec![t(1, 1, 0, 0)]);
        assert_eq!(now.len() + later.len(), loads.len());
        assert!(now.contains(&t(0, 1, 3, 3)));
        // A chain: a wanted level-0 load whose level-1 parent is spare, on a
        // map with a level 2 as well: the parent's parent comes along too.
        let deep = vec![MapTiles {
            tail_first: 3,
            ..map(1024, 128)
        }];
        let chain = vec![t(0, 0, 0, 0), t(0, 1, 0, 0), t(0, 2, 0, 0)];
        let (now, later) = split_late(&deep, &chain, &[Wanted, Ring, Ahead], LateSpare::All);
        assert_eq!((now, later), (chain, vec![]));
    }

    #[test]
    fn bind_regions_join_adjacent_unbinds_and_contiguous_pages() {
        use ash::vk::Handle;
        let maps = vec![map(1024, 128), map(1024, 384)];
        let a = vk::DeviceMemory::from_raw(1);
        let b = vk::DeviceMemory::from_raw(2);
        let p = 65536;
        let changes = vec![
            // Unbinds of one row, given out of order: one region of three.
            (t(0, 0, 3, 0), None),
            (t(0, 0, 1, 0), None),
            (t(0, 0, 2, 0), None),
            // Pages that follow each other in `a`: one region of two; the
            // third is in another memory object.
            (t(0, 0, 4, 1), Some((a, 5 * p))),
            (t(0, 0, 5, 1), Some((a, 6 * p))),
            (t(0, 0, 6, 1), Some((b, 7 * p))),
            // Adjacent but a page apart out of order: two regions.
            (t(1, 0, 0, 2), Some((a, 9 * p))),
            (t(1, 0, 1, 2), Some((a, 8 * p))),
            // Next to an unbind: a bind never joins one.
            (t(0, 0, 4, 0), Some((a, 0))),
            // Map 1's tiles are 384 texels: its third column is cut by the
            // edge (1024 texels) and joins as the region's last.
            (t(1, 0, 2, 0), None),
            (t(1, 0, 1, 0), None),
        ];
        let r = bind_regions(&maps, &changes, p);
        assert_eq!(
            r,
            vec![
                (t(0, 0, 1, 0), 3, None),
                (t(0, 0, 4, 0), 1, Some((a, 0))),
                (t(0, 0, 4, 1), 2, Some((a, 5 * p))),
                (t(0, 0, 6, 1), 1, Some((b, 7 * p))),
                (t(1, 0, 1, 0), 2, None),
                (t(1, 0, 0, 2), 1, Some((a, 9 * p))),
                (t(1, 0, 1, 2), 1, Some((a, 8 * p))),
            ]
        );
        // Every change is in exactly one region.
        let covered: u32 = r.iter().map(|r| r.1).sum();
        assert_eq!(covered as usize, changes.len());
    }

    #[test]
    fn feedback_cells_become_wanted_levels_and_hits() {
        // (lod x16, hits): level 2.5 seen 3 times; nothing; a hit with no LOD
        // written (impossible, treated as unseen); a huge LOD clamped below UNSEEN.
        let words = [40, 3, u32::MAX, 0, u32::MAX, 1, 16 * 4000, 2];
        let (wants, hits) = cells_from_feedback(&words);
        assert_eq!(wants, vec![2, UNSEEN, UNSEEN, UNSEEN - 1]);
        assert_eq!(hits, vec![3, 0, 1, 2]);
    }
}
