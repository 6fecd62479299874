//! The mechanism: carries out the policy's replacements on the GPU.
//!
//! A replacement allocates the new image in the texture pool (TLSF, hard budget),
//! reads the levels the old image lacks from the KTX2 file on worker threads
//! straight into mapped staging memory from the ring pool, and records one
//! command buffer per frame's batch: the levels both images hold are copied image
//! to image on the GPU, the others from staging.
//!
//! Uploads go on the transfer-only queue where the device has one
//! (`--upload-queue auto`, the default, or `transfer`), else on the graphics
//! queue. On the graphics queue, one command buffer per batch does everything,
//! submitted before the frame. With a transfer queue, a batch is two
//! submissions: the copies from staging on the transfer queue, ending with the
//! queue-family ownership releases of the new images and a binary semaphore
//! signal; then, on the graphics queue, a command buffer that waits for the
//! semaphore, acquires the images, copies the levels that stay from the old
//! images (which stay with the graphics family: see [`crate::gpu::ownership`]
//! for every barrier and why) and makes the new images sampled. The slot's fence
//! goes with the graphics submission, which completes only after the semaphore
//! wait, so after the transfer queue's work too: the slot's command buffers,
//! semaphore and staging are reused or freed only once it has signalled.
//!
//! Either way the graphics command buffer's last barrier orders the copies
//! before every later fragment-shader read on the graphics queue (a barrier's
//! second scope covers later submissions; on the transfer path it chains with the
//! acquire and the semaphore wait), so the descriptor is swapped at once and the
//! frame that follows already samples the new image once the copies are
//! complete, without a frame of latency. The old image (read by the copies and by
//! the frame before) is kept with the batch and freed when the frame that
//! follows it is done: its memory goes to the allocator's [`FreeQueue`] (frees
//! ordered by GPU progress) with the index of the frame being prepared, and its
//! image and view handles wait beside it for the same index. The streamer
//! collects both at the start of each frame with the index of the last frame
//! done (the renderer waits for every frame's fence, and the batch was submitted
//! before its frame). Staging buffers are freed when their batch's fence has
//! signalled, in submission order, as the ring needs.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Instant;

use ash::vk;
use material_baker::ktx2::Reader;

use crate::gpu::memory::{MappedBuffer, MemOptions, MemoryUsage};
use crate::gpu::ownership::{self, BatchImage, UploadBarriers, UploadFamilies};
use crate::gpu::util::transition;
use crate::gpu::{Context, GpuError, GpuMemory, VkCheck};
use crate::materials::textures::{texture_image_info, Texture, TextureSet};
use vkalloc::FreeQueue;

/// Sizes of one texture's file and images.
#[derive(Clone, Debug)]
pub struct TexInfo {
    /// The KTX2 file.
    pub path: PathBuf,
    /// The image format.
    pub format: vk::Format,
    /// Level 0's side.
    pub size: u32,
    /// Levels in the file.
    pub levels: u32,
    /// The tail's first level.
    pub tail: u32,
    /// File bytes of each level.
    pub level_bytes: Vec<u64>,
    /// Memory bytes of a main image with base `b`, for `b` in `0..tail`.
    pub main_bytes: Vec<u64>,
}

impl TexInfo {
    /// Reads `t`'s file header and asks the device for every main image's size.
    pub fn new(d: &ash::Device, t: &Texture, tail: u32) -> Result<Self, GpuError> {
        let r = Reader::open(&t.path).map_err(|e| GpuError::Other(e.to_string()))?;
        let levels = r.levels.len() as u32;
        let level_bytes: Vec<u64> = r.levels.iter().map(|l| l.length).collect();
        let main_bytes = (0..tail.min(levels))
            .map(|b| {
                let info = texture_image_info(t.format, (r.width >> b).max(1), levels - b);
                let req = vk::DeviceImageMemoryRequirements::default().create_info(&info);
                let mut out = vk::MemoryRequirements2::default();
                // SAFETY: a valid create info; a plain query (Vulkan 1.3 core).
                unsafe { d.get_device_image_memory_requirements(&req, &mut out) };
                out.memory_requirements.size
            })
            .collect();
        Ok(Self {
            path: t.path.clone(),
            format: t.format,
            size: r.width,
            levels,
            tail: tail.min(levels),
            level_bytes,
            main_bytes,
        })
    }
}

/// A replacement whose copies are submitted.
pub struct Op {
    /// The texture.
    pub texture: usize,
    /// Its first level before.
    pub from: u32,
    /// Its first level after.
    pub to: u32,
    /// The new main image.
    pub new: Texture,
}

struct Batch {
    staging: Vec<MappedBuffer>,
    /// Bytes copied from staging (timed by the slot's two timestamps, if any).
    upload_bytes: u64,
}

/// Timestamps around each batch's copies from staging: two per slot.
struct Stamps {
    pool: vk::QueryPool,
    /// Nanoseconds per tick.
    period: f64,
    /// Mask of the valid bits of the queue family that writes them.
    mask: u64,
}

/// GPU time of the copies from staging of the batches completed since the last
/// [`Mechanism::take_gpu_uploads`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GpuUploads {
    /// Bytes copied from staging.
    pub bytes: u64,
    /// Milliseconds the upload queue spent on them (from its first timestamp to
    /// its last, per batch).
    pub ms: f64,
}

struct Slot {
    /// On the graphics queue.
    cmd: vk::CommandBuffer,
    /// Signalled by the batch's graphics submission.
    fence: vk::Fence,
    /// With a separate upload submission: its command buffer (from the upload
    /// family's pool) and the semaphore the graphics submission waits for.
    upload: Option<(vk::CommandBuffer, vk::Semaphore)>,
    batch: Option<Batch>,
}

/// The upload queue of the transfer path.
struct UploadQueue {
    families: UploadFamilies,
    queue: vk::Queue,
    pool: vk::CommandPool,
}

/// What one [`Mechanism::start`] did.
#[derive(Default)]
pub struct Started {
    /// Replacements submitted: swap their descriptors, then [`Mechanism::retire`]
    /// the old images.
    pub ops: Vec<Op>,
    /// Textures whose new image could not be placed this frame (pool full or
    /// fragmented, ring full): they stay as they are and the policy tries later.
    pub deferred: Vec<usize>,
    /// Textures whose file could not be read: (texture, message).
    pub failed: Vec<(usize, String)>,
    /// New images whose allocation failed although the texture pool had the
    /// bytes free (in its blocks or under its budget): fragmentation.
    pub fragmentation_failures: u32,
    /// New images not attempted because no free range of the pool held them
    /// although it had the bytes free (fragmentation; they wait).
    pub fragmentation_deferrals: u32,
    /// Bytes of the first image deferred for fragmentation (the most wanted:
    /// replacements come in the policy's order); 0 when none.
    pub first_deferred_bytes: u64,
    /// File bytes read into staging.
    pub upload_bytes: u64,
    /// Seconds spent reading them (wall clock, all threads).
    pub read_seconds: f64,
}

/// Command buffers, fences and the batches in flight.
pub struct Mechanism {
    pool: vk::CommandPool,
    /// The transfer path's queue; `None`: one graphics command buffer per batch.
    upload: Option<UploadQueue>,
    slots: Vec<Slot>,
    order: VecDeque<usize>,
    threads: usize,
    /// Old images' memory, freed once the GPU is done with the frame they were
    /// retired in (values are 1-based frame indices).
    frees: FreeQueue,
    /// Their image and view handles, destroyed at the same point: (frame, view, image).
    handles: Vec<(u64, vk::ImageView, vk::Image)>,
    /// Timestamps, where the queue recording the copies from staging has them and
    /// queries can be reset from the host.
    stamps: Option<Stamps>,
    gpu_uploads: GpuUploads,
    /// Reads of files whose path contains this fail (`--tune fail-reads`,
    /// for testing the fallback of a level that cannot be read).
    fail_reads: Option<String>,
}

const SLOTS: usize = 3;

impl Mechanism {
    /// Creates the command pools and the batch slots (with the upload queue's
    /// command buffers and semaphores on the transfer path).
    pub fn new(ctx: &Context, fail_reads: Option<String>) -> Result<Self, GpuError> {
        let d = &ctx.device;
        let mut m = Self {
            pool: command_pool(d, ctx.queue_family)?,
            upload: None,
            slots: Vec::new(),
            order: VecDeque::new(),
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .clamp(1, 8),
            frees: FreeQueue::new(),
            handles: Vec::new(),
            stamps: None,
            gpu_uploads: GpuUploads::default(),
            fail_reads,
        };
        // From here on, a failure destroys what was made (`destroy_objects`).
        let made = m.make_slots(ctx).and_then(|()| m.make_stamps(ctx));
        match made {
            Ok(()) => Ok(m),
            Err(e) => {
                m.destroy_objects(d);
                Err(e)
            }
        }
    }

    /// The upload queue's pool where the device has one, and the batch slots:
    /// a command buffer and a fence each, and on the transfer path the
    /// upload queue's command buffer and a semaphore.
    fn make_slots(&mut self, ctx: &Context) -> Result<(), GpuError> {
        let d = &ctx.device;
        if let Some(u) = ctx.upload {
            self.upload = Some(UploadQueue {
                families: UploadFamilies {
                    graphics: ctx.queue_family,
                    upload: u.family,
                },
                queue: u.queue,
                pool: command_pool(d, u.family)?,
            });
        }
        // SAFETY: the pool was made on this device and lives.
        let cmds = unsafe { slot_buffers(d, self.pool) }?;
        let upload_cmds = match &self.upload {
            // SAFETY: as above.
            Some(u) => Some(unsafe { slot_buffers(d, u.pool) }?),
            None => None,
        };
        for (k, cmd) in cmds.into_iter().enumerate() {
            // SAFETY: valid create infos on a live device.
            let fence = unsafe { d.create_fence(&vk::FenceCreateInfo::default(), None) }
                .check("vkCreateFence")?;
            self.slots.push(Slot {
                cmd,
                fence,
                upload: None,
                batch: None,
            });
            if let Some(up) = &upload_cmds {
                // SAFETY: as above.
                let semaphore =
                    unsafe { d.create_semaphore(&vk::SemaphoreCreateInfo::default(), None) }
                        .check("vkCreateSemaphore")?;
                self.slots[k].upload = Some((up[k], semaphore));
            }
        }
        Ok(())
    }

    /// The timestamp queries, two per slot, where the queue recording the
    /// copies from staging has timestamps and queries can be reset from the
    /// host.
    fn make_stamps(&mut self, ctx: &Context) -> Result<(), GpuError> {
        let d = &ctx.device;
        let (timestamps, family) = match ctx.upload {
            Some(u) => (u.timestamps, u.family),
            None => (ctx.info.timestamps, ctx.queue_family),
        };
        if timestamps && ctx.info.host_query_reset {
            // SAFETY: plain query.
            let families = unsafe {
                ctx.instance
                    .get_physical_device_queue_family_properties(ctx.physical_device)
            };
            let bits = families
                .get(family as usize)
                .map_or(0, |f| f.timestamp_valid_bits);
            // SAFETY: a valid create info on a live device.
            let pool = unsafe {
                d.create_query_pool(
                    &vk::QueryPoolCreateInfo::default()
                        .query_type(vk::QueryType::TIMESTAMP)
                        .query_count(2 * SLOTS as u32),
                    None,
                )
            }
            .check("vkCreateQueryPool")?;
            self.stamps = Some(Stamps {
                pool,
                period: f64::from(ctx.info.timestamp_period),
                mask: if bits >= 64 {
                    u64::MAX
                } else {
                    (1u64 << bits) - 1
                },
            });
        }
        Ok(())
    }

    /// Bytes of old images waiting for the GPU to be done with them.
    pub fn retiring_bytes(&self) -> u64 {
        self.frees.pending_bytes()
    }

    /// Batches not yet known complete.
    pub fn in_flight(&self) -> usize {
        self.order.len()
    }

    /// Frees `old` once the GPU is done with frame `frame` (1-based), the last
    /// one that reads it (directly, or through a batch submitted before it).
    /// It is pinned against defragmentation meanwhile.
    pub fn retire(&mut self, mem: &GpuMemory, old: Texture, frame: u64) {
        if let Err(e) = mem.allocator().set_movable(old.image.allocation(), false) {
            log::warn!("streaming: pinning a retired image: {e}");
        }
        let (image, allocation) = old.image.into_raw_parts();
        self.handles.push((frame, old.view, image));
        self.frees.free_after(allocation, frame);
    }

    /// Frees the old images of every frame up to `done` (1-based), which the
    /// GPU has finished.
    pub fn collect_retired(&mut self, d: &ash::Device, mem: &GpuMemory, done: u64) {
        self.handles.retain(|&(frame, view, image)| {
            if frame > done {
                return true;
            }
            // SAFETY: the GPU finished frame `frame`, the last work that used them.
            unsafe {
                d.destroy_image_view(view, None);
                d.destroy_image(image, None);
            }
            false
        });
        mem.collect_frees(&self.frees, Some(done));
    }

    /// The GPU time of the copies from staging of the batches completed since the
    /// last call (on the upload queue where there is one, else on the graphics
    /// queue); zero where the queue has no timestamps.
    pub fn take_gpu_uploads(&mut self) -> GpuUploads {
        std::mem::take(&mut self.gpu_uploads)
    }

    /// Whether a batch can be started now.
    pub fn has_free_slot(&self) -> bool {
        self.slots.iter().any(|s| s.batch.is_none())
    }

    /// Frees what finished batches hold, oldest first, stopping at the first
    /// unfinished one (so staging is freed in ring order).
    pub fn poll(&mut self, ctx: &Context, mem: &GpuMemory) -> Result<(), GpuError> {
        self.collect(ctx, mem, false)
    }

    fn collect(&mut self, ctx: &Context, mem: &GpuMemory, wait: bool) -> Result<(), GpuError> {
        let d = &ctx.device;
        while let Some(&i) = self.order.front() {
            let slot = &mut self.slots[i];
            // SAFETY: the fence is live; it was submitted with the batch.
            let signalled = unsafe {
                if wait {
                    d.wait_for_fences(&[slot.fence], true, u64::MAX)
                        .check("vkWaitForFences")?;
                    true
                } else {
                    d.get_fence_status(slot.fence).check("vkGetFenceStatus")?
                }
            };
            if !signalled {
                break;
            }
            self.order.pop_front();
            // SAFETY: the batch finished; its fence is reset before reuse.
            unsafe { d.reset_fences(&[slot.fence]).check("vkResetFences")? };
            if let Some(batch) = slot.batch.take() {
                if let (Some(st), true) = (&self.stamps, batch.upload_bytes > 0) {
                    let mut t = [0u64; 2];
                    // SAFETY: the batch's fence signalled: both queries were written.
                    let ok = unsafe {
                        d.get_query_pool_results(
                            st.pool,
                            2 * i as u32,
                            &mut t,
                            vk::QueryResultFlags::TYPE_64,
                        )
                    };
                    if ok.is_ok() {
                        let ticks = t[1].wrapping_sub(t[0]) & st.mask;
                        self.gpu_uploads.bytes += batch.upload_bytes;
                        self.gpu_uploads.ms += ticks as f64 * st.period / 1e6;
                    }
                }
                for b in batch.staging {
                    // SAFETY: the copies reading it finished.
                    unsafe { mem.destroy_buffer(b) };
                }
            }
        }
        Ok(())
    }

    /// Waits for every batch and frees what they hold and every retired image:
    /// at teardown (the device is idle), and between the pre-fill's rounds
    /// (before the first frame: only the batches waited for here read the old
    /// images).
    pub fn finish(&mut self, ctx: &Context, mem: &GpuMemory) -> Result<(), GpuError> {
        let r = self.collect(ctx, mem, true);
        self.collect_retired(&ctx.device, mem, u64::MAX);
        mem.collect_frees(&self.frees, None);
        r
    }

    /// Starts `replaces` (texture, from, to) as one batch. `mains` are the
    /// current main images; the tails are `set.textures`.
    pub fn start(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        set: &TextureSet,
        infos: &[TexInfo],
        mains: &[Option<Texture>],
        replaces: &[(usize, u32, u32)],
    ) -> Result<Started, GpuError> {
        let d = &ctx.device;
        let mut result = Started::default();
        let Some(slot_index) = self.slots.iter().position(|s| s.batch.is_none()) else {
            result.deferred = replaces.iter().map(|r| r.0).collect();
            return Ok(result);
        };
        let mut staging: Vec<MappedBuffer> = Vec::new();
        let mut planned = plan_batch(ctx, mem, set, infos, replaces, &mut staging, &mut result)?;

        // Read every level on worker threads, straight into the mapped staging.
        let started = Instant::now();
        self.read_batch(infos, &mut planned, &mut staging, &mut result);
        result.read_seconds = started.elapsed().as_secs_f64();
        for b in &staging {
            mem.flush(b.allocation());
        }
        let mut ops = Vec::new();
        for p in planned {
            if p.ok {
                result.upload_bytes += p
                    .uploads
                    .iter()
                    .map(|&(l, _)| infos[p.texture].level_bytes[l as usize])
                    .sum::<u64>();
                ops.push(p);
            } else {
                TextureSet::free_texture(d, mem, p.new);
            }
        }
        if ops.is_empty() && staging.is_empty() {
            return Ok(result);
        }

        // Timestamps around the copies from staging, on whichever queue records them.
        let stamps = self
            .stamps
            .as_ref()
            .filter(|_| result.upload_bytes > 0)
            .map(|st| (st.pool, 2 * slot_index as u32));
        let copies = BatchCopies {
            d,
            set,
            infos,
            mains,
            ops: &ops,
            staging: &staging,
            stamps,
        };
        self.record_and_submit(ctx, slot_index, &copies)?;
        result.ops = ops
            .into_iter()
            .map(|p| Op {
                texture: p.texture,
                from: p.from,
                to: p.to,
                new: p.new,
            })
            .collect();
        self.slots[slot_index].batch = Some(Batch {
            staging,
            upload_bytes: if stamps.is_some() {
                result.upload_bytes
            } else {
                0
            },
        });
        self.order.push_back(slot_index);
        Ok(result)
    }

    /// Reads the levels of `planned` into their staging on worker threads;
    /// a replacement whose read fails is no longer `ok` (its failure in
    /// `result`).
    fn read_batch(
        &self,
        infos: &[TexInfo],
        planned: &mut [Planned],
        staging: &mut [MappedBuffer],
        result: &mut Started,
    ) {
        let mut jobs: Vec<Job<'_>> = Vec::new();
        let mut slices: Vec<Option<&mut [u8]>> = staging
            .iter_mut()
            .map(|b| Some(b.mapped_mut().as_mut_slice()))
            .collect();
        for (k, p) in planned.iter().enumerate() {
            for &(level, si) in &p.uploads {
                let len = infos[p.texture].level_bytes[level as usize] as usize;
                if let Some(slice) = slices[si].take() {
                    // Large levels in parts, so that several threads read them.
                    for (c, part) in slice[..len].chunks_mut(READ_CHUNK).enumerate() {
                        jobs.push(Job {
                            owner: k,
                            path: infos[p.texture].path.clone(),
                            level,
                            level_len: len as u64,
                            start: (c * READ_CHUNK) as u64,
                            out: part,
                        });
                    }
                }
            }
        }
        let failures = read_levels(jobs, self.threads, self.fail_reads.as_deref());
        for (k, message) in failures {
            if k >= planned.len() {
                // A reader thread panicked: which levels it read is unknown.
                for p in planned.iter_mut().filter(|p| p.ok) {
                    p.ok = false;
                    result.failed.push((p.texture, message.clone()));
                }
                continue;
            }
            if planned[k].ok {
                planned[k].ok = false;
                result.failed.push((planned[k].texture, message));
            }
        }
    }

    /// Records the batch's copies into slot `slot_index`'s command buffers
    /// and submits them: the upload submission first where there is one and
    /// the batch has uploads, then the graphics one with the slot's fence.
    fn record_and_submit(
        &self,
        ctx: &Context,
        slot_index: usize,
        copies: &BatchCopies<'_>,
    ) -> Result<(), GpuError> {
        let d = &ctx.device;
        let slot = &self.slots[slot_index];
        let cmd = slot.cmd;
        let images = copies.images();
        let barriers =
            ownership::upload_barriers(self.upload.as_ref().map(|u| u.families), &images);
        // The upload submission, where there is one and the batch has uploads.
        let upload = match (&self.upload, slot.upload) {
            (Some(u), Some(cmds)) if barriers.uses_upload_queue() => Some((u.queue, cmds)),
            _ => None,
        };
        if let Some((pool, first)) = copies.stamps {
            // SAFETY: the slot's queries are not in use (its previous batch was
            // collected); hostQueryReset is enabled (the pool exists only then).
            unsafe { d.reset_query_pool(pool, first, 2) };
        }
        // SAFETY: the slot's buffers and semaphore are idle (its previous batch was
        // collected: its graphics submission, which waited for the semaphore, is
        // complete); every image and buffer recorded is live until the batch's
        // fence signals (the old images are freed only after that). The upload
        // submission comes first, so the graphics one's wait has its signal
        // submitted.
        unsafe {
            if let Some((queue, up)) = upload {
                copies.submit_uploads(queue, up, &barriers)?;
            }
            copies.begin(cmd)?;
            if upload.is_none() {
                copies.stamp(cmd, 0, vk::PipelineStageFlags2::TOP_OF_PIPE);
            }
            transition(d, cmd, &barriers.graphics_before);
            if upload.is_none() {
                copies.record_staging_copies(cmd);
                copies.stamp(cmd, 1, vk::PipelineStageFlags2::ALL_COMMANDS);
            }
            copies.record_image_copies(cmd);
            transition(d, cmd, &barriers.graphics_after);
            d.end_command_buffer(cmd).check("vkEndCommandBuffer")?;
            let cmds = [vk::CommandBufferSubmitInfo::default().command_buffer(cmd)];
            let wait: Vec<vk::SemaphoreSubmitInfo> = upload
                .map(|(_, (_, semaphore))| {
                    vk::SemaphoreSubmitInfo::default()
                        .semaphore(semaphore)
                        .stage_mask(ownership::WAIT_STAGE)
                })
                .into_iter()
                .collect();
            let submit = vk::SubmitInfo2::default()
                .command_buffer_infos(&cmds)
                .wait_semaphore_infos(&wait);
            d.queue_submit2(ctx.queue, &[submit], slot.fence)
                .check("vkQueueSubmit2")?;
        }
        Ok(())
    }

    fn destroy_objects(&mut self, d: &ash::Device) {
        // SAFETY: nothing is in flight (callers finish first, or nothing was
        // submitted); the pools' command buffers go with them.
        unsafe {
            if let Some(st) = self.stamps.take() {
                d.destroy_query_pool(st.pool, None);
            }
            for s in self.slots.drain(..) {
                d.destroy_fence(s.fence, None);
                if let Some((_, semaphore)) = s.upload {
                    d.destroy_semaphore(semaphore, None);
                }
            }
            if let Some(u) = self.upload.take() {
                d.destroy_command_pool(u.pool, None);
            }
            d.destroy_command_pool(self.pool, None);
        }
    }

    /// Waits for every batch, frees what they hold, and destroys the pool.
    pub fn destroy(&mut self, ctx: &Context, mem: &GpuMemory) {
        if let Err(e) = self.finish(ctx, mem) {
            log::error!("streaming teardown: {e}");
        }
        self.destroy_objects(&ctx.device);
    }
}

/// A command pool of `family` whose buffers reset one by one.
fn command_pool(d: &ash::Device, family: u32) -> Result<vk::CommandPool, GpuError> {
    // SAFETY: a valid create info on a live device.
    unsafe {
        d.create_command_pool(
            &vk::CommandPoolCreateInfo::default()
                .queue_family_index(family)
                .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER),
            None,
        )
    }
    .check("vkCreateCommandPool")
}

/// A command buffer per slot from `pool`.
///
/// # Safety
/// `pool` is a live command pool of `d`.
unsafe fn slot_buffers(
    d: &ash::Device,
    pool: vk::CommandPool,
) -> Result<Vec<vk::CommandBuffer>, GpuError> {
    // SAFETY: a live pool of this device.
    unsafe {
        d.allocate_command_buffers(
            &vk::CommandBufferAllocateInfo::default()
                .command_pool(pool)
                .command_buffer_count(SLOTS as u32),
        )
    }
    .check("vkAllocateCommandBuffers")
}

/// A replacement of [`Mechanism::start`]'s batch: its new image and the
/// levels it takes from staging.
struct Planned {
    texture: usize,
    from: u32,
    to: u32,
    new: Texture,
    /// (level, staging index)
    uploads: Vec<(u32, usize)>,
    ok: bool,
}

/// The replacements of `replaces` that [`Mechanism::start`] can place now,
/// each with its new image and its levels' staging buffers (in `staging`);
/// the others deferred in `result` (pool full or fragmented, ring full).
fn plan_batch(
    ctx: &Context,
    mem: &GpuMemory,
    set: &TextureSet,
    infos: &[TexInfo],
    replaces: &[(usize, u32, u32)],
    staging: &mut Vec<MappedBuffer>,
    result: &mut Started,
) -> Result<Vec<Planned>, GpuError> {
    let d = &ctx.device;
    let mut planned: Vec<Planned> = Vec::new();
    let mut ring_full = false;
    for &(t, from, to) in replaces {
        let info = &infos[t];
        if ring_full {
            result.deferred.push(t);
            continue;
        }
        let size = info.main_bytes.get(to as usize).copied().unwrap_or(0);
        if !pool_takes(mem, set, size, result) {
            result.deferred.push(t);
            continue;
        }
        let new = match create_main(ctx, mem, set, info, to) {
            Ok(n) => n,
            Err(e) if e.is_no_room() => {
                if mem
                    .pool_pressure(set.texture_pool)
                    .is_some_and(|p| p.free_in_blocks() + p.headroom() >= size)
                {
                    result.fragmentation_failures += 1;
                }
                result.deferred.push(t);
                continue;
            }
            Err(e) => return Err(e),
        };
        let Some(uploads) = stage_levels(mem, set, info, from, to, staging) else {
            ring_full = true;
            // The ring is full: this one waits for a later frame. Its staging
            // buffers stay in the batch, freed in order when it completes.
            TextureSet::free_texture(d, mem, new);
            result.deferred.push(t);
            continue;
        };
        planned.push(Planned {
            texture: t,
            from,
            to,
            new,
            uploads,
            ok: true,
        });
    }
    Ok(planned)
}

/// Whether the texture pool can place a new image of `size` bytes, from its
/// pressure before allocating: an image past half a block gets memory of its
/// own (as the allocator places it in a pool), the others a free range or a
/// new block; one whose memory the budget can't take can't be placed
/// (earlier images of this batch may have taken the range the policy saw):
/// it waits, without a failed allocation (counted in `result` when the pool
/// had the bytes free: fragmentation).
fn pool_takes(mem: &GpuMemory, set: &TextureSet, size: u64, result: &mut Started) -> bool {
    if let Some(p) = mem.pool_pressure(set.texture_pool) {
        let fits = if size > set.texture_block / 2 {
            size <= p.headroom()
        } else {
            size <= p.largest_free_range || set.texture_block <= p.headroom()
        };
        if !fits {
            if p.free_in_blocks() + p.headroom() >= size {
                result.fragmentation_deferrals += 1;
                if result.first_deferred_bytes == 0 {
                    result.first_deferred_bytes = size;
                }
            }
            return false;
        }
    }
    true
}

/// A staging buffer from the ring pool (pushed on `staging`) for every level
/// of a replacement `from` to `to` that neither its source image nor the
/// tail holds: (level, staging index) each; `None` when the ring is full
/// (the buffers made so far stay in `staging`).
fn stage_levels(
    mem: &GpuMemory,
    set: &TextureSet,
    info: &TexInfo,
    from: u32,
    to: u32,
    staging: &mut Vec<MappedBuffer>,
) -> Option<Vec<(u32, usize)>> {
    let src_base = if from < info.tail { from } else { info.tail };
    let mut uploads = Vec::new();
    for level in to..src_base.min(info.tail).max(to) {
        let len = info.level_bytes[level as usize];
        let binfo = vk::BufferCreateInfo::default()
            .size(len)
            .usage(vk::BufferUsageFlags::TRANSFER_SRC);
        let opts =
            MemOptions::new(MemoryUsage::Upload, "streaming staging").in_pool(set.staging_pool);
        match mem.create_buffer_mapped(&binfo, &opts) {
            Ok(b) => {
                uploads.push((level, staging.len()));
                staging.push(b);
            }
            Err(_) => return None,
        }
    }
    Some(uploads)
}

/// Subresource layers of mip `mip`, colour, one layer.
fn layers(mip: u32) -> vk::ImageSubresourceLayers {
    vk::ImageSubresourceLayers {
        aspect_mask: vk::ImageAspectFlags::COLOR,
        mip_level: mip,
        base_array_layer: 0,
        layer_count: 1,
    }
}

/// What [`Mechanism::start`] records for a batch: its replacements, their
/// staging, where their other levels come from, and the slot's timestamp
/// queries where the batch has them.
struct BatchCopies<'a> {
    d: &'a ash::Device,
    set: &'a TextureSet,
    infos: &'a [TexInfo],
    mains: &'a [Option<Texture>],
    ops: &'a [Planned],
    staging: &'a [MappedBuffer],
    /// The query pool and the slot's first query.
    stamps: Option<(vk::QueryPool, u32)>,
}

impl<'a> BatchCopies<'a> {
    /// The image a replacement's kept levels are copied from (the current
    /// main image, or the tail), and its first level.
    fn source(&self, p: &Planned) -> (&'a Texture, u32) {
        let (set, mains): (&'a TextureSet, &'a [Option<Texture>]) = (self.set, self.mains);
        let info = &self.infos[p.texture];
        match &mains[p.texture] {
            Some(m) if p.from < info.tail => (m, p.from),
            _ => (&set.textures[p.texture], set.textures[p.texture].base_level),
        }
    }

    /// Level `l`'s extent.
    fn extent(&self, p: &Planned, l: u32) -> vk::Extent3D {
        let side = (self.infos[p.texture].size >> l).max(1);
        vk::Extent3D {
            width: side,
            height: side,
            depth: 1,
        }
    }

    /// The batch's images, for its ownership barriers.
    fn images(&self) -> Vec<BatchImage> {
        self.ops
            .iter()
            .map(|p| {
                let levels = self.infos[p.texture].levels;
                let (src, src_base) = self.source(p);
                BatchImage {
                    new: (p.new.image(), levels - p.to),
                    uploads: !p.uploads.is_empty(),
                    source: (src.image(), levels - src_base),
                }
            })
            .collect()
    }

    /// Begins `cmd` for one submission.
    ///
    /// # Safety
    /// `cmd` is idle (the slot's previous batch was collected).
    unsafe fn begin(&self, cmd: vk::CommandBuffer) -> Result<(), GpuError> {
        // SAFETY: the slot's buffers are idle (its previous batch was collected).
        unsafe { crate::gpu::util::begin_one_time(self.d, cmd) }
    }

    /// Writes timestamp `k` (0 before the copies from staging, 1 after) where
    /// the batch has them.
    ///
    /// # Safety
    /// `cmd` is recording; the slot's queries were reset.
    unsafe fn stamp(&self, cmd: vk::CommandBuffer, k: u32, stage: vk::PipelineStageFlags2) {
        if let Some((pool, first)) = self.stamps {
            // SAFETY: `cmd` is recording; the query was reset above.
            unsafe { self.d.cmd_write_timestamp2(cmd, stage, pool, first + k) };
        }
    }

    /// Records the copies from staging.
    ///
    /// # Safety
    /// `cmd` is recording; the batch's buffers and images are live until
    /// the batch's fence signals, the new images copy destinations.
    unsafe fn record_staging_copies(&self, cmd: vk::CommandBuffer) {
        for p in self.ops {
            for &(l, si) in &p.uploads {
                let region = vk::BufferImageCopy {
                    buffer_offset: 0,
                    buffer_row_length: 0,
                    buffer_image_height: 0,
                    image_subresource: layers(l - p.to),
                    image_offset: vk::Offset3D::default(),
                    image_extent: self.extent(p, l),
                };
                // SAFETY: `cmd` is recording; the buffer and image are live
                // until the batch's fence signals.
                unsafe {
                    self.d.cmd_copy_buffer_to_image(
                        cmd,
                        self.staging[si].raw(),
                        p.new.image(),
                        vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                        &[region],
                    )
                };
            }
        }
    }

    /// Records the copies of the levels both images hold, image to image.
    ///
    /// # Safety
    /// `cmd` is recording on the graphics queue; the images are live until
    /// the batch's fence signals, sources and destinations of copies.
    unsafe fn record_image_copies(&self, cmd: vk::CommandBuffer) {
        for p in self.ops {
            let info = &self.infos[p.texture];
            let (src, src_base) = self.source(p);
            let copies: Vec<vk::ImageCopy> = (p.to.max(src_base)..info.levels)
                .map(|l| vk::ImageCopy {
                    src_subresource: layers(l - src_base),
                    src_offset: vk::Offset3D::default(),
                    dst_subresource: layers(l - p.to),
                    dst_offset: vk::Offset3D::default(),
                    extent: self.extent(p, l),
                })
                .collect();
            if !copies.is_empty() {
                // SAFETY: `cmd` is recording on the graphics queue; both images
                // are live until the batch's fence signals.
                unsafe {
                    self.d.cmd_copy_image(
                        cmd,
                        src.image(),
                        vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
                        p.new.image(),
                        vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                        &copies,
                    )
                };
            }
        }
    }

    /// The upload submission on `queue`: `up_cmd` records the copies from
    /// staging between the upload queue's barriers and signals `semaphore`.
    ///
    /// # Safety
    /// `up_cmd` and `semaphore` are idle; every image and buffer recorded is
    /// live until the batch's fence signals; the slot's queries were reset.
    unsafe fn submit_uploads(
        &self,
        queue: vk::Queue,
        (up_cmd, semaphore): (vk::CommandBuffer, vk::Semaphore),
        barriers: &UploadBarriers,
    ) -> Result<(), GpuError> {
        let d = self.d;
        // SAFETY: the contract above.
        unsafe {
            self.begin(up_cmd)?;
            self.stamp(up_cmd, 0, vk::PipelineStageFlags2::TOP_OF_PIPE);
            transition(d, up_cmd, &barriers.upload_before);
            self.record_staging_copies(up_cmd);
            self.stamp(up_cmd, 1, vk::PipelineStageFlags2::ALL_COMMANDS);
            transition(d, up_cmd, &barriers.upload_release);
            d.end_command_buffer(up_cmd).check("vkEndCommandBuffer")?;
            let cmds = [vk::CommandBufferSubmitInfo::default().command_buffer(up_cmd)];
            let signal = [vk::SemaphoreSubmitInfo::default()
                .semaphore(semaphore)
                .stage_mask(ownership::SIGNAL_STAGE)];
            let submit = vk::SubmitInfo2::default()
                .command_buffer_infos(&cmds)
                .signal_semaphore_infos(&signal);
            d.queue_submit2(queue, &[submit], vk::Fence::null())
                .check("vkQueueSubmit2 (uploads)")?;
        }
        Ok(())
    }
}

/// Creates an empty main image holding levels `base..` of `info`'s file.
fn create_main(
    ctx: &Context,
    mem: &GpuMemory,
    set: &TextureSet,
    info: &TexInfo,
    base: u32,
) -> Result<Texture, GpuError> {
    let d = &ctx.device;
    let levels = info.levels - base;
    let create = texture_image_info(info.format, (info.size >> base).max(1), levels);
    let tag = info
        .path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("texture");
    let mut opts = MemOptions::new(MemoryUsage::GpuOnly, tag).in_pool(set.texture_pool);
    opts.within_budget = true;
    let image = mem.create_image(&create, &opts)?;
    // SAFETY: the image is live and bound, with `levels` levels.
    let view = match unsafe { crate::gpu::util::texture_view(d, image.raw(), info.format, levels) }
    {
        Ok(v) => v,
        Err(e) => {
            // SAFETY: the image was never used.
            unsafe { mem.destroy_image(image) };
            return Err(e);
        }
    };
    Ok(Texture {
        path: info.path.clone(),
        view,
        image,
        format: info.format,
        file_size: info.size,
        base_level: base,
        file_levels: info.levels,
        bytes: info.level_bytes[base as usize..].iter().sum(),
    })
}

/// Reads each job's part of a level into its slice on up to `threads` threads;
/// returns the failures as (job owner, message). Reads of files whose path
/// contains `refuse` fail. Threads take runs of consecutive jobs of about equal
/// bytes (a level's parts are consecutive: a thread keeps its file open).
fn read_levels(jobs: Vec<Job<'_>>, threads: usize, refuse: Option<&str>) -> Vec<(usize, String)> {
    if jobs.is_empty() {
        return Vec::new();
    }
    let threads = threads.min(jobs.len()).max(1);
    let total: u64 = jobs.iter().map(|j| j.out.len() as u64).sum();
    let share = total.div_ceil(threads as u64).max(1);
    let mut buckets: Vec<Vec<Job<'_>>> = (0..threads).map(|_| Vec::new()).collect();
    let mut before = 0u64;
    for job in jobs {
        let t = ((before / share) as usize).min(threads - 1);
        before += job.out.len() as u64;
        buckets[t].push(job);
    }
    buckets.retain(|b| !b.is_empty());
    if buckets.len() == 1 {
        return buckets
            .into_iter()
            .flat_map(|b| read_bucket(b, refuse))
            .collect();
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = buckets
            .into_iter()
            .map(|b| s.spawn(move || read_bucket(b, refuse)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|_| vec![(usize::MAX, "a reader thread panicked".into())])
            })
            .collect()
    })
}

/// Bytes one read job covers at most: a 64 MiB level 0 is 128 jobs, spread over
/// the threads (and the tests' 1 MiB levels are read in two parts).
const READ_CHUNK: usize = 512 << 10;

/// One read: part of a level of a texture's file into mapped staging memory.
struct Job<'a> {
    /// Index of the planned change the level belongs to.
    owner: usize,
    path: PathBuf,
    level: u32,
    /// The level's size as the streamer knows it (the file must agree).
    level_len: u64,
    /// The part's first byte within the level.
    start: u64,
    out: &'a mut [u8],
}

fn read_bucket(bucket: Vec<Job<'_>>, refuse: Option<&str>) -> Vec<(usize, String)> {
    let mut failures = Vec::new();
    let mut open: Option<(PathBuf, Reader)> = None;
    for job in bucket {
        let Job {
            owner,
            path,
            level,
            level_len,
            start,
            out,
        } = job;
        if refuse.is_some_and(|r| path.to_string_lossy().contains(r)) {
            failures.push((
                owner,
                format!("{}: read refused (--tune fail-reads)", path.display()),
            ));
            continue;
        }
        if open.as_ref().map(|(p, _)| p != &path).unwrap_or(true) {
            match Reader::open(&path) {
                Ok(r) => open = Some((path.clone(), r)),
                Err(e) => {
                    failures.push((owner, e.to_string()));
                    open = None;
                    continue;
                }
            }
        }
        if let Some((_, r)) = open.as_mut() {
            let ok = r
                .levels
                .get(level as usize)
                .is_some_and(|l| l.length == level_len);
            if !ok {
                failures.push((
                    owner,
                    format!("{}: level {level} changed size", path.display()),
                ));
            } else if let Err(e) = r.read_level_range_into(level as usize, start, out) {
                failures.push((owner, e.to_string()));
            }
        }
    }
    failures
}
