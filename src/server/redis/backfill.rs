//! Reading history back from Redis: a channel's position and a range of
//! its stream, for a subscribe that resumes and for the backfill that
//! closes a gap in what the subscriber connection delivered.

use std::rc::Rc;

use super::link::{Local, RedisLink};
use crate::history::relay::{Fetch, Snapshot};
use crate::log;
use crate::redis::stream;

/// Reads `channel`'s position and its entries from offset `from` (0:
/// the position only), within the command timeout; a channel without
/// history gets one (an epoch at offset 0).
pub async fn read(link: &RedisLink, channel: &str, from: u64) -> Result<Snapshot, String> {
    read_if_any(link, channel, from, true)
        .await?
        .ok_or_else(|| "no history created".to_string())
}

/// [`read`] that leaves a channel without history alone (`None`), for
/// `GET /history`: a read must not create keys.
pub async fn read_if_any(
    link: &RedisLink,
    channel: &str,
    from: u64,
    create: bool,
) -> Result<Option<Snapshot>, String> {
    let waiter = link
        .read_history(channel, from, create)
        .map_err(|_| "redis command buffer full".to_string())?;
    let reply = monoio::time::timeout(link.command_timeout, waiter.wait())
        .await
        .map_err(|_| "redis read timed out".to_string())??;
    stream::parse_read(reply, link.max_message).map_err(|e| format!("{e:?}"))
}

/// Makes the reads and hands each result to the worker, in order; a
/// long range comes in parts (each reply within `--redis-max-reply-size`).
pub(super) fn spawn(link: &Rc<RedisLink>, local: &Rc<dyn Local>, fetches: Vec<Fetch>) {
    for first in fetches {
        let (link, local) = (link.clone(), local.clone());
        monoio::spawn(async move {
            let mut next = Some(first);
            while let Some(f) = next {
                let snap = match read(&link, &f.channel, f.from).await {
                    Ok(s) => Some(s),
                    Err(e) => {
                        log!(
                            Warn,
                            "history backfill failed",
                            channel = &*f.channel,
                            error = e
                        );
                        None
                    }
                };
                next = local.fetched(&f, snap);
            }
        });
    }
}
