//! The post-processing passes as compute dispatches, with visibility shading:
//! bloom (when the effects are on) and, for headless output, the tone map. A
//! full-screen fragment pass runs on the GPU's graphics units, of which the H200
//! has few (the tone map took 0.69 ms at 4K, bloom 0.34 ms); a dispatch runs on
//! all of its SMs. The swapchain keeps the fragment tone map (its images need not
//! allow storage).
//!
//! Inputs come through the renderer's existing sets (the tone map's, the bloom
//! pass's: combined samplers, visible to compute too); each output is a storage
//! image in a one-binding set of its own: the bloom image, and the display target
//! through a `R8G8B8A8_UNORM` view (`targets::Targets::ldr_storage`: sRGB formats
//! don't allow storage, so the shader encodes sRGB itself).

use ash::vk;

use super::pipelines::{create_compute_layout, create_compute_pipeline, pool_with_sets};
use crate::gpu::{GpuError, VkCheck};
use crate::shaders;

/// Workgroup side of the post-processing dispatches (8x8).
pub const GROUP: u32 = 8;

/// Records one post-processing dispatch over `extent`: binds `pipeline` and
/// `sets` (from set 0) with `layout`, pushes `push` when it is not empty, and
/// dispatches one [`GROUP`]x[`GROUP`] workgroup per tile.
///
/// # Safety
/// `cmd` is recording outside a render pass on `d`; `pipeline`, `layout` and
/// `sets` are live objects of `d` that fit together, `push` fits the layout's
/// compute push-constant range, and the images the sets name are in the layouts
/// the shader expects.
pub unsafe fn dispatch(
    d: &ash::Device,
    cmd: vk::CommandBuffer,
    (pipeline, layout): (vk::Pipeline, vk::PipelineLayout),
    sets: &[vk::DescriptorSet],
    push: &[u8],
    extent: vk::Extent2D,
) {
    // SAFETY: per the contract above.
    unsafe {
        d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipeline);
        d.cmd_bind_descriptor_sets(cmd, vk::PipelineBindPoint::COMPUTE, layout, 0, sets, &[]);
        if !push.is_empty() {
            d.cmd_push_constants(cmd, layout, vk::ShaderStageFlags::COMPUTE, 0, push);
        }
        d.cmd_dispatch(
            cmd,
            extent.width.div_ceil(GROUP),
            extent.height.div_ceil(GROUP),
            1,
        );
    }
}

/// The compute post-processing's objects.
pub struct ComputePost {
    /// One storage image, compute stage.
    output_layout: vk::DescriptorSetLayout,
    pool: vk::DescriptorPool,
    /// The display target's storage view.
    pub ldr_set: vk::DescriptorSet,
    /// The bloom image (with the effects on).
    pub bloom_set: vk::DescriptorSet,
    /// [tone-map set, output], push constants `TonemapPush`.
    pub tonemap_layout: vk::PipelineLayout,
    /// The tone map (with bloom when the effects are on).
    pub tonemap: vk::Pipeline,
    /// [bloom input set, output] (null without the effects).
    pub bloom_layout: vk::PipelineLayout,
    /// Bloom (null without the effects).
    pub bloom: vk::Pipeline,
}

impl ComputePost {
    /// Every handle null (nothing to destroy).
    fn null() -> Self {
        Self {
            output_layout: vk::DescriptorSetLayout::null(),
            pool: vk::DescriptorPool::null(),
            ldr_set: vk::DescriptorSet::null(),
            bloom_set: vk::DescriptorSet::null(),
            tonemap_layout: vk::PipelineLayout::null(),
            tonemap: vk::Pipeline::null(),
            bloom_layout: vk::PipelineLayout::null(),
            bloom: vk::Pipeline::null(),
        }
    }

    /// Creates the pipelines and the output sets; `tonemap_set_layout` and
    /// `bloom_set_layout` (null without the effects) are the renderer's input
    /// layouts, `push_bytes` the tone map's push constants. On failure nothing is
    /// left behind.
    pub fn new(
        d: &ash::Device,
        tonemap_set_layout: vk::DescriptorSetLayout,
        bloom_set_layout: vk::DescriptorSetLayout,
        push_bytes: u32,
    ) -> Result<Self, GpuError> {
        let mut p = Self::null();
        match p.build(d, tonemap_set_layout, bloom_set_layout, push_bytes) {
            Ok(()) => Ok(p),
            Err(e) => {
                p.destroy(d);
                Err(e)
            }
        }
    }

    fn build(
        &mut self,
        d: &ash::Device,
        tonemap_set_layout: vk::DescriptorSetLayout,
        bloom_set_layout: vk::DescriptorSetLayout,
        push_bytes: u32,
    ) -> Result<(), GpuError> {
        let effects = bloom_set_layout != vk::DescriptorSetLayout::null();
        let binding = [vk::DescriptorSetLayoutBinding::default()
            .binding(0)
            .descriptor_type(vk::DescriptorType::STORAGE_IMAGE)
            .descriptor_count(1)
            .stage_flags(vk::ShaderStageFlags::COMPUTE)];
        // SAFETY: a valid create info on a live device; the handle is stored at once.
        self.output_layout = unsafe {
            d.create_descriptor_set_layout(
                &vk::DescriptorSetLayoutCreateInfo::default().bindings(&binding),
                None,
            )
        }
        .check("vkCreateDescriptorSetLayout")?;
        let sizes = [vk::DescriptorPoolSize {
            ty: vk::DescriptorType::STORAGE_IMAGE,
            descriptor_count: 2,
        }];
        let (pool, sets) = pool_with_sets(d, &[self.output_layout, self.output_layout], &sizes)?;
        self.pool = pool;
        (self.ldr_set, self.bloom_set) = (sets[0], sets[1]);
        self.tonemap_layout =
            create_compute_layout(d, &[tonemap_set_layout, self.output_layout], push_bytes)?;
        self.tonemap = create_compute_pipeline(
            d,
            if effects {
                shaders::TONEMAP_BLOOM_COMP
            } else {
                shaders::TONEMAP_COMP
            },
            self.tonemap_layout,
        )?;
        if effects {
            self.bloom_layout =
                create_compute_layout(d, &[bloom_set_layout, self.output_layout], 0)?;
            self.bloom = create_compute_pipeline(d, shaders::BLOOM_COMP, self.bloom_layout)?;
        }
        Ok(())
    }

    /// Points the output sets at the display target's storage view and the bloom
    /// image's view (null without the effects).
    ///
    /// # Safety
    /// Neither set is in use (the device is idle, or the previous frame is done).
    pub unsafe fn write_outputs(&self, d: &ash::Device, ldr: vk::ImageView, bloom: vk::ImageView) {
        let info = |view| {
            [vk::DescriptorImageInfo {
                sampler: vk::Sampler::null(),
                image_view: view,
                image_layout: vk::ImageLayout::GENERAL,
            }]
        };
        let (ldr, bloom_info) = (info(ldr), info(bloom));
        let mut writes = vec![vk::WriteDescriptorSet::default()
            .dst_set(self.ldr_set)
            .dst_binding(0)
            .descriptor_type(vk::DescriptorType::STORAGE_IMAGE)
            .image_info(&ldr)];
        if bloom != vk::ImageView::null() {
            writes.push(
                vk::WriteDescriptorSet::default()
                    .dst_set(self.bloom_set)
                    .dst_binding(0)
                    .descriptor_type(vk::DescriptorType::STORAGE_IMAGE)
                    .image_info(&bloom_info),
            );
        }
        // SAFETY: per the contract.
        unsafe { d.update_descriptor_sets(&writes, &[]) };
    }

    /// Destroys everything; the device must be idle.
    pub fn destroy(&mut self, d: &ash::Device) {
        // SAFETY: the device is idle; null handles are ignored; the sets go with the pool.
        unsafe {
            d.destroy_pipeline(self.tonemap, None);
            d.destroy_pipeline(self.bloom, None);
            d.destroy_pipeline_layout(self.tonemap_layout, None);
            d.destroy_pipeline_layout(self.bloom_layout, None);
            d.destroy_descriptor_pool(self.pool, None);
            d.destroy_descriptor_set_layout(self.output_layout, None);
        }
        *self = Self::null();
    }
}
