//! Server-Sent Events (`GET /sse`) end to end, against the whole server
//! over real sockets: the exact bytes and chunking, resuming with
//! `Last-Event-ID` and `?since=` (exactly, or one `gap`), the refusals
//! (bad `Last-Event-ID`, the channel bound, header limits, tokens,
//! reserved names), heartbeats, the slow-consumer cut, parking, shutdown,
//! `curl -N`, and the counters.

mod common;
mod sse_support;

use std::time::Duration;

use common::*;
use corecast::auth::{sign_token, unix_now};
use corecast::config::Secret;
use sse_support::*;

fn with_history(c: &mut corecast::Config) {
    c.history.size = 100;
}

/// Extra request headers.
type Headers<'a> = &'a [(&'a str, &'a str)];

const HEAD: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
    Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\n\r\n";

/// The head, then every event as one chunk, byte for byte — ids read
/// from the right for a channel with `:` in its name, a payload's line
/// break escaped in the JSON data line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_is_chunked_events_byte_for_byte() {
    let srv = TestServer::start(with_history);
    let addr = srv.addr;
    let mut sse = Sse::open(addr, "/sse?channel=room%3A1", &[]).await;
    assert_eq!(sse.head, HEAD);
    let first = sse.next_event().await;
    let id = first
        .id
        .clone()
        .expect("a channel with history names its position");
    let e = epoch_of(&id);
    assert_eq!(e.len(), 16, "{id}");
    assert_eq!(id, format!("room:1:{e}:0"));
    assert_eq!(
        first.data,
        format!(r#"{{"type":"subscribed","channel":"room:1","epoch":"{e}","offset":0}}"#)
    );
    assert_eq!(publish(addr, "room:1", "line one\nline two").await, 1);
    let body = format!(
        "id: room:1:{e}:1\nevent: message\ndata: \
         {{\"type\":\"message\",\"channel\":\"room:1\",\"offset\":1,\"data\":\"line one\\nline two\"}}\n\n"
    );
    let want = chunk(&body);
    assert_eq!(String::from_utf8(sse.raw(want.len()).await).unwrap(), want);
    // Without history: no ids, the same data.
    let plain = TestServer::start(|_| {});
    let mut sse = Sse::open(plain.addr, "/sse?channel=a&channel=b", &[]).await;
    for c in ["a", "b"] {
        let body =
            format!("event: subscribed\ndata: {{\"type\":\"subscribed\",\"channel\":\"{c}\"}}\n\n");
        assert_eq!(
            String::from_utf8(sse.raw(chunk(&body).len()).await).unwrap(),
            chunk(&body)
        );
    }
    assert_eq!(publish(plain.addr, "b", "x").await, 1);
    let body = "event: message\ndata: {\"type\":\"message\",\"channel\":\"b\",\"data\":\"x\"}\n\n";
    assert_eq!(
        String::from_utf8(sse.raw(chunk(body).len()).await).unwrap(),
        chunk(body)
    );
}

/// A reconnect with `Last-Event-ID` (or `?since=`) gets `subscribed`
/// with `recovered:true`, exactly the messages after it, then live ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_event_id_resumes_exactly() {
    let srv = TestServer::start(with_history);
    let addr = srv.addr;
    for i in 1..=5 {
        publish(addr, "news", &format!("m{i}")).await;
    }
    let e = epoch(addr, "news").await;
    let last = format!("news:{e}:2");
    let mut sse = Sse::open(addr, "/sse?channel=news", &[("Last-Event-ID", &last)]).await;
    let sub = sse.next_event().await;
    assert_eq!(sub.name, "subscribed");
    assert_eq!(sub.id, Some(format!("news:{e}:5")));
    assert_eq!(sub.json()["recovered"], true);
    for i in 3..=5 {
        let m = sse.next_event().await;
        assert_eq!(
            (m.name.as_str(), m.id.clone()),
            ("message", Some(format!("news:{e}:{i}")))
        );
        assert_eq!(m.json()["data"], format!("m{i}"));
    }
    publish(addr, "news", "m6").await;
    let m = sse.next_event().await;
    assert_eq!(m.id, Some(format!("news:{e}:6")));
    assert_eq!(m.json()["data"], "m6");

    // `?since=` does the same (URLSearchParams escapes the colons).
    let target = format!("/sse?channel=news&since=news%3A{e}%3A4");
    let mut sse = Sse::open(addr, &target, &[]).await;
    assert_eq!(sse.next_event().await.json()["recovered"], true);
    let got: Vec<_> = [sse.next_event().await, sse.next_event().await]
        .iter()
        .map(|m| m.json()["data"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(got, ["m5", "m6"]);

    // Several channels: Last-Event-ID names one; the others' positions
    // are unknown on a reconnect, so each gets one `gap`.
    publish(addr, "other", "o1").await;
    let eo = epoch(addr, "other").await;
    let mut sse = Sse::open(
        addr,
        "/sse?channel=news&channel=other",
        &[("Last-Event-ID", &format!("news:{e}:5"))],
    )
    .await;
    let sub = sse.next_event().await;
    assert_eq!(
        (sub.name.as_str(), sub.json()["recovered"].as_bool()),
        ("subscribed", Some(true))
    );
    assert_eq!(sse.next_event().await.json()["data"], "m6");
    let gap = sse.next_event().await;
    assert_eq!(
        (gap.name.as_str(), gap.id),
        ("gap", Some(format!("other:{eo}:1")))
    );
}

/// A position history no longer covers (trimmed, or another epoch) gets
/// exactly one `gap` event at the channel's position, then live ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_history_cannot_cover_is_one_gap() {
    let srv = TestServer::start(|c| c.history.size = 2);
    let addr = srv.addr;
    for i in 1..=5 {
        publish(addr, "c", &format!("m{i}")).await;
    }
    let e = epoch(addr, "c").await;
    let lasts = [format!("c:{e}:1"), "c:0000000000000000:4".to_string()];
    for (top, last) in (5..).zip(lasts) {
        let mut sse = Sse::open(addr, "/sse?channel=c", &[("Last-Event-ID", &last)]).await;
        let gap = sse.next_event().await;
        assert_eq!(gap.name, "gap", "{last}");
        assert_eq!(gap.id, Some(format!("c:{e}:{top}")));
        assert_eq!(
            gap.json(),
            serde_json::json!({"type":"gap","channel":"c","epoch":e,"offset":top})
        );
        publish(addr, "c", "live").await;
        let m = sse.next_event().await;
        assert_eq!(
            (m.name.as_str(), m.json()["data"].as_str()),
            ("message", Some("live"))
        );
    }
}

/// Bad input is answered 400 with the reason, and counted: an invalid
/// `Last-Event-ID`, a bad `since`, no channel, a name outside the
/// charset (reserved ones included, escaped or not), a body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_400_and_counted() {
    let srv = TestServer::start(with_history);
    let addr = srv.addr;
    let cases: &[(&str, Headers, &str)] = &[
        (
            "/sse?channel=a",
            &[("Last-Event-ID", "garbage")],
            "Last-Event-ID",
        ),
        (
            "/sse?channel=a",
            &[("Last-Event-ID", "a:e:-1")],
            "Last-Event-ID",
        ),
        (
            "/sse?channel=a",
            &[("Last-Event-ID", "b:e:1")],
            "Last-Event-ID",
        ),
        ("/sse?channel=a&since=a%3Ae", &[], "since"),
        ("/sse", &[], "channel"),
        ("/sse?channel=", &[], "invalid channel"),
        ("/sse?channel=%21status", &[], "invalid channel"),
        (
            "/sse?channel=pusher%2F1%2Fpresence-room",
            &[],
            "invalid channel",
        ),
        (
            "/sse?channel=pusher/1/presence-room",
            &[],
            "invalid channel",
        ),
        ("/sse?channel=presence/room", &[], "invalid channel"),
        ("/sse?channel=a", &[("Content-Length", "2")], "no body"),
    ];
    for (i, (target, headers, reason)) in cases.iter().enumerate() {
        let mut sse = Sse::request(addr, target, headers).await;
        assert_eq!(sse.status, 400, "{target} {headers:?}: {}", sse.head);
        let body = sse.error_body().await;
        let msg = body["error"].as_str().unwrap_or_default();
        assert!(msg.contains(reason), "{target}: {msg}");
        let body_case = headers.iter().any(|(k, _)| *k == "Content-Length");
        if !body_case {
            wait_stat(addr, "sse_refused", |n| n == i as u64 + 1).await;
        }
    }
    let s = stats(addr).await;
    assert_eq!(counter(&s, "sse_opened"), 0);
    assert_eq!(counter(&s, "subscriptions"), 0);
}

/// One request names at most `--sse-max-channels` channels (and no more
/// than `--max-subscriptions`): one more is answered 400, a thousand too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_channel_bound_is_400_one_past_it() {
    let srv = TestServer::start(|c| {
        c.http.max_handshake_bytes = 64 << 10;
        c.max_subscriptions = 2000;
    });
    let addr = srv.addr;
    let target = |n: usize| {
        let q: Vec<String> = (0..n).map(|i| format!("channel=c{i}")).collect();
        format!("/sse?{}", q.join("&"))
    };
    let mut ok = Sse::open(addr, &target(64), &[]).await;
    assert_eq!(ok.next_event().await.name, "subscribed");
    wait_stat(addr, "subscriptions", |n| n == 64).await;
    for n in [65, 1000] {
        let mut sse = Sse::request(addr, &target(n), &[]).await;
        assert_eq!(sse.status, 400, "{n} channels");
        let msg = sse.error_body().await["error"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(msg.contains("--sse-max-channels"), "{msg}");
    }
    assert_eq!(counter(&stats(addr).await, "sse_refused"), 2);
    // --max-subscriptions bounds it too.
    let small = TestServer::start(|c| c.max_subscriptions = 3);
    assert_eq!(Sse::request(small.addr, &target(4), &[]).await.status, 400);
    Sse::open(small.addr, &target(3), &[]).await;
}

/// The HTTP head limits hold on `/sse`: too many headers, or a head
/// (a huge `Last-Event-ID`) past `--max-handshake-bytes`, are 431.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_floods_are_431() {
    let srv = TestServer::start(with_history);
    let addr = srv.addr;
    let many: Vec<(String, String)> = (0..70).map(|i| (format!("X-H{i}"), "v".into())).collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(
        Sse::request(addr, "/sse?channel=a", &many).await.status,
        431
    );
    let huge = format!("a:e:{}", "1".repeat(9000));
    let sse = Sse::request(addr, "/sse?channel=a", &[("Last-Event-ID", &huge)]).await;
    assert_eq!(sse.status, 431);
    assert_eq!(counter(&stats(addr).await, "sse_opened"), 0);
}

const SECRET: &str = "sse-secret";

fn token(subscribe: &str, exp: u64) -> String {
    let claims = format!(r#"{{"exp":{exp},"sub":"u","subscribe":{subscribe}}}"#);
    sign_token(&claims, SECRET.as_bytes())
}

/// The rules of a WebSocket subscriber: a token in `?token=` or
/// `Authorization: Bearer`, every channel granted; a stream whose token
/// expires ends with a `close` event (4001).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_checked_as_for_websockets() {
    let srv = TestServer::start(|c| c.auth.token_secret = Some(Secret(SECRET.into())));
    let addr = srv.addr;
    let good = token(r#"["news","room-*"]"#, unix_now() + 3600);
    assert_eq!(
        Sse::request(addr, "/sse?channel=news", &[]).await.status,
        401
    );
    Sse::open(addr, &format!("/sse?channel=news&token={good}"), &[]).await;
    let bearer = format!("Bearer {good}");
    Sse::open(
        addr,
        "/sse?channel=room-1&channel=news",
        &[("Authorization", &bearer)],
    )
    .await;
    let mut sse = Sse::request(
        addr,
        "/sse?channel=news&channel=other",
        &[("Authorization", &bearer)],
    )
    .await;
    assert_eq!(sse.status, 403);
    assert!(sse.error_body().await["error"]
        .as_str()
        .unwrap()
        .contains("grant"));
    let expired = token(r#"["news"]"#, unix_now() - 10);
    assert_eq!(
        Sse::request(addr, &format!("/sse?channel=news&token={expired}"), &[])
            .await
            .status,
        401
    );
    let s = stats(addr).await;
    assert_eq!(counter(&s, "sse_refused"), 3);
    assert_eq!(counter(&s, "auth_failures"), 3);

    let soon = token(r#"["news"]"#, unix_now() + 2);
    let mut sse = Sse::open(addr, &format!("/sse?channel=news&token={soon}"), &[]).await;
    assert_eq!(sse.next_event().await.name, "subscribed");
    let rest = within_for(Duration::from_secs(10), "token expiry", sse.rest()).await;
    let close = rest.last().expect("a close event");
    assert_eq!(close.name, "close");
    assert_eq!(close.json()["code"], 4001);
}

/// Heartbeat comments come every `--sse-heartbeat`, and keep a stream
/// that never sends anything open past `--idle-timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_a_silent_stream_open() {
    let srv = TestServer::start(|c| {
        c.sse.heartbeat_ms = 200;
        c.idle_timeout = Duration::from_millis(300);
    });
    let addr = srv.addr;
    let mut sse = Sse::open(addr, "/sse?channel=a", &[]).await;
    assert_eq!(sse.next_event().await.name, "subscribed");
    for _ in 0..4 {
        let beat = sse.raw(chunk(": heartbeat\n\n").len()).await;
        assert_eq!(beat, chunk(": heartbeat\n\n").as_bytes());
    }
    // A second past the idle timeout: still open, still served.
    assert_eq!(publish(addr, "a", "still here").await, 1);
    assert_eq!(sse.next_event().await.json()["data"], "still here");
    assert_eq!(counter(&stats(addr).await, "idle_timeouts"), 0);
}

/// A stream that does not read is cut as a slow WebSocket is: what
/// reached it is a gap-free prefix, then a `close` event (1008) and the
/// last chunk; a healthy stream beside it misses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_stream_is_cut_with_a_close_event() {
    let srv = TestServer::start(|c| {
        c.max_outbound_queue = 64 << 10;
        c.slow_consumer_grace = Duration::from_millis(200);
    });
    let addr = srv.addr;
    let mut slow = Sse::open_small_rcvbuf(addr, "/sse?channel=feed", 4096).await;
    let mut healthy = Sse::open(addr, "/sse?channel=feed", &[]).await;
    assert_eq!(healthy.next_event().await.name, "subscribed");
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        loop {
            let e = healthy.next_event().await;
            let d = e.json()["data"].as_str().unwrap().to_string();
            if d == "done" {
                return got;
            }
            got.push(d);
        }
    });
    let mut http = HttpConn::connect(addr).await;
    let filler = "x".repeat(1000);
    let mut sent = 0;
    while counter(&stats(addr).await, "slow_consumer_disconnects") == 0 {
        for _ in 0..50 {
            http.publish("feed", &format!("{sent} {filler}")).await;
            sent += 1;
        }
        assert!(sent < 100_000, "never cut");
    }
    http.publish("feed", "done").await;
    let got = within("healthy stream", reader).await.unwrap();
    assert_eq!(got.len(), sent, "the healthy stream missed messages");
    let events = within_for(Duration::from_secs(20), "slow stream's end", slow.rest()).await;
    let (close, messages) = events.split_last().expect("events");
    assert_eq!(close.name, "close");
    assert_eq!(close.json()["code"], 1008);
    assert_eq!(messages[0].name, "subscribed");
    for (i, m) in messages[1..].iter().enumerate() {
        let d = m.json()["data"].as_str().unwrap().to_string();
        assert!(d.starts_with(&format!("{i} ")), "gap at {i}");
    }
    assert!(messages.len() < sent, "not slow?");
    wait_stat(addr, "sse_connections", |n| n == 1).await;
}

/// A quiet stream parks (its tasks freed) and resumes for a publish; a
/// client that leaves while it is parked is taken out of the books.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_streams_park_and_resume() {
    let srv = TestServer::start(|c| c.park_after = Duration::from_millis(100));
    let addr = srv.addr;
    let mut sse = Sse::open(addr, "/sse?channel=p", &[]).await;
    assert_eq!(sse.next_event().await.name, "subscribed");
    wait_stat(addr, "parked_connections", |n| n == 1).await;
    for i in 0..3 {
        assert_eq!(publish(addr, "p", &format!("m{i}")).await, 1);
        assert_eq!(sse.next_event().await.json()["data"], format!("m{i}"));
        wait_stat(addr, "parked_connections", |n| n == 1).await;
    }
    let s = stats(addr).await;
    assert!(counter(&s, "parks") >= 4, "{s}");
    assert_eq!(counter(&s, "sse_connections"), 1);
    let metrics = get(addr, "/metrics").await;
    let text = String::from_utf8(metrics.body).unwrap();
    assert!(text.contains("corecast_sse_connections 1\n"), "{text}");
    assert!(text.contains("corecast_sse_opened_total 1\n"));
    drop(sse);
    let s = wait_stat(addr, "sse_connections", |n| n == 0).await;
    assert_eq!(counter(&s, "sse_closed"), 1);
    assert_eq!(counter(&s, "parked_connections"), 0);
    assert_eq!(
        counter(&s, "websockets_opened"),
        0,
        "streams are not counted as WebSockets"
    );
    // Only the stats request itself is left.
    wait_stat(addr, "connections", |n| n == 1).await;
}

/// A stream whose client sends bytes anyway (past the bound) is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_talks_is_closed() {
    use tokio::io::AsyncWriteExt;
    let srv = TestServer::start(|_| {});
    let mut sse = Sse::open(srv.addr, "/sse?channel=q", &[]).await;
    assert_eq!(sse.next_event().await.name, "subscribed");
    let junk = vec![b'x'; 20 * 1024];
    sse.stream.write_all(&junk).await.expect("send");
    let rest = sse.rest().await;
    assert_eq!(
        rest.last().map(|e| e.json()["code"].clone()),
        Some(1008.into())
    );
    assert_eq!(counter(&stats(srv.addr).await, "sse_refused"), 1);
}

/// Graceful shutdown ends a stream with a `close` event (1001) and the
/// last chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_streams_with_a_close_event() {
    let srv = TestServer::start(|_| {});
    let mut sse = Sse::open(srv.addr, "/sse?channel=s", &[]).await;
    assert_eq!(sse.next_event().await.name, "subscribed");
    srv.stop();
    let rest = sse.rest().await;
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(
        (rest[0].name.as_str(), rest[0].json()["code"].as_u64()),
        ("close", Some(1001))
    );
    srv.join().await.expect("clean exit");
}

/// `curl -N` subscribes, resumes with `Last-Event-ID`, and prints the
/// events as they come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_streams_and_resumes() {
    let srv = TestServer::start(with_history);
    let addr = srv.addr;
    publish(addr, "c", "one").await;
    publish(addr, "c", "two").await;
    let e = epoch(addr, "c").await;
    let curl = Curl::spawn(&[
        "-N",
        "-s",
        "-H",
        &format!("Last-Event-ID: c:{e}:1"),
        &format!("http://{addr}/sse?channel=c"),
    ]);
    let next = async || curl.line();
    assert_eq!(next().await, format!("id: c:{e}:2"));
    assert_eq!(next().await, "event: subscribed");
    assert!(next().await.contains(r#""recovered":true"#));
    assert_eq!(next().await, "");
    assert_eq!(next().await, format!("id: c:{e}:2"));
    assert_eq!(next().await, "event: message");
    assert!(next().await.contains(r#""data":"two""#));
    assert_eq!(next().await, "");
    publish(addr, "c", "three").await;
    assert_eq!(next().await, format!("id: c:{e}:3"));
    assert_eq!(next().await, "event: message");
    assert!(next().await.contains(r#""data":"three""#));
}

/// `curl` in its own process, its stdout read line by line by a thread;
/// killed on drop.
struct Curl {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Curl {
    fn spawn(args: &[&str]) -> Curl {
        use std::io::BufRead;
        let mut child = std::process::Command::new("curl")
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("curl is installed (apt-get install curl)");
        let out = std::io::BufReader::new(child.stdout.take().expect("piped"));
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Curl { child, lines }
    }

    /// The next line curl printed, within the deadline.
    fn line(&self) -> String {
        tokio::task::block_in_place(|| self.lines.recv_timeout(DEADLINE)).expect("a line from curl")
    }
}

impl Drop for Curl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A parked stream's heartbeat goes out where the stream lies (one
/// nonblocking send, no task): it stays parked between heartbeats, and a
/// publish still resumes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_reach_parked_streams_without_waking_them() {
    let srv = TestServer::start(|c| {
        c.park_after = Duration::from_millis(100);
        c.sse.heartbeat_ms = 300;
    });
    let addr = srv.addr;
    let mut sse = Sse::open(addr, "/sse?channel=h", &[]).await;
    assert_eq!(sse.next_event().await.name, "subscribed");
    wait_stat(addr, "parked_connections", |n| n == 1).await;
    let beat = chunk(": heartbeat\n\n");
    for _ in 0..4 {
        assert_eq!(sse.raw(beat.len()).await, beat.as_bytes());
    }
    let s = stats(addr).await;
    assert!(counter(&s, "parked_writes") >= 3, "{s}");
    assert_eq!(counter(&s, "parked_connections"), 1, "{s}");
    assert_eq!(publish(addr, "h", "after").await, 1);
    assert_eq!(sse.next_event().await.json()["data"], "after");
    assert_eq!(sse.raw(beat.len()).await, beat.as_bytes());
}
