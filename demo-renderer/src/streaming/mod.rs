//! Texture streaming: each material's maps keep the mip levels the camera needs,
//! under a fixed texture budget.
//!
//! - [`policy`]: a pure function from wanted levels, coverage, resident levels,
//!   sizes and the budget to this frame's changes (unit- and property-tested).
//! - [`mechanism`]: new images in the texture pool, GPU copies of the levels that
//!   stay, file reads on worker threads into mapped staging, fences.
//! - [`defrag`]: incremental defragmentation passes of the texture pool, their
//!   copies recorded into the frame's command buffer (trigger and byte limit:
//!   [`policy::defrag_pass_bytes`]).
//! - [`estimate`]: the CPU estimate of wanted levels from the camera.
//! - [`Streamer`]: ties them to the frame loop, reads the GPU feedback, and
//!   measures what the report needs.
//!
//! # Where the wanted level comes from
//!
//! The PBR pass writes, from one pixel per 8x8 tile, each material's finest
//! wanted level (the sampler's LOD rule with anisotropy, from the texel-coordinate
//! derivatives in the full-size map; `atomicMin`), the number of such pixels and
//! a histogram of their wanted levels (the policy's coverage per level) into a
//! small host-visible buffer. The three maps of a material share their
//! size and UV mapping, so one answer per material is exact for all three. The
//! renderer waits for every frame's fence, so the buffer is read right after the
//! frame, without a stall of its own; the next frame's decisions use it.
//!
//! # Look-ahead
//!
//! The scripted camera also hints the streamer (`--lookahead FRAMES`, default
//! [`DEFAULT_LOOKAHEAD`]): the CPU estimate at the present pose and at the poses
//! of the path's next `FRAMES` frames (a camera cut among them brings the view
//! after the cut) gives each material a *prefetch* level, the finest any of them
//! asks for, weighted by the largest coverage, scaled down linearly the further
//! ahead it is. The policy ranks prefetch steps below every step the present view
//! wants and above cached levels ([`policy`]), grows towards the present view's
//! wants first and only then towards the prefetch, and never drops a texture the
//! present view sees to make room for a prefetch: the look-ahead spends only the
//! budget, operations and upload bytes the present view leaves, and nothing when
//! the present view is over-subscribed (a level it wants does not fit). The
//! budget rule is the same for both.
//!
//! By tiles (`--residency tiles`) a material-wide level cannot say which tiles
//! a view needs: a CPU ray cast of the coming views through a coarse grid of
//! their pixels ([`tiles::lookahead`]) gives per-cell levels, kept warm (spare
//! pages only), and on a camera cut's own frame the cast of the new view
//! replaces the stale feedback, so the cut's tiles load before it is drawn.
//! The cast depends on the camera path alone: the renderer makes the next
//! frame's after each frame's submission ([`Streamer::cast_ahead`]), while
//! the GPU draws, instead of on the render thread's way to the next frame.
//!
//! The CPU estimate ([`estimate`]) is used instead: in the pre-fill and on the
//! first frame (no feedback yet), on the frame of a camera cut (the feedback
//! shows the old view), on devices without `fragmentStoresAndAtomics`, and for
//! a material the feedback did not see while the estimate puts it on screen
//! smaller than 256 pixels (too small for the sparse sampling to be sure to
//! hit).
//!
//! # Pre-fill
//!
//! Before the first frame (start-up work, as a loading screen would be),
//! [`Streamer::prefill`] runs the policy with the first frame's inputs (the CPU
//! estimate at the first pose and the look-ahead's views), without the
//! per-frame caps on operations and upload bytes, starts the changes through
//! the mechanism, waits for their copies (the file reads are done when the
//! batch is submitted) and frees the images they replaced, runs a
//! defragmentation pass where a frame would (its copies at once, waited for),
//! and repeats until the policy has no change left to make for that view, none
//! of the changes it plans can start (the frames retry them), or
//! [`PREFILL_LIMIT`] has passed ([`prefill_end`]). The budget holds as it does
//! for frames: the same policy, the same mechanism, the same defragmentation
//! limits. `--prefill off` leaves the first frame with the mip tails and what
//! its own changes bring, filled over the frames that follow.
//!
//! # Measuring
//!
//! The report's `mip_deficit` of frame `n` compares the levels resident while
//! frame `n` was drawn with that frame's own feedback (the truth for the frame),
//! in both modes, so `--streaming off` and `on` are measured alike.

pub mod defrag;
pub mod estimate;
mod levels;
pub mod mechanism;
pub mod policy;
pub mod psnr;
pub mod residency;
mod tiled;
pub mod tiles;
pub mod view_change;

use std::time::{Duration, Instant};

use ash::vk;

use crate::gpu::memory::{MappedBuffer, MemOptions, MemoryUsage};
use crate::gpu::{Context, GpuError, GpuMemory};
use crate::materials::textures::TextureSet;
use crate::scene::Object;
use estimate::View;
use levels::Levels;
use mechanism::TexInfo;
use residency::Residency;
pub use residency::{ResidencyKind, ResidencyMode};
use tiled::Tiled;
use view_change::ViewChange;

/// One texture's row in the overlay's streaming panel ([`Streamer::panel`]).
#[derive(Clone, Debug, PartialEq)]
pub struct PanelRow {
    /// The map's file name without extension.
    pub name: String,
    /// The finest level resident.
    pub resident_mip: u32,
    /// Bytes of the image sampled now (the main image, or the tail).
    pub resident_bytes: u64,
    /// The level the last decisions wanted, where the texture was in view.
    pub wanted_mip: Option<u32>,
    /// Bytes of an image from that level.
    pub wanted_bytes: Option<u64>,
}

/// The overlay's streaming panel ([`Streamer::panel`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Panel {
    /// Per texture.
    pub rows: Vec<PanelRow>,
    /// Loads waiting (the last frame's `pending_loads`).
    pub pending_loads: u32,
    /// The last frame's file reads, bytes per second of reading.
    pub read_bytes_per_s: f64,
}

/// Streaming on or off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Residency follows the camera (the default).
    On,
    /// One level per texture chosen at load time (for comparison).
    Off,
}

/// The streamer's settings.
#[derive(Clone, Debug)]
pub struct StreamConfig {
    /// On or off.
    pub mode: Mode,
    /// Texture budget in bytes.
    pub budget: u64,
    /// File bytes uploaded per frame, at most (one level may pass it).
    pub upload_budget: u64,
    /// Residency changes started per frame, at most.
    pub max_ops: usize,
    /// Tint textures by their resident level.
    pub show_mips: bool,
    /// The sampler's anisotropy (for the feedback's LOD rule).
    pub anisotropy: u32,
    /// Bytes a defragmentation pass of the texture pool may move per frame
    /// (`--defrag-budget`); 0 turns defragmentation off.
    pub defrag_budget: u64,
    /// Frames of the camera path ahead whose wants are prefetched (`--lookahead`;
    /// 0: off). Informational here: the caller passes the views.
    pub lookahead_frames: u32,
    /// Tiles or whole levels (`--residency`).
    pub residency: ResidencyMode,
    /// `--tune`'s knobs ([`crate::tuning`]).
    pub tuning: crate::tuning::Tuning,
}

/// `--defrag-budget`'s default: bytes a defragmentation pass may move per frame.
pub const DEFAULT_DEFRAG_BUDGET: u64 = 32 << 20;

/// The tail every texture keeps resident: levels of at most this many texels a side.
pub const TAIL_TEXELS: u32 = 16;
/// Residency changes per frame, at most.
pub const MAX_OPS: usize = 16;
/// `--lookahead`'s default: frames of the camera path ahead whose wants are
/// prefetched. On the H200 at 4K the gallery's frames take about 9 ms, so 16
/// frames are about 0.15 s: enough to load a close-up's finest levels at the
/// default upload cap (64 MiB a frame: 8K BC maps' level 0 is 64 MiB each, three
/// maps a material) before a cut reaches it.
pub const DEFAULT_LOOKAHEAD: u32 = 16;

/// By tiles, the weight of the next frame's view in the look-ahead, by its
/// pixels (the views further ahead are kept warm): the feedback is a frame
/// old, and what the camera is about to bring on screen is the one guess
/// worth pages the present view wants (measured in BENCHMARKS.md, "The
/// look-ahead by tiles and the cut frames").
pub const NEXT_VIEW_WEIGHT: f32 = 0.5;
/// `--lookahead`'s largest value.
pub const MAX_LOOKAHEAD: u32 = 240;

/// The pre-fill's time limit. The default budget (1 GiB) read from a cold disk
/// at 100 MB/s takes about 10 s, and a loading screen longer than that is worse
/// than a first frame that fills over the next ones; on the H200 the budget's
/// worth of files loads in well under a second, so the limit only bounds a slow
/// disk or a policy that will not settle.
pub const PREFILL_LIMIT: Duration = Duration::from_secs(10);

/// Why the pre-fill ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PrefillEnd {
    /// The policy had no change left to make for the first view.
    Settled,
    /// The policy planned changes but none started (no free range of the pool
    /// held the new images, or the staging ring was full with nothing in
    /// flight): the frames retry them.
    Stalled,
    /// [`PREFILL_LIMIT`] passed with changes still to make.
    TimeLimit,
}

/// What [`Streamer::prefill`] did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prefill {
    /// Milliseconds it took (policy, file reads, GPU copies, frees).
    pub ms: f64,
    /// File bytes it read and uploaded.
    pub bytes: u64,
    /// Rounds of policy, loads and wait.
    pub rounds: u32,
    /// Residency changes it started.
    pub changes: u32,
    /// Bytes of texture images its defragmentation passes moved.
    pub defrag_bytes: u64,
    /// The largest of the resident texture bytes and the texture pool's
    /// committed bytes at any round's peak (its new images made, the images they
    /// replace not yet freed).
    pub peak_bytes: u64,
    /// Resident texture bytes when it ended.
    pub resident_bytes: u64,
    /// Why it ended.
    pub end: PrefillEnd,
}

impl Prefill {
    /// A pre-fill that has done nothing yet, `peak_bytes` resident.
    fn start(peak_bytes: u64) -> Self {
        Self {
            ms: 0.0,
            bytes: 0,
            rounds: 0,
            changes: 0,
            defrag_bytes: 0,
            peak_bytes,
            resident_bytes: 0,
            end: PrefillEnd::Settled,
        }
    }

    /// The start-up line: time, bytes and how it ended.
    pub fn line(&self, budget: u64) -> String {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        format!(
            "streaming: pre-fill {:.1} ms before the first frame ({:.1} MiB read, {} changes in {} rounds, {:.1} MiB defragmented, {}; {:.1} MiB resident of {:.1} MiB budget, peak {:.1} MiB)",
            self.ms,
            mib(self.bytes),
            self.changes,
            self.rounds,
            mib(self.defrag_bytes),
            match self.end {
                PrefillEnd::Settled => "settled",
                PrefillEnd::Stalled => "stalled: the frames retry",
                PrefillEnd::TimeLimit => "time limit",
            },
            mib(self.resident_bytes),
            mib(budget),
            mib(self.peak_bytes)
        )
    }
}

/// Whether the pre-fill ends after a round: `planned` changes the policy
/// planned, `progressed` whether any started (or failed, which changes what the
/// policy sees), `defragmented` whether its defragmentation pass moved images
/// (which may make room for what waits), `elapsed` since it began. `None`:
/// another round.
pub fn prefill_end(
    planned: usize,
    progressed: bool,
    defragmented: bool,
    elapsed: Duration,
    limit: Duration,
) -> Option<PrefillEnd> {
    if planned == 0 && !defragmented {
        Some(PrefillEnd::Settled)
    } else if !progressed && !defragmented {
        Some(PrefillEnd::Stalled)
    } else if elapsed >= limit {
        Some(PrefillEnd::TimeLimit)
    } else {
        None
    }
}

/// Streaming figures of one frame, as `report.json` lists them.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct StreamFrame {
    /// Bytes of texture images alive during the frame: tails, main images, images
    /// being filled and images waiting to be freed.
    pub texture_resident_bytes: u64,
    /// Bytes the texture pool holds in device memory (blocks).
    pub texture_pool_committed_bytes: u64,
    /// Bytes every visible texture at its wanted level would take.
    pub texture_wanted_bytes: u64,
    /// File bytes uploaded this frame.
    pub upload_bytes: u64,
    /// Milliseconds spent reading them into staging (worker threads, wall clock).
    pub upload_ms: f64,
    /// Bytes copied from staging by the upload batches found complete at this
    /// frame's start (0 where the upload queue has no timestamps).
    pub upload_gpu_bytes: u64,
    /// GPU milliseconds those copies took on the queue that ran them (the
    /// transfer queue where one is used), from timestamps around them.
    pub upload_gpu_ms: f64,
    /// Coverage-weighted mean over visible textures of how many levels the resident
    /// one is coarser than the wanted one.
    pub mip_deficit: f64,
    /// Replacements in flight after this frame's start.
    pub pending_loads: u32,
    /// Residency changes started this frame.
    pub residency_changes: u32,
    /// Whether the camera announced a cut at this frame.
    pub camera_cut: bool,
    /// What the view did at this frame ([`view_change`]): "none", "cut" (an
    /// announced camera cut), "jump" (the pose jumped, found before the
    /// frame and answered on it as a cut is) or "feedback" (the frame's
    /// feedback wanted a new set at once, found after it: the next frame's
    /// caps are raised).
    pub view_change: ViewChange,
    /// The share of this frame's feedback samples wanting a level finer than
    /// the frame before wanted on their material
    /// ([`view_change::fresh_share`]; 0 without both feedbacks).
    pub view_fresh_share: f64,
    /// Milliseconds since the streamer started, at the frame's start.
    pub time_ms: f64,
    /// Where this frame's decisions took wanted levels from: "feedback",
    /// "estimate" (by tiles, the present view's cast), or "both" (a detected
    /// jump that keeps part of the old view on screen: the estimate joined
    /// with the feedback on the materials the present view still shows,
    /// [`view_change`]).
    pub wanted_from: &'static str,
    /// Bytes of texture images the defragmentation pass recorded in this frame's
    /// command buffer moved (committed once the frame was done).
    pub defrag_bytes_moved: u64,
    /// Defragmentation passes that moved images in this frame (0 or 1).
    pub defrag_passes: u32,
    /// New texture images whose allocation failed this frame although the pool
    /// had the bytes free: fragmentation.
    pub fragmentation_failures: u32,
    /// New texture images not attempted this frame because no free range held
    /// them although the pool had the bytes free (they wait for a later frame).
    pub fragmentation_deferrals: u32,
    /// The texture pool's fragmentation after this frame's changes: 1 - largest
    /// free range / free bytes in its blocks.
    pub texture_pool_fragmentation: f64,
    /// Render-thread milliseconds the streamer took this frame (everything
    /// below included: the frame waits for it).
    pub stream_cpu_ms: f64,
    /// By tiles: milliseconds of the CPU ray cast of the coming views before
    /// the frame's submission: about 0 where the last frame cast them after
    /// its own submission ([`Streamer::cast_ahead`]; that time counts in its
    /// `late_ms`).
    pub lookahead_ms: f64,
    /// By tiles: whether this frame's look-ahead was cast after the last
    /// frame's submission (else before this frame's, on the render thread's
    /// way to it).
    pub lookahead_early: bool,
    /// By tiles: whether this frame's tile plan (evictions, pages, binds)
    /// was made after the last frame's submission
    /// ([`tiles::TileStreamer::plan_ahead`]; its time counts in that frame's
    /// `late_ms`), else before this frame's.
    pub plan_early: bool,
    /// By tiles: milliseconds the tile policy took to plan.
    pub plan_ms: f64,
    /// By tiles: milliseconds in `vkQueueBindSparse` (the loads' binds; not
    /// waited for: the copies' submission waits on their semaphore).
    pub bind_ms: f64,
    /// By tiles: `VkSparseImageMemoryBind`s given to the driver this frame
    /// (each binds a region of adjacent tiles; evictions unbind nothing).
    pub sparse_binds: u32,
    /// By tiles: tiles bound and filled this frame.
    pub tile_loads: u32,
    /// By tiles: of this frame's planned loads, those of tiles the present
    /// view wants (the rest: the look-ahead's, the margin, the ring).
    pub tile_wanted_loads: u32,
    /// By tiles: runs of horizontally adjacent tiles among `tile_loads` (the
    /// fewest binds they could take: `sparse_binds` is at least this).
    pub tile_runs: u32,
    /// By tiles: milliseconds the streamer waited at its start for its last
    /// copies (0 when the renderer's wait for the frame covered them).
    pub stream_wait_ms: f64,
    /// By tiles: milliseconds recording and submitting the copies from
    /// staging (and the residency map's); not waited for.
    pub copy_ms: f64,
    /// By tiles: milliseconds taking the loads' pages and assigning them.
    pub page_ms: f64,
    /// By tiles: milliseconds refreshing the residency map.
    pub map_ms: f64,
    /// Milliseconds reading the last frame's feedback (and clearing it).
    pub feedback_ms: f64,
    /// By tiles: of `tile_loads`, the spare ones bound, read and copied
    /// after the frame's submission, while the GPU draws it
    /// ([`Streamer::after_submit`]): resident from the next frame on.
    pub tile_late_loads: u32,
    /// By tiles: milliseconds of that work and of the next frame's look-ahead
    /// cast ([`Streamer::cast_ahead`]) on the render thread (it overlaps the
    /// GPU's frame; `wall_ms` includes what it does not hide).
    pub late_ms: f64,
}

/// Levels the feedback's per-material histogram tells apart (finer levels of
/// larger maps fold into the last bin).
pub const FEEDBACK_LEVELS: usize = 14;
/// 32-bit words of feedback per material: finest LOD x16, a spare word, and the
/// histogram of wanted levels (whose sum is the pixel count).
const FEEDBACK_WORDS: usize = 2 + FEEDBACK_LEVELS;

/// One material's wanted level and coverage.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Want {
    level_lod: f32,
    coverage: f32,
    /// Fraction of the frame wanting each level (feedback only).
    hist: Option<[f32; FEEDBACK_LEVELS]>,
}

/// Wants from the CPU estimate (no histogram).
fn estimate_wants(est: &[Option<estimate::Estimate>]) -> Vec<Option<Want>> {
    est.iter()
        .map(|e| {
            e.map(|e| Want {
                level_lod: e.lod,
                coverage: e.coverage,
                hist: None,
            })
        })
        .collect()
}

/// What every residency shares: the settings, the feedback and this frame's
/// figures.
struct Common {
    cfg: StreamConfig,
    feedback: Option<MappedBuffer>,
    /// Whether the shader writes feedback (the device can).
    feedback_enabled: bool,
    /// The last feedback read, per material (min LOD x16, pixel count), and whether
    /// it is still unread for the frame just rendered.
    last_feedback: Option<Vec<[u32; FEEDBACK_WORDS]>>,
    unread: bool,
    pixels: f32,
    started: Instant,
    /// This frame's figures, completed by `frame_done`.
    frame: StreamFrame,
    /// Resident level of each texture while this frame is drawn.
    drawn_levels: Vec<u32>,
    map_sizes: Vec<u32>,
    /// Frames prepared so far.
    frames_prepared: u64,
    /// The feedback before `last_feedback`, for the trend.
    prev_feedback: Option<Vec<[u32; FEEDBACK_WORDS]>>,
    /// An error of `frame_done`, returned by the next `prepare`.
    error: Option<GpuError>,
    /// The view of the frame prepared last, for the pose jump.
    last_view: Option<View>,
    /// The last feedback's [`view_change::fresh_share`] against the one
    /// before, until `frame_done` takes it.
    fresh_share: Option<f64>,
    /// This frame is a jump that keeps part of the old view on screen
    /// ([`view_change::overlaps`]): the feedback's wants join the present
    /// view's.
    jump_overlaps: bool,
    /// The last frame done was a feedback change: the next frame's caps rise.
    feedback_changed: bool,
    /// This frame answers a view change: its per-frame caps are raised
    /// ([`crate::tuning::ViewTuning::cap_factor`]).
    raise_caps: bool,
}

/// The streamer of one texture set: the frame loop's hooks, dispatched to
/// its residency (the seam: [`residency`]).
pub struct Streamer {
    c: Common,
    residency: Box<dyn Residency>,
}

impl Common {
    fn reset_feedback(&mut self, mem: &GpuMemory) {
        if let Some(b) = self.feedback.as_mut() {
            let m = b.mapped_mut();
            let mut words = vec![0u32; (m.size() / 4) as usize];
            let materials = self.map_sizes.len() * FEEDBACK_WORDS;
            let split = materials.min(words.len());
            let (per_material, cells) = words.split_at_mut(split);
            for w in per_material.chunks_exact_mut(FEEDBACK_WORDS) {
                w[0] = u32::MAX;
            }
            // Cells: finest LOD x16 (atomicMin), hits.
            for c in cells.chunks_exact_mut(2) {
                c[0] = u32::MAX;
            }
            m.write(0, bytemuck::cast_slice(&words))
                .expect("write inside the allocation");
            mem.flush(m);
        }
    }

    fn feedback_wants(&self, fb: &[[u32; FEEDBACK_WORDS]]) -> Vec<Option<Want>> {
        let per_sample = 64.0 / self.pixels;
        fb.iter()
            .map(|w| {
                let count: u32 = w[2..].iter().sum();
                (count > 0).then(|| {
                    let mut hist = [0f32; FEEDBACK_LEVELS];
                    for (h, &n) in hist.iter_mut().zip(&w[2..]) {
                        *h = (n as f32 * per_sample).min(1.0);
                    }
                    Want {
                        level_lod: w[0] as f32 / 16.0,
                        coverage: (count as f32 * per_sample).min(1.0),
                        hist: Some(hist),
                    }
                })
            })
            .collect()
    }

    /// The look-ahead's wants per material: the finest level the CPU estimate
    /// finds at the present pose or any view `ahead` (nearest first), and the
    /// largest coverage, each view's scaled by `1 - k / (n + 1)` for the view `k`
    /// frames ahead of `n`. All `None` when `ahead` is empty (look-ahead off).
    fn lookahead_wants(
        &self,
        objects: &[Object],
        present: &View,
        ahead: &[View],
    ) -> Vec<Option<Want>> {
        let mut out: Vec<Option<Want>> = vec![None; self.map_sizes.len()];
        if ahead.is_empty() {
            return out;
        }
        let n = ahead.len() as f32;
        for (k, v) in std::iter::once(present).chain(ahead).enumerate() {
            let weight = 1.0 - k as f32 / (n + 1.0);
            for (o, e) in out
                .iter_mut()
                .zip(estimate::estimate(objects, v, &self.map_sizes))
            {
                let Some(e) = e else { continue };
                let w = o.get_or_insert(Want {
                    level_lod: e.lod,
                    coverage: 0.0,
                    hist: None,
                });
                w.level_lod = w.level_lod.min(e.lod);
                w.coverage = w.coverage.max(e.coverage * weight);
            }
        }
        out
    }

    /// Frees the feedback buffer; the device must be idle.
    fn destroy(&mut self, mem: &GpuMemory) {
        if let Some(b) = self.feedback.take() {
            // SAFETY: the device is idle.
            unsafe { mem.destroy_buffer(b) };
        }
    }
}

impl Streamer {
    /// Sets up streaming for `set` (in mode `On`, `set` holds only the tails).
    pub fn new(
        ctx: &Context,
        mem: &GpuMemory,
        set: &TextureSet,
        cfg: StreamConfig,
        feedback_enabled: bool,
        extent: vk::Extent2D,
    ) -> Result<Self, GpuError> {
        let d = &ctx.device;
        let mut infos = Vec::new();
        for t in &set.textures {
            let tail = match cfg.mode {
                Mode::On => t.base_level,
                Mode::Off => {
                    crate::materials::textures::tail_level(t.file_size, t.file_levels, TAIL_TEXELS)
                }
            };
            infos.push(TexInfo::new(d, t, tail)?);
        }
        let materials = set.textures.len() / 3;
        let map_sizes = (0..materials).map(|m| infos[m * 3].size).collect();
        let mut c = Common {
            cfg,
            feedback: None,
            feedback_enabled,
            last_feedback: None,
            unread: false,
            pixels: extent.width as f32 * extent.height as f32,
            started: Instant::now(),
            frame: StreamFrame::default(),
            // Nothing streamed yet: the levels the set loaded.
            drawn_levels: set.textures.iter().map(|t| t.base_level).collect(),
            map_sizes,
            frames_prepared: 0,
            prev_feedback: None,
            error: None,
            last_view: None,
            fresh_share: None,
            jump_overlaps: false,
            feedback_changed: false,
            raise_caps: false,
        };
        let mut tiled = Tiled::start(ctx, mem, set, &c.cfg)?;
        // What follows can fail: free what was made (the sparse images
        // included) before handing the error back.
        let cells = materials * tiled.as_ref().map_or(0, Tiled::feedback_cell_words);
        let size = ((materials.max(1) * FEEDBACK_WORDS + cells) * 4) as u64;
        let fb = mem.create_buffer_mapped(
            &vk::BufferCreateInfo::default()
                .size(size)
                .usage(vk::BufferUsageFlags::STORAGE_BUFFER),
            &MemOptions::new(MemoryUsage::Readback, "streaming feedback"),
        );
        let residency = match (fb, tiled.take()) {
            (Ok(fb), tiled) => {
                c.feedback = Some(fb);
                c.reset_feedback(mem);
                match tiled {
                    Some(t) => Ok(Box::new(t) as Box<dyn Residency>),
                    None => Levels::new(ctx, mem, set, infos, &c.cfg)
                        .map(|l| Box::new(l) as Box<dyn Residency>),
                }
            }
            (Err(e), Some(mut t)) => {
                ctx.wait_idle();
                t.destroy(ctx, mem, set);
                Err(e)
            }
            (Err(e), None) => Err(e),
        };
        match residency {
            Ok(residency) => Ok(Self { c, residency }),
            Err(e) => {
                ctx.wait_idle();
                c.destroy(mem);
                Err(e)
            }
        }
    }

    /// The feedback buffer (set 0, binding 1 of the PBR pass).
    pub fn feedback_buffer(&self) -> (vk::Buffer, u64) {
        self.c
            .feedback
            .as_ref()
            .map_or((vk::Buffer::null(), 0), |b| {
                (b.raw(), b.allocation().size())
            })
    }

    /// The tile residency map (set 0, binding 3 of the PBR pass; a placeholder
    /// when not streaming by tiles).
    pub fn residency_buffer(&self) -> (vk::Buffer, u64) {
        self.residency.map_buffer()
    }

    /// The frame uniform's `tiles` vector: cells per side of the residency map
    /// (0: whole levels), the feedback's first word of cells, the filter's
    /// margin, and 1 with the page atlas.
    pub fn tiles_uniform(&self) -> [u32; 4] {
        self.residency.tiles_uniform(self.c.map_sizes.len())
    }

    /// The residency that runs (resolved when the streamer was made).
    pub fn residency(&self) -> ResidencyKind {
        self.residency.kind()
    }

    /// Whether the shader should write feedback.
    pub fn feedback_enabled(&self) -> bool {
        self.c.feedback_enabled
    }

    /// The frame uniform's `stream` vector: anisotropy, show-mips, feedback.
    pub fn uniform(&self) -> [u32; 4] {
        let cfg = &self.c.cfg;
        [
            cfg.anisotropy.max(1),
            cfg.show_mips as u32,
            self.c.feedback_enabled as u32,
            0,
        ]
    }

    /// Frames of the camera path ahead the caller should pass to [`Self::prepare`]
    /// (`--lookahead`; 0 in mode `Off`, where nothing streams).
    pub fn lookahead_frames(&self) -> u32 {
        match self.c.cfg.mode {
            Mode::On => self.c.cfg.lookahead_frames,
            Mode::Off => 0,
        }
    }

    /// The overlay's streaming panel: per texture, what is resident (the main
    /// image, or the tail where there is none) and what the last decisions
    /// wanted (`None` where the texture was not in view); and the loads waiting
    /// and the last frame's read rate (bytes per second of reading).
    pub fn panel(&self, set: &TextureSet) -> Panel {
        let rows = set
            .textures
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let name = t
                    .path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                self.residency.panel_row(set, i, name)
            })
            .collect();
        let f = &self.c.frame;
        Panel {
            rows,
            pending_loads: f.pending_loads,
            read_bytes_per_s: if f.upload_ms > 0.0 {
                f.upload_bytes as f64 / (f.upload_ms / 1e3)
            } else {
                0.0
            },
        }
    }

    /// Level-0 side of material `m`'s maps.
    pub fn map_size(&self, m: usize) -> u32 {
        self.c.map_sizes.get(m).copied().unwrap_or(1)
    }

    /// The level material `m`'s albedo samples from now (for `--show-mips`).
    pub fn drawn_level(&self, m: usize) -> u32 {
        self.c.drawn_levels.get(m * 3).copied().unwrap_or(0)
    }

    /// Bytes of texture images alive now (old images waiting to be freed, and
    /// both images of each defragmentation move in flight, included).
    pub fn resident_bytes(&self, set: &TextureSet) -> u64 {
        self.residency.resident_bytes(set)
    }

    /// Reads the feedback of the frame just finished (if not read yet) and clears
    /// the buffer for the next one.
    fn read_feedback(&mut self, mem: &GpuMemory) {
        let c = &mut self.c;
        if !c.unread {
            return;
        }
        c.unread = false;
        if !c.feedback_enabled {
            c.last_feedback = None;
            return;
        }
        if let Some(b) = c.feedback.as_ref() {
            let m = b.allocation();
            mem.invalidate(m);
            let materials = c.map_sizes.len();
            let mut bytes = vec![0u8; materials * FEEDBACK_WORDS * 4];
            m.read(0, &mut bytes).expect("read inside the allocation");
            let cell_words = self.residency.feedback_cell_words();
            if cell_words > 0 {
                let mut cells = vec![0u8; materials * cell_words * 4];
                m.read(bytes.len() as u64, &mut cells)
                    .expect("read inside the allocation");
                let words: Vec<u32> = cells
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                self.residency.read_cells(&words);
            }
            let words: Vec<u32> = bytes
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            c.prev_feedback = c.last_feedback.take();
            let last: Vec<[u32; FEEDBACK_WORDS]> = words
                .chunks_exact(FEEDBACK_WORDS)
                .map(|w| {
                    let mut a = [0u32; FEEDBACK_WORDS];
                    a.copy_from_slice(w);
                    a
                })
                .collect();
            c.fresh_share = c.prev_feedback.as_ref().map(|prev| {
                let hist = |f: &[[u32; FEEDBACK_WORDS]]| -> Vec<[u32; FEEDBACK_LEVELS]> {
                    f.iter()
                        .map(|w| {
                            let mut h = [0u32; FEEDBACK_LEVELS];
                            h.copy_from_slice(&w[2..]);
                            h
                        })
                        .collect()
                };
                view_change::fresh_share(&hist(prev.as_slice()), &hist(last.as_slice()))
            });
            c.last_feedback = Some(last);
        }
        c.reset_feedback(mem);
    }

    /// Before frame `frame` is recorded (the previous one is done): takes finished
    /// replacements, decides, and starts this frame's changes. `ahead` holds the
    /// views of the camera path's coming frames, nearest first (see the module's
    /// *Look-ahead*; empty: none).
    #[allow(clippy::too_many_arguments)]
    pub fn prepare(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        set: &mut TextureSet,
        objects: &[Object],
        view: &View,
        camera_cut: bool,
        ahead: &[View],
    ) -> Result<(), GpuError> {
        let cpu_start = Instant::now();
        self.c.pixels = view.height as f32 * view.height as f32 * view.aspect;
        let time_ms = self.c.started.elapsed().as_secs_f64() * 1e3;
        self.read_feedback(mem);
        // An abrupt view change the camera did not announce is answered as
        // an announced cut is: the present view in the stale feedback's
        // place, the caps raised (see `view_change`).
        let t = self.c.cfg.tuning.view;
        let view_change =
            view_change::before_frame(camera_cut, self.c.last_view.as_ref(), view, &t);
        let last = self.c.last_view.replace(*view);
        self.c.jump_overlaps = view_change == ViewChange::Jump
            && last.is_some_and(|l| view_change::overlaps(&l, view, &t));
        let answered = camera_cut || (t.respond && view_change.is_change());
        let raise = view_change.is_change() || std::mem::take(&mut self.c.feedback_changed);
        self.c.raise_caps = t.respond && raise;
        let frame = StreamFrame {
            camera_cut,
            view_change,
            time_ms,
            feedback_ms: cpu_start.elapsed().as_secs_f64() * 1e3,
            ..StreamFrame::default()
        };
        // Every frame prepared so far is done (the renderer waits for each
        // frame's fence): a defragmentation pass still open (its frame was not
        // rendered) ends now (by levels).
        if let Some(e) = self.c.error.take() {
            return Err(e);
        }
        let c = &mut self.c;
        let views = (view, answered, ahead);
        let mut frame = self
            .residency
            .prepare(c, ctx, mem, set, objects, views, frame)?;
        frame.stream_cpu_ms = cpu_start.elapsed().as_secs_f64() * 1e3;
        c.frame = frame;
        c.unread = true;
        c.frames_prepared += 1;
        Ok(())
    }

    /// After the frame's submission, before it is waited for: by tiles, the
    /// spare loads [`Self::prepare`] kept back are bound, read and copied
    /// ([`tiles::TileStreamer::after_submit`]), so the frame never waits for
    /// them; their figures join the frame's. Nothing by levels.
    pub fn after_submit(&mut self, ctx: &Context, mem: &GpuMemory) -> Result<(), GpuError> {
        self.residency.after_submit(ctx, mem, &mut self.c.frame)
    }

    /// After a frame's submission and [`Self::cast_ahead`], by tiles where
    /// `--tune tiles.plan-early=1`: plans the next frame's tiles from that
    /// cast and the last feedback read (the frame before this one's: this
    /// one is still drawing), and binds them ([`tiles::TileStreamer::plan_ahead`]).
    /// The next [`Self::prepare`] carries the plan out whatever its views
    /// (the renderer gives it those of the cast). Does nothing without a cast
    /// or by levels.
    pub fn plan_ahead(&mut self, ctx: &Context, mem: &GpuMemory) -> Result<(), GpuError> {
        self.residency.plan_ahead(&mut self.c, ctx, mem)
    }

    /// By tiles, after a frame's submission: casts the look-ahead of the next
    /// frame (`view`, `camera_cut`, `ahead`: what its [`Self::prepare`] will
    /// be given), which depends on the camera path alone, so that the CPU ray
    /// cast overlaps the GPU's frame instead of delaying the next one. The
    /// next `prepare` uses it where its inputs are these, else casts anew.
    /// A jump from the frame prepared last ([`view_change`]) is cast as a
    /// cut, as that `prepare` will answer it. Nothing by levels.
    pub fn cast_ahead(
        &mut self,
        objects: &[Object],
        view: &View,
        camera_cut: bool,
        ahead: &[View],
    ) {
        // The frame prepared last is the one before `view`'s: a jump found
        // now is the one its `prepare` will find, and answers as a cut.
        let t = self.c.cfg.tuning.view;
        let change = view_change::before_frame(camera_cut, self.c.last_view.as_ref(), view, &t);
        let answered = camera_cut || (t.respond && change.is_change());
        self.residency
            .cast_ahead(&mut self.c, objects, (view, answered, ahead));
    }

    /// Before the first frame, with the views [`Self::prepare`] gets for it:
    /// loads what the policy wants for them, round after round, each waited for
    /// (see the module's *Pre-fill*), until it settles or `limit` passes.
    /// `None` in mode `Off` (the static choice is loaded at start).
    #[allow(clippy::too_many_arguments)]
    pub fn prefill(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        set: &mut TextureSet,
        objects: &[Object],
        view: &View,
        ahead: &[View],
        limit: Duration,
    ) -> Result<Option<Prefill>, GpuError> {
        let c = &mut self.c;
        self.residency
            .prefill(c, ctx, mem, set, objects, (view, ahead), limit)
    }

    /// Records after the scene pass: makes the feedback writes visible to the host
    /// (read after the frame's fence) and orders them before the next frame's, and
    /// records the copies of this frame's defragmentation pass.
    ///
    /// # Safety
    /// `cmd` is recording on the renderer's queue, outside a render pass; the
    /// frame is waited for before the next [`Self::prepare`] or [`Self::frame_done`].
    pub unsafe fn record_after_pass(&self, d: &ash::Device, cmd: vk::CommandBuffer) {
        let barrier = [vk::MemoryBarrier2::default()
            .src_stage_mask(crate::gpu::util::SAMPLING_STAGES)
            .src_access_mask(vk::AccessFlags2::SHADER_STORAGE_WRITE)
            .dst_stage_mask(vk::PipelineStageFlags2::HOST | crate::gpu::util::SAMPLING_STAGES)
            .dst_access_mask(
                vk::AccessFlags2::HOST_READ
                    | vk::AccessFlags2::SHADER_STORAGE_READ
                    | vk::AccessFlags2::SHADER_STORAGE_WRITE,
            )];
        // SAFETY: per the contract above.
        unsafe {
            d.cmd_pipeline_barrier2(
                cmd,
                &vk::DependencyInfo::default().memory_barriers(&barrier),
            )
        };
        // SAFETY: per the contract above.
        unsafe { self.residency.record(cmd) };
    }

    /// After the frame's fence: ends its defragmentation pass, reads its feedback
    /// and returns its figures. An error ending the pass is returned by the next
    /// [`Self::prepare`].
    pub fn frame_done(&mut self, ctx: &Context, mem: &GpuMemory, set: &TextureSet) -> StreamFrame {
        if let Err(e) = self.residency.frame_done(ctx, mem, set, &mut self.c.frame) {
            self.c.error.get_or_insert(e);
        }
        self.read_feedback(mem);
        let c = &mut self.c;
        let share = c.fresh_share.take();
        let t = c.cfg.tuning.view;
        let before = c.frame.view_change;
        c.frame.view_change = view_change::after_frame(before, share, &t);
        c.frame.view_fresh_share = share.unwrap_or(0.0);
        c.feedback_changed = c.frame.view_change.is_change();
        let mut f = c.frame.clone();
        f.mip_deficit = self.residency.deficit(&self.c, set);
        f
    }

    /// Frees the main images, the batches in flight and the feedback buffer; the
    /// device must be idle.
    pub fn destroy(&mut self, ctx: &Context, mem: &GpuMemory, set: &TextureSet) {
        self.residency.destroy(ctx, mem, set);
        self.c.destroy(mem);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(10);
    const EARLY: Duration = Duration::from_millis(5);

    #[test]
    fn prefill_ends_when_the_policy_settles() {
        let settled = Some(PrefillEnd::Settled);
        assert_eq!(prefill_end(0, false, false, EARLY, LIMIT), settled);
        // Nothing planned is settled even past the limit.
        assert_eq!(prefill_end(0, true, false, LIMIT * 2, LIMIT), settled);
        // A defragmentation pass that moved images: another round to see.
        assert_eq!(prefill_end(0, false, true, EARLY, LIMIT), None);
    }

    #[test]
    fn prefill_goes_on_while_it_progresses_within_the_limit() {
        let just_before = LIMIT - Duration::from_millis(1);
        assert_eq!(prefill_end(3, true, false, Duration::ZERO, LIMIT), None);
        assert_eq!(prefill_end(3, true, false, just_before, LIMIT), None);
        let over = Some(PrefillEnd::TimeLimit);
        assert_eq!(prefill_end(3, true, false, LIMIT, LIMIT), over);
        assert_eq!(prefill_end(3, false, true, LIMIT, LIMIT), over);
    }

    #[test]
    fn prefill_stops_when_nothing_planned_can_start() {
        let stalled = Some(PrefillEnd::Stalled);
        assert_eq!(prefill_end(2, false, false, EARLY, LIMIT), stalled);
        // A stall is reported as such even past the limit.
        assert_eq!(prefill_end(2, false, false, LIMIT * 2, LIMIT), stalled);
        // Blocked, but a defragmentation pass moved images: try again.
        assert_eq!(prefill_end(2, false, true, EARLY, LIMIT), None);
    }

    #[test]
    fn prefill_line_names_the_end() {
        let p = Prefill {
            ms: 12.5,
            bytes: 3 << 20,
            rounds: 2,
            changes: 9,
            defrag_bytes: 1 << 20,
            peak_bytes: 6 << 20,
            resident_bytes: 5 << 20,
            end: PrefillEnd::TimeLimit,
        };
        let line = p.line(7 << 20);
        assert!(line.contains("12.5 ms"), "{line}");
        assert!(line.contains("3.0 MiB read"), "{line}");
        assert!(line.contains("1.0 MiB defragmented"), "{line}");
        assert!(line.contains("time limit"), "{line}");
        assert!(line.contains("of 7.0 MiB budget"), "{line}");
    }
}
