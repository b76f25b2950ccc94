//! What every route module shares: the application state (`App`) and the replies, body reading and
//! query parsing all handlers use. It exists so that the route modules (`api`, `batch`,
//! `purge_api`) each depend on it and never on one another: only `api` names the others, to
//! register their routes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use l2_proto::content_type;
use l2_proto::limits::{valid_key, valid_owner, KEY_HEX_LEN, MAX_OWNER_BYTES};
use l2_proto::route::param;
use tokio::sync::{Mutex, Semaphore, SemaphorePermit};

use crate::auth::Gate;
use crate::backend::{Backend, Fail};
use crate::config::PurgeLog;
use crate::follow::PurgeFeed;
use crate::metrics::{InFlight, Metrics, Outcome, PollVerb, Shed};
use crate::wake::Wakeups;

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

pub(crate) fn text(status: StatusCode, msg: impl Into<String>) -> Response {
    let mut r = (status, msg.into()).into_response();
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
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

pub(crate) fn json(body: String) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type::JSON));
    r
}

/// Query parameters, percent-decoded; a parameter given twice is an error.
pub(crate) struct Query(pub(crate) HashMap<String, String>);

impl Query {
    pub(crate) fn parse(uri: &Uri) -> Result<Query, String> {
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

    pub(crate) fn key(&self) -> Result<&str, String> {
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

    pub(crate) fn owner(&self) -> Result<&str, String> {
        let o = self.required(param::OWNER)?;
        if !valid_owner(o) {
            return Err(format!(
                "bad parameter `{}`: expected 1..={MAX_OWNER_BYTES} bytes",
                param::OWNER
            ));
        }
        Ok(o)
    }

    pub(crate) fn number(
        &self,
        name: &str,
        min: u64,
        max: u64,
        default: Option<u64>,
    ) -> Result<u64, String> {
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

    pub(crate) fn wait(&self, cap: Duration) -> Result<Duration, String> {
        let ms = self.number(param::WAIT_MS, 0, u64::MAX, Some(0))?;
        Ok(Duration::from_millis(ms).min(cap))
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

/// A verb's body, at most `limit` bytes: over it, 413 "`what` larger than `limit` bytes" counted
/// `too_large`; unreadable, 400 counted `unreadable`.
pub(crate) async fn body_within(
    app: &App,
    req: Request,
    limit: usize,
    what: &str,
    too_large: Outcome,
    unreadable: Outcome,
) -> Result<Bytes, Response> {
    match read_body(req, limit).await {
        Ok(b) => Ok(b),
        Err(BodyError::TooLarge) => {
            app.metrics.count(too_large);
            Err(text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("{what} larger than {limit} bytes"),
            ))
        }
        Err(BodyError::Read(e)) => Err(bad(app, unreadable, format!("reading body: {e}"))),
    }
}

/// Bytes a store may be about to receive: its declared length, else the most it may send
/// (`limit`).
fn body_budget(req: &Request, limit: usize) -> usize {
    req.headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(limit, |n| n.min(limit))
}

/// A store's right to receive its body (at most `limit` bytes) within --max-inflight-bytes; 429,
/// counted as shed, when that budget is spent.
pub(crate) fn inflight_permit<'a>(
    app: &'a App,
    req: &Request,
    limit: usize,
) -> Result<SemaphorePermit<'a>, Box<Response>> {
    let budget = u32::try_from(body_budget(req, limit)).unwrap_or(u32::MAX);
    app.inflight_bytes.try_acquire_many(budget).map_err(|_| {
        app.metrics.shed(Shed::StoreBytes);
        Box::new(text(
            StatusCode::TOO_MANY_REQUESTS,
            "too many store bytes in flight (--max-inflight-bytes)",
        ))
    })
}

/// A long-poll's right to wait (--max-long-polls), counted in flight while held.
pub(crate) fn wait_permit(app: &App, verb: PollVerb) -> Option<(SemaphorePermit<'_>, InFlight)> {
    let p = app.long_polls.try_acquire().ok()?;
    Some((p, app.metrics.long_poll(verb)))
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
