//! Deterministic, tileable noise: integer hashing, value noise, fBm and
//! cellular (Voronoi) noise. Every function is periodic over the unit square
//! when given an integer `period`, so baked maps tile seamlessly.

/// A 32-bit integer hash (lowbias32 by Chris Wellons' hash prospector).
#[inline]
pub fn hash(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// Hash of a lattice point and a seed.
#[inline]
pub fn hash2(x: i32, y: i32, seed: u32) -> u32 {
    hash((x as u32) ^ hash((y as u32) ^ hash(seed)))
}

/// A hash mapped to [0, 1).
#[inline]
pub fn rand01(h: u32) -> f32 {
    (h >> 8) as f32 * (1.0 / 16_777_216.0)
}

#[inline]
fn wrap(i: i32, period: i32) -> i32 {
    i.rem_euclid(period)
}

#[inline]
fn smooth(t: f32) -> f32 {
    t * t * t * (t * (t * 6.0 - 15.0) + 10.0)
}

/// Linear interpolation.
#[inline]
pub fn lerp(a: f32, b: f32, t: f32) -> f32 {
    a + (b - a) * t
}

/// Hermite smoothstep.
#[inline]
pub fn smoothstep(e0: f32, e1: f32, x: f32) -> f32 {
    let t = ((x - e0) / (e1 - e0)).clamp(0.0, 1.0);
    t * t * (3.0 - 2.0 * t)
}

/// A triangle wave in [0, 1] with period 1 (0 at integers, 1 at halves).
#[inline]
pub fn tri(x: f32) -> f32 {
    1.0 - (x - x.floor() - 0.5).abs() * 2.0
}

/// Value noise in [0, 1] at `(x, y)` in lattice units, periodic with `period` cells.
pub fn value(x: f32, y: f32, period: i32, seed: u32) -> f32 {
    let (xf, yf) = (x.floor(), y.floor());
    let (xi, yi) = (xf as i32, yf as i32);
    let (tx, ty) = (smooth(x - xf), smooth(y - yf));
    let c = |dx: i32, dy: i32| rand01(hash2(wrap(xi + dx, period), wrap(yi + dy, period), seed));
    let a = lerp(c(0, 0), c(1, 0), tx);
    let b = lerp(c(0, 1), c(1, 1), tx);
    lerp(a, b, ty)
}

/// Fractal sum of `octaves` of value noise at uv in [0,1), base frequency `freq`
/// cells per unit; the result is in [0, 1].
pub fn fbm(u: f32, v: f32, freq: i32, octaves: u32, seed: u32) -> f32 {
    let mut sum = 0.0;
    let mut amp = 0.5;
    let mut norm = 0.0;
    let mut f = freq;
    for o in 0..octaves {
        sum += amp * value(u * f as f32, v * f as f32, f, seed.wrapping_add(o * 7919));
        norm += amp;
        amp *= 0.5;
        f *= 2;
    }
    sum / norm
}

/// Ridged fractal noise in [0, 1] (sharp crests), as fbm.
pub fn ridged(u: f32, v: f32, freq: i32, octaves: u32, seed: u32) -> f32 {
    let mut sum = 0.0;
    let mut amp = 0.5;
    let mut norm = 0.0;
    let mut f = freq;
    for o in 0..octaves {
        let n = value(
            u * f as f32,
            v * f as f32,
            f,
            seed.wrapping_add(o * 104_729),
        );
        sum += amp * (1.0 - (n * 2.0 - 1.0).abs());
        norm += amp;
        amp *= 0.5;
        f *= 2;
    }
    sum / norm
}

/// The result of [`cells`].
#[derive(Clone, Copy, Debug)]
pub struct Cell {
    /// Distance to the nearest feature point (cell units).
    pub f1: f32,
    /// Distance to the second nearest.
    pub f2: f32,
    /// A hash identifying the nearest cell.
    pub id: u32,
}

/// Cellular noise with one jittered point per cell, periodic with `period` cells
/// over the unit square; `jitter` in [0, 1].
pub fn cells(u: f32, v: f32, period: i32, jitter: f32, seed: u32) -> Cell {
    let (x, y) = (u * period as f32, v * period as f32);
    let (xi, yi) = (x.floor() as i32, y.floor() as i32);
    let mut best = Cell {
        f1: f32::MAX,
        f2: f32::MAX,
        id: 0,
    };
    for dy in -1..=1 {
        for dx in -1..=1 {
            let (cx, cy) = (xi + dx, yi + dy);
            let h = hash2(wrap(cx, period), wrap(cy, period), seed);
            let px = cx as f32 + 0.5 + (rand01(h) - 0.5) * jitter;
            let py = cy as f32 + 0.5 + (rand01(hash(h)) - 0.5) * jitter;
            let d = ((px - x) * (px - x) + (py - y) * (py - y)).sqrt();
            if d < best.f1 {
                best.f2 = best.f1;
                best.f1 = d;
                best.id = h;
            } else if d < best.f2 {
                best.f2 = d;
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_noise_tiles() {
        for i in 0..20 {
            let y = i as f32 * 0.37;
            assert!((value(0.0, y, 8, 3) - value(8.0, y, 8, 3)).abs() < 1e-6);
        }
        let a = fbm(0.0, 0.3, 4, 5, 9);
        let b = fbm(1.0, 0.3, 4, 5, 9);
        assert!((a - b).abs() < 1e-5, "{a} {b}");
    }

    #[test]
    fn ranges() {
        for i in 0..1000 {
            let u = i as f32 / 1000.0;
            let n = fbm(u, 1.0 - u, 3, 6, 1);
            assert!((0.0..=1.0).contains(&n));
            let c = cells(u, u * 0.5, 6, 1.0, 2);
            assert!(c.f1 <= c.f2);
        }
    }
}
