//! The GPU integration tests as one test binary, `gpu`: each file of this
//! directory is a module (one compile and one link against vkalloc and ash
//! instead of one per file). `cargo test -p gpu-tests --test gpu stress::`
//! runs one file's tests.

mod adversary_vk;
mod deferred;
mod defrag;
mod external;
mod harness;
mod names;
mod priority;
mod requirements;
mod resources;
mod statistics;
mod stress;
mod teardown;
