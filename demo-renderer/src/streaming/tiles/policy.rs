//! The tile residency policy: a pure function from each material's per-cell
//! wanted levels and coverage, the tiles resident and the free pages to this
//! frame's tile loads and evictions. No Vulkan, no I/O.
//!
//! # The model
//!
//! A map's levels below its mip tail are grids of tiles, one memory page each
//! ([`super::geometry`]); the tail is always resident. The GPU feedback gives,
//! per cell of a material's texture-coordinate square, the finest level a
//! sampled pixel wanted (`want`, 255 for none) and how many sampled pixels
//! landed there (`hits`).
//!
//! # Scores
//!
//! Tile (level `L`, x, y) of a map scores the hits of every cell that wants
//! level `L` or finer and whose footprint at `L` (its texels widened by the
//! filter's reach, [`MapTiles::cell_tiles`]) holds it: the pixels that the tile brings to
//! level `L` (x8); a cell that wants `L + 1` adds 1/64 of that: a margin of one
//! level for a camera coming closer (the loads act on the last frame's
//! feedback), taken only with pages nothing wanted more. A parent tile's footprint holds its children's, and a cell that
//! wants `L` wants `L + 1` too, so a parent scores at least what each child
//! does; ties rank the coarser tile first. Ranked by score, every prefix of the
//! ranking therefore holds a tile's parents before it: the budget fills
//! coarse-to-fine where pixels look, and when it is short the finest tiles of
//! the least-seen regions are what is left out.
//!
//! # The look-ahead
//!
//! The camera's coming views give cells of the same kind
//! ([`TileInput::ahead_wants`], [`super::lookahead`]). A cell with hits (the
//! sampled pixels a CPU ray cast expects there) scores as the feedback's
//! cells do, added to them; a cell without hits is kept warm: [`WARM_SCORE`],
//! below any tile a present pixel wants, so it takes only pages nothing seen
//! needs. (The streamer keeps the path ahead warm; a cut's own frame casts
//! its view as the present one instead of the stale feedback.) Either way
//! the look-ahead's coarse tiles come before its fine ones, tiles only it
//! wants are not counted as wanted or missing, and at most `max_ahead_loads`
//! of them load per frame.
//!
//! # The budget and hysteresis
//!
//! The pages available are the resident tiles' plus the free ones; the target is
//! the best-ranked tiles that fit. Resident tiles rank with twice their score,
//! so a tile is displaced only by one clearly better (no flapping at the edge:
//! the feedback samples one pixel in 64, and a tile's score moves with it); a
//! spare tile (no present cell wants it) needs
//! [`TileInput::spare_hysteresis`] times the resident tile's score.
//! Loads are the target's tiles not resident, best first, at most `max_loads`;
//! evictions are the resident tiles outside the target, lowest score and finest
//! first, and only as many as the loads need beyond the free pages: a tile no
//! longer seen stays resident (a cache for when the camera returns) until its
//! page is wanted. So `loads <= free pages + evictions` always: the pages in
//! use never pass the budget.
#![forbid(unsafe_code)]

#[cfg(test)]
use super::geometry::filter_margin;
use super::geometry::{MapTiles, TileRef};
use super::sample::CellLevels;
use rayon::prelude::*;

/// Maps per material (albedo, normal, ORM).
pub const MAPS_PER_MATERIAL: usize = 3;
/// `want` of a cell no sampled pixel landed in.
pub const UNSEEN: u8 = u8::MAX;

/// What the policy looks at.
#[derive(Clone, Copy, Debug)]
pub struct TileInput<'a> {
    /// Every map's tile layout, three per material.
    pub maps: &'a [MapTiles],
    /// Cells per side of a material's grid.
    pub g: u32,
    /// Per material, `g * g` cells (row-major): the finest level wanted, or
    /// [`UNSEEN`].
    pub wants: &'a [u8],
    /// Per material, `g * g` cells: sampled pixels that landed there.
    pub hits: &'a [u32],
    /// Per map, per tile ([`MapTiles::index`]): resident now.
    pub resident: &'a [Vec<bool>],
    /// Per map: no more loads (its file failed to read); empty for none.
    pub blocked: &'a [bool],
    /// Pages that can be bound now without an eviction.
    pub free_pages: u64,
    /// Loads this frame may start, at most.
    pub max_loads: usize,
    /// The look-ahead, laid out as `wants`: per material, per cell, the finest
    /// level the camera's coming views want ([`super::lookahead`]; a cut's
    /// view included), or [`UNSEEN`]; empty for none.
    pub ahead_wants: &'a [u8],
    /// The look-ahead's sampled pixels per cell, as `hits`, already weighted
    /// by how soon each view comes.
    pub ahead_hits: &'a [u32],
    /// Of the look-ahead, the present view's own cast alone (laid out as
    /// `wants`; empty for none): it tells the look-ahead's loads that this
    /// frame may draw ([`LoadKind::Cast`]) from those of the coming views
    /// alone ([`LoadKind::Ahead`]). It changes no score and no plan.
    pub cast_wants: &'a [u8],
    /// The present view's cast's sampled pixels per cell, as `hits`.
    pub cast_hits: &'a [u32],
    /// Loads of tiles only the look-ahead wants, at most.
    pub max_ahead_loads: usize,
    /// Loads of tiles the present view does not want (the look-ahead's, the
    /// margin of one level finer, the ring around a wanted region), at most.
    pub max_spare_loads: usize,
    /// Of those, loads of the margin and the ring (tiles a present cell
    /// scores but does not want), at most: the look-ahead's are capped by
    /// `max_ahead_loads`.
    pub max_ring_loads: usize,
    /// How many times a resident tile's score a spare tile (one no present
    /// cell wants) must score to displace it: 2 to 16 (a wanted tile: 2).
    /// The spare pages hold the margin, the ring and the look-ahead, whose
    /// scores move with the sampled pixels every frame; at 2 they displaced
    /// each other on most frames (BENCHMARKS.md). [`SPARE_HYSTERESIS`] by
    /// default.
    pub spare_hysteresis: u64,
    /// Per map, per tile: where a resident tile's page lies, as a key in which
    /// pages that follow each other in one memory object are consecutive
    /// numbers (anything else for an absent tile); empty for unknown. Evicted
    /// pages become the next loads' pages, and a run of adjacent tiles binds
    /// as one region only on pages that follow each other
    /// ([`super::pages::assign`]): among the tiles that score nothing, the
    /// evictions take stretches of consecutive pages, longest first
    /// ([`choose_evictions`]).
    pub page_keys: &'a [Vec<u64>],
    /// Per map: its page class, where pages of one class cannot hold another
    /// class's tiles (a page atlas: one atlas per map format); empty for one
    /// class, whose free pages are `free_pages`.
    pub classes: &'a [u8],
    /// With `classes`: each class's free pages (`free_pages` is then not
    /// read). Each class gets its own target of `resident + free` tiles and
    /// its own evictions, so a frame never plans more loads of a class than
    /// its free and evicted pages.
    pub free_by_class: &'a [u64],
}

pub use crate::tuning::SPARE_HYSTERESIS;

/// A tile's rank is its score times this: resident tiles rank with twice a
/// wanted load's factor (the hysteresis of the module's "The budget and
/// hysteresis"), spare loads with `2 / spare_hysteresis` of it.
fn rank_factor(resident: bool, wanted: bool, spare_hysteresis: u64) -> u64 {
    if resident {
        16
    } else if wanted {
        8
    } else {
        16 / spare_hysteresis.clamp(2, 16)
    }
}

/// What a load is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LoadKind {
    /// A present cell wants it (at its wanted level or coarser).
    Wanted,
    /// Spare: a present cell scores it without wanting it (the margin of one
    /// level finer, the ring around a wanted region).
    Ring,
    /// Spare: only the look-ahead wants it, the present view's own cast
    /// among it ([`TileInput::cast_wants`]): this frame may draw it.
    Cast,
    /// Spare: only the coming views want it.
    Ahead,
}

impl LoadKind {
    /// The kind of a load that the look-ahead alone wants (`ahead_only`;
    /// `cast`: the present view's cast scores it), or that no present cell
    /// wants (`spare`).
    fn of(ahead_only: bool, spare: bool, cast: bool) -> Self {
        match (ahead_only, spare, cast) {
            (true, _, true) => Self::Cast,
            (true, _, false) => Self::Ahead,
            (false, true, _) => Self::Ring,
            (false, false, _) => Self::Wanted,
        }
    }
}

/// Whether tile `idx` of map `i` is scored by the present view's cast
/// (`None`: no cast given).
fn cast_scored(cast: Option<&Scores>, i: usize, idx: usize) -> bool {
    cast.is_some_and(|c| c.of(i).0.get(idx).is_some_and(|&p| p > 0))
}

/// This frame's changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TilePlan {
    /// Tiles to bind and fill, best first.
    pub loads: Vec<TileRef>,
    /// Per load: what wants it.
    pub kinds: Vec<LoadKind>,
    /// Tiles to unbind (before the loads bind their pages).
    pub evictions: Vec<TileRef>,
    /// Tiles some present cell wants at its wanted level or a coarser one:
    /// what every visible region at its wanted level would take (the margin
    /// of one level finer and the look-ahead are not counted).
    pub wanted: u64,
    /// Wanted tiles neither resident nor loaded this frame.
    pub missing: u64,
    /// Loads of wanted tiles (the others are spare: [`TileInput::max_spare_loads`]).
    pub wanted_loads: u64,
}

/// Per level of a layout, per column and per row of a `g` x `g` grid of
/// cells, the tile columns and rows that a cell's widened footprint covers
/// ([`MapTiles::cell_tiles`]) and those its own texels lie in
/// ([`MapTiles::cell_own_tiles`]): computed once per distinct layout (the
/// maps of a texture set usually share one or two), not per map and pass;
/// the streamer keeps one for its residency map's refreshes
/// ([`residency_map_in`]).
pub struct Footprints {
    g: u32,
    layouts: Vec<(MapTiles, Vec<LevelFootprints>)>,
}

/// Per cell column, tile columns; per cell row, tile rows.
type Spans = (Vec<Vec<u32>>, Vec<Vec<u32>>);

/// One level's footprints: widened, then own.
type LevelFootprints = (Spans, Spans);

impl Footprints {
    /// The footprints of every distinct layout among `maps` in a `g` x `g`
    /// grid of cells.
    pub fn new<'a>(maps: impl IntoIterator<Item = &'a MapTiles>, g: u32) -> Self {
        let g = g.max(1);
        let mut layouts: Vec<(MapTiles, Vec<LevelFootprints>)> = Vec::new();
        for map in maps {
            if layouts.iter().any(|(m, _)| m == map) {
                continue;
            }
            let levels = (0..map.tail_first)
                .map(|level| {
                    (
                        (
                            (0..g).map(|c| map.cell_tiles(level, g, c, false)).collect(),
                            (0..g).map(|c| map.cell_tiles(level, g, c, true)).collect(),
                        ),
                        (
                            (0..g)
                                .map(|c| map.cell_own_tiles(level, g, c, false))
                                .collect(),
                            (0..g)
                                .map(|c| map.cell_own_tiles(level, g, c, true))
                                .collect(),
                        ),
                    )
                })
                .collect();
            layouts.push((*map, levels));
        }
        Self { g, layouts }
    }

    /// Whether `map`'s layout is among those given to [`Footprints::new`].
    fn holds(&self, map: &MapTiles) -> bool {
        self.layouts.iter().any(|(m, _)| m == map)
    }

    /// `map`'s footprints per cell at `level` (`map` was among those given
    /// to [`Footprints::new`]): widened, then own.
    fn of(&self, map: &MapTiles, level: u32) -> &LevelFootprints {
        let (_, levels) = self
            .layouts
            .iter()
            .find(|(m, _)| m == map)
            .expect("a layout given to Footprints::new");
        &levels[level as usize]
    }
}

/// The score of a tile only a warm look-ahead cell (no hits) wants: below any
/// a sampled pixel wants (8 per hit), so such tiles take only pages nothing
/// seen needs.
pub const WARM_SCORE: u64 = 1;

/// One map's tile scores (per flat tile index) and, per tile, whether a cell
/// wants it at its own level or a coarser one (not only as the margin of one
/// level finer): what counts as wanted.
type MapScores = (Vec<u64>, Vec<bool>);

/// Every map's tile scores ([`Scores::of`]), from one set of cells (`wants`,
/// `hits`, laid out as [`TileInput::wants`]; empty: all zero); a wanted cell
/// with no hits gives `no_hits` to each of its tiles.
fn cell_scores(
    input: &TileInput<'_>,
    fp: &Footprints,
    wants: &[u8],
    hits: &[u32],
    no_hits: u64,
) -> Scores {
    let blocked = |i: usize| input.blocked.get(i).copied().unwrap_or(false);
    // A material's maps usually share one layout (size and tile shape):
    // their scores are the same, computed once, for the first of them.
    let shares_first = |i: usize| {
        let first = i - i % MAPS_PER_MATERIAL;
        i != first && !blocked(i) && !blocked(first) && input.maps[first] == input.maps[i]
    };
    let owners: Vec<usize> = (0..input.maps.len())
        .filter(|&i| !shares_first(i))
        .collect();
    let mut of_map: Vec<usize> = Vec::with_capacity(input.maps.len());
    let mut next = 0;
    for i in 0..input.maps.len() {
        if shares_first(i) {
            let same = of_map[i - i % MAPS_PER_MATERIAL];
            of_map.push(same);
        } else {
            of_map.push(next);
            next += 1;
        }
    }
    let work = owners.iter().map(|&i| input.maps[i].tile_count()).sum();
    let per = in_parallel(&owners, work, |&i| {
        map_scores(input, fp, i, wants, hits, no_hits)
    });
    Scores { per, of_map }
}

/// Map `i`'s tile scores ([`MapScores`]) from its material's cells of
/// `wants` and `hits` ([`cell_scores`]).
fn map_scores(
    input: &TileInput<'_>,
    fp: &Footprints,
    i: usize,
    wants: &[u8],
    hits: &[u32],
    no_hits: u64,
) -> MapScores {
    let g = input.g.max(1);
    let cells = (g * g) as usize;
    let map = &input.maps[i];
    let m = i / MAPS_PER_MATERIAL;
    let mut s = vec![0u64; map.tile_count()];
    let mut exact = vec![false; map.tile_count()];
    // A blocked map loads nothing: it scores nothing.
    let (false, Some(wants), Some(hits)) = (
        input.blocked.get(i).copied().unwrap_or(false),
        wants.get(m * cells..(m + 1) * cells),
        hits.get(m * cells..(m + 1) * cells),
    ) else {
        return (s, exact);
    };
    // The cells seen, once (most of a material's cells are not), and
    // per wanted level whether the shaders draw it at its inner level.
    let seen = seen_cells(wants, hits, g, no_hits);
    let inner_at: Vec<bool> = (0..map.tail_first).map(|l| map.inner_at(l, g)).collect();
    for level in 0..map.tail_first {
        let (w, _) = map.grid(level);
        let start = map.level_start(level);
        let ((cols, rows), (own_cols, own_rows)) = fp.of(map, level);
        for &(cx, cy, want, full) in &seen {
            if want > level + 1 {
                continue;
            }
            // One level finer than wanted scores 1/64: a margin for
            // the camera coming closer, bought with spare pages.
            let margin = want > level;
            // Where the shaders draw the cell at its inner level, its
            // own tiles are what it wants; the rest of its widened
            // footprint (the ring a strip along its edge samples
            // when the neighbour's are there) scores as the margin.
            let inner = !margin && inner_at.get(want as usize).copied().unwrap_or(false);
            // (At least 1, as a warm look-ahead tile: a cell of one
            // sampled pixel still gets its margin when pages are spare,
            // and so does a warm look-ahead cell, after its own tiles
            // and within the look-ahead's cap.)
            let spare = (full / 64).max(1);
            let (ring, own) = if margin {
                (spare, 0)
            } else if inner {
                (spare, full)
            } else {
                (full, full)
            };
            let own_x = &own_cols[cx as usize];
            let own_y = &own_rows[cy as usize];
            for &y in &rows[cy as usize] {
                let y_own = own_y.contains(&y);
                for &x in &cols[cx as usize] {
                    let k = start + y as usize * w as usize + x as usize;
                    let mine = y_own && own_x.contains(&x);
                    let h = if mine { own.max(ring) } else { ring };
                    s[k] = s[k].saturating_add(h);
                    exact[k] |= !margin && (mine || !inner);
                }
            }
        }
    }
    (s, exact)
}

/// The cells of a material's `wants` and `hits` that a sampled pixel (or
/// the look-ahead) wants: column, row, wanted level, and the score of a
/// tile it wants (8 per hit; `no_hits` without hits).
fn seen_cells(wants: &[u8], hits: &[u32], g: u32, no_hits: u64) -> Vec<(u32, u32, u32, u64)> {
    (0..wants.len())
        .filter(|&c| wants[c] != UNSEEN)
        .map(|c| {
            let full = match hits[c] {
                0 => no_hits,
                h => u64::from(h) * 8,
            };
            (c as u32 % g, c as u32 / g, u32::from(wants[c]), full)
        })
        .collect()
}

/// Tiles in a plan's input above which its per-map work is shared over
/// threads: 16 materials of 8K maps in 64 KiB tiles have 65,520.
const PARALLEL_TILES: usize = 1 << 15;

/// `f` of each of `items`, in order, on rayon's pool where `work` (tiles) is
/// at least [`PARALLEL_TILES`], else on this thread: the result is the same
/// either way.
fn in_parallel<T: Sync, R: Send>(
    items: &[T],
    work: usize,
    f: impl Fn(&T) -> R + Sync + Send,
) -> Vec<R> {
    if work < PARALLEL_TILES || items.len() < 2 {
        return items.iter().map(f).collect();
    }
    items.par_iter().map(f).collect()
}

/// Tile scores per map: `per` holds one [`MapScores`] per distinct map
/// (a material's maps of one layout share theirs), `of_map[i]` is map `i`'s.
struct Scores {
    per: Vec<MapScores>,
    of_map: Vec<usize>,
}

impl Scores {
    /// Map `i`'s scores.
    fn of(&self, i: usize) -> &MapScores {
        &self.per[self.of_map[i]]
    }
}

/// The flat index of `tile`'s parent (the tile of the next coarser level that
/// holds its texels), `None` at the last level below the tail.
fn parent_index(map: &MapTiles, tile: &TileRef) -> Option<usize> {
    (tile.level + 1 < map.tail_first).then(|| map.index(tile.level + 1, tile.x / 2, tile.y / 2))
}

/// The tile of flat index `idx` of `map` (index `map_index`), which lies in
/// `level`.
fn tile_at(map: &MapTiles, map_index: usize, level: u32, idx: usize) -> TileRef {
    let (w, _) = map.grid(level);
    let local = idx - map.level_start(level);
    TileRef {
        map: map_index as u32,
        level,
        x: (local % w as usize) as u32,
        y: (local / w as usize) as u32,
    }
}

/// A ranked tile as one sort key, best first when sorted ascending: the rank
/// descending, then the level descending (coarser first: parents before
/// children), then map and index ascending (deterministic). Fields: rank (64
/// bits), level (8: a map has at most 32 levels), map (24: at most 16M maps),
/// index (32: at most 4G tiles a map).
fn rank_key(rank: u64, level: u32, map: usize, idx: usize) -> u128 {
    (u128::from(u64::MAX - rank) << 64)
        | (u128::from(0xff - level.min(0xff)) << 56)
        | ((map as u128 & 0xff_ffff) << 32)
        | (idx as u128 & 0xffff_ffff)
}

/// The level, map and index of a [`rank_key`].
fn rank_unkey(k: u128) -> (u32, usize, usize) {
    (
        0xff - ((k >> 56) & 0xff) as u32,
        ((k >> 32) & 0xff_ffff) as usize,
        (k & 0xffff_ffff) as usize,
    )
}

/// This frame's loads and evictions (see the module's documentation).
pub fn plan(input: &TileInput<'_>) -> TilePlan {
    let fp = Footprints::new(input.maps, input.g.max(1));
    let present = cell_scores(input, &fp, input.wants, input.hits, 8);
    let ahead = cell_scores(input, &fp, input.ahead_wants, input.ahead_hits, WARM_SCORE);
    let cast = (!input.cast_wants.is_empty())
        .then(|| cell_scores(input, &fp, input.cast_wants, input.cast_hits, WARM_SCORE));
    let facts = TileFacts {
        input,
        present: &present,
        cast: cast.as_ref(),
    };
    let per_map = rank_tiles(input, &present, &ahead);
    let classes = Classes::new(input);
    let (targets, wanted) = Targets::new(per_map, &classes);
    let mut candidates = load_candidates(&facts, &targets);
    let (chosen, next) = choose_loads(&facts, &mut candidates);
    let missing =
        chosen.missing + missing_left(&facts, &targets, &candidates[next..], chosen.counts);
    let evictions = evictions_by_class(&facts, &classes, &targets, &chosen.loads);
    let wanted_loads = (chosen.loads.len() - chosen.counts.spare) as u64;
    TilePlan {
        loads: chosen.loads,
        kinds: chosen.kinds,
        evictions,
        wanted,
        missing,
        wanted_loads,
    }
}

/// One map's ranked tiles (each a [`rank_key`] and its score), its resident
/// tiles and its wanted ones.
type MapRanks = (Vec<(u128, u64)>, u64, u64);

/// Every map's ranked tiles ([`MapRanks`]): those with a score (present
/// and look-ahead added) or resident, ranked by score times
/// [`rank_factor`].
fn rank_tiles(input: &TileInput<'_>, present: &Scores, ahead: &Scores) -> Vec<MapRanks> {
    // Ranked tiles as one sort key each (rank: score times `rank_factor`),
    // and the score.
    debug_assert!(input.maps.len() <= 1 << 24);
    debug_assert!(input
        .maps
        .iter()
        .all(|m| m.tile_count() <= u32::MAX as usize));
    // The look-ahead alone is not "wanted" (the report's wanted bytes are what
    // the present view samples). Every tile of every map is looked at (with
    // 64 materials of 8K maps, 262,000 of them a frame): the maps are shared
    // over threads, and each runs over slices, level by level.
    let total_tiles: usize = input.maps.iter().map(MapTiles::tile_count).sum();
    let indices: Vec<usize> = (0..input.maps.len()).collect();
    in_parallel(&indices, total_tiles, |&i| {
        let map = &input.maps[i];
        let n = map.tile_count();
        let (p_score, p_wanted) = present.of(i);
        let a_score = &ahead.of(i).0;
        let given = input.resident.get(i).map_or(&[][..], Vec::as_slice);
        // A resident set shorter than the map (none given) reads as absent.
        let padded: Vec<bool>;
        let res = if given.len() >= n {
            &given[..n]
        } else {
            padded = given
                .iter()
                .copied()
                .chain(std::iter::repeat(false))
                .take(n)
                .collect();
            &padded[..]
        };
        // [`cell_scores`] gives every map one score and flag per tile (a map
        // that shares its material's first map's scores has its layout).
        let mut ranked: Vec<(u128, u64)> = Vec::new();
        let (mut resident_count, mut wanted) = (0u64, 0u64);
        for level in 0..map.tail_first {
            let start = map.level_start(level);
            let (w, h) = map.grid(level);
            let end = (start + w as usize * h as usize).min(n);
            let tiles = p_score[start..end]
                .iter()
                .zip(&a_score[start..end])
                .zip(&res[start..end])
                .zip(&p_wanted[start..end]);
            for (k, (((&p, &a), &r), &wants)) in tiles.enumerate() {
                let score = p.saturating_add(a);
                resident_count += u64::from(r);
                wanted += u64::from(wants);
                if score > 0 || r {
                    let rank = score.saturating_mul(rank_factor(r, wants, input.spare_hysteresis));
                    ranked.push((rank_key(rank, level, i, start + k), score));
                }
            }
        }
        (ranked, resident_count, wanted)
    })
}

/// Page classes ([`TileInput::classes`]): one unless given.
struct Classes<'a> {
    /// How many.
    count: usize,
    /// [`TileInput::classes`].
    of_map: &'a [u8],
    /// [`TileInput::free_by_class`].
    free_by_class: &'a [u64],
    /// [`TileInput::free_pages`].
    free_pages: u64,
}

impl<'a> Classes<'a> {
    /// `input`'s page classes.
    fn new(input: &TileInput<'a>) -> Self {
        let count = if input.classes.is_empty() {
            1
        } else {
            input.free_by_class.len().max(1)
        };
        Self {
            count,
            of_map: input.classes,
            free_by_class: input.free_by_class,
            free_pages: input.free_pages,
        }
    }

    /// Map `i`'s class.
    fn of(&self, i: usize) -> usize {
        self.of_map
            .get(i)
            .map_or(0, |&c| usize::from(c).min(self.count - 1))
    }

    /// Class `c`'s free pages.
    fn free(&self, c: usize) -> u64 {
        if self.of_map.is_empty() {
            self.free_pages
        } else {
            self.free_by_class.get(c).copied().unwrap_or(0)
        }
    }
}

/// The target, per class: its `capacity` best-ranked tiles (its resident
/// tiles and free pages), partitioned off, not sorted.
struct Targets {
    /// Every ranked tile ([`rank_key`], score), the classes one after the other.
    ranked: Vec<(u128, u64)>,
    /// Per class: its start in `ranked`, its head's end and its end.
    heads: Vec<(usize, usize, usize)>,
}

impl Targets {
    /// The targets of `per_map`'s ranked tiles, by `classes`, and the wanted
    /// tiles of every map.
    fn new(per_map: Vec<MapRanks>, classes: &Classes<'_>) -> (Self, u64) {
        let mut groups: Vec<Vec<(u128, u64)>> = vec![Vec::new(); classes.count];
        let mut resident_by = vec![0u64; classes.count];
        let mut wanted = 0u64;
        for (i, (r, count, w)) in per_map.into_iter().enumerate() {
            groups[classes.of(i)].extend(r);
            resident_by[classes.of(i)] += count;
            wanted += w;
        }
        // Tiles with a score rank above every tile without one, so those in
        // a head are the best `capacity` of them (or all of them).
        let mut ranked: Vec<(u128, u64)> = Vec::with_capacity(groups.iter().map(Vec::len).sum());
        let mut heads: Vec<(usize, usize, usize)> = Vec::with_capacity(classes.count);
        for (c, mut g) in groups.into_iter().enumerate() {
            let capacity = resident_by[c].saturating_add(classes.free(c));
            let head = usize::try_from(capacity).unwrap_or(usize::MAX).min(g.len());
            if head < g.len() {
                g.select_nth_unstable_by_key(head, |r| r.0);
            }
            let start = ranked.len();
            ranked.extend(g);
            heads.push((start, start + head, ranked.len()));
        }
        (Self { ranked, heads }, wanted)
    }

    /// Whether ranked tile `k` is in its class's target: in the head, with a score.
    fn holds(&self, k: usize) -> bool {
        let in_head = self.heads.iter().any(|&(s, h, _)| (s..h).contains(&k));
        in_head && self.ranked[k].1 > 0
    }
}

/// What the plan asks of a tile: the input, and the present view's and its
/// cast's scores.
struct TileFacts<'i, 'a> {
    input: &'i TileInput<'a>,
    present: &'i Scores,
    cast: Option<&'i Scores>,
}

impl TileFacts<'_, '_> {
    /// Whether tile `idx` of map `i` is resident.
    fn resident(&self, i: usize, idx: usize) -> bool {
        self.input
            .resident
            .get(i)
            .and_then(|r| r.get(idx))
            .copied()
            .unwrap_or(false)
    }

    /// Whether a present cell scores tile `idx` of map `i`.
    fn is_present(&self, i: usize, idx: usize) -> bool {
        self.present.of(i).0.get(idx).is_some_and(|&p| p > 0)
    }

    /// Wanted: what a present cell wants at its own level or coarser (the
    /// margin of one level finer is bought with spare pages, not wanted).
    fn is_wanted(&self, i: usize, idx: usize) -> bool {
        self.present.of(i).1.get(idx).copied().unwrap_or(false)
    }

    /// A load's kind: only the look-ahead wants it; no present cell wants it
    /// (spare); spare but scored by a present cell (the margin and the ring).
    fn kind(&self, i: usize, idx: usize) -> Spare {
        let ahead_only = !self.is_present(i, idx);
        let spare = !self.is_wanted(i, idx);
        Spare {
            ahead_only,
            spare,
            ring: spare && !ahead_only,
        }
    }
}

/// Which of the spare loads' caps a load counts against.
#[derive(Clone, Copy)]
struct Spare {
    /// Only the look-ahead wants it ([`TileInput::max_ahead_loads`]).
    ahead_only: bool,
    /// No present cell wants it ([`TileInput::max_spare_loads`]).
    spare: bool,
    /// Spare but scored by a present cell ([`TileInput::max_ring_loads`]).
    ring: bool,
}

/// The loads so far against each cap.
#[derive(Clone, Copy, Default)]
struct CapCounts {
    ahead: usize,
    spare: usize,
    ring: usize,
}

impl CapCounts {
    /// Whether a load of kind `k` is over its cap, given the loads so far.
    fn capped(&self, k: Spare, input: &TileInput<'_>) -> bool {
        (k.ahead_only && self.ahead >= input.max_ahead_loads)
            || (k.spare && self.spare >= input.max_spare_loads)
            || (k.ring && self.ring >= input.max_ring_loads)
    }

    /// Counts a load of kind `k`.
    fn add(&mut self, k: Spare) {
        self.ahead += usize::from(k.ahead_only);
        self.spare += usize::from(k.spare);
        self.ring += usize::from(k.ring);
    }
}

/// The targets' tiles not resident: the loads to choose from, as rank keys.
fn load_candidates(facts: &TileFacts<'_, '_>, targets: &Targets) -> Vec<u128> {
    targets
        .heads
        .iter()
        .flat_map(|&(s, h, _)| &targets.ranked[s..h])
        .filter(|&&(kk, score)| {
            let (_, i, idx) = rank_unkey(kk);
            score > 0 && !facts.resident(i, idx)
        })
        .map(|&(kk, _)| kk)
        .collect()
}

/// The loads [`choose_loads`] chose.
struct Chosen {
    /// Best first.
    loads: Vec<TileRef>,
    /// Per load: what wants it.
    kinds: Vec<LoadKind>,
    /// Wanted tiles passed over (their parent neither resident nor loaded).
    missing: u64,
    /// The loads against each cap.
    counts: CapCounts,
}

/// Loads: `candidates` best first (only these are sorted), within the caps,
/// until `max_loads`; and the index of the first candidate not looked at.
/// A tile whose parent is neither resident nor loaded is passed over
/// (missing if wanted).
fn choose_loads(facts: &TileFacts<'_, '_>, candidates: &mut [u128]) -> (Chosen, usize) {
    let input = facts.input;
    let mut chosen = Chosen {
        loads: Vec::new(),
        kinds: Vec::new(),
        missing: 0,
        counts: CapCounts::default(),
    };
    // Loaded this frame, per map (made on a map's first load), to keep a tile
    // whose parent a cap held back from loading without it (parents rank
    // first, so their fate is known).
    let mut loaded: Vec<Vec<bool>> = vec![Vec::new(); input.maps.len()];
    // Candidates are taken best first, sorted a stretch at a time (twice a
    // frame's loads, at least 8: the property test's small inputs take
    // several stretches): once the loads are full, the rest only count as
    // missing or capped, which needs no order (the caps' counts no longer
    // move).
    let stretch = input.max_loads.saturating_mul(2).max(8);
    let mut sorted_to = 0;
    let mut next = 0;
    while next < candidates.len() && chosen.loads.len() < input.max_loads {
        if next == sorted_to {
            let rest = &mut candidates[next..];
            let take = stretch.min(rest.len());
            if take < rest.len() {
                rest.select_nth_unstable(take);
            }
            rest[..take].sort_unstable();
            sorted_to = next + take;
        }
        let (level, i, idx) = rank_unkey(candidates[next]);
        next += 1;
        let kind = facts.kind(i, idx);
        // A capped load is spare (never wanted), so not missing.
        if chosen.counts.capped(kind, input) {
            continue;
        }
        let tile = tile_at(&input.maps[i], i, level, idx);
        let orphan = parent_index(&input.maps[i], &tile)
            .is_some_and(|p| !facts.resident(i, p) && !loaded[i].get(p).copied().unwrap_or(false));
        if orphan {
            chosen.missing += u64::from(!kind.spare);
            continue;
        }
        let mine = &mut loaded[i];
        if mine.is_empty() {
            mine.resize(input.maps[i].tile_count(), false);
        }
        if let Some(l) = mine.get_mut(idx) {
            *l = true;
        }
        chosen.loads.push(tile);
        let cast = cast_scored(facts.cast, i, idx);
        chosen
            .kinds
            .push(LoadKind::of(kind.ahead_only, kind.spare, cast));
        chosen.counts.add(kind);
    }
    (chosen, next)
}

/// The wanted tiles missing beyond those [`choose_loads`] passed over: of the
/// candidates it did not look at (`left`: the loads are full), those not
/// capped (`counts`: the loads' against the caps); and the tiles outside the
/// targets.
fn missing_left(
    facts: &TileFacts<'_, '_>,
    targets: &Targets,
    left: &[u128],
    counts: CapCounts,
) -> u64 {
    let not_loaded = left
        .iter()
        .filter(|&&kk| {
            let (_, i, idx) = rank_unkey(kk);
            let kind = facts.kind(i, idx);
            !kind.spare && !counts.capped(kind, facts.input)
        })
        .count() as u64;
    let outside = targets
        .heads
        .iter()
        .flat_map(|&(_, h, e)| &targets.ranked[h..e])
        .filter(|&&(kk, score)| {
            let (_, i, idx) = rank_unkey(kk);
            score > 0 && !facts.resident(i, idx) && facts.is_wanted(i, idx)
        })
        .count() as u64;
    not_loaded + outside
}

/// Evictions, per class, for the `loads` its free pages lack: among the
/// resident tiles outside its target, lowest score first, then finest, then
/// map and index ([`choose_evictions`]).
fn evictions_by_class(
    facts: &TileFacts<'_, '_>,
    classes: &Classes<'_>,
    targets: &Targets,
    loads: &[TileRef],
) -> Vec<TileRef> {
    let input = facts.input;
    let mut loads_by = vec![0u64; classes.count];
    for t in loads {
        loads_by[classes.of(t.map as usize)] += 1;
    }
    let mut evictions = Vec::new();
    for (c, &(s, _, e)) in targets.heads.iter().enumerate() {
        let need = loads_by[c].saturating_sub(classes.free(c));
        let out: Vec<Victim> = (s..e)
            .filter_map(|k| {
                let (kk, score) = targets.ranked[k];
                let (level, i, idx) = rank_unkey(kk);
                (!targets.holds(k) && facts.resident(i, idx)).then_some((score, level, i, idx))
            })
            .collect();
        let need = usize::try_from(need).unwrap_or(usize::MAX);
        evictions.extend(
            choose_evictions(out, need, input.page_keys)
                .iter()
                .map(|&(_, level, i, idx)| tile_at(&input.maps[i], i, level, idx)),
        );
    }
    evictions
}

/// An eviction candidate: score, level, map, index.
type Victim = (u64, u32, usize, usize);

/// `need` of the resident tiles outside the target (`out`, or all of them
/// when fewer), sorted: lowest score first, then finest, then map and index.
/// Where `page_keys` is given ([`TileInput::page_keys`]) and more tiles score
/// nothing than are needed, those taken among them are whole stretches of
/// consecutive page keys, longest first (ties: the lower key), the last one
/// cut to what is left: tiles that score nothing are alike to the plan, and
/// their pages, adjacent, let the next loads bind by runs.
pub fn choose_evictions(mut out: Vec<Victim>, need: usize, page_keys: &[Vec<u64>]) -> Vec<Victim> {
    let need = need.min(out.len());
    let key = |&(_, _, i, idx): &Victim| {
        page_keys
            .get(i)
            .and_then(|k| k.get(idx))
            .copied()
            .unwrap_or(u64::MAX)
    };
    let stale = out.iter().filter(|v| v.0 == 0).count();
    if page_keys.is_empty() || need == 0 || stale <= need {
        // No choice among equals: the lowest `need` as ranked.
        if need < out.len() {
            out.select_nth_unstable(need);
        }
        out.truncate(need);
        out.sort_unstable();
        return out;
    }
    let mut zero: Vec<(u64, Victim)> = out
        .into_iter()
        .filter(|v| v.0 == 0)
        .map(|v| (key(&v), v))
        .collect();
    zero.sort_unstable();
    // Stretches as (length, first index into `zero`); an unknown key
    // (u64::MAX) is a stretch of its own.
    let mut stretches: Vec<(usize, usize)> = Vec::new();
    let mut start = 0;
    for k in 1..=zero.len() {
        let ends = k == zero.len()
            || zero[k - 1].0 == u64::MAX
            || zero[k - 1].0.checked_add(1) != Some(zero[k].0);
        if ends {
            stretches.push((k - start, start));
            start = k;
        }
    }
    stretches.sort_unstable_by_key(|&(len, first)| (std::cmp::Reverse(len), first));
    let mut taken = Vec::with_capacity(need);
    for (len, first) in stretches {
        let left = need - taken.len();
        if left == 0 {
            break;
        }
        taken.extend(zero[first..first + len.min(left)].iter().map(|z| z.1));
    }
    taken.sort_unstable();
    taken
}

/// Material `m`'s residency map: per cell, the coarsest over its maps of the
/// finest level from which every level down to the tail has all the cell's
/// widened footprint resident (`safe`), and the same over its own texels
/// (`inner`; [`super::sample::tile_level`] says which a sample uses).
pub fn residency_map(
    maps: &[MapTiles],
    g: u32,
    m: usize,
    resident: &[Vec<bool>],
) -> Vec<CellLevels> {
    let first = m * MAPS_PER_MATERIAL;
    let fp = Footprints::new(maps.iter().skip(first).take(MAPS_PER_MATERIAL), g);
    residency_map_in(&fp, maps, m, resident)
}

/// [`residency_map`] with footprints computed before (`fp`, whose grid it
/// uses), so that a refresh per changed material does not rebuild them; a
/// map whose layout `fp` lacks gets its own.
pub fn residency_map_in(
    fp: &Footprints,
    maps: &[MapTiles],
    m: usize,
    resident: &[Vec<bool>],
) -> Vec<CellLevels> {
    let first = m * MAPS_PER_MATERIAL;
    let mine = || maps.iter().skip(first).take(MAPS_PER_MATERIAL);
    if !mine().all(|map| fp.holds(map)) {
        return residency_map_in(&Footprints::new(mine(), fp.g), maps, m, resident);
    }
    let g = fp.g;
    let cells = (g * g) as usize;
    let mut out = vec![CellLevels { safe: 0, inner: 0 }; cells];
    for (i, map) in maps.iter().enumerate().skip(first).take(MAPS_PER_MATERIAL) {
        let res = resident.get(i);
        let is_res = |idx: usize| res.and_then(|r| r.get(idx)).copied().unwrap_or(false);
        let mut safe = vec![map.tail_first; cells];
        let mut inner = vec![map.tail_first; cells];
        for level in (0..map.tail_first).rev() {
            let (w, _) = map.grid(level);
            let start = map.level_start(level);
            let (widened, own) = fp.of(map, level);
            for (finest, (cols, rows)) in [(&mut safe, widened), (&mut inner, own)] {
                for cy in 0..g {
                    for cx in 0..g {
                        let c = (cy * g + cx) as usize;
                        if finest[c] != level + 1 {
                            continue;
                        }
                        let here = rows[cy as usize].iter().all(|&y| {
                            cols[cx as usize]
                                .iter()
                                .all(|&x| is_res(start + y as usize * w as usize + x as usize))
                        });
                        if here {
                            finest[c] = level;
                        }
                    }
                }
            }
        }
        for ((o, s), n) in out.iter_mut().zip(safe).zip(inner) {
            o.safe = o.safe.max(s.min(255) as u8);
            o.inner = o.inner.max(n.min(255) as u8);
        }
    }
    out
}

/// Material `m`'s coverage-weighted deficit: the sum over seen cells of hits x
/// how many levels the resident one is coarser than the wanted one, and the
/// hits (their quotient is the mean deficit).
pub fn deficit(wants: &[u8], hits: &[u32], map: &[u8]) -> (f64, f64) {
    let mut sum = 0.0;
    let mut n = 0.0;
    for ((&w, &h), &r) in wants.iter().zip(hits).zip(map) {
        if w == UNSEEN || h == 0 {
            continue;
        }
        sum += f64::from(h) * f64::from(r.saturating_sub(w));
        n += f64::from(h);
    }
    (sum, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn map(size: u32, tile: u32) -> MapTiles {
        let levels = 32 - size.leading_zeros();
        let tail_first = (0..levels).find(|&l| (size >> l) < tile).unwrap_or(levels);
        MapTiles {
            size,
            levels,
            tile_w: tile,
            tile_h: tile,
            tail_first,
            margin: filter_margin(4),
        }
    }

    /// The plan's input with no blocked map, 1000 free pages and loads, and no
    /// look-ahead.
    pub(super) fn input<'a>(
        maps: &'a [MapTiles],
        g: u32,
        wants: &'a [u8],
        hits: &'a [u32],
        resident: &'a [Vec<bool>],
    ) -> TileInput<'a> {
        TileInput {
            maps,
            g,
            wants,
            hits,
            resident,
            blocked: &[],
            free_pages: 1000,
            max_loads: 1000,
            ahead_wants: &[],
            ahead_hits: &[],
            cast_wants: &[],
            cast_hits: &[],
            max_ahead_loads: 0,
            max_spare_loads: usize::MAX,
            max_ring_loads: usize::MAX,
            spare_hysteresis: 2,
            page_keys: &[],
            classes: &[],
            free_by_class: &[],
        }
    }

    fn empty(maps: &[MapTiles]) -> Vec<Vec<bool>> {
        maps.iter().map(|m| vec![false; m.tile_count()]).collect()
    }

    /// Applies a plan to the resident sets.
    fn apply(resident: &mut [Vec<bool>], maps: &[MapTiles], plan: &TilePlan) {
        for t in &plan.evictions {
            let m = &maps[t.map as usize];
            resident[t.map as usize][m.index(t.level, t.x, t.y)] = false;
        }
        for t in &plan.loads {
            let m = &maps[t.map as usize];
            resident[t.map as usize][m.index(t.level, t.x, t.y)] = true;
        }
    }

    /// One material of 1024-texel maps in 128-texel tiles, 8 x 8 cells, cell
    /// (1, 1) alone seen (10 sampled pixels) wanting `level`, nothing
    /// resident: maps, wants, hits, resident.
    fn one_cell(level: u8) -> (Vec<MapTiles>, Vec<u8>, Vec<u32>, Vec<Vec<bool>>) {
        let maps = vec![map(1024, 128); 3];
        let mut wants = vec![UNSEEN; 64];
        let mut hits = vec![0; 64];
        wants[9] = level;
        hits[9] = 10;
        let resident = empty(&maps);
        (maps, wants, hits, resident)
    }

    #[test]
    fn one_close_cell_loads_its_footprint_coarse_first() {
        let (maps, wants, hits, resident) = one_cell(0);
        let g = 8;
        let input = input(&maps, g, &wants, &hits, &resident);
        let p = plan(&input);
        // Wanted per map: the tile the cell lies in at each level (it is
        // drawn at its inner level: `MapTiles::inner_at`). Loaded after them
        // with spare pages: the rest of its widened footprint, 3x3 tiles at
        // level 0 (a cell is a tile, the margin reaches the neighbours) and
        // 2x2 at level 1 (4x4 grid, a cell is a quarter of a tile); at levels
        // 2 (2x2 grid) and 3 (1 tile) the margin stays inside the cell's tile.
        let wanted = 3 * 4;
        assert_eq!(p.wanted, wanted as u64);
        assert_eq!(p.loads.len(), wanted + 3 * (8 + 3));
        assert!(p.evictions.is_empty());
        assert_eq!(p.missing, 0);
        // Coarse first among the wanted tiles.
        let levels: Vec<u32> = p.loads[..wanted].iter().map(|t| t.level).collect();
        let mut sorted = levels.clone();
        sorted.sort_by(|a, b| b.cmp(a));
        assert_eq!(levels, sorted);
        // After loading, the cell's residency map says level 0.
        let mut r = resident.clone();
        apply(&mut r, &maps, &p);
        let rm = residency_map(&maps, g, 0, &r);
        assert_eq!(rm[9], CellLevels { safe: 0, inner: 0 });
        // A cell whose tile at level 2 the near one did not load: level 3.
        assert_eq!(rm[63], CellLevels { safe: 3, inner: 3 });
        // Cell (1, 0): its own tiles came with the near cell's footprint at
        // every level, its widened footprint (wrapping to row 7) did not.
        assert_eq!(rm[1], CellLevels { safe: 3, inner: 0 });
    }

    #[test]
    fn the_look_ahead_ranks_by_its_pixels_and_is_not_wanted() {
        let maps = vec![map(1024, 128); 6];
        let g = 8;
        // Material 0: one sampled pixel in cell 9 wants level 0 now.
        let mut wants = vec![UNSEEN; 128];
        let mut hits = vec![0; 128];
        wants[9] = 0;
        hits[9] = 1;
        // Material 1: a coming close-up, 100 sampled pixels in its cell 9.
        let mut ahead_wants = vec![UNSEEN; 128];
        let mut ahead_hits = vec![0; 128];
        ahead_wants[64 + 9] = 0;
        ahead_hits[64 + 9] = 100;
        let resident = empty(&maps);
        // Per material: 12 tiles wanted, 33 more of the widened footprints.
        let tiles = 3 * (4 + 8 + 3);
        let wanted = 3 * 4;
        let input = TileInput {
            free_pages: 2 * tiles as u64,
            max_loads: usize::MAX,
            ahead_wants: &ahead_wants,
            ahead_hits: &ahead_hits,
            max_ahead_loads: usize::MAX,
            ..input(&maps, g, &wants, &hits, &resident)
        };
        let p = plan(&input);
        assert_eq!(p.loads.len(), 2 * tiles);
        // The close-up's tiles first (more pixels), coarse first.
        assert!(p.loads[..tiles].iter().all(|t| t.map >= 3));
        assert_eq!(p.loads[0].level, 3);
        assert_eq!(p.wanted, wanted, "the look-ahead is not wanted");
        assert_eq!(p.missing, 0);
        // Room for one of the two: the close-up; the present view's tiles
        // are missing.
        let short = plan(&TileInput {
            free_pages: tiles as u64,
            ..input
        });
        assert!(short.loads.len() == tiles && short.loads.iter().all(|t| t.map >= 3));
        assert_eq!(short.missing, wanted);
        // The look-ahead's cap holds, coarse tiles first; the present view
        // loads in full.
        let capped = plan(&TileInput {
            max_ahead_loads: 4,
            ..input
        });
        let ahead: Vec<_> = capped.loads.iter().filter(|t| t.map >= 3).collect();
        assert_eq!(ahead.len(), 4);
        assert!(ahead.iter().all(|t| t.level >= 2));
        assert_eq!(capped.loads.len() - 4, tiles);
        // A cell the present view and the look-ahead both see scores both.
        let both = plan(&TileInput {
            ahead_wants: &wants,
            ahead_hits: &hits,
            ..input
        });
        assert_eq!(both.loads.len(), tiles);
        assert_eq!(both.wanted, wanted);
    }

    #[test]
    fn the_margin_of_one_level_finer_loads_but_is_not_wanted() {
        let (maps, wants, hits, resident) = one_cell(1);
        let g = 8;
        let p = plan(&input(&maps, g, &wants, &hits, &resident));
        // Wanted per map: the tile the cell lies in at levels 1, 2 and 3.
        let wanted = 3 * 3;
        assert_eq!(p.wanted, wanted);
        // Loaded too, after every wanted tile: the rest of level 1's widened
        // footprint (2x2) and the margin, level 0's 3x3.
        assert_eq!(p.loads.len() as u64, wanted + 3 * (3 + 9));
        assert!(p.loads[wanted as usize..].iter().all(|t| t.level <= 1));
        assert_eq!(p.missing, 0);
        // Without room for the margin nothing wanted is missing.
        let short = plan(&TileInput {
            free_pages: wanted,
            ..input(&maps, g, &wants, &hits, &resident)
        });
        assert_eq!(short.loads.len() as u64, wanted);
        assert_eq!(short.missing, 0);
    }

    #[test]
    fn a_spare_tile_displaces_a_resident_one_only_past_the_spare_hysteresis() {
        // Cell 9 wants level 1: its margin (level 0's 3x3 tiles around it)
        // is spare. Load everything it scores, then let cell 10 beside it
        // want level 1 too, with no free page left: its margin's new column
        // can only displace cell 9's own margin tiles.
        let (maps, mut wants, mut hits, mut resident) = one_cell(1);
        let g = 8;
        let first = plan(&input(&maps, g, &wants, &hits, &resident));
        apply(&mut resident, &maps, &first);
        let used: u64 = resident.iter().flatten().map(|&r| u64::from(r)).sum();
        // Cell 10 with 2 sampled pixels (cell 9 has 10):
        wants[10] = 1;
        hits[10] = 2;
        // The plan with no free page at factor `h`, given cell 10's pixels.
        let at = |hits: &[u32], h: u64| {
            plan(&TileInput {
                free_pages: 0,
                spare_hysteresis: h,
                ..input(&maps, g, &wants, hits, &resident)
            })
        };
        // Nothing wanted is missing at any factor, and the pages never pass
        // what is resident.
        for h in [2, 4, 8, 16] {
            let p = at(&hits, h);
            assert_eq!(p.missing, 0, "h {h}");
            assert!(p.loads.len() <= p.evictions.len(), "h {h}");
            assert!(used >= p.loads.len() as u64);
        }
        // With 60 (6x cell 9's): its new margin tiles score 6x the ones only
        // cell 9 scores, which they displace at factors 2 and 4, not at 8
        // and 16.
        hits[10] = 60;
        let swaps = |h: u64| at(&hits, h).loads.iter().filter(|t| t.level == 0).count();
        assert!(swaps(2) > 0);
        assert!(swaps(4) > 0);
        assert_eq!(swaps(8), 0);
        assert_eq!(swaps(16), 0);
    }

    #[test]
    fn evictions_among_tiles_scoring_nothing_take_the_longest_stretch_of_pages() {
        // Map 0, tiles 0..=5: five score nothing (pages 5, 10, 11, 12, 20),
        // tile 5 scores 3 (page 13).
        let out: Vec<Victim> = (0..6)
            .map(|idx| (if idx == 5 { 3 } else { 0 }, 0, 0, idx))
            .collect();
        let keys = vec![vec![5, 10, 11, 12, 20, 13]];
        let idx = |v: Vec<Victim>| v.iter().map(|x| x.3).collect::<Vec<_>>();
        // The stretch 10..=12 whole, then the lower single page.
        assert_eq!(idx(choose_evictions(out.clone(), 3, &keys)), [1, 2, 3]);
        assert_eq!(idx(choose_evictions(out.clone(), 4, &keys)), [0, 1, 2, 3]);
        // A stretch longer than the need is cut.
        assert_eq!(idx(choose_evictions(out.clone(), 2, &keys)), [1, 2]);
        // Without keys: as ranked (lowest score, then finest, map, index).
        assert_eq!(idx(choose_evictions(out.clone(), 3, &[])), [0, 1, 2]);
        // No choice among equals: every tile scoring nothing, then by score.
        assert_eq!(
            idx(choose_evictions(out.clone(), 6, &keys)),
            [0, 1, 2, 3, 4, 5]
        );
        assert_eq!(
            idx(choose_evictions(out.clone(), 9, &keys)),
            [0, 1, 2, 3, 4, 5]
        );
        assert!(choose_evictions(out, 0, &keys).is_empty());
    }

    /// [`plan`] written the plain way, for comparison: every ranked tile
    /// sorted, the target the first `capacity` with a score, loads taken in
    /// that order.
    fn plan_by_full_sort(input: &TileInput<'_>) -> TilePlan {
        let fp = Footprints::new(input.maps, input.g.max(1));
        let present = cell_scores(input, &fp, input.wants, input.hits, 8);
        let ahead = cell_scores(input, &fp, input.ahead_wants, input.ahead_hits, WARM_SCORE);
        let cast = (!input.cast_wants.is_empty())
            .then(|| cell_scores(input, &fp, input.cast_wants, input.cast_hits, WARM_SCORE));
        let resident = |i: usize, idx: usize| input.resident[i][idx];
        let mut ranked = Vec::new();
        let (mut resident_count, mut wanted) = (0u64, 0u64);
        for (i, map) in input.maps.iter().enumerate() {
            for level in 0..map.tail_first {
                let start = map.level_start(level);
                let (w, h) = map.grid(level);
                for idx in start..start + (w * h) as usize {
                    let score = present.of(i).0[idx] + ahead.of(i).0[idx];
                    let r = resident(i, idx);
                    let wanted_here = present.of(i).1[idx];
                    resident_count += u64::from(r);
                    wanted += u64::from(wanted_here);
                    if score > 0 || r {
                        let rank = score * rank_factor(r, wanted_here, input.spare_hysteresis);
                        ranked.push((rank_key(rank, level, i, idx), score));
                    }
                }
            }
        }
        ranked.sort_unstable();
        let capacity = resident_count + input.free_pages;
        let mut in_target = vec![false; ranked.len()];
        let mut taken = 0;
        for (k, &(_, score)) in ranked.iter().enumerate() {
            if taken < capacity && score > 0 {
                in_target[k] = true;
                taken += 1;
            }
        }
        let (mut loads, mut kinds, mut missing) = (Vec::new(), Vec::new(), 0);
        let (mut ahead_loads, mut spare_loads, mut ring_loads) = (0, 0, 0);
        for (k, &(kk, score)) in ranked.iter().enumerate() {
            let (_, i, idx) = rank_unkey(kk);
            if score == 0 || resident(i, idx) {
                continue;
            }
            let ahead_only = present.of(i).0[idx] == 0;
            let spare = !present.of(i).1[idx];
            let ring = spare && !ahead_only;
            let (level, _, _) = rank_unkey(kk);
            let tile = tile_at(&input.maps[i], i, level, idx);
            let orphan = in_target[k]
                && tile.level + 1 < input.maps[i].tail_first
                && !loads.contains(&TileRef {
                    level: tile.level + 1,
                    x: tile.x / 2,
                    y: tile.y / 2,
                    ..tile
                })
                && !resident(
                    i,
                    input.maps[i].index(tile.level + 1, tile.x / 2, tile.y / 2),
                );
            if orphan
                || (ahead_only && ahead_loads >= input.max_ahead_loads)
                || (spare && spare_loads >= input.max_spare_loads)
                || (ring && ring_loads >= input.max_ring_loads)
            {
                if orphan && !spare {
                    missing += 1;
                }
                continue;
            }
            if in_target[k] && loads.len() < input.max_loads {
                loads.push(tile);
                kinds.push(LoadKind::of(
                    ahead_only,
                    spare,
                    cast_scored(cast.as_ref(), i, idx),
                ));
                ahead_loads += usize::from(ahead_only);
                spare_loads += usize::from(spare);
                ring_loads += usize::from(ring);
            } else if present.of(i).1[idx] {
                missing += 1;
            }
        }
        let need = (loads.len() as u64).saturating_sub(input.free_pages) as usize;
        let out: Vec<(u64, u32, usize, usize)> = ranked
            .iter()
            .enumerate()
            .filter(|&(k, &(kk, _))| {
                let (_, i, idx) = rank_unkey(kk);
                !in_target[k] && resident(i, idx)
            })
            .map(|(_, &(kk, score))| {
                let (level, i, idx) = rank_unkey(kk);
                (score, level, i, idx)
            })
            .collect();
        let evictions = choose_evictions(out, need, input.page_keys)
            .iter()
            .map(|&(_, level, i, idx)| tile_at(&input.maps[i], i, level, idx))
            .collect();
        let wanted_loads = (loads.len() - spare_loads) as u64;
        TilePlan {
            loads,
            kinds,
            evictions,
            wanted,
            missing,
            wanted_loads,
        }
    }

    #[test]
    fn nothing_resident_means_the_tail() {
        let maps = vec![map(1024, 128); 3];
        let rm = residency_map(&maps, 8, 0, &empty(&maps));
        let tail = maps[0].tail_first as u8;
        assert!(rm.iter().all(|&l| l
            == CellLevels {
                safe: tail,
                inner: tail
            }));
    }

    #[test]
    fn a_short_budget_keeps_the_coarse_levels_of_what_is_seen() {
        let maps = vec![map(1024, 128); 3];
        let g = 8;
        let wants = vec![0u8; 64];
        let hits = vec![1u32; 64];
        let resident = empty(&maps);
        let input = TileInput {
            free_pages: 3 * (1 + 4 + 16),
            max_loads: usize::MAX,
            ..input(&maps, g, &wants, &hits, &resident)
        };
        let p = plan(&input);
        assert_eq!(p.loads.len(), 63);
        assert!(p.loads.iter().all(|t| t.level >= 1));
        assert_eq!(p.missing, 3 * 64);
    }

    #[test]
    fn hysteresis_keeps_a_resident_tile_against_a_slightly_better_one() {
        let maps = vec![map(256, 128); 3];
        let g = 2;
        // Level 0: 2x2 tiles, every cell's footprint is all of them; tail at 1.
        let wants = vec![0u8; 4];
        // Level 1, one tile, below the tail: resident, as the closure wants.
        let resident: Vec<Vec<bool>> = maps
            .iter()
            .map(|_| vec![true, true, true, false, true])
            .collect();
        let hits = vec![10u32; 4];
        let input = TileInput {
            free_pages: 0,
            max_loads: usize::MAX,
            ..input(&maps, g, &wants, &hits, &resident)
        };
        // Equal scores: the resident tiles win, nothing moves.
        let p = plan(&input);
        assert!(p.loads.is_empty() && p.evictions.is_empty());
    }

    proptest! {
        #[test]
        fn rank_keys_order_as_the_ranking_and_give_their_fields_back(
            a in (any::<u64>(), 0u32..32, 0usize..1 << 24, 0usize..1 << 32),
            b in (any::<u64>(), 0u32..32, 0usize..1 << 24, 0usize..1 << 32),
        ) {
            let ka = rank_key(a.0, a.1, a.2, a.3);
            let kb = rank_key(b.0, b.1, b.2, b.3);
            // Rank and level descending, map and index ascending.
            let order = b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then((a.2, a.3).cmp(&(b.2, b.3)));
            prop_assert_eq!(ka.cmp(&kb), order);
            prop_assert_eq!(rank_unkey(ka), (a.1, a.2, a.3));
        }

        #[test]
        fn in_parallel_gives_what_a_plain_map_gives(
            items in proptest::collection::vec(any::<u32>(), 0..200),
            work in prop_oneof![Just(0usize), Just(PARALLEL_TILES), Just(usize::MAX)],
        ) {
            let f = |&x: &u32| u64::from(x).wrapping_mul(0x9e37_79b9).rotate_left(7);
            let plain: Vec<u64> = items.iter().map(f).collect();
            prop_assert_eq!(in_parallel(&items, work, f), plain);
        }

        #[test]
        fn plans_respect_the_budget_and_the_coarse_first_closure(
            seed_wants in proptest::collection::vec(0u8..8, 3 * 16),
            seed_hits in proptest::collection::vec(0u32..20, 3 * 16),
            seen in proptest::collection::vec(any::<bool>(), 3 * 16),
            free in 0u64..60,
            max_loads in 0usize..80,
            rounds in 1usize..5,
            churn in any::<u64>(),
            ahead_seed in proptest::collection::vec((0u8..6, 0u32..40), 3 * 16),
            max_ahead_loads in 0usize..20,
            max_spare_loads in 0usize..40,
            max_ring_loads in 0usize..40,
            blocked_map in 0usize..12,
            cast_mask in proptest::collection::vec(any::<bool>(), 3 * 16),
            spare_hysteresis in 1u64..20,
            page_seed in any::<u64>(),
        ) {
            let blocked: Vec<bool> = (0..9).map(|i| i == blocked_map).collect();
            let ahead_wants: Vec<u8> = ahead_seed.iter().map(|&(w, _)| if w > 3 { UNSEEN } else { w }).collect();
            let ahead_hits: Vec<u32> = ahead_seed.iter().map(|&(_, h)| h).collect();
            // The present view's cast: some of the look-ahead's cells.
            let cast_wants: Vec<u8> = ahead_wants
                .iter()
                .zip(&cast_mask)
                .map(|(&w, &c)| if c { w } else { UNSEEN })
                .collect();
            let cast_hits: Vec<u32> = ahead_hits
                .iter()
                .zip(&cast_mask)
                .map(|(&h, &c)| if c { h } else { 0 })
                .collect();
            // Three materials of 512-texel maps, 64-texel tiles, 4x4 cells.
            let maps = vec![map(512, 64); 9];
            let g = 4;
            // Page keys with stretches: a few dozen keys over 9 maps' tiles
            // (none for page_seed 0, as the tests without pages).
            let page_keys: Vec<Vec<u64>> = if page_seed == 0 {
                Vec::new()
            } else {
                maps.iter()
                    .enumerate()
                    .map(|(i, m)| {
                        (0..m.tile_count())
                            .map(|t| (page_seed ^ (i * 1000 + t) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58)
                            .collect()
                    })
                    .collect()
            };
            let budget_pages = free;
            let mut resident = empty(&maps);
            let mut wants: Vec<u8> = seed_wants
                .iter()
                .zip(&seen)
                .map(|(&w, &s)| if s { w.min(3) } else { UNSEEN })
                .collect();
            let hits = seed_hits.clone();
            let mut rng = churn;
            for _ in 0..rounds {
                let used: u64 = resident.iter().flatten().map(|&r| u64::from(r)).sum();
                let input = TileInput {
                    blocked: &blocked,
                    free_pages: budget_pages.saturating_sub(used),
                    max_loads,
                    ahead_wants: &ahead_wants,
                    ahead_hits: &ahead_hits,
                    cast_wants: &cast_wants,
                    cast_hits: &cast_hits,
                    max_ahead_loads,
                    max_spare_loads,
                    max_ring_loads,
                    spare_hysteresis,
                    page_keys: &page_keys,
                    ..input(&maps, g, &wants, &hits, &resident)
                };
                let p = plan(&input);
                prop_assert_eq!(&p, &plan_by_full_sort(&input), "the partitioned plan differs");
                // The cast only names kinds: without it the same loads and
                // evictions, the look-ahead's loads all `Ahead`.
                let bare = plan(&TileInput { cast_wants: &[], cast_hits: &[], ..input });
                prop_assert_eq!(&bare.loads, &p.loads);
                prop_assert_eq!(&bare.evictions, &p.evictions);
                for (a, b) in bare.kinds.iter().zip(&p.kinds) {
                    prop_assert_eq!(*a == LoadKind::Ahead, matches!(b, LoadKind::Ahead | LoadKind::Cast));
                    prop_assert!(*a != LoadKind::Cast);
                }
                // A blocked map (its file failed) loads nothing.
                prop_assert!(p.loads.iter().all(|t| !blocked[t.map as usize]));
                // Budget: loads fit the free pages plus the evictions.
                prop_assert!(p.loads.len() as u64 <= input.free_pages + p.evictions.len() as u64);
                prop_assert!(p.loads.len() <= max_loads);
                // A kind per load; the wanted ones counted as such.
                prop_assert_eq!(p.kinds.len(), p.loads.len());
                let wanted_kind = p.kinds.iter().filter(|&&k| k == LoadKind::Wanted).count();
                prop_assert_eq!(wanted_kind as u64, p.wanted_loads);
                prop_assert!(
                    p.kinds.iter().filter(|&&k| matches!(k, LoadKind::Ahead | LoadKind::Cast)).count()
                        <= max_ahead_loads
                );
                for t in &p.evictions {
                    prop_assert!(resident[t.map as usize][maps[t.map as usize].index(t.level, t.x, t.y)]);
                }
                let before = resident.clone();
                apply(&mut resident, &maps, &p);
                // Closure: a loaded tile's parent is resident afterwards.
                for t in &p.loads {
                    prop_assert!(!before[t.map as usize][maps[t.map as usize].index(t.level, t.x, t.y)]);
                    let m = &maps[t.map as usize];
                    if t.level + 1 < m.tail_first {
                        prop_assert!(resident[t.map as usize][m.index(t.level + 1, t.x / 2, t.y / 2)],
                            "parent of {:?} not resident", t);
                    }
                }
                let used: u64 = resident.iter().flatten().map(|&r| u64::from(r)).sum();
                prop_assert!(used <= budget_pages);
                // The residency map never claims a level whose footprint is missing.
                for mat in 0..3 {
                    let rm = residency_map(&maps, g, mat, &resident);
                    for (c, &l) in rm.iter().enumerate() {
                        let (cx, cy) = (c as u32 % g, c as u32 / g);
                        prop_assert!(l.inner <= l.safe);
                        for i in mat * 3..mat * 3 + 3 {
                            let m = &maps[i];
                            for level in u32::from(l.safe)..m.tail_first {
                                for y in m.cell_tiles(level, g, cy, true) {
                                    for x in m.cell_tiles(level, g, cx, false) {
                                        prop_assert!(resident[i][m.index(level, x, y)]);
                                    }
                                }
                            }
                            for level in u32::from(l.inner)..m.tail_first {
                                for y in m.cell_own_tiles(level, g, cy, true) {
                                    for x in m.cell_own_tiles(level, g, cx, false) {
                                        prop_assert!(resident[i][m.index(level, x, y)]);
                                    }
                                }
                            }
                        }
                    }
                }
                // The camera moves: some cells change what they want.
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let c = (rng >> 33) as usize % wants.len();
                wants[c] = if wants[c] == UNSEEN { (rng >> 20) as u8 % 4 } else { UNSEEN };
            }
        }

        /// Page classes (a page atlas's formats): every frame's loads of a
        /// class fit that class's free pages plus its evictions, and each
        /// class stays within its own budget over rounds, whatever the other
        /// classes have free.
        #[test]
        fn plans_keep_each_page_class_within_its_own_pages(
            seed_wants in proptest::collection::vec(0u8..8, 3 * 16),
            seed_hits in proptest::collection::vec(1u32..20, 3 * 16),
            budgets in proptest::collection::vec(0u64..25, 3),
            by_format in any::<bool>(),
            max_loads in 1usize..80,
            rounds in 1usize..5,
            churn in any::<u64>(),
        ) {
            let maps = vec![map(512, 64); 9];
            let g = 4;
            // By format (map i of a material in class i % 3), or one class
            // per material.
            let classes: Vec<u8> = (0..9u8).map(|i| if by_format { i % 3 } else { i / 3 }).collect();
            let mut resident = empty(&maps);
            let mut wants: Vec<u8> = seed_wants.iter().map(|&w| w.min(3)).collect();
            let mut rng = churn;
            for _ in 0..rounds {
                let used = |c: u8, r: &[Vec<bool>]| -> u64 {
                    r.iter().enumerate().filter(|(i, _)| classes[*i] == c)
                        .map(|(_, m)| m.iter().filter(|&&x| x).count() as u64).sum()
                };
                let free_by_class: Vec<u64> = (0..3u8)
                    .map(|c| budgets[c as usize].saturating_sub(used(c, &resident)))
                    .collect();
                let input = TileInput {
                    max_loads,
                    // Read only without classes: a large number shows it is not.
                    free_pages: 10_000,
                    classes: &classes,
                    free_by_class: &free_by_class,
                    ..input(&maps, g, &wants, &seed_hits, &resident)
                };
                let p = plan(&input);
                for c in 0..3u8 {
                    let of = |t: &&TileRef| classes[t.map as usize] == c;
                    let loads = p.loads.iter().filter(of).count() as u64;
                    let evicted = p.evictions.iter().filter(of).count() as u64;
                    prop_assert!(loads <= free_by_class[c as usize] + evicted,
                        "class {}: {} loads for {} free and {} evicted", c, loads, free_by_class[c as usize], evicted);
                }
                for t in &p.evictions {
                    prop_assert!(resident[t.map as usize][maps[t.map as usize].index(t.level, t.x, t.y)]);
                }
                apply(&mut resident, &maps, &p);
                for c in 0..3u8 {
                    prop_assert!(used(c, &resident) <= budgets[c as usize]);
                }
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let c = (rng >> 33) as usize % wants.len();
                wants[c] = if wants[c] == UNSEEN { (rng >> 20) as u8 % 4 } else { UNSEEN };
            }
        }
    }

    /// A class with no free pages and nothing to evict loads nothing, while
    /// the others load; one class gives the plan of no classes.
    #[test]
    fn a_full_class_loads_nothing_and_one_class_plans_as_none() {
        let maps = vec![map(512, 64); 3];
        let wants = vec![0u8; 16];
        let hits = vec![5u32; 16];
        let resident = empty(&maps);
        let classes = [0u8, 1, 2];
        let p = plan(&TileInput {
            max_loads: 100,
            classes: &classes,
            free_by_class: &[10, 0, 10],
            ..input(&maps, 4, &wants, &hits, &resident)
        });
        assert!(p.loads.iter().all(|t| t.map != 1));
        assert_eq!(p.loads.iter().filter(|t| t.map == 0).count(), 10);
        assert_eq!(p.loads.iter().filter(|t| t.map == 2).count(), 10);
        let none = plan(&TileInput {
            max_loads: 100,
            free_pages: 17,
            ..input(&maps, 4, &wants, &hits, &resident)
        });
        let one = plan(&TileInput {
            max_loads: 100,
            free_pages: 0,
            classes: &[0, 0, 0],
            free_by_class: &[17],
            ..input(&maps, 4, &wants, &hits, &resident)
        });
        assert_eq!(none, one);
    }
}
