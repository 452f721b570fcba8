//! Pusher apps and limits: `--pusher-app ID:KEY:SECRET[:client-events]`.

use crate::cache::origin::OriginUrl;
use crate::secret::Secret;

/// Longest app id, key or secret accepted.
const MAX_CREDENTIAL: usize = 128;

/// One Pusher app: its own channel space, key and secret.
#[derive(Debug, Clone)]
pub struct App {
    /// The app id (`/apps/{id}/...` in the HTTP API).
    pub id: String,
    /// The public key clients connect with (`/app/{key}`).
    pub key: String,
    /// Signs channel authorizations and HTTP API requests.
    pub secret: Secret,
    /// Whether clients may send `client-*` events (opt-in, as on Pusher).
    pub client_events: bool,
}

/// The Pusher layer's settings.
#[derive(Debug, Clone)]
pub struct PusherConfig {
    /// Configured apps (none: `/app/...` and `/apps/...` answer 404).
    pub apps: Vec<App>,
    /// `activity_timeout` announced to clients, in seconds (they ping after
    /// this much silence).
    pub activity_timeout_s: u64,
    /// Client events per second per connection (also the burst); beyond
    /// it an event is refused with `pusher:error` 4301.
    pub client_event_rate: u32,
    /// Subscriptions per second per connection (also the burst) that may
    /// occupy a channel (its first subscriber on this instance) or join a
    /// presence channel — what queues `channel_occupied`/`channel_vacated`
    /// and `member_*` webhooks (and in Redis mode costs Redis scripts);
    /// beyond it such a subscription is refused with
    /// `pusher:subscription_error` 429. 0 = unlimited.
    pub occupancy_rate: u32,
    /// Connections per app; beyond it a connection is closed with 4100.
    pub max_app_connections: usize,
    /// Members (distinct users) of one presence channel; beyond it a
    /// subscription is refused.
    pub max_presence_members: usize,
    /// Redis mode: an app's channels tracked across instances (listed,
    /// counted, announced); past it a channel works but is neither
    /// listed nor announced (counted).
    pub max_channels: usize,
    /// Redis mode: how long a channel whose last subscriber left waits
    /// before `channel_vacated` (a subscriber back within it causes
    /// neither `channel_vacated` nor `channel_occupied`), in ms.
    pub vacated_grace_ms: u64,
    /// Webhook endpoints by app id (`--pusher-webhook ID=URL`).
    pub webhooks: Vec<(String, OriginUrl)>,
    /// Events waiting per app and worker before the oldest are dropped —
    /// of each of two kinds: channel existence events, and the others
    /// (members, client events), so a flood of the first never evicts the
    /// second.
    pub webhook_queue: usize,
}

impl Default for PusherConfig {
    fn default() -> Self {
        PusherConfig {
            apps: Vec::new(),
            activity_timeout_s: 120,
            client_event_rate: 10,
            occupancy_rate: 20,
            max_app_connections: 10_000,
            max_presence_members: 100,
            max_channels: 10_000,
            vacated_grace_ms: 3_000,
            webhooks: Vec::new(),
            webhook_queue: 10_000,
        }
    }
}

impl PusherConfig {
    /// The app clients reach with `key`.
    pub fn by_key(&self, key: &str) -> Option<(usize, &App)> {
        self.apps.iter().enumerate().find(|(_, a)| a.key == key)
    }

    /// The app the HTTP API names by `id`.
    pub fn by_id(&self, id: &str) -> Option<(usize, &App)> {
        self.apps.iter().enumerate().find(|(_, a)| a.id == id)
    }

    /// Adds the webhooks of `list` (comma-separated `ID=URL`); a second
    /// endpoint for an app replaces the first.
    pub fn add_webhooks(&mut self, list: &str) -> Result<(), String> {
        for (id, url) in parse_hooks(list)? {
            self.webhooks.retain(|(i, _)| *i != id);
            self.webhooks.push((id, url));
        }
        Ok(())
    }

    /// The webhook endpoint of `app`, if it has one.
    pub fn webhook_of(&self, app: &App) -> Option<&OriginUrl> {
        self.webhooks
            .iter()
            .find(|(id, _)| *id == app.id)
            .map(|(_, u)| u)
    }

    /// Adds the apps of `list` (comma-separated `ID:KEY:SECRET[:client-events]`);
    /// an app with an id already configured replaces it, so a TOML file
    /// and the environment naming the same app do not make two.
    pub fn add_apps(&mut self, list: &str) -> Result<(), String> {
        for spec in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let app = parse_app(spec)?;
            if self.apps.iter().any(|a| a.key == app.key && a.id != app.id) {
                return Err("two apps with the same key".into());
            }
            self.apps.retain(|a| a.id != app.id);
            self.apps.push(app);
        }
        Ok(())
    }
}

fn credential(part: Option<&str>, what: &str) -> Result<String, String> {
    match part {
        Some(p)
            if !p.is_empty()
                && p.len() <= MAX_CREDENTIAL
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) =>
        {
            Ok(p.to_string())
        }
        _ => Err(format!(
            "pusher app: {what} must be 1-{MAX_CREDENTIAL} of A-Z a-z 0-9 - _ ."
        )),
    }
}

/// Parses `--pusher-webhook ID=URL` entries (comma-separated).
pub fn parse_hooks(list: &str) -> Result<Vec<(String, OriginUrl)>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|spec| {
            let (id, url) = spec.split_once('=').ok_or_else(|| {
                format!("pusher webhook `{spec}`: expected APP_ID=http[s]://HOST[:PORT]/PATH")
            })?;
            let url = url
                .parse::<OriginUrl>()
                .map_err(|e| format!("pusher webhook for app {id}: {e}"))?;
            Ok((id.to_string(), url))
        })
        .collect()
}

/// Parses one `ID:KEY:SECRET[:client-events]`.
pub fn parse_app(spec: &str) -> Result<App, String> {
    let mut parts = spec.split(':');
    let id = credential(parts.next(), "the id")?;
    let key = credential(parts.next(), "the key")?;
    let secret = Secret::new(credential(parts.next(), "the secret")?);
    let client_events = match parts.next() {
        None => false,
        Some("client-events") => true,
        Some(_) => return Err("pusher app: the only option is `client-events`".into()),
    };
    if parts.next().is_some() {
        return Err("pusher app: expected ID:KEY:SECRET[:client-events]".into());
    }
    Ok(App {
        id,
        key,
        secret,
        client_events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apps_parse_and_replace_by_id() {
        let mut c = PusherConfig::default();
        c.add_apps("1:k1:s1, 2:k2:s2:client-events").unwrap();
        assert_eq!(c.apps.len(), 2);
        assert!(!c.apps[0].client_events && c.apps[1].client_events);
        c.add_apps("1:k1:other").unwrap();
        assert_eq!(c.apps.len(), 2);
        assert_eq!(c.by_id("1").unwrap().1.secret.expose(), "other");
        assert_eq!(c.by_key("k2").unwrap().1.id, "2");
    }

    #[test]
    fn bad_apps_are_refused_without_echoing_the_secret() {
        let mut c = PusherConfig::default();
        for bad in ["1:k", "1:k:s:x", "1:k:s:client-events:y", "1::s", "a b:k:s"] {
            let e = c.add_apps(bad).unwrap_err();
            assert!(!e.contains(":s"), "{e}");
        }
        c.add_apps("1:k:s").unwrap();
        assert!(c.add_apps("2:k:t").is_err(), "same key twice");
    }
}
