//! The soak's report, sans-I/O: samples and verdict in, the Markdown
//! table (one row per cycle), an SVG chart of four panels and a text
//! summary out.

use std::fmt::Write as _;

use serde::Serialize;

use super::sample::{index_of, Sample, QUANTITIES};
use super::verdict::Verdict;
use crate::paper::svg::{Axis, Chart, Series, PALETTE};

/// Everything a run found.
#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    /// `"soak"`.
    pub command: &'static str,
    /// When it ran (UTC).
    pub date: String,
    /// The server's flags.
    pub server_args: Vec<String>,
    /// Cycles not judged.
    pub warmup_cycles: usize,
    /// Seconds of churn.
    pub seconds: f64,
    /// One per cycle, cycle 0 the idle server.
    pub samples: Vec<Sample>,
    /// The checks.
    pub verdict: Verdict,
    /// Files written to the report directory.
    pub files: Vec<String>,
    /// The report directory.
    pub out_dir: String,
}

/// The Markdown report.
pub fn markdown(r: &SoakReport) -> String {
    let mut s = String::new();
    let result = if r.verdict.ok { "PASS" } else { "FAIL" };
    let _ = writeln!(
        s,
        "# corecast soak: {result}\n\n{} · {} cycles in {:.0} s · warm-up {} cycles (not judged)\n\n\
         Server: `corecast {}`\n\n![soak chart](soak.svg)\n",
        r.date,
        r.samples.len().saturating_sub(1),
        r.seconds,
        r.warmup_cycles,
        r.server_args.join(" ")
    );
    s.push_str("## Checks\n\n");
    for c in &r.verdict.checks {
        let _ = writeln!(s, "- {}", c.describe());
    }
    for f in r
        .verdict
        .failures()
        .iter()
        .filter(|f| f.starts_with("the server"))
    {
        let _ = writeln!(s, "- {f}");
    }
    s.push_str(
        "\n## Samples\n\nAfter each cycle, with its clients gone and the server back at rest \
         (`settle ms`); cycle 0 is the idle server. `lost`: messages acknowledged subscribers \
         did not get; `rec`: the JSON resume with `since` was recovered; `parked`: most \
         connections parked during the cycle; `cut`: the never-reading subscriber was cut.\n\n",
    );
    let rows = shown_rows(&r.samples);
    if rows.len() < r.samples.len() {
        let _ = writeln!(
            s,
            "{} of {} cycles: evenly spaced, plus every cycle that lost a message, \
             did not settle or was not cut; all of them are in `soak.json`.\n",
            rows.len(),
            r.samples.len()
        );
    }
    table(&mut s, &rows);
    s
}

/// Most rows the Markdown table holds (a 30-minute run has ~4,000 cycles).
const MAX_ROWS: usize = 240;
/// Most points a chart series holds (min and max of each bucket).
const MAX_POINTS: usize = 600;

/// The rows of the table: every cycle of a short run; of a long one,
/// evenly spaced cycles and every cycle that went wrong.
fn shown_rows(samples: &[Sample]) -> Vec<&Sample> {
    let step = samples.len().div_ceil(MAX_ROWS).max(1);
    let last = samples.len().saturating_sub(1);
    samples
        .iter()
        .enumerate()
        .filter(|(i, x)| {
            i % step == 0 || *i == last || x.lost > 0 || !x.settled || !x.slow_cut && x.cycle > 0
        })
        .map(|(_, x)| x)
        .collect()
}

/// At most [`MAX_POINTS`] points: the lowest and highest of each run of
/// neighbours, in x order, so a spike survives the thinning.
fn thin(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    if points.len() <= MAX_POINTS {
        return points;
    }
    let bucket = points.len().div_ceil(MAX_POINTS / 2);
    let mut out = Vec::with_capacity(MAX_POINTS + 2);
    for chunk in points.chunks(bucket) {
        let lo = chunk.iter().min_by(|a, b| a.1.total_cmp(&b.1));
        let hi = chunk.iter().max_by(|a, b| a.1.total_cmp(&b.1));
        if let (Some(&lo), Some(&hi)) = (lo, hi) {
            let (a, b) = if lo.0 <= hi.0 { (lo, hi) } else { (hi, lo) };
            out.push(a);
            if b != a {
                out.push(b);
            }
        }
    }
    out
}

fn table(s: &mut String, samples: &[&Sample]) {
    s.push_str("| cycle | t s | clients | msgs | lost | rec | parked | cut | settle ms |");
    for q in &QUANTITIES {
        let _ = write!(s, " {} |", q.header);
    }
    s.push_str("\n|");
    for _ in 0..9 + QUANTITIES.len() {
        s.push_str("---:|");
    }
    s.push('\n');
    for x in samples {
        let yn = |b: bool| if b { "y" } else { "n" };
        let settle = match x.settled {
            true => x.settle_ms.to_string(),
            false => format!("{} (timeout)", x.settle_ms),
        };
        let _ = write!(
            s,
            "| {} | {:.0} | {} | {} | {} | {} | {} | {} | {settle} |",
            x.cycle,
            x.t_s,
            x.clients,
            x.messages,
            x.lost,
            yn(x.recovered),
            x.parked,
            yn(x.slow_cut),
        );
        for v in &x.values {
            let _ = write!(s, " {v} |");
        }
        s.push('\n');
    }
}

/// The chart: four panels (memory; descriptors and Redis state; the
/// gauges that must be 0; state bounded by a TTL), one point per cycle,
/// a dashed line where the warm-up ends.
pub fn chart(samples: &[Sample], warmup: usize) -> String {
    let kib_to_mib = 1.0 / 1024.0;
    let b_to_mib = 1.0 / (1024.0 * 1024.0);
    let panels = [
        panel(
            "Memory (MiB)",
            samples,
            &[
                ("rss_kib", kib_to_mib, "server RSS"),
                ("redis_memory", b_to_mib, "Redis used_memory"),
            ],
        ),
        panel(
            "Descriptors and Redis state",
            samples,
            &[
                ("fds", 1.0, "server fds"),
                ("redis_keys_without_ttl", 1.0, "keys without TTL"),
                ("redis_channels", 1.0, "pub/sub channels"),
                ("redis_patterns", 1.0, "patterns"),
                ("redis_clients", 1.0, "Redis clients"),
            ],
        ),
        panel(
            "Live-work gauges at rest (0)",
            samples,
            &[
                ("connections", 1.0, "connections"),
                ("parked_connections", 1.0, "parked"),
                ("subscriptions", 1.0, "subscriptions"),
                ("presence_members", 1.0, "presence members"),
                ("outbound_bytes", 1.0, "outbound bytes"),
                ("inbound_bytes", 1.0, "inbound bytes"),
            ],
        ),
        panel(
            "Bounded by TTL",
            samples,
            &[
                ("redis_keys", 1.0, "Redis keys"),
                ("history_messages", 1.0, "history messages"),
            ],
        ),
    ];
    let (w, h) = (760.0, 440.0);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\">\n",
        2.0 * w,
        2.0 * h,
        2.0 * w,
        2.0 * h
    );
    for (i, p) in panels.into_iter().enumerate() {
        let p = with_warmup_line(p, warmup);
        let (x, y) = ((i % 2) as f64 * w, (i / 2) as f64 * h);
        let _ = writeln!(
            s,
            "<g transform=\"translate({x} {y})\">\n{}</g>",
            p.render()
        );
    }
    s.push_str("</svg>\n");
    s
}

fn panel(title: &str, samples: &[Sample], what: &[(&str, f64, &str)]) -> Chart {
    let series: Vec<Series> = what
        .iter()
        .enumerate()
        .map(|(i, (name, scale, label))| {
            let at = index_of(name);
            Series {
                name: label.to_string(),
                color: PALETTE[i % PALETTE.len()].into(),
                dashed: false,
                points: thin(
                    samples
                        .iter()
                        .map(|s| (s.cycle as f64, s.values[at] as f64 * scale))
                        .collect(),
                ),
            }
        })
        .collect();
    let top = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let cycles = samples.last().map_or(1, |s| s.cycle.max(1)) as f64;
    Chart {
        title: title.into(),
        x: Axis {
            max: cycles,
            ..linear("cycle", cycles)
        },
        y: linear("", top),
        series,
        markers: Vec::new(),
    }
}

/// A vertical dashed line at the last warm-up cycle, over the y range.
fn with_warmup_line(mut chart: Chart, warmup: usize) -> Chart {
    let x = warmup as f64;
    chart.series.push(Series {
        name: "end of warm-up".into(),
        color: "#999999".into(),
        dashed: true,
        points: vec![(x, chart.y.min), (x, chart.y.max)],
    });
    chart
}

/// A linear axis from 0 to a round number at or above `top` (a multiple
/// of a fifth of its power of ten).
fn linear(label: &str, top: f64) -> Axis {
    let top = top.max(1.0) * 1.05;
    let step = 10f64.powf(top.log10().floor()) / 5.0;
    Axis {
        label: label.into(),
        log: false,
        min: 0.0,
        max: (top / step).ceil() * step,
        ticks: Vec::new(),
    }
}

/// The text summary: the verdict, one line per check.
pub fn text(r: &SoakReport) -> String {
    let mut s = format!(
        "soak: {} after {} cycles ({:.0} s), {} judged; report in {}\n",
        if r.verdict.ok { "PASS" } else { "FAIL" },
        r.samples.len().saturating_sub(1),
        r.seconds,
        r.verdict.judged_cycles,
        r.out_dir
    );
    for c in &r.verdict.checks {
        let _ = writeln!(s, "  {}", c.describe());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_series_are_thinned_keeping_their_spikes() {
        let short: Vec<(f64, f64)> = (0..MAX_POINTS).map(|i| (i as f64, 1.0)).collect();
        assert_eq!(thin(short.clone()), short);
        let mut long: Vec<(f64, f64)> = (0..4_000).map(|i| (i as f64, 5.0)).collect();
        long[1234].1 = 99.0;
        long[3000].1 = -1.0;
        let t = thin(long);
        assert!(t.len() <= MAX_POINTS, "{}", t.len());
        assert!(t.windows(2).all(|w| w[0].0 < w[1].0), "in x order");
        assert!(t.contains(&(1234.0, 99.0)) && t.contains(&(3000.0, -1.0)));
    }
}
