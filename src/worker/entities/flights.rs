//! Root fetches of single entities (a stale refresh's, a prefetch's): each entity's key is
//! claimed as a flight, lead only (a worker that finds it claimed serves its stale entry, fetches
//! what it misses itself, or, a batch missing only entities being fetched, [`follow`]s them), so
//! that one worker at a time fetches it; one fetch holds the flights of all it asks for and ends
//! them once its answer is stored (`entity_fetch::release_held`), each with its entity's entry
//! for the workers that follow it, when the batches waiting on one are answered.

use crate::cache::storable::Asked;
use crate::coalesce::flights::{Claim, Join, JoinMode};
use crate::coalesce::liveness::Alive;
use crate::coalesce::upstream::{L2Role, SharedFetch};
use crate::coalesce::waiters::LocalJoin;
use crate::config::Lifetimes;
use crate::effects::host::{Callout, Host};
use crate::entities::batch::EntityBatch;
use crate::entities::prefetch::Trigger;
use crate::request::key::CacheKey;
use crate::worker::ctx::Ctx;
use crate::worker::flights::permit::{LeadPermit, Led};
use std::rc::Rc;

/// One entity this worker fetches: its field, its distinct index, its key.
pub type Won = (usize, usize, CacheKey);

/// Whether the root may fetch entities for requests: coalescing on, and a wake-up queue through
/// which it is asked to.
pub fn can_fetch_entities(cx: &mut Ctx<'_, impl Host>) -> bool {
    cx.config().coalesce && cx.worker(|w| w.queue.is_some())
}

/// The entities of `stale` whose fetch this worker now leads (no worker fetches them yet), and
/// its lead on their flights; `None` when it leads none.
pub fn claim<'a, H: Host>(
    cx: &mut Ctx<'a, H>,
    stale: &[Won],
) -> Option<(LeadPermit<'a, H>, Vec<Won>)> {
    let (me, queue) = cx.worker(|w| Some((w.id, w.queue?)))?;
    let now_ms = cx.host().now_ms();
    let alive = Alive::read(cx.host(), now_ms);
    let lease_ms = cx.plugin().lease_ms();
    let mut permit = LeadPermit::new(cx, me, Led::Refresh, now_ms);
    let mut won = Vec::new();
    for &(f, d, key) in stale {
        // Refreshed here already, or named twice by this request.
        if permit.holds(&key) || cx.worker(|w| w.flights.has(&key)) {
            continue;
        }
        let claim = Claim {
            key,
            me,
            queue,
            now_ms,
            lease_ms,
            mode: JoinMode::LeadOnly,
        };
        if cx.plugin().flights.join(cx.host(), &claim, &alive) == Join::Lead {
            permit.add(key);
            won.push((f, d, key));
        }
    }
    (!won.is_empty()).then_some((permit, won))
}

/// Whether another worker fetches the entity `key` now: then this worker is woken, with the
/// entity's entry, when that fetch ends.
pub fn follow(cx: &mut Ctx<'_, impl Host>, key: &CacheKey) -> bool {
    let Some((me, queue)) = cx.worker(|w| Some((w.id, w.queue?))) else {
        return false;
    };
    let now_ms = cx.host().now_ms();
    let claim = Claim::follow_only(*key, me, queue, now_ms);
    let alive = Alive::read(cx.host(), now_ms);
    cx.plugin().flights.join(cx.host(), &claim, &alive) == Join::Follow
}

/// Has request `context`, whose `batch` misses entity `key`, wait for `key`'s fetch (this
/// worker's, or another's it follows): answered from entries when it ends
/// (`entity_fetch::answer_prefetched`). `false`: too many wait, and it goes its own way.
pub fn wait_on(
    cx: &mut Ctx<'_, impl Host>,
    context: u32,
    key: CacheKey,
    batch: Rc<EntityBatch>,
) -> bool {
    if !cx.worker(|w| w.prefetch.wait(context, batch)) {
        return false;
    }
    let (now_ms, max_waiters) = (cx.host().now_ms(), cx.config().max_waiters);
    let joined = cx.worker(
        |w| match w.flights.join(&key, context, now_ms, max_waiters) {
            // Another worker's fetch, which no request here follows yet.
            LocalJoin::NoFlight => {
                w.flights.follow(key, context, now_ms);
                true
            }
            joined => joined == LocalJoin::Joined,
        },
    );
    if !joined {
        cx.worker(|w| w.prefetch.take_waiting(context));
    }
    joined
}

/// The root's fetch of `batch` (sent as `request`) for the `won` entities: it holds each one's
/// flight (ended when it is stored, and the batches that wait on one are answered then: see
/// `entities::fetch::release_held`), under a key of its own that nobody else waits on;
/// `trigger`: the prefetch its answer may start.
pub fn holding(
    request: Callout,
    mut batch: EntityBatch,
    won: &[Won],
    trigger: Option<Trigger>,
) -> Option<SharedFetch> {
    let key = won.first()?.2.scoped(b"entity-fetch");
    batch.also_holds = won.iter().map(|(_, _, k)| *k).collect();
    Some(SharedFetch {
        key,
        request,
        asked: Asked {
            lifetimes: Lifetimes::default(),
            born_us: batch.born_us,
            operation: Rc::default(),
        },
        dispatched_ms: 0,
        key_names_caller: false,
        l2: L2Role::Off,
        entities: Some(Rc::new(batch)),
        trigger: trigger.map(Rc::new),
    })
}
