//! What one worker has outstanding with the L2 service, by callout token, and what it still has
//! to send. Bounded: every call is either answered or times out at Envoy, and the outbox keeps at
//! most [`OUTBOX_MAX`] writes.

use crate::coalesce::upstream::SharedFetch;
use crate::effects::host::Callout;
use crate::fast_hash::FastMap;

/// Writes queued by requests (purges) for the root to send; past this, the oldest is dropped.
pub const OUTBOX_MAX: usize = 256;
/// A purge write that failed is sent again this many times in all (on the next ticks).
pub const PURGE_ATTEMPTS: u8 = 3;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// A leader asked whether another node has the key, or leads it.
    Lookup(SharedFetch),
    /// A leader waits for another node's fetch of the key.
    Wait(SharedFetch),
    /// A store or release: nobody waits for it.
    Write,
    /// A purge record for the log; sent again if it fails.
    Purge(Outgoing),
    /// This worker's read of the purge log.
    Feed,
}

/// A write waiting to be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub callout: Callout,
    pub attempts: u8,
    /// A purge record (sent again if it fails); otherwise a lease release.
    pub purge: bool,
}

/// Where this worker is in the fleet's purge log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feed {
    /// The last entry applied (`0`: from the start, so a new node learns every purge the log
    /// still holds before it trusts what L2 gives it).
    pub cursor: String,
    /// A read is outstanding.
    pub reading: bool,
    /// When the next read may start (after a failure).
    pub next_ms: u64,
    /// The log was read to its end at least once since the last failure: until then an L2 hit
    /// may be an entry purged by a purge this node has not applied yet, and is not served.
    pub caught_up: bool,
}

impl Default for Feed {
    fn default() -> Self {
        Feed {
            cursor: "0".to_string(),
            reading: false,
            next_ms: 0,
            caught_up: false,
        }
    }
}

#[derive(Debug, Default)]
pub struct L2Calls {
    pub calls: FastMap<u32, (Call, u64)>,
    pub outbox: Vec<Outgoing>,
    pub feed: Feed,
}

impl L2Calls {
    /// Records call `token`, sent at `now_ms`.
    pub fn sent(&mut self, token: u32, call: Call, now_ms: u64) {
        self.calls.insert(token, (call, now_ms));
    }

    pub fn take(&mut self, token: u32) -> Option<Call> {
        self.calls.remove(&token).map(|(c, _)| c)
    }

    /// Queues a write for the root to send (`purge`: a purge record).
    pub fn queue(&mut self, callout: Callout, purge: bool) {
        if self.outbox.len() >= OUTBOX_MAX {
            self.outbox.remove(0);
        }
        self.outbox.push(Outgoing {
            callout,
            attempts: 0,
            purge,
        });
    }

    /// Forgets calls Envoy never answered (it times every one out, so this is a safety net; the
    /// flights of lost lookups are abandoned by the timer like those of lost fetches).
    pub fn forget_older_than(&mut self, cutoff_ms: u64) {
        let lost: Vec<u32> = self
            .calls
            .iter()
            .filter(|(_, (_, at))| *at < cutoff_ms)
            .map(|(t, _)| *t)
            .collect();
        for token in lost {
            if let Some((Call::Feed, _)) = self.calls.remove(&token) {
                self.feed.reading = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn callout(n: u8) -> Callout {
        Callout {
            cluster: "l2".into(),
            headers: vec![],
            body: Some(vec![n]),
        }
    }

    #[test]
    fn the_outbox_is_bounded_oldest_first() {
        let mut c = L2Calls::default();
        for n in 0..=OUTBOX_MAX {
            c.queue(callout(n as u8), false);
        }
        assert_eq!(c.outbox.len(), OUTBOX_MAX);
        assert_eq!(c.outbox[0].callout, callout(1));
    }

    #[test]
    fn lost_calls_are_forgotten_and_a_lost_feed_read_unblocks_the_feed() {
        let mut c = L2Calls::default();
        c.sent(1, Call::Feed, 10);
        c.feed.reading = true;
        c.sent(2, Call::Write, 100);
        c.forget_older_than(50);
        assert!(!c.feed.reading);
        assert!(c.take(1).is_none() && c.take(2).is_some());
    }
}
