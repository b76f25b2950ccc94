//! The body-hold watchdog. Without the plugin option `allow_on_headers_stop_iteration`, Envoy
//! never delivers the body of a request whose headers the filter held, and the request would
//! hang. Until a body has arrived during a hold (proof the option is on), held requests are
//! watched; after `HELD_FOR_BODY_MS` they are let go. The worker stops holding POST bodies only on
//! evidence that Envoy had the body all along: a released request whose body then arrives within
//! `PROMPT_MS`, `HUNG_TO_CONCLUDE` times. A slow or hostile client is released the same way, but
//! its body comes late (or never), so it proves nothing and cannot turn POST caching off.

/// How long a held request may wait for its body before it is let go.
pub const HELD_FOR_BODY_MS: u64 = 1000;
/// A body arriving this soon after its request was let go was already in Envoy's buffer.
pub const PROMPT_MS: u64 = 100;
/// Such requests before concluding the option is off.
pub const HUNG_TO_CONCLUDE: u32 = 3;
/// Released requests remembered while their body may still arrive.
const RELEASED_KEPT: usize = 64;

pub const OPTION_OFF_LOG: &str = "graphql-cache: request bodies never arrived after the filter \
     held the headers: set `allow_on_headers_stop_iteration: true` in the wasm filter's plugin \
     config. Until then POST requests pass through uncached on this worker (GET requests are \
     cached).";

#[derive(Debug, Default)]
pub struct BodyWatchdog {
    /// A body arrived during a hold: the option is on, held requests cannot hang.
    body_after_pause_seen: bool,
    /// Until then, the requests held for their body, and since when.
    held: Vec<(u32, u64)>,
    /// Requests let go, and when, while their body may still come.
    released: Vec<(u32, u64)>,
    /// Envoy held bodies it had: POST bodies are no longer held on this worker.
    bodies_not_delivered: bool,
    /// Released requests whose body came promptly after.
    evidence: u32,
}

/// What a body callback means for a held request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyArrival {
    /// Read it and decide.
    Proceed,
    /// The watchdog let this request go already: pass it through. `concluded` when this body
    /// was the evidence that settled it (log it, once).
    AlreadyReleased { concluded: bool },
}

impl BodyWatchdog {
    /// Whether POST bodies may be held on this worker.
    pub fn may_hold(&self) -> bool {
        !self.bodies_not_delivered
    }

    /// A request's headers were held waiting for its body.
    pub fn hold(&mut self, context: u32, now_ms: u64) {
        if !self.body_after_pause_seen {
            self.held.push((context, now_ms));
        }
    }

    /// A body callback came for a held request; `released` says whether the watchdog already let
    /// it go.
    pub fn body_arrived(&mut self, context: u32, now_ms: u64, released: bool) -> BodyArrival {
        if self.body_after_pause_seen {
            return BodyArrival::Proceed;
        }
        if !released {
            self.body_after_pause_seen = true;
            self.held.clear();
            self.released.clear();
            return BodyArrival::Proceed;
        }
        let at = self.released.iter().position(|(c, _)| *c == context);
        let prompt = at.is_some_and(|i| now_ms.saturating_sub(self.released[i].1) <= PROMPT_MS);
        if let Some(i) = at {
            self.released.swap_remove(i);
        }
        if prompt {
            self.evidence = self.evidence.saturating_add(1);
        }
        let concluded = !self.bodies_not_delivered && self.evidence >= HUNG_TO_CONCLUDE;
        self.bodies_not_delivered |= concluded;
        BodyArrival::AlreadyReleased { concluded }
    }

    pub fn watching(&self) -> bool {
        !self.body_after_pause_seen
    }

    /// The request ended (answered, or its client left).
    pub fn forget(&mut self, context: u32) {
        if !self.held.is_empty() {
            self.held.retain(|(c, _)| *c != context);
        }
        if !self.released.is_empty() {
            self.released.retain(|(c, _)| *c != context);
        }
    }

    /// Takes the requests held for `HELD_FOR_BODY_MS` or more, to be let go now.
    pub fn take_hung(&mut self, now_ms: u64) -> Vec<u32> {
        if self.body_after_pause_seen || self.held.is_empty() {
            return Vec::new();
        }
        let (hung, keep): (Vec<_>, Vec<_>) = self
            .held
            .drain(..)
            .partition(|(_, since)| now_ms.saturating_sub(*since) >= HELD_FOR_BODY_MS);
        self.held = keep;
        for (context, _) in &hung {
            if self.released.len() >= RELEASED_KEPT {
                self.released.remove(0);
            }
            self.released.push((*context, now_ms));
        }
        hung.into_iter().map(|(c, _)| c).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_that_come_promptly_after_release_conclude_once() {
        let mut w = BodyWatchdog::default();
        w.hold(1, 0);
        w.hold(2, 500);
        assert!(w.take_hung(999).is_empty());
        assert_eq!(w.take_hung(1000), vec![1]);
        w.hold(3, 1000);
        assert_eq!(w.take_hung(2000), vec![2, 3]);
        assert_eq!(
            w.body_arrived(1, 1001, true),
            BodyArrival::AlreadyReleased { concluded: false }
        );
        assert_eq!(
            w.body_arrived(2, 2010, true),
            BodyArrival::AlreadyReleased { concluded: false }
        );
        assert!(w.may_hold());
        assert_eq!(
            w.body_arrived(3, 2050, true),
            BodyArrival::AlreadyReleased { concluded: true }
        );
        assert!(
            !w.may_hold(),
            "three bodies Envoy had all along: the option is off"
        );
        w.hold(4, 3000);
        w.take_hung(4000);
        assert_eq!(
            w.body_arrived(4, 4000, true),
            BodyArrival::AlreadyReleased { concluded: false },
            "said once"
        );
    }

    #[test]
    fn slow_or_hostile_clients_prove_nothing() {
        let mut w = BodyWatchdog::default();
        for ctx in 1..=10 {
            w.hold(ctx, 0);
        }
        assert_eq!(w.take_hung(1000).len(), 10);
        // Their bodies trickle in long after they were let go, or never.
        for ctx in 1..=5 {
            w.body_arrived(ctx, 1000 + PROMPT_MS + 1, true);
        }
        assert!(w.may_hold(), "POST caching stays on");
    }

    #[test]
    fn a_body_during_a_hold_ends_the_watch() {
        let mut w = BodyWatchdog::default();
        w.hold(1, 0);
        assert_eq!(w.body_arrived(1, 10, false), BodyArrival::Proceed);
        assert!(!w.watching());
        w.hold(2, 0);
        assert!(w.take_hung(10_000).is_empty());
        assert!(w.may_hold());
    }

    #[test]
    fn requests_that_end_are_forgotten_and_memory_is_bounded() {
        let mut w = BodyWatchdog::default();
        w.hold(1, 0);
        w.forget(1);
        assert!(w.take_hung(5000).is_empty());
        for ctx in 0..1000 {
            w.hold(ctx, 0);
        }
        w.take_hung(1000);
        assert!(w.released.len() <= RELEASED_KEPT);
    }
}
