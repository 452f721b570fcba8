//! Logging in to the console: the key check (constant time), session
//! tokens (random, expiring, a bounded table), the cookie that carries
//! one, the login form, and the per-address limit on login attempts.

use std::collections::HashMap;
use std::net::IpAddr;

use sha2::{Digest, Sha256};

/// How long a session lasts (the cookie's `Max-Age` too): 12 hours.
pub const SESSION_TTL_MS: u64 = 12 * 3600 * 1000;
/// Live sessions at most; a login beyond it ends the oldest session.
pub const MAX_SESSIONS: usize = 32;
/// Failed logins per address per [`LOGIN_WINDOW_MS`]; past them every
/// attempt (the right key too) answers `429` until the window ends.
pub const LOGIN_ATTEMPTS: u32 = 5;
/// The window of [`LOGIN_ATTEMPTS`]: one minute.
pub const LOGIN_WINDOW_MS: u64 = 60_000;
/// Addresses the login limiter remembers; when full, expired windows go
/// first, then the oldest.
pub const LOGIN_TABLE: usize = 1024;
/// The cookie's name.
pub const COOKIE: &str = "corecast_console";

/// Whether `given` is the admin key. Both sides are hashed first, so the
/// comparison takes the same time whatever the given key's length, and
/// compared without an early exit.
pub fn key_matches(given: &[u8], key: &str) -> bool {
    let (a, b) = (Sha256::digest(given), Sha256::digest(key.as_bytes()));
    crate::auth::secrets_equal(&a, &b)
}

/// A fresh session token: 32 random bytes from the system's generator,
/// in hex.
pub fn new_token() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .expect("the system's random generator");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The session token in a `Cookie` header value, if it carries one.
pub fn cookie_token(header: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(header).ok()?;
    text.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        (name == COOKIE).then_some(value.trim())
    })
}

/// The `Set-Cookie` value that removes the session cookie (log out).
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/console; Max-Age=0")
}

/// The `Set-Cookie` value of a new session: `HttpOnly` (no script reads
/// it), `SameSite=Strict` (no cross-site request carries it), scoped to
/// `/console`, `Secure` when served over TLS, expiring with the session.
pub fn set_cookie(token: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    let max_age = SESSION_TTL_MS / 1000;
    format!("{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/console; Max-Age={max_age}{secure}")
}

/// The value of field `name` in a form-encoded body
/// (`application/x-www-form-urlencoded`: `+` is a space, `%XX` a byte).
pub fn form_value(body: &[u8], name: &str) -> Option<Vec<u8>> {
    body.split(|&b| b == b'&').find_map(|pair| {
        let eq = pair.iter().position(|&b| b == b'=')?;
        (&pair[..eq] == name.as_bytes()).then(|| percent_decode(&pair[eq + 1..]))
    })
}

fn percent_decode(s: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let decoded = match s[i] {
            b'%' if i + 2 < s.len() => hex(s[i + 1]).zip(hex(s[i + 2])).map(|(h, l)| h << 4 | l),
            _ => None,
        };
        match (decoded, s[i]) {
            (Some(b), _) => {
                out.push(b);
                i += 3;
                continue;
            }
            (None, b'+') => out.push(b' '),
            (None, b) => out.push(b),
        }
        i += 1;
    }
    out
}

/// The live sessions: token → expiry (ms on the worker's clock).
#[derive(Debug, Default)]
pub struct Sessions {
    live: HashMap<String, u64>,
}

impl Sessions {
    /// Starts a session with `token` at `now`; beyond [`MAX_SESSIONS`]
    /// the one that expires first is ended.
    pub fn start(&mut self, token: String, now: u64) {
        self.live.retain(|_, &mut exp| exp > now);
        if self.live.len() >= MAX_SESSIONS {
            let oldest = self
                .live
                .iter()
                .min_by_key(|(_, &e)| e)
                .map(|(t, _)| t.clone());
            if let Some(t) = oldest {
                self.live.remove(&t);
            }
        }
        self.live.insert(token, now + SESSION_TTL_MS);
    }

    /// Whether `token` is a live session at `now`. The map's lookup is by
    /// hash; a guessed token would have to match 256 random bits.
    pub fn valid(&self, token: &str, now: u64) -> bool {
        self.live.get(token).is_some_and(|&exp| exp > now)
    }

    /// Ends the session of `token` (logging out).
    pub fn end(&mut self, token: &str) {
        self.live.remove(token);
    }

    /// Live sessions (a gauge for the snapshot).
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Whether no session is live.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }
}

/// Login attempts per address in fixed windows, in a bounded table.
#[derive(Debug, Default)]
pub struct LoginLimiter {
    by_ip: HashMap<IpAddr, (u64, u32)>,
}

impl LoginLimiter {
    /// Counts an attempt from `ip` at `now`: `Err(retry_after_ms)` when it
    /// is over [`LOGIN_ATTEMPTS`] in its window.
    pub fn attempt(&mut self, ip: IpAddr, now: u64) -> Result<(), u64> {
        if !self.by_ip.contains_key(&ip) && self.by_ip.len() >= LOGIN_TABLE {
            self.make_room(now);
        }
        let (start, n) = self.by_ip.entry(ip).or_insert((now, 0));
        if now >= *start + LOGIN_WINDOW_MS {
            (*start, *n) = (now, 0);
        }
        if *n >= LOGIN_ATTEMPTS {
            return Err(*start + LOGIN_WINDOW_MS - now);
        }
        *n += 1;
        Ok(())
    }

    /// An attempt from `ip` had the right key: it does not count
    /// (scripts running `corecast top --once` are not limited).
    pub fn succeeded(&mut self, ip: IpAddr) {
        if let Some((_, n)) = self.by_ip.get_mut(&ip) {
            *n = n.saturating_sub(1);
        }
    }

    /// Addresses remembered.
    pub fn len(&self) -> usize {
        self.by_ip.len()
    }

    /// Whether no address is remembered.
    pub fn is_empty(&self) -> bool {
        self.by_ip.is_empty()
    }

    fn make_room(&mut self, now: u64) {
        self.by_ip
            .retain(|_, (start, _)| now < *start + LOGIN_WINDOW_MS);
        if self.by_ip.len() >= LOGIN_TABLE {
            let oldest = self
                .by_ip
                .iter()
                .min_by_key(|(_, (s, _))| *s)
                .map(|(ip, _)| *ip);
            if let Some(ip) = oldest {
                self.by_ip.remove(&ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_tokens_and_cookies() {
        assert!(key_matches(b"0123456789abcdef", "0123456789abcdef"));
        assert!(!key_matches(b"0123456789abcdeX", "0123456789abcdef"));
        assert!(!key_matches(b"", "0123456789abcdef"));
        let (a, b) = (new_token(), new_token());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert_eq!(
            cookie_token(b"x=1; corecast_console=abc ; y=2"),
            Some("abc")
        );
        assert_eq!(cookie_token(b"corecast_consolex=abc"), None);
        let c = set_cookie("t", true);
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.ends_with("Secure"));
        assert!(!set_cookie("t", false).contains("Secure"));
    }

    #[test]
    fn form_values_are_decoded() {
        assert_eq!(form_value(b"a=1&key=a%2Bb+c%", "key").unwrap(), b"a+b c%");
        assert_eq!(form_value(b"key=%zz", "key").unwrap(), b"%zz");
        assert_eq!(form_value(b"keys=1", "key"), None);
    }

    #[test]
    fn sessions_are_bounded_and_expire() {
        let mut s = Sessions::default();
        for i in 0..MAX_SESSIONS + 3 {
            s.start(format!("t{i}"), i as u64);
        }
        assert_eq!(s.len(), MAX_SESSIONS);
        assert!(!s.valid("t0", 100) && s.valid("t34", 100));
        assert!(!s.valid("t34", 34 + SESSION_TTL_MS));
        s.end("t34");
        assert!(!s.valid("t34", 100));
    }

    #[test]
    fn the_limiter_counts_per_address_in_a_bounded_table() {
        let mut l = LoginLimiter::default();
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        for _ in 0..LOGIN_ATTEMPTS {
            assert!(l.attempt(ip, 0).is_ok());
        }
        assert_eq!(l.attempt(ip, 1000), Err(LOGIN_WINDOW_MS - 1000));
        assert!(l.attempt(ip, LOGIN_WINDOW_MS).is_ok());
        l.succeeded(ip);
        for _ in 0..LOGIN_ATTEMPTS {
            assert!(l.attempt(ip, LOGIN_WINDOW_MS).is_ok());
        }
        for i in 0..LOGIN_TABLE as u32 + 10 {
            let other = IpAddr::from(std::net::Ipv4Addr::from(i + 100));
            let _ = l.attempt(other, LOGIN_WINDOW_MS + 1);
        }
        assert_eq!(l.len(), LOGIN_TABLE);
    }
}
