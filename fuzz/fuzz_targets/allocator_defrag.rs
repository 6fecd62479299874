//! Defragmentation, pinning and alias groups on the simulated device:
//! `vkalloc_fuzz::allocator_defrag`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vkalloc_fuzz::allocator_defrag::{run, Input};

fuzz_target!(|input: Input| run(input));
