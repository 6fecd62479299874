//! Where the allocator sits on the front between committed memory and time.
//!
//! Measured on the H200 (BENCHMARKS.md, *the committed/wall front*): small
//! blocks and no kept memory bring committed/live down to about 1.1, and
//! cost 4x the wall time in `vkAllocateMemory`/`vkFreeMemory` calls; large
//! blocks and kept memory win the wall time and commit up to 2x the live
//! bytes. No one setting wins both, so the caller picks the end
//! ([`Strategy`]), and the default ([`Strategy::Balanced`]) moves between
//! them with the pressure on each heap (the policy's `point`).
//!
//! Every strategy's settings are here, in one table
//! ([`Strategy::settings`]); [`crate::AllocatorDesc::for_strategy`] copies
//! the ones a caller may still tune into the description.

#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

/// How the allocator trades committed memory against driver calls.
///
/// ```
/// use vkalloc::{AllocatorDesc, Strategy};
/// let desc = AllocatorDesc::for_strategy(Strategy::MinMemory);
/// assert_eq!(desc.strategy, Strategy::MinMemory);
/// assert_eq!(desc.block_size, Strategy::MinMemory.settings().block_size);
/// assert_eq!(AllocatorDesc::default().strategy, Strategy::Balanced);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Commit as little as possible beyond the live bytes at the committed
    /// peak: 16 MiB blocks (requests above 8 MiB get memory of their own),
    /// and freed memory (empty blocks, recycled memory of its own) kept only
    /// below the type's committed high-water mark, where it raises no peak;
    /// it goes back once the allocator is idle. Pays for it in driver calls.
    MinMemory,
    /// The time end while memory is plentiful, sliding towards the memory
    /// end as a heap's usage passes 3/4 (new blocks at most a quarter of
    /// the largest) and 7/8 (16 MiB blocks, nothing kept, empty blocks
    /// freed, no recycled memory of its own) of its budget
    /// (`VK_EXT_memory_budget`, else the heap's size; the policy's `point`).
    /// At any pressure its new blocks are at most 1/32 of that budget (a
    /// heap of 8 GiB or more keeps 256 MiB blocks), so that a budget near
    /// the live set is not lost to the holes of blocks made early; a request
    /// above half of the block it would make gets memory of its own unless
    /// an existing block has room.
    #[default]
    Balanced,
    /// As few driver calls as possible: large blocks, and freed memory
    /// kept until the allocator has been idle a while
    /// ([`StrategySettings::idle_release_ms`]) or its heap is 7/8 used.
    MinTime,
}

impl Strategy {
    /// Every strategy, memory end first.
    pub const ALL: [Strategy; 3] = [Strategy::MinMemory, Strategy::Balanced, Strategy::MinTime];

    /// The name the bench and the JSON rows use (`min-memory`, `balanced`,
    /// `min-time`).
    pub fn name(self) -> &'static str {
        match self {
            Strategy::MinMemory => "min-memory",
            Strategy::Balanced => "balanced",
            Strategy::MinTime => "min-time",
        }
    }

    /// The strategy of a [`Self::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The strategy's settings: the one table of them.
    pub const fn settings(self) -> StrategySettings {
        match self {
            Strategy::MinMemory => StrategySettings {
                block_size: MIN_MEMORY_BLOCK_SIZE,
                honour_dedicated_preference_from: 64 << 20,
                keep_empty_blocks: 0,
                recycle_bytes: 0,
                idle_release_ms: 1_000,
            },
            Strategy::Balanced => StrategySettings {
                block_size: 256 << 20,
                honour_dedicated_preference_from: 64 << 20,
                keep_empty_blocks: 1,
                recycle_bytes: 512 << 20,
                idle_release_ms: 1_000,
            },
            Strategy::MinTime => StrategySettings {
                block_size: 256 << 20,
                honour_dedicated_preference_from: 64 << 20,
                keep_empty_blocks: 1,
                recycle_bytes: 1 << 30,
                idle_release_ms: 5_000,
            },
        }
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Strategy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::from_name(s)
            .ok_or_else(|| format!("unknown strategy {s:?}: one of balanced, min-memory, min-time"))
    }
}

/// The largest default block of [`Strategy::MinMemory`], and the largest
/// new block of [`Strategy::Balanced`] on a heap under pressure: 16 MiB
/// blocks without kept memory committed 1.125x the live bytes (geomean)
/// on the H200's corpus, at most the best peer's on 39 of 39 traces.
pub const MIN_MEMORY_BLOCK_SIZE: u64 = 16 << 20;

/// A strategy's settings ([`Strategy::settings`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StrategySettings {
    /// [`crate::AllocatorDesc::block_size`].
    pub block_size: u64,
    /// [`crate::AllocatorDesc::honour_dedicated_preference_from`].
    pub honour_dedicated_preference_from: u64,
    /// [`crate::AllocatorDesc::keep_empty_blocks`].
    pub keep_empty_blocks: u32,
    /// [`crate::AllocatorDesc::recycle_bytes`].
    pub recycle_bytes: u64,
    /// Kept memory (empty blocks, recycled memory of its own) goes back to
    /// the driver once the live bytes of a memory type have fallen below
    /// half their recent high-water mark and this many milliseconds have
    /// passed, at the first allocation or free after them, whether or not
    /// the application calls [`crate::Allocator::begin_frame`].
    pub idle_release_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn each_strategy_has_its_settings() {
        let min = Strategy::MinMemory.settings();
        assert_eq!(
            (min.block_size, min.keep_empty_blocks, min.recycle_bytes),
            (16 * MIB, 0, 0)
        );
        let balanced = Strategy::Balanced.settings();
        assert_eq!(
            (
                balanced.block_size,
                balanced.keep_empty_blocks,
                balanced.recycle_bytes,
                balanced.idle_release_ms
            ),
            (256 * MIB, 1, 512 * MIB, 1_000)
        );
        let time = Strategy::MinTime.settings();
        assert_eq!(
            (time.block_size, time.recycle_bytes, time.idle_release_ms),
            (256 * MIB, 1024 * MIB, 5_000)
        );
        // The memory end never keeps more than the time end.
        for s in Strategy::ALL {
            let x = s.settings();
            assert!(x.block_size >= min.block_size && x.block_size <= time.block_size);
            assert!(x.recycle_bytes <= time.recycle_bytes);
        }
        assert_eq!(Strategy::default(), Strategy::Balanced);
    }

    #[test]
    fn names_round_trip() {
        for s in Strategy::ALL {
            assert_eq!(s.name().parse::<Strategy>(), Ok(s));
            assert_eq!(s.to_string(), s.name());
        }
        assert!("fast".parse::<Strategy>().is_err());
    }
}
