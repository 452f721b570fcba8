//! `corecast-bench`, the load generator, as a library so tests can drive
//! its pure parts directly.
//!
//! A load generator that saturates before the server proves nothing, so
//! this one runs on one pinned monoio thread, reads many frames per wake-up
//! from one shared scratch buffer without per-frame allocation, and reports
//! its own CPU cost per received frame next to every result.
//!
//! # Layout
//! - [`flags`]: the flag/value grammar (pairs, numbers, durations,
//!   address lists), a leaf both [`args`] and `paper::opts` use.
//! - [`args`]: the subcommands' options and usage (sans-I/O).
//! - [`stats`]: log-linear latency histogram and per-stream sequence
//!   tracking for loss / duplicate / order accounting (sans-I/O).
//! - [`payload`]: the stamp each message carries (publisher, sequence,
//!   send time) in binary and text form (sans-I/O).
//! - [`wire`]: splitting server frames out of a read buffer, masking keys,
//!   the HTTP publish request and response (sans-I/O).
//! - [`sys`]: bind-before-connect, `recvmsg` with `SO_TIMESTAMPING`,
//!   rlimits, getrusage and `/proc` sampling.
//! - [`client`]: the network edge — connect + handshake with failure
//!   causes, the receive loop, nonblocking writes.
//! - [`open`]: opening many connections with bounded concurrency and an
//!   optional rate.
//! - [`publish`]: the publisher thread and its absolute schedule.
//! - [`connect`], [`broadcast`], [`http_load`]: the load subcommands.
//! - [`paper`]: the reference experiment end to end — an orchestrator
//!   that starts Redis, an origin and corecast instances and runs the load
//!   subcommands as child processes; Markdown + SVG report.
//! - [`report`]: JSON and text reports.

pub mod args;
pub mod broadcast;
pub mod client;
pub mod connect;
pub mod flags;
pub mod http_load;
pub mod open;
pub mod paper;
pub mod payload;
pub mod publish;
pub mod report;
pub mod stats;
pub mod sys;
pub mod wire;

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use corecast::runtime::{self, DriverKind};

use args::{Command, Common, WsUrl};
use client::Target;

/// Why a run could not produce a report.
#[derive(Debug)]
pub enum BenchError {
    /// The target did not accept a TCP connection.
    Unreachable {
        /// Where we tried to connect.
        addr: SocketAddr,
        /// What the kernel said.
        cause: io::Error,
    },
    /// The URL's host did not resolve.
    Resolve(String, io::Error),
    /// The run could not be set up as asked (e.g. not every subscriber
    /// connected).
    Setup(String),
    /// Pinning or starting the runtime failed.
    Runtime(String),
    /// Any other I/O error.
    Io(io::Error),
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreachable { addr, cause } => {
                write!(f, "cannot reach {addr}: {cause} (is the server running?)")
            }
            Self::Resolve(host, e) => write!(f, "cannot resolve {host}: {e}"),
            Self::Setup(msg) | Self::Runtime(msg) => f.write_str(msg),
            Self::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for BenchError {}

impl From<io::Error> for BenchError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// A finished run's report.
#[derive(Debug)]
pub enum Report {
    /// From `connect`.
    Connect(Box<report::ConnectReport>),
    /// From `broadcast`.
    Broadcast(Box<report::BroadcastReport>),
    /// From `http`.
    Http(Box<http_load::HttpReport>),
    /// From `paper`.
    Paper(Box<paper::results::PaperReport>),
}

impl Report {
    /// As JSON.
    pub fn json(&self) -> String {
        let v = match self {
            Report::Connect(r) => serde_json::to_string_pretty(r),
            Report::Broadcast(r) => serde_json::to_string_pretty(r),
            Report::Http(r) => serde_json::to_string_pretty(r),
            Report::Paper(r) => serde_json::to_string_pretty(r),
        };
        v.expect("reports serialize")
    }

    /// As text.
    pub fn text(&self) -> String {
        match self {
            Report::Connect(r) => r.text(),
            Report::Broadcast(r) => r.text(),
            Report::Http(r) => r.text(),
            Report::Paper(r) => paper::document::text_summary(r),
        }
    }
}

/// Runs a subcommand on a pinned monoio thread (this one). `Help` is the
/// caller's to handle.
pub fn run(cmd: Command) -> Result<Report, BenchError> {
    match cmd {
        Command::Help => Err(BenchError::Setup("help is handled by the caller".into())),
        // An orchestrator of processes: no runtime of its own.
        Command::Paper(o) => paper::run(o).map(|r| Report::Paper(Box::new(r))),
        Command::Connect(o) => {
            let common = o.common.clone();
            block_on(&common, move || async move {
                connect::run(o).await.map(|r| Report::Connect(Box::new(r)))
            })?
        }
        Command::Http(o) => {
            let common = o.common.clone();
            block_on(&common, move || async move {
                http_load::run(o).await.map(|r| Report::Http(Box::new(r)))
            })?
        }
        Command::Broadcast(o) => {
            let common = o.common.clone();
            block_on(&common, move || async move {
                broadcast::run(o)
                    .await
                    .map(|r| Report::Broadcast(Box::new(r)))
            })?
        }
    }
}

/// The generator's ring: many subscribers' reads in flight at once.
const RING_ENTRIES: u32 = 4096;

/// Pins (if asked) before the runtime exists, so its ring and every
/// allocation start on the right CPU; io_uring where the kernel allows,
/// epoll otherwise (as the server does).
fn block_on<F: Future>(common: &Common, make: impl FnOnce() -> F) -> Result<F::Output, BenchError> {
    if let Some(cpu) = common.cpu {
        runtime::pin_to_cpu(cpu).map_err(|e| BenchError::Runtime(e.to_string()))?;
    }
    if DriverKind::detect(common.legacy_driver) == DriverKind::IoUring {
        if let Ok(mut rt) = runtime::uring_runtime_or_plain(!common.plain_uring, RING_ENTRIES) {
            return Ok(rt.block_on(make()));
        }
    }
    let mut rt = runtime::legacy_runtime()
        .map_err(|e| BenchError::Runtime(format!("cannot start runtime: {e}")))?;
    Ok(rt.block_on(make()))
}

/// Resolves a URL into a connection target.
fn target_of(url: &WsUrl) -> Result<Target, BenchError> {
    let addr = url
        .resolve()
        .map_err(|e| BenchError::Resolve(url.host.clone(), e))?;
    Ok(Target {
        addr,
        authority: url.authority(),
        path: url.path.clone(),
    })
}

/// One plain TCP connect, so an unreachable target is one clear error
/// instead of N counted failures.
async fn probe(target: &Target, deadline: Duration) -> Result<(), BenchError> {
    let unreachable = |cause| BenchError::Unreachable {
        addr: target.addr,
        cause,
    };
    match monoio::time::timeout(deadline, client::tcp_connect(target.addr, None)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(unreachable(e)),
        Err(_) => Err(unreachable(io::ErrorKind::TimedOut.into())),
    }
}
