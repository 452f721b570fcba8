//! Redis mode on both drivers. The Redis connections' readers and writers
//! are two monoio streams over one socket (a `dup`ed fd, issue 12 item
//! 11); this checks that commands and their replies, and subscriptions and
//! their messages, flow on the epoll driver as on io_uring.

mod common;
mod redis_support;

use common::*;
use redis_support::*;
use serde_json::json;

/// A subscriber on A gets, in order, what is published over HTTP on B:
/// each publish is a command written by B's command writer whose reply
/// B's reader matches to it, and a message A's subscriber connection reads.
async fn publishes_cross_instances(legacy: bool) {
    let redis = RedisServer::start(&[]).await;
    let a = instance(redis.url("", ""), |c| c.force_legacy_driver = legacy);
    let b = instance(redis.url("", ""), |c| c.force_legacy_driver = legacy);
    wait_readyz(a.addr, 200).await;
    wait_readyz(b.addr, 200).await;
    let mut sub = ws_connect(a.addr, "/ws/news").await;
    let mut rc = RespConn::open(redis.port, None).await;
    rc.wait_numsub("news", 1).await;
    let mut http = HttpConn::connect(b.addr).await;
    for i in 0..100 {
        let body = format!("m:{i}");
        let req = post_request("/publish/news", body.as_bytes(), true);
        let r = http.request(&req).await;
        assert_eq!(r.status, 200, "publish {i}: {r:?}");
        assert_eq!(
            r.json(),
            json!({"channel":"news","subscribers":0,"instances":1})
        );
    }
    for i in 0..100 {
        assert_eq!(next_text(&mut sub).await, format!("m:{i}"));
    }
}

on_both_drivers!(publishes_cross_instances);
