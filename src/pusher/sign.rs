//! Pusher's signatures, checked in constant time: channel authorizations
//! (`key:hex(HMAC-SHA256(secret, socket_id:channel[:channel_data]))`) and
//! HTTP API requests (`auth_signature` over `METHOD\nPATH\nsorted query`,
//! with `auth_timestamp` within [`TIMESTAMP_WINDOW_S`] and `body_md5`).

use hmac::{Hmac, Mac};
use md5::{Digest, Md5};
use sha2::Sha256;

use super::config::App;

/// How far `auth_timestamp` may be from our clock, in seconds (Pusher's
/// documented 600 s).
pub const TIMESTAMP_WINDOW_S: u64 = 600;

/// Why a signed API request was refused (all answered 401).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiAuthError {
    /// A required parameter is missing.
    Missing(&'static str),
    /// `auth_key` is not the app's key.
    WrongKey,
    /// `auth_version` is not `1.0`.
    Version,
    /// `auth_timestamp` is not within the window.
    Expired,
    /// `body_md5` does not match the body.
    BodyMd5,
    /// `auth_signature` does not match.
    Signature,
}

impl ApiAuthError {
    /// The message answered.
    pub fn message(self) -> &'static str {
        match self {
            ApiAuthError::Missing(_) => {
                "missing auth_key, auth_timestamp, auth_version, auth_signature or body_md5"
            }
            ApiAuthError::WrongKey => "unknown auth_key",
            ApiAuthError::Version => "auth_version must be 1.0",
            ApiAuthError::Expired => "auth_timestamp is not within 600 s of the server's clock",
            ApiAuthError::BodyMd5 => "body_md5 does not match the body",
            ApiAuthError::Signature => "invalid auth_signature",
        }
    }
}

fn mac(secret: &str) -> Hmac<Sha256> {
    Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length")
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Whether `sig_hex` is HMAC-SHA256(secret, `data`), in constant time.
fn verify_hex(secret: &str, data: &str, sig_hex: &str) -> bool {
    let Some(sig) = unhex(sig_hex) else {
        return false;
    };
    let mut m = mac(secret);
    m.update(data.as_bytes());
    m.verify_slice(&sig).is_ok()
}

/// HMAC-SHA256(secret, data) in hex (what clients' auth endpoints and the
/// SDKs compute; used by tests).
pub fn sign(secret: &str, data: &str) -> String {
    let mut m = mac(secret);
    m.update(data.as_bytes());
    hex(&m.finalize().into_bytes())
}

/// Checks a subscription's `auth` (`key:signature`) for `socket_id` and
/// `channel` (and, on presence channels, `channel_data`).
pub fn channel_auth_ok(
    app: &App,
    socket_id: &str,
    channel: &str,
    channel_data: Option<&str>,
    auth: &str,
) -> bool {
    let Some((key, sig)) = auth.split_once(':') else {
        return false;
    };
    let data = match channel_data {
        Some(d) => format!("{socket_id}:{channel}:{d}"),
        None => format!("{socket_id}:{channel}"),
    };
    // The key is public; only the signature needs constant time.
    key == app.key && verify_hex(app.secret.expose(), &data, sig)
}

/// Checks a `pusher:signin`'s `auth` (`key:signature` over
/// `socket_id::user::user_data`).
pub fn user_auth_ok(app: &App, socket_id: &str, user_data: &str, auth: &str) -> bool {
    let Some((key, sig)) = auth.split_once(':') else {
        return false;
    };
    let data = format!("{socket_id}::user::{user_data}");
    key == app.key && verify_hex(app.secret.expose(), &data, sig)
}

/// A signed HTTP API request, as the edge saw it.
#[derive(Debug, Clone, Copy)]
pub struct ApiRequest<'a> {
    /// `GET` or `POST`.
    pub method: &'a str,
    /// The path (`/apps/1/events`).
    pub path: &'a str,
    /// The raw query string (without `?`).
    pub query: &'a str,
    /// The body.
    pub body: &'a [u8],
}

/// The query's `key=value` pairs (keys lowercased), undecoded: the SDKs
/// sign the values as they put them in the URL.
pub fn query_pairs(query: &str) -> Vec<(String, &str)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_ascii_lowercase(), v)
        })
        .collect()
}

/// Verifies `req`'s signature for `app` at `now_s` (Unix seconds).
pub fn verify_api(app: &App, req: &ApiRequest<'_>, now_s: u64) -> Result<(), ApiAuthError> {
    let mut pairs = query_pairs(req.query);
    let get = |k: &'static str| {
        pairs
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| *v)
            .ok_or(ApiAuthError::Missing(k))
    };
    let signature = get("auth_signature")?.to_string();
    if get("auth_key")? != app.key {
        return Err(ApiAuthError::WrongKey);
    }
    if get("auth_version")? != "1.0" {
        return Err(ApiAuthError::Version);
    }
    let ts: u64 = get("auth_timestamp")?
        .parse()
        .map_err(|_| ApiAuthError::Expired)?;
    if ts.abs_diff(now_s) > TIMESTAMP_WINDOW_S {
        return Err(ApiAuthError::Expired);
    }
    if !req.body.is_empty() || get("body_md5").is_ok() {
        let want = hex(&Md5::digest(req.body));
        if get("body_md5")? != want {
            return Err(ApiAuthError::BodyMd5);
        }
    }
    pairs.retain(|(k, _)| k != "auth_signature");
    pairs.sort();
    let sorted: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let data = format!("{}\n{}\n{}", req.method, req.path, sorted.join("&"));
    if verify_hex(app.secret.expose(), &data, &signature) {
        Ok(())
    } else {
        Err(ApiAuthError::Signature)
    }
}

/// The query string a client sends with a signed API request (what the
/// server SDKs compute): `auth_key`, `auth_timestamp`, `auth_version`,
/// `body_md5` (with a body), then `auth_signature`. For the load generator
/// and tests; [`verify_api`] accepts it.
pub fn signed_query(
    key: &str,
    secret: &str,
    method: &str,
    path: &str,
    body: &[u8],
    now_s: u64,
) -> String {
    let mut query = format!("auth_key={key}&auth_timestamp={now_s}&auth_version=1.0");
    if !body.is_empty() {
        query = format!("{query}&body_md5={}", hex(&Md5::digest(body)));
    }
    // Already in sorted order: auth_key < auth_timestamp < auth_version < body_md5.
    let signature = sign(secret, &format!("{method}\n{path}\n{query}"));
    format!("{query}&auth_signature={signature}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::Secret;

    fn app() -> App {
        App {
            id: "3".into(),
            key: "278d425bdf160c739803".into(),
            secret: Secret::new("7ad3773142a6692b25b8"),
            client_events: false,
        }
    }

    #[test]
    fn pusher_documented_channel_auth_vector() {
        // From Pusher's "Authenticating users" docs (private channel).
        let auth =
            "278d425bdf160c739803:58df8b0c36d6982b82c3ecf6b4662e34fe8c25bba48f5369f135bf843651c3a4";
        assert!(channel_auth_ok(
            &app(),
            "1234.1234",
            "private-foobar",
            None,
            auth
        ));
        assert!(!channel_auth_ok(
            &app(),
            "1234.1235",
            "private-foobar",
            None,
            auth
        ));
        assert!(!channel_auth_ok(
            &app(),
            "1234.1234",
            "private-foobar",
            None,
            "278d425bdf160c739803:zz"
        ));
        assert!(!channel_auth_ok(
            &app(),
            "1234.1234",
            "private-foobar",
            None,
            "nokey"
        ));
    }

    #[test]
    fn presence_auth_covers_channel_data() {
        let data = r#"{"user_id":"1"}"#;
        let sig = sign(app().secret.expose(), &format!("1.1:presence-x:{data}"));
        let auth = format!("{}:{sig}", app().key);
        assert!(channel_auth_ok(
            &app(),
            "1.1",
            "presence-x",
            Some(data),
            &auth
        ));
        assert!(!channel_auth_ok(
            &app(),
            "1.1",
            "presence-x",
            Some(r#"{"user_id":"2"}"#),
            &auth
        ));
    }

    #[test]
    fn signin_covers_socket_and_user_data() {
        let ud = r#"{"id":"u1"}"#;
        let auth = format!(
            "{}:{}",
            app().key,
            sign(app().secret.expose(), &format!("1.2::user::{ud}"))
        );
        assert!(user_auth_ok(&app(), "1.2", ud, &auth));
        assert!(!user_auth_ok(&app(), "1.3", ud, &auth));
        assert!(!user_auth_ok(&app(), "1.2", r#"{"id":"u2"}"#, &auth));
    }

    fn signed(query: &str, body: &[u8]) -> String {
        let md5 = hex(&Md5::digest(body));
        let q = format!("{query}&body_md5={md5}");
        let mut pairs = query_pairs(&q);
        pairs.sort();
        let s: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let sig = sign(
            app().secret.expose(),
            &format!("POST\n/apps/3/events\n{}", s.join("&")),
        );
        format!("{q}&auth_signature={sig}")
    }

    fn post<'a>(query: &'a str, body: &'a [u8]) -> ApiRequest<'a> {
        ApiRequest {
            method: "POST",
            path: "/apps/3/events",
            query,
            body,
        }
    }

    #[test]
    fn signed_queries_verify() {
        let body = br#"{"name":"m","channel":"c","data":"x"}"#;
        let q = signed_query(
            "278d425bdf160c739803",
            "7ad3773142a6692b25b8",
            "POST",
            "/apps/3/events",
            body,
            1000,
        );
        assert_eq!(verify_api(&app(), &post(&q, body), 1000), Ok(()));
        let get = signed_query(
            "278d425bdf160c739803",
            "7ad3773142a6692b25b8",
            "GET",
            "/apps/3/channels",
            b"",
            1000,
        );
        let r = ApiRequest {
            method: "GET",
            path: "/apps/3/channels",
            query: &get,
            body: b"",
        };
        assert_eq!(verify_api(&app(), &r, 1000), Ok(()));
        let wrong = signed_query(
            "278d425bdf160c739803",
            "other",
            "POST",
            "/apps/3/events",
            body,
            1000,
        );
        assert_eq!(
            verify_api(&app(), &post(&wrong, body), 1000),
            Err(ApiAuthError::Signature)
        );
    }

    #[test]
    fn api_requests_are_verified() {
        let body = br#"{"name":"e","channels":["c"],"data":"x"}"#;
        let q = signed(
            "auth_key=278d425bdf160c739803&auth_timestamp=1000&auth_version=1.0",
            body,
        );
        let req = |query: &'static str, body: &'static [u8]| ApiRequest {
            method: "POST",
            path: "/apps/3/events",
            query,
            body,
        };
        let q: &'static str = Box::leak(q.into_boxed_str());
        assert_eq!(verify_api(&app(), &req(q, body), 1000), Ok(()));
        assert_eq!(
            verify_api(&app(), &req(q, body), 1601),
            Err(ApiAuthError::Expired)
        );
        assert_eq!(
            verify_api(&app(), &req(q, b"{}"), 1000),
            Err(ApiAuthError::BodyMd5)
        );
        let tampered: &'static str = Box::leak(
            q.replace("auth_version=1.0", "auth_version=1.0&x=1")
                .into_boxed_str(),
        );
        assert_eq!(
            verify_api(&app(), &req(tampered, body), 1000),
            Err(ApiAuthError::Signature)
        );
        assert_eq!(
            verify_api(&app(), &req("auth_key=x", body), 1000),
            Err(ApiAuthError::Missing("auth_signature"))
        );
    }
}
