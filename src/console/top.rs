//! `corecast top`, sans-I/O: its arguments, the login and feed requests,
//! the session cookie from the login's answer, and a snapshot rendered as
//! text. The binary does the (blocking) I/O.

use serde_json::Value;

/// Where `corecast top` looks without `--url`.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";
/// The largest login answer head read (bytes).
pub const MAX_HEAD: usize = 8192;
/// Channels the text view lists.
pub const TOP_ROWS: usize = 10;

/// `corecast top [--url URL] [--admin-key KEY] [--once]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    /// `host:port` of the console's listener.
    pub host: String,
    /// The admin key (`--admin-key` or `CORECAST_ADMIN_KEY`).
    pub key: String,
    /// Print one snapshot and exit.
    pub once: bool,
}

/// Parses `top`'s arguments (after `top`); `env` gives
/// `CORECAST_ADMIN_KEY` when `--admin-key` is not given.
pub fn parse_args(args: &[String], env: impl Fn(&str) -> Option<String>) -> Result<Args, String> {
    let (mut url, mut key, mut once) = (DEFAULT_URL.to_string(), None, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (a.as_str(), None),
        };
        let mut value = || inline.clone().or_else(|| it.next().cloned());
        match flag {
            "--url" => url = value().ok_or("--url needs a value")?,
            "--admin-key" => key = Some(value().ok_or("--admin-key needs a value")?),
            "--once" => once = true,
            other => {
                return Err(format!(
                "unknown argument `{other}` (corecast top [--url URL] [--admin-key KEY] [--once])"
            ))
            }
        }
    }
    let key = key
        .or_else(|| env("CORECAST_ADMIN_KEY"))
        .ok_or("needs --admin-key KEY (or CORECAST_ADMIN_KEY)")?;
    Ok(Args {
        host: host_of(&url)?,
        key,
        once,
    })
}

/// `host:port` of an `http://host:port[/...]` URL (TLS is not spoken
/// here: point it at the admin listener, or at a local port).
pub fn host_of(url: &str) -> Result<String, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("the URL must be http://host:port (use the plain admin listener)")?;
    let host = rest.split('/').next().unwrap_or("");
    match host.is_empty() {
        true => Err("the URL has no host".into()),
        false => Ok(host.to_string()),
    }
}

/// `POST /console/login` with the key, form-encoded.
pub fn login_request(host: &str, key: &str) -> Vec<u8> {
    let body = format!("key={}", form_encode(key));
    format!(
        "POST /console/login HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn form_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The session cookie (`name=value`) from the login's answer head;
/// `Ok(None)`: the head is not complete yet.
pub fn session_cookie(buf: &[u8]) -> Result<Option<String>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(buf) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => return Ok(None),
        _ => return Err("not an HTTP answer from the console's login".into()),
    }
    match resp.code {
        Some(303) => {}
        Some(401) => return Err("wrong key (401)".into()),
        Some(404) => {
            return Err(
                "no console there (404): is --admin-key set, is this the admin listener?".into(),
            )
        }
        Some(429) => return Err("too many login attempts (429); wait a minute".into()),
        code => return Err(format!("the login answered {}", code.unwrap_or(0))),
    }
    let cookie = (resp.headers.iter())
        .find(|h| h.name.eq_ignore_ascii_case("set-cookie"))
        .and_then(|h| std::str::from_utf8(h.value).ok())
        .and_then(|v| v.split(';').next())
        .ok_or("the login set no cookie")?;
    Ok(Some(cookie.to_string()))
}

/// The feed's upgrade request, with the session cookie.
pub fn feed_request(host: &str, cookie: &str, key_b64: &str) -> Vec<u8> {
    let mut req = crate::ws::handshake::client_request(host, "/console/feed", key_b64);
    req.truncate(req.len() - 2);
    req.extend_from_slice(format!("Cookie: {cookie}\r\n\r\n").as_bytes());
    req
}

/// One snapshot as text: the deployment's line, rates and latency, the
/// top channels, the instances, refusals.
pub fn render(s: &Value) -> String {
    let mut out = String::new();
    let p = &s["point"];
    let redis = match s["redis"]["mode"].as_str() {
        Some("off") | None => "embedded".to_string(),
        Some(mode) => format!("redis {mode} ({})", up(&s["redis"]["connected"])),
    };
    out += &format!(
        "corecast top — instance {} · {} connections · {} channels · {redis}\n",
        text(&s["instance"]),
        num(&s["connections"]),
        num(&s["channel_count"]),
    );
    out += &format!(
        "msg in/s {}  deliveries/s {}  bytes out/s {}  fan-out p50/p99 {}/{} ms  loop lag {} ms  CPU {} %  RSS {}\n\n",
        num(&p["messages_in"]),
        num(&p["deliveries"]),
        bytes(&p["bytes_out"]),
        num(&p["fanout_p50"]),
        num(&p["fanout_p99"]),
        num(&p["loop_lag"]),
        num(&p["cpu"]),
        bytes(&p["rss"]),
    );
    out += &format!("{:<40} {:>8} {:>8}\n", "CHANNEL", "SUBS", "MSG/S");
    for c in rows(&s["channels"]).iter().take(TOP_ROWS) {
        out += &format!(
            "{:<40} {:>8} {:>8}\n",
            text(&c["name"]),
            num(&c["subscribers"]),
            num(&c["messages_per_s"])
        );
    }
    out += &format!(
        "\n{:<12} {:>8} {:>9} {:>9} {:>9} {:>6} {:>10}\n",
        "INSTANCE", "CONNS", "CHANNELS", "MSG/S", "DELIV/S", "CPU%", "RSS"
    );
    let sum = [s["sum"].clone()];
    for i in rows(&s["instances"]).iter().chain(&sum) {
        out += &format!(
            "{:<12} {:>8} {:>9} {:>9} {:>9} {:>6} {:>10}\n",
            text(&i["id"]),
            num(&i["connections"]),
            num(&i["channels"]),
            num(&i["messages_in_per_s"]),
            num(&i["deliveries_per_s"]),
            num(&i["cpu_pct"]),
            bytes(&i["rss_bytes"]),
        );
    }
    let r = &s["refusals"];
    let sc = &s["slow_consumers"];
    out += &format!(
        "\nslow consumers: cut {} dropped {} conflated {} · refusals: connections {} per-address {} auth {} rate-limited {}\n",
        num(&sc["disconnects"]),
        num(&sc["drops"]),
        num(&sc["conflated"]),
        num(&r["connections"]),
        num(&r["per_ip_connections"]),
        num(&r["auth"]),
        num(&r["publish_rate_limited"]),
    );
    out
}

fn rows(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

fn up(v: &Value) -> &'static str {
    if v.as_bool() == Some(true) {
        "up"
    } else {
        "DOWN"
    }
}

fn num(v: &Value) -> String {
    match v.as_f64() {
        None => "–".into(),
        Some(x) if x.fract() == 0.0 => format!("{x:.0}"),
        Some(x) => format!("{x:.1}"),
    }
}

fn bytes(v: &Value) -> String {
    let Some(mut x) = v.as_f64() else {
        return "–".into();
    };
    let mut unit = 0;
    while x >= 1024.0 && unit < 3 {
        x /= 1024.0;
        unit += 1;
    }
    format!("{x:.1} {}", ["B", "KiB", "MiB", "GiB"][unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let got = parse_args(
            &a(&["--url", "http://h:1/x", "--admin-key=k", "--once"]),
            |_| None,
        );
        assert_eq!(
            got.unwrap(),
            Args {
                host: "h:1".into(),
                key: "k".into(),
                once: true
            }
        );
        let env = parse_args(&a(&[]), |_| Some("e".into())).unwrap();
        assert_eq!(
            (env.host.as_str(), env.key.as_str(), env.once),
            ("127.0.0.1:8080", "e", false)
        );
        assert!(parse_args(&a(&[]), |_| None).is_err());
        assert!(parse_args(&a(&["--url", "https://h"]), |_| Some("k".into())).is_err());
        assert!(parse_args(&a(&["--bogus"]), |_| Some("k".into())).is_err());
    }

    #[test]
    fn login_and_cookie() {
        let req = String::from_utf8(login_request("h:1", "a b&c")).unwrap();
        assert!(req.ends_with("\r\n\r\nkey=a%20b%26c"), "{req}");
        let ok = b"HTTP/1.1 303 See Other\r\nSet-Cookie: corecast_console=abc; HttpOnly\r\n\r\n";
        assert_eq!(
            session_cookie(ok).unwrap().as_deref(),
            Some("corecast_console=abc")
        );
        assert_eq!(session_cookie(b"HTTP/1.1 303 See"), Ok(None));
        assert!(session_cookie(b"HTTP/1.1 401 Unauthorized\r\n\r\n")
            .unwrap_err()
            .contains("wrong key"));
        let feed = String::from_utf8(feed_request("h:1", "c=1", "k")).unwrap();
        assert!(feed.starts_with("GET /console/feed ") && feed.ends_with("Cookie: c=1\r\n\r\n"));
    }

    #[test]
    fn a_snapshot_renders() {
        let s = serde_json::json!({
            "instance": "000000007", "connections": 3, "channel_count": 1,
            "point": {"messages_in": 2.5, "rss": 2048},
            "channels": [{"name": "news", "subscribers": 3, "messages_per_s": 2}],
            "instances": [{"id": "000000007", "connections": 3}], "sum": {"id": "sum", "connections": 3},
            "redis": {"mode": "off"},
        });
        let t = render(&s);
        assert!(
            t.contains("3 connections") && t.contains("news") && t.contains("2.0 KiB"),
            "{t}"
        );
        assert!(t.contains("embedded") && t.contains("sum"), "{t}");
    }
}
