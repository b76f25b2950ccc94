//! Bearer-secret authentication of every route but `GET /health` (probes carry no secret).
//!
//! The Envoys send `authorization: Bearer <secret>`; the service accepts any of its configured
//! secrets, so a secret is rotated by adding the new one to every L2, then switching the Envoys,
//! then dropping the old one. Secrets are compared in constant time (per secret, and every
//! secret is compared) and never logged or echoed.

use std::fmt;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use l2_proto::header::BEARER;
use l2_proto::route;

use crate::metrics::{AuthFailure, Metrics};

#[derive(Clone, Debug)]
pub enum Auth {
    /// Accepted bearer secrets (more than one while rotating).
    Secrets(Vec<Secret>),
    /// `--insecure-no-auth`: every request is let in.
    Insecure,
}

/// What the middleware needs.
#[derive(Clone)]
pub struct Gate {
    pub auth: Arc<Auth>,
    pub metrics: Arc<Metrics>,
}

#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl Secret {
    pub fn new(bytes: Vec<u8>) -> Secret {
        Secret(bytes)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Equality whose running time depends on `secret`'s length only, not on where `given` differs.
fn ct_eq(given: &[u8], secret: &[u8]) -> bool {
    let mut diff = given.len() ^ secret.len();
    for (i, s) in secret.iter().enumerate() {
        let g = given.get(i).copied().unwrap_or(0);
        diff |= usize::from(g ^ s);
    }
    std::hint::black_box(diff) == 0
}

/// Why a request was refused; `None`: let in.
pub fn check(auth: &Auth, header: Option<&[u8]>) -> Option<AuthFailure> {
    let Auth::Secrets(secrets) = auth else {
        return None;
    };
    let Some(value) = header else {
        return Some(AuthFailure::Missing);
    };
    // The scheme is case-insensitive (RFC 9110 11.1); exactly one space before the token.
    let token = match value.split_at_checked(BEARER.len()) {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case(BEARER.as_bytes()) => token,
        _ => return Some(AuthFailure::Malformed),
    };
    // Every secret is compared, so the time does not tell which one (or whether one) matched.
    let ok = secrets.iter().fold(false, |ok, s| ok | ct_eq(token, &s.0));
    (!ok).then_some(AuthFailure::Wrong)
}

pub async fn layer(State(gate): State<Gate>, req: Request, next: Next) -> Response {
    if req.uri().path() == route::HEALTH {
        return next.run(req).await;
    }
    let header = req.headers().get(AUTHORIZATION).map(|v| v.as_bytes());
    match check(&gate.auth, header) {
        None => next.run(req).await,
        Some(why) => {
            gate.metrics.auth_failure(why);
            let mut r = (StatusCode::UNAUTHORIZED, why.message()).into_response();
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            r
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn any_accepted_secret_passes_and_nothing_else() {
        let auth = Auth::Secrets(vec![
            Secret::new(b"old-secret-0123456789".to_vec()),
            Secret::new(b"new-secret-0123456789".to_vec()),
        ]);
        assert_eq!(check(&auth, Some(b"Bearer old-secret-0123456789")), None);
        assert_eq!(check(&auth, Some(b"bearer new-secret-0123456789")), None);
        for (h, why) in [
            (None, AuthFailure::Missing),
            (Some(&b"Basic b2xkOnNlY3JldA=="[..]), AuthFailure::Malformed),
            (Some(b"Bearer"), AuthFailure::Malformed),
            (Some(b"Bearer old-secret-012345678"), AuthFailure::Wrong),
            (Some(b"Bearer old-secret-01234567890"), AuthFailure::Wrong),
            (Some(b"Bearer  old-secret-0123456789"), AuthFailure::Wrong),
            (Some(b"Bearer "), AuthFailure::Wrong),
        ] {
            assert_eq!(check(&auth, h), Some(why), "{h:?}");
        }
        assert_eq!(check(&Auth::Insecure, None), None);
        assert!(!format!("{auth:?}").contains("0123456789"));
    }

    #[test]
    fn ct_eq_is_equality() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abd", b"abc"));
        assert!(!ct_eq(b"ab", b"abc"));
        assert!(!ct_eq(b"abc\0", b"abc"));
        assert!(!ct_eq(b"", b"abc"));
    }
}
