//! The flag-value grammar every subcommand shares (sans-I/O): flag/value
//! pairs, numbers, durations, address lists. A leaf: `args` and
//! `paper::opts` both use it, neither imports the other's parsers.

use std::net::Ipv4Addr;
use std::time::Duration;

/// Flag/value pairs; switches get an empty value.
pub fn pairs(args: &[String]) -> Result<Vec<(&str, &str)>, String> {
    const SWITCHES: [&str; 11] = [
        "--json",
        "--tls",
        "--tls-insecure",
        "--quiet",
        "--legacy-driver",
        "--plain-uring",
        "--unique",
        "--cluster",
        "--deflate",
        "--sse",
        "--json-payload",
    ];
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(flag) = args.get(i) {
        if !flag.starts_with('-') {
            return Err(format!("unexpected argument `{flag}`"));
        }
        if let Some((f, v)) = flag.split_once('=') {
            out.push((f, v));
            i += 1;
        } else if SWITCHES.contains(&flag.as_str()) {
            out.push((flag.as_str(), ""));
            i += 1;
        } else {
            let v = args
                .get(i + 1)
                .ok_or_else(|| format!("`{flag}` needs a value"))?;
            out.push((flag.as_str(), v.as_str()));
            i += 2;
        }
    }
    Ok(out)
}

/// A number, `_` separators allowed (`19_900`).
pub fn num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.replace('_', "")
        .parse()
        .map_err(|_| format!("{flag}: `{v}` is not a valid number"))
}

/// A finite number above 0.
pub fn positive(flag: &str, v: &str) -> Result<f64, String> {
    match num::<f64>(flag, v)? {
        r if r > 0.0 && r.is_finite() => Ok(r),
        _ => Err(format!("{flag}: must be a positive number")),
    }
}

/// `20`, `20s`, `500ms`, `2m`, `1.5` (seconds).
pub fn duration(flag: &str, v: &str) -> Result<Duration, String> {
    let (digits, scale) = if let Some(d) = v.strip_suffix("ms") {
        (d, 0.001)
    } else if let Some(d) = v.strip_suffix('s') {
        (d, 1.0)
    } else if let Some(d) = v.strip_suffix('m') {
        (d, 60.0)
    } else {
        (v, 1.0)
    };
    match digits
        .parse::<f64>()
        .map(|x| Duration::try_from_secs_f64(x * scale))
    {
        Ok(Ok(d)) => Ok(d),
        _ => Err(format!("{flag}: `{v}` is not a duration")),
    }
}

/// `127.0.0.2-127.0.0.40`, `10.0.0.1,10.0.0.2`, or a single address.
pub fn ip_list(v: &str) -> Result<Vec<Ipv4Addr>, String> {
    let mut out = Vec::new();
    for part in v.split(',').filter(|p| !p.is_empty()) {
        let ip = |s: &str| {
            s.trim()
                .parse::<Ipv4Addr>()
                .map_err(|_| format!("--source-ips: `{s}` is not an IPv4 address"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (u32::from(ip(a)?), u32::from(ip(b)?));
                if b < a || b - a >= 1 << 16 {
                    return Err(format!("--source-ips: bad range `{part}`"));
                }
                out.extend((a..=b).map(Ipv4Addr::from));
            }
            None => out.push(ip(part)?),
        }
    }
    if out.is_empty() {
        return Err("--source-ips: empty list".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_ip_lists() {
        assert_eq!(duration("", "500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("", "2m"), Ok(Duration::from_secs(120)));
        assert_eq!(duration("", "1.5"), Ok(Duration::from_millis(1500)));
        assert!(duration("", "-1").is_err());
        assert!(
            duration("", "1e20").is_err(),
            "overflow is an error, not a panic"
        );
        assert!(duration("", "inf").is_err());
        let ips = ip_list("127.0.0.254-127.0.1.1,10.0.0.1").unwrap();
        assert_eq!(ips.len(), 5);
        assert_eq!(ips[2], Ipv4Addr::new(127, 0, 1, 0));
        assert!(ip_list("127.0.0.9-127.0.0.1").is_err());
        assert!(ip_list("").is_err());
    }
}
