//! The answer's way back through the exchange, callback by callback: labelled, captured for the
//! cache, read for a mutation's purge or a prefetch, or let alone when the filter answered.

use super::*;

impl Exchange {
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
            let outcome = cx.try_worker(|w| w.flights.outcome(context)).flatten();
            let reason = match outcome {
                Some(Outcome::Answered { cache, reason }) => {
                    self.state = State::Served;
                    self.report(cx, cache, reason, Some(key));
                    return Flow::Continue;
                }
                Some(Outcome::Released(reason)) => reason,
                // A response while still waiting comes from Envoy itself (e.g. a timeout).
                None => {
                    cx.try_worker(|w| w.flights.stop_waiting(context));
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
}
