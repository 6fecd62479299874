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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FirstChoice {
    /// The best type when the ReBAR type's heap has room (uploads), or the
    /// best type (every other preset).
    pub with_rebar: u32,
    /// The best type when the ReBAR heap lacks room (uploads only).
    pub without_rebar: u32,
}

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

    /// The first choices for `usage` and `bits`, computed once and memoized.
    /// `None` for custom flags or when no type fits (the full ranking then
    /// reports why). The look-up is inlined into the allocate path; a miss
    /// ranks in [`Self::fill`], out of line.
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
        if entry & VALID != 0 && entry & 0x7_FFFF_FFFF == key {
            return Some(FirstChoice {
                with_rebar: (entry >> 35 & 31) as u32,
                without_rebar: (entry >> 40 & 31) as u32,
            });
        }
        Self::fill(slot, props, usage, bits, key)
    }

    /// Ranks the types for `usage` and `bits` (whose memo key is `key`) and
    /// memoizes the first choices in `slot`.
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
        let entry = VALID | key | u64::from(with_rebar) << 35 | u64::from(without_rebar) << 40;
        slot.store(entry, Ordering::Relaxed);
        Some(FirstChoice {
            with_rebar,
            without_rebar,
        })
    }
}

/// Whether `memory_type` is a ReBAR-style type (device-local and mappable).
fn is_rebar(props: &MemoryProperties, memory_type: u32) -> bool {
    props.types[memory_type as usize]
        .flags
        .contains(MemoryPropertyFlags::DEVICE_LOCAL | MemoryPropertyFlags::HOST_VISIBLE)
}

/// The type the full ranking (with budgets) would put first for an
/// allocation of `size` bytes, given the memoized `first` choices and each
/// heap's room; `None` when that can't be told cheaply.
#[inline]
pub(crate) fn choose(
    props: &MemoryProperties,
    first: FirstChoice,
    size: u64,
    room: impl Fn(u32) -> u64,
) -> Option<u32> {
    // The ReBAR heap's room, read once: the answer below reuses it when the
    // choice stays on that heap.
    let mut read: Option<(u32, u64)> = None;
    let choice = if first.with_rebar != first.without_rebar && is_rebar(props, first.with_rebar) {
        let heap = props.heap_of(first.with_rebar);
        let heap_room = room(heap);
        read = Some((heap, heap_room));
        if select::rebar_fits(props, first.with_rebar, size, HeapRoom(heap_room)) {
            first.with_rebar
        } else {
            first.without_rebar
        }
    } else {
        first.with_rebar
    };
    let heap = props.heap_of(choice);
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
                let fast = cache
                    .first_choice(props, usage, bits)
                    .and_then(|first| choose(props, first, size, |heap| rooms[heap as usize].0));
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
