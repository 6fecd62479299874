//! The residency policy: a pure function from what each texture wants and has to
//! the changes to make this frame. No Vulkan, no I/O, no clock; the mechanism
//! (`mechanism.rs`) carries the changes out and reports back.
//!
//! # The model
//!
//! A texture has a mip chain of `levels` levels (0 finest). Its *tail* (levels
//! `tail..levels`, a few KiB) lives in an image of its own that is always
//! resident: it is what the texture samples when nothing finer is (the fallback).
//! Finer levels live in a *main* image holding levels `base..levels` for some
//! `base < tail`; `resident == tail` means there is no main image.
//!
//! Two changes exist:
//! - [`Change::Replace`]: a new main image with another base; the levels both
//!   images hold are copied on the GPU, the others read from the file. Until it
//!   completes, the old and the new image are both resident.
//! - [`Change::Drop`]: the texture falls back to its tail image at once; the old
//!   main image is freed after the frames in flight (it counts as *retiring*
//!   until then). It needs no new memory, so the policy can always make room.
//!
//! # The hard rule
//!
//! Tails + main images + images being filled + retiring images never exceed the
//! budget: a change is emitted only if the bytes it adds at once fit beside
//! everything resident at that moment (old images included), and nothing else
//! adds bytes before the policy runs again.
//!
//! # Choosing the target
//!
//! Every finer level a texture could get is a *step* with a key. Visible textures'
//! steps towards their wanted level have key `coverage x deficit` per byte: the
//! fraction of the frame whose pixels the step brings one level closer to the
//! level they want (so summed over a texture's steps, coverage times mip
//! deficit), over the bytes the step adds. Per byte, a coarse step of a texture
//! that covers little can rank above the finest step of one that covers much:
//! the budget buys the most pixel-levels. Levels already resident get
//! `keep_bonus` more (hysteresis: a level
//! is displaced only by a clearly better one), and so does the one level finer
//! than wanted when resident (a texture hovering between two levels keeps the
//! finer one). Levels only the look-ahead wants ([`TextureInput::prefetch`]: the
//! camera's coming poses) rank below every level the present view wants, by the
//! look-ahead's coverage per byte: prefetch spends only what the present view
//! leaves of the budget. Levels resident but wanted by neither (textures out of
//! view) rank below both, most recently seen first: a cache that is evicted first
//! when the budget is over-subscribed. Steps are taken greedily by key while
//! they fit the budget minus a reserve (the room one replacement needs beside
//! its old image), so the finest mips of the least-needed textures are the ones
//! left out.
//!
//! # Moving towards it
//!
//! Drops first (they free memory), then shrinks (a copy into a smaller image,
//! or a drop when even that does not fit, or when the texture is out of the
//! present view and the present view has grows to make; a texture the
//! present view sees falls back to its tail only for a grow the present view
//! wants, or when nothing else will free memory), then grows by priority:
//! the present view's wants first, then the look-ahead's, each within
//! the per-frame caps on operations and upload bytes (the first grow of a frame
//! may pass the byte cap, or a level larger than the cap would never load);
//! a grow larger than the upload cap allows goes part of the way. When a grow
//! fits the budget but not the pool's largest free range (fragmentation), it
//! waits, the texture out of view longest drops its main image so that its
//! range frees, and the plan says so ([`Plan::range_blocked`]): the streamer
//! then runs a defragmentation pass ([`defrag_pass_bytes`] decides when, and
//! how many bytes it may move).
#![forbid(unsafe_code)]

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// What the policy knows of one texture this frame.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TextureInput {
    /// Bytes of the main image holding levels `b..levels`, for `b` in `0..tail`
    /// (so `main_bytes.len() == tail`). Non-increasing.
    pub main_bytes: Vec<u64>,
    /// Bytes each level adds to an upload (file bytes of level `l`), `0..levels`.
    pub level_bytes: Vec<u64>,
    /// Bytes of the tail image (always resident).
    pub tail_bytes: u64,
    /// First resident level: `< tail` with a main image, `== tail` without.
    pub resident: u32,
    /// The base of a replacement in flight (its image counts as resident).
    pub pending: Option<u32>,
    /// The finest level the sampler wants, or `None` when not visible.
    pub wanted: Option<u32>,
    /// Screen coverage weight (fraction of the frame's pixels, 0..=1).
    pub coverage: f32,
    /// Fraction of the frame's pixels whose own finest wanted level is `l`, for `l`
    /// in `0..levels` (sums to `coverage`); empty: all of `coverage` at `wanted`.
    pub level_coverage: Vec<f32>,
    /// Frames since the texture was last visible (0 = visible now).
    pub unseen_frames: u32,
    /// The finest level the look-ahead wants (the camera's coming poses, the view
    /// after a coming cut), or `None`. Its levels rank below every level the
    /// present view wants and above cached ones: prefetch only spends what the
    /// present view leaves.
    pub prefetch: Option<u32>,
    /// The look-ahead's weight for this texture: the screen coverage it expects,
    /// scaled down the further ahead it is (0..=1).
    pub prefetch_coverage: f32,
}

impl TextureInput {
    /// The first level of the tail.
    pub fn tail(&self) -> u32 {
        self.main_bytes.len() as u32
    }

    /// Bytes of a main image with base `b` (0 for the tail alone).
    pub fn image_bytes(&self, b: u32) -> u64 {
        self.main_bytes.get(b as usize).copied().unwrap_or(0)
    }

    /// Bytes resident now: tail, main image, and the image of a change in flight.
    pub fn resident_bytes(&self) -> u64 {
        self.tail_bytes
            + self.image_bytes(self.resident)
            + self.pending.map_or(0, |p| self.image_bytes(p))
    }

    /// Fraction of the frame that gains a level when `level` becomes resident: the
    /// pixels that want `level` or finer.
    pub fn gain(&self, level: u32) -> f32 {
        let g = if self.level_coverage.is_empty() {
            match self.wanted {
                Some(w) if level >= w => self.coverage,
                _ => 0.0,
            }
        } else {
            self.level_coverage
                .iter()
                .take(level as usize + 1)
                .sum::<f32>()
        };
        g.max(self.coverage * 1e-3).max(1e-9)
    }

    /// Bytes the step to `level` adds (from a main image of base `level + 1`, or
    /// the tail alone).
    pub fn step_bytes(&self, level: u32) -> u64 {
        (self.image_bytes(level) - self.image_bytes(level + 1)).max(1)
    }

    /// The first level of the present view's share of a target: `target` itself
    /// when the present view wants it, else the level the present view wants
    /// (levels finer than that are prefetch or hysteresis), or `resident` when
    /// nothing is wanted now.
    pub fn present_target(&self, target: u32) -> u32 {
        match self.wanted {
            Some(w) => target.max(w.min(self.tail())),
            None => self.resident.max(target),
        }
    }

    /// File bytes read to go from `from` to the finer `to` (levels the old image lacks).
    pub fn upload_bytes(&self, from: u32, to: u32) -> u64 {
        (to..from.min(self.tail()))
            .map(|l| self.level_bytes.get(l as usize).copied().unwrap_or(0))
            .sum()
    }
}

/// The knobs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PolicyConfig {
    /// Resident texture bytes never exceed this.
    pub budget: u64,
    /// Kept free in the steady state so that a replacement's new image fits beside
    /// its old one (see [`default_reserve`]).
    pub reserve: u64,
    /// Replacements per frame, at most (drops are not counted: they only rewrite
    /// a descriptor).
    pub max_ops: usize,
    /// File bytes uploaded per frame, at most (the first grow of a frame may pass it).
    pub max_upload_bytes: u64,
    /// Hysteresis: the factor by which resident levels' keys are raised (0.5 = 50 %).
    pub keep_bonus: f32,
    /// Whether a dropped image is freed at once (no pending GPU work reads it), so
    /// its bytes are available to this frame's grows; else it retires like a
    /// replaced image and counts until the mechanism reports it freed.
    pub drop_frees_at_once: bool,
}

/// The reserve that lets any one texture grow beside its old image when every
/// other texture is at its target: the largest main image with base 1 (a grow
/// into base 0 holds at most that as its old image).
pub fn default_reserve(textures: &[TextureInput], budget: u64) -> u64 {
    let tails: u64 = textures.iter().map(|t| t.tail_bytes).sum();
    let r = textures
        .iter()
        .map(|t| t.image_bytes(1.min(t.tail())))
        .max()
        .unwrap_or(0);
    r.min(budget.saturating_sub(tails))
}

/// One change for the mechanism.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Replace texture `texture`'s main image (base `from`, `== tail` if none)
    /// with one of base `to` (`< tail`).
    Replace {
        /// Texture index.
        texture: usize,
        /// The current first resident level.
        from: u32,
        /// The new first resident level.
        to: u32,
    },
    /// Fall back to the tail image; the main image (base `from`) retires.
    Drop {
        /// Texture index.
        texture: usize,
        /// The current first resident level.
        from: u32,
    },
}

impl Change {
    /// The texture it changes.
    pub fn texture(&self) -> usize {
        match *self {
            Change::Replace { texture, .. } | Change::Drop { texture, .. } => texture,
        }
    }
}

/// The policy's answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// The changes to start this frame, in order.
    pub changes: Vec<Change>,
    /// Each texture's target first level (where it would settle).
    pub targets: Vec<u32>,
    /// File bytes the changes read.
    pub upload_bytes: u64,
    /// Resident bytes once the changes have started (before any old image retires).
    pub resident_after: u64,
    /// Whether a wanted grow fitted the budget by bytes but no free range of the
    /// pool (fragmentation): a trigger for a defragmentation pass.
    pub range_blocked: bool,
    /// Bytes of the most needed such grow's new image (one level finer than it
    /// holds): the free range a defragmentation pass should open; 0 when none.
    pub range_blocked_bytes: u64,
}

/// Resident bytes: every texture's tail, main and in-flight images, plus images
/// retiring after the frames in flight.
pub fn resident_bytes(textures: &[TextureInput], retiring: u64) -> u64 {
    textures
        .iter()
        .map(TextureInput::resident_bytes)
        .sum::<u64>()
        + retiring
}

/// Bytes every visible texture would take at its wanted level (tails included).
pub fn wanted_bytes(textures: &[TextureInput]) -> u64 {
    textures
        .iter()
        .filter_map(|t| {
            t.wanted
                .map(|w| t.tail_bytes + t.image_bytes(w.min(t.tail())))
        })
        .sum()
}

/// Coverage-weighted mean over visible textures of how many levels the resident
/// one is coarser than the wanted one (0 = everything visible at the level it wants).
pub fn mip_deficit(textures: &[TextureInput]) -> f64 {
    let (mut sum, mut weight) = (0.0f64, 0.0f64);
    for t in textures {
        if let (Some(w), c) = (t.wanted, t.coverage) {
            if c > 0.0 {
                sum += c as f64 * t.resident.saturating_sub(w) as f64;
                weight += c as f64;
            }
        }
    }
    if weight > 0.0 {
        sum / weight
    } else {
        0.0
    }
}

/// A step's rank: class first ([`CLASS_PRESENT`], [`CLASS_PREFETCH`],
/// [`CLASS_CACHED`]), then value.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Key {
    class: u8,
    value: f32,
    texture: usize,
    level: u32,
}

impl Eq for Key {}
impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        self.class
            .cmp(&other.class)
            .then(self.value.total_cmp(&other.value))
            // Ties: lower texture index first (deterministic).
            .then(other.texture.cmp(&self.texture))
            .then(self.level.cmp(&other.level))
    }
}
impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Steps the present view wants (and the hysteresis band next to them).
const CLASS_PRESENT: u8 = 3;
/// Steps only the look-ahead wants.
const CLASS_PREFETCH: u8 = 2;
/// Levels held that nothing wants: a cache, evicted first.
const CLASS_CACHED: u8 = 1;

/// The key of making level `level` resident (the texture then samples `level`),
/// or `None` when it is neither wanted nor worth keeping.
fn step_key(t: &TextureInput, i: usize, level: u32, keep_bonus: f32) -> Option<Key> {
    // What the texture holds, counting a change in flight as done.
    let held = t.pending.unwrap_or(t.resident);
    let is_held = level >= held;
    let bonus = if is_held { 1.0 + keep_bonus } else { 1.0 };
    // Per MiB, to keep the values in f32's comfortable range.
    let per_mib = |gain: f32| gain * bonus * (1u64 << 20) as f32 / t.step_bytes(level) as f32;
    let key = |class, value| Key {
        class,
        value,
        texture: i,
        level,
    };
    match t.wanted {
        Some(w) if level >= w => return Some(key(CLASS_PRESENT, per_mib(t.gain(level)))),
        // Hysteresis band: the level just finer than wanted, kept when held.
        Some(w) if is_held && level + 1 == w => {
            return Some(key(CLASS_PRESENT, per_mib(0.25 * t.gain(w))))
        }
        _ => {}
    }
    match t.prefetch {
        // Every prefetched level of a texture weighs the same per pixel (the
        // look-ahead has no per-level histogram): per byte, coarse steps first.
        Some(p) if level >= p => Some(key(CLASS_PREFETCH, per_mib(t.prefetch_coverage.max(1e-6)))),
        _ if is_held => Some(key(CLASS_CACHED, -(t.unseen_frames as f32))),
        _ => None,
    }
}

/// The target first level of every texture: steps taken greedily by key while
/// the steady-state bytes stay within `budget - reserve`.
pub fn targets(cfg: &PolicyConfig, textures: &[TextureInput]) -> Vec<u32> {
    let limit = cfg.budget.saturating_sub(cfg.reserve);
    let mut target: Vec<u32> = textures.iter().map(TextureInput::tail).collect();
    let mut used: u64 = textures.iter().map(|t| t.tail_bytes).sum();
    let mut heap = BinaryHeap::new();
    for (i, t) in textures.iter().enumerate() {
        if t.tail() > 0 {
            if let Some(k) = step_key(t, i, t.tail() - 1, cfg.keep_bonus) {
                heap.push(k);
            }
        }
    }
    // Whether a step the present view wants did not fit: the present view is
    // over-subscribed and leaves nothing to prefetch (prefetch steps filling the
    // slivers it leaves would be displaced again on the next frame: churn).
    let mut present_short = false;
    while let Some(k) = heap.pop() {
        let t = &textures[k.texture];
        let cur = target[k.texture];
        let extra = t.image_bytes(k.level) - t.image_bytes(cur);
        if k.class == CLASS_PREFETCH && present_short {
            continue;
        }
        if used + extra > limit {
            // This texture's finer steps are larger still: it stops here.
            present_short |= k.class == CLASS_PRESENT;
            continue;
        }
        used += extra;
        target[k.texture] = k.level;
        if k.level > 0 {
            if let Some(next) = step_key(t, k.texture, k.level - 1, cfg.keep_bonus) {
                heap.push(next);
            }
        }
    }
    target
}

/// [`plan`]'s running state: the bytes resident once this frame's changes have
/// started, the changes so far, and the per-frame caps' use.
struct PlanState<'a> {
    cfg: &'a PolicyConfig,
    textures: &'a [TextureInput],
    targets: &'a [u32],
    max_alloc: u64,
    total: u64,
    changes: Vec<Change>,
    upload: u64,
    busy: Vec<bool>,
    /// Grows started this frame.
    grown: usize,
    range_blocked: bool,
    range_blocked_bytes: u64,
    /// A grow the present view wants waits for room.
    present_waits: bool,
    /// Any grow (prefetch included) waits for room.
    any_waits: bool,
    /// The present view has grows to make.
    present_grows: bool,
    /// Memory frees by itself soon (an old image retiring, a drop this frame).
    frees_later: bool,
}

impl PlanState<'_> {
    /// The operation cap counts replacements (they allocate, copy and upload);
    /// drops only rewrite a descriptor.
    fn full(&self) -> bool {
        self.changes
            .iter()
            .filter(|c| matches!(c, Change::Replace { .. }))
            .count()
            >= self.cfg.max_ops
    }

    /// Texture `i` falls back to its tail.
    fn drop(&mut self, i: usize) {
        let t = &self.textures[i];
        self.changes.push(Change::Drop {
            texture: i,
            from: t.resident,
        });
        if self.cfg.drop_frees_at_once {
            self.total -= t.image_bytes(t.resident);
        }
        self.busy[i] = true;
    }

    /// The level a grow heads for: the present view's share of the target, or
    /// the whole target (prefetch included).
    fn goal(&self, i: usize, present: bool) -> u32 {
        let t = &self.textures[i];
        if present {
            t.present_target(self.targets[i])
        } else {
            self.targets[i]
        }
    }

    /// Whether a grow (of the present view, or any) cannot take one level now.
    fn grow_waits(&self, present_only: bool) -> bool {
        self.textures.iter().enumerate().any(|(i, t)| {
            !self.busy[i]
                && self.goal(i, present_only) < t.resident
                && self.total + t.image_bytes(t.resident - 1) > self.cfg.budget
        })
    }

    /// Shrinks of the textures the present view sees (`visible`) or of the others.
    fn shrinks(&mut self, visible: bool) {
        for (i, t) in self.textures.iter().enumerate() {
            if self.full() {
                break;
            }
            if self.busy[i]
                || t.wanted.is_some() != visible
                || t.resident >= t.tail()
                || self.targets[i] <= t.resident
            {
                continue;
            }
            let to = self.targets[i];
            let bytes = t.image_bytes(to);
            // A texture out of the present view gives its room back at once (a
            // drop: no replacement of the per-frame cap, no new image beside the
            // old one) while the present view has grows to make: they come first.
            let copy = visible || !self.present_grows;
            if copy && self.total + bytes <= self.cfg.budget && bytes <= self.max_alloc {
                self.total += bytes;
                self.changes.push(Change::Replace {
                    texture: i,
                    from: t.resident,
                    to,
                });
                self.busy[i] = true;
            } else if copy
                && self.frees_later
                && !(self.present_waits || (self.any_waits && !visible))
            {
                continue;
            } else {
                self.drop(i);
            }
        }
    }

    /// Grows towards the present view's wants (`present`) or the whole targets,
    /// most needed first, each as far as the caps allow.
    fn grows(&mut self, present: bool) {
        let mut grows: Vec<(f32, usize)> = self
            .textures
            .iter()
            .enumerate()
            .filter(|&(i, t)| !self.busy[i] && self.goal(i, present) < t.resident)
            .map(|(i, t)| {
                // Coverage x deficit: the pixel-levels the grow to the goal wins
                // (for a prefetch, the look-ahead's weight per level).
                let goal = self.goal(i, present);
                let won: f32 = if present {
                    (goal..t.resident).map(|l| t.gain(l)).sum()
                } else {
                    t.prefetch_coverage * (t.resident - goal) as f32
                };
                (won, i)
            })
            .collect();
        grows.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, i) in grows {
            if self.full() {
                break;
            }
            let t = &self.textures[i];
            // The finest level between the goal and the current one that fits the
            // byte cap, the budget and the pool's largest placeable range; at least
            // one level for the first grow of the frame.
            let mut chosen = None;
            for to in self.goal(i, present)..t.resident {
                let bytes = t.image_bytes(to);
                let up = t.upload_bytes(t.resident, to);
                let cap_ok = self.upload + up <= self.cfg.max_upload_bytes
                    || (self.grown == 0 && to + 1 == t.resident);
                if cap_ok && self.total + bytes <= self.cfg.budget && bytes <= self.max_alloc {
                    chosen = Some((to, bytes, up));
                    break;
                }
            }
            if chosen.is_none() {
                // Fits the budget but no free range is large enough: fragmentation.
                let to = t.resident - 1;
                let bytes = t.image_bytes(to);
                let blocked = self.total + bytes <= self.cfg.budget && bytes > self.max_alloc;
                if blocked && self.range_blocked_bytes == 0 {
                    // Grows come most needed first: the first blocked one is
                    // the one to make room for.
                    self.range_blocked_bytes = bytes;
                }
                self.range_blocked |= blocked;
            }
            if let Some((to, bytes, up)) = chosen {
                self.total += bytes;
                self.upload += up;
                self.grown += 1;
                self.busy[i] = true;
                self.changes.push(Change::Replace {
                    texture: i,
                    from: t.resident,
                    to,
                });
            }
        }
    }
}

/// The changes for this frame.
///
/// `retiring` is the bytes of old images not yet freed; `max_alloc` the largest
/// image the texture pool can place now (its largest free range, or a new block
/// or dedicated allocation if its budget has room): a replacement larger than
/// that fits by bytes but not by range, and waits.
pub fn plan(cfg: &PolicyConfig, textures: &[TextureInput], retiring: u64, max_alloc: u64) -> Plan {
    let targets = targets(cfg, textures);
    let mut st = PlanState {
        cfg,
        textures,
        targets: &targets,
        max_alloc,
        total: resident_bytes(textures, retiring),
        changes: Vec::new(),
        upload: 0,
        busy: textures.iter().map(|t| t.pending.is_some()).collect(),
        grown: 0,
        range_blocked: false,
        range_blocked_bytes: 0,
        present_waits: false,
        any_waits: false,
        present_grows: false,
        frees_later: false,
    };

    // 1. Drops: textures whose target is the tail alone. They free memory.
    for (i, t) in textures.iter().enumerate() {
        if !st.busy[i] && t.resident < t.tail() && targets[i] == t.tail() {
            st.drop(i);
        }
    }
    // 2. Shrinks: copy the levels kept into a smaller image when it fits beside
    // everything. Else drop to the tail (the grow back reads from the file) when a
    // grow waits for room or nothing will free by itself (no old image retiring,
    // no drop this frame); otherwise wait for memory to free.
    st.frees_later = retiring > 0 || !st.changes.is_empty();
    // A texture the present view sees is dropped to its tail for a grow the
    // present view wants (or when nothing frees by itself), not for a prefetch.
    st.present_waits = st.grow_waits(true);
    st.any_waits = st.grow_waits(false);
    st.present_grows = textures
        .iter()
        .enumerate()
        .any(|(i, t)| !st.busy[i] && t.present_target(targets[i]) < t.resident);
    // Textures out of the present view shrink first (drops while the present
    // view has grows to make: no operation of the cap, no new image).
    st.shrinks(false);
    // 3. Grows, most needed first, each as far as the caps allow: first towards
    // what the present view wants; then the shrinks of textures the present view
    // sees (a copy adds its new image this frame and frees the old one only
    // later: it makes no room for this frame's grows, so it must not take their
    // operations); then, with what the caps and the budget leave, the
    // look-ahead's prefetch. A texture grown in the first pass waits a frame for
    // its prefetch levels.
    st.grows(true);
    st.shrinks(true);
    st.grows(false);
    let PlanState {
        mut total,
        mut changes,
        upload,
        busy,
        range_blocked,
        range_blocked_bytes,
        ..
    } = st;
    let full = |changes: &Vec<Change>| {
        changes
            .iter()
            .filter(|c| matches!(c, Change::Replace { .. }))
            .count()
            >= cfg.max_ops
    };
    // 4. Fragmentation relief: when a wanted grow fits by bytes but not by range,
    // drop the main image of the texture out of view longest (its range frees).
    if range_blocked && !full(&changes) {
        let victim = textures
            .iter()
            .enumerate()
            .filter(|&(i, t)| {
                !busy[i] && t.wanted.is_none() && t.prefetch.is_none() && t.resident < t.tail()
            })
            .max_by_key(|&(i, t)| (t.unseen_frames, std::cmp::Reverse(i)));
        if let Some((i, t)) = victim {
            changes.push(Change::Drop {
                texture: i,
                from: t.resident,
            });
            if cfg.drop_frees_at_once {
                total -= t.image_bytes(t.resident);
            }
        }
    }
    Plan {
        changes,
        targets,
        upload_bytes: upload,
        resident_after: total,
        range_blocked,
        range_blocked_bytes,
    }
}

/// The texture pool's fragmentation: 1 - largest free range / free bytes in its
/// blocks (0 when nothing is free, or the free bytes are one range).
pub fn fragmentation(largest_free_range: u64, free_in_blocks: u64) -> f64 {
    if free_in_blocks == 0 {
        return 0.0;
    }
    (1.0 - largest_free_range.min(free_in_blocks) as f64 / free_in_blocks as f64).clamp(0.0, 1.0)
}

/// What decides whether a defragmentation pass runs this frame, and how far.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DefragInput {
    /// Bytes a pass may move per frame (`--defrag-budget`); 0 turns passes off.
    pub cap: u64,
    /// The texture budget.
    pub budget: u64,
    /// Texture bytes resident now (old images waiting to be freed included).
    pub resident: u64,
    /// Free bytes inside the pool's blocks.
    pub free_in_blocks: u64,
    /// The pool's largest free range.
    pub largest_free_range: u64,
    /// This frame's policy found a wanted grow blocked by fragmentation.
    pub blocked: bool,
    /// Texture allocations that failed this frame although the pool had the bytes.
    pub failures: u32,
    /// Fragmentation above which a pass runs on its own.
    pub threshold: f64,
    /// Free bytes below which fragmentation alone does not matter (nothing
    /// worth placing would fit anyway).
    pub min_free: u64,
}

/// The fragmentation above which a pass runs without a blocked allocation.
pub const DEFRAG_THRESHOLD: f64 = 0.5;

/// The byte limit of this frame's defragmentation pass; 0 for no pass.
///
/// A pass runs when fragmentation blocked a wanted allocation (the policy's
/// `range_blocked`, or an allocation that failed although the pool had the
/// bytes) or when the pool's fragmentation passes the threshold with enough
/// free bytes for it to matter. Its moves place a second copy of each image
/// beside the first until the frame is done, so the limit is the per-frame cap
/// and never more than the budget has left beside what is resident.
pub fn defrag_pass_bytes(i: &DefragInput) -> u64 {
    if i.cap == 0 {
        return 0;
    }
    let frag = fragmentation(i.largest_free_range, i.free_in_blocks);
    let wanted = i.blocked
        || i.failures > 0
        || (frag > i.threshold && i.free_in_blocks >= i.min_free.max(1));
    if !wanted {
        return 0;
    }
    i.cap.min(i.budget.saturating_sub(i.resident))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A square texture of `size`² texels, `bpp` bytes per texel (BC7 ≈ 1),
    /// tail from `tail_size` texels down.
    fn texture(size: u32, bpp: u64, tail_size: u32) -> TextureInput {
        let levels = size.trailing_zeros() + 1;
        let level_bytes: Vec<u64> = (0..levels)
            .map(|l| ((size >> l) as u64).pow(2) * bpp)
            .collect();
        let tail = levels - tail_size.min(size).trailing_zeros() - 1;
        let main_bytes: Vec<u64> = (0..tail)
            .map(|b| level_bytes[b as usize..].iter().sum())
            .collect();
        let tail_bytes = level_bytes[tail as usize..].iter().sum();
        TextureInput {
            main_bytes,
            level_bytes,
            tail_bytes,
            resident: tail,
            ..TextureInput::default()
        }
    }

    fn cfg(budget: u64) -> PolicyConfig {
        PolicyConfig {
            budget,
            reserve: 0,
            max_ops: 64,
            max_upload_bytes: u64::MAX,
            keep_bonus: 0.5,
            drop_frees_at_once: false,
        }
    }

    /// Applies a plan as if every change completed at once and old images were freed.
    fn settle(textures: &mut [TextureInput], plan: &Plan) {
        for c in &plan.changes {
            match *c {
                Change::Replace { texture, to, .. } => textures[texture].resident = to,
                Change::Drop { texture, .. } => {
                    textures[texture].resident = textures[texture].tail()
                }
            }
        }
    }

    #[test]
    fn tail_level_counts() {
        let t = texture(1024, 1, 16);
        assert_eq!(t.tail(), 6); // 1024..32 in the main image, 16..1 the tail
        assert_eq!(t.tail_bytes, 256 + 64 + 16 + 4 + 1);
        assert_eq!(t.upload_bytes(6, 4), 64 * 64 + 32 * 32);
        assert_eq!(t.upload_bytes(5, 4), 64 * 64);
    }

    #[test]
    fn grows_to_wanted_when_budget_allows() {
        let mut ts = vec![texture(1024, 1, 16), texture(1024, 1, 16)];
        ts[0].wanted = Some(0);
        ts[0].coverage = 0.5;
        ts[1].wanted = Some(3);
        ts[1].coverage = 0.1;
        let p = plan(&cfg(4 << 20), &ts, 0, u64::MAX);
        assert_eq!(p.targets, vec![0, 3]);
        settle(&mut ts, &p);
        assert_eq!(mip_deficit(&ts), 0.0);
    }

    #[test]
    fn coverage_wins_when_over_subscribed() {
        // Room for one texture at level 0 (1.33 MiB) but not two.
        let mut ts = vec![texture(1024, 1, 16), texture(1024, 1, 16)];
        for t in &mut ts {
            t.wanted = Some(0);
        }
        ts[0].coverage = 0.05;
        ts[1].coverage = 0.4;
        let p = plan(&cfg(2 << 20), &ts, 0, u64::MAX);
        assert_eq!(p.targets[1], 0, "{p:?}");
        assert!(p.targets[0] > 0, "{p:?}");
        // The least needed gets the coarser level, but not only the tail: level 1 fits.
        assert_eq!(p.targets[0], 1);
    }

    #[test]
    fn out_of_view_is_evicted_first() {
        let mut ts = vec![texture(1024, 1, 16), texture(1024, 1, 16)];
        ts[0].resident = 0;
        ts[0].wanted = None;
        ts[0].unseen_frames = 30;
        ts[1].wanted = Some(0);
        ts[1].coverage = 0.2;
        let p = plan(&cfg(2 << 20), &ts, 0, u64::MAX);
        assert_eq!(p.targets[1], 0);
        assert!(p.targets[0] >= 1);
        // With room, the cached one stays.
        let p = plan(&cfg(8 << 20), &ts, 0, u64::MAX);
        assert_eq!(p.targets, vec![0, 0]);
    }

    #[test]
    fn replacement_waits_for_room() {
        // One texture at level 1; growing to 0 needs both images at once.
        let mut t = texture(1024, 1, 16);
        t.resident = 1;
        t.wanted = Some(0);
        t.coverage = 1.0;
        let full0 = t.image_bytes(0);
        let both = t.tail_bytes + t.image_bytes(1) + full0;
        let p = plan(&cfg(both - 1), std::slice::from_ref(&t), 0, u64::MAX);
        assert_eq!(p.targets, vec![0]);
        assert!(p.changes.is_empty(), "{p:?}");
        let p = plan(&cfg(both), std::slice::from_ref(&t), 0, u64::MAX);
        assert_eq!(
            p.changes,
            vec![Change::Replace {
                texture: 0,
                from: 1,
                to: 0
            }]
        );
        // Fits by bytes but not by range: waits.
        let p = plan(&cfg(both), std::slice::from_ref(&t), 0, full0 - 1);
        assert!(p.changes.is_empty());
    }

    #[test]
    fn fragmentation_drops_a_cached_texture() {
        let mut ts = vec![texture(1024, 1, 16), texture(1024, 1, 16)];
        ts[0].resident = 0;
        ts[0].unseen_frames = 10;
        ts[1].resident = 2;
        ts[1].wanted = Some(0);
        ts[1].coverage = 0.5;
        // Room by bytes, but nothing larger than a level-3 image can be placed.
        let max_alloc = ts[1].image_bytes(3);
        let p = plan(&cfg(16 << 20), &ts, 0, max_alloc);
        assert_eq!(
            p.changes,
            vec![Change::Drop {
                texture: 0,
                from: 0
            }]
        );
    }

    #[test]
    fn upload_cap_goes_part_of_the_way() {
        let mut t = texture(1024, 1, 16);
        t.wanted = Some(0);
        t.coverage = 1.0;
        let mut c = cfg(8 << 20);
        c.max_upload_bytes = 128 * 128 + 64 * 64 + 32 * 32;
        let p = plan(&c, std::slice::from_ref(&t), 0, u64::MAX);
        assert_eq!(
            p.changes,
            vec![Change::Replace {
                texture: 0,
                from: 6,
                to: 3
            }]
        );
        assert!(p.upload_bytes <= c.max_upload_bytes);
        // A cap below one level still moves one level.
        c.max_upload_bytes = 1;
        let p = plan(&c, std::slice::from_ref(&t), 0, u64::MAX);
        assert_eq!(
            p.changes,
            vec![Change::Replace {
                texture: 0,
                from: 6,
                to: 5
            }]
        );
    }

    #[test]
    fn prefetch_ranks_below_the_present_view() {
        // Room for one texture at level 0 (1.33 MiB) but not two: the one the
        // present view wants gets it, however little it covers and however much
        // the look-ahead expects of the other.
        let mut ts = vec![texture(1024, 1, 16), texture(1024, 1, 16)];
        ts[0].wanted = Some(0);
        ts[0].coverage = 0.01;
        ts[1].prefetch = Some(0);
        ts[1].prefetch_coverage = 1.0;
        let p = plan(&cfg(2 << 20), &ts, 0, u64::MAX);
        assert_eq!(p.targets[0], 0, "{p:?}");
        assert!(p.targets[1] > 0, "{p:?}");
        // The prefetch takes what is left: level 1 of the second still fits.
        assert_eq!(p.targets[1], 1, "{p:?}");
        // With room for both, the look-ahead's texture is loaded to its level.
        let p = plan(&cfg(8 << 20), &ts, 0, u64::MAX);
        assert_eq!(p.targets, vec![0, 0]);
        // When the present view is over-subscribed (its level 0 does not fit),
        // it leaves nothing to prefetch, not even the slivers.
        let p = plan(&cfg(1 << 20), &ts, 0, u64::MAX);
        assert!(p.targets[0] > 0, "{p:?}");
        assert_eq!(p.targets[1], ts[1].tail(), "{p:?}");
        // Without a look-ahead, a texture nothing wants stays at its tail.
        ts[1].prefetch = None;
        let p = plan(&cfg(8 << 20), &ts, 0, u64::MAX);
        assert_eq!(p.targets, vec![0, ts[1].tail()]);
    }

    #[test]
    fn present_grows_take_the_caps_first() {
        // One replacement a frame: the present view's grow goes first even when
        // the look-ahead's texture expects more coverage.
        let mut ts = vec![texture(1024, 1, 16), texture(1024, 1, 16)];
        ts[0].prefetch = Some(0);
        ts[0].prefetch_coverage = 1.0;
        ts[1].wanted = Some(2);
        ts[1].coverage = 0.05;
        let mut c = cfg(8 << 20);
        c.max_ops = 1;
        let p = plan(&c, &ts, 0, u64::MAX);
        assert_eq!(
            p.changes,
            vec![Change::Replace {
                texture: 1,
                from: 6,
                to: 2
            }]
        );
        // The upload cap too: the present grow uses it, the prefetch waits.
        let mut c = cfg(8 << 20);
        c.max_upload_bytes = ts[1].upload_bytes(6, 2);
        let p = plan(&c, &ts, 0, u64::MAX);
        assert_eq!(p.changes.len(), 1, "{p:?}");
        assert_eq!(p.changes[0].texture(), 1);
        // A texture the present view wants coarser than the look-ahead grows to
        // its present level in the first pass and to the prefetch level after.
        let mut t = texture(1024, 1, 16);
        t.wanted = Some(3);
        t.coverage = 0.2;
        t.prefetch = Some(1);
        t.prefetch_coverage = 0.5;
        assert_eq!(t.present_target(1), 3);
        let mut c = cfg(8 << 20);
        c.max_upload_bytes = t.upload_bytes(6, 3);
        let p = plan(&c, std::slice::from_ref(&t), 0, u64::MAX);
        assert_eq!(p.targets, vec![1]);
        assert_eq!(
            p.changes,
            vec![Change::Replace {
                texture: 0,
                from: 6,
                to: 3
            }]
        );
        let mut ts = vec![t];
        settle(&mut ts, &p);
        let p = plan(&c, &ts, 0, u64::MAX);
        assert_eq!(
            p.changes,
            vec![Change::Replace {
                texture: 0,
                from: 3,
                to: 2
            }]
        );
    }

    #[test]
    fn hovering_between_levels_does_not_flap() {
        let mut ts = vec![texture(1024, 1, 16)];
        ts[0].coverage = 0.3;
        ts[0].wanted = Some(2);
        let c = cfg(8 << 20);
        let p = plan(&c, &ts, 0, u64::MAX);
        settle(&mut ts, &p);
        assert_eq!(ts[0].resident, 2);
        for f in 0..20 {
            ts[0].wanted = Some(if f % 2 == 0 { 3 } else { 2 });
            let p = plan(&c, &ts, 0, u64::MAX);
            assert!(p.changes.is_empty(), "frame {f}: {p:?}");
        }
    }

    /// A per-level coverage: half at the wanted level, half one level coarser.
    fn spread(t: &mut TextureInput) {
        t.level_coverage.clear();
        if let Some(w) = t.wanted {
            let levels = t.level_bytes.len();
            t.level_coverage = vec![0.0; levels];
            t.level_coverage[(w as usize).min(levels - 1)] += t.coverage * 0.5;
            t.level_coverage[(w as usize + 1).min(levels - 1)] += t.coverage * 0.5;
        }
    }

    fn arb_texture() -> impl Strategy<Value = TextureInput> {
        (
            4u32..=10,
            1u64..=4,
            prop::option::of(0u32..10),
            0.0f32..1.0,
            0u32..100,
            prop::option::of((0u32..10, 0.0f32..1.0)),
        )
            .prop_map(|(log, bpp, wanted, coverage, unseen, prefetch)| {
                let mut t = texture(1 << log, bpp, 8);
                t.wanted = wanted.map(|w| w.min(t.tail()));
                t.coverage = if t.wanted.is_some() { coverage } else { 0.0 };
                t.unseen_frames = if t.wanted.is_some() { 0 } else { unseen };
                if let Some((p, c)) = prefetch {
                    t.prefetch = Some(p.min(t.tail()));
                    t.prefetch_coverage = c;
                }
                if log % 2 == 0 {
                    spread(&mut t);
                }
                t
            })
    }

    /// A mechanism that completes changes after a random delay and frees old
    /// images one frame after their replacement completes.
    struct Sim {
        textures: Vec<TextureInput>,
        /// (texture, to, frames left)
        in_flight: Vec<(usize, u32, u32)>,
        /// (bytes, frames left)
        retiring: Vec<(u64, u32)>,
    }

    impl Sim {
        fn retiring(&self) -> u64 {
            self.retiring.iter().map(|r| r.0).sum()
        }
        fn total(&self) -> u64 {
            resident_bytes(&self.textures, self.retiring())
        }
        fn start(&mut self, plan: &Plan, delays: &[u32], drop_frees_at_once: bool) {
            for (k, c) in plan.changes.iter().enumerate() {
                match *c {
                    Change::Replace { texture, to, from } => {
                        assert_eq!(self.textures[texture].resident, from);
                        assert!(self.textures[texture].pending.is_none());
                        self.textures[texture].pending = Some(to);
                        self.in_flight.push((texture, to, delays[k % delays.len()]));
                    }
                    Change::Drop { texture, from } => {
                        let t = &mut self.textures[texture];
                        assert_eq!(t.resident, from);
                        if !drop_frees_at_once {
                            self.retiring.push((t.image_bytes(from), 1));
                        }
                        t.resident = t.tail();
                    }
                }
            }
        }
        /// Next frame: frees, then completions (whose old images retire).
        fn advance(&mut self) {
            self.retiring.retain_mut(|r| {
                if r.1 == 0 {
                    false
                } else {
                    r.1 -= 1;
                    true
                }
            });
            let mut still = Vec::new();
            for (i, to, left) in self.in_flight.drain(..) {
                if left == 0 {
                    let t = &mut self.textures[i];
                    self.retiring.push((t.image_bytes(t.resident), 1));
                    t.resident = to;
                    t.pending = None;
                } else {
                    still.push((i, to, left - 1));
                }
            }
            self.in_flight = still;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Random textures, wants changing every few frames, replacements in
        /// flight for random times: resident bytes never exceed the budget, caps
        /// hold, and every change starts from the texture's real state.
        #[test]
        fn never_over_budget(
            textures in prop::collection::vec(arb_texture(), 1..12),
            budget_frac in 0.0f64..1.2,
            max_ops in 1usize..8,
            cap in 1u64..(2 << 20),
            delays in prop::collection::vec(0u32..3, 1..6),
            wants in prop::collection::vec(prop::collection::vec(prop::option::of((0u32..10, 0.0f32..1.0)), 12), 1..6),
            frames in 5usize..40,
            drop_frees_at_once in any::<bool>(),
        ) {
            let tails: u64 = textures.iter().map(|t| t.tail_bytes).sum();
            let full: u64 = textures.iter().map(|t| t.tail_bytes + t.image_bytes(0)).sum();
            let budget = tails + ((full - tails) as f64 * budget_frac) as u64;
            let mut c = PolicyConfig { budget, reserve: 0, max_ops, max_upload_bytes: cap, keep_bonus: 0.5, drop_frees_at_once };
            c.reserve = default_reserve(&textures, budget);
            let mut sim = Sim { textures, in_flight: vec![], retiring: vec![] };
            for f in 0..frames {
                let w = &wants[(f / 4) % wants.len()];
                // The look-ahead: what the next group of frames will want.
                let ahead = &wants[(f / 4 + 1) % wants.len()];
                for (i, t) in sim.textures.iter_mut().enumerate() {
                    match w[i % w.len()] {
                        Some((lvl, cov)) => { t.wanted = Some(lvl.min(t.tail())); t.coverage = cov; t.unseen_frames = 0; }
                        None => { t.wanted = None; t.coverage = 0.0; t.unseen_frames += 1; }
                    }
                    t.prefetch = ahead[i % ahead.len()].map(|(lvl, _)| lvl.min(t.tail()));
                    t.prefetch_coverage = ahead[i % ahead.len()].map_or(0.0, |(_, cov)| cov);
                    if i % 2 == 0 {
                        spread(t);
                    }
                }
                prop_assert!(sim.total() <= budget);
                let p = plan(&c, &sim.textures, sim.retiring(), u64::MAX);
                let replaces = p.changes.iter().filter(|c| matches!(c, Change::Replace { .. })).count();
                prop_assert!(replaces <= max_ops);
                let grows = p.changes.iter().filter(|c| matches!(c, Change::Replace{from, to, ..} if to < from)).count();
                prop_assert!(p.upload_bytes <= cap || grows == 1, "{} > {cap} with {grows} grows", p.upload_bytes);
                let mut seen = std::collections::HashSet::new();
                for ch in &p.changes { prop_assert!(seen.insert(ch.texture()), "two changes to one texture"); }
                sim.start(&p, &delays, drop_frees_at_once);
                prop_assert!(sim.total() <= budget, "after start: {} > {budget}", sim.total());
                prop_assert_eq!(sim.total(), p.resident_after);
                sim.advance();
                prop_assert!(sim.total() <= budget);
            }
        }

        /// With wants that stay put, the textures settle and then nothing changes;
        /// once settled, visible textures sit at their targets.
        #[test]
        fn settles_and_stays(
            textures in prop::collection::vec(arb_texture(), 1..10),
            budget_frac in 0.0f64..1.2,
            drop_frees_at_once in any::<bool>(),
        ) {
            let tails: u64 = textures.iter().map(|t| t.tail_bytes).sum();
            let full: u64 = textures.iter().map(|t| t.tail_bytes + t.image_bytes(0)).sum();
            let budget = tails + ((full - tails) as f64 * budget_frac) as u64;
            let mut c = PolicyConfig { budget, reserve: 0, max_ops: 4, max_upload_bytes: 1 << 20, keep_bonus: 0.5, drop_frees_at_once };
            c.reserve = default_reserve(&textures, budget);
            let mut sim = Sim { textures, in_flight: vec![], retiring: vec![] };
            let mut quiet = 0;
            for _ in 0..200 {
                let p = plan(&c, &sim.textures, sim.retiring(), u64::MAX);
                if p.changes.is_empty() && sim.in_flight.is_empty() && sim.retiring.is_empty() {
                    quiet += 1;
                    if quiet > 3 { break; }
                } else {
                    prop_assert!(quiet == 0, "changed again after settling: {:?}", p.changes);
                }
                sim.start(&p, &[0], drop_frees_at_once);
                sim.advance();
            }
            prop_assert!(quiet > 3, "never settled");
            let t = targets(&c, &sim.textures);
            for (i, tex) in sim.textures.iter().enumerate() {
                prop_assert_eq!(tex.resident, t[i]);
            }
        }

        /// The look-ahead never takes from the present view: with or without
        /// prefetch wants, the targets of every texture the present view sees
        /// agree on the part it wants (prefetch steps rank below every present step, and a
        /// present step's successor is never a prefetch one's), and a texture
        /// only the look-ahead wants never gets finer than its prefetch level
        /// (nor than held: cached levels stay a cache).
        #[test]
        fn lookahead_never_takes_from_the_present(
            textures in prop::collection::vec(arb_texture(), 1..12),
            residents in prop::collection::vec(0u32..8, 12),
            budget_frac in 0.0f64..1.2,
        ) {
            let tails: u64 = textures.iter().map(|t| t.tail_bytes).sum();
            let full: u64 = textures.iter().map(|t| t.tail_bytes + t.image_bytes(0)).sum();
            let budget = tails + ((full - tails) as f64 * budget_frac) as u64;
            let mut with = textures;
            for (t, &r) in with.iter_mut().zip(&residents) {
                t.resident = r.min(t.tail());
            }
            let mut c = cfg(budget);
            c.reserve = default_reserve(&with, budget);
            let without: Vec<TextureInput> = with
                .iter()
                .map(|t| TextureInput { prefetch: None, prefetch_coverage: 0.0, ..t.clone() })
                .collect();
            let (tw, to) = (targets(&c, &with), targets(&c, &without));
            for (i, t) in with.iter().enumerate() {
                if t.wanted.is_some() {
                    prop_assert_eq!(t.present_target(tw[i]), t.present_target(to[i]), "texture {}: {:?} / {:?}", i, tw, to);
                } else {
                    let floor = t.prefetch.unwrap_or(t.tail()).min(t.resident);
                    prop_assert!(tw[i] >= floor, "texture {i} target {} finer than prefetch/held {floor}", tw[i]);
                }
            }
            // The steady state stays within the budget.
            let steady: u64 = with.iter().zip(&tw).map(|(t, &b)| t.tail_bytes + t.image_bytes(b)).sum();
            prop_assert!(steady <= budget.max(tails));
        }

        /// Priority: a visible texture is never left coarser than wanted while a
        /// less covered one is finer than its own want... within one plan's targets:
        /// when two textures want the same level and have the same size, the one
        /// with more coverage gets at least as fine a target.
        #[test]
        fn more_coverage_never_coarser(
            log in 6u32..=10,
            want in 0u32..4,
            c0 in 0.01f32..1.0,
            c1 in 0.01f32..1.0,
            budget_frac in 0.0f64..1.0,
        ) {
            let mut ts = vec![texture(1 << log, 1, 8), texture(1 << log, 1, 8)];
            ts[0].wanted = Some(want); ts[0].coverage = c0;
            ts[1].wanted = Some(want); ts[1].coverage = c1;
            let tails: u64 = ts.iter().map(|t| t.tail_bytes).sum();
            let full: u64 = ts.iter().map(|t| t.tail_bytes + t.image_bytes(0)).sum();
            let budget = tails + ((full - tails) as f64 * budget_frac) as u64;
            let t = targets(&cfg(budget), &ts);
            if c0 > c1 { prop_assert!(t[0] <= t[1], "{t:?}"); }
            if c1 > c0 { prop_assert!(t[1] <= t[0], "{t:?}"); }
        }

        /// The defragmentation pass limit: never over the per-frame cap nor over
        /// what the budget leaves beside the resident bytes; zero when the cap is
        /// zero; and a blocked grow or a failed allocation always asks for a pass
        /// when there is room for one.
        #[test]
        fn defrag_pass_within_cap_and_budget(
            cap in 0u64..(64 << 20),
            budget in 1u64..(256 << 20),
            resident_frac in 0.0f64..1.2,
            free in 0u64..(64 << 20),
            largest_frac in 0.0f64..1.0,
            blocked in any::<bool>(),
            failures in 0u32..3,
            threshold in 0.0f64..1.0,
        ) {
            let resident = (budget as f64 * resident_frac) as u64;
            let input = DefragInput {
                cap,
                budget,
                resident,
                free_in_blocks: free,
                largest_free_range: (free as f64 * largest_frac) as u64,
                blocked,
                failures,
                threshold,
                min_free: budget / 64,
            };
            let bytes = defrag_pass_bytes(&input);
            prop_assert!(bytes <= cap);
            prop_assert!(resident + bytes <= budget.max(resident));
            if cap == 0 { prop_assert_eq!(bytes, 0); }
            if (blocked || failures > 0) && resident < budget && cap > 0 {
                prop_assert!(bytes > 0);
            }
            let f = fragmentation(input.largest_free_range, free);
            prop_assert!((0.0..=1.0).contains(&f));
        }
    }

    #[test]
    fn defrag_trigger() {
        let base = DefragInput {
            cap: 8 << 20,
            budget: 64 << 20,
            resident: 40 << 20,
            free_in_blocks: 16 << 20,
            largest_free_range: 12 << 20,
            threshold: DEFRAG_THRESHOLD,
            min_free: 1 << 20,
            ..DefragInput::default()
        };
        // One large free range: no pass.
        assert_eq!(fragmentation(12 << 20, 16 << 20), 0.25);
        assert_eq!(defrag_pass_bytes(&base), 0);
        // Fragmented past the threshold: a pass of the cap.
        let split = DefragInput {
            largest_free_range: 2 << 20,
            ..base
        };
        assert_eq!(defrag_pass_bytes(&split), 8 << 20);
        // ...unless the free bytes are too few to matter.
        let little = DefragInput {
            free_in_blocks: 512 << 10,
            largest_free_range: 64 << 10,
            ..base
        };
        assert_eq!(defrag_pass_bytes(&little), 0);
        // A blocked grow asks for a pass, limited by what the budget has left.
        let blocked = DefragInput {
            blocked: true,
            resident: 60 << 20,
            ..base
        };
        assert_eq!(defrag_pass_bytes(&blocked), 4 << 20);
        let failed = DefragInput {
            failures: 1,
            ..base
        };
        assert_eq!(defrag_pass_bytes(&failed), 8 << 20);
        // Cap 0: off, whatever happens.
        let off = DefragInput {
            cap: 0,
            blocked: true,
            ..split
        };
        assert_eq!(defrag_pass_bytes(&off), 0);
        assert_eq!(fragmentation(0, 0), 0.0);
        assert_eq!(fragmentation(1 << 20, 4 << 20), 0.75);
    }

    #[test]
    fn plan_reports_a_range_blocked_grow() {
        // The grow fits the budget by bytes but not the largest free range.
        let mut ts = vec![texture(256, 4, 16)];
        ts[0].wanted = Some(0);
        ts[0].coverage = 0.5;
        let budget = 4 << 20;
        let p = plan(&cfg(budget), &ts, 0, 1024);
        assert!(p.range_blocked);
        assert!(p.changes.is_empty());
        // The room to open: the image one level finer than the tail alone.
        assert_eq!(p.range_blocked_bytes, ts[0].image_bytes(ts[0].tail() - 1));
        assert!(p.range_blocked_bytes > 1024);
        let p = plan(&cfg(budget), &ts, 0, u64::MAX);
        assert!(!p.range_blocked);
        assert_eq!(p.range_blocked_bytes, 0);
        assert!(!p.changes.is_empty());
    }
}
