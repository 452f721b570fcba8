//! The operator console's edge (`--admin-key`): the login, the pages,
//! the session check every console route makes, the 15-minute series,
//! and (`feed`) the snapshot published each second; `actions` are what
//! an admin does from it. Sessions, limits and snapshots are
//! `crate::console`'s, sans-I/O.

pub mod actions;
pub mod feed;

use std::net::IpAddr;

use crate::console::session::{self, SESSION_TTL_MS};
use crate::http::{self, HttpError, Request, Route};
use crate::log;
use crate::server::worker::Worker;

/// The console, embedded (no CDN, no build step).
const CONSOLE_PAGE: &str = include_str!("console.html");
/// The login form, embedded.
const LOGIN_PAGE: &str = include_str!("login.html");
/// The pages load nothing from elsewhere: inline script and style, the
/// feed and actions on this origin; never framed (clickjacking).
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Whether `req` carries the cookie of a live session.
pub fn session_ok(w: &Worker, req: &Request) -> bool {
    let token = req.cookie.as_deref().and_then(session::cookie_token);
    let access = w.console.borrow().access.clone();
    token.is_some_and(|t| access.lock().sessions.valid(t, w.now_ms()))
}

/// Answers `GET /console`, `POST /console/login` and
/// `GET /console/series` (`tls`: served over TLS, the cookie is
/// `Secure`).
pub fn respond(
    w: &Worker,
    route: &Route<'_>,
    (req, body): (&Request, &[u8]),
    (ip, tls): (IpAddr, bool),
) -> Vec<u8> {
    let (ka, head) = (req.keep_alive, req.method == http::Method::Head);
    match route {
        Route::Console if session_ok(w, req) => page(200, CONSOLE_PAGE, (ka, head)),
        Route::Console => page(401, LOGIN_PAGE, (ka, head)),
        Route::ConsoleLogin => login(w, body, (ip, tls), ka),
        Route::ConsoleSeries if session_ok(w, req) => series(w, (ka, head)),
        _ => unauthorized(ka),
    }
}

/// `401` for a console route without a session.
pub fn unauthorized(keep_alive: bool) -> Vec<u8> {
    let e = HttpError {
        status: 401,
        message: "log in at /console first",
    };
    http::error_response(&e, keep_alive)
}

/// A page (`head`: a `HEAD` request, the body described, not sent).
fn page(status: u16, html: &str, (ka, head): (bool, bool)) -> Vec<u8> {
    let headers = [
        ("Content-Security-Policy", CSP),
        ("Cache-Control", "no-store"),
        ("X-Frame-Options", "DENY"),
        ("Referrer-Policy", "no-referrer"),
    ];
    let ct = "text/html; charset=utf-8";
    http::response(status, ct, html.as_bytes(), ka, &headers, head)
}

/// `POST /console/login`: rate-limited per address, then the key.
fn login(w: &Worker, body: &[u8], (ip, tls): (IpAddr, bool), ka: bool) -> Vec<u8> {
    let now = w.now_ms();
    let mut console = w.console.borrow_mut();
    let access = console.access.clone();
    let mut gate = access.lock();
    if let Err(after_ms) = gate.logins.attempt(ip, now) {
        console.counts.logins_limited += 1;
        log::refused(
            log::Refusal::PerIp,
            "console login refused",
            "too many attempts",
        );
        let e = HttpError {
            status: 429,
            message: "too many login attempts",
        };
        return http::retry_after_response(&e, ka, after_ms);
    }
    let key = w.cfg.admin_key.as_ref().expect("the console needs a key");
    let given = session::form_value(body, "key").unwrap_or_default();
    if !session::key_matches(&given, key.expose()) {
        console.counts.logins_failed += 1;
        if let Some(suppressed) = gate.logins.log_failure(now) {
            log!(
                Warn,
                "console login failed",
                admin = ip,
                suppressed = suppressed
            );
        }
        let html = LOGIN_PAGE.replace("<!--error-->", "<p class=error>Wrong key.</p>");
        return page(401, &html, (ka, false));
    }
    let token = session::new_token();
    let cookie = session::set_cookie(&token, tls);
    gate.sessions.start(token, now);
    gate.logins.succeeded(ip);
    console.counts.logins += 1;
    log!(
        Info,
        "console login",
        admin = ip,
        ttl_s = SESSION_TTL_MS / 1000
    );
    let headers = [("Location", "/console"), ("Set-Cookie", cookie.as_str())];
    http::response(303, "text/plain", b"", ka, &headers, false)
}

/// Logs the session of `req` out (an action: its session and header were
/// checked): the session ends and the cookie is cleared.
pub fn logout(w: &Worker, req: &Request, ip: IpAddr) -> Vec<u8> {
    if let Some(token) = req.cookie.as_deref().and_then(session::cookie_token) {
        let access = w.console.borrow().access.clone();
        access.lock().sessions.end(token);
    }
    log!(Info, "console logout", admin = ip);
    let cookie = session::clear_cookie();
    let headers = [("Set-Cookie", cookie.as_str())];
    http::response(
        200,
        "application/json",
        b"{}",
        req.keep_alive,
        &headers,
        false,
    )
}

/// `GET /console/series`: the last 15 minutes, one point a second.
fn series(w: &Worker, (ka, head): (bool, bool)) -> Vec<u8> {
    let console = w.console.borrow();
    let points: Vec<_> = console.series.points().collect();
    let body = serde_json::to_vec(&points).expect("series serialize");
    let headers = [("Cache-Control", "no-store")];
    http::response(200, "application/json", &body, ka, &headers, head)
}
