//! What a tag filter costs per subscriber per publication: a 3-node
//! filter (`and` of two leaves) against a publication's tags, and a
//! 9-node one, as `Filter::matches` runs it in a fan-out.

use criterion::{black_box, criterion_group, criterion_main, Criterion};

use corecast::filter::{Filter, Tags};

fn matches(c: &mut Criterion) {
    let tags = Tags::parse(br#"{"ticker":"BTC-USD","price":"50100.5","side":"buy","venue":"x"}"#)
        .expect("tags");
    let three = Filter::parse(
        br#"{"op":"and","nodes":[{"key":"ticker","cmp":"eq","val":"BTC-USD"},{"key":"price","cmp":"gt","val":"50000"}]}"#,
    )
    .expect("filter");
    let nine = Filter::parse(
        br#"{"op":"and","nodes":[
            {"key":"ticker","cmp":"in","vals":["ETH-USD","SOL-USD","BTC-USD"]},
            {"op":"or","nodes":[{"key":"side","cmp":"eq","val":"sell"},{"key":"price","cmp":"lt","val":"60000"}]},
            {"op":"not","nodes":[{"key":"venue","cmp":"sw","val":"dark"}]},
            {"key":"size","cmp":"nex"}]}"#,
    )
    .expect("filter");
    c.bench_function("filter_matches/3_nodes", |b| {
        b.iter(|| black_box(&three).matches(black_box(&tags)))
    });
    c.bench_function("filter_matches/9_nodes", |b| {
        b.iter(|| black_box(&nine).matches(black_box(&tags)))
    });
}

criterion_group!(benches, matches);
criterion_main!(benches);
