//! The readiness canary: a message published every
//! `--redis-canary-interval` on an instance-private channel. `/readyz` is
//! 200 only while it makes the round trip in time, and a subscriber
//! connection that stops delivering it is cut (a half-open connection
//! would otherwise go unnoticed). In a cluster each shard has its own:
//! a `PING` with the send time on its subscriber connection, answered
//! in order behind everything Redis pushed before it (a channel of ours
//! would move with its slot; the connection's round trip does not).

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::link::RedisLink;
use super::reply::CmdKind;
use super::shard::Shard;
use crate::log;
use crate::redis::resp;
use crate::server::sys;

/// Publishes the canary and cuts a subscriber connection that stopped
/// delivering it.
pub(super) async fn run(link: Rc<RedisLink>, shard: Rc<Shard>) {
    loop {
        monoio::time::sleep(link.canary_interval).await;
        let (up, stale) = {
            let h = shard.health.borrow();
            let up = h.cmd_connected && h.restored;
            let stale = h
                .last_canary
                .is_some_and(|t| t.elapsed() > link.canary_deadline() * 2);
            (up, stale)
        };
        if !up {
            continue;
        }
        if stale {
            if let Some(fd) = shard.sub_fd.get() {
                log!(Warn, "redis canary lost, reconnecting subscriber");
                shard.health.borrow_mut().last_canary = None;
                sys::shutdown(fd);
            }
        }
        let now_us = link.started.elapsed().as_micros().to_string();
        if link.cluster.is_some() {
            *shard.ping_due.borrow_mut() = Some(Bytes::from(now_us));
            shard.wake_subscriber();
            continue;
        }
        let cmd = resp::command(&[b"PUBLISH", link.canary_key.as_bytes(), now_us.as_bytes()]);
        // Full pipeline: the canary is skipped, and `/readyz` will say so.
        let _ = shard.push(cmd, CmdKind::Canary);
    }
}

/// A canary came back: records its round trip.
pub(super) fn arrived(link: &RedisLink, shard: &Shard, payload: &[u8]) {
    let sent_us = std::str::from_utf8(payload)
        .ok()
        .and_then(|s| s.parse::<u64>().ok());
    let Some(sent_us) = sent_us else { return };
    let now_us = link.started.elapsed().as_micros() as u64;
    let rtt = Duration::from_micros(now_us.saturating_sub(sent_us));
    let mut h = shard.health.borrow_mut();
    h.last_canary = Some(Instant::now());
    h.canary_rtt = Some(rtt);
    link.stats.borrow_mut().canary_rtt_us = rtt.as_micros() as u64;
}
