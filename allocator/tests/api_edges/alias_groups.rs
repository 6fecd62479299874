//! Alias groups: members living together respect `bufferImageGranularity`,
//! a group is never made movable, bad members get typed errors.

use std::sync::Arc;

use vkalloc::alias::AliasRequirement;
use vkalloc::device::MemoryDevice;
use vkalloc::sim::{tables, SimDevice};
use vkalloc::{
    AllocationOptions, Allocator, AllocatorDesc, DefragAlgorithm, DefragDesc, Error, MemoryUsage,
    PassInterval, ResourceKind,
};

use super::{assert_clean_end, desc};

// ---------------------------------------------------------------------------
// Alias groups.
// ---------------------------------------------------------------------------

/// Members whose lifetimes overlap are live on the GPU at once; a buffer
/// and an optimal-tiling image among them must not share a
/// `bufferImageGranularity` page (1024 bytes on this table), which Vulkan
/// counts as aliasing. (`alias::pack` placed them by bytes only until
/// 2026-12-03.)
#[test]
fn alias_members_live_together_respect_buffer_image_granularity() {
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = Allocator::new(Arc::clone(&sim), AllocatorDesc::default()).unwrap();
    let granularity = sim.limits().buffer_image_granularity;
    assert_eq!(granularity, 1024);
    let members = [
        AliasRequirement {
            size: 4100,
            alignment: 256,
            memory_type_bits: u32::MAX,
            kind: ResourceKind::OptimalImage,
            lifetime: PassInterval::new(0, 2),
            tag: "image",
        },
        AliasRequirement {
            size: 100,
            alignment: 16,
            memory_type_bits: u32::MAX,
            kind: ResourceKind::Buffer,
            lifetime: PassInterval::new(1, 3),
            tag: "buffer",
        },
    ];
    let group = allocator
        .allocate_alias_group(&members, AllocationOptions::usage(MemoryUsage::GpuOnly))
        .unwrap();
    let placed = group.members();
    let base = group.allocation().offset();
    let (image, buffer) = (&placed[0], &placed[1]);
    assert!(image.lifetime.overlaps(&buffer.lifetime));
    let image_last_page = (base + image.offset + image.size - 1) / granularity;
    let buffer_first_page = (base + buffer.offset) / granularity;
    let overlap_bytes =
        image.offset < buffer.offset + buffer.size && buffer.offset < image.offset + image.size;
    assert!(!overlap_bytes);
    assert!(
        image_last_page < buffer_first_page,
        "image [{}, {}) and buffer [{}, {}) are live together on one {granularity}-byte page",
        image.offset,
        image.offset + image.size,
        buffer.offset,
        buffer.offset + buffer.size
    );
    allocator.free_alias_group(group).unwrap();
}

/// An alias group's allocation never moves (its members' resources are
/// bound into it): `set_movable(.., true)` is refused with a typed error,
/// and a full defragmentation pass over a block holding it and scattered
/// movable allocations plans no move of it. (Before 2026-12-03 the call
/// unpinned it and the planner, which looked only at the pin, could hand
/// out moves that `commit` then refused.)
#[test]
fn an_alias_group_is_never_made_movable() {
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = Allocator::new(Arc::clone(&sim), AllocatorDesc::default()).unwrap();
    let member = |first, last| AliasRequirement {
        size: 64 * 1024,
        alignment: 256,
        memory_type_bits: u32::MAX,
        kind: ResourceKind::OptimalImage,
        lifetime: PassInterval::new(first, last),
        tag: "pass target",
    };
    let mut scattered = Vec::new();
    for _ in 0..16 {
        scattered.push(
            allocator
                .allocate(&desc(64 * 1024, MemoryUsage::GpuOnly))
                .unwrap(),
        );
    }
    let group = allocator
        .allocate_alias_group(
            &[member(0, 1), member(2, 3)],
            AllocationOptions::usage(MemoryUsage::GpuOnly),
        )
        .unwrap();
    assert!(matches!(
        allocator.set_movable(group.allocation(), true),
        Err(Error::InvalidAlias(_))
    ));
    assert!(!allocator.is_movable(group.allocation()));
    allocator.set_movable(group.allocation(), false).unwrap();
    // Holes around it, then a full pass: everything else may move.
    let keep: Vec<_> = scattered
        .into_iter()
        .enumerate()
        .filter_map(|(i, a)| {
            if i % 2 == 0 {
                allocator.free(a).unwrap();
                None
            } else {
                Some(a)
            }
        })
        .collect();
    let mut defrag = allocator
        .begin_defragmentation(&DefragDesc::default().with_algorithm(DefragAlgorithm::Full))
        .unwrap();
    let moves = defrag.begin_pass(&allocator).unwrap();
    assert!(
        moves.iter().all(|m| m.id() != group.allocation().id()),
        "a move of the alias group's allocation was planned"
    );
    drop(moves);
    defrag.end_pass(&allocator).unwrap();
    defrag.end(&allocator).unwrap();
    for a in keep {
        allocator.free(a).unwrap();
    }
    allocator.free_alias_group(group).unwrap();
    assert_clean_end(&sim, allocator);
}

/// Odd alias inputs get typed errors, never a panic.
#[test]
fn alias_groups_refuse_bad_members_with_typed_errors() {
    let sim = Arc::new(SimDevice::new(tables::nvidia_discrete()));
    let allocator = Allocator::new(Arc::clone(&sim), AllocatorDesc::default()).unwrap();
    let m = |size, alignment, first, last| AliasRequirement {
        size,
        alignment,
        memory_type_bits: u32::MAX,
        kind: ResourceKind::Buffer,
        lifetime: PassInterval::new(first, last),
        tag: "",
    };
    let options = AllocationOptions::usage(MemoryUsage::GpuOnly);
    let cases: Vec<Vec<AliasRequirement<'_>>> = vec![
        vec![m(u64::MAX, 1, 0, 0), m(1, 1, 0, 0)],
        vec![
            m(u64::MAX - 5, 1 << 63, 0, 1),
            m(u64::MAX - 5, 1 << 63, 1, 2),
        ],
        vec![
            m(1 << 63, 1 << 63, 0, u32::MAX),
            m(1 << 63, 1 << 63, u32::MAX, u32::MAX),
        ],
        vec![m(8, 3, 0, 0)],
        vec![m(8, 1 << 63, 0, 0), m(8, 1 << 63, 0, 0)],
    ];
    for members in cases {
        match allocator.allocate_alias_group(&members, options) {
            Ok(group) => {
                let placed = group.members();
                for (i, a) in placed.iter().enumerate() {
                    assert_eq!((group.allocation().offset() + a.offset) % a.alignment, 0);
                    assert!(a.offset + a.size <= group.allocation().size());
                    for b in &placed[i + 1..] {
                        if a.lifetime.overlaps(&b.lifetime) {
                            assert!(a.offset + a.size <= b.offset || b.offset + b.size <= a.offset);
                        }
                    }
                }
                allocator.free_alias_group(group).unwrap();
            }
            Err(
                Error::TooLarge { .. }
                | Error::InvalidAlignment(_)
                | Error::OutOfDeviceMemory { .. }
                | Error::NoCompatibleMemoryType { .. },
            ) => {}
            Err(e) => panic!("{members:?}: {e:?}"),
        }
    }
    allocator.validate().unwrap();
    let report = allocator.destroy();
    assert!(report.is_empty(), "{report}");
    assert_eq!(sim.live_objects(), 0);
}
