//! What a request's callbacks read from the host: the head (headers the decision and the key
//! use), what the route says, and the caller's identity. Property reads cost a host call each,
//! so each is made only for requests that need it.

use crate::config::{Config, IdentitySource};
use crate::effects::header_block::pairs;
use crate::effects::host::RequestHost;
use crate::request::classify::{head_of, RequestHead};
use crate::request::route_metadata::route_override;
use crate::request::rules::RouteOverride;

const CLUSTER: [&str; 2] = ["xds", "cluster_name"];

/// The request head, from one read of every header. Repeated headers are joined, so every value
/// takes part in the decision and the key.
pub fn read_head(config: &Config, host: &impl RequestHost) -> RequestHead {
    head_of(config, host.request_headers())
}

/// What the route says, for a request that will be keyed.
pub fn read_route(config: &Config, host: &impl RequestHost, head: &mut RequestHead) {
    head.route = read_route_override(config, host);
    // The route's choice of cluster may depend on headers outside the key (a canary header).
    if config.key_by_cluster {
        head.cluster = host.property(&CLUSTER);
    }
}

/// The cluster the shared fetch goes to: the configured one, else the route's (read now unless
/// the key already needed it).
pub fn fetch_cluster(
    config: &Config,
    host: &impl RequestHost,
    head: &RequestHead,
) -> Option<String> {
    if let Some(c) = &config.upstream_cluster {
        return Some(c.clone());
    }
    let cluster = match &head.cluster {
        Some(c) => c.clone(),
        None => host.property(&CLUSTER)?,
    };
    String::from_utf8(cluster).ok().filter(|c| !c.is_empty())
}

/// The caller's identity from the configured source; read only for private operations.
pub fn read_identity(
    config: &Config,
    host: &impl RequestHost,
    head: &RequestHead,
) -> Option<Vec<u8>> {
    match &config.identity {
        None => None,
        // Repeated values are joined: every one of them takes part in the scope.
        Some(IdentitySource::Header(name)) => header_identity(name, head),
        // Keyed by issuer and claim: two providers writing one payload key may both have a
        // `sub` "1234" for two different people.
        Some(source @ IdentitySource::JwtClaim { .. }) => {
            let claim = host.property(&source.property_path()?)?;
            let issuer = source
                .issuer_path()
                .and_then(|p| host.property(&p))
                .unwrap_or_default();
            Some(issued_identity(&issuer, &claim))
        }
    }
}

/// The identity an `identity.header` source reads: every value of the header, joined.
pub fn header_identity(name: &str, head: &RequestHead) -> Option<Vec<u8>> {
    let values: Vec<&[u8]> = head
        .headers
        .iter()
        .filter(|(n, _)| *n == name.as_bytes())
        .map(|(_, v)| v)
        .collect();
    (!values.is_empty()).then(|| values.join(&b","[..]))
}

/// Issuer and claim in one unambiguous byte string (the issuer's length first).
pub fn issued_identity(issuer: &[u8], claim: &[u8]) -> Vec<u8> {
    let mut id = Vec::with_capacity(4 + issuer.len() + claim.len());
    id.extend_from_slice(&(issuer.len() as u32).to_le_bytes());
    id.extend_from_slice(issuer);
    id.extend_from_slice(claim);
    id
}

/// Per-route overrides from `filter_metadata.<namespace>` on the matched route: the namespace in
/// one property read (a host call costs more than the rest of a hit's own work), field by field
/// only when Envoy cannot serialize the whole namespace (1.40 refuses one holding a null).
fn read_route_override(config: &Config, host: &impl RequestHost) -> RouteOverride {
    let Some(ns) = &config.route_metadata else {
        return RouteOverride::default();
    };
    let namespace = ["xds", "route_metadata", "filter_metadata", ns.as_str()];
    let whole = host.property_or_error(&namespace);
    if let Ok(None) = whole {
        return RouteOverride::default();
    }
    let fields = match &whole {
        Ok(Some(bytes)) => pairs(bytes),
        _ => None,
    };
    match fields {
        Some(fields) => route_override(|name| {
            fields
                .iter()
                .find(|(n, _)| *n == name.as_bytes())
                .map(|(_, v)| v.to_vec())
        }),
        // Refused, or not a map as Envoy 1.40 writes one: the fields themselves, rather than guess.
        None => route_override(|field| {
            host.property(&["xds", "route_metadata", "filter_metadata", ns, field])
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::fake::FakeHost;

    fn host(headers: &[(&str, &str)]) -> FakeHost {
        let h = FakeHost::new();
        *h.request_headers.borrow_mut() = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
            .collect();
        h
    }

    #[test]
    fn the_head_joins_repeated_headers_and_keeps_them_all() {
        let config = Config::default();
        let h = host(&[
            (":method", "POST"),
            (":path", "/graphql"),
            ("accept", "a"),
            ("accept", "b"),
            ("cookie", "x=1"),
            ("x-other", "o"),
        ]);
        let head = read_head(&config, &h);
        assert_eq!(head.method, b"POST");
        assert_eq!(head.accept.as_deref(), Some(&b"a,b"[..]));
        assert_eq!(head.vary, vec![None, Some(b"x=1".to_vec())]);
        assert_eq!(head.headers.len(), 6);
        assert_eq!(h.property_reads.get(), 0, "headers only");
    }

    #[test]
    fn route_and_cluster_are_read_only_when_configured() {
        let h = host(&[]);
        h.properties
            .borrow_mut()
            .insert("xds.cluster_name".into(), b"origin".to_vec());
        let mut head = RequestHead::default();
        let lean = Config::parse(br#"{"key_by_cluster":false}"#).unwrap();
        read_route(&lean, &h, &mut head);
        assert_eq!((head.cluster.clone(), h.property_reads.get()), (None, 0));
        assert_eq!(fetch_cluster(&lean, &h, &head).as_deref(), Some("origin"));
        let keyed = Config::default();
        read_route(&keyed, &h, &mut head);
        assert_eq!(head.cluster.as_deref(), Some(&b"origin"[..]));
        let reads = h.property_reads.get();
        assert_eq!(fetch_cluster(&keyed, &h, &head).as_deref(), Some("origin"));
        assert_eq!(h.property_reads.get(), reads, "read once per request");
        let pinned = Config::parse(br#"{"upstream_cluster":"fixed"}"#).unwrap();
        assert_eq!(fetch_cluster(&pinned, &h, &head).as_deref(), Some("fixed"));
    }

    /// What Envoy 1.40 answered for `filter_metadata.graphql_cache` of `{ ttl_seconds: 2 }` and
    /// of `{ disabled: true }` (and `{}` for an empty `filter_metadata`).

    #[test]
    fn route_metadata_is_read_in_one_call_else_field_by_field() {
        let config = Config::parse(br#"{"route_metadata":"gc","key_by_cluster":false}"#).unwrap();
        let h = host(&[]);
        let ns = "xds.route_metadata.filter_metadata.gc";
        h.properties
            .borrow_mut()
            .insert(format!("{ns}.ttl_seconds"), 7.0f64.to_le_bytes().to_vec());
        h.properties
            .borrow_mut()
            .insert(format!("{ns}.disabled"), vec![1]);
        h.properties
            .borrow_mut()
            .insert(format!("{ns}.entities"), vec![0]);
        let mut head = RequestHead::default();
        read_route(&config, &h, &mut head);
        let expected = RouteOverride {
            ttl_seconds: Some(7),
            disabled: true,
            entities: Some(false),
            ..RouteOverride::default()
        };
        assert_eq!((head.route, h.property_reads.get()), (expected, 1));
        // A null elsewhere in the namespace: Envoy refuses the namespace, not its fields.
        h.unserializable.borrow_mut().insert(ns.to_string());
        let mut head = RequestHead::default();
        read_route(&config, &h, &mut head);
        assert_eq!(head.route, expected);
        assert_eq!(h.property_reads.get(), 1 + 1 + 5);
        // Bytes that are not a map as Envoy writes one: the fields are read too.
        h.unserializable.borrow_mut().clear();
        h.properties
            .borrow_mut()
            .insert(ns.to_string(), b"?".to_vec());
        let mut head = RequestHead::default();
        read_route(&config, &h, &mut head);
        assert_eq!(head.route, expected);
        // No metadata at all: one read, nothing overridden.
        let bare = host(&[]);
        let mut head = RequestHead::default();
        read_route(&config, &bare, &mut head);
        assert_eq!(
            (head.route, bare.property_reads.get()),
            (RouteOverride::default(), 1)
        );
    }

    #[test]
    fn identity_from_a_header_or_a_jwt_claim() {
        let by_header =
            Config::parse(br#"{"identity":{"source":"header","header":"x-user"}}"#).unwrap();
        let h = host(&[("x-user", "a"), ("x-user", "b")]);
        let head = read_head(&by_header, &h);
        assert_eq!(read_identity(&by_header, &h, &head), Some(b"a,b".to_vec()));
        let by_jwt = Config::parse(br#"{"identity":{"source":"jwt","claim":"sub"}}"#).unwrap();
        let path = by_jwt
            .identity
            .as_ref()
            .and_then(|s| s.property_path())
            .unwrap()
            .join(".");
        h.properties.borrow_mut().insert(path, b"alice".to_vec());
        let no_issuer = read_identity(&by_jwt, &h, &head).unwrap();
        let iss = by_jwt
            .identity
            .as_ref()
            .and_then(|s| s.issuer_path())
            .unwrap()
            .join(".");
        h.properties
            .borrow_mut()
            .insert(iss.clone(), b"https://a.example".to_vec());
        let from_a = read_identity(&by_jwt, &h, &head).unwrap();
        h.properties
            .borrow_mut()
            .insert(iss, b"https://b.example".to_vec());
        let from_b = read_identity(&by_jwt, &h, &head).unwrap();
        assert_ne!(from_a, from_b, "one sub from two issuers: two people");
        assert_ne!(from_a, no_issuer);
        assert_eq!(read_identity(&Config::default(), &h, &head), None);
    }
}
