//! Root: the fetches entity mode makes from the root context (a coalesced all-miss batch, a
//! background refresh of stale entities). Their answer is split into entity entries, as a
//! forwarded batch's is (a coalesced batch's once its waiters are answered), never stored whole
//! (an `_entities` answer holds no `__typename`: entity purges would not reach it); a refresh
//! ends the flights of every entity it refreshed; a failed batch is answered from its entities'
//! entries within their stale-if-error window.

use crate::cache::entry::Entry;
use crate::cache::not_stored::NotStored;
use crate::cache::storable::Answer;
use crate::coalesce::flights::Peek;
use crate::coalesce::relay::Response;
use crate::coalesce::release::Release;
use crate::coalesce::upstream::SharedFetch;
use crate::effects::counters::Counter;
use crate::effects::host::{Host, RootHost};
use crate::entities::answer::{assemble, Fetched};
use crate::entities::batch::EntityBatch;
use crate::entities::deferred::DeferredSplit;
use crate::entities::mode::listener_settings;
use crate::request::key::CacheKey;
use crate::worker::ctx::Ctx;
use crate::worker::entities::flights::wait_on;
use crate::worker::entities::store::{self, Split};
use crate::worker::flights::answer::{answer, release, Label, Labelled};
use crate::worker::flights::wake::wake;
use crate::worker::serving::marks::overtaken;
use crate::worker::serving::stale::{error_entry, fresh_entry};
use crate::worker::serving::store::Stored;
use crate::worker::timer::tick_soon;
use std::rc::Rc;

/// Stores the entities of `answer`, fetched for `batch`, now, or holds the answer to split it
/// after its waiters are answered (then `true`: call [`split_later`] once they are). What storing
/// did, for the leader's debug headers (nothing for the fleet's L2: there is no whole entry).
pub fn store_or_defer(
    cx: &mut Ctx<'_, impl RootHost>,
    batch: &Rc<EntityBatch>,
    answer: &Answer<'_>,
) -> (Stored, bool) {
    if let Some(refused) = refused(cx, batch, answer) {
        return (refused, false);
    }
    // A background refresh has nobody waiting.
    if !batch.also_holds.is_empty() {
        return (split(cx, batch, answer), false);
    }
    let held = DeferredSplit {
        batch: Rc::clone(batch),
        status: answer.status,
        headers: answer.headers.to_vec(),
        body: answer.body.to_vec(),
    };
    match cx.worker(|w| w.deferred_splits.hold(held)) {
        Ok(()) => (Stored::default(), true),
        Err(_) => (split(cx, batch, answer), false),
    }
}

/// Has the root's timer split the held answers soon, once Envoy has written the answers just
/// made (see `timer::SPLIT_AFTER_MS`); splits them now if the host refuses.
pub fn split_later(cx: &mut Ctx<'_, impl RootHost>) {
    if !tick_soon(cx) {
        split_held(cx);
    }
}

/// Splits every held answer into entity entries (the root's timer).
pub fn split_held(cx: &mut Ctx<'_, impl Host>) {
    while let Some(held) = cx.worker(|w| w.deferred_splits.take_oldest()) {
        let answer = Answer {
            status: held.status,
            headers: &held.headers,
            body: &held.body,
        };
        split(cx, &held.batch, &answer);
    }
}

/// Why the answer fetched for `batch` stores nothing at all, if it does not; counts what it was
/// asked for.
fn refused(
    cx: &mut Ctx<'_, impl RootHost>,
    batch: &EntityBatch,
    answer: &Answer<'_>,
) -> Option<Stored> {
    let mut asked: Vec<(usize, usize)> = batch
        .sent
        .iter()
        .enumerate()
        .flat_map(|(f, s)| s.iter().map(move |d| (f, *d)))
        .collect();
    asked.sort_unstable();
    asked.dedup();
    cx.host()
        .count_n(Counter::EntitiesFetched, asked.len() as u64);
    // The listener's limit, also where a route turned entity mode on.
    let limit = listener_settings(cx.config()).max_answer_bytes;
    if answer.status != 200 {
        return Some(Stored::not(NotStored::Status));
    }
    if answer.body.len() > limit {
        return Some(Stored::not(NotStored::TooLarge));
    }
    None
}

/// Stores the entities of `answer`, fetched for `batch` (whose status and size passed).
fn split(cx: &mut Ctx<'_, impl Host>, batch: &EntityBatch, answer: &Answer<'_>) -> Stored {
    let Ok(fetched) = Fetched::read(answer.body, &batch.req, &batch.sent) else {
        return Stored::not(NotStored::NotJson);
    };
    let split = Split {
        req: &batch.req,
        sent: &batch.sent,
        born_us: batch.born_us,
    };
    let policy = |f: usize, d: usize| batch.entities.get(f)?.get(d).copied();
    let stored = store::store(cx, &split, policy, answer.headers, &fetched);
    // A fetch holding entity flights answers the batches waiting on them from what it made,
    // whether the store admitted it or not (see `release_held`).
    if !batch.also_holds.is_empty() {
        cx.worker(|w| w.prefetch.hold_fetched(stored.entries));
    }
    match stored.shortest {
        Some(s) if s > 0 => Stored::default(),
        _ => Stored::not(NotStored::EntityNotStored),
    }
}

/// Ends the entity flights `fetch` holds beside its own key (a refresh's, a prefetch's: see
/// `entities::stale`, `entities::trigger`), each with its entity's entry for the workers
/// that follow it (woken with it); this worker's batches that waited for one are answered from
/// the entries just made, or let go.
pub fn release_held(cx: &mut Ctx<'_, impl RootHost>, fetch: &SharedFetch) {
    let Some(batch) = &fetch.entities else { return };
    if batch.also_holds.is_empty() {
        return;
    }
    let id = cx.worker(|w| w.id);
    let now_ms = cx.host().now_ms();
    let mut waiting = Vec::new();
    for key in &batch.also_holds {
        if let Some(flight) = cx.worker(|w| w.flights.end(key)) {
            waiting.extend(flight.waiters.into_iter().map(|w| (*key, w.context_id)));
        }
        // What the split made, admitted by the store or not (none: the entity had an error).
        let made = cx.worker(|w| w.prefetch.fetched(key));
        let watchers = cx
            .plugin()
            .flights
            .complete(cx.host(), key, id, made.as_deref(), now_ms);
        if !watchers.is_empty() {
            cx.worker(|w| w.flights.published(*key, now_ms));
            wake(cx.host(), &watchers, key, made.as_deref());
        }
    }
    for (key, context) in waiting {
        answer_prefetched(cx, &key, context, None);
    }
    cx.worker(|w| w.prefetch.drop_fetched());
}

/// Answers request `context`, which waited for a fetch holding `key` (`woken`: that entity's
/// entry, as another worker's wake-up brought it), from entries if every entity its batch asks
/// for is in one now; waits again if one of them is still being fetched; else lets it go
/// upstream as it was sent.
pub fn answer_prefetched(
    cx: &mut Ctx<'_, impl RootHost>,
    key: &CacheKey,
    context: u32,
    woken: Option<&[u8]>,
) {
    let Some(batch) = cx.worker(|w| w.prefetch.take_waiting(context)) else {
        return;
    };
    let mut pending = None;
    // An entry the fetch made is handed over, not looked up: one a purge made since it was asked
    // for covers is no entry (the batch then goes upstream itself).
    let made = from_entries(cx, &batch, Use::Fresh, |cx, k| {
        let entry = match woken {
            Some(entry) if k == key => Some(entry.to_vec()),
            _ => prefetched(cx, k).map_err(|p| pending = p).ok(),
        }?;
        (!overtaken(cx, &entry)).then_some(entry)
    });
    match (made, pending) {
        (Some(response), _) => {
            answer(
                cx,
                context,
                key,
                Labelled::new(&response, Label::PREFETCHED),
            );
            count_served(cx, Some(&batch));
        }
        (None, Some(next)) if wait_on(cx, context, next, batch) => {}
        _ => release(cx, context, Release::PrefetchIncomplete),
    }
}

/// The entry of entity `key` a prefetch (or refresh) made: what this worker's fetch made, a
/// fresh entry, or what another worker's ended flight holds; `Err(Some)`: still being fetched.
fn prefetched(
    cx: &mut Ctx<'_, impl RootHost>,
    key: &CacheKey,
) -> Result<Vec<u8>, Option<CacheKey>> {
    if let Some(made) = cx.worker(|w| w.prefetch.fetched(key)) {
        return Ok(made);
    }
    if let Some(entry) = fresh_entry(cx, key) {
        return Ok(entry);
    }
    let Some(me) = cx.worker(|w| Some((w.id, w.queue?))) else {
        return Err(None);
    };
    let now_ms = cx.host().now_ms();
    match cx.plugin().flights.peek_now(cx.host(), key, me, now_ms) {
        Peek::Done(Some(entry)) => Ok(entry),
        Peek::Waiting => Err(Some(*key)),
        Peek::Done(None) | Peek::Gone => Err(None),
    }
}

/// What to answer the waiters of an entity `batch` (the one this worker's requests waited on)
/// instead of a failure: the batch assembled from its entities' entries within their
/// stale-if-error window (every one of them, else nothing).
pub fn batch_instead_of_error(
    cx: &mut Ctx<'_, impl RootHost>,
    batch: &EntityBatch,
) -> Option<Response> {
    from_entries(cx, batch, Use::InErrorWindow, |cx, k| error_entry(cx, k))
}

/// Counts the entities of `batch` (if the answer was one) as served from entries: a waiter was
/// answered with [`batch_instead_of_error`]'s, which holds every one of them.
pub fn count_served(cx: &mut Ctx<'_, impl RootHost>, batch: Option<&EntityBatch>) {
    if let Some(batch) = batch {
        let served: usize = batch.entities.iter().map(Vec::len).sum();
        cx.host().count_n(Counter::EntitiesServed, served as u64);
    }
}

/// Which entries an answer assembled from entries may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    /// Fresh ones (said so by the `max-age` of the first to expire).
    Fresh,
    /// Those within their stale-if-error window (`max-age=0`).
    InErrorWindow,
}

/// `batch` assembled from its entities' entries, each as `find` gives it (`None`: not every one
/// has an entry, so no answer).
fn from_entries<'a, H: RootHost>(
    cx: &mut Ctx<'a, H>,
    batch: &EntityBatch,
    using: Use,
    mut find: impl FnMut(&mut Ctx<'a, H>, &CacheKey) -> Option<Vec<u8>>,
) -> Option<Response> {
    let now_ms = cx.host().now_ms();
    let mut remaining_ms = u64::MAX;
    let mut bodies: Vec<Vec<Vec<u8>>> = Vec::with_capacity(batch.entities.len());
    for row in &batch.entities {
        let mut found = Vec::with_capacity(row.len());
        for (key, _) in row {
            let bytes = find(cx, &(*key)?)?;
            let entry = Entry::decode(&bytes).ok()?;
            remaining_ms = remaining_ms.min(entry.expires_at_ms.saturating_sub(now_ms));
            found.push(entry.body.to_vec());
        }
        bodies.push(found);
    }
    let texts = bodies
        .iter()
        .map(|row| row.iter().map(|b| std::str::from_utf8(b).ok()).collect())
        .collect::<Option<Vec<Vec<&str>>>>()?;
    let max_age = match using {
        Use::Fresh if remaining_ms != u64::MAX => remaining_ms / 1000,
        _ => 0,
    };
    let cache_control = match batch.private {
        true => format!("private, max-age={max_age}"),
        false => format!("max-age={max_age}"),
    };
    let headers = [
        ("content-type", "application/json"),
        ("cache-control", cache_control.as_str()),
        ("age", "0"),
    ];
    Some(Response {
        status: 200,
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        body: assemble(&batch.req, &texts, None),
        tags: String::new(),
    })
}
