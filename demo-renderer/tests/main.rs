//! The demo renderer's integration tests as one test binary, `demo`: each
//! file of this directory is a module (one compile and one link against the
//! renderer's dependencies instead of one per file).
//! `cargo test -p demo-renderer --test demo tiles::` runs one file's tests.

mod common;

mod aliasing;
mod camera_path;
mod cli;
mod ktx2_adversary;
mod overlay;
mod record_trace;
mod reference;
mod resident;
mod shaders;
mod streaming;
mod tiles;
mod visibility;
mod window;
