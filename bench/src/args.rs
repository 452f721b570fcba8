//! Command-line parsing for `corecast-bench`, sans-I/O: strings in, a
//! [`Command`] or a message for the user out.

use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use crate::flags::{duration, ip_list, num, pairs, positive};

/// Usage text printed by `--help` and after argument errors.
pub const USAGE: &str = "\
corecast-bench: load generator for corecast (and any RFC 6455 pub/sub server)

USAGE:
  corecast-bench connect   --url ws://HOST:PORT/ws/CHAN -n N [options]
  corecast-bench broadcast --url ws://HOST:PORT/ws/CHAN [--url URL2 ...] -n SUBS
                           -p PUBS --rate MSGS_PER_SEC [options]
  corecast-bench http      --url http(s)://HOST:PORT/PATH -c CONNECTIONS [options]
  corecast-bench paper     [--out DIR] [--configs c1,c2,c3] [--scales 500,5000,max]
  corecast-bench soak      --minutes N | --seconds S [--out DIR]

COMMON OPTIONS:
  --json                 print the report as JSON on stdout
  --cpu N                pin the generator to CPU N
  --quiet                no progress lines on stderr
  --legacy-driver        use epoll instead of io_uring
  --plain-uring          io_uring without DEFER_TASKRUN (for comparison)
  --connect-timeout SECS per-connection connect + handshake deadline [10]
  --concurrency N        connection attempts in flight at once [256]
  --source-ips A-B|A,B   bind connections to these local IPv4 addresses,
                         round-robin (e.g. 127.0.0.2-127.0.0.40)
  --server-pid PID       sample the server's RSS / CPU from /proc/PID
  --tls-ca PATH          PEM CA certificates to verify a wss:// or https://
                         server with [the system's roots]; wss:// and https://
                         URLs speak TLS (rustls),
                         broadcast over wss:// publishes with --via http
  --tls-insecure         accept any TLS server certificate (a benchmark's
                         self-signed one; signatures are still checked)

CONNECT:
  -n N                   connections to open
  --rate R               open at most R connections per second [unlimited]
  --hold SECS            keep them open this long once all are up [0]; the
                         server's RSS per connection is taken at its end
                         (hold past a server's --park-after to see parked cost)

BROADCAST:
  -n SUBS                subscriber connections (round-robin over the URLs)
  -p PUBS                publishers among them (ws) or extra HTTP clients (http)
  --rate R               total messages per second over all publishers
  --size BYTES           message size [128]
  --duration SECS        measured window [10]
  --warmup SECS          unmeasured lead-in (losses still count) [2]
  --drain SECS           wait at most this long for stragglers [2]
  --via ws|http|pusher   publish over the WebSocket, POST /publish, or the
                         Pusher protocol [ws]: subscribers connect to
                         /app/KEY?protocol=7 and subscribe to the URL's
                         channel, publishers POST signed /apps/ID/events
  --pusher-app ID:KEY:SECRET  the Pusher app (--via pusher)
  --deflate              subscribers offer permessage-deflate (server context
                         takeover off) and inflate compressed frames
  --sse                  subscribers are Server-Sent Events streams
                         (GET /sse?channel=CHANNEL) instead of WebSockets;
                         needs --via http
  --json-payload         pad messages with realistic JSON, not `.` (what
                         compression figures need)
  --publish-query Q      with --via http: POST /publish/CHANNEL?Q (e.g. the
                         messages' tags: tag.sym=BTC&tag.side=buy)
  --cluster              the URLs are instances of one cluster (sharing Redis):
                         every subscriber expects every publisher's messages
                         (default: each URL is a separate server)

HTTP (closed loop: each keep-alive connection sends its next GET when the
previous response is complete):
  -c N                   keep-alive connections [64]
  --duration SECS        measured window [10]
  --warmup SECS          unmeasured lead-in [2]
  --rate R               pace to at most R requests/s in total instead of a
                         closed loop (a late connection does not catch up)
  --unique               append `corecast-bench-n=COUNTER` to each request's
                         query: no two requests share a cache key

PAPER (the reference experiment end to end: starts redis-server, a delayed
origin and fresh corecast servers pinned to --server-cpu, drives them from
--load-cpu, writes OUT/report.md, OUT/paper.json and SVG charts):
  --out DIR              report directory [paper-report]
  --configs LIST         of c1 (in-process), c2 (Redis pub/sub between
                         instances), c3 (c2 + cached HTTP API) [c1,c2,c3]
  --scales LIST          client counts; `max` = the most one process may
                         hold here (RLIMIT_NOFILE - 100, at most 100,000)
                         [500,5000,max]
  --server-bin PATH      corecast binary [`corecast` next to this binary]
  --redis-bin PATH       [redis-server]
  --server-cpu N         CPU of corecast (and of Redis, as on a 1-vCPU VPS) [0]
  --redis-cpu N          CPU of redis-server [the server CPU]
  --load-cpu N           CPU of the load generator and the origin [1]
  --instances N          corecast instances in c2/c3 (one in c1) [2]
  --deliveries R         target deliveries/s in every cell; the message
                         rate is R / clients [100000]
  --publishers N         publishing clients (among the subscribers) [2]
  --size BYTES           message size [128]
  --duration SECS        measured window of each cell [10]
  --warmup SECS          unmeasured lead-in of each cell [3]
  --origin-delay DUR     the origin's delay per request [20ms]
  --api-rate R           HTTP API requests/s during c3 cells [500]
  --api-connections N    keep-alive connections of the API load [8]
  --api-duration SECS    window of each cache comparison phase [5]
  --source-ips A-B       local addresses of the clients [127.0.0.2-127.0.0.41]
  --tls                  run the matrix encrypted: servers on TLS, clients on
                         wss:// (publishing with POST /publish on https://),
                         the C3 API on https:// (the origin stays plain); a
                         baseline gets TLS_CERT/TLS_KEY and must serve TLS
  --tls-cert PATH        the servers' certificate chain for --tls, with
  --tls-key PATH         its key [a self-signed ECDSA P-256 one for localhost,
                         made with `openssl`, taken with --tls-insecure]
  --baseline node        also run the reference architecture (bench/reference-node:
                         Node.js `ws`, `ioredis`; `npm ci` when needed) in
                         every cell, right after corecast
  --baseline-dir DIR     where that reference lives [the repository's]
  --baseline-cmd CMD     also run `sh -c CMD` in every cell: a server speaking
                         the path-mode contract on $PORT ($REDIS_URL in c2/c3,
                         $ORIGIN for its /api/ cache in c3), e.g. the uWS peer
  --baseline-name NAME   its name in the report [node / baseline]

SOAK (does the server hold for days? Starts redis-server and one corecast in
Redis mode with history, presence and a Pusher app, pinned to --server-cpu;
churns it in cycles with every kind of client leaving every way; after each
cycle, once the server is back at rest, samples RSS, descriptors, its gauges,
Redis keys and pub/sub channels; writes OUT/soak.md, soak.svg, soak.json and
exits 1 if anything grows after the warm-up):
  --minutes N            churn this long (cycles start until it has passed)
  --seconds S            the same in seconds, for short runs [60]
  --cycles N             stop after N cycles at the latest
  --warmup-cycles N      cycles not judged [3]
  --out DIR              report directory [soak-report]
  --server-bin PATH      corecast binary [`corecast` next to this binary]
  --redis-bin PATH       [redis-server]
  --server-cpu N         CPU of corecast and Redis [0]
  --load-cpu N           CPU of the clients [1 with two CPUs or more, else 0]
  --settle-timeout DUR   longest wait for the server to come back to rest
                         after a cycle [10s]

Durations accept a plain number of seconds or a suffix: 500ms, 20s, 2m.
";

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Print usage.
    Help,
    /// Open, hold and close connections.
    Connect(ConnectOpts),
    /// Fan-out throughput and latency.
    Broadcast(BroadcastOpts),
    /// Closed-loop keep-alive GET load.
    Http(HttpOpts),
    /// The reference experiment end to end.
    Paper(super::paper::opts::PaperOpts),
    /// The long-run stability check.
    Soak(super::soak::opts::SoakOpts),
}

/// `http` options.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpOpts {
    /// Shared options.
    pub common: Common,
    /// `http://host:port/path[?query]`.
    pub url: String,
    /// Keep-alive connections.
    pub connections: usize,
    /// Measured window.
    pub duration: Duration,
    /// Unmeasured lead-in.
    pub warmup: Duration,
    /// Total requests per second over all connections (paced); `None`:
    /// closed loop, as fast as responses come back.
    pub rate: Option<f64>,
    /// Append a per-request counter to the query, so no two requests share
    /// a cache key (every request a cache miss).
    pub unique: bool,
}

/// Options every subcommand takes.
#[derive(Debug, Clone, PartialEq)]
pub struct Common {
    /// JSON report on stdout.
    pub json: bool,
    /// CPU to pin to.
    pub cpu: Option<usize>,
    /// No progress lines.
    pub quiet: bool,
    /// Force epoll.
    pub legacy_driver: bool,
    /// io_uring without `DEFER_TASKRUN`.
    pub plain_uring: bool,
    /// Connect + handshake deadline per connection.
    pub connect_timeout: Duration,
    /// Connection attempts in flight at once.
    pub concurrency: usize,
    /// Local addresses to bind before connecting (empty: let the kernel pick).
    pub source_ips: Vec<Ipv4Addr>,
    /// Server process to sample.
    pub server_pid: Option<u32>,
    /// CA certificates (PEM) to verify a `wss://` server with; the
    /// system's roots if absent.
    pub tls_ca: Option<std::path::PathBuf>,
    /// Accept any server certificate (`--tls-insecure`).
    pub tls_insecure: bool,
}

impl Default for Common {
    fn default() -> Self {
        Common {
            json: false,
            cpu: None,
            quiet: false,
            legacy_driver: false,
            plain_uring: false,
            connect_timeout: Duration::from_secs(10),
            concurrency: 256,
            source_ips: Vec::new(),
            server_pid: None,
            tls_ca: None,
            tls_insecure: false,
        }
    }
}

/// `connect` options.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectOpts {
    /// Shared options.
    pub common: Common,
    /// Target.
    pub url: WsUrl,
    /// Connections to open.
    pub n: usize,
    /// Opening rate limit (connections per second).
    pub rate: Option<f64>,
    /// How long to hold them once all are up.
    pub hold: Duration,
}

/// How publishers reach the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// Binary frames on the publisher's own subscriber connection.
    Ws,
    /// `POST /publish/{channel}` on separate keep-alive connections.
    Http,
    /// The Pusher protocol: subscribers on `/app/{key}`, publishers
    /// `POST /apps/{id}/events` (signed) on keep-alive connections.
    Pusher,
}

impl Via {
    /// As in `--via`.
    pub fn name(self) -> &'static str {
        match self {
            Via::Ws => "ws",
            Via::Http => "http",
            Via::Pusher => "pusher",
        }
    }
}

/// A Pusher app (`--pusher-app ID:KEY:SECRET`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PusherApp {
    /// App id (the HTTP API's path).
    pub id: String,
    /// Public key (the WebSocket path, `auth_key`).
    pub key: String,
    /// Secret (request signatures).
    pub secret: String,
}

impl PusherApp {
    fn parse(v: &str) -> Result<PusherApp, String> {
        match v.split(':').collect::<Vec<_>>()[..] {
            [id, key, secret] if !id.is_empty() && !key.is_empty() && !secret.is_empty() => {
                Ok(PusherApp {
                    id: id.into(),
                    key: key.into(),
                    secret: secret.into(),
                })
            }
            _ => Err(format!("--pusher-app: expected ID:KEY:SECRET, got `{v}`")),
        }
    }
}

/// `broadcast` options.
#[derive(Debug, Clone, PartialEq)]
pub struct BroadcastOpts {
    /// Shared options.
    pub common: Common,
    /// Targets; subscribers are spread over them round-robin.
    pub urls: Vec<WsUrl>,
    /// Subscriber connections.
    pub subscribers: usize,
    /// Publishers.
    pub publishers: usize,
    /// Total messages per second over all publishers.
    pub rate: f64,
    /// Message size in bytes.
    pub size: usize,
    /// Measured window.
    pub duration: Duration,
    /// Unmeasured lead-in.
    pub warmup: Duration,
    /// Bound on the wait for stragglers after the publishers stop.
    pub drain: Duration,
    /// Publishing path.
    pub via: Via,
    /// The URLs are one cluster: every subscriber gets every message.
    pub cluster: bool,
    /// Subscribers offer permessage-deflate and inflate what comes
    /// compressed.
    pub deflate: bool,
    /// Pad messages with realistic JSON instead of `.`.
    pub json_payload: bool,
    /// Subscribers are Server-Sent Events streams (`GET /sse`).
    pub sse: bool,
    /// The app, with `--via pusher`.
    pub pusher: Option<PusherApp>,
    /// With `--via http`, the query of every publish request.
    pub publish_query: Option<String>,
}

/// A `ws://host:port/path` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WsUrl {
    /// Host as written (name or IP literal).
    pub host: String,
    /// Port (80 if absent).
    pub port: u16,
    /// Path, starting with `/`.
    pub path: String,
    /// `wss://`: TLS first.
    pub tls: bool,
}

impl WsUrl {
    /// Parses `ws://host[:port][/path]` or `wss://…` (port 443 if absent).
    pub fn parse(s: &str) -> Result<WsUrl, String> {
        let (rest, tls) = match (s.strip_prefix("ws://"), s.strip_prefix("wss://")) {
            (Some(rest), _) => (rest, false),
            (_, Some(rest)) => (rest, true),
            _ => return Err(format!("`{s}`: only ws:// and wss:// URLs are supported")),
        };
        let default_port = if tls { 443 } else { 80 };
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, "/"),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
                (h, p.parse().map_err(|_| format!("`{s}`: bad port `{p}`"))?)
            }
            _ => (authority, default_port),
        };
        if host.is_empty() {
            return Err(format!("`{s}`: missing host"));
        }
        Ok(WsUrl {
            host: host.to_string(),
            port,
            path: path.to_string(),
            tls,
        })
    }

    /// The URL as written back (`ws://` or `wss://`).
    pub fn display(&self) -> String {
        let scheme = if self.tls { "wss" } else { "ws" };
        format!("{scheme}://{}{}", self.authority(), self.path)
    }

    /// The `Host` header value.
    pub fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The channel of a `/ws/{channel}` path, without its query (for
    /// `POST /publish/{channel}`).
    pub fn channel(&self) -> Option<&str> {
        let path = self.path.split('?').next().unwrap_or_default();
        path.strip_prefix("/ws/").filter(|c| !c.is_empty())
    }

    /// Resolves the host (IP literals resolve without DNS).
    pub fn resolve(&self) -> std::io::Result<SocketAddr> {
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        (host, self.port)
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::other(format!("{}: no address", self.host)))
    }
}

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut it = args.into_iter();
    let sub = match it.next() {
        None => return Err("missing subcommand".into()),
        Some(s) => s,
    };
    let rest: Vec<String> = it.collect();
    if rest.iter().any(|a| a == "--help" || a == "-h") {
        return Ok(Command::Help);
    }
    match sub.as_str() {
        "connect" => parse_connect(&rest).map(Command::Connect),
        "broadcast" => parse_broadcast(&rest).map(Command::Broadcast),
        "http" => parse_http(&rest).map(Command::Http),
        "paper" => super::paper::opts::parse(&rest).map(Command::Paper),
        "soak" => super::soak::opts::parse(&rest).map(Command::Soak),
        "help" | "--help" | "-h" => Ok(Command::Help),
        other => Err(format!("unknown subcommand `{other}`")),
    }
}

/// Applies a common option; `Ok(false)` if `flag` is not one.
fn common_flag(c: &mut Common, flag: &str, v: &str) -> Result<bool, String> {
    match flag {
        "--json" => c.json = true,
        "--quiet" => c.quiet = true,
        "--legacy-driver" => c.legacy_driver = true,
        "--plain-uring" => c.plain_uring = true,
        "--cpu" => c.cpu = Some(num(flag, v)?),
        "--connect-timeout" => c.connect_timeout = duration(flag, v)?,
        "--concurrency" => c.concurrency = num::<usize>(flag, v)?.max(1),
        "--source-ips" => c.source_ips = ip_list(v)?,
        "--server-pid" => c.server_pid = Some(num(flag, v)?),
        "--tls-ca" => c.tls_ca = Some(v.into()),
        "--tls-insecure" => c.tls_insecure = true,
        _ => return Ok(false),
    }
    Ok(true)
}

fn parse_connect(args: &[String]) -> Result<ConnectOpts, String> {
    let mut common = Common::default();
    let (mut url, mut n, mut rate, mut hold) = (None, None, None, Duration::ZERO);
    for (flag, v) in pairs(args)? {
        if common_flag(&mut common, flag, v)? {
            continue;
        }
        match flag {
            "--url" => url = Some(WsUrl::parse(v)?),
            "-n" => n = Some(num(flag, v)?),
            "--rate" => rate = Some(positive(flag, v)?),
            "--hold" => hold = duration(flag, v)?,
            _ => return Err(format!("unknown option `{flag}` for connect")),
        }
    }
    Ok(ConnectOpts {
        common,
        url: url.ok_or("connect needs --url")?,
        n: n.ok_or("connect needs -n")?,
        rate,
        hold,
    })
}

fn parse_http(args: &[String]) -> Result<HttpOpts, String> {
    let mut o = HttpOpts {
        common: Common::default(),
        url: String::new(),
        connections: 64,
        duration: Duration::from_secs(10),
        warmup: Duration::from_secs(2),
        rate: None,
        unique: false,
    };
    for (flag, v) in pairs(args)? {
        if common_flag(&mut o.common, flag, v)? {
            continue;
        }
        match flag {
            "--url" => o.url = v.to_string(),
            "--rate" => o.rate = Some(positive(flag, v)?),
            "--unique" => o.unique = true,
            "-c" => o.connections = num::<usize>(flag, v)?.max(1),
            "--duration" => o.duration = duration(flag, v)?,
            "--warmup" => o.warmup = duration(flag, v)?,
            _ => return Err(format!("unknown option `{flag}` for http")),
        }
    }
    if !o.url.starts_with("http://") && !o.url.starts_with("https://") {
        return Err("http needs --url http(s)://HOST:PORT/PATH".into());
    }
    if o.duration.is_zero() {
        return Err("--duration must be > 0".into());
    }
    Ok(o)
}

fn parse_broadcast(args: &[String]) -> Result<BroadcastOpts, String> {
    let mut o = BroadcastOpts {
        common: Common::default(),
        urls: Vec::new(),
        subscribers: 0,
        publishers: 1,
        rate: 0.0,
        size: 128,
        duration: Duration::from_secs(10),
        warmup: Duration::from_secs(2),
        drain: Duration::from_secs(2),
        via: Via::Ws,
        cluster: false,
        deflate: false,
        sse: false,
        json_payload: false,
        pusher: None,
        publish_query: None,
    };
    for (flag, v) in pairs(args)? {
        if common_flag(&mut o.common, flag, v)? {
            continue;
        }
        match flag {
            "--url" => o.urls.push(WsUrl::parse(v)?),
            "-n" => o.subscribers = num(flag, v)?,
            "-p" => o.publishers = num(flag, v)?,
            "--rate" => o.rate = positive(flag, v)?,
            "--size" => o.size = num(flag, v)?,
            "--duration" => o.duration = duration(flag, v)?,
            "--warmup" => o.warmup = duration(flag, v)?,
            "--drain" => o.drain = duration(flag, v)?,
            "--via" => o.via = via(v)?,
            "--cluster" => o.cluster = true,
            "--deflate" => o.deflate = true,
            "--json-payload" => o.json_payload = true,
            "--sse" => o.sse = true,
            "--pusher-app" => o.pusher = Some(PusherApp::parse(v)?),
            "--publish-query" => o.publish_query = Some(v.to_string()),
            _ => return Err(format!("unknown option `{flag}` for broadcast")),
        }
    }
    check_broadcast(&o)?;
    Ok(o)
}

fn check_broadcast(o: &BroadcastOpts) -> Result<(), String> {
    if o.urls.is_empty() {
        return Err("broadcast needs --url".into());
    }
    if o.subscribers == 0 || o.publishers == 0 {
        return Err("broadcast needs -n >= 1 and -p >= 1".into());
    }
    if o.via == Via::Ws && o.publishers > o.subscribers {
        return Err("with --via ws publishers are subscribers: need -p <= -n".into());
    }
    if o.rate <= 0.0 {
        return Err("broadcast needs --rate > 0".into());
    }
    if o.via != Via::Ws && o.urls.iter().any(|u| u.channel().is_none()) {
        return Err("--via http|pusher needs URLs of the form ws://HOST:PORT/ws/CHANNEL".into());
    }
    if o.publish_query.is_some() && o.via != Via::Http {
        return Err("--publish-query needs --via http".into());
    }
    if (o.via == Via::Pusher) != o.pusher.is_some() {
        return Err("--via pusher and --pusher-app go together".into());
    }
    if o.sse && (o.via != Via::Http || o.deflate) {
        return Err("--sse needs --via http (streams cannot publish) and no --deflate".into());
    }
    if o.via == Via::Pusher && o.deflate {
        return Err("--deflate: the Pusher protocol is never compressed".into());
    }
    Ok(())
}

fn via(v: &str) -> Result<Via, String> {
    match v {
        "ws" => Ok(Via::Ws),
        "http" => Ok(Via::Http),
        "pusher" => Ok(Via::Pusher),
        _ => Err(format!("--via: expected ws, http or pusher, got `{v}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn urls() {
        let u = WsUrl::parse("ws://127.0.0.1:9000/ws/news").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("127.0.0.1", 9000, "/ws/news")
        );
        assert_eq!(u.channel(), Some("news"));
        let q = WsUrl::parse("ws://h:1/ws/news?token=t").unwrap();
        assert_eq!(q.channel(), Some("news"));
        assert_eq!(u.authority(), "127.0.0.1:9000");
        let u = WsUrl::parse("ws://localhost").unwrap();
        assert_eq!((u.port, u.path.as_str(), u.channel()), (80, "/", None));
        let u = WsUrl::parse("ws://[::1]:81/ws/x").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("[::1]", 81));
        let u = WsUrl::parse("wss://h/x").unwrap();
        assert_eq!((u.port, u.tls), (443, true));
        assert!(WsUrl::parse("http://h/x").is_err());
        assert!(WsUrl::parse("ws://h:notaport/x").is_err());
        assert!(WsUrl::parse("ws:///x").is_err());
    }

    #[test]
    fn connect_command() {
        let cmd = parse(args(
            "connect --url ws://127.0.0.1:1/ws/a -n 19_000 --rate 5000 --hold 30s \
             --source-ips 127.0.0.2-127.0.0.4 --server-pid 42 --json --cpu 1",
        ))
        .unwrap();
        let Command::Connect(c) = cmd else { panic!() };
        assert_eq!(c.n, 19_000);
        assert_eq!(c.rate, Some(5000.0));
        assert_eq!(c.hold, Duration::from_secs(30));
        assert_eq!(c.common.source_ips.len(), 3);
        assert_eq!(c.common.server_pid, Some(42));
        assert!(c.common.json);
        assert_eq!(c.common.cpu, Some(1));
    }

    #[test]
    fn broadcast_command_and_checks() {
        let cmd = parse(args(
            "broadcast --url ws://h:1/ws/a --url=ws://h:2/ws/a -n 1000 -p 2 --rate 100 \
             --size 128 --duration 20 --warmup 5 --via http",
        ))
        .unwrap();
        let Command::Broadcast(b) = cmd else { panic!() };
        assert_eq!(b.urls.len(), 2);
        assert_eq!((b.subscribers, b.publishers, b.size), (1000, 2, 128));
        assert_eq!(b.via, Via::Http);
        assert_eq!(b.warmup, Duration::from_secs(5));
        for bad in [
            "broadcast -n 1 -p 1 --rate 1",
            "broadcast --url ws://h:1/ws/a -n 1 -p 2 --rate 1",
            "broadcast --url ws://h:1/ws/a -n 1 -p 1",
            "broadcast --url ws://h:1/ -n 1 -p 1 --rate 1 --via http",
            "broadcast --url ws://h:1/ws/a -n 1 -p 1 --rate 1 --bogus 3",
            "broadcast --url ws://h:1/ws/a -n",
            "broadcast --url ws://h:1/ws/a -n 1 -p 1 --rate 1 --via pusher",
            "broadcast --url ws://h:1/ws/a -n 1 -p 1 --rate 1 --pusher-app 1:k:s",
            "broadcast --url ws://h:1/ws/a -n 1 -p 1 --rate 1 --via pusher --pusher-app 1:k",
            "broadcast --url ws://h:1/ -n 1 -p 1 --rate 1 --via pusher --pusher-app 1:k:s",
            "frobnicate",
        ] {
            assert!(parse(args(bad)).is_err(), "{bad}");
        }
        assert_eq!(parse(args("broadcast --help")), Ok(Command::Help));
    }

    #[test]
    fn pusher_mode_takes_an_app() {
        let cmd = parse(args(
            "broadcast --url ws://h:1/ws/a -n 10 -p 1 --rate 5 --via pusher --pusher-app 1:key:sec",
        ))
        .unwrap();
        let Command::Broadcast(b) = cmd else { panic!() };
        assert_eq!(b.via, Via::Pusher);
        let app = b.pusher.unwrap();
        assert_eq!((&*app.id, &*app.key, &*app.secret), ("1", "key", "sec"));
    }
}
