//! Bad flags and missing devices give a clear message and a non-zero exit, never a panic.

mod common;

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
fn help() {
    let out = common::demo().arg("--help").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--texture-budget"));
}
