//! The PBR scene pass: the gallery's meshes with their materials, lit by the
//! frame's lights. Geometry lives in GPU-only buffers; each frame's uniforms in a
//! ring pool, freed in order once the frame is done.

use ash::vk;
use glam::{Mat4, Vec3, Vec4};

use super::pipelines::{
    create_compute_layout, create_compute_pipeline, create_layout, create_pipeline, one_set,
    PipelineDesc,
};
use super::targets::{DEPTH_FORMAT, HDR_FORMAT, SHADOW_FORMAT, VIS_DRAW_BITS, VIS_FORMAT};
use super::{ScenePass, SceneStreaming, Shading};
use crate::camera::predict::MotionPredictor;
use crate::camera::{Camera, CameraPose, CameraRig, Shot};
use crate::gpu::memory::{
    Buffer, LinearMode, MappedBuffer, MemOptions, MemoryUsage, PoolAlgorithm, PoolId,
};
use crate::gpu::util::OneShot;
use crate::gpu::{Context, GpuError, GpuMemory, VkCheck};
use crate::materials::TextureSet;
use crate::scene::camera::view_proj;
use crate::scene::mesh::Vertex;
use crate::scene::{Gallery, Shape};
use crate::shaders;
use crate::streaming::estimate::View;
use crate::streaming::{Prefill, StreamConfig, StreamFrame, Streamer};

const MAX_LIGHTS: usize = 4;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct LightUniform {
    position: [f32; 4],
    color: [f32; 4],
}

/// The frame's uniforms, laid out as `common.glsl`'s `Frame` block (std140).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct FrameUniforms {
    view_proj: [f32; 16],
    inv_view_proj: [f32; 16],
    camera_pos: [f32; 4],
    sky: [f32; 4],
    ground: [f32; 4],
    lights: [LightUniform; MAX_LIGHTS],
    light_count: [u32; 4],
    stream: [u32; 4],
    light_view_proj: [f32; 16],
    tiles: [u32; 4],
}

/// A draw's push constants, laid out as `common.glsl`'s `Push` block.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Push {
    model: [f32; 16],
    uv_scale: [f32; 4],
    /// Material index, map side at level 0, resident level, draw id (1-based).
    material: [u32; 4],
    /// Visibility shading: first index, vertex offset, the dispatch's first pixel.
    mesh: [u32; 4],
}

/// What [`GalleryPass::record_objects`] draws.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Draw {
    /// Shaded (forward): the materials' textures bound.
    Shaded,
    /// Depth only, from the sun (the floor left out).
    Shadow,
    /// Ids into the visibility buffer.
    Ids,
}

/// Bounding-sphere radius of a shape at unit scale (`None`: treat as covering
/// the screen).
fn bounding_radius(shape: Shape) -> Option<f32> {
    match shape {
        Shape::Sphere => Some(1.0),
        // The box's corner: half-extent 0.85 along each axis (the rounding only
        // pulls it in).
        Shape::RoundedBox => Some(0.85 * 3f32.sqrt()),
        Shape::Floor => None,
    }
}

/// The pixels (x0, y0, x1, y1; x1 and y1 exclusive) that can hold an object whose
/// bounding sphere is `centre`, `radius`, seen through `view_proj` at `extent`: the
/// projection of the sphere's bounding box when all of it is in front of the eye
/// (then the projection of its corners bounds it), else the whole screen.
fn screen_rect(view_proj: Mat4, centre: Vec3, radius: f32, extent: vk::Extent2D) -> [u32; 4] {
    let full = [0, 0, extent.width, extent.height];
    let (mut lo, mut hi) = (glam::Vec2::splat(f32::MAX), glam::Vec2::splat(f32::MIN));
    for i in 0..8 {
        let corner = centre
            + Vec3::new(
                if i & 1 == 0 { -radius } else { radius },
                if i & 2 == 0 { -radius } else { radius },
                if i & 4 == 0 { -radius } else { radius },
            );
        let clip = view_proj * corner.extend(1.0);
        if clip.w <= 1e-4 || !clip.is_finite() {
            return full;
        }
        let ndc = glam::Vec2::new(clip.x, clip.y) / clip.w;
        lo = lo.min(ndc);
        hi = hi.max(ndc);
    }
    let size = glam::Vec2::new(extent.width as f32, extent.height as f32);
    // NDC to pixels, one pixel of margin each side.
    let p0 = ((lo * 0.5 + 0.5) * size - 1.0)
        .floor()
        .max(glam::Vec2::ZERO);
    let p1 = ((hi * 0.5 + 0.5) * size + 1.0).ceil().min(size);
    if p1.x <= p0.x || p1.y <= p0.y {
        return [0, 0, 0, 0];
    }
    [p0.x as u32, p0.y as u32, p1.x as u32, p1.y as u32]
}

#[derive(Clone, Copy)]
struct MeshRange {
    first_index: u32,
    index_count: u32,
    vertex_offset: i32,
}

/// The gallery's scene pass.
pub struct GalleryPass {
    gallery: Gallery,
    /// The materials' textures.
    pub textures: TextureSet,
    frame_set_layout: vk::DescriptorSetLayout,
    frame_pool: vk::DescriptorPool,
    frame_set: vk::DescriptorSet,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    sky: vk::Pipeline,
    /// Draws the sun's shadow map (null without shadows).
    shadow_pipeline: vk::Pipeline,
    /// How the pass shades.
    shading: Shading,
    /// Visibility shading: the id pass, the shading and sky dispatches, and their
    /// set (2: the visibility target, the HDR frame, the vertices and indices).
    vis_pipeline: vk::Pipeline,
    shade_pipeline: vk::Pipeline,
    sky_compute: vk::Pipeline,
    shade_layout: vk::PipelineLayout,
    shade_set_layout: vk::DescriptorSetLayout,
    shade_pool: vk::DescriptorPool,
    shade_set: vk::DescriptorSet,
    /// This frame's view-projection (the shading dispatches' rectangles).
    view_proj: Mat4,
    /// Whether the pass samples the sun's shadow map (the renderer's effects on).
    shadows: bool,
    vertices: Option<Buffer>,
    indices: Option<Buffer>,
    meshes: Vec<MeshRange>,
    uniform_pool: Option<PoolId>,
    uniforms: Option<MappedBuffer>,
    aspect: f32,
    height: u32,
    stream_config: StreamConfig,
    /// The texture streamer (created with the pass).
    pub streamer: Option<Streamer>,
    /// The frame last prepared and the path's frame count: after its
    /// submission the streamer casts the next frame's look-ahead.
    prepared: Option<(u32, u32)>,
    /// Where the camera's poses come from (the script unless set).
    camera: Camera,
    /// The poses shown lately: the prediction of a camera without a future.
    motion: MotionPredictor,
}

impl GalleryPass {
    /// Uploads the meshes and creates the pipelines; `textures` has one set per
    /// material; with `shadows` the pass draws and samples the sun's shadow map (the
    /// renderer must have been made with its effects on); with
    /// [`Shading::Visibility`] the renderer must have been made with a visibility
    /// buffer. On failure everything made so far, `textures` included, is destroyed.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ctx: &Context,
        mem: &GpuMemory,
        gallery: Gallery,
        textures: TextureSet,
        extent: vk::Extent2D,
        stream_config: StreamConfig,
        shadows: bool,
        shading: Shading,
    ) -> Result<Self, GpuError> {
        let mut pass = Self {
            gallery,
            textures,
            frame_set_layout: vk::DescriptorSetLayout::null(),
            frame_pool: vk::DescriptorPool::null(),
            frame_set: vk::DescriptorSet::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            sky: vk::Pipeline::null(),
            shadow_pipeline: vk::Pipeline::null(),
            shading,
            vis_pipeline: vk::Pipeline::null(),
            shade_pipeline: vk::Pipeline::null(),
            sky_compute: vk::Pipeline::null(),
            shade_layout: vk::PipelineLayout::null(),
            shade_set_layout: vk::DescriptorSetLayout::null(),
            shade_pool: vk::DescriptorPool::null(),
            shade_set: vk::DescriptorSet::null(),
            view_proj: Mat4::IDENTITY,
            shadows,
            vertices: None,
            indices: None,
            meshes: Vec::new(),
            uniform_pool: None,
            uniforms: None,
            aspect: extent.width as f32 / extent.height.max(1) as f32,
            height: extent.height,
            stream_config,
            streamer: None,
            prepared: None,
            camera: Camera::Script,
            motion: MotionPredictor::default(),
        };
        match pass.build(ctx, mem) {
            Ok(()) => Ok(pass),
            Err(e) => {
                ctx.wait_idle();
                pass.destroy(ctx, mem);
                Err(e)
            }
        }
    }

    fn build(&mut self, ctx: &Context, mem: &GpuMemory) -> Result<(), GpuError> {
        let d = &ctx.device;
        self.streamer = Some(Streamer::new(
            ctx,
            mem,
            &self.textures,
            self.stream_config.clone(),
            ctx.info.fragment_stores,
            vk::Extent2D {
                width: (self.height as f32 * self.aspect) as u32,
                height: self.height,
            },
        )?);
        // The atlas-filtering emulation's single-level views (a diagnostic).
        self.textures.write_level_views(ctx, mem)?;
        // Meshes into one vertex and one index buffer.
        let mut vertices: Vec<Vertex> = Vec::new();
        let mut indices: Vec<u32> = Vec::new();
        for shape in Shape::ALL {
            let m = shape.mesh();
            self.meshes.push(MeshRange {
                first_index: indices.len() as u32,
                index_count: m.indices.len() as u32,
                vertex_offset: vertices.len() as i32,
            });
            vertices.extend_from_slice(&m.vertices);
            indices.extend_from_slice(&m.indices);
        }
        let vbytes: &[u8] = bytemuck::cast_slice(&vertices);
        let ibytes: &[u8] = bytemuck::cast_slice(&indices);
        // Storage too: the visibility buffer's shading reads the triangles back.
        let vb = upload_buffer(
            ctx,
            mem,
            vbytes,
            vk::BufferUsageFlags::VERTEX_BUFFER | vk::BufferUsageFlags::STORAGE_BUFFER,
            "vertices",
        )?;
        self.vertices = Some(vb);
        let ib = upload_buffer(
            ctx,
            mem,
            ibytes,
            vk::BufferUsageFlags::INDEX_BUFFER | vk::BufferUsageFlags::STORAGE_BUFFER,
            "indices",
        )?;
        self.indices = Some(ib);
        self.uniform_pool = Some(mem.create_pool(
            "frame uniforms",
            MemoryUsage::Upload,
            PoolAlgorithm::Linear(LinearMode::Ring),
            1 << 20,
            1,
            None,
        )?);

        // SAFETY: valid create infos on a live device; each handle is stored at once so
        // that `destroy` frees it if a later step fails.
        unsafe {
            let all_bindings = [
                vk::DescriptorSetLayoutBinding::default()
                    .binding(0)
                    .descriptor_type(vk::DescriptorType::UNIFORM_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(
                        vk::ShaderStageFlags::VERTEX
                            | vk::ShaderStageFlags::FRAGMENT
                            | vk::ShaderStageFlags::COMPUTE,
                    ),
                // The streaming feedback.
                vk::DescriptorSetLayoutBinding::default()
                    .binding(1)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::FRAGMENT | vk::ShaderStageFlags::COMPUTE),
                // The tile residency map (a placeholder when streaming by levels).
                vk::DescriptorSetLayoutBinding::default()
                    .binding(3)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::FRAGMENT | vk::ShaderStageFlags::COMPUTE),
                // The sun's shadow map (with shadows).
                vk::DescriptorSetLayoutBinding::default()
                    .binding(2)
                    .descriptor_type(vk::DescriptorType::COMBINED_IMAGE_SAMPLER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::FRAGMENT | vk::ShaderStageFlags::COMPUTE),
            ];
            let bindings = &all_bindings[..if self.shadows { 4 } else { 3 }];
            self.frame_set_layout = d
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(bindings),
                    None,
                )
                .check("vkCreateDescriptorSetLayout")?;
            let sizes = [
                vk::DescriptorPoolSize {
                    ty: vk::DescriptorType::COMBINED_IMAGE_SAMPLER,
                    descriptor_count: 1,
                },
                vk::DescriptorPoolSize {
                    ty: vk::DescriptorType::UNIFORM_BUFFER,
                    descriptor_count: 1,
                },
                vk::DescriptorPoolSize {
                    ty: vk::DescriptorType::STORAGE_BUFFER,
                    descriptor_count: 2,
                },
            ];
            (self.frame_pool, self.frame_set) = one_set(d, self.frame_set_layout, &sizes)?;
            if let Some(s) = self.streamer.as_ref() {
                let (buffer, range) = s.feedback_buffer();
                let info = [vk::DescriptorBufferInfo {
                    buffer,
                    offset: 0,
                    range,
                }];
                let (map, map_range) = s.residency_buffer();
                let map_info = [vk::DescriptorBufferInfo {
                    buffer: map,
                    offset: 0,
                    range: map_range,
                }];
                let writes = [
                    vk::WriteDescriptorSet::default()
                        .dst_set(self.frame_set)
                        .dst_binding(1)
                        .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                        .buffer_info(&info),
                    vk::WriteDescriptorSet::default()
                        .dst_set(self.frame_set)
                        .dst_binding(3)
                        .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                        .buffer_info(&map_info),
                ];
                d.update_descriptor_sets(&writes, &[]);
            }
        }
        // Streaming by tiles on a device with shaderResourceMinLod: the shaders
        // clamp the sampler's LOD in hardware (the `_MINLOD` variants).
        let min_lod = ctx.info.min_lod
            && self
                .streamer
                .as_ref()
                .is_some_and(|s| s.residency().tiled());
        self.layout = create_layout(
            d,
            &[self.frame_set_layout, self.textures.set_layout],
            std::mem::size_of::<Push>() as u32,
        )?;
        let bindings = [vk::VertexInputBindingDescription {
            binding: 0,
            stride: std::mem::size_of::<Vertex>() as u32,
            input_rate: vk::VertexInputRate::VERTEX,
        }];
        let attr = |location, format, offset| vk::VertexInputAttributeDescription {
            location,
            binding: 0,
            format,
            offset,
        };
        let attributes = [
            attr(0, vk::Format::R32G32B32_SFLOAT, 0),
            attr(1, vk::Format::R32G32B32_SFLOAT, 12),
            attr(2, vk::Format::R32G32B32A32_SFLOAT, 24),
            attr(3, vk::Format::R32G32_SFLOAT, 40),
        ];
        self.pipeline = create_pipeline(
            d,
            &PipelineDesc {
                vertex: shaders::PBR_VERT,
                fragment: match (self.textures.bindless, self.shadows) {
                    (true, true) if min_lod => shaders::PBR_BINDLESS_SHADOW_FRAG_MINLOD,
                    (true, false) if min_lod => shaders::PBR_BINDLESS_FRAG_MINLOD,
                    (false, true) if min_lod => shaders::PBR_SHADOW_FRAG_MINLOD,
                    (false, false) if min_lod => shaders::PBR_FRAG_MINLOD,
                    (true, true) => shaders::PBR_BINDLESS_SHADOW_FRAG,
                    (true, false) => shaders::PBR_BINDLESS_FRAG,
                    (false, true) => shaders::PBR_SHADOW_FRAG,
                    (false, false) => shaders::PBR_FRAG,
                },
                layout: self.layout,
                color_format: HDR_FORMAT,
                depth_format: Some(DEPTH_FORMAT),
                bindings: &bindings,
                attributes: &attributes,
                cull_back: true,
                depth_compare: vk::CompareOp::GREATER,
                depth_write: true,
            },
        )?;
        self.sky = create_pipeline(
            d,
            &PipelineDesc {
                vertex: shaders::FULLSCREEN_VERT,
                fragment: shaders::SKY_FRAG,
                layout: self.layout,
                color_format: HDR_FORMAT,
                depth_format: Some(DEPTH_FORMAT),
                bindings: &[],
                attributes: &[],
                cull_back: false,
                depth_compare: vk::CompareOp::GREATER_OR_EQUAL,
                depth_write: false,
            },
        )?;
        if self.shading == Shading::Visibility {
            self.build_visibility(ctx, &bindings, &attributes)?;
        }
        if self.shadows {
            self.shadow_pipeline = create_pipeline(
                d,
                &PipelineDesc {
                    vertex: shaders::SHADOW_VERT,
                    fragment: &[],
                    layout: self.layout,
                    color_format: vk::Format::UNDEFINED,
                    depth_format: Some(SHADOW_FORMAT),
                    bindings: &bindings,
                    attributes: &attributes[..1],
                    cull_back: false,
                    depth_compare: vk::CompareOp::LESS,
                    depth_write: true,
                },
            )?;
        }
        Ok(())
    }

    /// The streamer's view of frame `frame` of `frames` and the views of the
    /// camera path's next `lookahead` frames (a cut among them included): the
    /// look-ahead, where the camera knows its future (the script's); else
    /// the poses its recent motion predicts (the frames observed so far)
    /// and, with `--tune view.guard`, the present pose through a wider
    /// frustum ([`View::widened`]).
    fn stream_views(&self, frame: u32, frames: u32, lookahead: u32) -> (View, Vec<View>) {
        let shot = self.shot(frame, frames);
        let view = View {
            pose: shot.pose.pose(),
            fov_y: shot.pose.fov_y(),
            aspect: self.aspect,
            height: self.height,
            cut: shot.cut,
        };
        if !self.camera.knows_future() {
            let ahead = self.motion.predict(lookahead);
            let mut ahead: Vec<View> = ahead
                .iter()
                .map(|p| View {
                    pose: p.pose(),
                    fov_y: p.fov_y(),
                    cut: false,
                    ..view
                })
                .collect();
            if lookahead > 0 {
                ahead.extend(view.widened(self.stream_config.tuning.view.guard));
            }
            return (view, ahead);
        }
        let ahead = (1..=lookahead)
            .map(|k| frame + k)
            .take_while(|&f| f < frames)
            .map(|f| {
                let shot = self.shot(f, frames);
                View {
                    pose: shot.pose.pose(),
                    fov_y: shot.pose.fov_y(),
                    cut: shot.cut,
                    ..view
                }
            })
            .collect();
        (view, ahead)
    }

    /// The visibility buffer's pipelines and set (see [`Shading::Visibility`]).
    fn build_visibility(
        &mut self,
        ctx: &Context,
        bindings: &[vk::VertexInputBindingDescription],
        attributes: &[vk::VertexInputAttributeDescription],
    ) -> Result<(), GpuError> {
        let d = &ctx.device;
        let min_lod = ctx.info.min_lod
            && self
                .streamer
                .as_ref()
                .is_some_and(|s| s.residency().tiled());
        let draws = self.gallery.objects.len() as u64;
        let triangles = self
            .meshes
            .iter()
            .map(|m| u64::from(m.index_count / 3))
            .max()
            .unwrap_or(0);
        if draws >= 1 << VIS_DRAW_BITS || triangles > 1 << (32 - VIS_DRAW_BITS) {
            return Err(GpuError::Other(format!(
                "visibility shading: {draws} draws and meshes of up to {triangles} triangles don't fit the \
                 visibility buffer's ids (at most {} draws, {} triangles a mesh); use --shading forward",
                (1u64 << VIS_DRAW_BITS) - 1,
                1u64 << (32 - VIS_DRAW_BITS)
            )));
        }
        self.vis_pipeline = create_pipeline(
            d,
            &PipelineDesc {
                vertex: shaders::VIS_VERT,
                fragment: shaders::VIS_FRAG,
                layout: self.layout,
                color_format: VIS_FORMAT,
                depth_format: Some(DEPTH_FORMAT),
                bindings,
                attributes: &attributes[..1],
                cull_back: true,
                depth_compare: vk::CompareOp::GREATER,
                depth_write: true,
            },
        )?;
        // SAFETY: valid create infos on a live device; each handle is stored at once
        // so that `destroy` frees it if a later step fails.
        unsafe {
            let binding = |i, ty| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(i)
                    .descriptor_type(ty)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            };
            let bindings = [
                binding(0, vk::DescriptorType::STORAGE_IMAGE),
                binding(1, vk::DescriptorType::STORAGE_IMAGE),
                binding(2, vk::DescriptorType::STORAGE_BUFFER),
                binding(3, vk::DescriptorType::STORAGE_BUFFER),
            ];
            self.shade_set_layout = d
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                    None,
                )
                .check("vkCreateDescriptorSetLayout")?;
            let sizes = [
                vk::DescriptorPoolSize {
                    ty: vk::DescriptorType::STORAGE_IMAGE,
                    descriptor_count: 2,
                },
                vk::DescriptorPoolSize {
                    ty: vk::DescriptorType::STORAGE_BUFFER,
                    descriptor_count: 2,
                },
            ];
            (self.shade_pool, self.shade_set) = one_set(d, self.shade_set_layout, &sizes)?;
            let buffer = |b: &Option<Buffer>| {
                [vk::DescriptorBufferInfo {
                    buffer: b.as_ref().map_or(vk::Buffer::null(), Buffer::raw),
                    offset: 0,
                    range: vk::WHOLE_SIZE,
                }]
            };
            let (vertices, indices) = (buffer(&self.vertices), buffer(&self.indices));
            let writes = [
                vk::WriteDescriptorSet::default()
                    .dst_set(self.shade_set)
                    .dst_binding(2)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(&vertices),
                vk::WriteDescriptorSet::default()
                    .dst_set(self.shade_set)
                    .dst_binding(3)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(&indices),
            ];
            d.update_descriptor_sets(&writes, &[]);
        }
        self.shade_layout = create_compute_layout(
            d,
            &[
                self.frame_set_layout,
                self.textures.set_layout,
                self.shade_set_layout,
            ],
            std::mem::size_of::<Push>() as u32,
        )?;
        self.shade_pipeline = create_compute_pipeline(
            d,
            match (self.textures.bindless, self.shadows) {
                (true, true) if min_lod => shaders::PBR_SHADE_BINDLESS_SHADOW_COMP_MINLOD,
                (true, false) if min_lod => shaders::PBR_SHADE_BINDLESS_COMP_MINLOD,
                (false, true) if min_lod => shaders::PBR_SHADE_SHADOW_COMP_MINLOD,
                (false, false) if min_lod => shaders::PBR_SHADE_COMP_MINLOD,
                (true, true) => shaders::PBR_SHADE_BINDLESS_SHADOW_COMP,
                (true, false) => shaders::PBR_SHADE_BINDLESS_COMP,
                (false, true) => shaders::PBR_SHADE_SHADOW_COMP,
                (false, false) => shaders::PBR_SHADE_COMP,
            },
            self.shade_layout,
        )?;
        self.sky_compute = create_compute_pipeline(d, shaders::SKY_COMP, self.shade_layout)?;
        Ok(())
    }

    /// The push constants of `o`, the `draw`-th object (0-based).
    fn push_for(&self, draw: usize, o: &crate::scene::Object) -> Push {
        let mesh = self.meshes[Shape::ALL.iter().position(|s| *s == o.shape).unwrap_or(0)];
        Push {
            model: o.model.to_cols_array(),
            uv_scale: o.uv_scale.to_array(),
            material: match self.streamer.as_ref() {
                Some(s) => [
                    o.material as u32,
                    s.map_size(o.material),
                    s.drawn_level(o.material),
                    draw as u32 + 1,
                ],
                None => [o.material as u32, 1, 0, draw as u32 + 1],
            },
            mesh: [mesh.first_index, mesh.vertex_offset.max(0) as u32, 0, 0],
        }
    }

    /// The sun's (light 0's) view-projection: an orthographic box around the
    /// objects (the floor aside), depth 0 nearest the sun.
    fn sun_view_proj(&self) -> Mat4 {
        let sun = self
            .gallery
            .lights
            .first()
            .filter(|l| l.position.w == 0.0)
            .map(|l| l.position.truncate().normalize_or(Vec3::Y))
            .unwrap_or(Vec3::Y);
        let centres: Vec<Vec3> = self
            .gallery
            .objects
            .iter()
            .filter(|o| o.shape != Shape::Floor)
            .map(|o| o.model.w_axis.truncate())
            .collect();
        let centre = centres.iter().copied().sum::<Vec3>() / centres.len().max(1) as f32;
        // Each object is within 1.2 of its centre; a margin for the shadows they cast.
        let radius = centres
            .iter()
            .map(|c| c.distance(centre))
            .fold(0.0f32, f32::max)
            + 2.5;
        let eye = centre + sun * radius * 2.0;
        let up = if sun.y.abs() > 0.99 { Vec3::Z } else { Vec3::Y };
        let view = Mat4::look_at_rh(eye, centre, up);
        let proj = Mat4::orthographic_rh(-radius, radius, -radius, radius, radius, radius * 3.0);
        proj * view
    }

    /// Records the objects' draws with the pipeline bound for `draw`.
    ///
    /// # Safety
    /// `cmd` is recording inside a render pass of a live device, a pipeline of
    /// `self.layout` bound.
    unsafe fn record_objects(&self, d: &ash::Device, cmd: vk::CommandBuffer, draw: Draw) {
        // SAFETY: per the contract; every handle is live until the frame's fence.
        unsafe {
            d.cmd_bind_descriptor_sets(
                cmd,
                vk::PipelineBindPoint::GRAPHICS,
                self.layout,
                0,
                &[self.frame_set],
                &[],
            );
            let vertices = self
                .vertices
                .as_ref()
                .map_or(vk::Buffer::null(), Buffer::raw);
            let indices = self
                .indices
                .as_ref()
                .map_or(vk::Buffer::null(), Buffer::raw);
            d.cmd_bind_vertex_buffers(cmd, 0, &[vertices], &[0]);
            d.cmd_bind_index_buffer(cmd, indices, 0, vk::IndexType::UINT32);
            let bindless = self.textures.bindless;
            if bindless && draw == Draw::Shaded {
                // One set for every material; the draw's material index is pushed.
                d.cmd_bind_descriptor_sets(
                    cmd,
                    vk::PipelineBindPoint::GRAPHICS,
                    self.layout,
                    1,
                    &[self.textures.sets[0]],
                    &[],
                );
            }
            for (i, o) in self.gallery.objects.iter().enumerate() {
                if draw == Draw::Shadow && o.shape == Shape::Floor {
                    // The floor casts no shadow (nothing is below it).
                    continue;
                }
                let mesh = self.meshes[Shape::ALL.iter().position(|s| *s == o.shape).unwrap_or(0)];
                let push = self.push_for(i, o);
                if !bindless && draw == Draw::Shaded {
                    d.cmd_bind_descriptor_sets(
                        cmd,
                        vk::PipelineBindPoint::GRAPHICS,
                        self.layout,
                        1,
                        &[self.textures.sets[o.material]],
                        &[],
                    );
                }
                d.cmd_push_constants(
                    cmd,
                    self.layout,
                    vk::ShaderStageFlags::VERTEX | vk::ShaderStageFlags::FRAGMENT,
                    0,
                    bytemuck::bytes_of(&push),
                );
                d.cmd_draw_indexed(
                    cmd,
                    mesh.index_count,
                    1,
                    mesh.first_index,
                    mesh.vertex_offset,
                    0,
                );
            }
        }
    }
}

/// Creates a GPU-only buffer holding `bytes`, filled through a temporary upload buffer.
fn upload_buffer(
    ctx: &Context,
    mem: &GpuMemory,
    bytes: &[u8],
    usage: vk::BufferUsageFlags,
    tag: &str,
) -> Result<Buffer, GpuError> {
    let size = bytes.len() as u64;
    let mut staging = mem.create_buffer_mapped(
        &vk::BufferCreateInfo::default()
            .size(size)
            .usage(vk::BufferUsageFlags::TRANSFER_SRC),
        &MemOptions::new(MemoryUsage::Upload, "geometry staging"),
    )?;
    staging
        .mapped_mut()
        .write(0, bytes)
        .expect("write inside the allocation");
    mem.flush(staging.allocation());
    let result = mem.create_buffer(
        &vk::BufferCreateInfo::default()
            .size(size)
            .usage(usage | vk::BufferUsageFlags::TRANSFER_DST),
        &MemOptions::new(MemoryUsage::GpuOnly, tag),
    );
    let copied = result.and_then(|buffer| {
        let one = OneShot::new(ctx)?;
        let r = one.run(ctx, |cmd| {
            // SAFETY: recording; both buffers are live and large enough.
            unsafe {
                ctx.device.cmd_copy_buffer(
                    cmd,
                    staging.raw(),
                    buffer.raw(),
                    &[vk::BufferCopy {
                        src_offset: 0,
                        dst_offset: 0,
                        size,
                    }],
                )
            };
        });
        one.destroy(&ctx.device);
        r.map(|()| buffer)
    });
    // SAFETY: the copy finished (OneShot waits) or never ran.
    unsafe { mem.destroy_buffer(staging) };
    copied
}

impl ScenePass for GalleryPass {
    fn camera_rig(&mut self) -> Option<&mut dyn CameraRig> {
        Some(self)
    }

    fn streaming(&self) -> Option<&dyn SceneStreaming> {
        Some(self)
    }

    fn streaming_mut(&mut self) -> Option<&mut dyn SceneStreaming> {
        Some(self)
    }

    fn prepare(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        frame: u32,
        frames: u32,
    ) -> Result<(), GpuError> {
        let d = &ctx.device;
        // The previous frame is done (the renderer waits for each frame): free its
        // uniforms first, so the ring frees in allocation order.
        if let Some(b) = self.uniforms.take() {
            // SAFETY: the previous frame finished.
            unsafe { mem.destroy_buffer(b) };
        }
        let shot = self.shot(frame, frames);
        let (pose, fov_y) = (shot.pose.pose(), shot.pose.fov_y());
        let mut stream = [0; 4];
        let mut tiles = [0; 4];
        let lookahead = self.streamer.as_ref().map_or(0, Streamer::lookahead_frames);
        self.motion.observe(shot.pose);
        let (view, ahead) = self.stream_views(frame, frames, lookahead);
        self.prepared = Some((frame, frames));
        if let Some(s) = self.streamer.as_mut() {
            let cut = shot.cut;
            s.prepare(
                ctx,
                mem,
                &mut self.textures,
                &self.gallery.objects,
                &view,
                cut,
                &ahead,
            )?;
            stream = s.uniform();
            tiles = s.tiles_uniform();
        }
        stream[3] = self.textures.emulation_word();
        let vp = view_proj(pose, self.aspect, fov_y);
        self.view_proj = vp;
        let mut lights = [LightUniform {
            position: [0.0; 4],
            color: [0.0; 4],
        }; MAX_LIGHTS];
        for (dst, l) in lights.iter_mut().zip(&self.gallery.lights) {
            dst.position = l.position.to_array();
            dst.color = Vec4::from((l.color, 0.0)).to_array();
        }
        let u = FrameUniforms {
            view_proj: vp.to_cols_array(),
            inv_view_proj: vp.inverse().to_cols_array(),
            camera_pos: Vec4::from((pose.eye, 1.0)).to_array(),
            sky: Vec4::from((self.gallery.sky, 0.0)).to_array(),
            ground: Vec4::from((self.gallery.ground, 0.0)).to_array(),
            lights,
            light_count: [self.gallery.lights.len().min(MAX_LIGHTS) as u32, 0, 0, 0],
            stream,
            light_view_proj: self.sun_view_proj().to_cols_array(),
            tiles,
        };
        let bytes = bytemuck::bytes_of(&u);
        let mut buffer = mem.create_buffer_mapped(
            &vk::BufferCreateInfo::default()
                .size(bytes.len() as u64)
                .usage(vk::BufferUsageFlags::UNIFORM_BUFFER),
            &MemOptions::new(MemoryUsage::Upload, "frame uniforms")
                .in_pool(self.uniform_pool.expect("built")),
        )?;
        buffer
            .mapped_mut()
            .write(0, bytes)
            .expect("write inside the allocation");
        mem.flush(buffer.allocation());
        let info = [vk::DescriptorBufferInfo {
            buffer: buffer.raw(),
            offset: 0,
            range: bytes.len() as u64,
        }];
        let write = vk::WriteDescriptorSet::default()
            .dst_set(self.frame_set)
            .dst_binding(0)
            .descriptor_type(vk::DescriptorType::UNIFORM_BUFFER)
            .buffer_info(&info);
        // SAFETY: the set is not in use (the previous frame finished).
        unsafe { d.update_descriptor_sets(&[write], &[]) };
        self.uniforms = Some(buffer);
        Ok(())
    }

    unsafe fn record(&self, d: &ash::Device, cmd: vk::CommandBuffer, _extent: vk::Extent2D) {
        if self.shading == Shading::Visibility {
            // SAFETY: per the trait's contract.
            unsafe {
                d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::GRAPHICS, self.vis_pipeline);
                self.record_objects(d, cmd, Draw::Ids);
            }
            return;
        }
        // SAFETY: per the trait's contract; every handle is live until the frame's fence.
        unsafe {
            d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::GRAPHICS, self.pipeline);
            self.record_objects(d, cmd, Draw::Shaded);
            // The sky last: only pixels no object covered pass its depth test.
            d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::GRAPHICS, self.sky);
            d.cmd_draw(cmd, 3, 1, 0, 0);
        }
    }

    unsafe fn record_shadow(
        &self,
        d: &ash::Device,
        cmd: vk::CommandBuffer,
        shadow_map: vk::ImageView,
        sampler: vk::Sampler,
    ) {
        if !self.shadows {
            return;
        }
        // Written every frame: the view changes when the targets are recreated
        // (a resize), and a new view may reuse the old handle's value.
        let info = [vk::DescriptorImageInfo {
            sampler,
            image_view: shadow_map,
            image_layout: vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL,
        }];
        let write = vk::WriteDescriptorSet::default()
            .dst_set(self.frame_set)
            .dst_binding(2)
            .descriptor_type(vk::DescriptorType::COMBINED_IMAGE_SAMPLER)
            .image_info(&info);
        // SAFETY: the previous frame finished (the renderer waits for each frame's
        // fence) and this command buffer has not bound the set yet (the shadow pass is
        // recorded first).
        unsafe { d.update_descriptor_sets(&[write], &[]) };
        // SAFETY: per the trait's contract.
        unsafe {
            d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::GRAPHICS, self.shadow_pipeline);
            self.record_objects(d, cmd, Draw::Shadow);
        }
    }

    fn destroy(&mut self, ctx: &Context, mem: &GpuMemory) {
        let d = &ctx.device;
        // SAFETY: the device is idle.
        unsafe {
            if let Some(b) = self.uniforms.take() {
                mem.destroy_buffer(b);
            }
            if let Some(b) = self.vertices.take() {
                mem.destroy_buffer(b);
            }
            if let Some(b) = self.indices.take() {
                mem.destroy_buffer(b);
            }
            d.destroy_pipeline(self.pipeline, None);
            d.destroy_pipeline(self.sky, None);
            d.destroy_pipeline(self.shadow_pipeline, None);
            d.destroy_pipeline(self.vis_pipeline, None);
            d.destroy_pipeline(self.shade_pipeline, None);
            d.destroy_pipeline(self.sky_compute, None);
            d.destroy_pipeline_layout(self.shade_layout, None);
            d.destroy_descriptor_pool(self.shade_pool, None);
            d.destroy_descriptor_set_layout(self.shade_set_layout, None);
            d.destroy_pipeline_layout(self.layout, None);
            d.destroy_descriptor_pool(self.frame_pool, None);
            d.destroy_descriptor_set_layout(self.frame_set_layout, None);
        }
        if let Some(p) = self.uniform_pool.take() {
            mem.destroy_pool(p);
        }
        if let Some(mut s) = self.streamer.take() {
            s.destroy(ctx, mem, &self.textures);
        }
        self.textures.destroy(ctx, mem);
    }

    fn resize(&mut self, extent: vk::Extent2D) {
        self.aspect = extent.width as f32 / extent.height.max(1) as f32;
        self.height = extent.height;
    }

    fn covers_screen(&self) -> bool {
        true
    }

    fn visibility(&self) -> bool {
        self.shading == Shading::Visibility
    }

    unsafe fn write_shade_targets(&self, d: &ash::Device, vis: vk::ImageView, hdr: vk::ImageView) {
        let image = |view| {
            [vk::DescriptorImageInfo {
                sampler: vk::Sampler::null(),
                image_view: view,
                image_layout: vk::ImageLayout::GENERAL,
            }]
        };
        let (vis, hdr) = (image(vis), image(hdr));
        let writes = [
            vk::WriteDescriptorSet::default()
                .dst_set(self.shade_set)
                .dst_binding(0)
                .descriptor_type(vk::DescriptorType::STORAGE_IMAGE)
                .image_info(&vis),
            vk::WriteDescriptorSet::default()
                .dst_set(self.shade_set)
                .dst_binding(1)
                .descriptor_type(vk::DescriptorType::STORAGE_IMAGE)
                .image_info(&hdr),
        ];
        // SAFETY: per the trait's contract: the set is not in use.
        unsafe { d.update_descriptor_sets(&writes, &[]) };
    }

    unsafe fn record_shade(&self, d: &ash::Device, cmd: vk::CommandBuffer, extent: vk::Extent2D) {
        const GROUP: u32 = 8;
        // SAFETY: per the trait's contract; every handle is live until the frame's fence.
        unsafe {
            d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, self.shade_pipeline);
            d.cmd_bind_descriptor_sets(
                cmd,
                vk::PipelineBindPoint::COMPUTE,
                self.shade_layout,
                0,
                &[self.frame_set],
                &[],
            );
            d.cmd_bind_descriptor_sets(
                cmd,
                vk::PipelineBindPoint::COMPUTE,
                self.shade_layout,
                2,
                &[self.shade_set],
                &[],
            );
            let bindless = self.textures.bindless;
            if bindless {
                d.cmd_bind_descriptor_sets(
                    cmd,
                    vk::PipelineBindPoint::COMPUTE,
                    self.shade_layout,
                    1,
                    &[self.textures.sets[0]],
                    &[],
                );
            }
            // One dispatch per draw over its screen rectangle, started on a multiple
            // of 8 pixels so that the feedback's one pixel per 8x8 tile is each
            // group's first. Each pixel belongs to one draw (or the sky), so the
            // dispatches write disjoint pixels and need no barrier between them.
            for (i, o) in self.gallery.objects.iter().enumerate() {
                let rect = match bounding_radius(o.shape) {
                    Some(r) => screen_rect(
                        self.view_proj,
                        o.model.w_axis.truncate(),
                        r * o.scale(),
                        extent,
                    ),
                    None => [0, 0, extent.width, extent.height],
                };
                let (x0, y0) = (rect[0] / GROUP * GROUP, rect[1] / GROUP * GROUP);
                if rect[2] <= x0 || rect[3] <= y0 {
                    continue;
                }
                let mut push = self.push_for(i, o);
                push.mesh[2] = x0;
                push.mesh[3] = y0;
                if !bindless {
                    d.cmd_bind_descriptor_sets(
                        cmd,
                        vk::PipelineBindPoint::COMPUTE,
                        self.shade_layout,
                        1,
                        &[self.textures.sets[o.material]],
                        &[],
                    );
                }
                d.cmd_push_constants(
                    cmd,
                    self.shade_layout,
                    vk::ShaderStageFlags::COMPUTE,
                    0,
                    bytemuck::bytes_of(&push),
                );
                d.cmd_dispatch(
                    cmd,
                    (rect[2] - x0).div_ceil(GROUP),
                    (rect[3] - y0).div_ceil(GROUP),
                    1,
                );
            }
            d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, self.sky_compute);
            d.cmd_dispatch(
                cmd,
                extent.width.div_ceil(GROUP),
                extent.height.div_ceil(GROUP),
                1,
            );
        }
    }

    fn texture_bytes(&self) -> u64 {
        match self.streamer.as_ref() {
            Some(s) => s.resident_bytes(&self.textures),
            None => self.textures.resident_bytes(),
        }
    }

    unsafe fn record_after_pass(&self, device: &ash::Device, cmd: vk::CommandBuffer) {
        if let Some(s) = self.streamer.as_ref() {
            // SAFETY: per the trait's contract.
            unsafe { s.record_after_pass(device, cmd) };
        }
    }
}

impl SceneStreaming for GalleryPass {
    fn prefill(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        frames: u32,
        limit: std::time::Duration,
    ) -> Result<Option<Prefill>, GpuError> {
        let Some(lookahead) = self.streamer.as_ref().map(Streamer::lookahead_frames) else {
            return Ok(None);
        };
        // The views `prepare` gives the streamer for frame 0.
        let (view, ahead) = self.stream_views(0, frames, lookahead);
        match self.streamer.as_mut() {
            Some(s) => s.prefill(
                ctx,
                mem,
                &mut self.textures,
                &self.gallery.objects,
                &view,
                &ahead,
                limit,
            ),
            None => Ok(None),
        }
    }

    fn residency(&self) -> Option<&'static str> {
        self.streamer.as_ref().map(|s| s.residency().name())
    }

    fn after_submit(&mut self, ctx: &Context, mem: &GpuMemory) -> Result<(), GpuError> {
        let Some(s) = self.streamer.as_mut() else {
            return Ok(());
        };
        s.after_submit(ctx, mem)?;
        // The next frame's look-ahead depends on the camera path alone: cast
        // now, while the GPU draws this frame (where the path is known ahead).
        let known = self.camera.knows_future();
        if let Some((frame, frames)) = self.prepared.filter(|&(f, n)| f + 1 < n && known) {
            let lookahead = self.streamer.as_ref().map_or(0, Streamer::lookahead_frames);
            let (view, ahead) = self.stream_views(frame + 1, frames, lookahead);
            let cut = view.cut;
            if let Some(s) = self.streamer.as_mut() {
                s.cast_ahead(&self.gallery.objects, &view, cut, &ahead);
                // And, where asked (`--tune tiles.plan-early=1`), plans
                // its tiles from that cast: the binds queue behind this frame
                // instead of after the wait for it.
                s.plan_ahead(ctx, mem)?;
            }
        }
        Ok(())
    }

    fn frame_done(&mut self, ctx: &Context, mem: &GpuMemory) -> Option<StreamFrame> {
        let textures = &self.textures;
        self.streamer
            .as_mut()
            .map(|s| s.frame_done(ctx, mem, textures))
    }

    fn streaming_panel(&self) -> Option<crate::streaming::Panel> {
        self.streamer.as_ref().map(|s| s.panel(&self.textures))
    }
}

impl CameraRig for GalleryPass {
    fn set_camera(&mut self, camera: Camera) {
        self.camera = camera;
    }

    fn shot(&self, frame: u32, frames: u32) -> Shot {
        self.camera.shot(&self.gallery.path, frame, frames)
    }

    fn script_pose(&self, frame: u32, frames: u32) -> CameraPose {
        CameraPose::scripted(self.gallery.path.pose(frame, frames))
    }

    fn lookahead(&self) -> &'static str {
        match self.streamer.as_ref().map_or(0, Streamer::lookahead_frames) {
            0 => "off",
            _ if self.camera.knows_future() => "script",
            _ => "prediction",
        }
    }
}
