//! The receiving half of a connection: bytes in, messages out.
//!
//! [`Receiver::next`] takes frames from the front of the read buffer,
//! enforces the framing rules that depend on the role and on earlier frames
//! (masking, fragmentation order, size limits, UTF-8), and hands back whole
//! messages and control frames. Replies it implies (a pong for a ping, a
//! close for a close or an error) are the caller's to send: the receiver
//! never writes.

use std::mem;

use bytes::{Buf, Bytes, BytesMut};

use super::close::{parse_close_bytes, CloseFrame};
use super::deflate::RSV1;
use super::error::ProtocolError;
use super::frame::{FrameHeader, OpCode};
use super::inflate::{InflateError, Inflater};

/// What an inflater holds, for the inbound budget: zlib-rs's window and
/// state (47,552 bytes measured).
const INFLATER_BYTES: usize = 47_552;
use super::mask::apply_mask;
use super::utf8::Utf8Validator;

/// Which end of the connection we are; decides which frames must be masked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// We accepted the connection: frames from the client must be masked.
    Server,
    /// We opened the connection: frames from the server must not be masked.
    Client,
}

/// Size limits on what a peer may make us buffer.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest accepted frame payload, in bytes. Checked against the header
    /// before any payload is buffered. Default: 1 MiB.
    pub max_frame_size: usize,
    /// Largest accepted message (all fragments together), in bytes. Default:
    /// 1 MiB. The Autobahn 9.x performance cases need 16 MiB.
    pub max_message_size: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_frame_size: 1 << 20,
            max_message_size: 1 << 20,
        }
    }
}

/// A complete message or control frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A text message; the bytes are valid UTF-8.
    Text(Bytes),
    /// A binary message.
    Binary(Bytes),
    /// A ping: "Upon receipt of a Ping frame, an endpoint MUST send a Pong
    /// frame in response" (5.5.2), with the same payload.
    Ping(Bytes),
    /// A pong.
    Pong(Bytes),
    /// A close frame and its body, if it had one. The caller answers with a
    /// close frame and stops reading (5.5.1).
    Close(Option<CloseFrame>),
}

/// The type of the fragmented message being assembled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fragmented {
    Text,
    Binary,
}

/// Turns a byte stream into [`Message`]s; see the [module docs](self).
///
/// Holds no heap memory while no fragmented message is open.
#[derive(Debug)]
pub struct Receiver {
    role: Role,
    limits: Limits,
    /// Fragments of the open message; `BytesMut::new()` (no allocation)
    /// otherwise.
    assembly: BytesMut,
    /// The open fragmented message, if any.
    fragmented: Option<Fragmented>,
    /// UTF-8 state across the fragments of a text message.
    utf8: Utf8Validator,
    /// The first error; once set, every call returns it.
    poisoned: Option<ProtocolError>,
    /// permessage-deflate was negotiated: RSV1 marks compressed messages.
    compression: bool,
    /// Created by the first compressed message, then kept (context
    /// takeover); `None` on connections that never send one.
    inflate: Option<Box<InflateState>>,
}

impl Receiver {
    /// A receiver for `role`, enforcing `limits`.
    pub fn new(role: Role, limits: Limits) -> Self {
        Self {
            role,
            limits,
            assembly: BytesMut::new(),
            fragmented: None,
            utf8: Utf8Validator::new(),
            poisoned: None,
            compression: false,
            inflate: None,
        }
    }

    /// Accepts compressed messages (RSV1), as permessage-deflate was
    /// negotiated (RFC 7692). The inflater is created only when the first
    /// compressed message arrives.
    pub fn with_compression(mut self) -> Self {
        self.compression = true;
        self
    }

    /// Consumes complete frames from the front of `buf` and returns the next
    /// complete message or control frame.
    ///
    /// Payloads are unmasked in place and split off `buf`, so an
    /// unfragmented message shares `buf`'s memory (zero-copy). `Ok(None)`
    /// means more bytes are needed: a partial frame is left in `buf`
    /// untouched (data fragments that were complete have been moved into
    /// the assembly buffer). Limits are checked against the header, before
    /// the payload is waited for. After an error the receiver is poisoned
    /// and returns the same error on every call; the caller closes with
    /// [`ProtocolError::close_code`].
    pub fn next(&mut self, buf: &mut BytesMut) -> Result<Option<Message>, ProtocolError> {
        if let Some(err) = &self.poisoned {
            return Err(err.clone());
        }
        if let Some(state) = &mut self.inflate {
            state.returned = false;
        }
        self.read(buf).inspect_err(|err| self.poison(err.clone()))
    }

    /// Between messages with nothing kept: no fragment, no error, no
    /// inflater state; a fresh receiver would be the same.
    pub fn is_idle(&self) -> bool {
        self.assembly.is_empty()
            && self.fragmented.is_none()
            && self.poisoned.is_none()
            && self.inflate.is_none()
    }

    /// Bytes held for the message being assembled (fragments, or what a
    /// compressed message inflated to so far), plus the inflater's state
    /// while one exists (its window, kept across messages under client
    /// context takeover).
    pub fn held(&self) -> usize {
        let inflater = if self.inflate.is_some() {
            INFLATER_BYTES
        } else {
            0
        };
        self.assembly.capacity().saturating_add(inflater)
    }

    /// Whether the message the last [`next`](Self::next) returned arrived
    /// compressed (for the edge's counters).
    pub fn was_compressed(&self) -> bool {
        self.inflate.as_ref().is_some_and(|s| s.returned)
    }

    /// The open message is compressed.
    fn compressed(&self) -> bool {
        self.inflate.as_ref().is_some_and(|s| s.open)
    }

    /// True while a fragmented message is being assembled (bytes are held).
    pub fn is_assembling(&self) -> bool {
        self.fragmented.is_some()
    }

    /// Reads frames until one completes a message or `buf` runs out.
    fn read(&mut self, buf: &mut BytesMut) -> Result<Option<Message>, ProtocolError> {
        loop {
            let allowed = if self.compression { RSV1 } else { 0 };
            let Some((header, header_len)) = FrameHeader::parse_allowing(buf, allowed)? else {
                return Ok(None);
            };
            let frame_len = self.admit(&header, header_len)?;
            if buf.len() < frame_len {
                return Ok(None);
            }
            let mut payload = buf.split_to(frame_len);
            payload.advance(header_len);
            if let Some(key) = header.mask {
                apply_mask(&mut payload, key);
            }
            if let Some(message) = self.on_frame(&header, payload)? {
                return Ok(Some(message));
            }
        }
    }

    /// Every check a header allows before its payload is buffered; returns
    /// the length of the whole frame.
    fn admit(&self, header: &FrameHeader, header_len: usize) -> Result<usize, ProtocolError> {
        self.check_masking(header)?;
        // "An endpoint MUST NOT set the "Per-Message Compressed" bit of
        // control frames and non-first fragments of a data message. An
        // endpoint receiving such a frame MUST _Fail the WebSocket
        // Connection_." (RFC 7692 6.1)
        let data_start = matches!(header.opcode, OpCode::Text | OpCode::Binary);
        if header.rsv & RSV1 != 0 && !data_start {
            return Err(ProtocolError::MisplacedCompressionBit);
        }
        let frame_len = self.check_frame_size(header.payload_len, header_len)?;
        self.check_sequence(header.opcode)?;
        self.check_message_size(header.opcode, header.payload_len)?;
        Ok(frame_len)
    }

    fn check_masking(&self, header: &FrameHeader) -> Result<(), ProtocolError> {
        match (self.role, header.mask.is_some()) {
            // "The server MUST close the connection upon receiving a frame
            // that is not masked." (5.1)
            (Role::Server, false) => Err(ProtocolError::UnmaskedClientFrame),
            // "A client MUST close a connection if it detects a masked
            // frame." (5.1)
            (Role::Client, true) => Err(ProtocolError::MaskedServerFrame),
            _ => Ok(()),
        }
    }

    /// Fails at once on an oversized header, so a 2^63-byte announcement
    /// costs nothing; returns header + payload length.
    fn check_frame_size(&self, size: u64, header_len: usize) -> Result<usize, ProtocolError> {
        let max = self.limits.max_frame_size;
        let frame_len = usize::try_from(size)
            .ok()
            .filter(|&len| len <= max)
            .and_then(|len| len.checked_add(header_len));
        frame_len.ok_or(ProtocolError::FrameTooBig { size, max })
    }

    /// "A fragmented message consists of a single frame with the FIN bit
    /// clear and an opcode other than 0, followed by zero or more frames with
    /// the FIN bit clear and the opcode set to 0, and terminated by a single
    /// frame with the FIN bit set and an opcode of 0." (5.4) Control frames
    /// "MAY be injected in the middle of a fragmented message".
    fn check_sequence(&self, opcode: OpCode) -> Result<(), ProtocolError> {
        match (opcode, self.fragmented) {
            (OpCode::Continuation, None) => Err(ProtocolError::UnexpectedContinuation),
            (OpCode::Text | OpCode::Binary, Some(_)) => Err(ProtocolError::ExpectedContinuation),
            _ => Ok(()),
        }
    }

    /// Checks what the message would grow to with this frame's payload.
    fn check_message_size(&self, opcode: OpCode, payload_len: u64) -> Result<(), ProtocolError> {
        let held = match opcode {
            // The inflated size is checked while inflating; compressed
            // bytes and inflated bytes do not add up to anything.
            OpCode::Continuation if self.compressed() => return Ok(()),
            OpCode::Continuation => self.assembly.len(),
            OpCode::Text | OpCode::Binary => 0,
            OpCode::Close | OpCode::Ping | OpCode::Pong => return Ok(()),
        };
        let size = u64::try_from(held).map_or(u64::MAX, |held| held.saturating_add(payload_len));
        let max = self.limits.max_message_size;
        match usize::try_from(size) {
            Ok(len) if len <= max => Ok(()),
            _ => Err(ProtocolError::MessageTooBig { size, max }),
        }
    }

    /// Handles a complete, unmasked frame; returns a message if it finished
    /// one.
    fn on_frame(
        &mut self,
        header: &FrameHeader,
        payload: BytesMut,
    ) -> Result<Option<Message>, ProtocolError> {
        let message = match header.opcode {
            OpCode::Text | OpCode::Binary if header.rsv & RSV1 != 0 => {
                let kind = match header.opcode {
                    OpCode::Text => Fragmented::Text,
                    _ => Fragmented::Binary,
                };
                self.inflate.get_or_insert_with(Box::default).open = true;
                self.start(kind, &payload)?;
                return self.end_if(header.fin);
            }
            OpCode::Ping => Message::Ping(payload.freeze()),
            OpCode::Pong => Message::Pong(payload.freeze()),
            OpCode::Close => Message::Close(parse_close_bytes(payload.freeze())?),
            OpCode::Text if header.fin => Message::Text(validated_text(payload.freeze())?),
            OpCode::Binary if header.fin => Message::Binary(payload.freeze()),
            OpCode::Text => return self.start(Fragmented::Text, &payload).map(|()| None),
            OpCode::Binary => return self.start(Fragmented::Binary, &payload).map(|()| None),
            OpCode::Continuation => {
                self.append(&payload)?;
                return self.end_if(header.fin);
            }
        };
        Ok(Some(message))
    }

    /// Opens a fragmented message with its first fragment.
    fn start(&mut self, kind: Fragmented, payload: &[u8]) -> Result<(), ProtocolError> {
        self.fragmented = Some(kind);
        self.utf8.reset();
        self.append(payload)
    }

    /// After the message's last fragment: the message.
    fn end_if(&mut self, fin: bool) -> Result<Option<Message>, ProtocolError> {
        if !fin {
            return Ok(None);
        }
        if self.compressed() {
            // "Append 4 octets of 0x00 0x00 0xff 0xff to the tail end of
            // the payload of the message" before inflating (RFC 7692 7.2.2).
            let start = self.assembly.len();
            self.inflate(None)?;
            if self.fragmented == Some(Fragmented::Text) {
                self.utf8
                    .feed(self.assembly.get(start..).unwrap_or_default())?;
            }
            if let Some(state) = &mut self.inflate {
                (state.open, state.returned) = (false, true);
            }
        }
        let kind = self
            .fragmented
            .take()
            .ok_or(ProtocolError::UnexpectedContinuation)?;
        // Hand over the assembled bytes and go back to holding no memory.
        let data = mem::take(&mut self.assembly).freeze();
        match kind {
            Fragmented::Text => self.utf8.finish().map(|()| Some(Message::Text(data))),
            Fragmented::Binary => Ok(Some(Message::Binary(data))),
        }
    }

    /// Copies a fragment into the assembly buffer, validating text as it
    /// arrives so invalid UTF-8 fails before the message is complete.
    fn append(&mut self, payload: &[u8]) -> Result<(), ProtocolError> {
        let start = self.assembly.len();
        if self.compressed() {
            self.inflate(Some(payload))?;
        } else {
            self.assembly.extend_from_slice(payload);
        }
        if self.fragmented == Some(Fragmented::Text) {
            self.utf8
                .feed(self.assembly.get(start..).unwrap_or_default())?;
        }
        Ok(())
    }

    /// Inflates a piece of the open compressed message onto the assembly,
    /// stopping at `max_message_size` of output.
    /// `None`: the message's end (the tail the sender removed).
    fn inflate(&mut self, payload: Option<&[u8]>) -> Result<(), ProtocolError> {
        let max = self.limits.max_message_size;
        let inflater = &mut self.inflate.get_or_insert_with(Box::default).inflater;
        match payload {
            Some(p) => inflater.feed(p, &mut self.assembly, max),
            None => inflater.finish(&mut self.assembly, max),
        }
        .map_err(|e| match e {
            InflateError::TooBig => ProtocolError::InflatedTooBig { max },
            InflateError::Corrupt => ProtocolError::BadCompressedData,
        })
    }

    /// Records the error and releases everything held for the message.
    fn poison(&mut self, err: ProtocolError) {
        self.poisoned = Some(err);
        self.assembly = BytesMut::new();
        self.fragmented = None;
        self.inflate = None;
        self.utf8.reset();
    }
}

/// A connection's inflation state, boxed: connections that never send a
/// compressed message pay one pointer for it.
#[derive(Debug, Default)]
struct InflateState {
    inflater: Inflater,
    /// The open message is compressed: fragments are inflated as they
    /// arrive, so the limits apply to the inflated size.
    open: bool,
    /// The message `next` returned last was compressed.
    returned: bool,
}

/// "When an endpoint is to interpret a byte stream as UTF-8 but finds that
/// the byte stream is not, in fact, a valid UTF-8 stream, that endpoint MUST
/// _Fail the WebSocket Connection_." (8.1)
fn validated_text(data: Bytes) -> Result<Bytes, ProtocolError> {
    match std::str::from_utf8(&data) {
        Ok(_) => Ok(data),
        Err(_) => Err(ProtocolError::InvalidUtf8),
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests;

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod compressed_tests;
