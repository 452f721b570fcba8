//! Parked WebSockets (`--park-after`): a fresh connection with nothing
//! to do parks at once, the worker's poller resumes one that is woken, and
//! a parked connection whose peer left ends without a task. What is kept
//! while parked is `conn::park`'s; the fd comes from and goes back to the
//! transport ([`transport::park`], [`transport::resume`]).

use std::os::fd::RawFd;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};

use super::close::{count_compressed, end_session};
use super::task::{session_task, unpark};
use super::transport;
use crate::hub::ConnId;
use crate::log;
use crate::server::conn::park::{self, Session};
use crate::server::conn::stream::Stream;
use crate::server::worker::Worker;
use crate::ws::{Message, Receiver, Role};

/// Parks a just-upgraded WebSocket at once if parking is on and it has
/// nothing to do; otherwise hands `sock` and `session` back.
pub fn park_fresh(
    w: &Rc<Worker>,
    sock: Stream,
    id: ConnId,
    session: Session,
    buf: &BytesMut,
) -> Result<(), (Stream, Session)> {
    let tls_busy = sock.tls.as_ref().is_some_and(|t| !t.parkable());
    if tls_busy || !buf.is_empty() || w.parking.after_ms().is_none() {
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
    if w.parking.watch(id, sock.sock.fd).is_err() {
        unpark(w, id);
        return Err((sock, session));
    }
    let (rd, wr) = transport::split(sock);
    w.parking.store(id, transport::park(rd, wr), session);
    Ok(())
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
    let Some((parked, session)) = w.parking.take(id) else {
        return;
    };
    let kind = w.hub.borrow().conn(id).map(crate::hub::Conn::kind);
    if kind == Some(crate::hub::ConnKind::Ws(crate::server::formats::SSE)) {
        // A parked event stream is resumed by its own edge.
        return crate::server::sse::resume(w, id, parked, session);
    }
    unpark(w, id);
    if parked.1.is_some() {
        // TLS: what woke it is ciphertext, for its task's session to read.
        return run_again(w, id, parked, session, BytesMut::new());
    }
    let fd = parked.0;
    // What woke it, read here: its peer leaving (end of stream, or a lone
    // close frame) is answered without a task — idle connections mostly
    // end parked — and anything else goes to its task, nothing lost.
    let mut buf = BytesMut::new();
    match transport::read_parked(w, fd, &mut buf) {
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
    run_again(w, id, parked, session, buf);
}

/// Gives a resumed connection its tasks again, `buf` holding what was
/// read while resuming it.
fn run_again(
    w: &Rc<Worker>,
    id: ConnId,
    parked: transport::Parked,
    session: Session,
    buf: BytesMut,
) {
    match transport::resume(parked) {
        Ok(sock) => {
            let rx = Receiver::new(Role::Server, w.cfg.ws);
            let rx = if session.deflate {
                rx.with_compression()
            } else {
                rx
            };
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
                [frame] => transport::send_parked(fd, frame),
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
    transport::close_parked(fd);
    if session.deflate {
        count_compressed(w, false);
    }
    w.forget(id, session.release_ip);
}
