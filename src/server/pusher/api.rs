//! The Pusher HTTP API under `/apps/{app_id}/`: `POST events` and
//! `batch_events` (published through the publish seam, so Redis mode
//! carries them to every instance), `GET channels`, `channels/{name}` and
//! `channels/{name}/users` (every instance's in Redis mode:
//! `occupancy`, `presence`), and `POST users/{id}/terminate_connections`
//! (the server API's disconnect). Every request must
//! carry Pusher's query-string signature (`pusher::sign::verify_api`).

use serde_json::{json, Map, Value};

use crate::auth::unix_now;
use crate::hooks::api::Command;
use crate::http::{self, Method, Request};
use crate::hub::EXCLUDE_ALWAYS;
use crate::log;
use crate::pusher::api::{self, Event};
use crate::pusher::sign::{self, ApiRequest};
use crate::pusher::{internal_channel, App, ChannelKind};
use crate::server::hooks::api as hooks_api;
use crate::server::publish::{route_publish_skipping, via, wait_for_backlog, Published};
use crate::server::pusher::occupancy as pusher_occupancy;
use crate::server::pusher::presence as pusher_presence;
use crate::server::worker::Worker;
use crate::ws::OpCode;

fn answer(status: u16, body: &Value, keep_alive: bool) -> Vec<u8> {
    let body = body.to_string();
    http::response(
        status,
        "application/json",
        body.as_bytes(),
        keep_alive,
        &[],
        false,
    )
}

fn error(status: u16, message: &str, keep_alive: bool) -> Vec<u8> {
    answer(status, &json!({ "error": message }), keep_alive)
}

/// Answers one API request; `rest` is the path after `/apps/`.
pub async fn respond(w: &Worker, rest: &str, req: &Request, body: &[u8]) -> Vec<u8> {
    let keep_alive = req.keep_alive;
    w.hub.borrow_mut().stats.pusher_api_requests += 1;
    let (app_id, call) = rest.split_once('/').unwrap_or((rest, ""));
    let Some((index, app)) = w.cfg.pusher.by_id(app_id) else {
        return error(404, "unknown app", keep_alive);
    };
    let method = if req.method == Method::Post {
        "POST"
    } else {
        "GET"
    };
    let signed = ApiRequest {
        method,
        path: &req.path,
        query: req.query.as_deref().unwrap_or(""),
        body,
    };
    if let Err(e) = sign::verify_api(app, &signed, unix_now()) {
        w.hub.borrow_mut().stats.pusher_api_unauthorized += 1;
        log::refused(log::Refusal::PublishKey, "pusher api refused", e.message());
        return error(401, e.message(), keep_alive);
    }
    w.pusher.borrow_mut().app_mut(index).api_requests += 1;
    let answer = call_api(w, (index, app), (req, call, signed.query), body).await;
    if answer.starts_with(b"HTTP/1.1 4") {
        w.hub.borrow_mut().stats.pusher_api_bad_requests += 1;
    }
    answer
}

/// A signed request's call (`call` = the path after `/apps/{id}/`).
async fn call_api(
    w: &Worker,
    (index, app): (usize, &App),
    (req, call, query): (&Request, &str, &str),
    body: &[u8],
) -> Vec<u8> {
    let keep_alive = req.keep_alive;
    match (req.method, call) {
        (Method::Post, "events") => match api::parse_events(body) {
            Ok(e) => publish(w, (index, app), vec![e], keep_alive).await,
            Err(e) => error(e.answer().0, e.answer().1, keep_alive),
        },
        (Method::Post, "batch_events") => match api::parse_batch(body) {
            Ok(events) => publish(w, (index, app), events, keep_alive).await,
            Err(e) => error(e.answer().0, e.answer().1, keep_alive),
        },
        (Method::Post, c) if c.ends_with("/terminate_connections") => {
            terminate(w, app, c, keep_alive).await
        }
        (Method::Get, "channels") => channels(w, app, query, keep_alive).await,
        (Method::Get, c) => match c.strip_prefix("channels/") {
            Some(name) => match name.strip_suffix("/users") {
                Some(name) => users(w, app, name, keep_alive).await,
                None => channel(w, app, name, query, keep_alive).await,
            },
            None => error(404, "not found", keep_alive),
        },
        _ => error(404, "not found", keep_alive),
    }
}

/// `POST users/{user_id}/terminate_connections`: every connection signed
/// in as the user is closed (on every instance in Redis mode), as the
/// server API's `/api/disconnect` closes a native user's (code 4005:
/// pusher-js does not reconnect on 4000-4099).
async fn terminate(w: &Worker, app: &App, call: &str, keep_alive: bool) -> Vec<u8> {
    let user = call
        .strip_prefix("users/")
        .and_then(|c| c.strip_suffix("/terminate_connections"))
        .filter(|u| !u.is_empty() && !u.contains('/'));
    let Some(user) = user else {
        return error(404, "not found", keep_alive);
    };
    let cmd = Command::Disconnect {
        user: crate::hooks::api::pusher_user(&app.id, user),
    };
    match hooks_api::carry_out(w, &cmd).await {
        Ok(_) => answer(200, &json!({}), keep_alive),
        Err((status, message)) => error(status, message, keep_alive),
    }
}

/// Publishes every event on each of its channels; `socket_id` (when it
/// is one of this process's connections, on any worker) is skipped.
async fn publish(
    w: &Worker,
    (index, app): (usize, &App),
    events: Vec<Event>,
    keep_alive: bool,
) -> Vec<u8> {
    if !wait_for_backlog(w).await {
        return error(503, "server overloaded, retry later", keep_alive);
    }
    let mut hub = w.hub.borrow_mut();
    let route = via(w);
    for e in &events {
        let skip = e
            .socket_id
            .as_deref()
            .and_then(|s| w.pusher.borrow().socket_of(s))
            .map_or((0, 0), |(at, serial)| (at, serial | EXCLUDE_ALWAYS));
        for c in &e.channels {
            let json = crate::pusher::protocol::event(&e.name, Some(c), &e.data);
            let internal = internal_channel(&app.id, c);
            let message = (OpCode::Text, json.as_bytes());
            let outcome = route_publish_skipping(&mut hub, route, &internal, message, skip);
            if let Published::Rejected = outcome {
                return error(
                    503,
                    "redis unavailable and the publish buffer is full",
                    keep_alive,
                );
            }
            hub.stats.pusher_api_events += 1;
            w.pusher.borrow_mut().app_mut(index).api_events += 1;
        }
    }
    answer(200, &json!({}), keep_alive)
}

fn query_value<'q>(query: &'q str, key: &str) -> Option<&'q str> {
    sign::query_pairs(query)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

fn wants(query: &str, attribute: &str) -> bool {
    query_value(query, "info").is_some_and(|i| i.split(',').any(|a| a == attribute))
}

/// `GET /apps/{id}/channels[?filter_by_prefix=&info=user_count]`: occupied
/// channels (of every instance in Redis mode).
async fn channels(w: &Worker, app: &App, query: &str, keep_alive: bool) -> Vec<u8> {
    let prefix = internal_channel(&app.id, "");
    let filter = query_value(query, "filter_by_prefix").unwrap_or("");
    let user_count = wants(query, "user_count");
    if user_count && !filter.starts_with("presence-") {
        return error(
            400,
            "info=user_count needs filter_by_prefix=presence-",
            keep_alive,
        );
    }
    let Some(listed) = pusher_occupancy::channels(w, app).await else {
        return error(503, "channels unavailable (redis)", keep_alive);
    };
    let mut out = Map::new();
    for (name, _) in listed {
        // Users' own channels are not channels of the app's.
        if !name.starts_with(filter) || name.starts_with('#') {
            continue;
        }
        let mut info = Map::new();
        if user_count {
            let internal = format!("{prefix}{name}");
            let Some(n) = pusher_presence::user_count(w, &internal).await else {
                return unavailable(keep_alive);
            };
            info.insert("user_count".into(), n.into());
        }
        out.insert(name, Value::Object(info));
    }
    answer(200, &json!({ "channels": out }), keep_alive)
}

/// `GET /apps/{id}/channels/{name}`: `occupied`, and on request
/// `subscription_count` and (presence) `user_count`.
async fn channel(w: &Worker, app: &App, name: &str, query: &str, keep_alive: bool) -> Vec<u8> {
    let internal = internal_channel(&app.id, name);
    let Some(count) = pusher_occupancy::subscriptions(w, app, name).await else {
        return error(503, "channels unavailable (redis)", keep_alive);
    };
    let mut out = json!({ "occupied": count > 0 });
    if wants(query, "subscription_count") {
        out["subscription_count"] = count.into();
    }
    if wants(query, "user_count") {
        if ChannelKind::of(name) != ChannelKind::Presence {
            return error(400, "user_count is only for presence channels", keep_alive);
        }
        let Some(n) = pusher_presence::user_count(w, &internal).await else {
            return unavailable(keep_alive);
        };
        out["user_count"] = n.into();
    }
    answer(200, &out, keep_alive)
}

/// Redis did not answer a presence read in time.
fn unavailable(keep_alive: bool) -> Vec<u8> {
    error(503, "presence unavailable (redis)", keep_alive)
}

/// `GET /apps/{id}/channels/{name}/users`: a presence channel's users.
async fn users(w: &Worker, app: &App, name: &str, keep_alive: bool) -> Vec<u8> {
    if ChannelKind::of(name) != ChannelKind::Presence {
        return error(
            400,
            "users are only listed for presence channels",
            keep_alive,
        );
    }
    let internal = internal_channel(&app.id, name);
    let Some(ids) = pusher_presence::user_ids(w, &internal).await else {
        return unavailable(keep_alive);
    };
    let users: Vec<Value> = ids.into_iter().map(|id| json!({ "id": id })).collect();
    answer(200, &json!({ "users": users }), keep_alive)
}
