//! Where a sparse texture's tiles are: per level, a grid of tiles of the
//! image's sparse granularity (one memory page each), and the levels of the
//! *mip tail*, bound whole. A material's *cells* split its texture-coordinate
//! square into `g x g` parts; feedback and the residency map are per cell.
//! Pure arithmetic, no Vulkan.
#![forbid(unsafe_code)]

/// One map's tile layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapTiles {
    /// Level 0's side in texels (square maps).
    pub size: u32,
    /// Levels of the image.
    pub levels: u32,
    /// A tile's width in texels (the sparse image granularity).
    pub tile_w: u32,
    /// A tile's height in texels.
    pub tile_h: u32,
    /// The first level of the mip tail: levels `tail_first..levels` are bound
    /// whole, always; levels below it are bound tile by tile.
    pub tail_first: u32,
    /// Texels, at any level, that a filtered sample may read beyond its
    /// position ([`filter_margin`]): a cell's footprint is its texels widened
    /// by this much ([`MapTiles::cell_tiles`]).
    pub margin: u32,
}

/// The texels around a sample's position, at the level it reads, that the
/// sampler's filter may reach with anisotropy up to `max_anisotropy` (0 or 1:
/// off), with a factor of two to spare. Where a level is picked by Vulkan's
/// rule, the footprint's shorter axis is at most two texels of the level read
/// and its longer axis at most `max_anisotropy` times that (the probes along
/// it), each probe a bilinear 2 x 2: `max_anisotropy + 1` texels either side.
/// A level clamped coarser (the residency map's minimum LOD or bias) only
/// shrinks the footprint in that level's texels, and the coarser level of a
/// trilinear blend reads half as many of its own, plus its bilinear texel:
/// `margin / 2 + 1`.
pub fn filter_margin(max_anisotropy: u32) -> u32 {
    2 * (max_anisotropy.clamp(1, 64) + 1)
}

/// One tile: map index, level, and position in the level's grid. Ordered by
/// map, level, row, then column (the field order): sorted, a row's adjacent
/// tiles are neighbours, which the reads and binds by runs rely on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TileRef {
    /// The texture (three per material: albedo, normal, ORM).
    pub map: u32,
    /// The level (below the map's `tail_first`).
    pub level: u32,
    /// Row in the level's tile grid.
    pub y: u32,
    /// Column in the level's tile grid.
    pub x: u32,
}

impl MapTiles {
    /// Level `level`'s side in texels.
    pub fn side(&self, level: u32) -> u32 {
        (self.size >> level.min(31)).max(1)
    }

    /// Level `level`'s tile grid: columns and rows.
    pub fn grid(&self, level: u32) -> (u32, u32) {
        let s = self.side(level);
        (
            s.div_ceil(self.tile_w.max(1)),
            s.div_ceil(self.tile_h.max(1)),
        )
    }

    /// Tiles of levels below the tail.
    pub fn tile_count(&self) -> usize {
        (0..self.tail_first)
            .map(|l| {
                let (w, h) = self.grid(l);
                w as usize * h as usize
            })
            .sum()
    }

    /// The index of level `level`'s first tile among [`Self::tile_count`].
    pub fn level_start(&self, level: u32) -> usize {
        (0..level.min(self.tail_first))
            .map(|l| {
                let (w, h) = self.grid(l);
                w as usize * h as usize
            })
            .sum()
    }

    /// The flat index of tile (`level`, `x`, `y`).
    pub fn index(&self, level: u32, x: u32, y: u32) -> usize {
        let (w, _) = self.grid(level);
        self.level_start(level) + y as usize * w as usize + x as usize
    }

    /// The tile columns (or rows: the grid is square in cells) that cell
    /// column `c` of a `g`-cell grid covers at `level`: the tiles its texels
    /// lie in, widened by [`Self::margin`] texels on each side (what a
    /// filtered sample in the cell may read), wrapping around (the sampler
    /// repeats). Each column appears once.
    pub fn cell_tiles(&self, level: u32, g: u32, c: u32, vertical: bool) -> Vec<u32> {
        self.cell_span(level, g, c, vertical, self.margin)
    }

    /// The tile columns (or rows) that cell column `c`'s own texels lie in at
    /// `level`, not widened: what a sample whose filter stays inside the cell
    /// reads (the residency map's *inner* level, [`inner_reach`]).
    pub fn cell_own_tiles(&self, level: u32, g: u32, c: u32, vertical: bool) -> Vec<u32> {
        self.cell_span(level, g, c, vertical, 0)
    }

    /// Whether a cell wanting `level` is drawn at its inner level (its own
    /// tiles and its near neighbours'): when even the coarsest reach the
    /// shaders allow at that level ([`inner_reach`] at `level + 2`, the LOD
    /// of a conforming sampler being at most two levels above its lower
    /// bound) is less than a cell. Coarser cells are drawn with their whole
    /// widened footprint.
    pub fn inner_at(&self, level: u32, g: u32) -> bool {
        let cell = f64::from(self.size) / f64::from(g.max(1));
        inner_reach(self.margin, level.saturating_add(2)) < cell
    }

    fn cell_span(&self, level: u32, g: u32, c: u32, vertical: bool, margin: u32) -> Vec<u32> {
        let side = i64::from(self.side(level));
        let (tile, count) = if vertical {
            (i64::from(self.tile_h.max(1)), self.grid(level).1)
        } else {
            (i64::from(self.tile_w.max(1)), self.grid(level).0)
        };
        let g = i64::from(g.max(1));
        let c = i64::from(c).min(g - 1);
        let margin = i64::from(margin);
        // The products of two u32 values may pass i64 near u32::MAX; the
        // quotients are texel positions, within a side of the level.
        let (c128, side128, g128) = (i128::from(c), i128::from(side), i128::from(g));
        let first_texel = (c128 * side128 / g128) as i64 - margin;
        let last_texel = (((c128 + 1) * side128 + g128 - 1) / g128) as i64 - 1 + margin;
        let first = first_texel.div_euclid(tile);
        let last = last_texel.div_euclid(tile);
        if last - first + 1 >= i64::from(count) {
            return (0..count).collect();
        }
        let count = i64::from(count);
        (first..=last).map(|t| t.rem_euclid(count) as u32).collect()
    }
}

/// How far, in level-0 texels, a sample's filter may read from its position
/// when its level of detail is below `floor_lod + 1` (`floor_lod` = the floor
/// of the largest LOD it may have): `margin` texels of level `floor_lod`,
/// and `margin / 2 + 1` of the next coarser level that trilinear filtering
/// blends in, so `(margin + 2) * 2^floor_lod`. The shaders' `tile_level`
/// uses the same bound ([`super::sample::tile_level`] mirrors it).
pub fn inner_reach(margin: u32, floor_lod: u32) -> f64 {
    f64::from(margin + 2) * f64::from(floor_lod.min(60)).exp2()
}

/// Cells per side of every material's grid: level 0's tiles of the smallest
/// granularity, at most `max` (so feedback and maps stay small), at least 1.
pub fn cells_per_side(maps: &[MapTiles], max: u32) -> u32 {
    maps.iter()
        .map(|m| m.size / m.tile_w.min(m.tile_h).max(1))
        .max()
        .unwrap_or(1)
        .clamp(1, max.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bc8k() -> MapTiles {
        MapTiles {
            size: 8192,
            levels: 14,
            tile_w: 256,
            tile_h: 256,
            tail_first: 6,
            margin: filter_margin(4),
        }
    }

    #[test]
    fn grid_and_indices() {
        let m = bc8k();
        assert_eq!(m.grid(0), (32, 32));
        assert_eq!(m.grid(5), (1, 1));
        assert_eq!(m.tile_count(), 1024 + 256 + 64 + 16 + 4 + 1);
        assert_eq!(m.index(1, 0, 0), 1024);
        assert_eq!(m.index(5, 0, 0), m.tile_count() - 1);
    }

    #[test]
    fn a_cell_covers_its_tiles_widened_by_the_margin_wrapping() {
        let m = bc8k();
        // Level 0: a cell is a tile; the margin reaches both neighbours.
        assert_eq!(m.cell_tiles(0, 32, 0, false), vec![31, 0, 1]);
        assert_eq!(m.cell_tiles(0, 32, 31, true), vec![30, 31, 0]);
        // Level 1: cells 4 and 5 are the two halves of tile 2.
        assert_eq!(m.cell_tiles(1, 32, 4, false), vec![1, 2]);
        assert_eq!(m.cell_tiles(1, 32, 5, false), vec![2, 3]);
        // Level 2: cells 8..12 lie in tile 2; the inner two stay in it.
        assert_eq!(m.cell_tiles(2, 32, 8, false), vec![1, 2]);
        assert_eq!(m.cell_tiles(2, 32, 9, false), vec![2]);
        assert_eq!(m.cell_tiles(2, 32, 10, false), vec![2]);
        assert_eq!(m.cell_tiles(2, 32, 11, false), vec![2, 3]);
        // Coarse levels: every tile, once.
        assert_eq!(m.cell_tiles(4, 32, 7, false), vec![0]);
        assert_eq!(m.cell_tiles(4, 32, 15, false), vec![0, 1]);
        assert_eq!(m.cell_tiles(5, 32, 7, false), vec![0]);
        // Extreme sizes and grids: no overflow.
        let huge = MapTiles {
            size: u32::MAX,
            levels: 32,
            tile_w: 1,
            tile_h: 1,
            tail_first: 1,
            margin: 0,
        };
        assert_eq!(
            huge.cell_tiles(0, u32::MAX, u32::MAX - 1, false),
            vec![u32::MAX - 1]
        );
        // Without a margin, only the cell's own tile.
        let bare = MapTiles { margin: 0, ..m };
        assert_eq!(bare.cell_tiles(0, 32, 0, false), vec![0]);
    }

    proptest::proptest! {
        /// Every texel within the margin of a position in a cell lies in a
        /// tile of the cell's footprint, at every level below the tail.
        #[test]
        fn the_footprint_holds_every_texel_a_sample_in_the_cell_may_read(
            log_size in 4u32..14,
            log_tile in 2u32..9,
            log_g in 0u32..6,
            aniso in 0u32..17,
            level_pick in 0u32..16,
            cell_pick in 0u32..1024,
            within in 0.0f64..1.0,
            reach in -1.0f64..1.0,
            vertical in proptest::bool::ANY,
        ) {
            let size = 1u32 << log_size;
            let tile = 1u32 << log_tile.min(log_size);
            let m = MapTiles {
                size,
                levels: log_size + 1,
                tile_w: tile,
                tile_h: tile,
                tail_first: (0..=log_size).find(|&l| (size >> l) < tile).unwrap_or(log_size + 1),
                margin: filter_margin(aniso),
            };
            let g = 1u32 << log_g;
            proptest::prop_assume!(m.tail_first > 0);
            let level = level_pick % m.tail_first;
            let c = cell_pick % g;
            let side = f64::from(m.side(level));
            // A position in cell `c` (in the level's texels), and a texel the
            // filter reads up to the margin away, wrapped.
            let pos = (f64::from(c) + within) / f64::from(g) * side;
            let texel = (pos + reach * f64::from(m.margin)).floor().rem_euclid(side) as u32;
            let t = texel / tile;
            proptest::prop_assert!(
                m.cell_tiles(level, g, c, vertical).contains(&t),
                "cell {c} of {g} at level {level}: texel {texel} (tile {t}) from {pos}"
            );
        }
    }

    #[test]
    fn cells_follow_the_finest_granularity() {
        let rgba = MapTiles {
            size: 512,
            levels: 10,
            tile_w: 128,
            tile_h: 128,
            tail_first: 3,
            margin: 0,
        };
        let rg = MapTiles {
            tile_w: 256,
            tile_h: 128,
            ..rgba
        };
        assert_eq!(cells_per_side(&[rgba, rg], 32), 4);
        assert_eq!(cells_per_side(&[bc8k()], 32), 32);
        assert_eq!(cells_per_side(&[bc8k()], 16), 16);
    }
}
