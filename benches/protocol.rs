//! Microbenchmarks of the sans-I/O protocol code: frame headers, masking,
//! message decoding and the upgrade handshake.

use bytes::BytesMut;
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use corecast::http::parse_request;
use corecast::ws::frame::{encode_client_frame, FrameHeader, OpCode, MAX_HEADER_LEN};
use corecast::ws::mask::{apply_mask, apply_mask_bytewise};
use corecast::ws::{Limits, Receiver, Role};

fn headers(c: &mut Criterion) {
    let mut g = c.benchmark_group("frame_header");
    for len in [125u64, 65_535, 1 << 20] {
        let h = FrameHeader {
            fin: true,
            rsv: 0,
            opcode: OpCode::Binary,
            mask: Some([1, 2, 3, 4]),
            payload_len: len,
        };
        let mut buf = [0u8; MAX_HEADER_LEN];
        let n = h.encode(&mut buf);
        g.bench_with_input(BenchmarkId::new("parse", len), &buf[..n], |b, bytes| {
            b.iter(|| FrameHeader::parse(black_box(bytes)))
        });
        g.bench_with_input(BenchmarkId::new("encode", len), &h, |b, h| {
            let mut out = [0u8; MAX_HEADER_LEN];
            b.iter(|| black_box(h).encode(&mut out))
        });
    }
    g.finish();
}

fn masking(c: &mut Criterion) {
    let mut g = c.benchmark_group("unmask");
    for len in [128usize, 4096, 1 << 20] {
        let mut data = vec![0xA5u8; len];
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(BenchmarkId::new("word_wise", len), |b| {
            b.iter(|| apply_mask(black_box(&mut data), [1, 2, 3, 4]))
        });
        g.bench_function(BenchmarkId::new("byte_wise", len), |b| {
            b.iter(|| apply_mask_bytewise(black_box(&mut data), [1, 2, 3, 4]))
        });
    }
    g.finish();
}

fn decode(c: &mut Criterion) {
    // 64 masked 128-byte frames in one read, as a busy publisher sends them.
    let mut wire = BytesMut::new();
    for _ in 0..64 {
        encode_client_frame(OpCode::Binary, &[7u8; 128], [9, 8, 7, 6], &mut wire);
    }
    let limits = Limits {
        max_frame_size: 1 << 20,
        max_message_size: 1 << 20,
    };
    let mut g = c.benchmark_group("receiver");
    g.throughput(Throughput::Elements(64));
    g.bench_function("64_masked_128B_frames", |b| {
        b.iter(|| {
            let mut rx = Receiver::new(Role::Server, limits);
            let mut buf = wire.clone();
            let mut n = 0;
            while let Ok(Some(m)) = rx.next(&mut buf) {
                black_box(m);
                n += 1;
            }
            assert_eq!(n, 64);
        })
    });
    g.finish();
}

fn handshake(c: &mut Criterion) {
    let req = b"GET /ws/news HTTP/1.1\r\nHost: example.com\r\nUpgrade: websocket\r\n\
        Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
        Sec-WebSocket-Version: 13\r\nOrigin: https://example.com\r\n\
        User-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\n\r\n";
    c.bench_function("handshake_parse_and_accept", |b| {
        b.iter(|| parse_request(black_box(req), 8192).unwrap().unwrap())
    });
}

criterion_group!(benches, headers, masking, decode, handshake);
criterion_main!(benches);
