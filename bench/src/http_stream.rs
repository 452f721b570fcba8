//! The `http` load's connection: plain TCP or TLS (`https://`) under the
//! same request loop. TLS runs through [`crate::tls::Tls`], the session the
//! WebSocket clients use, so an `https://` figure carries the same client
//! cost as a `wss://` one.

use std::io;
use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::TcpStream;

use crate::tls::{Tls, TlsTarget};

/// Ciphertext read per call.
const CIPHER_CHUNK: usize = 16 * 1024 + 512;

/// One keep-alive connection.
pub struct HttpStream {
    tcp: TcpStream,
    tls: Option<Tls>,
    /// Records waiting to be written (TLS only; reused).
    cipher_out: Vec<u8>,
}

impl HttpStream {
    /// Connects to `addr`, and with `tls` completes the handshake.
    pub async fn connect(addr: SocketAddr, tls: Option<&TlsTarget>) -> io::Result<HttpStream> {
        let tcp = TcpStream::connect_addr(addr).await?;
        let _ = tcp.set_nodelay(true);
        let mut s = HttpStream {
            tcp,
            tls: tls.map(Tls::new).transpose()?,
            cipher_out: Vec::new(),
        };
        if s.tls.is_some() {
            s.handshake().await?;
        }
        Ok(s)
    }

    /// Drives the TLS handshake to its end.
    async fn handshake(&mut self) -> io::Result<()> {
        let mut plain = Vec::new();
        loop {
            self.flush_tls(&[]).await?;
            let tls = self.tls.as_ref().expect("tls");
            if !tls.handshaking() {
                return Ok(());
            }
            let cipher = self.read_cipher().await?;
            if !self
                .tls
                .as_ref()
                .expect("tls")
                .decrypt(&cipher, &mut plain)?
            {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    /// Sends `request` (encrypted under TLS).
    pub async fn write_all(&mut self, request: Bytes) -> io::Result<()> {
        if self.tls.is_some() {
            return self.flush_tls(&request).await;
        }
        self.tcp.write_all(request).await.0.map(|_| ())
    }

    /// Appends at least one byte of response to `buf` (decrypted under
    /// TLS); `UnexpectedEof` when the server closed.
    pub async fn read_more(&mut self, buf: &mut BytesMut) -> io::Result<()> {
        if self.tls.is_none() {
            buf.reserve(16 * 1024);
            let (res, back) = self.tcp.read(std::mem::take(buf)).await;
            *buf = back;
            return match res? {
                0 => Err(io::ErrorKind::UnexpectedEof.into()),
                _ => Ok(()),
            };
        }
        let mut plain = Vec::new();
        while plain.is_empty() {
            let cipher = self.read_cipher().await?;
            let open = self
                .tls
                .as_ref()
                .expect("tls")
                .decrypt(&cipher, &mut plain)?;
            // A key update asks for a record back.
            if self.tls.as_ref().expect("tls").wants_write() {
                self.flush_tls(&[]).await?;
            }
            if !open && plain.is_empty() {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        buf.extend_from_slice(&plain);
        Ok(())
    }

    /// Encrypts `plain` (may be empty: handshake or key-update records)
    /// and writes whatever records that made.
    async fn flush_tls(&mut self, plain: &[u8]) -> io::Result<()> {
        let mut out = std::mem::take(&mut self.cipher_out);
        out.clear();
        self.tls.as_ref().expect("tls").encrypt(plain, &mut out)?;
        if out.is_empty() {
            self.cipher_out = out;
            return Ok(());
        }
        let (res, back) = self.tcp.write_all(out).await;
        self.cipher_out = back;
        res.map(|_| ())
    }

    /// One read of ciphertext; `UnexpectedEof` on a closed socket.
    async fn read_cipher(&mut self) -> io::Result<Vec<u8>> {
        let (res, cipher) = self.tcp.read(Vec::with_capacity(CIPHER_CHUNK)).await;
        match res? {
            0 => Err(io::ErrorKind::UnexpectedEof.into()),
            _ => Ok(cipher),
        }
    }
}
