//! The TLSF range allocator against the shadow model.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vkalloc::range::shadow::Policy;
use vkalloc::range::TlsfAllocator;
use vkalloc_fuzz::range::{run, RangeInput};

fuzz_target!(|input: RangeInput| {
    let ops = run(&input, Policy::GoodFit, |capacity, granularity| {
        Box::new(TlsfAllocator::new(capacity, granularity))
    });
    vkalloc_fuzz::count("range_tlsf", ops);
});
