//! `POST /cache/purge`: the bearer-token check and the purge itself.

use crate::cache::key::{self, VARIANT_SEP};
use crate::cache::purge::{self, Purge};
use crate::cache::request::ClientRequest;
use crate::http::{self};
use crate::log;

use super::edge::{CacheEdge, Incoming};
use super::store::StoreError;

/// `POST /cache/purge` with `Authorization: Bearer {token}`.
pub(super) async fn purge(edge: &CacheEdge, inc: Incoming) -> Vec<u8> {
    let keep = inc.keep_alive;
    let json = |status: u16, body: serde_json::Value, extra: &[(&str, &str)]| {
        let body = body.to_string();
        http::response(
            status,
            "application/json",
            body.as_bytes(),
            keep,
            extra,
            false,
        )
    };
    let Some(token) = &edge.purge_token else {
        return json(404, serde_json::json!({ "error": "not found" }), &[]);
    };
    let req = ClientRequest::parse(&inc.head).ok();
    let auth = req.as_ref().and_then(|r| r.header("authorization"));
    if !purge::bearer_matches(auth, token.expose().as_bytes()) {
        edge.count(|s| s.purge_refused += 1);
        log::refused(
            log::Refusal::PurgeToken,
            "cache purge refused",
            "missing or wrong bearer token",
        );
        let body = serde_json::json!({ "error": "missing or wrong bearer token" });
        return json(401, body, &[("WWW-Authenticate", "Bearer")]);
    }
    let what = match purge::parse(&inc.body) {
        Ok(p) => p,
        Err(message) => return json(400, serde_json::json!({ "error": message }), &[]),
    };
    edge.flights.purged();
    let result = delete(edge, &what).await;
    let memory = edge.store.memory_bytes();
    match result {
        Ok((n, complete)) => {
            edge.count(|s| {
                s.purged += n as u64;
                if let Some(m) = memory {
                    s.memory_bytes = m;
                }
            });
            log!(
                Info,
                "cache purged",
                what = log::Dbg(&what),
                keys = n,
                complete = complete
            );
            json(
                200,
                serde_json::json!({ "purged": n, "complete": complete }),
                &[],
            )
        }
        Err(e) => {
            log!(
                Warn,
                "cache purge failed",
                what = log::Dbg(&what),
                error = e
            );
            json(
                503,
                serde_json::json!({ "error": "cache store unavailable" }),
                &[],
            )
        }
    }
}

/// Deletes what a purge names (at most `--cache-purge-max-keys` keys):
/// how many, and whether that was all of them.
async fn delete(edge: &CacheEdge, what: &Purge) -> Result<(usize, bool), StoreError> {
    let max = edge.purge_max_keys;
    match what {
        Purge::Key(target) => {
            let k = key::key_of_target(target);
            let mut variants = k.clone();
            variants.push(VARIANT_SEP);
            edge.store
                .delete(&k, &variants, max)
                .await
                .map(|n| (n, true))
        }
        Purge::Prefix(prefix) => {
            let k = key::base_key(prefix, "");
            edge.store.delete_prefix(&k, max).await
        }
    }
}
