//! The residency map the shaders sample with: per cell, the levels
//! resident around it; and the feedback's cells read back.

use super::*;

/// Wanted levels and hits of `materials` materials' cells from the feedback
/// words (`lod x16`, hits per cell), as [`policy`] takes them.
pub fn cells_from_feedback(words: &[u32]) -> (Vec<u8>, Vec<u32>) {
    let mut wants = Vec::with_capacity(words.len() / 2);
    let mut hits = Vec::with_capacity(words.len() / 2);
    for c in words.chunks_exact(2) {
        wants.push(if c[1] == 0 || c[0] == u32::MAX {
            UNSEEN
        } else {
            (c[0] / 16).min(u32::from(UNSEEN) - 1) as u8
        });
        hits.push(c[1]);
    }
    (wants, hits)
}

/// The residency map the shaders read ([`sample::CellLevels::word`] per
/// material and cell), its buffers, and the cell grid it is laid out in.
pub(super) struct ResidencyMap {
    /// Cells per side of a material's grid.
    pub(super) g: u32,
    /// Per material: its tiles changed since the residency map's last refresh.
    pub(super) changed: Vec<bool>,
    /// The maps' footprints in the cell grid, for the residency map's
    /// refreshes (built once the layouts and the grid are known).
    pub(super) footprints: policy::Footprints,
    /// Per material, per cell: the level the shaders may sample down to.
    pub(super) words: Vec<u32>,
    /// The host copy the map (with a page atlas, the page table) is written
    /// to, for the copies' submission.
    pub(super) host: Option<MappedBuffer>,
    /// The buffer the shaders read (set 0, binding 3).
    pub(super) gpu: Option<Buffer>,
    /// The map changed since its last upload.
    pub(super) dirty: bool,
}

impl ResidencyMap {
    /// Recomputes the residency map of the materials whose tiles changed
    /// since the last refresh (all of them the first time): with 64 materials
    /// on the H200 the whole map took 10.5 ms a frame.
    pub(super) fn refresh(&mut self, maps: &[MapTiles], resident: &[Vec<bool>]) {
        let cells = (self.g * self.g) as usize;
        let materials = maps.len() / policy::MAPS_PER_MATERIAL;
        self.changed.resize(materials, true);
        // The changed materials' maps, shared over threads (each material's
        // words are its own slice): with 64 materials on the H200, 1,100 tile
        // loads a frame touch most of them.
        let mut changed: Vec<(usize, &mut [u32])> = self
            .words
            .chunks_mut(cells.max(1))
            .enumerate()
            .take(materials)
            .filter(|(m, _)| std::mem::take(&mut self.changed[*m]))
            .collect();
        let fp = &self.footprints;
        let refresh = |(m, words): &mut (usize, &mut [u32])| {
            let rm = policy::residency_map_in(fp, maps, *m, resident);
            for (w, l) in words.iter_mut().zip(rm) {
                *w = l.word();
            }
        };
        // A few materials take about 100 microseconds each at 8K: on rayon's
        // pool past 4 of them.
        if changed.len() <= 4 {
            changed.iter_mut().for_each(refresh);
        } else {
            changed.par_iter_mut().for_each(refresh);
        }
        #[cfg(debug_assertions)]
        for m in 0..materials {
            let full = policy::residency_map(maps, self.g, m, resident);
            debug_assert!(
                self.words[m * cells..(m + 1) * cells]
                    .iter()
                    .zip(&full)
                    .all(|(&w, &l)| w == l.word()),
                "material {m}: residency map out of date"
            );
        }
        self.dirty = true;
    }
}

impl TileStreamer {
    /// Sets tile `t` resident or not, and marks its material's residency map
    /// for the next [`ResidencyMap::refresh`].
    pub(super) fn set_resident(&mut self, t: TileRef, resident: bool) {
        let idx = self.maps[t.map as usize].index(t.level, t.x, t.y);
        self.residency.resident[t.map as usize][idx] = resident;
        if let Some(a) = self.atlas.as_mut() {
            // The page table names a tile's slot once its copy is recorded
            // (the table's upload follows the copies), never before.
            a.slots.set_resident(t.map as usize, idx, resident);
        }
        let m = t.map as usize / policy::MAPS_PER_MATERIAL;
        if let Some(c) = self.residency_map.changed.get_mut(m) {
            *c = true;
        }
    }

    /// The residency map the next frame draws with, per material and cell
    /// ([`sample::CellLevels::word`]).
    pub fn map(&self) -> &[u32] {
        &self.residency_map.words
    }

    /// The residency map buffer (set 0, binding 3) and its size.
    pub fn map_buffer(&self) -> (vk::Buffer, u64) {
        self.residency_map
            .gpu
            .as_ref()
            .map_or((vk::Buffer::null(), 0), |b| (b.raw(), b.size()))
    }

    /// Map `i`'s finest level with a tile resident (the first level of its
    /// always-resident tail when none) and the bytes of its tile pages.
    pub fn map_residency(&self, i: usize) -> (u32, u64) {
        let (Some(m), Some(res), Some(pages)) = (
            self.maps.get(i),
            self.residency.resident.get(i),
            self.residency.pages.get(i),
        ) else {
            return (0, 0);
        };
        let finest = (0..m.tail_first)
            .find(|&l| {
                let start = m.level_start(l);
                let (w, h) = m.grid(l);
                res[start..start + (w * h) as usize].iter().any(|&r| r)
            })
            .unwrap_or(m.tail_first);
        let bytes = match self.atlas.as_ref() {
            Some(a) => a.slots.map_bytes(i),
            None => pages.iter().flatten().map(Allocation::size).sum(),
        };
        (finest, bytes)
    }
}
