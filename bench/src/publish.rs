//! Publishers: one plain thread (on the generator's CPU) that sends every
//! message on an absolute schedule.
//!
//! Not a task on the receiving runtime: monoio fires timers only when its
//! run queue empties, and under load the subscribers' wake-ups keep it busy
//! for tens of milliseconds at a time, which would turn a steady rate into
//! bursts. A thread sleeping to an absolute deadline keeps the schedule
//! within the scheduler's wake-up latency (it asks for SCHED_FIFO so that
//! the busy receiving thread on the same CPU cannot delay it); if it still
//! falls behind, it sends everything due at once and the report shows the
//! lag.

use std::io::{self, Read, Write as _};
use std::net::TcpStream;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::args::PusherApp;
use super::payload::{Encoding, Stamp};
use super::sys;
use super::tls::BlockingTls;
use super::wire::{parse_http_response, publish_request, pusher_event_request, FastRng};
use corecast::ws::frame::encode_client_frame;
use corecast::ws::OpCode;

/// Most messages sent in one write when catching up.
const MAX_BATCH: u64 = 64;
/// How long a full socket may stay full before the publisher gives up.
const SEND_STALL: Duration = Duration::from_secs(10);

/// When one publisher sends: `start + k * interval` for k = 0, 1, ...
/// until `end`, whatever happened to earlier sends (no drift).
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// First send.
    pub start: Instant,
    /// Between sends.
    pub interval: Duration,
    /// No send at or after this.
    pub end: Instant,
}

impl Schedule {
    /// Due time of message `k`, `None` at or past the end.
    pub fn at(&self, k: u64) -> Option<Instant> {
        let t = self.start + self.interval.mul_f64(k as f64);
        (t < self.end).then_some(t)
    }

    /// How many messages from `k` on are due at `now` (at most `cap`).
    pub fn due(&self, k: u64, now: Instant, cap: u64) -> u64 {
        (0..cap)
            .take_while(|&i| self.at(k + i).is_some_and(|t| t <= now))
            .count() as u64
    }
}

/// Where a publisher sends.
pub enum PubConn {
    /// Binary frames on a subscriber's WebSocket, by raw fd. The receiving
    /// runtime owns the socket and keeps it open until this thread is
    /// joined; it writes to it only after that (the close frame), and the
    /// server never pings a connection that keeps sending.
    Ws(RawFd),
    /// `POST /publish/{channel}` on a keep-alive connection of its own.
    Http {
        /// The connection (blocking; TLS for `wss://` targets).
        stream: Blocking,
        /// `Host` header.
        authority: String,
        /// Channel to publish to.
        channel: String,
    },
    /// Signed `POST /apps/{id}/events` on a keep-alive connection of its
    /// own (the Pusher HTTP API).
    Pusher {
        /// The connection (blocking); `None` after the server closed it
        /// (sockudo answers every API request with `Connection: close`).
        stream: Option<TcpStream>,
        /// The server, to reconnect to.
        addr: std::net::SocketAddr,
        /// `Host` header.
        authority: String,
        /// Channel to publish to.
        channel: String,
        /// The app whose secret signs.
        app: PusherApp,
    },
}

/// A blocking connection of a publisher's own: plain or TLS.
pub enum Blocking {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS (the target's URL was `wss://`).
    Tls(Box<BlockingTls>),
}

impl io::Read for Blocking {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Blocking::Plain(s) => s.read(buf),
            Blocking::Tls(s) => s.read(buf),
        }
    }
}

impl io::Write for Blocking {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Blocking::Plain(s) => s.write(buf),
            Blocking::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Blocking::Plain(s) => s.flush(),
            Blocking::Tls(s) => s.flush(),
        }
    }
}

/// One publisher.
pub struct Publisher {
    /// Its id in every stamp.
    pub id: u32,
    /// Its schedule.
    pub sched: Schedule,
    /// Its connection.
    pub conn: PubConn,
}

/// What a publisher did.
#[derive(Debug, Default, Clone)]
pub struct PubResult {
    /// Messages sent (for HTTP: accepted with 200).
    pub sent: u64,
    /// HTTP publishes answered with another status.
    pub rejected: u64,
    /// Worst delay behind schedule at send time.
    pub max_lag: Duration,
    /// Why it stopped early, if it did.
    pub error: Option<String>,
}

/// Message format shared by all publishers.
#[derive(Debug, Clone, Copy)]
pub struct Format {
    /// Message size.
    pub size: usize,
    /// Stamp encoding.
    pub enc: Encoding,
    /// Pad with realistic JSON instead of `.` (`--json-payload`).
    pub json: bool,
}

/// Starts the publisher thread; `sent` counts messages for progress lines.
pub fn spawn(
    pubs: Vec<Publisher>,
    fmt: Format,
    sent: Arc<AtomicU64>,
) -> io::Result<JoinHandle<Vec<PubResult>>> {
    std::thread::Builder::new()
        .name("corecast-bench-publish".into())
        .spawn(move || run(pubs, fmt, &sent))
}

struct State {
    p: Publisher,
    next: u64,
    res: PubResult,
    rng: FastRng,
    inbuf: Vec<u8>,
}

fn run(pubs: Vec<Publisher>, fmt: Format, sent: &AtomicU64) -> Vec<PubResult> {
    sys::set_timer_slack_ns(1_000);
    // Best effort: without it the schedule still holds on an idle CPU.
    let _ = sys::make_thread_realtime();
    let mut states: Vec<State> = pubs
        .into_iter()
        .map(|p| State {
            rng: FastRng::new(u64::from(p.id) ^ sys::realtime_ns()),
            p,
            next: 0,
            res: PubResult::default(),
            inbuf: Vec::new(),
        })
        .collect();
    let (mut payload, mut out) = (Vec::new(), Vec::new());
    loop {
        let earliest = states
            .iter()
            .filter(|s| s.res.error.is_none())
            .filter_map(|s| s.p.sched.at(s.next))
            .min();
        let Some(at) = earliest else { break };
        if let Some(wait) = at.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let now = Instant::now();
        for s in states.iter_mut().filter(|s| s.res.error.is_none()) {
            let due = s.p.sched.due(s.next, now, MAX_BATCH);
            if due == 0 {
                continue;
            }
            if let Some(first) = s.p.sched.at(s.next) {
                s.res.max_lag = s.res.max_lag.max(now.saturating_duration_since(first));
            }
            let ok = s.send(due, fmt, &mut payload, &mut out);
            sent.fetch_add(ok, Ordering::Relaxed);
        }
    }
    states.into_iter().map(|s| s.res).collect()
}

impl State {
    /// Sends messages `next .. next + due`; returns how many were accepted.
    fn send(&mut self, due: u64, fmt: Format, payload: &mut Vec<u8>, out: &mut Vec<u8>) -> u64 {
        out.clear();
        let mut frames = BytesMut::new();
        let now_s = sys::realtime_ns() / 1_000_000_000;
        let mut accepted = 0;
        for seq in self.next..self.next + due {
            payload.clear();
            let stamp = Stamp {
                publisher: self.p.id,
                seq,
                sent_ns: sys::realtime_ns(),
            };
            stamp.encode(fmt.enc, fmt.size, payload);
            if fmt.json {
                Stamp::pad_json(payload, fmt.enc.min_len());
            }
            match &self.p.conn {
                PubConn::Ws(_) => {
                    encode_client_frame(OpCode::Binary, payload, self.rng.mask(), &mut frames)
                }
                PubConn::Http {
                    authority, channel, ..
                } => publish_request(authority, channel, payload, out),
                PubConn::Pusher { .. } if self.res.error.is_none() => {
                    // One request at a time: the server may close after each.
                    let r = self.pusher_one(payload, now_s, out);
                    accepted += self.count(r, 1);
                }
                PubConn::Pusher { .. } => {}
            }
        }
        self.next += due;
        let result = match &mut self.p.conn {
            PubConn::Ws(fd) => send_all_blocking(*fd, &frames).map(|()| due),
            PubConn::Http { stream, .. } => stream
                .write_all(out)
                .and_then(|()| read_responses(stream, due, &mut self.inbuf)),
            PubConn::Pusher { .. } => return accepted,
        };
        self.count(result, due)
    }

    /// One signed event request and its response; reconnects first if the
    /// server closed the previous connection. `Ok(1)` if accepted (200).
    fn pusher_one(&mut self, payload: &[u8], now_s: u64, out: &mut Vec<u8>) -> io::Result<u64> {
        let PubConn::Pusher {
            stream,
            addr,
            authority,
            channel,
            app,
        } = &mut self.p.conn
        else {
            return Ok(0);
        };
        out.clear();
        pusher_event_request(authority, app, channel, payload, now_s, out);
        if stream.is_none() {
            let s = TcpStream::connect(*addr)?;
            s.set_nodelay(true)?;
            self.inbuf.clear();
            *stream = Some(s);
        }
        let s = stream.as_mut().expect("connected above");
        s.write_all(out)?;
        let (ok, close) = read_response_closing(s, &mut self.inbuf)?;
        if close {
            *stream = None;
        }
        Ok(u64::from(ok))
    }

    /// Adds one write's outcome (`due` messages) to the result; returns
    /// how many were accepted.
    fn count(&mut self, result: io::Result<u64>, due: u64) -> u64 {
        match result {
            Ok(ok) => {
                self.res.sent += ok;
                self.res.rejected += due - ok;
                ok
            }
            Err(e) => {
                self.res.error = Some(format!("publisher {}: {e}", self.p.id));
                0
            }
        }
    }
}

/// Writes all of `buf` to a nonblocking socket, waiting in `poll` while it
/// is full.
fn send_all_blocking(fd: RawFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match sys::send_nonblocking(fd, buf) {
            Ok(n) => buf = buf.get(n..).unwrap_or_default(),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if !sys::wait_writable(fd, SEND_STALL)? {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "server stopped reading",
                    ));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads one HTTP response: whether it was 200, and whether the server
/// closes the connection after it (`Connection: close`).
fn read_response_closing(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<(bool, bool)> {
    let mut chunk = [0u8; 4096];
    loop {
        match parse_http_response(buf).map_err(|e| io::Error::other(e.to_string()))? {
            Some((status, len)) => {
                let head = String::from_utf8_lossy(&buf[..len]).to_ascii_lowercase();
                let close = head.contains("\r\nconnection: close");
                buf.drain(..len);
                return Ok((status == 200, close));
            }
            None => match stream.read(&mut chunk)? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => buf.extend_from_slice(&chunk[..n]),
            },
        }
    }
}

/// Reads `count` HTTP responses; returns how many were 200.
fn read_responses(stream: &mut impl Read, count: u64, buf: &mut Vec<u8>) -> io::Result<u64> {
    let (mut seen, mut ok) = (0, 0);
    let mut chunk = [0u8; 4096];
    while seen < count {
        match parse_http_response(buf).map_err(|e| io::Error::other(e.to_string()))? {
            Some((status, len)) => {
                buf.drain(..len);
                seen += 1;
                ok += u64::from(status == 200);
            }
            None => match stream.read(&mut chunk)? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => buf.extend_from_slice(&chunk[..n]),
            },
        }
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_is_absolute_and_bounded() {
        let start = Instant::now();
        let s = Schedule {
            start,
            interval: Duration::from_millis(10),
            end: start + Duration::from_millis(35),
        };
        assert_eq!(s.at(3), Some(start + Duration::from_millis(30)));
        assert_eq!(s.at(4), None);
        // Woken 25 ms late for message 0: 0, 1 and 2 are due, 3 is not.
        assert_eq!(s.due(0, start + Duration::from_millis(25), 64), 3);
        assert_eq!(s.due(0, start + Duration::from_millis(25), 2), 2);
        assert_eq!(s.due(3, start + Duration::from_secs(9), 64), 1);
        assert_eq!(s.due(0, start, 64), 1);
    }
}
