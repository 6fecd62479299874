//! Heap maps of a fixed dump (`tests/data/fixed_dump.json`) and of a diff
//! against `tests/data/fixed_dump_new.json`, compared to committed references
//! in `tests/reference/`; bad dumps give errors or empty maps, never a panic.
//!
//! Tolerance as in the demo's reference test: the mean absolute error per
//! channel is at most 2.0 (of 255) and at most 1% of pixels differ by more
//! than 24. `HEAPMAP_BLESS=1` replaces the references with the actual images.

use std::path::{Path, PathBuf};

use vkalloc_heapmap::{read_dump, render_diff, render_heap_map, DumpError};

const WIDTH: u32 = 900;

fn data(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn compare(name: &str, actual: &image::RgbaImage) {
    let reference_path: PathBuf =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/reference/{name}.png"));
    if std::env::var_os("HEAPMAP_BLESS").is_some() {
        actual.save(&reference_path).unwrap();
        return;
    }
    let reference = image::open(&reference_path)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (HEAPMAP_BLESS=1 writes it)",
                reference_path.display()
            )
        })
        .to_rgba8();
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("heapmap");
    std::fs::create_dir_all(&out).unwrap();
    let actual_path = out.join(format!("{name}_actual.png"));
    assert_eq!(
        actual.dimensions(),
        reference.dimensions(),
        "size differs; actual saved as {}",
        {
            actual.save(&actual_path).unwrap();
            actual_path.display()
        }
    );
    let (mut sum, mut bad) = (0u64, 0usize);
    for (a, r) in actual.pixels().zip(reference.pixels()) {
        let worst = (0..3).map(|c| a[c].abs_diff(r[c])).max().unwrap();
        sum += (0..3).map(|c| a[c].abs_diff(r[c]) as u64).sum::<u64>();
        if worst > 24 {
            bad += 1;
        }
    }
    let pixels = (actual.width() * actual.height()) as f64;
    let mean = sum as f64 / (pixels * 3.0);
    let fraction = bad as f64 / pixels;
    if mean > 2.0 || fraction > 0.01 {
        actual.save(&actual_path).unwrap();
        panic!(
            "{name} differs from the reference: mean {mean:.3}, {:.3}% of pixels off; actual: {}",
            fraction * 100.0,
            actual_path.display()
        );
    }
}

#[test]
fn heap_map_of_a_fixed_dump_matches_reference() {
    let snapshot = read_dump(&data("fixed_dump.json")).unwrap();
    assert_eq!(snapshot.lists.len(), 3);
    let image = render_heap_map(&snapshot, WIDTH);
    assert_eq!(image.width(), WIDTH);
    compare("fixed_dump", &image);
}

#[test]
fn diff_of_two_dumps_matches_reference() {
    let old = read_dump(&data("fixed_dump.json")).unwrap();
    let new = read_dump(&data("fixed_dump_new.json")).unwrap();
    let diff = vkalloc_heapmap::Diff::between(&old, &new);
    assert_eq!(diff.added.len(), 5, "{:?}", diff.added);
    assert_eq!(diff.freed.len(), 3);
    compare("fixed_dump_diff", &render_diff(&old, &new, WIDTH));
}

#[test]
fn bad_dumps_are_clear_errors_and_empty_dumps_empty_maps() {
    let good = data("fixed_dump.json");
    // Truncated anywhere: an error, never a panic.
    for cut in [0, 1, 100, good.len() / 2, good.len() - 2] {
        assert!(read_dump(&good[..cut]).is_err(), "cut at {cut}");
    }
    // Another schema version.
    let v1 = good.replacen("\"schema_version\": 2", "\"schema_version\": 1", 1);
    let e = read_dump(&v1).unwrap_err();
    assert!(matches!(e, DumpError::Version { found: 1, .. }), "{e}");
    assert!(e.to_string().contains("version 1"), "{e}");
    // Hand-edited: a size that is not a number, a range past its block.
    let edited = good.replacen("\"size\": 67108864", "\"size\": \"big\"", 1);
    assert!(matches!(read_dump(&edited), Err(DumpError::Schema(_))));
    let edited = good.replacen("\"size\": 67108864", "\"size\": 1024", 1);
    assert!(matches!(
        read_dump(&edited),
        Err(DumpError::Inconsistent(_))
    ));
    // Zero blocks: an empty map.
    let mut value: serde_json::Value = serde_json::from_str(&good).unwrap();
    value["lists"] = serde_json::json!([]);
    let empty = read_dump(&value.to_string()).unwrap();
    let image = render_heap_map(&empty, 300);
    assert_eq!(image.width(), 300);
}

#[test]
fn a_live_allocator_dump_reads_back() {
    use vkalloc::sim::{tables, SimDevice};
    use vkalloc::{AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, MemoryUsage};
    let allocator =
        Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default()).unwrap();
    let a = allocator
        .allocate(&AllocationDesc {
            size: 1 << 16,
            alignment: 256,
            options: AllocationOptions::usage(MemoryUsage::GpuOnly).tagged("vertices"),
            ..AllocationDesc::default()
        })
        .unwrap();
    let snapshot = read_dump(&allocator.to_json()).unwrap();
    assert_eq!(snapshot.allocation_count(), 1);
    let tag = snapshot.blocks().next().unwrap().allocations[0].tag.clone();
    assert_eq!(tag.as_deref(), Some("vertices"));
    allocator.free(a).unwrap();
}
