//! Performing defragmentation moves on the GPU, and binding aliased
//! resources.
//!
//! A move of a bound [`Buffer`] or [`Image`] takes three steps, or one:
//! - [`Allocator::prepare_move`] creates the new resource (an image from its
//!   kept [`super::ImageInfo`]) and binds it at the move's destination;
//! - [`Allocator::cmd_record_moves`] records the copies, old to new (images:
//!   every mip level and array layer), with the barriers around them;
//! - once the copies have completed, [`Allocator::finish_move`] commits the
//!   move and hands the new resource back; the old one is destroyed.
//!
//! [`Allocator::perform_moves`] does all three on a queue the caller gives.

use ash::vk;
use ash::vk::Handle;

use super::bound::{Buffer, DestroyError, Image};
use super::{requirements, AshDevice};
use crate::alias::{AliasGroup, AliasRequirement, PassInterval};
use crate::defrag::{Defragmentation, Move};
use crate::desc::ResourceKind;
use crate::{Allocator, Error};

/// A bound resource to move, and for an image the layout it is in (the new
/// image ends in the same layout).
#[derive(Debug)]
pub enum Movable {
    /// A buffer (made with `TRANSFER_SRC` and `TRANSFER_DST` usage).
    Buffer(Buffer),
    /// An image (made with `TRANSFER_SRC` and `TRANSFER_DST` usage).
    Image {
        /// The image.
        image: Image,
        /// Its layout when the copies run: the new image is left in it.
        /// `UNDEFINED` means the contents need not survive: nothing is
        /// copied and the new image stays `UNDEFINED`. `PREINITIALIZED` is
        /// refused ([`crate::Error::InvalidMove`]): no barrier may leave an
        /// image in it.
        layout: vk::ImageLayout,
    },
}

impl Movable {
    /// The resource's allocation.
    pub fn allocation(&self) -> &crate::Allocation {
        match self {
            Movable::Buffer(b) => b.allocation(),
            Movable::Image { image, .. } => image.allocation(),
        }
    }
}

/// The old and new resources of a prepared move.
#[derive(Debug)]
enum Pair {
    Buffer {
        old: Buffer,
        new: vk::Buffer,
    },
    Image {
        old: Image,
        layout: vk::ImageLayout,
        new: vk::Image,
    },
}

/// A move with its new resource created and bound; the copy comes next.
/// End it with [`crate::Allocator::finish_move`] once the copy completed, or
/// [`crate::Allocator::cancel_move`] if it will not run: dropped, it leaks
/// the new resource and the old one.
#[derive(Debug)]
#[must_use = "a prepared move holds a new resource: finish or cancel it"]
pub struct PreparedMove {
    mv: Move,
    pair: Pair,
}

/// A move that could not be prepared or finished: why, and the move and the
/// resource, handed back (the resource still bound where it was).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct MoveError {
    /// Why.
    pub error: Error,
    /// The move (cancel it, or drop it) and the resource.
    pub parts: Box<(Move, Movable)>,
}

/// Whether `format` is a Y'CbCr format (`VK_KHR_sampler_ycbcr_conversion`,
/// `VK_EXT_ycbcr_2plane_444_formats`): multi-planar ones are copied plane by
/// plane, with `PLANE_n` aspects, which the moves do not record.
fn ycbcr(format: vk::Format) -> bool {
    let raw = format.as_raw();
    (1_000_156_000..=1_000_156_033).contains(&raw) || (1_000_330_000..=1_000_330_003).contains(&raw)
}

/// The aspects of a format: depth, stencil, both, or color.
fn aspects(format: vk::Format) -> vk::ImageAspectFlags {
    match format {
        vk::Format::D16_UNORM | vk::Format::X8_D24_UNORM_PACK32 | vk::Format::D32_SFLOAT => {
            vk::ImageAspectFlags::DEPTH
        }
        vk::Format::S8_UINT => vk::ImageAspectFlags::STENCIL,
        vk::Format::D16_UNORM_S8_UINT
        | vk::Format::D24_UNORM_S8_UINT
        | vk::Format::D32_SFLOAT_S8_UINT => {
            vk::ImageAspectFlags::DEPTH | vk::ImageAspectFlags::STENCIL
        }
        _ => vk::ImageAspectFlags::COLOR,
    }
}

fn vulkan(call: &'static str) -> impl Fn(vk::Result) -> Error {
    move |result| Error::Vulkan {
        call,
        result: result.as_raw(),
    }
}

const COPYABLE_BUFFER: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::TRANSFER_SRC.as_raw() | vk::BufferUsageFlags::TRANSFER_DST.as_raw(),
);
const COPYABLE_IMAGE: vk::ImageUsageFlags = vk::ImageUsageFlags::from_raw(
    vk::ImageUsageFlags::TRANSFER_SRC.as_raw() | vk::ImageUsageFlags::TRANSFER_DST.as_raw(),
);

impl Allocator<AshDevice> {
    /// Creates the new resource of `mv` with the old one's create info and
    /// binds it at the destination.
    ///
    /// # Safety
    /// `old` is live on this allocator's device.
    ///
    /// # Errors
    /// [`Error::InvalidMove`] when `old` is not the move's source, its usage
    /// is unknown or lacks `TRANSFER_SRC | TRANSFER_DST`; [`Error::Vulkan`]
    /// when creating or binding fails. The move and the resource come back.
    pub unsafe fn prepare_move(&self, mv: Move, old: Movable) -> Result<PreparedMove, MoveError> {
        let refuse = |error: Error, mv: Move, old: Movable| {
            Err(MoveError {
                error,
                parts: Box::new((mv, old)),
            })
        };
        let a = old.allocation();
        if a.id() != mv.id() || (a.memory(), a.offset()) != mv.source() {
            return refuse(
                Error::InvalidMove("the resource is not the move's source"),
                mv,
                old,
            );
        }
        let device = self.device().raw();
        let (memory, offset) = mv.destination();
        let memory = vk::DeviceMemory::from_raw(memory.0);
        match old {
            Movable::Buffer(b) => {
                let Some(usage) = b.usage().filter(|u| u.contains(COPYABLE_BUFFER)) else {
                    return refuse(
                        Error::InvalidMove(
                            "the buffer's usage is unknown or lacks TRANSFER_SRC | TRANSFER_DST",
                        ),
                        mv,
                        Movable::Buffer(b),
                    );
                };
                let info = vk::BufferCreateInfo::default()
                    .size(b.size())
                    .usage(usage)
                    .sharing_mode(vk::SharingMode::EXCLUSIVE);
                // SAFETY: the create info of a live buffer of this device.
                let new = match unsafe { device.create_buffer(&info, None) } {
                    Ok(raw) => raw,
                    Err(e) => return refuse(vulkan("vkCreateBuffer")(e), mv, Movable::Buffer(b)),
                };
                // SAFETY: the destination has the source's size, alignment
                // and memory type, which the same create info required; the
                // buffer is fresh and unbound.
                if let Err(e) = unsafe { device.bind_buffer_memory(new, memory, offset) } {
                    // SAFETY: unused and unbound.
                    unsafe { device.destroy_buffer(new, None) };
                    return refuse(vulkan("vkBindBufferMemory")(e), mv, Movable::Buffer(b));
                }
                Ok(PreparedMove {
                    mv,
                    pair: Pair::Buffer { old: b, new },
                })
            }
            Movable::Image { image, layout } => {
                let info = image.info().create_info();
                if !info.usage.contains(COPYABLE_IMAGE) {
                    return refuse(
                        Error::InvalidMove("the image lacks TRANSFER_SRC | TRANSFER_DST usage"),
                        mv,
                        Movable::Image { image, layout },
                    );
                }
                if ycbcr(info.format) {
                    return refuse(
                        Error::InvalidMove(
                            "Y'CbCr images are not moved (a multi-planar copy needs an aspect \
                             per plane); pin it with set_movable",
                        ),
                        mv,
                        Movable::Image { image, layout },
                    );
                }
                // The new image is left in the old one's layout, and no
                // barrier may transition to PREINITIALIZED (UNDEFINED is
                // not copied: the new image is simply left undefined).
                if layout == vk::ImageLayout::PREINITIALIZED {
                    return refuse(
                        Error::InvalidMove(
                            "an image in PREINITIALIZED layout can't be moved: the new image \
                             can't be left in that layout (transition the image first)",
                        ),
                        mv,
                        Movable::Image { image, layout },
                    );
                }
                // SAFETY: the create info of a live image of this device.
                let new = match unsafe { device.create_image(&info, None) } {
                    Ok(raw) => raw,
                    Err(e) => {
                        return refuse(
                            vulkan("vkCreateImage")(e),
                            mv,
                            Movable::Image { image, layout },
                        )
                    }
                };
                // SAFETY: as for buffers: the same create info, the same
                // requirements.
                if let Err(e) = unsafe { device.bind_image_memory(new, memory, offset) } {
                    // SAFETY: unused and unbound.
                    unsafe { device.destroy_image(new, None) };
                    return refuse(
                        vulkan("vkBindImageMemory")(e),
                        mv,
                        Movable::Image { image, layout },
                    );
                }
                Ok(PreparedMove {
                    mv,
                    pair: Pair::Image {
                        old: image,
                        layout,
                        new,
                    },
                })
            }
        }
    }

    /// Records the copies of `moves`, old to new, with barriers: every
    /// earlier write is made visible to the copies, and the copies' writes
    /// to every later command. Images go to `TRANSFER_SRC_OPTIMAL` /
    /// `TRANSFER_DST_OPTIMAL` for the copy of every mip level and array
    /// layer, then the new image to the old one's layout. An image in
    /// `UNDEFINED` layout is not copied.
    ///
    /// # Safety
    /// `cmd` is a command buffer of this device in the recording state, on
    /// a queue family with transfer support; the prepared moves stay alive
    /// until the commands have completed, and nothing else uses the old
    /// resources meanwhile.
    pub unsafe fn cmd_record_moves(&self, cmd: vk::CommandBuffer, moves: &[PreparedMove]) {
        let refs: Vec<&PreparedMove> = moves.iter().collect();
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.cmd_record_moves_refs(cmd, &refs) }
    }

    /// [`Self::cmd_record_moves`] over references.
    ///
    /// # Safety
    /// As [`Self::cmd_record_moves`].
    unsafe fn cmd_record_moves_refs(&self, cmd: vk::CommandBuffer, moves: &[&PreparedMove]) {
        let device = self.device().raw();
        let mut before = Vec::new();
        let mut after = Vec::new();
        for p in moves {
            let Pair::Image { old, layout, new } = &p.pair else {
                continue;
            };
            if *layout == vk::ImageLayout::UNDEFINED {
                continue;
            }
            let range = vk::ImageSubresourceRange {
                aspect_mask: aspects(old.info().format),
                base_mip_level: 0,
                level_count: vk::REMAINING_MIP_LEVELS,
                base_array_layer: 0,
                layer_count: vk::REMAINING_ARRAY_LAYERS,
            };
            let barrier = vk::ImageMemoryBarrier::default()
                .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                .subresource_range(range);
            before.push(
                barrier
                    .image(old.raw())
                    .old_layout(*layout)
                    .new_layout(vk::ImageLayout::TRANSFER_SRC_OPTIMAL)
                    .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
                    .dst_access_mask(vk::AccessFlags::TRANSFER_READ),
            );
            before.push(
                barrier
                    .image(*new)
                    .old_layout(vk::ImageLayout::UNDEFINED)
                    .new_layout(vk::ImageLayout::TRANSFER_DST_OPTIMAL)
                    .src_access_mask(vk::AccessFlags::empty())
                    .dst_access_mask(vk::AccessFlags::TRANSFER_WRITE),
            );
            after.push(
                barrier
                    .image(*new)
                    .old_layout(vk::ImageLayout::TRANSFER_DST_OPTIMAL)
                    .new_layout(*layout)
                    .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
                    .dst_access_mask(vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE),
            );
        }
        let global_before = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
            .dst_access_mask(vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE);
        let global_after = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE);
        // SAFETY: the caller guarantees `cmd` is recording and every handle
        // named is live; the barriers name whole images, with the aspects of
        // their formats.
        unsafe {
            device.cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::ALL_COMMANDS,
                vk::PipelineStageFlags::TRANSFER,
                vk::DependencyFlags::empty(),
                &[global_before],
                &[],
                &before,
            );
        }
        for p in moves {
            match &p.pair {
                Pair::Buffer { old, new } => {
                    let region = vk::BufferCopy {
                        src_offset: 0,
                        dst_offset: 0,
                        size: old.size(),
                    };
                    // SAFETY: both buffers are live, have `size` bytes and
                    // transfer usages; `cmd` is recording.
                    unsafe { device.cmd_copy_buffer(cmd, old.raw(), *new, &[region]) };
                }
                Pair::Image { old, layout, new } if *layout != vk::ImageLayout::UNDEFINED => {
                    let info = old.info();
                    let aspect = aspects(info.format);
                    let regions: Vec<vk::ImageCopy> = (0..info.mip_levels)
                        .map(|mip| {
                            let layers = vk::ImageSubresourceLayers {
                                aspect_mask: aspect,
                                mip_level: mip,
                                base_array_layer: 0,
                                layer_count: info.array_layers,
                            };
                            vk::ImageCopy {
                                src_subresource: layers,
                                src_offset: vk::Offset3D::default(),
                                dst_subresource: layers,
                                dst_offset: vk::Offset3D::default(),
                                extent: vk::Extent3D {
                                    width: (info.extent.width >> mip).max(1),
                                    height: (info.extent.height >> mip).max(1),
                                    depth: (info.extent.depth >> mip).max(1),
                                },
                            }
                        })
                        .collect();
                    // SAFETY: two images of one create info, in the layouts
                    // the barrier above set; each region is a whole mip level.
                    unsafe {
                        device.cmd_copy_image(
                            cmd,
                            old.raw(),
                            vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
                            *new,
                            vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                            &regions,
                        )
                    };
                }
                Pair::Image { .. } => {}
            }
        }
        // SAFETY: as for the first barrier.
        unsafe {
            device.cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::TRANSFER,
                vk::PipelineStageFlags::ALL_COMMANDS,
                vk::DependencyFlags::empty(),
                &[global_after],
                &[],
                &after,
            );
        }
    }

    /// Commits a prepared move whose copy has completed: the old resource is
    /// destroyed (its memory is freed when the pass ends) and the new one
    /// comes back, bound to the new allocation (for an image, in the old
    /// one's layout).
    ///
    /// # Safety
    /// The copy recorded by [`Self::cmd_record_moves`] has completed, and the
    /// device no longer uses the old resource.
    ///
    /// # Errors
    /// What [`Defragmentation::commit`] refused: the new resource is
    /// destroyed, and the move and the old resource come back.
    pub unsafe fn finish_move(
        &self,
        defrag: &mut Defragmentation,
        prepared: PreparedMove,
    ) -> Result<Movable, MoveError> {
        let device = self.device().raw();
        let PreparedMove { mv, pair } = prepared;
        let refused = |e: crate::CommitError, rebuild: &dyn Fn(crate::Allocation) -> Movable| {
            let kind = e.kind;
            let (mv, a) = e.into_parts();
            MoveError {
                error: Error::InvalidMove(match kind {
                    crate::CommitErrorKind::SourceFreed => "the move's source was freed",
                    crate::CommitErrorKind::StalePass => "the move's pass has ended",
                    _ => "the resource is not the move's source",
                }),
                parts: Box::new((mv, rebuild(a))),
            }
        };
        match pair {
            Pair::Buffer { old, new } => {
                let (size, usage) = (old.size(), old.usage());
                let (old_raw, old_allocation) = old.into_raw_parts();
                let wrap = |raw, a| {
                    let b = Buffer::new(raw, a, size);
                    match usage {
                        Some(u) => b.with_usage(u),
                        None => b,
                    }
                };
                match defrag.commit(self, mv, old_allocation) {
                    Ok(a) => {
                        // SAFETY: the caller guarantees the device is done
                        // with the old buffer.
                        unsafe { device.destroy_buffer(old_raw, None) };
                        Ok(Movable::Buffer(wrap(new, a)))
                    }
                    Err(e) => {
                        // SAFETY: the new buffer holds nothing anyone needs.
                        unsafe { device.destroy_buffer(new, None) };
                        Err(refused(e, &|a| Movable::Buffer(wrap(old_raw, a))))
                    }
                }
            }
            Pair::Image { old, layout, new } => {
                let info = old.info().create_info();
                let (old_raw, old_allocation) = old.into_raw_parts();
                match defrag.commit(self, mv, old_allocation) {
                    Ok(a) => {
                        // SAFETY: the caller guarantees the device is done
                        // with the old image.
                        unsafe { device.destroy_image(old_raw, None) };
                        Ok(Movable::Image {
                            image: Image::new(new, a, &info),
                            layout,
                        })
                    }
                    Err(e) => {
                        // SAFETY: the new image holds nothing anyone needs.
                        unsafe { device.destroy_image(new, None) };
                        Err(refused(e, &|a| Movable::Image {
                            image: Image::new(old_raw, a, &info),
                            layout,
                        }))
                    }
                }
            }
        }
    }

    /// Performs moves on `queue`: prepares each, records every copy in one
    /// command buffer from a transient pool of `queue_family`, submits,
    /// waits, and finishes each. Returns the resources in the order given
    /// (moved, or for the moves that failed, unmoved, their moves dropped
    /// and so cancelled). End the pass afterwards.
    ///
    /// # Safety
    /// `queue` is a queue of this device in `queue_family` (with transfer
    /// support) that no other thread uses during the call; every resource
    /// is live and the device is done writing it (earlier submissions that
    /// write them have completed or come before on this queue).
    ///
    /// # Errors
    /// [`Error::Vulkan`] when the command pool, command buffer, fence,
    /// submission or wait fails; then no move is committed and every
    /// resource comes back unmoved in the error's list.
    pub unsafe fn perform_moves(
        &self,
        defrag: &mut Defragmentation,
        queue: vk::Queue,
        queue_family: u32,
        moves: Vec<(Move, Movable)>,
    ) -> Result<Vec<Movable>, (Error, Vec<Movable>)> {
        let mut prepared: Vec<Result<PreparedMove, Movable>> = Vec::new();
        for (mv, old) in moves {
            // SAFETY: the caller guarantees every resource is live.
            prepared.push(match unsafe { self.prepare_move(mv, old) } {
                Ok(p) => Ok(p),
                Err(e) => Err(e.parts.1),
            });
        }
        let ready: Vec<&PreparedMove> = prepared.iter().filter_map(|p| p.as_ref().ok()).collect();
        let submitted = if ready.is_empty() {
            Ok(())
        } else {
            // SAFETY: the caller guarantees the queue is ours for the call
            // and the resources are live and idle.
            unsafe { self.submit_and_wait(queue, queue_family, &prepared) }
        };
        if let Err(error) = submitted {
            let back = prepared
                .into_iter()
                .map(|p| match p {
                    Ok(p) => self.unprepare(p),
                    Err(old) => old,
                })
                .collect();
            return Err((error, back));
        }
        Ok(prepared
            .into_iter()
            .map(|p| match p {
                // SAFETY: the copies completed (waited for above).
                Ok(p) => match unsafe { self.finish_move(defrag, p) } {
                    Ok(moved) => moved,
                    Err(e) => e.parts.1,
                },
                Err(old) => old,
            })
            .collect())
    }

    /// Gives a prepared move up: destroys its new resource and hands the old
    /// one back, still bound where it was; the move is cancelled (its
    /// destination is freed when the pass ends). For a caller of the
    /// three-step path whose copy will not run (its submission failed):
    /// [`Self::finish_move`] needs the copy done, and dropping a
    /// [`PreparedMove`] leaks both resources.
    ///
    /// # Safety
    /// `prepared` came from this allocator's [`Self::prepare_move`], and no
    /// command buffer the device may still execute uses its new resource.
    pub unsafe fn cancel_move(&self, prepared: PreparedMove) -> Movable {
        self.unprepare(prepared)
    }

    /// Destroys a prepared move's new resource and gives the old one back
    /// (the move is dropped, so cancelled).
    fn unprepare(&self, prepared: PreparedMove) -> Movable {
        let device = self.device().raw();
        match prepared.pair {
            Pair::Buffer { old, new } => {
                // SAFETY: the new buffer was never used by a pending submission.
                unsafe { device.destroy_buffer(new, None) };
                Movable::Buffer(old)
            }
            Pair::Image { old, layout, new } => {
                // SAFETY: as above.
                unsafe { device.destroy_image(new, None) };
                Movable::Image { image: old, layout }
            }
        }
    }

    /// # Safety
    /// As [`Self::perform_moves`].
    unsafe fn submit_and_wait(
        &self,
        queue: vk::Queue,
        queue_family: u32,
        prepared: &[Result<PreparedMove, Movable>],
    ) -> Result<(), Error> {
        let device = self.device().raw();
        let pool_info = vk::CommandPoolCreateInfo::default()
            .flags(vk::CommandPoolCreateFlags::TRANSIENT)
            .queue_family_index(queue_family);
        // SAFETY: a valid create info for this device.
        let pool = unsafe { device.create_command_pool(&pool_info, None) }
            .map_err(vulkan("vkCreateCommandPool"))?;
        let result = (|| {
            let alloc = vk::CommandBufferAllocateInfo::default()
                .command_pool(pool)
                .level(vk::CommandBufferLevel::PRIMARY)
                .command_buffer_count(1);
            // SAFETY: the pool is ours alone.
            let cmd = unsafe { device.allocate_command_buffers(&alloc) }
                .map_err(vulkan("vkAllocateCommandBuffers"))?[0];
            let begin = vk::CommandBufferBeginInfo::default()
                .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
            // SAFETY: `cmd` is fresh.
            unsafe { device.begin_command_buffer(cmd, &begin) }
                .map_err(vulkan("vkBeginCommandBuffer"))?;
            let ready: Vec<&PreparedMove> =
                prepared.iter().filter_map(|p| p.as_ref().ok()).collect();
            // SAFETY: `cmd` is recording on `queue_family`; the caller
            // guarantees the resources are live and idle; we wait below.
            unsafe { self.cmd_record_moves_refs(cmd, &ready) };
            // SAFETY: `cmd` is recording.
            unsafe { device.end_command_buffer(cmd) }.map_err(vulkan("vkEndCommandBuffer"))?;
            // SAFETY: a valid create info.
            let fence = unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }
                .map_err(vulkan("vkCreateFence"))?;
            let cmds = [cmd];
            let submit = vk::SubmitInfo::default().command_buffers(&cmds);
            // SAFETY: the caller guarantees the queue is ours; the command
            // buffer is executable; the fence is new and waited for before
            // it is destroyed.
            let done = unsafe {
                device
                    .queue_submit(queue, &[submit], fence)
                    .map_err(vulkan("vkQueueSubmit"))
                    .and_then(|()| {
                        device
                            .wait_for_fences(&[fence], true, u64::MAX)
                            .map_err(vulkan("vkWaitForFences"))
                    })
            };
            if done.is_err() {
                // SAFETY: on a failed submission or wait the device may still
                // run the work: wait for the whole device before destroying.
                let _ = unsafe { device.device_wait_idle() };
            }
            // SAFETY: the fence is signalled or the device idle.
            unsafe { device.destroy_fence(fence, None) };
            done
        })();
        // SAFETY: the command buffer has completed (waited for above).
        unsafe { device.destroy_command_pool(pool, None) };
        result
    }
}

/// A resource bound on a member of an [`AliasGroup`]. It does not own
/// memory: destroy it with [`Allocator::destroy_aliased_image`] /
/// [`Allocator::destroy_aliased_buffer`] before freeing the group.
#[derive(Debug)]
#[must_use = "an aliased resource dropped without being destroyed leaks its handle"]
pub struct Aliased<T> {
    raw: T,
    member: usize,
    /// The allocator (and so the device) it was made by.
    allocator: u32,
}

impl<T: Copy> Aliased<T> {
    /// The handle.
    pub fn raw(&self) -> T {
        self.raw
    }

    /// The member of the group it is bound on.
    pub fn member(&self) -> usize {
        self.member
    }
}

impl Allocator<AshDevice> {
    /// The alias requirement of an image: its memory requirements (read
    /// from `info` where the device has Vulkan 1.3 or `VK_KHR_maintenance4`,
    /// from a throwaway image made with `info` otherwise; see
    /// [`Self::image_requirements`]) and its lifetime.
    ///
    /// # Safety
    /// `info` is a valid `VkImageCreateInfo` for this device.
    ///
    /// # Errors
    /// [`Error::Vulkan`] if creating the throwaway image fails;
    /// [`Error::InvalidAlias`] where the driver requires the image to have
    /// memory of its own; [`Error::NotEnabled`] for a `DISJOINT` image.
    pub unsafe fn image_alias_requirement<'a>(
        &self,
        info: &vk::ImageCreateInfo<'_>,
        lifetime: PassInterval,
        tag: &'a str,
    ) -> Result<AliasRequirement<'a>, Error> {
        // SAFETY: the caller guarantees `info` is valid.
        let r = unsafe { requirements::of_image_info(self.device(), info) }?;
        let r = alias_only(&r)?;
        Ok(AliasRequirement {
            size: r.size,
            alignment: r.alignment,
            memory_type_bits: r.memory_type_bits,
            kind: if info.tiling == vk::ImageTiling::LINEAR {
                ResourceKind::LinearImage
            } else {
                ResourceKind::OptimalImage
            },
            lifetime,
            tag,
        })
    }

    /// The alias requirement of a buffer; see [`Self::image_alias_requirement`].
    ///
    /// # Safety
    /// `info` is a valid `VkBufferCreateInfo` for this device.
    ///
    /// # Errors
    /// [`Error::Vulkan`] if creating the throwaway buffer fails;
    /// [`Error::InvalidAlias`] where the driver requires the buffer to have
    /// memory of its own.
    pub unsafe fn buffer_alias_requirement<'a>(
        &self,
        info: &vk::BufferCreateInfo<'_>,
        lifetime: PassInterval,
        tag: &'a str,
    ) -> Result<AliasRequirement<'a>, Error> {
        // SAFETY: the caller guarantees `info` is valid.
        let r = unsafe { requirements::of_buffer_info(self.device(), info) }?;
        let r = alias_only(&r)?;
        Ok(AliasRequirement {
            size: r.size,
            alignment: r.alignment,
            memory_type_bits: r.memory_type_bits,
            kind: ResourceKind::Buffer,
            lifetime,
            tag,
        })
    }

    /// Creates an image and binds it on member `member` of `group`.
    ///
    /// The memory is shared: after another member was used, the image's
    /// contents are undefined; its first use is a barrier from `UNDEFINED`.
    ///
    /// # Safety
    /// `info` is a valid `VkImageCreateInfo` for this device; the group
    /// outlives the image.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`] when another allocator made the group;
    /// [`Error::InvalidAlias`] when the image's requirements do not fit the
    /// member (size, alignment, memory type) or the driver requires it to
    /// have memory of its own; [`Error::Vulkan`] if creating
    /// or binding fails. Nothing is left behind.
    pub unsafe fn create_aliased_image(
        &self,
        group: &AliasGroup,
        member: usize,
        info: &vk::ImageCreateInfo<'_>,
    ) -> Result<Aliased<vk::Image>, Error> {
        if !self.owns(group.allocation()) {
            return Err(Error::ForeignAllocation);
        }
        let device = self.device().raw();
        // SAFETY: the caller guarantees `info` is valid.
        let image = unsafe { device.create_image(info, None) }.map_err(vulkan("vkCreateImage"))?;
        // SAFETY: `image` is live and unbound.
        let r = unsafe { aliasable(device, Resource::Image(image)) };
        let bound = r
            .and_then(|r| alias_place(group, member, &r))
            .and_then(|(memory, offset)| {
                // SAFETY: the member's range has room and alignment for the
                // image's requirements (checked), in an allowed memory type.
                unsafe { device.bind_image_memory(image, memory, offset) }
                    .map_err(vulkan("vkBindImageMemory"))
            });
        if let Err(e) = bound {
            // SAFETY: unused.
            unsafe { device.destroy_image(image, None) };
            return Err(e);
        }
        Ok(Aliased {
            raw: image,
            member,
            allocator: self.id,
        })
    }

    /// Creates a buffer and binds it on member `member` of `group`; see
    /// [`Self::create_aliased_image`].
    ///
    /// # Safety
    /// `info` is a valid `VkBufferCreateInfo` for this device; the group
    /// outlives the buffer.
    ///
    /// # Errors
    /// As [`Self::create_aliased_image`].
    pub unsafe fn create_aliased_buffer(
        &self,
        group: &AliasGroup,
        member: usize,
        info: &vk::BufferCreateInfo<'_>,
    ) -> Result<Aliased<vk::Buffer>, Error> {
        if !self.owns(group.allocation()) {
            return Err(Error::ForeignAllocation);
        }
        let device = self.device().raw();
        // SAFETY: the caller guarantees `info` is valid.
        let buffer =
            unsafe { device.create_buffer(info, None) }.map_err(vulkan("vkCreateBuffer"))?;
        // SAFETY: `buffer` is live and unbound.
        let r = unsafe { aliasable(device, Resource::Buffer(buffer)) };
        let bound = r
            .and_then(|r| alias_place(group, member, &r))
            .and_then(|(memory, offset)| {
                // SAFETY: as for images.
                unsafe { device.bind_buffer_memory(buffer, memory, offset) }
                    .map_err(vulkan("vkBindBufferMemory"))
            });
        if let Err(e) = bound {
            // SAFETY: unused.
            unsafe { device.destroy_buffer(buffer, None) };
            return Err(e);
        }
        Ok(Aliased {
            raw: buffer,
            member,
            allocator: self.id,
        })
    }

    /// Destroys an aliased image (its memory stays with the group).
    ///
    /// # Safety
    /// The device no longer uses the image, and no view of it is left.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`] if another allocator made it: the image
    /// comes back untouched (destroy it there).
    pub unsafe fn destroy_aliased_image(
        &self,
        image: Aliased<vk::Image>,
    ) -> Result<(), DestroyError<Aliased<vk::Image>>> {
        if image.allocator != self.id {
            return Err(DestroyError::new(Error::ForeignAllocation, image));
        }
        // SAFETY: the caller guarantees the device is done with it; this
        // allocator's device made it.
        unsafe { self.device().raw().destroy_image(image.raw, None) };
        Ok(())
    }

    /// Destroys an aliased buffer (its memory stays with the group).
    ///
    /// # Safety
    /// The device no longer uses the buffer.
    ///
    /// # Errors
    /// As [`Self::destroy_aliased_image`].
    pub unsafe fn destroy_aliased_buffer(
        &self,
        buffer: Aliased<vk::Buffer>,
    ) -> Result<(), DestroyError<Aliased<vk::Buffer>>> {
        if buffer.allocator != self.id {
            return Err(DestroyError::new(Error::ForeignAllocation, buffer));
        }
        // SAFETY: as above.
        unsafe { self.device().raw().destroy_buffer(buffer.raw, None) };
        Ok(())
    }
}

/// A resource whose memory requirements [`aliasable`] reads.
#[derive(Clone, Copy)]
enum Resource {
    Buffer(vk::Buffer),
    Image(vk::Image),
}

/// A resource's memory requirements, or [`Error::InvalidAlias`] where the
/// driver requires it to have memory of its own (`requiresDedicatedAllocation`):
/// such a resource can't share an alias group's allocation.
///
/// # Safety
/// The resource is a live resource of `device`.
unsafe fn aliasable(
    device: &ash::Device,
    resource: Resource,
) -> Result<vk::MemoryRequirements, Error> {
    let mut dedicated = vk::MemoryDedicatedRequirements::default();
    let mut requirements = vk::MemoryRequirements2::default().push_next(&mut dedicated);
    match resource {
        Resource::Buffer(buffer) => {
            let info = vk::BufferMemoryRequirementsInfo2::default().buffer(buffer);
            // SAFETY: the caller guarantees the buffer is live on `device`.
            unsafe { device.get_buffer_memory_requirements2(&info, &mut requirements) };
        }
        Resource::Image(image) => {
            let info = vk::ImageMemoryRequirementsInfo2::default().image(image);
            // SAFETY: the caller guarantees the image is live on `device`.
            unsafe { device.get_image_memory_requirements2(&info, &mut requirements) };
        }
    }
    let r = requirements.memory_requirements;
    if dedicated.requires_dedicated_allocation == vk::TRUE {
        return Err(Error::InvalidAlias(
            "the driver requires this resource to have memory of its own: it can't be aliased",
        ));
    }
    Ok(r)
}

/// Requirements read from a create info, or [`Error::InvalidAlias`] where
/// the driver requires the resource to have memory of its own (as
/// [`aliasable`] for a created resource).
fn alias_only(r: &requirements::Requirements) -> Result<vk::MemoryRequirements, Error> {
    if r.dedicated == crate::DriverDedicated::Required {
        return Err(Error::InvalidAlias(
            "the driver requires this resource to have memory of its own: it can't be aliased",
        ));
    }
    Ok(r.memory)
}

/// Where member `member` of `group` binds a resource with requirements `r`.
fn alias_place(
    group: &AliasGroup,
    member: usize,
    r: &vk::MemoryRequirements,
) -> Result<(vk::DeviceMemory, u64), Error> {
    let m = group
        .member(member)
        .ok_or(Error::InvalidAlias("no such member in the group"))?;
    let a = group.allocation();
    let offset = a.offset() + m.offset;
    if r.size > m.size {
        return Err(Error::InvalidAlias(
            "the resource is larger than its member",
        ));
    }
    if r.alignment > 1 && offset % r.alignment != 0 {
        return Err(Error::InvalidAlias(
            "the member's offset is not aligned as the resource requires",
        ));
    }
    if r.memory_type_bits & (1 << a.memory_type()) == 0 {
        return Err(Error::InvalidAlias(
            "the resource can't live in the group's memory type",
        ));
    }
    Ok((a.vk_memory(), offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ycbcr_formats_are_told_apart() {
        for f in [
            vk::Format::G8B8G8R8_422_UNORM,
            vk::Format::G8_B8R8_2PLANE_420_UNORM,
            vk::Format::G8_B8_R8_3PLANE_420_UNORM,
            vk::Format::G16_B16_R16_3PLANE_444_UNORM,
            vk::Format::G8_B8R8_2PLANE_444_UNORM,
            vk::Format::G16_B16R16_2PLANE_444_UNORM,
        ] {
            assert!(ycbcr(f), "{f:?}");
        }
        for f in [
            vk::Format::R8G8B8A8_UNORM,
            vk::Format::BC7_SRGB_BLOCK,
            vk::Format::D32_SFLOAT_S8_UINT,
            vk::Format::A4R4G4B4_UNORM_PACK16,
        ] {
            assert!(!ycbcr(f), "{f:?}");
        }
    }
}
