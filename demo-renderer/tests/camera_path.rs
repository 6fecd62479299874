//! Recorded camera paths (`--record-path`, `--camera-path`) on lavapipe at a
//! small size and a few frames: the shipped paths in `assets/paths/` read
//! and replay to their own poses; the script recorded and replayed is the
//! same file and, with streaming off, the same frames (`--compare` finds
//! them identical); a path shorter than `--frames` and a malformed line are
//! errors that say so; a replay's streamer predicts (`streaming.lookahead`).
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
