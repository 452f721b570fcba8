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
/// Failed logins from all addresses together per [`LOGIN_WINDOW_MS`]:
/// past them every attempt answers `429` until the window ends, so an
/// attacker with many addresses (or who pushes its own out of the
/// table) still gets at most this many guesses a minute.
pub const LOGIN_GLOBAL_ATTEMPTS: u32 = 60;
/// The prefix an IPv6 address is limited by: a /64 (one subscriber's
/// network: its addresses are free to pick).
pub const LOGIN_IPV6_PREFIX: u8 = 64;
/// One `console login failed` line per this interval at most; the next
/// says how many were not written.
pub const LOGIN_LOG_INTERVAL_MS: u64 = 10_000;
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

/// Login attempts per address (an IPv6 address by its /64) and from all
/// addresses together, in fixed windows, in a bounded table; and the
/// limiter of the failure log lines.
#[derive(Debug)]
pub struct LoginLimiter {
    by_ip: HashMap<IpAddr, (u64, u32)>,
    /// All addresses' window: its start and its failed attempts.
    global: (u64, u32),
    log: crate::log::LogLimiter,
}

impl Default for LoginLimiter {
    fn default() -> Self {
        LoginLimiter {
            by_ip: HashMap::new(),
            global: (0, 0),
            log: crate::log::LogLimiter::new(LOGIN_LOG_INTERVAL_MS),
        }
    }
}

/// The key an address is limited by: an IPv4 address itself (also
/// IPv4-mapped IPv6), an IPv6 address its /64.
pub fn limited_prefix(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let bits = u128::from(v6) & (u128::MAX << (128 - u32::from(LOGIN_IPV6_PREFIX)));
                IpAddr::V6(bits.into())
            }
        },
    }
}

impl LoginLimiter {
    /// Counts an attempt from `ip` at `now`: `Err(retry_after_ms)` when
    /// its address (prefix) is over [`LOGIN_ATTEMPTS`] in its window, or
    /// all addresses together over [`LOGIN_GLOBAL_ATTEMPTS`].
    pub fn attempt(&mut self, ip: IpAddr, now: u64) -> Result<(), u64> {
        let ip = limited_prefix(ip);
        if !self.by_ip.contains_key(&ip) && self.by_ip.len() >= LOGIN_TABLE {
            self.make_room(now);
        }
        let global = &mut self.global;
        if now >= global.0 + LOGIN_WINDOW_MS {
            *global = (now, 0);
        }
        if global.1 >= LOGIN_GLOBAL_ATTEMPTS {
            return Err(global.0 + LOGIN_WINDOW_MS - now);
        }
        let (start, n) = self.by_ip.entry(ip).or_insert((now, 0));
        if now >= *start + LOGIN_WINDOW_MS {
            (*start, *n) = (now, 0);
        }
        if *n >= LOGIN_ATTEMPTS {
            return Err(*start + LOGIN_WINDOW_MS - now);
        }
        *n += 1;
        global.1 += 1;
        Ok(())
    }

    /// An attempt from `ip` had the right key: it does not count
    /// (scripts running `corecast top --once` are not limited).
    pub fn succeeded(&mut self, ip: IpAddr) {
        if let Some((_, n)) = self.by_ip.get_mut(&limited_prefix(ip)) {
            *n = n.saturating_sub(1);
        }
        self.global.1 = self.global.1.saturating_sub(1);
    }

    /// Whether a failed login's line may be written at `now`: `Some(n)`
    /// with the lines suppressed since the last one.
    pub fn log_failure(&mut self, now: u64) -> Option<u64> {
        self.log.allow(now)
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
        // Right keys (attempt, then succeeded) count against nothing.
        for i in 0..LOGIN_TABLE as u32 + 10 {
            let other = IpAddr::from(std::net::Ipv4Addr::from(i + 100));
            assert!(l.attempt(other, LOGIN_WINDOW_MS + 1).is_ok());
            l.succeeded(other);
        }
        assert_eq!(l.len(), LOGIN_TABLE);
    }

    #[test]
    fn an_ipv6_64_is_one_address() {
        let mut l = LoginLimiter::default();
        for i in 0..LOGIN_ATTEMPTS {
            let ip: IpAddr = format!("2001:db8:1:2::{:x}", i + 1).parse().unwrap();
            assert!(l.attempt(ip, 0).is_ok());
        }
        let same_64: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        assert!(l.attempt(same_64, 0).is_err());
        let other_64: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert!(l.attempt(other_64, 0).is_ok());
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(
            limited_prefix(mapped),
            "10.0.0.1".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn failures_are_bounded_globally_whatever_the_table_forgets() {
        let mut l = LoginLimiter::default();
        let mut failed = 0;
        // Each address fails once: the table forgets none of the window's
        // failures, because the global count holds them.
        for i in 0..LOGIN_TABLE as u32 * 2 {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(i + 1));
            if l.attempt(ip, 10).is_ok() {
                failed += 1;
            }
        }
        assert_eq!(failed, LOGIN_GLOBAL_ATTEMPTS);
        let fresh: IpAddr = "192.0.2.1".parse().unwrap();
        assert_eq!(l.attempt(fresh, 1010), Err(LOGIN_WINDOW_MS - 1010));
        assert!(l.attempt(fresh, LOGIN_WINDOW_MS + 10).is_ok());
    }

    #[test]
    fn failure_lines_are_limited() {
        let mut l = LoginLimiter::default();
        assert_eq!(l.log_failure(0), Some(0));
        assert_eq!(l.log_failure(1), None);
        assert_eq!(l.log_failure(2), None);
        assert_eq!(l.log_failure(LOGIN_LOG_INTERVAL_MS), Some(2));
    }
}
