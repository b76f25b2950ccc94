//! A batch sent upstream as the gateway sent it: its answer copied as it streams back (up to
//! `max_answer_bytes`) and split into entity entries once whole.

use super::*;

/// The request goes upstream as the gateway sent it: its answer holds every position.
pub(super) fn forwarded(mut x: EntityExchange) -> EntityExchange {
    x.sent = x.req.fields.iter().map(|f| f.positions.clone()).collect();
    x.token = None;
    x
}

impl EntityExchange {
    /// The forwarded answer's headers: its copy starts if it is a `200`.
    pub fn on_response_headers(&mut self, headers: Vec<(String, Vec<u8>)>) {
        if status(&headers) == Some(200) {
            self.capture = Some((headers, Vec::new()));
        }
    }

    /// A chunk of the forwarded answer; past `max_answer_bytes` nothing is stored.
    pub fn on_chunk(&mut self, bytes: &[u8], limit: usize) {
        if let Some((_, body)) = &mut self.capture {
            if body.len() + bytes.len() > limit {
                self.capture = None;
            } else {
                body.extend_from_slice(bytes);
            }
        }
    }

    /// The forwarded answer is complete (counted as fetched): its entities are stored. The
    /// answer, if it was a `200` read whole.
    pub fn finish(&mut self, cx: &mut Ctx<'_, impl RequestHost>) -> Option<Vec<u8>> {
        let distinct: usize = self.req.fields.iter().map(|f| f.distinct.len()).sum();
        cx.host().count_n(Counter::EntitiesFetched, distinct as u64);
        let (headers, body) = self.capture.take()?;
        if let Ok(fetched) = Fetched::read(&body, &self.req, &self.sent) {
            store(cx, self, &headers, &fetched);
        }
        Some(body)
    }
}
