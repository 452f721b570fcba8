//! The `paper` report, sans-I/O: a [`PaperReport`] in, the Markdown
//! report, its SVG charts and a short text summary out.

use std::fmt::Write as _;

use super::results::{reference, ApiPhase, Cell, PaperReport, CORECAST};
use super::svg::{Axis, Chart, Marker, Series, PALETTE};

/// Above this CPU share the generator may be what limits a cell.
const GENERATOR_BUSY: f64 = 90.0;

/// The charts: `(file name, SVG)`.
pub fn charts(r: &PaperReport) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for clients in scales(&r.cells) {
        let chart = distribution_chart(&r.cells, clients);
        out.push((
            format!("latency-distribution-{clients}.svg"),
            chart.render(),
        ));
    }
    out.push((
        "latency-vs-clients.svg".into(),
        scaling_chart(&r.cells).render(),
    ));
    out
}

/// Client counts measured, ascending, without repeats.
fn scales(cells: &[Cell]) -> Vec<usize> {
    let mut v: Vec<usize> = cells.iter().map(|c| c.clients).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// A cell's series name: its setup, with the server's name for a
/// baseline ("C1", "C1 node").
fn label(c: &Cell) -> String {
    if c.server == CORECAST {
        c.setup.to_string()
    } else {
        format!("{} {}", c.setup, c.server)
    }
}

/// Series measured (setup, and server for baselines), in run order,
/// without repeats.
fn setups(cells: &[Cell]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for c in cells {
        let l = label(c);
        if !v.contains(&l) {
            v.push(l);
        }
    }
    v
}

/// Position of a quantile on a "nines" axis: 0.9 → 1, 0.99 → 2, …; the
/// maximum sits half a step past the last quantile.
fn nines(q: f64) -> f64 {
    if q >= 1.0 {
        4.5
    } else {
        -(1.0 - q).log10()
    }
}

fn distribution_chart(cells: &[Cell], clients: usize) -> Chart {
    let here: Vec<&Cell> = cells.iter().filter(|c| c.clients == clients).collect();
    let series: Vec<Series> = here
        .iter()
        .enumerate()
        .map(|(i, c)| Series {
            name: format!("{} (mean {})", label(c), ms(c.latency.mean_us)),
            color: PALETTE[i % PALETTE.len()].into(),
            dashed: false,
            points: c
                .latency
                .percentiles
                .iter()
                .map(|(q, us)| (nines(*q), us / 1000.0))
                .collect(),
        })
        .collect();
    let ticks = [
        (0.0, "0%"),
        (1.0, "90%"),
        (2.0, "99%"),
        (3.0, "99.9%"),
        (4.0, "99.99%"),
        (4.5, "max"),
    ];
    Chart {
        title: format!("Broadcast latency by percentile, {clients} clients"),
        x: Axis {
            label: "percentile".into(),
            log: false,
            min: 0.0,
            max: 4.5,
            ticks: ticks.iter().map(|(v, l)| (*v, l.to_string())).collect(),
        },
        y: Axis::log_over(
            "latency, ms (log)",
            series.iter().flat_map(|s| s.points.iter().map(|p| p.1)),
        ),
        series,
        markers: Vec::new(),
    }
}

fn scaling_chart(cells: &[Cell]) -> Chart {
    let mut series = Vec::new();
    for (i, setup) in setups(cells).into_iter().enumerate() {
        let mine: Vec<&Cell> = cells.iter().filter(|c| label(c) == setup).collect();
        let color = PALETTE[i % PALETTE.len()];
        let line = |name: &str, dashed, f: fn(&Cell) -> f64| Series {
            name: format!("{setup} {name}"),
            color: color.into(),
            dashed,
            points: mine
                .iter()
                .map(|c| (c.clients as f64, f(c) / 1000.0))
                .collect(),
        };
        series.push(line("mean", false, |c| c.latency.mean_us));
        series.push(line("p99", true, |c| c.latency.p99_us));
    }
    let markers = vec![
        Marker {
            name: format!("Node.js C1 mean ({} conns)", reference::CONNECTIONS_HELD),
            color: PALETTE[4].into(),
            at: (reference::CONNECTIONS_HELD as f64, reference::C1_MEAN_MS),
        },
        Marker {
            name: "Node.js C2 mean".into(),
            color: PALETTE[3].into(),
            at: (reference::CONNECTIONS_HELD as f64, reference::C2_MEAN_MS),
        },
    ];
    let xs = cells
        .iter()
        .map(|c| c.clients as f64)
        .chain([reference::CONNECTIONS_HELD as f64]);
    let ys = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(markers.iter().map(|m| m.at.1));
    Chart {
        title: "Broadcast latency vs clients (corecast lines, reference squares)".into(),
        x: Axis::log_over("clients (log)", xs),
        y: Axis::log_over("latency, ms (log)", ys),
        series,
        markers,
    }
}

fn ms(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{:.2} ms", us / 1000.0)
    }
}

fn share(x: f64) -> String {
    format!("{:.3} %", x * 100.0)
}

fn opt_pct(x: Option<f64>) -> String {
    x.map_or_else(|| "–".into(), |v| format!("{v:.0} %"))
}

/// The cells at the reference's scale (or the smallest measured).
fn headline_cells(cells: &[Cell]) -> Vec<&Cell> {
    let scale = if cells.iter().any(|c| c.clients == reference::CLIENTS) {
        reference::CLIENTS
    } else {
        scales(cells).first().copied().unwrap_or(0)
    };
    cells.iter().filter(|c| c.clients == scale).collect()
}

/// Generator saturation warning for a cell, if any.
fn generator_note(c: &Cell) -> Option<String> {
    let load = c.load_core_busy_percent.unwrap_or(0.0);
    (c.generator_cpu_percent > GENERATOR_BUSY || load > GENERATOR_BUSY).then(|| {
        format!(
            "{} at {} clients: the load CPU was {load:.0} % busy (generator {:.0} %) — \
             the generator may have added delay",
            label(c),
            c.clients,
            c.generator_cpu_percent
        )
    })
}

/// The headline's columns: the reference's published figure, the
/// baseline measured here (when one ran), corecast.
struct Columns<'a> {
    ours: Vec<&'a Cell>,
    base: Vec<&'a Cell>,
}

impl Columns<'_> {
    fn row(&self, title: &str, published: &str, f: &dyn Fn(&[&Cell]) -> String) -> String {
        match self.base.is_empty() {
            true => format!("| {title} | {published} | {} |\n", f(&self.ours)),
            false => format!(
                "| {title} | {published} | {} | {} |\n",
                f(&self.base),
                f(&self.ours)
            ),
        }
    }
}

/// The headline comparison with the reference: its published figures,
/// the baseline measured here (when one ran) and corecast.
pub fn headline(r: &PaperReport) -> String {
    let all = headline_cells(&r.cells);
    let (ours, base) = all.iter().partition(|c| c.server == CORECAST);
    let cols = Columns { ours, base };
    let clients = all.first().map_or(0, |c| c.clients);
    let mut s = format!(
        "| at {clients} clients | reference (Node.js `ws` + Redis, 1 vCPU, k6 {} VUs; published) |",
        reference::CLIENTS
    );
    match cols.base.first() {
        Some(b) => s.push_str(&format!(
            " {}, measured here (1 pinned core) | corecast (1 pinned core) |\n|---|---|---|---|\n",
            b.server
        )),
        None => s.push_str(" corecast (1 pinned core) |\n|---|---|---|\n"),
    }
    let refs = format!("{} of {}", reference::CONNECTIONS_HELD, reference::CLIENTS);
    s.push_str(&cols.row("connections held", &refs, &held));
    for (setup, refv, what) in [
        ("C1", reference::C1_MEAN_MS, "in-process"),
        ("C2", reference::C2_MEAN_MS, "through Redis"),
        ("C3", f64::NAN, "through Redis, API under load"),
    ] {
        if !cols.ours.iter().any(|c| c.setup == setup) {
            continue;
        }
        let refs = match refv.is_nan() {
            true => "–".to_string(),
            false => format!("{refv:.2} ms"),
        };
        let mean = |cells: &[&Cell]| {
            let c = cells.iter().find(|c| c.setup == setup);
            c.map_or("–".into(), |c| mean_line(c))
        };
        let title = format!("mean broadcast latency, {what} ({setup})");
        s.push_str(&cols.row(&title, &refs, &mean));
    }
    let refs = format!(
        "{:.2} % (threshold not published)",
        reference::SPIKES_PERCENT
    );
    s.push_str(&cols.row("latency spikes", &refs, &spikes));
    s.push_str(&cols.row("deliveries lost", "not reported", &lost));
    if let Some(api) = &r.api {
        let (lo, hi) = reference::CACHE_FASTER_PERCENT;
        let faster = format!(
            "{:.1} % (hit {} vs origin {}, mean)",
            api.hit_faster_percent,
            ms(api.hit.latency.mean_us),
            ms(api.direct.latency.mean_us)
        );
        // The cache comparison is corecast's only.
        let f = |c: &[&Cell]| match c.first().is_some_and(|c| c.server == CORECAST) {
            true => faster.clone(),
            false => "–".into(),
        };
        s.push_str(&cols.row(
            "cached API responses faster by",
            &format!("{lo}–{hi} %"),
            &f,
        ));
    }
    s
}

fn held(cells: &[&Cell]) -> String {
    let v: Vec<String> = cells
        .iter()
        .map(|c| {
            format!(
                "{}: {} of {} ({} disconnected)",
                c.setup,
                c.clients as u64 - c.disconnected.min(c.clients as u64),
                c.clients,
                c.disconnected
            )
        })
        .collect();
    v.join("; ")
}

fn mean_line(c: &Cell) -> String {
    format!(
        "{} (p50 {}, p99 {}, max {}; server CPU {})",
        ms(c.latency.mean_us),
        ms(c.latency.p50_us),
        ms(c.latency.p99_us),
        ms(c.latency.max_us),
        opt_pct(c.server_core_busy_percent)
    )
}

fn spikes(cells: &[&Cell]) -> String {
    let worst = |f: fn(&Cell) -> f64| cells.iter().map(|c| f(c)).fold(0.0, f64::max);
    format!(
        "worst setup: > 10 ms {}, > 50 ms {}, > 100 ms {}",
        share(worst(|c| c.latency.over_10ms)),
        share(worst(|c| c.latency.over_50ms)),
        share(worst(|c| c.latency.over_100ms))
    )
}

fn lost(cells: &[&Cell]) -> String {
    let lost: u64 = cells.iter().map(|c| c.lost).sum();
    let expected: u64 = cells.iter().map(|c| c.expected).sum();
    format!("{lost} of {expected}")
}

/// The full matrix as a Markdown table.
pub fn matrix(cells: &[Cell]) -> String {
    let mut s = String::from(
        "| server | setup | clients | inst. | msg/s | deliveries/s | lost | dup | mean | p50 | p99 | p99.9 | max | > 10 ms | > 100 ms | server CPU busy | load CPU busy | generator CPU | µs/frame |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for c in cells {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.1} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} % | {:.2} |",
            c.server,
            c.setup,
            c.clients,
            c.instances,
            c.rate,
            c.delivered_per_second,
            c.lost,
            c.duplicates,
            ms(c.latency.mean_us),
            ms(c.latency.p50_us),
            ms(c.latency.p99_us),
            ms(c.latency.p999_us),
            ms(c.latency.max_us),
            share(c.latency.over_10ms),
            share(c.latency.over_100ms),
            opt_pct(c.server_core_busy_percent),
            opt_pct(c.load_core_busy_percent),
            c.generator_cpu_percent,
            c.generator_us_per_frame
        );
    }
    s
}

fn api_row(p: &ApiPhase) -> String {
    format!(
        "| {} | {:.0} | {} | {} | {} | {} | {} | {} |\n",
        p.name,
        p.requests_per_second,
        ms(p.latency.mean_us),
        ms(p.latency.p50_us),
        ms(p.latency.p99_us),
        p.requests_total,
        p.origin_requests,
        p.failed
    )
}

fn api_section(r: &PaperReport) -> String {
    let mut s = String::new();
    let head = "| path | req/s | mean | p50 | p99 | requests (with warm-up) | origin requests | failed |\n\
                |---|---:|---:|---:|---:|---:|---:|---:|\n";
    if let Some(api) = &r.api {
        let _ = writeln!(
            s,
            "Origin delay {:.0} ms; {} keep-alive connections, closed loop, {:.0} s each; \
             one corecast instance alone on its core, nothing else running.\n",
            api.origin_delay_ms, r.params.api_connections, r.params.api_duration_seconds
        );
        s.push_str(head);
        for p in [&api.direct, &api.miss, &api.hit] {
            s.push_str(&api_row(p));
        }
        let _ = writeln!(
            s,
            "\nA hit is {:.1} % faster than the origin (mean); a miss adds {:.2} ms to the origin's \
             time (the proxy hop plus the Redis write).\n",
            api.hit_faster_percent, api.miss_overhead_ms
        );
    }
    let under_load: Vec<&Cell> = r.cells.iter().filter(|c| c.api_load.is_some()).collect();
    if !under_load.is_empty() {
        let _ = writeln!(
            s,
            "During the C3 cells, beside the broadcast ({:.0} req/s paced over {} connections, one hot key):\n",
            r.params.api_rate, r.params.api_connections
        );
        s.push_str(head);
        for c in under_load {
            if let Some(p) = &c.api_load {
                let mut p = p.clone();
                p.name = format!("C3, {} clients", c.clients);
                s.push_str(&api_row(&p));
            }
        }
    }
    s
}

/// What `paper --tls` changes in the workload, said where it is described.
fn tls_note(tls: bool) -> &'static str {
    match tls {
        true => {
            " (all of it over TLS: `wss://` subscribers, publishers over `POST /publish` on \
             `https://`, and the C3 API on `https://`; the servers present a self-signed \
             ECDSA P-256 certificate unless one was given)"
        }
        false => "",
    }
}

/// The Markdown report; `charts` are the chart file names.
pub fn markdown(r: &PaperReport, charts: &[String]) -> String {
    let p = &r.params;
    let mut s = String::new();
    let _ = write!(
        s,
        "# corecast and the reference experiment\n\n\
         Generated by `corecast-bench paper` on {date}.\n\n\
         - Machine: {cpus} CPUs ({model}), Linux {kernel}, open-file limit {nofile}.\n\
         - corecast pinned to CPU {sc}; Redis on CPU {rc}; load generator and origin on CPU {lc}.\n\
         - Command: `{cmd}`\n\n\
         ## Headline\n\n",
        date = r.date,
        cpus = r.machine.cpus,
        model = r.machine.cpu_model,
        kernel = r.machine.kernel,
        nofile = r.machine.nofile,
        sc = p.server_cpu,
        rc = p.redis_cpu,
        lc = p.load_cpu,
        cmd = r.command_line,
    );
    s.push_str(&headline(r));
    let _ = write!(
        s,
        "\n## Workload\n\n\
         Every client opens a WebSocket to `/ws/paper` and receives every message; {pubs} of \
         them also publish{tls}, at a total of deliveries ÷ clients messages/s, so every cell asks \
         the server for the same {dps:.0} deliveries/s of {size}-byte messages (the reference \
         did not publish its message rate). C1 runs one instance; C2 and C3 run {inst} \
         instances sharing one Redis, clients spread over them, so most deliveries cross \
         instances through Redis pub/sub. C3 adds an HTTP API (`/api/...`, cached in Redis in \
         front of an origin that takes {delay:.0} ms) under load during the broadcast. Each cell \
         has fresh servers, a {warm:.0} s warm-up and a {dur:.0} s measured window.\n\n\
         Latency is from the publisher's send time to the kernel's receive timestamp on the \
         subscriber's socket (`SO_TIMESTAMPING`), so the generator's own parsing is not \
         counted; send-to-parse figures are in `paper.json` (`latency_parse`).{fallback}\n\n\
         ## Matrix\n\n",
        pubs = p.publishers,
        tls = tls_note(p.tls),
        dps = p.deliveries_per_second,
        size = p.size,
        inst = p.instances,
        delay = p.origin_delay_ms,
        warm = p.warmup_seconds,
        dur = p.duration_seconds,
        fallback = parse_time_note(&r.cells),
    );
    s.push_str(&matrix(&r.cells));
    s.push_str(&generator_notes(&r.cells));
    s.push_str("\n## HTTP API and the cache (C3)\n\n");
    let api = api_section(r);
    s.push_str(if api.is_empty() {
        "C3 was not run.\n"
    } else {
        &api
    });
    s.push_str("\n## Charts\n\n");
    for c in charts {
        let _ = writeln!(s, "![{c}]({c})\n");
    }
    s.push_str(
        "## What limits these figures\n\n\
         - Loopback TCP: the server's CPU also pays for the receiving side's kernel work \
         (softirq), about two thirds of a delivery's cost; on a real network that work lands \
         on the clients' machines. \"server CPU busy\" is the whole core: corecast, Redis (when \
         on the same CPU) and that kernel work.\n\
         - A fan-out of one message to N clients costs N socket writes; the last client of a \
         large fan-out waits for the writes before it, so latency grows with N at a fixed \
         delivery rate, and messages that share a write (bursts) are cheaper.\n\
         - The reference's published figures come from its own machine and k6 scripts; they \
         are quoted. `--baseline node` runs the same architecture (Node.js `ws` + `ioredis`, \
         `bench/reference-node`) here, cell by cell, beside corecast.\n",
    );
    s
}

/// Whether the load generator was ever the limit.
fn generator_notes(cells: &[Cell]) -> String {
    let notes: Vec<String> = cells.iter().filter_map(generator_note).collect();
    if notes.is_empty() {
        return "\nThe generator's CPU stayed below 90 % in every cell: it was not the limit.\n"
            .into();
    }
    let mut s = String::from("\nGenerator warnings:\n\n");
    for n in notes {
        let _ = writeln!(s, "- {n}");
    }
    s
}

/// Names the cells whose latency is parse time (no kernel timestamps).
fn parse_time_note(cells: &[Cell]) -> String {
    let parse: Vec<String> = cells
        .iter()
        .filter(|c| c.latency_source != "kernel")
        .map(|c| format!("{} at {}", label(c), c.clients))
        .collect();
    if parse.is_empty() {
        String::new()
    } else {
        format!(
            " No kernel timestamps were available for {}: their figures are send-to-parse \
             times, which include the generator's own delay.",
            parse.join(", ")
        )
    }
}

/// The plain-text summary printed at the end of a run.
pub fn text_summary(r: &PaperReport) -> String {
    let mut s = format!(
        "paper: report in {}/report.md ({} cells)\n\n",
        r.out_dir,
        r.cells.len()
    );
    s.push_str(&headline(r));
    s.push('\n');
    s.push_str(&matrix(&r.cells));
    s
}

#[cfg(test)]
mod tests {
    use super::super::results::tests::broadcast_json;
    use super::super::results::{cell_from_json, Machine, Params};
    use super::*;

    fn report() -> PaperReport {
        let mut cells = Vec::new();
        for (setup, mean) in [("C1", 900.0), ("C2", 1100.0), ("C3", 1300.0)] {
            for clients in [500u64, 5000] {
                let v = broadcast_json(clients, mean * clients as f64 / 500.0, true);
                cells.push(cell_from_json(setup, 2, &v, 0, 1).unwrap());
            }
        }
        cells[5].load_core_busy_percent = Some(97.0);
        PaperReport {
            command: "paper",
            date: "2026-11-30T00:00:00.000Z".into(),
            command_line: "corecast-bench paper".into(),
            machine: Machine {
                cpus: 2,
                cpu_model: "test".into(),
                kernel: "6.1".into(),
                nofile: 20_000,
            },
            params: Params {
                server_cpu: 0,
                redis_cpu: 0,
                load_cpu: 1,
                instances: 2,
                deliveries_per_second: 100_000.0,
                publishers: 2,
                size: 128,
                duration_seconds: 10.0,
                warmup_seconds: 3.0,
                origin_delay_ms: 20.0,
                api_rate: 500.0,
                api_connections: 8,
                api_duration_seconds: 5.0,
                tls: false,
            },
            api: None,
            cells,
            files: Vec::new(),
            out_dir: "out".into(),
        }
    }

    #[test]
    fn the_report_puts_corecast_beside_the_reference() {
        let r = report();
        let md = markdown(&r, &["latency-vs-clients.svg".into()]);
        assert!(md.contains("| connections held | 335 of 500 |"), "{md}");
        assert!(md.contains("| mean broadcast latency, in-process (C1) | 23.78 ms | 0.90 ms"));
        assert!(md.contains("| mean broadcast latency, through Redis (C2) | 42.05 ms | 1.10 ms"));
        assert!(md.contains("1.65 %"));
        assert!(
            md.contains("| deliveries lost | not reported | 0 of 15000 |"),
            "{md}"
        );
        // One matrix row per cell, and the generator warning for the busy one.
        assert_eq!(md.matches("\n| corecast | C2 | ").count(), 2);
        assert!(md.contains("C3 at 5000 clients: the load CPU was 97 % busy"));
        assert!(md.contains("![latency-vs-clients.svg](latency-vs-clients.svg)"));
        assert!(md.contains("C3 was not run."));
        assert!(!md.contains("No kernel timestamps"));
        let mut r = report();
        r.cells[0].latency_source = "parse".into();
        let md = markdown(&r, &[]);
        assert!(md.contains("No kernel timestamps were available for C1 at 500"));
    }

    #[test]
    fn a_baseline_gets_its_own_column_rows_and_series() {
        let mut r = report();
        let mut node: Vec<Cell> = r.cells.clone();
        for c in &mut node {
            c.server = "node".into();
            c.latency.mean_us *= 10.0;
        }
        r.cells.extend(node);
        let md = markdown(&r, &[]);
        assert!(
            md.contains("| reference (Node.js `ws` + Redis, 1 vCPU, k6 500 VUs; published) | node, measured here (1 pinned core) | corecast (1 pinned core) |"),
            "{md}"
        );
        assert!(
            md.contains("| mean broadcast latency, in-process (C1) | 23.78 ms | 9.00 ms"),
            "{md}"
        );
        assert_eq!(md.matches("\n| node | C2 | ").count(), 2);
        let chart = &charts(&r)[2].1;
        assert!(
            chart.contains("C1 node"),
            "the scaling chart has the baseline's series"
        );
    }

    #[test]
    fn one_distribution_chart_per_scale_and_one_scaling_chart() {
        let files: Vec<String> = charts(&report()).into_iter().map(|(f, _)| f).collect();
        assert_eq!(
            files,
            [
                "latency-distribution-500.svg",
                "latency-distribution-5000.svg",
                "latency-vs-clients.svg"
            ]
        );
        let (_, svg) = charts(&report()).pop().unwrap();
        assert!(svg.contains("Node.js C1 mean (335 conns)"));
        assert_eq!(
            svg.matches("<polyline").count(),
            6,
            "mean and p99 per setup"
        );
        assert!((nines(0.99) - 2.0).abs() < 1e-9);
    }
}
