//! `report.json`: settings, device, per-frame times, texture memory, allocator statistics.

pub mod summary;

use serde::Serialize;

use crate::cli::Settings;
use crate::frame::FrameTimes;

/// One frame's line in the report.
#[derive(Clone, Debug, Serialize)]
pub struct FrameRecord {
    /// Frame index.
    pub frame: u32,
    /// CPU milliseconds spent recording.
    pub cpu_ms: f64,
    /// Wall-clock milliseconds from recording to fence.
    pub wall_ms: f64,
    /// GPU milliseconds per pass.
    pub gpu_ms: std::collections::BTreeMap<String, f64>,
    /// GPU milliseconds, all passes.
    pub gpu_total_ms: f64,
    /// Texture bytes resident.
    pub texture_bytes: u64,
    /// The texture budget.
    pub texture_budget: u64,
    /// Texture streaming figures (gallery scene).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub streaming: Option<crate::streaming::StreamFrame>,
    /// PSNR against `--compare`'s frame, dB (100 = identical).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psnr_db: Option<f64>,
    /// The overlay's CPU milliseconds on the render thread this frame, with
    /// `--overlay`: waiting for and installing the layout thread's last layout
    /// (egui texture uploads included) and posting the next.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlay_cpu_ms: Option<f64>,
    /// Whether a new layout of the panels was installed this frame (the
    /// layout thread makes one at most every 50 ms without input; the last
    /// one is drawn in between).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlay_laid_out: Option<bool>,
    /// The layout thread's milliseconds for the layout installed this frame
    /// (snapshot, egui layout, tessellation; on another core).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlay_layout_ms: Option<f64>,
}

impl FrameRecord {
    /// Builds a record from the frame's times.
    pub fn new(frame: u32, t: &FrameTimes, texture_bytes: u64, texture_budget: u64) -> Self {
        let gpu_ms: std::collections::BTreeMap<_, _> = t.gpu_ms.iter().cloned().collect();
        Self {
            frame,
            cpu_ms: t.cpu_record_ms,
            wall_ms: t.wall_ms,
            gpu_total_ms: gpu_ms.values().sum(),
            gpu_ms,
            texture_bytes,
            texture_budget,
            streaming: None,
            psnr_db: None,
            overlay_cpu_ms: None,
            overlay_laid_out: None,
            overlay_layout_ms: None,
        }
    }
}

/// Median and 99th percentile.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Percentiles {
    /// Median.
    pub median: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

/// Percentiles of `values` (nearest rank).
pub fn percentiles(values: &[f64]) -> Percentiles {
    if values.is_empty() {
        return Percentiles::default();
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Percentiles {
        median: rank(0.5),
        p99: rank(0.99),
        max: *v.last().unwrap(),
    }
}

/// The whole report.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Resolved settings.
    pub settings: Settings,
    /// The device.
    pub device: serde_json::Value,
    /// Seconds spent baking materials (0 when cached).
    pub bake_seconds: f64,
    /// Seconds spent loading and uploading textures.
    pub load_seconds: f64,
    /// Per frame.
    pub frames: Vec<FrameRecord>,
    /// GPU frame time percentiles (ms).
    pub gpu_frame_ms: Percentiles,
    /// Wall-clock frame time percentiles (ms).
    pub wall_frame_ms: Percentiles,
    /// Peak texture bytes resident.
    pub peak_texture_bytes: u64,
    /// Validation errors counted by the debug messenger.
    pub validation_errors: u32,
    /// The allocator's statistics at the last frame.
    pub allocator: serde_json::Value,
    /// The renderer's aliased transient targets: bytes saved, the groups.
    pub aliasing: crate::frame::targets::AliasingReport,
    /// Texture streaming over the run (gallery scene).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub streaming: Option<summary::StreamingSummary>,
    /// The texture pool's defragmentation over the run (gallery scene).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub defrag: Option<summary::DefragSummary>,
    /// One line for humans.
    pub summary: String,
    /// The queue streaming uploads went on ([`crate::gpu::Context::upload_queue_name`]),
    /// copied into `streaming.upload_queue` by [`Report::finish`].
    #[serde(skip)]
    pub upload_queue: &'static str,
    /// How the scene streamed its textures, "tiles" or "levels"
    /// ([`crate::frame::SceneStreaming::residency`]), copied into
    /// `streaming.residency` by [`Report::finish`].
    #[serde(skip)]
    pub residency: &'static str,
}

impl Report {
    /// Fills the percentiles and summary from the frames.
    pub fn finish(&mut self) {
        let gpu: Vec<f64> = self.frames.iter().map(|f| f.gpu_total_ms).collect();
        let wall: Vec<f64> = self.frames.iter().map(|f| f.wall_ms).collect();
        self.gpu_frame_ms = percentiles(&gpu);
        self.wall_frame_ms = percentiles(&wall);
        self.peak_texture_bytes = self
            .frames
            .iter()
            .map(|f| f.texture_bytes)
            .max()
            .unwrap_or(0);
        self.summary = format!(
            "{} frames at {}x{} on {}: GPU median {:.2} ms, p99 {:.2} ms; wall median {:.1} ms; textures {:.1} MiB of {:.1} MiB budget; {} validation errors",
            self.frames.len(),
            self.settings.width,
            self.settings.height,
            self.device["name"].as_str().unwrap_or("?"),
            self.gpu_frame_ms.median,
            self.gpu_frame_ms.p99,
            self.wall_frame_ms.median,
            self.peak_texture_bytes as f64 / (1 << 20) as f64,
            self.settings.texture_budget as f64 / (1 << 20) as f64,
            self.validation_errors
        );
        self.streaming = summary::StreamingSummary::from_frames(
            self.settings.streaming,
            self.settings.lookahead,
            &self.frames,
        );
        if let Some(s) = self.streaming.as_mut() {
            s.upload_queue = self.upload_queue;
            s.residency = self.residency;
        }
        if let Some(s) = &self.streaming {
            self.summary.push_str(&format!("; {}", s.line()));
        }
        self.defrag = summary::DefragSummary::from_frames(&self.frames);
        if let Some(d) = &self.defrag {
            self.summary.push_str(&format!("; {}", d.line()));
        }
    }
}

impl Report {
    /// Records the streamer's pre-fill (`None`: it did not run) in the
    /// `streaming` object and adds it to the summary.
    pub fn set_prefill(&mut self, prefill: Option<&crate::streaming::Prefill>) {
        if let Some(s) = self.streaming.as_mut() {
            s.set_prefill(prefill);
            if let Some(p) = prefill {
                self.summary.push_str(&format!(
                    "; pre-fill {:.1} ms, {:.1} MiB",
                    p.ms,
                    p.bytes as f64 / (1u64 << 20) as f64
                ));
            }
        }
    }

    /// Records what the streamer's prefetch read (`streaming.lookahead`,
    /// [`crate::camera::CameraRig::lookahead`]).
    /// Streaming off prefetches nothing whatever the camera.
    pub fn set_lookahead(&mut self, lookahead: &'static str) {
        if let Some(s) = self.streaming.as_mut() {
            if s.mode == crate::streaming::Mode::On {
                s.lookahead = lookahead;
            }
        }
    }

    /// Sets `aliasing` and adds it to the summary.
    pub fn set_aliasing(&mut self, aliasing: crate::frame::targets::AliasingReport) {
        if let Some(g) = aliasing.groups.first() {
            let names: Vec<&str> = g.members.iter().map(|m| m.name.as_str()).collect();
            self.summary.push_str(&format!(
                "; aliasing saved {:.2} MiB ({} on one {:.2} MiB allocation)",
                aliasing.bytes_saved as f64 / (1 << 20) as f64,
                names.join(" + "),
                g.allocation_bytes as f64 / (1 << 20) as f64
            ));
        }
        self.aliasing = aliasing;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let p = percentiles(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!(p.median, 3.0);
        assert_eq!(p.p99, 5.0);
        assert_eq!(percentiles(&[]).median, 0.0);
    }
}
