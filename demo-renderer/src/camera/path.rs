//! Recorded camera paths: the camera's pose per frame as one JSON object a
//! line, `{"frame": 0, "eye": [x, y, z], "target": [x, y, z], "fov_y_deg": 50.0}`,
//! in the gallery's world coordinates (y up, the floor at y = 0, objects 3.2
//! apart around the origin), frames numbered from 0 in order. `--record-path`
//! writes one ([`PathRecorder`]) from any run; `--camera-path` replays one
//! headless, frame `i` showing line `i` ([`RecordedPath`]). Other tools write
//! such files too: every line is checked, and a bad one is an error naming it.
//!
//! Numbers are written as Rust prints an `f32` (the shortest text that reads
//! back as the same `f32`), so a recording replayed and recorded again is the
//! same file.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::{Path, PathBuf};

use glam::Vec3;

use super::CameraPose;

/// What the format's description in an error says.
const FORMAT: &str = "each line is one object {\"frame\": N, \"eye\": [x, y, z], \
\"target\": [x, y, z], \"fov_y_deg\": F}, frames numbered 0, 1, 2, ... (demo-renderer/README.md, \
*Recorded camera paths*)";

/// A recorded path that cannot be read, replayed or written.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// The file cannot be opened or read.
    #[error("--camera-path {}: {source} (give a file written by --record-path)", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not a pose of the format.
    #[error("--camera-path {}, line {line}: {reason}; {FORMAT}", path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// The line, counted from 1.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The file holds no pose.
    #[error("--camera-path {}: no poses in the file (record one with --record-path FILE)", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The path has fewer frames than the run renders.
    #[error(
        "--camera-path {}: the path has {frames} frames, fewer than --frames {wanted}: give \
         --frames {frames} or fewer (or leave --frames out to replay the whole path), or record \
         a longer path",
        path.display()
    )]
    TooShort {
        /// The file.
        path: PathBuf,
        /// Frames it holds.
        frames: u32,
        /// Frames asked for.
        wanted: u32,
    },
    /// The recording cannot be written.
    #[error("--record-path {}: {reason}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// One line as the format spells it.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    frame: u64,
    eye: [f32; 3],
    target: [f32; 3],
    fov_y_deg: f32,
}

/// Why `pose` cannot be shown, if it cannot.
fn invalid(pose: &CameraPose) -> Option<String> {
    let finite = pose.eye.is_finite() && pose.target.is_finite() && pose.fov_y_deg.is_finite();
    if !finite {
        return Some("a number is out of range of a 32-bit float".into());
    }
    if !(pose.fov_y_deg > 0.0 && pose.fov_y_deg < 180.0) {
        return Some(format!(
            "fov_y_deg {} is outside 0..180 (degrees, both excluded)",
            pose.fov_y_deg
        ));
    }
    let dir = pose.target - pose.eye;
    if dir.length_squared() == 0.0 || !dir.length_squared().is_finite() {
        return Some("eye and target are the same point: the view has no direction".into());
    }
    // The view's up is the world's y: a view along it has no roll defined.
    if Vec3::new(dir.x, 0.0, dir.z).length() <= dir.length() * 1e-4 {
        return Some(
            "the view looks straight up or down (the camera's up is the world's y): tilt the \
             target a little"
                .into(),
        );
    }
    None
}

/// A recorded path, read and checked whole.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedPath {
    file: PathBuf,
    poses: Vec<CameraPose>,
}

impl RecordedPath {
    /// Reads and checks `file`.
    pub fn load(file: &Path) -> Result<Self, PathError> {
        let text = std::fs::read_to_string(file).map_err(|source| PathError::Read {
            path: file.to_owned(),
            source,
        })?;
        Self::parse(file, &text)
    }

    /// Parses `text`, the contents of `file` (named in errors). Blank lines
    /// are skipped (a file may end in one), as is a byte-order mark before
    /// the first line (some editors and shells on Windows write one).
    pub fn parse(file: &Path, text: &str) -> Result<Self, PathError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut poses = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            if raw.trim().is_empty() {
                continue;
            }
            let bad = |reason: String| PathError::Line {
                path: file.to_owned(),
                line: i + 1,
                reason,
            };
            let line: Line = serde_json::from_str(raw).map_err(|e| {
                // serde_json counts lines within the one line it was given.
                let text = e.to_string();
                let what = text.rsplit_once(" at line ").map_or(&*text, |(w, _)| w);
                bad(format!("{what} (column {})", e.column()))
            })?;
            if line.frame != poses.len() as u64 {
                return Err(bad(format!(
                    "frame {} where frame {} was expected",
                    line.frame,
                    poses.len()
                )));
            }
            if poses.len() >= u32::MAX as usize {
                return Err(bad("more frames than a run can render".into()));
            }
            let pose = CameraPose {
                eye: Vec3::from_array(line.eye),
                target: Vec3::from_array(line.target),
                fov_y_deg: line.fov_y_deg,
            };
            if let Some(reason) = invalid(&pose) {
                return Err(bad(reason));
            }
            poses.push(pose);
        }
        if poses.is_empty() {
            return Err(PathError::Empty {
                path: file.to_owned(),
            });
        }
        Ok(Self {
            file: file.to_owned(),
            poses,
        })
    }

    /// Frames in the path.
    pub fn frames(&self) -> u32 {
        self.poses.len() as u32
    }

    /// The frames a run replays: `asked` (`--frames`), which the path must
    /// hold, or the whole path.
    pub fn frames_for(&self, asked: Option<u32>) -> Result<u32, PathError> {
        match asked {
            Some(wanted) if wanted > self.frames() => Err(PathError::TooShort {
                path: self.file.clone(),
                frames: self.frames(),
                wanted,
            }),
            Some(wanted) => Ok(wanted),
            None => Ok(self.frames()),
        }
    }

    /// The pose of frame `frame` (the last one past the end: runs check their
    /// length with [`Self::frames_for`] first).
    pub fn pose(&self, frame: u32) -> CameraPose {
        let last = self.poses.len() - 1;
        self.poses[(frame as usize).min(last)]
    }
}

/// One line of the format for `pose` at `frame`.
pub fn line(frame: u32, pose: &CameraPose) -> String {
    let v = |v: Vec3| format!("[{:?}, {:?}, {:?}]", v.x, v.y, v.z);
    format!(
        "{{\"frame\": {frame}, \"eye\": {}, \"target\": {}, \"fov_y_deg\": {:?}}}",
        v(pose.eye),
        v(pose.target),
        pose.fov_y_deg
    )
}

/// Writes the camera's pose per frame (`--record-path`).
pub struct PathRecorder {
    file: PathBuf,
    out: std::io::BufWriter<std::fs::File>,
    next: u32,
}

impl PathRecorder {
    /// Creates `file` (and its directory), truncating one that exists.
    pub fn create(file: &Path) -> Result<Self, PathError> {
        let err = |e: std::io::Error| PathError::Write {
            path: file.to_owned(),
            reason: e.to_string(),
        };
        if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let out = std::fs::File::create(file).map_err(err)?;
        Ok(Self {
            file: file.to_owned(),
            out: std::io::BufWriter::new(out),
            next: 0,
        })
    }

    /// Appends the pose of the next frame.
    pub fn record(&mut self, pose: &CameraPose) -> Result<(), PathError> {
        let err = |reason: String| PathError::Write {
            path: self.file.clone(),
            reason,
        };
        if let Some(reason) = invalid(pose) {
            return Err(err(format!("the pose of frame {}: {reason}", self.next)));
        }
        writeln!(self.out, "{}", line(self.next, pose)).map_err(|e| err(e.to_string()))?;
        self.next += 1;
        Ok(())
    }

    /// Flushes the file; returns the frames written.
    pub fn finish(mut self) -> Result<u32, PathError> {
        self.out.flush().map_err(|e| PathError::Write {
            path: self.file.clone(),
            reason: e.to_string(),
        })?;
        Ok(self.next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RecordedPath, PathError> {
        RecordedPath::parse(Path::new("p.jsonl"), text)
    }

    fn line_error(text: &str) -> (usize, String) {
        match parse(text) {
            Err(PathError::Line { line, reason, .. }) => (line, reason),
            other => panic!("expected a line error, got {other:?}"),
        }
    }

    const GOOD: &str = "{\"frame\": 0, \"eye\": [0.0, 2.5, 8.0], \"target\": [0.0, 0.2, 0.0], \"fov_y_deg\": 50.0}";

    #[test]
    fn reads_the_documented_line() {
        let p = parse(&format!("{GOOD}\n\n")).unwrap();
        assert_eq!(p.frames(), 1);
        assert_eq!(
            p.pose(0),
            CameraPose {
                eye: Vec3::new(0.0, 2.5, 8.0),
                target: Vec3::new(0.0, 0.2, 0.0),
                fov_y_deg: 50.0
            }
        );
        // Written back, the line is the documented one.
        assert_eq!(line(0, &p.pose(0)), GOOD);
        // Other tools' spellings of the same numbers read the same.
        let q = parse(
            "{\"fov_y_deg\": 5e1, \"target\": [0, 0.2, 0], \"eye\": [0, 2.5, 8], \"frame\": 0}",
        )
        .unwrap();
        assert_eq!(q.pose(0), p.pose(0));
        // Windows line ends and a byte-order mark, as some editors write.
        let crlf = format!(
            "\u{feff}{GOOD}\r\n{}\r\n",
            GOOD.replace("\"frame\": 0", "\"frame\": 1")
        );
        let r = parse(&crlf).unwrap();
        assert_eq!((r.frames(), r.pose(1)), (2, p.pose(0)));
    }

    #[test]
    fn bad_lines_are_named() {
        let two = format!("{GOOD}\n{}", GOOD.replace("\"frame\": 0", "\"frame\": 2"));
        let (line, reason) = line_error(&two);
        assert_eq!(line, 2);
        assert!(reason.contains("frame 2 where frame 1"), "{reason}");
        let cases = [
            ("{\"frame\": 0, \"eye\": [0, 1], \"target\": [0, 0, 0], \"fov_y_deg\": 50}", "array"),
            ("{\"frame\": 0, \"eye\": [0, 1, 2], \"target\": [0, 0, 0]}", "fov_y_deg"),
            ("{\"frame\": 0, \"eye\": [0, 1, 2], \"target\": [0, 0, 0], \"fov_y_deg\": 50, \"roll\": 0}", "roll"),
            ("{\"frame\": 0, \"eye\": [0, 1, 2], \"target\": [0, 1, 2], \"fov_y_deg\": 50}", "same point"),
            ("{\"frame\": 0, \"eye\": [0, 1, 2], \"target\": [0, 0, 2], \"fov_y_deg\": 50}", "straight up or down"),
            ("{\"frame\": 0, \"eye\": [0, 1, 2], \"target\": [0, 0, 0], \"fov_y_deg\": 180}", "outside 0..180"),
            ("{\"frame\": 0, \"eye\": [1e39, 1, 2], \"target\": [0, 0, 0], \"fov_y_deg\": 50}", "out of range"),
            ("{\"frame\": -1, \"eye\": [0, 1, 2], \"target\": [0, 0, 0], \"fov_y_deg\": 50}", "integer `-1`, expected u64 (column 12)"),
            ("frame 0: eye 0 1 2", "expected"),
        ];
        for (text, needle) in cases {
            let (line, reason) = line_error(&format!("\n{text}"));
            assert_eq!(line, 2, "{text}");
            assert!(reason.contains(needle), "{text}: {reason}");
        }
        let err = parse("{\"frame\": 0}").unwrap_err().to_string();
        assert!(
            err.contains("p.jsonl, line 1") && err.contains("README"),
            "{err}"
        );
        assert!(matches!(parse(" \n"), Err(PathError::Empty { .. })));
    }

    #[test]
    fn a_short_path_says_so() {
        let p = parse(GOOD).unwrap();
        assert_eq!(p.frames_for(None).unwrap(), 1);
        assert_eq!(p.frames_for(Some(1)).unwrap(), 1);
        let err = p.frames_for(Some(24)).unwrap_err();
        assert!(matches!(
            err,
            PathError::TooShort {
                frames: 1,
                wanted: 24,
                ..
            }
        ));
        let text = err.to_string();
        assert!(text.contains("--frames 1 or fewer"), "{text}");
    }

    #[test]
    fn record_and_replay_round_trip_exactly() {
        let dir = std::env::temp_dir().join(format!("vkalloc-path-{}", std::process::id()));
        let file = dir.join("sub").join("rec.jsonl");
        let mut rec = PathRecorder::create(&file).unwrap();
        // Awkward floats: thirds, tiny and large magnitudes, negative zero.
        let mut poses = Vec::new();
        let mut x = 0.1f32;
        for i in 0..200 {
            x = (x * 3.7 + 0.333).fract() * if i % 2 == 0 { 1e-3 } else { 1e4 };
            let pose = CameraPose {
                eye: Vec3::new(x, 1.0 / 3.0 + x, -0.0),
                target: Vec3::new(x + 2.0 / 3.0, -x, 7.0e-7 * x + 1.0),
                fov_y_deg: 10.0 + (i as f32) * 0.71,
            };
            rec.record(&pose).unwrap();
            poses.push(pose);
        }
        assert_eq!(rec.finish().unwrap(), 200);
        let p = RecordedPath::load(&file).unwrap();
        for (i, pose) in poses.iter().enumerate() {
            let back = p.pose(i as u32);
            assert_eq!(back, *pose, "frame {i}");
            assert_eq!(
                back.eye.to_array().map(f32::to_bits),
                pose.eye.to_array().map(f32::to_bits)
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
