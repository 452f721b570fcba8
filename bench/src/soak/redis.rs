//! A minimal blocking Redis client for the soak's samples (`INFO`,
//! `PUBSUB`): commands out, RESP2 replies in. The parser is sans-I/O.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Largest reply the sampler takes (`PUBSUB CHANNELS` of a busy server).
const MAX_REPLY: usize = 8 << 20;

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`, or a bulk string.
    Text(String),
    /// `:N`.
    Int(i64),
    /// `*N` of replies.
    Array(Vec<Reply>),
    /// `$-1` / `*-1`.
    Nil,
    /// `-ERR …`.
    Error(String),
}

/// Parses one reply at the front of `buf`: the reply and its length, or
/// `None` if more bytes are needed.
pub fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let line = std::str::from_utf8(&buf[1..eol]).map_err(|e| e.to_string())?;
    let after = eol + 2;
    let int = || {
        line.parse::<i64>()
            .map_err(|_| format!("bad length `{line}`"))
    };
    match buf.first() {
        Some(b'+') => Ok(Some((Reply::Text(line.into()), after))),
        Some(b'-') => Ok(Some((Reply::Error(line.into()), after))),
        Some(b':') => Ok(Some((Reply::Int(int()?), after))),
        Some(b'$') if int()? < 0 => Ok(Some((Reply::Nil, after))),
        Some(b'$') => {
            let n = usize::try_from(int()?).map_err(|e| e.to_string())?;
            let Some(body) = buf.get(after..after + n) else {
                return Ok(None);
            };
            let text = String::from_utf8_lossy(body).into_owned();
            Ok((buf.len() >= after + n + 2).then_some((Reply::Text(text), after + n + 2)))
        }
        Some(b'*') if int()? < 0 => Ok(Some((Reply::Nil, after))),
        Some(b'*') => {
            let (mut items, mut at) = (Vec::new(), after);
            for _ in 0..int()? {
                match parse(&buf[at..])? {
                    Some((r, n)) => {
                        items.push(r);
                        at += n;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Array(items), at)))
        }
        _ => Err("not a RESP2 reply".into()),
    }
}

/// One connection to Redis.
pub struct Redis {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Redis {
    /// Connects to `127.0.0.1:port`.
    pub fn connect(port: u16) -> io::Result<Redis> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(Redis {
            stream,
            buf: Vec::new(),
        })
    }

    /// Runs one command.
    pub fn cmd(&mut self, args: &[&str]) -> io::Result<Reply> {
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.stream.write_all(out.as_bytes())?;
        loop {
            if let Some((r, n)) = parse(&self.buf).map_err(io::Error::other)? {
                self.buf.drain(..n);
                return match r {
                    Reply::Error(e) => Err(io::Error::other(format!("redis: {e}"))),
                    r => Ok(r),
                };
            }
            if self.buf.len() > MAX_REPLY {
                return Err(io::Error::other("redis reply too large"));
            }
            let mut chunk = [0u8; 16 * 1024];
            match self.stream.read(&mut chunk)? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// A command answering an integer.
    pub fn int(&mut self, args: &[&str]) -> io::Result<u64> {
        match self.cmd(args)? {
            Reply::Int(n) => Ok(n.max(0) as u64),
            r => Err(io::Error::other(format!(
                "{args:?}: expected an integer, got {r:?}"
            ))),
        }
    }

    /// The length of a command's array answer.
    pub fn len(&mut self, args: &[&str]) -> io::Result<u64> {
        match self.cmd(args)? {
            Reply::Array(v) => Ok(v.len() as u64),
            r => Err(io::Error::other(format!(
                "{args:?}: expected an array, got {r:?}"
            ))),
        }
    }

    /// A field of `INFO section` (`used_memory`, `connected_clients`, or a
    /// `keys=`/`expires=` of `db0`), as a number; 0 when absent (an empty
    /// keyspace lists no `db0`).
    pub fn info(&mut self, section: &str, field: &str) -> io::Result<u64> {
        let Reply::Text(text) = self.cmd(&["INFO", section])? else {
            return Err(io::Error::other("INFO: not a string"));
        };
        Ok(info_field(&text, field).unwrap_or(0))
    }
}

/// `field` in an INFO text: a `field:N` line, or a `k=N` of a line's
/// `a=1,b=2` list (`keys` of `db0:keys=3,expires=1,avg_ttl=0`).
pub fn info_field(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        if let Some(v) = l.strip_prefix(field).and_then(|r| r.strip_prefix(':')) {
            return v.trim().parse().ok();
        }
        let (_, list) = l.split_once(':')?;
        list.split(',')
            .find_map(|kv| kv.strip_prefix(field)?.strip_prefix('='))
            .and_then(|v| v.trim().parse().ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_whole_or_ask_for_more() {
        let all = b"*3\r\n$3\r\nabc\r\n:-4\r\n*-1\r\n+OK\r\n";
        let want = Reply::Array(vec![Reply::Text("abc".into()), Reply::Int(-4), Reply::Nil]);
        assert_eq!(parse(all).unwrap(), Some((want, all.len() - 5)));
        for cut in 0..all.len() - 5 {
            assert_eq!(parse(&all[..cut]).unwrap(), None, "cut {cut}");
        }
        assert_eq!(
            parse(b"-ERR no\r\n").unwrap(),
            Some((Reply::Error("ERR no".into()), 9))
        );
        assert!(parse(b"?x\r\n").is_err());
    }

    #[test]
    fn info_fields() {
        let text =
            "# Memory\r\nused_memory:1024\r\n# Keyspace\r\ndb0:keys=7,expires=5,avg_ttl=9\r\n";
        assert_eq!(info_field(text, "used_memory"), Some(1024));
        assert_eq!(info_field(text, "keys"), Some(7));
        assert_eq!(info_field(text, "expires"), Some(5));
        assert_eq!(info_field(text, "nothing"), None);
    }
}
