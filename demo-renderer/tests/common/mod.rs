//! Helpers shared by the GPU integration tests.
#![allow(dead_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The lavapipe ICD, used when the environment names no driver.
pub const LAVAPIPE_ICD: &str = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json";

/// A scratch directory under target/ for `name`, emptied.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("demo-renderer")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes a camera path (`--camera-path`'s format) that holds the camera
/// still at `eye`, looking at `target` with a 50-degree field of view, for
/// `frames` frames, into a scratch directory `name`; its path.
pub fn still_path(name: &str, eye: [f32; 3], target: [f32; 3], frames: u32) -> PathBuf {
    let path = scratch(name).join("path.jsonl");
    let lines: Vec<String> = (0..frames)
        .map(|k| {
            format!(r#"{{"frame": {k}, "eye": {eye:?}, "target": {target:?}, "fov_y_deg": 50.0}}"#)
        })
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// The shared baked-material cache of the tests.
pub fn cache() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("demo-renderer")
        .join("material-cache")
}

/// A command running the demo binary on lavapipe (unless the environment picks a driver).
pub fn demo() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_demo-renderer"));
    if std::env::var_os("VK_DRIVER_FILES").is_none()
        && std::env::var_os("VK_ICD_FILENAMES").is_none()
    {
        c.env("VK_DRIVER_FILES", LAVAPIPE_ICD);
    }
    c
}

/// Runs `cmd` and fails the test with its output when it exits non-zero.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("run demo-renderer");
    assert!(
        out.status.success(),
        "demo-renderer failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // A run that succeeds met no allocation failure it did not expect: the
    // demo writes a heap dump, and says so, for those alone.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("heap dump in"),
        "an unexpected allocation failure:\n{stderr}"
    );
    out
}

/// `--out DIR --cache <the shared cache>`: where a run writes, and the baked
/// materials every test shares.
pub fn out_args(out: &Path) -> [OsString; 4] {
    ["--out".into(), out.into(), "--cache".into(), cache().into()]
}

/// The `report.json` a run wrote into `out`.
pub fn report(out: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap()
}
