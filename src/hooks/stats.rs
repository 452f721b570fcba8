//! Per-hook counters and latency, as `/stats` JSON and `/metrics` lines.

use std::fmt::Write as _;

use serde::Serialize;

use super::kind::HookKind;
use crate::histogram::Histogram;

/// One hook's counters.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HookStats {
    /// Calls made (each ends in exactly one of: an answer used, a
    /// refusal, an error, a timeout).
    pub requests: u64,
    /// Answers that refused (`error` or `disconnect`).
    pub refusals: u64,
    /// Failed calls: backend unreachable, a non-2xx status, an answer
    /// that is not the proxy's JSON or breaks a bound (too large
    /// included). The client was refused (fail closed).
    pub errors: u64,
    /// Calls over `--proxy-timeout` (slot wait included); refused too.
    pub timeouts: u64,
    /// Time of the calls that got an answer.
    #[serde(skip)]
    pub latency: Histogram,
}

impl HookStats {
    /// Adds another worker's counters and latencies to these.
    pub fn add(&mut self, other: &HookStats) {
        self.requests += other.requests;
        self.refusals += other.refusals;
        self.errors += other.errors;
        self.timeouts += other.timeouts;
        self.latency.add(&other.latency);
    }
}

/// `/stats`: `{"connect":{...},...}` for the hooks that are on.
pub fn json(stats: &[(HookKind, HookStats)]) -> serde_json::Value {
    let map = stats
        .iter()
        .map(|(k, s)| {
            let mut v = serde_json::to_value(s).expect("counters serialize");
            v["latency_p99_seconds"] = s.latency.quantile(0.99).into();
            (k.name().to_string(), v)
        })
        .collect::<serde_json::Map<_, _>>();
    serde_json::Value::Object(map)
}

/// A counter family: its name's middle, help, and the field.
type Family = (&'static str, &'static str, fn(&HookStats) -> u64);

/// `/metrics`: counters labelled by hook, one latency histogram per hook.
pub fn render(out: &mut String, stats: &[(HookKind, HookStats)]) {
    let families: [Family; 4] = [
        ("requests", "Hook calls made.", |s| s.requests),
        (
            "refusals",
            "Hook answers that refused (error or disconnect).",
            |s| s.refusals,
        ),
        (
            "errors",
            "Hook calls that failed (unreachable, bad status or answer); the client was refused.",
            |s| s.errors,
        ),
        (
            "timeouts",
            "Hook calls over --proxy-timeout; the client was refused.",
            |s| s.timeouts,
        ),
    ];
    for (name, help, get) in families {
        let name = format!("corecast_proxy_{name}_total");
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (k, s) in stats {
            let _ = writeln!(out, "{name}{{hook=\"{}\"}} {}", k.name(), get(s));
        }
    }
    for (k, s) in stats {
        let name = format!("corecast_proxy_{}_duration_seconds", k.name());
        s.latency
            .render(out, &name, "Time of a hook call that got an answer.");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_by_hook() {
        let mut s = HookStats {
            requests: 3,
            timeouts: 1,
            ..Default::default()
        };
        s.latency.observe_ns(2_000_000);
        let all = [(HookKind::Connect, s)];
        let j = json(&all);
        assert_eq!(j["connect"]["requests"], 3);
        assert_eq!(j["connect"]["latency_p99_seconds"], 0.0025);
        let mut m = String::new();
        render(&mut m, &all);
        assert!(
            m.contains("corecast_proxy_timeouts_total{hook=\"connect\"} 1\n"),
            "{m}"
        );
        assert!(
            m.contains("corecast_proxy_connect_duration_seconds_count 1\n"),
            "{m}"
        );
    }
}
