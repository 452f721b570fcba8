//! An SSE stream's writer task: the hub's batches written as they are
//! (every frame an SSE chunk, encoded by `formats::SSE` or queued by
//! `open`), except the close frame the hub queues last, which becomes a
//! `close` event and the end of the chunked body; then our side shuts.

use std::future::poll_fn;
use std::os::fd::RawFd;
use std::rc::Rc;

use bytes::Bytes;

use crate::hub::{ConnId, WriterWork};
use crate::log;
use crate::server::conn::websocket::transport::WriteHalf;
use crate::server::sys;
use crate::server::worker::Worker;

/// The writer: sleeps until frames are queued, writes each batch with one
/// vectored write, stops after the last chunk (shutting the socket, so
/// the stream's task sees the end) or on teardown. Returns its half when
/// it stops for parking.
pub async fn writer(
    w: Rc<Worker>,
    mut wr: WriteHalf,
    (id, fd): (ConnId, RawFd),
) -> Option<WriteHalf> {
    loop {
        match poll_fn(|cx| w.hub.borrow_mut().poll_writer(id, cx)).await {
            WriterWork::Finish => return None,
            WriterWork::Park => return Some(wr),
            WriterWork::Write => {}
        }
        let mut batch = Vec::new();
        let last = w.hub.borrow_mut().take_batch(id, &mut batch);
        // The hub's accounting is in the frames it queued: the close
        // frame is kept aside and handed back after the write.
        let total: usize = batch.iter().map(Bytes::len).sum();
        let close = last.then(|| batch.pop()).flatten();
        if let Some(frame) = &close {
            batch.push(crate::sse::closing(frame));
        }
        // Boxed, as the WebSocket writer's (the write's state would size
        // every stream's task for it).
        let write = wr.write(batch, || w.hub.borrow_mut().progressed(id));
        let (res, mut frames) = Box::pin(write).await;
        if let Some(frame) = close {
            // Our ending chunk was never charged to the outbox.
            frames.pop();
            frames.push(frame);
        }
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
            // The body is complete: our FIN follows it. The stream's task
            // ends when the peer closes too (or `--close-timeout` later).
            sys::shutdown_write(fd);
            return None;
        }
    }
}
