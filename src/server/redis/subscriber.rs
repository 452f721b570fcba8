//! A shard's subscriber connection: subscribed to a channel only while it
//! has local subscribers (the worker's interest log, routed to the shard
//! by `router`), re-subscribed to all of them first thing after a
//! reconnect, and every message of one read is fanned out before the
//! WebSocket writers run, so they share writes. In a cluster a channel
//! whose slot moved (Redis pushes `sunsubscribe`, or answers `MOVED`) is
//! subscribed again on its new owner at once.

use std::cell::Cell;
use std::future::poll_fn;
use std::io;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::task::Poll;
use std::time::Instant;

use bytes::BytesMut;

use super::conn::{self, Role};
use super::link::{Local, RedisLink};
use super::shard::Shard;
use super::{backfill, canary, redirect};
use crate::log;
use crate::redis::cluster;
use crate::redis::commands::{self, Interest, Pubsub};
use crate::redis::envelope::Envelope;
use crate::redis::inbound::Event;
use crate::redis::RedisError;
use crate::server::sys;
use crate::server::tls::client::ClientStream;

/// Keeps the subscriber connection up for as long as the worker runs.
pub(super) async fn keep_up(link: Rc<RedisLink>, shard: Rc<Shard>, local: Rc<dyn Local>) {
    conn::keep_up(&link, &shard, Role::Subscriber, |stream, buf| {
        session(&link, &shard, &local, stream, buf)
    })
    .await
}

/// Routes the worker's interest changes to the shards serving them, for
/// as long as the worker runs. A change for a shard that is down waits in
/// its queue and is superseded by its restore.
pub(super) async fn router(link: Rc<RedisLink>, local: Rc<dyn Local>) {
    let mut changes = Vec::new();
    loop {
        poll_fn(|cx| local.poll_interest(cx, &mut changes)).await;
        for (channel, gained) in changes.drain(..) {
            // Topology unknown: the first restore subscribes it.
            let Some(shard) = link.route_channel(&channel) else {
                continue;
            };
            if link.cluster.is_some() && gained && !shard.health.borrow().sub_connected {
                // As with one Redis while it is down: the subscribe is
                // acknowledged now (the shard holds our publishes until its
                // restore has subscribed the channel).
                local.interest_reset(std::slice::from_ref(&channel));
            }
            if shard.want(channel.clone(), gained) {
                // The hub counts one answer per change it handed out.
                local.interest_answered(&channel);
            }
        }
    }
}

/// One connected session: marks the shard's subscriber up, runs it, and
/// marks it down (not restored) when it fails.
async fn session(
    link: &Rc<RedisLink>,
    shard: &Rc<Shard>,
    local: &Rc<dyn Local>,
    stream: ClientStream,
    buf: BytesMut,
) -> RedisError {
    shard.health.borrow_mut().sub_connected = true;
    shard.sub_fd.set(Some(stream.as_raw_fd()));
    let err = run((link, shard), local, stream, buf).await;
    shard.sub_fd.set(None);
    let mut h = shard.health.borrow_mut();
    h.sub_connected = false;
    h.restored = false;
    drop(h);
    match link.cluster {
        None => local.interest_lost(),
        Some(_) => {
            // Only this shard's channels: the others are still served.
            let lost: Vec<Rc<str>> = shard.subscribed.borrow_mut().drain().collect();
            local.interest_reset(&lost);
        }
    }
    let mut h = shard.health.borrow_mut();
    // Left set, an old canary would make `/readyz` 200 before one made the
    // trip on the new connection, and after a long outage the canary task
    // would take it for a stale canary and cut the fresh connection.
    h.last_canary = None;
    err
}

/// Subscribes to everything with local subscribers (plus the canary),
/// then delivers messages and follows interest changes until it fails.
async fn run(
    (link, shard): (&Rc<RedisLink>, &Rc<Shard>),
    local: &Rc<dyn Local>,
    mut stream: ClientStream,
    mut buf: BytesMut,
) -> RedisError {
    let (cmds, mut restore) = restore_commands(link, shard, local);
    if let Err(e) = stream.write_all(cmds.freeze()).await {
        return RedisError::Io(e);
    }
    if restore.pending == 0 {
        restored(shard, 0);
    }
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
        async move { interest_writer(&link, &shard, &mut wr, &stop).await }
    });
    let err = loop {
        if let Err(e) = deliver_events((link, shard), local, &mut buf, &mut restore) {
            break e;
        }
        match stream.read_some(&mut buf).await {
            Ok(0) => break RedisError::Io(io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => {}
            Err(e) => break RedisError::Io(e),
        }
    };
    stop.set(true);
    sys::shutdown(fd);
    shard.wake_subscriber();
    let _ = writer.await;
    drop(stream);
    err
}

/// The subscriptions of a (re)connect: with one Redis every channel with
/// local subscribers plus the canary; in a cluster the channels this
/// shard serves, one `SSUBSCRIBE` per slot. The changes queued while the
/// connection was down are superseded.
fn restore_commands(
    link: &RedisLink,
    shard: &Rc<Shard>,
    local: &Rc<dyn Local>,
) -> (BytesMut, Restore) {
    let mut cmds = BytesMut::new();
    shard.interest.borrow_mut().clear();
    if link.cluster.is_none() {
        let channels = local.interest_snapshot();
        let mut keys: Vec<Vec<u8>> = vec![link.canary_key.as_bytes().to_vec()];
        keys.extend(
            channels
                .iter()
                .map(|c| commands::channel_key(&link.prefix, c)),
        );
        commands::subscribe(Interest::Gained, &keys, &mut cmds);
        let restore = Restore {
            pending: keys.len(),
            channels: channels.len(),
        };
        return (cmds, restore);
    }
    let mine = |name: &str| {
        link.route_channel(name)
            .is_some_and(|s| Rc::ptr_eq(&s, shard))
    };
    let channels = local.interest_resend(&mine);
    sharded_subscribe(link, Interest::Gained, &channels, &mut cmds);
    *shard.subscribed.borrow_mut() = channels.iter().cloned().collect();
    let restore = Restore {
        pending: channels.len(),
        channels: channels.len(),
    };
    (cmds, restore)
}

/// `SSUBSCRIBE`/`SUNSUBSCRIBE` commands for `channels`, one group per
/// slot (never CROSSSLOT), each group bounded.
fn sharded_subscribe(
    link: &RedisLink,
    interest: Interest,
    channels: &[Rc<str>],
    out: &mut BytesMut,
) {
    let keys: Vec<Vec<u8>> = channels
        .iter()
        .map(|c| commands::channel_key_as(Pubsub::Sharded, &link.prefix, c))
        .collect();
    for group in cluster::group_by_slot(keys.iter().map(Vec::as_slice)) {
        commands::subscribe_as(Pubsub::Sharded, interest, &group, out);
    }
}

/// Confirmations still owed for the subscriptions of a (re)connect.
struct Restore {
    pending: usize,
    channels: usize,
}

/// Handles every event in `buf`: all messages of one read are fanned out
/// before any WebSocket writer runs.
fn deliver_events(
    (link, shard): (&Rc<RedisLink>, &Rc<Shard>),
    local: &Rc<dyn Local>,
    buf: &mut BytesMut,
    restore: &mut Restore,
) -> Result<(), RedisError> {
    while let Some(event) = link.inbound.next(buf)? {
        match event {
            Event::Deliver { channel, envelope } => on_message(link, local, &channel, envelope),
            Event::Canary(payload) => canary::arrived(link, shard, &payload),
            Event::Dropped(why) => link.dropped(why),
            Event::Replied {
                channel,
                subscribed,
            } => {
                let name = channel.as_deref().and_then(|c| std::str::from_utf8(c).ok());
                if let Some(name) = name.filter(|_| !subscribed) {
                    if slot_moved(link, shard, name) {
                        continue;
                    }
                }
                if let Some(name) = name {
                    local.interest_answered(name);
                }
                if subscribed && restore.pending > 0 {
                    restore.pending -= 1;
                    if restore.pending == 0 {
                        restored(shard, restore.channels);
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
            Event::Refused(e) => match link.cluster.as_ref().and(cluster::redirect(&e)) {
                Some(r) => redirect::channels_moved(link, shard, &r),
                None => return Err(RedisError::Refused(e)),
            },
        }
    }
    Ok(())
}

/// An `sunsubscribe` for a channel still subscribed here is Redis
/// dropping it (its slot moved to another master): it is subscribed
/// again at once through the current map — a stale map sends it here
/// again, and the `MOVED` that answers names the new owner — and the map
/// is read again.
fn slot_moved(link: &RedisLink, shard: &Shard, name: &str) -> bool {
    let Some(c) = &link.cluster else {
        return false;
    };
    let Some(channel) = shard.subscribed.borrow_mut().take(name) else {
        return false;
    };
    shard.stats.borrow_mut().resubscribes += 1;
    log!(
        Info,
        "redis cluster moved a channel",
        channel = name,
        from = shard.addr()
    );
    c.refresh();
    // Not an interest change the hub counted: nothing to answer if dropped.
    let to = link.route_channel(name);
    to.as_deref().unwrap_or(shard).want(channel, true);
    true
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
fn restored(shard: &Shard, channels: usize) {
    let mut h = shard.health.borrow_mut();
    h.restored = true;
    h.restored_at = Some(Instant::now());
    drop(h);
    log!(
        Info,
        "redis subscriptions restored",
        channels = channels,
        url = shard.url.borrow()
    );
    shard.wake_writer();
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
    local.deliver((name, env.opcode, &env.payload, env.meta.as_ref()), skip);
}

/// Follows the shard's queue of interest changes with (S)SUBSCRIBE /
/// (S)UNSUBSCRIBE commands, and sends the cluster canary's `PING`.
async fn interest_writer(
    link: &RedisLink,
    shard: &Shard,
    wr: &mut ClientStream,
    stop: &Cell<bool>,
) {
    let mut changes = Vec::new();
    let mut ping = None;
    loop {
        let go = poll_fn(|cx| {
            if stop.get() {
                return Poll::Ready(false);
            }
            shard
                .poll_interest(cx, &mut changes, &mut ping)
                .map(|()| true)
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
            if link.cluster.is_none() {
                let keys: Vec<Vec<u8>> = group
                    .iter()
                    .map(|(c, _)| commands::channel_key(&link.prefix, c))
                    .collect();
                commands::subscribe(interest, &keys, &mut out);
                continue;
            }
            let names: Vec<Rc<str>> = group.iter().map(|(c, _)| c.clone()).collect();
            let mut subs = shard.subscribed.borrow_mut();
            for n in &names {
                match interest {
                    Interest::Gained => subs.insert(n.clone()),
                    Interest::Lost => subs.remove(n),
                };
            }
            drop(subs);
            sharded_subscribe(link, interest, &names, &mut out);
        }
        changes.clear();
        if let Some(p) = ping.take() {
            crate::redis::resp::encode_command(&[b"PING", &p], &mut out);
        }
        if wr.write_all(out.freeze()).await.is_err() {
            return;
        }
    }
}
