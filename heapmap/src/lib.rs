//! Heap maps of vkalloc: the debug overlay's panels (heaps, blocks, streaming,
//! timeline) drawn with egui, one piece of layout and colour code shared by
//! the demo's live overlay and the `vkalloc-heapmap` tool that turns any
//! program's JSON dump (`Allocator::to_json`) into a PNG.
//!
//! - [`model`]: categories and colours, reading dumps ([`read_dump`]),
//!   streaming and timeline data, dump differences.
//! - [`ui`]: the panels, for any egui [`egui::Ui`].
//! - [`raster`]: the panels rasterized on the CPU, for PNGs.

#![warn(missing_docs)]

pub mod model;
pub mod raster;
pub mod ui;

pub use model::{
    read_dump, Category, Diff, DumpError, FrameSample, StreamingInfo, TextureStream, Timeline,
};
pub use ui::{
    draw_docked, draw_docked_on, draw_overlay, warm_glyphs, DockLayout, OverlayData, ViewState,
    PANEL_BACKGROUND_ALPHA,
};

use image::RgbaImage;
use vkalloc::Snapshot;

/// Default width of heap maps, in pixels.
pub const DEFAULT_WIDTH: u32 = 1400;

/// The heap map of a snapshot: the heaps and blocks panels, `width` pixels wide.
pub fn render_heap_map(snapshot: &Snapshot, width: u32) -> RgbaImage {
    let mut state = ViewState::headless();
    raster::render_ui(width, 1.0, |ui| {
        ui.heading(format!(
            "vkalloc heap map: {} allocations in {} blocks",
            snapshot.allocation_count(),
            snapshot.blocks().count()
        ));
        draw_overlay(
            ui,
            &OverlayData {
                snapshot: Some(snapshot),
                ..OverlayData::default()
            },
            &mut state,
        )
    })
}

/// The heap map of `new` with what changed since `old`: allocations only in
/// `new` outlined green, only in `old` outlined red, and per-tag totals.
pub fn render_diff(old: &Snapshot, new: &Snapshot, width: u32) -> RgbaImage {
    let diff = Diff::between(old, new);
    let mut state = ViewState::headless();
    raster::render_ui(width, 1.0, |ui| {
        ui.heading(format!(
            "vkalloc heap diff: {} allocated, {} freed, {} in both",
            diff.added.len(),
            diff.freed.len(),
            diff.kept
        ));
        draw_overlay(
            ui,
            &OverlayData {
                snapshot: Some(new),
                diff: Some(&diff),
                ..OverlayData::default()
            },
            &mut state,
        )
    })
}
