//! The README's "Try it" (also the book's Getting started) run as written
//! with `sh` and `curl` against a real server, its address put in place
//! of 127.0.0.1:8080: the subscriber gets the published message and the
//! publisher's answer is the one shown after `# ->`.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use common::*;
use serde_json::Value;

/// The `sh` block after `<!-- snippet: try-it -->`.
fn try_it(page: &str) -> &str {
    let at = page
        .find("<!-- snippet: try-it -->")
        .expect("a try-it snippet");
    let block = &page[at..];
    let start = block.find("```sh\n").expect("its sh block") + "```sh\n".len();
    let end = block[start..].find("```").expect("the block's end");
    &block[start..start + end]
}

/// The commands of a snippet, each with the output shown after it.
fn steps(snippet: &str) -> Vec<(String, Option<String>)> {
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    for line in snippet.lines().map(str::trim) {
        if let Some(shown) = line.strip_prefix("# -> ") {
            out.last_mut().expect("a command before its output").1 = Some(shown.into());
        } else if !line.is_empty() && !line.starts_with('#') {
            out.push((line.to_string(), None));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_try_it_works_as_written() {
    let readme = include_str!("../README.md");
    let book = include_str!("../docs/src/getting-started.md");
    assert_eq!(try_it(readme), try_it(book), "the two copies differ");
    let steps = steps(try_it(readme));
    assert_eq!(steps.len(), 2, "a subscriber and a publisher: {steps:?}");
    let srv = TestServer::start(|_| {});
    let here = |cmd: &str| cmd.replace("127.0.0.1:8080", &srv.addr.to_string());

    // Terminal 1: the subscriber, read as it prints.
    let mut sub = Command::new("sh")
        .args(["-c", &format!("exec {}", here(&steps[0].0))])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("sh and curl");
    let printed = Arc::new(Mutex::new(String::new()));
    let mut out = sub.stdout.take().unwrap();
    let sink = printed.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    wait_stat(srv.addr, "sse_connections", |n| n == 1).await;

    // Terminal 2: the publisher, its answer as shown.
    let (cmd, shown) = &steps[1];
    let answer = Command::new("sh")
        .args(["-c", &here(cmd)])
        .output()
        .expect("sh and curl");
    assert!(answer.status.success(), "{cmd}: {answer:?}");
    let got: Value = serde_json::from_slice(&answer.stdout).expect("a JSON answer");
    let want: Value = serde_json::from_str(shown.as_deref().expect("a shown answer")).unwrap();
    assert_eq!(got, want);

    let printed2 = printed.clone();
    wait_until("the subscriber prints the message", || {
        let text = printed2.lock().unwrap().clone();
        async move { text.contains(r#""data":"hello""#) }
    })
    .await;
    let _ = sub.kill();
    let _ = sub.wait();
    let text = printed.lock().unwrap().clone();
    assert!(text.contains("event: message"), "{text}");
}
