//! The listener's TLS edge (`--tls-cert`): rustls driven over the
//! accepted socket, a byte transport under the HTTP phase
//! (`conn::stream`) and under a WebSocket (`conn::websocket::transport`).
//! What TLS is configured with is the sans-I/O `crate::tls`.
//!
//! # Layout
//! - `edge`: the worker's TLS — the configuration new handshakes use,
//!   replaced on SIGHUP (a bad new file keeps the old one, logged).
//! - `session`: one connection's rustls state (the unbuffered API: no
//!   buffer held between records) and the socket's write half behind a
//!   lock its reader and writer share (one write in flight at a time, in
//!   order); reads that append plaintext to the frame buffer, writes that
//!   encrypt a batch of frames into as few records as fit in
//!   [`crate::tls::BUFFER_LIMIT`], the handshake's counters.
//!
//! A TLS connection parks like a plain one: its session (rustls's state,
//! no buffer) is kept beside the fd in the parked set
//! (`conn::websocket::transport::park`).

pub mod client;
pub mod edge;
pub mod session;

use std::cell::RefCell;
use std::io;
use std::ops::DerefMut;

use monoio::io::{AsyncWriteRent, AsyncWriteRentExt};

/// Record buffers kept between flushes, at most this many per worker
/// thread...
const SPARE_BUFFERS: usize = 4;
/// ...each of at most this capacity (a flush of a full
/// [`crate::tls::BUFFER_LIMIT`] of records fits).
const SPARE_CAPACITY: usize = 64 * 1024;

thread_local! {
    /// The spare record buffers of this worker thread (each worker its
    /// own: no locks). A flush takes one and gives it back, so the
    /// steady state allocates none; an idle connection holds none.
    static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// Writes every record `conn` holds (a client's: `client`) to `wr`,
/// round after round until rustls has none left, through one buffer
/// (a spare one when there is one); the caller keeps other writers out
/// while it runs.
pub(crate) async fn flush_records<C, D, W>(conn: &RefCell<C>, wr: &mut W) -> io::Result<()>
where
    C: DerefMut<Target = rustls::ConnectionCommon<D>>,
    W: AsyncWriteRent,
{
    let mut out = SPARE.with_borrow_mut(Vec::pop).unwrap_or_default();
    let result = loop {
        if let Err(e) = take_records(conn, &mut out) {
            break Err(e);
        }
        if out.is_empty() {
            break Ok(());
        }
        // The buffer goes to the kernel and comes back (ownership-passing
        // I/O): the next round reuses it.
        let (res, back) = wr.write_all(out).await;
        out = back;
        out.clear();
        if let Err(e) = res {
            break Err(e);
        }
    };
    if out.capacity() <= SPARE_CAPACITY {
        SPARE.with_borrow_mut(|spare| {
            if spare.len() < SPARE_BUFFERS {
                spare.push(out);
            }
        });
    }
    result
}

/// Appends every record rustls holds to `out`.
fn take_records<C, D>(conn: &RefCell<C>, out: &mut Vec<u8>) -> io::Result<()>
where
    C: DerefMut<Target = rustls::ConnectionCommon<D>>,
{
    let mut conn = conn.borrow_mut();
    while conn.wants_write() {
        conn.write_tls(out)?;
    }
    Ok(())
}
