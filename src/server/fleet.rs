//! A worker's side of the mesh (`--workers` above 1): the task that drains
//! its inboxes in batches into the worker (owner's publishes, deliveries,
//! interest and its answers, handed-over connections) and sleeps on its
//! doorbell when they are empty, and the task that tells channels' owners
//! what this worker's subscribers gained and lost.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::log;
use crate::server::conn::accept;
use crate::server::history::owner;
use crate::server::hooks::api as hooks_api;
use crate::server::mesh::{Asked, Hop, Mesh, Told};
use crate::server::presence::owner as presence_owner;
use crate::server::publish::sequence;
use crate::server::pusher::occupancy as pusher_occupancy;
use crate::server::pusher::owner as pusher_owner;
use crate::server::worker::Worker;

/// Hops taken from one inbox before the next inbox's turn (and, after a
/// round, the worker's other tasks').
const BATCH: usize = 64;

/// How often a worker with hops waiting in its overflow queue retries
/// the rings (a receiver freeing room does not ring back).
const OVERFLOW_RETRY: Duration = Duration::from_millis(1);

/// Starts the mesh's tasks on this worker. In Redis mode messages cross
/// workers through Redis (each worker is an instance), so the hub's
/// interest log is the Redis link's alone and owners learn nothing.
pub fn spawn(w: &Rc<Worker>) {
    monoio::spawn(drain(w.clone()));
    if w.redis.is_none() {
        monoio::spawn(interest(w.clone()));
    }
}

async fn drain(w: Rc<Worker>) {
    let mesh = w.mesh.get().expect("a worker of several has a mesh");
    let bell = mesh.bell.borrow_mut().take().expect("one drain task");
    let mut bell = match monoio::net::UnixStream::from_std(bell) {
        Ok(b) => b,
        Err(e) => {
            log!(Error, "worker doorbell unusable", error = e);
            std::process::abort();
        }
    };
    let mut buf = vec![0u8; 64];
    loop {
        let took = take_all(&w, mesh);
        let waiting = mesh.flush_overflow();
        if took > 0 {
            YieldNow(false).await;
            continue;
        }
        if waiting {
            monoio::time::sleep(OVERFLOW_RETRY).await;
            continue;
        }
        if park_all(mesh) {
            use monoio::io::AsyncReadRent;
            let (res, b) = bell.read(buf).await;
            buf = b;
            if let Err(e) = res {
                log!(Error, "worker doorbell failed", error = e);
                std::process::abort();
            }
        }
        for inbox in mesh.inboxes.borrow_mut().iter_mut() {
            inbox.unpark();
        }
    }
}

/// One batch from each inbox, applied; how many hops.
fn take_all(w: &Rc<Worker>, mesh: &Mesh) -> usize {
    let mut took = 0;
    let mut inboxes = mesh.inboxes.borrow_mut();
    for (k, inbox) in inboxes.iter_mut().enumerate() {
        let mut bytes = 0;
        took += inbox.drain(BATCH, |hop| {
            bytes += hop.message_bytes().unwrap_or(0);
            apply(w, mesh, hop)
        });
        if bytes > 0 {
            mesh.taken(mesh.sender_of(k), bytes);
        }
    }
    mesh.took(took);
    if took > 0 {
        let hub = w.hub.borrow();
        mesh.set_backlog(hub.backlog(), hub.pressed());
    }
    took
}

/// Announces every inbox asleep; `false` (nothing announced) when one
/// has hops after all.
fn park_all(mesh: &Mesh) -> bool {
    let mut inboxes = mesh.inboxes.borrow_mut();
    for i in 0..inboxes.len() {
        if !inboxes[i].park() {
            for inbox in &mut inboxes[..i] {
                inbox.unpark();
            }
            return false;
        }
    }
    true
}

fn apply(w: &Rc<Worker>, mesh: &Mesh, hop: Hop) {
    match hop {
        Hop::Publish(msg) => {
            let channel = msg.channel.clone();
            w.delivering(&channel, |hub| sequence(hub, mesh, msg));
        }
        Hop::Deliver(mut msg) => {
            let skip = msg.skip_at(mesh.me());
            let n = w.delivering(&msg.channel, |hub| {
                let seed = msg.frames.take().map(|f| *f);
                let at = msg.at.as_ref().map(|(e, o)| (&**e, *o));
                let m = (&*msg.channel, msg.opcode, &msg.payload, msg.meta.as_ref());
                hub.publish_relayed(m, skip, (seed, at))
            });
            match msg.ask {
                Some((at, id)) if at as usize == mesh.me() => mesh.counted(id, n as u64, None),
                Some((at, id)) => {
                    let n = n as u64;
                    mesh.send(at as usize, Hop::Counted { id, n, more: None });
                }
                None => {}
            }
        }
        Hop::Counted { id, n, more } => mesh.counted(id, n, more),
        Hop::Interest { from, channel, on } => {
            mesh.set_interest(from as usize, channel.clone(), on);
            pusher_owner::settle(w, &mut w.hub.borrow_mut(), &channel);
            mesh.send(from as usize, Hop::Answered(channel));
        }
        Hop::Answered(channel) => w.hub.borrow_mut().interest_answered(&channel),
        Hop::Ask { from, id, what } => {
            let told = match what {
                Asked::Counters => Told::Counters(Box::new(w.snapshot())),
                Asked::Channels(prefix) => Told::Channels(pusher_occupancy::here(w, &prefix)),
            };
            let worker = mesh.me() as u8;
            mesh.send(from as usize, Hop::Told { id, worker, told });
        }
        Hop::Told { id, worker, told } => mesh.told(id, worker as usize, told),
        Hop::Api { from, id, cmd } => {
            let answer = hooks_api::answer_here(w, id, &cmd);
            mesh.send(from as usize, answer);
        }
        Hop::Listed(answer) => w.api_waits.borrow_mut().answer(*answer),
        Hop::Locate {
            from,
            id,
            channel,
            create,
        } => {
            let at = owner::locate_here(&w.hub, &channel, create);
            mesh.send(from as usize, Hop::Located { id, channel, at });
        }
        Hop::Located { id, channel, at } => owner::located(w, id, &channel, at),
        hop @ (Hop::Presence { .. } | Hop::Members { .. }) => presence_owner::apply(w, mesh, hop),
        Hop::Answer { id, answer } => w.owner_waits.borrow_mut().answer(id, answer),
        Hop::Summary(inst) => w.heard_summary(*inst),
        Hop::CacheReleased(key) => {
            if let Some(cache) = &w.cache {
                cache.released(&key);
            }
        }
        Hop::Conn {
            stream,
            peer,
            admin,
        } => accept::adopt(w, stream, peer, admin),
    }
}

/// What tells the other workers that this worker's claimed fetch of a
/// cache key is over (`cache::claim`).
pub fn cache_release(w: &Rc<Worker>) -> impl Fn(&[u8]) {
    let weak = Rc::downgrade(w);
    move |key: &[u8]| {
        let Some(w) = weak.upgrade() else { return };
        let Some(mesh) = w.mesh.get() else { return };
        let key: Arc<[u8]> = Arc::from(key);
        for to in (0..mesh.workers()).filter(|&i| i != mesh.me()) {
            mesh.send(to, Hop::CacheReleased(key.clone()));
        }
    }
}

/// Follows the hub's interest log: each channel gained or lost goes to
/// its owner (answered at once when that is this worker).
async fn interest(w: Rc<Worker>) {
    let mesh = w.mesh.get().expect("a worker of several has a mesh");
    {
        let mut hub = w.hub.borrow_mut();
        hub.track_interest_for_workers();
        // Marks the log connected: acknowledgements wait for answers.
        hub.interest_snapshot();
    }
    let mut changes = Vec::new();
    loop {
        std::future::poll_fn(|cx| w.hub.borrow_mut().poll_interest(cx, &mut changes)).await;
        for (channel, on) in changes.drain(..) {
            match mesh.owner(&channel) {
                o if o == mesh.me() => w.hub.borrow_mut().interest_answered(&channel),
                o => {
                    let channel: Arc<str> = Arc::from(&*channel);
                    let from = mesh.me() as u8;
                    mesh.send(o, Hop::Interest { from, channel, on });
                }
            }
        }
    }
}

/// Pending once: lets the worker's other tasks run between batches.
struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
