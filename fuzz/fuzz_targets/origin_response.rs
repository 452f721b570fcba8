//! An origin's response over arbitrary bytes in arbitrary chunks: the
//! head parses or is refused, the body (Content-Length, chunked or
//! read-to-close) decodes within its bound or is refused — never a panic.
//! The same bytes go to the HTTP-date parser behind `Expires`/`Date`.
#![no_main]
use bytes::BytesMut;
use corecast::cache::origin::{parse_response_head, BodyDecoder};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // An origin's `Expires`/`Date` value: a time or `None`, never a panic.
    let _ = corecast::cache::date::parse_ms(data);
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let (mut buf, mut body, mut decoder) = (BytesMut::new(), BytesMut::new(), None);
    for piece in rest.chunks(usize::from(split).max(1)) {
        buf.extend_from_slice(piece);
        if decoder.is_none() {
            match parse_response_head(&mut buf, 4096) {
                Ok(Some(head)) => match BodyDecoder::new(head.framing, 1 << 16, 1024) {
                    Ok(d) => decoder = Some(d),
                    Err(_) => return,
                },
                Ok(None) => continue,
                Err(_) => return,
            }
        }
        if let Some(d) = decoder.as_mut() {
            match d.decode(&mut buf, &mut body) {
                Ok(true) | Err(_) => return,
                Ok(false) => assert!(body.len() <= 1 << 16),
            }
        }
    }
});
