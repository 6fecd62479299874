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
mod binds;
pub mod geometry;
pub mod lookahead;
pub mod mapped;
pub mod pages;
pub mod policy;
mod residency_map;
pub mod sample;
mod schedule;
mod start;
mod uploads;

pub use crate::tuning::{LateSpare, DEFAULT_MAX_RING};
pub use residency_map::cells_from_feedback;

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

use binds::{runs, BindSync, Run, TileBind};
use residency_map::ResidencyMap;
use schedule::{Knobs, PageMemory, Residency, Schedule};
use uploads::{color_levels, Uploads};

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

/// The tile streamer of one texture set: the maps and their images, and a
/// group per concern (each documented with its type, in the module that
/// uses it most).
pub struct TileStreamer {
    /// Every map's tile layout, three per material.
    maps: Vec<MapTiles>,
    /// Every map's sparse image (with a page atlas, the texture set's own
    /// view) and its file.
    sparse: Vec<SparseMap>,
    /// Where tile pages come from: the texture pool, a page's bytes, the
    /// memory types.
    memory: PageMemory,
    /// Which tiles are resident and on which pages; the spare pages and
    /// the always-resident tails.
    residency: Residency,
    /// The residency map the shaders read, and the cell grid it is laid out in.
    residency_map: ResidencyMap,
    /// The staging ring and the copies' submissions.
    uploads: Uploads,
    /// The semaphores that order the sparse binds and the copies.
    sync: BindSync,
    /// Work carried from one call to the next: a plan made ahead, loads
    /// kept back for after the submission, the frames counted.
    schedule: Schedule,
    /// The `--tune` settings, fixed at start.
    knobs: Knobs,
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

impl LateSpare {
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
    /// A frame answering an abrupt view change
    /// ([`crate::streaming::view_change`]): the look-ahead's loads (the
    /// present view's cast among them) may be this many times their share
    /// of the frame's; 0 or 1: as they are.
    pub ahead_factor: usize,
}

impl TileStreamer {
    /// Whether every frame casts its own view into the look-ahead
    /// (`--tune tiles.cast-present`).
    pub fn cast_present(&self) -> bool {
        self.knobs.cast_present
    }

    /// Cells per side of a material's grid (the shaders' `tiles.x`).
    pub fn cells_per_side(&self) -> u32 {
        self.residency_map.g
    }

    /// The filter's margin every map's footprints are widened by
    /// ([`geometry::filter_margin`]), for the shaders' `tile_level`.
    pub fn margin(&self) -> u32 {
        self.maps.first().map_or(0, |m| m.margin)
    }

    /// Bytes of memory bound now: tiles and mip tails.
    pub fn bytes(&self) -> u64 {
        if let Some(a) = self.atlas.as_ref() {
            return a.bytes + self.residency.tail_bytes;
        }
        debug_assert_eq!(
            self.residency.page_bytes,
            self.residency
                .pages
                .iter()
                .flatten()
                .flatten()
                .map(Allocation::size)
                .sum::<u64>()
        );
        self.residency.page_bytes + self.residency.tail_bytes
    }

    /// Whether tiles go to a page atlas ([`atlas`]) instead of sparse images.
    pub fn is_atlas(&self) -> bool {
        self.atlas.is_some()
    }

    /// Which loads wait for the frame's submission (`--tune tiles.late-spare`), for
    /// the start-up log.
    pub fn late_line(&self) -> &'static str {
        match self.knobs.late {
            LateSpare::None => "every load before the frame's submission",
            LateSpare::Future => "the coming views' loads after the frame's submission",
            LateSpare::All => "every spare load after the frame's submission",
        }
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
        let pages = self
            .residency
            .pages
            .iter_mut()
            .flatten()
            .filter_map(Option::take);
        for a in pages.chain(self.residency.spare.drain(..)) {
            // SAFETY: the images bound to them are destroyed.
            unsafe { mem.free_memory(a) };
        }
        self.residency.page_bytes = 0;
        for a in self.residency.tails.drain(..) {
            // SAFETY: as above.
            unsafe { mem.free_memory(a) };
        }
        for b in [self.residency_map.host.take(), self.uploads.staging.take()]
            .into_iter()
            .flatten()
        {
            // SAFETY: the device is idle.
            unsafe { mem.destroy_buffer(b) };
        }
        if let Some(b) = self.residency_map.gpu.take() {
            // SAFETY: the device is idle.
            unsafe { mem.destroy_buffer(b) };
        }
        self.uploads.one_shot.destroy(d);
        self.uploads.late_shot.destroy(d);
        self.schedule.deferred = None;
        self.sync.destroy(d);
        self.schedule.planned = None;
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

#[cfg(test)]
mod tests {
    use super::binds::bind_regions;
    use super::schedule::split_late;
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
