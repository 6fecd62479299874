//! The whole `Allocator` on the simulated device: `vkalloc_fuzz::allocator_sim`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vkalloc_fuzz::allocator_sim::{run, Input};

fuzz_target!(|input: Input| run(input));
