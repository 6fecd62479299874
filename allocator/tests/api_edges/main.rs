//! The public API at its edges, grouped by concern (one module each):
//! probes that safe code (no `unsafe` in the caller) can't cause undefined
//! behaviour, panics, overflows, leaks or lost allocations. Every test
//! asserts the behaviour that is right; a failing test is a defect.
//!
//! Written from outside (2026-12-03): the defects they found are fixed (a
//! pool destroyed under an allocation in flight, mappings that died with a
//! simulated device the allocator owned, a safe device trait, unchecked
//! sums, alias members sharing a granularity page, debug panics of the
//! public range allocators). Probes whose failure mode is a crash (a use
//! after free, a panic inside `Drop`) run their body in a child process
//! (`in_child`), so that the crash fails that one test instead of killing
//! the whole test binary.

mod alias_groups;
mod defrag_sessions;
mod huge_sizes;
mod mapped_memory;
mod pools;
mod range_allocators;

use std::sync::Arc;

use vkalloc::sim::SimDevice;
use vkalloc::{AllocationDesc, AllocationOptions, Allocator, MemoryUsage, ResourceKind};

const MIB: u64 = 1 << 20;

/// The end of a probe: nothing leaked, every memory object freed, no
/// misuse of the simulated device.
fn assert_clean_end(sim: &Arc<SimDevice>, allocator: Allocator<Arc<SimDevice>>) {
    let report = allocator.destroy();
    assert!(report.is_empty(), "{report}");
    assert_eq!(sim.live_objects(), 0);
    assert_eq!(sim.violations(), 0, "{:?}", sim.violation_log());
}

/// Runs `body` in a child process (this test binary, filtered to the test
/// whose name contains `test`), and fails unless the child exits cleanly
/// with that one test passed. Inside the child, runs `body`.
fn in_child(test: &str, body: impl FnOnce()) {
    const VAR: &str = "VKALLOC_ADVERSARY_CHILD";
    if std::env::var(VAR).as_deref() == Ok(test) {
        body();
        return;
    }
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--nocapture", "--test-threads=1"])
        .env(VAR, test)
        .output()
        .expect("spawn the child test");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{test}: the child died or failed: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
}

fn desc(size: u64, usage: MemoryUsage) -> AllocationDesc<'static> {
    AllocationDesc {
        size,
        alignment: 16,
        kind: ResourceKind::Buffer,
        options: AllocationOptions::usage(usage),
        ..AllocationDesc::default()
    }
}
