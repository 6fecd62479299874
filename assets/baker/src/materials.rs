//! The sixteen procedural materials. Each is a pure function from a texture
//! coordinate in the unit square to a [`Surface`]; every feature is periodic, so
//! the maps tile. Colours are sRGB-encoded values in [0, 1].

use crate::noise::{cells, fbm, hash, hash2, lerp, rand01, ridged, smoothstep, tri, value};

/// What a material looks like at one point.
#[derive(Clone, Copy, Debug, Default)]
pub struct Surface {
    /// Base colour, sRGB-encoded.
    pub albedo: [f32; 3],
    /// Height in [0, 1] (the normal map is derived from it).
    pub height: f32,
    /// Ambient occlusion in [0, 1].
    pub ao: f32,
    /// Perceptual roughness in [0, 1].
    pub roughness: f32,
    /// Metalness in [0, 1].
    pub metallic: f32,
}

/// The materials, in gallery order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Material {
    /// Red bricks in running bond with recessed mortar.
    Bricks,
    /// Glossy ceramic tiles, two glazes, with grout.
    Tiles,
    /// Brushed stainless steel.
    BrushedMetal,
    /// Oak floor planks with growth rings.
    Wood,
    /// Weathered rock.
    Rock,
    /// A woven fabric.
    Fabric,
    /// Hammered gold.
    HammeredGold,
    /// Copper with a green patina.
    CopperPatina,
    /// Concrete with pits.
    Concrete,
    /// Polished marble with veins.
    Marble,
    /// Pebbled leather.
    Leather,
    /// Iron with rust patches.
    RustedIron,
    /// Cobblestones.
    Cobblestone,
    /// Twill-woven carbon fibre.
    CarbonFibre,
    /// Hexagonal tiles.
    HexTiles,
    /// Wind-rippled sand.
    Sand,
}

/// Every material, in gallery order.
pub const ALL: [Material; 16] = [
    Material::Bricks,
    Material::Tiles,
    Material::BrushedMetal,
    Material::Wood,
    Material::Rock,
    Material::Fabric,
    Material::HammeredGold,
    Material::CopperPatina,
    Material::Concrete,
    Material::Marble,
    Material::Leather,
    Material::RustedIron,
    Material::Cobblestone,
    Material::CarbonFibre,
    Material::HexTiles,
    Material::Sand,
];

fn mix3(a: [f32; 3], b: [f32; 3], t: f32) -> [f32; 3] {
    [
        lerp(a[0], b[0], t),
        lerp(a[1], b[1], t),
        lerp(a[2], b[2], t),
    ]
}

fn scale3(a: [f32; 3], s: f32) -> [f32; 3] {
    [
        (a[0] * s).clamp(0.0, 1.0),
        (a[1] * s).clamp(0.0, 1.0),
        (a[2] * s).clamp(0.0, 1.0),
    ]
}

impl Material {
    /// A file-name-friendly name.
    pub fn name(self) -> &'static str {
        match self {
            Material::Bricks => "bricks",
            Material::Tiles => "tiles",
            Material::BrushedMetal => "brushed_metal",
            Material::Wood => "wood",
            Material::Rock => "rock",
            Material::Fabric => "fabric",
            Material::HammeredGold => "hammered_gold",
            Material::CopperPatina => "copper_patina",
            Material::Concrete => "concrete",
            Material::Marble => "marble",
            Material::Leather => "leather",
            Material::RustedIron => "rusted_iron",
            Material::Cobblestone => "cobblestone",
            Material::CarbonFibre => "carbon_fibre",
            Material::HexTiles => "hex_tiles",
            Material::Sand => "sand",
        }
    }

    /// How strongly height turns into normal slope (height units per uv unit).
    pub fn bump(self) -> f32 {
        match self {
            Material::Bricks | Material::Cobblestone => 0.06,
            Material::Tiles | Material::HexTiles => 0.03,
            Material::BrushedMetal | Material::CarbonFibre => 0.01,
            Material::Wood | Material::Marble => 0.015,
            Material::Rock => 0.12,
            Material::Fabric | Material::Leather => 0.02,
            Material::HammeredGold => 0.05,
            Material::CopperPatina | Material::RustedIron | Material::Concrete => 0.04,
            Material::Sand => 0.03,
        }
    }

    /// The surface at uv in [0, 1)², for a bake seeded with `seed`.
    pub fn sample(self, u: f32, v: f32, seed: u32) -> Surface {
        let s = seed.wrapping_mul(0x9e37_79b9) ^ hash(self as u32 + 1);
        match self {
            Material::Bricks => bricks(u, v, s),
            Material::Tiles => tiles(u, v, s),
            Material::BrushedMetal => brushed(u, v, s),
            Material::Wood => wood(u, v, s),
            Material::Rock => rock(u, v, s),
            Material::Fabric => fabric(u, v, s),
            Material::HammeredGold => hammered(u, v, s),
            Material::CopperPatina => patina(u, v, s),
            Material::Concrete => concrete(u, v, s),
            Material::Marble => marble(u, v, s),
            Material::Leather => leather(u, v, s),
            Material::RustedIron => rusted(u, v, s),
            Material::Cobblestone => cobble(u, v, s),
            Material::CarbonFibre => carbon(u, v, s),
            Material::HexTiles => hex(u, v, s),
            Material::Sand => sand(u, v, s),
        }
    }
}

/// Distance to the nearest edge of the unit cell around `x` (0 at edges, 0.5 at centre).
fn edge(x: f32) -> f32 {
    0.5 - (x - x.floor() - 0.5).abs()
}

fn bricks(u: f32, v: f32, s: u32) -> Surface {
    let rows = 8.0;
    let cols = 4.0;
    let y = v * rows;
    let row = y.floor();
    let x = u * cols + if row as i32 % 2 == 1 { 0.5 } else { 0.0 };
    let brick = hash2(x.floor() as i32 % cols as i32, row as i32, s);
    let mortar = 0.06;
    let ex = edge(x) / cols * rows; // in row units
    let ey = edge(y);
    let d = ex.min(ey);
    let inside = smoothstep(mortar * 0.5, mortar, d);
    let grain = fbm(u, v, 32, 4, s ^ 1);
    let tone = 0.75 + 0.4 * rand01(brick);
    let brick_col = scale3(
        mix3([0.55, 0.22, 0.15], [0.68, 0.36, 0.24], rand01(hash(brick))),
        tone * (0.85 + 0.3 * grain),
    );
    let mortar_col = scale3([0.62, 0.6, 0.56], 0.8 + 0.3 * grain);
    Surface {
        albedo: mix3(mortar_col, brick_col, inside),
        height: inside * (0.8 + 0.2 * grain) + (1.0 - inside) * 0.3 * grain,
        ao: lerp(0.55, 1.0, inside),
        roughness: lerp(0.95, 0.75 + 0.2 * grain, inside),
        metallic: 0.0,
    }
}

fn tiles(u: f32, v: f32, s: u32) -> Surface {
    let n = 4.0;
    let (x, y) = (u * n, v * n);
    let id = hash2(x.floor() as i32, y.floor() as i32, s);
    let d = edge(x).min(edge(y));
    let inside = smoothstep(0.02, 0.05, d);
    let bevel = smoothstep(0.02, 0.12, d);
    let white = ((x.floor() + y.floor()) as i32) % 2 == 0;
    let glaze = if white {
        [0.88, 0.88, 0.84]
    } else {
        [0.12, 0.32, 0.55]
    };
    let speck = value(u * 256.0, v * 256.0, 256, s ^ 5);
    let glaze = scale3(glaze, 0.95 + 0.1 * rand01(id) - 0.05 * speck);
    let grout = [0.45, 0.44, 0.42];
    Surface {
        albedo: mix3(grout, glaze, inside),
        height: 0.2 + 0.8 * bevel,
        ao: lerp(0.6, 1.0, inside),
        roughness: lerp(0.9, 0.08 + 0.1 * speck, inside),
        metallic: 0.0,
    }
}

fn brushed(u: f32, v: f32, s: u32) -> Surface {
    // Streaks: noise stretched 1:256 along u.
    let streak =
        value(u * 4.0, v * 1024.0, 1024, s) * 0.6 + value(u * 16.0, v * 512.0, 512, s ^ 2) * 0.4;
    let blotch = fbm(u, v, 4, 4, s ^ 3);
    let c = 0.62 + 0.12 * streak + 0.05 * blotch;
    Surface {
        albedo: [c, c, c * 1.02],
        height: streak,
        ao: 1.0,
        roughness: 0.22 + 0.2 * streak + 0.1 * blotch,
        metallic: 1.0,
    }
}

fn wood(u: f32, v: f32, s: u32) -> Surface {
    let planks = 6.0;
    let y = v * planks;
    let plank = y.floor() as i32;
    let ph = hash2(plank, 0, s);
    let len = 1.0; // one plank per tile width, offset per row
    let x = u / len + rand01(ph);
    let joint = edge(x).min(edge(y) / planks * 4.0);
    let gap = smoothstep(0.004, 0.01, joint);
    let warp = fbm(u, v, 4, 5, s ^ 7);
    let rings = tri((y - y.floor()) * 9.0 + warp * 6.0 + rand01(hash(ph)) * 3.0);
    let fibre = value(u * 512.0, v * 16.0 * planks, 16 * planks as i32, s ^ 9);
    let light = [0.72, 0.52, 0.32];
    let dark = [0.45, 0.27, 0.14];
    let tone = 0.85 + 0.3 * rand01(hash(ph ^ 77));
    Surface {
        albedo: scale3(
            mix3(dark, light, rings * 0.7 + fibre * 0.3),
            tone * lerp(0.3, 1.0, gap),
        ),
        height: gap * (0.9 + 0.1 * fibre),
        ao: lerp(0.4, 1.0, gap),
        roughness: 0.45 + 0.25 * fibre - 0.1 * rings,
        metallic: 0.0,
    }
}

fn rock(u: f32, v: f32, s: u32) -> Surface {
    let r = ridged(u, v, 4, 7, s);
    let b = fbm(u, v, 8, 5, s ^ 11);
    let strata = tri(v * 12.0 + b * 2.0);
    let col = mix3([0.36, 0.33, 0.3], [0.6, 0.55, 0.48], r * 0.7 + strata * 0.3);
    Surface {
        albedo: scale3(col, 0.8 + 0.3 * b),
        height: r * 0.8 + b * 0.2,
        ao: lerp(0.5, 1.0, r),
        roughness: 0.8 + 0.15 * b,
        metallic: 0.0,
    }
}

fn fabric(u: f32, v: f32, s: u32) -> Surface {
    let n = 96.0;
    let (x, y) = (u * n, v * n);
    let over = ((x.floor() + y.floor()) as i32) % 2 == 0;
    let warp_thread = tri(x * 1.0 + 0.5);
    let weft_thread = tri(y * 1.0 + 0.5);
    let h = if over {
        0.5 + 0.5 * (1.0 - (2.0 * (y - y.floor()) - 1.0).abs()) * warp_thread
    } else {
        0.5 + 0.5 * (1.0 - (2.0 * (x - x.floor()) - 1.0).abs()) * weft_thread
    };
    let fuzz = value(u * 1024.0, v * 1024.0, 1024, s);
    let dye = fbm(u, v, 3, 3, s ^ 13);
    let base = if over {
        [0.55, 0.08, 0.12]
    } else {
        [0.45, 0.06, 0.1]
    };
    Surface {
        albedo: scale3(base, 0.8 + 0.3 * h + 0.1 * dye - 0.1 * fuzz),
        height: h * 0.9 + 0.1 * fuzz,
        ao: lerp(0.5, 1.0, h),
        roughness: 0.9,
        metallic: 0.0,
    }
}

fn hammered(u: f32, v: f32, s: u32) -> Surface {
    let c = cells(u, v, 24, 0.9, s);
    let dimple = (c.f1 * c.f1).min(1.0);
    let grime = fbm(u, v, 8, 4, s ^ 17);
    Surface {
        albedo: scale3([1.0, 0.78, 0.36], 0.9 + 0.1 * grime),
        height: dimple,
        ao: 1.0,
        roughness: 0.18 + 0.25 * grime * grime,
        metallic: 1.0,
    }
}

fn patina(u: f32, v: f32, s: u32) -> Surface {
    let n = fbm(u, v, 6, 6, s);
    let cover = smoothstep(0.48, 0.56, n);
    let crust = value(u * 256.0, v * 256.0, 256, s ^ 19);
    let copper = [0.95, 0.62, 0.48];
    let green = mix3([0.32, 0.62, 0.52], [0.5, 0.75, 0.65], crust);
    Surface {
        albedo: mix3(copper, green, cover),
        height: cover * (0.6 + 0.4 * crust),
        ao: lerp(1.0, 0.8, cover * (1.0 - crust)),
        roughness: lerp(0.3, 0.85, cover),
        metallic: 1.0 - cover,
    }
}

fn concrete(u: f32, v: f32, s: u32) -> Surface {
    let n = fbm(u, v, 16, 6, s);
    let pits = cells(u, v, 48, 1.0, s ^ 23);
    let pit = 1.0 - smoothstep(0.05, 0.15, pits.f1) * 1.0;
    let pit = pit * (rand01(pits.id) > 0.6) as i32 as f32;
    let c = 0.5 + 0.2 * n - 0.15 * pit;
    Surface {
        albedo: [c, c * 0.98, c * 0.95],
        height: 0.7 + 0.3 * n - 0.6 * pit,
        ao: 1.0 - 0.5 * pit,
        roughness: 0.85 + 0.1 * n,
        metallic: 0.0,
    }
}

fn marble(u: f32, v: f32, s: u32) -> Surface {
    let w = fbm(u, v, 4, 6, s);
    let vein = tri(u * 3.0 + v * 2.0 + w * 5.0);
    let vein = smoothstep(0.9, 1.0, vein);
    let fine = fbm(u, v, 32, 3, s ^ 29);
    let base = scale3([0.92, 0.91, 0.88], 0.95 + 0.05 * fine);
    Surface {
        albedo: mix3(base, [0.25, 0.27, 0.3], vein * 0.85),
        height: 0.5 + 0.05 * fine,
        ao: 1.0,
        roughness: 0.06 + 0.08 * vein,
        metallic: 0.0,
    }
}

fn leather(u: f32, v: f32, s: u32) -> Surface {
    let c = cells(u, v, 64, 1.0, s);
    let crease = smoothstep(0.0, 0.12, c.f2 - c.f1);
    let n = fbm(u, v, 8, 4, s ^ 31);
    Surface {
        albedo: scale3([0.38, 0.2, 0.11], 0.75 + 0.3 * crease + 0.2 * n),
        height: crease * (0.8 + 0.2 * rand01(c.id)),
        ao: lerp(0.6, 1.0, crease),
        roughness: 0.55 + 0.2 * (1.0 - crease),
        metallic: 0.0,
    }
}

fn rusted(u: f32, v: f32, s: u32) -> Surface {
    let n = fbm(u, v, 5, 7, s);
    let rust = smoothstep(0.45, 0.6, n);
    let flake = value(u * 512.0, v * 512.0, 512, s ^ 37);
    let iron = [0.5, 0.5, 0.52];
    let rust_col = mix3([0.45, 0.18, 0.06], [0.7, 0.35, 0.12], flake);
    Surface {
        albedo: mix3(iron, rust_col, rust),
        height: rust * (0.5 + 0.5 * flake),
        ao: lerp(1.0, 0.75, rust * (1.0 - flake)),
        roughness: lerp(0.35, 0.9, rust),
        metallic: 1.0 - rust,
    }
}

fn cobble(u: f32, v: f32, s: u32) -> Surface {
    let c = cells(u, v, 10, 0.8, s);
    let e = c.f2 - c.f1;
    let stone = smoothstep(0.02, 0.25, e);
    let dome = stone.sqrt();
    let n = fbm(u, v, 32, 4, s ^ 41);
    let tone = 0.7 + 0.4 * rand01(c.id);
    let col = scale3(
        mix3([0.45, 0.43, 0.4], [0.55, 0.5, 0.45], rand01(hash(c.id))),
        tone * (0.85 + 0.2 * n),
    );
    Surface {
        albedo: mix3([0.25, 0.22, 0.18], col, smoothstep(0.0, 0.1, e)),
        height: dome * (0.9 + 0.1 * n),
        ao: lerp(0.35, 1.0, stone),
        roughness: 0.6 + 0.3 * n,
        metallic: 0.0,
    }
}

fn carbon(u: f32, v: f32, s: u32) -> Surface {
    let n = 64.0;
    let (x, y) = (u * n, v * n);
    // 2x2 twill: the over/under pattern shifts one tow per row.
    let phase = ((x.floor() as i32 + y.floor() as i32).rem_euclid(4)) < 2;
    let along = if phase { x - x.floor() } else { y - y.floor() };
    let across = if phase { y - y.floor() } else { x - x.floor() };
    let tow = 1.0 - (2.0 * across - 1.0).powi(2);
    let sheen = value(u * 8.0, v * 8.0, 8, s);
    let c = 0.04 + 0.05 * tow + 0.02 * along;
    Surface {
        albedo: [c, c, c * 1.1],
        height: tow * 0.8 + 0.2 * (if phase { 1.0 } else { 0.0 }),
        ao: lerp(0.7, 1.0, tow),
        roughness: 0.22 + 0.1 * sheen,
        metallic: 0.0,
    }
}

fn hex(u: f32, v: f32, s: u32) -> Surface {
    // A hexagonal lattice tiling the unit square: 8 columns, rows of height sqrt(3)/2
    // squeezed so that 8 rows of pairs fit (slightly stretched hexagons).
    let cols = 8.0;
    let rows = 8.0;
    let (x, y) = (u * cols, v * rows * 2.0);
    let mut best = (f32::MAX, 0i32, 0i32);
    let yi = (y / 2.0).floor() as i32;
    let xi = x.floor() as i32;
    for dy in -1..=1 {
        for dx in -1..=1 {
            for k in 0..2 {
                let cy = yi + dy;
                let cx = xi + dx;
                let px = cx as f32 + 0.5 * k as f32;
                let py = cy as f32 * 2.0 + k as f32;
                let d = ((px - x) * (px - x) + (py - y) * (py - y) * 0.33).sqrt();
                if d < best.0 {
                    best = (
                        d,
                        (cx * 2 + k).rem_euclid((cols as i32) * 2),
                        cy.rem_euclid(rows as i32),
                    );
                }
            }
        }
    }
    let id = hash2(best.1, best.2, s);
    let inside = 1.0 - smoothstep(0.46, 0.5, best.0);
    let glaze = mix3([0.12, 0.4, 0.25], [0.3, 0.6, 0.35], rand01(id));
    let speck = value(u * 128.0, v * 128.0, 128, s ^ 43);
    Surface {
        albedo: mix3([0.3, 0.3, 0.28], scale3(glaze, 0.9 + 0.2 * speck), inside),
        height: 0.2 + 0.8 * (1.0 - smoothstep(0.3, 0.5, best.0)),
        ao: lerp(0.6, 1.0, inside),
        roughness: lerp(0.9, 0.2 + 0.15 * speck, inside),
        metallic: 0.0,
    }
}

fn sand(u: f32, v: f32, s: u32) -> Surface {
    let w = fbm(u, v, 3, 4, s);
    let ripple = tri(v * 24.0 + w * 4.0);
    let grain = value(u * 1024.0, v * 1024.0, 1024, s ^ 47);
    let col = mix3(
        [0.76, 0.64, 0.45],
        [0.86, 0.76, 0.56],
        ripple * 0.6 + grain * 0.4,
    );
    Surface {
        albedo: col,
        height: ripple * 0.8 + grain * 0.2,
        ao: lerp(0.8, 1.0, ripple),
        roughness: 0.9,
        metallic: 0.0,
    }
}
