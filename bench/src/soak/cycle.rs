//! One soak cycle: every kind of client joins, traffic flows every way
//! in, everybody leaves every way out. Bounded: a fixed cast of clients,
//! a fixed number of messages, a deadline on every wait.
//!
//! The cast, for cycle `c` (channels `news`, `flood` and `room-lobby` are
//! the same every cycle, the others new each cycle, so that per-channel
//! state is created and must be forgotten):
//!
//! | client | subscribes | leaves by |
//! |---|---|---|
//! | path P1 | `news` | FIN, no close frame |
//! | path P2 (deflate, publishes 3) | `news-c` | RST |
//! | path P3 | `room-c` | close handshake |
//! | JSON J1 (publishes 6) | `news`, `news-c` | unsubscribing, then close |
//! | JSON J2 (deflate) | `room-c`, `room-lobby` with presence events | RST |
//! | JSON J3 | `news` resuming with `since` from the last cycle | close |
//! | JSON J4 (deflate) | `news-c`, `room-c` (a member) | garbage bytes (1002) |
//! | Pusher U1 | `news-c` | `pusher:unsubscribe`, then close |
//! | Pusher U2 (client events) | `private-chat-c` | unknown text, then RST |
//! | Pusher U3 | `presence-room-c`, `presence-lobby` | FIN |
//! | Pusher U4 (client event) | `presence-room-c` | close |
//! | idle I1, I2 (JSON), I3 (Pusher) | nothing: they park | close, RST, FIN |
//! | slow S (4 KiB receive buffer) | `flood`, never reads | cut by the server |
//! | HTTP publishers, API | `POST /publish`, signed `POST /apps/1/events`, `GET /presence`, `/history`, `/apps/1/channels` | RST or FIN |
//! | raw R1, R2 | half a request head; garbage instead of HTTP | FIN; the server's `400` |

use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::client::{Client, Exit, Kind, REPLY_DEADLINE};
use super::sample::Probe;
use super::ws::{abort, connect, get, hang_up, Http, Open};
use crate::args::PusherApp;
use crate::wire::{publish_request, pusher_event_request, FastRng};
use corecast::pusher::sign::{sign, signed_query};

/// Messages published to `news`, `news-c`, `room-c` over HTTP.
const HTTP_PUBLISHES: [u64; 3] = [5, 5, 3];
/// JSON publishes J1 makes on `news-c` (the last one with an `id`).
const JSON_PUBLISHES: u64 = 6;
/// Frames P2 sends on `news-c`.
const PATH_PUBLISHES: u64 = 3;
/// Pusher API events to `news-c` and `private-chat-c`.
const API_EVENTS: [u64; 2] = [3, 2];
/// Size of a flood message, and the most sent before giving up on the
/// server cutting the slow consumer.
const FLOOD_SIZE: usize = 16 * 1024;
const FLOOD_MAX: usize = 1_000;
/// Idle connections that must park.
const IDLE: u64 = 3;

/// What a cycle did.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Connections opened.
    pub clients: u64,
    /// Messages subscribers received.
    pub messages: u64,
    /// Messages acknowledged subscribers (JSON, Pusher) did not receive.
    pub lost: u64,
    /// Whether J3's resume was recovered.
    pub recovered: bool,
    /// The most connections seen parked at once.
    pub parked: u64,
    /// Whether the server cut the slow consumer.
    pub slow_cut: bool,
}

/// The churn's state across cycles.
pub struct Churn {
    addr: SocketAddr,
    app: PusherApp,
    rng: FastRng,
    /// `news`'s position at the last cycle, for J3's resume.
    since: Option<Value>,
}

impl Churn {
    /// A churn against the server at `addr` with Pusher app `app`.
    pub fn new(addr: SocketAddr, app: PusherApp) -> Churn {
        Churn {
            addr,
            app,
            rng: FastRng::new(crate::sys::realtime_ns()),
            since: None,
        }
    }

    /// Runs cycle `c`.
    pub fn cycle(&mut self, c: usize, probe: &Probe) -> Result<Tally, String> {
        let mut t = Tally::default();
        let mut subs = self.native(c, &mut t)?;
        subs.extend(self.pusher(c)?);
        let idle = self.idle()?;
        t.clients += (subs.len() + idle.len()) as u64;
        self.traffic(c, &mut subs)?;
        t.clients += 1;
        for s in &mut subs {
            s.drain()?;
            t.messages += s.got;
            t.lost += s.expect.map_or(0, |n| n.saturating_sub(s.got));
        }
        t.parked = wait_parked(probe)?;
        for s in subs.into_iter().chain(idle) {
            s.leave()?;
        }
        t.slow_cut = self.slow_consumer(probe)?;
        self.raw_http()?;
        t.clients += 4;
        Ok(t)
    }

    fn open(
        &mut self,
        kind: Kind,
        path: &str,
        deflate: bool,
        exit: Exit,
    ) -> Result<Client, String> {
        let how = Open {
            deflate,
            rcvbuf: None,
        };
        Client::open(self.addr, (kind, path), how, exit, &mut self.rng)
    }

    /// P1-P3, then J1-J4 (path clients first: the JSON acks, which come
    /// once Redis confirmed the channel, then cover them too).
    fn native(&mut self, c: usize, t: &mut Tally) -> Result<Vec<Client>, String> {
        let (news_c, room_c) = (format!("news-{c}"), format!("room-{c}"));
        let p1 = self.open(Kind::Path, "/ws/news", false, Exit::HangUp)?;
        let p2 = self.open(Kind::Path, &format!("/ws/{news_c}"), true, Exit::Abort)?;
        let p3 = self.open(Kind::Path, &format!("/ws/{room_c}"), false, Exit::Close)?;
        let unsub = Exit::Unsubscribe(vec!["news".into(), news_c.clone()]);
        let mut j1 = self.open(Kind::Json, "/ws", false, unsub)?;
        let ack = j1.subscribe("news", json!({}))?;
        j1.subscribe(&news_c, json!({}))?;
        let mut j2 = self.open(Kind::Json, "/ws", true, Exit::Abort)?;
        j2.subscribe(&room_c, json!({"presence": true}))?;
        j2.subscribe("room-lobby", json!({"presence": true}))?;
        let mut j3 = self.open(Kind::Json, "/ws", false, Exit::Close)?;
        let since = self.since.take();
        let since_offset = since.as_ref().and_then(|p| p["offset"].as_u64());
        let resumed = j3.subscribe("news", since.map_or(json!({}), |p| json!({ "since": p })))?;
        t.recovered = resumed["recovered"] == true;
        // Recovered: the messages after our position come before live ones.
        let replayed = match (t.recovered, since_offset, resumed["offset"].as_u64()) {
            (true, Some(from), Some(top)) => top.saturating_sub(from),
            _ => 0,
        };
        self.since = Some(json!({"epoch": ack["epoch"], "offset": ack["offset"]}));
        let mut j4 = self.open(Kind::Json, "/ws", true, Exit::Garbage)?;
        j4.subscribe(&news_c, json!({}))?;
        j4.subscribe(&room_c, json!({}))?;
        let [news, news_n, room] = native_counts();
        j1.expect = Some(news + news_n);
        j2.expect = Some(room);
        j3.expect = Some(replayed + news);
        j4.expect = Some(news_n + room);
        Ok(vec![p1, p2, p3, j1, j2, j3, j4])
    }

    /// U1-U4.
    fn pusher(&mut self, c: usize) -> Result<Vec<Client>, String> {
        let path = format!("/app/{}?protocol=7&client=soak&version=1", self.app.key);
        let (news_c, chat, room) = (
            format!("news-{c}"),
            format!("private-chat-{c}"),
            format!("presence-room-{c}"),
        );
        let unsub = Exit::Unsubscribe(vec![news_c.clone()]);
        let mut u1 = self.open(Kind::Pusher, &path, false, unsub)?;
        u1.pusher_subscribe(&news_c, None, None)?;
        let mut u2 = self.open(Kind::Pusher, &path, false, Exit::Nonsense)?;
        let auth = self.auth(&format!("{}:{chat}", u2.socket_id));
        u2.pusher_subscribe(&chat, Some(auth), None)?;
        let mut u3 = self.open(Kind::Pusher, &path, false, Exit::HangUp)?;
        for ch in [room.as_str(), "presence-lobby"] {
            self.join_presence(&mut u3, ch, &format!("u{c}-3"))?;
        }
        let mut u4 = self.open(Kind::Pusher, &path, false, Exit::Close)?;
        self.join_presence(&mut u4, &room, &format!("u{c}-4"))?;
        u1.expect = Some(API_EVENTS[0]);
        u2.expect = Some(API_EVENTS[1]);
        Ok(vec![u1, u2, u3, u4])
    }

    fn join_presence(&self, u: &mut Client, channel: &str, user: &str) -> Result<(), String> {
        let data = json!({"user_id": user, "user_info": {"name": user}}).to_string();
        let auth = self.auth(&format!("{}:{channel}:{data}", u.socket_id));
        u.pusher_subscribe(channel, Some(auth), Some(data))
    }

    /// `key:HMAC-SHA256(secret, signed)`, a Pusher channel authorization.
    fn auth(&self, signed: &str) -> String {
        format!("{}:{}", self.app.key, sign(&self.app.secret, signed))
    }

    /// I1-I3: connections that do nothing.
    fn idle(&mut self) -> Result<Vec<Client>, String> {
        let path = format!("/app/{}?protocol=7", self.app.key);
        Ok(vec![
            self.open(Kind::Json, "/ws", false, Exit::Close)?,
            self.open(Kind::Json, "/ws", true, Exit::Abort)?,
            self.open(Kind::Pusher, &path, false, Exit::HangUp)?,
        ])
    }

    /// Publishes over HTTP, the JSON protocol, path mode, the Pusher API
    /// and client events; asks the query endpoints.
    fn traffic(&mut self, c: usize, subs: &mut [Client]) -> Result<(), String> {
        let addr = self.addr;
        let deadline = Instant::now() + REPLY_DEADLINE;
        let news_c = format!("news-{c}");
        let mut http = Http::connect(addr).map_err(|e| format!("publisher: {e}"))?;
        let channels = ["news".to_string(), news_c.clone(), format!("room-{c}")];
        for (ch, n) in channels.iter().zip(HTTP_PUBLISHES) {
            for i in 0..n {
                let mut req = Vec::new();
                publish_request(&addr.to_string(), ch, body(c, i).as_bytes(), &mut req);
                expect_ok(&mut http, &req, deadline, "POST /publish")?;
            }
        }
        let j1 = &mut subs[3];
        for i in 0..JSON_PUBLISHES {
            let id = (i + 1 == JSON_PUBLISHES).then_some(i);
            j1.send(&json!({"op": "publish", "channel": news_c, "data": body(c, i), "id": id}))?;
        }
        j1.await_json(|v| v["type"] == "published")?;
        for i in 0..PATH_PUBLISHES {
            let p2 = &mut subs[1];
            p2.ws
                .send_text(&body(c, i))
                .map_err(|e| format!("{}: publish: {e}", p2.name))?;
        }
        self.client_events(c, subs)?;
        self.queries(c, &mut http, subs, deadline)?;
        if c.is_multiple_of(2) {
            return abort(http.into_stream()).map_err(|e| e.to_string());
        }
        hang_up(http.into_stream());
        Ok(())
    }

    /// U2 and U4 send client events (the app allows them); nobody else is
    /// on U2's channel, U3 gets U4's.
    fn client_events(&mut self, c: usize, subs: &mut [Client]) -> Result<(), String> {
        let (chat, room) = (format!("private-chat-{c}"), format!("presence-room-{c}"));
        for (i, ch) in [(8, &chat), (8, &chat), (10, &room)] {
            let ev = json!({"event": "client-typing", "channel": ch, "data": {"cycle": c}});
            subs[i].send(&ev)?;
        }
        Ok(())
    }

    /// Signed API events, then the read endpoints.
    fn queries(
        &mut self,
        c: usize,
        http: &mut Http,
        subs: &mut [Client],
        deadline: Instant,
    ) -> Result<(), String> {
        let host = self.addr.to_string();
        let now = corecast::auth::unix_now();
        let targets = [format!("news-{c}"), format!("private-chat-{c}")];
        for (ch, n) in targets.iter().zip(API_EVENTS) {
            for i in 0..n {
                let mut req = Vec::new();
                pusher_event_request(&host, &self.app, ch, body(c, i).as_bytes(), now, &mut req);
                expect_ok(http, &req, deadline, "POST /apps/ID/events")?;
            }
        }
        let path = format!("/apps/{}/channels", self.app.id);
        let q = signed_query(&self.app.key, &self.app.secret, "GET", &path, b"", now);
        for target in [
            format!("{path}?{q}"),
            format!("/presence/room-{c}"),
            "/history/news?since=0&limit=10".to_string(),
        ] {
            expect_ok(http, &get(&target, self.addr), deadline, &target)?;
        }
        let j2 = &mut subs[4];
        j2.send(&json!({"op": "presence", "channel": format!("room-{c}"), "id": "q"}))?;
        j2.await_json(|v| v["type"] == "presence")?;
        Ok(())
    }

    /// A subscriber that never reads, on `flood`, with a 4 KiB receive
    /// buffer; 16 KiB messages are published there until the server cuts
    /// it (`slow_consumer_disconnects` goes up) or `FLOOD_MAX` were sent.
    fn slow_consumer(&mut self, probe: &Probe) -> Result<bool, String> {
        let how = Open {
            deflate: false,
            rcvbuf: Some(4096),
        };
        let mut s = Client::open(
            self.addr,
            (Kind::Json, "/ws"),
            how,
            Exit::Abort,
            &mut self.rng,
        )?;
        s.subscribe("flood", json!({}))?;
        let cut_before = slow_cuts(probe)?;
        let mut http = Http::connect(self.addr).map_err(|e| format!("flood: {e}"))?;
        let payload = "f".repeat(FLOOD_SIZE);
        let mut cut = false;
        for i in 0..FLOOD_MAX {
            let mut req = Vec::new();
            publish_request(
                &self.addr.to_string(),
                "flood",
                payload.as_bytes(),
                &mut req,
            );
            // The server may pause this publisher while the consumer is
            // over its queue bound: a generous deadline.
            let deadline = Instant::now() + Duration::from_secs(15);
            expect_ok(&mut http, &req, deadline, "POST /publish/flood")?;
            if i % 16 == 15 && slow_cuts(probe)? > cut_before {
                cut = true;
                break;
            }
        }
        hang_up(http.into_stream());
        s.leave()?;
        Ok(cut)
    }

    /// R1: half a request head, then FIN. R2: bytes that are not HTTP;
    /// the server answers 400 and closes.
    fn raw_http(&mut self) -> Result<(), String> {
        let fail = |e: std::io::Error| format!("raw HTTP: {e}");
        let mut r1 = connect(self.addr).map_err(fail)?;
        r1.write_all(b"GET /ws/news HTTP/1.1\r\nHost: soak\r\nUpgr")
            .map_err(fail)?;
        hang_up(r1);
        let mut r2 = Http::connect(self.addr).map_err(fail)?;
        let deadline = Instant::now() + REPLY_DEADLINE;
        let (status, _) = r2
            .request(b"\x16\x03\x01\x00\xa5garbage\r\n\r\n", deadline)
            .map_err(fail)?;
        if status != 400 {
            return Err(format!(
                "garbage instead of HTTP answered {status}, not 400"
            ));
        }
        hang_up(r2.into_stream());
        Ok(())
    }
}

/// Messages every acknowledged subscriber of `news`, `news-c`, `room-c`
/// gets in a cycle.
fn native_counts() -> [u64; 3] {
    [
        HTTP_PUBLISHES[0],
        HTTP_PUBLISHES[1] + JSON_PUBLISHES + PATH_PUBLISHES,
        HTTP_PUBLISHES[2],
    ]
}

/// A message of ~400 bytes of JSON (long enough to be compressed).
fn body(c: usize, i: u64) -> String {
    format!(
        "{{\"cycle\":{c},\"i\":{i},\"text\":\"{}\"}}",
        "soak message, compressible text; ".repeat(11)
    )
}

fn expect_ok(http: &mut Http, req: &[u8], deadline: Instant, what: &str) -> Result<(), String> {
    match http.request(req, deadline) {
        Ok((200, _)) => Ok(()),
        Ok((status, body)) => Err(format!("{what}: {status} {body}")),
        Err(e) => Err(format!("{what}: {e}")),
    }
}

fn slow_cuts(probe: &Probe) -> Result<u64, String> {
    Ok(probe.stats()?["slow_consumer_disconnects"]
        .as_u64()
        .unwrap_or(0))
}

/// Waits (at most 3 s) until the idle clients are parked; returns the
/// most seen parked.
fn wait_parked(probe: &Probe) -> Result<u64, String> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let parked = probe.stats()?["parked_connections"].as_u64().unwrap_or(0);
        if parked >= IDLE || Instant::now() >= deadline {
            return Ok(parked);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
