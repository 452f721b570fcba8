//! What the soak samples after every cycle, and how each quantity is
//! judged. The table of quantities is sans-I/O; [`Probe`] reads them from
//! `/proc`, `/stats` and Redis.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::redis::Redis;
use crate::paper::procs::http_get;
use crate::sys;

/// How a quantity must behave after the warm-up.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Rule {
    /// 0 in every sample: a gauge of live work, and no client is left.
    Zero,
    /// Never above its level at the first judged cycle: counts that come
    /// back exactly when everything is released (descriptors, Redis
    /// subscriptions, keys without a TTL).
    Level,
    /// The median of the last third of the judged cycles at most the
    /// median of the first third × (1 + `rel`) + `abs`: memory, whose
    /// allocators keep and reuse pages, and state that expires on a TTL.
    Median {
        /// Relative tolerance.
        rel: f64,
        /// Absolute tolerance, in the quantity's unit.
        abs: f64,
    },
}

/// One sampled quantity.
#[derive(Debug, Clone, Copy)]
pub struct Quantity {
    /// Its key (JSON, the verdict).
    pub name: &'static str,
    /// Column header.
    pub header: &'static str,
    /// How it is judged.
    pub rule: Rule,
}

const fn q(name: &'static str, header: &'static str, rule: Rule) -> Quantity {
    Quantity { name, header, rule }
}

/// Every sampled quantity, in table order. Tolerances: RSS 5 % + 1 MiB
/// (mimalloc keeps freed pages for reuse, and a page touched once stays
/// resident: the level wanders by a few hundred KiB between cycles with
/// nothing leaking); state bounded by a TTL (histories of channels used
/// once, `--history-ttl`; Redis memory) 25 % + a small constant, since the
/// number of channels still within their TTL at a sample varies with the
/// cycles' timing.
pub const QUANTITIES: [Quantity; 19] = [
    q(
        "rss_kib",
        "RSS KiB",
        Rule::Median {
            rel: 0.05,
            abs: 1024.0,
        },
    ),
    q("fds", "fds", Rule::Level),
    q("connections", "conns", Rule::Zero),
    q("parked_connections", "parked", Rule::Zero),
    q("subscriptions", "subs", Rule::Zero),
    q("channels", "chans", Rule::Zero),
    q("outbound_bytes", "out B", Rule::Zero),
    q("outbound_memory_bytes", "out mem B", Rule::Zero),
    q("inbound_bytes", "in B", Rule::Zero),
    q("presence_members", "members", Rule::Zero),
    q("pusher_connections", "pusher", Rule::Zero),
    q(
        "history_messages",
        "hist msgs",
        Rule::Median {
            rel: 0.25,
            abs: 200.0,
        },
    ),
    q(
        "history_bytes",
        "hist B",
        Rule::Median {
            rel: 0.25,
            abs: 65536.0,
        },
    ),
    q(
        "redis_keys",
        "keys",
        Rule::Median {
            rel: 0.25,
            abs: 8.0,
        },
    ),
    q("redis_keys_without_ttl", "keys no TTL", Rule::Level),
    q("redis_channels", "pubsub ch", Rule::Level),
    q("redis_patterns", "numpat", Rule::Level),
    q("redis_clients", "redis clients", Rule::Level),
    q(
        "redis_memory",
        "redis mem B",
        Rule::Median {
            rel: 0.25,
            abs: 262144.0,
        },
    ),
];

/// Index of a quantity in [`QUANTITIES`].
pub fn index_of(name: &str) -> usize {
    QUANTITIES
        .iter()
        .position(|q| q.name == name)
        .expect("a known quantity")
}

/// The `/stats` gauges, in [`QUANTITIES`] order from `connections`.
const STATS_GAUGES: [&str; 11] = [
    "connections",
    "parked_connections",
    "subscriptions",
    "channels",
    "outbound_bytes",
    "outbound_memory_bytes",
    "inbound_bytes",
    "presence_members",
    "pusher_connections",
    "history_messages",
    "history_bytes",
];

/// One row: the state after a cycle, with all its clients gone.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Cycle number (0: the idle server before the first cycle).
    pub cycle: usize,
    /// Seconds since the server was ready.
    pub t_s: f64,
    /// Clients (connections) the cycle opened.
    pub clients: u64,
    /// Messages its subscribers received.
    pub messages: u64,
    /// Messages acknowledged subscribers (JSON, Pusher) did not receive.
    pub lost: u64,
    /// Whether the JSON resume with `since` was recovered.
    pub recovered: bool,
    /// The most connections seen parked during the cycle.
    pub parked: u64,
    /// Whether the server cut the never-reading subscriber.
    pub slow_cut: bool,
    /// How long the server took to return to idle, in milliseconds.
    pub settle_ms: u64,
    /// Whether it did within `--settle-timeout`.
    pub settled: bool,
    /// The values, in [`QUANTITIES`] order.
    pub values: Vec<u64>,
}

/// Reads the quantities.
pub struct Probe {
    /// The server's address.
    pub addr: SocketAddr,
    /// The server's pid.
    pub pid: u32,
    /// The sampler's own Redis connection (counted in `redis_clients`,
    /// always the same one).
    pub redis: Redis,
}

impl Probe {
    /// Every quantity now, in [`QUANTITIES`] order.
    pub fn read(&mut self) -> Result<Vec<u64>, String> {
        let e = |what: &'static str| move |err: std::io::Error| format!("sampling {what}: {err}");
        // Descriptors first: the /stats request below is one more.
        let fds = std::fs::read_dir(format!("/proc/{}/fd", self.pid))
            .map_err(e("descriptors"))?
            .count() as u64;
        let rss = sys::rss_kib(self.pid).map_err(e("RSS"))?;
        let stats = self.stats()?;
        let mut v = vec![rss, fds];
        for g in STATS_GAUGES {
            let n = stats[g]
                .as_u64()
                .ok_or_else(|| format!("/stats has no `{g}`"))?;
            // `connections` counts the /stats request itself.
            v.push(if g == "connections" {
                n.saturating_sub(1)
            } else {
                n
            });
        }
        let r = &mut self.redis;
        let keys = r.info("keyspace", "keys").map_err(e("Redis"))?;
        let volatile = r.info("keyspace", "expires").map_err(e("Redis"))?;
        v.push(keys);
        v.push(keys.saturating_sub(volatile));
        v.push(r.len(&["PUBSUB", "CHANNELS"]).map_err(e("Redis"))?);
        v.push(r.int(&["PUBSUB", "NUMPAT"]).map_err(e("Redis"))?);
        v.push(r.info("clients", "connected_clients").map_err(e("Redis"))?);
        v.push(r.info("memory", "used_memory").map_err(e("Redis"))?);
        debug_assert_eq!(v.len(), QUANTITIES.len());
        Ok(v)
    }

    /// The server's `/stats`.
    pub fn stats(&self) -> Result<serde_json::Value, String> {
        match http_get(self.addr, "/stats") {
            Ok((200, body)) => serde_json::from_str(&body).map_err(|e| format!("/stats: {e}")),
            Ok((status, _)) => Err(format!("/stats answered {status}")),
            Err(e) => Err(format!("/stats: {e}")),
        }
    }

    /// Polls until every quantity is at its target (`Zero`: 0; `Level`:
    /// at most `levels`; `Median` quantities are not waited for) or
    /// `timeout` passed; returns the last reading, whether it settled and
    /// how long it took.
    pub fn settle(
        &mut self,
        levels: &[u64],
        timeout: Duration,
    ) -> Result<(Vec<u64>, bool, Duration), String> {
        let start = Instant::now();
        loop {
            let v = self.read()?;
            let settled = at_rest(&v, levels);
            if settled || start.elapsed() >= timeout {
                return Ok((v, settled, start.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Whether `v` is at rest: every `Zero` quantity 0, every `Level` one at
/// most its level.
pub fn at_rest(v: &[u64], levels: &[u64]) -> bool {
    QUANTITIES
        .iter()
        .zip(v.iter().zip(levels))
        .all(|(q, (&x, &level))| match q.rule {
            Rule::Zero => x == 0,
            Rule::Level => x <= level,
            Rule::Median { .. } => true,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rest_means_zero_gauges_and_levels_reached() {
        let levels = vec![0u64; QUANTITIES.len()];
        let mut v = levels.clone();
        v[index_of("rss_kib")] = 9000;
        v[index_of("redis_keys")] = 12;
        assert!(at_rest(&v, &levels), "median quantities are not waited for");
        v[index_of("redis_channels")] = 1;
        assert!(!at_rest(&v, &levels));
        let mut higher = levels.clone();
        higher[index_of("redis_channels")] = 1;
        assert!(at_rest(&v, &higher));
        v[index_of("connections")] = 1;
        assert!(!at_rest(&v, &higher));
    }
}
