//! The look-ahead by tiles: which cells of each material's texture square the
//! camera's coming views will sample, and at which level, estimated on the CPU
//! by casting rays through a coarse grid of each view's pixels against the
//! gallery's analytic shapes (spheres, boxes, the floor), the nearest hit
//! taken, so objects hide what is behind them.
//!
//! The GPU feedback says what the last frame sampled; it cannot say what the
//! frame after a camera cut, or the path a few frames on, will sample. A
//! material-wide level (the [`super::super::estimate`]) does not either: a
//! close-up sees a few hundred of a map's thousand level-0 tiles, and loading
//! the map's tiles blind spends the budget on the wrong ones. These cells are
//! the tile policy's *look-ahead* ([`super::policy::TileInput::ahead_wants`]),
//! ranked against the feedback's cells by the pixels they stand for.
//!
//! Approximations:
//! - the rounded box is its smooth shape, which the mesh (8 steps a face)
//!   cuts with one flat strip a side (up to 0.01 inside it along the edges,
//!   0.036 at the corners): a ray grazing its silhouette may meet it where
//!   the mesh is not (0.6 % of the rays that meet it, from random
//!   directions); its texture coordinates are the mesh's map from the face
//!   to the rounding, inverted (exact at the mesh's vertices, within 0.02
//!   between them);
//! - the level follows the sampler's rule with anisotropy `max_aniso`: the
//!   pixel footprint's longer axis (the shorter one over the cosine of the
//!   angle between the ray and the surface) divided by the anisotropy, at
//!   least the shorter axis. No calibration: measured against the feedback of
//!   the same frames on lavapipe (the 240-frame path, anisotropy off), the
//!   cast's level per cell matches the feedback's in 59% of the cells both
//!   see, is one finer in 18% and one coarser in 14% (with the estimate's
//!   0.75-level calibration subtracted, as the material-wide estimate needs,
//!   it was one or more finer in 70%);
//! - each ray stands for the block of pixels around it and marks every cell
//!   that block's footprint on the surface can reach;
//! - texture coordinates wrap (as `fract` in the shaders), so the sphere's
//!   poles also mark the square's opposite edge.
#![forbid(unsafe_code)]

use glam::{Mat4, Vec2, Vec3};

use crate::scene::camera::NEAR_PLANE;
use crate::scene::mesh::BOX_FACES;
use crate::scene::{
    rounded_box_distance, Object, Shape, BOX_HALF, BOX_ROUNDING, FLOOR_REPEATS, FLOOR_SIZE,
    SPHERE_RADIUS,
};
use crate::streaming::estimate::{shape_metrics, View};

use super::policy::UNSEEN;

/// Rays per view across and down (one per 80 x 80 pixels at 4K, 7 x 7 at
/// 320 x 180), for a view cast by its pixels.
pub const RAYS: (u32, u32) = (48, 27);

/// Rays per view for a view kept warm (levels only; 120 x 120 pixels at 4K).
pub const WARM_RAYS: (u32, u32) = (32, 18);

/// One view the look-ahead casts: its index among the views (0: the
/// present), its weight (0: kept warm) and its rays.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cast {
    /// Index among the views given to [`plan_casts`].
    pub k: usize,
    /// The weight of its pixels ([`AheadCells::cast`]).
    pub weight: f32,
    /// Rays across and down.
    pub rays: (u32, u32),
}

/// Which of `views` (the present first, then the coming frames', nearest
/// first; [`View::cut`] marks a camera cut) the look-ahead casts, and how:
/// - the present (`k = 0`) only with `present`, by its pixels (weight 1);
/// - the next frame's by its pixels times `next`, unless it is a cut's (a
///   cut loads its own view on its frame);
/// - kept warm (weight 0): those 2, 4, 8, 16... frames ahead, the last, and
///   each cut's first;
/// - the present with [`RAYS`], the others with [`WARM_RAYS`] (measured on
///   lavapipe at 320 x 180: the next frame's view with more, smaller rays
///   lost one frame 8 dB, its cells' hits rounding to nothing);
/// - a view equal to the last one cast (its pose, field of view and
///   height) is not cast again (a cut's pose holds still); a zoom, or the
///   present pose through a wider frustum, is cast.
pub fn plan_casts(views: &[View], present: bool, next: f32) -> Vec<Cast> {
    let n = views.len().saturating_sub(1);
    let mut out = Vec::new();
    let mut last: Option<&View> = None;
    for (k, v) in views.iter().enumerate() {
        let jump = k > 0 && v.cut;
        if k == 0 && !present {
            last = Some(v);
            continue;
        }
        let same = last.is_some_and(|l| {
            l.pose.eye == v.pose.eye
                && l.pose.target == v.pose.target
                && l.fov_y == v.fov_y
                && l.height == v.height
        });
        let due = k <= 1 || k.is_power_of_two() || k == n || jump;
        if same || !due {
            continue;
        }
        let weight = match k {
            0 => 1.0,
            1 if !jump => next.max(0.0),
            _ => 0.0,
        };
        out.push(Cast {
            k,
            weight,
            rays: if k == 0 { RAYS } else { WARM_RAYS },
        });
        last = Some(v);
    }
    out
}

/// The nearest distance along a ray from the eye that the renderer draws:
/// the near plane's depth over the ray's cosine with the view direction. A
/// surface nearer is clipped, its back faces culled: the ray sees beyond.
fn near_along(dir: Vec3, forward: Vec3) -> f32 {
    NEAR_PLANE / dir.dot(forward).max(1e-3)
}

/// Per material, per cell (`g * g`, row-major as the shaders' `tile_cell`):
/// the finest level a coming view wants, and the sampled pixels it stands for
/// (the feedback's unit: one pixel in 8 x 8), weighted by how soon.
#[derive(Clone, Debug, PartialEq)]
pub struct AheadCells {
    g: u32,
    /// Finest level per cell, or [`UNSEEN`].
    pub wants: Vec<u8>,
    /// Weighted sampled pixels per cell: the largest over the views cast.
    pub hits: Vec<f32>,
    /// One view's sums, merged into `hits` by the largest.
    scratch: Vec<f32>,
}

/// Where a ray met an object: the distance, the texture coordinate (before
/// the object's `uv_scale`) and the surface normal (object space).
#[derive(Clone, Copy, Debug)]
struct Hit {
    t: f32,
    uv: Vec2,
    n: Vec3,
}

impl AheadCells {
    /// No cell wanted, for `materials` materials of `g * g` cells.
    pub fn new(materials: usize, g: u32) -> Self {
        let g = g.max(1);
        let n = materials * (g * g) as usize;
        Self {
            g,
            wants: vec![UNSEEN; n],
            hits: vec![0.0; n],
            scratch: vec![0.0; n],
        }
    }

    /// Cells per side.
    pub fn cells_per_side(&self) -> u32 {
        self.g
    }

    /// The cells as the policy takes them: the levels, and the hits rounded
    /// to whole sampled pixels. A cell wanted with no hit (cast with weight 0,
    /// or worth less than half a sampled pixel) is one to keep warm: the
    /// policy gives it only pages nothing seen needs.
    pub fn for_policy(&self) -> (Vec<u8>, Vec<u32>) {
        let hits = self
            .hits
            .iter()
            .map(|&h| h.round().clamp(0.0, u32::MAX as f32) as u32)
            .collect();
        (self.wants.clone(), hits)
    }

    /// Casts `view` through a grid of `rays` and records, per cell hit, the
    /// finest level and `weight` x the sampled pixels the rays that reach it
    /// stand for (keeping the larger of this and what an earlier view gave).
    /// A `weight` of 0 records the levels alone: cells to keep warm with
    /// spare pages (see [`Self::for_policy`]).
    /// `map_sizes[m]`: material `m`'s level-0 side in texels; `max_aniso`:
    /// the sampler's anisotropy (1 for none).
    pub fn cast(
        &mut self,
        objects: &[Object],
        view: &View,
        map_sizes: &[u32],
        max_aniso: f32,
        weight: f32,
        rays: (u32, u32),
    ) {
        let max_aniso = max_aniso.max(1.0);
        let (nx, ny) = (rays.0.max(1), rays.1.max(1));
        let eye = view.pose.eye;
        let forward = (view.pose.target - eye).normalize_or_zero();
        if forward == Vec3::ZERO || !weight.is_finite() || weight < 0.0 {
            return;
        }
        let right = forward.cross(Vec3::Y).try_normalize().unwrap_or(Vec3::X);
        let up = right.cross(forward);
        let tan_half = (view.fov_y * 0.5).tan();
        let height = view.height.max(1) as f32;
        let width = height * view.aspect;
        // World size of one pixel per unit of distance.
        let pixel = 2.0 * tan_half / height;
        let block = (width / nx as f32).max(height / ny as f32);
        // Sampled pixels (one in 8 x 8) each ray stands for.
        let samples = width * height / (nx * ny) as f32 / 64.0 * weight;
        let g = self.g;
        let cells = (g * g) as usize;
        let half_diag = (tan_half * (1.0 + view.aspect * view.aspect).sqrt()).atan();
        let candidates = candidates(objects, eye, forward, half_diag);
        // Rays whose block covers a whole texture square (far floor): per
        // material, the finest level and the sampled pixels per cell, applied
        // once after the rays rather than cell by cell for each ray.
        let materials = self.wants.len() / cells;
        let mut whole: Vec<Option<(u8, f32)>> = vec![None; materials];
        for j in 0..ny {
            for i in 0..nx {
                let sx = ((i as f32 + 0.5) / nx as f32 * 2.0 - 1.0) * tan_half * view.aspect;
                let sy = (1.0 - (j as f32 + 0.5) / ny as f32 * 2.0) * tan_half;
                let dir = (forward + right * sx + up * sy).normalize();
                let near = near_along(dir, forward);
                let Some((o, hit)) = nearest(&candidates, eye, dir, near) else {
                    continue;
                };
                let Some(&size) = map_sizes.get(o.material) else {
                    continue;
                };
                let (_, uv_per_unit) = shape_metrics(o.shape);
                let scale = o.scale();
                let repeats = o.uv_scale.x.max(o.uv_scale.y).max(1e-6);
                // Texture-square units per world unit, and texels per pixel.
                let uv_per_world = uv_per_unit * repeats / scale;
                let normal = o.model.transform_vector3(hit.n).normalize_or_zero();
                let cos = normal.dot(dir).abs().max(1e-3);
                // The footprint's axes (world units), and the sampler's choice.
                let (minor, major) = (hit.t * pixel, hit.t * pixel / cos);
                let texels = size as f32 * uv_per_world * minor.max(major / max_aniso);
                let lod = texels.max(1e-6).log2();
                let level = lod.clamp(0.0, 254.0).floor() as u8;
                let uv = hit.uv * Vec2::new(o.uv_scale.x, o.uv_scale.y);
                // The ray's block of pixels on the surface, in cells.
                let span = block * hit.t * pixel * uv_per_world * g as f32;
                let r = ((span * 0.5).ceil() as i64).clamp(0, i64::from(g / 2));
                // GLSL's `fract` (`x - floor(x)`), as the shaders' `tile_cell`.
                let c = uv.fract_gl() * g as f32;
                let (cx, cy) = (
                    (c.x.floor() as i64).clamp(0, i64::from(g) - 1),
                    (c.y.floor() as i64).clamp(0, i64::from(g) - 1),
                );
                let base = o.material * cells;
                if base + cells > self.wants.len() {
                    continue;
                }
                if 2 * r + 1 >= i64::from(g) {
                    let w = whole[o.material].get_or_insert((level, 0.0));
                    w.0 = w.0.min(level);
                    w.1 += samples / cells as f32;
                    continue;
                }
                let each = samples / ((2 * r + 1) * (2 * r + 1)) as f32;
                let gi = i64::from(g);
                for dy in -r..=r {
                    let row = base + (cy + dy).rem_euclid(gi) as usize * g as usize;
                    // The row's cells, wrapped: at most two runs.
                    let (x0, x1) = (cx - r, cx + r);
                    let runs = [
                        (x0.max(0), x1.min(gi - 1)),
                        if x0 < 0 { (x0 + gi, gi - 1) } else { (1, 0) },
                        if x1 >= gi { (0, x1 - gi) } else { (1, 0) },
                    ];
                    for (a, b) in runs {
                        if a > b {
                            continue;
                        }
                        let cells = row + a as usize..=row + b as usize;
                        for w in &mut self.wants[cells.clone()] {
                            *w = (*w).min(level);
                        }
                        if each > 0.0 {
                            for h in &mut self.scratch[cells] {
                                *h += each;
                            }
                        }
                    }
                }
            }
        }
        for (m, w) in whole.iter().enumerate() {
            if let Some((level, each)) = *w {
                for k in m * cells..(m + 1) * cells {
                    self.wants[k] = self.wants[k].min(level);
                    self.scratch[k] += each;
                }
            }
        }
        if weight > 0.0 {
            for (h, s) in self.hits.iter_mut().zip(&mut self.scratch) {
                *h = h.max(*s);
                *s = 0.0;
            }
        }
    }
}

/// An object prepared for one view's rays: its bounding sphere and the
/// inverse of its model matrix, computed once per view, not per ray.
struct Candidate<'a> {
    object: &'a Object,
    centre: Vec3,
    /// Bounding radius; infinite for the floor.
    bound: f32,
    /// The eye's distance to the bounding sphere (0 inside it; 0 for the
    /// floor): no ray meets the object nearer.
    near: f32,
    inverse: Mat4,
}

/// The objects whose bounding sphere reaches the view's cone (half-angle
/// `half_diag` around `forward` from `eye`), prepared for its rays, nearest
/// first (the floor before all).
fn candidates<'a>(
    objects: &'a [Object],
    eye: Vec3,
    forward: Vec3,
    half_diag: f32,
) -> Vec<Candidate<'a>> {
    let mut out: Vec<Candidate<'a>> = objects
        .iter()
        .filter_map(|o| {
            let centre = o.model.w_axis.truncate();
            let scale = o.scale();
            let bound = match o.shape {
                Shape::Sphere => SPHERE_RADIUS * scale,
                Shape::RoundedBox => BOX_HALF * 3f32.sqrt() * scale,
                Shape::Floor => f32::INFINITY,
            };
            if bound.is_finite() {
                let to = centre - eye;
                let d = to.length();
                if d > bound {
                    let angle = forward.dot(to / d).clamp(-1.0, 1.0).acos();
                    if angle > half_diag + (bound / d).asin() {
                        return None;
                    }
                }
            }
            let near = if bound.is_finite() {
                ((centre - eye).length() - bound).max(0.0)
            } else {
                0.0
            };
            Some(Candidate {
                object: o,
                centre,
                bound,
                near,
                inverse: o.model.inverse(),
            })
        })
        .collect();
    out.sort_by(|a, b| a.near.total_cmp(&b.near));
    out
}

/// The nearest of `objects` that `eye + t * dir` meets at `t > near` (`dir`
/// normalised), and where.
fn nearest<'a>(
    objects: &[Candidate<'a>],
    eye: Vec3,
    dir: Vec3,
    near: f32,
) -> Option<(&'a Object, Hit)> {
    let mut best: Option<(&Object, Hit)> = None;
    for c in objects {
        let limit = best.map_or(f32::INFINITY, |(_, h)| h.t);
        if c.near > limit {
            // Sorted by `near`: no object after this one is nearer.
            break;
        }
        if c.bound.is_finite() {
            let to = c.centre - eye;
            let along = to.dot(dir);
            if along + c.bound < near || along - c.bound > limit {
                continue;
            }
            if (to - dir * along).length_squared() > c.bound * c.bound {
                continue;
            }
        }
        let lo = c.inverse.transform_point3(eye);
        let ld = c.inverse.transform_vector3(dir);
        let hit = match c.object.shape {
            Shape::Sphere => sphere(lo, ld, near),
            Shape::RoundedBox => cube(lo, ld, near),
            Shape::Floor => floor(lo, ld, near),
        };
        if let Some(h) = hit.filter(|h| h.t < limit) {
            best = Some((c.object, h));
        }
    }
    best
}

/// A ray in object space (`d` not normalised: `t` stays the world distance)
/// against the UV sphere of [`crate::scene::mesh::sphere`], from `t > near`.
fn sphere(o: Vec3, d: Vec3, near: f32) -> Option<Hit> {
    let a = d.length_squared();
    let b = o.dot(d);
    let c = o.length_squared() - SPHERE_RADIUS * SPHERE_RADIUS;
    let disc = b * b - a * c;
    if a <= 0.0 || disc < 0.0 {
        return None;
    }
    // The entry point alone: from inside the sphere (or with the entry
    // clipped by the near plane) a ray meets only its inner, back faces,
    // which the gallery's pipelines cull, so the screen shows what lies beyond.
    let t = (-b - disc.sqrt()) / a;
    if t <= near {
        return None;
    }
    let n = ((o + d * t) / SPHERE_RADIUS).normalize_or_zero();
    let theta = n.y.clamp(-1.0, 1.0).acos();
    let mut phi = (-n.z).atan2(n.x);
    if phi < 0.0 {
        phi += std::f32::consts::TAU;
    }
    // u: two repeats around, v: pole to pole (the mesh's `uv_scale` (2, 1)).
    Some(Hit {
        t,
        uv: Vec2::new(
            phi / std::f32::consts::TAU * 2.0,
            theta / std::f32::consts::PI,
        ),
        n,
    })
}

/// A ray in object space against the rounded box of
/// [`crate::scene::mesh::rounded_box`] (its distance field marched from where
/// the ray enters the box around it), from `t > near`; the face's texture
/// coordinate as the mesh maps it (see the module's approximations).
fn cube(o: Vec3, d: Vec3, near: f32) -> Option<Hit> {
    let mut enter = f32::NEG_INFINITY;
    let mut exit = f32::INFINITY;
    for k in 0..3 {
        if d[k].abs() < 1e-12 {
            if o[k].abs() > BOX_HALF {
                return None;
            }
            continue;
        }
        let t0 = (-BOX_HALF - o[k]) / d[k];
        let t1 = (BOX_HALF - o[k]) / d[k];
        enter = enter.max(t0.min(t1));
        exit = exit.min(t0.max(t1));
    }
    if enter > exit || exit <= near {
        return None;
    }
    // The box's rounding: march the distance field (exact outside the
    // shape, so no step passes its surface) from the box's entry (or the
    // eye, where it is inside the box but outside the rounded corners). A
    // start inside the shape sees only back faces, culled as in the
    // sphere's case; so does an entry clipped by the near plane.
    let len = d.length().max(1e-12);
    let mut t = enter.max(0.0);
    let mut p = o + d * t;
    let mut dist = rounded_box_distance(p);
    if dist < -MARCH_EPSILON {
        return None;
    }
    for _ in 0..MARCH_STEPS {
        if dist < MARCH_EPSILON {
            break;
        }
        t += dist / len;
        if t > exit {
            return None;
        }
        p = o + d * t;
        dist = rounded_box_distance(p);
    }
    if dist >= MARCH_ACCEPT || t <= near {
        return None;
    }
    let a = p.abs();
    let axis = if a.x >= a.y && a.x >= a.z {
        Vec3::X * p.x.signum()
    } else if a.y >= a.z {
        Vec3::Y * p.y.signum()
    } else {
        Vec3::Z * p.z.signum()
    };
    let &(_, ua, va) = BOX_FACES.iter().find(|f| f.0 == axis)?;
    let inset = Vec3::splat(BOX_HALF - BOX_ROUNDING);
    let c = p.clamp(-inset, inset);
    let n = (p - c).normalize_or(axis);
    // The mesh puts the face's point `q` at `clamp(q) + normalize(q -
    // clamp(q)) * BOX_ROUNDING`: back from `p` to `q`, on the face's plane
    // from `c` along `n` (`p` itself on the flat part).
    let q = c + n * ((BOX_HALF - c.dot(axis)) / n.dot(axis).max(1e-3));
    let uv = Vec2::new(q.dot(ua), q.dot(va)) / BOX_HALF * 0.5 + Vec2::splat(0.5);
    Some(Hit {
        t,
        uv: uv.clamp(Vec2::ZERO, Vec2::ONE),
        n,
    })
}

/// Steps of the rounded box's march, at most (a ray grazing an edge takes
/// the most; flat faces one or two).
const MARCH_STEPS: u32 = 48;
/// The distance (object units) at which the march counts the surface met.
const MARCH_EPSILON: f32 = 1e-4;
/// The distance within which a march that ran out of steps (a ray grazing
/// the silhouette) still counts the surface met.
const MARCH_ACCEPT: f32 = MARCH_EPSILON * 16.0;

/// A ray in object space against the floor (y = 0, seen from above), from
/// `t > near`.
fn floor(o: Vec3, d: Vec3, near: f32) -> Option<Hit> {
    if o.y <= 0.0 || d.y >= 0.0 {
        return None;
    }
    let t = -o.y / d.y;
    let p = o + d * t;
    let half = FLOOR_SIZE * 0.5;
    if t <= near || p.x.abs() > half || p.z.abs() > half {
        return None;
    }
    Some(Hit {
        t,
        uv: (Vec2::new(p.x, p.z) / FLOOR_SIZE + Vec2::splat(0.5)) * FLOOR_REPEATS,
        n: Vec3::Y,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scene::camera::Pose;
    use crate::scene::mesh;
    use crate::scene::Gallery;
    use glam::{Mat4, Vec4};

    fn view(eye: Vec3, target: Vec3) -> View {
        View {
            pose: Pose { eye, target },
            fov_y: 50f32.to_radians(),
            aspect: 16.0 / 9.0,
            height: 1080,
            cut: false,
        }
    }

    fn object(shape: Shape, at: Vec3, angle: f32, material: usize) -> Object {
        Object {
            shape,
            model: Mat4::from_translation(at) * Mat4::from_rotation_y(angle),
            material,
            uv_scale: Vec4::new(1.0, 1.0, 1.0, 0.0),
        }
    }

    /// The texture coordinate a ray finds equals the mesh's at that vertex
    /// (modulo 1), for the sphere and the flat part of every box face.
    #[test]
    fn texture_coordinates_match_the_meshes() {
        for (shape, m) in [
            (Shape::Sphere, mesh::sphere(SPHERE_RADIUS, 64, 32)),
            (Shape::RoundedBox, mesh::rounded_box(BOX_HALF, 0.18, 8)),
        ] {
            let o = object(shape, Vec3::new(3.0, 1.0, -2.0), 0.7, 0);
            let mut checked = 0;
            for v in &m.vertices {
                let uv = Vec2::from(v.uv);
                let n = Vec3::from(v.normal);
                let p = Vec3::from(v.position);
                // Box: only the flat part (the rounding moves the rest);
                // sphere: not at the poles or the seam (u is ambiguous there).
                let flat = match shape {
                    Shape::RoundedBox => {
                        let f = uv.fract_gl();
                        (0.25..0.75).contains(&f.x) && (0.25..0.75).contains(&f.y)
                    }
                    _ => (0.1..0.9).contains(&uv.y) && (0.02..1.98).contains(&uv.x),
                };
                if !flat {
                    continue;
                }
                let world = o.model.transform_point3(p);
                let wn = o.model.transform_vector3(n).normalize();
                let eye = world + wn * 3.0;
                let c = candidates(std::slice::from_ref(&o), eye, -wn, 0.1);
                let (hit_o, hit) = nearest(&c, eye, -wn, NEAR_PLANE).expect("hit");
                assert_eq!(hit_o.material, 0);
                assert!((hit.t - 3.0).abs() < 0.05, "{shape:?}: t {}", hit.t);
                let d = (hit.uv - uv).abs();
                let d = d.min(Vec2::ONE * 2.0 - d); // the sphere's u wraps at 2
                assert!(
                    d.max_element() < 0.02,
                    "{shape:?}: uv {} against {uv}",
                    hit.uv
                );
                checked += 1;
            }
            assert!(checked > 20, "{shape:?}: {checked} vertices checked");
        }
    }

    #[test]
    fn a_close_up_wants_fine_levels_of_the_cells_in_view_only() {
        let objects = [object(Shape::Sphere, Vec3::ZERO, 0.0, 0)];
        let mut near = AheadCells::new(1, 32);
        near.cast(
            &objects,
            &view(Vec3::new(0.0, 0.0, 1.6), Vec3::ZERO),
            &[8192],
            16.0,
            1.0,
            RAYS,
        );
        let mut far = AheadCells::new(1, 32);
        far.cast(
            &objects,
            &view(Vec3::new(0.0, 0.0, 12.0), Vec3::ZERO),
            &[8192],
            16.0,
            1.0,
            RAYS,
        );
        let seen = |c: &AheadCells| c.wants.iter().filter(|&&w| w != UNSEEN).count();
        let finest = |c: &AheadCells| *c.wants.iter().min().unwrap();
        // Close: level 0, and only the side facing the camera (+z: u about
        // 0.25 or 0.75 of each repeat), not the whole square.
        assert_eq!(finest(&near), 0);
        assert!(
            seen(&near) > 16 && seen(&near) < 32 * 32 * 3 / 4,
            "{}",
            seen(&near)
        );
        // Far: coarser.
        assert!(finest(&far) >= 2, "{}", finest(&far));
        // Hits: the sampled pixels the sphere covers (one in 64), about: at
        // 1.6 it fills the frame's height (a disc of 0.6-0.7 of the frame).
        let total: f32 = near.hits.iter().sum();
        let frame = 1920.0 * 1080.0 / 64.0;
        assert!(
            total > 0.3 * frame && total <= frame * 1.001,
            "{total} of {frame}"
        );
    }

    #[test]
    fn the_casts_follow_the_path_its_cuts_and_still_poses() {
        let at = |x: f32, cut: bool| View {
            cut,
            ..view(Vec3::new(x, 1.0, 0.0), Vec3::new(x, 0.0, -1.0))
        };
        // A path moving 1.5 a frame (fast, but no cut), a cut at frame 6 (to
        // a still close-up held for frames 6-9), back at frame 10; 16 frames
        // ahead.
        let views: Vec<View> = (0..17)
            .map(|k| match k {
                6 => at(50.0, true),
                7..=9 => at(50.0, false),
                _ => at(k as f32 * 1.5, k == 10),
            })
            .collect();
        let casts = plan_casts(&views, false, 0.5);
        let ks: Vec<usize> = casts.iter().map(|c| c.k).collect();
        // Not the present; the next frame; 2, 4, 16; the cuts at 6 and 10
        // (7-9 hold the cut's pose, 8 among them: cast once, at 6).
        assert_eq!(ks, vec![1, 2, 4, 6, 10, 16]);
        assert_eq!(casts[0].weight, 0.5, "the next frame by its pixels");
        assert!(casts.iter().all(|c| c.rays == WARM_RAYS));
        assert!(casts[1..].iter().all(|c| c.weight == 0.0));
        // With the present (a cut's own frame, the pre-fill): weight 1.
        let with = plan_casts(&views, true, 0.0);
        assert_eq!((with[0].k, with[0].weight, with[0].rays), (0, 1.0, RAYS));
        assert_eq!(with[1].weight, 0.0, "next = 0: warm");
        // The next frame is a cut: kept warm, not weighted.
        let mut cut_next = views.clone();
        cut_next[1] = at(50.0, true);
        assert_eq!(plan_casts(&cut_next, false, 0.5)[0].weight, 0.0);
        // A still camera: one cast of its pose.
        let still = vec![at(0.0, false); 17];
        assert_eq!(plan_casts(&still, true, 0.5).len(), 1);
        // Its pose through a wider frustum (a guard band), or zoomed in at
        // the same pose, is another view: cast.
        let guard = [at(0.0, false), at(0.0, false).widened(1.25).unwrap()];
        assert_eq!(plan_casts(&guard, false, 0.5).len(), 1);
        assert_eq!(plan_casts(&guard, true, 0.5).len(), 2);
        let mut zoom = at(0.0, false);
        zoom.fov_y *= 0.5;
        assert_eq!(plan_casts(&[at(0.0, false), zoom], false, 0.5).len(), 1);
        assert!(plan_casts(&[], true, 0.5).is_empty());
    }

    #[test]
    fn anisotropy_asks_for_finer_levels_at_grazing_angles() {
        let floor = Object {
            shape: Shape::Floor,
            model: Mat4::IDENTITY,
            material: 0,
            uv_scale: Vec4::new(1.0, 1.0, 1.0, 0.0),
        };
        // Low over the floor, looking far along it.
        let v = view(Vec3::new(0.0, 0.5, 0.0), Vec3::new(0.0, 0.3, -10.0));
        let finest = |aniso: f32| {
            let mut c = AheadCells::new(1, 16);
            c.cast(std::slice::from_ref(&floor), &v, &[8192], aniso, 1.0, RAYS);
            let seen: Vec<u32> = c
                .wants
                .iter()
                .filter(|&&w| w != UNSEEN)
                .map(|&w| u32::from(w))
                .collect();
            assert!(!seen.is_empty());
            seen.iter().sum::<u32>() as f32 / seen.len() as f32
        };
        assert!(
            finest(16.0) + 1.0 < finest(1.0),
            "{} {}",
            finest(16.0),
            finest(1.0)
        );
    }

    #[test]
    fn from_inside_an_object_its_culled_back_faces_hide_nothing() {
        // The eye inside a sphere and inside a box, each looking at a sphere
        // beyond: the pipelines cull back faces, so the enclosing object is
        // not drawn and the one beyond is.
        for (shape, angle) in [(Shape::Sphere, 0.0), (Shape::RoundedBox, 0.7)] {
            let objects = [
                object(shape, Vec3::ZERO, angle, 0),
                object(Shape::Sphere, Vec3::new(0.0, 0.0, -4.0), 0.0, 1),
            ];
            let mut c = AheadCells::new(2, 8);
            let v = view(Vec3::new(0.0, 0.0, -0.3), Vec3::new(0.0, 0.0, -4.0));
            c.cast(&objects, &v, &[1024; 2], 16.0, 1.0, RAYS);
            let seen = |m: usize| c.wants[m * 64..(m + 1) * 64].iter().any(|&w| w != UNSEEN);
            assert!(!seen(0), "{shape:?}: its inside is culled");
            assert!(seen(1), "{shape:?}: what lies beyond is drawn");
        }
        // From outside, the entry faces are hit.
        let ahead = Vec3::new(0.0, 0.0, -1.0);
        let out = Vec3::new(0.0, 0.0, 3.0);
        assert!(sphere(out, ahead, NEAR_PLANE).is_some_and(|h| (h.t - 2.0).abs() < 1e-4));
        assert!(cube(out, ahead, NEAR_PLANE).is_some_and(|h| (h.t - 2.15).abs() < 1e-4));
        assert!(sphere(Vec3::ZERO, ahead, NEAR_PLANE).is_none());
        assert!(cube(Vec3::ZERO, ahead, NEAR_PLANE).is_none());
    }

    #[test]
    fn a_surface_nearer_than_the_near_plane_is_clipped_and_shows_what_lies_beyond() {
        // The eye 0.03 in front of a box's face (within the near plane, as a
        // path flying into the box passes it) and of a sphere's surface: the
        // renderer clips the entry faces and culls the back faces, so the
        // sphere beyond is drawn. At 0.1 in front, the near object is.
        for (shape, surface) in [
            (Shape::RoundedBox, BOX_HALF),
            (Shape::Sphere, SPHERE_RADIUS),
        ] {
            let objects = [
                object(shape, Vec3::ZERO, 0.0, 0),
                object(Shape::Sphere, Vec3::new(0.0, 0.0, -4.0), 0.0, 1),
            ];
            for (gap, clipped) in [(0.03, true), (0.1, false)] {
                let mut c = AheadCells::new(2, 8);
                let eye = Vec3::new(0.0, 0.0, surface + gap);
                let v = view(eye, Vec3::new(0.0, 0.0, -4.0));
                c.cast(&objects, &v, &[1024; 2], 16.0, 1.0, RAYS);
                let seen = |m: usize| c.wants[m * 64..(m + 1) * 64].iter().any(|&w| w != UNSEEN);
                assert_eq!(seen(0), !clipped, "{shape:?} at {gap}: the near object");
                assert_eq!(seen(1), clipped, "{shape:?} at {gap}: what lies beyond");
            }
        }
    }

    /// `near_along` is where the renderer's projection clips, across the
    /// frame (at its corners a ray's cosine with the view is 0.72: the near
    /// plane is 0.07 along it, not 0.05).
    #[test]
    fn the_near_distance_along_a_ray_is_where_the_projection_clips() {
        let v = view(Vec3::new(1.0, 2.0, 3.0), Vec3::new(-2.0, 0.5, -1.0));
        let vp = crate::scene::camera::view_proj(v.pose, v.aspect, v.fov_y);
        let forward = (v.pose.target - v.pose.eye).normalize();
        let right = forward.cross(Vec3::Y).normalize();
        let up = right.cross(forward);
        let tan_half = (v.fov_y * 0.5).tan();
        for (sx, sy) in [(0.0, 0.0), (0.99, 0.99), (-0.99, 0.5), (0.5, -0.99)] {
            let dir = (forward + right * sx * tan_half * v.aspect + up * sy * tan_half).normalize();
            let near = near_along(dir, forward);
            // Reversed Z: a point is clipped where its depth passes 1.
            let depth = |t: f32| vp.project_point3(v.pose.eye + dir * t).z;
            assert!(depth(near * 0.99) > 1.0, "({sx}, {sy}): nearer is clipped");
            assert!(depth(near * 1.01) < 1.0, "({sx}, {sy}): beyond is drawn");
        }
    }

    #[test]
    fn a_rounded_edge_is_met_where_the_mesh_is() {
        // Towards an edge along its diagonal: the box around the rounded box
        // is entered at 0.05 * sqrt 2; the mesh's edge is further, where the
        // rounding's circle lies (0.67 + 0.18 / sqrt 2 on each axis).
        let o = Vec3::new(0.9, 0.0, 0.9);
        let d = Vec3::new(-1.0, 0.0, -1.0).normalize();
        let edge = (BOX_HALF - BOX_ROUNDING) + BOX_ROUNDING / 2f32.sqrt();
        let expect = (0.9 - edge) * 2f32.sqrt();
        // A near plane past the box's corner but short of the mesh: drawn.
        let hit = cube(o, d, 0.1).expect("the rounded edge is drawn");
        assert!(
            (hit.t - expect).abs() < 1e-3,
            "t {} against {expect}",
            hit.t
        );
        assert!(
            hit.n.dot(-d) > 0.999,
            "the edge's normal faces the ray: {}",
            hit.n
        );
        // From inside the box but outside the rounding, the edge is seen;
        // from inside the rounded box, nothing.
        let corner = Vec3::splat(0.84);
        assert!(cube(corner, -corner.normalize(), NEAR_PLANE).is_some());
        assert!(cube(Vec3::splat(0.6), Vec3::X, NEAR_PLANE).is_none());
    }

    /// On the rounding, the texture coordinate a ray finds is the mesh's
    /// (interpolated across its triangles) within a cell of the finest grid
    /// ([`super::super::MAX_CELLS`] a side; here within 0.016): the mesh's map
    /// from the face to the rounding, inverted. Read off the face's plane
    /// (before), it is out by up to 0.041 near the edges.
    #[test]
    fn texture_coordinates_on_the_rounding_match_the_mesh() {
        let m = Shape::RoundedBox.mesh();
        let cell = 1.0 / super::super::MAX_CELLS as f32;
        let mut checked = 0;
        for t in m.indices.chunks(3) {
            let v = [0, 1, 2].map(|k| m.vertices[t[k] as usize]);
            let uv = v.map(|v| Vec2::from(v.uv));
            // The triangles between the face's last inner grid line and its
            // edge (the flat part is checked above).
            if !uv
                .iter()
                .any(|u| u.min_element() == 0.0 || u.max_element() == 1.0)
            {
                continue;
            }
            let p = v.map(|v| Vec3::from(v.position));
            let n = (p[1] - p[0]).cross(p[2] - p[0]).normalize();
            for (a, b) in [(0.05, 0.05), (0.9, 0.05), (0.05, 0.9), (0.33, 0.33)] {
                let at = p[0] * (1.0 - a - b) + p[1] * a + p[2] * b;
                let want = uv[0] * (1.0 - a - b) + uv[1] * a + uv[2] * b;
                let hit = cube(at + n * 2.0, -n, NEAR_PLANE).expect("the rounding is hit");
                let d = (hit.uv - want).abs().max_element();
                assert!(d < cell, "at {at}: uv {} against the mesh's {want}", hit.uv);
                checked += 1;
            }
        }
        assert!(checked > 500, "{checked} points checked");
    }

    #[test]
    fn hidden_and_behind_the_camera_are_not_seen() {
        let objects = [
            object(Shape::Sphere, Vec3::new(0.0, 0.0, -3.0), 0.0, 0),
            // Right behind the first, smaller on screen, hidden.
            object(Shape::Sphere, Vec3::new(0.0, 0.0, -6.0), 0.0, 1),
            // Behind the camera.
            object(Shape::RoundedBox, Vec3::new(0.0, 0.0, 4.0), 0.0, 2),
        ];
        let mut c = AheadCells::new(3, 8);
        // A narrow view: the first sphere fills it.
        let mut v = view(Vec3::ZERO, Vec3::new(0.0, 0.0, -1.0));
        v.fov_y = 10f32.to_radians();
        c.cast(&objects, &v, &[1024; 3], 16.0, 1.0, RAYS);
        let seen = |m: usize| c.wants[m * 64..(m + 1) * 64].iter().any(|&w| w != UNSEEN);
        assert!(seen(0));
        assert!(!seen(1), "hidden behind material 0");
        assert!(!seen(2), "behind the camera");
    }

    #[test]
    fn the_gallery_floor_and_objects_are_seen_from_the_path() {
        let g = Gallery::new(16, 0);
        let sizes = vec![1024u32; 17];
        let mut c = AheadCells::new(17, 16);
        c.cast(
            &g.objects,
            &view(Vec3::new(0.0, 6.0, 12.0), Vec3::ZERO),
            &sizes,
            16.0,
            0.5,
            RAYS,
        );
        let floor = g.objects.last().unwrap().material;
        let seen = (0..17)
            .filter(|&m| c.wants[m * 256..(m + 1) * 256].iter().any(|&w| w != UNSEEN))
            .count();
        assert!(seen >= 8, "{seen} materials seen");
        // The floor repeats: nearly every cell of its square is seen.
        let floor_cells = c.wants[floor * 256..(floor + 1) * 256]
            .iter()
            .filter(|&&w| w != UNSEEN)
            .count();
        assert!(floor_cells > 200, "{floor_cells}");
        // Weighted: the hits add up to at most half the frame's samples.
        let total: f32 = c.hits.iter().sum();
        assert!(
            total > 0.0 && total <= 1920.0 * 1080.0 / 64.0 * 0.5 * 1.001,
            "{total}"
        );
        // Nothing for a degenerate view or a negative weight; levels alone
        // for a zero weight.
        let fresh = AheadCells::new(17, 16);
        let at = view(Vec3::new(0.0, 6.0, 12.0), Vec3::ZERO);
        let mut none = fresh.clone();
        none.cast(
            &g.objects,
            &view(Vec3::ONE, Vec3::ONE),
            &sizes,
            16.0,
            1.0,
            RAYS,
        );
        none.cast(&g.objects, &at, &sizes, 16.0, -1.0, RAYS);
        assert!(none == fresh, "nothing cast");
        let mut warm = fresh.clone();
        warm.cast(&g.objects, &at, &sizes, 16.0, 0.0, RAYS);
        assert!(warm.wants.iter().any(|&w| w != UNSEEN), "weight 0: levels");
        assert!(warm.hits.iter().all(|&h| h == 0.0), "weight 0: no hits");
        // For the policy: hits rounded, levels kept (no hits: warm).
        let mut faint = AheadCells::new(1, 2);
        faint.wants = vec![0, 1, 2, UNSEEN];
        faint.hits = vec![0.4, 0.6, 7.0, 0.0];
        assert_eq!(
            faint.for_policy(),
            (vec![0, 1, 2, UNSEEN], vec![0, 1, 7, 0])
        );
        assert_eq!(none.cells_per_side(), 16);
    }
}
