//! `/metrics` parses as Prometheus text and its numbers follow the traffic.

mod common;

use common::*;
use futures_util::SinkExt;
use prometheus_parse::{Scrape, Value};
use tokio_tungstenite::tungstenite::Message;

async fn scrape(addr: std::net::SocketAddr) -> Scrape {
    let r = get(addr, "/metrics").await;
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/plain; version=0.0.4")));
    let text = String::from_utf8(r.body.clone()).expect("UTF-8 exposition");
    Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("valid Prometheus text")
}

fn value(s: &Scrape, name: &str) -> f64 {
    let sample = s
        .samples
        .iter()
        .find(|x| x.metric == name)
        .unwrap_or_else(|| panic!("no sample {name}"));
    match &sample.value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
        Value::Histogram(h) => h.iter().map(|b| b.count).fold(0.0, f64::max),
        other => panic!("{name}: unexpected {other:?}"),
    }
}

#[tokio::test]
async fn metrics_parse_and_follow_the_traffic() {
    let srv = TestServer::start(|_| {});
    let before = scrape(srv.addr).await;
    assert_eq!(value(&before, "corecast_deliveries_total"), 0.0);
    let mut a = ws_connect(srv.addr, "/ws/m").await;
    let mut b = ws_connect(srv.addr, "/ws/m").await;
    a.send(Message::text("hello")).await.unwrap();
    assert_eq!(next_text(&mut a).await, "hello");
    assert_eq!(next_text(&mut b).await, "hello");
    let s = scrape(srv.addr).await;
    assert_eq!(value(&s, "corecast_deliveries_total"), 2.0);
    assert_eq!(value(&s, "corecast_messages_in_total"), 1.0);
    assert_eq!(value(&s, "corecast_channels"), 1.0);
    assert_eq!(value(&s, "corecast_subscriptions"), 2.0);
    assert_eq!(value(&s, "corecast_websockets_opened_total"), 2.0);
    assert_eq!(value(&s, "corecast_ready"), 1.0);
    // Both writes that carried the message were timed.
    assert!(value(&s, "corecast_fanout_write_delay_seconds") >= 2.0);
    let closed = s
        .samples
        .iter()
        .filter(|x| x.metric == "corecast_connections_closed_total")
        .count();
    assert_eq!(closed, 6, "one series per reason");
    // Every family is documented.
    for name in s.docs.keys() {
        assert!(name.starts_with("corecast_"), "{name}");
    }
}

#[tokio::test]
async fn compression_metrics_follow_a_compressed_broadcast() {
    let srv = TestServer::start(|_| {});
    let offer = "Sec-WebSocket-Extensions: permessage-deflate\r\n";
    let (mut ws, _) = RawWs::connect_with(srv.addr, "/ws/z", offer).await;
    wait_stat(srv.addr, "subscriptions", |n| n == 1).await;
    let msg = "{\"event\":\"tick\",\"value\":12345} ".repeat(64);
    publish(srv.addr, "z", &msg).await;
    let frame = ws.next_frame().await;
    assert_eq!(frame.rsv, 0b100, "sent compressed");
    let s = scrape(srv.addr).await;
    assert_eq!(value(&s, "corecast_compression_connections"), 1.0);
    assert_eq!(value(&s, "corecast_compression_messages_total"), 1.0);
    let stage = |name: &str| {
        s.samples
            .iter()
            .find(|x| {
                x.metric == "corecast_compression_bytes_total"
                    && x.labels.get("stage") == Some(name)
            })
            .map(|x| match x.value {
                Value::Counter(v) => v,
                ref other => panic!("{other:?}"),
            })
            .expect("labelled sample")
    };
    assert_eq!(stage("in"), msg.len() as f64);
    assert_eq!(
        stage("out"),
        (frame.header.len() + frame.payload.len()) as f64
    );
    assert!(value(&s, "corecast_compression_seconds_total") > 0.0);
    assert_eq!(
        value(&s, "corecast_compression_inflated_messages_total"),
        0.0
    );
}
