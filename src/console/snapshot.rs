//! What the console's feed says each second, built from plain numbers:
//! the top channels (bounded), per-second rates from counters, this
//! instance's summary, the table of every instance heard through Redis,
//! and the 15-minute series. The edge reads the hub and `/proc`; this
//! only counts and bounds.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::rc::Rc;

use serde::{Deserialize, Serialize};

/// Channels in each top list (by subscribers, by message rate).
pub const TOP_CHANNELS: usize = 20;
/// Channels a search answers at most.
pub const SEARCH_RESULTS: usize = 50;
/// Instances the table holds (Redis mode); summaries of more are dropped.
pub const MAX_INSTANCES: usize = 64;
/// An instance not heard from for this long leaves the table: 5 s.
pub const INSTANCE_TTL_MS: u64 = 5_000;
/// Points in the series: one a second for 15 minutes.
pub const SERIES_LEN: usize = 900;

/// One channel of a top list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChannelRow {
    /// Its name.
    pub name: String,
    /// Subscribers on this instance.
    pub subscribers: usize,
    /// Messages published to it in the last second (on this instance).
    pub messages_per_s: u32,
}

/// The `n` channels with the largest key offered so far (ties: the
/// smaller name first), offered one at a time: memory for `n` rows
/// whatever the number of channels, and a name is copied only when it
/// enters the list.
#[derive(Debug)]
pub struct Top {
    n: usize,
    heap: BinaryHeap<Reverse<Ranked>>,
}

/// A row in a [`Top`]: ordered by key, then by name reversed (so the
/// smallest entry is the one to drop).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Ranked(u64, Reverse<Rc<str>>, usize, u32);

impl Top {
    /// An empty list of at most `n`.
    pub fn new(n: usize) -> Top {
        Top {
            n,
            heap: BinaryHeap::with_capacity(n + 1),
        }
    }

    /// Offers channel `name` with its subscribers and messages in the last
    /// second, ranked by `key`.
    pub fn offer(&mut self, key: u64, name: &Rc<str>, subscribers: usize, recent: u32) {
        // Checked before the name is cloned: most channels do not enter.
        let enters = |min: &Ranked| key > min.0 || (key == min.0 && **name < *min.1 .0);
        let full = self.heap.len() >= self.n;
        if self.n == 0 || (full && self.heap.peek().is_some_and(|Reverse(min)| !enters(min))) {
            return;
        }
        let row = Ranked(key, Reverse(name.clone()), subscribers, recent);
        self.heap.push(Reverse(row));
        if self.heap.len() > self.n {
            self.heap.pop();
        }
    }

    /// The list, largest first.
    pub fn rows(self) -> Vec<ChannelRow> {
        let mut ranked: Vec<Ranked> = self.heap.into_iter().map(|Reverse(r)| r).collect();
        ranked.sort_by(|a, b| b.cmp(a));
        (ranked.into_iter())
            .map(
                |Ranked(_, Reverse(name), subscribers, messages_per_s)| ChannelRow {
                    name: name.to_string(),
                    subscribers,
                    messages_per_s,
                },
            )
            .collect()
    }
}

/// One instance's summary: what it publishes on the instances channel
/// and what the console lists per instance (and sums).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    /// Its id (the Pusher socket-id tag, unique per process).
    pub id: String,
    /// Connections open.
    pub connections: u64,
    /// Channels with subscribers.
    pub channels: u64,
    /// Messages published per second.
    pub messages_in_per_s: f64,
    /// Deliveries per second.
    pub deliveries_per_s: f64,
    /// Bytes written to clients per second.
    pub bytes_out_per_s: f64,
    /// Fan-out delay's 99th percentile over the last second, ms.
    pub fanout_p99_ms: Option<f64>,
    /// CPU used by the process over the last second, % of one core.
    pub cpu_pct: f64,
    /// Resident memory, bytes.
    pub rss_bytes: u64,
    /// Whether its Redis link is up.
    pub redis_connected: bool,
    /// Seconds since it started.
    pub uptime_s: u64,
}

/// The instances heard through Redis, by id, each with when it was heard.
#[derive(Debug, Default)]
pub struct Instances {
    by_id: HashMap<String, (Instance, u64)>,
}

impl Instances {
    /// Records a summary heard at `now`; a new id beyond
    /// [`MAX_INSTANCES`] is dropped (`false`).
    pub fn heard(&mut self, inst: Instance, now: u64) -> bool {
        self.by_id.retain(|_, (_, at)| now < *at + INSTANCE_TTL_MS);
        if !self.by_id.contains_key(&inst.id) && self.by_id.len() >= MAX_INSTANCES {
            return false;
        }
        self.by_id.insert(inst.id.clone(), (inst, now));
        true
    }

    /// The instances heard within [`INSTANCE_TTL_MS`] of `now`, by id.
    pub fn list(&self, now: u64) -> Vec<Instance> {
        let mut out: Vec<Instance> = (self.by_id.values())
            .filter(|(_, at)| now < *at + INSTANCE_TTL_MS)
            .map(|(i, _)| i.clone())
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }
}

/// The sum over instances (the deployment's totals).
pub fn sum(list: &[Instance]) -> Instance {
    let mut s = Instance {
        id: "sum".into(),
        redis_connected: list.iter().all(|i| i.redis_connected),
        ..Default::default()
    };
    for i in list {
        s.connections += i.connections;
        s.channels += i.channels;
        s.messages_in_per_s += i.messages_in_per_s;
        s.deliveries_per_s += i.deliveries_per_s;
        s.bytes_out_per_s += i.bytes_out_per_s;
        s.cpu_pct += i.cpu_pct;
        s.rss_bytes += i.rss_bytes;
        s.fanout_p99_ms = match (s.fanout_p99_ms, i.fanout_p99_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
    s
}

/// Counters read each second; their differences are the rates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// When read, ms.
    pub at_ms: u64,
    /// Messages published.
    pub messages_in: u64,
    /// Deliveries.
    pub deliveries: u64,
    /// Bytes written to clients.
    pub bytes_out: u64,
    /// CPU time of the process, ms.
    pub cpu_ms: u64,
}

/// Per-second rates between two readings: messages in, deliveries,
/// bytes out, CPU % (0 when no time passed).
pub fn rates(prev: &Counters, now: &Counters) -> [f64; 4] {
    let secs = now.at_ms.saturating_sub(prev.at_ms) as f64 / 1000.0;
    if secs <= 0.0 {
        return [0.0; 4];
    }
    let per = |a: u64, b: u64| b.saturating_sub(a) as f64 / secs;
    [
        per(prev.messages_in, now.messages_in),
        per(prev.deliveries, now.deliveries),
        per(prev.bytes_out, now.bytes_out),
        per(prev.cpu_ms, now.cpu_ms) / 10.0,
    ]
}

/// One point of the series.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Point {
    /// When, ms since the Unix epoch.
    pub t: u64,
    /// Connections.
    pub connections: u64,
    /// Messages in per second.
    pub messages_in: f32,
    /// Deliveries per second.
    pub deliveries: f32,
    /// Bytes out per second.
    pub bytes_out: f32,
    /// Fan-out delay p50 over the second, ms.
    pub fanout_p50: Option<f32>,
    /// Fan-out delay p99 over the second, ms.
    pub fanout_p99: Option<f32>,
    /// Event-loop lag p99 over the second, ms.
    pub loop_lag: Option<f32>,
    /// CPU %.
    pub cpu: f32,
    /// Resident memory, bytes.
    pub rss: u64,
}

/// The last [`SERIES_LEN`] points.
#[derive(Debug, Default)]
pub struct Series {
    points: VecDeque<Point>,
}

impl Series {
    /// Adds a point, dropping the oldest beyond [`SERIES_LEN`].
    pub fn push(&mut self, p: Point) {
        if self.points.len() >= SERIES_LEN {
            self.points.pop_front();
        }
        self.points.push_back(p);
    }

    /// The points, oldest first.
    pub fn points(&self) -> impl Iterator<Item = &Point> {
        self.points.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_lists_are_bounded_and_ordered() {
        let mut top = Top::new(TOP_CHANNELS);
        for i in 0..1000 {
            let name: Rc<str> = Rc::from(format!("c{i:04}"));
            top.offer((i % 97) as u64, &name, i % 97, 0);
        }
        let rows = top.rows();
        assert_eq!(rows.len(), TOP_CHANNELS);
        assert_eq!(rows[0].subscribers, 96);
        assert!(rows
            .windows(2)
            .all(|w| w[0].subscribers >= w[1].subscribers));
        // Ties: the smaller name first (c0096 before c0193, ...).
        assert_eq!(rows[0].name, "c0096");
        let mut few = Top::new(20);
        few.offer(5, &Rc::from("a"), 1, 5);
        few.offer(1, &Rc::from("b"), 2, 1);
        let names: Vec<_> = few.rows().into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["a", "b"]);
        Top::new(0).offer(1, &Rc::from("x"), 1, 1);
    }

    #[test]
    fn instances_expire_are_bounded_and_sum() {
        let mut t = Instances::default();
        let inst = |id: &str, c| Instance {
            id: id.into(),
            connections: c,
            ..Default::default()
        };
        assert!(t.heard(inst("b", 2), 0));
        assert!(t.heard(inst("a", 3), 1000));
        let list = t.list(2000);
        assert_eq!(list.iter().map(|i| &*i.id).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(sum(&list).connections, 5);
        assert_eq!(t.list(INSTANCE_TTL_MS + 1).len(), 1);
        for i in 0..MAX_INSTANCES + 5 {
            t.heard(inst(&format!("x{i}"), 1), 2000);
        }
        assert_eq!(t.list(2000).len(), MAX_INSTANCES);
    }

    #[test]
    fn rates_and_series() {
        let a = Counters::default();
        let b = Counters {
            at_ms: 2000,
            messages_in: 10,
            deliveries: 100,
            bytes_out: 4000,
            cpu_ms: 500,
        };
        assert_eq!(rates(&a, &b), [5.0, 50.0, 2000.0, 25.0]);
        assert_eq!(rates(&b, &b), [0.0; 4]);
        let mut s = Series::default();
        for t in 0..SERIES_LEN as u64 + 10 {
            s.push(Point {
                t,
                ..Default::default()
            });
        }
        assert_eq!(s.points().count(), SERIES_LEN);
        assert_eq!(s.points().next().unwrap().t, 10);
    }
}
