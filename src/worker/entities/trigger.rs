//! Entity mode's prefetch (`entities.types.<T>.prefetch`, see `entities::prefetch`), from a
//! request's side:
//! - a gateway's `_entities` batch teaches this worker how the gateway asks for each prefetched
//!   type it names ([`learn`]);
//! - an answer passing this hop starts the fetch of the entities of those types it names that no
//!   entry holds and no worker fetches yet (`entities::prefetch`); requests on such a route keep
//!   their head for it ([`trigger`]);
//! - a batch that misses only entities being fetched so (by this worker or another: the
//!   gateway's next batch often comes on another of its connections, so to another worker)
//!   waits for those fetches instead of sending its own ([`wait`]); it is answered from the
//!   entries once they are stored (another worker's come with its wake-up), or let go upstream
//!   as it was sent (`entities::fetch::answer_prefetched`).

use crate::config::Config;
use crate::effects::counters::Counter;
use crate::effects::host::RequestHost;
use crate::entities::batch::EntityBatch;
use crate::entities::mode::{entity_mode, settings};
use crate::entities::prefetch::{Learned, Template, Trigger};
use crate::entities::request::EntitiesRequest;
use crate::request::classify::RequestHead;
use crate::request::key::CacheKey;
use crate::worker::ctx::Ctx;
use crate::worker::entities::flights::{can_fetch_entities, follow, wait_on};
use crate::worker::read::fetch_cluster;
use std::rc::Rc;

/// Whether requests on `head`'s route prefetch anything (then they keep their head for it).
pub fn prefetching(config: &Config, head: &RequestHead) -> bool {
    entity_mode(config, &head.route) && settings(config, &head.route).prefetches()
}

/// What the answer to the request `head` may start, on a route that prefetches.
pub fn trigger(config: &Config, head: &RequestHead) -> Option<Rc<Trigger>> {
    prefetching(config, head).then(|| {
        Rc::new(Trigger {
            head: head.clone(),
            depth: 0,
        })
    })
}

/// What the gateway's batch `req`, sent as `head`, teaches about the prefetched types it asks for.
pub fn learn(cx: &mut Ctx<'_, impl RequestHost>, head: &RequestHead, req: &EntitiesRequest) {
    let entities = settings(cx.config(), &head.route);
    let mut types: Vec<&str> = req
        .fields
        .iter()
        .flat_map(|f| f.distinct.iter().map(|r| r.typename.as_str()))
        .collect();
    types.sort_unstable();
    types.dedup();
    for typename in types {
        if !entities.prefetch(typename) {
            continue;
        }
        if cx.worker(|w| w.prefetch.asked(typename, req, head)) {
            continue;
        }
        let (Some(template), Some(cluster)) = (
            Template::learn(req, typename),
            fetch_cluster(cx.config(), cx.host(), head),
        ) else {
            continue;
        };
        cx.worker(|w| w.prefetch.learn(Learned::new(template, head, cluster)));
    }
}

/// Whether request `context`'s batch (`batch`, sent whole if let go) now waits for the fetch of
/// what it misses (`missing`): every one of them has a key and is being fetched, by this worker
/// or another. It waits on one of those fetches (another worker's if any, else the one this
/// worker started last), and is answered when that one ends (`entities::fetch`).
pub fn wait(
    cx: &mut Ctx<'_, impl RequestHost>,
    (context, head): (u32, &RequestHead),
    missing: &[Option<CacheKey>],
    batch: impl FnOnce() -> EntityBatch,
) -> bool {
    if missing.is_empty() || !can_fetch_entities(cx) {
        return false;
    }
    // Where nothing is prefetched, only a refresh of this worker's is worth a look (no read of
    // shared data for the others').
    let elsewhere = prefetching(cx.config(), head);
    let Some(key) = being_fetched(cx, missing, elsewhere) else {
        return false;
    };
    if !wait_on(cx, context, key, Rc::new(batch())) {
        return false;
    }
    cx.host().count(Counter::EntityPrefetchWaits);
    true
}

/// The fetch to wait on, if every key of `missing` is being fetched: another worker's (this
/// worker then follows each of those, to be woken with its entry), else the one this worker
/// started last.
fn being_fetched(
    cx: &mut Ctx<'_, impl RequestHost>,
    missing: &[Option<CacheKey>],
    look_elsewhere: bool,
) -> Option<CacheKey> {
    let mut latest_here: Option<(u64, CacheKey)> = None;
    let mut elsewhere = Vec::new();
    for key in missing {
        let key = (*key)?;
        match cx.worker(|w| w.flights.leading_since(&key)) {
            Some(since) if latest_here.is_none_or(|(s, _)| since >= s) => {
                latest_here = Some((since, key))
            }
            Some(_) => {}
            None if look_elsewhere => elsewhere.push(key),
            None => return None,
        }
    }
    // A batch that follows some and then finds one nobody fetches does not wait: the workers it
    // followed wake this one for nothing (a wake-up for a key no request here waits on is dropped).
    for key in &elsewhere {
        if !follow(cx, key) {
            return None;
        }
    }
    elsewhere.last().copied().or(latest_here.map(|(_, k)| k))
}
