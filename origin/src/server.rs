//! HTTP layer: GraphQL on every path except `/_origin/*`, plus the control
//! endpoints and the per-request test-control headers.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{ALLOW, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::Response;
use axum::routing::{any, get, post};
use axum::Router;

use crate::args::{parse_delay, MAX_DELAY_MS};
use crate::guard::{max_nesting, MAX_NESTING};
use crate::schema::{OriginSchema, RequestMeta, OBJECT_BUDGET};

/// Largest accepted POST body.
pub const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

pub const HDR_DELAY: &str = "x-origin-delay-ms";
pub const HDR_STATUS: &str = "x-origin-status";
pub const HDR_HEADER: &str = "x-origin-header";

pub struct AppState {
    pub schema: OriginSchema,
    /// Requests that reached a GraphQL path (counted on arrival).
    pub requests: AtomicU64,
    pub default_delay: Duration,
    pub verbose: bool,
    /// Body of the most recent GraphQL request (empty for GET).
    pub last_body: Mutex<Bytes>,
    /// Finite capacity: at most this many requests are delayed and executed at once.
    pub capacity: Option<tokio::sync::Semaphore>,
}

impl AppState {
    pub fn new(
        schema: OriginSchema,
        default_delay_ms: u64,
        max_inflight: usize,
        verbose: bool,
    ) -> Self {
        AppState {
            schema,
            requests: AtomicU64::new(0),
            default_delay: Duration::from_millis(default_delay_ms.min(MAX_DELAY_MS)),
            verbose,
            last_body: Mutex::new(Bytes::new()),
            capacity: (max_inflight > 0).then(|| tokio::sync::Semaphore::new(max_inflight)),
        }
    }
}

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/_origin/count", get(count))
        .route("/_origin/reset", post(reset))
        .route("/_origin/health", get(health))
        .route("/_origin/last-body", get(last_body))
        .route("/_origin/", any(control_not_found))
        .route("/_origin/{*rest}", any(control_not_found))
        .fallback(graphql)
        .with_state(state)
}

fn json_response(status: StatusCode, body: impl Into<Body>) -> Response {
    let mut resp = Response::new(body.into());
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// `{"errors":[{"message":...}]}` with the given status.
fn error_response(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "errors": [{ "message": message }] }).to_string();
    json_response(status, body)
}

fn count_body(n: u64) -> String {
    format!("{{\"requests\":{n}}}")
}

async fn count(State(state): State<Arc<AppState>>) -> Response {
    json_response(
        StatusCode::OK,
        count_body(state.requests.load(Ordering::SeqCst)),
    )
}

async fn reset(State(state): State<Arc<AppState>>) -> Response {
    state.requests.store(0, Ordering::SeqCst);
    *state.last_body.lock().unwrap_or_else(|e| e.into_inner()) = Bytes::new();
    json_response(StatusCode::OK, count_body(0))
}

async fn last_body(State(state): State<Arc<AppState>>) -> Response {
    let body = state
        .last_body
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut resp = Response::new(Body::from(body));
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    resp
}

async fn health() -> Response {
    let mut resp = Response::new(Body::from("ok"));
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

async fn control_not_found() -> Response {
    error_response(StatusCode::NOT_FOUND, "unknown control endpoint")
}

/// Test controls read from the request headers.
#[derive(Debug)]
struct Controls {
    delay: Duration,
    status: Option<StatusCode>,
    extra_headers: Vec<(HeaderName, HeaderValue)>,
}

fn parse_controls(headers: &HeaderMap, default_delay: Duration) -> Result<Controls, String> {
    let delay = match headers.get(HDR_DELAY) {
        None => default_delay,
        Some(v) => {
            let s = v
                .to_str()
                .map_err(|_| format!("invalid {HDR_DELAY} header"))?;
            Duration::from_millis(parse_delay(s, HDR_DELAY)?)
        }
    };
    let status = match headers.get(HDR_STATUS) {
        None => None,
        Some(v) => Some(parse_status(v.as_bytes())?),
    };
    let extra_headers = headers
        .get_all(HDR_HEADER)
        .iter()
        .map(|v| parse_extra_header(v.as_bytes()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Controls {
        delay,
        status,
        extra_headers,
    })
}

/// Parses `x-origin-status`: a status code in 200..=999.
fn parse_status(raw: &[u8]) -> Result<StatusCode, String> {
    let bad = || format!("invalid {HDR_STATUS} header (expected a status code 200..=999)");
    let s = std::str::from_utf8(raw).map_err(|_| bad())?.trim();
    let n: u16 = s.parse().map_err(|_| bad())?;
    if n < 200 {
        return Err(bad());
    }
    StatusCode::from_u16(n).map_err(|_| bad())
}

/// Parses `x-origin-header: Name: value`.
fn parse_extra_header(raw: &[u8]) -> Result<(HeaderName, HeaderValue), String> {
    let bad = || format!("invalid {HDR_HEADER} header (expected `Name: value`)");
    let colon = raw.iter().position(|&b| b == b':').ok_or_else(bad)?;
    let name = raw[..colon].trim_ascii();
    let value = raw[colon + 1..].trim_ascii();
    let name = HeaderName::from_bytes(name).map_err(|_| bad())?;
    let value = HeaderValue::from_bytes(value).map_err(|_| bad())?;
    Ok((name, value))
}

/// Builds a GraphQL request from a GET query string (`query`,
/// `operationName`, `variables`, `extensions`).
///
/// async-graphql's own `parse_query_string` (7.2.1) only understands
/// `operation_name`, so this is done here; `operation_name` is accepted too.
fn parse_get_request(query_string: Option<&str>) -> Result<async_graphql::BatchRequest, String> {
    let mut query = None;
    let mut operation_name = None;
    let mut variables = None;
    let mut extensions = None;
    for (k, v) in form_urlencoded::parse(query_string.unwrap_or("").as_bytes()) {
        let slot = match &*k {
            "query" => &mut query,
            "operationName" | "operation_name" => &mut operation_name,
            "variables" => &mut variables,
            "extensions" => &mut extensions,
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(v.into_owned());
        }
    }
    let query = query.ok_or("missing `query` parameter")?;
    let mut obj = serde_json::Map::new();
    obj.insert("query".into(), serde_json::Value::String(query));
    if let Some(op) = operation_name.filter(|s| !s.is_empty()) {
        obj.insert("operationName".into(), serde_json::Value::String(op));
    }
    for (key, raw) in [("variables", variables), ("extensions", extensions)] {
        let Some(raw) = raw.filter(|s| !s.trim().is_empty()) else {
            continue;
        };
        let value: serde_json::Value =
            serde_json::from_str(&raw).map_err(|e| format!("invalid `{key}` parameter: {e}"))?;
        if !value.is_null() {
            obj.insert(key.into(), value);
        }
    }
    serde_json::from_value::<async_graphql::Request>(serde_json::Value::Object(obj))
        .map(async_graphql::BatchRequest::Single)
        .map_err(|e| format!("invalid GraphQL request: {e}"))
}

/// Whether the request's content type is `application/graphql` (the body is
/// then the bare query document).
fn is_graphql_content_type(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/graphql"))
}

/// Parses a POST body: JSON (a single request object or a non-empty batch
/// array, whatever the content type says), or with `application/graphql` the
/// bare query document.
fn parse_post_body(body: &[u8], raw_graphql: bool) -> Result<async_graphql::BatchRequest, String> {
    if raw_graphql {
        let query =
            std::str::from_utf8(body).map_err(|_| "request body is not UTF-8".to_string())?;
        return Ok(async_graphql::BatchRequest::Single(
            async_graphql::Request::new(query),
        ));
    }
    serde_json::from_slice::<async_graphql::BatchRequest>(body)
        .map_err(|e| format!("invalid GraphQL request body: {e}"))
}

fn query_too_deep(query: &str) -> bool {
    max_nesting(query, MAX_NESTING) > MAX_NESTING
}

fn is_length_limit(err: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if e.to_string().contains("length limit exceeded") {
            return true;
        }
        source = e.source();
    }
    false
}

/// Fallback handler: every path not under `/_origin/` is GraphQL.
async fn graphql(State(state): State<Arc<AppState>>, req: Request) -> Response {
    // Count on arrival, before anything can fail or wait.
    let seq = state.requests.fetch_add(1, Ordering::SeqCst) + 1;
    let started = state.verbose.then(Instant::now);
    let log_head = state
        .verbose
        .then(|| format!("{} {}", req.method(), req.uri()));

    let (mut resp, extra_headers) = handle_graphql(&state, seq, req).await;
    for (name, value) in extra_headers {
        if name == CONTENT_TYPE {
            resp.headers_mut().insert(name, value);
        } else {
            resp.headers_mut().append(name, value);
        }
    }

    if let (Some(started), Some(head)) = (started, log_head) {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(
            err,
            "#{seq} {head} -> {} in {:.1}ms",
            resp.status().as_u16(),
            started.elapsed().as_secs_f64() * 1000.0
        );
    }
    resp
}

async fn handle_graphql(
    state: &AppState,
    seq: u64,
    req: Request,
) -> (Response, Vec<(HeaderName, HeaderValue)>) {
    let (parts, body) = req.into_parts();

    let controls = match parse_controls(&parts.headers, state.default_delay) {
        Ok(c) => c,
        Err(msg) => return (error_response(StatusCode::BAD_REQUEST, &msg), Vec::new()),
    };
    let extra = controls.extra_headers;

    // Read the whole body first, whatever the method (so a forced status
    // never leaves it unread, and /_origin/last-body shows what was sent).
    let body_bytes: Result<Bytes, Response> = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|e| {
            if is_length_limit(&e) {
                error_response(StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
            } else {
                error_response(StatusCode::BAD_REQUEST, "failed to read request body")
            }
        });
    {
        let recorded = body_bytes.as_ref().map(Bytes::clone).unwrap_or_default();
        *state.last_body.lock().unwrap_or_else(|e| e.into_inner()) = recorded;
    }

    let _permit = match &state.capacity {
        Some(capacity) => capacity.acquire().await.ok(),
        None => None,
    };
    if !controls.delay.is_zero() {
        tokio::time::sleep(controls.delay).await;
    }

    if let Some(status) = controls.status {
        let msg = format!("forced status {}", status.as_u16());
        return (error_response(status, &msg), extra);
    }

    let bytes = match body_bytes {
        Ok(b) => b,
        Err(resp) => return (resp, extra),
    };
    let m = &parts.method;
    let batch = if m == Method::POST {
        parse_post_body(&bytes, is_graphql_content_type(&parts.headers))
    } else if m == Method::GET || m == Method::HEAD {
        parse_get_request(parts.uri.query())
    } else {
        let mut resp = error_response(
            StatusCode::METHOD_NOT_ALLOWED,
            "GraphQL requests must use GET or POST",
        );
        resp.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, POST"));
        return (resp, extra);
    };
    let batch = match batch {
        Ok(b) => b,
        Err(msg) => return (error_response(StatusCode::BAD_REQUEST, &msg), extra),
    };
    let too_deep = match &batch {
        async_graphql::BatchRequest::Single(r) => query_too_deep(&r.query),
        async_graphql::BatchRequest::Batch(v) => v.iter().any(|r| query_too_deep(&r.query)),
    };
    if too_deep {
        let msg = format!("query nesting deeper than {MAX_NESTING} levels");
        return (error_response(StatusCode::BAD_REQUEST, &msg), extra);
    }

    let meta = RequestMeta::new(parts.headers, seq);
    let budget = meta.clone();
    let response = state.schema.execute_batch(batch.data(meta)).await;
    if budget.over_object_budget() {
        // Replace what may be tens of thousands of per-field errors.
        let msg = format!("response too large: more than {OBJECT_BUDGET} objects");
        let body = serde_json::json!({ "data": null, "errors": [{ "message": msg }] });
        return (json_response(StatusCode::OK, body.to_string()), extra);
    }
    let resp = match serde_json::to_vec(&response) {
        Ok(body) => json_response(StatusCode::OK, body),
        Err(_) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "failed to serialize response",
        ),
    };
    (resp, extra)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn extra_header_parsing() {
        let (n, v) = parse_extra_header(b"Set-Cookie: a=b; Path=/").unwrap();
        assert_eq!(n.as_str(), "set-cookie");
        assert_eq!(v.as_bytes(), b"a=b; Path=/");
        let (n, v) = parse_extra_header(b"cache-control:max-age=1").unwrap();
        assert_eq!(n.as_str(), "cache-control");
        assert_eq!(v.as_bytes(), b"max-age=1");
        assert!(parse_extra_header(b"no colon").is_err());
        assert!(parse_extra_header(b": empty name").is_err());
        assert!(parse_extra_header(b"bad name: x").is_err());
    }

    #[test]
    fn status_parsing() {
        assert_eq!(
            parse_status(b"503").unwrap(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(parse_status(b" 200 ").unwrap(), StatusCode::OK);
        assert!(parse_status(b"101").is_err());
        assert!(parse_status(b"1000").is_err());
        assert!(parse_status(b"abc").is_err());
    }

    #[test]
    fn get_request_parsing() {
        let r = parse_get_request(Some(
            "query=query+Q(%24id%3AID!)%7Buser(id%3A%24id)%7Bname%7D%7D&operationName=Q&variables=%7B%22id%22%3A%221%22%7D",
        ))
        .unwrap()
        .into_single()
        .unwrap();
        assert_eq!(r.query, "query Q($id:ID!){user(id:$id){name}}");
        assert_eq!(r.operation_name.as_deref(), Some("Q"));
        assert!(parse_get_request(None).is_err());
        assert!(parse_get_request(Some("query={a}&variables=nope")).is_err());
        assert!(parse_get_request(Some("query={a}&variables=")).is_ok());
    }
}
