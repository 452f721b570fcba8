//! Fossil deltas (the format of the Fossil SCM, which Centrifugo and
//! sockudo send), sans-I/O: [`create`] writes the delta that turns a
//! source into a target, [`apply`] reads one back within a size bound.
//!
//! A port of D. Richard Hipp's `delta.c` as Dmitry Chestnykh's
//! `fossil-delta` (the npm package the clients use) has it: the same
//! rolling hash, landmarks and search limit, so both write the same bytes
//! for the same input (`tests/delta_interop.rs` checks it both ways).
//!
//! The format: the target's length, `\n`, then commands — `N@O,` copies N
//! bytes from the source at offset O, `N:bytes` inserts N literal bytes —
//! and a final `C;` whose C is a checksum of the target. Integers are
//! written in base 64 with the digits of `DIGITS`.

/// Width of the rolling hash window, in bytes (a power of two).
const NHASH: usize = 16;

/// The digits of the format's base-64 integers, most significant first.
const DIGITS: &[u8; 64] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~";

/// Most landmarks tried per window position (as `delta.c`).
const SEARCH_LIMIT: usize = 250;

/// A budget for [`create_within`] that ordinary documents stay far below
/// (a scoreboard with a few changed rows compares each byte about twice):
/// bytes compared per byte of source and target.
pub const WORK_PER_BYTE: usize = 32;

/// Why a delta could not be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeltaError {
    /// Not a delta: a missing terminator, an unknown command, a number
    /// too large.
    Malformed(&'static str),
    /// A copy outside the source or an output past its announced size.
    OutOfBounds(&'static str),
    /// The announced target is larger than the caller allows.
    TooLarge,
    /// The result's checksum differs: the source is not the delta's base.
    Checksum,
}

impl std::fmt::Display for DeltaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeltaError::Malformed(why) => write!(f, "malformed delta: {why}"),
            DeltaError::OutOfBounds(why) => write!(f, "delta out of bounds: {why}"),
            DeltaError::TooLarge => f.write_str("delta target larger than allowed"),
            DeltaError::Checksum => f.write_str("delta checksum mismatch (wrong base)"),
        }
    }
}

impl std::error::Error for DeltaError {}

/// The rolling hash of `delta.c`: two 16-bit sums over a 16-byte window.
struct RollingHash {
    a: u16,
    b: u16,
    i: usize,
    z: [u8; NHASH],
}

impl RollingHash {
    fn at(bytes: &[u8], pos: usize) -> Self {
        let (mut a, mut b) = (0u16, 0u16);
        let mut z = [0u8; NHASH];
        z.copy_from_slice(&bytes[pos..pos + NHASH]);
        for (i, &x) in z.iter().enumerate() {
            a = a.wrapping_add(x as u16);
            b = b.wrapping_add(((NHASH - i) as u16).wrapping_mul(x as u16));
        }
        RollingHash { a, b, i: 0, z }
    }

    fn next(&mut self, c: u8) {
        let old = self.z[self.i];
        self.z[self.i] = c;
        self.i = (self.i + 1) & (NHASH - 1);
        self.a = self.a.wrapping_sub(old as u16).wrapping_add(c as u16);
        self.b = self
            .b
            .wrapping_sub((NHASH as u16).wrapping_mul(old as u16))
            .wrapping_add(self.a);
    }

    fn value(&self) -> u32 {
        self.a as u32 | (self.b as u32) << 16
    }
}

/// The format's 32-bit checksum: the bytes summed as big-endian words.
pub fn checksum(bytes: &[u8]) -> u32 {
    let mut sums = [0u32; 4];
    let mut words = bytes.chunks_exact(4);
    for w in &mut words {
        for (s, &b) in sums.iter_mut().zip(w) {
            *s = s.wrapping_add(b as u32);
        }
    }
    let mut sum = sums[3]
        .wrapping_add(sums[2] << 8)
        .wrapping_add(sums[1] << 16)
        .wrapping_add(sums[0] << 24);
    for (i, &b) in words.remainder().iter().enumerate() {
        sum = sum.wrapping_add((b as u32) << (24 - 8 * i));
    }
    sum
}

fn put_int(out: &mut Vec<u8>, mut v: u64) {
    if v == 0 {
        out.push(b'0');
        return;
    }
    let mut digits = [0u8; 11];
    let mut n = 0;
    while v > 0 {
        digits[n] = DIGITS[(v & 0x3f) as usize];
        v >>= 6;
        n += 1;
    }
    out.extend(digits[..n].iter().rev());
}

fn digit_count(v: usize) -> usize {
    let (mut i, mut x) = (1, 64usize);
    while v >= x {
        i += 1;
        x = x.saturating_mul(64);
        if x == usize::MAX {
            break;
        }
    }
    i
}

fn put_insert(out: &mut Vec<u8>, bytes: &[u8]) {
    put_int(out, bytes.len() as u64);
    out.push(b':');
    out.extend_from_slice(bytes);
}

/// Appends to `out` the delta that turns `source` into `target`.
pub fn create(source: &[u8], target: &[u8], out: &mut Vec<u8>) {
    create_within(source, target, out, usize::MAX);
}

/// [`create`] within `budget` bytes compared in the search; `false` (and
/// `out` holding a partial delta) when the search would take more. The
/// reference's search is linear in practice but `SEARCH_LIMIT` times the
/// input at worst (periodic data, where every landmark matches long: 43 ms
/// for 256 KiB): a publisher must not be able to stall a worker with it.
pub fn create_within(source: &[u8], target: &[u8], out: &mut Vec<u8>, budget: usize) -> bool {
    put_int(out, target.len() as u64);
    out.push(b'\n');
    if source.len() > NHASH {
        let mut left = budget;
        if !copies_and_inserts(source, target, out, &mut left) {
            return false;
        }
    } else {
        // Too short a source for any copy: one insert (even an empty
        // one, as the reference writes).
        put_insert(out, target);
    }
    put_int(out, checksum(target) as u64);
    out.push(b';');
    true
}

/// Landmarks: the source's NHASH-byte blocks by hash bucket, chained
/// through `collide` (`u32::MAX` ends a chain).
fn landmarks(source: &[u8]) -> (Vec<u32>, Vec<u32>) {
    let n = source.len().div_ceil(NHASH);
    let (mut landmark, mut collide) = (vec![u32::MAX; n], vec![u32::MAX; n]);
    let blocks = (source.len() - 1) / NHASH;
    for (block, chain) in collide.iter_mut().enumerate().take(blocks) {
        let hv = RollingHash::at(source, block * NHASH).value() as usize % n;
        *chain = landmark[hv];
        landmark[hv] = block as u32;
    }
    (landmark, collide)
}

/// The best copy found for the window at `target[base + i]`: (length,
/// source offset, literal bytes before it).
type Copy = (usize, usize, usize);

fn best_copy(
    (source, target): (&[u8], &[u8]),
    (landmark, collide): (&[u32], &[u32]),
    (base, i, hash): (usize, usize, u32),
    left: &mut usize,
) -> Option<Copy> {
    let mut best: Option<Copy> = None;
    let mut block = landmark[hash as usize % landmark.len()];
    let mut tries = 0;
    while block != u32::MAX && tries < SEARCH_LIMIT {
        tries += 1;
        let src = block as usize * NHASH;
        let forward = source[src..]
            .iter()
            .zip(&target[base + i..])
            .take_while(|(a, b)| a == b)
            .count();
        let back_max = i.min(src.saturating_sub(1));
        let backward = (1..=back_max)
            .take_while(|&k| source[src - k] == target[base + i - k])
            .count();
        // Every candidate counts, matched or not.
        *left = left.saturating_sub(forward + backward + 1);
        let (ofst, cnt) = (src - backward, forward + backward);
        let litsz = i - backward;
        let cost = digit_count(litsz) + digit_count(cnt) + digit_count(ofst) + 3;
        if cnt >= cost && best.is_none_or(|(c, _, _)| cnt > c) {
            best = Some((cnt, ofst, litsz));
        }
        block = collide[block as usize];
    }
    best
}

/// The copy and insert commands; `false` once `left` (bytes compared)
/// runs out.
fn copies_and_inserts(source: &[u8], target: &[u8], out: &mut Vec<u8>, left: &mut usize) -> bool {
    let (landmark, collide) = landmarks(source);
    let mut base = 0;
    while base + NHASH < target.len() {
        let mut h = RollingHash::at(target, base);
        let mut i = 0;
        loop {
            let found = best_copy(
                (source, target),
                (&landmark, &collide),
                (base, i, h.value()),
                left,
            );
            if *left == 0 {
                return false;
            }
            if let Some((cnt, ofst, litsz)) = found {
                if litsz > 0 {
                    put_insert(out, &target[base..base + litsz]);
                    base += litsz;
                }
                base += cnt;
                put_int(out, cnt as u64);
                out.push(b'@');
                put_int(out, ofst as u64);
                out.push(b',');
                break;
            }
            if base + i + NHASH >= target.len() {
                put_insert(out, &target[base..]);
                base = target.len();
                break;
            }
            h.next(target[base + i + NHASH]);
            i += 1;
        }
    }
    if base < target.len() {
        put_insert(out, &target[base..]);
    }
    true
}

/// Reads a delta's integers and commands.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    /// A base-64 integer (no digits: 0, as `delta.c`); `None` past 2^48.
    fn int(&mut self) -> Result<u64, DeltaError> {
        let mut v: u64 = 0;
        while let Some(d) = self.bytes.get(self.pos).and_then(|&b| digit_value(b)) {
            v = (v << 6) | d as u64;
            if v >= 1 << 48 {
                return Err(DeltaError::Malformed("number too large"));
            }
            self.pos += 1;
        }
        Ok(v)
    }

    fn byte(&mut self) -> Option<u8> {
        let b = self.bytes.get(self.pos).copied();
        self.pos += b.is_some() as usize;
        b
    }
}

fn digit_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'A'..=b'Z' => Some(b - b'A' + 10),
        b'_' => Some(36),
        b'a'..=b'z' => Some(b - b'a' + 37),
        b'~' => Some(63),
        _ => None,
    }
}

/// The target of `delta` applied to `source`, at most `max_len` bytes,
/// its checksum verified. Never panics, whatever `delta` holds.
pub fn apply(source: &[u8], delta: &[u8], max_len: usize) -> Result<Vec<u8>, DeltaError> {
    let mut r = Reader {
        bytes: delta,
        pos: 0,
    };
    let limit = r.int()?;
    if r.byte() != Some(b'\n') {
        return Err(DeltaError::Malformed("size not followed by a newline"));
    }
    if limit > max_len as u64 {
        return Err(DeltaError::TooLarge);
    }
    let limit = limit as usize;
    let mut out = Vec::with_capacity(limit);
    loop {
        let cnt = r.int()?;
        match r.byte() {
            Some(b'@') => {
                let ofst = r.int()?;
                if r.byte().is_some_and(|b| b != b',') {
                    return Err(DeltaError::Malformed("copy not followed by ','"));
                }
                let end = ofst.saturating_add(cnt);
                if out.len() as u64 + cnt > limit as u64 {
                    return Err(DeltaError::OutOfBounds("copy past the target size"));
                }
                if end > source.len() as u64 {
                    return Err(DeltaError::OutOfBounds("copy past the source"));
                }
                out.extend_from_slice(&source[ofst as usize..end as usize]);
            }
            Some(b':') => {
                if out.len() as u64 + cnt > limit as u64 {
                    return Err(DeltaError::OutOfBounds("insert past the target size"));
                }
                let end = r.pos.saturating_add(cnt as usize);
                let Some(bytes) = delta.get(r.pos..end) else {
                    return Err(DeltaError::OutOfBounds("insert past the delta"));
                };
                out.extend_from_slice(bytes);
                r.pos = end;
            }
            Some(b';') => {
                if out.len() != limit {
                    return Err(DeltaError::OutOfBounds("target size differs"));
                }
                if cnt != checksum(&out) as u64 {
                    return Err(DeltaError::Checksum);
                }
                return Ok(out);
            }
            Some(_) => return Err(DeltaError::Malformed("unknown command")),
            None => return Err(DeltaError::Malformed("unterminated delta")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(source: &[u8], target: &[u8]) -> Vec<u8> {
        let mut d = Vec::new();
        create(source, target, &mut d);
        assert_eq!(apply(source, &d, target.len()).unwrap(), target);
        d
    }

    #[test]
    fn small_changes_make_small_deltas() {
        let doc: String = (0..100)
            .map(|i| format!("{{\"team\":{i},\"score\":{}}},", i * 7))
            .collect();
        let changed = doc.replace("\"score\":357", "\"score\":358");
        let d = round_trip(doc.as_bytes(), changed.as_bytes());
        assert!(d.len() < 40, "{}", String::from_utf8_lossy(&d));
        round_trip(b"", b"");
        round_trip(b"short", b"a whole new target longer than the window");
        round_trip(changed.as_bytes(), b"");
        round_trip(
            b"0123456789abcdefXYZ",
            b"0123456789abcdefXYZ0123456789abcdef",
        );
    }

    #[test]
    fn known_vector_of_the_reference() {
        // What `fossil-delta`'s createDelta writes for these two strings
        // (node: createDelta(Buffer.from(s), Buffer.from(t))).
        let s = b"The quick brown fox jumps over the lazy dog, again and again.";
        let t = b"The quick brown cat jumps over the lazy dog, again and again!";
        let d = round_trip(s, t);
        assert_eq!(checksum(b"abcd"), 0x61626364);
        assert_eq!(checksum(b"abcde"), 0x61626364 + (0x65 << 24));
        assert_eq!(d, b"y\nG@0,3:cate@J,1:!3qlnBO;");
    }

    #[test]
    fn the_search_stays_within_its_budget() {
        let doc: String = (0..100)
            .map(|i| format!("{{\"team\":{i},\"score\":{}}},", i * 7))
            .collect();
        let changed = doc.replace("\"score\":357", "\"score\":358");
        let budget = WORK_PER_BYTE * (doc.len() * 2);
        let mut d = Vec::new();
        assert!(create_within(
            doc.as_bytes(),
            changed.as_bytes(),
            &mut d,
            budget
        ));
        // Periodic data: every landmark matches long (the reference's
        // worst case, 250 times the input).
        let src: Vec<u8> = (0..65536).map(|i| b"abcdefghijklmnopq"[i % 17]).collect();
        let mut tgt = src.clone();
        for i in (0..tgt.len()).step_by(997) {
            tgt[i] = b'Z';
        }
        let mut d = Vec::new();
        let budget = WORK_PER_BYTE * (src.len() * 2);
        assert!(!create_within(&src, &tgt, &mut d, budget), "over budget");
        // The unbounded search finishes too, as the reference's does.
        let mut full = Vec::new();
        create(&src, &tgt, &mut full);
        assert_eq!(apply(&src, &full, tgt.len()).unwrap(), tgt);
    }

    #[test]
    fn bad_deltas_are_refused_without_panicking() {
        let src = b"0123456789abcdefghijklmnopqrstuvwxyz";
        let mut good = Vec::new();
        create(src, b"0123456789abcdefghijklmnopqrstuvwxyZ", &mut good);
        for bad in [
            &b""[..],
            b"5",
            b"5\n",
            b"5\n5:ab",
            b"5\n9@0,0;",
            b"3\n3@40,0;",
            b"3\n3:abc0;",
            b"3\n3:abc?",
            b"~~~~~~~~~~\n",
        ] {
            assert!(apply(src, bad, 1000).is_err(), "{bad:?}");
        }
        assert_eq!(apply(src, &good, 10), Err(DeltaError::TooLarge));
        assert_eq!(
            apply(b"01234X6789abcdefghijklmnopqrstuvwxyz", &good, 100).unwrap_err(),
            DeltaError::Checksum
        );
    }
}
