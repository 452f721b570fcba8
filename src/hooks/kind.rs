//! The five hooks.

/// One hook: which client event is proxied to the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookKind {
    /// A WebSocket upgrade, before the `101` (`--proxy-connect`).
    Connect,
    /// A JSON `subscribe` (`--proxy-subscribe`).
    Subscribe,
    /// A JSON `publish` (`--proxy-publish`).
    Publish,
    /// A JSON `rpc` (`--proxy-rpc`).
    Rpc,
    /// Before a hook-given `expire_at` (`--proxy-refresh`).
    Refresh,
}

impl HookKind {
    /// Every hook, in the order of [`HookKind::index`].
    pub const ALL: [HookKind; 5] = [
        HookKind::Connect,
        HookKind::Subscribe,
        HookKind::Publish,
        HookKind::Rpc,
        HookKind::Refresh,
    ];

    /// Its position in per-hook arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Its name in flags, `/stats` and `/metrics`.
    pub fn name(self) -> &'static str {
        match self {
            HookKind::Connect => "connect",
            HookKind::Subscribe => "subscribe",
            HookKind::Publish => "publish",
            HookKind::Rpc => "rpc",
            HookKind::Refresh => "refresh",
        }
    }
}
