//! Teardown on a real device with validation: Vulkan frees nothing with the
//! device, so every memory object must be freed before `vkDestroyDevice`
//! (`VUID-vkDestroyDevice-device-00378`), leaked mappings' blocks included.

use gpu_tests::GpuContext;
use vkalloc::{AllocationDesc, AllocationOptions, MemoryUsage, PoolDesc};

/// A mapped allocation and a pool's mapped allocation leaked (never freed)
/// and an engine tearing down: `destroy_all_memory` names both leaks and
/// frees every block, so destroying the device reports nothing.
#[test]
fn leaked_mappings_are_freed_before_the_device() {
    let ctx = GpuContext::for_test();
    let allocator = ctx.allocator();
    let mut staging = allocator
        .allocate_mapped(&AllocationDesc {
            size: 4096,
            options: AllocationOptions::usage(MemoryUsage::Upload).tagged("leaked staging"),
            ..AllocationDesc::default()
        })
        .expect("mapped allocation");
    staging.as_mut_slice().fill(0x5a);
    let pool = allocator
        .create_pool(&PoolDesc {
            usage: MemoryUsage::Upload,
            block_size: 1 << 20,
            ..PoolDesc::new("uploads")
        })
        .expect("pool");
    let in_pool = allocator
        .allocate_mapped(&AllocationDesc {
            size: 1024,
            options: AllocationOptions::usage(MemoryUsage::Upload)
                .in_pool(pool)
                .tagged("leaked upload"),
            ..AllocationDesc::default()
        })
        .expect("mapped allocation in a pool");
    // Leaked: the engine lost track of them.
    drop(staging);
    drop(in_pool);
    let report = ctx.finish_with(|allocator| {
        // SAFETY: no mapping of this allocator is used after this point.
        unsafe { allocator.destroy_all_memory() }
    });
    let mut tags: Vec<_> = report.leaks.iter().filter_map(|l| l.tag.clone()).collect();
    tags.sort();
    assert_eq!(tags, ["leaked staging", "leaked upload"]);
    assert_eq!(report.blocks_kept, 0, "every block freed");
}
