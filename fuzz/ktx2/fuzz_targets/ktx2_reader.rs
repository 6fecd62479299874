//! The material baker's KTX2 reader on arbitrary files: `vkalloc_fuzz::ktx2`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| vkalloc_fuzz::ktx2::run(data));
