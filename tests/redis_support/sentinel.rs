//! A real Redis Sentinel deployment for the Sentinel tests: a master, a
//! replica synced to it and a `redis-server --sentinel` watching them
//! (quorum 1, down after 1 s), each on a free port, all SIGKILLed on drop.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, RedisServer, Resp, RespConn, POLL};
use crate::common::DEADLINE;

/// The master's name the Sentinel knows.
pub const MASTER: &str = "mymaster";

/// One Sentinel process.
pub struct Sentinel {
    pub port: u16,
    /// Its TLS port (`start_tls`).
    pub tls_port: Option<u16>,
    child: Option<Child>,
}

/// `(certificate, key, CA)` files for a set that speaks TLS.
pub type Tls<'a> = (
    &'a std::path::Path,
    &'a std::path::Path,
    &'a std::path::Path,
);

/// `redis-server` arguments for TLS on `port` beside the plain port
/// (which the tests' own client uses), replication over TLS.
fn tls_args(port: u16, (cert, key, ca): Tls<'_>) -> Vec<String> {
    [
        "--tls-port".to_string(),
        port.to_string(),
        "--tls-cert-file".into(),
        cert.display().to_string(),
        "--tls-key-file".into(),
        key.display().to_string(),
        "--tls-ca-cert-file".into(),
        ca.display().to_string(),
        "--tls-auth-clients".into(),
        "no".into(),
        "--tls-replication".into(),
        "yes".into(),
    ]
    .to_vec()
}

impl Sentinel {
    /// Starts a Sentinel watching `master_port` (its config file in
    /// `dir`, which Sentinel rewrites as it learns).
    pub async fn start(dir: &std::path::Path, master_port: u16, tls: Option<Tls<'_>>) -> Sentinel {
        for _ in 0..3 {
            let port = free_port();
            let conf = dir.join(format!("sentinel-{port}.conf"));
            let mut text = format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {MASTER} 127.0.0.1 {master_port} 1\n\
                 sentinel down-after-milliseconds {MASTER} 1000\n\
                 sentinel failover-timeout {MASTER} 10000\n\
                 sentinel parallel-syncs {MASTER} 1\n",
                dir.display()
            );
            let tls_port = tls.map(|(cert, key, ca)| {
                let tp = free_port();
                text.push_str(&format!(
                    "tls-port {tp}\ntls-cert-file {}\ntls-key-file {}\n\
                     tls-ca-cert-file {}\ntls-auth-clients no\ntls-replication yes\n",
                    cert.display(),
                    key.display(),
                    ca.display()
                ));
                tp
            });
            std::fs::write(&conf, text).expect("sentinel config");
            let child = Command::new("redis-server")
                .arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server (apt-get install redis-server) must be installed");
            let mut s = Sentinel {
                port,
                tls_port,
                child: Some(child),
            };
            if s.wait_up().await {
                return s;
            }
            s.kill();
        }
        panic!("redis-server --sentinel did not start");
    }

    async fn wait_up(&mut self) -> bool {
        let deadline = Instant::now() + DEADLINE;
        while Instant::now() < deadline {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(Child::try_wait) {
                return false; // exited: the port was taken meanwhile
            }
            if let Ok(mut c) = RespConn::connect(self.port).await {
                if let Ok(Resp::Simple(_)) = c.try_cmd(&["PING"]).await {
                    return true;
                }
            }
            tokio::time::sleep(POLL).await;
        }
        false
    }

    /// SIGKILLs it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// What it says about the master (`SENTINEL master NAME`), as a map.
    pub async fn master_info(&self) -> Vec<(String, String)> {
        let mut c = RespConn::open(self.port, None).await;
        let Resp::Array(Some(items)) = c.cmd(&["SENTINEL", "MASTER", MASTER]).await else {
            return Vec::new();
        };
        let texts: Vec<String> = items.iter().map(Resp::text).collect();
        texts
            .chunks(2)
            .map(|kv| (kv[0].clone(), kv[1].clone()))
            .collect()
    }

    /// The master's port as this Sentinel names it now.
    pub async fn master_port(&self) -> u16 {
        let mut c = RespConn::open(self.port, None).await;
        match c
            .cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER])
            .await
        {
            Resp::Array(Some(a)) => a[1].text().parse().expect("port"),
            other => panic!("no master: {other:?}"),
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A master, its replica and a Sentinel.
pub struct SentinelSet {
    pub master: RedisServer,
    pub replica: RedisServer,
    pub sentinel: Sentinel,
    dir: std::path::PathBuf,
}

impl SentinelSet {
    /// Starts all three and waits until the Sentinel knows the replica
    /// (a failover needs one).
    pub async fn start() -> SentinelSet {
        SentinelSet::start_with(None).await
    }

    /// [`SentinelSet::start`] with TLS everywhere beside the plain ports:
    /// replication over TLS, the Sentinel monitoring the master's TLS
    /// port (so that is the address it names).
    pub async fn start_tls(tls: Tls<'_>) -> SentinelSet {
        SentinelSet::start_with(Some(tls)).await
    }

    async fn start_with(tls: Option<Tls<'_>>) -> SentinelSet {
        let dir = std::env::temp_dir().join(format!(
            "corecast-sentinel-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).expect("sentinel dir");
        let d = dir.display().to_string();
        let (mtp, rtp) = (free_port(), free_port());
        let mut margs: Vec<String> = ["--repl-diskless-sync-delay", "0", "--dir", &d]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut rargs = margs.clone();
        if let Some(t) = tls {
            margs.extend(tls_args(mtp, t));
            rargs.extend(tls_args(rtp, t));
        }
        let margs: Vec<&str> = margs.iter().map(String::as_str).collect();
        let master = RedisServer::start(&margs).await;
        // Over TLS the replica replicates from, and announces, TLS ports.
        let mp = match tls {
            Some(_) => mtp.to_string(),
            None => master.port.to_string(),
        };
        rargs.extend(["--replicaof".into(), "127.0.0.1".into(), mp]);
        let rargs: Vec<&str> = rargs.iter().map(String::as_str).collect();
        let replica = RedisServer::start(&rargs).await;
        wait_synced(replica.port).await;
        let monitored = if tls.is_some() { mtp } else { master.port };
        let sentinel = Sentinel::start(&dir, monitored, tls).await;
        let set = SentinelSet {
            master,
            replica,
            sentinel,
            dir,
        };
        set.wait_replica_known().await;
        set
    }

    /// `redis+sentinel://` for this set; `first`: Sentinel addresses to
    /// list before the real one (say, one nobody listens on).
    pub fn url(&self, first: &[String]) -> String {
        let mut hosts = first.to_vec();
        hosts.push(format!("127.0.0.1:{}", self.sentinel.port));
        format!("redis+sentinel://{}?master={MASTER}", hosts.join(","))
    }

    /// `rediss+sentinel://` to the Sentinel's TLS port (`start_tls`).
    pub fn tls_url(&self) -> String {
        let p = self.sentinel.tls_port.expect("a TLS set");
        format!("rediss+sentinel://127.0.0.1:{p}?master={MASTER}")
    }

    async fn wait_replica_known(&self) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let info = self.sentinel.master_info().await;
            let n = info
                .iter()
                .find(|(k, _)| k == "num-slaves")
                .map(|(_, v)| v.clone());
            if n.as_deref().is_some_and(|n| n != "0") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the Sentinel never saw the replica: {info:?}"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until the Sentinel names a master other than `old`; returns
    /// its port.
    pub async fn wait_new_master(&self, old: u16) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let p = self.sentinel.master_port().await;
            if p != old {
                return p;
            }
            assert!(Instant::now() < deadline, "no failover within 30 s");
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for SentinelSet {
    fn drop(&mut self) {
        self.sentinel.kill();
        self.replica.kill();
        self.master.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits until the replica on `port` has synced with its master.
pub async fn wait_synced(port: u16) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let mut c = RespConn::open(port, None).await;
        let info = c.cmd(&["INFO", "replication"]).await.text();
        if info.contains("master_link_status:up") {
            return;
        }
        assert!(Instant::now() < deadline, "replica never synced: {info}");
        tokio::time::sleep(POLL).await;
    }
}
