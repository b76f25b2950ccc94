//! An `_entities` batch fetched from the root context on behalf of requests (a request's own
//! callout dies with it): the identical all-miss batches that coalesce into one fetch, and the
//! background refresh of stale entities. What the root needs to split the answer into entity
//! entries, and to answer from entries within their stale-if-error window when it fails.

use crate::entities::request::EntitiesRequest;
use crate::fast_hash::FastMap;
use crate::request::key::CacheKey;
use std::rc::Rc;

/// A batch the root fetches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntityBatch {
    pub req: EntitiesRequest,
    /// Per field, per distinct representation: its key (`None`: never stored) and its TTL.
    pub entities: Vec<Vec<(Option<CacheKey>, u64)>>,
    /// Per field, what the fetch asks, in the order its answer holds them: every position (the
    /// gateway's own body), or distinct representations (a body rewritten for them).
    pub sent: Vec<Vec<usize>>,
    /// When it was asked for (see `Entry::born_us`).
    pub born_us: u64,
    /// A private type is in it: an answer assembled from entries says so.
    pub private: bool,
    /// The refresh flights (entity keys) the fetch holds beside its own key, ended with it.
    pub also_holds: Vec<CacheKey>,
}

/// The batches this worker's requests wait on, by flight key: if the fetch fails, each waiter
/// may still be answered from entries within their stale-if-error window. Bounded: a batch is
/// dropped when its flight ends here, once older than the wait it was for, or not kept when too
/// many are held.
#[derive(Debug, Default)]
pub struct WaitedBatches {
    batches: FastMap<CacheKey, (Rc<EntityBatch>, u64)>,
}

/// More batches than this waited on at once by one worker: new ones are not remembered (their
/// waiters then get the failure as whole answers do, without stale entities).
pub const MAX_WAITED_BATCHES: usize = 256;

impl WaitedBatches {
    /// Remembers `batch` for `key` at `now_ms`, forgetting those older than `keep_ms`.
    pub fn remember(&mut self, key: CacheKey, batch: Rc<EntityBatch>, now_ms: u64, keep_ms: u64) {
        self.batches
            .retain(|_, (_, since)| now_ms.saturating_sub(*since) < keep_ms);
        if self.batches.len() < MAX_WAITED_BATCHES || self.batches.contains_key(&key) {
            self.batches.insert(key, (batch, now_ms));
        }
    }

    /// The batch waited on for `key`, forgotten.
    pub fn take(&mut self, key: &CacheKey) -> Option<Rc<EntityBatch>> {
        self.batches.remove(key).map(|(b, _)| b)
    }

    pub fn len(&self) -> usize {
        self.batches.len()
    }

    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> Rc<EntityBatch> {
        let req = EntitiesRequest::read(
            br#"{"query":"query($r:[_Any!]!){_entities(representations:$r){...on P{n}}}","variables":{"r":[{"__typename":"P","id":"1"}]}}"#,
            crate::request::canonical::Limits {
                max_depth: 50,
                max_fields: 1000,
            },
        )
        .unwrap();
        Rc::new(EntityBatch {
            req,
            entities: vec![vec![(None, 60)]],
            sent: vec![vec![0]],
            born_us: 0,
            private: false,
            also_holds: Vec::new(),
        })
    }

    #[test]
    fn batches_are_taken_once_and_forgotten_when_old() {
        let mut w = WaitedBatches::default();
        let (k1, k2) = (CacheKey { digest: [1; 32] }, CacheKey { digest: [2; 32] });
        w.remember(k1, batch(), 0, 1000);
        assert!(w.take(&k1).is_some());
        assert!(w.take(&k1).is_none());
        w.remember(k1, batch(), 0, 1000);
        w.remember(k2, batch(), 1000, 1000);
        assert_eq!(w.len(), 1, "k1 outlived its wait");
        assert!(w.take(&k2).is_some());
        assert!(w.is_empty());
    }
}
