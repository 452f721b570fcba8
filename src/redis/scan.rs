//! A bounded, iterative pre-scan of one RESP2 reply, run before the
//! `redis-protocol` decoder sees the bytes.
//!
//! Why: that decoder is recursive, so a peer at `--redis-url` answering
//! with 100,000 nested one-element arrays overflowed the worker's stack
//! (a crash of the whole process, not an error). The scan walks the frame
//! with a fixed-size stack, refuses nesting deeper than the replies we use
//! need (pub/sub events are one array, `SCAN` replies two), aggregates
//! with more elements than [`Limits::max_elements`], and frames larger
//! than [`Limits::max_len`] — before any of it is buffered in full.

use super::error::RespError;

/// Deepest array nesting accepted. Pub/sub events are depth 1, `SCAN`
/// replies depth 2, `CLUSTER SLOTS` 3, `CLUSTER SHARDS` 4 (shards, a
/// shard's fields, its nodes, a node's fields), `XREADGROUP` 5 (streams,
/// a stream, its entries, an entry, its fields: the stream consumer).
pub const MAX_DEPTH: usize = 5;
/// Default most elements of one array (`SCAN … COUNT 1000` answers with
/// about a thousand keys; `COUNT` is a hint, so leave room).
pub const MAX_ELEMENTS: usize = 64 * 1024;
/// Default largest reply in bytes (`--redis-max-reply-size`).
pub const MAX_LEN: usize = 64 << 20;
/// Longest `*N` / `$N` header line: a sign, 19 digits, CRLF, with room.
const MAX_HEADER_LINE: usize = 32;

/// What one reply may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest reply in bytes, headers included (also the most bytes a
    /// partial reply may hold in the read buffer).
    pub max_len: usize,
    /// Most elements of one array.
    pub max_elements: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_len: MAX_LEN,
            max_elements: MAX_ELEMENTS,
        }
    }
}

/// The length of the complete reply at the front of `buf`; `Ok(None)` =
/// need more bytes. Never recursive, never allocates.
pub fn frame_len(buf: &[u8], limits: &Limits) -> Result<Option<usize>, RespError> {
    // Elements still owed by each open array, innermost last.
    let mut owed = [0usize; MAX_DEPTH];
    let mut depth = 0;
    let mut pos = 0;
    loop {
        let Some(&kind) = buf.get(pos) else {
            return Ok(None);
        };
        let Some(eol) = line_end(buf, pos, limits, kind)? else {
            return Ok(None);
        };
        let after = eol + 2;
        match kind {
            b'+' | b'-' | b':' => pos = after,
            b'$' => match header_int(&buf[pos + 1..eol])? {
                -1 => pos = after,
                n if n < 0 => return Err(bad("negative bulk length")),
                n => {
                    let n = n as usize;
                    let end = after.saturating_add(n).saturating_add(2);
                    if end > limits.max_len {
                        return Err(too_large(end, limits));
                    }
                    if buf.len() < end {
                        return Ok(None);
                    }
                    if &buf[end - 2..end] != b"\r\n" {
                        return Err(bad("bulk string not followed by CRLF"));
                    }
                    pos = end;
                }
            },
            b'*' => match header_int(&buf[pos + 1..eol])? {
                -1 | 0 => pos = after,
                n if n < 0 => return Err(bad("negative array length")),
                n => {
                    let n = n as usize;
                    if n > limits.max_elements {
                        return Err(RespError::TooManyElements {
                            len: n,
                            max: limits.max_elements,
                        });
                    }
                    if depth == MAX_DEPTH {
                        return Err(RespError::TooDeep { max: MAX_DEPTH });
                    }
                    owed[depth] = n;
                    depth += 1;
                    pos = after;
                    continue;
                }
            },
            _ => return Err(bad("unknown reply type")),
        }
        if pos > limits.max_len {
            return Err(too_large(pos, limits));
        }
        // One element done: close every array it completes.
        while depth > 0 {
            owed[depth - 1] -= 1;
            if owed[depth - 1] > 0 {
                break;
            }
            depth -= 1;
        }
        if depth == 0 {
            return Ok(Some(pos));
        }
    }
}

/// Index of the CR of the line starting at `pos`, `None` if it has not
/// arrived. Header lines are short; other lines are bounded by `max_len`.
fn line_end(buf: &[u8], pos: usize, limits: &Limits, kind: u8) -> Result<Option<usize>, RespError> {
    let max = if matches!(kind, b'$' | b'*') {
        MAX_HEADER_LINE
    } else {
        limits.max_len
    };
    let window = &buf[pos..buf.len().min(pos.saturating_add(max))];
    match window.windows(2).position(|w| w == b"\r\n") {
        Some(i) => Ok(Some(pos + i)),
        None if window.len() < max => Ok(None),
        None if max == MAX_HEADER_LINE => Err(bad("length line too long")),
        None => Err(too_large(pos + window.len(), limits)),
    }
}

/// The integer of a `*`/`$` header (ASCII digits with an optional `-`).
fn header_int(digits: &[u8]) -> Result<i64, RespError> {
    std::str::from_utf8(digits)
        .ok()
        .filter(|s| !s.is_empty() && !s.starts_with('+'))
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| bad("invalid length"))
}

fn bad(what: &str) -> RespError {
    RespError::Protocol(what.to_string())
}

fn too_large(size: usize, limits: &Limits) -> RespError {
    RespError::TooLarge {
        size,
        max: limits.max_len,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(bytes: &[u8]) -> Result<Option<usize>, RespError> {
        frame_len(bytes, &Limits::default())
    }

    #[test]
    fn complete_replies_have_their_length_and_prefixes_need_more() {
        let replies: &[&[u8]] = &[
            b"+OK\r\n",
            b"-ERR no\r\n",
            b":42\r\n",
            b"$5\r\nhello\r\n",
            b"$-1\r\n",
            b"$0\r\n\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$3\r\nabc\r\n",
            b"*2\r\n$1\r\n0\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n",
            b"*1\r\n*1\r\n*1\r\n:1\r\n",
        ];
        for r in replies {
            let mut with_tail = r.to_vec();
            with_tail.extend_from_slice(b"+NEXT\r\n");
            assert_eq!(scan(&with_tail), Ok(Some(r.len())), "{r:?}");
            for cut in 0..r.len() {
                assert_eq!(scan(&r[..cut]), Ok(None), "{r:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn nesting_deeper_than_the_protocol_needs_is_refused_without_recursion() {
        assert_eq!(
            scan(b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n"),
            Err(RespError::TooDeep { max: MAX_DEPTH })
        );
        assert_eq!(
            scan(b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n"),
            Ok(Some(24)),
            "XREADGROUP is 5 deep"
        );
        // The reproduction of issue 12: refused before it is complete.
        let hostile = b"*1\r\n".repeat(100_000);
        assert_eq!(scan(&hostile), Err(RespError::TooDeep { max: MAX_DEPTH }));
    }

    #[test]
    fn sizes_beyond_the_limits_are_refused_before_they_arrive() {
        let limits = Limits {
            max_len: 100,
            max_elements: 4,
        };
        assert!(matches!(
            frame_len(b"$1000\r\n", &limits),
            Err(RespError::TooLarge { max: 100, .. })
        ));
        assert_eq!(
            frame_len(b"*5\r\n", &limits),
            Err(RespError::TooManyElements { len: 5, max: 4 })
        );
        // A simple string with no end in sight.
        assert!(matches!(
            frame_len(&[b'+'; 200], &limits),
            Err(RespError::TooLarge { .. })
        ));
        // Many small elements that add up.
        let mut many = b"*4\r\n".to_vec();
        for _ in 0..4 {
            many.extend_from_slice(b"$30\r\n");
            many.extend_from_slice(&[b'x'; 30]);
            many.extend_from_slice(b"\r\n");
        }
        assert!(matches!(
            frame_len(&many, &limits),
            Err(RespError::TooLarge { .. })
        ));
        // At the limit is fine.
        let exact = [b"$93\r\n".as_slice(), &[b'y'; 93], b"\r\n"].concat();
        assert_eq!(exact.len(), 100);
        assert_eq!(frame_len(&exact, &limits), Ok(Some(100)));
    }

    #[test]
    fn malformed_headers_are_protocol_errors() {
        for bad in [
            &b"?x\r\n"[..],
            b"$abc\r\n",
            b"$-2\r\n",
            b"*-5\r\n",
            b"$+3\r\nabc\r\n",
            b"$3\r\nabcXY",
            b"$99999999999999999999999999\r\n",
            b"*123456789012345678901234567890123",
        ] {
            assert!(
                matches!(scan(bad), Err(RespError::Protocol(_))),
                "{bad:?}: {:?}",
                scan(bad)
            );
        }
    }
}
