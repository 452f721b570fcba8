//! A stored response, or the `Vary` marker of a base key, in one compact
//! binary encoding — the same bytes in Redis and in the memory store.
//!
//! ```text
//! response: "cc" 1 'R' | status u16 | flags u8 | date_ms u64 | fresh_ms u64
//!           | swr_ms u64 | sie_ms u64 | etag (u16 len, bytes)
//!           | headers (u8 count; each u8 name len, u16 value len, bytes)
//!           | body (the rest)
//! marker:   "cc" 1 'V' | nonce u64 | names (u8 count; each u8 len, bytes)
//! ```
//!
//! Integers are little-endian. Decoding never copies the body or header
//! values: they are slices of the stored `Bytes`.

use std::fmt;

use bytes::{BufMut, Bytes};

use super::policy::Lifetimes;

const MAGIC: &[u8; 3] = b"cc\x01";
const KIND_RESPONSE: u8 = b'R';
const KIND_VARY: u8 = b'V';
/// `flags` bit: the ETag came from the origin (usable to revalidate there).
const ETAG_FROM_ORIGIN: u8 = 1;

/// A response as the cache keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Status code.
    pub status: u16,
    /// When the origin generated it (Unix ms, received time minus `Age`).
    pub date_ms: u64,
    /// Freshness and grace windows.
    pub life: Lifetimes,
    /// The entity tag, quoted as sent (the origin's, or a body hash).
    pub etag: Option<Bytes>,
    /// Whether `etag` is the origin's own.
    pub etag_from_origin: bool,
    /// Header lines kept (names as the origin sent them).
    pub headers: Vec<(Bytes, Bytes)>,
    /// The body.
    pub body: Bytes,
}

impl Entry {
    /// Age in ms at `now_ms` (0 if clocks disagree).
    pub fn age_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.date_ms)
    }

    /// The values of header `name` (case-insensitive).
    pub fn header<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers
            .iter()
            .filter(move |(k, _)| k.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| &v[..])
    }
}

/// The marker at a base key whose response varies: which request headers
/// select the variant, and the nonce of the current variant keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VaryMarker {
    /// Keys of variants are `key::variant_key(base, nonce, values)`.
    pub nonce: u64,
    /// Lowercase header names.
    pub names: Vec<String>,
}

/// What a key holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// A response.
    Response(Entry),
    /// A `Vary` marker.
    Vary(VaryMarker),
}

/// Why stored bytes could not be decoded (a foreign or corrupt value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Not our magic or version.
    BadMagic,
    /// Unknown kind byte.
    BadKind(u8),
    /// Ends inside a field.
    Truncated,
    /// A header name or Vary name that is not UTF-8 / not a token.
    BadName,
    /// Flag bits this version does not know.
    BadFlags(u8),
    /// Bytes after a complete marker.
    Trailing,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::BadMagic => f.write_str("not a cache entry"),
            DecodeError::BadKind(k) => write!(f, "unknown entry kind {k}"),
            DecodeError::Truncated => f.write_str("truncated entry"),
            DecodeError::BadName => f.write_str("invalid name in entry"),
            DecodeError::BadFlags(b) => write!(f, "unknown entry flags {b:#x}"),
            DecodeError::Trailing => f.write_str("bytes after the entry"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Encodes a response. Headers that do not fit the format (more than 255,
/// names over 255 bytes, values over 64 KiB) are left out; so is an ETag
/// over 64 KiB.
pub fn encode(e: &Entry) -> Bytes {
    let headers: Vec<_> = e
        .headers
        .iter()
        .filter(|(k, v)| k.len() <= 255 && v.len() <= usize::from(u16::MAX))
        .take(255)
        .collect();
    let etag = e.etag.as_ref().filter(|t| t.len() <= usize::from(u16::MAX));
    let head_len: usize = headers.iter().map(|(k, v)| 3 + k.len() + v.len()).sum();
    let etag_len = etag.map_or(0, Bytes::len);
    let mut out = Vec::with_capacity(48 + etag_len + head_len + e.body.len());
    out.put_slice(MAGIC);
    out.put_u8(KIND_RESPONSE);
    out.put_u16_le(e.status);
    out.put_u8(if e.etag_from_origin {
        ETAG_FROM_ORIGIN
    } else {
        0
    });
    for v in [e.date_ms, e.life.fresh_ms, e.life.swr_ms, e.life.sie_ms] {
        out.put_u64_le(v);
    }
    out.put_u16_le(etag_len as u16);
    if let Some(t) = etag {
        out.put_slice(t);
    }
    out.put_u8(headers.len() as u8);
    for (k, v) in headers {
        out.put_u8(k.len() as u8);
        out.put_u16_le(v.len() as u16);
        out.put_slice(k);
        out.put_slice(v);
    }
    out.put_slice(&e.body);
    out.into()
}

/// Encodes a `Vary` marker (names over 255 bytes cannot occur: they were
/// parsed from one header line of a bounded head, but are cut to be safe).
pub fn encode_marker(m: &VaryMarker) -> Bytes {
    let mut out = Vec::with_capacity(16 + m.names.iter().map(|n| n.len() + 1).sum::<usize>());
    out.put_slice(MAGIC);
    out.put_u8(KIND_VARY);
    out.put_u64_le(m.nonce);
    let names: Vec<_> = m
        .names
        .iter()
        .filter(|n| n.len() <= 255)
        .take(255)
        .collect();
    out.put_u8(names.len() as u8);
    for n in names {
        out.put_u8(n.len() as u8);
        out.put_slice(n.as_bytes());
    }
    out.into()
}

/// Decodes what [`encode`] or [`encode_marker`] produced.
pub fn decode(b: Bytes) -> Result<Stored, DecodeError> {
    let mut r = Reader { b: &b, i: 0 };
    if r.take(3)? != MAGIC {
        return Err(DecodeError::BadMagic);
    }
    match r.u8()? {
        KIND_RESPONSE => decode_response(&b, r).map(Stored::Response),
        KIND_VARY => decode_marker(r).map(Stored::Vary),
        k => Err(DecodeError::BadKind(k)),
    }
}

fn decode_response(b: &Bytes, mut r: Reader<'_>) -> Result<Entry, DecodeError> {
    let status = r.u16()?;
    let flags = r.u8()?;
    if flags & !ETAG_FROM_ORIGIN != 0 {
        return Err(DecodeError::BadFlags(flags));
    }
    let date_ms = r.u64()?;
    let life = Lifetimes {
        fresh_ms: r.u64()?,
        swr_ms: r.u64()?,
        sie_ms: r.u64()?,
    };
    let etag_len = usize::from(r.u16()?);
    let etag = (etag_len > 0).then(|| r.slice(b, etag_len)).transpose()?;
    let count = r.u8()?;
    let mut headers = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let (kl, vl) = (usize::from(r.u8()?), usize::from(r.u16()?));
        let k = r.slice(b, kl)?;
        if !k.iter().all(|&c| c.is_ascii_graphic() && c != b':') {
            return Err(DecodeError::BadName);
        }
        headers.push((k, r.slice(b, vl)?));
    }
    Ok(Entry {
        status,
        date_ms,
        life,
        etag,
        etag_from_origin: flags & ETAG_FROM_ORIGIN != 0,
        headers,
        body: b.slice(r.i..),
    })
}

fn decode_marker(mut r: Reader<'_>) -> Result<VaryMarker, DecodeError> {
    let nonce = r.u64()?;
    let count = r.u8()?;
    let mut names = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let len = usize::from(r.u8()?);
        let n = std::str::from_utf8(r.take(len)?).map_err(|_| DecodeError::BadName)?;
        names.push(n.to_string());
    }
    if r.i != r.b.len() {
        return Err(DecodeError::Trailing);
    }
    Ok(VaryMarker { nonce, names })
}

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.i.checked_add(n).ok_or(DecodeError::Truncated)?;
        let s = self.b.get(self.i..end).ok_or(DecodeError::Truncated)?;
        self.i = end;
        Ok(s)
    }

    fn slice(&mut self, whole: &Bytes, n: usize) -> Result<Bytes, DecodeError> {
        let start = self.i;
        self.take(n)?;
        Ok(whole.slice(start..self.i))
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        let s = self.take(2)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let s = self.take(8)?;
        Ok(u64::from_le_bytes(s.try_into().expect("8 bytes")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Entry {
        Entry {
            status: 203,
            date_ms: 1_700_000_000_123,
            life: Lifetimes {
                fresh_ms: 60_000,
                swr_ms: 10_000,
                sie_ms: 300_000,
            },
            etag: Some(Bytes::from_static(b"\"abc\"")),
            etag_from_origin: true,
            headers: vec![
                (
                    Bytes::from_static(b"Content-Type"),
                    Bytes::from_static(b"application/json"),
                ),
                (Bytes::from_static(b"Vary"), Bytes::from_static(b"")),
            ],
            body: Bytes::from_static(b"{\"x\":1}\r\n\0binary"),
        }
    }

    #[test]
    fn responses_round_trip_without_copying_the_body() {
        let e = sample();
        let bytes = encode(&e);
        let Stored::Response(back) = decode(bytes.clone()).unwrap() else {
            panic!("not a response")
        };
        assert_eq!(back, e);
        assert_eq!(
            back.body.as_ptr(),
            bytes[bytes.len() - e.body.len()..].as_ptr()
        );
        let bare = Entry {
            etag: None,
            etag_from_origin: false,
            headers: vec![],
            body: Bytes::new(),
            ..e
        };
        assert_eq!(decode(encode(&bare)).unwrap(), Stored::Response(bare));
    }

    #[test]
    fn markers_round_trip() {
        let m = VaryMarker {
            nonce: 0xdead_beef,
            names: vec!["accept".into(), "accept-language".into()],
        };
        assert_eq!(decode(encode_marker(&m)).unwrap(), Stored::Vary(m));
        // Found by the `cache_entry` fuzz target: a marker with junk after it.
        let junk = Bytes::from_static(b"cc\x01V*\0\0\0\0\0\0\0\0\x14accept");
        assert_eq!(decode(junk), Err(DecodeError::Trailing));
    }

    #[test]
    fn every_truncation_and_foreign_value_is_an_error() {
        let bytes = encode(&Entry {
            body: Bytes::new(),
            ..sample()
        });
        for n in 0..bytes.len() {
            assert!(decode(bytes.slice(..n)).is_err(), "prefix {n}");
        }
        assert_eq!(
            decode(Bytes::from_static(b"hello")),
            Err(DecodeError::BadMagic)
        );
        assert_eq!(
            decode(Bytes::from_static(b"cc\x01Z")),
            Err(DecodeError::BadKind(b'Z'))
        );
    }

    #[test]
    fn oversized_headers_are_left_out() {
        let mut e = sample();
        e.headers.push((
            Bytes::from_static(b"X-Big"),
            Bytes::from(vec![b'a'; 70_000]),
        ));
        let Stored::Response(back) = decode(encode(&e)).unwrap() else {
            panic!()
        };
        assert_eq!(back.headers.len(), 2);
    }
}
