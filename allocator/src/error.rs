//! The allocator's errors. Each variant says what went wrong and how to
//! recover.

#![forbid(unsafe_code)]

use crate::device::{DeviceError, MemoryPropertyFlags};
use crate::pool::PoolId;

/// What can go wrong when allocating, freeing or mapping.
///
/// Every variant leaves the allocator as it was before the call: nothing is
/// leaked and no state is half-changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request asked for zero bytes.
    ///
    /// Recover: ask for at least one byte (Vulkan has no zero-sized resources).
    #[error("zero-sized allocation requested")]
    ZeroSize,

    /// The alignment is not a power of two.
    ///
    /// Recover: pass `VkMemoryRequirements::alignment` (always a power of two),
    /// or 0 or 1 for no alignment.
    #[error("alignment {0} is not a power of two")]
    InvalidAlignment(u64),

    /// No memory type is allowed by `memory_type_bits` and has the required
    /// property flags.
    ///
    /// Recover: check `memoryTypeBits` from the resource's requirements, drop
    /// a required flag (for example ask for `Upload` instead of requiring
    /// `DEVICE_LOCAL | HOST_VISIBLE`), or use a pool of a compatible type.
    #[error("no memory type in bits {memory_type_bits:#b} has the required flags {required:?}")]
    NoCompatibleMemoryType {
        /// The allowed types.
        memory_type_bits: u32,
        /// The flags every candidate had to have.
        required: MemoryPropertyFlags,
    },

    /// The request must stay within budget, and no allowed memory type's
    /// heap has room for it.
    ///
    /// Recover: free memory, wait for the budget to grow (refreshed by
    /// [`crate::Allocator::begin_frame`]), or allow going over budget.
    #[error("no allowed memory type has {size} bytes of room within its heap's budget")]
    NoTypeWithinBudget {
        /// The bytes asked for.
        size: u64,
    },

    /// Every allowed memory type ran out of device memory.
    ///
    /// Recover: free memory (unused resources, empty blocks with
    /// [`crate::Allocator::trim`]), lower texture resolution, or allow more
    /// memory types.
    #[error("out of device memory allocating {size} bytes")]
    OutOfDeviceMemory {
        /// The bytes asked for.
        size: u64,
    },

    /// The host ran out of memory inside the driver.
    ///
    /// Recover: free host memory; nothing on the device side needs undoing.
    #[error("the host is out of memory")]
    OutOfHostMemory,

    /// Creating a block or dedicated allocation would take the heap past its
    /// budget, and the request asked to stay within budget.
    ///
    /// Recover: free memory in this heap, wait for the budget to grow (it is
    /// refreshed by [`crate::Allocator::begin_frame`]), or ask without
    /// `within_budget` to let the driver decide.
    #[error("heap {heap} over budget: {usage} of {budget} bytes used, {requested} more asked")]
    OverBudget {
        /// The heap.
        heap: u32,
        /// Bytes the new device memory would take.
        requested: u64,
        /// The heap's budget.
        budget: u64,
        /// The heap's usage now.
        usage: u64,
    },

    /// A pool's hard byte budget or its maximum block count would be passed.
    ///
    /// Recover: free allocations from the pool (a streamer evicts), raise the
    /// pool's budget, or allocate elsewhere.
    #[error("pool {pool:?} is full: {used} of {budget} bytes committed, {requested} more needed")]
    PoolExhausted {
        /// The pool.
        pool: PoolId,
        /// Bytes the pool would have had to commit.
        requested: u64,
        /// Bytes the pool has committed.
        used: u64,
        /// The pool's hard budget (or its block cap in bytes).
        budget: u64,
    },

    /// `maxMemoryAllocationCount` live device memory objects exist already.
    ///
    /// Recover: free dedicated allocations, or use larger blocks.
    #[error("the device allows at most {limit} live device memory objects")]
    TooManyAllocations {
        /// `maxMemoryAllocationCount`.
        limit: u32,
    },

    /// The allocation can never fit: larger than a pool's block, a linear
    /// pool's capacity or `maxMemoryAllocationSize`.
    ///
    /// Recover: allocate it outside the pool, or split the resource.
    #[error("{size} bytes can never fit where asked (at most {max})")]
    TooLarge {
        /// The bytes asked for.
        size: u64,
        /// The largest size that could fit.
        max: u64,
    },

    /// A dedicated allocation was forbidden but is required by the driver.
    ///
    /// Recover: allow dedicated memory for this resource.
    #[error("the driver requires dedicated memory for this resource but the request forbade it")]
    DedicatedRequired,

    /// The allocation's memory type is not `HOST_VISIBLE`, so it cannot be mapped.
    ///
    /// Recover: ask for a host-visible usage (`Upload`, `Readback`) or copy
    /// through a staging buffer.
    #[error("memory type {memory_type} is not host-visible and cannot be mapped")]
    NotHostVisible {
        /// The allocation's memory type.
        memory_type: u32,
    },

    /// A read or write through a mapping went outside the allocation.
    ///
    /// Recover: keep `offset + len` within [`crate::Allocation::size`].
    #[error("range {offset}..{end} is outside the allocation of {size} bytes")]
    OutOfBounds {
        /// Start of the range.
        offset: u64,
        /// End of the range.
        end: u64,
        /// The allocation's size.
        size: u64,
    },

    /// `vkMapMemory` failed for a new host-visible block.
    ///
    /// Recover: the allocation was not made; retry later or with less memory mapped.
    #[error("mapping device memory failed")]
    MapFailed,

    /// The pool id names no live pool.
    ///
    /// Recover: use an id returned by [`crate::Allocator::create_pool`] that was not destroyed.
    #[error("pool {0:?} does not exist")]
    UnknownPool(PoolId),

    /// A pool can't be destroyed while it holds live allocations.
    ///
    /// Recover: free them first.
    #[error("pool {pool:?} still holds {live} allocations")]
    PoolNotEmpty {
        /// The pool.
        pool: PoolId,
        /// Live allocations in it.
        live: u64,
    },

    /// The pool description is inconsistent.
    ///
    /// Recover: fix the field named in the message.
    #[error("invalid pool description: {0}")]
    InvalidPool(&'static str),

    /// An alias group's members are inconsistent.
    ///
    /// Recover: fix the member named in the message.
    #[error("invalid alias group: {0}")]
    InvalidAlias(&'static str),

    /// A defragmentation move can't be performed as asked.
    ///
    /// Recover: pair each move with its own resource (same id and place),
    /// create moved resources with `TRANSFER_SRC | TRANSFER_DST` usage, or
    /// cancel the move.
    #[error("invalid move: {0}")]
    InvalidMove(&'static str),

    /// The allocation belongs to another allocator.
    ///
    /// Recover: free it with the allocator that made it.
    #[error("the allocation belongs to another allocator")]
    ForeignAllocation,

    /// A resource was handed over with memory allocated for another kind of
    /// resource (an image's allocation to `destroy_buffer`, say).
    ///
    /// Recover: pass the allocation that was made for this resource; the
    /// error hands the allocation back untouched.
    #[error("expected an allocation for a {expected:?}, got one for a {found:?}")]
    WrongResourceKind {
        /// The kind the call works on.
        expected: crate::desc::ResourceKind,
        /// The kind the allocation was made for.
        found: crate::desc::ResourceKind,
    },

    /// The device reported an error not covered above.
    ///
    /// Recover: usually none (device lost); recreate the device.
    #[error("the device failed: {0}")]
    Device(DeviceError),

    /// A Vulkan call made by a create-and-bind helper failed (raw `VkResult`).
    ///
    /// Recover: check the create info; nothing was left allocated.
    #[error("Vulkan call {call} failed with VkResult {result}")]
    Vulkan {
        /// The call that failed.
        call: &'static str,
        /// The raw `VkResult`.
        result: i32,
    },

    /// The request needs something the allocator was not set up with:
    /// the message names the setting (a buffer with `SHADER_DEVICE_ADDRESS`
    /// usage needs [`crate::vk::AshDeviceOptions::buffer_device_address`]).
    ///
    /// Recover: enable the feature on the device and the option, or drop
    /// the usage; nothing was created.
    #[error("{0}")]
    NotEnabled(&'static str),

    /// A memory priority outside `[0.0, 1.0]` (or NaN); the bits of the
    /// `f32` given.
    ///
    /// Recover: pass a number from 0.0 (evicted first) to 1.0 (evicted
    /// last); 0.5 is the driver's default.
    #[error("memory priority {} is not in [0.0, 1.0]", f32::from_bits(*.0))]
    InvalidPriority(u32),

    /// The call works on an allocation with memory of its own (a dedicated
    /// allocation), and this one shares a block with others.
    ///
    /// Recover: change the priority of its pool
    /// ([`crate::Allocator::set_pool_priority`]), or allocate it with
    /// [`crate::DedicatedPolicy::Always`].
    #[error("the allocation shares its memory with others: only a dedicated allocation's priority can be set")]
    NotDedicated,

    /// An internal invariant is broken: a bug in this crate. Found by
    /// [`crate::Allocator::validate`].
    ///
    /// Recover: none; please report it with the allocator's JSON dump.
    #[error("allocator invariant broken: {0}")]
    Invariant(String),
}

impl Error {
    /// Whether another memory type might still satisfy the request.
    pub(crate) fn may_fall_back(&self) -> bool {
        matches!(
            self,
            Error::OutOfDeviceMemory { .. }
                | Error::OverBudget { .. }
                | Error::MapFailed
                | Error::TooManyAllocations { .. }
        )
    }
}

/// What the allocator was asking the device for when it failed: the figures
/// a bare [`DeviceError`] lacks.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DeviceCall {
    /// Bytes asked for (0 when the call allocated nothing).
    pub size: u64,
    /// `maxMemoryAllocationCount`.
    pub limit: u32,
}

impl Error {
    /// The one table from the device seam's errors to the allocator's; every
    /// `VkResult` reaches the caller through here (the seam on `ash` maps
    /// `VkResult` to [`DeviceError`] in one table of its own).
    pub(crate) fn from_device(e: DeviceError, call: DeviceCall) -> Self {
        match e {
            DeviceError::OutOfDeviceMemory => Error::OutOfDeviceMemory { size: call.size },
            DeviceError::OutOfHostMemory => Error::OutOfHostMemory,
            DeviceError::TooManyObjects => Error::TooManyAllocations { limit: call.limit },
            DeviceError::MemoryMapFailed => Error::MapFailed,
            other @ (DeviceError::DeviceLost | DeviceError::Other(_)) => Error::Device(other),
        }
    }
}
