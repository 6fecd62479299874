//! Graphics pipelines for dynamic rendering (no render passes), and compute pipelines.

use ash::vk;

use crate::gpu::util::shader_module;
use crate::gpu::{GpuError, VkCheck};

/// What a graphics pipeline looks like.
pub struct PipelineDesc<'a> {
    /// Vertex SPIR-V.
    pub vertex: &'a [u8],
    /// Fragment SPIR-V; empty for a depth-only pipeline.
    pub fragment: &'a [u8],
    /// The layout.
    pub layout: vk::PipelineLayout,
    /// The colour attachment's format; `UNDEFINED` for none (depth only).
    pub color_format: vk::Format,
    /// The depth attachment's format, if depth-tested.
    pub depth_format: Option<vk::Format>,
    /// Vertex buffer bindings.
    pub bindings: &'a [vk::VertexInputBindingDescription],
    /// Vertex attributes.
    pub attributes: &'a [vk::VertexInputAttributeDescription],
    /// Cull back faces (counter-clockwise front faces).
    pub cull_back: bool,
    /// The depth test (reversed Z: greater is nearer), when there is a depth attachment.
    pub depth_compare: vk::CompareOp,
    /// Whether fragments write depth.
    pub depth_write: bool,
}

/// Creates a graphics pipeline with dynamic viewport and scissor.
pub fn create_pipeline(
    device: &ash::Device,
    desc: &PipelineDesc<'_>,
) -> Result<vk::Pipeline, GpuError> {
    let vs = shader_module(device, desc.vertex)?;
    let fs = if desc.fragment.is_empty() {
        vk::ShaderModule::null()
    } else {
        match shader_module(device, desc.fragment) {
            Ok(fs) => fs,
            Err(e) => {
                // SAFETY: the module is not used by anything.
                unsafe { device.destroy_shader_module(vs, None) };
                return Err(e);
            }
        }
    };
    let all_stages = [
        vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::VERTEX)
            .module(vs)
            .name(c"main"),
        vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::FRAGMENT)
            .module(fs)
            .name(c"main"),
    ];
    let stages = if desc.fragment.is_empty() {
        &all_stages[..1]
    } else {
        &all_stages[..]
    };
    let vertex_input = vk::PipelineVertexInputStateCreateInfo::default()
        .vertex_binding_descriptions(desc.bindings)
        .vertex_attribute_descriptions(desc.attributes);
    let input_assembly = vk::PipelineInputAssemblyStateCreateInfo::default()
        .topology(vk::PrimitiveTopology::TRIANGLE_LIST);
    let viewport = vk::PipelineViewportStateCreateInfo::default()
        .viewport_count(1)
        .scissor_count(1);
    let raster = vk::PipelineRasterizationStateCreateInfo::default()
        .polygon_mode(vk::PolygonMode::FILL)
        .cull_mode(if desc.cull_back {
            vk::CullModeFlags::BACK
        } else {
            vk::CullModeFlags::NONE
        })
        .front_face(vk::FrontFace::COUNTER_CLOCKWISE)
        .line_width(1.0);
    let multisample = vk::PipelineMultisampleStateCreateInfo::default()
        .rasterization_samples(vk::SampleCountFlags::TYPE_1);
    let depth = vk::PipelineDepthStencilStateCreateInfo::default()
        .depth_test_enable(desc.depth_format.is_some())
        .depth_write_enable(desc.depth_format.is_some() && desc.depth_write)
        .depth_compare_op(desc.depth_compare);
    let attachments = [vk::PipelineColorBlendAttachmentState::default()
        .color_write_mask(vk::ColorComponentFlags::RGBA)];
    let has_color = desc.color_format != vk::Format::UNDEFINED;
    let blend = vk::PipelineColorBlendStateCreateInfo::default().attachments(if has_color {
        &attachments
    } else {
        &[]
    });
    let dynamic_states = [vk::DynamicState::VIEWPORT, vk::DynamicState::SCISSOR];
    let dynamic = vk::PipelineDynamicStateCreateInfo::default().dynamic_states(&dynamic_states);
    let color_formats = [desc.color_format];
    let mut rendering = vk::PipelineRenderingCreateInfo::default()
        .color_attachment_formats(if has_color { &color_formats } else { &[] })
        .depth_attachment_format(desc.depth_format.unwrap_or(vk::Format::UNDEFINED));
    let info = vk::GraphicsPipelineCreateInfo::default()
        .stages(stages)
        .vertex_input_state(&vertex_input)
        .input_assembly_state(&input_assembly)
        .viewport_state(&viewport)
        .rasterization_state(&raster)
        .multisample_state(&multisample)
        .depth_stencil_state(&depth)
        .color_blend_state(&blend)
        .dynamic_state(&dynamic)
        .layout(desc.layout)
        .push_next(&mut rendering);
    // SAFETY: every pointer in `info` outlives the call; the modules are live.
    let result =
        unsafe { device.create_graphics_pipelines(vk::PipelineCache::null(), &[info], None) };
    // SAFETY: the modules are not needed after pipeline creation.
    unsafe {
        device.destroy_shader_module(vs, None);
        if fs != vk::ShaderModule::null() {
            device.destroy_shader_module(fs, None);
        }
    }
    result
        .map(|p| p[0])
        .map_err(|(_, e)| e)
        .check("vkCreateGraphicsPipelines")
}

/// Creates a pipeline layout whose push constants (`push_bytes`, may be 0) are
/// visible to the vertex and fragment stages.
pub fn create_layout(
    device: &ash::Device,
    sets: &[vk::DescriptorSetLayout],
    push_bytes: u32,
) -> Result<vk::PipelineLayout, GpuError> {
    layout_with_push(
        device,
        sets,
        push_bytes,
        vk::ShaderStageFlags::VERTEX | vk::ShaderStageFlags::FRAGMENT,
    )
}

/// Creates a compute pipeline layout whose push constants (`push_bytes`, may be
/// 0) are visible to the compute stage.
pub fn create_compute_layout(
    device: &ash::Device,
    sets: &[vk::DescriptorSetLayout],
    push_bytes: u32,
) -> Result<vk::PipelineLayout, GpuError> {
    layout_with_push(device, sets, push_bytes, vk::ShaderStageFlags::COMPUTE)
}

fn layout_with_push(
    device: &ash::Device,
    sets: &[vk::DescriptorSetLayout],
    push_bytes: u32,
    stages: vk::ShaderStageFlags,
) -> Result<vk::PipelineLayout, GpuError> {
    let ranges = [vk::PushConstantRange {
        stage_flags: stages,
        offset: 0,
        size: push_bytes,
    }];
    let info = vk::PipelineLayoutCreateInfo::default()
        .set_layouts(sets)
        .push_constant_ranges(if push_bytes > 0 { &ranges } else { &[] });
    // SAFETY: valid create info.
    unsafe { device.create_pipeline_layout(&info, None) }.check("vkCreatePipelineLayout")
}

/// Creates a descriptor pool of `sizes` holding exactly the sets of `layouts`
/// and allocates them (in that order); on failure nothing is left behind.
pub fn pool_with_sets(
    device: &ash::Device,
    layouts: &[vk::DescriptorSetLayout],
    sizes: &[vk::DescriptorPoolSize],
) -> Result<(vk::DescriptorPool, Vec<vk::DescriptorSet>), GpuError> {
    // SAFETY: valid create infos on a live device; the pool is destroyed if the
    // allocation fails, and is otherwise the caller's.
    unsafe {
        let pool = device
            .create_descriptor_pool(
                &vk::DescriptorPoolCreateInfo::default()
                    .max_sets(layouts.len() as u32)
                    .pool_sizes(sizes),
                None,
            )
            .check("vkCreateDescriptorPool")?;
        match device.allocate_descriptor_sets(
            &vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(pool)
                .set_layouts(layouts),
        ) {
            Ok(sets) => Ok((pool, sets)),
            Err(e) => {
                device.destroy_descriptor_pool(pool, None);
                Err(e).check("vkAllocateDescriptorSets")
            }
        }
    }
}

/// [`pool_with_sets`] for one set of `layout`.
pub fn one_set(
    device: &ash::Device,
    layout: vk::DescriptorSetLayout,
    sizes: &[vk::DescriptorPoolSize],
) -> Result<(vk::DescriptorPool, vk::DescriptorSet), GpuError> {
    let (pool, sets) = pool_with_sets(device, &[layout], sizes)?;
    Ok((pool, sets[0]))
}

/// Creates a compute pipeline from SPIR-V (entry point `main`).
pub fn create_compute_pipeline(
    device: &ash::Device,
    spirv: &[u8],
    layout: vk::PipelineLayout,
) -> Result<vk::Pipeline, GpuError> {
    let module = shader_module(device, spirv)?;
    let stage = vk::PipelineShaderStageCreateInfo::default()
        .stage(vk::ShaderStageFlags::COMPUTE)
        .module(module)
        .name(c"main");
    let info = vk::ComputePipelineCreateInfo::default()
        .stage(stage)
        .layout(layout);
    // SAFETY: every pointer in `info` outlives the call; the module is live.
    let result =
        unsafe { device.create_compute_pipelines(vk::PipelineCache::null(), &[info], None) };
    // SAFETY: the module is not needed after pipeline creation.
    unsafe { device.destroy_shader_module(module, None) };
    result
        .map(|p| p[0])
        .map_err(|(_, e)| e)
        .check("vkCreateComputePipelines")
}
