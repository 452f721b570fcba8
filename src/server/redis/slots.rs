//! A Redis Cluster link's routing state: which shard serves each slot,
//! whether a topology read is due, and what waits for it. The task that
//! keeps it current is `topology`; the redirects that correct it are
//! `redirect`.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::task::{Context, Waker};

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
    waker: RefCell<Option<Waker>>,
    /// Commands waiting for the refresh (bounded by the pipelines they
    /// came from: each was accepted within a shard's byte budget).
    pub(super) parked: RefCell<Vec<Parked>>,
    /// Channels waiting for the refresh to be subscribed on their owner.
    pub(super) parked_channels: RefCell<Vec<Rc<str>>>,
}

impl Cluster {
    pub(super) fn new(seeds: ClusterSeeds) -> Cluster {
        Cluster {
            seeds,
            slot_shard: RefCell::new(Vec::new()),
            error: RefCell::new(None),
            refresh_due: Cell::new(true),
            waker: RefCell::new(None),
            parked: RefCell::new(Vec::new()),
            parked_channels: RefCell::new(Vec::new()),
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

    /// Whether a read is due (and clears the request).
    pub(super) fn take_due(&self) -> bool {
        self.refresh_due.replace(false)
    }

    /// Waits for [`Cluster::refresh`].
    pub(super) fn sleep(&self, cx: &mut Context<'_>) {
        *self.waker.borrow_mut() = Some(cx.waker().clone());
    }

    /// What waited for the refresh.
    pub(super) fn take_parked(&self) -> (Vec<Parked>, Vec<Rc<str>>) {
        (
            std::mem::take(&mut *self.parked.borrow_mut()),
            std::mem::take(&mut *self.parked_channels.borrow_mut()),
        )
    }
}
