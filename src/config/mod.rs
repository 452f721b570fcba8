//! Every limit and knob in one place.
//!
//! Each option is a command-line flag with an environment-variable twin; the
//! flag wins over the variable, the variable over a TOML file, the file over
//! the default. The table in [`OPTIONS`] (`options.rs`, one entry per
//! option) is the single source of truth: `--help`, the book's options table, the
//! defaults and the parser all read it, so a default cannot be documented in
//! one place and different in another. Settings are grouped by the layer
//! that owns them; adding an option is a field in that layer's struct and
//! one table entry; the value syntaxes the setters share (sizes,
//! durations, switches) are in `values.rs`.

mod consumers;
mod fields;
mod namespaces;
mod options;
mod values;
mod workers;

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use crate::hub::HubLimits;
pub use crate::hub::SlowConsumerPolicy;
use crate::log::Level;
pub use crate::secret::Secret;
pub use fields::Config;
pub use options::{help_text, markdown_table, OptionSpec, OPTIONS};
pub use values::{parse_duration, parse_size};
pub use values::{Workers, MAX_WORKERS};

impl Default for Config {
    /// Every layer's settings zeroed, then every documented default from
    /// [`OPTIONS`] applied: the table is the one source of defaults.
    fn default() -> Self {
        let mut cfg = Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            admin_listen: None,
            admin_key: None,
            cpu: None,
            workers: values::Workers::Count(1),
            cpus: None,
            worker_ring: 0,
            root_channel: None,
            ws: crate::ws::Limits::default(),
            compression: crate::ws::deflate::Settings::default(),
            http: crate::http::Limits::default(),
            handshake_timeout: Duration::ZERO,
            max_outbound_queue: 0,
            latest_send_buffer: 0,
            slow_consumer: SlowConsumerPolicy::Disconnect,
            slow_consumer_grace: Duration::ZERO,
            write_stall_timeout: Duration::ZERO,
            max_connections: 0,
            max_subscriptions: 0,
            ping_interval: Duration::ZERO,
            idle_timeout: Duration::ZERO,
            park_after: Duration::ZERO,
            close_timeout: Duration::ZERO,
            shutdown_timeout: Duration::ZERO,
            exclude_sender: false,
            force_legacy_driver: false,
            log_level: Level::Info,
            auth: Default::default(),
            peers: Default::default(),
            max_total_outbound: 0,
            max_total_inbound: 0,
            latency_histograms: false,
            fanout_window: 0,
            publish_backpressure: 0,
            redis: Default::default(),
            cache: Default::default(),
            history: Default::default(),
            pusher: Default::default(),
            presence: Default::default(),
            tls: Default::default(),
            sse: Default::default(),
            proxy: Default::default(),
            namespaces: Default::default(),
            consumers: Vec::new(),
        };
        for opt in OPTIONS {
            if let Some(default) = opt.default {
                (opt.set)(&mut cfg, default).expect("documented default parses");
            }
        }
        cfg
    }
}

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
/// (`max-frame-size = "16MiB"`, `cpu = 0`, `exclude-sender = true`; a list option
/// may be an array of strings).
pub fn apply_toml(cfg: &mut Config, text: &str, origin: &str) -> Result<(), ConfigError> {
    // Not `{e}`: toml's message quotes the offending line, which may hold a
    // secret. The line number and the parser's reason are enough.
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let line = e.span().map_or(0, |s| {
            text[..s.start.min(text.len())].lines().count().max(1)
        });
        ConfigError(format!("{origin}: line {line}: {}", e.message()))
    })?;
    for (key, value) in &table {
        if let (true, toml::Value::Table(t)) = (key == "namespaces", value) {
            cfg.namespaces
                .specs
                .add_toml(t, text, origin)
                .map_err(ConfigError)?;
            continue;
        }
        if let (true, toml::Value::Array(a)) = (key == "consumer", value) {
            consumers::from_toml(cfg, a, origin).map_err(ConfigError)?;
            continue;
        }
        if let (true, toml::Value::Array(a)) = (key == "proxy", value) {
            if a.iter().all(toml::Value::is_table) {
                named_proxies(cfg, a, origin)?;
                continue;
            }
        }
        let opt = OPTIONS
            .iter()
            .find(|o| o.flag == key)
            .ok_or_else(|| ConfigError(format!("{origin}: unknown key `{key}`")))?;
        let text = match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            // A list option (`pusher-app = ["1:k:s", "2:k:s"]`).
            toml::Value::Array(a) if a.iter().all(toml::Value::is_str) => a
                .iter()
                .filter_map(toml::Value::as_str)
                .collect::<Vec<_>>()
                .join(","),
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

/// `[[proxy]]` tables (`name`, `endpoint`: Centrifugo's `proxies`
/// entries), the TOML form of `--proxy NAME=URL`.
fn named_proxies(
    cfg: &mut Config,
    tables: &[toml::Value],
    origin: &str,
) -> Result<(), ConfigError> {
    for t in tables {
        let field = |k: &str| t.get(k).and_then(toml::Value::as_str);
        let (Some(name), Some(url), 2) = (
            field("name"),
            field("endpoint"),
            t.as_table().map_or(0, |t| t.len()),
        ) else {
            return Err(ConfigError(format!(
                "{origin}: a [[proxy]] table has exactly `name` and `endpoint` (strings)"
            )));
        };
        cfg.proxy
            .add_named(&format!("{name}={url}"))
            .map_err(|e| ConfigError(format!("{origin}: [[proxy]]: {e}")))?;
    }
    Ok(())
}

impl Config {
    /// The hub's share of the configuration (the hub never reads `Config`).
    pub fn hub_limits(&self) -> HubLimits {
        HubLimits {
            max_outbound_queue: self.max_outbound_queue,
            slow_consumer: self.slow_consumer,
            slow_grace_ms: self.slow_consumer_grace.as_millis() as u64,
            write_stall_timeout_ms: self.write_stall_timeout.as_millis() as u64,
            max_subscriptions: self.max_subscriptions,
            max_connections: self.max_connections,
            max_total_outbound: self.max_total_outbound,
            histograms: self.latency_histograms,
            exclude_sender: self.exclude_sender,
            fanout_window: self.fanout_window,
            ping_interval_ms: self.ping_interval.as_millis() as u64,
            idle_timeout_ms: self.idle_timeout.as_millis() as u64,
            handshake_timeout_ms: self.handshake_timeout.as_millis() as u64,
            close_timeout_ms: self.close_timeout.as_millis() as u64,
            // In Redis mode history lives in Redis; the hub keeps none.
            history: if self.redis.enabled() {
                Default::default()
            } else {
                self.history
            },
            ns_history: self.hub_history_namespaces(),
            conflated: self.conflated_namespaces(),
            delta_publish: self.delta_publish_namespaces(),
        }
    }

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
        if let Some(early) = apply_flags(&mut cfg, rest)? {
            return Ok(early);
        }
        cfg.resolve_namespaces().map_err(ConfigError)?;
        cfg.validate()?;
        Ok(match sub.as_str() {
            "check-config" => Command::CheckConfig(Box::new(cfg)),
            _ => Command::Serve(Box::new(cfg)),
        })
    }

    fn validate(&self) -> Result<(), ConfigError> {
        self.validate_workers().map_err(ConfigError)?;
        if self.ws.max_frame_size == 0 || self.ws.max_message_size == 0 {
            return Err(ConfigError("frame and message sizes must be > 0".into()));
        }
        if self.max_connections == 0 {
            return Err(ConfigError("max-connections must be > 0".into()));
        }
        if self.redis.canary_interval.is_zero() || self.redis.command_timeout.is_zero() {
            return Err(ConfigError(
                "redis intervals and timeouts must be > 0".into(),
            ));
        }
        let (url, sentinel) = (self.redis.url.is_some(), self.redis.sentinel.is_some());
        if (url || sentinel) && self.redis.cluster.is_some() {
            return Err(ConfigError(
                "--redis-url and --redis-cluster are exclusive: one Redis or one cluster".into(),
            ));
        }
        // Else the CA would go unused: the URL probably lacks its `s`.
        if self.redis.tls_ca.is_some() && !self.redis.first_url().is_some_and(|u| u.tls) {
            let e = "--redis-tls-ca needs a rediss:// --redis-url or --redis-cluster";
            return Err(ConfigError(e.into()));
        }
        if self.redis.cluster.is_some() && self.redis.prefix.contains(['{', '}']) {
            return Err(ConfigError(
                "--redis-prefix must not contain { or } with --redis-cluster (hash tags)".into(),
            ));
        }
        if let Some(k) = &self.admin_key {
            let min = crate::console::MIN_KEY_LEN;
            if k.expose().len() < min {
                return Err(ConfigError(format!(
                    "admin-key is too short ({} bytes): the console's key needs at least {min} (e.g. `openssl rand -base64 24`)",
                    k.expose().len()
                )));
            }
        }
        if self.http.max_handshake_bytes < 256 {
            return Err(ConfigError("max-handshake-bytes must be >= 256".into()));
        }
        let p = &self.pusher;
        if let Some((id, _)) = p.webhooks.iter().find(|(id, _)| p.by_id(id).is_none()) {
            return Err(ConfigError(format!(
                "pusher-webhook for app `{id}`, which no --pusher-app names"
            )));
        }
        // An entry must outlive the gap between two refreshes, or live
        // members would expire (a leave, then a join) every refresh.
        if self.presence.refresh_ms >= self.presence.ttl_ms {
            return Err(ConfigError(
                "presence-refresh must be below presence-ttl".into(),
            ));
        }
        if self.tls.enabled() {
            self.tls.pairs().map_err(|e| ConfigError(e.to_string()))?;
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
}

/// Applies command-line flags over `cfg`; `Some` for `--help`/`--version`.
fn apply_flags(cfg: &mut Config, rest: Vec<String>) -> Result<Option<Command>, ConfigError> {
    let mut args = rest.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(Some(Command::Help)),
            "-V" | "--version" => return Ok(Some(Command::Version)),
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
        // `--{name}`, not `arg`: `--flag=value` would echo a secret.
        apply(opt, cfg, &value, &format!("--{name}"))?;
    }
    Ok(None)
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
    (opt.set)(cfg, v)
        .map_err(|e| ConfigError(format!("{origin}: invalid value {}: {e}", shown(opt, v))))
}

/// A value as a configuration error may quote it: secrets (keys, tokens)
/// never, URLs without their password. The binary prints these errors,
/// and they end up in service logs.
fn shown(opt: &OptionSpec, v: &str) -> String {
    if opt.is_secret() {
        return format!("({} bytes, not shown)", v.len());
    }
    format!("`{}`", crate::secret::mask_url(v))
}

#[cfg(test)]
mod tests;
