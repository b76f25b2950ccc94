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

use crate::api::{bad, body_budget, failed, read_body, text, App, BodyError};
use crate::metrics::{BatchKey, Outcome, Shed};

/// The values of the keys of the body, in its order (absent where there is none).
pub async fn mget(State(app): State<Arc<App>>, req: Request) -> Response {
    let body = match read_body(req, MAX_MGET_REQUEST_BYTES).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            app.metrics.count(Outcome::MgetTooLarge);
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("mget body larger than {MAX_MGET_REQUEST_BYTES} bytes"),
            );
        }
        Err(BodyError::Read(e)) => {
            return bad(&app, Outcome::MgetBadRequest, format!("reading body: {e}"))
        }
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
    let budget = body_budget(&req, MAX_MSTORE_BYTES);
    let Ok(_bytes) = app
        .inflight_bytes
        .try_acquire_many(u32::try_from(budget).unwrap_or(u32::MAX))
    else {
        app.metrics.shed(Shed::StoreBytes);
        return text(
            StatusCode::TOO_MANY_REQUESTS,
            "too many store bytes in flight (--max-inflight-bytes)",
        );
    };
    let body = match read_body(req, MAX_MSTORE_BYTES).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            app.metrics.count(Outcome::MstoreTooLarge);
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("mstore body larger than {MAX_MSTORE_BYTES} bytes"),
            );
        }
        Err(BodyError::Read(e)) => {
            return bad(
                &app,
                Outcome::MstoreBadRequest,
                format!("reading body: {e}"),
            )
        }
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
