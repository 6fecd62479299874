//! What an allocation request says: the resource it is for, its memory
//! requirements, and how the caller wants it placed.

#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

use crate::device::DedicatedTo;
use crate::pool::PoolId;
use crate::priority::MemoryPriority;
use crate::range::RangeKind;
use crate::select::MemoryUsage;

/// The kind of resource an allocation holds.
///
/// It decides `bufferImageGranularity` padding (linear and optimal resources
/// never share a granularity page) and shows in statistics and dumps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    /// A `VkBuffer`.
    Buffer,
    /// A `VkImage` with `VK_IMAGE_TILING_LINEAR`.
    LinearImage,
    /// A `VkImage` with `VK_IMAGE_TILING_OPTIMAL`.
    OptimalImage,
    /// Memory whose use the allocator is not told; kept apart from both
    /// linear and optimal resources.
    #[default]
    Unknown,
}

impl ResourceKind {
    /// The layout class the range allocators separate by granularity.
    pub fn range_kind(self) -> RangeKind {
        match self {
            ResourceKind::Buffer | ResourceKind::LinearImage => RangeKind::Linear,
            ResourceKind::OptimalImage => RangeKind::Optimal,
            ResourceKind::Unknown => RangeKind::Unknown,
        }
    }

    /// A short lower-case name, as used in JSON dumps.
    pub fn name(self) -> &'static str {
        match self {
            ResourceKind::Buffer => "buffer",
            ResourceKind::LinearImage => "linear_image",
            ResourceKind::OptimalImage => "optimal_image",
            ResourceKind::Unknown => "unknown",
        }
    }
}

/// What the driver said about dedicated memory for the resource
/// (`VkMemoryDedicatedRequirements`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriverDedicated {
    /// The driver expressed no preference.
    #[default]
    None,
    /// `prefersDedicatedAllocation`: honoured when the allocation is large
    /// enough to be worth its own `vkAllocateMemory` (see
    /// [`crate::AllocatorDesc::honour_dedicated_preference_from`]), with a
    /// memory object of its own that names the resource only when memory
    /// reuse is off (see [`crate::AllocatorDesc::recycle_bytes`]).
    Preferred,
    /// `requiresDedicatedAllocation`: always honoured.
    Required,
}

/// Whether the caller wants the allocation to get its own `VkDeviceMemory`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DedicatedPolicy {
    /// The allocator decides: dedicated when the driver requires it, when it
    /// prefers it and the allocation is large, or when the allocation is
    /// larger than half a block.
    #[default]
    Auto,
    /// Always a dedicated allocation.
    Always,
    /// Never a dedicated allocation, unless the driver requires one (then the
    /// request fails with [`crate::Error::DedicatedRequired`]).
    Never,
}

/// How the caller wants an allocation placed; shared by raw allocations and
/// the create-and-bind helpers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocationOptions<'a> {
    /// What the memory is for; picks the memory type.
    pub usage: MemoryUsage,
    /// Allocate from this pool instead of the default blocks.
    pub pool: Option<PoolId>,
    /// Whether to give the allocation its own `VkDeviceMemory`.
    pub dedicated: DedicatedPolicy,
    /// A name for debugging: shown in leak reports and the JSON dump.
    pub tag: &'a str,
    /// Fail with [`crate::Error::OverBudget`] rather than take a heap past
    /// its budget when new device memory is needed.
    pub within_budget: bool,
    /// Placed pinned: no defragmentation pass plans it as a move until
    /// [`crate::Allocator::set_movable`] says otherwise (the pin is set with
    /// the placement, under the same lock, so no pass running meanwhile sees
    /// it movable). Alias groups are always placed so.
    pub pinned: bool,
    /// The memory priority of a dedicated allocation
    /// (`VK_EXT_memory_priority`); `None` leaves the driver's default (0.5),
    /// or its pool's priority in a pool. An allocation placed in a shared
    /// block has the block's priority, its pool's ([`crate::priority`]).
    pub priority: Option<MemoryPriority>,
}

impl<'a> AllocationOptions<'a> {
    /// Options with this usage and every other field at its default.
    pub fn usage(usage: MemoryUsage) -> Self {
        Self {
            usage,
            ..Self::default()
        }
    }

    /// The same options with a debugging tag.
    pub fn tagged(self, tag: &'a str) -> Self {
        Self { tag, ..self }
    }

    /// The same options with a memory priority (see [`Self::priority`]).
    pub fn with_priority(self, priority: MemoryPriority) -> Self {
        Self {
            priority: Some(priority),
            ..self
        }
    }

    /// The same options, allocating from `pool`.
    pub fn in_pool(self, pool: PoolId) -> Self {
        Self {
            pool: Some(pool),
            ..self
        }
    }
}

/// A raw allocation request: memory requirements plus options.
///
/// The create-and-bind helpers in [`crate::vk`] fill the requirements from
/// the resource; raw requests fill them by hand.
///
/// ```
/// use vkalloc::{AllocationDesc, AllocationOptions, MemoryUsage, ResourceKind};
/// let desc = AllocationDesc {
///     size: 64 * 1024,
///     alignment: 256,
///     memory_type_bits: u32::MAX,
///     kind: ResourceKind::Buffer,
///     options: AllocationOptions::usage(MemoryUsage::Upload).tagged("staging"),
///     ..AllocationDesc::default()
/// };
/// assert_eq!(desc.size, 65536);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocationDesc<'a> {
    /// Bytes (`VkMemoryRequirements::size`), non-zero.
    pub size: u64,
    /// Alignment (`VkMemoryRequirements::alignment`): a power of two, or 0 for none.
    pub alignment: u64,
    /// Allowed memory types (`VkMemoryRequirements::memoryTypeBits`).
    pub memory_type_bits: u32,
    /// The resource the memory is for.
    pub kind: ResourceKind,
    /// The driver's dedicated-allocation preference.
    pub driver_dedicated: DriverDedicated,
    /// The resource to name in `VkMemoryDedicatedAllocateInfo` if the
    /// allocation is dedicated.
    pub dedicated_to: Option<DedicatedTo>,
    /// Placement options.
    pub options: AllocationOptions<'a>,
}

impl Default for AllocationDesc<'_> {
    fn default() -> Self {
        Self {
            size: 0,
            alignment: 1,
            memory_type_bits: u32::MAX,
            kind: ResourceKind::Unknown,
            driver_dedicated: DriverDedicated::None,
            dedicated_to: None,
            options: AllocationOptions::default(),
        }
    }
}
