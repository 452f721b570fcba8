//! What a connection may do: everything, subscribe only, or what its
//! token's claims list (channel patterns: `*`, `news.*`, `chat`).

use std::sync::Arc;

use crate::filter::Filter;

/// What a connection may do. Kept to one pointer for the common cases
/// (no tokens configured, the read-only status feed), since every
/// connection's task holds one for its whole life.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Grants {
    /// Everything (tokens are not required).
    #[default]
    All,
    /// Subscribe only (the status feed).
    ReadOnly,
    /// What a verified token lists.
    Token(Box<TokenGrants>),
}

/// The claims of a verified token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenGrants {
    /// Who the token was issued to (`sub`), for logs; the user in
    /// presence channels.
    pub subject: Option<String>,
    /// The `info` claim (a JSON object of at most `MAX_INFO` bytes, as
    /// sent): the user's public info in presence channels.
    pub info: Option<String>,
    /// When the token expires (seconds since the epoch): the connection is
    /// closed with 4001 then unless it refreshed its token.
    pub exp: u64,
    /// Admitted by the connect hook (not a token): it publishes only
    /// through a publish hook, never on a channel that has none.
    pub via_hook: bool,
    subscribe: Vec<String>,
    publish: Vec<String>,
    /// Tag filters the server applies to subscriptions on channels their
    /// patterns match (every matching one), whatever the client asks.
    pub(super) filters: Vec<(String, Arc<Filter>)>,
}

impl TokenGrants {
    /// The grants of a verified token: `(sub, info, exp)` and its
    /// channel patterns.
    pub(super) fn new(
        (subject, info, exp): (Option<String>, Option<String>, u64),
        subscribe: Vec<String>,
        publish: Vec<String>,
    ) -> Self {
        TokenGrants {
            subject,
            info,
            exp,
            via_hook: false,
            subscribe,
            publish,
            filters: Vec::new(),
        }
    }

    /// Whether `other` grants exactly the same channels (a refresh may
    /// extend a connection's life, never widen or narrow what it may do).
    pub fn same_channels(&self, other: &TokenGrants) -> bool {
        self.subscribe == other.subscribe
            && self.publish == other.publish
            && self.filters == other.filters
    }
}

impl Grants {
    /// Everything (used when tokens are not required).
    pub fn all() -> Grants {
        Grants::All
    }

    /// Nothing may be published (the status feed).
    pub fn read_only() -> Grants {
        Grants::ReadOnly
    }

    /// What a connection the connect hook admitted may do: subscribe
    /// to any channel (a subscribe hook decides per channel), publish
    /// only when `publish` (a publish hook decides per message). `user`
    /// (empty: anonymous), `info` and `exp` (0: never) are the hook's.
    pub fn from_hook(user: String, info: Option<String>, exp: u64, publish: bool) -> Grants {
        let all = || vec!["*".to_string()];
        let subject = Some(user).filter(|u| !u.is_empty());
        let publish = if publish { all() } else { Vec::new() };
        let mut t = TokenGrants::new((subject, info, exp), all(), publish);
        t.via_hook = true;
        Grants::Token(Box::new(t))
    }

    /// Whether the connect hook admitted the holder (see
    /// [`TokenGrants::via_hook`]).
    pub fn via_hook(&self) -> bool {
        matches!(self, Grants::Token(t) if t.via_hook)
    }

    /// The token's `exp`, if a token (or a connect hook's `expire_at`)
    /// sets one.
    pub fn expires(&self) -> Option<u64> {
        match self {
            Grants::Token(t) => Some(t.exp).filter(|&e| e > 0),
            _ => None,
        }
    }

    /// Who the token was issued to, if a token was used.
    pub fn subject(&self) -> Option<&str> {
        match self {
            Grants::Token(t) => t.subject.as_deref(),
            _ => None,
        }
    }

    /// The token's `info` claim (raw JSON object), if a token was used.
    pub fn info(&self) -> Option<&str> {
        match self {
            Grants::Token(t) => t.info.as_deref(),
            _ => None,
        }
    }

    /// May the holder subscribe to `channel`?
    pub fn may_subscribe(&self, channel: &str) -> bool {
        match self {
            Grants::All | Grants::ReadOnly => true,
            Grants::Token(t) => t.subscribe.iter().any(|p| pattern_matches(p, channel)),
        }
    }

    /// The tag filters the token sets on `channel` (those of every
    /// pattern that matches it): a subscription there gets only what
    /// passes all of them, whatever its own filter.
    pub fn filters_for(&self, channel: &str) -> Vec<Filter> {
        match self {
            Grants::Token(t) => t
                .filters
                .iter()
                .filter(|(p, _)| pattern_matches(p, channel))
                .map(|(_, f)| Filter::clone(f))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// May the holder publish on `channel`?
    pub fn may_publish(&self, channel: &str) -> bool {
        match self {
            Grants::All => true,
            Grants::ReadOnly => false,
            Grants::Token(t) => t.publish.iter().any(|p| pattern_matches(p, channel)),
        }
    }
}

/// `*` matches everything, `news.*` every name starting with `news.`,
/// anything else only itself.
fn pattern_matches(pattern: &str, channel: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => channel.starts_with(prefix),
        None => pattern == channel,
    }
}
