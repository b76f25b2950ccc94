//! One `_entities` request through entity mode (`entities`): each distinct representation looked
//! up on its own; all found, answered here (`HIT`); some found, the rest fetched by this request's
//! own callout with only the missing representations and merged back (`PARTIAL`); none found, or
//! anything odd about the partial fetch, the gateway's own request goes upstream untouched (`MISS`)
//! and its answer is split into entries as it streams back (or, when identical batches coalesce,
//! `entity_join`, the root fetches it once for all). Stale entities: `entity_stale`.

mod answer;
mod partial;
mod streamed;

use crate::cache::entry::Entry;
use crate::cache::status::CacheStatus;
use crate::coalesce::upstream::upstream_request;
use crate::config::{Config, Lifetimes, Scope};
use crate::effects::counters::Counter;
use crate::effects::host::{status, RequestHost};
use crate::entities::answer::{assemble, Fetched};
use crate::entities::batch::EntityBatch;
use crate::entities::mode::{listener_settings, settings};
use crate::entities::request::EntitiesRequest;
use crate::request::classify::{key_context, RequestHead};
use crate::request::key::{CacheKey, EntityKeys};
use crate::worker::callout::Returned;
use crate::worker::ctx::Ctx;
use crate::worker::entities::fetch::split_held;
use crate::worker::entities::stale::{self, StaleEntry};
use crate::worker::entities::store::{self, Split};
use crate::worker::entities::trigger;
use crate::worker::read::{fetch_cluster, read_identity};
use crate::worker::serving::labels::CACHE_HEADER;
use crate::worker::serving::lookup::{find_placed, Found};
use crate::worker::serving::recent::{self, Whose};
use crate::worker::to_root::request_dispatch;
use answer::{answer_from_entries, decode_found, entries, remaining_s, respond};
pub use partial::on_partial;
use partial::{dispatch_partial, store};
use std::rc::Rc;
use streamed::forwarded;

/// A response's headers, as the host hands them over.
type Headers = Vec<(String, Vec<u8>)>;

/// With `debug_headers`: how many distinct entities came from entries, and how many were fetched.
pub const ENTITIES_HEADER: &str = "x-cache-entities";

/// One entity of the request: its key (`None`: not cacheable, a private type without an
/// identity), its lifetime, and the entry found for it (`stale`: past its lifetime, served
/// within its stale-while-revalidate or stale-if-error window).
#[derive(Debug, Clone)]
struct Slot {
    key: Option<CacheKey>,
    /// Its type's TTL and stale windows (what an entry from the fleet's L2 keeps of its own).
    life: Lifetimes,
    found: Option<Rc<[u8]>>,
    stale: bool,
}

/// An entities request in flight.
#[derive(Debug)]
pub struct EntityExchange {
    req: EntitiesRequest,
    /// Per field, per distinct representation.
    slots: Vec<Vec<Slot>>,
    /// Per field, the distinct representations the upstream answer holds, in its order.
    sent: Vec<Vec<usize>>,
    born_us: u64,
    /// The partial fetch's callout.
    pub token: Option<u32>,
    /// The forwarded answer, copied as it streams (`None`: not stored).
    capture: Option<(Headers, Vec<u8>)>,
}

/// What a request in entity mode does next.
#[derive(Debug)]
pub enum Next {
    /// Answered from entries: `HIT`, or `STALE`.
    Answered(CacheStatus),
    /// Paused for its partial fetch.
    Fetching(Box<EntityExchange>),
    /// Sent upstream untouched; its answer is split into entries.
    Forwarded(Box<EntityExchange>),
    /// Paused for the prefetch of what it misses (see `entities::trigger`); let go, it is
    /// forwarded.
    Waiting(Box<EntityExchange>),
}

/// Looks every representation up in this Envoy's entries (L1); then, once the fleet's L2 has
/// been asked for what is missing (if it is), [`decide`].
pub fn look_up_l1(
    cx: &mut Ctx<'_, impl RequestHost>,
    head: &RequestHead,
    req: EntitiesRequest,
) -> EntityExchange {
    let now_us = cx.host().now_us();
    let slots = look_up(cx, head, &req, now_us / 1000);
    EntityExchange {
        req,
        slots,
        sent: Vec::new(),
        born_us: now_us,
        token: None,
        capture: None,
    }
}

/// [`look_up_l1`], after splitting the answers the root relayed but holds unsplit (see
/// `timer`) if they will store an entity this batch misses: a gateway asking again once
/// answered finds what it was answered, and a batch they do not concern pays nothing for them.
pub fn look_up_l1_after_held(
    cx: &mut Ctx<'_, impl RequestHost>,
    head: &RequestHead,
    req: EntitiesRequest,
) -> EntityExchange {
    let x = look_up_l1(cx, head, req);
    let missing = x.missing_keys();
    if !cx.worker(|w| w.deferred_splits.holds_any(missing.iter().map(|(k, _)| k))) {
        return x;
    }
    split_held(cx);
    look_up_l1(cx, head, x.req)
}

/// With what was found (in L1, and in the fleet's L2 if it was asked): answers, fetches the
/// missing ones, or forwards.
pub fn decide(
    cx: &mut Ctx<'_, impl RequestHost>,
    (context, head): (u32, &RequestHead),
    mut x: EntityExchange,
) -> Next {
    let stale = x.where_(|s| s.stale && s.key.is_some());
    stale::refresh(cx, head, &x.req, &stale, |sent, private| {
        x.batch(sent, private)
    });
    let missing: Vec<Vec<usize>> = x
        .slots
        .iter()
        .map(|f| (0..f.len()).filter(|d| f[*d].found.is_none()).collect())
        .collect();
    if missing.iter().all(Vec::is_empty) {
        let now_ms = cx.host().now_ms();
        return Next::Answered(answer_from_entries(cx, &x, now_ms));
    }
    cx.host().set_request_header("accept-encoding", "identity");
    // What it misses is being fetched here already (a prefetch): it waits for that fetch.
    let config = cx.config();
    let waited: Vec<Option<CacheKey>> = x
        .slots
        .iter()
        .flatten()
        .filter(|s| s.found.is_none())
        .map(|s| s.key.filter(|_| s.life.ttl_seconds > 0))
        .collect();
    if trigger::wait(cx, (context, head), &waited, || {
        x.as_sent_batch(x.private(config))
    }) {
        return Next::Waiting(Box::new(forwarded(x)));
    }
    let found_any = x.slots.iter().flatten().any(|s| s.found.is_some());
    if found_any {
        if let Some(token) = dispatch_partial(cx, head, &x, &missing) {
            x.token = Some(token);
            x.sent = missing;
            return Next::Fetching(Box::new(x));
        }
    }
    Next::Forwarded(Box::new(forwarded(x)))
}

fn look_up(
    cx: &mut Ctx<'_, impl RequestHost>,
    head: &RequestHead,
    req: &EntitiesRequest,
    now_ms: u64,
) -> Vec<Vec<Slot>> {
    let config = cx.config();
    let entities = settings(config, &head.route);
    let full = String::from_utf8_lossy(&head.path).into_owned();
    let ctx = key_context(config, head, &full);
    let mut identity: Option<Option<Vec<u8>>> = None;
    let may_refresh = stale::may_refresh(cx);
    let mut slots = Vec::with_capacity(req.fields.len());
    for field in &req.fields {
        let mut row = Vec::with_capacity(field.distinct.len());
        let keys = EntityKeys::new(&ctx, &req.ask(field));
        for rep in &field.distinct {
            let life = entities.lifetimes(&rep.typename);
            let scope = entities.scope_in(&rep.typename, &field.selection);
            let key = keys.key(&rep.canonical);
            let key = match scope {
                Scope::Public => Some(key),
                Scope::Private => identity
                    .get_or_insert_with(|| read_identity(config, cx.host(), head))
                    .as_deref()
                    .filter(|id| !id.is_empty())
                    .map(|id| key.scoped(id)),
            };
            let (found, stale) = match key {
                Some(k) if life.ttl_seconds > 0 => {
                    look_up_one(cx, (&k, &rep.typename), now_ms, may_refresh)
                }
                _ => (None, false),
            };
            row.push(Slot {
                key,
                life,
                found,
                stale,
            });
        }
        slots.push(row);
    }
    slots
}

/// The entry to answer the entity keyed `key` of type `typename` with, and whether it is stale
/// (served while a refresh runs, see `entity_stale`); kept for the what-if route.
fn look_up_one(
    cx: &mut Ctx<'_, impl RequestHost>,
    (key, typename): (&CacheKey, &str),
    now_ms: u64,
    may_refresh: bool,
) -> (Option<Rc<[u8]>>, bool) {
    let hash = cx.plugin().table.hash(key);
    let (found, stale) = match find_placed(cx, key, hash, now_ms) {
        Found::Fresh(entry) => (Some(entry), false),
        Found::Stale(entry) if may_refresh => (Some(entry), true),
        _ => (None, false),
    };
    let whose = Whose::entity(hash, typename);
    recent::entity_lookup(cx, whose, now_ms, found.as_deref());
    (found, stale)
}

/// What the fleet's L2 (`worker::l2::entities`) needs of a request in flight.
impl EntityExchange {
    /// The keys of the entities found nowhere yet that may be cached, with their TTL.
    /// The entities found nowhere yet that may be stored, each with what it may be stored for.
    pub fn missing_keys(&self) -> Vec<(CacheKey, Lifetimes)> {
        self.slots
            .iter()
            .flatten()
            .filter(|s| s.found.is_none() && s.life.ttl_seconds > 0)
            .filter_map(|s| s.key.map(|k| (k, s.life)))
            .collect()
    }

    /// An entry for `key` found outside L1 (vetted, and put in L1 already): found for every
    /// entity with that key.
    pub fn found_elsewhere(&mut self, key: &CacheKey, entry: &Rc<[u8]>) {
        for slot in self.slots.iter_mut().flatten() {
            if slot.found.is_none() && slot.key.as_ref() == Some(key) {
                slot.found = Some(Rc::clone(entry));
            }
        }
    }
}

impl EntityExchange {
    /// Whether no entity of the request was found (then it may share an all-miss fetch).
    pub fn found_none(&self) -> bool {
        self.slots.iter().flatten().all(|s| s.found.is_none())
    }

    /// The field, distinct index and key (`None`: not cacheable) of the entities `pick` picks.
    fn where_(&self, pick: impl Fn(&Slot) -> bool) -> Vec<(usize, usize, Option<CacheKey>)> {
        let mut out = Vec::new();
        for (f, row) in self.slots.iter().enumerate() {
            for (d, slot) in row.iter().enumerate() {
                if pick(slot) {
                    out.push((f, d, slot.key));
                }
            }
        }
        out
    }

    /// Entries within their stale-if-error window for missing entities (field, distinct index).
    fn fill_stale(&mut self, entries: Vec<StaleEntry>) {
        for (f, d, bytes) in entries {
            if let Some(slot) = self.slots.get_mut(f).and_then(|row| row.get_mut(d)) {
                slot.found = Some(bytes);
                slot.stale = true;
            }
        }
    }

    /// Whether a private type is in the request.
    pub fn private(&self, config: &Config) -> bool {
        // The listener's scopes, also where a route turned entity mode on.
        let entities = listener_settings(config);
        self.req.fields.iter().any(|f| {
            f.distinct
                .iter()
                .any(|r| entities.scope_in(&r.typename, &f.selection) == Scope::Private)
        })
    }

    /// The flight key of this batch as the gateway sent it (see `CacheKey::entity_batch`);
    /// `None` when an entity has no key (a private type without an identity).
    pub fn batch_key(&self) -> Option<CacheKey> {
        if self.slots.len() != self.req.fields.len() {
            return None;
        }
        let mut fields = Vec::with_capacity(self.req.fields.len());
        for (field, slots) in self.req.fields.iter().zip(&self.slots) {
            let keys = field
                .positions
                .iter()
                .map(|d| slots.get(*d).and_then(|s| s.key.as_ref()))
                .collect::<Option<Vec<_>>>()?;
            fields.push((field.response_key.as_str(), keys));
        }
        Some(CacheKey::entity_batch(fields))
    }

    /// What the root needs to fetch this request as it is sent (see `entities::batch`).
    pub fn as_sent_batch(&self, private: bool) -> EntityBatch {
        self.batch(self.sent.clone(), private)
    }

    /// What the root needs to fetch `sent` of this request for it (see `entities::batch`).
    fn batch(&self, sent: Vec<Vec<usize>>, private: bool) -> EntityBatch {
        EntityBatch {
            req: self.req.clone(),
            entities: self
                .slots
                .iter()
                .map(|f| f.iter().map(|s| (s.key, s.life.ttl_seconds)).collect())
                .collect(),
            sent,
            born_us: self.born_us,
            private,
            also_holds: Vec::new(),
        }
    }
}
