//! A page atlas for streaming by tiles without sparse binds
//! (`--residency atlas`): a software virtual texture. Each tile of a map's
//! streamed levels is copied, with a border of its neighbours' texels, into
//! a *slot* of an ordinary 2D image of the map's format (one atlas per
//! format, allocated once from the texture pool, inside its hard budget);
//! a *page table* (the words the shaders read at set 0, binding 3, where the
//! sparse streamer keeps its residency map) gives each tile's slot. A load is
//! a copy and an eviction a word of the table: no `vkQueueBindSparse`, whose
//! cost per region was the sparse streamer's frame time on the H200
//! (BENCHMARKS.md). The levels below the streamed ones stay in the texture
//! set's own tail images, sampled as they are.
//!
//! The shaders (`sample_atlas` in `pbr_shade.glsl`) take the sampler's own
//! level of detail from the level probe, walk from its floor level to the
//! finest resident one, and sample that level and the next coarser one, each
//! in its slot with the pixel's gradients (the hardware filters within the
//! level, anisotropy included, over the border), blended by the fraction:
//! measured on the H200 with every level resident, that sampling alone draws
//! every frame within 43.8 dB of the sampler's own (BENCHMARKS.md).
//!
//! This module is the pure part: the atlas's layout, the border's pieces,
//! the slots, the page table's words, and a slot's assembly from a level's
//! blocks. The images and copies are in [`super::TileStreamer`].
#![forbid(unsafe_code)]

use material_baker::ktx2::Format;

/// Texels of each neighbour copied around a tile in its slot: the filter's
/// reach past the tile at the level it samples (a bilinear texel and half of
/// an anisotropic footprint of up to 8 texels at the demo's 4x).
pub const BORDER_TEXELS: u32 = 4;
/// A tile's bytes, at most: 64 KiB, the sparse page of the tile streamer.
pub const TILE_BYTES: u64 = 64 << 10;
/// Words before the maps' entries in the page table: the level probe's
/// element in the bindless array, and the count of maps.
pub const HEADER_WORDS: usize = 2;
/// Words per map in the page table's header ([`MapEntry::words`]).
pub const MAP_WORDS: usize = 4;
/// A tile without a slot.
pub const NO_SLOT: u32 = u32::MAX;

/// The largest power-of-two tile side (16 to 1024 texels) whose level bytes
/// are at most [`TILE_BYTES`] in every one of `formats`: 256 for BC7 and
/// BC5, 128 for RGBA8 and RG8.
pub fn tile_side(formats: impl IntoIterator<Item = Format>) -> u32 {
    let mut side = 1024;
    for f in formats {
        while side > 16 && f.level_bytes(side, side) > TILE_BYTES {
            side /= 2;
        }
    }
    side
}

/// The side in texels of the largest level every map of `formats` keeps in
/// the texture set's own images (its tail, always resident): the levels
/// narrower than a tile ([`tile_side`]), 128 texels for BC7/BC5 (256-texel
/// tiles), 64 for RGBA8/RG8 (128-texel tiles); the levels of a tile or more
/// are tiles, in slots only where a view wants them. The tails are a cost
/// every material pays seen or not, so it grows with the number of
/// materials inside one budget: at a quarter of a tile's bytes a map (with
/// its coarser levels, a third) they stay a small part of it. With 128
/// texels for RGBA8 (a whole tile kept per map, seen or not) 64 materials
/// of 512-texel maps took 13.3 MiB of tails, more than the 8 MiB 16 of them
/// stream at (docs/experiments/page-atlas.md, *64 materials at the budget of
/// 16*).
pub fn tail_texels(formats: impl IntoIterator<Item = Format>) -> u32 {
    tile_side(formats) / 2
}

/// Where slots are in one atlas image: `per_row` x `rows` slots of
/// `tile + 2 * border` texels a side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtlasLayout {
    /// A tile's side in texels.
    pub tile: u32,
    /// Border texels on each side of a tile.
    pub border: u32,
    /// Slots per row.
    pub per_row: u32,
    /// Rows of slots.
    pub rows: u32,
}

impl AtlasLayout {
    /// The layout of at most `max_slots` slots in an image of at most
    /// `max_dim` texels a side with the most slots, the squarer of equals:
    /// `None` when not one slot fits.
    pub fn fit(tile: u32, border: u32, max_slots: u64, max_dim: u32) -> Option<Self> {
        let side = tile.checked_add(border.checked_mul(2)?)?;
        let most = u64::from(max_dim / side.max(1));
        if most == 0 || max_slots == 0 {
            return None;
        }
        let mut best: Option<(u64, u64, u64)> = None;
        for per_row in 1..=most.min(max_slots) {
            let rows = (max_slots / per_row).min(most);
            let slots = per_row * rows;
            let skew = per_row.abs_diff(rows);
            if rows > 0 && best.is_none_or(|(s, _, k)| slots > s || (slots == s && skew < k)) {
                best = Some((slots, per_row, skew));
            }
        }
        let (slots, per_row, _) = best?;
        Some(Self {
            tile,
            border,
            per_row: per_row as u32,
            rows: (slots / per_row) as u32,
        })
    }

    /// A slot's side in texels.
    pub fn side(&self) -> u32 {
        self.tile + 2 * self.border
    }

    /// Slots in the image.
    pub fn slots(&self) -> u32 {
        self.per_row * self.rows
    }

    /// The image's width and height in texels.
    pub fn extent(&self) -> (u32, u32) {
        (self.per_row * self.side(), self.rows * self.side())
    }

    /// Slot `slot`'s top-left texel (its border's).
    pub fn origin(&self, slot: u32) -> (u32, u32) {
        (
            (slot % self.per_row.max(1)) * self.side(),
            (slot / self.per_row.max(1)) * self.side(),
        )
    }
}

/// The level-texel range `[start, start + len)` (`start` may be negative),
/// wrapped into `[0, side)` as the sampler's repeat addressing wraps it: the
/// pieces `(source start, offset in the range, length)`, in order.
pub fn wrap_pieces(start: i64, len: u32, side: u32) -> Vec<(u32, u32, u32)> {
    let mut out = Vec::new();
    if side == 0 {
        return out;
    }
    let side64 = i64::from(side);
    let mut done = 0u32;
    while done < len {
        let src = (start + i64::from(done)).rem_euclid(side64) as u32;
        let n = (side - src).min(len - done);
        out.push((src, done, n));
        done += n;
    }
    out
}

/// Fills `slot` (a slot of `layout`, row-major blocks of `block_bytes`
/// bytes, `block` texels a side) with tile `(tx, ty)` of a level `side`
/// texels a side and its border, wrapped. `read(xy, wh, out)` reads the
/// level's blocks `xy .. xy + wh` into `out` (row-major, tight). The
/// border and tile must be whole blocks.
pub fn assemble_slot<E>(
    layout: &AtlasLayout,
    block: u32,
    block_bytes: usize,
    side: u32,
    (tx, ty): (u32, u32),
    slot: &mut [u8],
    mut read: impl FnMut((u32, u32), (u32, u32), &mut [u8]) -> Result<(), E>,
) -> Result<(), E> {
    let b = block.max(1);
    let span = layout.side();
    let pitch = (span / b) as usize * block_bytes;
    let start = |t: u32| i64::from(t * layout.tile) - i64::from(layout.border);
    let xs = wrap_pieces(start(tx), span, side);
    let ys = wrap_pieces(start(ty), span, side);
    let mut piece = Vec::new();
    for &(sy, oy, h) in &ys {
        for &(sx, ox, w) in &xs {
            let (bw, bh) = ((w / b) as usize, (h / b) as usize);
            piece.resize(bw * bh * block_bytes, 0);
            read((sx / b, sy / b), (w / b, h / b), &mut piece)?;
            for row in 0..bh {
                let dst = (oy / b) as usize * pitch + row * pitch + (ox / b) as usize * block_bytes;
                let src = row * bw * block_bytes;
                slot[dst..dst + bw * block_bytes]
                    .copy_from_slice(&piece[src..src + bw * block_bytes]);
            }
        }
    }
    Ok(())
}

/// Waves a frame's copies into the atlases go in, a barrier between waves
/// ([`copy_wave`]).
pub const COPY_WAVES: u32 = 4;

/// The wave of the copy into a slot of slot column `column`: copies of one
/// wave are at least [`COPY_WAVES`] columns apart. Copies into distinct
/// slots need no barrier between them, but the Khronos validation layer
/// before 1.3.280 (Debian 12 ships 1.3.239) places a block-compressed
/// region's start at its x offset times the texel size instead of its block
/// size (KhronosGroup/Vulkan-ValidationLayers#3894, fixed by #7713): a
/// 264-texel BC7 slot then reaches 4 slots to its right, and synchronization
/// validation reported copies into side-by-side slots as write-after-write
/// hazards (15,013 on the H200, 58 on lavapipe with BC maps). Three barriers
/// a frame keep every validated run clean.
pub fn copy_wave(column: u32) -> u32 {
    column % COPY_WAVES
}

/// The free slots of each atlas.
#[derive(Clone, Debug, Default)]
pub struct Slots {
    free: Vec<Vec<u32>>,
    total: Vec<u32>,
}

impl Slots {
    /// `counts[k]` slots in atlas `k`, all free.
    pub fn new(counts: &[u32]) -> Self {
        Self {
            // Popped from the end: the lowest slots first.
            free: counts.iter().map(|&n| (0..n).rev().collect()).collect(),
            total: counts.to_vec(),
        }
    }

    /// A free slot of atlas `atlas`, taken; `None` when it has none.
    pub fn take(&mut self, atlas: usize) -> Option<u32> {
        self.free.get_mut(atlas)?.pop()
    }

    /// Gives `slot` of atlas `atlas` back.
    pub fn give(&mut self, atlas: usize, slot: u32) {
        if let Some(f) = self.free.get_mut(atlas) {
            debug_assert!(slot < self.total[atlas] && !f.contains(&slot));
            f.push(slot);
        }
    }

    /// Free slots of atlas `atlas`.
    pub fn free(&self, atlas: usize) -> usize {
        self.free.get(atlas).map_or(0, Vec::len)
    }

    /// Slots of atlas `atlas` in use.
    pub fn used(&self, atlas: usize) -> usize {
        self.total.get(atlas).map_or(0, |&t| t as usize) - self.free(atlas)
    }

    /// Free slots of every atlas.
    pub fn free_total(&self) -> usize {
        self.free.iter().map(Vec::len).sum()
    }
}

/// One map's words in the page table's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapEntry {
    /// The word of its first tile's entry (level 0, row 0, column 0; then
    /// by level, row and column, as [`super::geometry::MapTiles::index`]).
    pub base: u32,
    /// Level 0's side in texels (below 2^24).
    pub size: u32,
    /// Its first tail level (below 256): sampled from its own image.
    pub tail_first: u32,
    /// Tile side in texels (below 2^16).
    pub tile: u32,
    /// Border texels (below 2^16).
    pub border: u32,
    /// Its atlas's element in the bindless array (below 2^16).
    pub atlas_element: u32,
    /// Slots per row of its atlas (below 2^16).
    pub per_row: u32,
}

impl MapEntry {
    /// The four words `sample_atlas` reads: base; size | tail_first << 24;
    /// tile | border << 16; atlas element | slots per row << 16.
    pub fn words(&self) -> [u32; MAP_WORDS] {
        [
            self.base,
            (self.size & 0xff_ffff) | (self.tail_first.min(255) << 24),
            (self.tile & 0xffff) | (self.border.min(0xffff) << 16),
            (self.atlas_element & 0xffff) | (self.per_row.min(0xffff) << 16),
        ]
    }
}

/// The page table's words with every entry empty: the header (the level
/// probe's element, the maps' count, each map's [`MapEntry::words`]) and
/// `entries` zero words. An entry is its tile's slot plus one, or 0 for a
/// tile not resident.
pub fn page_table(probe_element: u32, maps: &[MapEntry], entries: usize) -> Vec<u32> {
    let mut words = Vec::with_capacity(HEADER_WORDS + maps.len() * MAP_WORDS + entries);
    words.push(probe_element);
    words.push(maps.len() as u32);
    for m in maps {
        words.extend_from_slice(&m.words());
    }
    words.resize(words.len() + entries, 0);
    words
}

/// The atlas's bookkeeping apart from its images: which slot each tile
/// holds, each atlas's free slots, and the page table's words. Invariants
/// (property-tested): a slot is held by at most one tile, and is free
/// exactly when no tile holds it; a tile's page-table entry is its slot + 1
/// exactly while it is resident and holds a slot, 0 otherwise.
#[derive(Clone, Debug)]
pub struct SlotTable {
    /// Per map: its atlas (its page class).
    of_map: Vec<usize>,
    /// Per atlas: a slot's bytes.
    slot_bytes: Vec<u64>,
    slots: Slots,
    /// Per map, per tile: its slot, [`NO_SLOT`] for none.
    slot_of: Vec<Vec<u32>>,
    /// The page table ([`page_table`]).
    table: Vec<u32>,
    /// Per map: the word of its first entry in `table`.
    bases: Vec<usize>,
}

impl SlotTable {
    /// Maps `of_map[i]`'s atlas with `tile_counts[i]` tiles, `slots` slots
    /// in every atlas of `slot_bytes[k]` bytes each; `table` the page table
    /// with every entry 0 and map `i`'s first entry at word `bases[i]`.
    pub fn new(
        of_map: Vec<usize>,
        tile_counts: &[usize],
        slots: u32,
        slot_bytes: Vec<u64>,
        table: Vec<u32>,
        bases: Vec<usize>,
    ) -> Self {
        Self {
            slots: Slots::new(&vec![slots; slot_bytes.len()]),
            slot_of: tile_counts.iter().map(|&n| vec![NO_SLOT; n]).collect(),
            of_map,
            slot_bytes,
            table,
            bases,
        }
    }

    /// Map `map`'s atlas.
    pub fn atlas_of(&self, map: usize) -> usize {
        self.of_map.get(map).copied().unwrap_or(0)
    }

    /// Per map: its page class ([`super::policy::TileInput::classes`]).
    pub fn classes(&self) -> Vec<u8> {
        self.of_map.iter().map(|&k| k as u8).collect()
    }

    /// Per atlas: its free slots ([`super::policy::TileInput::free_by_class`]).
    pub fn free_by_class(&self) -> Vec<u64> {
        (0..self.slot_bytes.len())
            .map(|k| self.slots.free(k) as u64)
            .collect()
    }

    /// Free slots of every atlas.
    pub fn free_total(&self) -> usize {
        self.slots.free_total()
    }

    /// Of the loads (by map, in order), which the atlases have free slots
    /// for, counting each load's slot as taken.
    pub fn accept(&self, maps: impl IntoIterator<Item = usize>) -> Vec<bool> {
        let mut free: Vec<usize> = (0..self.slot_bytes.len())
            .map(|k| self.slots.free(k))
            .collect();
        maps.into_iter()
            .map(|m| {
                let f = &mut free[self.atlas_of(m)];
                let ok = *f > 0;
                *f -= usize::from(ok);
                ok
            })
            .collect()
    }

    /// Tile `idx` of map `map` takes a free slot of its atlas: the slot's
    /// bytes, or `None` when it holds one already or its atlas has none.
    pub fn take(&mut self, map: usize, idx: usize) -> Option<u64> {
        let k = self.atlas_of(map);
        let held = self.slot_of.get(map)?.get(idx)?;
        if *held != NO_SLOT {
            return None;
        }
        let slot = self.slots.take(k)?;
        self.slot_of[map][idx] = slot;
        Some(self.slot_bytes[k])
    }

    /// Tile `idx` of map `map` gives its slot back (its entry cleared): the
    /// slot's bytes, 0 when it held none.
    pub fn release(&mut self, map: usize, idx: usize) -> u64 {
        let k = self.atlas_of(map);
        let Some(held) = self.slot_of.get_mut(map).and_then(|m| m.get_mut(idx)) else {
            return 0;
        };
        let slot = std::mem::replace(held, NO_SLOT);
        self.set_entry(map, idx, 0);
        if slot == NO_SLOT {
            return 0;
        }
        self.slots.give(k, slot);
        self.slot_bytes[k]
    }

    /// Tile `idx` of map `map` resident or not: its entry names its slot
    /// only while both hold.
    pub fn set_resident(&mut self, map: usize, idx: usize, resident: bool) {
        let entry = match self.slot(map, idx) {
            Some(s) if resident => s + 1,
            _ => 0,
        };
        self.set_entry(map, idx, entry);
    }

    fn set_entry(&mut self, map: usize, idx: usize, entry: u32) {
        if let Some(w) = self
            .bases
            .get(map)
            .and_then(|&b| self.table.get_mut(b + idx))
        {
            *w = entry;
        }
    }

    /// The slot tile `idx` of map `map` holds.
    pub fn slot(&self, map: usize, idx: usize) -> Option<u32> {
        let s = *self.slot_of.get(map)?.get(idx)?;
        (s != NO_SLOT).then_some(s)
    }

    /// Bytes of the slots map `map`'s tiles hold.
    pub fn map_bytes(&self, map: usize) -> u64 {
        let held = self
            .slot_of
            .get(map)
            .map_or(0, |m| m.iter().filter(|&&s| s != NO_SLOT).count());
        held as u64
            * self
                .slot_bytes
                .get(self.atlas_of(map))
                .copied()
                .unwrap_or(0)
    }

    /// The page table's words.
    pub fn table(&self) -> &[u32] {
        &self.table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_are_64_kib_at_most_in_every_format() {
        assert_eq!(tile_side([Format::Bc7Srgb, Format::Bc5Unorm]), 256);
        assert_eq!(tile_side([Format::Rgba8Srgb]), 128);
        assert_eq!(tile_side([Format::Rg8Unorm]), 128);
        assert_eq!(tile_side([Format::Bc7Srgb, Format::Rgba8Unorm]), 128);
    }

    #[test]
    fn tails_are_the_levels_narrower_than_a_tile() {
        let bc = [Format::Bc7Srgb, Format::Bc5Unorm, Format::Bc7Unorm];
        let plain = [Format::Rgba8Srgb, Format::Rg8Unorm, Format::Rgba8Unorm];
        assert_eq!(tail_texels(bc), 128);
        assert_eq!(tail_texels(plain), 64);
        // A tail is at most a quarter of a tile's bytes at its finest level.
        for formats in [&bc[..], &plain[..]] {
            let (tile, tail) = (
                tile_side(formats.iter().copied()),
                tail_texels(formats.iter().copied()),
            );
            for f in formats {
                assert_eq!(4 * f.level_bytes(tail, tail), f.level_bytes(tile, tile));
            }
        }
    }

    #[test]
    fn layouts_fit_the_slots_and_the_image_limit() {
        let l = AtlasLayout::fit(256, 4, 3000, 16384).unwrap();
        assert_eq!(l.side(), 264);
        // 3000 = 50 x 60: every slot asked for, the squarest such shape
        // (62 slots a side at most).
        assert_eq!((l.per_row, l.rows, l.slots()), (50, 60, 3000), "{l:?}");
        // A prime count: one slot short (2 x 613 = 1226 does not fit 62 a side).
        let p = AtlasLayout::fit(256, 4, 1229, 16384).unwrap();
        assert!(p.slots() <= 1229 && p.slots() >= 1220, "{p:?}");
        let (w, h) = l.extent();
        assert!(w <= 16384 && h <= 16384);
        // More slots than the image limit holds: clamped to it.
        let big = AtlasLayout::fit(256, 4, 1 << 20, 16384).unwrap();
        assert_eq!((big.per_row, big.rows), (62, 62));
        assert_eq!(AtlasLayout::fit(256, 4, 0, 16384), None);
        assert_eq!(AtlasLayout::fit(256, 4, 10, 200), None);
        // Slots do not overlap and stay inside the image.
        let s = AtlasLayout::fit(16, 2, 10, 1000).unwrap();
        let mut seen = std::collections::HashSet::new();
        for k in 0..s.slots() {
            let (x, y) = s.origin(k);
            assert!(x + s.side() <= s.extent().0 && y + s.side() <= s.extent().1);
            assert!(seen.insert((x, y)));
        }
    }

    #[test]
    fn wrapped_pieces_cover_the_range_in_order() {
        assert_eq!(wrap_pieces(-4, 264, 1024), vec![(1020, 0, 4), (0, 4, 260)]);
        assert_eq!(
            wrap_pieces(764, 264, 1024),
            vec![(764, 0, 260), (0, 260, 4)]
        );
        assert_eq!(wrap_pieces(252, 264, 1024), vec![(252, 0, 264)]);
        // A level of one tile: both borders wrap onto it.
        assert_eq!(
            wrap_pieces(-4, 264, 256),
            vec![(252, 0, 4), (0, 4, 256), (0, 260, 4)]
        );
        for (start, len, side) in [(-7i64, 100u32, 16u32), (30, 5, 16), (0, 0, 8)] {
            let p = wrap_pieces(start, len, side);
            assert_eq!(p.iter().map(|x| x.2).sum::<u32>(), len);
            for &(src, off, n) in &p {
                for i in 0..n {
                    let want = (start + i64::from(off + i)).rem_euclid(i64::from(side));
                    assert_eq!(i64::from((src + i) % side), want);
                }
            }
        }
    }

    /// Every texel of an assembled slot is the level's texel at its wrapped
    /// position: the tile's own inside, its neighbours' in the border.
    #[test]
    fn a_slot_holds_its_tile_and_the_wrapped_border() {
        for (block, block_bytes, side, tile, border) in [
            (1u32, 1usize, 64u32, 16u32, 4u32),
            (4, 2, 64, 32, 4),
            (1, 1, 16, 16, 4),
        ] {
            let layout = AtlasLayout {
                tile,
                border,
                per_row: 1,
                rows: 1,
            };
            let cols = side / block;
            // Block (x, y)'s bytes: x, y (and x again for a third byte).
            let level: Vec<u8> = (0..cols * cols)
                .flat_map(|i| {
                    let (x, y) = (i % cols, i / cols);
                    [x as u8, y as u8].into_iter().cycle().take(block_bytes)
                })
                .collect();
            let span = layout.side() / block;
            for (tx, ty) in [
                (0, 0),
                (side / tile - 1, 0),
                (1 % (side / tile), side / tile - 1),
            ] {
                let mut slot = vec![0u8; (span * span) as usize * block_bytes];
                assemble_slot(
                    &layout,
                    block,
                    block_bytes,
                    side,
                    (tx, ty),
                    &mut slot,
                    |(x, y), (w, h), out: &mut [u8]| {
                        assert_eq!(out.len(), (w * h) as usize * block_bytes);
                        assert!(x + w <= cols && y + h <= cols);
                        for r in 0..h {
                            let src = (((y + r) * cols + x) as usize) * block_bytes;
                            let n = w as usize * block_bytes;
                            out[(r * w) as usize * block_bytes..][..n]
                                .copy_from_slice(&level[src..src + n]);
                        }
                        Ok::<(), ()>(())
                    },
                )
                .unwrap();
                for sy in 0..span {
                    for sx in 0..span {
                        let gx = (i64::from(tx * tile / block + sx) - i64::from(border / block))
                            .rem_euclid(i64::from(cols));
                        let gy = (i64::from(ty * tile / block + sy) - i64::from(border / block))
                            .rem_euclid(i64::from(cols));
                        let at = ((sy * span + sx) as usize) * block_bytes;
                        assert_eq!(slot[at], gx as u8, "slot ({sx}, {sy}) of tile ({tx}, {ty})");
                        if block_bytes > 1 {
                            assert_eq!(slot[at + 1], gy as u8);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn slots_are_taken_lowest_first_and_given_back() {
        let mut s = Slots::new(&[3, 1]);
        assert_eq!(s.free_total(), 4);
        assert_eq!((s.take(0), s.take(0)), (Some(0), Some(1)));
        assert_eq!(s.take(1), Some(0));
        assert_eq!(s.take(1), None);
        assert_eq!(s.take(7), None);
        assert_eq!((s.used(0), s.free(0)), (2, 1));
        s.give(0, 0);
        assert_eq!(s.take(0), Some(0));
        assert_eq!(s.free_total(), 1);
    }

    #[test]
    fn the_page_table_header_packs_each_map() {
        let m = MapEntry {
            base: 10,
            size: 8192,
            tail_first: 6,
            tile: 256,
            border: 4,
            atlas_element: 48,
            per_row: 49,
        };
        let w = page_table(50, &[m, m], 5);
        assert_eq!(w.len(), HEADER_WORDS + 2 * MAP_WORDS + 5);
        assert_eq!(&w[..2], &[50, 2]);
        assert_eq!(
            &w[2..6],
            &[10, 8192 | (6 << 24), 256 | (4 << 16), 48 | (49 << 16)]
        );
        assert!(w[10..].iter().all(|&x| x == 0));
    }

    proptest::proptest! {
        /// Random takes, releases and residency changes over two atlases:
        /// no slot is held twice, free and held slots add up, and each
        /// entry names its tile's slot exactly while it is resident.
        #[test]
        fn slots_are_held_once_and_entries_follow_residency(
            ops in proptest::collection::vec((0u8..3, 0usize..4, 0usize..6), 0..200),
            slots in 1u32..6,
        ) {
            let counts = [6usize, 6, 6, 6];
            let of_map = vec![0, 1, 0, 1];
            let bases: Vec<usize> = (0..4).map(|i| 10 + i * 6).collect();
            let mut t = SlotTable::new(of_map.clone(), &counts, slots, vec![100, 50], vec![0; 34], bases.clone());
            let mut resident = [[false; 6]; 4];
            for (op, map, idx) in ops {
                match op {
                    0 => {
                        let before = t.slot(map, idx);
                        let got = t.take(map, idx);
                        proptest::prop_assert_eq!(got.is_some(), before.is_none() && t.slot(map, idx).is_some());
                    }
                    1 => {
                        t.release(map, idx);
                        resident[map][idx] = false;
                    }
                    _ => {
                        let r = t.slot(map, idx).is_some();
                        t.set_resident(map, idx, r);
                        resident[map][idx] = r;
                    }
                }
                for k in 0..2 {
                    let mut held: Vec<u32> = (0..4)
                        .filter(|&m| of_map[m] == k)
                        .flat_map(|m| (0..6).map(move |i| (m, i)))
                        .filter_map(|(m, i)| t.slot(m, i))
                        .collect();
                    let n = held.len();
                    held.sort_unstable();
                    held.dedup();
                    proptest::prop_assert_eq!(held.len(), n, "a slot held twice");
                    proptest::prop_assert!(held.iter().all(|&s| s < slots));
                    proptest::prop_assert_eq!(n + t.free_by_class()[k] as usize, slots as usize);
                }
                for (m, row) in resident.iter().enumerate() {
                    for (i, &r) in row.iter().enumerate() {
                        let want = match t.slot(m, i) {
                            Some(s) if r => s + 1,
                            _ => 0,
                        };
                        proptest::prop_assert_eq!(t.table()[bases[m] + i], want);
                    }
                }
            }
        }
    }

    #[test]
    fn loads_are_accepted_while_their_atlas_has_slots() {
        let mut t = SlotTable::new(vec![0, 1], &[4, 4], 2, vec![1, 1], vec![0; 8], vec![0, 4]);
        assert_eq!(
            t.accept([0, 1, 0, 0, 1, 1]),
            vec![true, true, true, false, true, false]
        );
        assert_eq!(t.take(0, 0), Some(1));
        assert_eq!(t.take(0, 0), None, "a tile holding a slot takes none");
        assert_eq!(t.accept([0, 0]), vec![true, false]);
        assert_eq!(t.map_bytes(0), 1);
        assert_eq!(t.release(0, 0), 1);
        assert_eq!(t.release(0, 0), 0);
        assert_eq!(t.free_total(), 4);
    }
}
