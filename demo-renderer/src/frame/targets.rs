//! Render targets: the HDR colour target, depth, the display-ready LDR target and
//! the readback buffer, each with its own memory from the allocator; and, with the
//! effects on, the frame's transient targets (the sun's shadow map and the bloom
//! image), which share one allocation through the allocator's alias groups.

use ash::vk;

use crate::gpu::memory::{
    AliasGroup, AliasedImage, Image, MappedBuffer, MemOptions, MemoryUsage, PassInterval,
    TARGET_PRIORITY,
};
use crate::gpu::{GpuError, GpuMemory, VkCheck};

/// The HDR colour format.
pub const HDR_FORMAT: vk::Format = vk::Format::R16G16B16A16_SFLOAT;
/// The depth format (reversed Z).
pub const DEPTH_FORMAT: vk::Format = vk::Format::D32_SFLOAT;
/// The visibility buffer's format: per pixel, the draw id in the top
/// [`VIS_DRAW_BITS`] bits and the triangle in the rest (`shaders/vis.frag`).
pub const VIS_FORMAT: vk::Format = vk::Format::R32_UINT;
/// Bits of a visibility-buffer id that hold the draw (1-based; 0 is the sky).
pub const VIS_DRAW_BITS: u32 = 8;
/// The display-ready format written to PNGs.
pub const LDR_FORMAT: vk::Format = vk::Format::R8G8B8A8_SRGB;
/// The shadow map's format (regular Z: cleared to 1, nearer is less).
pub const SHADOW_FORMAT: vk::Format = vk::Format::D32_SFLOAT;
/// The bloom image's format.
pub const BLOOM_FORMAT: vk::Format = HDR_FORMAT;

/// The passes of a frame, in order: the numbers of the transients' lifetimes.
pub mod pass {
    /// The sun's shadow map is drawn.
    pub const SHADOW: u32 = 0;
    /// The scene, which samples the shadow map.
    pub const SCENE: u32 = 1;
    /// The bloom image is drawn from the HDR frame.
    pub const BLOOM: u32 = 2;
    /// The tone map, which samples the bloom image (the overlay is drawn in it too).
    pub const TONEMAP: u32 = 3;
}

fn image_info(
    extent: vk::Extent2D,
    format: vk::Format,
    usage: vk::ImageUsageFlags,
) -> vk::ImageCreateInfo<'static> {
    vk::ImageCreateInfo::default()
        .image_type(vk::ImageType::TYPE_2D)
        .format(format)
        .extent(vk::Extent3D {
            width: extent.width,
            height: extent.height,
            depth: 1,
        })
        .mip_levels(1)
        .array_layers(1)
        .samples(vk::SampleCountFlags::TYPE_1)
        .tiling(vk::ImageTiling::OPTIMAL)
        .usage(usage)
        .initial_layout(vk::ImageLayout::UNDEFINED)
}

fn create_view(
    device: &ash::Device,
    image: vk::Image,
    format: vk::Format,
    aspect: vk::ImageAspectFlags,
) -> Result<vk::ImageView, GpuError> {
    create_view_for(device, image, format, aspect, None)
}

/// A view of mip 0; `usage` narrows the image's usage for the view (an sRGB view
/// of an image that other views store into must leave storage out).
fn create_view_for(
    device: &ash::Device,
    image: vk::Image,
    format: vk::Format,
    aspect: vk::ImageAspectFlags,
    usage: Option<vk::ImageUsageFlags>,
) -> Result<vk::ImageView, GpuError> {
    let mut usage_info = vk::ImageViewUsageCreateInfo::default().usage(usage.unwrap_or_default());
    let mut view_info = vk::ImageViewCreateInfo::default()
        .image(image)
        .view_type(vk::ImageViewType::TYPE_2D)
        .format(format)
        .subresource_range(vk::ImageSubresourceRange {
            aspect_mask: aspect,
            base_mip_level: 0,
            level_count: 1,
            base_array_layer: 0,
            layer_count: 1,
        });
    if usage.is_some() {
        view_info = view_info.push_next(&mut usage_info);
    }
    // SAFETY: `image` is live and bound.
    unsafe { device.create_image_view(&view_info, None) }.check("vkCreateImageView")
}

/// One image with its view and memory.
pub struct Target {
    /// A view of mip 0.
    pub view: vk::ImageView,
    /// The image and its memory (`None` once destroyed).
    image: Option<Image>,
}

impl Target {
    /// The image (null once destroyed).
    pub fn image(&self) -> vk::Image {
        self.image.as_ref().map_or(vk::Image::null(), Image::raw)
    }

    fn new(
        device: &ash::Device,
        mem: &GpuMemory,
        extent: vk::Extent2D,
        format: vk::Format,
        usage: vk::ImageUsageFlags,
        aspect: vk::ImageAspectFlags,
        tag: &str,
    ) -> Result<Self, GpuError> {
        let info = image_info(extent, format, usage);
        Self::from_info(device, mem, &info, aspect, None, tag)
    }

    /// `view_usage`: the view's usage where it must be narrower than the image's.
    fn from_info(
        device: &ash::Device,
        mem: &GpuMemory,
        info: &vk::ImageCreateInfo<'_>,
        aspect: vk::ImageAspectFlags,
        view_usage: Option<vk::ImageUsageFlags>,
        tag: &str,
    ) -> Result<Self, GpuError> {
        let format = info.format;
        let image = mem.create_image(
            info,
            &MemOptions::new(MemoryUsage::GpuOnly, tag)
                .dedicated()
                .with_priority(TARGET_PRIORITY),
        )?;
        let view = match create_view_for(device, image.raw(), format, aspect, view_usage) {
            Ok(v) => v,
            Err(e) => {
                // SAFETY: never used.
                unsafe { mem.destroy_image(image) };
                return Err(e);
            }
        };
        Ok(Self {
            view,
            image: Some(image),
        })
    }

    fn destroy(&mut self, device: &ash::Device, mem: &GpuMemory) {
        if let Some(image) = self.image.take() {
            // SAFETY: the renderer waits for the device before destroying targets.
            unsafe {
                device.destroy_image_view(self.view, None);
                mem.destroy_image(image);
            }
        }
    }
}

/// One image bound on a member of the transients' alias group, with its view.
pub struct AliasedTarget {
    /// A view of mip 0.
    pub view: vk::ImageView,
    /// Its tag in the allocator's dump.
    pub name: &'static str,
    /// Size in pixels.
    pub extent: vk::Extent2D,
    /// The image (`None` once destroyed).
    image: Option<AliasedImage>,
}

impl AliasedTarget {
    /// The image (null once destroyed).
    pub fn image(&self) -> vk::Image {
        self.image
            .as_ref()
            .map_or(vk::Image::null(), AliasedImage::raw)
    }
}

/// The frame's transient targets on one alias group (see [`pass`] for the numbers):
/// the sun's shadow map, live in passes `SHADOW..=SCENE`, and the bloom image, live
/// in `BLOOM..=TONEMAP`. Their lifetimes don't overlap, so the allocator places both
/// at the same bytes and the group is as large as the larger of the two.
///
/// The renderer has one frame in flight (each frame waits for its fence before
/// the next is recorded), so one group serves every frame; each frame moves each
/// image out of `UNDEFINED` at its first use, after a barrier on the other member's
/// last use (the previous frame's tone map for the shadow map, this frame's scene
/// pass for the bloom image).
pub struct Transients {
    /// The sun's shadow map (depth, square).
    pub shadow: AliasedTarget,
    /// Bloom: the blurred bright part of the HDR frame, quarter resolution.
    pub bloom: AliasedTarget,
    group: Option<AliasGroup>,
}

/// The tag of the transients' alias group in the allocator's dump.
pub const TRANSIENTS_TAG: &str = "transient targets (shadow-map + bloom)";

impl Transients {
    /// The shadow map's side for an output of `extent`: the output height's power of
    /// two, 512 to 2048.
    pub fn shadow_size(extent: vk::Extent2D) -> u32 {
        extent.height.next_power_of_two().clamp(512, 2048)
    }

    /// Allocates the group and binds both images; with `storage` the bloom image is
    /// a storage image too (written by compute, `frame::post`).
    pub fn new(
        device: &ash::Device,
        mem: &GpuMemory,
        extent: vk::Extent2D,
        storage: bool,
    ) -> Result<Self, GpuError> {
        let side = Self::shadow_size(extent);
        let shadow_extent = vk::Extent2D {
            width: side,
            height: side,
        };
        let bloom_extent = vk::Extent2D {
            width: extent.width.div_ceil(4),
            height: extent.height.div_ceil(4),
        };
        let shadow_info = image_info(
            shadow_extent,
            SHADOW_FORMAT,
            vk::ImageUsageFlags::DEPTH_STENCIL_ATTACHMENT | vk::ImageUsageFlags::SAMPLED,
        );
        let bloom_info = image_info(
            bloom_extent,
            BLOOM_FORMAT,
            vk::ImageUsageFlags::COLOR_ATTACHMENT
                | vk::ImageUsageFlags::SAMPLED
                | if storage {
                    vk::ImageUsageFlags::STORAGE
                } else {
                    vk::ImageUsageFlags::empty()
                },
        );
        let group = mem.create_alias_group(
            &[
                (
                    shadow_info,
                    PassInterval::new(pass::SHADOW, pass::SCENE),
                    "shadow-map",
                ),
                (
                    bloom_info,
                    PassInterval::new(pass::BLOOM, pass::TONEMAP),
                    "bloom",
                ),
            ],
            &MemOptions::new(MemoryUsage::GpuOnly, TRANSIENTS_TAG)
                .dedicated()
                .with_priority(TARGET_PRIORITY),
        )?;
        let mut t = Self {
            shadow: AliasedTarget {
                view: vk::ImageView::null(),
                name: "shadow-map",
                extent: shadow_extent,
                image: None,
            },
            bloom: AliasedTarget {
                view: vk::ImageView::null(),
                name: "bloom",
                extent: bloom_extent,
                image: None,
            },
            group: Some(group),
        };
        match t.bind(device, mem, &shadow_info, &bloom_info) {
            Ok(()) => Ok(t),
            Err(e) => {
                t.destroy(device, mem);
                Err(e)
            }
        }
    }

    fn bind(
        &mut self,
        device: &ash::Device,
        mem: &GpuMemory,
        shadow_info: &vk::ImageCreateInfo<'_>,
        bloom_info: &vk::ImageCreateInfo<'_>,
    ) -> Result<(), GpuError> {
        let group = self.group.as_ref().expect("live group");
        let targets = [
            (
                &mut self.shadow,
                0,
                shadow_info,
                vk::ImageAspectFlags::DEPTH,
            ),
            (&mut self.bloom, 1, bloom_info, vk::ImageAspectFlags::COLOR),
        ];
        for (target, member, info, aspect) in targets {
            let image = mem.create_aliased_image(group, member, info, target.name)?;
            let raw = image.raw();
            target.image = Some(image);
            target.view = create_view(device, raw, info.format, aspect)?;
        }
        Ok(())
    }

    /// The group's figures for the report.
    pub fn report(&self) -> AliasingReport {
        let Some(group) = self.group.as_ref() else {
            return AliasingReport::default();
        };
        let members = [&self.shadow, &self.bloom]
            .iter()
            .zip(group.members())
            .map(|(t, m)| AliasMemberReport {
                name: t.name.to_string(),
                size: m.size,
                offset: m.offset,
                first_pass: m.lifetime.first,
                last_pass: m.lifetime.last,
            })
            .collect();
        let g = AliasGroupReport {
            name: TRANSIENTS_TAG.to_string(),
            allocation_bytes: group.allocation().size(),
            bytes_saved: group.bytes_saved(),
            members,
        };
        AliasingReport {
            bytes_saved: g.bytes_saved,
            groups: vec![g],
        }
    }

    /// Destroys the images, then frees the group; the device must be idle.
    pub fn destroy(&mut self, device: &ash::Device, mem: &GpuMemory) {
        for t in [&mut self.shadow, &mut self.bloom] {
            // SAFETY: the device is idle; the view is of this image.
            unsafe {
                if t.view != vk::ImageView::null() {
                    device.destroy_image_view(t.view, None);
                    t.view = vk::ImageView::null();
                }
                if let Some(image) = t.image.take() {
                    mem.destroy_aliased_image(image);
                }
            }
        }
        if let Some(group) = self.group.take() {
            mem.free_alias_group(group);
        }
    }
}

/// `report.json`'s `aliasing`: what the renderer's alias groups saved.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct AliasingReport {
    /// The members' sizes summed minus the groups' allocation sizes, over every group.
    pub bytes_saved: u64,
    /// Each group.
    pub groups: Vec<AliasGroupReport>,
}

/// One alias group in the report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AliasGroupReport {
    /// The group allocation's tag.
    pub name: String,
    /// The group allocation's size.
    pub allocation_bytes: u64,
    /// [`AliasGroup::bytes_saved`].
    pub bytes_saved: u64,
    /// Its members.
    pub members: Vec<AliasMemberReport>,
}

/// One member of an alias group in the report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AliasMemberReport {
    /// The member's tag.
    pub name: String,
    /// Bytes (the image's memory requirements).
    pub size: u64,
    /// Offset in the group's allocation.
    pub offset: u64,
    /// First pass of its lifetime.
    pub first_pass: u32,
    /// Last pass of its lifetime.
    pub last_pass: u32,
}

/// Every per-resolution resource of the renderer.
pub struct Targets {
    /// Size in pixels.
    pub extent: vk::Extent2D,
    /// HDR colour (a storage image too with visibility shading: the shading
    /// dispatches write it).
    pub hdr: Target,
    /// The visibility buffer (with visibility shading).
    pub vis: Option<Target>,
    /// Depth.
    pub depth: Target,
    /// Tone-mapped sRGB colour.
    pub ldr: Target,
    /// With visibility shading, a `R8G8B8A8_UNORM` view of `ldr` for the compute
    /// tone map to store into (`ldr` is made mutable-format, extended-usage, with
    /// storage); null otherwise.
    pub ldr_storage: vk::ImageView,
    /// The shadow map and bloom image on one alias group (with the effects on).
    pub transients: Option<Transients>,
    /// Host-visible copy of `ldr`, with its memory (`None` once destroyed).
    readback: Option<MappedBuffer>,
}

impl Targets {
    /// The host-visible copy of `ldr` (null once destroyed).
    pub fn readback(&self) -> vk::Buffer {
        self.readback
            .as_ref()
            .map_or(vk::Buffer::null(), MappedBuffer::raw)
    }

    /// Creates the targets at `extent`, with the transients if `effects`.
    pub fn new(
        device: &ash::Device,
        mem: &GpuMemory,
        extent: vk::Extent2D,
        effects: bool,
        visibility: bool,
    ) -> Result<Self, GpuError> {
        let empty = || Target {
            view: vk::ImageView::null(),
            image: None,
        };
        let mut t = Self {
            extent,
            hdr: empty(),
            vis: None,
            depth: empty(),
            ldr: empty(),
            ldr_storage: vk::ImageView::null(),
            transients: None,
            readback: None,
        };
        // Filled in place, so that a failure destroys what was made.
        match t.fill(device, mem, effects, visibility) {
            Ok(()) => Ok(t),
            Err(e) => {
                t.destroy(device, mem);
                Err(e)
            }
        }
    }

    fn fill(
        &mut self,
        device: &ash::Device,
        mem: &GpuMemory,
        effects: bool,
        visibility: bool,
    ) -> Result<(), GpuError> {
        let extent = self.extent;
        let storage = if visibility {
            vk::ImageUsageFlags::STORAGE
        } else {
            vk::ImageUsageFlags::empty()
        };
        self.hdr = Target::new(
            device,
            mem,
            extent,
            HDR_FORMAT,
            vk::ImageUsageFlags::COLOR_ATTACHMENT | vk::ImageUsageFlags::SAMPLED | storage,
            vk::ImageAspectFlags::COLOR,
            "hdr-color",
        )?;
        if visibility {
            self.vis = Some(Target::new(
                device,
                mem,
                extent,
                VIS_FORMAT,
                vk::ImageUsageFlags::COLOR_ATTACHMENT | vk::ImageUsageFlags::STORAGE,
                vk::ImageAspectFlags::COLOR,
                "visibility",
            )?);
        }
        self.depth = Target::new(
            device,
            mem,
            extent,
            DEPTH_FORMAT,
            vk::ImageUsageFlags::DEPTH_STENCIL_ATTACHMENT,
            vk::ImageAspectFlags::DEPTH,
            "depth",
        )?;
        let ldr_usage = vk::ImageUsageFlags::COLOR_ATTACHMENT | vk::ImageUsageFlags::TRANSFER_SRC;
        if visibility {
            let info = image_info(extent, LDR_FORMAT, ldr_usage | vk::ImageUsageFlags::STORAGE)
                .flags(vk::ImageCreateFlags::MUTABLE_FORMAT | vk::ImageCreateFlags::EXTENDED_USAGE);
            self.ldr = Target::from_info(
                device,
                mem,
                &info,
                vk::ImageAspectFlags::COLOR,
                Some(ldr_usage),
                "ldr-color",
            )?;
            self.ldr_storage = create_view_for(
                device,
                self.ldr.image(),
                vk::Format::R8G8B8A8_UNORM,
                vk::ImageAspectFlags::COLOR,
                Some(vk::ImageUsageFlags::STORAGE),
            )?;
        } else {
            self.ldr = Target::new(
                device,
                mem,
                extent,
                LDR_FORMAT,
                ldr_usage,
                vk::ImageAspectFlags::COLOR,
                "ldr-color",
            )?;
        }
        let size = extent.width as u64 * extent.height as u64 * 4;
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(vk::BufferUsageFlags::TRANSFER_DST);
        self.readback = Some(mem.create_buffer_mapped(
            &info,
            &MemOptions::new(MemoryUsage::Readback, "frame-readback").dedicated(),
        )?);
        if effects {
            self.transients = Some(Transients::new(device, mem, extent, visibility)?);
        }
        Ok(())
    }

    /// Copies the read-back frame (tightly packed RGBA8, sRGB) out of the buffer.
    pub fn read_pixels(&self, mem: &GpuMemory) -> Vec<u8> {
        let m = self.readback.as_ref().expect("live targets").allocation();
        mem.invalidate(m);
        let mut out = vec![0u8; self.extent.width as usize * self.extent.height as usize * 4];
        m.read(0, &mut out).expect("read inside the allocation");
        out
    }

    /// Destroys everything; the device must be idle.
    pub fn destroy(&mut self, device: &ash::Device, mem: &GpuMemory) {
        self.hdr.destroy(device, mem);
        if let Some(mut v) = self.vis.take() {
            v.destroy(device, mem);
        }
        self.depth.destroy(device, mem);
        if self.ldr_storage != vk::ImageView::null() {
            // SAFETY: the device is idle; the view is of `ldr`, destroyed next.
            unsafe { device.destroy_image_view(self.ldr_storage, None) };
            self.ldr_storage = vk::ImageView::null();
        }
        self.ldr.destroy(device, mem);
        if let Some(mut t) = self.transients.take() {
            t.destroy(device, mem);
        }
        if let Some(readback) = self.readback.take() {
            // SAFETY: the device is idle.
            unsafe { mem.destroy_buffer(readback) };
        }
    }
}
