//! The demo's material baker: sixteen procedural PBR materials, each an albedo,
//! a normal and an occlusion-roughness-metallic map with a full mip chain,
//! deterministic from a seed, written as KTX2 files whose levels can be read one
//! at a time (see [`ktx2`]).
//!
//! Baked files live in a cache outside git ([`cache`]); the demo bakes what is
//! missing on first run.

pub mod bake;
pub mod cache;
pub mod ktx2;
pub mod materials;
pub mod noise;

pub use bake::{bake, bake_encoded, work_units, Encoding, MapKind, MipChain, MAPS};
pub use materials::{Material, ALL};
