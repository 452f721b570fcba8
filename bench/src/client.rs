//! The generator's network edge: opening WebSocket connections (with the
//! failure cause kept), the receive loop, and nonblocking writes.
//!
//! Reads follow the server's pattern (`src/server/conn.rs`): wait for
//! readiness, then read with nonblocking `recvmsg` into one large scratch
//! buffer shared by every connection of the thread, and parse frames
//! straight out of it. A connection keeps only the tail of a frame that
//! straddled two reads.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::poll_fn;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use monoio::net::TcpStream;

use super::sys;
use super::tls::{Tls, TlsTarget};
use super::wire::{split_events, split_frames, Event, FastRng, Frame, WireError};
use corecast::ws::frame::encode_client_frame;
use corecast::ws::handshake::{
    client_request, parse_server_response_offering, ClientHandshakeError,
};
use corecast::ws::inflate::Inflater;
use corecast::ws::OpCode;

/// Size of the per-thread receive buffer: one `recvmsg` takes up to this
/// many bytes, i.e. hundreds of small frames per wake-up under load.
pub const SCRATCH_LEN: usize = 256 * 1024;
/// Largest frame the receive loop accepts (it must fit the scratch buffer
/// together with the bytes of the read that completes it).
pub const MAX_FRAME: usize = SCRATCH_LEN / 2;

/// Where to connect and what to ask for.
#[derive(Debug, Clone)]
pub struct Target {
    /// Resolved server address.
    pub addr: SocketAddr,
    /// `Host` header.
    pub authority: String,
    /// Request path.
    pub path: String,
    /// Offer permessage-deflate (`--deflate`).
    pub deflate: bool,
    /// Speak TLS (`wss://`).
    pub tls: Option<TlsTarget>,
    /// A Server-Sent Events stream of the path's channel (`--sse`), not
    /// a WebSocket.
    pub sse: bool,
}

/// Why a connection attempt failed, grouped the way the report counts them.
#[derive(Debug)]
pub enum ConnectError {
    /// ECONNREFUSED: nothing listening, or the accept queue overflowed.
    Refused,
    /// Connect or handshake did not finish within the deadline.
    Timeout,
    /// EADDRNOTAVAIL: out of ephemeral ports for this source address.
    AddrNotAvailable,
    /// EMFILE / ENFILE: out of descriptors in this process or system.
    NoDescriptors,
    /// ECONNRESET or EPIPE during connect or handshake.
    Reset,
    /// The server closed the connection before finishing the handshake.
    Closed,
    /// The server answered the upgrade with this status instead of 101.
    Status(u16),
    /// The 101 response broke RFC 6455 section 4.1.
    Handshake(ClientHandshakeError),
    /// The TLS handshake failed (certificate, protocol).
    Tls(String),
    /// Any other socket error.
    Io(io::Error),
}

impl ReadEnd {
    /// The key this ending is counted under in reports.
    pub fn key(&self) -> String {
        match self {
            Self::Closed(Some(code)) => format!("close_{code}"),
            Self::Closed(None) => "close".into(),
            Self::Eof => "eof".into(),
            Self::Io(e) => match e.raw_os_error() {
                Some(libc::ECONNRESET) => "reset".into(),
                Some(code) => format!("errno_{code}"),
                None => format!("io: {e}"),
            },
            Self::Wire(e) => format!("wire: {e}"),
        }
    }
}

impl ConnectError {
    /// The key this failure is counted under in reports.
    pub fn key(&self) -> String {
        match self {
            Self::Refused => "refused".into(),
            Self::Timeout => "timeout".into(),
            Self::AddrNotAvailable => "eaddrnotavail".into(),
            Self::NoDescriptors => "emfile".into(),
            Self::Reset => "reset".into(),
            Self::Closed => "closed_during_handshake".into(),
            Self::Status(code) => format!("http_{code}"),
            Self::Handshake(e) => format!("handshake: {e}"),
            Self::Tls(e) => format!("tls: {e}"),
            Self::Io(e) => match e.raw_os_error() {
                Some(code) => format!("errno_{code}"),
                None => format!("io: {e}"),
            },
        }
    }
}

impl From<io::Error> for ConnectError {
    fn from(e: io::Error) -> Self {
        match e.raw_os_error() {
            Some(libc::ECONNREFUSED) => Self::Refused,
            Some(libc::ETIMEDOUT) => Self::Timeout,
            Some(libc::EADDRNOTAVAIL) => Self::AddrNotAvailable,
            Some(libc::EMFILE | libc::ENFILE) => Self::NoDescriptors,
            Some(libc::ECONNRESET | libc::EPIPE) => Self::Reset,
            _ => Self::Io(e),
        }
    }
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => write!(f, "{e}"),
            other => f.write_str(&other.key()),
        }
    }
}

/// Failures counted by cause.
pub type Failures = BTreeMap<String, u64>;

/// A connection's socket and, over `wss://`, its TLS session. Shared
/// between a connection's reader and writer tasks, which only need
/// `&TcpStream` (readiness) and the raw fd.
pub struct Link {
    /// The socket.
    pub stream: TcpStream,
    /// The TLS session, if the target speaks TLS.
    pub tls: Option<Tls>,
}

impl Link {
    /// The socket's descriptor.
    pub fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    /// Writes all of `buf` (encrypted first over TLS).
    pub async fn send(&self, buf: &[u8]) -> io::Result<()> {
        match &self.tls {
            None => send_all(&self.stream, buf).await,
            Some(tls) => {
                let mut out = Vec::with_capacity(buf.len() + 64);
                tls.encrypt(buf, &mut out)?;
                send_all(&self.stream, &out).await
            }
        }
    }
}

impl Link {
    /// One nonblocking write of `buf` (encrypted first over TLS), for a
    /// few bytes on an idle socket, where it always fits.
    pub fn send_now(&self, buf: &[u8]) -> io::Result<()> {
        let mut out = Vec::new();
        let bytes = match &self.tls {
            None => buf,
            Some(tls) => {
                tls.encrypt(buf, &mut out)?;
                &out
            }
        };
        sys::send_nonblocking(self.fd(), bytes).map(drop)
    }
}

/// An open WebSocket: the link and any bytes that followed the 101 head.
pub struct WsConn {
    /// The socket (and TLS session).
    pub link: Rc<Link>,
    /// Frame bytes that arrived with the handshake response.
    pub leftover: Vec<u8>,
}

/// Connects to `target` (from `src` if given) and completes the opening
/// handshake (TLS first for `wss://`), all within `deadline`. With
/// `timestamps`, kernel receive timestamps are switched on before any data
/// can arrive.
pub async fn open_ws(
    target: &Target,
    src: Option<Ipv4Addr>,
    deadline: Duration,
    timestamps: bool,
    rng: &mut FastRng,
) -> Result<WsConn, ConnectError> {
    let key = rng.ws_key();
    let attempt = async {
        let stream = tcp_connect(target.addr, src).await?;
        if timestamps {
            sys::enable_rx_timestamps(stream.as_raw_fd())?;
        }
        if target.sse {
            if target.tls.is_some() {
                return Err(ConnectError::Tls(
                    "--sse streams are plain HTTP here".into(),
                ));
            }
            let leftover = open_sse(&stream, target).await?;
            let link = Link { stream, tls: None };
            return Ok(WsConn {
                link: Rc::new(link),
                leftover,
            });
        }
        let (tls, early) = match &target.tls {
            Some(t) => {
                let tls = Tls::new(t)?;
                let early = tls_handshake(&stream, &tls).await?;
                (Some(tls), early)
            }
            None => (None, Vec::new()),
        };
        let link = Link { stream, tls };
        let mut request = client_request(&target.authority, &target.path, &key);
        if target.deflate {
            // Before the blank line that ends the head.
            request.truncate(request.len() - 2);
            request.extend_from_slice(
                b"Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover\r\n\r\n",
            );
        }
        link.send(&request).await?;
        let offered = target.deflate.then_some("permessage-deflate");
        let leftover = read_handshake(&link, early, &key, offered).await?;
        Ok(WsConn {
            link: Rc::new(link),
            leftover,
        })
    };
    match monoio::time::timeout(deadline, attempt).await {
        Ok(res) => res,
        Err(_) => Err(ConnectError::Timeout),
    }
}

/// Runs the TLS handshake; returns any plaintext that came with the
/// server's last flight.
async fn tls_handshake(stream: &TcpStream, tls: &Tls) -> Result<Vec<u8>, ConnectError> {
    let (mut out, mut early) = (Vec::new(), Vec::new());
    let mut chunk = [0u8; 4096];
    let refused = |e: io::Error| ConnectError::Tls(e.to_string());
    loop {
        out.clear();
        tls.encrypt(&[], &mut out).map_err(refused)?;
        if !out.is_empty() {
            send_all(stream, &out).await?;
        }
        if !tls.handshaking() {
            return Ok(early);
        }
        let n = recv_some(stream, &mut chunk).await?;
        if n == 0 {
            return Err(ConnectError::Closed);
        }
        tls.decrypt(&chunk[..n], &mut early).map_err(refused)?;
    }
}

/// Requests `GET /sse?channel=C` for a `/ws/C` target; returns the bytes
/// after the `200` head.
async fn open_sse(stream: &TcpStream, target: &Target) -> Result<Vec<u8>, ConnectError> {
    let channel = target.path.strip_prefix("/ws/").unwrap_or(&target.path);
    let req = format!(
        "GET /sse?channel={channel} HTTP/1.1\r\nHost: {}\r\n\r\n",
        target.authority
    );
    send_all(stream, req.as_bytes()).await?;
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        let n = recv_some(stream, &mut chunk).await?;
        if n == 0 {
            return Err(ConnectError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let status = buf.get(9..12).and_then(|s| std::str::from_utf8(s).ok());
            let status: u16 = status.and_then(|s| s.parse().ok()).unwrap_or(0);
            if status != 200 {
                return Err(ConnectError::Status(status));
            }
            return Ok(buf.split_off(end + 4));
        }
    }
}

/// A nonblocking connect handed to monoio, awaited through writability.
pub async fn tcp_connect(dst: SocketAddr, src: Option<Ipv4Addr>) -> io::Result<TcpStream> {
    let std_stream = sys::start_connect(dst, src)?;
    let stream = TcpStream::from_std(std_stream)?;
    stream.writable(false).await?;
    sys::take_socket_error(stream.as_raw_fd())?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Reads the 101 response (after `early`, plaintext already received);
/// returns the bytes after its head.
async fn read_handshake(
    link: &Link,
    early: Vec<u8>,
    key: &str,
    offered: Option<&str>,
) -> Result<Vec<u8>, ConnectError> {
    let mut buf = early;
    buf.reserve(512);
    let mut chunk = [0u8; 4096];
    loop {
        if !buf.is_empty() {
            if let Some(leftover) = parse_head(&mut buf, key, offered)? {
                return Ok(leftover);
            }
        }
        let n = recv_some(&link.stream, &mut chunk).await?;
        if n == 0 {
            return Err(ConnectError::Closed);
        }
        match &link.tls {
            Some(tls) => {
                tls.decrypt(&chunk[..n], &mut buf)
                    .map_err(|e| ConnectError::Tls(e.to_string()))?;
            }
            None => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The bytes after the 101 head once `buf` holds all of it.
fn parse_head(
    buf: &mut Vec<u8>,
    key: &str,
    offered: Option<&str>,
) -> Result<Option<Vec<u8>>, ConnectError> {
    match parse_server_response_offering(buf, key, offered) {
        Ok(Some(head_len)) => Ok(Some(buf.split_off(head_len))),
        Ok(None) => Ok(None),
        Err(ClientHandshakeError::BadStatus(code)) => Err(ConnectError::Status(code)),
        Err(e) => Err(ConnectError::Handshake(e)),
    }
}

/// One nonblocking read, waiting for readiness first if the socket is empty.
pub async fn recv_some(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match sys::recv_timestamped(stream.as_raw_fd(), buf) {
            Ok((n, _)) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => stream.readable(false).await?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Writes all of `buf`, waiting for writability when the socket is full.
pub async fn send_all(stream: &TcpStream, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match sys::send_nonblocking(stream.as_raw_fd(), buf) {
            Ok(n) => buf = buf.get(n..).unwrap_or_default(),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => stream.writable(false).await?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A masked close frame with status 1000.
pub fn close_frame(rng: &mut FastRng) -> BytesMut {
    let mut out = BytesMut::with_capacity(8);
    encode_client_frame(OpCode::Close, &1000u16.to_be_bytes(), rng.mask(), &mut out);
    out
}

/// What the receive loop hands to its owner.
pub trait FrameSink {
    /// A data frame. `kernel_ns` is the kernel receive timestamp of the read
    /// that completed it (if timestamps are on), `now_ns` the time the read
    /// returned (CLOCK_REALTIME).
    fn data(&mut self, opcode: OpCode, payload: &[u8], kernel_ns: Option<u64>, now_ns: u64);
    /// A pong (the first one answers the readiness ping).
    fn pong(&mut self) {}
}

/// How a receive loop ended.
#[derive(Debug)]
pub enum ReadEnd {
    /// The server's close frame arrived, with this status code if any.
    Closed(Option<u16>),
    /// End of stream without a close frame.
    Eof,
    /// A socket error.
    Io(io::Error),
    /// A frame the generator cannot take.
    Wire(WireError),
}

/// State the receive loops of one thread share.
pub struct Shared {
    scratch: RefCell<Box<[u8]>>,
    /// Whether reads use `recvmsg` timestamps (only costs a few ns when
    /// off; kept as one code path).
    pub timestamps: bool,
    /// The streams are Server-Sent Events (chunks), not WebSocket frames.
    pub sse: bool,
}

impl Shared {
    /// A fresh shared receive buffer for Server-Sent Events streams
    /// (`sse`) or WebSockets.
    pub fn for_streams(timestamps: bool, sse: bool) -> Rc<Shared> {
        let mut shared = Rc::into_inner(Shared::new(timestamps)).expect("just made");
        shared.sse = sse;
        Rc::new(shared)
    }

    /// A fresh shared receive buffer.
    pub fn new(timestamps: bool) -> Rc<Shared> {
        Rc::new(Shared {
            scratch: RefCell::new(vec![0; SCRATCH_LEN].into_boxed_slice()),
            timestamps,
            sse: false,
        })
    }
}

/// Replies a receive loop owes after a read.
#[derive(Default)]
struct Owed {
    /// Inflates compressed frames (`--deflate`), made at the first one.
    inflate: Option<Box<(Inflater, BytesMut)>>,
    pong: Option<Vec<u8>>,
    /// The server's close frame arrived (with its code, if any).
    closed: Option<Option<u16>>,
}

/// Receives frames until the server closes: answers pings, hands data to
/// `sink`. `carry` starts with the bytes that followed the handshake.
pub async fn receive_loop<S: FrameSink>(
    shared: &Shared,
    link: &Link,
    mut carry: Vec<u8>,
    sink: &mut S,
    rng: &mut FastRng,
) -> ReadEnd {
    let (fd, stream) = (link.fd(), &link.stream);
    let mut owed = Owed::default();
    // Frames that came with the handshake response.
    match consume(
        shared.sse,
        &carry,
        sink,
        &mut owed,
        (None, sys::realtime_ns()),
    ) {
        Ok(used) => drop(carry.drain(..used)),
        Err(e) => return ReadEnd::Wire(e),
    }
    loop {
        let batch = match &link.tls {
            None => read_batch(shared, fd, &mut carry, sink, &mut owed),
            Some(tls) => read_batch_tls(shared, fd, tls, &mut carry, sink, &mut owed),
        };
        match batch {
            Ok(Batch::Drained) => {}
            Ok(Batch::Eof) => return ReadEnd::Eof,
            Err(end) => return end,
        }
        // A pong, and over TLS what rustls answers by itself (a key update).
        let mut out = BytesMut::new();
        if let Some(ping) = owed.pong.take() {
            encode_client_frame(OpCode::Pong, &ping, rng.mask(), &mut out);
        }
        if !out.is_empty() || link.tls.as_ref().is_some_and(Tls::wants_write) {
            if let Err(e) = link.send(&out).await {
                return ReadEnd::Io(e);
            }
        }
        if let Some(code) = owed.closed {
            return ReadEnd::Closed(code);
        }
        // After a short read the socket is empty (TCP hands over all it
        // holds, up to the buffer size): wait for readiness rather than pay
        // for a recvmsg that would only say EAGAIN.
        if let Err(e) = stream.readable(false).await {
            return ReadEnd::Io(e);
        }
    }
}

/// Hands the complete frames in `bytes` to `sink` (and notes owed
/// replies); returns the bytes used.
#[inline]
fn consume<S: FrameSink>(
    sse: bool,
    bytes: &[u8],
    sink: &mut S,
    owed: &mut Owed,
    (kernel_ns, now_ns): (Option<u64>, u64),
) -> Result<usize, WireError> {
    if sse {
        return split_events(bytes, MAX_FRAME, |e| match e {
            Event::Data(payload) => sink.data(OpCode::Text, payload, kernel_ns, now_ns),
            // Subscribed: ready, as a WebSocket's first pong says.
            Event::Subscribed => sink.pong(),
            Event::Other => {}
            Event::End => owed.closed = Some(None),
        });
    }
    split_frames(bytes, MAX_FRAME, |f| match f {
        Frame::Data(op, payload) => sink.data(op, payload, kernel_ns, now_ns),
        Frame::Deflated(op, payload) => {
            let (z, out) = &mut **owed.inflate.get_or_insert_with(Box::default);
            out.clear();
            // The benchmark's own server: a frame that does not inflate is
            // counted as lost by the recorder (its stamp is unreadable).
            let ok = z.feed(payload, out, MAX_FRAME).is_ok() && z.finish(out, MAX_FRAME).is_ok();
            let msg: &[u8] = if ok { out } else { &[] };
            sink.data(op, msg, kernel_ns, now_ns)
        }
        Frame::Ping(p) => owed.pong = Some(p.to_vec()),
        Frame::Pong(_) => sink.pong(),
        Frame::Close(p) => {
            owed.closed = Some(p.first_chunk::<2>().map(|c| u16::from_be_bytes(*c)));
        }
    })
}

enum Batch {
    /// Read until a short read or EAGAIN: the socket is most likely empty.
    Drained,
    /// End of stream.
    Eof,
}

/// Reads until the socket is (most likely) empty, parsing every complete
/// frame straight from the scratch buffer.
fn read_batch<S: FrameSink>(
    shared: &Shared,
    fd: i32,
    carry: &mut Vec<u8>,
    sink: &mut S,
    owed: &mut Owed,
) -> Result<Batch, ReadEnd> {
    let mut scratch = shared.scratch.borrow_mut();
    loop {
        let kept = carry.len();
        let (head, room) = scratch.split_at_mut(kept);
        head.copy_from_slice(carry);
        let (n, kernel_ns) = match sys::recv_timestamped(fd, room) {
            Ok((0, _)) => return Ok(Batch::Eof),
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Ok(Batch::Drained);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadEnd::Io(e)),
        };
        let filled = kept + n;
        let now_ns = sys::realtime_ns();
        let bytes = scratch.get(..filled).unwrap_or_default();
        let used =
            consume(shared.sse, bytes, sink, owed, (kernel_ns, now_ns)).map_err(ReadEnd::Wire)?;
        carry.clear();
        carry.extend_from_slice(bytes.get(used..).unwrap_or_default());
        if owed.closed.is_some() || n < room_len(kept) {
            return Ok(Batch::Drained);
        }
    }
}

/// [`read_batch`] over TLS: records are read into the scratch buffer and
/// decrypted into `carry`, where frames are parsed (one copy more than
/// plain, on the generator's side only).
fn read_batch_tls<S: FrameSink>(
    shared: &Shared,
    fd: i32,
    tls: &Tls,
    carry: &mut Vec<u8>,
    sink: &mut S,
    owed: &mut Owed,
) -> Result<Batch, ReadEnd> {
    let mut scratch = shared.scratch.borrow_mut();
    loop {
        let (n, kernel_ns) = match sys::recv_timestamped(fd, &mut scratch[..]) {
            Ok((0, _)) => return Ok(Batch::Eof),
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Batch::Drained),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadEnd::Io(e)),
        };
        let now_ns = sys::realtime_ns();
        let open = tls
            .decrypt(scratch.get(..n).unwrap_or_default(), carry)
            .map_err(ReadEnd::Io)?;
        let used =
            consume(shared.sse, carry, sink, owed, (kernel_ns, now_ns)).map_err(ReadEnd::Wire)?;
        carry.drain(..used);
        if owed.closed.is_some() || n < SCRATCH_LEN {
            return Ok(Batch::Drained);
        }
        if !open {
            return Ok(Batch::Eof);
        }
    }
}

fn room_len(kept: usize) -> usize {
    SCRATCH_LEN - kept
}

/// Wakes one waiting task when something it watches may have changed; the
/// waiter re-checks its condition. Single-threaded, single waiter.
#[derive(Default)]
pub struct Signal {
    waker: RefCell<Option<Waker>>,
}

impl Signal {
    /// Wakes the waiter, if any.
    #[inline]
    pub fn notify(&self) {
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// Resolves once `cond()` holds, checking it after every notification.
    pub async fn until(&self, mut cond: impl FnMut() -> bool) {
        poll_fn(|cx| {
            if cond() {
                Poll::Ready(())
            } else {
                *self.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }

    /// Like [`Signal::until`], giving up at `deadline`; true if `cond` held.
    pub async fn until_or(&self, deadline: Instant, cond: impl FnMut() -> bool) -> bool {
        let left = deadline.saturating_duration_since(Instant::now());
        monoio::time::timeout(left, self.until(cond)).await.is_ok()
    }
}

/// Prints `line()` to stderr every second until dropped (the task ends
/// with the runtime).
pub fn spawn_progress(quiet: bool, started: Instant, line: impl Fn() -> String + 'static) {
    if quiet {
        return;
    }
    monoio::spawn(async move {
        let mut tick = monoio::time::interval(Duration::from_secs(1));
        tick.tick().await;
        loop {
            tick.tick().await;
            eprintln!("[{:>6.1}s] {}", started.elapsed().as_secs_f64(), line());
        }
    });
}
