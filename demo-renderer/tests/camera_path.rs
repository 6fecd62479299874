//! Recorded camera paths (`--record-path`, `--camera-path`) on lavapipe at a
//! small size and a few frames: the shipped paths in `assets/paths/` read
//! and replay to their own poses; the script recorded and replayed is the
//! same file and, with streaming off, the same frames (`--compare` finds
//! them identical); a path shorter than `--frames` and a malformed line are
//! errors that say so; a replay's streamer predicts (`streaming.lookahead`);
//! a path that jumps without announcing a cut is reported (`view_change`)
//! and answered as a cut, or found a frame late by its feedback.
//! (`tests/streaming.rs` checks that the script's is "script".)

use crate::common;

use std::path::{Path, PathBuf};

use demo_renderer::camera::path::RecordedPath;

fn paths_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/paths")
}

/// A small headless run: 64x36, 64-texel maps, the shared cache, into `out`.
fn small_run(out: &Path) -> std::process::Command {
    let mut c = common::demo();
    c.args(["--size", "64x36", "--texture-size", "64"])
        .args(common::out_args(out));
    c
}

fn failure(cmd: &mut std::process::Command) -> String {
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "succeeded:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

#[test]
fn shipped_paths_read_and_replay_to_their_poses() {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(paths_dir()).unwrap() {
        let file = entry.unwrap().path();
        if file.extension().is_some_and(|e| e == "jsonl") {
            let path = RecordedPath::load(&file).unwrap_or_else(|e| panic!("{e}"));
            assert!(path.frames() >= 120, "{}", file.display());
            names.push(file);
        }
    }
    assert!(names.len() >= 2, "{names:?}");
    // One replayed on the GPU: frame i shows line i, recorded back verbatim.
    let file = paths_dir().join("flick.jsonl");
    let out = common::scratch("camera_path_shipped");
    let rec = out.join("rec.jsonl");
    common::run_ok(
        small_run(&out)
            .args(["--frames", "3", "--png-every", "0", "--camera-path"])
            .arg(&file)
            .arg("--record-path")
            .arg(&rec),
    );
    let recorded = std::fs::read_to_string(&rec).unwrap();
    let original = std::fs::read_to_string(&file).unwrap();
    let first: Vec<&str> = original.lines().take(3).collect();
    assert_eq!(recorded.lines().collect::<Vec<_>>(), first);
    let report = common::report(&out);
    assert_eq!(report["frames"].as_array().unwrap().len(), 3);
    // No future for a replayed path: the streamer predicts from its motion.
    assert_eq!(report["streaming"]["lookahead"], "prediction", "{report}");
    assert!(report["settings"]["camera_path"]
        .as_str()
        .unwrap()
        .ends_with("flick.jsonl"));
}

#[test]
fn record_then_replay_round_trips_exactly() {
    let script = common::scratch("camera_path_script");
    let replay = common::scratch("camera_path_replay");
    let (a, b) = (script.join("a.jsonl"), replay.join("b.jsonl"));
    common::run_ok(
        small_run(&script)
            .args(["--frames", "3", "--streaming", "off", "--record-path"])
            .arg(&a),
    );
    common::run_ok(
        small_run(&replay)
            .args(["--streaming", "off", "--camera-path"])
            .arg(&a)
            .arg("--record-path")
            .arg(&b)
            .arg("--compare")
            .arg(&script),
    );
    let (a_text, b_text) = (
        std::fs::read_to_string(&a).unwrap(),
        std::fs::read_to_string(&b).unwrap(),
    );
    assert_eq!(a_text.lines().count(), 3, "{a_text}");
    assert_eq!(a_text, b_text);
    // --frames left out: the whole path; the same poses draw the same frames.
    let report = common::report(&replay);
    assert_eq!(report["streaming"]["lookahead"], "off");
    assert_eq!(common::report(&script)["streaming"]["lookahead"], "off");
    let frames = report["frames"].as_array().unwrap();
    assert_eq!(frames.len(), 3);
    for f in frames {
        assert_eq!(f["psnr_db"].as_f64(), Some(100.0), "{f}");
    }

    // Longer than the path: an error that says how to recover.
    let err = failure(
        small_run(&replay)
            .args(["--frames", "4", "--camera-path"])
            .arg(&a),
    );
    assert!(
        err.contains("the path has 3 frames, fewer than --frames 4")
            && err.contains("--frames 3 or fewer"),
        "{err}"
    );
    // A malformed line: named, before the device starts.
    let bad = replay.join("bad.jsonl");
    let second = a_text
        .lines()
        .nth(1)
        .unwrap()
        .replace("\"eye\"", "\"eyes\"");
    std::fs::write(
        &bad,
        format!("{}\n{second}\n", a_text.lines().next().unwrap()),
    )
    .unwrap();
    let err = failure(small_run(&replay).arg("--camera-path").arg(&bad));
    assert!(
        err.contains("bad.jsonl, line 2") && err.contains("eyes"),
        "{err}"
    );
}

/// A recorded path that stands before material 0's sphere, then jumps, with
/// no announced cut, to stand before material 15's at the other corner.
const JUMP_AT: usize = 6;

fn jump_path(file: &Path) {
    let line = |frame: usize, eye: [f32; 3], target: [f32; 3]| {
        format!(
            "{{\"frame\": {frame}, \"eye\": {eye:?}, \"target\": {target:?}, \"fov_y_deg\": 50.0}}\n"
        )
    };
    let mut text = String::new();
    for f in 0..12 {
        text.push_str(&if f < JUMP_AT {
            line(f, [-4.8, 1.2, -2.6], [-4.8, 1.0, -4.8])
        } else {
            line(f, [4.8, 1.2, 2.6], [4.8, 1.0, 4.8])
        });
    }
    std::fs::write(file, text).unwrap();
}

/// The jump path streamed at 192x108 with 512-texel maps and a 7 MiB budget
/// (`tests/streaming.rs`'s size), compared with `reference`; `tune`: `--tune`
/// items.
fn jump_run(out: &Path, path: &Path, reference: &Path, tune: &[&str]) -> serde_json::Value {
    common::run_ok(
        common::demo()
            .args(tune.iter().flat_map(|t| ["--tune", t]))
            .args(["--size", "192x108", "--texture-size", "512", "--textures"])
            .args(["rgba8", "--texture-budget", "7MiB", "--png-every", "0"])
            .arg("--camera-path")
            .arg(path)
            .arg("--compare")
            .arg(reference)
            .args(common::out_args(out)),
    );
    common::report(out)
}

#[test]
fn an_unannounced_jump_is_found_and_answered_as_a_cut() {
    let reference = common::scratch("camera_path_jump_reference");
    let path = reference.join("jump.jsonl");
    jump_path(&path);
    // Every level resident: the truth the streamed frames are compared with.
    common::run_ok(
        common::demo()
            .args(["--size", "192x108", "--texture-size", "512", "--textures"])
            .args(["rgba8", "--texture-budget", "64MiB", "--streaming", "off"])
            .arg("--camera-path")
            .arg(&path)
            .args(common::out_args(&reference)),
    );
    let answered = jump_run(&common::scratch("camera_path_jump"), &path, &reference, &[]);
    // Thresholds no pose step reaches: the jump is found a frame late, by
    // its feedback.
    let late = jump_run(
        &common::scratch("camera_path_jump_late"),
        &path,
        &reference,
        &[
            "view.jump-step=1000",
            "view.jump-turn=1000",
            "view.jump-fov=1000",
        ],
    );
    let late = late["frames"].as_array().unwrap();
    for (i, f) in late.iter().enumerate() {
        let found = f["view_change"] == "feedback";
        assert_eq!(found, i == JUMP_AT, "frame {i}: {f}");
    }
    let reported = jump_run(
        &common::scratch("camera_path_jump_reported"),
        &path,
        &reference,
        &["view.respond=0"],
    );
    for r in [&answered, &reported] {
        let frames = r["frames"].as_array().unwrap();
        // Found before the frame, at that frame alone.
        for (i, f) in frames.iter().enumerate() {
            let jump = f["view_change"] == "jump";
            assert_eq!(jump, i == JUMP_AT, "frame {i}: {f}");
            assert_eq!(f["camera_cut"], false, "frame {i}: {f}");
        }
        let events = r["streaming"]["view_changes"].as_array().unwrap();
        let event = events
            .iter()
            .find(|e| e["frame"].as_u64() == Some(JUMP_AT as u64))
            .unwrap_or_else(|| panic!("{events:?}"));
        assert_eq!(event["kind"], "jump", "{event}");
    }
    // Answered as a cut: the present view's estimate in the stale
    // feedback's place (a teleport keeps nothing of the old view on
    // screen), the view refilled within 2 frames, and the jump's frame
    // drawn from the levels it wants, not from the old view's.
    let frame = |r: &serde_json::Value, i: usize| r["frames"][i].clone();
    assert_eq!(frame(&answered, JUMP_AT)["wanted_from"], "estimate");
    assert_eq!(frame(&reported, JUMP_AT)["wanted_from"], "feedback");
    let events = answered["streaming"]["view_changes"].as_array().unwrap();
    // (The close-up and the floor want more than the budget: the deficit
    // stays above 0.1, the frames at 40 dB say when the view is refilled.)
    let refill = events
        .iter()
        .find(|e| e["frame"].as_u64() == Some(JUMP_AT as u64))
        .and_then(|e| e["refill_40_db_frames"].as_u64());
    assert!(refill.is_some_and(|n| n <= 2), "{events:?}");
    let psnr = |r: &serde_json::Value| frame(r, JUMP_AT)["psnr_db"].as_f64().unwrap();
    assert!(
        psnr(&answered) >= 30.0 && psnr(&answered) > psnr(&reported),
        "the jump's frame: {} dB answered, {} dB only reported",
        psnr(&answered),
        psnr(&reported)
    );
}
