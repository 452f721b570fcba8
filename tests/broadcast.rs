//! Fan-out: many subscribers, ordering, channel isolation, exclude-sender.

mod common;

use common::*;
use futures_util::SinkExt;
use tokio_tungstenite::tungstenite::Message;

const CLIENTS: usize = 1000;
const MESSAGES: usize = 20;

/// 1,000 subscribers of one channel each get all 20 messages of one of them,
/// in publish order, and every delivery is counted once.
async fn a_thousand_subscribers_get_every_message_in_order(legacy: bool) {
    // Both ends of every connection live in this process.
    ensure_fd_limit(2 * CLIENTS as libc::rlim_t + 256);
    let srv = TestServer::start_on(legacy, |_| {});
    let addr = srv.addr;
    let connects: Vec<_> = (0..CLIENTS)
        .map(|_| tokio::spawn(ws_connect(addr, "/ws/fanout")))
        .collect();
    let mut clients = Vec::with_capacity(CLIENTS);
    for c in connects {
        clients.push(c.await.expect("connect task"));
    }
    // The 101 is written before the subscription is registered.
    wait_stat(addr, "subscriptions", |n| n == CLIENTS as u64).await;

    let expected: Vec<String> = (0..MESSAGES).map(|i| format!("msg-{i:02}")).collect();
    for m in &expected {
        clients[0]
            .send(Message::text(m.clone()))
            .await
            .expect("send");
    }
    let readers: Vec<_> = clients
        .into_iter()
        .map(|mut ws| {
            tokio::spawn(async move {
                let mut got = Vec::with_capacity(MESSAGES);
                while got.len() < MESSAGES {
                    got.push(next_text(&mut ws).await);
                }
                got
            })
        })
        .collect();
    for (i, r) in readers.into_iter().enumerate() {
        let got = r.await.expect("reader task");
        assert_eq!(got, expected, "client {i} saw a different sequence");
    }
    let s = stats(addr).await;
    assert_eq!(counter(&s, "messages_in"), MESSAGES as u64);
    assert_eq!(counter(&s, "deliveries"), (CLIENTS * MESSAGES) as u64);
    assert_eq!(counter(&s, "messages_not_delivered"), 0);
    assert_eq!(counter(&s, "slow_consumer_disconnects"), 0);
}

/// Subscribers only ever see their own channel, also for names that share a
/// prefix or differ in case. Each subscriber reads until an end marker sent
/// after everything else, so a stray delivery would show up before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_are_isolated_even_with_similar_names() {
    let srv = TestServer::start(|_| {});
    let addr = srv.addr;
    let names = ["a", "ab", "b", "A", "a:1", "a.b"];
    let mut subs = Vec::new();
    for name in names {
        subs.push(ws_connect(addr, &format!("/ws/{name}")).await);
    }
    let mut multi = ws_connect(addr, "/ws").await;
    multi
        .send(Message::text(r#"{"op":"subscribe","channel":"a","id":1}"#))
        .await
        .unwrap();
    assert_eq!(next_json(&mut multi).await["type"], "subscribed");
    wait_stat(addr, "subscriptions", |n| n == names.len() as u64 + 1).await;

    let mut http = HttpConn::connect(addr).await;
    for round in 0..3 {
        for name in names {
            let n = http.publish(name, &format!("{name}/{round}")).await;
            let expected_subs = if name == "a" { 2 } else { 1 };
            assert_eq!(n, expected_subs, "subscribers of {name}");
        }
    }
    // Nobody subscribes to these; they must reach no one.
    for name in ["aa", "a.", "ba", "a:", "B"] {
        assert_eq!(http.publish(name, "nobody").await, 0);
    }
    for name in names {
        http.publish(name, "end").await;
    }

    for (name, ws) in names.iter().zip(subs.iter_mut()) {
        let mut got = Vec::new();
        loop {
            let t = next_text(ws).await;
            if t == "end" {
                break;
            }
            got.push(t);
        }
        let want: Vec<String> = (0..3).map(|r| format!("{name}/{r}")).collect();
        assert_eq!(got, want, "subscriber of {name}");
    }
    let mut got = Vec::new();
    loop {
        let v = next_json(&mut multi).await;
        assert_eq!(v["type"], "message");
        assert_eq!(v["channel"], "a", "JSON subscriber of `a` got {v}");
        if v["data"] == "end" {
            break;
        }
        got.push(v["data"].as_str().unwrap().to_string());
    }
    assert_eq!(got, ["a/0", "a/1", "a/2"]);
}

/// With `exclude_sender`, a publisher does not get its own message back;
/// the other subscribers do, and it still gets everyone else's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclude_sender_skips_only_the_publisher() {
    let srv = TestServer::start(|c| c.exclude_sender = true);
    let addr = srv.addr;
    let mut a = ws_connect(addr, "/ws/room").await;
    let mut b = ws_connect(addr, "/ws/room").await;
    let mut multi = ws_connect(addr, "/ws").await;
    multi
        .send(Message::text(r#"{"op":"subscribe","channel":"room"}"#))
        .await
        .unwrap();
    assert_eq!(next_json(&mut multi).await["type"], "subscribed");
    wait_stat(addr, "subscriptions", |n| n == 3).await;

    a.send(Message::text("from-a")).await.unwrap();
    assert_eq!(next_text(&mut b).await, "from-a");
    assert_eq!(next_json(&mut multi).await["data"], "from-a");
    b.send(Message::text("from-b")).await.unwrap();
    // `a`'s next message is b's: its own never arrived before it.
    assert_eq!(next_text(&mut a).await, "from-b");
    assert_eq!(next_json(&mut multi).await["data"], "from-b");

    // In JSON mode the publisher is skipped too, and the ack counts only
    // the connections the message was queued for.
    multi
        .send(Message::text(
            r#"{"op":"publish","channel":"room","data":"from-multi","id":9}"#,
        ))
        .await
        .unwrap();
    let ack = next_json(&mut multi).await;
    assert_eq!(
        ack,
        serde_json::json!({"type":"published","channel":"room","subscribers":2,"id":9})
    );
    assert_eq!(next_text(&mut a).await, "from-multi");
    assert_eq!(next_text(&mut b).await, "from-multi");
    // Three messages, two recipients each (so b's own never came back to
    // b); control replies are not deliveries.
    let s = stats(addr).await;
    assert_eq!(counter(&s, "messages_in"), 3);
    assert_eq!(counter(&s, "deliveries"), 3 * 2);
}

on_both_drivers!(a_thousand_subscribers_get_every_message_in_order,);
