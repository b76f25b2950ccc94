//! The request the shared fetch sends upstream on behalf of every waiter of a key.

use crate::cache::storable::Asked;
use crate::coalesce::sharing::CREDENTIAL_HEADERS;
use crate::config::carriable;
use crate::config::Scope;
use crate::config::{Config, IdentitySource};
use crate::effects::host::Callout;
use crate::entities::batch::EntityBatch;
use crate::entities::prefetch::Trigger;
use crate::request::classify::RequestHead;
use crate::request::key::CacheKey;
use std::rc::Rc;

pub const IDENTITY: &str = "identity";

/// Whether a fetch that may be stored or shared carries this client header. Not every header:
/// the route's `request_headers_to_remove` and the like never apply to a callout, and an answer
/// given to many must not depend on what one of them sent beside the key. So only what the key
/// accounts for (its `vary_headers`, `accept`), what reads the body (`content-type`), the
/// operator's `forward_headers`, and, for a private entry (keyed by the caller's identity), the
/// caller's identity and credentials, which the origin needs to answer for that caller.
pub fn forwarded(config: &Config, scope: Scope, name: &str) -> bool {
    if !carriable(name) {
        return false;
    }
    let listed = |list: &[String]| list.iter().any(|n| n == name);
    matches!(name, "content-type" | "accept")
        || listed(&config.vary_headers)
        || listed(&config.forward_headers)
        || (scope == Scope::Private
            && (CREDENTIAL_HEADERS.contains(&name)
                || matches!(&config.identity, Some(IdentitySource::Header(h)) if h == name)))
}

/// The callout for a request: the original method, path, authority and body, with the client
/// headers [`forwarded`] allows. `None` when one of those is not text (the callout API takes
/// text only): such a request is not coalesced and goes upstream itself.
pub fn upstream_request(
    cluster: String,
    head: &RequestHead,
    body: Option<Vec<u8>>,
    config: &Config,
    scope: Scope,
) -> Option<Callout> {
    callout_for(cluster, head, body, |name| forwarded(config, scope, name))
}

/// The callout for a request: its method, path, authority and `body`, with the client headers
/// `keep` allows, asking for an uncompressed answer. `None` when one of those is not text.
pub fn callout_for(
    cluster: String,
    head: &RequestHead,
    body: Option<Vec<u8>>,
    keep: impl Fn(&str) -> bool,
) -> Option<Callout> {
    let text = |v: &[u8]| std::str::from_utf8(v).ok().map(str::to_string);
    let mut headers = vec![
        (":method".to_string(), text(&head.method)?),
        (":path".to_string(), text(&head.path)?),
        (":authority".to_string(), text(&head.authority)?),
    ];
    for (name, value) in head.headers.iter() {
        // Envoy's header names are lower-case ASCII; one that is not text is not forwarded.
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        if keep(name) {
            headers.push((name.to_string(), text(value)?));
        }
    }
    // An answer shared by many clients is fetched uncompressed: Envoy's compressor encodes it for
    // each client as it accepts.
    headers.push(("accept-encoding".to_string(), IDENTITY.to_string()));
    Some(Callout {
        cluster,
        headers,
        body: body.filter(|b| !b.is_empty()),
    })
}

/// A fetch a leader's worker makes for a key: queued by the request that claimed the flight,
/// dispatched by the root context, finished when its answer (or failure) comes back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedFetch {
    pub key: CacheKey,
    pub request: Callout,
    /// What the leader asked, for storing the answer.
    pub asked: Asked,
    /// When the root sent it (0 until then).
    pub dispatched_ms: u64,
    /// See `sharing::key_names_caller`.
    pub key_names_caller: bool,
    /// What this fetch does with the fleet's L2.
    pub l2: L2Role,
    /// Entity mode: the `_entities` batch fetched, split into entity entries rather than stored
    /// whole (an `_entities` answer holds no `__typename`: entity purges would not reach it).
    pub entities: Option<Rc<EntityBatch>>,
    /// On a route that prefetches entities: what its answer may start (`entities::prefetch`).
    pub trigger: Option<Rc<Trigger>>,
}

/// A shared fetch's part in the fleet's L2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L2Role {
    /// No L2 for this fetch (none configured, or it failed: L1 only).
    Off,
    /// Ask L2 before the origin.
    Ask,
    /// This worker holds the key's L2 lease: store the answer there, or release the lease.
    Lead,
    /// Store a storable answer in L2; no lease to release.
    Store,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::header_block::HeaderBlock;

    fn head() -> RequestHead {
        RequestHead {
            method: b"POST".to_vec(),
            path: b"/graphql?x=1".to_vec(),
            authority: b"api.example".to_vec(),
            headers: HeaderBlock::from_pairs([
                (&b":method"[..], &b"POST"[..]),
                (b"content-type", b"application/json"),
                (b"content-length", b"12"),
                (b"connection", b"keep-alive"),
                (b"authorization", b"Bearer a"),
                (b"accept-encoding", b"gzip, br"),
                (b"if-none-match", b"\"v1\""),
                (b"range", b"bytes=0-10"),
            ]),
            ..Default::default()
        }
    }

    fn fetch(h: &RequestHead, config: &Config, scope: Scope) -> Vec<String> {
        let f = upstream_request("origin".into(), h, None, config, scope).unwrap();
        f.headers.into_iter().map(|(n, _)| n).collect()
    }

    #[test]
    fn carries_the_request_minus_connection_headers() {
        let config = Config::default();
        let f = upstream_request(
            "origin".into(),
            &head(),
            Some(b"{}".to_vec()),
            &config,
            Scope::Public,
        )
        .unwrap();
        let names: Vec<&str> = f.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            vec![
                ":method",
                ":path",
                ":authority",
                "content-type",
                "authorization",
                "accept-encoding"
            ]
        );
        assert_eq!(
            f.headers[5].1, "identity",
            "shared answers are fetched uncompressed"
        );
        assert_eq!(f.headers[1].1, "/graphql?x=1");
        assert_eq!(f.body.as_deref(), Some(&b"{}"[..]));
    }

    #[test]
    fn binary_headers_are_not_fetched_on_anyone_s_behalf() {
        let config = Config::default();
        let mut h = head();
        let plain = h.headers.clone();
        h.headers = plain.with("user-agent", b"\xff");
        assert_eq!(
            upstream_request("origin".into(), &h, None, &config, Scope::Public),
            None
        );
        // A header the fetch does not carry cannot stop it.
        h.headers = plain.with("x-secret", b"\xff");
        assert!(upstream_request("origin".into(), &h, None, &config, Scope::Public).is_some());
    }

    #[test]
    fn only_the_key_s_headers_and_the_configured_ones_are_carried() {
        let mut h = head();
        for name in [
            "accept",
            "user-agent",
            "x-request-id",
            "x-secret",
            "x-forwarded-for",
            "x-user",
            "cookie",
        ] {
            h.headers = h.headers.with(name, b"v");
        }
        let config = Config::parse(br#"{"vary_headers":["authorization"]}"#).unwrap();
        assert_eq!(
            fetch(&h, &config, Scope::Public),
            vec![
                ":method",
                ":path",
                ":authority",
                "content-type",
                "authorization",
                "accept",
                "user-agent",
                "x-request-id",
                "accept-encoding"
            ]
        );
        let config = Config::parse(
            br#"{"vary_headers":[],"forward_headers":["X-Secret"],
                 "identity":{"source":"header","header":"x-user"}}"#,
        )
        .unwrap();
        let public = fetch(&h, &config, Scope::Public);
        assert!(public.contains(&"x-secret".to_string()));
        for absent in ["authorization", "cookie", "x-user", "user-agent"] {
            assert!(!public.contains(&absent.to_string()), "{absent}");
        }
        // Keyed by the caller: the origin sees who asks, and with what credentials.
        let private = fetch(&h, &config, Scope::Private);
        for present in ["authorization", "cookie", "x-user"] {
            assert!(private.contains(&present.to_string()), "{present}");
        }
        assert!(!private.contains(&"if-none-match".to_string()));
    }
}
