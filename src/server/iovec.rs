//! An owning iovec list for monoio's vectored writes.
//!
//! monoio has no `IoVecBuf` for `Vec<Bytes>`; this type owns the `Bytes`
//! (so the memory stays alive while the kernel reads it) and the `iovec`
//! array that points into them.

use bytes::{Buf, Bytes};
use monoio::buf::IoVecBuf;

/// Frames to write, and the iovecs describing them.
pub struct IoVecs {
    bufs: Vec<Bytes>,
    iovs: Vec<libc::iovec>,
}

impl IoVecs {
    /// Wraps `bufs` (empty buffers are fine; they cost an empty iovec).
    pub fn new(bufs: Vec<Bytes>) -> Self {
        let mut v = IoVecs {
            bufs,
            iovs: Vec::new(),
        };
        v.refresh();
        v
    }

    fn refresh(&mut self) {
        self.iovs.clear();
        self.iovs.extend(self.bufs.iter().map(|b| libc::iovec {
            iov_base: b.as_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        }));
    }

    /// Bytes still to write.
    pub fn remaining(&self) -> usize {
        self.bufs.iter().map(Bytes::len).sum()
    }

    /// Drops the first `n` written bytes (a short write), keeping the rest.
    pub fn advance(&mut self, mut n: usize) {
        let done = self.bufs.iter().take_while(|b| {
            if n >= b.len() {
                n -= b.len();
                true
            } else {
                false
            }
        });
        let done = done.count();
        self.bufs.drain(..done);
        if let Some(first) = self.bufs.first_mut() {
            first.advance(n.min(first.len()));
        }
        self.refresh();
    }

    /// Gives the buffers back (to reuse the `Vec`'s allocation).
    pub fn into_inner(self) -> Vec<Bytes> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn iovecs_point_into_the_owned_buffers() {
        let v = IoVecs::new(vec![Bytes::from_static(b"xy"), Bytes::from_static(b"z")]);
        assert_eq!(v.read_iovec_len(), 2);
        // SAFETY: the pointer covers `read_iovec_len()` initialised iovecs.
        let iov = unsafe { std::slice::from_raw_parts(v.read_iovec_ptr(), 2) };
        assert_eq!((iov[0].iov_len, iov[1].iov_len), (2, 1));
        assert_eq!(iov[1].iov_base as *const u8, b"z".as_ptr());
    }
}
