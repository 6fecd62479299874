//! Memory priority (`VK_EXT_memory_priority`) and changing it later
//! (`VK_EXT_pageable_device_local_memory`).
//!
//! A priority tells the driver which memory to keep in video memory when
//! the device is oversubscribed: 0.0 is evicted first, 1.0 last, 0.5 is
//! what memory without one gets. A request's
//! [`crate::AllocationOptions::priority`] is given to a dedicated
//! allocation; a block shared by many allocations takes its pool's
//! [`crate::PoolDesc::priority`] (and the default blocks none, the driver's
//! 0.5). Where the device has `VK_EXT_pageable_device_local_memory`,
//! [`crate::Allocator::set_priority`] and
//! [`crate::Allocator::set_pool_priority`] change it later.
//!
//! Where the device does not have `VK_EXT_memory_priority` (see
//! [`crate::device::DeviceLimits::memory_priority`]) priorities given at
//! allocation are not passed to the driver (a hint the driver can't take:
//! nothing else changes); changing one later without
//! `VK_EXT_pageable_device_local_memory` is refused with
//! [`crate::Error::NotEnabled`].
//!
//! ```
//! use vkalloc::MemoryPriority;
//! let textures = MemoryPriority::new(0.25)?;
//! assert_eq!(textures.get(), 0.25);
//! assert!(MemoryPriority::new(1.5).is_err());
//! assert!(MemoryPriority::new(f32::NAN).is_err());
//! assert_eq!(MemoryPriority::HIGHEST.get(), 1.0);
//! # Ok::<(), vkalloc::Error>(())
//! ```

#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

use crate::Error;

/// A memory priority: a number in `[0.0, 1.0]`
/// (`VkMemoryPriorityAllocateInfoEXT::priority`); higher stays resident
/// longer. Only [`MemoryPriority::new`] makes one, so a value out of range
/// (or NaN) never reaches the driver.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(try_from = "f32", into = "f32")]
pub struct MemoryPriority(f32);

impl MemoryPriority {
    /// 0.0: evicted first.
    pub const LOWEST: Self = Self(0.0);
    /// 0.25: streamed data that can be fetched again (textures).
    pub const LOW: Self = Self(0.25);
    /// 0.5: what memory allocated without a priority gets.
    pub const DEFAULT: Self = Self(0.5);
    /// 0.75: above the default.
    pub const HIGH: Self = Self(0.75);
    /// 1.0: evicted last (render targets, what every frame touches).
    pub const HIGHEST: Self = Self(1.0);

    /// A priority of `value`.
    ///
    /// # Errors
    /// [`Error::InvalidPriority`] when `value` is not in `[0.0, 1.0]` (NaN
    /// included).
    pub fn new(value: f32) -> Result<Self, Error> {
        if (0.0..=1.0).contains(&value) {
            // -0.0 is in range; stored as 0.0 so equal priorities have equal bits.
            Ok(Self(value + 0.0))
        } else {
            Err(Error::InvalidPriority(value.to_bits()))
        }
    }

    /// The number, in `[0.0, 1.0]`.
    pub fn get(self) -> f32 {
        self.0
    }

    /// The bits of the number (for atomics; never those of NaN).
    pub(crate) fn to_bits(self) -> u32 {
        self.0.to_bits()
    }

    /// The priority whose bits [`Self::to_bits`] gave.
    pub(crate) fn from_bits(bits: u32) -> Option<Self> {
        Self::new(f32::from_bits(bits)).ok()
    }
}

impl Default for MemoryPriority {
    fn default() -> Self {
        Self::DEFAULT
    }
}

// Never NaN (checked in `new`) and -0.0 is stored as 0.0: equality is that
// of the bits, so `Eq` and `Hash` hold.
impl Eq for MemoryPriority {}

impl std::hash::Hash for MemoryPriority {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}

impl TryFrom<f32> for MemoryPriority {
    type Error = Error;
    fn try_from(value: f32) -> Result<Self, Error> {
        Self::new(value)
    }
}

impl From<MemoryPriority> for f32 {
    fn from(p: MemoryPriority) -> f32 {
        p.0
    }
}

/// A priority that can change while blocks are made with it (a pool's):
/// its bits, or [`AtomicPriority::NONE`].
#[derive(Debug)]
pub(crate) struct AtomicPriority(std::sync::atomic::AtomicU32);

impl AtomicPriority {
    /// The bits of no priority: those of a NaN, which no priority has.
    const NONE: u32 = u32::MAX;

    pub fn new(p: Option<MemoryPriority>) -> Self {
        Self(std::sync::atomic::AtomicU32::new(
            p.map_or(Self::NONE, MemoryPriority::to_bits),
        ))
    }

    pub fn get(&self) -> Option<MemoryPriority> {
        MemoryPriority::from_bits(self.0.load(std::sync::atomic::Ordering::Acquire))
    }

    pub fn set(&self, p: MemoryPriority) {
        self.0
            .store(p.to_bits(), std::sync::atomic::Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_is_checked_and_typed() {
        for ok in [0.0f32, -0.0, 0.5, 1.0, f32::MIN_POSITIVE] {
            let p = MemoryPriority::new(ok).expect("in range");
            assert_eq!(p.get(), ok);
        }
        assert_eq!(MemoryPriority::new(-0.0).unwrap(), MemoryPriority::LOWEST);
        assert_eq!(MemoryPriority::new(-0.0).unwrap().to_bits(), 0);
        for bad in [-0.1f32, 1.0001, f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            assert_eq!(
                MemoryPriority::new(bad),
                Err(Error::InvalidPriority(bad.to_bits())),
                "{bad}"
            );
        }
    }

    #[test]
    fn serde_refuses_out_of_range() {
        let p: MemoryPriority = serde_json::from_str("0.75").expect("in range");
        assert_eq!(p.get(), 0.75);
        assert!(serde_json::from_str::<MemoryPriority>("2.0").is_err());
        assert_eq!(serde_json::to_string(&p).unwrap(), "0.75");
    }

    #[test]
    fn atomic_round_trips() {
        let a = AtomicPriority::new(None);
        assert_eq!(a.get(), None);
        a.set(MemoryPriority::HIGHEST);
        assert_eq!(a.get(), Some(MemoryPriority::HIGHEST));
        let b = AtomicPriority::new(Some(MemoryPriority::LOWEST));
        assert_eq!(b.get(), Some(MemoryPriority::LOWEST));
    }
}
