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
//! - [`connect`], [`broadcast`], [`http_load`]: the load subcommands
//!   (`http_stream`: the `http` load's plain or TLS connection).
//! - [`paper`]: the reference experiment end to end — an orchestrator
//!   that starts Redis, an origin and corecast instances and runs the load
//!   subcommands as child processes; Markdown + SVG report.
//! - [`soak`]: the long-run stability check — one Redis-mode instance
//!   churned by every kind of client, sampled after every cycle; fails on
//!   growth; Markdown + SVG report.
//! - [`report`]: JSON and text reports.

pub mod args;
pub mod broadcast;
pub mod client;
pub mod connect;
mod engine;
pub mod error;
pub mod flags;
pub mod http_load;
mod http_stream;
pub mod open;
pub mod paper;
pub mod payload;
pub mod publish;
pub mod report;
pub mod soak;
pub mod stats;
pub mod sys;
pub mod tls;
pub mod wire;

use args::Command;
use engine::block_on;
pub use error::BenchError;

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
    /// From `soak`.
    Soak(Box<soak::report::SoakReport>),
}

impl Report {
    /// As JSON.
    pub fn json(&self) -> String {
        let v = match self {
            Report::Connect(r) => serde_json::to_string_pretty(r),
            Report::Broadcast(r) => serde_json::to_string_pretty(r),
            Report::Http(r) => serde_json::to_string_pretty(r),
            Report::Paper(r) => serde_json::to_string_pretty(r),
            Report::Soak(r) => serde_json::to_string_pretty(r),
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
            Report::Soak(r) => soak::report::text(r),
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
        // Blocking clients on this thread: no runtime either.
        Command::Soak(o) => soak::run(o).map(|r| Report::Soak(Box::new(r))),
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
