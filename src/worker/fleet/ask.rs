//! A leader asks the fleet's L2 before the origin (root context). A hit from another Envoy fills
//! this Envoy's L1 and answers the flight (`HIT`, reason `l2`); a won lease sends the fetch to the
//! origin (its answer then goes to L2 too); another Envoy's lease is waited for by long-poll
//! (`COALESCED`, reason `l2`). Every failure sends the fetch to the origin as if there were no L2.
//! What the answer leads to is said to the root ([`AfterLookup`]), which finishes the flight or sends
//! the fetch: L2 sits below the root and never answers a request itself.

use crate::cache::entry::Entry;
use crate::coalesce::relay::Response;
use crate::coalesce::upstream::{L2Role, SharedFetch};
use crate::config::L2;
use crate::effects::counters::Counter;
use crate::effects::host::RootHost;
use crate::fleet::calls::Call;
use crate::fleet::follower;
use crate::fleet::wire::{self, owner, read_lookup, L2Failure, Looked};
use crate::invalidate::marks::Verdict;
use crate::worker::callout::Returned;
use crate::worker::ctx::Ctx;
use crate::worker::fleet::vet;
use crate::worker::serving::marks::{refresh_marks, verdict};
use crate::worker::serving::store::{insert, remember_fate};

/// Root: sends `fetch`'s lookup (or, with `wait`, its long-poll); gives the fetch back, no
/// longer asking L2, if Envoy refused the call (circuit breaker open, every host ejected).
pub fn ask(
    cx: &mut Ctx<'_, impl RootHost>,
    l2: &L2,
    mut fetch: SharedFetch,
    wait: bool,
) -> Result<(), Box<SharedFetch>> {
    let me = owner(cx.worker(|w| w.id));
    let (wait_ms, timeout) = if wait {
        (l2.wait_ms, l2.wait_ms.saturating_add(l2.timeout_ms))
    } else {
        (0, l2.timeout_ms)
    };
    // The lease outlives this node's own fetch, so a node that dies leading is waited for
    // at most this long.
    let lease_ms = cx.config().fetch_timeout_ms.saturating_add(l2.timeout_ms);
    let callout = wire::lookup(l2, &fetch.key, lease_ms, &me, wait_ms);
    let host = cx.host();
    match host.dispatch(&callout, timeout) {
        Ok(token) => {
            let call = if wait {
                Call::Wait(fetch)
            } else {
                Call::Lookup(fetch)
            };
            let now_ms = host.now_ms();
            cx.worker(|w| w.l2.sent(token, call, now_ms));
            Ok(())
        }
        Err(_) => {
            host.count(Counter::L2Failures);
            fetch.l2 = L2Role::Off;
            Err(Box::new(fetch))
        }
    }
}

/// What the root does with a flight once L2 answered its lookup.
#[derive(Debug)]
pub enum AfterLookup {
    /// Asked again, by long-poll: nothing until that answers.
    Waiting,
    /// Another Envoy's answer, found in L2 (`waited`: after a long-poll): the flight is finished
    /// with it.
    Hit {
        fetch: SharedFetch,
        response: Response,
        waited: bool,
    },
    /// To the origin; `fetch.l2` says what becomes of L2 then.
    Origin(SharedFetch),
}

/// Root: a lookup (`waited`: a long-poll) for `fetch` came back; what the root does next.
pub fn on_answer(
    cx: &mut Ctx<'_, impl RootHost>,
    mut fetch: SharedFetch,
    waited: bool,
    returned: Returned,
) -> AfterLookup {
    let config = cx.config();
    let Some(l2) = &config.l2 else {
        fetch.l2 = L2Role::Off;
        return AfterLookup::Origin(fetch);
    };
    let looked = match &returned.headers {
        None => Err(L2Failure::Unreachable),
        // Never copied into the VM: an entry this large would not be stored here either.
        Some(_) if returned.body_size > config.max_entry_bytes => Err(L2Failure::TooLarge),
        Some(h) => read_lookup(h, || cx.host().callout_body(returned.body_size)),
    };
    match looked {
        Err(_) => {
            cx.host().count(Counter::L2Failures);
            fetch.l2 = L2Role::Off;
        }
        Ok(Looked::Hit(bytes)) => match usable(cx, &fetch, &bytes) {
            Some(response) => {
                cx.host().count(Counter::L2Hits);
                return AfterLookup::Hit {
                    fetch,
                    response,
                    waited,
                };
            }
            None => fetch.l2 = L2Role::Store,
        },
        Ok(Looked::Lead) => {
            cx.host().count(Counter::L2Leads);
            fetch.l2 = L2Role::Lead;
        }
        Ok(Looked::Busy) if !waited && l2.wait_ms > 0 => {
            cx.host().count(Counter::L2Waits);
            return match ask(cx, l2, fetch, true) {
                Ok(()) => AfterLookup::Waiting,
                Err(fetch) => AfterLookup::Origin(*fetch),
            };
        }
        // The other node did not store in time: fetch, and store for the rest of the fleet.
        Ok(Looked::Busy) => fetch.l2 = L2Role::Store,
    }
    AfterLookup::Origin(fetch)
}

/// The answer an L2 value gives this flight, if it may: signed by the fleet for this key, what
/// this Envoy would have stored from the origin (its times brought within this Envoy's limits),
/// not purged by the marks this Envoy knows (and only once it has read the fleet's purge log),
/// still fresh. A stale but keepable entry is put in L1 for stale serving; the flight still
/// fetches.
fn usable(cx: &mut Ctx<'_, impl RootHost>, fetch: &SharedFetch, sealed: &[u8]) -> Option<Response> {
    let host = cx.host();
    let now_ms = host.now_ms();
    if !follower::read(host).trusted(now_ms) {
        return None;
    }
    let bytes = vet::open(cx, &fetch.key, (&fetch.asked.lifetimes, false), sealed)?;
    let entry = Entry::decode(&bytes).ok()?;
    refresh_marks(cx);
    let verdict = cx.worker(|w| verdict(w, &bytes));
    if verdict == Verdict::Purged || entry.keep_until_ms() <= now_ms {
        return None;
    }
    // Counted by `insert`; a failure only means the next request asks the L2 again.
    if let Ok(fate) = insert(cx, &fetch.key, &bytes, now_ms) {
        remember_fate(cx, &fetch.key, fate);
    }
    if verdict == Verdict::Stale || entry.expires_at_ms <= now_ms {
        return None;
    }
    Some(Response::from_entry(&entry, now_ms))
}
