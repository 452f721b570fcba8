//! Publication tags and tag filters end to end: a JSON subscribe's
//! `filter` (only what passes reaches it; history replays likewise), tags
//! from the JSON publish and from `POST /publish`'s `tag.KEY=VALUE`, the
//! server-enforced filters of a token's `filters` claim and of the
//! subscribe hook's result (applied first, never widened by the client's,
//! on every way of reading a channel: JSON, path mode, SSE, `GET
//! /history`), and the refusals of malformed filters and tags.

mod common;
mod hooks_support;
mod sse_support;

use common::*;
use corecast::auth::sign_token;
use corecast::config::Secret;
use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

const SECRET: &str = "filters-test-secret";

async fn call(ws: &mut Ws, request: Value) -> Value {
    ws.send(Message::text(request.to_string()))
        .await
        .expect("send");
    next_json(ws).await
}

async fn send(ws: &mut Ws, request: Value) {
    ws.send(Message::text(request.to_string()))
        .await
        .expect("send");
}

/// Publishes `data` on `channel` with the query's tags; the subscribers
/// it reached.
async fn publish_tagged(
    addr: std::net::SocketAddr,
    channel: &str,
    data: &str,
    tags: &str,
) -> Value {
    let r = post(addr, &format!("/publish/{channel}?{tags}"), data.as_bytes()).await;
    assert_eq!(r.status, 200, "publish {data}: {r:?}");
    r.json()
}

/// The `data` of the next messages of `ws` until (and without) the
/// message whose data is `end`.
async fn data_until(ws: &mut Ws, end: &str) -> Vec<String> {
    let mut got = Vec::new();
    loop {
        let m = next_json(ws).await;
        assert_eq!(m["type"], "message", "{m}");
        let d = m["data"].as_str().unwrap().to_string();
        if d == end {
            return got;
        }
        got.push(d);
    }
}

/// Four subscribers with different filters (one with none): each gets
/// exactly the publications whose tags pass its filter, from the JSON
/// publish and from `POST /publish`, the tags shown in the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_subscriber_gets_what_passes_its_filter() {
    let srv = TestServer::start(|_| {});
    let addr = srv.addr;
    let filters = [
        None,
        Some(json!({"key":"sym","cmp":"eq","val":"BTC"})),
        Some(json!({"op":"and","nodes":[
            {"key":"price","cmp":"gt","val":"100"},
            {"op":"not","nodes":[{"key":"sym","cmp":"in","vals":["DOGE"]}]}
        ]})),
        // A publication without tags passes only filters that hold for
        // an empty map.
        Some(json!({"key":"sym","cmp":"nex"})),
    ];
    let mut subs = Vec::new();
    for f in &filters {
        let mut ws = ws_connect(addr, "/ws").await;
        let mut req = json!({"op":"subscribe","channel":"px","id":1});
        if let Some(f) = f {
            req["filter"] = f.clone();
        }
        let r = call(&mut ws, req).await;
        assert_eq!(r, json!({"type":"subscribed","channel":"px","id":1}));
        subs.push(ws);
    }
    let mut publisher = ws_connect(addr, "/ws").await;
    let tagged = [
        ("a", json!({"sym":"BTC","price":"50100"})),
        ("b", json!({"sym":"ETH","price":"99.5"})),
        ("c", json!({"sym":"DOGE","price":"150"})),
    ];
    for (data, tags) in &tagged {
        let p = json!({"op":"publish","channel":"px","data":data,"tags":tags,"id":2});
        let r = call(&mut publisher, p).await;
        assert_eq!(r["type"], "published", "{r}");
    }
    publish_tagged(addr, "px", "d", "tag.sym=BTC&tag.price=7").await;
    post(addr, "/publish/px", b"e").await;
    // The end markers: the first passes the first three filters, the
    // second (untagged) the last one.
    publish_tagged(addr, "px", "end", "tag.sym=BTC&tag.price=1000").await;
    post(addr, "/publish/px", b"end").await;

    assert_eq!(
        data_until(&mut subs[0], "end").await,
        ["a", "b", "c", "d", "e"]
    );
    assert_eq!(data_until(&mut subs[1], "end").await, ["a", "d"]);
    assert_eq!(data_until(&mut subs[2], "end").await, ["a"]);
    assert_eq!(data_until(&mut subs[3], "end").await, ["e"]);
    // The tags are in the message, as published (keys sorted).
    let mut ws = ws_connect(addr, "/ws").await;
    let f = json!({"key":"sym","cmp":"eq","val":"BTC"});
    call(
        &mut ws,
        json!({"op":"subscribe","channel":"px2","filter":f}),
    )
    .await;
    publish_tagged(addr, "px2", "x", "tag.sym=BTC&tag.note=caf%C3%A9+au+lait").await;
    let m = next_json(&mut ws).await;
    assert_eq!(
        m,
        json!({"type":"message","channel":"px2","tags":{"note":"café au lait","sym":"BTC"},"data":"x"})
    );
}

/// Malformed filters and tags are refused with their own codes and harm
/// nobody: the same connection goes on, and an over-bound `POST
/// /publish` is a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_filters_and_tags_are_refused_clearly() {
    let srv = TestServer::start(|_| {});
    let addr = srv.addr;
    let mut ws = ws_connect(addr, "/ws").await;
    let mut deep = json!({"key":"a","cmp":"ex"});
    for _ in 0..8 {
        deep = json!({"op":"not","nodes":[deep]});
    }
    let leaves: Vec<Value> = (0..32)
        .map(|i| json!({"key":format!("k{i}"),"cmp":"ex"}))
        .collect();
    let bad_filters = [
        deep,
        json!({"op":"or","nodes":leaves}),
        json!({"op":"xor","nodes":[]}),
        json!({"key":"a","cmp":"like","val":"x"}),
        json!({"key":"a","cmp":"eq","val":5}),
        json!("sym=BTC"),
    ];
    for f in bad_filters {
        let r = call(
            &mut ws,
            json!({"op":"subscribe","channel":"c","filter":f,"id":9}),
        )
        .await;
        assert_eq!(r["type"], "error", "{r}");
        assert_eq!(r["code"], "invalid_filter", "{r}");
        assert_eq!(r["id"], 9);
    }
    let many: serde_json::Map<String, Value> =
        (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    let bad_tags = [
        Value::Object(many),
        json!({"k":"x".repeat(1100)}),
        json!({"k":1}),
        json!(["a"]),
        json!({"":"v"}),
    ];
    for t in bad_tags {
        let p = json!({"op":"publish","channel":"c","data":"x","tags":t,"id":3});
        let r = call(&mut ws, p).await;
        assert_eq!(r["code"], "invalid_tags", "{r}");
    }
    // Nothing was subscribed or published; the connection still works.
    let r = call(&mut ws, json!({"op":"subscribe","channel":"c","id":4})).await;
    assert_eq!(r["type"], "subscribed");
    let query: Vec<String> = (0..17).map(|i| format!("tag.k{i}=v")).collect();
    let r = post(addr, &format!("/publish/c?{}", query.join("&")), b"x").await;
    assert_eq!(r.status, 400);
    let r = post(addr, "/publish/c?tag.k=%ZZ", b"x").await;
    assert_eq!(r.status, 400);
    let r = post(addr, "/publish/c?tag.k=a&tag.k=b", b"x").await;
    assert_eq!(r.status, 400);
    assert_eq!(
        publish_tagged(addr, "c", "ok", "tag.k=v").await["subscribers"],
        1
    );
    assert_eq!(next_json(&mut ws).await["data"], "ok");
}

/// History: a resume with a filter replays only the publications that
/// pass it (offsets jump over the others, and resuming from the last one
/// seen still works); `GET /history` shows the tags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_resume_replays_only_what_passes() {
    let srv = TestServer::start(|c| c.history.size = 100);
    let addr = srv.addr;
    for i in 1..=6 {
        let sym = if i % 2 == 0 { "BTC" } else { "ETH" };
        publish_tagged(addr, "h", &format!("m{i}"), &format!("tag.sym={sym}")).await;
    }
    let h = get(addr, "/history/h").await.json();
    assert_eq!(
        h["messages"][1],
        json!({"offset":2,"data":"m2","tags":{"sym":"BTC"}})
    );
    let epoch = h["epoch"].as_str().unwrap().to_string();
    let mut ws = ws_connect(addr, "/ws").await;
    let f = json!({"key":"sym","cmp":"eq","val":"BTC"});
    let since = json!({"epoch": epoch, "offset": 1});
    let r = call(
        &mut ws,
        json!({"op":"subscribe","channel":"h","since":since,"filter":f}),
    )
    .await;
    assert_eq!(r["recovered"], true, "{r}");
    assert_eq!(r["filtered"], true, "jumps are announced: {r}");
    let offsets: Vec<u64> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            let m = next_json(&mut ws).await;
            v.push(m["offset"].as_u64().unwrap());
        }
        v
    };
    assert_eq!(offsets, [2, 4, 6]);
    publish_tagged(addr, "h", "m7", "tag.sym=ETH").await;
    publish_tagged(addr, "h", "m8", "tag.sym=BTC").await;
    let m = next_json(&mut ws).await;
    assert_eq!(
        (m["offset"].as_u64(), m["data"].as_str()),
        (Some(8), Some("m8"))
    );
}

fn token(claims: Value) -> String {
    sign_token(&claims.to_string(), SECRET.as_bytes())
}

/// The token's `filters` claim is enforced on every way of reading a
/// channel, and a client's own filter narrows it, never widens it: a
/// client asking for everything (`or` with an always-true branch) still
/// gets only what the token lets through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokens_filter_is_enforced_and_cannot_be_widened() {
    let srv = TestServer::start(|c| {
        c.auth.token_secret = Some(Secret(SECRET.into()));
        c.history.size = 100;
    });
    let addr = srv.addr;
    let t = token(json!({
        "exp": 9999999999u64, "sub": "7", "subscribe": ["*"], "publish": ["*"],
        "filters": {"acct.*": {"key":"owner","cmp":"eq","val":"7"}}
    }));
    let mut plain = ws_connect(addr, &format!("/ws?token={t}")).await;
    let r = call(&mut plain, json!({"op":"subscribe","channel":"acct.a"})).await;
    assert_eq!(r["filtered"], true, "the token's filter: {r}");
    let mut other_json = ws_connect(addr, &format!("/ws?token={t}")).await;
    let r = call(&mut other_json, json!({"op":"subscribe","channel":"news"})).await;
    assert_eq!(r.get("filtered"), None, "an unfiltered channel: {r}");
    let mut widening = ws_connect(addr, &format!("/ws?token={t}")).await;
    let all = json!({"op":"or","nodes":[{"key":"owner","cmp":"ex"},{"key":"owner","cmp":"nex"}]});
    call(
        &mut widening,
        json!({"op":"subscribe","channel":"acct.a","filter":all}),
    )
    .await;
    let mut narrowing = ws_connect(addr, &format!("/ws?token={t}")).await;
    let f = json!({"key":"kind","cmp":"eq","val":"trade"});
    call(
        &mut narrowing,
        json!({"op":"subscribe","channel":"acct.a","filter":f}),
    )
    .await;
    let mut path = ws_connect(addr, &format!("/ws/acct.a?token={t}")).await;
    // Another channel is not filtered.
    let mut other = ws_connect(addr, &format!("/ws/news?token={t}")).await;
    let mut sse =
        sse_support::Sse::open(addr, &format!("/sse?channel=acct.a&token={t}"), &[]).await;
    assert_eq!(sse.next_event().await.name, "subscribed");
    publish_tagged(addr, "acct.a", "theirs", "tag.owner=8&tag.kind=trade").await;
    publish_tagged(addr, "acct.a", "untagged", "").await;
    publish_tagged(addr, "acct.a", "mine", "tag.owner=7&tag.kind=order").await;
    publish_tagged(addr, "acct.a", "mine-trade", "tag.owner=7&tag.kind=trade").await;
    publish_tagged(addr, "news", "n", "tag.owner=8").await;
    publish_tagged(addr, "acct.a", "end", "tag.owner=7&tag.kind=trade").await;
    assert_eq!(data_until(&mut plain, "end").await, ["mine", "mine-trade"]);
    assert_eq!(
        data_until(&mut widening, "end").await,
        ["mine", "mine-trade"]
    );
    assert_eq!(data_until(&mut narrowing, "end").await, ["mine-trade"]);
    assert_eq!(next_text(&mut path).await, "mine");
    assert_eq!(next_text(&mut path).await, "mine-trade");
    assert_eq!(next_text(&mut other).await, "n");
    for want in ["mine", "mine-trade", "end"] {
        let e = sse.next_event().await;
        assert_eq!(e.json()["data"], want, "{e:?}");
    }
    // GET /history with the token: only what it may see.
    let h = get(addr, &format!("/history/acct.a?token={t}"))
        .await
        .json();
    let data: Vec<&str> = h["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["data"].as_str().unwrap())
        .collect();
    assert_eq!(data, ["mine", "mine-trade", "end"]);
    // A token with a malformed filter is refused (fail closed).
    let bad = token(json!({
        "exp": 9999999999u64, "subscribe": ["*"],
        "filters": {"acct.*": {"key":"owner","cmp":"bogus"}}
    }));
    let r = get(addr, &format!("/history/acct.a?token={bad}")).await;
    assert_eq!(r.status, 401, "{r:?}");
}

/// The subscribe hook's `filter` is enforced the same way, on a JSON
/// subscribe (whatever the client's filter) and on a path-mode read; a
/// malformed one refuses the subscribe rather than let everything through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subscribe_hooks_filter_is_enforced() {
    let backend = hooks_support::Backend::start();
    let srv = TestServer::start(|c| backend.configure(c, &["subscribe"]));
    let addr = srv.addr;
    let mut json_sub = ws_connect(addr, "/ws").await;
    let all = json!({"key":"region","cmp":"nex"});
    let r = call(
        &mut json_sub,
        json!({"op":"subscribe","channel":"eu-only","filter":all,"id":1}),
    )
    .await;
    assert_eq!(r["type"], "subscribed", "{r}");
    let mut json_all = ws_connect(addr, "/ws").await;
    call(&mut json_all, json!({"op":"subscribe","channel":"eu-only"})).await;
    let mut path = ws_connect(addr, "/ws/eu-only").await;
    publish_tagged(addr, "eu-only", "us", "tag.region=us").await;
    publish_tagged(addr, "eu-only", "none", "").await;
    publish_tagged(addr, "eu-only", "eu", "tag.region=eu").await;
    // Only `eu` passes the hook's filter; for `json_sub`, whose own
    // filter wants no region at all, nothing does.
    assert_eq!(data_until(&mut json_all, "eu").await, Vec::<String>::new());
    assert_eq!(next_text(&mut path).await, "eu");
    send(
        &mut json_sub,
        json!({"op":"publish","channel":"eu-only","data":"x","id":5}),
    )
    .await;
    let r = next_json(&mut json_sub).await;
    assert_eq!(
        r["type"], "published",
        "the filtered subscriber got nothing: {r}"
    );
    // A malformed filter from the backend: refused, not subscribed.
    let r = call(
        &mut json_all,
        json!({"op":"subscribe","channel":"bad-filter","id":2}),
    )
    .await;
    assert_eq!(r["type"], "error", "{r}");
    assert_eq!(r["code"], "unavailable", "{r}");
    let status = ws_upgrade_status(addr, "/ws/bad-filter").await;
    assert_eq!(status, 503);
}

/// An event stream's own filter (`filter.{channel}=JSON`) selects as a
/// JSON subscribe's does; a malformed one, or one of a channel the
/// request does not name, is a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_streams_own_filter_selects_too() {
    let srv = TestServer::start(|_| {});
    let addr = srv.addr;
    let f = "%7B%22key%22%3A%22sym%22%2C%22cmp%22%3A%22eq%22%2C%22val%22%3A%22BTC%22%7D";
    let mut sse =
        sse_support::Sse::open(addr, &format!("/sse?channel=px&filter.px={f}"), &[]).await;
    assert_eq!(sse.next_event().await.name, "subscribed");
    publish_tagged(addr, "px", "eth", "tag.sym=ETH").await;
    publish_tagged(addr, "px", "btc", "tag.sym=BTC").await;
    let e = sse.next_event().await;
    assert_eq!(e.json()["data"], "btc", "{e:?}");
    assert_eq!(e.json()["tags"], json!({"sym":"BTC"}));
    for bad in [
        format!("/sse?channel=px&filter.other={f}"),
        "/sse?channel=px&filter.px=%7Bnot".to_string(),
        format!("/sse?channel=px&filter.px={f}&filter.px={f}"),
    ] {
        let r = get(addr, &bad).await;
        assert_eq!(r.status, 400, "{bad}: {r:?}");
    }
}

/// The status of a raw upgrade of `path`.
async fn ws_upgrade_status(addr: std::net::SocketAddr, path: &str) -> u16 {
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {RFC_KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    http_raw(addr, req.as_bytes()).await.status
}
