//! Fossil deltas end to end (a namespace's `delta = "fossil"`): a
//! subscriber that asks gets its first message full, then deltas of the
//! previous one (`"delta":true`, the delta as `data`) that rebuild every
//! document exactly; a subscriber that did not ask, and one that missed
//! the base (filtered out, just resumed with nothing replayed), gets the
//! full payload; permessage-deflate compresses the delta; the refusals of
//! bad requests. Redis mode: `deltas_redis.rs`.

mod common;

use common::*;
use corecast::delta;
use flate2::{Decompress, FlushDecompress};
use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

fn server(namespaces: &[&str]) -> TestServer {
    let specs: Vec<String> = namespaces.iter().map(|s| s.to_string()).collect();
    TestServer::start(move |c| {
        for s in &specs {
            c.namespaces.specs.add_compact(s, "test").unwrap();
        }
        c.history.size = 100;
    })
}

async fn call(ws: &mut Ws, request: Value) -> Value {
    send(ws, request).await;
    next_json(ws).await
}

async fn send(ws: &mut Ws, request: Value) {
    ws.send(Message::text(request.to_string()))
        .await
        .expect("send");
}

/// A 2–3 KB scoreboard; `n` changes a few scores.
fn doc(n: u32) -> String {
    let rows: Vec<Value> = (0..40)
        .map(|i| json!({"team": format!("team-{i:02}"), "score": 1000 + i * 3 + (n * (i % 3 == 0) as u32)}))
        .collect();
    json!({"round": n, "rows": rows}).to_string()
}

/// A subscriber's view: applies each delta to its previous message, as a
/// client does; (was a delta, the document).
#[derive(Default)]
struct Reader {
    base: Option<String>,
}

impl Reader {
    fn read(&mut self, m: &Value) -> (bool, String) {
        assert_eq!(m["type"], "message", "{m}");
        let data = m["data"].as_str().expect("text data");
        let is_delta = m.get("delta") == Some(&Value::Bool(true));
        let full = if is_delta {
            let base = self
                .base
                .as_deref()
                .expect("a delta only after a full message");
            let out = delta::apply(base.as_bytes(), data.as_bytes(), 1 << 20)
                .expect("the delta's base is the message before");
            String::from_utf8(out).unwrap()
        } else {
            data.to_string()
        };
        self.base = Some(full.clone());
        (is_delta, full)
    }
}

async fn subscribe_delta(ws: &mut Ws, channel: &str, extra: Value) -> Value {
    let mut req = json!({"op":"subscribe","channel":channel,"delta":"fossil","id":1});
    for (k, v) in extra.as_object().unwrap() {
        req[k] = v.clone();
    }
    call(ws, req).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_subscriber_rebuilds_every_document_from_deltas() {
    let srv = server(&["doc:delta=fossil"]);
    let addr = srv.addr;
    let mut ds = ws_connect(addr, "/ws").await;
    let r = subscribe_delta(&mut ds, "doc:board", json!({})).await;
    assert_eq!(
        (&r["type"], &r["delta"]),
        (&json!("subscribed"), &json!(true)),
        "{r}"
    );
    let mut plain = ws_connect(addr, "/ws").await;
    let r = call(
        &mut plain,
        json!({"op":"subscribe","channel":"doc:board","id":1}),
    )
    .await;
    assert_eq!(r.get("delta"), None, "not asked, not granted: {r}");
    let mut publisher = ws_connect(addr, "/ws").await;
    for n in 0..6 {
        if n % 2 == 0 {
            let p = json!({"op":"publish","channel":"doc:board","data":doc(n),"delta":true,"id":2});
            assert_eq!(call(&mut publisher, p).await["type"], "published");
        } else {
            // An escaped `:` (as encodeURIComponent writes it) names the
            // same channel.
            let path =
                ["/publish/doc:board?delta=1", "/publish/doc%3Aboard?delta=1"][n as usize / 2 % 2];
            let r = post(addr, path, doc(n).as_bytes()).await;
            assert_eq!(r.status, 200, "{r:?}");
        }
    }
    // Not asked for: full to everyone.
    post(addr, "/publish/doc:board", doc(6).as_bytes()).await;
    let mut reader = Reader::default();
    let (mut kinds, mut sizes) = (Vec::new(), Vec::new());
    for n in 0..7 {
        let m = next_json(&mut ds).await;
        assert_eq!(m["offset"], n + 1, "{m}");
        sizes.push(m["data"].as_str().unwrap().len());
        let (is_delta, full) = reader.read(&m);
        assert_eq!(full, doc(n as u32), "message {n} rebuilt exactly");
        kinds.push(is_delta);
    }
    assert_eq!(kinds, [false, true, true, true, true, true, false]);
    assert!(sizes[1] * 5 < sizes[0], "a delta is small: {sizes:?}");
    for n in 0..7 {
        let m = next_json(&mut plain).await;
        assert_eq!(
            (m.get("delta"), m["data"].as_str().unwrap()),
            (None, &doc(n)[..])
        );
    }
    // Counted: the five deltas ds was sent.
    let s = wait_stat(addr, "delta_deliveries", |n| n >= 5).await;
    assert_eq!(counter(&s, "delta_deliveries"), 5);
    // History holds full payloads.
    let h = get(addr, "/history/doc:board?since=0").await.json();
    assert_eq!(h["messages"][1]["data"], doc(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_with_nothing_replayed_starts_full() {
    // Centrifugo's bug (centrifuge#629): a resumed subscriber was sent a
    // delta against a base it never had.
    let srv = server(&["doc:delta=fossil,delta-publish=true"]);
    let addr = srv.addr;
    // Another subscriber keeps up all along: the channel's deltas are
    // made for it, and must not reach the resumed one.
    let mut steady = ws_connect(addr, "/ws").await;
    subscribe_delta(&mut steady, "doc:x", json!({})).await;
    let mut a = ws_connect(addr, "/ws").await;
    let r = subscribe_delta(&mut a, "doc:x", json!({})).await;
    let epoch = r["epoch"].as_str().unwrap().to_string();
    let mut reader = Reader::default();
    for n in 0..2 {
        // delta-publish: every publication may go as a delta, unasked.
        post(addr, "/publish/doc:x", doc(n).as_bytes()).await;
    }
    assert!(!reader.read(&next_json(&mut a).await).0);
    assert!(reader.read(&next_json(&mut a).await).0, "delta-publish");
    drop(a);
    // A new connection resumes at offset 2: nothing to replay. Its client
    // may still hold document 1 from before, but the server cannot know.
    let mut b = ws_connect(addr, "/ws").await;
    let since = json!({"since":{"epoch":epoch,"offset":2}});
    let r = subscribe_delta(&mut b, "doc:x", since).await;
    assert_eq!(
        (&r["recovered"], &r["delta"]),
        (&json!(true), &json!(true)),
        "{r}"
    );
    post(addr, "/publish/doc:x", doc(2).as_bytes()).await;
    let m = next_json(&mut b).await;
    assert_eq!(
        (m.get("delta"), m["offset"].as_u64()),
        (None, Some(3)),
        "full: {m}"
    );
    // And the same connection resubscribing: full again after its reply.
    let since = json!({"since":{"epoch":epoch,"offset":3}});
    let r = subscribe_delta(&mut b, "doc:x", since).await;
    assert_eq!(r["recovered"], true, "{r}");
    post(addr, "/publish/doc:x", doc(3).as_bytes()).await;
    assert_eq!(next_json(&mut b).await.get("delta"), None);
    post(addr, "/publish/doc:x", doc(4).as_bytes()).await;
    assert_eq!(next_json(&mut b).await["delta"], true, "then deltas");
    let mut steady_reader = Reader::default();
    for n in 0..5 {
        let (is_delta, full) = steady_reader.read(&next_json(&mut steady).await);
        assert_eq!((is_delta, full), (n > 0, doc(n)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_subscriber_gets_full_after_what_it_did_not_see() {
    let srv = server(&["doc:delta=fossil,delta-publish=true"]);
    let addr = srv.addr;
    let mut f = ws_connect(addr, "/ws").await;
    let filter = json!({"filter":{"key":"side","cmp":"eq","val":"buy"}});
    let r = subscribe_delta(&mut f, "doc:o", filter).await;
    assert_eq!(
        (&r["filtered"], &r["delta"]),
        (&json!(true), &json!(true)),
        "{r}"
    );
    for (n, side) in [(0, "buy"), (1, "buy"), (2, "sell"), (3, "buy"), (4, "buy")] {
        let r = post(
            addr,
            &format!("/publish/doc:o?tag.side={side}"),
            doc(n).as_bytes(),
        )
        .await;
        assert_eq!(r.status, 200);
    }
    let mut reader = Reader::default();
    let mut got = Vec::new();
    for _ in 0..4 {
        let (is_delta, full) = reader.read(&next_json(&mut f).await);
        got.push((is_delta, full));
    }
    let want = [(false, 0), (true, 1), (false, 3), (true, 4)];
    for ((is_delta, full), (d, n)) in got.iter().zip(want) {
        assert_eq!((*is_delta, full.as_str()), (d, &doc(n)[..]));
    }
}

/// Inflates one message of a server that agreed `server_no_context_takeover`.
fn inflate(payload: &[u8]) -> Vec<u8> {
    let input = [payload, &[0, 0, 0xff, 0xff]].concat();
    let mut out = Vec::with_capacity(payload.len() * 20 + 1024);
    let mut z = Decompress::new(false);
    z.decompress_vec(&input, &mut out, FlushDecompress::Sync)
        .expect("valid DEFLATE");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deltas_are_compressed_for_deflate_connections() {
    let srv = TestServer::start(|c| {
        c.namespaces
            .specs
            .add_compact("doc:delta=fossil,delta-publish=true", "test")
            .unwrap();
        c.compression.enabled = true;
        c.compression.min_size = 32;
    });
    let offer = "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n";
    let (mut ws, _) = RawWs::connect_with(srv.addr, "/ws", offer).await;
    let req = json!({"op":"subscribe","channel":"doc:z","delta":"fossil","id":1});
    ws.send(0x81, req.to_string().as_bytes()).await;
    let ack: Value = serde_json::from_slice(&ws.next_frame().await.payload).unwrap();
    assert_eq!(ack["delta"], true, "{ack}");
    // Documents with a long changing part: deltas long enough to compress.
    let big = |n: u32| {
        let text: String = (0..300)
            .map(|i| format!("{} ", (i * 7 + n) % 1000))
            .collect();
        json!({"n": n, "text": text, "rows": doc(0)}).to_string()
    };
    let mut reader = Reader::default();
    for n in 0..3 {
        post(srv.addr, "/publish/doc:z", big(n).as_bytes()).await;
        let f = ws.next_frame().await;
        let text = if f.rsv & 0b100 != 0 {
            inflate(&f.payload)
        } else {
            f.payload
        };
        let m: Value = serde_json::from_slice(&text).unwrap();
        let (is_delta, full) = reader.read(&m);
        assert_eq!((is_delta, full), (n > 0, big(n)));
        if n > 0 {
            assert_ne!(f.rsv & 0b100, 0, "the delta frame is compressed");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_delta_requests_get_clear_errors_and_the_connection_goes_on() {
    let srv = server(&["doc:delta=fossil", "plain:publish=clients"]);
    let addr = srv.addr;
    let mut ws = ws_connect(addr, "/ws").await;
    let cases = [
        (
            json!({"op":"subscribe","channel":"doc:a","delta":"xdelta","id":1}),
            "invalid_delta",
        ),
        (
            json!({"op":"subscribe","channel":"doc:a","delta":true,"id":1}),
            "invalid_delta",
        ),
        (
            json!({"op":"subscribe","channel":"plain:a","delta":"fossil","id":1}),
            "delta_not_allowed",
        ),
        (
            json!({"op":"publish","channel":"doc:a","data":"x","delta":"yes","id":1}),
            "invalid_delta",
        ),
        (
            json!({"op":"publish","channel":"plain:a","data":"x","delta":true,"id":1}),
            "delta_not_allowed",
        ),
    ];
    for (req, code) in cases {
        let r = call(&mut ws, req.clone()).await;
        assert_eq!(
            (&r["type"], &r["code"]),
            (&json!("error"), &json!(code)),
            "{req} → {r}"
        );
    }
    assert_eq!(
        post(addr, "/publish/plain:a?delta=1", b"x").await.status,
        400
    );
    assert_eq!(
        post(addr, "/publish/doc:a?delta=maybe", b"x").await.status,
        400
    );
    // A client that publishes a delta-looking payload: it is data, sent
    // as such (a delta is only ever the server's).
    let r = subscribe_delta(&mut ws, "doc:a", json!({})).await;
    assert_eq!(r["delta"], true);
    let looks = "3\n3:abc2Mhy5;";
    let p = json!({"op":"publish","channel":"doc:a","data":looks,"delta":true,"id":3});
    send(&mut ws, p).await;
    // The reply and the message, in either order.
    let (a, b) = (next_json(&mut ws).await, next_json(&mut ws).await);
    let (r, m) = if a["type"] == "published" {
        (a, b)
    } else {
        (b, a)
    };
    assert_eq!(r["type"], "published", "{r}");
    assert_eq!((m.get("delta"), &m["data"]), (None, &json!(looks)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publication_that_makes_the_search_slow_goes_whole() {
    // Periodic data makes Fossil's search compare ~250 bytes per byte:
    // past the work budget the server sends the message whole rather
    // than stall its worker for it.
    let srv = server(&["doc:delta=fossil,delta-publish=true"]);
    let addr = srv.addr;
    let mut ws = ws_connect(addr, "/ws").await;
    assert_eq!(
        subscribe_delta(&mut ws, "doc:p", json!({})).await["delta"],
        true
    );
    let src: String = (0..48 * 1024)
        .map(|i| (b'a' + (i % 17) as u8) as char)
        .collect();
    let mut tgt = src.clone().into_bytes();
    for i in (0..tgt.len()).step_by(997) {
        tgt[i] = b'Z';
    }
    let tgt = String::from_utf8(tgt).unwrap();
    let ordinary = [doc(1), doc(2)];
    for body in [&src, &tgt, &ordinary[0], &ordinary[1]] {
        assert_eq!(
            post(addr, "/publish/doc:p", body.as_bytes()).await.status,
            200
        );
    }
    let mut reader = Reader::default();
    let mut kinds = Vec::new();
    for want in [&src, &tgt, &ordinary[0], &ordinary[1]] {
        let (is_delta, full) = reader.read(&next_json(&mut ws).await);
        assert_eq!(&full, want);
        kinds.push(is_delta);
    }
    assert_eq!(
        kinds,
        [false, false, false, true],
        "over budget: whole; ordinary: a delta"
    );
}
