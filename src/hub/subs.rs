//! The facade's read-only view of connections' subscriptions (the server
//! API's `GET /api/connections`, the per-namespace gauges).

use std::rc::Rc;

use super::conn::ConnId;
use super::Hub;

impl Hub {
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
