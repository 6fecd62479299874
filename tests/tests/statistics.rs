//! Statistics and the JSON dump after a real workload: counts match what is
//! alive, the dump parses, and nothing is left once everything is freed.

use ash::vk;
use gpu_tests::resources::ResourceSet;
use gpu_tests::GpuContext;
use vkalloc::{AllocationOptions, DedicatedPolicy, MemoryUsage, PoolDesc};

const TAG: &str = "json-probe-tag";

/// Whether `needle` appears as a string anywhere in `value`.
fn contains_string(value: &serde_json::Value, needle: &str) -> bool {
    match value {
        serde_json::Value::String(s) => s.contains(needle),
        serde_json::Value::Array(items) => items.iter().any(|v| contains_string(v, needle)),
        serde_json::Value::Object(map) => map.values().any(|v| contains_string(v, needle)),
        _ => false,
    }
}

#[test]
fn statistics_and_json_follow_the_workload() {
    let ctx = GpuContext::for_test();
    let allocator = ctx.allocator();
    let pool = allocator
        .create_pool(&PoolDesc {
            usage: MemoryUsage::GpuOnly,
            block_size: 1 << 20,
            ..PoolDesc::new("json pool")
        })
        .expect("creating a pool failed");
    let tagged = |usage| AllocationOptions::usage(usage).tagged(TAG);
    let mut set = ResourceSet::new(&ctx, 77);
    for size in [100u64, 5000, 70_000, 300_000] {
        set.add_buffer("gpu", size, &tagged(MemoryUsage::GpuOnly), false)
            .unwrap();
        set.add_buffer("upload", size, &tagged(MemoryUsage::Upload), true)
            .unwrap();
        set.add_buffer(
            "pooled",
            size,
            &tagged(MemoryUsage::GpuOnly).in_pool(pool),
            false,
        )
        .unwrap();
    }
    set.add_optimal_image(
        "image",
        vk::Extent2D {
            width: 32,
            height: 32,
        },
        &tagged(MemoryUsage::GpuOnly),
    )
    .unwrap();
    set.add_buffer(
        "dedicated",
        65_536,
        &AllocationOptions {
            dedicated: DedicatedPolicy::Always,
            ..tagged(MemoryUsage::GpuOnly)
        },
        false,
    )
    .unwrap();
    set.write_all();
    set.check_all();

    let live = set.subjects().len() as u64;
    let live_bytes: u64 = set
        .subjects()
        .iter()
        .map(|s| s.held.allocation().size())
        .sum();
    let stats = allocator.statistics();
    assert_eq!(
        stats.total.allocation_count,
        live,
        "{}",
        allocator.summary()
    );
    assert_eq!(
        stats.total.allocation_bytes,
        live_bytes,
        "{}",
        allocator.summary()
    );
    assert!(stats.total.block_bytes >= live_bytes);
    assert!(stats.total.dedicated_count >= 1);
    let heap_count: u64 = stats.heaps.iter().map(|h| h.usage.allocation_count).sum();
    let type_count: u64 = stats.types.iter().map(|t| t.usage.allocation_count).sum();
    assert_eq!(heap_count, live, "per-heap counts don't add up");
    assert_eq!(type_count, live, "per-type counts don't add up");
    let pool_stats = stats
        .pools
        .iter()
        .find(|p| p.name == "json pool")
        .expect("pool missing");
    assert_eq!(pool_stats.usage.allocation_count, 4);

    let detailed = allocator.detailed_statistics();
    let listed: usize = detailed
        .lists
        .iter()
        .flat_map(|l| &l.blocks)
        .map(|b| b.allocations.len())
        .sum();
    assert_eq!(
        listed as u64, live,
        "detailed statistics list {listed} allocations, {live} are alive"
    );

    let json = allocator.to_json();
    let parsed: serde_json::Value = serde_json::from_str(&json)
        .unwrap_or_else(|e| panic!("to_json() is not JSON: {e}\n{json}"));
    assert!(parsed.is_object(), "the JSON dump is not an object: {json}");
    assert!(
        contains_string(&parsed, TAG),
        "the JSON dump does not show the allocations' tag"
    );
    assert!(
        contains_string(&parsed, "json pool"),
        "the JSON dump does not name the pool"
    );
    let summary = allocator.summary();
    assert!(!summary.trim().is_empty(), "empty text summary");

    set.destroy_all();
    allocator
        .destroy_pool(pool)
        .expect("destroying the emptied pool failed");
    ctx.assert_no_live_allocations();
    let after: serde_json::Value =
        serde_json::from_str(&allocator.to_json()).expect("to_json() after freeing is not JSON");
    assert!(
        !contains_string(&after, TAG),
        "freed allocations still appear in the JSON dump"
    );
    ctx.finish();
}
