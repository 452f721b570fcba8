//! A test CA for the TLS client tests (`rediss://`, `https://` origins):
//! made by `openssl` when the tests run, no key committed.

#![allow(dead_code)] // not every helper is used by every test

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("the command runs (openssl installed?)");
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A test CA in its own directory, and leaves signed by it.
pub struct Pki {
    dir: PathBuf,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("tls-client-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        run(Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec"])
            .args(["-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"])
            .args([
                "-days",
                "2",
                "-subj",
                &format!("/CN=corecast redis test CA {name}"),
            ])
            .arg("-keyout")
            .arg(dir.join("ca.key"))
            .arg("-out")
            .arg(dir.join("ca.pem")));
        Pki { dir }
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A leaf for `localhost` only (no IP address: a connection to
    /// 127.0.0.1 must be refused for the name).
    pub fn localhost(&self) -> (PathBuf, PathBuf) {
        self.leaf("leaf", "DNS:localhost")
    }

    /// A leaf `file`.pem / `file`.key valid for `sans`
    /// (`DNS:localhost,IP:127.0.0.1`).
    pub fn leaf(&self, file: &str, sans: &str) -> (PathBuf, PathBuf) {
        let d = &self.dir;
        let (cert, key, csr, ext) = (
            d.join(format!("{file}.pem")),
            d.join(format!("{file}.key")),
            d.join(format!("{file}.csr")),
            d.join(format!("{file}.ext")),
        );
        std::fs::write(&ext, format!("subjectAltName={sans}\n")).unwrap();
        run(Command::new("openssl")
            .args(["genpkey", "-algorithm", "EC"])
            .args(["-pkeyopt", "ec_paramgen_curve:P-256", "-out"])
            .arg(&key));
        run(Command::new("openssl")
            .args(["req", "-new", "-subj", "/CN=localhost", "-key"])
            .arg(&key)
            .arg("-out")
            .arg(&csr));
        run(Command::new("openssl")
            .args(["x509", "-req", "-days", "2", "-in"])
            .arg(&csr)
            .arg("-CA")
            .arg(self.ca())
            .arg("-CAkey")
            .arg(d.join("ca.key"))
            .args(["-CAcreateserial", "-extfile"])
            .arg(&ext)
            .arg("-out")
            .arg(&cert));
        (cert, key)
    }
}

pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}
