//! Who may be given an answer fetched for another request: the one rule, for followers on the
//! leader's worker and on every other worker alike.

use crate::cache::storable::body_storable;
use crate::coalesce::relay::Response;
use crate::config::Scope;

/// Request headers that carry credentials: when one of them is in the key, requests sharing
/// the key are the same caller. Other vary headers (`origin`, a tenant header) name no user.
pub const CREDENTIAL_HEADERS: &[&str] = &["authorization", "cookie", "proxy-authorization"];

/// Whether the key names the caller for this request, so that every request sharing it is the
/// same caller: a private entry is scoped to the identity, or the request carries a credential
/// header among the `vary_headers` (`names`, with this request's `values` in the same order).
/// Configured headers a request does not send name nobody.
pub fn key_names_caller(scope: Scope, names: &[String], values: &[Option<Vec<u8>>]) -> bool {
    scope == Scope::Private
        || names.iter().zip(values).any(|(name, value)| {
            CREDENTIAL_HEADERS.contains(&name.as_str())
                && value.as_ref().is_some_and(|v| !v.is_empty())
        })
}

/// Whether `response`, fetched for one request, may answer the others waiting on its key.
/// Personal or varying answers never may; when the key does not name the caller, only answers
/// that cannot depend on who asked; when it does, only answers the same caller gets again.
pub fn followers_may_share(
    response: &Response,
    vary_headers: &[String],
    key_names_caller: bool,
) -> bool {
    response.shareable(vary_headers).is_ok()
        && if key_names_caller {
            same_for_the_same_caller(response)
        } else {
            caller_independent(response)
        }
}

/// A clean GraphQL result, or a gateway failure (which every waiter must see, as the leader did).
/// A 401/403, a 4xx about the request (a CSRF check, a per-IP 429) or a GraphQL `errors` answer
/// may be about the leader alone.
fn caller_independent(r: &Response) -> bool {
    r.status >= 500 || (r.status == 200 && body_storable(&r.body).is_ok())
}

/// For requests with the same credentials: what those credentials get (any 2xx, a 401/403/404,
/// gateway failures), not what may depend on the connection or on timing (a 429 per IP, a
/// 400 from a CSRF or preflight check, 408).
fn same_for_the_same_caller(r: &Response) -> bool {
    matches!(r.status, 200..=299 | 401 | 403 | 404) || r.status >= 500
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> Response {
        Response {
            status,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: body.as_bytes().to_vec(),
            tags: String::new(),
        }
    }

    const JSON: (&str, &str) = ("content-type", "application/json");

    #[test]
    fn the_key_names_the_caller_when_private_or_keyed_by_credentials_it_carries() {
        let names: Vec<String> = ["authorization", "origin"].map(String::from).to_vec();
        assert!(key_names_caller(Scope::Private, &[], &[]));
        assert!(key_names_caller(
            Scope::Public,
            &names,
            &[Some(b"Bearer a".to_vec()), None]
        ));
        assert!(!key_names_caller(Scope::Public, &[], &[]));
        assert!(
            !key_names_caller(Scope::Public, &names, &[None, None]),
            "configured but absent: nobody"
        );
        assert!(!key_names_caller(
            Scope::Public,
            &names,
            &[Some(Vec::new()), None]
        ));
        assert!(
            !key_names_caller(Scope::Public, &names, &[None, Some(b"https://a".to_vec())]),
            "an origin is not a user"
        );
    }

    #[test]
    fn the_same_caller_shares_what_its_credentials_get_not_per_connection_answers() {
        let json = [JSON];
        for status in [200, 204, 401, 403, 404, 500, 503] {
            assert!(
                followers_may_share(&answer(status, &json, "{}"), &[], true),
                "{status}"
            );
        }
        for status in [400, 408, 429] {
            assert!(
                !followers_may_share(&answer(status, &json, "{}"), &[], true),
                "{status}"
            );
        }
    }

    #[test]
    fn caller_dependent_answers_are_shared_only_by_the_same_caller() {
        let denied = answer(401, &[JSON], r#"{"errors":[{"message":"no"}]}"#);
        let errors = answer(200, &[JSON], r#"{"errors":[{"message":"x"}]}"#);
        let clean = answer(200, &[JSON], r#"{"data":{"a":1}}"#);
        let gateway = answer(503, &[], "upstream connect error");
        for r in [&denied, &errors] {
            assert!(!followers_may_share(r, &[], false));
            assert!(followers_may_share(r, &[], true));
        }
        for r in [&clean, &gateway] {
            assert!(followers_may_share(r, &[], false));
        }
    }

    #[test]
    fn personal_or_varying_answers_are_never_shared() {
        let cookie = answer(200, &[JSON, ("set-cookie", "a=b")], r#"{"data":{}}"#);
        let varies = answer(200, &[JSON, ("vary", "x-tenant")], r#"{"data":{}}"#);
        for r in [&cookie, &varies] {
            assert!(!followers_may_share(r, &[], true));
            assert!(!followers_may_share(r, &[], false));
        }
    }
}
