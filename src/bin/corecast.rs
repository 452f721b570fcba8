//! The `corecast` binary: parse the configuration, start the server, wait
//! for it. Everything else lives in the library.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

use corecast::config::{help_text, Command, Config};
use corecast::console::top as console_top;
use corecast::log;
use corecast::runtime;
use corecast::Server;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_arena_reserve` (`mimalloc.h`, v3: the 24th
/// option), in KiB.
const MI_OPTION_ARENA_RESERVE: libmimalloc_sys::mi_option_t = 23;

/// Reserve mimalloc arenas 64 MiB at a time instead of 1 GiB. An arena's
/// bookkeeping bitmaps are written when it is reserved, in proportion to
/// its size: the first 1 GiB arena made 168 KiB of a fresh process
/// resident (BENCHMARKS, "Fresh RSS"). Arenas grow as the heap does
/// (mimalloc reserves more, larger every 8), so a big heap is unaffected.
/// `MIMALLOC_ARENA_RESERVE` still wins: this only sets the default.
///
/// It runs from `.init_array`, before Rust's runtime makes its first
/// allocation (which reserves the first arena); nothing in it allocates.
extern "C" fn arena_reserve_default() {
    // SAFETY: mi_option_set_default takes no pointers; it stores a value
    // in mimalloc's static option table (bounds-checked), unless the
    // option was already set explicitly. It does not allocate and may be
    // called before mimalloc is initialised.
    unsafe { libmimalloc_sys::mi_option_set_default(MI_OPTION_ARENA_RESERVE, 64 * 1024) };
}

#[used]
#[link_section = ".init_array"]
static ARENA_RESERVE_DEFAULT: extern "C" fn() = arena_reserve_default;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("top") {
        return top(&args[1..]);
    }
    let cmd = match Config::from_args(args, |k| std::env::var(k).ok()) {
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

/// `corecast top`: the console's feed as a refreshing text view.
fn top(args: &[String]) -> ExitCode {
    let a = match console_top::parse_args(args, |k| std::env::var(k).ok()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("corecast top: {e}");
            return ExitCode::from(2);
        }
    };
    match run_top(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("corecast top: {e}");
            ExitCode::FAILURE
        }
    }
}

/// How long `top` waits for an answer or a snapshot (one comes a second).
const TOP_WAIT: Duration = Duration::from_secs(10);

fn connect(host: &str) -> Result<TcpStream, String> {
    let addr = (host.to_socket_addrs().map_err(|e| format!("{host}: {e}"))?)
        .next()
        .ok_or(format!("{host}: no address"))?;
    let s = TcpStream::connect_timeout(&addr, TOP_WAIT).map_err(|e| format!("{host}: {e}"))?;
    s.set_read_timeout(Some(TOP_WAIT))
        .map_err(|e| e.to_string())?;
    Ok(s)
}

/// Logs in (`POST /console/login`): the session cookie.
fn top_login(a: &console_top::Args) -> Result<String, String> {
    let mut s = connect(&a.host)?;
    s.write_all(&console_top::login_request(&a.host, &a.key))
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 2048];
    loop {
        let n = s.read(&mut chunk).map_err(|e| format!("login: {e}"))?;
        if n == 0 {
            return Err("the server closed the login's connection".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(cookie) = console_top::session_cookie(&buf)? {
            return Ok(cookie);
        }
    }
}

/// Reads more of the feed into `buf`.
fn fill(s: &mut TcpStream, buf: &mut bytes::BytesMut) -> Result<(), String> {
    let mut chunk = [0u8; 16 * 1024];
    match s.read(&mut chunk) {
        Ok(0) => Err("the server closed the feed".into()),
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(())
        }
        Err(e) => Err(format!("feed: {e}")),
    }
}

/// Logs in and upgrades to the feed: the socket, the bytes read past the
/// `101`, and the mask for the frames `top` sends (pongs).
fn open_feed(a: &console_top::Args) -> Result<(TcpStream, bytes::BytesMut, [u8; 4]), String> {
    use base64::Engine;
    let cookie = top_login(a)?;
    let mut s = connect(&a.host)?;
    let mut nonce = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce)
        .map_err(|_| "no random bytes")?;
    let key = base64::engine::general_purpose::STANDARD.encode(nonce);
    s.write_all(&console_top::feed_request(&a.host, &cookie, &key))
        .map_err(|e| e.to_string())?;
    let mut buf = bytes::BytesMut::new();
    loop {
        match corecast::ws::handshake::parse_server_response(&buf, &key) {
            Ok(Some(head)) => {
                let _ = buf.split_to(head);
                let mask = [nonce[0], nonce[1], nonce[2], nonce[3]];
                return Ok((s, buf, mask));
            }
            Ok(None) => fill(&mut s, &mut buf)?,
            Err(e) => return Err(format!("the feed refused: {e:?}")),
        }
    }
}

/// Opens the feed and shows its snapshots (one with `--once`), answering
/// the server's pings.
fn run_top(a: &console_top::Args) -> Result<(), String> {
    use corecast::ws::{Limits, Message, OpCode, Receiver, Role};
    let (mut s, mut buf, mask) = open_feed(a)?;
    let mut rx = Receiver::new(Role::Client, Limits::default());
    let mut stdout = std::io::stdout();
    loop {
        while let Some(msg) = rx.next(&mut buf).map_err(|e| format!("feed: {e:?}"))? {
            match msg {
                Message::Text(t) => {
                    let snap: serde_json::Value =
                        serde_json::from_slice(&t).map_err(|e| format!("snapshot: {e}"))?;
                    let view = console_top::render(&snap);
                    if a.once {
                        print!("{view}");
                        return Ok(());
                    }
                    // Home and clear, then the view: a refreshing screen.
                    let _ = write!(stdout, "\x1b[H\x1b[2J{view}");
                    let _ = stdout.flush();
                }
                Message::Ping(p) => {
                    let mut out = bytes::BytesMut::new();
                    corecast::ws::frame::encode_client_frame(OpCode::Pong, &p, mask, &mut out);
                    s.write_all(&out).map_err(|e| e.to_string())?;
                }
                Message::Close(_) => return Err("the server closed the feed".into()),
                _ => {}
            }
        }
        fill(&mut s, &mut buf)?;
    }
}
