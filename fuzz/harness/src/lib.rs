//! The bodies of the fuzz targets, as library functions: the input each
//! decodes, the operations it runs and the checks after each one. The
//! libFuzzer targets in `fuzz/fuzz_targets/` and `fuzz/ktx2/` are one line
//! each around these; `tests/corpus.rs` replays every committed corpus file
//! through the same functions as an ordinary test, with neither cargo-fuzz
//! nor a sanitizer build (see RELIABILITY.md).
//!
//! With `VKALLOC_FUZZ_STATS=1` in the environment a target prints, when the
//! process exits, how many inputs it ran and how many operations they held:
//! `vkalloc-fuzz: <target>: <inputs> inputs, <ops> operations`, then how
//! often each event a target [`note`]s happened (what the inputs reached).

#[cfg(feature = "allocator")]
pub mod allocator_defrag;
#[cfg(feature = "allocator")]
pub mod allocator_sim;
#[cfg(feature = "allocator")]
pub mod handle;
#[cfg(feature = "allocator")]
pub mod interpreter;
#[cfg(feature = "ktx2")]
pub mod ktx2;
#[cfg(feature = "allocator")]
pub mod ops;
#[cfg(feature = "allocator")]
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

/// The value libFuzzer's `fuzz_target!` would hand a target for `bytes`:
/// `None` where it would skip the input (shorter than the type's smallest
/// encoding, or not decodable).
#[cfg(feature = "allocator")]
pub fn decode<T: for<'a> arbitrary::Arbitrary<'a>>(bytes: &[u8]) -> Option<T> {
    if bytes.len() < T::size_hint(0).0 {
        return None;
    }
    T::arbitrary_take_rest(arbitrary::Unstructured::new(bytes)).ok()
}
