//! Answers of root-fetched `_entities` batches, held until their entities are split into entries:
//! the root answers the waiting requests first and splits a moment later (its timer), so a
//! batch's client does not wait for 20 entries to be encoded, tagged and stored (Envoy writes an
//! answer to its socket only in a later turn of its event loop). Bounded in count and in bytes.

use crate::entities::batch::EntityBatch;
use crate::fast_hash::FastMap;
use crate::request::key::CacheKey;
use std::collections::VecDeque;
use std::rc::Rc;

/// At most this many answers wait to be split on one worker; beyond it the root splits at once.
pub const MAX_DEFERRED_SPLITS: usize = 64;
/// At most this many bytes of answers (bodies and headers) wait on one worker.
pub const MAX_DEFERRED_BYTES: usize = 4 << 20;

/// One answer to split: the batch it was fetched for, and the subgraph's answer.
#[derive(Debug)]
pub struct DeferredSplit {
    pub batch: Rc<EntityBatch>,
    pub status: u16,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

impl DeferredSplit {
    fn keys(&self) -> impl Iterator<Item = &CacheKey> {
        self.batch
            .entities
            .iter()
            .flatten()
            .filter_map(|(k, _)| k.as_ref())
    }

    fn bytes(&self) -> usize {
        let headers: usize = self.headers.iter().map(|(n, v)| n.len() + v.len()).sum();
        self.body.len() + headers
    }
}

#[derive(Debug, Default)]
pub struct DeferredSplits {
    waiting: VecDeque<DeferredSplit>,
    bytes: usize,
    /// The entity keys the held answers will store, each with how many hold it.
    keys: FastMap<CacheKey, u32>,
}

impl DeferredSplits {
    /// Holds `split`, or gives it back when the bound is reached.
    pub fn hold(&mut self, split: DeferredSplit) -> Result<(), Box<DeferredSplit>> {
        let bytes = self.bytes + split.bytes();
        if self.waiting.len() >= MAX_DEFERRED_SPLITS || bytes > MAX_DEFERRED_BYTES {
            return Err(Box::new(split));
        }
        self.bytes = bytes;
        for key in split.keys() {
            *self.keys.entry(*key).or_default() += 1;
        }
        self.waiting.push_back(split);
        Ok(())
    }

    /// Whether a held answer will store any of `keys`.
    pub fn holds_any<'k>(&self, mut keys: impl Iterator<Item = &'k CacheKey>) -> bool {
        !self.keys.is_empty() && keys.any(|k| self.keys.contains_key(k))
    }

    /// The oldest held answer.
    pub fn take_oldest(&mut self) -> Option<DeferredSplit> {
        let split = self.waiting.pop_front()?;
        self.bytes = self.bytes.saturating_sub(split.bytes());
        for key in split.keys() {
            if let Some(n) = self.keys.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    self.keys.remove(key);
                }
            }
        }
        Some(split)
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entities::request::EntitiesRequest;

    fn split(status: u16) -> DeferredSplit {
        DeferredSplit {
            batch: Rc::new(EntityBatch {
                req: EntitiesRequest {
                    query: String::new(),
                    operation_name: None,
                    others: Vec::new(),
                    extensions: None,
                    fields: Vec::new(),
                    other_variables: String::new(),
                },
                entities: Vec::new(),
                sent: Vec::new(),
                born_us: 0,
                private: false,
                also_holds: Vec::new(),
            }),
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    #[test]
    fn held_in_order_and_bounded() {
        let mut d = DeferredSplits::default();
        for i in 0..MAX_DEFERRED_SPLITS {
            assert!(d.hold(split(200 + i as u16)).is_ok());
        }
        let over = d.hold(split(999)).unwrap_err();
        assert_eq!(over.status, 999, "given back, not dropped");
        assert_eq!(d.len(), MAX_DEFERRED_SPLITS);
        assert_eq!(d.take_oldest().map(|s| s.status), Some(200), "oldest first");
        assert!(d.hold(split(1)).is_ok(), "room again");
    }

    #[test]
    fn knows_the_keys_it_will_store_while_it_holds_them() {
        let key = |b| CacheKey { digest: [b; 32] };
        let with = |keys: &[u8]| DeferredSplit {
            batch: Rc::new(EntityBatch {
                entities: vec![keys.iter().map(|b| (Some(key(*b)), 60)).collect()],
                ..(*split(200).batch).clone()
            }),
            ..split(200)
        };
        let mut d = DeferredSplits::default();
        assert!(!d.holds_any([key(1)].iter()));
        d.hold(with(&[1, 2])).unwrap();
        d.hold(with(&[2, 3])).unwrap();
        assert!(d.holds_any([key(9), key(3)].iter()));
        assert!(!d.holds_any([key(9)].iter()));
        d.take_oldest();
        assert!(!d.holds_any([key(1)].iter()), "split");
        assert!(d.holds_any([key(2)].iter()), "still held by the second");
        d.take_oldest();
        assert!(!d.holds_any([key(2), key(3)].iter()));
    }

    #[test]
    fn bounded_in_bytes() {
        let mut d = DeferredSplits::default();
        let big = |status| DeferredSplit {
            body: vec![b'x'; MAX_DEFERRED_BYTES / 2 + 1],
            ..split(status)
        };
        assert!(d.hold(big(1)).is_ok());
        assert!(d.hold(big(2)).is_err(), "past the byte bound");
        assert!(d.hold(split(3)).is_ok(), "a small one still fits");
        assert_eq!(d.take_oldest().map(|s| s.status), Some(1));
        assert!(d.hold(big(4)).is_ok(), "its bytes given back");
    }
}
