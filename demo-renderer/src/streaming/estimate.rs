//! The CPU estimate of each material's wanted level and screen coverage, from the
//! camera and the gallery's layout: distance to the nearest point of each object
//! times its texel density (map side x UV repeats per world unit), as a mip level
//! (`log2` of texels per pixel at that distance), and the object's projected area.
//!
//! It is used where the GPU feedback cannot answer (see [`super`]): before the
//! first feedback arrives, on the frame after a camera cut (the feedback then
//! describes the old view), when the device cannot write feedback, and for
//! objects too small for the feedback's one-pixel-in-8x8 sampling to be sure to
//! hit.
#![forbid(unsafe_code)]

use crate::scene::camera::{Pose, NEAR_PLANE};
use crate::scene::{rounded_box_distance, Object, Shape, SPHERE_RADIUS};

/// What the camera sees with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct View {
    /// The pose.
    pub pose: Pose,
    /// Vertical field of view, radians.
    pub fov_y: f32,
    /// Width / height.
    pub aspect: f32,
    /// Frame height in pixels.
    pub height: u32,
    /// Whether the camera jumps to this view from the frame before (a camera
    /// cut): the last frame's feedback does not describe it.
    pub cut: bool,
}

impl View {
    /// This view seen through a field of view `guard` times as wide (the
    /// tangent of its half-angle), its height scaled alike so that a texel
    /// keeps its size on screen: what a step or a turn may bring in at the
    /// frame's edges ([`crate::tuning::ViewTuning::guard`]). `None` at 1 or
    /// less.
    pub fn widened(&self, guard: f32) -> Option<View> {
        if guard.is_nan() || guard <= 1.0 {
            return None;
        }
        let tan_half = (self.fov_y * 0.5).tan() * guard;
        Some(View {
            fov_y: 2.0 * tan_half.atan(),
            height: (self.height as f32 * guard).round() as u32,
            cut: false,
            ..*self
        })
    }
}

/// One material's estimate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// The level the sampler would pick at the nearest visible point (may be negative:
    /// magnified).
    pub lod: f32,
    /// Fraction of the frame covered (0..=1).
    pub coverage: f32,
}

/// Levels subtracted from the nearest-point estimate. The GPU feedback reports
/// the finest level over every pixel of an object, silhouettes and grazing
/// angles included (where anisotropic filtering picks finer levels); measured
/// against it along the gallery's path, the isotropic nearest-point estimate
/// comes out 0.3 to 0.9 levels coarser.
pub const CALIBRATION_LEVELS: f32 = 0.75;

/// Bounding radius and UV repeats per world unit of a shape.
pub(crate) fn shape_metrics(shape: Shape) -> (f32, f32) {
    match shape {
        // Radius 1; u wraps twice around 2*pi, v once pole to pole over pi.
        Shape::Sphere => (1.0, 1.0 / std::f32::consts::PI),
        // Half-extent 0.85; each face maps the texture once over 1.7.
        Shape::RoundedBox => (0.85 * 3f32.sqrt(), 1.0 / 1.7),
        // 50 repeats over 200 units.
        Shape::Floor => (f32::INFINITY, 50.0 / 200.0),
    }
}

/// Estimates every material's wanted level and coverage; `map_size[m]` is
/// material `m`'s level-0 side in texels. `None` for materials out of view.
pub fn estimate(objects: &[Object], view: &View, map_size: &[u32]) -> Vec<Option<Estimate>> {
    let mut out: Vec<Option<Estimate>> = vec![None; map_size.len()];
    let eye = view.pose.eye;
    let forward = (view.pose.target - eye).normalize_or_zero();
    let tan_half = (view.fov_y * 0.5).tan();
    // World size of one pixel per unit of distance.
    let pixel_per_distance = 2.0 * tan_half / view.height.max(1) as f32;
    let half_diag = (tan_half * (1.0 + view.aspect * view.aspect).sqrt()).atan();
    for o in objects {
        let Some(size) = map_size.get(o.material).copied() else {
            continue;
        };
        let scale = o.scale();
        let (radius, uv_per_unit) = shape_metrics(o.shape);
        let (radius, uv_per_unit) = (radius * scale, uv_per_unit / scale);
        let density = size as f32 * uv_per_unit * o.uv_scale.x.max(o.uv_scale.y);
        let (distance, coverage) = if o.shape == Shape::Floor {
            // The nearest floor point in view: the lower edge of the frustum.
            let pitch_down = (-forward.y).asin() + view.fov_y * 0.5;
            if pitch_down <= 0.0 || eye.y <= 0.0 {
                continue;
            }
            let d = eye.y / pitch_down.sin().max(1e-3);
            let coverage = (pitch_down / view.fov_y).clamp(0.0, 1.0);
            (d, coverage)
        } else {
            let centre = o.model.w_axis.truncate();
            let to = centre - eye;
            let d = to.length();
            if d <= radius {
                // Within the bounding sphere: inside the shape, the gallery's
                // pipelines cull its back faces and nothing of it is drawn;
                // outside it (a box's corner region), it fills the view.
                if contains(o, eye) {
                    continue;
                }
                (NEAR_PLANE, 1.0)
            } else {
                let angle = forward.dot(to / d).clamp(-1.0, 1.0).acos();
                if angle > half_diag + (radius / d).asin() {
                    continue;
                }
                let r_px = radius / (d * tan_half) * 0.5 * view.height as f32;
                let area = std::f32::consts::PI * r_px * r_px;
                let frame = view.height as f32 * view.height as f32 * view.aspect;
                ((d - radius).max(NEAR_PLANE), (area / frame).min(1.0))
            }
        };
        let texels_per_pixel = density * distance * pixel_per_distance;
        let lod = texels_per_pixel.max(1e-6).log2() - CALIBRATION_LEVELS;
        let e = out[o.material].get_or_insert(Estimate { lod, coverage: 0.0 });
        e.lod = e.lod.min(lod);
        e.coverage = (e.coverage + coverage).min(1.0);
    }
    out
}

/// Whether `point` lies inside the object's shape (in the object's space:
/// the sphere of [`SPHERE_RADIUS`]; the rounded box as its mesh is,
/// [`rounded_box_distance`] below 0, so that an eye by a rounded edge,
/// inside the box of [`crate::scene::BOX_HALF`] but outside the mesh, sees
/// the edge's front faces; the floor has no inside).
fn contains(o: &Object, point: glam::Vec3) -> bool {
    let p = o.model.inverse().transform_point3(point);
    match o.shape {
        Shape::Sphere => p.length_squared() < SPHERE_RADIUS * SPHERE_RADIUS,
        Shape::RoundedBox => rounded_box_distance(p) < 0.0,
        Shape::Floor => false,
    }
}

/// The level index an estimate asks for, clamped to `0..levels`.
pub fn level_of(lod: f32, levels: u32) -> u32 {
    (lod.max(0.0).floor() as u32).min(levels.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scene::Gallery;
    use glam::Vec3;

    #[test]
    fn a_widened_view_keeps_a_texels_size_on_screen() {
        let v = View {
            pose: Pose {
                eye: Vec3::new(0.0, 1.5, 0.0),
                target: Vec3::new(0.0, 1.5, -4.0),
            },
            fov_y: 50f32.to_radians(),
            aspect: 16.0 / 9.0,
            height: 2160,
            cut: true,
        };
        assert!(v.widened(1.0).is_none());
        assert!(v.widened(f32::NAN).is_none());
        let w = v.widened(1.25).unwrap();
        assert!(w.fov_y > v.fov_y && !w.cut);
        assert_eq!(w.height, 2700);
        // Pixels per unit of tangent: the same, so every level wanted in the
        // present frustum is wanted alike in the widened one.
        let density = |v: &View| v.height as f32 / (v.fov_y * 0.5).tan();
        assert!((density(&w) / density(&v) - 1.0).abs() < 1e-3);
        // And something at 30 degrees off the axis, outside a 50-degree
        // frustum's half-height of 25, is inside the widened one.
        assert!(30f32.to_radians() < w.fov_y * 0.5 && 30f32.to_radians() > v.fov_y * 0.5);
    }

    fn pose(eye: Vec3, target: Vec3) -> Pose {
        Pose { eye, target }
    }

    #[test]
    fn closer_wants_finer() {
        let g = Gallery::new(4, 0);
        let sizes = [1024u32; 4];
        let c = g.objects[1].model.w_axis.truncate();
        let view = |d: f32| View {
            pose: pose(c + Vec3::new(0.0, 0.0, d), c),
            fov_y: 50f32.to_radians(),
            aspect: 16.0 / 9.0,
            height: 1080,
            cut: false,
        };
        let near = estimate(&g.objects, &view(2.0), &sizes)[1].expect("visible");
        let far = estimate(&g.objects, &view(8.0), &sizes)[1].expect("visible");
        assert!(near.lod < far.lod);
        assert!(near.coverage > far.coverage);
        // Behind the camera: not visible.
        let away = View {
            pose: pose(c + Vec3::new(0.0, 0.0, 3.0), c + Vec3::new(0.0, 0.0, 6.0)),
            ..view(3.0)
        };
        assert!(estimate(&g.objects, &away, &sizes)[1].is_none());
        // Inside the object (its back faces culled): not drawn. Within its
        // bounding sphere outside a box, by its face: all of the view, finest.
        let inside = View {
            pose: pose(c + Vec3::new(0.0, 0.0, 0.2), c + Vec3::new(0.0, 0.0, -4.0)),
            ..view(3.0)
        };
        assert!(estimate(&g.objects, &inside, &sizes)[1].is_none());
        // (Object 1 is a box turned 0.7 rad: its half-extent 0.85 reaches
        // 1.2 along z, its bounding sphere 1.47.)
        let by = View {
            pose: pose(c + Vec3::new(0.0, 0.0, 1.3), c + Vec3::new(0.0, 0.0, -4.0)),
            ..view(3.0)
        };
        let e = estimate(&g.objects, &by, &sizes)[1].expect("by its face");
        assert_eq!(e.coverage, 1.0);
        // By a rounded edge, inside the box of BOX_HALF but outside the mesh
        // (0.21 from the inset box's edge, the rounding 0.18): its front
        // faces are drawn, all of the view.
        let edge = g.objects[1]
            .model
            .transform_point3(Vec3::new(0.82, 0.82, 0.0));
        let by_edge = View {
            pose: pose(edge, c),
            ..view(3.0)
        };
        let e = estimate(&g.objects, &by_edge, &sizes)[1].expect("by its rounded edge");
        assert_eq!(e.coverage, 1.0);
        assert_eq!(level_of(-2.0, 11), 0);
        assert_eq!(level_of(3.7, 11), 3);
        assert_eq!(level_of(30.0, 11), 10);
    }

    /// A sphere scaled 2x, its surface as far from the eye as an unscaled
    /// one's, spreads its texture over twice the distance (one level
    /// coarser) and covers more of the view.
    #[test]
    fn a_scaled_object_wants_what_its_size_shows() {
        let g = Gallery::new(4, 0);
        let sphere = g
            .objects
            .iter()
            .find(|o| o.shape == Shape::Sphere)
            .copied()
            .expect("a sphere");
        let at = |centre: Vec3, scale: f32| Object {
            model: glam::Mat4::from_scale_rotation_translation(
                Vec3::splat(scale),
                glam::Quat::IDENTITY,
                centre,
            ),
            ..sphere
        };
        let view = View {
            pose: pose(Vec3::ZERO, Vec3::new(0.0, 0.0, -1.0)),
            fov_y: 50f32.to_radians(),
            aspect: 16.0 / 9.0,
            height: 1080,
            cut: false,
        };
        let sizes = vec![1024u32; sphere.material + 1];
        let one = estimate(&[at(Vec3::new(0.0, 0.0, -5.0), 1.0)], &view, &sizes)[sphere.material]
            .expect("visible");
        let two = estimate(&[at(Vec3::new(0.0, 0.0, -6.0), 2.0)], &view, &sizes)[sphere.material]
            .expect("visible");
        assert!((one.lod - two.lod - 1.0).abs() < 1e-4, "{one:?} {two:?}");
        assert!(two.coverage > one.coverage, "{one:?} {two:?}");
    }
}
