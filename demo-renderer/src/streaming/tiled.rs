//! Residency by tiles (sparse binds or a page atlas): the look-ahead's ray
//! casts, the tile policy's inputs, and the [`TileStreamer`](super::tiles::TileStreamer)
//! driven from the frame loop.

use std::time::{Duration, Instant};

use super::estimate::View;
use super::{tiles, Prefill, PrefillEnd, StreamFrame, Streamer, NEXT_VIEW_WEIGHT};
use crate::gpu::{Context, GpuError, GpuMemory};
use crate::materials::textures::TextureSet;
use crate::scene::Object;

/// What [`Streamer::cast_views`] gives: the present view's cast on a cut, the
/// look-ahead, and the present view's own cast within it.
pub(super) type AheadCasts = (
    Option<tiles::lookahead::AheadCells>,
    tiles::lookahead::AheadCells,
    Option<tiles::lookahead::AheadCells>,
);

/// [`AheadCasts`] borrowed.
pub(super) type Views<'a> = (
    Option<&'a tiles::lookahead::AheadCells>,
    &'a tiles::lookahead::AheadCells,
    Option<&'a tiles::lookahead::AheadCells>,
);

/// Per cell of every material: the tile policy's wanted levels and hits.
pub(super) type TileWants = (Vec<u8>, Vec<u32>);

/// [`Streamer::tile_inputs`]'s cells as the tile streamer takes them.
pub(super) fn plan_inputs<'a>(
    (wants, hits): &'a TileWants,
    ahead: &'a TileWants,
    cast: &'a TileWants,
) -> tiles::PlanInputs<'a> {
    tiles::PlanInputs {
        wants,
        hits,
        ahead: (&ahead.0, &ahead.1),
        cast: (&cast.0, &cast.1),
    }
}

/// A look-ahead cast made before the frame that uses it
/// ([`Streamer::cast_ahead`]), with the inputs it was cast from.
pub(super) struct PendingCast {
    pub(super) view: View,
    pub(super) cut: bool,
    pub(super) ahead: Vec<View>,
    pub(super) cells: AheadCasts,
}

impl Streamer {
    /// The tile policy's inputs from a frame's casts: the wanted levels and
    /// hits (the present view's cast on a cut, else the last feedback's
    /// cells, else nothing: the tails alone) and where they came from, the
    /// look-ahead's, and the present view's own cast within it (which of its
    /// loads the frame may draw: not kept back for after the submission).
    pub(super) fn tile_inputs(
        &self,
        g: usize,
        (present, ahead, cast): Views<'_>,
    ) -> (TileWants, &'static str, TileWants, TileWants) {
        let n = self.map_sizes.len() * g * g;
        let (wants, from) = match (present, self.last_cells.as_ref()) {
            (Some(p), _) => (p.for_policy(), "estimate"),
            (None, Some(c)) => ((c.0.clone(), c.1.clone()), "feedback"),
            (None, None) => ((vec![tiles::policy::UNSEEN; n], vec![0; n]), "none"),
        };
        let cast = cast.map(|c| c.for_policy()).unwrap_or_default();
        (wants, from, ahead.for_policy(), cast)
    }

    /// [`Self::prepare`] when streaming by tiles: the last frame's cells drive
    /// the tile policy (no feedback yet: nothing but the tails); `views`
    /// `None` where [`Self::plan_ahead`] planned the frame.
    pub(super) fn prepare_tiles(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        set: &TextureSet,
        mut frame: StreamFrame,
        views: Option<Views<'_>>,
    ) -> Result<(), GpuError> {
        let Some(g) = self.tiles.as_ref().map(|t| t.cells_per_side() as usize) else {
            return Ok(());
        };
        let inputs = views.map(|v| self.tile_inputs(g, v));
        let Some(t) = self.tiles.as_mut() else {
            return Ok(());
        };
        let tf = match inputs {
            Some((wants, from, ahead, cast)) => {
                frame.wanted_from = from;
                t.prepare(ctx, mem, plan_inputs(&wants, &ahead, &cast), false)?
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
        self.frame = frame;
        self.unread = true;
        self.frames_prepared += 1;
        Ok(())
    }

    /// After the frame's submission, before it is waited for: by tiles, the
    /// spare loads [`Self::prepare`] kept back are bound, read and copied
    /// ([`tiles::TileStreamer::after_submit`]), so the frame never waits for
    /// them; their figures join the frame's.
    pub fn after_submit(&mut self, ctx: &Context, mem: &GpuMemory) -> Result<(), GpuError> {
        let Some(t) = self.tiles.as_mut() else {
            return Ok(());
        };
        let started = Instant::now();
        let tf = t.after_submit(ctx, mem)?;
        let f = &mut self.frame;
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

    /// After a frame's submission and [`Self::cast_ahead`], by tiles where
    /// [`tiles::PLAN_EARLY_ENV`]`=1`: plans the next frame's tiles from that
    /// cast and the last feedback read (the frame before this one's: this
    /// one is still drawing), and binds them ([`tiles::TileStreamer::plan_ahead`]).
    /// The next [`Self::prepare`] carries the plan out whatever its views
    /// (the renderer gives it those of the cast). Does nothing without a cast.
    pub fn plan_ahead(&mut self, ctx: &Context, mem: &GpuMemory) -> Result<(), GpuError> {
        let Some(g) = self.tiles.as_ref().map(|t| t.cells_per_side() as usize) else {
            return Ok(());
        };
        if self.early_plan.is_some() || !self.tiles.as_ref().is_some_and(|t| t.plans_early()) {
            return Ok(());
        }
        let Some(p) = self.pending_cast.take() else {
            return Ok(());
        };
        let started = Instant::now();
        let (present, ahead, cast) = &p.cells;
        let (wants, from, ahead, cast) =
            self.tile_inputs(g, (present.as_ref(), ahead, cast.as_ref()));
        if let Some(t) = self.tiles.as_mut() {
            t.plan_ahead(ctx, mem, plan_inputs(&wants, &ahead, &cast))?;
            if t.has_plan() {
                self.early_plan = Some(from);
            }
        }
        self.frame.late_ms += started.elapsed().as_secs_f64() * 1e3;
        Ok(())
    }

    /// The look-ahead's casts for a frame of `view` (a camera cut's when
    /// `camera_cut`) with the coming views `ahead`: the present view alone on
    /// a cut (the feedback shows the old view), the look-ahead, and the
    /// present view's own cast within it ([`tiles::CAST_PRESENT_ENV`]: every
    /// other frame casts its view too, so that what the last feedback did not
    /// show loads before it is drawn).
    pub(super) fn cast_views(
        &self,
        objects: &[Object],
        view: &View,
        camera_cut: bool,
        ahead: &[View],
    ) -> AheadCasts {
        let present = camera_cut.then(|| self.tile_ahead(objects, view, &[], true, 0.0).0);
        let next = if camera_cut { 0.0 } else { NEXT_VIEW_WEIGHT };
        let cast_present = self.tiles.as_ref().is_some_and(|t| t.cast_present());
        let (ahead, cast_cells) =
            self.tile_ahead(objects, view, ahead, cast_present && !camera_cut, next);
        (present, ahead, cast_cells)
    }

    /// By tiles, after a frame's submission: casts the look-ahead of the next
    /// frame (`view`, `camera_cut`, `ahead`: what its [`Self::prepare`] will
    /// be given), which depends on the camera path alone, so that the CPU ray
    /// cast overlaps the GPU's frame instead of delaying the next one. The
    /// next `prepare` uses it where its inputs are these, else casts anew.
    pub fn cast_ahead(
        &mut self,
        objects: &[Object],
        view: &View,
        camera_cut: bool,
        ahead: &[View],
    ) {
        if self.tiles.is_none() {
            return;
        }
        let started = Instant::now();
        let cells = self.cast_views(objects, view, camera_cut, ahead);
        self.pending_cast = Some(PendingCast {
            view: *view,
            cut: camera_cut,
            ahead: ahead.to_vec(),
            cells,
        });
        self.frame.late_ms += started.elapsed().as_secs_f64() * 1e3;
    }

    /// The tile policy's look-ahead: the cells the coming views (`ahead`,
    /// nearest first) will sample, by a CPU ray cast ([`tiles::lookahead`]).
    /// The next frame's view weighs by its pixels times `next` (unless it is
    /// a cut's: a cut loads its own view on its frame); the views 2, 4, 8,
    /// 16... frames ahead, the last, and the first after a camera cut are
    /// kept warm (levels without hits: spare pages only). A pose
    /// equal to the last one cast is not cast again. With `present`, the
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
    pub(super) fn tile_ahead(
        &self,
        objects: &[Object],
        view: &View,
        ahead: &[View],
        present: bool,
        next: f32,
    ) -> (
        tiles::lookahead::AheadCells,
        Option<tiles::lookahead::AheadCells>,
    ) {
        let g = self.tiles.as_ref().map_or(1, |t| t.cells_per_side());
        let mut cells = tiles::lookahead::AheadCells::new(self.map_sizes.len(), g);
        let mut present_cells = None;
        let views: Vec<View> = std::iter::once(view).chain(ahead).copied().collect();
        for c in tiles::lookahead::plan_casts(&views, present, next) {
            cells.cast(
                objects,
                &views[c.k],
                &self.map_sizes,
                self.cfg.anisotropy.max(1) as f32,
                c.weight,
                c.rays,
            );
            // The present view's cast comes first (`plan_casts`): the cells
            // hold it alone until the next cast.
            if c.k == 0 {
                present_cells = Some(cells.clone());
            }
        }
        (cells, present_cells)
    }

    /// [`Self::prefill`] by tiles: no feedback yet, so the ray cast of the
    /// first view (by its pixels) and of the look-ahead's (kept warm) loads,
    /// coarse tiles of what is in view first, round after round (each waited
    /// for) until a round loads nothing or `limit` passes.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn prefill_tiles(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        set: &TextureSet,
        objects: &[Object],
        view: &View,
        ahead: &[View],
        limit: Duration,
    ) -> Result<Option<Prefill>, GpuError> {
        let started = Instant::now();
        self.pixels = view.height as f32 * view.height as f32 * view.aspect;
        let (ahead, _) = self.tile_ahead(objects, view, ahead, true, NEXT_VIEW_WEIGHT);
        let ahead = ahead.for_policy();
        let mut out = Prefill::start(self.resident_bytes(set));
        let Some(t) = self.tiles.as_mut() else {
            return Ok(None);
        };
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
}
