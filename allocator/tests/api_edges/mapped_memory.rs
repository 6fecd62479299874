//! Mapped memory at its edges: mappings that outlive an allocator owning its
//! device, flush and invalidate ranges of dedicated, recycled and pooled
//! non-coherent memory, and corruption checks while the caller holds slices.
//!
//! The two `corruption_check_while_*` tests pass at run time either way: the
//! defect they showed (`check_corruption` making a `&mut` over the bytes a
//! caller's slice held) is an aliasing violation that only Miri reports;
//! with the margins read alone, Miri (Stacked Borrows) is clean:
//!
//! ```text
//! cargo +nightly miri test -p vkalloc --features sim --test sim -- corruption_check_while
//! ```

use std::sync::Arc;

use vkalloc::sim::{tables, SimDevice};
use vkalloc::{Allocator, AllocatorDesc, DedicatedPolicy, MemoryUsage, PoolDesc};

use super::{assert_clean_end, desc, in_child, MIB};

// ---------------------------------------------------------------------------
// Mappings that outlive their allocator when the allocator owns its device.
// ---------------------------------------------------------------------------

/// `soundness.rs::a_leaked_mapping_outlives_the_allocator_safely` keeps an
/// `Arc<SimDevice>` alive outside the allocator. Here the allocator owns the
/// device (the crate's own quick-start does this): dropping the allocator
/// drops the device, and with it the host memory behind every "kept" mapped
/// block. A safe `write` through the leaked mapping then touches freed
/// memory.
#[test]
fn leaked_dedicated_mapping_survives_dropping_an_allocator_that_owns_its_device() {
    in_child(
        "leaked_dedicated_mapping_survives_dropping_an_allocator_that_owns_its_device",
        || {
            let allocator = Allocator::new(
                SimDevice::new(tables::nvidia_discrete()),
                AllocatorDesc::default(),
            )
            .unwrap();
            let mut d = desc(64 * MIB, MemoryUsage::Upload);
            d.options.dedicated = DedicatedPolicy::Always;
            let mut leaked = allocator.allocate_mapped(&d).unwrap();
            drop(allocator);
            // Safe code only: the block was "kept" for this mapping.
            leaked.write(0, &[0xAB; 4096]).unwrap();
            leaked.write(64 * MIB - 4096, &[0xCD; 4096]).unwrap();
            let mut out = [0u8; 16];
            leaked.read(0, &mut out).unwrap();
            assert_eq!(out, [0xAB; 16]);
            drop(leaked);
        },
    );
}

/// The same with a small allocation in a shared block, via `destroy`.
#[test]
fn leaked_shared_mapping_survives_destroying_an_allocator_that_owns_its_device() {
    in_child(
        "leaked_shared_mapping_survives_destroying_an_allocator_that_owns_its_device",
        || {
            let allocator = Allocator::new(
                SimDevice::new(tables::nvidia_discrete()),
                AllocatorDesc::default(),
            )
            .unwrap();
            let mut leaked = allocator
                .allocate_mapped(&desc(4096, MemoryUsage::Upload))
                .unwrap();
            let report = allocator.destroy();
            assert_eq!(report.blocks_kept, 1);
            for _ in 0..64 {
                // Churn the host heap so the freed backing gets reused.
                let v = vec![0x11u8; 8 * MIB as usize];
                std::hint::black_box(&v);
            }
            leaked.write(0, &[0x5A; 4096]).unwrap();
            let mut out = [0u8; 4096];
            leaked.read(0, &mut out).unwrap();
            assert_eq!(out, [0x5A; 4096]);
            drop(leaked);
        },
    );
}

// ---------------------------------------------------------------------------
// Flush / invalidate ranges of dedicated, recycled and pooled memory.
// ---------------------------------------------------------------------------

/// The mobile table with its cached type made non-coherent (as in
/// `soundness.rs`).
fn non_coherent_table() -> vkalloc::sim::GpuTable {
    let json = tables::mobile_tiler().to_json().replace(
        "DEVICE_LOCAL|HOST_VISIBLE|HOST_COHERENT|HOST_CACHED",
        "DEVICE_LOCAL|HOST_VISIBLE|HOST_CACHED",
    );
    vkalloc::sim::GpuTable::from_json(&json).unwrap()
}

/// Every flush and invalidate range the allocator builds is inside its
/// memory, atom-aligned, or reaching the memory's end (the simulated device
/// records any other as a violation): dedicated memory of odd sizes, memory
/// recycled for a smaller allocation, a pool's dedicated allocations, and
/// ranges at every edge.
#[test]
fn flush_ranges_stay_inside_dedicated_and_recycled_memory() {
    let sim = Arc::new(SimDevice::new(non_coherent_table()));
    let allocator = Allocator::new(
        Arc::clone(&sim),
        AllocatorDesc::default().with_debug_margin(16),
    )
    .unwrap();
    let pool = allocator
        .create_pool(&PoolDesc {
            memory_type: Some(1),
            block_size: 1000, // not a multiple of the 64-byte atom
            max_blocks: 2,
            ..PoolDesc::new("odd")
        })
        .unwrap();
    let sizes = [1u64, 63, 65, 1000, 4097, 3 * MIB + 1, 9 * MIB - 3];
    let mut made = 0;
    for round in 0..3 {
        let mut live = Vec::new();
        for &size in &sizes {
            for (dedicated, pool) in [
                (DedicatedPolicy::Always, None),
                (DedicatedPolicy::Auto, None),
                (DedicatedPolicy::Never, None),
                (DedicatedPolicy::Auto, Some(pool)),
            ] {
                let mut d = desc(size, MemoryUsage::Readback);
                d.memory_type_bits = 1 << 1;
                d.options.dedicated = dedicated;
                d.options.pool = pool;
                let mut m = match allocator.allocate_mapped(&d) {
                    Ok(m) => m,
                    Err(e) => {
                        eprintln!("size {size} {dedicated:?} pool {}: {e:?}", pool.is_some());
                        continue;
                    }
                };
                made += 1;
                let len = m.size();
                m.write(len - 1, &[1]).unwrap();
                for (o, n) in [
                    (0, len),
                    (len - 1, 1),
                    (0, 1),
                    (len / 2, len - len / 2),
                    (len, 0),
                ] {
                    allocator.flush(&m, o, n).unwrap();
                    allocator.invalidate(&m, o, n).unwrap();
                }
                assert!(m.write(len, &[1]).is_err());
                assert!(allocator.flush(&m, len, 1).is_err());
                live.push(m);
            }
        }
        assert_eq!(
            sim.violations(),
            0,
            "round {round}: {:?}",
            sim.violation_log()
        );
        // Free in an order that feeds the recycle bin, then reuse it with
        // slightly smaller requests next round.
        for m in live {
            allocator.free(m).unwrap();
        }
        allocator.validate().unwrap();
    }
    assert!(made >= 60, "{made} allocations made");
    assert_eq!(allocator.statistics().corruptions_detected, 0);
    allocator.destroy_pool(pool).unwrap();
    assert_clean_end(&sim, allocator);
}

// ---------------------------------------------------------------------------
// Corruption checks while the caller holds slices (run under Miri).
// ---------------------------------------------------------------------------

/// A small allocator with margins and one live mapped allocation in a
/// 4 KiB pool block (small enough for Miri).
fn margin_pool_allocation() -> (
    Allocator<SimDevice>,
    vkalloc::PoolId,
    vkalloc::MappedAllocation,
) {
    let allocator = Allocator::new(
        SimDevice::new(tables::lavapipe()),
        AllocatorDesc::default().with_debug_margin(16),
    )
    .unwrap();
    let pool = allocator
        .create_pool(&PoolDesc {
            usage: MemoryUsage::Upload,
            block_size: 4096,
            max_blocks: 1,
            ..PoolDesc::new("small")
        })
        .unwrap();
    let mut d = desc(64, MemoryUsage::Upload);
    d.options.pool = Some(pool);
    let m = allocator.allocate_mapped(&d).unwrap();
    (allocator, pool, m)
}

/// `check_corruption` builds a `&mut [u8]` over each live allocation's
/// whole range (corruption.rs `range_bytes`), including the bytes the caller
/// may be borrowing through `as_mut_slice`: two live `&mut` to the same
/// bytes. Nothing observable at run time; Miri (`cargo +nightly miri test -p
/// vkalloc --features sim --test sim -- corruption_check_while`) reports the
/// aliasing violation when the caller's slice is used after the check.
#[test]
fn corruption_check_while_a_mutable_slice_is_live() {
    let (allocator, pool, mut m) = margin_pool_allocation();
    let bytes = m.as_mut_slice();
    bytes[0] = 1;
    assert_eq!(allocator.check_corruption(), 0);
    bytes[1] = 2; // the caller's `&mut` is still live
    assert_eq!(m.as_slice()[..2], [1, 2]);
    allocator.free(m).unwrap();
    allocator.destroy_pool(pool).unwrap();
}

/// The same with a shared slice: the check's `&mut` invalidates it.
#[test]
fn corruption_check_while_a_shared_slice_is_live() {
    let (allocator, pool, mut m) = margin_pool_allocation();
    m.write(0, &[7]).unwrap();
    let bytes = m.as_slice();
    assert_eq!(allocator.check_corruption(), 0);
    assert_eq!(bytes[0], 7);
    allocator.free(m).unwrap();
    allocator.destroy_pool(pool).unwrap();
}
