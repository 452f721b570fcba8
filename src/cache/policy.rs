//! What the cache may do with a response: `Cache-Control` (RFC 9111
//! section 5.2 and the RFC 5861 stale extensions), storability, freshness
//! lifetimes, and where a stored response stands at a given age.

/// RFC 9111 1.2.2: a delta-seconds value too large to represent "MUST" be
/// taken as 2^31.
const DELTA_MAX: u64 = 1 << 31;

/// Statuses stored without explicit freshness (RFC 9110 15.1 "heuristically
/// cacheable"); corecast stores nothing else.
pub const CACHEABLE_STATUSES: [u16; 10] = [200, 203, 204, 300, 301, 404, 405, 410, 414, 501];

/// Whether responses with `status` may be stored.
pub fn cacheable_status(status: u16) -> bool {
    CACHEABLE_STATUSES.contains(&status)
}

/// Origin statuses that count as errors for `stale-if-error` (RFC 5861 4).
pub fn is_error_status(status: u16) -> bool {
    matches!(status, 500 | 502 | 503 | 504)
}

/// The response directives the cache acts on; seconds where numeric.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CacheControl {
    /// `max-age`.
    pub max_age: Option<u64>,
    /// `s-maxage` (wins over `max-age` in a shared cache).
    pub s_maxage: Option<u64>,
    /// `no-store`: never stored.
    pub no_store: bool,
    /// `no-cache`: stored, but stale from the start (revalidated).
    pub no_cache: bool,
    /// `private`: for one user only; never stored or shared.
    pub private: bool,
    /// `public`.
    pub public: bool,
    /// `must-revalidate` or `proxy-revalidate`: never served stale.
    pub must_revalidate: bool,
    /// `stale-while-revalidate`.
    pub stale_while_revalidate: Option<u64>,
    /// `stale-if-error`.
    pub stale_if_error: Option<u64>,
}

impl CacheControl {
    /// Parses every `Cache-Control` field line of a response. Directive
    /// names are case-insensitive; unknown ones are ignored; a repeated
    /// directive keeps its first value (RFC 9111 4.2.1 allows that).
    pub fn parse<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> CacheControl {
        let mut cc = CacheControl::default();
        for line in lines {
            for (name, value) in Directives::new(line) {
                cc.apply(&name, value.as_deref());
            }
        }
        cc
    }

    fn apply(&mut self, name: &[u8], value: Option<&[u8]>) {
        let first = |slot: &mut Option<u64>, v: Option<u64>| {
            if slot.is_none() {
                *slot = v;
            }
        };
        match name.to_ascii_lowercase().as_slice() {
            // An invalid max-age makes the response stale (RFC 9111 4.2.1).
            b"max-age" => first(&mut self.max_age, Some(delta(value).unwrap_or(0))),
            b"s-maxage" => first(&mut self.s_maxage, Some(delta(value).unwrap_or(0))),
            b"stale-while-revalidate" => first(&mut self.stale_while_revalidate, delta(value)),
            b"stale-if-error" => first(&mut self.stale_if_error, delta(value)),
            b"no-store" => self.no_store = true,
            // With field names it only restricts those fields; treating it
            // as the unqualified form is stricter and always safe.
            b"no-cache" => self.no_cache = true,
            b"private" => self.private = true,
            b"public" => self.public = true,
            b"must-revalidate" | b"proxy-revalidate" => self.must_revalidate = true,
            _ => {}
        }
    }
}

/// `delta-seconds = 1*DIGIT`, saturating at 2^31.
fn delta(value: Option<&[u8]>) -> Option<u64> {
    let v = value?;
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        v.iter()
            .fold(0u64, |n, d| (n * 10 + u64::from(d - b'0')).min(DELTA_MAX)),
    )
}

/// Iterates `name[=token|"quoted"]` directives separated by commas; a
/// quoted value may itself contain commas.
struct Directives<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Directives<'a> {
    fn new(s: &'a [u8]) -> Self {
        Directives { s, i: 0 }
    }

    fn skip(&mut self, pred: impl Fn(u8) -> bool) {
        while self.i < self.s.len() && pred(self.s[self.i]) {
            self.i += 1;
        }
    }

    fn quoted(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.i += 1; // opening quote
        while self.i < self.s.len() {
            let b = self.s[self.i];
            self.i += 1;
            match b {
                b'"' => break,
                b'\\' if self.i < self.s.len() => {
                    out.push(self.s[self.i]);
                    self.i += 1;
                }
                _ => out.push(b),
            }
        }
        out
    }
}

impl Iterator for Directives<'_> {
    type Item = (Vec<u8>, Option<Vec<u8>>);

    fn next(&mut self) -> Option<Self::Item> {
        self.skip(|b| b == b',' || b.is_ascii_whitespace());
        if self.i >= self.s.len() {
            return None;
        }
        let start = self.i;
        self.skip(|b| b != b'=' && b != b',' && !b.is_ascii_whitespace());
        let name = self.s[start..self.i].to_vec();
        self.skip(|b| b == b' ' || b == b'\t');
        if self.s.get(self.i) != Some(&b'=') {
            self.skip(|b| b != b',');
            return Some((name, None));
        }
        self.i += 1;
        self.skip(|b| b == b' ' || b == b'\t');
        let value = if self.s.get(self.i) == Some(&b'"') {
            self.quoted()
        } else {
            let start = self.i;
            self.skip(|b| b != b',' && !b.is_ascii_whitespace());
            self.s[start..self.i].to_vec()
        };
        self.skip(|b| b != b',');
        Some((name, Some(value)))
    }
}

/// Freshness lifetime and grace windows of a stored response, in ms.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    /// Fresh for this long after its date.
    pub fresh_ms: u64,
    /// Once stale, served (while one background refresh runs) this long.
    pub swr_ms: u64,
    /// Once stale, served when the origin fails, this long.
    pub sie_ms: u64,
}

impl Lifetimes {
    /// How long a store must keep the response at `age_ms`: freshness plus
    /// the longer grace window, minus the age already used up.
    pub fn store_ttl_ms(&self, age_ms: u64) -> u64 {
        self.fresh_ms
            .saturating_add(self.swr_ms.max(self.sie_ms))
            .saturating_sub(age_ms)
    }

    /// Where a response of age `age_ms` stands.
    pub fn classify(&self, age_ms: u64) -> Freshness {
        if age_ms < self.fresh_ms {
            return Freshness::Fresh {
                left_ms: self.fresh_ms - age_ms,
            };
        }
        let over = age_ms - self.fresh_ms;
        Freshness::Stale {
            over_ms: over,
            while_revalidate: over < self.swr_ms,
            if_error: over < self.sie_ms,
        }
    }
}

/// A stored response's state at some age.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Servable as is for `left_ms` more.
    Fresh {
        /// Remaining freshness.
        left_ms: u64,
    },
    /// Past its freshness lifetime by `over_ms`.
    Stale {
        /// How far past.
        over_ms: u64,
        /// Within `stale-while-revalidate`: serve it, refresh behind.
        while_revalidate: bool,
        /// Within `stale-if-error`: serve it if the origin fails.
        if_error: bool,
    },
}

/// Lifetimes used when the origin names none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Defaults {
    /// Freshness without `max-age` / `s-maxage`.
    pub ttl_ms: u64,
    /// `stale-while-revalidate` when absent.
    pub swr_ms: u64,
    /// `stale-if-error` when absent.
    pub sie_ms: u64,
}

/// Facts about a response (and its request) beyond `Cache-Control`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// The status.
    pub status: u16,
    /// `Vary: *` (or more `Vary` names than the cache keys on).
    pub vary_any: bool,
    /// The response sets a cookie: it is about one client.
    pub sets_cookie: bool,
    /// The request carried a `--cache-bypass-headers` header (`Cookie`,
    /// `Authorization`): its response may be about that user.
    pub personal: bool,
    /// `Access-Control-Allow-Origin` echoes the request's `Origin` without
    /// `Vary: Origin`: stored, it would be served to other origins.
    pub reflects_origin: bool,
    /// The response has a `Cache-Control` field (any).
    pub has_cache_control: bool,
    /// `Pragma: no-cache` (honoured only without `Cache-Control`).
    pub pragma_no_cache: bool,
    /// Freshness from `Expires` minus `Date`, in ms (0 when `Expires` is
    /// invalid or past); `None` without `Expires`.
    pub expires_ms: Option<u64>,
    /// The response has `Last-Modified`.
    pub last_modified: bool,
}

/// The verdict on one response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// May be handed to other requests (coalesced waiters).
    pub shareable: bool,
    /// May be stored.
    pub storable: bool,
    /// Its lifetimes.
    pub life: Lifetimes,
}

/// Decides storability and lifetimes (RFC 9111 3 and 4.2, RFC 5861).
///
/// - `s-maxage` wins over `max-age`, which wins over `Expires` − `Date`.
/// - Without any of them, the heuristic `defaults.ttl_ms` applies only
///   where RFC 9111 4.2.2 allows it and the response gives a reason to
///   think it is shared content: `public`, or `Last-Modified`, or no
///   `Cache-Control` and no `Expires` at all (a plain static response).
///   Otherwise it is stored stale (revalidated on every use) at most.
/// - `Pragma: no-cache` without `Cache-Control` counts as `no-cache`.
/// - `no-cache` stores the response stale from the start (every use
///   revalidates) and without `stale-while-revalidate`.
/// - `must-revalidate` / `proxy-revalidate` forbid serving it stale at all.
///   `s-maxage` implies `proxy-revalidate` (RFC 9111 5.2.2.10), so with it
///   only grace windows the origin names explicitly apply.
/// - The response to a personal request (`Cookie`, `Authorization`) is
///   only shared when it says so: `public` or `s-maxage` (RFC 9111 3.5,
///   applied to cookies too).
/// - A response whose `Access-Control-Allow-Origin` reflects the request's
///   `Origin` without `Vary: Origin` is never shared.
pub fn decide(cc: &CacheControl, facts: Facts, defaults: &Defaults) -> Verdict {
    let personal_ok = !facts.personal || cc.public || cc.s_maxage.is_some();
    let shareable = !cc.no_store
        && !cc.private
        && !facts.vary_any
        && !facts.sets_cookie
        && !facts.reflects_origin
        && personal_ok;
    let explicit = cc.s_maxage.or(cc.max_age).map(|s| s.saturating_mul(1000));
    let heuristic = cc.public
        || facts.last_modified
        || (!facts.has_cache_control && facts.expires_ms.is_none());
    let fresh_s = explicit.or(facts.expires_ms).or((!heuristic).then_some(0));
    let grace = |explicit: Option<u64>, default: u64| match explicit {
        Some(s) => s.saturating_mul(1000),
        None if cc.s_maxage.is_some() => 0,
        None => default,
    };
    let mut life = Lifetimes {
        fresh_ms: fresh_s.unwrap_or(defaults.ttl_ms),
        swr_ms: grace(cc.stale_while_revalidate, defaults.swr_ms),
        sie_ms: grace(cc.stale_if_error, defaults.sie_ms),
    };
    if cc.no_cache || (facts.pragma_no_cache && !facts.has_cache_control) {
        life.fresh_ms = 0;
        life.swr_ms = 0;
    }
    if cc.must_revalidate {
        life.swr_ms = 0;
        life.sie_ms = 0;
    }
    let storable = shareable && cacheable_status(facts.status) && life.store_ttl_ms(0) > 0;
    Verdict {
        shareable,
        storable,
        life,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cc(s: &str) -> CacheControl {
        CacheControl::parse([s.as_bytes()])
    }

    const D: Defaults = Defaults {
        ttl_ms: 60_000,
        swr_ms: 10_000,
        sie_ms: 300_000,
    };

    fn ok(status: u16) -> Facts {
        Facts {
            status,
            ..Facts::default()
        }
    }

    #[test]
    fn directives_parse_case_insensitively_with_quotes_and_junk() {
        let c = cc(r#"Public, MAX-AGE=60 , s-maxage="120", private="set-cookie, x", no-cache"#);
        assert_eq!(c.max_age, Some(60));
        assert_eq!(c.s_maxage, Some(120));
        assert!(c.public && c.private && c.no_cache && !c.no_store);
        let c = cc(",,, no-store ,stale-while-revalidate=5,stale-if-error=7, x=\"a\\\"b\"");
        assert!(c.no_store);
        assert_eq!(c.stale_while_revalidate, Some(5));
        assert_eq!(c.stale_if_error, Some(7));
        assert_eq!(cc(""), CacheControl::default());
    }

    #[test]
    fn numbers_are_strict_first_wins_and_saturate() {
        assert_eq!(cc("max-age=abc").max_age, Some(0), "invalid = stale");
        assert_eq!(cc("max-age=-1").max_age, Some(0));
        assert_eq!(cc("max-age=5, max-age=9").max_age, Some(5));
        assert_eq!(cc("max-age=99999999999999999999999").max_age, Some(1 << 31));
        assert_eq!(cc("stale-if-error=x").stale_if_error, None);
        let lines: [&[u8]; 2] = [b"max-age=3", b"s-maxage=4, must-revalidate"];
        let c = CacheControl::parse(lines);
        assert_eq!((c.max_age, c.s_maxage), (Some(3), Some(4)));
        assert!(c.must_revalidate);
    }

    #[test]
    fn s_maxage_wins_and_defaults_fill_gaps() {
        let v = decide(&cc("max-age=10, s-maxage=20"), ok(200), &D);
        assert_eq!(v.life.fresh_ms, 20_000);
        // s-maxage implies proxy-revalidate: no default grace...
        assert_eq!((v.life.swr_ms, v.life.sie_ms), (0, 0));
        // ...but explicit windows are honoured.
        let v = decide(&cc("s-maxage=20, stale-if-error=5"), ok(200), &D);
        assert_eq!(v.life.sie_ms, 5_000);
        let v = decide(&cc("max-age=10"), ok(200), &D);
        assert_eq!(
            v.life,
            Lifetimes {
                fresh_ms: 10_000,
                swr_ms: 10_000,
                sie_ms: 300_000
            }
        );
        let v = decide(&cc(""), ok(200), &D);
        assert_eq!(v.life.fresh_ms, 60_000);
        assert!(v.storable && v.shareable);
    }

    #[test]
    fn no_store_private_cookies_vary_star_and_statuses() {
        for (c, f) in [
            ("no-store", ok(200)),
            ("private, max-age=60", ok(200)),
            (
                "max-age=60",
                Facts {
                    sets_cookie: true,
                    ..ok(200)
                },
            ),
            (
                "max-age=60",
                Facts {
                    vary_any: true,
                    ..ok(200)
                },
            ),
            (
                "max-age=60",
                Facts {
                    personal: true,
                    ..ok(200)
                },
            ),
        ] {
            let v = decide(&cc(c), f, &D);
            assert!(!v.storable && !v.shareable, "{c} {f:?}");
        }
        let v = decide(
            &cc("public"),
            Facts {
                personal: true,
                ..ok(200)
            },
            &D,
        );
        assert!(v.storable);
        for s in CACHEABLE_STATUSES {
            assert!(decide(&cc(""), ok(s), &D).storable, "{s}");
        }
        for s in [201, 206, 302, 307, 400, 403, 500, 503] {
            let v = decide(&cc("max-age=60"), ok(s), &D);
            assert!(!v.storable && v.shareable, "{s}");
        }
    }

    #[test]
    fn heuristic_freshness_only_where_allowed_and_expires_and_pragma_count() {
        let with = |f: Facts| decide(&cc(""), f, &D).life.fresh_ms;
        let cc_present = Facts {
            has_cache_control: true,
            ..ok(200)
        };
        assert_eq!(with(ok(200)), 60_000, "no Cache-Control, no Expires");
        assert_eq!(with(cc_present), 0, "Cache-Control without a lifetime");
        let lm = Facts {
            last_modified: true,
            ..cc_present
        };
        assert_eq!(with(lm), 60_000, "Last-Modified allows the heuristic");
        assert_eq!(decide(&cc("public"), cc_present, &D).life.fresh_ms, 60_000);
        let expires = |ms| Facts {
            expires_ms: Some(ms),
            ..ok(200)
        };
        assert_eq!(with(expires(5_000)), 5_000);
        assert_eq!(with(expires(0)), 0, "invalid or past Expires is stale");
        assert_eq!(
            decide(&cc("max-age=9"), expires(5_000), &D).life.fresh_ms,
            9_000,
            "max-age wins over Expires"
        );
        let pragma = Facts {
            pragma_no_cache: true,
            ..ok(200)
        };
        assert_eq!(with(pragma), 0);
        let pragma_and_cc = Facts {
            has_cache_control: true,
            ..pragma
        };
        let v = decide(&cc("max-age=9"), pragma_and_cc, &D);
        assert_eq!(v.life.fresh_ms, 9_000, "Cache-Control wins over Pragma");
    }

    #[test]
    fn personal_and_origin_reflecting_responses_are_not_shared() {
        let personal = Facts {
            personal: true,
            ..ok(200)
        };
        assert!(!decide(&cc(""), personal, &D).storable);
        assert!(!decide(&cc("max-age=60, must-revalidate"), personal, &D).shareable);
        assert!(decide(&cc("s-maxage=60"), personal, &D).storable);
        assert!(decide(&cc("public, max-age=60"), personal, &D).storable);
        let reflects = Facts {
            reflects_origin: true,
            ..ok(200)
        };
        assert!(!decide(&cc("public, max-age=60"), reflects, &D).shareable);
    }

    #[test]
    fn no_cache_is_stored_stale_and_must_revalidate_never_stale() {
        let v = decide(&cc("no-cache, max-age=60"), ok(200), &D);
        assert!(v.storable);
        assert_eq!(
            v.life,
            Lifetimes {
                fresh_ms: 0,
                swr_ms: 0,
                sie_ms: 300_000
            }
        );
        assert!(matches!(
            v.life.classify(0),
            Freshness::Stale {
                while_revalidate: false,
                if_error: true,
                ..
            }
        ));
        let v = decide(&cc("max-age=0, must-revalidate"), ok(200), &D);
        assert!(!v.storable, "nothing to keep it for");
    }

    #[test]
    fn classification_and_store_ttl_cover_grace() {
        let l = Lifetimes {
            fresh_ms: 1000,
            swr_ms: 500,
            sie_ms: 2000,
        };
        assert_eq!(l.classify(999), Freshness::Fresh { left_ms: 1 });
        assert_eq!(
            l.classify(1000),
            Freshness::Stale {
                over_ms: 0,
                while_revalidate: true,
                if_error: true
            }
        );
        assert_eq!(
            l.classify(1600),
            Freshness::Stale {
                over_ms: 600,
                while_revalidate: false,
                if_error: true
            }
        );
        assert_eq!(
            l.classify(3000),
            Freshness::Stale {
                over_ms: 2000,
                while_revalidate: false,
                if_error: false
            }
        );
        assert_eq!(l.store_ttl_ms(0), 3000);
        assert_eq!(l.store_ttl_ms(2500), 500);
        assert_eq!(l.store_ttl_ms(9000), 0);
    }
}
