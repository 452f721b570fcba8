//! Embeds corecast in a program: start it on a free port, subscribe a
//! WebSocket to `/ws/news`, publish over `POST /publish/news`, read the
//! message, stop the server. Runs and exits by itself:
//!
//! ```sh
//! cargo run --example embed
//! ```
//!
//! Uses only the public API (`corecast::{Config, Server}`) and std.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

fn main() -> io::Result<()> {
    let cfg = corecast::Config {
        listen: "127.0.0.1:0".parse().expect("an address"), // any free port
        ..Default::default()
    };
    let server = corecast::Server::start(cfg)?;
    let addr = server.local_addr();
    println!("corecast embedded on {addr}");

    let mut sub = subscribe(addr, "/ws/news")?;
    let answer = post(addr, "/publish/news", "hello from the embedding program")?;
    println!("publish answered: {answer}");
    let message = read_text_frame(&mut sub)?;
    println!("subscriber received: {message}");
    assert_eq!(message, "hello from the embedding program");

    // Our side closes first; otherwise the graceful stop sends close 1001
    // and waits (up to --shutdown-timeout) for the client to answer it.
    drop(sub);
    server.stop();
    server.join()?;
    println!("stopped");
    Ok(())
}

/// Opens a WebSocket in path mode (subscribed on upgrade) and reads the
/// `101` head; the subscription exists once the head arrived.
fn subscribe(addr: SocketAddr, path: &str) -> io::Result<BufReader<TcpStream>> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )?;
    let mut r = BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status)?;
    if !status.starts_with("HTTP/1.1 101") {
        return Err(io::Error::other(format!("upgrade refused: {status}")));
    }
    let mut line = String::new();
    while r.read_line(&mut line)? > 2 {
        line.clear();
    }
    Ok(r)
}

/// One `POST` on its own connection; returns the body.
fn post(addr: SocketAddr, path: &str, body: &str) -> io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    if !head.starts_with("HTTP/1.1 200") {
        return Err(io::Error::other(format!("publish refused: {head}")));
    }
    Ok(body.to_string())
}

/// Reads one unmasked server text frame shorter than 126 bytes.
fn read_text_frame(r: &mut impl Read) -> io::Result<String> {
    let mut head = [0u8; 2];
    r.read_exact(&mut head)?;
    if head[0] != 0x81 || head[1] >= 126 {
        return Err(io::Error::other(format!(
            "unexpected frame head {head:02x?}"
        )));
    }
    let mut payload = vec![0u8; usize::from(head[1])];
    r.read_exact(&mut payload)?;
    String::from_utf8(payload).map_err(io::Error::other)
}
