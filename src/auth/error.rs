//! Why a connection token is refused: one variant per rule, each with
//! the short reason sent with the 401.

use std::fmt;

/// Why a connection token was refused (→ 401).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenError {
    /// No token in the query or `Authorization` header.
    Missing,
    /// Not three base64url parts, bad JSON, or too long.
    Malformed,
    /// An `alg` no configured key accepts (`none`, HS256 without
    /// `--token-secret`, RS256 without an RSA key, …).
    UnsupportedAlgorithm,
    /// The `kid` names no configured key of the `alg`'s family, or there
    /// are several and the token names none.
    UnknownKey,
    /// The signature does not match.
    BadSignature,
    /// `exp` is missing or in the past.
    Expired,
    /// `nbf` is in the future.
    NotYetValid,
    /// `--token-audience` is set and `aud` does not name it.
    WrongAudience,
    /// `--token-issuer` is set and `iss` is not it.
    WrongIssuer,
    /// `info` is not a JSON object of at most `MAX_INFO` bytes.
    BadInfo,
    /// `--token-user-claim` is set and the token has no such string claim.
    NoUser,
    /// A `filters` claim that is not an object of channel patterns to
    /// valid tag filters.
    BadFilter,
}

impl TokenError {
    /// The short reason sent with the 401 (never the token itself).
    pub fn message(self) -> &'static str {
        match self {
            TokenError::Missing => "missing token",
            TokenError::Malformed => "malformed token",
            TokenError::UnsupportedAlgorithm => {
                "token algorithm not accepted by any configured key"
            }
            TokenError::UnknownKey => "token kid names no configured key",
            TokenError::BadSignature => "invalid token signature",
            TokenError::Expired => "token expired or without exp",
            TokenError::NotYetValid => "token not valid yet (nbf)",
            TokenError::WrongAudience => "token audience does not match",
            TokenError::WrongIssuer => "token issuer does not match",
            TokenError::BadInfo => "token info must be a JSON object of at most 1 KiB",
            TokenError::NoUser => "token lacks the user claim (--token-user-claim)",
            TokenError::BadFilter => "token filters must map channel patterns to valid tag filters",
        }
    }
}

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}
