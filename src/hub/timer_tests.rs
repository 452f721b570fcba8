//! The sweep's deadlines: keepalive pings, idle and handshake timeouts,
//! and formats that close idle connections with their own code.

use super::tests::{drain, encoders, hub_with, limits, RAW, TAGGED};
use super::*;

#[test]
fn sweep_pings_quiet_peers_then_expires_dead_ones() {
    let mut l = limits();
    l.ping_interval_ms = 1000;
    l.idle_timeout_ms = 3000;
    l.handshake_timeout_ms = 500;
    let mut hub = hub_with(l);
    let http = hub.register(7).unwrap();
    let id = hub.register(8).unwrap();
    hub.upgrade(id, RAW);
    let mut expired = Vec::new();
    hub.set_now(1000);
    hub.sweep(&mut expired);
    assert_eq!(expired, vec![(7, Expired::Handshake)]);
    let ping = drain(&mut hub, id);
    assert_eq!(&ping[0][..], &[0x89, 0]);
    hub.remove(http);
    expired.clear();
    hub.set_now(2500);
    hub.sweep(&mut expired);
    assert!(expired.is_empty());
    assert!(
        drain(&mut hub, id).is_empty(),
        "one ping outstanding at a time"
    );
    hub.set_now(3000);
    hub.sweep(&mut expired);
    assert_eq!(expired, vec![(8, Expired::Idle)]);
    assert_eq!(hub.stats.idle_timeouts, 1);
}

/// A format with an idle close code (Pusher's 4201) is closed with it,
/// counted as an idle timeout; the socket is shut only when the close
/// timeout passes without the peer's answer. Other formats are still shut.
#[test]
fn idle_connections_of_a_format_with_a_close_code_get_it() {
    let mut l = limits();
    l.ping_interval_ms = 0;
    l.idle_timeout_ms = 3000;
    l.close_timeout_ms = 1000;
    let mut hub = Hub::new(l, encoders().idle_close_code(Format::new(1), 4201));
    let (a, b) = (hub.register(7).unwrap(), hub.register(8).unwrap());
    hub.upgrade(a, RAW);
    hub.upgrade(b, TAGGED);
    let mut expired = Vec::new();
    hub.set_now(3000);
    hub.sweep(&mut expired);
    assert_eq!(expired, vec![(7, Expired::Idle)]);
    assert_eq!(hub.stats.idle_timeouts, 2);
    let close = drain(&mut hub, b);
    assert_eq!(close.len(), 1);
    assert_eq!(
        &close[0][..4],
        &[0x88, 25, 0x10, 0x69],
        "close 4201 + reason"
    );
    assert_eq!(&close[0][4..], b"Pong reply not received");
    expired.clear();
    hub.set_now(3500);
    hub.sweep(&mut expired);
    assert!(expired.is_empty(), "the peer may still answer the close");
    hub.set_now(4000);
    hub.sweep(&mut expired);
    assert_eq!(expired, vec![(8, Expired::Close)]);
    assert_eq!(hub.stats.idle_timeouts, 2);
}
