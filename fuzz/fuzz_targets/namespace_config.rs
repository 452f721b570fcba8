//! Namespace configuration over arbitrary text, in both forms — the
//! compact `--namespace` value and a TOML file with `[namespaces.X]`
//! tables — then resolved against the global options: never panics, and
//! whatever is accepted is within bounds (at most `MAX_NAMESPACES`
//! namespaces, each with a valid name).
#![no_main]
use corecast::config::{apply_toml, Config};
use corecast::namespace::{spec::Specs, valid_namespace_name, MAX_NAMESPACES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut specs = Specs::default();
    if specs.add_compact(text, "fuzz").is_ok() {
        assert!(specs.0.len() <= MAX_NAMESPACES);
        assert!(specs.0.iter().all(|s| valid_namespace_name(&s.name)));
    }
    let mut cfg = Config::default();
    if apply_toml(&mut cfg, text, "fuzz.toml").is_ok() && cfg.resolve_namespaces().is_ok() {
        let names: Vec<&str> = cfg.namespaces.table.names().collect();
        assert!(names.len() <= MAX_NAMESPACES);
        assert!(names.iter().all(|n| valid_namespace_name(n)));
    }
});
