//! Storing the entities of a subgraph's answer to an `_entities` request, each as its own entry:
//! the one place, for a request's own answer (forwarded or partial) and for the root's fetches
//! (a coalesced batch, a background refresh).

use crate::cache::entry::Entry;
use crate::cache::fates::Fate;
use crate::cache::not_stored::NotStored;
use crate::config::Scope;
use crate::config::{Config, Lifetimes};
use crate::effects::host::{status, Host};
use crate::entities::answer::Fetched;
use crate::entities::entry::{entity_entry, Source};
use crate::entities::mode::listener_settings;
use crate::entities::request::{EntitiesRequest, Representation};
use crate::request::key::CacheKey;
use crate::worker::ctx::Ctx;
use crate::worker::entities::l2::queue_stores;
use crate::worker::serving::recent::{self, Whose};
use crate::worker::serving::store::insert;

/// What an answer was asked for: the request, what of it was sent (per field, the distinct
/// representation each item of the answer is), and when.
#[derive(Debug, Clone, Copy)]
pub struct Split<'a> {
    pub req: &'a EntitiesRequest,
    pub sent: &'a [Vec<usize>],
    pub born_us: u64,
}

/// What an entity the subgraph answered may be stored for: its type's stale windows with `ttl`
/// (a `null` entity, not found, gets none).
pub fn allowed(config: &Config, rep: &Representation, raw: &str, ttl: u64) -> Lifetimes {
    let windows = match raw {
        "null" => Lifetimes::default(),
        _ => listener_settings(config).lifetimes(&rep.typename),
    };
    Lifetimes {
        ttl_seconds: ttl,
        ..windows
    }
}

/// Stores every entity of `fetched` that may be, `policy(f, d)` giving the key (`None`: not
/// stored) and TTL of field `f`'s distinct representation `d`, in L1 and queued for the fleet's
/// L2; the shortest lifetime stored, in seconds, or 0 when an entity could not be stored (the
/// answer then says so: nothing in it may be reused), and whether an L2 write was queued.
pub fn store(
    cx: &mut Ctx<'_, impl Host>,
    split: &Split<'_>,
    policy: impl Fn(usize, usize) -> Option<(Option<CacheKey>, u64)>,
    headers: &[(String, Vec<u8>)],
    fetched: &Fetched<'_>,
) -> StoredEntities {
    let config = cx.config();
    let now_ms = cx.host().now_ms();
    let source = Source {
        status: status(headers).unwrap_or(0),
        headers,
        born_us: split.born_us,
        now_ms,
    };
    let unplaced = fetched.has_unplaced_errors();
    let mut shortest: Option<u64> = None;
    let mut done: Vec<(usize, usize)> = Vec::new();
    let mut to_l2 = Vec::new();
    for (f, list) in fetched.entities.iter().enumerate() {
        for (i, got) in list.iter().enumerate() {
            let Some(d) = split.sent.get(f).and_then(|s| s.get(i)).copied() else {
                continue;
            };
            let field = split.req.fields.get(f);
            let rep = field.and_then(|field| field.distinct.get(d));
            let (Some(got), Some((key, ttl_seconds)), Some(rep), Some(field)) =
                (got, policy(f, d), rep, field)
            else {
                continue;
            };
            if done.contains(&(f, d)) {
                continue;
            }
            done.push((f, d));
            let ttl = if got.raw == "null" {
                listener_settings(config).null_ttl_seconds
            } else {
                ttl_seconds
            };
            let allowed = allowed(config, rep, got.raw, ttl);
            let entities = listener_settings(config);
            // A public entity whose answer holds a private object: not for everyone's entry.
            let leaks = entities.scope_in(&rep.typename, &field.selection) == Scope::Public
                && entities.holds_private(got.raw, &config.key_fields);
            let storable =
                (got.storable() || (got.raw == "null" && !got.errored)) && !unplaced && !leaks;
            let entry = match (key, storable && ttl > 0) {
                (Some(key), true) => entity_entry(&key, rep, got.raw, &source, config, &allowed)
                    .ok()
                    .map(|e| (key, e)),
                _ => None,
            };
            let Some((key, bytes)) = entry else {
                shortest = Some(0);
                if let Some(key) = key.filter(|_| ttl > 0) {
                    keep_answer(cx, (&key, &rep.typename), None);
                }
                continue;
            };
            let lifetime =
                Entry::peek(&bytes).map_or(0, |p| p.expires_at_ms.saturating_sub(now_ms) / 1000);
            shortest = Some(shortest.map_or(lifetime, |s| s.min(lifetime)));
            let _ = insert(cx, &key, &bytes, now_ms);
            keep_answer(cx, (&key, &rep.typename), Some(&bytes));
            to_l2.push((key, bytes));
        }
    }
    // The fleet's L2, in one mstore the root sends (at once if the caller asks it to, else on
    // its next tick).
    let queued = queue_stores(cx, &to_l2);
    StoredEntities {
        shortest,
        queued,
        entries: to_l2,
    }
}

/// Keeps what became of an entity the subgraph answered for the what-if route: the entry made
/// of it, or `None` if it could not be stored.
fn keep_answer(
    cx: &mut Ctx<'_, impl Host>,
    (key, typename): (&CacheKey, &str),
    entry: Option<&[u8]>,
) {
    if !cx.worker(|w| w.recent.is_on()) {
        return;
    }
    let whose = Whose::entity(cx.plugin().table.hash(key), typename);
    let fate = match entry {
        Some(_) => Fate::Stored { until_s: 0 },
        None => Fate::NotStored(NotStored::EntityNotStored),
    };
    recent::answer(cx, whose, fate, entry);
}

/// What storing the entities of an answer did.
#[derive(Debug, Default)]
pub struct StoredEntities {
    /// The shortest lifetime stored, seconds (`Some(0)`: an entity was not stored).
    pub shortest: Option<u64>,
    /// A write to the fleet's L2 was queued for the root.
    pub queued: bool,
    /// Every entry made, by key, admitted to the store or not.
    pub entries: Vec<(CacheKey, Vec<u8>)>,
}
