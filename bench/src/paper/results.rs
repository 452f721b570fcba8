//! What `paper` measured, sans-I/O: results read out of the child runs'
//! JSON reports, and the reference's published figures beside them.

use serde::Serialize;
use serde_json::Value;

use crate::report::LatencySummary;

/// The reference evaluation's published figures (Node.js `ws` + Redis on
/// a 1 vCPU / 4 GB VPS, Grafana k6 with 500 virtual users).
pub mod reference {
    /// Virtual users the reference ran.
    pub const CLIENTS: usize = 500;
    /// Concurrent connections it held.
    pub const CONNECTIONS_HELD: usize = 335;
    /// Mean broadcast latency, in-process (C1), ms.
    pub const C1_MEAN_MS: f64 = 23.78;
    /// Mean broadcast latency through Redis (C2), ms.
    pub const C2_MEAN_MS: f64 = 42.05;
    /// Share of latency spikes, percent (its threshold is not published).
    pub const SPIKES_PERCENT: f64 = 1.65;
    /// How much faster cached API responses were, percent (range).
    pub const CACHE_FASTER_PERCENT: (f64, f64) = (39.6, 51.4);
}

/// The server name of corecast's own cells.
pub const CORECAST: &str = "corecast";

/// One cell of the matrix: a setup at a client count.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    /// "corecast", or the name of the baseline measured beside it.
    pub server: String,
    /// "C1", "C2" or "C3".
    pub setup: &'static str,
    /// Subscriber connections (publishers among them).
    pub clients: usize,
    /// corecast instances.
    pub instances: usize,
    /// Publishing clients.
    pub publishers: usize,
    /// Messages per second offered.
    pub rate: f64,
    /// Messages published.
    pub sent: u64,
    /// Deliveries expected (every message to every client).
    pub expected: u64,
    /// Distinct deliveries received.
    pub unique: u64,
    /// Expected deliveries that never arrived.
    pub lost: u64,
    /// Deliveries received twice.
    pub duplicates: u64,
    /// Deliveries out of publish order.
    pub out_of_order: u64,
    /// Clients whose connection ended during the run.
    pub disconnected: u64,
    /// Measured deliveries per second.
    pub delivered_per_second: f64,
    /// "kernel" (SO_TIMESTAMPING receive time) or "parse".
    pub latency_source: String,
    /// Send → receive latency of every measured delivery.
    pub latency: LatencySummary,
    /// Send → the generator parsed the frame.
    pub latency_parse: LatencySummary,
    /// The generator's CPU, percent of one core.
    pub generator_cpu_percent: f64,
    /// The generator's CPU per received frame, µs.
    pub generator_us_per_frame: f64,
    /// Busy share of the server's CPU (corecast, Redis, softirqs), percent.
    pub server_core_busy_percent: Option<f64>,
    /// Busy share of the load CPU (generator, origin), percent.
    pub load_core_busy_percent: Option<f64>,
    /// C3: the HTTP API load that ran beside the broadcast.
    pub api_load: Option<ApiPhase>,
}

/// One run of the HTTP generator against the API.
#[derive(Debug, Clone, Serialize)]
pub struct ApiPhase {
    /// What was measured ("origin direct", "corecast miss", …).
    pub name: String,
    /// Target URL.
    pub url: String,
    /// Completed requests in the window.
    pub requests: u64,
    /// Requests per second.
    pub requests_per_second: f64,
    /// Answers other than 200, and connection errors.
    pub failed: u64,
    /// Request → complete response.
    pub latency: LatencySummary,
    /// Completed requests over the whole run, warm-up included.
    pub requests_total: u64,
    /// Requests the origin saw during the whole run (compare with
    /// `requests_total`).
    pub origin_requests: u64,
    /// The generator's CPU, percent of one core.
    pub generator_cpu_percent: f64,
}

/// The cache comparison: the same API straight from the origin, through
/// corecast with every request a miss, and through corecast warmed.
#[derive(Debug, Clone, Serialize)]
pub struct ApiComparison {
    /// The origin's delay per request, ms.
    pub origin_delay_ms: f64,
    /// Straight to the origin (no cache in the path).
    pub direct: ApiPhase,
    /// Through corecast, every request a different key.
    pub miss: ApiPhase,
    /// Through corecast, one warmed key.
    pub hit: ApiPhase,
    /// How much faster a hit is than the origin, by mean, percent.
    pub hit_faster_percent: f64,
    /// What a miss adds to the origin's latency, by mean, ms.
    pub miss_overhead_ms: f64,
}

impl ApiComparison {
    /// Builds the comparison and its derived figures.
    pub fn new(origin_delay_ms: f64, direct: ApiPhase, miss: ApiPhase, hit: ApiPhase) -> Self {
        let (d, m, h) = (
            direct.latency.mean_us,
            miss.latency.mean_us,
            hit.latency.mean_us,
        );
        ApiComparison {
            origin_delay_ms,
            hit_faster_percent: if d > 0.0 { (d - h) / d * 100.0 } else { 0.0 },
            miss_overhead_ms: (m - d) / 1000.0,
            direct,
            miss,
            hit,
        }
    }
}

/// The machine the run was on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// Online CPUs.
    pub cpus: usize,
    /// `model name` of the first CPU.
    pub cpu_model: String,
    /// Kernel release.
    pub kernel: String,
    /// RLIMIT_NOFILE the clients ran under.
    pub nofile: u64,
}

/// The parameters every cell shared.
#[derive(Debug, Clone, Serialize)]
pub struct Params {
    /// CPU of corecast.
    pub server_cpu: usize,
    /// CPU of Redis.
    pub redis_cpu: usize,
    /// CPU of the generator and the origin.
    pub load_cpu: usize,
    /// corecast instances in C2/C3.
    pub instances: usize,
    /// Deliveries per second asked of every cell.
    pub deliveries_per_second: f64,
    /// Publishing clients.
    pub publishers: usize,
    /// Message size, bytes.
    pub size: usize,
    /// Measured window per cell, s.
    pub duration_seconds: f64,
    /// Lead-in per cell, s.
    pub warmup_seconds: f64,
    /// Origin delay, ms.
    pub origin_delay_ms: f64,
    /// API requests/s during C3 cells.
    pub api_rate: f64,
    /// API keep-alive connections.
    pub api_connections: usize,
    /// Window of each cache comparison phase, s.
    pub api_duration_seconds: f64,
    /// Whether the clients spoke TLS (`paper --tls`).
    pub tls: bool,
}

/// Everything `paper` produced (also written as `paper.json`).
#[derive(Debug, Clone, Serialize)]
pub struct PaperReport {
    /// Always "paper".
    pub command: &'static str,
    /// When it ran (RFC 3339 UTC).
    pub date: String,
    /// How to run it again.
    pub command_line: String,
    /// Where it ran.
    pub machine: Machine,
    /// Shared parameters.
    pub params: Params,
    /// The cache comparison (with C3).
    pub api: Option<ApiComparison>,
    /// The matrix, in run order.
    pub cells: Vec<Cell>,
    /// Files written, relative to the report directory.
    pub files: Vec<String>,
    /// The report directory.
    pub out_dir: String,
}

/// Reads a `broadcast` report. `server_cpu` / `load_cpu` index the
/// per-CPU busy shares.
pub fn cell_from_json(
    setup: &'static str,
    instances: usize,
    v: &Value,
    server_cpu: usize,
    load_cpu: usize,
) -> Result<Cell, String> {
    let kernel = v.get("latency_kernel").filter(|k| !k.is_null());
    let latency_source = if kernel.is_some() { "kernel" } else { "parse" };
    let latency_parse = summary(&v["latency_parse"])?;
    let latency = match kernel {
        Some(k) => summary(k)?,
        None => latency_parse.clone(),
    };
    let per_cpu = v["machine"]["per_cpu_busy_percent"].as_array();
    let busy = |cpu: usize| per_cpu.and_then(|a| a.get(cpu)).and_then(Value::as_f64);
    Ok(Cell {
        server: CORECAST.into(),
        setup,
        clients: int(v, "subscribers")? as usize,
        instances,
        publishers: int(v, "publishers")? as usize,
        rate: float(v, "rate")?,
        sent: int(v, "sent")?,
        expected: int(v, "expected")?,
        unique: int(v, "unique")?,
        lost: int(v, "lost")?,
        duplicates: int(v, "duplicates")?,
        out_of_order: int(v, "out_of_order")?,
        disconnected: int(v, "disconnected")?,
        delivered_per_second: float(v, "delivered_per_second")?,
        latency_source: latency_source.into(),
        latency,
        latency_parse,
        generator_cpu_percent: float(&v["generator"], "cpu_percent")?,
        generator_us_per_frame: float(&v["generator"], "cpu_us_per_frame")?,
        server_core_busy_percent: busy(server_cpu),
        load_core_busy_percent: busy(load_cpu),
        api_load: None,
    })
}

/// Reads an `http` report.
pub fn api_from_json(name: &str, v: &Value, origin_requests: u64) -> Result<ApiPhase, String> {
    let requests = int(v, "requests")?;
    let ok = v["statuses"]["200"].as_u64().unwrap_or(0);
    Ok(ApiPhase {
        name: name.into(),
        url: v["url"].as_str().unwrap_or_default().into(),
        requests,
        requests_per_second: float(v, "requests_per_second")?,
        requests_total: int(v, "requests_total")?,
        failed: requests.saturating_sub(ok) + int(v, "errors")?,
        latency: summary(&v["latency"])?,
        origin_requests,
        generator_cpu_percent: float(v, "generator_cpu_percent")?,
    })
}

fn summary(v: &Value) -> Result<LatencySummary, String> {
    serde_json::from_value(v.clone()).map_err(|e| format!("bad latency summary: {e}"))
}

fn int(v: &Value, key: &str) -> Result<u64, String> {
    v[key]
        .as_u64()
        .ok_or_else(|| format!("report lacks `{key}`"))
}

fn float(v: &Value, key: &str) -> Result<f64, String> {
    v[key]
        .as_f64()
        .ok_or_else(|| format!("report lacks `{key}`"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn latency(mean: f64, p99: f64) -> Value {
        json!({
            "count": 100, "p50_us": mean * 0.9, "p90_us": mean * 1.5, "p99_us": p99,
            "p999_us": p99 * 1.2, "max_us": p99 * 2.0, "mean_us": mean,
            "over_10ms": 0.0, "over_50ms": 0.0, "over_100ms": 0.0,
            "percentiles": [[0.0, mean * 0.1], [0.5, mean * 0.9], [0.99, p99], [1.0, p99 * 2.0]]
        })
    }

    pub(crate) fn broadcast_json(clients: u64, mean: f64, kernel: bool) -> Value {
        json!({
            "subscribers": clients, "publishers": 2, "rate": 200.0, "sent": 10,
            "expected": 10 * clients, "unique": 10 * clients, "lost": 0, "duplicates": 0,
            "out_of_order": 0, "disconnected": 0, "delivered_per_second": 1000.0,
            "latency_kernel": if kernel { latency(mean, mean * 3.0) } else { Value::Null },
            "latency_parse": latency(mean + 50.0, mean * 3.0 + 50.0),
            "generator": {"cpu_percent": 40.0, "cpu_us_per_frame": 3.5, "frames": 10},
            "machine": {"per_cpu_busy_percent": [55.0, 45.0]}
        })
    }

    #[test]
    fn cells_prefer_kernel_timestamps() {
        let c = cell_from_json("C1", 1, &broadcast_json(500, 1000.0, true), 0, 1).unwrap();
        assert_eq!((c.clients, c.expected, c.lost), (500, 5000, 0));
        assert_eq!(c.latency_source, "kernel");
        assert_eq!(c.latency.mean_us, 1000.0);
        assert_eq!(c.latency_parse.mean_us, 1050.0);
        assert_eq!(
            (c.server_core_busy_percent, c.load_core_busy_percent),
            (Some(55.0), Some(45.0))
        );
        let c = cell_from_json("C2", 2, &broadcast_json(5, 200.0, false), 0, 7).unwrap();
        assert_eq!(c.latency_source, "parse");
        assert_eq!(c.latency.mean_us, 250.0);
        assert_eq!(c.load_core_busy_percent, None);
        assert!(cell_from_json("C1", 1, &json!({}), 0, 1).is_err());
    }

    #[test]
    fn api_phases_and_the_comparison() {
        let http = |mean: f64, ok: u64, errors: u64| {
            json!({"url": "http://x/api", "requests": 100, "requests_per_second": 50.0,
                   "requests_total": 150,
                   "statuses": {"200": ok}, "errors": errors,
                   "latency": latency(mean, mean * 2.0), "generator_cpu_percent": 3.0})
        };
        let direct = api_from_json("direct", &http(20_000.0, 100, 0), 100).unwrap();
        let miss = api_from_json("miss", &http(20_500.0, 99, 2), 100).unwrap();
        let hit = api_from_json("hit", &http(100.0, 100, 0), 1).unwrap();
        assert_eq!(miss.failed, 3);
        let c = ApiComparison::new(20.0, direct, miss, hit);
        assert!((c.hit_faster_percent - 99.5).abs() < 1e-9);
        assert!((c.miss_overhead_ms - 0.5).abs() < 1e-9);
    }
}
