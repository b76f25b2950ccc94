//! HTTP layer: GraphQL on every path except `/_origin/*`, plus the control
//! endpoints and the per-request test-control headers.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::{ALLOW, CONTENT_TYPE};
use axum::http::{Extensions, HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Version};
use axum::response::Response;
use axum::routing::{any, get, post};
use axum::Router;
use tower_http::compression::CompressionLayer;

use crate::apq::{PersistedQueries, Rejection, APQ_CAPACITY};
use crate::args::{parse_delay, MAX_DELAY_MS};
use crate::conn::Conn;
use crate::fault::{Fault, Plan, DEFAULT_STALL, HDR_FAULT};
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
    /// Automatic Persisted Queries store; `None` when APQ is off.
    pub apq: Option<PersistedQueries>,
}

impl AppState {
    pub fn new(
        schema: OriginSchema,
        default_delay_ms: u64,
        max_inflight: usize,
        verbose: bool,
        apq: bool,
    ) -> Self {
        AppState {
            schema,
            requests: AtomicU64::new(0),
            default_delay: Duration::from_millis(default_delay_ms.min(MAX_DELAY_MS)),
            verbose,
            last_body: Mutex::new(Bytes::new()),
            capacity: (max_inflight > 0).then(|| tokio::sync::Semaphore::new(max_inflight)),
            apq: apq.then(|| PersistedQueries::new(APQ_CAPACITY)),
        }
    }
}

/// The whole service. With `gzip`, GraphQL responses (not the control
/// endpoints) are gzip-compressed when the request's `accept-encoding`
/// accepts gzip, whatever their size, and carry `vary: accept-encoding`.
/// `x-origin-fault` is applied last, to the bytes that go on the wire.
pub fn router(state: Arc<AppState>, gzip: bool) -> Router {
    let graphql_service = Router::new().fallback(graphql).with_state(state.clone());
    let graphql_service = if gzip {
        graphql_service.layer(
            CompressionLayer::new()
                .gzip(true)
                .no_br()
                .no_deflate()
                .no_zstd()
                .compress_when(always_compress),
        )
    } else {
        graphql_service
    };
    let graphql_service =
        graphql_service.layer(axum::middleware::map_response(crate::fault::apply));
    Router::new()
        .route("/_origin/count", get(count))
        .route("/_origin/reset", post(reset))
        .route("/_origin/health", get(health))
        .route("/_origin/last-body", get(last_body))
        .route("/_origin/", any(control_not_found))
        .route("/_origin/{*rest}", any(control_not_found))
        .fallback_service(graphql_service)
        .with_state(state)
}

/// Compression predicate: every response, however small (tower-http's
/// default skips bodies under 32 bytes).
fn always_compress(_: StatusCode, _: Version, _: &HeaderMap, _: &Extensions) -> bool {
    true
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
    /// Before answering.
    delay: Duration,
    status: Option<StatusCode>,
    extra_headers: Vec<(HeaderName, HeaderValue)>,
    fault: Option<Fault>,
    /// How long `stall-after-headers` stalls.
    stall: Duration,
}

fn parse_controls(headers: &HeaderMap, default_delay: Duration) -> Result<Controls, String> {
    let fault = match headers.get(HDR_FAULT) {
        None => None,
        Some(v) => Some(Fault::parse(v.as_bytes())?),
    };
    let delay_header = match headers.get(HDR_DELAY) {
        None => None,
        Some(v) => {
            let s = v
                .to_str()
                .map_err(|_| format!("invalid {HDR_DELAY} header"))?;
            Some(Duration::from_millis(parse_delay(s, HDR_DELAY)?))
        }
    };
    // With `stall-after-headers` the header times the stall, not the answer.
    let (delay, stall) = match (fault, delay_header) {
        (Some(Fault::StallAfterHeaders), d) => (default_delay, d.unwrap_or(DEFAULT_STALL)),
        (_, d) => (d.unwrap_or(default_delay), DEFAULT_STALL),
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
        fault,
        stall,
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
/// With `apq`, `query` may be missing when `extensions` has a
/// `persistedQuery` (a hash-only APQ request; the query is then empty).
fn parse_get_request(
    query_string: Option<&str>,
    apq: bool,
) -> Result<async_graphql::BatchRequest, String> {
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
    let mut obj = serde_json::Map::new();
    if let Some(query) = query {
        obj.insert("query".into(), serde_json::Value::String(query));
    }
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
    let hash_only = apq
        && obj
            .get("extensions")
            .and_then(|e| e.get("persistedQuery"))
            .is_some();
    if !obj.contains_key("query") && !hash_only {
        return Err("missing `query` parameter".to_string());
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
    let plan = controls.fault.map(|fault| Plan {
        fault,
        stall: controls.stall,
        // Raw bytes only make sense on an HTTP/1.x connection of the origin's own listener.
        tap: parts
            .extensions
            .get::<ConnectInfo<Conn>>()
            .filter(|_| parts.version <= Version::HTTP_11)
            .map(|info| info.0.tap.clone()),
    });
    let (mut resp, extra) = answer_graphql(state, seq, parts, body, controls).await;
    if let Some(plan) = plan {
        resp.extensions_mut().insert(plan);
    }
    (resp, extra)
}

async fn answer_graphql(
    state: &AppState,
    seq: u64,
    parts: axum::http::request::Parts,
    body: Body,
    controls: Controls,
) -> (Response, Vec<(HeaderName, HeaderValue)>) {
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
        parse_get_request(parts.uri.query(), state.apq.is_some())
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
    // Persisted queries: each operation either gets its query or is answered
    // with an APQ error in its place.
    let (single, requests) = match batch {
        async_graphql::BatchRequest::Single(r) => (true, vec![r]),
        async_graphql::BatchRequest::Batch(v) => (false, v),
    };
    let mut slots: Vec<Result<async_graphql::Request, &'static str>> =
        Vec::with_capacity(requests.len());
    for mut r in requests {
        let outcome = match &state.apq {
            Some(apq) => apq.resolve(&mut r),
            None => Ok(()),
        };
        match outcome {
            Ok(()) => slots.push(Ok(r)),
            Err(rejection) => match rejection.graphql_error() {
                Some(body) => slots.push(Err(body)),
                None => {
                    let msg = match rejection {
                        Rejection::Invalid(msg) => msg,
                        _ => "invalid persisted query".to_string(),
                    };
                    return (error_response(StatusCode::BAD_REQUEST, &msg), extra);
                }
            },
        }
    }
    if slots
        .iter()
        .any(|s| s.as_ref().is_ok_and(|r| query_too_deep(&r.query)))
    {
        let msg = format!("query nesting deeper than {MAX_NESTING} levels");
        return (error_response(StatusCode::BAD_REQUEST, &msg), extra);
    }

    let mut to_run = Vec::new();
    let mut answers: Vec<Option<&'static str>> = Vec::with_capacity(slots.len());
    for slot in slots {
        match slot {
            Ok(r) => {
                to_run.push(r);
                answers.push(None);
            }
            Err(body) => answers.push(Some(body)),
        }
    }

    let meta = RequestMeta::new(parts.headers, seq);
    let budget = meta.clone();
    let executed = if to_run.is_empty() {
        Vec::new()
    } else {
        let batch = async_graphql::BatchRequest::Batch(to_run);
        match state.schema.execute_batch(batch.data(meta)).await {
            async_graphql::BatchResponse::Single(r) => vec![r],
            async_graphql::BatchResponse::Batch(v) => v,
        }
    };
    if budget.over_object_budget() {
        // Replace what may be tens of thousands of per-field errors.
        let msg = format!("response too large: more than {OBJECT_BUDGET} objects");
        let body = serde_json::json!({ "data": null, "errors": [{ "message": msg }] });
        return (json_response(StatusCode::OK, body.to_string()), extra);
    }
    let resp = match join_answers(single, answers, executed) {
        Ok(body) => json_response(StatusCode::OK, body),
        Err(_) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "failed to serialize response",
        ),
    };
    (resp, extra)
}

/// Serializes the answers in request order: `answers[i]` is a ready JSON
/// body (an APQ error) or `None` for the next of `executed`. A single
/// request gives its object, a batch the array.
fn join_answers(
    single: bool,
    answers: Vec<Option<&'static str>>,
    executed: Vec<async_graphql::Response>,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut executed = executed.into_iter();
    let mut out = Vec::new();
    if !single {
        out.push(b'[');
    }
    for (i, answer) in answers.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match answer {
            Some(body) => out.extend_from_slice(body.as_bytes()),
            None => match executed.next() {
                Some(r) => serde_json::to_writer(&mut out, &r)?,
                None => out.extend_from_slice(b"null"),
            },
        }
    }
    if !single {
        out.push(b']');
    }
    Ok(out)
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
    fn fault_controls_and_the_stall() {
        let default = Duration::from_millis(7);
        let headers = |list: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (n, v) in list {
                h.insert(*n, HeaderValue::from_static(v));
            }
            h
        };
        let c = parse_controls(&headers(&[]), default).unwrap();
        assert_eq!((c.fault, c.delay), (None, default));
        let c = parse_controls(&headers(&[(HDR_DELAY, "20")]), default).unwrap();
        assert_eq!(c.delay, Duration::from_millis(20));
        let c = parse_controls(
            &headers(&[(HDR_FAULT, "truncated"), (HDR_DELAY, "20")]),
            default,
        )
        .unwrap();
        assert_eq!(
            (c.fault, c.delay),
            (Some(Fault::Truncated), Duration::from_millis(20))
        );
        // The stall takes the delay header (5 s without it); the answer is not delayed by it.
        let stall = (HDR_FAULT, "stall-after-headers");
        let c = parse_controls(&headers(&[stall]), default).unwrap();
        assert_eq!((c.delay, c.stall), (default, DEFAULT_STALL));
        let c = parse_controls(&headers(&[stall, (HDR_DELAY, "300")]), default).unwrap();
        assert_eq!((c.delay, c.stall), (default, Duration::from_millis(300)));
        assert!(parse_controls(&headers(&[(HDR_FAULT, "nope")]), default).is_err());
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
        ), true)
        .unwrap()
        .into_single()
        .unwrap();
        assert_eq!(r.query, "query Q($id:ID!){user(id:$id){name}}");
        assert_eq!(r.operation_name.as_deref(), Some("Q"));
        assert!(parse_get_request(None, true).is_err());
        assert!(parse_get_request(Some("query={a}&variables=nope"), true).is_err());
        assert!(parse_get_request(Some("query={a}&variables="), true).is_ok());
        // Hash only: allowed with APQ on, still "missing query" without.
        let hash_only = "extensions=%7B%22persistedQuery%22%3A%7B%22version%22%3A1%2C%22sha256Hash%22%3A%22ab%22%7D%7D";
        let r = parse_get_request(Some(hash_only), true)
            .unwrap()
            .into_single()
            .unwrap();
        assert_eq!(r.query, "");
        assert!(r.extensions.contains_key("persistedQuery"));
        assert!(parse_get_request(Some(hash_only), false).is_err());
        assert!(parse_get_request(Some("extensions=%7B%7D"), true).is_err());
    }

    // ---- Whole-router tests (requests through `router`, no socket). ----

    use std::io::Read;

    use axum::http::header::{ACCEPT_ENCODING, CONTENT_ENCODING, VARY};
    use tower::ServiceExt;

    use crate::apq::sha256_hex;

    const ECHO: &str = r#"{ echo(value: "hi") }"#;
    const ECHO_DATA: &str = r#"{"data":{"echo":"hi"}}"#;

    fn new_app(gzip: bool, apq: bool) -> (Arc<AppState>, Router) {
        let state = Arc::new(AppState::new(
            crate::schema::build_schema(),
            0,
            0,
            false,
            apq,
        ));
        (state.clone(), router(state, gzip))
    }

    struct Answer {
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
    }

    impl Answer {
        fn text(&self) -> &str {
            std::str::from_utf8(&self.body).unwrap()
        }
    }

    async fn send(app: &Router, req: axum::http::Request<Body>) -> Answer {
        let resp = app.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        Answer {
            status,
            headers,
            body,
        }
    }

    fn post_json(
        body: serde_json::Value,
        accept_encoding: Option<&str>,
    ) -> axum::http::Request<Body> {
        let mut b = axum::http::Request::post("/graphql").header(CONTENT_TYPE, "application/json");
        if let Some(ae) = accept_encoding {
            b = b.header(ACCEPT_ENCODING, ae);
        }
        b.body(Body::from(body.to_string())).unwrap()
    }

    fn get_params(params: &[(&str, String)]) -> axum::http::Request<Body> {
        let qs = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(params)
            .finish();
        axum::http::Request::get(format!("/graphql?{qs}"))
            .body(Body::empty())
            .unwrap()
    }

    fn pq_ext(hash: &str) -> serde_json::Value {
        serde_json::json!({ "persistedQuery": { "version": 1, "sha256Hash": hash } })
    }

    async fn count_of(app: &Router) -> u64 {
        let a = send(
            app,
            axum::http::Request::get("/_origin/count")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
        let v: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
        v["requests"].as_u64().unwrap()
    }

    fn gunzip(body: &[u8]) -> String {
        let mut out = String::new();
        flate2::read::GzDecoder::new(body)
            .read_to_string(&mut out)
            .unwrap();
        out
    }

    fn pqnf() -> serde_json::Value {
        serde_json::json!({ "errors": [{
            "message": "PersistedQueryNotFound",
            "extensions": { "code": "PERSISTED_QUERY_NOT_FOUND" }
        }] })
    }

    fn json(a: &Answer) -> serde_json::Value {
        serde_json::from_slice(&a.body).unwrap()
    }

    #[tokio::test]
    async fn gzip_by_accept_encoding_with_flag() {
        let (_, app) = new_app(true, true);
        for ae in ["gzip", "GZip", "gzip, deflate, br", "br;q=1.0, gzip;q=0.5"] {
            let a = send(
                &app,
                post_json(serde_json::json!({ "query": ECHO }), Some(ae)),
            )
            .await;
            assert_eq!(a.status, StatusCode::OK, "{ae}");
            assert_eq!(a.headers[CONTENT_ENCODING], "gzip", "{ae}");
            assert_eq!(a.headers[VARY], "accept-encoding", "{ae}");
            assert_eq!(gunzip(&a.body), ECHO_DATA, "{ae}");
        }
        // GET too (tiny bodies included: no size threshold).
        let mut req = get_params(&[("query", ECHO.to_string())]);
        req.headers_mut()
            .insert(ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
        let a = send(&app, req).await;
        assert_eq!(a.headers[CONTENT_ENCODING], "gzip");
        assert_eq!(gunzip(&a.body), ECHO_DATA);

        // tower-http 0.6 does not read a bare `*` as gzip.
        for ae in [
            Some("identity"),
            None,
            Some("gzip;q=0"),
            Some("br"),
            Some("*"),
        ] {
            let a = send(&app, post_json(serde_json::json!({ "query": ECHO }), ae)).await;
            assert_eq!(a.status, StatusCode::OK, "{ae:?}");
            assert!(a.headers.get(CONTENT_ENCODING).is_none(), "{ae:?}");
            assert_eq!(a.text(), ECHO_DATA, "{ae:?}");
        }
        // The counter still counts GraphQL requests only.
        assert_eq!(count_of(&app).await, 10);
    }

    #[tokio::test]
    async fn faults_without_the_origins_listener() {
        let (_, app) = new_app(false, true);
        let mut req = post_json(serde_json::json!({ "query": ECHO }), None);
        req.headers_mut()
            .insert(HDR_FAULT, HeaderValue::from_static("truncated"));
        let resp = app.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        // Declares the whole answer, carries half of it (hyper then closes the connection).
        assert_eq!(
            resp.headers()["content-length"],
            ECHO_DATA.len().to_string()
        );
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(&body[..], &ECHO_DATA.as_bytes()[..ECHO_DATA.len() / 2]);

        let mut req = post_json(serde_json::json!({ "query": ECHO }), None);
        req.headers_mut()
            .insert(HDR_FAULT, HeaderValue::from_static("reset-mid-body"));
        let resp = app.clone().oneshot(req).await.unwrap();
        assert!(resp.headers().get("content-length").is_none());
        assert!(axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .is_err());

        // Overlong needs the connection's raw path, which a bare router has not.
        let mut req = post_json(serde_json::json!({ "query": ECHO }), None);
        req.headers_mut()
            .insert(HDR_FAULT, HeaderValue::from_static("overlong"));
        let a = send(&app, req).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST);
        assert!(a.text().contains("overlong needs"));
        assert_eq!(count_of(&app).await, 3);
    }

    #[tokio::test]
    async fn no_gzip_without_flag() {
        let (_, app) = new_app(false, true);
        let a = send(
            &app,
            post_json(serde_json::json!({ "query": ECHO }), Some("gzip")),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK);
        assert!(a.headers.get(CONTENT_ENCODING).is_none());
        assert!(a.headers.get(VARY).is_none());
        assert_eq!(a.text(), ECHO_DATA);
    }

    #[tokio::test]
    async fn control_endpoints_not_compressed() {
        let (_, app) = new_app(true, true);
        let mut req = axum::http::Request::get("/_origin/count")
            .body(Body::empty())
            .unwrap();
        req.headers_mut()
            .insert(ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
        let a = send(&app, req).await;
        assert!(a.headers.get(CONTENT_ENCODING).is_none());
        assert_eq!(a.text(), r#"{"requests":0}"#);
    }

    #[tokio::test]
    async fn apq_hash_only_unknown_is_not_found() {
        let (_, app) = new_app(false, true);
        let hash = sha256_hex(ECHO);
        let a = send(
            &app,
            post_json(serde_json::json!({ "extensions": pq_ext(&hash) }), None),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(a.headers[CONTENT_TYPE], "application/json");
        assert_eq!(json(&a), pqnf());

        let a = send(
            &app,
            get_params(&[("extensions", pq_ext(&hash).to_string())]),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(json(&a), pqnf());
        // Both reached the GraphQL handler.
        assert_eq!(count_of(&app).await, 2);
    }

    #[tokio::test]
    async fn apq_register_then_hash_only_get_and_post() {
        let (state, app) = new_app(false, true);
        let q = r#"query Greet($v: String) { echo(value: $v) }"#;
        let hash = sha256_hex(q);
        let vars = serde_json::json!({ "v": "hello" });
        let data = serde_json::json!({ "data": { "echo": "hello" } });

        let a = send(
            &app,
            post_json(
                serde_json::json!({ "query": q, "variables": vars, "extensions": pq_ext(&hash) }),
                None,
            ),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(json(&a), data);

        let a = send(
            &app,
            post_json(
                serde_json::json!({ "variables": vars, "operationName": "Greet", "extensions": pq_ext(&hash) }),
                None,
            ),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(json(&a), data);

        let a = send(
            &app,
            get_params(&[
                ("operationName", "Greet".to_string()),
                ("variables", vars.to_string()),
                ("extensions", pq_ext(&hash).to_string()),
            ]),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(json(&a), data);

        // Registering over GET works too.
        let hash2 = sha256_hex(ECHO);
        let a = send(
            &app,
            get_params(&[
                ("query", ECHO.to_string()),
                ("extensions", pq_ext(&hash2).to_string()),
            ]),
        )
        .await;
        assert_eq!(a.text(), ECHO_DATA);
        let a = send(
            &app,
            get_params(&[("extensions", pq_ext(&hash2).to_string())]),
        )
        .await;
        assert_eq!(a.text(), ECHO_DATA);

        // A batch mixes executed and not-found operations, in order.
        let a = send(
            &app,
            post_json(
                serde_json::json!([
                    { "extensions": pq_ext(&hash2) },
                    { "extensions": pq_ext(&sha256_hex("{ users { id } }")) },
                    { "query": ECHO },
                ]),
                None,
            ),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK);
        let echo: serde_json::Value = serde_json::from_str(ECHO_DATA).unwrap();
        assert_eq!(json(&a), serde_json::json!([echo, pqnf(), echo]));

        assert_eq!(state.apq.as_ref().unwrap().len(), 2);
        assert_eq!(count_of(&app).await, 6);
    }

    #[tokio::test]
    async fn apq_mismatched_hash_is_rejected_and_not_remembered() {
        let (state, app) = new_app(false, true);
        let wrong = sha256_hex("{ users { id } }");
        let mismatch = serde_json::json!({ "errors": [{
            "message": "provided sha does not match query",
            "extensions": { "code": "PERSISTED_QUERY_HASH_MISMATCH" }
        }] });
        let a = send(
            &app,
            post_json(
                serde_json::json!({ "query": ECHO, "extensions": pq_ext(&wrong) }),
                None,
            ),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(json(&a), mismatch);
        let a = send(
            &app,
            get_params(&[
                ("query", ECHO.to_string()),
                ("extensions", pq_ext(&wrong).to_string()),
            ]),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(json(&a), mismatch);

        assert_eq!(state.apq.as_ref().unwrap().len(), 0);
        let a = send(
            &app,
            post_json(serde_json::json!({ "extensions": pq_ext(&wrong) }), None),
        )
        .await;
        assert_eq!(json(&a), pqnf());
    }

    #[tokio::test]
    async fn apq_invalid_extension_and_no_apq() {
        let (_, app) = new_app(false, true);
        let ext = serde_json::json!({ "persistedQuery": { "version": 2, "sha256Hash": "ab" } });
        let a = send(
            &app,
            post_json(
                serde_json::json!({ "query": ECHO, "extensions": ext }),
                None,
            ),
        )
        .await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST);

        // With APQ off the extension is ignored, as by a server without APQ.
        let (_, app) = new_app(false, false);
        let hash = sha256_hex(ECHO);
        let a = send(
            &app,
            post_json(
                serde_json::json!({ "query": ECHO, "extensions": pq_ext("nope") }),
                None,
            ),
        )
        .await;
        assert_eq!(a.text(), ECHO_DATA);
        let a = send(
            &app,
            get_params(&[("extensions", pq_ext(&hash).to_string())]),
        )
        .await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST);
        assert!(a.text().contains("missing `query` parameter"));
    }
}
