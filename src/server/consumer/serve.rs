//! The worker's end of the consumers' socket pair: each request is
//! checked and routed in arrival order (`publish::route_server`: what a
//! consumer sends in id order is published in that order), then answered
//! when its publish is confirmed (`publish::answer`), the replies written
//! by one task as they come.

use std::cell::RefCell;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Waker;

use bytes::BytesMut;
use monoio::io::AsyncWriteRentExt;

use crate::consumer::bridge::{self, Reply, Request};
use crate::filter::Tags;
use crate::log;
use crate::meta::Meta;
use crate::server::publish;
use crate::server::sys;
use crate::server::worker::Worker;

/// Replies waiting to be written, and the writer's waker.
#[derive(Default)]
struct Out {
    buf: BytesMut,
    waker: Option<Waker>,
    closed: bool,
}

/// Serves the consumers until their thread closes its end.
pub async fn serve(w: Rc<Worker>, socket: StdUnixStream) {
    if let Err(e) = run(w, socket).await {
        log!(Warn, "outbox consumers' bridge closed", error = e);
    }
}

async fn run(w: Rc<Worker>, socket: StdUnixStream) -> io::Result<()> {
    let fd = socket.as_raw_fd();
    // The writer's own descriptor: the reader's `&stream` (held across
    // `readable`) aliases nothing.
    let wr = socket.try_clone()?;
    let stream = monoio::net::UnixStream::from_std(socket)?;
    let out: Rc<RefCell<Out>> = Rc::default();
    let writer = monoio::spawn(write_replies(wr, out.clone()));
    let max = w.cfg.ws.max_message_size + bridge::OVERHEAD;
    let mut buf = BytesMut::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let result = loop {
        let n = match sys::recv_nonblocking(fd, &mut chunk) {
            Ok(0) => break Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                stream.readable(false).await?;
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => break Err(e),
        };
        buf.extend_from_slice(&chunk[..n]);
        loop {
            match bridge::decode::<Request>(&mut buf, max) {
                Ok(Some(req)) => publish_one(&w, req, &out).await,
                Ok(None) => break,
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            }
        }
    };
    {
        let mut o = out.borrow_mut();
        o.closed = true;
        if let Some(wk) = o.waker.take() {
            wk.wake();
        }
    }
    let _ = writer.await;
    result
}

/// Routes one request now; its answer is queued when it is known. Not
/// while the server cannot deliver (Redis unreachable or not yet
/// restored): a row is safer in its table than in the publish buffer,
/// which a crash empties and whose 202 would have the row claimed, and
/// published, again and again.
async fn publish_one(w: &Rc<Worker>, req: Request, out: &Rc<RefCell<Out>>) {
    if let Err(why) = w.readiness() {
        return reply(out, req.seq, 503, Some(why));
    }
    let tags = match req
        .tags
        .as_deref()
        .map(|t| Tags::parse(t.as_bytes()))
        .transpose()
    {
        Ok(t) => t,
        Err(e) => return reply(out, req.seq, 400, Some(e.reason().to_string())),
    };
    let meta = match Meta::with_id(tags, None, false, Some(req.id)) {
        Ok(m) => m.map(Arc::new),
        Err(e) => return reply(out, req.seq, 400, Some(e.reason().to_string())),
    };
    match publish::route_server(w, &req.channel, req.data.as_bytes(), meta).await {
        Err(e) => reply(out, req.seq, e.status, Some(e.message.to_string())),
        Ok(outcome) => {
            let (w, out) = (w.clone(), out.clone());
            monoio::spawn(async move {
                let (status, v) = publish::answer(&w, &req.channel, outcome, true).await;
                let error = v["error"].as_str().map(str::to_string);
                reply(&out, req.seq, status, error);
            });
        }
    }
}

fn reply(out: &Rc<RefCell<Out>>, seq: u64, status: u16, error: Option<String>) {
    let mut o = out.borrow_mut();
    bridge::encode(&Reply { seq, status, error }, &mut o.buf);
    if let Some(wk) = o.waker.take() {
        wk.wake();
    }
}

async fn write_replies(socket: StdUnixStream, out: Rc<RefCell<Out>>) {
    let Ok(mut stream) = monoio::net::UnixStream::from_std(socket) else {
        return;
    };
    loop {
        let next = std::future::poll_fn(|cx| {
            let mut o = out.borrow_mut();
            if !o.buf.is_empty() {
                return std::task::Poll::Ready(Some(o.buf.split().freeze()));
            }
            if o.closed {
                return std::task::Poll::Ready(None);
            }
            o.waker = Some(cx.waker().clone());
            std::task::Poll::Pending
        })
        .await;
        let Some(bytes) = next else { return };
        let (res, _) = stream.write_all(bytes).await;
        if res.is_err() {
            return;
        }
    }
}
