//! A shard's subscriber connection: subscribed to a channel only while it
//! has local subscribers (the worker's interest log), re-subscribed to all
//! of them first thing after a reconnect, and every message of one read is
//! fanned out before the WebSocket writers run, so they share writes.

use std::cell::Cell;
use std::future::poll_fn;
use std::io;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::task::Poll;
use std::time::Instant;

use bytes::BytesMut;
use monoio::io::AsyncWriteRentExt;
use monoio::net::TcpStream;

use super::conn::{self, read_some, Role};
use super::link::{Local, RedisLink};
use super::{backfill, canary};
use crate::log;
use crate::redis::commands::{self, Interest};
use crate::redis::envelope::Envelope;
use crate::redis::inbound::Event;
use crate::redis::RedisError;
use crate::server::sys;

/// Keeps the subscriber connection up for as long as the worker runs.
pub(super) async fn keep_up(link: Rc<RedisLink>, local: Rc<dyn Local>) {
    conn::keep_up(&link, Role::Subscriber, |stream, buf| {
        session(&link, &local, stream, buf)
    })
    .await
}

/// One connected session: marks the shard's subscriber up, runs it, and
/// marks it down (not restored) when it fails.
async fn session(
    link: &Rc<RedisLink>,
    local: &Rc<dyn Local>,
    stream: TcpStream,
    buf: BytesMut,
) -> RedisError {
    link.shard.health.borrow_mut().sub_connected = true;
    link.shard.sub_fd.set(Some(stream.as_raw_fd()));
    let err = run(link, local, stream, buf).await;
    link.shard.sub_fd.set(None);
    let mut h = link.shard.health.borrow_mut();
    h.sub_connected = false;
    h.restored = false;
    drop(h);
    local.interest_lost();
    let mut h = link.shard.health.borrow_mut();
    // Left set, an old canary would make `/readyz` 200 before one made the
    // trip on the new connection, and after a long outage the canary task
    // would take it for a stale canary and cut the fresh connection.
    h.last_canary = None;
    err
}

/// Subscribes to everything with local subscribers (plus the canary),
/// then delivers messages and follows interest changes until it fails.
async fn run(
    link: &Rc<RedisLink>,
    local: &Rc<dyn Local>,
    mut stream: TcpStream,
    mut buf: BytesMut,
) -> RedisError {
    let channels = local.interest_snapshot();
    let mut keys: Vec<Vec<u8>> = vec![link.canary_key.as_bytes().to_vec()];
    keys.extend(
        channels
            .iter()
            .map(|c| commands::channel_key(&link.prefix, c)),
    );
    let mut restore = Restore {
        pending: keys.len(),
        channels: channels.len(),
    };
    let mut cmds = BytesMut::new();
    commands::subscribe(Interest::Gained, &keys, &mut cmds);
    drop(keys);
    let (res, _) = stream.write_all(cmds.freeze()).await;
    if let Err(e) = res {
        return RedisError::Io(e);
    }
    let fd = stream.as_raw_fd();
    // Two streams over the socket: the writer task owns its own, so the
    // reader's `&stream` (held across `readable`) aliases nothing.
    let mut wr = match sys::dup_stream(&stream) {
        Ok(wr) => wr,
        Err(e) => return RedisError::Io(e),
    };
    let stop = Rc::new(Cell::new(false));
    let writer = monoio::spawn({
        let (link, local, stop) = (link.clone(), local.clone(), stop.clone());
        async move { interest_writer(&link, &*local, &mut wr, &stop).await }
    });
    let err = loop {
        if let Err(e) = deliver_events(link, local, &mut buf, &mut restore) {
            break e;
        }
        match read_some(&stream, &mut buf).await {
            Ok(0) => break RedisError::Io(io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => {}
            Err(e) => break RedisError::Io(e),
        }
    };
    stop.set(true);
    sys::shutdown(fd);
    local.wake_interest();
    let _ = writer.await;
    drop(stream);
    err
}

/// Confirmations still owed for the subscriptions of a (re)connect.
struct Restore {
    pending: usize,
    channels: usize,
}

/// Handles every event in `buf`: all messages of one read are fanned out
/// before any WebSocket writer runs.
fn deliver_events(
    link: &Rc<RedisLink>,
    local: &Rc<dyn Local>,
    buf: &mut BytesMut,
    restore: &mut Restore,
) -> Result<(), RedisError> {
    while let Some(event) = link.inbound.next(buf)? {
        match event {
            Event::Deliver { channel, envelope } => on_message(link, local, &channel, envelope),
            Event::Canary(payload) => canary::arrived(link, &payload),
            Event::Dropped(why) => link.dropped(why),
            Event::Replied {
                channel,
                subscribed,
            } => {
                let name = channel.as_deref().and_then(|c| std::str::from_utf8(c).ok());
                if let Some(name) = name {
                    local.interest_answered(name);
                }
                if subscribed && restore.pending > 0 {
                    restore.pending -= 1;
                    if restore.pending == 0 {
                        restored(link, restore.channels);
                        if link.keeps_history() {
                            // Subscribed again: what was published while the
                            // connection was down is read back from the streams.
                            backfill::spawn(link, local, local.catch_up());
                        }
                    }
                } else if let Some(name) = name.filter(|_| subscribed) {
                    confirmed(link, local, name);
                }
            }
            Event::Other => {}
            Event::Refused(e) => return Err(RedisError::Refused(e)),
        }
    }
    Ok(())
}

/// A channel's first local subscriber made us `SUBSCRIBE`; now that
/// Redis confirmed it, everything published from here on reaches us, and
/// what was published between that subscriber's read of the stream and
/// this moment is read back (history on).
fn confirmed(link: &Rc<RedisLink>, local: &Rc<dyn Local>, channel: &str) {
    if link.keeps_history() {
        backfill::spawn(link, local, local.confirmed(channel));
    }
}

/// Every subscription of a (re)connect is confirmed: publishing may start.
fn restored(link: &RedisLink, channels: usize) {
    let mut h = link.shard.health.borrow_mut();
    h.restored = true;
    h.restored_at = Some(Instant::now());
    drop(h);
    log!(Info, "redis subscriptions restored", channels = channels);
    link.shard.wake_writer();
}

fn on_message(link: &Rc<RedisLink>, local: &Rc<dyn Local>, channel: &[u8], env: Envelope) {
    // Checked by `Inbound`; a second look costs a few bytes.
    let Ok(name) = std::str::from_utf8(channel) else {
        return;
    };
    let skip = env
        .origin
        .filter(|o| o.instance == link.instance)
        .map(|o| o.sender);
    link.stats.borrow_mut().messages_received += 1;
    if env.at.is_some() && link.keeps_history() {
        if let Some(fetch) = local.deliver_at(name, env, skip) {
            backfill::spawn(link, local, vec![fetch]);
        }
        return;
    }
    local.deliver(name, env.opcode, &env.payload, skip);
}

/// Follows the worker's interest log with SUBSCRIBE / UNSUBSCRIBE commands.
async fn interest_writer(
    link: &RedisLink,
    local: &dyn Local,
    wr: &mut TcpStream,
    stop: &Cell<bool>,
) {
    let mut changes = Vec::new();
    loop {
        let go = poll_fn(|cx| {
            if stop.get() {
                return Poll::Ready(false);
            }
            local.poll_interest(cx, &mut changes).map(|()| true)
        })
        .await;
        if !go {
            return;
        }
        let mut out = BytesMut::new();
        for group in changes.chunk_by(|a, b| a.1 == b.1) {
            let interest = if group[0].1 {
                Interest::Gained
            } else {
                Interest::Lost
            };
            let keys: Vec<Vec<u8>> = group
                .iter()
                .map(|(c, _)| commands::channel_key(&link.prefix, c))
                .collect();
            commands::subscribe(interest, &keys, &mut out);
        }
        changes.clear();
        let (res, _) = wr.write_all(out.freeze()).await;
        if res.is_err() {
            return;
        }
    }
}
