//! A Redis Cluster link's routing state: which shard serves each slot,
//! whether a topology read is due, and what waits for it. The task that
//! keeps it current is `topology`; the redirects that correct it are
//! `redirect`.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::shard::Queued;
use crate::redis::ClusterSeeds;

/// A command a node redirected to a master we have no shard for yet:
/// sent on once the map is refreshed.
pub(super) type Parked = (u16, Bytes, Queued, bool);

/// A link's cluster state.
pub(super) struct Cluster {
    pub(super) seeds: ClusterSeeds,
    /// Shard index per slot (empty until the first topology read).
    slot_shard: RefCell<Vec<u16>>,
    /// Why the topology is unknown or stale, for `/readyz`.
    pub(super) error: RefCell<Option<String>>,
    refresh_due: Cell<bool>,
    /// When a read was last asked for (a redirect, a moved channel, a
    /// connection error): reads stay frequent for a while after, as a
    /// reshard moves slots one by one.
    last_request: Cell<Option<Instant>>,
    waker: RefCell<Option<Waker>>,
    /// Commands waiting for the refresh (bounded by the pipelines they
    /// came from: each was accepted within a shard's byte budget).
    pub(super) parked: RefCell<Vec<Parked>>,
    /// Channels waiting for the refresh to be subscribed on their owner.
    pub(super) parked_channels: RefCell<Vec<Rc<str>>>,
    /// Redirects per channel since the last topology read (entries only
    /// for channels of ours that moved; cleared by every read).
    bounces: RefCell<HashMap<Rc<str>, u8>>,
}

impl Cluster {
    pub(super) fn new(seeds: ClusterSeeds) -> Cluster {
        Cluster {
            seeds,
            slot_shard: RefCell::new(Vec::new()),
            error: RefCell::new(None),
            refresh_due: Cell::new(true),
            last_request: Cell::new(None),
            waker: RefCell::new(None),
            parked: RefCell::new(Vec::new()),
            parked_channels: RefCell::new(Vec::new()),
            bounces: RefCell::new(HashMap::new()),
        }
    }

    /// Index of the shard serving `slot`, once the topology is known.
    pub(super) fn shard_of(&self, slot: u16) -> Option<usize> {
        self.slot_shard
            .borrow()
            .get(slot as usize)
            .map(|&i| i as usize)
    }

    /// Asks the topology task for a read now.
    pub(super) fn refresh(&self) {
        self.refresh_due.set(true);
        self.last_request.set(Some(Instant::now()));
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// Points `slot` at shard `i` (a `MOVED` named its new owner).
    pub(super) fn set_owner(&self, slot: u16, i: usize) {
        if let Some(o) = self.slot_shard.borrow_mut().get_mut(slot as usize) {
            *o = i as u16;
        }
    }

    /// The slot table (empty while unknown).
    pub(super) fn table(&self) -> Vec<u16> {
        self.slot_shard.borrow().clone()
    }

    /// Replaces the slot table.
    pub(super) fn set_table(&self, table: Vec<u16>) {
        *self.slot_shard.borrow_mut() = table;
    }

    /// Whether the topology changed lately (a read was asked for within
    /// `window`).
    pub(super) fn unsettled(&self, window: Duration) -> bool {
        self.last_request
            .get()
            .is_some_and(|t| t.elapsed() < window)
    }

    /// Whether a read is due (and clears the request).
    pub(super) fn take_due(&self) -> bool {
        self.refresh_due.replace(false)
    }

    /// Waits for [`Cluster::refresh`].
    pub(super) fn sleep(&self, cx: &mut Context<'_>) {
        *self.waker.borrow_mut() = Some(cx.waker().clone());
    }

    /// Counts a redirect of `channel`; returns how many since the last
    /// topology read.
    pub(super) fn bounced(&self, channel: &Rc<str>) -> u8 {
        let mut b = self.bounces.borrow_mut();
        let n = b.entry(channel.clone()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    /// What waited for the refresh (the redirect counts start over).
    pub(super) fn take_parked(&self) -> (Vec<Parked>, Vec<Rc<str>>) {
        self.bounces.borrow_mut().clear();
        (
            std::mem::take(&mut *self.parked.borrow_mut()),
            std::mem::take(&mut *self.parked_channels.borrow_mut()),
        )
    }
}
