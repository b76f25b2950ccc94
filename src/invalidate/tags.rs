//! Tags: what an entry is about, read from the request and the answer the origin sent (no query
//! rewriting). `Type` for every object in `data` with a `__typename`, `Type:<id>` when it also has
//! its key field(s), plus the operation name and the top-level fields of the query.
//!
//! Tags are written with a kind prefix (`type:User`, `entity:User:1`, `operation:GetUser`,
//! `field:users`), so a type and a field of the same name never share a tag.

use crate::config::KeyFields;
use serde_json::Value;

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
pub struct Found {
    pub types: Vec<String>,
    /// `(type, id)`
    pub entities: Vec<(String, String)>,
    /// The answer had more than `MAX_OBJECTS` objects: some were not read.
    pub truncated: bool,
}

/// Reads the types and entities of a GraphQL answer. `None` when the body is not a JSON object
/// or has no `data` object.
pub fn find_in_answer(body: &[u8], key_fields: &KeyFields) -> Option<Found> {
    let answer: Value = serde_json::from_slice(body).ok()?;
    let data = answer.get("data")?;
    if !data.is_object() {
        return None;
    }
    let mut found = Found::default();
    note_typed(data, key_fields, &mut found);
    Some(found)
}

/// Adds to `found` the types and entities of one JSON value (an entity as a subgraph wrote it,
/// or its representation), as [`find_in_answer`] reads them under `data`. Text that cannot name a
/// type (no `__typename`, no escape that could spell it) is not parsed: most entities hold none.
pub fn find_in_value(json: &str, key_fields: &KeyFields, found: &mut Found) {
    if !json.contains(TYPENAME) && !json.contains("\\u") {
        return;
    }
    if let Ok(value) = serde_json::from_str::<Value>(json) {
        note_typed(&value, key_fields, found);
    }
}

/// Notes every object under `value` that names its type, and its id.
fn note_typed(value: &Value, key_fields: &KeyFields, found: &mut Found) {
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
    found: &mut Found,
    mut visit: impl FnMut(&mut Found, &'v serde_json::Map<String, Value>, S, &mut Vec<(&'v Value, S)>),
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
    found: &mut Found,
    typename: &str,
    object: &serde_json::Map<String, Value>,
    key_fields: &KeyFields,
) {
    found.note(typename, object_id(object, key_fields.of(typename)));
}

impl Found {
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
pub fn entry_tags(operation: Option<&str>, root_fields: &[String], found: &Found) -> Vec<String> {
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
            let mut found = Found::default();
            find_in_value(json, &keys, &mut found);
            let wrapped = format!(r#"{{"data":{{"e":{json}}}}}"#);
            let want = find_in_answer(wrapped.as_bytes(), &keys).unwrap_or_default();
            assert_eq!(found, want, "{json}");
        }
        let mut found = Found::default();
        find_in_value(r#"{"\u005f_typename":"User","id":"3"}"#, &keys, &mut found);
        assert_eq!(found.entities, vec![("User".to_string(), "3".to_string())]);
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
            Some(Found::default())
        );
    }

    #[test]
    fn entry_tags_are_bounded_coarse_first() {
        let mut found = Found::default();
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
