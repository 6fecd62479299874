//! The overlay's four panels (heaps, blocks, streaming, timeline) and the diff
//! legend, drawn with egui. The demo shows them live; [`crate::render_heap_map`]
//! rasterizes the same calls into a heap-map PNG.

use egui::{
    pos2, vec2, Align2, Color32, FontId, Rect, Response, RichText, Sense, Shape, Stroke,
    StrokeKind, Ui,
};
use vkalloc::snapshot::{AllocationRecord, BlockSnapshot, ListSnapshot, Snapshot};
use vkalloc::stats::{format_bytes, HeapStatistics};

use crate::model::{
    Category, Diff, StreamingInfo, Timeline, ADDED_COLOR, BUDGET_COLOR, FREED_COLOR, FREE_COLOR,
    WARN_COLOR,
};

/// Fraction of a budget past which the overlay warns.
pub const WARN_FRACTION: f64 = 0.9;
/// Height of a block strip, in points.
pub const STRIP_HEIGHT: f32 = 14.0;
/// Rows of the zoomed block view.
pub const ZOOM_ROWS: u64 = 8;

/// FNV-1a: tags are short, and the default hasher costs more than the lookup saves.
#[derive(Clone, Copy, Debug, Default)]
struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h = (h ^ *b as u64).wrapping_mul(0x100_0000_01b3);
        }
        self.0 = h;
    }
}

type FastHash = std::hash::BuildHasherDefault<Fnv>;

/// What the overlay draws.
#[derive(Clone, Copy, Debug, Default)]
pub struct OverlayData<'a> {
    /// The allocator's state.
    pub snapshot: Option<&'a Snapshot>,
    /// Streaming numbers, where a texture set or streamer exists.
    pub streaming: Option<&'a StreamingInfo>,
    /// The last frames.
    pub timeline: Option<&'a Timeline>,
    /// A diff against an older dump (heap maps only).
    pub diff: Option<&'a Diff>,
}

/// The overlay's interactive state: filters and the zoomed block.
#[derive(Clone, Debug)]
pub struct ViewState {
    /// Categories drawn in colour (the others are dimmed), in [`Category::ALL`] order.
    pub shown: [bool; 6],
    /// Only allocations whose tag contains this (case-insensitive) are drawn in colour.
    pub tag_filter: String,
    /// The zoomed block: list and block index in the snapshot.
    pub zoom: Option<(usize, usize)>,
    /// Whether to show the filter widgets (off in heap-map PNGs).
    pub controls: bool,
    /// A line of the program's own key bindings, shown at the top of the
    /// docked blocks panel (e.g. a renderer's camera keys).
    pub help: Option<String>,
    /// Categories of the tags seen so far, so a frame classifies each tag once.
    categories: std::collections::HashMap<String, Category, FastHash>,
    /// The same by the tag's shared string (a live program's records share
    /// the allocator's tag strings): the address is the key, and the entry
    /// holds a reference, so the address can't be reused while it is cached.
    by_address: std::collections::HashMap<usize, (std::sync::Arc<str>, Category), FastHash>,
    /// Strips laid out this frame, and those of the last frame (reused when
    /// their block did not change); see [`blocks_panel`].
    strips: std::collections::HashMap<StripKey, StripLayout>,
    strips_prev: std::collections::HashMap<StripKey, StripLayout>,
    /// The filters the cached strips were laid out with.
    strips_filter: ([bool; 6], String),
}

impl Default for ViewState {
    fn default() -> Self {
        Self {
            shown: [true; 6],
            tag_filter: String::new(),
            zoom: None,
            controls: true,
            help: None,
            categories: Default::default(),
            by_address: Default::default(),
            strips: Default::default(),
            strips_prev: Default::default(),
            strips_filter: ([true; 6], String::new()),
        }
    }
}

impl ViewState {
    /// A state without the filter widgets (heap-map PNGs, headless frames).
    pub fn headless() -> Self {
        Self {
            controls: false,
            ..Self::default()
        }
    }

    /// The category of `a`, classifying each distinct tag once.
    fn category(&mut self, a: &AllocationRecord) -> Category {
        let Some(shared) = a.tag.as_ref() else {
            return Category::classify(None, &a.kind);
        };
        let address = std::sync::Arc::as_ptr(shared) as *const u8 as usize;
        if let Some((_, c)) = self.by_address.get(&address) {
            return *c;
        }
        let tag: &str = shared;
        let c = match self.categories.get(tag) {
            Some(c) => *c,
            None => {
                if self.categories.len() > 16_384 {
                    self.categories.clear();
                }
                let c = Category::of(a);
                self.categories.insert(tag.to_owned(), c);
                c
            }
        };
        if self.by_address.len() > 16_384 {
            self.by_address.clear();
        }
        self.by_address.insert(address, (shared.clone(), c));
        c
    }

    fn passes(&self, a: &AllocationRecord, category: Category) -> bool {
        let i = Category::ALL
            .iter()
            .position(|c| *c == category)
            .unwrap_or(5);
        if !self.shown[i] {
            return false;
        }
        if self.tag_filter.is_empty() {
            return true;
        }
        let needle = self.tag_filter.to_ascii_lowercase();
        a.tag
            .as_deref()
            .is_some_and(|t| t.to_ascii_lowercase().contains(&needle))
    }
}

/// The block labels' font size (points).
const STRIP_LABEL_FONT_SIZE: f32 = 10.0;

/// Draws every panel that has data, top to bottom.
pub fn draw_overlay(ui: &mut Ui, data: &OverlayData<'_>, state: &mut ViewState) {
    if let Some(s) = data.snapshot {
        section(ui, "Heaps", |ui| heaps_panel(ui, s));
        section(ui, "Blocks", |ui| blocks_panel(ui, s, data.diff, state));
    }
    if let Some(diff) = data.diff {
        section(ui, "Changes", |ui| diff_panel(ui, diff));
    }
    if let Some(st) = data.streaming {
        section(ui, "Streaming", |ui| streaming_panel(ui, st));
    }
    if let Some(t) = data.timeline {
        section(ui, "Timeline", |ui| timeline_panel(ui, t));
    }
}

/// The alpha of the docked panels' black background.
pub const PANEL_BACKGROUND_ALPHA: u8 = 240;

/// The overlay docked over a frame: blocks in a panel on the right, heaps,
/// streaming and the timeline side by side in a panel at the bottom, all on a
/// translucent background so the frame shows through. `ui` is the whole screen.
/// Returns the two panels' rectangles (bottom, right), in points.
pub fn draw_docked(ui: &mut Ui, data: &OverlayData<'_>, state: &mut ViewState) -> [Rect; 2] {
    draw_docked_on(
        ui,
        data,
        state,
        Color32::from_black_alpha(PANEL_BACKGROUND_ALPHA),
    )
}

/// Points each of the heaps and timeline columns keeps, at least, beside the
/// streaming table before the timeline moves to the blocks panel.
pub const MIN_SIDE_COLUMN: f32 = 260.0;

/// How the docked panels share the screen's width.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DockLayout {
    /// Heaps, streaming and timeline in three equal columns at the bottom
    /// (the streaming table fits a third of the width).
    Thirds,
    /// Three columns at the bottom, the streaming table's as wide as it needs
    /// (these points), the other two sharing the rest.
    WideStreaming(f32),
    /// Two columns at the bottom, heaps and streaming (these points); the
    /// timeline at the top of the blocks panel.
    TimelineRight(f32),
}

impl DockLayout {
    /// The layout for a screen `width` points wide whose streaming table
    /// needs `streaming` points.
    pub fn for_width(width: f32, streaming: f32) -> Self {
        if streaming <= width / 3.0 {
            Self::Thirds
        } else if streaming + 2.0 * MIN_SIDE_COLUMN <= width {
            Self::WideStreaming(streaming)
        } else {
            Self::TimelineRight(streaming.min(width * 0.65))
        }
    }
}

/// Points the streaming panel's widest line takes, its frame's margins
/// included.
fn streaming_width(ui: &Ui, st: Option<&StreamingInfo>) -> f32 {
    let Some(st) = st else {
        return 0.0;
    };
    let font = egui::TextStyle::Monospace.resolve(ui.style());
    let glyph = ui.ctx().fonts_mut(|f| f.glyph_width(&font, '0'));
    (streaming_name_width(st) + STREAMING_FIXED_CHARS) as f32 * glyph + 16.0
}

/// Columns of `widths` points side by side in `ui`, each clipped to its own
/// rectangle (a line too long for its column is cut, never drawn over the
/// next one).
fn sized_columns(ui: &mut Ui, widths: &[f32], add: impl FnOnce(&mut [Ui])) {
    let spacing = ui.spacing().item_spacing.x;
    let top_left = ui.cursor().min;
    let bottom = ui.max_rect().bottom();
    let mut x = top_left.x;
    let mut cols: Vec<Ui> = widths
        .iter()
        .map(|&w| {
            let rect = Rect::from_min_max(pos2(x, top_left.y), pos2(x + w - spacing, bottom));
            x += w;
            let mut col = ui.new_child(
                egui::UiBuilder::new()
                    .max_rect(rect)
                    .layout(egui::Layout::top_down_justified(egui::Align::LEFT)),
            );
            col.set_clip_rect(rect.intersect(ui.clip_rect()));
            col
        })
        .collect();
    add(&mut cols);
    let height = cols.iter().map(|c| c.min_size().y).fold(0.0, f32::max);
    ui.allocate_space(vec2(ui.available_width(), height));
}

/// [`draw_docked`] with the panels' background `fill`: a renderer that darkens
/// the returned rectangles itself (in a pass that writes those pixels anyway)
/// passes [`Color32::TRANSPARENT`] and saves blending a layer over them.
/// The columns follow the screen's width ([`DockLayout`]).
pub fn draw_docked_on(
    ui: &mut Ui,
    data: &OverlayData<'_>,
    state: &mut ViewState,
    fill: Color32,
) -> [Rect; 2] {
    let frame = egui::Frame::side_top_panel(ui.style())
        .fill(fill)
        .inner_margin(6.0);
    let height = (ui.available_height() * 0.3).max(40.0);
    let area = ui.available_rect_before_wrap();
    let bottom = Rect::from_min_max(egui::pos2(area.min.x, area.max.y - height), area.max);
    let layout = DockLayout::for_width(area.width(), streaming_width(ui, data.streaming));
    let heaps = |ui: &mut Ui| {
        ui.strong("Heaps (F1 hides the overlay)");
        if let Some(s) = data.snapshot {
            egui::ScrollArea::vertical()
                .id_salt("overlay_heaps")
                .show(ui, |ui| heaps_panel(ui, s));
        }
    };
    let streaming = |ui: &mut Ui| {
        ui.strong("Streaming");
        match data.streaming {
            Some(st) => streaming_panel(ui, st),
            None => {
                ui.label("no textures");
            }
        }
    };
    let timeline = |ui: &mut Ui| {
        ui.strong("Timeline");
        if let Some(t) = data.timeline {
            timeline_panel(ui, t);
        }
    };
    egui::Panel::bottom("vkalloc_overlay_bottom")
        .exact_size(height)
        .resizable(false)
        .frame(frame)
        .show(ui, |ui| match layout {
            DockLayout::Thirds => ui.columns(3, |cols| {
                heaps(&mut cols[0]);
                streaming(&mut cols[1]);
                timeline(&mut cols[2]);
            }),
            DockLayout::WideStreaming(s) => {
                let side = (ui.available_width() - s) / 2.0;
                sized_columns(ui, &[side, s, side], |cols| {
                    heaps(&mut cols[0]);
                    streaming(&mut cols[1]);
                    timeline(&mut cols[2]);
                })
            }
            DockLayout::TimelineRight(s) => {
                let side = ui.available_width() - s;
                sized_columns(ui, &[side, s], |cols| {
                    heaps(&mut cols[0]);
                    streaming(&mut cols[1]);
                })
            }
        });
    let width = (ui.available_width() * 0.45).max(80.0);
    let area = ui.available_rect_before_wrap();
    let right = Rect::from_min_max(egui::pos2(area.max.x - width, area.min.y), area.max);
    egui::Panel::right("vkalloc_overlay_blocks")
        .exact_size(width)
        .resizable(false)
        .frame(frame)
        .show(ui, |ui| {
            if let Some(help) = state.help.as_deref().filter(|_| state.controls) {
                ui.label(RichText::new(help).weak());
            }
            if let DockLayout::TimelineRight(_) = layout {
                timeline(ui);
                ui.separator();
            }
            ui.strong("Blocks");
            egui::ScrollArea::vertical()
                .id_salt("overlay_blocks")
                .show(ui, |ui| {
                    if let Some(s) = data.snapshot {
                        blocks_panel(ui, s, data.diff, state);
                    }
                });
        });
    [bottom, right]
}

/// Lays out every printable ASCII character in each font the panels use, so
/// that egui rasterizes those glyphs into its font atlas now. A renderer calls
/// it inside its first layout: later layouts then add no glyphs, and so no
/// partial font-texture uploads mid-run (egui-ash-renderer waits for the queue
/// to go idle on every texture update).
pub fn warm_glyphs(ui: &Ui) {
    let text: String = (0x20u8..0x7f).map(char::from).collect();
    let mut fonts: Vec<FontId> = ui.style().text_styles.values().cloned().collect();
    fonts.push(FontId::monospace(STRIP_LABEL_FONT_SIZE));
    for font in fonts {
        let _ = ui
            .painter()
            .layout_no_wrap(text.clone(), font, Color32::WHITE);
    }
}

fn section(ui: &mut Ui, title: &str, add: impl FnOnce(&mut Ui)) {
    egui::CollapsingHeader::new(RichText::new(title).strong())
        .default_open(true)
        .show(ui, add);
}

fn fraction(part: u64, whole: u64) -> f32 {
    if whole == 0 {
        0.0
    } else {
        (part as f64 / whole as f64).clamp(0.0, 1.0) as f32
    }
}

fn sub_rect(r: Rect, from: f32, to: f32) -> Rect {
    Rect::from_min_max(
        pos2(r.min.x + r.width() * from, r.min.y),
        pos2(r.min.x + r.width() * to, r.max.y),
    )
}

/// A usage bar: `used` inside `committed` inside `total`, with a budget line.
fn usage_bar(ui: &mut Ui, used: u64, committed: u64, other: u64, total: u64, budget: Option<u64>) {
    let (rect, _) = ui.allocate_exact_size(vec2(ui.available_width(), 12.0), Sense::hover());
    let p = ui.painter();
    p.rect_filled(rect, 0.0, FREE_COLOR);
    let scale = total.max(budget.unwrap_or(0)).max(committed).max(other);
    p.rect_filled(
        sub_rect(rect, 0.0, fraction(other, scale)),
        0.0,
        Color32::from_rgb(85, 90, 105),
    );
    p.rect_filled(
        sub_rect(rect, 0.0, fraction(committed, scale)),
        0.0,
        Color32::from_rgb(60, 110, 170),
    );
    p.rect_filled(
        sub_rect(rect, 0.0, fraction(used, scale)),
        0.0,
        Color32::from_rgb(110, 170, 240),
    );
    if let Some(b) = budget {
        let over = other.max(committed) as f64 > b as f64 * WARN_FRACTION;
        let x = rect.min.x + rect.width() * fraction(b, scale);
        p.vline(
            x,
            rect.y_range().expand(2.0),
            Stroke::new(2.0, if over { WARN_COLOR } else { BUDGET_COLOR }),
        );
    }
}

/// Heaps: our usage, the driver's usage and the budget per heap.
pub fn heaps_panel(ui: &mut Ui, s: &Snapshot) {
    for h in &s.statistics.heaps {
        heap_row(ui, h);
    }
    ui.label(
        RichText::new(
            "bar: light = allocated, mid = our blocks, grey = whole process; line = budget",
        )
        .small()
        .weak(),
    );
}

fn heap_row(ui: &mut Ui, h: &HeapStatistics) {
    let b = &h.budget;
    let ours = h.usage.block_bytes;
    let process = b.usage.max(ours);
    let share = if b.budget == 0 {
        0.0
    } else {
        process as f64 / b.budget as f64
    };
    ui.horizontal_wrapped(|ui| {
        ui.label(
            RichText::new(format!(
                "heap {}{}: ours {} ({} allocated), process {}, budget {} ({}), size {}",
                h.index,
                if h.device_local { " device-local" } else { "" },
                format_bytes(ours),
                format_bytes(h.usage.allocation_bytes),
                format_bytes(process),
                format_bytes(b.budget),
                if b.from_driver {
                    "VK_EXT_memory_budget"
                } else {
                    "estimated"
                },
                format_bytes(h.size)
            ))
            .monospace(),
        );
        if share > WARN_FRACTION {
            ui.label(
                RichText::new(format!("WARNING {:.0}% of budget", share * 100.0))
                    .color(WARN_COLOR)
                    .strong(),
            );
        }
    });
    usage_bar(
        ui,
        h.usage.allocation_bytes,
        ours,
        process,
        h.size,
        Some(b.budget),
    );
}

/// Draws the legend and, with `controls`, the filter widgets.
fn legend(ui: &mut Ui, state: &mut ViewState) {
    ui.horizontal_wrapped(|ui| {
        for (i, c) in Category::ALL.iter().enumerate() {
            let (r, _) = ui.allocate_exact_size(vec2(10.0, 10.0), Sense::hover());
            ui.painter().rect_filled(r, 2.0, c.color());
            if state.controls {
                ui.checkbox(&mut state.shown[i], c.name());
            } else {
                ui.label(c.name());
            }
        }
        let (r, _) = ui.allocate_exact_size(vec2(10.0, 10.0), Sense::hover());
        ui.painter().rect_filled(r, 2.0, FREE_COLOR);
        ui.label("free");
        if state.controls {
            ui.label("tag:");
            ui.add(egui::TextEdit::singleline(&mut state.tag_filter).desired_width(90.0));
        }
    });
}

/// The allocations overlapping `offset` (more than one where memory is aliased).
fn allocations_at(block: &BlockSnapshot, offset: u64) -> Vec<&AllocationRecord> {
    let end = block.allocations.partition_point(|a| a.offset <= offset);
    block.allocations[..end]
        .iter()
        .rev()
        .filter(|a| a.offset + a.size > offset)
        .take(4)
        .collect()
}

/// Runs of pixel columns of one colour slot (category * 2 + dimmed), in order.
#[derive(Default)]
struct Runs(Vec<(usize, usize, usize)>);

impl Runs {
    fn push(&mut self, c0: usize, c1: usize, slot: usize) {
        if c1 <= c0 {
            return;
        }
        match self.0.last_mut() {
            Some(last) if last.2 == slot && last.1 >= c0 => last.1 = last.1.max(c1),
            _ => self.0.push((c0, c1, slot)),
        }
    }

    /// Ends column `column`: its colour is the slot with the most bytes.
    fn flush(&mut self, column: Option<usize>, acc: &mut [f64; 12]) {
        if let Some(c) = column {
            // The first slot with the most bytes (a plain loop: this runs once
            // per allocation in a dense block).
            let (mut slot, mut most) = (0, 0.0);
            for (s, &bytes) in acc.iter().enumerate() {
                if bytes > most {
                    (slot, most) = (s, bytes);
                }
            }
            if most > 0.0 {
                self.push(c, c + 1, slot);
            }
        }
        *acc = [0.0; 12];
    }
}

/// Marks drawn over a strip by a diff: byte ranges and their colour.
type Marks<'a> = &'a [(u64, u64, Color32)];

/// Draws bytes `[start, end)` of `block` as a strip of `width` points; allocations by
/// offset, coloured by category; free space dark; overlaps (aliasing) marked white on top.
#[allow(clippy::too_many_arguments)]
fn strip(
    ui: &mut Ui,
    block: &BlockSnapshot,
    start: u64,
    end: u64,
    width: f32,
    state: &mut ViewState,
    marks: Marks<'_>,
) -> Response {
    let (rect, response) = ui.allocate_exact_size(vec2(width, STRIP_HEIGHT), Sense::click());
    if !ui.is_rect_visible(rect) {
        return response;
    }
    let span = end.saturating_sub(start).max(1) as f64;
    let ppp = ui.ctx().pixels_per_point();
    let px = 1.0 / ppp;
    let x_of = |offset: u64| {
        let f = (offset.saturating_sub(start).min(end - start) as f64 / span) as f32;
        rect.min.x + rect.width() * f
    };
    let columns = ((rect.width() * ppp).round() as usize).clamp(1, 16384);
    // A block that has not changed since the last frame (same id and
    // generation, same span and width) keeps its columns: a frame walks only
    // the blocks that changed. Dumps carry no ids (0): always laid out.
    let key = StripKey {
        block: block.id,
        generation: block.generation,
        start,
        end,
        columns,
    };
    let layout = match state.strips_prev.remove(&key).filter(|_| block.id != 0) {
        Some(layout) => layout,
        None => layout_strip(block, start, end, columns, state),
    };
    let StripLayout {
        runs,
        boundaries,
        aliased,
    } = &layout;
    let x_col = |c: usize| rect.min.x + rect.width() * c as f32 / columns as f32;
    let mut shapes = Vec::with_capacity(runs.len() + boundaries.len() + 4);
    // Pixel-aligned rectangles need no anti-aliasing: one plain mesh, four
    // vertices each, instead of a tessellated shape per run. Free columns get
    // their own rectangles rather than a background under the runs, so each
    // pixel of the strip is drawn once (fill is what an overlay costs a GPU).
    let mut mesh = egui::Mesh::default();
    mesh.reserve_triangles(runs.len() * 4 + 2);
    mesh.reserve_vertices(runs.len() * 8 + 4);
    let mut next = 0;
    for &(c0, c1, slot) in runs {
        if c0 > next {
            let r = Rect::from_x_y_ranges(x_col(next)..=x_col(c0), rect.y_range());
            mesh.add_colored_rect(r, FREE_COLOR);
        }
        let base = Category::ALL[slot / 2].color();
        let color = if slot % 2 == 1 {
            base.gamma_multiply(0.25)
        } else {
            base
        };
        let r = Rect::from_x_y_ranges(x_col(c0)..=x_col(c1), rect.y_range());
        mesh.add_colored_rect(r, color);
        next = next.max(c1);
    }
    if next < columns {
        let r = Rect::from_x_y_ranges(x_col(next)..=x_col(columns), rect.y_range());
        mesh.add_colored_rect(r, FREE_COLOR);
    }
    shapes.push(Shape::mesh(mesh));
    for &c in boundaries {
        shapes.push(Shape::vline(
            x_col(c),
            rect.y_range(),
            Stroke::new(px, Color32::from_black_alpha(160)),
        ));
    }
    for &(o0, o1) in aliased {
        let (x0, x1) = (x_of(o0), x_of(o1));
        let r = Rect::from_x_y_ranges(x0..=x1.max(x0 + px), rect.min.y..=rect.min.y + 3.0);
        shapes.push(Shape::rect_filled(r, 0.0, Color32::WHITE));
    }
    for &(o, s, c) in marks {
        if o + s <= start || o >= end {
            continue;
        }
        let r = Rect::from_x_y_ranges(x_of(o)..=x_of(o + s).max(x_of(o) + px), rect.y_range());
        shapes.push(Shape::rect_stroke(
            r,
            0.0,
            Stroke::new(1.5, c),
            StrokeKind::Inside,
        ));
    }
    let outline = if block.dedicated {
        Stroke::new(2.0, Color32::from_rgb(255, 215, 0))
    } else {
        Stroke::new(px, Color32::from_gray(90))
    };
    shapes.push(Shape::rect_stroke(rect, 0.0, outline, StrokeKind::Outside));
    ui.painter().extend(shapes);
    if block.id != 0 {
        state.strips.insert(key, layout);
    }
    response
}

/// Which strip a [`StripLayout`] was computed for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct StripKey {
    block: u64,
    generation: u64,
    start: u64,
    end: u64,
    columns: usize,
}

/// A strip's pixel columns: coloured runs, allocation boundaries and aliased
/// byte ranges.
#[derive(Clone, Debug, Default)]
struct StripLayout {
    runs: Vec<(usize, usize, usize)>,
    boundaries: Vec<usize>,
    aliased: Vec<(u64, u64)>,
}

/// Lays out bytes `[start, end)` of `block` in `columns` pixel columns.
fn layout_strip(
    block: &BlockSnapshot,
    start: u64,
    end: u64,
    columns: usize,
    state: &mut ViewState,
) -> StripLayout {
    let span = end.saturating_sub(start).max(1) as f64;
    // One colour per pixel column at most: each allocation adds its bytes to the
    // columns it covers, a column takes the colour of the kind with the most
    // bytes in it, and equal neighbours merge. A block of 10,000 allocations
    // stays at most a few hundred rectangles, in time linear in allocations.
    let bytes_per_column = span / columns as f64;
    let filtered = !state.tag_filter.is_empty() || state.shown.contains(&false);
    let mut runs = Runs::default();
    let mut acc = [0.0f64; 12];
    let mut acc_column: Option<usize> = None;
    let mut boundaries: Vec<usize> = Vec::new();
    let mut aliased: Vec<(u64, u64)> = Vec::new();
    let mut max_end = 0u64;
    let first = block
        .allocations
        .partition_point(|a| a.offset + a.size <= start);
    for a in block.allocations[first..]
        .iter()
        .take_while(|a| a.offset < end)
    {
        let a_end = a.offset.saturating_add(a.size);
        if a.offset < max_end {
            aliased.push((a.offset, a_end.min(max_end)));
        }
        max_end = max_end.max(a_end);
        let category = state.category(a);
        let dim = filtered && !state.passes(a, category);
        let slot = category as usize * 2 + dim as usize;
        let lo = a.offset.max(start).saturating_sub(start) as f64 / bytes_per_column;
        let hi = a_end.min(end).saturating_sub(start) as f64 / bytes_per_column;
        let c0 = (lo.floor() as usize).min(columns - 1);
        let c1 = (hi.ceil() as usize).clamp(c0 + 1, columns);
        match acc_column {
            Some(c) if c0 <= c => {}
            _ => {
                runs.flush(acc_column, &mut acc);
                acc_column = Some(c0);
            }
        }
        if c1 - c0 <= 1 || acc_column != Some(c0) {
            acc[slot] += (hi - lo).max(1e-9);
            continue;
        }
        if c1 - c0 >= 6 {
            boundaries.push(c0);
        }
        acc[slot] += (c0 + 1) as f64 - lo;
        runs.flush(acc_column, &mut acc);
        runs.push(c0 + 1, c1 - 1, slot);
        acc[slot] = (hi - (c1 - 1) as f64).max(1e-9);
        acc_column = Some(c1 - 1);
    }
    runs.flush(acc_column, &mut acc);
    StripLayout {
        runs: runs.0,
        boundaries,
        aliased,
    }
}

fn hover_details(ui: &mut Ui, list: &ListSnapshot, block: &BlockSnapshot, offset: u64) {
    let here = allocations_at(block, offset);
    if here.is_empty() {
        ui.label(format!("free at offset {offset}"));
    }
    for a in here {
        ui.label(
            RichText::new(format!(
                "{} ({})\nsize {} at offset {:#x}\nmemory type {}{}\n{}{}",
                a.tag.as_deref().unwrap_or("untagged"),
                Category::of(a).name(),
                format_bytes(a.size),
                a.offset,
                list.memory_type,
                list.pool
                    .as_deref()
                    .map(|p| format!(", pool '{p}'"))
                    .unwrap_or_default(),
                if a.dedicated { "dedicated, " } else { "" },
                a.age_frames
                    .map(|f| format!("age {f} frames"))
                    .unwrap_or_else(|| "age unknown".into()),
            ))
            .monospace(),
        );
    }
}

fn list_title(list: &ListSnapshot) -> String {
    let mut flags = Vec::new();
    use vkalloc::device::MemoryPropertyFlags as F;
    for (bit, name) in [
        (F::DEVICE_LOCAL, "device-local"),
        (F::HOST_VISIBLE, "host-visible"),
        (F::HOST_COHERENT, "coherent"),
        (F::HOST_CACHED, "cached"),
        (F::LAZILY_ALLOCATED, "lazy"),
    ] {
        if list.flags.contains(bit) {
            flags.push(name);
        }
    }
    // Saturating: a dump is input, its sizes may sum past u64.
    let used = list
        .blocks
        .iter()
        .fold(0u64, |s, b| s.saturating_add(b.allocation_bytes));
    let committed = list
        .blocks
        .iter()
        .fold(0u64, |s, b| s.saturating_add(b.size));
    format!(
        "{} - memory type {} [{}] heap {}: {} blocks, {} used of {}{}",
        match &list.pool {
            Some(p) => format!("pool '{p}'"),
            None => "default blocks".to_owned(),
        },
        list.memory_type,
        flags.join(" "),
        list.heap,
        list.blocks.len(),
        format_bytes(used),
        format_bytes(committed),
        list.pool_budget
            .map(|b| format!(", pool budget {}", format_bytes(b)))
            .unwrap_or_default()
    )
}

fn block_label(bi: usize, b: &BlockSnapshot) -> String {
    format!(
        "block {bi}: {}{}, {} allocations, used {}, free {}, largest free {}, fragmentation {:.2}",
        format_bytes(b.size),
        if b.dedicated { " dedicated" } else { "" },
        b.allocations.len(),
        format_bytes(b.allocation_bytes),
        format_bytes(b.free_bytes()),
        format_bytes(b.largest_free),
        b.fragmentation
    )
}

fn diff_marks(diff: Option<&Diff>, list: &ListSnapshot, bi: usize) -> Vec<(u64, u64, Color32)> {
    let Some(diff) = diff else {
        return Vec::new();
    };
    let same = |k: &crate::model::AllocationKey| {
        k.memory_type == list.memory_type && k.pool == list.pool && k.block == bi
    };
    diff.added
        .iter()
        .filter(|(k, _)| same(k))
        .map(|(k, _)| (k.offset, k.size, ADDED_COLOR))
        .chain(
            diff.freed
                .iter()
                .filter(|(k, _)| same(k))
                .map(|(k, _)| (k.offset, k.size, FREED_COLOR)),
        )
        .collect()
}

/// Blocks: per memory type and pool, each block a strip drawn by offset; hover
/// for details, click to zoom.
pub fn blocks_panel(ui: &mut Ui, s: &Snapshot, diff: Option<&Diff>, state: &mut ViewState) {
    legend(ui, state);
    // Last frame's strips become the reusable ones; a strip not drawn this
    // frame is dropped with them. A filter change invalidates them all.
    state.strips_prev = std::mem::take(&mut state.strips);
    if state.strips_filter.0 != state.shown || state.strips_filter.1 != state.tag_filter {
        state.strips_prev.clear();
        state.strips_filter = (state.shown, state.tag_filter.clone());
    }
    if s.lists.is_empty() {
        ui.label("no blocks");
    }
    let font = FontId::monospace(STRIP_LABEL_FONT_SIZE);
    let mut clicked = None;
    if let Some((li, bi)) = state.zoom {
        match s
            .lists
            .get(li)
            .and_then(|l| l.blocks.get(bi).map(|b| (l, b)))
        {
            Some((list, block)) => {
                ui.horizontal(|ui| {
                    ui.label(RichText::new(format!("zoom: {}", block_label(bi, block))).strong());
                    if state.controls && ui.button("close").clicked() {
                        clicked = Some(None);
                    }
                });
                let marks = diff_marks(diff, list, bi);
                let row = block.size.div_ceil(ZOOM_ROWS).max(1);
                for r in 0..ZOOM_ROWS {
                    let start = r.saturating_mul(row);
                    let end = start.saturating_add(row).min(block.size);
                    if start >= end {
                        break;
                    }
                    let resp = strip(ui, block, start, end, ui.available_width(), state, &marks);
                    if let Some(p) = resp.hover_pos() {
                        let f = ((p.x - resp.rect.min.x) / resp.rect.width()).clamp(0.0, 1.0);
                        let offset = start + ((end - start) as f64 * f as f64) as u64;
                        resp.on_hover_ui_at_pointer(|ui| hover_details(ui, list, block, offset));
                    }
                }
                ui.separator();
            }
            None => clicked = Some(None),
        }
    }
    for (li, list) in s.lists.iter().enumerate() {
        ui.add_space(2.0);
        ui.label(RichText::new(list_title(list)).monospace().strong());
        for (bi, block) in list.blocks.iter().enumerate() {
            let marks = diff_marks(diff, list, bi);
            {
                let (label_rect, _) = ui.allocate_exact_size(
                    vec2(ui.available_width(), font.size + 2.0),
                    Sense::hover(),
                );
                ui.painter().with_clip_rect(label_rect).text(
                    label_rect.left_center(),
                    Align2::LEFT_CENTER,
                    block_label(bi, block),
                    font.clone(),
                    ui.visuals().text_color(),
                );
                let resp = strip(
                    ui,
                    block,
                    0,
                    block.size,
                    ui.available_width(),
                    state,
                    &marks,
                );
                if let Some(p) = resp.hover_pos() {
                    let f = ((p.x - resp.rect.min.x) / resp.rect.width()).clamp(0.0, 1.0);
                    let offset = (block.size as f64 * f as f64) as u64;
                    let resp = resp.on_hover_ui_at_pointer(|ui| {
                        hover_details(ui, list, block, offset);
                        ui.label(RichText::new("click to zoom").weak());
                    });
                    if resp.clicked() {
                        clicked = Some(Some((li, bi)));
                    }
                }
            }
        }
    }
    if let Some(z) = clicked {
        state.zoom = z;
    }
}

/// The diff's per-tag totals (the leak finder).
pub fn diff_panel(ui: &mut Ui, diff: &Diff) {
    ui.horizontal(|ui| {
        ui.colored_label(
            ADDED_COLOR,
            format!(
                "allocated: {} ({})",
                diff.added.len(),
                format_bytes(
                    diff.added
                        .iter()
                        .fold(0u64, |s, (k, _)| s.saturating_add(k.size))
                )
            ),
        );
        ui.colored_label(
            FREED_COLOR,
            format!(
                "freed: {} ({})",
                diff.freed.len(),
                format_bytes(
                    diff.freed
                        .iter()
                        .fold(0u64, |s, (k, _)| s.saturating_add(k.size))
                )
            ),
        );
        ui.label(format!("in both: {}", diff.kept));
    });
    egui::Grid::new("diff_tags").striped(true).show(ui, |ui| {
        ui.strong("tag");
        ui.strong("allocated");
        ui.strong("freed");
        ui.strong("net");
        ui.end_row();
        for (tag, c) in &diff.by_tag {
            ui.monospace(tag.as_deref().unwrap_or("untagged"));
            ui.monospace(format!("{} ({})", c.added, format_bytes(c.added_bytes)));
            ui.monospace(format!("{} ({})", c.freed, format_bytes(c.freed_bytes)));
            let net = c.added_bytes as i128 - c.freed_bytes as i128;
            let text = format!(
                "{}{}",
                if net < 0 { "-" } else { "+" },
                format_bytes(net.unsigned_abs() as u64)
            );
            ui.colored_label(if net > 0 { ADDED_COLOR } else { FREED_COLOR }, text);
            ui.end_row();
        }
    });
}

/// Characters of the streaming table's name column.
fn streaming_name_width(st: &StreamingInfo) -> usize {
    st.textures
        .iter()
        .map(|t| t.name.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(7, 40)
}

/// Characters of the streaming table's line besides the name column.
const STREAMING_FIXED_CHARS: usize = 1 + 8 + 1 + 8 + 1 + 10 + 1 + 10;

/// Streaming: the texture pool against its budget and each texture's mips.
pub fn streaming_panel(ui: &mut Ui, st: &StreamingInfo) {
    let share = fraction(st.pool_bytes.max(st.pool_committed), st.budget) as f64;
    ui.horizontal_wrapped(|ui| {
        ui.monospace(format!(
            "texture pool: {} allocated, {} committed, budget {}",
            format_bytes(st.pool_bytes),
            format_bytes(st.pool_committed),
            format_bytes(st.budget)
        ));
        if share > WARN_FRACTION {
            ui.colored_label(WARN_COLOR, format!("WARNING {:.0}%", share * 100.0));
        }
    });
    usage_bar(
        ui,
        st.pool_bytes,
        st.pool_committed,
        0,
        st.budget,
        Some(st.budget),
    );
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    ui.monospace(format!(
        "pending loads {}, upload {}/s, evictions {}",
        opt(st.pending_loads.map(|p| p.to_string())),
        opt(st.upload_bytes_per_s.map(|r| format_bytes(r as u64))),
        opt(st.evictions.map(|e| e.to_string()))
    ));
    // One monospace line a texture, laid out only for the rows in view (a
    // panel of 48 textures shows about six): a layout's cost stays flat in
    // the number of textures.
    let name_width = streaming_name_width(st);
    ui.monospace(
        RichText::new(format!(
            "{:<name_width$} {:>8} {:>8} {:>10} {:>10}",
            "texture", "res. mip", "want mip", "res. size", "want size"
        ))
        .strong(),
    );
    let row_height = ui.text_style_height(&egui::TextStyle::Monospace);
    egui::ScrollArea::vertical()
        .id_salt("streaming_textures")
        .max_height(ui.available_height().max(60.0))
        .show_rows(ui, row_height, st.textures.len(), |ui, rows| {
            for t in &st.textures[rows] {
                let name: String = t.name.chars().take(name_width).collect();
                ui.monospace(format!(
                    "{name:<name_width$} {:>8} {:>8} {:>10} {:>10}",
                    t.resident_mip,
                    opt(t.wanted_mip.map(|m| m.to_string())),
                    format_bytes(t.resident_bytes),
                    opt(t.wanted_bytes.map(format_bytes)),
                ));
            }
        });
}

/// Timeline: GPU time, allocation traffic and resident texture bytes per frame.
pub fn timeline_panel(ui: &mut Ui, t: &Timeline) {
    let n = t.frames.len();
    if n == 0 {
        ui.label("no frames yet");
        return;
    }
    let last = t.frames[n - 1];
    let max_gpu = t.frames.iter().map(|f| f.gpu_ms).fold(0.0, f64::max);
    ui.monospace(format!(
        "{n} frames; GPU {:.2} ms (max {:.2}); last frame: {} allocations, {} frees, {} vkAllocateMemory; textures {} of {}",
        last.gpu_ms,
        max_gpu,
        last.allocations,
        last.frees,
        last.device_allocations,
        format_bytes(last.texture_bytes),
        format_bytes(last.texture_budget)
    ));
    let (rect, _) = ui.allocate_exact_size(vec2(ui.available_width(), 70.0), Sense::hover());
    let p = ui.painter_at(rect);
    p.rect_filled(rect, 0.0, FREE_COLOR);
    let step = rect.width() / t.capacity as f32;
    let x_at = |i: usize| rect.min.x + (t.capacity - n + i) as f32 * step;
    // Upper half: GPU time and texture bytes against budget.
    let top = Rect::from_min_max(rect.min, pos2(rect.max.x, rect.center().y - 2.0));
    let y_in = |r: Rect, f: f64| r.max.y - r.height() * f.clamp(0.0, 1.0) as f32;
    let gpu: Vec<_> = t
        .frames
        .iter()
        .enumerate()
        .map(|(i, f)| pos2(x_at(i), y_in(top, f.gpu_ms / max_gpu.max(1e-9))))
        .collect();
    let tex_scale = t
        .frames
        .iter()
        .map(|f| f.texture_bytes.max(f.texture_budget))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let tex: Vec<_> = t
        .frames
        .iter()
        .enumerate()
        .map(|(i, f)| pos2(x_at(i), y_in(top, f.texture_bytes as f64 / tex_scale)))
        .collect();
    let budget: Vec<_> = t
        .frames
        .iter()
        .enumerate()
        .map(|(i, f)| pos2(x_at(i), y_in(top, f.texture_budget as f64 / tex_scale)))
        .collect();
    p.add(Shape::line(budget, Stroke::new(1.0, BUDGET_COLOR)));
    p.add(Shape::line(
        tex,
        Stroke::new(1.5, Category::Texture.color()),
    ));
    p.add(Shape::line(
        gpu,
        Stroke::new(1.5, Color32::from_rgb(255, 160, 60)),
    ));
    // Lower half: allocations (up), frees and new device memory (down).
    let bottom = Rect::from_min_max(pos2(rect.min.x, rect.center().y + 2.0), rect.max);
    let max_ops = t
        .frames
        .iter()
        .map(|f| f.allocations.max(f.frees))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let mid = bottom.center().y;
    let half = bottom.height() / 2.0;
    let mut bars = Vec::new();
    for (i, f) in t.frames.iter().enumerate() {
        let x = x_at(i);
        let w = step.max(1.0 / ui.ctx().pixels_per_point());
        let up = half * (f.allocations as f64 / max_ops) as f32;
        let down = half * (f.frees as f64 / max_ops) as f32;
        if up > 0.0 {
            bars.push(Shape::rect_filled(
                Rect::from_x_y_ranges(x..=x + w, mid - up..=mid),
                0.0,
                ADDED_COLOR,
            ));
        }
        if down > 0.0 {
            bars.push(Shape::rect_filled(
                Rect::from_x_y_ranges(x..=x + w, mid..=mid + down),
                0.0,
                FREED_COLOR,
            ));
        }
        if f.device_allocations > 0 {
            bars.push(Shape::rect_filled(
                Rect::from_x_y_ranges(x..=x + w, bottom.min.y..=bottom.min.y + 4.0),
                0.0,
                Color32::WHITE,
            ));
        }
    }
    p.extend(bars);
    ui.label(
        RichText::new(
            "orange: GPU ms; blue: texture bytes, white: budget; green: allocations, red: frees, white ticks: vkAllocateMemory",
        )
        .small()
        .weak(),
    );
}

#[cfg(test)]
mod dock_tests {
    use super::*;

    #[test]
    fn the_docked_columns_follow_the_width() {
        // A 1080p screen at one point per pixel: equal thirds, as always.
        assert_eq!(DockLayout::for_width(1920.0, 480.0), DockLayout::Thirds);
        // 1280 points: the streaming table gets its width, the rest shares.
        assert_eq!(
            DockLayout::for_width(1280.0, 480.0),
            DockLayout::WideStreaming(480.0)
        );
        // 640 points: the timeline moves to the blocks panel, and the table
        // never takes more than 65 % of the width.
        assert_eq!(
            DockLayout::for_width(640.0, 480.0),
            DockLayout::TimelineRight(416.0)
        );
        assert_eq!(
            DockLayout::for_width(700.0, 300.0),
            DockLayout::TimelineRight(300.0)
        );
    }
}
