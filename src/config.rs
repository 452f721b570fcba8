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
            redis_url: None,
            redis_prefix: String::new(),
            redis_publish_buffer: 0,
            redis_connect_timeout: Duration::ZERO,
            redis_command_timeout: Duration::ZERO,
            redis_canary_interval: Duration::ZERO,
            redis_resume_delay: Duration::ZERO,
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
        let mut cfg = Config::default();
        for opt in OPTIONS {
            if let Some(v) = env(opt.env) {
                apply(opt, &mut cfg, &v, opt.env)?;
            }
        }
        let mut args = args.into_iter().map(Into::into).peekable();
        if args.peek().map(String::as_str) == Some("serve") {
            args.next();
        }
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
        Ok(Command::Serve(Box::new(cfg)))
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
         Usage: corecast [serve] [OPTIONS]\n\n\
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
    out.push_str("  -h, --help                     print this help\n");
    out.push_str("  -V, --version                  print the version\n");
    out.push_str(
        "\nSizes take an optional KiB/MiB/GiB suffix; durations ms, s or m (bare = seconds).\n",
    );
    out
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
    fn sizes_and_durations_parse() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("2k").unwrap(), 2048);
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("5h").is_err());
    }
}
