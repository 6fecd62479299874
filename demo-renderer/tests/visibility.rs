//! Visibility shading (`--shading visibility`) against forward shading on
//! lavapipe, with the validation layer on: the same frames, the same streaming
//! rules.
//!
//! Test size: 256x144 frames, 16 materials of 256-texel RGBA8/RG8 maps, 12 frames
//! of the camera path (the overview, close-ups, the first camera cut), every level
//! resident (streaming off, 64 MiB) so that both shadings sample the same images.

use crate::common;

use std::path::Path;

/// Visibility against forward shading, both sampling with the gradients
/// (anisotropy off): the visibility pass rebuilds each pixel's surface from its
/// triangle (homogeneous barycentrics, differences within the 2x2 quad as a
/// fragment shader takes them) where the forward pass interpolates in hardware,
/// so texture levels differ by a fraction at some pixels, and silhouettes and the
/// sky's edge by a pixel's coverage; bloom and the tone map run as compute
/// passes, which encode sRGB themselves (a unit in the last place here and
/// there). Measured 55-59 dB per frame here (57-70 dB with the fragment tone map
/// and bloom, 53-64 dB with exact derivatives at the pixel's centre; on the H200
/// at 4K with anisotropic filtering and exact derivatives: 57.2 dB minimum, 65.3
/// dB mean); a
/// wrong vertex, a missed pixel or a texture level off by a few falls far below
/// (the same frames with the level forced coarse by 3: 22.7 dB; with the
/// gradients ignored: 26-33 dB).
const MIN_FRAME_PSNR_DB: f64 = 45.0;

/// The test size's flags with every level resident.
const RESIDENT: [&str; 12] = [
    "--size",
    "256x144",
    "--texture-size",
    "256",
    "--frames",
    "12",
    "--textures",
    "rgba8",
    "--streaming",
    "off",
    "--texture-budget",
    "64MiB",
];

/// Runs the demo with `args`, requires it validation-clean, returns its report.
fn run(out: &Path, args: &[&str]) -> serde_json::Value {
    let run = common::run_ok(common::demo().args(args).args(common::out_args(out)));
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("0 validation errors"), "{stdout}");
    common::report(out)
}

fn frame_psnr(r: &serde_json::Value) -> Vec<f64> {
    r["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["psnr_db"].as_f64().unwrap())
        .collect()
}

#[test]
fn visibility_shading_matches_forward_shading() {
    let reference = common::scratch("visibility_forward");
    let forward = run(
        &reference,
        &[
            &RESIDENT[..],
            &["--shading", "forward", "--anisotropy", "1"],
        ]
        .concat(),
    );
    assert_eq!(forward["settings"]["shading"], "forward");
    let f = &forward["frames"][3]["gpu_ms"];
    assert!(f["scene"].as_f64().unwrap() > 0.0, "{f}");
    assert!(f.get("shade").is_none(), "{f}");
    let compare = ["--compare", reference.to_str().unwrap(), "--png-every", "0"];

    let vis = run(
        &common::scratch("visibility_grad"),
        &[
            &RESIDENT[..],
            &["--shading", "visibility", "--anisotropy", "1"],
            &compare,
        ]
        .concat(),
    );
    assert_eq!(vis["settings"]["shading"], "visibility");
    let psnr = frame_psnr(&vis);
    assert_eq!(psnr.len(), 12);
    for (i, p) in psnr.iter().enumerate() {
        assert!(*p >= MIN_FRAME_PSNR_DB, "frame {i}: {p:.1} dB ({psnr:?})");
    }
    // The shading dispatches are timed apart from the id pass.
    let f = &vis["frames"][3]["gpu_ms"];
    assert!(f["shade"].as_f64().unwrap() > 0.0, "{f}");
    assert!(f["scene"].as_f64().unwrap() > 0.0, "{f}");

    // The streaming feedback comes from the shading dispatches now: every frame
    // measures a deficit of 0 with every level resident, as the forward run does,
    // and the feedback saw the materials (a wanted-bytes figure above the tails).
    for r in [&forward, &vis] {
        assert_eq!(r["streaming"]["mean_mip_deficit"].as_f64(), Some(0.0));
        let wanted: u64 = r["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["texture_wanted_bytes"].as_u64().unwrap())
            .max()
            .unwrap();
        assert!(wanted > 1 << 20, "wanted {wanted} bytes");
    }

    // Asked for anisotropic filtering, visibility shading on lavapipe samples
    // without it (llvmpipe ignores textureGrad's gradients under it): the same
    // frames as above.
    let aniso = run(
        &common::scratch("visibility_aniso"),
        &[
            &RESIDENT[..],
            &["--shading", "visibility", "--anisotropy", "4"],
            &compare,
        ]
        .concat(),
    );
    assert_eq!(aniso["settings"]["anisotropy"].as_u64(), Some(1));
    let psnr = frame_psnr(&aniso);
    for (i, p) in psnr.iter().enumerate() {
        assert!(*p >= MIN_FRAME_PSNR_DB, "frame {i}: {p:.1} dB ({psnr:?})");
    }
}

#[test]
fn visibility_shading_streams_within_budget() {
    // Streaming on, 7 MiB (about 1/8 of the 512-texel set), 32 frames through the
    // first camera cut, the effects off: the budget holds at every frame and
    // residency changes follow the feedback the shading dispatches write.
    let budget: u64 = 7 << 20;
    let r = run(
        &common::scratch("visibility_streaming"),
        &[
            "--size",
            "192x108",
            "--texture-size",
            "512",
            "--frames",
            "32",
            "--textures",
            "rgba8",
            "--shading",
            "visibility",
            "--png-every",
            "0",
            "--texture-budget",
            "7MiB",
            // The shading without the shadow map's binding (the effects' other
            // pipeline variant).
            "--effects",
            "off",
        ],
    );
    let s = &r["streaming"];
    assert_eq!(s["frames_over_budget"].as_u64(), Some(0), "{s}");
    for f in r["frames"].as_array().unwrap() {
        assert!(
            f["texture_resident_bytes"].as_u64().unwrap() <= budget,
            "{f}"
        );
    }
    let changes = s["residency_changes"].as_u64().unwrap();
    assert!(changes >= 50, "{changes} changes");
    // The feedback drives it: by the end the deficit is small (the static choice
    // at this budget measures 1.44 on the 48-frame path).
    let mean = s["mean_mip_deficit"].as_f64().unwrap();
    assert!(mean < 1.0, "mean mip deficit {mean}");
}
