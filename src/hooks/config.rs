//! The hooks' options (`--proxy-*`).

use std::time::Duration;

use super::kind::HookKind;
use crate::cache::origin::OriginUrl;

/// The hooks' settings; every default is the options table's
/// (`config::OPTIONS`).
#[derive(Debug, Clone, Default)]
pub struct HookConfig {
    /// Each hook's URL by [`HookKind::index`] (`None`: that hook is off).
    pub urls: [Option<OriginUrl>; 5],
    /// Request headers of the upgrade forwarded to the connect hook
    /// (lowercase names; default `cookie,authorization,user-agent,origin,x-forwarded-for`).
    pub http_headers: Vec<String>,
    /// Header lines added to every hook request (`Name: value`, checked).
    pub static_headers: Vec<(String, String)>,
    /// Time for a whole hook call, the wait for a slot included (default 1 s).
    pub timeout: Duration,
    /// Requests of one hook in flight at once; more wait within the
    /// timeout (default 64; at least 1).
    pub concurrency: usize,
    /// Connections to one backend origin (host and port), in flight and
    /// kept alive (default 32).
    pub max_connections: usize,
    /// Largest answer body; a larger one is a failed call (default 64 KiB).
    pub max_body: usize,
    /// How long `GET /api/connections` waits for every instance's answer
    /// in Redis mode (default 1 s).
    pub connections_timeout: Duration,
    /// Named proxies (`--proxy NAME=URL`), which namespaces choose for
    /// their subscribe and publish hooks (`subscribe-proxy`,
    /// `publish-proxy`); at most [`MAX_PROXIES`], each name once.
    pub named: Vec<NamedProxy>,
}

/// Most named proxies (each is a keep-alive pool's worth of backend
/// connections and a line of counters at most).
pub const MAX_PROXIES: usize = 16;

/// A namespace's choice that means "no hook here".
pub const NO_PROXY: &str = "none";

/// One named proxy: Centrifugo's `proxies` entry (`name`, `endpoint`).
#[derive(Debug, Clone)]
pub struct NamedProxy {
    /// Its name: 1-32 bytes of `A-Z a-z 0-9 - _ .`, not `none`.
    pub name: String,
    /// Where its calls go.
    pub url: OriginUrl,
}

impl HookConfig {
    /// The URL of `kind`, if that hook is on.
    pub fn url(&self, kind: HookKind) -> Option<&OriginUrl> {
        self.urls[kind.index()].as_ref()
    }

    /// Whether any hook is on (a named proxy is one a namespace may use).
    pub fn any(&self) -> bool {
        self.urls.iter().any(Option::is_some) || !self.named.is_empty()
    }

    /// Sets `kind`'s URL from an option's value (`http[s]://host[:port]/path`).
    pub fn set_url(&mut self, kind: HookKind, v: &str) -> Result<(), String> {
        self.urls[kind.index()] = Some(v.parse()?);
        Ok(())
    }

    /// `--proxy`: comma-separated `NAME=URL` pairs, added to those given
    /// before (the flag repeats; a TOML `[[proxy]]` table is one pair).
    pub fn add_named(&mut self, v: &str) -> Result<(), String> {
        for pair in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, url) = pair
                .split_once('=')
                .ok_or_else(|| format!("`{pair}`: expected NAME=URL"))?;
            let name = name.trim();
            if name == NO_PROXY || !crate::namespace::valid_namespace_name(name) {
                return Err(format!(
                    "proxy name `{}`: 1-32 bytes of A-Z a-z 0-9 - _ . (not `{NO_PROXY}`)",
                    name.escape_debug()
                ));
            }
            if self.named.iter().any(|p| p.name == name) {
                return Err(format!("proxy `{name}` is defined twice"));
            }
            if self.named.len() >= MAX_PROXIES {
                return Err(format!("more than {MAX_PROXIES} named proxies"));
            }
            let url = url
                .trim()
                .parse()
                .map_err(|e| format!("proxy `{name}`: {e}"))?;
            self.named.push(NamedProxy {
                name: name.to_string(),
                url,
            });
        }
        Ok(())
    }

    /// The index of the named proxy `name`.
    pub fn named_index(&self, name: &str) -> Option<usize> {
        self.named.iter().position(|p| p.name == name)
    }

    /// `--proxy-http-headers`: a comma-separated list of header names.
    pub fn set_http_headers(&mut self, v: &str) -> Result<(), String> {
        let names: Vec<String> = v
            .split(',')
            .map(|n| n.trim().to_ascii_lowercase())
            .filter(|n| !n.is_empty())
            .collect();
        if let Some(bad) = names.iter().find(|n| !is_token(n)) {
            return Err(format!("invalid header name `{bad}`"));
        }
        self.http_headers = names;
        Ok(())
    }

    /// `--proxy-static-headers`: comma-separated `Name: value` pairs; a
    /// value may not hold a comma, CR or LF.
    pub fn set_static_headers(&mut self, v: &str) -> Result<(), String> {
        let mut out = Vec::new();
        for pair in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = pair
                .split_once(':')
                .ok_or_else(|| "expected Name: value".to_string())?;
            let (name, value) = (name.trim(), value.trim());
            if !is_token(name) || value.bytes().any(|b| b < 0x20 && b != b'\t') {
                return Err("invalid static header".into());
            }
            out.push((name.to_string(), value.to_string()));
        }
        self.static_headers = out;
        Ok(())
    }
}

/// Sets a count that must be at least 1 (0 would refuse every call).
pub fn at_least_one(slot: &mut usize, v: &str) -> Result<(), String> {
    match v.trim().parse() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => {
            *slot = n;
            Ok(())
        }
        Err(e) => Err(format!("{e}")),
    }
}

/// RFC 9110 5.6.2 `token`: what a header name may be.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_lists_are_checked() {
        let mut c = HookConfig::default();
        c.set_http_headers("Cookie, X-Real-IP,,").unwrap();
        assert_eq!(c.http_headers, ["cookie", "x-real-ip"]);
        assert!(c.set_http_headers("bad header").is_err());
        c.set_static_headers("X-Secret: s3cr3t, X-Env:prod")
            .unwrap();
        assert_eq!(c.static_headers[0], ("X-Secret".into(), "s3cr3t".into()));
        assert_eq!(c.static_headers[1], ("X-Env".into(), "prod".into()));
        assert!(c.set_static_headers("X-A: a\r\nX-B: b").is_err());
        assert!(c.set_static_headers("no colon").is_err());
    }

    #[test]
    fn counts_are_at_least_one() {
        let mut n = 5;
        assert!(at_least_one(&mut n, "0").is_err());
        assert!(at_least_one(&mut n, "x").is_err());
        at_least_one(&mut n, " 8 ").unwrap();
        assert_eq!(n, 8);
    }

    #[test]
    fn named_proxies_are_checked() {
        let mut c = HookConfig::default();
        c.add_named("strict=http://127.0.0.1:9/s, loose=http://127.0.0.1:9/l")
            .unwrap();
        c.add_named("third=https://b.example/x").unwrap();
        assert_eq!(c.named_index("third"), Some(2));
        assert_eq!(c.named[1].url.base_path, "/l");
        assert!(c.any());
        for (bad, says) in [
            ("strict=http://127.0.0.1:9/x", "defined twice"),
            ("none=http://127.0.0.1:9/x", "not `none`"),
            ("a b=http://127.0.0.1:9/x", "proxy name"),
            ("nourl", "expected NAME=URL"),
            ("x=ftp://y", "proxy `x`"),
        ] {
            let e = c.add_named(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let many: Vec<String> = (0..MAX_PROXIES)
            .map(|i| format!("p{i}=http://h/{i}"))
            .collect();
        assert!(c
            .add_named(&many.join(","))
            .unwrap_err()
            .contains("more than"));
    }

    #[test]
    fn urls_by_hook() {
        let mut c = HookConfig::default();
        assert!(!c.any());
        c.set_url(HookKind::Rpc, "http://127.0.0.1:9/rpc").unwrap();
        assert!(c.any());
        assert_eq!(c.url(HookKind::Rpc).unwrap().base_path, "/rpc");
        assert!(c.url(HookKind::Connect).is_none());
        assert!(c.set_url(HookKind::Connect, "ftp://x").is_err());
    }
}
