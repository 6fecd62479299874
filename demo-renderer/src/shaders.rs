//! The compiled SPIR-V of every shader in `shaders/` (built by `build.rs`).

include!(concat!(env!("OUT_DIR"), "/shaders.rs"));
