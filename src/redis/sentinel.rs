//! Redis Sentinel, sans-I/O (issue 44): the `redis+sentinel://` URL, the
//! questions a link asks the Sentinels and how their answers are read.
//!
//! A Sentinel deployment is one master with replicas watched by several
//! Sentinels, which elect a replica in the master's place when it fails.
//! The link asks the Sentinels, in order, for the master's address
//! (`SENTINEL get-master-addr-by-name NAME`), checks with `ROLE` that
//! what it reached is a master (a Sentinel may be behind, or lie), and
//! follows `+switch-master` (published on each Sentinel) to the new one.
//!
//! The URL: `redis+sentinel://[user:password@]host:port[,host:port…][/db]?master=NAME`
//! (`rediss+sentinel://`: the data nodes over TLS). The credentials are
//! the data nodes'; the Sentinels' own `AUTH` comes from the query's
//! `sentinel_user` and `sentinel_password` (percent-encoded), as
//! Centrifugo and redis-py keep them apart.

use bytes::Bytes;
use redis_protocol::resp2::types::BytesFrame;

use super::cluster::Node;
use super::resp;
use super::url::{RedisUrl, UrlError};

/// Default Sentinel port.
pub const SENTINEL_PORT: u16 = 26379;
/// Most Sentinels a URL may list.
pub const MAX_SENTINELS: usize = 16;
/// Longest master name.
pub const MAX_MASTER_NAME: usize = 128;
/// The channel Sentinels announce a new master on.
pub const SWITCH_MASTER: &str = "+switch-master";

/// A parsed `redis+sentinel://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelUrl {
    /// The Sentinels, asked in this order.
    pub sentinels: Vec<Node>,
    /// The master's name as the Sentinels know it (`?master=`).
    pub master: String,
    /// The data nodes' credentials, database and TLS (its host and port
    /// are the master's once known; a placeholder until then).
    pub data: RedisUrl,
    /// The Sentinels' own `AUTH` user and password.
    pub sentinel_auth: (Option<String>, Option<String>),
}

impl std::str::FromStr for SentinelUrl {
    type Err = UrlError;

    fn from_str(s: &str) -> Result<Self, UrlError> {
        let shape =
            "expected redis+sentinel://[user:password@]host:port[,host:port...][/db]?master=NAME";
        let (tls, rest) = match s.strip_prefix("rediss+sentinel://") {
            Some(rest) => (true, rest),
            None => (
                false,
                s.strip_prefix("redis+sentinel://").ok_or(UrlError(shape))?,
            ),
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, db) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let sentinels = sentinel_nodes(hosts)?;
        let mut master = None;
        let (mut s_user, mut s_pass) = (None, None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = super::url::percent_decode(v)?;
            match k {
                "master" | "sentinel_master_name" => master = Some(v),
                "sentinel_user" => s_user = Some(v),
                "sentinel_password" => s_pass = Some(v),
                _ => {
                    return Err(UrlError(
                        "unknown query parameter (master, sentinel_user, sentinel_password)",
                    ))
                }
            }
        }
        let master = master
            .filter(|m| !m.is_empty())
            .ok_or(UrlError("missing ?master=NAME"))?;
        if master.len() > MAX_MASTER_NAME || master.contains(char::is_whitespace) {
            return Err(UrlError("a master name is 1-128 characters without spaces"));
        }
        // The data nodes' URL: their credentials and database, the first
        // Sentinel's address as a placeholder (never dialed as a master).
        let scheme = if tls { "rediss" } else { "redis" };
        let first = sentinels[0].addr();
        let data = match (userinfo, db) {
            (Some(u), "") => format!("{scheme}://{u}@{first}"),
            (Some(u), d) => format!("{scheme}://{u}@{first}/{d}"),
            (None, "") => format!("{scheme}://{first}"),
            (None, d) => format!("{scheme}://{first}/{d}"),
        };
        Ok(SentinelUrl {
            sentinels,
            master,
            data: data.parse()?,
            sentinel_auth: (s_user, s_pass),
        })
    }
}

fn sentinel_nodes(hosts: &str) -> Result<Vec<Node>, UrlError> {
    let mut out = Vec::new();
    for h in hosts.split(',').map(str::trim) {
        if h.is_empty() {
            return Err(UrlError("an empty Sentinel address"));
        }
        let with_port = if h
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            && !h.ends_with(']')
        {
            h.to_string()
        } else {
            format!("{h}:{SENTINEL_PORT}")
        };
        let node = super::cluster::seeds(&with_port)
            .map_err(|_| UrlError("a Sentinel must be host:port"))?;
        out.extend(node);
    }
    if out.len() > MAX_SENTINELS {
        return Err(UrlError("at most 16 Sentinels"));
    }
    Ok(out)
}

impl SentinelUrl {
    /// The data nodes' URL at `master`'s address.
    pub fn data_at(&self, master: &Node) -> RedisUrl {
        RedisUrl {
            host: master.host.clone(),
            port: master.port,
            ..self.data.clone()
        }
    }

    /// What a connection to a Sentinel sends first: its `AUTH`, if any.
    pub fn sentinel_handshake(&self) -> Option<Bytes> {
        match &self.sentinel_auth {
            (Some(u), Some(p)) => Some(resp::command(&[b"AUTH", u.as_bytes(), p.as_bytes()])),
            (None, Some(p)) => Some(resp::command(&[b"AUTH", p.as_bytes()])),
            _ => None,
        }
    }

    /// `SENTINEL get-master-addr-by-name NAME`.
    pub fn ask_master(&self) -> Bytes {
        resp::command(&[
            b"SENTINEL",
            b"get-master-addr-by-name",
            self.master.as_bytes(),
        ])
    }
}

/// What a Sentinel answered about the master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterAnswer {
    /// The master's address.
    At(Node),
    /// This Sentinel does not know a master by that name.
    Unknown,
    /// An error reply (`NOAUTH`, `WRONGPASS`…), or not an answer.
    Failed(String),
}

/// Reads the reply to [`SentinelUrl::ask_master`].
pub fn master_answer(reply: &BytesFrame) -> MasterAnswer {
    match reply {
        BytesFrame::Null => MasterAnswer::Unknown,
        BytesFrame::Array(parts) if parts.is_empty() => MasterAnswer::Unknown,
        BytesFrame::Array(parts) => match (parts.first(), parts.get(1)) {
            (Some(BytesFrame::BulkString(h)), Some(BytesFrame::BulkString(p))) => {
                let host = String::from_utf8_lossy(h).to_string();
                match std::str::from_utf8(p).ok().and_then(|p| p.parse().ok()) {
                    Some(port) if !host.is_empty() => MasterAnswer::At(Node { host, port }),
                    _ => MasterAnswer::Failed("a master address that is not host and port".into()),
                }
            }
            _ => MasterAnswer::Failed("a master address that is not host and port".into()),
        },
        BytesFrame::Error(e) => MasterAnswer::Failed(e.to_string()),
        _ => MasterAnswer::Failed("not an answer to get-master-addr-by-name".into()),
    }
}

/// A `+switch-master` message's new master, when it is about `master`:
/// `NAME OLD-IP OLD-PORT NEW-IP NEW-PORT`.
pub fn switched_to(payload: &[u8], master: &str) -> Option<Node> {
    let text = std::str::from_utf8(payload).ok()?;
    let f: Vec<&str> = text.split(' ').collect();
    if f.len() != 5 || f[0] != master {
        return None;
    }
    Some(Node {
        host: f[3].to_string(),
        port: f[4].parse().ok()?,
    })
}

/// What `ROLE` says a server is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A master: the one to use.
    Master,
    /// A replica (`slave`) or a Sentinel: not to be written to.
    Other,
}

/// Reads `ROLE`'s reply (its first element).
pub fn role(reply: &BytesFrame) -> Option<Role> {
    let BytesFrame::Array(parts) = reply else {
        return None;
    };
    match parts.first()? {
        BytesFrame::BulkString(r) if &r[..] == b"master" => Some(Role::Master),
        BytesFrame::BulkString(_) => Some(Role::Other),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> BytesFrame {
        BytesFrame::BulkString(Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn urls_name_sentinels_master_and_both_credentials() {
        let u: SentinelUrl = "redis+sentinel://app:pw@s1:26380,s2,[::1]:26381/2?master=mymaster&sentinel_password=s%40cret"
            .parse()
            .unwrap();
        let addrs: Vec<String> = u.sentinels.iter().map(Node::addr).collect();
        assert_eq!(addrs, ["s1:26380", "s2:26379", "[::1]:26381"]);
        assert_eq!(u.master, "mymaster");
        assert_eq!(
            (
                u.data.username.as_deref(),
                u.data.password.as_deref(),
                u.data.db
            ),
            (Some("app"), Some("pw"), 2)
        );
        assert_eq!(u.sentinel_auth, (None, Some("s@cret".into())));
        let at = u.data_at(&Node {
            host: "10.0.0.5".into(),
            port: 6380,
        });
        assert_eq!(
            (at.host.as_str(), at.port, at.tls),
            ("10.0.0.5", 6380, false)
        );
        let tls: SentinelUrl = "rediss+sentinel://s1?master=m".parse().unwrap();
        assert!(tls.data.tls && tls.sentinel_handshake().is_none());
        for bad in [
            "redis://s1?master=m",
            "redis+sentinel://s1",
            "redis+sentinel://s1?master=",
            "redis+sentinel://s1?master=a%20b",
            "redis+sentinel://s1?master=m&color=red",
            "redis+sentinel://,s2?master=m",
            "redis+sentinel://s1/x?master=m",
        ] {
            assert!(bad.parse::<SentinelUrl>().is_err(), "{bad}");
        }
    }

    #[test]
    fn answers_switches_and_roles_are_read_strictly() {
        let at = BytesFrame::Array(vec![bulk("127.0.0.1"), bulk("6390")]);
        assert_eq!(
            master_answer(&at),
            MasterAnswer::At(Node {
                host: "127.0.0.1".into(),
                port: 6390
            })
        );
        assert_eq!(master_answer(&BytesFrame::Null), MasterAnswer::Unknown);
        let junk = BytesFrame::Array(vec![bulk("h"), bulk("x")]);
        assert!(matches!(master_answer(&junk), MasterAnswer::Failed(_)));
        assert_eq!(
            switched_to(b"mymaster 127.0.0.1 6390 127.0.0.1 6391", "mymaster"),
            Some(Node {
                host: "127.0.0.1".into(),
                port: 6391
            })
        );
        assert_eq!(
            switched_to(b"other 127.0.0.1 6390 127.0.0.1 6391", "mymaster"),
            None
        );
        assert_eq!(switched_to(b"mymaster 1 2 3", "mymaster"), None);
        let master = BytesFrame::Array(vec![bulk("master"), BytesFrame::Integer(0)]);
        let replica = BytesFrame::Array(vec![bulk("slave"), bulk("127.0.0.1")]);
        assert_eq!(
            (role(&master), role(&replica)),
            (Some(Role::Master), Some(Role::Other))
        );
        assert_eq!(role(&BytesFrame::Null), None);
    }
}
