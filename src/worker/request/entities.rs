//! One `_entities` request through entity mode (`entities`): each distinct representation looked
//! up on its own; all found, answered here (`HIT`); some found, the rest fetched by this request's
//! own callout with only the missing representations and merged back (`PARTIAL`); none found, or
//! anything odd about the partial fetch, the gateway's own request goes upstream untouched (`MISS`)
//! and its answer is split into entries as it streams back (or, when identical batches coalesce,
//! `entity_join`, the root fetches it once for all). Stale entities: `entity_stale`.

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
use crate::worker::entity_store::{self, Split};
use crate::worker::request::entity_stale::{self, StaleEntry};
use crate::worker::request::lookup::{find, Found};
use crate::worker::request::prefetch;
use crate::worker::request::read::{fetch_cluster, read_identity};
use crate::worker::root::answer::CACHE_HEADER;
use crate::worker::root::entity_fetch::split_held;
use crate::worker::root::shared_fetch::request_dispatch;
use std::rc::Rc;

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
    /// Paused for the prefetch of what it misses (see `request::prefetch`); let go, it is
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
/// `root::timer`) if they will store an entity this batch misses: a gateway asking again once
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
    entity_stale::refresh(cx, head, &x.req, &stale, |sent, private| {
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
    if prefetch::wait(cx, (context, head), &waited, || {
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

/// The request goes upstream as the gateway sent it: its answer holds every position.
fn forwarded(mut x: EntityExchange) -> EntityExchange {
    x.sent = x.req.fields.iter().map(|f| f.positions.clone()).collect();
    x.token = None;
    x
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
    let may_refresh = entity_stale::may_refresh(cx);
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
                Some(k) if life.ttl_seconds > 0 => match find(cx, &k, now_ms) {
                    Found::Fresh(entry) => (Some(entry), false),
                    // Served while a refresh runs (see `entity_stale`).
                    Found::Stale(entry) if may_refresh => (Some(entry), true),
                    _ => (None, false),
                },
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

/// The entity JSON of every entry found, per field and distinct representation (`null` where
/// none was found or one does not decode).
fn entries<'a>(decoded: &'a [Vec<Option<Entry<'a>>>]) -> Vec<Vec<&'a str>> {
    decoded
        .iter()
        .map(|f| {
            f.iter()
                .map(|e| {
                    e.as_ref()
                        .and_then(|e| std::str::from_utf8(e.body).ok())
                        .unwrap_or("null")
                })
                .collect()
        })
        .collect()
}

fn decode_found(x: &EntityExchange) -> Vec<Vec<Option<Entry<'_>>>> {
    x.slots
        .iter()
        .map(|f| {
            f.iter()
                .map(|s| s.found.as_deref().and_then(|b| Entry::decode(b).ok()))
                .collect()
        })
        .collect()
}

/// The smallest remaining lifetime among the entries, in seconds.
fn remaining_s(decoded: &[Vec<Option<Entry<'_>>>], now_ms: u64) -> Option<u64> {
    decoded
        .iter()
        .flatten()
        .flatten()
        .map(|e| e.expires_at_ms.saturating_sub(now_ms) / 1000)
        .min()
}

/// Answers from the entries found: `HIT`, or `STALE` when one of them is past its lifetime (the
/// label it gave).
fn answer_from_entries(
    cx: &mut Ctx<'_, impl RequestHost>,
    x: &EntityExchange,
    now_ms: u64,
) -> CacheStatus {
    let decoded = decode_found(x);
    let body = assemble(&x.req, &entries(&decoded), None);
    let max_age = remaining_s(&decoded, now_ms).unwrap_or(0);
    let hits = decoded.iter().flatten().flatten().count();
    cx.host().count_n(Counter::EntitiesServed, hits as u64);
    let label = match x.slots.iter().flatten().any(|s| s.stale) {
        true => {
            cx.host().count(Counter::StaleServed);
            CacheStatus::Stale
        }
        false => CacheStatus::Hit,
    };
    respond(cx, x, &body, (max_age, label), (hits, 0));
    label
}

fn respond(
    cx: &mut Ctx<'_, impl RequestHost>,
    x: &EntityExchange,
    body: &[u8],
    (max_age, label): (u64, CacheStatus),
    (hits, fetched): (usize, usize),
) {
    let entities = listener_settings(cx.config());
    let private = x.slots.iter().flatten().any(|s| s.key.is_some())
        && x.req.fields.iter().any(|f| {
            f.distinct
                .iter()
                .any(|r| entities.scope_in(&r.typename, &f.selection) == Scope::Private)
        });
    let cache_control = match private {
        true => format!("private, max-age={max_age}"),
        false => format!("max-age={max_age}"),
    };
    let counts = format!("hit={hits} fetched={fetched}");
    let mut headers = vec![
        ("content-type", "application/json"),
        ("cache-control", cache_control.as_str()),
        ("age", "0"),
        (CACHE_HEADER, label.as_str()),
    ];
    if cx.config().debug_headers {
        headers.push((ENTITIES_HEADER, counts.as_str()));
    }
    cx.host().respond(200, headers, body);
}

/// Sends the rewritten request for the `missing` representations; its token, or `None` when it
/// cannot be sent (then the gateway's request goes upstream whole).
fn dispatch_partial(
    cx: &mut Ctx<'_, impl RequestHost>,
    head: &RequestHead,
    x: &EntityExchange,
    missing: &[Vec<usize>],
) -> Option<u32> {
    let config = cx.config();
    let cluster = fetch_cluster(config, cx.host(), head)?;
    // What it fetches is stored for everyone who may share it: only the headers the shared fetch
    // carries (the key's, the operator's `forward_headers`; the caller's credentials and
    // identity only where a private type is asked for, whose entries are keyed by that identity).
    let scope = if x.private(config) {
        Scope::Private
    } else {
        Scope::Public
    };
    let callout = upstream_request(cluster, head, Some(x.req.rewritten(missing)), config, scope)?;
    cx.host().dispatch(&callout, config.fetch_timeout_ms).ok()
}

/// The partial fetch came back: merged and answered (`Ok`), or given up on (`Err`: the caller
/// lets the request go upstream whole, and captures its answer).
pub fn on_partial(
    cx: &mut Ctx<'_, impl RequestHost>,
    mut x: Box<EntityExchange>,
    returned: &Returned,
) -> Result<Option<Vec<u8>>, Box<EntityExchange>> {
    let limit = listener_settings(cx.config()).max_answer_bytes;
    let body = match &returned.headers {
        Some(headers) if returned.status() == Some(200) && returned.body_size <= limit => cx
            .host()
            .callout_body(returned.body_size)
            .map(|b| (headers.clone(), b)),
        _ => None,
    };
    match body.and_then(|(headers, body)| merge(cx, &x, &headers, &body)) {
        Some(merged) => Ok(Some(merged)),
        None => match entity_stale::error_entries(cx, &x.where_(|s| s.found.is_none()), returned) {
            Some(stale) => {
                x.fill_stale(stale);
                let now_ms = cx.host().now_ms();
                answer_from_entries(cx, &x, now_ms);
                Ok(None)
            }
            None => Err(Box::new(forwarded(*x))),
        },
    }
}

/// Stores what the partial answer brought and answers the merged batch (which it returns);
/// `None` if the answer cannot be merged.
fn merge(
    cx: &mut Ctx<'_, impl RequestHost>,
    x: &EntityExchange,
    headers: &[(String, Vec<u8>)],
    body: &[u8],
) -> Option<Vec<u8>> {
    let fetched = Fetched::read(body, &x.req, &x.sent).ok()?;
    let stored_s = store(cx, x, headers, &fetched);
    let decoded = decode_found(x);
    let mut texts = entries(&decoded);
    for (f, list) in fetched.entities.iter().enumerate() {
        for (i, got) in list.iter().enumerate() {
            let (Some(d), Some(got)) = (x.sent.get(f).and_then(|s| s.get(i)), got) else {
                continue;
            };
            if let Some(slot) = texts.get_mut(f).and_then(|t| t.get_mut(*d)) {
                *slot = got.raw;
            }
        }
    }
    let merged = assemble(&x.req, &texts, Some((&fetched, &x.sent)));
    let now_ms = cx.host().now_ms();
    let max_age = [remaining_s(&decoded, now_ms), stored_s]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(0);
    let hits = decoded.iter().flatten().flatten().count();
    let fetched_count = x.sent.iter().map(Vec::len).sum();
    let host = cx.host();
    host.count_n(Counter::EntitiesServed, hits as u64);
    host.count_n(Counter::EntitiesFetched, fetched_count as u64);
    host.count(Counter::EntityPartials);
    respond(
        cx,
        x,
        &merged,
        (max_age, CacheStatus::Partial),
        (hits, fetched_count),
    );
    Some(merged)
}

/// Stores every entity of `fetched` that may be (see `entity_store::store`).
fn store(
    cx: &mut Ctx<'_, impl RequestHost>,
    x: &EntityExchange,
    headers: &[(String, Vec<u8>)],
    fetched: &Fetched<'_>,
) -> Option<u64> {
    let split = Split {
        req: &x.req,
        sent: &x.sent,
        born_us: x.born_us,
    };
    let policy = |f: usize, d: usize| {
        let slot = x.slots.get(f)?.get(d)?;
        Some((slot.key, slot.life.ttl_seconds))
    };
    let stored = entity_store::store(cx, &split, policy, headers, fetched);
    // This request's own callout would die with it: the root sends the L2 write.
    if stored.queued {
        request_dispatch(cx);
    }
    stored.shortest
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
    /// The forwarded answer's headers: its copy starts if it is a `200`.
    pub fn on_response_headers(&mut self, headers: Vec<(String, Vec<u8>)>) {
        if status(&headers) == Some(200) {
            self.capture = Some((headers, Vec::new()));
        }
    }

    /// A chunk of the forwarded answer; past `max_answer_bytes` nothing is stored.
    pub fn on_chunk(&mut self, bytes: &[u8], limit: usize) {
        if let Some((_, body)) = &mut self.capture {
            if body.len() + bytes.len() > limit {
                self.capture = None;
            } else {
                body.extend_from_slice(bytes);
            }
        }
    }

    /// The forwarded answer is complete (counted as fetched): its entities are stored. The
    /// answer, if it was a `200` read whole.
    pub fn finish(&mut self, cx: &mut Ctx<'_, impl RequestHost>) -> Option<Vec<u8>> {
        let distinct: usize = self.req.fields.iter().map(|f| f.distinct.len()).sum();
        cx.host().count_n(Counter::EntitiesFetched, distinct as u64);
        let (headers, body) = self.capture.take()?;
        if let Ok(fetched) = Fetched::read(&body, &self.req, &self.sent) {
            store(cx, self, &headers, &fetched);
        }
        Some(body)
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
