//! External memory on `ash` (Unix file descriptors): exporting an
//! allocation's memory object and importing one as a dedicated allocation;
//! see [`crate::external`].

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use ash::vk;
use ash::vk::Handle;

use super::AshDevice;
use crate::desc::ResourceKind;
use crate::external::ExternalMemoryHandleTypes;
use crate::{Allocation, Allocator, Error};

/// An exported memory object: the file descriptor (`OPAQUE_FD`), the
/// object's size and the allocation's place in it. Import it elsewhere with
/// `size` bytes of the same memory type ([`Allocator::import_fd`]), then
/// use the range at `offset`.
#[derive(Debug)]
#[non_exhaustive]
pub struct ExportedMemory {
    /// The descriptor; closed when dropped.
    pub fd: OwnedFd,
    /// Bytes of the whole memory object (what an import allocates).
    pub size: u64,
    /// Where the allocation starts in it.
    pub offset: u64,
    /// The allocation's bytes.
    pub allocation_size: u64,
    /// The memory type index.
    pub memory_type: u32,
}

/// What memory imported from a descriptor is.
#[derive(Clone, Copy, Debug)]
pub struct ImportDesc<'a> {
    /// Bytes of the exported memory object ([`ExportedMemory::size`]).
    pub size: u64,
    /// Its memory type index ([`ExportedMemory::memory_type`]).
    pub memory_type: u32,
    /// The resource it will hold.
    pub kind: ResourceKind,
    /// A name for debugging.
    pub tag: &'a str,
}

impl Allocator<AshDevice> {
    /// Exports the memory object of `allocation` as an `OPAQUE_FD` file
    /// descriptor (`vkGetMemoryFdKHR`). The allocation must come from a
    /// pool made with [`crate::ExternalMemoryHandleTypes::OPAQUE_FD`] in
    /// [`crate::PoolDesc::export`]; a shared block is exported whole, with
    /// the allocation's offset in it.
    ///
    /// # Errors
    /// [`Error::NotEnabled`] when the memory was not allocated exportable
    /// with `OPAQUE_FD`, or `VK_KHR_external_memory_fd` is not enabled;
    /// [`Error::ForeignAllocation`], [`Error::UnknownPool`],
    /// [`Error::InvalidPool`] as for [`Allocator::set_priority`];
    /// [`Error::Vulkan`] if the driver fails.
    pub fn export_fd(&self, allocation: &Allocation) -> Result<ExportedMemory, Error> {
        let (memory, size, export) = self.memory_object_of(allocation)?;
        let Some(fd_fns) = self.device().external_memory_fd() else {
            return Err(Error::NotEnabled(
                "exporting a file descriptor needs VK_KHR_external_memory_fd enabled on the \
                 device and AshDeviceOptions::external_memory_fd",
            ));
        };
        if !export.contains(ExternalMemoryHandleTypes::OPAQUE_FD) {
            return Err(Error::NotEnabled(
                "the allocation's memory was not allocated exportable: allocate it in a pool \
                 whose PoolDesc::export has OPAQUE_FD",
            ));
        }
        let info = vk::MemoryGetFdInfoKHR::default()
            .memory(vk::DeviceMemory::from_raw(memory.0))
            .handle_type(vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD);
        // SAFETY: the memory object is live (the caller holds an allocation
        // in it, checked by `memory_object_of`) and was allocated exportable
        // with OPAQUE_FD; the extension is enabled.
        let raw =
            unsafe { fd_fns.get_memory_fd(&info) }.map_err(super::vulkan("vkGetMemoryFdKHR"))?;
        // SAFETY: vkGetMemoryFdKHR returns a new descriptor that the caller
        // owns and must close.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(ExportedMemory {
            fd,
            size,
            offset: allocation.offset(),
            allocation_size: allocation.size(),
            memory_type: allocation.memory_type(),
        })
    }

    /// Imports memory exported elsewhere as an `OPAQUE_FD` descriptor as a
    /// dedicated allocation of `desc.size` bytes (the driver imports a
    /// duplicate of `fd`; the caller keeps and closes its own). Free it
    /// with [`Allocator::free`] as any allocation.
    ///
    /// # Safety
    /// `fd` was exported with `OPAQUE_FD` from a memory object of
    /// `desc.size` bytes and memory type `desc.memory_type` of a device with
    /// this device's `deviceUUID` and `driverUUID` (Vulkan's rules for
    /// opaque handles).
    ///
    /// # Errors
    /// [`Error::NotEnabled`] without `VK_KHR_external_memory_fd`;
    /// [`Error::NoCompatibleMemoryType`] for a type index out of range;
    /// [`Error::ZeroSize`]; the driver's errors (an invalid handle as
    /// [`Error::Device`]). Nothing is left behind.
    pub unsafe fn import_fd(
        &self,
        fd: BorrowedFd<'_>,
        desc: &ImportDesc<'_>,
    ) -> Result<Allocation, Error> {
        self.allocate_imported(
            fd.as_raw_fd(),
            desc.size,
            desc.memory_type,
            desc.kind,
            desc.tag,
        )
    }
}
