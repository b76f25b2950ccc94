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
            self.state = State::EntityAskingL2 {
                x: Box::new(x),
                head: Box::new(head.clone()),
                body: body.to_vec(),
                asked,
            };
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
                    cx.host().resume_self(self.context);
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
    pub(super) fn on_l2_entities<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        returned: &Returned,
    ) {
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
        let next = batch::decide(cx, (self.context, &head), *x);
        self.entity_next(cx, (&head, &body), next, true);
    }
}
