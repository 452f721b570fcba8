//! PostgreSQL outbox consumers with real servers: a PostgreSQL cluster
//! of its own (tests/pg_support), a real redis-server, corecast in and
//! out of process. 10,000 rows written by four concurrent writers while
//! two instances consume one table and one of them is SIGKILLed; rolled
//! back rows; a database restarted mid-run; poison rows.

mod common;
mod pg_support;
mod redis_support;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use common::*;
use futures_util::SinkExt;
use pg_support::{block, documented_ddl, Postgres};
use redis_support::*;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// A JSON subscriber of `channel`.
async fn subscriber(addr: std::net::SocketAddr, channel: &str) -> Ws {
    let mut ws = ws_connect(addr, "/ws").await;
    let req = json!({"op":"subscribe","channel":channel});
    ws.send(Message::text(req.to_string())).await.expect("send");
    let r = next_json(&mut ws).await;
    assert_eq!(r["type"], "subscribed", "{r}");
    ws
}

/// Reads messages until `want` distinct idempotency keys arrived (or
/// `limit` passed): key → copies received, and the messages in order.
async fn collect(mut ws: Ws, want: usize, limit: Duration) -> (HashMap<String, usize>, Vec<Value>) {
    let (mut keys, mut all) = (HashMap::new(), Vec::new());
    let deadline = Instant::now() + limit;
    while keys.len() < want {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(m) = tokio::time::timeout(left, next_json(&mut ws)).await else {
            break;
        };
        assert_eq!(m["type"], "message", "{m}");
        let key = m["idempotency_key"].as_str().expect("an idempotency key");
        *keys.entry(key.to_string()).or_insert(0) += 1;
        all.push(m);
    }
    (keys, all)
}

/// Writer `w`: `txs` transactions of `rows` rows each; every fifth is
/// rolled back. Returns the ids committed.
async fn writer(pg: &Postgres, w: usize, txs: usize, rows: usize) -> Vec<i64> {
    let mut client = pg.client().await;
    let mut ids = Vec::new();
    for t in 0..txs {
        let tx = client.transaction().await.expect("begin");
        let rollback = t % 5 == 4;
        let mut mine = Vec::new();
        for n in 0..rows {
            let data = json!({"w": w, "t": t, "n": n, "rollback": rollback}).to_string();
            let row = tx
                .query_one(
                    "INSERT INTO corecast_outbox (channel, data) VALUES ('orders', $1::text::jsonb) RETURNING id",
                    &[&data],
                )
                .await
                .expect("insert");
            mine.push(row.get::<_, i64>(0));
        }
        if rollback {
            tx.rollback().await.expect("rollback");
        } else {
            tx.commit().await.expect("commit");
            ids.extend(mine);
        }
    }
    ids
}

async fn ddl(pg: &Postgres) {
    pg.client()
        .await
        .batch_execute(&documented_ddl())
        .await
        .expect("the book's DDL runs");
}

/// The issue's run: 4 writers × 125 transactions × 25 rows (10,000
/// committed, 2,500 more rolled back), consumed by instance A (its own
/// process) and B; A is SIGKILLed when a third is published. Subscribers
/// on B and on C (no consumer) get every committed row, copies only with
/// the same idempotency key, nothing rolled back; the table ends empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_committed_row_reaches_every_subscriber_through_a_kill() {
    let pg = Postgres::start();
    ddl(&pg).await;
    let redis = RedisServer::start(&[]).await;
    let url = pg.url("?batch=100");
    let redis_url = format!("redis://127.0.0.1:{}", redis.port);
    let mut a = BinServer::spawn(&["--redis-url", &redis_url, "--consumer", &url]);
    let b = instance(redis.url("", ""), |c| {
        c.consumers.push(url.parse().expect("consumer url"));
    });
    let c = instance(redis.url("", ""), |_| {});
    for addr in [a.addr, b.addr, c.addr] {
        wait_readyz(addr, 200).await;
    }
    let (sb, sc) = (
        subscriber(b.addr, "orders").await,
        subscriber(c.addr, "orders").await,
    );
    let want = 10_000;
    let rb = tokio::spawn(collect(sb, want, Duration::from_secs(120)));
    let rc = tokio::spawn(collect(sc, want, Duration::from_secs(120)));
    let pg = std::sync::Arc::new(pg);
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let pg = pg.clone();
            tokio::spawn(async move { writer(&pg, w, 125, 25).await })
        })
        .collect();
    // A dies mid-run, with a batch of its own likely in flight.
    wait_until_stat(b.addr, |s| {
        s["consumers"]["corecast_outbox"]["published"].as_u64() > Some(1500)
    })
    .await;
    let by_a = stats(a.addr).await["consumers"]["corecast_outbox"]["published"].clone();
    assert!(
        by_a.as_u64() > Some(0),
        "A consumed too before it died: {by_a}"
    );
    a.child.kill().expect("SIGKILL");
    let _ = a.child.wait();
    let mut committed = HashSet::new();
    for w in writers {
        committed.extend(w.await.expect("writer"));
    }
    assert_eq!(committed.len(), want);
    for (who, r) in [("B", rb), ("C", rc)] {
        let (keys, all) = r.await.expect("reader");
        let got: HashSet<i64> = keys
            .keys()
            .map(|k| {
                k.strip_prefix("corecast_outbox:")
                    .expect("NAME:ID")
                    .parse()
                    .expect("id")
            })
            .collect();
        let missing: Vec<_> = committed.difference(&got).take(5).collect();
        assert!(
            missing.is_empty(),
            "{who}: rows never received, e.g. {missing:?}"
        );
        assert_eq!(
            got.len(),
            want,
            "{who}: a row that was never committed arrived"
        );
        for m in &all {
            let data: Value =
                serde_json::from_str(m["data"].as_str().expect("text")).expect("json");
            assert_eq!(data["rollback"], false, "{who}: a rolled-back row: {m}");
        }
        let copies = all.len() - keys.len();
        eprintln!(
            "subscriber on {who}: {} messages, {copies} copies (same key); A published {by_a} before the kill",
            all.len()
        );
    }
    let client = pg.client().await;
    let left: i64 = client
        .query_one("SELECT count(*) FROM corecast_outbox", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(left, 0, "every published row deleted");
}

/// Poison rows (a bad channel name, data over --max-message-size, tags
/// that are not strings, a channel in no namespace the server knows)
/// go to the dead-letter table with the reason; the rows behind them are
/// published, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_rows_are_dead_lettered_and_do_not_block_the_rest() {
    let pg = Postgres::start();
    ddl(&pg).await;
    let url = pg.url("?name=shop");
    let srv = TestServer::start(|c| {
        c.ws.max_message_size = 1024;
        c.namespaces
            .specs
            .add_compact("feed:history-size=10", "--namespace")
            .expect("namespace");
        c.consumers.push(url.parse().expect("consumer url"));
    });
    let mut ws = subscriber(srv.addr, "orders").await;
    let client = pg.client().await;
    let big = "x".repeat(2000);
    let rows: [(&str, String, Option<&str>); 6] = [
        ("orders", json!({"n": 1}).to_string(), None),
        ("bad channel", json!({"n": 2}).to_string(), None),
        ("orders", json!({"big": big}).to_string(), None),
        ("orders", json!({"n": 4}).to_string(), Some(r#"{"a": 1}"#)),
        ("nope:news", json!({"n": 5}).to_string(), None),
        (
            "orders",
            json!({"n": 6}).to_string(),
            Some(r#"{"region": "eu"}"#),
        ),
    ];
    for (channel, data, tags) in &rows {
        client
            .execute(
                "INSERT INTO corecast_outbox (channel, data, tags) VALUES ($1, $2::text::jsonb, $3::text::jsonb)",
                &[channel, data, tags],
            )
            .await
            .expect("insert");
    }
    let first = next_json(&mut ws).await;
    let sixth = next_json(&mut ws).await;
    assert_eq!(first["data"], r#"{"n": 1}"#, "{first}");
    assert_eq!(first["idempotency_key"], "shop:1", "{first}");
    assert_eq!(
        (sixth["data"].as_str(), &sixth["tags"]),
        (Some(r#"{"n": 6}"#), &json!({"region":"eu"}))
    );
    wait_until_stat(srv.addr, |s| {
        let c = &s["consumers"]["shop"];
        c["dead_lettered"] == 4 && c["published"] == 2
    })
    .await;
    let dead = client
        .query(
            "SELECT id, reason FROM corecast_outbox_dead ORDER BY id",
            &[],
        )
        .await
        .expect("dead letters");
    let reasons: Vec<(i64, String)> = dead.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        reasons.iter().map(|r| r.0).collect::<Vec<_>>(),
        [2, 3, 4, 5]
    );
    for (want, (_, got)) in [
        "invalid channel name",
        "over --max-message-size",
        "tags:",
        "refused (404)",
    ]
    .iter()
    .zip(&reasons)
    {
        assert!(got.contains(want), "{got} should say {want}");
    }
    let left: i64 = client
        .query_one("SELECT count(*) FROM corecast_outbox", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(left, 0);
}

/// The database stops at once (`pg_ctl -m immediate`) and comes back
/// while rows are written: the consumer reconnects and every committed
/// row is published, none twice but with the same key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restart_mid_run_loses_no_row() {
    let mut pg = Postgres::start();
    ddl(&pg).await;
    let url = pg.url("?poll=100ms");
    let srv = TestServer::start(|c| c.consumers.push(url.parse().expect("consumer url")));
    let ws = subscriber(srv.addr, "orders").await;
    let reader = tokio::spawn(collect(ws, 400, Duration::from_secs(60)));
    let mut committed = writer(&pg, 0, 10, 20).await;
    wait_until_stat(srv.addr, |s| {
        s["consumers"]["corecast_outbox"]["published"].as_u64() >= Some(160)
    })
    .await;
    pg.crash();
    wait_until_stat(srv.addr, |s| {
        s["consumers"]["corecast_outbox"]["connected"] == 0
    })
    .await;
    pg.up();
    committed.extend(writer(&pg, 1, 15, 20).await);
    assert_eq!(committed.len(), 400);
    let (keys, all) = reader.await.expect("reader");
    let got: HashSet<i64> = keys
        .keys()
        .map(|k| k.rsplit(':').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(got, committed.into_iter().collect::<HashSet<_>>());
    let s = stats(srv.addr).await;
    assert!(
        s["consumers"]["corecast_outbox"]["errors"].as_u64() >= Some(1),
        "{s}"
    );
    eprintln!("restart: {} messages for 400 rows", all.len());
}

/// The crash the outbox exists for, made certain: instance A publishes a
/// batch, then its `DELETE` stalls (a trigger sleeps, once) and A is
/// SIGKILLed before it commits. The rows come back to the table, B
/// publishes them again: the subscriber gets each twice, both copies
/// with the same idempotency key — a duplicate, never a loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_publish_and_commit_repeats_with_the_same_key() {
    let pg = Postgres::start();
    ddl(&pg).await;
    let client = pg.client().await;
    client
        .batch_execute(
            "CREATE SEQUENCE stall_once;
             CREATE FUNCTION stall() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF nextval('stall_once') = 1 THEN PERFORM pg_sleep(60); END IF;
                 RETURN OLD;
             END $$;
             CREATE TRIGGER stall BEFORE DELETE ON corecast_outbox
                 FOR EACH STATEMENT EXECUTE FUNCTION stall();",
        )
        .await
        .expect("the stalling trigger");
    let redis = RedisServer::start(&[]).await;
    let url = pg.url("");
    let redis_url = format!("redis://127.0.0.1:{}", redis.port);
    let mut a = BinServer::spawn(&["--redis-url", &redis_url, "--consumer", &url]);
    let c = instance(redis.url("", ""), |_| {});
    wait_readyz(a.addr, 200).await;
    wait_readyz(c.addr, 200).await;
    let ws = subscriber(c.addr, "orders").await;
    let mut committed = writer(&pg, 0, 1, 10).await;
    committed.sort_unstable();
    // A published all ten and is stuck deleting them.
    let reader = tokio::spawn(collect(ws, 10, Duration::from_secs(60)));
    let (first, _) = reader.await.expect("reader");
    assert_eq!(first.len(), 10);
    // A had them confirmed and is stuck in its DELETE (the trigger).
    wait_until("A's DELETE sleeping in the trigger", || async {
        let c = pg.client().await;
        let q = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'";
        c.query_one(q, &[])
            .await
            .expect("pg_stat_activity")
            .get::<_, i64>(0)
            == 1
    })
    .await;
    a.child.kill().expect("SIGKILL");
    let _ = a.child.wait();
    let ws2 = subscriber(c.addr, "orders").await;
    let b = instance(redis.url("", ""), |cfg| {
        cfg.consumers.push(url.parse().expect("consumer url"));
    });
    let (again, all) = collect(ws2, 10, Duration::from_secs(60)).await;
    assert_eq!(
        again.keys().collect::<HashSet<_>>(),
        first.keys().collect::<HashSet<_>>()
    );
    let ids: Vec<i64> = all
        .iter()
        .map(|m| {
            m["idempotency_key"]
                .as_str()
                .unwrap()
                .rsplit(':')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(
        ids, committed,
        "the same rows, in order, with the same keys"
    );
    wait_until_stat(b.addr, |s| {
        s["consumers"]["corecast_outbox"]["published"] == 10
    })
    .await;
}

/// The README's and the book's worked example, as written: the same DDL
/// and transaction in both, and what a subscriber receives is the frame
/// the book shows (its id aside).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worked_example_works_as_written() {
    let (readme, book) = (
        include_str!("../README.md"),
        include_str!("../docs/src/outbox.md"),
    );
    assert_eq!(block(readme, "sql"), block(book, "sql"), "the DDL differs");
    assert_eq!(
        block(readme, "sql,example"),
        block(book, "sql,example"),
        "the example differs"
    );
    let pg = Postgres::start();
    ddl(&pg).await;
    let client = pg.client().await;
    client
        .batch_execute("CREATE TABLE orders (id int PRIMARY KEY, status text); INSERT INTO orders VALUES (42, 'new')")
        .await
        .expect("the application's table");
    let url = pg.url("");
    let srv = TestServer::start(|c| c.consumers.push(url.parse().expect("consumer url")));
    let mut ws = subscriber(srv.addr, "orders").await;
    client
        .batch_execute(&block(book, "sql,example"))
        .await
        .expect("the example runs");
    let got = next_json(&mut ws).await;
    let shown: Value = serde_json::from_str(&block(book, "json")).expect("the book's frame");
    let key = got["idempotency_key"].as_str().expect("a key");
    assert!(key.starts_with("corecast_outbox:"), "{got}");
    let mut got = got.clone();
    got["idempotency_key"] = shown["idempotency_key"].clone();
    assert_eq!(got, shown);
}
