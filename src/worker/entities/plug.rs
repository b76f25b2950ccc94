//! The entities wing as the flights wing sees it (`flights::kinds`): handed in by the root.

use crate::cache::storable::Answer;
use crate::coalesce::relay::Response;
use crate::coalesce::upstream::SharedFetch;
use crate::effects::host::RootHost;
use crate::entities::batch::EntityBatch;
use crate::entities::prefetch::Trigger;
use crate::request::key::CacheKey;
use crate::worker::ctx::Ctx;
use crate::worker::entities::{fetch, prefetch};
use crate::worker::flights::kinds::Kinds;
use crate::worker::serving::store::Stored;
use std::rc::Rc;

/// Entity mode's part of every flight.
pub struct Entities;

impl Kinds for Entities {
    fn store_batch(
        &self,
        cx: &mut Ctx<'_, impl RootHost>,
        batch: &Rc<EntityBatch>,
        answer: &Answer<'_>,
    ) -> (Stored, bool) {
        fetch::store_or_defer(cx, batch, answer)
    }

    fn split_later(&self, cx: &mut Ctx<'_, impl RootHost>) {
        fetch::split_later(cx);
    }

    fn after_answer(&self, cx: &mut Ctx<'_, impl RootHost>, trigger: &Trigger, body: &[u8]) {
        prefetch::after_answer(cx, trigger, body);
    }

    fn release_held(&self, cx: &mut Ctx<'_, impl RootHost>, fetch: &SharedFetch) {
        fetch::release_held(cx, fetch);
    }

    fn is_waiting_on_entities(&self, cx: &mut Ctx<'_, impl RootHost>, context: u32) -> bool {
        cx.worker(|w| w.prefetch.is_waiting(context))
    }

    fn answer_waiting(
        &self,
        cx: &mut Ctx<'_, impl RootHost>,
        key: &CacheKey,
        context: u32,
        woken: Option<&[u8]>,
    ) {
        fetch::answer_prefetched(cx, key, context, woken);
    }

    fn instead_of_error(
        &self,
        cx: &mut Ctx<'_, impl RootHost>,
        batch: &EntityBatch,
    ) -> Option<Response> {
        fetch::batch_instead_of_error(cx, batch)
    }

    fn count_served(&self, cx: &mut Ctx<'_, impl RootHost>, batch: &EntityBatch) {
        fetch::count_served(cx, Some(batch));
    }
}
