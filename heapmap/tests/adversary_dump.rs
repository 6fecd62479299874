//! Adversarial dumps: malformed or hostile JSON heap dumps fed to `read_dump`,
//! the heap-map and diff renderers, and the `vkalloc-heapmap` binary.
//!
//! A dump is a file a user hands the tool, so it is untrusted: every case must
//! end in a typed error (or a clear message and a non-zero exit from the
//! binary) or in a sensible image, never in a panic (integer overflow
//! included: tests build with overflow checks), a hang or a huge allocation.
//! Panics are caught with `catch_unwind` so one bad case reports as a failed
//! assertion naming the input; risky binary runs have a wall-clock limit.
//!
//! Written from outside (2026-12-03). The defects it found are fixed: sums
//! of a dump's sizes that overflowed in the labels and the diff (now
//! saturating), a zoomed row's end of a `u64::MAX` block, allocations or free
//! ranges out of address order (now `Inconsistent`), and the canvas of the
//! widest, tallest map (now at most `raster::MAX_PIXELS`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use vkalloc::Snapshot;
use vkalloc_heapmap::{draw_overlay, raster, read_dump, render_diff, render_heap_map};
use vkalloc_heapmap::{Diff, DumpError, OverlayData, ViewState};

const WIDTH: u32 = 300;
const BIG: u64 = 1 << 63;

// ---------------------------------------------------------------- helpers

fn usage() -> Value {
    json!({"block_count": 0, "block_bytes": 0, "allocation_count": 0,
           "allocation_bytes": 0, "dedicated_count": 0})
}

fn statistics() -> Value {
    json!({"total": usage(), "heaps": [], "types": [], "pools": [],
           "device_memory_objects": 0, "corruptions_detected": 0})
}

fn alloc(offset: u64, size: u64, tag: &str) -> Value {
    json!({"offset": offset, "size": size, "kind": "linear", "tag": tag})
}

fn block(size: u64, allocations: Vec<Value>, free_ranges: Vec<[u64; 2]>) -> Value {
    json!({"size": size, "dedicated": false, "allocation_count": allocations.len(),
           "allocation_bytes": 0, "free_range_count": free_ranges.len(),
           "largest_free": 0, "fragmentation": 0.0,
           "allocations": allocations, "free_ranges": free_ranges})
}

fn list(memory_type: u32, blocks: Vec<Value>) -> Value {
    json!({"memory_type": memory_type, "heap": 0, "flags": 1, "blocks": blocks})
}

fn dump(lists: Vec<Value>) -> Value {
    json!({"schema": "vkalloc-dump", "schema_version": 2, "statistics": statistics(),
           "lists": lists, "largest_free": 0, "free_range_count": 0, "free_bytes": 0})
}

fn fixed() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fixed_dump.json");
    std::fs::read_to_string(path).unwrap()
}

/// Reads `v`; panics (the test fails) if reading itself panicked.
/// A named change to a dump's JSON.
type Edit = (&'static str, Box<dyn Fn(&mut Value)>);

fn read_value(what: &str, v: &Value) -> Result<Snapshot, DumpError> {
    let text = v.to_string();
    catch_unwind(|| read_dump(&text)).unwrap_or_else(|_| panic!("{what}: read_dump panicked"))
}

/// Runs `f`, turning a panic into a test failure that names the case.
fn no_panic<T>(what: &str, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(t) => t,
        Err(e) => {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("{what}: panicked instead of an error or an image: {msg}")
        }
    }
}

/// A dump that reads must render without panicking; returns the image height.
fn renders(what: &str, s: &Snapshot) -> u32 {
    let img = no_panic(what, || render_heap_map(s, WIDTH));
    assert_eq!(img.width(), WIDTH, "{what}");
    assert!(
        img.height() >= 1 && img.height() <= raster::MAX_HEIGHT,
        "{what}"
    );
    img.height()
}

/// A dump that must read (its numbers are odd, not wrong) and render.
fn reads_and_renders(what: &str, v: &Value) {
    let s = read_value(what, v).unwrap_or_else(|e| panic!("{what}: {e}"));
    renders(what, &s);
}

// ---------------------------------------------------------------- reading

#[test]
fn not_json_is_a_json_error() {
    let deep_array = "[".repeat(100_000);
    let deep_object = "{\"a\":".repeat(100_000);
    let cases: Vec<(&str, String)> = vec![
        ("empty", String::new()),
        ("whitespace", " \n\t ".into()),
        ("bom", format!("\u{feff}{}", dump(vec![]))),
        ("trailing garbage", format!("{} x", dump(vec![]))),
        ("two documents", format!("{0}{0}", dump(vec![]))),
        (
            "NaN literal",
            dump(vec![])
                .to_string()
                .replace("\"free_bytes\":0", "\"free_bytes\":NaN"),
        ),
        ("single quotes", "{'schema': 'vkalloc-dump'}".into()),
        ("lone surrogate", r#"{"schema": "\ud800"}"#.into()),
        ("deep array", deep_array),
        ("deep object", deep_object),
    ];
    for (what, text) in cases {
        let r = catch_unwind(|| read_dump(&text)).unwrap_or_else(|_| panic!("{what}: panicked"));
        assert!(matches!(r, Err(DumpError::Json(_))), "{what}: {r:?}");
    }
}

#[test]
fn deep_nesting_inside_a_dump_is_an_error_not_a_stack_overflow() {
    // Nested deeper than serde_json's recursion limit, in a field the schema
    // ignores and in one it reads.
    let nested = format!("{}1{}", "[".repeat(5000), "]".repeat(5000));
    for field in ["\"extra\"", "\"frame\""] {
        let text = dump(vec![])
            .to_string()
            .replacen('{', &format!("{{{field}: {nested},"), 1);
        let r = catch_unwind(|| read_dump(&text)).unwrap_or_else(|_| panic!("{field}: panicked"));
        assert!(matches!(r, Err(DumpError::Json(_))), "{field}: {r:?}");
    }
}

#[test]
fn json_that_is_not_a_dump_is_not_a_dump() {
    for text in [
        "null",
        "0",
        "\"vkalloc-dump\"",
        "[]",
        "{}",
        r#"{"schema": 2}"#,
        r#"{"schema": "VKALLOC-DUMP", "schema_version": 2}"#,
        r#"{"schema": ["vkalloc-dump"], "schema_version": 2}"#,
        r#"{"Schema": "vkalloc-dump", "schema_version": 2}"#,
    ] {
        let r = catch_unwind(|| read_dump(text)).unwrap_or_else(|_| panic!("{text}: panicked"));
        assert!(matches!(r, Err(DumpError::NotADump)), "{text}: {r:?}");
    }
}

#[test]
fn odd_versions_are_version_errors() {
    for version in [
        json!(null),
        json!(-1),
        json!(-2),
        json!(2.0),
        json!(2.5),
        json!("2"),
        json!(1e300),
        json!(u64::MAX),
        json!(3),
        json!(0),
        json!([2]),
        json!({"v": 2}),
    ] {
        let mut v = dump(vec![]);
        v["schema_version"] = version.clone();
        let r = read_value(&format!("version {version}"), &v);
        assert!(
            matches!(r, Err(DumpError::Version { .. })),
            "{version}: {r:?}"
        );
        // The message says which version was found and which one is read.
        let msg = r.unwrap_err().to_string();
        assert!(msg.contains("version 2"), "{version}: {msg}");
    }
    // 2^64 does not fit a u64: serde_json keeps it as a float.
    let text = dump(vec![]).to_string().replace(
        "\"schema_version\":2",
        "\"schema_version\":18446744073709551616",
    );
    assert!(matches!(read_dump(&text), Err(DumpError::Version { .. })));
}

#[test]
fn missing_required_fields_are_schema_errors() {
    let good = dump(vec![list(
        0,
        vec![block(1024, vec![alloc(0, 16, "a")], vec![[16, 1008]])],
    )]);
    assert!(read_value("good", &good).is_ok());
    let paths: &[&[&str]] = &[
        &["statistics"],
        &["lists"],
        &["largest_free"],
        &["free_range_count"],
        &["free_bytes"],
        &["statistics", "total"],
        &["statistics", "heaps"],
        &["lists", "0", "memory_type"],
        &["lists", "0", "blocks"],
        &["lists", "0", "blocks", "0", "size"],
        &["lists", "0", "blocks", "0", "dedicated"],
        &["lists", "0", "blocks", "0", "allocation_count"],
        &["lists", "0", "blocks", "0", "fragmentation"],
        &["lists", "0", "blocks", "0", "allocations"],
        &["lists", "0", "blocks", "0", "allocations", "0", "offset"],
        &["lists", "0", "blocks", "0", "allocations", "0", "size"],
        &["lists", "0", "blocks", "0", "allocations", "0", "kind"],
    ];
    for path in paths {
        let mut v = good.clone();
        let (last, parents) = path.split_last().unwrap();
        let mut node = &mut v;
        for p in parents {
            node = match p.parse::<usize>() {
                Ok(i) => &mut node[i],
                Err(_) => &mut node[*p],
            };
        }
        node.as_object_mut().unwrap().remove(*last).unwrap();
        let r = read_value(&format!("{path:?}"), &v);
        assert!(matches!(r, Err(DumpError::Schema(_))), "{path:?}: {r:?}");
    }
}

#[test]
fn wrong_types_and_out_of_range_numbers_are_schema_errors() {
    let base = || {
        dump(vec![list(
            0,
            vec![block(1024, vec![alloc(0, 16, "a")], vec![])],
        )])
    };
    let edits: Vec<Edit> = vec![
        (
            "negative size",
            Box::new(|v| v["lists"][0]["blocks"][0]["size"] = json!(-1)),
        ),
        (
            "float size",
            Box::new(|v| v["lists"][0]["blocks"][0]["size"] = json!(1024.5)),
        ),
        (
            "string size",
            Box::new(|v| v["lists"][0]["blocks"][0]["size"] = json!("1024")),
        ),
        (
            "null size",
            Box::new(|v| v["lists"][0]["blocks"][0]["size"] = Value::Null),
        ),
        (
            "negative offset",
            Box::new(|v| v["lists"][0]["blocks"][0]["allocations"][0]["offset"] = json!(-16)),
        ),
        (
            "count past u32",
            Box::new(|v| v["lists"][0]["blocks"][0]["allocation_count"] = json!(1u64 << 32)),
        ),
        (
            "memory type past u32",
            Box::new(|v| v["lists"][0]["memory_type"] = json!(1u64 << 32)),
        ),
        (
            "negative memory type",
            Box::new(|v| v["lists"][0]["memory_type"] = json!(-1)),
        ),
        (
            "flags past u32",
            Box::new(|v| v["lists"][0]["flags"] = json!(u64::MAX)),
        ),
        (
            "lists an object",
            Box::new(|v| v["lists"] = json!({"0": {}})),
        ),
        (
            "blocks a number",
            Box::new(|v| v["lists"][0]["blocks"] = json!(3)),
        ),
        (
            "allocation an array",
            Box::new(|v| v["lists"][0]["blocks"][0]["allocations"][0] = json!([0, 16])),
        ),
        (
            "kind a number",
            Box::new(|v| v["lists"][0]["blocks"][0]["allocations"][0]["kind"] = json!(1)),
        ),
        (
            "tag a number",
            Box::new(|v| v["lists"][0]["blocks"][0]["allocations"][0]["tag"] = json!(7)),
        ),
        (
            "free range of 3",
            Box::new(|v| v["lists"][0]["blocks"][0]["free_ranges"] = json!([[0, 1, 2]])),
        ),
        (
            "free range of 1",
            Box::new(|v| v["lists"][0]["blocks"][0]["free_ranges"] = json!([[0]])),
        ),
        (
            "fragmentation a string",
            Box::new(|v| v["lists"][0]["blocks"][0]["fragmentation"] = json!("NaN")),
        ),
        (
            "dedicated a number",
            Box::new(|v| v["lists"][0]["blocks"][0]["dedicated"] = json!(1)),
        ),
        (
            "heap budget missing",
            Box::new(|v| {
                v["statistics"]["heaps"] =
                    json!([{"index": 0, "size": 1, "device_local": true, "usage": usage()}])
            }),
        ),
        (
            "aliases not a list",
            Box::new(|v| v["lists"][0]["blocks"][0]["allocations"][0]["aliases"] = json!(5)),
        ),
    ];
    for (what, edit) in edits {
        let mut v = base();
        edit(&mut v);
        let r = read_value(what, &v);
        assert!(matches!(r, Err(DumpError::Schema(_))), "{what}: {r:?}");
    }
    // 2^64 and 1e400 are not numbers serde_json reads into these types.
    let text = base()
        .to_string()
        .replace("\"size\":1024", "\"size\":18446744073709551616");
    assert!(
        matches!(read_dump(&text), Err(DumpError::Schema(_))),
        "size 2^64"
    );
    let text = base()
        .to_string()
        .replace("\"fragmentation\":0.0", "\"fragmentation\":1e400");
    assert!(read_dump(&text).is_err(), "fragmentation 1e400");
}

#[test]
fn ranges_past_their_block_are_inconsistent() {
    let cases: Vec<(&str, Value)> = vec![
        (
            "offset u64::MAX",
            block(1024, vec![alloc(u64::MAX, 1, "a")], vec![]),
        ),
        (
            "size u64::MAX",
            block(1024, vec![alloc(1, u64::MAX, "a")], vec![]),
        ),
        (
            "both u64::MAX",
            block(u64::MAX, vec![alloc(u64::MAX, u64::MAX, "a")], vec![]),
        ),
        (
            "one past the end",
            block(1024, vec![alloc(1000, 25, "a")], vec![]),
        ),
        (
            "empty at past the end",
            block(1024, vec![alloc(1025, 0, "a")], vec![]),
        ),
        (
            "in a zero-size block",
            block(0, vec![alloc(0, 1, "a")], vec![]),
        ),
        (
            "free range overflowing",
            block(1024, vec![], vec![[u64::MAX, 2]]),
        ),
        (
            "free range past the end",
            block(1024, vec![], vec![[512, 513]]),
        ),
        ("second block bad", Value::Null),
    ];
    for (what, b) in cases {
        let blocks = if b.is_null() {
            vec![
                block(64, vec![], vec![]),
                block(64, vec![alloc(60, 8, "a")], vec![]),
            ]
        } else {
            vec![b]
        };
        let r = read_value(what, &dump(vec![list(0, blocks)]));
        match r {
            Err(DumpError::Inconsistent(msg)) => assert!(msg.contains("block"), "{what}: {msg}"),
            other => panic!("{what}: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------- rendering

#[test]
fn edge_sizes_that_read_also_render() {
    let cases: Vec<(&str, Value)> = vec![
        (
            "zero-size block",
            dump(vec![list(0, vec![block(0, vec![], vec![])])]),
        ),
        (
            "zero-size allocations",
            dump(vec![list(
                0,
                vec![block(
                    0,
                    vec![alloc(0, 0, "a"), alloc(0, 0, "b")],
                    vec![[0, 0]],
                )],
            )]),
        ),
        (
            "empty allocation at the end",
            dump(vec![list(
                0,
                vec![block(64, vec![alloc(64, 0, "a")], vec![])],
            )]),
        ),
        (
            "one u64::MAX block",
            dump(vec![list(
                0,
                vec![block(u64::MAX, vec![alloc(0, u64::MAX, "texture")], vec![])],
            )]),
        ),
        (
            "tiny allocation in u64::MAX block",
            dump(vec![list(
                0,
                vec![block(
                    u64::MAX,
                    vec![alloc(0, 1, "y"), alloc(u64::MAX - 1, 1, "x")],
                    vec![[1, 1 << 40]],
                )],
            )]),
        ),
        (
            "two 2^63 blocks in two lists",
            dump(vec![
                list(0, vec![block(BIG, vec![alloc(0, BIG, "a")], vec![])]),
                list(1, vec![block(BIG, vec![alloc(0, BIG, "a")], vec![])]),
            ]),
        ),
        (
            "overlapping (aliased) allocations",
            dump(vec![list(
                0,
                vec![block(
                    1024,
                    vec![
                        alloc(0, 1024, "a"),
                        alloc(0, 1024, "b"),
                        alloc(0, 1, "d"),
                        alloc(10, 10, "c"),
                    ],
                    vec![],
                )],
            )]),
        ),
        (
            "allocation overlapping a free range",
            dump(vec![list(
                0,
                vec![block(1024, vec![alloc(0, 1024, "a")], vec![[0, 1024]])],
            )]),
        ),
        ("same memory type and pool twice", {
            let l = list(0, vec![block(1024, vec![alloc(0, 16, "a")], vec![])]);
            dump(vec![l.clone(), l])
        }),
        ("huge memory type and flags", {
            let mut l = list(u32::MAX, vec![block(1024, vec![], vec![])]);
            l["flags"] = json!(u32::MAX);
            l["heap"] = json!(u32::MAX);
            l["pool_budget"] = json!(u64::MAX);
            dump(vec![l])
        }),
        ("fragmentation extremes", {
            let mut b = block(1024, vec![], vec![]);
            b["fragmentation"] = json!(-1.0e308);
            let mut c = block(1024, vec![], vec![]);
            c["fragmentation"] = json!(1.0e308);
            dump(vec![list(0, vec![b, c])])
        }),
    ];
    for (what, v) in cases {
        let s = read_value(what, &v).unwrap_or_else(|e| panic!("{what}: {e}"));
        renders(what, &s);
    }
}

#[test]
fn counts_that_disagree_with_the_records_render() {
    let mut b = block(1024, vec![alloc(0, 16, "a")], vec![[16, 1008]]);
    b["allocation_count"] = json!(u32::MAX);
    b["free_range_count"] = json!(u32::MAX);
    b["allocation_bytes"] = json!(u64::MAX);
    b["largest_free"] = json!(u64::MAX);
    let mut v = dump(vec![list(0, vec![b])]);
    v["largest_free"] = json!(u64::MAX);
    v["free_range_count"] = json!(u64::MAX);
    v["free_bytes"] = json!(u64::MAX);
    v["statistics"]["total"]["allocation_count"] = json!(u64::MAX);
    v["statistics"]["device_memory_objects"] = json!(u32::MAX);
    reads_and_renders("one block's counts at their maximum", &v);
}

/// `allocation_bytes` is copied from the dump unchecked; two blocks of one
/// list that claim `u64::MAX` each must not overflow the list's title.
#[test]
fn list_title_survives_allocation_bytes_that_sum_past_u64() {
    let mut b = block(1024, vec![alloc(0, 16, "a")], vec![]);
    b["allocation_bytes"] = json!(u64::MAX);
    let v = dump(vec![list(0, vec![b.clone(), b])]);
    reads_and_renders("two blocks with allocation_bytes u64::MAX", &v);
}

/// Each block's size is valid on its own, but the list's committed bytes
/// (their sum) do not fit a u64.
#[test]
fn list_title_survives_block_sizes_that_sum_past_u64() {
    let b = block(BIG, vec![alloc(0, 16, "a")], vec![]);
    let v = dump(vec![list(0, vec![b.clone(), b])]);
    reads_and_renders("two 2^63-byte blocks in one list", &v);
}

/// Two overlapping halves of a u64::MAX block would sum past u64::MAX in
/// `BlockSnapshot::free_bytes` (the block's label); free ranges are checked
/// against each other now, so the dump is refused before anything draws it.
#[test]
fn free_ranges_that_overlap_and_sum_past_u64_are_inconsistent() {
    let b = block(u64::MAX, vec![], vec![[0, BIG], [0, BIG]]);
    let v = dump(vec![list(0, vec![b])]);
    let what = "overlapping free ranges summing past u64::MAX";
    match read_value(what, &v) {
        Err(DumpError::Inconsistent(_)) => {}
        other => panic!("{what}: {other:?}, not an Inconsistent error"),
    }
}

#[test]
fn thousands_of_blocks_render_in_bounded_time_and_height() {
    let blocks: Vec<Value> = (0..3000)
        .map(|i| block(1 << 20, vec![alloc(0, 4096 + i, "mesh vertices")], vec![]))
        .collect();
    let s = read_value("3000 blocks", &dump(vec![list(0, blocks)])).unwrap();
    let h = renders("3000 blocks", &s);
    assert_eq!(h, raster::MAX_HEIGHT, "3000 blocks are taller than the cap");
}

#[test]
fn thousands_of_lists_and_tiny_allocations_render() {
    let lists: Vec<Value> = (0..2000u32)
        .map(|i| list(i, vec![block(64, vec![alloc(0, 1, "")], vec![])]))
        .collect();
    let s = read_value("2000 lists", &dump(lists)).unwrap();
    renders("2000 lists", &s);
    let allocations: Vec<Value> = (0..50_000u64).map(|i| alloc(i * 2, 1, "ubo")).collect();
    let s = read_value(
        "50k allocations",
        &dump(vec![list(0, vec![block(100_000, allocations, vec![])])]),
    )
    .unwrap();
    renders("50k allocations", &s);
}

#[test]
fn odd_strings_render() {
    let long = "x".repeat(200_000);
    let weird = "\u{0}\u{7}\u{202e}\u{fffd}\u{1F600}\r\n\t\u{10FFFF}";
    let mut l = list(
        0,
        vec![block(
            1024,
            vec![alloc(0, 16, &long), alloc(16, 16, weird)],
            vec![],
        )],
    );
    l["pool"] = json!(format!("{long}{weird}"));
    let mut a = alloc(32, 16, weird);
    a["kind"] = json!(long);
    l["blocks"][0]["allocations"]
        .as_array_mut()
        .unwrap()
        .push(a);
    let s = read_value("odd strings", &dump(vec![l])).unwrap();
    renders("odd strings", &s);
}

#[test]
fn hostile_heap_statistics_render() {
    let mut v = dump(vec![]);
    let heap = |i: u64, size: u64, budget: u64, use_: u64| {
        json!({"index": i, "size": size, "device_local": i.is_multiple_of(2),
               "usage": {"block_count": u32::MAX, "block_bytes": u64::MAX,
                         "allocation_count": u64::MAX, "allocation_bytes": u64::MAX,
                         "dedicated_count": u32::MAX},
               "budget": {"block_bytes": u64::MAX, "budget": budget, "usage": use_,
                          "from_driver": true}})
    };
    let mut heaps = vec![
        heap(0, 0, 0, 0),
        heap(u32::MAX as u64, u64::MAX, u64::MAX, u64::MAX),
        heap(2, 1, 0, u64::MAX),
    ];
    heaps.extend((3..500).map(|i| heap(i, 1 << 30, 1, 1 << 40)));
    v["statistics"]["heaps"] = json!(heaps);
    let s = read_value("hostile heaps", &v).unwrap_or_else(|e| panic!("{e}"));
    renders("hostile heaps", &s);
}

// ---------------------------------------------------------------- diffs

#[test]
fn diff_of_dumps_from_different_devices_renders() {
    let old = read_dump(&fixed()).unwrap();
    // Another device: one memory type, numbered past the old one's, a
    // smaller block at the same list and index as one of the old dump's.
    let new = read_value(
        "other device",
        &dump(vec![
            list(
                0,
                vec![block(4096, vec![alloc(0, 4096, "sphere vertices")], vec![])],
            ),
            list(
                31,
                vec![block(1 << 30, vec![alloc(0, 1 << 29, "x")], vec![])],
            ),
        ]),
    )
    .unwrap();
    let diff = no_panic("diff between devices", || Diff::between(&old, &new));
    assert_eq!(diff.added.len(), 2);
    assert_eq!(diff.kept, 0);
    assert_eq!(diff.freed.len() as u64, old.allocation_count());
    for (what, a, b) in [("old->new", &old, &new), ("new->old", &new, &old)] {
        let img = no_panic(what, || render_diff(a, b, WIDTH));
        assert_eq!(img.width(), WIDTH);
    }
    // Against an empty dump, both ways.
    let empty = read_value("empty", &dump(vec![])).unwrap();
    no_panic("empty->old", || render_diff(&empty, &old, WIDTH));
    no_panic("old->empty", || render_diff(&old, &empty, WIDTH));
}

/// Each allocation is valid, but the per-tag and total byte counts of a diff
/// add their sizes: two 2^63-byte allocations with one tag overflow a u64.
#[test]
fn diff_byte_totals_survive_sizes_that_sum_past_u64() {
    let empty = read_value("empty", &dump(vec![])).unwrap();
    let new = read_value(
        "two 2^63 allocations",
        &dump(vec![
            list(0, vec![block(BIG, vec![alloc(0, BIG, "leak")], vec![])]),
            list(1, vec![block(BIG, vec![alloc(0, BIG, "leak")], vec![])]),
        ]),
    )
    .unwrap();
    let diff = no_panic("Diff::between", || Diff::between(&empty, &new));
    assert_eq!(diff.added.len(), 2);
    no_panic("render_diff", || render_diff(&empty, &new, WIDTH));
    no_panic("render_diff reversed", || render_diff(&new, &empty, WIDTH));
}

// ---------------------------------------------------------------- zoom

fn render_zoomed(s: &Snapshot, zoom: (usize, usize)) {
    let mut state = ViewState::headless();
    state.zoom = Some(zoom);
    raster::render_ui(WIDTH, 1.0, |ui| {
        draw_overlay(
            ui,
            &OverlayData {
                snapshot: Some(s),
                ..OverlayData::default()
            },
            &mut state,
        )
    });
}

/// The zoomed view splits a block in `ZOOM_ROWS` rows of `size.div_ceil(8)`
/// bytes; for a block of nearly u64::MAX bytes the last row's end overflows.
#[test]
fn zoom_on_a_u64_max_block_does_not_overflow() {
    let s = read_value(
        "u64::MAX block",
        &dump(vec![list(
            0,
            vec![block(u64::MAX, vec![alloc(0, 1 << 40, "a")], vec![])],
        )]),
    )
    .unwrap();
    no_panic("zoom on a u64::MAX block", || render_zoomed(&s, (0, 0)));
}

/// Records out of address order (the schema says "in address order") made
/// the zoomed rows' search pick a wrong start and underflow (a panic in
/// debug builds). The reader now refuses them, and free ranges that overlap
/// or run out of order, as inconsistent; the strip's arithmetic saturates.
#[test]
fn allocations_or_free_ranges_out_of_address_order_are_inconsistent() {
    let unsorted = dump(vec![list(
        0,
        vec![block(
            800,
            vec![alloc(0, 10, "a"), alloc(150, 10, "b"), alloc(0, 20, "c")],
            vec![],
        )],
    )]);
    assert!(matches!(
        read_value("unsorted", &unsorted),
        Err(DumpError::Inconsistent(_))
    ));
    let overlapping_free = dump(vec![list(
        0,
        vec![block(u64::MAX, vec![], vec![[0, 1 << 63], [0, 1 << 63]])],
    )]);
    assert!(matches!(
        read_value("overlapping free ranges", &overlapping_free),
        Err(DumpError::Inconsistent(_))
    ));
}

#[test]
fn zoom_on_a_missing_or_empty_block_is_harmless() {
    let s = read_value(
        "zero",
        &dump(vec![list(
            0,
            vec![
                block(0, vec![], vec![]),
                block(7, vec![alloc(0, 7, "a")], vec![]),
            ],
        )]),
    )
    .unwrap();
    for z in [(0, 0), (0, 1), (0, 9), (9, 0), (usize::MAX, usize::MAX)] {
        no_panic(&format!("zoom {z:?}"), || render_zoomed(&s, z));
    }
}

// ---------------------------------------------------------------- binary

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vkalloc-heapmap"))
}

fn tmp(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("adversary_dump");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn write(name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
    let p = tmp(name);
    std::fs::write(&p, contents).unwrap();
    p
}

/// Runs the command with a wall-clock limit; kills it past the limit.
fn run_limited(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{cmd:?} still running after {limit:?} (killed); stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The run failed cleanly: exit status 1, an `error:` line naming `needle`, no panic.
fn assert_clean_failure(what: &str, out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{what}: status {:?}, stderr: {stderr}",
        out.status
    );
    assert!(stderr.starts_with("error: "), "{what}: {stderr}");
    assert!(
        stderr.contains(needle),
        "{what}: wanted {needle:?} in {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
}

#[test]
fn binary_rejects_bad_dumps_with_a_message() {
    let out_png = tmp("never.png");
    let _ = std::fs::remove_file(&out_png);
    let not_json = write("not_json.json", "{\"schema\": \"vkal");
    let not_utf8 = write("not_utf8.json", [0xff, 0xfe, b'{', 0x80, b'}']);
    let not_dump = write("not_dump.json", "{\"hello\": 1}");
    let old_version = write(
        "v1.json",
        fixed().replacen("\"schema_version\": 2", "\"schema_version\": 1", 1),
    );
    let past_end = write(
        "past_end.json",
        dump(vec![list(
            0,
            vec![block(8, vec![alloc(4, 8, "a")], vec![])],
        )])
        .to_string(),
    );
    let good = write("good.json", fixed());
    let dir = tmp("a_directory.json");
    std::fs::create_dir_all(&dir).unwrap();
    let missing = tmp("does_not_exist.json");
    let cases: Vec<(&str, Vec<&Path>, &str)> = vec![
        ("truncated JSON", vec![&not_json], "not a JSON document"),
        ("not UTF-8", vec![&not_utf8], "not_utf8.json"),
        ("not a dump", vec![&not_dump], "not a vkalloc dump"),
        ("old version", vec![&old_version], "version 1"),
        ("range past the block", vec![&past_end], "inconsistent"),
        ("a directory", vec![&dir], "a_directory.json"),
        ("missing file", vec![&missing], "does_not_exist.json"),
    ];
    for (what, inputs, needle) in cases {
        let mut cmd = bin();
        cmd.args(&inputs).arg("--out").arg(&out_png);
        assert_clean_failure(what, &run_limited(cmd, Duration::from_secs(60)), needle);
        // A diff with the bad dump on either side names it too.
        for pair in [[inputs[0], good.as_path()], [good.as_path(), inputs[0]]] {
            let mut cmd = bin();
            cmd.arg("--diff").args(pair).arg("--out").arg(&out_png);
            assert_clean_failure(
                &format!("diff, {what}"),
                &run_limited(cmd, Duration::from_secs(60)),
                needle,
            );
        }
    }
    assert!(!out_png.exists(), "no image is written for a bad dump");
}

#[test]
fn binary_rejects_bad_arguments_with_a_message() {
    let good = write("good_args.json", fixed());
    let out_png = tmp("args.png");
    let g = good.to_str().unwrap();
    let o = out_png.to_str().unwrap();
    let odd_ext = tmp("x.unknownext");
    let odd_ext = odd_ext.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec![g], "--out is required"),
        (vec![g, "--out"], "--out needs a file"),
        (vec![g, "--out", o, "--width", "0"], "--width"),
        (vec![g, "--out", o, "--width", "-5"], "--width"),
        (
            vec![g, "--out", o, "--width", "99999999999999999999"],
            "--width",
        ),
        (vec![g, "--out", o, "--width", "16385"], "--width"),
        (vec![g, "--out", o, "--width"], "--width"),
        (vec![g, "--out", o, "--frobnicate"], "unknown flag"),
        (vec!["--diff", g, "--out", o], "expected one dump"),
        (vec![g, g, "--out", o], "expected one dump"),
        (vec![g, "--out", "/nonexistent-dir/x.png"], "cannot write"),
        (vec![g, "--out", odd_ext], "cannot write"),
    ];
    for (args, needle) in cases {
        let mut cmd = bin();
        cmd.args(&args);
        assert_clean_failure(
            &format!("{args:?}"),
            &run_limited(cmd, Duration::from_secs(60)),
            needle,
        );
    }
}

#[test]
fn binary_draws_a_good_dump_and_a_diff() {
    let good = write("good_bin.json", fixed());
    let out_png = tmp("good.png");
    let mut cmd = bin();
    cmd.arg(&good)
        .args(["--out"])
        .arg(&out_png)
        .args(["--width", "64"]);
    let out = run_limited(cmd, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let img = image::open(&out_png).unwrap();
    assert_eq!(img.width(), 64);
    let mut cmd = bin();
    cmd.arg("--diff")
        .arg(&good)
        .arg(&good)
        .arg("--out")
        .arg(&out_png);
    let out = run_limited(cmd, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The tool as a user runs it on a dump whose numbers overflow a sum (see
/// `list_title_survives_block_sizes_that_sum_past_u64`): a message and exit 1,
/// or an image; not a panic (exit 101).
#[test]
fn binary_does_not_panic_on_overflowing_sums() {
    let b = block(BIG, vec![alloc(0, BIG, "leak")], vec![]);
    let bad = write(
        "overflow.json",
        dump(vec![list(0, vec![b.clone(), b])]).to_string(),
    );
    let empty = write("empty.json", dump(vec![]).to_string());
    let out_png = tmp("overflow.png");
    for args in [
        vec![bad.as_path()],
        vec![Path::new("--diff"), empty.as_path(), bad.as_path()],
    ] {
        let mut cmd = bin();
        cmd.args(&args).arg("--out").arg(&out_png);
        let out = run_limited(cmd, Duration::from_secs(120));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.code() == Some(0)
                || (out.status.code() == Some(1) && stderr.starts_with("error: ")),
            "{args:?}: status {:?}, stderr: {stderr}",
            out.status
        );
    }
}

/// A "dump" that never ends (a device, a pipe) or is larger than any real
/// dump: the tool reads it all into memory before parsing. Under a 1 GiB
/// address-space limit it must stop with a message, not die of an allocation
/// failure (abort) or run on.
#[cfg(target_os = "linux")]
#[test]
fn binary_bounds_the_size_of_what_it_reads() {
    let out_png = tmp("zero.png");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("ulimit -v 1048576 && exec \"$0\" /dev/zero --out \"$1\"")
        .arg(env!("CARGO_BIN_EXE_vkalloc-heapmap"))
        .arg(&out_png);
    let out = run_limited(cmd, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "status {:?}, stderr: {stderr}",
        out.status
    );
    assert!(stderr.starts_with("error: "), "{stderr}");
}

/// The height of a map follows the dump (up to `raster::MAX_HEIGHT`), and the
/// rasterizer keeps an `[f32; 4]` canvas of width x height besides the RGBA
/// image: a 1000-block dump (~150 KB) at the widest `--width` asks for
/// 16384 x 16384 x 16 bytes = 4 GiB plus the 1 GiB image. Under a 3 GiB
/// address-space limit (room for the 1 GiB image itself) the tool must draw
/// the map or stop with a message, not abort on a failed allocation.
#[cfg(target_os = "linux")]
#[test]
fn binary_memory_for_the_tallest_widest_map_is_bounded() {
    let blocks: Vec<Value> = (0..1000)
        .map(|i| block(1 << 20, vec![alloc(0, 4096 + i, "mesh vertices")], vec![]))
        .collect();
    let tall = write("tall.json", dump(vec![list(0, blocks)]).to_string());
    let out_png = tmp("tall.png");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("ulimit -v 3145728 && exec \"$0\" \"$1\" --width 16384 --out \"$2\"")
        .arg(env!("CARGO_BIN_EXE_vkalloc-heapmap"))
        .arg(&tall)
        .arg(&out_png);
    let out = run_limited(cmd, Duration::from_secs(300));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(0)
            || (out.status.code() == Some(1) && stderr.starts_with("error: ")),
        "status {:?}, stderr: {stderr}",
        out.status
    );
}
