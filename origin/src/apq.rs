//! Automatic Persisted Queries, Apollo's protocol.
//!
//! A request whose `extensions.persistedQuery` is `{"version":1,"sha256Hash":H}`:
//! - with a `query`: if the query's SHA-256 (lowercase hex) is not `H` the
//!   answer is `PERSISTED_QUERY_HASH_MISMATCH` (not executed, not remembered);
//!   otherwise `H -> query` is remembered and the query executed;
//! - without a `query`: the remembered query for `H` is executed, or the answer
//!   is `PERSISTED_QUERY_NOT_FOUND`.
//!
//! Both error answers are HTTP 200 with a GraphQL `errors` body, as Apollo
//! Server gives them. async-graphql's own `ApolloPersistedQueries` extension
//! is not used: its errors carry no `extensions.code`, which clients (and the
//! cache in front of this origin) key on.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

/// Persisted queries remembered at most; the oldest is forgotten first.
pub const APQ_CAPACITY: usize = 10_000;

pub const BODY_NOT_FOUND: &str = r#"{"errors":[{"message":"PersistedQueryNotFound","extensions":{"code":"PERSISTED_QUERY_NOT_FOUND"}}]}"#;
pub const BODY_HASH_MISMATCH: &str = r#"{"errors":[{"message":"provided sha does not match query","extensions":{"code":"PERSISTED_QUERY_HASH_MISMATCH"}}]}"#;

/// Why a persisted-query request is not executed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// Hash only, and the hash is not known: answered with HTTP 200.
    NotFound,
    /// The query's hash is not the one sent: answered with HTTP 200.
    HashMismatch,
    /// `extensions.persistedQuery` is malformed: answered with HTTP 400.
    Invalid(String),
}

impl Rejection {
    /// The GraphQL error answer (a JSON object, keys in Apollo Server's
    /// order) for [`Rejection::NotFound`] and [`Rejection::HashMismatch`];
    /// `None` for an invalid extension.
    pub fn graphql_error(&self) -> Option<&'static str> {
        match self {
            Rejection::NotFound => Some(BODY_NOT_FOUND),
            Rejection::HashMismatch => Some(BODY_HASH_MISMATCH),
            Rejection::Invalid(_) => None,
        }
    }
}

/// Bounded `sha256 hex -> query` store.
pub struct PersistedQueries {
    capacity: usize,
    store: Mutex<Store>,
}

#[derive(Default)]
struct Store {
    queries: HashMap<String, String>,
    /// Insertion order, for forgetting the oldest.
    order: VecDeque<String>,
}

impl PersistedQueries {
    pub fn new(capacity: usize) -> Self {
        PersistedQueries {
            capacity: capacity.max(1),
            store: Mutex::new(Store::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, hash: &str) -> Option<String> {
        self.lock().queries.get(hash).cloned()
    }

    fn remember(&self, hash: &str, query: &str) {
        let mut store = self.lock();
        if store.queries.contains_key(hash) {
            return;
        }
        while store.queries.len() >= self.capacity {
            let Some(oldest) = store.order.pop_front() else {
                break;
            };
            store.queries.remove(&oldest);
        }
        store.queries.insert(hash.to_string(), query.to_string());
        store.order.push_back(hash.to_string());
    }

    /// Number of remembered queries.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().queries.len()
    }

    /// Applies the protocol to one request: on `Ok` the request carries the
    /// query to execute (and no longer the `persistedQuery` extension); a
    /// request without that extension is left as it is.
    pub fn resolve(&self, req: &mut async_graphql::Request) -> Result<(), Rejection> {
        let Some(ext) = req.extensions.remove("persistedQuery") else {
            return Ok(());
        };
        let hash = parse_extension(ext)?;
        if req.query.is_empty() {
            req.query = self.get(&hash).ok_or(Rejection::NotFound)?;
            return Ok(());
        }
        if sha256_hex(&req.query) != hash {
            return Err(Rejection::HashMismatch);
        }
        self.remember(&hash, &req.query);
        Ok(())
    }
}

/// Lowercase hex SHA-256 of `query`, as APQ clients send it.
pub fn sha256_hex(query: &str) -> String {
    use std::fmt::Write;
    let digest = Sha256::digest(query.as_bytes());
    let mut out = String::with_capacity(64);
    for b in digest {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// Reads `{"version":1,"sha256Hash":"..."}` and returns the hash.
fn parse_extension(ext: async_graphql::Value) -> Result<String, Rejection> {
    let invalid = || {
        Rejection::Invalid(
            "invalid `persistedQuery` extension (expected {\"version\":1,\"sha256Hash\":\"...\"})"
                .to_string(),
        )
    };
    let serde_json::Value::Object(obj) = ext.into_json().map_err(|_| invalid())? else {
        return Err(invalid());
    };
    match obj.get("version").and_then(serde_json::Value::as_i64) {
        Some(1) => {}
        Some(_) => {
            return Err(Rejection::Invalid(
                "Unsupported persisted query version".to_string(),
            ))
        }
        None => return Err(invalid()),
    }
    match obj.get("sha256Hash") {
        Some(serde_json::Value::String(h)) => Ok(h.clone()),
        _ => Err(invalid()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn request(query: &str, ext: serde_json::Value) -> async_graphql::Request {
        serde_json::from_value(serde_json::json!({
            "query": query,
            "extensions": { "persistedQuery": ext },
        }))
        .unwrap()
    }

    fn pq(hash: &str) -> serde_json::Value {
        serde_json::json!({ "version": 1, "sha256Hash": hash })
    }

    #[test]
    fn sha256_hex_is_lowercase_hex() {
        assert_eq!(
            sha256_hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn register_then_hash_only() {
        let apq = PersistedQueries::new(10);
        let q = "{ users { id } }";
        let h = sha256_hex(q);
        assert_eq!(
            apq.resolve(&mut request("", pq(&h))),
            Err(Rejection::NotFound)
        );
        let mut r = request(q, pq(&h));
        apq.resolve(&mut r).unwrap();
        assert_eq!(r.query, q);
        assert!(!r.extensions.contains_key("persistedQuery"));
        let mut r = request("", pq(&h));
        apq.resolve(&mut r).unwrap();
        assert_eq!(r.query, q);
    }

    #[test]
    fn mismatch_is_not_remembered() {
        let apq = PersistedQueries::new(10);
        let h = sha256_hex("{ a }");
        assert_eq!(
            apq.resolve(&mut request("{ b }", pq(&h))),
            Err(Rejection::HashMismatch)
        );
        assert_eq!(apq.len(), 0);
        assert_eq!(
            apq.resolve(&mut request("", pq(&h))),
            Err(Rejection::NotFound)
        );
    }

    #[test]
    fn bounded_forgets_oldest() {
        let apq = PersistedQueries::new(2);
        let qs = ["{ a }", "{ b }", "{ c }"];
        for q in qs {
            apq.resolve(&mut request(q, pq(&sha256_hex(q)))).unwrap();
        }
        assert_eq!(apq.len(), 2);
        assert_eq!(
            apq.resolve(&mut request("", pq(&sha256_hex("{ a }")))),
            Err(Rejection::NotFound)
        );
        apq.resolve(&mut request("", pq(&sha256_hex("{ c }"))))
            .unwrap();
    }

    #[test]
    fn invalid_extensions() {
        let apq = PersistedQueries::new(2);
        for ext in [
            serde_json::json!("nope"),
            serde_json::json!({ "version": 1 }),
            serde_json::json!({ "version": 2, "sha256Hash": "ab" }),
            serde_json::json!({ "sha256Hash": "ab" }),
            serde_json::json!({ "version": 1, "sha256Hash": 5 }),
        ] {
            let r = apq.resolve(&mut request("{ a }", ext.clone()));
            assert!(matches!(r, Err(Rejection::Invalid(_))), "{ext}");
        }
        // No extension: untouched.
        let mut r = async_graphql::Request::new("{ a }");
        apq.resolve(&mut r).unwrap();
        assert_eq!(r.query, "{ a }");
    }

    #[test]
    fn error_bodies() {
        for (r, code, message) in [
            (
                Rejection::NotFound,
                "PERSISTED_QUERY_NOT_FOUND",
                "PersistedQueryNotFound",
            ),
            (
                Rejection::HashMismatch,
                "PERSISTED_QUERY_HASH_MISMATCH",
                "provided sha does not match query",
            ),
        ] {
            let body: serde_json::Value = serde_json::from_str(r.graphql_error().unwrap()).unwrap();
            assert_eq!(
                body,
                serde_json::json!({
                    "errors": [{ "message": message, "extensions": { "code": code } }]
                })
            );
        }
        assert!(Rejection::Invalid(String::new()).graphql_error().is_none());
    }
}
