//! The purge API's request: who may purge (a bearer token, compared in constant time) and what
//! (a JSON array of selectors). A request is checked whole before anything is purged: one bad
//! selector and nothing changes.

use crate::invalidate::tags::{
    entity_purge_tags, field_tag, operation_tag, scalar_text, type_purge_tags,
};
use serde_json::Value;

/// What one selector purges: tags, or everything; `soft` leaves entries stale instead of gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    /// Empty for `{"kind":"all"}`.
    pub tags: Vec<String>,
    pub soft: bool,
}

/// Why a purge request is refused: the status and the message the operator sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub message: String,
}

fn bad(message: impl Into<String>) -> Refusal {
    Refusal {
        status: 400,
        message: message.into(),
    }
}

/// Whether `authorization` is `Bearer <token>`. Constant time in the header's content, so the
/// token cannot be guessed byte by byte from response times.
pub fn authorized(authorization: Option<&[u8]>, token: &str) -> bool {
    let expected = format!("Bearer {token}");
    let given = authorization.unwrap_or_default();
    let mut diff = given.len() ^ expected.len();
    for (i, b) in expected.bytes().enumerate() {
        diff |= usize::from(b ^ given.get(i).copied().unwrap_or(0));
    }
    diff == 0
}

/// The selectors of a purge body.
pub fn parse_selectors(body: &[u8]) -> Result<Vec<Selector>, Refusal> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| bad(format!("the body is not JSON: {e}")))?;
    let Value::Array(items) = value else {
        return Err(bad("the body must be a JSON array of selectors"));
    };
    if items.is_empty() {
        return Err(bad("no selectors"));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| selector(item).map_err(|m| bad(format!("selector {i}: {m}"))))
        .collect()
}

fn selector(item: &Value) -> Result<Selector, String> {
    let Value::Object(map) = item else {
        return Err("must be an object".into());
    };
    let text = |field: &str| -> Result<String, String> {
        match map.get(field) {
            None => Err(format!("missing \"{field}\"")),
            Some(v) => scalar_text(v)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| format!("\"{field}\" must be a non-empty string or number")),
        }
    };
    let soft = match map.get("soft") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("\"soft\" must be true or false".into()),
    };
    let kind = match map.get("kind") {
        Some(Value::String(k)) => k.as_str(),
        Some(_) => return Err("\"kind\" must be a string".into()),
        None => return Err("missing \"kind\"".into()),
    };
    let allowed: &[&str] = match kind {
        "entity" => &["kind", "type", "id", "soft"],
        "type" => &["kind", "type", "soft"],
        "operation" | "field" => &["kind", "name", "soft"],
        "all" => &["kind", "soft"],
        other => {
            return Err(format!(
                "unknown kind {other:?} (entity, type, operation, field, all)"
            ))
        }
    };
    if let Some(extra) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!("unknown member \"{extra}\" for kind \"{kind}\""));
    }
    let tags = match kind {
        "entity" => entity_purge_tags(&text("type")?, &text("id")?),
        "type" => type_purge_tags(&text("type")?),
        "operation" => vec![operation_tag(&text("name")?)],
        "field" => vec![field_tag(&text("name")?)],
        _ => Vec::new(),
    };
    Ok(Selector { tags, soft })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_must_match_exactly() {
        let token = "0123456789abcdef";
        assert!(authorized(Some(b"Bearer 0123456789abcdef"), token));
        for wrong in [
            &b"Bearer 0123456789abcdeF"[..],
            b"Bearer 0123456789abcde",
            b"Bearer 0123456789abcdef0",
            b"bearer 0123456789abcdef",
            b"0123456789abcdef",
            b"",
        ] {
            assert!(!authorized(Some(wrong), token), "{wrong:?}");
        }
        assert!(!authorized(None, token));
    }

    #[test]
    fn every_kind_of_selector() {
        let got = parse_selectors(
            br#"[{"kind":"entity","type":"User","id":1},{"kind":"type","type":"User","soft":true},
                 {"kind":"operation","name":"GetUser"},{"kind":"field","name":"topPosts"},
                 {"kind":"all"}]"#,
        )
        .unwrap();
        let first: Vec<_> = got
            .iter()
            .map(|s| s.tags.first().map(String::as_str))
            .collect();
        assert_eq!(
            first,
            vec![
                Some("entity:User:1"),
                Some("type:User"),
                Some("operation:GetUser"),
                Some("field:topPosts"),
                None
            ]
        );
        assert!(got[0].tags.contains(&"entities:User".to_string()));
        assert!(got[1].soft && !got[0].soft);
    }

    #[test]
    fn bad_requests_name_the_selector() {
        let cases: &[(&[u8], &str)] = &[
            (b"{nope", "not JSON"),
            (br#"{"kind":"all"}"#, "array"),
            (b"[]", "no selectors"),
            (
                br#"[{"kind":"all"},{"kind":"tenant"}]"#,
                "selector 1: unknown kind",
            ),
            (
                br#"[{"kind":"entity","type":"User"}]"#,
                "selector 0: missing \"id\"",
            ),
            (br#"[{"type":"User"}]"#, "selector 0: missing \"kind\""),
            (br#"[{"kind":"type","type":""}]"#, "non-empty"),
            (br#"[{"kind":"all","soft":"yes"}]"#, "soft"),
            (br#"[{"kind":"all","tag":"x"}]"#, "unknown member \"tag\""),
            (br#"[1]"#, "selector 0: must be an object"),
        ];
        for (body, expected) in cases {
            let e = parse_selectors(body).unwrap_err();
            assert_eq!(e.status, 400);
            assert!(e.message.contains(expected), "{} vs {expected}", e.message);
        }
    }
}
