//! Secrets from the configuration (keys, tokens, passwords): a type that
//! never prints its value, so a secret cannot reach a log line or an error.

use std::fmt;

/// A secret from the configuration: printed as `***` by `Debug` so it never
/// reaches a log line.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, for the one comparison that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}
