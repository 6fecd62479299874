//! `--record-trace`: a short headless run on lavapipe writes every allocation
//! and free as a valid trace in the bench's format, with frame boundaries,
//! the device's memory types in the note, and nothing left live.

use crate::common;

use vkalloc::trace::{memory_types_of_note, Trace, TraceEvent};

#[test]
fn records_a_valid_trace() {
    let out = common::scratch("record_trace");
    let path = out.join("demo.jsonl");
    let run = common::run_ok(
        common::demo()
            .args([
                "--frames",
                "12",
                "--size",
                "160x90",
                "--texture-size",
                "256",
                "--textures",
                "rgba8",
                "--texture-budget",
                "1MiB",
                "--png-every",
                "0",
            ])
            .args([
                "--out".as_ref(),
                out.as_os_str(),
                "--cache".as_ref(),
                common::cache().as_os_str(),
                "--record-trace".as_ref(),
                path.as_os_str(),
            ]),
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("0 validation errors"), "{stdout}");
    let file = std::fs::File::open(&path).expect("the trace is written");
    let trace = Trace::read(std::io::BufReader::new(file)).expect("a trace");
    assert_eq!(trace.header.scale, "recorded");
    assert!(
        trace.header.name.contains("160x90"),
        "{}",
        trace.header.name
    );
    let types = memory_types_of_note(&trace.header.note).expect("memory types in the note");
    assert!(!types.is_empty(), "{}", trace.header.note);
    let summary = trace.validate().expect("a valid trace");
    // Streaming under 1 MiB replaces textures: many allocations, all freed
    // by the end of the run.
    assert!(summary.allocs >= 20, "{summary:?}");
    assert_eq!(summary.allocs, summary.frees, "{summary:?}");
    assert_eq!(summary.frames, 12, "{summary:?}");
    assert!(trace
        .events
        .iter()
        .any(|e| matches!(e, TraceEvent::Frame { index: 11 })));
}
