//! PSNR between two frames (RGB of RGBA8 pixels), to compare a streamed run with
//! one where every level is resident (`--compare DIR`).
#![forbid(unsafe_code)]

use std::path::Path;

/// The PSNR the report gives identical frames (the true value is infinite).
pub const IDENTICAL_DB: f64 = 100.0;

/// PSNR in dB of `a` against `b` (tightly packed RGBA8, alpha ignored), at most
/// [`IDENTICAL_DB`]; `None` if the sizes differ.
pub fn psnr_rgba8(a: &[u8], b: &[u8]) -> Option<f64> {
    if a.len() != b.len() || a.is_empty() || !a.len().is_multiple_of(4) {
        return None;
    }
    let mut sum = 0u64;
    for (pa, pb) in a.chunks_exact(4).zip(b.chunks_exact(4)) {
        for c in 0..3 {
            let d = pa[c] as i64 - pb[c] as i64;
            sum += (d * d) as u64;
        }
    }
    let mse = sum as f64 / (a.len() / 4 * 3) as f64;
    if mse == 0.0 {
        return Some(IDENTICAL_DB);
    }
    Some((10.0 * (255.0f64 * 255.0 / mse).log10()).min(IDENTICAL_DB))
}

/// PSNR of `pixels` (`width` x `height` RGBA8) against the PNG at `reference`.
pub fn psnr_against_png(
    pixels: &[u8],
    width: u32,
    height: u32,
    reference: &Path,
) -> Result<f64, String> {
    let img = image::open(reference)
        .map_err(|e| format!("cannot read {}: {e}", reference.display()))?
        .to_rgba8();
    if img.width() != width || img.height() != height {
        return Err(format!(
            "{} is {}x{}, the frame {width}x{height}",
            reference.display(),
            img.width(),
            img.height()
        ));
    }
    psnr_rgba8(pixels, img.as_raw()).ok_or_else(|| "frame sizes differ".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        let a = vec![100u8; 16];
        assert_eq!(psnr_rgba8(&a, &a), Some(IDENTICAL_DB));
        let mut b = a.clone();
        for p in b.chunks_exact_mut(4) {
            p[0] = 110; // error 10 in one channel of three: MSE = 100 / 3
            p[3] = 0; // alpha ignored
        }
        let db = psnr_rgba8(&a, &b).unwrap();
        assert!((db - 10.0 * (255.0f64 * 255.0 * 3.0 / 100.0).log10()).abs() < 1e-9);
        assert_eq!(psnr_rgba8(&a, &b[..8]), None);
    }
}
