//! `--window` under Xvfb: the window opens, renders three frames, closes cleanly
//! (exit 0, validation clean), and the screenshot read back from the swapchain
//! shows the gallery (compared with the headless reference, which is the same view).

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Xvfb(Child);

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_xvfb() -> (Xvfb, String) {
    for attempt in 0..20 {
        let n = 100 + (std::process::id() % 400) + attempt * 7;
        if Path::new(&format!("/tmp/.X11-unix/X{n}")).exists()
            || Path::new(&format!("/tmp/.X{n}-lock")).exists()
        {
            continue;
        }
        let child = Command::new("Xvfb")
            .arg(format!(":{n}"))
            .args(["-screen", "0", "1024x768x24", "-nolisten", "tcp"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start Xvfb ({e}): run `cargo xtask test` or `apt-get install xvfb`")
            });
        let mut x = Xvfb(child);
        let socket = format!("/tmp/.X11-unix/X{n}");
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if Path::new(&socket).exists() {
                return (x, format!(":{n}"));
            }
            if let Ok(Some(_)) = x.0.try_wait() {
                break; // display taken; try another
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!("could not start Xvfb on any display");
}

#[test]
fn window_renders_and_closes() {
    let (_xvfb, display) = start_xvfb();
    let out = common::scratch("window");
    let shot = out.join("screenshot.png");
    let run = common::run_ok(
        common::demo()
            .env("DISPLAY", &display)
            .env_remove("WAYLAND_DISPLAY")
            .args([
                "--window",
                "--frames",
                "3",
                "--size",
                "320x180",
                "--texture-size",
                "256",
            ])
            .args(["--cache".as_ref(), common::cache().as_os_str()])
            .args(["--screenshot".as_ref(), shot.as_os_str()]),
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("3 frames"), "{stdout}");
    let actual = image::open(&shot).expect("screenshot written").to_rgba8();
    assert_eq!(
        actual.dimensions(),
        (320, 180),
        "the window should be 320x180"
    );
    // The last frame of a 3-frame path is the overview, the reference view.
    let reference = image::open(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/gallery_320x180.png"),
    )
    .unwrap()
    .to_rgba8();
    let sum: u64 = actual
        .pixels()
        .zip(reference.pixels())
        .map(|(a, r)| (0..3).map(|c| a[c].abs_diff(r[c]) as u64).sum::<u64>())
        .sum();
    let mean = sum as f64 / (320.0 * 180.0 * 3.0);
    assert!(
        mean < 3.0,
        "the screenshot differs from the reference view (mean abs error {mean:.2}); see {}",
        shot.display()
    );
}
