//! The HTTP API (HTTP/1.1 and h2c prior knowledge on one port). See l2/README.md.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use base64::Engine as _;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::backend::{Backend, Fail, Keys, Lookup};
use crate::metrics::{Metrics, Outcome, PollVerb};
use crate::wake::Wakeups;

pub const MAX_LEASE_MS: u64 = 86_400_000;
pub const MAX_TTL_MS: u64 = 365 * 86_400_000;
pub const MAX_OWNER_BYTES: usize = 256;
pub const MAX_PURGE_BYTES: usize = 64 * 1024;
pub const PURGES_PER_ANSWER: usize = 100;
const PURGES_POLL: Duration = Duration::from_millis(20);
/// A waiting lookup re-checks at least this often while the subscriber is subscribed...
const LOOKUP_SAFETY_NAP: Duration = Duration::from_millis(250);
/// ...and this often while it is not.
const LOOKUP_POLL: Duration = Duration::from_millis(10);
const HEALTH_TIMEOUT: Duration = Duration::from_millis(100);

static X_L2: HeaderName = HeaderName::from_static("x-l2");
static X_L2_TTL: HeaderName = HeaderName::from_static("x-l2-ttl-ms");

pub struct App {
    pub backend: Arc<Backend>,
    pub wake: Arc<Wakeups>,
    pub metrics: Arc<Metrics>,
    pub max_value_bytes: usize,
    pub max_wait: Duration,
}

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/lookup", post(lookup))
        .route("/v1/store", put(store))
        .route("/v1/release", post(release))
        .route("/v1/purge", post(purge))
        .route("/v1/purges", get(purges))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .with_state(app)
}

fn text(status: StatusCode, msg: impl Into<String>) -> Response {
    let mut r = (status, msg.into()).into_response();
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn tagged(tag: &'static str, body: Vec<u8>) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut()
        .insert(X_L2.clone(), HeaderValue::from_static(tag));
    r
}

fn bad(app: &App, o: Outcome, msg: String) -> Response {
    app.metrics.count(o);
    text(StatusCode::BAD_REQUEST, msg)
}

fn unavailable(app: &App, o: Outcome, f: &Fail) -> Response {
    app.metrics.count(o);
    app.metrics.redis_error();
    text(StatusCode::SERVICE_UNAVAILABLE, f.to_string())
}

/// Query parameters, percent-decoded; a parameter given twice is an error.
struct Query(HashMap<String, String>);

impl Query {
    fn parse(uri: &Uri) -> Result<Query, String> {
        let mut map = HashMap::new();
        if let Some(q) = uri.query() {
            for (k, v) in form_urlencoded::parse(q.as_bytes()) {
                let k = k.into_owned();
                if map.contains_key(&k) {
                    return Err(format!("parameter `{k}` given twice"));
                }
                map.insert(k, v.into_owned());
            }
        }
        Ok(Query(map))
    }

    fn required(&self, name: &str) -> Result<&str, String> {
        self.0
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| format!("missing parameter `{name}`"))
    }

    fn key(&self) -> Result<&str, String> {
        let k = self.required("key")?;
        if k.len() == 64
            && k.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            Ok(k)
        } else {
            Err("bad parameter `key`: expected 64 lower-case hex characters".to_string())
        }
    }

    fn owner(&self) -> Result<&str, String> {
        let o = self.required("owner")?;
        if o.is_empty() || o.len() > MAX_OWNER_BYTES {
            return Err(format!(
                "bad parameter `owner`: expected 1..={MAX_OWNER_BYTES} bytes"
            ));
        }
        Ok(o)
    }

    fn number(&self, name: &str, min: u64, max: u64, default: Option<u64>) -> Result<u64, String> {
        let raw = match (self.0.get(name), default) {
            (Some(v), _) => v,
            (None, Some(d)) => return Ok(d),
            (None, None) => return Err(format!("missing parameter `{name}`")),
        };
        match raw.parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(format!(
                "bad parameter `{name}`: expected an integer in {min}..={max}, got `{raw}`"
            )),
        }
    }

    fn wait(&self, cap: Duration) -> Result<Duration, String> {
        let ms = self.number("wait_ms", 0, u64::MAX, Some(0))?;
        Ok(Duration::from_millis(ms).min(cap))
    }
}

fn valid_stream_id(id: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit());
    if id == "$" {
        return true;
    }
    match id.split_once('-') {
        Some((ms, seq)) => digits(ms) && digits(seq),
        None => digits(id),
    }
}

enum BodyError {
    TooLarge,
    Read(String),
}

async fn read_body(req: Request, limit: usize) -> Result<Bytes, BodyError> {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(BodyError::TooLarge);
    }
    let body: Body = req.into_body();
    match Limited::new(body, limit).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(BodyError::TooLarge),
        Err(e) => Err(BodyError::Read(e.to_string())),
    }
}

async fn lookup(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let parsed = Query::parse(&uri).and_then(|q| {
        Ok((
            q.key()?.to_string(),
            q.number("lease_ms", 1, MAX_LEASE_MS, None)?,
            q.owner()?.to_string(),
            q.wait(app.max_wait)?,
        ))
    });
    let (hex, lease_ms, owner, wait) = match parsed {
        Ok(p) => p,
        Err(msg) => return bad(&app, Outcome::LookupBadRequest, msg),
    };
    let keys = Keys::new(&hex);
    let deadline = Instant::now() + wait;
    let mut waiter = (!wait.is_zero()).then(|| app.wake.register(&hex));
    let mut in_flight = None;
    loop {
        if let Some(w) = waiter.as_mut() {
            w.mark();
        }
        match app.backend.lookup(&keys, &owner, lease_ms).await {
            Err(f) => return unavailable(&app, Outcome::LookupError, &f),
            Ok(Lookup::Hit { value, ttl_ms }) => {
                app.metrics.count(Outcome::LookupHit);
                let mut r = tagged("hit", value);
                r.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("application/octet-stream"),
                );
                if ttl_ms >= 0 {
                    r.headers_mut()
                        .insert(X_L2_TTL.clone(), HeaderValue::from(ttl_ms));
                }
                return r;
            }
            Ok(Lookup::Lead) => {
                app.metrics.count(Outcome::LookupLead);
                return tagged("lead", Vec::new());
            }
            Ok(Lookup::Busy { lease_ms: left }) => {
                let now = Instant::now();
                let Some(w) = waiter.as_mut().filter(|_| now < deadline) else {
                    app.metrics.count(Outcome::LookupBusy);
                    return tagged("busy", Vec::new());
                };
                if in_flight.is_none() {
                    in_flight = Some(app.metrics.long_poll(PollVerb::Lookup));
                }
                let nap = if app.wake.subscribed() {
                    // Wake at the lease's expiry at the latest (+1 ms: be past it).
                    let until_expiry = Duration::from_millis(u64::try_from(left).unwrap_or(0) + 1);
                    until_expiry.min(LOOKUP_SAFETY_NAP)
                } else {
                    LOOKUP_POLL
                };
                let source = w.wait(nap.min(deadline - now)).await;
                app.metrics.wakeup(source);
            }
        }
    }
}

async fn store(State(app): State<Arc<App>>, req: Request) -> Response {
    let parsed = Query::parse(req.uri()).and_then(|q| {
        Ok((
            q.key()?.to_string(),
            q.number("ttl_ms", 1, MAX_TTL_MS, None)?,
            q.owner()?.to_string(),
        ))
    });
    let (hex, ttl_ms, owner) = match parsed {
        Ok(p) => p,
        Err(msg) => return bad(&app, Outcome::StoreBadRequest, msg),
    };
    let body = match read_body(req, app.max_value_bytes).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            app.metrics.count(Outcome::StoreTooLarge);
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("value larger than {} bytes", app.max_value_bytes),
            );
        }
        Err(BodyError::Read(e)) => {
            return bad(&app, Outcome::StoreBadRequest, format!("reading body: {e}"))
        }
    };
    match app
        .backend
        .store(&Keys::new(&hex), &owner, ttl_ms, &body)
        .await
    {
        Ok(_) => {
            app.metrics.count(Outcome::StoreStored);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(f) => unavailable(&app, Outcome::StoreError, &f),
    }
}

async fn release(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let parsed =
        Query::parse(&uri).and_then(|q| Ok((q.key()?.to_string(), q.owner()?.to_string())));
    let (hex, owner) = match parsed {
        Ok(p) => p,
        Err(msg) => return bad(&app, Outcome::ReleaseBadRequest, msg),
    };
    match app.backend.release(&Keys::new(&hex), &owner).await {
        Ok(released) => {
            app.metrics.count(if released {
                Outcome::ReleaseReleased
            } else {
                Outcome::ReleaseNotOwner
            });
            StatusCode::NO_CONTENT.into_response()
        }
        Err(f) => unavailable(&app, Outcome::ReleaseError, &f),
    }
}

async fn purge(State(app): State<Arc<App>>, req: Request) -> Response {
    let body = match read_body(req, MAX_PURGE_BYTES).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            app.metrics.count(Outcome::PurgeTooLarge);
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("purge body larger than {MAX_PURGE_BYTES} bytes"),
            );
        }
        Err(BodyError::Read(e)) => {
            app.metrics.count(Outcome::PurgeError);
            return text(StatusCode::BAD_REQUEST, format!("reading body: {e}"));
        }
    };
    match app.backend.purge(&body).await {
        Ok(id) => {
            app.metrics.count(Outcome::PurgeAdded);
            json(format!("{{\"id\":\"{id}\"}}"))
        }
        Err(f) => unavailable(&app, Outcome::PurgeError, &f),
    }
}

fn json(body: String) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

async fn purges(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let parsed = Query::parse(&uri).and_then(|q| {
        let after = q.0.get("after").map(String::as_str).unwrap_or("0");
        if !valid_stream_id(after) {
            return Err(format!(
                "bad parameter `after`: expected a stream id (MS-SEQ), `0` or `$`, got `{after}`"
            ));
        }
        Ok((after.to_string(), q.wait(app.max_wait)?))
    });
    let (after, wait) = match parsed {
        Ok(p) => p,
        Err(msg) => return bad(&app, Outcome::PurgesBadRequest, msg),
    };
    let deadline = Instant::now() + wait;
    let mut in_flight = None;
    loop {
        let p = match app.backend.purges(&after, PURGES_PER_ANSWER).await {
            Ok(p) => p,
            Err(f) => return unavailable(&app, Outcome::PurgesError, &f),
        };
        let now = Instant::now();
        if !p.entries.is_empty() || after == "$" || now >= deadline {
            app.metrics.count(if p.entries.is_empty() {
                Outcome::PurgesEmpty
            } else {
                Outcome::PurgesEntries
            });
            let b64 = base64::engine::general_purpose::STANDARD;
            let entries: Vec<String> = p
                .entries
                .iter()
                .map(|e| {
                    format!(
                        "{{\"id\":\"{}\",\"data\":\"{}\"}}",
                        e.id,
                        b64.encode(&e.data)
                    )
                })
                .collect();
            return json(format!(
                "{{\"last\":\"{}\",\"gap\":{},\"entries\":[{}]}}",
                p.last,
                p.gap,
                entries.join(",")
            ));
        }
        if in_flight.is_none() {
            in_flight = Some(app.metrics.long_poll(PollVerb::Purges));
        }
        tokio::time::sleep(PURGES_POLL.min(deadline - now)).await;
    }
}

async fn health(State(app): State<Arc<App>>) -> Response {
    match app.backend.ping(HEALTH_TIMEOUT).await {
        Ok(()) => {
            app.metrics.count(Outcome::HealthOk);
            text(StatusCode::OK, "ok")
        }
        Err(f) => unavailable(&app, Outcome::HealthError, &f),
    }
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let mut r = (StatusCode::OK, app.metrics.render()).into_response();
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn query_checks_name_the_parameter() {
        let q = Query::parse(&"/v1/lookup?key=AB&lease_ms=x".parse().unwrap()).unwrap();
        assert!(q.key().unwrap_err().contains("`key`"));
        assert!(q
            .number("lease_ms", 1, 5, None)
            .unwrap_err()
            .contains("`lease_ms`"));
        assert!(q.owner().unwrap_err().contains("`owner`"));
        assert_eq!(q.number("wait_ms", 0, 9, Some(0)).unwrap(), 0);
        let e = Query::parse(&"/x?a=1&a=2".parse().unwrap()).err().unwrap();
        assert!(e.contains("`a`"));
        let hex = "0f".repeat(32);
        let q = Query::parse(&format!("/x?key={hex}&owner=n%201").parse().unwrap()).unwrap();
        assert_eq!(q.key().unwrap(), hex);
        assert_eq!(q.owner().unwrap(), "n 1");
    }

    #[test]
    fn stream_ids() {
        for ok in ["0", "$", "1700000000000-0", "12", "1-2"] {
            assert!(valid_stream_id(ok), "{ok}");
        }
        for bad in ["", "-", "1-", "-1", "a-1", "1-2-3", "+", "(1"] {
            assert!(!valid_stream_id(bad), "{bad}");
        }
    }
}
