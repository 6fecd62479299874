//! External memory: pools whose memory other APIs or processes can import
//! (`VkExportMemoryAllocateInfo`), and memory made elsewhere imported as a
//! dedicated allocation.
//!
//! A pool with [`crate::PoolDesc::export`] set allocates every block and
//! dedicated allocation exportable with those handle types; with feature
//! `ash`, `Allocator::export_fd` hands out a file descriptor of an
//! allocation's memory object (with the offset of the allocation in it) and
//! `Allocator::import_fd` makes a dedicated allocation of memory exported
//! elsewhere. Resources bound to exportable or imported memory are created
//! with `VkExternalMemoryBufferCreateInfo` / `VkExternalMemoryImageCreateInfo`
//! naming the same handle types (Vulkan's rule; the caller chains it).
//!
//! Memory another API or process has imported must stay where it is: place
//! allocations of an exported pool with [`crate::AllocationOptions::pinned`]
//! so no defragmentation pass moves them.
//!
//! Handle types need their extensions enabled on the device
//! ([`crate::device::DeviceLimits::external_memory`]); a pool asking for
//! others is refused with [`crate::Error::NotEnabled`].

#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

/// Bits of `VkExternalMemoryHandleTypeFlags`, with Vulkan's values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ExternalMemoryHandleTypes(pub u32);

impl ExternalMemoryHandleTypes {
    /// No handle type: memory that is not exported.
    pub const NONE: Self = Self(0);
    /// `VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT` (`VK_KHR_external_memory_fd`).
    pub const OPAQUE_FD: Self = Self(0x1);
    /// `VK_EXTERNAL_MEMORY_HANDLE_TYPE_DMA_BUF_BIT_EXT` (`VK_EXT_external_memory_dma_buf`).
    pub const DMA_BUF: Self = Self(0x200);

    /// Whether every bit of `other` is set in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl std::ops::BitOr for ExternalMemoryHandleTypes {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}
