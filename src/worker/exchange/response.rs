//! The answer's way back, routed by kind to its machine (`hit`, `entity`, `shadowing`,
//! `mutation`); a bypassed request is labelled here; what the filter answered is let alone.

use super::*;

impl Exchange {
    pub fn on_response_headers<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        end_of_stream: bool,
    ) -> Flow {
        match self.state {
            State::Keyed(_) => self.keyed_response_headers(cx, end_of_stream),
            State::Entities(_) => self.batch_response_headers(cx),
            State::Shadow(_) => {
                self.shadow_headers(cx, end_of_stream);
                self.report_outcome(cx);
            }
            State::Bypassed(reason) => {
                self.bypassed_headers(cx, reason, end_of_stream);
                self.report_outcome(cx);
            }
            _ => self.report_outcome(cx),
        }
        Flow::Continue
    }

    pub fn on_response_body<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        body_size: usize,
        end_of_stream: bool,
    ) -> Flow {
        match self.state {
            State::Mutation(_) => self.mutation_body(cx, body_size, end_of_stream),
            State::Shadow(_) => self.shadow_body(cx, body_size, end_of_stream),
            State::Entities(_) => self.batch_response_body(cx, body_size, end_of_stream),
            State::Keyed(_) => self.keyed_response_body(cx, body_size, end_of_stream),
            _ => {}
        }
        Flow::Continue
    }

    pub fn on_response_trailers<H: RequestHost>(&mut self, cx: &mut Ctx<'_, H>) -> Flow {
        if let State::Keyed(_) = self.state {
            self.keyed_response_trailers(cx);
        }
        Flow::Continue
    }

    /// A bypassed request's answer is labelled `BYPASS` (shadow mode changes no answer but for
    /// debugging); a mutation's is read for what it changed.
    fn bypassed_headers<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        reason: Bypass,
        end_of_stream: bool,
    ) {
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
}
