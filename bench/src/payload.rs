//! The stamp every benchmark message carries: publisher id, sequence number
//! and send time, padded to the requested message size.
//!
//! Two encodings, told apart by the frame's opcode:
//! - binary (WebSocket publishers): `id: u32 LE | seq: u64 LE | sent_ns: u64 LE`,
//!   [`BINARY_LEN`] bytes;
//! - text (HTTP publishers, whose bodies the server sends as text frames):
//!   the same fields as fixed-width lowercase hex, [`TEXT_LEN`] bytes.
//!
//! Padding is `.` (valid UTF-8 either way).

/// Bytes of the binary stamp.
pub const BINARY_LEN: usize = 4 + 8 + 8;
/// Bytes of the text stamp: 8 + 16 + 16 hex digits.
pub const TEXT_LEN: usize = 8 + 16 + 16;

/// What a message says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Publisher index, 0-based.
    pub publisher: u32,
    /// Per-publisher sequence number, from 0.
    pub seq: u64,
    /// CLOCK_REALTIME at send, in nanoseconds since the Unix epoch.
    pub sent_ns: u64,
}

/// Which encoding a publisher uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Binary frames (WebSocket publishers).
    Binary,
    /// Hex text (HTTP publishers).
    Text,
}

impl Encoding {
    /// The smallest message that holds a stamp.
    pub fn min_len(self) -> usize {
        match self {
            Encoding::Binary => BINARY_LEN,
            Encoding::Text => TEXT_LEN,
        }
    }
}

impl Stamp {
    /// Appends the stamp padded to `size` bytes (at least
    /// `enc.min_len()`) to `out`.
    pub fn encode(&self, enc: Encoding, size: usize, out: &mut Vec<u8>) {
        let start = out.len();
        match enc {
            Encoding::Binary => {
                out.extend_from_slice(&self.publisher.to_le_bytes());
                out.extend_from_slice(&self.seq.to_le_bytes());
                out.extend_from_slice(&self.sent_ns.to_le_bytes());
            }
            Encoding::Text => {
                push_hex(out, u64::from(self.publisher), 8);
                push_hex(out, self.seq, 16);
                push_hex(out, self.sent_ns, 16);
            }
        }
        let end = start + size.max(enc.min_len());
        out.resize(end, b'.');
    }

    /// Reads the stamp at the start of `payload`; `None` if it is too short
    /// or (text) not hex.
    #[inline]
    pub fn decode(enc: Encoding, payload: &[u8]) -> Option<Stamp> {
        match enc {
            Encoding::Binary => {
                let (id, rest) = payload.split_first_chunk::<4>()?;
                let (seq, rest) = rest.split_first_chunk::<8>()?;
                let (sent, _) = rest.split_first_chunk::<8>()?;
                Some(Stamp {
                    publisher: u32::from_le_bytes(*id),
                    seq: u64::from_le_bytes(*seq),
                    sent_ns: u64::from_le_bytes(*sent),
                })
            }
            Encoding::Text => {
                let head = payload.get(..TEXT_LEN)?;
                Some(Stamp {
                    publisher: u32::try_from(parse_hex(head.get(..8)?)?).ok()?,
                    seq: parse_hex(head.get(8..24)?)?,
                    sent_ns: parse_hex(head.get(24..40)?)?,
                })
            }
        }
    }
}

/// Realistic JSON for `--json-payload` padding: varied keys, numbers and
/// words, so a message compresses like an application's events (about
/// 3-4x with DEFLATE), not like a run of dots.
const JSON_SAMPLE: &[u8] = br#"{"type":"trade","symbol":"BTC-EUR","price":61234.57,"qty":0.0142,"side":"buy","ts":1796400000123,"venue":"xnas","id":"9f1c2e7a-44b1-4c0e-9d2a-1b7e33f0a9c4","book":{"bids":[[61230.1,0.52],[61229.8,1.10],[61228.0,0.07]],"asks":[[61235.2,0.33],[61236.9,2.41],[61240.0,0.90]]},"user":{"name":"Ingrid Lovaas","country":"NO","tier":3},"tags":["spot","eur","maker"],"seq":48213,"ok":true},{"type":"quote","symbol":"ETH-USD","bid":3012.44,"ask":3012.97,"ts":1796400000131,"venue":"arca","id":"c0a9e1f4-7d22-4b36-8e41-05d8a7c2be10","greeks":{"delta":0.41,"gamma":0.002,"vega":1.73},"note":"indicative only","seq":48214,"ok":false},"#;

impl Stamp {
    /// Replaces the `.` padding after the stamp (from `from`) with
    /// [`JSON_SAMPLE`], repeated as needed.
    pub fn pad_json(out: &mut [u8], from: usize) {
        if let Some(pad) = out.get_mut(from..) {
            for (b, s) in pad.iter_mut().zip(JSON_SAMPLE.iter().cycle()) {
                *b = *s;
            }
        }
    }
}

fn push_hex(out: &mut Vec<u8>, v: u64, digits: u32) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for i in (0..digits).rev() {
        out.push(HEX[((v >> (i * 4)) & 0xF) as usize]);
    }
}

fn parse_hex(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |acc, &d| {
        let nibble = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            _ => return None,
        };
        Some((acc << 4) | u64::from(nibble))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAMP: Stamp = Stamp {
        publisher: 0xdead_beef,
        seq: 0x0123_4567_89ab_cdef,
        sent_ns: 1_790_000_000_123_456_789,
    };

    #[test]
    fn both_encodings_round_trip_and_pad() {
        for enc in [Encoding::Binary, Encoding::Text] {
            for size in [0, enc.min_len(), 128, 4096] {
                let mut out = b"prefix".to_vec();
                STAMP.encode(enc, size, &mut out);
                assert_eq!(out.len(), 6 + size.max(enc.min_len()));
                let body = &out[6..];
                assert_eq!(Stamp::decode(enc, body), Some(STAMP), "{enc:?} {size}");
                assert!(body[enc.min_len()..].iter().all(|&b| b == b'.'));
            }
        }
    }

    #[test]
    fn text_stamp_is_ascii_hex() {
        let mut out = Vec::new();
        STAMP.encode(Encoding::Text, 0, &mut out);
        assert_eq!(&out[..24], b"deadbeef0123456789abcdef");
        assert!(std::str::from_utf8(&out).is_ok());
    }

    #[test]
    fn short_or_garbled_payloads_are_rejected() {
        let mut out = Vec::new();
        STAMP.encode(Encoding::Text, 0, &mut out);
        assert_eq!(Stamp::decode(Encoding::Text, &out[..TEXT_LEN - 1]), None);
        out[3] = b'G';
        assert_eq!(Stamp::decode(Encoding::Text, &out), None);
        assert_eq!(Stamp::decode(Encoding::Binary, &[0; BINARY_LEN - 1]), None);
    }
}
