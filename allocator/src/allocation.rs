//! Allocations: a range inside a block, and its mapped, host-accessible form.
//!
//! Mapping is typed: only a [`MappedAllocation`] has host access, and the
//! allocator hands one out only for a `HOST_VISIBLE` memory type, so mapping
//! device-only memory does not compile.

use crate::desc::ResourceKind;
use crate::device::DeviceMemory;
use crate::error::Error;
use crate::pool::PoolId;
use crate::range::Range;

/// Which block list an allocation lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ListRef {
    /// The default blocks of a memory type.
    Type(u32),
    /// A custom pool's blocks.
    Pool(PoolId),
}

/// Where an allocation lives, for freeing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Location {
    pub allocator: u32,
    pub list: ListRef,
    /// The shard of the list's vector that holds the block.
    pub shard: u8,
    pub block: u32,
    pub range: Range,
    /// The pool's reset epoch when allocated (0 outside pools).
    pub epoch: u32,
}

/// An allocation's stable identity: unique among an allocator's live
/// allocations, and kept when defragmentation moves the allocation, so a
/// caller can map it to its own resource handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct AllocationId(pub u64);

/// A range of device memory owned by the caller until it is given back with
/// [`crate::Allocator::free`].
///
/// An allocation is plain data: it is `Send + Sync`, not `Clone` (so it
/// can't be freed twice), and dropping it without freeing leaks its range
/// until the allocator is dropped, which then reports it with its tag.
#[derive(Debug)]
#[must_use = "an allocation dropped without `Allocator::free` leaks its range until the allocator goes away"]
pub struct Allocation {
    pub(crate) memory: DeviceMemory,
    pub(crate) offset: u64,
    pub(crate) size: u64,
    pub(crate) memory_type: u32,
    pub(crate) kind: ResourceKind,
    /// Host address of the first byte when the block is mapped, else 0.
    pub(crate) host_address: usize,
    pub(crate) dedicated: bool,
    pub(crate) location: Location,
    pub(crate) id: u64,
}

impl Allocation {
    /// The allocation's stable id, kept across defragmentation moves (the
    /// allocation a move hands back has the same id as the one it replaces).
    pub fn id(&self) -> AllocationId {
        AllocationId(self.id)
    }

    /// The `VkDeviceMemory` to bind to (its raw handle).
    pub fn memory(&self) -> DeviceMemory {
        self.memory
    }

    /// The offset to bind at, inside [`Self::memory`].
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The bytes asked for.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The memory type index.
    pub fn memory_type(&self) -> u32 {
        self.memory_type
    }

    /// The kind of resource the allocation was made for.
    pub fn kind(&self) -> ResourceKind {
        self.kind
    }

    /// Whether the allocation has its own `VkDeviceMemory`.
    pub fn is_dedicated(&self) -> bool {
        self.dedicated
    }

    /// The pool the allocation came from, if any.
    pub fn pool(&self) -> Option<PoolId> {
        match self.location.list {
            ListRef::Pool(id) => Some(id),
            ListRef::Type(_) => None,
        }
    }

    /// Whether the memory is host-visible, so [`Self::into_mapped`] succeeds.
    pub fn is_host_visible(&self) -> bool {
        self.host_address != 0
    }

    /// The mapped form of this allocation, when its memory type is
    /// host-visible (for example a `GpuOnly` allocation on an integrated GPU,
    /// whose only types are host-visible).
    ///
    /// # Errors
    /// Gives the allocation back when its memory can't be mapped.
    pub fn into_mapped(self) -> Result<MappedAllocation, Allocation> {
        if self.is_host_visible() {
            Ok(MappedAllocation { allocation: self })
        } else {
            Err(self)
        }
    }
}

/// An allocation in host-visible memory, mapped for its whole life
/// (persistent mapping: the block is mapped once when it is created).
///
/// Host writes to non-coherent memory must be flushed with
/// [`crate::Allocator::flush`], and device writes invalidated with
/// [`crate::Allocator::invalidate`] before the host reads them.
#[derive(Debug)]
#[must_use = "an allocation dropped without `Allocator::free` leaks its range until the allocator goes away"]
pub struct MappedAllocation {
    allocation: Allocation,
}

impl MappedAllocation {
    /// The allocation itself (memory, offset, size).
    pub fn allocation(&self) -> &Allocation {
        &self.allocation
    }

    /// Gives up host access, keeping the allocation.
    pub fn into_allocation(self) -> Allocation {
        self.allocation
    }

    /// The host address of the allocation's first byte.
    ///
    /// Valid until the allocation is freed (or its pool reset). Reading or
    /// writing through it is `unsafe` for the caller; [`Self::as_slice`],
    /// [`Self::as_mut_slice`], [`Self::read`] and [`Self::write`] are the
    /// safe ways.
    pub fn as_ptr(&self) -> *mut u8 {
        self.allocation.host_address as *mut u8
    }

    /// The allocation's bytes, to read.
    ///
    /// The device may write them concurrently: synchronize with the GPU
    /// (fences) before reading what it wrote, and invalidate non-coherent
    /// memory.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: a `MappedAllocation` exists only for a live allocation in a
        // mapped block, made by `Allocator::allocate_mapped` or `into_mapped`.
        // The block stays mapped while the allocation is live: it is unmapped
        // only when it holds no allocation, and `Allocator::destroy`, drop and
        // `destroy_pool` keep mapped blocks that still hold one. The bytes
        // belong to this allocation alone (live allocations never overlap;
        // `reset_pool`, which breaks that, is `unsafe` and forbids using old
        // handles). The borrow of `self` bounds the slice's life.
        unsafe { crate::mapping::slice(self.allocation.host_address, self.allocation.size) }
    }

    /// The allocation's bytes, to write. Flush non-coherent memory after.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; `&mut self` makes this the only
        // reference to the allocation's bytes for the slice's life.
        unsafe { crate::mapping::slice_mut(self.allocation.host_address, self.allocation.size) }
    }

    /// Copies `data` into the allocation at `offset`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] if the range passes the allocation's end.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), Error> {
        let range = self.checked_range(offset, data.len())?;
        self.as_mut_slice()[range].copy_from_slice(data);
        Ok(())
    }

    /// Copies bytes at `offset` into `out`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] if the range passes the allocation's end.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), Error> {
        let range = self.checked_range(offset, out.len())?;
        out.copy_from_slice(&self.as_slice()[range]);
        Ok(())
    }

    fn checked_range(&self, offset: u64, len: usize) -> Result<std::ops::Range<usize>, Error> {
        let size = self.allocation.size;
        let end = offset.checked_add(len as u64).filter(|&end| end <= size);
        match end {
            Some(end) => Ok(offset as usize..end as usize),
            None => Err(Error::OutOfBounds {
                offset,
                end: offset.saturating_add(len as u64),
                size,
            }),
        }
    }
}

impl From<MappedAllocation> for Allocation {
    fn from(mapped: MappedAllocation) -> Self {
        mapped.allocation
    }
}

impl std::ops::Deref for MappedAllocation {
    type Target = Allocation;
    fn deref(&self) -> &Allocation {
        &self.allocation
    }
}

impl AsRef<Allocation> for Allocation {
    fn as_ref(&self) -> &Allocation {
        self
    }
}

impl AsRef<Allocation> for MappedAllocation {
    fn as_ref(&self) -> &Allocation {
        &self.allocation
    }
}

/// A free that could not be done: the error, and the allocation handed back
/// so that its owner can still free it where it belongs.
///
/// `?` turns it into an [`Error`], dropping the allocation (which then shows
/// in the leak report); keep the allocation with [`Self::into_allocation`].
///
#[cfg_attr(feature = "sim", doc = "```")]
#[cfg_attr(not(feature = "sim"), doc = "```ignore")]
/// use vkalloc::{Allocator, AllocatorDesc, AllocationDesc, Error};
/// use vkalloc::sim::{tables, SimDevice};
/// let a = Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default())?;
/// let b = Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default())?;
/// let allocation = a.allocate(&AllocationDesc { size: 256, ..AllocationDesc::default() })?;
/// let refused = b.free(allocation).unwrap_err();
/// assert_eq!(refused.error(), &Error::ForeignAllocation);
/// a.free(refused.into_allocation())?; // the owner still frees it
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
#[must_use = "the allocation inside is lost unless it is freed where it belongs"]
pub struct FreeError {
    error: Error,
    // Boxed to keep `Result<(), FreeError>` small on the common, `Ok` path.
    allocation: Box<Allocation>,
}

impl FreeError {
    pub(crate) fn new(error: Error, allocation: Allocation) -> Self {
        Self {
            error,
            allocation: Box::new(allocation),
        }
    }

    /// What went wrong.
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// The allocation that was not freed.
    pub fn into_allocation(self) -> Allocation {
        *self.allocation
    }

    /// The error and the allocation.
    pub fn into_parts(self) -> (Error, Allocation) {
        (self.error, *self.allocation)
    }
}

impl From<FreeError> for Error {
    fn from(e: FreeError) -> Self {
        e.error
    }
}
