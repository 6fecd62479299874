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
    /// column `c` of a `g`-cell grid covers at `level`, widened by one tile on
    /// each side (what a filtered sample near the cell's edge may touch),
    /// wrapping around (the sampler repeats). Each column appears once.
    pub fn cell_tiles(&self, level: u32, g: u32, c: u32, vertical: bool) -> Vec<u32> {
        let side = self.side(level) as u64;
        let (tile, count) = if vertical {
            (self.tile_h.max(1) as u64, self.grid(level).1)
        } else {
            (self.tile_w.max(1) as u64, self.grid(level).0)
        };
        let g = g.max(1) as u64;
        let c = (c as u64).min(g - 1);
        let first = c * side / g / tile;
        let last = (((c + 1) * side).div_ceil(g)).saturating_sub(1) / tile;
        let span = last - first + 3;
        if span >= count as u64 {
            return (0..count).collect();
        }
        let count = count as i64;
        (first as i64 - 1..=last as i64 + 1)
            .map(|t| t.rem_euclid(count) as u32)
            .collect()
    }
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
    fn a_cell_covers_its_tile_and_the_neighbours_wrapping() {
        let m = bc8k();
        assert_eq!(m.cell_tiles(0, 32, 0, false), vec![31, 0, 1]);
        assert_eq!(m.cell_tiles(0, 32, 31, true), vec![30, 31, 0]);
        // Level 1: cells 4 and 5 both lie in tile 2.
        assert_eq!(m.cell_tiles(1, 32, 4, false), vec![1, 2, 3]);
        assert_eq!(m.cell_tiles(1, 32, 5, false), vec![1, 2, 3]);
        // Coarse levels: every tile, once.
        assert_eq!(m.cell_tiles(4, 32, 7, false), vec![0, 1]);
        assert_eq!(m.cell_tiles(5, 32, 7, false), vec![0]);
    }

    #[test]
    fn cells_follow_the_finest_granularity() {
        let rgba = MapTiles {
            size: 512,
            levels: 10,
            tile_w: 128,
            tile_h: 128,
            tail_first: 3,
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
