//! The TLSF range allocator against the shadow model.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vkalloc::range::shadow::Policy;
use vkalloc::range::TlsfAllocator;
use vkalloc_fuzz::range::{run, RangeInput};

fuzz_target!(|input: RangeInput| {
    let ops = run(&input, Policy::GoodFit, |capacity, granularity| {
        // Runs from the first allocation, so the fuzzer reaches them.
        Box::new(TlsfAllocator::new(capacity, granularity).with_runs_from(0))
    });
    vkalloc_fuzz::count("range_tlsf", ops);
});
