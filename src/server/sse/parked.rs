//! A parked stream woken only to send a little (its heartbeat, every
//! `--sse-heartbeat`) is served where it lies: the chunk goes out with
//! one nonblocking send and the stream parks again, without a task —
//! otherwise every heartbeat would run every idle stream for
//! `--park-after`, and 19,000 idle streams would hold their tasks most
//! of the time.

use std::os::fd::RawFd;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;

use crate::hub::{ConnId, ConnState, WriterWork};
use crate::server::conn::park::{self, Session};
use crate::server::conn::websocket::transport;
use crate::server::worker::Worker;

/// Most bytes written this way: a heartbeat's chunk, with room.
pub const MAX_PARKED_WRITE: usize = 256;

/// Writes what is queued for parked stream `id` (already taken out of
/// parking, its socket `fd`) if it is little, and parks it again. Hands
/// the session back when the stream must run instead (more to write,
/// its end, no place in the fan-out window, or a full socket — what it
/// could not take is queued first).
pub fn write_and_repark(
    w: &Worker,
    (id, fd): (ConnId, RawFd),
    session: Session,
) -> Result<(), Session> {
    if !write_little(w, id, fd) {
        return Err(session);
    }
    let parked = w
        .hub
        .borrow_mut()
        .parking(id)
        .is_some_and(|p| p.park_fresh(park::waker(id)));
    if !parked {
        return Err(session);
    }
    if w.parking.watch(id, fd).is_err() {
        if let Some(p) = w.hub.borrow_mut().parking(id) {
            p.unpark();
        }
        return Err(session);
    }
    w.parking.store(id, (fd, None), session);
    w.hub.borrow_mut().stats.parked_writes += 1;
    Ok(())
}

/// Sends the queued chunks if they are few bytes and the fan-out window
/// has a place; whether all of them went out.
fn write_little(w: &Worker, id: ConnId, fd: RawFd) -> bool {
    let mut hub = w.hub.borrow_mut();
    let small = hub
        .conn(id)
        .is_some_and(|c| c.state() == ConnState::Open && c.pending_bytes() <= MAX_PARKED_WRITE);
    // Admitted by the pacer as any writer; a writer that must wait runs
    // as a task (whose own poll replaces the no-op waker left here).
    let mut cx = Context::from_waker(Waker::noop());
    if !small || hub.poll_writer(id, &mut cx) != Poll::Ready(WriterWork::Write) {
        return false;
    }
    let mut frames = Vec::new();
    hub.take_batch(id, &mut frames);
    let total: usize = frames.iter().map(Bytes::len).sum();
    let mut rest = Vec::new();
    for f in &frames {
        let sent = if rest.is_empty() {
            transport::send_parked(fd, f)
        } else {
            0
        };
        rest.extend_from_slice(&f[sent..]);
    }
    hub.release(&mut frames);
    hub.stats.writes += 1;
    hub.wrote(id, total);
    if rest.is_empty() {
        return true;
    }
    // The socket took part of it: the rest, first in the queue, is the
    // stream's task's to write (a chunk must not be cut).
    hub.send_to(id, Bytes::from(rest));
    false
}
