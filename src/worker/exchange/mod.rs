//! One request's way through the filter, callback by callback: classify it (headers, then body),
//! serve a hit, join or lead the shared fetch for a miss, label what goes back, and capture a
//! plain miss for the cache. The host adapter calls one method per Envoy callback.
//!
//! Here: the request's state and the request side's callbacks, which route each kind of request
//! to its part: `hit` (a keyed request's lookup, and what is not cached), `entity` (`_entities`
//! in entity mode), `admin` (purge, explain), `mutation`, `shadowing`; then `response` (the
//! answer's way back) and `report` (the access log and the per-operation counters).

mod admin;
mod entity;
mod hit;
pub mod log_record;
mod mutation;
mod report;
mod response;
mod shadowing;

use crate::cache::entry::Entry;
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
use crate::worker::admin::explain::explain;
use crate::worker::admin::mutation_purge;
use crate::worker::admin::purge::{self, admin_api, Admin, AtHeaders};
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
use crate::worker::serving::lookup::{find, serve, Asking, Found, MissReason, Served};
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

#[derive(Debug)]
enum State {
    /// Not a request this filter handles: no header, no counting.
    Ignored,
    Bypassed(Bypass),
    AwaitingBody(Box<RequestHead>),
    /// Paused, waiting for a shared fetch (its own or another request's).
    Waiting {
        key: CacheKey,
    },
    /// Sent upstream; the answer is stored if it qualifies.
    Missed {
        key: CacheKey,
        capture: Option<Capture>,
        reason: Option<Release>,
    },
    /// Answered by the filter; the response callbacks must leave it alone.
    Served,
    /// An authorized admin request (purge, explain), reading its body.
    AdminBody(Admin),
    /// Shadow mode: looked up, sent upstream, its answer compared and stored.
    Shadow {
        key: CacheKey,
        shadowed: Box<Shadowed>,
    },
    /// An `_entities` request paused while the fleet's L2 is asked for what L1 lacks (one call).
    EntityAskingL2 {
        x: Box<EntityExchange>,
        head: Box<RequestHead>,
        /// Kept to join the batch's flight if L2 brings none of its entities.
        body: Vec<u8>,
        asked: l2_entities::AskedL2,
    },
    /// An `_entities` request paused for its partial fetch (entity mode).
    EntityFetching(Box<EntityExchange>),
    /// An `_entities` request sent upstream as the gateway sent it; its answer is split into
    /// entries as it streams back.
    EntityForwarded(Box<EntityExchange>),
    /// An `_entities` request none of whose entities is cached, paused for the shared fetch of
    /// its batch (see `entity_join`); let go, it is forwarded.
    EntityWaiting(Box<EntityExchange>),
    /// A mutation going upstream: its answer is read (up to `max_entry_bytes`) for what it
    /// changed, and purged before its last byte reaches the client.
    Mutation {
        body: Option<Vec<u8>>,
        status: u16,
        /// The tags its configured headers declare.
        declared: Vec<String>,
    },
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
            trigger: None,
        }
    }

    pub fn on_request_headers<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        end_of_stream: bool,
    ) -> Flow {
        let config = cx.config();
        // Paths the filter does not handle cost one header read, nothing more. When it handles
        // every path, all headers are read at once (one host call less for every request).
        if !config.paths.is_empty() {
            let path = cx.host().request_header(":path").unwrap_or_default();
            if let Some(admin) = admin_api(config, &path) {
                return self.admin_headers(cx, admin, end_of_stream);
            }
            if !handles(config, &path) {
                return Flow::Continue;
            }
        }
        let mut head = read_head(config, cx.host());
        if config.paths.is_empty() {
            if let Some(admin) = admin_api(config, &head.path) {
                return self.admin_headers(cx, admin, end_of_stream);
            }
        }
        if head.method == b"GET" && handles(config, &head.path) {
            // A GET with a body: the key could not account for the body the origin may read.
            if !end_of_stream {
                return self.bypass(cx, Bypass::GetWithBody);
            }
            read_route(config, cx.host(), &mut head);
            let apq = &cx.plugin().apq;
            let decided = hit::decide(cx, &head, b"", |host, operations| {
                let full = std::str::from_utf8(&head.path).map_err(|_| Bypass::BadQueryString)?;
                let (path, query) = split_path(full);
                let known = Known {
                    persisted: &|h| apq.lookup(host, h),
                    operations: Some(operations),
                };
                classify_get(config, &head, path, query, known)
            });
            return self.lookup_scoped(cx, decided, &head, None);
        }
        match classify_headers(config, &head, end_of_stream) {
            HeadersVerdict::NotHandled => Flow::Continue,
            HeadersVerdict::Bypass(reason) => self.bypass(cx, reason),
            HeadersVerdict::Ready(classified) => {
                self.lookup_scoped(cx, Ok(classified.into()), &head, None)
            }
            HeadersVerdict::NeedBody => {
                if !cx.worker(|w| w.watchdog.may_hold()) {
                    return self.bypass(cx, Bypass::BodyNotDelivered);
                }
                // Held with `allow_on_headers_stop_iteration`: nothing goes upstream until the
                // body has been read and the request is known to be a miss.
                read_route(config, cx.host(), &mut head);
                self.state = State::AwaitingBody(Box::new(head));
                // The clock is read only while the watchdog still watches (a host call).
                if cx.worker(|w| w.watchdog.watching()) {
                    let now_ms = cx.host().now_ms();
                    let context = self.context;
                    cx.worker(|w| w.watchdog.hold(context, now_ms));
                }
                Flow::Pause
            }
        }
    }

    pub fn on_request_body<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        body_size: usize,
        end_of_stream: bool,
    ) -> Flow {
        match self.state {
            State::AwaitingBody(_) | State::AdminBody(_) => {
                // Let go by the watchdog: the request is upstream already, whatever comes now.
                let context = self.context;
                let (released, watching) =
                    cx.worker(|w| (w.flights.outcome(context).is_some(), w.watchdog.watching()));
                if watching {
                    let now_ms = cx.host().now_ms();
                    let arrival = cx.worker(|w| w.watchdog.body_arrived(context, now_ms, released));
                    if let BodyArrival::AlreadyReleased { concluded: true } = arrival {
                        cx.host().log(LogLevel::Error, OPTION_OFF_LOG);
                    }
                }
                if released {
                    return self.bypass(cx, Bypass::BodyNotDelivered);
                }
            }
            // Decided at the headers (a GET with a body): it stays held until answered or released.
            State::Waiting { .. } | State::Served => return Flow::Pause,
            _ => return Flow::Continue,
        }
        if let State::AdminBody(call) = self.state {
            return self.admin_body(cx, call, body_size, end_of_stream);
        }
        if body_size > cx.config().max_body_bytes {
            return self.bypass(cx, Bypass::BodyTooLarge);
        }
        if !end_of_stream {
            return Flow::Pause;
        }
        let State::AwaitingBody(head) = std::mem::replace(&mut self.state, State::Ignored) else {
            return Flow::Continue;
        };
        let body = cx.host().request_body(body_size).unwrap_or_default();
        self.trigger = trigger::trigger(cx.config(), &head);
        let config = cx.config();
        if entity_mode(config, &head.route) {
            let read = EntitiesRequest::read_with(&body, |query, name| {
                cx.worker(|w| w.entity_shapes.shape(query, name, config.limits()))
            });
            if let Ok(req) = read {
                return self.entities(cx, &head, req, &body);
            }
        }
        let apq = &cx.plugin().apq;
        let decided = hit::decide(cx, &head, &body, |host, operations| {
            let known = Known {
                persisted: &|h| apq.lookup(host, h),
                operations: Some(operations),
            };
            classify_post(config, &head, &body, known)
        });
        self.lookup_scoped(cx, decided, &head, Some(body))
    }

    pub fn on_request_trailers<H: RequestHost>(&mut self, cx: &mut Ctx<'_, H>) -> Flow {
        // A body that ends in trailers never showed end_of_stream: let it through uninspected.
        if matches!(self.state, State::AwaitingBody(_)) {
            return self.bypass(cx, Bypass::EmptyBody);
        }
        if matches!(self.state, State::AdminBody(_)) {
            // Never upstream: a purge request is answered here, whatever its shape.
            self.state = State::Served;
            purge::refuse(cx.host(), &admin::trailers_refused());
            return Flow::Pause;
        }
        Flow::Continue
    }

    /// A callout this request sent came back (entity mode's L2 mget or partial fetch).
    pub fn on_callout<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        token: u32,
        returned: &Returned,
    ) {
        if let State::EntityAskingL2 { asked, .. } = &self.state {
            if asked.token == token {
                self.on_l2_entities(cx, returned);
            }
            return;
        }
        let State::EntityFetching(x) = &self.state else {
            return;
        };
        if x.token != Some(token) {
            return;
        }
        let State::EntityFetching(x) = std::mem::replace(&mut self.state, State::Served) else {
            return;
        };
        match batch::on_partial(cx, x, returned) {
            Ok(merged) => {
                if let (Some(body), Some(trigger)) = (merged, self.trigger.as_deref()) {
                    root_prefetch::after_answer(cx, trigger, &body);
                }
            }
            Err(x) => {
                // Recorded before the host call: Envoy may run this request's callbacks inside it.
                self.state = State::EntityForwarded(x);
                cx.host().resume_self(self.context);
            }
        }
    }

    /// The request ended. A client that left while waiting must not be answered later.
    pub fn on_done<H: ?Sized>(&self, cx: &mut Ctx<'_, H>) {
        let waiting = matches!(self.state, State::Waiting { .. } | State::EntityWaiting(_));
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
