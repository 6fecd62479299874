//! The camera path: an overview of the gallery, then close to every object in
//! turn, then the overview again; Catmull-Rom through the keyframes. Optional
//! *cuts* replace a stretch of the path with a fixed pose (a jump to a close-up
//! and back), so that the streamer's refill time can be measured.

use glam::{Mat4, Vec3};

/// A camera pose.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pose {
    /// Eye position.
    pub eye: Vec3,
    /// Point looked at.
    pub target: Vec3,
}

/// A stretch of the path replaced by a fixed pose: frames whose position on the
/// path (0..1) lies in `from..to` show `pose`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cut {
    /// Where the cut starts, as a fraction of the path.
    pub from: f32,
    /// Where it ends (the path resumes).
    pub to: f32,
    /// The pose shown meanwhile.
    pub pose: Pose,
}

/// Keyframes and interpolation.
#[derive(Clone, Debug)]
pub struct CameraPath {
    keys: Vec<Pose>,
    cuts: Vec<Cut>,
}

fn catmull_rom(p0: Vec3, p1: Vec3, p2: Vec3, p3: Vec3, t: f32) -> Vec3 {
    let t2 = t * t;
    let t3 = t2 * t;
    0.5 * ((2.0 * p1)
        + (p2 - p0) * t
        + (2.0 * p0 - 5.0 * p1 + 4.0 * p2 - p3) * t2
        + (3.0 * p1 - p0 - 3.0 * p2 + p3) * t3)
}

impl CameraPath {
    /// A path through `keys` (at least one).
    pub fn new(keys: Vec<Pose>) -> Self {
        assert!(!keys.is_empty());
        Self {
            keys,
            cuts: Vec::new(),
        }
    }

    /// The path with `cuts` (non-overlapping, inside 0..1).
    pub fn with_cuts(mut self, cuts: Vec<Cut>) -> Self {
        self.cuts = cuts;
        self
    }

    /// The cuts.
    pub fn cuts(&self) -> &[Cut] {
        &self.cuts
    }

    /// Which cut frame `i` of `frames` is in, if any.
    fn cut_at(&self, i: u32, frames: u32) -> Option<usize> {
        if frames <= 1 {
            return None;
        }
        let s = i as f32 / (frames - 1) as f32;
        self.cuts.iter().position(|c| s >= c.from && s < c.to)
    }

    /// Whether frame `i` jumps: it is in a different cut (or out of one) than frame `i - 1`.
    pub fn is_cut(&self, i: u32, frames: u32) -> bool {
        i > 0 && self.cut_at(i, frames) != self.cut_at(i - 1, frames)
    }

    /// The pose at frame `i` of `frames`, cuts included. The path does not move
    /// on during a cut: it resumes where it was, so every key is still visited
    /// (the path runs a little faster elsewhere).
    pub fn pose(&self, i: u32, frames: u32) -> Pose {
        if let Some(c) = self.cut_at(i, frames) {
            return self.cuts[c].pose;
        }
        if frames <= 1 {
            return self.keys[0];
        }
        let s = i as f32 / (frames - 1) as f32;
        let overlap = |a: f32, b: f32, c: &Cut| (b.min(c.to) - a.max(c.from)).max(0.0);
        let cut_before: f32 = self.cuts.iter().map(|c| overlap(0.0, s, c)).sum();
        let cut_total: f32 = self.cuts.iter().map(|c| overlap(0.0, 1.0, c)).sum();
        self.path_at(((s - cut_before) / (1.0 - cut_total).max(1e-3)).clamp(0.0, 1.0))
    }

    /// The keyframes.
    pub fn keys(&self) -> &[Pose] {
        &self.keys
    }

    /// The pose on the path at frame `i` of `frames`, ignoring cuts (frame 0 is the
    /// first key, the last frame the last key).
    pub fn path_pose(&self, i: u32, frames: u32) -> Pose {
        if frames <= 1 {
            return self.keys[0];
        }
        self.path_at(i as f32 / (frames - 1) as f32)
    }

    /// The pose at fraction `f` (0..=1) of the path.
    fn path_at(&self, f: f32) -> Pose {
        let n = self.keys.len();
        if n == 1 {
            return self.keys[0];
        }
        let s = f * (n - 1) as f32;
        let k = (s.floor() as usize).min(n - 2);
        let t = s - k as f32;
        let key = |j: isize| self.keys[j.clamp(0, n as isize - 1) as usize];
        let (a, b, c, d) = (
            key(k as isize - 1),
            key(k as isize),
            key(k as isize + 1),
            key(k as isize + 2),
        );
        Pose {
            eye: catmull_rom(a.eye, b.eye, c.eye, d.eye, t),
            target: catmull_rom(a.target, b.target, c.target, d.target, t),
        }
    }
}

/// The near plane's distance from the eye, along the view direction: a
/// surface nearer than this is clipped (and with it, where the gallery's
/// pipelines cull back faces, the screen shows what lies beyond).
pub const NEAR_PLANE: f32 = 0.05;

/// View-projection with reversed Z (near = 1, far = 0) and Vulkan's clip space (y down).
pub fn view_proj(pose: Pose, aspect: f32, fov_y: f32) -> Mat4 {
    let view = Mat4::look_at_rh(pose.eye, pose.target, Vec3::Y);
    let mut proj = Mat4::perspective_infinite_reverse_rh(fov_y, aspect, NEAR_PLANE);
    proj.y_axis.y *= -1.0;
    proj * view
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_every_key() {
        let keys: Vec<Pose> = (0..5)
            .map(|i| Pose {
                eye: Vec3::new(i as f32, 1.0, 0.0),
                target: Vec3::new(i as f32, 0.0, 1.0),
            })
            .collect();
        let path = CameraPath::new(keys.clone());
        // With frames = 4 * k + 1, every key is a frame.
        for (j, k) in keys.iter().enumerate() {
            let p = path.pose(j as u32 * 3, 13);
            assert!((p.eye - k.eye).length() < 1e-5);
        }
        assert_eq!(path.pose(0, 1), keys[0]);
    }

    #[test]
    fn cuts_jump_and_come_back() {
        let keys: Vec<Pose> = (0..3)
            .map(|i| Pose {
                eye: Vec3::new(i as f32, 1.0, 0.0),
                target: Vec3::ZERO,
            })
            .collect();
        let close = Pose {
            eye: Vec3::new(9.0, 9.0, 9.0),
            target: Vec3::ZERO,
        };
        let path = CameraPath::new(keys).with_cuts(vec![Cut {
            from: 0.5,
            to: 0.75,
            pose: close,
        }]);
        let cuts: Vec<u32> = (0..21).filter(|&i| path.is_cut(i, 21)).collect();
        assert_eq!(cuts, vec![10, 15]);
        assert_eq!(path.pose(12, 21), close);
        // The path pauses during the cut and still ends on its last key.
        assert!((path.pose(15, 21).eye - path.pose(9, 21).eye).length() < 0.2);
        assert_eq!(path.pose(20, 21), path.path_pose(20, 21));
    }
}
