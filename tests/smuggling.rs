//! CL.0 request smuggling (issue 12 item 2): a request whose route takes
//! no body but that declares one must not leave that body to be parsed as
//! the next request. The body of every request below is a complete
//! `POST /publish/secret`; a subscriber of `secret` must never receive it,
//! and each connection carries exactly the responses of the requests the
//! client meant (the route's answer, then a fence request's when the
//! connection stays open).

mod common;

use std::net::SocketAddr;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const HIDDEN: &[u8] =
    b"POST /publish/secret HTTP/1.1\r\nHost: t\r\nContent-Length: 8\r\n\r\nsmuggled";

/// An origin that answers every request with a cacheable 200.
async fn origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    while let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..p + 4);
                        let r = b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 2\r\n\r\nok";
                        if s.write_all(r).await.is_err() {
                            return;
                        }
                    }
                    match s.read_buf(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                }
            });
        }
    });
    addr
}

/// Sends `method path` with HIDDEN as its body, then (if the connection is
/// still open) a fence `GET /healthz` that closes; returns the statuses of
/// every response read until the server closed.
async fn smuggle(addr: SocketAddr, method: &str, path: &str) -> Vec<u16> {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        HIDDEN.len()
    )
    .into_bytes();
    req.extend_from_slice(HIDDEN);
    s.write_all(&req).await.expect("send");
    // May fail if the server already closed: that is an allowed outcome.
    let _ = s
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .await;
    let mut buf = Vec::new();
    let mut statuses = Vec::new();
    loop {
        match read_response(&mut s, &mut buf).await {
            Ok(r) => statuses.push(r.status),
            Err(_) => return statuses,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_on_any_route_is_never_parsed_as_a_request() {
    let origin = origin().await;
    let srv = TestServer::start(|c| {
        c.cache.origin = Some(format!("http://{origin}").parse().expect("url"));
    });
    let mut ws = ws_connect(srv.addr, "/ws/secret").await;
    // (method, path, statuses expected: the route's, then the fence's
    // when the route kept the connection open after reading the body).
    let cases: &[(&str, &str, &[u16])] = &[
        ("GET", "/healthz", &[200]),
        ("GET", "/readyz", &[200]),
        ("GET", "/stats", &[200]),
        ("GET", "/metrics", &[200]),
        ("GET", "/status", &[200]),
        ("GET", "/nope", &[404]),
        ("GET", "/publish/secret", &[405]),
        ("GET", "/ws/secret", &[400]),
        ("GET", "/api/thing", &[200, 200]),
        // The declared body is the message, published to another channel.
        ("POST", "/publish/other", &[200, 200]),
    ];
    for (method, path, want) in cases {
        let got = within("smuggling attempt", smuggle(srv.addr, method, path)).await;
        assert_eq!(&got[..], *want, "{method} {path}");
    }
    // Nothing reached `secret`: the next message is this fence.
    publish(srv.addr, "secret", "fence").await;
    assert_eq!(next_text(&mut ws).await, "fence");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_request_bodies_are_refused_and_close() {
    let srv = TestServer::start(|_| {});
    let mut ws = ws_connect(srv.addr, "/ws/secret").await;
    let mut s = TcpStream::connect(srv.addr).await.expect("connect");
    let mut req =
        b"GET /healthz HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    req.extend_from_slice(format!("{:x}\r\n", HIDDEN.len()).as_bytes());
    req.extend_from_slice(HIDDEN);
    req.extend_from_slice(b"\r\n0\r\n\r\n");
    s.write_all(&req).await.expect("send");
    let mut buf = Vec::new();
    let r = read_response(&mut s, &mut buf).await.expect("a response");
    assert_eq!(r.status, 411);
    assert!(read_response(&mut s, &mut buf).await.is_err(), "closed");
    publish(srv.addr, "secret", "fence").await;
    assert_eq!(next_text(&mut ws).await, "fence");
}
