//! An SSE stream's task, from its `200` (or from resuming it) to its end
//! or until it parks: the writer spawned beside it, and the peer watched
//! — it sends nothing, so any input is read and dropped (bounded), and
//! its end of stream ends the stream. Quiet for `--park-after`, the
//! stream parks as a WebSocket does (`conn::park`), and the worker's
//! poller resumes it through [`resume`].

use std::os::fd::RawFd;
use std::rc::Rc;
use std::time::Duration;

use bytes::BytesMut;

use super::parked::write_and_repark;
use super::writer::writer;
use crate::hub::{CloseReason, ConnId};
use crate::log;
use crate::server::conn::park::{self, Session};
use crate::server::conn::stream::Stream;
use crate::server::conn::websocket::transport::{self, ReadHalf, WriteHalf};
use crate::server::worker::Worker;

/// Most bytes a stream's client may send after its request (it has
/// nothing to say; a pipelined request is never answered): past it the
/// stream is closed.
pub const MAX_CLIENT_BYTES: usize = 16 * 1024;

/// How watching the peer ended.
enum Heard {
    /// End of stream, a socket error, or too much input.
    Gone,
    /// Quiet for `--park-after` and parkable.
    Quiet,
}

/// Starts a stream's task (its first events are queued).
pub fn start(w: &Rc<Worker>, sock: Stream, id: ConnId, session: Session) {
    monoio::spawn(run(w.clone(), sock, id, session));
}

/// Runs parked stream `id` again (woken by the poller: input, its peer
/// leaving, something to write); a peer that left ends it without a task.
pub fn resume(w: &Rc<Worker>, id: ConnId, parked: transport::Parked, session: Session) {
    unpark(w, id);
    if parked.1.is_some() {
        // TLS: what woke it is ciphertext, and what it sends must be
        // encrypted: its task does both through its session.
        return run_again(w, id, parked, session);
    }
    let fd = parked.0;
    let mut buf = BytesMut::new();
    let gone = match transport::read_parked(w, fd, &mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    };
    if gone {
        w.hub.borrow_mut().abort(id);
        transport::close_parked(fd);
        return w.forget(id, session.release_ip);
    }
    let session = match write_and_repark(w, (id, fd), session) {
        Ok(()) => return,
        Err(session) => session,
    };
    run_again(w, id, (fd, None), session);
}

/// Gives a resumed stream its task again.
fn run_again(w: &Rc<Worker>, id: ConnId, parked: transport::Parked, session: Session) {
    match transport::resume(parked) {
        Ok(sock) => start(w, sock, id, session),
        Err(e) => {
            log!(Info, "cannot resume a parked stream", conn = id, error = e);
            w.hub.borrow_mut().abort(id);
            w.forget(id, session.release_ip);
        }
    }
}

/// The stream's task: the writer beside it, the peer watched until it
/// leaves (or the stream parks), then out of the books.
async fn run(w: Rc<Worker>, sock: Stream, id: ConnId, session: Session) {
    let (mut rd, wr) = transport::split(sock);
    let mut task = Some(monoio::spawn(writer(w.clone(), wr, (id, rd.fd))));
    let park_after = w.parking.after_ms().filter(|_| rd.parkable());
    let mut heard = 0;
    loop {
        if let Heard::Gone = listen(&w, &mut rd, id, &mut heard, park_after).await {
            break;
        }
        let after = park_after.expect("quiet only with parking on");
        match try_park(&w, (id, rd.fd), after, &mut task).await {
            Some(wr) => {
                w.parking.store(id, transport::park(rd, wr), session);
                return;
            }
            None => continue,
        }
    }
    // Gone: a writer stuck on a full socket is unblocked.
    rd.shutdown();
    w.hub.borrow_mut().abort(id);
    if let Some(t) = task {
        let _ = t.await;
    }
    w.forget(id, session.release_ip);
}

/// Parks `id` once its writer stopped: the write half, the fd watched by
/// the poller. `None`: it could not (something to write came, or it is
/// ending), and it runs on with a writer.
async fn try_park(
    w: &Rc<Worker>,
    (id, fd): (ConnId, RawFd),
    after: u64,
    task: &mut Option<monoio::task::JoinHandle<Option<WriteHalf>>>,
) -> Option<WriteHalf> {
    let parking = |w: &Worker| {
        w.hub
            .borrow_mut()
            .parking(id)
            .is_some_and(|p| p.park(after))
    };
    if !parking(w) {
        return None;
    }
    let Some(wr) = task.take().expect("a writer while running").await else {
        // It wrote its last chunk instead (or failed): the peer's end is next.
        unpark(w, id);
        return None;
    };
    let parked = w
        .hub
        .borrow_mut()
        .parking(id)
        .is_some_and(|p| p.parked(park::waker(id)));
    if !parked || w.parking.watch(id, fd).is_err() {
        unpark(w, id);
        *task = Some(monoio::spawn(writer(w.clone(), wr, (id, fd))));
        return None;
    }
    Some(wr)
}

/// Watches the peer: drops what it sends (closing the stream past
/// [`MAX_CLIENT_BYTES`]) until it leaves, or — with `park_after` — until
/// the stream was quiet that long and could park.
async fn listen(
    w: &Worker,
    rd: &mut ReadHalf,
    id: ConnId,
    heard: &mut usize,
    park_after: Option<u64>,
) -> Heard {
    let mut buf = BytesMut::new();
    loop {
        let got = match park_after {
            None => rd.read(w, &mut buf).await.map(Some),
            Some(after) => {
                let check = || quiet_check(w, id, after);
                let wait = (
                    Duration::from_millis(after),
                    &check as &dyn Fn() -> Option<Duration>,
                );
                rd.read_or_quiet(w, &mut buf, wait).await
            }
        };
        match got {
            Ok(None) => return Heard::Quiet,
            Ok(Some(0)) | Err(_) => return Heard::Gone,
            Ok(Some(n)) => *heard = heard.saturating_add(n),
        }
        let crossed = *heard > MAX_CLIENT_BYTES && *heard - buf.len() <= MAX_CLIENT_BYTES;
        // Idle streams keep no read buffer.
        buf = BytesMut::new();
        if crossed {
            let mut hub = w.hub.borrow_mut();
            hub.stats.sse_refused += 1;
            let why = "an event stream's client sends nothing";
            hub.close(id, 1008, why, CloseReason::Protocol);
        }
    }
}

/// When a quiet wait has lasted: `None` if the stream can park now, else
/// how much longer to wait first.
fn quiet_check(w: &Worker, id: ConnId, after: u64) -> Option<Duration> {
    let mut hub = w.hub.borrow_mut();
    let Some(p) = hub.parking(id) else {
        return Some(Duration::from_millis(after));
    };
    if p.parkable(after) {
        return None;
    }
    // + one sweep tick: the hub's clock is coarse.
    let left = after.saturating_sub(p.quiet_ms()) + 100;
    Some(Duration::from_millis(left))
}

/// Takes `id` out of parking in the hub (no-op if it is gone).
fn unpark(w: &Worker, id: ConnId) {
    if let Some(p) = w.hub.borrow_mut().parking(id) {
        p.unpark();
    }
}
