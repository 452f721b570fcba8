//! Bytes on the wire and server CPU of a JSON document stream sent plain,
//! with permessage-deflate, as Fossil deltas, and both (issue 43), against
//! a running corecast whose namespace `doc` has `delta = "fossil"` and
//! whose `--compression` is on (`scripts/delta_wire.sh` starts it pinned).
//!
//! ```text
//! cargo run --release --example delta_wire -- ADDR PID MODES SUBS MSGS RATE
//!   MODES: comma-separated of plain, deflate, delta, delta-deflate
//! ```
//! SUBS subscribers per mode (raw WebSocket clients on tokio: bytes
//! counted as read from the socket, frames and handshake replies after
//! the subscribe's reply included), then MSGS documents POSTed to
//! `/publish/doc:board?delta=1` at RATE per second: a 2–4 KB scoreboard
//! where 1–5 % of the bytes change per message. One subscriber per mode
//! rebuilds every document (inflating, applying each delta with
//! `corecast::delta::apply`, the reference's algorithm byte for byte) and
//! checks it is the one published. Prints, per mode, bytes per message
//! per subscriber and in all, and the server's CPU (utime + stime of PID)
//! over the publishing.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corecast::delta;
use flate2::{Decompress, FlushDecompress};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The documents of messages 1..=`msgs` (index 0: the start): a 40-row
/// scoreboard (about 3.5 KB) where each message updates three rows'
/// score, games played and last-update time — about 2 % of its bytes.
fn docs(msgs: u64) -> Vec<String> {
    let mut rows: Vec<(u64, u64, u64)> =
        (0..40).map(|i| (1000 + i * 7, 30, 1_700_000_000)).collect();
    let render = |n: u64, rows: &[(u64, u64, u64)]| {
        let rows: Vec<Value> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| json!({"team": format!("team-{i:02}"), "city": "Somewhere", "score": r.0, "played": r.1, "updated": r.2}))
            .collect();
        json!({"round": n, "league": "corecast", "rows": rows}).to_string()
    };
    let mut out = vec![render(0, &rows)];
    for n in 1..=msgs {
        for i in [n % 40, (n * 7 + 3) % 40, (n * 13 + 5) % 40] {
            let r = &mut rows[i as usize];
            *r = (r.0 + n % 5 + 1, r.1 + 1, 1_700_000_000 + n * 37);
        }
        out.push(render(n, &rows));
    }
    out
}

/// The share of bytes that differ between two documents, compared
/// position by position (the lengths differ by a few bytes at most).
fn changed(a: &str, b: &str) -> f64 {
    let same = a.bytes().zip(b.bytes()).filter(|(x, y)| x == y).count();
    1.0 - same as f64 / b.len() as f64
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Mode {
    Plain,
    Deflate,
    Delta,
    DeltaDeflate,
}

impl Mode {
    fn parse(s: &str) -> Mode {
        match s {
            "plain" => Mode::Plain,
            "deflate" => Mode::Deflate,
            "delta" => Mode::Delta,
            "delta-deflate" => Mode::DeltaDeflate,
            _ => panic!("unknown mode {s}"),
        }
    }
    fn deflate(self) -> bool {
        matches!(self, Mode::Deflate | Mode::DeltaDeflate)
    }
    fn delta(self) -> bool {
        matches!(self, Mode::Delta | Mode::DeltaDeflate)
    }
}

/// A masked client text frame.
fn text_frame(payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x81, 0x80 | payload.len() as u8, 1, 2, 3, 4];
    assert!(payload.len() < 126);
    f.extend(
        payload
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ [1, 2, 3, 4][i % 4]),
    );
    f
}

/// Connects, upgrades (offering deflate for its modes) and subscribes.
async fn subscriber(addr: SocketAddr, mode: Mode) -> (TcpStream, Vec<u8>) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let ext = if mode.deflate() {
        "Sec-WebSocket-Extensions: permessage-deflate\r\n"
    } else {
        ""
    };
    let req = format!(
        "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{ext}\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let rest = loop {
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed during the upgrade");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            assert!(buf.starts_with(b"HTTP/1.1 101"), "not upgraded");
            let head = String::from_utf8_lossy(&buf[..i]).to_string();
            assert_eq!(
                mode.deflate(),
                head.contains("permessage-deflate"),
                "{head}"
            );
            break buf.split_off(i + 4);
        }
    };
    let sub = match mode.delta() {
        true => r#"{"op":"subscribe","channel":"doc:board","delta":"fossil","id":1}"#,
        false => r#"{"op":"subscribe","channel":"doc:board","id":1}"#,
    };
    s.write_all(&text_frame(sub.as_bytes())).await.unwrap();
    (s, rest)
}

/// One parsed server frame: (rsv1, payload, its length on the wire).
fn parse(buf: &[u8]) -> Option<(bool, &[u8], usize)> {
    let (b0, b1) = (*buf.first()?, *buf.get(1)?);
    let (len, at) = match b1 & 0x7f {
        126 => (
            u16::from_be_bytes(buf.get(2..4)?.try_into().ok()?) as usize,
            4,
        ),
        127 => (
            u64::from_be_bytes(buf.get(2..10)?.try_into().ok()?) as usize,
            10,
        ),
        n => (n as usize, 2),
    };
    let payload = buf.get(at..at + len)?;
    Some((b0 & 0x40 != 0, payload, at + len))
}

fn inflate(payload: &[u8]) -> Vec<u8> {
    let input = [payload, &[0, 0, 0xff, 0xff]].concat();
    let mut out = Vec::with_capacity(payload.len() * 30 + 4096);
    Decompress::new(false)
        .decompress_vec(&input, &mut out, FlushDecompress::Sync)
        .expect("valid DEFLATE");
    out
}

/// Reads frames until `msgs` messages came; bytes read after the
/// subscribe's reply. With `verify`, rebuilds and checks each document.
async fn receive(
    (mut s, mut buf): (TcpStream, Vec<u8>),
    docs: Arc<Vec<String>>,
    verify: bool,
    ready: Arc<AtomicU64>,
) -> u64 {
    let msgs = docs.len() as u64 - 1;
    let (mut got, mut bytes, mut acked) = (0u64, 0u64, false);
    let mut base: Option<Vec<u8>> = None;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        while let Some((rsv1, payload, used)) = parse(&buf) {
            let text = if rsv1 {
                inflate(payload)
            } else {
                payload.to_vec()
            };
            if acked {
                bytes += used as u64;
            }
            if !acked {
                acked = true;
                ready.fetch_add(1, Ordering::SeqCst);
            } else {
                got += 1;
                if verify {
                    let m: Value = serde_json::from_slice(&text).expect("JSON");
                    let data = m["data"].as_str().expect("text").as_bytes();
                    let full = match m.get("delta") == Some(&Value::Bool(true)) {
                        true => delta::apply(base.as_deref().expect("base"), data, 1 << 20)
                            .expect("applies"),
                        false => data.to_vec(),
                    };
                    assert_eq!(full, docs[got as usize].as_bytes(), "message {got} rebuilt");
                    base = Some(full);
                }
            }
            buf.drain(..used);
            if got == msgs {
                return bytes;
            }
        }
        let n = s.read(&mut chunk).await.expect("read");
        assert!(n > 0, "closed");
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("pid");
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

async fn publish_all(addr: SocketAddr, docs: &[String], rate: f64) {
    let msgs = docs.len() as u64 - 1;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let start = Instant::now();
    let mut buf = vec![0u8; 4096];
    for n in 1..=msgs {
        let due = start + Duration::from_secs_f64((n - 1) as f64 / rate);
        tokio::time::sleep_until(due.into()).await;
        let body = &docs[n as usize];
        let req = format!(
            "POST /publish/doc:board?delta=1 HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let k = s.read(&mut buf).await.unwrap();
        assert!(
            buf[..k].starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&buf[..k])
        );
    }
}

#[tokio::main]
async fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let addr: SocketAddr = a[0].parse().expect("ADDR");
    let pid: u32 = a[1].parse().expect("PID");
    let modes: Vec<Mode> = a[2].split(',').map(Mode::parse).collect();
    let (subs, msgs, rate): (usize, u64, f64) = (
        a[3].parse().unwrap(),
        a[4].parse().unwrap(),
        a[5].parse().unwrap(),
    );
    let ready = Arc::new(AtomicU64::new(0));
    let docs = Arc::new(docs(msgs));
    let mut tasks = Vec::new();
    for &mode in &modes {
        for i in 0..subs {
            let (s, rest) = subscriber(addr, mode).await;
            let ready = ready.clone();
            tasks.push((
                mode,
                tokio::spawn(receive((s, rest), docs.clone(), i == 0, ready)),
            ));
        }
    }
    let want = (modes.len() * subs) as u64;
    while ready.load(Ordering::SeqCst) < want {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (t0, c0) = (Instant::now(), cpu_ticks(pid));
    publish_all(addr, &docs, rate).await;
    let mut bytes: HashMap<Mode, u64> = HashMap::new();
    for (mode, t) in tasks {
        *bytes.entry(mode).or_default() += t.await.expect("subscriber");
    }
    let (secs, ticks) = (t0.elapsed().as_secs_f64(), cpu_ticks(pid) - c0);
    let hz = 100.0;
    let cpu = ticks as f64 / hz / secs;
    let deliveries = want * msgs;
    let mut report = serde_json::Map::new();
    for &mode in &modes {
        let b = bytes[&mode];
        let per = b as f64 / (subs as f64 * msgs as f64);
        println!(
            "{mode:?}: {b} bytes to {subs} subscribers, {per:.1} bytes per message per subscriber"
        );
        report.insert(format!("{mode:?}"), json!({"bytes": b, "per_message": per}));
    }
    let doc_len: usize = docs[1..].iter().map(String::len).sum::<usize>() / msgs as usize;
    let share = docs.windows(2).map(|w| changed(&w[0], &w[1])).sum::<f64>() / msgs as f64;
    println!(
        "document {doc_len} bytes avg, {:.1} % of its bytes changed per message; {deliveries} deliveries in {secs:.2} s ({:.0}/s); server CPU {:.1} % ({:.2} µs per delivery)",
        share * 100.0,
        deliveries as f64 / secs,
        cpu * 100.0,
        ticks as f64 / hz * 1e6 / deliveries as f64
    );
    report.insert("cpu".into(), json!(cpu));
    report.insert("deliveries_per_s".into(), json!(deliveries as f64 / secs));
    report.insert("doc_bytes".into(), json!(doc_len));
    report.insert("changed".into(), json!(share));
    eprintln!("{}", Value::Object(report));
}
