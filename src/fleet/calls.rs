//! What one worker has outstanding with the L2 service, by callout token, and what it still has
//! to send. Bounded: every call is either answered or times out at Envoy, and the outbox keeps at
//! most [`OUTBOX_MAX`] stores and releases (purges wait in shared data: `fleet::outbox`).

use crate::coalesce::upstream::SharedFetch;
use crate::effects::host::Callout;
use crate::fast_hash::FastMap;

/// Stores and releases queued for the root to send; past this, the oldest is dropped (a lost
/// store is a later miss, a lost release a lease that runs out).
pub const OUTBOX_MAX: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// A leader asked whether another node has the key, or leads it.
    Lookup(SharedFetch),
    /// A leader waits for another node's fetch of the key.
    Wait(SharedFetch),
    /// A store or release: nobody waits for it.
    Write,
    /// The purges owed to the log up to this place in the outbox (`fleet::outbox`): removed
    /// from it once the log has them, sent again otherwise.
    Purge(u64),
    /// This worker's read of the purge log.
    Feed,
    /// This worker's read of a page of the purge snapshot.
    Snapshot,
}

/// This worker's part in following the purge log (where the log is at: `fleet::follower`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Feed {
    /// A read is outstanding.
    pub reading: bool,
    /// When the next read may start (after a failure).
    pub next_ms: u64,
}

#[derive(Debug, Default)]
pub struct L2Calls {
    pub calls: FastMap<u32, (Call, u64)>,
    /// Stores and releases to send.
    pub outbox: Vec<Callout>,
    pub feed: Feed,
    /// Purges are on their way to the log (one call at a time, in order).
    pub sending_purge: bool,
}

impl L2Calls {
    /// Records call `token`, sent at `now_ms`.
    pub fn sent(&mut self, token: u32, call: Call, now_ms: u64) {
        self.calls.insert(token, (call, now_ms));
    }

    pub fn take(&mut self, token: u32) -> Option<Call> {
        self.calls.remove(&token).map(|(c, _)| c)
    }

    /// Queues a store or release for the root to send.
    pub fn queue(&mut self, callout: Callout) {
        if self.outbox.len() >= OUTBOX_MAX {
            self.outbox.remove(0);
        }
        self.outbox.push(callout);
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
            match self.calls.remove(&token) {
                Some((Call::Feed | Call::Snapshot, _)) => self.feed.reading = false,
                Some((Call::Purge(_), _)) => self.sending_purge = false,
                _ => {}
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
            c.queue(callout(n as u8));
        }
        assert_eq!(c.outbox.len(), OUTBOX_MAX);
        assert_eq!(c.outbox[0], callout(1));
    }

    #[test]
    fn lost_calls_are_forgotten_and_a_lost_feed_read_unblocks_the_feed() {
        let mut c = L2Calls::default();
        c.sent(1, Call::Feed, 10);
        c.feed.reading = true;
        c.sent(2, Call::Write, 100);
        c.sent(3, Call::Purge(7), 20);
        c.sending_purge = true;
        c.forget_older_than(50);
        assert!(!c.feed.reading && !c.sending_purge);
        assert!(c.take(1).is_none() && c.take(2).is_some());
    }
}
