//! The heap overlay drawn headless on lavapipe (`--overlay`): one 320x180 frame
//! of the gallery with the overlay, compared to `tests/reference/overlay_320x180.png`
//! with the gallery reference test's tolerances (mean absolute error at most 2.0,
//! at most 1% of pixels off by more than 24); the validation layer stays silent;
//! the report has the overlay's GPU pass and CPU time; `heap.json` reads back as
//! a heap map. `DEMO_BLESS=1` replaces the reference.

use crate::common;

use std::path::Path;

#[test]
fn overlay_matches_reference_and_writes_heap_json() {
    let out = common::scratch("overlay");
    let run = common::run_ok(
        common::demo()
            .args([
                "--frames",
                "1",
                "--size",
                "320x180",
                "--texture-size",
                "256",
                "--textures",
                "rgba8",
                "--overlay",
            ])
            .args(common::out_args(&out)),
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("0 validation errors"), "{stdout}");
    let report: serde_json::Value = common::report(&out);
    let frame = &report["frames"][0];
    assert!(frame["overlay_cpu_ms"].as_f64().is_some(), "{frame}");
    if report["device"]["timestamps"].as_bool() == Some(true) {
        assert!(frame["gpu_ms"]["overlay"].as_f64().is_some(), "{frame}");
    }
    // heap.json is a schema-2 dump that the heap-map tool reads.
    let dump = std::fs::read_to_string(out.join("heap.json")).expect("heap.json written");
    let snapshot = vkalloc_heapmap::read_dump(&dump).expect("heap.json reads back");
    let tags: Vec<_> = snapshot
        .blocks()
        .flat_map(|b| b.allocations.iter().filter_map(|a| a.tag.clone()))
        .collect();
    assert!(
        tags.iter().any(|t| &**t == "overlay font atlas"),
        "the overlay's own memory is in the dump: {tags:?}"
    );

    let actual = image::open(out.join("frame_0000.png")).unwrap().to_rgba8();
    let reference_path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/overlay_320x180.png");
    if std::env::var_os("DEMO_BLESS").is_some() {
        actual.save(&reference_path).unwrap();
        return;
    }
    let reference = image::open(&reference_path)
        .unwrap_or_else(|e| panic!("{}: {e} (DEMO_BLESS=1 writes it)", reference_path.display()))
        .to_rgba8();
    assert_eq!(actual.dimensions(), reference.dimensions());
    let (mut sum, mut bad) = (0u64, 0usize);
    for (a, r) in actual.pixels().zip(reference.pixels()) {
        let errors = (0..3).map(|c| a[c].abs_diff(r[c]));
        let worst = errors.clone().max().unwrap();
        sum += errors.map(u64::from).sum::<u64>();
        if worst > 24 {
            bad += 1;
        }
    }
    let pixels = (actual.width() * actual.height()) as f64;
    let (mean, fraction) = (sum as f64 / (pixels * 3.0), bad as f64 / pixels);
    if mean > 2.0 || fraction > 0.01 {
        let path = out.join("actual.png");
        actual.save(&path).unwrap();
        panic!(
            "overlay frame differs from the reference: mean {mean:.3}, {:.3}% of pixels off; actual: {}",
            fraction * 100.0,
            path.display()
        );
    }
}
