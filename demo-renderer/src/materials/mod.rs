//! Materials: the baked KTX2 files (baked on first run, with a progress bar) and
//! their textures on the GPU, one descriptor set per material.

pub mod textures;

use std::path::{Path, PathBuf};
use std::time::Instant;

use material_baker::cache;
use material_baker::{Encoding, Material};

pub use textures::TextureSet;

/// Makes sure the first `count` materials are baked at `size` into `cache_dir`;
/// bakes what is missing with a progress bar. Returns the map files per material
/// and the seconds spent baking.
pub fn ensure_baked(
    cache_dir: &Path,
    size: u32,
    seed: u32,
    encoding: Encoding,
    count: usize,
) -> Result<(Vec<[PathBuf; 3]>, f64), String> {
    let materials = &material_baker::ALL[..count];
    let missing: Vec<Material> = materials
        .iter()
        .copied()
        .filter(|&m| !cache::is_baked(cache_dir, size, seed, encoding, m))
        .collect();
    let started = Instant::now();
    if !missing.is_empty() {
        let dir = cache::bake_dir(cache_dir, size, seed, encoding);
        let per_map = (size as u64 * size as u64 * 4) as f64 * 4.0 / 3.0;
        let gib = per_map * 3.0 * missing.len() as f64 / (1u64 << 30) as f64;
        // About 25 ns per texel and core for generation, filtering and writing.
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1) as f64;
        let estimate = size as f64 * size as f64 * missing.len() as f64 * 25e-9 * 8.0 / threads;
        println!(
            "baking {} material(s) at {size}x{size} into {} (first run only; about {:.1} GiB, estimated {})",
            missing.len(),
            dir.display(),
            gib,
            human_seconds(estimate)
        );
        let bar = indicatif::ProgressBar::new(missing.len() as u64 * 2 * size as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg:>14} [{bar:40.cyan/blue}] {percent:>3}%  {elapsed_precise} elapsed, ~{eta} left",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        for m in &missing {
            bar.set_message(m.name());
            cache::bake_into(cache_dir, size, seed, encoding, *m, &|n| bar.inc(n))
                .map_err(|e| e.to_string())?;
        }
        bar.finish_with_message("baked");
    }
    let paths = materials
        .iter()
        .map(|&m| cache::paths(cache_dir, size, seed, encoding, m))
        .collect();
    Ok((
        paths,
        if missing.is_empty() {
            0.0
        } else {
            started.elapsed().as_secs_f64()
        },
    ))
}

fn human_seconds(s: f64) -> String {
    if s < 90.0 {
        format!("{s:.0} s")
    } else {
        format!("{:.1} min", s / 60.0)
    }
}
