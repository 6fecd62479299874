//! Changing memory priorities after allocation
//! (`VK_EXT_pageable_device_local_memory`); see [`crate::priority`].

use super::Allocator;
use crate::allocation::{Allocation, ListRef};
use crate::device::MemoryDevice;
use crate::error::Error;
use crate::pool::PoolId;
use crate::priority::MemoryPriority;

impl<D: MemoryDevice> Allocator<D> {
    /// Whether priorities given at allocation reach the driver
    /// (`VK_EXT_memory_priority` is enabled); where not, they are not passed
    /// on and nothing else changes.
    pub fn memory_priority_enabled(&self) -> bool {
        self.device.limits().memory_priority
    }

    /// Whether [`Self::set_priority`] and [`Self::set_pool_priority`] can
    /// work (`VK_EXT_pageable_device_local_memory` is enabled).
    pub fn priority_changes_enabled(&self) -> bool {
        self.device.limits().pageable_device_local_memory
    }

    /// Changes the priority of a dedicated allocation's memory
    /// (`vkSetDeviceMemoryPriorityEXT`): a texture that left the view can
    /// be let go first when video memory runs short.
    ///
    #[cfg_attr(feature = "sim", doc = "```")]
    #[cfg_attr(not(feature = "sim"), doc = "```ignore")]
    /// use vkalloc::{Allocator, AllocatorDesc, AllocationDesc, AllocationOptions, DedicatedPolicy, MemoryPriority, MemoryUsage};
    /// use vkalloc::sim::{SimDevice, tables};
    ///
    /// let allocator = Allocator::new(SimDevice::new(tables::nvidia_h200()), AllocatorDesc::default())?;
    /// let options = AllocationOptions {
    ///     dedicated: DedicatedPolicy::Always,
    ///     ..AllocationOptions::usage(MemoryUsage::GpuOnly).with_priority(MemoryPriority::HIGHEST)
    /// };
    /// let target = allocator.allocate(&AllocationDesc { size: 8 << 20, options, ..AllocationDesc::default() })?;
    /// allocator.set_priority(&target, MemoryPriority::new(0.2)?)?;
    /// allocator.free(target)?;
    /// # Ok::<(), vkalloc::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::NotEnabled`] without `VK_EXT_pageable_device_local_memory`;
    /// [`Error::NotDedicated`] for an allocation that shares a block (change
    /// its pool's priority instead); [`Error::ForeignAllocation`] if another
    /// allocator made it; [`Error::UnknownPool`] or [`Error::InvalidPool`]
    /// when its pool was destroyed or reset since. Nothing changes on error.
    pub fn set_priority(
        &self,
        allocation: &Allocation,
        priority: MemoryPriority,
    ) -> Result<(), Error> {
        let location = &allocation.location;
        if location.allocator != self.id {
            return Err(Error::ForeignAllocation);
        }
        if !self.priority_changes_enabled() {
            return Err(Error::NotEnabled(crate::memory::PAGEABLE_NOT_ENABLED));
        }
        if !allocation.is_dedicated() {
            return Err(Error::NotDedicated);
        }
        match location.list {
            ListRef::Type(t) => self.types[t as usize].vector.set_dedicated_priority(
                &self.device,
                location,
                priority,
            ),
            ListRef::Pool(id) => {
                self.pool(id)?
                    .vector
                    .set_dedicated_priority(&self.device, location, priority)
            }
        }
    }

    /// Changes a pool's priority: every shared block it has now
    /// (`vkSetDeviceMemoryPriorityEXT`) and every block and dedicated
    /// allocation it makes later. Its dedicated allocations keep the
    /// priority they were made with (change each with [`Self::set_priority`]).
    /// A block another thread is making during the call may keep the old
    /// priority.
    ///
    /// # Errors
    /// [`Error::UnknownPool`] for a pool that does not exist;
    /// [`Error::NotEnabled`] without `VK_EXT_pageable_device_local_memory`
    /// (nothing changes).
    pub fn set_pool_priority(&self, pool: PoolId, priority: MemoryPriority) -> Result<(), Error> {
        self.pool(pool)?
            .vector
            .set_pool_priority(&self.device, priority)
    }

    /// The priority a pool's new blocks get (`None`: the driver's default).
    ///
    /// # Errors
    /// [`Error::UnknownPool`] for a pool that does not exist.
    pub fn pool_priority(&self, pool: PoolId) -> Result<Option<MemoryPriority>, Error> {
        Ok(self.pool(pool)?.vector.pool_priority())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::sim::{tables, SimDevice};
    use crate::{
        AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, DedicatedPolicy, Error,
        MemoryPriority, MemoryUsage, PoolDesc, ResourceKind,
    };

    fn desc(options: AllocationOptions<'_>, size: u64) -> AllocationDesc<'_> {
        AllocationDesc {
            size,
            alignment: 256,
            kind: ResourceKind::OptimalImage,
            options,
            ..AllocationDesc::default()
        }
    }

    fn dedicated(priority: Option<MemoryPriority>) -> AllocationOptions<'static> {
        AllocationOptions {
            dedicated: DedicatedPolicy::Always,
            priority,
            ..AllocationOptions::usage(MemoryUsage::GpuOnly)
        }
    }

    fn p(v: f32) -> MemoryPriority {
        MemoryPriority::new(v).expect("in range")
    }

    #[test]
    fn dedicated_takes_the_request_and_blocks_the_pool() {
        let device = Arc::new(SimDevice::new(tables::nvidia_h200()));
        let a = Allocator::new(Arc::clone(&device), AllocatorDesc::default()).expect("allocator");
        assert!(a.memory_priority_enabled() && a.priority_changes_enabled());
        let own = a.allocate(&desc(dedicated(Some(p(0.9))), 1 << 20)).unwrap();
        let none = a.allocate(&desc(dedicated(None), 1 << 20)).unwrap();
        let shared = a
            .allocate(&desc(
                AllocationOptions::usage(MemoryUsage::GpuOnly).with_priority(p(0.9)),
                4096,
            ))
            .unwrap();
        let info = |m| device.memory_info(m).expect("live");
        assert_eq!(info(own.memory()).priority, Some(p(0.9)));
        assert_eq!(info(none.memory()).priority, None);
        // A default block is shared: it keeps the driver's default.
        assert!(!shared.is_dedicated());
        assert_eq!(info(shared.memory()).priority, None);

        let pool = a
            .create_pool(&PoolDesc {
                block_size: 4 << 20,
                priority: Some(p(0.2)),
                ..PoolDesc::new("textures")
            })
            .unwrap();
        assert_eq!(a.pool_priority(pool), Ok(Some(p(0.2))));
        let in_block = a
            .allocate(&desc(
                AllocationOptions::usage(MemoryUsage::GpuOnly).in_pool(pool),
                4096,
            ))
            .unwrap();
        let pool_dedicated = a
            .allocate(&desc(dedicated(None).in_pool(pool), 3 << 20))
            .unwrap();
        let pool_own = a
            .allocate(&desc(dedicated(Some(p(1.0))).in_pool(pool), 3 << 20))
            .unwrap();
        assert_eq!(info(in_block.memory()).priority, Some(p(0.2)));
        assert_eq!(info(pool_dedicated.memory()).priority, Some(p(0.2)));
        assert_eq!(info(pool_own.memory()).priority, Some(p(1.0)));
        // (A pool gives memory of its own only to more than half a block.)
        assert!(pool_dedicated.is_dedicated() && pool_own.is_dedicated());

        // Later changes.
        a.set_priority(&own, p(0.1)).unwrap();
        assert_eq!(info(own.memory()).priority, Some(p(0.1)));
        assert_eq!(a.set_priority(&shared, p(0.1)), Err(Error::NotDedicated));
        assert_eq!(a.set_priority(&in_block, p(0.1)), Err(Error::NotDedicated));
        a.set_pool_priority(pool, p(0.7)).unwrap();
        assert_eq!(info(in_block.memory()).priority, Some(p(0.7)));
        // Dedicated allocations of the pool keep theirs.
        assert_eq!(info(pool_own.memory()).priority, Some(p(1.0)));
        // A new block of the pool gets the new priority.
        let half = || {
            desc(
                AllocationOptions::usage(MemoryUsage::GpuOnly).in_pool(pool),
                2 << 20,
            )
        };
        let first = a.allocate(&half()).unwrap();
        let big = a.allocate(&half()).unwrap();
        assert!(!big.is_dedicated());
        assert_ne!(big.memory(), in_block.memory(), "a second block");
        assert_eq!(info(big.memory()).priority, Some(p(0.7)));
        assert_eq!(a.pool_priority(pool), Ok(Some(p(0.7))));

        for x in [
            own,
            none,
            shared,
            in_block,
            pool_dedicated,
            pool_own,
            first,
            big,
        ] {
            a.free(x).unwrap();
        }
        a.destroy_pool(pool).unwrap();
        assert_eq!(device.violations(), 0, "{:?}", device.violation_log());
    }

    #[test]
    fn without_the_extensions_priorities_are_not_passed_on_and_changes_refused() {
        let device = Arc::new(
            SimDevice::builder(tables::nvidia_h200())
                .memory_priority(false, false)
                .build(),
        );
        let a = Allocator::new(Arc::clone(&device), AllocatorDesc::default()).expect("allocator");
        assert!(!a.memory_priority_enabled() && !a.priority_changes_enabled());
        let own = a.allocate(&desc(dedicated(Some(p(0.9))), 1 << 20)).unwrap();
        assert_eq!(device.memory_info(own.memory()).unwrap().priority, None);
        assert!(matches!(
            a.set_priority(&own, p(0.1)),
            Err(Error::NotEnabled(_))
        ));
        let pool = a
            .create_pool(&PoolDesc {
                priority: Some(p(0.2)),
                ..PoolDesc::new("textures")
            })
            .unwrap();
        assert!(matches!(
            a.set_pool_priority(pool, p(0.1)),
            Err(Error::NotEnabled(_))
        ));
        // Refused: the pool's priority did not change.
        assert_eq!(a.pool_priority(pool), Ok(Some(p(0.2))));
        a.free(own).unwrap();
        a.destroy_pool(pool).unwrap();
        assert_eq!(device.violations(), 0, "{:?}", device.violation_log());
    }

    #[test]
    fn foreign_and_stale_are_refused() {
        let a = Allocator::new(
            SimDevice::new(tables::nvidia_h200()),
            AllocatorDesc::default(),
        )
        .unwrap();
        let b = Allocator::new(
            SimDevice::new(tables::nvidia_h200()),
            AllocatorDesc::default(),
        )
        .unwrap();
        let x = b.allocate(&desc(dedicated(None), 1 << 20)).unwrap();
        assert_eq!(a.set_priority(&x, p(0.5)), Err(Error::ForeignAllocation));
        b.free(x).unwrap();
        let pool = a.create_pool(&PoolDesc::new("gone")).unwrap();
        a.destroy_pool(pool).unwrap();
        assert_eq!(
            a.set_pool_priority(pool, p(0.5)),
            Err(Error::UnknownPool(pool))
        );
    }
}
