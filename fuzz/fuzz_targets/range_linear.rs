//! The linear range allocator (stack and ring) against the shadow model:
//! `vkalloc_fuzz::range::linear`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vkalloc_fuzz::range::{linear, RangeInput};

fuzz_target!(|input: RangeInput| linear(&input));
