//! Payload (un)masking, RFC 6455 section 5.3.
//!
//! "Octet i of the transformed data ("transformed-octet-i") is the XOR of
//! octet i of the original data ("original-octet-i") with octet at index
//! i modulo 4 of the masking key ("masking-key-octet-j")". Masking is its own
//! inverse, so the same functions mask and unmask.
//!
//! Every byte a client sends passes through here, so [`apply_mask`] XORs
//! eight bytes at a time. It stays safe code: `chunks_exact_mut` plus
//! `from_ne_bytes` compiles to plain unaligned 64-bit loads and stores, and
//! [`apply_mask_bytewise`] is the reference it is tested against.

/// XORs `buf` with `mask`, starting at key byte 0 (the fast path).
pub fn apply_mask(buf: &mut [u8], mask: [u8; 4]) {
    // The key repeated twice: lane i of the word still meets key byte i % 4,
    // and the native byte order is used for both load and store, so the
    // result does not depend on endianness.
    let [a, b, c, d] = mask;
    let wide = u64::from_ne_bytes([a, b, c, d, a, b, c, d]);
    let mut chunks = buf.chunks_exact_mut(8);
    for chunk in chunks.by_ref() {
        if let Ok(word) = <&mut [u8; 8]>::try_from(chunk) {
            *word = (u64::from_ne_bytes(*word) ^ wide).to_ne_bytes();
        }
    }
    // The chunks covered a multiple of 8 (thus of 4) bytes, so the tail
    // starts again at key byte 0.
    apply_mask_bytewise(chunks.into_remainder(), mask);
}

/// XORs `buf` with `mask` as if `buf` started at byte `offset` of the
/// payload: the first byte meets key byte `offset % 4`.
///
/// Used when a payload is unmasked in several pieces.
pub fn apply_mask_offset(buf: &mut [u8], mask: [u8; 4], offset: usize) {
    let mut rotated = mask;
    rotated.rotate_left(offset % 4);
    apply_mask(buf, rotated);
}

/// The byte-at-a-time reference implementation of [`apply_mask`].
pub fn apply_mask_bytewise(buf: &mut [u8], mask: [u8; 4]) {
    for (byte, key) in buf.iter_mut().zip(mask.iter().cycle()) {
        *byte ^= key;
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

    /// Byte i of a buffer starting `offset` bytes into the payload.
    fn reference(buf: &mut [u8], mask: [u8; 4], offset: usize) {
        for (i, byte) in buf.iter_mut().enumerate() {
            *byte ^= mask[(i + offset) % 4];
        }
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 + 7) as u8).collect()
    }

    #[test]
    fn fast_path_matches_reference_for_every_length_alignment_and_offset() {
        for len in 0..64 {
            for align in 0..8 {
                for offset in 0..4 {
                    let mut fast = pattern(align + len + 8);
                    let mut slow = fast.clone();
                    apply_mask_offset(&mut fast[align..align + len], MASK, offset);
                    reference(&mut slow[align..align + len], MASK, offset);
                    assert_eq!(fast, slow, "len {len} align {align} offset {offset}");
                }
            }
        }
    }

    #[test]
    fn fast_path_matches_bytewise() {
        for len in 0..64 {
            for align in 0..8 {
                let mut fast = pattern(align + len);
                let mut slow = fast.clone();
                apply_mask(&mut fast[align..], MASK);
                apply_mask_bytewise(&mut slow[align..], MASK);
                assert_eq!(fast, slow, "len {len} align {align}");
            }
        }
    }

    #[test]
    fn masking_twice_is_identity() {
        let original = pattern(1000);
        let mut buf = original.clone();
        apply_mask(&mut buf, MASK);
        assert_ne!(buf, original);
        apply_mask(&mut buf, MASK);
        assert_eq!(buf, original);
    }

    #[test]
    fn unmasking_in_pieces_matches_one_pass() {
        let mut whole = pattern(37);
        let mut pieces = whole.clone();
        apply_mask(&mut whole, MASK);
        let (head, tail) = pieces.split_at_mut(13);
        apply_mask_offset(head, MASK, 0);
        apply_mask_offset(tail, MASK, 13);
        assert_eq!(whole, pieces);
    }

    #[test]
    fn rfc_6455_hello_example() {
        // Section 5.7: "Hello" masked with 37 fa 21 3d.
        let mut payload = [0x7f, 0x9f, 0x4d, 0x51, 0x58];
        apply_mask(&mut payload, MASK);
        assert_eq!(&payload, b"Hello");
    }
}
