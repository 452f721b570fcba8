//! Tags and filters in Redis mode, with a real redis-server and two
//! instances: tags published on one instance reach the filtered
//! subscribers of the other (the tagged envelope), and a filtered resume
//! from Redis's history replays only what passes, tags included.

mod common;
mod redis_support;

use common::*;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_cross_instances_and_filtered_resumes_read_redis_history() {
    let redis = RedisServer::start(&[]).await;
    let a = instance(redis.url("", ""), |c| c.history.size = 100);
    let b = instance(redis.url("", ""), |c| c.history.size = 100);
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let mut sub = ws_connect(b.addr, "/ws").await;
    let f = json!({"key":"sym","cmp":"in","vals":["BTC","ETH"]});
    let r = call(
        &mut sub,
        json!({"op":"subscribe","channel":"px","filter":f,"id":1}),
    )
    .await;
    assert_eq!(r["type"], "subscribed", "{r}");
    let epoch = r["epoch"].as_str().unwrap().to_string();
    let mut all = ws_connect(b.addr, "/ws").await;
    call(&mut all, json!({"op":"subscribe","channel":"px"})).await;

    let mut publisher = ws_connect(a.addr, "/ws").await;
    for (i, sym) in ["DOGE", "BTC", "XRP", "ETH"].iter().enumerate() {
        let p = json!({"op":"publish","channel":"px","data":format!("m{}", i + 1),
                       "tags":{"sym":sym},"id":i});
        let r = call(&mut publisher, p).await;
        assert_eq!(r["type"], "published", "{r}");
    }
    let r = post(a.addr, "/publish/px?tag.sym=BTC&tag.side=buy", b"m5").await;
    assert_eq!(r.status, 200, "{r:?}");
    let mut seen = Vec::new();
    for _ in 0..3 {
        let m = next_json(&mut sub).await;
        seen.push((
            m["offset"].as_u64().unwrap(),
            m["tags"]["sym"].as_str().unwrap().to_string(),
        ));
    }
    assert_eq!(
        seen,
        [(2, "BTC".into()), (4, "ETH".into()), (5, "BTC".into())]
    );
    for i in 1..=5 {
        assert_eq!(next_json(&mut all).await["offset"], i);
    }

    // A resume on instance A (reading Redis's stream) with the filter:
    // only what passes, with its tags.
    let mut again = ws_connect(a.addr, "/ws").await;
    let since = json!({"epoch": epoch, "offset": 0});
    let r = call(
        &mut again,
        json!({"op":"subscribe","channel":"px","since":since,"filter":{"key":"side","cmp":"eq","val":"buy"}}),
    )
    .await;
    assert_eq!(r["recovered"], true, "{r}");
    let m = next_json(&mut again).await;
    assert_eq!(
        m,
        json!({"type":"message","channel":"px","offset":5,"tags":{"side":"buy","sym":"BTC"},"data":"m5"})
    );
    // GET /history from Redis shows the tags.
    let h = get(b.addr, "/history/px").await.json();
    assert_eq!(h["messages"][0]["tags"], json!({"sym":"DOGE"}));
}
