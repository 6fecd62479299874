//! External memory through the allocator: imported memory as a dedicated
//! allocation, and what an export needs to know of an allocation's memory
//! object; see [`crate::external`]. The Vulkan calls are in `crate::vk`.

use super::Allocator;
use crate::allocation::{Allocation, ListRef};
use crate::block_vector::DedicatedPlacement;
use crate::desc::{AllocationDesc, AllocationOptions, DedicatedPolicy, ResourceKind};
use crate::device::{DeviceMemory, MemoryDevice};
use crate::error::Error;
use crate::external::ExternalMemoryHandleTypes;

// Reached from `crate::vk`'s Unix file-descriptor calls only.
#[cfg_attr(not(all(unix, feature = "ash")), allow(dead_code))]
impl<D: MemoryDevice> Allocator<D> {
    /// A dedicated allocation of `size` bytes of memory type `memory_type`
    /// imported from file descriptor `fd` (borrowed: the device imports a
    /// duplicate).
    ///
    /// The caller guarantees what [`crate::device::MemoryAllocateInfo::import_fd`]
    /// asks of `fd` (checked by the `unsafe` wrapper in `crate::vk`).
    pub(crate) fn allocate_imported(
        &self,
        fd: i32,
        size: u64,
        memory_type: u32,
        kind: ResourceKind,
        tag: &str,
    ) -> Result<Allocation, Error> {
        if !self
            .device
            .limits()
            .external_memory
            .contains(ExternalMemoryHandleTypes::OPAQUE_FD)
        {
            return Err(Error::NotEnabled(
                "importing a file descriptor needs VK_KHR_external_memory_fd enabled on the \
                 device and AshDeviceOptions::external_memory_fd",
            ));
        }
        let Some(ty) = self.types.get(memory_type as usize) else {
            return Err(Error::NoCompatibleMemoryType {
                memory_type_bits: 1u32.checked_shl(memory_type).unwrap_or(0),
                required: crate::device::MemoryPropertyFlags::NONE,
            });
        };
        let desc = AllocationDesc {
            size,
            alignment: 1,
            memory_type_bits: 1 << memory_type,
            kind,
            options: AllocationOptions {
                dedicated: DedicatedPolicy::Always,
                ..AllocationOptions::default().tagged(tag)
            },
            ..AllocationDesc::default()
        };
        super::placement::check_request(&desc)?;
        let placement = DedicatedPlacement {
            size,
            named: None,
            recyclable: false,
            import_fd: Some(fd),
        };
        ty.vector.allocate_dedicated(self.env(), &placement, &desc)
    }

    /// The memory object of `allocation`, its size, and the handle types
    /// it was allocated exportable with.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`] if another allocator made it;
    /// [`Error::UnknownPool`] or [`Error::InvalidPool`] when its pool was
    /// destroyed or reset since.
    pub(crate) fn memory_object_of(
        &self,
        allocation: &Allocation,
    ) -> Result<(DeviceMemory, u64, ExternalMemoryHandleTypes), Error> {
        let location = &allocation.location;
        if location.allocator != self.id {
            return Err(Error::ForeignAllocation);
        }
        match location.list {
            ListRef::Type(t) => {
                let (memory, size) = self.types[t as usize].vector.block_of(location)?;
                Ok((memory, size, ExternalMemoryHandleTypes::NONE))
            }
            ListRef::Pool(id) => {
                let pool = self.pool(id)?;
                let (memory, size) = pool.vector.block_of(location)?;
                Ok((memory, size, pool.vector.export()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::sim::{tables, SimDevice};
    use crate::{Allocator, AllocatorDesc, Error, ExternalMemoryHandleTypes, PoolDesc};

    #[test]
    fn export_needs_the_handle_types_enabled() {
        let a = Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default())
            .expect("allocator");
        let refused = a.create_pool(&PoolDesc {
            export: ExternalMemoryHandleTypes::OPAQUE_FD,
            ..PoolDesc::new("exported")
        });
        assert!(matches!(refused, Err(Error::NotEnabled(_))), "{refused:?}");
        let refused = a.allocate_imported(3, 4096, 0, crate::ResourceKind::Buffer, "in");
        assert!(matches!(refused, Err(Error::NotEnabled(_))), "{refused:?}");
        assert_eq!(a.statistics().total.allocation_count, 0);
        // No export asked: any device.
        let pool = a.create_pool(&PoolDesc::new("plain")).expect("pool");
        a.destroy_pool(pool).expect("empty");
    }
}
