//! The embedded store: encoded entries with expiry times, bounded in bytes,
//! least-recently-used first out.
//!
//! A slab of nodes linked into a recency list plus a key → slot map: every
//! operation is O(1) except prefix removal, which walks the entries. Time is
//! passed in, so the store is plain data and its tests need no clock.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use slab::Slab;

/// Bytes charged per entry on top of its key and value: the node, the map
/// slot and the shared key's header, rounded up.
pub const ENTRY_OVERHEAD: usize = 96;

struct Node {
    key: Arc<[u8]>,
    value: Bytes,
    expires_ms: u64,
    /// Towards the most recently used end.
    newer: Option<usize>,
    /// Towards the least recently used end.
    older: Option<usize>,
}

/// An LRU map from keys to encoded entries, at most `max_bytes` in total.
pub struct MemoryStore {
    map: HashMap<Arc<[u8]>, usize>,
    nodes: Slab<Node>,
    newest: Option<usize>,
    oldest: Option<usize>,
    bytes: usize,
    max_bytes: usize,
}

fn cost(key: &[u8], value: &Bytes) -> usize {
    key.len()
        .saturating_add(value.len())
        .saturating_add(ENTRY_OVERHEAD)
}

impl MemoryStore {
    /// An empty store holding at most `max_bytes` (keys, values, overhead).
    pub fn new(max_bytes: usize) -> Self {
        MemoryStore {
            map: HashMap::new(),
            nodes: Slab::new(),
            newest: None,
            oldest: None,
            bytes: 0,
            max_bytes,
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Entries held (expired ones count until touched or evicted).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The value under `key`, unless it expired (then it is dropped); a hit
    /// becomes the most recently used entry.
    pub fn get(&mut self, key: &[u8], now_ms: u64) -> Option<Bytes> {
        let slot = *self.map.get(key)?;
        if self.nodes[slot].expires_ms <= now_ms {
            self.remove_slot(slot);
            return None;
        }
        self.unlink(slot);
        self.push_newest(slot);
        Some(self.nodes[slot].value.clone())
    }

    /// Stores `value` for `ttl_ms`, evicting the least recently used
    /// entries to make room. An entry larger than the whole store is not
    /// stored (and replaces nothing: an older value under `key` is removed,
    /// so a lookup never sees a version older than the last store).
    /// Returns whether it was stored.
    pub fn set(&mut self, key: &[u8], value: Bytes, ttl_ms: u64, now_ms: u64) -> bool {
        self.remove(key);
        let need = cost(key, &value);
        if need > self.max_bytes || ttl_ms == 0 {
            return false;
        }
        while self.bytes + need > self.max_bytes {
            match self.oldest {
                Some(slot) => self.remove_slot(slot),
                None => break,
            }
        }
        let key: Arc<[u8]> = key.into();
        let slot = self.nodes.insert(Node {
            key: key.clone(),
            value,
            expires_ms: now_ms.saturating_add(ttl_ms),
            newer: None,
            older: None,
        });
        self.push_newest(slot);
        self.map.insert(key, slot);
        self.bytes += need;
        true
    }

    /// Removes `key`; returns whether it was there.
    pub fn remove(&mut self, key: &[u8]) -> bool {
        match self.map.get(key) {
            Some(&slot) => {
                self.remove_slot(slot);
                true
            }
            None => false,
        }
    }

    /// Removes at most `max` entries whose key starts with `prefix`;
    /// returns how many, and whether none are left.
    pub fn remove_prefix(&mut self, prefix: &[u8], max: usize) -> (usize, bool) {
        let slots: Vec<usize> = self
            .map
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, &s)| s)
            .take(max.saturating_add(1))
            .collect();
        let complete = slots.len() <= max;
        let n = slots.len().min(max);
        for &slot in &slots[..n] {
            self.remove_slot(slot);
        }
        (n, complete)
    }

    fn remove_slot(&mut self, slot: usize) {
        self.unlink(slot);
        let node = self.nodes.remove(slot);
        self.map.remove(&node.key);
        self.bytes -= cost(&node.key, &node.value);
    }

    fn unlink(&mut self, slot: usize) {
        let (newer, older) = (self.nodes[slot].newer, self.nodes[slot].older);
        match newer {
            Some(n) => self.nodes[n].older = older,
            None => self.newest = older,
        }
        match older {
            Some(o) => self.nodes[o].newer = newer,
            None => self.oldest = newer,
        }
        self.nodes[slot].newer = None;
        self.nodes[slot].older = None;
    }

    fn push_newest(&mut self, slot: usize) {
        self.nodes[slot].older = self.newest;
        if let Some(n) = self.newest {
            self.nodes[n].newer = Some(slot);
        }
        self.newest = Some(slot);
        if self.oldest.is_none() {
            self.oldest = Some(slot);
        }
    }

    #[cfg(test)]
    fn order(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut at = self.newest;
        while let Some(s) = at {
            out.push(self.nodes[s].key.to_vec());
            at = self.nodes[s].older;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    #[test]
    fn hits_refresh_recency_and_the_oldest_is_evicted() {
        let per = cost(b"a", &v(100));
        let mut s = MemoryStore::new(per * 3);
        for k in [b"a", b"b", b"c"] {
            assert!(s.set(k, v(100), 1000, 0));
        }
        assert!(s.get(b"a", 1).is_some());
        assert_eq!(s.order(), vec![b"a".to_vec(), b"c".to_vec(), b"b".to_vec()]);
        assert!(s.set(b"d", v(100), 1000, 1));
        assert!(s.get(b"b", 2).is_none(), "b was least recently used");
        assert_eq!(s.len(), 3);
        assert_eq!(s.bytes(), per * 3);
    }

    #[test]
    fn expiry_is_checked_on_read() {
        let mut s = MemoryStore::new(1 << 20);
        s.set(b"k", v(1), 100, 1000);
        assert!(s.get(b"k", 1099).is_some());
        assert!(s.get(b"k", 1100).is_none());
        assert!(s.is_empty());
        assert_eq!(s.bytes(), 0);
        assert!(!s.set(b"k", v(1), 0, 0), "ttl 0 is not stored");
    }

    #[test]
    fn replacing_accounts_bytes_and_oversized_values_are_refused() {
        let mut s = MemoryStore::new(1000);
        assert!(s.set(b"k", v(10), 100, 0));
        assert!(s.set(b"k", v(20), 100, 0));
        assert_eq!(s.bytes(), cost(b"k", &v(20)));
        assert!(!s.set(b"k", v(2000), 100, 0));
        assert!(s.get(b"k", 0).is_none(), "the older value is gone too");
        assert_eq!(s.bytes(), 0);
        // One large entry evicts as many as needed.
        for i in 0..5u8 {
            s.set(&[i], v(50), 100, 0);
        }
        assert!(s.set(b"big", v(1000 - ENTRY_OVERHEAD - 3), 100, 0));
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn prefix_removal_is_bounded() {
        let mut s = MemoryStore::new(1 << 20);
        for i in 0..10 {
            s.set(format!("GET /api/{i}").as_bytes(), v(1), 100, 0);
        }
        s.set(b"GET /other", v(1), 100, 0);
        assert_eq!(s.remove_prefix(b"GET /api/", 4), (4, false));
        assert_eq!(s.remove_prefix(b"GET /api/", 100), (6, true));
        assert_eq!(s.len(), 1);
        assert_eq!(s.remove_prefix(b"GET /api/", 100), (0, true));
    }

    #[test]
    fn the_list_stays_consistent_under_churn() {
        let mut s = MemoryStore::new(ENTRY_OVERHEAD * 8 + 64);
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for step in 0..5000u64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let k = [(rng % 16) as u8];
            match rng % 3 {
                0 => {
                    s.set(&k, v((rng % 8) as usize), 50, step);
                }
                1 => {
                    s.get(&k, step);
                }
                _ => {
                    s.remove(&k);
                }
            }
            let order = s.order();
            assert_eq!(order.len(), s.len());
            let sum: usize = order
                .iter()
                .map(|k| cost(k, &s.nodes[s.map[&k[..]]].value))
                .sum();
            assert_eq!(sum, s.bytes());
            assert!(s.bytes() <= s.max_bytes);
        }
    }
}
