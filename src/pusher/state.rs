//! What one worker's Pusher connections share: the `socket_id` tag and
//! per-app connection counts (presence members are the worker's shared
//! presence, `crate::presence`).

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};

use crate::auth::TokenBucket;
use crate::stats::PusherAppStats;

/// A worker's shared Pusher state.
pub struct PusherState {
    /// This worker's part of every `socket_id` it hands out.
    pub tag: u32,
    /// Counters per app (index as in the configuration).
    apps: Vec<PusherAppStats>,
    /// Upgrades not yet started, by connection id: the app's index, or
    /// the close code to refuse with.
    pub pending: HashMap<usize, Result<usize, u16>>,
    /// Redis mode: (app index, channel) this instance has an occupancy
    /// entry for in Redis — refreshed until its count here is 0. At most
    /// the worker's Pusher channels.
    pub occupancy_tracked: HashSet<(usize, String)>,
    /// Redis mode: (app index, channel) whose count here changed since
    /// the last tick without its first or last subscriber (written then).
    pub occupancy_dirty: HashSet<(usize, String)>,
}

/// One Pusher connection's state.
pub struct Session {
    /// The app (index in the configuration).
    pub app: usize,
    /// The hub's connection serial.
    pub serial: u64,
    /// `"{tag}.{serial}"`.
    pub socket_id: String,
    /// Subscribed channels (Pusher names) → the presence `user_id`.
    pub channels: HashMap<String, Option<String>>,
    /// `--pusher-client-event-rate`.
    pub bucket: TokenBucket,
    /// `--pusher-occupancy-rate`: subscriptions that may queue webhooks.
    pub occupancy: TokenBucket,
    /// The user signed in with `pusher:signin`.
    pub user: Option<String>,
}

impl PusherState {
    /// Nothing open yet, for `apps` apps.
    pub fn new(apps: usize) -> Self {
        // Random, so the socket ids of two instances (Redis mode) differ.
        let tag = RandomState::new().build_hasher().finish() as u32 % 1_000_000_000;
        PusherState {
            tag,
            apps: vec![PusherAppStats::default(); apps],
            pending: HashMap::new(),
            occupancy_tracked: HashSet::new(),
            occupancy_dirty: HashSet::new(),
        }
    }

    /// Counts a new connection of `app` unless it already has `max`.
    pub fn admit(&mut self, app: usize, max: usize) -> bool {
        let n = &mut self.apps[app].connections;
        if *n >= max as u64 {
            return false;
        }
        *n += 1;
        true
    }

    /// A connection of `app` ended.
    pub fn release(&mut self, app: usize) {
        let n = &mut self.apps[app].connections;
        *n = n.saturating_sub(1);
    }

    /// Open connections of `app`.
    pub fn connections(&self, app: usize) -> u64 {
        self.apps[app].connections
    }

    /// `app`'s counters, to count in.
    pub fn app_mut(&mut self, app: usize) -> &mut PusherAppStats {
        &mut self.apps[app]
    }

    /// Every app's counters, in configuration order.
    pub fn apps(&self) -> &[PusherAppStats] {
        &self.apps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apps_are_admitted_up_to_their_bound() {
        let mut s = PusherState::new(2);
        assert!(s.admit(0, 1));
        assert!(!s.admit(0, 1));
        assert!(s.admit(1, 1), "apps are counted apart");
        s.release(0);
        assert_eq!(s.connections(0), 0);
        assert!(s.admit(0, 1));
    }
}
