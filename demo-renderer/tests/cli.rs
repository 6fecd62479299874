//! Bad flags and missing devices give a clear message and a non-zero exit, never a panic.

use crate::common;

fn fails_cleanly(args: &[&str], needle: &str) {
    let out = common::demo().args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(!stderr.contains("panicked"), "{args:?} panicked:\n{stderr}");
    assert!(
        stderr.contains(needle),
        "{args:?}: expected '{needle}' in:\n{stderr}"
    );
}

#[test]
fn bad_flags() {
    fails_cleanly(&["--bogus"], "unknown flag");
    fails_cleanly(&["--size", "huge"], "--size");
    fails_cleanly(&["--texture-size", "1000"], "power of two");
    fails_cleanly(&["--texture-budget", "lots"], "--texture-budget");
    fails_cleanly(&["--frames"], "needs a value");
}

#[test]
fn missing_device() {
    fails_cleanly(&["--device", "99", "--frames", "1"], "out of range");
}

#[test]
fn upload_queue_transfer() {
    fails_cleanly(&["--upload-queue", "dma"], "--upload-queue");
    let dir = common::scratch("cli_upload_queue_transfer");
    let out = common::demo()
        .args(["--upload-queue", "transfer", "--scene", "triangle"])
        .args(["--frames", "1", "--size", "64x36", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    if out.status.success() {
        // A device with a transfer-only queue family: the device got its queue.
        let report: serde_json::Value = common::report(&dir);
        assert!(report["device"]["upload_queue_family"].is_u64(), "{report}");
    } else {
        // lavapipe: one queue family, which does graphics too.
        assert!(
            stderr.contains("no transfer-only queue family"),
            "expected the missing family in:\n{stderr}"
        );
    }
}

#[test]
fn help() {
    let out = common::demo().arg("--help").output().unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("--texture-budget"));
    assert!(stdout.contains("--upload-queue"));
}
