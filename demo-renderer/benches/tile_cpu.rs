//! CPU time of the tile streamer's per-frame work, measured (a benchmark, not
//! a test: it asserts nothing):
//!
//! - one tile plan (`streaming::tiles::policy::plan`) for 16 and 64
//!   materials of 8K BC7-like maps (256-texel tiles, 32 x 32 cells): "dense"
//!   (every material seen, an eighth of the tiles resident) and "gallery" (as
//!   a 4K frame of the path: 4 materials seen, 8 in the look-ahead, a
//!   sixteenth of the tiles resident);
//! - a frame's warm look-ahead (`AheadCells::cast`, four coming views) along
//!   the gallery's path at 4K, for 16 and 64 materials.
//!
//! `cargo bench -p demo-renderer --bench tile_cpu` (a release build).

use std::time::Instant;

use demo_renderer::scene::Gallery;
use demo_renderer::streaming::estimate::View;
use demo_renderer::streaming::tiles::geometry::{filter_margin, MapTiles};
use demo_renderer::streaming::tiles::lookahead::{AheadCells, WARM_RAYS};
use demo_renderer::streaming::tiles::policy::{plan, TileInput, MAPS_PER_MATERIAL, UNSEEN};

fn main() {
    plan_time();
    cast_time();
}

/// One plan for 64 materials of 8K maps, a third of the cells seen, half the
/// budget's tiles resident.
fn plan_time() {
    let size = 8192u32;
    let tile = 256u32;
    let levels = 32 - size.leading_zeros();
    let map = MapTiles {
        size,
        levels,
        tile_w: tile,
        tile_h: tile,
        tail_first: (0..levels).find(|&l| (size >> l) < tile).unwrap_or(levels),
        margin: filter_margin(4),
    };
    for materials in [16usize, 64] {
        let maps = vec![map; materials * MAPS_PER_MATERIAL];
        let g = 32u32;
        let cells = (g * g) as usize;
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        // One cell in `one_in` wanted, at a level 0..4, in the first
        // `seen_materials` materials.
        let seen = |next: &mut dyn FnMut() -> u64, one_in: u64, seen_materials: usize| -> Vec<u8> {
            (0..materials * cells)
                .map(|c| {
                    if c / cells < seen_materials && next().is_multiple_of(one_in) {
                        (next() % 5) as u8
                    } else {
                        UNSEEN
                    }
                })
                .collect()
        };
        for (name, seen_now, seen_ahead, resident_one_in) in
            [("dense", materials, materials, 8), ("gallery", 4, 8, 16)]
        {
            let wants = seen(&mut next, 3, seen_now);
            let hits: Vec<u32> = (0..materials * cells)
                .map(|_| (next() % 40) as u32)
                .collect();
            let ahead_wants = seen(&mut next, 4, seen_ahead);
            let ahead_hits = vec![0u32; materials * cells];
            let resident: Vec<Vec<bool>> = maps
                .iter()
                .map(|m| {
                    (0..m.tile_count())
                        .map(|_| next() % resident_one_in == 0)
                        .collect()
                })
                .collect();
            let input = TileInput {
                maps: &maps,
                g,
                wants: &wants,
                hits: &hits,
                resident: &resident,
                blocked: &[],
                free_pages: 512,
                max_loads: 4096,
                ahead_wants: &ahead_wants,
                ahead_hits: &ahead_hits,
                cast_wants: &[],
                cast_hits: &[],
                max_ahead_loads: 256,
                max_spare_loads: usize::MAX,
                max_ring_loads: usize::MAX,
                spare_hysteresis: 2,
                page_keys: &[],
                classes: &[],
                free_by_class: &[],
            };
            let n = 5;
            let t0 = Instant::now();
            let mut loads = 0;
            for _ in 0..n {
                loads += plan(&input).loads.len();
            }
            println!(
                "tile plan: {materials} materials, {name}: {:.2} ms a plan ({} loads)",
                t0.elapsed().as_secs_f64() * 1e3 / n as f64,
                loads / n
            );
        }
    }
}

/// A frame's warm look-ahead along the gallery's path at 4K.
fn cast_time() {
    for m in [16usize, 64] {
        let g = Gallery::new(m, 8);
        let path = &g.path;
        let sizes = vec![8192u32; m + 1];
        let t0 = Instant::now();
        let n = 60;
        for i in 0..n {
            let mut c = AheadCells::new(m + 1, 32);
            for k in [2u32, 4, 8, 16] {
                let v = View {
                    pose: path.pose(i * 4 + k, 240),
                    fov_y: 50f32.to_radians(),
                    aspect: 16.0 / 9.0,
                    height: 2160,
                    cut: false,
                };
                c.cast(&g.objects, &v, &sizes, 16.0, 0.0, WARM_RAYS);
            }
        }
        println!(
            "look-ahead: {m} materials: {:.3} ms per frame (4 views)",
            t0.elapsed().as_secs_f64() * 1e3 / n as f64
        );
    }
}
