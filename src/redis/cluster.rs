//! Redis Cluster, sans-I/O: which slot a key or channel lives in (CRC16
//! with `{hash tags}`), the slot map built from `CLUSTER SLOTS`, and the
//! redirections a node answers with (`MOVED`, `ASK`).
//!
//! Sharded pub/sub (`SPUBLISH`/`SSUBSCRIBE`, Redis 7) routes a channel
//! exactly like a key: to the master that owns its slot. So one function
//! places both the history keys of a channel and the channel itself, and a
//! channel's keys carry a hash tag on the channel name to land with it.

use std::net::SocketAddr;

use bytes::Bytes;

use super::resp::Reply;
use redis_protocol::resp2::types::BytesFrame;

/// Slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// CRC16/XMODEM (polynomial 0x1021, initial 0), the checksum Redis Cluster
/// uses (cluster spec, "Keys distribution model").
pub fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The part of `key` that is hashed: the bytes between the first `{` and
/// the first `}` after it, when that is not empty; else the whole key.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// The slot of a key or a sharded channel.
pub fn slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) % SLOTS
}

/// The slot of a corecast channel's sharded name `prefix{channel}`
/// (`prefix` has no braces), without building the name: the hash tag is
/// the channel up to its first `}`, or the whole name when that is empty.
pub fn channel_slot(prefix: &str, channel: &str) -> u16 {
    match channel.split('}').next() {
        Some(tag) if !tag.is_empty() => crc16(tag.as_bytes()) % SLOTS,
        _ => slot(format!("{prefix}{{{channel}}}").as_bytes()),
    }
}

/// The slot of a queued command's key (`EVALSHA sha n key ...`: the
/// first key; any other command: its first argument), to send it on
/// when the master that held it lost its slots.
pub fn command_slot(cmd: &[u8]) -> Option<u16> {
    let mut buf = bytes::BytesMut::from(cmd);
    let limits = super::resp::Limits {
        max_len: cmd.len(),
        ..Default::default()
    };
    let Ok(Some(BytesFrame::Array(args))) = super::resp::decode(&mut buf, &limits) else {
        return None;
    };
    let arg = |i: usize| match args.get(i) {
        Some(BytesFrame::BulkString(b)) => Some(b.clone()),
        _ => None,
    };
    let verb = arg(0)?;
    let key = if verb.eq_ignore_ascii_case(b"EVALSHA") || verb.eq_ignore_ascii_case(b"EVAL") {
        arg(3)?
    } else {
        arg(1)?
    };
    Some(slot(&key))
}

/// A node's address as the cluster announces it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Node {
    /// Host (an IP, or a host name when the cluster announces names).
    pub host: String,
    /// Port.
    pub port: u16,
}

impl Node {
    /// `host:port`, for logs and for connecting.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// Which master serves each slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotMap {
    /// Distinct masters, in the order first seen.
    pub masters: Vec<Node>,
    /// Index into `masters` per slot (`u16::MAX`: not covered).
    owner: Vec<u16>,
}

/// Why a topology reply was not usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopologyError {
    /// Not the shape `CLUSTER SLOTS` answers with.
    Malformed(&'static str),
    /// Some slots have no master (the cluster is not fully up).
    Uncovered(u16),
}

impl std::fmt::Display for TopologyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TopologyError::Malformed(why) => write!(f, "malformed topology reply: {why}"),
            TopologyError::Uncovered(n) => write!(f, "{n} slots have no master"),
        }
    }
}

/// Most masters a slot map holds (a hostile reply cannot make it grow
/// past this: each master costs two connections).
pub const MAX_MASTERS: usize = 1000;

impl SlotMap {
    /// Parses a `CLUSTER SLOTS` reply: `[[start, end, [host, port, id,
    /// ...], replicas...], ...]`. An empty host means "the address you
    /// asked" (`seed`). Every slot must be covered.
    pub fn from_cluster_slots(reply: &Reply, seed: &Node) -> Result<SlotMap, TopologyError> {
        let BytesFrame::Array(ranges) = reply else {
            return Err(TopologyError::Malformed("not an array"));
        };
        let mut map = SlotMap::empty();
        for range in ranges {
            let BytesFrame::Array(parts) = range else {
                return Err(TopologyError::Malformed("a range is not an array"));
            };
            let (start, end) = match (parts.first(), parts.get(1)) {
                (Some(BytesFrame::Integer(s)), Some(BytesFrame::Integer(e))) => (*s, *e),
                _ => return Err(TopologyError::Malformed("a range has no bounds")),
            };
            map.assign(start, end, node(parts.get(2), seed)?)?;
        }
        map.complete()
    }

    /// Parses a `CLUSTER SHARDS` reply (Redis 7): per shard a map with
    /// `slots` (a flat list of start, end pairs) and `nodes` (maps with
    /// `role`, `endpoint` or `ip`, `port`); the `master` serves the slots.
    pub fn from_cluster_shards(reply: &Reply, seed: &Node) -> Result<SlotMap, TopologyError> {
        SlotMap::from_cluster_shards_for(reply, seed, false)
    }

    /// [`SlotMap::from_cluster_shards`] for a client that connects over
    /// TLS (`rediss://`, `tls`): a node's `tls-port` before its `port`
    /// (a node with both serves plain TCP on `port`).
    pub fn from_cluster_shards_for(
        reply: &Reply,
        seed: &Node,
        tls: bool,
    ) -> Result<SlotMap, TopologyError> {
        let BytesFrame::Array(shards) = reply else {
            return Err(TopologyError::Malformed("not an array"));
        };
        let mut map = SlotMap::empty();
        for shard in shards {
            let (Some(BytesFrame::Array(slots)), Some(BytesFrame::Array(nodes))) =
                (field(shard, "slots"), field(shard, "nodes"))
            else {
                return Err(TopologyError::Malformed("a shard without slots or nodes"));
            };
            if slots.is_empty() {
                continue; // A shard that serves nothing (being emptied).
            }
            let master = nodes
                .iter()
                .find(|n| matches!(field(n, "role"), Some(BytesFrame::BulkString(r)) if &r[..] == b"master"))
                .ok_or(TopologyError::Malformed("a shard without a master"))?;
            let host = ["endpoint", "ip"]
                .iter()
                .find_map(|k| match field(master, k) {
                    Some(BytesFrame::BulkString(h)) => Some(h.clone()),
                    _ => None,
                });
            let keys = match tls {
                true => ["tls-port", "port"],
                false => ["port", "tls-port"],
            };
            let port = keys.iter().find_map(|k| field(master, k));
            let as_slots = BytesFrame::Array(vec![
                BytesFrame::BulkString(host.unwrap_or_default()),
                port.cloned().unwrap_or(BytesFrame::Null),
            ]);
            let master = node(Some(&as_slots), seed)?;
            for pair in slots.chunks(2) {
                match pair {
                    [BytesFrame::Integer(s), BytesFrame::Integer(e)] => {
                        map.assign(*s, *e, master.clone())?
                    }
                    _ => return Err(TopologyError::Malformed("slots are not start, end pairs")),
                }
            }
        }
        map.complete()
    }

    fn empty() -> SlotMap {
        SlotMap {
            masters: Vec::new(),
            owner: vec![u16::MAX; SLOTS as usize],
        }
    }

    /// Slots `start..=end` are served by `master`.
    fn assign(&mut self, start: i64, end: i64, master: Node) -> Result<(), TopologyError> {
        if !(0 <= start && start <= end && end < SLOTS as i64) {
            return Err(TopologyError::Malformed("slot bounds out of range"));
        }
        let idx = match self.masters.iter().position(|m| *m == master) {
            Some(i) => i,
            None if self.masters.len() < MAX_MASTERS => {
                self.masters.push(master);
                self.masters.len() - 1
            }
            None => return Err(TopologyError::Malformed("too many masters")),
        };
        for s in start..=end {
            self.owner[s as usize] = idx as u16;
        }
        Ok(())
    }

    /// The map, if every slot has a master.
    fn complete(self) -> Result<SlotMap, TopologyError> {
        let uncovered = self.owner.iter().filter(|&&o| o == u16::MAX).count();
        if uncovered > 0 {
            return Err(TopologyError::Uncovered(uncovered as u16));
        }
        Ok(self)
    }

    /// Index (into `masters`) of the master serving `slot`.
    pub fn owner(&self, slot: u16) -> usize {
        self.owner[(slot % SLOTS) as usize] as usize
    }

    /// The master serving `key` (or sharded channel).
    pub fn master_of(&self, key: &[u8]) -> &Node {
        &self.masters[self.owner(slot(key))]
    }

    /// The slots `master` serves, as `(start, end)` ranges.
    pub fn ranges_of(&self, master: usize) -> Vec<(u16, u16)> {
        let mut out: Vec<(u16, u16)> = Vec::new();
        for (s, &o) in self.owner.iter().enumerate() {
            if o as usize != master {
                continue;
            }
            match out.last_mut() {
                Some(last) if last.1 + 1 == s as u16 => last.1 = s as u16,
                _ => out.push((s as u16, s as u16)),
            }
        }
        out
    }
}

/// The value after `name` in a flat `[name, value, ...]` array.
fn field<'a>(map: &'a BytesFrame, name: &str) -> Option<&'a BytesFrame> {
    let BytesFrame::Array(items) = map else {
        return None;
    };
    items.chunks(2).find_map(|kv| match kv {
        [BytesFrame::BulkString(k), v] if &k[..] == name.as_bytes() => Some(v),
        _ => None,
    })
}

fn node(part: Option<&BytesFrame>, seed: &Node) -> Result<Node, TopologyError> {
    let Some(BytesFrame::Array(n)) = part else {
        return Err(TopologyError::Malformed("a range has no master"));
    };
    let host = match n.first() {
        Some(BytesFrame::BulkString(h)) => std::str::from_utf8(h)
            .map_err(|_| TopologyError::Malformed("host is not UTF-8"))?
            .to_string(),
        _ => return Err(TopologyError::Malformed("master without host")),
    };
    let port = match n.get(1) {
        Some(BytesFrame::Integer(p)) if (1..=65535).contains(p) => *p as u16,
        _ => return Err(TopologyError::Malformed("master without a valid port")),
    };
    // "?" / "" : the node does not know its own address; use the seed's.
    let host = if host.is_empty() || host == "?" {
        seed.host.clone()
    } else {
        host
    };
    Ok(Node { host, port })
}

/// A node's answer that the slot lives elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redirect {
    /// `MOVED slot host:port`: the slot's owner changed for good; refresh
    /// the map and send there.
    Moved {
        /// The slot.
        slot: u16,
        /// Its new owner.
        node: Node,
    },
    /// `ASK slot host:port`: during a migration, send this one command to
    /// `node` preceded by `ASKING`; the map stays as it is.
    Ask {
        /// The slot.
        slot: u16,
        /// Where to ask.
        node: Node,
    },
}

/// Parses an error reply's text as a redirection, if it is one.
pub fn redirect(error: &str) -> Option<Redirect> {
    let mut it = error.split_ascii_whitespace();
    let kind = it.next()?;
    let slot: u16 = it.next()?.parse().ok().filter(|s| *s < SLOTS)?;
    let addr = it.next()?;
    let (host, port) = addr.rsplit_once(':')?;
    let node = Node {
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port: port.parse().ok().filter(|p| *p > 0)?,
    };
    match kind {
        "MOVED" => Some(Redirect::Moved { slot, node }),
        "ASK" => Some(Redirect::Ask { slot, node }),
        _ => None,
    }
}

/// A hash tag whose slot is served by `master` in `map` — e.g. to give
/// each shard a readiness canary channel it owns. Tries `prefix0`,
/// `prefix1`, …; with 16,384 slots over at most [`MAX_MASTERS`] masters
/// a hit comes within a few thousand tries.
pub fn tag_for(map: &SlotMap, master: usize, prefix: &str) -> Option<String> {
    (0..1_000_000u32)
        .map(|i| format!("{prefix}{i}"))
        .find(|t| map.owner(slot(t.as_bytes())) == master)
}

/// The channels of a sharded `SUBSCRIBE` grouped by slot: Redis refuses
/// (CROSSSLOT) a command whose channels are in different slots.
pub fn group_by_slot<'a>(channels: impl IntoIterator<Item = &'a [u8]>) -> Vec<Vec<&'a [u8]>> {
    let mut groups: std::collections::BTreeMap<u16, Vec<&[u8]>> = Default::default();
    for c in channels {
        groups.entry(slot(c)).or_default().push(c);
    }
    groups.into_values().collect()
}

/// Parses a seed list `host:port[,host:port...]`.
pub fn seeds(list: &str) -> Result<Vec<Node>, String> {
    let nodes: Result<Vec<Node>, String> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            let (host, port) = s
                .rsplit_once(':')
                .ok_or_else(|| format!("`{s}` is not host:port"))?;
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("`{s}`: invalid port"))?;
            if host.is_empty() {
                return Err(format!("`{s}`: empty host"));
            }
            Ok(Node {
                host: host.to_string(),
                port,
            })
        })
        .collect();
    let nodes = nodes?;
    if nodes.is_empty() {
        return Err("no seed nodes".into());
    }
    Ok(nodes)
}

/// A resolved seed, when the host is an IP literal.
pub fn literal(node: &Node) -> Option<SocketAddr> {
    format!("{}:{}", node.host, node.port).parse().ok()
}

/// The bytes of a bulk-string reply, if it is one.
pub fn bulk(reply: &Reply) -> Option<&Bytes> {
    match reply {
        BytesFrame::BulkString(b) => Some(b),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(i: i64) -> BytesFrame {
        BytesFrame::Integer(i)
    }
    fn bulk_s(s: &str) -> BytesFrame {
        BytesFrame::BulkString(Bytes::from(s.to_string()))
    }
    fn range(start: i64, end: i64, host: &str, port: i64) -> BytesFrame {
        BytesFrame::Array(vec![
            int(start),
            int(end),
            BytesFrame::Array(vec![bulk_s(host), int(port), bulk_s("id")]),
            BytesFrame::Array(vec![bulk_s(host), int(port + 3), bulk_s("replica")]),
        ])
    }
    fn seed() -> Node {
        Node {
            host: "10.0.0.9".into(),
            port: 7000,
        }
    }

    #[test]
    fn cluster_shards_replies_become_the_same_map() {
        let shard = |slots: Vec<i64>, host: &str, port: i64| {
            let mut nodes = vec![BytesFrame::Array(vec![
                bulk_s("id"),
                bulk_s("r1"),
                bulk_s("port"),
                int(port + 3),
                bulk_s("endpoint"),
                bulk_s(host),
                bulk_s("role"),
                bulk_s("replica"),
            ])];
            nodes.push(BytesFrame::Array(vec![
                bulk_s("port"),
                int(port),
                bulk_s("ip"),
                bulk_s("10.9.9.9"),
                bulk_s("endpoint"),
                bulk_s(host),
                bulk_s("role"),
                bulk_s("master"),
            ]));
            BytesFrame::Array(vec![
                bulk_s("slots"),
                BytesFrame::Array(slots.into_iter().map(int).collect()),
                bulk_s("nodes"),
                BytesFrame::Array(nodes),
            ])
        };
        let reply = BytesFrame::Array(vec![
            shard(vec![0, 100, 200, 16383], "a", 7000),
            shard(vec![101, 199], "?", 7001),
            shard(vec![], "idle", 7002),
        ]);
        let map = SlotMap::from_cluster_shards(&reply, &seed()).unwrap();
        let slots = BytesFrame::Array(vec![
            range(0, 100, "a", 7000),
            range(101, 199, "10.0.0.9", 7001),
            range(200, 16383, "a", 7000),
        ]);
        assert_eq!(map, SlotMap::from_cluster_slots(&slots, &seed()).unwrap());
        let gap = BytesFrame::Array(vec![shard(vec![0, 100], "a", 7000)]);
        assert_eq!(
            SlotMap::from_cluster_shards(&gap, &seed()),
            Err(TopologyError::Uncovered(SLOTS - 101))
        );
        let odd = BytesFrame::Array(vec![shard(vec![0], "a", 7000)]);
        assert!(SlotMap::from_cluster_shards(&odd, &seed()).is_err());
    }

    #[test]
    fn a_tls_client_takes_the_tls_port_of_a_node_with_both() {
        let master = BytesFrame::Array(vec![
            bulk_s("port"),
            int(7000),
            bulk_s("tls-port"),
            int(8000),
            bulk_s("endpoint"),
            bulk_s("a"),
            bulk_s("role"),
            bulk_s("master"),
        ]);
        let reply = BytesFrame::Array(vec![BytesFrame::Array(vec![
            bulk_s("slots"),
            BytesFrame::Array(vec![int(0), int(16383)]),
            bulk_s("nodes"),
            BytesFrame::Array(vec![master]),
        ])]);
        let port_of = |tls| {
            let map = SlotMap::from_cluster_shards_for(&reply, &seed(), tls).unwrap();
            let all = BytesFrame::Array(vec![range(0, 16383, "a", if tls { 8000 } else { 7000 })]);
            map == SlotMap::from_cluster_slots(&all, &seed()).unwrap()
        };
        assert!(port_of(false) && port_of(true));
    }

    #[test]
    fn channel_slots_match_the_sharded_names() {
        for ch in ["news", "a}b", "}x", "", "a{b}c", "chan-17"] {
            let name = format!("cc:{{{ch}}}");
            assert_eq!(channel_slot("cc:", ch), slot(name.as_bytes()), "{ch:?}");
        }
        let cmd = crate::redis::resp::command(&[b"SPUBLISH", b"cc:{news}", b"x"]);
        assert_eq!(command_slot(&cmd), Some(slot(b"news")));
        let eval = crate::redis::resp::command(&[b"EVALSHA", b"f00", b"2", b"k{news}", b"m"]);
        assert_eq!(command_slot(&eval), Some(slot(b"news")));
        assert_eq!(command_slot(b"garbage"), None);
    }

    #[test]
    fn crc16_and_slots_match_the_cluster_spec() {
        // The spec's test vector, and slots Redis itself reports
        // (`CLUSTER KEYSLOT`).
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"bar"), 5061);
        assert_eq!(slot(b""), 0);
        // Hash tags: only the first {...} with content counts.
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
        assert_eq!(slot(b"foo{bar}{zap}"), slot(b"bar"));
    }

    #[test]
    fn cluster_slots_become_a_complete_map() {
        let reply = BytesFrame::Array(vec![
            range(0, 5460, "127.0.0.1", 7000),
            range(5461, 10922, "127.0.0.1", 7001),
            range(10923, 16383, "", 7002),
        ]);
        let map = SlotMap::from_cluster_slots(&reply, &seed()).unwrap();
        assert_eq!(map.masters.len(), 3);
        assert_eq!(map.master_of(b"foo").port, 7002); // slot 12182
        assert_eq!(
            map.master_of(b"foo").host,
            "10.0.0.9",
            "empty host = the seed's"
        );
        assert_eq!(map.master_of(b"bar").port, 7000); // slot 5061
        assert_eq!(map.ranges_of(1), vec![(5461, 10922)]);
        let t = tag_for(&map, 2, "canary").unwrap();
        assert_eq!(map.owner(slot(t.as_bytes())), 2);
    }

    #[test]
    fn incomplete_or_hostile_topologies_are_refused() {
        let half = BytesFrame::Array(vec![range(0, 8191, "a", 1)]);
        assert_eq!(
            SlotMap::from_cluster_slots(&half, &seed()),
            Err(TopologyError::Uncovered(8192))
        );
        for bad in [
            BytesFrame::Integer(1),
            BytesFrame::Array(vec![int(1)]),
            BytesFrame::Array(vec![range(0, 16384, "a", 1)]),
            BytesFrame::Array(vec![range(5, 4, "a", 1)]),
            BytesFrame::Array(vec![range(0, 16383, "a", 0)]),
            BytesFrame::Array(vec![BytesFrame::Array(vec![int(0), int(16383)])]),
        ] {
            assert!(
                matches!(
                    SlotMap::from_cluster_slots(&bad, &seed()),
                    Err(TopologyError::Malformed(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn redirections_are_parsed() {
        assert_eq!(
            redirect("MOVED 3999 127.0.0.1:6381"),
            Some(Redirect::Moved {
                slot: 3999,
                node: Node {
                    host: "127.0.0.1".into(),
                    port: 6381
                }
            })
        );
        assert_eq!(
            redirect("ASK 3999 [::1]:6381"),
            Some(Redirect::Ask {
                slot: 3999,
                node: Node {
                    host: "::1".into(),
                    port: 6381
                }
            })
        );
        for not in [
            "ERR wrong",
            "MOVED x 1:2",
            "MOVED 20000 a:1",
            "MOVED 1 a",
            "ASK 1 a:0",
            "",
        ] {
            assert_eq!(redirect(not), None, "{not}");
        }
    }

    #[test]
    fn sharded_subscribes_group_channels_by_slot() {
        let chans: Vec<&[u8]> = vec![b"{a}x", b"foo", b"{a}y", b"bar"];
        let groups = group_by_slot(chans);
        assert_eq!(groups.len(), 3);
        assert!(groups
            .iter()
            .any(|g| g == &vec![&b"{a}x"[..], &b"{a}y"[..]]));
        for g in &groups {
            assert!(g.iter().all(|c| slot(c) == slot(g[0])));
        }
    }

    #[test]
    fn seed_lists() {
        let s = seeds("10.0.0.1:7000, redis-a:7001").unwrap();
        assert_eq!(s[1].addr(), "redis-a:7001");
        assert!(literal(&s[0]).is_some() && literal(&s[1]).is_none());
        for bad in ["", "a", "a:0", ":7000", "a:x"] {
            assert!(seeds(bad).is_err(), "{bad}");
        }
    }
}
