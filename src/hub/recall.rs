//! History seen from the hub: the offset a publish gets, the position a
//! subscribe answers with, and the replay a resume gets — all in the same
//! step as the subscribe itself, so nothing published in between can
//! fall into a gap or arrive twice (the worker is single-threaded).

use std::sync::Arc;

use bytes::Bytes;

use crate::history::{Entry, History, Kept, Position};
use crate::meta::Meta;
use crate::stats::Stats;
use crate::ws::OpCode;

/// What a subscribe on a channel with history answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resumed {
    /// The channel's epoch and latest offset.
    pub position: Position,
    /// `Some` when the subscribe asked to resume: whether it could.
    pub recovered: Option<bool>,
    /// The messages after the client's position (when recovered).
    pub replay: Vec<Entry>,
}

/// Bytes a replay frame costs beyond its payload (the JSON envelope),
/// for the replay bound.
const FRAME_OVERHEAD: usize = 96;

/// Answers a subscribe to `channel` at `now_ms`, resuming after `since`
/// when given; a replay larger than `max_replay` bytes is not attempted
/// (it would only get the subscriber cut as slow): not recovered.
pub(super) fn resume(
    history: &mut History,
    stats: &mut Stats,
    channel: &str,
    since: Option<(&str, u64)>,
    (now_ms, max_replay): (u64, usize),
) -> Resumed {
    let position = history.position(channel, now_ms);
    let Some(since) = since else {
        return Resumed {
            position,
            recovered: None,
            replay: Vec::new(),
        };
    };
    let replay = history.recover(channel, since).ok().filter(|r| {
        let bytes: usize = r.iter().map(|e| e.payload.len() + FRAME_OVERHEAD).sum();
        bytes <= max_replay
    });
    match replay {
        Some(replay) => {
            stats.recoveries += 1;
            stats.recovered_messages += replay.len() as u64;
            Resumed {
                position,
                recovered: Some(true),
                replay,
            }
        }
        None => {
            stats.recoveries_failed += 1;
            Resumed {
                position,
                recovered: Some(false),
                replay: Vec::new(),
            }
        }
    }
}

/// Records a local publish in the channel's history; returns its
/// position (`None` when history is off). `room`: what the memory budget
/// leaves.
pub(super) fn record(
    history: &mut History,
    channel: &str,
    (opcode, payload, meta): (OpCode, &[u8], Option<Arc<Meta>>),
    now_ms: u64,
    room: usize,
) -> Option<Position> {
    // Internal channels (`!status`) and Pusher's are outside the client
    // charset: no client can resume them, so they keep no history.
    if !history.enabled_for(channel) || !crate::channel::keeps_history(channel) {
        return None;
    }
    let payload = Bytes::copy_from_slice(payload);
    Some(history.append(channel, (opcode, payload, meta), now_ms, room))
}

/// Keeps a message another worker (its channel's owner) recorded at `at`
/// in this worker's copy of the channel's ring (`History::store`: a ring
/// that was elsewhere starts over at it).
pub(super) fn store(
    history: &mut History,
    channel: &str,
    at: (&str, u64),
    entry: Kept,
    (now_ms, room): (u64, usize),
) {
    if history.enabled_for(channel) && crate::channel::keeps_history(channel) {
        history.store(channel, at, entry, now_ms, room);
    }
}
