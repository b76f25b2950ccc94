//! The explain endpoint's request side, free of host calls: the request an operator describes
//! (method, path, headers, body, and what Envoy would know of it: the route's cluster, the
//! caller's identity) read from JSON, and the parts its cache key is built from.

use crate::config::Config;
use crate::effects::header_block::HeaderBlock;
use crate::request::apq::sha256_hex;
use crate::request::canonical::canonicalize;
use crate::request::classify::{key_context, RequestHead};
use crate::request::http::{parse_get_query, parse_post_body, split_path};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// A request described to the explain endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    pub method: String,
    pub path: String,
    pub authority: String,
    /// Lower-case names, no pseudo-headers.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The upstream cluster the request's route picks (part of the key with `key_by_cluster`).
    pub cluster: Option<String>,
    /// The JWT claim (and its issuer) a `jwt` identity source would read.
    pub identity: Option<(String, String)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDescribed {
    method: Option<String>,
    path: Option<String>,
    authority: Option<String>,
    headers: Option<BTreeMap<String, Value>>,
    body: Option<Value>,
    cluster: Option<String>,
    identity: Option<String>,
    issuer: Option<String>,
}

impl Described {
    /// Reads the description; an error says what is wrong, naming the member.
    pub fn parse(bytes: &[u8]) -> Result<Described, String> {
        let raw: RawDescribed =
            serde_json::from_slice(bytes).map_err(|e| format!("not a request: {e}"))?;
        let method = raw
            .method
            .unwrap_or_else(|| "POST".into())
            .to_ascii_uppercase();
        if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(format!("method: {method:?} is not an HTTP method"));
        }
        let path = raw.path.unwrap_or_else(|| "/graphql".into());
        if !path.starts_with('/') {
            return Err(format!("path: {path:?} must start with '/'"));
        }
        let headers = headers(raw.headers.unwrap_or_default())?;
        let authority = match raw.authority {
            Some(a) => a,
            None => headers
                .iter()
                .find(|(n, _)| n == "host")
                .map(|(_, v)| v.clone())
                .ok_or("authority: the host clients send is part of the key")?,
        };
        let body = match raw.body {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => s.into_bytes(),
            Some(other) => other.to_string().into_bytes(),
        };
        let identity = match (raw.identity, raw.issuer) {
            (Some(claim), issuer) => Some((issuer.unwrap_or_default(), claim)),
            (None, Some(_)) => return Err("issuer: only applies with identity".into()),
            (None, None) => None,
        };
        Ok(Described {
            method,
            path,
            authority,
            headers,
            body,
            cluster: raw.cluster,
            identity,
        })
    }

    /// The request's headers as Envoy would hand them over (pseudo-headers first). A POST with a
    /// body and no `content-type` is JSON, as clients send it.
    pub fn header_block(&self) -> HeaderBlock {
        let mut pairs: Vec<(&[u8], &[u8])> = vec![
            (b":method", self.method.as_bytes()),
            (b":path", self.path.as_bytes()),
            (b":authority", self.authority.as_bytes()),
        ];
        let typed = self.headers.iter().any(|(n, _)| n == "content-type");
        if self.method == "POST" && !typed {
            pairs.push((b"content-type", b"application/json"));
        }
        pairs.extend(
            self.headers
                .iter()
                .filter(|(n, _)| n != "host")
                .map(|(n, v)| (n.as_bytes(), v.as_bytes())),
        );
        HeaderBlock::from_pairs(pairs)
    }
}

/// Header names lower-cased; a value is a string, or an array of them (a repeated header).
fn headers(raw: BTreeMap<String, Value>) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (name, value) in raw {
        let lower = name.to_ascii_lowercase();
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if lower.is_empty() || !lower.bytes().all(token) {
            return Err(format!("headers: {name:?} is not a header name (give pseudo-headers as method, path, authority)"));
        }
        let values = match value {
            Value::String(s) => vec![s],
            Value::Array(items) => items
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s),
                    _ => Err(format!("headers.{lower}: values are strings")),
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(format!("headers.{lower}: a string or an array of strings")),
        };
        out.extend(values.into_iter().map(|v| (lower.clone(), v)));
    }
    Ok(out)
}

/// A secret-safe mark of a value that is part of the key: its SHA-256, shortened.
pub fn fingerprint(value: &[u8]) -> String {
    let text = String::from_utf8_lossy(value);
    format!("sha256:{}", &sha256_hex(&text)[..16])
}

/// The parts the key of `head` (with `body`, a POST's) is built from, as far as they can be read:
/// the HTTP ones always, the GraphQL ones when the request parses.
pub fn key_parts(config: &Config, head: &RequestHead, body: &[u8]) -> Value {
    let full = String::from_utf8_lossy(&head.path).into_owned();
    let (path, query_string) = split_path(&full);
    let is_get = head.method == b"GET";
    // A GET's key takes the path alone (its query string is the request); a POST's the whole.
    let keyed_path = if is_get { path } else { full.as_str() };
    let ctx = key_context(config, head, keyed_path);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mut vary = Map::new();
    for (name, value) in &ctx.vary {
        vary.insert((*name).to_string(), value.map(fingerprint).into());
    }
    let mut parts = json!({
        "method": text(ctx.method),
        "authority": text(ctx.authority),
        "path": text(ctx.path),
        "accept": ctx.accept.map(text),
        "cluster": ctx.cluster.map(text),
        "vary": vary,
    });
    let req = match is_get {
        true => parse_get_query(query_string.unwrap_or_default()).ok(),
        false => parse_post_body(body).ok(),
    };
    if let (Some(req), Value::Object(map)) = (req, &mut parts) {
        let canonical = canonicalize(&req.query, req.operation_name.as_deref(), config.limits())
            .ok()
            .map(|op| op.text);
        map.insert("query".into(), canonical.into());
        map.insert("variables".into(), req.variables.into());
        map.insert("extensions".into(), req.extensions.into());
        map.insert("other_parameters".into(), req.extra.into());
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_description_is_read_with_defaults_and_bad_ones_name_their_member() {
        let d = Described::parse(
            br#"{"path":"/graphql","headers":{"Host":"api.test","X-Ids":["1","2"]},
                 "body":{"query":"{ a }"},"cluster":"origin"}"#,
        )
        .unwrap();
        assert_eq!(d.method, "POST");
        assert_eq!(d.authority, "api.test");
        assert_eq!(d.body, br#"{"query":"{ a }"}"#);
        let block = d.header_block();
        let names: Vec<_> = block
            .iter()
            .map(|(n, v)| (n.to_vec(), v.to_vec()))
            .collect();
        assert!(names.contains(&(b"content-type".to_vec(), b"application/json".to_vec())));
        assert_eq!(names.iter().filter(|(n, _)| n == b"x-ids").count(), 2);
        assert!(!names.iter().any(|(n, _)| n == b"host"));
        for (bad, member) in [
            (r#"{"authority":"a","path":"graphql"}"#, "path"),
            (r#"{"path":"/g"}"#, "authority"),
            (r#"{"authority":"a","headers":{":path":"/x"}}"#, "headers"),
            (r#"{"authority":"a","headers":{"x":1}}"#, "headers.x"),
            (r#"{"authority":"a","method":"GE T"}"#, "method"),
            (r#"{"authority":"a","issuer":"i"}"#, "issuer"),
            (r#"{"authority":"a","nope":1}"#, "nope"),
            ("[]", "not a request"),
        ] {
            let e = Described::parse(bad.as_bytes()).unwrap_err();
            assert!(e.contains(member), "{bad}: {e}");
        }
    }

    #[test]
    fn key_parts_show_secrets_only_as_fingerprints() {
        let config = Config::parse(br#"{"vary_headers":["authorization"]}"#).unwrap();
        let d = Described::parse(
            br#"{"authority":"api.test","headers":{"authorization":"Bearer secret"},
                 "body":"{\"query\":\"query Q { a   b }\",\"variables\":{\"x\":1}}"}"#,
        )
        .unwrap();
        let head = crate::request::classify::head_of(&config, d.header_block());
        let parts = key_parts(&config, &head, &d.body);
        assert_eq!(parts["method"], "POST");
        assert_eq!(parts["path"], "/graphql");
        assert_eq!(parts["query"], "query Q{a b}");
        assert_eq!(parts["variables"], r#"{"x":1}"#);
        let auth = parts["vary"]["authorization"].as_str().unwrap();
        assert!(
            auth.starts_with("sha256:") && !auth.contains("secret"),
            "{auth}"
        );
    }
}
