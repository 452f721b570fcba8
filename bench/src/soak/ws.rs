//! The soak's clients: blocking sockets, one at a time on the orchestrator
//! thread. A soak wants every way in and out of the server, not rate, so
//! plain `std::net` with a deadline on every read is enough, and the
//! kernel's buffers hold what a client receives until it reads.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use corecast::ws::frame::encode_client_frame;
use corecast::ws::handshake::{client_request, parse_server_response_offering};
use corecast::ws::inflate::Inflater;
use corecast::ws::OpCode;

use crate::wire::{parse_http_response, split_frames, FastRng, Frame};

/// Largest frame or HTTP response a soak client takes.
const MAX_READ: usize = 4 << 20;
/// Connect deadline of every client.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What a client got from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// A text message (inflated when it came compressed).
    Text(String),
    /// A binary message.
    Binary(Vec<u8>),
    /// The server's close frame, with its code if any.
    Close(Option<u16>),
}

/// How a WebSocket is opened.
#[derive(Debug, Clone, Copy, Default)]
pub struct Open {
    /// Offer permessage-deflate (`server_no_context_takeover`).
    pub deflate: bool,
    /// Shrink the receive buffer to this many bytes (a slow consumer).
    pub rcvbuf: Option<usize>,
}

/// A connected TCP socket (before or without a WebSocket).
pub fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// An open WebSocket.
pub struct Ws {
    stream: TcpStream,
    buf: Vec<u8>,
    ready: VecDeque<Msg>,
    inflate: Option<Inflater>,
    rng: FastRng,
}

impl Ws {
    /// Connects and completes the opening handshake within `deadline`.
    pub fn open(addr: SocketAddr, path: &str, how: Open, rng: &mut FastRng) -> io::Result<Ws> {
        let mut stream = connect(addr)?;
        if let Some(bytes) = how.rcvbuf {
            set_rcvbuf(&stream, bytes)?;
        }
        let key = rng.ws_key();
        let mut req = client_request(&addr.to_string(), path, &key);
        if how.deflate {
            req.truncate(req.len() - 2);
            req.extend_from_slice(
                b"Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover\r\n\r\n",
            );
        }
        stream.write_all(&req)?;
        let offered = how.deflate.then_some("permessage-deflate");
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let mut buf = Vec::new();
        let head = loop {
            read_more(&mut stream, &mut buf, deadline)?;
            match parse_server_response_offering(&buf, &key, offered) {
                Ok(Some(n)) => break n,
                Ok(None) => {}
                Err(e) => return Err(io::Error::other(format!("{path}: handshake: {e}"))),
            }
        };
        let negotiated = how.deflate && has_deflate(&buf[..head]);
        buf.drain(..head);
        Ok(Ws {
            stream,
            buf,
            ready: VecDeque::new(),
            inflate: negotiated.then(Inflater::new),
            rng: FastRng::new(rng.next_u64()),
        })
    }

    /// Sends one masked frame.
    pub fn send(&mut self, op: OpCode, payload: &[u8]) -> io::Result<()> {
        let mut out = BytesMut::new();
        encode_client_frame(op, payload, self.rng.mask(), &mut out);
        self.stream.write_all(&out)
    }

    /// Sends a text frame.
    pub fn send_text(&mut self, text: &str) -> io::Result<()> {
        self.send(OpCode::Text, text.as_bytes())
    }

    /// Writes raw bytes (garbage, a broken frame).
    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// The next message, answering pings; `None` at `deadline` or at the
    /// end of the stream.
    pub fn next(&mut self, deadline: Instant) -> io::Result<Option<Msg>> {
        loop {
            // Frames may have come with the handshake or an earlier read.
            self.parse()?;
            if let Some(m) = self.ready.pop_front() {
                return Ok(Some(m));
            }
            match read_more(&mut self.stream, &mut self.buf, deadline) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::TimedOut => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }

    /// The next text message for which `want` holds (others skipped),
    /// parsed as JSON; `None` by `deadline`.
    pub fn next_json(
        &mut self,
        deadline: Instant,
        mut want: impl FnMut(&serde_json::Value) -> bool,
    ) -> io::Result<Option<serde_json::Value>> {
        while let Some(m) = self.next(deadline)? {
            if let Msg::Text(t) = m {
                let v: serde_json::Value = serde_json::from_str(&t)
                    .map_err(|e| io::Error::other(format!("not JSON: {e}: {t}")))?;
                if want(&v) {
                    return Ok(Some(v));
                }
            }
        }
        Ok(None)
    }

    fn parse(&mut self) -> io::Result<()> {
        let mut pong = None;
        let (ready, inflate) = (&mut self.ready, &mut self.inflate);
        let mut bad = None;
        let used = split_frames(&self.buf, MAX_READ, |f| match f {
            Frame::Data(op, p) => ready.push_back(data(op, p.to_vec())),
            Frame::Deflated(op, p) => match inflate.as_mut().map(|z| inflated(z, p)) {
                Some(Ok(v)) => ready.push_back(data(op, v)),
                _ => bad = Some("a compressed frame that does not inflate"),
            },
            Frame::Ping(p) => pong = Some(p.to_vec()),
            Frame::Pong(_) => {}
            Frame::Close(p) => ready.push_back(Msg::Close(
                p.first_chunk::<2>().map(|c| u16::from_be_bytes(*c)),
            )),
        })
        .map_err(|e| io::Error::other(e.to_string()))?;
        self.buf.drain(..used);
        if let Some(why) = bad {
            return Err(io::Error::other(why));
        }
        match pong {
            Some(p) => self.send(OpCode::Pong, &p),
            None => Ok(()),
        }
    }

    /// The close handshake: our close frame, then the server's (or the
    /// end of the stream) within `deadline`.
    pub fn close(mut self, deadline: Instant) -> io::Result<()> {
        self.send(OpCode::Close, &1000u16.to_be_bytes())?;
        self.await_end(deadline)
    }

    /// Reads until the server's close frame or the end of the stream.
    pub fn await_end(&mut self, deadline: Instant) -> io::Result<()> {
        loop {
            match self.next(deadline) {
                Ok(Some(Msg::Close(_))) | Ok(None) => return Ok(()),
                Ok(Some(_)) => {}
                // Reset by the server after a protocol error: also an end.
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// The socket, for the ways of leaving that bypass the protocol.
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }
}

/// Leaves with an RST: `SO_LINGER` 0, then close.
pub fn abort(stream: TcpStream) -> io::Result<()> {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    setsockopt(&stream, libc::SO_LINGER, &linger)
}

/// Leaves with a FIN and no close frame.
pub fn hang_up(stream: TcpStream) {
    let _ = stream.shutdown(Shutdown::Both);
}

fn set_rcvbuf(stream: &TcpStream, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).map_err(io::Error::other)?;
    setsockopt(stream, libc::SO_RCVBUF, &v)
}

fn setsockopt<T>(stream: &TcpStream, opt: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: `v` points to a live value of the size passed, which is the
    // type `opt` takes; the descriptor is open for the call.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    match rc {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

fn data(op: OpCode, v: Vec<u8>) -> Msg {
    match (op, String::from_utf8(v)) {
        (OpCode::Text, Ok(t)) => Msg::Text(t),
        (_, Ok(t)) => Msg::Binary(t.into_bytes()),
        (_, Err(e)) => Msg::Binary(e.into_bytes()),
    }
}

fn inflated(z: &mut Inflater, payload: &[u8]) -> Result<Vec<u8>, ()> {
    let mut out = BytesMut::new();
    z.feed(payload, &mut out, MAX_READ).map_err(drop)?;
    z.finish(&mut out, MAX_READ).map_err(drop)?;
    Ok(out.to_vec())
}

fn has_deflate(head: &[u8]) -> bool {
    String::from_utf8_lossy(head)
        .to_ascii_lowercase()
        .contains("permessage-deflate")
}

/// Reads what is there (at least one byte) into `buf` by `deadline`:
/// `TimedOut` at the deadline, `UnexpectedEof` at the end of the stream.
fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>, deadline: Instant) -> io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::ErrorKind::TimedOut.into());
    }
    if buf.len() > MAX_READ {
        return Err(io::Error::other(
            "more unparsed input than a soak client takes",
        ));
    }
    stream.set_read_timeout(Some(left))?;
    let mut chunk = [0u8; 16 * 1024];
    match stream.read(&mut chunk) {
        Ok(0) => Err(io::ErrorKind::UnexpectedEof.into()),
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(())
        }
        Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock) => {
            Err(io::ErrorKind::TimedOut.into())
        }
        Err(e) => Err(e),
    }
}

/// A keep-alive HTTP/1.1 connection.
pub struct Http {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Http {
    /// Connects.
    pub fn connect(addr: SocketAddr) -> io::Result<Http> {
        Ok(Http {
            stream: connect(addr)?,
            buf: Vec::new(),
        })
    }

    /// Sends one request (head and body as bytes) and reads its response:
    /// status and body.
    pub fn request(&mut self, req: &[u8], deadline: Instant) -> io::Result<(u16, String)> {
        self.stream.write_all(req)?;
        loop {
            let parsed =
                parse_http_response(&self.buf).map_err(|e| io::Error::other(e.to_string()))?;
            if let Some((status, total)) = parsed {
                let resp: Vec<u8> = self.buf.drain(..total).collect();
                let text = String::from_utf8_lossy(&resp);
                let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
                return Ok((status, body.to_string()));
            }
            read_more(&mut self.stream, &mut self.buf, deadline)?;
        }
    }

    /// The socket (to leave with an RST or mid-request).
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }
}

/// A `GET` on a keep-alive connection.
pub fn get(path: &str, host: SocketAddr) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes()
}
