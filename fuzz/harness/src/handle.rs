//! What the allocator targets keep of a live allocation, and the resource
//! kind and runs' threshold an input byte picks.

use std::collections::BTreeMap;

use vkalloc::{Allocation, AllocatorDesc, MappedAllocation, ResourceKind};

/// A live allocation, as the API handed it out: plain or mapped.
pub enum Handle {
    Plain(Allocation),
    Mapped(MappedAllocation),
}

impl Handle {
    /// `a` wrapped as `mapped` says (mapped again if asked).
    pub fn wrap(a: Allocation, mapped: bool) -> Handle {
        if mapped {
            Handle::Mapped(a.into_mapped().expect("a mapped allocation maps again"))
        } else {
            Handle::Plain(a)
        }
    }

    pub fn allocation(&self) -> &Allocation {
        match self {
            Handle::Plain(a) => a,
            Handle::Mapped(m) => m.allocation(),
        }
    }

    pub fn into_allocation(self) -> Allocation {
        match self {
            Handle::Plain(a) => a,
            Handle::Mapped(m) => m.into_allocation(),
        }
    }

    pub fn is_mapped(&self) -> bool {
        matches!(self, Handle::Mapped(_))
    }

    /// Writes both ends of mapped memory through its slice (so that a
    /// mapping past the memory shows under the sanitizer) and notes them in
    /// `written`; nothing for a plain allocation.
    pub fn touch_ends(&mut self, written: &mut BTreeMap<u64, u8>) {
        if let Handle::Mapped(m) = self {
            let size = m.size();
            let slice = m.as_mut_slice();
            assert_eq!(slice.len() as u64, size);
            slice[0] = 0xA5;
            *slice.last_mut().expect("non-empty") = 0x5A;
            written.insert(0, 0xA5);
            written.insert(size - 1, 0x5A);
        }
    }

    /// Checks that every byte in `written` reads back (mapped memory only).
    pub fn check_written(&self, written: &BTreeMap<u64, u8>, what: &dyn std::fmt::Display) {
        if let Handle::Mapped(m) = self {
            let bytes = m.as_slice();
            for (&offset, &b) in written {
                assert_eq!(bytes[offset as usize], b, "byte {offset} of {what} changed");
            }
        }
    }
}

/// The `AllocatorDesc::small_runs_from` that `n` picks: runs of slots from the
/// first allocation, from a few, or at the default (which few inputs reach).
pub fn small_runs_from(n: u8) -> u32 {
    match n % 4 {
        0 => 0,
        1 => 3,
        2 => 40,
        _ => AllocatorDesc::default().small_runs_from,
    }
}

/// The resource kind `n` picks (all four).
pub fn kind(n: u8) -> ResourceKind {
    match n % 4 {
        0 => ResourceKind::Buffer,
        1 => ResourceKind::LinearImage,
        2 => ResourceKind::OptimalImage,
        _ => ResourceKind::Unknown,
    }
}
