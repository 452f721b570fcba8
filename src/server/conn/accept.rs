//! The accept loop: every accepted socket becomes a connection task
//! (`http::handle`); running out of descriptors backs off instead of
//! spinning.

use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::http::{self, Listener};
use super::sock::Sock;
use crate::log;
use crate::server::worker::Worker;

/// Pause after `accept` fails for lack of descriptors.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Accepts on `listener` (of `role`) until the worker drops it.
pub async fn accept_loop(w: Rc<Worker>, listener: monoio::net::TcpListener, role: Listener) {
    let mut last_warn: Option<Instant> = None;
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let ctx = http::ConnCtx::new(role, peer.ip());
                monoio::spawn(http::handle(w.clone(), Sock::new(stream), ctx));
            }
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

fn is_fd_exhaustion(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}
