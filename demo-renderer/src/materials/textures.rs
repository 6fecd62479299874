//! Material textures on the GPU. Each map is one image holding a resident range of
//! its mip chain (`base..levels`), created in the texture pool (a TLSF pool whose
//! hard budget is `--texture-budget`) and filled level by level: each level is read
//! alone from its KTX2 file straight into mapped staging memory from a ring pool.
//!
//! Shaders reach a material's maps through its own descriptor set (three combined
//! image samplers): lavapipe lacks descriptor indexing, so instead of one bindless
//! array each material has a set, and changing a texture's resident range only
//! rewrites that set (no pipeline is rebuilt).

use std::path::PathBuf;

use ash::vk;
use material_baker::ktx2::{Format, Reader};

use crate::gpu::memory::{
    Image, LinearMode, MappedBuffer, MemOptions, MemoryUsage, PoolAlgorithm, PoolDesc, PoolId,
    TEXTURE_PRIORITY,
};
use crate::gpu::util::{transition, ImageTransition, OneShot};
use crate::gpu::{Context, GpuError, GpuMemory, VkCheck};

/// The create info of a texture image with `levels` mips from `size` texels:
/// sampled, written by copies, and a copy source (the streamer copies the
/// levels that stay into a new image).
pub(crate) fn texture_image_info(
    format: vk::Format,
    size: u32,
    levels: u32,
) -> vk::ImageCreateInfo<'static> {
    vk::ImageCreateInfo::default()
        .image_type(vk::ImageType::TYPE_2D)
        .format(format)
        .extent(vk::Extent3D {
            width: size.max(1),
            height: size.max(1),
            depth: 1,
        })
        .mip_levels(levels)
        .array_layers(1)
        .samples(vk::SampleCountFlags::TYPE_1)
        .tiling(vk::ImageTiling::OPTIMAL)
        .usage(
            vk::ImageUsageFlags::SAMPLED
                | vk::ImageUsageFlags::TRANSFER_DST
                | vk::ImageUsageFlags::TRANSFER_SRC,
        )
        .initial_layout(vk::ImageLayout::UNDEFINED)
}

fn vk_format(f: Format) -> vk::Format {
    match f {
        Format::Rgba8Srgb => vk::Format::R8G8B8A8_SRGB,
        Format::Rgba8Unorm => vk::Format::R8G8B8A8_UNORM,
        Format::Rg8Unorm => vk::Format::R8G8_UNORM,
        Format::Bc7Srgb => vk::Format::BC7_SRGB_BLOCK,
        Format::Bc7Unorm => vk::Format::BC7_UNORM_BLOCK,
        Format::Bc5Unorm => vk::Format::BC5_UNORM_BLOCK,
    }
}

/// One map on the GPU.
pub struct Texture {
    /// The file it comes from.
    pub path: PathBuf,
    /// A view of every resident level.
    pub view: vk::ImageView,
    /// The image (resident levels only) and its memory.
    pub(crate) image: Image,
    /// The image's format.
    pub format: vk::Format,
    /// Level 0's side in the file, in texels.
    pub file_size: u32,
    /// The finest resident level of the file's chain.
    pub base_level: u32,
    /// Levels in the file.
    pub file_levels: u32,
    /// Bytes of the resident levels.
    pub bytes: u64,
}

impl Texture {
    /// The image (resident levels only).
    pub fn image(&self) -> vk::Image {
        self.image.raw()
    }

    /// Bytes of its memory (the allocation's size, alignment included).
    pub fn allocation_bytes(&self) -> u64 {
        self.image.allocation().size()
    }
}

/// Elements of the bindless array after the textures, outside the emulation:
/// the page atlases of `--residency atlas` (one per map format) and their level
/// probe.
pub const ATLAS_ELEMENTS: u32 = 8;

/// Single-level views per texture in the emulation (8K maps have 14 levels).
pub const EMULATION_LEVELS: u32 = 14;

/// The emulation's level probe (`=3`): a 128 x 128 `R16_SFLOAT` image whose
/// 8 levels each hold their own index, after the level views in the array.
/// Sampled with a pixel's gradients (scaled to the map's size) through the
/// maps' sampler, it returns the sampler's own level of detail, anisotropy
/// included, where compute shaders have no `textureQueryLod`.
pub const PROBE_SIZE: u32 = 128;
const PROBE_LEVELS: u32 = 8;

/// Makes the level probe ([`PROBE_SIZE`]): each level cleared to its index,
/// ready to sample. The caller destroys the view, then the image.
pub fn create_level_probe(
    ctx: &Context,
    mem: &GpuMemory,
) -> Result<(Image, vk::ImageView), GpuError> {
    let d = &ctx.device;
    let format = vk::Format::R16_SFLOAT;
    let info = texture_image_info(format, PROBE_SIZE, PROBE_LEVELS);
    let image = mem.create_image(&info, &MemOptions::new(MemoryUsage::GpuOnly, "level probe"))?;
    let range = vk::ImageSubresourceRange {
        aspect_mask: vk::ImageAspectFlags::COLOR,
        base_mip_level: 0,
        level_count: PROBE_LEVELS,
        base_array_layer: 0,
        layer_count: 1,
    };
    let raw = image.raw();
    let filled = OneShot::new(ctx).and_then(|shot| {
        let r = shot.run(ctx, |cmd| {
            let to_dst = [vk::ImageMemoryBarrier2::default()
                .dst_stage_mask(vk::PipelineStageFlags2::CLEAR)
                .dst_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
                .old_layout(vk::ImageLayout::UNDEFINED)
                .new_layout(vk::ImageLayout::TRANSFER_DST_OPTIMAL)
                .image(raw)
                .subresource_range(range)];
            let to_read = [vk::ImageMemoryBarrier2::default()
                .src_stage_mask(vk::PipelineStageFlags2::CLEAR)
                .src_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
                .dst_stage_mask(
                    vk::PipelineStageFlags2::FRAGMENT_SHADER
                        | vk::PipelineStageFlags2::COMPUTE_SHADER,
                )
                .dst_access_mask(vk::AccessFlags2::SHADER_SAMPLED_READ)
                .old_layout(vk::ImageLayout::TRANSFER_DST_OPTIMAL)
                .new_layout(vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL)
                .image(raw)
                .subresource_range(range)];
            // SAFETY: recording; the image is live, bound, and used by nothing else.
            unsafe {
                d.cmd_pipeline_barrier2(
                    cmd,
                    &vk::DependencyInfo::default().image_memory_barriers(&to_dst),
                );
                for l in 0..PROBE_LEVELS {
                    let level = vk::ImageSubresourceRange {
                        base_mip_level: l,
                        level_count: 1,
                        ..range
                    };
                    d.cmd_clear_color_image(
                        cmd,
                        raw,
                        vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                        &vk::ClearColorValue {
                            float32: [l as f32, 0.0, 0.0, 0.0],
                        },
                        &[level],
                    );
                }
                d.cmd_pipeline_barrier2(
                    cmd,
                    &vk::DependencyInfo::default().image_memory_barriers(&to_read),
                );
            }
        });
        shot.destroy(d);
        r
    });
    // SAFETY: the image is live and bound, with its levels.
    let view = filled
        .and_then(|()| unsafe { crate::gpu::util::texture_view(d, raw, format, PROBE_LEVELS) });
    match view {
        Ok(view) => Ok((image, view)),
        Err(e) => {
            // SAFETY: the one-shot was waited for (or never submitted).
            unsafe { mem.destroy_image(image) };
            Err(e)
        }
    }
}

/// Every material's maps, their descriptor sets, and the pools they use.
pub struct TextureSet {
    /// Textures, three per material (albedo, normal, ORM).
    pub textures: Vec<Texture>,
    /// One descriptor set per material, or (bindless) one set holding every texture.
    pub sets: Vec<vk::DescriptorSet>,
    /// Whether the textures are one bindless array (texture `i` at element `i`).
    pub bindless: bool,
    /// The material set layout (set 1 of the PBR pipeline).
    pub set_layout: vk::DescriptorSetLayout,
    descriptor_pool: vk::DescriptorPool,
    sampler: vk::Sampler,
    /// The texture pool (TLSF, hard budget = the texture budget).
    pub texture_pool: PoolId,
    /// The staging ring (linear ring pool of one block).
    pub staging_pool: PoolId,
    /// Bytes of the staging ring's block.
    pub staging_block: u64,
    /// Bytes of each texture pool block (larger images get memory of their own).
    pub texture_block: u64,
    /// The coarsest first resident level the loader chose to stay within the budget.
    pub base_level: u32,
    /// The finest first resident level it chose (some textures get one level more).
    pub finest_level: u32,
    /// The atlas-sampling emulation's mode ([`crate::tuning::Tuning::atlas_emulation`]), on a bindless device: the array holds,
    /// after the textures, [`EMULATION_LEVELS`] single-level views of each and
    /// the level probe ([`Self::write_level_views`]).
    emulation: Option<u32>,
    /// Those views.
    level_views: Vec<vk::ImageView>,
    /// The level probe ([`PROBE_SIZE`]) and its view, with the emulation.
    probe: Option<(Image, vk::ImageView)>,
}

/// A staging buffer holding one level, waiting for its copy.
struct Pending {
    buffer: MappedBuffer,
}

/// How [`TextureSet::load_with`] picks each texture's resident levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Residency {
    /// The finest levels at which every texture fits the budget (no streaming).
    Static,
    /// Only each texture's mip tail: the levels of at most `tail_texels` texels a
    /// side (the streamer's fallback); `staging_bytes` sizes the staging ring.
    Tails {
        /// The tail's largest level side, in texels.
        tail_texels: u32,
        /// At least this many bytes of staging ring.
        staging_bytes: u64,
    },
}

/// The first level of a `size`-texel map whose side is at most `tail_texels`.
pub fn tail_level(size: u32, levels: u32, tail_texels: u32) -> u32 {
    (0..levels)
        .find(|&l| (size >> l).max(1) <= tail_texels)
        .unwrap_or(levels.saturating_sub(1))
}

/// Bytes of levels `base..` of a `size`² map of `format`.
pub fn chain_bytes(format: Format, size: u32, base: u32) -> u64 {
    let mut total = 0;
    let mut s = size >> base;
    loop {
        total += format.level_bytes(s.max(1), s.max(1));
        if s <= 1 {
            return total;
        }
        s /= 2;
    }
}

/// The largest streaming budget the texture pool takes as one block: a quarter
/// of the largest device-local heap, and at most `maxMemoryAllocationSize`.
fn single_block_limit(ctx: &Context) -> u64 {
    let mut m3 = vk::PhysicalDeviceMaintenance3Properties::default();
    let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut m3);
    // SAFETY: a physical device of this instance; Vulkan 1.1 core queries with a
    // valid pNext chain.
    let mem = unsafe {
        ctx.instance
            .get_physical_device_properties2(ctx.physical_device, &mut props);
        ctx.instance
            .get_physical_device_memory_properties(ctx.physical_device)
    };
    let heap = mem
        .memory_heaps
        .iter()
        .take(mem.memory_heap_count as usize)
        .filter(|h| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
        .map(|h| h.size)
        .max()
        .unwrap_or(0);
    (heap / 4).min(m3.max_memory_allocation_size)
}

impl TextureSet {
    /// Loads every material's maps at the finest level that keeps them all within
    /// `budget` bytes, then gives textures, in order, one level more while they
    /// still fit.
    pub fn load(
        ctx: &Context,
        mem: &GpuMemory,
        files: &[[PathBuf; 3]],
        budget: u64,
        anisotropy: u32,
    ) -> Result<Self, GpuError> {
        Self::load_with(ctx, mem, files, budget, anisotropy, Residency::Static, None)
    }

    /// Loads every material's maps with the residency `mode` asks for, with
    /// the atlas-sampling emulation's mode `emulation` where the device is
    /// bindless ([`crate::tuning::Tuning::atlas_emulation`]; `None`: off).
    pub fn load_with(
        ctx: &Context,
        mem: &GpuMemory,
        files: &[[PathBuf; 3]],
        budget: u64,
        anisotropy: u32,
        mode: Residency,
        emulation: Option<u32>,
    ) -> Result<Self, GpuError> {
        let d = &ctx.device;
        let io = |e: material_baker::ktx2::KtxError| GpuError::Other(e.to_string());
        // Headers only: formats and sizes.
        let mut headers = Vec::new();
        for f in files.iter().flatten() {
            let r = Reader::open(f).map_err(io)?;
            if r.width != r.height || !r.width.is_power_of_two() {
                return Err(GpuError::Other(format!(
                    "{}: {}x{} is not a square power-of-two map",
                    f.display(),
                    r.width,
                    r.height
                )));
            }
            headers.push((r.format, r.width, r.levels.len() as u32));
        }
        let total = |base: u32| -> u64 {
            headers
                .iter()
                .map(|&(f, w, n)| chain_bytes(f, w, base.min(n - 1)))
                .sum()
        };
        let max_levels = headers.iter().map(|h| h.2).max().unwrap_or(1);
        // 5% headroom for alignment and block granularity.
        let limit = budget - budget / 20;
        let (base_level, bases, staging_min) = match mode {
            Residency::Static => {
                let base_level = (0..max_levels)
                    .find(|&b| total(b) <= limit)
                    .unwrap_or(max_levels - 1);
                // Then, in order, give textures one finer level while the total still fits.
                let mut bases: Vec<u32> = headers.iter().map(|h| base_level.min(h.2 - 1)).collect();
                let mut used = total(base_level);
                for (b, &(f, w, _)) in bases.iter_mut().zip(&headers) {
                    if *b > 0 {
                        let extra = chain_bytes(f, w, *b - 1) - chain_bytes(f, w, *b);
                        if used + extra <= limit {
                            *b -= 1;
                            used += extra;
                        }
                    }
                }
                (base_level, bases, 0)
            }
            Residency::Tails {
                tail_texels,
                staging_bytes,
            } => {
                let bases: Vec<u32> = headers
                    .iter()
                    .map(|&(_, w, n)| tail_level(w, n, tail_texels))
                    .collect();
                let tails: u64 = headers
                    .iter()
                    .zip(&bases)
                    .map(|(&(f, w, _), &b)| chain_bytes(f, w, b))
                    .sum();
                if tails > limit {
                    return Err(GpuError::Other(format!(
                        "--texture-budget {budget} B is too small: the {} textures' mip tails (levels of at most {tail_texels} texels, the fallback every texture keeps) need {tails} B plus 5% headroom",
                        headers.len()
                    )));
                }
                let base = bases.iter().copied().max().unwrap_or(0);
                // Room for a frame's uploads and for the largest level twice over.
                let largest0 = headers
                    .iter()
                    .map(|&(f, w, _)| f.level_bytes(w, w))
                    .max()
                    .unwrap_or(0);
                (base, bases, staging_bytes.max(2 * largest0))
            }
        };
        let finest = bases.iter().copied().min().unwrap_or(0);
        let largest_level = headers
            .iter()
            .map(|&(f, w, _)| f.level_bytes(w >> finest, w >> finest))
            .max()
            .unwrap_or(0);
        let staging_block = (64u64 << 20)
            .max(largest_level.next_power_of_two())
            .max(staging_min.next_power_of_two());
        let streaming = matches!(mode, Residency::Tails { .. });
        let (block, max_blocks) = if streaming && budget <= single_block_limit(ctx) {
            // Streaming: one block of exactly the budget. Free bytes are then all in
            // one TLSF range space that defragmentation can merge, so a grow that
            // fits the budget by bytes can always be placed after compaction; with
            // many blocks, free space split across blocks (up to a fifth of the
            // budget on the H200 at 1 GiB with 64 materials) stays unusable by a
            // larger image, since the pool may not commit past its budget.
            (budget, 1)
        } else {
            // Blocks of 64 KiB to 64 MiB and at most 1/8 of the budget, so that the
            // last block still fits under it; larger textures get dedicated memory
            // in the pool.
            let block = (budget / 8).clamp(64 << 10, 64 << 20);
            let block = if block.is_power_of_two() {
                block
            } else {
                block.next_power_of_two() / 2
            };
            (block, u32::MAX)
        };
        let texture_pool = mem.create_pool_with(&PoolDesc {
            usage: MemoryUsage::GpuOnly,
            algorithm: PoolAlgorithm::Tlsf,
            block_size: block,
            max_blocks,
            budget: Some(budget),
            priority: Some(TEXTURE_PRIORITY),
            ..PoolDesc::new("textures")
        })?;
        let staging_pool = mem.create_pool(
            "staging ring",
            MemoryUsage::Upload,
            PoolAlgorithm::Linear(LinearMode::Ring),
            staging_block,
            1,
            None,
        )?;

        let n = files.len() as u32;
        let bindless = ctx.info.bindless;
        let emulation = emulation.filter(|_| bindless);
        // SAFETY: valid create infos on a live device.
        let (set_layout, descriptor_pool, sets, sampler) = unsafe {
            // Bindless: one set, one array of every texture (3 per material), partially
            // bound and updatable after binding. Otherwise: a set of 3 per material.
            let (count, set_count) = match (bindless, emulation) {
                (true, Some(_)) => (3 * n * (1 + EMULATION_LEVELS) + 1, 1),
                (true, None) => (3 * n + ATLAS_ELEMENTS, 1),
                (false, _) => (3, n),
            };
            let bindings = [vk::DescriptorSetLayoutBinding::default()
                .binding(0)
                .descriptor_type(vk::DescriptorType::COMBINED_IMAGE_SAMPLER)
                .descriptor_count(count)
                .stage_flags(vk::ShaderStageFlags::FRAGMENT | vk::ShaderStageFlags::COMPUTE)];
            let binding_flags = [vk::DescriptorBindingFlags::PARTIALLY_BOUND
                | vk::DescriptorBindingFlags::UPDATE_AFTER_BIND];
            let mut flags_info = vk::DescriptorSetLayoutBindingFlagsCreateInfo::default()
                .binding_flags(&binding_flags);
            let mut layout_info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
            if bindless {
                layout_info = layout_info
                    .flags(vk::DescriptorSetLayoutCreateFlags::UPDATE_AFTER_BIND_POOL)
                    .push_next(&mut flags_info);
            }
            let set_layout = d
                .create_descriptor_set_layout(&layout_info, None)
                .check("vkCreateDescriptorSetLayout")?;
            let sizes = [vk::DescriptorPoolSize {
                ty: vk::DescriptorType::COMBINED_IMAGE_SAMPLER,
                descriptor_count: count * set_count,
            }];
            let mut pool_info = vk::DescriptorPoolCreateInfo::default()
                .max_sets(set_count)
                .pool_sizes(&sizes);
            if bindless {
                pool_info = pool_info.flags(vk::DescriptorPoolCreateFlags::UPDATE_AFTER_BIND);
            }
            let descriptor_pool = d
                .create_descriptor_pool(&pool_info, None)
                .check("vkCreateDescriptorPool")?;
            let layouts = vec![set_layout; set_count as usize];
            let sets = d
                .allocate_descriptor_sets(
                    &vk::DescriptorSetAllocateInfo::default()
                        .descriptor_pool(descriptor_pool)
                        .set_layouts(&layouts),
                )
                .check("vkAllocateDescriptorSets")?;
            let mut sampler_info = vk::SamplerCreateInfo::default()
                .mag_filter(vk::Filter::LINEAR)
                .min_filter(vk::Filter::LINEAR)
                .mipmap_mode(vk::SamplerMipmapMode::LINEAR)
                .address_mode_u(vk::SamplerAddressMode::REPEAT)
                .address_mode_v(vk::SamplerAddressMode::REPEAT)
                .address_mode_w(vk::SamplerAddressMode::REPEAT)
                .max_lod(vk::LOD_CLAMP_NONE);
            if let Some(a) = ctx.info.max_anisotropy.filter(|_| anisotropy > 1) {
                sampler_info = sampler_info
                    .anisotropy_enable(true)
                    .max_anisotropy(a.min(anisotropy as f32));
            }
            let sampler = d
                .create_sampler(&sampler_info, None)
                .check("vkCreateSampler")?;
            (set_layout, descriptor_pool, sets, sampler)
        };
        let mut set = Self {
            textures: Vec::new(),
            sets,
            bindless,
            set_layout,
            descriptor_pool,
            sampler,
            texture_pool,
            staging_pool,
            staging_block,
            texture_block: block,
            base_level,
            finest_level: finest,
            emulation,
            level_views: Vec::new(),
            probe: None,
        };
        let one_shot = OneShot::new(ctx)?;
        let result = (|| {
            for ((path, &base), h) in files.iter().flatten().zip(&bases).zip(&headers) {
                // When the pool is full (block granularity, fragmentation), fall back
                // to coarser levels rather than fail.
                let mut base = base;
                let t = loop {
                    let coarser = base + 1 < h.2;
                    match set.load_texture(ctx, mem, &one_shot, path, base, coarser) {
                        Err(e) if coarser && e.is_no_room() => base += 1,
                        r => break r?,
                    }
                };
                set.base_level = set.base_level.max(base);
                set.textures.push(t);
            }
            for m in 0..files.len() {
                set.write_set(d, m);
            }
            Ok(())
        })();
        one_shot.destroy(d);
        if let Err(e) = result {
            set.destroy(ctx, mem);
            return Err(e);
        }
        Ok(set)
    }

    /// Bytes of every texture's memory (allocation sizes).
    pub fn allocated_bytes(&self) -> u64 {
        self.textures.iter().map(Texture::allocation_bytes).sum()
    }

    /// Bytes of every resident level.
    pub fn resident_bytes(&self) -> u64 {
        self.textures.iter().map(|t| t.bytes).sum()
    }

    /// The sampler every texture uses.
    pub fn sampler(&self) -> vk::Sampler {
        self.sampler
    }

    /// Points texture `index`'s descriptor at `view` (the caller makes sure no
    /// pending GPU work reads a per-material set it rewrites).
    pub fn write_view(&self, d: &ash::Device, index: usize, view: vk::ImageView) {
        self.write_view_in(d, index, view, vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL);
    }

    /// [`Self::write_view`] for a view whose image is in `layout` when sampled
    /// (the sparse images of streaming by tiles stay in `GENERAL`).
    pub fn write_view_in(
        &self,
        d: &ash::Device,
        index: usize,
        view: vk::ImageView,
        layout: vk::ImageLayout,
    ) {
        let info = [vk::DescriptorImageInfo {
            sampler: self.sampler,
            image_view: view,
            image_layout: layout,
        }];
        let (set, element) = if self.bindless {
            (self.sets[0], index as u32)
        } else {
            (self.sets[index / 3], index as u32 % 3)
        };
        let write = vk::WriteDescriptorSet::default()
            .dst_set(set)
            .dst_binding(0)
            .dst_array_element(element)
            .descriptor_type(vk::DescriptorType::COMBINED_IMAGE_SAMPLER)
            .image_info(&info);
        // SAFETY: the view is live; per the contract above the set is not in use by
        // pending work (the bindless array is update-after-bind).
        unsafe { d.update_descriptor_sets(&[write], &[]) };
    }

    /// With `--tune atlas-emulation`: a view of each resident level of each
    /// texture, written after the textures in the bindless array (texture
    /// `i`'s resident level `l` at `textures.len() + i * EMULATION_LEVELS +
    /// l`). Call once the textures are loaded and no pending work uses the set.
    pub fn write_level_views(&mut self, ctx: &Context, mem: &GpuMemory) -> Result<(), GpuError> {
        if self.emulation.is_none() || self.probe.is_some() {
            return Ok(());
        }
        let d = &ctx.device;
        self.write_probe(ctx, mem)?;
        let n = self.textures.len();
        for i in 0..n {
            let t = &self.textures[i];
            let (image, format) = (t.image(), t.format);
            let levels = t
                .file_levels
                .saturating_sub(t.base_level)
                .min(EMULATION_LEVELS);
            for l in 0..levels {
                // SAFETY: the image is live and bound, with `levels` levels.
                let view =
                    unsafe { crate::gpu::util::texture_levels_view(d, image, format, l, 1) }?;
                self.level_views.push(view);
                let element = n + i * EMULATION_LEVELS as usize + l as usize;
                self.write_view(d, element, view);
            }
        }
        Ok(())
    }

    /// The level probe ([`PROBE_SIZE`]), written after the level views.
    fn write_probe(&mut self, ctx: &Context, mem: &GpuMemory) -> Result<(), GpuError> {
        let (image, view) = create_level_probe(ctx, mem)?;
        let element = self.textures.len() * (1 + EMULATION_LEVELS as usize);
        self.write_view(&ctx.device, element, view);
        self.probe = Some((image, view));
        Ok(())
    }

    /// The frame uniform's word for the emulation (`u_frame.stream.w`): 0 when
    /// off, else the first level view's element (the textures' count), with
    /// bit 31 for mode 2 (the coarser sample's gradients doubled) and bit 30
    /// for mode 3 (the compute pass's level of detail from the probe).
    pub fn emulation_word(&self) -> u32 {
        match self.emulation {
            None => 0,
            Some(mode) => {
                let flags = match mode {
                    2 => 1 << 31,
                    3 => 1 << 30,
                    _ => 0,
                };
                self.textures.len() as u32 | flags
            }
        }
    }

    fn write_set(&self, d: &ash::Device, material: usize) {
        let infos: Vec<vk::DescriptorImageInfo> = (0..3)
            .map(|k| vk::DescriptorImageInfo {
                sampler: self.sampler,
                image_view: self.textures[material * 3 + k].view,
                image_layout: vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL,
            })
            .collect();
        let (set, element) = if self.bindless {
            (self.sets[0], material as u32 * 3)
        } else {
            (self.sets[material], 0)
        };
        let write = vk::WriteDescriptorSet::default()
            .dst_set(set)
            .dst_binding(0)
            .dst_array_element(element)
            .descriptor_type(vk::DescriptorType::COMBINED_IMAGE_SAMPLER)
            .image_info(&infos);
        // SAFETY: the views are live. Per-material sets are not in use by any pending
        // command buffer (callers wait for the device first); the bindless array is
        // update-after-bind, and the replaced elements are not used by pending work.
        unsafe { d.update_descriptor_sets(&[write], &[]) };
    }

    /// Changes texture `index`'s resident range to start at `base_level`: a new image
    /// is filled, the material's set is rewritten, and the old image freed. The device
    /// must be idle (the streamer will do this asynchronously).
    pub fn set_resident(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        index: usize,
        base_level: u32,
    ) -> Result<(), GpuError> {
        let one_shot = OneShot::new(ctx)?;
        let path = self.textures[index].path.clone();
        let result = self.load_texture(ctx, mem, &one_shot, &path, base_level, false);
        one_shot.destroy(&ctx.device);
        let new = result?;
        let old = std::mem::replace(&mut self.textures[index], new);
        self.write_set(&ctx.device, index / 3);
        Self::free_texture(&ctx.device, mem, old);
        Ok(())
    }

    /// Destroys a texture's view and image; the GPU must be done with it.
    pub fn free_texture(d: &ash::Device, mem: &GpuMemory, t: Texture) {
        // SAFETY: the device no longer uses the texture (callers wait for idle).
        unsafe {
            d.destroy_image_view(t.view, None);
            mem.destroy_image(t.image);
        }
    }

    /// Loads `path` from `base_level` down into a new image of the texture
    /// pool. `full_is_expected`: the caller tries a coarser level when the
    /// pool is full, so that is no failure to report (no heap dump).
    fn load_texture(
        &self,
        ctx: &Context,
        mem: &GpuMemory,
        one_shot: &OneShot,
        path: &std::path::Path,
        base_level: u32,
        full_is_expected: bool,
    ) -> Result<Texture, GpuError> {
        let d = &ctx.device;
        let mut reader = Reader::open(path).map_err(|e| GpuError::Other(e.to_string()))?;
        let file_levels = reader.levels.len() as u32;
        let base = base_level.min(file_levels - 1);
        let levels = file_levels - base;
        let size = reader.levels[base as usize].width;
        let format = vk_format(reader.format);
        let info = texture_image_info(format, size, levels);
        let tag = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("texture");
        let mut opts = MemOptions::new(MemoryUsage::GpuOnly, tag).in_pool(self.texture_pool);
        opts.within_budget = true;
        opts.full_is_expected = full_is_expected;
        let image = mem.create_image(&info, &opts)?;
        // SAFETY: the image is live and bound, with `levels` levels.
        let view = match unsafe { crate::gpu::util::texture_view(d, image.raw(), format, levels) } {
            Ok(v) => v,
            Err(e) => {
                // SAFETY: unused image.
                unsafe { mem.destroy_image(image) };
                return Err(e);
            }
        };
        let texture = Texture {
            path: path.to_owned(),
            view,
            image,
            format,
            file_size: reader.width,
            base_level: base,
            file_levels,
            bytes: (base..file_levels)
                .map(|l| reader.levels[l as usize].length)
                .sum(),
        };
        match self.upload(ctx, mem, one_shot, &mut reader, &texture, base, levels) {
            Ok(()) => Ok(texture),
            Err(e) => {
                Self::free_texture(d, mem, texture);
                Err(e)
            }
        }
    }

    /// Uploads levels `base..base + levels` of the file into the texture, one level
    /// per staging allocation; when the staging ring is full, submits and waits.
    #[allow(clippy::too_many_arguments)]
    fn upload(
        &self,
        ctx: &Context,
        mem: &GpuMemory,
        one_shot: &OneShot,
        reader: &mut Reader,
        texture: &Texture,
        base: u32,
        levels: u32,
    ) -> Result<(), GpuError> {
        let d = &ctx.device;
        let image = texture.image();
        let mut pending: Vec<(Pending, u32)> = Vec::new();
        let mut first_batch = true;
        let flush =
            |pending: &mut Vec<(Pending, u32)>, first: bool, last: bool| -> Result<(), GpuError> {
                let r = one_shot.run(ctx, |cmd| {
                    // SAFETY: `cmd` is recording; the image and buffers are live.
                    unsafe {
                        if first {
                            let mut t = ImageTransition::color(
                                image,
                                vk::ImageLayout::UNDEFINED,
                                vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                            )
                            .stages(
                                vk::PipelineStageFlags2::NONE,
                                vk::AccessFlags2::NONE,
                                vk::PipelineStageFlags2::COPY,
                                vk::AccessFlags2::TRANSFER_WRITE,
                            );
                            t.mips = (0, levels);
                            transition(d, cmd, &[t]);
                        }
                        for (p, level) in pending.iter() {
                            let s = (reader_width(texture, *level)).max(1);
                            let region = vk::BufferImageCopy {
                                buffer_offset: 0,
                                buffer_row_length: 0,
                                buffer_image_height: 0,
                                image_subresource: vk::ImageSubresourceLayers {
                                    aspect_mask: vk::ImageAspectFlags::COLOR,
                                    mip_level: level - base,
                                    base_array_layer: 0,
                                    layer_count: 1,
                                },
                                image_offset: vk::Offset3D::default(),
                                image_extent: vk::Extent3D {
                                    width: s,
                                    height: s,
                                    depth: 1,
                                },
                            };
                            d.cmd_copy_buffer_to_image(
                                cmd,
                                p.buffer.raw(),
                                image,
                                vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                                &[region],
                            );
                        }
                        if last {
                            let mut t = ImageTransition::color(
                                image,
                                vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                                vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL,
                            )
                            .stages(
                                vk::PipelineStageFlags2::COPY,
                                vk::AccessFlags2::TRANSFER_WRITE,
                                crate::gpu::util::SAMPLING_STAGES,
                                vk::AccessFlags2::SHADER_SAMPLED_READ,
                            );
                            t.mips = (0, levels);
                            transition(d, cmd, &[t]);
                        }
                    }
                });
                for (p, _) in pending.drain(..) {
                    // SAFETY: `run` waited for the copies.
                    unsafe { mem.destroy_buffer(p.buffer) };
                }
                r
            };
        for level in base..base + levels {
            let len = reader.levels[level as usize].length;
            assert!(
                len <= self.staging_block,
                "a level larger than the staging ring"
            );
            let info = vk::BufferCreateInfo::default()
                .size(len)
                .usage(vk::BufferUsageFlags::TRANSFER_SRC);
            let opts = MemOptions::new(MemoryUsage::Upload, "staging")
                .in_pool(self.staging_pool)
                .full_is_expected();
            let mut buffer = match mem.create_buffer_mapped(&info, &opts) {
                Ok(x) => x,
                Err(_) if !pending.is_empty() => {
                    // The ring is full: finish what is queued, then retry once.
                    flush(&mut pending, first_batch, false)?;
                    first_batch = false;
                    // A second failure is not the ring: dumped as any other.
                    let opts = MemOptions {
                        full_is_expected: false,
                        ..opts
                    };
                    mem.create_buffer_mapped(&info, &opts)?
                }
                Err(e) => return Err(e),
            };
            let read = reader.read_level_into(
                level as usize,
                &mut buffer.mapped_mut().as_mut_slice()[..len as usize],
            );
            mem.flush(buffer.allocation());
            pending.push((Pending { buffer }, level));
            read.map_err(|e| GpuError::Other(e.to_string()))?;
        }
        flush(&mut pending, first_batch, true)
    }

    /// Destroys every texture, set and pool; the device must be idle.
    pub fn destroy(&mut self, ctx: &Context, mem: &GpuMemory) {
        let d = &ctx.device;
        if let Some((image, view)) = self.probe.take() {
            // SAFETY: the device is idle.
            unsafe {
                d.destroy_image_view(view, None);
                mem.destroy_image(image);
            }
        }
        for v in self.level_views.drain(..) {
            // SAFETY: the device is idle.
            unsafe { d.destroy_image_view(v, None) };
        }
        for t in self.textures.drain(..) {
            Self::free_texture(d, mem, t);
        }
        // SAFETY: the device is idle.
        unsafe {
            d.destroy_sampler(self.sampler, None);
            d.destroy_descriptor_pool(self.descriptor_pool, None);
            d.destroy_descriptor_set_layout(self.set_layout, None);
        }
        mem.destroy_pool(self.staging_pool);
        mem.destroy_pool(self.texture_pool);
    }
}

fn reader_width(texture: &Texture, level: u32) -> u32 {
    // Square maps: level 0's width is 2^(levels - 1).
    1u32 << (texture.file_levels - 1 - level)
}
