//! Finding a fresh entry for a key (this worker's copy first, then shared data) and serving it.
//! With invalidation on, every lookup first reads the purge epoch (the host's purge signal, else
//! the epoch in shared data): a purge answered on any worker is seen by the next lookup
//! everywhere. Copies checked at the current epoch are served as they are; others are checked
//! against the marks once, then kept or dropped.

use crate::cache::conditional::not_modified;
use crate::cache::entry::Entry;
use crate::cache::fates::{seconds, Fate};
use crate::cache::ghosts::{self, WouldHit};
use crate::cache::not_stored::NotStored;
use crate::cache::status::CacheStatus;
use crate::cache::table::{Lookup, MissKind};
use crate::effects::counters::Counter;
use crate::effects::host::RequestHost;
use crate::invalidate::marks::Verdict;
use crate::request::classify::RequestHead;
use crate::request::key::CacheKey;
use crate::worker::ctx::Ctx;
use crate::worker::serving::labels::{cdn_headers, CACHE_HEADER, KEY_HEADER, TAGS_HEADER};
use crate::worker::serving::marks::{refresh_marks, verdict};
use crate::worker::state::Plugin;
use std::rc::Rc;

/// What a lookup found.
#[derive(Debug)]
pub enum Found {
    Fresh(Rc<[u8]>),
    /// Expired (or soft-purged) but within its stale-while-revalidate window: served `STALE`
    /// while one refresh runs.
    Stale(Rc<[u8]>),
    /// Why not, and the smallest larger store that would have served it.
    Nothing(MissReason, Option<WouldHit>),
}

/// Why a lookup found nothing to serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissReason {
    /// Not in the cache, and nothing known of an answer for it: a first request.
    Cold,
    /// Stored, then displaced for room before it expired (or, its fate forgotten, asked for
    /// here lately and not found).
    Evicted,
    /// Its last answer was storable, but the admission policy kept what the store held.
    NotAdmitted,
    /// Its last answer could not be stored (errors, `no-store`, `set-cookie`, too large...:
    /// the store's `not_stored` counters say which).
    NotStored,
    /// Its place holds another key's entry.
    Collision,
    /// Expired (past any stale window that would serve it).
    Expired,
    /// Purged (or soft-purged with no stale window).
    Purged,
    /// Entity mode: some of the batch's entities came from entries, the rest were fetched.
    Partial,
    /// Entity mode: none of the batch's entities was found.
    NoEntity,
}

impl MissReason {
    pub fn as_str(self) -> &'static str {
        match self {
            MissReason::Cold => "cold",
            MissReason::Evicted => "evicted",
            MissReason::NotAdmitted => "not-admitted",
            MissReason::NotStored => "not-stored",
            MissReason::Collision => "collision",
            MissReason::Expired => "expired",
            MissReason::Purged => "purged",
            MissReason::Partial => "partial",
            MissReason::NoEntity => "no-entity",
        }
    }

    /// Why a key the table does not hold missed: from what became of its last answer
    /// (`fate`, if remembered), else from whether it was asked for here lately.
    pub fn of(kind: MissKind, fate: Option<Fate>, asked_before: bool, now_s: u32) -> MissReason {
        match (kind, fate) {
            (MissKind::Expired, _) => MissReason::Expired,
            (MissKind::Collision | MissKind::Foreign, _) => MissReason::Collision,
            // Gone, or refused, but it could be served no longer anyway: no memory would help.
            (MissKind::Empty, Some(f)) if f.until_s() != 0 && now_s >= f.until_s() => {
                MissReason::Expired
            }
            (
                MissKind::Empty,
                Some(Fate::Refused { .. } | Fate::NotStored(NotStored::NotAdmitted)),
            ) => MissReason::NotAdmitted,
            (MissKind::Empty, Some(Fate::NotStored(_))) => MissReason::NotStored,
            (MissKind::Empty, Some(Fate::Stored { .. } | Fate::Evicted { .. })) => {
                MissReason::Evicted
            }
            (MissKind::Empty, None) if asked_before => MissReason::Evicted,
            (MissKind::Empty, None) => MissReason::Cold,
        }
    }
}

/// A fresh entry for `key`: this worker's copy, else shared data (then copied here); or a stale
/// one that may be served while refreshing.
pub fn find(cx: &mut Ctx<'_, impl RequestHost>, key: &CacheKey, now_ms: u64) -> Found {
    let hash = cx.plugin().table.hash(key);
    find_placed(cx, key, hash, now_ms)
}

/// [`find`], `hash` being the table's hash of `key` (computed once by a caller that keeps it).
pub fn find_placed(
    cx: &mut Ctx<'_, impl RequestHost>,
    key: &CacheKey,
    hash: u64,
    now_ms: u64,
) -> Found {
    let invalidation = cx.config().invalidation_on();
    if invalidation {
        refresh_marks(cx);
    }
    let (epoch, copy, due) = cx.worker(|w| {
        // Every request counts, those a copy answers too: they are the hottest.
        w.seen.count(hash);
        (w.purges.epoch, w.hot.get(key, now_ms), w.seen.due(hash))
    });
    if let Some((entry, checked)) = copy {
        let fresh = cx.worker(|w| {
            // Checked against the marks in force: served without decoding.
            if !invalidation || checked == epoch || verdict(w, &entry) == Verdict::Fresh {
                w.hot.checked(key, epoch);
                return true;
            }
            // Purged here; shared data may hold a newer answer already.
            w.hot.remove(key);
            false
        });
        if fresh {
            if due {
                record_frequency(cx, hash);
            }
            return Found::Fresh(entry);
        }
    }
    let table = &cx.plugin().table;
    let found =
        cx.worker_and_shared(|w, shared| table.lookup(shared, &mut w.seen, key, hash, now_ms));
    let (bytes, expired) = match found {
        Lookup::Hit(bytes) => (bytes, false),
        Lookup::Stale(bytes) => (bytes, true),
        Lookup::Miss(kind) => return missed(cx, kind, hash, now_ms),
    };
    record_frequency(cx, hash);
    let marks = if invalidation {
        cx.worker(|w| verdict(w, &bytes))
    } else {
        Verdict::Fresh
    };
    let host = cx.host();
    if marks == Verdict::Purged {
        host.count(Counter::PurgedMisses);
        return Found::Nothing(MissReason::Purged, None);
    }
    if expired || marks == Verdict::Stale {
        return match may_serve_stale(&bytes, now_ms) {
            true => Found::Stale(bytes.into()),
            false => {
                if marks == Verdict::Stale {
                    host.count(Counter::StaleMisses);
                    return Found::Nothing(MissReason::Purged, None);
                }
                Found::Nothing(MissReason::Expired, None)
            }
        };
    }
    let expires = Entry::peek(&bytes)
        .map(|p| p.expires_at_ms)
        .unwrap_or_default();
    let entry: Rc<[u8]> = bytes.into();
    cx.worker(|w| w.hot.insert(*key, Rc::clone(&entry), expires, epoch));
    Found::Fresh(entry)
}

/// Why the table held nothing for the key placed at `hash`, and which larger store would have.
fn missed(cx: &mut Ctx<'_, impl RequestHost>, kind: MissKind, hash: u64, now_ms: u64) -> Found {
    // Counted once already, by this request.
    let asked_before = cx.worker(|w| w.seen.frequency(hash) > 1);
    let fates = &cx.plugin().fates;
    let fate = match kind {
        MissKind::Empty => fates.recall(cx.host(), hash).map(|r| r.fate),
        _ => None,
    };
    let now_s = seconds(now_ms);
    let why = MissReason::of(kind, fate, asked_before, now_s);
    Found::Nothing(why, fate.and_then(|f| larger_store(cx, f, now_s)))
}

/// The smallest larger store that would still hold the entry a miss's `fate` says left the
/// table (`cache::ghosts`), counted.
fn larger_store(cx: &mut Ctx<'_, impl RequestHost>, fate: Fate, now_s: u32) -> Option<WouldHit> {
    let (left_at, until_s) = fate.ghost()?;
    let host = cx.host();
    let budget = cx.plugin().table.layout().budget_bytes;
    let would = ghosts::would_hit(left_at, until_s, ghosts::total(host), now_s, budget)?;
    host.count(Counter::WouldHit4x);
    if would == WouldHit::At2x {
        host.count(Counter::WouldHit2x);
    }
    Some(would)
}

/// Tells the other workers, in the key's set index, how often this worker is asked for an entry
/// it was served, once its count has run ahead of the record (`Seen::due`): each worker sees
/// only its share of the traffic, and weighs entries by the record when it admits new ones.
fn record_frequency(cx: &mut Ctx<'_, impl RequestHost>, hash: u64) {
    let table = &cx.plugin().table;
    cx.worker_and_shared(|w, shared| {
        if w.seen.due(hash) {
            // A failed write loses a hint, not an answer.
            let _ = table.record(shared, &mut w.seen, hash);
        }
    });
}

/// Within stale-while-revalidate: expired less than its window ago, or soft-purged (stale from
/// then on) with its window not yet over.
fn may_serve_stale(bytes: &[u8], now_ms: u64) -> bool {
    Entry::decode(bytes).is_ok_and(|e| e.within_stale_window(now_ms))
}

/// `n` in decimal, without `fmt` (a noticeable share of a hit in wasm).
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &str {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[at..]).unwrap_or("0")
}

/// What a 304 repeats of the full answer (RFC 9110 15.4.5).
const NOT_MODIFIED_HEADERS: &[&str] = &[
    "cache-control",
    "content-location",
    "etag",
    "expires",
    "last-modified",
    "vary",
];

/// The running request a stored entry answers.
#[derive(Debug, Clone, Copy)]
pub struct Asking<'a> {
    pub key: &'a CacheKey,
    pub head: &'a RequestHead,
    pub now_ms: u64,
}

/// What an answer served from an entry was, for the access log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    pub cache: CacheStatus,
    pub key: CacheKey,
    pub age_s: u64,
    pub bytes: usize,
    /// How long the origin took to produce the entry: what serving it saved.
    pub origin_ms: u64,
    /// The entry's freshness lifetime, in seconds (for the what-if route).
    pub lifetime_s: u32,
}

/// Answers the running request from a stored entry, labelled `cache` (`HIT` or `STALE`);
/// `None` if the entry does not decode.
pub fn serve(
    plugin: &Plugin,
    host: &impl RequestHost,
    asking: &Asking<'_>,
    bytes: &[u8],
    cache: CacheStatus,
) -> Option<Served> {
    let Asking { key, head, now_ms } = *asking;
    let entry = Entry::decode(bytes).ok()?;
    let served = Served {
        cache,
        key: *key,
        age_s: entry.age_s(now_ms),
        bytes: bytes.len(),
        origin_ms: entry.stored_at_ms.saturating_sub(entry.born_us / 1000),
        lifetime_s: u32::try_from(entry.expires_at_ms.saturating_sub(entry.stored_at_ms) / 1000)
            .unwrap_or(u32::MAX),
    };
    let mut digits = [0u8; 20];
    let age = decimal(served.age_s, &mut digits);
    if not_modified(head, &entry) {
        let mut headers: Vec<(&str, &str)> = entry
            .headers
            .iter()
            .copied()
            .filter(|(n, _)| NOT_MODIFIED_HEADERS.contains(n))
            .collect();
        headers.push(("age", age));
        headers.push((CACHE_HEADER, cache.as_str()));
        host.respond(304, headers, b"");
        return Some(served);
    }
    let mut headers: Vec<(&str, &str)> = Vec::with_capacity(entry.headers.len() + 5);
    headers.extend(entry.headers.iter().copied());
    headers.push(("age", age));
    headers.push((CACHE_HEADER, cache.as_str()));
    let hex;
    if plugin.config.debug_headers {
        hex = key.hex();
        headers.push((KEY_HEADER, &hex));
        if !entry.tags.is_empty() {
            headers.push((TAGS_HEADER, entry.tags));
        }
    }
    let cdn = cdn_headers(&plugin.config, entry.tags, host);
    headers.extend(cdn.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    host.respond(entry.status, headers, entry.body);
    Some(served)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_miss_says_what_became_of_the_key_s_last_answer() {
        use MissReason as M;
        let of = |fate, asked_before| MissReason::of(MissKind::Empty, fate, asked_before, 100);
        let not = |why| Some(Fate::NotStored(why));
        assert_eq!(of(None, false), M::Cold);
        assert_eq!(of(None, true), M::Evicted, "fate forgotten, asked for here");
        assert_eq!(of(not(NotStored::GraphqlErrors), false), M::NotStored);
        assert_eq!(of(not(NotStored::NoStore), true), M::NotStored);
        assert_eq!(of(not(NotStored::NotAdmitted), true), M::NotAdmitted);
        assert_eq!(of(Some(Fate::Stored { until_s: 200 }), false), M::Evicted);
        assert_eq!(of(Some(Fate::Stored { until_s: 100 }), true), M::Expired);
        assert_eq!(of(Some(Fate::Stored { until_s: 0 }), true), M::Evicted);
        let evicted = |until_s| {
            Some(Fate::Evicted {
                until_s,
                left_at: 5,
            })
        };
        let refused = |until_s| {
            Some(Fate::Refused {
                until_s,
                left_at: 5,
            })
        };
        assert_eq!(of(evicted(200), false), M::Evicted);
        assert_eq!(of(refused(200), false), M::NotAdmitted);
        assert_eq!(of(evicted(100), true), M::Expired, "no memory would help");
        assert_eq!(of(refused(90), true), M::Expired);
        let expired = MissReason::of(MissKind::Expired, not(NotStored::NoStore), true, 1);
        assert_eq!(expired, M::Expired);
        assert_eq!(
            MissReason::of(MissKind::Foreign, None, true, 1),
            M::Collision
        );
        let words: Vec<_> = [M::NotStored, M::NotAdmitted].map(M::as_str).to_vec();
        assert_eq!(words, ["not-stored", "not-admitted"]);
    }

    #[test]
    fn ages_print_in_decimal() {
        let mut buf = [0u8; 20];
        for n in [0, 7, 10, 59, 86_400, u64::MAX] {
            assert_eq!(decimal(n, &mut buf), n.to_string());
        }
    }
}
