//! The scene: a gallery of the materials on generated meshes over a floor, the
//! lights, and the camera path that passes close to every material.

pub mod camera;
pub mod mesh;

use glam::{Mat4, Vec3, Vec4};

use camera::{CameraPath, Cut, Pose};
use mesh::MeshData;

/// The meshes the gallery uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A UV sphere of radius 1.
    Sphere,
    /// A rounded box of half-extent 0.85.
    RoundedBox,
    /// The floor.
    Floor,
}

/// The sphere's radius, in object space.
pub const SPHERE_RADIUS: f32 = 1.0;
/// The rounded box's half-extent, in object space.
pub const BOX_HALF: f32 = 0.85;
/// The rounded box's edge radius.
pub const BOX_ROUNDING: f32 = 0.18;
/// Signed distance from `p` (object space) to the rounded box of
/// [`mesh::rounded_box`]`(BOX_HALF, BOX_ROUNDING, _)`'s smooth shape: the box
/// of [`BOX_HALF`] inset by [`BOX_ROUNDING`], grown by it (negative inside).
pub fn rounded_box_distance(p: Vec3) -> f32 {
    let q = p.abs() - Vec3::splat(BOX_HALF - BOX_ROUNDING);
    q.max(Vec3::ZERO).length() + q.max_element().min(0.0) - BOX_ROUNDING
}

/// The floor's side (a square at y = 0 centred on the origin) and how many times
/// the texture repeats across it.
pub const FLOOR_SIZE: f32 = 200.0;
/// Texture repeats across the floor.
pub const FLOOR_REPEATS: f32 = 50.0;

impl Shape {
    /// Every shape, in mesh-buffer order.
    pub const ALL: [Shape; 3] = [Shape::Sphere, Shape::RoundedBox, Shape::Floor];

    /// Generates the mesh.
    pub fn mesh(self) -> MeshData {
        match self {
            Shape::Sphere => mesh::sphere(SPHERE_RADIUS, 64, 32),
            Shape::RoundedBox => mesh::rounded_box(BOX_HALF, BOX_ROUNDING, 8),
            Shape::Floor => mesh::plane(FLOOR_SIZE, FLOOR_REPEATS),
        }
    }
}

/// One object: a shape, where it stands, and its material.
#[derive(Clone, Copy, Debug)]
pub struct Object {
    /// The mesh.
    pub shape: Shape,
    /// Model matrix (rotation, uniform scale, translation).
    pub model: Mat4,
    /// Index of the material.
    pub material: usize,
    /// Texture repeats (x, y) and normal strength (z).
    pub uv_scale: Vec4,
}

impl Object {
    /// The model's uniform scale (the length of its first column; at least
    /// 1e-6, so that it divides): a shape scaled by `s` reaches `s` times as
    /// far and spreads its texture over `s` times the distance.
    pub fn scale(&self) -> f32 {
        self.model.x_axis.truncate().length().max(1e-6)
    }
}

/// A light as the shader reads it.
#[derive(Clone, Copy, Debug)]
pub struct Light {
    /// xyz: position (w = 1) or direction towards the light (w = 0).
    pub position: Vec4,
    /// Radiance (rgb).
    pub color: Vec3,
}

/// The whole scene.
#[derive(Clone, Debug)]
pub struct Gallery {
    /// Objects, the floor last (drawn after what it is hidden by).
    pub objects: Vec<Object>,
    /// Lights.
    pub lights: Vec<Light>,
    /// Sky colour (hemisphere light from above).
    pub sky: Vec3,
    /// Ground colour (from below).
    pub ground: Vec3,
    /// The camera path.
    pub path: CameraPath,
}

/// Columns of the gallery grid.
const COLS: usize = 4;
/// Distance between neighbouring objects.
const SPACING: f32 = 3.2;

impl Gallery {
    /// Lays out `materials` objects (one per material) in rows of four; the floor
    /// uses `floor_material`.
    pub fn new(materials: usize, floor_material: usize) -> Self {
        let rows = materials.div_ceil(COLS);
        let centre = |i: usize| {
            let (r, c) = (i / COLS, i % COLS);
            Vec3::new(
                (c as f32 - (COLS as f32 - 1.0) * 0.5) * SPACING,
                1.0,
                (r as f32 - (rows as f32 - 1.0) * 0.5) * SPACING,
            )
        };
        let mut objects = Vec::new();
        let mut keys = Vec::new();
        let overview = Pose {
            eye: Vec3::new(
                0.0,
                3.5 + rows as f32 * 1.2,
                3.0 + rows as f32 * SPACING * 0.8,
            ),
            target: Vec3::new(0.0, 0.2, 0.0),
        };
        keys.push(overview);
        for i in 0..materials {
            let p = centre(i);
            let sphere = (i / COLS + i % COLS).is_multiple_of(2);
            let angle = i as f32 * 0.7;
            objects.push(Object {
                shape: if sphere {
                    Shape::Sphere
                } else {
                    Shape::RoundedBox
                },
                model: Mat4::from_translation(p) * Mat4::from_rotation_y(angle),
                material: i,
                uv_scale: Vec4::new(1.0, 1.0, 1.0, 0.0),
            });
        }
        // Visit the objects row by row, serpentine, from the front (+z) side.
        for r in (0..rows).rev() {
            let cols: Vec<usize> = if (rows - 1 - r).is_multiple_of(2) {
                (0..COLS).collect()
            } else {
                (0..COLS).rev().collect()
            };
            for c in cols {
                let i = r * COLS + c;
                if i >= materials {
                    continue;
                }
                let p = centre(i);
                keys.push(Pose {
                    eye: p + Vec3::new(1.0, 1.9, 1.6),
                    target: p + Vec3::new(0.0, -0.2, 0.0),
                });
            }
        }
        keys.push(overview);
        // The floor last, so that depth testing skips what the objects hide.
        objects.push(Object {
            shape: Shape::Floor,
            model: Mat4::IDENTITY,
            material: floor_material,
            uv_scale: Vec4::new(1.0, 1.0, 1.0, 0.0),
        });
        // Two camera cuts: a jump to a close-up of a material the path is far from
        // at that moment (one visited last, then one visited first), and back.
        let close_up = |i: usize| {
            let p = centre(i);
            Pose {
                eye: p + Vec3::new(0.7, 0.55, 1.3),
                target: p + Vec3::new(0.0, -0.1, 0.0),
            }
        };
        let cuts = vec![
            Cut {
                from: 0.35,
                to: 0.45,
                pose: close_up(0),
            },
            Cut {
                from: 0.7,
                to: 0.78,
                pose: close_up(materials.saturating_sub(1)),
            },
        ];
        let lights = vec![
            Light {
                position: Vec4::new(0.4, 0.8, 0.45, 0.0),
                color: Vec3::new(2.6, 2.45, 2.2),
            },
            Light {
                position: Vec4::new(-6.0, 4.0, 6.0, 1.0),
                color: Vec3::new(30.0, 22.0, 14.0),
            },
            Light {
                position: Vec4::new(6.0, 3.5, -4.0, 1.0),
                color: Vec3::new(10.0, 16.0, 30.0),
            },
            Light {
                position: Vec4::new(0.0, 5.0, 0.0, 1.0),
                color: Vec3::new(20.0, 20.0, 20.0),
            },
        ];
        Self {
            objects,
            lights,
            sky: Vec3::new(0.35, 0.42, 0.55),
            ground: Vec3::new(0.12, 0.1, 0.08),
            path: CameraPath::new(keys).with_cuts(cuts),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_comes_close_to_every_material() {
        let g = Gallery::new(16, 8);
        let frames = 240;
        for o in g.objects.iter().filter(|o| o.shape != Shape::Floor) {
            let centre = o.model.w_axis.truncate();
            let closest = (0..frames)
                .map(|f| (g.path.pose(f, frames).eye - centre).length())
                .fold(f32::MAX, f32::min);
            assert!(
                closest < 3.0,
                "material {} never closer than {closest}",
                o.material
            );
        }
        // ...and never goes through one.
        for f in 0..frames {
            let eye = g.path.pose(f, frames).eye;
            assert!(eye.y > 0.3, "frame {f} under the floor");
            for o in g.objects.iter().filter(|o| o.shape != Shape::Floor) {
                let d = (eye - o.model.w_axis.truncate()).length();
                assert!(d > 1.45, "frame {f} is {d} from material {}", o.material);
            }
        }
    }
}
