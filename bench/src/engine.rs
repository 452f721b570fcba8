//! What every load subcommand runs on: the pinned runtime (io_uring where
//! the kernel allows, epoll otherwise; through `corecast::runtime`), the
//! resolved target, and the one-connect probe.

use std::future::Future;
use std::io;
use std::time::Duration;

use corecast::runtime::{self, DriverKind};

use crate::args::{Common, WsUrl};
use crate::client::{self, Target};
use crate::error::BenchError;
use crate::tls::{self, TlsTarget};
use rustls::pki_types::ServerName;

/// The generator's ring: many subscribers' reads in flight at once.
const RING_ENTRIES: u32 = 4096;

/// Pins (if asked) before the runtime exists, so its ring and every
/// allocation start on the right CPU; io_uring where the kernel allows,
/// epoll otherwise (as the server does).
pub(crate) fn block_on<F: Future>(
    common: &Common,
    make: impl FnOnce() -> F,
) -> Result<F::Output, BenchError> {
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

/// Resolves a URL into a connection target (with its TLS client
/// configuration for `wss://`).
pub(crate) fn target_of(url: &WsUrl, common: &Common) -> Result<Target, BenchError> {
    let addr = url
        .resolve()
        .map_err(|e| BenchError::Resolve(url.host.clone(), e))?;
    let tls = match url.tls {
        false => None,
        true => {
            let host = url.host.trim_start_matches('[').trim_end_matches(']');
            let name = ServerName::try_from(host.to_string())
                .map_err(|e| BenchError::Setup(format!("{}: {e}", url.host)))?;
            let config = tls::client_config(common.tls_ca.as_deref(), common.tls_insecure)
                .map_err(BenchError::Setup)?;
            Some(TlsTarget { config, name })
        }
    };
    Ok(Target {
        addr,
        authority: url.authority(),
        path: url.path.clone(),
        deflate: false,
        tls,
        sse: false,
    })
}

/// One plain TCP connect, so an unreachable target is one clear error
/// instead of N counted failures.
pub(crate) async fn probe(target: &Target, deadline: Duration) -> Result<(), BenchError> {
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
