//! What namespaces add to a publish and a subscribe: the channel's
//! namespace found and its rules checked (`namespace::Table`), once per
//! publish or subscribe, never per delivery. Without namespaces it is
//! one branch; with 8 (the channel in the last one) a short scan.

use criterion::{black_box, criterion_group, criterion_main, Criterion};

use corecast::auth::Grants;
use corecast::config::{Command, Config};
use corecast::namespace::Table;

fn table(spec: Option<&str>) -> Table {
    let args: Vec<&str> = spec.map_or(vec![], |s| vec!["--namespace", s]);
    match Config::from_args(args, |_| None).expect("valid") {
        Command::Serve(cfg) => cfg.namespaces.table,
        _ => unreachable!("serve"),
    }
}

fn checks(c: &mut Criterion) {
    let eight = "a:,b:,c:,d:,e:,f:,g:,chat:history-size=10";
    let all = Grants::all();
    for (name, t) in [("none", table(None)), ("eight", table(Some(eight)))] {
        c.bench_function(&format!("namespace_publish_check/{name}"), |b| {
            b.iter(|| black_box(&t).may_publish(&all, (black_box("chat:room-1"), 64), true))
        });
        c.bench_function(&format!("namespace_subscribe_check/{name}"), |b| {
            b.iter(|| black_box(&t).may_subscribe(&all, false, black_box("chat:room-1")))
        });
    }
}

criterion_group!(benches, checks);
criterion_main!(benches);
