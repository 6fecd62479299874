//! Runs of equal slots for small requests inside a TLSF block.
//!
//! A request of at most [`SLOT_MAX`] bytes (and alignment) of a known kind
//! takes a *slot* of a *run*: one TLSF range cut into up to 64 slots of one
//! *stride*, with a bitmap of the free ones. An allocation is then the lowest
//! free bit of the first run with room in its class, and a free sets a bit:
//! neither reads a TLSF node's neighbours or free lists, which is where a
//! TLSF call spends its cache misses once the block holds many allocations.
//! A run is made when its class has no room and given back to the TLSF
//! when its last slot is freed, unless it is the one run of its class with
//! a free slot: then it stays, empty, for the class's next request (a class
//! whose one allocation comes and goes would otherwise make and free a run
//! each time). The TLSF gives every run back once it holds no allocation.
//!
//! Strides are the request's size rounded up to one of 8 steps per power of
//! two (at least 16 bytes) and to its alignment, so a slot wastes at most an
//! eighth of its size plus what the alignment asks for (which a TLSF leaves
//! as padding too). The bookkeeping here knows nothing of the TLSF's nodes
//! but their indices.

use super::RangeKind;

/// Requests of at most this many bytes, aligned to at most this, take slots.
pub(crate) const SLOT_MAX: u64 = 32 << 10;
/// A run's bytes where its stride allows 4 to 64 slots of it.
const RUN_BYTES: u64 = 16 << 10;
/// The fewest slots a run has (runs of the largest strides).
pub(crate) const MIN_SLOTS: u64 = 4;
/// A run takes at most this share of its block's capacity, so a small block
/// (a pool of a few KiB) holds runs of several classes, or none.
pub(crate) const CAPACITY_SHARE: u64 = 64;
/// The most slots a run has: one `u64` bitmap.
pub(crate) const MAX_SLOTS: usize = 64;
/// The smallest stride.
const MIN_STRIDE_LOG2: u32 = 4;
/// Classes: 8 strides per power of two from 16 bytes up to [`SLOT_MAX`].
const CLASSES: usize = ((SLOT_MAX.trailing_zeros() - MIN_STRIDE_LOG2 + 1) * 8) as usize;
/// No run.
pub(crate) const NO_RUN: u32 = u32::MAX;

/// A small request's stride and class index, all the hot path needs (a
/// run's slots are looked up only to make one: [`SlotKey::class`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotKey {
    /// Bytes from one slot to the next, a multiple of the alignment asked.
    pub stride: u64,
    /// The class's index among [`CLASSES`].
    pub index: usize,
}

impl SlotKey {
    /// Whether a block whose runs take at most `max_run_bytes` has runs of
    /// this class (at least [`MIN_SLOTS`] slots).
    #[inline(always)]
    pub fn fits(&self, max_run_bytes: u64) -> bool {
        self.stride * MIN_SLOTS <= max_run_bytes
    }

    /// The class, with runs of at most `max_run_bytes`.
    #[inline]
    pub fn class(&self, max_run_bytes: u64) -> Option<SlotClass> {
        SlotClass::of_stride(self.stride).within(max_run_bytes)
    }
}

/// Where a small request goes: its stride and class, the slots of a run of
/// that class, and the run's alignment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotClass {
    /// Bytes from one slot to the next, a multiple of the alignment asked.
    pub stride: u64,
    /// The class's index among [`CLASSES`].
    pub index: usize,
    /// Slots of a run of this class.
    pub slots: u32,
}

impl SlotClass {
    /// Bytes of a run of this class.
    pub fn run_bytes(&self) -> u64 {
        self.stride * u64::from(self.slots)
    }

    /// The alignment a run of this class starts at: the stride's lowest set
    /// bit, so every slot is aligned as its request asked.
    pub fn run_alignment(&self) -> u64 {
        1 << self.stride.trailing_zeros()
    }

    /// The class with runs of at most `max_run_bytes`, or `None` where
    /// fewer than [`MIN_SLOTS`] slots fit them.
    #[inline(always)]
    pub fn within(mut self, max_run_bytes: u64) -> Option<Self> {
        if self.run_bytes() > max_run_bytes {
            if max_run_bytes < MIN_SLOTS * self.stride {
                return None;
            }
            self.slots = (max_run_bytes / self.stride) as u32;
        }
        Some(self)
    }

    /// The class of a stride that [`class_of`] gave.
    #[inline]
    pub fn of_stride(stride: u64) -> Self {
        let index = class_index(stride);
        SlotClass {
            stride,
            index,
            slots: u32::from(SLOTS[index % CLASSES]),
        }
    }
}

/// The class index of a stride that [`class_of`] gave.
#[inline(always)]
fn class_index(stride: u64) -> usize {
    let octave = u64::BITS - 1 - stride.leading_zeros();
    ((octave - MIN_STRIDE_LOG2) * 8) as usize
        + ((stride - (1 << octave)) >> step_log2(octave)) as usize
}

/// Log2 of the stride step of sizes in `[2^octave, 2^(octave+1))`: an
/// eighth of the octave, at least 16 bytes.
#[inline(always)]
const fn step_log2(octave: u32) -> u32 {
    let eighth = octave.saturating_sub(3);
    if eighth > MIN_STRIDE_LOG2 {
        eighth
    } else {
        MIN_STRIDE_LOG2
    }
}

/// Slots of a run of each class: [`RUN_BYTES`] of them, from [`MIN_SLOTS`]
/// to [`MAX_SLOTS`] (a table, so a request's class costs no division).
const SLOTS: [u8; CLASSES] = {
    let mut slots = [0u8; CLASSES];
    let mut index = 0;
    while index < CLASSES {
        let octave = (index / 8) as u32 + MIN_STRIDE_LOG2;
        let stride = (1u64 << octave) + ((index % 8) as u64) * (1 << step_log2(octave));
        let mut n = RUN_BYTES / stride;
        if n < MIN_SLOTS {
            n = MIN_SLOTS;
        }
        if n > MAX_SLOTS as u64 {
            n = MAX_SLOTS as u64;
        }
        slots[index] = n as u8;
        index += 1;
    }
    slots
};

/// The class a request takes slots of, or `None` for one a run does not
/// serve: empty, larger than [`SLOT_MAX`], aligned past it (`alignment` a
/// power of two), or of unknown kind (an unknown range conflicts with every
/// range under buffer-image granularity, so two can't share a page).
#[inline(always)]
pub(crate) fn class_of(size: u64, alignment: u64, kind: RangeKind) -> Option<SlotKey> {
    if size == 0
        || size > SLOT_MAX
        || alignment > SLOT_MAX
        || !alignment.is_power_of_two()
        || kind == RangeKind::Unknown
    {
        return None;
    }
    let unit = (1u64 << step_log2(u64::BITS - 1 - size.leading_zeros())).max(alignment);
    // At most SLOT_MAX: `unit`, a power of two, divides the power of two
    // above `size`.
    let stride = (size + unit - 1) & !(unit - 1);
    Some(SlotKey {
        stride,
        index: class_index(stride),
    })
}

/// One run: a TLSF range of `slots` slots of `stride` bytes.
#[derive(Clone, Debug)]
pub(crate) struct Run {
    /// The run's first byte in the block.
    pub offset: u64,
    /// Bit `i` set: slot `i` is free (bits at and above `slots` clear).
    pub free: u64,
    /// Bytes from one slot to the next.
    pub stride: u32,
    /// The TLSF node of the run's range.
    pub node: u32,
    /// The next run of the class with a free slot, or the next vacant entry.
    pub next: u32,
    /// The previous run of the class with a free slot.
    pub prev: u32,
    /// Slots of the run.
    pub slots: u8,
    /// The class's index.
    pub class: u8,
    /// The kind of every slot's contents.
    pub kind: RangeKind,
    /// Whether the entry holds a run (else it is vacant).
    pub live: bool,
    /// The TLSF node of each live slot (the allocation's id slot).
    pub nodes: [u32; MAX_SLOTS],
}

impl Run {
    /// The bitmap of a run with every slot free.
    fn all_free(slots: u8) -> u64 {
        u64::MAX >> (64 - u32::from(slots))
    }

    /// Offset of slot `slot`.
    pub fn slot_offset(&self, slot: u32) -> u64 {
        self.offset + u64::from(slot) * u64::from(self.stride)
    }

    /// Bytes of the run.
    pub fn bytes(&self) -> u64 {
        u64::from(self.stride) * u64::from(self.slots)
    }

    /// Whether slot `slot` holds an allocation.
    pub fn is_used(&self, slot: u32) -> bool {
        slot < u32::from(self.slots) && self.free & (1 << slot) == 0
    }
}

/// Every run of one TLSF block, with a list per class and kind of the runs
/// that have a free slot.
pub(crate) struct Runs {
    runs: Vec<Run>,
    /// The first vacant entry, chained through `next`.
    vacant: u32,
    /// Live runs.
    live: u32,
    /// Per class, per kind (linear, optimal): the first run with a free slot.
    heads: [[u32; 2]; CLASSES],
}

/// The list index of a kind that runs serve.
#[inline(always)]
fn kind_index(kind: RangeKind) -> usize {
    debug_assert_ne!(kind, RangeKind::Unknown, "runs hold known kinds only");
    (kind == RangeKind::Optimal) as usize
}

impl Runs {
    pub fn new() -> Self {
        Runs {
            runs: Vec::new(),
            vacant: NO_RUN,
            live: 0,
            heads: [[NO_RUN; 2]; CLASSES],
        }
    }

    /// Forgets every run (the TLSF is reset with them).
    pub fn clear(&mut self) {
        self.runs.clear();
        self.vacant = NO_RUN;
        self.live = 0;
        self.heads = [[NO_RUN; 2]; CLASSES];
    }

    /// Live runs.
    pub fn live(&self) -> u32 {
        self.live
    }

    /// Run `run`.
    #[inline(always)]
    pub fn get(&self, run: u32) -> &Run {
        &self.runs[run as usize]
    }

    /// Run `run`, if it is a live run.
    pub fn get_live(&self, run: u32) -> Option<&Run> {
        self.runs.get(run as usize).filter(|r| r.live)
    }

    /// The first run of `class` and `kind` with a free slot, or [`NO_RUN`].
    #[inline(always)]
    pub fn head(&self, class: usize, kind: RangeKind) -> u32 {
        self.heads[class][kind_index(kind)]
    }

    /// The slot a [`Self::take`] of `run` would take, and its offset.
    #[inline(always)]
    pub fn next_slot(&self, run: u32) -> (u32, u64) {
        let r = &self.runs[run as usize];
        let slot = r.free.trailing_zeros();
        (slot, r.slot_offset(slot))
    }

    /// A new run of `class` and `kind` over the TLSF range of `node` at
    /// `offset`, every slot free, at the head of its list.
    pub fn open(&mut self, offset: u64, node: u32, class: &SlotClass, kind: RangeKind) -> u32 {
        let run = Run {
            offset,
            free: Run::all_free(class.slots as u8),
            stride: class.stride as u32,
            node,
            next: NO_RUN,
            prev: NO_RUN,
            slots: class.slots as u8,
            class: class.index as u8,
            kind,
            live: true,
            nodes: [u32::MAX; MAX_SLOTS],
        };
        let index = if self.vacant == NO_RUN {
            self.runs.push(run);
            self.runs.len() as u32 - 1
        } else {
            let index = self.vacant;
            self.vacant = self.runs[index as usize].next;
            self.runs[index as usize] = run;
            index
        };
        self.live += 1;
        self.link(index);
        index
    }

    /// Takes the lowest free slot of `run` (which has one) for the
    /// allocation whose id slot is `node`; a run left full leaves its list.
    /// Returns the slot and its offset.
    #[inline(always)]
    pub fn take(&mut self, run: u32, node: u32) -> (u32, u64) {
        let r = &mut self.runs[run as usize];
        debug_assert!(r.live && r.free != 0, "no free slot in run {run}");
        let slot = r.free.trailing_zeros();
        r.free &= r.free - 1;
        r.nodes[slot as usize] = node;
        let offset = r.slot_offset(slot);
        if r.free == 0 {
            self.unlink(run);
        }
        (slot, offset)
    }

    /// Frees slot `slot` of `run`; a full run joins its list again. Returns
    /// the run's TLSF node when the run is left empty and is not the only
    /// run of its list: the run is gone then, and the caller gives its range
    /// back to the TLSF.
    #[inline(always)]
    pub fn give(&mut self, run: u32, slot: u32) -> Option<u32> {
        let r = &mut self.runs[run as usize];
        debug_assert!(r.is_used(slot), "slot {slot} of run {run} is not in use");
        let was_full = r.free == 0;
        r.free |= 1 << slot;
        if was_full {
            // At least 4 slots: a full run is not left empty by one free.
            self.link(run);
            return None;
        }
        if r.free == Run::all_free(r.slots) && (r.prev != NO_RUN || r.next != NO_RUN) {
            return Some(self.close(run));
        }
        None
    }

    /// Takes `run`, every slot of it free and in its list, out of the
    /// table; returns its TLSF node, whose range the caller gives back.
    pub fn close(&mut self, run: u32) -> u32 {
        self.unlink(run);
        let r = &mut self.runs[run as usize];
        debug_assert_eq!(
            r.free,
            Run::all_free(r.slots),
            "run {run} holds allocations"
        );
        r.live = false;
        r.next = self.vacant;
        self.vacant = run;
        self.live -= 1;
        r.node
    }

    /// The runs with every slot free (kept for their classes), as
    /// `(run, TLSF node)`.
    pub fn empty_runs(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.runs
            .iter()
            .enumerate()
            .filter(|(_, r)| r.live && r.free == Run::all_free(r.slots))
            .map(|(index, r)| (index as u32, r.node))
    }

    /// Puts `run` at the head of its class's list.
    #[inline(always)]
    fn link(&mut self, run: u32) {
        let r = &self.runs[run as usize];
        let (class, kind) = (r.class as usize, kind_index(r.kind));
        let head = self.heads[class][kind];
        if head != NO_RUN {
            self.runs[head as usize].prev = run;
        }
        let r = &mut self.runs[run as usize];
        r.prev = NO_RUN;
        r.next = head;
        self.heads[class][kind] = run;
    }

    /// Takes `run` out of its class's list.
    #[inline(always)]
    fn unlink(&mut self, run: u32) {
        let r = &self.runs[run as usize];
        let (prev, next) = (r.prev, r.next);
        let (class, kind) = (r.class as usize, kind_index(r.kind));
        if prev == NO_RUN {
            self.heads[class][kind] = next;
        } else {
            self.runs[prev as usize].next = next;
        }
        if next != NO_RUN {
            self.runs[next as usize].prev = prev;
        }
    }

    /// Checks the lists and counts: every live run with a free slot sits once
    /// in the list of its class and kind, and no other run does; a list
    /// holds at most one empty run (kept for its class's next request: a
    /// run emptied beside another one goes).
    pub fn validate(&self) -> Result<(), String> {
        let mut listed = vec![false; self.runs.len()];
        let mut listed_count = 0usize;
        for (class, heads) in self.heads.iter().enumerate() {
            for (kind, &head) in heads.iter().enumerate() {
                let (mut run, mut prev, mut empty) = (head, NO_RUN, 0);
                while run != NO_RUN {
                    let Some(r) = self.runs.get(run as usize) else {
                        return Err(format!("listed run {run} is out of the table"));
                    };
                    if !r.live
                        || listed[run as usize]
                        || r.prev != prev
                        || r.class as usize != class
                        || kind_index(r.kind) != kind
                    {
                        return Err(format!("run {run} is badly listed in {class}/{kind}"));
                    }
                    listed[run as usize] = true;
                    listed_count += 1;
                    empty += usize::from(r.free == Run::all_free(r.slots));
                    if empty > 1 {
                        return Err(format!("list {class}/{kind} keeps two empty runs"));
                    }
                    prev = run;
                    run = r.next;
                }
            }
        }
        let mut live = 0u32;
        for (index, r) in self.runs.iter().enumerate() {
            if !r.live {
                continue;
            }
            live += 1;
            let all = Run::all_free(r.slots);
            if r.free & !all != 0 {
                return Err(format!(
                    "run {index} has bitmap {:#x} of {} slots",
                    r.free, r.slots
                ));
            }
            let class = SlotClass::of_stride(u64::from(r.stride));
            if class.index != r.class as usize
                || u32::from(r.slots) > class.slots
                || u64::from(r.slots) < MIN_SLOTS
            {
                return Err(format!(
                    "run {index} of stride {} has class {:?}",
                    r.stride, r
                ));
            }
            if (r.free != 0) != listed[index] {
                return Err(format!(
                    "run {index} with free slots {:#x} listed: {}",
                    r.free, listed[index]
                ));
            }
        }
        let (mut vacant, mut run) = (0u32, self.vacant);
        while run != NO_RUN {
            match self.runs.get(run as usize) {
                Some(r) if !r.live && vacant < self.runs.len() as u32 => {
                    vacant += 1;
                    run = r.next;
                }
                _ => return Err(format!("vacant chain holds run {run}")),
            }
        }
        if live != self.live || live + vacant != self.runs.len() as u32 {
            return Err(format!(
                "{live} live runs ({} counted), {vacant} vacant of {}",
                self.live,
                self.runs.len()
            ));
        }
        let _ = listed_count;
        Ok(())
    }
}

impl std::fmt::Debug for Runs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runs")
            .field("live", &self.live)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_round_to_eighths_and_alignment() {
        let linear = RangeKind::Linear;
        let stride = |size, alignment| class_of(size, alignment, linear).map(|k| k.stride);
        assert_eq!(stride(1, 1), Some(16));
        assert_eq!(stride(17, 1), Some(32));
        assert_eq!(stride(112, 256), Some(256));
        assert_eq!(stride(144, 16), Some(144));
        assert_eq!(stride(1000, 4), Some(1024));
        assert_eq!(stride(1025, 1), Some(1152));
        assert_eq!(stride(28 << 10, 1), Some(28 << 10));
        assert_eq!(stride((28 << 10) + 1, 1), Some(30 << 10));
        assert_eq!(stride(SLOT_MAX, 1), Some(SLOT_MAX));
        assert_eq!(stride(SLOT_MAX + 1, 1), None);
        assert_eq!(stride(16, SLOT_MAX * 2), None);
        assert_eq!(stride(0, 1), None);
        assert_eq!(class_of(64, 16, RangeKind::Unknown), None);
    }

    #[test]
    fn every_stride_has_one_class_and_aligned_slots() {
        let mut seen = std::collections::HashMap::new();
        for size in 1..=SLOT_MAX {
            for alignment in [1, 16, 256, 4096] {
                let key = class_of(size, alignment, RangeKind::Linear).unwrap();
                let class = SlotClass::of_stride(key.stride);
                assert_eq!(class.index, key.index);
                assert!(class.stride >= size && class.stride % alignment == 0);
                assert!(class.stride - size < (class.stride / 8).max(16).max(alignment));
                assert!(class.index < CLASSES);
                assert!(class.run_alignment() >= alignment);
                assert!((4..=64).contains(&class.slots));
                if let Some(other) = seen.insert(class.index, class.stride) {
                    assert_eq!(other, class.stride, "class {}", class.index);
                }
            }
        }
    }

    #[test]
    fn runs_fill_lowest_first_and_empty_runs_go() {
        let mut runs = Runs::new();
        let class = SlotClass::of_stride(class_of(100, 16, RangeKind::Linear).unwrap().stride);
        let run = runs.open(4096, 7, &class, RangeKind::Linear);
        assert_eq!(runs.head(class.index, RangeKind::Linear), run);
        assert_eq!(runs.head(class.index, RangeKind::Optimal), NO_RUN);
        let slots: Vec<u32> = (0..class.slots)
            .map(|n| runs.take(run, 100 + n).0)
            .collect();
        assert_eq!(slots, (0..class.slots).collect::<Vec<_>>());
        assert_eq!(
            runs.head(class.index, RangeKind::Linear),
            NO_RUN,
            "a full run leaves its list"
        );
        runs.validate().unwrap();
        assert_eq!(runs.give(run, 3), None);
        assert_eq!(runs.head(class.index, RangeKind::Linear), run);
        assert_eq!(runs.next_slot(run), (3, 4096 + 3 * class.stride));
        for slot in (0..class.slots).filter(|&s| s != 3 && s != 5) {
            assert_eq!(runs.give(run, slot), None);
        }
        runs.validate().unwrap();
        // Alone in its list, an emptied run stays for the next request.
        assert_eq!(runs.give(run, 5), None);
        assert_eq!(runs.live(), 1);
        assert_eq!(runs.head(class.index, RangeKind::Linear), run);
        runs.validate().unwrap();
        // Beside another run with a free slot, an emptied run goes.
        let other = runs.open(8192, 9, &class, RangeKind::Linear);
        runs.take(other, 200);
        runs.take(run, 201);
        assert_eq!(
            runs.give(run, 0),
            Some(7),
            "the last free hands the run's node back"
        );
        assert_eq!(runs.live(), 1);
        assert_eq!(runs.head(class.index, RangeKind::Linear), other);
        runs.validate().unwrap();
        runs.give(other, 0);
        assert_eq!(runs.empty_runs().collect::<Vec<_>>(), [(other, 9)]);
        assert_eq!(runs.close(other), 9);
        assert_eq!(runs.empty_runs().count(), 0);
        assert_eq!(runs.head(class.index, RangeKind::Linear), NO_RUN);
        runs.validate().unwrap();
    }
}
