//! The stand-in for the reference's slow API backend: an HTTP/1.1 origin
//! that answers every GET after a fixed delay with a small cacheable JSON
//! document, and counts what it served.
//!
//! Blocking and thread-per-connection: it serves the cache's small pool
//! and the direct measurement's few connections, and its delay is a sleep,
//! so threads are the simplest correct design. Connections past
//! [`MAX_CONNECTIONS`] are closed at once.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// Most connections served at once.
pub const MAX_CONNECTIONS: usize = 512;
/// Largest request head read.
const MAX_HEAD: usize = 16 * 1024;

/// A running origin; stops accepting when dropped.
pub struct Origin {
    addr: SocketAddr,
    served: Arc<AtomicU64>,
    /// Requests received and not yet answered.
    in_flight: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Origin {
    /// Binds 127.0.0.1:0 and serves with `delay` per request, on threads
    /// pinned to `cpu` where possible.
    pub fn start(delay: Duration, cpu: Option<usize>) -> io::Result<Origin> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let served = Arc::new(AtomicU64::new(0));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Counts {
            served: served.clone(),
            in_flight: in_flight.clone(),
        };
        let st = stop.clone();
        thread::Builder::new()
            .name("origin".into())
            .spawn(move || accept_loop(listener, delay, cpu, counts, st))?;
        Ok(Origin {
            addr,
            served,
            in_flight,
            stop,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests received so far (counted on arrival, so a request is
    /// counted in the phase that sent it).
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// Waits (at most `limit`) until no request is being answered.
    pub fn wait_idle(&self, limit: Duration) {
        let deadline = std::time::Instant::now() + limit;
        while self.in_flight.load(Ordering::Relaxed) > 0 && std::time::Instant::now() < deadline {
            thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The origin's counters, shared with its threads.
#[derive(Clone)]
struct Counts {
    served: Arc<AtomicU64>,
    in_flight: Arc<AtomicUsize>,
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the blocking accept.
        let _ = TcpStream::connect(self.addr);
    }
}

fn accept_loop(
    listener: TcpListener,
    delay: Duration,
    cpu: Option<usize>,
    counts: Counts,
    stop: Arc<AtomicBool>,
) {
    pin(cpu);
    let active = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(stream) = stream else { continue };
        if active.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
            continue; // dropped: closed
        }
        active.fetch_add(1, Ordering::Relaxed);
        let (counts, mine) = (counts.clone(), active.clone());
        let spawned = thread::Builder::new().spawn(move || {
            pin(cpu);
            let _ = serve(stream, delay, &counts);
            mine.fetch_sub(1, Ordering::Relaxed);
        });
        if spawned.is_err() {
            active.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

fn pin(cpu: Option<usize>) {
    if let Some(cpu) = cpu {
        let _ = monoio::utils::bind_to_cpu_set([cpu]);
    }
}

/// Keep-alive request loop of one connection.
fn serve(mut stream: TcpStream, delay: Duration, counts: &Counts) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(4096);
    loop {
        let (head_len, path) = loop {
            if let Some(parsed) = parse_head(&buf)? {
                break parsed;
            }
            if buf.len() >= MAX_HEAD {
                return Err(io::ErrorKind::InvalidData.into());
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk)? {
                0 => return Ok(()),
                n => buf.extend_from_slice(&chunk[..n]),
            }
        };
        buf.drain(..head_len);
        counts.served.fetch_add(1, Ordering::Relaxed);
        counts.in_flight.fetch_add(1, Ordering::Relaxed);
        thread::sleep(delay);
        let sent = stream.write_all(&response(&path));
        counts.in_flight.fetch_sub(1, Ordering::Relaxed);
        sent?;
    }
}

/// A complete request head (GETs carry no body): its length and path.
fn parse_head(buf: &[u8]) -> io::Result<Option<(usize, String)>> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => Ok(Some((n, req.path.unwrap_or("/").to_string()))),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(_) => Err(io::ErrorKind::InvalidData.into()),
    }
}

/// A JSON document naming the path, fresh for five minutes.
fn response(path: &str) -> Vec<u8> {
    let items: Vec<String> = (0..8)
        .map(|i| {
            format!(
                "{{\"id\":{i},\"name\":\"item {i}\",\"price\":{}.99}}",
                10 + i
            )
        })
        .collect();
    let body = format!(
        "{{\"path\":{},\"items\":[{}]}}",
        serde_json::Value::from(path),
        items.join(",")
    );
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
         Cache-Control: public, max-age=300\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn get(stream: &mut TcpStream, path: &str) -> String {
        write!(stream, "GET {path} HTTP/1.1\r\nHost: o\r\n\r\n").unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = stream.read(&mut chunk).unwrap();
            assert!(n > 0, "origin closed early");
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Length: "))
                    .unwrap()
                    .parse()
                    .unwrap();
                if body.len() >= len {
                    return text;
                }
            }
        }
    }

    #[test]
    fn answers_after_its_delay_keeps_alive_and_counts() {
        let origin = Origin::start(Duration::from_millis(30), None).unwrap();
        let mut s = TcpStream::connect(origin.addr()).unwrap();
        let t = Instant::now();
        let first = get(&mut s, "/items/1?x=y");
        assert!(t.elapsed() >= Duration::from_millis(30));
        assert!(first.starts_with("HTTP/1.1 200 OK\r\n"), "{first}");
        assert!(first.contains("max-age=300"));
        let body = first.split_once("\r\n\r\n").unwrap().1;
        let doc: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(doc["path"], "/items/1?x=y");
        get(&mut s, "/items/2");
        assert_eq!(origin.served(), 2);
    }
}
