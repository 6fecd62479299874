//! External memory on a real device with validation on (lavapipe offers
//! `VK_KHR_external_memory_fd`): an allocation in an exportable pool is
//! exported as a file descriptor, imported as a dedicated allocation, and
//! the bytes written through the first mapping are read through the second.

use gpu_tests::pattern;
use gpu_tests::GpuContext;
use vkalloc::vk::ImportDesc;
use vkalloc::{
    AllocationDesc, AllocationOptions, Error, ExternalMemoryHandleTypes, MemoryUsage, PoolDesc,
    ResourceKind,
};

const SIZE: u64 = 64 << 10;

#[test]
fn exported_memory_is_imported_with_its_contents() {
    let ctx = GpuContext::for_test();
    assert!(
        ctx.info().external_memory_fd,
        "the driver lacks VK_KHR_external_memory_fd (lavapipe has it)"
    );
    let allocator = ctx.allocator();
    let pool = allocator
        .create_pool(&PoolDesc {
            usage: MemoryUsage::Upload,
            block_size: 1 << 20,
            export: ExternalMemoryHandleTypes::OPAQUE_FD,
            ..PoolDesc::new("shared with another API")
        })
        .expect("exportable pool");
    let desc = |options| AllocationDesc {
        size: SIZE,
        alignment: 256,
        kind: ResourceKind::Buffer,
        options,
        ..AllocationDesc::default()
    };
    // A first allocation, so the exported one is not at offset 0.
    let first = allocator
        .allocate(&desc(
            AllocationOptions::usage(MemoryUsage::Upload).in_pool(pool),
        ))
        .expect("first");
    let mut shared = allocator
        .allocate_mapped(&desc(
            AllocationOptions::usage(MemoryUsage::Upload)
                .in_pool(pool)
                .tagged("exported"),
        ))
        .expect("exported allocation");
    pattern::fill(7, shared.as_mut_slice());
    allocator.flush(&shared, 0, SIZE).expect("flush");

    let exported = allocator.export_fd(shared.allocation()).expect("export");
    assert_eq!(exported.offset, shared.allocation().offset());
    assert!(exported.offset > 0 && exported.size >= exported.offset + SIZE);

    // SAFETY: the descriptor was exported with OPAQUE_FD from a memory
    // object of `exported.size` bytes and this memory type, on this device.
    let imported = unsafe {
        allocator.import_fd(
            std::os::fd::AsFd::as_fd(&exported.fd),
            &ImportDesc {
                size: exported.size,
                memory_type: exported.memory_type,
                kind: ResourceKind::Buffer,
                tag: "imported",
            },
        )
    }
    .expect("import");
    assert!(imported.is_dedicated());
    assert_ne!(
        imported.memory(),
        shared.allocation().memory(),
        "a memory object of its own"
    );
    drop(exported); // the caller's descriptor; the driver keeps its duplicate
    let imported = imported.into_mapped().expect("host-visible");
    allocator
        .invalidate(&imported, 0, imported.allocation().size())
        .expect("invalidate");
    let start = shared.allocation().offset() as usize;
    let seen = &imported.as_slice()[start..start + SIZE as usize];
    pattern::check(7, seen).expect("the imported memory holds the exported bytes");

    // Memory of the default blocks was not allocated exportable.
    let plain = allocator
        .allocate(&desc(AllocationOptions::usage(MemoryUsage::Upload)))
        .expect("plain");
    assert!(matches!(
        allocator.export_fd(&plain),
        Err(Error::NotEnabled(_))
    ));

    for a in [
        plain,
        first,
        imported.into_allocation(),
        shared.into_allocation(),
    ] {
        allocator.free(a).expect("free");
    }
    allocator.destroy_pool(pool).expect("empty pool");
    ctx.finish();
}
