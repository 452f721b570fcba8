//! Redis Sentinel with real servers: a master, a replica and
//! `redis-server --sentinel` (tests/redis_support/sentinel.rs). Failovers
//! by `SENTINEL FAILOVER` and by SIGKILL of the master while 1,000
//! messages flow through two instances; a wrong master name, Sentinels
//! that are all down, and a Sentinel that names a replica.

mod common;
mod redis_support;
mod tls_support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::*;
use futures_util::SinkExt;
use redis_support::sentinel::{SentinelSet, MASTER};
use redis_support::*;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

const MESSAGES: usize = 1000;

/// An instance on `url` (a `redis+sentinel://` URL) with history on.
fn sentinel_instance(url: &str) -> TestServer {
    let url = url.to_string();
    TestServer::start(move |cfg| {
        cfg.redis.set_url(&url).expect("a sentinel url");
        cfg.redis.canary_interval = Duration::from_millis(100);
        // As in the cluster failover test: each instance finds the new
        // master on its own; the delay lets the subscribers' instance
        // resubscribe before the publisher's buffered messages go out.
        cfg.redis.resume_delay = Duration::from_secs(1);
        cfg.history.size = 2000;
    })
}

/// What a subscriber saw: messages (offset, index) and gap notices.
#[derive(Debug)]
enum Seen {
    Msg(u64, usize),
    Gap(u64),
}

/// A JSON subscriber of `channel` on `addr`; returns it and the offset
/// it starts after.
async fn subscriber(addr: std::net::SocketAddr, channel: &str) -> (Ws, u64) {
    let mut ws = ws_connect(addr, "/ws").await;
    let req = json!({"op":"subscribe","channel":channel});
    ws.send(Message::text(req.to_string())).await.expect("send");
    let r = next_json(&mut ws).await;
    assert_eq!(r["type"], "subscribed", "{r}");
    (ws, r["offset"].as_u64().expect("an offset"))
}

/// Reads until message `MESSAGES - 1` arrived (or 60 s passed): what was
/// seen, and when each message arrived. Data is `m<index>.`.
async fn collect(mut ws: Ws) -> (Vec<Seen>, Vec<Instant>) {
    let (mut seen, mut at) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let left = deadline - Instant::now();
        let Ok(v) = tokio::time::timeout(left, next_json(&mut ws)).await else {
            break;
        };
        let offset = v["offset"].as_u64().unwrap_or(0);
        match v["type"].as_str() {
            Some("message") => {
                let d = v["data"].as_str().expect("text");
                let i: usize = d[1..d.len() - 1].parse().expect("m<index>.");
                seen.push(Seen::Msg(offset, i));
                at.push(Instant::now());
                if i == MESSAGES - 1 {
                    break;
                }
            }
            Some("gap") => seen.push(Seen::Gap(offset)),
            _ => panic!("unexpected frame {v}"),
        }
    }
    (seen, at)
}

/// Offsets contiguous except where a gap notice said where they go on;
/// first copies in publish order; every message Redis `kept` received,
/// and one missing only if Redis lost it and a gap notice said so.
/// Returns (duplicates, gap notices, missing).
fn check(who: &str, start: u64, seen: &[Seen], kept: &HashSet<usize>) -> (usize, usize, usize) {
    let (mut last, mut got, mut prev) = (start, HashSet::new(), None);
    let (mut dups, mut gaps) = (0, 0);
    for s in seen {
        match *s {
            Seen::Gap(o) => {
                gaps += 1;
                last = o;
            }
            Seen::Msg(o, i) => {
                assert_eq!(
                    o,
                    last + 1,
                    "{who}: offset {o} after {last} without a gap notice"
                );
                last = o;
                if !got.insert(i) {
                    dups += 1;
                    continue;
                }
                assert!(prev < Some(i), "{who}: message {i} after {prev:?}");
                prev = Some(i);
            }
        }
    }
    let missing: Vec<usize> = (0..MESSAGES).filter(|i| !got.contains(i)).collect();
    for i in &missing {
        assert!(
            !kept.contains(i),
            "{who}: message {i} is in Redis but was not received"
        );
    }
    assert!(
        missing.is_empty() || gaps > 0,
        "{who}: {missing:?} lost without a gap notice"
    );
    (dups, gaps, missing.len())
}

/// The messages the channel's stream on `port` holds (its history).
async fn kept_by(port: u16, channel: &str) -> HashSet<usize> {
    let mut c = RespConn::open(port, None).await;
    let key = format!("corecast:!h{{{channel}}}:s");
    let Resp::Array(Some(entries)) = c.cmd(&["XRANGE", &key, "-", "+"]).await else {
        panic!("no stream {key}");
    };
    let mut out = HashSet::new();
    for e in entries {
        let Resp::Array(Some(parts)) = e else {
            continue;
        };
        let Resp::Array(Some(fields)) = &parts[1] else {
            continue;
        };
        let d = String::from_utf8_lossy(match &fields[1] {
            Resp::Bulk(Some(b)) => b,
            _ => continue,
        })
        .into_owned();
        // The envelope ends with the payload, `m<index>.`.
        if let Some(i) = d
            .rsplit_once('m')
            .and_then(|(_, t)| t.strip_suffix('.')?.parse().ok())
        {
            out.insert(i);
        }
    }
    out
}

/// When the first message through the new master arrived, from the
/// trigger: the first after a gap notice (the old master kept
/// delivering until the switch), else the first after the longest pause
/// (a killed master delivers nothing more).
fn first_from_new_master(seen: &[Seen], at: &[Instant], triggered: Instant) -> Duration {
    let mut k = 0;
    let mut after_gap = false;
    for s in seen {
        match s {
            Seen::Gap(_) => after_gap = true,
            Seen::Msg(..) if after_gap => return at[k] - triggered,
            Seen::Msg(..) => k += 1,
        }
    }
    let i = (1..at.len())
        .filter(|&i| at[i] > triggered)
        .max_by_key(|&i| at[i] - at[i - 1])
        .unwrap_or(0);
    at[i].saturating_duration_since(triggered)
}

/// Waits until both instances follow the new master and are ready.
async fn wait_followed(a: &TestServer, b: &TestServer) {
    wait_until("both instances re-pointed and ready", || async {
        let mut ok = true;
        for addr in [a.addr, b.addr] {
            let ready = matches!(readyz(addr).await, Some((200, _)));
            let moved = counter(&stats(addr).await, "redis_failovers") >= 1;
            ok &= ready && moved;
        }
        ok
    })
    .await;
}

#[derive(Clone, Copy, Debug)]
enum Failover {
    /// `SENTINEL FAILOVER`: the Sentinel promotes the replica and demotes
    /// the master (killing its clients' connections).
    Command,
    /// SIGKILL of the master: down after 1 s, then the election.
    Kill,
}

/// 1,000 messages published on B through a failover (paced over about
/// three seconds, the failover after 300); subscribers on A and on B.
async fn through_a_failover(kind: Failover) {
    let mut set = SentinelSet::start().await;
    // A Sentinel nobody listens on comes first: the next one is asked.
    let url = set.url(&[format!("127.0.0.1:{}", free_port())]);
    let (a, b) = (sentinel_instance(&url), sentinel_instance(&url));
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let (sa, start_a) = subscriber(a.addr, "fo").await;
    let (sb, start_b) = subscriber(b.addr, "fo").await;
    let ra = tokio::spawn(collect(sa));
    let rb = tokio::spawn(collect(sb));
    let mut publisher = ws_connect(b.addr, "/ws").await;
    let old = set.master.port;
    let mut triggered = None;
    for i in 0..MESSAGES {
        if i == 300 {
            triggered = Some(Instant::now());
            match kind {
                Failover::Command => {
                    let mut s = RespConn::open(set.sentinel.port, None).await;
                    let r = s.cmd(&["SENTINEL", "FAILOVER", MASTER]).await;
                    assert_eq!(r, Resp::Simple("OK".into()));
                }
                Failover::Kill => set.master.kill(),
            }
        }
        let op = json!({"op":"publish","channel":"fo","data":format!("m{i}.")});
        publisher
            .send(Message::text(op.to_string()))
            .await
            .expect("send");
        // Pacing, not synchronisation: messages flow before, during and
        // after the failover.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let triggered = triggered.expect("failover triggered");
    let new = set.wait_new_master(old).await;
    assert_eq!(new, set.replica.port, "the replica was promoted");
    wait_followed(&a, &b).await;
    let ready = triggered.elapsed();
    let (seen_a, at_a) = ra.await.expect("reader a");
    let (seen_b, _) = rb.await.expect("reader b");
    if std::env::var("SENTINEL_DEBUG").is_ok() {
        eprintln!(
            "A: {seen_a:?}\nB: {seen_b:?}\nstats B: {}",
            stats(b.addr).await
        );
    }
    let kept = kept_by(new, "fo").await;
    let (da, ga, ma) = check("subscriber on A", start_a, &seen_a, &kept);
    let (db, gb, mb) = check("subscriber on B", start_b, &seen_b, &kept);
    let pause = at_a
        .windows(2)
        .filter(|w| w[1] > triggered)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    let through_new = first_from_new_master(&seen_a, &at_a, triggered);
    eprintln!(
        "sentinel failover ({kind:?}): first delivery through the new master {through_new:?} \
         after the trigger, both instances ready {ready:?}; longest delivery pause on A \
         {pause:?}; lost by Redis {}; duplicates {da}/{db}, gap notices {ga}/{gb}, \
         not received {ma}/{mb}",
        MESSAGES - kept.len()
    );
    let s = stats(a.addr).await;
    assert_eq!(counter(&s, "redis_connected"), 1, "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_command_loses_no_message() {
    through_a_failover(Failover::Command).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_is_replaced_without_losing_a_message() {
    through_a_failover(Failover::Kill).await;
}

/// Waits for `/readyz` 503 with a reason containing `want`.
async fn wait_reason(addr: std::net::SocketAddr, want: &str) -> String {
    let mut last = None;
    let deadline = Instant::now() + DEADLINE;
    while Instant::now() < deadline {
        last = readyz(addr).await;
        if let Some((503, body)) = &last {
            let reason = body["reason"].as_str().unwrap_or_default();
            if reason.contains(want) {
                return reason.to_string();
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no 503 saying {want:?}; last: {last:?}");
}

/// A master name the Sentinels do not know, and Sentinels that are all
/// down: not ready, the reason says which and why, the reads are counted,
/// and a publish waits in the buffer instead of going anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_master_name_and_absent_sentinels_are_reported() {
    let set = SentinelSet::start().await;
    let wrong = set.url(&[]).replace(MASTER, "nosuchmaster");
    let srv = sentinel_instance(&wrong);
    let reason = wait_reason(srv.addr, "no master named \"nosuchmaster\"").await;
    assert!(
        reason.contains("no master known for nosuchmaster"),
        "{reason}"
    );
    wait_stat(srv.addr, "redis_sentinel_errors", |n| n >= 2).await;
    let (p1, p2) = (free_port(), free_port());
    let down = format!("redis+sentinel://127.0.0.1:{p1},127.0.0.1:{p2}?master={MASTER}");
    let srv = sentinel_instance(&down);
    let reason = wait_reason(srv.addr, "connection refused").await;
    assert!(
        reason.contains(&format!("127.0.0.1:{p1}")) && reason.contains(&format!("127.0.0.1:{p2}")),
        "names every Sentinel: {reason}"
    );
    let r = post(srv.addr, "/publish/c", b"held").await;
    assert_eq!(r.status, 202, "buffered while no master is known: {r:?}");
    assert_eq!(r.json()["buffered"], true, "{r:?}");
    let s = stats(srv.addr).await;
    assert_eq!(counter(&s, "redis_publishes_buffered"), 1, "{s}");
}

/// A fake Sentinel that names whatever port `answer` holds.
async fn lying_sentinel(answer: std::sync::Arc<std::sync::atomic::AtomicU16>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = l.local_addr().expect("addr").port();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                loop {
                    let n = match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    let req = String::from_utf8_lossy(&buf[..n]).to_lowercase();
                    let port = answer.load(std::sync::atomic::Ordering::SeqCst).to_string();
                    let reply = if req.contains("get-master-addr-by-name") {
                        format!("*2\r\n$9\r\n127.0.0.1\r\n${}\r\n{port}\r\n", port.len())
                    } else {
                        // SUBSCRIBE +switch-master: confirmed, then silence.
                        "*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n".into()
                    };
                    if s.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// A Sentinel that names the replica: `ROLE` refuses it (nothing is
/// subscribed there, `/readyz` says why); once it names the master, the
/// instance goes there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_naming_a_replica_is_refused_by_role() {
    let set = SentinelSet::start().await;
    let answer = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(set.replica.port));
    let liar = lying_sentinel(answer.clone()).await;
    let url = format!("redis+sentinel://127.0.0.1:{liar}?master={MASTER}");
    let srv = sentinel_instance(&url);
    let reason = wait_reason(srv.addr, "not a master").await;
    assert!(reason.contains("redis not connected"), "{reason}");
    // A path-mode subscriber (no history read): acknowledged while down.
    let mut ws = ws_connect(srv.addr, "/ws/lie").await;
    let mut replica = RespConn::open(set.replica.port, None).await;
    assert_eq!(replica.numsub("lie").await, 0, "nothing on the replica");
    answer.store(set.master.port, std::sync::atomic::Ordering::SeqCst);
    wait_readyz(srv.addr, 200).await;
    let mut master = RespConn::open(set.master.port, None).await;
    master.wait_numsub("lie", 1).await;
    let r = post(srv.addr, "/publish/lie", b"hello").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(next_text(&mut ws).await, "hello");
}

/// `rediss+sentinel://`: the Sentinel and the data nodes over TLS, each
/// certificate verified against `--redis-tls-ca`; a client with another
/// CA is refused by the Sentinel already, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_and_the_master_over_tls_are_verified() {
    let pki = tls_support::Pki::new("sentinel");
    let (cert, key) = pki.leaf("redis", "IP:127.0.0.1,DNS:localhost");
    let ca = pki.ca();
    let set = SentinelSet::start_tls((&cert, &key, &ca)).await;
    let url = set.tls_url();
    let srv = TestServer::start(|cfg| {
        cfg.redis.set_url(&url).expect("a sentinel url");
        cfg.redis.tls_ca = Some(ca.clone());
        cfg.redis.canary_interval = Duration::from_millis(100);
    });
    wait_readyz(srv.addr, 200).await;
    let mut ws = ws_connect(srv.addr, "/ws/secure").await;
    let mut master = RespConn::open(set.master.port, None).await;
    master.wait_numsub("secure", 1).await;
    let r = post(srv.addr, "/publish/secure", b"over tls").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(next_text(&mut ws).await, "over tls");
    let s = stats(srv.addr).await;
    assert_eq!(counter(&s, "redis_tls_failures"), 0, "{s}");

    let other = tls_support::Pki::new("sentinel-other");
    let srv = TestServer::start(|cfg| {
        cfg.redis.set_url(&url).expect("a sentinel url");
        cfg.redis.tls_ca = Some(other.ca());
    });
    let named = format!("127.0.0.1:{}:", set.sentinel.tls_port.expect("tls"));
    let reason = wait_reason(srv.addr, &named).await;
    assert!(reason.contains("no master known"), "{reason}");
    assert!(
        reason.contains("certificate") || reason.contains("UnknownIssuer"),
        "{reason}"
    );
    wait_stat(srv.addr, "redis_tls_failures", |n| n >= 1).await;
}
