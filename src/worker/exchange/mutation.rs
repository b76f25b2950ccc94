//! A mutation on its way upstream: its answer is read for what it changed, and that purged.

use super::*;

impl Exchange {
    pub(super) fn watch_mutation<H: RequestHost>(&mut self, cx: &mut Ctx<'_, H>) {
        if cx.config().mutation_invalidation == MutationInvalidation::Off {
            return;
        }
        let headers = cx.host().response_headers();
        let status = status(&headers).unwrap_or(0);
        let encoded = headers.iter().any(|(n, v)| {
            n == "content-encoding" && !v.trim_ascii().eq_ignore_ascii_case(b"identity")
        });
        if status == 200 && !encoded {
            self.state = State::Mutation(Watched {
                body: Some(Vec::new()),
                status,
                declared: header_tags(&cx.config().mutation_purges.tags_from, &headers),
            });
        }
    }

    /// The operation is parsed again here, not kept from classification: a mutation is never
    /// memoized with its shape, and the work is for mutations only.
    pub(super) fn map_mutation<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        head: &RequestHead,
        body: Option<&[u8]>,
    ) {
        let config = cx.config();
        if config.mutation_invalidation == MutationInvalidation::Off {
            return;
        }
        let resolve = |h: &str| cx.plugin().apq.lookup(cx.host(), h);
        self.mutation_shape = mutation_shape_of(config, head, body, &resolve).map(Box::new);
    }

    pub(super) fn mutation_body<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        size: usize,
        end: bool,
    ) {
        let State::Mutation(Watched {
            body,
            status,
            declared,
        }) = &mut self.state
        else {
            return;
        };
        let Some(buffer) = body else { return };
        // Bounded like a stored entry; a larger answer is not read (and purges nothing).
        if buffer.len().saturating_add(size) > cx.config().max_entry_bytes {
            *body = None;
            return;
        }
        if size > 0 {
            if let Some(chunk) = cx.host().response_body(size) {
                buffer.extend_from_slice(&chunk);
            }
        }
        if !end {
            return;
        }
        let config = cx.config();
        let shape = self.mutation_shape.as_deref();
        if let Some(plan) = mutation_purge::mutation_plan(config, *status, buffer, shape, declared)
        {
            mutation_purge::after_mutation(cx, &plan);
        }
        *body = None;
    }
}

/// A mutation going upstream: its answer is read (up to `max_entry_bytes`) for what it changed,
/// and purged before its last byte reaches the client.
#[derive(Debug)]
pub(super) struct Watched {
    body: Option<Vec<u8>>,
    status: u16,
    /// The tags its configured headers declare.
    declared: Vec<String>,
}
