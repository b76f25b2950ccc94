//! A batch answered here: its entities' entries assembled in the gateway's order, with the
//! `cache-control` the shortest-lived of them allows (`private` when a private type is in it).

use super::*;

/// The entity JSON of every entry found, per field and distinct representation (`null` where
/// none was found or one does not decode).
pub(super) fn entries<'a>(decoded: &'a [Vec<Option<Entry<'a>>>]) -> Vec<Vec<&'a str>> {
    decoded
        .iter()
        .map(|f| {
            f.iter()
                .map(|e| {
                    e.as_ref()
                        .and_then(|e| std::str::from_utf8(e.body).ok())
                        .unwrap_or("null")
                })
                .collect()
        })
        .collect()
}

pub(super) fn decode_found(x: &EntityExchange) -> Vec<Vec<Option<Entry<'_>>>> {
    x.slots
        .iter()
        .map(|f| {
            f.iter()
                .map(|s| s.found.as_deref().and_then(|b| Entry::decode(b).ok()))
                .collect()
        })
        .collect()
}

/// The smallest remaining lifetime among the entries, in seconds.
pub(super) fn remaining_s(decoded: &[Vec<Option<Entry<'_>>>], now_ms: u64) -> Option<u64> {
    decoded
        .iter()
        .flatten()
        .flatten()
        .map(|e| e.expires_at_ms.saturating_sub(now_ms) / 1000)
        .min()
}

/// Answers from the entries found: `HIT`, or `STALE` when one of them is past its lifetime (the
/// label it gave).
pub(super) fn answer_from_entries(
    cx: &mut Ctx<'_, impl RequestHost>,
    x: &EntityExchange,
    now_ms: u64,
) -> CacheStatus {
    let decoded = decode_found(x);
    let body = assemble(&x.req, &entries(&decoded), None);
    let max_age = remaining_s(&decoded, now_ms).unwrap_or(0);
    let hits = decoded.iter().flatten().flatten().count();
    cx.host().count_n(Counter::EntitiesServed, hits as u64);
    let label = match x.slots.iter().flatten().any(|s| s.stale) {
        true => {
            cx.host().count(Counter::StaleServed);
            CacheStatus::Stale
        }
        false => CacheStatus::Hit,
    };
    respond(cx, x, &body, (max_age, label), (hits, 0));
    label
}

pub(super) fn respond(
    cx: &mut Ctx<'_, impl RequestHost>,
    x: &EntityExchange,
    body: &[u8],
    (max_age, label): (u64, CacheStatus),
    (hits, fetched): (usize, usize),
) {
    let entities = listener_settings(cx.config());
    let private = x.slots.iter().flatten().any(|s| s.key.is_some())
        && x.req.fields.iter().any(|f| {
            f.distinct
                .iter()
                .any(|r| entities.scope_in(&r.typename, &f.selection) == Scope::Private)
        });
    let cache_control = match private {
        true => format!("private, max-age={max_age}"),
        false => format!("max-age={max_age}"),
    };
    let counts = format!("hit={hits} fetched={fetched}");
    let mut headers = vec![
        ("content-type", "application/json"),
        ("cache-control", cache_control.as_str()),
        ("age", "0"),
        (CACHE_HEADER, label.as_str()),
    ];
    if cx.config().debug_headers {
        headers.push((ENTITIES_HEADER, counts.as_str()));
    }
    cx.host().respond(200, headers, body);
}
