//! The window's fly camera: mouse look while the right button is held, WASD
//! to move along the view, up and down along the world's y, Shift for a
//! faster pace, the scroll wheel for the speed itself; `P` switches between
//! it and the scripted path. [`FlyCamera`] is the pose and its motion (pure);
//! [`FlyControls`] turns the window's events into it.
#![forbid(unsafe_code)]

use glam::Vec3;
use winit::event::{ElementState, MouseButton, MouseScrollDelta, WindowEvent};
use winit::keyboard::{KeyCode, PhysicalKey};

use super::CameraPose;

/// The key bindings, as the overlay and `--help` show them.
pub const KEYS_HELP: &str = "camera: P switches fly camera / scripted path; fly: hold the right \
mouse button to look, W A S D move, E or Space up, Q or C down, Shift 4x faster, \
wheel: speed; F1: overlay";

/// Radians of turn per pixel of mouse motion.
pub const LOOK_RADIANS_PER_PIXEL: f32 = 0.0025;
/// The pitch stays this far from straight up or down (degrees), where the
/// view's up vector would be undefined.
pub const PITCH_LIMIT_DEG: f32 = 89.0;
/// Speed at start, world units (metres of the gallery) per second.
pub const DEFAULT_SPEED: f32 = 2.5;
/// Speed factor of one scroll-wheel notch.
pub const SCROLL_STEP: f32 = 1.25;
/// Slowest and fastest speed the wheel reaches.
pub const SPEED_RANGE: (f32, f32) = (0.05, 200.0);
/// Speed factor while Shift is held.
pub const FAST_FACTOR: f32 = 4.0;
/// Longest time step one frame moves by (a stalled frame does not throw the
/// camera across the gallery).
pub const MAX_STEP_SECONDS: f32 = 0.1;

/// Directions held down, each -1, 0 or 1: right, up, forward.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Moves {
    /// Strafe: +1 right (D), -1 left (A).
    pub right: f32,
    /// World up: +1 up (E, Space), -1 down (Q, C).
    pub up: f32,
    /// Along the view: +1 forward (W), -1 back (S).
    pub forward: f32,
    /// Shift held.
    pub fast: bool,
}

/// The fly camera's pose, speed and motion.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlyCamera {
    pose: CameraPose,
    speed: f32,
}

impl FlyCamera {
    /// A camera at `start`, at [`DEFAULT_SPEED`].
    pub fn new(start: CameraPose) -> Self {
        Self {
            pose: start,
            speed: DEFAULT_SPEED,
        }
    }

    /// The pose: `start` exactly until the camera is moved or turned.
    pub fn pose(&self) -> CameraPose {
        self.pose
    }

    /// World units per second.
    pub fn speed(&self) -> f32 {
        self.speed
    }

    /// Jumps to `pose` (keeping the speed).
    pub fn place(&mut self, pose: CameraPose) {
        self.pose = pose;
    }

    /// Turns by a mouse motion of (`dx`, `dy`) pixels: right turns right, down
    /// looks down; the pitch stays within [`PITCH_LIMIT_DEG`].
    pub fn look(&mut self, dx: f32, dy: f32) {
        if dx == 0.0 && dy == 0.0 {
            return;
        }
        let offset = self.pose.target - self.pose.eye;
        let focus = offset.length().max(0.1);
        let dir = offset.normalize_or(Vec3::NEG_Z);
        let yaw = dir.x.atan2(-dir.z) + dx * LOOK_RADIANS_PER_PIXEL;
        let limit = PITCH_LIMIT_DEG.to_radians();
        let pitch =
            (dir.y.clamp(-1.0, 1.0).asin() - dy * LOOK_RADIANS_PER_PIXEL).clamp(-limit, limit);
        let dir = Vec3::new(
            yaw.sin() * pitch.cos(),
            pitch.sin(),
            -yaw.cos() * pitch.cos(),
        );
        self.pose.target = self.pose.eye + dir * focus;
    }

    /// Moves for `seconds` (at most [`MAX_STEP_SECONDS`]) with `moves` held:
    /// forward along the view (vertical part included), sideways level, up and
    /// down along the world's y.
    pub fn step(&mut self, moves: Moves, seconds: f32) {
        let dir = (self.pose.target - self.pose.eye).normalize_or(Vec3::NEG_Z);
        let right = dir.cross(Vec3::Y).normalize_or(Vec3::X);
        let v = dir * moves.forward + right * moves.right + Vec3::Y * moves.up;
        if v == Vec3::ZERO {
            return;
        }
        let speed = self.speed * if moves.fast { FAST_FACTOR } else { 1.0 };
        let delta = v.normalize() * speed * seconds.clamp(0.0, MAX_STEP_SECONDS);
        self.pose.eye += delta;
        self.pose.target += delta;
    }

    /// Scales the speed by [`SCROLL_STEP`] per notch (negative: slower),
    /// within [`SPEED_RANGE`].
    pub fn scroll(&mut self, notches: f32) {
        self.speed = (self.speed * SCROLL_STEP.powf(notches)).clamp(SPEED_RANGE.0, SPEED_RANGE.1);
    }
}

/// What a window event asks of the window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Response {
    /// `P` went down: switch between the fly camera and the script.
    pub toggle: bool,
    /// Some(true): hide and hold the cursor (looking); Some(false): give it back.
    pub grab: Option<bool>,
}

/// The fly camera driven by a window's events.
#[derive(Clone, Debug)]
pub struct FlyControls {
    camera: FlyCamera,
    /// Whether the fly camera drives the frames (else the script does).
    pub flying: bool,
    keys: [bool; KEYS.len()],
    looking: bool,
    look: (f32, f32),
    cursor: (f32, f32),
}

/// The movement keys, in [`FlyControls::keys`]' order.
const KEYS: [KeyCode; 11] = [
    KeyCode::KeyW,
    KeyCode::KeyS,
    KeyCode::KeyA,
    KeyCode::KeyD,
    KeyCode::KeyE,
    KeyCode::Space,
    KeyCode::KeyQ,
    KeyCode::KeyC,
    KeyCode::ShiftLeft,
    KeyCode::ShiftRight,
    KeyCode::KeyP,
];

impl FlyControls {
    /// Flying from `start`.
    pub fn new(start: CameraPose) -> Self {
        Self {
            camera: FlyCamera::new(start),
            flying: true,
            keys: [false; KEYS.len()],
            looking: false,
            look: (0.0, 0.0),
            cursor: (0.0, 0.0),
        }
    }

    /// The camera.
    pub fn camera(&self) -> &FlyCamera {
        &self.camera
    }

    /// The cursor's last position in the window, physical pixels.
    pub fn cursor(&self) -> (f32, f32) {
        self.cursor
    }

    /// Switches between flying and the script; flying resumes from `shown`,
    /// the pose the window shows now.
    pub fn toggle(&mut self, shown: CameraPose) {
        self.flying = !self.flying;
        if self.flying {
            self.camera.place(shown);
        }
        self.look = (0.0, 0.0);
    }

    /// Takes a window event. `pointer_taken`: the cursor is over the overlay,
    /// whose widgets get the mouse; `keyboard_taken`: one of its text fields
    /// has the keyboard.
    pub fn on_window_event(
        &mut self,
        event: &WindowEvent,
        pointer_taken: bool,
        keyboard_taken: bool,
    ) -> Response {
        let mut r = Response::default();
        match event {
            WindowEvent::KeyboardInput { event, .. } if !keyboard_taken => {
                if let PhysicalKey::Code(code) = event.physical_key {
                    let down = event.state == ElementState::Pressed;
                    return self.on_key(code, down, event.repeat);
                }
            }
            WindowEvent::MouseInput {
                state,
                button: MouseButton::Right,
                ..
            } => {
                let down = *state == ElementState::Pressed;
                if down && (pointer_taken || !self.flying) {
                    return r;
                }
                if down != self.looking {
                    self.looking = down;
                    r.grab = Some(down);
                }
            }
            WindowEvent::MouseWheel { delta, .. } if !pointer_taken && self.flying => {
                let notches = match delta {
                    MouseScrollDelta::LineDelta(_, y) => *y,
                    MouseScrollDelta::PixelDelta(p) => p.y as f32 / 40.0,
                };
                self.camera.scroll(notches);
            }
            WindowEvent::CursorMoved { position, .. } => {
                self.cursor = (position.x as f32, position.y as f32);
            }
            WindowEvent::Focused(false) => {
                self.keys = [false; KEYS.len()];
                if self.looking {
                    self.looking = false;
                    r.grab = Some(false);
                }
            }
            _ => {}
        }
        r
    }

    /// A key (by its place on the keyboard, so that WASD is where it is on
    /// any layout) went down or up.
    pub fn on_key(&mut self, code: KeyCode, down: bool, repeat: bool) -> Response {
        if let Some(i) = KEYS.iter().position(|&k| k == code) {
            self.keys[i] = down;
        }
        Response {
            toggle: code == KeyCode::KeyP && down && !repeat,
            grab: None,
        }
    }

    /// Raw mouse motion (pixels): turns the camera while looking.
    pub fn on_mouse_motion(&mut self, dx: f64, dy: f64) {
        if self.looking && self.flying {
            self.look.0 += dx as f32;
            self.look.1 += dy as f32;
        }
    }

    /// The keys held, as motion.
    pub fn moves(&self) -> Moves {
        let held = |k: KeyCode| {
            KEYS.iter()
                .position(|&c| c == k)
                .is_some_and(|i| self.keys[i])
        };
        let axis = |plus: bool, minus: bool| plus as i8 as f32 - minus as i8 as f32;
        Moves {
            forward: axis(held(KeyCode::KeyW), held(KeyCode::KeyS)),
            right: axis(held(KeyCode::KeyD), held(KeyCode::KeyA)),
            up: axis(
                held(KeyCode::KeyE) || held(KeyCode::Space),
                held(KeyCode::KeyQ) || held(KeyCode::KeyC),
            ),
            fast: held(KeyCode::ShiftLeft) || held(KeyCode::ShiftRight),
        }
    }

    /// Before a frame, `seconds` after the last: applies the look and the
    /// keys held; the pose to show, or `None` while the script drives.
    pub fn advance(&mut self, seconds: f32) -> Option<CameraPose> {
        if !self.flying {
            return None;
        }
        let (dx, dy) = std::mem::take(&mut self.look);
        self.camera.look(dx, dy);
        self.camera.step(self.moves(), seconds);
        Some(self.camera.pose())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> CameraPose {
        CameraPose {
            eye: Vec3::new(0.0, 2.0, 5.0),
            target: Vec3::new(0.0, 2.0, 0.0),
            fov_y_deg: 50.0,
        }
    }

    fn dir(p: CameraPose) -> Vec3 {
        (p.target - p.eye).normalize()
    }

    #[test]
    fn starts_exactly_where_it_is_put_and_stays_without_input() {
        let mut c = FlyControls::new(start());
        for _ in 0..10 {
            assert_eq!(c.advance(1.0 / 60.0), Some(start()));
        }
    }

    #[test]
    fn moves_along_the_view_and_strafes_level() {
        let mut cam = FlyCamera::new(start());
        let m = Moves {
            forward: 1.0,
            ..Moves::default()
        };
        cam.step(m, 0.1);
        let d = DEFAULT_SPEED * 0.1;
        assert!((cam.pose().eye - Vec3::new(0.0, 2.0, 5.0 - d)).length() < 1e-5);
        // The view keeps its direction.
        assert!((dir(cam.pose()) - Vec3::NEG_Z).length() < 1e-5);
        let mut cam = FlyCamera::new(start());
        cam.step(
            Moves {
                right: 1.0,
                fast: true,
                ..Moves::default()
            },
            0.1,
        );
        assert!((cam.pose().eye - Vec3::new(d * FAST_FACTOR, 2.0, 5.0)).length() < 1e-5);
        // A long stall moves no further than MAX_STEP_SECONDS.
        let mut cam = FlyCamera::new(start());
        cam.step(
            Moves {
                up: 1.0,
                ..Moves::default()
            },
            5.0,
        );
        assert!((cam.pose().eye.y - (2.0 + DEFAULT_SPEED * MAX_STEP_SECONDS)).abs() < 1e-5);
    }

    #[test]
    fn looks_right_and_down_and_never_straight_down() {
        let mut cam = FlyCamera::new(start());
        let quarter = std::f32::consts::FRAC_PI_2 / LOOK_RADIANS_PER_PIXEL;
        cam.look(quarter, 0.0);
        assert!(
            (dir(cam.pose()) - Vec3::X).length() < 1e-4,
            "{:?}",
            cam.pose()
        );
        // The focus distance is kept.
        assert!(((cam.pose().target - cam.pose().eye).length() - 5.0).abs() < 1e-4);
        cam.look(0.0, 100.0);
        assert!(dir(cam.pose()).y < 0.0);
        cam.look(0.0, 1e6);
        let pitch = dir(cam.pose()).y.asin().to_degrees();
        assert!((pitch + PITCH_LIMIT_DEG).abs() < 1e-2, "{pitch}");
    }

    #[test]
    fn scroll_changes_speed_within_range() {
        let mut cam = FlyCamera::new(start());
        cam.scroll(1.0);
        assert!((cam.speed() - DEFAULT_SPEED * SCROLL_STEP).abs() < 1e-5);
        cam.scroll(-1000.0);
        assert_eq!(cam.speed(), SPEED_RANGE.0);
        cam.scroll(1000.0);
        assert_eq!(cam.speed(), SPEED_RANGE.1);
    }

    #[test]
    fn keys_move_and_p_toggles() {
        let mut c = FlyControls::new(start());
        assert_eq!(c.on_key(KeyCode::KeyW, true, false), Response::default());
        c.on_key(KeyCode::ShiftLeft, true, false);
        let p = c.advance(0.05).unwrap();
        let d = DEFAULT_SPEED * FAST_FACTOR * 0.05;
        assert!((p.eye - Vec3::new(0.0, 2.0, 5.0 - d)).length() < 1e-5);
        c.on_key(KeyCode::KeyW, false, false);
        c.on_key(KeyCode::ShiftLeft, false, false);
        assert_eq!(c.advance(0.05), Some(p));
        // Mouse motion turns only while looking.
        c.on_mouse_motion(100.0, 0.0);
        assert_eq!(c.advance(0.05), Some(p));
        assert!(c.on_key(KeyCode::KeyP, true, false).toggle);
        assert!(!c.on_key(KeyCode::KeyP, true, true).toggle);
    }

    #[test]
    fn toggling_hands_over_the_pose() {
        let mut c = FlyControls::new(start());
        c.toggle(start());
        assert!(!c.flying);
        assert_eq!(c.advance(0.1), None);
        let elsewhere = CameraPose {
            eye: Vec3::new(3.0, 1.0, 1.0),
            ..start()
        };
        c.toggle(elsewhere);
        assert_eq!(c.advance(0.1), Some(elsewhere));
    }
}
