//! A frame's tile work: the plan, its pages and slots, the loads kept back
//! for after the submission, and what arrives and leaves.

use super::*;

/// The loads (with their `kinds`) to make before the frame's submission and
/// those that can wait for it (the kinds `late` defers), each sorted. A load
/// made now takes its parent along when the parent was kept back, so that
/// nothing the frame loads waits for a tile kept back.
pub(super) fn split_late(
    maps: &[MapTiles],
    loads: &[TileRef],
    kinds: &[LoadKind],
    late: LateSpare,
) -> (Vec<TileRef>, Vec<TileRef>) {
    let mut later: std::collections::BTreeSet<TileRef> = loads
        .iter()
        .zip(kinds.iter().chain(std::iter::repeat(&LoadKind::Wanted)))
        .filter(|(_, &k)| late.defers(k))
        .map(|(&t, _)| t)
        .collect();
    let mut now: Vec<TileRef> = loads
        .iter()
        .copied()
        .filter(|t| !later.contains(t))
        .collect();
    let mut k = 0;
    while k < now.len() {
        let t = now[k];
        k += 1;
        if t.level + 1 < maps[t.map as usize].tail_first {
            let parent = TileRef {
                level: t.level + 1,
                x: t.x / 2,
                y: t.y / 2,
                ..t
            };
            if later.remove(&parent) {
                now.push(parent);
            }
        }
    }
    now.sort_unstable();
    (now, later.into_iter().collect())
}

/// A frame's tile changes planned, their pages taken and bound; the reads,
/// copies and residency map left for [`TileStreamer::prepare`].
pub(super) struct Planned {
    /// The plan's figures so far.
    pub(super) frame: TileFrame,
    /// The loads made before the frame's submission (sorted).
    pub(super) loads: Vec<TileRef>,
    /// The spare loads kept back for after it, and their pages.
    pub(super) later: Vec<TileRef>,
    pub(super) late_binds: Vec<TileBind>,
}

/// Spare loads kept back by [`TileStreamer::prepare`] for
/// [`TileStreamer::after_submit`]: their pages are taken (and counted) but
/// neither bound nor filled.
pub(super) struct Deferred {
    /// Sorted (the staging layout: load `k` at slot `base + k`).
    pub(super) loads: Vec<TileRef>,
    /// Each load's page.
    pub(super) binds: Vec<TileBind>,
    /// The first staging slot after the frame's own loads'.
    pub(super) base: usize,
}

/// Where tile pages come from.
pub(super) struct PageMemory {
    /// The texture pool (its hard budget is the texture budget): pages,
    /// tails and atlases are allocated from it.
    pub(super) pool: PoolId,
    /// A page's bytes (with a page atlas, the largest slot's).
    pub(super) page: u64,
    /// The memory types every sparse image accepts.
    pub(super) type_bits: u32,
}

/// Which tiles are resident and on which pages; the spare pages and the
/// always-resident tails.
pub(super) struct Residency {
    /// Per map, per tile: the page a tile holds (sparse images).
    pub(super) pages: Vec<Vec<Option<Allocation>>>,
    /// Bytes of the allocations in `pages` (kept as they change: summing
    /// `pages` walks every tile of every map).
    pub(super) page_bytes: u64,
    /// Pages of evicted tiles, for the next loads: allocated from the pool
    /// and maybe still bound to the tile they held (module doc).
    pub(super) spare: Vec<Allocation>,
    /// Per map, per tile: resident now.
    pub(super) resident: Vec<Vec<bool>>,
    /// Maps whose file could not be read: they load no more tiles.
    pub(super) blocked: Vec<bool>,
    /// The always-resident pages: mip tails, and levels of one tile or less
    /// where the driver has no mip tail.
    pub(super) tails: Vec<Allocation>,
    /// Their bytes.
    pub(super) tail_bytes: u64,
    /// Per map, per tile: the page key of a resident tile's page
    /// ([`policy::TileInput::page_keys`]; `u64::MAX` for none).
    pub(super) page_keys: Vec<Vec<u64>>,
    /// Each page memory object's number in the page keys, by raw handle.
    pub(super) page_objects: HashMap<u64, u64>,
}

impl Residency {
    /// Nothing resident, no page, no map.
    pub(super) fn new() -> Self {
        Self {
            pages: Vec::new(),
            page_bytes: 0,
            spare: Vec::new(),
            resident: Vec::new(),
            blocked: Vec::new(),
            tails: Vec::new(),
            tail_bytes: 0,
            page_keys: Vec::new(),
            page_objects: HashMap::new(),
        }
    }

    /// A map of `tiles` tiles, none resident, none blocked.
    pub(super) fn add_map(&mut self, tiles: usize) {
        self.pages.push((0..tiles).map(|_| None).collect());
        self.resident.push(vec![false; tiles]);
        self.page_keys.push(vec![u64::MAX; tiles]);
        self.blocked.push(false);
    }
}

/// Tile work carried from one call to the next.
#[derive(Default)]
pub(super) struct Schedule {
    /// The next frame's plan, made after this frame's submission
    /// ([`TileStreamer::plan_ahead`]); its reads, copies and map wait for `prepare`.
    pub(super) planned: Option<Planned>,
    /// Spare loads whose pages are taken and whose binds, reads and copies
    /// wait for [`TileStreamer::after_submit`].
    pub(super) deferred: Option<Deferred>,
    /// Calls of [`TileStreamer::prepare`] after the pre-fill.
    pub(super) frames: u64,
}

/// The `--tune` settings of a tile streamer, fixed at start.
pub(super) struct Knobs {
    /// `--tune tiles.freeze-after`: after this many frames, residency stays as it is.
    pub(super) freeze_after: Option<u64>,
    /// `--tune tiles.plan-early=1`: the renderer plans each frame's tiles after
    /// the last frame's submission.
    pub(super) plan_early: bool,
    /// `--tune tiles.late-spare`: the kinds of spare loads that wait for the
    /// frame's submission.
    pub(super) late: LateSpare,
    /// `--tune tiles.ahead-share`: the look-ahead's loads per frame are at most
    /// `max_loads / ahead_share`.
    pub(super) ahead_share: usize,
    /// `--tune tiles.max-spare`: loads per frame of tiles the present view does not
    /// want, at most.
    pub(super) max_spare: usize,
    /// `--tune tiles.max-ring`: loads per frame of the margin and the ring, at most
    /// ([`DEFAULT_MAX_RING`]).
    pub(super) max_ring: usize,
    /// `--tune tiles.spare-hysteresis` ([`policy::TileInput::spare_hysteresis`]).
    pub(super) spare_hysteresis: u64,
    /// Not `--tune tiles.evict-by-pages=0`: the plan is given the page keys.
    pub(super) evict_by_pages: bool,
    /// `--tune tiles.cast-present`: the present view is cast into the look-ahead on
    /// every frame.
    pub(super) cast_present: bool,
    /// `--tune tiles.reversed-pages`: loads take pages in descending memory order.
    pub(super) reversed_pages: bool,
    /// `--tune tiles.pread=1`: tiles are read with `pread`, not from a
    /// mapping of the file.
    pub(super) pread: bool,
    /// `--tune fail-reads`: reads of files whose path contains this fail.
    pub(super) fail_reads: Option<String>,
}

impl Knobs {
    /// The settings of `tuning`, with the defaults of a page atlas (`atlas`)
    /// or of sparse tiles.
    pub(super) fn new(tuning: &crate::tuning::Tuning, atlas: bool) -> Self {
        let tt = tuning.tiles;
        Self {
            freeze_after: tt.freeze_after,
            plan_early: tt.plan_early,
            late: tt.late_spare,
            ahead_share: tt.ahead_share.unwrap_or(if atlas {
                ATLAS_AHEAD_SHARE
            } else {
                TILES_AHEAD_SHARE
            }),
            max_spare: tt.max_spare,
            max_ring: tt.max_ring,
            spare_hysteresis: tt.spare_hysteresis.unwrap_or(if atlas {
                crate::tuning::ATLAS_SPARE_HYSTERESIS
            } else {
                crate::tuning::SPARE_HYSTERESIS
            }),
            // A page atlas has no page keys: its slots are not pages of a
            // memory object.
            evict_by_pages: tt.evict_by_pages && !atlas,
            cast_present: tt.cast_present,
            reversed_pages: tt.reversed_pages,
            pread: tt.pread,
            fail_reads: tuning.fail_reads.clone(),
        }
    }
}

impl TileStreamer {
    /// Plans and carries out this frame's tile changes from `inputs`: the
    /// last frame's per-cell feedback and the look-ahead's cells.
    /// The spare loads `--tune tiles.late-spare` names wait for
    /// [`Self::after_submit`]. Where [`Self::plan_ahead`] planned this frame
    /// after the last one's submission, that plan is carried out and the
    /// inputs here are not used.
    pub fn prepare(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        inputs: PlanInputs<'_>,
        prefill: bool,
    ) -> Result<TileFrame, GpuError> {
        let planned = match self.schedule.planned.take() {
            Some(p) => Some(p),
            None => self.plan(ctx, mem, inputs, prefill, false)?,
        };
        match planned {
            Some(p) => self.finish(ctx, mem, p),
            None => Ok(TileFrame::default()),
        }
    }

    /// Whether the renderer should plan each frame's tiles after the last
    /// frame's submission ([`Self::plan_ahead`]; `--tune tiles.plan-early=1`).
    pub fn plans_early(&self) -> bool {
        self.knobs.plan_early
    }

    /// After a frame's submission, while the GPU draws it: plans the next
    /// frame's tile changes ([`Self::prepare`]'s inputs, from the feedback of
    /// the frame before this one), takes their pages and binds them, so that
    /// the plan's CPU time overlaps the GPU's frame and the binds start on the
    /// queue as soon as the frame ends, instead of after the renderer's wait
    /// for it. The binds wait on a semaphore signalled after everything
    /// submitted so far: an evicted tile's page goes to another tile only
    /// once the frame in flight, which may sample it, is done. The next
    /// [`Self::prepare`] reads, copies and maps the loads. Nothing the frame
    /// in flight reads changes before that: its residency map stays as it is.
    pub fn plan_ahead(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        inputs: PlanInputs<'_>,
    ) -> Result<(), GpuError> {
        if self.schedule.planned.is_none() {
            self.schedule.planned = self.plan(ctx, mem, inputs, false, true)?;
        }
        Ok(())
    }

    /// Whether a plan made by [`Self::plan_ahead`] waits for [`Self::prepare`].
    pub fn has_plan(&self) -> bool {
        self.schedule.planned.is_some()
    }

    /// The plan of [`Self::prepare`] (`early`: of [`Self::plan_ahead`], with
    /// the frame before still in flight): evictions, pages and binds.
    /// `None` when residency is frozen (`--tune tiles.freeze-after`).
    pub(super) fn plan(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        inputs: PlanInputs<'_>,
        prefill: bool,
        early: bool,
    ) -> Result<Option<Planned>, GpuError> {
        // Frozen after `n` frames; at 0 the pre-fill too (the mip tails alone).
        if self
            .knobs
            .freeze_after
            .is_some_and(|n| self.schedule.frames >= n)
        {
            return Ok(None);
        }
        if !prefill {
            self.schedule.frames += 1;
        }
        // Spare loads kept back by the last call, for a caller that did not
        // call `after_submit` after its frame's submission: done now.
        let flushed = self.after_submit(ctx, mem)?;
        // The last copies read staging and wrote pages that this frame may
        // give to other tiles: done before anything here touches them (in a
        // frame, the renderer's wait for the last frame covered them). Early,
        // the gate orders the binds after them on the GPU, and `finish`
        // waits before staging is written.
        let waiting = Instant::now();
        if !early {
            self.uploads.one_shot.wait(ctx)?;
        }
        let wait_seconds = waiting.elapsed().as_secs_f64();
        let (plan, plan_seconds) = self.run_policy(mem, inputs, prefill);
        let mut frame = TileFrame {
            wanted_bytes: plan.wanted * self.memory.page
                + self.residency.tail_bytes
                + self.atlas.as_ref().map_or(0, |a| a.set_tail_bytes),
            missing: plan.missing,
            wanted_loads: plan.wanted_loads.min(u64::from(u32::MAX)) as u32,
            plan_seconds,
            wait_seconds,
            ..TileFrame::default()
        };
        frame.absorb(&flushed);
        // The spare loads kept back last frame are bound, filled and in the
        // map from here on; their copies (and reads of staging) are done
        // before any page or staging slot is touched below (early: before
        // their pages are bound again, by the gate, and before staging is
        // written, in `finish`).
        let waiting = Instant::now();
        if !early {
            self.uploads.late_shot.wait(ctx)?;
        }
        frame.wait_seconds += waiting.elapsed().as_secs_f64();
        // Evictions: out of the map, their pages spare and still bound (the
        // module's "Stale bindings"): no unbind.
        self.retire(&plan.evictions);
        frame.evictions = plan.evictions.len() as u32;
        if self.atlas.is_some() {
            return Ok(Some(self.plan_slots(&plan, frame, prefill)));
        }
        self.plan_pages(ctx, mem, &plan, frame, prefill, early)
            .map(Some)
    }

    /// The policy's plan for `inputs`, from the pool's free pages (with a
    /// page atlas, each format's free slots), and the seconds it took.
    fn run_policy(
        &self,
        mem: &GpuMemory,
        inputs: PlanInputs<'_>,
        prefill: bool,
    ) -> (policy::TilePlan, f64) {
        let PlanInputs {
            wants,
            hits,
            ahead,
            cast,
            ahead_factor,
        } = inputs;
        let pressure = mem.pool_pressure(self.memory.pool);
        let free_bytes = pressure.map_or(0, |p| {
            p.pool_budget
                .unwrap_or(u64::MAX)
                .saturating_sub(p.pool_allocated_bytes)
        });
        // A page atlas: each format's slots are a class of their own.
        let free_by_class: Vec<u64> = self
            .atlas
            .as_ref()
            .map_or(Vec::new(), |a| a.slots.free_by_class());
        let classes: Vec<u8> = self
            .atlas
            .as_ref()
            .map_or(Vec::new(), |a| a.slots.classes());
        let input = TileInput {
            maps: &self.maps,
            g: self.residency_map.g,
            wants,
            hits,
            resident: &self.residency.resident,
            blocked: &self.residency.blocked,
            free_pages: match self.atlas.as_ref() {
                Some(a) => a.slots.free_total() as u64,
                None => free_bytes / self.memory.page.max(1) + self.residency.spare.len() as u64,
            },
            max_loads: self.uploads.max_loads,
            ahead_wants: ahead.0,
            ahead_hits: ahead.1,
            cast_wants: cast.0,
            cast_hits: cast.1,
            // A sixteenth of a frame's loads: the reads are waited for, and
            // over a look-ahead of 16 frames that is one frame's worth. Before
            // the first frame (the pre-fill), as many as a frame may load.
            max_ahead_loads: if prefill {
                self.uploads.max_loads
            } else {
                let share = self.uploads.max_loads.div_ceil(self.knobs.ahead_share);
                share
                    .saturating_mul(ahead_factor.max(1))
                    .min(self.uploads.max_loads)
            },
            max_spare_loads: if prefill {
                self.uploads.max_loads
            } else {
                self.knobs.max_spare
            },
            max_ring_loads: if prefill {
                self.uploads.max_loads
            } else {
                self.knobs.max_ring
            },
            spare_hysteresis: self.knobs.spare_hysteresis,
            page_keys: if self.knobs.evict_by_pages {
                &self.residency.page_keys
            } else {
                &[]
            },
            classes: &classes,
            free_by_class: &free_by_class,
        };
        let planning = Instant::now();
        let plan = policy::plan(&input);
        (plan, planning.elapsed().as_secs_f64())
    }

    /// A page atlas's loads: a slot each, in the atlas of the load's format:
    /// no bind.
    fn plan_slots(
        &mut self,
        plan: &policy::TilePlan,
        mut frame: TileFrame,
        prefill: bool,
    ) -> Planned {
        let paging = Instant::now();
        let (loads, kinds) = self.accept_slots(&plan.loads, &plan.kinds);
        frame.missing += (plan.loads.len() - loads.len()) as u64;
        let late = if prefill {
            LateSpare::None
        } else {
            self.knobs.late
        };
        let (now, later) = split_late(&self.maps, &loads, &kinds, late);
        self.take_slots(&now);
        self.take_slots(&later);
        frame.runs = loads.len() as u32;
        frame.page_seconds = paging.elapsed().as_secs_f64();
        Planned {
            frame,
            loads: now,
            later,
            late_binds: Vec::new(),
        }
    }

    /// Sparse images' loads: a page each. The candidates are every spare
    /// page and, where they are too few, new pages from the pool as long as
    /// it gives them; `pages::assign` picks which page each tile takes, so
    /// that runs of adjacent tiles get pages that follow each other in memory
    /// and bind as one region (`bind_regions`). Candidates left over stay
    /// spare. The frame's own loads are bound now (`early`: after the gate).
    fn plan_pages(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        plan: &policy::TilePlan,
        mut frame: TileFrame,
        prefill: bool,
        early: bool,
    ) -> Result<Planned, GpuError> {
        let mut binding = Duration::ZERO;
        let paging = Instant::now();
        let mut candidates = self.page_candidates(mem, plan.loads.len())?;
        let got = plan.loads.len().min(candidates.len());
        // The frame's own loads now; the spare ones after its submission
        // (outside the pre-fill, and unless `--tune tiles.late-spare` says no).
        let late = if prefill {
            LateSpare::None
        } else {
            self.knobs.late
        };
        let (now, later) = split_late(&self.maps, &plan.loads[..got], &plan.kinds, late);
        let taken = self
            .take_pages(&now, &mut candidates)
            .and_then(|(b, r)| Ok((b, r, self.take_pages(&later, &mut candidates)?)));
        self.residency.spare.extend(candidates);
        let (binds, now_runs, (late_binds, late_runs)) = taken?;
        frame.runs = now_runs + late_runs;
        frame.page_seconds = paging.elapsed().as_secs_f64();
        frame.missing += (plan.loads.len() - got) as u64;
        let loads = now;
        if !binds.is_empty() {
            let b = Instant::now();
            let bound = if early {
                self.sync
                    .signal_gate(ctx)
                    .and_then(|()| self.bind_tiles(ctx, &binds, Some(self.sync.gate)))
            } else {
                self.bind_tiles(ctx, &binds, None)
            };
            match bound {
                Ok(n) => frame.binds += n,
                Err(e) => {
                    self.retire(&loads);
                    self.retire(&later);
                    return Err(e);
                }
            }
            binding += b.elapsed();
        }
        frame.bind_seconds = binding.as_secs_f64();
        Ok(Planned {
            frame,
            loads,
            later,
            late_binds,
        })
    }

    /// Every spare page, then new pages from the pool until there are
    /// `wanted` or it refuses one (the pool's free bytes can hold fewer
    /// pages than they count: gaps between tails). On an error other than
    /// no room the candidates stay spare.
    fn page_candidates(
        &mut self,
        mem: &GpuMemory,
        wanted: usize,
    ) -> Result<Vec<Allocation>, GpuError> {
        let mut candidates: Vec<Allocation> = std::mem::take(&mut self.residency.spare);
        while candidates.len() < wanted {
            let opts =
                MemOptions::new(MemoryUsage::GpuOnly, "texture tile").in_pool(self.memory.pool);
            // The pool's free bytes can hold fewer pages than they count
            // (gaps between tails): a refusal ends the loads here.
            match mem.try_allocate_memory(
                self.memory.page,
                self.memory.page,
                self.memory.type_bits,
                &opts,
            ) {
                Ok(Some(a)) => candidates.push(a),
                Ok(None) => break,
                Err(e) if e.is_no_room() => break,
                Err(e) => {
                    self.residency.spare = candidates;
                    return Err(e);
                }
            }
        }
        Ok(candidates)
    }

    /// Carries out `planned`: the reads of its loads into staging, the
    /// residency map, and the copies (not waited for); its spare loads kept
    /// back for [`Self::after_submit`].
    pub(super) fn finish(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        planned: Planned,
    ) -> Result<TileFrame, GpuError> {
        let Planned {
            mut frame,
            loads,
            later,
            late_binds,
        } = planned;
        // Staging is written below: the copies that read it are done (waited
        // for already where the plan was made here).
        let waiting = Instant::now();
        self.uploads.one_shot.wait(ctx)?;
        self.uploads.late_shot.wait(ctx)?;
        frame.wait_seconds += waiting.elapsed().as_secs_f64();
        // Reads into staging, on worker threads, by runs of adjacent tiles
        // (`loads` is sorted).
        let runs = runs(&self.maps, &loads, self.run_cap());
        let started = Instant::now();
        let failed = self.read(&loads, &runs, 0);
        frame.read_seconds = started.elapsed().as_secs_f64();
        let runs = self.drop_failed(&loads, runs, &failed);
        // `loads` keeps its order (the staging layout); the runs left name
        // the tiles that arrived.
        let arrived = self.arrive(&loads, &runs);
        frame.upload_bytes = arrived * self.uploads.slot;
        frame.loads = arrived as u32;
        if self.residency_map.changed.iter().any(|&c| c) || self.residency_map.changed.is_empty() {
            let mapping = Instant::now();
            self.residency_map
                .refresh(&self.maps, &self.residency.resident);
            frame.map_seconds = mapping.elapsed().as_secs_f64();
        }
        if !later.is_empty() {
            self.schedule.deferred = Some(Deferred {
                base: loads.len(),
                loads: later,
                binds: late_binds,
            });
        }
        let copying = Instant::now();
        self.upload(ctx, mem, &loads, &runs, 0, false)?;
        frame.copy_seconds = copying.elapsed().as_secs_f64();
        Ok(frame)
    }

    /// After the frame's submission: binds, reads and copies the spare loads
    /// [`Self::prepare`] kept back (`--tune tiles.late-spare`), on the same queue,
    /// not waited for, and marks them resident: the next frame's residency
    /// map names them, and its submission comes after their copies. Nothing
    /// the frame in flight reads changes: the tiles are absent from its map,
    /// and their pages were spare or new. [`Self::prepare`] calls it for a
    /// caller that did not.
    pub fn after_submit(&mut self, ctx: &Context, mem: &GpuMemory) -> Result<TileFrame, GpuError> {
        let Some(Deferred { loads, binds, base }) = self.schedule.deferred.take() else {
            return Ok(TileFrame::default());
        };
        let mut frame = TileFrame::default();
        let b = Instant::now();
        match self.bind_tiles(ctx, &binds, None) {
            Ok(n) => frame.binds = n,
            Err(e) => {
                self.retire(&loads);
                return Err(e);
            }
        }
        frame.bind_seconds = b.elapsed().as_secs_f64();
        let runs = runs(&self.maps, &loads, self.run_cap());
        let started = Instant::now();
        let failed = self.read(&loads, &runs, base);
        frame.read_seconds = started.elapsed().as_secs_f64();
        let runs = self.drop_failed(&loads, runs, &failed);
        let arrived = self.arrive(&loads, &runs);
        frame.upload_bytes = arrived * self.uploads.slot;
        frame.loads = arrived as u32;
        let copying = Instant::now();
        self.upload(ctx, mem, &loads, &runs, base, true)?;
        frame.copy_seconds = copying.elapsed().as_secs_f64();
        Ok(frame)
    }

    /// Of `loads` (with their `kinds`), those the page atlas has free slots
    /// for, in the plan's order (the rest are missing this frame).
    pub(super) fn accept_slots(
        &self,
        loads: &[TileRef],
        kinds: &[LoadKind],
    ) -> (Vec<TileRef>, Vec<LoadKind>) {
        let Some(a) = self.atlas.as_ref() else {
            return (loads.to_vec(), kinds.to_vec());
        };
        let ok = a.slots.accept(loads.iter().map(|t| t.map as usize));
        let kinds = kinds.iter().chain(std::iter::repeat(&LoadKind::Wanted));
        loads
            .iter()
            .zip(kinds)
            .zip(ok)
            .filter(|(_, ok)| *ok)
            .map(|((&t, &k), _)| (t, k))
            .unzip()
    }

    /// Gives each of `loads` a slot of its map's atlas ([`Self::accept_slots`]
    /// left only loads that have one). The page table names it once the
    /// tile arrives ([`Self::set_resident`]).
    pub(super) fn take_slots(&mut self, loads: &[TileRef]) {
        let Some(a) = self.atlas.as_mut() else {
            return;
        };
        // (`page_bytes` counts sparse pages alone: the atlas's bytes are its
        // images', `bytes`.)
        for t in loads {
            let idx = self.maps[t.map as usize].index(t.level, t.x, t.y);
            let took = a.slots.take(t.map as usize, idx);
            debug_assert!(took.is_some(), "a load accepted without a slot: {t:?}");
        }
    }

    /// Takes a page for each of `loads` (sorted) from `candidates`, which
    /// keeps the rest; records them as the tiles' pages. The binds to make,
    /// and the runs of adjacent tiles among the loads.
    pub(super) fn take_pages(
        &mut self,
        loads: &[TileRef],
        candidates: &mut Vec<Allocation>,
    ) -> Result<(Vec<TileBind>, u32), GpuError> {
        if loads.is_empty() {
            return Ok((Vec::new(), 0));
        }
        let load_runs: Vec<u32> = runs(&self.maps, loads, u32::MAX)
            .iter()
            .map(|r| r.len)
            .collect();
        let at: Vec<pages::PageAt> = candidates
            .iter()
            .map(|a| (ash::vk::Handle::as_raw(a.vk_memory()), a.offset()))
            .collect();
        // `assign` gives each load its own candidate (the caller keeps the
        // loads within the candidates), so neither error below is reached.
        let internal = || GpuError::Other("tile streamer: pages::assign broke its contract".into());
        let pick = if self.knobs.reversed_pages {
            // The check's order: pages in descending memory order, most of
            // them others than `assign` would give (see `--tune tiles.reversed-pages`).
            let mut order: Vec<usize> = (0..at.len()).collect();
            order.sort_unstable_by_key(|&i| std::cmp::Reverse(at[i]));
            order.truncate(loads.len());
            Some(order)
        } else {
            pages::assign(&load_runs, &at, self.memory.page)
        };
        let Some(pick) = pick.filter(|p| p.len() == loads.len()) else {
            return Err(internal());
        };
        let mut slots: Vec<Option<Allocation>> =
            std::mem::take(candidates).into_iter().map(Some).collect();
        let mut binds = Vec::with_capacity(loads.len());
        for (&t, &i) in loads.iter().zip(&pick) {
            let Some(a) = slots.get_mut(i).and_then(Option::take) else {
                *candidates = slots.into_iter().flatten().collect();
                return Err(internal());
            };
            binds.push((t, Some((a.vk_memory(), a.offset()))));
            let idx = self.maps[t.map as usize].index(t.level, t.x, t.y);
            let objects = self.residency.page_objects.len() as u64;
            let object = *self
                .residency
                .page_objects
                .entry(ash::vk::Handle::as_raw(a.vk_memory()))
                .or_insert(objects);
            if let Some(k) = self
                .residency
                .page_keys
                .get_mut(t.map as usize)
                .and_then(|m| m.get_mut(idx))
            {
                *k = (object << 32) | (a.offset() / self.memory.page.max(1));
            }
            self.residency.page_bytes += a.size();
            self.residency.pages[t.map as usize][idx] = Some(a);
        }
        *candidates = slots.into_iter().flatten().collect();
        Ok((binds, load_runs.len() as u32))
    }

    /// The runs of `runs` whose reads did not fail (`failed`: indices into
    /// `runs` and why). A failed run's tiles are retired (their pages spare,
    /// still bound) and their map loads no more tiles, keeping what it has
    /// (the shaders never named these tiles).
    pub(super) fn drop_failed(
        &mut self,
        loads: &[TileRef],
        runs: Vec<Run>,
        failed: &[(usize, String)],
    ) -> Vec<Run> {
        if failed.is_empty() {
            return runs;
        }
        let mut lost = Vec::new();
        for (k, e) in failed {
            let run = runs[*k];
            let tiles = &loads[run.start..run.start + run.len as usize];
            let map = tiles[0].map as usize;
            if !self.residency.blocked[map] {
                self.residency.blocked[map] = true;
                eprintln!("streaming: {e}; texture {map} keeps the tiles it has");
            }
            lost.extend_from_slice(tiles);
        }
        self.retire(&lost);
        let bad: std::collections::HashSet<usize> = failed.iter().map(|f| f.0).collect();
        runs.into_iter()
            .enumerate()
            .filter(|(k, _)| !bad.contains(k))
            .map(|(_, r)| r)
            .collect()
    }

    /// Marks the tiles of `runs` (into `loads`) resident; how many.
    pub(super) fn arrive(&mut self, loads: &[TileRef], runs: &[Run]) -> u64 {
        let mut arrived = 0u64;
        for run in runs {
            for &t in &loads[run.start..run.start + run.len as usize] {
                self.set_resident(t, true);
                arrived += 1;
            }
        }
        arrived
    }

    /// Marks `tiles` absent and moves their pages to the spare pages, bound
    /// where they are (the module's "Stale bindings"): the shaders stop
    /// sampling them with the next residency map.
    pub(super) fn retire(&mut self, tiles: &[TileRef]) {
        for t in tiles {
            let idx = self.maps[t.map as usize].index(t.level, t.x, t.y);
            if let Some(a) = self.atlas.as_mut() {
                a.slots.release(t.map as usize, idx);
            }
            if let Some(a) = self.residency.pages[t.map as usize][idx].take() {
                self.residency.page_bytes -= a.size();
                self.residency.spare.push(a);
            }
            if let Some(k) = self
                .residency
                .page_keys
                .get_mut(t.map as usize)
                .and_then(|m| m.get_mut(idx))
            {
                *k = u64::MAX;
            }
            self.set_resident(*t, false);
        }
    }
}
