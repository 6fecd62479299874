//! A step of `cargo xtask test` that runs alongside the others: the MSRV
//! step (its own compiler, its own target directory, no lock shared with
//! the workspace's build). Its output goes to a log file and is printed, in
//! full, where the step stands in the order, so the command's output reads as
//! if the steps had run one after the other.
//!
//! On two cores the other steps leave a core idle for long stretches (the
//! one large crate that compiles alone, links, tests that run one at a
//! time); the background step fills them.

use std::fs::File;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{fail, seconds, Result, XtaskError};

/// A step started in the background; killed if dropped before [`finish`].
///
/// [`finish`]: Background::finish
pub(crate) struct Background {
    name: String,
    /// The child's id, which is also its process group's.
    pid: u32,
    /// Waits for the child: its exit status and when it ended (the step's
    /// own duration, whenever [`finish`](Background::finish) is called).
    waiter: Option<JoinHandle<std::io::Result<(ExitStatus, Instant)>>>,
    log: PathBuf,
    started: Instant,
    /// The write end of the child's stdin, never written: it closes when
    /// this process ends however it ends (Ctrl-C included), and a child
    /// started with [`STOP_WITH_PARENT`] stops then ([`stop_with_parent`]).
    _parent_alive: Option<ChildStdin>,
}

/// The argument that makes a background `xtask` subcommand stop, with the
/// cargo and rustc it started, when the `xtask test` that started it ends
/// ([`stop_with_parent`]).
pub(crate) const STOP_WITH_PARENT: &str = "--stop-with-parent";

/// In a step started by [`Background::start`]: a thread that reads stdin
/// (the parent's pipe, never written) and, at its end (the parent is gone,
/// killed by Ctrl-C or a failure), stops this process's group: this step
/// and what it started. Without it an interrupted `cargo xtask test` left
/// the MSRV build running, writing into the next run's log.
pub(crate) fn stop_with_parent() {
    std::thread::spawn(|| {
        let mut stdin = std::io::stdin();
        let mut sink = [0u8; 64];
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        // Our process group is our pid: `Background::start` made it so.
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", std::process::id())])
            .stderr(Stdio::null())
            .status();
        std::process::exit(130);
    });
}

impl Background {
    /// Starts `command` with its output (stdout and stderr) in `log`.
    pub(crate) fn start(name: &str, command: &mut Command, log: &Path) -> Result<Self> {
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| XtaskError(format!("cannot create {}: {e}", dir.display())))?;
        }
        let out = File::create(log)
            .map_err(|e| XtaskError(format!("cannot create {}: {e}", log.display())))?;
        let err = out
            .try_clone()
            .map_err(|e| XtaskError(format!("cannot share {}: {e}", log.display())))?;
        let mut child = command
            // A process group of its own, so that stopping it stops the
            // cargo and rustc it started too.
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| {
                XtaskError(format!(
                    "{name}: cannot start {:?}: {e}",
                    command.get_program()
                ))
            })?;
        println!(
            "\n==> {name}: started in the background (output in {}, shown once the steps \
             before it are done)",
            log.display()
        );
        let started = Instant::now();
        let pid = child.id();
        let parent_alive = child.stdin.take();
        let waiter = std::thread::spawn(move || child.wait().map(|s| (s, Instant::now())));
        Ok(Self {
            name: name.to_string(),
            pid,
            waiter: Some(waiter),
            log: log.to_path_buf(),
            started,
            _parent_alive: parent_alive,
        })
    }

    /// Waits for the step, prints its output, and fails with its name if it
    /// failed. The duration is from its start to its end, so it overlaps the
    /// other steps'.
    pub(crate) fn finish(mut self) -> Result<Duration> {
        let waited = Instant::now();
        let Some(waiter) = self.waiter.take() else {
            return fail(format!("{}: already finished", self.name));
        };
        let (status, ended) = match waiter.join() {
            Ok(Ok(done)) => done,
            Ok(Err(e)) => return fail(format!("{}: cannot wait for it: {e}", self.name)),
            Err(_) => return fail(format!("{}: its waiting thread panicked", self.name)),
        };
        let elapsed = ended.duration_since(self.started);
        let output = std::fs::read_to_string(&self.log)
            .unwrap_or_else(|e| format!("(cannot read {}: {e})", self.log.display()));
        println!(
            "\n==> {}: ran in the background (its last {} were waited for); its output:",
            self.name,
            seconds(waited.elapsed())
        );
        print!("{output}");
        if status.success() {
            println!("==> {}: ok ({})", self.name, seconds(elapsed));
            Ok(elapsed)
        } else {
            fail(format!(
                "step `{}` failed ({status}) after {}",
                self.name,
                seconds(elapsed)
            ))
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(waiter) = self.waiter.take() {
            // An earlier step failed: the command stops here, and so does this
            // step: its process group (our child and what it started).
            let _ = Command::new("kill")
                .args(["-TERM", "--", &format!("-{}", self.pid)])
                .stderr(Stdio::null())
                .status();
            let _ = waiter.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        std::env::temp_dir()
            .join(format!("xtask-background-{}", std::process::id()))
            .join(name)
    }

    #[test]
    fn a_step_that_passes_or_fails_says_so() {
        let log = scratch("pass.log");
        let mut ok = Command::new("sh");
        ok.args(["-c", "echo out; echo err >&2"]);
        let step = Background::start("passes", &mut ok, &log).unwrap();
        step.finish().unwrap();
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("out") && text.contains("err"), "{text:?}");

        let mut bad = Command::new("sh");
        bad.args(["-c", "exit 3"]);
        let step = Background::start("fails", &mut bad, &scratch("fail.log")).unwrap();
        let err = step.finish().unwrap_err().to_string();
        assert!(err.contains("step `fails` failed"), "{err}");
    }

    #[test]
    fn dropping_a_step_stops_it_and_what_it_started() {
        let marker = scratch("late");
        let _ = std::fs::remove_file(&marker);
        let mut slow = Command::new("sh");
        // The grandchild would write the marker after a second.
        slow.arg("-c")
            .arg(format!("(sleep 1; touch {}) & wait", marker.display()));
        let step = Background::start("stopped", &mut slow, &scratch("drop.log")).unwrap();
        drop(step);
        std::thread::sleep(Duration::from_millis(1500));
        assert!(!marker.exists(), "the grandchild outlived the step");
    }
}
