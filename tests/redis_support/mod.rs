//! Real Redis for the Redis-mode tests: a `redis-server` child per test on
//! a free port (killed on drop), a tiny independent RESP2 client to look at
//! it from outside (`PUBSUB NUMSUB`, `INFO`), and corecast instances wired
//! to it.
//!
//! Nothing here shares code with the server: the RESP reader below is
//! written from the protocol description, not taken from `src/redis/`.

#![allow(dead_code)] // not every helper is used by every test

use std::io;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use corecast::config::Config;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{get, get_request, try_http_raw, TestServer, DEADLINE};

pub mod sentinel;

/// Interval between two polls of a condition.
pub(crate) const POLL: Duration = Duration::from_millis(10);

// ---------------------------------------------------------- the server --

/// A `redis-server` child process on its own port; SIGKILLed on drop.
pub struct RedisServer {
    pub port: u16,
    extra: Vec<String>,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts `redis-server` on `port` with `extra` arguments; `Err` when
    /// it does not come up (the port was taken meanwhile, say).
    pub async fn start_at(port: u16, extra: &[String]) -> Result<RedisServer, String> {
        let mut r = RedisServer {
            port,
            extra: extra.to_vec(),
            child: None,
        };
        r.spawn_and_wait().await.map(|()| r)
    }

    /// Starts `redis-server` on a free port with no persistence, plus
    /// `extra` arguments (e.g. `--requirepass x`), and waits until it
    /// answers. Retries on another port if the one picked was taken in the
    /// meantime.
    pub async fn start(extra: &[&str]) -> RedisServer {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let mut last_err = String::new();
        for _ in 0..3 {
            let mut r = RedisServer {
                port: free_port(),
                extra: extra.clone(),
                child: None,
            };
            match r.spawn_and_wait().await {
                Ok(()) => return r,
                Err(e) => last_err = e,
            }
        }
        panic!("redis-server did not start: {last_err}");
    }

    /// `redis://127.0.0.1:PORT` plus `suffix` (e.g. `/3`), with `userinfo`
    /// (e.g. `:secret@`) when given.
    pub fn url(&self, userinfo: &str, suffix: &str) -> corecast::redis::RedisUrl {
        format!("redis://{userinfo}127.0.0.1:{}{suffix}", self.port)
            .parse()
            .expect("valid redis url")
    }

    /// SIGKILLs the server (no shutdown, no goodbye to clients) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill(); // SIGKILL on Unix
            let _ = child.wait();
        }
    }

    /// SIGSTOPs the server: connections stay open, nothing is read or
    /// answered (until [`RedisServer::kill`]).
    pub fn freeze(&mut self) {
        let child = self.child.as_ref().expect("redis-server running");
        let pid = libc::pid_t::try_from(child.id()).expect("pid fits");
        // SAFETY: kill(2) with a valid signal number touches no memory.
        let rc = unsafe { libc::kill(pid, libc::SIGSTOP) };
        assert_eq!(
            rc,
            0,
            "SIGSTOP redis-server: {}",
            io::Error::last_os_error()
        );
    }

    /// SIGCONTs a [`RedisServer::freeze`]d server: it answers again.
    pub fn thaw(&mut self) {
        let child = self.child.as_ref().expect("redis-server running");
        let pid = libc::pid_t::try_from(child.id()).expect("pid fits");
        // SAFETY: kill(2) with a valid signal number touches no memory.
        let rc = unsafe { libc::kill(pid, libc::SIGCONT) };
        assert_eq!(
            rc,
            0,
            "SIGCONT redis-server: {}",
            io::Error::last_os_error()
        );
    }

    /// Starts a fresh server on the same port with the same arguments.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "restart after kill");
        if let Err(e) = self.spawn_and_wait().await {
            panic!("redis-server did not restart on port {}: {e}", self.port);
        }
    }

    async fn spawn_and_wait(&mut self) -> Result<(), String> {
        let port = self.port.to_string();
        let spawned = Command::new("redis-server")
            .args(["--port", &port, "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match spawned {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::NotFound => panic!(
                "redis-server is not installed (these tests need a real Redis): \
                 apt-get install redis-server"
            ),
            Err(e) => panic!("cannot run redis-server: {e}"),
        };
        self.child = Some(child);
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(format!("exited with {status} (port {port} taken?)"));
            }
            // Any RESP answer means it is serving (NOAUTH included).
            if let Ok(Ok(mut c)) =
                tokio::time::timeout(Duration::from_secs(1), RespConn::connect(self.port)).await
            {
                if let Ok(Ok(_)) =
                    tokio::time::timeout(Duration::from_secs(1), c.try_cmd(&["PING"])).await
                {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(format!(
                    "no answer to PING on port {port} within {DEADLINE:?}"
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port nobody listens on right now (bound, read, released).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

// ---------------------------------------------------------- cluster ---

/// A real Redis Cluster: `masters` masters with `replicas` replicas each,
/// created with `redis-cli --cluster create`, every node SIGKILLed (and
/// its config file removed) on drop.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    dir: std::path::PathBuf,
    /// TLS on every node beside its plain port (see [`TlsFiles`]).
    tls: Option<TlsFiles>,
    /// Each node's TLS port, in `nodes`' order (with `tls`).
    pub tls_ports: Vec<u16>,
}

/// `(certificate, key, CA)` files for a cluster whose nodes also serve
/// TLS (`--tls-port`, no client certificates); the cluster bus, the
/// replication and the test's own client stay plain.
pub type TlsFiles = (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf);

/// A port whose cluster bus port (+10000) is free too.
fn cluster_port() -> u16 {
    for _ in 0..1000 {
        let p = free_port();
        if p <= 55535 && std::net::TcpListener::bind(("127.0.0.1", p + 10000)).is_ok() {
            return p;
        }
    }
    panic!("no free port pair for a cluster node");
}

impl RedisCluster {
    pub async fn start(masters: usize, replicas: usize) -> RedisCluster {
        RedisCluster::start_with(masters, replicas, None).await
    }

    /// [`RedisCluster::start`], every node also serving TLS with `tls`.
    pub async fn start_with(
        masters: usize,
        replicas: usize,
        tls: Option<TlsFiles>,
    ) -> RedisCluster {
        let dir = std::env::temp_dir().join(format!(
            "corecast-cluster-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).expect("cluster dir");
        let (mut nodes, mut tls_ports) = (Vec::new(), Vec::new());
        while nodes.len() < masters * (1 + replicas) {
            if let Some((n, tp)) = Self::spawn_node(&dir, tls.as_ref()).await {
                nodes.push(n);
                tls_ports.extend(tp);
            }
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli (apt-get install redis-tools) must be installed");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let c = RedisCluster {
            nodes,
            dir,
            tls,
            tls_ports,
        };
        c.wait_ok().await;
        c.wait_replicas_synced().await;
        c
    }

    /// A cluster-enabled `redis-server` on a free port pair (`None`: the
    /// port was taken meanwhile).
    async fn spawn_node(
        dir: &std::path::Path,
        tls: Option<&TlsFiles>,
    ) -> Option<(RedisServer, Option<u16>)> {
        let port = cluster_port();
        let conf = dir.join(format!("nodes-{port}.conf"));
        let mut extra: Vec<String> = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            conf.to_str().unwrap(),
            "--cluster-node-timeout",
            "1000",
            // Replicas sync at once (a replica that never synced
            // refuses to take over: its data is too old).
            "--repl-diskless-sync-delay",
            "0",
            // A replica's sync writes an RDB file: in the test's
            // directory, not the working tree.
            "--dir",
            dir.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let tls_port = tls.map(|(cert, key, ca)| {
            let tp = free_port();
            let path = |p: &std::path::PathBuf| p.display().to_string();
            extra.extend([
                "--tls-port".into(),
                tp.to_string(),
                "--tls-auth-clients".into(),
                "no".into(),
                "--tls-cert-file".into(),
                path(cert),
                "--tls-key-file".into(),
                path(key),
                "--tls-ca-cert-file".into(),
                path(ca),
                // Nodes announce their TLS port (CLUSTER SHARDS: tls-port)
                // and talk to each other over TLS.
                "--tls-cluster".into(),
                "yes".into(),
                "--tls-replication".into(),
                "yes".into(),
            ]);
            tp
        });
        let node = RedisServer::start_at(port, &extra).await.ok()?;
        Some((node, tls_port))
    }

    /// Adds an empty master (no slots) to the cluster: `CLUSTER MEET`,
    /// then waits until every node knows it. Returns its port.
    pub async fn add_master(&mut self) -> u16 {
        let node = loop {
            if let Some((n, tp)) = Self::spawn_node(&self.dir, self.tls.as_ref()).await {
                self.tls_ports.extend(tp);
                break n;
            }
        };
        let port = node.port;
        let mut first = RespConn::open(self.nodes[0].port, None).await;
        let r = first
            .cmd(&["CLUSTER", "MEET", "127.0.0.1", &port.to_string()])
            .await;
        assert_eq!(r, Resp::Simple("OK".into()), "CLUSTER MEET");
        self.nodes.push(node);
        let deadline = Instant::now() + DEADLINE;
        let needle = format!("127.0.0.1:{port}@");
        for n in &self.nodes {
            let mut c = RespConn::open(n.port, None).await;
            loop {
                let nodes = c.cmd(&["CLUSTER", "NODES"]).await.text();
                let known = nodes.lines().any(|l| {
                    l.contains(&needle) && l.contains("master") && l.contains("connected")
                });
                if known && nodes.lines().count() == self.nodes.len() {
                    break;
                }
                assert!(Instant::now() < deadline, "node {port} not met: {nodes}");
                tokio::time::sleep(POLL).await;
            }
        }
        port
    }

    /// Waits until every replica's link to its master is up.
    pub async fn wait_replicas_synced(&self) {
        let deadline = Instant::now() + DEADLINE;
        for n in &self.nodes {
            let mut c = RespConn::open(n.port, None).await;
            loop {
                let info = c.cmd(&["INFO", "replication"]).await.text();
                if info.contains("role:master") || info.contains("master_link_status:up") {
                    break;
                }
                assert!(Instant::now() < deadline, "replica not synced: {info}");
                tokio::time::sleep(POLL).await;
            }
        }
    }

    /// Waits until every node reports `cluster_state:ok` and knows every
    /// master's slots.
    pub async fn wait_ok(&self) {
        let deadline = Instant::now() + DEADLINE;
        for n in &self.nodes {
            let mut c = RespConn::open(n.port, None).await;
            loop {
                let info = c.cmd(&["CLUSTER", "INFO"]).await.text();
                if info.contains("cluster_state:ok")
                    && info.contains("cluster_slots_assigned:16384")
                {
                    break;
                }
                assert!(Instant::now() < deadline, "cluster not ok: {info}");
                tokio::time::sleep(POLL).await;
            }
        }
    }

    /// `rediss://` seeds: every node's TLS port (with TLS files).
    pub fn tls_seeds(&self) -> String {
        let v: Vec<String> = self
            .tls_ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("rediss://{}", v.join(","))
    }

    /// `host:port` seeds of every node.
    pub fn seeds(&self) -> String {
        let v: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        v.join(",")
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sends one command and returns the raw reply bytes (for decoders under
/// test).
pub async fn raw_reply(port: u16, args: &[&str]) -> Vec<u8> {
    let mut c = RespConn::open(port, None).await;
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    c.stream.write_all(&out).await.expect("write");
    loop {
        if let Some((_, used)) = parse(&c.buf) {
            return c.buf[..used].to_vec();
        }
        let n = tokio::time::timeout(DEADLINE, c.stream.read_buf(&mut c.buf))
            .await
            .expect("reply in time")
            .expect("read");
        assert!(n > 0, "redis closed");
    }
}

// ---------------------------------------------------------- RESP2 -----

/// A RESP2 value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Resp>>),
}

impl Resp {
    pub fn int(&self) -> i64 {
        match self {
            Resp::Int(n) => *n,
            other => panic!("expected an integer reply, got {other:?}"),
        }
    }

    pub fn text(&self) -> String {
        match self {
            Resp::Simple(s) => s.clone(),
            Resp::Bulk(Some(b)) => String::from_utf8_lossy(b).into_owned(),
            other => panic!("expected a string reply, got {other:?}"),
        }
    }
}

/// Parses one value from the front of `buf`: `None` = need more bytes.
fn parse(buf: &[u8]) -> Option<(Resp, usize)> {
    let line_end = buf.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&buf[1..line_end]).expect("ASCII RESP line");
    let after = line_end + 2;
    let v = match *buf.first()? {
        b'+' => (Resp::Simple(line.into()), after),
        b'-' => (Resp::Error(line.into()), after),
        b':' => (Resp::Int(line.parse().expect("integer")), after),
        b'$' => {
            let n: i64 = line.parse().expect("bulk length");
            if n < 0 {
                return Some((Resp::Bulk(None), after));
            }
            let end = after + n as usize;
            let data = buf.get(after..end)?.to_vec();
            assert_eq!(
                buf.get(end..end + 2)?,
                b"\r\n",
                "bulk string not CRLF-terminated"
            );
            (Resp::Bulk(Some(data)), end + 2)
        }
        b'*' => {
            let n: i64 = line.parse().expect("array length");
            if n < 0 {
                return Some((Resp::Array(None), after));
            }
            let mut at = after;
            let mut items = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let (item, used) = parse(&buf[at..])?;
                items.push(item);
                at += used;
            }
            (Resp::Array(Some(items)), at)
        }
        other => panic!("not RESP2: type byte {other:#x}"),
    };
    Some(v)
}

/// One plain connection to Redis, one command at a time.
pub struct RespConn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl RespConn {
    pub async fn connect(port: u16) -> io::Result<RespConn> {
        let stream = TcpStream::connect(("127.0.0.1", port)).await?;
        Ok(RespConn {
            stream,
            buf: Vec::new(),
        })
    }

    /// Connects (and `AUTH`s with `password` when given), failing the test
    /// on errors.
    pub async fn open(port: u16, password: Option<&str>) -> RespConn {
        let mut c = RespConn::connect(port).await.expect("connect to redis");
        if let Some(p) = password {
            let r = c.cmd(&["AUTH", p]).await;
            assert_eq!(r, Resp::Simple("OK".into()), "AUTH");
        }
        c
    }

    pub async fn try_cmd(&mut self, args: &[&str]) -> io::Result<Resp> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        self.stream.write_all(&out).await?;
        loop {
            if let Some((v, used)) = parse(&self.buf) {
                self.buf.drain(..used);
                return Ok(v);
            }
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    /// Runs a command, failing the test on I/O errors or after the deadline.
    pub async fn cmd(&mut self, args: &[&str]) -> Resp {
        match tokio::time::timeout(DEADLINE, self.try_cmd(args)).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => panic!("redis {args:?}: {e}"),
            Err(_) => panic!("redis {args:?}: no reply within {DEADLINE:?}"),
        }
    }

    /// `PUBSUB NUMSUB corecast:{channel}`: how many subscriber connections
    /// (one per corecast instance with local subscribers) Redis has for it.
    pub async fn numsub(&mut self, channel: &str) -> i64 {
        let key = format!("corecast:{channel}");
        match self.cmd(&["PUBSUB", "NUMSUB", &key]).await {
            Resp::Array(Some(items)) if items.len() == 2 => items[1].int(),
            other => panic!("PUBSUB NUMSUB: {other:?}"),
        }
    }

    /// Polls `PUBSUB NUMSUB` until it equals `want`.
    pub async fn wait_numsub(&mut self, channel: &str, want: i64) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let n = self.numsub(channel).await;
            if n == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "PUBSUB NUMSUB corecast:{channel} stayed {n}, want {want}"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// `PUBSUB SHARDNUMSUB corecast:{channel}` (sharded pub/sub: asked of
    /// the master that owns the channel's slot).
    pub async fn shardnumsub(&mut self, channel: &str) -> i64 {
        let key = format!("corecast:{{{channel}}}");
        match self.cmd(&["PUBSUB", "SHARDNUMSUB", &key]).await {
            Resp::Array(Some(items)) if items.len() == 2 => items[1].int(),
            other => panic!("PUBSUB SHARDNUMSUB: {other:?}"),
        }
    }

    /// `PUBSUB SHARDCHANNELS`: the sharded channels this node serves.
    pub async fn shardchannels(&mut self) -> Vec<String> {
        match self.cmd(&["PUBSUB", "SHARDCHANNELS"]).await {
            Resp::Array(Some(items)) => {
                let mut v: Vec<String> = items.iter().map(Resp::text).collect();
                v.sort();
                v
            }
            other => panic!("PUBSUB SHARDCHANNELS: {other:?}"),
        }
    }

    /// One numeric field of `INFO section`.
    pub async fn info_u64(&mut self, section: &str, field: &str) -> u64 {
        let text = self.cmd(&["INFO", section]).await.text();
        text.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .unwrap_or_else(|| panic!("no {field} in INFO {section}"))
            .trim()
            .parse()
            .expect("numeric INFO field")
    }
}

// ---------------------------------------------------------- corecast --

/// A corecast instance in Redis mode on `redis`, with short canary and
/// resume intervals so readiness comes quickly, changed further by `tweak`.
pub fn instance(url: corecast::redis::RedisUrl, tweak: impl FnOnce(&mut Config)) -> TestServer {
    TestServer::start(|cfg| {
        cfg.redis.url = Some(url);
        cfg.redis.canary_interval = Duration::from_millis(100);
        cfg.redis.resume_delay = Duration::from_millis(100);
        tweak(cfg);
    })
}

/// A corecast instance on the cluster `c` (seeds: every node), with
/// short canary and resume intervals, changed further by `tweak`.
pub fn cluster_instance(c: &RedisCluster, tweak: impl FnOnce(&mut Config)) -> TestServer {
    let seeds = c.seeds().parse().expect("valid seeds");
    TestServer::start(|cfg| {
        cfg.redis.cluster = Some(seeds);
        cfg.redis.canary_interval = Duration::from_millis(100);
        cfg.redis.resume_delay = Duration::from_millis(100);
        tweak(cfg);
    })
}

/// Two default instances on `redis`, both ready.
pub async fn ready_pair(redis: &RedisServer) -> (TestServer, TestServer) {
    let a = instance(redis.url("", ""), |_| {});
    let b = instance(redis.url("", ""), |_| {});
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    (a, b)
}

/// `GET /readyz`: status and body (`None` when the request failed).
pub async fn readyz(addr: SocketAddr) -> Option<(u16, Value)> {
    let req = get_request("/readyz", false);
    match tokio::time::timeout(DEADLINE, try_http_raw(addr, req.as_bytes())).await {
        Ok(Ok(r)) => Some((r.status, r.json())),
        _ => None,
    }
}

/// Polls `/readyz` until it answers `status`; returns the body.
pub async fn wait_readyz(addr: SocketAddr, status: u16) -> Value {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let last = match readyz(addr).await {
            Some((s, body)) if s == status => return body,
            other => other,
        };
        assert!(
            Instant::now() < deadline,
            "/readyz of {addr} never answered {status}; last: {last:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// `/healthz` answers 200.
pub async fn assert_healthy(addr: SocketAddr) {
    let r = get(addr, "/healthz").await;
    assert_eq!(r.status, 200, "/healthz: {r:?}");
}
