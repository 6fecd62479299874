//! Aliasing: several resources placed on one allocation, on the same or
//! overlapping bytes, with their lifetimes declared as intervals of a
//! frame's passes.
//!
//! [`crate::Allocator::allocate_alias_group`] packs the members: two members
//! whose lifetimes overlap never share a byte; members with disjoint
//! lifetimes may. The allocation takes the AND of the members' memory type
//! bits and their largest alignment, and is sized to the packing's end (for
//! members with pairwise disjoint lifetimes: the largest member). The
//! members and their lifetimes show in the JSON dump, and
//! [`crate::stats::DetailedStatistics::aliased_bytes_saved`] sums what
//! aliasing saved.
//!
//! Contents do not survive a switch from one member to another: the first
//! use of an image after a switch is a barrier from `VK_IMAGE_LAYOUT_UNDEFINED`.

#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

use crate::allocation::Allocation;
use crate::desc::ResourceKind;
use crate::error::Error;

/// The passes of a frame during which a member's contents are live, both
/// ends included.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PassInterval {
    /// The first pass that writes or reads the member.
    pub first: u32,
    /// The last pass that reads it.
    pub last: u32,
}

impl PassInterval {
    /// Passes `first..=last`.
    pub fn new(first: u32, last: u32) -> Self {
        Self { first, last }
    }

    /// Whether the two intervals share a pass.
    pub fn overlaps(&self, other: &PassInterval) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

/// One resource to place in an alias group: its memory requirements and
/// lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AliasRequirement<'a> {
    /// Bytes (`VkMemoryRequirements::size`), non-zero.
    pub size: u64,
    /// Alignment (`VkMemoryRequirements::alignment`), a power of two or 0.
    pub alignment: u64,
    /// Allowed memory types (`VkMemoryRequirements::memoryTypeBits`).
    pub memory_type_bits: u32,
    /// The resource's kind.
    pub kind: ResourceKind,
    /// When its contents are live.
    pub lifetime: PassInterval,
    /// A name for the dump.
    pub tag: &'a str,
}

/// A member of an alias group, as placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AliasMember {
    /// Offset from the group allocation's start.
    pub offset: u64,
    /// Bytes.
    pub size: u64,
    /// Alignment asked for.
    pub alignment: u64,
    /// Allowed memory types.
    pub memory_type_bits: u32,
    /// The resource's kind.
    pub kind: ResourceKind,
    /// When its contents are live.
    pub lifetime: PassInterval,
}

/// A member as the dump shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AliasInfo {
    /// Offset from the allocation's start.
    pub offset: u64,
    /// Bytes.
    pub size: u64,
    /// `buffer`, `linear_image`, `optimal_image` or `unknown`.
    pub kind: String,
    /// The first pass of its lifetime.
    pub first_pass: u32,
    /// The last pass of its lifetime.
    pub last_pass: u32,
    /// Its tag, if any.
    pub tag: Option<String>,
}

/// One allocation holding several aliased resources.
///
/// Made by [`crate::Allocator::allocate_alias_group`], given back with
/// [`crate::Allocator::free_alias_group`] once every resource bound to it
/// is destroyed. Defragmentation never moves it.
#[derive(Debug)]
#[must_use = "an alias group dropped without `free_alias_group` leaks its memory"]
pub struct AliasGroup {
    pub(crate) allocation: Allocation,
    pub(crate) members: Vec<AliasMember>,
}

impl AliasGroup {
    /// The shared allocation.
    pub fn allocation(&self) -> &Allocation {
        &self.allocation
    }

    /// The members, in the order they were asked for.
    pub fn members(&self) -> &[AliasMember] {
        &self.members
    }

    /// Member `index`.
    pub fn member(&self, index: usize) -> Option<&AliasMember> {
        self.members.get(index)
    }

    /// The members' sizes summed, minus the allocation's size (as asked: the
    /// statistics' [`crate::stats::DetailedStatistics::aliased_bytes_saved`]
    /// subtracts the range the allocation holds, padding and debug margins
    /// included).
    pub fn bytes_saved(&self) -> u64 {
        let sum = self
            .members
            .iter()
            .fold(0u64, |s, m| s.saturating_add(m.size));
        sum.saturating_sub(self.allocation.size)
    }
}

/// The packing of a group: each member's offset, and the group's size,
/// alignment, memory type bits and kind.
#[derive(Debug)]
pub(crate) struct Packing {
    pub members: Vec<AliasMember>,
    pub size: u64,
    pub alignment: u64,
    pub memory_type_bits: u32,
    pub kind: ResourceKind,
}

/// Packs the members: largest first, each at the lowest aligned offset
/// that shares no byte with a placed member whose lifetime overlaps its own,
/// and, where their kinds conflict (a buffer or linear image beside an
/// optimal image, [`crate::range::RangeKind::conflicts_with`]), no page of
/// `granularity` bytes (`bufferImageGranularity`) either: Vulkan counts a
/// shared page as aliasing. A group with such members is aligned to the
/// granularity, so its pages are the memory's.
///
/// # Errors
/// [`Error::InvalidAlias`] for no member, a zero size, a bad alignment or a
/// lifetime that ends before it starts; [`Error::NoCompatibleMemoryType`]
/// when no memory type suits every member; [`Error::TooLarge`] on overflow.
pub(crate) fn pack(
    requirements: &[AliasRequirement<'_>],
    granularity: u64,
) -> Result<Packing, Error> {
    if requirements.is_empty() {
        return Err(Error::InvalidAlias("an alias group needs a member"));
    }
    let mut bits = u32::MAX;
    let mut alignment = 1u64;
    for r in requirements {
        if r.size == 0 {
            return Err(Error::InvalidAlias("an alias member has zero size"));
        }
        if r.alignment > 1 && !r.alignment.is_power_of_two() {
            return Err(Error::InvalidAlignment(r.alignment));
        }
        if r.lifetime.last < r.lifetime.first {
            return Err(Error::InvalidAlias(
                "an alias member's lifetime ends before it starts",
            ));
        }
        bits &= r.memory_type_bits;
        alignment = alignment.max(r.alignment.max(1));
    }
    if bits == 0 {
        return Err(Error::NoCompatibleMemoryType {
            memory_type_bits: 0,
            required: crate::device::MemoryPropertyFlags::NONE,
        });
    }
    let first_kind = requirements[0].kind;
    let kind = if requirements.iter().all(|r| r.kind == first_kind) {
        first_kind
    } else {
        ResourceKind::Unknown
    };
    let page = crate::range::checked_granularity(granularity);
    let conflict = |a: &AliasRequirement<'_>, b: &AliasRequirement<'_>| {
        page > 1 && a.kind.range_kind().conflicts_with(b.kind.range_kind())
    };
    // Members that may not share a page with another live beside them: the
    // group starts on a page, so offsets' pages are the memory's.
    let paged = requirements.iter().enumerate().any(|(i, a)| {
        requirements[i + 1..]
            .iter()
            .any(|b| a.lifetime.overlaps(&b.lifetime) && conflict(a, b))
    });
    if paged {
        alignment = alignment.max(page);
    }
    let mut order: Vec<usize> = (0..requirements.len()).collect();
    order.sort_by(|&a, &b| requirements[b].size.cmp(&requirements[a].size));
    let mut offsets = vec![0u64; requirements.len()];
    let mut placed: Vec<usize> = Vec::new();
    let overflow = || Error::TooLarge {
        size: u64::MAX,
        max: u64::MAX,
    };
    for &i in &order {
        let r = &requirements[i];
        let align = r.alignment.max(1);
        // A rival of a conflicting kind takes its whole pages.
        let rivals: Vec<(u64, u64)> = placed
            .iter()
            .filter(|&&j| requirements[j].lifetime.overlaps(&r.lifetime))
            .map(|&j| {
                let (s, e) = (offsets[j], offsets[j] + requirements[j].size);
                if conflict(r, &requirements[j]) {
                    let end = e.checked_next_multiple_of(page).ok_or_else(overflow)?;
                    Ok((s - s % page, end))
                } else {
                    Ok((s, e))
                }
            })
            .collect::<Result<_, Error>>()?;
        let mut candidates: Vec<u64> = vec![0];
        candidates.extend(rivals.iter().map(|&(_, end)| end));
        let mut best: Option<u64> = None;
        for c in candidates {
            let start = c.checked_next_multiple_of(align).ok_or_else(overflow)?;
            let end = start.checked_add(r.size).ok_or_else(overflow)?;
            let free = rivals.iter().all(|&(s, e)| end <= s || e <= start);
            if free && best.is_none_or(|b| start < b) {
                best = Some(start);
            }
        }
        // The highest rival end always fits, so `best` is set.
        offsets[i] = best.ok_or_else(overflow)?;
        placed.push(i);
    }
    let size = requirements
        .iter()
        .zip(&offsets)
        .map(|(r, &o)| o + r.size)
        .max()
        .unwrap_or(0);
    Ok(Packing {
        members: requirements
            .iter()
            .zip(offsets)
            .map(|(r, offset)| AliasMember {
                offset,
                size: r.size,
                alignment: r.alignment.max(1),
                memory_type_bits: r.memory_type_bits,
                kind: r.kind,
                lifetime: r.lifetime,
            })
            .collect(),
        size,
        alignment,
        memory_type_bits: bits,
        kind,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(size: u64, first: u32, last: u32) -> AliasRequirement<'static> {
        AliasRequirement {
            size,
            alignment: 256,
            memory_type_bits: 0b111,
            kind: ResourceKind::OptimalImage,
            lifetime: PassInterval::new(first, last),
            tag: "",
        }
    }

    #[test]
    fn disjoint_lifetimes_share_bytes_overlapping_ones_do_not() {
        let p = pack(&[req(1000, 0, 1), req(4000, 2, 3), req(500, 1, 2)], 1).unwrap();
        // The 4000-byte member goes first at 0; the 1000-byte one (passes
        // 0-1) shares it; the 500-byte one overlaps both in time.
        assert_eq!(p.members[1].offset, 0);
        assert_eq!(p.members[0].offset, 0);
        assert!(p.members[2].offset >= 4000);
        for (i, a) in p.members.iter().enumerate() {
            for b in &p.members[i + 1..] {
                if a.lifetime.overlaps(&b.lifetime) {
                    assert!(a.offset + a.size <= b.offset || b.offset + b.size <= a.offset);
                }
            }
            assert_eq!(a.offset % a.alignment, 0);
        }
        assert_eq!(p.size, p.members[2].offset + 500);
    }

    #[test]
    fn a_buffer_and_an_image_live_together_take_pages_of_their_own() {
        let image = req(4100, 0, 2);
        let mut buffer = req(100, 1, 3);
        buffer.kind = ResourceKind::Buffer;
        let p = pack(&[image, buffer], 1024).unwrap();
        // The image's last page is [4096, 5120): the buffer starts past it,
        // and the group starts on a page.
        assert_eq!(p.members[0].offset, 0);
        assert_eq!(p.members[1].offset, 5120);
        assert_eq!(p.alignment, 1024);
        // Not live together, or of one kind: bytes apart suffice.
        let mut later = buffer;
        later.lifetime = PassInterval::new(3, 4);
        assert_eq!(pack(&[image, later], 1024).unwrap().members[1].offset, 0);
        let images = pack(&[image, req(100, 1, 3)], 1024).unwrap();
        assert_eq!(images.members[1].offset, 4352);
        assert_eq!(images.alignment, 256);
    }

    #[test]
    fn bad_members_are_refused() {
        assert!(matches!(pack(&[], 1), Err(Error::InvalidAlias(_))));
        assert!(matches!(
            pack(&[req(0, 0, 0)], 1),
            Err(Error::InvalidAlias(_))
        ));
        assert!(matches!(
            pack(&[req(8, 3, 2)], 1),
            Err(Error::InvalidAlias(_))
        ));
        let mut a = req(8, 0, 0);
        a.memory_type_bits = 0b100;
        let mut b = req(8, 1, 1);
        b.memory_type_bits = 0b011;
        assert!(matches!(
            pack(&[a, b], 1),
            Err(Error::NoCompatibleMemoryType { .. })
        ));
    }
}
