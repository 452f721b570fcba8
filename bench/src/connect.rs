//! `connect`: open N WebSockets, hold them (answering pings), close them,
//! and say what it cost the server.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::args::ConnectOpts;
use super::client::{
    close_frame, receive_loop, spawn_progress, FrameSink, ReadEnd, Shared, Signal, WsConn,
};
use super::open::{open_all, OpenPlan, OpenProgress};
use super::report::{ConnectReport, LatencySummary, ServerSample};
use super::wire::FastRng;
use crate::engine::{probe, target_of};
use crate::error::BenchError;
use crate::sys;
use corecast::ws::OpCode;

/// Time allowed for the close handshakes at the end.
const CLOSE_DEADLINE: Duration = Duration::from_secs(5);

/// Runs the `connect` subcommand.
pub async fn run(opts: ConnectOpts) -> Result<ConnectReport, BenchError> {
    let target = target_of(&opts.url, &opts.common)?;
    let pid = opts.common.server_pid;
    // Both resident sizes: all of it, and its anonymous part.
    let rss = move || pid.and_then(|p| Some((sys::rss_kib(p).ok()?, sys::rss_anon_kib(p).ok()?)));
    // Before the probe: a fresh server's size is before its first
    // connection (the probe's accept already maps the accept path's code).
    let rss_before = rss();
    probe(&target, opts.common.connect_timeout).await?;
    let progress = Rc::new(OpenProgress::default());
    let hold = Rc::new(Hold::default());
    let started = Instant::now();
    {
        let (p, h, n) = (progress.clone(), hold.clone(), opts.n);
        spawn_progress(opts.common.quiet, started, move || {
            format!(
                "connected {}/{n}, failed {}, open {}",
                p.opened.get(),
                p.failed.get(),
                h.alive.get()
            )
        });
    }
    let mut plan = OpenPlan::new(opts.n, vec![target], &opts.common);
    plan.rate = opts.rate;
    let opened = open_all(plan, progress).await;
    let rss_connected = rss();
    let connected = opened.conns.iter().flatten().count();

    let shared = Shared::new(false);
    let streams: Vec<_> = opened
        .conns
        .into_iter()
        .flatten()
        .map(|conn| {
            let link = conn.link.clone();
            monoio::spawn(hold_one(shared.clone(), conn, hold.clone()));
            link
        })
        .collect();
    hold.alive.set(streams.len());
    let held_from = Instant::now();
    monoio::time::sleep(opts.hold).await;
    let held_seconds = held_from.elapsed().as_secs_f64();
    let rss_held = rss();

    hold.closing.set(true);
    let mut rng = FastRng::new(sys::realtime_ns());
    let frame = close_frame(&mut rng);
    for s in &streams {
        // A close frame is 8 bytes (one small record over TLS) on an idle
        // socket: it always fits.
        let _ = s.send_now(&frame);
    }
    drop(streams);
    let deadline = Instant::now() + CLOSE_DEADLINE;
    hold.signal
        .until_or(deadline, || hold.alive.get() == 0)
        .await;

    let rss = [rss_before, rss_connected, rss_held];
    let server = pid.map(|pid| server_sample(pid, rss, connected));
    let open_seconds = opened.elapsed.as_secs_f64();
    Ok(ConnectReport {
        command: "connect",
        url: opts.url.display(),
        requested: opts.n,
        connected,
        failed: opts.n - connected,
        failures: opened.failures,
        open_seconds,
        open_rate: connected as f64 / open_seconds.max(1e-9),
        handshake: LatencySummary::from_ns(&opened.handshake_ns),
        held_seconds,
        dropped_during_hold: hold.dropped.get(),
        closed_clean: hold.clean.get(),
        server,
    })
}

/// The server's memory before the connects, with them open and after the
/// hold, and what one connection cost at the end of the hold.
fn server_sample(pid: u32, rss: [Option<(u64, u64)>; 3], connected: usize) -> ServerSample {
    let [before, rss_connected, held] = rss;
    let (rss_before, rss_held) = (before.map(|r| r.0), held.map(|r| r.0));
    let (anon_before, anon_held) = (before.map(|r| r.1), held.map(|r| r.1));
    let per = |b: Option<u64>, a: Option<u64>| match (b, a) {
        (Some(b), Some(a)) if connected > 0 => {
            Some((a as f64 - b as f64) * 1024.0 / connected as f64)
        }
        _ => None,
    };
    ServerSample {
        pid,
        rss_before_kib: rss_before,
        rss_connected_kib: rss_connected.map(|r| r.0),
        rss_held_kib: rss_held,
        rss_anon_before_kib: anon_before,
        rss_anon_held_kib: anon_held,
        anon_bytes_per_connection: per(anon_before, anon_held),
        // After the hold: what connections cost once idle (a server may
        // shed per-connection state after a quiet period, as corecast's
        // `--park-after` does; hold longer than that).
        rss_bytes_per_connection: per(rss_before, rss_held),
        ..ServerSample::default()
    }
}

/// What the holders share with the main task.
#[derive(Default)]
struct Hold {
    alive: Cell<usize>,
    closing: Cell<bool>,
    dropped: Cell<usize>,
    clean: Cell<usize>,
    signal: Signal,
}

/// Data on an idle connection is unexpected but harmless.
struct Ignore;

impl FrameSink for Ignore {
    fn data(&mut self, _: OpCode, _: &[u8], _: Option<u64>, _: u64) {}
}

/// Keeps one connection open (answering pings) until the server closes it.
async fn hold_one(shared: Rc<Shared>, conn: WsConn, hold: Rc<Hold>) {
    let mut rng = FastRng::new(conn.link.as_ref() as *const _ as u64);
    let end = receive_loop(&shared, &conn.link, conn.leftover, &mut Ignore, &mut rng).await;
    if !hold.closing.get() {
        hold.dropped.set(hold.dropped.get() + 1);
    } else if matches!(end, ReadEnd::Closed(_)) {
        hold.clean.set(hold.clean.get() + 1);
    }
    hold.alive.set(hold.alive.get().saturating_sub(1));
    hold.signal.notify();
}
