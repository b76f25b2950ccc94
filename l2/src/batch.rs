//! Entity mode's batch verbs (`POST /v1/mget`, `PUT /v1/mstore`; bodies: `l2_proto::batch`):
//! all the entities one request did not find in its Envoy, read or written in one call and one
//! Redis round trip (per Cluster master). No leases: entities are not coalesced through the L2.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use l2_proto::batch::{
    decode_mget, decode_mstore, encode_mget_answer, hex, MAX_MGET_REQUEST_BYTES, MAX_MSTORE_BYTES,
};
use l2_proto::content_type;

use crate::app::{bad, body_within, failed, inflight_permit, App};
use crate::metrics::{BatchKey, Outcome};

/// The values of the keys of the body, in its order (absent where there is none).
pub async fn mget(State(app): State<Arc<App>>, req: Request) -> Response {
    let body = match body_within(
        &app,
        req,
        MAX_MGET_REQUEST_BYTES,
        "mget body",
        Outcome::MgetTooLarge,
        Outcome::MgetBadRequest,
    )
    .await
    {
        Ok(b) => b,
        Err(r) => return r,
    };
    let keys = match decode_mget(&body) {
        Ok(k) => k,
        Err(e) => return bad(&app, Outcome::MgetBadRequest, format!("mget body: {e}")),
    };
    let hexes: Vec<String> = keys.iter().map(hex).collect();
    let values = match app.backend.mget(&hexes).await {
        Ok(v) => v,
        Err(f) => return failed(&app, Outcome::MgetError, &f),
    };
    let hits = values.iter().filter(|v| v.is_some()).count();
    app.metrics.batch_keys(BatchKey::Hit, hits);
    app.metrics
        .batch_keys(BatchKey::Absent, values.len() - hits);
    let refs: Vec<Option<&[u8]>> = values.iter().map(Option::as_deref).collect();
    let Some(answer) = encode_mget_answer(&refs) else {
        return failed(
            &app,
            Outcome::MgetError,
            &crate::backend::Fail::Reply("MGET"),
        );
    };
    app.metrics.count(Outcome::MgetAnswered);
    let mut r = (StatusCode::OK, answer).into_response();
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type::BYTES));
    r
}

/// Stores the items of the body; an item over `--max-value-bytes` is left out (counted), the
/// others stored. `204`.
pub async fn mstore(State(app): State<Arc<App>>, req: Request) -> Response {
    // Bodies are held whole until Redis has them: bound the memory all of them take at once.
    let _bytes = match inflight_permit(&app, &req, MAX_MSTORE_BYTES) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let body = match body_within(
        &app,
        req,
        MAX_MSTORE_BYTES,
        "mstore body",
        Outcome::MstoreTooLarge,
        Outcome::MstoreBadRequest,
    )
    .await
    {
        Ok(b) => b,
        Err(r) => return r,
    };
    let items = match decode_mstore(&body) {
        Ok(i) => i,
        Err(e) => return bad(&app, Outcome::MstoreBadRequest, format!("mstore body: {e}")),
    };
    let (kept, over): (Vec<_>, Vec<_>) = items
        .into_iter()
        .partition(|i| i.value.len() <= app.max_value_bytes);
    app.metrics.batch_keys(BatchKey::TooLarge, over.len());
    let kept: Vec<(String, u64, &[u8])> = kept
        .iter()
        .map(|i| (hex(&i.key), i.ttl_ms, i.value))
        .collect();
    if !kept.is_empty() {
        if let Err(f) = app.backend.mstore(&kept).await {
            return failed(&app, Outcome::MstoreError, &f);
        }
    }
    app.metrics.batch_keys(BatchKey::Stored, kept.len());
    app.metrics.count(Outcome::MstoreStored);
    StatusCode::NO_CONTENT.into_response()
}
