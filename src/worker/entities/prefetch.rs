//! Starting a prefetch (`entities::prefetch`): an answer passing this hop (forwarded to a
//! request, or fetched by the root) names entities of types the gateway asked for before; those
//! no fresh entry holds and no worker fetches yet are asked for, from the root (which outlives
//! any request), each entity's flight claimed (`entity_flights`). Run by a request's callbacks or
//! the root's: the fetch is queued, and the root sends it at its next wake-up.

use crate::coalesce::upstream::upstream_request;
use crate::config::Scope;
use crate::effects::counters::Counter;
use crate::effects::host::Host;
use crate::entities::batch::EntityBatch;
use crate::entities::mode::settings;
use crate::entities::prefetch::{may_name, named, Learned, Template, Trigger};
use crate::entities::request::{EntitiesRequest, Representation};
use crate::json;
use crate::request::classify::key_context;
use crate::request::key::{CacheKey, EntityKeys};
use crate::worker::ctx::Ctx;
use crate::worker::entities::flights::{can_fetch_entities, claim, holding, Won};
use crate::worker::serving::stale::fresh_entry;

/// `body`, a `200` answer to `trigger`'s request passing this hop, may name entities the gateway
/// will ask for next: starts the fetch of those not cached.
pub fn after_answer(cx: &mut Ctx<'_, impl Host>, trigger: &Trigger, body: &[u8]) {
    // The prefetch's body is plain JSON; a header saying otherwise must not go with it.
    if trigger.head.content_encoding.is_some() || !can_fetch_entities(cx) {
        return;
    }
    let learned = cx.worker(|w| w.prefetch.templates());
    let templates: Vec<&Template> = learned.iter().map(|l| &l.template).collect();
    if templates.is_empty() || !may_name(body, &templates) {
        return;
    }
    let Some(answer) = std::str::from_utf8(body)
        .ok()
        .and_then(|t| json::parse(t).ok())
    else {
        return;
    };
    for (l, reps) in learned.iter().zip(named(&answer, &templates)) {
        if !reps.is_empty() {
            start(cx, trigger, l, reps);
        }
    }
}

/// Starts the fetch of the entities `reps` (of `learned`'s type) that no fresh entry holds and no
/// worker fetches yet.
fn start(
    cx: &mut Ctx<'_, impl Host>,
    trigger: &Trigger,
    learned: &Learned,
    reps: Vec<Representation>,
) {
    let config = cx.config();
    let head = learned.head_for(&trigger.head);
    let entities = settings(config, &head.route);
    let typename = learned.template.typename.as_str();
    if !entities.prefetch(typename) {
        return;
    }
    let ttl = entities.lifetimes(typename).ttl_seconds;
    let (req, _) = learned.template.batch(reps);
    let Some((f, field)) = req
        .fields
        .iter()
        .enumerate()
        .find(|(_, field)| !field.distinct.is_empty())
    else {
        return;
    };
    let full = String::from_utf8_lossy(&head.path).into_owned();
    let ctx = key_context(config, &head, &full);
    let keys = EntityKeys::new(&ctx, &req.ask(field));
    let all: Vec<CacheKey> = field
        .distinct
        .iter()
        .map(|r| keys.key(&r.canonical))
        .collect();
    let missing: Vec<Won> = all
        .iter()
        .enumerate()
        .filter(|(_, key)| fresh_entry(cx, key).is_none())
        .map(|(d, key)| (f, d, *key))
        .collect();
    let Some((permit, won)) = claim(cx, &missing) else {
        return;
    };
    let cluster = config
        .upstream_cluster
        .clone()
        .unwrap_or_else(|| learned.cluster.clone());
    let batch = batch_of(req, f, (&all, ttl), &won, cx.host().now_us());
    let body = batch.req.rewritten(&batch.sent);
    let request = upstream_request(cluster, &head, Some(body), config, Scope::Public);
    // Without a fetch the permit, dropped, gives the flights up.
    let Some(fetch) = request.and_then(|r| holding(r, batch, &won, trigger.next())) else {
        return;
    };
    if permit.hand_to_root(cx, fetch) {
        cx.host().count(Counter::EntityPrefetches);
    }
}

/// The batch the root fetches: field `f` of `req` asks for the `won` entities (of `all`, each
/// kept for `ttl` seconds).
fn batch_of(
    req: EntitiesRequest,
    f: usize,
    (all, ttl): (&[CacheKey], u64),
    won: &[Won],
    born_us: u64,
) -> EntityBatch {
    let mut rows = vec![Vec::new(); req.fields.len()];
    let mut sent = vec![Vec::new(); req.fields.len()];
    if let (Some(row), Some(s)) = (rows.get_mut(f), sent.get_mut(f)) {
        *row = all.iter().map(|k| (Some(*k), ttl)).collect();
        *s = won.iter().map(|(_, d, _)| *d).collect();
    }
    EntityBatch {
        req,
        entities: rows,
        sent,
        born_us,
        private: false,
        also_holds: Vec::new(),
    }
}
