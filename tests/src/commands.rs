//! Command recording helpers: copies and barriers the tests need, spelled
//! once.
//!
//! They use classic (Vulkan 1.0) barriers so they work on any 1.1 device.
//! Each is `unsafe` because it records Vulkan handles the caller vouches for.

use ash::vk;

use crate::GpuContext;

/// The color subresource of a single-mip, single-layer image.
pub const COLOR_LAYER: vk::ImageSubresourceLayers = vk::ImageSubresourceLayers {
    aspect_mask: vk::ImageAspectFlags::COLOR,
    mip_level: 0,
    base_array_layer: 0,
    layer_count: 1,
};

/// The whole color range of a single-mip, single-layer image.
pub const COLOR_RANGE: vk::ImageSubresourceRange = vk::ImageSubresourceRange {
    aspect_mask: vk::ImageAspectFlags::COLOR,
    base_mip_level: 0,
    level_count: 1,
    base_array_layer: 0,
    layer_count: 1,
};

/// One layout transition of a whole single-mip, single-layer color image.
#[derive(Clone, Copy, Debug)]
pub struct LayoutTransition {
    /// The layout the image is in.
    pub old: vk::ImageLayout,
    /// The layout it goes to.
    pub new: vk::ImageLayout,
    /// Stages whose work must finish first.
    pub src_stage: vk::PipelineStageFlags,
    /// Writes to make available.
    pub src_access: vk::AccessFlags,
    /// Stages that wait.
    pub dst_stage: vk::PipelineStageFlags,
    /// Accesses that see the result.
    pub dst_access: vk::AccessFlags,
}

impl LayoutTransition {
    /// `UNDEFINED` to `TRANSFER_DST_OPTIMAL`, before a copy into the image
    /// (discarding its contents).
    pub const UNDEFINED_TO_TRANSFER_DST: Self = Self {
        old: vk::ImageLayout::UNDEFINED,
        new: vk::ImageLayout::TRANSFER_DST_OPTIMAL,
        src_stage: vk::PipelineStageFlags::TOP_OF_PIPE,
        src_access: vk::AccessFlags::empty(),
        dst_stage: vk::PipelineStageFlags::TRANSFER,
        dst_access: vk::AccessFlags::TRANSFER_WRITE,
    };

    /// `TRANSFER_DST_OPTIMAL` to `TRANSFER_SRC_OPTIMAL`, between writing
    /// the image with a copy and reading it back with another.
    pub const TRANSFER_DST_TO_SRC: Self = Self {
        old: vk::ImageLayout::TRANSFER_DST_OPTIMAL,
        new: vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
        src_stage: vk::PipelineStageFlags::TRANSFER,
        src_access: vk::AccessFlags::TRANSFER_WRITE,
        dst_stage: vk::PipelineStageFlags::TRANSFER,
        dst_access: vk::AccessFlags::TRANSFER_READ,
    };

    /// `PREINITIALIZED` (a linear image written by the host through its
    /// mapping) to `TRANSFER_SRC_OPTIMAL`, keeping its contents.
    pub const fn from_preinitialized() -> Self {
        Self {
            old: vk::ImageLayout::PREINITIALIZED,
            new: vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
            src_stage: vk::PipelineStageFlags::HOST,
            src_access: vk::AccessFlags::HOST_WRITE,
            dst_stage: vk::PipelineStageFlags::TRANSFER,
            dst_access: vk::AccessFlags::TRANSFER_READ,
        }
    }
}

impl GpuContext {
    /// Records a copy of `size` bytes from the start of `src` to the start
    /// of `dst`.
    ///
    /// # Safety
    /// `cmd` is recording on this context's device (inside
    /// [`GpuContext::one_shot`]); `src` has `TRANSFER_SRC` usage, `dst`
    /// `TRANSFER_DST`, both are bound to memory, at least `size` bytes long,
    /// and stay alive until the submission completes.
    pub unsafe fn cmd_copy_buffer(
        &self,
        cmd: vk::CommandBuffer,
        src: vk::Buffer,
        dst: vk::Buffer,
        size: u64,
    ) {
        let region = vk::BufferCopy {
            src_offset: 0,
            dst_offset: 0,
            size,
        };
        // SAFETY: as the caller promises.
        unsafe { self.device().cmd_copy_buffer(cmd, src, dst, &[region]) };
    }

    /// Records a global barrier: transfer writes before it are visible to
    /// transfers after it and to the host once the submission is waited for.
    ///
    /// # Safety
    /// `cmd` is recording on this context's device.
    pub unsafe fn cmd_transfer_barrier(&self, cmd: vk::CommandBuffer) {
        let barrier = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(
                vk::AccessFlags::TRANSFER_READ
                    | vk::AccessFlags::TRANSFER_WRITE
                    | vk::AccessFlags::HOST_READ,
            );
        // SAFETY: as the caller promises; the barrier is well formed.
        unsafe {
            self.device().cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::TRANSFER,
                vk::PipelineStageFlags::TRANSFER | vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &[barrier],
                &[],
                &[],
            )
        };
    }

    /// Records a layout transition of a single-mip, single-layer color image.
    ///
    /// # Safety
    /// `cmd` is recording on this context's device; `image` is a live,
    /// bound color image of one mip and one layer, in layout `t.old` when
    /// the barrier executes, and alive until the submission completes.
    pub unsafe fn cmd_image_barrier(
        &self,
        cmd: vk::CommandBuffer,
        image: vk::Image,
        t: LayoutTransition,
    ) {
        let barrier = vk::ImageMemoryBarrier::default()
            .old_layout(t.old)
            .new_layout(t.new)
            .src_access_mask(t.src_access)
            .dst_access_mask(t.dst_access)
            .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
            .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
            .image(image)
            .subresource_range(COLOR_RANGE);
        // SAFETY: as the caller promises; the barrier is well formed.
        unsafe {
            self.device().cmd_pipeline_barrier(
                cmd,
                t.src_stage,
                t.dst_stage,
                vk::DependencyFlags::empty(),
                &[],
                &[],
                &[barrier],
            )
        };
    }

    /// Records a copy of a tightly packed buffer into a whole 2D image.
    ///
    /// # Safety
    /// `cmd` is recording on this context's device; `buffer` holds at least
    /// `extent.width * extent.height * texel_size` bytes and has
    /// `TRANSFER_SRC` usage; `image` is a single-mip, single-layer color image
    /// of that extent with `TRANSFER_DST` usage, in `TRANSFER_DST_OPTIMAL`
    /// layout; both bound and alive until the submission completes.
    pub unsafe fn cmd_copy_buffer_to_image(
        &self,
        cmd: vk::CommandBuffer,
        buffer: vk::Buffer,
        image: vk::Image,
        extent: vk::Extent2D,
    ) {
        let region = full_image_region(extent);
        // SAFETY: as the caller promises.
        unsafe {
            self.device().cmd_copy_buffer_to_image(
                cmd,
                buffer,
                image,
                vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                &[region],
            )
        };
    }

    /// Records a copy of a whole 2D image into a tightly packed buffer.
    ///
    /// # Safety
    /// As [`GpuContext::cmd_copy_buffer_to_image`] with the directions
    /// swapped: `image` has `TRANSFER_SRC` usage and is in
    /// `TRANSFER_SRC_OPTIMAL` layout; `buffer` has `TRANSFER_DST` usage.
    pub unsafe fn cmd_copy_image_to_buffer(
        &self,
        cmd: vk::CommandBuffer,
        image: vk::Image,
        buffer: vk::Buffer,
        extent: vk::Extent2D,
    ) {
        let region = full_image_region(extent);
        // SAFETY: as the caller promises.
        unsafe {
            self.device().cmd_copy_image_to_buffer(
                cmd,
                image,
                vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
                buffer,
                &[region],
            )
        };
    }
}

fn full_image_region(extent: vk::Extent2D) -> vk::BufferImageCopy {
    vk::BufferImageCopy {
        buffer_offset: 0,
        buffer_row_length: 0,
        buffer_image_height: 0,
        image_subresource: COLOR_LAYER,
        image_offset: vk::Offset3D::default(),
        image_extent: vk::Extent3D {
            width: extent.width,
            height: extent.height,
            depth: 1,
        },
    }
}
