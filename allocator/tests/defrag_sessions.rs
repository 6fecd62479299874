//! Defragmentation sessions ended in every way an engine may end them: with
//! `end`, or dropped (before a pass, with a pass open, after some commits).
//! A dropped session leaves nothing behind: the next session plans the same
//! moves as after a session that ended its pass, nothing stays allocated for
//! it, and the allocator's invariants hold.

use std::collections::HashMap;

use vkalloc::sim::{tables, SimDevice};
use vkalloc::{
    Allocation, AllocationDesc, AllocationId, AllocationOptions, Allocator, AllocatorDesc,
    DefragAlgorithm, DefragDesc, MemoryUsage, ResourceKind,
};

const KIB: u64 = 1 << 10;

/// How the first session ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// `end_pass` then `end`.
    Ended,
    /// Dropped right after `begin_defragmentation`.
    DroppedBeforePass,
    /// Dropped with its pass open, no move committed.
    DroppedMidPass,
    /// Dropped with its pass open after committing every other move.
    DroppedAfterPartialCommit,
}

/// A move as planned: what it moves, from where to where (the memory
/// handles stand for the block, which both workloads number alike).
type Planned = (AllocationId, u64, u64, u64);

struct Workload {
    allocator: Allocator<SimDevice>,
    live: HashMap<AllocationId, Allocation>,
}

/// 128 allocations of mixed sizes in small blocks, every third one freed:
/// holes enough for dozens of moves.
fn workload() -> Workload {
    let allocator = Allocator::new(
        SimDevice::new(tables::lavapipe()),
        AllocatorDesc::default().with_block_size(4 << 20),
    )
    .expect("allocator");
    let mut live = HashMap::new();
    let mut doomed = Vec::new();
    for i in 0..128u64 {
        let a = allocator
            .allocate(&AllocationDesc {
                size: (16 + (i * 37) % 96) * KIB,
                alignment: 256,
                kind: ResourceKind::Buffer,
                options: AllocationOptions::usage(MemoryUsage::GpuOnly),
                ..AllocationDesc::default()
            })
            .expect("allocate");
        if i % 3 == 0 {
            doomed.push(a);
        } else {
            live.insert(a.id(), a);
        }
    }
    for a in doomed {
        allocator.free(a).expect("free");
    }
    Workload { allocator, live }
}

fn full() -> DefragDesc {
    DefragDesc::default()
        .with_algorithm(DefragAlgorithm::Full)
        .with_pass_limits(1 << 20, 16)
}

/// Runs one session's first pass and ends the session as `ending` says;
/// then a second session's first pass: returns the moves it plans.
fn second_session_plans(ending: Ending) -> (Vec<Planned>, Workload) {
    let mut w = workload();
    let a = &w.allocator;
    let mut first = a.begin_defragmentation(&full()).expect("session");
    if ending != Ending::DroppedBeforePass {
        let moves = first.begin_pass(a).expect("pass");
        assert!(
            moves.len() >= 8,
            "the workload gives moves ({})",
            moves.len()
        );
        for (i, mv) in moves.into_iter().enumerate() {
            let commit = match ending {
                Ending::Ended | Ending::DroppedAfterPartialCommit => i % 2 == 0,
                _ => false,
            };
            if commit {
                let old = w.live.remove(&mv.id()).expect("a live source");
                let new = first.commit(a, mv, old).expect("commit");
                w.live.insert(new.id(), new);
            } else {
                first.cancel(mv);
            }
        }
    }
    match ending {
        Ending::Ended => {
            first.end(a).expect("end");
        }
        _ => drop(first),
    }
    let mut second = a.begin_defragmentation(&full()).expect("session");
    let moves = second.begin_pass(a).expect("pass");
    let memories: Vec<_> = {
        let mut m: Vec<_> = w.live.values().map(|x| x.memory()).collect();
        m.sort();
        m.dedup();
        m
    };
    let block = |memory| {
        memories
            .iter()
            .position(|&m| m == memory)
            .unwrap_or(usize::MAX) as u64
    };
    let planned = moves
        .iter()
        .map(|mv| {
            let (sm, so) = mv.source();
            let (dm, doff) = mv.destination();
            (
                mv.id(),
                (block(sm) << 40) | so,
                (block(dm) << 40) | doff,
                mv.size(),
            )
        })
        .collect();
    for mv in moves {
        second.cancel(mv);
    }
    second.end(a).expect("end");
    (planned, w)
}

/// Frees what the workload holds and checks that nothing else is live.
fn finish(w: Workload) {
    w.allocator.validate().expect("valid");
    let held = w.live.len();
    assert_eq!(
        w.allocator.leaks().len(),
        held,
        "only the workload's allocations are live"
    );
    for (_, a) in w.live {
        w.allocator.free(a).expect("free");
    }
    assert!(w.allocator.leaks().is_empty());
    w.allocator.validate().expect("valid");
}

#[test]
fn a_session_dropped_mid_pass_leaves_nothing_behind() {
    // The reference: the same first pass (every other move committed), ended.
    let (ended, w) = second_session_plans(Ending::Ended);
    assert!(!ended.is_empty(), "the second session has moves to plan");
    finish(w);
    let (partial, w) = second_session_plans(Ending::DroppedAfterPartialCommit);
    assert_eq!(
        partial, ended,
        "a session dropped after some commits poisons the next one"
    );
    finish(w);
}

#[test]
fn a_session_dropped_before_or_without_commits_leaves_nothing_behind() {
    let (untouched, w) = second_session_plans(Ending::DroppedBeforePass);
    assert!(!untouched.is_empty());
    finish(w);
    let (mid, w) = second_session_plans(Ending::DroppedMidPass);
    assert_eq!(
        mid, untouched,
        "a session dropped with its pass open poisons the next one"
    );
    finish(w);
}

#[test]
fn a_dropped_pass_is_ended_at_the_next_frame() {
    let mut w = workload();
    let a = &w.allocator;
    let live_before = a.statistics().total.allocation_count;
    let mut s = a.begin_defragmentation(&full()).expect("session");
    let moves = s.begin_pass(a).expect("pass");
    assert!(!moves.is_empty());
    for mv in moves {
        let old = w.live.remove(&mv.id()).expect("a live source");
        let new = s.commit(a, mv, old).expect("commit");
        w.live.insert(new.id(), new);
    }
    drop(s);
    // No session follows: the next frame ends the pass the drop gave up.
    a.begin_frame();
    assert_eq!(a.statistics().total.allocation_count, live_before);
    let totals = a.statistics().defragmentation;
    assert!(totals.allocations_moved > 0, "the committed moves count");
    finish(w);
}

/// A pool whose defragmentation session was dropped mid-pass: once the
/// caller frees what it holds, the pool is empty and can be destroyed (the
/// pass's reserved destinations don't keep it alive).
#[test]
fn a_pool_outlives_no_dropped_session() {
    let allocator = Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default())
        .expect("allocator");
    let pool = allocator
        .create_pool(&vkalloc::PoolDesc {
            usage: MemoryUsage::GpuOnly,
            block_size: 1 << 20,
            ..vkalloc::PoolDesc::new("streamed")
        })
        .expect("pool");
    let mut held = Vec::new();
    for i in 0..48u64 {
        let a = allocator
            .allocate(&AllocationDesc {
                size: (8 + i % 24) * KIB,
                alignment: 256,
                kind: ResourceKind::Buffer,
                options: AllocationOptions::usage(MemoryUsage::GpuOnly).in_pool(pool),
                ..AllocationDesc::default()
            })
            .expect("allocate");
        held.push(a);
    }
    let mut kept = Vec::new();
    for (i, a) in held.into_iter().enumerate() {
        if i % 3 == 0 {
            allocator.free(a).expect("free");
        } else {
            kept.push(a);
        }
    }
    let mut session = allocator
        .begin_defragmentation(&full().only_pools(vec![pool]))
        .expect("session");
    let moves = session.begin_pass(&allocator).expect("pass");
    assert!(!moves.is_empty(), "the pool has moves to plan");
    drop(moves);
    drop(session);
    for a in kept {
        allocator.free(a).expect("free");
    }
    allocator
        .destroy_pool(pool)
        .expect("the pool holds nothing of the dropped session");
    allocator.validate().expect("valid");
    assert!(allocator.leaks().is_empty());
}

/// `end` through another allocator is refused and consumes the session: its
/// open pass goes back to its own allocator, which ends it.
#[test]
fn a_session_ended_through_another_allocator_loses_nothing() {
    let mut w = workload();
    let other = Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default())
        .expect("allocator");
    let a = &w.allocator;
    let mut s = a.begin_defragmentation(&full()).expect("session");
    let moves = s.begin_pass(a).expect("pass");
    assert!(!moves.is_empty());
    for mv in moves {
        let old = w.live.remove(&mv.id()).expect("a live source");
        let new = s.commit(a, mv, old).expect("commit");
        w.live.insert(new.id(), new);
    }
    assert_eq!(
        s.end(&other).map(|_| ()),
        Err(vkalloc::DefragError::ForeignAllocator)
    );
    a.begin_frame();
    assert!(a.statistics().defragmentation.allocations_moved > 0);
    finish(w);
}
