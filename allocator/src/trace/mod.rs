//! Allocation traces: the format ([`mod@format`]) and recording from a live
//! allocator ([`Recorder`], started with [`crate::Allocator::start_recording`]).
//!
//! Recording is off by default; when off it costs one relaxed atomic load
//! per allocate and free.

#![forbid(unsafe_code)]

pub mod format;

use std::collections::HashMap;
use std::io::Write;

pub use format::*;

use crate::desc::{AllocationDesc, AllocationOptions, DriverDedicated, ResourceKind};
use crate::device::{DeviceMemory, MemoryPropertyFlags};
use crate::select::MemoryUsage;

/// The `note` a recording starts with: the recording device's memory types'
/// property flags, `memory_type_flags=[f0,f1,...]`, which say what the
/// trace's `memory_type_bits` mean (a replayer on other memory types widens
/// them).
pub fn memory_types_note(types: &[crate::device::MemoryType]) -> String {
    let flags: Vec<String> = types.iter().map(|t| t.flags.0.to_string()).collect();
    format!("memory_type_flags=[{}]", flags.join(","))
}

/// Reads the memory types' flags back from a note written with
/// [`memory_types_note`]; `None` if the note has none.
pub fn memory_types_of_note(note: &str) -> Option<Vec<u32>> {
    let start = note.find("memory_type_flags=[")? + "memory_type_flags=[".len();
    let end = start + note[start..].find(']')?;
    let list = &note[start..end];
    if list.is_empty() {
        return Some(Vec::new());
    }
    list.split(',').map(|f| f.trim().parse().ok()).collect()
}

/// Writes the events of a live allocator as a trace.
///
/// Trace ids are given in allocation order; allocations made before
/// recording started are not in the trace, and their frees are left out.
pub struct Recorder {
    writer: TraceWriter<Box<dyn Write + Send>>,
    ids: HashMap<(DeviceMemory, u64), u64>,
    next_id: u64,
    /// The first write error, kept for [`crate::Allocator::stop_recording`].
    error: Option<TraceError>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("live", &self.ids.len())
            .field("next_id", &self.next_id)
            .finish_non_exhaustive()
    }
}

impl From<MemoryUsage> for TraceUsage {
    fn from(usage: MemoryUsage) -> Self {
        match usage {
            MemoryUsage::GpuOnly => TraceUsage::GpuOnly,
            MemoryUsage::Upload => TraceUsage::Upload,
            MemoryUsage::Readback => TraceUsage::Readback,
            MemoryUsage::Transient => TraceUsage::Transient,
            // Custom flags have no name in the format: keep the essential split.
            MemoryUsage::Custom(flags)
                if flags.required.contains(MemoryPropertyFlags::HOST_VISIBLE) =>
            {
                if flags.preferred.contains(MemoryPropertyFlags::HOST_CACHED) {
                    TraceUsage::Readback
                } else {
                    TraceUsage::Upload
                }
            }
            MemoryUsage::Custom(_) => TraceUsage::GpuOnly,
        }
    }
}

impl From<TraceUsage> for MemoryUsage {
    fn from(usage: TraceUsage) -> Self {
        match usage {
            TraceUsage::GpuOnly => MemoryUsage::GpuOnly,
            TraceUsage::Upload => MemoryUsage::Upload,
            TraceUsage::Readback => MemoryUsage::Readback,
            TraceUsage::Transient => MemoryUsage::Transient,
        }
    }
}

/// Memory of unknown use is recorded as a buffer, the format's closest kind.
impl From<ResourceKind> for TraceKind {
    fn from(kind: ResourceKind) -> Self {
        match kind {
            ResourceKind::LinearImage => TraceKind::LinearImage,
            ResourceKind::OptimalImage => TraceKind::OptimalImage,
            ResourceKind::Buffer | ResourceKind::Unknown => TraceKind::Buffer,
        }
    }
}

impl From<TraceKind> for ResourceKind {
    fn from(kind: TraceKind) -> Self {
        match kind {
            TraceKind::Buffer => ResourceKind::Buffer,
            TraceKind::LinearImage => ResourceKind::LinearImage,
            TraceKind::OptimalImage => ResourceKind::OptimalImage,
        }
    }
}

impl From<DriverDedicated> for TraceDedicated {
    fn from(dedicated: DriverDedicated) -> Self {
        match dedicated {
            DriverDedicated::None => TraceDedicated::None,
            DriverDedicated::Preferred => TraceDedicated::Preferred,
            DriverDedicated::Required => TraceDedicated::Required,
        }
    }
}

impl From<TraceDedicated> for DriverDedicated {
    fn from(dedicated: TraceDedicated) -> Self {
        match dedicated {
            TraceDedicated::None => DriverDedicated::None,
            TraceDedicated::Preferred => DriverDedicated::Preferred,
            TraceDedicated::Required => DriverDedicated::Required,
        }
    }
}

impl AllocEvent {
    /// The allocation request this event replays: its requirements, usage,
    /// the driver's dedicated wish and its tag, with every other option at
    /// its default.
    pub fn desc(&self) -> AllocationDesc<'_> {
        AllocationDesc {
            size: self.size,
            alignment: self.alignment,
            memory_type_bits: self.memory_type_bits,
            kind: self.kind.into(),
            driver_dedicated: self.dedicated.into(),
            dedicated_to: None,
            options: AllocationOptions::usage(self.usage.into()).tagged(&self.tag),
        }
    }
}

impl Recorder {
    /// A recorder writing to `writer`, starting with a header named `name`.
    ///
    /// # Errors
    /// When the header can't be written.
    pub fn new(writer: Box<dyn Write + Send>, name: &str) -> Result<Self, TraceError> {
        Self::with_note(writer, name, String::new())
    }

    /// [`Recorder::new`] with the header's `note` (for a reader: the device,
    /// the command line).
    ///
    /// # Errors
    /// When the header can't be written.
    pub fn with_note(
        writer: Box<dyn Write + Send>,
        name: &str,
        note: String,
    ) -> Result<Self, TraceError> {
        let mut header = TraceHeader::new(name, 0, "recorded");
        header.note = note;
        Ok(Self {
            writer: TraceWriter::new(writer, &header)?,
            ids: HashMap::new(),
            next_id: 0,
            error: None,
        })
    }

    fn write(&mut self, event: &TraceEvent) {
        if self.error.is_none() {
            if let Err(e) = self.writer.event(event) {
                self.error = Some(e);
            }
        }
    }

    /// Records an allocation made for `desc`, placed at `memory`/`offset`.
    pub(crate) fn alloc(&mut self, desc: &AllocationDesc<'_>, memory: DeviceMemory, offset: u64) {
        let id = self.next_id;
        self.next_id += 1;
        self.ids.insert((memory, offset), id);
        self.write(&TraceEvent::Alloc(AllocEvent {
            id,
            size: desc.size,
            alignment: desc.alignment.max(1),
            memory_type_bits: desc.memory_type_bits,
            kind: desc.kind.into(),
            usage: desc.options.usage.into(),
            dedicated: desc.driver_dedicated.into(),
            tag: desc.options.tag.to_owned(),
        }));
    }

    /// Records the free of the allocation at `memory`/`offset`.
    pub(crate) fn free(&mut self, memory: DeviceMemory, offset: u64) {
        if let Some(id) = self.ids.remove(&(memory, offset)) {
            self.write(&TraceEvent::Free { id });
        }
    }

    /// Records a frame boundary.
    pub(crate) fn frame(&mut self, index: u64) {
        self.write(&TraceEvent::Frame { index });
    }

    /// Flushes the trace and hands back the writer, or the first error.
    ///
    /// # Errors
    /// The first write error met while recording, or while flushing.
    pub fn finish(self) -> Result<Box<dyn Write + Send>, TraceError> {
        match self.error {
            Some(e) => Err(e),
            None => self.writer.finish(),
        }
    }
}

#[cfg(test)]
mod note_tests {
    use super::{memory_types_note, memory_types_of_note};
    use crate::device::{MemoryPropertyFlags, MemoryType};

    #[test]
    fn memory_types_round_trip_through_the_note() {
        let types = [0u32, 1, 6, 14, 7].map(|f| MemoryType {
            flags: MemoryPropertyFlags(f),
            heap_index: 0,
        });
        let note = memory_types_note(&types);
        assert_eq!(note, "memory_type_flags=[0,1,6,14,7]");
        assert_eq!(memory_types_of_note(&note), Some(vec![0, 1, 6, 14, 7]));
        let with_text = format!("recorded by the demo; {note}; 4K");
        assert_eq!(memory_types_of_note(&with_text), Some(vec![0, 1, 6, 14, 7]));
        assert_eq!(memory_types_of_note("memory_type_flags=[]"), Some(vec![]));
        assert_eq!(memory_types_of_note("no types here"), None);
        assert_eq!(memory_types_of_note("memory_type_flags=[1,x]"), None);
        assert_eq!(memory_types_of_note("memory_type_flags=[1,2"), None);
    }
}
