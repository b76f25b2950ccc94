//! An `_entities` request in entity mode, as the exchange drives it: looked up in L1, then the
//! fleet's L2, then answered from entries, paused for its partial fetch, or sent upstream.

use super::*;

impl Exchange {
    /// An `_entities` request in entity mode: answered from entries, paused for its partial
    /// fetch, or sent upstream whole.
    pub(super) fn entities<H: RequestHost>(
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
            trigger::learn(cx, head, &req);
        }
        let x = batch::look_up_l1_after_held(cx, head, req);
        if let Some(asked) = l2_entities::ask(cx, &x.missing_keys()) {
            // Whatever L2 brings, something may go upstream: uncompressed, to be stored.
            cx.host().set_request_header("accept-encoding", IDENTITY);
            self.state = State::Entities(Batch::AskingL2 {
                x: Box::new(x),
                head: Box::new(head.clone()),
                body: body.to_vec(),
                asked,
            });
            return Flow::Pause;
        }
        let next = batch::decide(cx, (self.context, head), x);
        self.entity_next(cx, (head, body), next, false)
    }

    /// What entity mode decided; `resume`: the request was paused (for L2) and goes on upstream
    /// if forwarded.
    pub(super) fn entity_next<H: RequestHost>(
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
                self.state = State::Entities(Batch::Fetching(x));
                self.missed = Some(MissReason::Partial);
                self.report(cx, CacheStatus::Partial, None, None);
                Flow::Pause
            }
            Next::Forwarded(x) => {
                cx.host().count(Counter::Misses);
                self.missed = Some(MissReason::NoEntity);
                if entity_join::join_batch(cx, self.context, head, body, &x).is_some() {
                    self.state = State::Entities(Batch::Waiting(x));
                    return Flow::Pause;
                }
                self.report(cx, CacheStatus::Miss, None, None);
                // Recorded before the host call: Envoy may run this request's callbacks inside it.
                self.state = State::Entities(Batch::Forwarded(x));
                if resume {
                    cx.host().resume_self(self.context);
                }
                Flow::Continue
            }
            Next::Waiting(x) => {
                cx.host().count(Counter::Misses);
                self.missed = Some(MissReason::Partial);
                self.state = State::Entities(Batch::Waiting(x));
                Flow::Pause
            }
        }
    }

    /// The fleet's L2 answered what L1 lacked: what it brought counts as found, then entity
    /// mode decides as without L2.
    pub(super) fn on_l2_entities<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        returned: &Returned,
    ) {
        let State::Entities(Batch::AskingL2 {
            mut x,
            head,
            body,
            asked,
        }) = std::mem::replace(&mut self.state, State::Served)
        else {
            return;
        };
        for (key, entry) in l2_entities::on_answer(cx, &asked, returned) {
            x.found_elsewhere(&key, &entry);
        }
        let next = batch::decide(cx, (self.context, &head), *x);
        self.entity_next(cx, (&head, &body), next, true);
    }
}

/// An `_entities` batch's answer on its way back.
impl Exchange {
    /// A callout the batch sent came back: the L2's answer, or its partial fetch's.
    pub(super) fn batch_callout<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        token: u32,
        returned: &Returned,
    ) {
        if let State::Entities(Batch::AskingL2 { asked, .. }) = &self.state {
            if asked.token == token {
                self.on_l2_entities(cx, returned);
            }
            return;
        }
        let State::Entities(Batch::Fetching(x)) = &self.state else {
            return;
        };
        if x.token != Some(token) {
            return;
        }
        let State::Entities(Batch::Fetching(x)) = std::mem::replace(&mut self.state, State::Served)
        else {
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
                self.state = State::Entities(Batch::Forwarded(x));
                cx.host().resume_self(self.context);
            }
        }
    }

    /// A batch paused on a shared fetch learns whether it was answered (reported); if not, it
    /// went upstream as sent, and its answer is labelled `MISS` and split into entries.
    pub(super) fn batch_response_headers<H: RequestHost>(&mut self, cx: &mut Ctx<'_, H>) {
        if let State::Entities(Batch::Waiting(_)) = self.state {
            let answered = entity_join::answered(cx, self.context);
            let State::Entities(Batch::Waiting(x)) =
                std::mem::replace(&mut self.state, State::Served)
            else {
                return;
            };
            self.report(cx, answered.unwrap_or(CacheStatus::Miss), None, None);
            if answered.is_some() {
                return;
            }
            self.state = State::Entities(Batch::Forwarded(x));
        }
        if let State::Entities(Batch::Forwarded(_)) = self.state {
            let headers = cx.host().response_headers();
            if let State::Entities(Batch::Forwarded(x)) = &mut self.state {
                x.on_response_headers(headers);
            }
            cx.host()
                .set_response_header(CACHE_HEADER, CacheStatus::Miss.as_str());
        }
    }

    /// A chunk of a forwarded batch's answer: split into entries as it streams (and what it
    /// names prefetched at its end).
    pub(super) fn batch_response_body<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        body_size: usize,
        end_of_stream: bool,
    ) {
        let State::Entities(Batch::Forwarded(x)) = &mut self.state else {
            return;
        };
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
    }
}

/// An `_entities` batch's states past its lookup.
#[derive(Debug)]
pub(super) enum Batch {
    /// Paused while the fleet's L2 is asked for what L1 lacks (one call).
    AskingL2 {
        x: Box<EntityExchange>,
        head: Box<RequestHead>,
        /// Kept to join the batch's flight if L2 brings none of its entities.
        body: Vec<u8>,
        asked: l2_entities::AskedL2,
    },
    /// Paused for its partial fetch.
    Fetching(Box<EntityExchange>),
    /// Sent upstream as the gateway sent it; its answer is split into entries as it streams.
    Forwarded(Box<EntityExchange>),
    /// None of its entities cached: paused for the shared fetch of its batch (see
    /// `entities::join`); let go, it is forwarded.
    Waiting(Box<EntityExchange>),
}
