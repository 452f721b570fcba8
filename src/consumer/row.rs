//! An outbox row checked for publishing: a channel name corecast serves,
//! data within `--max-message-size`, tags that are a flat JSON object of
//! strings within the filter bounds. A row that is none of these is
//! poison: moved to the dead-letter table with the reason, never retried.

use crate::channel::valid_channel_name;
use crate::filter::Tags;

/// A row as read: its id, channel, data (`jsonb` or `text`, as text) and
/// tags (`jsonb`, as text; NULL: none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub id: i64,
    pub channel: Option<String>,
    pub data: Option<String>,
    pub tags: Option<String>,
}

/// Why a row cannot be published (what the dead-letter table records).
pub fn check(row: &Row, max_message: usize) -> Result<(), String> {
    let channel = row.channel.as_deref().ok_or("channel is NULL")?;
    let data = row.data.as_deref().ok_or("data is NULL")?;
    check_fields(channel, data, row.tags.as_deref(), max_message)
}

/// [`check`] of a publication's parts (a stream entry's fields).
pub fn check_fields(
    channel: &str,
    data: &str,
    tags: Option<&str>,
    max_message: usize,
) -> Result<(), String> {
    if !valid_channel_name(channel) {
        return Err(format!("invalid channel name {:?}", truncated(channel)));
    }
    if data.len() > max_message {
        return Err(format!(
            "data of {} bytes over --max-message-size ({max_message})",
            data.len()
        ));
    }
    if let Some(t) = tags {
        Tags::parse(t.as_bytes()).map_err(|e| format!("tags: {}", e.reason()))?;
    }
    Ok(())
}

fn truncated(s: &str) -> &str {
    let mut end = s.len().min(64);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(channel: &str, data: &str, tags: Option<&str>) -> Row {
        Row {
            id: 1,
            channel: Some(channel.into()),
            data: Some(data.into()),
            tags: tags.map(Into::into),
        }
    }

    #[test]
    fn poison_rows_are_named_and_good_ones_pass() {
        assert_eq!(check(&row("orders", r#"{"a":1}"#, None), 100), Ok(()));
        assert_eq!(check(&row("q", "1", Some(r#"{"sym":"BTC"}"#)), 100), Ok(()));
        let bad = [
            (row("bad channel", "x", None), "invalid channel name"),
            (row("c", &"x".repeat(101), None), "over --max-message-size"),
            (row("c", "x", Some("{not json")), "tags:"),
            (row("c", "x", Some(r#"{"a":1}"#)), "tags:"),
        ];
        for (r, why) in bad {
            let e = check(&r, 100).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
        let null = Row {
            channel: None,
            ..row("c", "x", None)
        };
        assert_eq!(check(&null, 100).unwrap_err(), "channel is NULL");
    }
}
