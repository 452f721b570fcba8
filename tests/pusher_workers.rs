//! A Pusher app with `--workers 2` and no Redis behaves as with one
//! worker: each channel's occupancy and presence are decided by its owner
//! worker, so `channel_occupied`/`channel_vacated` and the member webhooks
//! are sent once, presence members are one set, the HTTP API lists every
//! worker's channels, a `socket_id` on another worker is still left out,
//! and `--pusher-max-app-connections` bounds the process.

mod common;

use std::collections::HashSet;

use common::pusher::*;
use common::*;
use serde_json::{json, Value};

const APP1: (&str, &str, &str) = ("1", "key1", "secret1");

/// The worker the server's rule (FNV-1a of the hub name) gives `channel`.
fn owner_of(channel: &str, n: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in format!("pusher/1/{channel}").bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h % n
}

/// Subscribes `ws` (socket `id`) to presence `channel` as `user`.
async fn join(ws: &mut Ws, id: &str, channel: &str, user: &str) -> Value {
    let cd = json!({ "user_id": user }).to_string();
    let signed = auth("key1", "secret1", &format!("{id}:{channel}:{cd}"));
    subscribe(ws, channel, Some(signed), Some(&cd)).await
}

async fn api_get(srv: &TestServer, path: &str, query: &str) -> Value {
    let req = api_request(APP1, "GET", (path, query), b"", now());
    let r = http_raw(srv.addr, &req).await;
    assert_eq!(r.status, 200, "{path}?{query}");
    r.json()
}

/// The webhook events of `channel` in arrival order, as `name:user`.
fn hooks_of(hooks: &WebhookReceiver, channel: &str) -> Vec<String> {
    let seen = hooks.seen.lock().unwrap();
    let of = seen.iter().filter(|e| e["channel"] == channel);
    of.map(|e| match e["user_id"].as_str() {
        Some(u) => format!("{}:{u}", e["name"].as_str().unwrap()),
        None => e["name"].as_str().unwrap().to_string(),
    })
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pusher_app_is_one_per_channel_across_workers() {
    let hooks = WebhookReceiver::start(true).await;
    let port = hooks.port;
    let srv = TestServer::start(move |c| {
        c.workers = corecast::config::Workers::Count(2);
        c.pusher.add_apps("1:key1:secret1").unwrap();
        c.pusher
            .add_webhooks(&format!("1=http://127.0.0.1:{port}/hooks"))
            .unwrap();
        c.pusher.max_presence_members = 2;
        c.pusher.max_app_connections = 3;
    });
    let (mut ann, ann_id) = connect(srv.addr, "key1").await;
    let (mut bob, bob_id) = connect(srv.addr, "key1").await;
    // A socket_id's tag names its worker: one on each.
    let tag = |id: &str| id.split_once('.').unwrap().0.to_string();
    assert_ne!(tag(&ann_id), tag(&bob_id), "{ann_id} {bob_id}");
    let (mut cid, cid_id) = connect(srv.addr, "key1").await;
    // The process's bound, though each worker has fewer than 3.
    let mut over = ws_connect(srv.addr, "/app/key1?protocol=7").await;
    assert_eq!(next_json(&mut over).await["data"]["code"], 4100);
    assert_eq!(expect_close(&mut over).await, 4100);

    let channels: Vec<String> = (0..6).map(|i| format!("presence-{i}")).collect();
    let owners: HashSet<u64> = channels.iter().map(|c| owner_of(c, 2)).collect();
    assert_eq!(owners.len(), 2, "channels owned by both workers");
    for ch in &channels {
        let r = join(&mut ann, &ann_id, ch, "ann").await;
        assert_eq!(r["event"], "pusher_internal:subscription_succeeded", "{r}");
        assert_eq!(data(&r)["presence"]["ids"], json!(["ann"]), "{r}");
        let r = join(&mut bob, &bob_id, ch, "bob").await;
        assert_eq!(data(&r)["presence"]["ids"], json!(["ann", "bob"]), "{r}");
        let added = next_json(&mut ann).await;
        assert_eq!(added["event"], "pusher_internal:member_added", "{added}");
        assert_eq!(data(&added)["user_id"], "bob");
        // A third user is over the limit, whichever worker it is on.
        let r = join(&mut cid, &cid_id, ch, "cid").await;
        assert_eq!(r["event"], "pusher:subscription_error", "{r}");
        assert_eq!(r["data"]["status"], 403, "{r}");
        let q = "info=subscription_count,user_count";
        let one = api_get(&srv, &format!("/apps/1/channels/{ch}"), q).await;
        let both = json!({"occupied": true, "subscription_count": 2, "user_count": 2});
        assert_eq!(one, both);
        let users = api_get(&srv, &format!("/apps/1/channels/{ch}/users"), "").await;
        assert_eq!(users, json!({"users": [{"id": "ann"}, {"id": "bob"}]}));
        let unsub = json!({"event": "pusher:unsubscribe", "data": {"channel": ch}});
        send(&mut bob, unsub).await;
        let removed = next_json(&mut ann).await;
        assert_eq!(removed["event"], "pusher_internal:member_removed");
        assert_eq!(data(&removed)["user_id"], "bob");
    }
    let q = "filter_by_prefix=presence-&info=user_count";
    let listed = api_get(&srv, "/apps/1/channels", q).await;
    let one_user: serde_json::Map<String, Value> = channels
        .iter()
        .map(|c| (c.clone(), json!({"user_count": 1})))
        .collect();
    assert_eq!(listed, json!({ "channels": one_user }));

    // An API publish leaves out a socket_id on either worker.
    for ch in ["news-a", "news-b"] {
        for ws in [&mut ann, &mut bob] {
            let r = subscribe(ws, ch, None, None).await;
            assert_eq!(r["event"], "pusher_internal:subscription_succeeded");
        }
    }
    for (skipped, ch) in [(&bob_id, "news-a"), (&ann_id, "news-b")] {
        let first = json!({"name": "first", "data": "1", "channel": ch, "socket_id": skipped});
        let second = json!({"name": "second", "data": "2", "channel": ch});
        for body in [first, second] {
            let body = body.to_string();
            let path = ("/apps/1/events", "");
            let req = api_request(APP1, "POST", path, body.as_bytes(), now());
            assert_eq!(http_raw(srv.addr, &req).await.status, 200);
        }
    }
    // Each channel's events in its order; the channels' may interleave.
    for (ws, skipped) in [(&mut ann, "news-b"), (&mut bob, "news-a")] {
        let mut got: Vec<(String, String)> = Vec::new();
        for _ in 0..3 {
            let m = next_json(ws).await;
            let (ch, ev) = (m["channel"].as_str(), m["event"].as_str());
            got.push((ch.unwrap().into(), ev.unwrap().into()));
        }
        got.sort_by_key(|(ch, _)| ch.clone());
        let pair = |ch: &str, ev: &str| (ch.to_string(), ev.to_string());
        let want = if skipped == "news-b" {
            vec![
                pair("news-a", "first"),
                pair("news-a", "second"),
                pair("news-b", "second"),
            ]
        } else {
            vec![
                pair("news-a", "second"),
                pair("news-b", "first"),
                pair("news-b", "second"),
            ]
        };
        assert_eq!(got, want, "the socket_id's connection is left out");
    }

    // Closing ann vacates every channel, once each.
    drop(ann);
    let (hooks, all) = (&hooks, channels.len());
    wait_until("every channel vacated", || {
        let n = hooks.named("channel_vacated").len();
        async move { n >= all }
    })
    .await;
    for ch in &channels {
        let want = [
            "channel_occupied",
            "member_added:ann",
            "member_added:bob",
            "member_removed:bob",
            "member_removed:ann",
            "channel_vacated",
        ];
        assert_eq!(hooks_of(hooks, ch), want, "{ch}");
    }
    drop((bob, cid));
    let s = stats(srv.addr).await;
    assert_eq!(counter(&s, "pusher_connections_refused"), 1, "{s}");
}
