//! Namespace definitions as written, before they are checked against the
//! global options: the compact form of `--namespace` (and its environment
//! variable and TOML `namespace` list) and the TOML `[namespaces.NAME]`
//! tables. Sans-I/O; every bound here is what a configuration file can
//! make the parser hold.

/// Most namespaces one configuration may define: they are label values
/// of `/metrics`, so their number must stay small and fixed.
pub const MAX_NAMESPACES: usize = 64;

/// Longest namespace name.
pub const MAX_NAME: usize = 32;

/// Namespace names: 1–32 bytes of `A-Z a-z 0-9 - _ .` (a channel name's
/// charset without `:`, `@` and `#`).
pub fn valid_namespace_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The label of the default namespace (channels without `:`) in
/// `/stats` and `/metrics`; no configured namespace may take it.
pub const DEFAULT_LABEL: &str = "default";

/// Most keys one namespace may set (far more than there are keys: a
/// bound on what a hostile file can make the parser keep).
pub const MAX_KEYS: usize = 32;

/// One `key = value` of a namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key (a global option's name or a namespace-only key).
    pub key: String,
    /// The value as text (TOML integers and booleans printed).
    pub value: String,
    /// Where it was written (`f.toml: line 3`, `--namespace`).
    pub origin: String,
}

/// One namespace as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The namespace's name (`chat` for `chat:room-1`).
    pub name: String,
    /// Its settings, in the order written.
    pub entries: Vec<Entry>,
}

/// Namespaces defined so far, across every source (file, environment,
/// flags); each name at most once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Specs(pub Vec<Spec>);

impl Specs {
    /// Adds the compact form: comma-separated items, where `NAME:` starts
    /// a namespace (optionally followed by its first `key=value`) and a
    /// plain `key=value` continues the current one:
    /// `chat:history-size=100,presence=true,feed:publish=server`.
    pub fn add_compact(&mut self, text: &str, origin: &str) -> Result<(), String> {
        let mut current: Option<Spec> = None;
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (head, rest) = split_item(item);
            if let Some(name) = head {
                if let Some(done) = current.take() {
                    self.push(done)?;
                }
                current = Some(self.start(name)?);
            }
            let Some(rest) = rest else { continue };
            let spec = current
                .as_mut()
                .ok_or_else(|| format!("`{rest}` before any `NAME:` (expected NAME:key=value)"))?;
            let (key, value) = rest
                .split_once('=')
                .ok_or_else(|| format!("`{rest}`: expected key=value"))?;
            add_entry(spec, key.trim(), value.trim(), origin)?;
        }
        if let Some(done) = current {
            self.push(done)?;
        }
        Ok(())
    }

    /// Adds the `[namespaces.NAME]` tables of a TOML file (`table` is the
    /// value of its `namespaces` key; `text` the file, to name lines).
    pub fn add_toml(
        &mut self,
        table: &toml::Table,
        text: &str,
        origin: &str,
    ) -> Result<(), String> {
        for (name, value) in table {
            let toml::Value::Table(keys) = value else {
                return Err(format!(
                    "{origin}: `namespaces.{name}` must be a table ([namespaces.{name}])"
                ));
            };
            let mut spec = self.start(name).map_err(|e| format!("{origin}: {e}"))?;
            for (key, value) in keys {
                let line = line_of(text, name, key);
                let at = match line {
                    Some(l) => format!("{origin}: line {l}"),
                    None => origin.to_string(),
                };
                let value = scalar(value).ok_or_else(|| {
                    format!("{at}: namespaces.{name}.{key} must be a string, integer or boolean")
                })?;
                add_entry(&mut spec, key, &value, &at)?;
            }
            self.push(spec)?;
        }
        Ok(())
    }

    fn start(&self, name: &str) -> Result<Spec, String> {
        if name == DEFAULT_LABEL {
            return Err(format!(
                "namespace name `{name}`: reserved for the default namespace (channels without `:`)"
            ));
        }
        if !valid_namespace_name(name) {
            return Err(format!(
                "namespace name `{}`: 1-32 bytes of A-Z a-z 0-9 - _ .",
                name.escape_debug()
            ));
        }
        Ok(Spec {
            name: name.to_string(),
            entries: Vec::new(),
        })
    }

    fn push(&mut self, spec: Spec) -> Result<(), String> {
        if self.0.iter().any(|s| s.name == spec.name) {
            return Err(format!(
                "namespace `{}` is defined twice (each namespace once, in one place)",
                spec.name
            ));
        }
        if self.0.len() >= MAX_NAMESPACES {
            return Err(format!("more than {MAX_NAMESPACES} namespaces"));
        }
        self.0.push(spec);
        Ok(())
    }
}

/// `NAME:rest` → (`Some(NAME)`, rest), `key=value` → (`None`, it): an
/// item starts a namespace when a `:` comes before any `=`.
fn split_item(item: &str) -> (Option<&str>, Option<&str>) {
    let colon = item.find(':');
    let equals = item.find('=');
    match (colon, equals) {
        (Some(c), e) if e.is_none_or(|e| c < e) => {
            let rest = item[c + 1..].trim();
            (Some(item[..c].trim()), (!rest.is_empty()).then_some(rest))
        }
        _ => (None, Some(item)),
    }
}

fn add_entry(spec: &mut Spec, key: &str, value: &str, origin: &str) -> Result<(), String> {
    if let Some(first) = spec.entries.iter().find(|e| e.key == key) {
        return Err(format!(
            "{origin}: namespace `{}`: `{key}` is set twice (first at {})",
            spec.name, first.origin
        ));
    }
    if spec.entries.len() >= MAX_KEYS {
        return Err(format!(
            "{origin}: namespace `{}`: too many keys",
            spec.name
        ));
    }
    spec.entries.push(Entry {
        key: key.to_string(),
        value: value.to_string(),
        origin: origin.to_string(),
    });
    Ok(())
}

fn scalar(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The line (1-based) of `key` under the `[namespaces.NAME]` header of a
/// TOML text, if written that plain way (toml's table keeps no spans); a
/// dotted or inline form is named by its key only.
fn line_of(text: &str, name: &str, key: &str) -> Option<usize> {
    let mut inside = false;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            let header: String = header
                .split(']')
                .next()
                .unwrap_or_default()
                .chars()
                .filter(|c| !c.is_whitespace() && *c != '"' && *c != '\'')
                .collect();
            inside = header == format!("namespaces.{name}");
            continue;
        }
        let written = line.split('=').next().unwrap_or_default().trim();
        if inside && written.trim_matches(['"', '\'']) == key {
            return Some(n + 1);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compact(text: &str) -> Result<Specs, String> {
        let mut s = Specs::default();
        s.add_compact(text, "--namespace").map(|()| s)
    }

    #[test]
    fn the_compact_form_starts_namespaces_at_name_colon() {
        let s = compact("chat:history-size=100, presence=true,feed:publish=server,empty:").unwrap();
        let names: Vec<_> = s.0.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["chat", "feed", "empty"]);
        assert_eq!(s.0[0].entries.len(), 2);
        assert_eq!(s.0[0].entries[1].key, "presence");
        assert_eq!(s.0[1].entries[0].value, "server");
        assert!(s.0[2].entries.is_empty());
    }

    #[test]
    fn the_compact_form_refuses_what_it_cannot_read() {
        for (bad, says) in [
            ("history-size=1", "before any"),
            ("chat:history-size", "expected key=value"),
            ("chat:history-size=1,history-size=2", "set twice"),
            ("chat:,chat:", "defined twice"),
            ("bad name:publish=server", "namespace name"),
            (":publish=server", "namespace name"),
        ] {
            let e = compact(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let many: Vec<String> = (0..=MAX_NAMESPACES).map(|i| format!("n{i}:")).collect();
        assert!(compact(&many.join(",")).unwrap_err().contains("more than"));
    }

    #[test]
    fn toml_tables_name_the_line_of_a_repeated_namespace_key() {
        let text = "cpu = 1\n[namespaces.chat]\nhistory-size = 100\n\n[namespaces.feed]\npublish = \"server\"\n";
        let table: toml::Table = text.parse().unwrap();
        let ns = table["namespaces"].as_table().unwrap();
        let mut s = Specs::default();
        s.add_toml(ns, text, "f.toml").unwrap();
        assert_eq!(s.0[1].entries[0].origin, "f.toml: line 6");
        let e = s
            .add_compact("chat:publish=server", "--namespace")
            .unwrap_err();
        assert!(e.contains("`chat` is defined twice"), "{e}");
    }
}
