//! The WebSocket phase of a connection: a reader task that runs the
//! sans-I/O receiver and publishes, and a writer task that drains the
//! hub's queue with one vectored write per batch. Neither holds a hub
//! borrow across an `.await`.

use std::future::poll_fn;
use std::os::fd::{FromRawFd, IntoRawFd, RawFd};
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use monoio::net::tcp::{TcpOwnedReadHalf, TcpOwnedWriteHalf};

use crate::auth::TokenBucket;
use crate::hub::{CloseReason, ConnId, ConnKind, ConnState, Hub, WriterWork};
use crate::log;
use crate::server::conn::park::{self, Session};
use crate::server::conn::sock::{
    drain_close, write_all_vectored, Sock, PROTOCOL_DRAIN_BYTES, PROTOCOL_DRAIN_TIME,
};
use crate::server::conn::upgrade::Upgrade;
use crate::server::formats;
use crate::server::history::resume::{self, Deferred};
use crate::server::native::control as ws_control;
use crate::server::presence::edge as presence_edge;
use crate::server::publish::{route_publish, Published};
use crate::server::pusher::ws as pusher_ws;
use crate::server::sys;
use crate::server::worker::Worker;
use crate::ws::{Message, OpCode, ProtocolError, Receiver, Role};

/// Starts an upgraded connection: subscribes, then runs it ([`run`]) in a
/// task of its own until it ends or parks. `release_ip`: the client
/// address whose per-IP count it holds, released when it ends.
pub fn websocket(
    w: &Rc<Worker>,
    sock: Sock,
    id: ConnId,
    (up, release_ip): (Upgrade, Option<std::net::IpAddr>),
    buf: BytesMut,
) {
    let Upgrade {
        kind,
        channel,
        grants,
        deflate,
    } = up;
    if deflate {
        count_compressed(w, true);
    }
    {
        let mut hub = w.hub.borrow_mut();
        hub.upgrade(id, kind);
        // The status feed's grants are read-only; its token's expiry was
        // recorded at the upgrade.
        if let Some(exp) = grants.expires() {
            let at = ws_control::token_deadline(hub.now_ms(), exp);
            hub.set_token_expiry(id, at);
        }
        if let Some(c) = channel.as_deref().filter(|c| c.starts_with('!')) {
            hub.subscribe_internal(id, c);
        } else if let Some(c) = &channel {
            if hub.subscribe(id, c).is_err() {
                // Only possible with max_subscriptions = 0.
                hub.close(id, 1008, "subscription refused", CloseReason::Protocol);
            }
        }
    }
    if kind == ConnKind::Ws(formats::PUSHER) {
        let serial = w.hub.borrow().conn(id).map_or(0, |c| c.serial());
        pusher_ws::open(w, id, serial);
    }
    let session = Session {
        channel: channel.map(String::into_boxed_str),
        grants,
        release_ip,
        deflate,
    };
    // Nothing to do yet (no input, nothing queued): it starts parked and
    // gets its tasks when something concerns it — a connection that only
    // waits never costs a task (issue 19: accepting and holding idle
    // connections as cheaply as servers that keep them as plain state).
    let (sock, session) = match park_fresh(w, sock, id, session, &buf) {
        Ok(()) => return,
        Err(back) => back,
    };
    let rx = Receiver::new(Role::Server, w.cfg.ws);
    let rx = if deflate { rx.with_compression() } else { rx };
    // A task of its own: the accepted connection's task (with room for
    // the HTTP phase) ends here rather than live on at its larger size.
    monoio::spawn(session_task(w.clone(), sock, id, (session, rx), buf));
}

/// Parks a just-upgraded WebSocket at once if parking is on and it has
/// nothing to do; otherwise hands `sock` and `session` back.
fn park_fresh(
    w: &Rc<Worker>,
    sock: Sock,
    id: ConnId,
    session: Session,
    buf: &BytesMut,
) -> Result<(), (Sock, Session)> {
    if !buf.is_empty() || w.parking.after_ms().is_none() {
        return Err((sock, session));
    }
    let idle = w
        .hub
        .borrow_mut()
        .parking(id)
        .is_some_and(|p| p.park_fresh(park::waker(id)));
    if !idle {
        return Err((sock, session));
    }
    if w.parking.watch(id, sock.fd).is_err() {
        unpark(w, id);
        return Err((sock, session));
    }
    let Sock { rd, wr, .. } = sock;
    let Ok(stream) = rd.reunite(wr) else {
        unreachable!("the halves of one socket");
    };
    w.parking.store(id, stream.into_raw_fd(), session);
    Ok(())
}

/// A WebSocket's task from the upgrade, or from resuming it, to its end
/// (or until it parks).
async fn session_task(
    w: Rc<Worker>,
    sock: Sock,
    id: ConnId,
    state: (Session, Receiver),
    buf: BytesMut,
) {
    run(&w, sock, id, state, buf).await;
}

/// Runs a WebSocket: spawns the writer, reads until the close handshake
/// or the socket ends — or, quiet for `--park-after`, parks it and
/// returns — then waits for the writer and takes the connection out of
/// the books.
async fn run(
    w: &Rc<Worker>,
    sock: Sock,
    id: ConnId,
    (session, rx): (Session, Receiver),
    mut buf: BytesMut,
) {
    let deflate = session.deflate;
    let Sock { mut rd, wr, fd } = sock;
    let mut writer = Some(monoio::spawn(writer(w.clone(), wr, id)));
    let serial = w.hub.borrow().conn(id).map_or(0, |c| c.serial());
    let mut reader = WsReader {
        w,
        id,
        serial,
        session,
        bucket: TokenBucket::new(w.cfg.auth.publish_rate, w.cfg.auth.publish_rate, w.now_ms()),
        held: None,
        deferred: None,
        rx,
    };
    let park_after = w.parking.after_ms();
    let outcome = loop {
        let end = reader.run(&mut rd, fd, &mut buf, park_after).await;
        let (ReadEnd::Quiet, Some(after)) = (&end, park_after) else {
            break end;
        };
        if !w
            .hub
            .borrow_mut()
            .parking(id)
            .is_some_and(|p| p.park(after))
        {
            continue;
        }
        // Parking: the writer stops and hands its half back.
        let Some(wr) = writer.take().expect("a writer while parkable").await else {
            // It wrote its last frame instead (or failed): read on.
            unpark(w, id);
            continue;
        };
        let parked = w
            .hub
            .borrow_mut()
            .parking(id)
            .is_some_and(|p| p.parked(park::waker(id)));
        if !parked || w.parking.watch(id, fd).is_err() {
            // Something came in meanwhile (or the epoll set is full).
            unpark(w, id);
            writer = Some(monoio::spawn(self::writer(w.clone(), wr, id)));
            continue;
        }
        // Nothing awaits from here on: the poller cannot see the fd before
        // it is stored.
        let Ok(stream) = rd.reunite(wr) else {
            unreachable!("the halves of one socket");
        };
        w.parking.store(id, stream.into_raw_fd(), reader.session);
        return;
    };
    close(w, id, (outcome, fd, deflate), rd, writer).await;
    w.forget(id, reader.session.release_ip);
}

/// A WebSocket's reader ended with `outcome`: ends its session, lets
/// the writer finish (or stops it), drains after a protocol error.
async fn close(
    w: &Rc<Worker>,
    id: ConnId,
    (outcome, fd, deflate): (ReadEnd, RawFd, bool),
    mut rd: TcpOwnedReadHalf,
    writer: Option<monoio::task::JoinHandle<Option<TcpOwnedWriteHalf>>>,
) {
    end_session(w, id);
    if !matches!(outcome, ReadEnd::CloseReceived | ReadEnd::Failed) {
        // The peer is gone or silent: unblock a writer stuck on a full socket.
        sys::shutdown(fd);
        w.hub.borrow_mut().abort(id);
    }
    if let Some(writer) = writer {
        let _ = writer.await;
    }
    if matches!(outcome, ReadEnd::Failed) {
        // Our close frame is queued in the kernel; closing now with the
        // peer's unread bytes would send an RST and lose it.
        let drain = drain_close(&mut rd, fd, PROTOCOL_DRAIN_BYTES, PROTOCOL_DRAIN_TIME);
        // Boxed: its buffer would otherwise enlarge every connection's task.
        Box::pin(drain).await;
    }
    drop(rd);
    if deflate {
        count_compressed(w, false);
    }
}

/// Takes `id` out of parking in the hub (no-op if it is gone).
fn unpark(w: &Worker, id: ConnId) {
    if let Some(p) = w.hub.borrow_mut().parking(id) {
        p.unpark();
    }
}

/// What ends with a WebSocket besides its socket: a Pusher session, its
/// presence memberships (no-ops if it had none).
fn end_session(w: &Rc<Worker>, id: ConnId) {
    pusher_ws::close(w, id);
    presence_edge::close(w, id);
}

/// The worker's poller task for parked connections: runs each one that is
/// woken (input, something to write, a deadline's `shutdown`) again.
pub async fn unparker(w: Rc<Worker>) {
    let mut ids = Vec::new();
    while !w.parking.is_stopped() {
        w.parking.woken(&mut ids).await;
        for id in ids.drain(..) {
            resume(&w, id);
        }
    }
}

/// Runs parked connection `id` again: a new monoio socket over its fd,
/// and its tasks. A no-op if it is not parked (woken twice).
fn resume(w: &Rc<Worker>, id: ConnId) {
    let Some((fd, session)) = w.parking.take(id) else {
        return;
    };
    unpark(w, id);
    // What woke it, read here: its peer leaving (end of stream, or a lone
    // close frame) is answered without a task — idle connections mostly
    // end parked — and anything else goes to its task, nothing lost.
    let mut buf = BytesMut::new();
    match w.read_parked(fd, &mut buf) {
        Ok(0) => return end_parked(w, id, fd, session, None),
        Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => {
            return end_parked(w, id, fd, session, None)
        }
        Ok(_) => {
            let mut hub = w.hub.borrow_mut();
            hub.received(id);
            // With something queued (or our close sent), its task writes
            // it before the echo, in order.
            let idle = hub.parking(id).is_some_and(|p| p.is_idle());
            drop(hub);
            if let Some(code) = lone_close(w, &buf).filter(|_| idle) {
                return end_parked(w, id, fd, session, Some(code));
            }
        }
        Err(_) => {}
    }
    // SAFETY: `fd` came out of the parked set, which owned it since
    // `into_raw_fd`: it is open and nobody else owns or closes it.
    let std = unsafe { std::net::TcpStream::from_raw_fd(fd) };
    match monoio::net::TcpStream::from_std(std) {
        Ok(stream) => {
            let rx = Receiver::new(Role::Server, w.cfg.ws);
            let rx = if session.deflate {
                rx.with_compression()
            } else {
                rx
            };
            let sock = Sock::resumed(stream);
            monoio::spawn(session_task(w.clone(), sock, id, (session, rx), buf));
        }
        Err(e) => {
            // The socket was closed with `std`.
            log!(
                Info,
                "cannot resume a parked connection",
                conn = id,
                error = e
            );
            end_session(w, id);
            w.hub.borrow_mut().abort(id);
            if session.deflate {
                count_compressed(w, false);
            }
            w.forget(id, session.release_ip);
        }
    }
}

/// Whether `buf` is exactly one valid close frame from the client: its
/// code (`None`: no code). A close frame is never compressed, so a plain
/// receiver reads it whatever was negotiated.
fn lone_close(w: &Worker, buf: &BytesMut) -> Option<Option<u16>> {
    // FIN + close: anything else is left to the connection's task.
    if buf.first() != Some(&0x88) {
        return None;
    }
    let mut probe = buf.clone();
    match Receiver::new(Role::Server, w.cfg.ws).next(&mut probe) {
        Ok(Some(Message::Close(frame))) if probe.is_empty() => Some(frame.map(|f| f.code)),
        _ => None,
    }
}

/// Ends a parked connection whose peer left, without running it: the
/// echo of its close frame (`echo`: the peer's code, if it sent one) goes
/// out with one nonblocking send — it has nothing else queued (checked by
/// the caller), and a socket that cannot take a few bytes belongs to a
/// peer that stopped reading — then the socket closes (our FIN) and it
/// leaves the books.
fn end_parked(w: &Rc<Worker>, id: ConnId, fd: RawFd, session: Session, echo: Option<Option<u16>>) {
    end_session(w, id);
    {
        let mut hub = w.hub.borrow_mut();
        if let Some(code) = echo {
            hub.peer_closed(id, code);
            let mut frames = Vec::new();
            hub.take_batch(id, &mut frames);
            let total: usize = frames.iter().map(Bytes::len).sum();
            let sent = match frames.as_slice() {
                [frame] => sys::send_nonblocking(fd, frame).unwrap_or(0),
                _ => 0,
            };
            hub.release(&mut frames);
            if sent == total {
                hub.stats.writes += 1;
                hub.wrote(id, total);
            }
        }
        hub.abort(id);
    }
    // SAFETY: `fd` came out of the parked set, which owned it since
    // `into_raw_fd`; nobody else owns it, and it is closed once, here.
    unsafe { libc::close(fd) };
    if session.deflate {
        count_compressed(w, false);
    }
    w.forget(id, session.release_ip);
}

/// Counts open compressed connections (`compression_connections`).
fn count_compressed(w: &Worker, open: bool) {
    let mut stats = w.compression.borrow_mut();
    stats.connections = if open {
        stats.connections.saturating_add(1)
    } else {
        stats.connections.saturating_sub(1)
    };
}

/// What draining the read buffer came to.
enum Drained {
    /// Everything complete was handled; read more.
    NeedMore,
    /// Over `--publish-rate`: wait this many milliseconds.
    Throttled(u64),
    /// A connection is over `--max-outbound-queue`: wait until none is.
    Pressed,
    /// A subscribe waits for its read from Redis (`self.deferred`).
    Deferred,
    /// The connection is ending.
    End(ReadEnd),
}

enum ReadEnd {
    /// The peer's close frame arrived (and our echo is queued).
    CloseReceived,
    /// We failed the connection (protocol error), or we are closing and
    /// the peer still sends data; our close is queued and nothing more is
    /// read.
    Failed,
    /// End of stream or a socket error.
    Gone,
    /// Quiet for `--park-after` and parkable: the caller parks it.
    Quiet,
}

struct WsReader<'a> {
    w: &'a Rc<Worker>,
    id: ConnId,
    serial: u64,
    /// Its channel (path mode), grants and per-IP count.
    session: Session,
    rx: Receiver,
    /// `--publish-rate`: over it, the connection is simply read later.
    bucket: TokenBucket,
    /// A data message waiting for a publish token.
    held: Option<Box<Message>>,
    /// A subscribe waiting for its history read from Redis.
    deferred: Option<Box<Deferred>>,
}

impl WsReader<'_> {
    /// Reads and handles input until the connection ends — or, with
    /// `park_after`, until it was quiet that long and could be parked.
    async fn run(
        &mut self,
        rd: &mut TcpOwnedReadHalf,
        fd: RawFd,
        buf: &mut BytesMut,
        park_after: Option<u64>,
    ) -> ReadEnd {
        let mut charge = self.w.inbound_charge();
        loop {
            match self.drain(buf) {
                Drained::End(end) => return end,
                Drained::Throttled(ms) => {
                    // Backpressure instead of loss: stop reading until the
                    // bucket refills; the peer's TCP window does the rest.
                    // Boxed: a timer entry in every reader would cost all
                    // connections memory for a path only fast publishers take.
                    Box::pin(monoio::time::sleep(Duration::from_millis(ms))).await;
                    continue;
                }
                Drained::Deferred => {
                    // Nothing more is read from this client until its
                    // subscribe is answered: requests stay in order.
                    if let Some(d) = self.deferred.take() {
                        // Boxed: only resuming connections pay for it.
                        Box::pin(resume::subscribe(self.w, self.id, *d)).await;
                    }
                    continue;
                }
                Drained::Pressed => {
                    // Woken when every connection is back under its bound
                    // (or was cut): the publisher goes at the pace of
                    // its slowest reader that keeps up.
                    poll_fn(|cx| self.w.hub.borrow_mut().poll_unpressed(cx)).await;
                    continue;
                }
                Drained::NeedMore => {}
            }
            // What stays after the drain: a partial frame, a message
            // being assembled. Small publishers hold nothing here.
            let held = buf.capacity() + self.rx.held();
            if !charge.update(held, self.w.cfg.max_total_inbound) {
                return self.refuse_inbound(held);
            }
            if buf.is_empty() {
                // Idle connections keep no read buffer.
                *buf = BytesMut::new();
            }
            let quiet = park_after.filter(|_| self.held.is_none() && self.rx.is_idle());
            let got = match quiet {
                None => self.w.read_more(rd, fd, buf).await.map(Some),
                Some(after) => {
                    let (w, id, bucket) = (self.w, self.id, &self.bucket);
                    // Checked when the wait has been quiet that long, then
                    // again when the connection's own quiet time could be.
                    let check = || {
                        let mut hub = w.hub.borrow_mut();
                        let Some(p) = hub.parking(id) else {
                            return Some(Duration::from_millis(after));
                        };
                        if bucket.is_full(w.now_ms()) && p.parkable(after) {
                            return None;
                        }
                        // + one sweep tick: the hub's clock is coarse.
                        let left = after.saturating_sub(p.quiet_ms()) + 100;
                        Some(Duration::from_millis(left))
                    };
                    let after = Duration::from_millis(after);
                    let wait = (after, &check as &dyn Fn() -> Option<Duration>);
                    self.w.read_more_or_quiet(rd, fd, buf, wait).await
                }
            };
            match got {
                Ok(None) => return ReadEnd::Quiet,
                Ok(Some(0)) | Err(_) => return ReadEnd::Gone,
                Ok(Some(_)) => self.w.hub.borrow_mut().received(self.id),
            }
        }
    }

    /// Handles every complete message in `buf`; all of them are fanned out
    /// before any writer runs, so a burst shares writes.
    fn drain(&mut self, buf: &mut BytesMut) -> Drained {
        loop {
            let msg = match self.held.take() {
                Some(msg) => *msg,
                None => match self.rx.next(buf) {
                    Ok(None) => return Drained::NeedMore,
                    Ok(Some(msg)) => {
                        if self.rx.was_compressed() {
                            self.w.compression.borrow_mut().inflated_messages += 1;
                        }
                        msg
                    }
                    Err(e) => return Drained::End(self.fail(&e)),
                },
            };
            if matches!(msg, Message::Text(_) | Message::Binary(_)) {
                if self.w.hub.borrow().pressed() {
                    // A subscriber is over its bound: pause this publisher
                    // (TCP flow control slows it) rather than cut
                    // subscribers that read at line rate.
                    self.w.hub.borrow_mut().stats.publish_backpressure += 1;
                    self.held = Some(Box::new(msg));
                    return Drained::Pressed;
                }
                if self.w.over_backlog() {
                    // The server is behind on its own writes: slow the
                    // publishers down rather than let every subscriber's
                    // queue grow until the slow-consumer policy cuts them.
                    self.w.hub.borrow_mut().stats.publish_backpressure += 1;
                    self.held = Some(Box::new(msg));
                    return Drained::Throttled(1);
                }
                if let Err(wait_ms) = self.bucket.take(self.w.now_ms()) {
                    self.w.hub.borrow_mut().stats.publish_rate_limited += 1;
                    self.held = Some(Box::new(msg));
                    return Drained::Throttled(wait_ms);
                }
            }
            if let Some(end) = self.on_message(msg) {
                return Drained::End(end);
            }
            if self.deferred.is_some() {
                return Drained::Deferred;
            }
        }
    }

    fn fail(&mut self, e: &ProtocolError) -> ReadEnd {
        let mut hub = self.w.hub.borrow_mut();
        hub.stats.protocol_errors += 1;
        log!(
            Debug,
            "protocol error",
            conn = self.id,
            error = e,
            code = e.close_code()
        );
        hub.close(
            self.id,
            e.close_code(),
            &e.to_string(),
            CloseReason::Protocol,
        );
        ReadEnd::Failed
    }

    /// Closes with 1013 a connection whose input grew while the worker was
    /// over `--max-total-inbound`: a large message arriving slowly is what
    /// holds memory, and "try again later" is true of it.
    fn refuse_inbound(&mut self, held: usize) -> ReadEnd {
        let mut hub = self.w.hub.borrow_mut();
        hub.stats.inbound_budget_refusals += 1;
        log!(
            Debug,
            "inbound budget exhausted",
            conn = self.id,
            held = held,
            total = self.w.inbound.get()
        );
        hub.close(
            self.id,
            1013,
            "inbound memory budget exhausted",
            CloseReason::Protocol,
        );
        ReadEnd::Failed
    }

    fn on_message(&mut self, msg: Message) -> Option<ReadEnd> {
        let mut hub = self.w.hub.borrow_mut();
        let open = hub
            .conn(self.id)
            .is_some_and(|c| c.state() == ConnState::Open);
        match msg {
            // RFC 6455 5.5.1: after sending a close frame, data is ignored.
            // Not silently: it is counted, and reading stops here (what the
            // peer sends next is only more of the same; our close frame is
            // queued, and the writer ends the connection after it).
            Message::Text(_) | Message::Binary(_) if !open => {
                hub.stats.messages_not_delivered += 1;
                return Some(ReadEnd::Failed);
            }
            Message::Text(p) => self.on_data(&mut hub, OpCode::Text, p),
            Message::Binary(p) => self.on_data(&mut hub, OpCode::Binary, p),
            Message::Ping(p) => hub.queue_pong(self.id, &p),
            Message::Pong(_) => {}
            Message::Close(frame) => {
                hub.peer_closed(self.id, frame.map(|f| f.code));
                return Some(ReadEnd::CloseReceived);
            }
        }
        None
    }

    fn on_data(&mut self, hub: &mut Hub, opcode: OpCode, payload: Bytes) {
        // A Pusher connection (`GET /app/{key}`): its session lives in
        // the worker, not in this task, which every connection pays for.
        if hub.conn(self.id).map(|c| c.kind()) == Some(ConnKind::Ws(formats::PUSHER)) {
            return pusher_ws::on_frame(self.w, hub, self.id, opcode, &payload);
        }
        let redis = self.w.redis.as_deref();
        let Some(c) = self.session.channel.as_deref() else {
            let who = (self.id, self.serial, &self.session.grants);
            self.deferred = ws_control::on_control(self.w, hub, who, opcode, &payload);
            return;
        };
        if !self.session.grants.may_publish(c) {
            hub.stats.publish_forbidden += 1;
            hub.close(
                self.id,
                1008,
                "this connection may not publish here",
                CloseReason::Protocol,
            );
            return;
        }
        let outcome = route_publish(hub, redis, c, opcode, &payload, self.serial, false);
        if let Published::Rejected = outcome {
            // A plain WebSocket has no way to carry an error reply: tell
            // the publisher with close 1013 rather than drop its message.
            log!(
                Info,
                "publish refused, closing publisher",
                conn = self.id,
                channel = c
            );
            hub.close(
                self.id,
                1013,
                "publish buffer full",
                CloseReason::Overloaded,
            );
        }
    }
}

/// The writer task: sleeps until frames are queued, writes each batch with
/// one vectored write, and stops after the close frame or on teardown.
/// Returns its half when it stops for parking.
async fn writer(w: Rc<Worker>, mut wr: TcpOwnedWriteHalf, id: ConnId) -> Option<TcpOwnedWriteHalf> {
    loop {
        match poll_fn(|cx| w.hub.borrow_mut().poll_writer(id, cx)).await {
            WriterWork::Finish => return None,
            WriterWork::Park => return Some(wr),
            WriterWork::Write => {}
        }
        // A fresh Vec per batch: it moves into the write and is dropped
        // after it, so no buffer is held (or stored in this task) while idle.
        let mut batch = Vec::new();
        let last = w.hub.borrow_mut().take_batch(id, &mut batch);
        let total: usize = batch.iter().map(Bytes::len).sum();
        // Boxed: the write's state (iovecs, the in-flight op) would
        // otherwise size every connection's writer task for it, idle or
        // not (488 → 104 bytes of task per connection, tests/idle_memory.rs).
        let write = write_all_vectored(&mut wr, batch, || w.hub.borrow_mut().progressed(id));
        let (res, mut frames) = Box::pin(write).await;
        let mut hub = w.hub.borrow_mut();
        hub.release(&mut frames);
        hub.stats.writes += 1;
        hub.wrote(id, total);
        if let Err(e) = res {
            log!(Debug, "write failed", conn = id, error = e);
            hub.abort(id);
            return None;
        }
        if last {
            return None;
        }
    }
}
