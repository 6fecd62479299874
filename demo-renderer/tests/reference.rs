//! The gallery at 320x180 with 256-texel materials on lavapipe, compared to the
//! committed references `tests/reference/gallery_320x180.png` (RGBA8/RG8 textures)
//! and `tests/reference/gallery_320x180_bc.png` (BC7/BC5 textures).
//!
//! Tolerance: the mean absolute error per channel is at most 2.0 (of 255), and at
//! most 1% of pixels differ by more than 24 in any channel. On a mismatch the
//! actual frame and a difference image (error × 8) are written next to the run's
//! output under target/ and their paths printed. Set `DEMO_BLESS=1` to replace
//! the reference with the actual frame.

use crate::common;

use std::path::Path;

const MEAN_LIMIT: f64 = 2.0;
const PIXEL_LIMIT: u8 = 24;
const PIXEL_FRACTION_LIMIT: f64 = 0.01;

#[test]
fn gallery_matches_reference() {
    check("gallery_320x180", "rgba8");
}

#[test]
fn gallery_bc_matches_reference() {
    check("gallery_320x180_bc", "bc");
}

fn check(name: &str, textures: &str) {
    let out = common::scratch(name);
    let run = common::run_ok(
        common::demo()
            .args([
                "--frames",
                "1",
                "--size",
                "320x180",
                "--texture-size",
                "256",
            ])
            .args(["--textures", textures])
            .args(common::out_args(&out)),
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("0 validation errors"), "{stdout}");
    let report: serde_json::Value = common::report(&out);
    assert_eq!(report["frames"].as_array().unwrap().len(), 1);
    assert!(
        report["allocator"]["total"]["allocation_count"]
            .as_u64()
            .unwrap()
            > 0
    );

    let actual = image::open(out.join("frame_0000.png")).unwrap().to_rgba8();
    let reference_path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/reference/{name}.png"));
    if std::env::var_os("DEMO_BLESS").is_some() {
        actual.save(&reference_path).unwrap();
        return;
    }
    let reference = image::open(&reference_path)
        .unwrap_or_else(|e| {
            panic!(
                "cannot read {}: {e} (DEMO_BLESS=1 writes it)",
                reference_path.display()
            )
        })
        .to_rgba8();
    assert_eq!(actual.dimensions(), reference.dimensions());
    let mut sum = 0u64;
    let mut bad = 0usize;
    let mut diff = image::RgbaImage::new(actual.width(), actual.height());
    for ((a, r), d) in actual
        .pixels()
        .zip(reference.pixels())
        .zip(diff.pixels_mut())
    {
        let mut worst = 0u8;
        for c in 0..3 {
            let e = a[c].abs_diff(r[c]);
            sum += e as u64;
            worst = worst.max(e);
            d[c] = e.saturating_mul(8);
        }
        d[3] = 255;
        if worst > PIXEL_LIMIT {
            bad += 1;
        }
    }
    let pixels = (actual.width() * actual.height()) as f64;
    let mean = sum as f64 / (pixels * 3.0);
    let fraction = bad as f64 / pixels;
    if mean > MEAN_LIMIT || fraction > PIXEL_FRACTION_LIMIT {
        let actual_path = out.join("actual.png");
        let diff_path = out.join("diff.png");
        actual.save(&actual_path).unwrap();
        diff.save(&diff_path).unwrap();
        panic!(
            "frame differs from the reference: mean abs error {mean:.3} (limit {MEAN_LIMIT}), {:.3}% of pixels off by more than {PIXEL_LIMIT} (limit {:.1}%)\nactual: {}\ndiff:   {}",
            fraction * 100.0,
            PIXEL_FRACTION_LIMIT * 100.0,
            actual_path.display(),
            diff_path.display()
        );
    }
}
