//! `soak`: does the server hold for days? One corecast instance in Redis
//! mode (history, presence, a Pusher app) is churned cycle after cycle
//! by every kind of client ([`cycle`]), which leave in every way; after
//! each cycle, with all its clients gone, the server and Redis are
//! sampled ([`sample`]) once they are back at rest. The run fails when a
//! quantity grows cycle over cycle after the warm-up ([`verdict`]); it
//! writes `soak.md` (one row per cycle), `soak.svg` and `soak.json`
//! ([`report`]).
//!
//! Everything runs on this one thread, pinned to the load CPU: the
//! clients are blocking sockets ([`ws`], [`client`]), Redis is read with
//! a small RESP client ([`redis`]).

pub mod client;
pub mod cycle;
pub mod opts;
pub mod redis;
pub mod report;
pub mod sample;
pub mod verdict;
pub mod ws;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cycle::{Churn, Tally};
use opts::SoakOpts;
use report::SoakReport;
use sample::{Probe, Sample};

use crate::args::PusherApp;
use crate::error::BenchError;
use crate::paper::procs::{start_corecast, start_redis, Proc};

/// The Pusher app the server is given and the clients use.
const APP: (&str, &str, &str) = ("1", "soak-key", "soak-secret");

/// `--history-ttl` the server runs with: the histories of the channels
/// used once are forgotten (in the server and in Redis) this long after
/// their last message.
const HISTORY_TTL: Duration = Duration::from_secs(5);
/// The warm-up lasts at least this long: three history TTLs, so that the
/// state bounded by it (Redis keys, `history_*`) has reached its level
/// (as many channels expiring as new ones made) before the judged cycles.
const WARMUP_TIME: Duration = Duration::from_secs(3 * HISTORY_TTL.as_secs());

/// corecast's flags besides `--listen`, `--cpu` and `--redis-url`: Redis
/// mode with history (a short `--history-ttl`, [`HISTORY_TTL`]), presence on
/// `room-*`, a Pusher app with client events, parking after 250 ms (the
/// idle clients park within a cycle) and a 64 KiB outbound queue (the
/// never-reading subscriber is cut after a few hundred KiB).
fn server_flags() -> Vec<String> {
    let mut flags = vec![
        "--history-ttl".to_string(),
        format!("{}s", HISTORY_TTL.as_secs()),
    ];
    let rest = [
        "--history-size",
        "50",
        "--presence-channels",
        "room-*",
        "--pusher-app",
        "1:soak-key:soak-secret:client-events",
        "--park-after",
        "250ms",
        "--max-outbound-queue",
        "64KiB",
    ];
    flags.extend(rest.map(String::from));
    flags
}

/// Runs the soak; `Err` (after the report is written) when it failed.
pub fn run(o: SoakOpts) -> Result<SoakReport, BenchError> {
    let exe = std::env::current_exe()?;
    let server_bin = o
        .server_bin
        .clone()
        .unwrap_or_else(|| exe.with_file_name("corecast"));
    if !server_bin.is_file() {
        return Err(BenchError::Setup(format!(
            "no corecast binary at {}: build it (`cargo build --release`) or pass --server-bin",
            server_bin.display()
        )));
    }
    let load_cpu = o.load_cpu.unwrap_or(usize::from(online_cpus() >= 2));
    monoio::utils::bind_to_cpu_set([load_cpu])
        .map_err(|e| BenchError::Runtime(format!("cannot pin to CPU {load_cpu}: {e:?}")))?;
    let logs = o.out.join("logs");
    std::fs::create_dir_all(&logs)?;
    let (_redis, port) = start_redis(&o.redis_bin, o.server_cpu, &logs.join("redis.log"))
        .map_err(BenchError::Setup)?;
    let mut args = server_flags();
    args.extend(["--redis-url".into(), format!("redis://127.0.0.1:{port}")]);
    let (server, addr) = start_corecast(
        &server_bin,
        o.server_cpu,
        &args,
        &logs.join("corecast.log"),
        None,
    )
    .map_err(BenchError::Setup)?;
    let redis =
        redis::Redis::connect(port).map_err(|e| BenchError::Setup(format!("redis: {e}")))?;
    let mut probe = Probe {
        addr,
        pid: server.pid(),
        redis,
    };
    let (samples, seconds, failed) = churn(&o, &mut probe, &server);
    let report = write_report(&o, args, samples, seconds)?;
    match failed {
        Some(e) => Err(BenchError::Setup(format!("soak stopped: {e}"))),
        None if report.verdict.ok => Ok(report),
        None => Err(BenchError::Setup(format!(
            "soak FAILED (report in {}):\n  {}",
            report.out_dir,
            report.verdict.failures().join("\n  ")
        ))),
    }
}

/// The cycles: the samples, the seconds they took, and the error that
/// stopped them early, if one did.
fn churn(o: &SoakOpts, probe: &mut Probe, server: &Proc) -> (Vec<Sample>, f64, Option<String>) {
    let start = Instant::now();
    let app = PusherApp {
        id: APP.0.into(),
        key: APP.1.into(),
        secret: APP.2.into(),
    };
    let mut churn = Churn::new(probe.addr, app);
    let mut samples = Vec::new();
    let mut cycle = 0;
    let failed = loop {
        let tally = match cycle {
            0 => Ok(Tally::default()),
            c => churn.cycle(c, probe),
        };
        let sampled = tally.and_then(|t| sample_after(o, probe, &samples, (cycle, t), start));
        match sampled {
            Ok(s) => {
                progress(o, &s);
                samples.push(s);
            }
            Err(e) => break Some(format!("cycle {cycle}: {e}{}", exited(server))),
        }
        let done = start.elapsed() >= o.run_for || o.max_cycles.is_some_and(|m| cycle >= m);
        if done {
            break None;
        }
        cycle += 1;
    };
    (samples, start.elapsed().as_secs_f64(), failed)
}

/// Waits for the server to be at rest (every `Level` quantity at most
/// where the previous sample had it), then samples.
fn sample_after(
    o: &SoakOpts,
    probe: &mut Probe,
    before: &[Sample],
    (cycle, t): (usize, Tally),
    start: Instant,
) -> Result<Sample, String> {
    let levels = match before.last() {
        Some(s) => s.values.clone(),
        None => vec![u64::MAX; sample::QUANTITIES.len()],
    };
    let (values, settled, took) = probe.settle(&levels, o.settle_timeout)?;
    Ok(Sample {
        cycle,
        t_s: start.elapsed().as_secs_f64(),
        clients: t.clients,
        messages: t.messages,
        lost: t.lost,
        recovered: t.recovered,
        parked: t.parked,
        slow_cut: cycle == 0 || t.slow_cut,
        settle_ms: took.as_millis() as u64,
        settled,
        values,
    })
}

fn exited(server: &Proc) -> String {
    match std::fs::metadata(format!("/proc/{}", server.pid())) {
        Ok(_) => String::new(),
        Err(_) => " (the server is gone: see logs/corecast.log)".into(),
    }
}

fn progress(o: &SoakOpts, s: &Sample) {
    if o.quiet {
        return;
    }
    let v = |name| s.values[sample::index_of(name)];
    eprintln!(
        "soak: cycle {} at {:.0} s: {} clients, {} messages, settled in {} ms{}; RSS {} KiB, \
         {} fds, {} Redis keys ({} without TTL), {} pub/sub channels",
        s.cycle,
        s.t_s,
        s.clients,
        s.messages,
        s.settle_ms,
        if s.settled { "" } else { " (NOT at rest)" },
        v("rss_kib"),
        v("fds"),
        v("redis_keys"),
        v("redis_keys_without_ttl"),
        v("redis_channels"),
    );
}

fn write_report(
    o: &SoakOpts,
    server_args: Vec<String>,
    samples: Vec<Sample>,
    seconds: f64,
) -> Result<SoakReport, BenchError> {
    // Cycles that ended within the warm-up time are warm-up too.
    let warmup = samples
        .iter()
        .filter(|s| s.t_s < WARMUP_TIME.as_secs_f64())
        .map(|s| s.cycle)
        .max()
        .unwrap_or(0)
        .max(o.warmup_cycles);
    let mut report = SoakReport {
        command: "soak",
        date: corecast::log::timestamp_now(),
        server_args,
        warmup_cycles: warmup,
        seconds,
        verdict: verdict::judge(&samples, warmup),
        samples,
        files: ["soak.md", "soak.svg", "soak.json"]
            .map(String::from)
            .to_vec(),
        out_dir: o.out.display().to_string(),
    };
    let file = |name: &str| -> PathBuf { o.out.join(name) };
    std::fs::write(file("soak.svg"), report::chart(&report.samples, warmup))?;
    std::fs::write(file("soak.md"), report::markdown(&report))?;
    let json = serde_json::to_string_pretty(&report).expect("the report serializes");
    std::fs::write(file("soak.json"), json)?;
    report.files.sort();
    Ok(report)
}

fn online_cpus() -> usize {
    // SAFETY: sysconf only reads a system value.
    unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize
}
