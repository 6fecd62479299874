//! A texture's resident mip range changes at run time: the image is refilled from
//! per-level reads, the material's descriptor set rewritten, the old image freed,
//! and the texture pool's bytes follow — with the validation layer silent.

use crate::common;

use demo_renderer::gpu::{Context, ContextDesc, GpuMemory};
use demo_renderer::materials::{ensure_baked, TextureSet};
use material_baker::Encoding;

#[test]
fn resident_range_changes() {
    if std::env::var_os("VK_DRIVER_FILES").is_none()
        && std::env::var_os("VK_ICD_FILENAMES").is_none()
    {
        std::env::set_var("VK_DRIVER_FILES", common::LAVAPIPE_ICD);
    }
    let desc = ContextDesc {
        device_index: None,
        validation: true,
        bindless: true,
        surface_extensions: vec![],
        upload_queue: Default::default(),
        upload_split: false,
    };
    let ctx = Context::new(&desc, &|_, _, _, _| true, &mut |_, _| Ok(()))
        .expect("a Vulkan device (lavapipe in CI)");
    let mem = GpuMemory::new(&ctx).unwrap();
    let (files, _) = ensure_baked(&common::cache(), 64, 1, Encoding::Uncompressed, 2).unwrap();
    let mut set = TextureSet::load(&ctx, &mem, &files, 64 << 20, 0).unwrap();
    assert_eq!(set.base_level, 0);
    let full = set.resident_bytes();
    let albedo_full = set.textures[0].bytes;
    assert_eq!(
        albedo_full,
        (0..7).map(|l| (64u64 >> l).pow(2) * 4).sum::<u64>()
    );

    set.set_resident(&ctx, &mem, 0, 2).unwrap();
    assert_eq!(set.textures[0].base_level, 2);
    assert_eq!(
        set.textures[0].bytes,
        (2..7).map(|l| (64u64 >> l).pow(2) * 4).sum::<u64>()
    );
    assert!(set.resident_bytes() < full);
    set.set_resident(&ctx, &mem, 0, 0).unwrap();
    assert_eq!(set.resident_bytes(), full);

    ctx.wait_idle();
    set.destroy(&ctx, &mem);
    drop(mem);
    let messages = ctx.messages.clone();
    drop(ctx);
    assert_eq!(
        messages.errors.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "validation errors"
    );
}
