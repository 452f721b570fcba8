//! What one worker's Pusher connections share: the `socket_id` tag and
//! per-app connection counts (presence members are the worker's shared
//! presence, `crate::presence`).

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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
    /// Several workers without Redis: the hub names of the Pusher
    /// channels this worker owns that it announced occupied (each
    /// webhook is sent by the channel's owner: `server::pusher::owner`).
    pub occupied: HashSet<String>,
    /// Several workers: the process's first tag and how many workers
    /// (worker `i`'s tag is the first plus `i`), and each app's
    /// connections on every worker.
    process: Option<(u32, usize, AppConnections)>,
}

/// Each app's open connections on every worker of a process together.
pub type AppConnections = Arc<[AtomicU64]>;

/// A random first tag for a process of several workers: a multiple of
/// 64 (at most 64 workers), so each worker's tag is it plus its index.
pub fn process_tag() -> u32 {
    (random() % (1_000_000_000 / 64)) * 64
}

fn random() -> u32 {
    RandomState::new().build_hasher().finish() as u32
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
        let tag = random() % 1_000_000_000;
        PusherState {
            tag,
            apps: vec![PusherAppStats::default(); apps],
            pending: HashMap::new(),
            occupancy_tracked: HashSet::new(),
            occupancy_dirty: HashSet::new(),
            occupied: HashSet::new(),
            process: None,
        }
    }

    /// Makes this the state of worker `me` of `workers` in a process
    /// whose first tag is `first`, counting each app's connections in
    /// `apps` with the other workers'.
    pub fn join_process(
        &mut self,
        (first, me, workers): (u32, usize, usize),
        apps: AppConnections,
    ) {
        self.tag = first + me as u32;
        self.process = Some((first, workers, apps));
    }

    /// The worker and the connection serial a `socket_id` of this
    /// process names (this worker's alone with one worker).
    pub fn socket_of(&self, socket_id: &str) -> Option<(usize, u64)> {
        let (t, s) = socket_id.split_once('.')?;
        let (t, serial) = (t.parse::<u32>().ok()?, s.parse().ok()?);
        match &self.process {
            Some((first, n, _)) if t >= *first && ((t - first) as usize) < *n => {
                Some(((t - first) as usize, serial))
            }
            _ => (t == self.tag).then_some((0, serial)),
        }
    }

    /// Counts a new connection of `app` unless it already has `max`.
    /// With several workers the bound is the process's: every worker's
    /// connections of `app` count.
    pub fn admit(&mut self, app: usize, max: usize) -> bool {
        if let Some((_, _, all)) = &self.process {
            if all[app].fetch_add(1, Ordering::Relaxed) >= max as u64 {
                all[app].fetch_sub(1, Ordering::Relaxed);
                return false;
            }
        } else if self.apps[app].connections >= max as u64 {
            return false;
        }
        self.apps[app].connections += 1;
        true
    }

    /// A connection of `app` ended.
    pub fn release(&mut self, app: usize) {
        let n = &mut self.apps[app].connections;
        if *n > 0 {
            if let Some((_, _, all)) = &self.process {
                all[app].fetch_sub(1, Ordering::Relaxed);
            }
        }
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

    #[test]
    fn workers_of_a_process_share_the_bound_and_know_each_others_sockets() {
        let all: AppConnections = Arc::new([AtomicU64::new(0)]);
        let first = process_tag();
        let (mut a, mut b) = (PusherState::new(1), PusherState::new(1));
        a.join_process((first, 0, 2), all.clone());
        b.join_process((first, 1, 2), all.clone());
        assert!(a.admit(0, 2));
        assert!(b.admit(0, 2));
        assert!(!a.admit(0, 2), "the bound is the process's");
        assert_eq!(a.connections(0), 1, "each worker still counts its own");
        b.release(0);
        b.release(0); // nothing left here: the process's count stays
        assert!(a.admit(0, 2));
        assert!(!b.admit(0, 2));
        let id = crate::pusher::socket_id(b.tag, 9);
        assert_eq!(a.socket_of(&id), Some((1, 9)));
        assert_eq!(a.socket_of(&format!("{}.9", first + 2)), None);
        assert_eq!(PusherState::new(1).socket_of(&id), None);
    }
}
