//! Debug names of device memory (`VK_EXT_debug_utils`): every
//! `VkDeviceMemory` the allocator makes is named for what it is, so
//! RenderDoc, Nsight and validation messages say what a handle holds:
//!
//! - `vkalloc block type 1 default tlsf #3`: a memory type's default block,
//!   the allocator's third `vkAllocateMemory`;
//! - `vkalloc block type 1 pool 'textures' tlsf #7`: a pool's block
//!   (`ring` or `stack` for linear pools);
//! - `vkalloc dedicated type 1 'shadow-map' #9`, `vkalloc dedicated type 1
//!   pool 'textures' 'albedo' #12`: memory of one allocation, with its tag.
//!
//! Names are set only where the device says the instance has
//! `VK_EXT_debug_utils` ([`crate::device::DeviceLimits::debug_utils`],
//! from [`crate::vk::AshDeviceOptions::debug_utils`]); buffers and images
//! created by the allocator are named from their tags when
//! [`crate::AllocatorDesc::name_resources`] asks for it.

#![forbid(unsafe_code)]

use std::fmt::Write;

use crate::block::PoolAlgorithm;
use crate::range::LinearMode;

/// What a memory object is, for its name.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MemoryLabel<'a> {
    pub memory_type: u32,
    /// The pool's name; `None` for a memory type's default blocks.
    pub pool: Option<&'a str>,
    pub algorithm: PoolAlgorithm,
    /// `Some(tag)` for dedicated memory (the tag may be empty).
    pub dedicated: Option<&'a str>,
}

impl MemoryLabel<'_> {
    /// The name of the allocator's `serial`-th memory object with this label.
    pub fn name(&self, serial: u64) -> String {
        let mut s = String::with_capacity(64);
        let kind = if self.dedicated.is_some() {
            "dedicated"
        } else {
            "block"
        };
        // Writing to a String can't fail.
        let _ = write!(s, "vkalloc {kind} type {}", self.memory_type);
        match self.pool {
            Some(pool) => {
                let _ = write!(s, " pool '{pool}'");
            }
            None if self.dedicated.is_none() => s.push_str(" default"),
            None => {}
        }
        match self.dedicated {
            Some("") => {}
            Some(tag) => {
                let _ = write!(s, " '{tag}'");
            }
            None => s.push_str(match self.algorithm {
                PoolAlgorithm::Tlsf => " tlsf",
                PoolAlgorithm::Linear(LinearMode::Stack) => " stack",
                PoolAlgorithm::Linear(LinearMode::Ring) => " ring",
            }),
        }
        let _ = write!(s, " #{serial}");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_say_type_pool_kind_and_serial() {
        let block = MemoryLabel {
            memory_type: 1,
            pool: None,
            algorithm: PoolAlgorithm::Tlsf,
            dedicated: None,
        };
        assert_eq!(block.name(3), "vkalloc block type 1 default tlsf #3");
        let pooled = MemoryLabel {
            pool: Some("textures"),
            ..block
        };
        assert_eq!(
            pooled.name(7),
            "vkalloc block type 1 pool 'textures' tlsf #7"
        );
        let ring = MemoryLabel {
            pool: Some("staging"),
            algorithm: PoolAlgorithm::Linear(LinearMode::Ring),
            ..block
        };
        assert_eq!(ring.name(2), "vkalloc block type 1 pool 'staging' ring #2");
        let dedicated = MemoryLabel {
            dedicated: Some("shadow-map"),
            ..block
        };
        assert_eq!(
            dedicated.name(9),
            "vkalloc dedicated type 1 'shadow-map' #9"
        );
        let untagged = MemoryLabel {
            dedicated: Some(""),
            pool: Some("textures"),
            ..block
        };
        assert_eq!(
            untagged.name(4),
            "vkalloc dedicated type 1 pool 'textures' #4"
        );
    }

    #[test]
    fn the_allocator_names_its_memory_where_the_instance_has_debug_utils() {
        use std::sync::Arc;

        use crate::sim::{tables, SimDevice};
        use crate::{
            AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, DedicatedPolicy,
            MemoryUsage, PoolDesc, ResourceKind,
        };

        let desc = |options| AllocationDesc {
            size: 4096,
            alignment: 256,
            kind: ResourceKind::Buffer,
            options,
            ..AllocationDesc::default()
        };
        for enabled in [true, false] {
            let device = Arc::new(
                SimDevice::builder(tables::lavapipe())
                    .debug_utils(enabled)
                    .build(),
            );
            let a = Allocator::new(Arc::clone(&device), AllocatorDesc::default()).unwrap();
            let pool = a
                .create_pool(&PoolDesc {
                    usage: MemoryUsage::Upload,
                    block_size: 1 << 20,
                    algorithm: PoolAlgorithm::Linear(LinearMode::Ring),
                    ..PoolDesc::new("staging")
                })
                .unwrap();
            let shared = a
                .allocate(&desc(AllocationOptions::usage(MemoryUsage::GpuOnly)))
                .unwrap();
            let pooled = a
                .allocate(&desc(
                    AllocationOptions::usage(MemoryUsage::Upload).in_pool(pool),
                ))
                .unwrap();
            let own = a
                .allocate(&desc(AllocationOptions {
                    dedicated: DedicatedPolicy::Always,
                    ..AllocationOptions::usage(MemoryUsage::GpuOnly).tagged("shadow-map")
                }))
                .unwrap();
            let names: Vec<_> = [&shared, &pooled, &own]
                .iter()
                .map(|x| device.memory_name(x.memory()))
                .collect();
            if enabled {
                let t = shared.memory_type();
                assert_eq!(
                    names,
                    [
                        Some(format!("vkalloc block type {t} default tlsf #1")),
                        Some(format!("vkalloc block type {t} pool 'staging' ring #2")),
                        Some(format!("vkalloc dedicated type {t} 'shadow-map' #3")),
                    ]
                );
            } else {
                assert_eq!(names, [None, None, None]);
            }
            for x in [shared, pooled, own] {
                a.free(x).unwrap();
            }
            a.destroy_pool(pool).unwrap();
            assert_eq!(device.violations(), 0, "{:?}", device.violation_log());
        }
    }
}
