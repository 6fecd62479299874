//! The trace corpus: the generator is deterministic per seed, its traces
//! are valid and keep within their live budget, and a two-configuration
//! corpus with device-resolved requirements replays through all three
//! allocators on the first Vulkan device (lavapipe on CI).

use bench::contenders::CONTENDERS;
use bench::corpus::{self, budget_bytes, DeviceResolver, Synthetic};
use bench::replay::calibrate_timer_overhead;
use bench::runner::{bench_trace, RunConfig};
use bench::trace::{Scale, TraceEvent};
use bench::vkdev::VulkanContext;
use std::collections::HashMap;

const OPS: usize = 1_500;

/// Every free names a live allocation, and the live bytes stay within `budget`.
fn check_budget(trace: &bench::trace::Trace, budget: u64) {
    let summary = trace.validate().expect("a valid trace");
    assert!(
        summary.allocs > 0 && summary.frees > 0,
        "{}",
        trace.header.name
    );
    let mut live: HashMap<u64, u64> = HashMap::new();
    let mut bytes = 0u64;
    for e in &trace.events {
        match e {
            TraceEvent::Alloc(a) => {
                live.insert(a.id, a.size);
                bytes += a.size;
                assert!(
                    bytes <= budget,
                    "{}: {bytes} live bytes over the budget {budget}",
                    trace.header.name
                );
            }
            TraceEvent::Free { id } => bytes -= live.remove(id).expect("free of a live id"),
            TraceEvent::Frame { .. } => {}
        }
    }
}

#[test]
fn the_sample_and_its_traces_are_deterministic_per_seed() {
    let a = corpus::sample(7, 30);
    assert_eq!(a, corpus::sample(7, 30));
    assert_ne!(a, corpus::sample(8, 30));
    assert_eq!(a.len(), 30);
    for c in a.iter().take(4) {
        let t1 = corpus::generate(c, &mut Synthetic, Scale::Small, OPS);
        let t2 = corpus::generate(c, &mut Synthetic, Scale::Small, OPS);
        assert_eq!(t1, t2, "{}", c.name());
    }
    let other = corpus::generate(&corpus::sample(8, 1)[0], &mut Synthetic, Scale::Small, OPS);
    let first = corpus::generate(&a[0], &mut Synthetic, Scale::Small, OPS);
    assert_ne!(first.events, other.events);
}

#[test]
fn corpus_traces_are_valid_and_within_budget() {
    for c in corpus::sample(corpus::DEFAULT_CORPUS_SEED, 12) {
        let t = corpus::generate(&c, &mut Synthetic, Scale::Small, OPS);
        check_budget(&t, budget_bytes(&c, &Synthetic, Scale::Small));
        let ops = t
            .events
            .iter()
            .filter(|e| !matches!(e, TraceEvent::Frame { .. }))
            .count();
        assert!(ops >= OPS, "{}: {ops} operations", c.name());
    }
}

#[test]
fn the_independent_family_matches_the_issue_trace() {
    // Issue 9's independent renderer trace: a live budget in bytes (1 GiB,
    // whatever the heap), textures from 64 KiB up to 256 MiB (their mips
    // on top), the driver's dedicated hints, geometry, uniforms and staging,
    // no render targets; deterministic per seed.
    let a = corpus::sample_independent(5, 6, corpus::INDEPENDENT_BUDGET);
    assert_eq!(
        a,
        corpus::sample_independent(5, 6, corpus::INDEPENDENT_BUDGET)
    );
    assert_ne!(
        a,
        corpus::sample_independent(6, 6, corpus::INDEPENDENT_BUDGET)
    );
    assert_eq!(corpus::INDEPENDENT_OPS, 100_000);
    const OPS: usize = 20_000;
    let mut largest_texture = 0u64;
    for c in &a {
        assert!(c.name().starts_with("indep-"), "{}", c.name());
        assert_eq!(c.texture_max, 256 << 20);
        assert_eq!(c.render_targets, 0);
        assert_eq!(c.dedicated, corpus::DedicatedHint::Driver);
        assert_eq!(budget_bytes(c, &Synthetic, Scale::Small), 1 << 30);
        let t = corpus::generate(c, &mut Synthetic, Scale::Small, OPS);
        check_budget(&t, 1 << 30);
        let mut tags = std::collections::HashSet::new();
        for e in &t.events {
            if let TraceEvent::Alloc(x) = e {
                tags.insert(x.tag.clone());
                if x.tag == "texture" {
                    assert!(x.size <= 342 << 20, "{}: {}", c.name(), x.size);
                    largest_texture = largest_texture.max(x.size);
                }
            }
        }
        assert!(!tags.contains("render-target"), "{}", c.name());
        for tag in ["texture", "geometry", "uniform"] {
            assert!(tags.contains(tag), "{}: no {tag}", c.name());
        }
    }
    // Over the sample, textures reach past 64 MiB (the dedicated range).
    assert!(largest_texture > 64 << 20, "{largest_texture}");
    // The standard sample is not changed by the family: no budget in bytes.
    assert!(corpus::sample(7, 30)
        .iter()
        .all(|c| c.budget_bytes.is_none()));
}

#[test]
fn a_two_configuration_corpus_replays_on_the_device() {
    let ctx = VulkanContext::new(None, true).unwrap_or_else(|e| {
        panic!("this test needs a Vulkan device (Mesa's lavapipe will do): {e}")
    });
    let mut resolver = DeviceResolver::new(&ctx);
    let config = RunConfig {
        reps: 1,
        check: true,
        defrag: true,
        ..RunConfig::default()
    };
    let overhead = calibrate_timer_overhead();
    let mut rows = Vec::new();
    for c in corpus::sample(corpus::DEFAULT_CORPUS_SEED, 2) {
        let t = corpus::generate(&c, &mut resolver, Scale::Small, 600);
        check_budget(&t, budget_bytes(&c, &resolver, Scale::Small));
        assert!(t.header.note.contains("requirements from"));
        let r = bench_trace(&ctx, &t, overhead, &config).expect("replay");
        assert_eq!(r.len(), CONTENDERS.len());
        for row in &r {
            assert_eq!(
                row.failures, 0.0,
                "{} {}: {:?}",
                row.trace, row.allocator, row.first_failure
            );
            assert!(row.check_errors.is_empty(), "{:#?}", row.check_errors);
            assert_eq!(row.leaked_bytes, 0, "{} {}", row.trace, row.allocator);
            assert!(row.peak_committed_bytes >= row.peak_live_bytes);
        }
        let ours = r.iter().find(|r| r.allocator == "ours").expect("ours");
        assert_eq!(ours.defrag_error, None);
        let (before, after) = (
            ours.committed_before_defrag_bytes.expect("defrag ran"),
            ours.committed_after_defrag_bytes.expect("defrag ran"),
        );
        assert!(after <= before, "compaction grew committed memory");
        rows.extend(r);
    }
    let summary = corpus::format_summary(&rows);
    assert!(summary.contains("Pareto"), "{summary}");
    assert!(summary.contains("gpu-allocator"), "{summary}");
}

/// The demo's recorded traces that `--corpus` replays are valid traces with
/// the recording device's memory types in their note.
#[test]
fn recorded_traces_are_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/recorded");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("bench/traces/recorded")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    for p in files {
        let f = std::fs::File::open(&p).unwrap();
        let t = bench::trace::Trace::read(std::io::BufReader::new(f)).unwrap();
        let summary = t
            .validate()
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert_eq!(t.header.scale, "recorded", "{}", p.display());
        assert!(
            summary.allocs > 1000 && summary.frames > 100,
            "{}: {summary:?}",
            p.display()
        );
        let types = vkalloc::trace::memory_types_of_note(&t.header.note)
            .unwrap_or_else(|| panic!("{}: no memory types in the note", p.display()));
        assert!(!types.is_empty(), "{}", p.display());
    }
}
