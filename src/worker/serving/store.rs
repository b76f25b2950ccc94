//! Storing an upstream answer in the cache: the one place, for the shared fetch and for a plain
//! miss captured as it streamed to its client.

use crate::cache::entry::Entry;
use crate::cache::fates::{seconds, Fate};
use crate::cache::ghosts;
use crate::cache::not_stored::NotStored;
use crate::cache::set_index::Way;
use crate::cache::storable::{storable_entry, Answer, Asked, Stamp};
use crate::effects::counters::Counter;
use crate::effects::host::Host;
use crate::effects::operation_stats::OpCounter;
use crate::effects::store::StoreError;
use crate::invalidate::marks::Verdict;
use crate::invalidate::tags::OperationTags;
use crate::request::key::CacheKey;
use crate::worker::ctx::Ctx;
use crate::worker::operation_counts::{count_operation, operation_of, Tally};
use crate::worker::serving::marks::{refresh_marks, verdict};
use crate::worker::serving::recent::{self, Whose};

/// What storing did, for the debug headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stored {
    /// Why the answer was not stored (`None`: stored).
    pub not_stored: Option<NotStored>,
    /// The stored entry's tags, comma-separated (with `debug_headers` only).
    pub tags: String,
    /// The entry (empty when it may not be stored at all), for the fleet's L2: also when this
    /// table did not admit it, since the L2 is larger and shared by the fleet.
    pub entry: Vec<u8>,
    /// A purge made since the request that fetched it was asked covers this answer: it may be
    /// older than the purge, so nobody who joined the fetch (perhaps after the purge) shares it.
    pub overtaken: bool,
}

impl Stored {
    /// Nothing stored, for this reason.
    pub fn not(why: NotStored) -> Stored {
        Stored {
            not_stored: Some(why),
            ..Stored::default()
        }
    }
}

/// Stores the answer under `key` if policy allows, counting what happened; otherwise says why
/// not (the debug reason).
pub fn store_answer(
    cx: &mut Ctx<'_, impl Host>,
    key: &CacheKey,
    answer: Answer<'_>,
    asked: &Asked,
) -> Stored {
    let (plugin, host) = (cx.plugin(), cx.host());
    let now_ms = host.now_ms();
    let stamp = Stamp {
        born_us: asked.born_us,
        now_ms,
        operation: &asked.operation,
    };
    let entry = storable_entry(key, &answer, &plugin.config, &asked.lifetimes, &stamp);
    let bytes = match entry {
        Ok(bytes) => bytes,
        Err(why) => {
            host.count(Counter::StoreSkipped);
            account_store(cx, key, Some(&asked.operation), Fate::NotStored(why), None);
            return Stored::not(why);
        }
    };
    refresh_marks(cx);
    let overtaken = cx.worker(|w| verdict(w, &bytes)) == Verdict::Purged;
    let outcome = insert(cx, key, &bytes, now_ms);
    let fate = match outcome {
        Ok(fate) => fate,
        Err(_) => Fate::NotStored(NotStored::StoreFailed),
    };
    account_store(cx, key, Some(&asked.operation), fate, Some(&bytes));
    if outcome.is_err() {
        return Stored::not(NotStored::StoreFailed);
    }
    let tags = Entry::decode(&bytes)
        .map(|e| e.tags.to_string())
        .unwrap_or_default();
    Stored {
        not_stored: fate.not_stored(),
        tags,
        entry: bytes,
        overtaken,
    }
}

/// Accounts for what storing the answer for `key` did: counted for its operation, remembered
/// for its next miss and for the explain endpoint, and kept for the what-if route (with the
/// `entry` it was encoded as, if it could be stored).
pub fn account_store(
    cx: &mut Ctx<'_, impl Host>,
    key: &CacheKey,
    operation: Option<&OperationTags>,
    fate: Fate,
    entry: Option<&[u8]>,
) {
    let tally = match fate.not_stored() {
        None => Tally::one(OpCounter::Stores),
        Some(why) => Tally::because(OpCounter::NotStored, why.as_str()),
    };
    let bucket = count_operation(cx, operation_of(operation), &[tally]);
    let hash = cx.plugin().table.hash(key);
    remember_placed(cx, hash, fate);
    let whose = Whose {
        hash,
        operation,
        bucket,
        ..Whose::default()
    };
    recent::answer(cx, whose, fate, entry);
}

/// Remembers what became of the answer for `key`, for the exact reason of its next miss (see
/// `cache::fates`).
pub fn remember_fate(cx: &mut Ctx<'_, impl Host>, key: &CacheKey, fate: Fate) {
    let hash = cx.plugin().table.hash(key);
    remember_placed(cx, hash, fate);
}

/// [`remember_fate`] of the key whose table hash is `hash`.
fn remember_placed(cx: &mut Ctx<'_, impl Host>, hash: u64, fate: Fate) {
    let plugin = cx.plugin();
    if plugin.fates.is_on() {
        let host = cx.host();
        plugin
            .fates
            .remember(host, hash, fate, seconds(host.now_ms()));
    }
}

/// Until when (seconds since the epoch) an entry may be served, stale windows included.
pub fn serving_until_s(entry: &[u8]) -> u32 {
    Entry::peek(entry).map_or(0, |p| seconds(p.keep_until_ms))
}

/// Puts an encoded entry in the table, counting what that did (admitted or not, what it
/// displaced, the ghosts of what left): the one place the table is written, for answers from
/// the origin and the L2. The entry's fate: stored, or refused by admission (not remembered:
/// the caller does, or not).
pub fn insert(
    cx: &mut Ctx<'_, impl Host>,
    key: &CacheKey,
    bytes: &[u8],
    now_ms: u64,
) -> Result<Fate, StoreError> {
    let table = &cx.plugin().table;
    let outcome =
        cx.worker_and_shared(|w, shared| table.insert(shared, &mut w.seen, key, bytes, now_ms));
    let host = cx.host();
    let stored = match outcome {
        Ok(stored) => stored,
        Err(e) => {
            host.count(Counter::StoreFailures);
            return Err(e);
        }
    };
    host.count(match stored.rejected {
        true => Counter::AdmissionsRejected,
        false => Counter::Stores,
    });
    (0..stored.evicted_capacity).for_each(|_| host.count(Counter::Evictions));
    (0..stored.evicted_expired).for_each(|_| host.count(Counter::EvictionsExpired));
    keep_ghosts(cx, &stored.victims);
    let until_s = serving_until_s(bytes);
    if !stored.rejected {
        return Ok(Fate::Stored { until_s });
    }
    let size = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    Ok(Fate::Refused {
        until_s,
        left_at: leave(cx, size),
    })
}

/// Remembers the entries an insert displaced as ghosts (`cache::ghosts`): evicted, stamped.
fn keep_ghosts(cx: &mut Ctx<'_, impl Host>, victims: &[Way]) {
    let fates = &cx.plugin().fates;
    if !fates.is_on() {
        return;
    }
    let now_s = seconds(cx.host().now_ms());
    for victim in victims {
        let fate = Fate::Evicted {
            until_s: seconds(victim.keep_until_ms),
            left_at: leave(cx, victim.size),
        };
        fates.remember(cx.host(), victim.fingerprint, fate, now_s);
    }
}

/// Counts `size` bytes leaving the table; the leaver's ghost stamp (0 with the fates off, or
/// when the count could not be written: a ghost that then counts as old as the Envoy).
fn leave(cx: &mut Ctx<'_, impl Host>, size: u32) -> u64 {
    if !cx.plugin().fates.is_on() {
        return 0;
    }
    ghosts::leave(cx.host(), size).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::table::{Lookup, Seen};
    use crate::invalidate::tags::OperationTags;
    use crate::worker::state::{Plugin, Worker};
    use std::cell::RefCell;
    use std::rc::Rc;

    fn asked() -> Asked {
        Asked {
            lifetimes: crate::config::Lifetimes {
                ttl_seconds: 60,
                ..Default::default()
            },
            born_us: 0,
            operation: Rc::new(OperationTags::default()),
        }
    }
    use crate::effects::fake::FakeHost;
    use crate::effects::host::status;

    fn json() -> Vec<(String, Vec<u8>)> {
        vec![
            (":status".into(), b"200".to_vec()),
            ("content-type".into(), b"application/json".to_vec()),
        ]
    }

    #[test]
    fn status_is_read_once_and_strictly() {
        assert_eq!(status(&json()), Some(200));
        assert_eq!(status(&[(":status".into(), b"2x".to_vec())]), None);
        assert_eq!(status(&[]), None);
    }

    #[test]
    fn stores_counts_and_explains() {
        let host = FakeHost::new();
        let plugin = Plugin::default();
        let worker = RefCell::new(Worker::new(1, &plugin.config));
        let cx = &mut Ctx::new(&plugin, &worker, &host);
        let key = CacheKey { digest: [1; 32] };
        let headers = json();
        let ok = Answer {
            status: 200,
            headers: &headers,
            body: br#"{"data":{}}"#,
        };
        assert_eq!(store_answer(cx, &key, ok, &asked()).not_stored, None);
        assert_eq!(host.counted(Counter::Stores), 1);
        let now_ms = host.now_ms();
        let hash = plugin.table.hash(&key);
        let mut seen = Seen::new(plugin.table.layout());
        assert!(matches!(
            plugin.table.lookup(&host, &mut seen, &key, hash, now_ms),
            Lookup::Hit(_)
        ));
        let errors = Answer {
            status: 200,
            headers: &headers,
            body: br#"{"errors":[]}"#,
        };
        assert_eq!(
            store_answer(cx, &key, errors, &asked()).not_stored,
            Some(NotStored::GraphqlErrors)
        );
        assert_eq!(host.counted(Counter::StoreSkipped), 1);
    }

    #[test]
    fn a_failed_write_is_counted_not_fatal() {
        let host = FakeHost::new();
        host.fail_writes.set(true);
        let headers = json();
        let answer = Answer {
            status: 200,
            headers: &headers,
            body: br#"{"data":{}}"#,
        };
        let plugin = Plugin::default();
        let worker = RefCell::new(Worker::new(1, &plugin.config));
        let cx = &mut Ctx::new(&plugin, &worker, &host);
        let why = store_answer(cx, &CacheKey { digest: [2; 32] }, answer, &asked());
        assert_eq!(why.not_stored, Some(NotStored::StoreFailed));
        assert_eq!(host.counted(Counter::StoreFailures), 1);
    }
}
