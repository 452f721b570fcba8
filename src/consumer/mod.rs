//! Outbox consumers, sans-I/O: what a consumer is configured with, what
//! a row must be to be published, and the messages a consumer thread and
//! the worker it publishes through exchange. The database client and the
//! thread are the edge's (`server::consumer`).
//!
//! A consumer reads publications where the application wrote them, in
//! the same transaction as its own data (the transactional outbox): a
//! crash between the write and the publish cannot lose one, a rollback
//! cannot publish one. Rows are published through the server API's
//! publish (`server::publish::publish_server`: namespace rules, history,
//! Redis, the other workers), then deleted in the transaction that
//! claimed them.
//!
//! # Layout
//! - this file: [`ConsumerConfig`] and its URL (`postgres://` or
//!   `redis[s]://…?stream=`).
//! - [`row`]: a row checked for publishing, or why it is poison.
//! - [`bridge`]: the requests and replies between a consumer thread and
//!   the worker, length-prefixed JSON.
//! - [`sql`]: the statements a PostgreSQL consumer runs.
//! - [`stream`]: a Redis stream consumer's commands and how their
//!   replies are read.

pub mod bridge;
pub mod row;
pub mod sql;
pub mod stream;

use std::path::PathBuf;
use std::time::Duration;

/// Most rows one claim takes.
pub const MAX_BATCH: usize = 10_000;
/// Most consumers a server runs.
pub const MAX_CONSUMERS: usize = 16;

/// Where a consumer reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A PostgreSQL outbox table (`postgres://`).
    Postgres,
    /// A Redis stream read with a consumer group (`redis://…?stream=`).
    RedisStream(StreamSource),
}

/// A Redis stream consumer's own settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSource {
    /// The Redis server (credentials, database, TLS).
    pub url: crate::redis::RedisUrl,
    /// The stream's key.
    pub stream: String,
    /// The consumer group (created at the stream's start if missing).
    pub group: String,
    /// Entries pending this long with a consumer (one that died before
    /// its `XACK`) are claimed by another (`XAUTOCLAIM`).
    pub claim_after: Duration,
}

/// One outbox consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// Its name: stats, logs, and the idempotency keys (`NAME:ID`).
    pub name: String,
    /// PostgreSQL or a Redis stream.
    pub kind: Kind,
    /// The PostgreSQL connection string without corecast's parameters
    /// (what the client library parses), and its redacted form for logs.
    pub dsn: String,
    /// The outbox table (`[schema.]name`; PostgreSQL).
    pub table: String,
    /// Where poison rows go (`[schema.]name`, or a stream's key).
    pub dead_letter: String,
    /// Rows per claim.
    pub batch: usize,
    /// Longest time between two claims when no notification came (a
    /// stream: how long one `XREADGROUP` blocks).
    pub poll: Duration,
    /// The `LISTEN` channel that wakes a claim (None: polling only).
    pub notify: Option<String>,
    /// PEM CA certificates the server's certificate must chain to
    /// (`sslmode=require`); else the system's roots.
    pub tls_ca: Option<PathBuf>,
}

impl std::str::FromStr for ConsumerConfig {
    type Err = String;

    /// `postgres[ql]://[user[:password]@]host[:port]/db?table=…&…`: the
    /// PostgreSQL URL with corecast's parameters (`name`, `table`,
    /// `dead_letter`, `batch`, `poll`, `notify`, `tls_ca`) mixed in; the
    /// others (`sslmode`, `connect_timeout`, …) go to the client library.
    fn from_str(s: &str) -> Result<Self, String> {
        if s.starts_with("redis://") || s.starts_with("rediss://") {
            return stream_consumer(s);
        }
        if !(s.starts_with("postgres://") || s.starts_with("postgresql://")) {
            return Err("a consumer is a postgres://… or redis://…?stream=… URL".into());
        }
        let (base, query) = s.split_once('?').unwrap_or((s, ""));
        let mut c = ConsumerConfig {
            name: String::new(),
            kind: Kind::Postgres,
            dsn: String::new(),
            table: "corecast_outbox".into(),
            dead_letter: String::new(),
            batch: 100,
            poll: Duration::from_secs(1),
            notify: Some(String::new()),
            tls_ca: None,
        };
        let mut rest = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            c.set(k, v, &mut rest)?;
        }
        c.dsn = match rest.is_empty() {
            true => base.to_string(),
            false => format!("{base}?{}", rest.join("&")),
        };
        if c.name.is_empty() {
            c.name = c.table.clone();
        }
        if c.dead_letter.is_empty() {
            c.dead_letter = format!("{}_dead", c.table);
        }
        if c.notify.as_deref() == Some("") {
            c.notify = Some(c.table.rsplit('.').next().unwrap_or(&c.table).to_string());
        }
        Ok(c)
    }
}

/// `redis[s]://[user:password@]host:port[/db]?stream=KEY&group=…`: a
/// Redis stream consumer (`name`, `batch`, `poll`, `claim_after`,
/// `dead_letter` as for PostgreSQL; `group` defaults to `corecast`).
fn stream_consumer(s: &str) -> Result<ConsumerConfig, String> {
    let (base, query) = s.split_once('?').unwrap_or((s, ""));
    let url: crate::redis::RedisUrl = base.parse().map_err(|e| format!("{e}"))?;
    let mut src = StreamSource {
        url,
        stream: String::new(),
        group: "corecast".into(),
        claim_after: Duration::from_secs(30),
    };
    let mut c = ConsumerConfig {
        name: String::new(),
        kind: Kind::Postgres,
        dsn: String::new(),
        table: String::new(),
        dead_letter: String::new(),
        batch: 100,
        poll: Duration::from_secs(1),
        notify: None,
        tls_ca: None,
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "stream" => src.stream = stream_key(v)?,
            "group" => src.group = stream_key(v)?,
            "dead_letter" => c.dead_letter = stream_key(v)?,
            "claim_after" => {
                src.claim_after = duration(v)
                    .filter(|d| *d >= Duration::from_millis(100))
                    .ok_or("claim_after: a duration of at least 100ms")?;
            }
            "name" | "batch" | "poll" | "tls_ca" => c.set(k, v, &mut Vec::new())?,
            _ => return Err(format!("unknown parameter {k:?} of a stream consumer")),
        }
    }
    if src.stream.is_empty() {
        return Err("a redis:// consumer needs stream=KEY".into());
    }
    if c.name.is_empty() {
        c.name = src.stream.clone();
    }
    if c.dead_letter.is_empty() {
        c.dead_letter = format!("{}_dead", src.stream);
    }
    c.kind = Kind::RedisStream(src);
    Ok(c)
}

/// A stream key or group name: 1-128 printable ASCII bytes, no spaces.
fn stream_key(v: &str) -> Result<String, String> {
    if v.is_empty() || v.len() > 128 || !v.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!("{v:?}: 1-128 printable characters"));
    }
    Ok(v.to_string())
}

impl ConsumerConfig {
    fn set(&mut self, k: &str, v: &str, rest: &mut Vec<String>) -> Result<(), String> {
        match k {
            "name" => {
                if v.is_empty() || v.len() > 64 || !v.bytes().all(label_byte) {
                    return Err("name: 1-64 of A-Z a-z 0-9 - _ .".into());
                }
                self.name = v.into();
            }
            "table" => self.table = identifier(v)?,
            "dead_letter" => self.dead_letter = identifier(v)?,
            "batch" => {
                self.batch = v
                    .parse()
                    .ok()
                    .filter(|b| (1..=MAX_BATCH).contains(b))
                    .ok_or("batch: 1 to 10000 rows")?;
            }
            "poll" => {
                let d = duration(v).ok_or("poll: a duration like 250ms, 1s or 1m")?;
                if d < Duration::from_millis(10) || d > Duration::from_secs(3600) {
                    return Err("poll: 10ms to 1h".into());
                }
                self.poll = d;
            }
            "notify" if v.is_empty() => self.notify = None,
            "notify" => self.notify = Some(identifier(v)?),
            "tls_ca" => self.tls_ca = Some(v.into()),
            _ => rest.push(format!("{k}={v}")),
        }
        Ok(())
    }

    /// The connection string with its password replaced (in the
    /// userinfo or a `password=` parameter), for logs.
    pub fn redacted(&self) -> String {
        let (base, query) = self.dsn.split_once('?').unwrap_or((&self.dsn, ""));
        let base = match base
            .split_once("://")
            .and_then(|(s, r)| Some((s, r.split_once('@')?)))
        {
            Some((scheme, (user, host))) => {
                let user = user.split(':').next().unwrap_or("");
                format!("{scheme}://{user}:***@{host}")
            }
            None => base.to_string(),
        };
        let query: Vec<&str> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                if p.starts_with("password=") {
                    "password=***"
                } else {
                    p
                }
            })
            .collect();
        match query.is_empty() {
            true => base,
            false => format!("{base}?{}", query.join("&")),
        }
    }
}

/// `250ms`, `2s`, `1m` (the configuration's own parser lives above this
/// layer).
fn duration(v: &str) -> Option<Duration> {
    let split = v.find(|c: char| !c.is_ascii_digit())?;
    let n: u64 = v[..split].parse().ok()?;
    match &v[split..] {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => Some(Duration::from_secs(n.checked_mul(60)?)),
        _ => None,
    }
}

fn label_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')
}

/// A table or channel name: `[schema.]name`, each part a plain SQL
/// identifier (letters, digits, `_`, not starting with a digit, at most
/// 63 bytes), so it is safe in a statement without quoting.
fn identifier(v: &str) -> Result<String, String> {
    let ok = |p: &str| {
        !p.is_empty()
            && p.len() <= 63
            && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !p.as_bytes()[0].is_ascii_digit()
    };
    let parts: Vec<&str> = v.split('.').collect();
    if parts.len() > 2 || !parts.iter().all(|p| ok(p)) {
        return Err(format!("{v:?}: a [schema.]name of letters, digits and _"));
    }
    Ok(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redis_url_with_a_stream_is_a_stream_consumer() {
        let c: ConsumerConfig =
            "redis://:pw@r:6380/2?stream=events&group=cc&claim_after=5s&batch=50"
                .parse()
                .unwrap();
        let Kind::RedisStream(s) = &c.kind else {
            panic!("a stream consumer");
        };
        assert_eq!((s.stream.as_str(), s.group.as_str()), ("events", "cc"));
        assert_eq!(
            (s.url.port, s.url.db, s.url.password.as_deref()),
            (6380, 2, Some("pw"))
        );
        assert_eq!(s.claim_after, Duration::from_secs(5));
        assert_eq!(
            (c.name.as_str(), c.dead_letter.as_str(), c.batch),
            ("events", "events_dead", 50)
        );
        for bad in [
            "redis://r",
            "redis://r?stream=",
            "redis://r?stream=a%20b&x=1",
            "redis://r?stream=s&claim_after=1ms",
            "redis://r?stream=s&table=t",
        ] {
            assert!(bad.parse::<ConsumerConfig>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_consumer_url_splits_into_ours_and_the_client_librarys() {
        let c: ConsumerConfig =
            "postgres://app:s3cret@db:5432/shop?sslmode=require&table=public.outbox&batch=500&poll=250ms&name=orders"
                .parse()
                .unwrap();
        assert_eq!(c.dsn, "postgres://app:s3cret@db:5432/shop?sslmode=require");
        assert_eq!(
            c.redacted(),
            "postgres://app:***@db:5432/shop?sslmode=require"
        );
        assert_eq!(
            (c.name.as_str(), c.table.as_str(), c.dead_letter.as_str()),
            ("orders", "public.outbox", "public.outbox_dead")
        );
        assert_eq!((c.batch, c.poll), (500, Duration::from_millis(250)));
        assert_eq!(c.notify.as_deref(), Some("outbox"));
        let d: ConsumerConfig = "postgresql://h/db?notify=".parse().unwrap();
        assert_eq!(
            (d.name.as_str(), d.table.as_str(), d.notify, d.batch),
            ("corecast_outbox", "corecast_outbox", None, 100)
        );
        for bad in [
            "mysql://h/db",
            "postgres://h/db?table=x;drop",
            "postgres://h/db?table=a.b.c",
            "postgres://h/db?table=1x",
            "postgres://h/db?batch=0",
            "postgres://h/db?batch=10001",
            "postgres://h/db?poll=1ms",
            "postgres://h/db?name=a%20b",
            "postgres://h/db?notify=x-y",
        ] {
            assert!(bad.parse::<ConsumerConfig>().is_err(), "{bad}");
        }
    }
}
