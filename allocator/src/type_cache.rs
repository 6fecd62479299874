//! A lock-free memo of the best memory type per (usage preset,
//! `memoryTypeBits`), so the common allocation skips the full ranking.
//!
//! The memo holds the ranking *without* budgets. It is used only when the
//! chosen type's heap has room for the allocation, which is exactly when the
//! ranking with budgets would choose the same type (budgets only push heaps
//! without room down). Anything else — custom flags, a heap without room, a
//! fallback after out-of-memory — takes the full ranking.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use crate::device::{MemoryProperties, MemoryPropertyFlags};
use crate::select::{self, HeapRoom, MemoryUsage, TypeRequest};

const SLOTS: usize = 64;
const VALID: u64 = 1 << 63;

/// Memoized first choices. An entry packs, from bit 0: `memoryTypeBits`
/// (32), the usage code (3), the best type when a ReBAR type has room (5),
/// the best type otherwise (5), and a valid bit (63).
#[derive(Debug)]
pub(crate) struct TypeCache {
    slots: [AtomicU64; SLOTS],
}

/// The two first choices for one key.
/// The memo's answer for a (usage, `memoryTypeBits`): the ranking's first
/// type with and without ReBAR memory, and what [`choose`] needs of the
/// device's tables (which heaps, whether the ReBAR question arises), so the
/// common allocation reads the memo's slot and the heap's counters only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FirstChoice {
    pub with_rebar: u32,
    pub without_rebar: u32,
    /// `with_rebar` differs from `without_rebar` and is a ReBAR type
    /// (`DEVICE_LOCAL | HOST_VISIBLE`).
    pub ask_rebar: bool,
    pub with_rebar_heap: u32,
    pub without_rebar_heap: u32,
}

// The memo's entry: bits 0..35 the key (`memoryTypeBits`, the usage's code
// above them), 35..40 and 40..45 the two types, 45 the ReBAR question,
// 46..50 and 50..54 the two types' heaps, 63 valid.
const KEY_MASK: u64 = 0x7_FFFF_FFFF;
const _: () = assert!(crate::select::MAX_MEMORY_HEAPS <= 16);

fn usage_code(usage: MemoryUsage) -> Option<u64> {
    match usage {
        MemoryUsage::GpuOnly => Some(1),
        MemoryUsage::Upload => Some(2),
        MemoryUsage::Readback => Some(3),
        MemoryUsage::Transient => Some(4),
        MemoryUsage::Custom(_) => None,
    }
}

impl TypeCache {
    pub fn new() -> Self {
        Self {
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    #[inline]
    pub fn first_choice(
        &self,
        props: &MemoryProperties,
        usage: MemoryUsage,
        bits: u32,
    ) -> Option<FirstChoice> {
        let code = usage_code(usage)?;
        let key = u64::from(bits) | code << 32;
        let slot = &self.slots[(u64::from(bits).wrapping_mul(0x9E37_79B9) ^ code) as usize % SLOTS];
        let entry = slot.load(Ordering::Relaxed);
        if entry & VALID != 0 && entry & KEY_MASK == key {
            return Some(FirstChoice {
                with_rebar: (entry >> 35 & 31) as u32,
                without_rebar: (entry >> 40 & 31) as u32,
                ask_rebar: entry >> 45 & 1 != 0,
                with_rebar_heap: (entry >> 46 & 15) as u32,
                without_rebar_heap: (entry >> 50 & 15) as u32,
            });
        }
        Self::fill(slot, props, usage, bits, key)
    }

    #[cold]
    #[inline(never)]
    fn fill(
        slot: &AtomicU64,
        props: &MemoryProperties,
        usage: MemoryUsage,
        bits: u32,
        key: u64,
    ) -> Option<FirstChoice> {
        let rank = |rooms: &[HeapRoom]| {
            select::rank_memory_types(props, &TypeRequest::new(usage, bits, 1), rooms)
                .ok()
                .and_then(|mut c| c.next())
        };
        let with_rebar = rank(&[])?;
        let without_rebar = if usage == MemoryUsage::Upload {
            rank(&[HeapRoom(0); select::MAX_MEMORY_HEAPS])?
        } else {
            with_rebar
        };
        let first = FirstChoice {
            with_rebar,
            without_rebar,
            ask_rebar: with_rebar != without_rebar && is_rebar(props, with_rebar),
            with_rebar_heap: props.heap_of(with_rebar),
            without_rebar_heap: props.heap_of(without_rebar),
        };
        let entry = VALID
            | key
            | u64::from(with_rebar) << 35
            | u64::from(without_rebar) << 40
            | u64::from(first.ask_rebar) << 45
            | u64::from(first.with_rebar_heap) << 46
            | u64::from(first.without_rebar_heap) << 50;
        slot.store(entry, Ordering::Relaxed);
        Some(first)
    }
}

fn is_rebar(props: &MemoryProperties, memory_type: u32) -> bool {
    props.types[memory_type as usize]
        .flags
        .contains(MemoryPropertyFlags::DEVICE_LOCAL | MemoryPropertyFlags::HOST_VISIBLE)
}

/// The type the full ranking chooses for `size` bytes given the memo's
/// `first` choice, the heaps' `room` and their `rebar_limit`
/// ([`select::rebar_fits`]: the room and a size of at most the heap's
/// size over [`select::REBAR_HEAP_FRACTION`]); `None` where the chosen
/// heap lacks the room (the full ranking decides then).
#[inline]
pub(crate) fn choose(
    first: FirstChoice,
    size: u64,
    room: impl Fn(u32) -> u64,
    rebar_limit: impl Fn(u32) -> u64,
) -> Option<u32> {
    // The ReBAR heap's room, read once: the answer below reuses it when the
    // choice stays on that heap.
    let mut read: Option<(u32, u64)> = None;
    let (choice, heap) = if first.ask_rebar {
        let heap = first.with_rebar_heap;
        let heap_room = room(heap);
        read = Some((heap, heap_room));
        if HeapRoom(heap_room).fits(size) && size <= rebar_limit(heap) {
            (first.with_rebar, heap)
        } else {
            (first.without_rebar, first.without_rebar_heap)
        }
    } else {
        (first.with_rebar, first.with_rebar_heap)
    };
    let heap_room = match read {
        Some((read_heap, read_room)) if read_heap == heap => read_room,
        _ => room(heap),
    };
    (heap_room >= size).then_some(choice)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::tables;
    use rand::{Rng, SeedableRng};

    /// Whenever the memo answers, it answers what the full ranking says.
    #[test]
    fn the_memo_agrees_with_the_full_ranking() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut answered = 0;
        for table in tables::all_tables() {
            let props = &table.memory_properties;
            let cache = TypeCache::new();
            for _ in 0..4000 {
                let usage = [
                    MemoryUsage::GpuOnly,
                    MemoryUsage::Upload,
                    MemoryUsage::Readback,
                    MemoryUsage::Transient,
                ][rng.gen_range(0..4)];
                let bits = if rng.gen_bool(0.5) {
                    u32::MAX
                } else {
                    rng.gen::<u32>()
                };
                let size = 1u64 << rng.gen_range(0..36);
                let rooms: Vec<HeapRoom> = props
                    .heaps
                    .iter()
                    .map(|h| {
                        HeapRoom(if rng.gen_bool(0.3) {
                            rng.gen_range(0..h.size)
                        } else {
                            h.size
                        })
                    })
                    .collect();
                let request = TypeRequest::new(usage, bits, size);
                let full = select::rank_memory_types(props, &request, &rooms)
                    .ok()
                    .and_then(|mut c| c.next());
                let fast = cache.first_choice(props, usage, bits).and_then(|first| {
                    choose(
                        first,
                        size,
                        |heap| rooms[heap as usize].0,
                        |heap| props.heaps[heap as usize].size / select::REBAR_HEAP_FRACTION,
                    )
                });
                if let Some(fast) = fast {
                    answered += 1;
                    assert_eq!(
                        Some(fast),
                        full,
                        "{} {usage:?} bits {bits:#x} size {size}",
                        table.name
                    );
                }
            }
        }
        assert!(
            answered > 10_000,
            "the memo answers most requests ({answered})"
        );
    }
}
