//! `soak` options, sans-I/O.

use std::path::PathBuf;
use std::time::Duration;

use crate::flags::{duration, num, pairs};

/// Everything `soak` runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct SoakOpts {
    /// How long to churn: cycles start until this has passed.
    pub run_for: Duration,
    /// At most this many cycles (`None`: as many as `run_for` allows).
    pub max_cycles: Option<usize>,
    /// Cycles not judged (allocator pools, Redis scripts, caches fill).
    pub warmup_cycles: usize,
    /// Report directory.
    pub out: PathBuf,
    /// corecast binary (`None`: next to the running binary).
    pub server_bin: Option<PathBuf>,
    /// redis-server binary.
    pub redis_bin: String,
    /// CPU of corecast and Redis.
    pub server_cpu: usize,
    /// CPU of the load (`None`: 1 when the machine has two CPUs, else 0).
    pub load_cpu: Option<usize>,
    /// Longest wait for the server to return to idle after a cycle.
    pub settle_timeout: Duration,
    /// JSON report on stdout.
    pub json: bool,
    /// No progress lines.
    pub quiet: bool,
}

impl Default for SoakOpts {
    fn default() -> Self {
        SoakOpts {
            run_for: Duration::from_secs(60),
            max_cycles: None,
            warmup_cycles: 3,
            out: PathBuf::from("soak-report"),
            server_bin: None,
            redis_bin: "redis-server".into(),
            server_cpu: 0,
            load_cpu: None,
            settle_timeout: Duration::from_secs(10),
            json: false,
            quiet: false,
        }
    }
}

/// Post-warm-up cycles the verdict needs (three thirds of at least one).
pub const MIN_JUDGED_CYCLES: usize = 3;

/// Parses the arguments after `soak`.
pub fn parse(args: &[String]) -> Result<SoakOpts, String> {
    let mut o = SoakOpts::default();
    for (flag, v) in pairs(args)? {
        match flag {
            "--json" => o.json = true,
            "--quiet" => o.quiet = true,
            "--minutes" => o.run_for = duration(flag, v).map(|d| d * 60)?,
            "--seconds" => o.run_for = duration(flag, v)?,
            "--cycles" => o.max_cycles = Some(num(flag, v)?),
            "--warmup-cycles" => o.warmup_cycles = num(flag, v)?,
            "--out" => o.out = PathBuf::from(v),
            "--server-bin" => o.server_bin = Some(PathBuf::from(v)),
            "--redis-bin" => o.redis_bin = v.to_string(),
            "--server-cpu" => o.server_cpu = num(flag, v)?,
            "--load-cpu" => o.load_cpu = Some(num(flag, v)?),
            "--settle-timeout" => o.settle_timeout = duration(flag, v)?,
            _ => return Err(format!("unknown option `{flag}` for soak")),
        }
    }
    if o.run_for.is_zero() {
        return Err("soak: --minutes / --seconds must be > 0".into());
    }
    if o.max_cycles
        .is_some_and(|c| c < o.warmup_cycles + MIN_JUDGED_CYCLES)
    {
        return Err(format!(
            "soak: --cycles must leave at least {MIN_JUDGED_CYCLES} cycles after --warmup-cycles"
        ));
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn minutes_seconds_and_limits() {
        let o = parse(&args("--minutes 30 --out /tmp/x --load-cpu 1")).unwrap();
        assert_eq!(o.run_for, Duration::from_secs(1800));
        assert_eq!(o.out, PathBuf::from("/tmp/x"));
        assert_eq!(o.load_cpu, Some(1));
        let o = parse(&args("--seconds 40 --cycles 9 --warmup-cycles 2 --quiet")).unwrap();
        assert_eq!(o.run_for, Duration::from_secs(40));
        assert_eq!((o.max_cycles, o.warmup_cycles, o.quiet), (Some(9), 2, true));
        assert_eq!(parse(&[]).unwrap(), SoakOpts::default());
        for bad in [
            "--seconds 0",
            "--minutes x",
            "--cycles 4",
            "--bogus 1",
            "--out",
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad}");
        }
    }
}
