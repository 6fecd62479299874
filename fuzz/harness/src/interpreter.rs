//! The one interpreter of the allocator targets: an input is a setup and a
//! list of operations; each target says what its setup builds, what its own
//! operations do and what it checks ([`Target`]); the operations both
//! targets have ([`Common`]) run here, the same for both.
//!
//! The order is the same for every target: build the state from the setup
//! (an input whose setup the allocator refuses runs nothing), [`Target::start`],
//! then every operation with [`Target::check`] after each, then
//! [`Target::finish`] (everything freed, no device memory left).

use arbitrary::Arbitrary;

use crate::ops::{self, Alloc, Common};

/// An allocator target's input: how to set up, then the operations.
///
/// The fields' order and types are what libFuzzer's bytes decode to (the
/// committed corpora depend on them): `ops` takes the rest of the bytes.
#[derive(Arbitrary, Debug)]
pub struct Input<S, O> {
    /// What the state starts from.
    pub setup: S,
    /// The operations, in order.
    pub ops: Vec<O>,
}

/// What an allocator target adds to the interpreter: its state, its setup and
/// operations, and its checks.
pub trait Target: Sized {
    /// The name its counts are printed under (`VKALLOC_FUZZ_STATS`).
    const NAME: &'static str;
    /// What the input sets up.
    type Setup;
    /// The target's operations (its decoded input).
    type Op;

    /// The state `setup` asks for; `None` where the allocator refuses its
    /// description (the input then runs nothing).
    fn new(setup: &Self::Setup) -> Option<Self>;

    /// What runs before the first operation (a target's prefill).
    fn start(&mut self, _setup: &Self::Setup) {}

    /// `op` as one of the operations both targets have, or back as the
    /// target's own.
    fn common(op: Self::Op) -> Result<Common, Self::Op>;

    /// Runs one of the target's own operations, the `number`th of the input
    /// (from 1).
    fn apply(&mut self, op: Self::Op, number: u64);

    /// The allocator the operations run on.
    fn allocator(&self) -> &Alloc;

    /// How many allocations the allocator should count now.
    fn expected_count(&self) -> u64;

    /// After an allocator call that may end the open passes of dropped
    /// defragmentation sessions (`trim`, `begin_frame`, `leaks`).
    fn settled(&mut self) {}

    /// Checks of the target's own after [`Common::Statistics`].
    fn check_statistics(&self, _stats: &vkalloc::stats::Statistics) {}

    /// Checks of the target's own after [`Common::DetailedStatistics`].
    fn check_details(&self, _details: &vkalloc::stats::DetailedStatistics) {}

    /// Everything checked after each operation.
    fn check(&self);

    /// Ends the input: frees everything, drops the allocators and checks
    /// that the device holds no memory.
    fn finish(self);
}

/// Runs one input of target `T`.
pub fn run<T: Target>(input: Input<T::Setup, T::Op>) {
    let Input { setup, ops } = input;
    let Some(mut state) = T::new(&setup) else {
        crate::count(T::NAME, 0);
        return;
    };
    state.start(&setup);
    let mut number = 0;
    for op in ops {
        number += 1;
        match T::common(op) {
            Ok(common) => apply_common(&mut state, common),
            Err(op) => state.apply(op, number),
        }
        state.check();
    }
    state.finish();
    crate::count(T::NAME, number);
}

/// Runs an operation both targets have.
fn apply_common<T: Target>(state: &mut T, op: Common) {
    match op {
        Common::Trim => {
            state.allocator().trim();
            state.settled();
        }
        Common::BeginFrame => {
            state.allocator().begin_frame();
            state.settled();
        }
        Common::Statistics => {
            let stats = state.allocator().statistics();
            ops::check_statistics(&stats);
            state.check_statistics(&stats);
        }
        Common::DetailedStatistics => {
            let details = state.allocator().detailed_statistics();
            let count: usize = details
                .lists
                .iter()
                .flat_map(|l| &l.blocks)
                .map(|b| b.allocations.len())
                .sum();
            assert_eq!(count as u64, state.expected_count(), "detailed statistics");
            state.check_details(&details);
        }
        Common::Json => {
            let json = state.allocator().to_json();
            serde_json::from_str::<serde_json::Value>(&json).expect("to_json is JSON");
        }
        Common::Leaks => {
            let leaks = state.allocator().leaks();
            state.settled();
            assert_eq!(leaks.len() as u64, state.expected_count(), "leaks");
        }
        Common::CheckCorruption => {
            assert_eq!(state.allocator().check_corruption(), 0, "corruption found");
        }
    }
}
