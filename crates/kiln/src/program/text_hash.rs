//! A fast non-cryptographic hash of program text, for lookup keys whose matches are confirmed
//! by comparing content (the backends' program tables).

/// FxHash-style mixing, eight bytes at a time (a lookup key only: collisions are resolved by
/// comparing content).
pub(crate) fn fx(mut h: u64, bytes: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    let rest = chunks.remainder();
    let mut w = [0u8; 8];
    w[..rest.len()].copy_from_slice(rest);
    h = (h.rotate_left(5) ^ u64::from_le_bytes(w) ^ ((rest.len() as u64) << 56)).wrapping_mul(K);
    (h.rotate_left(5) ^ bytes.len() as u64).wrapping_mul(K)
}

#[cfg(test)]
mod tests {
    use super::fx;

    #[test]
    fn fingerprint_separates_sources_of_equal_length() {
        assert_ne!(fx(0, b"abcdefgh1"), fx(0, b"abcdefgh2"));
        assert_ne!(fx(0, b""), fx(0, b"\0"));
    }
}
