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
    MgetAnswered,
    MgetTooLarge,
    MgetBadRequest,
    MgetError,
    MstoreStored,
    MstoreTooLarge,
    MstoreBadRequest,
    MstoreError,
    MarksAdded,
    MarksTooLarge,
    MarksBadRequest,
    MarksError,
    SnapshotPage,
    SnapshotBadRequest,
    SnapshotError,
}

const OUTCOMES: [(Outcome, &str, &str); 37] = [
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
    (Outcome::MgetAnswered, "mget", "answered"),
    (Outcome::MgetTooLarge, "mget", "too_large"),
    (Outcome::MgetBadRequest, "mget", "bad_request"),
    (Outcome::MgetError, "mget", "error"),
    (Outcome::MstoreStored, "mstore", "stored"),
    (Outcome::MstoreTooLarge, "mstore", "too_large"),
    (Outcome::MstoreBadRequest, "mstore", "bad_request"),
    (Outcome::MstoreError, "mstore", "error"),
    (Outcome::MarksAdded, "marks", "added"),
    (Outcome::MarksTooLarge, "marks", "too_large"),
    (Outcome::MarksBadRequest, "marks", "bad_request"),
    (Outcome::MarksError, "marks", "error"),
    (Outcome::SnapshotPage, "snapshot", "page"),
    (Outcome::SnapshotBadRequest, "snapshot", "bad_request"),
    (Outcome::SnapshotError, "snapshot", "error"),
];

/// What became of one key of a batch verb (`l2_batch_keys_total{result}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchKey {
    /// An mget key that had a value.
    Hit = 0,
    /// An mget key that had none.
    Absent = 1,
    /// An mstore item written.
    Stored = 2,
    /// An mstore item over --max-value-bytes, left out.
    TooLarge = 3,
}

impl BatchKey {
    const LABELS: [&'static str; 4] = ["hit", "absent", "stored", "too_large"];
}

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthFailure {
    Missing = 0,
    Malformed = 1,
    Wrong = 2,
}

impl AuthFailure {
    const LABELS: [&'static str; 3] = ["missing", "malformed", "wrong"];

    /// The 401's body: says what is wrong, never what is expected.
    pub fn message(self) -> &'static str {
        match self {
            AuthFailure::Missing => "missing `authorization: Bearer <secret>` header",
            AuthFailure::Malformed => "authorization header is not `Bearer <secret>`",
            AuthFailure::Wrong => "wrong secret",
        }
    }
}

/// Requests turned away before doing their work, so that load cannot grow without bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shed {
    /// A lookup that would have waited answered `busy` at once (--max-long-polls).
    LookupWait = 0,
    /// A purges long-poll answered 429 (--max-long-polls).
    PurgesWait = 1,
    /// A store answered 429 (--max-inflight-bytes).
    StoreBytes = 2,
}

/// One counter per outcome: a type of its own because `Default` for arrays stops at 32.
struct Requests([AtomicU64; OUTCOMES.len()]);

impl Default for Requests {
    fn default() -> Requests {
        Requests(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

#[derive(Default)]
pub struct Metrics {
    auth_failures: [AtomicU64; 3],
    shed: [AtomicU64; 3],
    leases_clamped: AtomicU64,
    follower_connected: AtomicI64,
    follower_reads: AtomicU64,
    requests: Requests,
    redis_errors: AtomicU64,
    long_polls: [AtomicU64; 2],
    wakeups: [AtomicU64; 2],
    in_flight: AtomicI64,
    pubsub_connected: AtomicI64,
    pubsub_reconnects: AtomicU64,
    connection_rebuilds: AtomicU64,
    batch_keys: [AtomicU64; 4],
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
        self.requests.0[index(o)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn auth_failure(&self, why: AuthFailure) {
        self.auth_failures[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn shed(&self, what: Shed) {
        self.shed[what as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn lease_clamped(&self) {
        self.leases_clamped.fetch_add(1, Ordering::Relaxed);
    }

    pub fn set_follower_connected(&self, up: bool) {
        self.follower_connected
            .store(i64::from(up), Ordering::Relaxed);
    }

    pub fn follower_read(&self) {
        self.follower_reads.fetch_add(1, Ordering::Relaxed);
    }

    pub fn batch_keys(&self, what: BatchKey, n: usize) {
        self.batch_keys[what as usize].fetch_add(n as u64, Ordering::Relaxed);
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
                self.requests.0[i].load(r)
            );
        }
        let _ = write!(
            out,
            "# HELP l2_redis_errors_total Redis round trips that failed or timed out (each answered 424, or 503 on /health).\n\
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
        self.render_guards(&mut out);
        out.push_str(
            "# HELP l2_batch_keys_total Keys of mget and items of mstore, by what became of them.\n\
             # TYPE l2_batch_keys_total counter\n",
        );
        for (i, result) in BatchKey::LABELS.iter().enumerate() {
            let _ = writeln!(
                out,
                "l2_batch_keys_total{{result=\"{result}\"}} {}",
                self.batch_keys[i].load(r)
            );
        }
        out
    }

    pub fn count_connection_rebuild(&self) {
        self.connection_rebuilds.fetch_add(1, Ordering::Relaxed);
    }

    fn render_guards(&self, out: &mut String) {
        let r = Ordering::Relaxed;
        out.push_str(
            "# HELP l2_auth_failures_total Requests refused with 401, by reason.\n\
             # TYPE l2_auth_failures_total counter\n",
        );
        for (i, reason) in AuthFailure::LABELS.iter().enumerate() {
            let _ = writeln!(
                out,
                "l2_auth_failures_total{{reason=\"{reason}\"}} {}",
                self.auth_failures[i].load(r)
            );
        }
        let _ = write!(
            out,
            "# HELP l2_shed_total Requests that did not wait or were refused with 429 (--max-long-polls, --max-inflight-bytes).\n\
             # TYPE l2_shed_total counter\n\
             l2_shed_total{{what=\"lookup_wait\"}} {}\n\
             l2_shed_total{{what=\"purges_wait\"}} {}\n\
             l2_shed_total{{what=\"store_bytes\"}} {}\n\
             # HELP l2_leases_clamped_total Lookups whose lease_ms was above --max-lease-ms (clamped to it).\n\
             # TYPE l2_leases_clamped_total counter\n\
             l2_leases_clamped_total {}\n\
             # HELP l2_redis_connection_rebuilds_total Redis connections replaced after every round trip failed for 2 s.\n\
             # TYPE l2_redis_connection_rebuilds_total counter\n\
             l2_redis_connection_rebuilds_total {}\n\
             # HELP l2_purge_follower_connected 1 while the purge-log follower's XREAD BLOCK connection is up.\n\
             # TYPE l2_purge_follower_connected gauge\n\
             l2_purge_follower_connected {}\n\
             # HELP l2_purge_follower_reads_total XREAD BLOCK round trips of the purge-log follower.\n\
             # TYPE l2_purge_follower_reads_total counter\n\
             l2_purge_follower_reads_total {}\n",
            self.shed[0].load(r),
            self.shed[1].load(r),
            self.shed[2].load(r),
            self.leases_clamped.load(r),
            self.connection_rebuilds.load(r),
            self.follower_connected.load(r),
            self.follower_reads.load(r),
        );
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
        let mut seen = std::collections::HashSet::new();
        for (_, verb, outcome) in OUTCOMES {
            assert!(seen.insert((verb, outcome)), "{verb} {outcome} twice");
        }
        m.count(Outcome::SnapshotBadRequest);
        assert!(m
            .render()
            .contains("l2_requests_total{verb=\"snapshot\",outcome=\"bad_request\"} 1\n"));
        m.batch_keys(BatchKey::Absent, 3);
        assert!(m
            .render()
            .contains("l2_batch_keys_total{result=\"absent\"} 3\n"));
    }
}
