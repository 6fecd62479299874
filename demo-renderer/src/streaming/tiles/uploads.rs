//! A frame's loads read on worker threads into the staging ring, and their
//! copies into the sparse images or the atlas slots (with the residency map's).

use super::*;

/// `count` levels from `level`, one layer, colour.
pub(super) fn color_levels(level: u32, count: u32) -> vk::ImageSubresourceRange {
    vk::ImageSubresourceRange {
        aspect_mask: vk::ImageAspectFlags::COLOR,
        base_mip_level: level,
        level_count: count,
        base_array_layer: 0,
        layer_count: 1,
    }
}

/// The staging ring the tile reads land in, and the command buffers that
/// copy out of it.
pub(super) struct Uploads {
    /// `max_loads` slots of `slot` bytes: a frame's loads, then the loads
    /// kept back for after its submission.
    pub(super) staging: Option<MappedBuffer>,
    /// Staging bytes per load.
    pub(super) slot: u64,
    /// Loads a frame may make, at most: the staging's slots.
    pub(super) max_loads: usize,
    /// The copies of a frame's loads (and the residency map's).
    pub(super) one_shot: OneShot,
    /// The copies of the spare loads kept back ([`TileStreamer::after_submit`]).
    pub(super) late_shot: OneShot,
}

impl TileStreamer {
    /// Reads `loads` (sorted, grouped in `runs`) into staging: run `r` at
    /// slot `base + runs[r].start`, its rows spanning the run's tiles (one
    /// copy out of the file's mapping, or one positioned read, per block row
    /// of a run, not per tile), runs shared
    /// over up to [`READERS`] groups on rayon's pool. `runs` cover `loads` in order.
    pub(super) fn read(
        &mut self,
        loads: &[TileRef],
        runs: &[Run],
        base: usize,
    ) -> Vec<(usize, String)> {
        if loads.is_empty() {
            return Vec::new();
        }
        // Failure injection for the tests, as the level mechanism's.
        let refuse = self.knobs.fail_reads.clone();
        let refuse = refuse.as_deref();
        let slot = self.uploads.slot as usize;
        let reads = TileReads {
            loads,
            maps: &self.maps,
            sparse: &self.sparse,
            atlas_layout: self.atlas.as_ref().map(|a| a.layout),
            slot,
            refuse,
        };
        let staging = self.uploads.staging.as_mut().expect("built");
        let rest =
            &mut staging.mapped_mut().as_mut_slice()[base * slot..(base + loads.len()) * slot];
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, READERS)
            .min(runs.len());
        let groups = group_runs(runs, loads.len(), rest, slot, threads);
        let group_lens: Vec<usize> = groups.iter().map(|g| g.0.len()).collect();
        // On rayon's pool (its threads are already running: no thread is
        // started per frame); a reader that panics fails its group's runs.
        let results: Vec<std::thread::Result<Vec<(usize, String)>>> = groups
            .into_par_iter()
            .map(|(group, dst)| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    reads.read_group(group, dst)
                }))
            })
            .collect();
        // Failures as indices into `runs`.
        let mut out = Vec::new();
        let mut first = 0;
        for (result, len) in results.into_iter().zip(group_lens) {
            match result {
                Ok(f) => out.extend(f.into_iter().map(|(k, e)| (first + k, e))),
                Err(_) => out.extend(
                    (first..first + len).map(|k| (k, "a reader thread panicked".to_string())),
                ),
            }
            first += len;
        }
        out
    }

    /// Copies the staged `loads` (from slot `base` on) into their tiles and,
    /// when it changed and this is not the `late` submission, the residency
    /// map to the GPU, in one submission that waits on the bind before it
    /// and is not waited for (the module's "A frame"). The `late` one (the
    /// spare loads after the frame's submission) goes on its own command
    /// buffer: the frame's copies may still be running.
    pub(super) fn upload(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        loads: &[TileRef],
        runs: &[Run],
        base: usize,
        late: bool,
    ) -> Result<(), GpuError> {
        let map_dirty = self.residency_map.dirty && !late;
        if loads.is_empty() && !map_dirty && !self.sync.signalled {
            return Ok(());
        }
        let after = self.sync.take_signal();
        let d = &ctx.device;
        let map_bytes = self.stage_map(mem, map_dirty)?;
        let slots = self.atlas_slots_of(loads, runs);
        let atlas_side = self.atlas.as_ref().map(|a| a.layout.side());
        let dirty = map_dirty && map_bytes > 0;
        let staging = self.uploads.staging.as_ref().map(|b| b.raw());
        let map_src = self.residency_map.host.as_ref().map(|b| b.raw());
        let map_dst = self.residency_map.gpu.as_ref().map(|b| b.raw());
        let copies = StagedCopies {
            d,
            loads,
            runs,
            base,
            slot: self.uploads.slot,
        };
        let (maps, sparse) = (&self.maps, &self.sparse);
        let record = |cmd| {
            // SAFETY: recording; every buffer and image is live, the tiles are
            // bound (the submission waits for the bind), no earlier work is
            // pending (the last frame was waited for).
            unsafe {
                // The last frame's sampling and map reads come before these
                // writes (the images stay in GENERAL: no layout transition,
                // which could touch stale tiles' pages).
                let before = [vk::MemoryBarrier2::default()
                    .src_stage_mask(
                        vk::PipelineStageFlags2::FRAGMENT_SHADER
                            | vk::PipelineStageFlags2::COMPUTE_SHADER,
                    )
                    .dst_stage_mask(vk::PipelineStageFlags2::COPY)];
                d.cmd_pipeline_barrier2(
                    cmd,
                    &vk::DependencyInfo::default().memory_barriers(&before),
                );
                if let (Some(src), Some(span)) = (staging, atlas_side) {
                    copies.record_atlas(cmd, src, span, &slots);
                } else if let Some(src) = staging {
                    copies.record_sparse(cmd, src, maps, sparse);
                }
                if let (true, Some(src), Some(dst)) = (dirty, map_src, map_dst) {
                    d.cmd_copy_buffer(
                        cmd,
                        src,
                        dst,
                        &[vk::BufferCopy {
                            src_offset: 0,
                            dst_offset: 0,
                            size: map_bytes,
                        }],
                    );
                }
                copies_to_shaders(d, cmd);
            }
        };
        let shot = if late {
            &self.uploads.late_shot
        } else {
            &self.uploads.one_shot
        };
        // SAFETY: `after` is the signal of the bind just before (this
        // frame's, or its late loads'), consumed here alone.
        if let Err(e) = unsafe { shot.submit(ctx, after, record) } {
            // Nothing waited on the bind's signal: it is still pending.
            self.sync.signalled = after.is_some();
            return Err(e);
        }
        if !late {
            self.residency_map.dirty = false;
        }
        Ok(())
    }

    /// Flushes the staging ring and, when `map_dirty`, writes the residency
    /// map (with a page atlas, the page table the shaders read in its place)
    /// into its host buffer; the map's bytes.
    fn stage_map(&mut self, mem: &GpuMemory, map_dirty: bool) -> Result<u64, GpuError> {
        if let Some(s) = self.uploads.staging.as_ref() {
            mem.flush(s.allocation());
        }
        // With a page atlas the shaders read the page table in the map's place.
        let words: &[u32] = match self.atlas.as_ref() {
            Some(a) => a.slots.table(),
            None => &self.residency_map.words,
        };
        let map_bytes = (words.len() * 4) as u64;
        if map_dirty {
            let host = self.residency_map.host.as_mut().expect("built");
            host.mapped_mut()
                .write(0, bytemuck::cast_slice(words))
                .map_err(|e| GpuError::Other(format!("tile residency map: {e}")))?;
            mem.flush(host.allocation());
        }
        Ok(map_bytes)
    }

    /// Each staged tile's run, atlas image and slot origin, with a page
    /// atlas (empty without). (A tile without a slot, which `take_slots`
    /// never leaves among the loads, is not copied: its entry stays 0, so
    /// nothing samples it.)
    fn atlas_slots_of(&self, loads: &[TileRef], runs: &[Run]) -> Vec<AtlasCopy> {
        match self.atlas.as_ref() {
            Some(a) => runs
                .iter()
                .enumerate()
                .filter_map(|(r, run)| {
                    let t = loads[run.start];
                    let idx = self.maps[t.map as usize].index(t.level, t.x, t.y);
                    let k = a.slots.atlas_of(t.map as usize);
                    let slot = a.slots.slot(t.map as usize, idx)?;
                    Some((r, a.images[k].0.raw(), a.layout.origin(slot)))
                })
                .collect(),
            None => Vec::new(),
        }
    }
}

/// A staged tile's copy into a page atlas: its run, the atlas image and the
/// slot's origin.
type AtlasCopy = (usize, vk::Image, (u32, u32));

/// A frame's staged loads, grouped in runs, from staging slot `base` on (a
/// slot of `slot` bytes), for [`TileStreamer::upload`]'s recording.
struct StagedCopies<'a> {
    d: &'a ash::Device,
    loads: &'a [TileRef],
    runs: &'a [Run],
    base: usize,
    slot: u64,
}

impl StagedCopies<'_> {
    /// A page atlas: one tile a run, its slot whole (`span` texels a side);
    /// in waves of slot columns ([`atlas::copy_wave`]), a barrier between
    /// waves.
    ///
    /// # Safety
    /// `cmd` is recording; `src` and the atlas images are live.
    unsafe fn record_atlas(
        &self,
        cmd: vk::CommandBuffer,
        src: vk::Buffer,
        span: u32,
        slots: &[AtlasCopy],
    ) {
        let d = self.d;
        let mut order: Vec<usize> = (0..slots.len()).collect();
        order.sort_by_key(|&k| atlas::copy_wave(slots[k].2 .0 / span.max(1)));
        let mut wave = None;
        for k in order {
            let (r, image, (x, y)) = slots[k];
            let run = &self.runs[r];
            let w = atlas::copy_wave(x / span.max(1));
            if wave.is_some_and(|last| last != w) {
                let between = [vk::MemoryBarrier2::default()
                    .src_stage_mask(vk::PipelineStageFlags2::COPY)
                    .src_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
                    .dst_stage_mask(vk::PipelineStageFlags2::COPY)
                    .dst_access_mask(vk::AccessFlags2::TRANSFER_WRITE)];
                // SAFETY: the contract above.
                unsafe {
                    d.cmd_pipeline_barrier2(
                        cmd,
                        &vk::DependencyInfo::default().memory_barriers(&between),
                    )
                };
            }
            wave = Some(w);
            let region = [copy_region(
                (self.base + run.start) as u64 * self.slot,
                (span, span),
                0,
                (x, y),
                (span, span),
            )];
            // SAFETY: the contract above.
            unsafe {
                d.cmd_copy_buffer_to_image(cmd, src, image, vk::ImageLayout::GENERAL, &region)
            };
        }
    }

    /// Sparse images: one region per run, its rows spanning the run's tiles
    /// in staging, as they span them in the image.
    ///
    /// # Safety
    /// `cmd` is recording; `src` and the sparse images are live, the tiles
    /// bound (the submission waits for the bind).
    unsafe fn record_sparse(
        &self,
        cmd: vk::CommandBuffer,
        src: vk::Buffer,
        maps: &[MapTiles],
        sparse: &[SparseMap],
    ) {
        for run in self.runs {
            let t = self.loads[run.start];
            let m = &maps[t.map as usize];
            let side = m.side(t.level);
            let (x, y) = (t.x * m.tile_w, t.y * m.tile_h);
            let region = [copy_region(
                (self.base + run.start) as u64 * self.slot,
                (m.tile_w * run.len, m.tile_h),
                t.level,
                (x, y),
                ((m.tile_w * run.len).min(side - x), m.tile_h.min(side - y)),
            )];
            // SAFETY: the contract above.
            unsafe {
                self.d.cmd_copy_buffer_to_image(
                    cmd,
                    src,
                    sparse[t.map as usize].image,
                    vk::ImageLayout::GENERAL,
                    &region,
                )
            };
        }
    }
}

/// The runs cut into `threads` groups of about equal tiles (of `loads`
/// tiles in all), each with its part of `rest`, the runs' staging (`slot`
/// bytes a tile).
fn group_runs<'a>(
    runs: &'a [Run],
    loads: usize,
    mut rest: &'a mut [u8],
    slot: usize,
    threads: usize,
) -> Vec<(&'a [Run], &'a mut [u8])> {
    let per = loads.div_ceil(threads.max(1));
    let mut groups: Vec<(&[Run], &mut [u8])> = Vec::new();
    let mut first = 0;
    let mut tiles = 0;
    for (k, r) in runs.iter().enumerate() {
        tiles += r.len as usize;
        if tiles >= per || k + 1 == runs.len() {
            let bytes = (r.start + r.len as usize - runs[first].start) * slot;
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(bytes);
            groups.push((&runs[first..=k], head));
            rest = tail;
            first = k + 1;
            tiles = 0;
        }
    }
    groups
}

/// What [`TileStreamer::read`]'s readers share: the loads, the maps and
/// their files, the atlas layout (with a page atlas), a staging slot's
/// bytes, and the failure injection (`--tune fail-reads`).
struct TileReads<'a> {
    loads: &'a [TileRef],
    maps: &'a [MapTiles],
    sparse: &'a [SparseMap],
    atlas_layout: Option<atlas::AtlasLayout>,
    slot: usize,
    refuse: Option<&'a str>,
}

impl TileReads<'_> {
    /// Reads a group of runs into `dst`, its staging; the failures as
    /// (index in the group, message).
    fn read_group(&self, group: &[Run], dst: &mut [u8]) -> Vec<(usize, String)> {
        let base = group.first().map_or(0, |r| r.start);
        let mut failed = Vec::new();
        for (k, run) in group.iter().enumerate() {
            let at = (run.start - base) * self.slot;
            if let Err(e) = self.read_run(run, at, dst) {
                failed.push((k, e));
            }
        }
        failed
    }

    /// Reads a run into `dst` at `at`: with a page atlas its one tile's
    /// slot, border included, from the level's wrapped blocks; else its
    /// rows spanning the run's tiles.
    fn read_run(&self, run: &Run, at: usize, dst: &mut [u8]) -> Result<(), String> {
        let t = self.loads[run.start];
        let s = &self.sparse[t.map as usize];
        if self
            .refuse
            .is_some_and(|r| s.path.to_string_lossy().contains(r))
        {
            return Err(format!(
                "{}: read refused (--tune fail-reads)",
                s.path.display()
            ));
        }
        let m = &self.maps[t.map as usize];
        let r = &s.reader;
        let bs = s.format.block_side();
        let side = m.side(t.level);
        let level = t.level as usize;
        if let Some(layout) = self.atlas_layout.as_ref() {
            // One tile a run: its slot, border included,
            // from the level's wrapped blocks.
            let bytes = s.format.level_bytes(layout.side(), layout.side()) as usize;
            let read = atlas::assemble_slot(
                layout,
                bs,
                s.format.block_bytes() as usize,
                side,
                (t.x, t.y),
                &mut dst[at..at + bytes],
                |xy, wh, out| match &s.mapped {
                    Some(m) => m.read_level_rect_into(r, level, xy, wh, out),
                    None => r.read_level_rect_into(level, xy, wh, out),
                },
            );
            return read.map_err(|e| e.to_string());
        }
        let (x, y) = (t.x * m.tile_w, t.y * m.tile_h);
        let w = (m.tile_w * run.len).min(side - x);
        let h = m.tile_h.min(side - y);
        let bytes = s.format.level_bytes(w, h) as usize;
        let (xy, wh) = ((x / bs, y / bs), (w.div_ceil(bs), h.div_ceil(bs)));
        let out = &mut dst[at..at + bytes];
        let read = match &s.mapped {
            Some(m) => m.read_level_rect_into(r, level, xy, wh, out),
            None => r.read_level_rect_into(level, xy, wh, out),
        };
        read.map_err(|e| e.to_string())
    }
}

/// One buffer-to-image copy into level `level` at texel `at`, `extent` wide
/// and high, read from `offset` with rows of `rows.0` texels and `rows.1`
/// rows to an image (0, 0: packed tightly as the extent).
pub(super) fn copy_region(
    offset: u64,
    rows: (u32, u32),
    level: u32,
    at: (u32, u32),
    extent: (u32, u32),
) -> vk::BufferImageCopy {
    vk::BufferImageCopy::default()
        .buffer_offset(offset)
        .buffer_row_length(rows.0)
        .buffer_image_height(rows.1)
        .image_subresource(vk::ImageSubresourceLayers {
            aspect_mask: vk::ImageAspectFlags::COLOR,
            mip_level: level,
            base_array_layer: 0,
            layer_count: 1,
        })
        .image_offset(vk::Offset3D {
            x: at.0 as i32,
            y: at.1 as i32,
            z: 0,
        })
        .image_extent(vk::Extent3D {
            width: extent.0,
            height: extent.1,
            depth: 1,
        })
}
