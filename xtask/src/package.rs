//! The published form of `vkalloc`, tested as a crates.io user gets it.
//!
//! - [`package_step`]: `cargo package`, the `.crate` unpacked under
//!   `target/xtask/package/` (the workspace excludes `target/`, so cargo sees
//!   a crate of its own there), then `cargo test` with the default features
//!   and with all of them, examples and doctests included.
//! - [`msrv_step`]: the same crate built, and its unit tests run, with Rust
//!   1.85 (vkalloc's `rust-version`): Debian bookworm's `rustc-web` and
//!   `cargo-web`, fetched with `apt-get download` and unpacked with `dpkg -x`
//!   under `target/xtask/rust-1.85/`, never installed (they would replace
//!   `/usr/bin/cargo` and `rustc`). Dependencies resolve as they would for a
//!   user on 1.85: the newest versions whose `rust-version` allows it.
//!
//! The package step builds in the workspace's target directory, with the
//! workspace's test profile: the dependencies whose versions and features
//! match the workspace's test build (the shipped lock file holds the same
//! versions) are not compiled a second time. The MSRV step keeps a target
//! directory of its own under `target/xtask/` (another compiler). The
//! unpacked crate is replaced only when the package changed, so a second run
//! rebuilds nothing.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{cargo, fail, is_root, quiet_step, run_step, target_dir, Result, XtaskError};

/// The package checked.
const CRATE: &str = "vkalloc";
/// Its manifest, for the version.
const MANIFEST: &str = "allocator/Cargo.toml";
/// The workspace's manifest, for its test profile.
const WORKSPACE_MANIFEST: &str = "Cargo.toml";

/// vkalloc's `rust-version`, and the Debian packages of that compiler.
const MSRV: &str = "1.85";
/// The version of bookworm's `rustc-web` 1.85 (bookworm-security now has a
/// newer one under the same names, so the version is pinned).
const MSRV_DEBIAN_VERSION: &str = "1.85.0+dfsg3-1~deb12u3";
/// (package, pinned to [`MSRV_DEBIAN_VERSION`]): the compiler, cargo and the
/// standard library, then libraries they link that a machine with only the
/// project's packages lacks (taken at whatever version apt offers).
const MSRV_PACKAGES: &[(&str, bool)] = &[
    ("rustc-web", true),
    ("cargo-web", true),
    ("libstd-rust-web-1.85", true),
    ("libstd-rust-web-dev", true),
    ("libllvm19", false),
    ("libhttp-parser2.9", false),
    ("libpcre3", false),
];

/// A `cargo xtask` subcommand as a command of its own, for the test steps.
pub(crate) fn self_command(subcommand: &str) -> Command {
    let exe = env::current_exe().unwrap_or_else(|_| PathBuf::from("xtask"));
    let mut command = Command::new(exe);
    command.arg(subcommand);
    command
}

/// `cargo xtask package`: see the module documentation.
pub(crate) fn package_step() -> Result<()> {
    let crate_file = package()?;
    // The shipped Cargo.lock (the workspace's versions) is used as it is.
    let (source, _) = unpack(&crate_file, &target_dir().join("xtask").join("package"))?;
    // The workspace's target directory: the unpacked crate is a workspace of
    // its own (vkalloc itself is built anew, from its new path), but its
    // dependencies are the workspace's units wherever their features agree
    // (ash, the largest, among them).
    let target = target_dir();
    let profile = workspace_profile(&target.join("xtask").join("package"))?;
    for features in [None, Some("--all-features")] {
        let mut test = cargo();
        test.current_dir(&source)
            .env("CARGO_TARGET_DIR", &target)
            .args(["test", "--locked", "--config"])
            .arg(&profile)
            .args(features);
        line_tables_only(&mut test);
        let name = format!(
            "packaged {CRATE}: cargo test {}",
            features.unwrap_or("(default features)")
        );
        run_step(&name, &mut test)?;
    }
    Ok(())
}

/// `cargo xtask msrv`: see the module documentation.
pub(crate) fn msrv_step() -> Result<()> {
    let toolchain = rust_msrv()?;
    let dir = target_dir().join("xtask").join(format!("rust-{MSRV}"));
    let crate_file = package()?;
    let (source, _) = unpack(&crate_file, &dir.join("crate"))?;
    let lock = source.join("Cargo.lock");
    // Written once the lock file is resolved for 1.85, inside the unpacked
    // crate (a new package replaces it): a run stopped between the unpacking
    // and the resolution (the step runs in the background, and an earlier
    // step's failure stops it) resolves again instead of building with the
    // shipped lock file.
    let resolved = source.join(".xtask-resolved-for-msrv");
    if !resolved.is_file() {
        // The shipped lock file holds the workspace's versions, resolved for
        // the newest compiler: a user on 1.85 resolves afresh, and versions
        // that need a newer compiler are passed over (proptest 1.12 needs
        // 1.88).
        let _ = std::fs::remove_file(&lock);
        let mut resolve = toolchain.cargo();
        resolve.current_dir(&source).arg("generate-lockfile");
        run_step(&format!("resolve for Rust {MSRV}"), &mut resolve)?;
        std::fs::write(&resolved, MSRV)
            .map_err(|e| XtaskError(format!("cannot write {}: {e}", resolved.display())))?;
    }
    let lock_text = std::fs::read_to_string(&lock)
        .map_err(|e| XtaskError(format!("cannot read {}: {e}", lock.display())))?;
    for dependency in ["proptest", "serde", "thiserror"] {
        if let Some(version) = locked_version(&lock_text, dependency) {
            println!("xtask: for Rust {MSRV}: {dependency} {version}");
        }
    }
    let target = dir.join("target");
    let mut build = toolchain.cargo();
    build
        .current_dir(&source)
        .env("CARGO_TARGET_DIR", &target)
        .args(["build", "--locked"]);
    msrv_profile(&mut build);
    run_step(&format!("Rust {MSRV}: cargo build"), &mut build)?;
    let mut test = toolchain.cargo();
    test.current_dir(&source)
        .env("CARGO_TARGET_DIR", &target)
        .args(["test", "--locked", "--lib", "--all-features"]);
    msrv_profile(&mut test);
    run_step(
        &format!("Rust {MSRV}: cargo test --lib --all-features"),
        &mut test,
    )?;
    Ok(())
}

/// The workspace's test profile for the unpacked crate (which ships no
/// profile), as a cargo configuration file written into `dir`: the
/// workspace manifest's `[profile.dev]` and `[profile.dev.*]` tables, given
/// to cargo with `--config`. Dependencies are optimized as in the workspace
/// (the property tests run several times faster), proc macros and
/// build-script helpers are not: the same profile as the workspace's test
/// build, so that its dependency units are reused. The crate itself is built
/// as a user's `cargo test` builds it. The path of the file.
fn workspace_profile(dir: &Path) -> Result<PathBuf> {
    let manifest = std::fs::read_to_string(WORKSPACE_MANIFEST)
        .map_err(|e| XtaskError(format!("cannot read {WORKSPACE_MANIFEST}: {e}")))?;
    let tables = dev_profile_tables(&manifest);
    if tables.is_empty() {
        return fail(format!(
            "{WORKSPACE_MANIFEST}: no [profile.dev] or [profile.dev.<...>] table header, so the \
             packaged crate's tests would not build with the workspace's test profile; write the \
             profile as table headers (not dotted keys under [profile]) in {WORKSPACE_MANIFEST} \
             and run the step again"
        ));
    }
    let path = dir.join("dev-profile.toml");
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&path, tables))
        .map_err(|e| XtaskError(format!("cannot write {}: {e}", path.display())))?;
    Ok(path)
}

/// The text of a manifest's `[profile.dev]` and `[profile.dev.<...>]` tables
/// (a cargo configuration file takes them as they are), comments included.
fn dev_profile_tables(manifest: &str) -> String {
    let mut inside = false;
    let mut tables = String::new();
    for line in manifest.lines() {
        let trimmed = line.trim();
        if let Some(header) = trimmed
            .strip_prefix('[')
            .and_then(|l| l.split(']').next())
            .filter(|_| !trimmed.starts_with("[["))
        {
            let header = header.trim();
            inside = header == "profile.dev" || header.starts_with("profile.dev.");
        }
        if inside {
            tables.push_str(line);
            tables.push('\n');
        }
    }
    tables
}

/// The MSRV step's profile: cargo's own (dependencies unoptimized: the
/// step builds more than it runs), line tables in vkalloc for backtraces and
/// none in the dependencies, as the workspace's profile has them (13% of the
/// default-features build: 39.1 CPU-seconds against 44.7, measured).
fn msrv_profile(command: &mut Command) {
    command.args(["--config", "profile.dev.package.\"*\".debug=false"]);
    line_tables_only(command);
}

/// Line tables for backtraces, not full debug information (which costs
/// about a quarter of a build), unless the caller's environment says
/// otherwise.
fn line_tables_only(command: &mut Command) {
    if env::var_os("CARGO_PROFILE_DEV_DEBUG").is_none() {
        command.env("CARGO_PROFILE_DEV_DEBUG", "line-tables-only");
    }
}

/// `cargo package` of [`CRATE`] without its own verification build (the
/// steps build the unpacked crate themselves); uncommitted changes are
/// packaged too, so the step tests the tree as it is. The path of the
/// `.crate`.
fn package() -> Result<PathBuf> {
    let manifest = std::fs::read_to_string(MANIFEST)
        .map_err(|e| XtaskError(format!("cannot read {MANIFEST}: {e}")))?;
    let Some(version) = package_version(&manifest) else {
        return fail(format!("{MANIFEST}: no `version = \"...\"` in [package]"));
    };
    let mut package = cargo();
    package.args(["package", "-p", CRATE, "--no-verify", "--allow-dirty"]);
    quiet_step(&format!("cargo package -p {CRATE}"), &mut package)?;
    let crate_file = target_dir()
        .join("package")
        .join(format!("{CRATE}-{version}.crate"));
    if crate_file.is_file() {
        Ok(crate_file)
    } else {
        fail(format!("cargo package made no {}", crate_file.display()))
    }
}

/// The `.crate` unpacked into `dir`: the directory of the unpacked crate, and
/// whether it was unpacked now. Replaced only when the `.crate` differs from
/// the one unpacked last time.
/// The archive's files all carry one fixed old date, so they are given the
/// time of unpacking (`tar -m`): cargo then rebuilds what changed. Checks
/// that cargo takes the unpacked crate as a workspace of its own.
fn unpack(crate_file: &Path, dir: &Path) -> Result<(PathBuf, bool)> {
    let stem = crate_file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let source = dir.join(&stem);
    let last = dir.join(format!("{stem}.crate"));
    let bytes = |path: &Path| std::fs::read(path).ok();
    let new = bytes(crate_file);
    let fresh = new.is_none() || new != bytes(&last) || !source.join("Cargo.toml").is_file();
    if fresh {
        let _ = std::fs::remove_dir_all(&source);
        let _ = std::fs::remove_file(&last);
        std::fs::create_dir_all(dir)
            .map_err(|e| XtaskError(format!("cannot create {}: {e}", dir.display())))?;
        let mut tar = Command::new("tar");
        tar.arg("-xzmf").arg(crate_file).arg("-C").arg(dir);
        quiet_step("tar -x", &mut tar)?;
        std::fs::copy(crate_file, &last)
            .map_err(|e| XtaskError(format!("cannot write {}: {e}", last.display())))?;
    }
    let out = cargo()
        .current_dir(&source)
        .args(["locate-project", "--workspace", "--message-format", "plain"])
        .output()
        .map_err(|e| XtaskError(format!("cannot run cargo locate-project: {e}")))?;
    let root = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || Path::new(&root) != source.join("Cargo.toml") {
        return fail(format!(
            "cargo does not take the unpacked {} as a crate of its own (workspace: {root:?}{}); \
             the workspace's `exclude` must cover target/",
            source.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok((source, fresh))
}

/// Rust [`MSRV`] from Debian's packages, unpacked.
struct Toolchain {
    root: PathBuf,
}

impl Toolchain {
    /// Its cargo, with its rustc and rustdoc and the libraries they link,
    /// resolving dependencies by `rust-version`.
    fn cargo(&self) -> Command {
        let mut command = Command::new(self.root.join("usr/bin/cargo"));
        command
            .env("RUSTC", self.root.join("usr/bin/rustc"))
            .env("RUSTDOC", self.root.join("usr/bin/rustdoc"))
            .env("LD_LIBRARY_PATH", self.library_path())
            .env("CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS", "fallback");
        command
    }

    fn library_path(&self) -> std::ffi::OsString {
        let arch = multiarch();
        let dirs = [
            self.root.join("usr/lib").join(&arch),
            self.root.join("lib").join(&arch),
        ];
        env::join_paths(dirs).unwrap_or_default()
    }

    /// `rustc -vV` says [`MSRV`] and `cargo -V` runs.
    fn check(&self) -> Result<()> {
        let mut rustc = Command::new(self.root.join("usr/bin/rustc"));
        rustc.arg("-vV").env("LD_LIBRARY_PATH", self.library_path());
        let out = rustc.output().map_err(|e| {
            XtaskError(format!(
                "cannot run {}: {e}",
                self.root.join("usr/bin/rustc").display()
            ))
        })?;
        let text = String::from_utf8_lossy(&out.stdout);
        let release = format!("release: {MSRV}.");
        if !out.status.success() || !text.contains(&release) {
            return fail(format!(
                "the unpacked rustc does not run as Rust {MSRV}: {}{}",
                text.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let mut cargo = self.cargo();
        cargo.arg("-V");
        quiet_step(&format!("cargo {MSRV} -V"), &mut cargo)
    }
}

/// Rust [`MSRV`] under `target/xtask/rust-1.85/root`, fetched and unpacked
/// once (as the sparse lavapipe is): the `.deb`s into a scratch directory,
/// unpacked, then moved into place; later runs find it and fetch nothing.
fn rust_msrv() -> Result<Toolchain> {
    let dir = target_dir().join("xtask").join(format!("rust-{MSRV}"));
    let toolchain = Toolchain {
        root: dir.join("root"),
    };
    if toolchain.root.is_dir() && toolchain.check().is_ok() {
        return Ok(toolchain);
    }
    fetch_rust_msrv(&dir, &toolchain.root).map_err(|e| {
        XtaskError(format!(
            "cannot provision Rust {MSRV} (Debian bookworm's rustc-web and cargo-web \
             {MSRV_DEBIAN_VERSION}, to build vkalloc with its declared rust-version): {e}"
        ))
    })?;
    toolchain.check()?;
    Ok(toolchain)
}

fn fetch_rust_msrv(dir: &Path, root: &Path) -> Result<()> {
    println!(
        "\nxtask: fetching Rust {MSRV} (rustc-web, cargo-web {MSRV_DEBIAN_VERSION} and their \
         libraries, with apt-get download) into {} (once; unpacked, not installed)",
        dir.display()
    );
    if Command::new("apt-get").arg("--version").output().is_err() {
        return fail(
            "apt-get not found: the MSRV step takes Rust 1.85 from Debian bookworm's packages",
        );
    }
    if !pinned_available()? {
        if !is_root() {
            return fail(format!(
                "apt does not offer rustc-web {MSRV_DEBIAN_VERSION} (see `apt-cache policy \
                 rustc-web`); run `sudo apt-get update` (bookworm's main suite has it) and \
                 run the command again"
            ));
        }
        let mut update = Command::new("apt-get");
        update.args(["update", "-q"]);
        update.env("DEBIAN_FRONTEND", "noninteractive");
        run_step("apt-get update", &mut update)?;
        if !pinned_available()? {
            return fail(format!(
                "apt does not offer rustc-web {MSRV_DEBIAN_VERSION} even after `apt-get \
                 update`: this needs Debian 12 (bookworm) with its main suite in the apt \
                 sources (`apt-cache policy rustc-web` lists the versions it knows)"
            ));
        }
    }
    let scratch = dir.join("download");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)
        .map_err(|e| XtaskError(format!("cannot create {}: {e}", scratch.display())))?;
    let mut download = Command::new("apt-get");
    download.current_dir(&scratch).args(["download", "-q"]);
    if is_root() {
        // apt's unprivileged download user can't write under target/.
        download.args(["-o", "APT::Sandbox::User=root"]);
    }
    for &(package, pinned) in MSRV_PACKAGES {
        if pinned {
            download.arg(format!("{package}={MSRV_DEBIAN_VERSION}"));
        } else {
            download.arg(package);
        }
    }
    quiet_step("apt-get download", &mut download)?;

    let unpacked = scratch.join("root");
    let mut debs: Vec<PathBuf> = std::fs::read_dir(&scratch)
        .map_err(|e| XtaskError(format!("{}: {e}", scratch.display())))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    debs.sort();
    if debs.len() != MSRV_PACKAGES.len() {
        return fail(format!(
            "apt-get download left {} packages in {}, expected {}",
            debs.len(),
            scratch.display(),
            MSRV_PACKAGES.len()
        ));
    }
    for deb in &debs {
        let mut unpack = Command::new("dpkg-deb");
        unpack.arg("-x").arg(deb).arg(&unpacked);
        quiet_step(&format!("dpkg-deb -x {}", deb.display()), &mut unpack)?;
    }
    let _ = std::fs::remove_dir_all(root);
    std::fs::rename(&unpacked, root)
        .map_err(|e| XtaskError(format!("cannot move {}: {e}", unpacked.display())))?;
    let _ = std::fs::remove_dir_all(&scratch);
    println!("xtask: Rust {MSRV} ready under {}", root.display());
    Ok(())
}

/// Whether apt offers every pinned package at [`MSRV_DEBIAN_VERSION`].
fn pinned_available() -> Result<bool> {
    let mut madison = Command::new("apt-cache");
    madison.arg("madison");
    let pinned: Vec<&str> = MSRV_PACKAGES
        .iter()
        .filter(|(_, pinned)| *pinned)
        .map(|(name, _)| *name)
        .collect();
    madison.args(&pinned);
    let out = madison
        .output()
        .map_err(|e| XtaskError(format!("cannot run apt-cache: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(pinned
        .iter()
        .all(|name| madison_offers(&text, name, MSRV_DEBIAN_VERSION)))
}

/// Whether `apt-cache madison` output lists `package` at `version`.
fn madison_offers(madison: &str, package: &str, version: &str) -> bool {
    madison.lines().any(|line| {
        let fields: Vec<&str> = line.split('|').map(str::trim).collect();
        matches!(fields[..], [name, v, ..] if name == package && v == version)
    })
}

/// Debian's multiarch directory name (`x86_64-linux-gnu`).
fn multiarch() -> String {
    Command::new("dpkg-architecture")
        .arg("-qDEB_HOST_MULTIARCH")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| format!("{}-linux-gnu", env::consts::ARCH))
}

/// The `version` of a manifest's `[package]` table.
fn package_version(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
            continue;
        }
        if !in_package {
            continue;
        }
        if let Some(value) = line.strip_prefix("version") {
            let value = value.trim_start().strip_prefix('=')?.trim();
            return Some(value.strip_prefix('"')?.strip_suffix('"')?.to_string());
        }
    }
    None
}

/// The version of `name` in a `Cargo.lock` (the first, if several).
fn locked_version(lock: &str, name: &str) -> Option<String> {
    let wanted = format!("name = \"{name}\"");
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == wanted {
            let version = lines.next()?.trim().strip_prefix("version = \"")?;
            return Some(version.strip_suffix('"')?.to_string());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_package_version() {
        let manifest = "[package]\nname = \"vkalloc\"\nversion = \"0.1.0\"\n\n\
                        [dependencies]\nlog = { version = \"0.4\" }\n";
        assert_eq!(package_version(manifest).as_deref(), Some("0.1.0"));
        assert_eq!(package_version("[dependencies]\nversion = \"1\"\n"), None);
        assert_eq!(
            package_version("[package]\nversion.workspace = true\n"),
            None
        );
    }

    #[test]
    fn takes_the_dev_profile_tables() {
        let manifest = "[workspace]\nmembers = [\"a\"]\n\n[profile.dev]\ndebug = 1\n\n\
                        [profile.dev.package.\"*\"] # All.\nopt-level = 2\n\
                        [profile.dev.package.syn]\nopt-level = 0\n\n[profile.release]\n\
                        debug = 1\n[profile.devel]\nopt-level = 1\n[[bench]]\nname = \"b\"\n";
        assert_eq!(
            dev_profile_tables(manifest),
            "[profile.dev]\ndebug = 1\n\n[profile.dev.package.\"*\"] # All.\nopt-level = 2\n\
             [profile.dev.package.syn]\nopt-level = 0\n\n"
        );
        assert_eq!(dev_profile_tables("[package]\nname = \"x\"\n"), "");
        // Windows line ends, and spaces inside the brackets.
        assert_eq!(
            dev_profile_tables("[package]\r\nname = \"x\"\r\n[ profile.dev ]\r\ndebug = 0\r\n"),
            "[ profile.dev ]\ndebug = 0\n"
        );
    }

    #[test]
    fn madison_lines_name_package_and_version() {
        let text = "\
 rustc-web | 1.96.0+dfsg1-1~deb12u2 | http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
 rustc-web | 1.85.0+dfsg3-1~deb12u3 | http://deb.debian.org/debian bookworm/main amd64 Packages
 cargo-web | 1.96.0+dfsg1-1~deb12u2 | http://deb.debian.org/debian-security bookworm-security/main amd64 Packages";
        assert!(madison_offers(text, "rustc-web", "1.85.0+dfsg3-1~deb12u3"));
        assert!(!madison_offers(text, "cargo-web", "1.85.0+dfsg3-1~deb12u3"));
        assert!(!madison_offers(text, "rustc", "1.85.0+dfsg3-1~deb12u3"));
    }

    #[test]
    fn reads_a_locked_version() {
        let lock = "[[package]]\nname = \"proptest\"\nversion = \"1.11.0\"\nsource = \"x\"\n";
        assert_eq!(locked_version(lock, "proptest").as_deref(), Some("1.11.0"));
        assert_eq!(locked_version(lock, "serde"), None);
    }
}
