//! Defragmentation and aliasing on the simulated device: random workloads
//! against a shadow model on several GPU tables, every bad input, other
//! threads allocating and freeing during passes, the compaction figure.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vkalloc::device::DeviceMemory;
use vkalloc::sim::{tables, GpuTable, SimDevice};
use vkalloc::{
    AliasRequirement, Allocation, AllocationDesc, AllocationId, AllocationOptions, Allocator,
    AllocatorDesc, CommitErrorKind, DefragAlgorithm, DefragDesc, DefragError, LinearMode,
    MemoryUsage, PassInterval, PoolAlgorithm, PoolDesc, ResourceKind,
};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

type Alloc = Allocator<Arc<SimDevice>>;

fn desc(
    size: u64,
    alignment: u64,
    kind: ResourceKind,
    usage: MemoryUsage,
) -> AllocationDesc<'static> {
    AllocationDesc {
        size,
        alignment,
        kind,
        options: AllocationOptions::usage(usage),
        ..AllocationDesc::default()
    }
}

/// Checks that no two live allocations overlap and each keeps its size.
fn check_no_overlap(live: &HashMap<AllocationId, Allocation>) {
    let mut by_place: BTreeMap<(DeviceMemory, u64), (u64, AllocationId)> = BTreeMap::new();
    for (id, a) in live {
        assert_eq!(a.id(), *id);
        by_place.insert((a.memory(), a.offset()), (a.size(), *id));
    }
    let mut prev: Option<((DeviceMemory, u64), u64)> = None;
    for (&(memory, offset), &(size, _)) in &by_place {
        if let Some(((pm, po), ps)) = prev {
            assert!(pm != memory || po + ps <= offset, "allocations overlap");
        }
        prev = Some(((memory, offset), size));
    }
}

/// Runs passes until one is complete (at most `max_passes`), committing
/// every move whose source `live` holds, and checking `validate()` after
/// each pass. Returns the passes run.
fn run_passes(
    allocator: &Alloc,
    desc: &DefragDesc,
    live: &mut HashMap<AllocationId, Allocation>,
    max_passes: u32,
    rng: &mut ChaCha8Rng,
) -> u32 {
    let mut defrag = allocator.begin_defragmentation(desc).unwrap();
    let mut passes = 0;
    let mut committed_before = allocator.statistics().total.block_bytes;
    loop {
        let moves = defrag.begin_pass(allocator).unwrap();
        assert!(moves.len() as u64 <= u64::from(desc.max_allocations_per_pass));
        assert!(moves.iter().map(|m| m.size()).sum::<u64>() <= desc.max_bytes_per_pass);
        for mv in moves {
            assert!(!defrag.is_cancelled(allocator, &mv));
            // Now and then the caller gives a move up.
            if rng.gen_ratio(1, 20) {
                defrag.cancel(mv);
                continue;
            }
            let old = live.remove(&mv.id()).expect("moves name live allocations");
            assert_eq!(old.size(), mv.size());
            assert_eq!(old.memory_type(), mv.memory_type());
            assert_eq!(mv.source(), (old.memory(), old.offset()));
            let destination = mv.destination();
            let new = defrag.commit(allocator, mv, old).unwrap();
            assert_eq!((new.memory(), new.offset()), destination);
            live.insert(new.id(), new);
        }
        let report = defrag.end_pass(allocator).unwrap();
        passes += 1;
        allocator.validate().expect("validate after every pass");
        assert_eq!(allocator.check_corruption(), 0, "margins moved intact");
        check_no_overlap(live);
        let committed = allocator.statistics().total.block_bytes;
        if desc.algorithm == DefragAlgorithm::Full || report.stats.moves_cancelled == 0 {
            // Moves go only into fuller blocks: committed memory never grows.
            assert!(
                committed <= committed_before,
                "{committed} > {committed_before}"
            );
        }
        committed_before = committed;
        if report.complete || passes == max_passes {
            break;
        }
    }
    let stats = defrag.end(allocator).unwrap();
    assert_eq!(stats.passes, passes as u64);
    passes
}

fn fragment(
    allocator: &Alloc,
    rng: &mut ChaCha8Rng,
    count: usize,
    max: u64,
) -> HashMap<AllocationId, Allocation> {
    let mut all = Vec::new();
    for i in 0..count {
        let size = rng.gen_range(1..=max / KIB) * KIB;
        let kind = [ResourceKind::Buffer, ResourceKind::OptimalImage][i % 2];
        all.push(
            allocator
                .allocate(&desc(size, 256, kind, MemoryUsage::GpuOnly))
                .unwrap(),
        );
    }
    let mut live = HashMap::new();
    for (i, a) in all.into_iter().enumerate() {
        if i % 2 == 0 {
            allocator.free(a).unwrap();
        } else {
            live.insert(a.id(), a);
        }
    }
    live
}

fn free_all(allocator: Alloc, sim: &Arc<SimDevice>, live: HashMap<AllocationId, Allocation>) {
    for (_, a) in live {
        allocator.free(a).unwrap();
    }
    allocator.validate().unwrap();
    assert_eq!(allocator.statistics().total.allocation_count, 0);
    assert!(allocator.leaks().is_empty());
    drop(allocator);
    assert_eq!(sim.live_objects(), 0);
    assert_eq!(sim.violations(), 0, "{:?}", sim.violation_log());
}

fn tables_under_test() -> Vec<GpuTable> {
    vec![
        tables::nvidia_discrete(),
        tables::amd_discrete(),
        tables::intel_integrated(),
        tables::lavapipe(),
    ]
}

/// The figure: a fragmented workload, then full compaction.
#[test]
fn full_compaction_meets_the_goal_on_a_fragmented_workload() {
    for table in tables_under_test() {
        let name = table.name.clone();
        // About half the device-local heap allocated, then half freed.
        let heap = table
            .memory_properties
            .heaps
            .iter()
            .map(|h| h.size)
            .max()
            .unwrap();
        let count = ((heap / 2 / MIB) as usize).min(3000);
        let sim = Arc::new(SimDevice::new(table));
        let allocator = Allocator::new(Arc::clone(&sim), AllocatorDesc::default()).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut live = fragment(&allocator, &mut rng, count, 2 * MIB);
        let before = allocator.statistics().total;
        let desc = DefragDesc::default()
            .with_algorithm(DefragAlgorithm::Full)
            .with_pass_limits(256 * MIB, 1024);
        let passes = run_passes(
            &allocator,
            &desc,
            &mut live,
            200,
            &mut ChaCha8Rng::seed_from_u64(1),
        );
        let after = allocator.statistics();
        let live_bytes = after.total.allocation_bytes;
        assert_eq!(live_bytes, before.allocation_bytes);
        let goal = ((live_bytes as f64 * 1.1) as u64).max(live_bytes + 64 * MIB);
        println!(
            "{name}: live {} MiB; committed {} MiB before, {} MiB after full compaction ({passes} passes, {} MiB moved in {} moves, {} blocks freed); goal <= {} MiB",
            live_bytes / MIB,
            before.block_bytes / MIB,
            after.total.block_bytes / MIB,
            after.defragmentation.bytes_moved / MIB,
            after.defragmentation.allocations_moved,
            after.defragmentation.blocks_freed,
            goal / MIB,
        );
        assert_eq!(
            after.defragmentation.bytes_freed,
            before.block_bytes - after.total.block_bytes
        );
        assert!(
            after.total.block_bytes < before.block_bytes,
            "{name}: committed memory shrinks"
        );
        assert!(allocator.summary().contains("defragmentation:"));
        assert!(
            after.total.block_bytes <= goal,
            "{name}: {} > {goal}",
            after.total.block_bytes
        );
        free_all(allocator, &sim, live);
    }
}

#[test]
fn fast_empties_the_emptiest_blocks() {
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = Allocator::new(
        Arc::clone(&sim),
        AllocatorDesc::default().with_block_size(16 * MIB),
    )
    .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut live = fragment(&allocator, &mut rng, 600, 512 * KIB);
    let before = allocator.statistics().total.block_bytes;
    run_passes(&allocator, &DefragDesc::default(), &mut live, 100, &mut rng);
    let after = allocator.statistics();
    assert!(after.total.block_bytes < before);
    assert!(after.defragmentation.blocks_freed > 0);
    free_all(allocator, &sim, live);
}

/// Random allocate / free / pin sequences, then passes with either
/// algorithm, on several tables; pools too.
#[test]
fn random_workloads_against_a_shadow_model() {
    random_workloads(AllocatorDesc::default().small_runs_from, &|rng| {
        rng.gen_range(1..=256u64) * KIB / rng.gen_range(1..=4)
    });
}

/// The same with small allocations in runs of slots from the first one
/// ([`AllocatorDesc::small_runs_from`] 0): slots allocated, freed, pinned and
/// moved beside ranges of their own, margins and pools included.
#[test]
fn small_allocations_in_runs_against_a_shadow_model() {
    random_workloads(0, &|rng| match rng.gen_range(0..4) {
        0 => rng.gen_range(1..=256u64) * KIB / rng.gen_range(1..=4),
        1 => rng.gen_range(1..=256u64),
        _ => rng.gen_range(1..=40 * KIB),
    });
}

/// [`random_workloads_against_a_shadow_model`]'s body: allocation sizes
/// from `size`, runs of slots from `small_runs_from` live allocations.
fn random_workloads(small_runs_from: u32, size: &dyn Fn(&mut ChaCha8Rng) -> u64) {
    for (t, table) in tables_under_test().into_iter().enumerate() {
        for seed in 0..6u64 {
            let sim = Arc::new(SimDevice::new(table.clone()));
            let allocator = Allocator::new(
                Arc::clone(&sim),
                AllocatorDesc::default()
                    .with_block_size(8 * MIB)
                    .with_debug_margin(if seed % 3 == 0 { 16 } else { 0 })
                    .with_small_runs_from(small_runs_from),
            )
            .unwrap();
            let mut rng = ChaCha8Rng::seed_from_u64(seed * 31 + t as u64);
            let pool = (seed % 2 == 1).then(|| {
                allocator
                    .create_pool(&PoolDesc {
                        block_size: 4 * MIB,
                        max_blocks: 64,
                        usage: MemoryUsage::GpuOnly,
                        ..PoolDesc::new("tlsf")
                    })
                    .unwrap()
            });
            let mut live: HashMap<AllocationId, Allocation> = HashMap::new();
            let mut pinned: HashMap<AllocationId, (DeviceMemory, u64)> = HashMap::new();
            for _ in 0..600 {
                match rng.gen_range(0..10) {
                    0..=5 => {
                        let size = size(&mut rng);
                        let usage =
                            [MemoryUsage::GpuOnly, MemoryUsage::Upload][rng.gen_range(0..2)];
                        let kind = [
                            ResourceKind::Buffer,
                            ResourceKind::OptimalImage,
                            ResourceKind::LinearImage,
                        ][rng.gen_range(0..3)];
                        let mut d = desc(size.max(1), 1 << rng.gen_range(0..12), kind, usage);
                        if let Some(p) =
                            pool.filter(|_| usage == MemoryUsage::GpuOnly && rng.gen_bool(0.5))
                        {
                            d.options = d.options.in_pool(p);
                        }
                        let a = allocator.allocate(&d).unwrap();
                        assert_eq!(a.offset() % d.alignment, 0);
                        live.insert(a.id(), a);
                    }
                    6..=8 if !live.is_empty() => {
                        let id = *live.keys().nth(rng.gen_range(0..live.len())).unwrap();
                        pinned.remove(&id);
                        allocator.free(live.remove(&id).unwrap()).unwrap();
                    }
                    _ if !live.is_empty() => {
                        let id = *live.keys().nth(rng.gen_range(0..live.len())).unwrap();
                        let a = &live[&id];
                        allocator.set_movable(a, false).unwrap();
                        assert!(!allocator.is_movable(a));
                        pinned.insert(id, (a.memory(), a.offset()));
                    }
                    _ => {}
                }
            }
            allocator
                .validate()
                .expect("validate before defragmentation");
            check_no_overlap(&live);
            let live_before = allocator.statistics().total.allocation_bytes;
            let algorithm = [DefragAlgorithm::Fast, DefragAlgorithm::Full][(seed % 2) as usize];
            let desc = DefragDesc::default()
                .with_algorithm(algorithm)
                .with_pass_limits(rng.gen_range(1..=8) * MIB, rng.gen_range(1..=64));
            run_passes(&allocator, &desc, &mut live, 60, &mut rng);
            assert_eq!(allocator.statistics().total.allocation_bytes, live_before);
            for (id, place) in &pinned {
                let a = &live[id];
                assert_eq!(
                    (a.memory(), a.offset()),
                    *place,
                    "a pinned allocation moved"
                );
            }
            assert_eq!(
                allocator.leaks().len(),
                live.len(),
                "nothing leaked, nothing lost"
            );
            free_all(allocator, &sim, live);
        }
    }
}

/// Host-visible contents carried by the caller survive a pass.
#[test]
fn mapped_contents_survive_moves() {
    let sim = Arc::new(SimDevice::new(tables::intel_integrated()));
    let allocator = Allocator::new(
        Arc::clone(&sim),
        AllocatorDesc::default().with_block_size(4 * MIB),
    )
    .unwrap();
    let mut live = HashMap::new();
    let mut all = Vec::new();
    let mut expected: HashMap<AllocationId, u8> = HashMap::new();
    for i in 0..200u64 {
        let mut m = allocator
            .allocate_mapped(&desc(
                4 * KIB + i * 100,
                64,
                ResourceKind::Buffer,
                MemoryUsage::Upload,
            ))
            .unwrap();
        let len = m.size() as usize;
        m.as_mut_slice()
            .copy_from_slice(&vec![(i % 251) as u8; len]);
        expected.insert(m.id(), (i % 251) as u8);
        all.push(m.into_allocation());
    }
    for (i, a) in all.into_iter().enumerate() {
        if i % 3 == 0 {
            live.insert(a.id(), a);
        } else {
            allocator.free(a).unwrap();
        }
    }
    let mut defrag = allocator
        .begin_defragmentation(&DefragDesc::default().with_algorithm(DefragAlgorithm::Full))
        .unwrap();
    for _ in 0..20 {
        let moves = defrag.begin_pass(&allocator).unwrap();
        let done = moves.is_empty();
        for mv in moves {
            let old = live.remove(&mv.id()).unwrap().into_mapped().unwrap();
            let bytes = old.as_slice().to_vec();
            let new = defrag
                .commit(&allocator, mv, old.into_allocation())
                .unwrap();
            let mut new = new.into_mapped().unwrap();
            new.as_mut_slice().copy_from_slice(&bytes);
            live.insert(new.id(), new.into_allocation());
        }
        defrag.end_pass(&allocator).unwrap();
        allocator.validate().unwrap();
        if done {
            break;
        }
    }
    defrag.end(&allocator).unwrap();
    for (id, a) in live.drain() {
        let m = a.into_mapped().unwrap();
        assert!(m.as_slice().iter().all(|&b| b == expected[&id]));
        allocator.free(m).unwrap();
    }
    free_all(allocator, &sim, HashMap::new());
}

fn one_pool_allocator() -> (Arc<SimDevice>, Alloc) {
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = Allocator::new(
        Arc::clone(&sim),
        AllocatorDesc::default().with_block_size(4 * MIB),
    )
    .unwrap();
    (sim, allocator)
}

#[test]
fn bad_input_gets_typed_errors() {
    let (sim, allocator) = one_pool_allocator();
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut live = fragment(&allocator, &mut rng, 200, 256 * KIB);

    // Ending a pass never begun.
    let mut defrag = allocator
        .begin_defragmentation(&DefragDesc::default())
        .unwrap();
    assert_eq!(
        defrag.end_pass(&allocator).unwrap_err(),
        DefragError::NoPassBegun
    );

    // A linear pool named explicitly; an unknown pool.
    let linear = allocator
        .create_pool(&PoolDesc {
            block_size: MIB,
            max_blocks: 1,
            algorithm: PoolAlgorithm::Linear(LinearMode::Ring),
            usage: MemoryUsage::Upload,
            ..PoolDesc::new("ring")
        })
        .unwrap();
    assert_eq!(
        allocator
            .begin_defragmentation(&DefragDesc::default().only_pools(vec![linear]))
            .unwrap_err(),
        DefragError::LinearPool(linear)
    );
    // Every pool by default: the linear one is skipped, not an error.
    let in_ring = allocator
        .allocate(&AllocationDesc {
            options: AllocationOptions::usage(MemoryUsage::Upload).in_pool(linear),
            ..desc(4096, 16, ResourceKind::Buffer, MemoryUsage::Upload)
        })
        .unwrap();
    assert!(!allocator.is_movable(&in_ring));

    // A pass; its moves, committed wrongly.
    let mut moves = defrag.begin_pass(&allocator).unwrap();
    assert!(moves.len() >= 2, "the workload is fragmented");
    assert_eq!(
        defrag.begin_pass(&allocator).unwrap_err(),
        DefragError::PassOpen
    );
    let first = moves.remove(0);
    let second = moves.remove(0);
    // The wrong old allocation: both come back.
    let wrong = live.remove(&second.id()).unwrap();
    let err = defrag.commit(&allocator, first, wrong).unwrap_err();
    assert_eq!(err.kind, CommitErrorKind::WrongAllocation);
    let (first, wrong) = err.into_parts();
    live.insert(wrong.id(), wrong);
    // The source freed during the pass (as another thread would): the move
    // is cancelled, and a commit can only be refused.
    let freed = live.remove(&first.id()).unwrap();
    allocator.free(freed).unwrap();
    assert!(defrag.is_cancelled(&allocator, &first));
    let other = live.remove(&second.id()).unwrap();
    let err = defrag.commit(&allocator, first, other).unwrap_err();
    assert_eq!(err.kind, CommitErrorKind::SourceFreed);
    let (_first, other) = err.into_parts();
    // The right one commits; the consumed move can't be committed again
    // (it is gone), and the old range stays allocated until the pass ends.
    let count = allocator.statistics().total.allocation_count;
    let new = defrag.commit(&allocator, second, other).unwrap();
    assert_eq!(allocator.statistics().total.allocation_count, count);
    live.insert(new.id(), new);
    drop(moves); // the rest: cancelled
    let report = defrag.end_pass(&allocator).unwrap();
    assert_eq!(report.stats.allocations_moved, 1);
    assert!(report.stats.moves_cancelled >= 1);
    allocator.validate().unwrap();
    // A move of an ended pass is stale.
    let mut moves = defrag.begin_pass(&allocator).unwrap();
    if let Some(mv) = moves.pop() {
        let old = live.remove(&mv.id()).unwrap();
        defrag.end_pass(&allocator).unwrap();
        let err = defrag.commit(&allocator, mv, old).unwrap_err();
        assert_eq!(err.kind, CommitErrorKind::StalePass);
        let (_, old) = err.into_parts();
        live.insert(old.id(), old);
    } else {
        defrag.end_pass(&allocator).unwrap();
    }
    drop(moves);
    defrag.end(&allocator).unwrap();
    allocator.validate().unwrap();

    // Another allocator's session.
    let (_sim2, other_allocator) = one_pool_allocator();
    let mut foreign = other_allocator
        .begin_defragmentation(&DefragDesc::default())
        .unwrap();
    assert_eq!(
        foreign.begin_pass(&allocator).unwrap_err(),
        DefragError::ForeignAllocator
    );
    foreign.end(&other_allocator).unwrap();

    allocator.free(in_ring).unwrap();
    allocator.destroy_pool(linear).unwrap();
    free_all(allocator, &sim, live);
}

/// A pinned allocation keeps its block from being emptied by `Fast` (the
/// block is skipped), and never moves with `Full`.
#[test]
fn pinned_allocations_stay() {
    let (sim, allocator) = one_pool_allocator();
    let mut live = HashMap::new();
    let mut all = Vec::new();
    for _ in 0..64 {
        all.push(
            allocator
                .allocate(&desc(
                    256 * KIB,
                    256,
                    ResourceKind::Buffer,
                    MemoryUsage::GpuOnly,
                ))
                .unwrap(),
        );
    }
    for (i, a) in all.into_iter().enumerate() {
        if i % 4 == 0 {
            live.insert(a.id(), a);
        } else {
            allocator.free(a).unwrap();
        }
    }
    let places: HashMap<AllocationId, (DeviceMemory, u64)> = live
        .values()
        .map(|a| (a.id(), (a.memory(), a.offset())))
        .collect();
    for a in live.values() {
        allocator.set_movable(a, false).unwrap();
    }
    for algorithm in [DefragAlgorithm::Fast, DefragAlgorithm::Full] {
        let mut defrag = allocator
            .begin_defragmentation(&DefragDesc::default().with_algorithm(algorithm))
            .unwrap();
        assert!(defrag.begin_pass(&allocator).unwrap().is_empty());
        assert!(defrag.end_pass(&allocator).unwrap().complete);
        defrag.end(&allocator).unwrap();
    }
    for a in live.values() {
        assert_eq!((a.memory(), a.offset()), places[&a.id()]);
        allocator.set_movable(a, true).unwrap();
    }
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    run_passes(
        &allocator,
        &DefragDesc::default().with_algorithm(DefragAlgorithm::Full),
        &mut live,
        50,
        &mut rng,
    );
    free_all(allocator, &sim, live);
}

/// Other threads allocate and free (moved allocations included) while
/// passes run; nothing leaks or is freed twice.
#[test]
fn passes_race_other_threads() {
    let sim = Arc::new(SimDevice::new(tables::amd_discrete()));
    let allocator = Arc::new(
        Allocator::new(
            Arc::clone(&sim),
            AllocatorDesc::default().with_block_size(8 * MIB),
        )
        .unwrap(),
    );
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let live = Arc::new(Mutex::new(fragment(&allocator, &mut rng, 800, 128 * KIB)));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..3u64)
        .map(|w| {
            let (allocator, live, stop) =
                (Arc::clone(&allocator), Arc::clone(&live), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(100 + w);
                let mut rounds = 0u32;
                while !stop.load(Ordering::Relaxed) || rounds < 200 {
                    rounds += 1;
                    if rng.gen_bool(0.5) {
                        let victim = {
                            let mut live = live.lock().unwrap();
                            let id = live
                                .keys()
                                .nth(rng.gen_range(0..live.len().max(1)))
                                .copied();
                            id.and_then(|id| live.remove(&id))
                        };
                        if let Some(a) = victim {
                            allocator.free(a).unwrap();
                        }
                    } else {
                        let size = rng.gen_range(1..=128u64) * KIB;
                        let a = allocator
                            .allocate(&desc(size, 256, ResourceKind::Buffer, MemoryUsage::GpuOnly))
                            .unwrap();
                        live.lock().unwrap().insert(a.id(), a);
                    }
                    if rounds > 5000 {
                        break;
                    }
                }
            })
        })
        .collect();
    let mut defrag = allocator
        .begin_defragmentation(
            &DefragDesc::default()
                .with_algorithm(DefragAlgorithm::Full)
                .with_pass_limits(4 * MIB, 64),
        )
        .unwrap();
    let mut committed = 0;
    let mut refused = 0;
    for _ in 0..40 {
        let moves = defrag.begin_pass(&allocator).unwrap();
        for mv in moves {
            let old = live.lock().unwrap().remove(&mv.id());
            match old {
                Some(old) => match defrag.commit(&allocator, mv, old) {
                    Ok(new) => {
                        committed += 1;
                        live.lock().unwrap().insert(new.id(), new);
                    }
                    Err(e) => panic!("{e}"),
                },
                // Freed by a worker: the move is void.
                None => refused += 1,
            }
        }
        defrag.end_pass(&allocator).unwrap();
    }
    defrag.end(&allocator).unwrap();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    allocator.validate().unwrap();
    let live = std::mem::take(&mut *live.lock().unwrap());
    check_no_overlap(&live);
    assert_eq!(allocator.leaks().len(), live.len());
    let stats = allocator.statistics().defragmentation;
    assert_eq!(stats.allocations_moved, committed);
    assert!(stats.moves_cancelled >= refused);
    let allocator = Arc::into_inner(allocator).unwrap();
    free_all(allocator, &sim, live);
}

#[test]
fn alias_groups_show_in_statistics_and_the_dump() {
    let (sim, allocator) = one_pool_allocator();
    let members = [
        AliasRequirement {
            size: 3 * MIB,
            alignment: 4096,
            memory_type_bits: u32::MAX,
            kind: ResourceKind::OptimalImage,
            lifetime: PassInterval::new(0, 1),
            tag: "gbuffer",
        },
        AliasRequirement {
            size: 2 * MIB,
            alignment: 65536,
            memory_type_bits: u32::MAX,
            kind: ResourceKind::OptimalImage,
            lifetime: PassInterval::new(2, 3),
            tag: "bloom",
        },
    ];
    let group = allocator
        .allocate_alias_group(
            &members,
            AllocationOptions::usage(MemoryUsage::GpuOnly).tagged("transients"),
        )
        .unwrap();
    assert_eq!(group.allocation().size(), 3 * MIB);
    assert_eq!(group.allocation().offset() % 65536, 0);
    assert_eq!(group.bytes_saved(), 2 * MIB);
    assert!(!allocator.is_movable(group.allocation()));
    let details = allocator.detailed_statistics();
    assert_eq!(details.alias_member_count, 2);
    assert_eq!(details.aliased_bytes_saved, 2 * MIB);
    let json = allocator.to_json();
    assert!(json.contains("\"aliases\""), "{json}");
    assert!(json.contains("bloom") && json.contains("first_pass"));
    let aliases: Vec<_> = details
        .lists
        .iter()
        .flat_map(|l| &l.blocks)
        .flat_map(|b| &b.allocations)
        .flat_map(|a| a.aliases.clone())
        .collect();
    assert_eq!(aliases.len(), 2);
    assert_eq!((aliases[1].first_pass, aliases[1].last_pass), (2, 3));
    assert_eq!(aliases[1].tag.as_deref(), Some("bloom"));
    allocator.free_alias_group(group).unwrap();
    assert_eq!(allocator.detailed_statistics().alias_member_count, 0);
    free_all(allocator, &sim, HashMap::new());
}

/// A trace recorded across passes stays consistent: each destination is
/// recorded as an allocation, and every free names a recorded one.
#[cfg(feature = "trace")]
#[test]
fn a_trace_recorded_across_passes_is_consistent() {
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let (sim, allocator) = one_pool_allocator();
    let out = Shared::default();
    allocator
        .start_recording(Box::new(out.clone()), "defrag")
        .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let mut live = fragment(&allocator, &mut rng, 300, 256 * KIB);
    run_passes(
        &allocator,
        &DefragDesc::default().with_algorithm(DefragAlgorithm::Full),
        &mut live,
        20,
        &mut rng,
    );
    for (_, a) in live.drain() {
        allocator.free(a).unwrap();
    }
    allocator.stop_recording().unwrap().unwrap();
    let bytes = out.0.lock().unwrap().clone();
    let trace = vkalloc::trace::format::Trace::read(&bytes[..]).unwrap();
    let summary = trace.validate().unwrap();
    assert!(summary.allocs > 300, "destinations are recorded");
    assert_eq!(summary.allocs, summary.frees);
    assert_eq!(summary.live_at_end, 0);
    free_all(allocator, &sim, HashMap::new());
}

/// An allocator with one TLSF pool of a single 64 MiB block under a 64 MiB
/// budget: the texture pool of a streamer, where a larger request that fits
/// the free bytes can only be placed by opening a range in that block.
fn one_block_pool() -> (Arc<SimDevice>, Alloc, vkalloc::PoolId) {
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = Allocator::new(Arc::clone(&sim), AllocatorDesc::default()).unwrap();
    let pool = allocator
        .create_pool(&PoolDesc {
            block_size: 64 * MIB,
            max_blocks: 1,
            budget: Some(64 * MIB),
            ..PoolDesc::new("textures")
        })
        .unwrap();
    (sim, allocator, pool)
}

fn in_pool(size: u64, pool: vkalloc::PoolId) -> AllocationDesc<'static> {
    AllocationDesc {
        size,
        alignment: 64 * KIB,
        kind: ResourceKind::OptimalImage,
        options: AllocationOptions::usage(MemoryUsage::GpuOnly).in_pool(pool),
        ..AllocationDesc::default()
    }
}

/// `Room` opens one free range as large as asked in a fragmented single-block
/// pool, over several passes when a pass's byte limit is smaller than the
/// window's contents, and the request that failed before fits after; with a
/// range already free it moves nothing; with a pinned allocation in every
/// window it moves nothing either.
#[test]
fn room_opens_a_range_for_a_request_that_fits_by_bytes_only() {
    for seed in 0..8u64 {
        let (sim, allocator, pool) = one_block_pool();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // Fill the block with images of 0.5..4 MiB, then free about half.
        let mut all = Vec::new();
        loop {
            let size = rng.gen_range(8..=64u64) * 64 * KIB;
            match allocator.allocate(&in_pool(size, pool)) {
                Ok(a) => all.push(a),
                Err(_) => break,
            }
        }
        let mut live = HashMap::new();
        for a in all {
            if rng.gen_bool(0.5) {
                allocator.free(a).unwrap();
            } else {
                live.insert(a.id(), a);
            }
        }
        let p = allocator.pool_pressure(pool).unwrap();
        let free = p.pool_committed_bytes - p.pool_allocated_bytes;
        let want = (free * 3 / 4) / (64 * KIB) * (64 * KIB);
        assert!(
            p.largest_free_range < want,
            "seed {seed}: the workload must be fragmented"
        );
        assert!(
            allocator.allocate(&in_pool(want, pool)).is_err(),
            "seed {seed}: fits by bytes, not by range"
        );
        let room = DefragDesc::default()
            .with_algorithm(DefragAlgorithm::Room {
                bytes: want,
                alignment: 64 * KIB,
            })
            .with_pass_limits(8 * MIB, 64);
        let passes = run_passes(&allocator, &room, &mut live, 64, &mut rng);
        assert!(passes > 1, "seed {seed}: 8 MiB a pass can't do it in one");
        let p = allocator.pool_pressure(pool).unwrap();
        assert!(
            p.largest_free_range >= want,
            "seed {seed}: {} < {want} after {passes} passes",
            p.largest_free_range
        );
        let big = allocator.allocate(&in_pool(want, pool)).unwrap();

        // A range of that size is free now elsewhere? Then nothing moves.
        allocator.free(big).unwrap();
        let mut defrag = allocator.begin_defragmentation(&room).unwrap();
        assert!(defrag.begin_pass(&allocator).unwrap().is_empty());
        assert!(defrag.end_pass(&allocator).unwrap().complete);
        defrag.end(&allocator).unwrap();
        free_all(allocator, &sim, live);
    }

    // Every window holds a pinned allocation: nothing moves.
    let (sim, allocator, pool) = one_block_pool();
    let mut live = HashMap::new();
    let all: Vec<Allocation> = (0..32)
        .map(|_| allocator.allocate(&in_pool(2 * MIB, pool)).unwrap())
        .collect();
    for (i, a) in all.into_iter().enumerate() {
        if i % 2 == 0 {
            allocator.free(a).unwrap();
        } else {
            if i % 4 == 1 {
                allocator.set_movable(&a, false).unwrap();
            }
            live.insert(a.id(), a);
        }
    }
    // Pinned images every 8 MiB: no 12 MiB window avoids them.
    let mut defrag = allocator
        .begin_defragmentation(
            &DefragDesc::default().with_algorithm(DefragAlgorithm::Room {
                bytes: 12 * MIB,
                alignment: 64 * KIB,
            }),
        )
        .unwrap();
    assert!(defrag.begin_pass(&allocator).unwrap().is_empty());
    assert!(defrag.end_pass(&allocator).unwrap().complete);
    defrag.end(&allocator).unwrap();
    // A 6 MiB window between two pinned images opens.
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    run_passes(
        &allocator,
        &DefragDesc::default().with_algorithm(DefragAlgorithm::Room {
            bytes: 6 * MIB,
            alignment: 64 * KIB,
        }),
        &mut live,
        8,
        &mut rng,
    );
    assert!(allocator.pool_pressure(pool).unwrap().largest_free_range >= 6 * MIB);
    for a in live.values() {
        let _ = allocator.set_movable(a, true);
    }
    free_all(allocator, &sim, live);
}
