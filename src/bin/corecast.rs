//! The `corecast` binary: parse the configuration, start the server, wait
//! for it. Everything else lives in the library.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

use corecast::config::{help_text, Command, Config};
use corecast::log;
use corecast::runtime;
use corecast::Server;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cmd = match Config::from_args(std::env::args().skip(1), |k| std::env::var(k).ok()) {
        Ok(cmd) => cmd,
        Err(e) => {
            eprintln!("corecast: {e}");
            return ExitCode::from(2);
        }
    };
    match cmd {
        Command::Help => {
            print!("{}", help_text());
            ExitCode::SUCCESS
        }
        Command::Version => {
            println!("corecast {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Command::CheckConfig(cfg) => {
            println!("{cfg:#?}");
            ExitCode::SUCCESS
        }
        Command::Healthcheck(url) => healthcheck(&url),
        Command::Serve(cfg) => serve(*cfg),
    }
}

fn serve(cfg: Config) -> ExitCode {
    log::set_level(cfg.log_level);
    if let Err(e) = runtime::install_signal_handlers() {
        log::emit(
            log::Level::Error,
            "cannot install signal handlers",
            &[("error", &e)],
        );
        return ExitCode::FAILURE;
    }
    // Before the listener exists, so no accept can hit the old limit.
    let nofile = runtime::raise_nofile_limit();
    let max_connections = cfg.max_connections;
    match nofile {
        Ok(limit) if limit < max_connections as u64 => log::emit(
            log::Level::Warn,
            "descriptor limit below --max-connections; raise the hard RLIMIT_NOFILE",
            &[("limit", &limit), ("max_connections", &max_connections)],
        ),
        Ok(limit) => log::emit(log::Level::Debug, "descriptor limit", &[("limit", &limit)]),
        Err(e) => log::emit(
            log::Level::Warn,
            "cannot raise the descriptor limit",
            &[("error", &e)],
        ),
    }
    let listen = cfg.listen;
    let server = match Server::start(cfg) {
        Ok(s) => s,
        Err(e) => {
            log::emit(
                log::Level::Error,
                "cannot start",
                &[("addr", &listen), ("error", &e)],
            );
            return ExitCode::FAILURE;
        }
    };
    match server.join() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::emit(log::Level::Error, "worker failed", &[("error", &e)]);
            ExitCode::FAILURE
        }
    }
}

/// `GET` an `http://host:port/path` URL with a 3 s budget; exit 0 on 200.
fn healthcheck(url: &str) -> ExitCode {
    match probe(url) {
        Ok(200) => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("corecast healthcheck: {url} answered {status}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("corecast healthcheck: {url}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn probe(url: &str) -> std::io::Result<u16> {
    let bad = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "expected http://host:port/path",
        )
    };
    let rest = url.strip_prefix("http://").ok_or_else(bad)?;
    let (hostport, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let addr = hostport.to_socket_addrs()?.next().ok_or_else(bad)?;
    let budget = Duration::from_secs(3);
    let mut s = TcpStream::connect_timeout(&addr, budget)?;
    s.set_read_timeout(Some(budget))?;
    s.set_write_timeout(Some(budget))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\n\r\n"
    )?;
    let mut head = [0u8; 64];
    let n = s.read(&mut head)?;
    let line = std::str::from_utf8(&head[..n]).unwrap_or("");
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "not an HTTP response"))
}
