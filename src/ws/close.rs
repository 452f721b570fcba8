//! Close frame bodies, RFC 6455 sections 5.5.1 and 7.4.
//!
//! "If there is a body, the first two bytes of the body MUST be a 2-byte
//! unsigned integer (in network byte order) representing a status code" and
//! "Following the 2-byte integer, the body MAY contain UTF-8-encoded data".

use bytes::Bytes;

use super::error::ProtocolError;

/// The body of a close frame that carried one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseFrame {
    /// The status code (already checked with [`is_valid_close_code`]).
    pub code: u16,
    /// The reason, validated UTF-8 (kept as bytes to avoid a copy).
    pub reason: Bytes,
}

/// True if `code` may appear in a close frame on the wire (RFC 6455 7.4).
///
/// Valid: 1000-1003 and 1007-1011 from the RFC, 1012-1014 registered with
/// IANA since, 3000-3999 (registered by libraries and frameworks) and
/// 4000-4999 (private use). Invalid: below 1000 ("not used"), 1004
/// (reserved), 1005, 1006 and 1015 ("MUST NOT be set as a status code in a
/// Close control frame by an endpoint"), the unassigned 1016-2999, and 5000
/// and above.
pub fn is_valid_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// Parses and validates a close frame body.
///
/// An empty body yields `None` (no status code was sent). A 1-byte body is
/// [`ProtocolError::InvalidClosePayload`], a code that may not be sent is
/// [`ProtocolError::InvalidCloseCode`] and a reason that is not UTF-8 is
/// [`ProtocolError::InvalidUtf8`]. The reason is copied; the receiver uses
/// a zero-copy variant for frames it already holds as `Bytes`.
pub fn parse_close_payload(payload: &[u8]) -> Result<Option<CloseFrame>, ProtocolError> {
    Ok(validate(payload)?.map(|(code, reason)| CloseFrame {
        code,
        reason: Bytes::copy_from_slice(reason),
    }))
}

/// Zero-copy [`parse_close_payload`]: the reason is a slice of `payload`.
pub(crate) fn parse_close_bytes(mut payload: Bytes) -> Result<Option<CloseFrame>, ProtocolError> {
    let Some((code, _)) = validate(&payload)? else {
        return Ok(None);
    };
    // `validate` found a code, so the body holds at least its 2 bytes.
    let reason = payload.split_off(payload.len().min(2));
    Ok(Some(CloseFrame { code, reason }))
}

/// Checks a close body; returns the code and the reason bytes if present.
fn validate(payload: &[u8]) -> Result<Option<(u16, &[u8])>, ProtocolError> {
    if payload.is_empty() {
        return Ok(None);
    }
    let (code, reason) = payload
        .split_first_chunk::<2>()
        .ok_or(ProtocolError::InvalidClosePayload)?;
    let code = u16::from_be_bytes(*code);
    if !is_valid_close_code(code) {
        return Err(ProtocolError::InvalidCloseCode(code));
    }
    // Section 8.1 applies to the reason too: it MUST be valid UTF-8.
    std::str::from_utf8(reason).map_err(|_| ProtocolError::InvalidUtf8)?;
    Ok(Some((code, reason)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_validity_table() {
        let valid = [
            1000, 1001, 1002, 1003, 1007, 1010, 1011, 1012, 1013, 1014, 3000, 3999,
        ];
        for code in valid.into_iter().chain([4000, 4999]) {
            assert!(is_valid_close_code(code), "{code}");
        }
        let invalid = [0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000];
        for code in invalid.into_iter().chain([u16::MAX]) {
            assert!(!is_valid_close_code(code), "{code}");
        }
    }

    #[test]
    fn empty_body_has_no_code() {
        assert_eq!(parse_close_payload(&[]), Ok(None));
        assert_eq!(parse_close_bytes(Bytes::new()), Ok(None));
    }

    #[test]
    fn one_byte_body_is_rejected() {
        assert_eq!(
            parse_close_payload(&[0x03]),
            Err(ProtocolError::InvalidClosePayload)
        );
    }

    #[test]
    fn code_and_reason() {
        let body = [0x03, 0xE8, b'b', b'y', b'e'];
        let expected = CloseFrame {
            code: 1000,
            reason: Bytes::from_static(b"bye"),
        };
        assert_eq!(parse_close_payload(&body), Ok(Some(expected.clone())));
        let zero_copy = parse_close_bytes(Bytes::copy_from_slice(&body));
        assert_eq!(zero_copy, Ok(Some(expected)));
        let bare = parse_close_payload(&[0x03, 0xE9]).unwrap().unwrap();
        assert_eq!((bare.code, bare.reason.len()), (1001, 0));
    }

    #[test]
    fn reserved_codes_are_rejected() {
        for code in [1005u16, 1006, 1015, 999, 5000] {
            let body = code.to_be_bytes();
            assert_eq!(
                parse_close_payload(&body),
                Err(ProtocolError::InvalidCloseCode(code))
            );
        }
    }

    #[test]
    fn reason_must_be_utf8() {
        let body = [0x03, 0xE8, 0xCE, 0xBA, 0xFF];
        assert_eq!(parse_close_payload(&body), Err(ProtocolError::InvalidUtf8));
        let body = [0x03, 0xE8, 0xCE];
        assert_eq!(parse_close_payload(&body), Err(ProtocolError::InvalidUtf8));
        assert_eq!(ProtocolError::InvalidUtf8.close_code(), 1007);
    }
}
