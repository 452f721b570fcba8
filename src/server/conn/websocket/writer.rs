//! A WebSocket's writer task: the hub's outbox drained to the transport,
//! one batch (one vectored write) at a time. The wire format was chosen
//! when the frames were encoded, so this task knows no protocol: a
//! different wire under the same outbox (Server-Sent Events) reuses the
//! outbox the same way and writes its own frames.

use std::future::poll_fn;
use std::rc::Rc;

use bytes::Bytes;

use super::transport::WriteHalf;
use crate::hub::{ConnId, WriterWork};
use crate::log;
use crate::server::worker::Worker;

/// The writer task: sleeps until frames are queued, writes each batch with
/// one vectored write, and stops after the close frame or on teardown.
/// Returns its half when it stops for parking.
pub async fn writer(w: Rc<Worker>, mut wr: WriteHalf, id: ConnId) -> Option<WriteHalf> {
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
        let write = wr.write(batch, || w.hub.borrow_mut().progressed(id));
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
