//! How long an answer stays fresh, and how long it may be served stale, for a shared cache
//! (RFC 9111 4.2 and RFC 5861): `s-maxage` over `max-age` over `expires` minus `date`, less the
//! upstream `age`; never longer than the configured TTL. `stale-while-revalidate` and
//! `stale-if-error` from the answer, else the configured windows; `must-revalidate` and
//! `proxy-revalidate` turn stale serving off for that answer.

use crate::cache::not_stored::NotStored;
use crate::config::Lifetimes;
use std::time::UNIX_EPOCH;

/// The lifetime of one stored answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Freshness {
    /// Fresh for this long from now.
    pub fresh_ms: u64,
    /// Then served stale while one refresh runs, for this long.
    pub swr_ms: u64,
    /// Then (counted from expiry too) served stale when the origin fails, for this long.
    pub sie_ms: u64,
    /// The answer's age when it arrived (its `age` header), in seconds.
    pub age_s: u64,
}

/// The caching directives of one answer, as read from its headers.
#[derive(Debug, Default)]
struct Directives {
    max_age: Option<u64>,
    s_maxage: Option<u64>,
    swr: Option<u64>,
    sie: Option<u64>,
    must_revalidate: bool,
    cache_control: bool,
    pragma_no_cache: bool,
    expires: Option<Option<u64>>,
    date: Option<u64>,
    age: u64,
}

/// The decision from the headers alone (status, body and size are `storable`'s).
pub fn freshness<'h, I>(
    headers: I,
    allowed: &Lifetimes,
    now_ms: u64,
) -> Result<Freshness, NotStored>
where
    I: IntoIterator<Item = (&'h str, &'h [u8])>,
{
    if allowed.ttl_seconds == 0 {
        return Err(NotStored::TtlZero);
    }
    let mut d = Directives::default();
    for (name, value) in headers {
        match name {
            "cache-control" => {
                d.cache_control = true;
                read_cache_control(value, &mut d)?;
            }
            "pragma" => d.pragma_no_cache |= has_token(value, b"no-cache"),
            // An invalid `expires` means already expired (RFC 9111 5.3).
            "expires" => d.expires = Some(http_date(value)),
            "date" => d.date = http_date(value),
            "age" => d.age = parse_seconds(Some(value.trim_ascii())),
            _ => {}
        }
    }
    // HTTP/1.0 caches' `no-cache`, honoured when no cache-control says otherwise.
    if d.pragma_no_cache && !d.cache_control {
        return Err(NotStored::NoCache);
    }
    let lifetime_s = d.s_maxage.or(d.max_age).or_else(|| {
        let expires = d.expires?;
        let date = d.date.unwrap_or(now_ms / 1000);
        Some(expires.map_or(0, |e| e.saturating_sub(date)))
    });
    let limit_s = lifetime_s.map_or(allowed.ttl_seconds, |l| l.min(allowed.ttl_seconds));
    let fresh_s = limit_s.saturating_sub(d.age);
    if fresh_s == 0 {
        return Err(NotStored::MaxAgeZero);
    }
    let (swr_s, sie_s) = if d.must_revalidate {
        (0, 0)
    } else {
        (
            d.swr.unwrap_or(allowed.stale_while_revalidate_seconds),
            d.sie.unwrap_or(allowed.stale_if_error_seconds),
        )
    };
    Ok(Freshness {
        fresh_ms: fresh_s.saturating_mul(1000),
        swr_ms: swr_s.saturating_mul(1000),
        sie_ms: sie_s.saturating_mul(1000),
        age_s: d.age,
    })
}

fn read_cache_control(value: &[u8], d: &mut Directives) -> Result<(), NotStored> {
    for directive in value.split(|&b| b == b',') {
        let directive = directive.trim_ascii();
        let (name, arg) = match directive.iter().position(|&b| b == b'=') {
            Some(i) => (
                &directive[..i],
                Some(trim_quotes(directive[i + 1..].trim_ascii())),
            ),
            None => (directive, None),
        };
        let name = name.trim_ascii().to_ascii_lowercase();
        match name.as_slice() {
            b"no-store" => return Err(NotStored::NoStore),
            b"private" => return Err(NotStored::Private),
            b"no-cache" => return Err(NotStored::NoCache),
            // An unparseable value counts as 0 (RFC 9111 4.2.1).
            b"max-age" => d.max_age = Some(parse_seconds(arg)),
            b"s-maxage" => d.s_maxage = Some(parse_seconds(arg)),
            b"stale-while-revalidate" => d.swr = Some(parse_seconds(arg)),
            b"stale-if-error" => d.sie = Some(parse_seconds(arg)),
            b"must-revalidate" | b"proxy-revalidate" => d.must_revalidate = true,
            _ => {}
        }
    }
    Ok(())
}

fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

fn trim_quotes(v: &[u8]) -> &[u8] {
    v.strip_prefix(b"\"")
        .and_then(|v| v.strip_suffix(b"\""))
        .unwrap_or(v)
}

fn parse_seconds(arg: Option<&[u8]>) -> u64 {
    let Some(digits) = arg else { return 0 };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return 0;
    }
    digits
        .iter()
        .try_fold(0u64, |acc, &d| {
            acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })
        .unwrap_or(u64::MAX)
}

/// An HTTP date (IMF-fixdate, RFC 850 or asctime) in seconds since the Unix epoch.
pub fn http_date(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let time = httpdate::parse_http_date(text).ok()?;
    time.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Seconds since the Unix epoch as an IMF-fixdate.
    fn format_http_date(seconds: u64) -> String {
        httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(seconds))
    }

    const NOW_MS: u64 = 1_700_000_000_000;

    fn allowed() -> Lifetimes {
        Lifetimes {
            ttl_seconds: 60,
            stale_while_revalidate_seconds: 0,
            stale_if_error_seconds: 0,
        }
    }

    fn of(headers: &[(&str, &str)]) -> Result<Freshness, NotStored> {
        of_with(headers, &allowed())
    }

    fn of_with(headers: &[(&str, &str)], allowed: &Lifetimes) -> Result<Freshness, NotStored> {
        freshness(
            headers.iter().map(|(n, v)| (*n, v.as_bytes())),
            allowed,
            NOW_MS,
        )
    }

    fn fresh_s(headers: &[(&str, &str)]) -> u64 {
        of(headers).unwrap().fresh_ms / 1000
    }

    fn date(offset_s: i64) -> String {
        format_http_date((NOW_MS / 1000).saturating_add_signed(offset_s))
    }

    #[test]
    fn the_configured_ttl_without_directives() {
        assert_eq!(fresh_s(&[]), 60);
        let zero = Lifetimes {
            ttl_seconds: 0,
            ..allowed()
        };
        assert_eq!(of_with(&[], &zero), Err(NotStored::TtlZero));
    }

    #[test]
    fn s_maxage_over_max_age_over_expires() {
        assert_eq!(fresh_s(&[("cache-control", "max-age=5, s-maxage=10")]), 10);
        assert_eq!(fresh_s(&[("cache-control", "max-age=5")]), 5);
        assert_eq!(fresh_s(&[("cache-control", "s-maxage=\"7\"")]), 7);
        assert_eq!(
            fresh_s(&[("cache-control", "max-age=600")]),
            60,
            "capped by the TTL"
        );
        let expires = date(20);
        assert_eq!(fresh_s(&[("expires", &expires)]), 20);
        let (d, e) = (date(-100), date(-70));
        assert_eq!(
            fresh_s(&[("date", &d), ("expires", &e)]),
            30,
            "expires minus date"
        );
        assert_eq!(
            fresh_s(&[("cache-control", "max-age=3"), ("expires", &expires)]),
            3
        );
    }

    #[test]
    fn the_upstream_age_is_subtracted() {
        assert_eq!(
            fresh_s(&[("cache-control", "max-age=60"), ("age", "55")]),
            5
        );
        assert_eq!(
            of(&[("cache-control", "max-age=60"), ("age", "60")]),
            Err(NotStored::MaxAgeZero)
        );
        assert_eq!(
            of(&[("cache-control", "max-age=60"), ("age", "5")])
                .unwrap()
                .age_s,
            5
        );
    }

    #[test]
    fn already_expired_answers_are_not_stored() {
        for headers in [
            &[("expires", "0")][..],
            &[("expires", "yesterday")],
            &[("expires", "Thu, 01 Jan 1970 00:00:00 GMT")],
            &[("cache-control", "max-age=0")],
            &[("cache-control", "max-age=abc")],
        ] {
            assert_eq!(of(headers), Err(NotStored::MaxAgeZero), "{headers:?}");
        }
    }

    #[test]
    fn refusals() {
        assert_eq!(
            of(&[("cache-control", "no-store")]),
            Err(NotStored::NoStore)
        );
        assert_eq!(
            of(&[("cache-control", "max-age=5, Private")]),
            Err(NotStored::Private)
        );
        assert_eq!(
            of(&[("cache-control", "no-cache")]),
            Err(NotStored::NoCache)
        );
        assert_eq!(of(&[("pragma", "no-cache")]), Err(NotStored::NoCache));
        assert_eq!(
            fresh_s(&[("pragma", "no-cache"), ("cache-control", "max-age=5")]),
            5,
            "cache-control wins over pragma"
        );
    }

    #[test]
    fn stale_windows_from_the_answer_or_the_configuration() {
        let configured = Lifetimes {
            stale_while_revalidate_seconds: 10,
            stale_if_error_seconds: 300,
            ..allowed()
        };
        let f = of_with(&[], &configured).unwrap();
        assert_eq!((f.swr_ms, f.sie_ms), (10_000, 300_000));
        let f = of_with(
            &[(
                "cache-control",
                "max-age=5, stale-while-revalidate=30, stale-if-error=60",
            )],
            &configured,
        )
        .unwrap();
        assert_eq!((f.fresh_ms, f.swr_ms, f.sie_ms), (5_000, 30_000, 60_000));
        for directive in ["max-age=5, must-revalidate", "proxy-revalidate"] {
            let f = of_with(&[("cache-control", directive)], &configured).unwrap();
            assert_eq!((f.swr_ms, f.sie_ms), (0, 0), "{directive}");
        }
    }

    #[test]
    fn http_dates_in_all_three_forms() {
        assert_eq!(http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"), Some(784111777));
        assert_eq!(
            http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"),
            Some(784111777)
        );
        assert_eq!(http_date(b"Sun Nov  6 08:49:37 1994"), Some(784111777));
        assert_eq!(http_date(b"0"), None);
        assert_eq!(http_date(b"\xff"), None);
        assert_eq!(format_http_date(784111777), "Sun, 06 Nov 1994 08:49:37 GMT");
    }
}
