//! The [`Config`] struct itself: a leaf both the options table
//! (`options.rs`, which sets its fields) and the parser (`mod.rs`, which
//! builds it from the table) import, so neither imports the other.

use std::net::SocketAddr;
use std::time::Duration;

use crate::hub::SlowConsumerPolicy;
use crate::log::Level;

/// The server's whole configuration: the server's own settings plus each
/// layer's settings struct, owned by that layer (`ws::Limits`,
/// `http::Limits`, `auth::AuthConfig`, `redis::RedisConfig`,
/// `cache::CacheConfig`). Every field's default comes from [`OPTIONS`](crate::config::OPTIONS).
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Separate address for `/stats`, `/metrics`, `/status`, `/status/ws`
    /// (None = served on `listen`).
    pub admin_listen: Option<SocketAddr>,
    /// The operator console's key (`/console`, `corecast top`); `None`:
    /// no console.
    pub admin_key: Option<crate::secret::Secret>,
    /// CPU to pin the worker to; `None` = the first CPU the process may use.
    pub cpu: Option<usize>,
    /// How many workers (`--workers`): one pinned thread each.
    pub workers: super::values::Workers,
    /// The workers' CPUs (`--cpus`), in worker order.
    pub cpus: Option<Vec<usize>>,
    /// Messages each cross-worker ring holds (`--worker-ring`).
    pub worker_ring: usize,
    /// Channel served at `GET /` upgrades, if any.
    pub root_channel: Option<String>,
    /// WebSocket frame and message limits.
    pub ws: crate::ws::Limits,
    /// permessage-deflate (RFC 7692).
    pub compression: crate::ws::deflate::Settings,
    /// HTTP request head and body limits.
    pub http: crate::http::Limits,
    /// Time allowed to send a complete request head.
    pub handshake_timeout: Duration,
    /// Outbound queue bound per connection, in bytes.
    pub max_outbound_queue: usize,
    /// The send buffer (SO_SNDBUF) of a connection that subscribes to a
    /// latest-value channel, 0: the kernel's autotuning.
    pub latest_send_buffer: usize,
    /// What happens when a subscriber exceeds `max_outbound_queue`.
    pub slow_consumer: SlowConsumerPolicy,
    /// How long a subscriber over `max_outbound_queue` may stall.
    pub slow_consumer_grace: Duration,
    /// How long any connection's writes may stall with data queued.
    pub write_stall_timeout: Duration,
    /// Most simultaneous connections (HTTP and WebSocket).
    pub max_connections: usize,
    /// Most channels one connection may subscribe to.
    pub max_subscriptions: usize,
    /// Interval of server pings on quiet WebSocket connections (0 = off).
    pub ping_interval: Duration,
    /// A connection that sent nothing for this long is closed (0 = off).
    pub idle_timeout: Duration,
    /// A WebSocket quiet this long (nothing received or written, nothing
    /// queued) is parked: its tasks are freed and its socket waits in the
    /// worker's poller (0 = never). A WebSocket with nothing to do at its
    /// upgrade parks at once.
    pub park_after: Duration,
    /// Time a peer has to answer our close frame before the socket is cut.
    pub close_timeout: Duration,
    /// Deadline for graceful shutdown after SIGTERM/SIGINT.
    pub shutdown_timeout: Duration,
    /// Do not echo a message back to the connection that published it.
    pub exclude_sender: bool,
    /// Force the epoll driver even where io_uring works.
    pub force_legacy_driver: bool,
    /// Log level.
    pub log_level: Level,
    /// Who may publish and subscribe.
    pub auth: crate::auth::AuthConfig,
    /// Per-client-address limits.
    pub peers: crate::peers::PeerConfig,
    /// Outbound bytes queued across all connections of the worker.
    pub max_total_outbound: usize,
    /// `--max-total-inbound`: input all WebSocket readers of a worker may
    /// hold (partial frames, messages being assembled).
    pub max_total_inbound: usize,
    /// Record the fan-out delay histogram (`/metrics`, status page).
    pub latency_histograms: bool,
    /// Most subscriber writers woken by fan-outs writing at once.
    pub fanout_window: usize,
    /// Worker write backlog above which publishers are paused.
    pub publish_backpressure: usize,
    /// Redis mode (off while `redis.url` is unset).
    pub redis: crate::redis::RedisConfig,
    /// The HTTP cache in front of `--origin`.
    pub cache: crate::cache::CacheConfig,
    /// Per-channel message history (`--history-*`).
    pub history: crate::history::HistoryLimits,
    /// The Pusher protocol's apps and limits.
    pub pusher: crate::pusher::PusherConfig,
    /// Presence (`--presence-*`).
    pub presence: crate::presence::PresenceConfig,
    /// Server-Sent Events (`--sse-*`).
    pub sse: crate::sse::SseLimits,
    /// TLS on `listen` (`--tls-cert`, `--tls-key`; off while empty).
    pub tls: crate::tls::Files,
    /// Hooks to the application's backend (`--proxy-*`).
    pub proxy: crate::hooks::HookConfig,
    /// Channel namespaces (`--namespace`, `[namespaces.NAME]`).
    pub namespaces: crate::namespace::Namespaces,
    /// Outbox consumers (`--consumer`, `[[consumer]]`).
    pub consumers: Vec<crate::consumer::ConsumerConfig>,
}
