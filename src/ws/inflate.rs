//! Bounded inflation of compressed messages, RFC 7692 section 7.2.2.
//!
//! A peer controls the ratio: 1 KiB of DEFLATE can claim a gigabyte. So
//! output is produced in chunks and the limit is checked while inflating:
//! a message never holds more than `max + 1` inflated bytes, whatever the
//! input says.

use bytes::BytesMut;
use flate2::{Decompress, FlushDecompress, Status};

/// The octets a sender removes from the end of a compressed message
/// (7.2.1) and the receiver appends back before inflating (7.2.2).
pub const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// Output produced per call into the decompressor.
const CHUNK: usize = 16 * 1024;

/// Why a compressed message could not be inflated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InflateError {
    /// The inflated message would exceed the limit.
    TooBig,
    /// Not a valid DEFLATE stream.
    Corrupt,
}

/// A connection's inflater. It keeps its window between messages, which
/// decodes clients that use context takeover and, equally, those that do
/// not (a stream that never refers back decodes the same either way).
///
/// Memory: zlib's inflate state plus a 32 KiB window (47,552 bytes with
/// zlib-rs, measured), allocated when the first compressed message
/// arrives: paid only by connections that send one.
pub struct Inflater {
    z: Decompress,
    /// A final block (BFINAL) ended the DEFLATE stream; the next input
    /// starts a new one, and the message's tail is not fed.
    ended: bool,
}

impl std::fmt::Debug for Inflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflater")
            .field("total_in", &self.z.total_in())
            .finish()
    }
}

impl Default for Inflater {
    fn default() -> Self {
        Self::new()
    }
}

impl Inflater {
    /// A raw-DEFLATE inflater with the largest window (15 bits), which
    /// decodes any `client_max_window_bits`.
    pub fn new() -> Self {
        Inflater {
            z: Decompress::new(false),
            ended: false,
        }
    }

    /// Inflates `input` (a piece of a compressed message) onto `out`.
    /// Fails with [`InflateError::TooBig`] as soon as `out` would hold
    /// more than `max` bytes; by then at most `max + 1` are held.
    pub fn feed(
        &mut self,
        input: &[u8],
        out: &mut BytesMut,
        max: usize,
    ) -> Result<(), InflateError> {
        self.ended = false;
        let mut rest = input;
        loop {
            let start = out.len();
            let room = max
                .checked_sub(start)
                .ok_or(InflateError::TooBig)?
                .saturating_add(1);
            let chunk = room.min(CHUNK);
            out.resize(start.saturating_add(chunk), 0);
            let stepped = self.step(rest, out.get_mut(start..).unwrap_or_default());
            let (used, produced, status) = match stepped {
                Ok(step) => step,
                Err(e) => {
                    out.truncate(start);
                    return Err(e);
                }
            };
            out.truncate(start.saturating_add(produced));
            rest = rest.get(used..).unwrap_or_default();
            if out.len() > max {
                return Err(InflateError::TooBig);
            }
            match status {
                Status::StreamEnd => {
                    // A final block (BFINAL) ended the DEFLATE stream: what
                    // follows in a later piece starts a new one; nothing
                    // may follow it in this piece.
                    self.z.reset(false);
                    self.ended = true;
                    return if rest.is_empty() {
                        Ok(())
                    } else {
                        Err(InflateError::Corrupt)
                    };
                }
                Status::BufError if used == 0 && produced == 0 && !rest.is_empty() => {
                    return Err(InflateError::Corrupt);
                }
                _ => {}
            }
            // Done when all input is in and the decompressor had room to
            // spare (nothing left pending inside it).
            if rest.is_empty() && produced < chunk {
                return Ok(());
            }
        }
    }

    /// Ends a message: inflates the [`TAIL`] the sender removed (7.2.2),
    /// unless a final block already ended the stream (the tail would be
    /// read as the start of a new one).
    pub fn finish(&mut self, out: &mut BytesMut, max: usize) -> Result<(), InflateError> {
        if std::mem::take(&mut self.ended) {
            return Ok(());
        }
        self.feed(&TAIL, out, max)
    }

    /// One call into zlib: bytes consumed, bytes produced, status.
    fn step(
        &mut self,
        input: &[u8],
        out: &mut [u8],
    ) -> Result<(usize, usize, Status), InflateError> {
        let (in0, out0) = (self.z.total_in(), self.z.total_out());
        let status = self
            .z
            .decompress(input, out, FlushDecompress::Sync)
            .map_err(|_| InflateError::Corrupt)?;
        let used = usize::try_from(self.z.total_in().saturating_sub(in0)).unwrap_or(0);
        let produced = usize::try_from(self.z.total_out().saturating_sub(out0)).unwrap_or(0);
        Ok((used, produced, status))
    }
}
