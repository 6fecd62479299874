//! Shared parts of the vkalloc fuzz targets: operation counting, the
//! range-allocator driver and the allocator targets' handles.
//!
//! With `VKALLOC_FUZZ_STATS=1` in the environment a target prints, when the
//! process exits, how many inputs it ran and how many operations they held:
//! `vkalloc-fuzz: <target>: <inputs> inputs, <ops> operations`, then how
//! often each event a target [`note`]s happened (what the inputs reached).

pub mod handle;
pub mod range;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once, OnceLock};

static INPUTS: AtomicU64 = AtomicU64::new(0);
static OPS: AtomicU64 = AtomicU64::new(0);
static TARGET: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
static REGISTER: Once = Once::new();
static EVENTS: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

/// Whether `VKALLOC_FUZZ_STATS` is set.
fn stats_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("VKALLOC_FUZZ_STATS").is_some())
}

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
    // `try_lock`: at exit, never wait for a lock (a panic may have left it).
    if let Ok(events) = EVENTS.try_lock() {
        for (event, n) in events.iter() {
            eprintln!("vkalloc-fuzz:   {event}: {n}");
        }
    }
}

/// Counts one `event` (printed at exit with the counts, only with
/// `VKALLOC_FUZZ_STATS` set; otherwise a load and a branch).
pub fn note(event: &'static str) {
    if stats_on() {
        if let Ok(mut events) = EVENTS.lock() {
            *events.entry(event).or_default() += 1;
        }
    }
}

/// Counts one input of `target` that ran `ops` operations.
pub fn count(target: &'static str, ops: u64) {
    REGISTER.call_once(|| {
        if stats_on() {
            let _ = TARGET.set(target);
            // SAFETY: `atexit` is the C library's; `print_counts` is an
            // `extern "C" fn()` that only reads atomics and, without waiting,
            // the events' map, and writes to stderr, all of which stay valid
            // until the process ends.
            unsafe {
                atexit(print_counts);
            }
        }
    });
    INPUTS.fetch_add(1, Ordering::Relaxed);
    OPS.fetch_add(ops, Ordering::Relaxed);
}
