//! The JSON control protocol of `GET /ws`.

mod common;

use common::*;
use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

async fn send(ws: &mut Ws, text: &str) {
    ws.send(Message::text(text)).await.expect("send");
}

/// Sends `request` and returns the reply.
async fn call(ws: &mut Ws, request: Value) -> Value {
    send(ws, &request.to_string()).await;
    next_json(ws).await
}

/// Subscribe to two channels, get acks with ids, receive both channels'
/// messages named by channel, publish with an ack, unsubscribe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_publish_unsubscribe_round_trip() {
    let srv = TestServer::start(|_| {});
    let addr = srv.addr;
    let mut ws = ws_connect(addr, "/ws").await;
    let mut simple = ws_connect(addr, "/ws/news").await;

    let r = call(&mut ws, json!({"op":"subscribe","channel":"news","id":1})).await;
    assert_eq!(r, json!({"type":"subscribed","channel":"news","id":1}));
    // Ids are echoed verbatim, whatever JSON scalar they are.
    let r = call(
        &mut ws,
        json!({"op":"subscribe","channel":"sport","id":"s-2"}),
    )
    .await;
    assert_eq!(r, json!({"type":"subscribed","channel":"sport","id":"s-2"}));
    // Subscribing twice is acknowledged and changes nothing.
    let r = call(&mut ws, json!({"op":"subscribe","channel":"news"})).await;
    assert_eq!(r, json!({"type":"subscribed","channel":"news"}));
    wait_stat(addr, "subscriptions", |n| n == 3).await;

    let mut http = HttpConn::connect(addr).await;
    assert_eq!(http.publish("news", "n1").await, 2);
    assert_eq!(http.publish("sport", "s1").await, 1);
    assert_eq!(http.publish("news", "n2 \"quoted\"\n").await, 2);
    let msg = |c: &str, d: &str| json!({"type":"message","channel":c,"data":d});
    assert_eq!(next_json(&mut ws).await, msg("news", "n1"));
    assert_eq!(next_json(&mut ws).await, msg("sport", "s1"));
    assert_eq!(next_json(&mut ws).await, msg("news", "n2 \"quoted\"\n"));
    assert_eq!(next_text(&mut simple).await, "n1");
    assert_eq!(next_text(&mut simple).await, "n2 \"quoted\"\n");

    // Publish from JSON mode: delivered raw to simple subscribers, as an
    // envelope to JSON ones (itself included), then acknowledged with the
    // number of subscribers it reached.
    send(
        &mut ws,
        r#"{"op":"publish","channel":"news","data":"from json","id":3}"#,
    )
    .await;
    assert_eq!(next_json(&mut ws).await, msg("news", "from json"));
    assert_eq!(
        next_json(&mut ws).await,
        json!({"type":"published","channel":"news","subscribers":2,"id":3})
    );
    assert_eq!(next_text(&mut simple).await, "from json");
    // Without an id there is no ack: the next thing is the next message.
    send(
        &mut ws,
        r#"{"op":"publish","channel":"sport","data":"quiet"}"#,
    )
    .await;
    assert_eq!(next_json(&mut ws).await, msg("sport", "quiet"));
    // Binary payloads travel as base64 and arrive as binary frames.
    send(
        &mut ws,
        r#"{"op":"publish","channel":"news","data_base64":"AAEC/w==","id":4}"#,
    )
    .await;
    let v = next_json(&mut ws).await;
    assert_eq!(
        v,
        json!({"type":"message","channel":"news","data_base64":"AAEC/w=="})
    );
    assert_eq!(next_json(&mut ws).await["type"], "published");
    assert_eq!(
        next_msg(&mut simple).await,
        Message::binary(vec![0, 1, 2, 255])
    );
    // Publishing to a channel nobody is on reaches no one.
    let r = call(
        &mut ws,
        json!({"op":"publish","channel":"empty","data":"x","id":5}),
    )
    .await;
    assert_eq!(
        r,
        json!({"type":"published","channel":"empty","subscribers":0,"id":5})
    );

    // Unsubscribe stops delivery: a message to `news` followed by one to
    // `sport` arrives as just the `sport` one.
    let r = call(&mut ws, json!({"op":"unsubscribe","channel":"news","id":6})).await;
    assert_eq!(r, json!({"type":"unsubscribed","channel":"news","id":6}));
    assert_eq!(http.publish("news", "missed").await, 1);
    assert_eq!(http.publish("sport", "s2").await, 1);
    assert_eq!(next_json(&mut ws).await, msg("sport", "s2"));
    assert_eq!(next_text(&mut simple).await, "missed");
    assert_eq!(counter(&stats(addr).await, "subscriptions"), 2);
}

/// Asserts `v` is an error reply with `code` and exactly the `id` given.
fn err(v: &Value, code: &str, id: Option<Value>) {
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["code"], code, "{v}");
    assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    match &id {
        Some(id) => assert_eq!(&v["id"], id, "{v}"),
        None => assert!(v.get("id").is_none(), "{v}"),
    }
}

/// Bad requests are answered in-band with an error naming the problem, and
/// the connection stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_reported_in_band() {
    let srv = TestServer::start(|c| c.max_subscriptions = 2);
    let addr = srv.addr;
    let mut ws = ws_connect(addr, "/ws").await;

    send(&mut ws, "this is not json").await;
    err(&next_json(&mut ws).await, "bad_request", None);
    send(&mut ws, "[1,2,3]").await;
    err(&next_json(&mut ws).await, "bad_request", None);
    send(&mut ws, r#"{"op":"dance","channel":"a","id":7}"#).await;
    err(&next_json(&mut ws).await, "bad_request", Some(json!(7)));
    send(&mut ws, r#"{"channel":"a","id":8}"#).await;
    err(&next_json(&mut ws).await, "bad_request", Some(json!(8)));
    send(&mut ws, r#"{"op":"subscribe","id":9}"#).await;
    err(&next_json(&mut ws).await, "bad_request", Some(json!(9)));
    send(
        &mut ws,
        r#"{"op":"publish","channel":"a","data":5,"id":10}"#,
    )
    .await;
    // (`data` is read raw, an rpc's may be any JSON: the id is known.)
    err(&next_json(&mut ws).await, "bad_request", Some(json!(10)));
    send(
        &mut ws,
        r#"{"op":"publish","channel":"a","data_base64":"!!","id":11}"#,
    )
    .await;
    err(&next_json(&mut ws).await, "bad_request", Some(json!(11)));

    for bad in ["bad name", "", "a/b", "ä", &"x".repeat(129)] {
        let r = call(&mut ws, json!({"op":"subscribe","channel":bad,"id":"inv"})).await;
        err(&r, "invalid_channel", Some(json!("inv")));
        let r = call(
            &mut ws,
            json!({"op":"publish","channel":bad,"data":"x","id":"inv"}),
        )
        .await;
        err(&r, "invalid_channel", Some(json!("inv")));
    }

    let r = call(
        &mut ws,
        json!({"op":"unsubscribe","channel":"never","id":12}),
    )
    .await;
    err(&r, "not_subscribed", Some(json!(12)));

    ws.send(Message::binary(vec![1, 2, 3])).await.unwrap();
    err(&next_json(&mut ws).await, "binary_not_supported", None);

    // max_subscriptions = 2.
    for (i, c) in ["one", "two"].iter().enumerate() {
        let r = call(&mut ws, json!({"op":"subscribe","channel":c,"id":i})).await;
        assert_eq!(r["type"], "subscribed", "{r}");
    }
    let r = call(&mut ws, json!({"op":"subscribe","channel":"three","id":3})).await;
    err(&r, "too_many_subscriptions", Some(json!(3)));
    // A channel already held does not count again, and leaving one frees a slot.
    let r = call(&mut ws, json!({"op":"subscribe","channel":"one"})).await;
    assert_eq!(r["type"], "subscribed", "{r}");
    let r = call(&mut ws, json!({"op":"unsubscribe","channel":"two"})).await;
    assert_eq!(r["type"], "unsubscribed", "{r}");
    let r = call(&mut ws, json!({"op":"subscribe","channel":"three"})).await;
    assert_eq!(r["type"], "subscribed", "{r}");

    // After all that the connection still works end to end.
    assert_eq!(publish(addr, "three", "still here").await, 1);
    assert_eq!(
        next_json(&mut ws).await,
        json!({"type":"message","channel":"three","data":"still here"})
    );
    let s = stats(addr).await;
    assert_eq!(counter(&s, "protocol_errors"), 0);
    assert_eq!(counter(&s, "subscriptions"), 2);
}
