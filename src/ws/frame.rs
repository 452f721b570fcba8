//! Frame headers and frame encoding, RFC 6455 section 5.2.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-------+-+-------------+-------------------------------+
//! |F|R|R|R| opcode|M| Payload len |    Extended payload length    |
//! |I|S|S|S|  (4)  |A|     (7)     |             (16/64)           |
//! |N|V|V|V|       |S|             |   (if payload len==126/127)   |
//! | |1|2|3|       |K|             |                               |
//! +-+-+-+-+-------+-+-------------+ - - - - - - - - - - - - - - - +
//! |     Extended payload length continued, if payload len == 127  |
//! + - - - - - - - - - - - - - - - +-------------------------------+
//! |                               |Masking-key, if MASK set to 1  |
//! +-------------------------------+-------------------------------+
//! ```
//!
//! Parsing only looks at the header; the payload stays in the caller's
//! buffer. Encoding for the server role produces one contiguous `Bytes` per
//! frame so a broadcast encodes once and every subscriber shares it.

use bytes::{Bytes, BytesMut};

use super::error::ProtocolError;
use super::mask::apply_mask;

/// Frame opcodes defined by RFC 6455 section 5.2; all others are reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum OpCode {
    /// Continues a fragmented text or binary message.
    Continuation = 0,
    /// A (first fragment of a) UTF-8 text message.
    Text = 1,
    /// A (first fragment of a) binary message.
    Binary = 2,
    /// Starts or answers the closing handshake.
    Close = 8,
    /// A keep-alive or round-trip probe; must be answered with a pong.
    Ping = 9,
    /// The answer to a ping (or an unsolicited heartbeat).
    Pong = 10,
}

impl OpCode {
    /// True for close, ping and pong: "Control frames are identified by
    /// opcodes where the most significant bit of the opcode is 1" (5.5).
    pub fn is_control(self) -> bool {
        self as u8 & 0x08 != 0
    }

    /// The opcode for a 4-bit wire value, `None` for reserved values.
    pub fn from_u8(b: u8) -> Option<OpCode> {
        match b {
            0 => Some(Self::Continuation),
            1 => Some(Self::Text),
            2 => Some(Self::Binary),
            8 => Some(Self::Close),
            9 => Some(Self::Ping),
            10 => Some(Self::Pong),
            _ => None,
        }
    }
}

/// The longest possible header: 2 fixed bytes, an 8-byte extended length
/// and a 4-byte masking key.
pub const MAX_HEADER_LEN: usize = 14;

/// "All control frames MUST have a payload length of 125 bytes or less" (5.5).
const MAX_CONTROL_PAYLOAD: u64 = 125;

/// Largest length that fits the 7-bit length field; 126 and 127 announce a
/// 16-bit or 64-bit extended length.
const MAX_SHORT_LEN: u64 = 125;

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Last frame of a message.
    pub fin: bool,
    /// The 3 RSV bits, right-aligned (RSV1 is `0b100`).
    pub rsv: u8,
    /// The frame type.
    pub opcode: OpCode,
    /// The masking key, present on client-to-server frames.
    pub mask: Option<[u8; 4]>,
    /// Payload length in bytes, as announced by the peer.
    pub payload_len: u64,
}

impl FrameHeader {
    /// Parses the header at the start of `buf`.
    ///
    /// `Ok(None)` means more bytes are needed. Otherwise returns the header
    /// and its encoded length. Validates RSV == 0 (no extension is
    /// negotiated), a known opcode, control frames being final and at most
    /// 125 bytes long, and the 64-bit length having its top bit clear. Does
    /// NOT check masking: which side must mask depends on the role, so the
    /// [`Receiver`](super::receiver::Receiver) checks it.
    ///
    /// Rules that the first two bytes decide fail before the rest arrives.
    pub fn parse(buf: &[u8]) -> Result<Option<(FrameHeader, usize)>, ProtocolError> {
        Self::parse_allowing(buf, 0)
    }

    /// Same as [`parse`](Self::parse), but RSV bits in `allowed_rsv` (as
    /// in [`rsv`](Self::rsv)) may be set: an extension was negotiated
    /// that gives them a meaning (RSV1 for permessage-deflate).
    pub fn parse_allowing(
        buf: &[u8],
        allowed_rsv: u8,
    ) -> Result<Option<(FrameHeader, usize)>, ProtocolError> {
        let Some(&[b0, b1]) = buf.first_chunk::<2>() else {
            return Ok(None);
        };
        let (fin, rsv, opcode) = parse_first_byte(b0, allowed_rsv)?;
        let Some((payload_len, len_end)) = parse_length(b1 & 0x7F, buf)? else {
            return Ok(None);
        };
        // "All control frames MUST have a payload length of 125 bytes or
        // less and MUST NOT be fragmented." (5.5)
        if opcode.is_control() && payload_len > MAX_CONTROL_PAYLOAD {
            return Err(ProtocolError::ControlFrameTooBig(payload_len));
        }
        let (mask, header_len) = if b1 & 0x80 == 0 {
            (None, len_end)
        } else {
            match read_array::<4>(buf, len_end) {
                Some(key) => (Some(key), len_end.saturating_add(4)),
                None => return Ok(None),
            }
        };
        let header = FrameHeader {
            fin,
            rsv,
            opcode,
            mask,
            payload_len,
        };
        Ok(Some((header, header_len)))
    }

    /// Encodes the header with the minimal length encoding ("the minimal
    /// number of bytes MUST be used to encode the length", 5.2); returns the
    /// number of bytes written to `out`.
    pub fn encode(&self, out: &mut [u8; MAX_HEADER_LEN]) -> usize {
        let fin = if self.fin { 0x80 } else { 0 };
        let mask_bit = if self.mask.is_some() { 0x80 } else { 0 };
        let [b0, b1, ext @ ..] = out;
        *b0 = fin | ((self.rsv & 0x07) << 4) | self.opcode as u8;
        let ext_len = encode_length(self.payload_len, b1, ext);
        *b1 |= mask_bit;
        let len_end = 2usize.saturating_add(ext_len);
        match (self.mask, ext.get_mut(ext_len..ext_len.saturating_add(4))) {
            (Some(key), Some(slot)) => {
                slot.copy_from_slice(&key);
                len_end.saturating_add(4)
            }
            _ => len_end,
        }
    }

    /// Encoded size of a header for this payload length and masking.
    pub fn encoded_len(payload_len: u64, masked: bool) -> usize {
        let unmasked: usize = match payload_len {
            0..=MAX_SHORT_LEN => 2,
            126..=0xFFFF => 4,
            _ => 10,
        };
        unmasked.saturating_add(if masked { 4 } else { 0 })
    }
}

/// Splits the first header byte into FIN, RSV and a validated opcode.
fn parse_first_byte(b0: u8, allowed_rsv: u8) -> Result<(bool, u8, OpCode), ProtocolError> {
    let fin = b0 & 0x80 != 0;
    let rsv = (b0 >> 4) & 0x07;
    // "MUST be 0 unless an extension is negotiated that defines meanings
    // for non-zero values. If a nonzero value is received and none of the
    // negotiated extensions defines the meaning of such a nonzero value,
    // the receiving endpoint MUST _Fail the WebSocket Connection_." (5.2)
    if rsv & !allowed_rsv != 0 {
        return Err(ProtocolError::ReservedBitsSet);
    }
    // "If an unknown opcode is received, the receiving endpoint MUST _Fail
    // the WebSocket Connection_." (5.2)
    let raw = b0 & 0x0F;
    let opcode = OpCode::from_u8(raw).ok_or(ProtocolError::UnknownOpcode(raw))?;
    // "Control frames themselves MUST NOT be fragmented." (5.4)
    if opcode.is_control() && !fin {
        return Err(ProtocolError::FragmentedControlFrame);
    }
    Ok((fin, rsv, opcode))
}

/// Decodes the payload length from the 7-bit field `len7` and the extended
/// length that follows the two fixed bytes of `buf`. Returns the length and
/// the offset just past it, or `None` if the extended length is incomplete.
///
/// Non-minimal encodings are accepted: the minimal-encoding MUST binds the
/// sender, and rejecting them would protect nothing.
fn parse_length(len7: u8, buf: &[u8]) -> Result<Option<(u64, usize)>, ProtocolError> {
    match len7 {
        126 => Ok(read_array::<2>(buf, 2).map(|b| (u64::from(u16::from_be_bytes(b)), 4))),
        127 => match read_array::<8>(buf, 2).map(u64::from_be_bytes) {
            // "the most significant bit MUST be 0" (5.2)
            Some(len) if len >> 63 != 0 => Err(ProtocolError::InvalidLength),
            Some(len) => Ok(Some((len, 10))),
            None => Ok(None),
        },
        short => Ok(Some((u64::from(short), 2))),
    }
}

/// The `N` bytes of `buf` starting at `at`, if present.
fn read_array<const N: usize>(buf: &[u8], at: usize) -> Option<[u8; N]> {
    buf.get(at..)?.first_chunk::<N>().copied()
}

/// Writes the 7-bit length field into `b1` and any extended length into
/// `ext`; returns how many extended-length bytes were written.
fn encode_length(len: u64, b1: &mut u8, ext: &mut [u8; MAX_HEADER_LEN - 2]) -> usize {
    if let Some(short) = u8::try_from(len)
        .ok()
        .filter(|&l| u64::from(l) <= MAX_SHORT_LEN)
    {
        *b1 = short;
        0
    } else if let Ok(medium) = u16::try_from(len) {
        *b1 = 126;
        write_prefix(ext, &medium.to_be_bytes())
    } else {
        *b1 = 127;
        write_prefix(ext, &len.to_be_bytes())
    }
}

/// Copies `src` to the start of `dst` (which is always long enough here);
/// returns `src.len()`.
fn write_prefix(dst: &mut [u8], src: &[u8]) -> usize {
    if let Some(slot) = dst.get_mut(..src.len()) {
        slot.copy_from_slice(src);
    }
    src.len()
}

/// Encodes a final, unmasked header for a payload of `payload_len` bytes.
fn server_header(opcode: OpCode, payload_len: u64) -> ([u8; MAX_HEADER_LEN], usize) {
    let header = FrameHeader {
        fin: true,
        rsv: 0,
        opcode,
        mask: None,
        payload_len,
    };
    let mut out = [0u8; MAX_HEADER_LEN];
    let len = header.encode(&mut out);
    (out, len)
}

/// A complete unmasked (server-role) frame, header + payload, in one
/// contiguous `Bytes`.
///
/// This is the broadcast hot path: the frame is encoded once and shared by
/// every subscriber, so it is built with exactly one allocation of exact
/// capacity (a `Vec` with `len == capacity` becomes a `Bytes` without
/// copying or reallocating).
pub fn encode_server_frame(opcode: OpCode, payload: &[u8]) -> Bytes {
    encode_server_frame_parts(opcode, &[payload])
}

/// Same as [`encode_server_frame`], with the payload given as several pieces
/// written back to back (used to wrap JSON envelopes without an
/// intermediate copy).
pub fn encode_server_frame_parts(opcode: OpCode, parts: &[&[u8]]) -> Bytes {
    Bytes::from(server_frame_vec(opcode, parts))
}

/// Builds the frame in a `Vec` of exact capacity (kept separate so tests can
/// check the capacity).
fn server_frame_vec(opcode: OpCode, parts: &[&[u8]]) -> Vec<u8> {
    // Slices in memory cannot add up past `isize::MAX` unless one is
    // repeated; saturating keeps that case an allocation failure, not a
    // silently short frame.
    let payload_len = parts
        .iter()
        .fold(0usize, |sum, p| sum.saturating_add(p.len()));
    let (header, header_len) = server_header(opcode, payload_len as u64);
    let mut frame = Vec::with_capacity(header_len.saturating_add(payload_len));
    frame.extend_from_slice(header.get(..header_len).unwrap_or_default());
    for part in parts {
        frame.extend_from_slice(part);
    }
    frame
}

/// Longest close reason: a control payload holds 125 bytes, 2 of which are
/// the status code.
const MAX_CLOSE_REASON: usize = 123;

/// A server close frame carrying `code` and `reason`, the reason truncated
/// on a character boundary to fit the 125-byte control payload limit.
///
/// The caller picks a code that may be sent (not 1005, 1006 or 1015).
pub fn encode_close_frame(code: u16, reason: &str) -> Bytes {
    let reason = truncate_on_char_boundary(reason, MAX_CLOSE_REASON);
    encode_server_frame_parts(OpCode::Close, &[&code.to_be_bytes(), reason.as_bytes()])
}

/// The longest prefix of `s` of at most `max` bytes that is still valid
/// UTF-8 (the close reason MUST be UTF-8, 5.5.1).
fn truncate_on_char_boundary(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end = end.saturating_sub(1);
    }
    s.get(..end).unwrap_or_default()
}

/// Client role: appends a final frame masked with `mask` to `out`.
///
/// "A client MUST mask all frames that it sends to the server" (5.1).
pub fn encode_client_frame(opcode: OpCode, payload: &[u8], mask: [u8; 4], out: &mut BytesMut) {
    let header = FrameHeader {
        fin: true,
        rsv: 0,
        opcode,
        mask: Some(mask),
        payload_len: payload.len() as u64,
    };
    let mut head = [0u8; MAX_HEADER_LEN];
    let head_len = header.encode(&mut head);
    out.reserve(head_len.saturating_add(payload.len()));
    out.extend_from_slice(head.get(..head_len).unwrap_or_default());
    let start = out.len();
    out.extend_from_slice(payload);
    if let Some(body) = out.get_mut(start..) {
        apply_mask(body, mask);
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];
    const LENGTHS: [u64; 9] = [
        0,
        1,
        125,
        126,
        65535,
        65536,
        u32::MAX as u64,
        u32::MAX as u64 + 1,
        (1 << 63) - 1,
    ];

    fn header(opcode: OpCode, payload_len: u64, mask: Option<[u8; 4]>) -> FrameHeader {
        FrameHeader {
            fin: true,
            rsv: 0,
            opcode,
            mask,
            payload_len,
        }
    }

    fn encode(h: &FrameHeader) -> Vec<u8> {
        let mut out = [0u8; MAX_HEADER_LEN];
        let n = h.encode(&mut out);
        out[..n].to_vec()
    }

    #[test]
    fn opcode_classification() {
        for raw in 0..=15u8 {
            match OpCode::from_u8(raw) {
                Some(op) => {
                    assert_eq!(op as u8, raw);
                    assert_eq!(op.is_control(), raw >= 8);
                }
                None => assert!(matches!(raw, 3..=7 | 11..=15), "{raw}"),
            }
        }
    }

    #[test]
    fn round_trip_every_length_class_masked_and_unmasked() {
        for len in LENGTHS {
            for mask in [None, Some(MASK)] {
                for fin in [true, false] {
                    let h = FrameHeader {
                        fin,
                        ..header(OpCode::Binary, len, mask)
                    };
                    let bytes = encode(&h);
                    assert_eq!(bytes.len(), FrameHeader::encoded_len(len, mask.is_some()));
                    assert_eq!(FrameHeader::parse(&bytes), Ok(Some((h, bytes.len()))));
                    // Trailing payload bytes do not change the result.
                    let mut longer = bytes.clone();
                    longer.extend_from_slice(b"payload");
                    assert_eq!(FrameHeader::parse(&longer), Ok(Some((h, bytes.len()))));
                }
            }
        }
    }

    #[test]
    fn every_truncated_prefix_needs_more() {
        for len in LENGTHS {
            for mask in [None, Some(MASK)] {
                let bytes = encode(&header(OpCode::Text, len, mask));
                for cut in 0..bytes.len() {
                    assert_eq!(FrameHeader::parse(&bytes[..cut]), Ok(None), "{len} {cut}");
                }
            }
        }
    }

    #[test]
    fn minimal_length_encoding() {
        assert_eq!(encode(&header(OpCode::Text, 125, None)), [0x81, 125]);
        assert_eq!(
            encode(&header(OpCode::Text, 126, None)),
            [0x81, 126, 0, 126]
        );
        assert_eq!(
            encode(&header(OpCode::Text, 65536, None)),
            [0x81, 127, 0, 0, 0, 0, 0, 1, 0, 0]
        );
    }

    #[test]
    fn non_minimal_length_is_accepted() {
        let (h, n) = FrameHeader::parse(&[0x82, 126, 0, 5]).unwrap().unwrap();
        assert_eq!((h.payload_len, n), (5, 4));
    }

    #[test]
    fn rfc_6455_5_7_headers() {
        let (h, n) = FrameHeader::parse(&[0x81, 0x05, 0x48]).unwrap().unwrap();
        assert_eq!((h, n), (header(OpCode::Text, 5, None), 2));
        let masked = [0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f];
        let (h, n) = FrameHeader::parse(&masked).unwrap().unwrap();
        assert_eq!((h, n), (header(OpCode::Text, 5, Some(MASK)), 6));
        let (h, _) = FrameHeader::parse(&[0x01, 0x03]).unwrap().unwrap();
        assert!(!h.fin);
        assert_eq!(h.opcode, OpCode::Text);
        let (h, n) = FrameHeader::parse(&[0x82, 0x7E, 0x01, 0x00])
            .unwrap()
            .unwrap();
        assert_eq!((h.payload_len, n), (256, 4));
        let big = [0x82, 0x7F, 0, 0, 0, 0, 0, 1, 0, 0];
        let (h, n) = FrameHeader::parse(&big).unwrap().unwrap();
        assert_eq!((h.payload_len, n), (65536, 10));
    }

    #[test]
    fn header_rule_violations() {
        let cases: [(&[u8], ProtocolError); 6] = [
            (&[0xC1, 0x00], ProtocolError::ReservedBitsSet),
            (&[0x91, 0x00], ProtocolError::ReservedBitsSet),
            (&[0x83, 0x00], ProtocolError::UnknownOpcode(3)),
            (&[0x8B, 0x00], ProtocolError::UnknownOpcode(0xB)),
            (&[0x09, 0x00], ProtocolError::FragmentedControlFrame),
            (&[0x89, 126, 0, 126], ProtocolError::ControlFrameTooBig(126)),
        ];
        for (bytes, err) in cases {
            assert_eq!(FrameHeader::parse(bytes), Err(err), "{bytes:x?}");
        }
        let msb = [0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(FrameHeader::parse(&msb), Err(ProtocolError::InvalidLength));
    }

    #[test]
    fn first_byte_rules_fail_before_the_rest_arrives() {
        assert_eq!(
            FrameHeader::parse(&[0xC1, 0xFF]),
            Err(ProtocolError::ReservedBitsSet)
        );
        assert_eq!(FrameHeader::parse(&[0x01]), Ok(None));
    }

    #[test]
    fn rsv_and_fin_round_trip() {
        let h = FrameHeader {
            fin: false,
            rsv: 0b101,
            ..header(OpCode::Text, 3, None)
        };
        let bytes = encode(&h);
        assert_eq!(bytes[0], 0x51);
        // RSV bits are rejected on parse since no extension is negotiated.
        assert_eq!(
            FrameHeader::parse(&bytes),
            Err(ProtocolError::ReservedBitsSet)
        );
    }

    #[test]
    fn server_frame_is_exact_and_contiguous() {
        let payload = vec![7u8; 300];
        let frame = encode_server_frame(OpCode::Binary, &payload);
        assert_eq!(&frame[..4], &[0x82, 126, 0x01, 0x2C]);
        assert_eq!(&frame[4..], &payload[..]);
        let vec = server_frame_vec(OpCode::Binary, &[&payload]);
        assert_eq!(vec.capacity(), vec.len());
    }

    #[test]
    fn server_frame_from_parts_matches_single_payload() {
        let parts: [&[u8]; 3] = [b"{\"data\":", b"[1,2,3]", b"}"];
        let joined = parts.concat();
        assert_eq!(
            encode_server_frame_parts(OpCode::Text, &parts),
            encode_server_frame(OpCode::Text, &joined)
        );
        assert_eq!(encode_server_frame_parts(OpCode::Text, &[]), &[0x81, 0][..]);
        let vec = server_frame_vec(OpCode::Text, &parts);
        assert_eq!(vec.capacity(), vec.len());
    }

    #[test]
    fn rfc_6455_unmasked_hello() {
        let frame = encode_server_frame(OpCode::Text, b"Hello");
        assert_eq!(frame, &[0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f][..]);
        let ping = encode_server_frame(OpCode::Ping, b"Hello");
        assert_eq!(ping, &[0x89, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f][..]);
    }

    #[test]
    fn close_frame_layout() {
        let frame = encode_close_frame(1000, "bye");
        assert_eq!(frame, &[0x88, 5, 0x03, 0xE8, b'b', b'y', b'e'][..]);
        assert_eq!(encode_close_frame(1001, ""), &[0x88, 2, 0x03, 0xE9][..]);
    }

    #[test]
    fn close_reason_is_truncated_on_a_char_boundary() {
        // 62 two-byte characters = 124 bytes: the last one does not fit.
        let reason = "\u{e9}".repeat(62);
        let frame = encode_close_frame(1001, &reason);
        assert_eq!(frame.len(), 2 + 2 + 122);
        assert_eq!(frame[1], 124);
        assert!(std::str::from_utf8(&frame[4..]).is_ok());
        let ascii = "x".repeat(200);
        let frame = encode_close_frame(1001, &ascii);
        assert_eq!(frame[1], 125);
    }

    #[test]
    fn rfc_6455_masked_hello_from_client() {
        let mut out = BytesMut::new();
        encode_client_frame(OpCode::Text, b"Hello", MASK, &mut out);
        let expected = [
            0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
        ];
        assert_eq!(&out[..], &expected);
        // Appends rather than overwrites.
        encode_client_frame(OpCode::Pong, b"Hello", MASK, &mut out);
        assert_eq!(out[11], 0x8a);
        assert_eq!(&out[12..], &expected[1..]);
    }
}
