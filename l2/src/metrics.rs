//! Prometheus text counters, lock-free.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

/// One `l2_requests_total{verb, outcome}` series each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    LookupHit,
    LookupLead,
    LookupBusy,
    LookupBadRequest,
    LookupError,
    StoreStored,
    StoreTooLarge,
    StoreBadRequest,
    StoreError,
    ReleaseReleased,
    ReleaseNotOwner,
    ReleaseBadRequest,
    ReleaseError,
    PurgeAdded,
    PurgeTooLarge,
    PurgeError,
    PurgesEntries,
    PurgesEmpty,
    PurgesBadRequest,
    PurgesError,
    HealthOk,
    HealthError,
}

const OUTCOMES: [(Outcome, &str, &str); 22] = [
    (Outcome::LookupHit, "lookup", "hit"),
    (Outcome::LookupLead, "lookup", "lead"),
    (Outcome::LookupBusy, "lookup", "busy"),
    (Outcome::LookupBadRequest, "lookup", "bad_request"),
    (Outcome::LookupError, "lookup", "error"),
    (Outcome::StoreStored, "store", "stored"),
    (Outcome::StoreTooLarge, "store", "too_large"),
    (Outcome::StoreBadRequest, "store", "bad_request"),
    (Outcome::StoreError, "store", "error"),
    (Outcome::ReleaseReleased, "release", "released"),
    (Outcome::ReleaseNotOwner, "release", "not_owner"),
    (Outcome::ReleaseBadRequest, "release", "bad_request"),
    (Outcome::ReleaseError, "release", "error"),
    (Outcome::PurgeAdded, "purge", "added"),
    (Outcome::PurgeTooLarge, "purge", "too_large"),
    (Outcome::PurgeError, "purge", "error"),
    (Outcome::PurgesEntries, "purges", "entries"),
    (Outcome::PurgesEmpty, "purges", "empty"),
    (Outcome::PurgesBadRequest, "purges", "bad_request"),
    (Outcome::PurgesError, "purges", "error"),
    (Outcome::HealthOk, "health", "ok"),
    (Outcome::HealthError, "health", "error"),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollVerb {
    Lookup = 0,
    Purges = 1,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WakeSource {
    /// A PUBLISH on the key's channel reached the subscriber.
    Notify = 0,
    /// The waiter's own timer: lease expiry, the 250 ms safety net, or 10 ms polling while the
    /// subscriber is down.
    Timer = 1,
}

#[derive(Default)]
pub struct Metrics {
    requests: [AtomicU64; OUTCOMES.len()],
    redis_errors: AtomicU64,
    long_polls: [AtomicU64; 2],
    wakeups: [AtomicU64; 2],
    in_flight: AtomicI64,
    pubsub_connected: AtomicI64,
    pubsub_reconnects: AtomicU64,
}

/// Holds one in-flight long-poll; dropping it (answer sent, or client gone) lowers the gauge.
pub struct InFlight(Arc<Metrics>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

fn index(o: Outcome) -> usize {
    OUTCOMES.iter().position(|(x, _, _)| *x == o).unwrap_or(0)
}

impl Metrics {
    pub fn count(&self, o: Outcome) {
        self.requests[index(o)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn redis_error(&self) {
        self.redis_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub fn wakeup(&self, s: WakeSource) {
        self.wakeups[s as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn set_pubsub_connected(&self, up: bool) {
        if up {
            self.pubsub_connected.fetch_add(1, Ordering::Relaxed);
            self.pubsub_reconnects.fetch_add(1, Ordering::Relaxed);
        } else {
            self.pubsub_connected.fetch_sub(1, Ordering::Relaxed);
        }
    }

    pub fn long_poll(self: &Arc<Self>, v: PollVerb) -> InFlight {
        self.long_polls[v as usize].fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        let r = Ordering::Relaxed;
        out.push_str(
            "# HELP l2_requests_total Requests answered, by verb and outcome.\n\
             # TYPE l2_requests_total counter\n",
        );
        for (i, (_, verb, outcome)) in OUTCOMES.iter().enumerate() {
            let _ = writeln!(
                out,
                "l2_requests_total{{verb=\"{verb}\",outcome=\"{outcome}\"}} {}",
                self.requests[i].load(r)
            );
        }
        let _ = write!(
            out,
            "# HELP l2_redis_errors_total Redis round trips that failed or timed out (each answered 503).\n\
             # TYPE l2_redis_errors_total counter\n\
             l2_redis_errors_total {}\n\
             # HELP l2_long_polls_total Requests that waited (lookup busy with wait_ms, purges empty with wait_ms).\n\
             # TYPE l2_long_polls_total counter\n\
             l2_long_polls_total{{verb=\"lookup\"}} {}\n\
             l2_long_polls_total{{verb=\"purges\"}} {}\n\
             # HELP l2_long_polls_in_flight Long-polls waiting right now.\n\
             # TYPE l2_long_polls_in_flight gauge\n\
             l2_long_polls_in_flight {}\n\
             # HELP l2_lookup_wakeups_total Re-checks of a waiting lookup, by what woke it.\n\
             # TYPE l2_lookup_wakeups_total counter\n\
             l2_lookup_wakeups_total{{source=\"notify\"}} {}\n\
             l2_lookup_wakeups_total{{source=\"timer\"}} {}\n\
             # HELP l2_pubsub_connected Wake-up subscriber connections subscribed now (1 per node / Cluster master).\n\
             # TYPE l2_pubsub_connected gauge\n\
             l2_pubsub_connected {}\n\
             # HELP l2_pubsub_subscriptions_total Times a wake-up subscriber (re)subscribed.\n\
             # TYPE l2_pubsub_subscriptions_total counter\n\
             l2_pubsub_subscriptions_total {}\n",
            self.redis_errors.load(r),
            self.long_polls[0].load(r),
            self.long_polls[1].load(r),
            self.in_flight.load(r),
            self.wakeups[0].load(r),
            self.wakeups[1].load(r),
            self.pubsub_connected.load(r),
            self.pubsub_reconnects.load(r),
        );
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_has_its_own_series() {
        for (i, (o, _, _)) in OUTCOMES.iter().enumerate() {
            assert_eq!(index(*o), i);
        }
        let m = Arc::new(Metrics::default());
        m.count(Outcome::StoreStored);
        {
            let _g = m.long_poll(PollVerb::Lookup);
            assert!(m.render().contains("l2_long_polls_in_flight 1\n"));
        }
        let text = m.render();
        assert!(text.contains("l2_requests_total{verb=\"store\",outcome=\"stored\"} 1\n"));
        assert!(text.contains("l2_long_polls_in_flight 0\n"));
        assert!(text.contains("l2_long_polls_total{verb=\"lookup\"} 1\n"));
    }
}
