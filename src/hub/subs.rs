//! The facade's read-only view of a connection's subscriptions (the
//! server API's `GET /api/connections`).

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
}
