//! Every limit and knob in one place.
//!
//! Each option is a command-line flag with an environment-variable twin; the
//! flag wins over the variable, the variable over a TOML file, the file over
//! the default. The table in [`OPTIONS`] (`options.rs`, one entry per
//! option) is the single source of truth: `--help`, the README table, the
//! defaults and the parser all read it, so a default cannot be documented in
//! one place and different in another. Settings are grouped by the layer
//! that owns them; adding an option is a field in that layer's struct and
//! one table entry.

mod fields;
mod namespaces;
mod options;

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use crate::hub::HubLimits;
pub use crate::hub::SlowConsumerPolicy;
use crate::log::Level;
pub use crate::secret::Secret;
pub use fields::Config;
pub use options::{help_text, markdown_table, parse_duration, parse_size, OptionSpec, OPTIONS};

impl Default for Config {
    /// Every layer's settings zeroed, then every documented default from
    /// [`OPTIONS`] applied: the table is the one source of defaults.
    fn default() -> Self {
        let mut cfg = Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            admin_listen: None,
            cpu: None,
            root_channel: None,
            ws: crate::ws::Limits::default(),
            compression: crate::ws::deflate::Settings::default(),
            http: crate::http::Limits::default(),
            handshake_timeout: Duration::ZERO,
            max_outbound_queue: 0,
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
            namespaces: Default::default(),
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
        if self.redis.url.is_some() && self.redis.cluster.is_some() {
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
mod tests {
    use super::*;
    use std::path::PathBuf;

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
        assert_eq!(c.ws.max_frame_size, 1 << 20);
        assert_eq!(c.http.max_handshake_bytes, 8 << 10);
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
        assert_eq!(c.ws.max_frame_size, 16 << 20);
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
        let readme = include_str!("../../README.md");
        for row in markdown_table().lines().skip(2) {
            assert!(
                readme.contains(row),
                "README.md config table is stale; missing row:\n{row}\n(regenerate from config::markdown_table)"
            );
        }
    }

    /// Certificate pairs: lists paired by position from flags, the
    /// environment or TOML arrays; unequal lists are refused.
    #[test]
    fn tls_files_pair_by_position_from_every_source() {
        let c = serve(
            &["--tls-cert", "a.pem, b.pem", "--tls-key", "a.key,b.key"],
            |_| None,
        );
        assert_eq!(
            c.tls.certs,
            [PathBuf::from("a.pem"), PathBuf::from("b.pem")]
        );
        assert_eq!(c.tls.keys[1], PathBuf::from("b.key"));
        let env = |k: &str| match k {
            "CORECAST_TLS_CERT" => Some("c.pem".to_string()),
            "CORECAST_TLS_KEY" => Some("c.key".to_string()),
            _ => None,
        };
        assert_eq!(serve(&[], env).tls.certs, [PathBuf::from("c.pem")]);
        let mut cfg = Config::default();
        let toml = "tls-cert = [\"a.pem\", \"b.pem\"]\ntls-key = [\"a.key\", \"b.key\"]\n";
        apply_toml(&mut cfg, toml, "t.toml").unwrap();
        assert_eq!(cfg.tls.keys.len(), 2);
        let e = Config::from_args(["--tls-cert", "a.pem,b.pem", "--tls-key", "a.key"], |_| {
            None
        })
        .unwrap_err();
        assert!(e.0.contains("one key per certificate"), "{e}");
        assert!(!Config::default().tls.enabled());
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
        assert_eq!(c.ws.max_frame_size, 2048, "env over file");
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
        let c = Config::from_args(
            [
                "check-config",
                "--token-secret",
                "s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t",
            ],
            no_env,
        )
        .unwrap();
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
        let c = serve(&["--origin", "https://api.example/v1"], no_env).cache;
        assert!(c.origin.unwrap().tls);
        for args in [
            &["--origin", "ftp://a"][..],
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
    fn a_short_token_secret_is_refused_without_echoing_it() {
        let err = Config::from_args(["--token-secret", "short-s3cr3t"], no_env).unwrap_err();
        assert!(err.0.contains("at least 32"), "{err}");
        assert!(!err.0.contains("short-s3cr3t"), "secret echoed: {err}");
        let long = "x".repeat(32);
        let c = serve(&["--token-secret", &long, "--token-audience", "cc"], no_env);
        assert!(c.auth.token_secret.is_some());
        assert_eq!(c.auth.token_audience.as_deref(), Some("cc"));
    }

    #[test]
    fn redis_cluster_is_exclusive_with_redis_url() {
        let c = serve(&["--redis-cluster", "redis://:pw@a:7000,b:7001"], no_env);
        assert!(c.redis.enabled() && c.redis.url.is_none());
        let seeds = c.redis.cluster.expect("cluster mode");
        assert_eq!(seeds.seeds.len(), 2);
        assert_eq!(seeds.url.password.as_deref(), Some("pw"));
        let env = |k: &str| (k == "REDIS_URL").then(|| "redis://h:1".to_string());
        let err = Config::from_args(["--redis-cluster", "a:7000"], env).unwrap_err();
        assert!(err.0.contains("exclusive"), "{err}");
        let err = Config::from_args(
            ["--redis-cluster", "a:7000", "--redis-prefix", "cc{x}:"],
            no_env,
        )
        .unwrap_err();
        assert!(err.0.contains("hash tags"), "{err}");
        let c = serve(
            &["--redis-url", "rediss://h", "--redis-tls-ca", "ca.pem"],
            no_env,
        );
        assert!(c.redis.url.expect("url").tls && c.redis.tls_ca.is_some());
        let err = Config::from_args(["--redis-tls-ca", "ca.pem"], no_env).unwrap_err();
        assert!(err.0.contains("needs a rediss://"), "{err}");
    }

    #[test]
    fn config_errors_never_echo_secrets() {
        let cases: [(&[&str], &str, &str, &str); 8] = [
            (&[], "REDIS_URL", "redis://u:hunter2@h:99999", "hunter2"),
            (&[], "REDIS_CLUSTER", "redis://u:hunter2@h:99999", "hunter2"),
            (&[], "REDIS_CLUSTER", "u:hunter2@h:1/2", "hunter2"),
            (&[], "REDIS_URL", "redis://:hunter2@", "hunter2"),
            (
                &[],
                "CORECAST_CACHE_PURGE_TOKEN",
                "t0ken-s3cr3t\n",
                "t0ken-s3cr3t",
            ),
            (&["--token-secret=short-s3cr3t"], "", "", "short-s3cr3t"),
            (&["--token-secret", "short-s3cr3t"], "", "", "short-s3cr3t"),
            (&["--publish-key="], "", "", "--publish-key="),
        ];
        for (args, var, value, secret) in cases {
            let env = |k: &str| (k == var).then(|| value.to_string());
            let err = Config::from_args(args.iter().copied(), env).unwrap_err();
            assert!(!err.0.contains(secret), "{secret:?} echoed: {err}");
        }
        let env = |k: &str| (k == "REDIS_URL").then(|| "redis://u:hunter2@h:99999".to_string());
        let err = Config::from_args(Vec::<String>::new(), env).unwrap_err();
        assert!(err.0.contains("redis://u:***@h:99999"), "{err}");
        // A TOML file with a syntax error on a secret's line.
        let err = apply_toml(
            &mut Config::default(),
            "publish-key = \"s3cr3t-k3y\n",
            "f.toml",
        )
        .unwrap_err();
        assert!(err.0.contains("f.toml: line 1"), "{err}");
        assert!(!err.0.contains("s3cr3t-k3y"), "{err}");
        let err = apply_toml(
            &mut Config::default(),
            "cache-purge-token = \"a b\"\n",
            "f.toml",
        )
        .unwrap_err();
        assert!(!err.0.contains("a b"), "{err}");
    }

    #[test]
    fn pusher_apps_come_from_flags_env_and_toml_lists() {
        let mut cfg = Config::default();
        let toml = "pusher-app = [\"1:k1:s1\", \"2:k2:s2:client-events\"]\n";
        apply_toml(&mut cfg, toml, "f.toml").unwrap();
        assert_eq!(cfg.pusher.apps.len(), 2);
        assert!(cfg.pusher.apps[1].client_events);
        let env = |k: &str| (k == "CORECAST_PUSHER_APP").then(|| "3:k3:s3,4:k4:s4".to_string());
        let args = ["--pusher-app", "5:k5:s5", "--pusher-app", "6:k6:s6"];
        let Command::Serve(cfg) = Config::from_args(args, env).unwrap() else {
            panic!("serve expected")
        };
        let ids: Vec<&str> = cfg.pusher.apps.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, ["3", "4", "5", "6"]);
        // A bad app never echoes its secret.
        let err = Config::from_args(["--pusher-app", "1:k:t0p-s3cret:x"], |_| None).unwrap_err();
        assert!(!err.0.contains("t0p-s3cret"), "{err}");
    }

    #[test]
    fn pusher_webhooks_need_a_known_app_and_an_http_or_https_url() {
        let args = [
            "--pusher-app",
            "1:k:s",
            "--pusher-webhook",
            "1=http://h:9/hook",
        ];
        let Command::Serve(cfg) = Config::from_args(args, |_| None).unwrap() else {
            panic!("serve expected")
        };
        assert_eq!(cfg.pusher.webhooks[0].1.base_path, "/hook");
        for bad in [
            ["--pusher-app", "1:k:s", "--pusher-webhook", "2=http://h/"],
            ["--pusher-app", "1:k:s", "--pusher-webhook", "1=ftp://h/"],
            ["--pusher-app", "1:k:s", "--pusher-webhook", "http://h/"],
        ] {
            assert!(Config::from_args(bad, |_| None).is_err(), "{bad:?}");
        }
    }
}
