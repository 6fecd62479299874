//! The overlay in the frame loops, headless ([`crate::app`]) and windowed
//! ([`crate::window`]): its set-up, its layout before a frame, and its
//! timeline and CPU time after one. Apart from [`crate::overlay`], which
//! knows neither the renderer nor the report.

use crate::cli::Settings;
use crate::frame::{Renderer, ScenePass};
use crate::gpu::{Context, GpuError, GpuMemory};
use crate::overlay::{streaming_info, ExtraAllocations, Overlay};
use crate::report::FrameRecord;

/// Before a frame: lays out the overlay (if `renderer` has one) for `scene`.
pub fn before_frame(
    renderer: &mut Renderer,
    ctx: &Context,
    mem: &GpuMemory,
    scene: &dyn ScenePass,
    budget: u64,
    pixels_per_point: f32,
    input: egui::RawInput,
) -> Result<(), GpuError> {
    let extent = renderer.targets.extent;
    let Some(overlay) = renderer.overlay.as_mut() else {
        return Ok(());
    };
    let streaming = || {
        scene
            .streaming()
            .and_then(|s| s.streaming_panel())
            .map(|panel| streaming_info(&mem.allocator().statistics(), budget, panel))
    };
    overlay.prepare(ctx, extent, pixels_per_point, streaming, input)
}

/// Before the first frame, with `--overlay`: lays out the overlay once and
/// waits for it (the font atlas, a cold snapshot), so that the frames' overlay
/// time is the steady cost; prints what it took.
pub fn warm_up(
    renderer: &mut Renderer,
    ctx: &Context,
    mem: &GpuMemory,
    scene: &dyn ScenePass,
    settings: &Settings,
    pixels_per_point: f32,
) -> Result<(), GpuError> {
    if renderer.overlay.is_none() {
        return Ok(());
    }
    let input = egui::RawInput::default();
    let budget = settings.texture_budget;
    before_frame(renderer, ctx, mem, scene, budget, pixels_per_point, input)?;
    if let Some(overlay) = renderer.overlay.as_ref() {
        println!(
            "overlay: first layout {:.1} ms before the first frame (font atlas, cold snapshot of {} allocations)",
            overlay.cpu_ms,
            mem.allocator().statistics().total.allocation_count
        );
    }
    Ok(())
}

/// After a frame's fence: frees textures, adds the frame to the timeline and
/// the overlay's CPU time to `record`.
pub fn after_frame(renderer: &mut Renderer, mem: &GpuMemory, record: &mut FrameRecord) {
    if let Some(overlay) = renderer.overlay.as_mut() {
        overlay.after_frame();
        overlay.end_frame(
            mem,
            record.gpu_total_ms,
            record.texture_bytes,
            record.texture_budget,
        );
        record.overlay_cpu_ms = Some(overlay.cpu_ms);
        record.overlay_laid_out = Some(overlay.laid_out);
        record.overlay_layout_ms = overlay.layout_ms;
    }
}

/// Headless set-up: `--extra-allocations` into `extra` (kept even on failure, for
/// the caller to free) and, with `--overlay`, the overlay.
pub fn setup(
    renderer: &mut Renderer,
    ctx: &Context,
    mem: &GpuMemory,
    settings: &Settings,
    extra: &mut ExtraAllocations,
) -> Result<(), GpuError> {
    extra.fill(mem, settings.extra_allocations)?;
    if settings.overlay {
        let format = crate::frame::targets::LDR_FORMAT;
        let mut overlay = Overlay::new(ctx, mem, format)?;
        overlay.set_interactive(false);
        renderer.overlay = Some(overlay);
    }
    Ok(())
}
