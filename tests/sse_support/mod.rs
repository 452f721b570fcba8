//! A Server-Sent Events client over a raw socket, for the SSE tests: the
//! response head, then the chunked body read chunk by chunk (every event
//! is one chunk) and parsed by the event-stream rules, sharing no code
//! with the server.

#![allow(dead_code)] // each test binary uses a different subset

use std::net::SocketAddr;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::common::*;

/// One event of the stream (or a comment: `name` empty, `comment` set).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: Option<String>,
    pub name: String,
    pub data: String,
    pub comment: Option<String>,
}

impl Event {
    /// The data as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("{e}: {:?}", self.data))
    }
}

/// A stream's client end.
pub struct Sse {
    pub stream: TcpStream,
    pub status: u16,
    /// The response head, as received.
    pub head: String,
    buf: Vec<u8>,
}

/// The text of `GET target` with extra header lines.
pub fn sse_request(target: &str, headers: &[(&str, &str)]) -> String {
    let mut req = format!("GET {target} HTTP/1.1\r\nHost: test\r\nAccept: text/event-stream\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req
}

impl Sse {
    /// Sends `GET target` and reads the head (any status).
    pub async fn request(addr: SocketAddr, target: &str, headers: &[(&str, &str)]) -> Sse {
        let stream = within("connect", TcpStream::connect(addr))
            .await
            .expect("connect");
        Sse::on(stream, &sse_request(target, headers)).await
    }

    /// As [`Sse::request`], asserting 200.
    pub async fn open(addr: SocketAddr, target: &str, headers: &[(&str, &str)]) -> Sse {
        let sse = Sse::request(addr, target, headers).await;
        assert_eq!(sse.status, 200, "{}", sse.head);
        sse
    }

    /// As [`Sse::open`] on a socket with a small receive buffer.
    pub async fn open_small_rcvbuf(addr: SocketAddr, target: &str, rcvbuf: u32) -> Sse {
        let socket = TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(rcvbuf).expect("SO_RCVBUF");
        let stream = within("connect", socket.connect(addr))
            .await
            .expect("connect");
        let sse = Sse::on(stream, &sse_request(target, &[])).await;
        assert_eq!(sse.status, 200, "{}", sse.head);
        sse
    }

    /// Sends `request` on `stream` and reads the response head.
    pub async fn on(mut stream: TcpStream, request: &str) -> Sse {
        stream
            .write_all(request.as_bytes())
            .await
            .expect("send request");
        let mut buf = Vec::new();
        let end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            let n = within("response head", stream.read_buf(&mut buf))
                .await
                .expect("read");
            assert!(
                n > 0,
                "EOF before the head: {:?}",
                String::from_utf8_lossy(&buf)
            );
        };
        let head = String::from_utf8(buf[..end].to_vec()).expect("ASCII head");
        buf.drain(..end);
        let status = head[9..12].parse().expect("status");
        Sse {
            stream,
            status,
            head,
            buf,
        }
    }

    /// A refused request's JSON error body (the connection then ends).
    pub async fn error_body(&mut self) -> Value {
        let _ = within("error body", self.stream.read_to_end(&mut self.buf)).await;
        serde_json::from_slice(&self.buf).expect("JSON error body")
    }

    async fn fill(&mut self, n: usize) -> bool {
        while self.buf.len() < n {
            match within("stream bytes", self.stream.read_buf(&mut self.buf)).await {
                Ok(0) | Err(_) => return false,
                Ok(_) => {}
            }
        }
        true
    }

    /// The next chunk's body, checking its framing; `None` after the last
    /// chunk (`0\r\n\r\n`) or at the end of the connection.
    pub async fn next_chunk(&mut self) -> Option<Vec<u8>> {
        let line_end = loop {
            if let Some(p) = self.buf.windows(2).position(|w| w == b"\r\n") {
                break p;
            }
            if !self.fill(self.buf.len() + 1).await {
                assert!(self.buf.is_empty(), "partial chunk size line");
                return None;
            }
        };
        let size = std::str::from_utf8(&self.buf[..line_end]).expect("hex size");
        let size = usize::from_str_radix(size, 16).expect("hex size");
        if size == 0 {
            assert!(self.fill(line_end + 4).await, "last chunk cut short");
            assert_eq!(&self.buf[line_end..line_end + 4], b"\r\n\r\n");
            self.buf.drain(..line_end + 4);
            return None;
        }
        let end = line_end + 2 + size + 2;
        assert!(self.fill(end).await, "chunk cut short");
        assert_eq!(&self.buf[end - 2..end], b"\r\n", "chunk ends with CRLF");
        let body = self.buf[line_end + 2..end - 2].to_vec();
        self.buf.drain(..end);
        Some(body)
    }

    /// The next event or comment; `None` at the end of the stream.
    pub async fn next_item(&mut self) -> Option<Event> {
        let chunk = self.next_chunk().await?;
        Some(parse_event(&String::from_utf8(chunk).expect("UTF-8 event")))
    }

    /// The next event (heartbeat comments skipped), failing at the end.
    pub async fn next_event(&mut self) -> Event {
        loop {
            let e = self.next_item().await.expect("stream ended");
            if e.comment.is_none() {
                return e;
            }
        }
    }

    /// Reads to the end of the stream: the events (comments skipped) and
    /// whether it ended with the last chunk.
    pub async fn rest(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        while let Some(e) = self.next_item().await {
            if e.comment.is_none() {
                out.push(e);
            }
        }
        out
    }
}

/// One event's text, by the event-stream rules (one event per chunk).
pub fn parse_event(text: &str) -> Event {
    assert!(
        text.ends_with("\n\n"),
        "an event ends with a blank line: {text:?}"
    );
    let mut e = Event {
        id: None,
        name: String::new(),
        data: String::new(),
        comment: None,
    };
    let mut data = Vec::new();
    for line in text.trim_end_matches('\n').split('\n') {
        if let Some(c) = line.strip_prefix(':') {
            e.comment = Some(c.trim().to_string());
        } else if let Some(v) = line.strip_prefix("id: ") {
            e.id = Some(v.to_string());
        } else if let Some(v) = line.strip_prefix("event: ") {
            e.name = v.to_string();
        } else if let Some(v) = line.strip_prefix("data: ") {
            data.push(v);
        } else {
            panic!("unexpected line {line:?} in {text:?}");
        }
    }
    e.data = data.join("\n");
    e
}

/// The epoch named by an event id `{channel}:{epoch}:{offset}`.
pub fn epoch_of(id: &str) -> String {
    let mut parts = id.rsplitn(3, ':');
    parts.next();
    parts.next().expect("epoch").to_string()
}

impl Sse {
    /// Reads exactly `n` raw bytes of the body (framing included).
    pub async fn raw(&mut self, n: usize) -> Vec<u8> {
        assert!(self.fill(n).await, "stream ended before {n} bytes");
        self.buf.drain(..n).collect()
    }
}

/// `{size:x}\r\n{body}\r\n`: one chunk on the wire.
pub fn chunk(body: &str) -> String {
    format!("{:x}\r\n{body}\r\n", body.len())
}

/// The epoch of `channel` (`GET /history/{channel}`), after at least
/// one publish to it.
pub async fn epoch(addr: SocketAddr, channel: &str) -> String {
    let r = get(addr, &format!("/history/{channel}")).await;
    r.json()["epoch"].as_str().expect("an epoch").to_string()
}
