//! The PBR scene pass: the gallery's meshes with their materials, lit by the
//! frame's lights. Geometry lives in GPU-only buffers; each frame's uniforms in a
//! ring pool, freed in order once the frame is done.

use ash::vk;
use glam::{Mat4, Vec3, Vec4};

use super::pipelines::{create_layout, create_pipeline, PipelineDesc};
use super::targets::{DEPTH_FORMAT, HDR_FORMAT, SHADOW_FORMAT};
use super::ScenePass;
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

/// Vertical field of view of the gallery's camera.
const FOV_Y_DEGREES: f32 = 50.0;

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
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Push {
    model: [f32; 16],
    uv_scale: [f32; 4],
    material: [u32; 4],
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
}

impl GalleryPass {
    /// Uploads the meshes and creates the pipelines; `textures` has one set per
    /// material; with `shadows` the pass draws and samples the sun's shadow map (the
    /// renderer must have been made with its effects on). On failure everything made
    /// so far, `textures` included, is destroyed.
    pub fn new(
        ctx: &Context,
        mem: &GpuMemory,
        gallery: Gallery,
        textures: TextureSet,
        extent: vk::Extent2D,
        stream_config: StreamConfig,
        shadows: bool,
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
            self.stream_config,
            ctx.info.fragment_stores,
            vk::Extent2D {
                width: (self.height as f32 * self.aspect) as u32,
                height: self.height,
            },
        )?);
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
        let vb = upload_buffer(
            ctx,
            mem,
            vbytes,
            vk::BufferUsageFlags::VERTEX_BUFFER,
            "vertices",
        )?;
        self.vertices = Some(vb);
        let ib = upload_buffer(
            ctx,
            mem,
            ibytes,
            vk::BufferUsageFlags::INDEX_BUFFER,
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
                    .stage_flags(vk::ShaderStageFlags::VERTEX | vk::ShaderStageFlags::FRAGMENT),
                // The streaming feedback.
                vk::DescriptorSetLayoutBinding::default()
                    .binding(1)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::FRAGMENT),
                // The sun's shadow map (with shadows).
                vk::DescriptorSetLayoutBinding::default()
                    .binding(2)
                    .descriptor_type(vk::DescriptorType::COMBINED_IMAGE_SAMPLER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::FRAGMENT),
            ];
            let bindings = &all_bindings[..if self.shadows { 3 } else { 2 }];
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
                    descriptor_count: 1,
                },
            ];
            self.frame_pool = d
                .create_descriptor_pool(
                    &vk::DescriptorPoolCreateInfo::default()
                        .max_sets(1)
                        .pool_sizes(&sizes),
                    None,
                )
                .check("vkCreateDescriptorPool")?;
            let layouts = [self.frame_set_layout];
            self.frame_set = d
                .allocate_descriptor_sets(
                    &vk::DescriptorSetAllocateInfo::default()
                        .descriptor_pool(self.frame_pool)
                        .set_layouts(&layouts),
                )
                .check("vkAllocateDescriptorSets")?[0];
            if let Some(s) = self.streamer.as_ref() {
                let (buffer, range) = s.feedback_buffer();
                let info = [vk::DescriptorBufferInfo {
                    buffer,
                    offset: 0,
                    range,
                }];
                let write = vk::WriteDescriptorSet::default()
                    .dst_set(self.frame_set)
                    .dst_binding(1)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(&info);
                d.update_descriptor_sets(&[write], &[]);
            }
        }
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
    /// look-ahead.
    fn stream_views(&self, frame: u32, frames: u32, lookahead: u32) -> (View, Vec<View>) {
        let path = &self.gallery.path;
        let view = View {
            pose: path.pose(frame, frames),
            fov_y: FOV_Y_DEGREES.to_radians(),
            aspect: self.aspect,
            height: self.height,
        };
        let ahead = (1..=lookahead)
            .map(|k| frame + k)
            .take_while(|&f| f < frames)
            .map(|f| View {
                pose: path.pose(f, frames),
                ..view
            })
            .collect();
        (view, ahead)
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

    /// Records the objects' draws with the pipeline bound (`depth_only`: positions only).
    ///
    /// # Safety
    /// `cmd` is recording inside a render pass of a live device, a pipeline of
    /// `self.layout` bound.
    unsafe fn record_objects(&self, d: &ash::Device, cmd: vk::CommandBuffer, depth_only: bool) {
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
            if bindless && !depth_only {
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
            for o in &self.gallery.objects {
                if depth_only && o.shape == Shape::Floor {
                    // The floor casts no shadow (nothing is below it).
                    continue;
                }
                let mesh = self.meshes[Shape::ALL.iter().position(|s| *s == o.shape).unwrap_or(0)];
                let push = Push {
                    model: o.model.to_cols_array(),
                    uv_scale: o.uv_scale.to_array(),
                    material: match self.streamer.as_ref() {
                        Some(s) => [
                            o.material as u32,
                            s.map_size(o.material),
                            s.drawn_level(o.material),
                            0,
                        ],
                        None => [o.material as u32, 1, 0, 0],
                    },
                };
                if !bindless && !depth_only {
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
        let pose = self.gallery.path.pose(frame, frames);
        let fov_y = FOV_Y_DEGREES.to_radians();
        let mut stream = [0; 4];
        let lookahead = self.streamer.as_ref().map_or(0, Streamer::lookahead_frames);
        let (view, ahead) = self.stream_views(frame, frames, lookahead);
        if let Some(s) = self.streamer.as_mut() {
            let cut = self.gallery.path.is_cut(frame, frames);
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
        }
        let vp = view_proj(pose, self.aspect, fov_y);
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

    unsafe fn record(&self, d: &ash::Device, cmd: vk::CommandBuffer, _extent: vk::Extent2D) {
        // SAFETY: per the trait's contract; every handle is live until the frame's fence.
        unsafe {
            d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::GRAPHICS, self.pipeline);
            self.record_objects(d, cmd, false);
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
            self.record_objects(d, cmd, true);
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

    fn frame_done(&mut self, ctx: &Context, mem: &GpuMemory) -> Option<StreamFrame> {
        let textures = &self.textures;
        self.streamer
            .as_mut()
            .map(|s| s.frame_done(ctx, mem, textures))
    }

    fn texture_residency(&self) -> Vec<(String, u32, u64)> {
        let t = &self.textures.textures;
        t.iter()
            .map(|t| {
                let name = t.path.file_stem().map(|s| s.to_string_lossy().into_owned());
                (name.unwrap_or_default(), t.base_level, t.bytes)
            })
            .collect()
    }
}
