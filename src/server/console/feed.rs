//! The console's feed: once a second, this instance's reading (a point
//! of the series, its summary — published on the instances channel in
//! Redis mode, sent to the other workers with several workers — and, while someone watches, the whole snapshot published
//! on the feed's internal channel). Bounded: each top list holds
//! [`TOP_CHANNELS`], the instances table [`MAX_INSTANCES`](crate::console::snapshot::MAX_INSTANCES).

use serde_json::{json, Value};

use crate::console::snapshot::{self, ChannelRow, Counters, Instance, Point, Top, TOP_CHANNELS};
use crate::console::{FEED_CHANNEL, INSTANCES_CHANNEL};
use crate::histogram::Histogram;
use crate::server::mesh::Hop;
use crate::server::publish::{route_publish, Via};
use crate::server::worker::Worker;
use crate::server::{formats, sys};
use crate::stats::Snapshot;
use crate::ws::OpCode;

/// One second's reading of this instance.
struct Reading {
    point: Point,
    me: Instance,
}

/// The console's second: reads, records the point, tells the other
/// instances, and feeds whoever watches.
pub fn tick(w: &Worker) {
    if w.cfg.admin_key.is_none() {
        return;
    }
    let snap = w.snapshot();
    let reading = read(w, &snap);
    w.console.borrow_mut().series.push(reading.point);
    if let (None, Some(mesh)) = (&w.redis, w.mesh.get()) {
        // Several workers without Redis: each worker is a row.
        for to in (0..mesh.workers()).filter(|&to| to != mesh.me()) {
            mesh.send(to, Hop::Summary(Box::new(reading.me.clone())));
        }
    }
    if let Some(link) = &w.redis {
        let summary = serde_json::to_vec(&reading.me).expect("instance serialize");
        let mut hub = w.hub.borrow_mut();
        route_publish(
            &mut hub,
            Via::Redis(link),
            INSTANCES_CHANNEL,
            OpCode::Text,
            &summary,
            0,
            false,
        );
    }
    if w.hub.borrow().subscriber_count(FEED_CHANNEL) == 0 {
        return;
    }
    let body = snapshot_json(w, &snap, reading).to_string();
    let mut hub = w.hub.borrow_mut();
    hub.publish(FEED_CHANNEL, OpCode::Text, body.as_bytes(), None);
}

/// Rates since the last reading, quantiles over the last second.
fn read(w: &Worker, snap: &Snapshot) -> Reading {
    let now = Counters {
        at_ms: w.now_ms(),
        messages_in: snap.worker.messages_in,
        deliveries: snap.worker.deliveries,
        bytes_out: snap.worker.bytes_out,
        cpu_ms: sys::cpu_time_ms(),
    };
    let mut console = w.console.borrow_mut();
    let [msg_in, deliveries, bytes_out, cpu] = snapshot::rates(&console.prev, &now);
    console.prev = now;
    let (fanout, lag) = {
        let (f, l) = (&snap.worker.fanout_delay, &snap.worker.loop_lag);
        let since = (f.since(&console.hist_prev.0), l.since(&console.hist_prev.1));
        console.hist_prev = (f.clone(), l.clone());
        since
    };
    let ms = |h: &Histogram, q| h.quantile(q).map(|s| (s * 1000.0) as f32);
    let rss = sys::rss_bytes();
    let point = Point {
        t: crate::auth::unix_now_ms(),
        connections: snap.connections,
        messages_in: msg_in as f32,
        deliveries: deliveries as f32,
        bytes_out: bytes_out as f32,
        fanout_p50: ms(&fanout, 0.5),
        fanout_p99: ms(&fanout, 0.99),
        loop_lag: ms(&lag, 0.99),
        cpu: cpu as f32,
        rss,
    };
    let me = Instance {
        id: instance_id(w),
        connections: snap.connections,
        channels: snap.channels,
        messages_in_per_s: msg_in,
        deliveries_per_s: deliveries,
        bytes_out_per_s: bytes_out,
        fanout_p99_ms: point.fanout_p99.map(f64::from),
        cpu_pct: cpu,
        rss_bytes: rss,
        redis_connected: snap.redis.connected == 1,
        uptime_s: w.now_ms() / 1000,
    };
    Reading { point, me }
}

/// This process's id among the instances (the random tag Pusher socket
/// ids carry, so it matches them).
pub fn instance_id(w: &Worker) -> String {
    w.pusher.borrow().tag.to_string()
}

/// The top channels by subscribers and by messages per second since the
/// last look (a second while someone watches; longer after nobody did),
/// and how many channels there are, internal `!` channels left out; the
/// next count starts.
fn top_channels(w: &Worker) -> (Vec<ChannelRow>, Vec<ChannelRow>, u64) {
    let now = w.now_ms();
    let last = std::mem::replace(&mut w.console.borrow_mut().last_scan_ms, now);
    let secs = (now.saturating_sub(last) / 1000).max(1) as u32;
    let (mut by_subs, mut by_rate) = (Top::new(TOP_CHANNELS), Top::new(TOP_CHANNELS));
    let mut count = 0;
    let mut hub = w.hub.borrow_mut();
    hub.take_channel_activity(|name, subscribers, recent| {
        let rate = recent / secs;
        if !name.starts_with('!') {
            count += 1;
            by_subs.offer(subscribers as u64, name, subscribers, rate);
            by_rate.offer(rate.into(), name, subscribers, rate);
        }
    });
    (by_subs.rows(), by_rate.rows(), count)
}

/// The feed's snapshot: this instance, every instance and their sum, the
/// top channels, connections, Redis, the cache, the console itself.
fn snapshot_json(w: &Worker, snap: &Snapshot, reading: Reading) -> Value {
    let (by_subs, by_rate, channel_count) = top_channels(w);
    let now = w.now_ms();
    let mut instances = w.console.borrow().instances.list(now);
    if !instances.iter().any(|i| i.id == reading.me.id) {
        instances.push(reading.me.clone());
        instances.sort_by(|a, b| a.id.cmp(&b.id));
    }
    let sum = snapshot::sum(&instances);
    let s = &snap.worker;
    json!({
        "t": reading.point.t,
        "instance": reading.me.id,
        "point": reading.point,
        "connections": snap.connections,
        "channel_count": channel_count,
        "channels": by_subs,
        "channels_by_rate": by_rate,
        "instances": instances,
        "sum": sum,
        "kinds": kinds(w, snap),
        "slow_consumers": {
            "disconnects": s.slow_consumer_disconnects,
            "drops": s.slow_consumer_drops,
            "conflated": s.messages_conflated,
        },
        "refusals": refusals(snap),
        "redis": redis(w, snap),
        "cache": cache(w, snap),
        "console": console(w),
    })
}

/// Connections by kind: each wire format (compressed or not), plain
/// HTTP, and across them the compressed and the parked ones.
fn kinds(w: &Worker, snap: &Snapshot) -> Value {
    let mut n = [0u64; 5];
    w.hub.borrow().each_kind(|kind| {
        let i = match kind.format() {
            None => 0,
            Some(formats::PUSHER) => 3,
            Some(formats::SSE) => 4,
            Some(f) if formats::is_json(f) => 2,
            Some(_) => 1,
        };
        n[i] += 1;
    });
    json!({
        "path": n[1],
        "json": n[2],
        "pusher": n[3],
        "sse": n[4],
        "http": n[0],
        "compressed": snap.compression.connections,
        "parked": snap.worker.parked_connections,
    })
}

fn refusals(snap: &Snapshot) -> Value {
    let s = &snap.worker;
    json!({
        "connections": s.connections_rejected,
        "per_ip_connections": s.per_ip_connections_rejected,
        "per_ip_handshakes": s.per_ip_handshakes_limited,
        "handshakes": s.handshake_failures,
        "auth": s.auth_failures,
        "publish_forbidden": s.publish_forbidden,
        "publish_rate_limited": s.publish_rate_limited,
        "inbound_budget": s.inbound_budget_refusals,
        "outbound_budget": s.outbound_budget_exceeded,
        "tls_handshakes": s.tls_handshakes_refused,
        "sse": s.sse_refused,
    })
}

fn redis(w: &Worker, snap: &Snapshot) -> Value {
    let Some(link) = &w.redis else {
        return json!({ "mode": "off" });
    };
    let r = &snap.redis;
    json!({
        "mode": if link.is_cluster() { "cluster" } else { "single" },
        "connected": r.connected == 1,
        "reconnects": r.reconnects,
        "canary_rtt_us": r.canary_rtt_us,
        "publishes_buffered": r.publishes_buffered,
        "publish_buffer_bytes": w.cfg.redis.publish_buffer,
        "publishes_rejected": r.publishes_rejected,
        "redirects": r.redirects,
        "shards": r.shards,
    })
}

fn cache(w: &Worker, snap: &Snapshot) -> Value {
    if w.cache.is_none() {
        return json!({ "enabled": false });
    }
    let c = &snap.cache;
    let looked = c.hits + c.misses;
    let (requests, time_us) = (c.origin_requests, c.origin_time_us);
    let prev = std::mem::replace(&mut w.console.borrow_mut().prev_origin, (requests, time_us));
    let fetched = requests.saturating_sub(prev.0);
    let latency_ms =
        (fetched > 0).then(|| time_us.saturating_sub(prev.1) as f64 / fetched as f64 / 1000.0);
    json!({
        "enabled": true,
        "hits": c.hits,
        "misses": c.misses,
        "hit_ratio": (looked > 0).then(|| c.hits as f64 / looked as f64),
        "bytes_stored": c.bytes_stored,
        "memory_bytes": c.memory_bytes,
        "stale_served": c.stale_served,
        "origin_requests": c.origin_requests,
        "origin_latency_ms": latency_ms,
        "origin_errors": c.origin_errors,
    })
}

fn console(w: &Worker) -> Value {
    let c = w.console.borrow();
    json!({
        "sessions": c.access.lock().sessions.len(),
        "counts": c.counts,
    })
}
