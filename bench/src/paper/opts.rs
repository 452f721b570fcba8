//! `paper` options, sans-I/O: the experiment's matrix and its parameters.

use std::path::PathBuf;
use std::time::Duration;

use crate::flags::{duration, ip_list, num, pairs, positive};

/// The reference's three configurations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Setup {
    /// In-process broadcast, one instance.
    C1,
    /// Redis pub/sub between instances.
    C2,
    /// C2 plus a Redis-cached HTTP API under load.
    C3,
}

impl Setup {
    /// "C1", "C2", "C3".
    pub fn name(self) -> &'static str {
        match self {
            Setup::C1 => "C1",
            Setup::C2 => "C2",
            Setup::C3 => "C3",
        }
    }

    /// One line on what runs.
    pub fn describe(self) -> &'static str {
        match self {
            Setup::C1 => "in-process broadcast, one instance",
            Setup::C2 => "Redis pub/sub between instances",
            Setup::C3 => "Redis pub/sub + Redis-cached HTTP API under load",
        }
    }

    /// Whether the setup needs Redis.
    pub fn uses_redis(self) -> bool {
        self != Setup::C1
    }
}

/// A server measured beside corecast in every cell: it speaks the
/// path-mode contract (`GET /ws/{channel}`, `POST /publish/{channel}`,
/// `GET /healthz`), listens on `$PORT`, uses `$REDIS_URL` (C2, C3) and
/// serves `/api/...` from `$ORIGIN` through Redis (C3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Baseline {
    /// Its name in the report.
    pub name: String,
    /// The shell command that starts one instance.
    pub cmd: String,
    /// Directory of the Node.js reference (`npm ci` runs there when its
    /// `node_modules` is missing); `None` for `--baseline-cmd`.
    pub node_dir: Option<PathBuf>,
}

/// Where the Node.js reference lives in this repository.
pub const REFERENCE_NODE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/reference-node");

impl Baseline {
    /// The reference architecture as the paper describes it (Node.js `ws`,
    /// `ioredis`), from `dir`.
    pub fn node(dir: PathBuf) -> Baseline {
        Baseline {
            name: "node".into(),
            cmd: format!("exec node {}", dir.join("server.js").display()),
            node_dir: Some(dir),
        }
    }
}

/// A client count, or the most the descriptor limit allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// This many clients.
    Clients(usize),
    /// `RLIMIT_NOFILE - FD_MARGIN`.
    Max,
}

/// Descriptors a process keeps besides its client sockets (listener,
/// ring, Redis, std streams, /proc reads).
pub const FD_MARGIN: u64 = 100;

/// Most clients `max` stands for: machines with a hard descriptor limit of
/// a million would otherwise ask for a million connections. Explicit
/// counts are not capped (the default 40 source addresses give ~1.1 M
/// ephemeral ports).
pub const MAX_CLIENTS: usize = 100_000;

impl Scale {
    /// The client count under a descriptor limit of `nofile`.
    pub fn clients(self, nofile: u64) -> usize {
        match self {
            Scale::Clients(n) => n,
            Scale::Max => (nofile.saturating_sub(FD_MARGIN) as usize).min(MAX_CLIENTS),
        }
    }
}

/// Everything `paper` runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct PaperOpts {
    /// Report directory.
    pub out: PathBuf,
    /// Configurations, in order.
    pub setups: Vec<Setup>,
    /// Client counts, in order.
    pub scales: Vec<Scale>,
    /// corecast binary (`None`: next to the running binary).
    pub server_bin: Option<PathBuf>,
    /// redis-server binary.
    pub redis_bin: String,
    /// CPU of the servers.
    pub server_cpu: usize,
    /// CPU of Redis.
    pub redis_cpu: Option<usize>,
    /// CPU of the generator and the origin.
    pub load_cpu: usize,
    /// corecast instances in C2/C3.
    pub instances: usize,
    /// Deliveries per second in every cell.
    pub deliveries: f64,
    /// Publishing clients.
    pub publishers: usize,
    /// Message size.
    pub size: usize,
    /// Measured window per cell.
    pub duration: Duration,
    /// Unmeasured lead-in per cell.
    pub warmup: Duration,
    /// The origin's delay.
    pub origin_delay: Duration,
    /// API requests/s during C3 cells.
    pub api_rate: f64,
    /// API keep-alive connections.
    pub api_connections: usize,
    /// Window of each cache comparison phase.
    pub api_duration: Duration,
    /// Client source addresses, as given to `--source-ips`.
    pub source_ips: String,
    /// A server measured beside corecast, cell by cell.
    pub baseline: Option<Baseline>,
    /// JSON on stdout.
    pub json: bool,
    /// No progress lines.
    pub quiet: bool,
    /// Run the matrix over TLS (`wss://`, `https://`).
    pub tls: bool,
    /// The servers' certificate chain for `--tls` (generated if absent).
    pub tls_cert: Option<PathBuf>,
    /// Its key.
    pub tls_key: Option<PathBuf>,
}

impl Default for PaperOpts {
    fn default() -> Self {
        PaperOpts {
            out: PathBuf::from("paper-report"),
            setups: vec![Setup::C1, Setup::C2, Setup::C3],
            scales: vec![Scale::Clients(500), Scale::Clients(5000), Scale::Max],
            server_bin: None,
            redis_bin: "redis-server".into(),
            server_cpu: 0,
            redis_cpu: None,
            load_cpu: 1,
            instances: 2,
            deliveries: 100_000.0,
            publishers: 2,
            size: 128,
            duration: Duration::from_secs(10),
            warmup: Duration::from_secs(3),
            origin_delay: Duration::from_millis(20),
            api_rate: 500.0,
            api_connections: 8,
            api_duration: Duration::from_secs(5),
            source_ips: "127.0.0.2-127.0.0.41".into(),
            baseline: None,
            json: false,
            quiet: false,
            tls: false,
            tls_cert: None,
            tls_key: None,
        }
    }
}

impl PaperOpts {
    /// The CPU Redis runs on.
    pub fn redis_cpu(&self) -> usize {
        self.redis_cpu.unwrap_or(self.server_cpu)
    }

    /// Instances a setup runs.
    pub fn instances_of(&self, setup: Setup) -> usize {
        if setup == Setup::C1 {
            1
        } else {
            self.instances
        }
    }

    /// Messages per second for `clients` subscribers: the delivery budget
    /// shared out, so every cell asks the server for the same work.
    pub fn rate_for(&self, clients: usize) -> f64 {
        self.deliveries / clients.max(1) as f64
    }
}

/// Parses the arguments after `paper`.
pub fn parse(args: &[String]) -> Result<PaperOpts, String> {
    let mut o = PaperOpts::default();
    for (flag, v) in pairs(args)? {
        match flag {
            "--json" => o.json = true,
            "--quiet" => o.quiet = true,
            "--tls" => o.tls = true,
            _ => apply(&mut o, flag, v)?,
        }
    }
    check(&o)?;
    Ok(o)
}

fn apply(o: &mut PaperOpts, flag: &str, v: &str) -> Result<(), String> {
    match flag {
        "--out" => o.out = PathBuf::from(v),
        "--configs" => o.setups = list(v, setup)?,
        "--scales" => o.scales = list(v, scale)?,
        "--server-bin" => o.server_bin = Some(PathBuf::from(v)),
        "--redis-bin" => o.redis_bin = v.to_string(),
        "--server-cpu" => o.server_cpu = num(flag, v)?,
        "--redis-cpu" => o.redis_cpu = Some(num(flag, v)?),
        "--load-cpu" => o.load_cpu = num(flag, v)?,
        "--instances" => o.instances = num(flag, v)?,
        "--deliveries" => o.deliveries = positive(flag, v)?,
        "--publishers" => o.publishers = num(flag, v)?,
        "--size" => o.size = num(flag, v)?,
        "--duration" => o.duration = duration(flag, v)?,
        "--warmup" => o.warmup = duration(flag, v)?,
        "--origin-delay" => o.origin_delay = duration(flag, v)?,
        "--api-rate" => o.api_rate = positive(flag, v)?,
        "--api-connections" => o.api_connections = num(flag, v)?,
        "--api-duration" => o.api_duration = duration(flag, v)?,
        "--baseline" if v == "node" => {
            o.baseline = Some(Baseline::node(PathBuf::from(REFERENCE_NODE_DIR)));
        }
        "--baseline" => {
            return Err(format!(
                "--baseline: `{v}` is not `node` (or use --baseline-cmd)"
            ))
        }
        "--baseline-dir" => match &mut o.baseline {
            Some(b) if b.node_dir.is_some() => *b = Baseline::node(PathBuf::from(v)),
            _ => return Err("--baseline-dir goes after --baseline node".into()),
        },
        "--baseline-cmd" => {
            o.baseline = Some(Baseline {
                name: "baseline".into(),
                cmd: v.to_string(),
                node_dir: None,
            })
        }
        "--baseline-name" => match &mut o.baseline {
            Some(b) => b.name = v.to_string(),
            None => return Err("--baseline-name goes after --baseline or --baseline-cmd".into()),
        },
        "--tls-cert" => o.tls_cert = Some(PathBuf::from(v)),
        "--tls-key" => o.tls_key = Some(PathBuf::from(v)),
        "--source-ips" => {
            ip_list(v)?;
            o.source_ips = v.to_string();
        }
        _ => return Err(format!("unknown option `{flag}` for paper")),
    }
    Ok(())
}

fn check(o: &PaperOpts) -> Result<(), String> {
    if o.setups.is_empty() || o.scales.is_empty() {
        return Err("--configs and --scales must not be empty".into());
    }
    let max_cpu = super::procs::MAX_CPU;
    if [o.server_cpu, o.redis_cpu(), o.load_cpu]
        .iter()
        .any(|&c| c > max_cpu)
    {
        return Err(format!("CPU numbers must be at most {max_cpu}"));
    }
    if o.tls_cert.is_some() != o.tls_key.is_some() || (o.tls_cert.is_some() && !o.tls) {
        return Err("--tls-cert and --tls-key go together, with --tls".into());
    }
    if o.instances == 0 || o.publishers == 0 || o.api_connections == 0 {
        return Err("--instances, --publishers and --api-connections must be >= 1".into());
    }
    if !(o.deliveries > 0.0 && o.api_rate > 0.0) {
        return Err("--deliveries and --api-rate must be > 0".into());
    }
    if o.duration.is_zero() || o.api_duration.is_zero() {
        return Err("--duration and --api-duration must be > 0".into());
    }
    let smallest = o.scales.iter().filter_map(|s| match s {
        Scale::Clients(n) => Some(*n),
        Scale::Max => None,
    });
    if smallest.clone().any(|n| n < o.publishers) {
        return Err("every scale needs at least --publishers clients".into());
    }
    Ok(())
}

fn list<T>(v: &str, one: fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    v.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| one(s.trim()))
        .collect()
}

fn setup(s: &str) -> Result<Setup, String> {
    match s.to_ascii_lowercase().as_str() {
        "c1" => Ok(Setup::C1),
        "c2" => Ok(Setup::C2),
        "c3" => Ok(Setup::C3),
        _ => Err(format!("--configs: `{s}` is not c1, c2 or c3")),
    }
}

fn scale(s: &str) -> Result<Scale, String> {
    if s == "max" {
        return Ok(Scale::Max);
    }
    match s.replace('_', "").parse::<usize>() {
        Ok(n) if n > 0 => Ok(Scale::Clients(n)),
        _ => Err(format!("--scales: `{s}` is not a client count or `max`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn defaults_are_the_reference_matrix() {
        let o = parse(&[]).unwrap();
        assert_eq!(o.setups, vec![Setup::C1, Setup::C2, Setup::C3]);
        assert_eq!(
            o.scales,
            vec![Scale::Clients(500), Scale::Clients(5000), Scale::Max]
        );
        assert_eq!(o.redis_cpu(), 0);
        assert_eq!(
            (o.instances_of(Setup::C1), o.instances_of(Setup::C2)),
            (1, 2)
        );
        assert_eq!(o.rate_for(500), 200.0);
        assert_eq!(Scale::Max.clients(20_000), 19_900);
        assert_eq!(Scale::Max.clients(1 << 20), MAX_CLIENTS);
    }

    #[test]
    fn options_and_refusals() {
        let o = parse(&args(
            "--configs C3,c1 --scales 20,max --duration 1 --warmup=500ms --redis-cpu 1 \
             --origin-delay 5ms --json --out /tmp/x",
        ))
        .unwrap();
        assert_eq!(o.setups, vec![Setup::C3, Setup::C1]);
        assert_eq!(o.scales, vec![Scale::Clients(20), Scale::Max]);
        assert_eq!(o.warmup, Duration::from_millis(500));
        assert_eq!(o.redis_cpu(), 1);
        assert!(o.json);
        assert_eq!(o.baseline, None);
        let b = parse(&args("--baseline node")).unwrap().baseline.unwrap();
        assert_eq!(b.name, "node");
        assert!(b.cmd.ends_with("reference-node/server.js"), "{}", b.cmd);
        let b = parse(&args("--baseline-cmd ./run.sh --baseline-name uws"))
            .unwrap()
            .baseline
            .unwrap();
        assert_eq!((b.name.as_str(), b.cmd.as_str()), ("uws", "./run.sh"));
        for bad in [
            "--configs c4",
            "--scales 0",
            "--scales 1",
            "--scales ,",
            "--duration 0",
            "--instances 0",
            "--bogus 1",
            "--out",
            "--source-ips nope",
            "--api-rate inf",
            "--deliveries 0",
            "--duration 1e20",
            "--server-cpu 5000",
            "--baseline deno",
            "--baseline-name x",
            "--baseline-cmd x --baseline-dir /tmp",
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad}");
        }
    }
}
