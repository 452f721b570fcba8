//! Channel namespaces, sans-I/O: a channel `chat:room-1` is in namespace
//! `chat` (the part before the first `:`); a channel without `:` is in
//! the default namespace, whose rules are the global options. Each
//! configured namespace has its own rules ([`Rules`]: who may publish
//! and subscribe, history, presence, message size). Once any namespace is
//! configured, a channel of a namespace that is not is refused
//! everywhere ([`Refusal::UnknownChannel`]); with none, `:` means
//! nothing and every check is the connection's grants, as before.
//!
//! # Layout
//! - `mod.rs`: the resolved table ([`Table`]), a channel's namespace, and
//!   the checks the edge makes when a channel is subscribed, read or
//!   published to (each returns a [`Refusal`] the edge maps to its wire:
//!   a JSON error code, an HTTP status, a close).
//! - `counters`: a worker's per-namespace counters, labelled by the
//!   configured names only (a bounded set).
//! - `spec`: namespaces as written (the compact `--namespace` form and
//!   TOML `[namespaces.NAME]` tables), before `config` checks them
//!   against the global options and resolves them into [`Rules`].

pub mod counters;
pub mod spec;

pub use spec::{valid_namespace_name, MAX_NAME, MAX_NAMESPACES};

use crate::auth::{self, AuthConfig, Grants};
use crate::history::HistoryLimits;

/// Who may publish on a namespace's channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Publish {
    /// Any connection its grants (token `publish` claim, publish key)
    /// allow — the global behaviour.
    #[default]
    Clients,
    /// A connection subscribed to the channel (its grants need not list
    /// it); never an anonymous one.
    Subscribers,
    /// Only the server: `POST /publish`; every client publish is refused.
    Server,
}

/// Who may subscribe to (and read the history and presence of) a
/// namespace's channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Subscribe {
    /// The connection's grants: the token's `subscribe` claim when tokens
    /// are required, anyone otherwise — the global behaviour.
    #[default]
    Token,
    /// Any connection, whatever its token lists.
    Anyone,
    /// User channels: `notifications:#42` only for the connection whose
    /// token's user (`sub`, or `--token-user-claim`) is `42`; a channel
    /// of the namespace without `#` is refused.
    User,
    /// The namespace's subscribe hook decides (Centrifugo's subscribe
    /// proxy): any connection is asked of it, whatever its token lists.
    /// A start-up error unless the namespace has a subscribe hook.
    Hook,
}

/// Which backend a namespace's subscribe or publish hook calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Proxy {
    /// The global hook (`--proxy-subscribe`, `--proxy-publish`), if set.
    #[default]
    Global,
    /// No hook for this namespace (`"none"`), whatever the global one.
    Off,
    /// The named proxy at this index of `--proxy`.
    Named(u8),
}

/// One namespace's rules, resolved: every key not set is the global
/// option's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// Who may publish.
    pub publish: Publish,
    /// Who may subscribe.
    pub subscribe: Subscribe,
    /// With tokens required, connections without a token may connect and
    /// subscribe (only) to this namespace's channels.
    pub allow_anonymous: bool,
    /// `presence`: `Some(true)` every channel of the namespace has
    /// presence, `Some(false)` none; `None` `--presence-channels` decides.
    pub presence: Option<bool>,
    /// `history-size`, `history-ttl`, `history-max-bytes`.
    pub history: HistoryLimits,
    /// `recover-on-subscribe`: a subscribe without `since` is sent the
    /// channel's latest message (from its history) after its reply.
    pub recover_on_subscribe: bool,
    /// `conflate`: its channels are latest-value channels: a message
    /// replaces a not-yet-written one of the same channel (and key) in a
    /// subscriber's queue instead of queuing behind it.
    pub conflate: bool,
    /// `delta = "fossil"`: a subscriber may ask for Fossil deltas.
    pub delta: bool,
    /// `delta-publish`: every publication may go as a delta, asked or
    /// not (needs `delta`).
    pub delta_publish: bool,
    /// `compression`: broadcasts on its channels are compressed for
    /// connections that agreed permessage-deflate (`false`: sent plain).
    pub compression: bool,
    /// `(presence-max-members, presence-max-events)`.
    pub presence_limits: (usize, usize),
    /// `max-message-size`: the largest message a client or
    /// `POST /publish` may publish here.
    pub max_message_size: usize,
    /// `subscribe-proxy`: the subscribe hook of the namespace's channels.
    pub subscribe_proxy: Proxy,
    /// `publish-proxy`: the publish hook of the namespace's channels.
    pub publish_proxy: Proxy,
}

/// Which namespace a channel is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ns {
    /// The default namespace (no `:`, or no namespace configured).
    Default,
    /// The configured namespace at this index of [`Table::names`].
    Named(u16),
}

/// The configured namespaces, resolved; empty when none is configured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    names: Vec<Box<str>>,
    rules: Vec<Rules>,
    /// The default namespace's rules (the global options).
    default: Option<Box<Rules>>,
    any_anonymous: bool,
}

/// The namespaces' configuration: as written (from every source), and
/// resolved into the table the server reads (`Config::resolve_namespaces`).
#[derive(Debug, Clone, Default)]
pub struct Namespaces {
    /// As written: file, environment, flags.
    pub specs: spec::Specs,
    /// Resolved against the global options.
    pub table: Table,
}

/// Why a channel is refused, for the edge to put on its wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The channel's namespace is not configured.
    UnknownChannel,
    /// The namespace's `subscribe` or `publish` rule does not admit this
    /// connection (the message says which).
    Forbidden(&'static str),
    /// Larger than the namespace's `max-message-size`.
    TooLarge,
}

impl Refusal {
    /// The refusal's text.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::UnknownChannel => "no namespace is configured for this channel",
            Refusal::Forbidden(why) => why,
            Refusal::TooLarge => "message larger than the namespace's max-message-size",
        }
    }

    /// The HTTP status of the refusal.
    pub fn status(self) -> u16 {
        match self {
            Refusal::UnknownChannel => 404,
            Refusal::Forbidden(_) => 403,
            Refusal::TooLarge => 413,
        }
    }
}

const NOT_GRANTED: &str = "this connection is not granted this channel (token or publish key)";
const ANONYMOUS: &str = "a connection without a token may not subscribe to this namespace";
const NOT_YOURS: &str = "a user channel (NAME:#USER) of another user, or not a user channel";
const SERVER_ONLY: &str = "only the server publishes in this namespace (POST /publish)";
const SUBSCRIBERS_ONLY: &str = "only subscribers of this channel may publish here";

impl Table {
    /// A table of `(name, rules)` pairs over the default namespace's.
    pub fn new(default: Rules, named: Vec<(String, Rules)>) -> Table {
        if named.is_empty() {
            return Table::default();
        }
        let any_anonymous = named.iter().any(|(_, r)| r.allow_anonymous);
        let (names, rules) = named
            .into_iter()
            .map(|(n, r)| (n.into_boxed_str(), r))
            .unzip();
        Table {
            names,
            rules,
            default: Some(Box::new(default)),
            any_anonymous,
        }
    }

    /// Whether no namespace is configured (`:` means nothing).
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The configured namespaces' names, in configuration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(|n| &**n)
    }

    /// The namespace of `channel`; `None` when it names one that is not
    /// configured. One branch when none is configured.
    pub fn find(&self, channel: &str) -> Option<Ns> {
        if self.names.is_empty() {
            return Some(Ns::Default);
        }
        let Some((ns, _)) = channel.split_once(':') else {
            return Some(Ns::Default);
        };
        let i = self.names.iter().position(|n| **n == *ns)?;
        Some(Ns::Named(i as u16))
    }

    /// The rules of a configured namespace; `None` for the default one
    /// (the global options) or with no namespace configured.
    pub fn rules(&self, ns: Ns) -> Option<&Rules> {
        match ns {
            Ns::Default => None,
            Ns::Named(i) => self.rules.get(usize::from(i)),
        }
    }

    /// Every configured namespace's rules, in the order of [`Table::names`].
    pub fn all_rules(&self) -> impl Iterator<Item = &Rules> {
        self.rules.iter()
    }

    /// The rules of `channel`'s namespace, when it is a configured one.
    pub fn rules_of(&self, channel: &str) -> Option<&Rules> {
        self.find(channel).and_then(|ns| self.rules(ns))
    }

    /// Whether `channel`'s namespace allows deltas (`delta = "fossil"`).
    pub fn allows_delta(&self, channel: &str) -> bool {
        self.rules_of(channel).is_some_and(|r| r.delta)
    }

    /// Whether a subscribe to `channel` without `since` gets its latest
    /// message (its namespace's `recover-on-subscribe`).
    pub fn recovers(&self, channel: &str) -> bool {
        self.rules_of(channel)
            .is_some_and(|r| r.recover_on_subscribe)
    }

    /// The subscribe (`publish == false`) or publish hook choice of
    /// `channel`'s namespace: the global hook's for the default namespace
    /// and with none configured.
    pub fn proxy_of(&self, channel: &str, publish: bool) -> Proxy {
        match self.rules_of(channel) {
            Some(r) if publish => r.publish_proxy,
            Some(r) => r.subscribe_proxy,
            None => Proxy::Global,
        }
    }

    /// Whether some namespace admits connections without a token.
    pub fn any_anonymous(&self) -> bool {
        self.any_anonymous
    }

    /// May a connection with `grants` subscribe to `channel` (and read
    /// its history and presence)? `tokens` is whether tokens are
    /// required: then a connection holding `Grants::ReadOnly` came
    /// without one (anonymous).
    pub fn may_subscribe(
        &self,
        grants: &Grants,
        tokens: bool,
        channel: &str,
    ) -> Result<(), Refusal> {
        let ns = self.find(channel).ok_or(Refusal::UnknownChannel)?;
        // Only `authorize_upgrade` below admits these, for namespaces
        // that allow them: the default namespace never does.
        let anonymous = tokens && *grants == Grants::ReadOnly && !self.is_empty();
        let Some(rules) = self.rules(ns) else {
            return match anonymous {
                true => Err(Refusal::Forbidden(ANONYMOUS)),
                false => granted(grants.may_subscribe(channel)),
            };
        };
        if anonymous {
            return match rules.allow_anonymous {
                true => Ok(()),
                false => Err(Refusal::Forbidden(ANONYMOUS)),
            };
        }
        match rules.subscribe {
            Subscribe::Token => granted(grants.may_subscribe(channel)),
            // `Hook`: the edge asks the namespace's hook first (one is
            // configured, or the server would not have started).
            Subscribe::Anyone | Subscribe::Hook => Ok(()),
            Subscribe::User => match (user_of(channel), grants.subject()) {
                (Some(owner), Some(user)) if owner == user => Ok(()),
                _ => Err(Refusal::Forbidden(NOT_YOURS)),
            },
        }
    }

    /// May a client connection publish `len` bytes on `channel`?
    /// `subscribed`: whether it is subscribed to it (a path-mode
    /// connection is to its channel).
    pub fn may_publish(
        &self,
        grants: &Grants,
        (channel, len): (&str, usize),
        subscribed: bool,
    ) -> Result<(), Refusal> {
        let rules = match self.find(channel).ok_or(Refusal::UnknownChannel)? {
            Ns::Default => return granted(grants.may_publish(channel)),
            ns => self.rules(ns).expect("a named namespace has rules"),
        };
        let allowed = match rules.publish {
            Publish::Clients => grants.may_publish(channel),
            Publish::Subscribers if subscribed && *grants != Grants::ReadOnly => true,
            Publish::Subscribers => return Err(Refusal::Forbidden(SUBSCRIBERS_ONLY)),
            Publish::Server => return Err(Refusal::Forbidden(SERVER_ONLY)),
        };
        granted(allowed)?;
        fits(rules, len)
    }

    /// May the server (`POST /publish`) publish `len` bytes on `channel`?
    pub fn server_may_publish(&self, channel: &str, len: usize) -> Result<(), Refusal> {
        match self.find(channel).ok_or(Refusal::UnknownChannel)? {
            Ns::Default => Ok(()),
            ns => fits(self.rules(ns).expect("a named namespace has rules"), len),
        }
    }
}

fn granted(allowed: bool) -> Result<(), Refusal> {
    match allowed {
        true => Ok(()),
        false => Err(Refusal::Forbidden(NOT_GRANTED)),
    }
}

fn fits(rules: &Rules, len: usize) -> Result<(), Refusal> {
    match len <= rules.max_message_size {
        true => Ok(()),
        false => Err(Refusal::TooLarge),
    }
}

/// The user a user channel belongs to: what follows its last `#`
/// (`notifications:#42` → `42`), if anything does.
pub fn user_of(channel: &str) -> Option<&str> {
    let (_, user) = channel.rsplit_once('#')?;
    (!user.is_empty()).then_some(user)
}

/// The upgrade check of a WebSocket (`channel`: path mode's) or of a
/// channel read (`GET /history`, `GET /presence`), with namespaces: as
/// `auth::authorize_upgrade`, except that with tokens required a request
/// without one is admitted as anonymous (subscribe-only
/// `Grants::ReadOnly`) when some namespace allows anonymous connections,
/// and the channel is checked against its namespace's rules. `base` is
/// the upgrade check without namespaces for a channel (the worker's: its
/// token keys include a JWKS set's).
pub fn authorize_upgrade(
    table: &Table,
    cfg: &AuthConfig,
    req: &crate::http::Request,
    channel: Option<&str>,
    base: impl FnOnce(Option<&str>) -> Result<Grants, auth::Refusal>,
) -> Result<Grants, auth::Refusal> {
    if table.is_empty() {
        return base(channel);
    }
    let tokens = cfg.tokens_required();
    let grants = if tokens && table.any_anonymous() && !carries_token(req) {
        if !auth::origin_allowed(&cfg.allowed_origins, req.origin.as_deref()) {
            return Err((403, "origin not allowed"));
        }
        Grants::read_only()
    } else {
        base(None)?
    };
    if let Some(c) = channel {
        table
            .may_subscribe(&grants, tokens, c)
            .map_err(|r| (r.status(), r.message()))?;
    }
    Ok(grants)
}

/// Whether a request brings a token (`?token=` or `Authorization`).
fn carries_token(req: &crate::http::Request) -> bool {
    req.authorization.is_some()
        || req
            .query
            .as_deref()
            .and_then(|q| auth::query_param(q, "token"))
            .is_some()
}

#[cfg(test)]
mod tests;
