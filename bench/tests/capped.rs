//! A heap capped near the live set (`--heap-cap`): `Balanced` completes
//! corpus traces that failed allocations before its blocks were sized from
//! the budget (issue 37; docs/experiments/policy-strategies.md, *The budget
//! sizes the blocks*). On the simulated device, so it checks placements,
//! not time.

use bench::corpus::{self, default_ops};
use bench::sim_replay::{replay_capped, SimResolver};
use bench::trace::Scale;
use vkalloc::sim::tables;
use vkalloc::{AllocatorDesc, Strategy};

/// Traces of the default corpus sample that failed 5, 5, 19, 15 and 9
/// allocations under a 1.15x cap on lavapipe's table before the budget
/// capped `Balanced`'s blocks.
const FAILED_BEFORE: [usize; 5] = [2, 8, 9, 16, 17];

#[test]
fn balanced_completes_traces_that_failed_under_a_tight_cap() {
    let table = tables::lavapipe();
    let configs = corpus::sample(corpus::DEFAULT_CORPUS_SEED, 32);
    let mut resolver = SimResolver::new(table.clone());
    let mut uncapped_blocks_failed = 0;
    for index in FAILED_BEFORE {
        let config = &configs[index];
        let trace = corpus::generate(
            config,
            &mut resolver,
            Scale::Small,
            default_ops(Scale::Small),
        );
        let replay =
            |desc| replay_capped(&trace, &table, desc, false, false, Some(1.15)).expect("replay");
        let row = replay(AllocatorDesc::default());
        assert_eq!(
            row.failures,
            0,
            "{}: {} failed allocations under a cap of {} MiB ({:?})",
            config.name(),
            row.failures,
            row.cap_bytes.expect("a capped replay reports its cap") >> 20,
            row.first_failure
        );
        // The control: `MinTime`'s blocks are not sized from the budget.
        uncapped_blocks_failed += replay(AllocatorDesc::for_strategy(Strategy::MinTime)).failures;
    }
    assert!(
        uncapped_blocks_failed > 0,
        "the cap is tight enough that blocks not sized from the budget fail"
    );
}
