//! The Pusher protocol in Redis mode: two instances of the same app share
//! its channels — API events, client events (never echoed) and
//! subscriptions acknowledged once Redis delivers the channel.

mod common;
mod redis_support;

use common::pusher::*;
use common::*;
use redis_support::*;
use serde_json::json;

const APP: (&str, &str, &str) = ("7", "k7", "s7");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pusher_events_cross_instances_through_redis() {
    let redis = RedisServer::start(&[]).await;
    let tweak = |c: &mut corecast::Config| c.pusher.add_apps("7:k7:s7:client-events").unwrap();
    let one = instance(redis.url("", ""), tweak);
    let two = instance(redis.url("", ""), tweak);
    wait_readyz(one.addr, 200).await;
    wait_readyz(two.addr, 200).await;
    let (mut a, id_a) = connect(one.addr, "k7").await;
    let (mut b, id_b) = connect(two.addr, "k7").await;
    for (ws, id) in [(&mut a, &id_a), (&mut b, &id_b)] {
        let signed = auth("k7", "s7", &format!("{id}:private-room"));
        let r = subscribe(ws, "private-room", Some(signed), None).await;
        assert_eq!(r["event"], "pusher_internal:subscription_succeeded");
    }
    // Acknowledged subscriptions: an event published right away arrives.
    let body = json!({"name":"news","data":"hello","channel":"private-room"}).to_string();
    let req = api_request(APP, "POST", ("/apps/7/events", ""), body.as_bytes(), now());
    assert_eq!(http_raw(one.addr, &req).await.status, 200);
    for ws in [&mut a, &mut b] {
        let e = next_json(ws).await;
        assert_eq!(
            (e["event"].clone(), e["data"].clone()),
            (json!("news"), json!("hello"))
        );
    }
    // A client event on instance one reaches instance two, not its sender.
    let ev = json!({"event":"client-typing","channel":"private-room","data":{"by":"a"}});
    send(&mut a, ev).await;
    assert_eq!(next_json(&mut b).await["event"], "client-typing");
    let ev = json!({"event":"client-reply","channel":"private-room","data":{}});
    send(&mut b, ev).await;
    assert_eq!(
        next_json(&mut a).await["event"],
        "client-reply",
        "a got its own event"
    );
}
