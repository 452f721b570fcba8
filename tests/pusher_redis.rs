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
/// the transition), and so is the channel's `channel_occupied`.
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
    assert_eq!(occupied, 1, "once per app, not once per instance");
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

/// Two instances of app 7 on one Redis, both sending webhooks to one
/// receiver; `grace` is `--pusher-vacated-grace`.
fn occupancy_pair(
    redis: &RedisServer,
    port: u16,
    grace_ms: u64,
) -> (common::TestServer, common::TestServer) {
    let tweak = move |c: &mut corecast::Config| {
        c.pusher.add_apps("7:k7:s7").unwrap();
        c.pusher
            .add_webhooks(&format!("7=http://127.0.0.1:{port}/hooks"))
            .unwrap();
        c.pusher.vacated_grace_ms = grace_ms;
        c.presence.refresh_ms = 300;
        c.presence.ttl_ms = 10_000;
    };
    (
        instance(redis.url("", ""), tweak),
        instance(redis.url("", ""), tweak),
    )
}

/// `GET /apps/7/channels` (as JSON) on `addr`.
async fn listed(addr: std::net::SocketAddr, query: &str) -> serde_json::Value {
    let req = api_request(APP, "GET", ("/apps/7/channels", query), b"", now());
    let r = http_raw(addr, &req).await;
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    r.json()["channels"].clone()
}

/// `GET /apps/7/channels/{name}?info=subscription_count` on `addr`.
async fn channel_info(addr: std::net::SocketAddr, name: &str) -> serde_json::Value {
    let path = format!("/apps/7/channels/{name}");
    let q = "info=subscription_count";
    let req = api_request(APP, "GET", (&path, q), b"", now());
    http_raw(addr, &req).await.json()
}

/// The channels of the `name` webhooks received, sorted.
fn hooked(hooks: &WebhookReceiver, name: &str) -> Vec<String> {
    let mut v: Vec<String> = hooks
        .named(name)
        .iter()
        .map(|e| e["channel"].as_str().unwrap_or("").to_string())
        .collect();
    v.sort();
    v
}

/// Pusher's channel state is the app's, not an instance's: each instance
/// lists the other's channels, counts are summed, and `channel_occupied`
/// / `channel_vacated` are sent once per app (soketi#616, reverb#273,
/// sockudo#75 are this failing across nodes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_are_listed_counted_and_announced_once_across_instances() {
    let redis = RedisServer::start(&[]).await;
    let hooks = WebhookReceiver::start(true).await;
    let (one, two) = occupancy_pair(&redis, hooks.port, 1000);
    wait_readyz(one.addr, 200).await;
    wait_readyz(two.addr, 200).await;
    let sub = |addr, channel: &'static str| async move {
        let (mut ws, _) = connect(addr, "k7").await;
        let r = subscribe(&mut ws, channel, None, None).await;
        assert_eq!(r["event"], "pusher_internal:subscription_succeeded", "{r}");
        ws
    };
    let a = sub(one.addr, "news").await;
    let b1 = sub(two.addr, "news").await;
    let b2 = sub(two.addr, "news").await;
    let c = sub(two.addr, "only-two").await;
    for addr in [one.addr, two.addr] {
        wait_until("both channels listed on each instance", || async move {
            listed(addr, "").await == json!({"news": {}, "only-two": {}})
        })
        .await;
        wait_until("news counted over both instances", || async move {
            channel_info(addr, "news").await == json!({"occupied": true, "subscription_count": 3})
        })
        .await;
    }
    let prefixed = listed(one.addr, "filter_by_prefix=only").await;
    assert_eq!(prefixed, json!({"only-two": {}}));
    wait_until("the occupied webhooks", || {
        let n = hooked(&hooks, "channel_occupied").len();
        async move { n >= 2 }
    })
    .await;
    for ws in [a, b1, b2, c] {
        drop(ws);
    }
    for addr in [one.addr, two.addr] {
        wait_until("nothing listed", || async move {
            listed(addr, "").await == json!({})
        })
        .await;
    }
    assert_eq!(
        channel_info(one.addr, "news").await,
        json!({"occupied": false, "subscription_count": 0})
    );
    wait_until("the vacated webhooks", || {
        let n = hooked(&hooks, "channel_vacated").len();
        async move { n >= 2 }
    })
    .await;
    // A duplicate would come from the other instance's settle, which runs
    // at least as often: give it that long again.
    let _ = tokio::time::timeout(
        std::time::Duration::from_millis(1500),
        std::future::pending::<()>(),
    )
    .await;
    assert_eq!(hooked(&hooks, "channel_occupied"), ["news", "only-two"]);
    assert_eq!(hooked(&hooks, "channel_vacated"), ["news", "only-two"]);
}

/// The last subscriber reconnecting (to the other instance) within
/// `--pusher-vacated-grace` causes neither `channel_vacated` nor a second
/// `channel_occupied`; a channel left for good is vacated after the grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_last_subscriber_causes_no_vacated_occupied_pair() {
    let redis = RedisServer::start(&[]).await;
    let hooks = WebhookReceiver::start(true).await;
    let (one, two) = occupancy_pair(&redis, hooks.port, 2000);
    wait_readyz(one.addr, 200).await;
    wait_readyz(two.addr, 200).await;
    let (mut a, _) = connect(one.addr, "k7").await;
    for channel in ["room", "witness"] {
        let r = subscribe(&mut a, channel, None, None).await;
        assert_eq!(r["event"], "pusher_internal:subscription_succeeded", "{r}");
    }
    wait_until("both occupied", || {
        let n = hooked(&hooks, "channel_occupied").len();
        async move { n == 2 }
    })
    .await;
    // The last subscriber of both leaves; it comes back (on the other
    // instance) to `room` only.
    drop(a.close(None).await);
    let (mut back, _) = connect(two.addr, "k7").await;
    let r = subscribe(&mut back, "room", None, None).await;
    assert_eq!(r["event"], "pusher_internal:subscription_succeeded", "{r}");
    // `witness`'s grace ends with `room`'s: once it is vacated, `room`
    // would have been too.
    wait_until("witness vacated", || {
        let v = hooked(&hooks, "channel_vacated");
        async move { !v.is_empty() }
    })
    .await;
    let _ = tokio::time::timeout(
        std::time::Duration::from_millis(1000),
        std::future::pending::<()>(),
    )
    .await;
    assert_eq!(hooked(&hooks, "channel_vacated"), ["witness"]);
    assert_eq!(hooked(&hooks, "channel_occupied"), ["room", "witness"]);
    assert_eq!(listed(one.addr, "").await, json!({"room": {}}));
}

/// An instance that is SIGKILLed: its channels stop being listed once its
/// entries expire (`--presence-ttl`), and the survivor sends their
/// `channel_vacated` once, after the grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instance_s_channels_disappear_after_its_ttl() {
    let redis = RedisServer::start(&[]).await;
    let hooks = WebhookReceiver::start(true).await;
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let hook = format!("7=http://127.0.0.1:{}/hooks", hooks.port);
    let mut gone = BinServer::spawn(&[
        "--redis-url",
        &url,
        "--pusher-app",
        "7:k7:s7",
        "--pusher-webhook",
        &hook,
        "--presence-ttl",
        "1s",
        "--presence-refresh",
        "300ms",
    ]);
    let (stays, _spare) = occupancy_pair(&redis, hooks.port, 500);
    wait_readyz(gone.addr, 200).await;
    wait_readyz(stays.addr, 200).await;
    let (mut doomed, _) = connect(gone.addr, "k7").await;
    let r = subscribe(&mut doomed, "doomed", None, None).await;
    assert_eq!(r["event"], "pusher_internal:subscription_succeeded", "{r}");
    wait_until("doomed listed by the survivor", || async {
        listed(stays.addr, "").await == json!({"doomed": {}})
    })
    .await;
    gone.child.kill().expect("SIGKILL");
    wait_until("doomed gone from the listing", || async {
        listed(stays.addr, "").await == json!({})
    })
    .await;
    wait_until("doomed vacated", || {
        let v = hooked(&hooks, "channel_vacated");
        async move { !v.is_empty() }
    })
    .await;
    let _ = tokio::time::timeout(
        std::time::Duration::from_millis(1000),
        std::future::pending::<()>(),
    )
    .await;
    assert_eq!(hooked(&hooks, "channel_vacated"), ["doomed"]);
    assert_eq!(hooked(&hooks, "channel_occupied"), ["doomed"]);
}

/// At most `--pusher-max-channels` channels of an app are tracked across
/// instances: past it a channel works (its subscription succeeds) but is
/// neither listed nor announced, and that is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_tracked_per_app_are_bounded() {
    let redis = RedisServer::start(&[]).await;
    let hooks = WebhookReceiver::start(true).await;
    let port = hooks.port;
    let one = instance(redis.url("", ""), move |c| {
        c.pusher.add_apps("7:k7:s7").unwrap();
        c.pusher
            .add_webhooks(&format!("7=http://127.0.0.1:{port}/hooks"))
            .unwrap();
        c.pusher.max_channels = 2;
    });
    wait_readyz(one.addr, 200).await;
    let (mut ws, _) = connect(one.addr, "k7").await;
    for channel in ["a", "b", "c"] {
        let r = subscribe(&mut ws, channel, None, None).await;
        assert_eq!(r["event"], "pusher_internal:subscription_succeeded", "{r}");
    }
    let s = wait_stat(one.addr, "pusher_channels_untracked", |n| n == 1).await;
    assert_eq!(counter(&s, "pusher_channels_untracked"), 1);
    assert_eq!(listed(one.addr, "").await, json!({"a": {}, "b": {}}));
    wait_until("a and b announced", || {
        let n = hooked(&hooks, "channel_occupied").len();
        async move { n == 2 }
    })
    .await;
    assert_eq!(hooked(&hooks, "channel_occupied"), ["a", "b"]);
    let metrics = String::from_utf8(get(one.addr, "/metrics").await.body).unwrap();
    assert!(metrics.contains("corecast_pusher_channels_untracked_total 1"));
}

/// On a Redis Cluster the app's occupancy keys share one slot (one hash
/// tag per app), so the scripts run whole on its master: listings and
/// the once-per-app webhook hold there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_state_spans_instances_on_a_cluster() {
    let c = RedisCluster::start(3, 0).await;
    let hooks = WebhookReceiver::start(true).await;
    let port = hooks.port;
    let tweak = move |cfg: &mut corecast::Config| {
        cfg.pusher.add_apps("7:k7:s7").unwrap();
        cfg.pusher
            .add_webhooks(&format!("7=http://127.0.0.1:{port}/hooks"))
            .unwrap();
        cfg.presence.refresh_ms = 300;
    };
    let one = cluster_instance(&c, tweak);
    let two = cluster_instance(&c, tweak);
    wait_readyz(one.addr, 200).await;
    wait_readyz(two.addr, 200).await;
    let mut held = Vec::new();
    for (addr, channel) in [(one.addr, "x"), (two.addr, "x"), (two.addr, "y")] {
        let (mut ws, _) = connect(addr, "k7").await;
        let r = subscribe(&mut ws, channel, None, None).await;
        assert_eq!(r["event"], "pusher_internal:subscription_succeeded", "{r}");
        held.push(ws);
    }
    wait_until("both channels listed by the first instance", || async {
        listed(one.addr, "").await == json!({"x": {}, "y": {}})
    })
    .await;
    wait_until("x counted over both instances", || async {
        channel_info(one.addr, "x").await["subscription_count"] == 2
    })
    .await;
    wait_until("the occupied webhooks", || {
        let n = hooked(&hooks, "channel_occupied").len();
        async move { n >= 2 }
    })
    .await;
    assert_eq!(hooked(&hooks, "channel_occupied"), ["x", "y"]);
}

/// An instance stopped gracefully takes its channels with it at once (its
/// connections' close removes its entries), not after `--presence-ttl`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_instance_s_channels_go_with_it() {
    let redis = RedisServer::start(&[]).await;
    let hooks = WebhookReceiver::start(true).await;
    let (one, two) = occupancy_pair(&redis, hooks.port, 500);
    wait_readyz(one.addr, 200).await;
    wait_readyz(two.addr, 200).await;
    let (mut ws, _) = connect(one.addr, "k7").await;
    let r = subscribe(&mut ws, "leaving", None, None).await;
    assert_eq!(r["event"], "pusher_internal:subscription_succeeded", "{r}");
    wait_until("listed by the other", || async {
        listed(two.addr, "").await == json!({"leaving": {}})
    })
    .await;
    one.stop();
    one.join().await.expect("stopped");
    let started = std::time::Instant::now();
    wait_until("gone from the listing", || async {
        listed(two.addr, "").await == json!({})
    })
    .await;
    // Well within the 10 s entry lifetime.
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

/// A presence subscription Redis refuses as full (the app's other
/// instance holds the last seat) leaves no subscriber counted behind: the
/// refusing instance takes its count back at once, not at its next
/// refresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_presence_subscription_refused_by_redis_is_not_counted() {
    let redis = RedisServer::start(&[]).await;
    let tweak = |c: &mut corecast::Config| {
        c.pusher.add_apps("7:k7:s7").unwrap();
        c.pusher.max_presence_members = 1;
        // A refresh far away: only the refusal itself can fix the count.
        c.presence.refresh_ms = 20_000;
        c.presence.ttl_ms = 60_000;
    };
    let one = instance(redis.url("", ""), tweak);
    let two = instance(redis.url("", ""), tweak);
    wait_readyz(one.addr, 200).await;
    wait_readyz(two.addr, 200).await;
    let join = |addr, user: &'static str| async move {
        let (mut ws, id) = connect(addr, "k7").await;
        let cd = format!(r#"{{"user_id":"{user}"}}"#);
        let signed = auth("k7", "s7", &format!("{id}:presence-room:{cd}"));
        let first = subscribe(&mut ws, "presence-room", Some(signed), Some(&cd)).await;
        (ws, first)
    };
    let (_ann, r) = join(one.addr, "ann").await;
    assert_eq!(r["event"], "pusher_internal:subscription_succeeded", "{r}");
    // bob is admitted by instance two (no member there), then refused by
    // Redis's script.
    let (mut bob, r) = join(two.addr, "bob").await;
    let refusal = if r["event"] == "pusher_internal:subscription_succeeded" {
        next_json(&mut bob).await
    } else {
        r
    };
    assert_eq!(refusal["event"], "pusher:subscription_error", "{refusal}");
    wait_until("one subscriber counted across instances", || async {
        channel_info(one.addr, "presence-room").await["subscription_count"] == 1
    })
    .await;
}
