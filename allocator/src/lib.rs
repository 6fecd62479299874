//! # vkalloc: a Vulkan memory suballocator for renderers
//!
//! Vocabulary, used everywhere in this crate: a **block** is one
//! `VkDeviceMemory`; an **allocation** is a range inside a block. A
//! dedicated allocation is a block that holds exactly one allocation.
//!
//! The allocator picks a memory type from required / preferred /
//! not-preferred property flags ([`select`]), packs allocations into blocks
//! with TLSF or linear algorithms ([`range`]), makes dedicated allocations
//! when the driver asks or the size calls for it, keeps pools under hard
//! budgets, follows heap budgets, and reports statistics ([`stats`]).
//!
//! It reaches Vulkan only through the [`device::MemoryDevice`] seam:
//! [`vk::AshDevice`] on a real device, `sim::SimDevice` (feature `sim`) in tests.
//!
//! ## Quick start
//!
//! (Runs on the simulated device, feature `sim`.)
#![cfg_attr(feature = "sim", doc = "```")]
#![cfg_attr(not(feature = "sim"), doc = "```ignore")]
//! use vkalloc::{Allocator, AllocatorDesc, AllocationDesc, AllocationOptions, MemoryUsage, ResourceKind};
//! use vkalloc::sim::{SimDevice, tables};
//!
//! let allocator = Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default())?;
//! let mut staging = allocator.allocate_mapped(&AllocationDesc {
//!     size: 4096,
//!     alignment: 64,
//!     kind: ResourceKind::Buffer,
//!     options: AllocationOptions::usage(MemoryUsage::Upload).tagged("staging"),
//!     ..AllocationDesc::default()
//! })?;
//! staging.write(0, b"hello")?;
//! allocator.flush(&staging, 0, 5)?;
//! allocator.free(staging)?;
//! assert_eq!(allocator.statistics().total.allocation_count, 0);
//! # Ok::<(), vkalloc::Error>(())
//! ```
//!
//! ## Chapters
//! - *Embedding in an engine*: `docs/embedding.md` in the crate (the type to
//!   store, teardown, pools, frames, defragmentation; each snippet a
//!   doctest), and the runnable `examples/embed.rs`.
//! - *Choosing a memory type*: [`select`] and [`MemoryUsage`].
//! - *Dedicated allocations*: [`DedicatedPolicy`], [`DriverDedicated`], [`AllocatorDesc`].
//! - *Pools and budgets*: [`PoolDesc`], [`Allocator::create_pool`], [`budget`].
//! - *The linear algorithm*: [`range::LinearAllocator`], [`PoolAlgorithm::Linear`].
//! - *Statistics and debugging*: [`stats`], [`Allocator::to_json`],
//!   [`Allocator::summary`], [`Allocator::leaks`], [`Allocator::validate`].
//! - *Finding memory corruption*: [`corruption`], [`Allocator::check_corruption`].
//! - *Defragmentation*: [`defrag`], [`Allocator::begin_defragmentation`],
//!   [`Allocator::set_movable`]; GPU copies in `vk::defrag`.
//! - *Memory priority*: [`priority`], [`MemoryPriority`],
//!   [`Allocator::set_priority`], [`Allocator::set_pool_priority`].
//! - *Aliasing transient resources*: [`alias`], [`Allocator::allocate_alias_group`].
//! - *Recording a trace* (feature `trace`): the `trace` module, `Allocator::start_recording`.
//! - *Creating resources*: [`vk`] (`create_buffer`, `create_image`: a
//!   resource and its memory as one typed value).
//!
//! ## Cargo features
//! - `ash` (default): the device seam on `ash` and the resource helpers. It
//!   takes `ash` without its `loaded` feature: enable `loaded` (or `linked`)
//!   in your own `ash` dependency.
//! - `sim`: the simulated device with real GPUs' memory tables.
//! - `trace`: recording allocation traces.
#![warn(missing_docs)]

pub mod alias;
mod allocation;
mod allocator;
mod block;
mod block_list;
mod block_vector;
pub mod budget;
pub mod corruption;
mod deferred;
pub mod defrag;
mod desc;
pub mod device;
mod error;
pub mod external;
mod mapping;
mod memory;
pub mod names;
mod policy;
mod pool;
mod pressure;
pub mod priority;
pub mod range;
mod recycle;
pub mod report;
pub mod select;
// The crate's own unit tests run on the simulated device whatever the features.
#[cfg(any(feature = "sim", test))]
pub mod sim;
pub mod snapshot;
pub mod stats;
mod strategy;
#[cfg(feature = "trace")]
pub mod trace;
mod type_cache;
#[cfg(feature = "ash")]
pub mod vk;

/// The README's code (the crates.io front page), compiled by `cargo test`.
#[cfg(all(doctest, feature = "ash"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The embedding guide (`docs/embedding.md`), so that each of its snippets
/// is a doctest.
#[cfg(all(doctest, feature = "ash", feature = "sim"))]
#[doc = include_str!("../docs/embedding.md")]
pub struct EmbeddingGuide;

pub use alias::{AliasGroup, AliasRequirement, PassInterval};
pub use allocation::{Allocation, AllocationId, FreeError, MappedAllocation};
pub use allocator::{Allocator, AllocatorDesc, Leak, LeakReport};
pub use deferred::{Collected, FreeQueue, RefusedResource, RetiredResource};
pub use defrag::{
    CommitError, CommitErrorKind, DefragAlgorithm, DefragDesc, DefragError, Defragmentation, Move,
    PassReport,
};
pub use desc::{AllocationDesc, AllocationOptions, DedicatedPolicy, DriverDedicated, ResourceKind};
pub use device::{DedicatedResource, DedicatedTo};
pub use error::Error;
pub use external::ExternalMemoryHandleTypes;
pub use pool::{PoolAlgorithm, PoolDesc, PoolId};
pub use pressure::PoolPressure;
pub use priority::MemoryPriority;
pub use range::LinearMode;
pub use select::MemoryUsage;
pub use snapshot::Snapshot;
pub use strategy::{Strategy, StrategySettings, MIN_MEMORY_BLOCK_SIZE};
