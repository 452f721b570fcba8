//! Presence, sans-I/O: who is in a channel, counted per *user* (a
//! user's second connection does not join again; its last one leaving is
//! the one leave), with each member's public `info`.
//!
//! [`Presence`] is one instance's view: per channel, user → (connections,
//! info), and per connection the channels it is present in, so a closing
//! connection leaves everything at once. Embedded mode announces what it
//! says; Redis mode feeds its per-user transitions to the shared scripts
//! (`redis::presence`), which decide joins and leaves across instances.
//! Connections that never ask for presence cost nothing here.
//!
//! The wire texts of the JSON protocol (`join`, `leave`, the `presence`
//! answer) are built here too ([`event`]).

pub mod event;
mod reads;

use std::collections::{BTreeMap, HashMap};

use crate::channel::valid_channel_name;
pub use crate::stats::PresenceStats;
pub use reads::ReadLimiter;

/// Longest member `info` (a JSON object: the token's `info` claim).
pub const MAX_INFO: usize = crate::auth::MAX_INFO;
/// Longest user id (a token's `sub`).
pub const MAX_USER: usize = 128;
/// Largest `--presence-max-members` accepted (Redis mode reads a
/// channel's members in one reply, which must stay bounded).
pub const MAX_MEMBERS: usize = 10_000;
/// Most patterns in `--presence-channels`.
pub const MAX_PATTERNS: usize = 64;
/// Prefix of the internal hub channel carrying a channel's join/leave
/// events (`/` is outside the client charset, so no client can name it).
pub const EVENTS_PREFIX: &str = "presence/";

/// The message of the `presence_full` error.
pub const FULL_MESSAGE: &str = "presence channel full (--presence-max-members)";
/// The message of the `presence_off` error.
pub const OFF_MESSAGE: &str = "presence is not enabled for this channel (--presence-channels)";

/// The presence options (`--presence-*`); the defaults are in
/// `config::OPTIONS`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PresenceConfig {
    /// Channel patterns with presence (`room-*`, `lobby`, `*`); empty = off.
    pub patterns: Vec<String>,
    /// Redis mode: how long an instance's entry lives without a refresh.
    pub ttl_ms: u64,
    /// Redis mode: how often an instance refreshes its entries.
    pub refresh_ms: u64,
    /// Distinct users per channel; more are refused.
    pub max_members: usize,
    /// Join/leave events are sent only while a channel has at most this
    /// many members (above it, they would grow as N²: query instead).
    pub max_events: usize,
    /// Presence reads (`{"op":"presence"}`, `GET /presence/…`) one
    /// connection may make per second, a second's worth at once; 0 = no
    /// limit.
    pub read_rate: u32,
}

impl PresenceConfig {
    /// Whether presence is on for some channel.
    pub fn enabled(&self) -> bool {
        !self.patterns.is_empty()
    }

    /// Whether `channel` has presence: `*` matches all, `room-*` every
    /// name starting with `room-`, anything else only itself.
    pub fn covers(&self, channel: &str) -> bool {
        self.patterns.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => channel.starts_with(prefix),
            None => p == channel,
        })
    }

    /// Parses `--presence-channels` (a comma list of patterns).
    pub fn set_patterns(&mut self, list: &str) -> Result<(), String> {
        let patterns: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        if patterns.len() > MAX_PATTERNS {
            return Err(format!("at most {MAX_PATTERNS} patterns"));
        }
        for p in &patterns {
            let name = p.strip_suffix('*').unwrap_or(p);
            if !(name.is_empty() || valid_channel_name(name)) {
                return Err(format!("{p:?} is not a channel name or a prefix with *"));
            }
        }
        self.patterns = patterns;
        Ok(())
    }

    /// Whether a channel of `members` users announces joins and leaves.
    pub fn announces(&self, members: usize) -> bool {
        members <= self.max_events
    }
}

/// The internal hub channel of `channel`'s join/leave events.
pub fn events_channel(channel: &str) -> String {
    format!("{EVENTS_PREFIX}{channel}")
}

/// Whether `info` is acceptable member info: a JSON object of at most
/// [`MAX_INFO`] bytes.
pub fn valid_info(info: &str) -> bool {
    info.len() <= MAX_INFO && info.trim_start().starts_with('{')
}

/// One member as a channel sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Open connections of the user present in the channel.
    pub connections: u32,
    /// Public info (raw JSON object), if any.
    pub info: Option<String>,
}

/// What a connection joining did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    /// The user was not present: announce a join.
    User,
    /// Another connection of the user already was: nothing to announce.
    Connection,
    /// This connection already was: nothing changed.
    Already,
}

/// Why a join was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PresenceError {
    /// The channel has `--presence-max-members` users.
    Full,
}

/// A connection left a channel: `last` when it was its user's last one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    /// The channel.
    pub channel: String,
    /// The user.
    pub user: String,
    /// No connection of the user is left in the channel: announce a leave.
    pub last: bool,
}

/// Where one connection is present: (channel, user) pairs (a Pusher
/// connection may be a different user in each presence channel).
type Conn = Vec<(String, String)>;

/// One instance's members: per channel, user → [`Member`].
#[derive(Default)]
pub struct Presence {
    channels: HashMap<String, BTreeMap<String, Member>>,
    conns: HashMap<u64, Conn>,
    /// Each connection's presence reads (`--presence-read-rate`).
    pub reads: ReadLimiter,
    /// The counters.
    pub stats: PresenceStats,
}

impl Presence {
    /// Connection `conn` of `user` (with `info`) joins `channel`, unless
    /// that would make more than `max` users.
    pub fn join(
        &mut self,
        conn: u64,
        channel: &str,
        (user, info): (&str, Option<&str>),
        max: usize,
    ) -> Result<Joined, PresenceError> {
        if self.is_present(conn, channel) {
            return Ok(Joined::Already);
        }
        let users = self.channels.entry(channel.to_string()).or_default();
        let joined = if let Some(m) = users.get_mut(user) {
            m.connections += 1;
            Joined::Connection
        } else if users.len() >= max {
            if users.is_empty() {
                self.channels.remove(channel);
            }
            self.stats.presence_refused += 1;
            return Err(PresenceError::Full);
        } else {
            let info = info.map(str::to_string);
            users.insert(
                user.to_string(),
                Member {
                    connections: 1,
                    info,
                },
            );
            self.stats.presence_members += 1;
            Joined::User
        };
        let c = self.conns.entry(conn).or_default();
        c.push((channel.to_string(), user.to_string()));
        Ok(joined)
    }

    /// Whether `user` may join `channel` (known there, or room for one
    /// more within `max`).
    pub fn admits(&self, channel: &str, user: &str, max: usize) -> bool {
        self.channels
            .get(channel)
            .map_or(max > 0, |u| u.contains_key(user) || u.len() < max)
    }

    /// Connection `conn` leaves `channel`; `None` when it was not present.
    pub fn leave(&mut self, conn: u64, channel: &str) -> Option<Left> {
        let c = self.conns.get_mut(&conn)?;
        let i = c.iter().position(|(ch, _)| ch == channel)?;
        let (channel, user) = c.swap_remove(i);
        if c.is_empty() {
            self.conns.remove(&conn);
        }
        let last = self.drop_connection(&channel, &user);
        Some(Left {
            channel,
            user,
            last,
        })
    }

    /// Connection `conn` ended: it leaves every channel it was present in.
    pub fn close(&mut self, conn: u64) -> Vec<Left> {
        let Some(c) = self.conns.remove(&conn) else {
            return Vec::new();
        };
        let mut left = Vec::with_capacity(c.len());
        for (channel, user) in c {
            let last = self.drop_connection(&channel, &user);
            left.push(Left {
                channel,
                user,
                last,
            });
        }
        left
    }

    fn drop_connection(&mut self, channel: &str, user: &str) -> bool {
        let Some(users) = self.channels.get_mut(channel) else {
            return false;
        };
        let Some(m) = users.get_mut(user) else {
            return false;
        };
        m.connections -= 1;
        if m.connections > 0 {
            return false;
        }
        users.remove(user);
        if users.is_empty() {
            self.channels.remove(channel);
        }
        self.stats.presence_members -= 1;
        true
    }

    /// The members of `channel`, by user id.
    pub fn members(&self, channel: &str) -> Option<&BTreeMap<String, Member>> {
        self.channels.get(channel)
    }

    /// Distinct users in `channel`.
    pub fn count(&self, channel: &str) -> usize {
        self.channels.get(channel).map_or(0, BTreeMap::len)
    }

    /// Whether connection `conn` is present in `channel`.
    pub fn is_present(&self, conn: u64, channel: &str) -> bool {
        self.conns
            .get(&conn)
            .is_some_and(|c| c.iter().any(|(ch, _)| ch == channel))
    }

    /// Every (channel, user, member) this instance holds: what Redis mode
    /// refreshes, and re-adds after Redis lost it.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str, &Member)> {
        self.channels
            .iter()
            .flat_map(|(ch, users)| users.iter().map(move |(u, m)| (ch.as_str(), u.as_str(), m)))
    }

    /// Channels with members here.
    pub fn channels(&self) -> impl Iterator<Item = &str> {
        self.channels.keys().map(String::as_str)
    }

    /// This instance's connections of `user` in `channel`.
    pub fn connections(&self, channel: &str, user: &str) -> u32 {
        self.channels
            .get(channel)
            .and_then(|u| u.get(user))
            .map_or(0, |m| m.connections)
    }
}

#[cfg(test)]
mod tests;
