//! The partial fetch: the entities a batch lacks, asked of the subgraph by this request's own
//! callout (the gateway's request rewritten to them, with the headers a shared fetch carries),
//! merged back into the gateway's order with those found, and stored.

use super::*;

/// Sends the rewritten request for the `missing` representations; its token, or `None` when it
/// cannot be sent (then the gateway's request goes upstream whole).
pub(super) fn dispatch_partial(
    cx: &mut Ctx<'_, impl RequestHost>,
    head: &RequestHead,
    x: &EntityExchange,
    missing: &[Vec<usize>],
) -> Option<u32> {
    let config = cx.config();
    let cluster = fetch_cluster(config, cx.host(), head)?;
    // What it fetches is stored for everyone who may share it: only the headers the shared fetch
    // carries (the key's, the operator's `forward_headers`; the caller's credentials and
    // identity only where a private type is asked for, whose entries are keyed by that identity).
    let scope = if x.private(config) {
        Scope::Private
    } else {
        Scope::Public
    };
    let callout = upstream_request(cluster, head, Some(x.req.rewritten(missing)), config, scope)?;
    cx.host()
        .dispatch_own(&callout, config.fetch_timeout_ms)
        .ok()
}

/// The partial fetch came back: merged and answered (`Ok`), or given up on (`Err`: the caller
/// lets the request go upstream whole, and captures its answer).
pub fn on_partial(
    cx: &mut Ctx<'_, impl RequestHost>,
    mut x: Box<EntityExchange>,
    returned: &Returned,
) -> Result<Option<Vec<u8>>, Box<EntityExchange>> {
    let limit = listener_settings(cx.config()).max_answer_bytes;
    let body = match &returned.headers {
        Some(headers) if returned.status() == Some(200) && returned.body_size <= limit => cx
            .host()
            .own_callout_body(returned.body_size)
            .map(|b| (headers.clone(), b)),
        _ => None,
    };
    match body.and_then(|(headers, body)| merge(cx, &x, &headers, &body)) {
        Some(merged) => Ok(Some(merged)),
        None => match stale::error_entries(cx, &x.where_(|s| s.found.is_none()), returned) {
            Some(stale) => {
                x.fill_stale(stale);
                let now_ms = cx.host().now_ms();
                answer_from_entries(cx, &x, now_ms);
                Ok(None)
            }
            None => Err(Box::new(forwarded(*x))),
        },
    }
}

/// Stores what the partial answer brought and answers the merged batch (which it returns);
/// `None` if the answer cannot be merged.
pub(super) fn merge(
    cx: &mut Ctx<'_, impl RequestHost>,
    x: &EntityExchange,
    headers: &[(String, Vec<u8>)],
    body: &[u8],
) -> Option<Vec<u8>> {
    let fetched = Fetched::read(body, &x.req, &x.sent).ok()?;
    let stored_s = store(cx, x, headers, &fetched);
    let decoded = decode_found(x);
    let mut texts = entries(&decoded);
    for (f, list) in fetched.entities.iter().enumerate() {
        for (i, got) in list.iter().enumerate() {
            let (Some(d), Some(got)) = (x.sent.get(f).and_then(|s| s.get(i)), got) else {
                continue;
            };
            if let Some(slot) = texts.get_mut(f).and_then(|t| t.get_mut(*d)) {
                *slot = got.raw;
            }
        }
    }
    let merged = assemble(&x.req, &texts, Some((&fetched, &x.sent)));
    let now_ms = cx.host().now_ms();
    let max_age = [remaining_s(&decoded, now_ms), stored_s]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(0);
    let hits = decoded.iter().flatten().flatten().count();
    let fetched_count = x.sent.iter().map(Vec::len).sum();
    let host = cx.host();
    host.count_n(Counter::EntitiesServed, hits as u64);
    host.count_n(Counter::EntitiesFetched, fetched_count as u64);
    host.count(Counter::EntityPartials);
    respond(
        cx,
        x,
        &merged,
        (max_age, CacheStatus::Partial),
        (hits, fetched_count),
    );
    Some(merged)
}

/// Stores every entity of `fetched` that may be (see `store::store`).
pub(super) fn store(
    cx: &mut Ctx<'_, impl RequestHost>,
    x: &EntityExchange,
    headers: &[(String, Vec<u8>)],
    fetched: &Fetched<'_>,
) -> Option<u64> {
    let split = Split {
        req: &x.req,
        sent: &x.sent,
        born_us: x.born_us,
    };
    let policy = |f: usize, d: usize| {
        let slot = x.slots.get(f)?.get(d)?;
        Some((slot.key, slot.life.ttl_seconds))
    };
    let stored = store::store(cx, &split, policy, headers, fetched);
    // This request's own callout would die with it: the root sends the L2 write.
    if stored.queued {
        request_dispatch(cx);
    }
    stored.shortest
}
