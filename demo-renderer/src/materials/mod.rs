//! Materials: the baked KTX2 files (baked on first run, with a progress bar) and
//! their textures on the GPU, one descriptor set per material.

pub mod textures;

use std::path::{Path, PathBuf};
use std::time::Instant;

use material_baker::cache;
use material_baker::{Encoding, Material};

pub use textures::TextureSet;

/// The baker's material and seed behind gallery material `i`: the sixteen
/// materials, then (past 16) variants of them baked with seed `seed + i / 16`.
pub fn material_variant(i: usize, seed: u32) -> (Material, u32) {
    let all = material_baker::ALL;
    (
        all[i % all.len()],
        seed.wrapping_add((i / all.len()) as u32),
    )
}

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
    let materials: Vec<(Material, u32)> = (0..count).map(|i| material_variant(i, seed)).collect();
    let missing: Vec<(Material, u32)> = materials
        .iter()
        .copied()
        .filter(|&(m, seed)| !cache::is_baked(cache_dir, size, seed, encoding, m))
        .collect();
    let started = Instant::now();
    if !missing.is_empty() {
        let dir = cache::bake_dir(cache_dir, size, seed, encoding);
        // Bytes per texel of the three maps, with the mip chains' third.
        let (bytes_per_texel, core_ns_per_texel) = match encoding {
            Encoding::Uncompressed => (4.0 + 2.0 + 4.0, 250.0),
            Encoding::Bc => (1.0 + 1.0 + 1.0, 550.0),
        };
        let texels = size as f64 * size as f64 * missing.len() as f64;
        let gib = texels * bytes_per_texel * 4.0 / 3.0 / (1u64 << 30) as f64;
        // Measured: about 250 ns of one core per texel for generation and mips
        // (550 with BC compression), plus writing at about 1 GiB/s.
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1) as f64;
        let estimate = texels * core_ns_per_texel * 1e-9 / threads + gib;
        println!(
            "baking {} material(s) at {size}x{size} into {} (first run only; about {:.1} GiB, estimated {})",
            missing.len(),
            dir.display(),
            gib,
            human_seconds(estimate)
        );
        let bar = indicatif::ProgressBar::new(
            missing.len() as u64 * material_baker::work_units(size, encoding),
        );
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg:>14} [{bar:40.cyan/blue}] {percent:>3}%  {elapsed_precise} elapsed, ~{eta} left",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        for (i, (m, seed)) in missing.iter().enumerate() {
            bar.set_message(m.name());
            cache::bake_into(cache_dir, size, *seed, encoding, *m, &|n| bar.inc(n))
                .map_err(|e| e.to_string())?;
            if bar.is_hidden() {
                // No terminal (CI logs): one line per material instead of the bar.
                println!(
                    "  baked {} ({}/{}, {:.1} s)",
                    m.name(),
                    i + 1,
                    missing.len(),
                    started.elapsed().as_secs_f64()
                );
            }
        }
        bar.finish_with_message("baked");
    }
    let paths = materials
        .iter()
        .map(|&(m, seed)| cache::paths(cache_dir, size, seed, encoding, m))
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
