//! The facade's view of connections' subscriptions: a subscribe with its
//! filters, deltas and resume, the filters of one, and the read-only listings
//! (the server API's `GET /api/connections`, the per-namespace gauges).

use std::rc::Rc;

use super::conn::ConnId;
use super::recall::{self, Resumed};
use super::registry::{Filtering, Filters, SubscribeError};
use super::Hub;

impl Hub {
    /// Subscribes `id` to `name`, setting its filters as `filtering` says;
    /// the filters the subscription has now.
    pub fn subscribe_filtered(
        &mut self,
        id: ConnId,
        name: &str,
        filtering: Filtering,
    ) -> Result<Option<Filters>, SubscribeError> {
        let new = self.subscribe_new(id, name)?;
        let set = match filtering {
            Filtering::Replace(f, delta) => {
                self.registry.set_delta(&self.conns, id, name, delta);
                f
            }
            Filtering::IfNew(f) if new => f,
            Filtering::IfNew(_) => return Ok(self.filters_of(id, name)),
        };
        self.registry
            .set_filters(&self.conns, id, name, set.clone());
        Ok(set)
    }

    /// Subscribes `id` to `name` and, when history is on, answers with the
    /// channel's position and (with `since`) the replay of what the
    /// client missed — in one step, so the replay and the live messages
    /// that follow meet without a gap or a duplicate.
    pub fn subscribe_from(
        &mut self,
        id: ConnId,
        name: &str,
        since: Option<(&str, u64)>,
        filtering: Filtering,
    ) -> Result<Option<Resumed>, SubscribeError> {
        // In the same step as the replay below.
        let filters = self.subscribe_filtered(id, name, filtering)?;
        if !self.history.enabled_for(name) {
            return Ok(None);
        }
        let max_replay = self.limits.max_outbound_queue.saturating_mul(2);
        let clock = (self.now_ms, max_replay);
        let mut r = recall::resume(&mut self.history, &mut self.stats, name, since, clock);
        if let Some(f) = filters {
            r.replay.retain(|e| crate::filter::all_match(&f, e.tags()));
        }
        Ok(Some(r))
    }

    /// Connection `id`'s tag filters on `name` (`None`: it has none, or
    /// is not subscribed there).
    pub fn filters_of(&self, id: ConnId, name: &str) -> Option<Filters> {
        self.registry.filters_of(&self.conns, id, name)
    }

    /// Whether connection `id` gets deltas on `name` (it asked, and is
    /// subscribed there).
    pub fn delta_of(&self, id: ConnId, name: &str) -> bool {
        self.registry.delta_of(&self.conns, id, name)
    }

    /// Sets (`None`: clears) connection `id`'s tag filters on `name`;
    /// whether it is subscribed there.
    pub fn set_filters(&mut self, id: ConnId, name: &str, filters: Option<Filters>) -> bool {
        self.registry.set_filters(&self.conns, id, name, filters)
    }

    /// The channels connection `id` is subscribed to.
    pub fn channels_of(&self, id: ConnId) -> Vec<Rc<str>> {
        let Some(c) = self.conns.get(id) else {
            return Vec::new();
        };
        let names = c
            .subs
            .iter()
            .map(|&(cid, _)| self.registry.name(cid).clone());
        names.collect()
    }

    /// Each connection with subscriptions, as the names of its channels
    /// (the per-namespace connection gauge, at scrape time).
    pub fn subscribed_connections(&self) -> impl Iterator<Item = impl Iterator<Item = &str>> {
        let registry = &self.registry;
        let conns = self.conns.iter().filter(|(_, c)| !c.subs.is_empty());
        conns.map(move |(_, c)| c.subs.iter().map(move |&(cid, _)| &**registry.name(cid)))
    }
}
