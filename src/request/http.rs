//! GraphQL over HTTP: turns a POST JSON body or GET query string into a [`GraphQlRequest`].
//!
//! Anything that is not a single, well-formed GraphQL request is a [`Bypass`]: the filter lets it
//! through to the origin exactly as it came, so the origin produces whatever error it would have.

use crate::json::{self, Json, JsonError};
use crate::request::bypass::Bypass;
use serde_json::Value;
use std::borrow::Cow;

/// One GraphQL request with its JSON parts already in canonical text form (see `crate::json`:
/// members sorted, numbers as written), so equal inputs give equal strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphQlRequest {
    pub query: String,
    pub operation_name: Option<String>,
    /// `None` when absent, `null` or `{}`: all three mean "no variables" to a GraphQL server.
    pub variables: Option<String>,
    /// `None` when absent, `null` or `{}`.
    pub extensions: Option<String>,
    /// Other top-level body members or other GET parameters. Unknown to us, so they stay in the
    /// key rather than being guessed irrelevant.
    pub extra: Option<String>,
    /// An Automatic Persisted Query (`extensions.persistedQuery`): its SHA-256 in lower-case hex,
    /// and whether the request carried the query text too. Hash-only requests have an empty
    /// `query` until the hash is resolved.
    pub persisted: Option<Persisted>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Persisted {
    pub sha256: String,
    pub with_query: bool,
}

/// `extensions.persistedQuery` of Apollo's protocol: version 1 and a SHA-256 in hex.
fn persisted_hash(extensions: Option<&str>) -> Option<String> {
    let value: Value = serde_json::from_str(extensions?).ok()?;
    let pq = value.get("persistedQuery")?;
    if pq.get("version")?.as_u64()? != 1 {
        return None;
    }
    let hash = pq.get("sha256Hash")?.as_str()?;
    (hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| hash.to_ascii_lowercase())
}

/// The query text, or (with a persisted-query hash) none yet.
fn query_or_persisted(
    query: Option<String>,
    extensions: Option<&str>,
) -> Result<(String, Option<Persisted>), Bypass> {
    let hash = persisted_hash(extensions);
    match (query, hash) {
        (Some(q), hash) => Ok((
            q,
            hash.map(|sha256| Persisted {
                sha256,
                with_query: true,
            }),
        )),
        (None, Some(sha256)) => Ok((
            String::new(),
            Some(Persisted {
                sha256,
                with_query: false,
            }),
        )),
        (None, None) => Err(Bypass::MissingQuery),
    }
}

/// Whether a request's `content-type` is JSON a GraphQL server reads as we do:
/// `application/json`, bare or with `charset=utf-8` alone (names and values case-insensitive).
/// Any other parameter (another charset, `foo=bar`) is not the same request: a GraphQL-over-HTTP
/// server may refuse it (415) where it answers the plain one, so it must not share its entry.
pub fn is_json_content_type(value: &[u8]) -> bool {
    let mut parts = value.split(|&b| b == b';');
    let media = parts.next().unwrap_or_default();
    if !media.trim_ascii().eq_ignore_ascii_case(b"application/json") {
        return false;
    }
    match (parts.next(), parts.next()) {
        (None, _) => true,
        (Some(param), None) => param.trim_ascii().eq_ignore_ascii_case(b"charset=utf-8"),
        (Some(_), Some(_)) => false,
    }
}

fn json_bypass(e: JsonError) -> Bypass {
    match e {
        JsonError::Malformed => Bypass::MalformedJson,
        JsonError::DuplicateMember => Bypass::DuplicateMember,
    }
}

/// Takes the member `name` out of sorted `members`.
fn take<'a>(members: &mut Vec<(Cow<'a, str>, Json<'a>)>, name: &str) -> Option<Json<'a>> {
    let i = members.binary_search_by(|m| (*m.0).cmp(name)).ok()?;
    Some(members.remove(i).1)
}

/// A string member that may also be absent or `null`; `Err(())` for any other type.
fn optional_string(value: Option<Json<'_>>) -> Result<Option<String>, ()> {
    match value {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(s)) => Ok(Some(s.into_owned())),
        Some(_) => Err(()),
    }
}

/// Parses a `POST` body.
pub fn parse_post_body(body: &[u8]) -> Result<GraphQlRequest, Bypass> {
    let read = read_post_body(body)?;
    Ok(GraphQlRequest {
        query: read.query,
        operation_name: read.operation_name,
        variables: read.variables.map(|v| v.to_canonical()),
        extensions: read.extensions,
        extra: read.extra,
        persisted: read.persisted,
    })
}

/// A `POST` body read as [`parse_post_body`] does, its variables still parsed (borrowed from the
/// body): for a caller that reads into them, so the body is parsed once.
#[derive(Debug)]
pub struct PostBody<'a> {
    pub query: String,
    pub operation_name: Option<String>,
    /// `None` when absent, `null` or `{}`; else an object.
    pub variables: Option<Json<'a>>,
    pub extensions: Option<String>,
    pub extra: Option<String>,
    pub persisted: Option<Persisted>,
}

/// Reads a `POST` body (see [`PostBody`]).
pub fn read_post_body(body: &[u8]) -> Result<PostBody<'_>, Bypass> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    match first {
        None => return Err(Bypass::EmptyBody),
        Some(b'[') => return Err(Bypass::Batched),
        Some(_) => {}
    }
    let text = std::str::from_utf8(body).map_err(|_| Bypass::MalformedJson)?;
    let Json::Object(mut members) = json::parse(text).map_err(json_bypass)? else {
        return Err(Bypass::NotAnObject);
    };
    let query = optional_string(take(&mut members, "query")).map_err(|()| Bypass::MissingQuery)?;
    let operation_name = optional_string(take(&mut members, "operationName"))
        .map_err(|()| Bypass::BadOperationName)?;
    let variables = object_member(take(&mut members, "variables")).ok_or(Bypass::BadVariables)?;
    let extensions = object_member(take(&mut members, "extensions"))
        .ok_or(Bypass::BadExtensions)?
        .map(|e| e.to_canonical());
    let (query, persisted) = query_or_persisted(query, extensions.as_deref())?;
    let extra = if members.is_empty() {
        None
    } else {
        let mut out = String::new();
        json::write_members(&mut out, &members);
        Some(out)
    };
    Ok(PostBody {
        query,
        operation_name,
        variables,
        extensions,
        extra,
        persisted,
    })
}

/// An optional object member: `Some(None)` for absent/null/empty, `None` when it is present but
/// not an object.
fn object_member(value: Option<Json<'_>>) -> Option<Option<Json<'_>>> {
    match value {
        None | Some(Json::Null) => Some(None),
        Some(Json::Object(m)) if m.is_empty() => Some(None),
        Some(v @ Json::Object(_)) => Some(Some(v)),
        Some(_) => None,
    }
}

/// Canonical text of an optional object member: `Some(None)` for absent/null/empty, `None` when
/// it is present but not an object.
fn json_object_member(value: Option<Json<'_>>) -> Option<Option<String>> {
    object_member(value).map(|o| o.map(|v| v.to_canonical()))
}

/// Parses the query string of a `GET` request (the part after `?`).
pub fn parse_get_query(query_string: &str) -> Result<GraphQlRequest, Bypass> {
    let mut query = None;
    let mut operation_name = None;
    let mut variables = None;
    let mut extensions = None;
    let mut extra: Vec<(String, String)> = Vec::new();
    for pair in query_string.split('&').filter(|p| !p.is_empty()) {
        let (raw_name, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = decode_component(raw_name).ok_or(Bypass::BadQueryString)?;
        let value = decode_component(raw_value).ok_or(Bypass::BadQueryString)?;
        let slot = match name.as_str() {
            "query" => &mut query,
            "operationName" => &mut operation_name,
            "variables" => &mut variables,
            "extensions" => &mut extensions,
            _ => {
                extra.push((name, value));
                continue;
            }
        };
        // A repeated GraphQL parameter is ambiguous: which one the origin uses is its business.
        if slot.replace(value).is_some() {
            return Err(Bypass::BadQueryString);
        }
    }
    let variables = match variables {
        None => None,
        Some(text) => parse_json_object_param(&text, Bypass::BadVariables)?,
    };
    let extensions = match extensions {
        None => None,
        Some(text) => parse_json_object_param(&text, Bypass::BadExtensions)?,
    };
    let (query, persisted) = query_or_persisted(query, extensions.as_deref())?;
    let extra = if extra.is_empty() {
        None
    } else {
        let list: Vec<Value> = extra
            .into_iter()
            .map(|(n, v)| Value::Array(vec![Value::String(n), Value::String(v)]))
            .collect();
        Some(Value::Array(list).to_string())
    };
    Ok(GraphQlRequest {
        query,
        operation_name: operation_name.filter(|n| !n.is_empty()),
        variables,
        extensions,
        extra,
        persisted,
    })
}

/// A GET parameter holding a JSON object; `bad` when it holds anything else (duplicate members
/// are refused as in a POST body).
fn parse_json_object_param(text: &str, bad: Bypass) -> Result<Option<String>, Bypass> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    match json::parse(text) {
        Ok(value) => json_object_member(Some(value)).ok_or(bad),
        Err(JsonError::DuplicateMember) => Err(Bypass::DuplicateMember),
        Err(JsonError::Malformed) => Err(bad),
    }
}

/// Strict `application/x-www-form-urlencoded` decoding: `+` is a space, `%XX` must be valid hex and
/// the result valid UTF-8. Lossy decoding would let two different requests share a key.
fn decode_component(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hi = hex_value(*bytes.get(i + 1)?)?;
                let lo = hex_value(*bytes.get(i + 2)?)?;
                out.push(hi << 4 | lo);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Splits a `:path` into the path and the query string (without `?`; fragments never reach a proxy).
pub fn split_path(path: &str) -> (&str, Option<&str>) {
    match path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "1c7e1e347f726166b5b1c55afd61f278cc9b45e00c108ec33d540a566379811b";

    #[test]
    fn persisted_queries_with_and_without_their_text() {
        let ext = format!(r#"{{"persistedQuery":{{"version":1,"sha256Hash":"{HASH}"}}}}"#);
        let hash_only = parse_post_body(format!(r#"{{"extensions":{ext}}}"#).as_bytes()).unwrap();
        assert_eq!(hash_only.query, "");
        assert_eq!(
            hash_only.persisted,
            Some(Persisted {
                sha256: HASH.into(),
                with_query: false
            })
        );
        let full =
            parse_post_body(format!(r#"{{"query":"{{ a }}","extensions":{ext}}}"#).as_bytes())
                .unwrap();
        assert!(full.persisted.unwrap().with_query);
        let get = parse_get_query(&format!("extensions={ext}")).unwrap();
        assert_eq!(get.persisted.map(|p| p.with_query), Some(false));
        assert_eq!(
            parse_get_query(r#"extensions={"persistedQuery":{"version":2,"sha256Hash":"x"}}"#),
            Err(Bypass::MissingQuery),
            "not a persisted query we know: no query, nothing to key"
        );
        assert_eq!(
            parse_post_body(br#"{"extensions":{"a":1}}"#),
            Err(Bypass::MissingQuery)
        );
    }

    #[test]
    fn post_body_parts() {
        let r = parse_post_body(
            br#"{"query":"{ a }","operationName":"Op","variables":{"b":1,"a":{"d":2,"c":3}},"extensions":{"x":1}}"#,
        )
        .unwrap();
        assert_eq!(r.query, "{ a }");
        assert_eq!(r.operation_name.as_deref(), Some("Op"));
        assert_eq!(r.variables.as_deref(), Some(r#"{"a":{"c":3,"d":2},"b":1}"#));
        assert_eq!(r.extensions.as_deref(), Some(r#"{"x":1}"#));
        assert_eq!(r.extra, None);
    }

    #[test]
    fn absent_null_and_empty_variables_are_the_same() {
        let a = parse_post_body(br#"{"query":"{a}"}"#).unwrap();
        let b = parse_post_body(br#"{"query":"{a}","variables":null}"#).unwrap();
        let c = parse_post_body(br#"{"query":"{a}","variables":{},"operationName":null}"#).unwrap();
        assert_eq!(a, b);
        assert_eq!(a, c);
    }

    #[test]
    fn explicit_null_variable_differs_from_absent() {
        let a = parse_post_body(br#"{"query":"{a}","variables":{"x":null}}"#).unwrap();
        let b = parse_post_body(br#"{"query":"{a}","variables":{}}"#).unwrap();
        assert_ne!(a.variables, b.variables);
    }

    #[test]
    fn number_forms_stay_distinct() {
        let a = parse_post_body(br#"{"query":"{a}","variables":{"x":1}}"#).unwrap();
        let b = parse_post_body(br#"{"query":"{a}","variables":{"x":1.0}}"#).unwrap();
        let c = parse_post_body(br#"{"query":"{a}","variables":{"x":"1"}}"#).unwrap();
        assert_ne!(a.variables, b.variables);
        assert_ne!(a.variables, c.variables);
    }

    #[test]
    fn unknown_members_stay_in_the_key() {
        let a = parse_post_body(br#"{"query":"{a}","id":"x"}"#).unwrap();
        assert_eq!(a.extra.as_deref(), Some(r#"{"id":"x"}"#));
    }

    #[test]
    fn bad_bodies_bypass() {
        assert_eq!(parse_post_body(b""), Err(Bypass::EmptyBody));
        assert_eq!(parse_post_body(b"  \n"), Err(Bypass::EmptyBody));
        assert_eq!(parse_post_body(b"{"), Err(Bypass::MalformedJson));
        assert_eq!(
            parse_post_body(b"[{\"query\":\"{a}\"}]"),
            Err(Bypass::Batched)
        );
        assert_eq!(parse_post_body(b"\"x\""), Err(Bypass::NotAnObject));
        assert_eq!(parse_post_body(b"{}"), Err(Bypass::MissingQuery));
        assert_eq!(
            parse_post_body(br#"{"query":1}"#),
            Err(Bypass::MissingQuery)
        );
        assert_eq!(
            parse_post_body(br#"{"query":"{a}","operationName":1}"#),
            Err(Bypass::BadOperationName)
        );
        assert_eq!(
            parse_post_body(br#"{"query":"{a}","variables":[1]}"#),
            Err(Bypass::BadVariables)
        );
        assert_eq!(
            parse_post_body(br#"{"query":"{a}","extensions":"x"}"#),
            Err(Bypass::BadExtensions)
        );
        assert_eq!(
            parse_post_body(b"{\"query\":\"{a\xff}\"}"),
            Err(Bypass::MalformedJson)
        );
        let deep = "[".repeat(100_000);
        assert_eq!(parse_post_body(deep.as_bytes()), Err(Bypass::Batched));
        let deep_obj = format!("{{\"query\":{}", "{\"a\":".repeat(100_000));
        assert_eq!(
            parse_post_body(deep_obj.as_bytes()),
            Err(Bypass::MalformedJson)
        );
    }

    #[test]
    fn get_parameters() {
        let r = parse_get_query(
            "query=%7B+a+%7D&operationName=Op&variables=%7B%22b%22%3A1%2C%22a%22%3A2%7D&x=1",
        )
        .unwrap();
        assert_eq!(r.query, "{ a }");
        assert_eq!(r.operation_name.as_deref(), Some("Op"));
        assert_eq!(r.variables.as_deref(), Some(r#"{"a":2,"b":1}"#));
        assert_eq!(r.extra.as_deref(), Some(r#"[["x","1"]]"#));
    }

    #[test]
    fn get_equivalences() {
        let a = parse_get_query("query=%7Ba%7D").unwrap();
        let b = parse_get_query("query=%7Ba%7D&variables=%7B%7D&operationName=").unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn bad_get_bypasses() {
        assert_eq!(parse_get_query(""), Err(Bypass::MissingQuery));
        assert_eq!(parse_get_query("query=%zz"), Err(Bypass::BadQueryString));
        assert_eq!(parse_get_query("query=%ff"), Err(Bypass::BadQueryString));
        assert_eq!(parse_get_query("query=%7"), Err(Bypass::BadQueryString));
        assert_eq!(
            parse_get_query("query=a&query=b"),
            Err(Bypass::BadQueryString)
        );
        assert_eq!(
            parse_get_query("query=a&variables=1"),
            Err(Bypass::BadVariables)
        );
        assert_eq!(
            parse_get_query("query=a&variables=%7B"),
            Err(Bypass::BadVariables)
        );
    }

    #[test]
    fn content_types() {
        assert!(is_json_content_type(b"application/json"));
        assert!(is_json_content_type(b" application/json "));
        assert!(is_json_content_type(b"Application/JSON; charset=utf-8"));
        assert!(is_json_content_type(b"application/json;CHARSET=UTF-8"));
        assert!(!is_json_content_type(b"application/graphql"));
        assert!(!is_json_content_type(b"text/plain"));
        assert!(!is_json_content_type(b""));
        // Parameters a server may refuse (415) where it answers the plain type.
        for other in [
            "application/json; charset=iso-8859-1",
            "application/json; foo=bar",
            "application/json; charset=utf-8; foo=bar",
            "application/json; charset=\"utf-8\"",
            "application/json; charset = utf-8",
            "application/json;",
            "application/json,application/json",
        ] {
            assert!(!is_json_content_type(other.as_bytes()), "{other}");
        }
    }

    #[test]
    fn duplicate_members_bypass() {
        for body in [
            r#"{"query":"{a}","query":"{b}"}"#,
            r#"{"query":"{a}","operationName":null,"operationName":"A"}"#,
            r#"{"query":"{a}","variables":{"x":1,"x":2}}"#,
            r#"{"query":"{a}","variables":{"x":{"y":[{"z":1,"z":1}]}}}"#,
            r#"{"query":"{a}","extensions":{"e":1,"\u0065":2}}"#,
            r#"{"query":"{a}","id":1,"id":2}"#,
        ] {
            assert_eq!(
                parse_post_body(body.as_bytes()),
                Err(Bypass::DuplicateMember),
                "{body}"
            );
        }
        assert_eq!(
            parse_get_query(r#"query=a&variables={"x":1,"x":2}"#),
            Err(Bypass::DuplicateMember)
        );
        assert_eq!(
            parse_get_query(r#"query=a&extensions={"x":{"y":1,"y":1}}"#),
            Err(Bypass::DuplicateMember)
        );
    }

    #[test]
    fn numbers_are_keyed_by_their_text() {
        let vars = |n: &str| {
            let body = format!(r#"{{"query":"{{a}}","variables":{{"x":{n},"y":[{n}]}}}}"#);
            parse_post_body(body.as_bytes()).unwrap().variables.unwrap()
        };
        for (a, b) in [
            ("0.10", "0.1"),
            ("1e2", "100"),
            ("1e2", "100.0"),
            ("9007199254740993", "9007199254740992"),
            ("18446744073709551617", "18446744073709551616"),
            ("-0", "0"),
        ] {
            assert_ne!(vars(a), vars(b), "{a} vs {b}");
            assert_eq!(vars(a), vars(a));
            assert_eq!(vars(a), format!(r#"{{"x":{a},"y":[{a}]}}"#));
        }
        let ext = |n: &str| {
            let body = format!(r#"{{"query":"{{a}}","extensions":{{"e":{n}}},"pad":{n}}}"#);
            let r = parse_post_body(body.as_bytes()).unwrap();
            (r.extensions.unwrap(), r.extra.unwrap())
        };
        assert_ne!(ext("0.10"), ext("0.1"));
        let get = |n: &str| parse_get_query(&format!("query=a&variables={{\"x\":{n}}}")).unwrap();
        assert_ne!(get("1e2").variables, get("100").variables);
    }

    #[test]
    fn paths_split() {
        assert_eq!(
            split_path("/graphql?query=x"),
            ("/graphql", Some("query=x"))
        );
        assert_eq!(split_path("/graphql"), ("/graphql", None));
    }
}
