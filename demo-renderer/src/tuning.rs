//! The demo's tuning: the measured knobs and diagnostics of the product path,
//! typed, with their defaults in one place ([`Tuning::default`]).
//!
//! A run sets them with `--tune KEY=VALUE` (repeatable; [`Tuning::set`]
//! lists the keys); tests and benchmarks pass them the same way. No
//! environment variable changes what the demo does.

/// Loads per frame of the margin and the ring (tiles a present cell scores
/// but does not want) at most, unless [`TileTuning::max_ring`] says otherwise: a
/// per-frame cap on speculative operations (256 pages of 64 KiB: 16 MiB), so
/// that they do not stretch the frame. On the H200 with 64 materials at 1
/// GiB it took the GPU frame time's p99 from 1.3-1.5x streaming off's to
/// 1.08-1.10x, with every frame still at 40 dB or more (BENCHMARKS.md).
pub const DEFAULT_MAX_RING: usize = 256;

/// [`TileTuning::spare_hysteresis`]'s default for sparse tiles
/// ([`crate::streaming::tiles::policy::TileInput::spare_hysteresis`]): every
/// load is a sparse bind, and at 2 the spare loads displaced each other on
/// most frames (docs/experiments/tiles.md, *Hysteresis for spare loads*).
pub const SPARE_HYSTERESIS: u64 = 4;

/// [`TileTuning::spare_hysteresis`]'s default for the page atlas, whose loads
/// are copies and page-table words, no binds (as its look-ahead share is
/// larger, [`ATLAS_AHEAD_SHARE`](crate::streaming::tiles::ATLAS_AHEAD_SHARE)):
/// the tiles the present view's cast and the next frame's view bring
/// displace those of the view a frame old sooner. On lavapipe (320x180,
/// 512-texel maps, 240 frames) 64 materials at 10.5 MiB went from 4 frames
/// below 38 dB to 1, and 16 materials at 8 MiB from a 42.5 to a 45.0 dB
/// minimum (docs/experiments/page-atlas.md, *64 materials at the budget of
/// 16*).
pub const ATLAS_SPARE_HYSTERESIS: u64 = 2;

/// Which spare loads wait for the frame's submission (`--tune tiles.late-spare`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LateSpare {
    /// None: every load before the submission.
    None,
    /// Those only the coming views want ([`LoadKind::Ahead`](crate::streaming::tiles::policy::LoadKind::Ahead)): the frame
    /// wants none of them (on lavapipe it draws the same; on the H200 a few
    /// frames above 50 dB differ).
    Future,
    /// Every spare load (the look-ahead's, the margin's, the ring's).
    All,
}

impl LateSpare {
    /// Without `--tune tiles.late-spare`.
    pub const DEFAULT: Self = Self::Future;
}

/// The tile streamer's knobs (`--tune tiles.*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileTuning {
    /// A diagnostic: `--tune tiles.freeze-after=N` stops every change of
    /// residency (no plan, bind, read or copy) after `N` frames (at 0, the
    /// pre-fill too: the mip tails alone), so frame times with resident tiles can
    /// be told apart from the cost of changing them.
    pub freeze_after: Option<u64>,
    /// A diagnostic: `--tune tiles.ahead-share=N` caps the tiles loaded
    /// for the coming views alone (not the present view's feedback) at a frame's
    /// loads / `N` (default [`TILES_AHEAD_SHARE`](crate::streaming::tiles::TILES_AHEAD_SHARE) for sparse tiles,
    /// [`ATLAS_AHEAD_SHARE`](crate::streaming::tiles::ATLAS_AHEAD_SHARE) for the page atlas).
    pub ahead_share: Option<usize>,
    /// A diagnostic: `--tune tiles.max-spare=N` caps the loads per frame of
    /// tiles the present view does not want (the look-ahead's, the margin of one
    /// level finer, the ring around a wanted region) at `N` (default: no cap
    /// beyond the look-ahead's).
    pub max_spare: usize,
    /// A diagnostic: `--tune tiles.max-ring=N` caps, among those, the loads
    /// per frame of the margin and the ring (tiles a present cell scores but does
    /// not want) at `N`, leaving the look-ahead's to their own cap (default:
    /// [`DEFAULT_MAX_RING`]; a large `N` for none). With 64 materials the cap of
    /// `--tune tiles.max-spare` met the p99 but lost the refill after a cut, which the
    /// look-ahead's prefetch of the cut's view gave; this one keeps that.
    pub max_ring: usize,
    /// `--tune tiles.spare-hysteresis=N` (2 to 16): a spare load (a tile no
    /// present cell wants) displaces a resident tile only when it scores more than
    /// `N` times as much ([`policy::TileInput::spare_hysteresis`](crate::streaming::tiles::policy::TileInput::spare_hysteresis); default
    /// [`SPARE_HYSTERESIS`] for sparse tiles, [`ATLAS_SPARE_HYSTERESIS`] for
    /// the page atlas).
    pub spare_hysteresis: Option<u64>,
    /// `--tune tiles.evict-by-pages=0`: the plan picks the evictions among
    /// tiles that score nothing by level and index alone, not by stretches of
    /// adjacent pages ([`policy::choose_evictions`](crate::streaming::tiles::policy::choose_evictions)); for comparison.
    pub evict_by_pages: bool,
    /// A diagnostic: `--tune tiles.cast-present=0` stops casting the
    /// present view into the look-ahead on frames other than a camera cut's.
    /// By default every frame casts it (by its pixels, weight 1): the tiles that
    /// the last frame's feedback did not show (surface the camera brings on
    /// screen) load before the frame that draws them, within the look-ahead's
    /// cap. On the H200 (4K, 8K maps) it took the frames below 40 dB from 1 to 0
    /// at 256 MiB and from 2 to 0 with 64 materials at 1 GiB (BENCHMARKS.md).
    pub cast_present: bool,
    /// A check: `--tune tiles.reversed-pages=1` gives the loads their pages
    /// in descending memory order instead of [`pages::assign`](crate::streaming::tiles::pages::assign)'s, so that tiles
    /// land on other memory and stale bindings show other texels.
    /// The plans stay the same; a frame that changes with it sampled a tile the
    /// residency map calls absent (`tests/tiles.rs` compares the two).
    pub reversed_pages: bool,
    /// `--tune tiles.late-spare=future|all|0`: which spare loads (tiles no
    /// present cell wants; most of a frame's loads) wait for the frame's
    /// submission: `future` (those only the coming views want: not the present
    /// view's own cast, [`LoadKind::Cast`](crate::streaming::tiles::policy::LoadKind::Cast)), `all` (the margin's, the ring's and
    /// the present cast's too) or none (`0`: every load before the submission).
    /// Those take their pages in [`TileStreamer::prepare`](crate::streaming::tiles::TileStreamer::prepare),
    /// inside the budget, and are bound, read and copied in
    /// [`TileStreamer::after_submit`](crate::streaming::tiles::TileStreamer::after_submit), while the GPU draws the frame: resident
    /// from the next frame on. On the H200 the frame's submission waited on
    /// the queue for every bind before it (about 31-35 us per bind region,
    /// BENCHMARKS.md), and the reads came before it too. The default is
    /// [`LateSpare::DEFAULT`](crate::streaming::tiles::LateSpare::DEFAULT).
    pub late_spare: LateSpare,
    /// `--tune tiles.plan-early=1`: each frame's tile plan (evictions,
    /// pages, binds) is made after the last frame's submission
    /// ([`TileStreamer::plan_ahead`](crate::streaming::tiles::TileStreamer::plan_ahead)) instead of in [`TileStreamer::prepare`](crate::streaming::tiles::TileStreamer::prepare),
    /// after the renderer waited for the last frame (the default). Measured on
    /// the H200 at 256 MiB (BENCHMARKS.md): the frame period 17.2-18.5 ->
    /// 14.7-16.0 ms, but the plan then reads the feedback of the frame before
    /// the last, and 3 frames fell below 40 dB (minimum 40.8 -> 38.4): off by
    /// default.
    pub plan_early: bool,
    /// `tiles.pread=0|1`: tiles are read with `pread` instead of from a
    /// mapping of the file. Default: off.
    pub pread: bool,
}

impl Default for TileTuning {
    fn default() -> Self {
        Self {
            freeze_after: None,
            ahead_share: None,
            max_spare: usize::MAX,
            max_ring: DEFAULT_MAX_RING,
            spare_hysteresis: None,
            evict_by_pages: true,
            cast_present: true,
            reversed_pages: false,
            late_spare: LateSpare::DEFAULT,
            plan_early: false,
            pread: false,
        }
    }
}

/// How abrupt view changes are found and answered (`--tune view.*`;
/// [`crate::streaming::view_change`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ViewTuning {
    /// `view.respond=0|1`: a detected change is answered as an announced cut
    /// is (default on); off, it is only reported (the streamer as before
    /// detection, for comparison).
    pub respond: bool,
    /// `view.jump-step=UNITS`: an eye step longer than this in one frame is
    /// a jump. Default the motion prediction's
    /// [`JUMP_STEP`](crate::camera::predict::JUMP_STEP) (1.5 gallery units: a
    /// walk steps 0.07-0.13 a frame in the shipped recorded paths, the
    /// script's fastest flight 1.9 over a few frames, objects stand 3.2
    /// apart; the shipped paths' teleports step 5.8-10.9).
    pub jump_step: f32,
    /// `view.jump-turn=DEGREES`: a turn of the view direction wider than
    /// this in one frame is a jump. Default 12 (a quarter of the script's
    /// vertical field of view: about a sixth of a 16:9 frame's width comes
    /// new on screen; the shipped paths turn at most 11 a frame while
    /// walking, and 13-90 in their swings and flicks).
    pub jump_turn_deg: f32,
    /// `view.jump-fov=DEGREES`: a change of the vertical field of view
    /// larger than this in one frame is a jump. Default 5 (`skim.jsonl`
    /// widens by 0.9 a frame).
    pub jump_fov_deg: f32,
    /// `view.feedback-share=F` (0 to 1): the feedback of a frame whose
    /// samples want, on more than this share, a level finer than the frame
    /// before wanted on their material is a feedback change
    /// ([`crate::streaming::view_change::fresh_share`]). Default 0.25.
    pub feedback_share: f64,
    /// `view.cap-factor=N` (1 to 64): a frame answering a view change (an
    /// announced cut, a jump, or the frame after a feedback change) may
    /// start `N` times the per-frame replacements and upload bytes by
    /// levels (`--upload-budget`, 16 replacements), and load `N` times the
    /// look-ahead's share by tiles. Default 4.
    pub cap_factor: u32,
    /// `view.guard=F` (1 to 2): a camera without a future also prefetches
    /// its present pose seen through a field of view `F` times as wide (the
    /// tangent of its half-angle; the frame's height scaled alike, so a
    /// texel's size on screen stays): a guard band for what a step or a turn
    /// brings in at the frame's edges before its feedback can ask for it.
    /// Default 1 (off): on lavapipe 1.25 mended one frame of the walkthrough
    /// path and marred another, 1.1 mended two of 30 paths' worst frames; on
    /// the H200 1.1 moved no seed's worst frame by more than 0.2 dB
    /// (docs/experiments/camera-paths.md).
    pub guard: f32,
}

impl Default for ViewTuning {
    fn default() -> Self {
        Self {
            respond: true,
            jump_step: crate::camera::predict::JUMP_STEP,
            jump_turn_deg: 12.0,
            jump_fov_deg: 5.0,
            feedback_share: 0.25,
            cap_factor: 4,
            guard: 1.0,
        }
    }
}

/// Everything `--tune` sets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tuning {
    /// The tile streamer's.
    pub tiles: TileTuning,
    /// Abrupt view changes' detection and answer.
    pub view: ViewTuning,
    /// `fail-reads=TEXT`, a check: level reads of files whose path contains
    /// `TEXT` fail (the fallback of a level that cannot be read). Default: none.
    pub fail_reads: Option<String>,
    /// A diagnostic: `--tune atlas-emulation=1` (bindless devices with
    /// non-uniform indexing) samples every map the way a software virtual texture's
    /// page atlas would be: two samples blended by the level of detail's fraction,
    /// each from a view of a single level with the pixel's gradients (the hardware
    /// filters, anisotropy included, within that level alone), instead of the
    /// sampler's own trilinear filtering over the mip chain. The level of detail
    /// is the specification's anisotropic formula in the visibility shading's
    /// compute pass, the sampler's own (`textureQueryLod`) in the forward pass;
    /// `=2` gives the compute pass's coarser sample gradients twice as long; `=3`
    /// takes the compute pass's level of detail from the level probe
    /// ([`PROBE_SIZE`](crate::materials::textures::PROBE_SIZE)), the sampler's own. Run
    /// with every level resident (`--streaming off` and a budget the set fits),
    /// against the ordinary render, it measures what that sampling alone costs in
    /// PSNR: the ceiling a page atlas could reach (BENCHMARKS.md).
    pub atlas_emulation: Option<u32>,
    /// `idle-ms=N`, a diagnostic: the GPU is left idle for `N` ms after each
    /// headless frame. Default: none.
    pub idle_ms: Option<f64>,
    /// `upload-split=0|1`, a check: the transfer path's two submissions on
    /// the graphics queue where there is no transfer queue. Default: off.
    pub upload_split: bool,
}

/// Why a `--tune` item was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--tune {item}: {why}")]
pub struct TuneError {
    /// The item as given.
    pub item: String,
    /// What was wrong and what is accepted.
    pub why: String,
}

fn count(v: &str) -> Result<usize, String> {
    v.parse()
        .map_err(|_| format!("'{v}' is not a count (a whole number, 0 or more)"))
}

fn positive(v: &str) -> Result<f32, String> {
    match v.parse::<f32>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("'{v}' is not a number above 0")),
    }
}

fn switch(v: &str) -> Result<bool, String> {
    match v {
        "1" | "on" => Ok(true),
        "0" | "off" => Ok(false),
        _ => Err(format!("'{v}' is not 0, 1, on or off")),
    }
}

impl Tuning {
    /// The keys [`Self::set`] takes, for the help text.
    pub const KEYS: &'static str = "tiles.freeze-after, tiles.ahead-share, tiles.max-spare, \
        tiles.max-ring, tiles.spare-hysteresis, tiles.evict-by-pages, tiles.cast-present, \
        tiles.reversed-pages, tiles.late-spare, tiles.plan-early, tiles.pread, view.respond, \
        view.jump-step, view.jump-turn, view.jump-fov, view.feedback-share, view.cap-factor, view.guard, \
        fail-reads, atlas-emulation, idle-ms, upload-split";

    /// Sets one `KEY=VALUE` item (see the fields for the keys and values).
    pub fn set(&mut self, item: &str) -> Result<(), TuneError> {
        let err = |why: String| TuneError {
            item: item.to_string(),
            why,
        };
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| err("not KEY=VALUE".to_string()))?;
        let v = value.trim();
        let t = &mut self.tiles;
        match key.trim() {
            "tiles.freeze-after" => t.freeze_after = Some(count(v).map_err(err)? as u64),
            "tiles.ahead-share" => match count(v).map_err(err)? {
                0 => return Err(err("the share is 1 or more".to_string())),
                n => t.ahead_share = Some(n),
            },
            "tiles.max-spare" => t.max_spare = count(v).map_err(err)?,
            "tiles.max-ring" => t.max_ring = count(v).map_err(err)?,
            "tiles.spare-hysteresis" => {
                t.spare_hysteresis = Some((count(v).map_err(err)? as u64).clamp(2, 16))
            }
            "tiles.evict-by-pages" => t.evict_by_pages = switch(v).map_err(err)?,
            "tiles.cast-present" => t.cast_present = switch(v).map_err(err)?,
            "tiles.reversed-pages" => t.reversed_pages = switch(v).map_err(err)?,
            "tiles.late-spare" => {
                t.late_spare = match v {
                    "0" | "none" => LateSpare::None,
                    "future" => LateSpare::Future,
                    "1" | "all" => LateSpare::All,
                    _ => return Err(err(format!("'{v}' is not none, future or all"))),
                }
            }
            "tiles.plan-early" => t.plan_early = switch(v).map_err(err)?,
            "tiles.pread" => t.pread = switch(v).map_err(err)?,
            "view.respond" => self.view.respond = switch(v).map_err(err)?,
            "view.jump-step" => self.view.jump_step = positive(v).map_err(err)?,
            "view.jump-turn" => self.view.jump_turn_deg = positive(v).map_err(err)?,
            "view.jump-fov" => self.view.jump_fov_deg = positive(v).map_err(err)?,
            "view.feedback-share" => match v.parse::<f64>() {
                Ok(f) if (0.0..=1.0).contains(&f) => self.view.feedback_share = f,
                _ => return Err(err(format!("'{v}' is not a share from 0 to 1"))),
            },
            "view.guard" => match v.parse::<f32>() {
                Ok(f) if (1.0..=2.0).contains(&f) => self.view.guard = f,
                _ => return Err(err(format!("'{v}' is not a factor from 1 to 2"))),
            },
            "view.cap-factor" => match count(v).map_err(err)? {
                n @ 1..=64 => self.view.cap_factor = n as u32,
                _ => return Err(err("the factor is 1 to 64".to_string())),
            },
            "fail-reads" if !v.is_empty() => self.fail_reads = Some(v.to_string()),
            "fail-reads" => return Err(err("the text to match is empty".to_string())),
            "atlas-emulation" => match v {
                "1" | "2" | "3" => self.atlas_emulation = v.parse().ok(),
                _ => return Err(err(format!("'{v}' is not 1, 2 or 3"))),
            },
            "idle-ms" => match v.parse::<f64>() {
                Ok(ms) if ms.is_finite() && ms >= 0.0 => self.idle_ms = (ms > 0.0).then_some(ms),
                _ => return Err(err(format!("'{v}' is not a number of milliseconds"))),
            },
            "upload-split" => self.upload_split = switch(v).map_err(err)?,
            k => return Err(err(format!("no key '{k}'; the keys: {}", Self::KEYS))),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_measured_ones() {
        let t = Tuning::default();
        assert_eq!(t.tiles.max_ring, DEFAULT_MAX_RING);
        assert_eq!(t.view, ViewTuning::default());
        assert!(t.view.respond && t.view.cap_factor > 1);
        assert_eq!(t.tiles.late_spare, LateSpare::DEFAULT);
        assert!(t.tiles.cast_present && t.tiles.evict_by_pages);
        assert!(!t.tiles.plan_early && !t.tiles.reversed_pages && !t.upload_split);
        assert_eq!(
            (t.fail_reads, t.atlas_emulation, t.idle_ms),
            (None, None, None)
        );
    }

    #[test]
    fn items_set_their_fields() {
        let mut t = Tuning::default();
        for item in [
            "tiles.max-ring=64",
            "tiles.late-spare=all",
            "tiles.plan-early=1",
            "tiles.spare-hysteresis=40",
            "fail-reads=albedo",
            "atlas-emulation=2",
            "tiles.freeze-after=0",
            "view.jump-turn=20",
            "view.feedback-share=0.5",
            "view.cap-factor=2",
            "view.respond=0",
            "view.guard=1.25",
        ] {
            t.set(item).unwrap();
        }
        assert_eq!(t.tiles.max_ring, 64);
        assert_eq!(t.tiles.late_spare, LateSpare::All);
        assert!(t.tiles.plan_early);
        assert_eq!(t.tiles.spare_hysteresis, Some(16));
        assert_eq!(t.fail_reads.as_deref(), Some("albedo"));
        assert_eq!(t.atlas_emulation, Some(2));
        assert_eq!(t.tiles.freeze_after, Some(0));
        assert_eq!(t.view.jump_turn_deg, 20.0);
        assert_eq!(t.view.feedback_share, 0.5);
        assert_eq!((t.view.cap_factor, t.view.respond), (2, false));
        assert_eq!(t.view.guard, 1.25);
    }

    #[test]
    fn bad_items_say_what_was_wrong() {
        let mut t = Tuning::default();
        for (item, says) in [
            ("tiles.max-ring", "KEY=VALUE"),
            ("tiles.max-ring=-1", "not a count"),
            ("tiles.ahead-share=0", "1 or more"),
            ("tiles.late-spare=some", "none, future or all"),
            ("atlas-emulation=4", "1, 2 or 3"),
            ("fail-reads=", "empty"),
            ("tiles.colour=1", "no key"),
            ("view.jump-step=0", "above 0"),
            ("view.feedback-share=2", "from 0 to 1"),
            ("view.cap-factor=0", "1 to 64"),
            ("view.guard=0.5", "from 1 to 2"),
            ("view.guard=wide", "from 1 to 2"),
        ] {
            let e = t.set(item).unwrap_err();
            assert!(e.to_string().contains(says), "{item}: {e}");
        }
        assert_eq!(t, Tuning::default());
    }
}
