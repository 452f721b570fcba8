//! Per-client-address limits, sans-I/O: how many connections one IP
//! address may hold (`--max-connections-per-ip`) and how fast it may start
//! WebSocket handshakes (`--handshake-rate-per-ip`), with an exempt list
//! (`--per-ip-exempt`, loopback by default).
//!
//! The table is bounded: an address is tracked while it holds a
//! connection or its handshake bucket is refilling; idle entries are
//! evicted by the sweeper, and at most [`MAX_TRACKED`] addresses are
//! tracked at once.

use std::collections::HashMap;
use std::net::IpAddr;
use std::str::FromStr;

use crate::auth::TokenBucket;

/// Most addresses tracked at once. Past it (after evicting idle entries)
/// a new address is admitted untracked and counted.
pub const MAX_TRACKED: usize = 65_536;
/// An address without connections is forgotten after this long.
pub const IDLE_MS: u64 = 10_000;

/// An address range (`10.0.0.0/8`, `::1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    /// Whether `ip` is inside the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for IpNet {
    type Err = String;
    fn from_str(s: &str) -> Result<IpNet, String> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("`{s}` is not an address or CIDR range"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= max)
                .ok_or_else(|| format!("`{s}`: prefix must be 0..={max}"))?,
        };
        Ok(IpNet { addr, prefix })
    }
}

/// Parses a comma-separated list of ranges (empty = none).
pub fn parse_nets(v: &str) -> Result<Vec<IpNet>, String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::parse)
        .collect()
}

/// The per-IP settings, owned by this layer.
#[derive(Debug, Clone, Default)]
pub struct PeerConfig {
    /// Connections one address may hold (0 = unlimited).
    pub max_connections_per_ip: usize,
    /// WebSocket handshakes per second per address (0 = unlimited).
    pub handshake_rate: u32,
    /// Burst of handshakes per address.
    pub handshake_burst: u32,
    /// Addresses the limits do not apply to.
    pub exempt: Vec<IpNet>,
}

/// Why an address was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerRefusal {
    /// At `--max-connections-per-ip` (503).
    TooManyConnections,
    /// Over `--handshake-rate-per-ip` (429); retry after this many ms.
    TooFast(u64),
}

#[derive(Debug)]
struct Entry {
    connections: u32,
    handshakes: TokenBucket,
    last_ms: u64,
}

/// The table of tracked addresses.
#[derive(Debug, Default)]
pub struct Peers {
    cfg: PeerConfig,
    table: HashMap<IpAddr, Entry>,
    /// Addresses admitted without tracking because the table was full.
    pub untracked: u64,
}

impl Peers {
    /// An empty table.
    pub fn new(cfg: PeerConfig) -> Peers {
        Peers {
            cfg,
            table: HashMap::new(),
            untracked: 0,
        }
    }

    /// Addresses tracked now.
    pub fn tracked(&self) -> usize {
        self.table.len()
    }

    fn limited(&self, ip: IpAddr) -> bool {
        let c = &self.cfg;
        (c.max_connections_per_ip > 0 || c.handshake_rate > 0)
            && !c.exempt.iter().any(|n| n.contains(ip))
    }

    fn entry(&mut self, ip: IpAddr, now_ms: u64) -> Option<&mut Entry> {
        if !self.table.contains_key(&ip) && self.table.len() >= MAX_TRACKED {
            self.evict_idle(now_ms, 0);
            if self.table.len() >= MAX_TRACKED {
                self.untracked += 1;
                return None;
            }
        }
        let (rate, burst) = (self.cfg.handshake_rate, self.cfg.handshake_burst);
        let e = self.table.entry(ip).or_insert_with(|| Entry {
            connections: 0,
            handshakes: TokenBucket::new(rate, burst, now_ms),
            last_ms: now_ms,
        });
        e.last_ms = now_ms;
        Some(e)
    }

    /// A new connection from `ip`: `Ok(true)` when it was counted (call
    /// [`Peers::release`] when it ends), `Ok(false)` when it is not tracked.
    pub fn connect(&mut self, ip: IpAddr, now_ms: u64) -> Result<bool, PeerRefusal> {
        if !self.limited(ip) {
            return Ok(false);
        }
        let max = self.cfg.max_connections_per_ip;
        let Some(e) = self.entry(ip, now_ms) else {
            return Ok(false);
        };
        if max > 0 && e.connections as usize >= max {
            return Err(PeerRefusal::TooManyConnections);
        }
        e.connections += 1;
        Ok(true)
    }

    /// A counted connection from `ip` ended.
    pub fn release(&mut self, ip: IpAddr, now_ms: u64) {
        if let Some(e) = self.table.get_mut(&ip) {
            e.connections = e.connections.saturating_sub(1);
            e.last_ms = now_ms;
        }
    }

    /// A WebSocket handshake from `ip`.
    pub fn handshake(&mut self, ip: IpAddr, now_ms: u64) -> Result<(), PeerRefusal> {
        if !self.limited(ip) || self.cfg.handshake_rate == 0 {
            return Ok(());
        }
        match self.entry(ip, now_ms) {
            Some(e) => e.handshakes.take(now_ms).map_err(PeerRefusal::TooFast),
            None => Ok(()),
        }
    }

    /// Forgets addresses without connections that were last seen more than
    /// `idle_ms` ago (their handshake bucket has refilled by then).
    pub fn evict_idle(&mut self, now_ms: u64, idle_ms: u64) {
        self.table
            .retain(|_, e| e.connections > 0 || now_ms.saturating_sub(e.last_ms) < idle_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_parse_and_match() {
        let nets = parse_nets("127.0.0.0/8, ::1,10.1.2.3").unwrap();
        assert!(nets[0].contains(ip("127.9.9.9")) && !nets[0].contains(ip("128.0.0.1")));
        assert!(nets[0].contains(ip("::ffff:127.0.0.1")), "v4-mapped");
        assert!(nets[1].contains(ip("::1")) && !nets[1].contains(ip("::2")));
        assert!(nets[2].contains(ip("10.1.2.3")) && !nets[2].contains(ip("10.1.2.4")));
        assert!("0.0.0.0/0"
            .parse::<IpNet>()
            .unwrap()
            .contains(ip("8.8.8.8")));
        assert!(parse_nets("").unwrap().is_empty());
        for bad in ["10.0.0.0/33", "nope", "::1/129"] {
            assert!(bad.parse::<IpNet>().is_err(), "{bad}");
        }
    }

    #[test]
    fn connections_and_handshakes_are_limited_per_address() {
        let mut p = Peers::new(PeerConfig {
            max_connections_per_ip: 2,
            handshake_rate: 1,
            handshake_burst: 2,
            exempt: parse_nets("127.0.0.0/8").unwrap(),
        });
        let (a, b) = (ip("192.0.2.1"), ip("192.0.2.2"));
        assert_eq!(p.connect(a, 0), Ok(true));
        assert_eq!(p.connect(a, 0), Ok(true));
        assert_eq!(p.connect(a, 0), Err(PeerRefusal::TooManyConnections));
        assert_eq!(p.connect(b, 0), Ok(true), "another address");
        assert_eq!(p.connect(ip("127.0.0.1"), 0), Ok(false), "exempt");
        p.release(a, 0);
        assert_eq!(p.connect(a, 0), Ok(true));
        assert!(p.handshake(a, 0).is_ok() && p.handshake(a, 0).is_ok());
        assert_eq!(p.handshake(a, 0), Err(PeerRefusal::TooFast(1000)));
        assert!(p.handshake(a, 1000).is_ok());
        // Idle entries go; ones holding connections stay.
        let c = ip("192.0.2.3");
        p.handshake(c, 0).unwrap();
        assert_eq!(p.tracked(), 3);
        p.evict_idle(IDLE_MS + 1000, IDLE_MS);
        assert_eq!(p.tracked(), 2);
    }

    #[test]
    fn the_table_is_bounded() {
        let mut p = Peers::new(PeerConfig {
            max_connections_per_ip: 1,
            ..Default::default()
        });
        for i in 0..MAX_TRACKED as u32 {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(0x0A00_0000 + i));
            assert_eq!(p.connect(ip, 0), Ok(true));
        }
        assert_eq!(p.connect(ip("192.0.2.9"), 0), Ok(false), "untracked");
        assert_eq!((p.tracked(), p.untracked), (MAX_TRACKED, 1));
    }
}
