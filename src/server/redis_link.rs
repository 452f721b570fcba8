//! Redis mode: the two Redis connections of a worker and their upkeep.
//!
//! - The **command connection** pipelines `PUBLISH`es: every publish of an
//!   event-loop pass is written with one vectored write, replies are matched
//!   in order. While Redis is unreachable (or our subscriptions are not yet
//!   restored) publishes wait in a byte-bounded [`Pipeline`]; past the bound
//!   they are refused and the publisher is told. Commands whose reply was
//!   lost with the connection are written again after reconnecting (at
//!   least once).
//! - The **subscriber connection** subscribes to a channel only while it has
//!   local subscribers (the hub's interest log), re-subscribes to all of
//!   them first thing after a reconnect, and fans every message of one read
//!   out before the WebSocket writers run, so they share writes.
//! - A **canary** is published every `--redis-canary-interval` on an
//!   instance-private channel; `/readyz` is 200 only while it makes the
//!   round trip in time.

use std::cell::{Cell, RefCell};
use std::collections::hash_map::RandomState;
use std::fmt::Write as _;
use std::future::poll_fn;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use monoio::io::{AsyncWriteRent, AsyncWriteRentExt, Splitable};
use monoio::net::TcpStream;

use crate::config::Config;
use crate::log;
use crate::redis::envelope::{self, Origin};
use crate::redis::resp::{self, Pipeline, PipelineFull, PubSubEvent, Reply};
use crate::redis::RedisUrl;
use crate::server::conn::Ctx;
use crate::server::iovec::IoVecs;
use crate::server::sys;
use crate::ws::OpCode;

/// Channels per SUBSCRIBE command when restoring.
const SUBSCRIBE_CHUNK: usize = 1000;
/// Longest pause between reconnect attempts. Short on purpose: after a
/// Redis restart, instances come back at most this far apart, which bounds
/// the window in which one instance's buffered publishes could reach Redis
/// before another instance has re-subscribed (see `resume_delay`).
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// Pause after Redis refused our credentials or database: retrying faster
/// would only fill its log.
const AUTH_BACKOFF: Duration = Duration::from_secs(30);

/// The Redis side of a worker: configuration, pipeline and health.
pub struct RedisLink {
    url: RedisUrl,
    prefix: String,
    canary_key: String,
    instance: u64,
    connect_timeout: Duration,
    command_timeout: Duration,
    canary_interval: Duration,
    resume_delay: Duration,
    pipeline: RefCell<Pipeline<CmdKind>>,
    cmd_waker: RefCell<Option<Waker>>,
    /// Connection health, read by `/readyz` and `/stats`.
    pub health: RefCell<Health>,
    started: Instant,
    sub_fd: Cell<Option<i32>>,
}

/// What `/readyz` and `/stats` report about Redis.
#[derive(Debug, Default)]
pub struct Health {
    /// The command connection is up.
    pub cmd_connected: bool,
    /// The subscriber connection is up.
    pub sub_connected: bool,
    /// Every channel with local subscribers is subscribed again.
    pub restored: bool,
    /// When `restored` last became true.
    pub restored_at: Option<Instant>,
    /// When the last canary came back.
    pub last_canary: Option<Instant>,
    /// Its round trip.
    pub canary_rtt: Option<Duration>,
    /// The last connection error, for `/readyz`.
    pub last_error: Option<String>,
}

/// What to do with a command's reply.
enum CmdKind {
    Publish(Option<Rc<ReplyWaiter>>),
    Canary,
    /// Any other command (cache GET/SET…): hand the reply to the waiter.
    Command(Rc<ReplyWaiter>),
}

/// Where a task waits for Redis to answer its command.
#[derive(Default)]
pub struct ReplyWaiter {
    reply: RefCell<Option<Result<Reply, String>>>,
    waker: RefCell<Option<Waker>>,
}

impl ReplyWaiter {
    fn complete(&self, r: Result<Reply, String>) {
        *self.reply.borrow_mut() = Some(r);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// Waits for the reply (an error reply becomes `Err` with its text).
    pub async fn wait(&self) -> Result<Reply, String> {
        poll_fn(|cx| match self.reply.borrow_mut().take() {
            Some(r) => Poll::Ready(r),
            None => {
                *self.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }
}

/// Why a connection attempt failed.
#[derive(Debug)]
enum LinkError {
    Io(io::Error),
    Timeout,
    /// Redis answered the handshake with an error (bad password, bad db).
    Refused(String),
    Protocol(String),
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkError::Io(e) => write!(f, "{e}"),
            LinkError::Timeout => f.write_str("timed out"),
            LinkError::Refused(e) => write!(f, "refused by Redis: {e}"),
            LinkError::Protocol(e) => write!(f, "{e}"),
        }
    }
}

impl From<io::Error> for LinkError {
    fn from(e: io::Error) -> Self {
        LinkError::Io(e)
    }
}

impl RedisLink {
    /// The link for `cfg`, if Redis mode is on.
    pub fn new(cfg: &Config) -> Option<Rc<RedisLink>> {
        let url = cfg.redis_url.clone()?;
        let instance = RandomState::new().build_hasher().finish() | 1;
        Some(Rc::new(RedisLink {
            url,
            prefix: cfg.redis_prefix.clone(),
            // `!` is not allowed in channel names: no client can collide.
            canary_key: format!("{}!canary:{instance:016x}", cfg.redis_prefix),
            instance,
            connect_timeout: cfg.redis_connect_timeout,
            command_timeout: cfg.redis_command_timeout,
            canary_interval: cfg.redis_canary_interval,
            resume_delay: cfg.redis_resume_delay,
            pipeline: RefCell::new(Pipeline::new(cfg.redis_publish_buffer)),
            cmd_waker: RefCell::new(None),
            health: RefCell::new(Health::default()),
            started: Instant::now(),
            sub_fd: Cell::new(None),
        }))
    }

    /// Starts the connection tasks on the current worker.
    pub fn spawn(ctx: &Rc<Ctx>, link: &Rc<RedisLink>) {
        ctx.hub.borrow_mut().track_interest();
        monoio::spawn(command_loop(ctx.clone(), link.clone()));
        monoio::spawn(subscriber_loop(ctx.clone(), link.clone()));
        monoio::spawn(canary_loop(ctx.clone(), link.clone()));
    }

    /// Queues a PUBLISH of `payload` to `channel`; with `want_reply`, a
    /// waiter that resolves when Redis confirms it.
    pub fn publish(
        &self,
        channel: &str,
        opcode: OpCode,
        payload: &[u8],
        sender: u64,
        want_reply: bool,
    ) -> Result<Option<Rc<ReplyWaiter>>, PipelineFull> {
        let cmd = self.encode_publish(channel, opcode, payload, sender);
        let waiter = want_reply.then(|| Rc::new(ReplyWaiter::default()));
        self.pipeline
            .borrow_mut()
            .push(cmd, CmdKind::Publish(waiter.clone()))?;
        self.wake_writer();
        Ok(waiter)
    }

    /// `PUBLISH prefix+channel envelope`, hand-encoded into one buffer of
    /// exact size: the payload is copied once, not once per RESP layer.
    fn encode_publish(&self, channel: &str, opcode: OpCode, payload: &[u8], sender: u64) -> Bytes {
        let key_len = self.prefix.len() + channel.len();
        let val_len = envelope::HEADER_LEN + payload.len();
        let mut out = BytesMut::with_capacity(64 + key_len + val_len);
        // `write!` into the buffer itself: no intermediate String.
        let _ = write!(out, "*3\r\n$7\r\nPUBLISH\r\n${key_len}\r\n");
        out.put_slice(self.prefix.as_bytes());
        out.put_slice(channel.as_bytes());
        let _ = write!(out, "\r\n${val_len}\r\n");
        let origin = Origin {
            instance: self.instance,
            sender,
        };
        envelope::put_header(&mut out, opcode, origin);
        out.put_slice(payload);
        out.put_slice(b"\r\n");
        out.freeze()
    }

    /// Queues any command (not a publish) and returns where to wait for
    /// its reply; refused while the pipeline is full. Callers bound their
    /// wait with a timeout: while Redis is down the command waits in the
    /// pipeline like a publish.
    pub fn command(&self, args: &[&[u8]]) -> Result<Rc<ReplyWaiter>, PipelineFull> {
        let waiter = Rc::new(ReplyWaiter::default());
        self.pipeline
            .borrow_mut()
            .push(resp::command(args), CmdKind::Command(waiter.clone()))?;
        self.wake_writer();
        Ok(waiter)
    }

    /// Whether commands are being written to Redis right now (connected,
    /// subscriptions restored).
    pub fn is_up(&self) -> bool {
        let h = self.health.borrow();
        h.cmd_connected && h.restored
    }

    fn wake_writer(&self) {
        if let Some(w) = self.cmd_waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// Commands waiting (unsent or unconfirmed).
    pub fn buffered(&self) -> usize {
        self.pipeline.borrow().len()
    }

    /// `Ok` when this instance can deliver through Redis now, else why not.
    pub fn readiness(&self) -> Result<(), String> {
        let h = self.health.borrow();
        let why = if !h.cmd_connected || !h.sub_connected {
            let e = h.last_error.as_deref().unwrap_or("connecting");
            format!("redis not connected: {e}")
        } else if !h.restored {
            "redis subscriptions not yet restored".to_string()
        } else if h
            .last_canary
            .is_none_or(|t| t.elapsed() > self.canary_deadline())
        {
            "redis canary has not made the round trip in time".to_string()
        } else {
            return Ok(());
        };
        Err(why)
    }

    fn canary_deadline(&self) -> Duration {
        (self.canary_interval * 3).max(Duration::from_secs(1))
    }
}

/// Exponential backoff with jitter: 100 ms doubling to [`MAX_BACKOFF`],
/// each pause drawn from [d/2, d] so restarted instances do not reconnect
/// in lockstep.
struct Backoff {
    next: Duration,
    rng: u64,
}

impl Backoff {
    fn new(seed: u64) -> Self {
        Backoff {
            next: Duration::from_millis(100),
            rng: seed | 1,
        }
    }

    fn reset(&mut self) {
        self.next = Duration::from_millis(100);
    }

    fn pause(&mut self) -> Duration {
        // xorshift64: enough randomness for jitter, no dependency.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let d = self.next;
        self.next = (self.next * 2).min(MAX_BACKOFF);
        let half = d.as_millis() as u64 / 2;
        Duration::from_millis(half + self.rng % (half + 1))
    }
}

enum Role {
    Command,
    Subscriber,
}

/// Connects, authenticates and (for commands) selects the database.
async fn open(link: &RedisLink, role: Role) -> Result<(TcpStream, BytesMut), LinkError> {
    let addr = (link.url.host.as_str(), link.url.port);
    let stream = monoio::time::timeout(link.connect_timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| LinkError::Timeout)??;
    let _ = stream.set_nodelay(true);
    let mut conn = (stream, BytesMut::new());
    if let Some(pass) = &link.url.password {
        let cmd = match &link.url.username {
            Some(user) => resp::command(&[b"AUTH", user.as_bytes(), pass.as_bytes()]),
            None => resp::command(&[b"AUTH", pass.as_bytes()]),
        };
        expect_ok(link, &mut conn, cmd).await?;
    }
    if matches!(role, Role::Command) && link.url.db != 0 {
        let db = link.url.db.to_string();
        expect_ok(link, &mut conn, resp::command(&[b"SELECT", db.as_bytes()])).await?;
    }
    Ok(conn)
}

async fn expect_ok(
    link: &RedisLink,
    (stream, buf): &mut (TcpStream, BytesMut),
    cmd: Bytes,
) -> Result<(), LinkError> {
    let (res, _) = stream.write_all(cmd).await;
    res?;
    let reply = monoio::time::timeout(link.command_timeout, read_reply(stream, buf))
        .await
        .map_err(|_| LinkError::Timeout)??;
    match reply {
        Reply::Error(e) => Err(LinkError::Refused(e.to_string())),
        _ => Ok(()),
    }
}

async fn read_reply(stream: &TcpStream, buf: &mut BytesMut) -> Result<Reply, LinkError> {
    loop {
        if let Some(r) = resp::decode(buf).map_err(|e| LinkError::Protocol(e.to_string()))? {
            return Ok(r);
        }
        if read_some(stream, buf).await? == 0 {
            return Err(LinkError::Io(io::ErrorKind::UnexpectedEof.into()));
        }
    }
}

/// Readiness, then a nonblocking read of everything available.
async fn read_some(stream: &TcpStream, buf: &mut BytesMut) -> io::Result<usize> {
    let mut scratch = [0u8; 16 * 1024];
    loop {
        match sys::recv_nonblocking(stream.as_raw_fd(), &mut scratch) {
            Ok(n) => {
                buf.extend_from_slice(&scratch[..n]);
                return Ok(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => stream.readable(false).await?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Records a failed attempt for `/readyz`; logs it only when it differs
/// from the last failure this connection logged (`logged`), not on every
/// retry. Kept per connection because both share `last_error`: compared
/// against that, their messages alternate and every attempt is logged.
fn note_failure(link: &RedisLink, what: &str, e: &LinkError, logged: &mut Option<String>) {
    let msg = format!("{what}: {e}");
    if logged.as_deref() != Some(msg.as_str()) {
        match e {
            LinkError::Refused(_) => log!(
                Error,
                "redis refused the connection",
                url = link.url,
                error = msg
            ),
            _ => log!(
                Warn,
                "redis unavailable, retrying",
                url = link.url,
                error = msg
            ),
        }
        *logged = Some(msg.clone());
    }
    link.health.borrow_mut().last_error = Some(msg);
}

async fn command_loop(ctx: Rc<Ctx>, link: Rc<RedisLink>) {
    let mut backoff = Backoff::new(link.instance);
    let mut logged = None;
    loop {
        match open(&link, Role::Command).await {
            Ok((stream, buf)) => {
                backoff.reset();
                logged = None;
                link.health.borrow_mut().cmd_connected = true;
                ctx.hub.borrow_mut().stats.redis_connected = 1;
                log!(Info, "redis command connection up", url = link.url);
                let err = run_command(&ctx, &link, stream, buf).await;
                {
                    let mut h = link.health.borrow_mut();
                    h.cmd_connected = false;
                    // A canary from before the loss says nothing about the
                    // next connection (see `canary_loop`).
                    h.last_canary = None;
                    h.last_error = Some(format!("command connection: {err}"));
                }
                let mut hub = ctx.hub.borrow_mut();
                hub.stats.redis_connected = 0;
                hub.stats.redis_reconnects += 1;
                link.pipeline.borrow_mut().requeue_inflight();
                log!(Warn, "redis command connection lost", error = err);
            }
            Err(e) => {
                note_failure(&link, "command connection", &e, &mut logged);
                if matches!(e, LinkError::Refused(_)) {
                    monoio::time::sleep(AUTH_BACKOFF).await;
                    continue;
                }
            }
        }
        monoio::time::sleep(backoff.pause()).await;
    }
}

/// Runs a connected command connection until it fails.
async fn run_command(
    ctx: &Rc<Ctx>,
    link: &Rc<RedisLink>,
    stream: TcpStream,
    mut buf: BytesMut,
) -> LinkError {
    let fd = stream.as_raw_fd();
    let (rd, mut wr) = stream.into_split();
    let stop = Rc::new(Cell::new(false));
    let writer = monoio::spawn({
        let (link, stop) = (link.clone(), stop.clone());
        async move { command_writer(&link, &mut wr, &stop).await }
    });
    let stream = crate::server::conn::read_stream(&rd);
    let err = loop {
        match drain_replies(ctx, link, &mut buf) {
            Ok(()) => {}
            Err(e) => break e,
        }
        match monoio::time::timeout(link.command_timeout, read_some(stream, &mut buf)).await {
            Ok(Ok(0)) => break LinkError::Io(io::ErrorKind::UnexpectedEof.into()),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => break LinkError::Io(e),
            // Quiet is fine; quiet while replies are owed is a dead peer.
            Err(_) if link.pipeline.borrow().has_inflight() => break LinkError::Timeout,
            Err(_) => {}
        }
    };
    stop.set(true);
    sys::shutdown(fd);
    link.wake_writer();
    let _ = writer.await;
    drop(rd);
    err
}

fn drain_replies(ctx: &Ctx, link: &RedisLink, buf: &mut BytesMut) -> Result<(), LinkError> {
    while let Some(reply) = resp::decode(buf).map_err(|e| LinkError::Protocol(e.to_string()))? {
        let kind = link
            .pipeline
            .borrow_mut()
            .on_reply()
            .map_err(|e| LinkError::Protocol(e.to_string()))?;
        let result = match reply {
            Reply::Error(e) => Err(e.to_string()),
            other => Ok(other),
        };
        match kind {
            CmdKind::Command(waiter) => waiter.complete(result),
            CmdKind::Publish(waiter) => {
                if let Err(e) = &result {
                    ctx.hub.borrow_mut().stats.redis_publish_errors += 1;
                    log!(Warn, "redis rejected a publish", error = e);
                }
                if let Some(w) = waiter {
                    w.complete(result);
                }
            }
            CmdKind::Canary => {}
        }
    }
    Ok(())
}

/// Writes queued commands, all of one pass in one vectored write — but only
/// once our subscriptions are restored, so this instance never publishes
/// what it could not itself receive.
async fn command_writer(
    link: &RedisLink,
    wr: &mut monoio::net::tcp::TcpOwnedWriteHalf,
    stop: &Cell<bool>,
) {
    let mut batch = Vec::new();
    loop {
        let go = poll_fn(|cx| poll_command_work(link, stop, cx)).await;
        if !go {
            return;
        }
        // After a (re)connect, give the other instances' subscriber
        // connections time to come back before sending what was buffered.
        let settle = link.health.borrow().restored_at.map(|t| t.elapsed());
        if let Some(left) = settle.and_then(|e| link.resume_delay.checked_sub(e)) {
            monoio::time::sleep(left).await;
            continue;
        }
        link.pipeline
            .borrow_mut()
            .take_unsent(&mut batch, crate::hub::MAX_BATCH);
        let mut iov = IoVecs::new(std::mem::take(&mut batch));
        while iov.remaining() > 0 {
            let (res, back) = wr.writev(iov).await;
            iov = back;
            match res {
                Ok(n) if n > 0 => iov.advance(n),
                // The reader notices the broken connection and requeues.
                _ => return,
            }
        }
        batch = iov.into_inner();
        batch.clear();
    }
}

fn poll_command_work(link: &RedisLink, stop: &Cell<bool>, cx: &mut Context<'_>) -> Poll<bool> {
    if stop.get() {
        return Poll::Ready(false);
    }
    if link.health.borrow().restored && link.pipeline.borrow().has_unsent() {
        return Poll::Ready(true);
    }
    *link.cmd_waker.borrow_mut() = Some(cx.waker().clone());
    Poll::Pending
}

async fn subscriber_loop(ctx: Rc<Ctx>, link: Rc<RedisLink>) {
    let mut backoff = Backoff::new(link.instance.rotate_left(17));
    let mut logged = None;
    loop {
        match open(&link, Role::Subscriber).await {
            Ok((stream, buf)) => {
                backoff.reset();
                logged = None;
                link.health.borrow_mut().sub_connected = true;
                link.sub_fd.set(Some(stream.as_raw_fd()));
                let err = run_subscriber(&ctx, &link, stream, buf).await;
                link.sub_fd.set(None);
                {
                    let mut h = link.health.borrow_mut();
                    h.sub_connected = false;
                    h.restored = false;
                    // Left set, an old canary would make `/readyz` 200 before
                    // one made the trip on the new connection, and after a
                    // long outage `canary_loop` would take it for a stale
                    // canary and cut the fresh connection.
                    h.last_canary = None;
                    h.last_error = Some(format!("subscriber connection: {err}"));
                }
                log!(Warn, "redis subscriber connection lost", error = err);
            }
            Err(e) => {
                note_failure(&link, "subscriber connection", &e, &mut logged);
                if matches!(e, LinkError::Refused(_)) {
                    monoio::time::sleep(AUTH_BACKOFF).await;
                    continue;
                }
            }
        }
        monoio::time::sleep(backoff.pause()).await;
    }
}

/// Subscribes to everything with local subscribers (plus the canary),
/// then delivers messages and follows interest changes until it fails.
async fn run_subscriber(
    ctx: &Rc<Ctx>,
    link: &Rc<RedisLink>,
    mut stream: TcpStream,
    mut buf: BytesMut,
) -> LinkError {
    let channels = ctx.hub.borrow_mut().interest_snapshot();
    let mut keys: Vec<Vec<u8>> = vec![link.canary_key.as_bytes().to_vec()];
    keys.extend(channels.iter().map(|c| redis_key(link, c)));
    let mut pending_confirms = keys.len();
    for chunk in keys.chunks(SUBSCRIBE_CHUNK) {
        let (res, _) = stream.write_all(subscribe_cmd(b"SUBSCRIBE", chunk)).await;
        if let Err(e) = res {
            return LinkError::Io(e);
        }
    }
    let fd = stream.as_raw_fd();
    let (rd, mut wr) = stream.into_split();
    let stop = Rc::new(Cell::new(false));
    let writer = monoio::spawn({
        let (ctx, link, stop) = (ctx.clone(), link.clone(), stop.clone());
        async move { interest_writer(&ctx, &link, &mut wr, &stop).await }
    });
    let stream = crate::server::conn::read_stream(&rd);
    let err = loop {
        if let Err(e) = deliver_events(ctx, link, &mut buf, &mut pending_confirms, keys.len()) {
            break e;
        }
        match read_some(stream, &mut buf).await {
            Ok(0) => break LinkError::Io(io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => {}
            Err(e) => break LinkError::Io(e),
        }
    };
    stop.set(true);
    sys::shutdown(fd);
    ctx.hub.borrow_mut().wake_interest();
    let _ = writer.await;
    drop(rd);
    err
}

fn redis_key(link: &RedisLink, channel: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(link.prefix.len() + channel.len());
    k.extend_from_slice(link.prefix.as_bytes());
    k.extend_from_slice(channel.as_bytes());
    k
}

fn subscribe_cmd(verb: &[u8], keys: &[Vec<u8>]) -> Bytes {
    let mut args: Vec<&[u8]> = Vec::with_capacity(keys.len() + 1);
    args.push(verb);
    args.extend(keys.iter().map(Vec::as_slice));
    resp::command(&args)
}

/// Handles every event in `buf`: all messages of one read are fanned out
/// before any WebSocket writer runs.
fn deliver_events(
    ctx: &Ctx,
    link: &RedisLink,
    buf: &mut BytesMut,
    pending_confirms: &mut usize,
    restored_count: usize,
) -> Result<(), LinkError> {
    while let Some(reply) = resp::decode(buf).map_err(|e| LinkError::Protocol(e.to_string()))? {
        let event = resp::pubsub_event(reply).map_err(|e| LinkError::Protocol(e.to_string()))?;
        match event {
            PubSubEvent::Message { channel, payload } => on_message(ctx, link, &channel, payload),
            PubSubEvent::Subscribed(_) if *pending_confirms > 0 => {
                *pending_confirms -= 1;
                if *pending_confirms == 0 {
                    let mut h = link.health.borrow_mut();
                    h.restored = true;
                    h.restored_at = Some(Instant::now());
                    drop(h);
                    log!(
                        Info,
                        "redis subscriptions restored",
                        channels = restored_count - 1
                    );
                    link.wake_writer();
                }
            }
            PubSubEvent::Subscribed(_) | PubSubEvent::Unsubscribed(_) | PubSubEvent::Pong => {}
            PubSubEvent::Error(e) => return Err(LinkError::Refused(e)),
        }
    }
    Ok(())
}

fn on_message(ctx: &Ctx, link: &RedisLink, channel: &[u8], payload: Bytes) {
    if channel == link.canary_key.as_bytes() {
        on_canary(ctx, link, &payload);
        return;
    }
    let Some(name) = channel
        .strip_prefix(link.prefix.as_bytes())
        .and_then(|c| std::str::from_utf8(c).ok())
    else {
        return;
    };
    let env = envelope::decode(payload);
    let skip = env
        .origin
        .filter(|o| o.instance == link.instance)
        .map(|o| o.sender);
    let mut hub = ctx.hub.borrow_mut();
    hub.stats.redis_messages_received += 1;
    hub.publish(name, env.opcode, &env.payload, skip);
}

fn on_canary(ctx: &Ctx, link: &RedisLink, payload: &[u8]) {
    let sent_us = std::str::from_utf8(payload)
        .ok()
        .and_then(|s| s.parse::<u64>().ok());
    let Some(sent_us) = sent_us else { return };
    let now_us = link.started.elapsed().as_micros() as u64;
    let rtt = Duration::from_micros(now_us.saturating_sub(sent_us));
    let mut h = link.health.borrow_mut();
    h.last_canary = Some(Instant::now());
    h.canary_rtt = Some(rtt);
    ctx.hub.borrow_mut().stats.redis_canary_rtt_us = rtt.as_micros() as u64;
}

/// Follows the hub's interest log with SUBSCRIBE / UNSUBSCRIBE commands.
async fn interest_writer(
    ctx: &Ctx,
    link: &RedisLink,
    wr: &mut monoio::net::tcp::TcpOwnedWriteHalf,
    stop: &Cell<bool>,
) {
    let mut changes = Vec::new();
    loop {
        let go = poll_fn(|cx| {
            if stop.get() {
                return Poll::Ready(false);
            }
            ctx.hub
                .borrow_mut()
                .poll_interest(cx, &mut changes)
                .map(|()| true)
        })
        .await;
        if !go {
            return;
        }
        let mut out = BytesMut::new();
        for group in changes.chunk_by(|a, b| a.1 == b.1) {
            let verb: &[u8] = if group[0].1 {
                b"SUBSCRIBE"
            } else {
                b"UNSUBSCRIBE"
            };
            let keys: Vec<Vec<u8>> = group.iter().map(|(c, _)| redis_key(link, c)).collect();
            for chunk in keys.chunks(SUBSCRIBE_CHUNK) {
                out.extend_from_slice(&subscribe_cmd(verb, chunk));
            }
        }
        changes.clear();
        let (res, _) = wr.write_all(out.freeze()).await;
        if res.is_err() {
            return;
        }
    }
}

/// Publishes the canary and cuts a subscriber connection that stopped
/// delivering it (a half-open connection would otherwise go unnoticed).
async fn canary_loop(ctx: Rc<Ctx>, link: Rc<RedisLink>) {
    loop {
        monoio::time::sleep(link.canary_interval).await;
        let (up, stale) = {
            let h = link.health.borrow();
            let up = h.cmd_connected && h.restored;
            let stale = h
                .last_canary
                .is_some_and(|t| t.elapsed() > link.canary_deadline() * 2);
            (up, stale)
        };
        if !up {
            continue;
        }
        if stale {
            if let Some(fd) = link.sub_fd.get() {
                log!(Warn, "redis canary lost, reconnecting subscriber");
                link.health.borrow_mut().last_canary = None;
                sys::shutdown(fd);
            }
        }
        let now_us = link.started.elapsed().as_micros().to_string();
        let cmd = resp::command(&[b"PUBLISH", link.canary_key.as_bytes(), now_us.as_bytes()]);
        if link
            .pipeline
            .borrow_mut()
            .push(cmd, CmdKind::Canary)
            .is_ok()
        {
            link.wake_writer();
        }
        let _ = &ctx;
    }
}
