//! A WebSocket's task, from the upgrade (or from resuming it) to its end
//! or until it parks: the writer spawned beside it, the reader run, and
//! parking after `--park-after` of quiet — the writer stops and hands its
//! half back, the halves go to the parked set as one fd.

use std::rc::Rc;

use bytes::BytesMut;

use super::close::{close, ReadEnd};
use super::reader::WsReader;
use super::transport;
use super::writer;
use crate::auth::TokenBucket;
use crate::hub::ConnId;
use crate::server::conn::park::{self, Session};
use crate::server::conn::stream::Stream;
use crate::server::worker::Worker;
use crate::ws::Receiver;

/// A WebSocket's task from the upgrade, or from resuming it, to its end
/// (or until it parks).
pub async fn session_task(
    w: Rc<Worker>,
    sock: Stream,
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
    sock: Stream,
    id: ConnId,
    (session, rx): (Session, Receiver),
    mut buf: BytesMut,
) {
    let deflate = session.deflate;
    let (mut rd, wr) = transport::split(sock);
    let mut writer = Some(monoio::spawn(writer::writer(w.clone(), wr, id)));
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
    // A TLS connection keeps its tasks (see `transport`).
    let park_after = w.parking.after_ms().filter(|_| rd.parkable());
    let outcome = loop {
        let end = reader.run(&mut rd, &mut buf, park_after).await;
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
        if !parked || w.parking.watch(id, rd.fd).is_err() {
            // Something came in meanwhile (or the epoll set is full).
            unpark(w, id);
            writer = Some(monoio::spawn(writer::writer(w.clone(), wr, id)));
            continue;
        }
        // Nothing awaits from here on: the poller cannot see the fd before
        // it is stored.
        w.parking.store(id, transport::park(rd, wr), reader.session);
        return;
    };
    close(w, id, (outcome, deflate), rd, writer).await;
    w.forget(id, reader.session.release_ip);
}

/// Takes `id` out of parking in the hub (no-op if it is gone).
pub fn unpark(w: &Worker, id: ConnId) {
    if let Some(p) = w.hub.borrow_mut().parking(id) {
        p.unpark();
    }
}
