//! The accept loop: every accepted socket becomes a connection task
//! (`http::handle`); running out of descriptors backs off instead of
//! spinning.

use std::io;
use std::net::IpAddr;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::http::{self, Listener};
use super::sock::Sock;
use crate::log;
use crate::server::mesh::{Hop, Mesh};
use crate::server::worker::Worker;
use monoio::net::TcpStream;

/// Pause after `accept` fails for lack of descriptors.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Accepts on `listener` (of `role`) until the worker drops it.
pub async fn accept_loop(w: Rc<Worker>, listener: monoio::net::TcpListener, role: Listener) {
    let mut last_warn: Option<Instant> = None;
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => match w.mesh.get() {
                None => {
                    let ctx = http::ConnCtx::new(role, peer.ip());
                    monoio::spawn(http::handle(w.clone(), Sock::new(stream), ctx));
                }
                Some(mesh) => hand_out(&w, mesh, stream, (peer.ip(), role)),
            },
            Err(e) if is_fd_exhaustion(&e) => {
                // Out of descriptors: back off instead of spinning, and log
                // once per interval rather than once per failed accept.
                if last_warn.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                    log!(Warn, "accept failed, backing off", error = e);
                    last_warn = Some(Instant::now());
                }
                monoio::time::sleep(ACCEPT_BACKOFF).await;
            }
            Err(e) => log!(Debug, "accept failed", error = e),
        }
    }
}

/// With several workers: the connection goes to the least loaded one
/// (fewest connections, ties in turn), this one included.
fn hand_out(w: &Rc<Worker>, mesh: &Mesh, stream: TcpStream, (ip, role): (IpAddr, Listener)) {
    let to = mesh.least_loaded();
    let stream = std_stream(stream);
    mesh.load_one(to);
    if to == mesh.me() {
        return adopt(w, stream, ip, role == Listener::Admin);
    }
    mesh.handed_over();
    let admin = role == Listener::Admin;
    mesh.send(
        to,
        Hop::Conn {
            stream,
            peer: ip,
            admin,
        },
    );
}

/// The accepted socket out of this worker's driver (deregistered), for
/// another worker's.
fn std_stream(stream: TcpStream) -> std::net::TcpStream {
    // SAFETY: `into_raw_fd` gives up the driver's ownership of the
    // descriptor (and its registration); the new `TcpStream` is its only
    // owner.
    unsafe { std::net::TcpStream::from_raw_fd(stream.into_raw_fd()) }
}

/// Runs a connection accepted for this worker (by this one's or another
/// worker's accept loop, which counted it in this worker's load; the
/// worker's sweeper sets its load to its connection count every tick).
pub fn adopt(w: &Rc<Worker>, stream: std::net::TcpStream, ip: IpAddr, admin: bool) {
    let stream = match TcpStream::from_std(stream) {
        Ok(s) => s,
        Err(e) => return log!(Warn, "handed-over connection unusable", error = e),
    };
    let role = if admin {
        Listener::Admin
    } else {
        Listener::Public
    };
    let ctx = http::ConnCtx::new(role, ip);
    monoio::spawn(http::handle(w.clone(), Sock::new(stream), ctx));
}

fn is_fd_exhaustion(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}
