//! Residency by tiles (sparse binds or a page atlas): the look-ahead's ray
//! casts, the tile policy's inputs, and the [`TileStreamer`]
//! driven from the frame loop.
//!
//! The tile streamer holds the mechanism (binds or atlas slots, reads,
//! copies) and the tile policy; this holds what the frame loop adds: the
//! last feedback's cells, the look-ahead cast after a submission, and the
//! residency map the frame being drawn samples with.

use std::time::{Duration, Instant};

use ash::vk;

use super::estimate::View;
use super::residency::{Residency, ResidencyKind, ResidencyMode};
use super::tiles::{StartError, TileStreamer};
use super::{
    tiles, view_change, Common, Mode, PanelRow, Prefill, PrefillEnd, StreamConfig, StreamFrame,
    NEXT_VIEW_WEIGHT,
};
use crate::gpu::{Context, GpuError, GpuMemory};
use crate::materials::textures::TextureSet;
use crate::scene::Object;

/// What [`Tiled::cast_views`] gives: the present view's cast on a cut, the
/// look-ahead, and the present view's own cast within it.
type AheadCasts = (
    Option<tiles::lookahead::AheadCells>,
    tiles::lookahead::AheadCells,
    Option<tiles::lookahead::AheadCells>,
);

/// [`AheadCasts`] borrowed.
type Views<'a> = (
    Option<&'a tiles::lookahead::AheadCells>,
    &'a tiles::lookahead::AheadCells,
    Option<&'a tiles::lookahead::AheadCells>,
);

/// Per cell of every material: the tile policy's wanted levels and hits.
type TileWants = (Vec<u8>, Vec<u32>);

/// [`Tiled::tile_inputs`]'s cells as the tile streamer takes them.
fn plan_inputs<'a>(
    (wants, hits): &'a TileWants,
    ahead: &'a TileWants,
    cast: &'a TileWants,
) -> tiles::PlanInputs<'a> {
    tiles::PlanInputs {
        wants,
        hits,
        ahead: (&ahead.0, &ahead.1),
        cast: (&cast.0, &cast.1),
        ahead_factor: 1,
    }
}

/// A look-ahead cast made before the frame that uses it
/// ([`Tiled::cast_ahead`]), with the inputs it was cast from.
struct PendingCast {
    view: View,
    cut: bool,
    ahead: Vec<View>,
    cells: AheadCasts,
}

/// Residency by tiles ([`super::ResidencyMode::Tiles`] and
/// [`super::ResidencyMode::Atlas`]).
pub(super) struct Tiled {
    streamer: TileStreamer,
    /// The last feedback's cells: wanted level and hits.
    last_cells: Option<TileWants>,
    /// The look-ahead cast for a coming frame, made after the last frame's
    /// submission ([`Self::cast_ahead`]), with the inputs it was cast from.
    pending_cast: Option<PendingCast>,
    /// The next frame was planned after this one's submission
    /// ([`Self::plan_ahead`]); where its wanted levels came from.
    early_plan: Option<&'static str>,
    /// The residency map the frame being drawn samples with.
    drawn_map: Vec<u32>,
}

impl Tiled {
    /// The last step of resolving `cfg.residency` (after
    /// [`ResidencyMode::for_run`] and the textures' load): the tile streamer
    /// where tiles or the atlas were asked for and the device, the formats and
    /// the budget take them; `None` for levels (asked for, or `Auto` where tiles
    /// can't; streaming off); an error where `Tiles` or `Atlas` was asked for
    /// and can't run.
    pub(super) fn start(
        ctx: &Context,
        mem: &GpuMemory,
        set: &TextureSet,
        cfg: &StreamConfig,
    ) -> Result<Option<Self>, GpuError> {
        if cfg.mode != Mode::On || cfg.residency == ResidencyMode::Levels {
            return Ok(None);
        }
        let atlas = cfg.residency == ResidencyMode::Atlas;
        match TileStreamer::new(ctx, mem, set, cfg) {
            Ok(t) => {
                let by = if atlas { "a page atlas" } else { "tiles" };
                println!("streaming: by {by}; {}", t.late_line());
                Ok(Some(Self::new(t)))
            }
            Err(StartError::Gpu(e)) => Err(e),
            Err(StartError::Refused(why)) if cfg.residency != ResidencyMode::Auto => {
                let flag = if atlas { "atlas" } else { "tiles" };
                Err(GpuError::Other(format!("--residency {flag}: {why}")))
            }
            Err(StartError::Refused(why)) => {
                println!("streaming: by levels ({why})");
                Ok(None)
            }
        }
    }

    /// The frame loop's side of `streamer`.
    pub(super) fn new(streamer: TileStreamer) -> Self {
        let drawn_map = streamer.map().to_vec();
        Self {
            streamer,
            last_cells: None,
            pending_cast: None,
            early_plan: None,
            drawn_map,
        }
    }

    /// The tile policy's inputs from a frame's casts: the wanted levels and
    /// hits (the present view's cast on a cut, else the last feedback's
    /// cells, else nothing: the tails alone) and where they came from, the
    /// look-ahead's, and the present view's own cast within it (which of its
    /// loads the frame may draw: not kept back for after the submission).
    fn tile_inputs(
        &self,
        c: &Common,
        g: usize,
        (present, ahead, cast): Views<'_>,
        jump: bool,
    ) -> (TileWants, &'static str, TileWants, TileWants) {
        let n = c.map_sizes.len() * g * g;
        let (wants, from) = match (present, self.last_cells.as_ref()) {
            // A detected jump: the present view's cast joined with the
            // last feedback on the materials it sees.
            (Some(p), last) if jump => {
                let (w, h) = p.for_policy();
                let last = last.map(|l| (l.0.as_slice(), l.1.as_slice()));
                let unseen = tiles::policy::UNSEEN;
                let joined = view_change::join_jump_cells((&w, &h), last, g * g, unseen);
                (joined, "both")
            }
            (Some(p), _) => (p.for_policy(), "estimate"),
            (None, Some(l)) => ((l.0.clone(), l.1.clone()), "feedback"),
            (None, None) => ((vec![tiles::policy::UNSEEN; n], vec![0; n]), "none"),
        };
        let cast = cast.map(|c| c.for_policy()).unwrap_or_default();
        (wants, from, ahead.for_policy(), cast)
    }

    /// [`super::Streamer::prepare`] when streaming by tiles: the last frame's cells drive
    /// the tile policy (no feedback yet: nothing but the tails); `views`
    /// `None` where [`Self::plan_ahead`] planned the frame.
    fn prepare_tiles(
        &mut self,
        c: &Common,
        ctx: &Context,
        mem: &GpuMemory,
        set: &TextureSet,
        mut frame: StreamFrame,
        views: Option<Views<'_>>,
    ) -> Result<StreamFrame, GpuError> {
        let g = self.streamer.cells_per_side() as usize;
        let jump = c.jump_overlaps;
        let inputs = views.map(|v| self.tile_inputs(c, g, v, jump));
        let t = &mut self.streamer;
        let tf = match inputs {
            Some((wants, from, ahead, cast)) => {
                frame.wanted_from = from;
                let mut inputs = plan_inputs(&wants, &ahead, &cast);
                let factor = c.cfg.tuning.view.cap_factor as usize;
                inputs.ahead_factor = if c.raise_caps { factor } else { 1 };
                t.prepare(ctx, mem, inputs, false)?
            }
            None => t.prepare(ctx, mem, tiles::PlanInputs::default(), false)?,
        };
        frame.residency_changes = tf.loads + tf.evictions;
        frame.upload_bytes = tf.upload_bytes;
        frame.upload_ms = tf.read_seconds * 1e3;
        frame.plan_ms = tf.plan_seconds * 1e3;
        frame.bind_ms = tf.bind_seconds * 1e3;
        frame.sparse_binds = tf.binds;
        frame.tile_loads = tf.loads;
        frame.tile_wanted_loads = tf.wanted_loads;
        frame.tile_runs = tf.runs;
        frame.stream_wait_ms = tf.wait_seconds * 1e3;
        frame.copy_ms = tf.copy_seconds * 1e3;
        frame.page_ms = tf.page_seconds * 1e3;
        frame.map_ms = tf.map_seconds * 1e3;
        frame.pending_loads = tf.missing.min(u64::from(u32::MAX)) as u32;
        frame.texture_wanted_bytes = tf.wanted_bytes + set.allocated_bytes();
        frame.texture_pool_committed_bytes = mem
            .pool_pressure(set.texture_pool)
            .map_or(0, |p| p.pool_committed_bytes);
        self.drawn_map = t.map().to_vec();
        frame.texture_resident_bytes = self.resident_bytes(set);
        Ok(frame)
    }

    /// The look-ahead's casts for a frame of `view` (a camera cut's when
    /// `camera_cut`) with the coming views `ahead`: the present view alone on
    /// a cut (the feedback shows the old view), the look-ahead, and the
    /// present view's own cast within it (`--tune tiles.cast-present`: every
    /// other frame casts its view too, so that what the last feedback did not
    /// show loads before it is drawn).
    fn cast_views(
        &self,
        c: &Common,
        objects: &[Object],
        view: &View,
        camera_cut: bool,
        ahead: &[View],
    ) -> AheadCasts {
        let present = camera_cut.then(|| self.tile_ahead(c, objects, view, &[], true, 0.0).0);
        let next = if camera_cut { 0.0 } else { NEXT_VIEW_WEIGHT };
        let cast_present = self.streamer.cast_present();
        let (ahead, cast_cells) =
            self.tile_ahead(c, objects, view, ahead, cast_present && !camera_cut, next);
        (present, ahead, cast_cells)
    }

    /// The tile policy's look-ahead: the cells the coming views (`ahead`,
    /// nearest first) will sample, by a CPU ray cast ([`tiles::lookahead`]).
    /// The next frame's view weighs by its pixels times `next` (unless it is
    /// a cut's: a cut loads its own view on its frame); the views 2, 4, 8,
    /// 16... frames ahead, the last, and the first after a camera cut are
    /// kept warm (levels without hits: spare pages only). A view
    /// equal to the last one cast (pose, field of view, height) is not cast
    /// again. With `present`, the
    /// present view is cast first with weight 1 (the pre-fill's first view,
    /// and a cut's own frame, where the feedback shows the old view and this
    /// cast takes its place, so the cut's tiles load before it is drawn).
    ///
    /// Measured on lavapipe (BENCHMARKS.md, "The look-ahead by tiles"):
    /// weighting the views after a cut by their pixels, so that the cut's
    /// view is loaded in the frames before it, took pages the present frames
    /// needed (15-25 dB lost on the frames before each cut) for nothing the
    /// cut frame's own loads did not already give; the next frame's view by
    /// its pixels lifts the frames where the camera brings new surface on
    /// screen (28 -> 42-50 dB) once the cast's levels match the feedback's.
    fn tile_ahead(
        &self,
        c: &Common,
        objects: &[Object],
        view: &View,
        ahead: &[View],
        present: bool,
        next: f32,
    ) -> (
        tiles::lookahead::AheadCells,
        Option<tiles::lookahead::AheadCells>,
    ) {
        let g = self.streamer.cells_per_side();
        let mut cells = tiles::lookahead::AheadCells::new(c.map_sizes.len(), g);
        let mut present_cells = None;
        let views: Vec<View> = std::iter::once(view).chain(ahead).copied().collect();
        for k in tiles::lookahead::plan_casts(&views, present, next) {
            cells.cast(
                objects,
                &views[k.k],
                &c.map_sizes,
                c.cfg.anisotropy.max(1) as f32,
                k.weight,
                k.rays,
            );
            // The present view's cast comes first (`plan_casts`): the cells
            // hold it alone until the next cast.
            if k.k == 0 {
                present_cells = Some(cells.clone());
            }
        }
        (cells, present_cells)
    }
}

impl Residency for Tiled {
    fn kind(&self) -> ResidencyKind {
        if self.streamer.is_atlas() {
            ResidencyKind::Atlas
        } else {
            ResidencyKind::Tiles
        }
    }

    fn feedback_cell_words(&self) -> usize {
        let g = self.streamer.cells_per_side() as usize;
        g * g * 2
    }

    /// The residency map (set 0, binding 3 of the PBR pass).
    fn map_buffer(&self) -> (vk::Buffer, u64) {
        self.streamer.map_buffer()
    }

    /// The frame uniform's `tiles` vector (see [`super::Streamer::tiles_uniform`]).
    fn tiles_uniform(&self, materials: usize) -> [u32; 4] {
        [
            self.streamer.cells_per_side(),
            (materials * super::FEEDBACK_WORDS) as u32,
            self.streamer.margin(),
            u32::from(self.streamer.is_atlas()),
        ]
    }

    /// Bytes of texture images alive now: the set's and the tiles'.
    fn resident_bytes(&self, set: &TextureSet) -> u64 {
        set.allocated_bytes() + self.streamer.bytes()
    }

    /// Takes the cells of the feedback just read (two words a cell).
    fn read_cells(&mut self, words: &[u32]) {
        self.last_cells = Some(tiles::cells_from_feedback(words));
    }

    /// Texture `i`'s row of the overlay's streaming panel: the finest level
    /// with a tile resident, the pages' bytes, and the finest level a cell
    /// wanted.
    fn panel_row(&self, _set: &TextureSet, i: usize, name: String) -> PanelRow {
        let (resident_mip, resident_bytes) = self.streamer.map_residency(i);
        let cells = (self.streamer.cells_per_side() as usize).pow(2);
        let m = i / 3;
        let wanted_mip = self.last_cells.as_ref().and_then(|(w, _)| {
            w.get(m * cells..(m + 1) * cells)?
                .iter()
                .filter(|&&l| l != tiles::policy::UNSEEN)
                .min()
                .map(|&l| u32::from(l))
        });
        PanelRow {
            name,
            resident_mip,
            resident_bytes,
            wanted_mip,
            wanted_bytes: None,
        }
    }

    /// [`super::Streamer::prepare`] by tiles: carries out the plan made after
    /// the last submission, else casts the views (or takes the cast made
    /// then) and plans; returns the frame's figures.
    fn prepare(
        &mut self,
        c: &mut Common,
        ctx: &Context,
        mem: &GpuMemory,
        set: &mut TextureSet,
        objects: &[Object],
        (view, camera_cut, ahead): (&View, bool, &[View]),
        mut frame: StreamFrame,
    ) -> Result<StreamFrame, GpuError> {
        if let Some(wanted_from) = self.early_plan.take() {
            // Planned after the last frame's submission, for this frame's
            // views (the camera path is known ahead): carried out now.
            frame.lookahead_early = true;
            frame.plan_early = true;
            frame.wanted_from = wanted_from;
            return self.prepare_tiles(c, ctx, mem, set, frame, None);
        }
        // On a cut the feedback shows the old view: the present one is
        // cast instead.
        let cast = Instant::now();
        // Cast after the last frame's submission for these very inputs
        // (the camera path is known ahead), else now.
        let cells = match self.pending_cast.take() {
            Some(p) if p.view == *view && p.cut == camera_cut && p.ahead == ahead => {
                frame.lookahead_early = true;
                p.cells
            }
            _ => self.cast_views(c, objects, view, camera_cut, ahead),
        };
        frame.lookahead_ms = cast.elapsed().as_secs_f64() * 1e3;
        let (present, ahead, cast_cells) = cells;
        let views = (present.as_ref(), &ahead, cast_cells.as_ref());
        self.prepare_tiles(c, ctx, mem, set, frame, Some(views))
    }

    /// [`super::Streamer::prefill`] by tiles: no feedback yet, so the ray cast of the
    /// first view (by its pixels) and of the look-ahead's (kept warm) loads,
    /// coarse tiles of what is in view first, round after round (each waited
    /// for) until a round loads nothing or `limit` passes.
    fn prefill(
        &mut self,
        c: &mut Common,
        ctx: &Context,
        mem: &GpuMemory,
        set: &mut TextureSet,
        objects: &[Object],
        (view, ahead): (&View, &[View]),
        limit: Duration,
    ) -> Result<Option<Prefill>, GpuError> {
        let started = Instant::now();
        c.pixels = view.height as f32 * view.height as f32 * view.aspect;
        let (ahead, _) = self.tile_ahead(c, objects, view, ahead, true, NEXT_VIEW_WEIGHT);
        let ahead = ahead.for_policy();
        let mut out = Prefill::start(self.resident_bytes(set));
        let t = &mut self.streamer;
        let n = ahead.0.len();
        let unseen: TileWants = (vec![tiles::policy::UNSEEN; n], vec![0; n]);
        let none: TileWants = Default::default();
        loop {
            let tf = t.prepare(ctx, mem, plan_inputs(&unseen, &ahead, &none), true)?;
            out.rounds += 1;
            out.changes += tf.loads + tf.evictions;
            out.bytes += tf.upload_bytes;
            if tf.loads == 0 {
                break;
            }
            if started.elapsed() >= limit {
                out.end = PrefillEnd::TimeLimit;
                break;
            }
        }
        self.drawn_map = t.map().to_vec();
        out.resident_bytes = self.resident_bytes(set);
        out.peak_bytes = out.peak_bytes.max(out.resident_bytes);
        out.ms = started.elapsed().as_secs_f64() * 1e3;
        Ok(Some(out))
    }

    /// After the frame's submission, before it is waited for: by tiles, the
    /// spare loads [`super::Streamer::prepare`] kept back are bound, read and copied
    /// ([`tiles::TileStreamer::after_submit`]), so the frame never waits for
    /// them; their figures join the frame's.
    fn after_submit(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        f: &mut StreamFrame,
    ) -> Result<(), GpuError> {
        let started = Instant::now();
        let tf = self.streamer.after_submit(ctx, mem)?;
        f.residency_changes += tf.loads;
        f.upload_bytes += tf.upload_bytes;
        f.upload_ms += tf.read_seconds * 1e3;
        f.bind_ms += tf.bind_seconds * 1e3;
        f.sparse_binds += tf.binds;
        f.tile_loads += tf.loads;
        f.tile_late_loads += tf.loads;
        f.copy_ms += tf.copy_seconds * 1e3;
        f.late_ms += started.elapsed().as_secs_f64() * 1e3;
        Ok(())
    }

    /// By tiles, after a frame's submission: casts the look-ahead of the next
    /// frame (`view`, `camera_cut`, `ahead`: what its [`super::Streamer::prepare`] will
    /// be given), which depends on the camera path alone, so that the CPU ray
    /// cast overlaps the GPU's frame instead of delaying the next one. The
    /// next `prepare` uses it where its inputs are these, else casts anew.
    fn cast_ahead(
        &mut self,
        c: &mut Common,
        objects: &[Object],
        (view, camera_cut, ahead): (&View, bool, &[View]),
    ) {
        let started = Instant::now();
        let cells = self.cast_views(c, objects, view, camera_cut, ahead);
        self.pending_cast = Some(PendingCast {
            view: *view,
            cut: camera_cut,
            ahead: ahead.to_vec(),
            cells,
        });
        c.frame.late_ms += started.elapsed().as_secs_f64() * 1e3;
    }

    /// After a frame's submission and [`Self::cast_ahead`], by tiles where
    /// `--tune tiles.plan-early=1`: plans the next frame's tiles from that
    /// cast and the last feedback read (the frame before this one's: this
    /// one is still drawing), and binds them ([`tiles::TileStreamer::plan_ahead`]).
    /// The next [`super::Streamer::prepare`] carries the plan out whatever its views
    /// (the renderer gives it those of the cast). Does nothing without a cast.
    fn plan_ahead(
        &mut self,
        c: &mut Common,
        ctx: &Context,
        mem: &GpuMemory,
    ) -> Result<(), GpuError> {
        let g = self.streamer.cells_per_side() as usize;
        if self.early_plan.is_some() || !self.streamer.plans_early() {
            return Ok(());
        }
        let Some(p) = self.pending_cast.take() else {
            return Ok(());
        };
        let started = Instant::now();
        let (present, ahead, cast) = &p.cells;
        let (wants, from, ahead, cast) =
            self.tile_inputs(c, g, (present.as_ref(), ahead, cast.as_ref()), false);
        self.streamer
            .plan_ahead(ctx, mem, plan_inputs(&wants, &ahead, &cast))?;
        if self.streamer.has_plan() {
            self.early_plan = Some(from);
        }
        c.frame.late_ms += started.elapsed().as_secs_f64() * 1e3;
        Ok(())
    }

    /// The mip deficit of the frame just done: its feedback's cells against
    /// the residency map it was drawn with; 0 before any cells were read (no
    /// feedback: no texture counts as seen, as by levels without wants).
    fn deficit(&self, c: &Common, _set: &TextureSet) -> f64 {
        let materials = c.map_sizes.len();
        let Some((wants, hits)) = self.last_cells.as_ref() else {
            return 0.0;
        };
        let g = self.streamer.cells_per_side() as usize;
        let cells = g * g;
        let (mut sum, mut n) = (0.0, 0.0);
        for m in 0..materials {
            let r = m * cells..(m + 1) * cells;
            // The inner level: what a cell's samples use away from
            // the edges of the region resident around them.
            let map: Vec<u8> = self.drawn_map[r.clone()]
                .iter()
                .map(|&w| tiles::sample::CellLevels::from_word(w).inner)
                .collect();
            let (s, h) = tiles::policy::deficit(&wants[r.clone()], &hits[r], &map);
            sum += s;
            n += h;
        }
        if n > 0.0 {
            sum / n
        } else {
            0.0
        }
    }

    /// Frees the sparse images or atlases, the pages and the staging; the
    /// device must be idle.
    fn destroy(&mut self, ctx: &Context, mem: &GpuMemory, set: &TextureSet) {
        self.streamer.destroy(ctx, mem, set);
    }
}
