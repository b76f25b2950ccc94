//! One request's way through the filter, as a router over one machine per kind of request: the
//! host adapter calls one method per Envoy callback, and each goes to the machine the request's
//! [`State`] names.
//!
//! - `request`: the way in (headers, then body), classified and routed to its kind;
//! - the kinds, each with its states: `hit` (`Keyed`: a keyed query's lookup, the shared fetch
//!   it waits on, the miss captured for the cache), `entity` (`Batch`: an `_entities` batch in
//!   entity mode), `admin` (`Admin`: purge, explain), `mutation` (`Watched`: read for what it
//!   changed), `shadowing` (`Shadow`);
//! - `response`: the way back, routed to the kind; `report`: the access log (`log_record`) and
//!   the per-operation counters.

mod admin;
mod entity;
mod hit;
pub mod log_record;
mod mutation;
mod report;
mod request;
mod response;
mod shadowing;

use entity::Batch;
use hit::Keyed;
use mutation::Watched;
use shadowing::Shadow;

use crate::cache::entry::Entry;
use crate::cache::fates::Fate;
use crate::cache::ghosts::WouldHit;
use crate::cache::not_stored::NotStored;
use crate::cache::status::CacheStatus;
use crate::cache::storable::Asked;
use crate::coalesce::release::Release;
use crate::coalesce::sharing::key_names_caller;
use crate::coalesce::upstream::IDENTITY;
use crate::config::{Lifetimes, Scope};
use crate::config::{MutationInvalidation, PurgeApi};
use crate::effects::counters::Counter;
use crate::effects::host::{status, LogLevel, RequestHost};
use crate::effects::operation_stats::OpCounter;
use crate::entities::mode::{entity_mode, listener_settings};
use crate::entities::prefetch::Trigger;
use crate::entities::request::{EntitiesRequest, ENTITIES_FIELD};
use crate::invalidate::mutation::header_tags;
use crate::invalidate::purge_request::Refusal;
use crate::invalidate::shape::ResponseShape;
use crate::invalidate::tags::OperationTags;
use crate::request::bypass::Bypass;
use crate::request::classify::{
    classify_get, classify_headers, classify_post, handles, memo_input, mutation_shape_of,
    scope_key, Bypassed, Classified, Decided, HeadersVerdict, Known, RequestHead,
};
use crate::request::http::split_path;
use crate::request::key::CacheKey;
use crate::request::operations::Operations;
use crate::request::variant::Variant;
use crate::whatif::ring::Kind;
use crate::worker::admin::explain::explain;
use crate::worker::admin::mutation_purge;
use crate::worker::admin::purge::{self, admin_api, Admin, AtHeaders};
use crate::worker::admin::what_if::what_if;
use crate::worker::callout::Returned;
use crate::worker::ctx::Ctx;
use crate::worker::entities::batch::{self, EntityExchange, Next};
use crate::worker::entities::join as entity_join;
use crate::worker::entities::l2 as l2_entities;
use crate::worker::entities::prefetch as root_prefetch;
use crate::worker::entities::trigger;
use crate::worker::exchange::log_record::LogRecord;
use crate::worker::fleet::write::queue_store;
use crate::worker::flights::join::{join, refresh, Joined, Miss, Refresh};
use crate::worker::flights::Outcome;
use crate::worker::operation_counts::{count_operation, operation_of, Tally};
use crate::worker::read::{read_head, read_identity, read_route};
use crate::worker::serving::capture::{Capture, Chunk};
use crate::worker::serving::labels::{CACHE_HEADER, KEY_HEADER, REASON_HEADER};
use crate::worker::serving::lookup::{find, find_placed, serve, Asking, Found, MissReason, Served};
use crate::worker::serving::recent;
use crate::worker::serving::shadow::Shadowed;
use crate::worker::serving::store::account_store;
use crate::worker::to_root::request_dispatch;
use crate::worker::watchdog::{BodyArrival, OPTION_OFF_LOG};
use std::rc::Rc;

/// How an answer from an entry is labelled and counted.
const HIT: (CacheStatus, Counter) = (CacheStatus::Hit, Counter::Hits);
const STALE: (CacheStatus, Counter) = (CacheStatus::Stale, Counter::StaleServed);

/// What the callback tells Envoy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Pause,
}

/// Where the request is. Past its classification each kind runs its own machine, whose states
/// are defined in its file: `Keyed` (`hit`), `Batch` (`entity`), `Admin` (`admin`), `Shadow`
/// (`shadowing`), `Watched` (`mutation`).
#[derive(Debug)]
enum State {
    /// Not a request this filter handles: no header, no counting.
    Ignored,
    /// Let through untouched, counted and labelled `BYPASS`.
    Bypassed(Bypass),
    /// Held until its body is read and classified.
    AwaitingBody(Box<RequestHead>),
    /// A keyed query past its lookup: waiting for a shared fetch, or gone upstream.
    Keyed(Keyed),
    /// An `_entities` batch in entity mode, past its lookup.
    Entities(Batch),
    /// An authorized admin request (purge, explain), reading its body.
    Admin(Admin),
    /// Shadow mode: looked up, sent upstream, its answer compared and stored.
    Shadow(Shadow),
    /// A mutation going upstream: its answer is read for what it changed.
    Mutation(Watched),
    /// Answered by the filter; the response callbacks must leave it alone.
    Served,
}

/// One request (an HTTP context).
#[derive(Debug)]
pub struct Exchange {
    context: u32,
    state: State,
    /// What this request asked, once it is keyed: its TTL, when it looked up, its operation.
    asked: Option<Asked>,
    /// The entry this request was answered from, if it was.
    served: Option<Served>,
    /// A mutation's answer keys, mapped while its request was at hand (see `invalidate::shape`).
    mutation_shape: Option<Box<ResponseShape>>,
    /// The operation, once read (for the per-operation counters).
    operation: Option<Rc<OperationTags>>,
    /// Why the lookup found nothing to serve.
    missed: Option<MissReason>,
    /// The smallest larger store that would have served what this one missed.
    would_hit: Option<WouldHit>,
    /// The table's hash of the key looked up (kept for the what-if record).
    hash: Option<u64>,
    /// The key as the what-if replays other `vary_headers`.
    variant: Option<Variant>,
    /// On a route that prefetches entities: what its answer may start (see `entities::trigger`).
    trigger: Option<Rc<Trigger>>,
}

/// What storing the answer to a request `decided` so, born at `born_us`, must know.
fn asked(decided: &Decided, born_us: u64) -> Asked {
    Asked {
        lifetimes: Lifetimes {
            ttl_seconds: decided.policy.ttl_seconds,
            stale_while_revalidate_seconds: decided.policy.stale_while_revalidate_seconds,
            stale_if_error_seconds: decided.policy.stale_if_error_seconds,
        },
        born_us,
        operation: decided.operation.clone(),
    }
}

impl Exchange {
    pub fn new(context: u32) -> Exchange {
        Exchange {
            context,
            state: State::Ignored,
            asked: None,
            served: None,
            mutation_shape: None,
            operation: None,
            missed: None,
            would_hit: None,
            hash: None,
            variant: None,
            trigger: None,
        }
    }

    /// A callout this request sent came back (entity mode's L2 mget or partial fetch).
    pub fn on_callout<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        token: u32,
        returned: &Returned,
    ) {
        if let State::Entities(_) = self.state {
            self.batch_callout(cx, token, returned);
        }
    }

    /// The request ended. A client that left while waiting must not be answered later.
    pub fn on_done<H: ?Sized>(&self, cx: &mut Ctx<'_, H>) {
        let waiting = matches!(
            self.state,
            State::Keyed(Keyed::Waiting { .. }) | State::Entities(Batch::Waiting(_))
        );
        let context = self.context;
        cx.try_worker(|w| {
            w.held_purges.remove(&context);
            w.held_commits.forget(context);
            if waiting {
                w.flights.stop_waiting(context);
                w.prefetch.take_waiting(context);
            }
            w.flights.forget(context);
            w.watchdog.forget(context);
        });
    }
}
