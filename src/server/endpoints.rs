//! The plain endpoints: `/healthz`, `/readyz`, `/stats`, `/metrics`, the
//! status page and its feed. Each answer is built from the worker's
//! [`Snapshot`](crate::stats::Snapshot), so they always agree.

use crate::histogram::Histogram;
use crate::http::{self, Route};
use crate::server::mesh::{Asked, Told};
use crate::server::worker::Worker;
use crate::stats::Snapshot;
use crate::ws::OpCode;

/// The internal channel of the status feed (`!` keeps clients out of it).
pub const STATUS_CHANNEL: &str = "!status";

/// The live status page, embedded in the binary.
const STATUS_PAGE: &str = include_str!("status.html");

/// The answer to a plain route, or `None` for routes served elsewhere
/// (publish, cache, upgrades).
pub fn respond(
    w: &Worker,
    route: &Route<'_>,
    keep_alive: bool,
    head_only: bool,
) -> Option<Vec<u8>> {
    let json = |status, body: &str| {
        http::response(
            status,
            "application/json",
            body.as_bytes(),
            keep_alive,
            &[],
            head_only,
        )
    };
    Some(match route {
        Route::Healthz => json(200, r#"{"status":"ok"}"#),
        Route::Stats => json(200, &stats_json(w)),
        Route::Readyz => match w.readiness() {
            Ok(()) => json(200, r#"{"status":"ready"}"#),
            Err(why) => {
                let body = serde_json::json!({ "status": "not ready", "reason": why });
                json(503, &body.to_string())
            }
        },
        Route::Metrics => {
            let ct = "text/plain; version=0.0.4; charset=utf-8";
            let body = metrics_text(w);
            http::response(200, ct, body.as_bytes(), keep_alive, &[], head_only)
        }
        Route::Status => {
            let ct = "text/html; charset=utf-8";
            let page = STATUS_PAGE.as_bytes();
            http::response(200, ct, page, keep_alive, &[], head_only)
        }
        _ => return None,
    })
}

/// `/stats`: every layer's counters plus current gauges, as one object.
/// With hooks on, their counters are `proxy` (per hook) and
/// `proxy_backend_connections_opened`.
pub fn stats_json(w: &Worker) -> String {
    stats_value(&w.snapshot(), w.hooks.is_some()).to_string()
}

/// A snapshot as `/stats` writes it (`hooks`: they are on).
fn stats_value(snap: &Snapshot, hooks: bool) -> serde_json::Value {
    let mut v = serde_json::to_value(snap).expect("stats serialize");
    if hooks {
        v["proxy"] = crate::hooks::stats::json(&snap.proxy);
        v["proxy_backend_connections_opened"] = snap.proxy_backend_connections_opened.into();
    }
    v
}

/// `/metrics`: the Prometheus exposition of this worker.
pub fn metrics_text(w: &Worker) -> String {
    let snap = w.snapshot();
    let gauges = crate::metrics::Gauges {
        connections: snap.connections,
        channels: snap.channels,
        outbound_bytes: w.hub.borrow().total_pending() as u64,
        redis_enabled: w.redis.is_some(),
        ready: w.readiness().is_ok(),
    };
    let mut text = crate::metrics::render(&snap, &gauges);
    if w.hooks.is_some() {
        crate::hooks::stats::render(&mut text, &snap.proxy);
    }
    text
}

/// Longest `/stats` or `/metrics` waits for the other workers' counters;
/// a worker that has not answered by then (its CPU taken) is left out
/// and counted in `workers_unanswered`.
pub const GATHER_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// `/stats` and `/metrics` with several workers: the totals of every
/// worker's counters, and a row (a `worker` label) per worker.
pub async fn respond_all(
    w: &Worker,
    route: &Route<'_>,
    keep_alive: bool,
    head_only: bool,
) -> Vec<u8> {
    let mesh = w.mesh.get().expect("several workers");
    let id = mesh.ask_all(Asked::Counters);
    let gathered = std::future::poll_fn(|cx| mesh.poll_gathered(id, cx));
    let _ = monoio::time::timeout(GATHER_WAIT, gathered).await;
    let told = mesh.take_gathered(id).into_iter();
    let mut parts: Vec<(usize, Snapshot)> = told
        .filter_map(|(i, t)| match t {
            Told::Counters(s) => Some((i, *s)),
            Told::Channels(_) => None,
        })
        .collect();
    parts.push((mesh.me(), w.snapshot()));
    parts.sort_by_key(|p| p.0);
    let unanswered = mesh.workers() - parts.len();
    let snaps: Vec<Snapshot> = parts.iter().map(|p| p.1.clone()).collect();
    let total = crate::stats::merge(&snaps);
    let rows: Vec<(usize, &Snapshot)> = parts.iter().map(|(i, s)| (*i, s)).collect();
    if let Route::Metrics = route {
        let gauges = crate::metrics::Gauges {
            connections: total.connections,
            channels: total.channels,
            outbound_bytes: total.worker.outbound_bytes,
            redis_enabled: w.redis.is_some(),
            ready: w.readiness().is_ok(),
        };
        let mut text = crate::metrics::render(&total, &gauges);
        if w.hooks.is_some() {
            crate::hooks::stats::render(&mut text, &total.proxy);
        }
        crate::metrics::render_workers(&mut text, &rows);
        let ct = "text/plain; version=0.0.4; charset=utf-8";
        return http::response(200, ct, text.as_bytes(), keep_alive, &[], head_only);
    }
    let mut v = stats_value(&total, w.hooks.is_some());
    v["workers"] = rows.iter().map(|(i, s)| worker_row(*i, s)).collect();
    v["workers_unanswered"] = unanswered.into();
    let body = v.to_string();
    http::response(
        200,
        "application/json",
        body.as_bytes(),
        keep_alive,
        &[],
        head_only,
    )
}

/// One worker's row in `/stats`'s `workers`.
fn worker_row(i: usize, s: &Snapshot) -> serde_json::Value {
    serde_json::json!({
        "worker": i,
        "connections": s.connections,
        "channels": s.channels,
        "messages_in": s.worker.messages_in,
        "deliveries": s.worker.deliveries,
        "worker_hops_out": s.worker.worker_hops_out,
        "worker_hops_in": s.worker.worker_hops_in,
        "worker_ring_full": s.worker.worker_ring_full,
        "worker_wakes": s.worker.worker_wakes,
        "worker_connections_handed": s.worker.worker_connections_handed,
    })
}

/// Publishes one status sample to the status page's feed, if anyone
/// watches: counters, gauges, and fan-out / loop-lag quantiles over the
/// interval since `prev` (updated in place).
pub fn publish_status(w: &Worker, prev: &mut (Histogram, Histogram)) {
    let ready = w.readiness().is_ok();
    let mut hub = w.hub.borrow_mut();
    if hub.subscriber_count(STATUS_CHANNEL) == 0 {
        return;
    }
    let fanout = hub.stats.fanout_delay.since(&prev.0);
    let lag = hub.stats.loop_lag.since(&prev.1);
    *prev = (hub.stats.fanout_delay.clone(), hub.stats.loop_lag.clone());
    let ms = |h: &Histogram, q| h.quantile(q).map(|s| s * 1000.0);
    let sample = serde_json::json!({
        "t_ms": w.now_ms(),
        "connections": hub.connection_count(),
        "channels": hub.channel_count(),
        "messages_in": hub.stats.messages_in,
        "deliveries": hub.stats.deliveries,
        "bytes_out": hub.stats.bytes_out,
        "slow_consumer_disconnects": hub.stats.slow_consumer_disconnects,
        "fanout_p50_ms": ms(&fanout, 0.5),
        "fanout_p99_ms": ms(&fanout, 0.99),
        "loop_lag_p99_ms": ms(&lag, 0.99),
        "ready": ready,
    })
    .to_string();
    hub.publish(STATUS_CHANNEL, OpCode::Text, sample.as_bytes(), None);
}
