//! The linear range allocator (stack and ring) against the shadow model.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vkalloc::range::shadow::Policy;
use vkalloc::range::{LinearAllocator, LinearMode};
use vkalloc_fuzz::range::{run, RangeInput};

fuzz_target!(|input: RangeInput| {
    let (policy, mode) = if input.ring {
        (Policy::Ring, LinearMode::Ring)
    } else {
        (Policy::Stack, LinearMode::Stack)
    };
    let ops = run(&input, policy, |capacity, granularity| {
        Box::new(LinearAllocator::new(capacity, mode, granularity))
    });
    vkalloc_fuzz::count("range_linear", ops);
});
