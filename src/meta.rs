//! What a publication carries besides its bytes, sans-I/O: its tags
//! (`crate::filter`, what filters select on), its latest-value key (a
//! conflated channel keeps the newest message per key in a subscriber's
//! queue), whether it may be sent as a delta (`crate::delta`) and its
//! idempotency key (an outbox row's: a copy published again carries the
//! same, and clients drop it). One per publication, shared by reference
//! count wherever the message goes: the fan-out, the other workers,
//! history, Redis.

use serde_json::Value;

use crate::filter::{FilterError, Tags};

/// Longest latest-value key, in bytes.
pub const MAX_KEY: usize = 128;
/// Longest idempotency key, in bytes.
pub const MAX_ID: usize = 128;

/// A publication's tags, key, delta wish and idempotency key (at least
/// one of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    tags: Option<Tags>,
    key: Option<Box<str>>,
    delta: bool,
    /// The idempotency key: a copy published again (an outbox row after
    /// a crash) carries the same one, and clients drop the copy.
    id: Option<Box<str>>,
    /// `{"delta":true,"id":…,"key":…,"tags":{…}}`: what Redis carries
    /// (written once).
    wire: String,
    /// What the JSON protocol's message frame shows of it, written once:
    /// `"idempotency_key":…,"tags":{…},` (empty: nothing).
    head: String,
}

impl Meta {
    /// The meta of a publication with `tags` and `key` that asks (with
    /// `delta`) to be sent as a delta where it can; `None` when it has
    /// none of them (no tags, or none, no key, no delta). A key is 1 to
    /// [`MAX_KEY`] bytes.
    pub fn new(
        tags: Option<Tags>,
        key: Option<String>,
        delta: bool,
    ) -> Result<Option<Meta>, FilterError> {
        Meta::with_id(tags, key, delta, None)
    }

    /// [`Meta::new`] with an idempotency key (1 to [`MAX_ID`] bytes).
    pub fn with_id(
        tags: Option<Tags>,
        key: Option<String>,
        delta: bool,
        id: Option<String>,
    ) -> Result<Option<Meta>, FilterError> {
        let tags = tags.filter(|t| !t.is_empty());
        if let Some(k) = &key {
            if k.is_empty() || k.len() > MAX_KEY {
                return Err(FilterError::TooLarge("a key must be 1 to 128 bytes"));
            }
        }
        if let Some(i) = &id {
            if i.is_empty() || i.len() > MAX_ID {
                return Err(FilterError::TooLarge(
                    "an idempotency key must be 1 to 128 bytes",
                ));
            }
        }
        if tags.is_none() && key.is_none() && !delta && id.is_none() {
            return Ok(None);
        }
        let mut wire = serde_json::Map::new();
        if delta {
            wire.insert("delta".into(), Value::Bool(true));
        }
        if let Some(i) = &id {
            wire.insert("id".into(), Value::from(i.as_str()));
        }
        if let Some(k) = &key {
            wire.insert("key".into(), Value::from(k.as_str()));
        }
        if let Some(t) = &tags {
            wire.insert("tags".into(), t.to_json());
        }
        let wire = Value::Object(wire).to_string();
        let mut head = String::new();
        if let Some(i) = &id {
            let quoted = serde_json::to_string(i).expect("strings serialize");
            head.push_str(&format!("\"idempotency_key\":{quoted},"));
        }
        if let Some(t) = &tags {
            // Tags are JSON already (`Tags::json`: an object of strings).
            head.push_str(&format!("\"tags\":{},", t.json()));
        }
        Ok(Some(Meta {
            tags,
            key: key.map(String::into_boxed_str),
            delta,
            id: id.map(String::into_boxed_str),
            wire,
            head,
        }))
    }

    /// Reads what [`Meta::wire`] wrote, within the same bounds.
    pub fn from_wire(text: &[u8]) -> Result<Meta, FilterError> {
        let v: Value = serde_json::from_slice(text).map_err(|_| FilterError::Shape("not JSON"))?;
        let obj = v
            .as_object()
            .ok_or(FilterError::Shape("meta must be an object"))?;
        let tags = obj.get("tags").map(Tags::from_json).transpose()?;
        let key = match obj.get("key") {
            None => None,
            Some(Value::String(k)) => Some(k.clone()),
            Some(_) => return Err(FilterError::Shape("a key must be a string")),
        };
        let delta = match obj.get("delta") {
            None => false,
            Some(Value::Bool(d)) => *d,
            Some(_) => return Err(FilterError::Shape("delta must be a boolean")),
        };
        let id = match obj.get("id") {
            None => None,
            Some(Value::String(i)) => Some(i.clone()),
            Some(_) => return Err(FilterError::Shape("an id must be a string")),
        };
        Meta::with_id(tags, key, delta, id)?.ok_or(FilterError::Shape("empty meta"))
    }

    /// Its tags, if it has any.
    pub fn tags(&self) -> Option<&Tags> {
        self.tags.as_ref()
    }

    /// Its latest-value key, if it has one.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// Whether the publish asked to be sent as a delta (where the
    /// namespace allows deltas and a subscriber has the base).
    pub fn delta(&self) -> bool {
        self.delta
    }

    /// Its idempotency key, if it has one.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The fields the JSON protocol's message frame shows (each followed
    /// by a comma; empty when none).
    pub fn head(&self) -> &str {
        &self.head
    }

    /// The compact JSON form carried through Redis.
    pub fn wire(&self) -> &str {
        &self.wire
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips_and_keeps_its_bounds() {
        let tags = Tags::parse(br#"{"sym":"BTC"}"#).unwrap();
        let m = Meta::new(Some(tags), Some("BTC".into()), false)
            .unwrap()
            .unwrap();
        assert_eq!(m.wire(), r#"{"key":"BTC","tags":{"sym":"BTC"}}"#);
        assert_eq!(Meta::from_wire(m.wire().as_bytes()).unwrap(), m);
        assert_eq!(Meta::new(Some(Tags::default()), None, false).unwrap(), None);
        let only_key = Meta::new(None, Some("k".into()), false).unwrap().unwrap();
        assert_eq!((only_key.tags(), only_key.key()), (None, Some("k")));
        let delta = Meta::new(None, None, true).unwrap().unwrap();
        assert_eq!(delta.wire(), r#"{"delta":true}"#);
        assert_eq!(Meta::from_wire(delta.wire().as_bytes()).unwrap(), delta);
        assert!(Meta::new(None, Some(String::new()), false).is_err());
        let id = Meta::with_id(None, None, false, Some("orders:7".into()))
            .unwrap()
            .unwrap();
        assert_eq!(
            (id.wire(), id.id()),
            (r#"{"id":"orders:7"}"#, Some("orders:7"))
        );
        assert_eq!(id.head(), r#""idempotency_key":"orders:7","#);
        assert_eq!(Meta::from_wire(id.wire().as_bytes()).unwrap(), id);
        assert!(Meta::with_id(None, None, false, Some("i".repeat(129))).is_err());
        assert!(Meta::with_id(None, None, false, Some(String::new())).is_err());
        assert!(Meta::new(None, Some("k".repeat(129)), false).is_err());
        for bad in [
            &b"{}"[..],
            b"[1]",
            br#"{"key":1}"#,
            br#"{"tags":{"a":1}}"#,
            br#"{"delta":1}"#,
            br#"{"delta":false}"#,
            br#"{"id":7}"#,
            b"{",
        ] {
            assert!(Meta::from_wire(bad).is_err(), "{bad:?}");
        }
    }
}
