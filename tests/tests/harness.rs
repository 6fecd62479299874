//! The harness itself: a validation error must fail the test that caused it,
//! and contexts must not see each other's messages.

use ash::vk;
use gpu_tests::GpuContext;

/// Creates and destroys a buffer with an empty usage mask: invalid usage
/// (VUID-VkBufferCreateInfo-usage-requiredbitmask) that the validation layer
/// reports and every driver tolerates.
fn provoke_validation_error(ctx: &GpuContext) {
    eprintln!("harness self-test: the next validation error is provoked on purpose");
    let info = vk::BufferCreateInfo::default()
        .size(64)
        .usage(vk::BufferUsageFlags::empty())
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    // SAFETY: the create info is well formed apart from the empty usage mask,
    // which drivers accept (it only limits what the buffer may be used for);
    // the buffer is never bound or used, and destroyed at once.
    unsafe {
        if let Ok(buffer) = ctx.device().create_buffer(&info, None) {
            ctx.device().destroy_buffer(buffer, None);
        }
    }
}

/// Whether this run must have validation (set by `cargo xtask test`); without
/// it, the checks below can't observe anything and only say so.
fn validation_or_explain(ctx: &GpuContext) -> bool {
    if ctx.info().validation {
        return true;
    }
    assert!(
        std::env::var("VKALLOC_REQUIRE_VALIDATION").as_deref() != Ok("1"),
        "validation required but the context runs without it"
    );
    eprintln!("validation layer absent: the harness self-test has nothing to observe");
    false
}

#[test]
fn a_clean_context_reports_nothing() {
    let ctx = GpuContext::for_test();
    ctx.one_shot(|_cmd| {});
    assert_eq!(ctx.validation_errors(), 0);
    ctx.finish();
}

#[test]
fn validation_errors_are_counted_per_context() {
    let ctx = GpuContext::for_test();
    if !validation_or_explain(&ctx) {
        ctx.finish();
        return;
    }
    let bystander = GpuContext::for_test();
    provoke_validation_error(&ctx);
    assert!(
        ctx.validation_errors() >= 1,
        "the validation error was not counted"
    );
    assert_eq!(
        bystander.validation_errors(),
        0,
        "another context's error leaked into this one"
    );
    assert!(ctx.take_validation_errors() >= 1);
    assert_eq!(ctx.validation_errors(), 0);
    ctx.finish();
    bystander.finish();
}

#[test]
fn finish_fails_the_test_after_a_validation_error() {
    let ctx = GpuContext::for_test();
    if !validation_or_explain(&ctx) {
        ctx.finish();
        return;
    }
    provoke_validation_error(&ctx);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || ctx.finish()));
    let panic =
        outcome.expect_err("finish() passed although the validation layer reported an error");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("validation layer reported"),
        "unexpected panic: {message}"
    );
}

#[test]
fn finish_fails_the_test_after_a_leak() {
    let ctx = GpuContext::for_test();
    let desc = vkalloc::AllocationDesc {
        size: 4096,
        alignment: 256,
        kind: vkalloc::ResourceKind::Buffer,
        options: vkalloc::AllocationOptions::usage(vkalloc::MemoryUsage::GpuOnly)
            .tagged("leaked on purpose"),
        ..vkalloc::AllocationDesc::default()
    };
    // Never freed: the allocator reclaims the memory when it is dropped.
    let _leaked = ctx.allocator().allocate(&desc).expect("allocation failed");
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || ctx.finish()));
    let panic = outcome.expect_err("finish() passed although an allocation was never freed");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("never freed") && message.contains("leaked on purpose"),
        "unexpected panic: {message}"
    );
}

/// Synchronization validation is on: two copies writing the same bytes with
/// no barrier between them are a write-after-write hazard, reported as an
/// error (`SYNC-HAZARD-WRITE-AFTER-WRITE`), so every other GPU test runs
/// with its barriers checked too.
#[test]
fn synchronization_hazards_are_reported() {
    let ctx = GpuContext::for_test();
    if !validation_or_explain(&ctx) {
        ctx.finish();
        return;
    }
    let src = gpu_tests::resources::upload_buffer(&ctx, 256, 1, "hazard source");
    let dst = gpu_tests::resources::readback_buffer(&ctx, 256);
    eprintln!("harness self-test: the next synchronization hazard is provoked on purpose");
    ctx.one_shot(|cmd| {
        // SAFETY: both buffers are live, bound and made with transfer usages;
        // the missing barrier between the copies is the point of the test.
        unsafe {
            ctx.cmd_copy_buffer(cmd, src.raw(), dst.raw(), 256);
            ctx.cmd_copy_buffer(cmd, src.raw(), dst.raw(), 256);
        }
    });
    assert!(
        ctx.take_validation_errors() >= 1,
        "a write-after-write hazard went unreported: synchronization validation is off"
    );
    let allocator = ctx.allocator();
    // SAFETY: the submission finished (one_shot waits).
    unsafe {
        allocator.destroy_buffer(src).expect("destroy");
        allocator.destroy_buffer(dst).expect("destroy");
    }
    ctx.finish();
}
