//! Entity mode and the fleet's L2: the entities one `_entities` request did not find in this
//! Envoy are asked in ONE call (`POST /v1/mget`, one Redis round trip), sent by the request itself
//! (it waits for the answer, and the call may die with it); each value is opened and vetted like a
//! whole answer found in L2 (sealed for its key, within this Envoy's bounds, not purged, the purge
//! log followed), put in L1 and counted as found. The entities the request then fetched go to L2
//! in one call (`PUT /v1/mstore`), queued for the root: a request's own callout dies with it.
//! No leases: concurrent batches that miss the same entity each fetch it (not coalesced through
//! L2). Any failure is "L2 had nothing" (counted), never an error.

use crate::cache::entry::Entry;
use crate::config::{Lifetimes, L2};
use crate::effects::counters::Counter;
use crate::effects::host::{Host, RequestHost};
use crate::fleet::follower;
use crate::fleet::wire::{self, L2Failure};
use crate::invalidate::marks::Verdict;
use crate::request::key::CacheKey;
use crate::worker::callout::Returned;
use crate::worker::ctx::Ctx;
use crate::worker::fleet::vet;
use crate::worker::fleet::write::l2_ttl_ms;
use crate::worker::serving::marks::{refresh_marks, verdict};
use crate::worker::serving::store::insert;
use l2_proto::batch::MAX_BATCH_KEYS;
use std::rc::Rc;

/// An mget in flight: its callout, and the keys it asked (with what each may be stored for: its
/// TTL and its type's stale windows), in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AskedL2 {
    pub token: u32,
    keys: Vec<(CacheKey, Lifetimes)>,
}

/// Sends one mget for `missing` (each key once, with its entity's lifetimes; the first
/// [`MAX_BATCH_KEYS`] of a larger batch): `None` when there is no L2, nothing to ask, the purge
/// log is not followed (a value could not be trusted), or Envoy refused the call (counted).
pub fn ask(
    cx: &mut Ctx<'_, impl RequestHost>,
    missing: &[(CacheKey, Lifetimes)],
) -> Option<AskedL2> {
    let l2 = cx.config().l2.as_ref()?;
    let mut keys: Vec<(CacheKey, Lifetimes)> =
        Vec::with_capacity(missing.len().min(MAX_BATCH_KEYS));
    for (key, ttl) in missing {
        if keys.len() < MAX_BATCH_KEYS && !keys.iter().any(|(k, _)| k == key) {
            keys.push((*key, *ttl));
        }
    }
    let host = cx.host();
    if keys.is_empty() || !follower::read(host).trusted(host.now_ms()) {
        return None;
    }
    let names: Vec<CacheKey> = keys.iter().map(|(k, _)| *k).collect();
    let callout = wire::mget(l2, &names)?;
    match host.dispatch_own(&callout, l2.timeout_ms) {
        Ok(token) => Some(AskedL2 { token, keys }),
        Err(_) => {
            host.count(Counter::L2Failures);
            None
        }
    }
}

/// The mget came back: the entries it brings that this Envoy may serve, each already put in L1.
/// A failed call or an answer not exactly the contract's is counted and brings nothing.
pub fn on_answer(
    cx: &mut Ctx<'_, impl RequestHost>,
    asked: &AskedL2,
    returned: &Returned,
) -> Vec<(CacheKey, Rc<[u8]>)> {
    let read = match &returned.headers {
        None => Err(L2Failure::Unreachable),
        Some(h) => wire::read_mget(
            h,
            returned.body_size,
            || cx.host().own_callout_body(returned.body_size),
            asked.keys.len(),
        ),
    };
    let values = match read {
        Ok(v) => v,
        Err(_) => {
            cx.host().count(Counter::L2Failures);
            return Vec::new();
        }
    };
    if values.iter().any(Option::is_some) {
        // Once for the whole batch: the verdicts below read the marks as they are now.
        refresh_marks(cx);
    }
    let mut found = Vec::new();
    for ((key, lifetimes), sealed) in asked.keys.iter().zip(values) {
        let Some(sealed) = sealed else { continue };
        if let Some(entry) = usable(cx, key, lifetimes, &sealed) {
            cx.host().count(Counter::L2Hits);
            found.push((*key, entry));
        }
    }
    found
}

/// The entry a sealed L2 value gives entity `key`, if this Envoy may serve it: signed by the
/// fleet for this key, what this Envoy would have stored (its times within the entity's TTL and
/// its type's stale windows, which it keeps in L1), not purged or softly purged by the marks this
/// Envoy knows, fresh. Put in L1 (a failure there only means the next request asks L2 again).
fn usable(
    cx: &mut Ctx<'_, impl RequestHost>,
    key: &CacheKey,
    lifetimes: &Lifetimes,
    sealed: &[u8],
) -> Option<Rc<[u8]>> {
    let now_ms = cx.host().now_ms();
    let bytes = vet::open(cx, key, (lifetimes, true), sealed)?;
    let fresh = Entry::decode(&bytes).is_ok_and(|e| e.expires_at_ms > now_ms);
    if !fresh || cx.worker(|w| verdict(w, &bytes)) != Verdict::Fresh {
        return None;
    }
    let _ = insert(cx, key, &bytes, now_ms);
    Some(Rc::from(bytes))
}

/// Queues the entries a request just stored in L1 (`(key, encoded entry)`) for L2, in one mstore
/// (more only past the contract's limits), sent by the root: `true` when something was queued
/// (the caller asks the root to send it). An entry about to expire, or a `null` entity (L2 values
/// are vetted as answers, which `null` is not), stays in this Envoy.
pub fn queue_stores(cx: &mut Ctx<'_, impl Host>, stored: &[(CacheKey, Vec<u8>)]) -> bool {
    let Some(l2) = &cx.config().l2 else {
        return false;
    };
    let now_ms = cx.host().now_ms();
    let items: Vec<(CacheKey, u64, &[u8])> = stored
        .iter()
        .filter_map(|(key, bytes)| {
            worth_storing(l2, now_ms, bytes).map(|ttl| (*key, ttl, &bytes[..]))
        })
        .collect();
    if items.is_empty() {
        return false;
    }
    cx.host().count_n(Counter::L2Stores, items.len() as u64);
    let callouts = wire::mstore(l2, &items);
    let queued = !callouts.is_empty();
    cx.worker(|w| callouts.into_iter().for_each(|c| w.l2.queue(c)));
    queued
}

/// How long L2 keeps `entry` (as for whole answers: `write::l2_ttl_ms`); `None`: not stored.
fn worth_storing(l2: &L2, now_ms: u64, entry: &[u8]) -> Option<u64> {
    let e = Entry::decode(entry).ok()?;
    if e.body == b"null" {
        return None;
    }
    Some(l2_ttl_ms(e.expires_at_ms, now_ms, l2.timeout_ms)).filter(|ttl| *ttl > 0)
}
