//! The requests of one worker waiting on each key, in memory (only the worker that owns a paused
//! request can wake it; the cross-worker part is `flights`).

use crate::fast_hash::FastMap;
use crate::request::key::CacheKey;

/// A request of this worker waiting for a flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiter {
    pub context_id: u32,
    pub since_ms: u64,
    /// The request that started the flight (answered `MISS`, the others `COALESCED`).
    pub leader: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalFlight {
    /// This worker fetches (else it follows another worker's fetch).
    pub leading: bool,
    pub started_ms: u64,
    pub waiters: Vec<Waiter>,
}

/// The requests of one worker waiting on each key.
#[derive(Debug, Default)]
pub struct LocalFlights {
    flights: FastMap<CacheKey, LocalFlight>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalJoin {
    Joined,
    /// `max_waiters` reached: go upstream alone.
    Full,
    /// No flight for this key on this worker yet.
    NoFlight,
}

impl LocalFlights {
    pub fn join(
        &mut self,
        key: &CacheKey,
        context_id: u32,
        now_ms: u64,
        max_waiters: usize,
    ) -> LocalJoin {
        match self.flights.get_mut(key) {
            None => LocalJoin::NoFlight,
            Some(f) if f.waiters.len() >= max_waiters => LocalJoin::Full,
            Some(f) => {
                f.waiters.push(Waiter {
                    context_id,
                    since_ms: now_ms,
                    leader: false,
                });
                LocalJoin::Joined
            }
        }
    }

    /// Starts waiting on a key: as its leader, or as the first follower of a remote fetch.
    pub fn start(&mut self, key: CacheKey, leading: bool, context_id: u32, now_ms: u64) {
        let waiter = Waiter {
            context_id,
            since_ms: now_ms,
            leader: leading,
        };
        self.flights.insert(
            key,
            LocalFlight {
                leading,
                started_ms: now_ms,
                waiters: vec![waiter],
            },
        );
    }

    /// Starts a background refresh this worker leads, with nobody waiting on it yet.
    pub fn start_refresh(&mut self, key: CacheKey, now_ms: u64) {
        self.flights.insert(
            key,
            LocalFlight {
                leading: true,
                started_ms: now_ms,
                waiters: Vec::new(),
            },
        );
    }

    /// When this worker started fetching `key` (`None`: it does not; following another worker's
    /// fetch is not fetching).
    pub fn leading_since(&self, key: &CacheKey) -> Option<u64> {
        self.flights
            .get(key)
            .filter(|f| f.leading)
            .map(|f| f.started_ms)
    }

    pub fn contains(&self, key: &CacheKey) -> bool {
        self.flights.contains_key(key)
    }

    /// Removes the flight and hands back everyone waiting on it.
    pub fn take(&mut self, key: &CacheKey) -> Option<LocalFlight> {
        self.flights.remove(key)
    }

    /// Forgets a request that ended (client gone) while waiting. A flight this worker leads stays
    /// even with no waiters left: its fetch still completes for other workers.
    pub fn remove_waiter(&mut self, context_id: u32) {
        self.flights.retain(|_, f| {
            f.waiters.retain(|w| w.context_id != context_id);
            f.leading || !f.waiters.is_empty()
        });
    }

    /// Takes out the waiters that have waited `max_wait_ms` or more.
    pub fn expire(&mut self, now_ms: u64, max_wait_ms: u64) -> Vec<Waiter> {
        let mut expired = Vec::new();
        self.flights.retain(|_, f| {
            f.waiters.retain(|w| {
                let keep = now_ms.saturating_sub(w.since_ms) < max_wait_ms;
                if !keep {
                    expired.push(*w);
                }
                keep
            });
            f.leading || !f.waiters.is_empty()
        });
        expired
    }

    /// Takes out the flights this worker leads that outlived `lease_ms`: their fetch was lost
    /// (never dispatched, or its answer never came), so their waiters must be let go.
    pub fn take_abandoned(&mut self, now_ms: u64, lease_ms: u64) -> Vec<(CacheKey, LocalFlight)> {
        let stale: Vec<CacheKey> = self
            .flights
            .iter()
            .filter(|(_, f)| f.leading && now_ms.saturating_sub(f.started_ms) >= lease_ms)
            .map(|(k, _)| *k)
            .collect();
        stale
            .into_iter()
            .filter_map(|k| self.flights.remove(&k).map(|f| (k, f)))
            .collect()
    }

    /// Keys this worker waits on without leading: checked by the fallback timer.
    pub fn followed_keys(&self) -> Vec<CacheKey> {
        self.flights
            .iter()
            .filter(|(_, f)| !f.leading)
            .map(|(k, _)| *k)
            .collect()
    }

    /// Whether this worker waits on `key` without leading it.
    pub fn is_following(&self, key: &CacheKey) -> bool {
        self.flights.get(key).is_some_and(|f| !f.leading)
    }

    /// When the longest-waiting request on `key` started waiting.
    pub fn oldest_wait(&self, key: &CacheKey) -> Option<u64> {
        self.flights
            .get(key)?
            .waiters
            .iter()
            .map(|w| w.since_ms)
            .min()
    }

    pub fn is_empty(&self) -> bool {
        self.flights.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> CacheKey {
        CacheKey { digest: [n; 32] }
    }

    #[test]
    fn local_waiters_are_bounded_expire_and_leave() {
        let mut l = LocalFlights::default();
        let k = key(9);
        assert_eq!(l.join(&k, 1, 0, 3), LocalJoin::NoFlight);
        l.start(k, true, 1, 0);
        assert_eq!(l.join(&k, 2, 10, 3), LocalJoin::Joined);
        assert_eq!(l.join(&k, 3, 20, 3), LocalJoin::Joined);
        assert_eq!(l.join(&k, 4, 20, 3), LocalJoin::Full);
        l.remove_waiter(2);
        let expired = l.expire(1005, 1000);
        assert_eq!(
            expired.iter().map(|w| w.context_id).collect::<Vec<_>>(),
            vec![1]
        );
        assert!(l.contains(&k), "a leading flight outlives its waiters");
        let f = l.take(&k).unwrap();
        assert_eq!(f.waiters.len(), 1);
        assert_eq!(f.waiters[0].context_id, 3);
        assert!(l.is_empty());

        l.start(k, false, 5, 7);
        assert_eq!(l.followed_keys(), vec![k]);
        assert_eq!(l.oldest_wait(&k), Some(7));
        assert!(l.is_following(&k));
        l.remove_waiter(5);
        assert!(l.is_empty(), "a followed flight with no waiters is dropped");

        l.start(k, true, 6, 100);
        assert!(l.take_abandoned(1099, 1000).is_empty());
        let abandoned = l.take_abandoned(1100, 1000);
        assert_eq!(abandoned.len(), 1);
        assert_eq!(abandoned[0].1.waiters[0].context_id, 6);
        assert!(l.is_empty());
    }
}
