//! Small helpers: barriers (synchronization2), shader modules, one-time submits.

use ash::vk;

use super::{Context, GpuError, VkCheck};

/// The stages that sample material textures: the forward scene pass's fragment
/// shader and the visibility buffer's shading dispatches. Barriers that hand a
/// texture to sampling wait for, or are waited on by, both.
pub const SAMPLING_STAGES: vk::PipelineStageFlags2 = vk::PipelineStageFlags2::from_raw(
    vk::PipelineStageFlags2::FRAGMENT_SHADER.as_raw()
        | vk::PipelineStageFlags2::COMPUTE_SHADER.as_raw(),
);

/// One image layout transition with synchronization2 stage and access masks.
#[derive(Clone, Copy, Debug)]
pub struct ImageTransition {
    /// The image.
    pub image: vk::Image,
    /// Colour or depth.
    pub aspect: vk::ImageAspectFlags,
    /// Layout before.
    pub old: vk::ImageLayout,
    /// Layout after.
    pub new: vk::ImageLayout,
    /// Stages that must finish first.
    pub src_stage: vk::PipelineStageFlags2,
    /// Writes to make available.
    pub src_access: vk::AccessFlags2,
    /// Stages that wait.
    pub dst_stage: vk::PipelineStageFlags2,
    /// Accesses that must see the writes.
    pub dst_access: vk::AccessFlags2,
    /// First mip level and count.
    pub mips: (u32, u32),
    /// Source and destination queue families of an ownership transfer (a release
    /// on the source family's queue, an acquire on the destination's), or
    /// `QUEUE_FAMILY_IGNORED` twice for none.
    pub families: (u32, u32),
}

impl ImageTransition {
    /// A transition of mip 0 of a colour image.
    pub fn color(image: vk::Image, old: vk::ImageLayout, new: vk::ImageLayout) -> Self {
        Self {
            image,
            aspect: vk::ImageAspectFlags::COLOR,
            old,
            new,
            src_stage: vk::PipelineStageFlags2::ALL_COMMANDS,
            src_access: vk::AccessFlags2::MEMORY_WRITE,
            dst_stage: vk::PipelineStageFlags2::ALL_COMMANDS,
            dst_access: vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE,
            mips: (0, 1),
            families: (vk::QUEUE_FAMILY_IGNORED, vk::QUEUE_FAMILY_IGNORED),
        }
    }

    /// Makes the barrier a queue-family ownership transfer from `src` to `dst`.
    pub fn ownership(mut self, src: u32, dst: u32) -> Self {
        self.families = (src, dst);
        self
    }

    /// Whether the barrier transfers ownership between two queue families.
    pub fn is_ownership_transfer(&self) -> bool {
        self.families.0 != self.families.1
    }

    /// A colour attachment the fragment shader samples next: its writes made
    /// visible to sampled reads, `COLOR_ATTACHMENT_OPTIMAL` to
    /// `SHADER_READ_ONLY_OPTIMAL`.
    pub fn attachment_to_sampled(image: vk::Image) -> Self {
        Self::color(
            image,
            vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL,
            vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL,
        )
        .stages(
            vk::PipelineStageFlags2::COLOR_ATTACHMENT_OUTPUT,
            vk::AccessFlags2::COLOR_ATTACHMENT_WRITE,
            vk::PipelineStageFlags2::FRAGMENT_SHADER,
            vk::AccessFlags2::SHADER_SAMPLED_READ,
        )
    }

    /// Sets the stages and accesses.
    pub fn stages(
        mut self,
        src_stage: vk::PipelineStageFlags2,
        src_access: vk::AccessFlags2,
        dst_stage: vk::PipelineStageFlags2,
        dst_access: vk::AccessFlags2,
    ) -> Self {
        self.src_stage = src_stage;
        self.src_access = src_access;
        self.dst_stage = dst_stage;
        self.dst_access = dst_access;
        self
    }
}

/// A 2D colour view of `image`'s first `levels` mip levels (one layer), as
/// the gallery's textures are sampled.
///
/// # Safety
/// `image` is a live image of `device`, bound to memory, with at least
/// `levels` levels and a `format`-compatible format; the caller destroys the
/// view before the image.
pub unsafe fn texture_view(
    device: &ash::Device,
    image: vk::Image,
    format: vk::Format,
    levels: u32,
) -> Result<vk::ImageView, GpuError> {
    // SAFETY: the caller's contract, for levels 0..levels.
    unsafe { texture_levels_view(device, image, format, 0, levels) }
}

/// [`texture_view`] of `levels` levels from `base`.
///
/// # Safety
/// As [`texture_view`], the image holding at least `base + levels` levels.
pub unsafe fn texture_levels_view(
    device: &ash::Device,
    image: vk::Image,
    format: vk::Format,
    base: u32,
    levels: u32,
) -> Result<vk::ImageView, GpuError> {
    let info = vk::ImageViewCreateInfo::default()
        .image(image)
        .view_type(vk::ImageViewType::TYPE_2D)
        .format(format)
        .subresource_range(vk::ImageSubresourceRange {
            aspect_mask: vk::ImageAspectFlags::COLOR,
            base_mip_level: base,
            level_count: levels,
            base_array_layer: 0,
            layer_count: 1,
        });
    // SAFETY: the caller's contract: the image is live and bound.
    unsafe { device.create_image_view(&info, None) }.check("vkCreateImageView")
}

/// Waits for `fence` (without a timeout), then resets it for its next
/// submission.
///
/// # Safety
/// `fence` is a fence of `device` that a submission still to complete, or
/// already completed, signals; nothing else waits on or resets it meanwhile.
pub unsafe fn wait_and_reset(device: &ash::Device, fence: vk::Fence) -> Result<(), GpuError> {
    // SAFETY: per the contract.
    unsafe {
        device
            .wait_for_fences(&[fence], true, u64::MAX)
            .check("vkWaitForFences")?;
        device.reset_fences(&[fence]).check("vkResetFences")
    }
}

/// Resets `cmd` and begins recording it for one submission.
///
/// # Safety
/// `cmd` is from a pool created with `RESET_COMMAND_BUFFER` on `device`, and
/// no submission that uses it is still pending.
pub unsafe fn begin_one_time(device: &ash::Device, cmd: vk::CommandBuffer) -> Result<(), GpuError> {
    // SAFETY: the caller's contract: `cmd` is resettable and idle.
    unsafe {
        device
            .reset_command_buffer(cmd, vk::CommandBufferResetFlags::empty())
            .check("vkResetCommandBuffer")?;
        device
            .begin_command_buffer(
                cmd,
                &vk::CommandBufferBeginInfo::default()
                    .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
            )
            .check("vkBeginCommandBuffer")
    }
}

/// Records the transitions as one `vkCmdPipelineBarrier2`.
///
/// # Safety
/// `cmd` must be recording; the images must be live.
pub unsafe fn transition(device: &ash::Device, cmd: vk::CommandBuffer, ts: &[ImageTransition]) {
    let barriers: Vec<_> = ts
        .iter()
        .map(|t| {
            vk::ImageMemoryBarrier2::default()
                .image(t.image)
                .old_layout(t.old)
                .new_layout(t.new)
                .src_stage_mask(t.src_stage)
                .src_access_mask(t.src_access)
                .dst_stage_mask(t.dst_stage)
                .dst_access_mask(t.dst_access)
                .src_queue_family_index(t.families.0)
                .dst_queue_family_index(t.families.1)
                .subresource_range(vk::ImageSubresourceRange {
                    aspect_mask: t.aspect,
                    base_mip_level: t.mips.0,
                    level_count: t.mips.1,
                    base_array_layer: 0,
                    layer_count: 1,
                })
        })
        .collect();
    let dep = vk::DependencyInfo::default().image_memory_barriers(&barriers);
    // SAFETY: per the function's contract.
    unsafe { device.cmd_pipeline_barrier2(cmd, &dep) };
}

/// Creates a shader module from SPIR-V bytes.
pub fn shader_module(device: &ash::Device, spirv: &[u8]) -> Result<vk::ShaderModule, GpuError> {
    let words = ash::util::read_spv(&mut std::io::Cursor::new(spirv))
        .map_err(|e| GpuError::Other(format!("bad SPIR-V: {e}")))?;
    let info = vk::ShaderModuleCreateInfo::default().code(&words);
    // SAFETY: the words are SPIR-V compiled by build.rs and checked by spirv-val in tests.
    unsafe { device.create_shader_module(&info, None) }.check("vkCreateShaderModule")
}

/// A command pool and one primary command buffer for one submission at a time:
/// waited for at once ([`OneShot::run`], uploads at load time) or left in
/// flight ([`OneShot::submit`]) until the next use or [`OneShot::wait`].
pub struct OneShot {
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
    /// A submission of `cmd` whose fence has not been waited for.
    pending: std::cell::Cell<bool>,
}

impl OneShot {
    /// Creates the pool, buffer and fence.
    pub fn new(ctx: &Context) -> Result<Self, GpuError> {
        let d = &ctx.device;
        // SAFETY: valid create infos on a live device.
        unsafe {
            let pool = d
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
                        .command_pool(pool)
                        .command_buffer_count(1),
                )
                .check("vkAllocateCommandBuffers")?[0];
            let fence = d
                .create_fence(&vk::FenceCreateInfo::default(), None)
                .check("vkCreateFence")?;
            Ok(Self {
                pool,
                cmd,
                fence,
                pending: std::cell::Cell::new(false),
            })
        }
    }

    /// Records with `f`, submits, and waits.
    pub fn run(&self, ctx: &Context, f: impl FnOnce(vk::CommandBuffer)) -> Result<(), GpuError> {
        // SAFETY: no semaphore to wait on.
        unsafe { self.submit(ctx, None, f)? };
        self.wait(ctx)
    }

    /// Waits for the last [`OneShot::submit`] to finish, if it has not been
    /// waited for yet; returns at once otherwise.
    pub fn wait(&self, ctx: &Context) -> Result<(), GpuError> {
        if self.pending.get() {
            // SAFETY: the fence belongs to the last submission, not yet waited for.
            unsafe { wait_and_reset(&ctx.device, self.fence)? };
            self.pending.set(false);
        }
        Ok(())
    }

    /// Waits for the last submission (if pending), records with `f` and
    /// submits on the graphics queue without waiting: later submissions on
    /// that queue are ordered after it by the barriers `f` records, and the
    /// next `submit`, `run` or `wait` waits for it. With `after`, the
    /// submission first waits on that binary semaphore.
    ///
    /// # Safety
    /// `after`, when given, has a signal operation submitted before this call
    /// that no other wait consumes.
    pub unsafe fn submit(
        &self,
        ctx: &Context,
        after: Option<vk::Semaphore>,
        f: impl FnOnce(vk::CommandBuffer),
    ) -> Result<(), GpuError> {
        self.wait(ctx)?;
        let d = &ctx.device;
        let waits: Vec<vk::SemaphoreSubmitInfo> = after
            .into_iter()
            .map(|s| {
                vk::SemaphoreSubmitInfo::default()
                    .semaphore(s)
                    .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
            })
            .collect();
        // SAFETY: the buffer is not in use (its last submission was waited
        // for above); `after`'s signal is pending (the caller's contract).
        unsafe {
            begin_one_time(d, self.cmd)?;
            f(self.cmd);
            d.end_command_buffer(self.cmd).check("vkEndCommandBuffer")?;
            let cmds = [vk::CommandBufferSubmitInfo::default().command_buffer(self.cmd)];
            let submit = vk::SubmitInfo2::default()
                .wait_semaphore_infos(&waits)
                .command_buffer_infos(&cmds);
            d.queue_submit2(ctx.queue, &[submit], self.fence)
                .check("vkQueueSubmit2")?;
        }
        self.pending.set(true);
        Ok(())
    }

    /// Destroys the pool and fence; the device must be idle.
    pub fn destroy(&self, device: &ash::Device) {
        // SAFETY: nothing is in flight (the caller's contract).
        unsafe {
            device.destroy_fence(self.fence, None);
            device.destroy_command_pool(self.pool, None);
        }
    }
}
