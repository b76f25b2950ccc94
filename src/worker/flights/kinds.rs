//! What a fetch of more than one answer adds to a flight: entity mode's batches (stored entity
//! by entity, holding the flights of the entities they fetch) and what an answer may prefetch.
//! The flights wing names none of it; the root hands in the entities wing's [`Kinds`]
//! (`entities::plug`), so the generic path stays the same with entity mode off.

use crate::cache::storable::Answer;
use crate::coalesce::relay::Response;
use crate::coalesce::upstream::SharedFetch;
use crate::effects::host::RootHost;
use crate::entities::batch::EntityBatch;
use crate::entities::prefetch::Trigger;
use crate::request::key::CacheKey;
use crate::worker::ctx::Ctx;
use crate::worker::serving::store::Stored;
use std::rc::Rc;

pub trait Kinds {
    /// Stores the entities of `answer`, fetched for `batch`, now, or holds it to split once its
    /// waiters are answered (then `true`: call [`Kinds::split_later`] after answering them).
    fn store_batch(
        &self,
        cx: &mut Ctx<'_, impl RootHost>,
        batch: &Rc<EntityBatch>,
        answer: &Answer<'_>,
    ) -> (Stored, bool);

    /// Splits the held answers once Envoy has written the answers just made.
    fn split_later(&self, cx: &mut Ctx<'_, impl RootHost>);

    /// What an answer relayed on a route that prefetches may start.
    fn after_answer(&self, cx: &mut Ctx<'_, impl RootHost>, trigger: &Trigger, body: &[u8]);

    /// Ends the flights of the single entities `fetch` held (nothing for a whole answer).
    fn release_held(&self, cx: &mut Ctx<'_, impl RootHost>, fetch: &SharedFetch);

    /// Request `context` waited for a fetch holding `key`, not for an answer of its own.
    fn is_waiting_on_entities(&self, cx: &mut Ctx<'_, impl RootHost>, context: u32) -> bool;

    /// Answers request `context`, which waited for a fetch holding `key` (`woken`: its entry).
    fn answer_waiting(
        &self,
        cx: &mut Ctx<'_, impl RootHost>,
        key: &CacheKey,
        context: u32,
        woken: Option<&[u8]>,
    );

    /// What `batch`'s waiters are answered with instead of the fetch's error, if every entity
    /// it asks for has an entry within its `stale-if-error` window.
    fn instead_of_error(
        &self,
        cx: &mut Ctx<'_, impl RootHost>,
        batch: &EntityBatch,
    ) -> Option<Response>;

    /// Counts the entities served to one of `batch`'s waiters.
    fn count_served(&self, cx: &mut Ctx<'_, impl RootHost>, batch: &EntityBatch);
}
