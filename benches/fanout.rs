//! Fan-out of one message to many in-memory subscribers: the hub's hot
//! path without sockets. Reports time per delivery (criterion) and counts
//! heap allocations per delivery with a counting allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use corecast::config::Config;
use corecast::formats;
use corecast::hub::{ConnKind, Hub};
use corecast::ws::OpCode;

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call unchanged to the system allocator; the
// counter is a relaxed atomic increment with no effect on the allocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn hub_with(n: usize, kind: ConnKind, histograms: bool) -> (Hub, Vec<usize>) {
    hub_on(n, kind, histograms, "bench")
}

fn hub_on(n: usize, kind: ConnKind, histograms: bool, channel: &str) -> (Hub, Vec<usize>) {
    let cfg = Config {
        max_connections: n + 1,
        latency_histograms: histograms,
        ..Config::default()
    };
    let stats = formats::SharedCompressionStats::default();
    let mut hub = Hub::new(
        cfg.hub_limits(),
        formats::encoders(&cfg.compression, &stats),
    );
    let ids: Vec<usize> = (0..n)
        .map(|_| {
            let id = hub.register(-1).unwrap();
            hub.upgrade(id, kind);
            hub.subscribe(id, channel).unwrap();
            id
        })
        .collect();
    (hub, ids)
}

/// Publishes one message and empties every queue, as the writers would.
fn publish_and_drain(hub: &mut Hub, ids: &[usize], payload: &[u8], batch: &mut Vec<Bytes>) {
    black_box(hub.publish("bench", OpCode::Binary, payload, None));
    drain(hub, ids, batch);
}

/// Empties every queue, as the writers would.
fn drain(hub: &mut Hub, ids: &[usize], batch: &mut Vec<Bytes>) {
    for &id in ids {
        hub.take_batch(id, batch);
        let n = batch.iter().map(Bytes::len).sum();
        // The writer hands its frames back to the memory budget.
        hub.release(batch);
        hub.wrote(id, n);
    }
}

fn fanout(c: &mut Criterion) {
    let payload = [0x42u8; 128];
    let mut g = c.benchmark_group("fanout_128B");
    for n in [1_000usize, 10_000] {
        // `simple_nohist`: the same with --latency-histograms false, to
        // price the fan-out delay histogram (two clock reads per write).
        let cases = [
            ("simple", ConnKind::Ws(formats::PATH), true),
            ("simple_nohist", ConnKind::Ws(formats::PATH), false),
            ("json", ConnKind::Ws(formats::JSON), true),
        ];
        for (name, kind, histograms) in cases {
            let (mut hub, ids) = hub_with(n, kind, histograms);
            let mut batch = Vec::with_capacity(16);
            g.throughput(Throughput::Elements(n as u64));
            g.bench_function(BenchmarkId::new(name, n), |b| {
                b.iter(|| publish_and_drain(&mut hub, &ids, &payload, &mut batch))
            });
            let before = ALLOCS.load(Ordering::Relaxed);
            let rounds = 20;
            for _ in 0..rounds {
                publish_and_drain(&mut hub, &ids, &payload, &mut batch);
            }
            let allocs = ALLOCS.load(Ordering::Relaxed) - before;
            eprintln!(
                "fanout_128B/{name}/{n}: {:.4} allocations per delivery",
                allocs as f64 / (rounds * n) as f64
            );
        }
    }
    g.finish();
}

/// What a publish costs per delivery with its subscribers on one worker,
/// and on two (`--workers 2`): the owner's half fanned out in its hub, the
/// message shared once (channel name, payload and the owner's encoded
/// frames by reference count) and carried by a ring to the other
/// worker's hub, which fans out its half reusing those frames
/// (`Hub::publish_relayed`). Both hubs on this one thread: the path's own
/// instructions, not the cache-line transfer between cores (the `ring`
/// bench's `across_threads` prices that).
fn fanout_workers(c: &mut Criterion) {
    let payload = [0x42u8; 128];
    let mut g = c.benchmark_group("fanout_workers_128B");
    for n in [1_000usize, 10_000] {
        let kind = ConnKind::Ws(formats::PATH);
        let (mut one, ids) = hub_on(n, kind, false, "bench");
        let mut batch = Vec::with_capacity(16);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(BenchmarkId::new("one_worker", n), |b| {
            b.iter(|| publish_and_drain(&mut one, &ids, &payload, &mut batch))
        });
        let (mut a, ids_a) = hub_on(n / 2, kind, false, "bench");
        let (mut b_hub, ids_b) = hub_on(n / 2, kind, false, "bench");
        type Hop = (Arc<str>, Bytes, Box<corecast::hub::Frames>);
        let (mut tx, mut rx) = corecast::ring::ring::<Hop>(4096).unwrap();
        let channel: Arc<str> = Arc::from("bench");
        g.bench_function(BenchmarkId::new("two_workers", n), |bch| {
            bch.iter(|| {
                let (n, frames) = a.publish_shared("bench", OpCode::Binary, &payload, None);
                black_box(n);
                drain(&mut a, &ids_a, &mut batch);
                let msg = (
                    channel.clone(),
                    Bytes::copy_from_slice(&payload),
                    Box::new(corecast::hub::copy_frames(&frames)),
                );
                assert!(tx.push(msg).is_ok());
                rx.drain(64, |(c, p, f)| {
                    let seed = Some(*f);
                    black_box(b_hub.publish_relayed(
                        (&c, OpCode::Binary, &p, None),
                        None,
                        (seed, None),
                    ));
                });
                drain(&mut b_hub, &ids_b, &mut batch);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, fanout, fanout_workers);
criterion_main!(benches);
