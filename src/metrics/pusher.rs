//! The Pusher protocol's series: connections, refusals, client events,
//! the HTTP API, webhooks, and per-app counters.

use super::series::{counter, gauge, labelled};
use crate::stats::{PusherAppStats, Snapshot, Stats};

/// Pusher webhooks (`--pusher-webhook`).
pub(super) fn pusher_webhooks(o: &mut String, s: &Stats) {
    labelled(
        o,
        "corecast_pusher_webhook_events_total",
        "Pusher webhook events, by outcome.",
        "counter",
        "outcome",
        &[
            ("delivered", s.pusher_webhook_events),
            ("dropped", s.pusher_webhook_dropped),
        ],
    );
    counter(
        o,
        "corecast_pusher_webhook_requests_total",
        "Pusher webhook requests answered with 2xx.",
        s.pusher_webhook_requests,
    );
    counter(
        o,
        "corecast_pusher_webhook_failures_total",
        "Pusher webhook attempts that failed (retried with backoff).",
        s.pusher_webhook_failures,
    );
}

/// The Pusher protocol (`--pusher-app`).
pub(super) fn pusher(o: &mut String, s: &Stats) {
    gauge(
        o,
        "corecast_pusher_connections",
        "Open Pusher protocol connections.",
        s.pusher_connections,
    );
    counter(
        o,
        "corecast_pusher_connections_refused_total",
        "Pusher connections closed at once: unknown app (4001), protocol (4007), over capacity (4100).",
        s.pusher_connections_refused,
    );
    labelled(
        o,
        "corecast_pusher_subscriptions_refused_total",
        "Pusher subscriptions refused, by reason.",
        "counter",
        "reason",
        &[
            ("signature", s.pusher_auth_failures),
            ("rate_limited", s.pusher_subscriptions_limited),
            (
                "other",
                s.pusher_subscriptions_refused
                    .saturating_sub(s.pusher_auth_failures)
                    .saturating_sub(s.pusher_subscriptions_limited),
            ),
        ],
    );
    counter(
        o,
        "corecast_pusher_channels_untracked_total",
        "Redis mode: channels not tracked across instances (app at --pusher-max-channels).",
        s.pusher_channels_untracked,
    );
    counter(
        o,
        "corecast_pusher_signin_failures_total",
        "Pusher signins refused (close 4009).",
        s.pusher_signin_failures,
    );
    counter(
        o,
        "corecast_pusher_errors_total",
        "Pusher frames answered with pusher:error.",
        s.pusher_errors,
    );
    labelled(
        o,
        "corecast_pusher_client_events_total",
        "Pusher client events, by outcome.",
        "counter",
        "outcome",
        &[
            ("relayed", s.pusher_client_events),
            ("rate_limited", s.pusher_client_events_limited),
        ],
    );
    pusher_api(o, s);
}

/// The Pusher HTTP API's counters.
fn pusher_api(o: &mut String, s: &Stats) {
    counter(
        o,
        "corecast_pusher_api_requests_total",
        "Pusher HTTP API requests.",
        s.pusher_api_requests,
    );
    counter(
        o,
        "corecast_pusher_api_unauthorized_total",
        "Pusher HTTP API requests refused for their signature (401).",
        s.pusher_api_unauthorized,
    );
    counter(
        o,
        "corecast_pusher_api_bad_requests_total",
        "Signed Pusher HTTP API requests refused for their body or path (400, 404, 413).",
        s.pusher_api_bad_requests,
    );
    counter(
        o,
        "corecast_pusher_api_events_total",
        "Events published through the Pusher HTTP API (one per channel).",
        s.pusher_api_events,
    );
}

/// A per-app family: name, type, help, and its value of an app.
type AppFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&PusherAppStats) -> u64,
);

/// Per Pusher app (label `app` = the app id; ids are `A-Z a-z 0-9 - _ .`,
/// safe in a label without escaping).
pub(super) fn pusher_apps(o: &mut String, snap: &Snapshot) {
    let apps = &snap.pusher_apps;
    let families: [AppFamily; 4] = [
        (
            "corecast_pusher_app_connections",
            "gauge",
            "Open Pusher connections per app.",
            |a| a.connections,
        ),
        (
            "corecast_pusher_app_client_events_total",
            "counter",
            "Client events relayed per app.",
            |a| a.client_events,
        ),
        (
            "corecast_pusher_app_api_requests_total",
            "counter",
            "Signed Pusher HTTP API requests per app.",
            |a| a.api_requests,
        ),
        (
            "corecast_pusher_app_api_events_total",
            "counter",
            "Events published through the Pusher HTTP API per app.",
            |a| a.api_events,
        ),
    ];
    for (name, kind, help, value) in families {
        let rows: Vec<(&str, u64)> = apps.iter().map(|(id, a)| (id.as_str(), value(a))).collect();
        labelled(o, name, help, kind, "app", &rows);
    }
}
