//! `broadcast`: N subscribers, P publishers on an absolute schedule, every
//! delivery checked for loss, duplication and order, and timed twice: at
//! the kernel's receive timestamp and when the generator parsed it.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::args::{BroadcastOpts, Via};
use super::client::{
    close_frame, receive_loop, spawn_progress, Failures, FrameSink, Link, ReadEnd, Shared, Signal,
    Target, MAX_FRAME,
};
use super::open::{open_all, OpenPlan, OpenProgress};
use super::payload::{Encoding, Stamp};
use super::publish::{self, Blocking, Format, PubConn, PubResult, Publisher, Schedule};
use super::report::{BroadcastReport, GeneratorCpu, LatencySummary, MachineCpu, ServerSample};
use super::stats::{Arrival, Histogram, SeqTracker};
use super::tls;
use super::wire::{pusher_event_data, FastRng};
use crate::engine::{probe, target_of};
use crate::error::BenchError;
use crate::sys;
use corecast::ws::frame::encode_client_frame;
use corecast::ws::OpCode;

/// Delay between the last subscriber being ready and the first publish.
const LEAD_IN: Duration = Duration::from_millis(20);
/// Time allowed for the close handshakes at the end.
const CLOSE_DEADLINE: Duration = Duration::from_secs(2);
/// Upper bound on subscribers × publishers (each pair has a tracker).
const MAX_STREAMS: usize = 4_000_000;

/// Every delivery, accounted for. One per run, shared by all subscriber
/// tasks of the thread.
struct Recorder {
    publishers: usize,
    /// URL index of each subscriber and each publisher: a publisher's
    /// messages are expected only by the subscribers of its URL.
    sub_group: Vec<u32>,
    pub_group: Vec<u32>,
    /// `trackers[sub * publishers + pub]`.
    trackers: Vec<SeqTracker>,
    kernel: Histogram,
    parse: Histogram,
    /// Messages sent from this time on (CLOCK_REALTIME ns) are measured.
    measure_from_ns: u64,
    frames: u64,
    unique: u64,
    unique_measured: u64,
    malformed: u64,
    missing_kernel_ts: u64,
    /// Wake the main task once `unique` reaches this.
    goal: u64,
    ready: usize,
    ended: usize,
    /// Why subscribers ended, by cause.
    ended_by: Failures,
}

impl Recorder {
    fn new(subscribers: usize, publishers: usize, urls: usize) -> Self {
        Recorder {
            publishers,
            sub_group: (0..subscribers).map(|s| (s % urls) as u32).collect(),
            pub_group: (0..publishers).map(|p| (p % urls) as u32).collect(),
            trackers: vec![SeqTracker::default(); subscribers * publishers],
            kernel: Histogram::new(),
            parse: Histogram::new(),
            measure_from_ns: u64::MAX,
            frames: 0,
            unique: 0,
            unique_measured: 0,
            malformed: 0,
            missing_kernel_ts: 0,
            goal: u64::MAX,
            ready: 0,
            ended: 0,
            ended_by: Failures::new(),
        }
    }

    /// One data frame for subscriber `sub`; true when `goal` is reached.
    #[inline]
    fn on_data(
        &mut self,
        sub: usize,
        op: OpCode,
        payload: &[u8],
        kns: Option<u64>,
        now: u64,
    ) -> bool {
        self.frames += 1;
        let enc = match op {
            OpCode::Binary => Encoding::Binary,
            _ => Encoding::Text,
        };
        let Some(stamp) = Stamp::decode(enc, payload) else {
            self.malformed += 1;
            return false;
        };
        let p = stamp.publisher as usize;
        if p >= self.publishers || self.pub_group.get(p) != self.sub_group.get(sub) {
            self.malformed += 1;
            return false;
        }
        let Some(tracker) = self.trackers.get_mut(sub * self.publishers + p) else {
            return false;
        };
        if !matches!(tracker.observe(stamp.seq), Arrival::InOrder | Arrival::Late) {
            return false;
        }
        self.unique += 1;
        if stamp.sent_ns >= self.measure_from_ns {
            self.unique_measured += 1;
            self.parse.record(now.saturating_sub(stamp.sent_ns));
            match kns {
                Some(k) => self.kernel.record(k.saturating_sub(stamp.sent_ns)),
                None => self.missing_kernel_ts += 1,
            }
        }
        self.unique >= self.goal
    }
}

/// One subscriber's view of the recorder.
struct SubSink {
    idx: usize,
    rec: Rc<RefCell<Recorder>>,
    signal: Rc<Signal>,
    ready: bool,
    /// Frames are Pusher events: ready at `subscription_succeeded`, the
    /// stamp in the `data` string.
    pusher: bool,
}

impl SubSink {
    fn set_ready(&mut self) {
        if !self.ready {
            self.ready = true;
            self.rec.borrow_mut().ready += 1;
            self.signal.notify();
        }
    }
}

impl FrameSink for SubSink {
    #[inline]
    fn data(&mut self, op: OpCode, payload: &[u8], kns: Option<u64>, now: u64) {
        let payload = if !self.pusher {
            payload
        } else if !self.ready {
            // `connection_established` comes first, then the answer to
            // the subscribe sent right after the handshake.
            if find(payload, b"pusher_internal:subscription_succeeded") {
                self.set_ready();
            }
            return;
        } else {
            // Other events (`pusher:ping`) carry no string `data`.
            match pusher_event_data(payload) {
                Some(data) => data,
                None => return,
            }
        };
        if self
            .rec
            .borrow_mut()
            .on_data(self.idx, op, payload, kns, now)
        {
            self.signal.notify();
        }
    }

    fn pong(&mut self) {
        // The first pong answers the ping sent after the handshake: the
        // server has read past the upgrade, so it has subscribed us.
        if !self.pusher {
            self.set_ready();
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// What a subscriber sends right after the handshake: a ping whose pong
/// says it is subscribed, or (Pusher) the subscribe to its URL's channel.
fn first_frame(opts: &BroadcastOpts, idx: usize, mask: [u8; 4]) -> BytesMut {
    let mut out = BytesMut::new();
    if opts.sse {
        // A stream says nothing: its `subscribed` event is the sign.
        return out;
    }
    match &opts.pusher {
        Some(_) => {
            let url = &opts.urls[idx % opts.urls.len()];
            let channel = url.channel().unwrap_or_default();
            let sub = serde_json::json!({
                "event": "pusher:subscribe",
                "data": { "channel": channel },
            })
            .to_string();
            encode_client_frame(OpCode::Text, sub.as_bytes(), mask, &mut out);
        }
        None => encode_client_frame(OpCode::Ping, b"ready", mask, &mut out),
    }
    out
}

/// Where subscribers connect: the URLs (Pusher: the app's `/app/{key}`
/// on the URL's server; the URL's channel is subscribed in band).
fn targets(opts: &BroadcastOpts) -> Result<Vec<Target>, BenchError> {
    let pusher_path =
        |key: &str| format!("/app/{key}?protocol=7&client=corecast-bench&version=0.1");
    opts.urls
        .iter()
        .map(|u| {
            target_of(u, &opts.common).map(|t| Target {
                deflate: opts.deflate,
                sse: opts.sse,
                path: opts
                    .pusher
                    .as_ref()
                    .map_or(t.path, |app| pusher_path(&app.key)),
                ..t
            })
        })
        .collect()
}

/// Runs the `broadcast` subcommand.
pub async fn run(opts: BroadcastOpts) -> Result<BroadcastReport, BenchError> {
    let (n, p) = (opts.subscribers, opts.publishers);
    check_limits(&opts)?;
    let enc = match opts.via {
        Via::Ws => Encoding::Binary,
        Via::Http | Via::Pusher => Encoding::Text,
    };
    let targets = targets(&opts)?;
    for t in &targets {
        probe(t, opts.common.connect_timeout).await?;
    }
    // A cluster's instances share every message: one group.
    let groups = if opts.cluster { 1 } else { targets.len() };
    let rec = Rc::new(RefCell::new(Recorder::new(n, p, groups)));
    let signal = Rc::new(Signal::default());
    let progress = Rc::new(OpenProgress::default());
    let sent_so_far = Arc::new(AtomicU64::new(0));
    spawn_broadcast_progress(&opts, &progress, &rec, &sent_so_far);

    let streams = connect_subscribers(&opts, &targets, &rec, &signal, progress).await?;
    let deadline = Instant::now() + opts.common.connect_timeout;
    let all_ready = signal.until_or(deadline, || rec.borrow().ready == n).await;
    if !all_ready {
        let ready = rec.borrow().ready;
        return Err(BenchError::Setup(format!(
            "only {ready} of {n} subscribers answered the readiness ping"
        )));
    }

    let t0 = Instant::now() + LEAD_IN;
    let run_end = t0 + opts.warmup + opts.duration;
    let window_start = t0 + opts.warmup;
    // HTTP publishers connect to the URL's server (`--sse` takes `--via
    // http`): their targets are the WebSocket ones.
    let pub_targets: Vec<Target> = targets
        .iter()
        .map(|t| Target {
            sse: false,
            ..t.clone()
        })
        .collect();
    let pubs = publishers(&opts, &pub_targets, &streams, t0, run_end)?;
    let fmt = Format {
        size: opts.size,
        enc,
        json: opts.json_payload,
    };
    let publisher_thread = publish::spawn(pubs, fmt, sent_so_far)?;
    let measure_from_ns = sys::realtime_ns()
        + window_start
            .saturating_duration_since(Instant::now())
            .as_nanos() as u64;
    rec.borrow_mut().measure_from_ns = measure_from_ns;

    monoio::time::sleep_until(window_start.into()).await;
    let before = Sample::take(&rec, opts.common.server_pid);
    monoio::time::sleep_until(run_end.into()).await;
    let after = Sample::take(&rec, opts.common.server_pid);

    // The thread ends right after its last scheduled send; poll rather
    // than block the receiving runtime on the join.
    while !publisher_thread.is_finished() {
        monoio::time::sleep(Duration::from_millis(1)).await;
    }
    let results = publisher_thread
        .join()
        .map_err(|_| BenchError::Setup("publisher thread panicked".into()))?;
    // A publisher that stopped early (e.g. cut off as a slow consumer) is
    // a result, not a failure to run: its messages so far still count.
    let expected = expected_deliveries(&rec.borrow(), &results);
    rec.borrow_mut().goal = expected;
    let drain_deadline = Instant::now() + opts.drain;
    signal
        .until_or(drain_deadline, || rec.borrow().unique >= expected)
        .await;
    let report = build_report(&opts, &rec.borrow(), &results, expected, &before, &after);
    close_all(&streams, (&rec, &signal), opts.sse).await;
    Ok(report)
}

/// Refuses sizes the receive buffer cannot hold and tracker tables too
/// large to allocate.
fn check_limits(opts: &BroadcastOpts) -> Result<(), BenchError> {
    if opts.size > MAX_FRAME - 16 {
        return Err(BenchError::Setup(format!(
            "--size must be at most {}",
            MAX_FRAME - 16
        )));
    }
    let tls = opts.urls.iter().any(|u| u.tls);
    if tls && (opts.via != Via::Http || opts.pusher.is_some()) {
        return Err(BenchError::Setup(
            "over wss:// publishers need --via http (they publish on connections of their own)"
                .into(),
        ));
    }
    if opts.subscribers.saturating_mul(opts.publishers) > MAX_STREAMS {
        return Err(BenchError::Setup(format!(
            "-n × -p must be at most {MAX_STREAMS}"
        )));
    }
    Ok(())
}

/// Once a second: connections, messages sent and received, and the CPU
/// use of the generator (and of the server, with `--server-pid`).
fn spawn_broadcast_progress(
    opts: &BroadcastOpts,
    progress: &Rc<OpenProgress>,
    rec: &Rc<RefCell<Recorder>>,
    sent: &Arc<AtomicU64>,
) {
    let (op, r, s) = (progress.clone(), rec.clone(), sent.clone());
    let (n, pid) = (opts.subscribers, opts.common.server_pid);
    let last = Cell::new(Sample::take(rec, pid));
    spawn_progress(opts.common.quiet, Instant::now(), move || {
        let now = Sample::take(&r, pid);
        let prev = last.replace(Sample::take(&r, pid));
        let wall = now.at.duration_since(prev.at).as_secs_f64().max(1e-9);
        let pct = |a: Duration, b: Duration| a.saturating_sub(b).as_secs_f64() / wall * 100.0;
        let server = match (now.server_cpu, prev.server_cpu) {
            (Some(a), Some(b)) => format!(", server CPU {:.0}%", pct(a, b)),
            _ => String::new(),
        };
        format!(
            "subscribers {}/{n} (failed {}), sent {}, received {} ({:.0}/s), \
             generator CPU {:.0}%{server}",
            op.opened.get(),
            op.failed.get(),
            s.load(Ordering::Relaxed),
            now.frames,
            (now.frames - prev.frames) as f64 / wall,
            pct(now.cpu, prev.cpu),
        )
    });
}

/// Opens the subscribers, sends each a readiness ping and starts its
/// receive loop; fails unless all of them connect.
async fn connect_subscribers(
    opts: &BroadcastOpts,
    targets: &[Target],
    rec: &Rc<RefCell<Recorder>>,
    signal: &Rc<Signal>,
    progress: Rc<OpenProgress>,
) -> Result<Vec<Rc<Link>>, BenchError> {
    let mut plan = OpenPlan::new(opts.subscribers, targets.to_vec(), &opts.common);
    plan.timestamps = true;
    let opened = open_all(plan, progress).await;
    if !opened.failures.is_empty() {
        return Err(BenchError::Setup(format!(
            "could not open every subscriber: {:?}",
            opened.failures
        )));
    }
    let shared = Shared::for_streams(true, opts.sse);
    let mut rng = FastRng::new(sys::realtime_ns());
    let mut streams = Vec::with_capacity(opts.subscribers);
    for (idx, conn) in opened.conns.into_iter().flatten().enumerate() {
        let first = first_frame(opts, idx, rng.mask());
        conn.link.send(&first).await?;
        streams.push(conn.link.clone());
        let sink = SubSink {
            idx,
            rec: rec.clone(),
            signal: signal.clone(),
            ready: false,
            pusher: opts.pusher.is_some(),
        };
        let (shared, rec, signal) = (shared.clone(), rec.clone(), signal.clone());
        let seed = rng.next_u64();
        monoio::spawn(async move {
            let mut sink = sink;
            let mut rng = FastRng::new(seed);
            let end = receive_loop(&shared, &conn.link, conn.leftover, &mut sink, &mut rng).await;
            if let ReadEnd::Wire(e) = &end {
                eprintln!("corecast-bench: subscriber {idx}: {e}");
            }
            let mut r = rec.borrow_mut();
            r.ended += 1;
            *r.ended_by.entry(end.key()).or_default() += 1;
            drop(r);
            signal.notify();
        });
    }
    Ok(streams)
}

/// The publishers: WebSocket ones send on subscribers 0..P's own
/// connections, HTTP ones get keep-alive connections of their own, both
/// round-robin over the URLs; publisher `j` starts `j / rate` after `t0`.
fn publishers(
    opts: &BroadcastOpts,
    targets: &[Target],
    streams: &[Rc<Link>],
    t0: Instant,
    end: Instant,
) -> Result<Vec<Publisher>, BenchError> {
    let interval = Duration::from_secs_f64(opts.publishers as f64 / opts.rate);
    (0..opts.publishers)
        .map(|j| {
            let sched = Schedule {
                start: t0 + Duration::from_secs_f64(j as f64 / opts.rate),
                interval,
                end,
            };
            let conn = match opts.via {
                Via::Ws => PubConn::Ws(streams[j].fd()),
                Via::Http | Via::Pusher => {
                    let t = &targets[j % targets.len()];
                    let stream = std::net::TcpStream::connect(t.addr)?;
                    stream.set_nodelay(true)?;
                    let authority = t.authority.clone();
                    let channel = opts.urls[j % targets.len()]
                        .channel()
                        .unwrap_or_default()
                        .to_string();
                    match &opts.pusher {
                        Some(app) => PubConn::Pusher {
                            stream: Some(stream),
                            addr: t.addr,
                            authority,
                            channel,
                            app: app.clone(),
                        },
                        None => PubConn::Http {
                            stream: match &t.tls {
                                None => Blocking::Plain(stream),
                                Some(tls) => Blocking::Tls(Box::new(tls::blocking(tls, stream)?)),
                            },
                            authority,
                            // `--publish-query`: the request's query
                            // (e.g. the message's tags).
                            channel: match &opts.publish_query {
                                Some(q) => format!("{channel}?{q}"),
                                None => channel,
                            },
                        },
                    }
                }
            };
            Ok(Publisher {
                id: j as u32,
                sched,
                conn,
            })
        })
        .collect()
}

/// Each publisher's accepted messages times the subscribers of its URL.
fn expected_deliveries(rec: &Recorder, results: &[PubResult]) -> u64 {
    results
        .iter()
        .zip(&rec.pub_group)
        .map(|(r, g)| r.sent * rec.sub_group.iter().filter(|s| *s == g).count() as u64)
        .sum()
}

/// Counters and clocks at one edge of the measured window.
struct Sample {
    at: Instant,
    cpu: Duration,
    frames: u64,
    server_cpu: Option<Duration>,
    cpu_ticks: Vec<(u64, u64)>,
}

impl Sample {
    fn take(rec: &RefCell<Recorder>, pid: Option<u32>) -> Sample {
        Sample {
            at: Instant::now(),
            cpu: sys::process_cpu_time(),
            frames: rec.borrow().frames,
            server_cpu: pid.and_then(|p| sys::process_cpu_time_of(p).ok()),
            cpu_ticks: sys::cpu_ticks().unwrap_or_default(),
        }
    }
}

/// Loss, duplicates and order summed over the (subscriber, publisher)
/// streams that share a group.
fn seq_totals(rec: &Recorder, results: &[PubResult]) -> SeqTotals {
    let p = rec.publishers;
    let mut totals = SeqTotals::default();
    for (i, t) in rec.trackers.iter().enumerate() {
        let (sub, publ) = (i / p, i % p);
        if rec.sub_group.get(sub) == rec.pub_group.get(publ) {
            totals.add(t, results.get(publ).map_or(0, |r| r.sent));
        }
    }
    totals
}

fn build_report(
    opts: &BroadcastOpts,
    rec: &Recorder,
    results: &[PubResult],
    expected: u64,
    before: &Sample,
    after: &Sample,
) -> BroadcastReport {
    let p = rec.publishers;
    let totals = seq_totals(rec, results);
    let wall = after.at.duration_since(before.at).as_secs_f64().max(1e-9);
    let frames = after.frames - before.frames;
    let cpu = (after.cpu.saturating_sub(before.cpu)).as_secs_f64();
    let server = opts.common.server_pid.map(|pid| ServerSample {
        pid,
        cpu_percent: match (before.server_cpu, after.server_cpu) {
            (Some(b), Some(a)) => Some(a.saturating_sub(b).as_secs_f64() / wall * 100.0),
            _ => None,
        },
        ..ServerSample::default()
    });
    let kernel_ok = rec.kernel.count() > 0;
    let machine = machine_cpu(before, after, wall, cpu, server.as_ref());
    BroadcastReport {
        command: "broadcast",
        urls: opts.urls.iter().map(|u| u.display()).collect(),
        via: opts.via.name(),
        subscribers: opts.subscribers,
        publishers: p,
        rate: opts.rate,
        size: opts.size,
        duration_seconds: opts.duration.as_secs_f64(),
        warmup_seconds: opts.warmup.as_secs_f64(),
        sent: results.iter().map(|r| r.sent).sum(),
        publish_rejected: results.iter().map(|r| r.rejected).sum(),
        expected,
        received: rec.frames,
        unique: totals.unique,
        lost: totals.lost,
        duplicates: totals.duplicates,
        out_of_order: totals.out_of_order,
        stale: totals.stale,
        malformed: rec.malformed,
        disconnected: rec.ended,
        disconnect_causes: rec.ended_by.clone(),
        publisher_errors: results.iter().filter_map(|r| r.error.clone()).collect(),
        delivered_per_second: rec.unique_measured as f64 / opts.duration.as_secs_f64().max(1e-9),
        latency_kernel: kernel_ok.then(|| LatencySummary::from_ns(&rec.kernel)),
        latency_parse: LatencySummary::from_ns(&rec.parse),
        kernel_timestamps_note: (!kernel_ok || rec.missing_kernel_ts > 0).then(|| {
            format!(
                "{} measured deliveries came without an SO_TIMESTAMPING stamp",
                rec.missing_kernel_ts
            )
        }),
        publisher_max_lag_us: results
            .iter()
            .map(|r| r.max_lag.as_secs_f64() * 1e6)
            .fold(0.0, f64::max),
        generator: GeneratorCpu {
            cpu_percent: cpu / wall * 100.0,
            frames,
            cpu_us_per_frame: if frames == 0 {
                0.0
            } else {
                cpu * 1e6 / frames as f64
            },
        },
        machine,
        server,
    }
}

/// Whole-machine and per-CPU use between two samples.
fn machine_cpu(
    before: &Sample,
    after: &Sample,
    wall: f64,
    generator_cpu: f64,
    server: Option<&ServerSample>,
) -> Option<MachineCpu> {
    if before.cpu_ticks.len() != after.cpu_ticks.len() || before.cpu_ticks.is_empty() {
        return None;
    }
    let hz = sys::clock_ticks_per_second() as f64;
    let pct: Vec<f64> = before
        .cpu_ticks
        .iter()
        .zip(&after.cpu_ticks)
        .map(|((b, _), (a, _))| a.saturating_sub(*b) as f64 / hz / wall * 100.0)
        .collect();
    let busy = pct[0];
    let server_pct = server.and_then(|s| s.cpu_percent).unwrap_or(0.0);
    Some(MachineCpu {
        busy_percent: busy,
        per_cpu_busy_percent: pct[1..].to_vec(),
        others_percent: (busy - generator_cpu / wall * 100.0 - server_pct).max(0.0),
    })
}

#[derive(Default)]
struct SeqTotals {
    unique: u64,
    lost: u64,
    duplicates: u64,
    out_of_order: u64,
    stale: u64,
}

impl SeqTotals {
    fn add(&mut self, t: &SeqTracker, sent: u64) {
        self.unique += t.unique;
        self.lost += t.lost(sent);
        self.duplicates += t.duplicates;
        self.out_of_order += t.out_of_order;
        self.stale += t.stale;
    }
}

/// Starts the close handshake on every subscriber and waits (bounded) for
/// the server's replies.
async fn close_all(
    streams: &[Rc<Link>],
    (rec, signal): (&Rc<RefCell<Recorder>>, &Signal),
    sse: bool,
) {
    let mut rng = FastRng::new(sys::realtime_ns());
    let frame = close_frame(&mut rng);
    for s in streams {
        // A Server-Sent Events stream ends at its client's FIN (the
        // server then ends it); a WebSocket with the close handshake.
        if sse {
            // SAFETY: shutdown takes no pointers; the fd is the open stream's.
            unsafe { libc::shutdown(s.fd(), libc::SHUT_WR) };
            continue;
        }
        let _ = s.send(&frame).await;
    }
    let n = streams.len();
    let deadline = Instant::now() + CLOSE_DEADLINE;
    signal.until_or(deadline, || rec.borrow().ended >= n).await;
}
