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

/// Presence channels across two instances: `subscription_succeeded` lists
/// every instance's members, `member_added`/`member_removed` reach the
/// other instance once per user (never the member itself), and the HTTP
/// API's `users` and `user_count` answer for the whole channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_members_span_instances() {
    let redis = RedisServer::start(&[]).await;
    let tweak = |c: &mut corecast::Config| {
        c.pusher.add_apps("7:k7:s7").unwrap();
        c.presence.refresh_ms = 300;
        c.presence.ttl_ms = 10_000; // own entries: see tests/presence_redis.rs
    };
    let one = instance(redis.url("", ""), tweak);
    let two = instance(redis.url("", ""), tweak);
    wait_readyz(one.addr, 200).await;
    wait_readyz(two.addr, 200).await;
    let join = |addr, user: &'static str| async move {
        let (mut ws, id) = connect(addr, "k7").await;
        let cd = format!(r#"{{"user_id":"{user}","user_info":{{"name":"{user}"}}}}"#);
        let signed = auth("k7", "s7", &format!("{id}:presence-room:{cd}"));
        let r = subscribe(&mut ws, "presence-room", Some(signed), Some(&cd)).await;
        assert_eq!(r["event"], "pusher_internal:subscription_succeeded", "{r}");
        (ws, data(&r)["presence"].clone())
    };
    let (mut a, seen_a) = join(one.addr, "ann").await;
    assert_eq!(seen_a["ids"], json!(["ann"]));
    let (b, seen_b) = join(two.addr, "bob").await;
    assert_eq!(
        seen_b["ids"],
        json!(["ann", "bob"]),
        "lists the other instance's member"
    );
    assert_eq!(seen_b["hash"]["ann"]["name"], "ann");
    let added = next_json(&mut a).await;
    assert_eq!(added["event"], "pusher_internal:member_added");
    assert_eq!(data(&added)["user_id"], "bob");
    // bob's second connection, on the first instance: no member_added.
    let (mut b2, _) = join(one.addr, "bob").await;
    let users_req = api_request(
        APP,
        "GET",
        ("/apps/7/channels/presence-room/users", ""),
        b"",
        now(),
    );
    for addr in [one.addr, two.addr] {
        let users = http_raw(addr, &users_req).await.json();
        assert_eq!(users, json!({"users":[{"id":"ann"},{"id":"bob"}]}));
    }
    let count_req = api_request(
        APP,
        "GET",
        ("/apps/7/channels/presence-room", "info=user_count"),
        b"",
        now(),
    );
    assert_eq!(http_raw(one.addr, &count_req).await.json()["user_count"], 2);
    // Closing one of bob's two connections removes nobody; the last does.
    drop(b2.close(None).await);
    drop(b);
    let removed = next_json(&mut a).await;
    assert_eq!(
        removed["event"], "pusher_internal:member_removed",
        "{removed}"
    );
    assert_eq!(data(&removed)["user_id"], "bob");
    let users = http_raw(two.addr, &users_req).await.json();
    assert_eq!(users, json!({"users":[{"id":"ann"}]}));
    // Nothing more: one member_removed for bob, no member_added for b2.
    let more =
        tokio::time::timeout(std::time::Duration::from_millis(1500), next_json(&mut a)).await;
    assert!(more.is_err(), "unexpected {more:?}");
}

/// A Pusher member on an instance that is SIGKILLed: within ttl + refresh
/// the surviving instance's subscribers get exactly one `member_removed`
/// for it (built by Redis's prune script), and the API no longer lists it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instance_s_pusher_member_is_removed_once() {
    let redis = RedisServer::start(&[]).await;
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let mut gone = BinServer::spawn(&[
        "--redis-url",
        &url,
        "--pusher-app",
        "7:k7:s7",
        "--presence-ttl",
        "1s",
        "--presence-refresh",
        "300ms",
    ]);
    let tweak = |c: &mut corecast::Config| {
        c.pusher.add_apps("7:k7:s7").unwrap();
        c.presence.refresh_ms = 300;
        c.presence.ttl_ms = 10_000; // own entries: see tests/presence_redis.rs
    };
    let stays = instance(redis.url("", ""), tweak);
    wait_readyz(gone.addr, 200).await;
    wait_readyz(stays.addr, 200).await;
    let join = |addr, user: &'static str| async move {
        let (mut ws, id) = connect(addr, "k7").await;
        let cd = json!({ "user_id": user }).to_string();
        let signed = auth("k7", "s7", &format!("{id}:presence-k:{cd}"));
        let r = subscribe(&mut ws, "presence-k", Some(signed), Some(&cd)).await;
        assert_eq!(r["event"], "pusher_internal:subscription_succeeded", "{r}");
        ws
    };
    let mut watcher = join(stays.addr, "w/1").await;
    let _doomed = join(gone.addr, "x\"y").await;
    let added = next_json(&mut watcher).await;
    assert_eq!(data(&added)["user_id"], "x\"y");
    gone.child.kill().expect("SIGKILL");
    let removed = next_json(&mut watcher).await;
    assert_eq!(
        removed["event"], "pusher_internal:member_removed",
        "{removed}"
    );
    assert_eq!(removed["channel"], "presence-k");
    assert_eq!(data(&removed), json!({"user_id":"x\"y"}));
    let users_req = api_request(
        APP,
        "GET",
        ("/apps/7/channels/presence-k/users", ""),
        b"",
        now(),
    );
    let users = http_raw(stays.addr, &users_req).await.json();
    assert_eq!(users, json!({"users":[{"id":"w/1"}]}));
    let more = tokio::time::timeout(
        std::time::Duration::from_millis(1500),
        next_json(&mut watcher),
    )
    .await;
    assert!(more.is_err(), "unexpected {more:?}");
}

/// Webhooks in Redis mode: a user's `member_added`/`member_removed` is
/// sent once across instances (by the instance whose Redis script made
/// the transition), while `channel_occupied`/`channel_vacated` are each
/// instance's own (documented).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_webhooks_are_sent_once_across_instances() {
    let redis = RedisServer::start(&[]).await;
    let hooks = WebhookReceiver::start(true).await;
    let (port, seen) = (hooks.port, hooks.seen.clone());
    let tweak = move |c: &mut corecast::Config| {
        c.pusher.add_apps("7:k7:s7").unwrap();
        c.pusher
            .add_webhooks(&format!("7=http://127.0.0.1:{port}/hooks"))
            .unwrap();
        c.presence.refresh_ms = 300;
        c.presence.ttl_ms = 10_000;
    };
    let one = instance(redis.url("", ""), tweak);
    let two = instance(redis.url("", ""), tweak);
    wait_readyz(one.addr, 200).await;
    wait_readyz(two.addr, 200).await;
    let join = |addr, user: &'static str| async move {
        let (mut ws, id) = connect(addr, "k7").await;
        let cd = format!(r#"{{"user_id":"{user}"}}"#);
        let signed = auth("k7", "s7", &format!("{id}:presence-room:{cd}"));
        let r = subscribe(&mut ws, "presence-room", Some(signed), Some(&cd)).await;
        assert_eq!(r["event"], "pusher_internal:subscription_succeeded", "{r}");
        ws
    };
    let _ann = join(one.addr, "ann").await;
    let bob = join(two.addr, "bob").await;
    let bob2 = join(one.addr, "bob").await; // a second connection: no event
    drop(bob);
    drop(bob2);
    let names = || -> Vec<(String, String)> {
        let s = seen.lock().unwrap();
        s.iter()
            .filter(|e| e["name"].as_str().unwrap_or("").starts_with("member_"))
            .map(|e| {
                let user = e["user_id"].as_str().unwrap_or("").to_string();
                (e["name"].as_str().unwrap().to_string(), user)
            })
            .collect()
    };
    let removed = |v: &[(String, String)]| v.iter().any(|(n, _)| n == "member_removed");
    wait_until("bob's member_removed webhook", || {
        let done = removed(&names());
        async move { done }
    })
    .await;
    // Any duplicate would have been sent with the first: give it the same
    // time again before checking.
    let _ = tokio::time::timeout(
        std::time::Duration::from_millis(800),
        std::future::pending::<()>(),
    )
    .await;
    let mut got = names();
    got.sort();
    let want = [
        ("member_added", "ann"),
        ("member_added", "bob"),
        ("member_removed", "bob"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(got, want);
    let occupied = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "channel_occupied")
        .count();
    assert_eq!(occupied, 2, "one per instance");
}

/// Redis mode with history: Pusher messages are published plainly, not
/// appended to Redis streams (nothing reads them back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pusher_messages_are_not_written_to_redis_history() {
    let redis = RedisServer::start(&[]).await;
    let tweak = |c: &mut corecast::Config| {
        c.pusher.add_apps("7:k7:s7:client-events").unwrap();
        c.history.size = 100;
    };
    let one = instance(redis.url("", ""), tweak);
    wait_readyz(one.addr, 200).await;
    let (mut a, id_a) = connect(one.addr, "k7").await;
    let (mut b, id_b) = connect(one.addr, "k7").await;
    for (ws, id) in [(&mut a, &id_a), (&mut b, &id_b)] {
        let signed = auth("k7", "s7", &format!("{id}:private-room"));
        let r = subscribe(ws, "private-room", Some(signed), None).await;
        assert_eq!(r["event"], "pusher_internal:subscription_succeeded");
    }
    let body = json!({"name":"news","data":"hello","channel":"private-room"}).to_string();
    let req = api_request(APP, "POST", ("/apps/7/events", ""), body.as_bytes(), now());
    assert_eq!(http_raw(one.addr, &req).await.status, 200);
    send(
        &mut a,
        json!({"event":"client-t","channel":"private-room","data":{}}),
    )
    .await;
    assert_eq!(next_json(&mut b).await["event"], "news");
    assert_eq!(next_json(&mut b).await["event"], "client-t");
    publish(one.addr, "native", "kept").await;
    let mut conn = RespConn::open(redis.port, None).await;
    let native = conn.cmd(&["KEYS", "*!h{native}*"]).await;
    assert!(
        matches!(&native, Resp::Array(Some(k)) if !k.is_empty()),
        "the native channel's history: {native:?}"
    );
    let pusher = conn.cmd(&["KEYS", "*!h{pusher/*"]).await;
    assert_eq!(pusher, Resp::Array(Some(vec![])), "pusher history in redis");
}
