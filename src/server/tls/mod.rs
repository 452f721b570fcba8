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

/// Writes every record `conn` holds (a client's: `client`) to `wr`,
/// round after round until rustls has none left; the caller keeps other
/// writers out while it runs.
pub(crate) async fn flush_records<C, D, W>(conn: &RefCell<C>, wr: &mut W) -> io::Result<()>
where
    C: DerefMut<Target = rustls::ConnectionCommon<D>>,
    W: AsyncWriteRent,
{
    loop {
        let mut out = Vec::new();
        {
            let mut conn = conn.borrow_mut();
            while conn.wants_write() {
                conn.write_tls(&mut out)?;
            }
        }
        if out.is_empty() {
            return Ok(());
        }
        let (res, _) = wr.write_all(out).await;
        res?;
    }
}
