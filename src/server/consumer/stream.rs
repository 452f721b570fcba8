//! One Redis stream consumer: a connection of its own (TLS for
//! `rediss://`), the consumer group created if missing, then until the
//! server stops: this consumer's own pending entries after a (re)connect
//! or a retry, entries other consumers left pending longer than
//! `claim_after` (`XAUTOCLAIM`: one died before its `XACK`), and new
//! entries (`XREADGROUP … BLOCK poll`). Each batch is published in entry
//! order through the worker; what was published is acknowledged, poison
//! goes to the dead-letter stream (then acknowledged), the rest stays
//! pending for a retry. A crash before the `XACK` leaves the entries
//! pending: they are published again, with the same idempotency key.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::counters::Counters;
use super::ctx::{forever, Ctx, MIN_BACKOFF};
use super::postgres::{CONFIRM_WAIT, RETRY_PAUSE};
use crate::consumer::bridge::Request;
use crate::consumer::stream::{self as cmd, Entry};
use crate::consumer::{row, ConsumerConfig, StreamSource};
use crate::log;
use crate::redis::commands;
use crate::redis::resp::{self, Limits, Reply};

/// Longest a command (other than a blocking read) waits for its reply.
const COMMAND_WAIT: Duration = Duration::from_secs(10);

trait Io: AsyncRead + AsyncWrite + Unpin {}
impl<T: AsyncRead + AsyncWrite + Unpin> Io for T {}

/// A connection: commands one at a time, replies bounded.
struct Conn {
    io: Box<dyn Io>,
    buf: BytesMut,
    limits: Limits,
}

impl Conn {
    async fn open(src: &StreamSource, tls: &Arc<rustls::ClientConfig>) -> Result<Conn, String> {
        let url = &src.url;
        let tcp = tokio::net::TcpStream::connect((url.host.as_str(), url.port))
            .await
            .map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        let io: Box<dyn Io> = if url.tls {
            let name = rustls::pki_types::ServerName::try_from(url.host.clone())
                .map_err(|e| e.to_string())?;
            let tls = tokio_rustls::TlsConnector::from(tls.clone());
            Box::new(tls.connect(name, tcp).await.map_err(|e| e.to_string())?)
        } else {
            Box::new(tcp)
        };
        let mut c = Conn {
            io,
            buf: BytesMut::new(),
            limits: Limits::default(),
        };
        for h in commands::handshake(url, true) {
            if let Reply::Error(e) = c.call(h, COMMAND_WAIT).await? {
                return Err(format!("refused by Redis: {e}"));
            }
        }
        Ok(c)
    }

    async fn call(&mut self, cmd: Bytes, wait: Duration) -> Result<Reply, String> {
        self.io.write_all(&cmd).await.map_err(|e| e.to_string())?;
        let read = async {
            loop {
                if let Some(r) =
                    resp::decode(&mut self.buf, &self.limits).map_err(|e| e.to_string())?
                {
                    return Ok(r);
                }
                if self
                    .io
                    .read_buf(&mut self.buf)
                    .await
                    .map_err(|e| e.to_string())?
                    == 0
                {
                    return Err("redis closed the connection".to_string());
                }
            }
        };
        tokio::time::timeout(wait, read)
            .await
            .map_err(|_| "redis did not answer in time".to_string())?
    }
}

/// Runs the consumer until the server stops. Its consumer name is the
/// process's (kept across reconnects, so it finishes its own pending
/// entries first).
pub async fn run(c: ConsumerConfig, src: StreamSource, tls: Arc<rustls::ClientConfig>, ctx: Ctx) {
    // Random per process: two instances never share a name.
    let r = RandomState::new().build_hasher().finish();
    let me = format!("{}-{r:016x}", c.name);
    forever(&c.name, &ctx, |backoff| {
        session(&c, &src, &tls, &me, &ctx, backoff)
    })
    .await;
}

async fn session(
    c: &ConsumerConfig,
    src: &StreamSource,
    tls: &Arc<rustls::ClientConfig>,
    me: &str,
    ctx: &Ctx,
    backoff: Rc<Cell<Duration>>,
) -> Result<(), String> {
    let mut conn = Conn::open(src, tls).await?;
    match conn
        .call(cmd::create_group(&src.stream, &src.group), COMMAND_WAIT)
        .await?
    {
        Reply::Error(e) if !e.starts_with("BUSYGROUP") => {
            return Err(format!("XGROUP CREATE: {e}"))
        }
        _ => {}
    }
    ctx.counters.connected.store(1, Ordering::Relaxed);
    log!(
        Info,
        "outbox consumer connected",
        consumer = c.name,
        stream = src.stream
    );
    backoff.set(MIN_BACKOFF);
    let mut own = true;
    let mut last_claim: Option<Instant> = None;
    let block = c.poll.as_millis() as u64;
    while !ctx.stopping() {
        let mut entries = Vec::new();
        if own {
            let r = conn
                .call(
                    cmd::read(&src.stream, &src.group, me, c.batch, None),
                    COMMAND_WAIT,
                )
                .await?;
            entries = cmd::read_reply(&r)?;
            own = false;
        }
        if entries.is_empty() && last_claim.is_none_or(|t| t.elapsed() >= src.claim_after / 2) {
            last_claim = Some(Instant::now());
            let idle = src.claim_after.as_millis() as u64;
            let claim = cmd::autoclaim(&src.stream, &src.group, me, idle, "0-0", c.batch);
            let (_, claimed, gone) = cmd::autoclaim_reply(&conn.call(claim, COMMAND_WAIT).await?)?;
            if !gone.is_empty() {
                let _ = conn
                    .call(cmd::ack(&src.stream, &src.group, &gone), COMMAND_WAIT)
                    .await?;
            }
            entries = claimed;
        }
        if entries.is_empty() {
            let read = cmd::read(&src.stream, &src.group, me, c.batch, Some(block));
            let r = conn.call(read, c.poll + COMMAND_WAIT).await?;
            entries = cmd::read_reply(&r)?;
        }
        if publish(c, src, &mut conn, entries, ctx).await? > 0 {
            own = true;
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
    Ok(())
}

/// The publish request for an entry, or why it is poison.
fn request(c: &ConsumerConfig, e: &Entry, max_message: usize) -> Result<Request, String> {
    let (Some(channel), Some(data)) = (e.text("channel"), e.text("data")) else {
        return Err("channel or data missing, or not UTF-8".into());
    };
    if e.has("tags") && e.text("tags").is_none() {
        return Err("tags: not UTF-8".into());
    }
    row::check_fields(channel, data, e.text("tags"), max_message)?;
    let id = match e.text("idempotency-key") {
        Some(k) => k.to_string(),
        None => format!("{}:{}", c.name, e.id),
    };
    Ok(Request {
        seq: 0,
        channel: channel.to_string(),
        data: data.to_string(),
        tags: e.text("tags").map(str::to_string),
        id,
    })
}

/// Publishes `entries` in order; acknowledges what was published and the
/// poison (dead-lettered first). Returns how many stay pending.
async fn publish(
    c: &ConsumerConfig,
    src: &StreamSource,
    conn: &mut Conn,
    entries: Vec<Entry>,
    ctx: &Ctx,
) -> Result<usize, String> {
    let mut done: Vec<String> = Vec::new();
    let mut poison: Vec<(Entry, String)> = Vec::new();
    let mut sent = Vec::new();
    for e in entries {
        if e.fields.is_empty() {
            // Trimmed from the stream while pending: nothing to publish.
            done.push(e.id);
            continue;
        }
        match request(c, &e, ctx.max_message) {
            Err(why) => poison.push((e, why)),
            Ok(req) => {
                let rx = ctx.bridge.send(req).await.map_err(|e| e.to_string())?;
                sent.push((e, rx));
            }
        }
    }
    let mut left = 0;
    let mut published = 0;
    for (e, rx) in sent {
        match tokio::time::timeout(CONFIRM_WAIT, rx).await {
            Ok(Ok(reply)) if reply.accepted() => {
                published += 1;
                done.push(e.id);
            }
            Ok(Ok(reply)) if reply.poison() => {
                let why = reply.error.unwrap_or_default();
                poison.push((e, format!("refused ({}): {why}", reply.status)));
            }
            _ => left += 1,
        }
    }
    for (e, why) in &poison {
        log!(
            Warn,
            "outbox entry dead-lettered",
            consumer = c.name,
            id = e.id,
            reason = why
        );
        if let Reply::Error(err) = conn
            .call(cmd::dead_letter(&c.dead_letter, e, why), COMMAND_WAIT)
            .await?
        {
            return Err(format!("XADD {}: {err}", c.dead_letter));
        }
        done.push(e.id.clone());
    }
    if !done.is_empty() {
        let r = conn
            .call(cmd::ack(&src.stream, &src.group, &done), COMMAND_WAIT)
            .await?;
        if let Reply::Error(e) = r {
            // Published but still pending: published again later (same
            // idempotency key).
            return Err(format!("XACK: {e}"));
        }
    }
    Counters::add(&ctx.counters.claims, 1);
    Counters::add(&ctx.counters.published, published);
    Counters::add(&ctx.counters.dead_lettered, poison.len() as u64);
    Counters::add(&ctx.counters.retried, left as u64);
    Ok(left)
}
