//! Entity mode: an `_entities` batch none of whose entities is cached shares one fetch with the
//! identical batches of every worker, as whole answers do (`join`): one flight per batch, keyed
//! by what makes its answer differ (the whole request's key: subgraph, query, selection, every
//! representation in order, the key's headers; and the caller's identity when a type in it is
//! private). The root fetches it and splits the answer into entity entries, never a whole entry;
//! followers get the relayed answer. A batch that found some of its entities is never held for
//! another batch's fetch: its latency would be tied to that batch's (see docs/entities.md).

use crate::cache::status::CacheStatus;
use crate::cache::storable::Asked;
use crate::coalesce::sharing::key_names_caller;
use crate::config::{Lifetimes, Scope};
use crate::effects::host::RequestHost;
use crate::request::classify::RequestHead;
use crate::request::key::CacheKey;
use crate::worker::ctx::Ctx;
use crate::worker::entities::batch::EntityExchange;
use crate::worker::entities::trigger;
use crate::worker::flights::join::{join, Joined, Miss};
use crate::worker::flights::Outcome;
use crate::worker::read::read_identity;
use std::rc::Rc;

/// Joins (or leads) the flight of the all-miss batch `x` (the gateway's `body`), sent by request
/// `context`: its flight key while it waits, `None` when it goes upstream on its own.
pub fn join_batch(
    cx: &mut Ctx<'_, impl RequestHost>,
    context: u32,
    head: &RequestHead,
    body: &[u8],
    x: &EntityExchange,
) -> Option<CacheKey> {
    let config = cx.config();
    // A conditional request goes alone: its answer may be a 304 meant for its validators.
    if !config.coalesce || head.conditional() || !x.found_none() {
        return None;
    }
    let private = x.private(config);
    let identity = match private {
        true => Some(read_identity(config, cx.host(), head).filter(|id| !id.is_empty())?),
        false => None,
    };
    let key = batch_key(x, identity.as_deref())?;
    if cx.worker(|w| w.too_large.contains(&key)) {
        return None;
    }
    let scope = match private {
        true => Scope::Private,
        false => Scope::Public,
    };
    let batch = Rc::new(x.as_sent_batch(private));
    let now_ms = cx.host().now_ms();
    let miss = Miss {
        context,
        key,
        head,
        body: Some(body.to_vec()),
        asked: Asked {
            lifetimes: Lifetimes::default(),
            born_us: batch.born_us,
            operation: Rc::default(),
        },
        key_names_caller: key_names_caller(scope, &config.vary_headers, &head.vary),
        scope,
        now_ms,
        entities: Some(Rc::clone(&batch)),
        trigger: trigger::trigger(config, head),
    };
    if join(cx, miss) != Joined::Waiting {
        return None;
    }
    let keep_ms = cx.plugin().lease_ms().saturating_add(config.max_wait_ms);
    cx.worker(|w| w.entity_batches.remember(key, batch, now_ms, keep_ms));
    Some(key)
}

/// The flight key of a batch: its whole-request key (`request::key`), made an entity batch's,
/// scoped to `identity` when given.
fn batch_key(x: &EntityExchange, identity: Option<&[u8]>) -> Option<CacheKey> {
    let key = x.batch_key()?;
    Some(match identity {
        Some(id) => key.scoped(id),
        None => key,
    })
}

/// The waiting request `context` hears back (its response callbacks run): how the root answered
/// it (`MISS`, `COALESCED`, `STALE`); `None`: it was let go (or Envoy answered it) and goes
/// upstream as forwarded.
pub fn answered(cx: &mut Ctx<'_, impl RequestHost>, context: u32) -> Option<CacheStatus> {
    match cx.try_worker(|w| w.flights.outcome(context)).flatten() {
        Some(Outcome::Answered { cache, .. }) => Some(cache),
        Some(Outcome::Released(_)) => None,
        None => {
            cx.try_worker(|w| w.flights.stop_waiting(context));
            None
        }
    }
}
