//! The TLSF range allocator against the shadow model: `vkalloc_fuzz::range::tlsf`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vkalloc_fuzz::range::{tlsf, RangeInput};

fuzz_target!(|input: RangeInput| tlsf(&input));
