//! A read-only mapping of a material's KTX2 file, from which the tile reads
//! copy their rows: a tile of an 8K BC map is 64 rows of 1 KiB, 32 KiB apart
//! in the file, and one positioned read per row cost about a microsecond each
//! (`upload_ms` 3.1 of the render thread's 7.2 ms of streaming at 512 MiB on
//! the H200: BENCHMARKS.md). From a mapping a row is a `memcpy`, and a page
//! once faulted in stays mapped for the run.
//!
//! The mapping is the only `unsafe` here: see [`MappedFile::open`]. Every
//! copy is a bounds-checked slice of the mapping, its rows computed and
//! checked by the reader ([`Reader::rect_rows`], [`RectRows::spans`]).

use std::fs::File;

#[cfg(doc)]
use material_baker::ktx2::RectRows;
use material_baker::ktx2::{KtxError, Reader};

/// One KTX2 file mapped read-only.
pub struct MappedFile {
    map: memmap2::Mmap,
}

impl MappedFile {
    /// Maps `reader`'s file read-only.
    ///
    /// # Errors
    /// The reason, when the file cannot be mapped or is shorter than the
    /// levels the reader indexed (a file cut after the reader opened it): the
    /// caller then reads through `reader`.
    ///
    /// # Contract
    /// The demo's baked files must not be cut in place while it runs: a
    /// mapped page past a file's new end raises `SIGBUS` when touched. The
    /// baker never does (`ktx2::write` writes a temporary file and renames it
    /// over the old one, whose mapping keeps the old file), so another run
    /// baking the same cache is safe; a file truncated by hand is not.
    pub fn open(reader: &Reader) -> Result<Self, String> {
        let path = reader.path();
        let file = File::open(path).map_err(|e| format!("{path}: {e}"))?;
        // SAFETY: a read-only, private mapping of a file the demo's baker
        // wrote; the baker replaces files by rename, never in place, so the
        // mapped file keeps its bytes and length while mapped (the contract
        // above covers a file cut by hand). The bytes are plain data copied
        // out through bounds-checked slices; no reference into the mapping
        // outlives a copy.
        let map = unsafe { memmap2::MmapOptions::new().map_copy_read_only(&file) }
            .map_err(|e| format!("{path}: cannot map: {e}"))?;
        let end = reader
            .levels
            .iter()
            .map(|l| l.offset.saturating_add(l.length))
            .max()
            .unwrap_or(0);
        if (map.len() as u64) < end {
            return Err(format!(
                "{path}: {} bytes mapped, its levels end at {end}",
                map.len()
            ));
        }
        Ok(Self { map })
    }

    /// As [`Reader::read_level_rect_into`], copying each row out of the
    /// mapping.
    ///
    /// # Errors
    /// What [`Reader::rect_rows`] refuses, and [`KtxError::Invalid`] for a
    /// row past the mapping (not reached for a file mapped whole).
    pub fn read_level_rect_into(
        &self,
        reader: &Reader,
        level: usize,
        xy: (u32, u32),
        wh: (u32, u32),
        out: &mut [u8],
    ) -> Result<(), KtxError> {
        let rows = reader.rect_rows(level, xy, wh, out.len())?;
        let row = rows.row as usize;
        for (at, dst) in rows.spans(out) {
            let src = usize::try_from(at)
                .ok()
                .and_then(|at| self.map.get(at..at.checked_add(row)?))
                .ok_or_else(|| KtxError::Invalid {
                    path: reader.path().to_owned(),
                    what: format!("rows up to byte {} run past the mapping", rows.end()),
                })?;
            dst.copy_from_slice(src);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use material_baker::ktx2::Format;

    #[test]
    fn mapped_rectangles_equal_positioned_reads() {
        let dir = std::env::temp_dir().join(format!("mapped-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.ktx2");
        // A 64x64 BC7 map (16x16 blocks), 7 levels, bytes that differ by place.
        let format = Format::Bc7Srgb;
        let levels: Vec<Vec<u8>> = (0..7u32)
            .map(|i| {
                let s = (64u32 >> i).max(1);
                (0..format.level_bytes(s, s))
                    .map(|b| (b as u32).wrapping_mul(31).wrapping_add(i * 7) as u8)
                    .collect()
            })
            .collect();
        material_baker::ktx2::write(&path, format, 64, 64, &levels).unwrap();
        let reader = Reader::open(&path).unwrap();
        let mapped = MappedFile::open(&reader).unwrap();
        for (level, xy, wh) in [
            (0, (0, 0), (16, 16)),
            (0, (3, 5), (7, 2)),
            (1, (4, 0), (4, 8)),
            (2, (1, 1), (3, 3)),
        ] {
            let bytes = (wh.0 * wh.1 * 16) as usize;
            let (mut a, mut b) = (vec![0u8; bytes], vec![1u8; bytes]);
            reader.read_level_rect_into(level, xy, wh, &mut a).unwrap();
            mapped
                .read_level_rect_into(&reader, level, xy, wh, &mut b)
                .unwrap();
            assert_eq!(a, b, "level {level} at {xy:?}, {wh:?}");
        }
        // Refused alike: past the level, or the wrong length.
        let mut out = vec![0u8; 16 * 4];
        assert!(mapped
            .read_level_rect_into(&reader, 0, (14, 0), (4, 1), &mut out)
            .is_err());
        assert!(mapped
            .read_level_rect_into(&reader, 0, (0, 0), (3, 1), &mut out)
            .is_err());
        assert!(mapped
            .read_level_rect_into(&reader, 9, (0, 0), (4, 1), &mut out)
            .is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}
