//! The headless loop (and, with `--window`, the windowed one): set-up, frames,
//! PNGs and the report.

use std::path::Path;
use std::time::Instant;

use ash::vk;

use crate::cli::{Flags, SceneKind, Settings};
use crate::frame::{Output, Renderer, ScenePass, TrianglePass};
use crate::gpu::{Context, ContextDesc, GpuError, GpuMemory};
use crate::report::{FrameRecord, Report};

/// A failure of the demo, shown to the user.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// Vulkan or allocation.
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// Files.
    #[error("{0}")]
    Io(String),
    /// Validation errors appeared.
    #[error("the validation layer reported {0} error(s); see the messages above")]
    Validation(u32),
}

/// Writes tightly packed RGBA8 pixels as a PNG.
pub fn write_png(path: &Path, width: u32, height: u32, rgba: &[u8]) -> Result<(), AppError> {
    image::save_buffer(path, rgba, width, height, image::ExtendedColorType::Rgba8)
        .map_err(|e| AppError::Io(format!("cannot write {}: {e}", path.display())))
}

/// Runs the demo with `flags`.
pub fn run(flags: &Flags) -> Result<(), AppError> {
    let desc = ContextDesc { device_index: flags.device, validation: !flags.no_validation, surface_extensions: vec![] };
    if flags.list_devices {
        let ctx = Context::new(&desc, &|_, _, _, _| true, &mut |_, instance| {
            for line in Context::list_devices(instance) {
                println!("{line}");
            }
            Ok(())
        })?;
        drop(ctx);
        return Ok(());
    }
    if flags.window {
        return Err(AppError::Io("--window is not implemented yet".into()));
    }
    let ctx = Context::new(&desc, &|_, _, _, _| true, &mut |_, _| Ok(()))?;
    let settings = Settings::resolve(flags, ctx.info.is_cpu);
    println!("device: {} ({}, Vulkan {})", ctx.info.name, ctx.info.device_type, ctx.info.api_version);
    if settings.scaled_down {
        println!(
            "software rasterizer: defaults scaled down to {}x{}, {} texels, {} frames (set --size/--texture-size/--frames to override)",
            settings.width, settings.height, settings.texture_size, settings.frames
        );
    }
    let result = run_headless(&ctx, &settings);
    let messages = ctx.messages.clone();
    drop(ctx);
    let errors = messages.errors.load(std::sync::atomic::Ordering::Relaxed);
    result?;
    if errors > 0 {
        return Err(AppError::Validation(errors));
    }
    Ok(())
}

fn run_headless(ctx: &Context, settings: &Settings) -> Result<(), AppError> {
    std::fs::create_dir_all(&settings.out)
        .map_err(|e| AppError::Io(format!("cannot create {}: {e}", settings.out.display())))?;
    let mem = GpuMemory::new(ctx)?;
    let extent = vk::Extent2D { width: settings.width, height: settings.height };
    let mut renderer = Renderer::new(ctx, &mem, extent)?;
    let mut scene: Box<dyn ScenePass> = match settings.scene {
        SceneKind::Triangle | SceneKind::Gallery => Box::new(TrianglePass::new(&ctx.device)?),
    };
    let mut frames = Vec::new();
    let started = Instant::now();
    let mut result = Ok(());
    for i in 0..settings.frames {
        mem.begin_frame(i as u64);
        let t = match renderer.render(ctx, scene.as_ref(), Output::Headless, None, None) {
            Ok(t) => t,
            Err(e) => {
                result = Err(e.into());
                break;
            }
        };
        let pixels = renderer.targets.read_pixels(&mem);
        let path = settings.out.join(format!("frame_{i:04}.png"));
        if let Err(e) = write_png(&path, settings.width, settings.height, &pixels) {
            result = Err(e);
            break;
        }
        frames.push(FrameRecord::new(i, &t, 0, settings.texture_budget));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let mut report = Report {
        settings: settings.clone(),
        device: serde_json::json!({
            "name": ctx.info.name, "type": ctx.info.device_type, "api_version": ctx.info.api_version,
            "driver_version": ctx.info.driver_version, "bc_textures": ctx.info.bc_textures,
        }),
        bake_seconds: 0.0,
        load_seconds: 0.0,
        frames,
        gpu_frame_ms: Default::default(),
        wall_frame_ms: Default::default(),
        peak_texture_bytes: 0,
        validation_errors: ctx.error_count(),
        allocator: mem.statistics_json(),
        summary: String::new(),
    };
    report.finish();
    ctx.wait_idle();
    scene.destroy(ctx, &mem);
    renderer.destroy(ctx, &mem);
    result?;
    let path = settings.out.join("report.json");
    let json = serde_json::to_string_pretty(&report).expect("report serializes");
    std::fs::write(&path, json).map_err(|e| AppError::Io(format!("cannot write {}: {e}", path.display())))?;
    println!("{} ({elapsed:.1} s; frames and report.json in {})", report.summary, settings.out.display());
    Ok(())
}
