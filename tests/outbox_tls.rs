//! A PostgreSQL outbox consumer over TLS with verification: a server
//! certificate signed by a test CA (`tls_ca=`) is accepted and the
//! connection is encrypted (PostgreSQL's own `pg_stat_ssl` says so); one
//! signed by another CA is refused: the consumer never claims a row.

mod common;
mod pg_support;
mod tls_support;

use common::*;
use futures_util::SinkExt;
use pg_support::{documented_ddl, Postgres};
use serde_json::json;
#[allow(unused_imports)] // pg_support's `crate::free_port`
use tls_support::free_port;
use tls_support::Pki;
use tokio_tungstenite::tungstenite::Message;

async fn one_row(pg: &Postgres, channel: &str) {
    pg.client()
        .await
        .execute(
            "INSERT INTO corecast_outbox (channel, data) VALUES ($1, '{\"tls\": true}')",
            &[&channel],
        )
        .await
        .expect("insert");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_verifies_the_databases_certificate() {
    let pki = Pki::new("pg");
    let (cert, key) = pki.leaf("pg", "IP:127.0.0.1,DNS:localhost");
    let pg = Postgres::start_tls(&cert, &key);
    pg.client()
        .await
        .batch_execute(&documented_ddl())
        .await
        .expect("ddl");
    let ca = pki.ca().display().to_string();
    let url = pg.url(&format!(
        "?sslmode=require&application_name=cc-tls&tls_ca={ca}"
    ));
    let srv = TestServer::start(|c| c.consumers.push(url.parse().expect("consumer url")));
    let mut ws = ws_connect(srv.addr, "/ws").await;
    let req = json!({"op":"subscribe","channel":"secure"});
    ws.send(Message::text(req.to_string())).await.expect("send");
    assert_eq!(next_json(&mut ws).await["type"], "subscribed");
    one_row(&pg, "secure").await;
    let m = next_json(&mut ws).await;
    assert_eq!(m["data"], r#"{"tls": true}"#, "{m}");
    let ssl: bool = pg
        .client()
        .await
        .query_one(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'cc-tls'",
            &[],
        )
        .await
        .expect("the consumer's connection")
        .get(0);
    assert!(ssl, "the consumer's connection is encrypted");

    // A certificate from another CA: refused, nothing published.
    let other = Pki::new("pg-other");
    let wrong = format!(
        "?sslmode=require&name=wrong&tls_ca={}",
        other.ca().display()
    );
    let url = pg.url(&wrong);
    let srv = TestServer::start(|c| c.consumers.push(url.parse().expect("consumer url")));
    let s = wait_until_stat(srv.addr, |s| {
        s["consumers"]["wrong"]["errors"].as_u64() >= Some(2)
    })
    .await;
    let c = &s["consumers"]["wrong"];
    assert_eq!(
        (&c["connected"], &c["claims"]),
        (&json!(0), &json!(0)),
        "{s}"
    );
}
