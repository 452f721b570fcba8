//! The refresh hook (`--proxy-refresh`): a connection the connect hook
//! gave an `expire_at` is asked about before that time (one second plus
//! `--proxy-timeout` ahead, at most once a second). `expire_at` in the result extends
//! it (0: no expiry any more); `expired: true`, an `error` or the time
//! running out close it with 4001, a `disconnect` with its code. A failed
//! call is retried each second until the expiry, which stays the
//! backstop (the hub's token timer closes it then: fail closed).

use std::rc::Rc;
use std::time::Duration;

use crate::auth;
use crate::hooks::reply::{self, RefreshResult};
use crate::hooks::{request, Answer, HookKind};
use crate::hub::{CloseReason, ConnId, CLOSE_TOKEN_EXPIRED};
use crate::log;
use crate::server::worker::Worker;

/// Whom to ask about: the user, and its current expiry (unix seconds).
#[derive(Debug)]
pub struct Plan {
    /// The connect hook's `user`.
    pub user: String,
    /// Its `expire_at`.
    pub exp: u64,
}

/// Asks the refresh hook about connection `id` (`serial`) for as long as
/// it lives and has an expiry.
pub async fn refresh_loop(w: Rc<Worker>, (id, serial): (ConnId, u64), mut plan: Plan) {
    let Some(edge) = w.hooks.clone() else { return };
    let lead_ms = edge.config().timeout.as_millis() as u64 + 1000;
    let client = crate::pusher::socket_id(w.pusher.borrow().tag, serial);
    let mut first = true;
    loop {
        let due_ms = (plan.exp * 1000).saturating_sub(lead_ms);
        let wait = due_ms.saturating_sub(auth::unix_now_ms());
        let wait = if first { wait } else { wait.max(1000) };
        first = false;
        monoio::time::sleep(Duration::from_millis(wait)).await;
        if !alive(&w, id, serial) {
            return;
        }
        let body = request::refresh(&client, &plan.user);
        let parse = reply::parse::<RefreshResult>;
        let answer = match edge.call(HookKind::Refresh, &[], &body, parse).await {
            Ok(a) => a,
            Err(f) => {
                log!(Debug, "refresh hook failed", conn = id, error = f.message());
                continue;
            }
        };
        if !alive(&w, id, serial) {
            return;
        }
        let mut hub = w.hub.borrow_mut();
        match answer {
            Answer::Result(r) if !r.expired && r.expire_at == 0 => {
                hub.set_token_expiry(id, 0);
                return;
            }
            Answer::Result(r) if !r.expired && r.expire_at > plan.exp => {
                let at = auth::token_deadline_ms(hub.now_ms(), r.expire_at, auth::unix_now_ms());
                hub.set_token_expiry(id, at);
                plan.exp = r.expire_at;
            }
            // Not extended: it runs out at its expiry (the hub's timer).
            Answer::Result(r) if !r.expired => {}
            Answer::Disconnect { code, reason } => {
                hub.close(id, code, &reason, CloseReason::Protocol);
                return;
            }
            _ => {
                hub.stats.token_expirations += 1;
                let why = CloseReason::TokenExpired;
                hub.close(id, CLOSE_TOKEN_EXPIRED, "connection expired", why);
                return;
            }
        }
    }
}

/// Whether connection `id` is still the one with `serial`.
fn alive(w: &Worker, id: ConnId, serial: u64) -> bool {
    w.hub
        .borrow()
        .conn(id)
        .is_some_and(|c| c.serial() == serial)
}
