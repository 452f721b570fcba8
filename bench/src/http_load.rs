//! `http`: closed-loop GET load. C keep-alive connections each send a
//! request, wait for the whole response, and send the next one, for the
//! warm-up plus the measured window; the report gives requests/s and
//! latency percentiles of the measured window, and answers by status.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use monoio::net::TcpStream;
use serde::Serialize;

use super::args::{HttpOpts, WsUrl};
use super::http_stream::HttpStream;
use super::report::LatencySummary;
use super::stats::Histogram;
use super::sys;
use crate::error::BenchError;
use crate::tls::TlsTarget;

/// Largest response head accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Largest response body read; a larger `Content-Length` is an error (the
/// body would be buffered whole).
const MAX_BODY: usize = 64 << 20;
/// A response slower than this is an error (the connection is dropped and
/// reopened), so a hung server cannot hang the run.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// What `http` reports.
#[derive(Debug, Serialize)]
pub struct HttpReport {
    /// Always "http".
    pub command: &'static str,
    /// Target URL.
    pub url: String,
    /// Keep-alive connections.
    pub connections: usize,
    /// Measured window.
    pub duration_seconds: f64,
    /// Completed requests in the window.
    pub requests: u64,
    /// Requests per second in the window.
    pub requests_per_second: f64,
    /// Completed requests over the whole run, warm-up included.
    pub requests_total: u64,
    /// Responses by status code (window).
    pub statuses: BTreeMap<u16, u64>,
    /// Connection-level failures (connect, reset, malformed response).
    pub errors: u64,
    /// Request → complete response, in the window.
    pub latency: LatencySummary,
    /// The generator's CPU over the run, percent of one core.
    pub generator_cpu_percent: f64,
}

impl HttpReport {
    /// Human-readable rendering.
    pub fn text(&self) -> String {
        let mut s = format!(
            "http {}\n  {} connections, {:.1} s: {} requests, {:.0} req/s, {} errors\n",
            self.url,
            self.connections,
            self.duration_seconds,
            self.requests,
            self.requests_per_second,
            self.errors
        );
        for (status, n) in &self.statuses {
            s.push_str(&format!("    {status}: {n}\n"));
        }
        s.push_str(&self.latency.line("latency"));
        s.push_str(&format!(
            "  generator CPU {:.0} %\n",
            self.generator_cpu_percent
        ));
        s
    }
}

/// Where the load goes: `http://` or `https://host:port/path?query`.
struct HttpTarget {
    addr: SocketAddr,
    /// The `Host` value.
    host: String,
    /// The request target (path and query).
    target: String,
    /// `https://`: the TLS client configuration and server name.
    tls: Option<TlsTarget>,
}

/// Parses the URL (the host resolved, the TLS configuration built from
/// `--tls-ca`/`--tls-insecure` for `https://`).
fn parse_url(url: &str, common: &crate::args::Common) -> Result<HttpTarget, BenchError> {
    let bad = || BenchError::Setup(format!("`{url}`: expected http(s)://host:port/path"));
    let (rest, tls) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(rest), _) => (rest, false),
        (_, Some(rest)) => (rest, true),
        _ => return Err(bad()),
    };
    // The same authority and path grammar as a WebSocket URL.
    let scheme = if tls { "wss" } else { "ws" };
    let ws = WsUrl::parse(&format!("{scheme}://{rest}")).map_err(|_| bad())?;
    let target = super::engine::target_of(&ws, common)?;
    let path_len = rest.find('/').map_or(rest.len(), |i| i);
    let (_, path) = rest.split_at(path_len);
    Ok(HttpTarget {
        addr: target.addr,
        host: target.authority,
        target: if path.is_empty() {
            "/".into()
        } else {
            path.into()
        },
        tls: target.tls,
    })
}

#[derive(Default)]
struct Tally {
    /// Responses over the whole run, warm-up included.
    all: u64,
    latency: Histogram,
    statuses: BTreeMap<u16, u64>,
    errors: u64,
}

/// A request split where a per-request counter goes.
type Split = (Rc<str>, Rc<str>);

/// What every connection sends, and when.
#[derive(Clone)]
struct Plan {
    /// The request, encoded once; every send writes a reference-counted
    /// clone. With `unique`, the target without the counter.
    request: Bytes,
    /// `Some((head, tail))`: the request split where a per-request
    /// counter goes, so every request is a different cache key.
    unique: Option<Split>,
    /// Gap between two requests of one connection (paced mode).
    interval: Option<Duration>,
    measure_from: Instant,
    end: Instant,
}

impl Plan {
    /// The request with sequence number `n`.
    fn request(&self, n: u64) -> Bytes {
        match &self.unique {
            Some((head, tail)) => Bytes::from(format!("{head}{n}{tail}")),
            None => self.request.clone(),
        }
    }
}

/// `GET target` as bytes, or split around a counter appended to the query.
fn encode_requests(target: &str, host: &str, unique: bool) -> (Bytes, Option<Split>) {
    let tail = format!(" HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let request = Bytes::from(format!("GET {target}{tail}"));
    if !unique {
        return (request, None);
    }
    let sep = if target.contains('?') { '&' } else { '?' };
    let head = format!("GET {target}{sep}corecast-bench-n=");
    (request, Some((head.into(), tail.into())))
}

/// Runs the load and builds the report.
pub async fn run(o: HttpOpts) -> Result<HttpReport, BenchError> {
    let t = Rc::new(parse_url(&o.url, &o.common)?);
    // One plain connect first: an unreachable target is one clear error.
    TcpStream::connect_addr(t.addr)
        .await
        .map_err(|e| BenchError::Setup(format!("{}: {e}", o.url)))?;
    let (request, unique) = encode_requests(&t.target, &t.host, o.unique);
    let start = Instant::now();
    let measure_from = start + o.warmup;
    let plan = Plan {
        request,
        unique,
        interval: o
            .rate
            .map(|r| Duration::from_secs_f64(o.connections as f64 / r)),
        measure_from,
        end: measure_from + o.duration,
    };
    let tally = Rc::new(RefCell::new(Tally::default()));
    let cpu_before = sys::process_cpu_time();
    let mut tasks = Vec::with_capacity(o.connections);
    for i in 0..o.connections {
        // Paced connections start spread over one interval, not at once.
        let offset = plan.interval.map_or(Duration::ZERO, |iv| {
            iv.mul_f64(i as f64 / o.connections as f64)
        });
        let (plan, tally) = (plan.clone(), tally.clone());
        let first = start + offset;
        tasks.push(monoio::spawn(client(
            t.clone(),
            plan,
            first,
            i as u64,
            tally,
        )));
    }
    for t in tasks {
        t.await;
    }
    let cpu = sys::process_cpu_time().saturating_sub(cpu_before);
    let wall = start.elapsed();
    let t = tally.borrow();
    let requests = t.latency.count();
    let secs = o.duration.as_secs_f64();
    Ok(HttpReport {
        command: "http",
        url: o.url.clone(),
        connections: o.connections,
        duration_seconds: secs,
        requests,
        requests_per_second: requests as f64 / secs,
        requests_total: t.all,
        statuses: t.statuses.clone(),
        errors: t.errors,
        latency: LatencySummary::from_ns(&t.latency),
        generator_cpu_percent: 100.0 * cpu.as_secs_f64() / wall.as_secs_f64().max(1e-9),
    })
}

/// One keep-alive connection's request loop; reconnects after an error.
/// Paced, it sends at most one request per interval; one that falls
/// behind sends the next request at once but does not catch up in a burst.
async fn client(t: Rc<HttpTarget>, plan: Plan, first: Instant, id: u64, tally: Rc<RefCell<Tally>>) {
    let (measure_from, end) = (plan.measure_from, plan.end);
    let mut next = first;
    // Counters of different connections never collide.
    let mut n = id << 40;
    while Instant::now() < end {
        let Ok(mut stream) = HttpStream::connect(t.addr, t.tls.as_ref()).await else {
            tally.borrow_mut().errors += 1;
            monoio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let mut buf = BytesMut::with_capacity(16 * 1024);
        loop {
            if plan.interval.is_some() && Instant::now() < next {
                monoio::time::sleep_until(next.into()).await;
            }
            let sent = Instant::now();
            if sent >= end {
                return;
            }
            if let Some(iv) = plan.interval {
                next = (next + iv).max(sent);
            }
            n += 1;
            let status = match stream.write_all(plan.request(n)).await {
                Ok(_) => {
                    let read = read_response(&mut stream, &mut buf);
                    match monoio::time::timeout(RESPONSE_TIMEOUT, read).await {
                        Ok(r) => r,
                        Err(_) => Err(io::ErrorKind::TimedOut.into()),
                    }
                }
                Err(e) => Err(e),
            };
            let mut t = tally.borrow_mut();
            t.all += u64::from(status.is_ok());
            match status {
                Ok(status) if sent >= measure_from => {
                    t.latency.record(sent.elapsed().as_nanos() as u64);
                    *t.statuses.entry(status).or_default() += 1;
                }
                Ok(_) => {}
                Err(_) => {
                    t.errors += 1;
                    break;
                }
            }
        }
    }
}

/// Reads one response (head + `Content-Length` body) from `stream`.
async fn read_response(stream: &mut HttpStream, buf: &mut BytesMut) -> io::Result<u16> {
    let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
    let (status, head, body) = loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut headers);
        match resp.parse(buf) {
            Ok(httparse::Status::Complete(n)) => {
                let len = resp
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| {
                        std::str::from_utf8(h.value)
                            .ok()?
                            .trim()
                            .parse::<usize>()
                            .ok()
                    })
                    .ok_or_else(|| bad("response without Content-Length"))?;
                if len > MAX_BODY {
                    return Err(bad("response body over the generator's limit"));
                }
                break (resp.code.unwrap_or(0), n, len);
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
            _ => return Err(bad("malformed response head")),
        }
        stream.read_more(buf).await?;
    };
    let total: usize = head + body;
    while buf.len() < total {
        stream.read_more(buf).await?;
    }
    buf.advance(total);
    Ok(status)
}
