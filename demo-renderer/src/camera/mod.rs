//! The camera that drives the gallery's frames, and where its poses come
//! from: the scripted path ([`crate::scene::camera`]), a recorded path
//! replayed frame by frame ([`path`], `--camera-path`), or a pose set from
//! outside before each frame (the window's fly camera, [`fly`]). Which of
//! them it is decides what the texture streamer may know ahead: only the
//! script has a future ([`Camera::knows_future`]).
#![forbid(unsafe_code)]

pub mod fly;
pub mod path;
pub mod predict;

use std::sync::Arc;

use glam::Vec3;

use crate::scene::camera::{CameraPath, Pose};

/// The scripted path's vertical field of view, in degrees.
pub const SCRIPT_FOV_Y_DEGREES: f32 = 50.0;

/// Where the camera is and how wide it sees, in the gallery's world
/// coordinates (y up, the floor at y = 0): one line of a recorded path.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CameraPose {
    /// Eye position.
    pub eye: Vec3,
    /// Point looked at.
    pub target: Vec3,
    /// Vertical field of view, degrees.
    pub fov_y_deg: f32,
}

impl CameraPose {
    /// A pose of the script's field of view.
    pub fn scripted(pose: Pose) -> Self {
        Self {
            eye: pose.eye,
            target: pose.target,
            fov_y_deg: SCRIPT_FOV_Y_DEGREES,
        }
    }

    /// Eye and target.
    pub fn pose(&self) -> Pose {
        Pose {
            eye: self.eye,
            target: self.target,
        }
    }

    /// The vertical field of view in radians.
    pub fn fov_y(&self) -> f32 {
        self.fov_y_deg.to_radians()
    }
}

/// What one frame shows: the pose, and whether the camera jumps to it from
/// the frame before as an announced cut (only the script announces cuts).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shot {
    /// The pose.
    pub pose: CameraPose,
    /// An announced camera cut.
    pub cut: bool,
}

/// Where the gallery's camera poses come from.
#[derive(Clone, Debug, Default)]
pub enum Camera {
    /// The gallery's scripted path (the default): known ahead, cuts announced.
    #[default]
    Script,
    /// A recorded path, frame `i` showing its line `i` (`--camera-path`).
    Recorded(Arc<path::RecordedPath>),
    /// A pose set before each frame (the window's fly camera).
    Free(CameraPose),
}

impl Camera {
    /// What frame `frame` of `frames` shows; `script` is the gallery's path.
    pub fn shot(&self, script: &CameraPath, frame: u32, frames: u32) -> Shot {
        match self {
            Camera::Script => Shot {
                pose: CameraPose::scripted(script.pose(frame, frames)),
                cut: script.is_cut(frame, frames),
            },
            Camera::Recorded(path) => Shot {
                pose: path.pose(frame),
                cut: false,
            },
            Camera::Free(pose) => Shot {
                pose: *pose,
                cut: false,
            },
        }
    }

    /// Whether the poses of coming frames are known (the script's look-ahead
    /// may read them): the script alone. A recorded path stands for a camera
    /// someone flew, which a game could not read ahead either.
    pub fn knows_future(&self) -> bool {
        matches!(self, Camera::Script)
    }
}

/// A scene whose camera can be driven ([`crate::frame::ScenePass::camera_rig`]).
pub trait CameraRig {
    /// Drives the camera from `camera` from the next prepared frame on.
    fn set_camera(&mut self, camera: Camera);

    /// What frame `frame` of `frames` shows with the present camera.
    fn shot(&self, frame: u32, frames: u32) -> Shot;

    /// The scripted path's pose at frame `frame` of `frames`.
    fn script_pose(&self, frame: u32, frames: u32) -> CameraPose;

    /// What the streamer prefetches beside the present view
    /// (`streaming.lookahead` in the report): "script" (the script's coming
    /// frames), "prediction" (a camera without a future: its motion
    /// extrapolated, [`predict`]) or "off" (`--lookahead 0`, or nothing streams).
    fn lookahead(&self) -> &'static str;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_knows_its_future_and_announces_cuts() {
        let g = crate::scene::Gallery::new(16, 8);
        let cut = (1..240).find(|&f| g.path.is_cut(f, 240)).unwrap();
        let shot = Camera::Script.shot(&g.path, cut, 240);
        assert!(shot.cut);
        assert_eq!(shot.pose.pose(), g.path.pose(cut, 240));
        assert_eq!(shot.pose.fov_y_deg, SCRIPT_FOV_Y_DEGREES);
        assert!(Camera::Script.knows_future());
        let free = Camera::Free(shot.pose);
        assert!(!free.knows_future());
        assert!(!free.shot(&g.path, cut, 240).cut);
        assert_eq!(free.shot(&g.path, 3, 240).pose, shot.pose);
    }
}
