//! A server TLS session fed arbitrary bytes as the client's flight,
//! through `tls::records::feed` (what the edge calls with every read),
//! in pieces of the size the first byte picks: never panics, yields no
//! more plaintext than it was given, stops taking bytes once it failed
//! or the client closed, and what it queued to send (its flight, an
//! alert) can always be taken out.
#![no_main]
use std::sync::{Arc, OnceLock};

use bytes::BytesMut;
use corecast::tls::records::{self, Fed, ServerConfig};
use libfuzzer_sys::fuzz_target;

fn config() -> Arc<ServerConfig> {
    static CONFIG: OnceLock<Arc<ServerConfig>> = OnceLock::new();
    CONFIG.get_or_init(records::ephemeral_config).clone()
}

fuzz_target!(|data: &[u8]| {
    let Some((&step, flight)) = data.split_first() else {
        return;
    };
    let mut conn = records::session(config());
    let mut plain = BytesMut::new();
    let mut sent = Vec::new();
    for piece in flight.chunks(usize::from(step).max(1)) {
        let fed = records::feed(&mut conn, piece, &mut plain);
        while conn.wants_write() {
            conn.write_tls(&mut sent).expect("writes into a Vec");
        }
        match fed {
            Ok(Fed::Open) => {}
            Ok(Fed::Closed { discarded }) => {
                assert!(discarded <= piece.len());
                break;
            }
            Err(_) => break,
        }
    }
    assert!(plain.len() <= flight.len());
});
