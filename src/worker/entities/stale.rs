//! Stale entities in entity mode. An entity past its lifetime but within its
//! `stale-while-revalidate` window counts as found (the answer says `STALE`), and is refreshed
//! in the background by the root context, which outlives the request (the request's own callout
//! dies with it once answered), with the body rewritten to the stale representations alone.
//! At most one refresh per entity at a time, across workers: each stale entity's key is claimed
//! as a flight (lead only, so nobody waits on it), and the refresh asks for the entities it won.
//! And when the partial fetch fails, the missing entities may come from entries within their
//! `stale-if-error` window.

use crate::coalesce::upstream::{upstream_request, SharedFetch};
use crate::config::{Config, Scope};
use crate::effects::counters::Counter;
use crate::effects::host::RequestHost;
use crate::entities::batch::EntityBatch;
use crate::entities::mode::listener_settings;
use crate::entities::request::EntitiesRequest;
use crate::request::classify::RequestHead;
use crate::request::key::CacheKey;
use crate::worker::callout::Returned;
use crate::worker::ctx::Ctx;
use crate::worker::entities::flights::{can_fetch_entities, claim, holding, Won};
use crate::worker::read::fetch_cluster;
use crate::worker::serving::stale::error_entry;
use std::rc::Rc;

/// Entities of a request: field, distinct index, key (`None`: not cacheable).
type Picked = [(usize, usize, Option<CacheKey>)];

/// An entry found for an entity: field, distinct index, entry.
pub type StaleEntry = (usize, usize, Rc<[u8]>);

/// Whether a stale entity may be served: only where a refresh can run (coalescing on, and a
/// wake-up queue through which the root is asked to send it).
pub fn may_refresh(cx: &mut Ctx<'_, impl RequestHost>) -> bool {
    can_fetch_entities(cx)
}

fn private(config: &Config, req: &EntitiesRequest, f: usize, d: usize) -> bool {
    let field = req.fields.get(f);
    match field.and_then(|field| Some((field, field.distinct.get(d)?))) {
        Some((field, rep)) => {
            listener_settings(config).scope_in(&rep.typename, &field.selection) == Scope::Private
        }
        // Unknown: as private (the fetch then carries the caller's credentials).
        None => true,
    }
}

/// Starts the background refresh of the request's `stale` entities that no worker refreshes
/// yet; `batch(sent, private)` is what the root needs to store the answer (see `entities::batch`).
pub fn refresh(
    cx: &mut Ctx<'_, impl RequestHost>,
    head: &RequestHead,
    req: &EntitiesRequest,
    stale: &Picked,
    batch: impl FnOnce(Vec<Vec<usize>>, bool) -> EntityBatch,
) {
    let stale: Vec<Won> = stale
        .iter()
        .filter_map(|&(f, d, key)| key.map(|k| (f, d, k)))
        .collect();
    if stale.is_empty() {
        return;
    }
    let Some((permit, won)) = claim(cx, &stale) else {
        return;
    };
    // No refresh can run without a fetch or a root to send it: the permit, dropped, gives its
    // flights up (the next request tries again).
    let Some(fetch) = refresh_fetch(cx, head, req, &won, batch) else {
        return;
    };
    if permit.hand_to_root(cx, fetch) {
        cx.host().count(Counter::Refreshes);
    }
}

/// The root's fetch of the `won` entities: the request rewritten to them, holding their flights
/// (see [`holding`]).
fn refresh_fetch(
    cx: &mut Ctx<'_, impl RequestHost>,
    head: &RequestHead,
    req: &EntitiesRequest,
    won: &[Won],
    batch: impl FnOnce(Vec<Vec<usize>>, bool) -> EntityBatch,
) -> Option<SharedFetch> {
    let config = cx.config();
    let mut sent = vec![Vec::new(); req.fields.len()];
    let mut private_type = false;
    for &(f, d, _) in won {
        sent.get_mut(f)?.push(d);
        private_type |= private(config, req, f, d);
    }
    let scope = match private_type {
        true => Scope::Private,
        false => Scope::Public,
    };
    let cluster = fetch_cluster(config, cx.host(), head)?;
    let request = upstream_request(cluster, head, Some(req.rewritten(&sent)), config, scope)?;
    let mut fetch = holding(request, batch(sent, private_type), won, None)?;
    fetch.key_names_caller = private_type;
    Some(fetch)
}

/// The fetch of the `missing` entities failed (reset, timeout, 5xx): each one's entry within its
/// `stale-if-error` window, or `None` when one has none (then the gateway's request goes
/// upstream whole, as without the window).
pub fn error_entries(
    cx: &mut Ctx<'_, impl RequestHost>,
    missing: &Picked,
    returned: &Returned,
) -> Option<Vec<StaleEntry>> {
    let failed = returned.headers.is_none() || returned.status().is_none_or(|s| s >= 500);
    if !failed || missing.is_empty() {
        return None;
    }
    missing
        .iter()
        .map(|&(f, d, key)| Some((f, d, error_entry(cx, &key?)?.into())))
        .collect()
}
