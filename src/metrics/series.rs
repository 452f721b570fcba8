//! Writing one series in the Prometheus text format.

use std::fmt::Write as _;

/// A counter.
pub(super) fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
    );
}

/// A gauge.
pub(super) fn gauge(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
    );
}

/// One series per label value (`kind`: counter or gauge).
pub(super) fn labelled(
    out: &mut String,
    name: &str,
    help: &str,
    kind: &str,
    label: &str,
    rows: &[(&str, u64)],
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (value, n) in rows {
        let _ = writeln!(out, "{name}{{{label}=\"{value}\"}} {n}");
    }
}
