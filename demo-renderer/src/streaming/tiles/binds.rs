//! Sparse binds: runs of adjacent tiles, the regions a bind takes, and the
//! `vkQueueBindSparse` calls with the semaphores that order them.

use super::*;

/// Adjacent tiles of one row of one level, read and staged together: `len`
/// loads from `start` in the sorted loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Run {
    pub(super) start: usize,
    pub(super) len: u32,
}

/// Runs of horizontally adjacent full tiles in `loads` (sorted by map, level,
/// row, column), at most `max` long.
pub(super) fn runs(maps: &[MapTiles], loads: &[TileRef], max: u32) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for (i, t) in loads.iter().enumerate() {
        let m = &maps[t.map as usize];
        let full = |t: &TileRef| {
            (t.x + 1) * m.tile_w <= m.side(t.level) && (t.y + 1) * m.tile_h <= m.side(t.level)
        };
        if let Some(r) = out.last_mut() {
            let p = loads[r.start + r.len as usize - 1];
            if r.len < max
                && (p.map, p.level, p.y) == (t.map, t.level, t.y)
                && p.x + 1 == t.x
                && full(&p)
                && full(t)
            {
                r.len += 1;
                continue;
            }
        }
        out.push(Run { start: i, len: 1 });
    }
    out
}

/// A tile and the page it binds: memory and offset (`None`: unbind).
pub(super) type TileBind = (TileRef, Option<(vk::DeviceMemory, u64)>);

/// One memory binding of a region: its first tile, how many tiles of that
/// row it spans, and the memory and offset of the first (`None`: unbind).
pub(super) type Region = (TileRef, u32, Option<(vk::DeviceMemory, u64)>);

/// The regions that bind `changes`: horizontally adjacent tiles of one row of
/// one level join one region when every tile is unbound, or when their pages
/// follow each other in one memory object (`page` bytes apart: a region's
/// blocks take its memory in order, row-major). Each region is one
/// `VkSparseImageMemoryBind`, and the driver's cost goes by binds (NVIDIA:
/// about 26 us each, BENCHMARKS.md). A region ends at a tile that reaches the
/// level's edge (the extent is clamped there).
pub(super) fn bind_regions(maps: &[MapTiles], changes: &[TileBind], page: u64) -> Vec<Region> {
    let mut sorted = changes.to_vec();
    sorted.sort_unstable_by_key(|c| c.0);
    let mut out: Vec<Region> = Vec::new();
    for (t, mem) in sorted {
        let m = &maps[t.map as usize];
        let full = |t: &TileRef| {
            (t.x + 1) * m.tile_w <= m.side(t.level) && (t.y + 1) * m.tile_h <= m.side(t.level)
        };
        if let Some((first, count, first_mem)) = out.last_mut() {
            let last_x = first.x + *count - 1;
            let last = TileRef {
                x: last_x,
                ..*first
            };
            let joins = (first.map, first.level, first.y) == (t.map, t.level, t.y)
                && last_x + 1 == t.x
                && full(&last)
                && match (*first_mem, mem) {
                    (None, None) => true,
                    (Some((a, off)), Some((b, at))) => {
                        a == b && off + u64::from(*count) * page == at
                    }
                    _ => false,
                };
            if joins {
                *count += 1;
                continue;
            }
        }
        out.push((t, 1, mem));
    }
    out
}

impl TileStreamer {
    /// The longest run of adjacent tiles a read and a copy take: one tile
    /// in a page atlas (each its own slot), 32 else.
    pub(super) fn run_cap(&self) -> u32 {
        if self.atlas.is_some() {
            1
        } else {
            32
        }
    }

    /// Binds (`Some`) or unbinds (`None`) the tiles of `changes`, a region
    /// of adjacent tiles per bind where [`bind_regions`] joins them.
    /// [`Self::prepare`] only binds (evictions keep their pages bound); the
    /// unbind form stays for a caller that must take memory back from a tile.
    pub(super) fn bind_tiles(
        &mut self,
        ctx: &Context,
        changes: &[TileBind],
        wait: Option<vk::Semaphore>,
    ) -> Result<u32, GpuError> {
        let mut per_image: HashMap<u32, Vec<vk::SparseImageMemoryBind>> = HashMap::new();
        for (t, count, mem) in bind_regions(&self.maps, changes, self.memory.page) {
            let m = &self.maps[t.map as usize];
            let side = m.side(t.level);
            let (x, y) = (t.x * m.tile_w, t.y * m.tile_h);
            let (memory, memory_offset) = mem.unwrap_or((vk::DeviceMemory::null(), 0));
            per_image
                .entry(t.map)
                .or_default()
                .push(vk::SparseImageMemoryBind {
                    subresource: vk::ImageSubresource {
                        aspect_mask: vk::ImageAspectFlags::COLOR,
                        mip_level: t.level,
                        array_layer: 0,
                    },
                    offset: vk::Offset3D {
                        x: x as i32,
                        y: y as i32,
                        z: 0,
                    },
                    extent: vk::Extent3D {
                        width: (m.tile_w * count).min(side - x),
                        height: m.tile_h.min(side - y),
                        depth: 1,
                    },
                    memory,
                    memory_offset,
                    flags: vk::SparseMemoryBindFlags::empty(),
                });
        }
        let mut keys: Vec<u32> = per_image.keys().copied().collect();
        keys.sort_unstable();
        let infos: Vec<vk::SparseImageMemoryBindInfo> = keys
            .iter()
            .map(|k| {
                vk::SparseImageMemoryBindInfo::default()
                    .image(self.sparse[*k as usize].image)
                    .binds(&per_image[k])
            })
            .collect();
        self.sync.bind_sparse(ctx, &[], &infos, wait)?;
        Ok(per_image.values().map(|v| v.len() as u32).sum())
    }
}

/// The semaphores that order the sparse binds and the copies on the queue.
pub(super) struct BindSync {
    /// Signalled by each `vkQueueBindSparse`, waited on by the copies'
    /// submission that follows it.
    pub(super) bound: vk::Semaphore,
    /// A bind signalled `bound` and no submission has waited on it yet.
    pub(super) signalled: bool,
    /// Signalled by an empty submission after everything the frame in flight
    /// submitted, waited on by the binds of a plan made ahead
    /// ([`TileStreamer::plan_ahead`]): they rebind pages that frame may still read.
    pub(super) gate: vk::Semaphore,
}

impl BindSync {
    /// One `vkQueueBindSparse` of `opaque` and `image` binds, not waited
    /// for: it signals [`Self::bound`], which the next copies' submission
    /// waits on ([`Self::take_signal`]); it waits on `wait` first
    /// (the gate of [`TileStreamer::plan_ahead`]'s binds, signalled just before).
    pub(super) fn bind_sparse(
        &mut self,
        ctx: &Context,
        opaque: &[vk::SparseImageOpaqueMemoryBindInfo<'_>],
        image: &[vk::SparseImageMemoryBindInfo<'_>],
        wait: Option<vk::Semaphore>,
    ) -> Result<(), GpuError> {
        if opaque.is_empty() && image.is_empty() {
            return Ok(());
        }
        if self.signalled {
            // A bind whose signal no submission waited on: signalling the
            // binary semaphore again is invalid. Not reached: the copies'
            // submission follows every bind; an error rather than a guess.
            return Err(GpuError::Other(
                "tile streamer: a sparse bind's signal was never waited on".into(),
            ));
        }
        let signal = [self.bound];
        let waits: Vec<vk::Semaphore> = wait.into_iter().collect();
        let info = vk::BindSparseInfo::default()
            .wait_semaphores(&waits)
            .image_opaque_binds(opaque)
            .image_binds(image)
            .signal_semaphores(&signal);
        let d = &ctx.device;
        // SAFETY: the graphics queue supports sparse binding (`sparse_tiles`);
        // every image and memory is live; no pending work uses these images'
        // regions (the caller's frame order: the renderer waited for the last
        // frame, `prepare` for the last copies), or the bind waits on `wait`,
        // signalled after all of it (`plan_ahead`); `bound` has no pending
        // signal (`signalled` is false), `wait` one, signalled just before.
        unsafe {
            d.queue_bind_sparse(ctx.queue, &[info], vk::Fence::null())
                .check("vkQueueBindSparse")?;
        }
        self.signalled = true;
        Ok(())
    }

    /// The semaphore a submission must wait on before touching memory bound
    /// since the last such submission, once: `None` when nothing was bound.
    pub(super) fn take_signal(&mut self) -> Option<vk::Semaphore> {
        std::mem::take(&mut self.signalled).then_some(self.bound)
    }

    /// Signals [`Self::gate`] from an empty submission: its signal covers
    /// every command submitted to the queue before it (the frame in flight,
    /// its copies, the late loads' copies).
    pub(super) fn signal_gate(&self, ctx: &Context) -> Result<(), GpuError> {
        let signal = [vk::SemaphoreSubmitInfo::default()
            .semaphore(self.gate)
            .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)];
        let submit = [vk::SubmitInfo2::default().signal_semaphore_infos(&signal)];
        // SAFETY: the queue is the renderer's, used from this thread alone;
        // `gate` has no pending signal: each signal is followed by a bind
        // that waits on it (`plan`), and the next signal comes a frame later,
        // after submissions that waited for that bind.
        unsafe {
            ctx.device
                .queue_submit2(ctx.queue, &submit, vk::Fence::null())
                .check("vkQueueSubmit2")
        }
    }

    /// Destroys both semaphores; the device must be idle.
    pub(super) fn destroy(&mut self, d: &ash::Device) {
        // SAFETY: the device is idle: no bind signals it, no submission waits on it.
        unsafe {
            d.destroy_semaphore(self.bound, None);
            d.destroy_semaphore(self.gate, None);
        }
        self.bound = vk::Semaphore::null();
        self.gate = vk::Semaphore::null();
        self.signalled = false;
    }
}
