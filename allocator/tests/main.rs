//! vkalloc's integration tests as one test binary, `sim` (they all run on
//! the simulated device, so it needs the `sim` feature): each file of this
//! directory is a module, and `api_edges/` one with modules of its own (one
//! compile and one link instead of one per file).
//! `cargo test -p vkalloc --features sim --test sim races::` runs one file's
//! tests.

#[path = "api_edges/main.rs"]
mod api_edges;
mod deferred_resources;
mod defrag;
mod defrag_sessions;
mod fuzz_findings;
mod pool_budgets;
mod races;
mod sim_allocator;
mod sim_strategy;
mod soundness;
mod teardown;
mod threads;
