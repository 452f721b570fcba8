//! A shard's command connection: pipelined commands, every command of one
//! event-loop pass written with one vectored write, replies matched in
//! order. While Redis is unreachable (or our subscriptions are not yet
//! restored) commands wait in the shard's byte-bounded pipeline; commands
//! whose reply was lost with the connection are written again after
//! reconnecting (at least once).

use std::cell::Cell;
use std::future::poll_fn;
use std::io;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::BytesMut;

use super::conn::{self, Role};
use super::link::RedisLink;
use super::redirect;
use super::reply::CmdKind;
use super::shard::Shard;
use crate::log;
use crate::redis::cluster;
use crate::redis::resp::{self, Reply};
use crate::redis::{stream, RedisError};
use crate::server::sys;
use crate::server::tls::client::ClientStream;

/// Most commands one vectored write carries.
const MAX_BATCH: usize = 1024;

/// Keeps the command connection up for as long as the worker runs.
pub(super) async fn keep_up(link: Rc<RedisLink>, shard: Rc<Shard>) {
    conn::keep_up(&link, &shard, Role::Command, |stream, buf| {
        session(&link, &shard, stream, buf)
    })
    .await
}

/// One connected session: marks the shard up, runs it until it fails,
/// then marks it down and requeues the commands whose replies were lost.
async fn session(
    link: &Rc<RedisLink>,
    shard: &Rc<Shard>,
    stream: ClientStream,
    buf: BytesMut,
) -> RedisError {
    shard.health.borrow_mut().cmd_connected = true;
    shard.cmd_fd.set(Some(stream.as_raw_fd()));
    link.stats.borrow_mut().connected = 1;
    log!(
        Info,
        "redis command connection up",
        url = shard.url.borrow()
    );
    let err = run(link, shard, stream, buf).await;
    shard.cmd_fd.set(None);
    {
        let mut h = shard.health.borrow_mut();
        h.cmd_connected = false;
        // A canary from before the loss says nothing about the next
        // connection (see `canary`).
        h.last_canary = None;
    }
    let mut stats = link.stats.borrow_mut();
    stats.connected = 0;
    stats.reconnects += 1;
    shard.stats.borrow_mut().reconnects += 1;
    shard.pipeline.borrow_mut().requeue_inflight();
    err
}

/// Reads replies until the connection fails; a writer task sends.
async fn run(
    link: &Rc<RedisLink>,
    shard: &Rc<Shard>,
    mut stream: ClientStream,
    mut buf: BytesMut,
) -> RedisError {
    let fd = stream.as_raw_fd();
    // Two streams over the socket: the writer task owns its own, so the
    // reader's `&stream` (held across `readable`) aliases nothing.
    let mut wr = match stream.dup() {
        Ok(wr) => wr,
        Err(e) => return RedisError::Io(e),
    };
    let stop = Rc::new(Cell::new(false));
    let writer = monoio::spawn({
        let (link, shard, stop) = (link.clone(), shard.clone(), stop.clone());
        async move { writer(&link, &shard, &mut wr, &stop).await }
    });
    let err = loop {
        if let Err(e) = drain_replies(link, shard, &mut buf) {
            break e;
        }
        match monoio::time::timeout(link.command_timeout, stream.read_some(&mut buf)).await {
            Ok(Ok(0)) => break RedisError::Io(io::ErrorKind::UnexpectedEof.into()),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => break RedisError::Io(e),
            // Quiet is fine; quiet while replies are owed is a dead peer.
            Err(_) if shard.pipeline.borrow().has_inflight() => break RedisError::Timeout,
            Err(_) => {}
        }
    };
    stop.set(true);
    sys::shutdown(fd);
    shard.wake_writer();
    let _ = writer.await;
    drop(stream);
    err
}

/// Hands every complete reply in `buf` to the command it answers.
fn drain_replies(link: &RedisLink, shard: &Shard, buf: &mut BytesMut) -> Result<(), RedisError> {
    while let Some(reply) = resp::decode(buf, &link.limits)? {
        if stream::is_noscript(&reply) {
            // Left unanswered: the session ends, the pipeline requeues
            // this command and everything after it, the reconnect loads
            // the scripts again and resends them in order.
            log!(Warn, "redis lost our scripts, reloading");
            return Err(RedisError::NoScript);
        }
        let (cmd, (kind, tries), cache) = shard.pipeline.borrow_mut().on_reply_cmd()?;
        let redirect = match (&link.cluster, &reply) {
            (Some(_), Reply::Error(e)) => cluster::redirect(e),
            _ => None,
        };
        if let Some(r) = redirect {
            redirect::redirected(link, shard, r, (cmd, (kind, tries), cache));
            continue;
        }
        let result = match reply {
            Reply::Error(e) => Err(e.to_string()),
            other => Ok(other),
        };
        match kind {
            CmdKind::Command(waiter) => waiter.complete(result),
            CmdKind::Publish(waiter) => {
                if let Err(e) = &result {
                    link.stats.borrow_mut().publish_errors += 1;
                    log!(Warn, "redis rejected a publish", error = e);
                }
                if let Some(w) = waiter {
                    w.complete(result);
                }
            }
            CmdKind::Canary => {}
        }
    }
    Ok(())
}

/// Writes queued commands, all of one pass in one vectored write — but only
/// once our subscriptions are restored, so this instance never publishes
/// what it could not itself receive.
async fn writer(link: &RedisLink, shard: &Shard, wr: &mut ClientStream, stop: &Cell<bool>) {
    let mut batch = Vec::new();
    loop {
        let go = poll_fn(|cx| poll_work(shard, stop, cx)).await;
        if !go {
            return;
        }
        // After a (re)connect, give the other instances' subscriber
        // connections time to come back before sending what was buffered.
        let settle = shard.health.borrow().restored_at.map(|t| t.elapsed());
        if let Some(left) = settle.and_then(|e| link.resume_delay.checked_sub(e)) {
            monoio::time::sleep(left).await;
            continue;
        }
        shard
            .pipeline
            .borrow_mut()
            .take_unsent(&mut batch, MAX_BATCH);
        let (res, back) = wr.write_batch(std::mem::take(&mut batch)).await;
        if res.is_err() {
            // The reader notices the broken connection and requeues.
            return;
        }
        batch = back;
        batch.clear();
    }
}

fn poll_work(shard: &Shard, stop: &Cell<bool>, cx: &mut Context<'_>) -> Poll<bool> {
    if stop.get() {
        return Poll::Ready(false);
    }
    if shard.health.borrow().restored && shard.pipeline.borrow().has_unsent() {
        return Poll::Ready(true);
    }
    *shard.cmd_waker.borrow_mut() = Some(cx.waker().clone());
    Poll::Pending
}
