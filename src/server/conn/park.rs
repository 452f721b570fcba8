//! Parked WebSockets: a connection quiet for `--park-after` (or with
//! nothing to do at its upgrade) gives up its reader and writer tasks and
//! its monoio socket; what is left is its
//! hub entry, its fd in the worker's epoll set and the few fields below
//! (issue 19: an idle connection should cost about its table entry, as in
//! servers that keep connections as plain state rather than tasks).
//!
//! It runs again ([`Parking::woken`]) when
//! - its socket is readable (input, end of stream, or the `shutdown(2)`
//!   with which deadlines end connections): the epoll set, watched by
//!   one io_uring poll on the epoll fd;
//! - the hub wakes its writer (something queued, a close, shutdown): the
//!   writer's waker slot holds a [`waker`] that names the connection, with
//!   no allocation.
//!
//! Sans-hub: this module knows connection ids and fds, not what is in
//! them; `websocket` parks and resumes (reading first what woke it: a peer
//! that left — end of stream, a lone close frame — is ended there,
//! without running the connection's tasks again).

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::poll_fn;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::pin::pin;
use std::rc::Rc;
use std::task::{Poll, RawWaker, RawWakerVTable, Waker};

use crate::auth::Grants;
use crate::hub::{ConnId, LocalWaker};

/// What a parked WebSocket keeps besides its hub entry. Its input
/// decoder is idle and its publish bucket full when it parks, so both are
/// made afresh when it resumes.
#[derive(Debug)]
pub struct Session {
    /// Path mode: the channel its messages are published to.
    pub channel: Option<Box<str>>,
    /// What its token (or key) grants.
    pub grants: Grants,
    /// The client address whose per-IP count it holds, if counted.
    pub release_ip: Option<IpAddr>,
    /// permessage-deflate was negotiated (its receiver had no inflater
    /// state yet when it parked: the client sent nothing compressed).
    pub deflate: bool,
}

/// A parked connection's socket and what its transport keeps besides
/// it (opaque here: a TLS session).
pub type Kept = (RawFd, Option<Rc<dyn Any>>);

impl Session {
    /// A Server-Sent Events stream's: its grants, and the address whose
    /// per-IP count it holds.
    pub fn stream(grants: Grants, release_ip: Option<IpAddr>) -> Session {
        Session {
            channel: None,
            grants,
            release_ip,
            deflate: false,
        }
    }
}

#[derive(Debug)]
struct Parked {
    fd: RawFd,
    session: Session,
}

/// The worker's parked connections and the epoll set their sockets wait in.
pub struct Parking {
    /// `--park-after` in milliseconds; 0 = parking off.
    after_ms: u64,
    epoll: Option<OwnedFd>,
    /// The poller could not watch the epoll set: nothing parks.
    broken: Cell<bool>,
    /// The worker is stopping: the poller ends ([`Parking::stop`]).
    stopped: Cell<bool>,
    /// The poller's handle on the epoll set.
    watch: RefCell<Option<Rc<EpollWatch>>>,
    /// Indexed by connection id (hub slab keys are dense and reused).
    slots: RefCell<Vec<Option<Parked>>>,
    /// What a parked connection's transport keeps besides its fd (a TLS
    /// session), opaque here; only connections with one have an entry,
    /// so a plain one pays nothing for it.
    kept: RefCell<HashMap<ConnId, Rc<dyn Any>>>,
    count: Cell<usize>,
    parks: Cell<u64>,
    unparks: Cell<u64>,
    /// `parks` at the last [`Parking::trim`].
    parks_trimmed: Cell<u64>,
}

impl Parking {
    /// Parking after `after_ms` of quiet (0 = never).
    pub fn new(after_ms: u64) -> io::Result<Parking> {
        let epoll = if after_ms == 0 {
            None
        } else {
            // SAFETY: epoll_create1 takes no pointers; on success the
            // returned fd is new and owned by nobody else.
            let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `fd` was just created and is owned here only.
            Some(unsafe { OwnedFd::from_raw_fd(fd) })
        };
        Ok(Parking {
            after_ms,
            epoll,
            broken: Cell::new(false),
            stopped: Cell::new(false),
            watch: RefCell::new(None),
            slots: RefCell::new(Vec::new()),
            kept: RefCell::new(HashMap::new()),
            count: Cell::new(0),
            parks: Cell::new(0),
            unparks: Cell::new(0),
            parks_trimmed: Cell::new(0),
        })
    }

    /// Quiet time before a connection parks; `None` when parking is off.
    pub fn after_ms(&self) -> Option<u64> {
        self.epoll
            .as_ref()
            .filter(|_| !self.broken.get())
            .map(|_| self.after_ms)
    }

    /// Ends the poller (at the end of shutdown): its pending poll on the
    /// epoll set must not outlive the worker's ring.
    pub fn stop(&self) {
        self.stopped.set(true);
        // The poller holds the last reference until it returns, inside the
        // runtime (its close goes through the ring).
        self.watch.borrow_mut().take();
        let poller = WOKEN.with(|q| q.poller.borrow_mut().take());
        if let Some(w) = poller {
            w.wake();
        }
    }

    /// Called every second: after parks, asks the allocator to give
    /// the freed tasks' pages back to the OS now. mimalloc purges freed
    /// pages lazily, on later allocator activity — which an idle server
    /// has none of, so its RSS would stay at its peak.
    /// At most once a second, and only after a second with parks in it.
    pub fn trim(&self) {
        if self.parks.get() == self.parks_trimmed.get() {
            return;
        }
        self.parks_trimmed.set(self.parks.get());
        // SAFETY: mi_collect takes no pointers; it collects this thread's
        // heap (a no-op if mimalloc is not the process's allocator).
        // Forced: pages freed within mimalloc's purge delay are returned
        // too (the next second may bring no allocator activity at all).
        unsafe { libmimalloc_sys::mi_collect(true) };
    }

    /// Whether [`Parking::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.stopped.get()
    }

    /// Connections parked now.
    pub fn count(&self) -> usize {
        self.count.get()
    }

    /// Parks and resumes so far.
    pub fn totals(&self) -> (u64, u64) {
        (self.parks.get(), self.unparks.get())
    }

    /// Adds `id`'s socket `fd` to the epoll set: the first step of
    /// parking it, before its socket is taken apart ([`Parking::store`]).
    pub fn watch(&self, id: ConnId, fd: RawFd) -> io::Result<()> {
        let Some(ep) = &self.epoll else {
            return Err(io::ErrorKind::Unsupported.into());
        };
        let mut ev = libc::epoll_event {
            // One-shot: reported once, then disarmed until taken out (a
            // level-triggered fd would be reported again by every
            // epoll_wait until its connection ran).
            events: (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLONESHOT) as u32,
            u64: id as u64,
        };
        // SAFETY: `ev` is a valid epoll_event for the call's duration (the
        // kernel copies it); both fds are open: the epoll set lives as long
        // as `self`, `fd` is the caller's open socket.
        if unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Parks `id` (its fd already watched): the socket `fd`, owned here
    /// from now on, what its session keeps, and what its transport keeps.
    pub fn store(&self, id: ConnId, (fd, kept): Kept, session: Session) {
        if let Some(kept) = kept {
            self.kept.borrow_mut().insert(id, kept);
        }
        let mut slots = self.slots.borrow_mut();
        if slots.len() <= id {
            slots.resize_with(id + 1, || None);
        }
        debug_assert!(slots[id].is_none(), "connection {id} parked twice");
        slots[id] = Some(Parked { fd, session });
        self.count.set(self.count.get() + 1);
        self.parks.set(self.parks.get() + 1);
    }

    /// Takes `id` out of the parked set (its fd leaves the epoll set):
    /// the socket (with what its transport kept) and session, owned by the
    /// caller from now on. `None` if it is not parked (a second wake for
    /// the same connection).
    pub fn take(&self, id: ConnId) -> Option<(Kept, Session)> {
        let parked = self.slots.borrow_mut().get_mut(id)?.take()?;
        let kept = self.kept.borrow_mut().remove(&id);
        self.count.set(self.count.get() - 1);
        self.unparks.set(self.unparks.get() + 1);
        if let Some(ep) = &self.epoll {
            // SAFETY: no pointer is read for EPOLL_CTL_DEL (a null event is
            // allowed since Linux 2.6.9); both fds are open.
            unsafe {
                libc::epoll_ctl(
                    ep.as_raw_fd(),
                    libc::EPOLL_CTL_DEL,
                    parked.fd,
                    std::ptr::null_mut(),
                );
            }
        }
        Some(((parked.fd, kept), parked.session))
    }

    /// Waits until parked connections must run again and appends their
    /// ids to `out` (possibly with repeats and ids no longer parked:
    /// [`Parking::take`] sorts them out). Never returns if parking is off.
    pub async fn woken(&self, out: &mut Vec<ConnId>) {
        let Some(ep) = &self.epoll else {
            return std::future::pending().await;
        };
        let Some(watch) = self.epoll_watch(ep) else {
            // Checked at boot, before anything can park.
            self.broken.set(true);
            crate::log!(Error, "parking disabled: cannot watch the epoll set");
            return std::future::pending().await;
        };
        while !self.stopped.get() {
            {
                let mut readable = pin!(watch.stream.readable(false));
                poll_fn(|cx| {
                    if self.stopped.get()
                        || readable.as_mut().poll(cx).is_ready()
                        || WOKEN.with(|q| q.ready(cx.waker()))
                    {
                        return Poll::Ready(());
                    }
                    Poll::Pending
                })
                .await;
            }
            WOKEN.with(|q| out.append(&mut q.ids.borrow_mut()));
            ready_ids(ep.as_raw_fd(), out);
            if !out.is_empty() || self.stopped.get() {
                return;
            }
        }
    }
}

impl Parking {
    /// The poller's handle on the epoll set, made once (`None` if it
    /// cannot be; [`Parking::stop`] drops it).
    fn epoll_watch(&self, ep: &OwnedFd) -> Option<Rc<EpollWatch>> {
        let mut slot = self.watch.borrow_mut();
        if slot.is_none() && !self.stopped.get() {
            *slot = EpollWatch::new(ep).map(Rc::new);
        }
        slot.clone()
    }
}

impl Drop for Parking {
    /// Closes the sockets of connections still parked when the worker
    /// ends (past the shutdown deadline): nobody else owns them.
    fn drop(&mut self) {
        for parked in self.slots.get_mut().iter().flatten() {
            // SAFETY: a parked fd is owned by its slot alone (see
            // `store`); it is closed once, here, as the slot goes.
            unsafe {
                libc::close(parked.fd);
            }
        }
    }
}

/// A monoio handle on (a duplicate of) the epoll fd, only ever used for
/// `readable()`: monoio 0.2 offers a readiness wait on its own socket
/// types only, and an epoll fd is readable exactly when one of its fds is
/// ready. It is never read or written.
struct EpollWatch {
    stream: monoio::net::UnixStream,
}

impl EpollWatch {
    fn new(ep: &OwnedFd) -> Option<EpollWatch> {
        let dup = ep.try_clone().ok()?;
        // SAFETY: `dup` is a fresh fd owned by nobody else; the stream
        // owns it from here and closes it when dropped. Only `readable()`
        // (a poll) is ever called on it.
        let std = unsafe { std::os::unix::net::UnixStream::from_raw_fd(dup.into_raw_fd()) };
        monoio::net::UnixStream::from_std(std)
            .ok()
            .map(|stream| EpollWatch { stream })
    }
}

/// Appends the ids of up to a batch of ready fds in the epoll set,
/// without blocking (more are reported by the next call).
fn ready_ids(epfd: RawFd, out: &mut Vec<ConnId>) {
    const BATCH: usize = 256;
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; BATCH];
    // SAFETY: `events` is a valid, exclusively borrowed array of BATCH
    // entries; the kernel writes at most that many; timeout 0 never blocks.
    let n = unsafe { libc::epoll_wait(epfd, events.as_mut_ptr(), BATCH as i32, 0) };
    if n > 0 {
        out.extend(events[..n as usize].iter().map(|e| e.u64 as ConnId));
    }
}

/// Ids woken through [`waker`] since the poller last looked, and the
/// poller's own waker.
#[derive(Default)]
struct Woken {
    ids: RefCell<Vec<ConnId>>,
    poller: RefCell<Option<Waker>>,
}

impl Woken {
    /// Whether ids are waiting; otherwise remembers `waker`.
    fn ready(&self, waker: &Waker) -> bool {
        if !self.ids.borrow().is_empty() {
            return true;
        }
        *self.poller.borrow_mut() = Some(waker.clone());
        false
    }

    fn push(&self, id: ConnId) {
        self.ids.borrow_mut().push(id);
        // Taken before waking: waking cannot call back into here, but
        // the borrow must not be held across foreign code anyway.
        let poller = self.poller.borrow_mut().take();
        if let Some(w) = poller {
            w.wake();
        }
    }
}

thread_local! {
    // Per worker thread: the hub, its wakers and the poller all live on
    // the worker's thread.
    static WOKEN: Woken = Woken::default();
}

/// A waker that, when woken, schedules parked connection `id` to run
/// again. The id is the waker's data (no allocation); waking pushes it to
/// the list of the thread that wakes it — which must be this worker's, so
/// it is handed out as a `!Send` [`LocalWaker`] the compiler keeps here.
pub fn waker(id: ConnId) -> LocalWaker {
    // SAFETY: the vtable's functions below never dereference the data
    // pointer — it is an integer (the connection id) — so any value is
    // valid for them; clone copies it, drop does nothing. (Which thread
    // wakes it matters for correctness, not memory safety: `LocalWaker`
    // is `!Send`.)
    LocalWaker::new(unsafe { Waker::from_raw(raw(id)) })
}

fn raw(id: ConnId) -> RawWaker {
    RawWaker::new(id as *const (), &VTABLE)
}

static VTABLE: RawWakerVTable = RawWakerVTable::new(
    |data| raw(data as ConnId),
    |data| WOKEN.with(|q| q.push(data as ConnId)),
    |data| WOKEN.with(|q| q.push(data as ConnId)),
    |_| {},
);
