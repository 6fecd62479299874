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
//! [`vk::AshDevice`] on a real device, [`sim::SimDevice`] in tests.
//!
//! ## Quick start
//! ```
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
//! - *Choosing a memory type*: [`select`] and [`MemoryUsage`].
//! - *Dedicated allocations*: [`DedicatedPolicy`], [`DriverDedicated`], [`AllocatorDesc`].
//! - *Pools and budgets*: [`PoolDesc`], [`Allocator::create_pool`], [`budget`].
//! - *The linear algorithm*: [`range::LinearAllocator`], [`PoolAlgorithm::Linear`].
//! - *Statistics and debugging*: [`stats`], [`Allocator::to_json`],
//!   [`Allocator::summary`], [`Allocator::leaks`], [`Allocator::validate`].
//! - *Finding memory corruption*: [`corruption`], [`Allocator::check_corruption`].
//! - *Recording a trace*: [`trace`], [`Allocator::start_recording`].
//! - *Creating resources*: [`vk`].
#![warn(missing_docs)]

mod allocation;
mod allocator;
mod block;
mod block_list;
pub mod budget;
pub mod corruption;
mod desc;
pub mod device;
mod error;
mod mapping;
mod memory;
mod pool;
pub mod range;
mod recycle;
pub mod report;
pub mod select;
pub mod sim;
pub mod snapshot;
pub mod stats;
pub mod trace;
mod type_cache;
#[cfg(feature = "ash")]
pub mod vk;

pub use allocation::{Allocation, MappedAllocation};
pub use allocator::{Allocator, AllocatorDesc, Leak};
pub use block::PoolAlgorithm;
pub use desc::{AllocationDesc, AllocationOptions, DedicatedPolicy, DriverDedicated, ResourceKind};
pub use error::Error;
pub use pool::{PoolDesc, PoolId};
pub use range::LinearMode;
pub use select::MemoryUsage;
pub use snapshot::Snapshot;
