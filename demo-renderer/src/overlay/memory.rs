//! The overlay renderer's memory through vkalloc: egui-ash-renderer's vertex,
//! index and staging buffers and its font texture are allocated through
//! [`GpuMemory`], so they show up in the overlay itself.

use ash::{vk, Device};
use egui_ash_renderer::{RendererError, RendererResult};

use crate::gpu::memory::{Image, MappedBuffer, MemOptions, MemoryUsage};
use crate::gpu::GpuMemory;

/// egui-ash-renderer's [`egui_ash_renderer::allocator::Allocator`] on [`GpuMemory`].
pub struct OverlayAllocator {
    mem: GpuMemory,
}

impl OverlayAllocator {
    /// Allocates through `mem` (a shared handle to the demo's allocator).
    pub fn new(mem: GpuMemory) -> Self {
        Self { mem }
    }
}

fn err(e: crate::gpu::GpuError) -> RendererError {
    RendererError::Init(e.to_string())
}

/// What egui-ash-renderer holds beside each handle: the typed resource itself
/// (its trait has one allocation type for buffers and images).
#[derive(Debug)]
pub enum OverlayResource {
    /// A mapped vertex, index or staging buffer.
    Buffer(MappedBuffer),
    /// The font atlas (or another egui texture).
    Image(Image),
}

fn mismatch(what: &str) -> RendererError {
    RendererError::Init(format!("overlay: {what}"))
}

impl egui_ash_renderer::allocator::Allocator for OverlayAllocator {
    type Allocation = OverlayResource;

    fn create_buffer(
        &mut self,
        _device: &Device,
        size: usize,
        usage: vk::BufferUsageFlags,
    ) -> RendererResult<(vk::Buffer, OverlayResource)> {
        let tag = if usage.contains(vk::BufferUsageFlags::VERTEX_BUFFER) {
            "overlay vertices"
        } else if usage.contains(vk::BufferUsageFlags::INDEX_BUFFER) {
            "overlay indices"
        } else {
            "overlay staging"
        };
        let info = vk::BufferCreateInfo::default()
            .size(size.max(4) as u64)
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        let buffer = self
            .mem
            .create_buffer_mapped(&info, &MemOptions::new(MemoryUsage::Upload, tag))
            .map_err(err)?;
        Ok((buffer.raw(), OverlayResource::Buffer(buffer)))
    }

    fn create_image(
        &mut self,
        _device: &Device,
        width: u32,
        height: u32,
    ) -> RendererResult<(vk::Image, OverlayResource)> {
        let info = vk::ImageCreateInfo::default()
            .image_type(vk::ImageType::TYPE_2D)
            .extent(vk::Extent3D {
                width,
                height,
                depth: 1,
            })
            .mip_levels(1)
            .array_layers(1)
            .format(vk::Format::R8G8B8A8_SRGB)
            .tiling(vk::ImageTiling::OPTIMAL)
            .initial_layout(vk::ImageLayout::UNDEFINED)
            .usage(vk::ImageUsageFlags::TRANSFER_DST | vk::ImageUsageFlags::SAMPLED)
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
            .samples(vk::SampleCountFlags::TYPE_1);
        let image = self
            .mem
            .create_image(
                &info,
                &MemOptions::new(MemoryUsage::GpuOnly, "overlay font atlas"),
            )
            .map_err(err)?;
        Ok((image.raw(), OverlayResource::Image(image)))
    }

    fn destroy_buffer(
        &mut self,
        _device: &Device,
        buffer: vk::Buffer,
        memory: OverlayResource,
    ) -> RendererResult<()> {
        let OverlayResource::Buffer(b) = memory else {
            return Err(mismatch("destroy_buffer given an image"));
        };
        debug_assert_eq!(b.raw(), buffer);
        // SAFETY: egui-ash-renderer destroys a buffer only once the GPU is done with it:
        // staging after its one-time submission waited, vertex and index buffers when they
        // grow or at drop, and the demo waits for each frame's fence before the next.
        unsafe { self.mem.destroy_buffer(b) };
        Ok(())
    }

    fn destroy_image(
        &mut self,
        _device: &Device,
        image: vk::Image,
        memory: OverlayResource,
    ) -> RendererResult<()> {
        let OverlayResource::Image(i) = memory else {
            return Err(mismatch("destroy_image given a buffer"));
        };
        debug_assert_eq!(i.raw(), image);
        // SAFETY: as for buffers: textures are freed after the frames using them finished.
        unsafe { self.mem.destroy_image(i) };
        Ok(())
    }

    fn update_buffer<T: Copy>(
        &mut self,
        _device: &Device,
        memory: &mut OverlayResource,
        data: &[T],
    ) -> RendererResult<()> {
        let OverlayResource::Buffer(buffer) = memory else {
            return Err(mismatch("update_buffer given an image"));
        };
        let memory = buffer.mapped_mut();
        // SAFETY: egui-ash-renderer passes slices of egui vertices (f32 and u8 fields, no
        // padding), u32 indices and u8 texels: every byte is initialised, and the byte
        // view covers exactly the slice's memory for its lifetime.
        let bytes = unsafe {
            std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data))
        };
        if bytes.len() as u64 > memory.size() {
            return Err(RendererError::Init(format!(
                "overlay buffer of {} bytes cannot take {}",
                memory.size(),
                bytes.len()
            )));
        }
        memory.write(0, bytes).expect("write inside the allocation");
        self.mem.flush(memory);
        Ok(())
    }
}
