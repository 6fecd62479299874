//! Render targets: the HDR colour target, depth, the display-ready LDR target and
//! the readback buffer, each with its own memory from the allocator.

use ash::vk;

use crate::gpu::memory::{Image, MappedBuffer, MemOptions, MemoryUsage};
use crate::gpu::{GpuError, GpuMemory, VkCheck};

/// The HDR colour format.
pub const HDR_FORMAT: vk::Format = vk::Format::R16G16B16A16_SFLOAT;
/// The depth format (reversed Z).
pub const DEPTH_FORMAT: vk::Format = vk::Format::D32_SFLOAT;
/// The display-ready format written to PNGs.
pub const LDR_FORMAT: vk::Format = vk::Format::R8G8B8A8_SRGB;

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
        let info = vk::ImageCreateInfo::default()
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
            .initial_layout(vk::ImageLayout::UNDEFINED);
        let image = mem.create_image(
            &info,
            &MemOptions::new(MemoryUsage::GpuOnly, tag).dedicated(),
        )?;
        let view_info = vk::ImageViewCreateInfo::default()
            .image(image.raw())
            .view_type(vk::ImageViewType::TYPE_2D)
            .format(format)
            .subresource_range(vk::ImageSubresourceRange {
                aspect_mask: aspect,
                base_mip_level: 0,
                level_count: 1,
                base_array_layer: 0,
                layer_count: 1,
            });
        // SAFETY: `image` is live and bound.
        let view =
            unsafe { device.create_image_view(&view_info, None) }.check("vkCreateImageView")?;
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

/// Every per-resolution resource of the renderer.
pub struct Targets {
    /// Size in pixels.
    pub extent: vk::Extent2D,
    /// HDR colour.
    pub hdr: Target,
    /// Depth.
    pub depth: Target,
    /// Tone-mapped sRGB colour.
    pub ldr: Target,
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

    /// Creates the targets at `extent`.
    pub fn new(
        device: &ash::Device,
        mem: &GpuMemory,
        extent: vk::Extent2D,
    ) -> Result<Self, GpuError> {
        let hdr = Target::new(
            device,
            mem,
            extent,
            HDR_FORMAT,
            vk::ImageUsageFlags::COLOR_ATTACHMENT | vk::ImageUsageFlags::SAMPLED,
            vk::ImageAspectFlags::COLOR,
            "hdr-color",
        )?;
        let depth = Target::new(
            device,
            mem,
            extent,
            DEPTH_FORMAT,
            vk::ImageUsageFlags::DEPTH_STENCIL_ATTACHMENT,
            vk::ImageAspectFlags::DEPTH,
            "depth",
        )?;
        let ldr = Target::new(
            device,
            mem,
            extent,
            LDR_FORMAT,
            vk::ImageUsageFlags::COLOR_ATTACHMENT | vk::ImageUsageFlags::TRANSFER_SRC,
            vk::ImageAspectFlags::COLOR,
            "ldr-color",
        )?;
        let size = extent.width as u64 * extent.height as u64 * 4;
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(vk::BufferUsageFlags::TRANSFER_DST);
        let readback = mem.create_buffer_mapped(
            &info,
            &MemOptions::new(MemoryUsage::Readback, "frame-readback").dedicated(),
        )?;
        Ok(Self {
            extent,
            hdr,
            depth,
            ldr,
            readback: Some(readback),
        })
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
        self.depth.destroy(device, mem);
        self.ldr.destroy(device, mem);
        if let Some(readback) = self.readback.take() {
            // SAFETY: the device is idle.
            unsafe { mem.destroy_buffer(readback) };
        }
    }
}
