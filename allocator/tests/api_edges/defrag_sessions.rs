//! Defragmentation sessions misused: dropped after commits, two interleaved
//! on one allocator, descriptions at their extremes.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use vkalloc::sim::{tables, SimDevice};
use vkalloc::{Allocator, AllocatorDesc, DefragAlgorithm, DefragDesc, MemoryUsage};

use super::{assert_clean_end, desc, MIB};

// ---------------------------------------------------------------------------
// Defragmentation.
// ---------------------------------------------------------------------------

/// Holes in host-visible memory with margins: 64 allocations, every other
/// one freed. Returns the kept ones, mapped.
fn fragmented_mapped(allocator: &Allocator<Arc<SimDevice>>) -> Vec<vkalloc::MappedAllocation> {
    let mut kept = Vec::new();
    for i in 0..64u64 {
        let mut m = allocator
            .allocate_mapped(&desc(48 * 1024 + i * 64, MemoryUsage::Upload))
            .unwrap();
        if i % 2 == 0 {
            allocator.free(m).unwrap();
        } else {
            let tag = i as u8;
            m.as_mut_slice().fill(tag);
            kept.push(m);
        }
    }
    kept
}

fn margins_allocator() -> (Arc<SimDevice>, Allocator<Arc<SimDevice>>) {
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = Allocator::new(
        Arc::clone(&sim),
        AllocatorDesc::default().with_debug_margin(64),
    )
    .unwrap();
    (sim, allocator)
}

/// A session dropped with a pass open after a commit: the allocator ends
/// the pass the session gave up (at its next frame, trim, session, pass, or
/// `leaks()`), as `end_pass` would have: the old allocations handed over at
/// `commit` are freed, not lost and not leaked; the caller's own handles free
/// cleanly, and the allocator stays valid. (`defrag_sessions.rs` checks that
/// the next session plans as if the pass had ended.)
#[test]
fn dropping_a_session_after_commits_loses_no_allocation() {
    let (sim, allocator) = margins_allocator();
    // Half of 192 allocations of ~48 KiB kept: more than the first 4 MiB
    // block holds, so there is a sparse block to empty into another.
    let mut kept = Vec::new();
    for i in 0..192u64 {
        let m = allocator
            .allocate_mapped(&desc(48 * 1024 + i * 64, MemoryUsage::Upload))
            .unwrap();
        kept.push(m);
    }
    let kept: Vec<_> = kept
        .into_iter()
        .enumerate()
        .filter_map(|(i, m)| {
            if i % 2 == 0 {
                allocator.free(m).unwrap();
                None
            } else {
                Some(m)
            }
        })
        .collect();
    let mut live: Vec<vkalloc::Allocation> = kept.into_iter().map(Into::into).collect();
    let mut defrag = allocator
        .begin_defragmentation(&DefragDesc::default().with_algorithm(DefragAlgorithm::Full))
        .unwrap();
    let moves = defrag.begin_pass(&allocator).unwrap();
    assert!(!moves.is_empty());
    let committed = moves.len();
    for mv in moves {
        let i = live.iter().position(|a| a.id() == mv.id()).unwrap();
        let old = live.swap_remove(i);
        live.push(defrag.commit(&allocator, mv, old).unwrap());
    }
    drop(defrag); // a pass is open
    for a in live {
        allocator.free(a).unwrap();
    }
    allocator.validate().unwrap();
    // The handed-over sources were freed with the pass the drop gave up.
    assert!(committed > 0);
    let leaks = allocator.leaks();
    assert!(
        leaks.is_empty(),
        "nothing is kept for a dropped session: {leaks:?}"
    );
    assert_eq!(allocator.statistics().total.allocation_count, 0);
    drop(allocator);
    assert_eq!(sim.violations(), 0);
}

/// Two sessions with passes open at once on one allocator, ended out of
/// order, with mapped allocations and margins: no allocation is moved by
/// both, the moved mappings never overlap a live one, no margin breaks.
#[test]
fn two_interleaved_sessions_never_double_move() {
    let (sim, allocator) = margins_allocator();
    let kept = fragmented_mapped(&allocator);
    let mut live: Vec<vkalloc::MappedAllocation> = kept;
    let full = DefragDesc::default().with_algorithm(DefragAlgorithm::Full);
    let mut a = allocator.begin_defragmentation(&full).unwrap();
    let mut b = allocator
        .begin_defragmentation(&DefragDesc::default())
        .unwrap();
    for _round in 0..4 {
        let moves_a = a.begin_pass(&allocator).unwrap();
        let moves_b = b.begin_pass(&allocator).unwrap();
        let ids_a: Vec<_> = moves_a.iter().map(|m| m.id()).collect();
        for mv in &moves_b {
            assert!(
                !ids_a.contains(&mv.id()),
                "one allocation moved by two sessions"
            );
        }
        for (session, moves) in [(&mut b, moves_b), (&mut a, moves_a)] {
            for mv in moves {
                let i = live.iter().position(|x| x.id() == mv.id()).unwrap();
                let old = live.swap_remove(i);
                let mut m = session
                    .commit(&allocator, mv, old.into())
                    .unwrap()
                    .into_mapped()
                    .unwrap();
                // Copy the contents as a GPU would.
                let tag = m.id().0 as u8;
                m.as_mut_slice().fill(tag);
                live.push(m);
            }
        }
        a.end_pass(&allocator).unwrap();
        b.end_pass(&allocator).unwrap();
        allocator.validate().unwrap();
        assert_eq!(allocator.check_corruption(), 0);
    }
    a.end(&allocator).unwrap();
    b.end(&allocator).unwrap();
    let mut spans: Vec<(usize, usize)> = live
        .iter()
        .map(|m| (m.as_ptr() as usize, m.as_ptr() as usize + m.size() as usize))
        .collect();
    spans.sort();
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "live mappings overlap");
    }
    for x in live {
        allocator.free(x).unwrap();
    }
    assert_eq!(allocator.statistics().corruptions_detected, 0);
    assert_clean_end(&sim, allocator);
}

#[test]
fn defrag_descriptions_at_their_extremes_do_not_panic() {
    let sim = Arc::new(SimDevice::new(tables::amd_discrete()));
    let allocator = Allocator::new(
        Arc::clone(&sim),
        AllocatorDesc::default().with_block_size(4 * MIB),
    )
    .unwrap();
    let mut live = Vec::new();
    for i in 0..200u64 {
        let a = allocator
            .allocate(&desc(4096 + (i % 7) * 1000, MemoryUsage::GpuOnly))
            .unwrap();
        if i % 3 == 0 {
            allocator.free(a).unwrap();
        } else {
            live.push(a);
        }
    }
    let algorithms = [
        DefragAlgorithm::Fast,
        DefragAlgorithm::Full,
        DefragAlgorithm::Room {
            bytes: 0,
            alignment: 0,
        },
        DefragAlgorithm::Room {
            bytes: u64::MAX,
            alignment: u64::MAX,
        },
        DefragAlgorithm::Room {
            bytes: 3 * 4096,
            alignment: 3,
        },
        DefragAlgorithm::Room {
            bytes: 64 * 1024,
            alignment: 1 << 63,
        },
        DefragAlgorithm::Room {
            bytes: 64 * 1024,
            alignment: u64::MAX,
        },
        DefragAlgorithm::Room {
            bytes: 4 * MIB,
            alignment: 4096,
        },
        DefragAlgorithm::Room {
            bytes: 4 * MIB + 1,
            alignment: 1,
        },
    ];
    for algorithm in algorithms {
        for (bytes, count, types) in [
            (0, 0, u32::MAX),
            (u64::MAX, u32::MAX, u32::MAX),
            (1, 1, 0),
            (8192, 3, 1 << 31),
        ] {
            let desc = DefragDesc::default()
                .with_algorithm(algorithm)
                .with_pass_limits(bytes, count)
                .with_memory_types(types);
            let result = catch_unwind(AssertUnwindSafe(|| {
                let mut defrag = allocator.begin_defragmentation(&desc).unwrap();
                for _ in 0..3 {
                    for mv in defrag.begin_pass(&allocator).unwrap() {
                        if let Some(i) = live.iter().position(|a| a.id() == mv.id()) {
                            let old = live.swap_remove(i);
                            live.push(defrag.commit(&allocator, mv, old).unwrap());
                        }
                    }
                    defrag.end_pass(&allocator).unwrap();
                }
                defrag.end(&allocator).unwrap();
            }));
            assert!(
                result.is_ok(),
                "{algorithm:?} limits ({bytes}, {count}, {types:#x}) panicked"
            );
            allocator.validate().unwrap();
        }
    }
    for a in live {
        allocator.free(a).unwrap();
    }
    let report = allocator.destroy();
    assert!(report.is_empty(), "{report}");
    assert_eq!(sim.live_objects(), 0);
}

// ---------------------------------------------------------------------------
