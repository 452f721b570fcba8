//! Channel-name rules, shared by every layer that reads a channel name
//! (the URL router, the control protocol, the configuration, the hub).
//! A leaf: imports nothing from the crate.

/// Longest channel name accepted.
pub const MAX_CHANNEL_NAME: usize = 128;

/// Channel names: 1–128 bytes of `A-Z a-z 0-9 - _ . : @ #`.
///
/// The charset keeps names safe in log lines, JSON and Redis keys
/// without escaping, and in URLs but for `#` (a user channel's marker,
/// `notifications:#42`: written `%23` in a URL path).
pub fn valid_channel_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_CHANNEL_NAME
        && name.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'@' | b'#')
        })
}

/// Whether messages on hub channel `name` are kept in history (in
/// memory or in Redis streams). Only channels a native client can name
/// and resume are: internal ones (`!status`) and other protocols'
/// (Pusher's `pusher/{app}/{name}`, which Pusher clients never read
/// back) would only spend the history budget and Redis memory.
pub fn keeps_history(name: &str) -> bool {
    !name.starts_with('!') && !name.starts_with("pusher/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_names_are_validated() {
        assert!(valid_channel_name("news.eu-1:room_2@x"));
        assert!(valid_channel_name(&"x".repeat(MAX_CHANNEL_NAME)));
        for bad in ["", "a b", "ä", "a/b", &"x".repeat(MAX_CHANNEL_NAME + 1)] {
            assert!(!valid_channel_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn only_native_channels_keep_history() {
        assert!(keeps_history("room-1"));
        assert!(!keeps_history("!status"));
        assert!(!keeps_history("pusher/1/private-room"));
    }
}
