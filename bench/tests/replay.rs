//! Replays small standard traces through vkalloc, VMA and gpu-allocator on
//! the first Vulkan device (lavapipe on CI) and checks correctness: every
//! allocation succeeds, is aligned and as large as asked, no two live
//! allocations overlap within one `VkDeviceMemory`, and every allocator gives
//! all its device memory back when dropped.
//!
//! This test fails (it does not skip) when no Vulkan device can be found:
//! install Mesa's lavapipe (`mesa-vulkan-drivers`) where there is no GPU.

use bench::contenders::CONTENDERS;
use bench::replay::{calibrate_timer_overhead, Prepared};
use bench::runner::{run_contender, RunConfig};
use bench::trace::{generate, Scale, Trace, DEFAULT_SEED};
use bench::vkdev::VulkanContext;

fn replay_checked(ctx: &VulkanContext, name: &str) {
    let generated = generate(name, DEFAULT_SEED, Scale::Small).expect("standard trace");
    // Through the file format and back, so the replayed trace is what a file holds.
    let mut text = Vec::new();
    generated.write(&mut text).expect("write trace");
    let trace = Trace::read(&text[..]).expect("read trace");
    assert_eq!(trace, generated);

    // Tags on, so the naming paths are exercised too.
    let prepared = Prepared::new(&trace, ctx.all_types_mask(), true).expect("prepare");
    let overhead = calibrate_timer_overhead();
    let config = RunConfig {
        reps: 1,
        check: true,
        tags: true,
        ..RunConfig::default()
    };
    for allocator in CONTENDERS {
        let (stats, leaked) = run_contender(allocator, ctx, &prepared, overhead, &config)
            .unwrap_or_else(|e| panic!("{allocator}: {e}"));
        assert_eq!(
            stats.failures, 0,
            "{name}/{allocator}: failed allocations, first: {:?}",
            stats.first_failure
        );
        assert!(
            stats.check_errors.is_empty(),
            "{name}/{allocator}: {:#?}",
            stats.check_errors
        );
        assert_eq!(leaked, 0, "{name}/{allocator} leaked device memory");
        assert_eq!(stats.peak_live_bytes, prepared.summary.peak_live_bytes);
        assert!(
            stats.peak_committed_bytes >= stats.peak_live_bytes,
            "{name}/{allocator}: committed {} < live {}",
            stats.peak_committed_bytes,
            stats.peak_live_bytes
        );
        assert!(stats.driver.allocate_calls > 0);
    }
}

#[test]
fn small_traces_replay_correctly_through_all_three() {
    let ctx = VulkanContext::new(None, true).unwrap_or_else(|e| {
        panic!("this test needs a Vulkan device (Mesa's lavapipe will do): {e}")
    });
    eprintln!("device: {} ({})", ctx.info.name, ctx.info.driver);
    // many-small is left out: gpu-allocator's linear scan makes it take
    // seconds; the benchmark covers it.
    for name in [
        "renderer-mix",
        "streaming-churn",
        "frame-transient",
        "fragmentation",
    ] {
        replay_checked(&ctx, name);
    }
}
