//! Purge API requests that wait (`?wait_ms=`) until the fleet's log holds their purge: each
//! knows its place in the outbox (`fleet::outbox`), and is answered once no record at or before
//! that place is owed any more, or when its wait is over.

/// A purge API request waiting for the fleet's log to hold its purge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldPurge {
    pub context: u32,
    /// Its place in the outbox (`fleet::outbox::Pushed::place`).
    pub place: u64,
    pub purged: usize,
    pub deadline_ms: u64,
}

/// The purge API requests a worker holds, at most [`MAX_HELD_PURGES`].
#[derive(Debug, Clone, Default)]
pub struct HeldPurges(Vec<HeldPurge>);

/// Purge requests one worker holds at most; past it they are answered `202` at once.
pub const MAX_HELD_PURGES: usize = 1024;

impl HeldPurges {
    /// `false` when full.
    pub fn hold(&mut self, held: HeldPurge) -> bool {
        let room = self.0.len() < MAX_HELD_PURGES;
        if room {
            self.0.push(held);
        }
        room
    }

    /// The client left.
    pub fn forget(&mut self, context: u32) {
        self.0.retain(|h| h.context != context);
    }

    /// Those whose purge the log holds (before place `owed_from`), or whose wait is over.
    pub fn take_due(&mut self, owed_from: u64, now_ms: u64) -> Vec<(HeldPurge, bool)> {
        let mut due = Vec::new();
        self.0.retain(|h| {
            let committed = h.place < owed_from;
            if committed || now_ms >= h.deadline_ms {
                due.push((*h, committed));
                return false;
            }
            true
        });
        due
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
