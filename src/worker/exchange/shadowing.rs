//! Shadow mode: looked up, sent upstream anyway, the answer compared with what the cache would
//! have served, and stored.

use super::*;

impl Exchange {
    /// Shadow mode: count what the cache would have done, and let the request go upstream.
    pub(super) fn shadow_lookup<H: RequestHost>(
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
        self.state = State::Shadow(Shadow {
            key,
            shadowed: Box::new(shadowed),
        });
        Flow::Continue
    }

    pub(super) fn shadow_headers<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        end_of_stream: bool,
    ) {
        let lifetimes = self.asked.as_ref().map(|a| a.lifetimes).unwrap_or_default();
        let State::Shadow(Shadow { shadowed, .. }) = &mut self.state else {
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

    pub(super) fn shadow_body<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        size: usize,
        end: bool,
    ) {
        let State::Shadow(Shadow { shadowed, .. }) = &mut self.state else {
            return;
        };
        shadowed.chunk(cx.plugin(), cx.host(), size);
        if !end {
            return;
        }
        let State::Shadow(Shadow { key, shadowed }) =
            std::mem::replace(&mut self.state, State::Served)
        else {
            return;
        };
        if let (Some(capture), Some(asked)) = (shadowed.finish(cx.host()), &self.asked) {
            // Shadow mode changes nothing others see: L1 only.
            capture.finish(cx, &key, asked);
        }
    }
}

/// Shadow mode's one state: looked up, sent upstream, its answer compared and stored.
#[derive(Debug)]
pub(super) struct Shadow {
    key: CacheKey,
    shadowed: Box<Shadowed>,
}

impl Shadow {
    pub(super) fn key(&self) -> CacheKey {
        self.key
    }
}
