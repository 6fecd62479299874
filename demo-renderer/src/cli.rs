//! Command-line flags. Every value is optional until the device is known: on a
//! software rasterizer, values the user left unset scale down (see [`Settings::resolve`]).

use std::path::PathBuf;

pub use crate::gpu::UploadQueue;
pub use crate::streaming::Mode as StreamingMode;

/// Which scene to draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SceneKind {
    /// The PBR material gallery (default).
    Gallery,
    /// One triangle (the smoke test).
    Triangle,
}

/// How materials are encoded on the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TextureChoice {
    /// BC7/BC5 where the device supports it and is not a software rasterizer
    /// (which decodes BC slowly), else RGBA8/RG8.
    Auto,
    /// BC7 (albedo, ORM) and BC5 (normals).
    Bc,
    /// RGBA8 and RG8.
    Rgba8,
}

/// How the gallery's scene pass shades (`--shading`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Shading {
    /// A visibility buffer: the draws write only which triangle covers each pixel,
    /// then one compute dispatch per draw shades its pixels (the default). Every
    /// pixel is shaded once, and the shading runs on compute, which on GPUs with
    /// few graphics-capable units (the H200) is most of the chip.
    Visibility,
    /// The draws shade in their fragment shader (depth-tested early).
    Forward,
}

/// Flags as given.
#[derive(Clone, Debug, Default)]
pub struct Flags {
    /// `--frames N`.
    pub frames: Option<u32>,
    /// `--size WxH`.
    pub size: Option<(u32, u32)>,
    /// `--out DIR`.
    pub out: Option<PathBuf>,
    /// `--texture-size N`.
    pub texture_size: Option<u32>,
    /// `--materials N`.
    pub materials: Option<u32>,
    /// `--texture-budget BYTES`.
    pub texture_budget: Option<u64>,
    /// `--window`.
    pub window: bool,
    /// `--device INDEX`.
    pub device: Option<usize>,
    /// `--no-validation`.
    pub no_validation: bool,
    /// `--no-bindless`.
    pub no_bindless: bool,
    /// `--scene gallery|triangle`.
    pub scene: Option<SceneKind>,
    /// `--seed N`.
    pub seed: Option<u64>,
    /// `--cache DIR`.
    pub cache: Option<PathBuf>,
    /// `--textures auto|bc|rgba8`.
    pub textures: Option<TextureChoice>,
    /// `--anisotropy N`.
    pub anisotropy: Option<u32>,
    /// `--png-every N`.
    pub png_every: Option<u32>,
    /// `--screenshot FILE` (window mode: saves the last frame).
    pub screenshot: Option<PathBuf>,
    /// `--list-devices`.
    pub list_devices: bool,
    /// `--streaming on|off`.
    pub streaming: Option<StreamingMode>,
    /// `--upload-budget BYTES` (per frame).
    pub upload_budget: Option<u64>,
    /// `--defrag-budget BYTES` (per frame; 0: off).
    pub defrag_budget: Option<u64>,
    /// `--upload-queue auto|graphics|transfer`.
    pub upload_queue: Option<UploadQueue>,
    /// `--lookahead FRAMES` (0: off).
    pub lookahead: Option<u32>,
    /// `--prefill on|off`.
    pub prefill: Option<bool>,
    /// `--residency auto|tiles|levels`.
    pub residency: Option<crate::streaming::ResidencyMode>,
    /// `--show-mips`.
    pub show_mips: bool,
    /// `--compare DIR`: per-frame PSNR against that run's PNG frames.
    pub compare: Option<PathBuf>,
    /// `--record-trace FILE`: every allocation and free as a trace.
    pub record_trace: Option<PathBuf>,
    /// `--camera-path FILE`: replay a recorded camera path (headless).
    pub camera_path: Option<PathBuf>,
    /// `--record-path FILE`: write the camera's pose per frame.
    pub record_path: Option<PathBuf>,
    /// `--overlay`.
    pub overlay: bool,
    /// `--extra-allocations N`.
    pub extra_allocations: Option<u32>,
    /// `--effects on|off`.
    pub effects: Option<bool>,
    /// `--shading visibility|forward`.
    pub shading: Option<Shading>,
    /// `--tune KEY=VALUE`, each given (see [`crate::tuning`]).
    pub tune: crate::tuning::Tuning,
    /// `--help`.
    pub help: bool,
}

/// The help text.
pub const USAGE: &str = "\
demo-renderer: a PBR material gallery on Vulkan 1.3; every resource through vkalloc.

USAGE: demo-renderer [FLAGS]

  --frames N             frames of the camera path to render (default 240; lavapipe 24)
  --size WxH             render size (default 3840x2160; lavapipe 960x540)
  --out DIR              where PNG frames and report.json go (default out/)
  --png-every N          write every Nth frame as a PNG (default 1; 0: none, for timing)
  --texture-size N       baked material size, a power of two >= 16 (default 8192; lavapipe 512)
  --materials N          materials in the gallery, 1..=64 (default 16; past 16, variants
                         of the sixteen with other seeds)
  --texture-budget SIZE  texture memory budget, e.g. 1GiB, 512MiB, 1073741824 (default 1GiB)
  --streaming on|off     stream mip levels under the budget as the camera moves (on, the
                         default), or pick one level per texture at load time (off)
  --upload-budget SIZE   file bytes uploaded per frame while streaming (default 256MiB)
  --defrag-budget SIZE   texture bytes a defragmentation pass of the texture pool may move
                         per frame while streaming (default 32MiB; 0: no defragmentation)
  --upload-queue auto|graphics|transfer  the queue streaming uploads go on: a
                         transfer-only queue with queue-family ownership transfers
                         (transfer: an error where the device has none), the graphics
                         queue, or the first where the device has one (auto, the default)
  --lookahead FRAMES     prefetch what the camera path's next FRAMES frames want (and the
                         view after a cut among them), below what the present view needs
                         (default 16; 0: off); a recorded path or the fly camera has no
                         future: its motion extrapolated instead (at most 4 frames)
  --prefill on|off       before the first frame, load what the first view and the
                         look-ahead want under the budget, as a loading screen would
                         (on, the default), or start from the mip tails (off)
  --residency auto|atlas|tiles|levels  stream by tiles copied into a page atlas (no
                         sparse binds; the bindless visibility shading only), by tiles of
                         sparse images (one 64 KiB page at a time, where the camera looks;
                         an error where the device has no sparse residency), or by whole
                         mip levels; auto (the default): the atlas where the shading is
                         visibility on a bindless device, else tiles where the device has
                         sparse residency, else levels
  --show-mips            tint each material by its resident mip level (red 0, orange 1,
                         yellow 2, green 3, cyan 4, blue 5, purple 6, grey 7+)
  --compare DIR          per-frame PSNR against DIR/frame_NNNN.png (another run's frames)
  --record-trace FILE    write every allocation and free of the run as a trace (JSON lines,
                         the bench's format: `bench --trace FILE` replays it)
  --camera-path FILE     headless: replay a recorded camera path frame by frame (one JSON
                         object a line: {\"frame\": 0, \"eye\": [x, y, z], \"target\": [x, y, z],
                         \"fov_y_deg\": 50.0}); --frames defaults to the path's length
  --record-path FILE     write the camera's pose per frame in that format (any run: the
                         script, a replayed path, the window's fly camera)
  --window               show the frames in a window (winit) instead of writing PNGs,
                         flown with the fly camera (P: the scripted path; right mouse
                         button to look, WASD, E/Space up, Q/C down, Shift faster,
                         wheel: speed)
  --screenshot FILE      with --window: save the last frame as a PNG
  --device INDEX         Vulkan device to use (see --list-devices)
  --list-devices         print the Vulkan devices and exit
  --scene gallery|triangle  what to draw (triangle: the smoke test)
  --textures auto|bc|rgba8  texture encoding: BC7/BC5 or RGBA8/RG8 (auto: BC where the
                         device supports it, except on software rasterizers)
  --anisotropy N         texture anisotropic filtering, 0 (off) to 16 (default 4)
  --seed N               material and scene seed (default 1)
  --cache DIR            baked material cache (default $XDG_CACHE_HOME/vkalloc-demo)
  --no-validation        do not enable VK_LAYER_KHRONOS_validation
  --no-bindless          one descriptor set per material even where descriptor indexing exists
  --overlay              draw the heap overlay into the frames (in a window: shown at start;
                         F1 toggles it either way)
  --extra-allocations N  make N more small buffers (4 KiB each) to load the overlay
  --effects on|off       the sun's shadow map and bloom, two transient targets aliased
                         on one allocation (on, the default), or neither (off)
  --shading visibility|forward
                         visibility (default; lavapipe: forward): the draws write which
                         triangle covers each pixel, then compute shades every pixel
                         once; forward: the draws shade in their fragment shaders
  --tune KEY=VALUE       a measured knob or a diagnostic of the product path (repeatable;
                         the keys and their defaults: demo-renderer/src/tuning.rs), e.g.
                         tiles.max-ring=64, tiles.late-spare=all, atlas-emulation=1
  --help                 this text
";

/// A flag error, shown with the usage hint.
#[derive(Debug, thiserror::Error)]
#[error("{0}\n(run with --help for the flags)")]
pub struct FlagError(pub String);

fn parse_num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, FlagError> {
    v.parse()
        .map_err(|_| FlagError(format!("{flag}: '{v}' is not a valid number")))
}

/// Parses a byte size: a number with an optional unit (B, KiB, MiB, GiB, KB, MB, GB).
pub fn parse_bytes(v: &str) -> Option<u64> {
    let v = v.trim();
    let split = v
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let num: f64 = num.parse().ok()?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => return None,
    };
    let bytes = num * mult as f64;
    (bytes >= 1.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
}

/// [`parse_bytes`], also accepting zero ("0", "0MiB").
pub fn parse_bytes_or_zero(v: &str) -> Option<u64> {
    let v = v.trim();
    let split = v
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    if num.parse::<f64>().is_ok_and(|n| n == 0.0) {
        parse_bytes(&format!("1{unit}")).map(|_| 0)
    } else {
        parse_bytes(v)
    }
}

impl Flags {
    /// Parses `args` (without the program name).
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, FlagError> {
        let mut f = Flags::default();
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) if n.starts_with("--") => (n.to_owned(), Some(v.to_owned())),
                _ => (arg.clone(), None),
            };
            let value = |it: &mut dyn Iterator<Item = String>| {
                inline
                    .clone()
                    .or_else(|| it.next())
                    .ok_or_else(|| FlagError(format!("{name} needs a value")))
            };
            match name.as_str() {
                "--frames" => f.frames = Some(parse_num(&name, &value(&mut it)?)?),
                "--size" => {
                    let v = value(&mut it)?;
                    let (w, h) = v.split_once(['x', 'X']).ok_or_else(|| {
                        FlagError(format!("--size: '{v}' is not WxH, e.g. 1920x1080"))
                    })?;
                    let (w, h): (u32, u32) = (parse_num(&name, w)?, parse_num(&name, h)?);
                    if w == 0 || h == 0 || w > 16384 || h > 16384 {
                        return Err(FlagError(format!(
                            "--size: {w}x{h} is outside 1x1..16384x16384"
                        )));
                    }
                    f.size = Some((w, h));
                }
                "--out" => f.out = Some(PathBuf::from(value(&mut it)?)),
                "--texture-size" => {
                    let n: u32 = parse_num(&name, &value(&mut it)?)?;
                    if !n.is_power_of_two() || !(16..=16384).contains(&n) {
                        return Err(FlagError(format!(
                            "--texture-size: {n} is not a power of two in 16..=16384"
                        )));
                    }
                    f.texture_size = Some(n);
                }
                "--materials" => {
                    let n: u32 = parse_num(&name, &value(&mut it)?)?;
                    if !(1..=64).contains(&n) {
                        return Err(FlagError(format!("--materials: {n} is outside 1..=64")));
                    }
                    f.materials = Some(n);
                }
                "--texture-budget" => {
                    let v = value(&mut it)?;
                    f.texture_budget = Some(parse_bytes(&v).ok_or_else(|| {
                        FlagError(format!("--texture-budget: '{v}' is not a size like 512MiB"))
                    })?);
                }
                "--upload-budget" => {
                    let v = value(&mut it)?;
                    f.upload_budget = Some(parse_bytes(&v).ok_or_else(|| {
                        FlagError(format!("--upload-budget: '{v}' is not a size like 64MiB"))
                    })?);
                }
                "--defrag-budget" => {
                    let v = value(&mut it)?;
                    f.defrag_budget = Some(parse_bytes_or_zero(&v).ok_or_else(|| {
                        FlagError(format!("--defrag-budget: '{v}' is not a size like 32MiB"))
                    })?);
                }
                "--streaming" => {
                    f.streaming = Some(match value(&mut it)?.as_str() {
                        "on" => StreamingMode::On,
                        "off" => StreamingMode::Off,
                        v => return Err(FlagError(format!("--streaming: '{v}' is not on or off"))),
                    })
                }
                "--upload-queue" => {
                    f.upload_queue = Some(match value(&mut it)?.as_str() {
                        "auto" => UploadQueue::Auto,
                        "graphics" => UploadQueue::Graphics,
                        "transfer" => UploadQueue::Transfer,
                        v => {
                            return Err(FlagError(format!(
                                "--upload-queue: '{v}' is not auto, graphics or transfer"
                            )))
                        }
                    })
                }
                "--lookahead" => {
                    let n: u32 = parse_num(&name, &value(&mut it)?)?;
                    if n > crate::streaming::MAX_LOOKAHEAD {
                        return Err(FlagError(format!(
                            "--lookahead: {n} is above {}",
                            crate::streaming::MAX_LOOKAHEAD
                        )));
                    }
                    f.lookahead = Some(n);
                }
                "--prefill" => {
                    f.prefill = Some(match value(&mut it)?.as_str() {
                        "on" => true,
                        "off" => false,
                        v => return Err(FlagError(format!("--prefill: '{v}' is not on or off"))),
                    })
                }
                "--residency" => {
                    use crate::streaming::ResidencyMode as R;
                    f.residency = Some(match value(&mut it)?.as_str() {
                        "auto" => R::Auto,
                        "tiles" => R::Tiles,
                        "levels" => R::Levels,
                        "atlas" => R::Atlas,
                        v => {
                            return Err(FlagError(format!(
                                "--residency: '{v}' is not auto, tiles, atlas or levels"
                            )))
                        }
                    })
                }
                "--tune" => f
                    .tune
                    .set(&value(&mut it)?)
                    .map_err(|e| FlagError(e.to_string()))?,
                "--show-mips" => f.show_mips = true,
                "--compare" => f.compare = Some(PathBuf::from(value(&mut it)?)),
                "--record-trace" => f.record_trace = Some(PathBuf::from(value(&mut it)?)),
                "--camera-path" => f.camera_path = Some(PathBuf::from(value(&mut it)?)),
                "--record-path" => f.record_path = Some(PathBuf::from(value(&mut it)?)),
                "--device" => f.device = Some(parse_num(&name, &value(&mut it)?)?),
                "--png-every" => f.png_every = Some(parse_num(&name, &value(&mut it)?)?),
                "--anisotropy" => {
                    let n: u32 = parse_num(&name, &value(&mut it)?)?;
                    if n > 16 {
                        return Err(FlagError(format!("--anisotropy: {n} is above 16")));
                    }
                    f.anisotropy = Some(n);
                }
                "--seed" => f.seed = Some(parse_num(&name, &value(&mut it)?)?),
                "--cache" => f.cache = Some(PathBuf::from(value(&mut it)?)),
                "--screenshot" => f.screenshot = Some(PathBuf::from(value(&mut it)?)),
                "--scene" => {
                    f.scene = Some(match value(&mut it)?.as_str() {
                        "gallery" => SceneKind::Gallery,
                        "triangle" => SceneKind::Triangle,
                        v => {
                            return Err(FlagError(format!(
                                "--scene: '{v}' is not gallery or triangle"
                            )))
                        }
                    })
                }
                "--window" => f.window = true,
                "--textures" => {
                    f.textures = Some(match value(&mut it)?.as_str() {
                        "auto" => TextureChoice::Auto,
                        "bc" => TextureChoice::Bc,
                        "rgba8" => TextureChoice::Rgba8,
                        v => {
                            return Err(FlagError(format!(
                                "--textures: '{v}' is not auto, bc or rgba8"
                            )))
                        }
                    })
                }
                "--no-validation" => f.no_validation = true,
                "--no-bindless" => f.no_bindless = true,
                "--list-devices" => f.list_devices = true,
                "--overlay" => f.overlay = true,
                "--extra-allocations" => {
                    f.extra_allocations = Some(parse_num(&name, &value(&mut it)?)?)
                }
                "--effects" => {
                    f.effects = Some(match value(&mut it)?.as_str() {
                        "on" => true,
                        "off" => false,
                        v => return Err(FlagError(format!("--effects: '{v}' is not on or off"))),
                    })
                }
                "--shading" => {
                    f.shading = Some(match value(&mut it)?.as_str() {
                        "visibility" => Shading::Visibility,
                        "forward" => Shading::Forward,
                        v => {
                            return Err(FlagError(format!(
                                "--shading: '{v}' is not visibility or forward"
                            )))
                        }
                    })
                }
                "--help" | "-h" => f.help = true,
                _ => return Err(FlagError(format!("unknown flag '{arg}'"))),
            }
        }
        if f.frames == Some(0) {
            return Err(FlagError("--frames: must be at least 1".into()));
        }
        if f.record_trace.is_some() && f.window {
            return Err(FlagError(
                "--record-trace: headless runs only (leave out --window)".into(),
            ));
        }
        if f.camera_path.is_some() && f.window {
            return Err(FlagError(
                "--camera-path: headless runs only (leave out --window; the window flies its own camera)".into(),
            ));
        }
        if f.scene == Some(SceneKind::Triangle) {
            if let Some(flag) = [
                ("--camera-path", &f.camera_path),
                ("--record-path", &f.record_path),
            ]
            .into_iter()
            .find_map(|(flag, v)| v.is_some().then_some(flag))
            {
                return Err(FlagError(format!(
                    "{flag}: the triangle scene has no camera (leave out --scene triangle)"
                )));
            }
        }
        if f.camera_path.is_some() && f.camera_path == f.record_path {
            return Err(FlagError(
                "--record-path names the --camera-path file: the recording would overwrite the path it replays (record into another file)".into(),
            ));
        }
        Ok(f)
    }
}

/// Settings after defaults and scaling.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Settings {
    /// Frames to render.
    pub frames: u32,
    /// Render width.
    pub width: u32,
    /// Render height.
    pub height: u32,
    /// Output directory.
    pub out: PathBuf,
    /// Baked texture size.
    pub texture_size: u32,
    /// Materials in the gallery.
    pub materials: u32,
    /// Texture budget in bytes.
    pub texture_budget: u64,
    /// Window mode.
    pub window: bool,
    /// Scene.
    pub scene: SceneKind,
    /// Seed.
    pub seed: u64,
    /// Write every this many frames as PNG (0: none).
    pub png_every: u32,
    /// Maximum anisotropy of texture sampling (0 or 1: off).
    pub anisotropy: u32,
    /// Texture encoding choice.
    pub textures: TextureChoice,
    /// Baked material cache.
    pub cache: PathBuf,
    /// Whether defaults were scaled down for a software rasterizer.
    pub scaled_down: bool,
    /// Texture streaming on or off.
    pub streaming: StreamingMode,
    /// File bytes uploaded per frame while streaming.
    pub upload_budget: u64,
    /// Texture bytes a defragmentation pass may move per frame (0: off).
    pub defrag_budget: u64,
    /// The queue asked for streaming uploads (the one used: the report's
    /// `streaming.upload_queue`).
    pub upload_queue: UploadQueue,
    /// Frames of the camera path ahead whose wants are prefetched (0: off).
    pub lookahead: u32,
    /// Whether the streamer fills the first view before the first frame.
    pub prefill: bool,
    /// Tiles or whole levels.
    pub residency: crate::streaming::ResidencyMode,
    /// Tint materials by their resident mip level.
    pub show_mips: bool,
    /// `--tune`'s knobs (not in the report's settings).
    #[serde(skip)]
    pub tuning: crate::tuning::Tuning,
    /// Another run's frames to compare with (PSNR).
    pub compare: Option<PathBuf>,
    /// Where to write the allocator's trace of the run (headless).
    pub record_trace: Option<PathBuf>,
    /// The recorded camera path replayed (headless; else the script).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub camera_path: Option<PathBuf>,
    /// Where the camera's pose per frame is written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record_path: Option<PathBuf>,
    /// Whether the heap overlay is drawn.
    pub overlay: bool,
    /// Extra small buffers made to load the overlay.
    pub extra_allocations: u32,
    /// The shadow map and bloom (aliased transient targets).
    pub effects: bool,
    /// How the gallery shades.
    pub shading: Shading,
}

/// The default material cache: `$XDG_CACHE_HOME/vkalloc-demo` or `~/.cache/vkalloc-demo`.
pub fn default_cache() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("vkalloc-demo");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(h).join(".cache").join("vkalloc-demo");
    }
    PathBuf::from("target").join("assets-cache")
}

impl Settings {
    /// Fits the shading to the device: forward where it can't shade from a
    /// visibility buffer (`supported`:
    /// [`crate::gpu::context::DeviceInfo::visibility_shading`]); on a CPU device
    /// (`software`), visibility shading samples without anisotropic filtering, since
    /// llvmpipe (Mesa 22.3) ignores `textureGrad`'s gradients under it (measured: a
    /// frame with the gradients forced to a whole texture per pixel came out
    /// bit-identical) and compute shaders have no other way to give them. Returns the
    /// line to print when it changes something.
    pub fn fit_shading(&mut self, supported: bool, software: bool) -> Option<&'static str> {
        if self.shading != Shading::Visibility {
            return None;
        }
        if !supported {
            self.shading = Shading::Forward;
            return Some(
                "shading: forward (the device lacks geometryShader or maintenance4, which visibility shading needs)",
            );
        }
        if software && self.anisotropy > 1 {
            self.anisotropy = 1;
            return Some(
                "shading: visibility on a CPU device samples without anisotropic filtering (llvmpipe ignores textureGrad's gradients under it)",
            );
        }
        None
    }

    /// Whether the renderer needs a visibility buffer: the gallery with
    /// [`Shading::Visibility`].
    pub fn visibility_buffer(&self) -> bool {
        self.scene == SceneKind::Gallery && self.shading == Shading::Visibility
    }

    /// Fills unset flags with defaults; on a CPU device (`software`), with smaller ones.
    pub fn resolve(f: &Flags, software: bool) -> Self {
        let (w, h) = f
            .size
            .unwrap_or(if software { (960, 540) } else { (3840, 2160) });
        let texture_size = f.texture_size.unwrap_or(if software { 512 } else { 8192 });
        let frames = f.frames.unwrap_or(if f.window {
            600
        } else if software {
            24
        } else {
            240
        });
        let scaled_down =
            software && (f.size.is_none() || f.texture_size.is_none() || f.frames.is_none());
        Self {
            frames,
            width: w,
            height: h,
            out: f.out.clone().unwrap_or_else(|| PathBuf::from("out")),
            texture_size,
            materials: f.materials.unwrap_or(16),
            texture_budget: f.texture_budget.unwrap_or(1 << 30),
            window: f.window,
            scene: f.scene.unwrap_or(SceneKind::Gallery),
            seed: f.seed.unwrap_or(1),
            anisotropy: f.anisotropy.unwrap_or(4),
            png_every: f.png_every.unwrap_or(1),
            textures: f.textures.unwrap_or(TextureChoice::Auto),
            cache: f.cache.clone().unwrap_or_else(default_cache),
            scaled_down,
            streaming: f.streaming.unwrap_or(StreamingMode::On),
            upload_budget: f.upload_budget.unwrap_or(256 << 20),
            defrag_budget: f
                .defrag_budget
                .unwrap_or(crate::streaming::DEFAULT_DEFRAG_BUDGET),
            upload_queue: f.upload_queue.unwrap_or_default(),
            lookahead: f.lookahead.unwrap_or(crate::streaming::DEFAULT_LOOKAHEAD),
            prefill: f.prefill.unwrap_or(true),
            residency: f.residency.unwrap_or_default(),
            show_mips: f.show_mips,
            tuning: f.tune.clone(),
            compare: f.compare.clone(),
            record_trace: f.record_trace.clone(),
            camera_path: f.camera_path.clone(),
            record_path: f.record_path.clone(),
            overlay: f.overlay,
            extra_allocations: f.extra_allocations.unwrap_or(0),
            effects: f.effects.unwrap_or(true),
            // On a software rasterizer both shade on the same CPU cores, and the
            // visibility buffer's extra pass costs more than it saves.
            shading: f.shading.unwrap_or(if software {
                Shading::Forward
            } else {
                Shading::Visibility
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Flags, FlagError> {
        Flags::parse(s.split_whitespace().map(String::from))
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("1GiB"), Some(1 << 30));
        assert_eq!(parse_bytes("512MiB"), Some(512 << 20));
        assert_eq!(parse_bytes("1.5GiB"), Some(3 << 29));
        assert_eq!(parse_bytes("100"), Some(100));
        assert_eq!(parse_bytes("2MB"), Some(2_000_000));
        assert_eq!(parse_bytes("12 parsecs"), None);
        assert_eq!(parse_bytes(""), None);
    }

    #[test]
    fn flags() {
        let f = parse("--frames 3 --size 320x180 --texture-budget=256MiB --window").unwrap();
        assert_eq!(f.frames, Some(3));
        assert_eq!(f.size, Some((320, 180)));
        assert_eq!(f.texture_budget, Some(256 << 20));
        assert!(f.window);
        assert!(parse("--bogus").is_err());
        assert!(parse("--size 12").is_err());
        assert!(parse("--texture-size 1000").is_err());
        assert!(parse("--frames").is_err());
        assert!(parse("--frames 0").is_err());
        assert!(parse("--materials 65").is_err());
        let f = parse("--streaming off --upload-budget 8MiB --show-mips --compare ref").unwrap();
        assert_eq!(f.streaming, Some(StreamingMode::Off));
        assert_eq!(f.upload_budget, Some(8 << 20));
        assert!(f.show_mips);
        assert!(parse("--streaming maybe").is_err());
        assert!(parse("--upload-budget lots").is_err());
        assert_eq!(parse("--effects off").unwrap().effects, Some(false));
        assert_eq!(parse("--effects=on").unwrap().effects, Some(true));
        assert!(parse("--effects maybe").is_err());
        assert_eq!(
            parse("--shading forward").unwrap().shading,
            Some(Shading::Forward)
        );
        assert_eq!(
            parse("--shading=visibility").unwrap().shading,
            Some(Shading::Visibility)
        );
        assert!(parse("--shading deferred").is_err());
        let f = parse("--defrag-budget 0").unwrap();
        assert_eq!(f.defrag_budget, Some(0));
        assert_eq!(
            parse("--defrag-budget 0MiB").unwrap().defrag_budget,
            Some(0)
        );
        assert!(parse("--defrag-budget 0lots").is_err());
        assert_eq!(
            parse("--defrag-budget=16MiB").unwrap().defrag_budget,
            Some(16 << 20)
        );
        assert!(parse("--defrag-budget -1").is_err());
        assert!(parse("--defrag-budget").is_err());
        assert_eq!(
            parse("--upload-queue transfer").unwrap().upload_queue,
            Some(UploadQueue::Transfer)
        );
        assert_eq!(
            parse("--upload-queue=graphics").unwrap().upload_queue,
            Some(UploadQueue::Graphics)
        );
        assert_eq!(
            parse("--upload-queue auto").unwrap().upload_queue,
            Some(UploadQueue::Auto)
        );
        assert!(parse("--upload-queue compute").is_err());
        assert!(parse("--upload-queue").is_err());
        assert_eq!(parse("--lookahead 0").unwrap().lookahead, Some(0));
        assert_eq!(parse("--lookahead=24").unwrap().lookahead, Some(24));
        assert!(parse("--lookahead -1").is_err());
        assert!(parse("--lookahead many").is_err());
        assert!(parse("--lookahead 100000").is_err());
        assert_eq!(parse("--prefill off").unwrap().prefill, Some(false));
        assert_eq!(parse("--prefill=on").unwrap().prefill, Some(true));
        assert_eq!(parse("").unwrap().prefill, None);
        assert!(Settings::resolve(&parse("").unwrap(), true).prefill);
        assert!(!Settings::resolve(&parse("--prefill off").unwrap(), true).prefill);
        assert!(parse("--prefill maybe").is_err());
        use crate::streaming::ResidencyMode as R;
        assert_eq!(
            parse("--residency tiles").unwrap().residency,
            Some(R::Tiles)
        );
        assert_eq!(
            Settings::resolve(&parse("").unwrap(), true).residency,
            R::Auto
        );
        assert_eq!(parse("--residency auto").unwrap().residency, Some(R::Auto));
        assert!(parse("--residency pages").is_err());
        assert!(parse("--prefill").is_err());
        let f = parse("--camera-path a.jsonl --record-path b.jsonl").unwrap();
        assert_eq!(f.camera_path, Some(PathBuf::from("a.jsonl")));
        assert_eq!(f.record_path, Some(PathBuf::from("b.jsonl")));
        assert!(parse("--record-path b.jsonl --window").is_ok());
        assert!(parse("--camera-path a.jsonl --window").is_err());
        assert!(parse("--camera-path a.jsonl --scene triangle").is_err());
        assert!(parse("--record-path a.jsonl --scene triangle").is_err());
        assert!(parse("--camera-path a.jsonl --record-path a.jsonl").is_err());
        assert!(parse("--camera-path").is_err());
    }
}
