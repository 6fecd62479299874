//! Which page each tile load binds. A run of horizontally adjacent tiles binds
//! as one `VkSparseImageMemoryBind` only where its pages follow each other in
//! one memory object, and on NVIDIA the driver's cost goes by binds (about
//! 26 us each, BENCHMARKS.md). The pages at hand are the spare pages of
//! evicted tiles (scattered wherever those tiles were) and new ones from the
//! pool, so which page goes to which tile decides how many binds a frame takes.
//! Pure: no Vulkan, no I/O.
#![forbid(unsafe_code)]

use std::collections::BTreeSet;

/// Where a page is: its memory object (a raw handle) and its offset in it.
pub type PageAt = (u64, u64);

/// Whether page `b` follows page `a` (`page` bytes on, in the same object).
fn follows(a: PageAt, b: PageAt, page: u64) -> bool {
    a.0 == b.0 && a.1.checked_add(page) == Some(b.1)
}

/// For loads grouped in `runs` (lengths, in load order: run `r` is the next
/// `runs[r]` loads, tiles that bind as one region when their pages follow
/// each other) and candidate `pages` of `page` bytes, the candidate each load
/// takes: distinct indices into `pages`, one per load, in load order. `None`
/// when there are fewer pages than loads.
///
/// Pages that follow each other in memory form stretches. Longest runs first,
/// each run takes the front of the shortest stretch that holds it whole (the
/// rest of that stretch stays a stretch); a run longer than every stretch
/// takes the longest one whole and goes on with its remaining tiles. A run
/// split that way uses up a stretch, so the regions bound are at most the
/// runs plus the stretches, and exactly the runs when each run finds a
/// stretch that holds it.
pub fn assign(runs: &[u32], pages: &[PageAt], page: u64) -> Option<Vec<usize>> {
    let n: usize = runs.iter().map(|&r| r as usize).sum();
    if n > pages.len() {
        return None;
    }
    let mut order: Vec<usize> = (0..pages.len()).collect();
    order.sort_unstable_by_key(|&i| pages[i]);
    // Stretches as (length, start in `order`).
    let mut stretches: BTreeSet<(usize, usize)> = BTreeSet::new();
    let mut start = 0;
    for k in 1..=order.len() {
        let ends = k == order.len() || !follows(pages[order[k - 1]], pages[order[k]], page);
        if ends {
            stretches.insert((k - start, start));
            start = k;
        }
    }
    let mut first = Vec::with_capacity(runs.len());
    let mut at = 0;
    for &r in runs {
        first.push(at);
        at += r as usize;
    }
    let mut by_len: Vec<usize> = (0..runs.len()).collect();
    by_len.sort_by_key(|&r| std::cmp::Reverse(runs[r]));
    let mut out = vec![usize::MAX; n];
    for r in by_len {
        let (mut left, mut at) = (runs[r] as usize, first[r]);
        while left > 0 {
            let fit = stretches.range((left, 0)..).next().copied();
            let (len, start) = fit.or_else(|| stretches.iter().next_back().copied())?;
            stretches.remove(&(len, start));
            let take = left.min(len);
            out[at..at + take].copy_from_slice(&order[start..start + take]);
            if len > take {
                stretches.insert((len - take, start + take));
            }
            at += take;
            left -= take;
        }
    }
    Some(out)
}

/// The regions that loads grouped in `runs` bind with the pages `pick`
/// ([`assign`]'s answer) gives them: one per run, plus one wherever two
/// tiles of a run get pages that do not follow each other.
pub fn regions(runs: &[u32], pages: &[PageAt], pick: &[usize], page: u64) -> usize {
    let mut at = 0;
    let mut count = 0;
    for &r in runs {
        let r = r as usize;
        count += 1;
        count += (at + 1..at + r)
            .filter(|&k| !follows(pages[pick[k - 1]], pages[pick[k]], page))
            .count();
        at += r;
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PAGE: u64 = 65536;

    fn stretches(pages: &[PageAt]) -> usize {
        let mut p = pages.to_vec();
        p.sort_unstable();
        1 + p
            .windows(2)
            .filter(|w| w[0].0 != w[1].0 || w[0].1 + PAGE != w[1].1)
            .count()
    }

    #[test]
    fn contiguous_pages_bind_each_run_as_one_region() {
        let runs = [3, 1, 5, 2];
        // Shuffled, one memory object, no gaps.
        let pages: Vec<PageAt> = [7, 2, 9, 0, 4, 10, 1, 3, 8, 6, 5]
            .iter()
            .map(|&k| (1, k * PAGE))
            .collect();
        let pick = assign(&runs, &pages, PAGE).unwrap();
        assert_eq!(regions(&runs, &pages, &pick, PAGE), runs.len());
    }

    #[test]
    fn stretches_that_fit_the_runs_are_found_in_any_order() {
        // Stretches of 4, 1 and 2 pages in three memory objects (and one in a
        // gap of the first), runs of 2, 4 and 1: each run has a stretch.
        let pages: Vec<PageAt> = vec![
            (9, 0),
            (5, 3 * PAGE),
            (9, PAGE),
            (9, 3 * PAGE),
            (9, 2 * PAGE),
            (7, 10 * PAGE),
            (7, 11 * PAGE),
        ];
        let runs = [2, 4, 1];
        let pick = assign(&runs, &pages, PAGE).unwrap();
        assert_eq!(regions(&runs, &pages, &pick, PAGE), 3);
        // The 4-run got the 4-stretch, the 2-run the 2-stretch.
        assert_eq!(pages[pick[2]], (9, 0));
        assert_eq!(pages[pick[0]], (7, 10 * PAGE));
    }

    #[test]
    fn too_few_pages_is_none() {
        assert_eq!(
            assign(&[2, 2], &[(1, 0), (1, PAGE), (1, 2 * PAGE)], PAGE),
            None
        );
        assert_eq!(assign(&[], &[], PAGE), Some(Vec::new()));
    }

    #[test]
    fn a_run_longer_than_every_stretch_takes_the_longest_first() {
        let pages: Vec<PageAt> = vec![(1, 0), (1, PAGE), (1, 2 * PAGE), (2, 0), (3, 0), (3, PAGE)];
        let pick = assign(&[5], &pages, PAGE).unwrap();
        // 3 + 2: two regions.
        assert_eq!(regions(&[5], &pages, &pick, PAGE), 2);
    }

    proptest! {
        #[test]
        fn every_load_gets_its_own_page_and_regions_are_bounded(
            runs in prop::collection::vec(1u32..12, 0..40),
            extra in 0usize..30,
            objects in 1u64..4,
            seed in any::<u64>(),
        ) {
            let n: usize = runs.iter().map(|&r| r as usize).sum();
            // Pages spread over `objects` memory objects with random gaps.
            let mut s = seed | 1;
            let mut next = || { s ^= s << 13; s ^= s >> 7; s ^= s << 17; s };
            let mut pages: Vec<PageAt> = Vec::new();
            let mut offsets = vec![0u64; objects as usize];
            while pages.len() < n + extra {
                let o = (next() % objects) as usize;
                offsets[o] += PAGE * (1 + next() % 3 / 2);
                pages.push((o as u64, offsets[o]));
            }
            // Shuffled.
            for i in (1..pages.len()).rev() {
                pages.swap(i, (next() % (i as u64 + 1)) as usize);
            }
            let pick = assign(&runs, &pages, PAGE).unwrap();
            prop_assert_eq!(pick.len(), n);
            let mut seen = vec![false; pages.len()];
            for &i in &pick {
                prop_assert!(i < pages.len() && !seen[i], "page {} twice or out of range", i);
                seen[i] = true;
            }
            let r = regions(&runs, &pages, &pick, PAGE);
            prop_assert!(r >= runs.len());
            prop_assert!(r <= runs.len() + stretches(&pages), "{} regions", r);
            // Never worse than giving the pages in memory order to the loads
            // in order (the assignment before this one) when every run fits
            // in one stretch of pages.
            let mut naive: Vec<usize> = (0..pages.len()).collect();
            naive.sort_unstable_by_key(|&i| pages[i]);
            naive.truncate(n);
            let longest = runs.iter().copied().max().unwrap_or(0) as usize;
            if stretches(&pages) == 1 || longest <= 1 {
                prop_assert!(r <= regions(&runs, &pages, &naive, PAGE));
            }
        }
    }
}
