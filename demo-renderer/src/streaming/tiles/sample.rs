//! The level a sample of a tiled map is clamped to, from the residency map:
//! the Rust twin of `tile_level` in `shaders/pbr_shading.glsl`, so that the
//! rule the shaders follow is property-tested against the tiles actually
//! resident. Pure arithmetic, no Vulkan.
//!
//! Each cell has two levels ([`CellLevels`]): `safe`, whose tiles are
//! resident over the cell's whole widened footprint (any sample in the cell
//! may use it), and `inner`, whose tiles are resident over the cell's own
//! texels only. A sample far enough from the cell's edges for its filter to
//! stay inside the cell, or whose near neighbours' inner levels are no finer,
//! may use the inner level: that spares the ring of tiles around a wanted
//! region that the widened footprint would need, where only a strip along
//! the region's edge samples them.
#![forbid(unsafe_code)]

use super::geometry::inner_reach;

/// Where the sampler has no minimum LOD, the levels of detail the shaders' LOD
/// bias (`tile_lift`) adds beyond the resident level, for a sampler whose own
/// computation falls short of the exact rule (`TILE_BIAS_MARGIN` in
/// `pbr_shading.glsl`: on llvmpipe 1/16 was not enough, 1/8 was).
pub const BIAS_MARGIN: f64 = 1.0 / 8.0;

/// A cell's two levels in the residency map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CellLevels {
    /// The finest level whose tiles, and every coarser level's, are resident
    /// over the cell's footprint widened by the filter's reach.
    pub safe: u8,
    /// The same over the cell's own texels only (never coarser than `safe`).
    pub inner: u8,
}

impl CellLevels {
    /// The word the shaders read: `safe` in bits 0-7, `inner` in bits 8-15.
    pub fn word(self) -> u32 {
        u32::from(self.safe) | (u32::from(self.inner) << 8)
    }

    /// The levels of a word written by [`Self::word`].
    pub fn from_word(w: u32) -> Self {
        Self {
            safe: (w & 0xff) as u8,
            inner: ((w >> 8) & 0xff) as u8,
        }
    }
}

/// The level a sample at texture coordinate `uv` of a material whose maps are
/// `size` texels at level 0 is clamped to, from that material's `g` x `g`
/// residency `words`, the filter's `margin` (texels of the level read) and
/// `lod_lo`, the lowest level of detail a conforming sampler may compute for
/// it (`lod_lower_bound` in the shaders).
///
/// The sampler then reads levels from the returned one up to one above the
/// floor of its largest possible LOD: at most two above `lod_lo` (a length
/// approximated by a sum of components instead of the largest one doubles,
/// and the anisotropy ratio may halve), or the clamp plus one and
/// [`BIAS_MARGIN`] (the LOD bias the shaders use where the sampler has no
/// minimum LOD lifts the lowest LOD to the clamp, the largest one a level
/// above).
/// Within [`inner_reach`] of `uv` at that floor it reads the cell's texels
/// and those of the neighbours it is near; the inner level holds if none of
/// those neighbours' inner levels is coarser. Repeated with the coarser
/// level while one is (the reach grows with the level), or the safe level
/// once the reach passes a cell.
pub fn tile_level(words: &[u32], g: u32, size: u32, margin: u32, uv: [f64; 2], lod_lo: f64) -> u32 {
    let g = g.max(1);
    let gf = f64::from(g);
    // The cell as the shaders' `tile_cell` finds it, and the position in it.
    let cellf = uv.map(|u| u.rem_euclid(1.0) * gf);
    let c = cellf.map(|v| (v.clamp(0.0, gf - 0.5)) as u32);
    // A cell outside `words` counts as holding nothing but the tail (the
    // coarsest level: the sampler clamps it to the last level).
    let absent = CellLevels {
        safe: u8::MAX,
        inner: u8::MAX,
    };
    let at = |x: u32, y: u32| {
        words
            .get((y * g + x) as usize)
            .map_or(absent, |&w| CellLevels::from_word(w))
    };
    let here = at(c[0], c[1]);
    let safe = u32::from(here.safe);
    let mut level = u32::from(here.inner);
    let f = [
        (cellf[0] - f64::from(c[0])).clamp(0.0, 1.0),
        (cellf[1] - f64::from(c[1])).clamp(0.0, 1.0),
    ];
    let cell_texels = f64::from(size) / gf;
    for _ in 0..4 {
        if level >= safe {
            return safe;
        }
        let lod_max = (lod_lo + 2.0).max(f64::from(level) + 1.0 + BIAS_MARGIN);
        let reach = inner_reach(margin, lod_max.max(0.0).floor() as u32) / cell_texels;
        if reach >= 1.0 {
            return safe;
        }
        let mut next = level;
        for dy in -1i32..=1 {
            for dx in -1i32..=1 {
                let near = |d: i32, f: f64| match d {
                    0 => true,
                    -1 => f < reach,
                    _ => f > 1.0 - reach,
                };
                if (dx, dy) == (0, 0) || !near(dx, f[0]) || !near(dy, f[1]) {
                    continue;
                }
                let nx = (c[0] as i32 + dx).rem_euclid(g as i32) as u32;
                let ny = (c[1] as i32 + dy).rem_euclid(g as i32) as u32;
                next = next.max(u32::from(at(nx, ny).inner));
            }
        }
        if next == level {
            return level;
        }
        level = next;
    }
    safe
}

#[cfg(test)]
mod tests {
    use super::super::geometry::{filter_margin, MapTiles};
    use super::super::policy::residency_map;
    use super::*;
    use proptest::prelude::*;

    fn layout(log_size: u32, log_tile: u32, aniso: u32) -> MapTiles {
        let size = 1u32 << log_size;
        let tile = 1u32 << log_tile.min(log_size);
        MapTiles {
            size,
            levels: log_size + 1,
            tile_w: tile,
            tile_h: tile,
            tail_first: (0..=log_size)
                .find(|&l| (size >> l) < tile)
                .unwrap_or(log_size + 1),
            margin: filter_margin(aniso),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// Every texel a sample may read at every level it may read, clamped
        /// by `tile_level`, lies in a resident tile: for random layouts,
        /// random resident sets, positions and levels of detail.
        #[test]
        fn a_clamped_sample_reads_only_resident_tiles(
            log_size in 6u32..12,
            log_tile in 3u32..8,
            log_g in 0u32..5,
            aniso in 0u32..17,
            density in 0.0f64..1.0,
            seed in any::<u64>(),
            samples in proptest::collection::vec((0.0f64..4.0, 0.0f64..4.0, -4.0f64..12.0), 32),
        ) {
            let m = layout(log_size, log_tile, aniso);
            prop_assume!(m.tail_first > 0);
            let g = (1u32 << log_g).min(m.size / m.tile_w.max(1)).max(1);
            // Random residency, denser at coarse levels (a map's usual shape).
            let mut rng = seed | 1;
            let mut next = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                (rng >> 11) as f64 / (1u64 << 53) as f64
            };
            let maps = vec![m; 3];
            let resident: Vec<Vec<bool>> = maps
                .iter()
                .map(|m| {
                    (0..m.tile_count())
                        .map(|i| {
                            let level = (0..m.tail_first)
                                .rev()
                                .find(|&l| m.level_start(l) <= i)
                                .unwrap_or(0);
                            next() < density.powf(1.0 / f64::from(level + 1))
                        })
                        .collect()
                })
                .collect();
            let words: Vec<u32> = residency_map(&maps, g, 0, &resident)
                .into_iter()
                .map(CellLevels::word)
                .collect();
            for (u, v, lod_lo) in samples {
                let level = tile_level(&words, g, m.size, m.margin, [u, v], lod_lo);
                let lod_max = (lod_lo + 2.0).max(f64::from(level) + 1.0 + BIAS_MARGIN);
                let top = lod_max.max(0.0).floor() as u32;
                for d in level..=(top + 1).min(m.tail_first.saturating_sub(1)) {
                    // The texels of level d within the filter's margin of
                    // (u, v), in texels of level d; level top + 1 is read only
                    // as the coarser level of a trilinear blend, half as far
                    // (`filter_margin`).
                    let side = f64::from(m.side(d));
                    let r = if d == top + 1 { m.margin / 2 + 1 } else { m.margin };
                    let span = |p: f64, tile: u32, count: u32| -> Vec<u32> {
                        let lo = (p * side - f64::from(r)).floor() as i64;
                        let hi = (p * side + f64::from(r)).floor() as i64;
                        let (a, b) = (lo.div_euclid(i64::from(tile)), hi.div_euclid(i64::from(tile)));
                        if b - a + 1 >= i64::from(count) {
                            return (0..count).collect();
                        }
                        (a..=b).map(|t| t.rem_euclid(i64::from(count)) as u32).collect()
                    };
                    let (gw, gh) = m.grid(d);
                    let tiles_x = span(u, m.tile_w, gw);
                    let tiles_y = span(v, m.tile_h, gh);
                    let tw = m.tile_w;
                    for &y in &tiles_y {
                        for &x in &tiles_x {
                            let ok = (0..3).all(|i| resident[i][m.index(d, x, y)]);
                            prop_assert!(
                                ok,
                                "uv ({u}, {v}) lod_lo {lod_lo}: clamped to {level}, reads level {d} \
                                 tile ({x}, {y}), not resident (g {g}, size {}, tile {tw})",
                                m.size
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_sample_inside_a_cell_uses_the_inner_level_and_one_at_the_edge_its_neighbours() {
        // g = 2: cell 0 inner 0, safe 2; its right neighbour inner 2.
        let words = [
            CellLevels { safe: 2, inner: 0 }.word(),
            CellLevels { safe: 2, inner: 2 }.word(),
            CellLevels { safe: 2, inner: 0 }.word(),
            CellLevels { safe: 2, inner: 0 }.word(),
        ];
        let (size, margin) = (1024, filter_margin(1));
        // Reach at LOD 0 (floor of lod_lo + 2 = 2): (4 + 2) * 4 = 24 texels of
        // a 512-texel cell: 0.047 of it.
        assert_eq!(tile_level(&words, 2, size, margin, [0.2, 0.2], 0.0), 0);
        // Near the right edge (cell 1 beside it, inner 2): level 2.
        assert_eq!(tile_level(&words, 2, size, margin, [0.49, 0.2], 0.0), 2);
        // Near the left edge: the neighbour there (wrapping) is cell 1 too.
        assert_eq!(tile_level(&words, 2, size, margin, [0.01, 0.2], 0.0), 2);
        // Near the bottom edge: cell 2, inner 0.
        assert_eq!(tile_level(&words, 2, size, margin, [0.2, 0.49], 0.0), 0);
        // A coarse LOD's reach passes the cell: the safe level.
        assert_eq!(tile_level(&words, 2, size, margin, [0.25, 0.25], 6.0), 2);
        // A map too short for the grid claims nothing finer than the tail.
        assert_eq!(
            tile_level(&words[..1], 2, size, margin, [0.75, 0.75], 0.0),
            255
        );
    }
}
