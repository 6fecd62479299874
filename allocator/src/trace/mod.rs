//! Allocation traces: the format ([`mod@format`]) and recording from a live
//! allocator ([`Recorder`], started with [`crate::Allocator::start_recording`]).
//!
//! Recording is off by default; when off it costs one relaxed atomic load
//! per allocate and free.

pub mod format;

use std::collections::HashMap;
use std::io::Write;

pub use format::*;

use crate::desc::{AllocationDesc, DriverDedicated, ResourceKind};
use crate::device::{DeviceMemory, MemoryPropertyFlags};
use crate::select::MemoryUsage;

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

fn usage(usage: MemoryUsage) -> TraceUsage {
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

impl Recorder {
    /// A recorder writing to `writer`, starting with a header named `name`.
    ///
    /// # Errors
    /// When the header can't be written.
    pub fn new(writer: Box<dyn Write + Send>, name: &str) -> Result<Self, TraceError> {
        let header = TraceHeader::new(name, 0, "recorded");
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
        let kind = match desc.kind {
            ResourceKind::LinearImage => TraceKind::LinearImage,
            ResourceKind::OptimalImage => TraceKind::OptimalImage,
            ResourceKind::Buffer | ResourceKind::Unknown => TraceKind::Buffer,
        };
        let dedicated = match desc.driver_dedicated {
            DriverDedicated::None => TraceDedicated::None,
            DriverDedicated::Preferred => TraceDedicated::Preferred,
            DriverDedicated::Required => TraceDedicated::Required,
        };
        self.write(&TraceEvent::Alloc(AllocEvent {
            id,
            size: desc.size,
            alignment: desc.alignment.max(1),
            memory_type_bits: desc.memory_type_bits,
            kind,
            usage: usage(desc.options.usage),
            dedicated,
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
