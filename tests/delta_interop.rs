//! corecast's Fossil deltas (`corecast::delta`) against the reference the
//! clients use, dchest's `fossil-delta` (npm), run by
//! `tests/delta/interop.mjs`: for documents with small edits, grown and
//! shrunk ones, random bytes and the edge cases, both write the same
//! delta byte for byte, each applies the other's, and the result is the
//! target. Node and npm must be installed; the package is installed here
//! when missing.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine;
use corecast::delta;
use serde_json::{json, Value};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/delta")
}

fn node_deps() {
    if dir().join("node_modules/fossil-delta").exists() {
        return;
    }
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--silent"])
        .current_dir(dir())
        .status()
        .expect("npm runs (Node.js and npm are needed for this test)");
    assert!(status.success(), "npm ci in tests/delta failed");
}

/// A small deterministic generator (xorshift64*), so a failure repeats.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A scoreboard-like JSON document of `rows` rows.
fn scoreboard(rng: &mut Rng, rows: usize) -> Vec<u8> {
    let rows: Vec<Value> = (0..rows)
        .map(|i| json!({"team": format!("team-{i}"), "score": rng.below(1000), "ok": true}))
        .collect();
    serde_json::to_vec(&json!({"round": rng.below(100), "rows": rows})).unwrap()
}

/// `doc` with a few bytes changed, inserted or removed.
fn edited(rng: &mut Rng, doc: &[u8]) -> Vec<u8> {
    let mut out = doc.to_vec();
    for _ in 0..1 + rng.below(6) {
        let at = rng.below(out.len().max(1));
        match rng.below(3) {
            0 if !out.is_empty() => out[at] = b'0' + rng.below(10) as u8,
            1 => out.insert(at.min(out.len()), b'x'),
            _ if !out.is_empty() => {
                out.remove(at);
            }
            _ => {}
        }
    }
    out
}

fn cases() -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut cases = vec![
        (vec![], vec![]),
        (
            b"short".to_vec(),
            b"a longer target than its source".to_vec(),
        ),
        (b"0123456789abcdef".to_vec(), b"0123456789abcdef!".to_vec()),
        (b"0123456789abcdefg".to_vec(), b"0123456789abcdefg".to_vec()),
        (scoreboard(&mut rng, 40), vec![]),
    ];
    for rows in [5, 40, 120] {
        for _ in 0..40 {
            let doc = scoreboard(&mut rng, rows);
            let next = edited(&mut rng, &doc);
            cases.push((doc, next));
        }
    }
    for _ in 0..60 {
        let len = rng.below(3000);
        let source: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
        let target = if rng.below(2) == 0 {
            edited(&mut rng, &source)
        } else {
            (0..rng.below(3000)).map(|_| rng.below(4) as u8).collect()
        };
        cases.push((source, target));
    }
    cases
}

#[test]
fn deltas_match_the_reference_both_ways() {
    node_deps();
    let b64 = base64::engine::general_purpose::STANDARD;
    let cases = cases();
    let mut ours = Vec::new();
    let mut input = String::new();
    for (source, target) in &cases {
        let mut d = Vec::new();
        delta::create(source, target, &mut d);
        input.push_str(
            &json!({
                "source": b64.encode(source),
                "target": b64.encode(target),
                "delta": b64.encode(&d),
            })
            .to_string(),
        );
        input.push('\n');
        ours.push(d);
    }
    let mut child = Command::new("node")
        .arg("interop.mjs")
        .current_dir(dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("node runs");
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "interop.mjs failed");
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), cases.len(), "one answer per case");
    let mut shrunk = 0;
    for (i, ((source, target), line)) in cases.iter().zip(&lines).enumerate() {
        let theirs = b64.decode(line["created"].as_str().unwrap()).unwrap();
        assert_eq!(ours[i], theirs, "case {i}: the same delta as the reference");
        assert_eq!(
            line["error"],
            Value::Null,
            "case {i}: the reference applies ours"
        );
        let applied = b64.decode(line["applied"].as_str().unwrap()).unwrap();
        assert_eq!(
            &applied, target,
            "case {i}: the reference rebuilds the target"
        );
        let back = delta::apply(source, &theirs, target.len()).unwrap();
        assert_eq!(&back, target, "case {i}: we apply the reference's delta");
        shrunk += (ours[i].len() * 10 < target.len()) as usize;
    }
    // The edited scoreboards are what deltas are for: most shrink tenfold.
    assert!(shrunk >= 80, "only {shrunk} deltas were under a tenth");
}
