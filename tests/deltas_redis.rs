//! Deltas in Redis mode, with a real redis-server and two instances: a
//! publication asking for a delta (`"delta":true` travels in the
//! message's meta) goes as a delta to the delta subscribers of both
//! instances, each instance making it from what its own subscribers were
//! given; Redis's history holds full payloads, and a resume from it
//! replays them full, the next live message full too.

mod common;
mod redis_support;

use common::*;
use corecast::delta;
use futures_util::SinkExt;
use redis_support::*;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

async fn call(ws: &mut Ws, request: Value) -> Value {
    ws.send(Message::text(request.to_string()))
        .await
        .expect("send");
    next_json(ws).await
}

fn doc(n: u32) -> String {
    let rows: Vec<Value> = (0..40)
        .map(|i| json!({"sym": format!("S{i:02}"), "px": 100 + i + (n * (i == 7) as u32)}))
        .collect();
    json!({"n": n, "rows": rows}).to_string()
}

/// Rebuilds the next message of `ws` from `base` when it is a delta;
/// (was a delta, the document).
async fn next_doc(ws: &mut Ws, base: &mut Option<String>) -> (bool, String) {
    let m = next_json(ws).await;
    let data = m["data"].as_str().expect("text").to_string();
    let is_delta = m.get("delta") == Some(&Value::Bool(true));
    let full = match is_delta {
        true => {
            let b = base.as_deref().expect("a delta after a full message");
            String::from_utf8(delta::apply(b.as_bytes(), data.as_bytes(), 1 << 20).unwrap())
                .unwrap()
        }
        false => data,
    };
    *base = Some(full.clone());
    (is_delta, full)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_instance_sends_deltas_of_what_its_subscribers_have() {
    let redis = RedisServer::start(&[]).await;
    let tweak = |c: &mut corecast::config::Config| {
        c.history.size = 100;
        c.namespaces
            .specs
            .add_compact("doc:delta=fossil", "test")
            .unwrap();
    };
    let a = instance(redis.url("", ""), tweak);
    let b = instance(redis.url("", ""), tweak);
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let mut subs = Vec::new();
    for addr in [a.addr, b.addr] {
        let mut ws = ws_connect(addr, "/ws").await;
        let r = call(
            &mut ws,
            json!({"op":"subscribe","channel":"doc:q","delta":"fossil","id":1}),
        )
        .await;
        assert_eq!(r["delta"], true, "{r}");
        subs.push(ws);
    }
    let mut publisher = ws_connect(a.addr, "/ws").await;
    for n in 0..4 {
        let p = json!({"op":"publish","channel":"doc:q","data":doc(n),"delta":true,"id":n});
        assert_eq!(call(&mut publisher, p).await["type"], "published");
    }
    let r = post(b.addr, "/publish/doc:q?delta=1", doc(4).as_bytes()).await;
    assert_eq!(r.status, 200, "{r:?}");
    for ws in &mut subs {
        let mut base = None;
        for n in 0..5 {
            let (is_delta, full) = next_doc(ws, &mut base).await;
            assert_eq!((is_delta, full), (n > 0, doc(n)), "message {n}");
        }
    }
    // Redis's history holds full payloads.
    let h = get(b.addr, "/history/doc:q?since=0").await.json();
    assert_eq!(h["messages"][2]["data"], doc(2));
    // A resume from Redis (on B) replays full payloads, then the next
    // live message comes full as well.
    let epoch = h["epoch"].as_str().unwrap().to_string();
    let mut again = ws_connect(b.addr, "/ws").await;
    let since = json!({"epoch": epoch, "offset": 3});
    let r = call(
        &mut again,
        json!({"op":"subscribe","channel":"doc:q","since":since,"delta":"fossil"}),
    )
    .await;
    assert_eq!(
        (&r["recovered"], &r["delta"]),
        (&json!(true), &json!(true)),
        "{r}"
    );
    let mut base = None;
    assert_eq!(next_doc(&mut again, &mut base).await, (false, doc(3)));
    assert_eq!(next_doc(&mut again, &mut base).await, (false, doc(4)));
    let p = json!({"op":"publish","channel":"doc:q","data":doc(5),"delta":true,"id":9});
    assert_eq!(call(&mut publisher, p).await["type"], "published");
    assert_eq!(
        next_doc(&mut again, &mut base).await,
        (false, doc(5)),
        "full after a resume"
    );
    let p = json!({"op":"publish","channel":"doc:q","data":doc(6),"delta":true,"id":10});
    call(&mut publisher, p).await;
    assert_eq!(next_doc(&mut again, &mut base).await, (true, doc(6)));
}
