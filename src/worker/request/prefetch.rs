//! Entity mode's prefetch (`entities.types.<T>.prefetch`, see `entities::prefetch`), from a
//! request's side:
//! - a gateway's `_entities` batch teaches this worker how the gateway asks for each prefetched
//!   type it names ([`learn`]);
//! - an answer passing this hop starts the fetch of the entities of those types it names that no
//!   entry holds and no worker fetches yet (`root::prefetch`); requests on such a route keep
//!   their head for it ([`trigger`]);
//! - a batch that misses only entities this worker is fetching so waits for that fetch instead
//!   of sending its own ([`wait`]); the root answers it from the entries once they are stored,
//!   or lets it go upstream as it was sent (`root::entity_fetch::release_held`).
//!
//! Only on this worker: a batch that lands on another worker fetches what it misses itself.

use crate::coalesce::waiters::LocalJoin;
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
use crate::worker::request::read::fetch_cluster;
use crate::worker::root::entity_flights::can_fetch_entities;
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
/// what it misses (`missing`): every one of them has a key and is being fetched by this worker.
/// It waits on the one whose fetch started last, and is answered when that fetch is stored.
pub fn wait(
    cx: &mut Ctx<'_, impl RequestHost>,
    context: u32,
    missing: &[Option<CacheKey>],
    batch: impl FnOnce() -> EntityBatch,
) -> bool {
    if missing.is_empty() || !can_fetch_entities(cx) {
        return false;
    }
    let latest = cx.worker(|w| {
        let mut latest: Option<(u64, CacheKey)> = None;
        for key in missing {
            let key = (*key)?;
            let since = w.waiters.leading_since(&key)?;
            if latest.is_none_or(|(s, _)| since >= s) {
                latest = Some((since, key));
            }
        }
        latest
    });
    let Some((_, key)) = latest else {
        return false;
    };
    if !cx.worker(|w| w.prefetch.wait(context, Rc::new(batch()))) {
        return false;
    }
    let (now_ms, max_waiters) = (cx.host().now_ms(), cx.config().max_waiters);
    let joined = cx.worker(|w| w.waiters.join(&key, context, now_ms, max_waiters));
    if joined != LocalJoin::Joined {
        cx.worker(|w| w.prefetch.take_waiting(context));
        return false;
    }
    cx.host().count(Counter::EntityPrefetchWaits);
    true
}
