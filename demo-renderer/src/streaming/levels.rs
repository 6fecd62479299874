//! Residency by whole levels: the level policy's inputs, its changes carried
//! out through the [`mechanism`](super::mechanism), and the texture pool's
//! defragmentation passes ([`defrag`](super::defrag)).

use super::policy::{self, Change, DefragInput, PolicyConfig, TextureInput};
use super::{estimate, Mode, Streamer, Want};
use crate::gpu::{Context, GpuError, GpuMemory};
use crate::materials::textures::TextureSet;
use crate::scene::Object;
use estimate::View;

/// What [`Streamer::apply`] did this frame.
#[derive(Default)]
pub(super) struct Applied {
    pub(super) changes: u32,
    pub(super) upload_bytes: u64,
    pub(super) read_seconds: f64,
    /// Textures still short of their target.
    pub(super) waiting: u32,
    pub(super) fragmentation_failures: u32,
    pub(super) fragmentation_deferrals: u32,
    /// The policy found a wanted grow blocked by fragmentation.
    pub(super) range_blocked: bool,
    /// Bytes of the most wanted grow blocked by fragmentation (the policy's, or
    /// else the first the mechanism deferred); 0 when none.
    pub(super) room_bytes: u64,
    /// Textures changed this frame (their main image is new or gone).
    pub(super) busy: Vec<bool>,
    /// Changes the policy planned.
    pub(super) planned: usize,
    /// Textures whose file read failed this time.
    pub(super) failed: u32,
}

/// The caps [`Streamer::apply`] runs the policy with.
#[derive(Clone, Copy, Debug)]
pub(super) struct Caps {
    pub(super) max_ops: usize,
    pub(super) max_upload_bytes: u64,
}

impl Streamer {
    /// Texture `i`'s main image: its base level and allocation bytes (also while
    /// it is inside a defragmentation move).
    pub(super) fn main_of(&self, i: usize) -> Option<(u32, u64)> {
        match &self.mains[i] {
            Some(m) => Some((m.base_level, m.allocation_bytes())),
            None => self.compactor.as_ref().and_then(|c| c.parked(i)),
        }
    }

    /// Each texture's first resident level.
    pub(super) fn levels(&self, set: &TextureSet) -> Vec<u32> {
        (0..set.textures.len())
            .map(|i| match self.main_of(i) {
                Some((base, _)) => base,
                None => set.textures[i].base_level,
            })
            .collect()
    }

    /// Per-texture policy inputs from per-material wants and look-ahead wants
    /// (`prefetch`, empty for none).
    pub(super) fn inputs(
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
                    tail_bytes: match self.cfg.mode {
                        Mode::On => set.textures[i].allocation_bytes(),
                        Mode::Off => 0,
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

    /// The look-ahead's wants per material: the finest level the CPU estimate
    /// finds at the present pose or any view `ahead` (nearest first), and the
    /// largest coverage, each view's scaled by `1 - k / (n + 1)` for the view `k`
    /// frames ahead of `n`. All `None` when `ahead` is empty (look-ahead off).
    pub(super) fn lookahead_wants(
        &self,
        objects: &[Object],
        present: &View,
        ahead: &[View],
    ) -> Vec<Option<Want>> {
        let mut out: Vec<Option<Want>> = vec![None; self.map_sizes.len()];
        if ahead.is_empty() {
            return out;
        }
        let n = ahead.len() as f32;
        for (k, v) in std::iter::once(present).chain(ahead).enumerate() {
            let weight = 1.0 - k as f32 / (n + 1.0);
            for (o, e) in out
                .iter_mut()
                .zip(estimate::estimate(objects, v, &self.map_sizes))
            {
                let Some(e) = e else { continue };
                let w = o.get_or_insert(Want {
                    level_lod: e.lod,
                    coverage: 0.0,
                    hist: None,
                });
                w.level_lod = w.level_lod.min(e.lod);
                w.coverage = w.coverage.max(e.coverage * weight);
            }
        }
        out
    }

    /// Runs the policy and starts its changes.
    pub(super) fn apply(
        &mut self,
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
            budget: self.cfg.budget,
            reserve: 0,
            max_ops: caps.max_ops,
            max_upload_bytes: caps.max_upload_bytes,
            keep_bonus: 0.5,
            // Drops happen after the poll: with no batch in flight (the usual
            // case: the frame before, submitted after them, is done) nothing reads
            // the old image, and it is freed at once.
            drop_frees_at_once: self.mechanism.as_ref().is_none_or(|m| m.in_flight() == 0),
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
        let (done, this_frame) = (self.frames_prepared, self.frames_prepared + 1);
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
                        match self.mechanism.as_mut() {
                            Some(m) => {
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
        if let Some(m) = self.mechanism.as_mut() {
            m.collect_retired(d, mem, done);
        }
        let count = |w: &[bool]| w.iter().filter(|&&x| x).count() as u32;
        if replaces.is_empty() {
            out.waiting = count(&waiting);
            return Ok(out);
        }
        let Some(mech) = self.mechanism.as_mut() else {
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
    pub(super) fn begin_defrag(
        &mut self,
        mem: &GpuMemory,
        set: &TextureSet,
        applied: &Applied,
    ) -> Result<f64, GpuError> {
        let Some(p) = mem.pool_pressure(set.texture_pool) else {
            return Ok(0.0);
        };
        let fragmentation = policy::fragmentation(p.largest_free_range, p.free_in_blocks());
        let pass_bytes = policy::defrag_pass_bytes(&DefragInput {
            cap: self.cfg.defrag_budget,
            budget: self.cfg.budget,
            resident: self.resident_bytes(set),
            free_in_blocks: p.free_in_blocks(),
            largest_free_range: p.largest_free_range,
            blocked: applied.range_blocked,
            failures: applied.fragmentation_failures,
            threshold: policy::DEFRAG_THRESHOLD,
            min_free: self.cfg.budget / 64,
        });
        if let Some(c) = self.compactor.as_mut() {
            let room =
                (applied.range_blocked && applied.room_bytes > 0).then_some(applied.room_bytes);
            c.begin(set, &mut self.mains, &applied.busy, pass_bytes, room)?;
        }
        Ok(fragmentation)
    }

    /// Ends the open defragmentation pass, if any (its frame is done), and
    /// counts what it moved into the frame's figures.
    pub(super) fn finish_defrag(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        set: &TextureSet,
    ) -> Result<(), GpuError> {
        let Some(c) = self.compactor.as_mut() else {
            return Ok(());
        };
        if let Some(done) = c.finish(ctx, mem, set, &mut self.mains)? {
            if done.moved > 0 {
                self.frame.defrag_passes += 1;
                self.frame.defrag_bytes_moved += done.bytes_moved;
            }
        }
        Ok(())
    }
}
