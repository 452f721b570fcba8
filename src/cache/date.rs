//! HTTP dates (RFC 9110 5.6.7), for `Expires` and `Date`: the preferred
//! IMF-fixdate form (`Sun, 06 Nov 1994 08:49:37 GMT`), which is what
//! origins send. The obsolete RFC 850 and asctime forms are not parsed:
//! an `Expires` in them reads as invalid, which RFC 9111 5.3 says means
//! "already expired" — the safe side for a shared cache.

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// Milliseconds since the Unix epoch of an IMF-fixdate; `None` if the
/// value is not one (or is before 1970).
pub fn parse_ms(v: &[u8]) -> Option<u64> {
    let v = v.trim_ascii();
    // "Sun, 06 Nov 1994 08:49:37 GMT": exactly 29 bytes.
    if v.len() != 29 || &v[3..5] != b", " || &v[25..] != b" GMT" {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u64> {
        let d = &v[r];
        d.iter()
            .all(u8::is_ascii_digit)
            .then(|| d.iter().fold(0u64, |n, c| n * 10 + u64::from(c - b'0')))
    };
    let sep = |i: usize, c: u8| v[i] == c;
    if !(sep(7, b' ') && sep(11, b' ') && sep(16, b' ') && sep(19, b':') && sep(22, b':')) {
        return None;
    }
    let day = num(5..7)?;
    let month = MONTHS.iter().position(|m| &v[8..11] == *m)? as u64 + 1;
    let year = num(12..16)?;
    let (h, m, s) = (num(17..19)?, num(20..22)?, num(23..25)?);
    if !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 || year < 1970 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some((days * 86_400 + h * 3600 + m * 60 + s) * 1000)
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
    fn imf_fixdates_parse_and_other_forms_do_not() {
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
        for bad in [
            &b"0"[..],
            b"-1",
            b"Sunday, 06-Nov-94 08:49:37 GMT",
            b"Sun Nov  6 08:49:37 1994",
            b"Sun, 06 Foo 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 25:49:37 GMT",
            b"Sun, 06 Nov 1994 08:49:37 UTC",
            b"Sun, 06 Nov 1969 08:49:37 GMT",
        ] {
            assert_eq!(parse_ms(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
