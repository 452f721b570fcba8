//! The cross-worker ring's hop (`corecast::ring`): what one value costs
//! pushed and drained on one thread (the ring's own work, no cache-line
//! transfer), per value and per batch of 64, and across two threads
//! (each value crosses cores: the cost the transport pays per message,
//! batches amortising the index updates).

use std::thread;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};

use corecast::ring::ring;

fn one_thread(c: &mut Criterion) {
    let (mut p, mut q) = ring::<u64>(1024).expect("ring");
    c.bench_function("ring_hop/one_value", |b| {
        b.iter(|| {
            let _ = p.push(black_box(7));
            q.drain(1, |v| {
                black_box(v);
            })
        })
    });
    let mut g = c.benchmark_group("ring_hop");
    g.throughput(Throughput::Elements(64));
    g.bench_function("batch_of_64", |b| {
        b.iter(|| {
            for i in 0..64u64 {
                let _ = p.push(black_box(i));
            }
            q.drain(64, |v| {
                black_box(v);
            })
        })
    });
    g.finish();
}

/// `n` values from this thread to a consumer thread that drains in
/// batches of 64 (spinning: a worker's loop polls its rings).
fn across(n: u64) {
    let (mut p, mut q) = ring::<u64>(1024).expect("ring");
    let consumer = thread::spawn(move || {
        let mut got = 0;
        while got < n {
            got += q.drain(64, |v| {
                black_box(v);
            }) as u64;
        }
    });
    for i in 0..n {
        let mut v = i;
        while let Err(back) = p.push(v) {
            v = back;
            std::hint::spin_loop();
        }
    }
    consumer.join().expect("consumer");
}

fn two_threads(c: &mut Criterion) {
    const N: u64 = 100_000;
    let mut g = c.benchmark_group("ring_cross_thread");
    g.throughput(Throughput::Elements(N));
    g.sample_size(20);
    g.bench_function("100k_values", |b| b.iter(|| across(N)));
    g.finish();
}

criterion_group!(benches, one_thread, two_threads);
criterion_main!(benches);
