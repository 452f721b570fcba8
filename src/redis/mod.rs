//! The Redis side, sans-I/O: URLs, RESP encoding/decoding and pipelining
//! (on the `redis-protocol` crate), and the envelope corecast messages wear
//! on Redis channels. The monoio connections live in `server::redis`.
//!
//! # Layout
//! - [`url`]: `redis://` URLs with optional credentials and database.
//! - [`resp`]: command encoding, zero-copy reply decoding, pub/sub event
//!   classification, and [`resp::Pipeline`] — in-order reply matching with
//!   a byte bound and requeue-on-reconnect.
//! - [`scan`]: the bounded, iterative pre-scan every reply passes before
//!   the (recursive) decoder sees it.
//! - [`envelope`]: opcode and origin carried through Redis.
//! - [`inbound`]: a subscriber connection's bytes classified into events
//!   (deliver, canary, dropped and why, refused).
//! - [`commands`]: the commands corecast sends (`PUBLISH` with its
//!   envelope, bounded `SUBSCRIBE` groups, the `AUTH`/`SELECT` handshake).
//! - [`sentinel`]: Redis Sentinel: the `redis+sentinel://` URL, the
//!   master's address asked of the Sentinels, `+switch-master`, `ROLE`.
//! - [`cluster`]: Redis Cluster placement: CRC16 slots with hash tags, the
//!   slot map from `CLUSTER SLOTS`, `MOVED`/`ASK` redirections.
//! - [`stream`]: history in Redis — the publish and read scripts (one
//!   atomic step each), hash-tagged keys, `EVALSHA` commands, read replies.
//! - [`presence`]: presence in Redis — per channel an entry per (instance,
//!   user) with an expiry, the add/remove/prune scripts that decide joins
//!   and leaves atomically and publish them.
//! - [`occupancy`]: Pusher channel occupancy across instances — per app
//!   an entry per (instance, channel) with an expiry, the set/settle
//!   scripts that decide `channel_occupied`/`channel_vacated` once per
//!   app (with a grace), and the listings' reads.
//! - [`config`]: [`RedisConfig`], Redis mode's settings.
//! - [`error`]: [`RedisError`], why a connection failed.

pub mod cluster;
pub mod commands;
pub mod config;
pub mod envelope;
pub mod error;
pub mod inbound;
pub mod occupancy;
pub mod presence;
pub mod resp;
pub mod scan;
pub mod sentinel;
pub mod stream;
pub mod url;

pub use config::RedisConfig;
pub use error::RedisError;
pub use url::{ClusterSeeds, RedisUrl};
