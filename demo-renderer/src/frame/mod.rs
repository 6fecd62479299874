//! Frames: the passes (with the effects on, the sun's shadow map; the scene into
//! HDR colour + depth, or with visibility shading an id pass and compute shading;
//! with the effects on, bloom; the tone map into an sRGB target, as compute passes
//! with visibility shading, see [`post`]; readback), their barriers and GPU
//! timestamps. The shadow map and the bloom image
//! are transients sharing one alias group (see [`targets::Transients`]).

pub mod gallery;
pub mod pipelines;
pub mod post;
pub mod targets;

use ash::vk;

use crate::gpu::util::{transition, ImageTransition, SAMPLING_STAGES};
use crate::gpu::{Context, GpuError, GpuMemory, VkCheck};
use crate::shaders;
use pipelines::{create_layout, create_pipeline, PipelineDesc};
use targets::{Targets, BLOOM_FORMAT, DEPTH_FORMAT, HDR_FORMAT, LDR_FORMAT};

pub use crate::cli::Shading;

/// The texture streaming of a scene pass ([`ScenePass::streaming`]): the
/// pre-fill, the work after a frame's submission, the frame's figures, the
/// overlay's panel. The renderer never calls these; the frame loops do.
pub trait SceneStreaming {
    /// Start-up work before frame 0 of `frames`: the texture streamer's
    /// pre-fill of the first view, for at most about `limit`
    /// ([`crate::streaming::Streamer::prefill`]); `None` where nothing streams.
    fn prefill(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        frames: u32,
        limit: std::time::Duration,
    ) -> Result<Option<crate::streaming::Prefill>, GpuError>;

    /// How the pass streams its textures: "levels", "tiles" or "atlas"
    /// ([`crate::streaming::Streamer::residency`]); `None` where nothing streams.
    fn residency(&self) -> Option<&'static str>;

    /// After the frame's submission, before its fence is waited for: work
    /// that overlaps the GPU's frame (the tile streamer's spare loads,
    /// [`crate::streaming::Streamer::after_submit`]). An error is the frame's;
    /// the caller still waits for the frame.
    fn after_submit(&mut self, ctx: &Context, mem: &GpuMemory) -> Result<(), GpuError>;

    /// After the frame's fence signalled: the texture streamer's figures for it.
    fn frame_done(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
    ) -> Option<crate::streaming::StreamFrame>;

    /// The overlay's streaming panel (each texture's resident and wanted level and
    /// bytes, loads waiting, the read rate); `None` for a scene without textures.
    fn streaming_panel(&self) -> Option<crate::streaming::Panel>;
}

/// Something that draws into the scene pass (HDR colour + depth, dynamic rendering
/// already begun, viewport and scissor set).
pub trait ScenePass {
    /// Prepares frame `frame` of `frames` (uniforms); the previous frame is done.
    fn prepare(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        frame: u32,
        frames: u32,
    ) -> Result<(), GpuError> {
        let _ = (ctx, mem, frame, frames);
        Ok(())
    }

    /// The output size changed (window resize).
    fn resize(&mut self, extent: vk::Extent2D) {
        let _ = extent;
    }

    /// Whether the pass writes every pixel of the colour target (then it is not cleared).
    fn covers_screen(&self) -> bool {
        false
    }

    /// Its texture streaming; `None` for a pass that streams nothing.
    fn streaming(&self) -> Option<&dyn SceneStreaming> {
        None
    }

    /// [`Self::streaming`], to drive it.
    fn streaming_mut(&mut self) -> Option<&mut dyn SceneStreaming> {
        None
    }

    /// Bytes of texture memory the pass keeps resident.
    fn texture_bytes(&self) -> u64 {
        0
    }

    /// Records after the scene pass ends (outside any render pass), e.g. barriers
    /// for buffers the pass wrote.
    ///
    /// # Safety
    /// `cmd` is recording on a live device, outside a render pass.
    unsafe fn record_after_pass(&self, device: &ash::Device, cmd: vk::CommandBuffer) {
        let _ = (device, cmd);
    }

    /// The pass's camera, where it has one to drive ([`crate::camera`]).
    fn camera_rig(&mut self) -> Option<&mut dyn crate::camera::CameraRig> {
        None
    }

    /// Records the draws.
    ///
    /// # Safety
    /// `cmd` is recording inside the scene pass of a live device.
    unsafe fn record(&self, device: &ash::Device, cmd: vk::CommandBuffer, extent: vk::Extent2D);

    /// Whether the pass shades from a visibility buffer: then the scene pass's
    /// colour attachment is the renderer's visibility target (`targets::VIS_FORMAT`),
    /// [`Self::record`] draws ids into it, and [`Self::record_shade`] writes the HDR
    /// frame with compute. The renderer must have been made with visibility shading.
    fn visibility(&self) -> bool {
        false
    }

    /// With visibility shading: points the pass's descriptors at this frame's
    /// visibility target and HDR image. Called before anything of the frame is
    /// recorded.
    ///
    /// # Safety
    /// The previous frame is done (no set of the pass is in use) and both views are live.
    unsafe fn write_shade_targets(
        &self,
        device: &ash::Device,
        vis: vk::ImageView,
        hdr: vk::ImageView,
    ) {
        let _ = (device, vis, hdr);
    }

    /// With visibility shading: records the compute dispatches that shade every
    /// pixel of the HDR frame (in `GENERAL` layout) from the visibility target (in
    /// `GENERAL`, written by [`Self::record`]).
    ///
    /// # Safety
    /// `cmd` is recording on a live device, outside a render pass, after the scene
    /// pass and the barriers that make its output visible to compute shaders.
    unsafe fn record_shade(
        &self,
        device: &ash::Device,
        cmd: vk::CommandBuffer,
        extent: vk::Extent2D,
    ) {
        let _ = (device, cmd, extent);
    }

    /// Records the sun's shadow map (with the effects on): called before the scene
    /// pass, inside a depth-only rendering of `shadow_map` (viewport and scissor set).
    /// The scene pass then samples `shadow_map` (in `SHADER_READ_ONLY_OPTIMAL`) with
    /// `sampler`, a depth-compare sampler. The default draws nothing.
    ///
    /// # Safety
    /// `cmd` is recording inside that rendering, before the scene pass, on a live
    /// device; the previous frame is done.
    unsafe fn record_shadow(
        &self,
        device: &ash::Device,
        cmd: vk::CommandBuffer,
        shadow_map: vk::ImageView,
        sampler: vk::Sampler,
    ) {
        let _ = (device, cmd, shadow_map, sampler);
    }

    /// Destroys the pass's objects; the device must be idle.
    fn destroy(&mut self, ctx: &Context, mem: &GpuMemory);
}

/// The issue-2 smoke test: one triangle, no buffers.
pub struct TrianglePass {
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
}

impl TrianglePass {
    /// Creates the pipeline.
    pub fn new(device: &ash::Device) -> Result<Self, GpuError> {
        let layout = create_layout(device, &[], 0)?;
        let pipeline = create_pipeline(
            device,
            &PipelineDesc {
                vertex: shaders::TRIANGLE_VERT,
                fragment: shaders::TRIANGLE_FRAG,
                layout,
                color_format: HDR_FORMAT,
                depth_format: Some(DEPTH_FORMAT),
                bindings: &[],
                attributes: &[],
                cull_back: false,
                depth_compare: vk::CompareOp::GREATER,
                depth_write: true,
            },
        )?;
        Ok(Self { layout, pipeline })
    }
}

impl ScenePass for TrianglePass {
    fn destroy(&mut self, ctx: &Context, _mem: &GpuMemory) {
        // SAFETY: the device is idle.
        unsafe {
            ctx.device.destroy_pipeline(self.pipeline, None);
            ctx.device.destroy_pipeline_layout(self.layout, None);
        }
    }

    unsafe fn record(&self, device: &ash::Device, cmd: vk::CommandBuffer, _extent: vk::Extent2D) {
        // SAFETY: per the trait's contract.
        unsafe {
            device.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::GRAPHICS, self.pipeline);
            device.cmd_draw(cmd, 3, 1, 0, 0);
        }
    }
}

/// Where the tone-mapped frame goes.
#[derive(Clone, Copy, Debug)]
pub enum Output {
    /// The LDR target, copied into the readback buffer.
    Headless {
        /// Copy the frame into the readback buffer (skip it when no PNG is wanted).
        readback: bool,
    },
    /// A swapchain image (left in `PRESENT_SRC_KHR`), optionally also copied to the
    /// readback buffer (a screenshot; the image needs `TRANSFER_SRC` usage).
    Swapchain {
        /// The image.
        image: vk::Image,
        /// Its view.
        view: vk::ImageView,
        /// Index of the pipeline for its format (see [`Renderer::add_output_format`]).
        format_index: usize,
        /// Copy it to the readback buffer too.
        screenshot: bool,
    },
}

/// A frame given to the queue by [`Renderer::submit`], not yet waited for:
/// hand it to [`Renderer::finish`].
#[must_use = "a submitted frame must be finished before the next one"]
#[derive(Debug)]
pub struct Submitted {
    start: std::time::Instant,
    cpu_record_ms: f64,
    /// The frame shades from a visibility buffer (its `shade` pass is timed).
    shaded: bool,
}

/// GPU and CPU time of one frame.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FrameTimes {
    /// Wall-clock milliseconds from the start of recording to the fence (CPU + GPU).
    pub wall_ms: f64,
    /// Milliseconds spent recording on the CPU.
    pub cpu_record_ms: f64,
    /// GPU milliseconds per pass (timestamp queries), when supported.
    pub gpu_ms: Vec<(String, f64)>,
}

/// The timed passes, in recording order; pass `i` writes timestamps `2i` and `2i + 1`.
/// The timed passes; pass `i` is stamped by queries `2i` and `2i + 1`.
/// `copies` is what the scene records after its pass (the streamer's
/// defragmentation moves and feedback copy), timed apart from `scene`.
const PASSES: [&str; 8] = [
    "shadow", "scene", "bloom", "tonemap", "overlay", "readback", "copies", "shade",
];

/// Begins dynamic rendering with `info` and points the viewport (depth 0..1)
/// and the scissor at `area`.
///
/// # Safety
/// `cmd` is recording on `d`, outside a render pass; `info`'s attachments are
/// in the layouts it names.
unsafe fn begin_rendering(
    d: &ash::Device,
    cmd: vk::CommandBuffer,
    info: &vk::RenderingInfo<'_>,
    area: vk::Rect2D,
) {
    let viewport = vk::Viewport {
        x: area.offset.x as f32,
        y: area.offset.y as f32,
        width: area.extent.width as f32,
        height: area.extent.height as f32,
        min_depth: 0.0,
        max_depth: 1.0,
    };
    // SAFETY: the caller's contract.
    unsafe {
        d.cmd_begin_rendering(cmd, info);
        d.cmd_set_viewport(cmd, 0, &[viewport]);
        d.cmd_set_scissor(cmd, 0, &[area]);
    }
}

/// The tone-map pass's push constants (`shaders/tonemap.frag`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct TonemapPush {
    /// Exposure multiplier.
    pub exposure: f32,
    /// Colour scale inside `panels` (1: none).
    pub dim: f32,
    /// Padding to the vec4 alignment.
    pub pad: [f32; 2],
    /// Pixel rectangles (x0, y0, x1, y1) the overlay's panels cover.
    pub panels: [[f32; 4]; 2],
}

const TONEMAP_PUSH_BYTES: u32 = std::mem::size_of::<TonemapPush>() as u32;

struct Tonemap {
    set_layout: vk::DescriptorSetLayout,
    pool: vk::DescriptorPool,
    set: vk::DescriptorSet,
    sampler: vk::Sampler,
    layout: vk::PipelineLayout,
    pipelines: Vec<(vk::Format, vk::Pipeline)>,
}

/// The effects' fixed objects: the shadow map's sampler and the bloom pass.
struct Effects {
    /// Depth compare, bilinear (2x2 percentage-closer), border lit.
    shadow_sampler: vk::Sampler,
    /// Bilinear, clamped: the HDR frame into bloom, bloom into the tone map.
    linear: vk::Sampler,
    bloom_set_layout: vk::DescriptorSetLayout,
    bloom_set: vk::DescriptorSet,
    bloom_layout: vk::PipelineLayout,
    bloom_pipeline: vk::Pipeline,
}

/// Records and submits frames.
pub struct Renderer {
    /// Per-resolution targets.
    pub targets: Targets,
    tonemap: Tonemap,
    effects: Option<Effects>,
    command_pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
    queries: Option<vk::QueryPool>,
    timestamp_period: f64,
    /// Whether the targets include a visibility buffer (scenes may shade from it).
    visibility: bool,
    /// With visibility shading: bloom and the headless tone map as compute passes.
    post: Option<post::ComputePost>,
    /// Exposure applied before tone mapping.
    pub exposure: f32,
    /// The debug overlay, drawn over the tone-mapped frame (`--overlay`, F1).
    pub overlay: Option<crate::overlay::Overlay>,
}

/// What every pass of one frame's recording shares ([`Renderer::submit`]).
struct Rec<'a> {
    d: &'a ash::Device,
    cmd: vk::CommandBuffer,
    extent: vk::Extent2D,
    area: vk::Rect2D,
    queries: Option<vk::QueryPool>,
}

impl Rec<'_> {
    /// Writes timestamp `i` after `stage` (with timestamps).
    fn stamp(&self, i: u32, stage: vk::PipelineStageFlags2) {
        if let Some(q) = self.queries {
            // SAFETY: recording; the query was reset at the start of this buffer.
            unsafe { self.d.cmd_write_timestamp2(self.cmd, stage, q, i) };
        }
    }
}

impl Renderer {
    /// Creates targets of `extent` and the fixed passes; with `effects`, the sun's
    /// shadow map and bloom (their images aliased on one allocation); with
    /// `visibility`, a visibility buffer for scenes that shade from one
    /// ([`ScenePass::visibility`]).
    pub fn new(
        ctx: &Context,
        mem: &GpuMemory,
        extent: vk::Extent2D,
        effects: bool,
        visibility: bool,
    ) -> Result<Self, GpuError> {
        let d = &ctx.device;
        let targets = Targets::new(d, mem, extent, effects, visibility)?;
        // SAFETY: valid create infos on a live device.
        let (command_pool, cmd, fence, queries) = unsafe {
            let command_pool = d
                .create_command_pool(
                    &vk::CommandPoolCreateInfo::default()
                        .queue_family_index(ctx.queue_family)
                        .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER),
                    None,
                )
                .check("vkCreateCommandPool")?;
            let cmd = d
                .allocate_command_buffers(
                    &vk::CommandBufferAllocateInfo::default()
                        .command_pool(command_pool)
                        .command_buffer_count(1),
                )
                .check("vkAllocateCommandBuffers")?[0];
            let fence = d
                .create_fence(&vk::FenceCreateInfo::default(), None)
                .check("vkCreateFence")?;
            let queries = if ctx.info.timestamps {
                Some(
                    d.create_query_pool(
                        &vk::QueryPoolCreateInfo::default()
                            .query_type(vk::QueryType::TIMESTAMP)
                            .query_count(PASSES.len() as u32 * 2),
                        None,
                    )
                    .check("vkCreateQueryPool")?,
                )
            } else {
                None
            };
            (command_pool, cmd, fence, queries)
        };
        let tonemap = Self::create_tonemap(d, effects)?;
        let effects = if effects {
            Some(Self::create_effects(d, &tonemap)?)
        } else {
            None
        };
        let post = if visibility {
            let bloom_layout = effects
                .as_ref()
                .map_or(vk::DescriptorSetLayout::null(), |e| e.bloom_set_layout);
            Some(post::ComputePost::new(
                d,
                tonemap.set_layout,
                bloom_layout,
                TONEMAP_PUSH_BYTES,
            )?)
        } else {
            None
        };
        let mut r = Self {
            targets,
            tonemap,
            effects,
            command_pool,
            cmd,
            fence,
            queries,
            timestamp_period: ctx.info.timestamp_period as f64,
            visibility,
            post,
            exposure: 1.0,
            overlay: None,
        };
        r.write_tonemap_set(d);
        r.add_output_format(d, LDR_FORMAT)?;
        Ok(r)
    }

    /// The tone map's set: binding 0 the HDR frame, with `bloom` binding 1 the bloom
    /// image. Its pool has room for the bloom pass's set too.
    fn create_tonemap(d: &ash::Device, bloom: bool) -> Result<Tonemap, GpuError> {
        let binding = |i| {
            vk::DescriptorSetLayoutBinding::default()
                .binding(i)
                .descriptor_type(vk::DescriptorType::COMBINED_IMAGE_SAMPLER)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::FRAGMENT | vk::ShaderStageFlags::COMPUTE)
        };
        let all_bindings = [binding(0), binding(1)];
        let bindings = &all_bindings[..if bloom { 2 } else { 1 }];
        // SAFETY: valid create infos on a live device; the set is written with live objects.
        unsafe {
            let set_layout = d
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(bindings),
                    None,
                )
                .check("vkCreateDescriptorSetLayout")?;
            let sizes = [vk::DescriptorPoolSize {
                ty: vk::DescriptorType::COMBINED_IMAGE_SAMPLER,
                descriptor_count: 3,
            }];
            let pool = d
                .create_descriptor_pool(
                    &vk::DescriptorPoolCreateInfo::default()
                        .max_sets(2)
                        .pool_sizes(&sizes),
                    None,
                )
                .check("vkCreateDescriptorPool")?;
            let layouts = [set_layout];
            let set = d
                .allocate_descriptor_sets(
                    &vk::DescriptorSetAllocateInfo::default()
                        .descriptor_pool(pool)
                        .set_layouts(&layouts),
                )
                .check("vkAllocateDescriptorSets")?[0];
            let sampler = d
                .create_sampler(
                    &vk::SamplerCreateInfo::default()
                        .mag_filter(vk::Filter::NEAREST)
                        .min_filter(vk::Filter::NEAREST)
                        .address_mode_u(vk::SamplerAddressMode::CLAMP_TO_EDGE)
                        .address_mode_v(vk::SamplerAddressMode::CLAMP_TO_EDGE)
                        .address_mode_w(vk::SamplerAddressMode::CLAMP_TO_EDGE),
                    None,
                )
                .check("vkCreateSampler")?;
            let layout = create_layout(d, &[set_layout], TONEMAP_PUSH_BYTES)?;
            Ok(Tonemap {
                set_layout,
                pool,
                set,
                sampler,
                layout,
                pipelines: Vec::new(),
            })
        }
    }

    /// The samplers, the bloom pass's set (from the tone map's pool) and pipeline.
    fn create_effects(d: &ash::Device, tonemap: &Tonemap) -> Result<Effects, GpuError> {
        let mut e = Effects {
            shadow_sampler: vk::Sampler::null(),
            linear: vk::Sampler::null(),
            bloom_set_layout: vk::DescriptorSetLayout::null(),
            bloom_set: vk::DescriptorSet::null(),
            bloom_layout: vk::PipelineLayout::null(),
            bloom_pipeline: vk::Pipeline::null(),
        };
        let result = (|| {
            let clamp = vk::SamplerCreateInfo::default()
                .mag_filter(vk::Filter::LINEAR)
                .min_filter(vk::Filter::LINEAR)
                .address_mode_u(vk::SamplerAddressMode::CLAMP_TO_EDGE)
                .address_mode_v(vk::SamplerAddressMode::CLAMP_TO_EDGE)
                .address_mode_w(vk::SamplerAddressMode::CLAMP_TO_EDGE);
            let shadow = clamp
                .address_mode_u(vk::SamplerAddressMode::CLAMP_TO_BORDER)
                .address_mode_v(vk::SamplerAddressMode::CLAMP_TO_BORDER)
                .address_mode_w(vk::SamplerAddressMode::CLAMP_TO_BORDER)
                .border_color(vk::BorderColor::FLOAT_OPAQUE_WHITE)
                .compare_enable(true)
                .compare_op(vk::CompareOp::LESS_OR_EQUAL);
            let binding = [vk::DescriptorSetLayoutBinding::default()
                .binding(0)
                .descriptor_type(vk::DescriptorType::COMBINED_IMAGE_SAMPLER)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::FRAGMENT | vk::ShaderStageFlags::COMPUTE)];
            // SAFETY: valid create infos on a live device; each handle is stored at once
            // so that a failure destroys what was made.
            unsafe {
                e.linear = d.create_sampler(&clamp, None).check("vkCreateSampler")?;
                e.shadow_sampler = d.create_sampler(&shadow, None).check("vkCreateSampler")?;
                e.bloom_set_layout = d
                    .create_descriptor_set_layout(
                        &vk::DescriptorSetLayoutCreateInfo::default().bindings(&binding),
                        None,
                    )
                    .check("vkCreateDescriptorSetLayout")?;
                let layouts = [e.bloom_set_layout];
                e.bloom_set = d
                    .allocate_descriptor_sets(
                        &vk::DescriptorSetAllocateInfo::default()
                            .descriptor_pool(tonemap.pool)
                            .set_layouts(&layouts),
                    )
                    .check("vkAllocateDescriptorSets")?[0];
            }
            e.bloom_layout = create_layout(d, &[e.bloom_set_layout], 0)?;
            e.bloom_pipeline = create_pipeline(
                d,
                &PipelineDesc {
                    vertex: shaders::FULLSCREEN_VERT,
                    fragment: shaders::BLOOM_FRAG,
                    layout: e.bloom_layout,
                    color_format: BLOOM_FORMAT,
                    depth_format: None,
                    bindings: &[],
                    attributes: &[],
                    cull_back: false,
                    depth_compare: vk::CompareOp::GREATER,
                    depth_write: false,
                },
            )?;
            Ok(())
        })();
        match result {
            Ok(()) => Ok(e),
            Err(err) => {
                Self::destroy_effects(d, &e);
                Err(err)
            }
        }
    }

    fn destroy_effects(d: &ash::Device, e: &Effects) {
        // SAFETY: the device is idle (or the objects were never used); null handles
        // are ignored; the set goes with the tone map's pool.
        unsafe {
            d.destroy_pipeline(e.bloom_pipeline, None);
            d.destroy_pipeline_layout(e.bloom_layout, None);
            d.destroy_descriptor_set_layout(e.bloom_set_layout, None);
            d.destroy_sampler(e.shadow_sampler, None);
            d.destroy_sampler(e.linear, None);
        }
    }

    /// What the renderer's alias groups saved (`report.json`'s `aliasing`).
    pub fn aliasing_report(&self) -> targets::AliasingReport {
        self.targets
            .transients
            .as_ref()
            .map(targets::Transients::report)
            .unwrap_or_default()
    }

    /// Recreates the targets at `extent` (window resize); waits for the device.
    pub fn resize(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        extent: vk::Extent2D,
    ) -> Result<(), GpuError> {
        ctx.wait_idle();
        self.targets.destroy(&ctx.device, mem);
        self.targets = Targets::new(
            &ctx.device,
            mem,
            extent,
            self.effects.is_some(),
            self.visibility,
        )?;
        self.write_tonemap_set(&ctx.device);
        Ok(())
    }

    fn write_tonemap_set(&self, d: &ash::Device) {
        let image = |sampler, image_view| {
            [vk::DescriptorImageInfo {
                sampler,
                image_view,
                image_layout: vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL,
            }]
        };
        let hdr = image(self.tonemap.sampler, self.targets.hdr.view);
        let write = |set, binding, info| {
            vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(binding)
                .descriptor_type(vk::DescriptorType::COMBINED_IMAGE_SAMPLER)
                .image_info(info)
        };
        let mut writes = vec![write(self.tonemap.set, 0, &hdr)];
        let (bloom, hdr_linear);
        if let (Some(e), Some(t)) = (&self.effects, &self.targets.transients) {
            bloom = image(e.linear, t.bloom.view);
            hdr_linear = image(e.linear, self.targets.hdr.view);
            writes.push(write(self.tonemap.set, 1, &bloom));
            writes.push(write(e.bloom_set, 0, &hdr_linear));
        }
        // SAFETY: the sets are not in use (the device is idle or the sets are fresh).
        unsafe { d.update_descriptor_sets(&writes, &[]) };
        if let Some(p) = self.post.as_ref() {
            let bloom = self
                .targets
                .transients
                .as_ref()
                .map_or(vk::ImageView::null(), |t| t.bloom.view);
            // SAFETY: as above.
            unsafe { p.write_outputs(d, self.targets.ldr_storage, bloom) };
        }
    }

    /// Adds a tone-map pipeline writing `format`; returns its index for [`Output::Swapchain`].
    pub fn add_output_format(
        &mut self,
        device: &ash::Device,
        format: vk::Format,
    ) -> Result<usize, GpuError> {
        if let Some(i) = self
            .tonemap
            .pipelines
            .iter()
            .position(|(f, _)| *f == format)
        {
            return Ok(i);
        }
        let pipeline = create_pipeline(
            device,
            &PipelineDesc {
                vertex: shaders::FULLSCREEN_VERT,
                fragment: if self.effects.is_some() {
                    shaders::TONEMAP_BLOOM_FRAG
                } else {
                    shaders::TONEMAP_FRAG
                },
                layout: self.tonemap.layout,
                color_format: format,
                depth_format: None,
                bindings: &[],
                attributes: &[],
                cull_back: false,
                depth_compare: vk::CompareOp::GREATER,
                depth_write: true,
            },
        )?;
        self.tonemap.pipelines.push((format, pipeline));
        Ok(self.tonemap.pipelines.len() - 1)
    }

    /// Records, submits and waits for one frame; `scene` draws the scene pass.
    pub fn render(
        &mut self,
        ctx: &Context,
        scene: &dyn ScenePass,
        output: Output,
        wait: Option<vk::Semaphore>,
        signal: Option<vk::Semaphore>,
    ) -> Result<FrameTimes, GpuError> {
        let submitted = self.submit(ctx, scene, output, wait, signal)?;
        self.finish(ctx, submitted)
    }

    /// Records and submits one frame (`scene` draws the scene pass) without
    /// waiting for it: work that can overlap the GPU's frame goes between
    /// this and [`Self::finish`] ([`SceneStreaming::after_submit`]). A successful
    /// call must be followed by `finish` before the next frame is submitted.
    pub fn submit(
        &mut self,
        ctx: &Context,
        scene: &dyn ScenePass,
        output: Output,
        wait: Option<vk::Semaphore>,
        signal: Option<vk::Semaphore>,
    ) -> Result<Submitted, GpuError> {
        let start = std::time::Instant::now();
        let d = &ctx.device;
        let cmd = self.cmd;
        let extent = self.targets.extent;
        let area = vk::Rect2D {
            offset: vk::Offset2D::default(),
            extent,
        };
        let (out_image, out_view, pipeline_index, copy) = match output {
            Output::Headless { readback } => {
                (self.targets.ldr.image(), self.targets.ldr.view, 0, readback)
            }
            Output::Swapchain {
                image,
                view,
                format_index,
                screenshot,
            } => (image, view, format_index, screenshot),
        };
        let final_layout = match output {
            Output::Headless { .. } => vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
            Output::Swapchain { .. } => vk::ImageLayout::PRESENT_SRC_KHR,
        };
        let vis = match (scene.visibility(), self.targets.vis.as_ref()) {
            (false, _) => None,
            (true, Some(v)) => Some(v),
            (true, None) => return Err(GpuError::Other(
                "the scene shades from a visibility buffer, but the renderer was made without one"
                    .into(),
            )),
        };
        let shaded = vis.is_some();
        if let Some(v) = vis {
            // SAFETY: the previous frame is done (each frame waits for its fence);
            // both views are live targets.
            unsafe { scene.write_shade_targets(d, v.view, self.targets.hdr.view) };
        }

        // SAFETY: the command buffer is idle (every frame waits for its fence); every
        // handle recorded is live until the fence below signals.
        unsafe {
            crate::gpu::util::begin_one_time(d, cmd)?;
            if let Some(q) = self.queries {
                d.cmd_reset_query_pool(cmd, q, 0, PASSES.len() as u32 * 2);
            }

            let rec = Rec {
                d,
                cmd,
                extent,
                area,
                queries: self.queries,
            };
            self.record_shadow(&rec, scene);
            self.record_scene(&rec, scene, vis);
            self.record_bloom(&rec);
            self.record_tonemap(&rec, &output, (out_image, out_view, pipeline_index))?;
            self.record_readback(&rec, out_image, copy, final_layout);
            d.end_command_buffer(cmd).check("vkEndCommandBuffer")?;
        }
        let cpu_record_ms = start.elapsed().as_secs_f64() * 1e3;

        let cmds = [vk::CommandBufferSubmitInfo::default().command_buffer(cmd)];
        let waits: Vec<_> = wait
            .iter()
            .map(|&s| {
                vk::SemaphoreSubmitInfo::default()
                    .semaphore(s)
                    .stage_mask(vk::PipelineStageFlags2::COLOR_ATTACHMENT_OUTPUT)
            })
            .collect();
        let signals: Vec<_> = signal
            .iter()
            .map(|&s| {
                vk::SemaphoreSubmitInfo::default()
                    .semaphore(s)
                    .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
            })
            .collect();
        let submit = vk::SubmitInfo2::default()
            .command_buffer_infos(&cmds)
            .wait_semaphore_infos(&waits)
            .signal_semaphore_infos(&signals);
        // SAFETY: the buffer was recorded above; the fence is unsignalled
        // (the last frame's `finish` waited for and reset it).
        unsafe {
            d.queue_submit2(ctx.queue, &[submit], self.fence)
                .check("vkQueueSubmit2")?;
        }
        Ok(Submitted {
            start,
            cpu_record_ms,
            shaded,
        })
    }

    /// The sun's shadow map (pass 0 of the transients' lifetimes). Its memory
    /// is the bloom image's too: the barrier waits for the bloom image's last
    /// uses (written in the previous frame's bloom pass, read in its tone map)
    /// and discards the contents (from UNDEFINED).
    ///
    /// # Safety
    /// As [`Self::submit`]'s recording: `rec.cmd` is recording on the
    /// renderer's queue, and every handle recorded lives until the frame's
    /// fence signals.
    unsafe fn record_shadow(&self, rec: &Rec<'_>, scene: &dyn ScenePass) {
        let (d, cmd) = (rec.d, rec.cmd);
        let stamp = |i: u32, stage: vk::PipelineStageFlags2| rec.stamp(i, stage);
        // SAFETY: per the contract above.
        unsafe {
            stamp(0, vk::PipelineStageFlags2::TOP_OF_PIPE);
            let transients = self.targets.transients.as_ref();
            if let (Some(t), Some(e)) = (transients, self.effects.as_ref()) {
                let mut shadow_in = ImageTransition::color(
                    t.shadow.image(),
                    vk::ImageLayout::UNDEFINED,
                    vk::ImageLayout::DEPTH_ATTACHMENT_OPTIMAL,
                )
                .stages(
                    // The bloom image's last uses: written by the bloom pass
                    // (fragment, or compute with visibility shading), read by the
                    // tone map (fragment or compute).
                    vk::PipelineStageFlags2::COLOR_ATTACHMENT_OUTPUT | SAMPLING_STAGES,
                    vk::AccessFlags2::COLOR_ATTACHMENT_WRITE
                        | vk::AccessFlags2::SHADER_STORAGE_WRITE,
                    vk::PipelineStageFlags2::EARLY_FRAGMENT_TESTS
                        | vk::PipelineStageFlags2::LATE_FRAGMENT_TESTS,
                    vk::AccessFlags2::DEPTH_STENCIL_ATTACHMENT_WRITE
                        | vk::AccessFlags2::DEPTH_STENCIL_ATTACHMENT_READ,
                );
                shadow_in.aspect = vk::ImageAspectFlags::DEPTH;
                transition(d, cmd, &[shadow_in]);
                let shadow_area = vk::Rect2D {
                    offset: vk::Offset2D::default(),
                    extent: t.shadow.extent,
                };
                let depth_att = vk::RenderingAttachmentInfo::default()
                    .image_view(t.shadow.view)
                    .image_layout(vk::ImageLayout::DEPTH_ATTACHMENT_OPTIMAL)
                    .load_op(vk::AttachmentLoadOp::CLEAR)
                    .store_op(vk::AttachmentStoreOp::STORE)
                    .clear_value(vk::ClearValue {
                        depth_stencil: vk::ClearDepthStencilValue {
                            depth: 1.0,
                            stencil: 0,
                        },
                    });
                let info = vk::RenderingInfo::default()
                    .render_area(shadow_area)
                    .layer_count(1)
                    .depth_attachment(&depth_att);
                begin_rendering(d, cmd, &info, shadow_area);
                scene.record_shadow(d, cmd, t.shadow.view, e.shadow_sampler);
                d.cmd_end_rendering(cmd);
                let mut shadow_read = ImageTransition::color(
                    t.shadow.image(),
                    vk::ImageLayout::DEPTH_ATTACHMENT_OPTIMAL,
                    vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL,
                )
                .stages(
                    vk::PipelineStageFlags2::EARLY_FRAGMENT_TESTS
                        | vk::PipelineStageFlags2::LATE_FRAGMENT_TESTS,
                    vk::AccessFlags2::DEPTH_STENCIL_ATTACHMENT_WRITE,
                    SAMPLING_STAGES,
                    vk::AccessFlags2::SHADER_SAMPLED_READ,
                );
                shadow_read.aspect = vk::ImageAspectFlags::DEPTH;
                transition(d, cmd, &[shadow_read]);
            }
            stamp(1, vk::PipelineStageFlags2::ALL_COMMANDS);
        }
    }

    /// Scene pass: forward shading into the HDR frame, or, with visibility
    /// shading, the draws' ids into the visibility target and then compute
    /// dispatches that shade every pixel of the HDR frame from it.
    ///
    /// # Safety
    /// As [`Self::submit`]'s recording: `rec.cmd` is recording on the
    /// renderer's queue, and every handle recorded lives until the frame's
    /// fence signals.
    unsafe fn record_scene(
        &self,
        rec: &Rec<'_>,
        scene: &dyn ScenePass,
        vis: Option<&targets::Target>,
    ) {
        let (d, cmd, extent, area) = (rec.d, rec.cmd, rec.extent, rec.area);
        let stamp = |i: u32, stage: vk::PipelineStageFlags2| rec.stamp(i, stage);
        // SAFETY: per the contract above.
        unsafe {
            stamp(2, vk::PipelineStageFlags2::TOP_OF_PIPE);
            let (color_image, color_view) = match vis {
                Some(v) => (v.image(), v.view),
                None => (self.targets.hdr.image(), self.targets.hdr.view),
            };
            let color_in = ImageTransition::color(
                color_image,
                vk::ImageLayout::UNDEFINED,
                vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL,
            )
            .stages(
                SAMPLING_STAGES,
                vk::AccessFlags2::NONE,
                vk::PipelineStageFlags2::COLOR_ATTACHMENT_OUTPUT,
                vk::AccessFlags2::COLOR_ATTACHMENT_WRITE,
            );
            let mut depth_in = ImageTransition::color(
                self.targets.depth.image(),
                vk::ImageLayout::UNDEFINED,
                vk::ImageLayout::DEPTH_ATTACHMENT_OPTIMAL,
            )
            .stages(
                vk::PipelineStageFlags2::LATE_FRAGMENT_TESTS,
                vk::AccessFlags2::NONE,
                vk::PipelineStageFlags2::EARLY_FRAGMENT_TESTS
                    | vk::PipelineStageFlags2::LATE_FRAGMENT_TESTS,
                vk::AccessFlags2::DEPTH_STENCIL_ATTACHMENT_WRITE
                    | vk::AccessFlags2::DEPTH_STENCIL_ATTACHMENT_READ,
            );
            depth_in.aspect = vk::ImageAspectFlags::DEPTH;
            transition(d, cmd, &[color_in, depth_in]);
            let clear = if vis.is_some() {
                // Draw id 0: the sky.
                vk::ClearColorValue { uint32: [0; 4] }
            } else {
                vk::ClearColorValue {
                    float32: [0.02, 0.025, 0.03, 1.0],
                }
            };
            let color_att = [vk::RenderingAttachmentInfo::default()
                .image_view(color_view)
                .image_layout(vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL)
                .load_op(if scene.covers_screen() && vis.is_none() {
                    vk::AttachmentLoadOp::DONT_CARE
                } else {
                    vk::AttachmentLoadOp::CLEAR
                })
                .store_op(vk::AttachmentStoreOp::STORE)
                .clear_value(vk::ClearValue { color: clear })];
            let depth_att = vk::RenderingAttachmentInfo::default()
                .image_view(self.targets.depth.view)
                .image_layout(vk::ImageLayout::DEPTH_ATTACHMENT_OPTIMAL)
                .load_op(vk::AttachmentLoadOp::CLEAR)
                .store_op(vk::AttachmentStoreOp::DONT_CARE)
                .clear_value(vk::ClearValue {
                    depth_stencil: vk::ClearDepthStencilValue {
                        depth: 0.0,
                        stencil: 0,
                    },
                });
            let info = vk::RenderingInfo::default()
                .render_area(area)
                .layer_count(1)
                .color_attachments(&color_att)
                .depth_attachment(&depth_att);
            begin_rendering(d, cmd, &info, area);
            scene.record(d, cmd, extent);
            d.cmd_end_rendering(cmd);
            if let Some(v) = vis {
                let ids = ImageTransition::color(
                    v.image(),
                    vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL,
                    vk::ImageLayout::GENERAL,
                )
                .stages(
                    vk::PipelineStageFlags2::COLOR_ATTACHMENT_OUTPUT,
                    vk::AccessFlags2::COLOR_ATTACHMENT_WRITE,
                    vk::PipelineStageFlags2::COMPUTE_SHADER,
                    vk::AccessFlags2::SHADER_STORAGE_READ,
                );
                // The HDR frame's last uses were the previous frame's bloom and
                // tone map (sampled, in fragment or compute shaders); its contents
                // are discarded.
                let hdr_out = ImageTransition::color(
                    self.targets.hdr.image(),
                    vk::ImageLayout::UNDEFINED,
                    vk::ImageLayout::GENERAL,
                )
                .stages(
                    SAMPLING_STAGES,
                    vk::AccessFlags2::NONE,
                    vk::PipelineStageFlags2::COMPUTE_SHADER,
                    vk::AccessFlags2::SHADER_STORAGE_WRITE,
                );
                stamp(3, vk::PipelineStageFlags2::ALL_COMMANDS);
                transition(d, cmd, &[ids, hdr_out]);
                stamp(14, vk::PipelineStageFlags2::TOP_OF_PIPE);
                scene.record_shade(d, cmd, extent);
                stamp(15, vk::PipelineStageFlags2::ALL_COMMANDS);
            } else {
                stamp(3, vk::PipelineStageFlags2::ALL_COMMANDS);
                // Every query is written, or reading them back finds some not ready.
                stamp(14, vk::PipelineStageFlags2::ALL_COMMANDS);
                stamp(15, vk::PipelineStageFlags2::ALL_COMMANDS);
            }
            stamp(12, vk::PipelineStageFlags2::ALL_COMMANDS);
            scene.record_after_pass(d, cmd);
            stamp(13, vk::PipelineStageFlags2::ALL_COMMANDS);

            let hdr_read = if vis.is_some() {
                ImageTransition::color(
                    self.targets.hdr.image(),
                    vk::ImageLayout::GENERAL,
                    vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL,
                )
                .stages(
                    vk::PipelineStageFlags2::COMPUTE_SHADER,
                    vk::AccessFlags2::SHADER_STORAGE_WRITE,
                    SAMPLING_STAGES,
                    vk::AccessFlags2::SHADER_SAMPLED_READ,
                )
            } else {
                ImageTransition::attachment_to_sampled(self.targets.hdr.image())
            };
            transition(d, cmd, &[hdr_read]);
        }
    }

    /// Bloom (pass 2 of the transients' lifetimes), on the shadow map's memory:
    /// the barrier waits for the shadow map's last uses (written in the shadow
    /// pass, read in the scene pass) and discards the contents.
    ///
    /// # Safety
    /// As [`Self::submit`]'s recording: `rec.cmd` is recording on the
    /// renderer's queue, and every handle recorded lives until the frame's
    /// fence signals.
    unsafe fn record_bloom(&self, rec: &Rec<'_>) {
        let (d, cmd) = (rec.d, rec.cmd);
        let stamp = |i: u32, stage: vk::PipelineStageFlags2| rec.stamp(i, stage);
        let transients = self.targets.transients.as_ref();
        // SAFETY: per the contract above.
        unsafe {
            stamp(4, vk::PipelineStageFlags2::COLOR_ATTACHMENT_OUTPUT);
            if let (Some(t), Some(e), Some(p)) =
                (transients, self.effects.as_ref(), self.post.as_ref())
            {
                // Bloom as a compute pass (visibility shading): the same barrier on
                // the shadow map's last uses, into GENERAL for storage writes.
                let bloom_in = ImageTransition::color(
                    t.bloom.image(),
                    vk::ImageLayout::UNDEFINED,
                    vk::ImageLayout::GENERAL,
                )
                .stages(
                    vk::PipelineStageFlags2::EARLY_FRAGMENT_TESTS
                        | vk::PipelineStageFlags2::LATE_FRAGMENT_TESTS
                        | SAMPLING_STAGES,
                    vk::AccessFlags2::DEPTH_STENCIL_ATTACHMENT_WRITE,
                    vk::PipelineStageFlags2::COMPUTE_SHADER,
                    vk::AccessFlags2::SHADER_STORAGE_WRITE,
                );
                transition(d, cmd, &[bloom_in]);
                post::dispatch(
                    d,
                    cmd,
                    (p.bloom, p.bloom_layout),
                    &[e.bloom_set, p.bloom_set],
                    &[],
                    t.bloom.extent,
                );
                let bloom_read = ImageTransition::color(
                    t.bloom.image(),
                    vk::ImageLayout::GENERAL,
                    vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL,
                )
                .stages(
                    vk::PipelineStageFlags2::COMPUTE_SHADER,
                    vk::AccessFlags2::SHADER_STORAGE_WRITE,
                    SAMPLING_STAGES,
                    vk::AccessFlags2::SHADER_SAMPLED_READ,
                );
                transition(d, cmd, &[bloom_read]);
            } else if let (Some(t), Some(e)) = (transients, self.effects.as_ref()) {
                let bloom_in = ImageTransition::color(
                    t.bloom.image(),
                    vk::ImageLayout::UNDEFINED,
                    vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL,
                )
                .stages(
                    vk::PipelineStageFlags2::EARLY_FRAGMENT_TESTS
                        | vk::PipelineStageFlags2::LATE_FRAGMENT_TESTS
                        | SAMPLING_STAGES,
                    vk::AccessFlags2::DEPTH_STENCIL_ATTACHMENT_WRITE,
                    vk::PipelineStageFlags2::COLOR_ATTACHMENT_OUTPUT,
                    vk::AccessFlags2::COLOR_ATTACHMENT_WRITE,
                );
                transition(d, cmd, &[bloom_in]);
                let bloom_area = vk::Rect2D {
                    offset: vk::Offset2D::default(),
                    extent: t.bloom.extent,
                };
                let att = [vk::RenderingAttachmentInfo::default()
                    .image_view(t.bloom.view)
                    .image_layout(vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL)
                    .load_op(vk::AttachmentLoadOp::DONT_CARE)
                    .store_op(vk::AttachmentStoreOp::STORE)];
                let info = vk::RenderingInfo::default()
                    .render_area(bloom_area)
                    .layer_count(1)
                    .color_attachments(&att);
                begin_rendering(d, cmd, &info, bloom_area);
                d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::GRAPHICS, e.bloom_pipeline);
                d.cmd_bind_descriptor_sets(
                    cmd,
                    vk::PipelineBindPoint::GRAPHICS,
                    e.bloom_layout,
                    0,
                    &[e.bloom_set],
                    &[],
                );
                d.cmd_draw(cmd, 3, 1, 0, 0);
                d.cmd_end_rendering(cmd);
                let bloom_read = ImageTransition::attachment_to_sampled(t.bloom.image());
                transition(d, cmd, &[bloom_read]);
            }
            stamp(5, vk::PipelineStageFlags2::COLOR_ATTACHMENT_OUTPUT);
        }
    }

    /// Tone-map pass: as a compute pass into the display target's storage
    /// view for headless output with visibility shading, else a full-screen
    /// fragment pass; the overlay is drawn over it in a rendering.
    ///
    /// # Safety
    /// As [`Self::submit`]'s recording: `rec.cmd` is recording on the
    /// renderer's queue, and every handle recorded lives until the frame's
    /// fence signals.
    unsafe fn record_tonemap(
        &mut self,
        rec: &Rec<'_>,
        output: &Output,
        (out_image, out_view, pipeline_index): (vk::Image, vk::ImageView, usize),
    ) -> Result<(), GpuError> {
        let (d, cmd, extent, area) = (rec.d, rec.cmd, rec.extent, rec.area);
        let stamp = |i: u32, stage: vk::PipelineStageFlags2| rec.stamp(i, stage);
        // SAFETY: per the contract above.
        unsafe {
            stamp(6, vk::PipelineStageFlags2::COLOR_ATTACHMENT_OUTPUT);
            let push = TonemapPush {
                exposure: self.exposure,
                dim: 1.0,
                pad: [0.0; 2],
                panels: [[0.0; 4]; 2],
            };
            let push = match self.overlay.as_ref().and_then(|o| o.panel_dim()) {
                Some((dim, panels)) => TonemapPush {
                    dim,
                    panels,
                    ..push
                },
                None => push,
            };
            let compute_tonemap = matches!(output, Output::Headless { .. })
                && self.targets.ldr_storage != vk::ImageView::null();
            match self.post.as_ref().filter(|_| compute_tonemap) {
                Some(p) => {
                    let out_in = ImageTransition::color(
                        out_image,
                        vk::ImageLayout::UNDEFINED,
                        vk::ImageLayout::GENERAL,
                    )
                    .stages(
                        vk::PipelineStageFlags2::COPY,
                        vk::AccessFlags2::NONE,
                        vk::PipelineStageFlags2::COMPUTE_SHADER,
                        vk::AccessFlags2::SHADER_STORAGE_WRITE,
                    );
                    transition(d, cmd, &[out_in]);
                    post::dispatch(
                        d,
                        cmd,
                        (p.tonemap, p.tonemap_layout),
                        &[self.tonemap.set, p.ldr_set],
                        bytemuck::bytes_of(&push),
                        extent,
                    );
                    stamp(7, vk::PipelineStageFlags2::ALL_COMMANDS);
                    // Into the layout the overlay draws in and the readback leaves from.
                    let to_attachment = ImageTransition::color(
                        out_image,
                        vk::ImageLayout::GENERAL,
                        vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL,
                    )
                    .stages(
                        vk::PipelineStageFlags2::COMPUTE_SHADER,
                        vk::AccessFlags2::SHADER_STORAGE_WRITE,
                        vk::PipelineStageFlags2::COLOR_ATTACHMENT_OUTPUT,
                        vk::AccessFlags2::COLOR_ATTACHMENT_READ
                            | vk::AccessFlags2::COLOR_ATTACHMENT_WRITE,
                    );
                    transition(d, cmd, &[to_attachment]);
                    stamp(8, vk::PipelineStageFlags2::COLOR_ATTACHMENT_OUTPUT);
                    if let Some(overlay) = self.overlay.as_mut() {
                        let out_att = [vk::RenderingAttachmentInfo::default()
                            .image_view(out_view)
                            .image_layout(vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL)
                            .load_op(vk::AttachmentLoadOp::LOAD)
                            .store_op(vk::AttachmentStoreOp::STORE)];
                        let info = vk::RenderingInfo::default()
                            .render_area(area)
                            .layer_count(1)
                            .color_attachments(&out_att);
                        begin_rendering(d, cmd, &info, area);
                        let format = self.tonemap.pipelines[pipeline_index].0;
                        overlay.record(cmd, format, extent)?;
                        d.cmd_end_rendering(cmd);
                    }
                    stamp(9, vk::PipelineStageFlags2::COLOR_ATTACHMENT_OUTPUT);
                }
                None => {
                    let out_in = ImageTransition::color(
                        out_image,
                        vk::ImageLayout::UNDEFINED,
                        vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL,
                    )
                    .stages(
                        vk::PipelineStageFlags2::COLOR_ATTACHMENT_OUTPUT,
                        vk::AccessFlags2::NONE,
                        vk::PipelineStageFlags2::COLOR_ATTACHMENT_OUTPUT,
                        vk::AccessFlags2::COLOR_ATTACHMENT_WRITE,
                    );
                    transition(d, cmd, &[out_in]);
                    let out_att = [vk::RenderingAttachmentInfo::default()
                        .image_view(out_view)
                        .image_layout(vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL)
                        .load_op(vk::AttachmentLoadOp::DONT_CARE)
                        .store_op(vk::AttachmentStoreOp::STORE)];
                    let info = vk::RenderingInfo::default()
                        .render_area(area)
                        .layer_count(1)
                        .color_attachments(&out_att);
                    begin_rendering(d, cmd, &info, area);
                    d.cmd_bind_pipeline(
                        cmd,
                        vk::PipelineBindPoint::GRAPHICS,
                        self.tonemap.pipelines[pipeline_index].1,
                    );
                    d.cmd_bind_descriptor_sets(
                        cmd,
                        vk::PipelineBindPoint::GRAPHICS,
                        self.tonemap.layout,
                        0,
                        &[self.tonemap.set],
                        &[],
                    );
                    d.cmd_push_constants(
                        cmd,
                        self.tonemap.layout,
                        vk::ShaderStageFlags::VERTEX | vk::ShaderStageFlags::FRAGMENT,
                        0,
                        bytemuck::bytes_of(&push),
                    );
                    d.cmd_draw(cmd, 3, 1, 0, 0);
                    stamp(7, vk::PipelineStageFlags2::COLOR_ATTACHMENT_OUTPUT);
                    // Overlay, in the same rendering (no extra load, store or barrier).
                    stamp(8, vk::PipelineStageFlags2::COLOR_ATTACHMENT_OUTPUT);
                    if let Some(overlay) = self.overlay.as_mut() {
                        let format = self.tonemap.pipelines[pipeline_index].0;
                        overlay.record(cmd, format, extent)?;
                    }
                    stamp(9, vk::PipelineStageFlags2::COLOR_ATTACHMENT_OUTPUT);
                    d.cmd_end_rendering(cmd);
                }
            }
            Ok(())
        }
    }

    /// The output image into its final layout, through a copy into the
    /// readback buffer (and a barrier for the host) where `copy` asks.
    ///
    /// # Safety
    /// As [`Self::submit`]'s recording: `rec.cmd` is recording on the
    /// renderer's queue, and every handle recorded lives until the frame's
    /// fence signals.
    unsafe fn record_readback(
        &self,
        rec: &Rec<'_>,
        out_image: vk::Image,
        copy: bool,
        final_layout: vk::ImageLayout,
    ) {
        let (d, cmd, extent) = (rec.d, rec.cmd, rec.extent);
        let stamp = |i: u32, stage: vk::PipelineStageFlags2| rec.stamp(i, stage);
        // SAFETY: per the contract above.
        unsafe {
            stamp(10, vk::PipelineStageFlags2::COLOR_ATTACHMENT_OUTPUT);
            let after_layout = if copy {
                vk::ImageLayout::TRANSFER_SRC_OPTIMAL
            } else {
                final_layout
            };
            let out_done = ImageTransition::color(
                out_image,
                vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL,
                after_layout,
            )
            .stages(
                vk::PipelineStageFlags2::COLOR_ATTACHMENT_OUTPUT,
                vk::AccessFlags2::COLOR_ATTACHMENT_WRITE,
                if copy {
                    vk::PipelineStageFlags2::COPY
                } else {
                    vk::PipelineStageFlags2::NONE
                },
                if copy {
                    vk::AccessFlags2::TRANSFER_READ
                } else {
                    vk::AccessFlags2::NONE
                },
            );
            transition(d, cmd, &[out_done]);
            if copy {
                let region = vk::BufferImageCopy {
                    buffer_offset: 0,
                    buffer_row_length: 0,
                    buffer_image_height: 0,
                    image_subresource: vk::ImageSubresourceLayers {
                        aspect_mask: vk::ImageAspectFlags::COLOR,
                        mip_level: 0,
                        base_array_layer: 0,
                        layer_count: 1,
                    },
                    image_offset: vk::Offset3D::default(),
                    image_extent: vk::Extent3D {
                        width: extent.width,
                        height: extent.height,
                        depth: 1,
                    },
                };
                d.cmd_copy_image_to_buffer(
                    cmd,
                    out_image,
                    vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
                    self.targets.readback(),
                    &[region],
                );
                let host = [vk::MemoryBarrier2::default()
                    .src_stage_mask(vk::PipelineStageFlags2::COPY)
                    .src_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
                    .dst_stage_mask(vk::PipelineStageFlags2::HOST)
                    .dst_access_mask(vk::AccessFlags2::HOST_READ)];
                d.cmd_pipeline_barrier2(cmd, &vk::DependencyInfo::default().memory_barriers(&host));
                if final_layout != vk::ImageLayout::TRANSFER_SRC_OPTIMAL {
                    let present = ImageTransition::color(
                        out_image,
                        vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
                        final_layout,
                    )
                    .stages(
                        vk::PipelineStageFlags2::COPY,
                        vk::AccessFlags2::NONE,
                        vk::PipelineStageFlags2::NONE,
                        vk::AccessFlags2::NONE,
                    );
                    transition(d, cmd, &[present]);
                }
            }
            stamp(11, vk::PipelineStageFlags2::ALL_COMMANDS);
        }
    }

    /// Waits for the frame [`Self::submit`] gave back and reads its times.
    pub fn finish(&mut self, ctx: &Context, submitted: Submitted) -> Result<FrameTimes, GpuError> {
        let Submitted {
            start,
            cpu_record_ms,
            shaded,
        } = submitted;
        let d = &ctx.device;
        // SAFETY: the fence belongs to the frame `submit` gave to the queue.
        unsafe { crate::gpu::util::wait_and_reset(d, self.fence)? };
        let wall_ms = start.elapsed().as_secs_f64() * 1e3;
        let mut gpu_ms = Vec::new();
        if let Some(q) = self.queries {
            let mut stamps = [0u64; PASSES.len() * 2];
            // SAFETY: the queries were written by the finished submission.
            let ok = unsafe {
                d.get_query_pool_results(q, 0, &mut stamps, vk::QueryResultFlags::TYPE_64)
            };
            if ok.is_ok() {
                for (i, name) in PASSES.iter().enumerate() {
                    if *name == "overlay" && self.overlay.is_none() {
                        continue;
                    }
                    if (*name == "shadow" || *name == "bloom") && self.effects.is_none() {
                        continue;
                    }
                    if *name == "shade" && !shaded {
                        continue;
                    }
                    let ticks = stamps[2 * i + 1].saturating_sub(stamps[2 * i]);
                    gpu_ms.push((name.to_string(), ticks as f64 * self.timestamp_period / 1e6));
                }
            }
        }
        Ok(FrameTimes {
            wall_ms,
            cpu_record_ms,
            gpu_ms,
        })
    }

    /// Destroys everything; waits for the device first.
    pub fn destroy(&mut self, ctx: &Context, mem: &GpuMemory) {
        ctx.wait_idle();
        if let Some(mut overlay) = self.overlay.take() {
            overlay.destroy(ctx);
        }
        let d = &ctx.device;
        // SAFETY: the device is idle.
        unsafe {
            for (_, p) in self.tonemap.pipelines.drain(..) {
                d.destroy_pipeline(p, None);
            }
            d.destroy_pipeline_layout(self.tonemap.layout, None);
            if let Some(e) = self.effects.take() {
                Self::destroy_effects(d, &e);
            }
            if let Some(mut p) = self.post.take() {
                p.destroy(d);
            }
            d.destroy_sampler(self.tonemap.sampler, None);
            d.destroy_descriptor_pool(self.tonemap.pool, None);
            d.destroy_descriptor_set_layout(self.tonemap.set_layout, None);
            if let Some(q) = self.queries.take() {
                d.destroy_query_pool(q, None);
            }
            d.destroy_fence(self.fence, None);
            d.destroy_command_pool(self.command_pool, None);
        }
        self.targets.destroy(d, mem);
    }
}
