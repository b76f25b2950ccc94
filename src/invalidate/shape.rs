//! Which keys of an answer really are `__typename` and key fields. A client names the keys of its
//! answer (aliases): `{ __typename: bio id: handle }` makes any object look like any entity of any
//! type. A mutation's purge must not be steered that way, so its answer is read through the
//! operation that asked for it: a response key counts as field `f` only when every selection that
//! produces that key at that place (fragments, inline and named, merged in) is plainly `f`.
//!
//! What cannot be mapped gives no tag. A purge that is too broad is safer than one too narrow only
//! when nobody outside chose it: anything broader derived from an unmappable answer (its types,
//! or `all`) would be the client's to trigger at will. So an answer key the operation does not
//! explain is skipped with everything under it, and an operation too large to map derives nothing
//! (the origin can still declare its tags, see `invalidate::declared`).

use crate::config::KeyFields;
use crate::invalidate::tags::{scalar_text, walk_objects, Objects};
use graphql_parser::query::{Field, FragmentDefinition, Selection, SelectionSet};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Texts as the parser borrows them from the query.
pub type Txt<'a> = &'a str;

/// Field selections (fragments expanded where they are spread) mapped before giving up: a
/// document of a few kilobytes can spread fragments into exponentially many.
const MAX_SELECTIONS: usize = 10_000;
/// Nesting of fields and fragment spreads followed: bounds the recursion whatever the document.
const MAX_NESTING: usize = 128;
const TYPENAME: &str = "__typename";

/// Why an operation has no shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShapeError {
    /// More selections or deeper nesting than the bounds above.
    TooLarge,
    /// A spread names a fragment the document does not define.
    UnknownFragment,
}

/// The keys an operation's answer may have, object by object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseShape {
    /// `nodes[0]` is `data`.
    nodes: Vec<ShapeNode>,
}

/// One object position: its response keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ShapeNode {
    keys: BTreeMap<String, ShapeSlot>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ShapeSlot {
    /// The field behind the key, when every selection of it names that field with no arguments
    /// and no directive but `@skip`/`@include` (which only drop it). Arguments or other
    /// directives may change what a key field returns; differing fields (`... on A { x: id }
    /// ... on B { x: name }`) cannot be told apart without the schema. Both: `None`.
    field: Option<String>,
    /// The position of the objects under the key, for fields with a selection set.
    child: Option<usize>,
}

/// A fragment's selection set, by name.
pub type Fragments<'d, 'a> = BTreeMap<&'a str, &'d FragmentDefinition<'a, Txt<'a>>>;

/// Maps `root` (an operation's selection set) and the fragments it spreads.
pub fn shape_of<'a>(
    root: &SelectionSet<'a, Txt<'a>>,
    fragments: &Fragments<'_, 'a>,
) -> Result<ResponseShape, ShapeError> {
    let mut builder = Builder {
        fragments,
        nodes: vec![ShapeNode::default()],
        budget: MAX_SELECTIONS,
        spreading: Vec::new(),
    };
    builder.add(0, root, 0)?;
    Ok(ResponseShape {
        nodes: builder.nodes,
    })
}

struct Builder<'f, 'd, 'a> {
    fragments: &'f Fragments<'d, 'a>,
    nodes: Vec<ShapeNode>,
    budget: usize,
    /// Fragments being expanded: a cycle (invalid, but parseable) is not followed again.
    spreading: Vec<&'a str>,
}

impl<'a> Builder<'_, '_, 'a> {
    fn add(
        &mut self,
        node: usize,
        set: &SelectionSet<'a, Txt<'a>>,
        depth: usize,
    ) -> Result<(), ShapeError> {
        if depth > MAX_NESTING {
            return Err(ShapeError::TooLarge);
        }
        for item in &set.items {
            match item {
                Selection::Field(f) => self.add_field(node, f, depth)?,
                // Merged into the same position: which type condition applies is unknown here,
                // and conflicting keys become unmapped (see `ShapeSlot::field`).
                Selection::InlineFragment(i) => self.add(node, &i.selection_set, depth + 1)?,
                Selection::FragmentSpread(s) => {
                    if self.spreading.contains(&s.fragment_name) {
                        continue;
                    }
                    let def = self
                        .fragments
                        .get(s.fragment_name)
                        .ok_or(ShapeError::UnknownFragment)?;
                    self.spreading.push(s.fragment_name);
                    self.add(node, &def.selection_set, depth + 1)?;
                    self.spreading.pop();
                }
            }
        }
        Ok(())
    }

    fn add_field(
        &mut self,
        node: usize,
        f: &Field<'a, Txt<'a>>,
        depth: usize,
    ) -> Result<(), ShapeError> {
        self.budget = self.budget.checked_sub(1).ok_or(ShapeError::TooLarge)?;
        let plain = f.arguments.is_empty()
            && f.directives
                .iter()
                .all(|d| d.name == "skip" || d.name == "include");
        let field = plain.then_some(f.name);
        let key = f.alias.unwrap_or(f.name);
        let next = self.nodes.len();
        let slot = self.nodes[node]
            .keys
            .entry(key.to_string())
            .or_insert_with(|| ShapeSlot {
                field: field.map(str::to_string),
                child: None,
            });
        if slot.field.as_deref() != field {
            slot.field = None;
        }
        if f.selection_set.items.is_empty() {
            return Ok(());
        }
        let child = *slot.child.get_or_insert(next);
        if child == next {
            self.nodes.push(ShapeNode::default());
        }
        self.add(child, &f.selection_set, depth + 1)
    }
}

/// Reads the types and entities of an answer through its operation's shape: only the values of
/// real `__typename` and key-field selections count, and only objects the operation selected are
/// visited (an object inside a custom scalar, `JSON` say, is the client's or the origin's data,
/// not an entity). `None` when the body is not a JSON object or has no `data` object.
pub fn find_in_shaped_answer(
    answer: &Value,
    shape: &ResponseShape,
    key_fields: &KeyFields,
) -> Option<Objects> {
    let data = answer.get("data")?;
    if !data.is_object() || shape.nodes.is_empty() {
        return None;
    }
    let mut found = Objects::default();
    walk_objects(data, 0usize, &mut found, |found, map, at, children| {
        let Some(node) = shape.nodes.get(at) else {
            return;
        };
        note_object(found, map, node, key_fields);
        for (key, v) in map {
            if let Some(child) = node.keys.get(key).and_then(|s| s.child) {
                children.push((v, child));
            }
        }
    });
    Some(found)
}

fn note_object(
    found: &mut Objects,
    map: &Map<String, Value>,
    node: &ShapeNode,
    key_fields: &KeyFields,
) {
    let Some(Value::String(typename)) = real_value(map, node, TYPENAME) else {
        return;
    };
    let id: Option<Vec<String>> = key_fields
        .of(typename)
        .iter()
        .map(|f| scalar_text(real_value(map, node, f)?))
        .collect();
    let id = id.filter(|parts| !parts.is_empty()).map(|p| p.join(":"));
    found.note(typename, id);
}

/// The value of `field` in `map`, under whichever keys really select it; `None` when none does,
/// or when two of them disagree.
fn real_value<'v>(map: &'v Map<String, Value>, node: &ShapeNode, field: &str) -> Option<&'v Value> {
    let mut values = node
        .keys
        .iter()
        .filter(|(_, slot)| slot.field.as_deref() == Some(field))
        .filter_map(|(key, _)| map.get(key));
    let first = values.next()?;
    values.all(|v| v == first).then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use graphql_parser::query::{parse_query, Definition, OperationDefinition};

    fn shape(doc: &str) -> Result<ResponseShape, ShapeError> {
        let doc = parse_query::<&str>(doc).unwrap();
        let mut fragments = Fragments::new();
        let mut root = None;
        for d in &doc.definitions {
            match d {
                Definition::Fragment(f) => {
                    fragments.insert(f.name, f);
                }
                Definition::Operation(OperationDefinition::Mutation(m)) => {
                    root = Some(&m.selection_set)
                }
                Definition::Operation(OperationDefinition::SelectionSet(s)) => root = Some(s),
                Definition::Operation(_) => {}
            }
        }
        shape_of(root.unwrap(), &fragments)
    }

    fn entities(doc: &str, answer: &str) -> Vec<(String, String)> {
        let answer: Value = serde_json::from_str(answer).unwrap();
        let found =
            find_in_shaped_answer(&answer, &shape(doc).unwrap(), &KeyFields::default()).unwrap();
        found.entities
    }

    fn types(doc: &str, answer: &str) -> Vec<String> {
        let answer: Value = serde_json::from_str(answer).unwrap();
        let found =
            find_in_shaped_answer(&answer, &shape(doc).unwrap(), &KeyFields::default()).unwrap();
        found.types
    }

    fn e(t: &str, id: &str) -> (String, String) {
        (t.to_string(), id.to_string())
    }

    #[test]
    fn aliases_onto_typename_or_key_fields_are_not_believed() {
        let attack = r#"mutation { updateProfile(bio: "Product") { __typename: bio id: handle } }"#;
        let answer = r#"{"data":{"updateProfile":{"__typename":"Product","id":"1"}}}"#;
        assert_eq!(entities(attack, answer), vec![]);
        assert_eq!(types(attack, answer), Vec::<String>::new());
        let half = r#"mutation { updateProfile { __typename id: handle } }"#;
        let answer = r#"{"data":{"updateProfile":{"__typename":"User","id":"1"}}}"#;
        assert_eq!(entities(half, answer), vec![], "the id is not the id");
        assert_eq!(types(half, answer), vec!["User"], "the type is real");
    }

    #[test]
    fn genuine_fields_count_even_under_their_own_alias() {
        let doc = r#"mutation { u: updateUser(id: 1) { t: __typename key: id name } }"#;
        let answer = r#"{"data":{"u":{"t":"User","key":1,"name":"x"}}}"#;
        assert_eq!(entities(doc, answer), vec![e("User", "1")]);
        let plain = r#"mutation { updateUser(id: 1) { __typename id } }"#;
        let answer = r#"{"data":{"updateUser":{"__typename":"User","id":"1"}}}"#;
        assert_eq!(entities(plain, answer), vec![e("User", "1")]);
    }

    #[test]
    fn fragments_inline_and_named_and_nested_lists() {
        let doc = r#"mutation { createPost { ...P author { ... on User { __typename id } } } }
                     fragment P on Post { __typename id tags { __typename id } }"#;
        let answer = r#"{"data":{"createPost":{"__typename":"Post","id":"7",
            "tags":[[{"__typename":"Tag","id":"a"}],[{"__typename":"Tag","id":"b"}]],
            "author":{"__typename":"User","id":"2"}}}}"#;
        assert_eq!(
            entities(doc, answer),
            vec![e("Post", "7"), e("User", "2"), e("Tag", "a"), e("Tag", "b")],
            "keys in the answer's order (serde_json sorts them)"
        );
    }

    #[test]
    fn a_key_two_fragments_fill_differently_is_no_field() {
        let doc = r#"mutation { node { __typename ... on A { id } ... on B { id: name } } }"#;
        let answer = r#"{"data":{"node":{"__typename":"A","id":"1"}}}"#;
        assert_eq!(entities(doc, answer), vec![]);
        let named = r#"mutation { node { __typename ...F id } } fragment F on A { id: name }"#;
        assert_eq!(entities(named, answer), vec![]);
    }

    #[test]
    fn arguments_and_unknown_directives_make_a_key_field_unreliable() {
        let answer = r#"{"data":{"m":{"__typename":"User","id":"x"}}}"#;
        assert_eq!(
            entities(r#"mutation { m { __typename id(format: "x") } }"#, answer),
            vec![]
        );
        assert_eq!(
            entities(r#"mutation { m { __typename id @lowercase } }"#, answer),
            vec![]
        );
        assert_eq!(
            entities(
                r#"mutation { m { __typename id @include(if: true) } }"#,
                answer
            ),
            vec![e("User", "x")]
        );
    }

    #[test]
    fn objects_the_operation_did_not_select_are_not_read() {
        // A custom scalar (JSON) whose value the client wrote.
        let doc = r#"mutation { setMeta(meta: "...") { __typename id meta } }"#;
        let answer = r#"{"data":{"setMeta":{"__typename":"User","id":"1",
            "meta":{"__typename":"Product","id":"9"},"extra":{"__typename":"Product","id":"8"}}}}"#;
        assert_eq!(entities(doc, answer), vec![e("User", "1")]);
    }

    #[test]
    fn spread_cycles_and_unknown_fragments_and_blow_ups() {
        let cyclic = r#"mutation { m { ...A } } fragment A on T { __typename id ...A }"#;
        let answer = r#"{"data":{"m":{"__typename":"T","id":"1"}}}"#;
        assert_eq!(entities(cyclic, answer), vec![e("T", "1")]);
        assert_eq!(
            shape("mutation { m { ...Nope } }"),
            Err(ShapeError::UnknownFragment)
        );
        // Each level spreads the next twice: 2^20 selections from a few hundred bytes.
        let mut doc = String::from("mutation { m { ...F0 } }");
        for i in 0..20 {
            doc.push_str(&format!(
                " fragment F{i} on T {{ a {{ ...F{n} }} b {{ ...F{n} }} }}",
                n = i + 1
            ));
        }
        doc.push_str(" fragment F20 on T { id }");
        assert_eq!(shape(&doc), Err(ShapeError::TooLarge));
    }
}
