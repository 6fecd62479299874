//! The debug overlay: every heap, block and allocation, streaming and a frame
//! timeline, drawn with egui (panels from `vkalloc-heapmap`, shared with the
//! heap-map tool) and rendered by egui-ash-renderer into the tone-mapped frame.
//! Its own buffers and font texture are allocated through vkalloc
//! ([`memory::OverlayAllocator`]), so it shows itself.
//!
//! Each frame: [`Overlay::prepare`] takes the layout finished since the last
//! frame (uploading egui's texture changes) and, at most every
//! [`LAYOUT_INTERVAL`] or at once on input, posts the next one to the layout
//! thread ([`layout`]: snapshot, egui layout, tessellation); the renderer
//! calls [`Overlay::record`] inside the tone-map pass (the GPU part, timed as
//! the `overlay` pass).

pub mod layout;
pub mod memory;

use std::time::Instant;

use ash::vk;
use egui::epaint::ClippedPrimitive;
use egui::TextureId;
use egui_ash_renderer::{DynamicRendering, Options, RenderMode, Renderer as EguiRenderer};
use vkalloc_heapmap::{FrameSample, StreamingInfo, TextureStream, Timeline};

use crate::gpu::{Context, GpuError, GpuMemory, VkCheck};
use layout::{LayoutJob, LayoutWorker};
use memory::OverlayAllocator;

fn gpu_err(call: &'static str, e: egui_ash_renderer::RendererError) -> GpuError {
    match e {
        egui_ash_renderer::RendererError::Vulkan(result) => GpuError::Vk { call, result },
        other => GpuError::Overlay {
            what: "overlay".into(),
            reason: other.to_string(),
        },
    }
}

/// Frames the timeline keeps.
pub const TIMELINE_FRAMES: usize = 300;

/// How often the panels are laid out again, at most, without input: a debug
/// HUD read by a person needs no more than 20 updates a second, and between
/// them the last frame's meshes are drawn again for nothing on the CPU. Any
/// input (a window's mouse or keys) lays out at once; the timeline records
/// every frame regardless.
pub const LAYOUT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

/// The overlay's state and renderer.
pub struct Overlay {
    egui: egui::Context,
    renderer: Option<EguiRenderer<OverlayAllocator>>,
    format: vk::Format,
    uploads: vk::CommandPool,
    worker: Option<LayoutWorker>,
    interactive: bool,
    timeline: Timeline,
    primitives: Vec<ClippedPrimitive>,
    to_free: Vec<TextureId>,
    pixels_per_point: f32,
    /// The panels' pixel rectangles, which the tone-map pass darkens.
    panels: [[f32; 4]; 2],
    last_ops: (u64, u64, u64),
    /// Whether it is drawn (F1 toggles it in a window).
    pub visible: bool,
    /// Milliseconds the render thread spent in the last [`Overlay::prepare`]:
    /// waiting for and installing a finished layout (texture uploads
    /// included) and posting the next job.
    pub cpu_ms: f64,
    /// Whether the last [`Overlay::prepare`] installed a new layout.
    pub laid_out: bool,
    last_layout: Option<Instant>,
    /// The layout thread's milliseconds for the layout installed by the last
    /// [`Overlay::prepare`] (snapshot, egui layout, tessellation), if it did.
    pub layout_ms: Option<f64>,
    /// Of which the snapshot alone.
    pub snapshot_ms: Option<f64>,
}

impl Overlay {
    /// Creates the overlay for targets of `format` (its pipeline is rebuilt when
    /// [`Overlay::record`] sees another format).
    pub fn new(ctx: &Context, mem: &GpuMemory, format: vk::Format) -> Result<Self, GpuError> {
        let renderer = EguiRenderer::with_allocator(
            OverlayAllocator::new(mem.share()),
            ctx.device.clone(),
            Self::mode(format),
            Options {
                in_flight_frames: 1,
                srgb_framebuffer: true,
                ..Options::default()
            },
        )
        .map_err(|e| gpu_err("egui_ash_renderer::Renderer::with_allocator", e))?;
        let egui = egui::Context::default();
        let mut visuals = egui::Visuals::dark();
        // One bitmap per glyph, not one per quarter-pixel offset: with the
        // first layout's warm-up (`warm_glyphs`) the font atlas then holds
        // every glyph the panels draw, and no later layout uploads more
        // (each upload idles the queue in egui-ash-renderer).
        visuals.text_options.subpixel_binning = false;
        egui.set_visuals(visuals);
        // SAFETY: a valid create info on a live device; destroyed in `destroy`.
        let uploads = unsafe {
            ctx.device.create_command_pool(
                &vk::CommandPoolCreateInfo::default()
                    .queue_family_index(ctx.queue_family)
                    .flags(vk::CommandPoolCreateFlags::TRANSIENT),
                None,
            )
        }
        .check("vkCreateCommandPool")?;
        let worker = match LayoutWorker::spawn(egui.clone(), mem.allocator().clone()) {
            Ok(w) => w,
            Err(e) => {
                // SAFETY: the pool was just created and holds no command buffers.
                unsafe { ctx.device.destroy_command_pool(uploads, None) };
                return Err(GpuError::Overlay {
                    what: "overlay layout thread".into(),
                    reason: e.to_string(),
                });
            }
        };
        Ok(Self {
            egui,
            renderer: Some(renderer),
            format,
            uploads,
            worker: Some(worker),
            interactive: true,
            timeline: Timeline::new(TIMELINE_FRAMES),
            primitives: Vec::new(),
            to_free: Vec::new(),
            pixels_per_point: 1.0,
            panels: [[0.0; 4]; 2],
            last_ops: (0, 0, 0),
            visible: true,
            cpu_ms: 0.0,
            laid_out: false,
            last_layout: None,
            layout_ms: None,
            snapshot_ms: None,
        })
    }

    fn mode(format: vk::Format) -> RenderMode {
        RenderMode::DynamicRendering(DynamicRendering {
            color_attachment_format: format,
            depth_attachment_format: None,
            stencil_attachment_format: None,
        })
    }

    /// The egui context (the window feeds it input through egui-winit).
    pub fn egui(&self) -> &egui::Context {
        &self.egui
    }

    /// Records the frame that just finished in the timeline: its GPU time and
    /// texture bytes, with allocation counts read from `mem`.
    pub fn end_frame(&mut self, mem: &GpuMemory, gpu_ms: f64, texture_bytes: u64, budget: u64) {
        let (allocations, frees) = mem.op_counts();
        // vkAllocateMemory calls this frame, from the allocator's running total.
        let calls = mem.allocator().statistics().device_memory_allocations_total;
        let (a0, f0, o0) = self.last_ops;
        self.timeline.push(FrameSample {
            gpu_ms,
            allocations: allocations.saturating_sub(a0) as u32,
            frees: frees.saturating_sub(f0) as u32,
            device_allocations: calls.saturating_sub(o0) as u32,
            texture_bytes,
            texture_budget: budget,
        });
        self.last_ops = (allocations, frees, calls);
    }

    /// Installs the layout finished since the last frame (waiting for it if
    /// the layout thread is still at it, and uploading egui's texture
    /// changes), then posts the next layout for a target of `extent` pixels
    /// with `input` (headless: none) when one is due: at most every
    /// [`LAYOUT_INTERVAL`], at once on input. `streaming` is called only then.
    pub fn prepare(
        &mut self,
        ctx: &Context,
        extent: vk::Extent2D,
        pixels_per_point: f32,
        streaming: impl FnOnce() -> Option<StreamingInfo>,
        input: egui::RawInput,
    ) -> Result<(), GpuError> {
        let started = Instant::now();
        self.laid_out = false;
        self.layout_ms = None;
        self.snapshot_ms = None;
        if self.install(ctx)? {
            self.laid_out = true;
        }
        if !self.visible {
            self.primitives.clear();
            self.cpu_ms = started.elapsed().as_secs_f64() * 1e3;
            return Ok(());
        }
        let quiet = input.events.is_empty();
        let due = self
            .last_layout
            .is_none_or(|t| started.duration_since(t) >= LAYOUT_INTERVAL);
        if !quiet || due || self.primitives.is_empty() {
            let job = LayoutJob {
                input,
                extent: (extent.width, extent.height),
                pixels_per_point,
                streaming: streaming(),
                timeline: self.timeline.clone(),
                interactive: self.interactive,
            };
            let worker = self.worker.as_ref().expect("worker lives until destroy");
            if worker.post(job) {
                self.last_layout = Some(started);
            }
            // The very first layout is drawn on its own frame (there is nothing
            // older to draw).
            if self.primitives.is_empty() && self.install(ctx)? {
                self.laid_out = true;
            }
        }
        self.cpu_ms = started.elapsed().as_secs_f64() * 1e3;
        Ok(())
    }

    /// Takes the finished layout, if one was posted; true if it installed one.
    fn install(&mut self, ctx: &Context) -> Result<bool, GpuError> {
        let worker = self.worker.as_ref().expect("worker lives until destroy");
        let laid = worker.take().map_err(|reason| GpuError::Overlay {
            what: "overlay".into(),
            reason: reason.into(),
        })?;
        let Some(mut laid) = laid else {
            return Ok(false);
        };
        let renderer = self
            .renderer
            .as_mut()
            .expect("renderer lives until destroy");
        let mut deltas: Vec<_> = laid.textures.set.drain().collect();
        for (id, d) in &deltas {
            for d in d {
                log::debug!(
                    "overlay: texture {id:?} update at {:?}, {:?} texels",
                    d.pos,
                    d.image.size()
                );
            }
        }
        // Whole-texture sets first: a partial update needs its texture.
        deltas.sort_by_key(|(_, d)| !d.iter().any(|d| d.pos.is_none()));
        self.to_free.extend(laid.textures.free.drain());
        for (id, deltas) in &deltas {
            for delta in deltas {
                renderer
                    .set_texture(ctx.queue, self.uploads, *id, delta)
                    .map_err(|e| gpu_err("egui_ash_renderer::Renderer::set_texture", e))?;
            }
        }
        self.primitives = laid.primitives;
        self.pixels_per_point = laid.pixels_per_point;
        self.panels = laid.panels;
        self.layout_ms = Some(laid.layout_ms);
        self.snapshot_ms = Some(laid.snapshot_ms);
        Ok(true)
    }

    /// The tone-map pass's colour scale under the panels' background and
    /// the panels' pixel rectangles, while the overlay draws: the pass scales
    /// the colour under them as egui's translucent black would (the overlay
    /// draws no background of its own), so the frame's pixels are written
    /// once. `None`: nothing to dim.
    pub fn panel_dim(&self) -> Option<(f32, [[f32; 4]; 2])> {
        if !self.visible || self.primitives.is_empty() {
            return None;
        }
        let dim = 1.0 - f32::from(vkalloc_heapmap::PANEL_BACKGROUND_ALPHA) / 255.0;
        Some((dim, self.panels))
    }

    /// Records the overlay's draws; rendering into a `format` target of `extent`
    /// has begun.
    ///
    /// # Safety
    /// `cmd` is recording inside dynamic rendering on `ctx`'s device; the frame's
    /// fence is waited on before [`Overlay::prepare`] runs again.
    pub unsafe fn record(
        &mut self,
        cmd: vk::CommandBuffer,
        format: vk::Format,
        extent: vk::Extent2D,
    ) -> Result<(), GpuError> {
        if !self.visible || self.primitives.is_empty() {
            return Ok(());
        }
        let renderer = self
            .renderer
            .as_mut()
            .expect("renderer lives until destroy");
        if format != self.format {
            renderer
                .set_render_mode(Self::mode(format))
                .map_err(|e| gpu_err("egui_ash_renderer::Renderer::set_render_mode", e))?;
            self.format = format;
        }
        renderer
            .cmd_draw(cmd, extent, self.pixels_per_point, &self.primitives)
            .map_err(|e| gpu_err("egui_ash_renderer::Renderer::cmd_draw", e))
    }

    /// Frees textures egui no longer uses; call after the frame's fence.
    pub fn after_frame(&mut self) {
        if let Some(r) = self.renderer.as_mut() {
            for id in self.to_free.drain(..) {
                if let Err(e) = r.free_texture(id) {
                    log::error!("overlay: free_texture: {e}");
                }
            }
        }
    }

    /// Shows or hides the filter widgets (hidden in headless frames).
    pub fn set_interactive(&mut self, interactive: bool) {
        self.interactive = interactive;
    }

    /// Shows or hides the panels (F1 in a window).
    pub fn toggle(&mut self) {
        self.visible = !self.visible;
    }

    /// Whether the pixel (`x`, `y`) lies in one of the panels drawn last
    /// (there the overlay's widgets take the mouse).
    pub fn covers(&self, x: f32, y: f32) -> bool {
        self.visible
            && self
                .panels
                .iter()
                .any(|r| x >= r[0] && y >= r[1] && x < r[2] && y < r[3])
    }

    /// Destroys the renderer and its memory; the device must be idle.
    pub fn destroy(&mut self, ctx: &Context) {
        drop(self.worker.take());
        drop(self.renderer.take());
        // SAFETY: the device is idle; texture uploads waited for their queue.
        unsafe { ctx.device.destroy_command_pool(self.uploads, None) };
    }
}

/// What the overlay's streaming panel shows of a texture set before a streamer
/// exists: the texture pool's usage against the budget and each texture's
/// resident mip. The streamer fills the rest of [`StreamingInfo`] later.
pub fn streaming_info(
    stats: &vkalloc::stats::Statistics,
    budget: u64,
    panel: crate::streaming::Panel,
) -> StreamingInfo {
    let pool = stats.pools.iter().find(|p| p.name == "textures");
    StreamingInfo {
        pool_bytes: pool.map_or(0, |p| p.usage.allocation_bytes),
        pool_committed: pool.map_or(0, |p| p.usage.block_bytes),
        budget,
        textures: panel
            .rows
            .into_iter()
            .map(|r| TextureStream {
                name: r.name,
                resident_mip: r.resident_mip,
                resident_bytes: r.resident_bytes,
                wanted_mip: r.wanted_mip,
                wanted_bytes: r.wanted_bytes,
            })
            .collect(),
        pending_loads: Some(panel.pending_loads),
        upload_bytes_per_s: Some(panel.read_bytes_per_s),
        evictions: None,
    }
}

/// The overlay's scale on a target `height` pixels tall without a window: one
/// point per pixel at 1080 lines.
pub fn headless_scale(height: u32) -> f32 {
    (height as f32 / 1080.0).clamp(0.5, 4.0)
}

/// `--extra-allocations`: small buffers that load the overlay.
#[derive(Default)]
pub struct ExtraAllocations(Vec<crate::gpu::memory::Buffer>);

impl ExtraAllocations {
    /// Makes `count` more buffers of 4 KiB.
    pub fn fill(&mut self, mem: &GpuMemory, count: u32) -> Result<(), GpuError> {
        let info = vk::BufferCreateInfo::default()
            .size(4096)
            .usage(vk::BufferUsageFlags::UNIFORM_BUFFER)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        let opts = crate::gpu::memory::MemOptions::new(
            crate::gpu::memory::MemoryUsage::GpuOnly,
            "extra uniform (overlay load)",
        );
        for _ in 0..count {
            self.0.push(mem.create_buffer(&info, &opts)?);
        }
        Ok(())
    }

    /// Frees them; the GPU never uses them.
    pub fn destroy(&mut self, mem: &GpuMemory) {
        for buffer in self.0.drain(..) {
            // SAFETY: no command buffer references these buffers.
            unsafe { mem.destroy_buffer(buffer) };
        }
    }
}

/// Whether `event` is the overlay's toggle key (F1) going down.
pub fn is_toggle_key(event: &winit::event::WindowEvent) -> bool {
    use winit::keyboard::{Key, NamedKey};
    matches!(
        event,
        winit::event::WindowEvent::KeyboardInput { event, .. }
            if event.state.is_pressed() && !event.repeat && event.logical_key == Key::Named(NamedKey::F1)
    )
}
