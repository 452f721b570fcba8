//! A token bucket: publish rates per connection, presence reads.

/// A token bucket: `rate` tokens per second, holding at most `burst`.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last_ms: u64,
}

impl TokenBucket {
    /// A full bucket; `rate == 0` means unlimited.
    pub fn new(rate: u32, burst: u32, now_ms: u64) -> Self {
        TokenBucket {
            rate: f64::from(rate),
            burst: f64::from(burst.max(1)),
            tokens: f64::from(burst.max(1)),
            last_ms: now_ms,
        }
    }

    /// Whether the bucket is full at `now_ms` (a fresh one is the same).
    pub fn is_full(&self, now_ms: u64) -> bool {
        let elapsed = now_ms.saturating_sub(self.last_ms) as f64 / 1000.0;
        self.rate == 0.0 || self.tokens + elapsed * self.rate >= self.burst
    }

    /// Takes one token; otherwise returns how many milliseconds until one
    /// is available.
    pub fn take(&mut self, now_ms: u64) -> Result<(), u64> {
        if self.rate == 0.0 {
            return Ok(());
        }
        let elapsed = now_ms.saturating_sub(self.last_ms) as f64 / 1000.0;
        self.last_ms = now_ms.max(self.last_ms);
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err((((1.0 - self.tokens) / self.rate) * 1000.0).ceil().max(1.0) as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_refills_at_its_rate() {
        let mut b = TokenBucket::new(10, 2, 0);
        assert!(b.take(0).is_ok() && b.take(0).is_ok());
        assert_eq!(b.take(0), Err(100));
        assert_eq!(b.take(50), Err(50));
        assert!(b.take(100).is_ok());
        let mut unlimited = TokenBucket::new(0, 0, 0);
        assert!((0..10_000).all(|_| unlimited.take(0).is_ok()));
    }
}
