//! What a publication carries besides its bytes, sans-I/O: its tags
//! (`crate::filter`, what filters select on), its latest-value key (a
//! conflated channel keeps the newest message per key in a subscriber's
//! queue) and whether it may be sent as a delta (`crate::delta`). One per publication, shared by reference count wherever the
//! message goes: the fan-out, the other workers, history, Redis.

use serde_json::Value;

use crate::filter::{FilterError, Tags};

/// Longest latest-value key, in bytes.
pub const MAX_KEY: usize = 128;

/// A publication's tags, key and delta wish (at least one of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    tags: Option<Tags>,
    key: Option<Box<str>>,
    delta: bool,
    /// `{"delta":true,"key":…,"tags":{…}}`: what Redis carries (written
    /// once).
    wire: String,
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
        let tags = tags.filter(|t| !t.is_empty());
        if let Some(k) = &key {
            if k.is_empty() || k.len() > MAX_KEY {
                return Err(FilterError::TooLarge("a key must be 1 to 128 bytes"));
            }
        }
        if tags.is_none() && key.is_none() && !delta {
            return Ok(None);
        }
        let mut wire = serde_json::Map::new();
        if delta {
            wire.insert("delta".into(), Value::Bool(true));
        }
        if let Some(k) = &key {
            wire.insert("key".into(), Value::from(k.as_str()));
        }
        if let Some(t) = &tags {
            wire.insert("tags".into(), t.to_json());
        }
        let wire = Value::Object(wire).to_string();
        let key = key.map(String::into_boxed_str);
        Ok(Some(Meta {
            tags,
            key,
            delta,
            wire,
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
        Meta::new(tags, key, delta)?.ok_or(FilterError::Shape("empty meta"))
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
        assert!(Meta::new(None, Some("k".repeat(129)), false).is_err());
        for bad in [
            &b"{}"[..],
            b"[1]",
            br#"{"key":1}"#,
            br#"{"tags":{"a":1}}"#,
            br#"{"delta":1}"#,
            br#"{"delta":false}"#,
            b"{",
        ] {
            assert!(Meta::from_wire(bad).is_err(), "{bad:?}");
        }
    }
}
