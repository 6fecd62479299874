//! Findings of the fuzz targets in `fuzz/` (see RELIABILITY.md), each as
//! the smallest reproducer found, kept as a regression test now that it is
//! fixed.
//!
//! Each test asserts the behaviour that is right: no panic, and the error
//! that says why where the request can't be met.
//!
//! A seventh finding, "safe `reset_pool` leaves mapped handles that alias
//! later allocations", was fixed by making `reset_pool` an `unsafe fn`: the
//! reproducer no longer compiles in safe code, and its contract forbids
//! touching those handles.

use vkalloc::device::MemoryPropertyFlags;
use vkalloc::sim::{tables, SimDevice};
use vkalloc::{
    AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, DedicatedPolicy, Error,
    MemoryUsage, ResourceKind,
};

fn upload(size: u64, dedicated: DedicatedPolicy) -> AllocationDesc<'static> {
    AllocationDesc {
        size,
        alignment: 1,
        kind: ResourceKind::Buffer,
        options: AllocationOptions {
            dedicated,
            ..AllocationOptions::usage(MemoryUsage::Upload)
        },
        ..AllocationDesc::default()
    }
}

/// Allocates `desc`, which can't be met: the allocator must refuse it with an
/// error `expected` accepts (a panic was the finding), and stay valid with
/// nothing live.
fn refused(
    allocator: &Allocator<SimDevice>,
    desc: &AllocationDesc<'_>,
    expected: impl Fn(&Error) -> bool,
) {
    match allocator.allocate(desc) {
        Ok(a) => panic!(
            "{} bytes allocated where the request can't be met",
            a.size()
        ),
        Err(e) => assert!(expected(&e), "unexpected error {e:?}"),
    }
    allocator.validate().unwrap();
    assert_eq!(allocator.statistics().total.allocation_count, 0);
}

fn too_large(e: &Error) -> bool {
    matches!(e, Error::TooLarge { .. })
}

/// `AllocatorDesc::debug_margin` is not checked: a margin near `u64::MAX`
/// makes `range_request` (allocator.rs) overflow computing
/// `lead(margin, alignment) + margin` for any shared host-visible
/// allocation ("attempt to add with overflow" with overflow checks on;
/// without them the sum wraps and the range asked for is smaller than the
/// margins placed in it; what that leads to was not followed further).
#[test]
fn huge_debug_margin_does_not_overflow() {
    let desc = AllocatorDesc::default().with_debug_margin(u64::MAX / 2 + 1);
    let allocator = Allocator::new(SimDevice::new(tables::lavapipe()), desc)
        .expect("the margin is taken; what it can't hold is refused per request");
    refused(&allocator, &upload(4096, DedicatedPolicy::Auto), too_large);
}

/// A size near `u64::MAX` that must share a block (`DedicatedPolicy::Never`)
/// in host-visible memory with corruption margins on overflows in
/// `range_request` adding the margins to the size, instead of failing with
/// an error (`TooLarge` / out of memory).
#[test]
fn size_near_max_with_margins_does_not_overflow() {
    let desc = AllocatorDesc::default().with_debug_margin(16);
    let allocator = Allocator::new(SimDevice::new(tables::lavapipe()), desc).unwrap();
    refused(
        &allocator,
        &upload(u64::MAX - 8, DedicatedPolicy::Never),
        too_large,
    );
}

/// The same in non-coherent memory without margins: rounding the size up to
/// whole `nonCoherentAtomSize` atoms (`size.div_ceil(atom) * atom` in
/// `range_request`) overflows.
#[test]
fn size_near_max_in_non_coherent_memory_does_not_overflow() {
    let mut table = tables::lavapipe();
    for ty in &mut table.memory_properties.types {
        ty.flags = MemoryPropertyFlags(ty.flags.0 & !MemoryPropertyFlags::HOST_COHERENT.0);
    }
    let allocator = Allocator::new(SimDevice::new(table), AllocatorDesc::default()).unwrap();
    refused(
        &allocator,
        &upload(u64::MAX - 8, DedicatedPolicy::Never),
        too_large,
    );
}

/// `AllocatorDesc::block_size` is not checked: above `2^63` (with a heap
/// larger than 1 GiB and a large `maxMemoryAllocationSize`), growing a new
/// block for a request of more than `2^62` bytes doubles the candidate size
/// past `u64::MAX` in `BlockList::next_block_sizes` (block_list.rs, "attempt
/// to multiply with overflow"). Refused now: larger than the type's largest
/// allocation, or than its heap.
#[test]
fn huge_block_size_does_not_overflow() {
    let desc = AllocatorDesc::default().with_block_size(u64::MAX - 41);
    for table in tables::all_tables() {
        let allocator = Allocator::new(SimDevice::new(table), desc).unwrap();
        let mut request = upload((1 << 63) + 1, DedicatedPolicy::Never);
        request.options.usage = MemoryUsage::GpuOnly;
        refused(&allocator, &request, |e| {
            matches!(e, Error::TooLarge { .. } | Error::OutOfDeviceMemory { .. })
        });
    }
}

/// Freeing a handle that `reset_pool` freed already is documented as a
/// no-op, but with corruption margins on, `free` checks the margins (reading
/// the block's mapped memory) before it looks at the pool's reset epoch or
/// whether the pool still exists. Once the block is gone (the pool
/// destroyed, or its empty block trimmed) that read is a use after free in
/// safe code: AddressSanitizer reports a heap-use-after-free in
/// `corruption::intact` from `Allocator::free`; without it, this test dies of
/// SIGSEGV (the 1 MiB block's memory was unmapped).
#[test]
fn freeing_a_handle_freed_by_reset_pool_reads_no_freed_memory() {
    use vkalloc::{Error, LinearMode, PoolAlgorithm, PoolDesc};
    let desc = AllocatorDesc::default().with_debug_margin(16);
    let allocator = Allocator::new(SimDevice::new(tables::lavapipe()), desc).unwrap();
    let pool = allocator
        .create_pool(&PoolDesc {
            usage: MemoryUsage::Upload,
            block_size: 1 << 20,
            max_blocks: 1,
            algorithm: PoolAlgorithm::Linear(LinearMode::Ring),
            ..PoolDesc::new("frame")
        })
        .unwrap();
    let mut request = upload(256, DedicatedPolicy::Auto);
    request.options.pool = Some(pool);
    let stale = allocator.allocate(&request).unwrap();
    // SAFETY: `stale` is only freed after the reset, never read or written.
    unsafe { allocator.reset_pool(pool) }.unwrap();
    allocator.destroy_pool(pool).unwrap();
    match allocator.free(stale) {
        Ok(()) => {}
        Err(refused) => assert!(
            matches!(refused.error(), Error::UnknownPool(_)),
            "{refused:?}"
        ),
    }
}

/// `AllocatorDesc::block_size` of 0 is not refused: on a heap larger than
/// 1 GiB the memory type's block size becomes 0, and a pool that asks for
/// the type's default block size (`PoolDesc::block_size` 0) calls
/// `vkAllocateMemory` with `allocationSize` 0, which Vulkan forbids (the
/// simulated device records `Violation::BadAllocateInfo`).
#[test]
fn zero_block_size_allocates_no_empty_memory() {
    use std::sync::Arc;
    use vkalloc::PoolDesc;
    let sim = Arc::new(SimDevice::new(tables::nvidia_h200()));
    let desc = AllocatorDesc::default().with_block_size(0);
    let allocator = Allocator::new(Arc::clone(&sim), desc)
        .expect("block size 0 is taken: a type's blocks are at least 1 MiB");
    let pool = allocator
        .create_pool(&PoolDesc {
            usage: MemoryUsage::GpuOnly,
            block_size: 0,
            min_blocks: 1,
            max_blocks: 1,
            ..PoolDesc::new("default-sized")
        })
        .expect("a pool of the type's default block size");
    allocator.destroy_pool(pool).unwrap();
    assert_eq!(sim.violations(), 0, "{:?}", sim.violation_log());
}

// ---- Findings of `fuzz/fuzz_targets/allocator_defrag.rs` ----------------------

/// Fragmentation for defragmentation to work on: 32 GpuOnly buffers of
/// 16 KiB in 1 MiB blocks on lavapipe, every second one freed; the 16 left.
fn defrag_fixture() -> (
    vkalloc::Allocator<SimDevice>,
    std::collections::HashMap<vkalloc::AllocationId, vkalloc::Allocation>,
) {
    let allocator = Allocator::new(
        SimDevice::new(tables::lavapipe()),
        AllocatorDesc::default().with_block_size(1 << 20),
    )
    .unwrap();
    let desc = AllocationDesc {
        size: 16 << 10,
        alignment: 256,
        kind: ResourceKind::Buffer,
        options: AllocationOptions {
            dedicated: DedicatedPolicy::Never,
            ..AllocationOptions::usage(MemoryUsage::GpuOnly)
        },
        ..AllocationDesc::default()
    };
    let all: Vec<_> = (0..32)
        .map(|_| allocator.allocate(&desc).unwrap())
        .collect();
    let mut live = std::collections::HashMap::new();
    for (i, a) in all.into_iter().enumerate() {
        if i % 2 == 0 {
            allocator.free(a).unwrap();
        } else {
            live.insert(a.id(), a);
        }
    }
    (allocator, live)
}

/// `set_movable(false)` on a move's source while its pass is open ("pins
/// take effect at the next `begin_pass`; a move already handed out stays
/// valid") is lost when the move is committed: the allocation handed back
/// (same id) is movable again, and the next pass moves it.
///
/// Fuzz input (`allocator_defrag`, after 11,515 executions): an `Op::Pass`
/// whose moves each get `PinThenCommit` (`set_movable(false)` on the source,
/// then the commit), frees, then a second `Op::Pass` of the session: its
/// `begin_pass` handed out a move of an allocation pinned above ("pinned
/// allocation 77 moved").
///
/// Cause: the destination's record was made when the pass was planned
/// (`BlockVector::reserve_move`), and the source's `pinned`, set after that,
/// was never carried to it. Fixed: `Defragmentation::commit` carries it.
#[test]
fn a_pin_set_during_a_pass_survives_the_commit() {
    use vkalloc::{DefragAlgorithm, DefragDesc};
    let (allocator, mut live) = defrag_fixture();
    let full = DefragDesc::default().with_algorithm(DefragAlgorithm::Full);
    let mut defrag = allocator.begin_defragmentation(&full).unwrap();
    let mut moves = defrag.begin_pass(&allocator).unwrap();
    let mv = moves.pop().expect("the fixture is fragmented");
    drop(moves);
    let old = live.remove(&mv.id()).unwrap();
    // Pinned while its move is out (the GPU started using it, say); the
    // move is still committed, as the documentation allows.
    allocator.set_movable(&old, false).unwrap();
    let new = defrag.commit(&allocator, mv, old).unwrap();
    defrag.end_pass(&allocator).unwrap();
    assert!(
        !allocator.is_movable(&new),
        "the pin on allocation {:?} was lost by its move",
        new.id()
    );
    let id = new.id();
    live.insert(id, new);
    let moves = defrag.begin_pass(&allocator).unwrap();
    assert!(
        moves.iter().all(|m| m.id() != id),
        "pinned allocation {id:?} moved again"
    );
    drop(moves);
    defrag.end(&allocator).unwrap();
    for (_, a) in live {
        allocator.free(a).unwrap();
    }
    allocator.validate().unwrap();
}

/// `DetailedStatistics::aliased_bytes_saved` and `AliasGroup::bytes_saved()`
/// differed where a group's range is larger than its size (debug margins,
/// padding), against the statistics' documentation ("minus the sizes of the
/// allocations they share"). Resolved by documenting what each counts: the
/// statistics subtract the range the group holds in its block (what aliasing
/// actually saves there), `bytes_saved` the size asked; they agree without
/// margins or padding.
///
/// Fuzz input: an alias group in host-visible memory with debug margins on,
/// then `DetailedStatistics`: "aliased bytes saved: left 0, right 31".
#[test]
fn aliased_bytes_saved_subtracts_the_range_each_group_holds() {
    use vkalloc::{AliasRequirement, PassInterval};
    let member = |pass| AliasRequirement {
        size: 4096,
        alignment: 256,
        memory_type_bits: u32::MAX,
        kind: ResourceKind::Buffer,
        lifetime: PassInterval::new(pass, pass),
        tag: "",
    };
    for margin in [0, 16] {
        let desc = AllocatorDesc::default().with_debug_margin(margin);
        let allocator = Allocator::new(SimDevice::new(tables::lavapipe()), desc).unwrap();
        let group = allocator
            .allocate_alias_group(
                &[member(0), member(1)],
                AllocationOptions::usage(MemoryUsage::Upload),
            )
            .unwrap();
        assert_eq!(group.bytes_saved(), 4096);
        let details = allocator.detailed_statistics();
        let range: u64 = details
            .lists
            .iter()
            .flat_map(|l| &l.blocks)
            .flat_map(|b| &b.allocations)
            .filter(|a| !a.aliases.is_empty())
            .map(|a| a.size)
            .sum();
        assert_eq!(
            details.aliased_bytes_saved,
            2 * 4096 - range,
            "margin {margin}"
        );
        if margin == 0 {
            assert_eq!(details.aliased_bytes_saved, group.bytes_saved());
        } else {
            assert!(range > 4096 && details.aliased_bytes_saved < group.bytes_saved());
        }
        allocator.free_alias_group(group).unwrap();
    }
}
