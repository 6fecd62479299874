//! Baking one material: level 0 of the albedo, normal and ORM maps generated row
//! by row in parallel, then full mip chains by 2×2 box filtering (albedo averaged
//! in linear light, normals renormalised).

use rayon::prelude::*;

use crate::ktx2::Format;
use crate::materials::{Material, Surface};

/// Which of a material's three maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MapKind {
    /// Base colour (sRGB).
    Albedo,
    /// Tangent-space normal, x and y (z rebuilt in the shader).
    Normal,
    /// Occlusion (r), roughness (g), metallic (b).
    Orm,
}

/// The three maps in their order in shaders and files.
pub const MAPS: [MapKind; 3] = [MapKind::Albedo, MapKind::Normal, MapKind::Orm];

impl MapKind {
    /// File-name suffix.
    pub fn name(self) -> &'static str {
        match self {
            MapKind::Albedo => "albedo",
            MapKind::Normal => "normal",
            MapKind::Orm => "orm",
        }
    }

    /// The uncompressed format of the map.
    pub fn format(self) -> Format {
        match self {
            MapKind::Albedo => Format::Rgba8Srgb,
            MapKind::Normal => Format::Rg8Unorm,
            MapKind::Orm => Format::Rgba8Unorm,
        }
    }

    /// The block-compressed format of the map (BC7 colour, BC5 normals).
    pub fn compressed_format(self) -> Format {
        match self {
            MapKind::Albedo => Format::Bc7Srgb,
            MapKind::Normal => Format::Bc5Unorm,
            MapKind::Orm => Format::Bc7Unorm,
        }
    }
}

/// A map with every mip level, level 0 first.
pub struct MipChain {
    /// Which map.
    pub kind: MapKind,
    /// Its format.
    pub format: Format,
    /// Level 0's size (square).
    pub size: u32,
    /// The levels, level 0 first.
    pub levels: Vec<Vec<u8>>,
}

fn srgb_to_linear(c: f32) -> f32 {
    if c <= 0.04045 {
        c / 12.92
    } else {
        ((c + 0.055) / 1.055).powf(2.4)
    }
}

fn linear_to_srgb(c: f32) -> f32 {
    if c <= 0.003_130_8 {
        c * 12.92
    } else {
        1.055 * c.powf(1.0 / 2.4) - 0.055
    }
}

struct Tables {
    decode: [f32; 256],
    encode: Vec<u8>,
}

const ENCODE_STEPS: usize = 8192;

impl Tables {
    fn new() -> Self {
        let mut decode = [0.0; 256];
        for (i, d) in decode.iter_mut().enumerate() {
            *d = srgb_to_linear(i as f32 / 255.0);
        }
        let encode = (0..=ENCODE_STEPS)
            .map(|i| (linear_to_srgb(i as f32 / ENCODE_STEPS as f32) * 255.0 + 0.5) as u8)
            .collect();
        Self { decode, encode }
    }

    fn encode(&self, linear: f32) -> u8 {
        self.encode[(linear.clamp(0.0, 1.0) * ENCODE_STEPS as f32 + 0.5) as usize]
    }
}

fn unorm(x: f32) -> u8 {
    (x.clamp(0.0, 1.0) * 255.0 + 0.5) as u8
}

/// Number of mip levels of a `size`² texture (down to 1×1).
pub fn mip_count(size: u32) -> u32 {
    32 - size.leading_zeros()
}

/// How baked maps are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// RGBA8 / RG8.
    Uncompressed,
    /// BC7 (albedo, ORM) and BC5 (normals).
    Bc,
}

/// Bakes `material` at `size`² (a power of two), uncompressed. `progress` is
/// called with units of work done; a material is `2 * size` units.
pub fn bake(
    material: Material,
    size: u32,
    seed: u32,
    progress: &(dyn Fn(u64) + Sync),
) -> [MipChain; 3] {
    assert!(
        size.is_power_of_two() && size >= 4,
        "texture size must be a power of two >= 4"
    );
    let n = size as usize;
    let tables = Tables::new();
    let mut albedo = vec![0u8; n * n * 4];
    let mut orm = vec![0u8; n * n * 4];
    let mut height = vec![0f32; n * n];
    albedo
        .par_chunks_mut(n * 4)
        .zip(orm.par_chunks_mut(n * 4))
        .zip(height.par_chunks_mut(n))
        .enumerate()
        .for_each(|(y, ((a, o), h))| {
            let v = (y as f32 + 0.5) / size as f32;
            for x in 0..n {
                let u = (x as f32 + 0.5) / size as f32;
                let s: Surface = material.sample(u, v, seed);
                a[x * 4..x * 4 + 4].copy_from_slice(&[
                    unorm(s.albedo[0]),
                    unorm(s.albedo[1]),
                    unorm(s.albedo[2]),
                    255,
                ]);
                o[x * 4..x * 4 + 4].copy_from_slice(&[
                    unorm(s.ao),
                    unorm(s.roughness),
                    unorm(s.metallic),
                    255,
                ]);
                h[x] = s.height;
            }
            progress(1);
        });

    // Normals from height by central differences, wrapping at the edges.
    let slope = material.bump() * size as f32 * 0.5;
    let mut normal = vec![0u8; n * n * 2];
    normal
        .par_chunks_mut(n * 2)
        .enumerate()
        .for_each(|(y, row)| {
            let up = &height[((y + n - 1) % n) * n..][..n];
            let down = &height[((y + 1) % n) * n..][..n];
            let mid = &height[y * n..][..n];
            for x in 0..n {
                let dx = (mid[(x + 1) % n] - mid[(x + n - 1) % n]) * slope;
                let dy = (down[x] - up[x]) * slope;
                let inv = 1.0 / (dx * dx + dy * dy + 1.0).sqrt();
                row[x * 2] = unorm(-dx * inv * 0.5 + 0.5);
                row[x * 2 + 1] = unorm(-dy * inv * 0.5 + 0.5);
            }
        });
    drop(height);
    progress(size as u64 / 2);

    let chains = [
        mip_chain(MapKind::Albedo, size, albedo, &tables),
        mip_chain(MapKind::Normal, size, normal, &tables),
        mip_chain(MapKind::Orm, size, orm, &tables),
    ];
    progress(size as u64 / 2);
    chains
}

/// Units of progress [`bake_encoded`] reports for one material.
pub fn work_units(size: u32, encoding: Encoding) -> u64 {
    match encoding {
        Encoding::Uncompressed => 2 * size as u64,
        Encoding::Bc => 3 * size as u64,
    }
}

/// Bakes `material` with `encoding`, reporting [`work_units`] units of progress;
/// see [`bake`].
pub fn bake_encoded(
    material: Material,
    size: u32,
    seed: u32,
    encoding: Encoding,
    progress: &(dyn Fn(u64) + Sync),
) -> [MipChain; 3] {
    let chains = bake(material, size, seed, progress);
    match encoding {
        Encoding::Uncompressed => chains,
        Encoding::Bc => {
            // The three maps, a third of the compression work each.
            let third = size as u64 / 3;
            let out = chains.map(|c| {
                let c = compress(&c);
                progress(third);
                c
            });
            progress(size as u64 - 3 * third);
            out
        }
    }
}

/// Block-compresses every level of an uncompressed chain (levels smaller than a
/// block are padded by repeating their edge texels), rows of blocks in parallel.
pub fn compress(chain: &MipChain) -> MipChain {
    let format = chain.kind.compressed_format();
    let src_bpp = chain.format.block_bytes() as usize;
    let levels = chain
        .levels
        .iter()
        .enumerate()
        .map(|(i, level)| {
            let s = (chain.size >> i).max(1) as usize;
            // Pad to at least 4x4, as RGBA8 (the encoders' input).
            let p = s.max(4);
            let mut rgba = vec![0u8; p * p * 4];
            rgba.par_chunks_mut(p * 4).enumerate().for_each(|(y, row)| {
                let sy = y.min(s - 1);
                for x in 0..p {
                    let sx = x.min(s - 1);
                    let t = &level[(sy * s + sx) * src_bpp..][..src_bpp];
                    let px = if src_bpp == 2 {
                        [t[0], t[1], 0, 255]
                    } else {
                        [t[0], t[1], t[2], t[3]]
                    };
                    row[x * 4..x * 4 + 4].copy_from_slice(&px);
                }
            });
            let blocks_per_row = p / 4;
            let mut out = vec![0u8; blocks_per_row * blocks_per_row * 16];
            let settings = intel_tex_2::bc7::opaque_ultra_fast_settings();
            // Four block rows (16 texel rows) per task.
            let band = 4;
            out.par_chunks_mut(blocks_per_row * 16 * band)
                .enumerate()
                .for_each(|(b, dst)| {
                    let rows = dst.len() / (blocks_per_row * 16) * 4;
                    let src = &rgba[b * band * 4 * p * 4..][..rows * p * 4];
                    match format {
                        Format::Bc5Unorm => {
                            let rg: Vec<u8> =
                                src.chunks_exact(4).flat_map(|t| [t[0], t[1]]).collect();
                            let surface = intel_tex_2::RgSurface {
                                data: &rg,
                                width: p as u32,
                                height: rows as u32,
                                stride: p as u32 * 2,
                            };
                            intel_tex_2::bc5::compress_blocks_into(&surface, dst);
                        }
                        _ => {
                            let surface = intel_tex_2::RgbaSurface {
                                data: src,
                                width: p as u32,
                                height: rows as u32,
                                stride: p as u32 * 4,
                            };
                            intel_tex_2::bc7::compress_blocks_into(&settings, &surface, dst);
                        }
                    }
                });
            out
        })
        .collect();
    MipChain {
        kind: chain.kind,
        format,
        size: chain.size,
        levels,
    }
}

fn mip_chain(kind: MapKind, size: u32, level0: Vec<u8>, t: &Tables) -> MipChain {
    let format = kind.format();
    let bpp = format.block_bytes() as usize;
    let mut levels = vec![level0];
    let mut s = size as usize;
    while s > 1 {
        let prev = levels.last().unwrap();
        let h = s / 2;
        let mut next = vec![0u8; h * h * bpp];
        next.par_chunks_mut(h * bpp)
            .enumerate()
            .for_each(|(y, row)| {
                let r0 = &prev[(2 * y) * s * bpp..][..s * bpp];
                let r1 = &prev[(2 * y + 1) * s * bpp..][..s * bpp];
                for x in 0..h {
                    let px = |r: &[u8], dx: usize, c: usize| r[(2 * x + dx) * bpp + c];
                    match kind {
                        MapKind::Albedo => {
                            for c in 0..3 {
                                let sum = t.decode[px(r0, 0, c) as usize]
                                    + t.decode[px(r0, 1, c) as usize]
                                    + t.decode[px(r1, 0, c) as usize]
                                    + t.decode[px(r1, 1, c) as usize];
                                row[x * 4 + c] = t.encode(sum * 0.25);
                            }
                            row[x * 4 + 3] = 255;
                        }
                        MapKind::Orm => {
                            for c in 0..4 {
                                let sum = px(r0, 0, c) as u32
                                    + px(r0, 1, c) as u32
                                    + px(r1, 0, c) as u32
                                    + px(r1, 1, c) as u32;
                                row[x * 4 + c] = ((sum + 2) / 4) as u8;
                            }
                        }
                        MapKind::Normal => {
                            let mut v = [0f32; 3];
                            for (r, dx) in [(r0, 0), (r0, 1), (r1, 0), (r1, 1)] {
                                let nx = px(r, dx, 0) as f32 / 127.5 - 1.0;
                                let ny = px(r, dx, 1) as f32 / 127.5 - 1.0;
                                let nz = (1.0 - nx * nx - ny * ny).max(0.0).sqrt();
                                v[0] += nx;
                                v[1] += ny;
                                v[2] += nz;
                            }
                            let len = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt().max(1e-6);
                            row[x * 2] = unorm(v[0] / len * 0.5 + 0.5);
                            row[x * 2 + 1] = unorm(v[1] / len * 0.5 + 0.5);
                        }
                    }
                }
            });
        levels.push(next);
        s = h;
    }
    MipChain {
        kind,
        format,
        size,
        levels,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_complete() {
        let a = bake(Material::Bricks, 32, 7, &|_| {});
        let b = bake(Material::Bricks, 32, 7, &|_| {});
        for (x, y) in a.iter().zip(b.iter()) {
            assert_eq!(x.levels, y.levels);
            assert_eq!(x.levels.len(), 6);
            assert_eq!(x.levels[5].len(), x.format.block_bytes() as usize);
        }
        let c = bake(Material::Bricks, 32, 8, &|_| {});
        assert_ne!(
            a[0].levels[0], c[0].levels[0],
            "the seed changes the material"
        );
    }

    #[test]
    fn progress_adds_up() {
        for enc in [Encoding::Uncompressed, Encoding::Bc] {
            let done = std::sync::atomic::AtomicU64::new(0);
            bake_encoded(Material::Sand, 16, 1, enc, &|n| {
                done.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            });
            assert_eq!(done.into_inner(), work_units(16, enc));
        }
    }

    #[test]
    fn compressed_chain_sizes() {
        let maps = bake_encoded(Material::Tiles, 32, 1, Encoding::Bc, &|_| {});
        for m in &maps {
            assert!(m.format.is_compressed());
            assert_eq!(m.levels.len(), 6);
            for (i, l) in m.levels.iter().enumerate() {
                let s = 32 >> i;
                assert_eq!(l.len() as u64, m.format.level_bytes(s, s), "level {i}");
            }
        }
    }

    #[test]
    fn materials_differ() {
        let means: Vec<[u64; 3]> = crate::materials::ALL
            .iter()
            .map(|&m| {
                let maps = bake(m, 16, 1, &|_| {});
                let l = &maps[0].levels[0];
                let mut s = [0u64; 3];
                for p in l.chunks(4) {
                    for c in 0..3 {
                        s[c] += p[c] as u64;
                    }
                }
                s
            })
            .collect();
        for i in 0..means.len() {
            for j in i + 1..means.len() {
                assert_ne!(means[i], means[j], "materials {i} and {j} look the same");
            }
        }
    }
}
