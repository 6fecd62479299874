//! The streamer's residency seam: how textures are resident, resolved once.
//!
//! A run asks for a [`ResidencyMode`] (`--residency`). What it gets is
//! resolved in two steps: [`ResidencyMode::for_run`], here, before the
//! textures load (the page atlas keeps larger tails, so it must be known
//! then), and `Tiled::start` once they have
//! loaded (whether the device, every map format and the budget take tiles,
//! else levels where `auto` was asked). From then on the streamer holds one
//! `Residency`
//! (whole levels: `levels.rs`; tiles, sparse or in a page atlas:
//! `tiled.rs`), each with its own state, and calls its frame hooks
//! (prepare, record, after submit, frame done, panel, destroy) without
//! asking which it is. Within a residency, policy
//! (what to make resident: [`super::policy`], [`super::tiles::policy`])
//! stays apart from mechanism (how: [`super::mechanism`], the tile
//! streamer's binds and copies).

use std::time::Duration;

use ash::vk;
use material_baker::ktx2::Format;

use super::estimate::View;
use super::{Common, Mode, PanelRow, Prefill, StreamFrame};
use crate::gpu::{Context, GpuError, GpuMemory};
use crate::materials::textures::TextureSet;
use crate::scene::Object;

/// How streaming keeps textures resident (`--residency`: what a run asks for).
///
/// `Auto` is the default: tiles where the device can. On the H200 (4K, 8K BC
/// maps; BENCHMARKS.md, "Inner levels") tiles keep all but 1 of 240 frames at
/// 40 dB PSNR or more at 256 MiB (whole levels: 40 below) and all but 2 with
/// 64 materials at 1 GiB (levels: 30), at a GPU p99 of 1.11x streaming off's
/// at 256 MiB and 1.3-1.5x with 64 materials (levels: 1.0x), where the render
/// thread's streaming work and the sparse binds keep the GPU waiting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ResidencyMode {
    /// The page atlas where the shading is visibility on a bindless device
    /// (resolved before the textures load, [`ResidencyMode::for_run`]), else
    /// tiles where the device has sparse residency (and every texture format
    /// can be sparse), else whole levels.
    #[default]
    Auto,
    /// Tiles; an error where the device can't.
    Tiles,
    /// Whole mip levels (one image per resident range).
    Levels,
    /// Tiles copied into a page atlas, no sparse binds
    /// ([`super::tiles::atlas`]; bindless visibility shading): an error where the
    /// device can't.
    Atlas,
}

impl ResidencyMode {
    /// The request resolved as far as it can be before the textures load:
    /// `Auto` becomes the page atlas where it can run (`bindless`: the device
    /// has the bindless array the visibility shading's compute pass samples
    /// it through, `visibility`: the run shades that way, `emulating`: the
    /// sampling emulation, whose level views take the same elements of the
    /// bindless array, is off); an explicit `Atlas` that can't run is refused
    /// with what to change. Nothing changes with streaming off.
    pub fn for_run(
        self,
        streaming: Mode,
        bindless: bool,
        visibility: bool,
        emulating: bool,
    ) -> Result<Self, String> {
        if streaming != Mode::On {
            return Ok(self);
        }
        let runs = bindless && visibility;
        match self {
            Self::Auto if runs && !emulating => Ok(Self::Atlas),
            Self::Atlas if emulating => Err("--residency atlas and --tune atlas-emulation (a \
                 diagnostic of the sampling with every level resident) share the bindless \
                 array's elements after the textures: drop the --tune, or use --streaming off \
                 or --residency tiles|levels"
                .to_string()),
            Self::Atlas if !runs => Err(format!(
                "--residency atlas samples its page atlas in the visibility shading's bindless \
                 compute pass: {} (use --shading visibility on a device with descriptor indexing, \
                 or --residency tiles|levels)",
                if bindless {
                    "this run shades forward"
                } else {
                    "this device has no bindless texture array with non-uniform indexing"
                }
            )),
            mode => Ok(mode),
        }
    }

    /// Texels a side of the largest level every texture of `formats` keeps
    /// resident as its tail with streaming on: the page atlas tiles only
    /// levels of whole tiles, so the levels below stay in the set's own
    /// images ([`super::tiles::atlas::tail_texels`]).
    pub fn tail_texels(self, formats: impl IntoIterator<Item = Format>) -> u32 {
        match self {
            Self::Atlas => super::tiles::atlas::tail_texels(formats),
            _ => super::TAIL_TEXELS,
        }
    }
}

/// The residency a streamer runs, as the report names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResidencyKind {
    /// Whole levels (also every run with streaming off).
    Levels,
    /// Tiles bound to sparse images.
    Tiles,
    /// Tiles copied into a page atlas.
    Atlas,
}

impl ResidencyKind {
    /// `levels`, `tiles` or `atlas`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Levels => "levels",
            Self::Tiles => "tiles",
            Self::Atlas => "atlas",
        }
    }

    /// Whether textures are sampled by tiles (sparse or from a page atlas):
    /// their levels are clamped per cell of the residency map.
    pub fn tiled(self) -> bool {
        self != Self::Levels
    }
}

/// How the streamer keeps textures resident: the frame loop's hooks, each
/// residency with its own state behind them ([`Levels`](super::levels::Levels),
/// [`Tiled`](super::tiled::Tiled)). The streamer holds one, chosen once when
/// it is made (`Tiled::start`), and
/// asks nothing else about which it is.
pub(super) trait Residency {
    /// What runs.
    fn kind(&self) -> ResidencyKind;

    /// 32-bit words of feedback per material after the per-material words:
    /// the residency map's cells (two words a cell; none by levels).
    fn feedback_cell_words(&self) -> usize {
        0
    }

    /// Takes the cells of the feedback just read ([`Self::feedback_cell_words`]
    /// a material).
    fn read_cells(&mut self, _words: &[u32]) {}

    /// The tile residency map (set 0, binding 3 of the PBR pass; a
    /// placeholder nothing reads by levels).
    fn map_buffer(&self) -> (vk::Buffer, u64);

    /// The frame uniform's `tiles` vector ([`super::Streamer::tiles_uniform`];
    /// zeros by levels) for `materials`.
    fn tiles_uniform(&self, _materials: usize) -> [u32; 4] {
        [0; 4]
    }

    /// Bytes of texture images alive now.
    fn resident_bytes(&self, set: &TextureSet) -> u64;

    /// Texture `i`'s row of the overlay's streaming panel, named `name`.
    fn panel_row(&self, set: &TextureSet, i: usize, name: String) -> PanelRow;

    /// Before a frame is recorded (the previous one is done): decides and
    /// starts the frame's changes for `views` (the view, whether it is a
    /// camera cut's, the coming views); returns `frame` with its figures.
    #[allow(clippy::too_many_arguments)]
    fn prepare(
        &mut self,
        c: &mut Common,
        ctx: &Context,
        mem: &GpuMemory,
        set: &mut TextureSet,
        objects: &[Object],
        views: (&View, bool, &[View]),
        frame: StreamFrame,
    ) -> Result<StreamFrame, GpuError>;

    /// Before the first frame: loads what the first `views` (the view, the
    /// coming views) want, waited for, until it settles or `limit` passes;
    /// `None` where nothing streams.
    #[allow(clippy::too_many_arguments)]
    fn prefill(
        &mut self,
        c: &mut Common,
        ctx: &Context,
        mem: &GpuMemory,
        set: &mut TextureSet,
        objects: &[Object],
        views: (&View, &[View]),
        limit: Duration,
    ) -> Result<Option<Prefill>, GpuError>;

    /// Records what the frame's command buffer carries for residency after
    /// the scene pass.
    ///
    /// # Safety
    /// As [`super::Streamer::record_after_pass`].
    unsafe fn record(&self, _cmd: vk::CommandBuffer) {}

    /// After the frame's submission, before it is waited for: work that
    /// overlaps the GPU's frame; its figures join `frame`'s.
    fn after_submit(
        &mut self,
        _ctx: &Context,
        _mem: &GpuMemory,
        _frame: &mut StreamFrame,
    ) -> Result<(), GpuError> {
        Ok(())
    }

    /// After a submission: casts the next frame's look-ahead (`views` as its
    /// `prepare` will get them) while the GPU draws.
    fn cast_ahead(&mut self, _c: &mut Common, _objects: &[Object], _views: (&View, bool, &[View])) {
    }

    /// After a submission and [`Self::cast_ahead`]: plans the next frame from
    /// that cast.
    fn plan_ahead(
        &mut self,
        _c: &mut Common,
        _ctx: &Context,
        _mem: &GpuMemory,
    ) -> Result<(), GpuError> {
        Ok(())
    }

    /// After the frame's fence: ends what the frame carried (a
    /// defragmentation pass), counted in `frame`.
    fn frame_done(
        &mut self,
        _ctx: &Context,
        _mem: &GpuMemory,
        _set: &TextureSet,
        _frame: &mut StreamFrame,
    ) -> Result<(), GpuError> {
        Ok(())
    }

    /// The mip deficit of the frame just done, its feedback read.
    fn deficit(&self, c: &Common, set: &TextureSet) -> f64;

    /// Frees what the residency made; the device must be idle.
    fn destroy(&mut self, ctx: &Context, mem: &GpuMemory, set: &TextureSet);
}
