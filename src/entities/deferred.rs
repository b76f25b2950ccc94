//! Answers of root-fetched `_entities` batches, held until their entities are split into entries:
//! the root answers the waiting requests first and splits a moment later (its timer), so a
//! batch's client does not wait for 20 entries to be encoded, tagged and stored (Envoy writes an
//! answer to its socket only in a later turn of its event loop). Bounded in count; each answer is
//! at most the entity listener's `max_answer_bytes`.

use crate::entities::batch::EntityBatch;
use std::collections::VecDeque;
use std::rc::Rc;

/// At most this many answers wait to be split on one worker; beyond it the root splits at once.
pub const MAX_DEFERRED_SPLITS: usize = 64;

/// One answer to split: the batch it was fetched for, and the subgraph's answer.
#[derive(Debug)]
pub struct DeferredSplit {
    pub batch: Rc<EntityBatch>,
    pub status: u16,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

#[derive(Debug, Default)]
pub struct DeferredSplits {
    waiting: VecDeque<DeferredSplit>,
}

impl DeferredSplits {
    /// Holds `split`, or gives it back when the bound is reached.
    pub fn hold(&mut self, split: DeferredSplit) -> Result<(), Box<DeferredSplit>> {
        if self.waiting.len() >= MAX_DEFERRED_SPLITS {
            return Err(Box::new(split));
        }
        self.waiting.push_back(split);
        Ok(())
    }

    /// The oldest held answer.
    pub fn take_oldest(&mut self) -> Option<DeferredSplit> {
        self.waiting.pop_front()
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
}
