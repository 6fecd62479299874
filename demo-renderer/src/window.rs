//! `--window`: the same frames shown in a winit window through a swapchain
//! (resize, close, vsync). `--frames N` closes the window after N frames;
//! `--screenshot FILE` saves the last one, read back from the swapchain image.

use std::cell::Cell;
use std::path::PathBuf;

use ash::vk;
use raw_window_handle::{HasDisplayHandle, HasWindowHandle};
use winit::application::ApplicationHandler;
use winit::dpi::PhysicalSize;
use winit::event::{DeviceEvent, DeviceId, WindowEvent};
use winit::event_loop::{ActiveEventLoop, EventLoop};
use winit::window::{Window, WindowId};

use crate::app::{build_report, make_scene, write_png, write_report, AppError};
use crate::camera::fly::FlyControls;
use crate::camera::{Camera, CameraPose};
use crate::cli::{Flags, Settings};
use crate::frame::{Output, Renderer, ScenePass};
use crate::gpu::swapchain::{Acquired, Swapchain};
use crate::gpu::{Context, ContextDesc, GpuError, GpuMemory};
use crate::report::FrameRecord;

/// Frames of one loop of the camera path when `--frames` is not given.
const PATH_FRAMES: u32 = 1200;

struct Live {
    // Declared in teardown order (see `App::teardown`).
    scene: Box<dyn ScenePass>,
    renderer: Renderer,
    swapchain: Swapchain,
    format_index: usize,
    mem: GpuMemory,
    surface: vk::SurfaceKHR,
    ctx: Context,
    window: Window,
    settings: Settings,
    bake_seconds: f64,
    load_seconds: f64,
    /// What the streamer's pre-fill did (`None`: it did not run).
    prefill: Option<crate::streaming::Prefill>,
    resize: bool,
    egui_input: egui_winit::State,
    /// The fly camera and its keys (`None`: the scene has no camera).
    fly: Option<FlyControls>,
    /// Frames the script has shown: it resumes there after flying.
    script_frame: u32,
    /// When the last frame was prepared (the fly camera's time step).
    last_frame: std::time::Instant,
    /// The pose the last frame showed.
    shown: Option<CameraPose>,
    /// `--record-path`: the poses shown, frame by frame.
    recorder: Option<crate::camera::path::PathRecorder>,
}

struct App {
    flags: Flags,
    surface_extensions: Vec<*const std::ffi::c_char>,
    live: Option<Live>,
    error: Option<AppError>,
    frames: Vec<FrameRecord>,
    validation_errors: u32,
}

/// Runs the windowed demo.
pub fn run(flags: &Flags) -> Result<(), AppError> {
    let event_loop = EventLoop::new().map_err(|e| {
        AppError::Io(format!("cannot open a window: {e} (is DISPLAY or WAYLAND_DISPLAY set? run under Xvfb for no screen)"))
    })?;
    let display = event_loop
        .display_handle()
        .map_err(|e| AppError::Io(format!("no display handle: {e}")))?;
    let surface_extensions = ash_window::enumerate_required_extensions(display.as_raw())
        .map_err(|e| {
            AppError::Gpu(GpuError::Vk {
                call: "ash_window::enumerate_required_extensions",
                result: e,
            })
        })?
        .to_vec();
    let mut app = App {
        flags: flags.clone(),
        surface_extensions,
        live: None,
        error: None,
        frames: Vec::new(),
        validation_errors: 0,
    };
    event_loop
        .run_app(&mut app)
        .map_err(|e| AppError::Io(format!("event loop: {e}")))?;
    app.teardown();
    if let Some(e) = app.error {
        return Err(e);
    }
    if app.validation_errors > 0 {
        return Err(AppError::Validation(app.validation_errors));
    }
    Ok(())
}

impl Live {
    /// The fly camera's share of a window event: its keys, mouse and wheel
    /// (those the overlay's widgets take excepted), `P`, the cursor held
    /// while looking.
    fn fly_event(&mut self, event: &WindowEvent) {
        let Some(fly) = self.fly.as_mut() else {
            return;
        };
        let (x, y) = fly.cursor();
        let (pointer, keyboard) = match self.renderer.overlay.as_ref() {
            Some(o) if o.visible => (o.covers(x, y), o.egui().egui_wants_keyboard_input()),
            _ => (false, false),
        };
        let r = fly.on_window_event(event, pointer, keyboard);
        if r.toggle {
            if let Some(shown) = self.shown {
                fly.toggle(shown);
            }
            let title = if fly.flying {
                "vkalloc demo: fly camera (P: scripted path)"
            } else {
                "vkalloc demo: scripted path (P: fly camera)"
            };
            self.window.set_title(title);
            println!("camera: {title}");
        }
        if let Some(grab) = r.grab {
            use winit::window::CursorGrabMode;
            // Locked where the platform has it (Wayland), else confined (X11);
            // where neither works the cursor stays free and looking still turns.
            let _ = if grab {
                self.window
                    .set_cursor_grab(CursorGrabMode::Locked)
                    .or_else(|_| self.window.set_cursor_grab(CursorGrabMode::Confined))
            } else {
                self.window.set_cursor_grab(CursorGrabMode::None)
            };
            self.window.set_cursor_visible(!grab);
        }
    }
}

impl App {
    fn start(&mut self, event_loop: &ActiveEventLoop) -> Result<(), AppError> {
        let (w, h) = self.flags.size.unwrap_or((1280, 720));
        let attrs = Window::default_attributes()
            .with_title("vkalloc demo")
            .with_inner_size(PhysicalSize::new(w, h));
        let window = event_loop
            .create_window(attrs)
            .map_err(|e| AppError::Io(format!("cannot create a window: {e}")))?;
        let desc = ContextDesc {
            device_index: self.flags.device,
            validation: !self.flags.no_validation,
            bindless: !self.flags.no_bindless,
            surface_extensions: self.surface_extensions.clone(),
            upload_queue: self.flags.upload_queue.unwrap_or_default(),
            upload_split: self.flags.tune.upload_split,
        };
        let surface = Cell::new(vk::SurfaceKHR::null());
        let display = window
            .display_handle()
            .map_err(|e| AppError::Io(e.to_string()))?
            .as_raw();
        let handle = window
            .window_handle()
            .map_err(|e| AppError::Io(e.to_string()))?
            .as_raw();
        let ctx = Context::new(
            &desc,
            &|entry, instance, pd, family| {
                Swapchain::supports(entry, instance, pd, family, surface.get())
            },
            &mut |entry, instance| {
                // SAFETY: the handles come from a live window that outlives the surface
                // (the surface is destroyed in `teardown`, before the window is dropped).
                let s =
                    unsafe { ash_window::create_surface(entry, instance, display, handle, None) }
                        .map_err(|e| GpuError::Vk {
                        call: "vkCreate*SurfaceKHR",
                        result: e,
                    })?;
                surface.set(s);
                Ok(())
            },
        )?;
        let surface = surface.get();
        let mut settings = Settings::resolve(&self.flags, ctx.info.is_cpu);
        println!(
            "device: {} ({}, Vulkan {})",
            ctx.info.name, ctx.info.device_type, ctx.info.api_version
        );
        if let Some(line) = settings.fit_shading(ctx.info.visibility_shading, ctx.info.is_cpu) {
            println!("{line}");
        }
        let mem = GpuMemory::new(&ctx)?;
        let size = window.inner_size();
        let swapchain =
            Swapchain::new(&ctx, surface, (size.width.max(1), size.height.max(1)), true)?;
        settings.width = swapchain.extent.width;
        settings.height = swapchain.extent.height;
        let mut renderer = Renderer::new(
            &ctx,
            &mem,
            swapchain.extent,
            settings.effects,
            settings.visibility_buffer(),
        )?;
        let format_index = renderer.add_output_format(&ctx.device, swapchain.format)?;
        let mut overlay = crate::overlay::Overlay::new(&ctx, &mem, swapchain.format)?;
        overlay.visible = self.flags.overlay;
        let egui_input = egui_winit::State::new(
            overlay.egui().clone(),
            egui::ViewportId::ROOT,
            &window,
            Some(window.scale_factor() as f32),
            None,
            None,
        );
        renderer.overlay = Some(overlay);
        if self.flags.out.is_some() {
            // As headless runs do: `heap.json` and `report.json` go there.
            std::fs::create_dir_all(&settings.out).map_err(|e| {
                AppError::Io(format!("cannot create {}: {e}", settings.out.display()))
            })?;
            mem.dump_on_failure(settings.out.clone());
        }
        let recorder = settings
            .record_path
            .as_deref()
            .map(crate::camera::path::PathRecorder::create)
            .transpose()?;
        let (mut scene, bake_seconds, load_seconds) =
            make_scene(&ctx, &mem, &settings, swapchain.extent)?;
        // Before the first frame (`frame` prepares frame 0 of this period).
        let period = self.flags.frames.unwrap_or(PATH_FRAMES);
        // The fly camera starts at the script's first pose.
        let fly = scene.camera_rig().map(|rig| {
            let start = rig.script_pose(0, period);
            rig.set_camera(Camera::Free(start));
            println!("{}", crate::camera::fly::KEYS_HELP);
            FlyControls::new(start)
        });
        let prefill = match crate::app::prefill(&ctx, &mem, scene.as_mut(), &settings, period) {
            Ok(p) => p,
            Err(e) => {
                ctx.wait_idle();
                scene.destroy(&ctx, &mem);
                return Err(e.into());
            }
        };
        self.live = Some(Live {
            scene,
            renderer,
            swapchain,
            format_index,
            mem,
            surface,
            ctx,
            window,
            settings,
            bake_seconds,
            load_seconds,
            prefill,
            resize: false,
            egui_input,
            fly,
            script_frame: 0,
            last_frame: std::time::Instant::now(),
            shown: None,
            recorder,
        });
        Ok(())
    }

    fn frame(&mut self, event_loop: &ActiveEventLoop) -> Result<(), AppError> {
        let Some(live) = self.live.as_mut() else {
            return Ok(());
        };
        let size = live.window.inner_size();
        if size.width == 0 || size.height == 0 {
            return Ok(()); // minimised
        }
        if live.resize {
            live.ctx.wait_idle();
            live.swapchain
                .recreate(&live.ctx, (size.width, size.height), true)?;
            live.renderer
                .resize(&live.ctx, &live.mem, live.swapchain.extent)?;
            live.format_index = live
                .renderer
                .add_output_format(&live.ctx.device, live.swapchain.format)?;
            live.scene.resize(live.swapchain.extent);
            live.resize = false;
        }
        let done = self.frames.len() as u32;
        let total = self.flags.frames;
        let period = total.unwrap_or(PATH_FRAMES);
        live.mem.begin_frame(done as u64);
        let now = std::time::Instant::now();
        let seconds = (now - std::mem::replace(&mut live.last_frame, now)).as_secs_f32();
        // The script's frame: it advances while the script drives.
        let mut frame = done % period;
        if let (Some(fly), Some(rig)) = (live.fly.as_mut(), live.scene.camera_rig()) {
            frame = live.script_frame % period;
            match fly.advance(seconds) {
                Some(pose) => rig.set_camera(Camera::Free(pose)),
                None => {
                    rig.set_camera(Camera::Script);
                    live.script_frame += 1;
                }
            }
            live.shown = Some(rig.shot(frame, period).pose);
        }
        live.scene.prepare(&live.ctx, &live.mem, frame, period)?;
        if let (Some(rec), Some(pose)) = (live.recorder.as_mut(), live.shown) {
            rec.record(&pose)?;
        }
        let (index, acquired) = match live.swapchain.acquire()? {
            Acquired::Image(i, s) => (i, s),
            Acquired::OutOfDate => {
                live.resize = true;
                return Ok(());
            }
        };
        let input = live.egui_input.take_egui_input(&live.window);
        crate::overlay_loop::before_frame(
            &mut live.renderer,
            &live.ctx,
            &live.mem,
            live.scene.as_ref(),
            live.settings.texture_budget,
            live.window.scale_factor() as f32,
            input,
        )?;
        let last = total.is_some_and(|n| done + 1 >= n);
        let screenshot = last && self.flags.screenshot.is_some() && live.swapchain.can_read_back;
        let output = Output::Swapchain {
            image: live.swapchain.images[index as usize],
            view: live.swapchain.views[index as usize],
            format_index: live.format_index,
            screenshot,
        };
        let submitted = live.renderer.submit(
            &live.ctx,
            live.scene.as_ref(),
            output,
            Some(acquired),
            Some(live.swapchain.rendered(index)),
        )?;
        // Work that overlaps the GPU's frame; the frame is waited for either way.
        let late = match live.scene.streaming_mut() {
            Some(s) => s.after_submit(&live.ctx, &live.mem),
            None => Ok(()),
        };
        let t = live.renderer.finish(&live.ctx, submitted)?;
        late?;
        if screenshot {
            let mut pixels = live.renderer.targets.read_pixels(&live.mem);
            if matches!(
                live.swapchain.format,
                vk::Format::B8G8R8A8_SRGB | vk::Format::B8G8R8A8_UNORM
            ) {
                for p in pixels.chunks_exact_mut(4) {
                    p.swap(0, 2);
                }
            }
            let path: PathBuf = self.flags.screenshot.clone().unwrap_or_default();
            let e = live.swapchain.extent;
            write_png(&path, e.width, e.height, &pixels)?;
            println!("screenshot: {}", path.display());
        }
        if !live.swapchain.present(&live.ctx, index)? {
            live.resize = true;
        }
        let mut record = FrameRecord::new(
            done,
            &t,
            live.scene.texture_bytes(),
            live.settings.texture_budget,
        );
        crate::overlay_loop::after_frame(&mut live.renderer, &live.mem, &mut record);
        self.frames.push(record);
        if last {
            event_loop.exit();
        }
        Ok(())
    }

    fn fail(&mut self, event_loop: &ActiveEventLoop, e: AppError) {
        if self.error.is_none() {
            self.error = Some(e);
        }
        event_loop.exit();
    }

    fn teardown(&mut self) {
        let Some(mut live) = self.live.take() else {
            return;
        };
        live.ctx.wait_idle();
        live.settings.frames = self.frames.len() as u32;
        let mut report = build_report(
            &live.ctx,
            &live.mem,
            &live.settings,
            std::mem::take(&mut self.frames),
            live.bake_seconds,
            live.load_seconds,
            live.scene.streaming().and_then(|s| s.residency()),
        );
        report.set_prefill(live.prefill.as_ref());
        report.set_aliasing(live.renderer.aliasing_report());
        if let Some(rig) = live.scene.camera_rig() {
            // The camera of the last frame (P switches during the run).
            report.set_lookahead(rig.lookahead());
        }
        if self.flags.out.is_some() {
            let heap = live.settings.out.join("heap.json");
            if let Err(e) = live.mem.write_dump(&heap) {
                eprintln!("cannot write {}: {e}", heap.display());
            }
        }
        if let Some(Err(e)) = live.recorder.take().map(|r| r.finish()) {
            self.error.get_or_insert(e.into());
        }
        live.scene.destroy(&live.ctx, &live.mem);
        live.renderer.destroy(&live.ctx, &live.mem);
        live.swapchain.destroy(&live.ctx);
        let Live {
            mem,
            surface,
            ctx,
            window,
            settings,
            ..
        } = live;
        drop(mem);
        let loader = ash::khr::surface::Instance::new(&ctx.entry, &ctx.instance);
        // SAFETY: the swapchain using the surface is destroyed and the device idle.
        unsafe { loader.destroy_surface(surface, None) };
        let messages = ctx.messages.clone();
        drop(ctx);
        drop(window);
        self.validation_errors = messages.errors.load(std::sync::atomic::Ordering::Relaxed);
        if self.flags.out.is_some() {
            if let Err(e) = write_report(&settings.out, &report) {
                self.error.get_or_insert(e);
            }
        }
        println!("{}", report.summary);
    }
}

impl ApplicationHandler for App {
    fn resumed(&mut self, event_loop: &ActiveEventLoop) {
        if self.live.is_none() && self.error.is_none() {
            if let Err(e) = self.start(event_loop) {
                self.fail(event_loop, e);
            }
        }
    }

    fn window_event(&mut self, event_loop: &ActiveEventLoop, _id: WindowId, event: WindowEvent) {
        if let Some(l) = self.live.as_mut() {
            if crate::overlay::is_toggle_key(&event) {
                if let Some(o) = l.renderer.overlay.as_mut() {
                    o.toggle();
                }
            } else {
                let _ = l.egui_input.on_window_event(&l.window, &event);
            }
            l.fly_event(&event);
        }
        match event {
            WindowEvent::CloseRequested => event_loop.exit(),
            WindowEvent::Resized(_) => {
                if let Some(l) = self.live.as_mut() {
                    l.resize = true;
                }
            }
            WindowEvent::RedrawRequested => {
                if let Err(e) = self.frame(event_loop) {
                    self.fail(event_loop, e);
                }
            }
            _ => {}
        }
    }

    fn device_event(&mut self, _: &ActiveEventLoop, _: DeviceId, event: DeviceEvent) {
        if let (Some(l), DeviceEvent::MouseMotion { delta }) = (self.live.as_mut(), event) {
            if let Some(fly) = l.fly.as_mut() {
                fly.on_mouse_motion(delta.0, delta.1);
            }
        }
    }

    fn about_to_wait(&mut self, _event_loop: &ActiveEventLoop) {
        if let Some(l) = self.live.as_ref() {
            l.window.request_redraw();
        }
    }
}
