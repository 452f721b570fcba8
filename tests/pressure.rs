//! Delivery under pressure: what happens to the frames of a connection
//! that is closing, to healthy subscribers during a publisher's burst,
//! and to peers whose writes stall.

mod common;

use std::time::Duration;

use common::*;

const OP_TEXT: u8 = 0x1;

/// Once the server has sent its close frame, a data frame the peer still
/// sends is not silently dropped: it is counted in
/// `messages_not_delivered`, and the server stops reading (the connection
/// ends after its close frame without waiting for the close timeout).
async fn data_after_our_close_is_counted_and_reading_stops(legacy: bool) {
    let srv = TestServer::start_on(legacy, |c| {
        // Every subscription is refused: the server closes at once.
        c.max_subscriptions = 0;
        c.close_timeout = Duration::from_secs(60);
    });
    let addr = srv.addr;
    let mut ws = RawWs::connect(addr, "/ws/closing").await;
    let f = ws.next_frame().await;
    assert_eq!(f.close_code(), Some(1008), "{f:?}");
    let before = counter(&stats(addr).await, "messages_not_delivered");
    let mut three = Vec::new();
    for _ in 0..3 {
        three.extend(masked(0x80 | OP_TEXT, b"too late"));
    }
    ws.send_raw(&three).await;
    let s = wait_stat(addr, "messages_not_delivered", |n| n > before).await;
    // Reading stopped at the first one: the rest were never parsed.
    assert_eq!(counter(&s, "messages_not_delivered"), before + 1, "{s}");
    // The server ends the connection now, not at the 60 s close timeout.
    ws.expect_eof().await;
}

on_both_drivers!(data_after_our_close_is_counted_and_reading_stops);
