//! The allocation trace format, version 1: what a program allocated and
//! freed, in order, so the same pattern can be replayed against any allocator.
//!
//! This module depends only on `std`, `serde` and `serde_json`: the bench
//! crate's replayer and the allocator's recorder share it.
//!
//! # The format
//!
//! A trace is UTF-8 text in [JSON Lines](https://jsonlines.org/): one JSON
//! object per line, each with a `"type"` field. The first line is the header;
//! every later line is one event, in the order the program made them.
//!
//! ```text
//! {"type":"header","format":"vkalloc-trace","version":1,"name":"renderer-mix","seed":1,"scale":"small"}
//! {"type":"frame","index":0}
//! {"type":"alloc","id":0,"size":66355200,"alignment":65536,"memory_type_bits":4294967295,"kind":"optimal_image","usage":"gpu_only","dedicated":"preferred","tag":"hdr-colour"}
//! {"type":"alloc","id":1,"size":4096,"alignment":256,"memory_type_bits":4294967295,"kind":"buffer","usage":"upload","dedicated":"none","tag":"uniforms"}
//! {"type":"free","id":1}
//! ```
//!
//! | line | field | meaning |
//! | --- | --- | --- |
//! | header | `format` | always `"vkalloc-trace"` |
//! | header | `version` | [`TRACE_FORMAT_VERSION`]; a reader refuses a version it does not know |
//! | header | `name` | what the trace shows (`renderer-mix`, or the recording program's name) |
//! | header | `seed` | the generator's seed (0 for a recorded trace) |
//! | header | `scale` | `small`, `full`, or `recorded` |
//! | header | `note` | optional free text (device, command line, …) |
//! | alloc | `id` | the allocation's name in this trace; unique among live allocations (may be reused after its free) |
//! | alloc | `size`, `alignment` | `VkMemoryRequirements::size` and `alignment` (a power of two) |
//! | alloc | `memory_type_bits` | `VkMemoryRequirements::memoryTypeBits`; a generated trace allows every type (`0xffffffff`) and a replayer masks it to its device's types |
//! | alloc | `kind` | `buffer`, `linear_image` or `optimal_image` (for `bufferImageGranularity`) |
//! | alloc | `usage` | `gpu_only`, `upload` (CPU writes, GPU reads), `readback` (GPU writes, CPU reads), `transient` (attachment that may live in lazily allocated memory) |
//! | alloc | `dedicated` | the driver's wish from `VkMemoryDedicatedRequirements`: `none`, `preferred`, `required` |
//! | alloc | `tag` | a debugging name (may be empty) |
//! | free | `id` | a live allocation's `id` |
//! | frame | `index` | a frame boundary: the events after it belong to frame `index` |
//!
//! Unknown fields are ignored, so later minor additions stay readable by
//! this reader; a change in meaning bumps [`TRACE_FORMAT_VERSION`].
//! Allocations still live at the end of a trace are freed by the replayer.

use std::fmt;
use std::io::{self, BufRead, Write};

use serde::{Deserialize, Serialize};

/// The format version this module reads and writes.
pub const TRACE_FORMAT_VERSION: u32 = 1;

/// The value of the header's `format` field.
pub const TRACE_FORMAT_NAME: &str = "vkalloc-trace";

/// The first line of a trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceHeader {
    /// Always [`TRACE_FORMAT_NAME`].
    pub format: String,
    /// The format version, [`TRACE_FORMAT_VERSION`].
    pub version: u32,
    /// What the trace shows: a standard trace's name or the recording program's.
    pub name: String,
    /// The generator's seed; 0 for a recorded trace.
    #[serde(default)]
    pub seed: u64,
    /// `small`, `full`, or `recorded`.
    #[serde(default)]
    pub scale: String,
    /// Free text: device, command line, anything a reader should know.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

impl TraceHeader {
    /// A header of the current version.
    pub fn new(name: impl Into<String>, seed: u64, scale: impl Into<String>) -> Self {
        Self {
            format: TRACE_FORMAT_NAME.to_owned(),
            version: TRACE_FORMAT_VERSION,
            name: name.into(),
            seed,
            scale: scale.into(),
            note: String::new(),
        }
    }
}

/// The resource an allocation is for, as far as memory placement cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceKind {
    /// A `VkBuffer`.
    Buffer,
    /// A `VkImage` with `VK_IMAGE_TILING_LINEAR`.
    LinearImage,
    /// A `VkImage` with `VK_IMAGE_TILING_OPTIMAL`.
    OptimalImage,
}

/// How the memory is used, which decides its memory type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceUsage {
    /// Only the GPU touches it: device-local memory.
    GpuOnly,
    /// The CPU writes, the GPU reads (staging, uniforms): host-visible memory.
    Upload,
    /// The GPU writes, the CPU reads: host-visible, preferably cached memory.
    Readback,
    /// A transient attachment: lazily allocated memory where it exists.
    Transient,
}

/// The driver's dedicated-allocation wish (`VkMemoryDedicatedRequirements`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceDedicated {
    /// No wish.
    #[default]
    None,
    /// `prefersDedicatedAllocation`.
    Preferred,
    /// `requiresDedicatedAllocation`.
    Required,
}

/// One allocation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocEvent {
    /// The allocation's name in the trace, unique among live allocations.
    pub id: u64,
    /// Bytes (`VkMemoryRequirements::size`), non-zero.
    pub size: u64,
    /// Alignment (`VkMemoryRequirements::alignment`), a power of two.
    pub alignment: u64,
    /// `VkMemoryRequirements::memoryTypeBits`.
    pub memory_type_bits: u32,
    /// The resource kind.
    pub kind: TraceKind,
    /// The usage preset.
    pub usage: TraceUsage,
    /// The driver's dedicated wish.
    #[serde(default)]
    pub dedicated: TraceDedicated,
    /// A debugging name; may be empty.
    #[serde(default)]
    pub tag: String,
}

/// One event after the header.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TraceEvent {
    /// An allocation.
    Alloc(AllocEvent),
    /// The free of a live allocation.
    Free {
        /// The id given at its allocation.
        id: u64,
    },
    /// A frame boundary: the events after it belong to frame `index`.
    Frame {
        /// The frame's index.
        index: u64,
    },
}

/// The header line, tagged as it appears in a file.
#[derive(Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum HeaderLine {
    Header(TraceHeader),
}

/// A whole trace in memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// The header.
    pub header: TraceHeader,
    /// The events, in order.
    pub events: Vec<TraceEvent>,
}

/// Counts that describe a trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceSummary {
    /// Alloc events.
    pub allocs: u64,
    /// Free events.
    pub frees: u64,
    /// Frame events.
    pub frames: u64,
    /// The most allocations live at once.
    pub peak_live_count: u64,
    /// The most bytes live at once (sum of sizes as asked).
    pub peak_live_bytes: u64,
    /// Allocations still live after the last event.
    pub live_at_end: u64,
}

/// Why a trace could not be read or is inconsistent.
#[derive(Debug)]
pub enum TraceError {
    /// Reading or writing failed.
    Io(io::Error),
    /// A line is not valid JSON of this format.
    Parse {
        /// 1-based line number.
        line: usize,
        /// The parser's message.
        message: String,
    },
    /// The header is missing, of another format, or of an unknown version.
    BadHeader(String),
    /// An event breaks the rules (id reused while live, free of a dead id, bad size).
    Inconsistent {
        /// 1-based line number (header is line 1).
        line: usize,
        /// What is wrong.
        message: String,
    },
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Io(e) => write!(f, "trace I/O failed: {e}"),
            TraceError::Parse { line, message } => write!(f, "trace line {line}: {message}"),
            TraceError::BadHeader(m) => write!(f, "trace header: {m}"),
            TraceError::Inconsistent { line, message } => {
                write!(f, "trace line {line}: {message}")
            }
        }
    }
}

impl std::error::Error for TraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TraceError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for TraceError {
    fn from(e: io::Error) -> Self {
        TraceError::Io(e)
    }
}

impl Trace {
    /// Checks the header and that every event follows the rules: sizes
    /// non-zero, alignments powers of two, ids unique among live
    /// allocations, frees only of live ids.
    pub fn validate(&self) -> Result<TraceSummary, TraceError> {
        check_header(&self.header)?;
        let mut live: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
        let mut s = TraceSummary::default();
        let mut live_bytes = 0u64;
        for (i, event) in self.events.iter().enumerate() {
            let line = i + 2;
            match event {
                TraceEvent::Alloc(a) => {
                    check_alloc(a, line)?;
                    if live.insert(a.id, a.size).is_some() {
                        return Err(TraceError::Inconsistent {
                            line,
                            message: format!("id {} allocated while live", a.id),
                        });
                    }
                    s.allocs += 1;
                    live_bytes += a.size;
                    s.peak_live_bytes = s.peak_live_bytes.max(live_bytes);
                    s.peak_live_count = s.peak_live_count.max(live.len() as u64);
                }
                TraceEvent::Free { id } => {
                    let Some(size) = live.remove(id) else {
                        return Err(TraceError::Inconsistent {
                            line,
                            message: format!("free of id {id}, which is not live"),
                        });
                    };
                    live_bytes -= size;
                    s.frees += 1;
                }
                TraceEvent::Frame { .. } => s.frames += 1,
            }
        }
        s.live_at_end = live.len() as u64;
        Ok(s)
    }

    /// Reads a whole trace and validates it.
    pub fn read(reader: impl BufRead) -> Result<Self, TraceError> {
        let mut r = TraceReader::new(reader)?;
        let mut events = Vec::new();
        while let Some(e) = r.next_event()? {
            events.push(e);
        }
        let trace = Trace {
            header: r.header().clone(),
            events,
        };
        trace.validate()?;
        Ok(trace)
    }

    /// Writes the whole trace, one line per event.
    pub fn write(&self, writer: impl Write) -> Result<(), TraceError> {
        let mut w = TraceWriter::new(writer, &self.header)?;
        for e in &self.events {
            w.event(e)?;
        }
        w.finish()?;
        Ok(())
    }
}

fn check_header(h: &TraceHeader) -> Result<(), TraceError> {
    if h.format != TRACE_FORMAT_NAME {
        return Err(TraceError::BadHeader(format!(
            "format is {:?}, expected {TRACE_FORMAT_NAME:?}",
            h.format
        )));
    }
    if h.version != TRACE_FORMAT_VERSION {
        return Err(TraceError::BadHeader(format!(
            "version {} is not supported (this reader knows version {TRACE_FORMAT_VERSION})",
            h.version
        )));
    }
    Ok(())
}

fn check_alloc(a: &AllocEvent, line: usize) -> Result<(), TraceError> {
    if a.size == 0 {
        return Err(TraceError::Inconsistent {
            line,
            message: format!("id {} has size 0", a.id),
        });
    }
    if !a.alignment.is_power_of_two() {
        return Err(TraceError::Inconsistent {
            line,
            message: format!(
                "id {} has alignment {}, not a power of two",
                a.id, a.alignment
            ),
        });
    }
    if a.memory_type_bits == 0 {
        return Err(TraceError::Inconsistent {
            line,
            message: format!("id {} allows no memory type", a.id),
        });
    }
    Ok(())
}

/// Reads a trace one event at a time (for traces too large to hold).
///
/// Checks each line's syntax and the header; [`Trace::validate`] checks the
/// ids.
pub struct TraceReader<R> {
    reader: R,
    header: TraceHeader,
    line: usize,
    buf: String,
}

impl<R: BufRead> TraceReader<R> {
    /// Reads and checks the header line.
    pub fn new(mut reader: R) -> Result<Self, TraceError> {
        let mut buf = String::new();
        let mut line = 0;
        loop {
            buf.clear();
            if reader.read_line(&mut buf)? == 0 {
                return Err(TraceError::BadHeader("the trace is empty".into()));
            }
            line += 1;
            if !buf.trim().is_empty() {
                break;
            }
        }
        let HeaderLine::Header(header) =
            serde_json::from_str(buf.trim()).map_err(|e| TraceError::Parse {
                line,
                message: format!("expected a header line: {e}"),
            })?;
        check_header(&header)?;
        Ok(Self {
            reader,
            header,
            line,
            buf,
        })
    }

    /// The header.
    pub fn header(&self) -> &TraceHeader {
        &self.header
    }

    /// The next event, or `None` at the end. Blank lines are skipped.
    pub fn next_event(&mut self) -> Result<Option<TraceEvent>, TraceError> {
        loop {
            self.buf.clear();
            if self.reader.read_line(&mut self.buf)? == 0 {
                return Ok(None);
            }
            self.line += 1;
            let text = self.buf.trim();
            if text.is_empty() {
                continue;
            }
            let event: TraceEvent = serde_json::from_str(text).map_err(|e| TraceError::Parse {
                line: self.line,
                message: e.to_string(),
            })?;
            if let TraceEvent::Alloc(a) = &event {
                check_alloc(a, self.line)?;
            }
            return Ok(Some(event));
        }
    }
}

/// Writes a trace one event at a time (what a recorder uses).
pub struct TraceWriter<W: Write> {
    writer: W,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the header line.
    pub fn new(mut writer: W, header: &TraceHeader) -> Result<Self, TraceError> {
        let line = serde_json::to_string(&HeaderLine::Header(header.clone()))
            .map_err(|e| TraceError::Io(io::Error::other(e)))?;
        writer.write_all(line.as_bytes())?;
        writer.write_all(b"\n")?;
        Ok(Self { writer })
    }

    /// Writes one event line.
    pub fn event(&mut self, event: &TraceEvent) -> Result<(), TraceError> {
        serde_json::to_writer(&mut self.writer, event)
            .map_err(|e| TraceError::Io(io::Error::other(e)))?;
        self.writer.write_all(b"\n")?;
        Ok(())
    }

    /// Flushes and returns the writer.
    pub fn finish(mut self) -> Result<W, TraceError> {
        self.writer.flush()?;
        Ok(self.writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Trace {
        Trace {
            header: TraceHeader::new("sample", 7, "small"),
            events: vec![
                TraceEvent::Frame { index: 0 },
                TraceEvent::Alloc(AllocEvent {
                    id: 0,
                    size: 4096,
                    alignment: 256,
                    memory_type_bits: u32::MAX,
                    kind: TraceKind::Buffer,
                    usage: TraceUsage::Upload,
                    dedicated: TraceDedicated::None,
                    tag: "uniforms".into(),
                }),
                TraceEvent::Alloc(AllocEvent {
                    id: 1,
                    size: 1 << 26,
                    alignment: 65536,
                    memory_type_bits: 1,
                    kind: TraceKind::OptimalImage,
                    usage: TraceUsage::GpuOnly,
                    dedicated: TraceDedicated::Preferred,
                    tag: String::new(),
                }),
                TraceEvent::Free { id: 0 },
            ],
        }
    }

    #[test]
    fn round_trip() {
        let t = sample();
        let mut out = Vec::new();
        t.write(&mut out).unwrap();
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(text.starts_with(r#"{"type":"header","format":"vkalloc-trace","version":1"#));
        assert!(text.contains(r#"{"type":"free","id":0}"#));
        let back = Trace::read(&out[..]).unwrap();
        assert_eq!(back, t);
        let s = back.validate().unwrap();
        assert_eq!((s.allocs, s.frees, s.frames, s.live_at_end), (2, 1, 1, 1));
        assert_eq!(s.peak_live_bytes, 4096 + (1 << 26));
    }

    #[test]
    fn rejects_bad_traces() {
        let v2 = r#"{"type":"header","format":"vkalloc-trace","version":2,"name":"x"}"#;
        assert!(matches!(
            Trace::read(v2.as_bytes()),
            Err(TraceError::BadHeader(_))
        ));
        let double_free = concat!(
            r#"{"type":"header","format":"vkalloc-trace","version":1,"name":"x"}"#,
            "\n",
            r#"{"type":"alloc","id":3,"size":16,"alignment":16,"memory_type_bits":1,"kind":"buffer","usage":"gpu_only"}"#,
            "\n",
            r#"{"type":"free","id":3}"#,
            "\n",
            r#"{"type":"free","id":3}"#,
            "\n"
        );
        assert!(matches!(
            Trace::read(double_free.as_bytes()),
            Err(TraceError::Inconsistent { line: 4, .. })
        ));
        let bad_align = concat!(
            r#"{"type":"header","format":"vkalloc-trace","version":1,"name":"x"}"#,
            "\n",
            r#"{"type":"alloc","id":3,"size":16,"alignment":24,"memory_type_bits":1,"kind":"buffer","usage":"gpu_only"}"#,
        );
        assert!(Trace::read(bad_align.as_bytes()).is_err());
    }
}
