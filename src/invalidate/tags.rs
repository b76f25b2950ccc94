//! Tags: what an entry is about, read from the request and the answer the origin sent (no query
//! rewriting). `Type` for every object in `data` with a `__typename`, `Type:<id>` when it also has
//! its key field(s), plus the operation name and the top-level fields of the query.
//!
//! Tags are written with a kind prefix (`type:User`, `entity:User:1`, `operation:GetUser`,
//! `field:users`), so a type and a field of the same name never share a tag.

use crate::config::KeyFields;
use crate::json::{self, Json};
use serde_json::Value;
use std::borrow::Cow;

/// The most tags an entry keeps; coarse ones first (operation, fields, types, then entities),
/// so a purge of something coarse always reaches an entry that had too many entities to list.
pub const MAX_TAGS: usize = 64;
/// Objects visited in one answer before tagging stops (bounds the work on huge answers).
pub const MAX_OBJECTS: usize = 10_000;
const TYPENAME: &str = "__typename";

/// What the request contributes to its entry's tags (kept from classification).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperationTags {
    pub name: Option<String>,
    pub root_fields: Vec<String>,
}

pub fn type_tag(typename: &str) -> String {
    format!("type:{typename}")
}

pub fn entity_tag(typename: &str, id: &str) -> String {
    format!("entity:{typename}:{id}")
}

/// Stands for every `entity:<T>:…` tag of an entry that had too many entities of `T` to list:
/// an entity purge of `T` marks it too.
pub fn entities_tag(typename: &str) -> String {
    format!("entities:{typename}")
}

/// An entry whose answer had more objects than were read: any entity or type purge reaches it.
pub const OVERFLOW_TAG: &str = "overflow";

pub fn operation_tag(name: &str) -> String {
    format!("operation:{name}")
}

pub fn field_tag(name: &str) -> String {
    format!("field:{name}")
}

/// What the answer's `data` names: types and entities, each once, in order of appearance.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Objects {
    pub types: Vec<String>,
    /// `(type, id)`
    pub entities: Vec<(String, String)>,
    /// The answer had more than `MAX_OBJECTS` objects: some were not read.
    pub truncated: bool,
}

/// Reads the types and entities of a GraphQL answer. `None` when the body is not a JSON object
/// or has no `data` object.
pub fn find_in_answer(body: &[u8], key_fields: &KeyFields) -> Option<Objects> {
    let parsed = std::str::from_utf8(body).ok().map(json::parse);
    let Some(Ok(answer)) = parsed else {
        return find_in_answer_generic(body, key_fields);
    };
    find_in_parsed(&answer, key_fields)
}

/// [`find_in_answer`] of an answer the strict reader has read.
pub fn find_in_parsed(answer: &Json<'_>, key_fields: &KeyFields) -> Option<Objects> {
    let Json::Object(members) = answer else {
        return None;
    };
    let data @ Json::Object(_) = member(members, "data")? else {
        return None;
    };
    let mut found = Objects::default();
    note_typed_json(data, key_fields, &mut found);
    Some(found)
}

/// [`find_in_answer`] for what the strict reader refuses but `serde_json` reads (a member named
/// twice: the last one counts), so a purge reaches whatever the origin's answer names.
pub fn find_in_answer_generic(body: &[u8], key_fields: &KeyFields) -> Option<Objects> {
    let answer: Value = serde_json::from_slice(body).ok()?;
    let data = answer.get("data")?;
    if !data.is_object() {
        return None;
    }
    let mut found = Objects::default();
    note_typed(data, key_fields, &mut found);
    Some(found)
}

/// Adds to `found` the types and entities of one JSON value (an entity as a subgraph wrote it,
/// or its representation), as [`find_in_answer`] reads them under `data`. Text that cannot name a
/// type (no `__typename`, no escape that could spell it) is not parsed: most entities hold none.
pub fn find_in_value(text: &str, key_fields: &KeyFields, found: &mut Objects) {
    if !text.contains(TYPENAME) && !text.contains("\\u") {
        return;
    }
    match json::parse(text) {
        Ok(value) => note_typed_json(&value, key_fields, found),
        Err(_) => {
            if let Ok(value) = serde_json::from_str::<Value>(text) {
                note_typed(&value, key_fields, found);
            }
        }
    }
}

/// [`note_typed`] over the strict reader's tree: the same objects in the same order (its members
/// are sorted by name, as a `serde_json::Map`'s are), bounded by the same `MAX_OBJECTS`.
fn note_typed_json(value: &Json<'_>, key_fields: &KeyFields, found: &mut Objects) {
    let mut stack = vec![value];
    let mut visited = 0;
    while let Some(value) = stack.pop() {
        match value {
            Json::Object(members) => {
                visited += 1;
                if visited > MAX_OBJECTS {
                    found.truncated = true;
                    return;
                }
                if let Some(Json::String(t)) = member(members, TYPENAME) {
                    let id = json_object_id(members, key_fields.of(t));
                    found.note(t, id);
                }
                stack.extend(members.iter().rev().map(|(_, v)| v));
            }
            Json::Array(items) => stack.extend(items.iter().rev()),
            _ => {}
        }
    }
}

fn member<'j, 'a>(members: &'j [(Cow<'a, str>, Json<'a>)], name: &str) -> Option<&'j Json<'a>> {
    members.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}

/// [`object_id`] over the strict reader's tree.
fn json_object_id(members: &[(Cow<'_, str>, Json<'_>)], fields: &[String]) -> Option<String> {
    let parts: Option<Vec<String>> = fields
        .iter()
        .map(|f| json_scalar_text(member(members, f)?))
        .collect();
    let parts = parts?;
    (!parts.is_empty()).then(|| parts.join(":"))
}

/// [`scalar_text`] of a strict tree's value: a number as `serde_json` prints it once read (`1.0`
/// for `1.0`, `100.0` for `1e2`), so an id reads the same whichever reader read it.
fn json_scalar_text(value: &Json<'_>) -> Option<String> {
    match value {
        Json::String(s) => Some(s.to_string()),
        Json::Number(n) if is_plain_integer(n) => Some(n.to_string()),
        Json::Number(n) => serde_json::from_str::<serde_json::Number>(n)
            .ok()
            .map(|n| n.to_string()),
        Json::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Digits without sign or leading zero that fit a `u64`: printed by `serde_json` as written.
fn is_plain_integer(n: &str) -> bool {
    n.len() <= 19 && n.bytes().all(|b| b.is_ascii_digit()) && (n == "0" || !n.starts_with('0'))
}

/// Notes every object under `value` that names its type, and its id.
fn note_typed(value: &Value, key_fields: &KeyFields, found: &mut Objects) {
    walk_objects(value, (), found, |found, map, (), children| {
        if let Some(Value::String(t)) = map.get(TYPENAME) {
            note(found, t, map, key_fields);
        }
        children.extend(map.values().map(|v| (v, ())));
    });
}

/// Visits the objects under `data` depth first in document order, each with the state its parent
/// gave it; `visit` notes an object and pushes the children to walk into, in document order. Stops
/// after `MAX_OBJECTS` objects (`found.truncated`), so a huge answer costs a bounded walk.
pub(crate) fn walk_objects<'v, S: Copy>(
    data: &'v Value,
    root: S,
    found: &mut Objects,
    mut visit: impl FnMut(&mut Objects, &'v serde_json::Map<String, Value>, S, &mut Vec<(&'v Value, S)>),
) {
    let mut stack = vec![(data, root)];
    let mut visited = 0;
    while let Some((value, state)) = stack.pop() {
        match value {
            Value::Object(map) => {
                visited += 1;
                if visited > MAX_OBJECTS {
                    found.truncated = true;
                    return;
                }
                let from = stack.len();
                visit(found, map, state, &mut stack);
                // Pushed in document order: reversed, the stack pops them in it.
                stack[from..].reverse();
            }
            Value::Array(items) => stack.extend(items.iter().rev().map(|v| (v, state))),
            _ => {}
        }
    }
}

fn note(
    found: &mut Objects,
    typename: &str,
    object: &serde_json::Map<String, Value>,
    key_fields: &KeyFields,
) {
    found.note(typename, object_id(object, key_fields.of(typename)));
}

impl Objects {
    /// An object of type `typename`, and its id when it has one; each once.
    pub fn note(&mut self, typename: &str, id: Option<String>) {
        if !self.types.iter().any(|t| t == typename) {
            self.types.push(typename.to_string());
        }
        if let Some(id) = id {
            if !self.entities.iter().any(|(t, i)| t == typename && *i == id) {
                self.entities.push((typename.to_string(), id));
            }
        }
    }
}

/// The object's id: its key fields' values as JSON scalars in text (`1` and `"1"` alike), joined
/// by `:` when there are several. `None` when any is missing or not a scalar.
fn object_id(object: &serde_json::Map<String, Value>, fields: &[String]) -> Option<String> {
    let parts: Option<Vec<String>> = fields.iter().map(|f| scalar_text(object.get(f)?)).collect();
    let parts = parts?;
    (!parts.is_empty()).then(|| parts.join(":"))
}

pub fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// An entry's tags: the operation's, then what its answer names, coarse first, at most
/// [`MAX_TAGS`]. When the entities do not all fit, none is listed and each type that had some
/// gets its `entities:` tag instead, so an entity purge still reaches the entry (too much, never
/// too little); an answer cut short at `MAX_OBJECTS` gets [`OVERFLOW_TAG`].
pub fn entry_tags(operation: Option<&str>, root_fields: &[String], found: &Objects) -> Vec<String> {
    let mut tags = Vec::new();
    if found.truncated {
        tags.push(OVERFLOW_TAG.to_string());
    }
    tags.extend(operation.map(operation_tag));
    tags.extend(root_fields.iter().map(|f| field_tag(f)));
    tags.extend(found.types.iter().map(|t| type_tag(t)));
    tags.dedup();
    if tags.len() + found.entities.len() <= MAX_TAGS {
        tags.extend(found.entities.iter().map(|(t, id)| entity_tag(t, id)));
    } else {
        let mut typed: Vec<&str> = found.entities.iter().map(|(t, _)| t.as_str()).collect();
        typed.sort_unstable();
        typed.dedup();
        tags.extend(typed.into_iter().map(entities_tag));
    }
    tags.truncate(MAX_TAGS);
    tags
}

/// What an entity purge marks: the entity's tag, and the tags that stand for it in entries that
/// could not list it.
pub fn entity_purge_tags(typename: &str, id: &str) -> Vec<String> {
    vec![
        entity_tag(typename, id),
        entities_tag(typename),
        OVERFLOW_TAG.to_string(),
    ]
}

/// What a type purge marks (see [`entity_purge_tags`]).
pub fn type_purge_tags(typename: &str) -> Vec<String> {
    vec![type_tag(typename), OVERFLOW_TAG.to_string()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANSWER: &str = r#"{"data":{"user":{"__typename":"User","id":"1","name":"A",
        "posts":[{"__typename":"Post","id":7,"author":{"__typename":"User","id":"2"}},
                 {"__typename":"Post","id":"7"}]},
        "stats":{"count":3}}}"#;

    #[test]
    fn a_value_reads_as_the_same_value_under_data_does() {
        let keys = KeyFields::default();
        for json in [
            r#"{"__typename":"Product","id":"1"}"#,
            r#"{"reviews":[{"id":"r","author":{"__typename":"User","id":9}}]}"#,
            r#"{"name":"no type here"}"#,
            r#"{"\u005f_typename":"User","id":"3"}"#,
            "null",
            "not json",
        ] {
            let mut found = Objects::default();
            find_in_value(json, &keys, &mut found);
            let wrapped = format!(r#"{{"data":{{"e":{json}}}}}"#);
            let want = find_in_answer(wrapped.as_bytes(), &keys).unwrap_or_default();
            assert_eq!(found, want, "{json}");
        }
        let mut found = Objects::default();
        find_in_value(r#"{"\u005f_typename":"User","id":"3"}"#, &keys, &mut found);
        assert_eq!(found.entities, vec![("User".to_string(), "3".to_string())]);
    }

    /// The strict reader and `serde_json` find the same types and entities in the same order:
    /// ids as `serde_json` prints them, and what the strict reader refuses read by `serde_json`.
    #[test]
    fn both_readers_find_the_same() {
        let mut kf = KeyFields::default();
        kf.by_type
            .insert("Sku".into(), vec!["code".into(), "n".into()]);
        for data in [
            ANSWER,
            r#"{"data":{"a":{"__typename":"P","id":1.0},"b":{"__typename":"P","id":1e2},"c":{"__typename":"P","id":-0},"d":{"__typename":"P","id":-5}}}"#,
            r#"{"data":{"a":{"__typename":"P","id":18446744073709551615},"b":{"__typename":"P","id":18446744073709551616},"c":{"__typename":"P","id":0.10}}}"#,
            r#"{"data":{"a":{"__typename":"P","id":true},"b":{"__typename":"P","id":null},"c":{"__typename":"P","id":[1]},"d":{"__typename":7,"id":"x"}}}"#,
            r#"{"data":{"s":{"__typename":"Sku","code":"A\u00e9","n":3},"t":{"__typename":"Sku","code":"B"}}}"#,
            r#"{"data":{"zz":{"__typename":"Z","id":"1"},"aa":[{"__typename":"A","id":"2","k":{"__typename":"B","id":"3"}}]}}"#,
            r#"{"data":{"u":{"__typename":"User","id":"1","id":"2"}}}"#,
            r#"{"data":{"u":{"__typename":"User","id":"1"},"u":{"__typename":"Post","id":"2"}}}"#,
            r#"{"data":{"u":{"__typename":"User\ud800","id":"1"}}}"#,
            r#"{"data":[]}"#,
            r#"[{"data":{}}]"#,
        ] {
            let fast = find_in_answer(data.as_bytes(), &kf);
            let generic = find_in_answer_generic(data.as_bytes(), &kf);
            assert_eq!(fast, generic, "{data}");
        }
        // A number no double holds: `serde_json` refuses the whole answer (and it is never
        // stored), the strict reader still finds its type: more tags, never fewer.
        let huge = br#"{"data":{"u":{"__typename":"User","id":1e400}}}"#;
        assert_eq!(find_in_answer_generic(huge, &kf), None);
        assert_eq!(find_in_answer(huge, &kf).unwrap().types, vec!["User"]);
    }

    proptest::proptest! {
        #[test]
        fn both_readers_agree_on_generated_answers(value in answer_value()) {
            let body = serde_json::json!({"data": value}).to_string();
            let kf = KeyFields::default();
            proptest::prop_assert_eq!(
                find_in_answer(body.as_bytes(), &kf),
                find_in_answer_generic(body.as_bytes(), &kf)
            );
        }
    }

    /// Nested objects and arrays, some typed, with ids of every scalar kind.
    fn answer_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "[a-c\\u{e9}\\\\\"]{0,3}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 40, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                (
                    proptest::option::of(prop_oneof![Just("A"), Just("B"), Just("C\\u{e9}")]),
                    proptest::option::of(inner.clone()),
                    proptest::collection::btree_map("[a-e_]{1,3}", inner, 0..4),
                )
                    .prop_map(|(t, id, rest)| {
                        let mut m: serde_json::Map<String, Value> = rest.into_iter().collect();
                        if let Some(t) = t {
                            m.insert(TYPENAME.to_string(), Value::from(t));
                        }
                        if let Some(id) = id {
                            m.insert("id".to_string(), id);
                        }
                        Value::Object(m)
                    }),
            ]
        })
    }

    #[test]
    fn types_and_entities_in_document_order_ids_as_text() {
        let found = find_in_answer(ANSWER.as_bytes(), &KeyFields::default()).unwrap();
        assert_eq!(found.types, vec!["User", "Post"]);
        assert_eq!(
            found.entities,
            vec![
                ("User".to_string(), "1".to_string()),
                ("Post".to_string(), "7".to_string()),
                ("User".to_string(), "2".to_string()),
            ],
            "7 and \"7\" are one entity"
        );
    }

    #[test]
    fn key_fields_per_type() {
        let mut kf = KeyFields::default();
        kf.by_type
            .insert("Post".into(), vec!["id".into(), "missing".into()]);
        kf.by_type.insert("User".into(), vec!["name".into()]);
        let found = find_in_answer(ANSWER.as_bytes(), &kf).unwrap();
        assert_eq!(found.entities, vec![("User".into(), "A".into())]);
        assert_eq!(found.types, vec!["User", "Post"], "still typed");
    }

    #[test]
    fn no_data_no_tags() {
        let kf = KeyFields::default();
        assert_eq!(find_in_answer(b"nope", &kf), None);
        assert_eq!(find_in_answer(br#"{"data":null}"#, &kf), None);
        assert_eq!(
            find_in_answer(br#"{"data":{"a":[1,2,{"b":true}]}}"#, &kf),
            Some(Objects::default())
        );
    }

    #[test]
    fn entry_tags_are_bounded_coarse_first() {
        let mut found = Objects::default();
        found.types.push("User".into());
        for i in 0..100 {
            found.entities.push(("User".into(), i.to_string()));
        }
        let tags = entry_tags(Some("GetUsers"), &["users".to_string()], &found);
        assert_eq!(
            tags,
            vec![
                "operation:GetUsers",
                "field:users",
                "type:User",
                "entities:User"
            ],
            "too many entities to list: the type stands for them"
        );
        found.entities.truncate(10);
        let tags = entry_tags(Some("GetUsers"), &["users".to_string()], &found);
        assert_eq!(tags.len(), 13);
        assert_eq!(tags[3], "entity:User:0");
        found.truncated = true;
        assert_eq!(entry_tags(None, &[], &found)[0], OVERFLOW_TAG);
    }
}
