//! A miss joins the wait for its key: this worker's wait if there is one, else the cross-worker
//! flight (following another worker's fetch, or leading a new one). A stale hit starts a
//! background refresh the same way, when nobody fetches the key yet.

use crate::cache::storable::Asked;
use crate::coalesce::flights::{Claim, Join, JoinMode};
use crate::coalesce::liveness::Alive;
use crate::coalesce::upstream::{upstream_request, L2Role, SharedFetch};
use crate::coalesce::waiters::LocalJoin;
use crate::config::Scope;
use crate::effects::counters::Counter;
use crate::effects::host::RequestHost;
use crate::entities::batch::EntityBatch;
use crate::entities::prefetch::Trigger;
use crate::request::classify::RequestHead;
use crate::request::key::CacheKey;
use crate::worker::ctx::Ctx;
use crate::worker::flights::permit::{LeadPermit, Led};
use crate::worker::read::fetch_cluster;
use crate::worker::state::Plugin;
use std::rc::Rc;

/// What a miss that may coalesce does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    /// Paused until the root answers or releases it.
    Waiting,
    /// Go upstream alone.
    Alone,
}

/// The miss of request `context` for `key`.
pub struct Miss<'a> {
    pub context: u32,
    pub key: CacheKey,
    pub head: &'a RequestHead,
    pub body: Option<Vec<u8>>,
    pub asked: Asked,
    pub key_names_caller: bool,
    /// Whether the key is scoped to the caller (the fetch then carries its credentials).
    pub scope: Scope,
    pub now_ms: u64,
    /// Entity mode: the `_entities` batch this miss is (split into entries, never stored whole).
    pub entities: Option<Rc<EntityBatch>>,
    /// On a route that prefetches entities: what its answer may start.
    pub trigger: Option<Rc<Trigger>>,
}

pub fn join(cx: &mut Ctx<'_, impl RequestHost>, miss: Miss<'_>) -> Joined {
    let max_waiters = cx.config().max_waiters;
    let local = cx.worker(|w| {
        w.flights
            .join(&miss.key, miss.context, miss.now_ms, max_waiters)
    });
    match local {
        LocalJoin::Joined => return Joined::Waiting,
        LocalJoin::Full => return Joined::Alone,
        LocalJoin::NoFlight => {}
    }
    let (key, context, now_ms) = (miss.key, miss.context, miss.now_ms);
    let Some((fetch, claim)) = claim(cx, miss, JoinMode::MayLead) else {
        return Joined::Alone;
    };
    let host = cx.host();
    let joined = cx
        .plugin()
        .flights
        .join(host, &claim, &Alive::read(host, now_ms));
    // The key's flight slot holds another key (`Alone`): no flight across workers, but with an
    // L2 this worker still leads the key for the fleet (its own requests for it wait on this
    // fetch), rather than send it upstream without asking L2. Completing the flight leaves the
    // other key's record alone (it is not ours).
    let leads = joined == Join::Lead || (joined == Join::Alone && cx.config().l2.is_some());
    if joined == Join::Follow {
        cx.worker(|w| w.flights.follow(key, context, now_ms));
        return Joined::Waiting;
    }
    if !leads {
        return Joined::Alone;
    }
    let mut permit = LeadPermit::new(cx, claim.me, Led::Miss { context }, now_ms);
    permit.add(key);
    if !permit.hand_to_root(cx, fetch) {
        return Joined::Alone;
    }
    cx.host().count(Counter::Leaders);
    Joined::Waiting
}

/// What became of a refresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refresh {
    /// This worker now refreshes the key.
    Started,
    /// A worker fetches the key already.
    Running,
    /// No refresh can run for this request (no wake-up queue, a header the callout cannot
    /// carry): its stale entry must not be served as if one did.
    Impossible,
}

/// Starts a background refresh of a stale entry, unless some worker already fetches the key.
pub fn refresh(cx: &mut Ctx<'_, impl RequestHost>, miss: Miss<'_>) -> Refresh {
    let (key, now_ms) = (miss.key, miss.now_ms);
    if cx.worker(|w| w.flights.has(&key)) {
        return Refresh::Running;
    }
    let Some((fetch, claim)) = claim(cx, miss, JoinMode::LeadOnly) else {
        return Refresh::Impossible;
    };
    // In flight elsewhere, or its slot busy with another key: someone fetches, or the next
    // request tries again.
    let host = cx.host();
    if cx
        .plugin()
        .flights
        .join(host, &claim, &Alive::read(host, now_ms))
        != Join::Lead
    {
        return Refresh::Running;
    }
    let mut permit = LeadPermit::new(cx, claim.me, Led::Refresh, now_ms);
    permit.add(key);
    if !permit.hand_to_root(cx, fetch) {
        return Refresh::Impossible;
    }
    cx.host().count(Counter::Refreshes);
    Refresh::Started
}

fn shared_fetch(plugin: &Plugin, host: &impl RequestHost, miss: Miss<'_>) -> Option<SharedFetch> {
    let cluster = fetch_cluster(&plugin.config, host, miss.head)?;
    let request = upstream_request(cluster, miss.head, miss.body, &plugin.config, miss.scope)?;
    Some(SharedFetch {
        key: miss.key,
        request,
        asked: miss.asked,
        dispatched_ms: 0,
        key_names_caller: miss.key_names_caller,
        // An entity batch is never a whole entry, in L2 either.
        l2: if plugin.config.l2.is_some() && miss.entities.is_none() {
            L2Role::Ask
        } else {
            L2Role::Off
        },
        entities: miss.entities,
        trigger: miss.trigger,
    })
}

/// The fetch `miss` would share and this worker's claim on its flight; `None` when no fetch can
/// be shared (a header the callout cannot carry, no wake-up queue).
fn claim(
    cx: &mut Ctx<'_, impl RequestHost>,
    miss: Miss<'_>,
    mode: JoinMode,
) -> Option<(SharedFetch, Claim)> {
    let (key, now_ms) = (miss.key, miss.now_ms);
    let fetch = shared_fetch(cx.plugin(), cx.host(), miss)?;
    // Without a wake-up queue nothing coalesces.
    let (me, queue) = cx.worker(|w| Some((w.id, w.queue?)))?;
    let claim = Claim {
        key,
        me,
        queue,
        now_ms,
        lease_ms: cx.plugin().lease_ms(),
        mode,
    };
    Some((fetch, claim))
}
