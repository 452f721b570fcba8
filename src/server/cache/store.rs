//! Where entries live: Redis (shared by every instance) when corecast runs
//! in Redis mode, otherwise the embedded LRU store (one per process,
//! shared by its workers). Both hold the same encoded bytes under the
//! same keys, so the cache behaves the same.
//!
//! Redis is never allowed to fail or slow a request: every wait is bounded
//! by `--cache-redis-timeout`, nothing is sent while the link is down, and
//! a full pipeline, a timeout or an error is reported as [`StoreError`],
//! which the cache treats as a miss (reads) or as "not stored" (writes).

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;

use crate::cache::key::glob_escape;
use crate::cache::memory::MemoryStore;
use crate::cache::now_ms;
use crate::redis::resp::Reply;
use crate::server::redis::RedisLink;

/// Keys asked for per `SCAN` of a prefix purge.
const SCAN_COUNT: &[u8] = b"1000";
/// Most `SCAN` calls of one prefix purge: a keyspace of many millions of
/// unrelated keys ends the call (reported incomplete) instead of holding it.
const MAX_SCANS: usize = 1000;

/// One entry to write: key, encoded value, time to live in ms.
pub type Item = (Vec<u8>, Bytes, u64);

/// Why the store could not answer (each is a miss / no store to the cache).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The Redis link is down (or still restoring).
    Unavailable,
    /// Redis did not answer within the bound.
    Timeout,
    /// The Redis pipeline is at its byte bound.
    Full,
    /// Redis answered with an error or something unexpected.
    Redis(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Unavailable => f.write_str("redis unavailable"),
            StoreError::Timeout => f.write_str("redis timed out"),
            StoreError::Full => f.write_str("redis pipeline full"),
            StoreError::Redis(e) => write!(f, "redis: {e}"),
        }
    }
}

/// The embedded store as the workers of a process share it: locked once
/// per cache read or write (and per purge), never per message.
pub type SharedMemory = Arc<Mutex<MemoryStore>>;

/// The two stores.
pub enum Store {
    /// The embedded LRU store (the process's, with several workers).
    Memory(RefCell<SharedMemory>),
    /// Redis, under `{redis_prefix}cache:`.
    Redis(RedisStore),
}

/// The Redis store's link and bounds.
pub struct RedisStore {
    link: Rc<RedisLink>,
    namespace: Vec<u8>,
    timeout: Duration,
    purge_timeout: Duration,
}

impl Store {
    /// The embedded store of `max_bytes`.
    pub fn memory(max_bytes: usize) -> Store {
        let m = Arc::new(Mutex::new(MemoryStore::new(max_bytes)));
        Store::Memory(RefCell::new(m))
    }

    /// Uses `shared` (the process's memory store) instead of this
    /// worker's own; nothing for Redis.
    pub fn share(&self, shared: SharedMemory) {
        if let Store::Memory(m) = self {
            *m.borrow_mut() = shared;
        }
    }

    /// The Redis store: keys under `{prefix}cache:`; request-path waits
    /// bounded by `timeout`, purge calls by `purge_timeout`.
    pub fn redis(
        link: Rc<RedisLink>,
        prefix: &str,
        timeout: Duration,
        purge_timeout: Duration,
    ) -> Store {
        Store::Redis(RedisStore {
            link,
            namespace: format!("{prefix}cache:").into_bytes(),
            timeout,
            purge_timeout,
        })
    }

    /// Bytes held by the memory store (`None` for Redis).
    pub fn memory_bytes(&self) -> Option<u64> {
        match self {
            Store::Memory(m) => Some(with(m, |m| m.bytes() as u64)),
            Store::Redis(_) => None,
        }
    }

    /// The value under `key`, if any.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        match self {
            Store::Memory(m) => Ok(with(m, |m| m.get(key, now_ms()))),
            Store::Redis(r) => {
                let k = r.key(key);
                match r.call(&[b"GET", &k], r.timeout).await? {
                    Reply::BulkString(b) => Ok(Some(b)),
                    Reply::Null => Ok(None),
                    other => Err(unexpected(&other)),
                }
            }
        }
    }

    /// Writes every item (for Redis: pipelined, one bounded wait) if
    /// `valid` still holds (checked under the memory store's lock, so a
    /// purge on another worker either precedes the check or deletes what
    /// was written); returns the bytes written, `None` when not valid.
    pub async fn set(
        &self,
        items: &[Item],
        valid: impl Fn() -> bool,
    ) -> Result<Option<u64>, StoreError> {
        match self {
            Store::Memory(m) => {
                let now = now_ms();
                Ok(with(m, |m| {
                    valid().then(|| {
                        let stored = items.iter();
                        let stored = stored.filter(|(k, v, ttl)| m.set(k, v.clone(), *ttl, now));
                        stored.map(|(_, v, _)| v.len() as u64).sum()
                    })
                }))
            }
            Store::Redis(_) if !valid() => Ok(None),
            Store::Redis(r) => r.set(items).await.map(Some),
        }
    }

    /// Deletes `key` and (memory store) any variants under it; returns how
    /// many keys went. In Redis the variants stay, unreachable without the
    /// marker, until they expire.
    pub async fn delete(
        &self,
        key: &[u8],
        variants: &[u8],
        max: usize,
    ) -> Result<usize, StoreError> {
        match self {
            Store::Memory(m) => Ok(with(m, |m| {
                let one = usize::from(m.remove(key));
                one + m.remove_prefix(variants, max).0
            })),
            Store::Redis(r) => {
                let k = r.key(key);
                match r.call(&[b"DEL", &k], r.purge_timeout).await? {
                    Reply::Integer(n) => Ok(n.max(0) as usize),
                    other => Err(unexpected(&other)),
                }
            }
        }
    }

    /// Deletes at most `max` keys starting with `prefix`; returns how many
    /// and whether none are left.
    pub async fn delete_prefix(
        &self,
        prefix: &[u8],
        max: usize,
    ) -> Result<(usize, bool), StoreError> {
        match self {
            Store::Memory(m) => Ok(with(m, |m| m.remove_prefix(prefix, max))),
            Store::Redis(r) => r.delete_prefix(prefix, max).await,
        }
    }
}

/// Runs `f` on the memory store, locked (a worker that panicked holding
/// it aborted the process, so a poisoned lock is never seen in service).
fn with<T>(m: &RefCell<SharedMemory>, f: impl FnOnce(&mut MemoryStore) -> T) -> T {
    let shared = m.borrow();
    let mut store = shared.lock().unwrap_or_else(PoisonError::into_inner);
    f(&mut store)
}

impl RedisStore {
    fn key(&self, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.namespace.len() + key.len());
        k.extend_from_slice(&self.namespace);
        k.extend_from_slice(key);
        k
    }

    /// One command and its reply within `timeout`; nothing is queued while
    /// the link is down (it would wait in the pipeline and be replayed).
    async fn call(&self, args: &[&[u8]], timeout: Duration) -> Result<Reply, StoreError> {
        self.call_on(None, args, timeout).await
    }

    /// [`RedisStore::call`] on server `node` of `RedisLink::nodes` (`None`:
    /// where the key `args[1]` lives).
    async fn call_on(
        &self,
        node: Option<usize>,
        args: &[&[u8]],
        timeout: Duration,
    ) -> Result<Reply, StoreError> {
        if !self.link.is_up() {
            return Err(StoreError::Unavailable);
        }
        let waiter = match node {
            Some(n) => self.link.command_on(n, args),
            None => self.link.command(args),
        };
        let waiter = waiter.map_err(|_| StoreError::Full)?;
        match monoio::time::timeout(timeout, waiter.wait()).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(StoreError::Redis(e)),
            Err(_) => Err(StoreError::Timeout),
        }
    }

    async fn set(&self, items: &[Item]) -> Result<u64, StoreError> {
        if !self.link.is_up() {
            return Err(StoreError::Unavailable);
        }
        let mut waiters = Vec::with_capacity(items.len());
        for (key, value, ttl) in items {
            let ttl = (*ttl).max(1).to_string();
            let cmd: [&[u8]; 5] = [b"SET", &self.key(key), value, b"PX", ttl.as_bytes()];
            waiters.push(self.link.cache_write(&cmd).map_err(|_| StoreError::Full)?);
        }
        let all = async {
            for w in &waiters {
                match w.wait().await {
                    Ok(Reply::SimpleString(_)) => {}
                    Ok(other) => return Err(unexpected(&other)),
                    Err(e) => return Err(StoreError::Redis(e)),
                }
            }
            Ok(items.iter().map(|(_, v, _)| v.len() as u64).sum())
        };
        monoio::time::timeout(self.timeout, all)
            .await
            .unwrap_or(Err(StoreError::Timeout))
    }

    /// `SCAN … MATCH {namespace}{prefix}*` + `DEL` on every server (each
    /// master of a cluster holds its slots' keys), bounded in keys deleted
    /// and in `SCAN` calls per server.
    async fn delete_prefix(&self, prefix: &[u8], max: usize) -> Result<(usize, bool), StoreError> {
        let mut deleted = 0;
        for node in 0..self.link.nodes() {
            let (n, complete) = self.delete_prefix_on(node, prefix, max - deleted).await?;
            deleted += n;
            if !complete {
                return Ok((deleted, false));
            }
        }
        Ok((deleted, true))
    }

    async fn delete_prefix_on(
        &self,
        node: usize,
        prefix: &[u8],
        max: usize,
    ) -> Result<(usize, bool), StoreError> {
        let mut pattern = glob_escape(&self.key(prefix));
        pattern.push(b'*');
        let mut cursor = b"0".to_vec();
        let mut deleted = 0;
        for _ in 0..MAX_SCANS {
            let cmd: [&[u8]; 6] = [b"SCAN", &cursor, b"MATCH", &pattern, b"COUNT", SCAN_COUNT];
            let reply = self.call_on(Some(node), &cmd, self.purge_timeout).await?;
            let (next, keys) = scan_reply(reply)?;
            let take = keys.len().min(max - deleted);
            if take > 0 {
                deleted += self.delete(&keys[..take]).await?;
            }
            if next == b"0" && take == keys.len() {
                return Ok((deleted, true));
            }
            if deleted >= max || take < keys.len() {
                return Ok((deleted, false));
            }
            cursor = next;
        }
        Ok((deleted, false))
    }
}

impl RedisStore {
    /// `DEL` of `keys`: one command with one Redis; in a cluster one per
    /// key (keys of different slots, each to its master), pipelined.
    async fn delete(&self, keys: &[Bytes]) -> Result<usize, StoreError> {
        if !self.link.is_cluster() {
            let mut del: Vec<&[u8]> = vec![b"DEL"];
            del.extend(keys.iter().map(|k| &k[..]));
            return match self.call(&del, self.purge_timeout).await? {
                Reply::Integer(n) => Ok(n.max(0) as usize),
                other => Err(unexpected(&other)),
            };
        }
        if !self.link.is_up() {
            return Err(StoreError::Unavailable);
        }
        let waiters = keys
            .iter()
            .map(|k| self.link.command(&[b"DEL", k]))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| StoreError::Full)?;
        let all = async {
            let mut deleted = 0;
            for w in &waiters {
                match w.wait().await {
                    Ok(Reply::Integer(n)) => deleted += n.max(0) as usize,
                    Ok(other) => return Err(unexpected(&other)),
                    Err(e) => return Err(StoreError::Redis(e)),
                }
            }
            Ok(deleted)
        };
        monoio::time::timeout(self.purge_timeout, all)
            .await
            .unwrap_or(Err(StoreError::Timeout))
    }
}

fn scan_reply(reply: Reply) -> Result<(Vec<u8>, Vec<Bytes>), StoreError> {
    let Reply::Array(mut parts) = reply else {
        return Err(unexpected(&reply));
    };
    if parts.len() != 2 {
        return Err(StoreError::Redis("SCAN reply is not [cursor, keys]".into()));
    }
    let keys = match parts.pop() {
        Some(Reply::Array(keys)) => keys
            .into_iter()
            .filter_map(|k| match k {
                Reply::BulkString(b) => Some(b),
                _ => None,
            })
            .collect(),
        _ => return Err(StoreError::Redis("SCAN keys are not an array".into())),
    };
    match parts.pop() {
        Some(Reply::BulkString(c)) => Ok((c.to_vec(), keys)),
        _ => Err(StoreError::Redis("SCAN cursor is not a string".into())),
    }
}

fn unexpected(reply: &Reply) -> StoreError {
    StoreError::Redis(format!("unexpected reply {reply:?}"))
}
