//! What the allocator targets keep of a live allocation, and the resource
//! kind an input byte picks.

use vkalloc::{Allocation, MappedAllocation, ResourceKind};

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
