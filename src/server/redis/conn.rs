//! Opening and keeping a connection to a shard: connect with a timeout,
//! the `AUTH`/`SELECT` handshake, reads, and the reconnect loop (backoff
//! with jitter, a long pause after Redis refused our credentials, one
//! log line per distinct failure). Both connections of a shard use it.

use std::future::Future;
use std::io;
use std::time::Duration;

use bytes::BytesMut;
use monoio::net::TcpStream;

use super::link::RedisLink;
use super::shard::Shard;
use crate::log;
use crate::redis::cluster::{self, Node};
use crate::redis::resp::{self, Reply};
use crate::redis::{commands, sentinel, stream, RedisError};
use crate::server::resolve::{Resolver, REDIS_DNS_TTL};
use crate::server::tls::client::{ClientStream, HandshakeError};

/// Longest pause between reconnect attempts. Short on purpose: after a
/// Redis restart, instances come back at most this far apart, which bounds
/// the window in which one instance's buffered publishes could reach Redis
/// before another instance has re-subscribed (see `resume_delay`).
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// Pause after Redis refused our credentials or database: retrying faster
/// would only fill its log.
const AUTH_BACKOFF: Duration = Duration::from_secs(30);

/// The two connections of a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// Pipelined commands (`PUBLISH`, cache reads and writes, the canary).
    Command,
    /// Subscriptions and the messages they deliver.
    Subscriber,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Command => "command connection",
            Role::Subscriber => "subscriber connection",
        }
    }
}

/// Keeps one connection of `role` up for as long as the worker runs:
/// connects, runs `session` on it until it fails, and tries again after
/// a pause.
pub(super) async fn keep_up<F, Fut>(link: &RedisLink, shard: &Shard, role: Role, mut session: F)
where
    F: FnMut(ClientStream, BytesMut) -> Fut,
    Fut: Future<Output = RedisError>,
{
    let seed = match role {
        Role::Command => link.instance,
        Role::Subscriber => link.instance.rotate_left(17),
    };
    let mut backoff = Backoff::new(seed);
    let mut logged = None;
    loop {
        if shard.retired.get() {
            // Not a master any more: idle until a refresh revives it.
            monoio::time::sleep(MAX_BACKOFF).await;
            continue;
        }
        match open(link, shard, role).await {
            Ok((stream, buf)) => {
                backoff.reset();
                logged = None;
                let err = session(stream, buf).await;
                count_protocol_error(link, &err);
                let what = role.name();
                shard.health.borrow_mut().last_error = Some(format!("{what}: {err}"));
                log!(
                    Warn,
                    "redis connection lost",
                    connection = what,
                    url = shard.url.borrow(),
                    error = err
                );
                if let Some(c) = &link.cluster {
                    // A failover or a node gone: the map may have changed.
                    c.refresh();
                }
                if let Some(s) = &link.sentinel {
                    s.refresh();
                }
            }
            Err(e) => {
                count_protocol_error(link, &e);
                note_failure(shard, role.name(), &e, &mut logged);
                if let Some(c) = &link.cluster {
                    c.refresh();
                }
                if let Some(s) = &link.sentinel {
                    s.refresh();
                }
                if matches!(e, RedisError::Refused(_)) {
                    monoio::time::sleep(AUTH_BACKOFF).await;
                    continue;
                }
            }
        }
        monoio::time::sleep(backoff.pause()).await;
    }
}

/// Connects to the first of the host's addresses (resolved off the
/// worker) that accepts, then (`rediss://`) runs the TLS handshake; both
/// by `deadline`.
async fn connect(
    link: &RedisLink,
    shard: &Shard,
    deadline: monoio::time::Instant,
) -> Result<ClientStream, RedisError> {
    let tcp = monoio::time::timeout_at(deadline, connect_tcp(shard))
        .await
        .map_err(|_| RedisError::Timeout)??;
    let _ = tcp.set_nodelay(true);
    let url = shard.url.borrow().clone();
    if !url.tls {
        return Ok(ClientStream::plain(tcp));
    }
    let cfg = link
        .tls
        .clone()
        .expect("a client configuration when a URL is rediss://");
    match monoio::time::timeout_at(deadline, ClientStream::handshake(tcp, cfg, &url.host)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(tls_failed(link, e)),
        // A server that is not TLS may wait for a line that never comes.
        Err(_) => Err(tls_failed(link, HandshakeError::TimedOut)),
    }
}

/// A failed TLS handshake, counted: the certificate refused (or the
/// server not speaking TLS) is a [`RedisError::Tls`]; the socket failing
/// under it stays an I/O error.
pub(super) fn tls_failed(link: &RedisLink, e: HandshakeError) -> RedisError {
    link.stats.borrow_mut().tls_failures += 1;
    match e {
        HandshakeError::Io(e) => RedisError::Io(e),
        e => RedisError::Tls(e.to_string()),
    }
}

/// The TCP connection (first address that accepts).
async fn connect_tcp(shard: &Shard) -> Result<TcpStream, RedisError> {
    let resolver = shard.resolver.borrow().clone();
    let addrs = resolver.addrs().await.map_err(RedisError::Resolve)?;
    let mut last = io::Error::from(io::ErrorKind::AddrNotAvailable);
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(RedisError::Io(last))
}

/// Connects (the TLS handshake included, under the connect timeout),
/// authenticates and (for commands) selects the database.
async fn open(
    link: &RedisLink,
    shard: &Shard,
    role: Role,
) -> Result<(ClientStream, BytesMut), RedisError> {
    let url = &shard.url.borrow().clone();
    let deadline = monoio::time::Instant::now() + link.connect_timeout;
    let mut stream = connect(link, shard, deadline).await?;
    let mut buf = BytesMut::new();
    let mut cmds = commands::handshake(url, role == Role::Command);
    if role == Role::Command && link.keeps_history() {
        // Loaded on every connect: a restarted Redis has an empty script
        // cache, and EVALSHA must find them.
        cmds.push(stream::script_load(stream::PUBLISH_SCRIPT));
        cmds.push(stream::script_load(stream::READ_SCRIPT));
    }
    if role == Role::Command && link.presence {
        cmds.extend(crate::redis::presence::SCRIPTS.map(stream::script_load));
        // Pusher apps' channel occupancy (`link.presence` covers them).
        cmds.extend(crate::redis::occupancy::SCRIPTS.map(stream::script_load));
    }
    for cmd in cmds {
        stream.write_all(cmd).await?;
        let reply = monoio::time::timeout(
            link.command_timeout,
            read_reply(link, &mut stream, &mut buf),
        )
        .await
        .map_err(|_| RedisError::Timeout)??;
        if let Reply::Error(e) = reply {
            return Err(RedisError::Refused(e.to_string()));
        }
    }
    if link.sentinel.is_some() {
        check_master(link, &mut stream, &mut buf).await?;
    }
    Ok((stream, buf))
}

/// Sentinel mode: `ROLE` must say `master` (a Sentinel may be behind, or
/// lie; a demoted master may still accept connections): else the
/// connection is not used and the Sentinels are asked again.
async fn check_master(
    link: &RedisLink,
    stream: &mut ClientStream,
    buf: &mut BytesMut,
) -> Result<(), RedisError> {
    stream.write_all(resp::command(&[b"ROLE"])).await?;
    let reply = monoio::time::timeout(link.command_timeout, read_reply(link, stream, buf))
        .await
        .map_err(|_| RedisError::Timeout)??;
    match sentinel::role(&reply) {
        Some(sentinel::Role::Master) => Ok(()),
        Some(sentinel::Role::Other) => Err(RedisError::NotMaster),
        None => Err(RedisError::Refused(format!("ROLE: {reply:?}"))),
    }
}

/// A short-lived connection to `node` (a topology read, a Sentinel):
/// its first address that accepts, over TLS when `tls`. Errors are
/// strings for `/readyz`.
pub(super) async fn dial(link: &RedisLink, node: &Node, tls: bool) -> Result<ClientStream, String> {
    let addrs = match cluster::literal(node) {
        Some(a) => vec![a],
        None => {
            Resolver::new("redis", &node.host, node.port, REDIS_DNS_TTL)
                .addrs()
                .await?
        }
    };
    let mut stream = None;
    for a in addrs {
        if let Ok(s) = TcpStream::connect(a).await {
            stream = Some(s);
            break;
        }
    }
    let tcp = stream.ok_or("connection refused")?;
    match link.tls.clone().filter(|_| tls) {
        Some(cfg) => ClientStream::handshake(tcp, cfg, &node.host)
            .await
            .map_err(|e| tls_failed(link, e).to_string()),
        None => Ok(ClientStream::plain(tcp)),
    }
}

/// Writes one command and reads its reply (on a [`dial`]ed connection).
pub(super) async fn exchange(
    link: &RedisLink,
    stream: &mut ClientStream,
    buf: &mut BytesMut,
    cmd: bytes::Bytes,
) -> Result<Reply, String> {
    stream.write_all(cmd).await.map_err(|e| e.to_string())?;
    read_reply(link, stream, buf)
        .await
        .map_err(|e| e.to_string())
}

/// Reads one reply on a connection being set up (or a topology read).
pub(super) async fn read_reply(
    link: &RedisLink,
    stream: &mut ClientStream,
    buf: &mut BytesMut,
) -> Result<Reply, RedisError> {
    loop {
        if let Some(r) = resp::decode(buf, &link.limits)? {
            return Ok(r);
        }
        if stream.read_some(buf).await? == 0 {
            return Err(RedisError::Io(io::ErrorKind::UnexpectedEof.into()));
        }
    }
}

/// Counts a connection dropped for what Redis sent (as opposed to the
/// network failing): a broken or hostile peer shows in `/metrics`.
fn count_protocol_error(link: &RedisLink, e: &RedisError) {
    if matches!(e, RedisError::Resp(_)) {
        link.stats.borrow_mut().protocol_errors += 1;
    }
}

/// Records a failed attempt for `/readyz`; logs it only when it differs
/// from the last failure this connection logged (`logged`), not on every
/// retry. Kept per connection because both share `last_error`: compared
/// against that, their messages alternate and every attempt is logged.
fn note_failure(shard: &Shard, what: &str, e: &RedisError, logged: &mut Option<String>) {
    let msg = format!("{what}: {e}");
    if logged.as_deref() != Some(msg.as_str()) {
        let url = &*shard.url.borrow();
        match e {
            RedisError::Refused(_) | RedisError::Tls(_) => {
                log!(
                    Error,
                    "redis refused the connection",
                    url = url,
                    error = msg
                )
            }
            _ => log!(Warn, "redis unavailable, retrying", url = url, error = msg),
        }
        *logged = Some(msg.clone());
    }
    shard.health.borrow_mut().last_error = Some(msg);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap_with_jitter_and_resets() {
        let mut b = Backoff::new(42);
        let pauses: Vec<Duration> = (0..8).map(|_| b.pause()).collect();
        assert!(pauses[0] >= Duration::from_millis(50) && pauses[0] <= Duration::from_millis(100));
        assert!(pauses.iter().all(|p| *p <= MAX_BACKOFF));
        assert!(pauses[7] >= MAX_BACKOFF / 2);
        b.reset();
        assert!(b.pause() <= Duration::from_millis(100));
    }
}
