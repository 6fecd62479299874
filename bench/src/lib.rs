//! Side-by-side benchmarks of vkalloc against VMA (through vk-mem) and
//! gpu-allocator.
//!
//! - [`trace`]: the allocation trace format (JSON lines, versioned) and the
//!   standard trace generators.
//! - [`corpus`]: the trace corpus, a parameterised generator family and a
//!   seeded sample of its configurations.
//! - [`clock`]: `rdtsc`-based timing where the TSC is invariant.
//! - [`vkdev`]: a Vulkan device whose `vkAllocateMemory` / `vkFreeMemory` are
//!   counted and timed in its function table.
//! - [`contenders`]: the three allocators behind one trait.
//! - [`replay`]: replays a trace through one contender, timing each operation.
//! - [`runner`]: repetitions, alternation, medians, the table and JSON rows.
//! - [`compact`]: `--defrag`, compacting vkalloc at the end of a trace.
//! - [`range_bench`]: range allocators alone against VMA's virtual blocks.
//! - [`sim_replay`]: `--sim TABLE`, vkalloc alone on a simulated GPU table.
//! - [`threads`]: alloc+free throughput with 1..N threads on one allocator.
//!
//! The binary (`cargo run --release -p bench -- --help`) runs it all.

#![warn(missing_docs)]

pub mod clock;
pub mod compact;
pub mod contenders;
pub mod corpus;
pub mod range_bench;
pub mod replay;
pub mod runner;
pub mod sim_replay;
pub mod threads;
pub mod trace;
pub mod vkdev;
