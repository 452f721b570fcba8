//! The soak's verdict, sans-I/O: the samples in, one check per quantity
//! out. Cycles up to `--warmup-cycles` are shown but not judged (pools,
//! caches and Redis scripts fill during the first ones); the judged
//! cycles are split in thirds and each quantity is held to its
//! [`Rule`].

use serde::Serialize;

use super::sample::{Rule, Sample, QUANTITIES};

/// One quantity's check.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// The quantity.
    pub name: &'static str,
    /// Its rule.
    pub rule: Rule,
    /// Its reference: the level (`Level`), the first third's median
    /// (`Median`), 0 (`Zero`).
    pub reference: f64,
    /// What was compared with the limit: the highest judged value
    /// (`Zero`, `Level`), the last third's median (`Median`).
    pub observed: f64,
    /// The most `observed` may be.
    pub limit: f64,
    /// In which cycle it went over, for `Zero` and `Level`.
    pub first_over: Option<usize>,
    /// Whether it held.
    pub ok: bool,
}

/// The run's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// Cycles judged (after the warm-up).
    pub judged_cycles: usize,
    /// Judged cycles after which the server did not return to idle within
    /// the settle timeout.
    pub unsettled: Vec<usize>,
    /// One per quantity.
    pub checks: Vec<Check>,
    /// Judged cycles that lost messages or did not get the slow consumer
    /// cut, one line each.
    pub cycle_failures: Vec<String>,
    /// Every check held, every cycle settled.
    pub ok: bool,
}

impl Verdict {
    /// The checks that failed, one line each.
    pub fn failures(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| c.describe())
            .collect();
        out.extend(self.cycle_failures.iter().cloned());
        if !self.unsettled.is_empty() {
            out.push(format!(
                "the server did not return to idle after cycles {:?}",
                self.unsettled
            ));
        }
        out
    }
}

impl Check {
    /// One line: what was compared and how it came out.
    pub fn describe(&self) -> String {
        let verdict = if self.ok { "ok" } else { "GREW" };
        let what = match self.rule {
            Rule::Zero => "max after warm-up (must be 0)".to_string(),
            Rule::Level => format!("max after warm-up vs level {}", self.reference),
            Rule::Median { rel, abs } => format!(
                "last-third median vs first-third median {:.0} (+{:.0} % +{abs})",
                self.reference,
                rel * 100.0
            ),
        };
        let over = self
            .first_over
            .map_or(String::new(), |c| format!(", first over in cycle {c}"));
        format!(
            "{}: {verdict}: {what}: {:.0} (limit {:.0}){over}",
            self.name, self.observed, self.limit
        )
    }
}

/// Judges `samples` (cycle 0 is the idle server, never judged).
pub fn judge(samples: &[Sample], warmup: usize) -> Verdict {
    let judged: Vec<&Sample> = samples.iter().filter(|s| s.cycle > warmup).collect();
    let checks: Vec<Check> = QUANTITIES
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let series: Vec<Point> = judged.iter().map(|s| (s.cycle, s.values[i])).collect();
            check(q.name, q.rule, &series)
        })
        .collect();
    let unsettled: Vec<usize> = judged
        .iter()
        .filter(|s| !s.settled)
        .map(|s| s.cycle)
        .collect();
    let cycle_failures: Vec<String> = judged.iter().flat_map(|s| cycle_failures(s)).collect();
    let ok = judged.len() >= super::opts::MIN_JUDGED_CYCLES
        && unsettled.is_empty()
        && cycle_failures.is_empty()
        && checks.iter().all(|c| c.ok);
    Verdict {
        judged_cycles: judged.len(),
        unsettled,
        checks,
        cycle_failures,
        ok,
    }
}

/// What went wrong inside a cycle: acknowledged messages that did not
/// arrive, a never-reading subscriber the server did not cut.
fn cycle_failures(s: &Sample) -> Vec<String> {
    let mut out = Vec::new();
    if s.lost > 0 {
        out.push(format!(
            "cycle {}: {} acknowledged messages not delivered",
            s.cycle, s.lost
        ));
    }
    if !s.slow_cut {
        out.push(format!(
            "cycle {}: the never-reading subscriber was not cut",
            s.cycle
        ));
    }
    out
}

/// A judged value and its cycle.
type Point = (usize, u64);

fn check(name: &'static str, rule: Rule, series: &[Point]) -> Check {
    let (reference, limit) = match rule {
        Rule::Zero => (0.0, 0.0),
        Rule::Level => {
            let level = series.first().map_or(0.0, |s| s.1 as f64);
            (level, level)
        }
        Rule::Median { rel, abs } => {
            let first = median(thirds(series).0);
            (first, first * (1.0 + rel) + abs)
        }
    };
    let observed = match rule {
        Rule::Median { .. } => median(thirds(series).1),
        _ => series.iter().map(|s| s.1).max().unwrap_or(0) as f64,
    };
    let first_over = match rule {
        Rule::Median { .. } => None,
        _ => series.iter().find(|s| s.1 as f64 > limit).map(|s| s.0),
    };
    Check {
        name,
        rule,
        reference,
        observed,
        limit,
        first_over,
        ok: observed <= limit,
    }
}

/// The first and the last third (at least one sample each).
fn thirds(series: &[Point]) -> (&[Point], &[Point]) {
    let n = (series.len() / 3).max(1).min(series.len());
    (&series[..n], &series[series.len() - n..])
}

fn median(part: &[Point]) -> f64 {
    let mut v: Vec<u64> = part.iter().map(|s| s.1).collect();
    v.sort_unstable();
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2] as f64,
        n => (v[n / 2 - 1] + v[n / 2]) as f64 / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::super::sample::index_of;
    use super::*;

    fn run(f: impl Fn(usize, &mut Vec<u64>)) -> Vec<Sample> {
        (0..=12)
            .map(|cycle| {
                let mut values = vec![0u64; QUANTITIES.len()];
                values[index_of("rss_kib")] = 20_000;
                values[index_of("fds")] = 14;
                values[index_of("redis_channels")] = 1;
                f(cycle, &mut values);
                Sample {
                    cycle,
                    t_s: cycle as f64,
                    clients: 10,
                    messages: 10,
                    lost: 0,
                    recovered: true,
                    parked: 3,
                    slow_cut: true,
                    settle_ms: 0,
                    settled: true,
                    values,
                }
            })
            .collect()
    }

    #[test]
    fn a_flat_run_passes_and_warmup_growth_is_not_judged() {
        let v = judge(
            &run(|c, v| {
                // Warm-up fills pools; then RSS wanders within noise.
                v[index_of("rss_kib")] += if c <= 3 {
                    c as u64 * 3000
                } else {
                    9000 + (c as u64 % 3) * 300
                };
                v[index_of("fds")] += u64::from(c <= 3);
            }),
            3,
        );
        assert!(v.ok, "{:?}", v.failures());
        assert_eq!(v.judged_cycles, 9);
    }

    #[test]
    fn steady_growth_fails_and_says_where() {
        let v = judge(&run(|c, v| v[index_of("rss_kib")] += c as u64 * 400), 3);
        assert!(!v.ok);
        let f = v.failures();
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].starts_with("rss_kib: GREW"), "{f:?}");

        let v = judge(&run(|c, v| v[index_of("fds")] += u64::from(c >= 9)), 3);
        let fds = v.checks.iter().find(|c| c.name == "fds").unwrap();
        assert_eq!((fds.ok, fds.first_over), (false, Some(9)));

        let v = judge(
            &run(|c, v| v[index_of("connections")] = u64::from(c == 5)),
            3,
        );
        assert!(!v.ok);
        let v = judge(
            &run(|c, v| v[index_of("connections")] = u64::from(c == 2)),
            3,
        );
        assert!(v.ok, "a warm-up cycle is not judged");
    }

    #[test]
    fn unsettled_cycles_and_short_runs_fail() {
        let mut s = run(|_, _| {});
        s[7].settled = false;
        let v = judge(&s, 3);
        assert_eq!((v.ok, v.unsettled.clone()), (false, vec![7]));
        assert!(
            !judge(&run(|_, _| {})[..6], 3).ok,
            "two judged cycles are too few"
        );
        let mut s = run(|_, _| {});
        s[8].lost = 2;
        s[9].slow_cut = false;
        let f = judge(&s, 3).failures();
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[0].contains("cycle 8: 2 acknowledged"), "{f:?}");
    }
}
