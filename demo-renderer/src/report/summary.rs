//! The report's top-level `streaming` object, from the per-frame figures.
#![forbid(unsafe_code)]

use serde::Serialize;

use super::{percentiles, FrameRecord};
use crate::streaming::view_change::ViewChange;
use crate::streaming::{Mode, Prefill, PrefillEnd, StreamFrame};

/// The mip deficit below which a view counts as refilled after a camera cut.
pub const REFILLED_DEFICIT: f64 = 0.1;

/// Streaming over a whole run.
#[derive(Clone, Debug, Serialize)]
pub struct StreamingSummary {
    /// "on" or "off".
    pub mode: Mode,
    /// The queue streaming uploads went on: "transfer" (a transfer-only queue
    /// family, with queue-family ownership transfers), "graphics", or
    /// "graphics-split" (the transfer path's submissions on the graphics queue, a
    /// test mode).
    pub upload_queue: &'static str,
    /// How textures were streamed (`--residency`): "tiles" (sparse images, one
    /// 64 KiB page at a time) or "levels" (whole mip levels; also with
    /// streaming off).
    pub residency: &'static str,
    /// Frames of the camera path ahead whose wants were prefetched (`--lookahead`;
    /// 0: off, and always 0 with streaming off).
    pub lookahead_frames: u32,
    /// What the prefetch read: "script" (the scripted path's coming frames),
    /// "prediction" (a camera without a future: its recent motion
    /// extrapolated) or "off" ([`crate::camera::CameraRig::lookahead`]).
    pub lookahead: &'static str,
    /// Frames whose resident texture bytes (or the texture pool's blocks) exceeded the budget.
    pub frames_over_budget: u32,
    /// Mean over frames of the mip deficit.
    pub mean_mip_deficit: f64,
    /// 99th percentile over frames of the mip deficit.
    pub p99_mip_deficit: f64,
    /// File bytes uploaded over the milliseconds spent reading them into staging, GB/s.
    pub upload_gbps: f64,
    /// File bytes uploaded in all.
    pub upload_bytes: u64,
    /// Bytes copied from staging over the GPU time of those copies on the queue
    /// that ran them (timestamps), GB/s; 0 without timestamps.
    pub upload_gpu_gbps: f64,
    /// Residency changes started in all.
    pub residency_changes: u64,
    /// For each camera cut, milliseconds from the cut frame's start to the start of
    /// the first frame whose deficit is below 0.1 (`null`: not before the next cut
    /// or the end).
    pub refill_ms: Vec<Option<f64>>,
    /// The same in frames.
    pub refill_frames: Vec<Option<u32>>,
    /// Each abrupt view change (announced cut, pose jump, feedback change;
    /// the frames' `view_change`), consecutive changed frames taken as one.
    pub view_changes: Vec<ViewChangeEvent>,
    /// Lowest per-frame PSNR against `--compare`, dB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_psnr_db: Option<f64>,
    /// Mean per-frame PSNR against `--compare`, dB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_psnr_db: Option<f64>,
    /// Frames whose PSNR against `--compare` is below [`PSNR_FLOOR_DB`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frames_below_40_db: Option<u32>,
    /// Milliseconds the pre-fill took before the first frame (`--prefill`; 0 when
    /// it did not run: `--prefill off` or streaming off).
    pub prefill_ms: f64,
    /// File bytes the pre-fill read and uploaded.
    pub prefill_bytes: u64,
    /// The pre-fill's rounds of policy, loads and wait.
    pub prefill_rounds: u32,
    /// The largest of the resident texture bytes and the texture pool's committed
    /// bytes during the pre-fill (the budget holds here too).
    pub prefill_peak_bytes: u64,
    /// Why the pre-fill ended: "settled", "stalled" or "time_limit" (`null`: it
    /// did not run).
    pub prefill_end: Option<PrefillEnd>,
}

/// One abrupt view change over the run: a run of consecutive frames whose
/// `view_change` is not "none" (a swing of a few frames is one), and the
/// refill after it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ViewChangeEvent {
    /// Its first frame.
    pub frame: u32,
    /// Its last frame (the view settles after it).
    pub last_frame: u32,
    /// The first frame's `view_change`.
    pub kind: ViewChange,
    /// Frames from the last frame to the first frame (that one or later)
    /// whose mip deficit is below 0.1, before the next change (`null`: not
    /// before it or the end); a quality run reads every frame back, so the
    /// frames count where its milliseconds mean little.
    pub refill_frames: Option<u32>,
    /// The same in milliseconds between the frames' starts.
    pub refill_ms: Option<f64>,
    /// The lowest PSNR against `--compare` of its frames and the frame after.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_psnr_db: Option<f64>,
    /// With `--compare`: frames from the last frame to the first (that one
    /// or later) at [`PSNR_FLOOR_DB`] or more, before the next change (`null`:
    /// not before it or the end). Where the view wants more than the budget
    /// holds, the deficit stays above 0.1 while the frames are right: this
    /// says when they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refill_40_db_frames: Option<Option<u32>>,
}

/// The first frame at or after `k` and before `end` whose deficit is below
/// [`REFILLED_DEFICIT`]: milliseconds and frames from `k`.
fn refill(s: &[(&FrameRecord, &StreamFrame)], k: usize, end: usize) -> (Option<f64>, Option<u32>) {
    let j = (k..end).find(|&j| s[j].1.mip_deficit < REFILLED_DEFICIT);
    (
        j.map(|j| s[j].1.time_ms - s[k].1.time_ms),
        j.map(|j| (j - k) as u32),
    )
}

/// The runs of changed frames and the refill after each.
fn view_change_events(s: &[(&FrameRecord, &StreamFrame)]) -> Vec<ViewChangeEvent> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for k in (0..s.len()).filter(|&k| s[k].1.view_change.is_change()) {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == k => *last = k,
            _ => runs.push((k, k)),
        }
    }
    let mut out = Vec::new();
    for (n, &(first, last)) in runs.iter().enumerate() {
        let end = runs.get(n + 1).map_or(s.len(), |r| r.0);
        let (refill_ms, refill_frames) = refill(s, last, end);
        let psnr = s[first..(last + 2).min(s.len())]
            .iter()
            .filter_map(|(f, _)| f.psnr_db)
            .reduce(f64::min);
        let compared = s[last].0.psnr_db.is_some();
        let good = (last..end).find(|&j| s[j].0.psnr_db.is_some_and(|p| p >= PSNR_FLOOR_DB));
        out.push(ViewChangeEvent {
            refill_40_db_frames: compared.then(|| good.map(|j| (j - last) as u32)),
            frame: s[first].0.frame,
            last_frame: s[last].0.frame,
            kind: s[first].1.view_change,
            refill_frames,
            refill_ms,
            min_psnr_db: psnr,
        });
    }
    out
}

/// The per-frame quality goal of issue 7: PSNR against the all-resident render.
pub const PSNR_FLOOR_DB: f64 = 40.0;

impl StreamingSummary {
    /// Summarizes `frames`; `None` when they carry no streaming figures.
    pub fn from_frames(mode: Mode, lookahead_frames: u32, frames: &[FrameRecord]) -> Option<Self> {
        let s: Vec<(&FrameRecord, &crate::streaming::StreamFrame)> = frames
            .iter()
            .filter_map(|f| f.streaming.as_ref().map(|s| (f, s)))
            .collect();
        if s.is_empty() {
            return None;
        }
        let deficits: Vec<f64> = s.iter().map(|(_, x)| x.mip_deficit).collect();
        let over = s
            .iter()
            .filter(|(f, x)| {
                x.texture_resident_bytes > f.texture_budget
                    || x.texture_pool_committed_bytes > f.texture_budget
            })
            .count() as u32;
        let upload_bytes: u64 = s.iter().map(|(_, x)| x.upload_bytes).sum();
        let upload_ms: f64 = s.iter().map(|(_, x)| x.upload_ms).sum();
        let gpu_bytes: u64 = s.iter().map(|(_, x)| x.upload_gpu_bytes).sum();
        let gpu_ms: f64 = s.iter().map(|(_, x)| x.upload_gpu_ms).sum();
        let cuts: Vec<usize> = (0..s.len()).filter(|&k| s[k].1.camera_cut).collect();
        let mut refill_ms = Vec::new();
        let mut refill_frames = Vec::new();
        for (n, &k) in cuts.iter().enumerate() {
            let end = cuts.get(n + 1).copied().unwrap_or(s.len());
            let (ms, frames) = refill(&s, k, end);
            refill_ms.push(ms);
            refill_frames.push(frames);
        }
        let psnr: Vec<f64> = frames.iter().filter_map(|f| f.psnr_db).collect();
        Some(Self {
            mode,
            upload_queue: "graphics",
            residency: "levels",
            lookahead_frames: match mode {
                Mode::On => lookahead_frames,
                Mode::Off => 0,
            },
            lookahead: match mode {
                Mode::On if lookahead_frames > 0 => "script",
                _ => "off",
            },
            frames_over_budget: over,
            mean_mip_deficit: deficits.iter().sum::<f64>() / deficits.len() as f64,
            p99_mip_deficit: percentiles(&deficits).p99,
            upload_gbps: if upload_ms > 0.0 {
                upload_bytes as f64 / (upload_ms * 1e-3) / 1e9
            } else {
                0.0
            },
            upload_bytes,
            upload_gpu_gbps: if gpu_ms > 0.0 {
                gpu_bytes as f64 / (gpu_ms * 1e-3) / 1e9
            } else {
                0.0
            },
            residency_changes: s.iter().map(|(_, x)| x.residency_changes as u64).sum(),
            refill_ms,
            refill_frames,
            view_changes: view_change_events(&s),
            min_psnr_db: psnr.iter().copied().reduce(f64::min),
            mean_psnr_db: (!psnr.is_empty()).then(|| psnr.iter().sum::<f64>() / psnr.len() as f64),
            frames_below_40_db: (!psnr.is_empty())
                .then(|| psnr.iter().filter(|&&p| p < PSNR_FLOOR_DB).count() as u32),
            prefill_ms: 0.0,
            prefill_bytes: 0,
            prefill_rounds: 0,
            prefill_peak_bytes: 0,
            prefill_end: None,
        })
    }

    /// Records what the pre-fill did (`None`: it did not run).
    pub fn set_prefill(&mut self, p: Option<&Prefill>) {
        self.prefill_ms = p.map_or(0.0, |p| p.ms);
        self.prefill_bytes = p.map_or(0, |p| p.bytes);
        self.prefill_rounds = p.map_or(0, |p| p.rounds);
        self.prefill_peak_bytes = p.map_or(0, |p| p.peak_bytes);
        self.prefill_end = p.map(|p| p.end);
    }

    /// The summary line's streaming part.
    pub fn line(&self) -> String {
        let refill: Vec<String> = self
            .refill_ms
            .iter()
            .map(|r| r.map_or("never".to_owned(), |ms| format!("{ms:.0} ms")))
            .collect();
        let mut line = format!(
            "streaming {} by {}: {} frames over budget, mip deficit mean {:.3} p99 {:.3}, uploads {:.1} MiB at {:.2} GB/s (copies {:.2} GB/s on the {} queue), refill after cuts [{}]",
            match self.mode {
                Mode::On => "on",
                Mode::Off => "off",
            },
            self.residency,
            self.frames_over_budget,
            self.mean_mip_deficit,
            self.p99_mip_deficit,
            self.upload_bytes as f64 / (1u64 << 20) as f64,
            self.upload_gbps,
            self.upload_gpu_gbps,
            self.upload_queue,
            refill.join(", ")
        );
        let count = |k: ViewChange| self.view_changes.iter().filter(|e| e.kind == k).count();
        let worst = self
            .view_changes
            .iter()
            .map(|e| {
                e.refill_frames
                    .map_or("never".to_owned(), |n| n.to_string())
            })
            .max_by_key(|t| (t == "never", t.parse::<u32>().unwrap_or(0)));
        line.push_str(&format!(
            "; view changes: {} cuts, {} jumps, {} feedback, refill at most {} frames",
            count(ViewChange::Cut),
            count(ViewChange::Jump),
            count(ViewChange::Feedback),
            worst.unwrap_or_else(|| "0".to_owned())
        ));
        if let (Some(min), Some(mean)) = (self.min_psnr_db, self.mean_psnr_db) {
            line.push_str(&format!(
                "; PSNR min {min:.1} dB mean {mean:.1} dB, {} frames below {PSNR_FLOOR_DB} dB",
                self.frames_below_40_db.unwrap_or(0)
            ));
        }
        line
    }
}

/// The report's top-level `defrag` object: the texture pool's defragmentation
/// over the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DefragSummary {
    /// Bytes of texture images moved.
    pub bytes_moved: u64,
    /// Passes that moved images.
    pub passes: u64,
    /// New texture images whose allocation failed although the pool had the
    /// bytes free (fragmentation).
    pub fragmentation_failures: u64,
    /// New texture images put off because no free range held them although the
    /// pool had the bytes free (fragmentation; they wait for a later frame).
    pub fragmentation_deferrals: u64,
}

impl DefragSummary {
    /// Sums `frames`' figures; `None` when they carry no streaming figures.
    pub fn from_frames(frames: &[FrameRecord]) -> Option<Self> {
        let mut out: Option<Self> = None;
        for s in frames.iter().filter_map(|f| f.streaming.as_ref()) {
            let d = out.get_or_insert_with(Self::default);
            d.bytes_moved += s.defrag_bytes_moved;
            d.passes += u64::from(s.defrag_passes);
            d.fragmentation_failures += u64::from(s.fragmentation_failures);
            d.fragmentation_deferrals += u64::from(s.fragmentation_deferrals);
        }
        out
    }

    /// The summary line's defragmentation part.
    pub fn line(&self) -> String {
        format!(
            "defrag: {} passes, {:.1} MiB moved, {} fragmentation failures, {} deferrals",
            self.passes,
            self.bytes_moved as f64 / (1u64 << 20) as f64,
            self.fragmentation_failures,
            self.fragmentation_deferrals
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::FrameTimes;
    use crate::streaming::StreamFrame;

    fn frame(i: u32, deficit: f64, cut: bool, resident: u64) -> FrameRecord {
        let mut f = FrameRecord::new(i, &FrameTimes::default(), resident, 100);
        f.streaming = Some(StreamFrame {
            texture_resident_bytes: resident,
            mip_deficit: deficit,
            camera_cut: cut,
            time_ms: i as f64 * 10.0,
            upload_bytes: 1000,
            upload_ms: 0.001,
            upload_gpu_bytes: 2000,
            upload_gpu_ms: 0.001,
            ..StreamFrame::default()
        });
        f
    }

    #[test]
    fn refill_over_budget_and_rates() {
        let frames = vec![
            frame(0, 0.0, false, 50),
            frame(1, 1.5, true, 60),
            frame(2, 0.5, false, 101),
            frame(3, 0.05, false, 90),
            frame(4, 2.0, true, 90),
            frame(5, 1.0, false, 90),
        ];
        let s = StreamingSummary::from_frames(Mode::On, 16, &frames).unwrap();
        assert_eq!(s.lookahead_frames, 16);
        assert_eq!(s.frames_below_40_db, None);
        assert_eq!(s.frames_over_budget, 1);
        // Cut at frame 1 refilled at frame 3 (20 ms later); the one at frame 4 never.
        assert_eq!(s.refill_ms, vec![Some(20.0), None]);
        assert_eq!(s.refill_frames, vec![Some(2), None]);
        assert!((s.mean_mip_deficit - 5.05 / 6.0).abs() < 1e-9);
        assert_eq!(s.p99_mip_deficit, 2.0);
        assert_eq!(s.upload_bytes, 6000);
        assert!((s.upload_gbps - 1.0).abs() < 1e-9); // 6000 B in 6 us
        assert!((s.upload_gpu_gbps - 2.0).abs() < 1e-9); // 12000 B in 6 us
        assert!(s.line().contains("refill after cuts [20 ms, never]"));
        assert!(StreamingSummary::from_frames(Mode::On, 0, &[]).is_none());
        // PSNR against --compare: the frames under the 40 dB floor are counted;
        // streaming off reports no look-ahead.
        let mut frames = vec![frame(0, 0.0, false, 50), frame(1, 0.0, false, 50)];
        frames[0].psnr_db = Some(39.9);
        frames[1].psnr_db = Some(52.0);
        let s = StreamingSummary::from_frames(Mode::Off, 16, &frames).unwrap();
        assert_eq!(s.frames_below_40_db, Some(1));
        assert_eq!(s.lookahead_frames, 0);
        assert_eq!(s.min_psnr_db, Some(39.9));
    }

    #[test]
    fn view_changes_are_runs_with_their_refill() {
        let kinds = [
            ViewChange::None,
            ViewChange::Jump,
            ViewChange::Jump,
            ViewChange::None,
            ViewChange::None,
            ViewChange::Feedback,
            ViewChange::None,
            ViewChange::Cut,
            ViewChange::None,
        ];
        let deficits = [0.0, 2.0, 1.0, 0.5, 0.05, 0.3, 0.2, 1.0, 0.5];
        let mut frames: Vec<FrameRecord> = (0..9)
            .map(|i| frame(i, deficits[i as usize], false, 50))
            .collect();
        for (f, k) in frames.iter_mut().zip(kinds) {
            f.streaming.as_mut().unwrap().view_change = k;
            f.psnr_db = Some(50.0 - f.frame as f64);
        }
        frames[2].psnr_db = Some(30.0);
        frames[3].psnr_db = Some(35.0);
        let s = StreamingSummary::from_frames(Mode::On, 16, &frames).unwrap();
        let e = &s.view_changes;
        assert_eq!(e.len(), 3, "{e:?}");
        // The jump of frames 1-2 settles at 2 and refills at 4: 2 frames, 20 ms.
        assert_eq!(
            (e[0].frame, e[0].last_frame, e[0].kind),
            (1, 2, ViewChange::Jump)
        );
        assert_eq!((e[0].refill_frames, e[0].refill_ms), (Some(2), Some(20.0)));
        assert_eq!(e[0].min_psnr_db, Some(30.0));
        assert_eq!(e[0].refill_40_db_frames, Some(Some(2)));
        // The feedback change at 5 does not refill before the cut at 7.
        assert_eq!(
            (e[1].kind, e[1].refill_frames),
            (ViewChange::Feedback, None)
        );
        // The cut at 7 never refills either; the line says so.
        assert_eq!((e[2].kind, e[2].refill_ms), (ViewChange::Cut, None));
        let line = s.line();
        assert!(
            line.contains("1 cuts, 1 jumps, 1 feedback, refill at most never"),
            "{line}"
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["view_changes"][0]["kind"], "jump");
        assert_eq!(json["view_changes"][1]["kind"], "feedback");
    }

    #[test]
    fn prefill_fields() {
        let frames = vec![frame(0, 0.0, false, 50)];
        let mut s = StreamingSummary::from_frames(Mode::On, 16, &frames).unwrap();
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["prefill_ms"].as_f64(), Some(0.0));
        assert_eq!(json["prefill_bytes"].as_u64(), Some(0));
        assert!(json["prefill_end"].is_null());
        let p = Prefill {
            ms: 42.0,
            bytes: 1234,
            rounds: 3,
            changes: 7,
            defrag_bytes: 0,
            peak_bytes: 99,
            resident_bytes: 90,
            end: PrefillEnd::TimeLimit,
        };
        s.set_prefill(Some(&p));
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["prefill_ms"].as_f64(), Some(42.0));
        assert_eq!(json["prefill_bytes"].as_u64(), Some(1234));
        assert_eq!(json["prefill_rounds"].as_u64(), Some(3));
        assert_eq!(json["prefill_peak_bytes"].as_u64(), Some(99));
        assert_eq!(json["prefill_end"], "time_limit");
        s.set_prefill(None);
        assert_eq!(s.prefill_bytes, 0);
        assert_eq!(s.prefill_end, None);
    }

    #[test]
    fn defrag_sums_the_frames() {
        let mut frames = vec![frame(0, 0.0, false, 50), frame(1, 0.0, false, 50)];
        if let Some(s) = frames[1].streaming.as_mut() {
            s.defrag_bytes_moved = 3 << 20;
            s.defrag_passes = 1;
            s.fragmentation_failures = 2;
            s.fragmentation_deferrals = 4;
        }
        let d = DefragSummary::from_frames(&frames).unwrap();
        assert_eq!(
            d,
            DefragSummary {
                bytes_moved: 3 << 20,
                passes: 1,
                fragmentation_failures: 2,
                fragmentation_deferrals: 4
            }
        );
        assert_eq!(
            d.line(),
            "defrag: 1 passes, 3.0 MiB moved, 2 fragmentation failures, 4 deferrals"
        );
        assert!(DefragSummary::from_frames(&[]).is_none());
    }
}
