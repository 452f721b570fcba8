//! Compressed server frames, RFC 7692 section 7.2.1.
//!
//! The server always negotiates `server_no_context_takeover`, so every
//! message is compressed from an empty window and the resulting frame is
//! valid for every connection whose window is at least as large: a
//! broadcast is compressed once and the frame shared.

use bytes::Bytes;
use flate2::{Compress, Compression, FlushCompress};

use super::frame::{FrameHeader, OpCode, MAX_HEADER_LEN};
use super::inflate::TAIL;

/// The smallest window zlib deflates raw streams with (it turns 8 into 9).
pub const MIN_WINDOW_BITS: u8 = 9;

/// RSV1, the "Per-Message Compressed" bit (6), as `FrameHeader::rsv`.
pub const RSV1: u8 = 0b100;

/// permessage-deflate settings (`--compression`, `--compression-min-size`,
/// `--compression-level`); defaults from the options table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Negotiate permessage-deflate when a client offers it. Default: on.
    pub enabled: bool,
    /// Messages shorter than this are sent uncompressed (RSV1 clear).
    /// Default: 256 bytes.
    pub min_size: usize,
    /// zlib level, 1 (fast) to 9 (small). Default: 6.
    pub level: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            enabled: true,
            min_size: 256,
            level: 6,
        }
    }
}

/// A compressor for one window size, reused message after message.
pub struct Deflater {
    z: Compress,
}

impl std::fmt::Debug for Deflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deflater").finish_non_exhaustive()
    }
}

impl Deflater {
    /// A raw-DEFLATE compressor at `level` (0-9) with a window of
    /// `2^window_bits` bytes (`MIN_WINDOW_BITS..=15`, clamped).
    pub fn new(level: u32, window_bits: u8) -> Self {
        let bits = window_bits.clamp(MIN_WINDOW_BITS, 15);
        Deflater {
            z: Compress::new_with_window_bits(Compression::new(level.min(9)), false, bits),
        }
    }

    /// One final, compressed (RSV1) server frame carrying the message
    /// `parts` (written back to back), or `None` if compressing does not
    /// make it smaller (the caller sends it uncompressed).
    ///
    /// The payload is compressed into the buffer after room for the
    /// longest header, and the header is written right in front of it,
    /// so the frame is one allocation and no copy.
    pub fn frame(&mut self, opcode: OpCode, parts: &[&[u8]]) -> Option<Bytes> {
        let plain: usize = parts.iter().fold(0usize, |n, p| n.saturating_add(p.len()));
        let mut buf =
            Vec::with_capacity(MAX_HEADER_LEN.saturating_add(plain / 2).saturating_add(64));
        buf.resize(MAX_HEADER_LEN, 0);
        self.compress(parts, &mut buf)?;
        // "Remove 4 octets (that are 0x00 0x00 0xff 0xff) from the tail end"
        // (7.2.1): a sync flush always ends with them.
        if !buf.ends_with(&TAIL) {
            return None;
        }
        buf.truncate(buf.len().saturating_sub(TAIL.len()));
        let payload_len = buf.len().saturating_sub(MAX_HEADER_LEN);
        if payload_len >= plain {
            return None;
        }
        let start = write_header_before(&mut buf, opcode, payload_len)?;
        Some(Bytes::from(buf).slice(start..))
    }

    /// Compresses `parts` onto `out` with a sync flush, from a fresh
    /// context (`server_no_context_takeover`).
    fn compress(&mut self, parts: &[&[u8]], out: &mut Vec<u8>) -> Option<()> {
        self.z.reset();
        let last = parts.len().saturating_sub(1);
        for (i, part) in parts.iter().enumerate() {
            let flush = if i == last {
                FlushCompress::Sync
            } else {
                FlushCompress::None
            };
            let mut rest: &[u8] = part;
            loop {
                if out.capacity().saturating_sub(out.len()) < 64 {
                    out.reserve(rest.len().max(256));
                }
                let before = self.z.total_in();
                self.z.compress_vec(rest, out, flush).ok()?;
                let used = usize::try_from(self.z.total_in().saturating_sub(before)).ok()?;
                rest = rest.get(used..)?;
                // Finished when the input is in and zlib left spare room
                // (so the flush is complete).
                if rest.is_empty() && out.len() < out.capacity() {
                    break;
                }
            }
        }
        Some(())
    }
}

/// Writes a final RSV1 header for `payload_len` bytes right before
/// `buf[MAX_HEADER_LEN..]`; returns where the frame starts.
fn write_header_before(buf: &mut [u8], opcode: OpCode, payload_len: usize) -> Option<usize> {
    let header = FrameHeader {
        fin: true,
        rsv: RSV1,
        opcode,
        mask: None,
        payload_len: payload_len as u64,
    };
    let mut head = [0u8; MAX_HEADER_LEN];
    let len = header.encode(&mut head);
    let start = MAX_HEADER_LEN.checked_sub(len)?;
    buf.get_mut(start..MAX_HEADER_LEN)?
        .copy_from_slice(head.get(..len)?);
    Some(start)
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use super::*;
    use crate::ws::inflate::Inflater;
    use bytes::BytesMut;

    fn json(n: usize) -> Vec<u8> {
        let mut s = String::new();
        let mut i = 0;
        while s.len() < n {
            s.push_str(&format!(
                "{{\"id\":{i},\"price\":{},\"side\":\"buy\"}},",
                i * 7 % 100
            ));
            i += 1;
        }
        s.truncate(n);
        s.into_bytes()
    }

    fn inflate(payload: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        let mut inf = Inflater::new();
        inf.feed(payload, &mut out, 1 << 24).unwrap();
        inf.feed(&TAIL, &mut out, 1 << 24).unwrap();
        out.to_vec()
    }

    #[test]
    fn frame_round_trips_at_every_window_and_length_encoding() {
        for bits in [9, 12, 15] {
            let mut d = Deflater::new(6, bits);
            for n in [100, 2_000, 70_000] {
                let msg = json(n);
                let frame = d
                    .frame(OpCode::Text, &[&msg[..n / 3], &msg[n / 3..]])
                    .unwrap();
                let (h, hlen) = FrameHeader::parse_allowing(&frame, RSV1).unwrap().unwrap();
                assert_eq!(h.rsv, RSV1);
                assert!(h.fin);
                assert_eq!(h.opcode, OpCode::Text);
                assert_eq!(h.payload_len as usize, frame.len() - hlen);
                assert!(frame.len() < n, "{n} compressed to {}", frame.len());
                assert_eq!(inflate(&frame[hlen..]), msg, "bits {bits} n {n}");
            }
        }
    }

    #[test]
    fn incompressible_messages_are_left_to_the_caller() {
        let mut d = Deflater::new(6, 15);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let noise: Vec<u8> = (0..512)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        assert_eq!(d.frame(OpCode::Binary, &[&noise]), None);
        assert_eq!(d.frame(OpCode::Binary, &[b"ab"]), None);
    }

    #[test]
    fn each_message_starts_from_an_empty_window() {
        let mut d = Deflater::new(6, 15);
        let msg = json(1_000);
        let first = d.frame(OpCode::Text, &[&msg]).unwrap();
        let second = d.frame(OpCode::Text, &[&msg]).unwrap();
        assert_eq!(first, second, "no context carried over");
    }
}
