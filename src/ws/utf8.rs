//! Incremental UTF-8 validation of fragmented text messages.
//!
//! RFC 6455 section 8.1: "When an endpoint is to interpret a byte stream as
//! UTF-8 but finds that the byte stream is not, in fact, a valid UTF-8
//! stream, that endpoint MUST _Fail the WebSocket Connection_." A fragment
//! may end inside a code point, so up to 3 bytes are carried over to the next
//! fragment. Autobahn (cases 6.x) also expects the failure as soon as the
//! bytes seen so far cannot start a valid sequence, not at the end of the
//! message, so a pending prefix is checked against the RFC 3629 table
//! ([`is_valid_prefix`]) before it is kept.

use super::error::ProtocolError;

/// Validates a UTF-8 byte stream that arrives in pieces.
///
/// Holds no heap memory: 3 pending bytes and their count.
#[derive(Debug, Clone, Default)]
pub struct Utf8Validator {
    /// The start of a code point cut off at the end of the previous chunk.
    pending: [u8; 3],
    /// How many bytes of `pending` are in use (0..=3).
    pending_len: u8,
}

impl Utf8Validator {
    /// A validator at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Validates the next chunk of the stream.
    ///
    /// Fails as soon as the bytes seen so far can no longer be part of valid
    /// UTF-8, even if the offending code point is not complete yet. An
    /// incomplete but plausible code point at the end is kept for the next
    /// call.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), ProtocolError> {
        let rest = self.complete_pending(bytes)?;
        match std::str::from_utf8(rest) {
            Ok(_) => Ok(()),
            // `error_len() == None` means the input ended inside a code point
            // that may still become valid: keep it for the next chunk.
            Err(err) if err.error_len().is_none() => {
                self.keep_pending(rest.get(err.valid_up_to()..).unwrap_or_default())
            }
            Err(_) => Err(ProtocolError::InvalidUtf8),
        }
    }

    /// Ends the stream: fails if it stopped in the middle of a code point.
    /// The validator is reset either way.
    pub fn finish(&mut self) -> Result<(), ProtocolError> {
        let complete = self.pending_len == 0;
        self.reset();
        if complete {
            Ok(())
        } else {
            Err(ProtocolError::InvalidUtf8)
        }
    }

    /// Forgets any pending bytes, ready for a new stream.
    pub fn reset(&mut self) {
        self.pending_len = 0;
    }

    /// Completes the code point left over from the previous chunk with the
    /// first bytes of `bytes`; returns the bytes after it.
    fn complete_pending<'a>(&mut self, bytes: &'a [u8]) -> Result<&'a [u8], ProtocolError> {
        let pending = self.pending;
        let pending = pending
            .get(..usize::from(self.pending_len))
            .unwrap_or_default();
        let Some(&lead) = pending.first() else {
            return Ok(bytes);
        };
        let wanted = sequence_len(lead)
            .saturating_sub(pending.len())
            .min(bytes.len());
        let (head, rest) = bytes.split_at(wanted);
        let mut scratch = [0u8; 4];
        let joined = join(&mut scratch, pending, head);
        self.reset();
        match std::str::from_utf8(joined) {
            Ok(_) => Ok(rest),
            Err(err) if err.error_len().is_none() => self.keep_pending(joined).map(|()| rest),
            Err(_) => Err(ProtocolError::InvalidUtf8),
        }
    }

    /// Stores an incomplete code point, after checking that it can still be
    /// completed into a valid one.
    fn keep_pending(&mut self, tail: &[u8]) -> Result<(), ProtocolError> {
        if !is_valid_prefix(tail) {
            return Err(ProtocolError::InvalidUtf8);
        }
        let slot = self
            .pending
            .get_mut(..tail.len())
            .ok_or(ProtocolError::InvalidUtf8)?;
        slot.copy_from_slice(tail);
        // `is_valid_prefix` accepted at most 3 bytes.
        self.pending_len = u8::try_from(tail.len()).map_err(|_| ProtocolError::InvalidUtf8)?;
        Ok(())
    }
}

/// Concatenates `a` and `b` (together at most 4 bytes) into `scratch`.
fn join<'s>(scratch: &'s mut [u8; 4], a: &[u8], b: &[u8]) -> &'s [u8] {
    let mut len = 0usize;
    for (slot, &byte) in scratch.iter_mut().zip(a.iter().chain(b)) {
        *slot = byte;
        len = len.saturating_add(1);
    }
    scratch.get(..len).unwrap_or_default()
}

/// Length of the sequence a lead byte starts, or 0 if it cannot start one
/// (continuation bytes, C0/C1 which only encode overlong forms, F5..FF which
/// would exceed U+10FFFF).
fn sequence_len(lead: u8) -> usize {
    match lead {
        0x00..=0x7F => 1,
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 0,
    }
}

/// True if `bytes` is a proper, non-empty prefix of a valid UTF-8 encoded
/// code point (RFC 3629 section 4), i.e. more bytes could still make it valid.
///
/// The second byte carries the special cases: E0 A0..BF excludes overlong
/// 3-byte forms, ED 80..9F excludes the surrogates D800..DFFF, F0 90..BF
/// excludes overlong 4-byte forms and F4 80..8F stops at U+10FFFF.
pub fn is_valid_prefix(bytes: &[u8]) -> bool {
    let Some((&lead, tail)) = bytes.split_first() else {
        return false;
    };
    if tail.len() >= sequence_len(lead).saturating_sub(1) {
        // Complete (or too long, or an invalid lead): not a proper prefix.
        return false;
    }
    let Some((&second, rest)) = tail.split_first() else {
        return true;
    };
    let second_ok = match lead {
        0xE0 => (0xA0..=0xBF).contains(&second),
        0xED => (0x80..=0x9F).contains(&second),
        0xF0 => (0x90..=0xBF).contains(&second),
        0xF4 => (0x80..=0x8F).contains(&second),
        _ => is_continuation(second),
    };
    second_ok && rest.iter().copied().all(is_continuation)
}

/// True for the continuation bytes 10xxxxxx.
fn is_continuation(byte: u8) -> bool {
    byte & 0xC0 == 0x80
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    const SAMPLE: &str = "a\u{e9}\u{20ac}\u{1f600}z\u{7ff}\u{800}\u{ffff}\u{10000}\u{10ffff}";

    fn validate_in_pieces(pieces: &[&[u8]]) -> Result<(), ProtocolError> {
        let mut v = Utf8Validator::new();
        for piece in pieces {
            v.feed(piece)?;
        }
        v.finish()
    }

    #[test]
    fn every_split_point_of_multibyte_chars_is_accepted() {
        let bytes = SAMPLE.as_bytes();
        for i in 0..=bytes.len() {
            let (a, b) = bytes.split_at(i);
            assert_eq!(validate_in_pieces(&[a, b]), Ok(()), "split at {i}");
            for j in i..=bytes.len() {
                let (b, c) = bytes[i..].split_at(j - i);
                assert_eq!(validate_in_pieces(&[a, b, c]), Ok(()), "split {i}/{j}");
            }
        }
    }

    #[test]
    fn byte_by_byte_is_accepted() {
        let mut v = Utf8Validator::new();
        for &byte in SAMPLE.as_bytes() {
            v.feed(&[byte]).unwrap();
        }
        v.finish().unwrap();
    }

    #[test]
    fn incomplete_code_point_fails_on_finish_only() {
        let mut v = Utf8Validator::new();
        assert_eq!(v.feed(&[0xF0, 0x9F, 0x98]), Ok(()));
        assert_eq!(v.finish(), Err(ProtocolError::InvalidUtf8));
        // finish() reset the validator.
        assert_eq!(v.feed(b"ok"), Ok(()));
        assert_eq!(v.finish(), Ok(()));
    }

    #[test]
    fn impossible_prefixes_fail_immediately() {
        let cases: &[&[u8]] = &[
            &[0x80],             // lone continuation byte
            &[0xC0],             // always overlong
            &[0xC1],             // always overlong
            &[0xF5],             // beyond U+10FFFF
            &[0xFF],             // never valid
            &[0xE0, 0x80],       // overlong 3-byte form
            &[0xED, 0xA0],       // UTF-16 surrogate
            &[0xF0, 0x80],       // overlong 4-byte form
            &[0xF4, 0x90],       // beyond U+10FFFF
            &[0xE2, 0x28],       // ASCII where a continuation is due
            &[0xF0, 0x9F, 0x41], // third byte not a continuation
        ];
        for case in cases {
            let mut v = Utf8Validator::new();
            assert_eq!(v.feed(case), Err(ProtocolError::InvalidUtf8), "{case:x?}");
            // Same bytes preceded by valid text.
            let mut v = Utf8Validator::new();
            let mut input = b"hello".to_vec();
            input.extend_from_slice(case);
            assert_eq!(v.feed(&input), Err(ProtocolError::InvalidUtf8), "{case:x?}");
        }
    }

    #[test]
    fn impossible_prefix_split_across_chunks_fails_on_the_bad_byte() {
        for (lead, bad) in [(0xED, 0xA0), (0xE0, 0x80), (0xF0, 0x8F), (0xF4, 0x90)] {
            let mut v = Utf8Validator::new();
            assert_eq!(v.feed(&[b'x', lead]), Ok(()));
            assert_eq!(v.feed(&[bad]), Err(ProtocolError::InvalidUtf8));
        }
        let mut v = Utf8Validator::new();
        assert_eq!(v.feed(&[0xF0]), Ok(()));
        assert_eq!(v.feed(&[0x9F]), Ok(()));
        assert_eq!(v.feed(&[0x41]), Err(ProtocolError::InvalidUtf8));
    }

    #[test]
    fn autobahn_6_3_1_fails_at_the_surrogate() {
        // "κόσμε" followed by an encoded surrogate and "edited".
        let text = [
            0xCE, 0xBA, 0xE1, 0xBD, 0xB9, 0xCF, 0x83, 0xCE, 0xBC, 0xCE, 0xB5, 0xED, 0xA0, 0x80,
            0x65, 0x64, 0x69, 0x74, 0x65, 0x64,
        ];
        let first_bad = 13; // ED A0 is already impossible
        let mut v = Utf8Validator::new();
        for (i, &byte) in text.iter().enumerate() {
            let result = v.feed(&[byte]);
            if i + 1 < first_bad {
                assert_eq!(result, Ok(()), "byte {i}");
            } else {
                assert_eq!(result, Err(ProtocolError::InvalidUtf8), "byte {i}");
                break;
            }
        }
    }

    #[test]
    fn prefix_table_agrees_with_std() {
        // std reports `error_len() == None` exactly for plausible prefixes.
        let std_says = |bytes: &[u8]| {
            matches!(std::str::from_utf8(bytes),
                Err(e) if e.valid_up_to() == 0 && e.error_len().is_none())
        };
        let edges = [
            0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xFF,
        ];
        for a in 0..=255u8 {
            assert_eq!(is_valid_prefix(&[a]), std_says(&[a]), "{a:x}");
            for b in 0..=255u8 {
                assert_eq!(is_valid_prefix(&[a, b]), std_says(&[a, b]), "{a:x} {b:x}");
                for c in edges {
                    let three = [a, b, c];
                    assert_eq!(is_valid_prefix(&three), std_says(&three), "{three:x?}");
                }
            }
        }
        assert!(!is_valid_prefix(&[]));
        assert!(!is_valid_prefix(&[0xF0, 0x9F, 0x98, 0x80]));
    }

    #[test]
    fn random_chunking_agrees_with_std() {
        // A deterministic xorshift stream: mostly valid text with some noise.
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..2000 {
            let mut bytes = SAMPLE.as_bytes().to_vec();
            let flips = next() % 3;
            for _ in 0..flips {
                let at = (next() as usize) % bytes.len();
                bytes[at] = next() as u8;
            }
            let cut1 = (next() as usize) % (bytes.len() + 1);
            let cut2 = cut1 + (next() as usize) % (bytes.len() - cut1 + 1);
            let pieces = [&bytes[..cut1], &bytes[cut1..cut2], &bytes[cut2..]];
            let expected = std::str::from_utf8(&bytes).is_ok();
            assert_eq!(validate_in_pieces(&pieces).is_ok(), expected, "{bytes:x?}");
        }
    }
}
