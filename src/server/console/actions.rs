//! What an admin does from the console: publish to a channel, read its
//! history and presence, find channels, disconnect a user (the server
//! API's command, so in Redis mode it reaches every instance). Each
//! action needs a session cookie *and* the action header
//! ([`ACTION_HEADER`](crate::console::ACTION_HEADER), CSRF), and is
//! logged with the admin's address and counted.

use std::net::IpAddr;

use serde::Deserialize;

use crate::channel::valid_channel_name;
use crate::console::snapshot::{Top, SEARCH_RESULTS};
use crate::hooks::api::Command;
use crate::http::{self, HttpError, Request};
use crate::hub::ConnId;
use crate::log;
use crate::server::console::{logout, session_ok, unauthorized};
use crate::server::history::owner as history_owner;
use crate::server::history::{recall, resume};
use crate::server::hooks::api as hooks_api;
use crate::server::presence::edge as presence_edge;
use crate::server::publish;
use crate::server::worker::Worker;

/// An action's JSON body (the fields it uses).
#[derive(Debug, Default, Deserialize)]
struct Body {
    channel: Option<String>,
    data: Option<String>,
    user: Option<String>,
    client: Option<String>,
    search: Option<String>,
}

/// Answers `POST /console/api/{action}`.
pub async fn respond(
    w: &Worker,
    (id, ip): (ConnId, IpAddr),
    action: &str,
    req: &Request,
    body: &[u8],
) -> Vec<u8> {
    let ka = req.keep_alive;
    if !session_ok(w, req) || !req.console_header {
        w.console.borrow_mut().counts.actions_refused += 1;
        log::refused(
            log::Refusal::Upgrade,
            "console action refused",
            "no session or header",
        );
        return match req.console_header {
            false => error(
                403,
                "console actions need the X-Corecast-Console header",
                ka,
            ),
            true => unauthorized(ka),
        };
    }
    if action == "logout" {
        return logout(w, req, ip);
    }
    let Ok(b) = serde_json::from_slice::<Body>(body) else {
        return error(400, "body must be a JSON object", ka);
    };
    let target = (b.channel.as_deref())
        .or(b.client.as_deref())
        .or(b.user.as_deref())
        .unwrap_or("");
    log!(
        Info,
        "console action",
        action = action,
        target = target,
        admin = ip
    );
    w.console.borrow_mut().counts.actions += 1;
    act(w, id, action, &b, ka).await
}

async fn act(w: &Worker, id: ConnId, action: &str, b: &Body, ka: bool) -> Vec<u8> {
    let channel = b.channel.as_deref().filter(|c| valid_channel_name(c));
    match (action, channel) {
        ("publish", Some(c)) => {
            let data = b.data.as_deref().unwrap_or("");
            publish::publish_http(w, (c, None), data.as_bytes(), ka).await
        }
        ("history", Some(c)) => match &w.redis {
            Some(l) if l.keeps_history_of(c) => resume::history_http(w, (c, None), None, ka).await,
            _ => match history_owner::locate(w, c, false).await {
                Ok(()) => recall::history_http(&w.hub.borrow(), (c, None), None, ka),
                Err(why) => recall::error(503, why, ka),
            },
        },
        ("presence", Some(c)) => presence_edge::http_answer(w, (id, c), None, ka).await,
        ("channels", _) => search(w, b.search.as_deref().unwrap_or(""), ka),
        ("disconnect", _) => disconnect(w, b, ka).await,
        ("connections", _) => {
            let user = b.user.as_deref().unwrap_or("");
            match hooks_api::console_connections(w, user).await {
                Ok(list) => json_answer(&list, ka),
                Err((status, message)) => http::error_response(&HttpError { status, message }, ka),
            }
        }
        ("publish" | "history" | "presence", None) => {
            error(400, "a valid \"channel\" is needed", ka)
        }
        _ => error(404, "no such console action", ka),
    }
}

/// Channels whose name contains `text`, most subscribed first (at most
/// [`SEARCH_RESULTS`]).
fn search(w: &Worker, text: &str, ka: bool) -> Vec<u8> {
    let mut found = Top::new(SEARCH_RESULTS);
    for (name, subscribers) in w.hub.borrow().channels_with_prefix("") {
        if !name.starts_with('!') && name.contains(text) {
            found.offer(subscribers as u64, &name, subscribers, 0);
        }
    }
    json_answer(&serde_json::json!({ "channels": found.rows() }), ka)
}

fn json_answer(v: &serde_json::Value, ka: bool) -> Vec<u8> {
    http::response(
        200,
        "application/json",
        v.to_string().as_bytes(),
        ka,
        &[],
        false,
    )
}

/// The server API's disconnect: every connection of the user, or the one
/// named by `client`, on every instance in Redis mode.
async fn disconnect(w: &Worker, b: &Body, ka: bool) -> Vec<u8> {
    let Some(user) = b.user.clone().filter(|u| !u.is_empty()) else {
        return error(400, "a \"user\" is needed", ka);
    };
    let cmd = match b.client.clone() {
        Some(client) => Command::DisconnectClient { user, client },
        None => Command::Disconnect { user },
    };
    match hooks_api::carry_out(w, &cmd).await {
        Ok(v) => json_answer(&v, ka),
        Err((status, message)) => http::error_response(&HttpError { status, message }, ka),
    }
}

fn error(status: u16, message: &'static str, ka: bool) -> Vec<u8> {
    http::error_response(&HttpError { status, message }, ka)
}
