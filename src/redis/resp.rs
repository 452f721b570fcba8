//! RESP2, sans-I/O: commands encoded straight into the write buffer,
//! replies decoded (by the `redis-protocol` crate) zero-copy out of the
//! read buffer, and the bookkeeping of a pipelined connection.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use redis_protocol::resp2::decode::decode_bytes_mut;
use redis_protocol::resp2::types::BytesFrame;

pub use super::error::RespError;
use super::scan;
pub use super::scan::Limits;

/// A decoded reply (a view into the read buffer, no copies).
pub type Reply = BytesFrame;

/// Most arguments in one encoded command (SUBSCRIBE batches stay below it).
pub const MAX_ARGS: usize = 1025;

/// Appends `args` as a RESP2 array of bulk strings, allocation-free for
/// any count. Written out rather than through `redis-protocol`'s encoder:
/// the format is three lines, and its `encode_len` sizes with `f64::log10`
/// — the one libm symbol the binary used, and so the reason libm was
/// mapped into every process (issue 29: 320 KB of a fresh server's RSS).
/// Checked against `redis-protocol`'s decoder in the tests.
pub fn encode_command(args: &[&[u8]], out: &mut BytesMut) {
    let len: usize = args.iter().map(|a| a.len() + 16).sum();
    out.reserve(len + 16);
    push_len(out, b'*', args.len());
    for a in args {
        push_len(out, b'$', a.len());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// `{kind}{n}\r\n`.
fn push_len(out: &mut BytesMut, kind: u8, n: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut n = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&[kind]);
    out.extend_from_slice(&digits[at..]);
    out.extend_from_slice(b"\r\n");
}

/// Encodes a command into its own `Bytes` (for pipelines that keep each
/// command until its reply, to resend after a reconnect).
pub fn command(args: &[&[u8]]) -> Bytes {
    let mut out = BytesMut::new();
    encode_command(args, &mut out);
    out.freeze()
}

/// Takes one complete reply from the front of `buf`; `Ok(None)` = need
/// more bytes (nothing consumed).
///
/// The bytes are first scanned iteratively within `limits` (depth, size,
/// elements: see [`scan`]); only a complete, bounded frame reaches the
/// recursive decoder, and only that frame's bytes. A partial reply may
/// hold at most `limits.max_len` bytes: a longer one is an error, so the
/// caller's read buffer stays bounded.
pub fn decode(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Reply>, RespError> {
    let len = match scan::frame_len(buf, limits)? {
        Some(len) => len,
        None if buf.len() > limits.max_len => {
            return Err(RespError::TooLarge {
                size: buf.len(),
                max: limits.max_len,
            })
        }
        None => return Ok(None),
    };
    let mut frame = buf.split_to(len);
    match decode_bytes_mut(&mut frame) {
        Ok(Some((reply, _, _))) if frame.is_empty() => Ok(Some(reply)),
        Ok(_) => Err(RespError::Protocol("reply framing mismatch".into())),
        Err(e) => Err(RespError::Protocol(format!("{e:?}"))),
    }
}

/// An event on a subscriber connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PubSubEvent {
    /// `message channel payload`.
    Message {
        /// Redis channel.
        channel: Bytes,
        /// Message bytes.
        payload: Bytes,
    },
    /// SUBSCRIBE confirmed for one channel.
    Subscribed(Bytes),
    /// UNSUBSCRIBE confirmed for one channel.
    Unsubscribed(Bytes),
    /// Reply to PING in subscribe mode, with the PING's argument (empty
    /// without one).
    Pong(Bytes),
    /// An error reply (e.g. NOAUTH).
    Error(String),
}

/// Classifies a reply received in subscribe mode.
pub fn pubsub_event(reply: Reply) -> Result<PubSubEvent, RespError> {
    let parts = match reply {
        BytesFrame::Array(parts) => parts,
        BytesFrame::Error(e) => return Ok(PubSubEvent::Error(e.to_string())),
        BytesFrame::SimpleString(s) if s.eq_ignore_ascii_case(b"PONG") => {
            return Ok(PubSubEvent::Pong(Bytes::new()))
        }
        // `PING arg` on a connection not (yet) subscribed to anything.
        BytesFrame::BulkString(arg) => return Ok(PubSubEvent::Pong(arg)),
        _ => return Err(RespError::NotPubSub),
    };
    let mut it = parts.into_iter();
    let kind = match it.next() {
        Some(BytesFrame::BulkString(k)) => k,
        _ => return Err(RespError::NotPubSub),
    };
    let channel = match it.next() {
        Some(BytesFrame::BulkString(c)) => c,
        _ => return Err(RespError::NotPubSub),
    };
    match &kind[..] {
        // Sharded pub/sub (Redis Cluster) answers with its own kinds.
        b"message" | b"smessage" => match it.next() {
            Some(BytesFrame::BulkString(payload)) => Ok(PubSubEvent::Message { channel, payload }),
            _ => Err(RespError::NotPubSub),
        },
        b"subscribe" | b"ssubscribe" => Ok(PubSubEvent::Subscribed(channel)),
        b"unsubscribe" | b"sunsubscribe" => Ok(PubSubEvent::Unsubscribed(channel)),
        b"pong" => Ok(PubSubEvent::Pong(channel)),
        _ => Err(RespError::NotPubSub),
    }
}

/// The pipeline was at its byte bound: the command was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipelineFull;

/// The commands of one pipelined connection: those not yet written and
/// those written and awaiting their reply, each with what to do with the
/// reply (`K`). Replies are matched in order, as Redis sends them.
///
/// Bounded in bytes, with two budgets: cache store writes count against
/// `max_cache_bytes` only and everything else (publishes, reads) against
/// `max_bytes` only, so a stream of large cache writes never makes a
/// publish be refused. While Redis is unreachable, publishes wait here and
/// further ones are refused once `max_bytes` is reached. After a lost
/// connection the commands still awaiting replies are put back in front of
/// the unsent ones, so they are sent again (at least once) in their order.
#[derive(Debug)]
pub struct Pipeline<K> {
    unsent: VecDeque<Entry<K>>,
    inflight: VecDeque<Entry<K>>,
    bytes: usize,
    max_bytes: usize,
    cache_bytes: usize,
    max_cache_bytes: usize,
}

/// A queued command, its reply's handler, and whether it is a cache write
/// (which budget its bytes count against).
type Entry<K> = (Bytes, K, bool);

impl<K> Pipeline<K> {
    /// An empty pipeline holding at most `max_bytes` of commands and
    /// `max_cache_bytes` of cache writes.
    pub fn new(max_bytes: usize, max_cache_bytes: usize) -> Self {
        Pipeline {
            unsent: VecDeque::new(),
            inflight: VecDeque::new(),
            bytes: 0,
            max_bytes,
            cache_bytes: 0,
            max_cache_bytes,
        }
    }

    /// Queues a command unless the byte bound would be crossed.
    pub fn push(&mut self, cmd: Bytes, kind: K) -> Result<(), PipelineFull> {
        if self.bytes.saturating_add(cmd.len()) > self.max_bytes {
            return Err(PipelineFull);
        }
        self.bytes += cmd.len();
        self.unsent.push_back((cmd, kind, false));
        Ok(())
    }

    /// Queues a cache write unless the cache write budget would be crossed.
    pub fn push_cache(&mut self, cmd: Bytes, kind: K) -> Result<(), PipelineFull> {
        if self.cache_bytes.saturating_add(cmd.len()) > self.max_cache_bytes {
            return Err(PipelineFull);
        }
        self.cache_bytes += cmd.len();
        self.unsent.push_back((cmd, kind, true));
        Ok(())
    }

    /// Whether there are commands to write.
    pub fn has_unsent(&self) -> bool {
        !self.unsent.is_empty()
    }

    /// Commands queued or awaiting replies.
    pub fn len(&self) -> usize {
        self.unsent.len() + self.inflight.len()
    }

    /// Whether nothing is queued or awaiting a reply.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of commands held (both budgets).
    pub fn bytes(&self) -> usize {
        self.bytes + self.cache_bytes
    }

    /// Moves every unsent command (at most `max`) to in-flight and appends
    /// its bytes to `out`, for one vectored write.
    pub fn take_unsent(&mut self, out: &mut Vec<Bytes>, max: usize) {
        let n = self.unsent.len().min(max);
        for (cmd, kind, cache) in self.unsent.drain(..n) {
            out.push(cmd.clone());
            self.inflight.push_back((cmd, kind, cache));
        }
    }

    /// The oldest in-flight command's reply arrived: returns its kind.
    pub fn on_reply(&mut self) -> Result<K, RespError> {
        self.on_reply_cmd().map(|(_, kind, _)| kind)
    }

    /// [`Pipeline::on_reply`] that also gives the command back, and
    /// whether it was a cache write (to send it elsewhere: a Redis
    /// Cluster redirect).
    pub fn on_reply_cmd(&mut self) -> Result<(Bytes, K, bool), RespError> {
        let (cmd, kind, cache) = self
            .inflight
            .pop_front()
            .ok_or(RespError::UnexpectedReply)?;
        if cache {
            self.cache_bytes -= cmd.len();
        } else {
            self.bytes -= cmd.len();
        }
        Ok((cmd, kind, cache))
    }

    /// Takes every command, in flight first then unsent, in order (a
    /// Redis Cluster shard that lost its slots hands them on).
    pub fn drain(&mut self) -> Vec<(Bytes, K, bool)> {
        self.requeue_inflight();
        self.bytes = 0;
        self.cache_bytes = 0;
        self.unsent.drain(..).collect()
    }

    /// The connection was lost: everything in flight goes back in front of
    /// the unsent commands, in order, to be written again.
    pub fn requeue_inflight(&mut self) {
        while let Some(item) = self.inflight.pop_back() {
            self.unsent.push_front(item);
        }
    }

    /// Whether any command awaits a reply.
    pub fn has_inflight(&self) -> bool {
        !self.inflight.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_replies(bytes: &[u8]) -> Vec<Reply> {
        let mut buf = BytesMut::from(bytes);
        let mut out = Vec::new();
        while let Some(r) = decode(&mut buf, &Limits::default()).unwrap() {
            out.push(r);
        }
        assert!(buf.is_empty());
        out
    }

    #[test]
    fn commands_encode_as_bulk_string_arrays() {
        let mut out = BytesMut::new();
        encode_command(&[b"PUBLISH", b"ch", b"hi"], &mut out);
        assert_eq!(&out[..], b"*3\r\n$7\r\nPUBLISH\r\n$2\r\nch\r\n$2\r\nhi\r\n");
        let many: Vec<Vec<u8>> = (0..20).map(|i| format!("c{i}").into_bytes()).collect();
        let mut args: Vec<&[u8]> = vec![b"SUBSCRIBE"];
        args.extend(many.iter().map(|v| v.as_slice()));
        let cmd = command(&args);
        assert!(cmd.starts_with(b"*21\r\n$9\r\nSUBSCRIBE\r\n"));
    }

    #[test]
    fn commands_decode_as_sent_with_redis_protocol() {
        // Every length-digit count, empty and binary arguments, and the
        // argument counts around 8 and 10: read back by the independent
        // decoder.
        for len in [0usize, 1, 9, 10, 99, 100, 1000, 12345] {
            for n in [1usize, 8, 9, 10, 11, 100] {
                let arg: Vec<u8> = (0..len).map(|i| (i % 256) as u8).collect();
                let args: Vec<&[u8]> = std::iter::repeat_n(arg.as_slice(), n).collect();
                let mut buf = BytesMut::new();
                encode_command(&args, &mut buf);
                let wire = buf.clone();
                let (frame, used, _) = decode_bytes_mut(&mut buf).unwrap().unwrap();
                assert_eq!(used, wire.len(), "{len}x{n}");
                let BytesFrame::Array(items) = frame else {
                    panic!("not an array")
                };
                assert_eq!(items.len(), n);
                assert!(items
                    .iter()
                    .all(|i| *i == BytesFrame::BulkString(arg.clone().into())));
            }
        }
    }

    const STREAM: &[u8] = b"+OK\r\n:3\r\n-ERR wrong\r\n$5\r\nhello\r\n$-1\r\n\
        *3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$3\r\nabc\r\n";

    #[test]
    fn replies_split_at_every_byte_boundary_parse_the_same() {
        let whole = all_replies(STREAM);
        assert_eq!(whole.len(), 6);
        for cut in 0..STREAM.len() {
            let mut buf = BytesMut::from(&STREAM[..cut]);
            let mut got = Vec::new();
            while let Some(r) = decode(&mut buf, &Limits::default()).unwrap() {
                got.push(r);
            }
            buf.extend_from_slice(&STREAM[cut..]);
            while let Some(r) = decode(&mut buf, &Limits::default()).unwrap() {
                got.push(r);
            }
            assert_eq!(got, whole, "cut at {cut}");
        }
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        let mut buf = BytesMut::from(&b"?what\r\n"[..]);
        assert!(matches!(
            decode(&mut buf, &Limits::default()),
            Err(RespError::Protocol(_))
        ));
    }

    #[test]
    fn pubsub_events_are_classified() {
        let r = all_replies(STREAM);
        assert_eq!(
            pubsub_event(r[5].clone()).unwrap(),
            PubSubEvent::Message {
                channel: Bytes::from_static(b"ch"),
                payload: Bytes::from_static(b"abc")
            }
        );
        assert_eq!(
            pubsub_event(r[2].clone()).unwrap(),
            PubSubEvent::Error("ERR wrong".into())
        );
        let sub = all_replies(b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(
            pubsub_event(sub[0].clone()).unwrap(),
            PubSubEvent::Subscribed(Bytes::from_static(b"a"))
        );
        assert_eq!(pubsub_event(r[1].clone()), Err(RespError::NotPubSub));
    }

    #[test]
    fn pipelined_replies_are_matched_in_order_across_interleaving() {
        let mut p = Pipeline::new(1 << 20, 1 << 20);
        let mut out = Vec::new();
        p.push(command(&[b"PING"]), 1).unwrap();
        p.push(command(&[b"PING"]), 2).unwrap();
        p.take_unsent(&mut out, usize::MAX);
        p.push(command(&[b"PING"]), 3).unwrap();
        assert_eq!(p.on_reply(), Ok(1));
        p.take_unsent(&mut out, usize::MAX);
        assert_eq!(out.len(), 3);
        assert_eq!(p.on_reply(), Ok(2));
        assert_eq!(p.on_reply(), Ok(3));
        assert_eq!(p.on_reply(), Err(RespError::UnexpectedReply));
        assert_eq!(p.bytes(), 0);
    }

    #[test]
    fn lost_connection_requeues_inflight_first_in_order() {
        let mut p = Pipeline::new(1 << 20, 1 << 20);
        let mut out = Vec::new();
        for k in 1..=3 {
            p.push(command(&[b"PUBLISH", b"c", &[k]]), k).unwrap();
        }
        p.take_unsent(&mut out, 2);
        p.push(command(&[b"PUBLISH", b"c", b"4"]), 4).unwrap();
        p.requeue_inflight();
        out.clear();
        p.take_unsent(&mut out, usize::MAX);
        let kinds: Vec<_> = std::iter::from_fn(|| p.on_reply().ok()).collect();
        assert_eq!(kinds, vec![1, 2, 3, 4]);
    }

    #[test]
    fn the_pipeline_is_bounded_in_bytes() {
        let cmd = command(&[b"PUBLISH", b"c", &[0; 100]]);
        let mut p = Pipeline::new(cmd.len() * 2, 0);
        p.push(cmd.clone(), ()).unwrap();
        p.push(cmd.clone(), ()).unwrap();
        assert_eq!(p.push(cmd, ()), Err(PipelineFull));
        assert_eq!(p.len(), 2);
    }

    #[test]
    fn cache_writes_and_publishes_have_separate_budgets() {
        let publish = command(&[b"PUBLISH", b"c", &[0; 100]]);
        let set = command(&[b"SET", b"k", &[0; 1000], b"PX", b"1000"]);
        let mut p = Pipeline::new(publish.len() * 2, set.len() * 2);
        // Cache writes fill their own budget, then are refused...
        p.push_cache(set.clone(), 'c').unwrap();
        p.push_cache(set.clone(), 'c').unwrap();
        assert_eq!(p.push_cache(set.clone(), 'c'), Err(PipelineFull));
        // ...while publishes still get their whole budget.
        p.push(publish.clone(), 'p').unwrap();
        p.push(publish.clone(), 'p').unwrap();
        assert_eq!(p.push(publish.clone(), 'p'), Err(PipelineFull));
        // A reply frees the budget of the command it answers, and only it.
        let mut out = Vec::new();
        p.take_unsent(&mut out, 1);
        assert_eq!(p.on_reply(), Ok('c'));
        assert_eq!(p.push(publish, 'p'), Err(PipelineFull));
        p.push_cache(set, 'c').unwrap();
        assert_eq!(p.len(), 4);
    }
}
