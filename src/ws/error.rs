//! Protocol errors: one variant per broken RFC 6455 rule.
//!
//! The receiving side never "recovers" from these: RFC 6455 asks the endpoint
//! to _Fail the WebSocket Connection_, so each variant maps to the close code
//! the connection sends before it gives up ([`ProtocolError::close_code`]).

use std::fmt;

/// Close code 1002: "an endpoint is terminating the connection due to a
/// protocol error" (RFC 6455 section 7.4.1).
pub const CLOSE_PROTOCOL_ERROR: u16 = 1002;
/// Close code 1007: "received data within a message that was not consistent
/// with the type of the message (e.g., non-UTF-8 data within a text message)".
pub const CLOSE_INVALID_PAYLOAD: u16 = 1007;
/// Close code 1009: "received a message that is too big for it to process".
pub const CLOSE_MESSAGE_TOO_BIG: u16 = 1009;

/// One variant per broken RFC rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    /// An RSV1-3 bit was set although no extension was negotiated (5.2).
    ReservedBitsSet,
    /// The opcode is one of the reserved values 3-7 or 0xB-0xF (5.2).
    UnknownOpcode(u8),
    /// Server role: a client sent a frame without a masking key (5.1).
    UnmaskedClientFrame,
    /// Client role: the server sent a masked frame (5.1).
    MaskedServerFrame,
    /// A control frame announced a payload longer than 125 bytes (5.5).
    ControlFrameTooBig(u64),
    /// A control frame had FIN = 0 (5.5).
    FragmentedControlFrame,
    /// A 64-bit payload length had its most significant bit set (5.2).
    InvalidLength,
    /// A frame payload exceeds the configured `max_frame_size`.
    FrameTooBig {
        /// Payload length announced by the frame header.
        size: u64,
        /// The configured limit.
        max: usize,
    },
    /// The assembled message would exceed the configured `max_message_size`.
    MessageTooBig {
        /// Size the message would reach with the offending frame.
        size: u64,
        /// The configured limit.
        max: usize,
    },
    /// A continuation frame arrived while no fragmented message was open (5.4).
    UnexpectedContinuation,
    /// A new text/binary frame arrived inside a fragmented message (5.4).
    ExpectedContinuation,
    /// A text message or a close reason is not valid UTF-8 (5.6, 8.1).
    InvalidUtf8,
    /// A close frame carried a 1-byte body: too short for the status code (5.5.1).
    InvalidClosePayload,
    /// A close frame carried a status code that may not be sent on the wire (7.4).
    InvalidCloseCode(u16),
    /// RSV1 on a control frame or a continuation frame (RFC 7692 6).
    MisplacedCompressionBit,
    /// A compressed message is not valid DEFLATE (RFC 7692 7.2.2).
    BadCompressedData,
    /// A compressed message inflates past `max_message_size`; inflation
    /// stopped there.
    InflatedTooBig {
        /// The configured limit.
        max: usize,
    },
}

impl ProtocolError {
    /// The status code to send in our close frame when failing because of
    /// `self`: 1007 for bad UTF-8 (including close reasons), 1009 for size
    /// limits and 1002 for every other protocol violation.
    pub fn close_code(&self) -> u16 {
        match self {
            Self::InvalidUtf8 | Self::BadCompressedData => CLOSE_INVALID_PAYLOAD,
            Self::FrameTooBig { .. } | Self::MessageTooBig { .. } | Self::InflatedTooBig { .. } => {
                CLOSE_MESSAGE_TOO_BIG
            }
            _ => CLOSE_PROTOCOL_ERROR,
        }
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ReservedBitsSet => {
                f.write_str("reserved bits set without a negotiated extension")
            }
            Self::UnknownOpcode(op) => write!(f, "unknown opcode {op:#x}"),
            Self::UnmaskedClientFrame => f.write_str("client frame is not masked"),
            Self::MaskedServerFrame => f.write_str("server frame is masked"),
            Self::ControlFrameTooBig(len) => {
                write!(f, "control frame payload of {len} bytes exceeds 125")
            }
            Self::FragmentedControlFrame => f.write_str("control frame is fragmented"),
            Self::InvalidLength => f.write_str("64-bit payload length has its top bit set"),
            Self::FrameTooBig { size, max } => {
                write!(
                    f,
                    "frame payload of {size} bytes exceeds the limit of {max}"
                )
            }
            Self::MessageTooBig { size, max } => {
                write!(f, "message of {size} bytes exceeds the limit of {max}")
            }
            Self::UnexpectedContinuation => {
                f.write_str("continuation frame without a fragmented message")
            }
            Self::ExpectedContinuation => {
                f.write_str("new data frame while a fragmented message is open")
            }
            Self::InvalidUtf8 => f.write_str("invalid UTF-8 in text message or close reason"),
            Self::InvalidClosePayload => f.write_str("close frame body of 1 byte"),
            Self::InvalidCloseCode(code) => write!(f, "invalid close code {code}"),
            Self::MisplacedCompressionBit => {
                f.write_str("RSV1 set on a control or continuation frame")
            }
            Self::BadCompressedData => f.write_str("compressed message is not valid DEFLATE"),
            Self::InflatedTooBig { max } => {
                write!(f, "compressed message inflates past the limit of {max}")
            }
        }
    }
}

impl std::error::Error for ProtocolError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_codes_follow_rfc_7_4_1() {
        assert_eq!(ProtocolError::InvalidUtf8.close_code(), 1007);
        let too_big = ProtocolError::FrameTooBig { size: 10, max: 1 };
        assert_eq!(too_big.close_code(), 1009);
        let too_long = ProtocolError::MessageTooBig { size: 10, max: 1 };
        assert_eq!(too_long.close_code(), 1009);
        assert_eq!(ProtocolError::ReservedBitsSet.close_code(), 1002);
        assert_eq!(ProtocolError::InvalidCloseCode(1005).close_code(), 1002);
        assert_eq!(ProtocolError::InflatedTooBig { max: 1 }.close_code(), 1009);
        assert_eq!(ProtocolError::BadCompressedData.close_code(), 1007);
        assert_eq!(ProtocolError::MisplacedCompressionBit.close_code(), 1002);
    }

    #[test]
    fn display_names_the_offending_value() {
        assert_eq!(
            ProtocolError::UnknownOpcode(3).to_string(),
            "unknown opcode 0x3"
        );
        let err = ProtocolError::MessageTooBig { size: 20, max: 16 };
        assert_eq!(
            err.to_string(),
            "message of 20 bytes exceeds the limit of 16"
        );
    }
}
