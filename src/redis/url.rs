//! `redis://[user:password@]host:port[/db]` URLs, and `rediss://` (TLS).

use std::fmt;

use super::cluster::Node;

/// Where and how to reach Redis.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl {
    /// Host name or address.
    pub host: String,
    /// TCP port (default 6379).
    pub port: u16,
    /// ACL user for `AUTH user password` (Redis 6+).
    pub username: Option<String>,
    /// Password for `AUTH [user] password`.
    pub password: Option<String>,
    /// Database for `SELECT` (default 0; pub/sub ignores it, the cache uses it).
    pub db: u32,
    /// `rediss://`: TLS, the server's certificate verified for `host`.
    pub tls: bool,
}

impl fmt::Debug for RedisUrl {
    /// Never prints the password: URLs end up in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.tls { "rediss://" } else { "redis://" })?;
        match (&self.username, &self.password) {
            (Some(u), Some(_)) => write!(f, "{u}:***@")?,
            (None, Some(_)) => f.write_str(":***@")?,
            (Some(u), None) => write!(f, "{u}@")?,
            (None, None) => {}
        }
        write!(f, "{}:{}/{}", self.host, self.port, self.db)
    }
}

/// A URL that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlError(pub &'static str);

impl fmt::Display for UrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for UrlError {}

impl std::str::FromStr for RedisUrl {
    type Err = UrlError;

    fn from_str(s: &str) -> Result<Self, UrlError> {
        let (tls, rest) = scheme(s).ok_or(UrlError(
            "expected redis[s]://[user:password@]host:port[/db]",
        ))?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (username, password) = match userinfo {
            None => (None, None),
            Some(u) => match u.split_once(':') {
                Some((user, pass)) => (non_empty(user), non_empty(pass)),
                None => (non_empty(u), None),
            },
        };
        let (host, port) = split_host_port(hostport)?;
        let db = match path {
            "" => 0,
            p => p
                .parse()
                .map_err(|_| UrlError("database must be a number"))?,
        };
        Ok(RedisUrl {
            host,
            port,
            username: username.map(percent_decode).transpose()?,
            password: password.map(percent_decode).transpose()?,
            db,
            tls,
        })
    }
}

/// Whether `s` is `rediss://` (TLS) or `redis://`, and what follows.
fn scheme(s: &str) -> Option<(bool, &str)> {
    match s.strip_prefix("rediss://") {
        Some(rest) => Some((true, rest)),
        None => s.strip_prefix("redis://").map(|rest| (false, rest)),
    }
}

/// The seed list with a scheme repeated on later seeds taken off; one
/// that differs from the first's (`tls`) is refused: a cluster is reached
/// all over TLS or not at all.
fn same_scheme(hosts: &str, tls: bool) -> Result<String, UrlError> {
    let mut out = Vec::new();
    for seed in hosts.split(',') {
        let seed = seed.trim();
        let bare = match scheme(seed) {
            Some((t, _)) if t != tls => {
                return Err(UrlError(
                    "mixed redis:// and rediss:// seeds: a cluster is reached all over TLS or not at all",
                ))
            }
            Some((_, rest)) => rest,
            None => seed,
        };
        out.push(bare);
    }
    Ok(out.join(","))
}

/// `--redis-cluster`: seed nodes of a Redis Cluster, with the credentials
/// every node is opened with:
/// `[redis[s]://][user:password@]host:port[,host:port...]` (`rediss://`:
/// every node over TLS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSeeds {
    /// The first seed, carrying the credentials (database always 0: a
    /// cluster has only one).
    pub url: RedisUrl,
    /// Every seed, tried in order until one answers the topology.
    pub seeds: Vec<Node>,
}

impl std::str::FromStr for ClusterSeeds {
    type Err = UrlError;

    fn from_str(s: &str) -> Result<Self, UrlError> {
        let (tls, rest) = scheme(s).unwrap_or((false, s));
        let (userinfo, hosts) = match rest.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, rest),
        };
        let hosts = same_scheme(hosts, tls)?;
        if hosts.contains('/') {
            return Err(UrlError("a cluster has no databases: no /db"));
        }
        let seeds = super::cluster::seeds(&hosts)
            .map_err(|_| UrlError("expected host:port[,host:port...]"))?;
        let scheme = if tls { "rediss" } else { "redis" };
        let first = match userinfo {
            Some(u) => format!("{scheme}://{u}@{}", seeds[0].addr()),
            None => format!("{scheme}://{}", seeds[0].addr()),
        };
        Ok(ClusterSeeds {
            url: first.parse()?,
            seeds,
        })
    }
}

impl ClusterSeeds {
    /// The credentials of `url` with the address of `node`.
    pub fn url_of(&self, node: &Node) -> RedisUrl {
        RedisUrl {
            host: node.host.clone(),
            port: node.port,
            ..self.url.clone()
        }
    }
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

fn split_host_port(hostport: &str) -> Result<(String, u16), UrlError> {
    // [::1]:6379 style IPv6 literals keep their brackets off the host.
    let (host, port) = if let Some(rest) = hostport.strip_prefix('[') {
        let (h, after) = rest
            .split_once(']')
            .ok_or(UrlError("unclosed IPv6 bracket"))?;
        (h, after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if host.is_empty() {
        return Err(UrlError("missing host"));
    }
    let port = match port {
        None => 6379,
        Some(p) => p.parse().map_err(|_| UrlError("invalid port"))?,
    };
    Ok((host.to_string(), port))
}

/// Decodes `%XX` escapes (passwords may contain `@`, `:` or `/`).
pub(super) fn percent_decode(s: &str) -> Result<String, UrlError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or(UrlError("bad % escape"))?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| UrlError("bad % escape"))?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| UrlError("credentials must be UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        let u: RedisUrl = "redis://127.0.0.1:6380".parse().unwrap();
        assert_eq!((u.host.as_str(), u.port, u.db), ("127.0.0.1", 6380, 0));
        assert!(u.username.is_none() && u.password.is_none());
        let u: RedisUrl = "redis://:s%40cret@redis/2".parse().unwrap();
        assert_eq!((u.host.as_str(), u.port, u.db), ("redis", 6379, 2));
        assert_eq!(u.password.as_deref(), Some("s@cret"));
        let u: RedisUrl = "redis://app:pw@[::1]:7000/3".parse().unwrap();
        assert_eq!(u.username.as_deref(), Some("app"));
        assert_eq!((u.host.as_str(), u.port, u.db), ("::1", 7000, 3));
    }

    #[test]
    fn rejects_bad_urls_clearly() {
        for bad in [
            "http://x",
            "redis://",
            "redis://h:port",
            "redis://h:1/db",
            "redis://:%zz@h",
            "redis://[::1:6379",
        ] {
            assert!(bad.parse::<RedisUrl>().is_err(), "{bad}");
        }
    }

    #[test]
    fn cluster_seeds_take_the_url_credentials() {
        let c: ClusterSeeds = "redis://app:p%40w@10.0.0.1:7000,h2:7001".parse().unwrap();
        assert_eq!(c.seeds.len(), 2);
        assert_eq!((c.url.host.as_str(), c.url.port), ("10.0.0.1", 7000));
        assert_eq!(c.url.password.as_deref(), Some("p@w"));
        let other = c.url_of(&c.seeds[1]);
        assert_eq!((other.host.as_str(), other.port), ("h2", 7001));
        assert_eq!(other.username.as_deref(), Some("app"));
        let bare: ClusterSeeds = "h:1".parse().unwrap();
        assert!(bare.url.password.is_none());
        for bad in ["", "h", "h:0", "redis://h:1/2", "h:1,:2"] {
            assert!(bad.parse::<ClusterSeeds>().is_err(), "{bad}");
        }
    }

    #[test]
    fn rediss_means_tls_for_the_url_and_every_cluster_node() {
        let u: RedisUrl = "rediss://:pw@cache.example:6380/1".parse().unwrap();
        assert!(u.tls);
        assert_eq!((u.host.as_str(), u.port, u.db), ("cache.example", 6380, 1));
        assert_eq!(u.to_string(), "rediss://:***@cache.example:6380/1");
        assert!(!"redis://h:1".parse::<RedisUrl>().unwrap().tls);
        let c: ClusterSeeds = "rediss://a:b@h1:7000,h2:7001".parse().unwrap();
        assert!(c.url.tls && c.url_of(&c.seeds[1]).tls);
        assert!(!"h1:7000".parse::<ClusterSeeds>().unwrap().url.tls);
        // A scheme on every seed is fine when it is the same; mixed is
        // refused (no seed may be a host named `rediss://h`).
        let c: ClusterSeeds = "rediss://h1:7000,rediss://h2:7001".parse().unwrap();
        assert_eq!(c.seeds[1].host, "h2");
        for mixed in [
            "redis://h1:7000,rediss://h2:7001",
            "rediss://h1:7000,redis://h2:7001",
            "h1:1,rediss://h2:2",
        ] {
            let e = mixed.parse::<ClusterSeeds>().unwrap_err();
            assert!(e.to_string().contains("mixed"), "{mixed}: {e}");
        }
    }

    #[test]
    fn display_hides_the_password() {
        let u: RedisUrl = "redis://app:hunter2@h:1/0".parse().unwrap();
        assert_eq!(u.to_string(), "redis://app:***@h:1/0");
        assert!(!format!("{u:?}").contains("hunter2"));
    }
}
