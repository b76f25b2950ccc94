//! The flights wing: one fetch per key shared by every request that misses it, on this worker
//! and the others. [`Flights`] is this worker's side of them (who waits, what is queued for the
//! root and sent, what was published, how each paused request was let go), reached only through
//! its verbs. A miss `join`s a flight (this worker's wait, another worker's fetch, or a lead of
//! its own); `permit` is a lead from its claim until the root holds the fetch; `shared_fetch` is
//! the leader's fetch and its end; `followers` are other workers' wake-ups; `kinds` is what entity mode adds to a fetch (plugged in by the root); `answer` lets paused
//! requests go; `wake` wakes the workers that watch a flight when it ends.

pub mod answer;
pub mod followers;
pub mod join;
pub mod kinds;
pub mod permit;
pub mod shared_fetch;
pub mod wake;

use crate::cache::status::CacheStatus;
use crate::coalesce::release::Release;
use crate::coalesce::upstream::SharedFetch;
use crate::coalesce::waiters::{LocalFlight, LocalFlights, LocalJoin, Waiter};
use crate::fast_hash::FastMap;
use crate::request::key::CacheKey;

/// A dispatched fetch that has not come back after this many leases is lost (a callout should
/// end at its timeout; Envoy may drop one whose cluster went away).
const LOST_AFTER_LEASES: u64 = 2;

/// How a paused request was let go, so its own callbacks know what happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered with a local reply (`MISS` for the leader, `COALESCED` for followers), labelled
    /// so (`x-cache` and its reason).
    Answered {
        cache: CacheStatus,
        reason: Option<&'static str>,
    },
    /// Resumed to go upstream on its own; the reason shows in the debug header.
    Released(Release),
}

/// This worker's flights.
#[derive(Debug, Default)]
pub struct Flights {
    /// This worker's paused requests, per key.
    waiters: LocalFlights,
    /// Claimed by a request, waiting for the root to send.
    pending: Vec<SharedFetch>,
    /// Sent: callout token to fetch.
    fetches: FastMap<u32, SharedFetch>,
    /// Finished records this worker published for watchers, with when: emptied after a grace.
    published: Vec<(CacheKey, u64)>,
    /// Set by the root when it lets a paused request go; read by that request's callbacks.
    outcomes: FastMap<u32, Outcome>,
}

/// What [`Flights::expire`] found overdue.
#[derive(Debug, Default)]
pub struct Expired {
    /// Waited longer than `max_wait_ms`: each goes upstream alone.
    pub waited_too_long: Vec<Waiter>,
    /// Flights whose lead is lost (its lease ran out here): given up, their waiters let go.
    pub lost: Vec<(CacheKey, LocalFlight)>,
    /// Fetches sent that never came back, forgotten.
    pub lost_fetches: usize,
}

impl Flights {
    /// Request `context` joins this worker's wait for `key`, if there is one.
    pub fn join(&mut self, key: &CacheKey, context: u32, now_ms: u64, max: usize) -> LocalJoin {
        self.waiters.join(key, context, now_ms, max)
    }

    /// Request `context` waits for another worker's fetch of `key`.
    pub fn follow(&mut self, key: CacheKey, context: u32, now_ms: u64) {
        self.waiters.start(key, false, context, now_ms);
    }

    /// Request `context` waits for this worker's own fetch of `key`.
    pub fn lead(&mut self, key: CacheKey, context: u32, now_ms: u64) {
        self.waiters.start(key, true, context, now_ms);
    }

    /// This worker refreshes `key` in the background; nobody waits yet.
    pub fn refresh(&mut self, key: CacheKey, now_ms: u64) {
        self.waiters.start_refresh(key, now_ms);
    }

    /// Whether a fetch of `key` is led or followed here.
    pub fn has(&self, key: &CacheKey) -> bool {
        self.waiters.contains(key)
    }

    /// Since when this worker leads `key`'s fetch, if it does.
    pub fn leading_since(&self, key: &CacheKey) -> Option<u64> {
        self.waiters.leading_since(key)
    }

    pub fn is_following(&self, key: &CacheKey) -> bool {
        self.waiters.is_following(key)
    }

    /// The flight of `key` ended: who waited for it.
    pub fn end(&mut self, key: &CacheKey) -> Option<LocalFlight> {
        self.waiters.take(key)
    }

    /// Request `context` no longer waits (how it was let go is kept for its callbacks).
    pub fn stop_waiting(&mut self, context: u32) {
        self.waiters.remove_waiter(context);
    }

    /// The root let request `context` go so.
    pub fn let_go(&mut self, context: u32, outcome: Outcome) {
        self.outcomes.insert(context, outcome);
    }

    /// How request `context` was let go is of no use any more (it ended, or was not let go).
    pub fn forget(&mut self, context: u32) {
        self.outcomes.remove(&context);
    }

    /// How request `context` was let go, once (its callbacks read it).
    pub fn outcome(&mut self, context: u32) -> Option<Outcome> {
        self.outcomes.remove(&context)
    }

    /// A fetch claimed here, for the root to send.
    pub fn queue(&mut self, fetch: SharedFetch) {
        self.pending.push(fetch);
    }

    /// Takes back the queued fetch of `key` (nothing would send it).
    pub fn unqueue(&mut self, key: &CacheKey) {
        self.pending.retain(|f| f.key != *key);
    }

    /// What is queued for the root to send, all of it.
    pub fn take_queued(&mut self) -> Vec<SharedFetch> {
        std::mem::take(&mut self.pending)
    }

    /// `fetch` was sent as callout `token`.
    pub fn sent(&mut self, token: u32, fetch: SharedFetch) {
        self.fetches.insert(token, fetch);
    }

    /// Callout `token` came back: the fetch it was, unless forgotten as lost.
    pub fn returned(&mut self, token: u32) -> Option<SharedFetch> {
        self.fetches.remove(&token)
    }

    /// This worker published the finished record of `key` at `now_ms`.
    pub fn published(&mut self, key: CacheKey, now_ms: u64) {
        self.published.push((key, now_ms));
    }

    /// The records published at least `grace_ms` ago, to empty now.
    pub fn take_published(&mut self, now_ms: u64, grace_ms: u64) -> Vec<(CacheKey, u64)> {
        let (due, keep) = std::mem::take(&mut self.published)
            .into_iter()
            .partition(|(_, finished)| now_ms.saturating_sub(*finished) >= grace_ms);
        self.published = keep;
        due
    }

    /// The keys followed here whose oldest waiter has waited at least `after_ms`.
    pub fn followed_for(&self, now_ms: u64, after_ms: u64) -> Vec<CacheKey> {
        self.waiters
            .followed_keys()
            .into_iter()
            .filter(|k| {
                self.waiters
                    .oldest_wait(k)
                    .is_some_and(|since| now_ms.saturating_sub(since) >= after_ms)
            })
            .collect()
    }

    /// What is overdue at `now_ms`: waiters past `max_wait_ms`, flights whose `lease_ms` ran out
    /// here, and fetches sent two leases ago that never came back (forgotten: their flights
    /// are among the lost ones).
    pub fn expire(&mut self, now_ms: u64, max_wait_ms: u64, lease_ms: u64) -> Expired {
        let waited_too_long = self.waiters.expire(now_ms, max_wait_ms);
        let lost = self.waiters.take_abandoned(now_ms, lease_ms);
        let before = self.fetches.len();
        let lost_after = lease_ms.saturating_mul(LOST_AFTER_LEASES);
        self.fetches
            .retain(|_, f| now_ms.saturating_sub(f.dispatched_ms) < lost_after);
        Expired {
            waited_too_long,
            lost,
            lost_fetches: before - self.fetches.len(),
        }
    }

    #[cfg(test)]
    pub fn outcome_of(&self, context: u32) -> Option<&Outcome> {
        self.outcomes.get(&context)
    }

    #[cfg(test)]
    pub fn outcomes_kept(&self) -> usize {
        self.outcomes.len()
    }

    #[cfg(test)]
    pub fn first_queued(&self) -> Option<&SharedFetch> {
        self.pending.first()
    }

    #[cfg(test)]
    pub fn sent_fetch(&self, token: u32) -> Option<&SharedFetch> {
        self.fetches.get(&token)
    }
}
