//! `cargo xtask`: the project's two commands (and a third for benchmarks).
//!
//! ```text
//! cargo xtask test  [--driver lavapipe|system|PATH.json] [--keep-going] [--release]
//! cargo xtask demo  [--driver ...] [-- ] [demo args...]
//! cargo xtask bench [--driver ...] [-- ] [bench args...]
//! cargo xtask setup
//! cargo xtask fuzz  [--seconds N]
//! ```
//!
//! Every command first makes sure the system packages the project needs are
//! installed (Vulkan loader, lavapipe, validation layers, shader tools, Xvfb),
//! installing them with `apt-get` when running as root, then pins the Vulkan
//! driver for the child processes (lavapipe unless told otherwise) and runs
//! `cargo`.
//!
//! `test` and `setup` also fetch, once, a lavapipe with sparse residency
//! (Mesa from bookworm-backports) into `target/xtask/sparse-lavapipe/` for the
//! demo's tile tests, named by `VKALLOC_SPARSE_DRIVER`; it is unpacked there,
//! not installed.
//!
//! The crate has no dependencies so that it compiles in a second or two.

#![forbid(unsafe_code)]

mod background;
mod package;

use std::env;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

/// Debian packages every command needs, with what each is for.
const PACKAGES: &[(&str, &str)] = &[
    ("libvulkan1", "the Vulkan loader"),
    ("mesa-vulkan-drivers", "lavapipe, the CPU Vulkan driver"),
    ("vulkan-validationlayers", "VK_LAYER_KHRONOS_validation"),
    ("vulkan-tools", "vulkaninfo, for diagnosing drivers"),
    ("glslang-tools", "glslangValidator, to compile shaders"),
    ("spirv-tools", "spirv-val, to validate compiled shaders"),
    (
        "xvfb",
        "a virtual X server: `demo --window` with no display",
    ),
    ("libxkbcommon-x11-0", "keyboard input for winit on X11"),
    ("libxcursor1", "cursors for winit on X11"),
    ("libxrandr2", "monitor modes for winit on X11"),
    ("libxi6", "input devices for winit on X11"),
    ("xauth", "used by xvfb-run"),
    (
        "g++",
        "builds VMA (vk-mem) for the benchmarks and links the BC encoder",
    ),
    (
        "curl",
        "downloads lavapipe with sparse residency (bookworm-backports) for the tile tests",
    ),
    ("xz-utils", "unpacks the bookworm-backports package index"),
    ("gpgv", "checks the bookworm-backports index's signature"),
    (
        "debian-archive-keyring",
        "the keys that signed the bookworm-backports index",
    ),
    // The MSRV step's Rust 1.85 (bookworm's rustc-web and cargo-web) is
    // unpacked, not installed; these are the shared libraries it and its
    // libllvm19 load, installed so that apt resolves their own dependencies.
    ("libcurl4", "loaded by cargo 1.85 (the MSRV step)"),
    ("libsqlite3-0", "loaded by cargo 1.85 (the MSRV step)"),
    ("libssh2-1", "loaded by cargo 1.85 (the MSRV step)"),
    ("libssl3", "loaded by cargo 1.85 (the MSRV step)"),
    (
        "libz3-4",
        "loaded by LLVM 19, rustc 1.85's backend (the MSRV step)",
    ),
    (
        "libxml2",
        "loaded by LLVM 19, rustc 1.85's backend (the MSRV step)",
    ),
    (
        "libedit2",
        "loaded by LLVM 19, rustc 1.85's backend (the MSRV step)",
    ),
];

/// Where Vulkan drivers (ICDs) describe themselves on Debian.
const ICD_DIRS: &[&str] = &["/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d"];

/// Set by xtask so the GPU test harness fails when the validation layer is missing.
const REQUIRE_VALIDATION: &str = "VKALLOC_REQUIRE_VALIDATION";

/// Set by xtask for the tests: the ICD manifest of a lavapipe with sparse
/// residency (Mesa from bookworm-backports), for the demo's tile tests
/// (`demo-renderer/tests/tiles.rs`). Respected when already set.
const SPARSE_DRIVER: &str = "VKALLOC_SPARSE_DRIVER";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("\nxtask: error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// An error that ends the command, with what to do about it.
#[derive(Debug)]
struct XtaskError(String);

impl fmt::Display for XtaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

type Result<T, E = XtaskError> = std::result::Result<T, E>;

fn fail<T>(message: impl Into<String>) -> Result<T> {
    Err(XtaskError(message.into()))
}

const USAGE: &str = "\
usage: cargo xtask <command> [--driver lavapipe|system|PATH.json] [--] [args...]

commands:
  test    install what is missing, then fmt check, clippy, doc, and every test
          on lavapipe with the validation layer on (the embedding example and
          the fuzz corpora's replay included); stops at the first failing
          step unless given --keep-going; --release builds the tests optimized.
          The demo's tile tests run on lavapipe from bookworm-backports (sparse
          residency), downloaded once into target/xtask/sparse-lavapipe/
  demo    install what is missing, then run the demo renderer (release build);
          arguments after the command (or after --) go to the renderer
  bench   install what is missing, then run the benchmarks (release build);
          arguments go to the bench binary (cargo xtask bench -- --corpus
          runs the trace corpus; -- --help lists the options)
  setup   only install what is missing and print the Vulkan environment
  heapmap draw a vkalloc JSON dump as a heap-map PNG (release build of
          vkalloc-heapmap; no GPU needed):
            cargo xtask heapmap DUMP.json --out heap.png [--width PIXELS]
            cargo xtask heapmap --diff OLD.json NEW.json --out diff.png
  fuzz    timed fuzzing, not part of `test` (which replays the committed
          corpora as ordinary tests): installs cargo-fuzz if missing, then
          runs each target from its corpus for 20 s, or --seconds N
  package only the test command's package step: vkalloc packaged as for
          crates.io, unpacked under target/xtask/package/ and tested there on
          its own, with the default features and with all features
  msrv    only the test command's MSRV step: the packaged vkalloc built and
          its unit tests run with Rust 1.85 (Debian bookworm's rustc-web and
          cargo-web, fetched once with apt-get download and unpacked under
          target/xtask/rust-1.85/, not installed); `test` runs it alongside
          its other steps and shows its output after the package step

--driver lavapipe   (default) use Mesa's CPU driver, whatever GPUs the machine has
--driver system     use whatever drivers the Vulkan loader finds (real GPUs)
--driver PATH.json  use the driver described by this ICD manifest
If VK_DRIVER_FILES or VK_ICD_FILENAMES is set, it is respected unless --driver is given.
VKALLOC_DEVICE_INDEX=N picks the N-th physical device (default 0).";

/// Which Vulkan driver the child processes see.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Driver {
    /// Not given on the command line: lavapipe, unless the user set the
    /// loader's variables already.
    Default,
    /// Mesa's lavapipe.
    Lavapipe,
    /// Whatever the loader finds.
    System,
    /// One ICD manifest.
    Manifest(PathBuf),
}

/// The parsed command line.
#[derive(Debug)]
struct Invocation {
    command: String,
    driver: Driver,
    rest: Vec<String>,
}

fn parse(args: Vec<String>) -> Result<Invocation> {
    let mut iter = args.into_iter();
    let command = match iter.next() {
        Some(c) if c == "-h" || c == "--help" || c == "help" => {
            println!("{USAGE}");
            std::process::exit(0);
        }
        Some(c) => c,
        None => return fail(format!("no command given\n\n{USAGE}")),
    };
    let mut driver = Driver::Default;
    let mut rest = Vec::new();
    let mut passthrough = false;
    while let Some(arg) = iter.next() {
        if passthrough {
            rest.push(arg);
            continue;
        }
        let value = if arg == "--driver" {
            match iter.next() {
                Some(v) => v,
                None => {
                    return fail(
                        "--driver needs a value: lavapipe, system or a path to an ICD .json",
                    )
                }
            }
        } else if let Some(v) = arg.strip_prefix("--driver=") {
            v.to_string()
        } else if arg == "--" {
            passthrough = true;
            continue;
        } else {
            rest.push(arg);
            continue;
        };
        driver = match value.as_str() {
            "lavapipe" | "lvp" => Driver::Lavapipe,
            "system" => Driver::System,
            path if path.ends_with(".json") => Driver::Manifest(PathBuf::from(path)),
            other => {
                return fail(format!(
                    "unknown driver {other:?}: use lavapipe, system, or a path to an ICD manifest (.json)"
                ))
            }
        };
    }
    Ok(Invocation {
        command,
        driver,
        rest,
    })
}

fn run(args: Vec<String>) -> Result<()> {
    let invocation = parse(args)?;
    let root = repo_root()?;
    let caller_dir = env::current_dir().unwrap_or_else(|_| root.clone());
    env::set_current_dir(&root).map_err(|e| {
        XtaskError(format!(
            "cannot enter the repository root {}: {e}",
            root.display()
        ))
    })?;
    match invocation.command.as_str() {
        "setup" => {
            let mut env = prepare(&invocation.driver)?;
            env.set
                .push((SPARSE_DRIVER, sparse_driver()?.into_os_string()));
            env.print();
            println!("xtask setup: done");
            Ok(())
        }
        "test" => {
            let options = parse_test_options(&invocation.rest)?;
            test(&invocation.driver, &options)
        }
        "fuzz" => fuzz_step(parse_fuzz_seconds(&invocation.rest)?),
        "package" => package::package_step(),
        "msrv" => {
            match invocation.rest.as_slice() {
                [] => {}
                [flag] if flag == background::STOP_WITH_PARENT => background::stop_with_parent(),
                other => return fail(format!("xtask msrv: unexpected arguments {other:?}")),
            }
            package::msrv_step()
        }
        "demo" => {
            let env = prepare(&invocation.driver)?;
            env.print();
            let mut command = cargo();
            command.args(["run", "--release", "-p", "demo-renderer", "--"]);
            command.args(&invocation.rest);
            let windowed = invocation.rest.iter().any(|a| a == "--window");
            let no_display =
                env::var_os("DISPLAY").is_none() && env::var_os("WAYLAND_DISPLAY").is_none();
            let mut command = if windowed && no_display {
                println!("xtask: no DISPLAY or WAYLAND_DISPLAY: running the window under Xvfb (xvfb-run -a)");
                wrap_in_xvfb(command)
            } else {
                command
            };
            env.apply(&mut command);
            run_step("demo", &mut command).map(|_| ())
        }
        "bench" => {
            let env = prepare(&invocation.driver)?;
            env.print();
            let mut command = cargo();
            command.args(["run", "--release", "-p", "bench", "--"]);
            command.args(&invocation.rest);
            env.apply(&mut command);
            run_step("bench", &mut command).map(|_| ())
        }
        "heapmap" => {
            // Paths on the command line are the caller's: run from the caller's directory.
            let mut command = cargo();
            command.current_dir(&caller_dir).args([
                "run",
                "--release",
                "--quiet",
                "--manifest-path",
            ]);
            command.arg(root.join("Cargo.toml"));
            command.args(["-p", "vkalloc-heapmap", "--"]);
            command.args(&invocation.rest);
            run_step("heapmap", &mut command).map(|_| ())
        }
        other => fail(format!("unknown command {other:?}\n\n{USAGE}")),
    }
}

/// The workspace root: the parent of this crate's manifest directory.
fn repo_root() -> Result<PathBuf> {
    let manifest_dir = env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    match manifest_dir.parent() {
        Some(root) if root.join("Cargo.toml").is_file() => Ok(root.to_path_buf()),
        _ => fail(format!(
            "cannot find the workspace root above {}; run `cargo xtask` from inside the repository",
            manifest_dir.display()
        )),
    }
}

/// `cargo`, the same one that runs xtask.
fn cargo() -> Command {
    Command::new(env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo")))
}

fn wrap_in_xvfb(inner: Command) -> Command {
    let mut command = Command::new("xvfb-run");
    command.args(["-a", "-s", "-screen 0 1920x1080x24"]);
    command.arg(inner.get_program());
    command.args(inner.get_args());
    command
}

/// Runs one step, streaming its output; fails with the step's name.
fn run_step(name: &str, command: &mut Command) -> Result<Duration> {
    println!("\n==> {name}: {}", describe(command));
    let start = Instant::now();
    let status = command.status().map_err(|e| {
        XtaskError(format!(
            "{name}: cannot start {:?}: {e}",
            command.get_program()
        ))
    })?;
    let elapsed = start.elapsed();
    if status.success() {
        println!("==> {name}: ok ({})", seconds(elapsed));
        Ok(elapsed)
    } else {
        fail(format!(
            "step `{name}` failed ({status}) after {}",
            seconds(elapsed)
        ))
    }
}

fn describe(command: &Command) -> String {
    let mut text = command.get_program().to_string_lossy().into_owned();
    for arg in command.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 60.0 {
        format!("{}m{:04.1}s", (s / 60.0) as u64, s % 60.0)
    } else {
        format!("{s:.1}s")
    }
}

// ---------------------------------------------------------------------------
// `cargo xtask test`

/// Options of `cargo xtask test`.
#[derive(Debug, Default, PartialEq, Eq)]
struct TestOptions {
    /// Run every step even after one fails, and report all failures.
    keep_going: bool,
    /// Build and run the tests with `--release`.
    release: bool,
}

fn parse_test_options(rest: &[String]) -> Result<TestOptions> {
    let mut options = TestOptions::default();
    for arg in rest {
        match arg.as_str() {
            "--keep-going" | "-k" => options.keep_going = true,
            "--release" => options.release = true,
            other => {
                return fail(format!(
                    "`cargo xtask test` does not take {other:?} (it takes --driver, --keep-going, \
                     --release); run `cargo test -p gpu-tests ...` directly for a subset"
                ))
            }
        }
    }
    Ok(options)
}

fn test(driver: &Driver, options: &TestOptions) -> Result<()> {
    let total = Instant::now();
    let mut env = prepare(driver)?;
    // The tile tests run on their own driver (the system lavapipe has no
    // sparse residency): fetched once, under target/.
    env.set
        .push((SPARSE_DRIVER, sparse_driver()?.into_os_string()));
    env.print();
    require_cargo_component("fmt", "rustfmt")?;
    require_cargo_component("clippy", "clippy")?;

    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--", "--check"]);

    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);

    let mut doc = cargo();
    doc.args(["doc", "--workspace", "--no-deps"]);
    doc.env("RUSTDOCFLAGS", rustdocflags());

    // vkalloc's own tests, examples and doctests run once, in the package
    // step, from the published crate with all its features (the same suite,
    // test for test): not a second time here.
    let mut tests = cargo();
    tests.args(["test", "--workspace", "--exclude", "vkalloc"]);
    if options.release {
        tests.arg("--release");
    }
    tests.env(REQUIRE_VALIDATION, "1");
    // Line tables are enough for backtraces, and building full debug info
    // for the whole workspace costs about a quarter of the test build on two
    // cores (measured). Debug assertions and overflow checks stay on.
    if !options.release && env::var_os("CARGO_PROFILE_DEV_DEBUG").is_none() {
        tests.env("CARGO_PROFILE_DEV_DEBUG", "line-tables-only");
    }
    // Backtraces make a failing GPU test's panic say where it came from.
    if env::var_os("RUST_BACKTRACE").is_none() {
        tests.env("RUST_BACKTRACE", "1");
    }

    // The libFuzzer wrappers in the two fuzz directories (outside the
    // workspace, so not in `cargo fmt --all`); their bodies are in
    // `fuzz/harness`, a member.
    let mut fuzz_fmt = Command::new("rustfmt");
    fuzz_fmt.args(["--edition", "2021", "--check"]);
    fuzz_fmt.args(fuzz_wrappers()?);

    // The embedding example runs in the test step (`test = true` on it in
    // allocator/Cargo.toml), and the committed fuzz corpora are replayed there
    // too (`fuzz/harness/tests/corpus.rs`): timed fuzzing is `cargo xtask fuzz`.
    let steps: [(&str, Command, &str); 6] = [
        ("fmt", fmt, "run `cargo fmt --all` to fix the formatting"),
        (
            "fmt fuzz targets",
            fuzz_fmt,
            "run `rustfmt --edition 2021` on the files above",
        ),
        ("clippy", clippy, "fix the lints above"),
        ("doc", doc, "fix the documentation warnings above"),
        (
            "test",
            tests,
            "see the failing tests above (a corpus file that fails: RELIABILITY.md, \
             reproducing a crash)",
        ),
        (
            "package",
            package::self_command("package"),
            "the published vkalloc fails on its own (run `cargo xtask package`)",
        ),
    ];
    // The MSRV step (Rust 1.85, a target directory of its own) runs alongside
    // the others from the start, in the idle stretches of a two-core machine;
    // its output is shown after the package step, where it stands in order.
    let mut msrv = package::self_command("msrv");
    msrv.arg(background::STOP_WITH_PARENT);
    env.apply(&mut msrv);
    ci_not_incremental(&mut msrv);
    let msrv = background::Background::start(
        "msrv",
        &mut msrv,
        &target_dir().join("xtask").join("msrv.log"),
    )?;
    let mut timings = Vec::new();
    let mut failures = Vec::new();
    for (name, mut command, what_to_do) in steps {
        env.apply(&mut command);
        ci_not_incremental(&mut command);
        let start = Instant::now();
        match run_step(name, &mut command) {
            Ok(elapsed) => timings.push(format!("{name} {}", seconds(elapsed))),
            Err(err) => {
                let err = hint(err, what_to_do);
                if !options.keep_going {
                    return Err(err);
                }
                timings.push(format!("{name} FAILED {}", seconds(start.elapsed())));
                failures.push(err.to_string());
            }
        }
    }
    match msrv.finish() {
        Ok(elapsed) => timings.push(format!("msrv {} (in the background)", seconds(elapsed))),
        Err(err) => {
            let err = hint(
                err,
                "vkalloc fails on its rust-version, 1.85 (run `cargo xtask msrv`)",
            );
            if !options.keep_going {
                return Err(err);
            }
            timings.push("msrv FAILED".to_string());
            failures.push(err.to_string());
        }
    }
    if failures.is_empty() {
        println!(
            "\nxtask test: OK: fmt, clippy, doc and every test passed in {} ({})",
            seconds(total.elapsed()),
            timings.join(", ")
        );
        Ok(())
    } else {
        println!("\nxtask test: {}", timings.join(", "));
        fail(format!(
            "{} step(s) failed after {}:\n  {}",
            failures.len(),
            seconds(total.elapsed()),
            failures.join("\n  ")
        ))
    }
}

/// A CI run starts from a clean tree: incremental data is never reused.
fn ci_not_incremental(command: &mut Command) {
    if env::var_os("CI").is_some() && env::var_os("CARGO_INCREMENTAL").is_none() {
        command.env("CARGO_INCREMENTAL", "0");
    }
}

/// The libFuzzer targets: (cargo-fuzz directory, target): the allocator's in
/// `fuzz/` (a crate outside the workspace), and the KTX2 reader's in a fuzz
/// directory of its own (`fuzz/ktx2`, its own lock file). Their bodies are
/// in `fuzz/harness`, whose test replays `fuzz/corpus/<target>/` in
/// `cargo xtask test`.
const FUZZ_TARGETS: &[(&str, &str)] = &[
    ("fuzz", "range_tlsf"),
    ("fuzz", "range_linear"),
    ("fuzz", "allocator_sim"),
    ("fuzz", "allocator_defrag"),
    ("fuzz/ktx2", "ktx2_reader"),
];
/// Seconds `cargo xtask fuzz` runs each target unless given `--seconds`.
const FUZZ_SECONDS: u32 = 20;

/// `cargo xtask fuzz [--seconds N]`: the seconds per target.
fn parse_fuzz_seconds(rest: &[String]) -> Result<u32> {
    match rest {
        [] => Ok(FUZZ_SECONDS),
        [flag, n] if flag == "--seconds" => match n.parse::<u32>() {
            Ok(n) if n > 0 => Ok(n),
            _ => fail(format!("--seconds needs a whole number above 0, not {n:?}")),
        },
        _ => fail(format!(
            "`cargo xtask fuzz` takes only --seconds N (got {rest:?})"
        )),
    }
}

/// The libFuzzer wrappers' sources (`fuzz/fuzz_targets/*.rs`,
/// `fuzz/ktx2/fuzz_targets/*.rs`), sorted.
fn fuzz_wrappers() -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for dir in ["fuzz/fuzz_targets", "fuzz/ktx2/fuzz_targets"] {
        let entries =
            std::fs::read_dir(dir).map_err(|e| XtaskError(format!("cannot read {dir}: {e}")))?;
        files.extend(
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "rs")),
        );
    }
    files.sort();
    Ok(files)
}

/// Time-boxed fuzzing (`cargo xtask fuzz`): installs cargo-fuzz when
/// missing, checks the fuzz crates' formatting, then runs each target for
/// `seconds`; a crash fails the step. `-s none` builds on the stable toolchain (a sanitizer
/// needs nightly flags); debug assertions and overflow checks stay on. New
/// inputs go to `fuzz/target/xtask-corpus/`, so the committed corpus stays
/// as it is.
fn fuzz_step(seconds: u32) -> Result<()> {
    let installed = cargo()
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        println!(
            "\nxtask: cargo-fuzz is missing: installing it with `cargo install cargo-fuzz --locked` \
             (about 2 minutes on two cores, once)"
        );
        run_step(
            "install cargo-fuzz",
            cargo().args(["install", "cargo-fuzz", "--locked"]),
        )?;
    }
    for manifest in ["fuzz/Cargo.toml", "fuzz/ktx2/Cargo.toml"] {
        run_step(
            &format!("fuzz fmt ({manifest})"),
            cargo().args(["fmt", "--manifest-path", manifest, "--", "--check"]),
        )?;
    }
    for &(dir, target) in FUZZ_TARGETS {
        let scratch = Path::new("fuzz/target/xtask-corpus").join(target);
        std::fs::create_dir_all(&scratch)
            .map_err(|e| XtaskError(format!("cannot create {}: {e}", scratch.display())))?;
        // One target directory per fuzz directory: each has its own lock file.
        let target_dir = if dir == "fuzz" {
            "fuzz/target/none".to_string()
        } else {
            format!("fuzz/target/{}", dir.trim_start_matches("fuzz/"))
        };
        let mut command = cargo();
        command
            .args([
                "fuzz",
                "run",
                "--fuzz-dir",
                dir,
                "-s",
                "none",
                "--target-dir",
            ])
            .arg(&target_dir)
            .arg(target)
            .arg(&scratch)
            .arg(Path::new(dir).join("corpus").join(target))
            .args(["--", "-len_control=0"])
            .arg(format!("-max_total_time={seconds}"));
        command.env("VKALLOC_FUZZ_STATS", "1");
        run_step(&format!("fuzz {target}"), &mut command)?;
    }
    Ok(())
}

/// `-D warnings` added to whatever RUSTDOCFLAGS the user has.
fn rustdocflags() -> String {
    match env::var("RUSTDOCFLAGS") {
        Ok(flags) if !flags.trim().is_empty() => format!("{flags} -D warnings"),
        _ => "-D warnings".to_string(),
    }
}

fn hint(err: XtaskError, what: &str) -> XtaskError {
    XtaskError(format!("{err}; {what}"))
}

fn require_cargo_component(subcommand: &str, component: &str) -> Result<()> {
    let ok = cargo()
        .args([subcommand, "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        Ok(())
    } else {
        fail(format!(
            "`cargo {subcommand}` is not available: install it with `rustup component add {component}`"
        ))
    }
}

// ---------------------------------------------------------------------------
// Setup: system packages and the Vulkan environment

/// Environment variables for child processes that touch Vulkan.
#[derive(Debug, Default)]
struct VulkanEnv {
    set: Vec<(&'static str, OsString)>,
    remove: Vec<&'static str>,
    note: String,
}

impl VulkanEnv {
    fn apply(&self, command: &mut Command) {
        for name in &self.remove {
            command.env_remove(name);
        }
        for (name, value) in &self.set {
            command.env(name, value);
        }
    }

    fn print(&self) {
        println!("xtask: Vulkan driver: {}", self.note);
        for (name, value) in &self.set {
            println!("xtask:   {name}={}", value.to_string_lossy());
        }
    }
}

/// Installs what is missing and works out the Vulkan environment.
fn prepare(driver: &Driver) -> Result<VulkanEnv> {
    ensure_packages()?;
    vulkan_env(driver)
}

fn vulkan_env(driver: &Driver) -> Result<VulkanEnv> {
    let user_set = ["VK_DRIVER_FILES", "VK_ICD_FILENAMES"]
        .iter()
        .find_map(|name| {
            env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(|v| (*name, v))
        });
    let mut out = VulkanEnv::default();
    let manifest = match (driver, user_set) {
        (Driver::Default, Some((name, value))) => {
            out.note = format!("as set by the user ({name}={})", value.to_string_lossy());
            return Ok(out);
        }
        (Driver::System, _) => {
            out.remove = vec!["VK_DRIVER_FILES", "VK_ICD_FILENAMES"];
            out.note = "every driver the Vulkan loader finds (--driver system)".to_string();
            return Ok(out);
        }
        (Driver::Default | Driver::Lavapipe, _) => {
            out.note =
                "lavapipe (Mesa's CPU driver); pass --driver system for a real GPU".to_string();
            find_lavapipe()?
        }
        (Driver::Manifest(path), _) => {
            if !path.is_file() {
                return fail(format!("--driver {}: no such ICD manifest", path.display()));
            }
            out.note = format!("the ICD manifest {}", path.display());
            path.canonicalize().unwrap_or_else(|_| path.clone())
        }
    };
    // VK_DRIVER_FILES is the loader's current name (1.3.207+); older loaders
    // read VK_ICD_FILENAMES. Set both to the same file.
    out.set
        .push(("VK_DRIVER_FILES", manifest.clone().into_os_string()));
    out.set
        .push(("VK_ICD_FILENAMES", manifest.into_os_string()));
    Ok(out)
}

/// The lavapipe ICD manifest for this machine's architecture.
fn find_lavapipe() -> Result<PathBuf> {
    let arch = env::consts::ARCH;
    let mut candidates = Vec::new();
    for dir in ICD_DIRS {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("lvp_icd") && name.ends_with(".json") {
                candidates.push(entry.path());
            }
        }
    }
    candidates.sort();
    let for_arch = candidates
        .iter()
        .find(|p| file_name(p).contains(&format!(".{arch}.")))
        .or_else(|| candidates.iter().find(|p| file_name(p) == "lvp_icd.json"));
    match for_arch {
        Some(path) => Ok(path.clone()),
        None if candidates.is_empty() => fail(format!(
            "no lavapipe driver manifest (lvp_icd*.json) in {}: install mesa-vulkan-drivers, \
             or pass --driver system to use another driver",
            ICD_DIRS.join(" or ")
        )),
        None => fail(format!(
            "lavapipe manifests found ({}) but none for this architecture ({arch}): \
             install mesa-vulkan-drivers:{} or pass --driver PATH.json",
            candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            debian_arch()
        )),
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn debian_arch() -> &'static str {
    match env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "i386",
        other => other,
    }
}

/// Installs the missing Debian packages when root; otherwise says how and fails.
fn ensure_packages() -> Result<()> {
    if Command::new("dpkg-query")
        .arg("--version")
        .output()
        .is_err()
    {
        println!(
            "xtask: dpkg-query not found: not a Debian-like system, so nothing is installed. \
             Make sure the Vulkan loader, a Vulkan driver, the Khronos validation layers, \
             glslang and spirv-tools are installed."
        );
        return Ok(());
    }
    let missing: Vec<&str> = PACKAGES
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| !package_installed(name))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    println!("xtask: missing system packages:");
    for (name, why) in PACKAGES.iter().filter(|(n, _)| missing.contains(n)) {
        println!("xtask:   {name} ({why})");
    }
    if !is_root() {
        return fail(format!(
            "not root, so not installing them; run\n\n    sudo apt-get install -y {}\n\nthen run the command again",
            missing.join(" ")
        ));
    }
    let mut update = Command::new("apt-get");
    update.args(["update", "-q"]);
    update.env("DEBIAN_FRONTEND", "noninteractive");
    run_step("apt-get update", &mut update)?;
    let mut install = Command::new("apt-get");
    install.args(["install", "-y", "-q", "--no-install-recommends"]);
    install.args(&missing);
    install.env("DEBIAN_FRONTEND", "noninteractive");
    run_step("apt-get install", &mut install)?;
    let still: Vec<&str> = missing
        .iter()
        .copied()
        .filter(|n| !package_installed(n))
        .collect();
    if still.is_empty() {
        Ok(())
    } else {
        fail(format!(
            "apt-get ran but these packages are still missing: {}",
            still.join(" ")
        ))
    }
}

// ---------------------------------------------------------------------------
// Lavapipe with sparse residency, for the tile tests

/// The suite whose Mesa has a lavapipe with sparse residency (Mesa 25; Debian
/// 12's own, 22.3, has none).
const BACKPORTS_SUITE: &str = "http://deb.debian.org/debian/dists/bookworm-backports";
/// Where the index's `Filename:` paths start.
const DEBIAN_MIRROR: &str = "http://deb.debian.org/debian";
/// The keys that sign Debian's `InRelease` files.
const DEBIAN_KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// The ICD manifest of lavapipe from bookworm-backports' `mesa-vulkan-drivers`,
/// unpacked under `target/xtask/sparse-lavapipe/` (not installed: the system
/// lavapipe stays what the other tests run on). Downloads once: the signed
/// `InRelease`, the package index it vouches for, the package the index
/// vouches for (each checked by SHA-256), then `dpkg-deb -x`; later runs find
/// the manifest and download nothing. `VKALLOC_SPARSE_DRIVER`, when set, names
/// the manifest instead.
fn sparse_driver() -> Result<PathBuf> {
    if let Some(path) = env::var_os(SPARSE_DRIVER).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path.canonicalize().unwrap_or(path))
        } else {
            fail(format!(
                "{SPARSE_DRIVER}={}: no such ICD manifest",
                path.display()
            ))
        };
    }
    let dir = target_dir().join("xtask").join("sparse-lavapipe");
    let manifest = dir.join("lvp_icd.json");
    let unpacked = std::fs::read_to_string(&manifest)
        .ok()
        .and_then(|text| icd_library_path(&text))
        .is_some_and(|library| Path::new(&library).is_file());
    if unpacked {
        return Ok(manifest);
    }
    fetch_sparse_driver(&dir, &manifest).map_err(|e| {
        XtaskError(format!(
            "cannot provision lavapipe with sparse residency (mesa-vulkan-drivers from \
             bookworm-backports, for the demo's tile tests): {e}\n\
             It needs {BACKPORTS_SUITE} to be reachable once (then it is cached in {}); \
             or set {SPARSE_DRIVER}=/path/to/icd.json to a Vulkan driver with sparseBinding \
             and sparseResidencyImage2D",
            dir.display()
        ))
    })?;
    Ok(manifest)
}

/// Cargo's target directory (`CARGO_TARGET_DIR`, else `target/` in the
/// repository root, the current directory).
fn target_dir() -> PathBuf {
    let dir = env::var_os("CARGO_TARGET_DIR")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("target"), PathBuf::from);
    if dir.is_absolute() {
        dir
    } else {
        env::current_dir().map_or(dir.clone(), |cwd| cwd.join(&dir))
    }
}

fn fetch_sparse_driver(dir: &Path, manifest: &Path) -> Result<()> {
    let arch = debian_arch();
    println!(
        "\nxtask: fetching lavapipe with sparse residency (mesa-vulkan-drivers:{arch} from \
         bookworm-backports) into {} for the tile tests (once)",
        dir.display()
    );
    let scratch = dir.join("download");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)
        .map_err(|e| XtaskError(format!("cannot create {}: {e}", scratch.display())))?;

    // InRelease, checked against Debian's keys.
    let in_release = scratch.join("InRelease");
    download(&format!("{BACKPORTS_SUITE}/InRelease"), &in_release)?;
    let release = scratch.join("Release");
    let mut gpgv = Command::new("gpgv");
    gpgv.args(["--keyring", DEBIAN_KEYRING, "--output"])
        .arg(&release)
        .arg(&in_release);
    quiet_step("gpgv", &mut gpgv)?;
    let release = read_text(&release)?;

    // The package index, checked against InRelease.
    let index_path = format!("main/binary-{arch}/Packages.xz");
    let Some((index_sha, _)) = release_sha256(&release, &index_path) else {
        return fail(format!("the signed InRelease lists no {index_path}"));
    };
    let index_xz = scratch.join("Packages.xz");
    download(&format!("{BACKPORTS_SUITE}/{index_path}"), &index_xz)?;
    check_sha256(&index_xz, &index_sha)?;
    let mut xz = Command::new("xz");
    xz.args(["-d", "-k", "-f"]).arg(&index_xz);
    quiet_step("xz -d", &mut xz)?;
    let index = read_text(&scratch.join("Packages"))?;

    // The package, checked against the index; the newest version if several.
    let mut package: Option<PackageEntry> = None;
    for candidate in packages_stanzas(&index, "mesa-vulkan-drivers") {
        if package
            .as_ref()
            .is_none_or(|p| debian_version_newer(&candidate.version, &p.version))
        {
            package = Some(candidate);
        }
    }
    let Some(package) = package else {
        return fail(format!(
            "bookworm-backports' {index_path} has no mesa-vulkan-drivers"
        ));
    };
    let deb = scratch.join("mesa-vulkan-drivers.deb");
    download(&format!("{DEBIAN_MIRROR}/{}", package.filename), &deb)?;
    check_sha256(&deb, &package.sha256)?;
    let root = scratch.join("root");
    let mut unpack = Command::new("dpkg-deb");
    unpack.arg("-x").arg(&deb).arg(&root);
    quiet_step("dpkg-deb -x", &mut unpack)?;

    // The shipped manifest names the library by file name: point it at the unpacked one.
    let icd_dir = root.join("usr/share/vulkan/icd.d");
    let shipped = std::fs::read_dir(&icd_dir)
        .map_err(|e| XtaskError(format!("{}: {e}", icd_dir.display())))?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let name = file_name(p);
            name.starts_with("lvp_icd") && name.ends_with(".json")
        });
    let Some(shipped) = shipped else {
        return fail(format!(
            "mesa-vulkan-drivers {} has no lvp_icd*.json",
            package.version
        ));
    };
    let shipped_text = read_text(&shipped)?;
    let Some(library_name) = icd_library_path(&shipped_text) else {
        return fail(format!("{}: no library_path", shipped.display()));
    };
    let library_name = file_name(Path::new(&library_name));
    let final_root = dir.join("root");
    let Some(library) = find_file(&root.join("usr/lib"), &library_name) else {
        return fail(format!(
            "mesa-vulkan-drivers {} has no {library_name}",
            package.version
        ));
    };
    let relative = library.strip_prefix(&root).expect("found under root");
    let library = final_root.join(relative);
    let Some(text) = with_icd_library_path(&shipped_text, &library.to_string_lossy()) else {
        return fail(format!("{}: no library_path", shipped.display()));
    };

    // Into place: the unpacked tree, then the manifest last (its presence
    // means the rest is there).
    let _ = std::fs::remove_dir_all(&final_root);
    std::fs::rename(&root, &final_root)
        .map_err(|e| XtaskError(format!("cannot move {}: {e}", root.display())))?;
    let partial = dir.join("lvp_icd.json.partial");
    std::fs::write(&partial, text)
        .map_err(|e| XtaskError(format!("cannot write {}: {e}", partial.display())))?;
    std::fs::rename(&partial, manifest)
        .map_err(|e| XtaskError(format!("cannot write {}: {e}", manifest.display())))?;
    let _ = std::fs::remove_dir_all(&scratch);
    println!(
        "xtask: lavapipe from mesa-vulkan-drivers {} ready: {}",
        package.version,
        manifest.display()
    );
    Ok(())
}

/// `curl` `url` into `to`, failing on HTTP errors.
fn download(url: &str, to: &Path) -> Result<()> {
    let mut curl = Command::new("curl");
    curl.args([
        "--fail",
        "--silent",
        "--show-error",
        "--location",
        "--retry",
        "3",
        "--connect-timeout",
        "20",
        "--output",
    ])
    .arg(to)
    .arg(url);
    quiet_step(&format!("download {url}"), &mut curl)
}

/// Runs `command`, its output shown only when it fails.
fn quiet_step(name: &str, command: &mut Command) -> Result<()> {
    let out = command.output().map_err(|e| {
        XtaskError(format!(
            "{name}: cannot start {:?}: {e}",
            command.get_program()
        ))
    })?;
    if out.status.success() {
        Ok(())
    } else {
        fail(format!(
            "{name} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| XtaskError(format!("cannot read {}: {e}", path.display())))
}

fn check_sha256(path: &Path, expected: &str) -> Result<()> {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .map_err(|e| XtaskError(format!("cannot run sha256sum: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let got = text.split_whitespace().next().unwrap_or("");
    if out.status.success() && got.eq_ignore_ascii_case(expected) {
        Ok(())
    } else {
        fail(format!(
            "{}: SHA-256 {got:?}, the signed index says {expected}",
            path.display()
        ))
    }
}

/// The first file named `name` under `dir`.
fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            if let Some(found) = find_file(&path, name) {
                return Some(found);
            }
        } else if file_name(&path) == name {
            return Some(path);
        }
    }
    None
}

/// The SHA-256 and size a Release file's `SHA256:` section gives `path`.
fn release_sha256(release: &str, path: &str) -> Option<(String, u64)> {
    let mut in_sha256 = false;
    for line in release.lines() {
        if !line.starts_with(' ') {
            in_sha256 = line.trim_end() == "SHA256:";
            continue;
        }
        if !in_sha256 {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let [sha, size, name] = fields[..] {
            if name == path {
                return Some((sha.to_string(), size.parse().ok()?));
            }
        }
    }
    None
}

/// One package of a `Packages` index.
#[derive(Debug, PartialEq, Eq)]
struct PackageEntry {
    version: String,
    filename: String,
    sha256: String,
}

/// The stanzas of a `Packages` index for `package`.
fn packages_stanzas(index: &str, package: &str) -> Vec<PackageEntry> {
    let mut out = Vec::new();
    for stanza in index.split("\n\n") {
        let field = |name: &str| {
            stanza.lines().find_map(|l| {
                l.strip_prefix(name)
                    .and_then(|r| r.strip_prefix(':'))
                    .map(|v| v.trim().to_string())
            })
        };
        if field("Package").as_deref() != Some(package) {
            continue;
        }
        if let (Some(version), Some(filename), Some(sha256)) =
            (field("Version"), field("Filename"), field("SHA256"))
        {
            out.push(PackageEntry {
                version,
                filename,
                sha256,
            });
        }
    }
    out
}

/// Whether Debian version `a` is newer than `b` (`dpkg --compare-versions`).
fn debian_version_newer(a: &str, b: &str) -> bool {
    Command::new("dpkg")
        .args(["--compare-versions", a, "gt", b])
        .status()
        .is_ok_and(|s| s.success())
}

/// The value of an ICD manifest's `"library_path"`.
fn icd_library_path(json: &str) -> Option<String> {
    let (start, end) = library_path_span(json)?;
    Some(json[start..end].to_string())
}

/// The manifest with its `"library_path"` value replaced by `path` (JSON-escaped).
fn with_icd_library_path(json: &str, path: &str) -> Option<String> {
    let (start, end) = library_path_span(json)?;
    let mut escaped = String::new();
    for c in path.chars() {
        match c {
            '"' => escaped.push_str("\\\""),
            '\\' => escaped.push_str("\\\\"),
            c if (c as u32) < 0x20 => escaped.push_str(&format!("\\u{:04x}", c as u32)),
            c => escaped.push(c),
        }
    }
    Some(format!("{}{escaped}{}", &json[..start], &json[end..]))
}

/// Byte range of the `"library_path"` string value (between its quotes; the
/// shipped manifests hold no escapes there).
fn library_path_span(json: &str) -> Option<(usize, usize)> {
    let key = json.find("\"library_path\"")? + "\"library_path\"".len();
    let colon = key + json[key..].find(':')?;
    let open = colon + 1 + json[colon + 1..].find('"')? + 1;
    let close = open + json[open..].find('"')?;
    json[colon + 1..open - 1]
        .trim()
        .is_empty()
        .then_some((open, close))
}

fn package_installed(name: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${db:Status-Abbrev}", name])
        .output()
        .map(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).starts_with("ii"))
        .unwrap_or(false)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_driver_and_passthrough() {
        let inv = parse(args(&[
            "demo", "--driver", "system", "--frames", "3", "--", "--driver", "x",
        ]))
        .unwrap();
        assert_eq!(inv.command, "demo");
        assert_eq!(inv.driver, Driver::System);
        assert_eq!(inv.rest, args(&["--frames", "3", "--driver", "x"]));
    }

    #[test]
    fn parses_driver_equals_and_manifest() {
        let inv = parse(args(&["test", "--driver=/x/lvp_icd.x86_64.json"])).unwrap();
        assert_eq!(
            inv.driver,
            Driver::Manifest(PathBuf::from("/x/lvp_icd.x86_64.json"))
        );
        assert!(inv.rest.is_empty());
    }

    #[test]
    fn rejects_unknown_driver() {
        assert!(parse(args(&["test", "--driver", "nvidia"])).is_err());
        assert!(parse(args(&["test", "--driver"])).is_err());
    }

    #[test]
    fn parses_test_options() {
        let options = parse_test_options(&args(&["--keep-going", "--release"])).unwrap();
        assert_eq!(
            options,
            TestOptions {
                keep_going: true,
                release: true
            }
        );
        assert!(parse_test_options(&args(&["stress"])).is_err());
    }

    #[test]
    fn parses_fuzz_seconds() {
        assert_eq!(parse_fuzz_seconds(&[]).unwrap(), FUZZ_SECONDS);
        assert_eq!(
            parse_fuzz_seconds(&args(&["--seconds", "300"])).unwrap(),
            300
        );
        assert!(parse_fuzz_seconds(&args(&["--seconds", "0"])).is_err());
        assert!(parse_fuzz_seconds(&args(&["--seconds"])).is_err());
        assert!(parse_fuzz_seconds(&args(&["300"])).is_err());
    }

    #[test]
    fn bench_arguments_after_the_separator_reach_the_bench() {
        let inv = parse(args(&[
            "bench",
            "--",
            "--corpus",
            "--corpus-seed",
            "7",
            "--defrag",
        ]))
        .unwrap();
        assert_eq!(
            inv.rest,
            args(&["--corpus", "--corpus-seed", "7", "--defrag"])
        );
    }

    #[test]
    fn release_sha256_reads_the_sha256_section() {
        let release = "Origin: Debian\nMD5Sum:\n 0123 10 main/binary-amd64/Packages.xz\n\
                       SHA256:\n abcd 300 main/binary-arm64/Packages.xz\n \
                       b74b 300424 main/binary-amd64/Packages.xz\n";
        assert_eq!(
            release_sha256(release, "main/binary-amd64/Packages.xz"),
            Some(("b74b".to_string(), 300424))
        );
        assert_eq!(
            release_sha256(release, "main/binary-i386/Packages.xz"),
            None
        );
    }

    #[test]
    fn packages_stanzas_pick_the_package() {
        let index = "Package: mesa-vulkan-drivers-dbg\nVersion: 1\nFilename: a.deb\nSHA256: 11\n\n\
                     Package: mesa-vulkan-drivers\nSource: mesa\nVersion: 25.0.7-2~bpo12+1\n\
                     Filename: pool/main/m/mesa/m.deb\nSize: 3\nSHA256: 22\n\n";
        assert_eq!(
            packages_stanzas(index, "mesa-vulkan-drivers"),
            vec![PackageEntry {
                version: "25.0.7-2~bpo12+1".to_string(),
                filename: "pool/main/m/mesa/m.deb".to_string(),
                sha256: "22".to_string(),
            }]
        );
        assert!(packages_stanzas(index, "libvulkan1").is_empty());
    }

    #[test]
    fn rewrites_the_icd_library_path() {
        let shipped = "{\n    \"ICD\": {\n        \"api_version\": \"1.4.305\",\n        \
                       \"library_path\": \"libvulkan_lvp.so\"\n    },\n    \"file_format_version\": \"1.0.0\"\n}";
        assert_eq!(
            icd_library_path(shipped).as_deref(),
            Some("libvulkan_lvp.so")
        );
        let rewritten = with_icd_library_path(shipped, "/t/a \"b\"/libvulkan_lvp.so").unwrap();
        assert!(rewritten.contains("\"library_path\": \"/t/a \\\"b\\\"/libvulkan_lvp.so\""));
        assert!(rewritten.contains("\"api_version\": \"1.4.305\""));
        assert_eq!(with_icd_library_path("{}", "/x"), None);
    }

    #[test]
    fn defaults_to_lavapipe_choice() {
        let inv = parse(args(&["bench"])).unwrap();
        assert_eq!(inv.driver, Driver::Default);
    }
}
