//! Custom pools: a memory type, a block size, a block count range, an
//! algorithm and a hard byte budget.
//!
//! A texture streamer keeps its textures in one pool with a budget, so it
//! is told "full" ([`crate::Error::PoolExhausted`]) instead of pushing the
//! heap over; per-frame uniforms and staging live in linear pools.

#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

use crate::external::ExternalMemoryHandleTypes;
use crate::priority::MemoryPriority;
use crate::range::LinearMode;
use crate::select::MemoryUsage;
use crate::strategy::Strategy;

/// The algorithm a block list places allocations with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolAlgorithm {
    /// General purpose: TLSF, O(1) allocate and free in any order.
    #[default]
    Tlsf,
    /// Linear: a stack or a ring buffer, for per-frame and staging memory;
    /// [`crate::Allocator::reset_pool`] frees everything at once.
    Linear(LinearMode),
}

/// A pool's handle: an index and a generation, so a destroyed pool's id is
/// never mistaken for a newer pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PoolId {
    pub(crate) index: u32,
    pub(crate) generation: u32,
    /// The allocator that made it, so another allocator's pool id is refused
    /// (`UnknownPool`) rather than taken for one of its own.
    pub(crate) allocator: u32,
}

impl PoolId {
    /// The pool's slot index (stable while the pool lives).
    pub fn index(self) -> u32 {
        self.index
    }
}

/// How to make a pool.
///
/// ```
/// use vkalloc::{PoolDesc, PoolAlgorithm, MemoryUsage, range::LinearMode};
/// let staging = PoolDesc {
///     usage: MemoryUsage::Upload,
///     block_size: 16 << 20,
///     min_blocks: 1,
///     max_blocks: 1,
///     algorithm: PoolAlgorithm::Linear(LinearMode::Ring),
///     ..PoolDesc::new("staging ring")
/// };
/// assert_eq!(staging.budget, None);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolDesc {
    /// A name for statistics and dumps.
    pub name: String,
    /// Picks the pool's memory type when [`Self::memory_type`] is `None`.
    pub usage: MemoryUsage,
    /// The memory type index; overrides `usage`.
    pub memory_type: Option<u32>,
    /// Only types in these bits are considered when `memory_type` is `None`
    /// (for example the `memoryTypeBits` of a representative resource).
    pub memory_type_bits: u32,
    /// Bytes per block; 0 picks the memory type's default block size. A
    /// pool's last block within its budget may be smaller.
    pub block_size: u64,
    /// Blocks created up front and never released.
    pub min_blocks: u32,
    /// Blocks at most.
    pub max_blocks: u32,
    /// How allocations are placed in each block.
    pub algorithm: PoolAlgorithm,
    /// A hard cap on the device memory the pool commits (blocks and
    /// dedicated allocations together), in bytes, usable to the byte: where
    /// a whole block would pass it, the pool's next block is what is left
    /// (a smaller last block), and a request the budget refuses first frees
    /// the pool's empty blocks (above `min_blocks`) and tries again.
    /// [`crate::PoolPressure::headroom`] says what is left.
    pub budget: Option<u64>,
    /// The memory priority of the pool's blocks, and of its dedicated
    /// allocations that ask for none (`VK_EXT_memory_priority`; see
    /// [`crate::priority`]); `None`: the driver's default.
    #[serde(default)]
    pub priority: Option<MemoryPriority>,
    /// Handle types every block and dedicated allocation of the pool is
    /// allocated exportable with (`VkExportMemoryAllocateInfo`; see
    /// [`crate::external`]); empty: not exportable.
    #[serde(default)]
    pub export: ExternalMemoryHandleTypes,
    /// How many empty blocks above `min_blocks` the pool keeps
    /// (the policy's `pool_keep_empty`): none at
    /// [`Strategy::MinMemory`], the allocator's
    /// [`crate::AllocatorDesc::keep_empty_blocks`] at
    /// [`Strategy::Balanced`] (the default), all of them (up to
    /// `max_blocks`) at [`Strategy::MinTime`].
    #[serde(default)]
    pub strategy: Strategy,
}

impl PoolDesc {
    /// A TLSF pool for GPU-only memory with default sizes and no budget.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            usage: MemoryUsage::GpuOnly,
            memory_type: None,
            memory_type_bits: u32::MAX,
            block_size: 0,
            min_blocks: 0,
            max_blocks: u32::MAX,
            algorithm: PoolAlgorithm::Tlsf,
            budget: None,
            priority: None,
            export: ExternalMemoryHandleTypes::NONE,
            strategy: Strategy::Balanced,
        }
    }
}
