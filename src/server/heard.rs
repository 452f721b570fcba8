//! What a worker hears besides its clients: in Redis mode, the `!`
//! channels every instance listens to (server API commands and answers,
//! the console's instance summaries) and the Redis link's view of the
//! worker (`redis::Local`: delivery into the hub, the interest log); with
//! several workers, the other workers' console summaries.

use std::rc::Rc;
use std::task::{Context, Poll};

use crate::console::INSTANCES_CHANNEL;
use crate::history::relay::{self, Fetch};
use crate::history::Entry;
use crate::hooks::api::CONTROL_CHANNEL;
use crate::hub::Message;
use crate::redis::envelope::Envelope;
use crate::server::history::relay as relay_edge;
use crate::server::hooks::users;
use crate::server::redis::Local;
use crate::server::worker::Worker;
use crate::ws::OpCode;

impl Worker {
    /// Whether this instance takes server API commands from the control
    /// channel: the API needs the publish key; the Pusher API's
    /// `terminate_connections` is one too, and so is the console's
    /// disconnect (`--admin-key`).
    fn hears_commands(&self) -> bool {
        self.cfg.auth.publish_key.is_some()
            || !self.cfg.pusher.apps.is_empty()
            || self.cfg.admin_key.is_some()
    }

    /// Whether this instance hears the other instances' console
    /// summaries (Redis mode with `--admin-key`).
    fn hears_instances(&self) -> bool {
        self.cfg.admin_key.is_some()
    }

    /// An instance's summary heard on the console's channel: kept in the
    /// bounded table the feed lists (a bad one is logged and dropped).
    fn heard_instance(&self, payload: &[u8]) {
        let Ok(inst) = serde_json::from_slice(payload) else {
            return crate::log!(Warn, "not an instance summary on the console channel");
        };
        self.heard_summary(inst);
    }

    /// An instance's summary (Redis mode) or another worker's (several
    /// workers without Redis), kept in the bounded table the feed lists.
    pub fn heard_summary(&self, inst: crate::console::snapshot::Instance) {
        let now = self.now_ms();
        if !self.console.borrow_mut().instances.heard(inst, now) {
            crate::log!(Debug, "instance table full; summary dropped");
        }
    }

    /// The internal channels this instance always hears through Redis:
    /// the server API's (control and reply channels) and the console's.
    fn always_heard(&self) -> Vec<Rc<str>> {
        let mut names = Vec::new();
        if self.hears_commands() {
            names.extend(self.command_channels());
        }
        if self.hears_instances() {
            names.push(Rc::from(INSTANCES_CHANNEL));
        }
        names
    }

    /// A message on a `!` channel this instance hears (Redis mode): a
    /// command on the control channel, carried out here (a listing
    /// request answered on the asker's reply channel), or an answer to
    /// one of this instance's listings on its own reply channel.
    fn heard_command(&self, channel: &str, payload: &[u8]) {
        use crate::hooks::api;
        let tag = self.pusher.borrow().tag;
        if channel == CONTROL_CHANNEL {
            match api::decode(payload) {
                Some(api::Command::Connections { user, reply_to, id }) => {
                    let list = users::list(&self.hub.borrow(), &self.users.borrow(), tag, &user);
                    self.answer_to(reply_to, &api::encode_answer(id, tag, list));
                }
                Some(cmd) => {
                    (self.on_command)(&self.rc(), (&cmd, tag));
                }
                None => crate::log!(Warn, "not a server API command on the control channel"),
            }
        } else if channel == api::reply_channel(tag) {
            match api::decode_answer(payload) {
                Some(a) => self.api_waits.borrow_mut().answer(a),
                None => crate::log!(Warn, "not a server API answer on the reply channel"),
            }
        }
    }

    /// Publishes a listing's answer on instance `reply_to`'s reply
    /// channel (dropped with a log if the Redis pipeline is full: the
    /// asker then reports this instance missing).
    fn answer_to(&self, reply_to: u32, answer: &[u8]) {
        let Some(link) = self.redis.as_deref() else {
            return;
        };
        let channel = crate::hooks::api::reply_channel(reply_to);
        if link
            .publish(&channel, OpCode::Text, answer, 0, false)
            .is_err()
        {
            crate::log!(Warn, "server API answer dropped: redis pipeline full");
        }
    }

    /// The `!` channels this instance always hears when it takes server
    /// API commands: the control channel and its own reply channel.
    fn command_channels(&self) -> [Rc<str>; 2] {
        let reply = crate::hooks::api::reply_channel(self.pusher.borrow().tag);
        [Rc::from(CONTROL_CHANNEL), Rc::from(reply)]
    }
}

/// Whether `channel` is one of the server API's (`!api`, `!api.{tag}`);
/// no client channel starts with `!`.
fn is_command_channel(channel: &str) -> bool {
    channel.starts_with(CONTROL_CHANNEL)
}

/// The Redis link's view of the worker: delivery into the hub and the
/// hub's interest log.
impl Local for Worker {
    fn deliver(&self, msg: Message<'_>, skip: Option<u64>) {
        let (channel, _, payload, _) = msg;
        if is_command_channel(channel) && self.hears_commands() {
            return self.heard_command(channel, payload);
        }
        if channel == INSTANCES_CHANNEL && self.hears_instances() {
            return self.heard_instance(payload);
        }
        self.delivering(channel, |hub| {
            hub.publish_tagged(msg, skip);
        });
    }

    fn track_interest(&self) {
        self.hub.borrow_mut().track_interest();
    }

    /// With the server API's control channel, which every instance with
    /// a publish key (the API's) always hears.
    fn interest_snapshot(&self) -> Vec<Rc<str>> {
        let mut names = self.hub.borrow_mut().interest_snapshot();
        names.extend(self.always_heard());
        names
    }

    fn interest_resend(&self, keep: &dyn Fn(&str) -> bool) -> Vec<Rc<str>> {
        let mut names = self.hub.borrow_mut().interest_resend(keep);
        names.extend(self.always_heard().into_iter().filter(|c| keep(c)));
        names
    }

    fn interest_reset(&self, channels: &[Rc<str>]) {
        self.hub.borrow_mut().interest_reset(channels);
    }

    fn poll_interest(&self, cx: &mut Context<'_>, out: &mut Vec<(Rc<str>, bool)>) -> Poll<()> {
        self.hub.borrow_mut().poll_interest(cx, out)
    }

    fn interest_answered(&self, channel: &str) {
        self.hub.borrow_mut().interest_answered(channel);
    }

    fn interest_lost(&self) {
        self.hub.borrow_mut().interest_lost();
    }
    fn deliver_at(&self, channel: &str, env: Envelope, skip: Option<u64>) -> Option<Fetch> {
        if is_command_channel(channel) && self.hears_commands() {
            self.heard_command(channel, &env.payload);
            return None;
        }
        if channel == INSTANCES_CHANNEL && self.hears_instances() {
            self.heard_instance(&env.payload);
            return None;
        }
        let (Some(relay), Some(at)) = (&self.relay, env.at) else {
            self.deliver((channel, env.opcode, &env.payload, env.meta.as_ref()), skip);
            return None;
        };
        // Checked by `envelope::decode` (visible ASCII).
        let epoch = std::str::from_utf8(&at.epoch).unwrap_or("");
        let entry = Entry {
            offset: at.offset,
            opcode: env.opcode,
            payload: env.payload,
            meta: env.meta,
        };
        self.delivering(channel, |hub| {
            let clock = (hub.now_ms(), hub.history_budget());
            let mut actions = Vec::new();
            let fetch = relay
                .borrow_mut()
                .arrive(channel, epoch, entry, clock, &mut actions);
            relay_edge::apply(hub, channel, actions, skip);
            fetch
        })
    }

    fn fetched(&self, fetch: &Fetch, snap: Option<relay::Snapshot>) -> Option<Fetch> {
        let relay = self.relay.as_ref()?;
        self.delivering(&fetch.channel, |hub| {
            let clock = (hub.now_ms(), hub.history_budget());
            let mut actions = Vec::new();
            let next = relay.borrow_mut().fetched(fetch, snap, clock, &mut actions);
            relay_edge::apply(hub, &fetch.channel, actions, None);
            next
        })
    }

    fn confirmed(&self, channel: &str) -> Vec<Fetch> {
        let Some(relay) = &self.relay else {
            return Vec::new();
        };
        let keeps = relay.borrow().history().enabled_for(channel);
        if !keeps || self.hub.borrow().subscriber_count(channel) == 0 {
            return Vec::new();
        }
        relay.borrow_mut().catch_up(&[Rc::from(channel)])
    }

    fn catch_up(&self) -> Vec<Fetch> {
        let Some(relay) = &self.relay else {
            return Vec::new();
        };
        let hub = self.hub.borrow();
        let mut relay = relay.borrow_mut();
        let channels: Vec<Rc<str>> = relay
            .history()
            .channel_names()
            .filter(|c| hub.subscriber_count(c) > 0)
            .collect();
        relay.catch_up(&channels)
    }
}
