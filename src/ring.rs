//! A bounded single-producer, single-consumer ring between two threads:
//! the cross-worker transport's building block (one ring per ordered pair
//! of workers). Sans-I/O: it moves values and says when the consumer
//! must be woken; the edge owns the wake-up (an eventfd) and the policy
//! for a full ring.
//!
//! - [`Producer::push`] never blocks: a full ring gives the value back
//!   (`Err`), so the sender's loop decides what happens to it (keeps it
//!   in a local overflow queue, counts it) instead of waiting on another
//!   thread.
//! - [`Consumer::drain`] takes up to a batch at a time, publishing its
//!   progress to the producer once per batch, not once per value.
//! - The wake-up handshake: a consumer about to sleep calls
//!   [`Consumer::park`], which announces it and re-checks the ring; a
//!   push that finds the announcement answers [`Pushed::Wake`], once.
//!   Both sides use sequentially consistent operations on the flag and
//!   the producer's index, so either the consumer sees the value or the
//!   producer sees the announcement: no value waits for a wake-up that
//!   never comes, and a busy consumer costs its producers no syscall.
//!
//! Each index is written by one side only and sits on its own cache line;
//! each side caches the other's index and reads the shared one only when
//! its cache says the ring is full (producer) or cannot fill the batch
//! (consumer).

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// The most values a ring holds: 2^20 (a larger request is refused at
/// construction; the workers' rings are far smaller).
pub const MAX_CAPACITY: usize = 1 << 20;

/// A value on its own cache line (and the next one's prefetch pair),
/// so the two sides' indexes never share one.
#[repr(align(128))]
struct Padded<T>(T);

struct Shared<T> {
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    mask: usize,
    /// The consumer's index: values below it were taken (written by the
    /// consumer only).
    head: Padded<AtomicUsize>,
    /// The producer's index: values below it were written (written by
    /// the producer only).
    tail: Padded<AtomicUsize>,
    /// The consumer announced it is going to sleep.
    parked: Padded<AtomicBool>,
}

// SAFETY: a slot is written only by the producer while it is outside
// `head..tail` (free), and read only by the consumer while it is inside
// (published with the `tail` store's Release, seen with the consumer's
// Acquire load); a slot is never reachable by both sides at once. Values
// cross threads, hence `T: Send`.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // Both ends are gone: no other thread can touch the slots.
        let (head, tail) = (*self.head.0.get_mut(), *self.tail.0.get_mut());
        for i in head..tail {
            // SAFETY: `head..tail` holds initialised values not taken yet,
            // each dropped once here.
            unsafe { (*self.slots[i & self.mask].get()).assume_init_drop() };
        }
    }
}

/// The sending end.
pub struct Producer<T> {
    ring: Arc<Shared<T>>,
    /// The next index to write (the shared `tail` trails it by nothing:
    /// it is published on every push).
    tail: usize,
    /// The consumer's index as last read.
    head: usize,
}

/// The receiving end.
pub struct Consumer<T> {
    ring: Arc<Shared<T>>,
    /// The next index to take.
    head: usize,
    /// The producer's index as last read.
    tail: usize,
}

/// What a successful push asks of the producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Nothing: the consumer is awake (or already woken).
    Done,
    /// The consumer announced it sleeps: wake it (once).
    Wake,
}

/// A ring of at least `capacity` values (rounded up to a power of two,
/// at most [`MAX_CAPACITY`]; `None` for 0 or more).
pub fn ring<T>(capacity: usize) -> Option<(Producer<T>, Consumer<T>)> {
    if capacity == 0 || capacity > MAX_CAPACITY {
        return None;
    }
    let n = capacity.next_power_of_two();
    let slots = (0..n)
        .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
        .collect();
    let ring = Arc::new(Shared {
        slots,
        mask: n - 1,
        head: Padded(AtomicUsize::new(0)),
        tail: Padded(AtomicUsize::new(0)),
        parked: Padded(AtomicBool::new(false)),
    });
    let producer = Producer {
        ring: ring.clone(),
        tail: 0,
        head: 0,
    };
    let consumer = Consumer {
        ring,
        head: 0,
        tail: 0,
    };
    Some((producer, consumer))
}

impl<T> Producer<T> {
    /// How many values the ring holds.
    pub fn capacity(&self) -> usize {
        self.ring.mask + 1
    }

    /// Appends `value`, or gives it back when the ring is full.
    pub fn push(&mut self, value: T) -> Result<Pushed, T> {
        let cap = self.capacity();
        if self.tail - self.head == cap {
            self.head = self.ring.head.0.load(Ordering::Acquire);
            if self.tail - self.head == cap {
                return Err(value);
            }
        }
        let slot = &self.ring.slots[self.tail & self.ring.mask];
        // SAFETY: `tail - head < cap`, so this slot is outside the
        // consumer's `head..tail`: only this producer may touch it, and
        // the consumer's Release store of `head` (read above with
        // Acquire) ordered its last read of the slot before this write.
        unsafe { (*slot.get()).write(value) };
        self.tail += 1;
        // SeqCst, not only Release: paired with `park`'s SeqCst store and
        // load, either the consumer sees this value or this push sees
        // its announcement below.
        self.ring.tail.0.store(self.tail, Ordering::SeqCst);
        if self.ring.parked.0.load(Ordering::SeqCst)
            && self.ring.parked.0.swap(false, Ordering::SeqCst)
        {
            return Ok(Pushed::Wake);
        }
        Ok(Pushed::Done)
    }

    /// Values in the ring as this side last knew (an upper bound).
    pub fn len_hint(&self) -> usize {
        self.tail - self.head
    }
}

impl<T> Consumer<T> {
    /// Takes up to `max` values, oldest first, handing each to `f`;
    /// returns how many. The producer learns of the freed slots once,
    /// after the batch.
    pub fn drain(&mut self, max: usize, mut f: impl FnMut(T)) -> usize {
        // The shared index is read only when the cached one cannot fill
        // the batch.
        if self.tail - self.head < max {
            self.tail = self.ring.tail.0.load(Ordering::Acquire);
        }
        let n = (self.tail - self.head).min(max);
        for _ in 0..n {
            let slot = &self.ring.slots[self.head & self.ring.mask];
            // SAFETY: `head < tail` (the producer's Release store of
            // `tail`, read with Acquire, published the write); the value
            // is taken once, and the slot is not reused before `head`
            // passes it below.
            let value = unsafe { (*slot.get()).assume_init_read() };
            self.head += 1;
            f(value);
        }
        if n > 0 {
            self.ring.head.0.store(self.head, Ordering::Release);
        }
        n
    }

    /// Announces that this consumer is going to sleep; `false` when a
    /// value arrived meanwhile (do not sleep: drain it). After `true`,
    /// the next push answers [`Pushed::Wake`]; a consumer woken for
    /// another reason calls [`Consumer::unpark`].
    pub fn park(&mut self) -> bool {
        self.ring.parked.0.store(true, Ordering::SeqCst);
        self.tail = self.ring.tail.0.load(Ordering::SeqCst);
        if self.tail != self.head {
            self.ring.parked.0.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Withdraws an announcement (`park`) that no push answered.
    pub fn unpark(&mut self) {
        self.ring.parked.0.store(false, Ordering::SeqCst);
    }

    /// Whether nothing is waiting, as far as this side can tell now.
    pub fn is_empty(&mut self) -> bool {
        if self.head == self.tail {
            self.tail = self.ring.tail.0.load(Ordering::Acquire);
        }
        self.head == self.tail
    }
}

#[cfg(test)]
mod tests;
