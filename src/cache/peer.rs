//! An entry another Envoy stored in the fleet's L2, checked as if the origin had just answered
//! it. The fleet key says a fleet member wrote it; this says it is something this Envoy would
//! have stored itself, for no longer than this Envoy would keep it, and born no later than now:
//! an entry born in the future would escape every purge until then (and, clamped at each read,
//! for ever). One born later than the fleet's clock skew allows is refused; one within it is
//! taken as born now (an Envoy whose clock runs ahead only loses entries that a purge made just
//! before their fetch reaches).

use crate::cache::entry::Entry;
use crate::cache::headers::replayed;
use crate::cache::not_stored::NotStored;
use crate::cache::storable::{admissible, body_storable};
use crate::config::Lifetimes;
use crate::request::key::CacheKey;

/// What the checks measure an entry against.
#[derive(Debug, Clone, Copy)]
pub struct Bounds<'a> {
    pub key: &'a CacheKey,
    /// What this Envoy allows the request that found the entry.
    pub lifetimes: &'a Lifetimes,
    pub vary_headers: &'a [String],
    pub max_entry_bytes: usize,
    pub now_ms: u64,
    pub now_us: u64,
    /// How far ahead of this Envoy's clock another Envoy's may run.
    pub skew_us: u64,
    /// An entity's entry (entity mode): stored without headers, because the answer it is served
    /// in sets its own; one with headers is checked as an answer.
    pub entity: bool,
}

/// Why an entry from the L2 is not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Undecodable,
    OtherKey,
    /// Its status, headers or body would not have been stored from the origin.
    NotStorable,
    TooLarge,
    /// Born or stored later than now plus the skew.
    FromTheFuture,
}

/// The entry re-encoded with its times brought within `bounds`, or why it is refused.
pub fn vetted(bytes: &[u8], bounds: &Bounds<'_>) -> Result<Vec<u8>, Refused> {
    if bytes.len() > bounds.max_entry_bytes {
        return Err(Refused::TooLarge);
    }
    let mut entry = Entry::decode(bytes).map_err(|_| Refused::Undecodable)?;
    if entry.digest != bounds.key.digest {
        return Err(Refused::OtherKey);
    }
    storable_as_answer(&entry, bounds)?;
    let latest_us = bounds.now_us.saturating_add(bounds.skew_us);
    if entry.born_us > latest_us || entry.stored_at_ms.saturating_mul(1000) > latest_us {
        return Err(Refused::FromTheFuture);
    }
    clamp_times(&mut entry, bounds);
    Ok(entry.encode())
}

fn storable_as_answer(entry: &Entry<'_>, bounds: &Bounds<'_>) -> Result<(), Refused> {
    let stored_only_what_is_replayed = entry
        .headers
        .iter()
        .all(|(n, _)| replayed(n) && !n.bytes().any(|b| b.is_ascii_uppercase()));
    if !stored_only_what_is_replayed {
        return Err(Refused::NotStorable);
    }
    let headers = entry.headers.iter().map(|(n, v)| (*n, v.as_bytes()));
    let admitted = match bounds.entity && entry.headers.is_empty() {
        true if entry.status == 200 => Ok(()),
        true => Err(NotStored::Status),
        false => admissible(u32::from(entry.status), headers, bounds.vary_headers),
    };
    admitted
        .and_then(|()| body_storable(entry.body))
        .map_err(|_| Refused::NotStorable)
}

fn clamp_times(entry: &mut Entry<'_>, b: &Bounds<'_>) {
    let secs = |s: u64| s.saturating_mul(1000);
    entry.born_us = entry.born_us.min(b.now_us);
    entry.stored_at_ms = entry.stored_at_ms.min(b.now_ms);
    entry.expires_at_ms = entry
        .expires_at_ms
        .min(b.now_ms.saturating_add(secs(b.lifetimes.ttl_seconds)));
    entry.stale_ms = entry
        .stale_ms
        .min(secs(b.lifetimes.stale_while_revalidate_seconds));
    entry.error_ms = entry.error_ms.min(secs(b.lifetimes.stale_if_error_seconds));
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: CacheKey = CacheKey { digest: [5; 32] };
    const LIFE: Lifetimes = Lifetimes {
        ttl_seconds: 10,
        stale_while_revalidate_seconds: 5,
        stale_if_error_seconds: 0,
    };

    fn entry<'a>(status: u16, headers: Vec<(&'a str, &'a str)>, body: &'a [u8]) -> Entry<'a> {
        Entry {
            digest: KEY.digest,
            stored_at_ms: 1_000,
            expires_at_ms: 2_000,
            stale_ms: 0,
            error_ms: 0,
            upstream_age_s: 0,
            born_us: 999_000,
            status,
            headers,
            tag_hashes: vec![],
            tags: "",
            body,
        }
    }

    fn bounds() -> Bounds<'static> {
        Bounds {
            key: &KEY,
            lifetimes: &LIFE,
            vary_headers: &[],
            max_entry_bytes: 4096,
            now_ms: 1_500,
            now_us: 1_500_000,
            skew_us: 1_000_000,
            entity: false,
        }
    }

    const JSON: (&str, &str) = ("content-type", "application/json");

    #[test]
    fn what_the_origin_could_have_answered_passes_unchanged() {
        let e = entry(200, vec![JSON], br#"{"data":{}}"#).encode();
        assert_eq!(vetted(&e, &bounds()), Ok(e.clone()));
    }

    #[test]
    fn what_would_not_be_stored_from_the_origin_is_refused() {
        let refused = [
            entry(302, vec![JSON, ("location", "https://evil")], b"{}"),
            entry(200, vec![("content-type", "text/html")], b"<script>"),
            entry(200, vec![JSON, ("set-cookie", "session=stolen")], b"{}"),
            entry(200, vec![JSON, ("vary", "cookie")], b"{}"),
            entry(200, vec![JSON], br#"{"errors":[]}"#),
            entry(200, vec![JSON, ("Content-Type", "text/html")], b"{}"),
            entry(200, vec![JSON, ("x-envoy-upstream", "1")], b"{}"),
        ];
        for e in refused {
            assert_eq!(
                vetted(&e.encode(), &bounds()),
                Err(Refused::NotStorable),
                "{e:?}"
            );
        }
        let mut other = entry(200, vec![JSON], b"{}");
        other.digest = [6; 32];
        assert_eq!(vetted(&other.encode(), &bounds()), Err(Refused::OtherKey));
        assert_eq!(vetted(b"junk", &bounds()), Err(Refused::Undecodable));
        let big = vec![b' '; 5000];
        let mut body = b"{}".to_vec();
        body.extend_from_slice(&big);
        assert_eq!(
            vetted(&entry(200, vec![JSON], &body).encode(), &bounds()),
            Err(Refused::TooLarge)
        );
    }

    /// An entity is stored without headers; without them it passes only as an entity, and an
    /// entity is still refused for what would refuse an answer.
    #[test]
    fn an_entity_needs_no_content_type_an_answer_does() {
        let entity = Bounds {
            entity: true,
            ..bounds()
        };
        let bare = entry(200, vec![], br#"{"name":"A"}"#).encode();
        assert_eq!(vetted(&bare, &entity), Ok(bare.clone()));
        assert_eq!(vetted(&bare, &bounds()), Err(Refused::NotStorable));
        let typed = entry(200, vec![JSON], br#"{"name":"A"}"#).encode();
        assert_eq!(vetted(&typed, &entity), Ok(typed.clone()), "written before");
        for e in [
            entry(500, vec![], b"{}"),
            entry(200, vec![], br#"{"errors":[]}"#),
            entry(200, vec![], b"<script>"),
            entry(200, vec![("content-type", "text/html")], b"{}"),
            entry(200, vec![("set-cookie", "s=1")], b"{}"),
        ] {
            assert_eq!(
                vetted(&e.encode(), &entity),
                Err(Refused::NotStorable),
                "{e:?}"
            );
        }
    }

    #[test]
    fn times_are_brought_within_what_this_envoy_allows() {
        let mut e = entry(200, vec![JSON], b"{}");
        e.born_us = 2_400_000;
        e.stored_at_ms = 2_400;
        e.expires_at_ms = u64::MAX;
        e.stale_ms = u64::MAX;
        e.error_ms = u64::MAX;
        let out = vetted(&e.encode(), &bounds()).unwrap();
        let v = Entry::decode(&out).unwrap();
        assert_eq!(v.born_us, 1_500_000, "born no later than now");
        assert_eq!(v.stored_at_ms, 1_500);
        assert_eq!(v.expires_at_ms, 1_500 + 10_000, "the local TTL");
        assert_eq!((v.stale_ms, v.error_ms), (5_000, 0));
        let mut future = entry(200, vec![JSON], b"{}");
        future.born_us = 2_500_001;
        assert_eq!(
            vetted(&future.encode(), &bounds()),
            Err(Refused::FromTheFuture)
        );
        future.born_us = 0;
        future.stored_at_ms = u64::MAX;
        assert_eq!(
            vetted(&future.encode(), &bounds()),
            Err(Refused::FromTheFuture)
        );
    }
}
