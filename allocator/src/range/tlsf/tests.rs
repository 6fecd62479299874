//! Tests of the TLSF range allocator.

use super::*;
use crate::range::shadow::{run_suite, Policy};

fn request(size: u64, alignment: u64, kind: RangeKind) -> RangeRequest {
    RangeRequest {
        size,
        alignment,
        kind,
    }
}

fn linear(size: u64) -> RangeRequest {
    request(size, 1, RangeKind::Linear)
}

fn free_ranges(tlsf: &TlsfAllocator) -> Vec<(u64, u64)> {
    let mut free = Vec::new();
    tlsf.for_each_free(&mut |offset, size| free.push((offset, size)));
    free
}

#[test]
fn mapping_rounds_to_lists() {
    assert_eq!(mapping(1), (0, 1));
    assert_eq!(mapping(31), (0, 31));
    assert_eq!(mapping(32), (1, 0));
    assert_eq!(mapping(63), (1, 31));
    assert_eq!(mapping(544), (5, 2));
    assert_eq!(mapping(559), (5, 2));
    assert_eq!(mapping(u64::MAX), (FL_COUNT - 1, SL_COUNT - 1));
    for size in [1, 31, 32, 33, 100, 545, 1 << 20, (1 << 40) + 3] {
        let (fl, sl) = mapping(round_up_to_list(size).unwrap());
        assert!(list_min_size(fl, sl) >= size, "{size}");
        let (fl, sl) = mapping(size);
        assert!(list_min_size(fl, sl) <= size, "{size}");
    }
    assert_eq!(round_up_to_list(u64::MAX), None);
}

#[test]
fn zero_capacity_holds_nothing() {
    let mut tlsf = TlsfAllocator::without_runs(0, 1);
    assert_eq!(tlsf.allocate(&linear(1)), None);
    assert_eq!(tlsf.largest_free(), 0);
    assert!(free_ranges(&tlsf).is_empty());
    assert_eq!(
        tlsf.free(RangeId(0)),
        Err(RangeError::UnknownId(RangeId(0)))
    );
    tlsf.clear();
    tlsf.validate().unwrap();
}

#[test]
fn exact_fit_and_too_large() {
    let mut tlsf = TlsfAllocator::without_runs(1000, 1);
    assert_eq!(tlsf.allocate(&linear(1001)), None);
    let whole = tlsf.allocate(&linear(1000)).unwrap();
    assert_eq!((whole.offset, whole.size), (0, 1000));
    assert_eq!(tlsf.allocate(&linear(1)), None);
    assert_eq!(tlsf.largest_free(), 0);
    tlsf.free(whole.id).unwrap();
    // A request just below the capacity fits the whole block, although
    // its good-fit list lies above the block's list.
    let nearly = tlsf.allocate(&linear(999)).unwrap();
    assert_eq!(nearly.offset, 0);
    tlsf.free(nearly.id).unwrap();
    let parts: Vec<Range> = [100, 200, 700]
        .iter()
        .map(|&s| tlsf.allocate(&linear(s)).unwrap())
        .collect();
    assert_eq!(
        parts.iter().map(|r| r.offset).collect::<Vec<_>>(),
        [0, 100, 300]
    );
    tlsf.free(parts[1].id).unwrap();
    assert_eq!(free_ranges(&tlsf), [(100, 200)]);
    assert_eq!(tlsf.allocate(&linear(200)).unwrap().offset, 100);
    tlsf.validate().unwrap();
}

#[test]
fn full_u64_capacity() {
    let mut tlsf = TlsfAllocator::without_runs(u64::MAX, 1 << 16);
    let whole = tlsf
        .allocate(&request(u64::MAX, 1 << 20, RangeKind::Unknown))
        .unwrap();
    assert_eq!(whole.offset, 0);
    assert_eq!(
        tlsf.allocate(&request(1, 1 << 63, RangeKind::Unknown)),
        None
    );
    tlsf.free(whole.id).unwrap();
    let high = tlsf
        .allocate(&request(1, 1 << 63, RangeKind::Unknown))
        .unwrap();
    assert_eq!(high.offset, 0);
    let high = tlsf
        .allocate(&request(1, 1 << 63, RangeKind::Unknown))
        .unwrap();
    assert_eq!(high.offset, 1 << 63);
    tlsf.validate().unwrap();
}

#[test]
fn alignment_padding_stays_free() {
    let mut tlsf = TlsfAllocator::without_runs(4 << 20, 1);
    let small = tlsf.allocate(&linear(1)).unwrap();
    assert_eq!(small.offset, 0);
    let aligned = tlsf
        .allocate(&request(1, 1 << 20, RangeKind::Linear))
        .unwrap();
    assert_eq!(aligned.offset, 1 << 20);
    assert_eq!(
        free_ranges(&tlsf),
        [(1, (1 << 20) - 1), ((1 << 20) + 1, (3 << 20) - 1)]
    );
    // The padding's list is the first whose ranges all hold 2^19 bytes.
    let padding = tlsf.allocate(&linear(1 << 19)).unwrap();
    assert_eq!(padding.offset, 1);
    tlsf.validate().unwrap();
    for id in [small.id, aligned.id, padding.id] {
        tlsf.free(id).unwrap();
    }
    assert_eq!(free_ranges(&tlsf), [(0, 4 << 20)]);
    tlsf.validate().unwrap();
}

#[test]
fn granularity_one_packs_kinds_together() {
    let mut tlsf = TlsfAllocator::without_runs(1024, 1);
    assert_eq!(tlsf.allocate(&linear(10)).unwrap().offset, 0);
    assert_eq!(
        tlsf.allocate(&request(10, 1, RangeKind::Optimal))
            .unwrap()
            .offset,
        10
    );
    assert_eq!(
        tlsf.allocate(&request(10, 1, RangeKind::Unknown))
            .unwrap()
            .offset,
        20
    );
    tlsf.validate().unwrap();
}

#[test]
fn granularity_separates_kinds() {
    for g in [1024, 65536] {
        let mut tlsf = TlsfAllocator::without_runs(16 * g, g);
        assert_eq!(tlsf.allocate(&linear(10)).unwrap().offset, 0);
        assert_eq!(tlsf.allocate(&linear(10)).unwrap().offset, 10);
        assert_eq!(
            tlsf.allocate(&request(10, 1, RangeKind::Optimal))
                .unwrap()
                .offset,
            g
        );
        assert_eq!(
            tlsf.allocate(&request(10, 1, RangeKind::Optimal))
                .unwrap()
                .offset,
            g + 10
        );
        assert_eq!(
            tlsf.allocate(&request(10, 1, RangeKind::Unknown))
                .unwrap()
                .offset,
            2 * g
        );
        assert_eq!(
            tlsf.allocate(&request(10, 1, RangeKind::Unknown))
                .unwrap()
                .offset,
            3 * g
        );
        tlsf.validate().unwrap();
    }
}

#[test]
fn granularity_checks_the_range_after() {
    let mut tlsf = TlsfAllocator::without_runs(4096, 1024);
    let first = tlsf.allocate(&request(600, 1, RangeKind::Optimal)).unwrap();
    let second = tlsf.allocate(&request(100, 1, RangeKind::Optimal)).unwrap();
    assert_eq!(second.offset, 600);
    tlsf.free(first.id).unwrap();
    // [0, 600) is free but ends on the optimal range's page.
    assert_eq!(tlsf.allocate(&linear(100)).unwrap().offset, 1024);
    // 590 bytes round up to the list of 592..608 bytes, which holds [0, 600).
    assert_eq!(
        tlsf.allocate(&request(590, 1, RangeKind::Optimal))
            .unwrap()
            .offset,
        0
    );
    tlsf.validate().unwrap();
}

#[test]
fn stale_and_double_free_are_refused() {
    let mut tlsf = TlsfAllocator::without_runs(1 << 16, 1);
    let first = tlsf.allocate(&linear(100)).unwrap();
    tlsf.free(first.id).unwrap();
    assert_eq!(tlsf.free(first.id), Err(RangeError::UnknownId(first.id)));
    let second = tlsf.allocate(&linear(100)).unwrap();
    assert_eq!(second.id.slot(), first.id.slot());
    assert_ne!(second.id, first.id);
    assert_eq!(tlsf.free(first.id), Err(RangeError::UnknownId(first.id)));
    assert_eq!(
        tlsf.free(RangeId(12345)),
        Err(RangeError::UnknownId(RangeId(12345)))
    );
    assert_eq!(tlsf.allocation_count(), 1);
    tlsf.validate().unwrap();
    tlsf.free(second.id).unwrap();
}

#[test]
fn clear_frees_everything() {
    let mut tlsf = TlsfAllocator::without_runs(1 << 16, 1024);
    let ids: Vec<RangeId> = (1..20)
        .map(|s| {
            tlsf.allocate(&request(s * 10, 16, RangeKind::Optimal))
                .unwrap()
                .id
        })
        .collect();
    tlsf.clear();
    assert_eq!((tlsf.allocation_count(), tlsf.allocated_bytes()), (0, 0));
    assert_eq!(free_ranges(&tlsf), [(0, 1 << 16)]);
    assert_eq!(tlsf.largest_free(), 1 << 16);
    for id in ids {
        assert_eq!(tlsf.free(id), Err(RangeError::UnknownId(id)));
    }
    tlsf.validate().unwrap();
}

#[test]
fn small_requests_share_a_run_of_slots() {
    let mut tlsf = TlsfAllocator::new(1 << 20, 1).with_runs_from(0);
    // 100 bytes: stride 112 (an eighth of 64..128 is 16), 64 slots.
    let ranges: Vec<Range> = (0..3)
        .map(|_| tlsf.allocate(&linear(100)).unwrap())
        .collect();
    let offsets: Vec<u64> = ranges.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [0, 112, 224]);
    assert_eq!(tlsf.allocation_count(), 3);
    assert_eq!(tlsf.allocated_bytes(), 300);
    // The gaps tile the block with the allocations; the run is no place
    // for any request, so the largest free range starts past it.
    assert_eq!(
        free_ranges(&tlsf),
        [(100, 12), (212, 12), (324, (1 << 20) - 324)]
    );
    let mut runs = Vec::new();
    tlsf.for_each_run(&mut |offset, size| runs.push((offset, size)));
    assert_eq!(runs, [(0, 64 * 112)]);
    assert_eq!(tlsf.largest_free(), (1 << 20) - 64 * 112);
    tlsf.validate().unwrap();
    // A freed slot is the next one taken, under a new id.
    tlsf.free(ranges[1].id).unwrap();
    assert!(!tlsf.is_live(ranges[1].id));
    assert_eq!(
        tlsf.free(ranges[1].id),
        Err(RangeError::UnknownId(ranges[1].id))
    );
    let again = tlsf.allocate(&linear(110)).unwrap();
    assert_eq!(again.offset, 112);
    assert_ne!(again.id, ranges[1].id);
    assert!(!tlsf.is_live(ranges[1].id) && tlsf.is_live(again.id));
    tlsf.validate().unwrap();
    // With nothing live the run goes too: one free range again.
    for id in [ranges[0].id, ranges[2].id, again.id] {
        tlsf.free(id).unwrap();
    }
    assert_eq!(free_ranges(&tlsf), [(0, 1 << 20)]);
    assert_eq!(tlsf.largest_free(), 1 << 20);
    tlsf.for_each_run(&mut |_, _| panic!("an empty allocator keeps a run"));
    tlsf.validate().unwrap();
}

#[test]
fn runs_keep_kinds_on_their_own_pages_and_aligned() {
    let g = 1024;
    let mut tlsf = TlsfAllocator::new(1 << 20, g).with_runs_from(0);
    let a = tlsf.allocate(&linear(40)).unwrap();
    let b = tlsf.allocate(&request(40, 1, RangeKind::Optimal)).unwrap();
    let c = tlsf.allocate(&request(40, 256, RangeKind::Linear)).unwrap();
    let d = tlsf.allocate(&request(40, 1, RangeKind::Unknown)).unwrap();
    assert_eq!(a.offset, 0);
    // A run per class and kind; the optimal run starts on a page of its
    // own, the 256-aligned one is a run of 256-byte slots.
    assert!(b.offset >= 64 * 48 && b.offset % g == 0, "{b:?}");
    assert!(c.offset % 256 == 0 && c.offset != b.offset, "{c:?}");
    let mut allocations = Vec::new();
    tlsf.for_each_allocation(&mut |offset, size, kind| allocations.push((offset, size, kind)));
    assert_eq!(allocations.len(), 4);
    assert!(allocations.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0));
    assert!(allocations.contains(&(d.offset, 40, RangeKind::Unknown)));
    tlsf.validate().unwrap();
    for r in [a, b, c, d] {
        tlsf.free(r.id).unwrap();
    }
    assert_eq!(free_ranges(&tlsf), [(0, 1 << 20)]);
    tlsf.validate().unwrap();
}

#[test]
fn a_small_block_places_small_requests_without_runs() {
    // 1 KiB: a run may take 16 bytes, fewer than 4 slots of any class.
    let mut tlsf = TlsfAllocator::new(1024, 1).with_runs_from(0);
    assert_eq!(tlsf.allocate(&linear(10)).unwrap().offset, 0);
    assert_eq!(
        tlsf.allocate(&request(10, 1, RangeKind::Optimal))
            .unwrap()
            .offset,
        10
    );
    tlsf.for_each_run(&mut |_, _| panic!("a run in a 1 KiB block"));
    // 64 KiB: runs of up to 1 KiB, so 16-byte slots but no 512-byte ones.
    let mut tlsf = TlsfAllocator::new(64 << 10, 1).with_runs_from(0);
    tlsf.allocate(&linear(16)).unwrap();
    tlsf.allocate(&linear(512)).unwrap();
    let mut runs = Vec::new();
    tlsf.for_each_run(&mut |offset, size| runs.push((offset, size)));
    assert_eq!(runs, [(0, 1024)]);
    tlsf.validate().unwrap();
}

#[test]
fn a_request_with_no_room_for_a_run_takes_a_range_of_its_own() {
    let mut tlsf = TlsfAllocator::new(1 << 20, 1).with_runs_from(0);
    let big = tlsf.allocate(&linear((1 << 20) - 1000)).unwrap();
    // No room for a run of 112-byte slots (7 KiB): a range of its own.
    let small = tlsf.allocate(&linear(100)).unwrap();
    assert_eq!(small.offset, (1 << 20) - 1000);
    tlsf.for_each_run(&mut |_, _| panic!("no room for a run"));
    tlsf.free(big.id).unwrap();
    // With room again, the next one opens a run.
    let next = tlsf.allocate(&linear(100)).unwrap();
    let mut runs = Vec::new();
    tlsf.for_each_run(&mut |offset, size| runs.push((offset, size)));
    assert_eq!(runs, [(next.offset, 64 * 112)]);
    tlsf.validate().unwrap();
    tlsf.free(small.id).unwrap();
    tlsf.free(next.id).unwrap();
    assert_eq!(free_ranges(&tlsf), [(0, 1 << 20)]);
}

#[test]
fn runs_kept_empty_make_way_for_a_request_that_needs_their_room() {
    let mut tlsf = TlsfAllocator::new(16 << 20, 1).with_runs_from(0);
    // A run of 112-byte slots and one of four 20 KiB slots.
    let a = tlsf.allocate(&linear(100)).unwrap();
    let b = tlsf.allocate(&linear(20 << 10)).unwrap();
    let rest = tlsf.allocate(&linear(tlsf.largest_free())).unwrap();
    tlsf.free(b.id).unwrap();
    // The 20 KiB run is kept, empty, for its class's next request ...
    let mut runs = Vec::new();
    tlsf.for_each_run(&mut |offset, size| runs.push((offset, size)));
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1].1, 80 << 10);
    assert!(tlsf.largest_free() < 16 << 10);
    let large = request(64 << 10, 1, RangeKind::Optimal);
    assert_eq!(tlsf.allocate(&large), None);
    // ... until its room is asked for (a list of blocks does, before it
    // makes memory); a size no kept run's room holds leaves them alone.
    assert!(!tlsf.release_kept_runs(1 << 20));
    assert!(tlsf.release_kept_runs(large.size));
    assert!(!tlsf.release_kept_runs(large.size));
    tlsf.validate().unwrap();
    let c = tlsf.allocate(&large).unwrap();
    assert!(c.offset <= runs[1].0 && c.offset + c.size <= runs[1].0 + runs[1].1);
    tlsf.validate().unwrap();
    for id in [a.id, rest.id, c.id] {
        tlsf.free(id).unwrap();
    }
    assert_eq!(free_ranges(&tlsf), [(0, 16 << 20)]);
    assert_eq!(tlsf.largest_free(), 16 << 20);
    tlsf.validate().unwrap();
}

#[test]
fn find_then_commit_takes_slots_as_allocate_does() {
    let mut tlsf = TlsfAllocator::new(1 << 20, 1).with_runs_from(0);
    let mut offsets = Vec::new();
    for _ in 0..70 {
        let placement = tlsf.find(&linear(100)).unwrap();
        let range = tlsf.commit(placement, RangeKind::Linear);
        assert_eq!(range.offset, placement.offset);
        offsets.push(range.offset);
    }
    // 64 slots in the first run, then a second run right after it.
    assert_eq!(offsets[63], 63 * 112);
    assert_eq!(offsets[64], 64 * 112);
    let mut runs = Vec::new();
    tlsf.for_each_run(&mut |offset, size| runs.push((offset, size)));
    assert_eq!(runs, [(0, 64 * 112), (64 * 112, 64 * 112)]);
    tlsf.validate().unwrap();
}

#[test]
fn random_operations_match_the_shadow() {
    let ops = run_suite(Policy::GoodFit, |capacity, granularity| {
        Box::new(TlsfAllocator::new(capacity, granularity).with_runs_from(0))
    });
    assert!(ops >= 100_000, "{ops} operations");
}

#[test]
fn runs_are_made_from_runs_from_live_allocations() {
    let mut tlsf = TlsfAllocator::new(64 << 20, 1);
    let mut live: Vec<Range> = (0..RUNS_FROM)
        .map(|_| tlsf.allocate(&linear(100)).unwrap())
        .collect();
    // Ranges of their own, packed end to end, below the threshold ...
    assert_eq!(live[1].offset, 100);
    tlsf.for_each_run(&mut |_, _| panic!("a run below {RUNS_FROM} live"));
    // ... and a run from it on.
    live.push(tlsf.allocate(&linear(100)).unwrap());
    let mut runs = Vec::new();
    tlsf.for_each_run(&mut |offset, size| runs.push((offset, size)));
    assert_eq!(runs, [(u64::from(RUNS_FROM) * 100, 64 * 112)]);
    assert_eq!(live.last().unwrap().offset, runs[0].0);
    tlsf.validate().unwrap();
    for r in live {
        tlsf.free(r.id).unwrap();
    }
    assert_eq!(free_ranges(&tlsf), [(0, 64 << 20)]);
    tlsf.validate().unwrap();
}

#[test]
fn random_operations_without_runs_match_the_shadow() {
    let ops = run_suite(Policy::GoodFit, |capacity, granularity| {
        Box::new(TlsfAllocator::without_runs(capacity, granularity))
    });
    assert!(ops >= 100_000, "{ops} operations");
}

#[test]
fn find_lowest_takes_the_lowest_fitting_free_range() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    for granularity in [1u64, 1024] {
        let mut t = TlsfAllocator::new(1 << 20, granularity);
        let mut live = Vec::new();
        for _ in 0..400 {
            if rng.gen_bool(0.6) || live.is_empty() {
                let request = RangeRequest {
                    size: rng.gen_range(1..5000),
                    alignment: 1 << rng.gen_range(0..8),
                    kind: [RangeKind::Linear, RangeKind::Optimal][rng.gen_range(0..2)],
                };
                if let Some(r) = t.allocate(&request) {
                    live.push(r);
                }
            } else {
                let r = live.swap_remove(rng.gen_range(0..live.len()));
                t.free(r.id).unwrap();
            }
            let request = RangeRequest {
                size: rng.gen_range(1..3000),
                alignment: 1 << rng.gen_range(0..6),
                kind: RangeKind::Linear,
            };
            let below = rng.gen_range(0..1u64 << 20);
            let found = t.find_lowest(&request, below);
            // Brute force: the lowest free range that `fit` accepts.
            let mut expected = None;
            let mut index = t.first;
            while index != NIL {
                let node = &t.nodes[index as usize];
                if node.state.is_free() {
                    if let Some(o) = t.fit(index, request.size, request.alignment, request.kind) {
                        expected = Some(o).filter(|&o| o < below);
                        break;
                    }
                }
                index = node.next;
            }
            assert_eq!(found.map(|p| p.offset), expected);
            // Started at the lowest free range that holds the size (as
            // compaction does), and with a stale hint: the same answer.
            let mut start = None;
            t.for_each_free_hinted(&mut |offset, size, hint| {
                if start.is_none() && size >= request.size {
                    start = Some((offset, hint));
                }
            });
            if let Some((offset, hint)) = start {
                let from = t.find_lowest_from(&request, below, offset, hint);
                assert_eq!(from.map(|p| p.offset), expected);
                let stale = t.find_lowest_from(&request, below, offset + 1, hint);
                assert_eq!(stale.map(|p| p.offset), expected);
            }
            if let Some(p) = found {
                let r = t.commit(p, request.kind);
                t.validate().unwrap();
                t.free(r.id).unwrap();
            }
        }
    }
}
