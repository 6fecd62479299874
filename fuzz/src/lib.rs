//! Shared parts of the vkalloc fuzz targets: operation counting and the
//! range-allocator driver.
//!
//! With `VKALLOC_FUZZ_STATS=1` in the environment a target prints, when the
//! process exits, how many inputs it ran and how many operations they held:
//! `vkalloc-fuzz: <target>: <inputs> inputs, <ops> operations`.

pub mod range;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

static INPUTS: AtomicU64 = AtomicU64::new(0);
static OPS: AtomicU64 = AtomicU64::new(0);
static TARGET: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
static REGISTER: Once = Once::new();

extern "C" {
    fn atexit(callback: extern "C" fn()) -> i32;
}

extern "C" fn print_counts() {
    eprintln!(
        "vkalloc-fuzz: {}: {} inputs, {} operations",
        TARGET.get().copied().unwrap_or("?"),
        INPUTS.load(Ordering::Relaxed),
        OPS.load(Ordering::Relaxed)
    );
}

/// Counts one input of `target` that ran `ops` operations.
pub fn count(target: &'static str, ops: u64) {
    REGISTER.call_once(|| {
        if std::env::var_os("VKALLOC_FUZZ_STATS").is_some() {
            let _ = TARGET.set(target);
            // SAFETY: `atexit` is the C library's; `print_counts` is an
            // `extern "C" fn()` that only reads atomics and writes to stderr,
            // which stays valid until the process ends.
            unsafe {
                atexit(print_counts);
            }
        }
    });
    INPUTS.fetch_add(1, Ordering::Relaxed);
    OPS.fetch_add(ops, Ordering::Relaxed);
}
