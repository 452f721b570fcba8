//! The HTTP phase's decisions over arbitrary request bytes: head parse,
//! route (with the cache's routes) and body plan. Never a panic; a plan
//! never reads more than `--max-body-size`, and a request without a body
//! never plans to read or close for one.
#![no_main]
use corecast::http::{
    body_plan, parse_request, route_with_cache, Body, BodyPlan, CacheRoutes, Limits,
};
use libfuzzer_sys::fuzz_target;

const LIMITS: Limits = Limits {
    max_handshake_bytes: 8192,
    max_body_size: 1024,
};

fuzz_target!(|data: &[u8]| {
    let Ok(Some(req)) = parse_request(data, LIMITS.max_handshake_bytes) else {
        return;
    };
    assert!(req.head_len <= data.len());
    let cache = CacheRoutes {
        prefix: "/api/",
        purge: true,
    };
    let route = route_with_cache(req.method, &req.path, Some("root"), Some(cache));
    match (req.body, body_plan(&req, &route, &LIMITS)) {
        (Body::None, plan) => assert_eq!(plan, BodyPlan::None),
        (Body::Length(n), BodyPlan::Length(m)) => assert!(n == m && m <= LIMITS.max_body_size),
        (Body::Length(_), BodyPlan::None) => panic!("a declared body left unread"),
        (Body::Length(_), _) => {}
    }
});
