//! A leader asks the fleet's L2 before the origin (root context). A hit from another Envoy fills
//! this Envoy's L1 and answers the flight (`HIT`, reason `l2`); a won lease sends the fetch to the
//! origin (its answer then goes to L2 too); another Envoy's lease is waited for by long-poll
//! (`COALESCED`, reason `l2`). Every failure sends the fetch to the origin as if there were no L2.

use crate::cache::entry::Entry;
use crate::cache::peer::{vetted, Bounds};
use crate::coalesce::relay::Response;
use crate::coalesce::upstream::{L2Role, SharedFetch};
use crate::config::L2;
use crate::effects::counters::Counter;
use crate::effects::host::Host;
use crate::fleet::calls::Call;
use crate::fleet::follower;
use crate::fleet::wire::{self, owner, read_lookup, L2Failure, Looked};
use crate::invalidate::marks::Verdict;
use crate::worker::marks::{refresh_marks, verdict};
use crate::worker::root::answer::{Label, Labels};
use crate::worker::root::shared_fetch::{finish, refused, to_origin};
use crate::worker::state::{Plugin, Worker};
use std::cell::RefCell;

/// Root: sends `fetch`'s lookup (or, with `wait`, its long-poll); gives the fetch back, no
/// longer asking L2, if Envoy refused the call (circuit breaker open, every host ejected).
pub fn ask(
    plugin: &Plugin,
    worker: &RefCell<Worker>,
    host: &impl Host,
    l2: &L2,
    mut fetch: SharedFetch,
    wait: bool,
) -> Result<(), Box<SharedFetch>> {
    let me = owner(worker.borrow().id);
    let (wait_ms, timeout) = if wait {
        (l2.wait_ms, l2.wait_ms.saturating_add(l2.timeout_ms))
    } else {
        (0, l2.timeout_ms)
    };
    // The lease outlives this node's own fetch, so a node that dies leading is waited for
    // at most this long.
    let lease_ms = plugin.config.fetch_timeout_ms.saturating_add(l2.timeout_ms);
    let callout = wire::lookup(l2, &fetch.key, lease_ms, &me, wait_ms);
    match host.dispatch(&callout, timeout) {
        Ok(token) => {
            let call = if wait {
                Call::Wait(fetch)
            } else {
                Call::Lookup(fetch)
            };
            worker.borrow_mut().l2.sent(token, call, host.now_ms());
            Ok(())
        }
        Err(_) => {
            host.count(Counter::L2Failures);
            fetch.l2 = L2Role::Off;
            Err(Box::new(fetch))
        }
    }
}

/// What an L2 lookup came back with: its headers (`None`: reset) and body size.
pub struct Answered {
    pub headers: Option<Vec<(String, Vec<u8>)>>,
    pub body_size: usize,
}

/// Root: a lookup (`waited`: a long-poll) for `fetch` came back.
pub fn on_answer(
    plugin: &Plugin,
    worker: &RefCell<Worker>,
    host: &impl Host,
    mut fetch: SharedFetch,
    waited: bool,
    answered: Answered,
) {
    let Some(l2) = &plugin.config.l2 else {
        fetch.l2 = L2Role::Off;
        return origin(plugin, worker, host, fetch);
    };
    let looked = match &answered.headers {
        None => Err(L2Failure::Unreachable),
        // Never copied into the VM: an entry this large would not be stored here either.
        Some(_) if answered.body_size > plugin.config.max_entry_bytes => Err(L2Failure::TooLarge),
        Some(h) => read_lookup(h, || host.callout_body(answered.body_size)),
    };
    match looked {
        Err(_) => {
            host.count(Counter::L2Failures);
            fetch.l2 = L2Role::Off;
            origin(plugin, worker, host, fetch);
        }
        Ok(Looked::Hit(bytes)) => match usable(plugin, worker, host, &fetch, &bytes) {
            Some(response) => {
                host.count(Counter::L2Hits);
                let label = if waited {
                    Label::L2_COALESCED
                } else {
                    Label::L2_HIT
                };
                finish(
                    plugin,
                    worker,
                    host,
                    &fetch,
                    Ok(response),
                    &Labels::all(label),
                );
            }
            None => {
                fetch.l2 = L2Role::Store;
                origin(plugin, worker, host, fetch);
            }
        },
        Ok(Looked::Lead) => {
            host.count(Counter::L2Leads);
            fetch.l2 = L2Role::Lead;
            origin(plugin, worker, host, fetch);
        }
        Ok(Looked::Busy) if !waited && l2.wait_ms > 0 => {
            host.count(Counter::L2Waits);
            if let Err(fetch) = ask(plugin, worker, host, l2, fetch, true) {
                origin(plugin, worker, host, *fetch);
            }
        }
        // The other node did not store in time: fetch, and store for the rest of the fleet.
        Ok(Looked::Busy) => {
            fetch.l2 = L2Role::Store;
            origin(plugin, worker, host, fetch);
        }
    }
}

fn origin(plugin: &Plugin, worker: &RefCell<Worker>, host: &impl Host, fetch: SharedFetch) {
    if let Err(fetch) = to_origin(plugin, worker, host, fetch) {
        refused(plugin, worker, host, &fetch);
    }
}

/// The answer an L2 value gives this flight, if it may: signed by the fleet for this key, what
/// this Envoy would have stored from the origin (its times brought within this Envoy's limits),
/// not purged by the marks this Envoy knows (and only once it has read the fleet's purge log),
/// still fresh. A stale but keepable entry is put in L1 for stale serving; the flight still
/// fetches.
fn usable(
    plugin: &Plugin,
    worker: &RefCell<Worker>,
    host: &impl Host,
    fetch: &SharedFetch,
    sealed: &[u8],
) -> Option<Response> {
    let now_ms = host.now_ms();
    if !follower::read(host).trusted(now_ms) {
        return None;
    }
    let l2 = plugin.config.l2.as_ref()?;
    let bounds = Bounds {
        key: &fetch.key,
        lifetimes: &fetch.asked.lifetimes,
        vary_headers: &plugin.config.vary_headers,
        max_entry_bytes: plugin.config.max_entry_bytes,
        now_ms,
        now_us: host.now_us(),
        skew_us: l2.purge_skew_ms.saturating_mul(1000),
    };
    let vetted = l2
        .fleet_key
        .open_entry(&fetch.key, sealed)
        .and_then(|bytes| vetted(bytes, &bounds).ok());
    let Some(bytes) = vetted else {
        host.count(Counter::L2Rejected);
        return None;
    };
    let entry = Entry::decode(&bytes).ok()?;
    refresh_marks(plugin, worker, host);
    let verdict = verdict(worker, &bytes);
    if verdict == Verdict::Purged || entry.keep_until_ms() <= now_ms {
        return None;
    }
    match plugin.table.insert(host, &fetch.key, &bytes, now_ms) {
        Ok(stored) if stored.evicted => host.count(Counter::Evictions),
        Ok(_) => {}
        Err(_) => host.count(Counter::StoreFailures),
    }
    if verdict == Verdict::Stale || entry.expires_at_ms <= now_ms {
        return None;
    }
    Some(Response::from_entry(&entry, now_ms))
}
