//! `corecast-bench`: the load generator. Parses arguments, raises the
//! descriptor limit, runs the subcommand, prints the report; everything
//! else lives in the `corecast_bench` library.

use std::process::ExitCode;

use corecast_bench::{self as loadgen, args, sys};

/// Descriptors the process needs besides its connections (std streams,
/// the ring, the runtime's eventfd, /proc reads).
const FD_MARGIN: u64 = 32;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cmd = match args::parse(std::env::args().skip(1)) {
        Ok(args::Command::Help) => {
            print!("{}", args::USAGE);
            return ExitCode::SUCCESS;
        }
        Ok(cmd) => cmd,
        Err(e) => {
            eprintln!("corecast-bench: {e}\n\n{}", args::USAGE);
            return ExitCode::from(2);
        }
    };
    let (json, sockets) = match &cmd {
        args::Command::Connect(o) => (o.common.json, o.n),
        args::Command::Broadcast(o) => (o.common.json, o.subscribers + o.publishers),
        args::Command::Http(o) => (o.common.json, o.connections),
        // Its load runs in child processes, each raising its own limit.
        args::Command::Paper(o) => (o.json, 0),
        args::Command::Soak(o) => (o.json, 64),
        args::Command::Help => (false, 0),
    };
    // Every connection is a descriptor: use all the hard limit allows.
    match sys::raise_nofile_limit() {
        Ok(limit) if (sockets as u64).saturating_add(FD_MARGIN) > limit => eprintln!(
            "corecast-bench: warning: {sockets} connections but RLIMIT_NOFILE is {limit}; \
             expect `emfile` failures"
        ),
        Ok(_) => {}
        Err(e) => eprintln!("corecast-bench: cannot raise RLIMIT_NOFILE: {e}"),
    }
    match loadgen::run(cmd) {
        Ok(report) if json => {
            println!("{}", report.json());
            ExitCode::SUCCESS
        }
        Ok(report) => {
            print!("{}", report.text());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("corecast-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
