//! Unique byte patterns: every allocation in a test gets its own, so two live
//! allocations that overlap clobber each other's pattern and the check fails.

/// A deterministic byte stream from a seed (SplitMix64 output, little-endian).
///
/// Different seeds give different streams at every offset, and a stream never
/// repeats within the sizes the tests use.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut state = seed ^ 0x05EE_D0FA_110C;
    while out.len() < len {
        out.extend_from_slice(&splitmix64(&mut state).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Fills `dst` with [`pattern`]`(seed, dst.len())`.
pub fn fill(seed: u64, dst: &mut [u8]) {
    let bytes = pattern(seed, dst.len());
    dst.copy_from_slice(&bytes);
}

/// Where a buffer differs from the pattern it should hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// Offset of the first differing byte.
    pub offset: usize,
    /// Bytes that differ in all.
    pub count: usize,
    /// The byte expected at `offset`.
    pub expected: u8,
    /// The byte found at `offset`.
    pub found: u8,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} byte(s) differ, the first at offset {} (expected {:#04x}, found {:#04x})",
            self.count, self.offset, self.expected, self.found
        )
    }
}

/// Checks that `data` holds [`pattern`]`(seed, data.len())`.
pub fn check(seed: u64, data: &[u8]) -> Result<(), Mismatch> {
    let expected = pattern(seed, data.len());
    let mut first = None;
    let mut count = 0;
    for (i, (e, f)) in expected.iter().zip(data).enumerate() {
        if e != f {
            count += 1;
            first.get_or_insert((i, *e, *f));
        }
    }
    match first {
        None => Ok(()),
        Some((offset, expected, found)) => Err(Mismatch {
            offset,
            count,
            expected,
            found,
        }),
    }
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_differ_and_check() {
        let a = pattern(1, 100);
        let b = pattern(2, 100);
        assert_ne!(a, b);
        assert!(check(1, &a).is_ok());
        let err = check(2, &a).unwrap_err();
        assert!(err.count > 90, "{err}");
        let mut c = a.clone();
        c[17] ^= 0xff;
        assert_eq!(check(1, &c).unwrap_err().offset, 17);
        assert_eq!(&pattern(1, 13)[..], &a[..13]);
    }
}
