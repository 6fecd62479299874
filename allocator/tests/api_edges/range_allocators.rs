//! The public range allocators (`vkalloc::range`) with odd inputs.

use std::panic::{catch_unwind, AssertUnwindSafe};

use vkalloc::range::{
    LinearAllocator, LinearMode, RangeAllocator, RangeError, RangeKind, RangeRequest, TlsfAllocator,
};

// ---------------------------------------------------------------------------
// The public range allocators with odd inputs.
// ---------------------------------------------------------------------------

/// `vkalloc::range` is public and safe. Odd requests (size 0, alignments that
/// are not powers of two, sizes and capacities near u64::MAX) must give
/// `None` or a valid range, never a panic; what each one panics with is
/// collected and reported at once.
#[test]
fn public_range_allocators_do_not_panic_on_odd_requests() {
    // Quiet for this thread's expected panics only: the tests beside it in
    // this process keep the default hook (and their failures' messages).
    std::thread_local!(static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    let previous = std::sync::Arc::new(std::panic::take_hook());
    let delegate = std::sync::Arc::clone(&previous);
    std::panic::set_hook(Box::new(move |info| {
        if !QUIET.with(std::cell::Cell::get) {
            delegate(info);
        }
    }));
    QUIET.with(|q| q.set(true));
    let mut panics = Vec::new();
    let capacities = [0u64, 1, 4096, u64::MAX];
    let requests = [
        (0u64, 1u64),
        (1, 0),
        (1, 3),
        (16, 48),
        (1, u64::MAX),
        (u64::MAX, 1),
        (u64::MAX, 1 << 63),
        ((1 << 63) + 1, 1),
    ];
    type Make = fn(u64) -> Box<dyn RangeAllocator>;
    let makers: [(&str, Make); 4] = [
        ("tlsf", |c| Box::new(TlsfAllocator::new(c, 1024))),
        ("ring", |c| {
            Box::new(LinearAllocator::new(c, LinearMode::Ring, 1024))
        }),
        ("stack", |c| {
            Box::new(LinearAllocator::new(c, LinearMode::Stack, 1024))
        }),
        ("buddy", |c| {
            Box::new(vkalloc::range::BuddyAllocator::new(c, 256))
        }),
    ];
    for (name, make) in makers {
        for capacity in capacities {
            for (size, alignment) in requests {
                for kind in [RangeKind::Linear, RangeKind::Optimal] {
                    let r = catch_unwind(AssertUnwindSafe(|| {
                        let mut a = make(capacity);
                        // A neighbour of the other kind first.
                        let _ = a.allocate(&RangeRequest {
                            size: 100,
                            alignment: 1,
                            kind: RangeKind::Unknown,
                        });
                        let req = RangeRequest {
                            size,
                            alignment,
                            kind,
                        };
                        if let Some(range) = a.allocate(&req) {
                            assert!(range
                                .offset
                                .checked_add(range.size)
                                .is_some_and(|e| e <= capacity));
                            assert!(range.size >= size);
                            a.free(range.id).unwrap();
                        }
                        a.validate().unwrap();
                    }));
                    if let Err(p) = r {
                        let msg = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        panics.push(format!(
                            "{name} capacity {capacity} size {size} alignment {alignment}: {msg}"
                        ));
                    }
                }
            }
        }
        // Odd granularities at construction.
        for granularity in [3u64, u64::MAX] {
            let r = catch_unwind(AssertUnwindSafe(|| {
                let mut a = make_with_granularity(name, granularity);
                let _ = a.allocate(&RangeRequest {
                    size: 10,
                    alignment: 1,
                    kind: RangeKind::Linear,
                });
                let _ = a.allocate(&RangeRequest {
                    size: 10,
                    alignment: 1,
                    kind: RangeKind::Optimal,
                });
                a.validate().unwrap();
            }));
            if r.is_err() {
                panics.push(format!("{name} granularity {granularity}: panicked"));
            }
        }
    }
    QUIET.with(|q| q.set(false));
    // Put the previous hook back once no other copy of it is held.
    drop(std::panic::take_hook());
    if let Ok(previous) = std::sync::Arc::try_unwrap(previous) {
        std::panic::set_hook(previous);
    }
    panics.dedup();
    assert!(
        panics.is_empty(),
        "{} panics:\n{}",
        panics.len(),
        panics.join("\n")
    );
}

fn make_with_granularity(name: &str, granularity: u64) -> Box<dyn RangeAllocator> {
    match name {
        "tlsf" => Box::new(TlsfAllocator::new(1 << 20, granularity)),
        "ring" => Box::new(LinearAllocator::new(1 << 20, LinearMode::Ring, granularity)),
        "stack" => Box::new(LinearAllocator::new(
            1 << 20,
            LinearMode::Stack,
            granularity,
        )),
        _ => Box::new(vkalloc::range::BuddyAllocator::new(1 << 20, granularity)),
    }
}

/// The public range allocators' ids carry an 8-bit generation: a stale id
/// whose slot was reused 256 times frees the live range now in that slot
/// (documented for TLSF as a limit; here is what it costs a caller of the
/// public API: a live range freed by someone else's stale handle).
/// A known limit, not fixed: `RangeId` packs a slot and an 8-bit generation
/// into 32 bits; widening it changes every range allocator's id layout. Not
/// reachable through `Allocator`, whose `Allocation` carries its own id.
#[test]
#[ignore = "known limit of the public range allocators (8-bit id generation), documented; run with --ignored"]
fn a_stale_range_id_never_frees_another_live_range() {
    let mut tlsf = TlsfAllocator::new(1 << 20, 1);
    let req = RangeRequest {
        size: 64,
        alignment: 1,
        kind: RangeKind::Linear,
    };
    let stale = tlsf.allocate(&req).unwrap();
    tlsf.free(stale.id).unwrap();
    let mut current = None;
    for _ in 0..4096 {
        let r = tlsf.allocate(&req).unwrap();
        if r.id == stale.id {
            current = Some(r);
            break;
        }
        tlsf.free(r.id).unwrap();
    }
    let Some(current) = current else {
        return; // the slot was never reused with the same id: fine
    };
    // `current` is live; `stale` was freed long ago.
    let refused = tlsf.free(stale.id);
    assert!(
        matches!(refused, Err(RangeError::UnknownId(_))) && tlsf.allocation_count() == 1,
        "a stale id freed the live range {current:?}"
    );
}
