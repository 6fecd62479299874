//! `material_baker::ktx2::Reader` on arbitrary files: opening one and every
//! read it offers must return `Ok` or a `KtxError`, never panic, hang,
//! allocate beyond the file's size, or read outside the level it names.
//!
//! Input: the bytes after the 12-byte KTX2 identifier (the target prepends
//! it, so the fuzzer starts at the header fields), then, when the input
//! starts with 0xFF, the identifier itself is also up to the fuzzer. The last
//! 24 bytes of an input longer than 104 bytes choose the reads attempted on a
//! file that opened (a level, a range, a rectangle); they stay in the file too.

use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;

use material_baker::ktx2::{Reader, IDENTIFIER};

fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        dir.join(format!("ktx2-fuzz-{}.ktx2", std::process::id()))
    })
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

/// Runs one input: opens it as a KTX2 file and checks every read it offers.
pub fn run(data: &[u8]) {
    let mut file = Vec::with_capacity(data.len() + 12);
    match data.split_first() {
        Some((0xFF, rest)) => file.extend_from_slice(rest),
        _ => {
            file.extend_from_slice(&IDENTIFIER);
            file.extend_from_slice(data);
        }
    }
    let path = scratch();
    {
        let mut f = std::fs::File::create(path).unwrap();
        f.write_all(&file).unwrap();
    }
    let Ok(mut r) = Reader::open(path) else {
        return;
    };
    let file_len = file.len() as u64;
    // What open promises: at least one level, each inside the file, sized
    // as its format and dimensions say.
    assert!(!r.levels.is_empty());
    for (i, l) in r.levels.iter().enumerate() {
        assert!(l
            .offset
            .checked_add(l.length)
            .is_some_and(|e| e <= file_len));
        assert_eq!(l.width, (r.width >> i).max(1));
        assert_eq!(l.height, (r.height >> i).max(1));
        assert_eq!(l.length, r.format.level_bytes(l.width, l.height));
    }
    let levels = r.levels.clone();
    for (i, l) in levels.iter().enumerate() {
        let v = r.read_level(i).expect("a level inside the file reads");
        let at = l.offset as usize;
        assert_eq!(&v[..], &file[at..at + l.length as usize]);
    }
    assert!(r.read_level(levels.len()).is_err());
    if data.len() < 104 {
        return;
    }
    let p = &data[data.len() - 24..];
    let level = usize::from(p[0] % 34);
    let start = u64_at(p, 1) >> (p[9] % 64);
    let (x, y) = (
        u32_at(p, 10) >> (p[22] % 32),
        u32_at(p, 14) >> (p[22] / 8 % 32),
    );
    let (w, h) = (u32::from(p[18]) % 65, u32::from(p[19]) % 65);
    let len = usize::from(p[20]) * 4;
    let mut out = vec![0u8; len];
    let ok = r.read_level_range_into(level, start, &mut out).is_ok();
    if ok {
        let l = levels[level];
        let at = (l.offset + start) as usize;
        assert_eq!(&out[..], &file[at..at + len]);
    }
    let bytes = u64::from(r.format.block_bytes());
    let rect_len = (u64::from(w) * u64::from(h) * bytes) as usize;
    let wrong = p[23] & 1 == 1;
    let mut rect = vec![0u8; if wrong { rect_len + 1 } else { rect_len }];
    match r.rect_rows(level, (x, y), (w, h), rect.len()) {
        Ok(rows) => {
            assert!(!wrong);
            let l = levels[level];
            // An empty rectangle (w or h 0) at the level's far edge may
            // name a first byte past the level; nothing is read from it.
            if w > 0 && h > 0 {
                assert!(rows.first >= l.offset);
                assert!(rows.end() <= l.offset + l.length);
            }
            r.read_level_rect_into(level, (x, y), (w, h), &mut rect)
                .expect("rect inside the level reads");
        }
        Err(_) => assert!(r
            .read_level_rect_into(level, (x, y), (w, h), &mut rect)
            .is_err()),
    }
}
