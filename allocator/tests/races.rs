//! Races: several threads on one `Allocator`,
//! racing defragmentation passes (two sessions at once, commits, frees of
//! sources and of committed destinations, `set_movable`), alias groups,
//! pool creation/destruction, linear pools, trims, frames and every
//! diagnostic. Each racing part runs under a watchdog so a deadlock fails.
//!
//! Written from outside (2026-12-03). Fixed since: an alias group handed out
//! as a move in the moment between its placement and its pin (now pinned as
//! placed, `AllocationOptions::pinned`), and a committed move's source,
//! between its resolution and its free in `end_pass`, planned by another
//! session (both marks now stay until the free). Ignored with their
//! reasons: the budget race (open) and torn statistics (documented).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vkalloc::device::DeviceMemory;
use vkalloc::sim::{tables, SimDevice};
use vkalloc::{
    AliasRequirement, Allocation, AllocationDesc, AllocationId, AllocationOptions, Allocator,
    AllocatorDesc, CommitErrorKind, DefragAlgorithm, DefragDesc, LinearMode, MappedAllocation,
    MemoryUsage, PassInterval, PoolAlgorithm, PoolDesc, PoolId, ResourceKind,
};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

type Alloc = Allocator<Arc<SimDevice>>;

/// Runs `f` in a thread; fails the test if it does not finish in `secs`.
fn watchdog<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let out = f();
        let _ = tx.send(());
        out
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(()) => h.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => match h.join() {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("watchdog: the racing part did not finish within {secs} s (deadlock?)")
        }
    }
}

fn desc(size: u64, usage: MemoryUsage, pool: Option<PoolId>) -> AllocationDesc<'static> {
    let mut options = AllocationOptions::usage(usage);
    if let Some(p) = pool {
        options = options.in_pool(p);
    }
    AllocationDesc {
        size,
        alignment: 256,
        kind: ResourceKind::Buffer,
        options,
        ..AllocationDesc::default()
    }
}

/// A mapped upload buffer of 1..=64 KiB, its size drawn from `rng`.
fn upload(allocator: &Alloc, rng: &mut ChaCha8Rng) -> MappedAllocation {
    let size = rng.gen_range(1..=64u64) * KIB;
    allocator
        .allocate_mapped(&desc(size, MemoryUsage::Upload, None))
        .unwrap()
}

/// Mapped buffers kept live by id, each with the byte it is filled with.
type Live = Mutex<HashMap<AllocationId, (u8, MappedAllocation)>>;

fn check_no_overlap<'a>(live: impl IntoIterator<Item = &'a Allocation>) {
    let mut by_place: BTreeMap<(DeviceMemory, u64), u64> = BTreeMap::new();
    for a in live {
        assert!(
            by_place
                .insert((a.memory(), a.offset()), a.size())
                .is_none(),
            "two live allocations at one place"
        );
    }
    let mut prev: Option<((DeviceMemory, u64), u64)> = None;
    for (&(m, o), &s) in &by_place {
        if let Some(((pm, po), ps)) = prev {
            assert!(pm != m || po + ps <= o, "allocations overlap");
        }
        prev = Some(((m, o), s));
    }
}

fn holds(m: &MappedAllocation, byte: u8) -> bool {
    m.as_slice().iter().all(|&b| b == byte)
}

/// The end of every test: invariants, no leak, a clean destroy, and the
/// device holds nothing and saw no contract broken.
fn clean_end(allocator: Arc<Alloc>, sim: &Arc<SimDevice>) {
    allocator.validate().expect("invariants hold at the end");
    let allocator = Arc::into_inner(allocator).expect("no other thread holds the allocator");
    let stats = allocator.statistics();
    assert_eq!(stats.total.allocation_count, 0, "{stats:?}");
    assert_eq!(stats.total.allocation_bytes, 0);
    assert!(allocator.leaks().is_empty(), "{:?}", allocator.leaks());
    assert_eq!(allocator.check_corruption(), 0);
    assert_eq!(stats.corruptions_detected, 0);
    let report = allocator.destroy();
    assert!(report.is_empty(), "{report}");
    assert_eq!(report.blocks_kept, 0);
    assert_eq!(sim.live_objects(), 0, "device memory left after destroy");
    assert_eq!(sim.violations(), 0, "{:?}", sim.violation_log());
}

fn make(desc: AllocatorDesc) -> (Arc<SimDevice>, Arc<Alloc>) {
    let sim = Arc::new(SimDevice::new(tables::amd_discrete()));
    let allocator = Arc::new(Allocator::new(Arc::clone(&sim), desc).unwrap());
    (sim, allocator)
}

/// Fragmented GpuOnly memory: `n` allocations of up to `max`, every other
/// freed.
fn fragment(allocator: &Alloc, rng: &mut ChaCha8Rng, n: usize, max: u64) -> Vec<Allocation> {
    let all: Vec<Allocation> = (0..n)
        .map(|_| {
            let size = rng.gen_range(1..=max / KIB) * KIB;
            allocator
                .allocate(&desc(size, MemoryUsage::GpuOnly, None))
                .unwrap()
        })
        .collect();
    let mut kept = Vec::new();
    for (i, a) in all.into_iter().enumerate() {
        if i % 2 == 0 {
            allocator.free(a).unwrap();
        } else {
            kept.push(a);
        }
    }
    kept
}

// ---------------------------------------------------------------------------
// 1. An alias group's allocation is "never moved by defragmentation"; it is
//    allocated and only then pinned and given its members, in a second lock
//    acquisition. A pass on another thread in between hands out a move of it.
// ---------------------------------------------------------------------------

#[test]
fn alias_group_is_never_handed_out_as_a_move_while_passes_run() {
    let (sim, allocator) = make(AllocatorDesc::default().with_block_size(8 * MIB));
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let background = fragment(&allocator, &mut rng, 400, 128 * KIB);
    let alias_ids: Arc<Mutex<HashSet<AllocationId>>> = Arc::new(Mutex::new(HashSet::new()));
    let moved_ids: Arc<Mutex<HashSet<AllocationId>>> = Arc::new(Mutex::new(HashSet::new()));
    let done = Arc::new(AtomicBool::new(false));
    {
        let (allocator, alias_ids, moved_ids, done) = (
            Arc::clone(&allocator),
            Arc::clone(&alias_ids),
            Arc::clone(&moved_ids),
            Arc::clone(&done),
        );
        watchdog(60, move || {
            let start = Arc::new(Barrier::new(3));
            let grouper = {
                let (allocator, alias_ids, done, start) = (
                    Arc::clone(&allocator),
                    Arc::clone(&alias_ids),
                    Arc::clone(&done),
                    Arc::clone(&start),
                );
                std::thread::spawn(move || {
                    start.wait();
                    let mut rng = ChaCha8Rng::seed_from_u64(6);
                    let mut held = Vec::new();
                    for _ in 0..300_000 {
                        let a = rng.gen_range(1..=32u64) * 4 * KIB;
                        let members = [
                            AliasRequirement {
                                size: a,
                                alignment: 4096,
                                memory_type_bits: u32::MAX,
                                kind: ResourceKind::Buffer,
                                lifetime: PassInterval::new(0, 1),
                                tag: "a",
                            },
                            AliasRequirement {
                                size: a / 2,
                                alignment: 4096,
                                memory_type_bits: u32::MAX,
                                kind: ResourceKind::Buffer,
                                lifetime: PassInterval::new(2, 3),
                                tag: "b",
                            },
                        ];
                        let g = allocator
                            .allocate_alias_group(
                                &members,
                                AllocationOptions::usage(MemoryUsage::GpuOnly),
                            )
                            .unwrap();
                        alias_ids.lock().unwrap().insert(g.allocation().id());
                        assert!(!allocator.is_movable(g.allocation()));
                        held.push(g);
                        if held.len() > 8 {
                            let g = held.swap_remove(rng.gen_range(0..held.len()));
                            allocator.free_alias_group(g).unwrap();
                        }
                    }
                    done.store(true, Ordering::Relaxed);
                    for g in held {
                        allocator.free_alias_group(g).unwrap();
                    }
                })
            };
            let churner = {
                let (allocator, done, start) = (
                    Arc::clone(&allocator),
                    Arc::clone(&done),
                    Arc::clone(&start),
                );
                std::thread::spawn(move || {
                    start.wait();
                    let mut rng = ChaCha8Rng::seed_from_u64(7);
                    let mut own = Vec::new();
                    while !done.load(Ordering::Relaxed) {
                        let size = rng.gen_range(1..=64u64) * KIB;
                        own.push(
                            allocator
                                .allocate(&desc(size, MemoryUsage::GpuOnly, None))
                                .unwrap(),
                        );
                        if own.len() > 64 {
                            let a = own.swap_remove(rng.gen_range(0..own.len()));
                            allocator.free(a).unwrap();
                        }
                    }
                    for a in own {
                        allocator.free(a).unwrap();
                    }
                })
            };
            start.wait();
            let full = DefragDesc::default()
                .with_algorithm(DefragAlgorithm::Full)
                .with_pass_limits(u64::MAX, u32::MAX);
            let mut session = allocator.begin_defragmentation(&full).unwrap();
            while !done.load(Ordering::Relaxed) {
                // Nothing committed: every move is dropped (kept in place).
                for mv in session.begin_pass(&allocator).unwrap() {
                    moved_ids.lock().unwrap().insert(mv.id());
                }
                session.end_pass(&allocator).unwrap();
            }
            session.end(&allocator).unwrap();
            grouper.join().unwrap();
            churner.join().unwrap();
        });
    }
    let alias_ids = alias_ids.lock().unwrap();
    let moved = moved_ids.lock().unwrap();
    let bad: Vec<_> = alias_ids.intersection(&moved).collect();
    assert!(
        bad.is_empty(),
        "{} alias groups' allocations (of {}) were handed out as defragmentation moves, e.g. {:?}",
        bad.len(),
        alias_ids.len(),
        bad.first()
    );
    for a in background {
        allocator.free(a).unwrap();
    }
    clean_end(allocator, &sim);
}

// ---------------------------------------------------------------------------
// 2. Two sessions on two threads committing moves, with workers allocating,
//    freeing (sources and committed destinations), toggling `set_movable`,
//    and a housekeeper trimming, framing and reading every diagnostic.
// ---------------------------------------------------------------------------

#[derive(Default)]
struct Tally {
    committed: AtomicU64,
    wrong_allocation: AtomicU64,
    source_freed: AtomicU64,
    stale: AtomicU64,
    is_cancelled_but_live: AtomicU64,
    /// Moves whose source range lay in device memory already freed when
    /// `begin_pass` returned (observed 0 so far; printed only).
    source_memory_dead: AtomicU64,
}

fn run_session(
    allocator: &Alloc,
    live: &Live,
    tally: &Tally,
    passes: u32,
    algorithm: DefragAlgorithm,
) {
    let d = DefragDesc::default()
        .with_algorithm(algorithm)
        .with_pass_limits(8 * MIB, 64);
    let mut session = allocator.begin_defragmentation(&d).unwrap();
    for _ in 0..passes {
        let moves = session.begin_pass(allocator).unwrap();
        for mv in &moves {
            if allocator.device().memory_info(mv.source().0).is_none() {
                tally.source_memory_dead.fetch_add(1, Ordering::Relaxed);
            }
        }
        for mv in moves {
            let cancelled = session.is_cancelled(allocator, &mv);
            let taken = live.lock().unwrap().remove(&mv.id());
            let Some((byte, old)) = taken else {
                continue; // freed by a worker: the move is void
            };
            // "Copy" on the host: the source's bytes are the fill byte.
            assert!(holds(&old, byte), "source clobbered before the move");
            let location_matches =
                (old.allocation().memory(), old.allocation().offset()) == mv.source();
            if cancelled && location_matches {
                tally.is_cancelled_but_live.fetch_add(1, Ordering::Relaxed);
            }
            match session.commit(allocator, mv, old.into_allocation()) {
                Ok(new) => {
                    tally.committed.fetch_add(1, Ordering::Relaxed);
                    let mut new = new.into_mapped().expect("host-visible");
                    new.as_mut_slice().fill(byte);
                    live.lock()
                        .unwrap()
                        .insert(new.allocation().id(), (byte, new));
                }
                Err(e) => {
                    match e.kind {
                        CommitErrorKind::WrongAllocation => &tally.wrong_allocation,
                        CommitErrorKind::SourceFreed => &tally.source_freed,
                        _ => &tally.stale,
                    }
                    .fetch_add(1, Ordering::Relaxed);
                    let (_mv, a) = e.into_parts();
                    let a = a.into_mapped().expect("host-visible");
                    live.lock().unwrap().insert(a.allocation().id(), (byte, a));
                }
            }
        }
        session.end_pass(allocator).unwrap();
    }
    session.end(allocator).unwrap();
}

#[test]
fn two_sessions_commit_while_workers_free_pin_and_housekeep() {
    let (sim, allocator) = make(
        AllocatorDesc::default()
            .with_block_size(4 * MIB)
            .with_debug_margin(16),
    );
    let live: Arc<Live> = Arc::new(Mutex::new(HashMap::new()));
    {
        // Fragmented host-visible memory.
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mut all = Vec::new();
        for n in 0..600u32 {
            let mut m = upload(&allocator, &mut rng);
            let byte = (n % 251) as u8 + 1;
            m.as_mut_slice().fill(byte);
            all.push((byte, m));
        }
        let mut live = live.lock().unwrap();
        for (i, (byte, m)) in all.into_iter().enumerate() {
            if i % 2 == 0 {
                allocator.free(m).unwrap();
            } else {
                live.insert(m.allocation().id(), (byte, m));
            }
        }
    }
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    {
        let (allocator, live, tally, stop) = (
            Arc::clone(&allocator),
            Arc::clone(&live),
            Arc::clone(&tally),
            Arc::clone(&stop),
        );
        watchdog(90, move || {
            let mut handles = Vec::new();
            for w in 0..2u64 {
                let (allocator, live, stop) =
                    (Arc::clone(&allocator), Arc::clone(&live), Arc::clone(&stop));
                handles.push(std::thread::spawn(move || {
                    let mut rng = ChaCha8Rng::seed_from_u64(200 + w);
                    let mut n = 0u32;
                    while !stop.load(Ordering::Relaxed) && n < 20000 {
                        n += 1;
                        match rng.gen_range(0..10) {
                            0..=3 => {
                                let victim = {
                                    let mut l = live.lock().unwrap();
                                    let k = l.keys().nth(rng.gen_range(0..l.len().max(1))).copied();
                                    k.and_then(|k| l.remove(&k))
                                };
                                if let Some((byte, m)) = victim {
                                    assert!(holds(&m, byte), "a live buffer was clobbered");
                                    allocator.free(m).unwrap();
                                }
                            }
                            4..=7 => {
                                let mut m = upload(&allocator, &mut rng);
                                let byte = rng.gen_range(1..=255u8);
                                m.as_mut_slice().fill(byte);
                                live.lock().unwrap().insert(m.allocation().id(), (byte, m));
                            }
                            _ => {
                                let l = live.lock().unwrap();
                                if let Some((_, (_, m))) =
                                    l.iter().nth(rng.gen_range(0..l.len().max(1)))
                                {
                                    allocator
                                        .set_movable(m.allocation(), rng.gen_bool(0.7))
                                        .unwrap();
                                }
                            }
                        }
                    }
                }));
            }
            {
                let (allocator, stop) = (Arc::clone(&allocator), Arc::clone(&stop));
                handles.push(std::thread::spawn(move || {
                    let mut r = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        r += 1;
                        allocator.begin_frame();
                        let _ = allocator.statistics();
                        if r % 4 == 0 {
                            allocator.trim();
                        }
                        if r % 8 == 0 {
                            let d = allocator.detailed_statistics();
                            for b in d.lists.iter().flat_map(|l| &l.blocks) {
                                let mut spans: Vec<(u64, u64)> = b
                                    .allocations
                                    .iter()
                                    .map(|a| (a.offset, a.offset + a.size))
                                    .collect();
                                spans.sort_unstable();
                                assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "overlap");
                            }
                            let _: serde_json::Value =
                                serde_json::from_str(&allocator.to_json()).expect("JSON");
                            let _ = allocator.leaks();
                            let _ = allocator.summary();
                            assert_eq!(allocator.check_corruption(), 0, "margins damaged");
                        }
                        std::thread::yield_now();
                    }
                }));
            }
            let sessions: Vec<_> = [DefragAlgorithm::Full, DefragAlgorithm::Fast]
                .into_iter()
                .map(|alg| {
                    let (allocator, live, tally) = (
                        Arc::clone(&allocator),
                        Arc::clone(&live),
                        Arc::clone(&tally),
                    );
                    std::thread::spawn(move || run_session(&allocator, &live, &tally, 1500, alg))
                })
                .collect();
            for s in sessions {
                s.join().unwrap();
            }
            stop.store(true, Ordering::Relaxed);
            for h in handles {
                h.join().unwrap();
            }
        });
    }
    allocator.validate().expect("invariants after the race");
    let mut live = std::mem::take(&mut *live.lock().unwrap());
    let allocs: Vec<&Allocation> = live.values().map(|(_, m)| m.allocation()).collect();
    check_no_overlap(allocs);
    assert_eq!(allocator.leaks().len(), live.len());
    assert_eq!(
        allocator.statistics().total.allocation_count,
        live.len() as u64
    );
    let totals = allocator.statistics().defragmentation;
    let committed = tally.committed.load(Ordering::Relaxed);
    assert_eq!(totals.allocations_moved, committed);
    assert_eq!(allocator.check_corruption(), 0);
    assert_eq!(allocator.statistics().corruptions_detected, 0);
    eprintln!(
        "committed {committed}, wrong {} source_freed {} stale {} cancelled-but-live {}",
        tally.wrong_allocation.load(Ordering::Relaxed),
        tally.source_freed.load(Ordering::Relaxed),
        tally.stale.load(Ordering::Relaxed),
        tally.is_cancelled_but_live.load(Ordering::Relaxed),
    );
    for (_, (byte, m)) in live.drain() {
        assert!(holds(&m, byte));
        allocator.free(m).unwrap();
    }
    // (Refused commits of the allocation held under the move's id are
    // checked by the focused test below; here only is_cancelled.)
    assert_eq!(
        tally.is_cancelled_but_live.load(Ordering::Relaxed),
        0,
        "is_cancelled said a move was void while its source was live and held"
    );
    clean_end(allocator, &sim);
}

// ---------------------------------------------------------------------------
// 3. Pools created and destroyed while other pools and default memory
//    allocate, and a reader takes every diagnostic, pool_pressure included.
// ---------------------------------------------------------------------------

#[test]
fn pools_come_and_go_while_others_allocate_and_diagnostics_run() {
    let (sim, allocator) = make(AllocatorDesc::default().with_debug_margin(32));
    let ids: Arc<Mutex<Vec<PoolId>>> = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    {
        let (allocator, ids, stop) = (Arc::clone(&allocator), Arc::clone(&ids), Arc::clone(&stop));
        watchdog(90, move || {
            let mut handles = Vec::new();
            for t in 0..3u64 {
                let (allocator, ids) = (Arc::clone(&allocator), Arc::clone(&ids));
                handles.push(std::thread::spawn(move || {
                    let mut rng = ChaCha8Rng::seed_from_u64(300 + t);
                    for round in 0..120u32 {
                        let algorithm = match round % 3 {
                            0 => PoolAlgorithm::Tlsf,
                            1 => PoolAlgorithm::Linear(LinearMode::Ring),
                            _ => PoolAlgorithm::Linear(LinearMode::Stack),
                        };
                        let pool = allocator
                            .create_pool(&PoolDesc {
                                usage: MemoryUsage::Upload,
                                block_size: MIB,
                                min_blocks: (round % 2),
                                max_blocks: 3,
                                algorithm,
                                ..PoolDesc::new(format!("t{t} r{round}"))
                            })
                            .unwrap();
                        ids.lock().unwrap().push(pool);
                        let mut own: Vec<(u8, MappedAllocation)> = Vec::new();
                        for n in 0..24u32 {
                            let size = rng.gen_range(1..=32u64) * KIB;
                            match allocator.allocate_mapped(&desc(
                                size,
                                MemoryUsage::Upload,
                                Some(pool),
                            )) {
                                Ok(mut m) => {
                                    let byte = (n as u8).wrapping_mul(7).wrapping_add(t as u8 + 1);
                                    m.as_mut_slice().fill(byte);
                                    own.push((byte, m));
                                }
                                Err(vkalloc::Error::PoolExhausted { .. })
                                | Err(vkalloc::Error::TooLarge { .. }) => {}
                                Err(e) => panic!("{e}"),
                            }
                        }
                        // Destroying a pool that still holds allocations is refused.
                        if !own.is_empty() {
                            assert!(allocator.destroy_pool(pool).is_err());
                        }
                        // Stack pools free in reverse order, others in any order.
                        if !matches!(algorithm, PoolAlgorithm::Linear(LinearMode::Stack)) {
                            let mut i = own.len();
                            while i > 0 {
                                i -= 1;
                                let j = rng.gen_range(0..=i);
                                own.swap(i, j);
                            }
                        }
                        while let Some((byte, m)) = own.pop() {
                            assert!(holds(&m, byte), "pool buffer clobbered");
                            allocator.free(m).unwrap();
                        }
                        ids.lock().unwrap().retain(|&p| p != pool);
                        allocator.destroy_pool(pool).unwrap();
                        assert!(allocator.destroy_pool(pool).is_err());
                        assert!(allocator
                            .allocate(&desc(4 * KIB, MemoryUsage::Upload, Some(pool)))
                            .is_err());
                    }
                }));
            }
            {
                let allocator = Arc::clone(&allocator);
                handles.push(std::thread::spawn(move || {
                    let mut rng = ChaCha8Rng::seed_from_u64(400);
                    let mut own: Vec<(u8, MappedAllocation)> = Vec::new();
                    for n in 0..6000u32 {
                        let size = rng.gen_range(1..=256u64) * KIB;
                        let mut m = allocator
                            .allocate_mapped(&desc(size, MemoryUsage::Upload, None))
                            .unwrap();
                        let byte = (n % 253) as u8 + 1;
                        m.as_mut_slice()[..64.min(size as usize)].fill(byte);
                        own.push((byte, m));
                        if own.len() > 40 {
                            let (byte, m) = own.swap_remove(rng.gen_range(0..own.len()));
                            assert!(m.as_slice()[..64.min(m.size() as usize)]
                                .iter()
                                .all(|&b| b == byte));
                            allocator.free(m).unwrap();
                        }
                    }
                    for (_, m) in own {
                        allocator.free(m).unwrap();
                    }
                }));
            }
            let reader = {
                let (allocator, ids, stop) =
                    (Arc::clone(&allocator), Arc::clone(&ids), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut r = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        r += 1;
                        let stats = allocator.statistics();
                        for p in &stats.pools {
                            assert!(
                                p.usage.allocation_bytes
                                    <= p.usage.block_bytes.max(p.usage.allocation_bytes)
                            );
                        }
                        let pools: Vec<PoolId> = ids.lock().unwrap().clone();
                        for p in pools {
                            if let Ok(pr) = allocator.pool_pressure(p) {
                                assert!(pr.pool_committed_bytes <= 3 * MIB, "{pr:?}");
                            }
                        }
                        if r % 4 == 0 {
                            let d = allocator.detailed_statistics();
                            for b in d.lists.iter().flat_map(|l| &l.blocks) {
                                let mut spans: Vec<(u64, u64)> = b
                                    .allocations
                                    .iter()
                                    .map(|a| (a.offset, a.offset + a.size))
                                    .collect();
                                spans.sort_unstable();
                                assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "overlap");
                                assert!(spans.last().is_none_or(|s| s.1 <= b.size));
                            }
                            let _: serde_json::Value =
                                serde_json::from_str(&allocator.to_json()).expect("JSON");
                            let _ = allocator.snapshot();
                            let _ = allocator.leaks();
                            assert_eq!(allocator.check_corruption(), 0);
                        }
                        if r % 16 == 0 {
                            allocator.trim();
                            allocator.begin_frame();
                        }
                        std::thread::yield_now();
                    }
                })
            };
            for h in handles {
                h.join().unwrap();
            }
            stop.store(true, Ordering::Relaxed);
            reader.join().unwrap();
        });
    }
    assert!(allocator.statistics().pools.is_empty());
    clean_end(allocator, &sim);
}

// ---------------------------------------------------------------------------
// 4. One ring pool and one stack pool shared by several threads; a block cap
//    makes them fail often; every buffer keeps its bytes.
// ---------------------------------------------------------------------------

#[test]
fn linear_pools_shared_by_threads_keep_every_buffer() {
    let (sim, allocator) = make(AllocatorDesc::default());
    let pools: Vec<PoolId> = [LinearMode::Ring, LinearMode::Stack]
        .into_iter()
        .map(|mode| {
            allocator
                .create_pool(&PoolDesc {
                    usage: MemoryUsage::Upload,
                    block_size: MIB,
                    max_blocks: 1,
                    algorithm: PoolAlgorithm::Linear(mode),
                    ..PoolDesc::new(format!("{mode:?}"))
                })
                .unwrap()
        })
        .collect();
    {
        let (allocator, pools) = (Arc::clone(&allocator), pools.clone());
        watchdog(60, move || {
            let handles: Vec<_> = (0..4u64)
                .map(|t| {
                    let (allocator, pools) = (Arc::clone(&allocator), pools.clone());
                    std::thread::spawn(move || {
                        let mut rng = ChaCha8Rng::seed_from_u64(500 + t);
                        let mut own: Vec<(u8, MappedAllocation)> = Vec::new();
                        let pool = pools[(t % 2) as usize];
                        for n in 0..4000u32 {
                            if rng.gen_bool(0.55) {
                                let size = rng.gen_range(1..=16u64) * KIB;
                                if let Ok(mut m) = allocator.allocate_mapped(&desc(
                                    size,
                                    MemoryUsage::Upload,
                                    Some(pool),
                                )) {
                                    let byte = (n % 250) as u8 + 1;
                                    m.as_mut_slice().fill(byte);
                                    own.push((byte, m));
                                }
                            } else if !own.is_empty() {
                                // Ring threads free their oldest, stack threads their newest:
                                // across threads the order is arbitrary.
                                let (byte, m) = if t % 2 == 0 {
                                    own.remove(0)
                                } else {
                                    own.pop().unwrap()
                                };
                                assert!(holds(&m, byte), "linear buffer clobbered");
                                allocator.free(m).unwrap();
                            }
                        }
                        for (byte, m) in own {
                            assert!(holds(&m, byte));
                            allocator.free(m).unwrap();
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
        });
    }
    allocator.validate().unwrap();
    for p in pools {
        allocator.destroy_pool(p).unwrap();
    }
    clean_end(allocator, &sim);
}

// ---------------------------------------------------------------------------
// 5. Committed destinations freed by another thread before the pass ends,
//    blocks emptied and made again in their slots, while passes run.
// ---------------------------------------------------------------------------

#[test]
fn committed_destinations_freed_mid_pass_by_other_threads() {
    let (sim, allocator) = make(AllocatorDesc::default().with_block_size(2 * MIB));
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let live: Arc<Mutex<HashMap<AllocationId, Allocation>>> = Arc::new(Mutex::new(
        fragment(&allocator, &mut rng, 600, 64 * KIB)
            .into_iter()
            .map(|a| (a.id(), a))
            .collect(),
    ));
    let fresh: Arc<Mutex<Vec<Allocation>>> = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    {
        let (allocator, live, fresh, stop) = (
            Arc::clone(&allocator),
            Arc::clone(&live),
            Arc::clone(&fresh),
            Arc::clone(&stop),
        );
        watchdog(60, move || {
            let killer = {
                let (allocator, live, fresh, stop) = (
                    Arc::clone(&allocator),
                    Arc::clone(&live),
                    Arc::clone(&fresh),
                    Arc::clone(&stop),
                );
                std::thread::spawn(move || {
                    let mut rng = ChaCha8Rng::seed_from_u64(10);
                    while !stop.load(Ordering::Relaxed) {
                        // Free a just-committed destination, or any live one.
                        let victim = fresh.lock().unwrap().pop().or_else(|| {
                            let mut l = live.lock().unwrap();
                            let k = l.keys().nth(rng.gen_range(0..l.len().max(1))).copied();
                            k.and_then(|k| l.remove(&k))
                        });
                        if let Some(a) = victim {
                            allocator.free(a).unwrap();
                        }
                        let size = rng.gen_range(1..=64u64) * KIB;
                        let a = allocator
                            .allocate(&desc(size, MemoryUsage::GpuOnly, None))
                            .unwrap();
                        live.lock().unwrap().insert(a.id(), a);
                    }
                })
            };
            for alg in [
                DefragAlgorithm::Full,
                DefragAlgorithm::Fast,
                DefragAlgorithm::Full,
            ] {
                let d = DefragDesc::default()
                    .with_algorithm(alg)
                    .with_pass_limits(MIB, 16);
                let mut s = allocator.begin_defragmentation(&d).unwrap();
                for _ in 0..60 {
                    for mv in s.begin_pass(&allocator).unwrap() {
                        let old = live.lock().unwrap().remove(&mv.id());
                        if let Some(old) = old {
                            match s.commit(&allocator, mv, old) {
                                Ok(new) => fresh.lock().unwrap().push(new),
                                Err(e) => {
                                    let (_, a) = e.into_parts();
                                    live.lock().unwrap().insert(a.id(), a);
                                }
                            }
                        }
                    }
                    s.end_pass(&allocator).unwrap();
                }
                s.end(&allocator).unwrap();
            }
            stop.store(true, Ordering::Relaxed);
            killer.join().unwrap();
        });
    }
    allocator.validate().unwrap();
    let mut all: Vec<Allocation> = live.lock().unwrap().drain().map(|(_, a)| a).collect();
    all.append(&mut fresh.lock().unwrap());
    check_no_overlap(all.iter());
    assert_eq!(allocator.leaks().len(), all.len());
    for a in all {
        allocator.free(a).unwrap();
    }
    clean_end(allocator, &sim);
}

// ---------------------------------------------------------------------------
// 6. Focused: two sessions, each committing every move whose id the caller
//    holds, one worker keeping holes open. Nobody else frees a session's
//    sources, so a commit of the allocation the caller holds under the move's
//    id can only be refused if the move's source is not that allocation.
// ---------------------------------------------------------------------------

#[test]
fn two_sessions_never_hand_out_a_source_another_session_committed_away() {
    let (sim, allocator) = make(AllocatorDesc::default().with_block_size(4 * MIB));
    let live: Arc<Live> = Arc::new(Mutex::new(HashMap::new()));
    {
        let mut rng = ChaCha8Rng::seed_from_u64(12);
        let mut l = live.lock().unwrap();
        for n in 0..800u32 {
            let mut m = upload(&allocator, &mut rng);
            let byte = (n % 251) as u8 + 1;
            m.as_mut_slice().fill(byte);
            if n % 2 == 0 {
                allocator.free(m).unwrap();
            } else {
                l.insert(m.allocation().id(), (byte, m));
            }
        }
    }
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    {
        let (allocator, live, tally, stop) = (
            Arc::clone(&allocator),
            Arc::clone(&live),
            Arc::clone(&tally),
            Arc::clone(&stop),
        );
        watchdog(90, move || {
            let worker = {
                let (allocator, live, stop) =
                    (Arc::clone(&allocator), Arc::clone(&live), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut rng = ChaCha8Rng::seed_from_u64(13);
                    while !stop.load(Ordering::Relaxed) {
                        let victim = {
                            let mut l = live.lock().unwrap();
                            let k = l.keys().nth(rng.gen_range(0..l.len().max(1))).copied();
                            k.and_then(|k| l.remove(&k))
                        };
                        if let Some((byte, m)) = victim {
                            assert!(holds(&m, byte));
                            allocator.free(m).unwrap();
                        }
                        let mut m = upload(&allocator, &mut rng);
                        let byte = rng.gen_range(1..=255u8);
                        m.as_mut_slice().fill(byte);
                        live.lock().unwrap().insert(m.allocation().id(), (byte, m));
                        std::thread::sleep(Duration::from_micros(50));
                    }
                })
            };
            let sessions: Vec<_> = (0..2)
                .map(|_| {
                    let (allocator, live, tally) = (
                        Arc::clone(&allocator),
                        Arc::clone(&live),
                        Arc::clone(&tally),
                    );
                    std::thread::spawn(move || {
                        for _ in 0..20 {
                            run_session(&allocator, &live, &tally, 300, DefragAlgorithm::Full);
                            let t = &tally;
                            if t.wrong_allocation.load(Ordering::Relaxed)
                                + t.source_freed.load(Ordering::Relaxed)
                                > 0
                            {
                                break;
                            }
                        }
                    })
                })
                .collect();
            for s in sessions {
                s.join().unwrap();
            }
            stop.store(true, Ordering::Relaxed);
            worker.join().unwrap();
        });
    }
    allocator.validate().expect("invariants after the race");
    let mut live = std::mem::take(&mut *live.lock().unwrap());
    check_no_overlap(live.values().map(|(_, m)| m.allocation()));
    assert_eq!(allocator.leaks().len(), live.len());
    let (wrong, freed) = (
        tally.wrong_allocation.load(Ordering::Relaxed),
        tally.source_freed.load(Ordering::Relaxed),
    );
    eprintln!(
        "committed {} wrong {wrong} source_freed {freed} source memory already freed {}",
        tally.committed.load(Ordering::Relaxed),
        tally.source_memory_dead.load(Ordering::Relaxed)
    );
    for (_, (byte, m)) in live.drain() {
        assert!(holds(&m, byte));
        allocator.free(m).unwrap();
    }
    assert_eq!(
        (wrong, freed),
        (0, 0),
        "commits of the allocation held under the move's id were refused: the move's source \
         was another session's old range, already committed away"
    );
    clean_end(allocator, &sim);
}

// ---------------------------------------------------------------------------
// 7. Dedicated memory recycled (and recycled as shared blocks) while other
//    threads grow and empty shared blocks, and frames and trims free kept
//    memory; budgets asked for on some requests.
// ---------------------------------------------------------------------------

#[test]
fn recycled_dedicated_memory_races_shared_blocks_frames_and_trims() {
    let (sim, allocator) = make(AllocatorDesc::default().with_block_size(16 * MIB));
    let stop = Arc::new(AtomicBool::new(false));
    {
        let (allocator, stop) = (Arc::clone(&allocator), Arc::clone(&stop));
        watchdog(60, move || {
            let mut handles = Vec::new();
            for t in 0..3u64 {
                let allocator = Arc::clone(&allocator);
                handles.push(std::thread::spawn(move || {
                    let mut rng = ChaCha8Rng::seed_from_u64(700 + t);
                    let mut own: Vec<(u8, MappedAllocation)> = Vec::new();
                    for n in 0..1500u32 {
                        let dedicated = t == 0 || rng.gen_bool(0.2);
                        let size = if dedicated {
                            rng.gen_range(1..=8u64) * MIB
                        } else {
                            rng.gen_range(1..=1024u64) * 4 * KIB
                        };
                        let mut options = AllocationOptions::usage(MemoryUsage::Upload);
                        if dedicated {
                            options.dedicated = vkalloc::DedicatedPolicy::Always;
                        }
                        options.within_budget = rng.gen_bool(0.3);
                        let d = AllocationDesc {
                            size,
                            alignment: 256,
                            kind: ResourceKind::Buffer,
                            options,
                            ..AllocationDesc::default()
                        };
                        match allocator.allocate_mapped(&d) {
                            Ok(mut m) => {
                                let byte = (n % 250) as u8 + 1 + t as u8;
                                let len = m.size().min(4096) as usize;
                                m.as_mut_slice()[..len].fill(byte);
                                let end = m.size() as usize;
                                m.as_mut_slice()[end - len..].fill(byte);
                                own.push((byte, m));
                            }
                            Err(vkalloc::Error::OverBudget { .. }) => {}
                            Err(e) => panic!("{e}"),
                        }
                        if own.len() > 12 || (rng.gen_bool(0.4) && !own.is_empty()) {
                            let (byte, m) = own.swap_remove(rng.gen_range(0..own.len()));
                            let len = m.size().min(4096) as usize;
                            let end = m.size() as usize;
                            assert!(
                                m.as_slice()[..len].iter().all(|&b| b == byte),
                                "head clobbered"
                            );
                            assert!(
                                m.as_slice()[end - len..].iter().all(|&b| b == byte),
                                "tail clobbered"
                            );
                            allocator.free(m).unwrap();
                        }
                    }
                    for (_, m) in own {
                        allocator.free(m).unwrap();
                    }
                }));
            }
            let keeper = {
                let (allocator, stop) = (Arc::clone(&allocator), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut r = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        r += 1;
                        allocator.begin_frame();
                        if r % 3 == 0 {
                            allocator.trim();
                        }
                        let _ = allocator.statistics();
                        std::thread::yield_now();
                    }
                })
            };
            for h in handles {
                h.join().unwrap();
            }
            stop.store(true, Ordering::Relaxed);
            keeper.join().unwrap();
        });
    }
    allocator.validate().unwrap();
    let s = allocator.statistics();
    assert_eq!(s.device_memory_objects as u64, sim.live_objects());
    allocator.trim();
    assert_eq!(allocator.statistics().total.block_count, 0);
    assert_eq!(sim.live_objects(), 0);
    clean_end(allocator, &sim);
}

// ---------------------------------------------------------------------------
// 8. Requests `within_budget` on several threads while another thread's
//    frames re-read the driver's budget: the heap never passes the budget.
//    (It passed it by 1-10 MiB until a refresh stopped subtracting memory
//    freed during its driver read twice: `Budgets::refresh`, unit test
//    `memory_freed_during_a_refresh_is_not_subtracted_twice`.)
// ---------------------------------------------------------------------------

#[test]
fn within_budget_requests_racing_budget_refreshes_stay_within_budget() {
    use vkalloc::device::MemoryDevice;
    const BUDGET: u64 = 64 * MIB;
    let sim = Arc::new(SimDevice::new(tables::nvidia_h200()));
    let allocator = Arc::new(
        Allocator::new(
            Arc::clone(&sim),
            AllocatorDesc::default().with_recycle_bytes(0),
        )
        .unwrap(),
    );
    let probe = allocator
        .allocate(&desc(4 * KIB, MemoryUsage::GpuOnly, None))
        .unwrap();
    let heap = sim.memory_properties().types[probe.memory_type() as usize].heap_index;
    allocator.free(probe).unwrap();
    allocator.trim();
    sim.set_heap_budget(heap, Some(BUDGET));
    for _ in 0..32 {
        allocator.begin_frame();
    }
    let stop = Arc::new(AtomicBool::new(false));
    {
        let (allocator, stop) = (Arc::clone(&allocator), Arc::clone(&stop));
        watchdog(60, move || {
            let workers: Vec<_> = (0..3u64)
                .map(|t| {
                    let allocator = Arc::clone(&allocator);
                    std::thread::spawn(move || {
                        let mut rng = ChaCha8Rng::seed_from_u64(800 + t);
                        let mut own = Vec::new();
                        for _ in 0..40_000 {
                            let mut options = AllocationOptions::usage(MemoryUsage::GpuOnly);
                            options.dedicated = vkalloc::DedicatedPolicy::Always;
                            options.within_budget = true;
                            let d = AllocationDesc {
                                size: rng.gen_range(1..=4u64) * MIB,
                                options,
                                ..AllocationDesc::default()
                            };
                            match allocator.allocate(&d) {
                                Ok(a) => own.push(a),
                                Err(vkalloc::Error::OverBudget { .. }) => {}
                                Err(e) => panic!("{e}"),
                            }
                            if own.len() > 8 || (rng.gen_bool(0.5) && !own.is_empty()) {
                                let a = own.swap_remove(rng.gen_range(0..own.len()));
                                allocator.free(a).unwrap();
                            }
                        }
                        for a in own {
                            allocator.free(a).unwrap();
                        }
                    })
                })
                .collect();
            let framer = {
                let (allocator, stop) = (Arc::clone(&allocator), Arc::clone(&stop));
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        allocator.begin_frame();
                    }
                })
            };
            for w in workers {
                w.join().unwrap();
            }
            stop.store(true, Ordering::Relaxed);
            framer.join().unwrap();
        });
    }
    let peak = sim.peak_bytes(heap);
    eprintln!("peak {} MiB of a {} MiB budget", peak / MIB, BUDGET / MIB);
    assert!(
        peak <= BUDGET,
        "requests within budget took the heap to {peak} bytes, over its budget of {BUDGET}"
    );
    clean_end(allocator, &sim);
}

// ---------------------------------------------------------------------------
// 9. `statistics()` read while another thread makes and frees dedicated
//    memory: a snapshot never shows more dedicated blocks than blocks, nor
//    allocations without bytes (or bytes without allocations).
// ---------------------------------------------------------------------------

#[test]
#[ignore = "known: statistics() reads relaxed per-field counters, documented as moments apart under concurrent changes; run with --ignored"]
fn statistics_read_during_dedicated_churn_are_consistent() {
    let sim = Arc::new(SimDevice::new(tables::nvidia_h200()));
    let allocator = Arc::new(
        Allocator::new(
            Arc::clone(&sim),
            AllocatorDesc::default().with_recycle_bytes(0),
        )
        .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let bad = {
        let (allocator, stop) = (Arc::clone(&allocator), Arc::clone(&stop));
        watchdog(60, move || {
            let churn = {
                let (allocator, stop) = (Arc::clone(&allocator), Arc::clone(&stop));
                std::thread::spawn(move || {
                    for _ in 0..150_000 {
                        let mut options = AllocationOptions::usage(MemoryUsage::GpuOnly);
                        options.dedicated = vkalloc::DedicatedPolicy::Always;
                        let a = allocator
                            .allocate(&AllocationDesc {
                                size: MIB,
                                options,
                                ..AllocationDesc::default()
                            })
                            .unwrap();
                        allocator.free(a).unwrap();
                    }
                    stop.store(true, Ordering::Relaxed);
                })
            };
            let mut bad = None;
            while !stop.load(Ordering::Relaxed) {
                let u = allocator.statistics().total;
                let torn = u.dedicated_count > u.block_count
                    || (u.allocation_count == 0) != (u.allocation_bytes == 0)
                    || (u.block_count == 0) != (u.block_bytes == 0);
                if torn && bad.is_none() {
                    bad = Some(u);
                }
            }
            churn.join().unwrap();
            bad
        })
    };
    assert!(
        bad.is_none(),
        "statistics() returned an impossible usage: {bad:?}"
    );
    clean_end(allocator, &sim);
}
