//! Redis Sentinel at the edge: which master the link's one shard points
//! at, kept current by two tasks. `run` asks the Sentinels, in order, for
//! the master (at start; every 250 ms while the shard is down or no
//! master is known; every 10 s otherwise; at once after a connection
//! error, a `ROLE` that is not `master`, or a `+switch-master`) and
//! re-points the shard when the answer changes. `watch` keeps a
//! subscription to `+switch-master` on one Sentinel, so a failover is
//! followed as soon as the Sentinels announce it. The URL and the
//! replies are read sans-I/O in `crate::redis::sentinel`.
//!
//! Until a master is known the shard is retired (no connection is
//! opened): publishes wait in its queue (byte-bounded as always) and
//! `/readyz` says why no master is known.

use std::future::poll_fn;
use std::rc::Rc;
use std::time::Duration;

use bytes::BytesMut;

use super::conn::{dial, exchange, read_reply};
use super::link::RedisLink;
use super::sentinels::Sentinels;
use super::shard::Shard;
use crate::log;
use crate::redis::cluster::Node;
use crate::redis::resp::{self, PubSubEvent, Reply};
use crate::redis::sentinel::{self, MasterAnswer, SentinelUrl};

/// The master is asked for at least this often, failovers or not.
const REFRESH_INTERVAL: Duration = Duration::from_secs(10);
/// ... and this often while the shard is down or no master is known: a
/// promoted replica is found within this of the Sentinels naming it.
const DEGRADED_INTERVAL: Duration = Duration::from_millis(250);
/// Least time between two reads (a burst of errors asks for many).
const MIN_GAP: Duration = Duration::from_millis(50);
/// Pause before the `+switch-master` subscription tries the next
/// Sentinel.
const WATCH_RETRY: Duration = Duration::from_secs(1);
/// A `+switch-master` subscription silent this long is pinged; silent
/// for two, it is dropped (a Sentinel gone without a FIN).
const WATCH_IDLE: Duration = Duration::from_secs(15);

/// Keeps the shard on the master the Sentinels name, for as long as the
/// worker runs.
pub(super) async fn run(link: Rc<RedisLink>) {
    let s = link.sentinel.as_ref().expect("sentinel mode");
    let shard = link.shards.borrow()[0].clone();
    let mut logged: Option<String> = None;
    loop {
        let wait = if shard.retired.get() || !shard.is_up() {
            DEGRADED_INTERVAL
        } else {
            REFRESH_INTERVAL
        };
        let _ = monoio::time::timeout(wait, poll_fn(|cx| s.poll_due(cx))).await;
        match ask_sentinels(&link, &s.url).await {
            Ok(node) => {
                logged = None;
                *s.error.borrow_mut() = None;
                follow(&link, &shard, &node);
            }
            Err(e) => {
                link.stats.borrow_mut().sentinel_errors += 1;
                if logged.as_deref() != Some(e.as_str()) {
                    log!(Warn, "redis sentinel: no master known", error = e);
                    logged = Some(e.clone());
                }
                *s.error.borrow_mut() = Some(e);
            }
        }
        monoio::time::sleep(MIN_GAP).await;
    }
}

/// Points the shard at `node` if it is not there yet: the first master
/// found, or a failover (counted).
fn follow(link: &RedisLink, shard: &Shard, node: &Node) {
    let first = shard.retired.get();
    if !first && shard.addr() == node.addr() {
        return;
    }
    let url = link
        .sentinel
        .as_ref()
        .expect("sentinel mode")
        .url
        .data_at(node);
    if first {
        log!(Info, "redis sentinel: master found", master = node.addr());
    } else {
        log!(
            Info,
            "redis sentinel: following the new master",
            old = shard.addr(),
            new = node.addr()
        );
        link.stats.borrow_mut().failovers += 1;
    }
    shard.repoint(url);
    shard.retired.set(false);
}

/// Asks each Sentinel in turn; the first address wins. The error names
/// every Sentinel's failure.
async fn ask_sentinels(link: &RedisLink, url: &SentinelUrl) -> Result<Node, String> {
    let mut errors = Vec::new();
    for node in &url.sentinels {
        let res = monoio::time::timeout(
            link.connect_timeout + link.command_timeout,
            ask(link, url, node),
        )
        .await
        .unwrap_or(Err("timed out".to_string()));
        match res {
            Ok(master) => return Ok(master),
            Err(e) => errors.push(format!("{}: {e}", node.addr())),
        }
    }
    Err(errors.join("; "))
}

/// One Sentinel's answer.
async fn ask(link: &RedisLink, url: &SentinelUrl, node: &Node) -> Result<Node, String> {
    let mut stream = dial(link, node, url.data.tls).await?;
    let mut buf = BytesMut::new();
    if let Some(auth) = url.sentinel_handshake() {
        if let Reply::Error(e) = exchange(link, &mut stream, &mut buf, auth).await? {
            return Err(format!("refused our Sentinel credentials: {e}"));
        }
    }
    match sentinel::master_answer(&exchange(link, &mut stream, &mut buf, url.ask_master()).await?) {
        MasterAnswer::At(master) => Ok(master),
        MasterAnswer::Unknown => Err(format!("no master named {:?}", url.master)),
        MasterAnswer::Failed(e) => Err(e),
    }
}

/// Keeps a `+switch-master` subscription on one Sentinel (the first that
/// accepts, in order) and asks `run` for a read on every switch of our
/// master, and whenever it (re)subscribes: a switch may have come while
/// it was away.
pub(super) async fn watch(link: Rc<RedisLink>) {
    let s = link.sentinel.as_ref().expect("sentinel mode");
    loop {
        for node in &s.url.sentinels {
            let err = subscribed(&link, s, node).await;
            log!(
                Debug,
                "redis sentinel: +switch-master subscription lost",
                sentinel = node.addr(),
                error = err
            );
            monoio::time::sleep(WATCH_RETRY).await;
        }
    }
}

/// One Sentinel's `+switch-master` subscription, until it fails.
async fn subscribed(link: &RedisLink, s: &Sentinels, node: &Node) -> String {
    let open = async {
        let mut stream = dial(link, node, s.url.data.tls).await?;
        let mut buf = BytesMut::new();
        if let Some(auth) = s.url.sentinel_handshake() {
            if let Reply::Error(e) = exchange(link, &mut stream, &mut buf, auth).await? {
                return Err(format!("refused our Sentinel credentials: {e}"));
            }
        }
        let sub = resp::command(&[b"SUBSCRIBE", sentinel::SWITCH_MASTER.as_bytes()]);
        stream.write_all(sub).await.map_err(|e| e.to_string())?;
        Ok((stream, buf))
    };
    let (mut stream, mut buf) =
        match monoio::time::timeout(link.connect_timeout + link.command_timeout, open).await {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => return e,
            Err(_) => return "timed out".into(),
        };
    s.refresh();
    let mut pinged = false;
    loop {
        let reply = match monoio::time::timeout(WATCH_IDLE, read_reply(link, &mut stream, &mut buf))
            .await
        {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return e.to_string(),
            Err(_) if pinged => return "silent after a PING".into(),
            Err(_) => {
                pinged = true;
                let ping = resp::command(&[b"PING"]);
                if let Err(e) = stream.write_all(ping).await {
                    return e.to_string();
                }
                continue;
            }
        };
        pinged = false;
        match resp::pubsub_event(reply) {
            Ok(PubSubEvent::Message { payload, .. }) => {
                if let Some(to) = sentinel::switched_to(&payload, &s.url.master) {
                    log!(Info, "redis sentinel: +switch-master", new = to.addr());
                    s.refresh();
                }
            }
            Ok(PubSubEvent::Error(e)) => return e,
            Ok(_) => {}
            Err(e) => return e.to_string(),
        }
    }
}
