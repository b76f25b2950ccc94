//! The Envoy's one follower of the fleet's purge log. The purge marks it writes are shared by
//! every worker, so one reader per Envoy is enough: a lease in shared data elects it (any worker,
//! or a main-thread VM), and another takes over where it left off (the cursor is shared too) once
//! the lease runs out. Every worker reads here whether the log has been followed to its end, which
//! an L2 hit needs.

use crate::effects::store::{update, SharedStore, StoreError};

pub const FEED_KEY: &str = "graphql-cache/v1/purge-feed";
const MAGIC: &[u8; 4] = b"GQFD";
const VERSION: u8 = 2;

/// Where this Envoy is in the fleet's purge log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedState {
    /// The worker that follows the log, while `lease_until_ms` is ahead.
    pub owner: u64,
    pub lease_until_ms: u64,
    /// The last log entry applied (or where the snapshot was taken).
    pub cursor: String,
    /// That entry's number in the log's sequence: a reader that finds the next entry numbered
    /// otherwise has missed one (trimmed, deleted, lost in a failover).
    pub n: u64,
    /// Reading the snapshot: where its next page starts. A new Envoy starts here (`"0"`), and so
    /// does any Envoy that found a gap in the log: the snapshot holds the latest purge of every
    /// target that could still be stored, the log only what came after it.
    pub snapshot: Option<String>,
    /// The log's generation the cursor belongs to (`None` before the first read).
    pub generation: Option<String>,
    /// The log was read to its end since the last failure: until then an L2 hit may be an
    /// entry purged by a purge this Envoy has not applied, and is not served.
    pub caught_up: bool,
    /// When reads began failing (0: they are not).
    pub failing_since_ms: u64,
    /// The fail-safe purge of this failure was made.
    pub failsafe_done: bool,
}

impl Default for FeedState {
    fn default() -> Self {
        FeedState {
            owner: 0,
            lease_until_ms: 0,
            cursor: "0".to_string(),
            n: 0,
            snapshot: Some("0".to_string()),
            generation: None,
            caught_up: false,
            failing_since_ms: 0,
            failsafe_done: false,
        }
    }
}

impl FeedState {
    /// Whether an L2 value may be trusted now: the log was followed to its end and someone
    /// still follows it.
    pub fn trusted(&self, now_ms: u64) -> bool {
        self.caught_up && self.lease_until_ms > now_ms
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.owner.to_le_bytes());
        out.extend_from_slice(&self.lease_until_ms.to_le_bytes());
        out.extend_from_slice(&self.failing_since_ms.to_le_bytes());
        out.extend_from_slice(&self.n.to_le_bytes());
        out.push(
            u8::from(self.caught_up)
                | (u8::from(self.failsafe_done) << 1)
                | (u8::from(self.snapshot.is_some()) << 2),
        );
        for text in [
            self.cursor.as_str(),
            self.generation.as_deref().unwrap_or(""),
            self.snapshot.as_deref().unwrap_or(""),
        ] {
            let text = &text.as_bytes()[..text.len().min(255)];
            out.push(text.len() as u8);
            out.extend_from_slice(text);
        }
        out
    }

    /// Anything unreadable is a feed that starts over from the log's beginning.
    fn decode(bytes: Option<&[u8]>) -> FeedState {
        bytes.and_then(Self::try_decode).unwrap_or_default()
    }

    /// The state in `bytes`, `None` when unreadable (public for the fuzz target).
    pub fn try_decode(bytes: &[u8]) -> Option<FeedState> {
        let rest = bytes.strip_prefix(MAGIC)?;
        let (&version, rest) = rest.split_first()?;
        if version != VERSION || rest.len() < 33 {
            return None;
        }
        let u64_at = |at: usize| Some(u64::from_le_bytes(rest.get(at..at + 8)?.try_into().ok()?));
        let flags = rest[32];
        let mut texts = Vec::with_capacity(3);
        let mut tail = &rest[33..];
        for _ in 0..3 {
            let (&len, after) = tail.split_first()?;
            let text = std::str::from_utf8(after.get(..usize::from(len))?).ok()?;
            texts.push(text.to_string());
            tail = &after[usize::from(len)..];
        }
        let snapshot = texts.pop().filter(|_| flags & 4 == 4);
        let generation = texts.pop().filter(|g| !g.is_empty());
        let cursor = texts.pop()?;
        Some(FeedState {
            owner: u64_at(0)?,
            lease_until_ms: u64_at(8)?,
            failing_since_ms: u64_at(16)?,
            n: u64_at(24)?,
            caught_up: flags & 1 == 1,
            failsafe_done: flags & 2 == 2,
            cursor,
            snapshot,
            generation,
        })
    }
}

/// The feed as every worker sees it.
pub fn read(store: &impl SharedStore) -> FeedState {
    FeedState::decode(store.get(FEED_KEY).as_deref())
}

/// Takes or keeps the lease for worker `me` until `now_ms + lease_ms`: the state to read from,
/// or `None` while another worker holds it.
pub fn lead(
    store: &impl SharedStore,
    me: u64,
    now_ms: u64,
    lease_ms: u64,
) -> Result<Option<FeedState>, StoreError> {
    let mut led = None;
    update(store, FEED_KEY, |old| {
        let mut state = FeedState::decode(old);
        if state.owner != me && state.lease_until_ms > now_ms {
            led = None;
            return None;
        }
        state.owner = me;
        state.lease_until_ms = now_ms.saturating_add(lease_ms);
        led = Some(state.clone());
        Some(state.encode())
    })?;
    Ok(led)
}

/// Changes the state, if worker `me` still holds the lease. `Ok(false)` when it lost it.
pub fn record(
    store: &impl SharedStore,
    me: u64,
    change: impl Fn(&mut FeedState),
) -> Result<bool, StoreError> {
    let mut mine = false;
    update(store, FEED_KEY, |old| {
        let mut state = FeedState::decode(old);
        mine = state.owner == me;
        if !mine {
            return None;
        }
        change(&mut state);
        Some(state.encode())
    })?;
    Ok(mine)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::fake::MapStore;

    #[test]
    fn one_worker_leads_until_its_lease_runs_out() {
        let store = MapStore::default();
        assert_eq!(read(&store), FeedState::default());
        let a = lead(&store, 1, 1_000, 3_000).unwrap().unwrap();
        assert_eq!((a.owner, a.cursor.as_str()), (1, "0"));
        assert_eq!(lead(&store, 2, 2_000, 3_000).unwrap(), None, "held by 1");
        assert!(lead(&store, 1, 2_000, 3_000).unwrap().is_some(), "renewed");
        assert!(record(&store, 1, |s| {
            s.cursor = "17-3".into();
            s.generation = Some("abc".into());
            s.caught_up = true;
        })
        .unwrap());
        assert!(read(&store).trusted(4_000));
        assert!(
            !read(&store).trusted(5_000),
            "nobody follows the log any more"
        );
        let b = lead(&store, 2, 5_000, 3_000).unwrap().unwrap();
        assert_eq!(
            (b.cursor.as_str(), b.generation.as_deref()),
            ("17-3", Some("abc"))
        );
        assert!(
            !record(&store, 1, |s| s.caught_up = false).unwrap(),
            "1 lost it"
        );
        assert!(read(&store).caught_up);
    }

    #[test]
    fn the_state_round_trips_and_junk_starts_over() {
        let s = FeedState {
            owner: u64::MAX,
            lease_until_ms: 9,
            cursor: "1764582000456-12".into(),
            n: 1 << 40,
            snapshot: Some("17".into()),
            generation: Some("f00d".into()),
            caught_up: true,
            failing_since_ms: 77,
            failsafe_done: true,
        };
        assert_eq!(FeedState::decode(Some(&s.encode())), s);
        let following = FeedState {
            snapshot: None,
            ..s.clone()
        };
        assert_eq!(FeedState::decode(Some(&following.encode())), following);
        let bytes = s.encode();
        for cut in 0..bytes.len() {
            assert_eq!(FeedState::decode(Some(&bytes[..cut])), FeedState::default());
        }
    }
}
