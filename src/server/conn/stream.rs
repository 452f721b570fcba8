//! A connection's bytes in its HTTP phase, plain or TLS: the accepted
//! socket and, on a TLS listener, the connection's TLS session. Every
//! read and write of the HTTP phase (and the upgrade's `101`) goes
//! through here; the WebSocket phase splits it (`websocket::transport`).

use std::io;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use monoio::io::AsyncWriteRentExt;

use crate::server::conn::sock::{self, Sock};
use crate::server::tls::session::Session;
use crate::server::worker::Worker;

/// An accepted connection: its socket, and its TLS session if the
/// listener speaks TLS.
pub struct Stream {
    /// The socket.
    pub sock: Sock,
    /// TLS, on `--listen` with `--tls-cert`.
    pub tls: Option<Rc<Session>>,
}

impl Stream {
    /// A plain connection.
    pub fn plain(sock: Sock) -> Stream {
        Stream { sock, tls: None }
    }

    /// Appends what the peer sent to `buf` (plaintext; the TLS handshake
    /// happens on the first read): `Ok(0)` at the end of its stream.
    pub async fn read(&mut self, w: &Worker, buf: &mut BytesMut) -> io::Result<usize> {
        let Sock { rd, wr, fd } = &mut self.sock;
        match &self.tls {
            None => w.read_more(rd, *fd, buf).await,
            Some(tls) => tls.read(w, (rd, *fd), buf, Some(wr)).await,
        }
    }

    /// Writes `bytes` whole.
    pub async fn write_all(&mut self, bytes: impl Into<Vec<u8>>) -> io::Result<()> {
        let bytes = bytes.into();
        match &self.tls {
            None => self.sock.wr.write_all(bytes).await.0.map(drop),
            Some(tls) => tls.write(&mut self.sock.wr, &[bytes.into()], || {}).await,
        }
    }

    /// Writes `bufs` whole, in order (a plain socket: one vectored write
    /// where it can).
    pub async fn write_vectored(&mut self, bufs: Vec<Bytes>) -> io::Result<()> {
        match &self.tls {
            None => {
                sock::write_all_vectored(&mut self.sock.wr, bufs, || {})
                    .await
                    .0
            }
            Some(tls) => tls.write(&mut self.sock.wr, &bufs, || {}).await,
        }
    }

    /// Writes a short answer (the `101`): on a plain socket, straight
    /// with one nonblocking send where it fits.
    pub async fn write_small(&mut self, bytes: Vec<u8>) -> io::Result<()> {
        match &self.tls {
            None => sock::write_small(&mut self.sock, bytes).await,
            Some(_) => self.write_all(bytes).await,
        }
    }

    /// Closes gracefully after a final answer to a request we did not
    /// read (see [`sock::linger_close`]); TLS says `close_notify` first.
    pub async fn linger_close(&mut self) {
        self.close().await;
        sock::linger_close(&mut self.sock).await;
    }

    /// Ends the HTTP phase of a connection that did not upgrade: TLS
    /// says `close_notify` (a client must not take the close for a
    /// truncation); the socket closes when the stream is dropped.
    pub async fn close(&mut self) {
        if let Some(tls) = self.tls.as_ref().filter(|t| t.established()) {
            tls.close_notify();
            let _ = tls.flush(&mut self.sock.wr).await;
        }
    }
}
