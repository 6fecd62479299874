//! Generated meshes: UV spheres, rounded boxes and a floor plane, with normals,
//! tangents (w = handedness, bitangent = dP/dv) and texture coordinates.

use glam::{Vec2, Vec3, Vec4};

/// One vertex, as the PBR vertex shader reads it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Vertex {
    /// Position.
    pub position: [f32; 3],
    /// Unit normal.
    pub normal: [f32; 3],
    /// Unit tangent along +u; w is the bitangent's sign.
    pub tangent: [f32; 4],
    /// Texture coordinate.
    pub uv: [f32; 2],
}

/// Vertices and triangle indices.
#[derive(Clone, Debug, Default)]
pub struct MeshData {
    /// Vertices.
    pub vertices: Vec<Vertex>,
    /// Indices, counter-clockwise front faces.
    pub indices: Vec<u32>,
}

fn vertex(p: Vec3, n: Vec3, dpdu: Vec3, dpdv: Vec3, uv: Vec2) -> Vertex {
    let t = (dpdu - n * n.dot(dpdu)).normalize_or(n.any_orthonormal_vector());
    let w = if n.cross(t).dot(dpdv) < 0.0 {
        -1.0
    } else {
        1.0
    };
    Vertex {
        position: p.to_array(),
        normal: n.to_array(),
        tangent: Vec4::from((t, w)).to_array(),
        uv: uv.to_array(),
    }
}

/// A grid of `(cols + 1) × (rows + 1)` vertices from `f(u, v)` with u, v in [0, 1];
/// `f` returns position, normal, dP/du and dP/dv. Triangles face along the normal
/// when `flip` is false and (dP/du × dP/dv) points along it.
fn grid(
    mesh: &mut MeshData,
    cols: u32,
    rows: u32,
    flip: bool,
    f: impl Fn(f32, f32) -> (Vec3, Vec3, Vec3, Vec3),
    uv_scale: Vec2,
) {
    let base = mesh.vertices.len() as u32;
    for r in 0..=rows {
        for c in 0..=cols {
            let (u, v) = (c as f32 / cols as f32, r as f32 / rows as f32);
            let (p, n, du, dv) = f(u, v);
            mesh.vertices
                .push(vertex(p, n, du, dv, Vec2::new(u, v) * uv_scale));
        }
    }
    for r in 0..rows {
        for c in 0..cols {
            let i = base + r * (cols + 1) + c;
            let (a, b, d, e) = (i, i + 1, i + cols + 1, i + cols + 2);
            if flip {
                mesh.indices.extend_from_slice(&[a, b, d, b, e, d]);
            } else {
                mesh.indices.extend_from_slice(&[a, d, b, b, d, e]);
            }
        }
    }
}

/// A UV sphere of `radius`: u around (2 repeats), v from pole to pole.
pub fn sphere(radius: f32, segments: u32, rings: u32) -> MeshData {
    let mut m = MeshData::default();
    use std::f32::consts::PI;
    grid(
        &mut m,
        segments,
        rings,
        false,
        |u, v| {
            let (phi, theta) = (u * 2.0 * PI, v * PI);
            let n = Vec3::new(
                theta.sin() * phi.cos(),
                theta.cos(),
                -theta.sin() * phi.sin(),
            );
            let du = Vec3::new(-phi.sin(), 0.0, -phi.cos()) * theta.sin().max(1e-3);
            let dv = Vec3::new(
                theta.cos() * phi.cos(),
                -theta.sin(),
                -theta.cos() * phi.sin(),
            );
            (n * radius, n, du, dv)
        },
        Vec2::new(2.0, 1.0),
    );
    m
}

/// The rounded box's faces: normal axis, u axis, v axis (u × v = normal, so
/// CCW from outside). Face point `n * half + u_axis * (2u - 1) * half + v_axis
/// * (2v - 1) * half` has texture coordinate (u, v), before the rounding.
pub const BOX_FACES: [(Vec3, Vec3, Vec3); 6] = [
    (Vec3::X, Vec3::NEG_Z, Vec3::NEG_Y),
    (Vec3::NEG_X, Vec3::Z, Vec3::NEG_Y),
    (Vec3::Y, Vec3::X, Vec3::Z),
    (Vec3::NEG_Y, Vec3::X, Vec3::NEG_Z),
    (Vec3::Z, Vec3::X, Vec3::NEG_Y),
    (Vec3::NEG_Z, Vec3::NEG_X, Vec3::NEG_Y),
];

/// A box of half-extent `half` with edges rounded by `radius`; each face maps the
/// texture once.
pub fn rounded_box(half: f32, radius: f32, steps: u32) -> MeshData {
    let mut m = MeshData::default();
    let inner = half - radius;
    for (n0, ua, va) in BOX_FACES {
        grid(
            &mut m,
            steps,
            steps,
            n0.dot(ua.cross(va)) > 0.0,
            |u, v| {
                let q = n0 * half + ua * (u * 2.0 - 1.0) * half + va * (v * 2.0 - 1.0) * half;
                let c = q.clamp(Vec3::splat(-inner), Vec3::splat(inner));
                let n = (q - c).normalize_or(n0);
                (c + n * radius, n, ua, va)
            },
            Vec2::ONE,
        );
    }
    m
}

/// A horizontal plane at y = 0 of side `size`, the texture repeated `repeats` times.
pub fn plane(size: f32, repeats: f32) -> MeshData {
    let mut m = MeshData::default();
    grid(
        &mut m,
        1,
        1,
        false,
        |u, v| {
            (
                Vec3::new((u - 0.5) * size, 0.0, (v - 0.5) * size),
                Vec3::Y,
                Vec3::X,
                Vec3::Z,
            )
        },
        Vec2::splat(repeats),
    );
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_facing(m: &MeshData) {
        // Every triangle's winding agrees with its vertices' normals (CCW front).
        for t in m.indices.chunks(3) {
            let p = |i: u32| Vec3::from(m.vertices[i as usize].position);
            let face = (p(t[1]) - p(t[0])).cross(p(t[2]) - p(t[0]));
            if face.length() < 1e-7 {
                continue;
            }
            let n = Vec3::from(m.vertices[t[0] as usize].normal)
                + Vec3::from(m.vertices[t[1] as usize].normal)
                + Vec3::from(m.vertices[t[2] as usize].normal);
            assert!(face.dot(n) > 0.0, "triangle {t:?} faces inward");
        }
    }

    #[test]
    fn meshes_face_outward() {
        check_facing(&sphere(1.0, 16, 8));
        check_facing(&rounded_box(1.0, 0.2, 6));
        check_facing(&plane(10.0, 4.0));
    }
}
