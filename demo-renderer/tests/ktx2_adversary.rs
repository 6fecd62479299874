//! Adversarial KTX2 files against the reader the demo opens its baked
//! textures with (`material_baker::ktx2::Reader`) and the demo's mapped tile
//! reader (`streaming::tiles::mapped::MappedFile`): every malformed file must
//! be refused with a `KtxError`, not a panic, a hang, an absurd allocation or
//! a read outside the file.
//!
//! The first tests are regressions for defects found by the `ktx2_reader`
//! fuzz target (fuzz/ktx2/) and by reading the code; the rest pin down what
//! already held up.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use demo_renderer::streaming::tiles::mapped::MappedFile;
use material_baker::ktx2::{self, Format, KtxError, Reader, IDENTIFIER};

/// A scratch path of its own for each call, in the temporary directory.
fn scratch(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    std::env::temp_dir().join(format!(
        "ktx2-adversary-{}-{tag}-{}.ktx2",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Removes its file when dropped, a panic included.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        std::fs::remove_file(&self.0).ok();
    }
}

fn open_bytes(tag: &str, bytes: &[u8]) -> Result<Reader, KtxError> {
    let p = Removed(scratch(tag));
    std::fs::write(&p.0, bytes).unwrap();
    Reader::open(&p.0)
}

/// The header fields after the identifier, as `Reader::open` reads them.
#[derive(Clone, Copy)]
struct Header {
    vk_format: u32,
    type_size: u32,
    width: u32,
    height: u32,
    depth: u32,
    layers: u32,
    faces: u32,
    levels: u32,
    scheme: u32,
    dfd: (u32, u32),
    kvd: (u32, u32),
    sgd: (u64, u64),
}

impl Header {
    fn new(vk_format: u32, width: u32, height: u32, levels: u32) -> Self {
        Self {
            vk_format,
            type_size: 1,
            width,
            height,
            depth: 0,
            layers: 0,
            faces: 1,
            levels,
            scheme: 0,
            dfd: (0, 0),
            kvd: (0, 0),
            sgd: (0, 0),
        }
    }

    /// Identifier, header, index and the level index `entries` (offset,
    /// length; uncompressed length = length), then `tail` zero bytes.
    fn bytes(&self, entries: &[(u64, u64)], tail: usize) -> Vec<u8> {
        let mut b = IDENTIFIER.to_vec();
        for v in [
            self.vk_format,
            self.type_size,
            self.width,
            self.height,
            self.depth,
            self.layers,
            self.faces,
            self.levels,
            self.scheme,
            self.dfd.0,
            self.dfd.1,
            self.kvd.0,
            self.kvd.1,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.sgd.0.to_le_bytes());
        b.extend_from_slice(&self.sgd.1.to_le_bytes());
        assert_eq!(b.len(), 80);
        for &(offset, length) in entries {
            for v in [offset, length, length] {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        b.resize(b.len() + tail, 0);
        b
    }
}

/// A file `ktx2::write` wrote: `format`, `side` x `side`, a full chain.
fn good_file(format: Format, side: u32) -> (Vec<u8>, u32) {
    let levels: Vec<Vec<u8>> = (0..)
        .map(|i| (side >> i).max(1))
        .take(side.ilog2() as usize + 1)
        .enumerate()
        .map(|(i, s)| {
            (0..format.level_bytes(s, s))
                .map(|b| (b as u8).wrapping_mul(13).wrapping_add(i as u8))
                .collect()
        })
        .collect();
    let removed = Removed(scratch("good"));
    let p = removed.0.clone();
    ktx2::write(&p, format, side, side, &levels).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    (bytes, levels.len() as u32)
}

fn is_invalid<T>(r: &Result<T, KtxError>) -> bool {
    matches!(r, Err(KtxError::Invalid { .. }))
}

/// Runs `f`, turning a panic into a failure that names `what` (so one bad
/// input reports itself instead of ending the loop it is in).
fn no_panic<T>(what: &str, f: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(t) => t,
        Err(e) => {
            let msg = e
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| e.downcast_ref::<&str>().copied())
                .unwrap_or("?");
            panic!("{what}: panicked: {msg}");
        }
    }
}

// ---------------------------------------------------------------------------
// Defects.

/// Fixed defect (fuzz: crash-c127dab4…; `Reader::open` now refuses sides above `MAX_SIDE`): a header whose level 0 has more than
/// 2^64 - 1 bytes. `Format::level_bytes` (assets/baker/src/ktx2.rs:87)
/// multiplies blocks x blocks x block bytes in u64 unchecked, and
/// `Reader::open` (ktx2.rs:366) calls it on the header's width and height
/// before anything bounds them: "attempt to multiply with overflow" where
/// overflow checks are on (tests, `cargo fuzz`), a wrapped size where they
/// are off. The fuzzer's input was BC7 (146) at u32::MAX x u32::MAX: 2^30 x
/// 2^30 blocks of 16 bytes = 2^64.
#[test]
fn level_bytes_overflow_is_an_error() {
    for (format, w, h) in [
        (Format::Bc7Srgb, u32::MAX, u32::MAX),
        (Format::Bc7Unorm, u32::MAX, u32::MAX),
        (Format::Bc5Unorm, u32::MAX, u32::MAX),
        (Format::Rg8Unorm, u32::MAX, u32::MAX),
        (Format::Rgba8Srgb, u32::MAX, u32::MAX),
        (Format::Rgba8Unorm, u32::MAX, 1 << 31),
    ] {
        let hd = Header::new(format.vk_format(), w, h, 1);
        let file = hd.bytes(&[(104, 0)], 0);
        let what = format!("{format:?} {w}x{h}");
        let r = no_panic(&what, || open_bytes("overflow", &file));
        assert!(is_invalid(&r), "{what}: opened: {:?}", r.map(|r| r.levels));
    }
}

/// Fixed defect: RGBA8 2^31 x 2^31 is 2^64 bytes, which wraps to exactly 0. Where
/// overflow checks are off (the release profile) `Reader::open` accepts a
/// level index entry of length 0 for it and returns `Ok` with a 2^31 x 2^31
/// level of 0 bytes (a square power of two, so `materials::textures` takes
/// it too); `rect_rows` on it then overflows again (ktx2.rs:485, :492).
/// With overflow checks on it panics at ktx2.rs:87.
#[test]
fn level_bytes_wrapping_to_zero_is_an_error() {
    for format in [Format::Rgba8Srgb, Format::Rgba8Unorm] {
        let h = Header::new(format.vk_format(), 1 << 31, 1 << 31, 1);
        let file = h.bytes(&[(104, 0)], 16);
        let r = no_panic(&format!("{format:?} 2^31 x 2^31"), || {
            open_bytes("wrap0", &file)
        });
        assert!(
            is_invalid(&r),
            "{format:?}: opened: {:?}",
            r.map(|r| r.levels)
        );
    }
}

/// Fixed defect, the same one where overflow checks are off (`cargo test
/// --release`): the 2^31 x 2^31 RGBA8 file with its 0-byte level opens, and
/// `Reader::rect_rows` for the last texel computes its first byte as
/// 104 + (2^31 - 1) * 2^33 + (2^31 - 1) * 4, which wraps (ktx2.rs:492) to byte
/// 100 of the file: the index entry, read back as a texel by both
/// `read_level_rect_into` and the mapped reader. With overflow checks on,
/// `Reader::open` panics first (`level_bytes_wrapping_to_zero_is_an_error`).
#[cfg(not(debug_assertions))]
#[test]
fn wrapped_level_rectangles_stay_inside_the_level() {
    let h = Header::new(Format::Rgba8Srgb.vk_format(), 1 << 31, 1 << 31, 1);
    let file = h.bytes(&[(104, 0)], 16);
    let removed = Removed(scratch("wraprect"));
    let p = removed.0.clone();
    std::fs::write(&p, &file).unwrap();
    let Ok(r) = Reader::open(&p) else {
        return; // refused: fixed
    };
    let l = r.levels[0];
    let corner = ((1u32 << 31) - 1, (1u32 << 31) - 1);
    if let Ok(rows) = r.rect_rows(0, corner, (1, 1), 4) {
        let mapped = MappedFile::open(&r).unwrap();
        let mut out = [0u8; 4];
        let read = mapped.read_level_rect_into(&r, 0, corner, (1, 1), &mut out);
        panic!(
            "a texel of a {}-byte level at {:?} (bytes {}..{} of the file; level at {}): mapped read {read:?} gave {out:?}",
            l.length,
            corner,
            rows.first,
            rows.end(),
            l.offset
        );
    }
}

/// Was a defect (lower severity): the only bound on a level's size was the
/// file's length, and a sparse file has any length for free: a 2^21 x 2^21
/// RG8 header over 8 TiB of holes opened, and `Reader::read_level(0)` then
/// asked for an 8 TiB `Vec` (an abort). `Reader::open` now refuses sides
/// above `ktx2::MAX_SIDE`. Checked here without a sparse file: one side past
/// the limit, the other 1 texel, the level's real bytes in the file.
#[test]
fn a_side_past_the_limit_is_an_error() {
    let side = material_baker::ktx2::MAX_SIDE * 2;
    let len = Format::Rg8Unorm.level_bytes(side, 1);
    let h = Header::new(Format::Rg8Unorm.vk_format(), side, 1, 1);
    let mut file = h.bytes(&[(128, len)], 24);
    file.resize(128 + len as usize, 0);
    let r = no_panic("a 131072 x 1 level", || open_bytes("wide", &file));
    assert!(is_invalid(&r), "opened: {:?}", r.map(|r| r.levels));
    // At the limit itself, the file opens.
    let side = material_baker::ktx2::MAX_SIDE;
    let len = Format::Rg8Unorm.level_bytes(side, 1);
    let h = Header::new(Format::Rg8Unorm.vk_format(), side, 1, 1);
    let mut file = h.bytes(&[(128, len)], 24);
    file.resize(128 + len as usize, 0);
    assert!(open_bytes("at the limit", &file).is_ok());
}

// ---------------------------------------------------------------------------
// What held up.

#[test]
fn every_truncation_is_an_error() {
    for format in [
        Format::Rgba8Srgb,
        Format::Rg8Unorm,
        Format::Bc7Unorm,
        Format::Bc5Unorm,
    ] {
        let (good, _) = good_file(format, 16);
        assert!(open_bytes("full", &good).is_ok());
        for cut in 0..good.len() {
            let r = no_panic(&format!("{format:?} cut at {cut}"), || {
                open_bytes("cut", &good[..cut])
            });
            assert!(
                r.is_err(),
                "{format:?} cut at {cut} of {} opened",
                good.len()
            );
        }
    }
}

#[test]
fn level_counts_zero_huge_and_past_the_index() {
    let (good, n) = good_file(Format::Rgba8Unorm, 8);
    let patched = |count: u32| {
        let mut f = good.clone();
        f[40..44].copy_from_slice(&count.to_le_bytes());
        f
    };
    // 0 means one stored level (the chain is generated at load).
    let r = open_bytes("count0", &patched(0)).unwrap();
    assert_eq!(r.levels.len(), 1);
    for count in [n + 1, 32, 33, 64, 1 << 16, u32::MAX / 24 + 1, u32::MAX] {
        let r = no_panic(&format!("count {count}"), || {
            open_bytes("count", &patched(count))
        });
        assert!(r.is_err(), "level count {count} opened");
    }
    // A count the image allows but the file's index is shorter than: the
    // index read runs off the end of a file that ends after one entry.
    let h = Header::new(Format::Rgba8Unorm.vk_format(), 1 << 15, 1 << 15, 16);
    let r = open_bytes("shortindex", &h.bytes(&[(0, 4)], 0));
    assert!(matches!(r, Err(KtxError::Io { .. })), "{:?}", r.err());
    // Only a 1x1 level per level count 32 of a 2^31 image; the rest missing.
    let h = Header::new(Format::Rg8Unorm.vk_format(), 1 << 31, 1, 32);
    assert!(open_bytes("count32", &h.bytes(&[(0, 2)], 0)).is_err());
}

#[test]
fn level_offsets_and_lengths_outside_the_file() {
    let fmt = Format::Rgba8Srgb;
    let h = Header::new(fmt.vk_format(), 4, 4, 1);
    let len = fmt.level_bytes(4, 4);
    let cases: &[(u64, u64)] = &[
        (104, len),      // the file ends at 104
        (105, len),      // one past
        (u64::MAX, len), // offset + length overflows
        (u64::MAX - len + 1, len),
        (1 << 63, len),
        (0, u64::MAX),  // a length of 2^64-1
        (0, 1 << 63),   // a length of 2^63
        (104, len - 1), // length not the level's size
        (104, len + 1),
        (104, 0),
    ];
    for &(offset, length) in cases {
        let file = h.bytes(&[(offset, length)], (len as usize).saturating_sub(8));
        let r = no_panic(&format!("offset {offset} length {length}"), || {
            open_bytes("outside", &file)
        });
        assert!(
            is_invalid(&r),
            "offset {offset} length {length}: {:?}",
            r.err()
        );
    }
    // A level laid over the header itself is inside the file: it opens and
    // reads those bytes, which is harmless.
    let file = h.bytes(&[(0, len)], 0);
    let r = open_bytes("overheader", &file).unwrap();
    assert_eq!(r.read_level(0).unwrap(), file[..len as usize]);
}

#[test]
fn unknown_formats_schemes_and_shapes() {
    let ok = Header::new(Format::Rg8Unorm.vk_format(), 2, 2, 1);
    let len = Format::Rg8Unorm.level_bytes(2, 2);
    let try_h = |what: &str, h: Header| {
        let r = no_panic(what, || {
            open_bytes("shape", &h.bytes(&[(104, len)], len as usize))
        });
        assert!(is_invalid(&r), "{what}: {:?}", r.err());
    };
    assert!(open_bytes("ok", &ok.bytes(&[(104, len)], len as usize)).is_ok());
    for vk in [0, 1, 44, 98, 131, 147, 1000156000, u32::MAX] {
        try_h(
            &format!("vkFormat {vk}"),
            Header {
                vk_format: vk,
                ..ok
            },
        );
    }
    for scheme in [1, 2, 3, 4, 0x10000, u32::MAX] {
        try_h(&format!("scheme {scheme}"), Header { scheme, ..ok });
    }
    try_h("width 0", Header { width: 0, ..ok });
    try_h("height 0", Header { height: 0, ..ok });
    try_h(
        "width and height 0",
        Header {
            width: 0,
            height: 0,
            ..ok
        },
    );
    try_h("depth 1", Header { depth: 1, ..ok });
    try_h(
        "depth max",
        Header {
            depth: u32::MAX,
            ..ok
        },
    );
    try_h("layers 2", Header { layers: 2, ..ok });
    try_h(
        "layers max",
        Header {
            layers: u32::MAX,
            ..ok
        },
    );
    try_h("faces 0", Header { faces: 0, ..ok });
    try_h("faces 6", Header { faces: 6, ..ok });
}

#[test]
fn pixel_sizes_at_the_limits_without_overflow() {
    // 2^31 wide and 1 high: 2^31 texels, 2^33 bytes of RGBA8, past the file.
    // Sizes whose byte count still fits a u64 (those that do not are
    // `level_bytes_overflow_is_an_error`).
    for (fmt, w, h) in [
        (Format::Rgba8Srgb, 1u32 << 31, 1u32),
        (Format::Rgba8Srgb, 1, 1 << 31),
        (Format::Rgba8Srgb, u32::MAX, u32::MAX >> 2),
        (Format::Rg8Unorm, u32::MAX, u32::MAX >> 1),
        (Format::Bc5Unorm, 1 << 31, 1 << 31),
        (Format::Bc7Srgb, u32::MAX, 4),
    ] {
        let hd = Header::new(fmt.vk_format(), w, h, 1);
        let file = hd.bytes(&[(104, fmt.level_bytes(w, h))], 64);
        let r = no_panic(&format!("{fmt:?} {w}x{h}"), || open_bytes("limits", &file));
        assert!(is_invalid(&r), "{fmt:?} {w}x{h}: {:?}", r.err());
    }
}

#[test]
fn dfd_kvd_and_sgd_outside_the_file_are_never_read() {
    // The reader reads neither the DFD, the key/value data nor the
    // supercompression global data: ranges outside the file do not matter.
    let (good, _) = good_file(Format::Rgba8Srgb, 4);
    for (at, v) in [
        (48usize, u32::MAX.to_le_bytes().to_vec()),
        (52, u32::MAX.to_le_bytes().to_vec()),
        (56, u32::MAX.to_le_bytes().to_vec()),
        (60, u32::MAX.to_le_bytes().to_vec()),
        (64, u64::MAX.to_le_bytes().to_vec()),
        (72, u64::MAX.to_le_bytes().to_vec()),
    ] {
        let mut f = good.clone();
        f[at..at + v.len()].copy_from_slice(&v);
        let r = no_panic(&format!("field at {at}"), || open_bytes("kvd", &f)).unwrap();
        for i in 0..r.levels.len() {
            r.read_level(i).unwrap();
        }
    }
}

#[test]
fn reads_past_levels_and_rectangles_are_errors() {
    let (good, _) = good_file(Format::Bc7Srgb, 16);
    let removed = Removed(scratch("reads"));
    let p = removed.0.clone();
    std::fs::write(&p, &good).unwrap();
    let mut r = Reader::open(&p).unwrap();
    let mapped = MappedFile::open(&r).unwrap();
    let mut buf = [0u8; 32];
    for start in [u64::MAX, u64::MAX - 31, 1 << 63, 256 - 31, 257] {
        assert!(is_invalid(&r.read_level_range_into(0, start, &mut buf)));
    }
    assert!(is_invalid(&r.read_level_range_into(
        usize::MAX,
        0,
        &mut buf
    )));
    assert!(is_invalid(&r.read_level_into(usize::MAX, &mut buf)));
    // (x, y), (w, h), bytes given.
    type Rect = ((u32, u32), (u32, u32), usize);
    let rects: &[Rect] = &[
        ((u32::MAX, 0), (1, 1), 16),
        ((0, u32::MAX), (1, 1), 16),
        ((0, 0), (u32::MAX, 1), 16),
        ((0, 0), (u32::MAX, u32::MAX), 0),
        ((1 << 31, 1 << 31), (1 << 31, 1 << 31), 0),
        ((4, 0), (1, 1), 16), // level 0 is 4x4 blocks
        ((0, 0), (2, 2), 63),
        ((0, 0), (2, 2), 65),
    ];
    for &(xy, wh, len) in rects {
        let mut out = vec![0u8; len];
        for level in [0, 1, 4, 5, usize::MAX] {
            let what = format!("level {level} at {xy:?} {wh:?} into {len}");
            no_panic(&what, || {
                assert!(is_invalid(&r.rect_rows(level, xy, wh, len)), "{what}");
                assert!(
                    r.read_level_rect_into(level, xy, wh, &mut out).is_err(),
                    "{what}"
                );
                assert!(
                    mapped
                        .read_level_rect_into(&r, level, xy, wh, &mut out)
                        .is_err(),
                    "{what}"
                );
            });
        }
    }
    // Zero-sized rectangles inside the level are empty reads.
    let mut none = [0u8; 0];
    r.read_level_rect_into(0, (4, 4), (0, 0), &mut none)
        .unwrap();
    mapped
        .read_level_rect_into(&r, 0, (4, 4), (0, 0), &mut none)
        .unwrap();
}

#[test]
fn a_file_cut_after_opening_is_refused_by_the_mapping() {
    let (good, _) = good_file(Format::Rgba8Unorm, 16);
    let removed = Removed(scratch("cutafter"));
    let p = removed.0.clone();
    std::fs::write(&p, &good).unwrap();
    let r = Reader::open(&p).unwrap();
    std::fs::write(&p, &good[..good.len() - 1]).unwrap();
    assert!(MappedFile::open(&r).is_err());
    // The positioned reads see the short file as an I/O error.
    let mut out = vec![0u8; r.levels[0].length as usize];
    assert!(matches!(
        r.read_level_into(0, &mut out),
        Err(KtxError::Io { .. })
    ));
}

#[test]
fn not_a_regular_file() {
    // A directory opens on Linux but does not read: an I/O error.
    let dir = scratch("dir");
    std::fs::create_dir_all(&dir).unwrap();
    assert!(matches!(Reader::open(&dir), Err(KtxError::Io { .. })));
    std::fs::remove_dir(&dir).ok();
    assert!(matches!(
        Reader::open(Path::new("/dev/null")),
        Err(KtxError::Io { .. })
    ));
    assert!(is_invalid(&Reader::open(Path::new("/dev/zero"))));
}
