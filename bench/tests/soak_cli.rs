//! `corecast-bench soak`, short form: the built binary starts its own
//! redis-server and corecast (the binary of the same build), churns them
//! for 40 s and must pass, with its table and chart written.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

#[test]
fn a_short_soak_passes_and_writes_its_table_and_chart() {
    let exe = Path::new(env!("CARGO_BIN_EXE_corecast-bench"));
    assert!(
        exe.with_file_name("corecast").is_file(),
        "no corecast binary next to corecast-bench: `cargo build -p corecast` \
         (or `cargo test --workspace`) first"
    );
    let out = std::env::temp_dir().join(format!("corecast-soak-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = Command::new(exe)
        .args(["soak", "--seconds", "40", "--json", "--quiet", "--out"])
        .arg(&out)
        .output()
        .expect("corecast-bench runs");
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "soak failed: {err}");
    let report: Value = serde_json::from_slice(&run.stdout).expect("stdout is the JSON report");
    assert_eq!(report["verdict"]["ok"], true, "{:#}", report["verdict"]);

    let samples = report["samples"].as_array().unwrap();
    let judged = report["verdict"]["judged_cycles"].as_u64().unwrap();
    assert!(judged >= 3, "{judged} judged cycles");
    // Every cycle did work: clients came and went, messages flowed, the
    // never-reading subscriber was cut, idle clients parked, a resume was
    // recovered.
    for s in &samples[1..] {
        assert_eq!(s["clients"], 19, "{s}");
        assert!(s["messages"].as_u64().unwrap() > 0, "{s}");
        assert_eq!(
            (&s["lost"], &s["slow_cut"]),
            (&Value::from(0), &Value::from(true)),
            "{s}"
        );
    }
    assert!(samples[2..].iter().any(|s| s["recovered"] == true));
    assert!(samples[1..]
        .iter()
        .any(|s| s["parked"].as_u64().unwrap() > 0));

    let md = std::fs::read_to_string(out.join("soak.md")).expect("soak.md");
    assert!(md.starts_with("# corecast soak: PASS"), "{md}");
    let rows = md
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| cycle"));
    assert_eq!(
        rows.count(),
        samples.len(),
        "one row per cycle (and cycle 0)"
    );
    let svg = std::fs::read_to_string(out.join("soak.svg")).expect("soak.svg");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    // The series of the four panels, and a warm-up line in each.
    assert_eq!(svg.matches("<polyline").count(), 2 + 5 + 6 + 2 + 4);
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn soak_without_a_server_binary_is_one_clear_error() {
    let o = Command::new(env!("CARGO_BIN_EXE_corecast-bench"))
        .args([
            "soak",
            "--seconds",
            "5",
            "--server-bin",
            "/nonexistent/corecast",
        ])
        .output()
        .expect("corecast-bench runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("no corecast binary"),
        "{err}"
    );
}
