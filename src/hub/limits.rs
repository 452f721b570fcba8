//! The limits the hub enforces, owned by the hub (the configuration builds
//! them: `Config::hub_limits`). A leaf: the hub never reads the
//! configuration itself.

/// What to do with a subscriber whose outbound queue is over its byte bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowConsumerPolicy {
    /// Send close 1008 ("slow consumer") and disconnect it. The default:
    /// a client that silently misses messages is worse than one that knows
    /// it was cut off and can resubscribe.
    Disconnect,
    /// Drop its oldest queued data messages (never control frames) to make
    /// room, counting every drop.
    DropOldest,
}

/// The limits the hub enforces. The defaults are documented with the
/// options that set them (`config::OPTIONS`).
#[derive(Debug, Clone)]
pub struct HubLimits {
    /// Per-connection outbound bound in bytes.
    pub max_outbound_queue: usize,
    /// What to do over the bound (when the writes stall for
    /// `slow_grace_ms`, or at once past `HARD_CAP_FACTOR` times the bound).
    pub slow_consumer: SlowConsumerPolicy,
    /// Milliseconds a connection over its bound may go without write
    /// progress before it is slow.
    pub slow_grace_ms: u64,
    /// Milliseconds a connection with anything to write may go without
    /// write progress before it is cut as slow; 0 disables.
    pub write_stall_timeout_ms: u64,
    /// Channels per connection.
    pub max_subscriptions: usize,
    /// Connections in the table.
    pub max_connections: usize,
    /// Outbound bytes across all connections.
    pub max_total_outbound: usize,
    /// Time deliveries for the fan-out delay histogram.
    pub histograms: bool,
    /// Skip the publisher when fanning out its own message.
    pub exclude_sender: bool,
    /// Most writers woken by fan-outs writing at once (0 = no pacing).
    pub fanout_window: usize,
    /// Milliseconds; 0 disables.
    pub ping_interval_ms: u64,
    /// Milliseconds; 0 disables.
    pub idle_timeout_ms: u64,
    /// Milliseconds.
    pub handshake_timeout_ms: u64,
    /// Milliseconds.
    pub close_timeout_ms: u64,
    /// Per-channel message history (off when `size` is 0).
    pub history: crate::history::HistoryLimits,
    /// Namespaces' history limits over `history` (empty without any).
    pub ns_history: crate::history::NamespaceLimits,
    /// The namespaces whose channels are latest-value channels
    /// (`conflate = true`; empty without any).
    pub conflated: Vec<Box<str>>,
    /// The namespaces whose every publication may go as a delta
    /// (`delta-publish = true`; empty without any).
    pub delta_publish: Vec<Box<str>>,
}

impl HubLimits {
    /// Whether `channel` is a latest-value channel: one compare per
    /// publish when some namespace conflates, nothing otherwise.
    pub fn conflates(&self, channel: &str) -> bool {
        in_namespaces(&self.conflated, channel)
    }

    /// Whether every publication on `channel` may go as a delta (its
    /// namespace's `delta-publish = true`), asked or not.
    pub fn always_delta(&self, channel: &str) -> bool {
        in_namespaces(&self.delta_publish, channel)
    }
}

/// Whether `channel` is in one of `namespaces`: one compare per publish
/// when there are some, nothing otherwise.
fn in_namespaces(namespaces: &[Box<str>], channel: &str) -> bool {
    if namespaces.is_empty() {
        return false;
    }
    let ns = channel.split_once(':').map(|(ns, _)| ns);
    ns.is_some_and(|ns| namespaces.iter().any(|c| **c == *ns))
}
