//! Criterion micro-benchmarks of the range allocators' hot paths, with VMA's
//! virtual blocks beside them for scale:
//!
//! - `tlsf/alloc_free`: one allocate and one free in a 256 MiB block holding
//!   4,096 live allocations of mixed sizes (steady state: the pair leaves
//!   the block as it found it).
//! - `tlsf/alloc_free_aligned_4k`: the same with 4 KiB alignment.
//! - `linear/stack_256_then_clear`: 256 allocations then a clear (a frame).
//! - `linear/ring_alloc_free`: one allocate and one free of the oldest in a
//!   ring holding 512 allocations.
//!
//! `cargo bench -p bench --bench range`

use std::hint::black_box;

use bench::range_bench::{OursRange, RangeContender, VmaVirtual};
use criterion::{criterion_group, criterion_main, Criterion};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vkalloc::range::{LinearAllocator, LinearMode, TlsfAllocator};

const BLOCK: u64 = 256 << 20;

fn sizes(n: usize, lo: u64, hi: u64, seed: u64) -> Vec<u64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let s = rng.gen_range((lo as f64).ln()..=(hi as f64).ln()).exp() as u64;
            s.clamp(lo, hi)
        })
        .collect()
}

/// Fills `c` with 4,096 allocations, frees every other one (so the block
/// has holes of many sizes), then times allocate + free pairs.
fn steady_pair<C: RangeContender>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: &str,
    mut c: C,
    alignment: u64,
) {
    let fill = sizes(8192, 256, 64 << 10, 1);
    let mut live = Vec::new();
    for (i, &s) in fill.iter().enumerate() {
        let h = c.alloc(s, 256).expect("fill fits");
        if i % 2 == 0 {
            c.free(h);
        } else {
            live.push(h);
        }
    }
    let req = sizes(1024, 256, 64 << 10, 2);
    let mut i = 0;
    group.bench_function(id, |b| {
        b.iter(|| {
            let s = req[i & 1023];
            i += 1;
            let h = c.alloc(black_box(s), alignment).expect("fits");
            c.free(black_box(h));
        })
    });
    for h in live {
        c.free(h);
    }
}

fn tlsf(cr: &mut Criterion) {
    let mut g = cr.benchmark_group("tlsf");
    steady_pair(
        &mut g,
        "alloc_free/ours",
        OursRange(TlsfAllocator::new(BLOCK, 1)),
        64,
    );
    steady_pair(&mut g, "alloc_free/vma", VmaVirtual::new(BLOCK, false), 64);
    steady_pair(
        &mut g,
        "alloc_free_aligned_4k/ours",
        OursRange(TlsfAllocator::new(BLOCK, 1)),
        4096,
    );
    steady_pair(
        &mut g,
        "alloc_free_aligned_4k/vma",
        VmaVirtual::new(BLOCK, false),
        4096,
    );
    g.finish();
}

fn stack_frame<C: RangeContender>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: &str,
    mut c: C,
) {
    let req = sizes(256, 64, 16 << 10, 3);
    group.bench_function(id, |b| {
        b.iter(|| {
            for &s in &req {
                black_box(c.alloc(black_box(s), 256).expect("fits"));
            }
            c.clear();
        })
    });
}

fn ring<C: RangeContender>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: &str,
    mut c: C,
) {
    let req = sizes(1024, 64, 16 << 10, 4);
    let mut window = std::collections::VecDeque::new();
    for &s in req.iter().take(512) {
        window.push_back(c.alloc(s, 256).expect("fits"));
    }
    let mut i = 0;
    group.bench_function(id, |b| {
        b.iter(|| {
            let oldest = window.pop_front().expect("window");
            c.free(oldest);
            let s = req[i & 1023];
            i += 1;
            window.push_back(c.alloc(black_box(s), 256).expect("fits"));
        })
    });
    for h in window {
        c.free(h);
    }
}

fn linear(cr: &mut Criterion) {
    let mut g = cr.benchmark_group("linear");
    stack_frame(
        &mut g,
        "stack_256_then_clear/ours",
        OursRange(LinearAllocator::new(BLOCK, LinearMode::Stack, 1)),
    );
    stack_frame(
        &mut g,
        "stack_256_then_clear/vma",
        VmaVirtual::new(BLOCK, true),
    );
    ring(
        &mut g,
        "ring_alloc_free/ours",
        OursRange(LinearAllocator::new(16 << 20, LinearMode::Ring, 1)),
    );
    ring(
        &mut g,
        "ring_alloc_free/vma",
        VmaVirtual::new(16 << 20, true),
    );
    g.finish();
}

criterion_group!(benches, tlsf, linear);
criterion_main!(benches);
