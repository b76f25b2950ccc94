//! A keyed request's lookup: served from an entry (`HIT`, `STALE`), or a miss that joins or
//! leads the shared fetch, or goes upstream labelled `MISS`; and a request that is not cached.

use super::*;

impl Exchange {
    pub(super) fn bypass<H: RequestHost>(&mut self, cx: &mut Ctx<'_, H>, reason: Bypass) -> Flow {
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
    pub(super) fn lookup_scoped<H: RequestHost>(
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
    pub(super) fn lookup<H: RequestHost>(
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
        self.variant = decided.variant;
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
            trigger: trigger::trigger(config, head),
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
        let hash = cx.plugin().table.hash(&key);
        self.hash = Some(hash);
        let served = match find_placed(cx, &key, hash, now_ms) {
            Found::Fresh(entry) => self.answer_from(cx, &asking, &entry, HIT),
            // Stale only while a refresh runs (or has just been started): otherwise a miss.
            Found::Stale(entry)
                if may_fetch_for_others
                    && refresh(cx, miss(body.clone())) != Refresh::Impossible =>
            {
                self.answer_from(cx, &asking, &entry, STALE)
            }
            Found::Stale(_) => self.not_served(MissReason::Expired, None),
            Found::Nothing(why, larger) => self.not_served(why, larger),
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
            self.state = State::Keyed(Keyed::Waiting { key });
            return Flow::Pause;
        }
        self.state = State::Keyed(Keyed::Missed {
            key,
            capture: None,
            reason: None,
        });
        Flow::Continue
    }

    /// Remembers why the lookup served nothing, and which larger store would have (for the
    /// per-operation counters); `false`.
    pub(super) fn not_served(&mut self, why: MissReason, larger: Option<WouldHit>) -> bool {
        self.missed = Some(why);
        self.would_hit = larger;
        false
    }

    /// Answers from `entry`, labelled ([`HIT`] or [`STALE`]) and counted as `as_`; `false` if it
    /// does not decode.
    pub(super) fn answer_from<H: RequestHost>(
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

    pub(super) fn label_miss<H: RequestHost>(&mut self, cx: &mut Ctx<'_, H>, end_of_stream: bool) {
        let debug = cx.config().debug_headers;
        let State::Keyed(Keyed::Missed { key, reason, .. }) = &self.state else {
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
                self.state = State::Keyed(Keyed::Missed {
                    key,
                    capture: Some(capture),
                    reason,
                });
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

/// Classifies through the per-worker memos: an identical recent request is not parsed again, nor
/// an operation read recently (with other variables, say).
pub(super) fn decide<H: RequestHost>(
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

/// A keyed query's answer on its way back.
impl Exchange {
    /// A paused query learns how it was let go: answered here (reported), or released to go
    /// upstream; one gone upstream is labelled `MISS`, and its answer captured for the cache.
    pub(super) fn keyed_response_headers<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        end_of_stream: bool,
    ) {
        if let State::Keyed(Keyed::Waiting { key }) = self.state {
            let context = self.context;
            let outcome = cx.try_worker(|w| w.flights.outcome(context)).flatten();
            let reason = match outcome {
                Some(Outcome::Answered { cache, reason }) => {
                    self.state = State::Served;
                    self.report(cx, cache, reason, Some(key));
                    return;
                }
                Some(Outcome::Released(reason)) => reason,
                // A response while still waiting comes from Envoy itself (e.g. a timeout).
                None => {
                    cx.try_worker(|w| w.flights.stop_waiting(context));
                    Release::EnvoyReply
                }
            };
            self.state = State::Keyed(Keyed::Missed {
                key,
                capture: None,
                reason: Some(reason),
            });
        }
        self.label_miss(cx, end_of_stream);
        self.report_outcome(cx);
    }

    /// A chunk of the answer to a query gone upstream: captured, stored at its end (and what it
    /// names prefetched).
    pub(super) fn keyed_response_body<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        body_size: usize,
        end_of_stream: bool,
    ) {
        let State::Keyed(Keyed::Missed { key, capture, .. }) = &mut self.state else {
            return;
        };
        let Some(c) = capture else {
            return;
        };
        if c.chunk(cx.plugin(), cx.host(), body_size) == Chunk::TooLarge {
            *capture = None;
            let key = *key;
            self.not_stored(cx, &key, NotStored::TooLarge);
            return;
        }
        if !end_of_stream {
            return;
        }
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

    /// An answer that ends in trailers is not stored.
    pub(super) fn keyed_response_trailers<H: RequestHost>(&mut self, cx: &mut Ctx<'_, H>) {
        if let State::Keyed(Keyed::Missed { capture, key, .. }) = &mut self.state {
            if capture.take().is_some() {
                cx.host().count(Counter::StoreSkipped);
                let key = *key;
                self.not_stored(cx, &key, NotStored::Trailers);
            }
        }
    }
}

/// A keyed query's states past its lookup.
#[derive(Debug)]
pub(super) enum Keyed {
    /// Paused, waiting for a shared fetch (its own or another request's).
    Waiting { key: CacheKey },
    /// Sent upstream; the answer is stored if it qualifies.
    Missed {
        key: CacheKey,
        capture: Option<Capture>,
        reason: Option<Release>,
    },
}
