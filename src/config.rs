//! Every limit and knob in one place.
//!
//! Each option is a command-line flag with an environment-variable twin; the
//! flag wins over the variable, the variable over the default. The table in
//! [`OPTIONS`] is the single source of truth: `--help`, the README table and
//! the parser all read it, so a default cannot be documented in one place and
//! different in another.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use crate::log::Level;

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

/// A secret from the configuration: printed as `***` by `Debug` so it never
/// reaches a log line.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, for the one comparison that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// The server's whole configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// CPU to pin the worker to; `None` = the first CPU the process may use.
    pub cpu: Option<usize>,
    /// Channel served at `GET /` upgrades, if any.
    pub root_channel: Option<String>,
    /// Largest accepted WebSocket frame payload, checked before allocating.
    pub max_frame_size: usize,
    /// Largest accepted WebSocket message (all fragments together).
    pub max_message_size: usize,
    /// Largest HTTP request head (request line + headers).
    pub max_handshake_bytes: usize,
    /// Time allowed to send a complete request head.
    pub handshake_timeout: Duration,
    /// Largest HTTP request body (`POST /publish`).
    pub max_body_size: usize,
    /// Outbound queue bound per connection, in bytes.
    pub max_outbound_queue: usize,
    /// What happens when a subscriber exceeds `max_outbound_queue`.
    pub slow_consumer: SlowConsumerPolicy,
    /// Most simultaneous connections (HTTP and WebSocket).
    pub max_connections: usize,
    /// Most channels one connection may subscribe to.
    pub max_subscriptions: usize,
    /// Interval of server pings on quiet WebSocket connections (0 = off).
    pub ping_interval: Duration,
    /// A connection that sent nothing for this long is closed (0 = off).
    pub idle_timeout: Duration,
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
    /// Bearer key required by `POST /publish` (None = open).
    pub publish_key: Option<Secret>,
    /// HS256 secret of connection tokens (None = no token required).
    pub token_secret: Option<Secret>,
    /// Browser origins allowed to upgrade (empty = any).
    pub allowed_origins: Vec<String>,
    /// Messages per second one connection may publish (0 = unlimited).
    pub publish_rate: u32,
    /// Outbound bytes queued across all connections of the worker.
    pub max_total_outbound: usize,
    /// Record the fan-out delay histogram (`/metrics`, status page).
    pub latency_histograms: bool,
    /// Most subscriber writers woken by fan-outs writing at once.
    pub fanout_window: usize,
    /// Worker write backlog above which publishers are paused.
    pub publish_backpressure: usize,
    /// Redis mode: publishes go through Redis pub/sub (None = in-process).
    pub redis_url: Option<crate::redis::RedisUrl>,
    /// Prefix of the Redis channels corecast uses.
    pub redis_prefix: String,
    /// Bytes of publishes held while Redis is unreachable.
    pub redis_publish_buffer: usize,
    /// Timeout of a Redis connection attempt.
    pub redis_connect_timeout: Duration,
    /// Time Redis has to answer a command before the connection is dropped.
    pub redis_command_timeout: Duration,
    /// Interval of the readiness canary.
    pub redis_canary_interval: Duration,
    /// Pause after (re)subscribing before buffered publishes are sent.
    pub redis_resume_delay: Duration,
    /// The HTTP cache in front of `--origin`.
    pub cache: CacheConfig,
}

/// The HTTP response cache (`--origin` and the `--cache-*` options).
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// The origin; without it the cache prefix is not routed.
    pub origin: Option<crate::cache::origin::OriginUrl>,
    /// Paths under this prefix are cached (`GET`/`HEAD`).
    pub prefix: String,
    /// Largest origin response body; larger ones are a 502.
    pub origin_max_body: usize,
    /// Largest origin response head (also bounds chunk extensions and
    /// trailers together).
    pub origin_max_head: usize,
    /// Timeout of one connection attempt to the origin (504).
    pub origin_connect_timeout: Duration,
    /// Time for a whole origin exchange, from waiting for a connection to
    /// the last body byte (504).
    pub origin_timeout: Duration,
    /// Idle keep-alive connections kept per worker.
    pub origin_pool_size: usize,
    /// An idle pooled connection older than this is closed, not reused.
    pub origin_idle_timeout: Duration,
    /// Origin requests in flight at once per worker; more wait.
    pub origin_max_connections: usize,
    /// Bytes of the in-memory store (without Redis).
    pub max_bytes: usize,
    /// Freshness when the origin gives neither `max-age` nor `s-maxage`.
    pub default_ttl: Duration,
    /// Longest wait for another request's fetch of the same key.
    pub coalesce_timeout: Duration,
    /// `stale-while-revalidate` when the origin gives none.
    pub stale_while_revalidate: Duration,
    /// `stale-if-error` when the origin gives none.
    pub stale_if_error: Duration,
    /// Bound of every Redis wait on the request path.
    pub redis_timeout: Duration,
    /// Bearer token of `POST /cache/purge` (unset: purge is not routed).
    pub purge_token: Option<Secret>,
    /// Most keys one prefix purge deletes.
    pub purge_max_keys: usize,
}

impl Default for Config {
    fn default() -> Self {
        let mut cfg = Config {
            listen: "127.0.0.1:8080".parse().expect("literal address"),
            cpu: None,
            root_channel: None,
            max_frame_size: 0,
            max_message_size: 0,
            max_handshake_bytes: 0,
            handshake_timeout: Duration::ZERO,
            max_body_size: 0,
            max_outbound_queue: 0,
            slow_consumer: SlowConsumerPolicy::Disconnect,
            max_connections: 0,
            max_subscriptions: 0,
            ping_interval: Duration::ZERO,
            idle_timeout: Duration::ZERO,
            close_timeout: Duration::ZERO,
            shutdown_timeout: Duration::ZERO,
            exclude_sender: false,
            force_legacy_driver: false,
            log_level: Level::Info,
            publish_key: None,
            token_secret: None,
            allowed_origins: Vec::new(),
            publish_rate: 0,
            max_total_outbound: 0,
            latency_histograms: true,
            fanout_window: 256,
            publish_backpressure: 0,
            redis_url: None,
            redis_prefix: String::new(),
            redis_publish_buffer: 0,
            redis_connect_timeout: Duration::ZERO,
            redis_command_timeout: Duration::ZERO,
            redis_canary_interval: Duration::ZERO,
            redis_resume_delay: Duration::ZERO,
            cache: CacheConfig {
                origin: None,
                prefix: String::new(),
                origin_max_body: 0,
                origin_max_head: 0,
                origin_connect_timeout: Duration::ZERO,
                origin_timeout: Duration::ZERO,
                origin_pool_size: 0,
                origin_idle_timeout: Duration::ZERO,
                origin_max_connections: 0,
                max_bytes: 0,
                default_ttl: Duration::ZERO,
                coalesce_timeout: Duration::ZERO,
                stale_while_revalidate: Duration::ZERO,
                stale_if_error: Duration::ZERO,
                redis_timeout: Duration::ZERO,
                purge_token: None,
                purge_max_keys: 0,
            },
        };
        for opt in OPTIONS {
            if let Some(default) = opt.default {
                (opt.set)(&mut cfg, default).expect("documented default parses");
            }
        }
        cfg
    }
}

/// One configuration option: its flag, its variable, its default and help.
pub struct OptionSpec {
    /// Long flag without the leading dashes.
    pub flag: &'static str,
    /// Environment variable.
    pub env: &'static str,
    /// Placeholder shown in help; empty for switches.
    pub value: &'static str,
    /// Default as text (`None`: unset).
    pub default: Option<&'static str>,
    /// One-line description.
    pub help: &'static str,
    set: fn(&mut Config, &str) -> Result<(), String>,
}

/// All options, in the order `--help` lists them.
pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        flag: "listen",
        env: "CORECAST_LISTEN",
        value: "ADDR",
        default: Some("127.0.0.1:8080"),
        help: "address to listen on",
        set: |c, v| {
            c.listen = v.parse().map_err(|e| format!("{e}"))?;
            Ok(())
        },
    },
    OptionSpec {
        flag: "cpu",
        env: "CORECAST_CPU",
        value: "N",
        default: None,
        help: "CPU to pin the worker to (default: first CPU the process may use)",
        set: |c, v| {
            c.cpu = Some(parse_num(v)?);
            Ok(())
        },
    },
    OptionSpec {
        flag: "root-channel",
        env: "CORECAST_ROOT_CHANNEL",
        value: "NAME",
        default: None,
        help: "serve this channel at `GET /` upgrades (default: none, 404)",
        set: |c, v| {
            if !crate::hub::valid_channel_name(v) {
                return Err("invalid channel name".into());
            }
            c.root_channel = Some(v.to_string());
            Ok(())
        },
    },
    OptionSpec {
        flag: "max-frame-size",
        env: "CORECAST_MAX_FRAME_SIZE",
        value: "BYTES",
        default: Some("1MiB"),
        help: "largest WebSocket frame payload; larger ones close with 1009",
        set: |c, v| set_size(&mut c.max_frame_size, v),
    },
    OptionSpec {
        flag: "max-message-size",
        env: "CORECAST_MAX_MESSAGE_SIZE",
        value: "BYTES",
        default: Some("1MiB"),
        help: "largest WebSocket message; larger ones close with 1009",
        set: |c, v| set_size(&mut c.max_message_size, v),
    },
    OptionSpec {
        flag: "max-handshake-bytes",
        env: "CORECAST_MAX_HANDSHAKE_BYTES",
        value: "BYTES",
        default: Some("8KiB"),
        help: "largest HTTP request head; larger ones get 431",
        set: |c, v| set_size(&mut c.max_handshake_bytes, v),
    },
    OptionSpec {
        flag: "handshake-timeout",
        env: "CORECAST_HANDSHAKE_TIMEOUT",
        value: "DURATION",
        default: Some("10s"),
        help: "time allowed for a complete request head (also between keep-alive requests)",
        set: |c, v| set_duration(&mut c.handshake_timeout, v),
    },
    OptionSpec {
        flag: "max-body-size",
        env: "CORECAST_MAX_BODY_SIZE",
        value: "BYTES",
        default: Some("1MiB"),
        help: "largest HTTP request body; larger ones get 413",
        set: |c, v| set_size(&mut c.max_body_size, v),
    },
    OptionSpec {
        flag: "max-outbound-queue",
        env: "CORECAST_MAX_OUTBOUND_QUEUE",
        value: "BYTES",
        default: Some("1MiB"),
        help: "outbound bytes queued per connection before it is a slow consumer",
        set: |c, v| set_size(&mut c.max_outbound_queue, v),
    },
    OptionSpec {
        flag: "slow-consumer",
        env: "CORECAST_SLOW_CONSUMER",
        value: "POLICY",
        default: Some("disconnect"),
        help: "`disconnect` (close 1008) or `drop-oldest` (drop oldest queued messages)",
        set: |c, v| {
            c.slow_consumer = match v {
                "disconnect" => SlowConsumerPolicy::Disconnect,
                "drop-oldest" => SlowConsumerPolicy::DropOldest,
                _ => return Err("expected `disconnect` or `drop-oldest`".into()),
            };
            Ok(())
        },
    },
    OptionSpec {
        flag: "max-connections",
        env: "CORECAST_MAX_CONNECTIONS",
        value: "N",
        default: Some("50000"),
        help: "most simultaneous connections; more get 503",
        set: |c, v| set_num(&mut c.max_connections, v),
    },
    OptionSpec {
        flag: "max-subscriptions",
        env: "CORECAST_MAX_SUBSCRIPTIONS",
        value: "N",
        default: Some("64"),
        help: "most channels one connection may subscribe to",
        set: |c, v| set_num(&mut c.max_subscriptions, v),
    },
    OptionSpec {
        flag: "max-total-outbound",
        env: "CORECAST_MAX_TOTAL_OUTBOUND",
        value: "BYTES",
        default: Some("1GiB"),
        help: "outbound bytes queued across all connections; past it the subscriber being queued to is treated as slow",
        set: |c, v| set_size(&mut c.max_total_outbound, v),
    },
    OptionSpec {
        flag: "publish-backpressure",
        env: "CORECAST_PUBLISH_BACKPRESSURE",
        value: "BYTES",
        default: Some("16MiB"),
        help: "when this much waits to be written to subscribers (each connection counted up to 64 KiB), publishers are read more slowly until it drains",
        set: |c, v| set_size(&mut c.publish_backpressure, v),
    },
    OptionSpec {
        flag: "fanout-window",
        env: "CORECAST_FANOUT_WINDOW",
        value: "N",
        default: Some("256"),
        help: "most subscriber writes a fan-out has in progress at once; the rest are started, in order, as those complete, so a message to many thousands of subscribers cannot keep other connections waiting for more than about this many writes (0 = start all at once)",
        set: |c, v| {
            c.fanout_window = v.trim().parse().map_err(|e| format!("{e}"))?;
            Ok(())
        },
    },
    OptionSpec {
        flag: "latency-histograms",
        env: "CORECAST_LATENCY_HISTOGRAMS",
        value: "BOOL",
        default: Some("true"),
        help: "time every subscriber write for the fan-out delay histogram of /metrics and /status (one clock read per publish and per write)",
        set: |c, v| set_bool(&mut c.latency_histograms, v),
    },
    OptionSpec {
        flag: "publish-rate",
        env: "CORECAST_PUBLISH_RATE",
        value: "N",
        default: Some("10000"),
        help: "messages/s one connection may publish (burst: one second's worth); faster publishers are read more slowly, nothing is dropped (0 = unlimited)",
        set: |c, v| {
            c.publish_rate = v.trim().parse().map_err(|e| format!("{e}"))?;
            Ok(())
        },
    },
    OptionSpec {
        flag: "publish-key",
        env: "CORECAST_PUBLISH_KEY",
        value: "SECRET",
        default: None,
        help: "require `Authorization: Bearer SECRET` on POST /publish (default: open)",
        set: |c, v| {
            c.publish_key = non_empty_secret(v)?;
            Ok(())
        },
    },
    OptionSpec {
        flag: "token-secret",
        env: "CORECAST_TOKEN_SECRET",
        value: "SECRET",
        default: None,
        help: "require a JWT (HS256, signed with SECRET) on every WebSocket upgrade, as ?token= or Authorization: Bearer (default: none required)",
        set: |c, v| {
            c.token_secret = non_empty_secret(v)?;
            Ok(())
        },
    },
    OptionSpec {
        flag: "allowed-origins",
        env: "CORECAST_ALLOWED_ORIGINS",
        value: "LIST",
        default: None,
        help: "comma-separated Origins allowed to upgrade, e.g. https://app.example (default: any)",
        set: |c, v| {
            c.allowed_origins = v
                .split(',')
                .map(str::trim)
                .filter(|o| !o.is_empty())
                .map(str::to_string)
                .collect();
            Ok(())
        },
    },
    OptionSpec {
        flag: "ping-interval",
        env: "CORECAST_PING_INTERVAL",
        value: "DURATION",
        default: Some("30s"),
        help: "server ping after this much silence from a client (0 = never)",
        set: |c, v| set_duration(&mut c.ping_interval, v),
    },
    OptionSpec {
        flag: "idle-timeout",
        env: "CORECAST_IDLE_TIMEOUT",
        value: "DURATION",
        default: Some("75s"),
        help: "close a WebSocket whose client sent nothing (not even a pong) for this long (0 = never)",
        set: |c, v| set_duration(&mut c.idle_timeout, v),
    },
    OptionSpec {
        flag: "close-timeout",
        env: "CORECAST_CLOSE_TIMEOUT",
        value: "DURATION",
        default: Some("5s"),
        help: "time a client has to answer our close frame",
        set: |c, v| set_duration(&mut c.close_timeout, v),
    },
    OptionSpec {
        flag: "shutdown-timeout",
        env: "CORECAST_SHUTDOWN_TIMEOUT",
        value: "DURATION",
        default: Some("5s"),
        help: "graceful-shutdown deadline after SIGTERM/SIGINT",
        set: |c, v| set_duration(&mut c.shutdown_timeout, v),
    },
    OptionSpec {
        flag: "exclude-sender",
        env: "CORECAST_EXCLUDE_SENDER",
        value: "",
        default: None,
        help: "do not deliver a message back to the connection that sent it",
        set: |c, v| set_bool(&mut c.exclude_sender, v),
    },
    OptionSpec {
        flag: "legacy-driver",
        env: "CORECAST_LEGACY_DRIVER",
        value: "",
        default: None,
        help: "use the epoll driver even where io_uring works",
        set: |c, v| set_bool(&mut c.force_legacy_driver, v),
    },
    OptionSpec {
        flag: "redis-url",
        env: "REDIS_URL",
        value: "URL",
        default: None,
        help: "redis://[user:password@]host:port[/db]: fan out through Redis pub/sub (default: in-process)",
        set: |c, v| {
            c.redis_url = Some(v.parse().map_err(|e| format!("{e}"))?);
            Ok(())
        },
    },
    OptionSpec {
        flag: "redis-prefix",
        env: "CORECAST_REDIS_PREFIX",
        value: "PREFIX",
        default: Some("corecast:"),
        help: "prefix of corecast's Redis channel names",
        set: |c, v| {
            if v.len() > 64 || v.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) {
                return Err("at most 64 bytes, no whitespace".into());
            }
            c.redis_prefix = v.to_string();
            Ok(())
        },
    },
    OptionSpec {
        flag: "redis-publish-buffer",
        env: "CORECAST_REDIS_PUBLISH_BUFFER",
        value: "BYTES",
        default: Some("8MiB"),
        help: "publishes held while Redis is unreachable; beyond it publishes are refused (503 / in-band error / close 1013)",
        set: |c, v| set_size(&mut c.redis_publish_buffer, v),
    },
    OptionSpec {
        flag: "redis-connect-timeout",
        env: "CORECAST_REDIS_CONNECT_TIMEOUT",
        value: "DURATION",
        default: Some("2s"),
        help: "timeout of one Redis connection attempt (retries back off exponentially to 1s, with jitter)",
        set: |c, v| set_duration(&mut c.redis_connect_timeout, v),
    },
    OptionSpec {
        flag: "redis-command-timeout",
        env: "CORECAST_REDIS_COMMAND_TIMEOUT",
        value: "DURATION",
        default: Some("2s"),
        help: "time Redis has to answer before the connection is considered dead",
        set: |c, v| set_duration(&mut c.redis_command_timeout, v),
    },
    OptionSpec {
        flag: "redis-canary-interval",
        env: "CORECAST_REDIS_CANARY_INTERVAL",
        value: "DURATION",
        default: Some("1s"),
        help: "interval of the round-trip canary behind /readyz (ready while one returned within 3 intervals)",
        set: |c, v| set_duration(&mut c.redis_canary_interval, v),
    },
    OptionSpec {
        flag: "redis-resume-delay",
        env: "CORECAST_REDIS_RESUME_DELAY",
        value: "DURATION",
        default: Some("1s"),
        help: "after (re)subscribing, wait this long before sending buffered publishes, so other instances can re-subscribe first",
        set: |c, v| set_duration(&mut c.redis_resume_delay, v),
    },
    OptionSpec {
        flag: "origin",
        env: "CORECAST_ORIGIN",
        value: "URL",
        default: None,
        help: "http://host:port[/base-path]: cache GET/HEAD under --cache-prefix in front of this origin (default: no cache, 404)",
        set: |c, v| {
            c.cache.origin = Some(v.parse()?);
            Ok(())
        },
    },
    OptionSpec {
        flag: "cache-prefix",
        env: "CORECAST_CACHE_PREFIX",
        value: "PATH",
        default: Some("/api/"),
        help: "requests under this path prefix are cached; the rest of the path and the query go to the origin",
        set: |c, v| {
            if !v.starts_with('/') || !v.ends_with('/') || v.bytes().any(|b| b <= b' ' || b == b'?') {
                return Err("a path starting and ending with /".into());
            }
            c.cache.prefix = v.to_string();
            Ok(())
        },
    },
    OptionSpec {
        flag: "origin-max-body",
        env: "CORECAST_ORIGIN_MAX_BODY",
        value: "BYTES",
        default: Some("8MiB"),
        help: "largest origin response body; larger ones are answered 502",
        set: |c, v| set_size(&mut c.cache.origin_max_body, v),
    },
    OptionSpec {
        flag: "origin-max-head",
        env: "CORECAST_ORIGIN_MAX_HEAD",
        value: "BYTES",
        default: Some("16KiB"),
        help: "largest origin response head (and chunk extensions + trailers); larger ones are answered 502",
        set: |c, v| set_size(&mut c.cache.origin_max_head, v),
    },
    OptionSpec {
        flag: "origin-connect-timeout",
        env: "CORECAST_ORIGIN_CONNECT_TIMEOUT",
        value: "DURATION",
        default: Some("1s"),
        help: "timeout of one connection attempt to the origin (504)",
        set: |c, v| set_duration(&mut c.cache.origin_connect_timeout, v),
    },
    OptionSpec {
        flag: "origin-timeout",
        env: "CORECAST_ORIGIN_TIMEOUT",
        value: "DURATION",
        default: Some("5s"),
        help: "time for a whole origin exchange, connection to last body byte (504); below --handshake-timeout",
        set: |c, v| set_duration(&mut c.cache.origin_timeout, v),
    },
    OptionSpec {
        flag: "origin-pool-size",
        env: "CORECAST_ORIGIN_POOL_SIZE",
        value: "N",
        default: Some("16"),
        help: "idle keep-alive connections to the origin kept for reuse",
        set: |c, v| set_num(&mut c.cache.origin_pool_size, v),
    },
    OptionSpec {
        flag: "origin-idle-timeout",
        env: "CORECAST_ORIGIN_IDLE_TIMEOUT",
        value: "DURATION",
        default: Some("30s"),
        help: "pooled origin connections idle longer than this are closed, not reused",
        set: |c, v| set_duration(&mut c.cache.origin_idle_timeout, v),
    },
    OptionSpec {
        flag: "origin-max-connections",
        env: "CORECAST_ORIGIN_MAX_CONNECTIONS",
        value: "N",
        default: Some("256"),
        help: "origin requests in flight at once; more wait (within --origin-timeout)",
        set: |c, v| set_num(&mut c.cache.origin_max_connections, v),
    },
    OptionSpec {
        flag: "cache-max-bytes",
        env: "CORECAST_CACHE_MAX_BYTES",
        value: "BYTES",
        default: Some("64MiB"),
        help: "size of the in-memory store used without Redis (least recently used entries are evicted)",
        set: |c, v| set_size(&mut c.cache.max_bytes, v),
    },
    OptionSpec {
        flag: "cache-default-ttl",
        env: "CORECAST_CACHE_DEFAULT_TTL",
        value: "DURATION",
        default: Some("60s"),
        help: "freshness of a response whose Cache-Control has neither max-age nor s-maxage",
        set: |c, v| set_duration(&mut c.cache.default_ttl, v),
    },
    OptionSpec {
        flag: "cache-coalesce-timeout",
        env: "CORECAST_CACHE_COALESCE_TIMEOUT",
        value: "DURATION",
        default: Some("5s"),
        help: "longest wait for a concurrent request's origin fetch of the same key before fetching itself",
        set: |c, v| set_duration(&mut c.cache.coalesce_timeout, v),
    },
    OptionSpec {
        flag: "cache-stale-while-revalidate",
        env: "CORECAST_CACHE_STALE_WHILE_REVALIDATE",
        value: "DURATION",
        default: Some("10s"),
        help: "stale-while-revalidate window when the origin gives none",
        set: |c, v| set_duration(&mut c.cache.stale_while_revalidate, v),
    },
    OptionSpec {
        flag: "cache-stale-if-error",
        env: "CORECAST_CACHE_STALE_IF_ERROR",
        value: "DURATION",
        default: Some("300s"),
        help: "stale-if-error window when the origin gives none",
        set: |c, v| set_duration(&mut c.cache.stale_if_error, v),
    },
    OptionSpec {
        flag: "cache-redis-timeout",
        env: "CORECAST_CACHE_REDIS_TIMEOUT",
        value: "DURATION",
        default: Some("100ms"),
        help: "bound of every Redis cache read/write on the request path; slower = a miss, not stored",
        set: |c, v| set_duration(&mut c.cache.redis_timeout, v),
    },
    OptionSpec {
        flag: "cache-purge-token",
        env: "CORECAST_CACHE_PURGE_TOKEN",
        value: "TOKEN",
        default: None,
        help: "bearer token of POST /cache/purge (default: purge disabled, 404)",
        set: |c, v| {
            if v.is_empty() || v.bytes().any(|b| !b.is_ascii_graphic()) {
                return Err("a non-empty token of visible ASCII".into());
            }
            c.cache.purge_token = Some(Secret(v.to_string()));
            Ok(())
        },
    },
    OptionSpec {
        flag: "cache-purge-max-keys",
        env: "CORECAST_CACHE_PURGE_MAX_KEYS",
        value: "N",
        default: Some("10000"),
        help: "most keys one prefix purge deletes (the reply says whether more are left)",
        set: |c, v| set_num(&mut c.cache.purge_max_keys, v),
    },
    OptionSpec {
        flag: "log-level",
        env: "CORECAST_LOG",
        value: "LEVEL",
        default: Some("info"),
        help: "error, warn, info, debug or trace",
        set: |c, v| {
            c.log_level = v.parse()?;
            Ok(())
        },
    },
];

/// A configuration error: which option, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    /// Serve with this configuration.
    Serve(Box<Config>),
    /// Print help and exit.
    Help,
    /// Print the version and exit.
    Version,
    /// `check-config`: print the effective configuration and exit.
    CheckConfig(Box<Config>),
    /// `healthcheck [URL]`: probe a running server (for container health
    /// checks in images without curl).
    Healthcheck(String),
}

/// Default URL of `corecast healthcheck`.
pub const DEFAULT_HEALTHCHECK_URL: &str = "http://127.0.0.1:8080/healthz";

/// Applies a TOML configuration file: keys are the flag names
/// (`max-frame-size = "16MiB"`, `cpu = 0`, `exclude-sender = true`).
pub fn apply_toml(cfg: &mut Config, text: &str, origin: &str) -> Result<(), ConfigError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e| ConfigError(format!("{origin}: {e}")))?;
    for (key, value) in &table {
        let opt = OPTIONS
            .iter()
            .find(|o| o.flag == key)
            .ok_or_else(|| ConfigError(format!("{origin}: unknown key `{key}`")))?;
        let text = match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                return Err(ConfigError(format!(
                    "{origin}: `{key}` must be a string, integer or boolean, not {}",
                    other.type_str()
                )))
            }
        };
        apply(opt, cfg, &text, &format!("{origin}: {key}"))?;
    }
    Ok(())
}

impl Config {
    /// Builds the configuration from flags (`args`, without the program
    /// name) over environment variables (`env`) over defaults.
    pub fn from_args<I, S>(
        args: I,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Command, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let args: Vec<String> = args.into_iter().map(Into::into).collect();
        let mut args = args.into_iter().peekable();
        let sub = match args.peek().map(String::as_str) {
            Some(s @ ("serve" | "check-config" | "healthcheck")) => {
                let s = s.to_string();
                args.next();
                s
            }
            _ => "serve".to_string(),
        };
        if sub == "healthcheck" {
            let url = args
                .next()
                .unwrap_or_else(|| DEFAULT_HEALTHCHECK_URL.to_string());
            return Ok(Command::Healthcheck(url));
        }
        let rest: Vec<String> = args.collect();
        // Precedence: flags > environment > config file > defaults.
        let mut cfg = Config::default();
        let file = config_file_arg(&rest).or_else(|| env("CORECAST_CONFIG"));
        if let Some(path) = file {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| ConfigError(format!("--config {path}: {e}")))?;
            apply_toml(&mut cfg, &text, &path)?;
        }
        for opt in OPTIONS {
            if let Some(v) = env(opt.env) {
                apply(opt, &mut cfg, &v, opt.env)?;
            }
        }
        let mut args = rest.into_iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "-h" | "--help" => return Ok(Command::Help),
                "-V" | "--version" => return Ok(Command::Version),
                _ => {}
            }
            let Some(body) = arg.strip_prefix("--") else {
                return Err(ConfigError(format!(
                    "unexpected argument `{arg}` (see --help)"
                )));
            };
            let (name, inline) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (body, None),
            };
            if name == "config" {
                // Already applied, before the environment.
                if inline.is_none() {
                    args.next();
                }
                continue;
            }
            let opt = OPTIONS
                .iter()
                .find(|o| o.flag == name)
                .ok_or_else(|| ConfigError(format!("unknown flag `--{name}` (see --help)")))?;
            let value = match (inline, opt.value.is_empty()) {
                (Some(v), _) => v,
                (None, true) => "true".to_string(),
                (None, false) => args
                    .next()
                    .ok_or_else(|| ConfigError(format!("`--{name}` needs a value")))?,
            };
            apply(opt, &mut cfg, &value, &arg)?;
        }
        cfg.validate()?;
        Ok(match sub.as_str() {
            "check-config" => Command::CheckConfig(Box::new(cfg)),
            _ => Command::Serve(Box::new(cfg)),
        })
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.max_frame_size == 0 || self.max_message_size == 0 {
            return Err(ConfigError("frame and message sizes must be > 0".into()));
        }
        if self.max_connections == 0 {
            return Err(ConfigError("max-connections must be > 0".into()));
        }
        if self.redis_canary_interval.is_zero() || self.redis_command_timeout.is_zero() {
            return Err(ConfigError(
                "redis intervals and timeouts must be > 0".into(),
            ));
        }
        if self.max_handshake_bytes < 256 {
            return Err(ConfigError("max-handshake-bytes must be >= 256".into()));
        }
        self.validate_cache()
    }

    /// A request's deadline (`--handshake-timeout`) is renewed when it goes
    /// to the origin or starts waiting for another request's fetch, so each
    /// of those waits must fit inside it.
    fn validate_cache(&self) -> Result<(), ConfigError> {
        let c = &self.cache;
        if c.origin.is_none() {
            return Ok(());
        }
        if c.origin_timeout.is_zero() || c.origin_connect_timeout.is_zero() {
            return Err(ConfigError("origin timeouts must be > 0".into()));
        }
        if c.origin_max_connections == 0 || c.origin_max_head < 256 {
            return Err(ConfigError(
                "origin-max-connections must be > 0 and origin-max-head >= 256".into(),
            ));
        }
        if c.origin_timeout >= self.handshake_timeout
            || c.coalesce_timeout >= self.handshake_timeout
        {
            return Err(ConfigError(
                "origin-timeout and cache-coalesce-timeout must be below handshake-timeout".into(),
            ));
        }
        Ok(())
    }

    /// The frame/message limits for the WebSocket receiver.
    pub fn ws_limits(&self) -> crate::ws::Limits {
        crate::ws::Limits {
            max_frame_size: self.max_frame_size,
            max_message_size: self.max_message_size,
        }
    }
}

/// The value of `--config FILE` / `--config=FILE`, if given.
fn config_file_arg(args: &[String]) -> Option<String> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--config" {
            return it.next().cloned();
        }
        if let Some(v) = a.strip_prefix("--config=") {
            return Some(v.to_string());
        }
    }
    None
}

fn apply(opt: &OptionSpec, cfg: &mut Config, v: &str, origin: &str) -> Result<(), ConfigError> {
    (opt.set)(cfg, v).map_err(|e| ConfigError(format!("{origin}: invalid value `{v}`: {e}")))
}

/// The README's configuration table, generated from [`OPTIONS`] (a test
/// checks the README carries exactly these rows).
pub fn markdown_table() -> String {
    let mut out = String::from("| flag | environment | default | meaning |\n|---|---|---|---|\n");
    for o in OPTIONS {
        let flag = if o.value.is_empty() {
            format!("`--{}`", o.flag)
        } else {
            format!("`--{} {}`", o.flag, o.value)
        };
        let default = o
            .default
            .unwrap_or(if o.value.is_empty() { "off" } else { "unset" });
        out.push_str(&format!(
            "| {flag} | `{}` | `{default}` | {} |\n",
            o.env,
            o.help.replace('|', "\\|")
        ));
    }
    out
}

/// The `--help` text, generated from [`OPTIONS`].
pub fn help_text() -> String {
    let mut out = String::from(
        "corecast: a pinned, thread-per-core WebSocket pub/sub gateway\n\n\
         Usage: corecast [serve] [OPTIONS]\n\
         \x20      corecast check-config [OPTIONS]   print the effective configuration\n\
         \x20      corecast healthcheck [URL]        exit 0 if URL answers 200 (default http://127.0.0.1:8080/healthz)\n\n\
         Endpoints: GET /ws/{channel}, GET /ws (JSON control), POST /publish/{channel},\n\
         GET /healthz, GET /stats.\n\n\
         Options (flag / environment variable / default):\n",
    );
    for o in OPTIONS {
        let flag = if o.value.is_empty() {
            format!("--{}", o.flag)
        } else {
            format!("--{} {}", o.flag, o.value)
        };
        let default = o
            .default
            .unwrap_or(if o.value.is_empty() { "off" } else { "unset" });
        out.push_str(&format!(
            "  {flag:<30} {}\n  {:<30} env {}, default {default}\n",
            o.help, "", o.env
        ));
    }
    out.push_str("  --config FILE                  TOML file of options (keys = flag names); env CORECAST_CONFIG\n");
    out.push_str("  -h, --help                     print this help\n");
    out.push_str("  -V, --version                  print the version\n");
    out.push_str(
        "\nSizes take an optional KiB/MiB/GiB suffix; durations ms, s or m (bare = seconds).\n",
    );
    out
}

fn non_empty_secret(v: &str) -> Result<Option<Secret>, String> {
    if v.is_empty() {
        return Err("must not be empty".into());
    }
    Ok(Some(Secret(v.to_string())))
}

fn parse_num(v: &str) -> Result<usize, String> {
    v.trim().parse().map_err(|e| format!("{e}"))
}

fn set_num(slot: &mut usize, v: &str) -> Result<(), String> {
    *slot = parse_num(v)?;
    Ok(())
}

fn set_bool(slot: &mut bool, v: &str) -> Result<(), String> {
    *slot = match v {
        "1" | "true" | "yes" | "on" => true,
        "0" | "false" | "no" | "off" | "" => false,
        _ => return Err("expected true or false".into()),
    };
    Ok(())
}

fn set_size(slot: &mut usize, v: &str) -> Result<(), String> {
    *slot = parse_size(v)?;
    Ok(())
}

fn set_duration(slot: &mut Duration, v: &str) -> Result<(), String> {
    *slot = parse_duration(v)?;
    Ok(())
}

/// Parses `123`, `4KiB`, `16MiB`, `1GiB` (also `K`, `M`, `G`, `KB`…, all
/// binary multiples), without overflowing.
pub fn parse_size(v: &str) -> Result<usize, String> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| "expected a number of bytes".to_string())?;
    let mult: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("unknown size unit `{unit}`")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| "size too large".to_string())
}

/// Parses `250ms`, `10s`, `2m`, or a bare number of seconds.
pub fn parse_duration(v: &str) -> Result<Duration, String> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: u64 = num.parse().map_err(|_| "expected a duration".to_string())?;
    match unit {
        "" | "s" => Ok(Duration::from_secs(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "m" => n
            .checked_mul(60)
            .map(Duration::from_secs)
            .ok_or_else(|| "duration too large".to_string()),
        _ => Err(format!("unknown duration unit `{unit}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn serve(args: &[&str], env: impl Fn(&str) -> Option<String>) -> Config {
        match Config::from_args(args.iter().copied(), env).unwrap() {
            Command::Serve(c) => *c,
            other => panic!("expected serve, got {other:?}"),
        }
    }

    #[test]
    fn defaults_match_the_documented_table() {
        let c = serve(&[], no_env);
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.max_frame_size, 1 << 20);
        assert_eq!(c.max_handshake_bytes, 8 << 10);
        assert_eq!(c.handshake_timeout, Duration::from_secs(10));
        assert_eq!(c.slow_consumer, SlowConsumerPolicy::Disconnect);
        assert!(c.cpu.is_none() && c.root_channel.is_none() && !c.exclude_sender);
    }

    #[test]
    fn flags_override_env_which_overrides_defaults() {
        let env = |k: &str| match k {
            "CORECAST_LISTEN" => Some("0.0.0.0:9000".to_string()),
            "CORECAST_MAX_FRAME_SIZE" => Some("64KiB".to_string()),
            _ => None,
        };
        let c = serve(&["--max-frame-size", "16MiB", "--exclude-sender"], env);
        assert_eq!(c.listen.to_string(), "0.0.0.0:9000");
        assert_eq!(c.max_frame_size, 16 << 20);
        assert!(c.exclude_sender);
        let c = serve(&["serve", "--cpu=1", "--root-channel", "echo"], no_env);
        assert_eq!(c.cpu, Some(1));
        assert_eq!(c.root_channel.as_deref(), Some("echo"));
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        for args in [
            &["--nope"][..],
            &["--listen"],
            &["--listen", "nowhere"],
            &["--max-frame-size", "12XB"],
            &["--max-frame-size", "99999999999999999999GiB"],
            &["--slow-consumer", "maybe"],
            &["--root-channel", "bad name"],
            &["--max-frame-size", "0"],
            &["positional"],
        ] {
            assert!(
                Config::from_args(args.iter().copied(), no_env).is_err(),
                "{args:?} should fail"
            );
        }
    }

    #[test]
    fn help_lists_every_option_with_env_and_default() {
        let h = help_text();
        for o in OPTIONS {
            assert!(h.contains(&format!("--{}", o.flag)), "{}", o.flag);
            assert!(h.contains(o.env), "{}", o.env);
        }
        assert!(h.contains("default 127.0.0.1:8080"));
    }

    #[test]
    fn readme_documents_every_option_as_generated() {
        let readme = include_str!("../README.md");
        for row in markdown_table().lines().skip(2) {
            assert!(
                readme.contains(row),
                "README.md config table is stale; missing row:\n{row}\n(regenerate from config::markdown_table)"
            );
        }
    }

    #[test]
    fn a_toml_file_sits_between_defaults_and_env() {
        let dir = std::env::temp_dir().join(format!("corecast-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("corecast.toml");
        std::fs::write(
            &path,
            "listen = \"0.0.0.0:9000\"\nmax-frame-size = \"64KiB\"\ncpu = 1\nexclude-sender = true\n",
        )
        .unwrap();
        let p = path.to_str().unwrap();
        let env = |k: &str| (k == "CORECAST_MAX_FRAME_SIZE").then(|| "2KiB".to_string());
        let c = serve(&["--config", p, "--cpu", "0"], env);
        assert_eq!(c.listen.to_string(), "0.0.0.0:9000", "file over default");
        assert_eq!(c.max_frame_size, 2048, "env over file");
        assert_eq!(c.cpu, Some(0), "flag over file");
        assert!(c.exclude_sender);
        std::fs::write(&path, "nope = 1\n").unwrap();
        let err = Config::from_args(["--config", p], no_env).unwrap_err();
        assert!(err.0.contains("unknown key `nope`"), "{err}");
        std::fs::write(&path, "cpu = [1]\n").unwrap();
        assert!(Config::from_args(["--config", p], no_env).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn subcommands_parse() {
        match Config::from_args(["check-config", "--cpu", "1"], no_env).unwrap() {
            Command::CheckConfig(c) => assert_eq!(c.cpu, Some(1)),
            other => panic!("{other:?}"),
        }
        match Config::from_args(["healthcheck"], no_env).unwrap() {
            Command::Healthcheck(u) => assert_eq!(u, DEFAULT_HEALTHCHECK_URL),
            other => panic!("{other:?}"),
        }
        let c = Config::from_args(["check-config", "--token-secret", "s3cr3t"], no_env).unwrap();
        assert!(
            !format!("{c:?}").contains("s3cr3t"),
            "secrets never printed"
        );
    }

    #[test]
    fn cache_options_default_validate_and_hide_the_token() {
        let c = serve(&[], no_env).cache;
        assert!(c.origin.is_none() && c.purge_token.is_none());
        assert_eq!((c.prefix.as_str(), c.origin_max_body), ("/api/", 8 << 20));
        assert_eq!(c.max_bytes, 64 << 20);
        assert_eq!(c.default_ttl, Duration::from_secs(60));
        assert_eq!(c.coalesce_timeout, Duration::from_secs(5));
        assert_eq!(c.stale_while_revalidate, Duration::from_secs(10));
        assert_eq!(c.stale_if_error, Duration::from_secs(300));
        assert_eq!(c.redis_timeout, Duration::from_millis(100));
        let env = |k: &str| (k == "CORECAST_CACHE_PURGE_TOKEN").then(|| "t0ken".to_string());
        let c = serve(&["--origin", "http://127.0.0.1:9/v1"], env).cache;
        assert_eq!(c.origin.unwrap().to_string(), "http://127.0.0.1:9/v1");
        assert_eq!(c.purge_token.as_ref().map(Secret::expose), Some("t0ken"));
        assert!(!format!("{:?}", c.purge_token).contains("t0ken"));
        for args in [
            &["--origin", "https://a"][..],
            &["--cache-prefix", "api"],
            &["--cache-prefix", "/api"],
            &["--cache-purge-token", ""],
            &["--origin", "http://a", "--origin-timeout", "10s"],
            &["--origin", "http://a", "--cache-coalesce-timeout", "20s"],
        ] {
            assert!(
                Config::from_args(args.iter().copied(), no_env).is_err(),
                "{args:?} should fail"
            );
        }
    }

    #[test]
    fn sizes_and_durations_parse() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("2k").unwrap(), 2048);
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("5h").is_err());
    }
}
