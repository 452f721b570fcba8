//! The `corecast` binary: parse the configuration, start the server, wait
//! for it. Everything else lives in the library.

use std::process::ExitCode;

use corecast::config::{help_text, Command, Config};
use corecast::log;
use corecast::server::{sys, Server};

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
    let cfg = match cmd {
        Command::Help => {
            print!("{}", help_text());
            return ExitCode::SUCCESS;
        }
        Command::Version => {
            println!("corecast {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Command::Serve(cfg) => *cfg,
    };
    log::set_level(cfg.log_level);
    if let Err(e) = sys::install_signal_handlers() {
        log::emit(
            log::Level::Error,
            "cannot install signal handlers",
            &[("error", &e)],
        );
        return ExitCode::FAILURE;
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
