//! Every committed fuzz corpus file, run through its target's body as an
//! ordinary test: the checks the fuzz targets make after each operation
//! (shadow models, `validate()`, no device violation, mapped bytes reading
//! back, nothing left at the end) hold for each input the corpora keep.
//! Timed fuzzing, which grows new inputs, is `cargo xtask fuzz`.

use std::path::{Path, PathBuf};

use vkalloc_fuzz::{allocator_defrag, allocator_sim, decode, ktx2, range};

/// The files of `fuzz/<dir>`, sorted, with their bytes; fails when there are
/// none (a moved corpus must not pass as an empty one).
fn corpus(dir: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir);
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read the corpus {}: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a corpus entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus files in {}", dir.display());
    files
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            (path, bytes)
        })
        .collect()
}

/// Runs `run` on every file of `fuzz/<dir>` that decodes as `T` (as
/// libFuzzer would hand it to the target), naming the file if it panics;
/// returns how many ran.
fn replay<T>(dir: &str, run: impl Fn(T)) -> usize
where
    T: for<'a> arbitrary::Arbitrary<'a>,
{
    let mut ran = 0;
    for (path, bytes) in corpus(dir) {
        let Some(input) = decode::<T>(&bytes) else {
            continue;
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(input)));
        if let Err(panic) = outcome {
            eprintln!("corpus file {} failed", path.display());
            std::panic::resume_unwind(panic);
        }
        ran += 1;
    }
    ran
}

#[test]
fn range_tlsf_corpus() {
    let ran = replay("corpus/range_tlsf", |input| range::tlsf(&input));
    assert!(ran > 0, "no range_tlsf corpus file decodes");
}

#[test]
fn range_linear_corpus() {
    let ran = replay("corpus/range_linear", |input| range::linear(&input));
    assert!(ran > 0, "no range_linear corpus file decodes");
}

#[test]
fn allocator_sim_corpus() {
    let ran = replay("corpus/allocator_sim", allocator_sim::run);
    assert!(ran > 0, "no allocator_sim corpus file decodes");
}

#[test]
fn allocator_defrag_corpus() {
    let ran = replay("corpus/allocator_defrag", allocator_defrag::run);
    assert!(ran > 0, "no allocator_defrag corpus file decodes");
}

#[test]
fn ktx2_reader_corpus() {
    let files = corpus("ktx2/corpus/ktx2_reader");
    for (path, bytes) in &files {
        let outcome = std::panic::catch_unwind(|| ktx2::run(bytes));
        if let Err(panic) = outcome {
            eprintln!("corpus file {} failed", path.display());
            std::panic::resume_unwind(panic);
        }
    }
}
