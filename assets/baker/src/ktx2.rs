//! A minimal KTX2 writer and reader (Khronos KTX File Format 2.0): 2D, one
//! layer, one face, no supercompression, a data format descriptor, and a level
//! index so that any single mip level can be read alone with one seek and one read.
//!
//! File layout written here: identifier, header, index, level index, DFD,
//! key/value data (`KTXwriter`), then the levels from the smallest to the largest,
//! each aligned to `lcm(texel block bytes, 4)`.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// The 12-byte KTX2 identifier.
pub const IDENTIFIER: [u8; 12] = [
    0xAB, 0x4B, 0x54, 0x58, 0x20, 0x32, 0x30, 0xBB, 0x0D, 0x0A, 0x1A, 0x0A,
];

/// The pixel formats the baker writes, with their `VkFormat` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// `VK_FORMAT_R8G8B8A8_SRGB` (albedo, uncompressed).
    Rgba8Srgb,
    /// `VK_FORMAT_R8G8B8A8_UNORM` (occlusion-roughness-metallic, uncompressed).
    Rgba8Unorm,
    /// `VK_FORMAT_R8G8_UNORM` (normal xy, uncompressed).
    Rg8Unorm,
    /// `VK_FORMAT_BC7_SRGB_BLOCK` (albedo, compressed).
    Bc7Srgb,
    /// `VK_FORMAT_BC7_UNORM_BLOCK` (occlusion-roughness-metallic, compressed).
    Bc7Unorm,
    /// `VK_FORMAT_BC5_UNORM_BLOCK` (normal xy, compressed).
    Bc5Unorm,
}

impl Format {
    /// The `VkFormat` value.
    pub fn vk_format(self) -> u32 {
        match self {
            Format::Rgba8Srgb => 43,
            Format::Rgba8Unorm => 37,
            Format::Rg8Unorm => 16,
            Format::Bc7Srgb => 146,
            Format::Bc7Unorm => 145,
            Format::Bc5Unorm => 141,
        }
    }

    /// Whether the format is block-compressed (4×4 texel blocks).
    pub fn is_compressed(self) -> bool {
        matches!(self, Format::Bc7Srgb | Format::Bc7Unorm | Format::Bc5Unorm)
    }

    /// The format for a `VkFormat` value.
    pub fn from_vk(v: u32) -> Option<Self> {
        match v {
            43 => Some(Format::Rgba8Srgb),
            37 => Some(Format::Rgba8Unorm),
            16 => Some(Format::Rg8Unorm),
            146 => Some(Format::Bc7Srgb),
            145 => Some(Format::Bc7Unorm),
            141 => Some(Format::Bc5Unorm),
            _ => None,
        }
    }

    /// Bytes per texel (per block for block formats).
    pub fn block_bytes(self) -> u32 {
        match self {
            Format::Rgba8Srgb | Format::Rgba8Unorm => 4,
            Format::Rg8Unorm => 2,
            Format::Bc7Srgb | Format::Bc7Unorm | Format::Bc5Unorm => 16,
        }
    }

    /// Texels per block side (1, or 4 for block-compressed formats).
    pub fn block_side(self) -> u32 {
        if self.is_compressed() {
            4
        } else {
            1
        }
    }

    /// Bytes of a `width` × `height` level.
    pub fn level_bytes(self, width: u32, height: u32) -> u64 {
        let b = self.block_side();
        width.div_ceil(b) as u64 * height.div_ceil(b) as u64 * self.block_bytes() as u64
    }
}

/// The largest texture side [`Reader::open`] accepts (Vulkan devices report
/// at most 32768 for `maxImageDimension2D` today; the demo's flags stop at
/// 16384). Every level's byte size then fits a `u64` with room to spare.
pub const MAX_SIDE: u32 = 1 << 16;

/// KTX2 errors.
#[derive(Debug, thiserror::Error)]
pub enum KtxError {
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a KTX2 file this reader understands.
    #[error("{path}: {what}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        what: String,
    },
}

fn align(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

/// A DFD sample: channel id, bit offset, bit length, lower and upper values.
type Sample = (u32, u32, u32, u32, u32);

fn dfd(format: Format) -> Vec<u8> {
    // Basic data format descriptor (Khronos Data Format spec 1.3, section 5).
    // Samples: (channel id, bit offset, bit length, lower, upper).
    let (model, samples): (u32, Vec<Sample>) = match format {
        Format::Rgba8Srgb | Format::Rgba8Unorm => (
            1, // KHR_DF_MODEL_RGBSDA
            (0..4)
                .map(|c| (if c == 3 { 15 } else { c }, c * 8, 8, 0, 255))
                .collect(),
        ),
        Format::Rg8Unorm => (1, (0..2).map(|c| (c, c * 8, 8, 0, 255)).collect()),
        Format::Bc7Srgb | Format::Bc7Unorm => (134, vec![(0, 0, 128, 0, u32::MAX)]), // KHR_DF_MODEL_BC7
        Format::Bc5Unorm => (132, vec![(0, 0, 64, 0, u32::MAX), (1, 64, 64, 0, u32::MAX)]), // KHR_DF_MODEL_BC5
    };
    let srgb = matches!(format, Format::Rgba8Srgb | Format::Bc7Srgb);
    let block_size = 24 + 16 * samples.len() as u32;
    let side = format.block_side() - 1;
    let mut w: Vec<u32> = vec![
        block_size + 4,                                        // dfdTotalSize
        0,                      // vendorId 0 (Khronos), descriptorType 0 (basic)
        2 | (block_size << 16), // versionNumber 2, descriptorBlockSize
        model | (1 << 8) | ((if srgb { 2 } else { 1 }) << 16), // model, primaries BT.709, transfer sRGB/linear, flags 0
        side | (side << 8),                                    // texel block dimensions (minus one)
        format.block_bytes(),                                  // bytesPlane0
        0,                                                     // bytesPlane4..7
    ];
    for (channel, offset, bits, lower, upper) in samples {
        // In an sRGB format, alpha is linear.
        let linear = if srgb && channel == 15 { 0x10 } else { 0 };
        w.push(offset | ((bits - 1) << 16) | ((channel | linear) << 24));
        w.push(0); // sample positions
        w.push(lower);
        w.push(upper);
    }
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Writes a 2D texture whose `levels` run from the largest (level 0) down.
/// The file is written to `path.tmp` and renamed, so a complete file appears at once.
pub fn write(
    path: &Path,
    format: Format,
    width: u32,
    height: u32,
    levels: &[Vec<u8>],
) -> Result<(), KtxError> {
    let io = |source| KtxError::Io {
        path: path.display().to_string(),
        source,
    };
    let level_count = levels.len() as u64;
    let dfd = dfd(format);
    let mut kvd = Vec::new();
    let kv = b"KTXwriter\0vkalloc material-baker\0";
    kvd.extend_from_slice(&(kv.len() as u32).to_le_bytes());
    kvd.extend_from_slice(kv);
    while kvd.len() % 4 != 0 {
        kvd.push(0);
    }
    let header_end = 12 + 9 * 4 + 4 * 4 + 2 * 8;
    let level_index_end = header_end + level_count * 24;
    let dfd_offset = level_index_end;
    let kvd_offset = dfd_offset + dfd.len() as u64;
    let mut data_start = kvd_offset + kvd.len() as u64;
    let block = format.block_bytes() as u64;
    let level_align = block * 4 / gcd(block, 4);
    // Smallest level first.
    let mut offsets = vec![0u64; levels.len()];
    for i in (0..levels.len()).rev() {
        data_start = align(data_start, level_align);
        offsets[i] = data_start;
        data_start += levels[i].len() as u64;
    }
    let mut out = Vec::with_capacity(level_index_end as usize + dfd.len() + kvd.len());
    out.extend_from_slice(&IDENTIFIER);
    for v in [
        format.vk_format(),
        1,
        width,
        height,
        0,
        0,
        1,
        level_count as u32,
        0,
    ] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for v in [
        dfd_offset as u32,
        dfd.len() as u32,
        kvd_offset as u32,
        kvd.len() as u32,
    ] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&0u64.to_le_bytes()); // sgdByteOffset
    out.extend_from_slice(&0u64.to_le_bytes()); // sgdByteLength
    for (i, l) in levels.iter().enumerate() {
        out.extend_from_slice(&offsets[i].to_le_bytes());
        out.extend_from_slice(&(l.len() as u64).to_le_bytes());
        out.extend_from_slice(&(l.len() as u64).to_le_bytes());
    }
    out.extend_from_slice(&dfd);
    out.extend_from_slice(&kvd);
    let tmp = path.with_extension(format!("ktx2.{}.tmp", std::process::id()));
    let mut f = std::io::BufWriter::new(File::create(&tmp).map_err(io)?);
    f.write_all(&out).map_err(io)?;
    let mut pos = out.len() as u64;
    for i in (0..levels.len()).rev() {
        let pad = offsets[i] - pos;
        f.write_all(&vec![0u8; pad as usize]).map_err(io)?;
        f.write_all(&levels[i]).map_err(io)?;
        pos = offsets[i] + levels[i].len() as u64;
    }
    f.into_inner()
        .map_err(|e| io(e.into_error()))?
        .sync_all()
        .map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// One level's place in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Level {
    /// Byte offset in the file.
    pub offset: u64,
    /// Bytes.
    pub length: u64,
    /// Width in texels.
    pub width: u32,
    /// Height in texels.
    pub height: u32,
}

/// Where a rectangle's rows lie in a KTX2 file ([`Reader::rect_rows`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RectRows {
    /// The first row's byte offset in the file.
    pub first: u64,
    /// Bytes from one row's start to the next's in the file.
    pub pitch: u64,
    /// Bytes of each row (the rectangle's width).
    pub row: u64,
    /// Rows.
    pub count: u32,
}

impl RectRows {
    /// Row `r`'s byte offset in the file.
    pub fn at(&self, r: u32) -> u64 {
        self.first + u64::from(r) * self.pitch
    }

    /// One past the last byte of the last row, in the file.
    pub fn end(&self) -> u64 {
        match self.count {
            0 => self.first,
            n => self.at(n - 1) + self.row,
        }
    }

    /// `out` (the rectangle, tightly packed) cut into its rows, each with the
    /// byte offset in the file it is read from.
    pub fn spans<'a>(&self, out: &'a mut [u8]) -> impl Iterator<Item = (u64, &'a mut [u8])> {
        let rows = *self;
        out.chunks_exact_mut(rows.row.max(1) as usize)
            .enumerate()
            .map(move |(r, dst)| (rows.at(r as u32), dst))
    }
}

/// An open KTX2 file: its header and level index, read once; levels on demand.
pub struct Reader {
    file: File,
    path: String,
    /// The pixel format.
    pub format: Format,
    /// Level 0's width.
    pub width: u32,
    /// Level 0's height.
    pub height: u32,
    /// Every level, level 0 (largest) first.
    pub levels: Vec<Level>,
}

impl Reader {
    /// Opens `path` and reads its header and level index (nothing else).
    pub fn open(path: &Path) -> Result<Self, KtxError> {
        let p = path.display().to_string();
        let io = |source| KtxError::Io {
            path: p.clone(),
            source,
        };
        let invalid = |what: &str| KtxError::Invalid {
            path: p.clone(),
            what: what.to_owned(),
        };
        let mut file = File::open(path).map_err(io)?;
        let mut head = [0u8; 80];
        file.read_exact(&mut head).map_err(io)?;
        if head[..12] != IDENTIFIER {
            return Err(invalid("not a KTX2 file (bad identifier)"));
        }
        let u32_at = |o: usize| u32::from_le_bytes(head[o..o + 4].try_into().unwrap());
        let vk_format = u32_at(12);
        let format = Format::from_vk(vk_format)
            .ok_or_else(|| invalid(&format!("unsupported vkFormat {vk_format}")))?;
        let (width, height, depth, layers, faces, level_count, scheme) = (
            u32_at(20),
            u32_at(24),
            u32_at(28),
            u32_at(32),
            u32_at(36),
            u32_at(40),
            u32_at(44),
        );
        if depth != 0 || layers > 1 || faces != 1 || scheme != 0 || width == 0 || height == 0 {
            return Err(invalid(
                "only uncompressed-container 2D textures are supported",
            ));
        }
        // Past this no device makes the image, and a level's byte size of a
        // u32-sized side overflows (a crafted header wrapped it to 0).
        if width.max(height) > MAX_SIDE {
            return Err(invalid(&format!(
                "a {width}x{height} texture: sides above {MAX_SIDE} texels are not supported"
            )));
        }
        let level_count = level_count.max(1);
        // A full chain of a u32-sized image has at most 32 levels: a larger
        // count is a corrupt header, not a reason to allocate its index.
        if level_count > 32 || (width.max(height) >> (level_count - 1)) == 0 {
            return Err(invalid(&format!(
                "{level_count} levels for a {width}x{height} image"
            )));
        }
        let mut index = vec![0u8; level_count as usize * 24];
        file.read_exact(&mut index).map_err(io)?;
        let file_len = file.metadata().map_err(io)?.len();
        let mut levels = Vec::with_capacity(level_count as usize);
        for i in 0..level_count as usize {
            let e = &index[i * 24..];
            let offset = u64::from_le_bytes(e[0..8].try_into().unwrap());
            let length = u64::from_le_bytes(e[8..16].try_into().unwrap());
            let (w, h) = ((width >> i).max(1), (height >> i).max(1));
            if length != format.level_bytes(w, h)
                || offset.checked_add(length).is_none_or(|e| e > file_len)
            {
                return Err(invalid(&format!("level {i} has a bad offset or length")));
            }
            levels.push(Level {
                offset,
                length,
                width: w,
                height: h,
            });
        }
        Ok(Self {
            file,
            path: p,
            format,
            width,
            height,
            levels,
        })
    }

    /// Level `level`'s entry, or [`KtxError::Invalid`] naming the file's count.
    fn level(&self, level: usize) -> Result<Level, KtxError> {
        self.levels.get(level).copied().ok_or_else(|| {
            self.invalid(format!(
                "no level {level} (the file has {})",
                self.levels.len()
            ))
        })
    }

    /// [`KtxError::Invalid`] for this file.
    fn invalid(&self, what: String) -> KtxError {
        KtxError::Invalid {
            path: self.path.clone(),
            what,
        }
    }

    /// Reads level `level` into `out` (exactly `levels[level].length` bytes):
    /// one positioned read.
    ///
    /// # Errors
    /// [`KtxError::Invalid`] when the level does not exist or `out` is not the
    /// level's size; [`KtxError::Io`] when reading fails.
    pub fn read_level_into(&self, level: usize, out: &mut [u8]) -> Result<(), KtxError> {
        use std::os::unix::fs::FileExt;
        let l = self.level(level)?;
        if out.len() as u64 != l.length {
            return Err(self.invalid(format!(
                "level {level} is {} bytes, not the {} given",
                l.length,
                out.len()
            )));
        }
        self.file
            .read_exact_at(out, l.offset)
            .map_err(|source| KtxError::Io {
                path: self.path.clone(),
                source,
            })
    }

    /// Reads `out.len()` bytes of level `level` from byte `start` of the level
    /// into `out` (a part of a level: several threads can read one large level).
    ///
    /// # Errors
    /// [`KtxError::Invalid`] when the level does not exist or the range runs
    /// past its end; [`KtxError::Io`] when reading fails.
    pub fn read_level_range_into(
        &mut self,
        level: usize,
        start: u64,
        out: &mut [u8],
    ) -> Result<(), KtxError> {
        let l = self.level(level)?;
        let end = start.checked_add(out.len() as u64);
        if end.is_none_or(|e| e > l.length) {
            return Err(self.invalid(format!(
                "bytes {start}..+{} of level {level} run past its {} bytes",
                out.len(),
                l.length
            )));
        }
        let path = self.path.clone();
        let io = |source| KtxError::Io {
            path: path.clone(),
            source,
        };
        self.file
            .seek(SeekFrom::Start(l.offset.saturating_add(start)))
            .map_err(io)?;
        self.file.read_exact(out).map_err(io)
    }

    /// Where the rows of a rectangle of level `level` lie in the file: `w` x
    /// `h` blocks (texels for uncompressed formats) from block column `x`, row
    /// `y`, read into `out_len` bytes, row after row, tightly packed. Checks
    /// what [`Reader::read_level_rect_into`] checks and reads nothing: a
    /// reader of another kind (a mapping of the file) takes its rows from here.
    ///
    /// # Errors
    /// [`KtxError::Invalid`] when the level does not exist, the rectangle runs
    /// past the level, or `out_len` is not `w * h` blocks.
    pub fn rect_rows(
        &self,
        level: usize,
        (x, y): (u32, u32),
        (w, h): (u32, u32),
        out_len: usize,
    ) -> Result<RectRows, KtxError> {
        let l = self.level(level)?;
        let side = self.format.block_side();
        let bytes = u64::from(self.format.block_bytes());
        let (cols, rows) = (l.width.div_ceil(side), l.height.div_ceil(side));
        let fits = x.checked_add(w).is_some_and(|e| e <= cols)
            && y.checked_add(h).is_some_and(|e| e <= rows);
        let row = u64::from(w) * bytes;
        if !fits || out_len as u64 != row * u64::from(h) {
            return Err(self.invalid(format!(
                "a {w}x{h}-block rectangle at ({x}, {y}) into {out_len} bytes does not fit level {level} ({cols}x{rows} blocks)"
            )));
        }
        let pitch = u64::from(cols) * bytes;
        Ok(RectRows {
            first: l.offset + u64::from(y) * pitch + u64::from(x) * bytes,
            pitch,
            row,
            count: h,
        })
    }

    /// Reads a rectangle of level `level` into `out`, row after row, tightly
    /// packed: `w` x `h` blocks (texels for uncompressed formats) from block
    /// column `x`, row `y`. One positioned read per row, no seek (several
    /// threads may read one file through their own readers).
    ///
    /// # Errors
    /// [`KtxError::Invalid`] when the level does not exist, the rectangle runs
    /// past the level, or `out` is not `w * h` blocks; [`KtxError::Io`] when
    /// reading fails.
    pub fn read_level_rect_into(
        &self,
        level: usize,
        xy: (u32, u32),
        wh: (u32, u32),
        out: &mut [u8],
    ) -> Result<(), KtxError> {
        use std::os::unix::fs::FileExt;
        let rows = self.rect_rows(level, xy, wh, out.len())?;
        for (at, dst) in rows.spans(out) {
            self.file
                .read_exact_at(dst, at)
                .map_err(|source| KtxError::Io {
                    path: self.path.clone(),
                    source,
                })?;
        }
        Ok(())
    }

    /// The file's path, as the errors name it.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Reads level `level` into a new vector.
    ///
    /// # Errors
    /// As [`Reader::read_level_into`].
    pub fn read_level(&self, level: usize) -> Result<Vec<u8>, KtxError> {
        let mut v = vec![0u8; self.level(level)?.length as usize];
        self.read_level_into(level, &mut v)?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_level_alone() {
        let dir = std::env::temp_dir().join(format!("ktx2-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.ktx2");
        let levels: Vec<Vec<u8>> = (0..4u32)
            .map(|i| {
                let s = 8 >> i;
                (0..s * s * 2)
                    .map(|b| (b as u8).wrapping_mul(i as u8 + 3))
                    .collect()
            })
            .collect();
        write(&path, Format::Rg8Unorm, 8, 8, &levels).unwrap();
        let mut r = Reader::open(&path).unwrap();
        assert_eq!(r.format, Format::Rg8Unorm);
        assert_eq!(r.levels.len(), 4);
        for i in (0..4).rev() {
            assert_eq!(r.read_level(i).unwrap(), levels[i]);
            assert_eq!(r.levels[i].offset % 4, 0);
        }
        // Smallest level first in the file.
        assert!(r.levels[3].offset < r.levels[0].offset);

        // A level read in parts, in any order, equals the level.
        let mut parts = vec![0u8; levels[0].len()];
        for (c, part) in parts.chunks_mut(40).enumerate().rev() {
            r.read_level_range_into(0, (c * 40) as u64, part).unwrap();
        }
        assert_eq!(parts, levels[0]);
        // Past the level's end, or a level that does not exist: an error.
        let mut buf = [0u8; 8];
        let len = levels[1].len() as u64;
        assert!(r.read_level_range_into(1, len - 4, &mut buf).is_err());
        assert!(r.read_level_range_into(1, u64::MAX, &mut buf).is_err());
        assert!(r.read_level_range_into(9, 0, &mut buf).is_err());
        assert!(r.read_level_into(9, &mut buf).is_err());
        assert!(r.read_level_into(1, &mut buf).is_err(), "wrong size");
        assert!(r.read_level(9).is_err());
        r.read_level_range_into(1, len - 8, &mut buf).unwrap();
        assert_eq!(&buf[..], &levels[1][levels[1].len() - 8..]);

        // A rectangle of a level: rows (texel pairs of 2 bytes) packed, as the level holds them.
        let mut rect = vec![0u8; 3 * 2 * 2];
        r.read_level_rect_into(0, (4, 5), (3, 2), &mut rect)
            .unwrap();
        let row = |y: usize| &levels[0][(y * 8 + 4) * 2..(y * 8 + 7) * 2];
        assert_eq!(&rect[..6], row(5));
        assert_eq!(&rect[6..], row(6));
        // Past the level's edge, a wrong buffer, an overflowing position: errors.
        assert!(r
            .read_level_rect_into(0, (6, 0), (3, 2), &mut rect)
            .is_err());
        assert!(r
            .read_level_rect_into(0, (0, 0), (3, 1), &mut rect)
            .is_err());
        assert!(r
            .read_level_rect_into(0, (u32::MAX, 0), (3, 2), &mut rect)
            .is_err());
        assert!(r
            .read_level_rect_into(7, (0, 0), (3, 2), &mut rect)
            .is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn corrupt_headers_are_errors() {
        let dir = std::env::temp_dir().join(format!("ktx2-corrupt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.ktx2");
        let levels: Vec<Vec<u8>> = (0..4u32)
            .map(|i| vec![7u8; ((8 >> i) * (8 >> i) * 2) as usize])
            .collect();
        write(&path, Format::Rg8Unorm, 8, 8, &levels).unwrap();
        let good = std::fs::read(&path).unwrap();
        let open_patched = |at: usize, bytes: &[u8]| {
            let mut f = good.clone();
            f[at..at + bytes.len()].copy_from_slice(bytes);
            let p = dir.join("patched.ktx2");
            std::fs::write(&p, f).unwrap();
            Reader::open(&p)
        };
        // Level count (header offset 40): more levels than the image has, or
        // an absurd count that would size a huge index.
        assert!(open_patched(40, &5u32.to_le_bytes()).is_err());
        assert!(open_patched(40, &u32::MAX.to_le_bytes()).is_err());
        // Level 0's offset (index entry at 80) near u64::MAX: offset + length
        // overflows; an error, not a wrap.
        assert!(open_patched(80, &(u64::MAX - 3).to_le_bytes()).is_err());
        // Truncated: the last level runs past the end.
        let p = dir.join("short.ktx2");
        std::fs::write(&p, &good[..good.len() - 1]).unwrap();
        assert!(Reader::open(&p).is_err());
        assert!(open_patched(0, &[0u8; 4]).is_err(), "bad identifier");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
