//! The body-hold watchdog. Without the plugin option `allow_on_headers_stop_iteration`, Envoy
//! never delivers the body of a request whose headers the filter held, and the request would
//! hang. Until a body has arrived after a hold (proof the option is on), held requests are
//! watched; after `HELD_FOR_BODY_MS` they are let go, and after `HUNG_TO_CONCLUDE` of them the
//! worker stops holding POST bodies (and says so, once, in the log).

/// How long a held request may wait for its body before it is let go.
pub const HELD_FOR_BODY_MS: u64 = 1000;
/// Hung requests before concluding the option is off (one slow client proves nothing).
pub const HUNG_TO_CONCLUDE: u32 = 3;

pub const OPTION_OFF_LOG: &str = "graphql-cache: request bodies never arrived after the filter \
     held the headers: set `allow_on_headers_stop_iteration: true` in the wasm filter's plugin \
     config. Until then POST requests pass through uncached on this worker (GET requests are \
     cached).";

#[derive(Debug, Default)]
pub struct BodyWatchdog {
    /// A body arrived after a hold: the option is on, held requests cannot hang.
    body_after_pause_seen: bool,
    /// Until then, the requests held for their body, and since when.
    held: Vec<(u32, u64)>,
    /// Held requests were found hanging: POST bodies are no longer held on this worker.
    bodies_not_delivered: bool,
    /// Held requests let go so far.
    hung_released: u32,
}

/// What a body callback means for a held request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyArrival {
    /// Read it and decide.
    Proceed,
    /// The watchdog let this request go already: its body proves nothing, pass it through.
    AlreadyReleased,
}

/// Requests the watchdog lets go now, and whether it just concluded the option is off.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Hung {
    pub contexts: Vec<u32>,
    pub concluded: bool,
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
    pub fn body_arrived(&mut self, released: bool) -> BodyArrival {
        if self.body_after_pause_seen {
            return BodyArrival::Proceed;
        }
        if released {
            return BodyArrival::AlreadyReleased;
        }
        self.body_after_pause_seen = true;
        self.held.clear();
        BodyArrival::Proceed
    }

    pub fn watching(&self) -> bool {
        !self.body_after_pause_seen
    }

    /// The request ended (answered, or its client left).
    pub fn forget(&mut self, context: u32) {
        if !self.held.is_empty() {
            self.held.retain(|(c, _)| *c != context);
        }
    }

    /// Takes the requests held for `HELD_FOR_BODY_MS` or more.
    pub fn take_hung(&mut self, now_ms: u64) -> Hung {
        if self.body_after_pause_seen || self.held.is_empty() {
            return Hung::default();
        }
        let (hung, keep): (Vec<_>, Vec<_>) = self
            .held
            .drain(..)
            .partition(|(_, since)| now_ms.saturating_sub(*since) >= HELD_FOR_BODY_MS);
        self.held = keep;
        if hung.is_empty() {
            return Hung::default();
        }
        self.hung_released = self.hung_released.saturating_add(hung.len() as u32);
        let concluded = !self.bodies_not_delivered && self.hung_released >= HUNG_TO_CONCLUDE;
        self.bodies_not_delivered |= concluded;
        Hung {
            contexts: hung.into_iter().map(|(c, _)| c).collect(),
            concluded,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_requests_are_let_go_and_three_conclude_once() {
        let mut w = BodyWatchdog::default();
        w.hold(1, 0);
        w.hold(2, 500);
        assert_eq!(w.take_hung(999), Hung::default());
        assert_eq!(
            w.take_hung(1000),
            Hung {
                contexts: vec![1],
                concluded: false
            }
        );
        w.hold(3, 1000);
        assert_eq!(w.take_hung(2000).contexts, vec![2, 3]);
        assert!(!w.may_hold(), "three hung requests: the option is off");
        w.hold(4, 2000);
        let later = w.take_hung(3000);
        assert_eq!(later.contexts, vec![4]);
        assert!(!later.concluded, "said once");
    }

    #[test]
    fn a_body_after_a_hold_ends_the_watch() {
        let mut w = BodyWatchdog::default();
        w.hold(1, 0);
        assert_eq!(w.body_arrived(false), BodyArrival::Proceed);
        assert!(!w.watching());
        w.hold(2, 0);
        assert_eq!(w.take_hung(10_000), Hung::default());
        assert!(w.may_hold());
    }

    #[test]
    fn a_released_request_s_late_body_proves_nothing() {
        let mut w = BodyWatchdog::default();
        w.hold(1, 0);
        w.take_hung(1000);
        assert_eq!(w.body_arrived(true), BodyArrival::AlreadyReleased);
        assert!(w.watching());
    }

    #[test]
    fn requests_that_end_are_forgotten() {
        let mut w = BodyWatchdog::default();
        w.hold(1, 0);
        w.forget(1);
        assert_eq!(w.take_hung(5000), Hung::default());
    }
}
