//! A fine-grained clock for timing single allocator operations.
//!
//! `Instant::now()` ticks in steps of 10 ns or more on some machines (seen on
//! a KVM guest with the TSC clocksource), too coarse for operations of
//! 50–200 ns. Where the CPU has an invariant time-stamp counter (x86-64 with
//! CPUID 0x8000_0007 EDX bit 8) this reads `rdtsc` instead (≈0.4 ns per tick
//! at 2.6 GHz) and converts ticks to nanoseconds with a ratio calibrated
//! against `Instant`; elsewhere it falls back to `Instant`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

static USE_TSC: AtomicBool = AtomicBool::new(false);

struct Calibration {
    ns_per_tick: f64,
    source: &'static str,
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

#[cfg(target_arch = "x86_64")]
fn has_invariant_tsc() -> bool {
    use std::arch::x86_64::__cpuid;
    // SAFETY: CPUID exists on every x86-64 CPU; leaf 0x8000_0000 reports the
    // highest extended leaf, checked before leaf 0x8000_0007 is read. (Newer
    // compilers declare `__cpuid` safe, hence the allow.)
    #[allow(unused_unsafe)]
    unsafe {
        let max_ext = __cpuid(0x8000_0000).eax;
        max_ext >= 0x8000_0007 && (__cpuid(0x8000_0007).edx & (1 << 8)) != 0
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn has_invariant_tsc() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tsc() -> u64 {
    // SAFETY: RDTSC has no preconditions on x86-64.
    unsafe { std::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn tsc() -> u64 {
    0
}

fn calibration() -> &'static Calibration {
    static CAL: OnceLock<Calibration> = OnceLock::new();
    CAL.get_or_init(|| {
        let _ = epoch();
        if !has_invariant_tsc() {
            return Calibration {
                ns_per_tick: 1.0,
                source: "Instant",
            };
        }
        let (i0, t0) = (Instant::now(), tsc());
        std::thread::sleep(Duration::from_millis(50));
        let (i1, t1) = (Instant::now(), tsc());
        let ticks = t1.wrapping_sub(t0);
        if ticks == 0 {
            return Calibration {
                ns_per_tick: 1.0,
                source: "Instant",
            };
        }
        USE_TSC.store(true, Ordering::Relaxed);
        Calibration {
            ns_per_tick: (i1 - i0).as_nanos() as f64 / ticks as f64,
            source: "rdtsc",
        }
    })
}

/// Calibrates the clock (once; takes ~50 ms). Call before timing anything.
pub fn init() {
    let _ = calibration();
}

/// The current time in ticks (see [`ticks_to_ns`]).
#[inline(always)]
pub fn now() -> u64 {
    if USE_TSC.load(Ordering::Relaxed) {
        tsc()
    } else {
        epoch().elapsed().as_nanos() as u64
    }
}

/// Nanoseconds in `ticks`.
pub fn ticks_to_ns(ticks: f64) -> f64 {
    ticks * calibration().ns_per_tick
}

/// `"rdtsc"` or `"Instant"`, and nanoseconds per tick.
pub fn describe() -> String {
    let c = calibration();
    format!("{} ({:.3} ns per tick)", c.source, c.ns_per_tick)
}
