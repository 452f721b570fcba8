//! Namespaces resolved against the global options: each `[namespaces.X]`
//! key (or compact `--namespace` item) that is a global option's name is
//! applied, through that option's own setter from [`OPTIONS`], to a copy
//! of the global configuration, so its value is read and checked exactly
//! as the flag's; the namespace-only keys (`publish`, `subscribe`, ...)
//! are read here. Conflicting keys are errors naming where they were
//! written.

use super::fields::Config;
use super::options::{OptionSpec, OPTIONS};
use crate::history::NamespaceLimits;
use crate::hooks::{HookConfig, HookKind, NO_PROXY};
use crate::namespace::spec::{Entry, Spec};
use crate::namespace::{Proxy, Publish, Rules, Subscribe, Table};

/// Global options a namespace may set, by their own names.
pub const PER_NAMESPACE: &[&str] = &[
    "history-size",
    "history-ttl",
    "history-max-bytes",
    "max-message-size",
    "presence-max-members",
    "presence-max-events",
    "compression",
];

/// Global options that belong to an instance, not to a channel: Redis
/// mode's presence entries are refreshed by one loop per instance.
pub const PER_INSTANCE: &[&str] = &["presence-ttl", "presence-refresh"];

/// Keys only a namespace has (the default namespace's value in
/// parentheses is today's global behaviour).
pub const NAMESPACE_ONLY: &[&str] = &[
    "publish",
    "subscribe",
    "allow-anonymous",
    "presence",
    "recover-on-subscribe",
    "conflate",
    "delta",
    "delta-publish",
    "subscribe-proxy",
    "publish-proxy",
];

impl Config {
    /// Resolves the namespaces as written against the global options
    /// (also adding `presence = true` namespaces to the presence
    /// patterns); called when the configuration is validated and again
    /// when a server starts (a program may have changed either).
    pub fn resolve_namespaces(&mut self) -> Result<(), String> {
        let mut named = Vec::with_capacity(self.namespaces.specs.0.len());
        for spec in &self.namespaces.specs.0 {
            named.push((spec.name.clone(), self.rules_of(spec)?));
        }
        for (name, rules) in &named {
            let pattern = format!("{name}:*");
            if rules.presence == Some(true) && !self.presence.patterns.contains(&pattern) {
                self.presence.patterns.push(pattern);
            }
        }
        self.namespaces.table = Table::new(self.default_rules(), named);
        Ok(())
    }

    /// The namespaces' history limits (those of Redis mode's streams and
    /// relay, or of the embedded history).
    pub fn history_namespaces(&self) -> NamespaceLimits {
        let t = &self.namespaces.table;
        let limits = t
            .names()
            .zip(t.all_rules())
            .map(|(n, r)| (n.into(), r.history));
        NamespaceLimits(limits.collect())
    }

    /// The namespaces with `compression = false`: their channels go
    /// uncompressed to every connection.
    pub fn uncompressed_namespaces(&self) -> Vec<Box<str>> {
        let t = &self.namespaces.table;
        let off = t.names().zip(t.all_rules()).filter(|(_, r)| !r.compression);
        off.map(|(n, _)| n.into()).collect()
    }

    /// The namespaces with `conflate = true`: latest-value channels.
    pub fn conflated_namespaces(&self) -> Vec<Box<str>> {
        let t = &self.namespaces.table;
        let on = t.names().zip(t.all_rules()).filter(|(_, r)| r.conflate);
        on.map(|(n, _)| n.into()).collect()
    }

    /// The namespaces with `delta-publish = true`: every publication may
    /// go as a delta.
    pub fn delta_publish_namespaces(&self) -> Vec<Box<str>> {
        let t = &self.namespaces.table;
        let on = t
            .names()
            .zip(t.all_rules())
            .filter(|(_, r)| r.delta_publish);
        on.map(|(n, _)| n.into()).collect()
    }

    /// The hub's share: none in Redis mode, where history lives in Redis.
    pub(super) fn hub_history_namespaces(&self) -> NamespaceLimits {
        match self.redis.enabled() {
            true => NamespaceLimits::default(),
            false => self.history_namespaces(),
        }
    }

    /// `(presence-max-members, presence-max-events)` of `channel`: its
    /// namespace's, else the global options.
    pub fn presence_limits(&self, channel: &str) -> (usize, usize) {
        match self.namespaces.table.rules_of(channel) {
            Some(r) => r.presence_limits,
            None => (self.presence.max_members, self.presence.max_events),
        }
    }

    /// The default namespace's rules: the global options.
    fn default_rules(&self) -> Rules {
        Rules {
            publish: Publish::Clients,
            subscribe: Subscribe::Token,
            allow_anonymous: false,
            presence: None,
            history: self.history,
            recover_on_subscribe: false,
            conflate: false,
            delta: false,
            delta_publish: false,
            compression: self.compression.enabled,
            presence_limits: (self.presence.max_members, self.presence.max_events),
            max_message_size: self.ws.max_message_size,
            subscribe_proxy: Proxy::Global,
            publish_proxy: Proxy::Global,
        }
    }

    fn rules_of(&self, spec: &Spec) -> Result<Rules, String> {
        let mut scratch = self.clone();
        let mut rules = self.default_rules();
        for e in &spec.entries {
            let fail = |why: String| {
                format!(
                    "{}: namespace `{}`: `{}`: {why}",
                    e.origin, spec.name, e.key
                )
            };
            if NAMESPACE_ONLY.contains(&e.key.as_str()) {
                own_key(&mut rules, e, (self.auth.tokens_required(), &self.proxy)).map_err(fail)?;
            } else if PER_NAMESPACE.contains(&e.key.as_str()) {
                let opt = option(&e.key);
                (opt.set)(&mut scratch, &e.value)
                    .map_err(|why| fail(format!("invalid value `{}`: {why}", e.value)))?;
            } else if PER_INSTANCE.contains(&e.key.as_str()) {
                return Err(fail(
                    "an instance's setting (one refresh loop for every channel), set it globally"
                        .into(),
                ));
            } else if OPTIONS.iter().any(|o| o.flag == e.key) {
                return Err(fail(format!(
                    "a global option, not one of a namespace's ({})",
                    keys_list()
                )));
            } else {
                return Err(fail(format!(
                    "unknown key (a namespace's keys: {})",
                    keys_list()
                )));
            }
        }
        rules.max_message_size = scratch.ws.max_message_size;
        rules.history = scratch.history;
        rules.compression = scratch.compression.enabled;
        rules.presence_limits = (scratch.presence.max_members, scratch.presence.max_events);
        self.conflicts(spec, &rules)?;
        Ok(rules)
    }

    /// Deltas need every message of a channel to reach a subscriber in
    /// order, the base of the next: what latest-value channels and
    /// `drop-oldest` take away.
    fn delta_conflicts(&self, rules: &Rules) -> Result<(), &'static str> {
        if rules.delta_publish && !rules.delta {
            return Err("delta-publish = true needs delta = \"fossil\"");
        }
        if !rules.delta {
            return Ok(());
        }
        if rules.conflate {
            return Err("delta and conflate exclude each other (a replaced message would be a missing delta base)");
        }
        if self.slow_consumer == crate::hub::SlowConsumerPolicy::DropOldest {
            return Err("delta needs --slow-consumer disconnect (a dropped message would be a missing delta base)");
        }
        Ok(())
    }

    /// Settings that contradict each other or a global option.
    fn conflicts(&self, spec: &Spec, rules: &Rules) -> Result<(), String> {
        let at = |key: &str| {
            let e = spec.entries.iter().find(|e| e.key == key);
            let origin = e.map_or("", |e| e.origin.as_str());
            format!("{origin}: namespace `{}`", spec.name)
        };
        if rules.recover_on_subscribe && !rules.history.enabled() {
            return Err(format!(
                "{}: recover-on-subscribe needs history (history-size > 0)",
                at("recover-on-subscribe")
            ));
        }
        self.delta_conflicts(rules)
            .map_err(|why| format!("{}: {why}", at("delta")))?;
        let open = matches!(rules.subscribe, Subscribe::Anyone | Subscribe::Hook);
        if rules.allow_anonymous && !open {
            return Err(format!(
                "{}: allow-anonymous needs subscribe = \"anyone\" or \"hook\" (a connection without a token has no grants and no user)",
                at("allow-anonymous")
            ));
        }
        let hooked = match rules.subscribe_proxy {
            Proxy::Global => self.proxy.url(HookKind::Subscribe).is_some(),
            Proxy::Off => false,
            Proxy::Named(_) => true,
        };
        if rules.subscribe == Subscribe::Hook && !hooked {
            return Err(format!(
                "{}: subscribe = \"hook\" needs a subscribe hook: --proxy-subscribe, or subscribe-proxy naming a --proxy",
                at("subscribe")
            ));
        }
        if rules.compression && !self.compression.enabled {
            return Err(format!(
                "{}: compression = true needs the global --compression (permessage-deflate is agreed per connection, at its upgrade)",
                at("compression")
            ));
        }
        if rules.max_message_size > self.ws.max_message_size {
            return Err(format!(
                "{}: max-message-size above the global --max-message-size ({} bytes), which every WebSocket message is read under",
                at("max-message-size"),
                self.ws.max_message_size
            ));
        }
        let probe = format!("{}:", spec.name);
        if rules.presence == Some(false) && self.presence.covers(&probe) {
            return Err(format!(
                "{}: presence = false, but --presence-channels covers this namespace's channels",
                at("presence")
            ));
        }
        Ok(())
    }
}

/// Reads a namespace-only key into `rules` (`tokens`: whether tokens are
/// required; `proxies`: the hooks, whose named proxies a namespace picks).
fn own_key(
    rules: &mut Rules,
    e: &Entry,
    (tokens, proxies): (bool, &HookConfig),
) -> Result<(), String> {
    let v = e.value.trim();
    match e.key.as_str() {
        "publish" => {
            rules.publish = match v {
                "clients" => Publish::Clients,
                "subscribers" => Publish::Subscribers,
                "server" => Publish::Server,
                _ => return Err(format!("`{v}`: expected clients, subscribers or server")),
            }
        }
        "subscribe" => {
            rules.subscribe = match v {
                "token" => Subscribe::Token,
                "anyone" => Subscribe::Anyone,
                "user" if tokens => Subscribe::User,
                "user" => return Err("`user` needs tokens (--token-secret or --token-public-key): a user channel's user is the token's".into()),
                "hook" => Subscribe::Hook,
                _ => return Err(format!("`{v}`: expected anyone, token, user or hook")),
            }
        }
        "allow-anonymous" => rules.allow_anonymous = boolean(v)?,
        "presence" => rules.presence = Some(boolean(v)?),
        "recover-on-subscribe" => rules.recover_on_subscribe = boolean(v)?,
        "conflate" => rules.conflate = boolean(v)?,
        "delta" => {
            rules.delta = match v {
                "fossil" => true,
                "none" => false,
                _ => return Err(format!("`{v}`: expected fossil or none")),
            }
        }
        "delta-publish" => rules.delta_publish = boolean(v)?,
        "subscribe-proxy" => rules.subscribe_proxy = proxy(v, proxies)?,
        "publish-proxy" => rules.publish_proxy = proxy(v, proxies)?,
        _ => unreachable!("NAMESPACE_ONLY lists the keys read here"),
    }
    Ok(())
}

/// `subscribe-proxy` / `publish-proxy`: `none`, or a `--proxy` name.
fn proxy(v: &str, proxies: &HookConfig) -> Result<Proxy, String> {
    if v == NO_PROXY {
        return Ok(Proxy::Off);
    }
    match proxies.named_index(v) {
        // At most MAX_PROXIES (16) are configured.
        Some(i) => Ok(Proxy::Named(i as u8)),
        None => {
            let names: Vec<&str> = proxies.named.iter().map(|p| p.name.as_str()).collect();
            Err(format!(
                "`{v}`: expected none or a --proxy name ({})",
                if names.is_empty() {
                    "none defined".to_string()
                } else {
                    names.join(", ")
                }
            ))
        }
    }
}

fn boolean(v: &str) -> Result<bool, String> {
    match v {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("`{v}`: expected true or false")),
    }
}

fn option(flag: &str) -> &'static OptionSpec {
    OPTIONS
        .iter()
        .find(|o| o.flag == flag)
        .expect("PER_NAMESPACE names options of the table")
}

fn keys_list() -> String {
    let mut keys: Vec<&str> = NAMESPACE_ONLY.to_vec();
    keys.extend_from_slice(PER_NAMESPACE);
    keys.join(", ")
}

#[cfg(test)]
mod tests {
    use super::super::{apply_toml, Command, ConfigError};
    use super::*;
    use crate::namespace::Ns;

    fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let mut cfg = Config::default();
        apply_toml(&mut cfg, text, "f.toml")?;
        cfg.resolve_namespaces().map_err(ConfigError)?;
        Ok(cfg)
    }

    fn from_args(args: &[&str], env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let env = |k: &str| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        match Config::from_args(args.iter().copied(), env)? {
            Command::Serve(c) => Ok(*c),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn toml_tables_set_a_namespace_from_the_global_options_names() {
        let c = from_toml(
            "max-message-size = \"64KiB\"\nhistory-size = 10\n[namespaces.chat]\npresence = true\nsubscribe = \"anyone\"\n\
             history-size = 100\nhistory-ttl = \"2m\"\npresence-max-members = 5\n\
             [namespaces.feed]\npublish = \"server\"\nmax-message-size = \"4KiB\"\n",
        )
        .unwrap();
        let t = &c.namespaces.table;
        let chat = t.rules(Ns::Named(0)).unwrap();
        assert_eq!(chat.max_message_size, 64 << 10, "unset = global");
        assert_eq!((chat.history.size, chat.history.ttl_ms), (100, 120_000));
        assert_eq!(c.presence_limits("chat:x"), (5, c.presence.max_events));
        assert_eq!(c.presence_limits("feed:x").0, c.presence.max_members);
        assert_eq!(
            chat.history.max_bytes, c.history.max_bytes,
            "unset = global"
        );
        assert_eq!(t.rules_of("feed:x").unwrap().history.size, 10, "the global");
        let limits = c.history_namespaces();
        assert_eq!(limits.of("chat:x", &c.history).size, 100);
        assert_eq!(
            c.hub_limits().ns_history,
            limits,
            "embedded: the hub keeps them"
        );
        assert!(chat.subscribe == Subscribe::Anyone && c.presence.covers("chat:x"));
        assert!(!c.presence.covers("feed:x"));
        let feed = t.rules_of("feed:x").unwrap();
        assert_eq!(
            (feed.publish, feed.max_message_size),
            (Publish::Server, 4096)
        );
        assert_eq!(c.ws.max_message_size, 64 << 10, "globals unchanged");
    }

    #[test]
    fn hook_settings_without_their_hook_are_errors() {
        for (text, says) in [
            (
                "[namespaces.chat]\nsubscribe = \"hook\"\n",
                "subscribe = \"hook\" needs a subscribe hook",
            ),
            (
                "proxy-subscribe = \"http://h/s\"\n[namespaces.chat]\nsubscribe = \"hook\"\nsubscribe-proxy = \"none\"\n",
                "line 3: namespace `chat`: subscribe = \"hook\" needs a subscribe hook",
            ),
            (
                "[namespaces.chat]\npublish-proxy = \"strict\"\n",
                "`strict`: expected none or a --proxy name (none defined)",
            ),
        ] {
            let e = from_toml(text).unwrap_err();
            assert!(e.0.contains(says), "{text:?}: {e}");
        }
    }

    #[test]
    fn namespaces_pick_their_hooks() {
        let c = from_toml(
            "proxy-subscribe = \"http://h/s\"\n\
             [[proxy]]\nname = \"strict\"\nendpoint = \"http://h/strict\"\n\
             [namespaces.open]\nsubscribe-proxy = \"none\"\npublish-proxy = \"none\"\n\
             [namespaces.vip]\nsubscribe = \"hook\"\nsubscribe-proxy = \"strict\"\n\
             [namespaces.chat]\nsubscribe = \"hook\"\n",
        )
        .unwrap();
        let t = &c.namespaces.table;
        assert_eq!(t.proxy_of("open:a", false), Proxy::Off);
        assert_eq!(t.proxy_of("open:a", true), Proxy::Off);
        assert_eq!(t.proxy_of("vip:a", false), Proxy::Named(0));
        assert_eq!(t.proxy_of("vip:a", true), Proxy::Global);
        assert_eq!(t.proxy_of("chat:a", false), Proxy::Global);
        assert_eq!(t.proxy_of("plain", false), Proxy::Global);
        assert_eq!(t.rules_of("chat:a").unwrap().subscribe, Subscribe::Hook);
        let flags = from_args(
            &[
                "--proxy",
                "strict=http://h/strict",
                "--namespace",
                "vip:publish-proxy=strict",
            ],
            &[("CORECAST_PROXY", "other=http://h/o")],
        )
        .unwrap();
        assert_eq!(
            flags.proxy.named.len(),
            2,
            "the environment's and the flag's"
        );
        assert_eq!(
            flags.namespaces.table.proxy_of("vip:x", true),
            Proxy::Named(1)
        );
        let list = from_toml("proxy = [\"a=http://h/a\", \"b=http://h/b\"]\n").unwrap();
        assert_eq!(list.proxy.named_index("b"), Some(1));
        let e = from_toml("[[proxy]]\nname = \"a\"\n").unwrap_err();
        assert!(e.0.contains("exactly `name` and `endpoint`"), "{e}");
    }

    #[test]
    fn the_flag_env_and_toml_list_forms_agree() {
        let c = from_args(
            &[
                "--namespace",
                "chat:max-message-size=5",
                "--namespace",
                "feed:publish=server",
            ],
            &[(
                "CORECAST_NAMESPACE",
                "room:publish=subscribers,presence=true",
            )],
        )
        .unwrap();
        let names: Vec<_> = c.namespaces.table.names().collect();
        assert_eq!(names, ["room", "chat", "feed"]);
        let list =
            from_toml("namespace = [\"chat:max-message-size=5\", \"feed:publish=server\"]\n")
                .unwrap();
        assert_eq!(
            list.namespaces.table.rules_of("feed:a").unwrap().publish,
            Publish::Server
        );
        assert_eq!(
            list.namespaces
                .table
                .rules_of("chat:a")
                .unwrap()
                .max_message_size,
            5
        );
        let none = from_args(&[], &[]).unwrap();
        assert!(none.namespaces.table.is_empty());
    }

    #[test]
    fn deltas_are_refused_where_a_base_could_go_missing() {
        for (text, says) in [
            (
                "[namespaces.doc]\ndelta = \"xdelta\"\n",
                "`delta`: `xdelta`: expected fossil or none",
            ),
            (
                "[namespaces.doc]\ndelta = \"fossil\"\nconflate = true\n",
                "delta and conflate exclude each other",
            ),
            (
                "[namespaces.doc]\ndelta-publish = true\n",
                "delta-publish = true needs delta = \"fossil\"",
            ),
            (
                "slow-consumer = \"drop-oldest\"\n[namespaces.doc]\ndelta = \"fossil\"\n",
                "delta needs --slow-consumer disconnect",
            ),
        ] {
            let e = from_toml(text).unwrap_err().0;
            assert!(e.contains(says), "{text:?}: {e}");
        }
        assert!(from_toml("[namespaces.doc]\ndelta = \"fossil\"\ndelta-publish = true\n").is_ok());
    }

    #[test]
    fn bad_namespace_settings_are_errors_naming_the_line_and_key() {
        for (text, says) in [
            (
                "[namespaces.chat]\nmax-message-size = \"lots\"\n",
                "f.toml: line 2: namespace `chat`: `max-message-size`: invalid value",
            ),
            (
                "[namespaces.chat]\nrecover-on-subscribe = true\n",
                "line 2: namespace `chat`: recover-on-subscribe needs history",
            ),
            (
                "[namespaces.chat]\npresence-ttl = \"5s\"\n",
                "an instance's setting",
            ),
            (
                "[namespaces.chat]\npresence-max-members = 10001\n",
                "at most 10000",
            ),
            (
                "compression = false\n[namespaces.chat]\ncompression = true\n",
                "needs the global --compression",
            ),
            (
                "[namespaces.chat]\nhistory-ttl = \"0s\"\n",
                "`history-ttl`: invalid value `0s`",
            ),
            (
                "\n[namespaces.chat]\n\nnope = 1\n",
                "f.toml: line 4: namespace `chat`: `nope`: unknown key",
            ),
            (
                "[namespaces.chat]\nlisten = \"0.0.0.0:1\"\n",
                "`listen`: a global option",
            ),
            ("[namespaces.chat]\nsubscribe = \"user\"\n", "needs tokens"),
            (
                "[namespaces.chat]\npublish = \"everyone\"\n",
                "expected clients, subscribers or server",
            ),
            (
                "[namespaces.chat]\nallow-anonymous = true\n",
                "needs subscribe = \"anyone\"",
            ),
            (
                "[namespaces.chat]\nmax-message-size = \"2MiB\"\n",
                "above the global",
            ),
            (
                "presence-channels = \"*\"\n[namespaces.chat]\npresence = false\n",
                "covers this namespace",
            ),
            (
                "[namespaces.chat]\npublish = [1]\n",
                "must be a string, integer or boolean",
            ),
            ("[namespaces]\nchat = 1\n", "must be a table"),
            ("[namespaces.\"a:b\"]\n", "namespace name"),
            (
                "[namespaces.chat]\npresence = true\npresence = false\n",
                "duplicate key `presence`",
            ),
        ] {
            let e = from_toml(text).unwrap_err();
            assert!(e.0.contains(says), "{text:?}: {e}");
        }
        let e =
            from_args(&["--namespace", "chat:publish=server,publish=clients"], &[]).unwrap_err();
        assert!(e.0.contains("set twice"), "{e}");
        let e = from_args(&["--namespace", "chat:publish=x"], &[]).unwrap_err();
        assert!(
            e.0.contains("--namespace: namespace `chat`: `publish`"),
            "{e}"
        );
    }
}
