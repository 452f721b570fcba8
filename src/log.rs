//! A tiny structured logger: one logfmt line per event on stderr.
//!
//! `2026-11-30T04:10:00.123Z level=info msg="listening" addr=127.0.0.1:8080`
//!
//! Hand-written rather than pulling in `tracing`: the server logs a handful
//! of events, never on the per-message hot path, and a global level check is
//! all the filtering it needs.

use std::fmt::{self, Display, Write as _};
use std::io::Write as _;
use std::str::FromStr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Log levels, most severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Level {
    /// The server cannot do what it was asked.
    Error = 0,
    /// Something is wrong but service goes on.
    Warn = 1,
    /// Notable events: start, stop, slow consumers.
    Info = 2,
    /// Client errors and per-connection events.
    Debug = 3,
    /// Everything.
    Trace = 4,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
            Level::Trace => "trace",
        }
    }
}

impl FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "error" => Level::Error,
            "warn" | "warning" => Level::Warn,
            "info" => Level::Info,
            "debug" => Level::Debug,
            "trace" => Level::Trace,
            _ => return Err("expected error, warn, info, debug or trace".into()),
        })
    }
}

static MAX_LEVEL: AtomicU8 = AtomicU8::new(Level::Info as u8);

/// Sets the most verbose level that is printed.
pub fn set_level(level: Level) {
    MAX_LEVEL.store(level as u8, Ordering::Relaxed);
}

/// Whether `level` is printed.
#[inline]
pub fn enabled(level: Level) -> bool {
    level as u8 <= MAX_LEVEL.load(Ordering::Relaxed)
}

/// Formats one line; the macros call this after the level check.
pub fn emit(level: Level, msg: &str, fields: &[(&str, &dyn Display)]) {
    let line = format_line(SystemTime::now(), level, msg, fields);
    // A failed write to stderr has nowhere to be reported.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

fn format_line(
    now: SystemTime,
    level: Level,
    msg: &str,
    fields: &[(&str, &dyn Display)],
) -> String {
    let mut line = String::with_capacity(128);
    write_timestamp(&mut line, now);
    let _ = write!(line, " level={} msg=", level.name());
    write_value(&mut line, msg);
    for (k, v) in fields {
        let _ = write!(line, " {k}=");
        write_value(&mut line, &v.to_string());
    }
    line.push('\n');
    line
}

/// Quotes values with spaces, quotes or `=`, so lines stay machine-parsable.
fn write_value(out: &mut String, v: &str) {
    let plain = !v.is_empty()
        && !v
            .chars()
            .any(|c| c.is_whitespace() || c == '"' || c == '=' || c.is_control());
    if plain {
        out.push_str(v);
    } else {
        let _ = write!(out, "{v:?}");
    }
}

/// The current time as RFC 3339 UTC with milliseconds (as in log lines).
pub fn timestamp_now() -> String {
    let mut s = String::with_capacity(24);
    write_timestamp(&mut s, SystemTime::now());
    s
}

/// RFC 3339 UTC with milliseconds, from the civil-from-days algorithm.
fn write_timestamp(out: &mut String, now: SystemTime) {
    let d = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    let _ = write!(
        out,
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis()
    );
}

/// Howard Hinnant's days → (year, month, day).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Wraps a value so it prints through `Debug` in a log field.
pub struct Dbg<T>(pub T);

impl<T: fmt::Debug> Display for Dbg<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// Logs at a level: `log!(Info, "listening", addr = a)`.
#[macro_export]
macro_rules! log {
    ($lvl:ident, $msg:expr $(, $k:ident = $v:expr)* $(,)?) => {
        if $crate::log::enabled($crate::log::Level::$lvl) {
            $crate::log::emit(
                $crate::log::Level::$lvl,
                $msg,
                &[$((stringify!($k), &$v as &dyn ::std::fmt::Display)),*],
            );
        }
    };
}

/// At most one line per `interval` for one kind of event; the rest are
/// counted and the next line says how many were suppressed. Sans-I/O:
/// the caller passes the clock.
#[derive(Debug, Clone, Copy)]
pub struct LogLimiter {
    interval_ms: u64,
    /// When the next line may be written (`None`: now).
    next_ms: Option<u64>,
    suppressed: u64,
}

impl LogLimiter {
    /// A limiter allowing one line per `interval_ms`.
    pub const fn new(interval_ms: u64) -> LogLimiter {
        LogLimiter {
            interval_ms,
            next_ms: None,
            suppressed: 0,
        }
    }

    /// `Some(n)` when a line may be written now (`n` lines were suppressed
    /// since the last one), `None` when this one is suppressed.
    pub fn allow(&mut self, now_ms: u64) -> Option<u64> {
        if self.next_ms.is_some_and(|next| now_ms < next) {
            self.suppressed += 1;
            return None;
        }
        self.next_ms = Some(now_ms.saturating_add(self.interval_ms));
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// Refusals that a client can trigger at will, each logged through its
/// own [`LogLimiter`] so a flood of bad requests cannot flood the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `POST /cache/purge` with a missing or wrong token.
    PurgeToken,
    /// A WebSocket upgrade refused (token, origin, publish key).
    Upgrade,
    /// `POST /publish` with a missing or wrong publish key.
    PublishKey,
    /// A connection or handshake over a per-IP limit.
    PerIp,
    /// A TLS connection over `--tls-max-handshakes`.
    Tls,
}

/// Interval of [`refused`] lines per kind.
pub const REFUSAL_LOG_INTERVAL_MS: u64 = 10_000;

thread_local! {
    /// Per worker thread (each worker owns its limiters, no locks):
    /// limiters by [`Refusal`] kind, lines suppressed in total, and the
    /// clock they run on.
    static REFUSALS: std::cell::RefCell<([LogLimiter; 5], u64)> = const {
        std::cell::RefCell::new(([LogLimiter::new(REFUSAL_LOG_INTERVAL_MS); 5], 0))
    };
}

fn refusal_clock_ms() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// Logs a refusal at info level, at most once per
/// [`REFUSAL_LOG_INTERVAL_MS`] per kind on this thread, with the number
/// of lines suppressed since the previous one.
pub fn refused(kind: Refusal, msg: &str, reason: &str) {
    if !enabled(Level::Info) {
        return;
    }
    let now = refusal_clock_ms();
    let allowed = REFUSALS.with(|r| {
        let mut r = r.borrow_mut();
        let allowed = r.0[kind as usize].allow(now);
        if allowed.is_none() {
            r.1 += 1;
        }
        allowed
    });
    if let Some(suppressed) = allowed {
        emit(
            Level::Info,
            msg,
            &[("reason", &reason), ("suppressed", &suppressed)],
        );
    }
}

/// Refusal lines suppressed on this thread so far (`/stats`).
pub fn refusals_suppressed() -> u64 {
    REFUSALS.with(|r| r.borrow().1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_limiter_allows_one_line_per_interval_and_counts_the_rest() {
        let mut l = LogLimiter::new(1000);
        assert_eq!(l.allow(0), Some(0));
        assert!((0..999).all(|i| l.allow(1 + i).is_none()));
        assert_eq!(l.allow(1000), Some(999), "the next line reports them");
        assert_eq!(l.allow(1500), None);
        assert_eq!(l.allow(5000), Some(1));
        assert_eq!(l.allow(6000), Some(0));
    }

    #[test]
    fn lines_are_logfmt_with_quoted_values() {
        let t = UNIX_EPOCH + Duration::from_millis(1_796_010_909_123);
        let line = format_line(
            t,
            Level::Info,
            "slow consumer",
            &[("conn", &7), ("reason", &"queue full")],
        );
        assert_eq!(
            line,
            "2026-11-30T03:55:09.123Z level=info msg=\"slow consumer\" conn=7 reason=\"queue full\"\n"
        );
    }

    #[test]
    fn levels_parse_and_filter() {
        assert_eq!("WARN".parse::<Level>().unwrap(), Level::Warn);
        assert!("loud".parse::<Level>().is_err());
        assert!(Level::Error < Level::Debug);
    }
}
