//! Outbox consumers in the configuration: `--consumer URL` (repeated)
//! and `[[consumer]]` TOML tables, parsed by `crate::consumer`.

use super::fields::Config;

/// `[[consumer]]` tables: `url` and, optionally, corecast's parameters
/// as keys (`name`, `table`, `dead_letter`, `batch`, `poll`, `notify`,
/// `tls_ca`), the TOML form of `--consumer URL`.
pub(super) fn from_toml(
    cfg: &mut Config,
    tables: &[toml::Value],
    origin: &str,
) -> Result<(), String> {
    let keys = [
        "name",
        "table",
        "dead_letter",
        "batch",
        "poll",
        "notify",
        "tls_ca",
    ];
    let err = |m: String| format!("{origin}: [[consumer]]: {m}");
    for t in tables {
        let t = t.as_table().ok_or_else(|| err("must be a table".into()))?;
        let mut url = match t.get("url").and_then(toml::Value::as_str) {
            Some(u) => u.to_string(),
            None => return Err(err("needs `url`, a postgres://… URL".into())),
        };
        for (k, v) in t.iter().filter(|(k, _)| *k != "url") {
            if !keys.contains(&k.as_str()) {
                return Err(err(format!("unknown key `{k}`")));
            }
            let v = match v {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                _ => return Err(err(format!("`{k}` must be a string or integer"))),
            };
            url.push(if url.contains('?') { '&' } else { '?' });
            url.push_str(&format!("{k}={v}"));
        }
        add(cfg, &url).map_err(err)?;
    }
    Ok(())
}

/// Adds one consumer (`--consumer`, a `[[consumer]]` table): its URL
/// parsed, its name unique, at most `MAX_CONSUMERS`.
pub(super) fn add(cfg: &mut Config, url: &str) -> Result<(), String> {
    let c: crate::consumer::ConsumerConfig = url.parse()?;
    if cfg.consumers.iter().any(|o| o.name == c.name) {
        return Err(format!("two consumers named {:?} (set name=)", c.name));
    }
    if cfg.consumers.len() == crate::consumer::MAX_CONSUMERS {
        return Err("at most 16 consumers".into());
    }
    cfg.consumers.push(c);
    Ok(())
}
