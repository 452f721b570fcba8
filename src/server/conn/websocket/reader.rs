//! A WebSocket's reader: input from the transport through the sans-I/O
//! receiver, a burst handled before any writer runs, and the brakes on a
//! publisher — `--publish-rate`, a subscriber over its bound, the
//! worker's write backlog, the inbound budget — which all stop reading
//! rather than drop. Quiet for `--park-after`, it says so (the task
//! parks the connection). What a message means is `frames`'.

use std::future::poll_fn;
use std::rc::Rc;
use std::time::Duration;

use bytes::BytesMut;

use super::close::ReadEnd;
use super::frames;
use super::transport::ReadHalf;
use crate::auth::TokenBucket;
use crate::hub::{CloseReason, ConnId};
use crate::log;
use crate::server::conn::park::Session;
use crate::server::native::{self, Deferred};
use crate::server::worker::Worker;
use crate::ws::{Message, ProtocolError, Receiver};

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

/// A WebSocket's reading state, for the life of its task.
pub struct WsReader<'a> {
    pub w: &'a Rc<Worker>,
    pub id: ConnId,
    pub serial: u64,
    /// Its channel (path mode), grants and per-IP count.
    pub session: Session,
    pub rx: Receiver,
    /// `--publish-rate`: over it, the connection is simply read later.
    pub bucket: TokenBucket,
    /// A data message waiting for a publish token.
    pub held: Option<Box<Message>>,
    /// A subscribe waiting for its history read from Redis.
    pub deferred: Option<Box<Deferred>>,
}

impl WsReader<'_> {
    /// Reads and handles input until the connection ends — or, with
    /// `park_after`, until it was quiet that long and could be parked.
    pub async fn run(
        &mut self,
        rd: &mut ReadHalf,
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
                        Box::pin(native::subscribe_deferred(self.w, self.id, *d)).await;
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
                None => rd.read(self.w, buf).await.map(Some),
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
                    rd.read_or_quiet(self.w, buf, wait).await
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
                if self.w.over_backlog() || self.w.others_pressed() {
                    // The server is behind on its own writes (or another
                    // worker on its, or has a subscriber over its bound):
                    // slow the publishers down rather than let every
                    // subscriber's queue grow until the slow-consumer
                    // policy cuts them.
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
            let who = (self.id, self.serial, &self.session);
            match frames::on_message(self.w, who, msg) {
                Ok(deferred) => self.deferred = deferred,
                Err(end) => return Drained::End(end),
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
}
