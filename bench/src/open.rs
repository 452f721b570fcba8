//! Opening many connections: a fixed number of attempts in flight, an
//! optional rate limit on an absolute schedule, source addresses
//! round-robin, failures counted by cause.

use std::cell::Cell;
use std::net::Ipv4Addr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::args::Common;
use super::client::{open_ws, ConnectError, Failures, Target, WsConn};
use super::stats::Histogram;
use super::wire::FastRng;

/// How to open a batch of connections.
pub struct OpenPlan {
    /// Connections to open; connection `i` goes to `targets[i % len]`.
    pub count: usize,
    /// Where to connect.
    pub targets: Vec<Target>,
    /// Source addresses, round-robin (empty: kernel's choice).
    pub source_ips: Vec<Ipv4Addr>,
    /// Attempts per second, if limited.
    pub rate: Option<f64>,
    /// Per-attempt deadline.
    pub deadline: Duration,
    /// Attempts in flight.
    pub concurrency: usize,
    /// Switch on kernel receive timestamps.
    pub timestamps: bool,
}

impl OpenPlan {
    /// A plan from the common options.
    pub fn new(count: usize, targets: Vec<Target>, common: &Common) -> Self {
        OpenPlan {
            count,
            targets,
            source_ips: common.source_ips.clone(),
            rate: None,
            deadline: common.connect_timeout,
            concurrency: common.concurrency,
            timestamps: false,
        }
    }
}

/// Live counts, for progress lines.
#[derive(Default)]
pub struct OpenProgress {
    /// Handshakes completed.
    pub opened: Cell<usize>,
    /// Attempts failed.
    pub failed: Cell<usize>,
}

/// What [`open_all`] produced.
pub struct Opened {
    /// Connection `i` (by plan index) or `None` if it failed.
    pub conns: Vec<Option<WsConn>>,
    /// Failures by cause.
    pub failures: Failures,
    /// Connect + handshake time of the successful attempts, ns.
    pub handshake_ns: Histogram,
    /// From the first attempt to the last result.
    pub elapsed: Duration,
}

struct Pool {
    plan: OpenPlan,
    next: Cell<usize>,
    started: Instant,
    progress: Rc<OpenProgress>,
}

type Attempt = (usize, Result<WsConn, ConnectError>, Duration);

/// Opens `plan.count` connections with `plan.concurrency` attempts in
/// flight and waits for every result.
pub async fn open_all(plan: OpenPlan, progress: Rc<OpenProgress>) -> Opened {
    let workers = plan.concurrency.clamp(1, plan.count.max(1));
    let count = plan.count;
    let pool = Rc::new(Pool {
        plan,
        next: Cell::new(0),
        started: Instant::now(),
        progress,
    });
    let handles: Vec<_> = (0..workers)
        .map(|w| monoio::spawn(worker(pool.clone(), w as u64)))
        .collect();
    let mut opened = Opened {
        conns: (0..count).map(|_| None).collect(),
        failures: Failures::new(),
        handshake_ns: Histogram::new(),
        elapsed: Duration::ZERO,
    };
    for h in handles {
        for (i, res, took) in h.await {
            match res {
                Ok(conn) => {
                    opened.handshake_ns.record(took.as_nanos() as u64);
                    opened.conns[i] = Some(conn);
                }
                Err(e) => *opened.failures.entry(e.key()).or_default() += 1,
            }
        }
    }
    opened.elapsed = pool.started.elapsed();
    opened
}

/// Takes the next index until none are left.
async fn worker(pool: Rc<Pool>, seed: u64) -> Vec<Attempt> {
    let mut rng =
        FastRng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ super::sys::realtime_ns());
    let mut out = Vec::new();
    let plan = &pool.plan;
    loop {
        let i = pool.next.get();
        if i >= plan.count {
            return out;
        }
        pool.next.set(i + 1);
        if let Some(rate) = plan.rate {
            let at = pool.started + Duration::from_secs_f64(i as f64 / rate);
            monoio::time::sleep_until(at.into()).await;
        }
        let target = &plan.targets[i % plan.targets.len()];
        let src = match plan.source_ips.len() {
            0 => None,
            n => Some(plan.source_ips[i % n]),
        };
        let t = Instant::now();
        let res = open_ws(target, src, plan.deadline, plan.timestamps, &mut rng).await;
        let counter = if res.is_ok() {
            &pool.progress.opened
        } else {
            &pool.progress.failed
        };
        counter.set(counter.get() + 1);
        out.push((i, res, t.elapsed()));
    }
}
