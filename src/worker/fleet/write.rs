//! Writes to the fleet's L2, from the root context: what a leader fetched (stored there for
//! every other Envoy, or its lease given up), and the purges this Envoy owes the purge log.
//! Nobody waits for a write: a failed store is counted; a purge stays owed (in shared data,
//! `fleet::outbox`) until the log has it, and the Envoy's feed follower sends it again.

use crate::cache::entry::Entry;
use crate::coalesce::upstream::{L2Role, SharedFetch};
use crate::config::L2;
use crate::effects::counters::Counter;
use crate::effects::host::{Callout, Host, RootHost};
use crate::effects::store::StoreError;
use crate::fleet::calls::Call;
use crate::fleet::outbox::{self, Pushed};
use crate::fleet::purge_log::PurgeRecord;
use crate::fleet::wire::{self, owner, L2Failure};
use crate::invalidate::marks::Target;
use crate::request::key::CacheKey;
use crate::worker::ctx::Ctx;
use crate::worker::serving::store::Stored;
use l2_proto::marks::MAX_MARKS_PER_BATCH;

/// After the origin answered `fetch` (or failed): a stored entry goes to L2 as well; a lease
/// held for an answer that is not stored is released, so a waiting node leads at once. Takes
/// the entry's bytes out of `stored`.
pub fn after_origin(cx: &mut Ctx<'_, impl RootHost>, fetch: &SharedFetch, stored: &mut Stored) {
    let Some(l2) = &cx.config().l2 else { return };
    if !matches!(fetch.l2, L2Role::Lead | L2Role::Store) {
        return;
    }
    let me = owner(cx.worker(|w| w.id));
    let callout = match store_callout(l2, cx.host(), &fetch.key, &me, stored) {
        Some(store) => store,
        None if fetch.l2 == L2Role::Lead => wire::release(l2, &fetch.key, &me),
        None => return,
    };
    send(cx, Call::Write, &callout);
}

/// The store of what `stored` put in L1 (taking its bytes), if worth storing in L2.
fn store_callout(
    l2: &L2,
    host: &impl Host,
    key: &CacheKey,
    me: &str,
    stored: &mut Stored,
) -> Option<Callout> {
    if stored.entry.is_empty() {
        return None;
    }
    let entry = std::mem::take(&mut stored.entry);
    let expires_at_ms = Entry::decode(&entry).ok()?.expires_at_ms;
    let ttl = l2_ttl_ms(expires_at_ms, host.now_ms(), l2.timeout_ms);
    if ttl == 0 {
        return None;
    }
    host.count(Counter::L2Stores);
    Some(wire::store(l2, key, ttl, me, &entry))
}

/// A plain miss (it went upstream itself) stored in L1 goes to L2 too, sent by the root (a
/// callout made by a request dies with it). `true` when one was queued.
pub fn queue_store(cx: &mut Ctx<'_, impl Host>, key: &CacheKey, stored: &mut Stored) -> bool {
    let Some(l2) = &cx.config().l2 else {
        return false;
    };
    let me = owner(cx.worker(|w| w.id));
    let Some(callout) = store_callout(l2, cx.host(), key, &me, stored) else {
        return false;
    };
    cx.worker(|w| w.l2.queue(callout));
    true
}

/// How long L2 keeps an entry fresh until `expires_at_ms`: only while it is fresh (stale windows
/// are each Envoy's own), and gone `margin_ms` before it expires. Every Envoy's copy expires at
/// the same instant (the storing Envoy's); if L2 still answered with it then, each would find it
/// stale and fetch on its own. Gone a little early, the key is free, and its lease elects one
/// fetch for the fleet. 0: not worth storing.
pub fn l2_ttl_ms(expires_at_ms: u64, now_ms: u64, margin_ms: u64) -> u64 {
    expires_at_ms
        .saturating_sub(now_ms)
        .saturating_sub(margin_ms)
}

/// A refused fetch's lease, released on the next tick: the callback that found it refused
/// answers requests, and nothing may be dispatched after an answer.
pub fn release_later(cx: &mut Ctx<'_, impl RootHost>, fetch: &SharedFetch) {
    let Some(l2) = &cx.config().l2 else { return };
    if fetch.l2 == L2Role::Lead {
        cx.worker(|w| {
            let callout = wire::release(l2, &fetch.key, &owner(w.id));
            w.l2.queue(callout);
        });
    }
}

/// Owes the fleet's purge log a purge made at `at_us` (kept in shared data until the log has
/// it: see `fleet::outbox`). `None` without L2.
pub fn queue_purge(
    cx: &Ctx<'_, impl Host>,
    at_us: u64,
    targets: &[(Target, bool)],
) -> Option<Result<Pushed, StoreError>> {
    cx.config().l2.as_ref()?;
    let host = cx.host();
    let pushed = outbox::push(host, at_us, targets);
    if let Ok(p) = pushed {
        if p.merged {
            host.count(Counter::L2PurgesMerged);
        }
        if p.folded {
            host.count(Counter::L2PurgesFolded);
        }
    }
    Some(pushed)
}

/// Root: sends every queued store and release, and the oldest purges owed to the log.
pub fn flush(cx: &mut Ctx<'_, impl RootHost>) {
    let queued = cx.worker(|w| std::mem::take(&mut w.l2.outbox));
    for callout in queued {
        send(cx, Call::Write, &callout);
    }
    send_purge(cx);
}

/// One call at a time for the whole Envoy, oldest first, as many owed records as one call
/// carries, from whichever worker gets to it first (the one that took the purge, at once): the
/// outbox says who sends, so no record goes twice.
fn send_purge(cx: &mut Ctx<'_, impl RootHost>) {
    let config = cx.config();
    let Some(l2) = &config.l2 else { return };
    let (me, busy) = cx.worker(|w| (w.id, w.l2.sending_purge));
    let host = cx.host();
    if busy {
        return;
    }
    let lease_ms = purge_timeout_ms(l2.timeout_ms).saturating_add(SEND_SLACK_MS);
    let claimed = outbox::claim(host, me, host.now_ms(), lease_ms, MAX_MARKS_PER_BATCH);
    let Ok(Some((records, last))) = claimed else {
        return;
    };
    let records: Vec<&PurgeRecord> = records.iter().collect();
    let keep_ms = keep_ms(config.longest_life_ms(), l2.purge_skew_ms);
    let Some(callout) = wire::publish_marks(l2, keep_ms, &records) else {
        // None is made that way (`outbox::RECORD_TARGETS`); owed still, never dropped.
        let _ = outbox::release(host, me);
        return;
    };
    for _ in &records {
        host.count(Counter::L2PurgesSent);
    }
    cx.worker(|w| w.l2.sending_purge = true);
    send(cx, Call::Purge(last), &callout);
}

/// A call to the log that has not come back this long after its timeout is lost: another worker
/// may send.
const SEND_SLACK_MS: u64 = 1000;

/// A call to the log writes up to 2,048 marks in one script: it gets more time than a lookup
/// (a timeout it outlasted in Redis would send the same marks again).
fn purge_timeout_ms(timeout_ms: u64) -> u64 {
    timeout_ms.saturating_add(SEND_SLACK_MS)
}

/// How long the fleet's snapshot keeps a purge: as long as an entry it purges may be served
/// anywhere, and the clocks' skew on both sides.
pub fn keep_ms(longest_life_ms: u64, skew_ms: u64) -> u64 {
    longest_life_ms.saturating_add(skew_ms.saturating_mul(2))
}

fn send(cx: &mut Ctx<'_, impl RootHost>, call: Call, callout: &Callout) {
    let timeout = cx.config().l2.as_ref().map_or(0, |l2| match call {
        Call::Purge(_) => purge_timeout_ms(l2.timeout_ms),
        _ => l2.timeout_ms,
    });
    let host = cx.host();
    match host.dispatch(callout, timeout) {
        Ok(token) => {
            let now_ms = host.now_ms();
            cx.worker(|w| w.l2.sent(token, call, now_ms));
        }
        Err(_) => failed(cx, &call),
    }
}

/// Root: a write came back (`None`: reset). A purge the log now holds is no longer owed, and
/// the next one goes at once.
pub fn on_written(
    cx: &mut Ctx<'_, impl RootHost>,
    call: Call,
    headers: Option<&[(String, Vec<u8>)]>,
) {
    let result = headers.map_or(Err(L2Failure::Unreachable), wire::written);
    if result.is_err() {
        return failed(cx, &call);
    }
    if let Call::Purge(seq) = call {
        let me = cx.worker(|w| {
            w.l2.sending_purge = false;
            w.id
        });
        if outbox::acknowledge(cx.host(), me, seq).is_ok() {
            send_purge(cx);
        }
    }
}

/// A purge that failed stays owed: the next tick sends it again (this worker's, or another's).
fn failed(cx: &mut Ctx<'_, impl RootHost>, call: &Call) {
    cx.host().count(Counter::L2Failures);
    if let Call::Purge(_) = call {
        let me = cx.worker(|w| {
            w.l2.sending_purge = false;
            w.id
        });
        let _ = outbox::release(cx.host(), me);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn l2_keeps_an_entry_a_little_less_long_than_it_is_fresh() {
        assert_eq!(l2_ttl_ms(11_000, 1_000, 50), 9_950);
        assert_eq!(
            l2_ttl_ms(1_040, 1_000, 50),
            0,
            "about to expire: not stored"
        );
        assert_eq!(l2_ttl_ms(900, 1_000, 50), 0);
    }
}
