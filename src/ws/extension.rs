//! permessage-deflate negotiation, RFC 7692 sections 5 and 7.1 (sans-I/O).
//!
//! The server reads the client's offers from `Sec-WebSocket-Extensions`,
//! accepts the first one whose parameters it understands, and answers with
//! `server_no_context_takeover` always: every compressed message then
//! starts from an empty window, so one compressed frame serves every
//! subscriber of a broadcast. An offer with an unknown, duplicated or
//! malformed parameter is declined (the next offer is tried), never a
//! failed handshake (5: "the server ... MUST decline").

use std::fmt::Write as _;

/// The extension's registered name (7).
pub const PERMESSAGE_DEFLATE: &str = "permessage-deflate";

/// Most offers looked at; a longer list is a client trying to burn CPU.
const MAX_OFFERS: usize = 16;

/// What the server agreed to for one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Agreed {
    /// The largest LZ77 window (as a power of two, 8..=15) the server may
    /// use for its messages: `server_max_window_bits` from the offer, 15
    /// without it.
    pub server_max_window_bits: u8,
}

impl Agreed {
    /// The `Sec-WebSocket-Extensions` value of the `101` response.
    pub fn response_value(&self) -> String {
        let mut v = format!("{PERMESSAGE_DEFLATE}; server_no_context_takeover");
        if self.server_max_window_bits < 15 {
            // "the server MUST include [server_max_window_bits] in the
            // response with the same or smaller value" (7.1.2.1); we
            // answer with the same, so nothing is lost.
            let _ = write!(
                v,
                "; server_max_window_bits={}",
                self.server_max_window_bits
            );
        }
        v
    }
}

/// The parameters of one permessage-deflate offer (7.1).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Offer {
    server_no_context_takeover: bool,
    client_no_context_takeover: bool,
    server_max_window_bits: Option<u8>,
    /// `Some(None)`: offered without a value.
    client_max_window_bits: Option<Option<u8>>,
}

/// Picks the first acceptable permessage-deflate offer among the values of
/// every `Sec-WebSocket-Extensions` header (in order); `None` when there
/// is none (the connection goes on uncompressed).
pub fn negotiate<'a>(header_values: impl IntoIterator<Item = &'a [u8]>) -> Option<Agreed> {
    let mut seen = 0usize;
    for value in header_values {
        let text = std::str::from_utf8(value).ok()?;
        for element in split_outside_quotes(text, ',') {
            seen = seen.saturating_add(1);
            if seen > MAX_OFFERS {
                return None;
            }
            if let Some(agreed) = parse_offer(element).map(accept) {
                return Some(agreed);
            }
        }
    }
    None
}

/// The server's answer to an offer it understood. Client context takeover
/// is always allowed: the server keeps its inflater between messages
/// whatever the client said, which is right both for clients that honour
/// `client_no_context_takeover` and for those (some Safari versions) that
/// ignore it.
fn accept(offer: Offer) -> Agreed {
    Agreed {
        server_max_window_bits: offer.server_max_window_bits.unwrap_or(15),
    }
}

/// `Some(offer)` if `element` is a permessage-deflate offer whose every
/// parameter is known, valid and given once.
fn parse_offer(element: &str) -> Option<Offer> {
    let mut parts = split_outside_quotes(element, ';');
    let name = parts.next()?.trim();
    if !name.eq_ignore_ascii_case(PERMESSAGE_DEFLATE) {
        return None;
    }
    let mut offer = Offer::default();
    for param in parts {
        let (key, value) = match param.split_once('=') {
            Some((k, v)) => (k.trim(), Some(unquote(v.trim())?)),
            None => (param.trim(), None),
        };
        apply_param(&mut offer, key, value)?;
    }
    Some(offer)
}

/// Records one parameter; `None` declines the offer (unknown, duplicated,
/// or a value where none belongs or out of range, 7.1).
fn apply_param(offer: &mut Offer, key: &str, value: Option<&str>) -> Option<()> {
    match (key.to_ascii_lowercase().as_str(), value) {
        ("server_no_context_takeover", None) if !offer.server_no_context_takeover => {
            offer.server_no_context_takeover = true;
        }
        ("client_no_context_takeover", None) if !offer.client_no_context_takeover => {
            offer.client_no_context_takeover = true;
        }
        ("server_max_window_bits", Some(v)) if offer.server_max_window_bits.is_none() => {
            offer.server_max_window_bits = Some(window_bits(v)?);
        }
        ("client_max_window_bits", v) if offer.client_max_window_bits.is_none() => {
            offer.client_max_window_bits = Some(match v {
                Some(v) => Some(window_bits(v)?),
                None => None,
            });
        }
        _ => return None,
    }
    Some(())
}

/// "1*DIGIT ... without leading zeros ... in the range 8 to 15" (7.1.2).
fn window_bits(v: &str) -> Option<u8> {
    if v.is_empty() || v.starts_with('0') || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse::<u8>().ok().filter(|b| (8..=15).contains(b))
}

/// A token or a quoted-string's content (the only escapes a valid value
/// could need are none: values here are digits).
fn unquote(v: &str) -> Option<&str> {
    match v.strip_prefix('"') {
        Some(rest) => {
            let inner = rest.strip_suffix('"')?;
            (!inner.contains(['"', '\\'])).then_some(inner)
        }
        None => Some(v),
    }
}

/// Splits on `sep` where it is not inside a quoted-string.
fn split_outside_quotes(s: &str, sep: char) -> impl Iterator<Item = &str> {
    let mut quoted = false;
    s.split(move |c: char| {
        if c == '"' {
            quoted = !quoted;
        }
        c == sep && !quoted
    })
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn agree(offers: &[&str]) -> Option<Agreed> {
        negotiate(offers.iter().map(|s| s.as_bytes()))
    }

    fn bits(b: u8) -> Option<Agreed> {
        Some(Agreed {
            server_max_window_bits: b,
        })
    }

    #[test]
    fn browsers_offer_is_accepted() {
        // What Chromium and Firefox send.
        let got = agree(&["permessage-deflate; client_max_window_bits"]);
        assert_eq!(got, bits(15));
        assert_eq!(
            got.unwrap().response_value(),
            "permessage-deflate; server_no_context_takeover"
        );
        assert_eq!(agree(&["permessage-deflate"]), bits(15));
        assert_eq!(
            agree(&["PerMessage-Deflate ;Client_No_Context_Takeover"]),
            bits(15)
        );
    }

    #[test]
    fn server_window_bits_is_honoured_and_echoed() {
        let got = agree(&["permessage-deflate; server_max_window_bits=10"]).unwrap();
        assert_eq!(got.server_max_window_bits, 10);
        assert_eq!(
            got.response_value(),
            "permessage-deflate; server_no_context_takeover; server_max_window_bits=10"
        );
        assert_eq!(
            agree(&["permessage-deflate; server_max_window_bits=\"8\""]),
            bits(8)
        );
        assert_eq!(
            agree(&["permessage-deflate; server_max_window_bits=15"]),
            bits(15)
        );
    }

    #[test]
    fn bad_parameters_decline_the_offer_not_the_handshake() {
        for offer in [
            "permessage-deflate; foo",
            "permessage-deflate; foo=1",
            "permessage-deflate; server_no_context_takeover; server_no_context_takeover",
            "permessage-deflate; client_no_context_takeover; client_no_context_takeover",
            "permessage-deflate; server_max_window_bits=10; server_max_window_bits=10",
            "permessage-deflate; client_max_window_bits; client_max_window_bits=9",
            "permessage-deflate; server_max_window_bits",
            "permessage-deflate; server_max_window_bits=7",
            "permessage-deflate; server_max_window_bits=16",
            "permessage-deflate; server_max_window_bits=010",
            "permessage-deflate; server_max_window_bits=1a",
            "permessage-deflate; client_max_window_bits=0",
            "permessage-deflate; server_no_context_takeover=1",
            "permessage-deflate; server_max_window_bits=\"10",
            "x-webkit-deflate-frame",
        ] {
            assert_eq!(agree(&[offer]), None, "{offer}");
        }
    }

    #[test]
    fn a_declined_offer_falls_back_to_the_next() {
        let list = "permessage-deflate; bogus, permessage-deflate; server_max_window_bits=12";
        assert_eq!(agree(&[list]), bits(12));
        let two_headers = ["foo, permessage-deflate; bogus", "permessage-deflate"];
        assert_eq!(agree(&two_headers), bits(15));
    }

    #[test]
    fn endless_offer_lists_are_cut_short() {
        let mut list = "x, ".repeat(MAX_OFFERS);
        list.push_str("permessage-deflate");
        assert_eq!(agree(&[&list]), None);
    }

    #[test]
    fn non_utf8_header_is_no_offer() {
        assert_eq!(negotiate([&b"permessage-deflate\xff"[..]]), None);
    }
}
