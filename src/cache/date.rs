//! HTTP dates (RFC 9110 5.6.7), for `Expires` and `Date`. A recipient
//! "MUST accept all three HTTP-date formats": the preferred IMF-fixdate
//! (`Sun, 06 Nov 1994 08:49:37 GMT`, what origins send), and the obsolete
//! RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime
//! (`Sun Nov  6 08:49:37 1994`) forms. Anything else reads as invalid,
//! which RFC 9111 5.3 says means "already expired" for `Expires` — the
//! safe side for a shared cache.

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// The date and time fields of an HTTP-date, as written.
struct Fields {
    year: u64,
    month: u64,
    day: u64,
    h: u64,
    m: u64,
    s: u64,
}

/// Milliseconds since the Unix epoch of an HTTP-date in any of the three
/// forms; `None` if the value is none of them (or is before 1970).
pub fn parse_ms(v: &[u8]) -> Option<u64> {
    let v = v.trim_ascii();
    let f = imf_fixdate(v)
        .or_else(|| rfc850(v, this_year()))
        .or_else(|| asctime(v))?;
    let ok = (1..=31).contains(&f.day) && f.h <= 23 && f.m <= 59 && f.s <= 60;
    if !ok || f.year < 1970 {
        return None;
    }
    let days = days_from_civil(f.year, f.month, f.day);
    Some((days * 86_400 + f.h * 3600 + f.m * 60 + f.s) * 1000)
}

/// Digits as a number; `None` unless every byte is a digit.
fn num(d: &[u8]) -> Option<u64> {
    (!d.is_empty() && d.iter().all(u8::is_ascii_digit))
        .then(|| d.iter().fold(0u64, |n, c| n * 10 + u64::from(c - b'0')))
}

fn month(m: &[u8]) -> Option<u64> {
    MONTHS.iter().position(|x| m == *x).map(|i| i as u64 + 1)
}

/// `08:49:37`.
fn clock(t: &[u8]) -> Option<(u64, u64, u64)> {
    if t.len() != 8 || t[2] != b':' || t[5] != b':' {
        return None;
    }
    Some((num(&t[0..2])?, num(&t[3..5])?, num(&t[6..8])?))
}

/// `Sun, 06 Nov 1994 08:49:37 GMT`: exactly 29 bytes.
fn imf_fixdate(v: &[u8]) -> Option<Fields> {
    if v.len() != 29 || &v[3..5] != b", " || &v[25..] != b" GMT" {
        return None;
    }
    if !(v[7] == b' ' && v[11] == b' ' && v[16] == b' ') {
        return None;
    }
    let (h, m, s) = clock(&v[17..25])?;
    Some(Fields {
        day: num(&v[5..7])?,
        month: month(&v[8..11])?,
        year: num(&v[12..16])?,
        h,
        m,
        s,
    })
}

/// `Sunday, 06-Nov-94 08:49:37 GMT`. A two-digit year more than 50 years
/// in the future is the most recent past year with those digits (RFC 9110
/// 5.6.7).
fn rfc850(v: &[u8], this_year: u64) -> Option<Fields> {
    let comma = v.iter().position(|&c| c == b',')?;
    let rest = v[comma + 1..].strip_prefix(b" ")?;
    // "06-Nov-94 08:49:37 GMT": 22 bytes.
    if rest.len() != 22 || rest[2] != b'-' || rest[6] != b'-' || &rest[18..] != b" GMT" {
        return None;
    }
    if rest[9] != b' ' || !v[..comma].iter().all(u8::is_ascii_alphabetic) {
        return None;
    }
    let yy = num(&rest[7..9])?;
    let mut year = this_year - this_year % 100 + yy;
    if year > this_year + 50 {
        year -= 100;
    }
    let (h, m, s) = clock(&rest[10..18])?;
    Some(Fields {
        day: num(&rest[0..2])?,
        month: month(&rest[3..6])?,
        year,
        h,
        m,
        s,
    })
}

/// `Sun Nov  6 08:49:37 1994` (the day padded with a space): 24 bytes.
fn asctime(v: &[u8]) -> Option<Fields> {
    if v.len() != 24 || v[3] != b' ' || v[7] != b' ' || v[10] != b' ' || v[19] != b' ' {
        return None;
    }
    let day = match v[8] {
        b' ' => num(&v[9..10])?,
        _ => num(&v[8..10])?,
    };
    let (h, m, s) = clock(&v[11..19])?;
    Some(Fields {
        day,
        month: month(&v[4..7])?,
        year: num(&v[20..24])?,
        h,
        m,
        s,
    })
}

/// The current year (UTC), for two-digit years.
fn this_year() -> u64 {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Good enough for a pivot: 365.2425 days per year.
    1970 + secs / 31_556_952
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`, for years from 1970).
fn days_from_civil(y: u64, m: u64, d: u64) -> u64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_three_forms_parse_and_nothing_else() {
        // RFC 9110's example: 784111777 seconds after the epoch.
        assert_eq!(
            parse_ms(b"Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777_000)
        );
        assert_eq!(parse_ms(b"Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(
            parse_ms(b"Tue, 29 Feb 2000 12:00:00 GMT"),
            Some(951_825_600_000)
        );
        // The obsolete forms of RFC 9110's example.
        assert_eq!(
            parse_ms(b"Sunday, 06-Nov-94 08:49:37 GMT"),
            Some(784_111_777_000)
        );
        assert_eq!(parse_ms(b"Sun Nov  6 08:49:37 1994"), Some(784_111_777_000));
        assert_eq!(parse_ms(b"Tue Feb 29 12:00:00 2000"), Some(951_825_600_000));
        for bad in [
            &b"0"[..],
            b"-1",
            b"Sunday, 06-Nov-94 08:49:37 UTC",
            b"Sunday 06-Nov-94 08:49:37 GMT",
            b"Sun Nov 6 08:49:37 1994",
            b"Sun Nov  6 08:49:37 94",
            b"Sun, 06 Foo 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 25:49:37 GMT",
            b"Sun, 06 Nov 1994 08:49:37 UTC",
            b"Sun, 06 Nov 1969 08:49:37 GMT",
        ] {
            assert_eq!(parse_ms(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn two_digit_years_stay_within_fifty_years_ahead() {
        let f = |v: &[u8], now| rfc850(v, now).map(|f| f.year);
        assert_eq!(f(b"Sunday, 06-Nov-94 08:49:37 GMT", 2026), Some(1994));
        assert_eq!(f(b"Monday, 06-Nov-30 08:49:37 GMT", 2026), Some(2030));
        assert_eq!(f(b"Monday, 06-Nov-76 08:49:37 GMT", 2026), Some(2076));
        assert_eq!(f(b"Monday, 06-Nov-77 08:49:37 GMT", 2026), Some(1977));
        assert_eq!(f(b"Monday, 06-Nov-10 08:49:37 GMT", 2099), Some(2010));
    }
}
