//! `Transfer-Encoding: chunked` (RFC 9112 7.1), sans-I/O.
//!
//! ```text
//! chunked-body = *chunk last-chunk trailer-section CRLF
//! chunk        = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
//! ```
//!
//! The decoder takes whatever bytes have arrived, appends chunk data to the
//! body, and consumes exactly what it used; "need more" is `Ok(false)`.
//! Lines end in CRLF only — accepting a bare LF is where request-smuggling
//! ambiguities start. Extensions and trailers are skipped, bounded by
//! `max_line` bytes in total; the body is bounded by `max_body`, checked
//! against each chunk's declared size before any of it is buffered.

use std::fmt;

use bytes::{Buf, BytesMut};

/// Why a chunked body is rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkedError {
    /// A chunk size that is not hex digits.
    InvalidSize,
    /// A chunk size over 2^64.
    SizeOverflow,
    /// A line or chunk not ended by CRLF.
    ExpectedCrlf,
    /// Extensions or trailers over `max_line` bytes.
    LineTooLong {
        /// The bound.
        max: usize,
    },
    /// The body would exceed `max_body` bytes.
    TooLarge {
        /// The bound.
        max: usize,
    },
}

impl fmt::Display for ChunkedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChunkedError::InvalidSize => f.write_str("invalid chunk size"),
            ChunkedError::SizeOverflow => f.write_str("chunk size overflows"),
            ChunkedError::ExpectedCrlf => f.write_str("expected CRLF in chunked body"),
            ChunkedError::LineTooLong { max } => {
                write!(f, "chunk extensions or trailers over {max} bytes")
            }
            ChunkedError::TooLarge { max } => write!(f, "chunked body over {max} bytes"),
        }
    }
}

impl std::error::Error for ChunkedError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading hex digits (`digits` so far).
    Size { size: u64, digits: u8 },
    /// Skipping `chunk-ext` up to the CR.
    Ext { size: u64 },
    /// CR seen after the size line.
    SizeLf { size: u64 },
    /// `left` bytes of chunk data to go.
    Data { left: u64 },
    /// Expecting the CR after chunk data.
    DataCr,
    /// Expecting the LF after chunk data.
    DataLf,
    /// At the start of a trailer line (or the final CRLF).
    TrailerStart,
    /// Inside a trailer field line.
    Trailer,
    /// CR seen after a trailer line.
    TrailerLf,
    /// CR of the final empty line seen.
    EndLf,
    /// The body is complete.
    Done,
}

/// Decodes one chunked body.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    body_len: usize,
    max_body: usize,
    line_bytes: usize,
    max_line: usize,
}

impl ChunkedDecoder {
    /// A decoder for a body of at most `max_body` bytes, with at most
    /// `max_line` bytes of chunk extensions and trailers together.
    pub fn new(max_body: usize, max_line: usize) -> Self {
        ChunkedDecoder {
            state: State::Size { size: 0, digits: 0 },
            body_len: 0,
            max_body,
            line_bytes: 0,
            max_line,
        }
    }

    /// Whether the whole body has been decoded.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes what it can of `input`, appending chunk data to `out`.
    /// `Ok(true)`: the body is complete (bytes after it stay in `input`).
    pub fn decode(
        &mut self,
        input: &mut BytesMut,
        out: &mut BytesMut,
    ) -> Result<bool, ChunkedError> {
        let mut i = 0;
        let result = loop {
            if self.state == State::Done {
                break Ok(true);
            }
            if i >= input.len() {
                break Ok(false);
            }
            if let State::Data { left } = self.state {
                let n = (input.len() - i).min(usize::try_from(left).unwrap_or(usize::MAX));
                out.extend_from_slice(&input[i..i + n]);
                i += n;
                let left = left - n as u64;
                self.state = if left == 0 {
                    State::DataCr
                } else {
                    State::Data { left }
                };
                continue;
            }
            if let Err(e) = self.step(input[i]) {
                break Err(e);
            }
            i += 1;
        };
        input.advance(i);
        result
    }

    /// Advances over one byte outside chunk data.
    fn step(&mut self, b: u8) -> Result<(), ChunkedError> {
        self.state = match self.state {
            State::Size { size, digits } => match (hex(b), b) {
                (Some(d), _) => State::Size {
                    size: size.checked_mul(16).ok_or(ChunkedError::SizeOverflow)? | u64::from(d),
                    digits: digits.saturating_add(1),
                },
                _ if digits == 0 => return Err(ChunkedError::InvalidSize),
                (None, b'\r') => State::SizeLf { size },
                (None, b';' | b' ' | b'\t') => {
                    self.count_line()?;
                    State::Ext { size }
                }
                (None, _) => return Err(ChunkedError::InvalidSize),
            },
            State::Ext { size } => match b {
                b'\r' => State::SizeLf { size },
                b'\n' => return Err(ChunkedError::ExpectedCrlf),
                _ => {
                    self.count_line()?;
                    State::Ext { size }
                }
            },
            State::SizeLf { size } => {
                if b != b'\n' {
                    return Err(ChunkedError::ExpectedCrlf);
                }
                self.begin_chunk(size)?
            }
            State::DataCr => expect(b, b'\r', State::DataLf)?,
            State::DataLf => expect(b, b'\n', State::Size { size: 0, digits: 0 })?,
            State::TrailerStart if b == b'\r' => State::EndLf,
            State::TrailerStart | State::Trailer => match b {
                b'\r' => State::TrailerLf,
                b'\n' => return Err(ChunkedError::ExpectedCrlf),
                _ => {
                    self.count_line()?;
                    State::Trailer
                }
            },
            State::TrailerLf => expect(b, b'\n', State::TrailerStart)?,
            State::EndLf => expect(b, b'\n', State::Done)?,
            State::Data { .. } | State::Done => unreachable!("handled by decode"),
        };
        Ok(())
    }

    fn begin_chunk(&mut self, size: u64) -> Result<State, ChunkedError> {
        if size == 0 {
            return Ok(State::TrailerStart);
        }
        let too_large = ChunkedError::TooLarge { max: self.max_body };
        let size_usize = usize::try_from(size).map_err(|_| too_large)?;
        let total = self.body_len.checked_add(size_usize).ok_or(too_large)?;
        if total > self.max_body {
            return Err(too_large);
        }
        self.body_len = total;
        Ok(State::Data { left: size })
    }

    fn count_line(&mut self) -> Result<(), ChunkedError> {
        self.line_bytes += 1;
        if self.line_bytes > self.max_line {
            return Err(ChunkedError::LineTooLong { max: self.max_line });
        }
        Ok(())
    }
}

fn expect(b: u8, want: u8, next: State) -> Result<State, ChunkedError> {
    if b == want {
        Ok(next)
    } else {
        Err(ChunkedError::ExpectedCrlf)
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 9112-shaped body with an extension, an upper-case size, an
    /// empty-data-adjacent chunk boundary and a trailer.
    const BODY: &[u8] = b"4\r\nWiki\r\n5;name=\"v;x\"\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n\
        0\r\nExpires: never\r\n\r\nNEXT";
    const DECODED: &[u8] = b"Wikipedia in\r\n\r\nchunks.";

    fn run(parts: &[&[u8]]) -> Result<(Vec<u8>, Vec<u8>), ChunkedError> {
        let mut d = ChunkedDecoder::new(1 << 20, 1024);
        let (mut input, mut out) = (BytesMut::new(), BytesMut::new());
        let mut done = false;
        for p in parts {
            assert!(!done || p.is_empty(), "more input after the end");
            input.extend_from_slice(p);
            done = d.decode(&mut input, &mut out)?;
        }
        assert!(done && d.is_done(), "incomplete");
        Ok((out.to_vec(), input.to_vec()))
    }

    #[test]
    fn decodes_whole_and_leaves_what_follows() {
        let (body, rest) = run(&[BODY]).unwrap();
        assert_eq!(body, DECODED);
        assert_eq!(rest, b"NEXT");
    }

    #[test]
    fn every_split_point_gives_the_same_body() {
        let end = BODY.len() - 4;
        for cut in 0..=end {
            let (body, rest) = run(&[&BODY[..cut], &BODY[cut..end]]).unwrap();
            assert_eq!(body, DECODED, "cut at {cut}");
            assert!(rest.is_empty());
        }
    }

    #[test]
    fn byte_by_byte_gives_the_same_body() {
        let parts: Vec<&[u8]> = BODY[..BODY.len() - 4].chunks(1).collect();
        assert_eq!(run(&parts).unwrap().0, DECODED);
    }

    /// Random bodies cut into random chunks and fed in random pieces
    /// decode to themselves (xorshift: reproducible, no dependency).
    #[test]
    fn random_chunkings_round_trip() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        for _ in 0..300 {
            let body: Vec<u8> = (0..next(3000)).map(|_| next(256) as u8).collect();
            let mut wire = Vec::new();
            let mut rest = &body[..];
            while !rest.is_empty() {
                let n = (next(700) as usize + 1).min(rest.len());
                wire.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                wire.extend_from_slice(&rest[..n]);
                wire.extend_from_slice(b"\r\n");
                rest = &rest[n..];
            }
            wire.extend_from_slice(b"0\r\n\r\n");
            let mut parts = Vec::new();
            let mut w = &wire[..];
            while !w.is_empty() {
                let n = (next(500) as usize + 1).min(w.len());
                parts.push(&w[..n]);
                w = &w[n..];
            }
            assert_eq!(run(&parts).unwrap().0, body);
        }
    }

    #[test]
    fn need_more_consumes_nothing_it_cannot_use_and_reports_false() {
        let mut d = ChunkedDecoder::new(100, 100);
        let (mut input, mut out) = (BytesMut::from(&b"5\r\nab"[..]), BytesMut::new());
        assert_eq!(d.decode(&mut input, &mut out), Ok(false));
        assert_eq!((&input[..], &out[..]), (&b""[..], &b"ab"[..]));
        input.extend_from_slice(b"cde\r\n0\r\n\r\n");
        assert_eq!(d.decode(&mut input, &mut out), Ok(true));
        assert_eq!(&out[..], b"abcde");
    }

    #[test]
    fn malformed_bodies_are_rejected() {
        for (bad, err) in [
            (&b"\r\n"[..], ChunkedError::InvalidSize),
            (b"g\r\n", ChunkedError::InvalidSize),
            (b"-1\r\n", ChunkedError::InvalidSize),
            (b"4\nWiki\r\n", ChunkedError::InvalidSize),
            (b"4\r\nWikiX\r\n", ChunkedError::ExpectedCrlf),
            (b"4\r\nWiki\r\r", ChunkedError::ExpectedCrlf),
            (b"4\rX", ChunkedError::ExpectedCrlf),
            (b"0\r\n\n", ChunkedError::ExpectedCrlf),
            (b"0\r\nA: b\n", ChunkedError::ExpectedCrlf),
            (b"0\r\n\rX", ChunkedError::ExpectedCrlf),
            (b"10000000000000000\r\n", ChunkedError::SizeOverflow),
        ] {
            let mut d = ChunkedDecoder::new(usize::MAX, 1024);
            let r = d.decode(&mut BytesMut::from(bad), &mut BytesMut::new());
            assert_eq!(r, Err(err), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn sizes_and_lines_are_bounded_before_buffering() {
        let mut d = ChunkedDecoder::new(10, 1024);
        let mut out = BytesMut::new();
        assert_eq!(
            d.decode(&mut BytesMut::from(&b"6\r\nabcdef\r\n"[..]), &mut out),
            Ok(false)
        );
        let r = d.decode(&mut BytesMut::from(&b"5\r\n"[..]), &mut out);
        assert_eq!(r, Err(ChunkedError::TooLarge { max: 10 }));
        assert_eq!(out.len(), 6, "nothing of the refused chunk was buffered");
        let mut d = ChunkedDecoder::new(10, 8);
        let r = d.decode(&mut BytesMut::from(&b"1;aaaaaaaaa\r\n"[..]), &mut out);
        assert_eq!(r, Err(ChunkedError::LineTooLong { max: 8 }));
        let mut d = ChunkedDecoder::new(10, 8);
        let r = d.decode(&mut BytesMut::from(&b"0\r\nX-Long: 123\r\n"[..]), &mut out);
        assert_eq!(r, Err(ChunkedError::LineTooLong { max: 8 }));
        // Leading zeros are fine; only the value is bounded.
        let mut d = ChunkedDecoder::new(usize::MAX, 8);
        let r = d.decode(
            &mut BytesMut::from(&b"00000000000000000000001\r\nx\r\n0\r\n\r\n"[..]),
            &mut BytesMut::new(),
        );
        assert_eq!(r, Ok(true));
    }
}
