//! HTTP answers: status lines, the few headers corecast sends, error
//! bodies (sans-I/O).

use crate::ws::handshake::HandshakeError;

/// A request that cannot be served, with its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    /// Status code.
    pub status: u16,
    /// Short reason, sent as `{"error": ...}`.
    pub message: &'static str,
}

impl HttpError {
    pub(super) const fn new(status: u16, message: &'static str) -> Self {
        HttpError { status, message }
    }
}

/// The standard reason phrase of the statuses corecast sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        202 => "Accepted",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        426 => "Upgrade Required",
        429 => "Too Many Requests",
        502 => "Bad Gateway",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// Encodes a complete response with a body. `HEAD` responses pass
/// `head_only` so the body is described but not sent.
pub fn response(
    status: u16,
    content_type: &str,
    body: &[u8],
    keep_alive: bool,
    extra: &[(&str, &str)],
    head_only: bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(160 + body.len());
    let conn = if keep_alive { "keep-alive" } else { "close" };
    out.extend_from_slice(
        format!(
            "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: {conn}\r\n",
            reason(status),
            body.len()
        )
        .as_bytes(),
    );
    for (k, v) in extra {
        out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

/// A JSON error response: `{"error":"..."}`.
pub fn error_response(err: &HttpError, keep_alive: bool) -> Vec<u8> {
    error_response_with(err, keep_alive, &[])
}

/// [`error_response`] telling the client when to try again (`429`/`503`:
/// RFC 9110 10.2.3), in whole seconds, at least 1.
pub fn retry_after_response(err: &HttpError, keep_alive: bool, after_ms: u64) -> Vec<u8> {
    let secs = after_ms.div_ceil(1000).max(1).to_string();
    error_response_with(err, keep_alive, &[("Retry-After", &secs)])
}

fn error_response_with(err: &HttpError, keep_alive: bool, more: &[(&str, &str)]) -> Vec<u8> {
    let body = serde_json::json!({ "error": err.message }).to_string();
    let fixed: &[(&str, &str)] = match err.status {
        426 => &[("Sec-WebSocket-Version", "13"), ("Upgrade", "websocket")],
        405 => &[("Allow", "GET, HEAD, POST")],
        401 => &[("WWW-Authenticate", "Bearer")],
        // Every 503 is a condition expected to pass (limits, Redis down).
        503 => &[("Retry-After", "1")],
        _ => &[],
    };
    let extra: Vec<(&str, &str)> = fixed.iter().chain(more).copied().collect();
    response(
        err.status,
        "application/json",
        body.as_bytes(),
        keep_alive,
        &extra,
        false,
    )
}

/// The error for a refused upgrade.
pub fn handshake_error(e: &HandshakeError) -> HttpError {
    let message = match e {
        HandshakeError::NotGet => "WebSocket upgrades use GET",
        HandshakeError::NotHttp11 => "WebSocket upgrades need HTTP/1.1",
        HandshakeError::MissingUpgrade => "missing `Upgrade: websocket`",
        HandshakeError::MissingConnectionUpgrade => "missing `Connection: upgrade`",
        HandshakeError::UnsupportedVersion => "unsupported Sec-WebSocket-Version (need 13)",
        HandshakeError::MissingKey => "missing Sec-WebSocket-Key",
        HandshakeError::InvalidKey => "invalid Sec-WebSocket-Key",
    };
    HttpError::new(e.status(), message)
}
