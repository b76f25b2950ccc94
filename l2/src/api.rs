//! The HTTP API (HTTP/1.1 and h2c prior knowledge on one port). See l2/README.md. Its routes,
//! parameters, headers, limits and answers are the wire contract's (`l2_proto`), which the filter
//! builds against too.

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
use http_body_util::{BodyExt, LengthLimitError, Limited};
use l2_proto::limits::{
    valid_cursor, valid_generation, valid_key, valid_owner, KEY_HEX_LEN, MAX_GEN_BYTES,
    MAX_OWNER_BYTES, MAX_PURGE_BYTES, MAX_TTL_MS, MIN_LEASE_MS, MIN_TTL_MS, PURGES_PER_ANSWER,
};
use l2_proto::lookup::LookupTag;
use l2_proto::marks::{
    valid_scan_cursor, MarksAdded, MarksBatch, MarksPage, MAX_MARKS_BODY_BYTES,
    MAX_MARKS_PAGE_BYTES,
};
use l2_proto::purges::{PurgeAdded, PurgeEntry, PurgesAnswer};
use l2_proto::route::{self, param};
use l2_proto::{content_type, header};

use tokio::sync::{Mutex, Semaphore, SemaphorePermit};

use crate::auth::Gate;
use crate::backend::{Backend, Fail, Keys, Lookup};
use crate::config::PurgeLog;
use crate::follow::PurgeFeed;
use crate::metrics::{InFlight, Metrics, Outcome, PollVerb, Shed};
use crate::purgelog::Purges;
use crate::wake::Wakeups;

/// A waiting lookup re-checks at least this often while the subscriber is subscribed...
const LOOKUP_SAFETY_NAP: Duration = Duration::from_millis(250);
/// ...and this often while it is not: lost wake-ups are rare, and polling every waiter fast while
/// pub/sub is down would multiply Redis commands exactly when Redis is in trouble.
const LOOKUP_POLL: Duration = Duration::from_millis(200);
const HEALTH_TIMEOUT: Duration = Duration::from_millis(100);
/// Health checks from every Envoy share one PING per this period.
const HEALTH_CACHE: Duration = Duration::from_secs(1);

static X_L2: HeaderName = HeaderName::from_static(header::X_L2);
static X_L2_TTL: HeaderName = HeaderName::from_static(header::X_L2_TTL_MS);

pub struct App {
    pub backend: Arc<Backend>,
    pub wake: Arc<Wakeups>,
    pub feed: Arc<PurgeFeed>,
    pub metrics: Arc<Metrics>,
    pub gate: Gate,
    pub max_value_bytes: usize,
    pub max_wait: Duration,
    pub max_lease_ms: u64,
    /// How long the purge log and its snapshot keep what they hold.
    pub purge_log: PurgeLog,
    /// One permit per waiting long-poll (--max-long-polls).
    pub long_polls: Semaphore,
    /// One permit per byte of store bodies being received (--max-inflight-bytes).
    pub inflight_bytes: Semaphore,
    /// The last PING's time and outcome.
    pub health: Mutex<Option<(Instant, Result<(), String>)>>,
}

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route(route::LOOKUP, post(lookup))
        .route(route::STORE, put(store))
        .route(route::RELEASE, post(release))
        .route(route::MGET, post(crate::batch::mget))
        .route(route::MSTORE, put(crate::batch::mstore))
        .route(route::PURGE, post(purge))
        .route(route::PURGES, get(purges))
        .route(route::MARKS, post(add_marks).get(marks_page))
        .route(route::HEALTH, get(health))
        .route(route::METRICS, get(metrics))
        .layer(axum::middleware::from_fn_with_state(
            app.gate.clone(),
            crate::auth::layer,
        ))
        .with_state(app)
}

pub(crate) fn text(status: StatusCode, msg: impl Into<String>) -> Response {
    let mut r = (status, msg.into()).into_response();
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn tagged(tag: LookupTag, body: Vec<u8>) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut()
        .insert(X_L2.clone(), HeaderValue::from_static(tag.as_str()));
    r
}

pub(crate) fn bad(app: &App, o: Outcome, msg: String) -> Response {
    app.metrics.count(o);
    text(StatusCode::BAD_REQUEST, msg)
}

/// A Redis failure on a verb is 424, not 5xx: with a Cluster it is often one master's keys only,
/// and Envoy's outlier detection (consecutive 5xx) would eject every healthy L2 replica for it.
pub(crate) fn failed(app: &App, o: Outcome, f: &Fail) -> Response {
    app.metrics.count(o);
    app.metrics.redis_error();
    text(StatusCode::FAILED_DEPENDENCY, f.to_string())
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
        let k = self.required(param::KEY)?;
        if valid_key(k) {
            Ok(k)
        } else {
            Err(format!(
                "bad parameter `{}`: expected {KEY_HEX_LEN} lower-case hex characters",
                param::KEY
            ))
        }
    }

    fn owner(&self) -> Result<&str, String> {
        let o = self.required(param::OWNER)?;
        if !valid_owner(o) {
            return Err(format!(
                "bad parameter `{}`: expected 1..={MAX_OWNER_BYTES} bytes",
                param::OWNER
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
        let ms = self.number(param::WAIT_MS, 0, u64::MAX, Some(0))?;
        Ok(Duration::from_millis(ms).min(cap))
    }
}

pub(crate) enum BodyError {
    TooLarge,
    Read(String),
}

pub(crate) async fn read_body(req: Request, limit: usize) -> Result<Bytes, BodyError> {
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

/// `lease_ms` above `--max-lease-ms` is clamped, not refused: a caller asking for too much still
/// gets a lease, just not one that squats the key for long.
fn lease(app: &App, asked: u64) -> u64 {
    if asked > app.max_lease_ms {
        app.metrics.lease_clamped();
        app.max_lease_ms
    } else {
        asked
    }
}

fn hit(value: Vec<u8>, ttl_ms: i64) -> Response {
    let mut r = tagged(LookupTag::Hit, value);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type::BYTES));
    if ttl_ms >= 0 {
        r.headers_mut()
            .insert(X_L2_TTL.clone(), HeaderValue::from(ttl_ms));
    }
    r
}

/// A long-poll's right to wait (--max-long-polls), counted in flight while held.
fn wait_permit(app: &App, verb: PollVerb) -> Option<(SemaphorePermit<'_>, InFlight)> {
    let p = app.long_polls.try_acquire().ok()?;
    Some((p, app.metrics.long_poll(verb)))
}

async fn lookup(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let parsed = Query::parse(&uri).and_then(|q| {
        Ok((
            q.key()?.to_string(),
            q.number(param::LEASE_MS, MIN_LEASE_MS, u64::MAX, None)?,
            q.owner()?.to_string(),
            q.wait(app.max_wait)?,
        ))
    });
    let (hex, lease_ms, owner, wait) = match parsed {
        Ok((hex, l, owner, wait)) => (hex, lease(&app, l), owner, wait),
        Err(msg) => return bad(&app, Outcome::LookupBadRequest, msg),
    };
    let keys = Keys::new(&hex);
    let deadline = Instant::now() + wait;
    let mut waiter = (!wait.is_zero()).then(|| app.wake.register(&hex));
    let mut permit = None;
    loop {
        if let Some(w) = waiter.as_mut() {
            w.mark();
        }
        let left = match app.backend.lookup(&keys, &owner, lease_ms).await {
            Err(f) => return failed(&app, Outcome::LookupError, &f),
            Ok(Lookup::Hit { value, ttl_ms }) => {
                app.metrics.count(Outcome::LookupHit);
                return hit(value, ttl_ms);
            }
            Ok(Lookup::Lead) => {
                app.metrics.count(Outcome::LookupLead);
                return tagged(LookupTag::Lead, Vec::new());
            }
            Ok(Lookup::Busy { lease_ms: left }) => left,
        };
        let now = Instant::now();
        if permit.is_none() && waiter.is_some() && now < deadline {
            permit = wait_permit(&app, PollVerb::Lookup);
            if permit.is_none() {
                app.metrics.shed(Shed::LookupWait);
            }
        }
        let Some(w) = waiter
            .as_mut()
            .filter(|_| permit.is_some() && now < deadline)
        else {
            app.metrics.count(Outcome::LookupBusy);
            return tagged(LookupTag::Busy, Vec::new());
        };
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
/// Bytes a store may be about to receive: its declared length, else the most it may send
/// (`limit`).
pub(crate) fn body_budget(req: &Request, limit: usize) -> usize {
    req.headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(limit, |n| n.min(limit))
}

async fn store(State(app): State<Arc<App>>, req: Request) -> Response {
    let parsed = Query::parse(req.uri()).and_then(|q| {
        Ok((
            q.key()?.to_string(),
            q.number(param::TTL_MS, MIN_TTL_MS, MAX_TTL_MS, None)?,
            q.owner()?.to_string(),
        ))
    });
    let (hex, ttl_ms, owner) = match parsed {
        Ok(p) => p,
        Err(msg) => return bad(&app, Outcome::StoreBadRequest, msg),
    };
    // Bodies are held whole until Redis has them: bound the memory all of them take at once.
    let budget = u32::try_from(body_budget(&req, app.max_value_bytes)).unwrap_or(u32::MAX);
    let Ok(_bytes) = app.inflight_bytes.try_acquire_many(budget) else {
        app.metrics.shed(Shed::StoreBytes);
        return text(
            StatusCode::TOO_MANY_REQUESTS,
            "too many store bytes in flight (--max-inflight-bytes)",
        );
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
        Err(f) => failed(&app, Outcome::StoreError, &f),
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
        Err(f) => failed(&app, Outcome::ReleaseError, &f),
    }
}

/// The body is opaque (the filter signs it): only its size is checked.
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
    match app.backend.purge(&body, &app.purge_log).await {
        Ok((id, generation)) => {
            app.metrics.count(Outcome::PurgeAdded);
            json(PurgeAdded { id, generation }.encode())
        }
        Err(f) => failed(&app, Outcome::PurgeError, &f),
    }
}

fn json(body: String) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type::JSON));
    r
}

fn purges_page(app: &App, p: &Purges) -> Response {
    app.metrics.count(if p.entries.is_empty() {
        Outcome::PurgesEmpty
    } else {
        Outcome::PurgesEntries
    });
    let answer = PurgesAnswer {
        generation: Some(p.gen.clone()),
        last: p.last.clone(),
        gap: p.gap,
        // A reader that did not send its number gets the answer it always got.
        entries: p
            .entries
            .iter()
            .map(|e| match (p.n, e.n) {
                (Some(_), Some(n)) => PurgeEntry::numbered(e.id.as_str(), &e.data, n),
                _ => PurgeEntry::new(e.id.as_str(), &e.data),
            })
            .collect(),
        n: p.n,
    };
    json(answer.encode())
}

struct PurgesQuery {
    after: String,
    /// Empty: the reader knows no generation yet.
    gen: String,
    /// The number of the last entry the reader applied: numbered reads.
    n: Option<u64>,
    wait: Duration,
}

fn purges_query(app: &App, uri: &Uri) -> Result<PurgesQuery, String> {
    let q = Query::parse(uri)?;
    let after = q.0.get(param::AFTER).map(String::as_str).unwrap_or("0");
    if !valid_cursor(after) {
        return Err(format!(
            "bad parameter `{}`: expected a stream id (MS-SEQ), `0` or `$`, got `{after}`",
            param::AFTER
        ));
    }
    let gen = q.0.get(param::GEN).map(String::as_str).unwrap_or("");
    if !gen.is_empty() && !valid_generation(gen) {
        return Err(format!(
            "bad parameter `{}`: expected up to {MAX_GEN_BYTES} letters and digits",
            param::GEN
        ));
    }
    let n = if q.0.contains_key(param::N) {
        Some(q.number(param::N, 0, u64::MAX, None)?)
    } else {
        None
    };
    Ok(PurgesQuery {
        after: after.to_string(),
        gen: gen.to_string(),
        n,
        wait: q.wait(app.max_wait)?,
    })
}

/// One read when it starts; if there is nothing yet, it waits on the purge-log follower (no Redis
/// command while waiting) and reads once more each time the follower reports a new record.
async fn purges(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let PurgesQuery {
        after,
        gen,
        n,
        wait,
    } = match purges_query(&app, &uri) {
        Ok(p) => p,
        Err(msg) => return bad(&app, Outcome::PurgesBadRequest, msg),
    };
    let deadline = Instant::now() + wait;
    // Subscribed before the first read, so a record landing between the read and the wait wakes it.
    let mut news = app.feed.subscribe();
    let mut permit = None;
    loop {
        news.borrow_and_update();
        let p = match app.backend.purges(&after, &gen, n, PURGES_PER_ANSWER).await {
            Ok(p) => p,
            Err(f) => return failed(&app, Outcome::PurgesError, &f),
        };
        let now = Instant::now();
        if !p.entries.is_empty() || p.gap || after == "$" || now >= deadline {
            return purges_page(&app, &p);
        }
        if permit.is_none() {
            permit = wait_permit(&app, PollVerb::Purges);
            if permit.is_none() {
                // A page answered at once would be re-asked at once: 429 makes the caller back off.
                app.metrics.shed(Shed::PurgesWait);
                return text(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too many long-polls waiting (--max-long-polls)",
                );
            }
        }
        match tokio::time::timeout(deadline - now, news.changed()).await {
            Ok(Ok(())) => continue,
            Ok(Err(_)) | Err(_) => return purges_page(&app, &p),
        }
    }
}

/// A batch of marks: every one into the log, the newest of each target into the snapshot. The
/// marks are sealed by the filter; the service reads their clear part to name and order them.
async fn add_marks(State(app): State<Arc<App>>, req: Request) -> Response {
    let body = match read_body(req, MAX_MARKS_BODY_BYTES).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            app.metrics.count(Outcome::MarksTooLarge);
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("marks body larger than {MAX_MARKS_BODY_BYTES} bytes"),
            );
        }
        Err(BodyError::Read(e)) => {
            return bad(&app, Outcome::MarksBadRequest, format!("reading body: {e}"))
        }
    };
    let batch = match MarksBatch::decode(&body) {
        Ok(b) => b,
        Err(e) => return bad(&app, Outcome::MarksBadRequest, format!("marks body: {e}")),
    };
    // The operator's floor: a batch cannot make the snapshot forget a purge sooner than it.
    let keep_ms = batch.keep_ms.max(app.purge_log.min_keep_ms);
    match app
        .backend
        .add_marks(&batch.marks, keep_ms, &app.purge_log)
        .await
    {
        Ok(a) => {
            app.metrics.count(Outcome::MarksAdded);
            let answer = MarksAdded {
                generation: a.gen,
                last: a.last,
                n: a.n,
            };
            json(answer.encode())
        }
        Err(f) => failed(&app, Outcome::MarksError, &f),
    }
}

/// `cursor`: an HSCAN cursor, `0` (the default) for the first page.
fn snapshot_cursor(uri: &Uri) -> Result<u64, String> {
    let q = Query::parse(uri)?;
    let raw = q.0.get(param::CURSOR).map(String::as_str).unwrap_or("0");
    match raw.parse::<u64>() {
        Ok(c) if valid_scan_cursor(raw) => Ok(c),
        _ => Err(format!(
            "bad parameter `{}`: expected a cursor from an earlier page (decimal digits), got `{raw}`",
            param::CURSOR
        )),
    }
}

/// One page of the snapshot. The page is HSCAN's, never cut here: its cursor is past every field
/// it answered, so a cut would lose fields for good. A page over the contract's byte limit is a
/// 424 rather than a page the reader would refuse; only a Redis keeping thousands of long fields
/// in a listpack could give one (with the default `hash-max-listpack-value` our values make the
/// hash a hashtable, and a scan of COUNT buckets answers about COUNT fields).
async fn marks_page(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let cursor = match snapshot_cursor(&uri) {
        Ok(c) => c,
        Err(msg) => return bad(&app, Outcome::SnapshotBadRequest, msg),
    };
    let page = match app.backend.marks_page(cursor).await {
        Ok(p) => p,
        Err(f) => return failed(&app, Outcome::SnapshotError, &f),
    };
    let body = MarksPage {
        generation: page.gen,
        cursor: page.cursor,
        tip: page.tip,
        n: page.n,
        entries: page
            .marks
            .iter()
            .map(|(id, sealed)| PurgeEntry::new(id.as_str(), sealed))
            .collect(),
    }
    .encode();
    if body.len() > MAX_MARKS_PAGE_BYTES {
        app.metrics.count(Outcome::SnapshotError);
        return text(
            StatusCode::FAILED_DEPENDENCY,
            format!(
                "snapshot page larger than {MAX_MARKS_PAGE_BYTES} bytes (hash-max-listpack-*?)"
            ),
        );
    }
    app.metrics.count(Outcome::SnapshotPage);
    json(body)
}

/// 200 while any Redis node answers a PING (cached for a second), 503 only when none does: one
/// Cluster master down must not take the service out of the load balancer.
async fn health(State(app): State<Arc<App>>) -> Response {
    let mut cached = app.health.lock().await;
    let fresh = cached
        .as_ref()
        .filter(|(at, _)| at.elapsed() < HEALTH_CACHE)
        .map(|(_, r)| r.clone());
    let result = match fresh {
        Some(r) => r,
        None => {
            let r = app
                .backend
                .ping_any(HEALTH_TIMEOUT)
                .await
                .map_err(|f| f.to_string());
            *cached = Some((Instant::now(), r.clone()));
            r
        }
    };
    drop(cached);
    match result {
        Ok(()) => {
            app.metrics.count(Outcome::HealthOk);
            text(StatusCode::OK, "ok")
        }
        Err(msg) => {
            app.metrics.count(Outcome::HealthError);
            text(StatusCode::SERVICE_UNAVAILABLE, msg)
        }
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
}
