//! One request's way through the filter, callback by callback: classify it (headers, then body),
//! serve a hit, join or lead the shared fetch for a miss, label what goes back, and capture a
//! plain miss for the cache. The host adapter calls one method per Envoy callback.

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
use crate::worker::callout::Returned;
use crate::worker::ctx::Ctx;
use crate::worker::l2::entities as l2_entities;
use crate::worker::l2::write::queue_store;
use crate::worker::operation_counts::{count_operation, operation_of, Tally};
use crate::worker::request::capture::{Capture, Chunk};
use crate::worker::request::entities::{self, EntityExchange, Next};
use crate::worker::request::entity_join;
use crate::worker::request::explain::explain;
use crate::worker::request::join::{join, refresh, Joined, Miss, Refresh};
use crate::worker::request::log_record::LogRecord;
use crate::worker::request::lookup::{find, serve, Asking, Found, MissReason, Served};
use crate::worker::request::prefetch;
use crate::worker::request::purge::{self, admin_api, Admin, AtHeaders};
use crate::worker::request::read::{read_head, read_identity, read_route};
use crate::worker::request::shadow::Shadowed;
use crate::worker::root::answer::{CACHE_HEADER, KEY_HEADER, REASON_HEADER};
use crate::worker::root::prefetch as root_prefetch;
use crate::worker::root::shared_fetch::request_dispatch;
use crate::worker::state::Outcome;
use crate::worker::store::account_store;
use crate::worker::watchdog::{BodyArrival, OPTION_OFF_LOG};
use std::rc::Rc;

/// What the callback tells Envoy.
/// How an answer from an entry is labelled and counted.
const HIT: (CacheStatus, Counter) = (CacheStatus::Hit, Counter::Hits);
const STALE: (CacheStatus, Counter) = (CacheStatus::Stale, Counter::StaleServed);

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
    /// On a route that prefetches entities: what its answer may start (see `request::prefetch`).
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
            let decided = decide(cx, &head, b"", |host, operations| {
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
                    cx.worker(|w| (w.outcomes.remove(&context).is_some(), w.watchdog.watching()));
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
        self.trigger = prefetch::trigger(cx.config(), &head);
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
        let decided = decide(cx, &head, &body, |host, operations| {
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
            purge::refuse(cx.host(), &trailers_refused());
            return Flow::Pause;
        }
        Flow::Continue
    }

    pub fn on_response_headers<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        end_of_stream: bool,
    ) -> Flow {
        if let State::EntityWaiting(_) = self.state {
            let context = self.context;
            let answered = entity_join::answered(cx, context);
            let State::EntityWaiting(x) = std::mem::replace(&mut self.state, State::Served) else {
                return Flow::Continue;
            };
            self.report(cx, answered.unwrap_or(CacheStatus::Miss), None, None);
            if answered.is_some() {
                return Flow::Continue;
            }
            self.state = State::EntityForwarded(x);
        }
        if let State::Waiting { key } = self.state {
            let context = self.context;
            let outcome = cx.try_worker(|w| w.outcomes.remove(&context)).flatten();
            let reason = match outcome {
                Some(Outcome::Answered { cache, reason }) => {
                    self.state = State::Served;
                    self.report(cx, cache, reason, Some(key));
                    return Flow::Continue;
                }
                Some(Outcome::Released(reason)) => reason,
                // A response while still waiting comes from Envoy itself (e.g. a timeout).
                None => {
                    cx.try_worker(|w| w.waiters.remove_waiter(context));
                    Release::EnvoyReply
                }
            };
            self.state = State::Missed {
                key,
                capture: None,
                reason: Some(reason),
            };
        }
        match &self.state {
            // Shadow mode never changes an answer (but for debugging).
            State::Shadow { .. } => self.shadow_headers(cx, end_of_stream),
            State::Bypassed(reason) => {
                let reason = *reason;
                // Shadow mode never changes an answer (but for debugging); mutations still purge.
                let config = cx.config();
                if !config.shadow || config.debug_headers {
                    cx.host()
                        .set_response_header(CACHE_HEADER, CacheStatus::Bypass.as_str());
                    if config.debug_headers {
                        cx.host()
                            .set_response_header(REASON_HEADER, reason.as_str());
                    }
                }
                if reason == Bypass::Mutation && !end_of_stream {
                    self.watch_mutation(cx);
                }
            }
            State::Missed { .. } => self.label_miss(cx, end_of_stream),
            State::EntityForwarded(_) => {
                let headers = cx.host().response_headers();
                if let State::EntityForwarded(x) = &mut self.state {
                    x.on_response_headers(headers);
                }
                cx.host()
                    .set_response_header(CACHE_HEADER, CacheStatus::Miss.as_str());
            }
            _ => {}
        }
        self.report_outcome(cx);
        Flow::Continue
    }

    /// What a request this filter handled did, once its answer is known: for the access log and
    /// the per-operation counters.
    fn report_outcome<H: RequestHost>(&self, cx: &mut Ctx<'_, H>) {
        let config = cx.config();
        if !config.access_log && !config.operation_stats.on() {
            return;
        }
        let (status, reason, key) = match &self.state {
            State::Served => match self.served {
                Some(s) => (s.cache, None, Some(s.key)),
                None => return,
            },
            State::Bypassed(reason) => (CacheStatus::Bypass, Some(reason.as_str()), None),
            State::Mutation { .. } => (CacheStatus::Bypass, Some(Bypass::Mutation.as_str()), None),
            State::Missed { reason, key, .. } => {
                (CacheStatus::Miss, reason.map(Release::as_str), Some(*key))
            }
            State::Shadow { key, .. } => (CacheStatus::Shadow, None, Some(*key)),
            _ => return,
        };
        self.report(cx, status, reason, key);
    }

    fn report<H: RequestHost>(
        &self,
        cx: &mut Ctx<'_, H>,
        status: CacheStatus,
        reason: Option<&'static str>,
        key: Option<CacheKey>,
    ) {
        self.log(cx, status, reason, key);
        self.tally(cx, status, reason);
    }

    /// Counts the request for its operation, by what `x-cache` says.
    fn tally<H: RequestHost>(
        &self,
        cx: &mut Ctx<'_, H>,
        status: CacheStatus,
        reason: Option<&'static str>,
    ) {
        if !cx.config().operation_stats.on() {
            return;
        }
        let missed = self.missed.unwrap_or(MissReason::Collision).as_str();
        let counted = match status {
            CacheStatus::Hit => Tally::one(OpCounter::Hits),
            CacheStatus::Stale => Tally::one(OpCounter::Stale),
            CacheStatus::Coalesced => Tally::one(OpCounter::Coalesced),
            CacheStatus::Miss | CacheStatus::Partial => Tally::because(OpCounter::Misses, missed),
            CacheStatus::Bypass => Tally::because(OpCounter::Bypasses, reason.unwrap_or("-")),
            CacheStatus::Shadow => return,
        };
        // Only an answer served from an entry saved the origin anything (0 is not counted).
        let saved = Tally {
            amount: self.served.map_or(0, |s| s.origin_ms),
            ..Tally::one(OpCounter::OriginMsSaved)
        };
        let tallies = [counted, saved];
        count_operation(cx, operation_of(self.operation.as_deref()), &tallies);
    }

    fn log<H: RequestHost>(
        &self,
        cx: &mut Ctx<'_, H>,
        status: CacheStatus,
        reason: Option<&'static str>,
        key: Option<CacheKey>,
    ) {
        if !cx.config().access_log {
            return;
        }
        let record = LogRecord {
            status,
            reason,
            operation: self.operation.as_ref().and_then(|o| o.name.as_deref()),
            key: key.as_ref(),
            age_s: self.served.map(|s| s.age_s),
            bytes: self.served.map(|s| s.bytes),
        };
        cx.host().set_log_record(&record.render());
    }

    pub fn on_response_body<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        body_size: usize,
        end_of_stream: bool,
    ) -> Flow {
        if let State::Mutation { .. } = self.state {
            self.mutation_body(cx, body_size, end_of_stream);
            return Flow::Continue;
        }
        if let State::Shadow { .. } = self.state {
            self.shadow_body(cx, body_size, end_of_stream);
            return Flow::Continue;
        }
        if let State::EntityForwarded(x) = &mut self.state {
            let limit = listener_settings(cx.config()).max_answer_bytes;
            if body_size > 0 {
                let chunk = cx.host().response_body(body_size).unwrap_or_default();
                x.on_chunk(&chunk, limit);
            }
            if end_of_stream {
                if let (Some(body), Some(trigger)) = (x.finish(cx), self.trigger.as_deref()) {
                    root_prefetch::after_answer(cx, trigger, &body);
                }
            }
            return Flow::Continue;
        }
        let State::Missed { key, capture, .. } = &mut self.state else {
            return Flow::Continue;
        };
        let Some(c) = capture else {
            return Flow::Continue;
        };
        if c.chunk(cx.plugin(), cx.host(), body_size) == Chunk::TooLarge {
            *capture = None;
            let key = *key;
            self.not_stored(cx, &key, NotStored::TooLarge);
            return Flow::Continue;
        }
        if end_of_stream {
            if let (Some(c), Some(asked)) = (capture.take(), &self.asked) {
                if let (Some(body), Some(trigger)) = (c.answer(), self.trigger.as_deref()) {
                    root_prefetch::after_answer(cx, trigger, body);
                }
                let mut stored = c.finish(cx, key, asked);
                if queue_store(cx, key, &mut stored) {
                    request_dispatch(cx);
                }
            }
        }
        Flow::Continue
    }

    pub fn on_response_trailers<H: RequestHost>(&mut self, cx: &mut Ctx<'_, H>) -> Flow {
        if let State::Missed { capture, key, .. } = &mut self.state {
            if capture.take().is_some() {
                cx.host().count(Counter::StoreSkipped);
                let key = *key;
                self.not_stored(cx, &key, NotStored::Trailers);
            }
        }
        Flow::Continue
    }

    /// Accounts for the origin's answer to this request, keyed `key`, as not stored.
    fn not_stored<H: RequestHost>(&self, cx: &mut Ctx<'_, H>, key: &CacheKey, why: NotStored) {
        account_store(cx, key, self.operation.as_deref(), Some(why));
    }

    /// An `_entities` request in entity mode: answered from entries, paused for its partial
    /// fetch, or sent upstream whole.
    fn entities<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        head: &RequestHead,
        req: EntitiesRequest,
        body: &[u8],
    ) -> Flow {
        self.operation = Some(Rc::new(OperationTags {
            name: req.operation_name.clone(),
            root_fields: vec![ENTITIES_FIELD.to_string()],
        }));
        if self.trigger.is_some() {
            prefetch::learn(cx, head, &req);
        }
        let x = entities::look_up_l1_after_held(cx, head, req);
        if let Some(asked) = l2_entities::ask(cx, &x.missing_keys()) {
            // Whatever L2 brings, something may go upstream: uncompressed, to be stored.
            cx.host().set_request_header("accept-encoding", IDENTITY);
            self.state = State::EntityAskingL2 {
                x: Box::new(x),
                head: Box::new(head.clone()),
                body: body.to_vec(),
                asked,
            };
            return Flow::Pause;
        }
        let next = entities::decide(cx, (self.context, head), x);
        self.entity_next(cx, (head, body), next, false)
    }

    /// What entity mode decided; `resume`: the request was paused (for L2) and goes on upstream
    /// if forwarded.
    fn entity_next<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        (head, body): (&RequestHead, &[u8]),
        next: Next,
        resume: bool,
    ) -> Flow {
        // Counted once, as `x-cache` will say (a batch waiting for a shared fetch: once it knows).
        match next {
            Next::Answered(label) => {
                cx.host().count(Counter::Hits);
                self.state = State::Served;
                self.report(cx, label, None, None);
                Flow::Pause
            }
            Next::Fetching(x) => {
                cx.host().count(Counter::Misses);
                self.state = State::EntityFetching(x);
                self.missed = Some(MissReason::Partial);
                self.report(cx, CacheStatus::Partial, None, None);
                Flow::Pause
            }
            Next::Forwarded(x) => {
                cx.host().count(Counter::Misses);
                self.missed = Some(MissReason::NoEntity);
                if entity_join::join_batch(cx, self.context, head, body, &x).is_some() {
                    self.state = State::EntityWaiting(x);
                    return Flow::Pause;
                }
                self.report(cx, CacheStatus::Miss, None, None);
                // Recorded before the host call: Envoy may run this request's callbacks inside it.
                self.state = State::EntityForwarded(x);
                if resume {
                    cx.host().resume(self.context);
                }
                Flow::Continue
            }
            Next::Waiting(x) => {
                cx.host().count(Counter::Misses);
                self.missed = Some(MissReason::Partial);
                self.state = State::EntityWaiting(x);
                Flow::Pause
            }
        }
    }

    /// The fleet's L2 answered what L1 lacked: what it brought counts as found, then entity
    /// mode decides as without L2.
    fn on_l2_entities<H: RequestHost>(&mut self, cx: &mut Ctx<'_, H>, returned: &Returned) {
        let State::EntityAskingL2 {
            mut x,
            head,
            body,
            asked,
        } = std::mem::replace(&mut self.state, State::Served)
        else {
            return;
        };
        for (key, entry) in l2_entities::on_answer(cx, &asked, returned) {
            x.found_elsewhere(&key, &entry);
        }
        let next = entities::decide(cx, (self.context, &head), *x);
        self.entity_next(cx, (&head, &body), next, true);
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
        match entities::on_partial(cx, x, returned) {
            Ok(merged) => {
                if let (Some(body), Some(trigger)) = (merged, self.trigger.as_deref()) {
                    root_prefetch::after_answer(cx, trigger, &body);
                }
            }
            Err(x) => {
                // Recorded before the host call: Envoy may run this request's callbacks inside it.
                self.state = State::EntityForwarded(x);
                cx.host().resume(self.context);
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
                w.waiters.remove_waiter(context);
                w.prefetch.take_waiting(context);
            }
            w.outcomes.remove(&context);
            w.watchdog.forget(context);
        });
    }

    fn bypass<H: RequestHost>(&mut self, cx: &mut Ctx<'_, H>, reason: Bypass) -> Flow {
        cx.host().count(Counter::Bypasses);
        if reason.is_rejected_input() {
            cx.host().count(Counter::RejectedInputs);
        }
        // A mutation's answer is read for what it changed: uncompressed (the compressor in front
        // still encodes it for its client). Shadow mode changes no request.
        let config = cx.config();
        if reason == Bypass::Mutation
            && config.mutation_invalidation != MutationInvalidation::Off
            && !config.shadow
        {
            cx.host().set_request_header("accept-encoding", IDENTITY);
        }
        self.state = State::Bypassed(reason);
        Flow::Continue
    }

    /// Looks up a classified request, after scoping private ones to the caller.
    fn lookup_scoped<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        decided: Result<Decided, Bypassed>,
        head: &RequestHead,
        body: Option<Vec<u8>>,
    ) -> Flow {
        let config = cx.config();
        let scoped = decided.and_then(|d| match d.policy.scope {
            Scope::Public => Ok(d),
            Scope::Private => {
                let operation = Some(Rc::clone(&d.operation));
                let identity = read_identity(config, cx.host(), head);
                scope_key(d, identity.as_deref()).map_err(|reason| Bypassed { reason, operation })
            }
        });
        match scoped {
            Ok(d) => self.lookup(cx, d, head, body),
            Err(Bypassed { reason, operation }) => {
                self.operation = operation;
                if reason == Bypass::Mutation {
                    self.map_mutation(cx, head, body.as_deref());
                }
                self.bypass(cx, reason)
            }
        }
    }

    /// Serves the key from the cache, or handles the miss.
    fn lookup<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        decided: Decided,
        head: &RequestHead,
        body: Option<Vec<u8>>,
    ) -> Flow {
        let key = decided.key;
        // One clock read: the entry's birth needs microseconds (see `invalidate::marks`).
        let now_us = cx.host().now_us();
        let now_ms = now_us / 1000;
        let asked = asked(&decided, now_us);
        self.asked = Some(asked.clone());
        self.operation = Some(Rc::clone(&decided.operation));
        let config = cx.config();
        if config.shadow {
            return self.shadow_lookup(cx, key, now_ms);
        }
        let scope = decided.policy.scope;
        let names_caller = key_names_caller(scope, &config.vary_headers, &head.vary);
        let context = self.context;
        let miss = |body: Option<Vec<u8>>| Miss {
            context,
            key,
            head,
            body,
            asked: asked.clone(),
            key_names_caller: names_caller,
            scope,
            now_ms,
            entities: None,
        };
        // A hash-only persisted query resolved here sends the hash alone: an origin that does not
        // know it would answer `PersistedQueryNotFound` for everyone, so it never fetches for
        // others.
        let may_fetch_for_others = config.coalesce && !decided.hash_only;
        let asking = Asking {
            key: &key,
            head,
            now_ms,
        };
        let served = match find(cx, &key, now_ms) {
            Found::Fresh(entry) => self.answer_from(cx, &asking, &entry, HIT),
            // Stale only while a refresh runs (or has just been started): otherwise a miss.
            Found::Stale(entry)
                if may_fetch_for_others
                    && refresh(cx, miss(body.clone())) != Refresh::Impossible =>
            {
                self.answer_from(cx, &asking, &entry, STALE)
            }
            Found::Stale(_) => self.not_served(MissReason::Expired),
            Found::Nothing(why) => self.not_served(why),
        };
        if served {
            return Flow::Pause;
        }
        cx.host().count(Counter::Misses);
        // The origin answers what may be stored uncompressed (see `coalesce::upstream`).
        cx.host().set_request_header("accept-encoding", IDENTITY);
        // A conditional request goes alone: its answer may be a 304 meant for its validators.
        let too_large = cx.worker(|w| w.too_large.contains(&key));
        if may_fetch_for_others
            && !head.conditional()
            && !too_large
            && join(cx, miss(body)) == Joined::Waiting
        {
            self.state = State::Waiting { key };
            return Flow::Pause;
        }
        self.state = State::Missed {
            key,
            capture: None,
            reason: None,
        };
        Flow::Continue
    }

    /// Remembers why the lookup served nothing (for the per-operation counters); `false`.
    fn not_served(&mut self, why: MissReason) -> bool {
        self.missed = Some(why);
        false
    }

    /// Answers from `entry`, labelled ([`HIT`] or [`STALE`]) and counted as `as_`; `false` if it
    /// does not decode.
    fn answer_from<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        asking: &Asking<'_>,
        entry: &[u8],
        as_: (CacheStatus, Counter),
    ) -> bool {
        let (cache, counter) = as_;
        let Some(served) = serve(cx.plugin(), cx.host(), asking, entry, cache) else {
            return false;
        };
        cx.host().count(counter);
        self.served = Some(served);
        self.state = State::Served;
        true
    }

    fn label_miss<H: RequestHost>(&mut self, cx: &mut Ctx<'_, H>, end_of_stream: bool) {
        let debug = cx.config().debug_headers;
        let State::Missed { key, reason, .. } = &self.state else {
            return;
        };
        let (key, reason) = (*key, *reason);
        cx.host()
            .set_response_header(CACHE_HEADER, CacheStatus::Miss.as_str());
        if debug {
            cx.host().set_response_header(KEY_HEADER, &key.hex());
        }
        let lifetimes = self.asked.as_ref().map(|a| a.lifetimes).unwrap_or_default();
        let not_stored = match Capture::start(cx.plugin(), cx.host(), &lifetimes, end_of_stream) {
            Ok(capture) => {
                self.state = State::Missed {
                    key,
                    capture: Some(capture),
                    reason,
                };
                reason.map(Release::as_str)
            }
            Err(why) => {
                cx.host().count(Counter::StoreSkipped);
                self.not_stored(cx, &key, why);
                Some(reason.map_or(why.as_str(), Release::as_str))
            }
        };
        if let (true, Some(r)) = (debug, not_stored) {
            cx.host().set_response_header(REASON_HEADER, r);
        }
    }
}

impl Exchange {
    /// A request to the purge API: refused here, or held for its selectors.
    fn admin_headers<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        admin: (Admin, &PurgeApi),
        end_of_stream: bool,
    ) -> Flow {
        self.state = State::Served;
        if purge::at_headers(admin, cx.host(), end_of_stream) == AtHeaders::Answered {
            return Flow::Pause;
        }
        self.state = State::AdminBody(admin.0);
        let context = self.context;
        let watching = cx.worker(|w| {
            w.held_purges.insert(context);
            w.watchdog.watching()
        });
        if watching {
            let now_ms = cx.host().now_ms();
            cx.worker(|w| w.watchdog.hold(context, now_ms));
        }
        Flow::Pause
    }

    fn admin_body<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        call: Admin,
        size: usize,
        end: bool,
    ) -> Flow {
        if size > cx.config().max_body_bytes {
            self.state = State::Served;
            purge::refuse(cx.host(), &too_large());
            return Flow::Pause;
        }
        if !end {
            return Flow::Pause;
        }
        self.state = State::Served;
        let context = self.context;
        cx.worker(|w| w.held_purges.remove(&context));
        let body = cx.host().request_body(size).unwrap_or_default();
        match call {
            Admin::Purge => purge::with_body(cx, context, &body),
            Admin::Explain => explain(cx, &body),
        }
        Flow::Pause
    }

    fn watch_mutation<H: RequestHost>(&mut self, cx: &mut Ctx<'_, H>) {
        if cx.config().mutation_invalidation == MutationInvalidation::Off {
            return;
        }
        let headers = cx.host().response_headers();
        let status = status(&headers).unwrap_or(0);
        let encoded = headers.iter().any(|(n, v)| {
            n == "content-encoding" && !v.trim_ascii().eq_ignore_ascii_case(b"identity")
        });
        if status == 200 && !encoded {
            self.state = State::Mutation {
                body: Some(Vec::new()),
                status,
                declared: header_tags(&cx.config().mutation_purges.tags_from, &headers),
            };
        }
    }

    /// The operation is parsed again here, not kept from classification: a mutation is never
    /// memoized with its shape, and the work is for mutations only.
    fn map_mutation<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        head: &RequestHead,
        body: Option<&[u8]>,
    ) {
        let config = cx.config();
        if config.mutation_invalidation == MutationInvalidation::Off {
            return;
        }
        let resolve = |h: &str| cx.plugin().apq.lookup(cx.host(), h);
        self.mutation_shape = mutation_shape_of(config, head, body, &resolve).map(Box::new);
    }

    fn mutation_body<H: RequestHost>(&mut self, cx: &mut Ctx<'_, H>, size: usize, end: bool) {
        let State::Mutation {
            body,
            status,
            declared,
        } = &mut self.state
        else {
            return;
        };
        let Some(buffer) = body else { return };
        // Bounded like a stored entry; a larger answer is not read (and purges nothing).
        if buffer.len().saturating_add(size) > cx.config().max_entry_bytes {
            *body = None;
            return;
        }
        if size > 0 {
            if let Some(chunk) = cx.host().response_body(size) {
                buffer.extend_from_slice(&chunk);
            }
        }
        if !end {
            return;
        }
        let config = cx.config();
        let shape = self.mutation_shape.as_deref();
        if let Some(plan) = purge::mutation_plan(config, *status, buffer, shape, declared) {
            purge::after_mutation(cx, &plan);
        }
        *body = None;
    }
}

impl Exchange {
    /// Shadow mode: count what the cache would have done, and let the request go upstream.
    fn shadow_lookup<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        key: CacheKey,
        now_ms: u64,
    ) -> Flow {
        let found = find(cx, &key, now_ms);
        let fresh = match &found {
            Found::Fresh(bytes) => Entry::decode(bytes).ok(),
            _ => None,
        };
        let shadowed = Shadowed::new(fresh.as_ref().map(|e| e.body));
        cx.host().count(if shadowed.would_hit() {
            Counter::ShadowHits
        } else {
            Counter::ShadowMisses
        });
        self.state = State::Shadow {
            key,
            shadowed: Box::new(shadowed),
        };
        Flow::Continue
    }

    fn shadow_headers<H: RequestHost>(&mut self, cx: &mut Ctx<'_, H>, end_of_stream: bool) {
        let lifetimes = self.asked.as_ref().map(|a| a.lifetimes).unwrap_or_default();
        let State::Shadow { shadowed, .. } = &mut self.state else {
            return;
        };
        if cx.config().debug_headers {
            let label = if shadowed.would_hit() {
                "SHADOW-HIT"
            } else {
                "SHADOW-MISS"
            };
            cx.host().set_response_header(CACHE_HEADER, label);
        }
        shadowed.capture = Capture::start(cx.plugin(), cx.host(), &lifetimes, end_of_stream).ok();
        if end_of_stream {
            self.shadow_body(cx, 0, true);
        }
    }

    fn shadow_body<H: RequestHost>(&mut self, cx: &mut Ctx<'_, H>, size: usize, end: bool) {
        let State::Shadow { shadowed, .. } = &mut self.state else {
            return;
        };
        shadowed.chunk(cx.plugin(), cx.host(), size);
        if !end {
            return;
        }
        let State::Shadow { key, shadowed } = std::mem::replace(&mut self.state, State::Served)
        else {
            return;
        };
        if let (Some(capture), Some(asked)) = (shadowed.finish(cx.host()), &self.asked) {
            // Shadow mode changes nothing others see: L1 only.
            capture.finish(cx, &key, asked);
        }
    }
}

fn too_large() -> Refusal {
    Refusal {
        status: 413,
        message: "the purge body is larger than max_body_bytes".into(),
    }
}

fn trailers_refused() -> Refusal {
    Refusal {
        status: 400,
        message: "a purge body must not end in trailers".into(),
    }
}

/// Classifies through the per-worker memos: an identical recent request is not parsed again, nor
/// an operation read recently (with other variables, say).
fn decide<H: RequestHost>(
    cx: &mut Ctx<'_, H>,
    head: &RequestHead,
    body: &[u8],
    classify: impl FnOnce(&H, &mut Operations) -> Result<Classified, Bypassed>,
) -> Result<Decided, Bypassed> {
    let input = memo_input(head, body);
    if let Some(known) = cx.worker(|w| w.memo.get(&input)) {
        return known;
    }
    // Out of the worker while classifying: nothing in classification touches the worker.
    let mut operations = cx.worker(|w| std::mem::take(&mut w.operations_read));
    let decided = classify(cx.host(), &mut operations).map(Decided::from);
    cx.worker(|w| w.operations_read = operations);
    // An unknown persisted query may be taught any moment: asked again, not remembered.
    if !matches!(&decided, Err(b) if b.reason == Bypass::PersistedQueryUnknown) {
        let remembered = decided.clone();
        cx.worker(|w| w.memo.insert(input, remembered));
    }
    if let Ok(Decided {
        teaches: Some(t), ..
    }) = &decided
    {
        cx.plugin().apq.learn(cx.host(), &t.0, &t.1);
    }
    decided
}
