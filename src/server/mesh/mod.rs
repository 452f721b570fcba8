//! The mesh between workers (`--workers N`): one bounded ring per ordered
//! pair of workers, a doorbell per worker, and what crosses them.
//!
//! - **One channel space.** Each channel has one owner, the worker its
//!   name hashes to ([`owner`]). A publish on another worker crosses to
//!   the owner ([`Hop::Publish`]); the owner fans it out to its own
//!   subscribers and sends it once to each other worker that has
//!   subscribers for the channel ([`Hop::Deliver`]), never once per
//!   subscriber. One sequencer per channel: every subscriber on every
//!   worker sees a channel's messages in the same order.
//! - **History.** A message the owner's history kept goes to *every*
//!   other worker with its position, for each worker's copy of the ring;
//!   a worker without a copy asks the owner ([`Hop::Locate`]). The design
//!   is `server::history::owner`'s.
//! - **Interest.** A worker tells a channel's owner when the channel
//!   gains its first or loses its last local subscriber
//!   ([`Hop::Interest`]); the owner answers ([`Hop::Answered`]) and the
//!   subscribe acknowledgements held meanwhile go out (the hub's interest
//!   log, as with Redis): a message published after a client's
//!   acknowledgement reaches it.
//! - **A full ring never blocks the sender.** What does not fit waits, in
//!   order, in the sender's overflow queue for that worker (every later
//!   hop to it too, until the queue is empty) and is sent on as the ring
//!   drains; its bytes count toward `--publish-backpressure`, so
//!   publishers are slowed, and nothing accepted is dropped.
//! - **Wake-ups.** A worker with nothing to do parks its inboxes and
//!   sleeps on its doorbell (one end of a socket pair in its runtime); a
//!   push that finds the receiver parked rings it: one byte, once per
//!   sleep, none while the receiver is busy.
//!
//! Sans the worker: this file moves hops and keeps the owner's interest
//! table; `server::fleet` drains the inboxes into the worker.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::ring::{self, Consumer, Producer, Pushed};

mod hop;

pub use hop::{Answer, Asked, Hop, Msg, Told};

/// The worker a channel belongs to, of `n`: FNV-1a of its name, the same
/// on every worker. A channel's presence events (`presence/{channel}`)
/// belong to the channel's owner, which keeps its members.
pub fn owner(channel: &str, n: usize) -> usize {
    let channel = channel
        .strip_prefix(crate::presence::EVENTS_PREFIX)
        .unwrap_or(channel);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in channel.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % n as u64) as usize
}

/// What a worker reports for the others' publishers to see (relaxed: a
/// hint for flow control, never for correctness).
#[derive(Default)]
pub struct Report {
    /// Its write backlog.
    backlog: AtomicUsize,
    /// A subscriber of its is over its bound.
    pressed: AtomicBool,
    /// Message bytes it sent to other workers that they have not taken
    /// yet (the receivers take them off).
    in_flight: AtomicUsize,
    /// It can deliver (its Redis link is up, in Redis mode): false until
    /// it says so, so a worker still starting is not counted ready.
    ready: AtomicBool,
}

/// One worker's ends of the mesh, made on the starting thread and moved
/// to the worker's.
pub struct Parts {
    me: usize,
    outboxes: Vec<Option<Producer<Hop>>>,
    inboxes: Vec<Consumer<Hop>>,
    bell: UnixStream,
    bells: Arc<[UnixStream]>,
    loads: Arc<[AtomicUsize]>,
    backlogs: Arc<[Report]>,
}

impl Parts {
    /// The worker these ends are for.
    pub fn me(&self) -> usize {
        self.me
    }

    /// How many workers there are.
    pub fn workers(&self) -> usize {
        self.outboxes.len()
    }
}

/// The rings, doorbells and load counters of `n` workers, each ring
/// holding `capacity` hops: one [`Parts`] per worker, in worker order.
pub fn build(n: usize, capacity: usize) -> io::Result<Vec<Parts>> {
    let mut outboxes: Vec<Vec<Option<Producer<Hop>>>> =
        (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
    let mut inboxes: Vec<Vec<Consumer<Hop>>> = (0..n).map(|_| Vec::new()).collect();
    for (from, out) in outboxes.iter_mut().enumerate() {
        for (to, slot) in out.iter_mut().enumerate().filter(|(to, _)| *to != from) {
            let (p, c) = ring::ring(capacity)
                .ok_or_else(|| io::Error::other("worker ring capacity out of range"))?;
            *slot = Some(p);
            inboxes[to].push(c);
        }
    }
    let mut rx = Vec::with_capacity(n);
    let mut tx = Vec::with_capacity(n);
    for _ in 0..n {
        let (r, t) = UnixStream::pair()?;
        r.set_nonblocking(true)?;
        t.set_nonblocking(true)?;
        rx.push(r);
        tx.push(t);
    }
    let bells: Arc<[UnixStream]> = tx.into();
    let loads: Arc<[AtomicUsize]> = (0..n).map(|_| AtomicUsize::new(0)).collect();
    let backlogs: Arc<[Report]> = (0..n).map(|_| Report::default()).collect();
    let parts = outboxes.into_iter().zip(inboxes).zip(rx).enumerate();
    Ok(parts
        .map(|(me, ((outboxes, inboxes), bell))| Parts {
            me,
            outboxes,
            inboxes,
            bell,
            bells: bells.clone(),
            loads: loads.clone(),
            backlogs: backlogs.clone(),
        })
        .collect())
}

/// The mesh's counters on one worker (`/stats`, `/metrics`).
#[derive(Debug, Default, Clone, Copy)]
pub struct MeshStats {
    /// Hops sent to other workers (through a ring or the overflow queue).
    pub hops_out: u64,
    /// Hops taken from this worker's inboxes.
    pub hops_in: u64,
    /// Hops that found their ring full and waited in the overflow queue.
    pub ring_full: u64,
    /// Doorbells rung (a receiver was asleep).
    pub wakes: u64,
    /// Connections handed to another worker.
    pub handed_over: u64,
}

/// A publish's deliveries as the workers report them.
#[derive(Default)]
struct Count {
    total: u64,
    answered: u32,
    /// Answers to wait for in all: known once the owner answered.
    expected: Option<u32>,
    waker: Option<Waker>,
}

/// The other workers' counters as they arrive.
#[derive(Default)]
struct Gather {
    got: Vec<(usize, Told)>,
    waker: Option<Waker>,
}

/// One worker's view of the mesh.
pub struct Mesh {
    me: usize,
    outboxes: RefCell<Vec<Option<Producer<Hop>>>>,
    /// Per receiver, hops that did not fit its ring, in order.
    overflow: RefCell<Vec<VecDeque<Hop>>>,
    overflow_bytes: Cell<usize>,
    pub(super) inboxes: RefCell<Vec<Consumer<Hop>>>,
    /// This worker's doorbell (read end), taken by the drain task.
    pub(super) bell: RefCell<Option<UnixStream>>,
    bells: Arc<[UnixStream]>,
    loads: Arc<[AtomicUsize]>,
    /// Each worker's write backlog as it last reported it.
    backlogs: Arc<[Report]>,
    /// For the channels this worker owns: which other workers have
    /// subscribers (a bit per worker).
    interested: RefCell<HashMap<Arc<str>, u64>>,
    /// Where the acceptor starts looking for the least loaded worker.
    next: Cell<usize>,
    /// Publishes whose deliveries are being counted, by id.
    counts: RefCell<HashMap<u64, Count>>,
    /// Counters being gathered from the other workers, by id.
    gathers: RefCell<HashMap<u64, Gather>>,
    next_gather: Cell<u64>,
    pub stats: Cell<MeshStats>,
}

impl Mesh {
    /// This worker's mesh, from its parts.
    pub fn new(parts: Parts) -> Mesh {
        let n = parts.outboxes.len();
        Mesh {
            me: parts.me,
            outboxes: RefCell::new(parts.outboxes),
            overflow: RefCell::new((0..n).map(|_| VecDeque::new()).collect()),
            overflow_bytes: Cell::new(0),
            inboxes: RefCell::new(parts.inboxes),
            bell: RefCell::new(Some(parts.bell)),
            bells: parts.bells,
            loads: parts.loads,
            backlogs: parts.backlogs,
            interested: RefCell::default(),
            next: Cell::new(0),
            counts: RefCell::default(),
            gathers: RefCell::default(),
            next_gather: Cell::new(0),
            stats: Cell::default(),
        }
    }

    /// This worker's index.
    pub fn me(&self) -> usize {
        self.me
    }

    /// How many workers there are.
    pub fn workers(&self) -> usize {
        self.bells.len()
    }

    /// Every worker, a bit each.
    pub fn all(&self) -> u64 {
        u64::MAX >> (64 - self.workers())
    }

    /// The owner of `channel`.
    pub fn owner(&self, channel: &str) -> usize {
        owner(channel, self.workers())
    }

    fn count(&self, f: impl FnOnce(&mut MeshStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }

    /// Sends `hop` to worker `to` (not this one): through its ring, or
    /// its overflow queue when the ring is full or the queue is not empty
    /// (order is kept). Never blocks.
    pub fn send(&self, to: usize, hop: Hop) {
        debug_assert_ne!(to, self.me);
        self.count(|s| s.hops_out += 1);
        if let Some(bytes) = hop.message_bytes() {
            self.backlogs[self.me]
                .in_flight
                .fetch_add(bytes, Ordering::Relaxed);
        }
        let mut overflow = self.overflow.borrow_mut();
        if !overflow[to].is_empty() {
            self.overflow_bytes
                .set(self.overflow_bytes.get() + hop.size());
            overflow[to].push_back(hop);
            return;
        }
        let mut outboxes = self.outboxes.borrow_mut();
        let ring = outboxes[to].as_mut().expect("a ring to every other worker");
        match ring.push(hop) {
            Ok(Pushed::Done) => {}
            Ok(Pushed::Wake) => self.ring_bell(to),
            Err(hop) => {
                self.count(|s| s.ring_full += 1);
                self.overflow_bytes
                    .set(self.overflow_bytes.get() + hop.size());
                overflow[to].push_back(hop);
                // This worker's drain task retries the ring: wake it if
                // it sleeps.
                self.ring_bell(self.me);
            }
        }
    }

    /// Moves what waits in the overflow queues into the rings that have
    /// room again; `true` when something still waits.
    pub fn flush_overflow(&self) -> bool {
        let mut overflow = self.overflow.borrow_mut();
        let mut outboxes = self.outboxes.borrow_mut();
        let mut left = false;
        for (to, queue) in overflow.iter_mut().enumerate() {
            let Some(ring) = outboxes[to].as_mut() else {
                continue;
            };
            while let Some(hop) = queue.pop_front() {
                let size = hop.size();
                match ring.push(hop) {
                    Ok(pushed) => {
                        self.overflow_bytes.set(self.overflow_bytes.get() - size);
                        if pushed == Pushed::Wake {
                            self.ring_bell(to);
                        }
                    }
                    Err(hop) => {
                        queue.push_front(hop);
                        left = true;
                        break;
                    }
                }
            }
        }
        left
    }

    /// Bytes waiting in the overflow queues.
    pub fn overflow_bytes(&self) -> usize {
        self.overflow_bytes.get()
    }

    fn ring_bell(&self, to: usize) {
        self.count(|s| s.wakes += 1);
        // A full socket buffer already holds a wake-up: nothing is lost.
        let _ = (&self.bells[to]).write(&[1]);
    }

    /// Records worker `from`'s interest in `channel` (owned here).
    pub fn set_interest(&self, from: usize, channel: Arc<str>, on: bool) {
        let mut table = self.interested.borrow_mut();
        let bit = 1u64 << from;
        if on {
            *table.entry(channel).or_insert(0) |= bit;
        } else if let Some(bits) = table.get_mut(&channel) {
            *bits &= !bit;
            if *bits == 0 {
                table.remove(&channel);
            }
        }
    }

    /// The other workers with subscribers of `channel` (owned here).
    pub fn interested(&self, channel: &str) -> u64 {
        self.interested.borrow().get(channel).copied().unwrap_or(0)
    }

    /// How many channels this worker owns that have subscribers on some
    /// worker: its own (`local` lists this worker's channels) and those
    /// only other workers hear. Summed over the workers, each channel
    /// counts once.
    pub fn owned_channels<'a>(&self, local: impl Iterator<Item = &'a str>) -> usize {
        let interested = self.interested.borrow();
        let mut n = interested.len();
        for c in local {
            if self.owner(c) == self.me && !interested.contains_key(c) {
                n += 1;
            }
        }
        n
    }

    /// Reports this worker's write backlog and whether a subscriber of
    /// its is over its bound (after each batch from the rings, each check
    /// of a publisher's, and every sweeper tick): two relaxed stores.
    pub fn set_backlog(&self, bytes: usize, pressed: bool) {
        let r = &self.backlogs[self.me];
        r.backlog.store(bytes, Ordering::Relaxed);
        r.pressed.store(pressed, Ordering::Relaxed);
    }

    /// Says whether this worker can deliver (each tick).
    pub fn set_ready(&self, ready: bool) {
        self.backlogs[self.me].ready.store(ready, Ordering::Relaxed);
    }

    /// The first other worker that last said it cannot deliver (or has
    /// not said yet): `/readyz` is ready only when every worker is.
    pub fn unready_other(&self) -> Option<usize> {
        let all = self.backlogs.iter().enumerate();
        let mut others = all.filter(|(i, _)| *i != self.me);
        others
            .find(|(_, r)| !r.ready.load(Ordering::Relaxed))
            .map(|(i, _)| i)
    }

    fn others(&self) -> impl Iterator<Item = &Report> {
        let me = self.me;
        let all = self.backlogs.iter().enumerate();
        all.filter(move |(i, _)| *i != me).map(|(_, r)| r)
    }

    /// The largest backlog another worker reported: a publisher here is
    /// slowed when the workers its messages go to fall behind, as with
    /// one worker when its own subscribers do.
    pub fn others_backlog(&self) -> usize {
        let backlogs = self.others().map(|r| r.backlog.load(Ordering::Relaxed));
        backlogs.max().unwrap_or(0)
    }

    /// Whether another worker reported a subscriber over its bound.
    pub fn others_pressed(&self) -> bool {
        self.others().any(|r| r.pressed.load(Ordering::Relaxed))
    }

    /// The most message bytes any worker has sent that are not taken
    /// yet: the window a publisher may fill before a subscriber's
    /// pressure, wherever it is, can be seen (see `Worker::over_backlog`).
    pub fn most_in_flight(&self) -> usize {
        let all = self
            .backlogs
            .iter()
            .map(|r| r.in_flight.load(Ordering::Relaxed));
        all.max().unwrap_or(0)
    }

    /// Worker `from`'s messages worth `bytes` were taken here.
    pub fn taken(&self, from: usize, bytes: usize) {
        self.backlogs[from]
            .in_flight
            .fetch_sub(bytes, Ordering::Relaxed);
    }

    /// The worker whose ring is this worker's inbox `k` (inboxes are in
    /// sender order, this worker left out).
    pub fn sender_of(&self, k: usize) -> usize {
        if k < self.me {
            k
        } else {
            k + 1
        }
    }

    /// The least loaded worker (fewest connections), ties taken in turn.
    pub fn least_loaded(&self) -> usize {
        let n = self.workers();
        let start = self.next.get();
        let load = |i: usize| self.loads[i].load(Ordering::Relaxed);
        let best = (0..n).map(|k| (start + k) % n).min_by_key(|&i| load(i));
        let best = best.unwrap_or(self.me);
        self.next.set((best + 1) % n);
        best
    }

    /// A connection was handed to worker `at` (counted at once, so a
    /// burst of accepts spreads before the workers next report).
    pub fn load_one(&self, at: usize) {
        self.loads[at].fetch_add(1, Ordering::Relaxed);
    }

    /// This worker's load is `connections` (its sweeper, every tick:
    /// connections that ended come off).
    pub fn set_load(&self, connections: usize) {
        self.loads[self.me].store(connections, Ordering::Relaxed);
    }

    /// Counts a connection handed to another worker.
    pub fn handed_over(&self) {
        self.count(|s| s.handed_over += 1);
    }

    /// Counts hops taken from the inboxes.
    pub fn took(&self, n: usize) {
        self.count(|s| s.hops_in += n as u64);
    }

    /// Asks every other worker for `what`; the gathering's id.
    pub fn ask_all(&self, what: Asked) -> u64 {
        let id = self.next_gather.get();
        self.next_gather.set(id + 1);
        self.gathers.borrow_mut().insert(id, Gather::default());
        for to in (0..self.workers()).filter(|&to| to != self.me) {
            let from = self.me as u8;
            let what = what.clone();
            self.send(to, Hop::Ask { from, id, what });
        }
        id
    }

    /// Worker `worker` answered gathering `id` (dropped if it was given
    /// up).
    pub fn told(&self, id: u64, worker: usize, told: Told) {
        if let Some(g) = self.gathers.borrow_mut().get_mut(&id) {
            g.got.push((worker, told));
            if let Some(w) = g.waker.take() {
                w.wake();
            }
        }
    }

    /// Ready when every other worker answered gathering `id`.
    pub fn poll_gathered(&self, id: u64, cx: &mut Context<'_>) -> Poll<()> {
        let mut gathers = self.gathers.borrow_mut();
        let Some(g) = gathers.get_mut(&id) else {
            return Poll::Ready(());
        };
        if g.got.len() + 1 >= self.workers() {
            return Poll::Ready(());
        }
        g.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Ends gathering `id`: the answers that came.
    pub fn take_gathered(&self, id: u64) -> Vec<(usize, Told)> {
        let g = self.gathers.borrow_mut().remove(&id);
        g.map(|g| g.got).unwrap_or_default()
    }

    /// Starts counting a publish's deliveries: `total` made already,
    /// `expected` answers to come (`None`: the owner's answer says).
    pub fn count_start(&self, total: u64, expected: Option<u32>) -> u64 {
        let id = self.next_gather.get();
        self.next_gather.set(id + 1);
        let count = Count {
            total,
            expected,
            ..Count::default()
        };
        self.counts.borrow_mut().insert(id, count);
        id
    }

    /// An answer for count `id` (dropped if it was given up).
    pub fn counted(&self, id: u64, n: u64, more: Option<u32>) {
        let mut counts = self.counts.borrow_mut();
        let Some(c) = counts.get_mut(&id) else {
            return;
        };
        c.total += n;
        c.answered += 1;
        if let Some(k) = more {
            c.expected = Some(1 + k);
        }
        if c.expected.is_some_and(|e| c.answered >= e) {
            if let Some(w) = c.waker.take() {
                w.wake();
            }
        }
    }

    /// Ready when every answer of count `id` arrived.
    pub fn poll_count(&self, id: u64, cx: &mut Context<'_>) -> Poll<()> {
        let mut counts = self.counts.borrow_mut();
        let Some(c) = counts.get_mut(&id) else {
            return Poll::Ready(());
        };
        if c.expected.is_some_and(|e| c.answered >= e) {
            return Poll::Ready(());
        }
        c.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Ends count `id`: the deliveries counted.
    pub fn count_end(&self, id: u64) -> u64 {
        let c = self.counts.borrow_mut().remove(&id);
        c.map_or(0, |c| c.total)
    }
}
