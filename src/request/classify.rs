//! The request side of the filter, free of host calls: from the request head (and body) to either
//! a cache key or the reason to pass the request through.

use crate::config::Config;
use crate::config::Scope;
use crate::effects::header_block::HeaderBlock;
use crate::invalidate::shape::ResponseShape;
use crate::invalidate::tags::OperationTags;
use crate::request::apq::sha256_hex;
use crate::request::bypass::Bypass;
use crate::request::canonical::{
    canonicalize, mutation_shape, CanonicalError, CanonicalOperation, OperationKind,
};
use crate::request::http::{
    is_json_content_type, parse_get_query, parse_post_body, split_path, GraphQlRequest,
};
use crate::request::key::{build_key, CacheKey, KeyContext};
use crate::request::memo::MemoInput;
use crate::request::operations::{Operations, ReadOperation};
use crate::request::rules::{request_policy, RequestPolicy, RouteOverride};
use crate::request::variant::Variant;
use serde::de::IgnoredAny;
use serde::Deserialize;
use std::rc::Rc;

/// What the filter read from the request headers. Owned bytes: header values need not be UTF-8.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestHead {
    pub method: Vec<u8>,
    /// The full `:path`, query string included.
    pub path: Vec<u8>,
    pub authority: Vec<u8>,
    pub content_type: Option<Vec<u8>>,
    pub content_encoding: Option<Vec<u8>>,
    pub content_length: Option<Vec<u8>>,
    pub accept: Option<Vec<u8>>,
    /// Values of `config.vary_headers`, in the same order.
    pub vary: Vec<Option<Vec<u8>>>,
    /// Validators of a conditional request: not in the key, answered per request.
    pub if_none_match: Option<Vec<u8>>,
    pub if_modified_since: Option<Vec<u8>>,
    /// Every request header as received, for replaying the request in a shared fetch.
    pub headers: HeaderBlock,
    /// The upstream cluster the route chose: routes chosen by headers outside the key (a canary
    /// header, say) must not share entries.
    pub cluster: Option<Vec<u8>>,
    /// What the route's metadata says.
    pub route: RouteOverride,
}

/// The request head of `headers` (a request's, or one described to the explain endpoint).
pub fn head_of(config: &Config, headers: HeaderBlock) -> RequestHead {
    let vary_names = &config.vary_headers;
    let mut head = RequestHead {
        vary: vec![None; vary_names.len()],
        ..RequestHead::default()
    };
    for (name, value) in headers.iter() {
        let slot = match name {
            b":method" => &mut head.method,
            b":path" => &mut head.path,
            b":authority" => &mut head.authority,
            b"content-type" => head.content_type.get_or_insert_with(Vec::new),
            b"content-encoding" => head.content_encoding.get_or_insert_with(Vec::new),
            b"content-length" => head.content_length.get_or_insert_with(Vec::new),
            b"accept" => head.accept.get_or_insert_with(Vec::new),
            b"if-none-match" => head.if_none_match.get_or_insert_with(Vec::new),
            b"if-modified-since" => head.if_modified_since.get_or_insert_with(Vec::new),
            other => match vary_names.iter().position(|v| v.as_bytes() == other) {
                Some(i) => head.vary[i].get_or_insert_with(Vec::new),
                None => continue,
            },
        };
        if !slot.is_empty() {
            slot.push(b',');
        }
        slot.extend_from_slice(value);
    }
    head.headers = headers;
    head
}

impl RequestHead {
    /// Whether the request carries validators (`if-none-match`, `if-modified-since`).
    pub fn conditional(&self) -> bool {
        self.if_none_match.is_some() || self.if_modified_since.is_some()
    }
}

/// A cacheable request, identified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    pub key: CacheKey,
    pub operation: Rc<CanonicalOperation>,
    pub policy: RequestPolicy,
    /// A checked persisted-query hash and its text, to teach the table.
    pub teaches: Option<Rc<(String, String)>>,
    /// A persisted query sent by its hash alone (resolved from the table).
    pub hash_only: bool,
    /// The key as the what-if replays other `vary_headers` (`None`: not recorded).
    pub variant: Option<Variant>,
}

/// The method persisted queries are keyed with, GET or POST alike.
const PERSISTED_METHOD: &[u8] = b"PERSISTED";

/// A request the filter does not cache: why, and its operation when it was read that far
/// (`None`: refused before), so that bypasses can be counted per operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bypassed {
    pub reason: Bypass,
    pub operation: Option<Rc<OperationTags>>,
}

impl From<Bypass> for Bypassed {
    fn from(reason: Bypass) -> Self {
        Bypassed {
            reason,
            operation: None,
        }
    }
}

/// What the filter keeps of a classification: small enough to memoize.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    pub key: CacheKey,
    pub policy: RequestPolicy,
    /// What the operation contributes to its entry's tags.
    pub operation: Rc<OperationTags>,
    /// See [`Classified::teaches`].
    pub teaches: Option<Rc<(String, String)>>,
    /// See [`Classified::hash_only`].
    pub hash_only: bool,
    /// See [`Classified::variant`].
    pub variant: Option<Variant>,
}

impl From<Classified> for Decided {
    fn from(c: Classified) -> Decided {
        Decided {
            key: c.key,
            policy: c.policy,
            operation: Rc::new(OperationTags {
                name: c.operation.name.clone(),
                root_fields: c.operation.root_fields.clone(),
            }),
            teaches: c.teaches,
            hash_only: c.hash_only,
            variant: c.variant,
        }
    }
}

/// Scopes a private entry to the caller: the identity is only read for requests whose policy is
/// private, and a private request without one is not cached.
pub fn scope_key(decided: Decided, identity: Option<&[u8]>) -> Result<Decided, Bypass> {
    match decided.policy.scope {
        Scope::Public => Ok(decided),
        Scope::Private => {
            let id = identity
                .filter(|id| !id.is_empty())
                .ok_or(Bypass::NoIdentity)?;
            Ok(Decided {
                key: decided.key.scoped(id),
                variant: decided.variant.map(|v| v.scoped(id)),
                ..decided
            })
        }
    }
}

/// Everything classification reads from a request (for a given configuration), so that equal
/// inputs can reuse one classification. `body` is empty for a GET (its query is in the path).
pub fn memo_input(head: &RequestHead, body: &[u8]) -> MemoInput {
    let mut input = MemoInput::with_capacity(body.len() + head.path.len() + 128);
    input.field(&head.method);
    input.field(&head.path);
    input.field(&head.authority);
    input.optional(head.accept.as_deref());
    input.optional(head.cluster.as_deref());
    for value in &head.vary {
        input.optional(value.as_deref());
    }
    let route = &head.route;
    for value in [
        route.ttl_seconds,
        route.stale_while_revalidate_seconds,
        route.stale_if_error_seconds,
    ] {
        input.optional(value.map(u64::to_le_bytes).as_ref().map(|b| &b[..]));
    }
    input.field(&[u8::from(route.disabled)]);
    input.field(body);
    input
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadersVerdict {
    /// Not a path this filter handles: no `x-cache` header, nothing counted.
    NotHandled,
    Bypass(Bypass),
    /// A POST whose body must be read before deciding.
    NeedBody,
    Ready(Classified),
}

/// The decision that can be taken from the headers alone.
pub fn classify_headers(
    config: &Config,
    head: &RequestHead,
    end_of_stream: bool,
) -> HeadersVerdict {
    let Ok(full_path) = std::str::from_utf8(&head.path) else {
        return HeadersVerdict::Bypass(Bypass::BadQueryString);
    };
    let (path, query_string) = split_path(full_path);
    if !config.handles_path(path) {
        return HeadersVerdict::NotHandled;
    }
    match head.method.as_slice() {
        b"GET" => match classify_get(config, head, path, query_string, Known::nothing()) {
            Ok(c) => HeadersVerdict::Ready(c),
            Err(b) => HeadersVerdict::Bypass(b.reason),
        },
        b"POST" => {
            if !head
                .content_type
                .as_deref()
                .is_some_and(is_json_content_type)
            {
                return HeadersVerdict::Bypass(Bypass::ContentType);
            }
            if head
                .content_encoding
                .as_deref()
                .is_some_and(|v| !v.trim_ascii().eq_ignore_ascii_case(b"identity"))
            {
                return HeadersVerdict::Bypass(Bypass::RequestEncoding);
            }
            if end_of_stream {
                return HeadersVerdict::Bypass(Bypass::EmptyBody);
            }
            if let Some(len) = head.content_length.as_deref().and_then(parse_length) {
                if len > config.max_body_bytes as u64 {
                    return HeadersVerdict::Bypass(Bypass::BodyTooLarge);
                }
            }
            HeadersVerdict::NeedBody
        }
        _ => HeadersVerdict::Bypass(Bypass::Method),
    }
}

/// Whether the filter handles this request at all (its path, without the query string).
/// Non-UTF-8 paths are handled, so that they are counted as bad input.
pub fn handles(config: &Config, raw_path: &[u8]) -> bool {
    match std::str::from_utf8(raw_path) {
        Ok(full) => config.handles_path(split_path(full).0),
        Err(_) => true,
    }
}

/// A GET is decided from its query string alone.
pub fn classify_get(
    config: &Config,
    head: &RequestHead,
    path: &str,
    query_string: Option<&str>,
    known: Known<'_>,
) -> Result<Classified, Bypassed> {
    let req = parse_get_query(query_string.unwrap_or_default())?;
    identify(config, head, path, req, known)
}

/// Finds the query text of a persisted-query hash (`request::apq`), for hash-only requests.
pub type Resolve<'a> = &'a dyn Fn(&str) -> Option<String>;

/// What classification may reuse from earlier requests.
pub struct Known<'a> {
    /// The texts of persisted queries, by hash.
    pub persisted: Resolve<'a>,
    /// The operations a worker has read (`None`: each is read afresh).
    pub operations: Option<&'a mut Operations>,
}

impl<'a> Known<'a> {
    /// Nothing: every hash unknown, every operation read afresh.
    pub fn nothing() -> Known<'static> {
        Known {
            persisted: &no_persisted_queries,
            operations: None,
        }
    }

    /// Persisted queries from `persisted`, operations read afresh.
    pub fn persisted(persisted: Resolve<'a>) -> Known<'a> {
        Known {
            persisted,
            operations: None,
        }
    }

    fn operation(&mut self, query: &str, name: Option<&str>, config: &Config) -> ReadOperation {
        match &mut self.operations {
            Some(memo) => memo.read(query, name, config.limits()),
            None => canonicalize(query, name, config.limits()).map(Rc::new),
        }
    }
}

/// For callers without persisted queries: every hash is unknown.
pub fn no_persisted_queries(_: &str) -> Option<String> {
    None
}

/// The decision for a POST once its whole body is buffered.
pub fn classify_body(
    config: &Config,
    head: &RequestHead,
    body: &[u8],
) -> Result<Classified, Bypassed> {
    classify_post(config, head, body, Known::nothing())
}

/// [`classify_body`] with persisted queries resolved by `persisted`.
pub fn classify_post(
    config: &Config,
    head: &RequestHead,
    body: &[u8],
    known: Known<'_>,
) -> Result<Classified, Bypassed> {
    if body.len() > config.max_body_bytes {
        return Err(Bypass::BodyTooLarge.into());
    }
    // The whole path, query string included: some servers let URL parameters override the body.
    let full_path = std::str::from_utf8(&head.path).map_err(|_| Bypass::BadQueryString)?;
    let req = parse_post_body(body)?;
    identify(config, head, full_path, req, known)
}

/// The shape of a mutation's answer (see `invalidate::shape`), from the request bytes the origin
/// receives: a GET's query string, or a POST's body (`body`). `None` whenever the origin could
/// execute another operation than the one read here: a body that has a GraphQL member twice
/// (which one a server takes varies), or a POST whose query string carries GraphQL parameters
/// too (some servers let those win). Then the answer's objects purge nothing.
pub fn mutation_shape_of(
    config: &Config,
    head: &RequestHead,
    body: Option<&[u8]>,
    persisted: Resolve<'_>,
) -> Option<ResponseShape> {
    let full_path = std::str::from_utf8(&head.path).ok()?;
    let query_string = split_path(full_path).1;
    let mut req = match body {
        None => parse_get_query(query_string.unwrap_or_default()).ok()?,
        Some(body) => {
            if query_string.is_some_and(names_graphql_parameters)
                || serde_json::from_slice::<GraphQlMembers>(body).is_err()
            {
                return None;
            }
            parse_post_body(body).ok()?
        }
    };
    resolve_persisted(&mut req, persisted).ok()?;
    mutation_shape(&req.query, req.operation_name.as_deref(), config.limits())
}

/// The members of a POST body that choose the operation; reading it fails on one given twice.
#[derive(Deserialize)]
struct GraphQlMembers {
    #[serde(rename = "query")]
    _query: Option<IgnoredAny>,
    #[serde(rename = "operationName")]
    _operation_name: Option<IgnoredAny>,
    #[serde(rename = "extensions")]
    _extensions: Option<IgnoredAny>,
}

/// Whether a query string may name a GraphQL parameter (encoded names count, unread).
fn names_graphql_parameters(query_string: &str) -> bool {
    query_string.split('&').any(|pair| {
        let name = pair.split_once('=').map_or(pair, |(n, _)| n);
        name.contains(['%', '+'])
            || ["query", "operationName", "variables", "extensions"]
                .iter()
                .any(|p| name.eq_ignore_ascii_case(p))
    })
}

/// A persisted query's text, from the request or the table. `Some(hash)` when the request taught
/// a hash the filter checked itself (the exchange writes it to the table).
fn resolve_persisted(
    req: &mut GraphQlRequest,
    persisted: Resolve<'_>,
) -> Result<Option<String>, Bypass> {
    let Some(p) = &req.persisted else {
        return Ok(None);
    };
    if !p.with_query {
        req.query = persisted(&p.sha256).ok_or(Bypass::PersistedQueryUnknown)?;
        return Ok(None);
    }
    if sha256_hex(&req.query) == p.sha256 {
        return Ok(Some(p.sha256.clone()));
    }
    // A mismatch teaches nothing, and the request is keyed as any other (its origin refuses it).
    req.persisted = None;
    Ok(None)
}

fn identify(
    config: &Config,
    head: &RequestHead,
    path: &str,
    mut req: GraphQlRequest,
    mut known: Known<'_>,
) -> Result<Classified, Bypassed> {
    let hash_only = req.persisted.as_ref().is_some_and(|p| !p.with_query);
    let teaches = resolve_persisted(&mut req, known.persisted)?;
    let operation = known
        .operation(&req.query, req.operation_name.as_deref(), config)
        .map_err(|e| match e {
            CanonicalError::TooDeep => Bypass::TooDeep,
            CanonicalError::TooWide => Bypass::TooWide,
            CanonicalError::Invalid => Bypass::InvalidGraphql,
            CanonicalError::UnknownOperation => Bypass::UnknownOperation,
            CanonicalError::UnknownFragment => Bypass::UnknownFragment,
            CanonicalError::Unsupported => Bypass::UnsupportedString,
        })?;
    let refused = |reason| Bypassed {
        reason,
        operation: Some(Rc::new(OperationTags {
            name: operation.name.clone(),
            root_fields: operation.root_fields.clone(),
        })),
    };
    match operation.kind {
        OperationKind::Query => {}
        OperationKind::Mutation => return Err(refused(Bypass::Mutation)),
        OperationKind::Subscription => return Err(refused(Bypass::Subscription)),
    }
    let policy = request_policy(
        config.lifetimes(),
        config.default_scope,
        &config.rules,
        &operation,
        head.route,
    )
    .map_err(refused)?;
    let mut context = key_context(config, head, path);
    // A persisted query's hash-only request (usually a GET) and its full-text twin (usually the
    // POST after `PersistedQueryNotFound`) ask the same thing: one key for both.
    if req.persisted.is_some() {
        context.method = PERSISTED_METHOD;
    }
    let key = build_key(&context, &req, &operation);
    let variant = (config.what_if_on() && !config.vary_headers.is_empty())
        .then(|| Variant::of(&context, &req, &operation));
    let teaches = teaches.map(|sha256| Rc::new((sha256, req.query.clone())));
    Ok(Classified {
        key,
        operation,
        policy,
        teaches,
        hash_only,
        variant,
    })
}

/// The HTTP dimensions of the key for a request to `path` (a POST's query string included).
pub fn key_context<'a>(config: &'a Config, head: &'a RequestHead, path: &'a str) -> KeyContext<'a> {
    KeyContext {
        method: &head.method,
        authority: &head.authority,
        path: path.as_bytes(),
        accept: head.accept.as_deref(),
        cluster: head.cluster.as_deref(),
        vary: config
            .vary_headers
            .iter()
            .zip(head.vary.iter().chain(std::iter::repeat(&None)))
            .map(|(name, value)| (name.as_str(), value.as_deref()))
            .collect(),
    }
}

fn parse_length(v: &[u8]) -> Option<u64> {
    std::str::from_utf8(v).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mutation_is_mapped_only_when_the_origin_reads_the_same_operation() {
        let c = Config::default();
        let post = head("POST", "/graphql");
        let body = br#"{"query":"mutation { a { __typename id } }"}"#;
        let shape = |h: &RequestHead, b: Option<&[u8]>| {
            mutation_shape_of(&c, h, b, &no_persisted_queries).is_some()
        };
        assert!(shape(&post, Some(body)));
        assert!(shape(&head("POST", "/graphql?trace=1"), Some(body)));
        let twice = br#"{"query":"mutation { a { __typename id } }","query":"mutation { b }"}"#;
        assert!(
            !shape(&post, Some(twice)),
            "which `query` would the origin take?"
        );
        for path in [
            "/graphql?query=mutation%7Bb%7D",
            "/graphql?operationName=B",
            "/graphql?qu%65ry=x",
        ] {
            assert!(!shape(&head("POST", path), Some(body)), "{path}");
        }
        assert!(shape(&head("GET", "/graphql?query=mutation%7Ba%7D"), None));
        assert!(
            !shape(&head("GET", "/graphql?query=%7Ba%7D"), None),
            "a query"
        );
        assert!(!shape(
            &post,
            Some(br#"{"query":"mutation { a { ...F } }"}"#)
        ));
        let persisted = r#"{"extensions":{"persistedQuery":{"version":1,"sha256Hash":"%"}}}"#
            .replace('%', &"a".repeat(64));
        let known = |_: &str| Some("mutation { a { id } }".to_string());
        assert!(mutation_shape_of(&c, &post, Some(persisted.as_bytes()), &known).is_some());
        assert!(!shape(&post, Some(persisted.as_bytes())), "unknown hash");
    }

    fn head(method: &str, path: &str) -> RequestHead {
        RequestHead {
            method: method.as_bytes().to_vec(),
            path: path.as_bytes().to_vec(),
            authority: b"example.com".to_vec(),
            content_type: Some(b"application/json".to_vec()),
            vary: vec![None, None],
            ..Default::default()
        }
    }

    #[test]
    fn get_is_decided_from_headers() {
        let c = Config::default();
        let v = classify_headers(&c, &head("GET", "/graphql?query=%7Ba%7D"), true);
        assert!(matches!(v, HeadersVerdict::Ready(_)));
        let v = classify_headers(&c, &head("GET", "/graphql?query=mutation%7Ba%7D"), true);
        assert_eq!(v, HeadersVerdict::Bypass(Bypass::Mutation));
    }

    #[test]
    fn post_needs_its_body() {
        let c = Config::default();
        assert_eq!(
            classify_headers(&c, &head("POST", "/graphql"), false),
            HeadersVerdict::NeedBody
        );
        assert_eq!(
            classify_headers(&c, &head("POST", "/graphql"), true),
            HeadersVerdict::Bypass(Bypass::EmptyBody)
        );
        let mut h = head("POST", "/graphql");
        h.content_type = Some(b"text/plain".to_vec());
        assert_eq!(
            classify_headers(&c, &h, false),
            HeadersVerdict::Bypass(Bypass::ContentType)
        );
        let mut h = head("POST", "/graphql");
        h.content_length = Some(b"999999999".to_vec());
        assert_eq!(
            classify_headers(&c, &h, false),
            HeadersVerdict::Bypass(Bypass::BodyTooLarge)
        );
        let mut h = head("POST", "/graphql");
        h.content_encoding = Some(b"gzip".to_vec());
        assert_eq!(
            classify_headers(&c, &h, false),
            HeadersVerdict::Bypass(Bypass::RequestEncoding)
        );
        assert_eq!(
            classify_headers(&c, &head("PUT", "/graphql"), false),
            HeadersVerdict::Bypass(Bypass::Method)
        );
    }

    #[test]
    fn paths_outside_the_configuration_are_not_handled() {
        let c = Config::parse(br#"{"paths":["/graphql"]}"#).unwrap();
        assert_eq!(
            classify_headers(&c, &head("POST", "/other"), false),
            HeadersVerdict::NotHandled
        );
        assert_eq!(
            classify_headers(&c, &head("POST", "/graphql?x=1"), false),
            HeadersVerdict::NeedBody
        );
    }

    #[test]
    fn get_and_post_of_one_query_are_distinct_keys_but_each_stable() {
        let c = Config::default();
        let h = head("POST", "/graphql");
        let a = classify_body(&c, &h, br#"{"query":"{ a }"}"#).unwrap();
        let b = classify_body(&c, &h, br#"{"query":"query { a }", "variables": {}}"#).unwrap();
        assert_eq!(a.key, b.key);
        let HeadersVerdict::Ready(g) =
            classify_headers(&c, &head("GET", "/graphql?query=%7Ba%7D"), true)
        else {
            panic!("GET not ready")
        };
        assert_ne!(a.key, g.key);
    }

    #[test]
    fn vary_header_values_separate_keys() {
        let c = Config::default(); // authorization, cookie
        let mut a = head("POST", "/graphql");
        a.vary = vec![Some(b"Bearer alice".to_vec()), None];
        let mut b = a.clone();
        b.vary = vec![Some(b"Bearer bob".to_vec()), None];
        let body = br#"{"query":"{ me { id } }"}"#;
        assert_ne!(
            classify_body(&c, &a, body).unwrap().key,
            classify_body(&c, &b, body).unwrap().key
        );
    }

    #[test]
    fn private_operations_are_keyed_by_identity_and_need_one() {
        let c = Config::parse(
            br#"{"identity":{"source":"header","header":"x-user"},"rules":[{"field":"users","scope":"public"}]}"#,
        )
        .unwrap();
        let h = head("POST", "/graphql");
        let decide = |body: &[u8], who: Option<&[u8]>| {
            scope_key(Decided::from(classify_body(&c, &h, body).unwrap()), who)
        };
        let private = br#"{"query":"{ me { id } }"}"#;
        let public = br#"{"query":"{ users { id } }"}"#;
        let a = decide(private, Some(b"alice")).unwrap();
        assert_eq!(a.policy.scope, Scope::Private);
        assert_ne!(a.key, decide(private, Some(b"bob")).unwrap().key);
        assert_eq!(decide(private, Some(b"alice")).unwrap().key, a.key);
        assert_eq!(decide(private, None), Err(Bypass::NoIdentity));
        assert_eq!(decide(private, Some(b"")), Err(Bypass::NoIdentity));
        assert_eq!(
            decide(public, Some(b"alice")).unwrap().key,
            decide(public, Some(b"bob")).unwrap().key
        );
        assert_eq!(
            decide(public, None).unwrap().key,
            decide(public, Some(b"bob")).unwrap().key
        );
    }

    #[test]
    fn route_overrides_reach_the_policy() {
        let c = Config::default();
        let mut h = head("POST", "/graphql");
        h.route = RouteOverride {
            ttl_seconds: Some(3),
            ..RouteOverride::default()
        };
        let body = br#"{"query":"{ a }"}"#;
        assert_eq!(classify_body(&c, &h, body).unwrap().policy.ttl_seconds, 3);
        h.route.disabled = true;
        let refused = classify_body(&c, &h, body).unwrap_err();
        assert_eq!(refused.reason, Bypass::RouteDisabled);
        assert_eq!(refused.operation.unwrap().name, None, "anonymous, read");
    }

    #[test]
    fn a_bypass_after_parsing_names_its_operation_and_one_before_does_not() {
        let c = Config::default();
        let h = head("POST", "/graphql");
        let m = classify_body(&c, &h, br#"{"query":"mutation Save { a }"}"#).unwrap_err();
        assert_eq!(m.reason, Bypass::Mutation);
        assert_eq!(m.operation.unwrap().name.as_deref(), Some("Save"));
        let bad = classify_body(&c, &h, b"{nope").unwrap_err();
        assert_eq!(bad.operation, None);
    }

    #[test]
    fn a_post_query_string_and_the_route_cluster_are_part_of_the_key() {
        let c = Config::default();
        let body = br#"{"query":"{ a }"}"#;
        let plain = classify_body(&c, &head("POST", "/graphql"), body)
            .unwrap()
            .key;
        let with_query = classify_body(&c, &head("POST", "/graphql?query=%7Bsecret%7D"), body)
            .unwrap()
            .key;
        assert_ne!(plain, with_query);
        let mut canary = head("POST", "/graphql");
        canary.cluster = Some(b"origin-v2".to_vec());
        assert_ne!(plain, classify_body(&c, &canary, body).unwrap().key);
    }

    #[test]
    fn memo_inputs_cover_every_dimension_of_the_key() {
        let base = head("POST", "/graphql");
        let body = br#"{"query":"{ a }"}"#;
        let reference = memo_input(&base, body);
        let mut variants = Vec::new();
        let mut h = base.clone();
        h.authority = b"other".to_vec();
        variants.push(h);
        let mut h = base.clone();
        h.path = b"/v2".to_vec();
        variants.push(h);
        let mut h = base.clone();
        h.method = b"GET".to_vec();
        variants.push(h);
        let mut h = base.clone();
        h.accept = Some(b"*/*".to_vec());
        variants.push(h);
        let mut h = base.clone();
        h.vary = vec![Some(b"Bearer x".to_vec()), None];
        variants.push(h);
        let mut h = base.clone();
        h.route.ttl_seconds = Some(5);
        variants.push(h);
        let mut h = base.clone();
        h.route.disabled = true;
        variants.push(h);
        let mut h = base.clone();
        h.cluster = Some(b"canary".to_vec());
        variants.push(h);
        for v in &variants {
            assert_ne!(memo_input(v, body), reference, "{v:?}");
        }
        assert_ne!(memo_input(&base, br#"{"query":"{ b }"}"#), reference);
        assert_eq!(memo_input(&base.clone(), body), reference);
    }

    #[test]
    fn bad_bodies_bypass() {
        let c = Config::default();
        let h = head("POST", "/graphql");
        let reason = |body: &[u8]| classify_body(&c, &h, body).map_err(|b| b.reason);
        assert_eq!(reason(b"{nope"), Err(Bypass::MalformedJson));
        assert_eq!(reason(br#"{"query":"{"}"#), Err(Bypass::InvalidGraphql));
        let big = vec![b' '; c.max_body_bytes + 1];
        assert_eq!(reason(&big), Err(Bypass::BodyTooLarge));
        let deep = format!(r#"{{"query":"{}{}"}}"#, "{a".repeat(40), "}".repeat(40));
        assert_eq!(reason(deep.as_bytes()), Err(Bypass::TooDeep));
    }
}
