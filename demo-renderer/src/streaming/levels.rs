//! Residency by whole levels: each texture's main image holds one range of
//! levels above its tail. With streaming on, the level [`policy`] decides
//! which, the [`mechanism`](super::mechanism) makes the new images and copies
//! what stays, and the texture pool's [`defrag`](super::defrag)mentation
//! passes move them; with streaming off, each texture keeps the level chosen
//! at load time and only the measures run.

use std::time::{Duration, Instant};

use ash::vk;

use super::defrag::Compactor;
use super::mechanism::{Mechanism, TexInfo};
use super::policy::{self, Change, DefragInput, PolicyConfig, TextureInput};
use super::residency::{Residency, ResidencyKind};
use super::{
    estimate, estimate_wants, prefill_end, view_change, Common, Mode, PanelRow, Prefill,
    StreamConfig, StreamFrame, Want,
};
use crate::gpu::memory::{Buffer, MemOptions, MemoryUsage};
use crate::gpu::{Context, GpuError, GpuMemory};
use crate::materials::textures::{Texture, TextureSet};
use crate::scene::Object;
use estimate::View;

/// What [`Levels::apply`] did this frame.
#[derive(Default)]
struct Applied {
    changes: u32,
    upload_bytes: u64,
    read_seconds: f64,
    /// Textures still short of their target.
    waiting: u32,
    fragmentation_failures: u32,
    fragmentation_deferrals: u32,
    /// The policy found a wanted grow blocked by fragmentation.
    range_blocked: bool,
    /// Bytes of the most wanted grow blocked by fragmentation (the policy's, or
    /// else the first the mechanism deferred); 0 when none.
    room_bytes: u64,
    /// Textures changed this frame (their main image is new or gone).
    busy: Vec<bool>,
    /// Changes the policy planned.
    planned: usize,
    /// Textures whose file read failed this time.
    failed: u32,
}

/// The caps [`Levels::apply`] runs the policy with.
#[derive(Clone, Copy, Debug)]
struct Caps {
    max_ops: usize,
    max_upload_bytes: u64,
}

/// Streaming on: what changes the levels (absent with streaming off).
struct Swap {
    /// New images, copies of the levels that stay, file reads, fences.
    mechanism: Mechanism,
    /// The texture pool's defragmentation passes.
    compactor: Compactor,
}

/// Residency by whole levels ([`super::ResidencyMode::Levels`], and every
/// texture set with streaming off).
pub(super) struct Levels {
    infos: Vec<TexInfo>,
    mains: Vec<Option<Texture>>,
    failed: Vec<bool>,
    unseen: Vec<u32>,
    /// The wants this frame's decisions used (for the deficit when there is no feedback).
    used_wants: Vec<Option<Want>>,
    /// `None` with streaming off: each texture keeps its load-time level.
    swap: Option<Swap>,
    /// Set 0, binding 3 (the tile residency map): a small buffer nothing
    /// reads (taken when freed).
    placeholder_map: Option<Buffer>,
}

impl Levels {
    /// Residency by levels for `set`, streaming in mode `On`; frees what it
    /// made where it fails.
    pub(super) fn new(
        ctx: &Context,
        mem: &GpuMemory,
        set: &TextureSet,
        infos: Vec<TexInfo>,
        cfg: &StreamConfig,
    ) -> Result<Self, GpuError> {
        let n = set.textures.len();
        let placeholder_map = mem.create_buffer(
            &vk::BufferCreateInfo::default()
                .size(16)
                .usage(vk::BufferUsageFlags::STORAGE_BUFFER),
            &MemOptions::new(MemoryUsage::GpuOnly, "tile residency map (unused)"),
        )?;
        let mut s = Self {
            infos,
            mains: (0..n).map(|_| None).collect(),
            failed: vec![false; n],
            unseen: vec![u32::MAX / 2; n],
            used_wants: vec![None; n / 3],
            swap: None,
            placeholder_map: Some(placeholder_map),
        };
        if cfg.mode == Mode::On {
            if let Err(e) = s.start_swap(ctx, mem, set, cfg.tuning.fail_reads.clone()) {
                ctx.wait_idle();
                s.destroy(ctx, mem, set);
                return Err(e);
            }
        }
        Ok(s)
    }

    /// The mechanism and the compactor of streaming on.
    fn start_swap(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        set: &TextureSet,
        fail_reads: Option<String>,
    ) -> Result<(), GpuError> {
        let mechanism = Mechanism::new(ctx, fail_reads)?;
        self.swap = Some(Swap {
            mechanism,
            compactor: Compactor::new(mem),
        });
        // The tails are always resident and sampled: never moved.
        for t in &set.textures {
            mem.allocator()
                .set_movable(t.image.allocation(), false)
                .map_err(|e| GpuError::Other(format!("pinning a mip tail: {e}")))?;
        }
        Ok(())
    }

    /// Texture `i`'s main image: its base level and allocation bytes (also while
    /// it is inside a defragmentation move).
    fn main_of(&self, i: usize) -> Option<(u32, u64)> {
        match &self.mains[i] {
            Some(m) => Some((m.base_level, m.allocation_bytes())),
            None => self.swap.as_ref().and_then(|s| s.compactor.parked(i)),
        }
    }

    /// Each texture's first resident level.
    fn levels(&self, set: &TextureSet) -> Vec<u32> {
        (0..set.textures.len())
            .map(|i| match self.main_of(i) {
                Some((base, _)) => base,
                None => set.textures[i].base_level,
            })
            .collect()
    }

    fn retiring_bytes(&self) -> u64 {
        self.swap
            .as_ref()
            .map_or(0, |s| s.mechanism.retiring_bytes())
    }

    /// Per-texture policy inputs from per-material wants and look-ahead wants
    /// (`prefetch`, empty for none).
    fn inputs(
        &self,
        set: &TextureSet,
        wants: &[Option<Want>],
        prefetch: &[Option<Want>],
    ) -> Vec<TextureInput> {
        self.infos
            .iter()
            .enumerate()
            .map(|(i, info)| {
                let (want, ahead) = if self.failed[i] {
                    (None, None)
                } else {
                    (wants[i / 3], prefetch.get(i / 3).copied().flatten())
                };
                let (resident, main_alloc) =
                    self.main_of(i).unwrap_or((set.textures[i].base_level, 0));
                let mut main_bytes = info.main_bytes.clone();
                // The allocator's figure for the image that exists, in case it differs.
                if let Some(b) = main_bytes.get_mut(resident as usize) {
                    if main_alloc > 0 {
                        *b = main_alloc;
                    }
                }
                TextureInput {
                    main_bytes,
                    level_bytes: info.level_bytes.clone(),
                    tail_bytes: match self.swap {
                        Some(_) => set.textures[i].allocation_bytes(),
                        None => 0,
                    },
                    resident,
                    // Replacements swap at once (see `mechanism`): none is pending.
                    pending: None,
                    wanted: want.map(|w| estimate::level_of(w.level_lod, info.levels)),
                    coverage: want.map_or(0.0, |w| w.coverage),
                    level_coverage: match want.and_then(|w| w.hist) {
                        Some(h) => {
                            let n = info.levels as usize;
                            let mut v: Vec<f32> = h.iter().take(n).copied().collect();
                            if let Some(last) = v.last_mut() {
                                *last += h.iter().skip(n).sum::<f32>();
                            }
                            v
                        }
                        None => Vec::new(),
                    },
                    unseen_frames: self.unseen[i],
                    prefetch: ahead.map(|w| estimate::level_of(w.level_lod, info.levels)),
                    prefetch_coverage: ahead.map_or(0.0, |w| w.coverage),
                }
            })
            .collect()
    }

    /// Runs the policy and starts its changes.
    fn apply(
        &mut self,
        c: &Common,
        ctx: &Context,
        mem: &GpuMemory,
        set: &mut TextureSet,
        inputs: &[TextureInput],
        caps: Caps,
    ) -> Result<Applied, GpuError> {
        let d = &ctx.device;
        let pressure = mem.pool_pressure(set.texture_pool);
        let max_alloc = pressure.map_or(u64::MAX, |p| p.largest_free_range.max(p.headroom()));
        let mut cfg = PolicyConfig {
            budget: c.cfg.budget,
            reserve: 0,
            max_ops: caps.max_ops,
            max_upload_bytes: caps.max_upload_bytes,
            keep_bonus: 0.5,
            // Drops happen after the poll: with no batch in flight (the usual
            // case: the frame before, submitted after them, is done) nothing reads
            // the old image, and it is freed at once.
            drop_frees_at_once: self
                .swap
                .as_ref()
                .is_none_or(|s| s.mechanism.in_flight() == 0),
        };
        cfg.reserve = policy::default_reserve(inputs, cfg.budget);
        let plan = policy::plan(&cfg, inputs, self.retiring_bytes(), max_alloc);
        let mut waiting: Vec<bool> = inputs
            .iter()
            .zip(&plan.targets)
            .map(|(t, &target)| target < t.resident)
            .collect();
        let mut out = Applied {
            range_blocked: plan.range_blocked,
            room_bytes: plan.range_blocked_bytes,
            busy: vec![false; inputs.len()],
            planned: plan.changes.len(),
            ..Applied::default()
        };
        // Frames are numbered from 1 for the free queue: this one is
        // `frames_prepared + 1`, and every frame up to `frames_prepared` is done.
        let (done, this_frame) = (c.frames_prepared, c.frames_prepared + 1);
        let mut replaces = Vec::new();
        for c in &plan.changes {
            match *c {
                Change::Drop { texture, .. } => {
                    // Back to the tail at once; the old image is unused by any
                    // pending work when no batch is in flight (the frame before is
                    // done, and a texture with a replacement in flight gets no
                    // other change), so it is freed at once; else after this frame.
                    set.write_view(d, texture, set.textures[texture].view);
                    if let Some(old) = self.mains[texture].take() {
                        match self.swap.as_mut() {
                            Some(Swap { mechanism: m, .. }) => {
                                let last = if cfg.drop_frees_at_once {
                                    done
                                } else {
                                    this_frame
                                };
                                m.retire(mem, old, last);
                            }
                            None => TextureSet::free_texture(d, mem, old),
                        }
                    }
                    out.busy[texture] = true;
                    out.changes += 1;
                }
                Change::Replace { texture, from, to } => replaces.push((texture, from, to)),
            }
        }
        if let Some(s) = self.swap.as_mut() {
            s.mechanism.collect_retired(d, mem, done);
        }
        let count = |w: &[bool]| w.iter().filter(|&&x| x).count() as u32;
        if replaces.is_empty() {
            out.waiting = count(&waiting);
            return Ok(out);
        }
        let Some(Swap {
            mechanism: mech, ..
        }) = self.swap.as_mut()
        else {
            out.waiting = count(&waiting);
            return Ok(out);
        };
        let started = mech.start(ctx, mem, set, &self.infos, &self.mains, &replaces)?;
        out.fragmentation_failures = started.fragmentation_failures;
        out.fragmentation_deferrals = started.fragmentation_deferrals;
        out.range_blocked |= started.fragmentation_deferrals > 0;
        if out.room_bytes == 0 {
            out.room_bytes = started.first_deferred_bytes;
        }
        // Swap at once: the batch's barrier orders its copies before this frame's
        // reads. The old image is freed once this frame (after the batch) is done.
        for op in started.ops {
            set.write_view(d, op.texture, op.new.view);
            if op.to <= plan.targets[op.texture] {
                waiting[op.texture] = false;
            }
            out.busy[op.texture] = true;
            if let Some(old) = self.mains[op.texture].replace(op.new) {
                mech.retire(mem, old, this_frame);
            }
            out.changes += 1;
        }
        out.failed = started.failed.len() as u32;
        for (t, message) in &started.failed {
            if !self.failed[*t] {
                eprintln!(
                    "streaming: {message}; texture {} keeps the levels it has",
                    self.infos[*t].path.display()
                );
                self.failed[*t] = true;
            }
        }
        out.upload_bytes = started.upload_bytes;
        out.read_seconds = started.read_seconds;
        out.waiting = count(&waiting);
        Ok(out)
    }

    /// Decides this frame's defragmentation pass and begins it; returns the
    /// texture pool's fragmentation it read.
    fn begin_defrag(
        &mut self,
        c: &Common,
        mem: &GpuMemory,
        set: &TextureSet,
        applied: &Applied,
    ) -> Result<f64, GpuError> {
        let Some(p) = mem.pool_pressure(set.texture_pool) else {
            return Ok(0.0);
        };
        let fragmentation = policy::fragmentation(p.largest_free_range, p.free_in_blocks());
        let pass_bytes = policy::defrag_pass_bytes(&DefragInput {
            cap: c.cfg.defrag_budget,
            budget: c.cfg.budget,
            resident: self.resident_bytes(set),
            free_in_blocks: p.free_in_blocks(),
            largest_free_range: p.largest_free_range,
            blocked: applied.range_blocked,
            failures: applied.fragmentation_failures,
            threshold: policy::DEFRAG_THRESHOLD,
            min_free: c.cfg.budget / 64,
        });
        if let Some(s) = self.swap.as_mut() {
            let room =
                (applied.range_blocked && applied.room_bytes > 0).then_some(applied.room_bytes);
            s.compactor
                .begin(set, &mut self.mains, &applied.busy, pass_bytes, room)?;
        }
        Ok(fragmentation)
    }

    /// Ends the open defragmentation pass, if any (its frame is done), and
    /// counts what it moved into `frame`'s figures.
    pub(super) fn finish_defrag(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        set: &TextureSet,
        frame: &mut StreamFrame,
    ) -> Result<(), GpuError> {
        let Some(s) = self.swap.as_mut() else {
            return Ok(());
        };
        if let Some(done) = s.compactor.finish(ctx, mem, set, &mut self.mains)? {
            if done.moved > 0 {
                frame.defrag_passes += 1;
                frame.defrag_bytes_moved += done.bytes_moved;
            }
        }
        Ok(())
    }
}

impl Residency for Levels {
    fn kind(&self) -> ResidencyKind {
        ResidencyKind::Levels
    }

    fn frame_done(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        set: &TextureSet,
        frame: &mut StreamFrame,
    ) -> Result<(), GpuError> {
        self.finish_defrag(ctx, mem, set, frame)
    }

    /// The placeholder bound where the tile residency map would be.
    fn map_buffer(&self) -> (vk::Buffer, u64) {
        self.placeholder_map
            .as_ref()
            .map_or((vk::Buffer::null(), 0), |b| (b.raw(), b.size()))
    }

    /// Bytes of texture images alive now (old images waiting to be freed, and
    /// both images of each defragmentation move in flight, included).
    fn resident_bytes(&self, set: &TextureSet) -> u64 {
        set.allocated_bytes()
            + self
                .mains
                .iter()
                .flatten()
                .map(Texture::allocation_bytes)
                .sum::<u64>()
            + self.retiring_bytes()
            + self.swap.as_ref().map_or(0, |s| s.compactor.moving_bytes())
    }

    /// Texture `i`'s row of the overlay's streaming panel: its main image (or
    /// the tail where there is none) and the level the last decisions wanted.
    fn panel_row(&self, set: &TextureSet, i: usize, name: String) -> PanelRow {
        let t = &set.textures[i];
        let info = &self.infos[i];
        let (resident_mip, resident_bytes) = self
            .main_of(i)
            .unwrap_or((t.base_level, t.allocation_bytes()));
        let wanted_mip = match self.swap {
            Some(_) => self
                .used_wants
                .get(i / 3)
                .copied()
                .flatten()
                .map(|w| estimate::level_of(w.level_lod, info.levels)),
            None => None,
        };
        PanelRow {
            name,
            resident_mip,
            resident_bytes,
            wanted_mip,
            wanted_bytes: wanted_mip.map(|l| {
                info.main_bytes
                    .get(l as usize)
                    .copied()
                    .unwrap_or_else(|| t.allocation_bytes())
            }),
        }
    }

    /// [`super::Streamer::prepare`] by levels: takes finished replacements,
    /// decides from the last feedback (else the CPU estimate) and starts this
    /// frame's changes; returns the frame's figures.
    fn prepare(
        &mut self,
        c: &mut Common,
        ctx: &Context,
        mem: &GpuMemory,
        set: &mut TextureSet,
        objects: &[Object],
        (view, camera_cut, ahead): (&View, bool, &[View]),
        mut frame: StreamFrame,
    ) -> Result<StreamFrame, GpuError> {
        self.finish_defrag(ctx, mem, set, &mut c.frame)?;
        // Finished batches free their staging; old images retired up to the
        // last frame done are freed.
        let done = c.frames_prepared;
        if let Some(s) = self.swap.as_mut() {
            let mech = &mut s.mechanism;
            mech.poll(ctx, mem)?;
            mech.collect_retired(&ctx.device, mem, done);
            let gpu = mech.take_gpu_uploads();
            frame.upload_gpu_bytes = gpu.bytes;
            frame.upload_gpu_ms = gpu.ms;
        }
        // Wanted levels: the last frame's feedback, else the CPU estimate.
        let est = estimate::estimate(objects, view, &c.map_sizes);
        let small = 256.0 / c.pixels;
        // A detected jump (answered as a cut): the estimate first, joined
        // with the feedback on the materials the present view still shows.
        let jump = camera_cut && c.jump_overlaps;
        let wants: Vec<Option<Want>> = match c.last_feedback.as_ref() {
            Some(fb) if jump => {
                frame.wanted_from = "both";
                c.feedback_wants(fb)
                    .into_iter()
                    .zip(&est)
                    .map(|(f, e)| {
                        let e = e.as_ref()?;
                        Some(match f {
                            Some(f) => Want {
                                level_lod: f.level_lod.min(e.lod),
                                coverage: f.coverage.max(e.coverage),
                                hist: f.hist,
                            },
                            None => Want {
                                level_lod: e.lod,
                                coverage: e.coverage,
                                hist: None,
                            },
                        })
                    })
                    .collect()
            }
            Some(fb) if !camera_cut => {
                frame.wanted_from = "feedback";
                let mut fw = c.feedback_wants(fb);
                // The camera moves on: extrapolate each material's trend one frame
                // (a level getting finer is wanted a frame early), by half a level
                // at most (an object entering the view is no trend).
                if let Some(prev) = c.prev_feedback.as_ref() {
                    for (w, p) in fw.iter_mut().zip(c.feedback_wants(prev)) {
                        if let (Some(w), Some(p)) = (w.as_mut(), p) {
                            let trend = (w.level_lod - p.level_lod).clamp(-0.5, 0.0);
                            w.level_lod += trend;
                        }
                    }
                }
                fw.into_iter()
                    .zip(&est)
                    .map(|(f, e)| match (f, e) {
                        (Some(f), _) => Some(f),
                        (None, Some(e)) if e.coverage < small => Some(Want {
                            level_lod: e.lod,
                            coverage: e.coverage,
                            hist: None,
                        }),
                        _ => None,
                    })
                    .collect()
            }
            _ => {
                frame.wanted_from = "estimate";
                estimate_wants(&est)
            }
        };
        // What the coming frames want: prefetched below the present view.
        let prefetch = c.lookahead_wants(objects, view, ahead);
        for (i, u) in self.unseen.iter_mut().enumerate() {
            *u = if wants[i / 3].is_some() {
                0
            } else {
                u.saturating_add(1)
            };
        }
        let inputs = self.inputs(set, &wants, &prefetch);
        frame.texture_wanted_bytes = policy::wanted_bytes(&inputs);
        if self.swap.is_some() {
            // A frame answering a view change (a cut, a jump, the frame after
            // a feedback change) may start more.
            let (raise, factor) = (c.raise_caps, c.cfg.tuning.view.cap_factor);
            let caps = Caps {
                // The first frame is the initial load: no cap on operations.
                max_ops: if c.frames_prepared == 0 {
                    usize::MAX
                } else {
                    view_change::raised_count(c.cfg.max_ops, raise, factor)
                },
                max_upload_bytes: view_change::raised(c.cfg.upload_budget, raise, factor),
            };
            let applied = self.apply(c, ctx, mem, set, &inputs, caps)?;
            frame.residency_changes = applied.changes;
            frame.upload_bytes = applied.upload_bytes;
            frame.upload_ms = applied.read_seconds * 1e3;
            frame.pending_loads = applied.waiting;
            frame.fragmentation_failures = applied.fragmentation_failures;
            frame.fragmentation_deferrals = applied.fragmentation_deferrals;
            frame.texture_pool_fragmentation = self.begin_defrag(c, mem, set, &applied)?;
        }
        frame.texture_resident_bytes = self.resident_bytes(set);
        frame.texture_pool_committed_bytes = mem
            .pool_pressure(set.texture_pool)
            .map_or(0, |p| p.pool_committed_bytes);
        self.used_wants = wants;
        c.drawn_levels = self.levels(set);
        Ok(frame)
    }

    /// [`super::Streamer::prefill`] by levels (see the module's *Pre-fill*);
    /// `None` with streaming off (the static choice is loaded at start).
    fn prefill(
        &mut self,
        c: &mut Common,
        ctx: &Context,
        mem: &GpuMemory,
        set: &mut TextureSet,
        objects: &[Object],
        (view, ahead): (&View, &[View]),
        limit: Duration,
    ) -> Result<Option<Prefill>, GpuError> {
        if self.swap.is_none() {
            return Ok(None);
        }
        let started = Instant::now();
        c.pixels = view.height as f32 * view.height as f32 * view.aspect;
        // The first frame's inputs: no feedback yet, so the CPU estimate, and
        // the look-ahead.
        let wants = estimate_wants(&estimate::estimate(objects, view, &c.map_sizes));
        let prefetch = c.lookahead_wants(objects, view, ahead);
        for (i, u) in self.unseen.iter_mut().enumerate() {
            if wants[i / 3].is_some() {
                *u = 0;
            }
        }
        // Not a frame: no cap on operations or upload bytes (the staging ring
        // still bounds a round; what it cannot hold waits for the next).
        let caps = Caps {
            max_ops: usize::MAX,
            max_upload_bytes: u64::MAX,
        };
        let committed = |mem: &GpuMemory, set: &TextureSet| {
            mem.pool_pressure(set.texture_pool)
                .map_or(0, |p| p.pool_committed_bytes)
        };
        let mut out = Prefill::start(self.resident_bytes(set).max(committed(mem, set)));
        loop {
            let inputs = self.inputs(set, &wants, &prefetch);
            let applied = self.apply(c, ctx, mem, set, &inputs, caps)?;
            out.rounds += 1;
            out.changes += applied.changes;
            out.bytes += applied.upload_bytes;
            // The round's peak: its new images made, the old ones not yet freed.
            out.peak_bytes = out
                .peak_bytes
                .max(self.resident_bytes(set))
                .max(committed(mem, set));
            // Wait for the batch's copies, then free the images it replaced (no
            // frame has read them) and its staging.
            if let Some(s) = self.swap.as_mut() {
                s.mechanism.finish(ctx, mem)?;
                s.mechanism.take_gpu_uploads();
            }
            // As a frame would: a defragmentation pass when fragmentation
            // blocked this round or passes the threshold (the same decision and
            // limits; nothing is busy now). With no frame to record them, its
            // copies run at once, waited for.
            let idle = Applied {
                range_blocked: applied.range_blocked,
                fragmentation_failures: applied.fragmentation_failures,
                busy: vec![false; self.infos.len()],
                ..Applied::default()
            };
            self.begin_defrag(c, mem, set, &idle)?;
            out.peak_bytes = out
                .peak_bytes
                .max(self.resident_bytes(set))
                .max(committed(mem, set));
            let moved = match self.swap.as_mut() {
                Some(s) => s
                    .compactor
                    .finish(ctx, mem, set, &mut self.mains)?
                    .map_or(0, |d| d.bytes_moved),
                None => 0,
            };
            out.defrag_bytes += moved;
            let progressed = applied.changes > 0 || applied.failed > 0;
            if let Some(end) = prefill_end(
                applied.planned,
                progressed,
                moved > 0,
                started.elapsed(),
                limit,
            ) {
                out.end = end;
                break;
            }
        }
        out.resident_bytes = self.resident_bytes(set);
        out.ms = started.elapsed().as_secs_f64() * 1e3;
        c.drawn_levels = self.levels(set);
        Ok(Some(out))
    }

    /// Records this frame's defragmentation copies.
    ///
    /// # Safety
    /// As [`super::Streamer::record_after_pass`].
    unsafe fn record(&self, cmd: vk::CommandBuffer) {
        if let Some(s) = self.swap.as_ref() {
            // SAFETY: per the contract above.
            unsafe { s.compactor.record(cmd) };
        }
    }

    /// The mip deficit of the frame just done: its feedback (else the wants
    /// its decisions used) against the levels it was drawn with.
    fn deficit(&self, c: &Common, set: &TextureSet) -> f64 {
        let wants = match c.last_feedback.as_ref() {
            Some(fb) => c.feedback_wants(fb),
            None => self.used_wants.clone(),
        };
        let mut inputs = self.inputs(set, &wants, &[]);
        for (t, l) in inputs.iter_mut().zip(&c.drawn_levels) {
            t.resident = *l;
        }
        policy::mip_deficit(&inputs)
    }

    /// Frees the main images, the batches in flight and the placeholder; the
    /// device must be idle.
    fn destroy(&mut self, ctx: &Context, mem: &GpuMemory, set: &TextureSet) {
        let mut frame = StreamFrame::default();
        if let Err(e) = self.finish_defrag(ctx, mem, set, &mut frame) {
            log::error!("streaming teardown: {e}");
        }
        if let Some(mut s) = self.swap.take() {
            s.mechanism.destroy(ctx, mem);
        }
        if let Some(b) = self.placeholder_map.take() {
            // SAFETY: the device is idle.
            unsafe { mem.destroy_buffer(b) };
        }
        for t in self.mains.iter_mut().filter_map(Option::take) {
            TextureSet::free_texture(&ctx.device, mem, t);
        }
    }
}
