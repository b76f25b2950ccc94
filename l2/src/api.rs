//! The HTTP API (HTTP/1.1 and h2c prior knowledge on one port). See l2/README.md. Its routes,
//! parameters, headers, limits and answers are the wire contract's (`l2_proto`), which the filter
//! builds against too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use l2_proto::limits::{MAX_TTL_MS, MIN_LEASE_MS, MIN_TTL_MS};
use l2_proto::lookup::LookupTag;
use l2_proto::route::{self, param};
use l2_proto::{content_type, header};

use crate::app::{bad, body_within, failed, inflight_permit, text, wait_permit, App, Query};
use crate::backend::{Keys, Lookup};
use crate::batch::{mget, mstore};
use crate::metrics::{Outcome, PollVerb, Shed};
use crate::purge_api::{add_marks, marks_page, purge, purges};

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

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route(route::LOOKUP, post(lookup))
        .route(route::STORE, put(store))
        .route(route::RELEASE, post(release))
        .route(route::MGET, post(mget))
        .route(route::MSTORE, put(mstore))
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

fn tagged(tag: LookupTag, body: Vec<u8>) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut()
        .insert(X_L2.clone(), HeaderValue::from_static(tag.as_str()));
    r
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
    let _bytes = match inflight_permit(&app, &req, app.max_value_bytes) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let body = match body_within(
        &app,
        req,
        app.max_value_bytes,
        "value",
        Outcome::StoreTooLarge,
        Outcome::StoreBadRequest,
    )
    .await
    {
        Ok(b) => b,
        Err(r) => return r,
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
