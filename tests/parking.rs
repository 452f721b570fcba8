//! Parked WebSockets (`--park-after`): a connection quiet that long gives
//! up its tasks; anything that concerns it — input, a publish, a ping, a
//! deadline, shutdown, its peer leaving — runs it again, and nothing is
//! lost on the way.

mod common;

use std::time::Duration;

use common::*;
use futures_util::SinkExt;
use tokio_tungstenite::tungstenite::Message;

const PARK: Duration = Duration::from_millis(100);

fn parking(c: &mut corecast::config::Config) {
    c.park_after = PARK;
}

#[tokio::test]
async fn parked_subscribers_get_every_message_and_park_again() {
    for legacy in [false, true] {
        let srv = TestServer::start_on(legacy, parking);
        let mut subs = Vec::new();
        for _ in 0..20 {
            subs.push(ws_connect(srv.addr, "/ws/room").await);
        }
        wait_stat(srv.addr, "parked_connections", |n| n == 20).await;

        // A publish wakes every parked subscriber.
        assert_eq!(publish(srv.addr, "room", "one").await, 20);
        for s in &mut subs {
            assert_eq!(next_text(s).await, "one");
        }
        // A parked publisher's frame is read and fanned out.
        wait_stat(srv.addr, "parked_connections", |n| n == 20).await;
        subs[0].send(Message::text("two")).await.expect("send");
        for s in &mut subs {
            assert_eq!(next_text(s).await, "two");
        }
        // Quiet again: all park again.
        let st = wait_stat(srv.addr, "parked_connections", |n| n == 20).await;
        assert!(counter(&st, "parks") >= 60, "{st}");
        assert!(counter(&st, "unparks") >= 40, "{st}");
        let metrics = get(srv.addr, "/metrics").await;
        let metrics = String::from_utf8_lossy(&metrics.body).into_owned();
        assert!(
            metrics.contains("corecast_parked_connections 20"),
            "{metrics}"
        );
    }
}

#[tokio::test]
async fn a_parked_connection_gets_its_ping_and_its_idle_timeout() {
    let srv = TestServer::start(|c| {
        parking(c);
        c.ping_interval = Duration::from_millis(300);
        c.idle_timeout = Duration::from_millis(900);
    });
    let mut ws = RawWs::connect(srv.addr, "/ws/quiet").await;
    wait_stat(srv.addr, "parks", |n| n >= 1).await;
    // The sweep queues the ping: the parked connection runs and sends it.
    let ping = ws.next_frame().await;
    assert_eq!(ping.opcode, 0x9, "expected a ping");
    // Never answered: the idle timeout reaches it, parked or not.
    within_for(
        Duration::from_secs(5),
        "idle timeout",
        ws.read_until_close(),
    )
    .await;
    let st = wait_stat(srv.addr, "idle_timeouts", |n| n == 1).await;
    assert_eq!(counter(&st, "parked_connections"), 0, "{st}");
    wait_stat(srv.addr, "connections", |n| n == 1).await;
}

#[tokio::test]
async fn shutdown_closes_parked_connections_with_1001() {
    let srv = TestServer::start(parking);
    let mut a = RawWs::connect(srv.addr, "/ws/a").await;
    let mut b = RawWs::connect(srv.addr, "/ws/b").await;
    wait_stat(srv.addr, "parked_connections", |n| n == 2).await;
    srv.stop();
    a.expect_close(1001).await;
    b.expect_close(1001).await;
    within("the server's end", srv.join())
        .await
        .expect("clean stop");
}

/// More parked sockets ready at once than one epoll batch (256): before
/// the fix the poller re-read the same level-triggered batch forever.
#[tokio::test]
async fn many_parked_connections_leaving_at_once_are_all_forgotten() {
    ensure_fd_limit(4096);
    let srv = TestServer::start(|c| {
        parking(c);
        c.peers.max_connections_per_ip = 700;
    });
    let mut conns = Vec::new();
    for _ in 0..600 {
        conns.push(RawWs::connect(srv.addr, "/ws/many").await);
    }
    wait_stat(srv.addr, "parked_connections", |n| n == 600).await;
    drop(conns);
    let st = wait_stat(srv.addr, "connections", |n| n == 1).await;
    assert_eq!(counter(&st, "parked_connections"), 0, "{st}");
    // Their per-IP counts were released: as many connect again.
    let mut again = Vec::new();
    for _ in 0..600 {
        again.push(RawWs::connect(srv.addr, "/ws/many").await);
    }
    assert_eq!(publish(srv.addr, "many", "x").await, 600);
}

#[tokio::test]
async fn a_compressed_connection_parks_until_it_sends_compressed() {
    let srv = TestServer::start(parking);
    let ext = "Sec-WebSocket-Extensions: permessage-deflate\r\n";
    let (mut ws, headers) = RawWs::connect_with(srv.addr, "/ws/z", ext).await;
    assert!(headers
        .iter()
        .any(|(_, v)| v.contains("permessage-deflate")));
    wait_stat(srv.addr, "parked_connections", |n| n == 1).await;
    assert_eq!(publish(srv.addr, "z", "hello").await, 1);
    let frame = ws.next_frame().await;
    assert_eq!(frame.opcode, 0x1);
    wait_stat(srv.addr, "parked_connections", |n| n == 1).await;
    let st = stats(srv.addr).await;
    assert_eq!(counter(&st, "compression_connections"), 1, "{st}");
    drop(ws);
    let st = wait_stat(srv.addr, "connections", |n| n == 1).await;
    assert_eq!(counter(&st, "compression_connections"), 0, "{st}");
}

/// A WebSocket with nothing to do at its upgrade parks at once, not after
/// `--park-after` (here an hour): accepting and holding idle connections
/// costs no task per connection. Its first message, and a control client's
/// first request, wake it. A Pusher connection has its greeting queued at
/// the upgrade, so it runs first. Before the change nothing parked here
/// until the hour was up.
#[tokio::test]
async fn a_websocket_with_nothing_to_do_parks_at_its_upgrade() {
    for legacy in [false, true] {
        let srv = TestServer::start_on(legacy, |c| {
            c.park_after = Duration::from_secs(3600);
            c.pusher.add_apps("1:key:secret").unwrap();
        });
        let mut subs = Vec::new();
        for _ in 0..50 {
            subs.push(ws_connect(srv.addr, "/ws/fresh").await);
        }
        let mut control = ws_connect(srv.addr, "/ws").await;
        let st = wait_stat(srv.addr, "parked_connections", |n| n == 51).await;
        assert_eq!(counter(&st, "parks"), 51, "{st}");

        assert_eq!(publish(srv.addr, "fresh", "first").await, 50);
        for s in &mut subs {
            assert_eq!(next_text(s).await, "first");
        }
        let req = r#"{"op":"subscribe","channel":"fresh","id":1}"#;
        control.send(Message::text(req)).await.expect("send");
        let reply = next_json(&mut control).await;
        assert_eq!(reply["type"], "subscribed", "{reply}");
        assert_eq!(publish(srv.addr, "fresh", "second").await, 51);
        assert_eq!(next_json(&mut control).await["data"], "second");

        // Greeted first: runs, and stays running (an hour's quiet).
        let (mut p, _) = common::pusher::connect(srv.addr, "key").await;
        let ok = common::pusher::subscribe(&mut p, "room", None, None).await;
        assert_eq!(
            ok["event"], "pusher_internal:subscription_succeeded",
            "{ok}"
        );
        let st = stats(srv.addr).await;
        assert_eq!(counter(&st, "websockets_opened"), 52, "{st}");
        assert_eq!(counter(&st, "parked_connections"), 0, "{st}");
    }
}

/// A parked connection's peer leaving is answered where it waits, without
/// running it again: a lone close frame gets its echo (same code) and the
/// socket's end; a close with an invalid code, or a close behind other
/// input, goes to the connection's task (1002 for the first, the data
/// handled before the echo for the second). All are forgotten.
#[tokio::test]
async fn a_parked_connection_closing_is_answered_and_forgotten() {
    for legacy in [false, true] {
        let srv = TestServer::start_on(legacy, parking);
        let mut sub = RawWs::connect(srv.addr, "/ws/bye").await;
        let mut plain = RawWs::connect(srv.addr, "/ws/bye").await;
        let mut bad = RawWs::connect(srv.addr, "/ws/bye").await;
        let mut busy = RawWs::connect(srv.addr, "/ws/bye").await;
        wait_stat(srv.addr, "parked_connections", |n| n == 4).await;

        plain.send(0x88, &3000u16.to_be_bytes()).await;
        plain.expect_close(3000).await;
        plain.expect_eof().await;
        // 1005 must never be sent on the wire (RFC 6455 7.4.1).
        bad.send(0x88, &1005u16.to_be_bytes()).await;
        bad.expect_close(1002).await;
        // A message, then the close, in one write: the message is
        // published (to `sub`) before the echo.
        let mut both = masked(0x81, b"last words");
        both.extend_from_slice(&masked(0x88, &1000u16.to_be_bytes()));
        busy.send_raw(&both).await;
        assert_eq!(sub.next_frame().await.payload, b"last words");
        let (seen, end) = busy.read_until_close().await;
        assert_eq!(end, Ending::Close(Some(1000)));
        assert!(seen.iter().all(|f| f.payload == b"last words"), "{seen:?}");
        busy.expect_eof().await;

        // `sub` and the stats request are left.
        let st = wait_stat(srv.addr, "connections", |n| n == 2).await;
        assert_eq!(counter(&st, "websockets_closed"), 3, "{st}");
        assert_eq!(counter(&st, "protocol_errors"), 1, "{st}");
    }
}
