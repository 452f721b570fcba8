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

/// A URL as it may be shown in an error or a log line: the password in its
/// userinfo (`scheme://user:password@host`) replaced by `***`. Everything
/// before the last `@` counts as userinfo, so an unencoded `/` or `@` in a
/// password errs towards masking more, never less.
pub fn mask_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // `user:password@host:port,...` (`--redis-cluster` without a scheme).
        return match url.rfind('@') {
            Some(at) => format!("***@{}", &url[at + 1..]),
            None => url.to_string(),
        };
    };
    let Some(at) = rest.rfind('@') else {
        return url.to_string();
    };
    let userinfo = &rest[..at];
    let user = match userinfo.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None => "***".to_string(),
    };
    format!("{scheme}://{user}@{}", &rest[at + 1..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_passwords() {
        assert_eq!(mask_url("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(mask_url("redis://:pw@h"), "redis://:***@h");
        assert_eq!(mask_url("redis://pw@h"), "redis://***@h");
        assert_eq!(mask_url("redis://u:p/w@x@h:1"), "redis://u:***@h:1");
        assert_eq!(mask_url("redis://h:1"), "redis://h:1");
        assert_eq!(mask_url("u:pw@h:1,h:2"), "***@h:1,h:2");
        assert_eq!(mask_url("not a url"), "not a url");
        assert_eq!(format!("{:?}", Secret::new("k")), "***");
    }
}
