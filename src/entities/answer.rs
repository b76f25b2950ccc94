//! A subgraph's answer to an `_entities` request (the whole batch, or only the misses), read:
//! each entity's JSON as the subgraph wrote it, whether an error names it (then it is never
//! stored), and the answer the gateway gets, in the order it asked, with error paths pointing
//! at its own positions.

use crate::entities::request::EntitiesRequest;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::BTreeMap;

/// An answer the filter cannot merge (then nothing is stored, and it goes to the gateway as is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadAnswer {
    /// Not a GraphQL response object.
    NotGraphql,
    /// `data` lacks a field asked for, or its list is not as long as the representations sent.
    Misshapen,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAnswer<'a> {
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
    #[serde(borrow, default)]
    errors: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    extensions: Option<&'a RawValue>,
}

/// One entity of the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Got<'a> {
    /// Its JSON as written (`null` included).
    pub raw: &'a str,
    /// An error's path names it (or something inside it).
    pub errored: bool,
}

impl Got<'_> {
    /// Whether it may be stored: an object no error names.
    pub fn storable(&self) -> bool {
        !self.errored && self.raw.starts_with('{')
    }
}

/// A subgraph's answer, read against what was sent.
#[derive(Debug)]
pub struct Fetched<'a> {
    /// Per field, per representation sent: the entity (`None`: `data` was `null`).
    pub entities: Vec<Vec<Option<Got<'a>>>>,
    /// Errors, each with the field and index its path names, if it names one.
    errors: Vec<(Value, Option<(usize, usize)>)>,
    extensions: Option<&'a RawValue>,
    data_null: bool,
}

impl<'a> Fetched<'a> {
    /// Reads `body`, the answer to `req` rewritten to send `sent[f]` of each field's distinct
    /// representations.
    pub fn read(
        body: &'a [u8],
        req: &EntitiesRequest,
        sent: &[Vec<usize>],
    ) -> Result<Fetched<'a>, BadAnswer> {
        // serde would read a struct from an array too.
        if body.trim_ascii_start().first() != Some(&b'{') {
            return Err(BadAnswer::NotGraphql);
        }
        let raw: RawAnswer<'a> = serde_json::from_slice(body).map_err(|_| BadAnswer::NotGraphql)?;
        let data_null = raw.data.is_none_or(|d| d.get() == "null");
        let lists: BTreeMap<&'a str, Option<Vec<&'a RawValue>>> = match raw.data {
            Some(d) if !data_null => {
                serde_json::from_str(d.get()).map_err(|_| BadAnswer::NotGraphql)?
            }
            _ => BTreeMap::new(),
        };
        let mut errors = Vec::new();
        for e in raw.errors.unwrap_or_default() {
            let value: Value = serde_json::from_str(e.get()).map_err(|_| BadAnswer::NotGraphql)?;
            let at = named_entity(&value, req, sent);
            if at.is_none() && names_a_position(&value, req) {
                // An index past what was sent: this answer is not to the request sent.
                return Err(BadAnswer::Misshapen);
            }
            errors.push((value, at));
        }
        let mut entities = Vec::with_capacity(req.fields.len());
        for (f, field) in req.fields.iter().enumerate() {
            let count = sent.get(f).map_or(0, Vec::len);
            if data_null {
                entities.push(vec![None; count]);
                continue;
            }
            let list = match lists.get(field.response_key.as_str()) {
                Some(Some(list)) if list.len() == count => list,
                Some(None) if count == 0 => &Vec::new(),
                _ => return Err(BadAnswer::Misshapen),
            };
            let got = list
                .iter()
                .enumerate()
                .map(|(i, raw)| {
                    let errored = errors.iter().any(|(_, at)| *at == Some((f, i)));
                    Some(Got {
                        raw: raw.get(),
                        errored,
                    })
                })
                .collect();
            entities.push(got);
        }
        Ok(Fetched {
            entities,
            errors,
            extensions: raw.extensions,
            data_null,
        })
    }

    /// Whether any error names no entity (then no entity of the answer is stored: the error may
    /// be about any of them).
    pub fn has_unplaced_errors(&self) -> bool {
        self.errors.iter().any(|(_, at)| at.is_none())
    }

    /// The errors as the gateway would have got them for its whole batch: an error naming an
    /// entity is repeated at every position that asked for it.
    fn errors_for(&self, req: &EntitiesRequest, sent: &[Vec<usize>]) -> Vec<String> {
        let mut out = Vec::new();
        for (value, at) in &self.errors {
            let Some((f, i)) = *at else {
                out.push(value.to_string());
                continue;
            };
            let (Some(field), Some(distinct)) =
                (req.fields.get(f), sent.get(f).and_then(|s| s.get(i)))
            else {
                continue;
            };
            for (position, d) in field.positions.iter().enumerate() {
                if d == distinct {
                    let mut moved = value.clone();
                    if let Some(step) = moved.get_mut("path").and_then(|p| p.get_mut(1)) {
                        *step = Value::from(position);
                    }
                    out.push(moved.to_string());
                }
            }
        }
        out
    }
}

/// The field and index an error's path names (`[response_key, index, ...]`), if any.
fn named_entity(
    error: &Value,
    req: &EntitiesRequest,
    sent: &[Vec<usize>],
) -> Option<(usize, usize)> {
    let path = error.get("path")?.as_array()?;
    let key = path.first()?.as_str()?;
    let index = usize::try_from(path.get(1)?.as_u64()?).ok()?;
    let f = req
        .fields
        .iter()
        .position(|field| field.response_key == key)?;
    (index < sent.get(f)?.len()).then_some((f, index))
}

/// Whether an error's path is `[response_key, <index>, ...]` for one of the request's fields.
fn names_a_position(error: &Value, req: &EntitiesRequest) -> bool {
    let Some(path) = error.get("path").and_then(Value::as_array) else {
        return false;
    };
    let key = path.first().and_then(Value::as_str);
    req.fields
        .iter()
        .any(|f| Some(f.response_key.as_str()) == key)
        && path.get(1).is_some_and(Value::is_number)
}

/// The answer the gateway gets: every position it asked, from `entities[f][d]` (the JSON of
/// field `f`'s distinct representation `d`), with the fetched answer's errors and extensions.
pub fn assemble(
    req: &EntitiesRequest,
    entities: &[Vec<&str>],
    fetched: Option<(&Fetched<'_>, &[Vec<usize>])>,
) -> Vec<u8> {
    let mut out = String::with_capacity(256);
    match fetched {
        Some((f, _)) if f.data_null => out.push_str(r#"{"data":null"#),
        _ => {
            out.push_str(r#"{"data":{"#);
            for (f, field) in req.fields.iter().enumerate() {
                if f > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(field.response_key.as_str()).to_string());
                out.push_str(":[");
                for (i, d) in field.positions.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let raw = entities.get(f).and_then(|e| e.get(*d)).copied();
                    out.push_str(raw.unwrap_or("null"));
                }
                out.push(']');
            }
            out.push('}');
        }
    }
    if let Some((f, sent)) = fetched {
        let errors = f.errors_for(req, sent);
        if !errors.is_empty() {
            out.push_str(r#","errors":["#);
            out.push_str(&errors.join(","));
            out.push(']');
        }
        if let Some(ext) = f.extensions {
            out.push_str(r#","extensions":"#);
            out.push_str(ext.get());
        }
    }
    out.push('}');
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::canonical::Limits;

    fn request() -> EntitiesRequest {
        let body = serde_json::json!({
            "query": "query($representations:[_Any!]!){_entities(representations:$representations){...on Product{name}}}",
            "variables": {"representations": [
                {"__typename": "Product", "id": "1"},
                {"__typename": "Product", "id": "2"},
                {"__typename": "Product", "id": "1"},
                {"__typename": "Product", "id": "3"}
            ]}
        });
        let limits = Limits {
            max_depth: 32,
            max_fields: 100,
        };
        EntitiesRequest::read(body.to_string().as_bytes(), limits).unwrap()
    }

    #[test]
    fn a_partial_answer_merges_in_the_gateway_s_order_with_errors_at_every_position() {
        let req = request();
        // Product 1 cached; 2 and 3 sent, 2 failing.
        let sent = vec![vec![1, 2]];
        let body = br#"{"data":{"_entities":[null,{"name":"C"}]},"errors":[{"message":"boom","path":["_entities",0,"name"]}]}"#;
        let fetched = Fetched::read(body, &req, &sent).unwrap();
        let got = &fetched.entities[0];
        assert!(!got[0].unwrap().storable(), "errored and null");
        assert!(got[1].unwrap().storable());
        assert!(!fetched.has_unplaced_errors());
        let entities = vec![vec![
            r#"{"name":"A"}"#,
            got[0].unwrap().raw,
            got[1].unwrap().raw,
        ]];
        let merged = assemble(&req, &entities, Some((&fetched, &sent)));
        assert_eq!(
            std::str::from_utf8(&merged).unwrap(),
            r#"{"data":{"_entities":[{"name":"A"},null,{"name":"A"},{"name":"C"}]},"errors":[{"message":"boom","path":["_entities",1,"name"]}]}"#
        );
    }

    #[test]
    fn an_answer_from_entries_alone_is_what_the_subgraph_sends() {
        let req = request();
        let entities = vec![vec![
            r#"{"name":"A"}"#,
            r#"{"name":"B"}"#,
            r#"{"name":"C"}"#,
        ]];
        assert_eq!(
            assemble(&req, &entities, None),
            br#"{"data":{"_entities":[{"name":"A"},{"name":"B"},{"name":"A"},{"name":"C"}]}}"#
        );
    }

    #[test]
    fn answers_that_do_not_fit_are_refused() {
        let req = request();
        let sent = vec![vec![0, 1]];
        for body in [
            &br#"{"data":{"_entities":[{"name":"A"}]}}"#[..],
            br#"{"data":{"other":[]}}"#,
            br#"{"data":{"_entities":[{},{}]},"more":1}"#,
            br#"{"data":{"_entities":[{},{}]},"errors":[{"message":"x","path":["_entities",2]}]}"#,
            b"[]",
            b"not json",
        ] {
            assert!(
                Fetched::read(body, &req, &sent).is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let failed = br#"{"data":null,"errors":[{"message":"down"}]}"#;
        let f = Fetched::read(failed, &req, &sent).unwrap();
        assert!(f.has_unplaced_errors());
        assert_eq!(
            assemble(&req, &[], Some((&f, &sent))),
            br#"{"data":null,"errors":[{"message":"down"}]}"#
        );
    }
}
