//! The baked-material cache: `<dir>/v1/seed<seed>_<size>/<material>_<map>.ktx2`.
//! Files are written whole and renamed into place, so a file that exists is complete.

use std::path::{Path, PathBuf};

use crate::bake::{bake_encoded, Encoding, MAPS};
use crate::ktx2::{self, KtxError};
use crate::materials::Material;

/// Bump when the generators or the file layout change.
pub const VERSION: u32 = 1;

/// The directory of one bake configuration.
pub fn bake_dir(cache: &Path, size: u32, seed: u32, encoding: Encoding) -> PathBuf {
    let enc = match encoding {
        Encoding::Uncompressed => "rgba8",
        Encoding::Bc => "bc",
    };
    cache
        .join(format!("v{VERSION}"))
        .join(format!("seed{seed}_{size}_{enc}"))
}

/// The three map files of `material`, in [`MAPS`] order.
pub fn paths(
    cache: &Path,
    size: u32,
    seed: u32,
    encoding: Encoding,
    material: Material,
) -> [PathBuf; 3] {
    let dir = bake_dir(cache, size, seed, encoding);
    MAPS.map(|k| dir.join(format!("{}_{}.ktx2", material.name(), k.name())))
}

/// Whether every map of `material` is in the cache.
pub fn is_baked(
    cache: &Path,
    size: u32,
    seed: u32,
    encoding: Encoding,
    material: Material,
) -> bool {
    paths(cache, size, seed, encoding, material)
        .iter()
        .all(|p| p.is_file())
}

/// Bakes `material` into the cache (overwriting), reporting progress in units of
/// [`crate::bake::bake`].
pub fn bake_into(
    cache: &Path,
    size: u32,
    seed: u32,
    encoding: Encoding,
    material: Material,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<[PathBuf; 3], KtxError> {
    let dir = bake_dir(cache, size, seed, encoding);
    std::fs::create_dir_all(&dir).map_err(|source| KtxError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    let chains = bake_encoded(material, size, seed, encoding, progress);
    let paths = paths(cache, size, seed, encoding, material);
    for (chain, path) in chains.iter().zip(paths.iter()) {
        ktx2::write(path, chain.format, chain.size, chain.size, &chain.levels)?;
    }
    Ok(paths)
}
