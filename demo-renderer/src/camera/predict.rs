//! What a camera without a future lets the streamer prefetch: its coming
//! poses extrapolated from its recent motion, the way a game would (the last
//! frame's step in position and turn of the view direction, continued at the
//! same rate). A jump is not a motion: after a step or turn too large for a
//! frame of flying (a cut, a teleport, a flick), nothing is predicted until
//! the camera has moved smoothly for two frames again (the frame after a jump
//! belongs to the present view, whose levels the feedback is still finding).
#![forbid(unsafe_code)]

use glam::{Quat, Vec3};

use super::CameraPose;

/// Frames ahead a prediction reaches, at most (`--lookahead` bounds it too).
pub const PREDICTION_FRAMES: u32 = 4;
/// A step of the eye longer than this (gallery units) in one frame is a jump.
pub const JUMP_STEP: f32 = 1.5;
/// A turn of the view direction wider than this (degrees) in one frame is a
/// jump.
pub const JUMP_TURN_DEG: f32 = 25.0;

/// The last three poses shown.
#[derive(Clone, Copy, Debug, Default)]
pub struct MotionPredictor {
    last: Option<CameraPose>,
    before: Option<CameraPose>,
    earlier: Option<CameraPose>,
}

fn direction(p: &CameraPose) -> Vec3 {
    (p.target - p.eye).normalize_or(Vec3::NEG_Z)
}

/// Whether going from `a` to `b` in one frame is a jump, not a motion.
fn is_jump(a: &CameraPose, b: &CameraPose) -> bool {
    let turn = direction(a).angle_between(direction(b));
    (b.eye - a.eye).length() > JUMP_STEP || turn > JUMP_TURN_DEG.to_radians()
}

impl MotionPredictor {
    /// Records the pose of the frame being prepared.
    pub fn observe(&mut self, pose: CameraPose) {
        self.earlier = self.before;
        self.before = self.last.replace(pose);
    }

    /// The poses of the next `frames` frames (at most [`PREDICTION_FRAMES`]),
    /// continuing the last observed step; none before three poses are known,
    /// while the camera stands still, or when either of the last two steps
    /// was a jump.
    pub fn predict(&self, frames: u32) -> Vec<CameraPose> {
        let (Some(last), Some(before), Some(earlier)) = (self.last, self.before, self.earlier)
        else {
            return Vec::new();
        };
        if is_jump(&earlier, &before) {
            return Vec::new();
        }
        let step = last.eye - before.eye;
        let (d0, d1) = (direction(&before), direction(&last));
        let (axis, angle) = Quat::from_rotation_arc(d0, d1).to_axis_angle();
        let still = step.length() < 1e-4 && angle < 1e-4;
        if still || is_jump(&before, &last) {
            return Vec::new();
        }
        let focus = (last.target - last.eye).length().max(0.1);
        let mut out = Vec::new();
        for k in 1..=frames.min(PREDICTION_FRAMES) {
            let dir = if angle < 1e-6 {
                d1
            } else {
                Quat::from_axis_angle(axis, angle * k as f32) * d1
            };
            // Past straight up or down the view is undefined: stop there.
            if dir.y.abs() > 0.999 {
                break;
            }
            let eye = last.eye + step * k as f32;
            out.push(CameraPose {
                eye,
                target: eye + dir * focus,
                fov_y_deg: last.fov_y_deg,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pose(eye: Vec3, dir: Vec3) -> CameraPose {
        CameraPose {
            eye,
            target: eye + dir * 2.0,
            fov_y_deg: 50.0,
        }
    }

    #[test]
    fn continues_a_step_and_a_turn() {
        let mut m = MotionPredictor::default();
        assert!(m.predict(8).is_empty());
        let turn = 2f32.to_radians();
        let d0 = Vec3::new((-turn).sin(), 0.0, -(-turn).cos());
        m.observe(pose(Vec3::new(-0.1, 0.0, 0.0), d0));
        m.observe(pose(Vec3::ZERO, Vec3::NEG_Z));
        assert!(
            m.predict(8).is_empty(),
            "two poses: one step, not yet a motion"
        );
        let d1 = Vec3::new(turn.sin(), 0.0, -turn.cos());
        m.observe(pose(Vec3::new(0.1, 0.0, 0.0), d1));
        let p = m.predict(16);
        assert_eq!(p.len() as u32, PREDICTION_FRAMES);
        for (k, q) in p.iter().enumerate() {
            let k = (k + 2) as f32;
            assert!((q.eye - Vec3::new(0.1 * k, 0.0, 0.0)).length() < 1e-5);
            let a = (turn * k).min(std::f32::consts::PI);
            let want = Vec3::new(a.sin(), 0.0, -a.cos());
            assert!((direction(q) - want).length() < 1e-4, "{k}: {q:?}");
        }
        assert_eq!(m.predict(3).len(), 3);
    }

    #[test]
    fn a_jump_or_standing_still_predicts_nothing() {
        let mut m = MotionPredictor::default();
        m.observe(pose(Vec3::ZERO, Vec3::NEG_Z));
        m.observe(pose(Vec3::new(5.0, 0.0, 0.0), Vec3::NEG_Z));
        assert!(m.predict(8).is_empty());
        m.observe(pose(Vec3::new(5.0, 0.0, 0.0), Vec3::X));
        assert!(m.predict(8).is_empty(), "a 90 degree flick");
        m.observe(pose(Vec3::new(5.0, 0.0, 0.0), Vec3::X));
        assert!(m.predict(8).is_empty(), "still");
        m.observe(pose(Vec3::new(5.0, 0.2, 0.0), Vec3::X));
        assert_eq!(m.predict(8).len() as u32, PREDICTION_FRAMES);
        // The first smooth step after a jump predicts nothing yet.
        m.observe(pose(Vec3::new(9.0, 0.2, 0.0), Vec3::X));
        m.observe(pose(Vec3::new(9.1, 0.2, 0.0), Vec3::X));
        assert!(m.predict(8).is_empty());
        m.observe(pose(Vec3::new(9.2, 0.2, 0.0), Vec3::X));
        assert_eq!(m.predict(8).len() as u32, PREDICTION_FRAMES);
    }
}
