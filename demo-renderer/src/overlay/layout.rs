//! The overlay's layout thread: snapshot, egui layout and tessellation off
//! the render thread.
//!
//! With 10,000 live allocations a layout costs about 1.7 ms of CPU on the
//! H200's host (most of it egui: text, the block strips' shapes and their
//! tessellation), three times the overlay's budget of 0.5 ms a frame. The
//! render thread therefore only posts a [`LayoutJob`] (input, target size, the
//! streaming rows and the timeline, all small) and, on its next frame, takes
//! the finished [`Laid`] meshes and texture changes, which it uploads and
//! draws. Exactly one job is in flight at a time and the render thread waits
//! for it on the next frame, so the overlay drawn on frame *n* is the one
//! posted on frame *n* − 1 (a lag of one frame, which a person reading a HUD
//! does not see), showing the allocator as the layout thread's snapshot found
//! it during that frame (each block consistent; other threads go on
//! allocating meanwhile, as they would around any snapshot). The very first
//! layout is waited for on its own frame, so a one-frame run draws the
//! overlay of that frame. The wait is empty unless a layout takes longer than
//! a frame; it is counted in the render thread's overlay time.
//!
//! The worker owns the egui state that only layout touches ([`ViewState`]:
//! filters, zoom, the strip cache) and its snapshot, refreshed from the shared
//! allocator (`Allocator::refresh_snapshot` holds each block's lock only while
//! copying that block's records).

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use egui::epaint::ClippedPrimitive;
use vkalloc::{Allocator, Snapshot};
use vkalloc_heapmap::{
    draw_docked_on, warm_glyphs, OverlayData, StreamingInfo, Timeline, ViewState,
};

use vkalloc::vk::AshDevice;

/// What one layout needs from the render thread.
pub struct LayoutJob {
    /// Input since the last job (headless: none).
    pub input: egui::RawInput,
    /// The target's size in pixels.
    pub extent: (u32, u32),
    /// Pixels per egui point.
    pub pixels_per_point: f32,
    /// The streaming panel's rows, if the scene streams textures.
    pub streaming: Option<StreamingInfo>,
    /// The frame timeline, as of the frame that posted the job.
    pub timeline: Timeline,
    /// Whether the filter widgets are shown (a window), or not (headless).
    pub interactive: bool,
}

/// A finished layout: what the render thread uploads and draws.
pub struct Laid {
    /// egui's meshes, in pixels / `pixels_per_point`.
    pub primitives: Vec<ClippedPrimitive>,
    /// Font and image texture changes, to apply before drawing `primitives`.
    pub textures: egui::TexturesDelta,
    /// The scale egui laid out at.
    pub pixels_per_point: f32,
    /// The two panels' rectangles in pixels (min x, min y, max x, max y).
    pub panels: [[f32; 4]; 2],
    /// Milliseconds the worker spent: the snapshot alone, and everything.
    pub snapshot_ms: f64,
    /// Snapshot, layout and tessellation.
    pub layout_ms: f64,
}

#[derive(Default)]
struct Slot {
    job: Option<LayoutJob>,
    busy: bool,
    done: Option<Laid>,
    quit: bool,
    /// The worker stopped without finishing (a panic in layout).
    dead: bool,
}

type Shared = Arc<(Mutex<Slot>, Condvar)>;

fn lock(shared: &Shared) -> MutexGuard<'_, Slot> {
    // A poisoned slot only means the worker panicked while holding it; the
    // fields are still consistent (`dead` says what happened).
    shared.0.lock().unwrap_or_else(|p| p.into_inner())
}

/// Marks the worker dead if it unwinds, so a waiting render thread returns.
struct DeathNotice(Shared);

impl Drop for DeathNotice {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut slot = lock(&self.0);
            slot.dead = true;
            slot.busy = false;
            self.0 .1.notify_all();
        }
    }
}

/// The layout thread and its mailbox.
pub struct LayoutWorker {
    shared: Shared,
    thread: Option<JoinHandle<()>>,
}

impl LayoutWorker {
    /// Starts the thread, which lays out with `egui` from `allocator`'s snapshots.
    pub fn spawn(
        egui: egui::Context,
        allocator: Arc<Allocator<AshDevice>>,
    ) -> std::io::Result<Self> {
        let shared: Shared = Arc::default();
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("overlay-layout".into())
            .spawn(move || run(theirs, egui, allocator))?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Whether a job is posted or running.
    pub fn in_flight(&self) -> bool {
        let slot = lock(&self.shared);
        slot.job.is_some() || slot.busy
    }

    /// Posts `job`; false (and `job` dropped) while another is in flight or
    /// its result is not taken yet, or the worker has stopped.
    pub fn post(&self, job: LayoutJob) -> bool {
        let mut slot = lock(&self.shared);
        if slot.job.is_some() || slot.busy || slot.done.is_some() || slot.dead || slot.quit {
            return false;
        }
        slot.job = Some(job);
        self.shared.1.notify_all();
        true
    }

    /// The finished layout, waiting for the job in flight if there is one.
    /// `Err` if the worker died (a panic in layout).
    pub fn take(&self) -> Result<Option<Laid>, &'static str> {
        let mut slot = lock(&self.shared);
        while (slot.job.is_some() || slot.busy) && !slot.dead {
            slot = self.shared.1.wait(slot).unwrap_or_else(|p| p.into_inner());
        }
        if slot.dead {
            return Err("the overlay's layout thread panicked");
        }
        Ok(slot.done.take())
    }
}

impl Drop for LayoutWorker {
    fn drop(&mut self) {
        lock(&self.shared).quit = true;
        self.shared.1.notify_all();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                log::error!("overlay: the layout thread panicked");
            }
        }
        // A layout nobody will draw: its texture changes go with the renderer.
        if let Some(mut laid) = lock(&self.shared).done.take() {
            laid.textures.clear();
        }
    }
}

fn run(shared: Shared, egui: egui::Context, allocator: Arc<Allocator<AshDevice>>) {
    let _notice = DeathNotice(shared.clone());
    let mut state = ViewState::headless();
    let mut snapshot = Snapshot::default();
    let mut first = true;
    loop {
        let job = {
            let mut slot = lock(&shared);
            loop {
                if slot.quit {
                    return;
                }
                if let Some(job) = slot.job.take() {
                    slot.busy = true;
                    break job;
                }
                slot = shared.1.wait(slot).unwrap_or_else(|p| p.into_inner());
            }
        };
        let laid = lay_out(&egui, &allocator, &mut snapshot, &mut state, job, first);
        first = false;
        let mut slot = lock(&shared);
        slot.done = Some(laid);
        slot.busy = false;
        shared.1.notify_all();
    }
}

/// One layout: refresh the snapshot, run egui, tessellate (`first`: warm the
/// font atlas too).
fn lay_out(
    egui: &egui::Context,
    allocator: &Allocator<AshDevice>,
    snapshot: &mut Snapshot,
    state: &mut ViewState,
    job: LayoutJob,
    first: bool,
) -> Laid {
    let started = Instant::now();
    allocator.refresh_snapshot(snapshot);
    let snapshot_ms = started.elapsed().as_secs_f64() * 1e3;
    state.controls = job.interactive;
    if state.help.is_none() {
        state.help = Some(crate::camera::fly::KEYS_HELP.to_owned());
    }
    let ppp = job.pixels_per_point.max(0.25);
    let mut input = job.input;
    let (width, height) = (job.extent.0 as f32, job.extent.1 as f32);
    vkalloc_heapmap::raster::fit_input(&mut input, width, height, ppp);
    let mut points = [egui::Rect::NOTHING; 2];
    let output = egui.run_ui(input, |ui| {
        if first {
            // All of the panels' glyphs in the first font upload, none later.
            warm_glyphs(ui);
        }
        let data = OverlayData {
            snapshot: Some(snapshot),
            streaming: job.streaming.as_ref(),
            timeline: Some(&job.timeline),
            diff: None,
        };
        points = draw_docked_on(ui, &data, state, egui::Color32::TRANSPARENT);
    });
    let p = output.pixels_per_point;
    let panels = points.map(|r| {
        let r = r.intersect(egui::Rect::EVERYTHING);
        if r.is_positive() {
            [r.min.x * p, r.min.y * p, r.max.x * p, r.max.y * p]
        } else {
            [0.0; 4]
        }
    });
    let primitives = egui.tessellate(output.shapes, p);
    Laid {
        primitives,
        textures: output.textures_delta,
        pixels_per_point: p,
        panels,
        snapshot_ms,
        layout_ms: started.elapsed().as_secs_f64() * 1e3,
    }
}
