//! One PostgreSQL outbox consumer: connect (TLS through rustls when the
//! connection string asks), check both tables, `LISTEN`, then claim,
//! publish and delete batches until the server stops; on any error
//! reconnect (`ctx::forever`).
//!
//! A batch is one transaction: `SELECT … FOR UPDATE SKIP LOCKED` (other
//! instances skip these rows), every row sent to the worker in id order,
//! each confirmed publish and each poison row (dead-lettered in the same
//! transaction) deleted, `COMMIT`. A row whose publish was not confirmed
//! stays for a later claim. A crash between the publishes and the commit
//! leaves the rows to be claimed again: at most a duplicate, which
//! carries the same idempotency key (`NAME:ID`), never a loss.

use std::cell::Cell;
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_postgres::{AsyncMessage, Client};

use super::counters::Counters;
use super::ctx::{forever, Ctx, MIN_BACKOFF};
use crate::consumer::bridge::Request;
use crate::consumer::row::{self, Row};
use crate::consumer::{sql, ConsumerConfig};
use crate::log;

/// Longest a batch waits for its publishes to be confirmed.
pub(super) const CONFIRM_WAIT: Duration = Duration::from_secs(30);
/// Pause after a batch left rows for later (Redis down, overloaded).
pub(super) const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Runs the consumer until the server stops.
pub async fn run(
    c: ConsumerConfig,
    pg: tokio_postgres::Config,
    tls: Arc<rustls::ClientConfig>,
    ctx: Ctx,
) {
    forever(&c.name, &ctx, |backoff| {
        session(&c, &pg, &tls, &ctx, backoff)
    })
    .await;
}

/// One connection: `Ok` when the server stops, else why it ended.
async fn session(
    c: &ConsumerConfig,
    pg: &tokio_postgres::Config,
    tls: &Arc<rustls::ClientConfig>,
    ctx: &Ctx,
    backoff: Rc<Cell<Duration>>,
) -> Result<(), String> {
    let connector = tokio_postgres_rustls::MakeRustlsConnect::new((**tls).clone());
    let (mut client, mut conn) = pg.connect(connector).await.map_err(|e| e.to_string())?;
    let woken = Rc::new(Notify::new());
    let driver = tokio::task::spawn_local({
        let woken = woken.clone();
        async move {
            // Drives the connection; a notification wakes the claims.
            loop {
                match poll_fn(|cx| conn.poll_message(cx)).await {
                    Some(Ok(AsyncMessage::Notification(_))) => woken.notify_one(),
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return e.to_string(),
                    None => return "connection closed".to_string(),
                }
            }
        }
    });
    let out = consume(c, &mut client, &woken, ctx, &backoff).await;
    drop(client);
    let closed = driver.await.unwrap_or_else(|e| e.to_string());
    out.map_err(|e| if e.is_empty() { closed } else { e })
}

async fn consume(
    c: &ConsumerConfig,
    client: &mut Client,
    woken: &Notify,
    ctx: &Ctx,
    backoff: &Cell<Duration>,
) -> Result<(), String> {
    let err = |e: tokio_postgres::Error| e.to_string();
    for q in sql::probe(&c.table, &c.dead_letter) {
        client.batch_execute(&q).await.map_err(err)?;
    }
    if let Some(ch) = &c.notify {
        client.batch_execute(&sql::listen(ch)).await.map_err(err)?;
    }
    ctx.counters.connected.store(1, Ordering::Relaxed);
    log!(
        Info,
        "outbox consumer connected",
        consumer = c.name,
        table = c.table
    );
    backoff.set(MIN_BACKOFF);
    let stmts = (
        client.prepare(&sql::claim(&c.table)).await.map_err(err)?,
        client.prepare(&sql::delete(&c.table)).await.map_err(err)?,
        client
            .prepare(&sql::dead_letter(&c.dead_letter))
            .await
            .map_err(err)?,
    );
    while !ctx.stopping() {
        let (rows, left) = batch(c, client, &stmts, ctx).await?;
        if left > 0 {
            tokio::time::sleep(RETRY_PAUSE).await;
        } else if rows < c.batch {
            // Caught up: wait for a NOTIFY or the poll interval (a
            // notification sent meanwhile is kept by `Notify`).
            let _ = tokio::time::timeout(c.poll, woken.notified()).await;
        }
    }
    Ok(())
}

type Stmts = (
    tokio_postgres::Statement,
    tokio_postgres::Statement,
    tokio_postgres::Statement,
);

/// One claimed batch: (rows claimed, rows left for later).
async fn batch(
    c: &ConsumerConfig,
    client: &mut Client,
    (claim, delete, dead): &Stmts,
    ctx: &Ctx,
) -> Result<(usize, usize), String> {
    let err = |e: tokio_postgres::Error| e.to_string();
    let tx = client.transaction().await.map_err(err)?;
    let rows = tx.query(claim, &[&(c.batch as i64)]).await.map_err(err)?;
    Counters::add(&ctx.counters.claims, 1);
    let claimed = rows.len();
    let mut sent = Vec::new();
    let mut poison = Vec::new();
    for r in rows {
        let row = Row {
            id: r.get(0),
            channel: r.get(1),
            data: r.get(2),
            tags: r.get(3),
        };
        if let Err(why) = row::check(&row, ctx.max_message) {
            poison.push((row, why));
            continue;
        }
        let req = Request {
            seq: 0,
            channel: row.channel.clone().unwrap_or_default(),
            data: row.data.clone().unwrap_or_default(),
            tags: row.tags.clone(),
            id: format!("{}:{}", c.name, row.id),
        };
        let rx = ctx.bridge.send(req).await.map_err(|e| e.to_string())?;
        sent.push((row, rx));
    }
    let mut done: Vec<i64> = Vec::new();
    let mut left = 0;
    for (row, rx) in sent {
        match tokio::time::timeout(CONFIRM_WAIT, rx).await {
            Ok(Ok(reply)) if reply.accepted() => done.push(row.id),
            Ok(Ok(reply)) if reply.poison() => {
                let why = reply.error.unwrap_or_else(|| reply.status.to_string());
                poison.push((row, format!("refused ({}): {why}", reply.status)));
            }
            _ => left += 1,
        }
    }
    let published = done.len() as u64;
    for (row, why) in &poison {
        log!(
            Warn,
            "outbox row dead-lettered",
            consumer = c.name,
            id = row.id,
            reason = why
        );
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
            [&row.id, &row.channel, &row.data, &row.tags, why];
        tx.execute(dead, &params).await.map_err(err)?;
        done.push(row.id);
    }
    if !done.is_empty() {
        tx.execute(delete, &[&done]).await.map_err(err)?;
    }
    tx.commit().await.map_err(err)?;
    Counters::add(&ctx.counters.published, published);
    Counters::add(&ctx.counters.dead_lettered, poison.len() as u64);
    Counters::add(&ctx.counters.retried, left as u64);
    Ok((claimed, left))
}
