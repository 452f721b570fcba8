//! What a Fossil delta costs the server: made once per publication for
//! every delta subscriber (`corecast::delta::create`), a 3.4 KB JSON
//! scoreboard where three of 40 rows changed (about 2 % of its bytes);
//! and, for scale, applying it (the client's side).

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};

use corecast::delta;

fn board(n: u64) -> Vec<u8> {
    let rows: String = (0..40u64)
        .map(|i| {
            let bump = if i % 13 == n % 13 { n } else { 0 };
            format!(
                r#"{{"team":"team-{i:02}","city":"Somewhere","score":{},"played":{},"updated":{}}},"#,
                1000 + i * 7 + bump,
                30 + bump,
                1_700_000_000 + bump * 37
            )
        })
        .collect();
    format!(
        r#"{{"round":{n},"league":"corecast","rows":[{}]}}"#,
        rows.trim_end_matches(',')
    )
    .into_bytes()
}

fn deltas(c: &mut Criterion) {
    let (prev, next) = (board(1), board(2));
    let mut out = Vec::with_capacity(4096);
    delta::create(&prev, &next, &mut out);
    let made = out.clone();
    let mut g = c.benchmark_group("delta");
    g.throughput(Throughput::Bytes(next.len() as u64));
    g.bench_function("create/3.4KB_2pct", |b| {
        b.iter(|| {
            out.clear();
            delta::create(black_box(&prev), black_box(&next), &mut out);
        })
    });
    g.bench_function("apply/3.4KB_2pct", |b| {
        b.iter(|| delta::apply(black_box(&prev), black_box(&made), 1 << 20).unwrap())
    });
    g.finish();
}

criterion_group!(benches, deltas);
criterion_main!(benches);
