//! An owning iovec list for monoio's vectored writes.
//!
//! monoio has no `IoVecBuf` for `Vec<Bytes>`; this type owns the `Bytes`
//! (so the memory stays alive while the kernel reads it) and the `iovec`
//! array that points into them.

use bytes::{Buf, Bytes};
use monoio::buf::IoVecBuf;

/// Frames to write, and the iovecs describing them. Written frames are
/// kept, untouched, until the value is taken apart: the hub's memory
/// budget releases a frame when its last holder lets go of it
/// ([`IoVecs::into_all`]).
pub struct IoVecs {
    bufs: Vec<Bytes>,
    /// Frames completely written.
    done: usize,
    /// Bytes written of `bufs[done]`.
    off: usize,
    iovs: Vec<libc::iovec>,
}

impl IoVecs {
    /// Wraps `bufs` (empty buffers are fine; they cost an empty iovec).
    pub fn new(bufs: Vec<Bytes>) -> Self {
        let mut v = IoVecs {
            bufs,
            done: 0,
            off: 0,
            iovs: Vec::new(),
        };
        v.refresh();
        v
    }

    fn refresh(&mut self) {
        self.iovs.clear();
        let off = self.off;
        self.iovs
            .extend(self.bufs[self.done..].iter().enumerate().map(|(i, b)| {
                let skip = if i == 0 { off } else { 0 };
                libc::iovec {
                    iov_base: b[skip..].as_ptr() as *mut libc::c_void,
                    iov_len: b.len() - skip,
                }
            }));
    }

    /// Bytes still to write.
    pub fn remaining(&self) -> usize {
        self.bufs[self.done..].iter().map(Bytes::len).sum::<usize>() - self.off
    }

    /// The unwritten bytes as one buffer, for a plain send: the buffer
    /// itself when one is left (a batch of one frame, the common case of
    /// a fan-out), a copy when several hold at most `max` bytes together
    /// (copying a few small frames costs less than the kernel's vectored
    /// file-write path); `None` otherwise.
    pub fn contiguous(&self, max: usize) -> Option<Bytes> {
        match &self.bufs[self.done..] {
            [] => None,
            [one] => Some(one.slice(self.off..)),
            _ if self.remaining() > max => None,
            [first, rest @ ..] => {
                let mut out = bytes::BytesMut::with_capacity(self.remaining());
                out.extend_from_slice(&first[self.off..]);
                rest.iter().for_each(|b| out.extend_from_slice(b));
                Some(out.freeze())
            }
        }
    }

    /// Skips the first `n` unwritten bytes (a short write), keeping the rest.
    pub fn advance(&mut self, mut n: usize) {
        while let Some(b) = self.bufs.get(self.done) {
            let left = b.len() - self.off;
            if n < left {
                self.off += n;
                break;
            }
            n -= left;
            self.done += 1;
            self.off = 0;
        }
        self.refresh();
    }

    /// Gives the unwritten buffers back (to reuse the `Vec`'s allocation).
    pub fn into_inner(mut self) -> Vec<Bytes> {
        let mut rest = self.bufs.split_off(self.done);
        if let Some(first) = rest.first_mut() {
            first.advance(self.off);
        }
        rest
    }

    /// Gives every buffer back as it was passed in, written or not.
    pub fn into_all(self) -> Vec<Bytes> {
        self.bufs
    }
}

// SAFETY: `iovs` describes exactly the live `Bytes` in `bufs`, which this
// value owns; neither vector is touched while the runtime holds the value
// (monoio takes it by value for the duration of the operation), and moving
// the struct moves only the Vec headers, not the heap data they point to, so
// the pointer and the pointed-to memory stay valid and unchanged.
unsafe impl IoVecBuf for IoVecs {
    fn read_iovec_ptr(&self) -> *const libc::iovec {
        self.iovs.as_ptr()
    }

    fn read_iovec_len(&self) -> usize {
        self.iovs.len()
    }
}

/// The position in `bufs` after `n` more bytes from `(i, off)`.
pub fn advance_position(
    bufs: &[Bytes],
    (mut i, mut off): (usize, usize),
    mut n: usize,
) -> (usize, usize) {
    while n > 0 && i < bufs.len() {
        let left = bufs[i].len() - off;
        if n < left {
            return (i, off + n);
        }
        n -= left;
        (i, off) = (i + 1, 0);
    }
    // Empty frames are passed over.
    while i < bufs.len() && bufs[i].len() == off {
        (i, off) = (i + 1, 0);
    }
    (i, off)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_walks_frames_and_skips_empty_ones() {
        let bufs = [
            Bytes::from_static(b"abc"),
            Bytes::new(),
            Bytes::from_static(b"de"),
        ];
        assert_eq!(advance_position(&bufs, (0, 0), 2), (0, 2));
        assert_eq!(advance_position(&bufs, (0, 2), 1), (2, 0));
        assert_eq!(advance_position(&bufs, (2, 0), 2), (3, 0));
        assert_eq!(advance_position(&bufs, (0, 0), 0), (0, 0));
    }

    #[test]
    fn advance_handles_every_split() {
        let parts = [&b"abc"[..], b"", b"defg", b"h"];
        let all: Vec<u8> = parts.concat();
        for n in 0..=all.len() {
            let mut v = IoVecs::new(parts.iter().map(|p| Bytes::copy_from_slice(p)).collect());
            v.advance(n);
            assert_eq!(v.remaining(), all.len() - n);
            let rest: Vec<u8> = v.into_inner().concat();
            assert_eq!(rest, &all[n..]);
        }
    }

    #[test]
    fn contiguous_is_the_unwritten_bytes_up_to_its_bound() {
        let parts = || vec![Bytes::from_static(b"ab"), Bytes::from_static(b"cde")];
        let mut v = IoVecs::new(parts());
        assert_eq!(v.contiguous(5).as_deref(), Some(&b"abcde"[..]));
        assert_eq!(v.contiguous(4), None);
        v.advance(1);
        assert_eq!(v.contiguous(4).as_deref(), Some(&b"bcde"[..]));
        v.advance(2);
        // One buffer left: itself, whatever its size.
        assert_eq!(v.contiguous(0).as_deref(), Some(&b"de"[..]));
        v.advance(2);
        assert_eq!(v.contiguous(usize::MAX), None);
        assert_eq!(IoVecs::new(vec![]).contiguous(usize::MAX), None);
    }

    #[test]
    fn iovecs_point_into_the_owned_buffers() {
        let v = IoVecs::new(vec![Bytes::from_static(b"xy"), Bytes::from_static(b"z")]);
        assert_eq!(v.read_iovec_len(), 2);
        // SAFETY: the pointer covers `read_iovec_len()` initialised iovecs.
        let iov = unsafe { std::slice::from_raw_parts(v.read_iovec_ptr(), 2) };
        assert_eq!((iov[0].iov_len, iov[1].iov_len), (2, 1));
        assert_eq!(iov[1].iov_base as *const u8, b"z".as_ptr());
    }
}
