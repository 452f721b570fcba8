//! The value syntaxes options share (numbers, sizes, durations, switches,
//! path lists, secrets), for the options table's setters.

use std::time::Duration;

use crate::secret::Secret;

/// A comma-separated list of file paths (empty entries skipped); a path
/// cannot contain a comma.
pub(super) fn paths(v: &str) -> Vec<std::path::PathBuf> {
    v.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(std::path::PathBuf::from)
        .collect()
}

pub(super) fn non_empty_secret(v: &str) -> Result<Option<Secret>, String> {
    if v.is_empty() {
        return Err("must not be empty".into());
    }
    Ok(Some(Secret(v.to_string())))
}

pub(super) fn parse_num(v: &str) -> Result<usize, String> {
    v.trim().parse().map_err(|e| format!("{e}"))
}

pub(super) fn set_num(slot: &mut usize, v: &str) -> Result<(), String> {
    *slot = parse_num(v)?;
    Ok(())
}

pub(super) fn set_bool(slot: &mut bool, v: &str) -> Result<(), String> {
    *slot = match v {
        "1" | "true" | "yes" | "on" => true,
        "0" | "false" | "no" | "off" | "" => false,
        _ => return Err("expected true or false".into()),
    };
    Ok(())
}

pub(super) fn set_size(slot: &mut usize, v: &str) -> Result<(), String> {
    *slot = parse_size(v)?;
    Ok(())
}

pub(super) fn set_duration(slot: &mut Duration, v: &str) -> Result<(), String> {
    *slot = parse_duration(v)?;
    Ok(())
}

pub(super) fn set_positive_duration(slot: &mut Duration, v: &str) -> Result<(), String> {
    *slot = Some(parse_duration(v)?)
        .filter(|d| !d.is_zero())
        .ok_or("must be more than 0")?;
    Ok(())
}

/// Parses `123`, `4KiB`, `16MiB`, `1GiB` (also `K`, `M`, `G`, `KB`…, all
/// binary multiples), without overflowing.
pub fn parse_size(v: &str) -> Result<usize, String> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| "expected a number of bytes".to_string())?;
    let mult: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("unknown size unit `{unit}`")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| "size too large".to_string())
}

/// Parses `250ms`, `10s`, `2m`, or a bare number of seconds.
pub fn parse_duration(v: &str) -> Result<Duration, String> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: u64 = num.parse().map_err(|_| "expected a duration".to_string())?;
    match unit {
        "" | "s" => Ok(Duration::from_secs(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "m" => n
            .checked_mul(60)
            .map(Duration::from_secs)
            .ok_or_else(|| "duration too large".to_string()),
        _ => Err(format!("unknown duration unit `{unit}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_parse() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("2k").unwrap(), 2048);
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("5h").is_err());
    }
}

/// The most workers one process runs: the mesh between them is N × (N−1)
/// rings, so the bound also bounds their memory.
pub const MAX_WORKERS: usize = 64;

/// `--workers`: a count, or one per CPU the process may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    /// Exactly this many (1 = the single pinned worker).
    Count(usize),
    /// One per CPU of `--cpus`, or per CPU the process may use.
    Auto,
}

impl Workers {
    pub(super) fn parse(v: &str) -> Result<Workers, String> {
        let v = v.trim();
        if v.eq_ignore_ascii_case("auto") {
            return Ok(Workers::Auto);
        }
        match v.parse::<usize>() {
            Ok(n) if (1..=MAX_WORKERS).contains(&n) => Ok(Workers::Count(n)),
            _ => Err(format!("expected auto or a count from 1 to {MAX_WORKERS}")),
        }
    }
}

/// A CPU list as `taskset` and cgroups write it: `0-3`, `0,2`, `0-1,4`.
pub(super) fn parse_cpus(v: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |s: &str| s.trim().parse::<usize>().map_err(|_| bad_list(v));
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(part)?, num(part)?),
        };
        if lo > hi || hi >= 1024 {
            return Err(bad_list(v));
        }
        for cpu in lo..=hi {
            if cpus.contains(&cpu) {
                return Err(format!("CPU {cpu} is listed twice in {v:?}"));
            }
            cpus.push(cpu);
        }
    }
    if cpus.is_empty() || cpus.len() > MAX_WORKERS {
        return Err(format!("expected 1 to {MAX_WORKERS} CPUs in {v:?}"));
    }
    Ok(cpus)
}

fn bad_list(v: &str) -> String {
    format!("expected a CPU list such as 0-3 or 0,2, got {v:?}")
}
