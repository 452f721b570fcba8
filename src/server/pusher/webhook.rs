//! Pusher webhooks on monoio: each app with `--pusher-webhook` has a
//! bounded queue (`pusher::webhook::Queue`) and one sender task that posts
//! what is queued — up to 100 events a request, so events that happen
//! while a request is in flight go together in the next — and retries a
//! failed request with backoff before dropping it (counted). One request
//! at a time per app and worker keeps the events in order.
//!
//! The events, their JSON and the signed request are the sans-I/O
//! `pusher::webhook`; the HTTP client is the cache's origin client.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Duration;

use rustls::ClientConfig;

use crate::cache::CacheConfig;
use crate::config::Config;
use crate::hub::Hub;
use crate::log;
use crate::pusher::webhook::{self, backoff, Event, Queue, MAX_ATTEMPTS};
use crate::pusher::{App, PusherConfig};
use crate::server::cache::origin::OriginClient;
use crate::stats::Stats;

/// Time allowed for one webhook request (connect, send, full response).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// One app's webhook.
struct Hook {
    client: OriginClient,
    queue: RefCell<Queue>,
    waker: Cell<Option<Waker>>,
}

/// The worker's webhooks, by app index (`None`: that app has none).
#[derive(Default)]
pub struct Webhooks {
    hooks: Vec<Option<Hook>>,
}

impl Webhooks {
    /// A queue and client for each app with a webhook.
    pub fn new(cfg: &Config, tls: Option<Arc<ClientConfig>>) -> Webhooks {
        let p = &cfg.pusher;
        let hooks = p
            .apps
            .iter()
            .map(|app| {
                let url = p.webhook_of(app)?.clone();
                Some(Hook {
                    client: OriginClient::new(url, &client_config(), tls.clone()),
                    queue: RefCell::new(Queue::new(p.webhook_queue)),
                    waker: Cell::new(None),
                })
            })
            .collect();
        Webhooks { hooks }
    }

    /// Queues `ev` for app `app` (nothing if it has no webhook) and wakes
    /// its sender.
    pub fn emit(&self, app: usize, ev: Event<'_>, stats: &mut Stats) {
        let Some(hook) = self.hooks.get(app).and_then(Option::as_ref) else {
            return;
        };
        if hook.queue.borrow_mut().push(ev.is_existence(), ev.json()) {
            stats.pusher_webhook_dropped += 1;
        }
        if let Some(w) = hook.waker.take() {
            w.wake();
        }
    }

    /// `member_added` (`added`) or `member_removed` of `user_id` on hub
    /// channel `internal` (`pusher/{app id}/{name}`; other channels have
    /// no webhooks).
    pub fn member(
        &self,
        cfg: &PusherConfig,
        internal: &str,
        user_id: &str,
        added: bool,
        stats: &mut Stats,
    ) {
        let Some((id, channel)) = internal
            .strip_prefix("pusher/")
            .and_then(|rest| rest.split_once('/'))
        else {
            return;
        };
        let Some((app, _)) = cfg.by_id(id) else {
            return;
        };
        let ev = if added {
            Event::MemberAdded { channel, user_id }
        } else {
            Event::MemberRemoved { channel, user_id }
        };
        self.emit(app, ev, stats);
    }

    /// Indexes of the apps with a webhook (one sender task each).
    pub fn apps(&self) -> impl Iterator<Item = usize> + '_ {
        self.hooks
            .iter()
            .enumerate()
            .filter_map(|(i, h)| h.as_ref().map(|_| i))
    }

    fn hook(&self, app: usize) -> &Hook {
        self.hooks[app]
            .as_ref()
            .expect("senders run for apps with a hook")
    }
}

/// The origin client's settings for a webhook endpoint: one connection,
/// kept alive, small responses.
fn client_config() -> CacheConfig {
    CacheConfig {
        origin_max_connections: 1,
        origin_pool_size: 1,
        origin_connect_timeout: REQUEST_TIMEOUT,
        origin_timeout: REQUEST_TIMEOUT,
        origin_idle_timeout: Duration::from_secs(30),
        origin_dns_ttl: Duration::from_secs(30),
        origin_max_body: 64 * 1024,
        origin_max_head: 16 * 1024,
        ..CacheConfig::default()
    }
}

/// Sends the webhooks of `app_cfg` (index `app`) for as long as the
/// worker runs, counting in `hub`'s stats.
pub async fn sender(hooks: &Webhooks, (app, app_cfg): (usize, &App), hub: &RefCell<Hub>) {
    let hook = hooks.hook(app);
    loop {
        poll_fn(|cx| {
            if hook.queue.borrow().is_empty() {
                hook.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
        .await;
        let batch = hook.queue.borrow_mut().take_batch();
        let body = webhook::body(unix_ms(), &batch);
        let request = webhook::request(hook.client.url(), app_cfg, &body);
        let n = batch.len() as u64;
        for attempt in 1..=MAX_ATTEMPTS {
            let error = match hook.client.fetch(request.clone()).await {
                Ok(f) if (200..300).contains(&f.status) => None,
                Ok(f) => Some(format!("status {}", f.status)),
                Err(e) => Some(e.to_string()),
            };
            if !count_attempt(hub, (attempt, n), error, &app_cfg.id) {
                break;
            }
            monoio::time::sleep(backoff(attempt)).await;
        }
    }
}

/// Counts one attempt at sending `n` events; true if it failed and
/// another is due.
fn count_attempt(
    hub: &RefCell<Hub>,
    (attempt, n): (u32, u64),
    error: Option<String>,
    app: &str,
) -> bool {
    let stats = &mut hub.borrow_mut().stats;
    let Some(error) = error else {
        stats.pusher_webhook_requests += 1;
        stats.pusher_webhook_events += n;
        return false;
    };
    stats.pusher_webhook_failures += 1;
    if attempt == MAX_ATTEMPTS {
        stats.pusher_webhook_dropped += n;
        log!(
            Warn,
            "pusher webhook dropped",
            app = app,
            events = n,
            error = error
        );
        return false;
    }
    log!(
        Debug,
        "pusher webhook failed, retrying",
        app = app,
        error = error
    );
    true
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
