//! Redis Cluster at the edge: the slot map a link routes by, kept up to
//! date by one task (at start, every [`REFRESH_INTERVAL`] — every
//! 250 ms while a master is unreachable, every second for 30 s after a
//! topology event — and after every connection error, redirect or pushed
//! `sunsubscribe`), and the shards
//! it creates, re-points (a replica promoted in place of a dead master) or
//! retires (a node that lost all its slots). The placement itself is
//! sans-I/O in `crate::redis::cluster`.

use std::future::poll_fn;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use bytes::BytesMut;

use super::conn::{dial, exchange};
use super::link::{Local, RedisLink};
use super::redirect::{forward, hand_on};
use super::shard::Shard;
use crate::log;
use crate::redis::cluster::{Node, SlotMap, SLOTS};
use crate::redis::commands;
use crate::redis::resp::{self, Reply};

/// Topology read at least this often, changes or not.
pub(super) const REFRESH_INTERVAL: Duration = Duration::from_secs(30);
/// Topology read at least this often while a master is unreachable.
const DEGRADED_INTERVAL: Duration = Duration::from_millis(250);
/// Topology read at least this often within [`UNSETTLED_WINDOW`] of a
/// redirect, a moved channel or a connection error.
const UNSETTLED_INTERVAL: Duration = Duration::from_secs(1);
const UNSETTLED_WINDOW: Duration = Duration::from_secs(30);
/// Least time between two reads (a burst of redirects asks for many).
const MIN_REFRESH_GAP: Duration = Duration::from_millis(50);
/// Longest pause between reads while no node answers usefully.
const MAX_RETRY: Duration = Duration::from_secs(5);

/// Starts the connection tasks of a shard.
pub(super) fn spawn_shard(link: &Rc<RedisLink>, shard: &Rc<Shard>, local: &Rc<dyn Local>) {
    monoio::spawn(super::command::keep_up(link.clone(), shard.clone()));
    monoio::spawn(super::subscriber::keep_up(
        link.clone(),
        shard.clone(),
        local.clone(),
    ));
    monoio::spawn(super::canary::run(link.clone(), shard.clone()));
}

/// Keeps the slot map current for as long as the worker runs.
pub(super) async fn run(link: Rc<RedisLink>, local: Rc<dyn Local>) {
    let c = link.cluster.as_ref().expect("cluster mode");
    let mut retry = Duration::from_millis(100);
    let mut logged: Option<String> = None;
    loop {
        // While a master is unreachable, read often: the replica taking
        // over is found within this, so instances re-point at about the
        // same time (well inside `--redis-resume-delay`).
        let degraded = link.live_shards().iter().any(|s| !s.is_up());
        let wait = if degraded {
            DEGRADED_INTERVAL
        } else if c.unsettled(UNSETTLED_WINDOW) {
            // A reshard in progress: its last slots move without telling
            // us (a node that lost them may even accept our commands as a
            // replica now).
            UNSETTLED_INTERVAL
        } else {
            REFRESH_INTERVAL
        };
        let due = monoio::time::timeout(
            wait,
            poll_fn(|cx| {
                if c.take_due() {
                    return Poll::Ready(());
                }
                c.sleep(cx);
                Poll::Pending
            }),
        );
        let _ = due.await;
        match read_topology(&link).await {
            Ok(map) => {
                retry = Duration::from_millis(100);
                logged = None;
                *c.error.borrow_mut() = None;
                link.stats.borrow_mut().topology_refreshes += 1;
                apply(&link, &local, &map);
                monoio::time::sleep(MIN_REFRESH_GAP).await;
            }
            Err(e) => {
                link.stats.borrow_mut().topology_errors += 1;
                if logged.as_deref() != Some(e.as_str()) {
                    log!(Warn, "redis cluster topology unavailable", error = e);
                    logged = Some(e.clone());
                }
                *c.error.borrow_mut() = Some(e);
                // Backoff, but keep trying: the map is needed to route.
                monoio::time::sleep(retry).await;
                retry = (retry * 2).min(MAX_RETRY);
                c.refresh();
            }
        }
    }
}

/// Asks the known masters, then the seeds, for the topology; the
/// first complete map wins. The error names every node's failure.
async fn read_topology(link: &RedisLink) -> Result<SlotMap, String> {
    let c = link.cluster.as_ref().expect("cluster mode");
    let mut nodes: Vec<Node> = link
        .live_shards()
        .iter()
        .map(|s| {
            let u = s.url.borrow();
            Node {
                host: u.host.clone(),
                port: u.port,
            }
        })
        .collect();
    for seed in &c.seeds.seeds {
        if !nodes.contains(seed) {
            nodes.push(seed.clone());
        }
    }
    let mut errors = Vec::new();
    for node in nodes {
        let res = monoio::time::timeout(
            link.connect_timeout + link.command_timeout,
            ask(link, &node),
        )
        .await
        .unwrap_or(Err("timed out".to_string()));
        match res {
            Ok(map) => return Ok(map),
            Err(e) => errors.push(format!("{}: {e}", node.addr())),
        }
    }
    Err(errors.join("; "))
}

/// One node's topology (`CLUSTER SHARDS`, else `CLUSTER SLOTS`), parsed.
async fn ask(link: &RedisLink, node: &Node) -> Result<SlotMap, String> {
    let url = link.cluster.as_ref().expect("cluster").seeds.url_of(node);
    let mut stream = dial(link, node, url.tls).await?;
    let mut buf = BytesMut::new();
    for cmd in commands::handshake(&url, false) {
        if let Reply::Error(e) = exchange(link, &mut stream, &mut buf, cmd).await? {
            return Err(format!("refused our credentials: {e}"));
        }
    }
    // `CLUSTER SHARDS` (Redis 7), else `CLUSTER SLOTS` (deprecated, older).
    let shards = resp::command(&[b"CLUSTER", b"SHARDS"]);
    match exchange(link, &mut stream, &mut buf, shards).await? {
        Reply::Error(e) if e.contains("cluster support disabled") => {
            Err("not in cluster mode (cluster-enabled no): use --redis-url".into())
        }
        Reply::Error(_) => {
            let slots = resp::command(&[b"CLUSTER", b"SLOTS"]);
            match exchange(link, &mut stream, &mut buf, slots).await? {
                Reply::Error(e) => Err(format!("CLUSTER SLOTS: {e}")),
                r => SlotMap::from_cluster_slots(&r, node).map_err(|e| e.to_string()),
            }
        }
        r => SlotMap::from_cluster_shards_for(&r, node, url.tls).map_err(|e| e.to_string()),
    }
}

/// Makes the shards follow `map`: a master keeps its shard (by address);
/// a new master takes over the shard of a vanished one whose slots it now
/// serves (a failover: queue and subscriptions carry over); any other
/// new master gets a new shard; a shard left without slots is retired
/// and hands its queue and channels on.
fn apply(link: &Rc<RedisLink>, local: &Rc<dyn Local>, map: &SlotMap) {
    let c = link.cluster.as_ref().expect("cluster mode");
    let old = c.table();
    let mut shards = link.shards.borrow_mut();
    let addrs: Vec<String> = map.masters.iter().map(Node::addr).collect();
    let mut assign: Vec<Option<usize>> = addrs
        .iter()
        .map(|a| shards.iter().position(|s| s.addr() == *a))
        .collect();
    for (mi, node) in map.masters.iter().enumerate() {
        if assign[mi].is_some() {
            continue;
        }
        // A shard whose master vanished and whose first slot this master
        // now serves: the replica promoted in its place. Else a retired
        // shard is reused, so shards never outnumber the masters ever
        // seen at once.
        let free = |si: usize, s: &Shard| !addrs.contains(&s.addr()) && !assign.contains(&Some(si));
        let first_slot_now = |si: usize| {
            let first = old.iter().position(|&o| o as usize == si)?;
            Some(map.owner(first as u16))
        };
        let heir = shards
            .iter()
            .enumerate()
            .position(|(si, s)| free(si, s) && first_slot_now(si) == Some(mi))
            .or_else(|| {
                let spare = |(si, s): (usize, &Rc<Shard>)| free(si, s) && s.retired.get();
                shards.iter().enumerate().position(spare)
            });
        if let Some(si) = heir {
            log!(
                Info,
                "redis cluster master replaced",
                old = shards[si].addr(),
                new = node.addr()
            );
            shards[si].repoint(c.seeds.url_of(node));
            link.stats.borrow_mut().failovers += 1;
            assign[mi] = Some(si);
            continue;
        }
        let shard = Rc::new(Shard::new(
            c.seeds.url_of(node),
            link.buffers.0,
            link.buffers.1,
        ));
        shards.push(shard.clone());
        assign[mi] = Some(shards.len() - 1);
        spawn_shard(link, &shard, local);
    }
    let table: Vec<u16> = (0..SLOTS)
        .map(|s| assign[map.owner(s)].expect("every master assigned") as u16)
        .collect();
    for (si, shard) in shards.iter().enumerate() {
        let owned = table.iter().filter(|&&o| o as usize == si).count();
        shard.stats.borrow_mut().slots = owned as u64;
        let live = assign.contains(&Some(si));
        if shard.retired.get() == live {
            shard.retired.set(!live);
            shard.cut();
        }
    }
    let retired: Vec<Rc<Shard>> = shards.iter().filter(|s| s.retired.get()).cloned().collect();
    drop(shards);
    c.set_table(table);
    for shard in retired {
        hand_on(link, &shard);
    }
    let (parked, channels) = c.take_parked();
    for (slot, cmd, queued, cache) in parked {
        forward(link, link.route_slot(slot), (cmd, queued, cache), false);
    }
    for ch in channels {
        if let Some(s) = link.route_channel(&ch) {
            s.want(ch, true);
        }
    }
}
