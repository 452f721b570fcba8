//! A real PostgreSQL for the outbox tests: `initdb` into a temporary
//! directory and `postgres` on a free port (as the unprivileged `postgres`
//! user when the tests run as root, which PostgreSQL refuses), stopped
//! and removed on drop; and a client (tokio-postgres) to write the
//! outbox the way an application does.

#![allow(dead_code)] // not every helper is used by every test

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::DEADLINE;

/// A PostgreSQL server of its own.
pub struct Postgres {
    pub port: u16,
    dir: PathBuf,
    bin: PathBuf,
    running: bool,
    /// `-c ssl=on` with the certificate and key copied in (`start_tls`).
    tls: bool,
}

/// The newest installed PostgreSQL's `bin` directory.
fn bin_dir() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|r| r.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    dirs.retain(|d| d.join("initdb").exists());
    dirs.sort_by_key(|d| {
        let v = d
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str());
        v.and_then(|v| v.parse::<u32>().ok()).unwrap_or(0)
    });
    dirs.pop().expect(
        "PostgreSQL is not installed (these tests need a real one): apt-get install postgresql",
    )
}

fn as_root() -> bool {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

impl Postgres {
    /// A fresh cluster, started, with trust authentication on 127.0.0.1.
    pub fn start() -> Postgres {
        Postgres::start_with(None)
    }

    /// [`Postgres::start`] serving TLS too, with this certificate and key.
    pub fn start_tls(cert: &std::path::Path, key: &std::path::Path) -> Postgres {
        Postgres::start_with(Some((cert, key)))
    }

    fn start_with(tls: Option<(&std::path::Path, &std::path::Path)>) -> Postgres {
        let dir = std::env::temp_dir().join(format!(
            "corecast-pg-{}-{}",
            std::process::id(),
            crate::free_port()
        ));
        std::fs::create_dir_all(&dir).expect("pg dir");
        let pg = Postgres {
            port: crate::free_port(),
            dir,
            bin: bin_dir(),
            running: false,
            tls: tls.is_some(),
        };
        if let Some((cert, key)) = tls {
            // Where the server's user can read them; a key must be 0600.
            std::fs::copy(cert, pg.dir.join("server.crt")).expect("copy cert");
            std::fs::copy(key, pg.dir.join("server.key")).expect("copy key");
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::Permissions::from_mode(0o600);
            std::fs::set_permissions(pg.dir.join("server.key"), mode).expect("chmod key");
        }
        if as_root() {
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres", pg.dir.to_str().unwrap()])
                .status()
                .expect("chown");
            assert!(ok.success(), "chown the data directory to postgres");
        }
        let data = pg.dir.join("data");
        let out = pg
            .cmd("initdb")
            .args([
                "-D",
                data.to_str().unwrap(),
                "-A",
                "trust",
                "-U",
                "postgres",
            ])
            .args(["--no-sync", "-E", "UTF8", "--locale=C"])
            .output()
            .expect("initdb runs");
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut pg = pg;
        pg.up();
        pg
    }

    /// A command of the PostgreSQL binaries, as `postgres` when root.
    fn cmd(&self, name: &str) -> Command {
        let path = self.bin.join(name);
        let mut c = if as_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        };
        c.stdin(Stdio::null());
        c
    }

    /// Starts the server (again) and waits until it accepts connections.
    /// A backend notices a client gone within 100 ms even mid-statement
    /// (`client_connection_check_interval`): a killed consumer's locks go
    /// at once.
    pub fn up(&mut self) {
        let data = self.dir.join("data");
        let mut opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50 \
             -c client_connection_check_interval=100ms",
            self.port,
            self.dir.display()
        );
        if self.tls {
            let d = self.dir.display();
            opts.push_str(&format!(
                " -c ssl=on -c ssl_cert_file={d}/server.crt -c ssl_key_file={d}/server.key"
            ));
        }
        let out = self
            .cmd("pg_ctl")
            .args(["-D", data.to_str().unwrap(), "-o", &opts, "-w", "-t", "30"])
            .args(["-l", self.dir.join("log").to_str().unwrap(), "start"])
            .output()
            .expect("pg_ctl runs");
        assert!(
            out.status.success(),
            "pg_ctl start: {}{}",
            String::from_utf8_lossy(&out.stdout),
            std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
        );
        self.running = true;
    }

    /// Stops it at once (`-m immediate`: no checkpoint, clients cut).
    pub fn crash(&mut self) {
        let data = self.dir.join("data");
        let _ = self
            .cmd("pg_ctl")
            .args([
                "-D",
                data.to_str().unwrap(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        self.running = false;
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres` plus `query`.
    pub fn url(&self, query: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres{query}",
            self.port
        )
    }

    /// A client connection (its driver spawned on the current runtime).
    pub async fn client(&self) -> tokio_postgres::Client {
        let deadline = Instant::now() + DEADLINE;
        loop {
            match tokio_postgres::connect(&self.url(""), tokio_postgres::NoTls).await {
                Ok((client, conn)) => {
                    tokio::spawn(async move {
                        let _ = conn.await;
                    });
                    return client;
                }
                Err(e) => {
                    assert!(Instant::now() < deadline, "cannot connect to postgres: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if self.running {
            self.crash();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The first block of `page` whose info string is `info` (its lines).
pub fn block(page: &str, info: &str) -> String {
    let start = page.find(&format!("```{info}\n")).expect("the block") + info.len() + 4;
    let end = page[start..].find("```").expect("its end");
    page[start..start + end].to_string()
}

/// The SQL of the book's "Publishing from your database" page (its
/// ```sql blocks, in order; the worked example is ```sql,example):
/// what a user runs is what is tested.
pub fn documented_ddl() -> String {
    let page = include_str!("../../docs/src/outbox.md");
    let mut out = String::new();
    let mut inside = false;
    for line in page.lines() {
        if line == "```sql" {
            inside = true;
        } else if line.starts_with("```") {
            inside = false;
        } else if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}
