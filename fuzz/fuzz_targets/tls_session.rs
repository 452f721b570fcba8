//! A server TLS session fed arbitrary bytes as the client's flight,
//! through `tls::records::feed` (what the edge calls with every read),
//! in pieces of the size the first byte picks: never panics, yields no
//! more plaintext than it was given, keeps no more ciphertext than its
//! bound, and keeps nothing after the client closed.
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
    let (mut incoming, mut plain, mut sent) = (BytesMut::new(), BytesMut::new(), Vec::new());
    let mut given = 0;
    for piece in flight.chunks(usize::from(step).max(1)) {
        incoming.extend_from_slice(piece);
        given += piece.len();
        let fed = records::feed(&mut conn, &mut incoming, &mut plain, &mut sent);
        assert!(incoming.len() <= given, "never more ciphertext kept than given");
        match fed {
            Ok(Fed::Open) => assert!(incoming.len() <= records::MAX_INCOMING),
            Ok(Fed::Closed { discarded }) => {
                assert!(discarded <= given);
                assert!(incoming.is_empty(), "nothing kept after close_notify");
                break;
            }
            Err(_) => break,
        }
    }
    assert!(plain.len() <= flight.len());
});
