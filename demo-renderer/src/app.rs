//! The headless loop: set-up, frames, PNGs and the report; and the pieces the
//! windowed loop ([`crate::window`], chosen by the binary for `--window`)
//! shares with it.

use std::path::Path;
use std::time::Instant;

use ash::vk;

use crate::camera::path::{PathRecorder, RecordedPath};
use crate::camera::Camera;
use crate::cli::{Flags, SceneKind, Settings, StreamingMode, TextureChoice};
use crate::frame::gallery::GalleryPass;
use crate::frame::{Output, Renderer, ScenePass, TrianglePass};
use crate::gpu::{Context, ContextDesc, GpuError, GpuMemory};
use crate::materials::textures::Residency;
use crate::materials::{ensure_baked, TextureSet};
use crate::report::{FrameRecord, Report};
use crate::scene::Gallery;
use crate::streaming::{Prefill, StreamConfig};

/// A failure of the demo, shown to the user.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// Vulkan or allocation.
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// Files.
    #[error("{0}")]
    Io(String),
    /// A recorded camera path (`--camera-path`, `--record-path`).
    #[error(transparent)]
    CameraPath(#[from] crate::camera::path::PathError),
    /// Validation errors appeared.
    #[error("the validation layer reported {0} error(s); see the messages above")]
    Validation(u32),
}

/// Writes tightly packed RGBA8 pixels as a PNG, with the encoder's fast compression:
/// a 4K frame takes about 0.1 s instead of seconds at the default level (files about
/// 40% larger), which is what a `--png-every 1` reference run of 240 frames waits for.
pub fn write_png(path: &Path, width: u32, height: u32, rgba: &[u8]) -> Result<(), AppError> {
    use image::codecs::png::{CompressionType, FilterType, PngEncoder};
    use image::ImageEncoder;
    let err =
        |e: &dyn std::fmt::Display| AppError::Io(format!("cannot write {}: {e}", path.display()));
    let file = std::fs::File::create(path).map_err(|e| err(&e))?;
    let mut out = std::io::BufWriter::new(file);
    PngEncoder::new_with_quality(&mut out, CompressionType::Fast, FilterType::Adaptive)
        .write_image(rgba, width, height, image::ExtendedColorType::Rgba8)
        .map_err(|e| err(&e))?;
    std::io::Write::flush(&mut out).map_err(|e| err(&e))
}

/// Runs the demo headless with `flags` (or lists the devices); `--window`
/// runs [`crate::window::run`] instead (the binary chooses).
pub fn run(flags: &Flags) -> Result<(), AppError> {
    let desc = ContextDesc {
        device_index: flags.device,
        validation: !flags.no_validation,
        bindless: !flags.no_bindless,
        surface_extensions: vec![],
        upload_queue: flags.upload_queue.unwrap_or_default(),
        upload_split: flags.tune.upload_split,
    };
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
    // A bad path fails before the device starts.
    let replay = match &flags.camera_path {
        Some(file) => Some(std::sync::Arc::new(RecordedPath::load(file)?)),
        None => None,
    };
    let ctx = Context::new(&desc, &|_, _, _, _| true, &mut |_, _| Ok(()))?;
    let mut settings = Settings::resolve(flags, ctx.info.is_cpu);
    if let Some(path) = &replay {
        settings.frames = path.frames_for(flags.frames)?;
    }
    println!(
        "device: {} ({}, Vulkan {})",
        ctx.info.name, ctx.info.device_type, ctx.info.api_version
    );
    if let Some(line) = settings.fit_shading(ctx.info.visibility_shading, ctx.info.is_cpu) {
        println!("{line}");
    }
    settings.residency = settings
        .residency
        .for_run(
            settings.streaming,
            ctx.info.bindless,
            settings.visibility_buffer(),
            settings.tuning.atlas_emulation.is_some(),
        )
        .map_err(AppError::Io)?;
    if let Some(mode) = settings.tuning.atlas_emulation {
        println!(
            "--tune atlas-emulation={mode}: {}",
            if ctx.info.bindless {
                "maps sampled as a page atlas would sample them"
            } else {
                "not available here (no bindless texture array with non-uniform indexing): the ordinary sampling"
            }
        );
    }
    if settings.scaled_down {
        println!(
            "software rasterizer: defaults scaled down to {}x{}, {} texels, {} frames (set --size/--texture-size/--frames to override)",
            settings.width, settings.height, settings.texture_size, settings.frames
        );
    }
    let result = run_headless(&ctx, &settings, replay);
    let messages = ctx.messages.clone();
    drop(ctx);
    let errors = messages.errors.load(std::sync::atomic::Ordering::Relaxed);
    result?;
    if errors > 0 {
        return Err(AppError::Validation(errors));
    }
    Ok(())
}

/// A diagnostic (`--tune idle-ms=N`): the GPU left idle for N milliseconds
/// after each headless frame (the render thread sleeps once the frame is
/// done), to find how long an idle GPU keeps its clock: the tile streamer's
/// binds leave it idle that way at small budgets (BENCHMARKS.md).
fn idle_after_frame(settings: &Settings) -> Option<std::time::Duration> {
    let ms = settings.tuning.idle_ms?;
    (ms > 0.0 && ms.is_finite()).then(|| std::time::Duration::from_secs_f64(ms.min(1e4) / 1e3))
}

fn run_headless(
    ctx: &Context,
    settings: &Settings,
    replay: Option<std::sync::Arc<RecordedPath>>,
) -> Result<(), AppError> {
    std::fs::create_dir_all(&settings.out)
        .map_err(|e| AppError::Io(format!("cannot create {}: {e}", settings.out.display())))?;
    let mut recorder = settings
        .record_path
        .as_deref()
        .map(PathRecorder::create)
        .transpose()?;
    let mem = GpuMemory::new(ctx)?;
    let extent = vk::Extent2D {
        width: settings.width,
        height: settings.height,
    };
    mem.dump_on_failure(settings.out.clone());
    if let Some(path) = &settings.record_trace {
        let name = format!(
            "demo-{}x{}-{}-budget{}MiB",
            settings.width,
            settings.height,
            match settings.streaming {
                crate::streaming::Mode::On => "streaming",
                crate::streaming::Mode::Off => "static",
            },
            settings.texture_budget >> 20
        );
        mem.record_trace(path, &name)
            .map_err(|e| AppError::Io(format!("--record-trace {}: {e}", path.display())))?;
    }
    let mut renderer = Renderer::new(
        ctx,
        &mem,
        extent,
        settings.effects,
        settings.visibility_buffer(),
    )?;
    let (mut scene, bake_seconds, load_seconds) = match make_scene(ctx, &mem, settings, extent) {
        Ok(x) => x,
        Err(e) => {
            renderer.destroy(ctx, &mem);
            return Err(e);
        }
    };
    if let (Some(path), Some(rig)) = (replay, scene.camera_rig()) {
        rig.set_camera(Camera::Recorded(path));
    }
    let mut extra = crate::overlay::ExtraAllocations::default();
    if let Err(e) = crate::overlay_loop::setup(&mut renderer, ctx, &mem, settings, &mut extra) {
        extra.destroy(&mem);
        scene.destroy(ctx, &mem);
        renderer.destroy(ctx, &mem);
        return Err(e.into());
    }
    let ppp = crate::overlay::headless_scale(settings.height);
    // The streamer fills the first view before the first frame (a loading
    // screen's work).
    let prefill = match prefill(ctx, &mem, scene.as_mut(), settings, settings.frames) {
        Ok(p) => p,
        Err(e) => {
            ctx.wait_idle();
            extra.destroy(&mem);
            scene.destroy(ctx, &mem);
            renderer.destroy(ctx, &mem);
            return Err(e.into());
        }
    };
    // The overlay's first layout (egui's font atlas, a cold snapshot) is
    // start-up work, done before the first frame as a shader or a texture
    // would be; the frames then only install and post layouts.
    if let Err(e) = crate::overlay_loop::warm_up(&mut renderer, ctx, &mem, &*scene, settings, ppp) {
        extra.destroy(&mem);
        scene.destroy(ctx, &mem);
        renderer.destroy(ctx, &mem);
        return Err(e.into());
    }
    let mut frames = Vec::new();
    let started = Instant::now();
    let mut result = Ok(());
    let idle = idle_after_frame(settings);
    for i in 0..settings.frames {
        mem.begin_frame(i as u64);
        if let Err(e) = scene.prepare(ctx, &mem, i, settings.frames) {
            result = Err(e.into());
            break;
        }
        if let (Some(rec), Some(rig)) = (recorder.as_mut(), scene.camera_rig()) {
            if let Err(e) = rec.record(&rig.shot(i, settings.frames).pose) {
                result = Err(e.into());
                break;
            }
        }
        let png = settings.png_every > 0 && i % settings.png_every == 0;
        let output = Output::Headless {
            readback: png || settings.compare.is_some(),
        };
        let (budget, input) = (settings.texture_budget, Default::default());
        let r = crate::overlay_loop::before_frame(
            &mut renderer,
            ctx,
            &mem,
            &*scene,
            budget,
            ppp,
            input,
        );
        if let Err(e) = r {
            result = Err(e.into());
            break;
        }
        let submitted = match renderer.submit(ctx, scene.as_ref(), output, None, None) {
            Ok(s) => s,
            Err(e) => {
                result = Err(e.into());
                break;
            }
        };
        // Work that overlaps the GPU's frame; the frame is waited for either way.
        let late = scene
            .streaming_mut()
            .map_or(Ok(()), |s| s.after_submit(ctx, &mem));
        let t = match (renderer.finish(ctx, submitted), late) {
            (Ok(t), Ok(())) => t,
            (Err(e), _) | (_, Err(e)) => {
                result = Err(e.into());
                break;
            }
        };
        let stream = scene.streaming_mut().and_then(|s| s.frame_done(ctx, &mem));
        if let Some(d) = idle {
            std::thread::sleep(d);
        }
        let mut psnr = None;
        if png || settings.compare.is_some() {
            let pixels = renderer.targets.read_pixels(&mem);
            let name = format!("frame_{i:04}.png");
            if png {
                if let Err(e) = write_png(
                    &settings.out.join(&name),
                    settings.width,
                    settings.height,
                    &pixels,
                ) {
                    result = Err(e);
                    break;
                }
            }
            if let Some(dir) = &settings.compare {
                match crate::streaming::psnr::psnr_against_png(
                    &pixels,
                    settings.width,
                    settings.height,
                    &dir.join(&name),
                ) {
                    Ok(db) => psnr = Some(db),
                    Err(e) => {
                        result = Err(AppError::Io(format!("--compare: {e}")));
                        break;
                    }
                }
            }
        }
        let mut record = FrameRecord::new(i, &t, scene.texture_bytes(), settings.texture_budget);
        record.streaming = stream;
        record.psnr_db = psnr;
        crate::overlay_loop::after_frame(&mut renderer, &mem, &mut record);
        frames.push(record);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let residency = scene.streaming().and_then(|s| s.residency());
    let mut report = build_report(
        ctx,
        &mem,
        settings,
        frames,
        bake_seconds,
        load_seconds,
        residency,
    );
    report.set_prefill(prefill.as_ref());
    report.set_aliasing(renderer.aliasing_report());
    if let Some(rig) = scene.camera_rig() {
        report.set_lookahead(rig.lookahead());
    }
    ctx.wait_idle();
    let heap = settings.out.join("heap.json");
    if let Err(e) = mem.write_dump(&heap) {
        eprintln!("cannot write {}: {e}", heap.display());
    }
    extra.destroy(&mem);
    scene.destroy(ctx, &mem);
    renderer.destroy(ctx, &mem);
    if let Some(path) = &settings.record_trace {
        if let Err(e) = mem.finish_trace() {
            eprintln!("--record-trace {}: {e}", path.display());
            result = result.and(Err(AppError::Io(format!(
                "--record-trace {}: {e}",
                path.display()
            ))));
        }
    }
    if let Some(rec) = recorder {
        result = result.and(rec.finish().map(drop).map_err(AppError::from));
    }
    result?;
    write_report(&settings.out, &report)?;
    println!(
        "{} ({elapsed:.1} s; frames and report.json in {})",
        report.summary,
        settings.out.display()
    );
    Ok(())
}

/// The texture streamer's pre-fill before frame 0 of `frames` (`--prefill on`
/// with streaming on; else nothing): start-up work, bounded by
/// [`crate::streaming::PREFILL_LIMIT`]. Prints its line.
pub fn prefill(
    ctx: &Context,
    mem: &GpuMemory,
    scene: &mut dyn ScenePass,
    settings: &Settings,
    frames: u32,
) -> Result<Option<Prefill>, GpuError> {
    if !settings.prefill || settings.streaming != StreamingMode::On {
        return Ok(None);
    }
    let p = match scene.streaming_mut() {
        Some(s) => s.prefill(ctx, mem, frames, crate::streaming::PREFILL_LIMIT)?,
        None => None,
    };
    if let Some(p) = &p {
        println!("{}", p.line(settings.texture_budget));
    }
    Ok(p)
}

/// Builds the scene pass: the triangle, or the gallery (baking and loading materials).
pub fn make_scene(
    ctx: &Context,
    mem: &GpuMemory,
    settings: &Settings,
    extent: vk::Extent2D,
) -> Result<(Box<dyn ScenePass>, f64, f64), AppError> {
    match settings.scene {
        SceneKind::Triangle => Ok((Box::new(TrianglePass::new(&ctx.device)?), 0.0, 0.0)),
        SceneKind::Gallery => {
            let count = settings.materials as usize;
            use material_baker::Encoding;
            let encoding = match settings.textures {
                TextureChoice::Bc if !ctx.info.bc_textures => {
                    return Err(AppError::Io(format!(
                        "--textures bc: {} does not support textureCompressionBC",
                        ctx.info.name
                    )))
                }
                TextureChoice::Bc => Encoding::Bc,
                TextureChoice::Rgba8 => Encoding::Uncompressed,
                TextureChoice::Auto if ctx.info.bc_textures && !ctx.info.is_cpu => Encoding::Bc,
                TextureChoice::Auto => Encoding::Uncompressed,
            };
            let (files, bake_seconds) = ensure_baked(
                &settings.cache,
                settings.texture_size,
                settings.seed as u32,
                encoding,
                count,
            )
            .map_err(AppError::Io)?;
            let started = Instant::now();
            let residency = match settings.streaming {
                StreamingMode::On => Residency::Tails {
                    tail_texels: settings
                        .residency
                        .tail_texels(material_baker::MAPS.map(|m| match encoding {
                            Encoding::Bc => m.compressed_format(),
                            Encoding::Uncompressed => m.format(),
                        })),
                    // Two frames of uploads; a frame never uploads more than the
                    // texture budget can hold (the loader adds room for the largest
                    // level twice over).
                    staging_bytes: settings
                        .upload_budget
                        .min(settings.texture_budget)
                        .saturating_mul(2),
                },
                StreamingMode::Off => Residency::Static,
            };
            let textures = TextureSet::load_with(
                ctx,
                mem,
                &files,
                settings.texture_budget,
                settings.anisotropy,
                residency,
                settings.tuning.atlas_emulation,
            )?;
            let load_seconds = started.elapsed().as_secs_f64();
            println!(
                "materials: {count} x 3 {encoding:?} maps of {}x{} ({}), {}resident from mip {}..{} ({:.1} MiB of {:.1} MiB budget), loaded in {load_seconds:.2} s",
                settings.texture_size,
                settings.texture_size,
                if textures.bindless { "one bindless array" } else { "a descriptor set per material" },
                match settings.streaming {
                    StreamingMode::On => "streaming on: mip tails ",
                    StreamingMode::Off => "streaming off: ",
                },
                textures.finest_level,
                textures.base_level,
                textures.resident_bytes() as f64 / (1u64 << 20) as f64,
                settings.texture_budget as f64 / (1u64 << 20) as f64
            );
            let floor = if count > 8 { 8 } else { 0 };
            let gallery = Gallery::new(count, floor);
            let stream = StreamConfig {
                mode: settings.streaming,
                budget: settings.texture_budget,
                upload_budget: settings.upload_budget,
                max_ops: crate::streaming::MAX_OPS,
                show_mips: settings.show_mips,
                anisotropy: settings.anisotropy,
                defrag_budget: settings.defrag_budget,
                lookahead_frames: settings.lookahead,
                residency: settings.residency,
                tuning: settings.tuning.clone(),
            };
            let shadows = settings.effects;
            let pass = GalleryPass::new(
                ctx,
                mem,
                gallery,
                textures,
                extent,
                stream,
                shadows,
                settings.shading,
            )?;
            Ok((Box::new(pass), bake_seconds, load_seconds))
        }
    }
}

/// Assembles the report from the run's frames; `residency` is the scene's
/// ([`crate::frame::SceneStreaming::residency`]).
pub fn build_report(
    ctx: &Context,
    mem: &GpuMemory,
    settings: &Settings,
    frames: Vec<FrameRecord>,
    bake_seconds: f64,
    load_seconds: f64,
    residency: Option<&'static str>,
) -> Report {
    let mut report = Report {
        settings: settings.clone(),
        device: serde_json::json!({
            "name": ctx.info.name, "type": ctx.info.device_type, "api_version": ctx.info.api_version,
            "driver_version": ctx.info.driver_version, "bc_textures": ctx.info.bc_textures,
            "timestamps": ctx.info.timestamps, "memory_budget_extension": ctx.info.memory_budget,
            "bindless": ctx.info.bindless,
            "upload_queue_family": ctx.upload.map(|u| u.family),
        }),
        bake_seconds,
        load_seconds,
        frames,
        gpu_frame_ms: Default::default(),
        wall_frame_ms: Default::default(),
        peak_texture_bytes: 0,
        validation_errors: ctx.error_count(),
        allocator: mem.statistics_json(),
        aliasing: Default::default(),
        streaming: None,
        defrag: None,
        summary: String::new(),
        upload_queue: ctx.upload_queue_name(),
        residency: residency.unwrap_or("levels"),
    };
    report.finish();
    report
}

/// Writes `report.json` into `dir`.
pub fn write_report(dir: &Path, report: &Report) -> Result<(), AppError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| AppError::Io(format!("cannot create {}: {e}", dir.display())))?;
    let path = dir.join("report.json");
    let json = serde_json::to_string_pretty(report).expect("report serializes");
    std::fs::write(&path, json)
        .map_err(|e| AppError::Io(format!("cannot write {}: {e}", path.display())))
}
