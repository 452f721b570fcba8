//! The options table: one entry per option (flag, environment variable,
//! placeholder, default, help, setter), and the `--help` text and the book's
//! table generated from it.

use super::fields::Config;
use super::values::*;
use crate::hooks::HookKind;
use crate::hub::SlowConsumerPolicy;
use crate::secret::Secret;

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
    pub(super) set: fn(&mut Config, &str) -> Result<(), String>,
}

impl OptionSpec {
    /// Whether the value is a secret, never to be shown in errors or logs.
    pub fn is_secret(&self) -> bool {
        matches!(self.value, "SECRET" | "TOKEN" | "ID:KEY:SECRET")
    }
}

/// One table entry: `"flag", ENV_VAR, "PLACEHOLDER", "default" (or `-`
/// for none), "help" => setter;`.
macro_rules! options {
    ($($flag:literal, $env:ident, $value:literal, $default:tt, $help:literal => $set:expr;)*) => {
        &[$(OptionSpec {
            flag: $flag,
            env: stringify!($env),
            value: $value,
            default: options!(@default $default),
            help: $help,
            set: $set,
        }),*]
    };
    (@default -) => { None };
    (@default $d:literal) => { Some($d) };
}

/// All options, in the order `--help` lists them.
#[rustfmt::skip]
pub const OPTIONS: &[OptionSpec] = options! {
    "listen", CORECAST_LISTEN, "ADDR", "127.0.0.1:8080",
        "address to listen on"
        => |c, v| {
            c.listen = v.parse().map_err(|e| format!("{e}"))?;
            Ok(())
        };
    "admin-listen", CORECAST_ADMIN_LISTEN, "ADDR", -,
        "serve /stats, /metrics, /status and /status/ws only on this address (plus /healthz and /readyz); the main listener then answers them 404 (default: on --listen)"
        => |c, v| {
            c.admin_listen = Some(v.parse().map_err(|e| format!("{e}"))?);
            Ok(())
        };
    "admin-key", CORECAST_ADMIN_KEY, "SECRET", -,
        "enable the operator console at /console (and `corecast top`) on the admin listener, or on --listen without --admin-listen, behind a login with this key (at least 16 bytes); logins are rate-limited per address (default: no console)"
        => |c, v| {
            c.admin_key = non_empty_secret(v)?;
            Ok(())
        };
    "tls-cert", CORECAST_TLS_CERT, "PATHS", -,
        "serve TLS 1.3 and 1.2 on --listen (https://, wss://) with this PEM certificate chain, leaf first (e.g. certbot's fullchain.pem); several, comma-separated, are chosen by the client's SNI name (the first valid for it, else the first) and pair by position with --tls-key; files are read again on SIGHUP (default: plain TCP)"
        => |c, v| {
            c.tls.certs = paths(v);
            Ok(())
        };
    "tls-key", CORECAST_TLS_KEY, "PATHS", -,
        "the PEM private key (PKCS#8, RSA or EC; e.g. certbot's privkey.pem) of each --tls-cert, comma-separated in the same order"
        => |c, v| {
            c.tls.keys = paths(v);
            Ok(())
        };
    "tls-max-handshakes", CORECAST_TLS_MAX_HANDSHAKES, "N", "1024",
        "TLS handshakes under way at once on --listen, a place taken when a connection's ClientHello arrives (a socket that sends nothing holds none); more are closed before any TLS work, unanswered, and counted (tls_handshakes_refused), so a handshake storm costs bounded memory (0 = unbounded)"
        => |c, v| set_num(&mut c.tls.max_handshakes, v);
    "cpu", CORECAST_CPU, "N", -,
        "CPU to pin the worker to, the one-worker form of --cpus (default: first CPU the process may use)"
        => |c, v| {
            c.cpu = Some(parse_num(v)?);
            Ok(())
        };
    "workers", CORECAST_WORKERS, "N", "1",
        "worker threads, each pinned to its CPU with its own connections; one channel space across them (a publish on any worker reaches every subscriber on every worker once, in the channel's order; in Redis mode each worker is an instance with its own Redis connections); auto = one per CPU of --cpus or of those the process may use; 1 is the single-core server"
        => |c, v| {
            c.workers = super::values::Workers::parse(v)?;
            Ok(())
        };
    "cpus", CORECAST_CPUS, "LIST", -,
        "the workers' CPUs in worker order, as taskset writes them (0-3, 0,2); --workers N takes the first N (default: the CPUs the process may use, in order)"
        => |c, v| {
            c.cpus = Some(super::values::parse_cpus(v)?);
            Ok(())
        };
    "worker-ring", CORECAST_WORKER_RING, "N", "4096",
        "messages each ring between two workers holds (rounded up to a power of two, 64 to 1048576); a full ring never blocks the sender: what does not fit waits in the sender's overflow queue, which counts toward --publish-backpressure"
        => |c, v| {
            let n = parse_num(v)?;
            if !(64..=crate::ring::MAX_CAPACITY).contains(&n) {
                return Err(format!("expected 64 to {}", crate::ring::MAX_CAPACITY));
            }
            c.worker_ring = n;
            Ok(())
        };
    "root-channel", CORECAST_ROOT_CHANNEL, "NAME", -,
        "serve this channel at `GET /` upgrades (default: none, 404)"
        => |c, v| {
            if !crate::channel::valid_channel_name(v) {
                return Err("invalid channel name".into());
            }
            c.root_channel = Some(v.to_string());
            Ok(())
        };
    "max-frame-size", CORECAST_MAX_FRAME_SIZE, "BYTES", "1MiB",
        "largest WebSocket frame payload; larger ones close with 1009"
        => |c, v| set_size(&mut c.ws.max_frame_size, v);
    "max-message-size", CORECAST_MAX_MESSAGE_SIZE, "BYTES", "1MiB",
        "largest WebSocket message; larger ones close with 1009"
        => |c, v| set_size(&mut c.ws.max_message_size, v);
    "compression", CORECAST_COMPRESSION, "BOOL", "true",
        "accept permessage-deflate (RFC 7692) when a client offers it: each broadcast is compressed once per window size and the frame shared; client messages are inflated up to --max-message-size"
        => |c, v| set_bool(&mut c.compression.enabled, v);
    "compression-min-size", CORECAST_COMPRESSION_MIN_SIZE, "BYTES", "256",
        "messages shorter than this go uncompressed to compressed connections too (deflate saves little on them and costs a compression per publish)"
        => |c, v| set_size(&mut c.compression.min_size, v);
    "compression-level", CORECAST_COMPRESSION_LEVEL, "N", "6",
        "zlib level for outbound messages: 1 (fastest) to 9 (smallest)"
        => |c, v| {
            let level = parse_num(v)?;
            if !(1..=9).contains(&level) {
                return Err("expected a level from 1 to 9".into());
            }
            c.compression.level = level as u32;
            Ok(())
        };
    "max-handshake-bytes", CORECAST_MAX_HANDSHAKE_BYTES, "BYTES", "8KiB",
        "largest HTTP request head; larger ones get 431"
        => |c, v| set_size(&mut c.http.max_handshake_bytes, v);
    "handshake-timeout", CORECAST_HANDSHAKE_TIMEOUT, "DURATION", "10s",
        "time allowed for a complete request head (also between keep-alive requests)"
        => |c, v| set_duration(&mut c.handshake_timeout, v);
    "max-body-size", CORECAST_MAX_BODY_SIZE, "BYTES", "1MiB",
        "largest HTTP request body; larger ones get 413"
        => |c, v| set_size(&mut c.http.max_body_size, v);
    "max-outbound-queue", CORECAST_MAX_OUTBOUND_QUEUE, "BYTES", "1MiB",
        "outbound bytes per connection past which publishers pause until it drains; a connection over it whose writes stall for --slow-consumer-grace, or over 4 times it, is a slow consumer"
        => |c, v| set_size(&mut c.max_outbound_queue, v);
    "latest-send-buffer", CORECAST_LATEST_SEND_BUFFER, "BYTES", "16KiB",
        "the kernel send buffer (SO_SNDBUF, which Linux doubles) of a connection that subscribes to a latest-value channel (a namespace's conflate = true): what waits beyond it stays in corecast's queue, where a newer value replaces it (0 = the kernel's autotuning, up to megabytes of stale values)"
        => |c, v| set_size(&mut c.latest_send_buffer, v);
    "slow-consumer-grace", CORECAST_SLOW_CONSUMER_GRACE, "DURATION", "1s",
        "how long a connection over --max-outbound-queue may go without its writes accepting a byte before it is a slow consumer"
        => |c, v| set_duration(&mut c.slow_consumer_grace, v);
    "write-stall-timeout", CORECAST_WRITE_STALL_TIMEOUT, "DURATION", "10s",
        "a connection with data to write whose writes accept no byte for this long is cut as a slow consumer (0 = never)"
        => |c, v| set_duration(&mut c.write_stall_timeout, v);
    "slow-consumer", CORECAST_SLOW_CONSUMER, "POLICY", "disconnect",
        "`disconnect` (close 1008) or `drop-oldest` (drop oldest queued messages)"
        => |c, v| {
            c.slow_consumer = match v {
            "disconnect" => SlowConsumerPolicy::Disconnect,
            "drop-oldest" => SlowConsumerPolicy::DropOldest,
                _ => return Err("expected `disconnect` or `drop-oldest`".into()),
            };
            Ok(())
        };
    "max-connections", CORECAST_MAX_CONNECTIONS, "N", "50000",
        "most simultaneous connections; more get 503"
        => |c, v| set_num(&mut c.max_connections, v);
    "max-connections-per-ip", CORECAST_MAX_CONNECTIONS_PER_IP, "N", "256",
        "most simultaneous connections from one client address; more get 503 (0 = unlimited)"
        => |c, v| set_num(&mut c.peers.max_connections_per_ip, v);
    "handshake-rate-per-ip", CORECAST_HANDSHAKE_RATE_PER_IP, "RATE[:BURST]", "50:100",
        "WebSocket handshakes per second one client address may start (burst: BURST, default 2 × RATE); faster ones get 429 (0 = unlimited)"
        => |c, v| {
            let (rate, burst) = match v.split_once(':') {
                Some((r, b)) => (r, Some(b)),
                None => (v, None),
            };
            let rate: u32 = rate.trim().parse().map_err(|e| format!("{e}"))?;
            let burst = match burst {
                Some(b) => b.trim().parse().map_err(|e| format!("{e}"))?,
                None => rate.saturating_mul(2),
            };
            c.peers.handshake_rate = rate;
            c.peers.handshake_burst = burst;
            Ok(())
        };
    "per-ip-exempt", CORECAST_PER_IP_EXEMPT, "LIST", "127.0.0.0/8,::1",
        "comma-separated addresses or CIDR ranges the per-IP limits do not apply to (empty = nobody; behind a proxy, list the proxy only if it is the sole client)"
        => |c, v| {
            c.peers.exempt = crate::peers::parse_nets(v)?;
            Ok(())
        };
    "max-subscriptions", CORECAST_MAX_SUBSCRIPTIONS, "N", "64",
        "most channels one connection may subscribe to"
        => |c, v| set_num(&mut c.max_subscriptions, v);
    "sse-heartbeat", CORECAST_SSE_HEARTBEAT, "DURATION", "15s",
        "send a comment line on every Server-Sent Events stream (GET /sse) this often, so proxies and clients see it alive (0 = never)"
        => |c, v| {
            c.sse.heartbeat_ms = parse_duration(v)?.as_millis().try_into().unwrap_or(u64::MAX);
            Ok(())
        };
    "sse-max-channels", CORECAST_SSE_MAX_CHANNELS, "N", "64",
        "most channels one GET /sse may name (more is answered 400); also bounded by --max-subscriptions"
        => |c, v| set_num(&mut c.sse.max_channels, v);
    "max-total-inbound", CORECAST_MAX_TOTAL_INBOUND, "BYTES", "128MiB",
        "input all connections of a worker may hold in partial WebSocket frames, fragmented messages and HTTP bodies being read; past it, a connection whose held input grows beyond 64 KiB is closed with 1013 (or answered 503)"
        => |c, v| set_size(&mut c.max_total_inbound, v);
    "max-total-outbound", CORECAST_MAX_TOTAL_OUTBOUND, "BYTES", "1GiB",
        "memory held by outbound frames across all connections, each frame shared by many subscribers counted once; past it the subscriber being queued to is treated as slow"
        => |c, v| set_size(&mut c.max_total_outbound, v);
    "history-size", CORECAST_HISTORY_SIZE, "N", "0",
        "messages kept per channel for clients that resume (JSON subscribe with `since`, GET /history); 0 = history off"
        => |c, v| set_num(&mut c.history.size, v);
    "history-ttl", CORECAST_HISTORY_TTL, "DURATION", "5m",
        "how long a channel's messages are kept after its last publish; a channel without subscribers then loses its history (and epoch)"
        => |c, v| {
            let d = parse_duration(v)?;
            if d.is_zero() {
                return Err("must be more than 0".into());
            }
            c.history.ttl_ms = d.as_millis() as u64;
            Ok(())
        };
    "history-max-bytes", CORECAST_HISTORY_MAX_BYTES, "BYTES", "1MiB",
        "bytes of history kept per channel (payloads + 48 bytes each); all channels' history together only uses what --max-total-outbound leaves free"
        => |c, v| set_size(&mut c.history.max_bytes, v);
    "publish-backpressure", CORECAST_PUBLISH_BACKPRESSURE, "BYTES", "16MiB",
        "when this much waits to be written to subscribers (each connection counted up to 64 KiB), publishers are read more slowly until it drains"
        => |c, v| set_size(&mut c.publish_backpressure, v);
    "fanout-window", CORECAST_FANOUT_WINDOW, "N", "256",
        "most subscriber writes a fan-out has in progress at once; the rest are started, in order, as those complete, so a message to many thousands of subscribers cannot keep other connections waiting for more than about this many writes (0 = start all at once)"
        => |c, v| {
            c.fanout_window = v.trim().parse().map_err(|e| format!("{e}"))?;
            Ok(())
        };
    "latency-histograms", CORECAST_LATENCY_HISTOGRAMS, "BOOL", "true",
        "time every subscriber write for the fan-out delay histogram of /metrics and /status (one clock read per publish and per write)"
        => |c, v| set_bool(&mut c.latency_histograms, v);
    "publish-rate", CORECAST_PUBLISH_RATE, "N", "10000",
        "messages/s one connection may publish (burst: one second's worth); faster publishers are read more slowly, nothing is dropped (0 = unlimited)"
        => |c, v| {
            c.auth.publish_rate = v.trim().parse().map_err(|e| format!("{e}"))?;
            Ok(())
        };
    "publish-key", CORECAST_PUBLISH_KEY, "SECRET", -,
        "require `Authorization: Bearer SECRET` on POST /publish and, without --token-secret, for publishing over WebSockets (key given at the upgrade as Bearer or ?key=; without it a WebSocket may only subscribe) (default: open)"
        => |c, v| {
            c.auth.publish_key = non_empty_secret(v)?;
            Ok(())
        };
    "token-secret", CORECAST_TOKEN_SECRET, "SECRET", -,
        "require a JWT (HS256, signed with SECRET, at least 32 bytes) on every WebSocket upgrade, as ?token= or Authorization: Bearer; connections are closed with 4001 when it expires (default: none required)"
        => |c, v| {
            if v.len() < crate::auth::MIN_TOKEN_SECRET_LEN {
                return Err(format!(
                    "too short ({} bytes): an HS256 secret needs at least {} (e.g. `openssl rand -base64 32`)",
                    v.len(),
                    crate::auth::MIN_TOKEN_SECRET_LEN
                ));
            }
            c.auth.token_secret = non_empty_secret(v)?;
            Ok(())
        };
    "token-audience", CORECAST_TOKEN_AUDIENCE, "AUD", -,
        "with tokens required (--token-secret, --token-public-key): tokens must carry this `aud` (a string, or in a list) (default: not checked)"
        => |c, v| {
            c.auth.token_audience = Some(v.to_string()).filter(|a| !a.is_empty());
            Ok(())
        };
    "token-issuer", CORECAST_TOKEN_ISSUER, "ISS", -,
        "with tokens required: tokens must carry this `iss` (default: not checked)"
        => |c, v| {
            c.auth.token_issuer = Some(v.to_string()).filter(|a| !a.is_empty());
            Ok(())
        };
    "token-public-key", CORECAST_TOKEN_PUBLIC_KEY, "PATHS", -,
        "require a JWT signed by an identity provider on every WebSocket upgrade (as --token-secret does): comma-separated PEM files of SPKI public keys (-----BEGIN PUBLIC KEY-----), RSA of at least 2048 bits for RS256/RS384/RS512 or EC P-256/P-384 for ES256/ES384, at most 32 keys; each key checks only its own algorithm family, and with several keys of a family a token must name one by `kid` (default: none)"
        => |c, v| {
            c.auth.token_public_keys = load_public_keys(v)?;
            Ok(())
        };
    "token-jwks-url", CORECAST_TOKEN_JWKS_URL, "URL", -,
        "https://host[:port]/path of an identity provider's key set (JWKS; plain http:// only to a loopback address): require a JWT on every WebSocket upgrade, checked with its RSA and EC signature keys (as --token-public-key's, at most 32, a set of at most 256 KiB); fetched by the worker without blocking it, refreshed every 10 x --token-jwks-refresh and when a token names an unknown `kid`; kept when the provider fails. Until the first set arrives such tokens are refused (401) and the fetch is retried with backoff (default: none)"
        => |c, v| {
            let v = v.trim();
            let url = v.parse::<crate::cache::origin::OriginUrl>()?;
            if !url.tls && !is_loopback_host(&url.host) {
                return Err(format!(
                    "{v}: a key set decides who is admitted, so it is fetched over https:// \
                     (plain http:// only from a loopback address, e.g. a local sidecar)"
                ));
            }
            c.auth.token_jwks_url = (!v.is_empty()).then(|| v.to_string());
            Ok(())
        };
    "token-jwks-refresh", CORECAST_TOKEN_JWKS_REFRESH, "DURATION", "30s",
        "fewest time between two fetches of the --token-jwks-url key set caused by tokens naming an unknown `kid` (those tokens are refused meanwhile, 401); the set is also fetched every 10 x this"
        => |c, v| set_positive_duration(&mut c.auth.token_jwks_refresh, v);
    "token-jwks-timeout", CORECAST_TOKEN_JWKS_TIMEOUT, "DURATION", "5s",
        "time for one fetch of the --token-jwks-url key set (connect to last byte); a slower provider counts as failed and the cached keys stay in use"
        => |c, v| set_positive_duration(&mut c.auth.token_jwks_timeout, v);
    "token-user-claim", CORECAST_TOKEN_USER_CLAIM, "CLAIM", "sub",
        "the token claim (a string) that names the user — in presence, logs and hooks — e.g. `email` for providers that cannot put the application's user id in `sub`; a token without it is refused"
        => |c, v| {
            let v = v.trim();
            c.auth.token_user_claim = (!v.is_empty() && v != "sub").then(|| v.to_string());
            Ok(())
        };
    "allowed-origins", CORECAST_ALLOWED_ORIGINS, "LIST", -,
        "comma-separated Origins allowed to upgrade, e.g. https://app.example (default: any)"
        => |c, v| {
            c.auth.allowed_origins = v
                .split(',')
                .map(str::trim)
                .filter(|o| !o.is_empty())
                .map(str::to_string)
                .collect();
            Ok(())
        };
    "ping-interval", CORECAST_PING_INTERVAL, "DURATION", "30s",
        "server ping after this much silence from a client (0 = never)"
        => |c, v| set_duration(&mut c.ping_interval, v);
    "idle-timeout", CORECAST_IDLE_TIMEOUT, "DURATION", "75s",
        "close a WebSocket whose client sent nothing (not even a pong) for this long (0 = never)"
        => |c, v| set_duration(&mut c.idle_timeout, v);
    "park-after", CORECAST_PARK_AFTER, "DURATION", "2s",
        "free a quiet WebSocket's tasks after this long without input or output; its socket waits in the worker's poller (one with nothing to do at its upgrade parks at once; 0 = never park)"
        => |c, v| set_duration(&mut c.park_after, v);
    "close-timeout", CORECAST_CLOSE_TIMEOUT, "DURATION", "5s",
        "time a client has to answer our close frame"
        => |c, v| set_duration(&mut c.close_timeout, v);
    "shutdown-timeout", CORECAST_SHUTDOWN_TIMEOUT, "DURATION", "5s",
        "graceful-shutdown deadline after SIGTERM/SIGINT"
        => |c, v| set_duration(&mut c.shutdown_timeout, v);
    "exclude-sender", CORECAST_EXCLUDE_SENDER, "", -,
        "do not deliver a message back to the connection that sent it"
        => |c, v| set_bool(&mut c.exclude_sender, v);
    "legacy-driver", CORECAST_LEGACY_DRIVER, "", -,
        "use the epoll driver even where io_uring works"
        => |c, v| set_bool(&mut c.force_legacy_driver, v);
    "redis-url", REDIS_URL, "URL", -,
        "redis://[user:password@]host:port[/db]: fan out through Redis pub/sub; rediss:// connects over TLS, verifying the server's certificate for the host name; redis+sentinel://[user:password@]host:port[,host:port...][/db]?master=NAME finds the master through Redis Sentinel and follows its failovers (default: in-process)"
        => |c, v| c.redis.set_url(v);
    "redis-cluster", REDIS_CLUSTER, "SEEDS", -,
        "[redis[s]://][user:password@]host:port[,host:port...]: fan out through a Redis Cluster (sharded pub/sub, SPUBLISH/SSUBSCRIBE; Redis 7+); rediss:// reaches every node over TLS; exclusive with --redis-url"
        => |c, v| {
            c.redis.cluster = Some(v.parse().map_err(|e| format!("{e}"))?);
            Ok(())
        };
    "redis-tls-ca", CORECAST_REDIS_TLS_CA, "PATH", -,
        "PEM CA certificates a rediss:// server's certificate must chain to (a private CA), instead of the system's roots; verification cannot be turned off (default: the system's roots)"
        => |c, v| {
            c.redis.tls_ca = Some(v.trim().into()).filter(|p: &std::path::PathBuf| !p.as_os_str().is_empty());
            Ok(())
        };
    "redis-prefix", CORECAST_REDIS_PREFIX, "PREFIX", "corecast:",
        "prefix of corecast's Redis channel names"
        => |c, v| {
            if v.len() > 64 || v.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) {
                return Err("at most 64 bytes, no whitespace".into());
            }
            c.redis.prefix = v.to_string();
            Ok(())
        };
    "redis-publish-buffer", CORECAST_REDIS_PUBLISH_BUFFER, "BYTES", "8MiB",
        "publishes held while Redis is unreachable; beyond it publishes are refused (503 / in-band error / close 1013)"
        => |c, v| set_size(&mut c.redis.publish_buffer, v);
    "cache-redis-write-buffer", CORECAST_CACHE_REDIS_WRITE_BUFFER, "BYTES", "8MiB",
        "cache store writes held for Redis, apart from publishes; beyond it a response is served but not stored (cache_store_skipped)"
        => |c, v| set_size(&mut c.redis.cache_write_buffer, v);
    "redis-connect-timeout", CORECAST_REDIS_CONNECT_TIMEOUT, "DURATION", "2s",
        "timeout of one Redis connection attempt (retries back off exponentially to 1s, with jitter)"
        => |c, v| set_duration(&mut c.redis.connect_timeout, v);
    "redis-command-timeout", CORECAST_REDIS_COMMAND_TIMEOUT, "DURATION", "2s",
        "time Redis has to answer before the connection is considered dead"
        => |c, v| set_duration(&mut c.redis.command_timeout, v);
    "redis-canary-interval", CORECAST_REDIS_CANARY_INTERVAL, "DURATION", "1s",
        "interval of the round-trip canary behind /readyz (ready while one returned within 3 intervals)"
        => |c, v| set_duration(&mut c.redis.canary_interval, v);
    "redis-resume-delay", CORECAST_REDIS_RESUME_DELAY, "DURATION", "1500ms",
        "after (re)subscribing, wait this long before sending buffered publishes, so other instances can re-subscribe first (the default covers their reconnects being one backoff step, up to 1 s, apart)"
        => |c, v| set_duration(&mut c.redis.resume_delay, v);
    "redis-max-reply-size", CORECAST_REDIS_MAX_REPLY_SIZE, "BYTES", "64MiB",
        "largest reply accepted from Redis; a larger one (or nesting deeper than 5 arrays) drops the connection"
        => |c, v| set_size(&mut c.redis.max_reply_size, v);
    "origin", CORECAST_ORIGIN, "URL", -,
        "http[s]://host[:port][/base-path]: cache GET/HEAD under --cache-prefix in front of this origin; https:// verifies its certificate for the host against the system's CA certificates (default: no cache, 404)"
        => |c, v| {
            c.cache.origin = Some(v.parse()?);
            Ok(())
        };
    "cache-prefix", CORECAST_CACHE_PREFIX, "PATH", "/api/",
        "requests under this path prefix are cached; the rest of the path and the query go to the origin"
        => |c, v| {
            if !v.starts_with('/') || !v.ends_with('/') || v.bytes().any(|b| b <= b' ' || b == b'?') {
                return Err("a path starting and ending with /".into());
            }
            c.cache.prefix = v.to_string();
            Ok(())
        };
    "origin-max-body", CORECAST_ORIGIN_MAX_BODY, "BYTES", "8MiB",
        "largest origin response body; larger ones are answered 502"
        => |c, v| set_size(&mut c.cache.origin_max_body, v);
    "origin-max-head", CORECAST_ORIGIN_MAX_HEAD, "BYTES", "16KiB",
        "largest origin response head (and chunk extensions + trailers); larger ones are answered 502"
        => |c, v| set_size(&mut c.cache.origin_max_head, v);
    "origin-connect-timeout", CORECAST_ORIGIN_CONNECT_TIMEOUT, "DURATION", "1s",
        "timeout of one connection attempt to the origin (504)"
        => |c, v| set_duration(&mut c.cache.origin_connect_timeout, v);
    "origin-timeout", CORECAST_ORIGIN_TIMEOUT, "DURATION", "5s",
        "time for a whole origin exchange, connection to last body byte (504); below --handshake-timeout"
        => |c, v| set_duration(&mut c.cache.origin_timeout, v);
    "origin-pool-size", CORECAST_ORIGIN_POOL_SIZE, "N", "16",
        "idle keep-alive connections to the origin kept for reuse"
        => |c, v| set_num(&mut c.cache.origin_pool_size, v);
    "origin-dns-ttl", CORECAST_ORIGIN_DNS_TTL, "DURATION", "30s",
        "resolved origin addresses are re-resolved (off the worker thread) after this long"
        => |c, v| set_duration(&mut c.cache.origin_dns_ttl, v);
    "origin-idle-timeout", CORECAST_ORIGIN_IDLE_TIMEOUT, "DURATION", "30s",
        "pooled origin connections idle longer than this are closed, not reused"
        => |c, v| set_duration(&mut c.cache.origin_idle_timeout, v);
    "origin-max-connections", CORECAST_ORIGIN_MAX_CONNECTIONS, "N", "256",
        "origin requests in flight at once; more wait (within --origin-timeout)"
        => |c, v| set_num(&mut c.cache.origin_max_connections, v);
    "cache-max-bytes", CORECAST_CACHE_MAX_BYTES, "BYTES", "64MiB",
        "size of the in-memory store used without Redis (least recently used entries are evicted)"
        => |c, v| set_size(&mut c.cache.max_bytes, v);
    "cache-default-ttl", CORECAST_CACHE_DEFAULT_TTL, "DURATION", "60s",
        "heuristic freshness of a response without max-age, s-maxage or Expires; only when it is public, has Last-Modified, or has no Cache-Control at all"
        => |c, v| set_duration(&mut c.cache.default_ttl, v);
    "cache-bypass-headers", CORECAST_CACHE_BYPASS_HEADERS, "NAMES", "cookie,authorization",
        "comma-separated request headers that make a request personal: not served from or stored into the cache unless the response says public or s-maxage"
        => |c, v| {
            let names: Vec<String> = v
                .split(',')
                .map(|n| n.trim().to_ascii_lowercase())
                .filter(|n| !n.is_empty())
                .collect();
            if names.iter().any(|n| !n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')) {
                return Err("header names are letters, digits, - and _".into());
            }
            c.cache.bypass_headers = names;
            Ok(())
        };
    "cache-coalesce-timeout", CORECAST_CACHE_COALESCE_TIMEOUT, "DURATION", "5s",
        "longest wait for a concurrent request's origin fetch of the same key before fetching itself"
        => |c, v| set_duration(&mut c.cache.coalesce_timeout, v);
    "cache-stale-while-revalidate", CORECAST_CACHE_STALE_WHILE_REVALIDATE, "DURATION", "10s",
        "stale-while-revalidate window when the origin gives none"
        => |c, v| set_duration(&mut c.cache.stale_while_revalidate, v);
    "cache-stale-if-error", CORECAST_CACHE_STALE_IF_ERROR, "DURATION", "300s",
        "stale-if-error window when the origin gives none"
        => |c, v| set_duration(&mut c.cache.stale_if_error, v);
    "cache-redis-timeout", CORECAST_CACHE_REDIS_TIMEOUT, "DURATION", "100ms",
        "bound of every Redis cache read/write on the request path; slower = a miss, not stored"
        => |c, v| set_duration(&mut c.cache.redis_timeout, v);
    "cache-purge-token", CORECAST_CACHE_PURGE_TOKEN, "TOKEN", -,
        "bearer token of POST /cache/purge (default: purge disabled, 404)"
        => |c, v| {
            if v.is_empty() || v.bytes().any(|b| !b.is_ascii_graphic()) {
                return Err("a non-empty token of visible ASCII".into());
            }
            c.cache.purge_token = Some(Secret(v.to_string()));
            Ok(())
        };
    "cache-purge-max-keys", CORECAST_CACHE_PURGE_MAX_KEYS, "N", "10000",
        "most keys one prefix purge deletes (the reply says whether more are left)"
        => |c, v| set_num(&mut c.cache.purge_max_keys, v);
    "log-level", CORECAST_LOG, "LEVEL", "info",
        "error, warn, info, debug or trace"
        => |c, v| {
            c.log_level = v.parse()?;
            Ok(())
        };
    "pusher-app", CORECAST_PUSHER_APP, "ID:KEY:SECRET", -,
        "serve the Pusher protocol (v7) for this app; repeat the flag (or comma-separate, as env and TOML must) for several apps, each with its own channels; append `:client-events` to let its clients send client-* events"
        => |c, v| c.pusher.add_apps(v);
    "pusher-activity-timeout", CORECAST_PUSHER_ACTIVITY_TIMEOUT, "SECONDS", "120",
        "activity_timeout announced to Pusher clients (they send pusher:ping after this much silence)"
        => |c, v| {
            c.pusher.activity_timeout_s = parse_num(v)? as u64;
            Ok(())
        };
    "pusher-client-event-rate", CORECAST_PUSHER_CLIENT_EVENT_RATE, "N", "10",
        "client events per second per Pusher connection (also the burst); more are refused with pusher:error 4301 (0 = unlimited)"
        => |c, v| {
            c.pusher.client_event_rate = u32::try_from(parse_num(v)?).map_err(|e| format!("{e}"))?;
            Ok(())
        };
    "pusher-occupancy-rate", CORECAST_PUSHER_OCCUPANCY_RATE, "N", "20",
        "subscriptions per second per Pusher connection (also the burst) that occupy a channel (its first subscriber on the instance) or join a presence channel, i.e. that queue webhooks and Redis work; more are refused with pusher:subscription_error 429 (0 = unlimited)"
        => |c, v| {
            c.pusher.occupancy_rate = u32::try_from(parse_num(v)?).map_err(|e| format!("{e}"))?;
            Ok(())
        };
    "pusher-max-app-connections", CORECAST_PUSHER_MAX_APP_CONNECTIONS, "N", "10000",
        "Pusher connections per app; more are closed with 4100 (over capacity)"
        => |c, v| set_num(&mut c.pusher.max_app_connections, v);
    "pusher-max-presence-members", CORECAST_PUSHER_MAX_PRESENCE_MEMBERS, "N", "100",
        "distinct users in one presence channel; more are refused with pusher:subscription_error"
        => |c, v| set_num(&mut c.pusher.max_presence_members, v);
    "pusher-max-channels", CORECAST_PUSHER_MAX_CHANNELS, "N", "10000",
        "Redis mode: channels per Pusher app tracked across instances (listed by the HTTP API, announced by webhooks); beyond it a channel works but is neither listed nor announced (counted in pusher_channels_untracked)"
        => |c, v| set_num(&mut c.pusher.max_channels, v);
    "pusher-vacated-grace", CORECAST_PUSHER_VACATED_GRACE, "DURATION", "3s",
        "Redis mode: how long a channel whose last subscriber (on every instance) left waits before channel_vacated; a subscriber back within it causes neither channel_vacated nor channel_occupied"
        => |c, v| set_presence_ms(&mut c.pusher.vacated_grace_ms, v);
    "pusher-webhook", CORECAST_PUSHER_WEBHOOK, "ID=URL", -,
        "send this app's webhooks (channel_occupied/vacated, member_added/removed, client_event; signed, batched, retried) to URL (http:// or https://, verified like --origin); repeat or comma-separate for several apps"
        => |c, v| c.pusher.add_webhooks(v);
    "pusher-webhook-queue", CORECAST_PUSHER_WEBHOOK_QUEUE, "N", "10000",
        "webhook events waiting per app, for each of two kinds (channel_occupied/vacated; member and client events); beyond it the kind's oldest are dropped (counted)"
        => |c, v| set_num(&mut c.pusher.webhook_queue, v);
    "proxy-connect", CORECAST_PROXY_CONNECT, "URL", -,
        "POST each WebSocket upgrade without a token to this backend URL before the 101 (Centrifugo's connect proxy: cookies and --proxy-http-headers forwarded; result user/expire_at/info/channels/data, error -> 401/403, down or slow -> 503)"
        => |c, v| c.proxy.set_url(HookKind::Connect, v);
    "proxy-subscribe", CORECAST_PROXY_SUBSCRIBE, "URL", -,
        "ask this backend URL before each JSON subscribe (Centrifugo's subscribe proxy); error -> error reply with its code, disconnect -> close"
        => |c, v| c.proxy.set_url(HookKind::Subscribe, v);
    "proxy-publish", CORECAST_PROXY_PUBLISH, "URL", -,
        "ask this backend URL before each JSON publish (Centrifugo's publish proxy; result data replaces the message); connect-hook users may publish only through it"
        => |c, v| c.proxy.set_url(HookKind::Publish, v);
    "proxy-rpc", CORECAST_PROXY_RPC, "URL", -,
        "answer the JSON op rpc through this backend URL (Centrifugo's RPC proxy)"
        => |c, v| c.proxy.set_url(HookKind::Rpc, v);
    "proxy-refresh", CORECAST_PROXY_REFRESH, "URL", -,
        "ask this backend URL when a connect-hook connection reaches its expire_at: extend it or close it (4001)"
        => |c, v| c.proxy.set_url(HookKind::Refresh, v);
    "api-connections-timeout", CORECAST_API_CONNECTIONS_TIMEOUT, "DURATION", "1s",
        "Redis mode: how long GET /api/connections waits for every instance's answer (asked on the control channel); past it, the answers so far are the listing and the others are reported missing"
        => |c, v| set_positive_duration(&mut c.proxy.connections_timeout, v);
    "proxy", CORECAST_PROXY, "NAME=URL,...", -,
        "named proxies (Centrifugo's `proxies`): backend URLs a namespace picks for its subscribe or publish hook (`subscribe-proxy = \"NAME\"`, `publish-proxy = \"NAME\"`) instead of --proxy-subscribe / --proxy-publish; repeat the flag or comma-separate, TOML also `[[proxy]]` tables with `name` and `endpoint`; at most 16"
        => |c, v| c.proxy.add_named(v);
    "proxy-http-headers", CORECAST_PROXY_HTTP_HEADERS, "LIST", "cookie,authorization,user-agent,origin,x-forwarded-for",
        "request headers forwarded to the connect hook (of an upgrade, an event stream, a history or presence read); corecast always adds X-Real-IP (the peer it saw) and appends the peer to X-Forwarded-For, and never forwards a client's X-Real-IP"
        => |c, v| c.proxy.set_http_headers(v);
    "proxy-static-headers", CORECAST_PROXY_STATIC_HEADERS, "LIST", -,
        "header lines added to every hook request, comma-separated `Name: value` (e.g. a shared secret the backend checks)"
        => |c, v| c.proxy.set_static_headers(v);
    "proxy-timeout", CORECAST_PROXY_TIMEOUT, "DURATION", "1s",
        "time for one hook call, waiting for a slot included; over it the client is refused (unavailable / 503)"
        => |c, v| set_duration(&mut c.proxy.timeout, v);
    "proxy-concurrency", CORECAST_PROXY_CONCURRENCY, "N", "64",
        "calls of one hook in flight at once; more wait (within --proxy-timeout)"
        => |c, v| crate::hooks::at_least_one(&mut c.proxy.concurrency, v);
    "proxy-max-connections", CORECAST_PROXY_MAX_CONNECTIONS, "N", "32",
        "connections to one backend origin (hooks on the same host:port share them), in flight and kept alive"
        => |c, v| crate::hooks::at_least_one(&mut c.proxy.max_connections, v);
    "proxy-max-body", CORECAST_PROXY_MAX_BODY, "BYTES", "64KiB",
        "largest hook answer body; a larger one fails the call (the client is refused)"
        => |c, v| set_size(&mut c.proxy.max_body, v);
    "presence-channels", CORECAST_PRESENCE_CHANNELS, "PATTERNS", -,
        "channels with presence (who is subscribed, per user; join/leave events): a comma list of names and prefixes ending in * (`room-*,lobby`; `*` = all); unset = presence off"
        => |c, v| c.presence.set_patterns(v);
    "presence-ttl", CORECAST_PRESENCE_TTL, "DURATION", "30s",
        "Redis mode: how long an instance's presence entries (and Pusher channel occupancy entries) live without a refresh; a killed instance's members leave, and its Pusher channels stop counting, within this plus --presence-refresh"
        => |c, v| set_presence_ms(&mut c.presence.ttl_ms, v);
    "presence-refresh", CORECAST_PRESENCE_REFRESH, "DURATION", "10s",
        "Redis mode: how often an instance refreshes its presence entries and Pusher channel occupancy entries and prunes expired ones (below --presence-ttl, ideally a third of it or less)"
        => |c, v| set_presence_ms(&mut c.presence.refresh_ms, v);
    "presence-max-members", CORECAST_PRESENCE_MAX_MEMBERS, "N", "1000",
        "distinct users in one presence channel (at most 10000); a subscribe that would add one more is refused with the error presence_full"
        => |c, v| {
            set_num(&mut c.presence.max_members, v)?;
            if c.presence.max_members > crate::presence::MAX_MEMBERS {
                return Err(format!("at most {}", crate::presence::MAX_MEMBERS));
            }
            Ok(())
        };
    "presence-max-events", CORECAST_PRESENCE_MAX_EVENTS, "N", "100",
        "join/leave events are sent only while a presence channel has at most this many members (above, query the members or the count instead)"
        => |c, v| set_num(&mut c.presence.max_events, v);
    "presence-read-rate", CORECAST_PRESENCE_READ_RATE, "N", "10",
        "presence reads ({\"op\":\"presence\"}, GET /presence/...) one connection may make per second (burst: one second's worth); more are answered rate_limited / 429 with Retry-After and counted (0 = unlimited)"
        => |c, v| {
            c.presence.read_rate = v.trim().parse().map_err(|e| format!("{e}"))?;
            Ok(())
        };
    "namespace", CORECAST_NAMESPACE, "NS:KEY=VALUE,...", -,
        "define channel namespaces (a channel `chat:room-1` is in namespace `chat`) in one line: `chat:history-size=100,presence=true,feed:publish=server` (`NAME:` starts a namespace, `key=value` items follow it); repeat the flag for more; the keys are those of a TOML `[namespaces.NAME]` table (see Namespaces). Once any namespace is defined, channels of other namespaces are refused (default: none; `:` means nothing)"
        => |c, v| c.namespaces.specs.add_compact(v, "--namespace");
    "consumer", CORECAST_CONSUMER, "URL", -,
        "publish the rows of a PostgreSQL outbox table: postgres://[user[:password]@]host[:port]/db?table=corecast_outbox plus name=, dead_letter= (default TABLE_dead), batch= (rows per claim, 100), poll= (longest wait without a NOTIFY, 1s), notify= (the LISTEN channel, default the table's name; empty: polling only), tls_ca= (PEM CA for sslmode=require; default the system's roots); the other parameters go to PostgreSQL (sslmode, connect_timeout, ...); repeat the flag for more, at most 16 (see Publishing from your database) (default: none)"
        => super::consumers::add;
};

/// `--token-public-key`: every key of every listed PEM file (read at
/// start-up), at most `MAX_PUBLIC_KEYS`; errors name the file.
fn load_public_keys(list: &str) -> Result<Vec<crate::auth::PublicKey>, String> {
    let mut keys = Vec::new();
    for path in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        let more = crate::auth::PublicKey::from_pem(&text).map_err(|e| format!("{path}: {e}"))?;
        keys.extend(more);
    }
    if keys.len() > crate::auth::MAX_PUBLIC_KEYS {
        return Err(format!(
            "{} public keys; at most {}",
            keys.len(),
            crate::auth::MAX_PUBLIC_KEYS
        ));
    }
    Ok(keys)
}

/// Sets a presence duration (more than 0) in milliseconds.
fn set_presence_ms(slot: &mut u64, v: &str) -> Result<(), String> {
    let d = parse_duration(v)?;
    if d.is_zero() {
        return Err("must be more than 0".into());
    }
    *slot = d.as_millis() as u64;
    Ok(())
}

/// The book's options table (docs/src/configuration.md), generated from [`OPTIONS`] (a test
/// checks the page carries exactly these rows).
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
         \x20      corecast healthcheck [URL]        exit 0 if URL answers 200 (default http://127.0.0.1:8080/healthz)\n\
         \x20      corecast top [--url URL] [--admin-key KEY] [--once]   the console's feed as text (--admin-key or CORECAST_ADMIN_KEY)\n\n\
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

/// Whether `host` names this machine: `localhost`, a 127.0.0.0/8 or
/// `::1` address.
fn is_loopback_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
