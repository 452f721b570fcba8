//! Links the `corecast` binary with the code a fresh process runs placed
//! first in its text, in the order of `perf/startup.order` (made by
//! `scripts/startup_order.sh` from a page-fault trace of a start).
//!
//! Why: the kernel maps 64 KiB of file around every page fault, so
//! start-up code spread over the whole text makes most of it resident
//! though start-up runs a small part of it (BENCHMARKS, "Fresh RSS").
//! Grouped, a fresh process maps a few windows instead.
//!
//! The option is LLD's (`--symbol-ordering-file`), the linker rustc uses
//! by default on x86_64 Linux since 1.90; other targets and older
//! toolchains link as before. `CORECAST_NO_SYMBOL_ORDER=1` turns it off
//! (e.g. for a build with another linker). A symbol the file names that
//! the build does not have (its hash changed) is skipped without a word:
//! the order only makes start-up leaner, never changes behaviour.
//!
//! With the same linker, relative relocations are packed (`-z
//! pack-relative-relocs`, DT_RELR) when the glibc here is 2.36 or later
//! (the loader that understands them): the loader reads every relocation
//! at start, and 7,886 of them took 185 KiB as RELA records, all resident
//! in a fresh process; packed they take a few KiB. `CORECAST_NO_RELR=1`
//! turns it off (e.g. to build here for an older glibc elsewhere).

use std::env;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=perf/startup.order");
    println!("cargo:rerun-if-env-changed=CORECAST_NO_SYMBOL_ORDER");
    println!("cargo:rerun-if-env-changed=CORECAST_NO_RELR");
    let target = env::var("TARGET").unwrap_or_default();
    if target != "x86_64-unknown-linux-gnu" || !rustc_links_with_lld() {
        return;
    }
    if !set("CORECAST_NO_RELR") && glibc_at_least(2, 36) {
        println!("cargo:rustc-link-arg-bin=corecast=-Wl,-z,pack-relative-relocs");
    }
    if set("CORECAST_NO_SYMBOL_ORDER") {
        return;
    }
    let dir = env::var("CARGO_MANIFEST_DIR").expect("cargo sets it");
    let order = format!("{dir}/perf/startup.order");
    println!("cargo:rustc-link-arg-bin=corecast=-Wl,--symbol-ordering-file={order}");
    println!("cargo:rustc-link-arg-bin=corecast=-Wl,--no-warn-symbol-ordering");
}

fn set(var: &str) -> bool {
    env::var_os(var).is_some_and(|v| v != "0")
}

/// Whether this machine's glibc (`getconf GNU_LIBC_VERSION`: "glibc
/// 2.36") is at least `major.minor`; false when it cannot tell.
fn glibc_at_least(major: u32, minor: u32) -> bool {
    let Ok(out) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().nth(1).unwrap_or("");
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (major, minor)
}

/// Whether rustc is 1.90 or later (rust-lld by default on this target).
fn rustc_links_with_lld() -> bool {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(out) = Command::new(rustc).arg("--version").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (1, 90)
}
