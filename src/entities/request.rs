//! An `_entities` request, read: which root fields ask for entities, under which response key
//! and variable, with what selection, and the representations each one asks for (deduplicated:
//! gateways send one representation per reference, so a batch often names an entity many times).

use crate::fast_hash::FastMap;
use crate::json::{write_string, Json};
use crate::request::canonical::{canonicalize, Limits, OperationKind};
use crate::request::http::read_post_body;
use crate::request::key::EntityAsk;
use graphql_parser::query::{
    parse_query, Definition, Document, OperationDefinition, Selection, SelectionSet, Value,
};
use std::collections::HashMap;
use std::rc::Rc;

/// The federation field an entities request selects.
pub const ENTITIES_FIELD: &str = "_entities";
const ENTITIES: &[u8] = ENTITIES_FIELD.as_bytes();

/// Why a request is not an entities request the filter splits (it is then cached whole, or not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotEntities {
    /// Not a GraphQL POST body the filter reads (see `request::http`), or not valid GraphQL.
    Unreadable,
    /// Not a query, or a root field other than `_entities`, or `_entities` used in a way the
    /// filter does not split (directives, a literal list, another argument).
    OtherShape,
    /// A representation without a string `__typename`, or a variable that is not a list of
    /// objects.
    BadRepresentations,
}

/// One representation, as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Representation {
    pub typename: String,
    /// Its JSON with object members sorted, compact, numbers as written: equal representations,
    /// equal text. It is also what goes upstream again (the same JSON value).
    pub canonical: String,
}

/// One `_entities` root field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntitiesField {
    /// Where its answer goes in `data`: the alias, else `_entities`.
    pub response_key: String,
    /// The variable holding its representations.
    pub variable: String,
    /// Its selection set, printed (with the document's fragments): part of each entity's key.
    pub selection: String,
    /// The distinct representations, in the order first asked.
    pub distinct: Vec<Representation>,
    /// For each position the gateway asked, the index in `distinct`.
    pub positions: Vec<usize>,
}

/// A whole `_entities` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntitiesRequest {
    pub query: String,
    pub operation_name: Option<String>,
    /// The variables other than the representations: name and canonical JSON, sorted by name.
    pub others: Vec<(String, String)>,
    /// Canonical JSON, as `request::http` reads it.
    pub extensions: Option<String>,
    pub fields: Vec<EntitiesField>,
    /// The variables other than the representations as the subgraph will see them (the sent
    /// values, and the operation's defaults for those not sent), canonical: part of each entity's
    /// key (a selection may read them, `@requires` arguments or field arguments). A gateway
    /// copies a client's `$first: Int = 3` into the subgraph query and sends no value: two
    /// client operations that differ only in that default must not share entries.
    pub other_variables: String,
}

/// One `_entities` field as its query says: response key, variable, printed selection.
pub type FieldShape = (String, String, String);

/// What a query text (with its operation name) says of its `_entities` fields and its
/// variables' defaults: the same for every batch a gateway's query plan sends, so a worker reads
/// it once (`Shapes`).
pub type Shape = Rc<OperationShape>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationShape {
    pub fields: Vec<FieldShape>,
    /// Each variable with a default: name and the default as canonical JSON (what the same value
    /// sent in `variables` prints as).
    pub defaults: Vec<(String, String)>,
}

/// The `_entities` fields of `query`'s operation `operation_name`, or why it is not split.
pub fn shape_of(
    query: &str,
    operation_name: Option<&str>,
    limits: Limits,
) -> Result<Shape, NotEntities> {
    let op = canonicalize(query, operation_name, limits).map_err(|_| NotEntities::Unreadable)?;
    if op.kind != OperationKind::Query || op.root_fields.iter().any(|f| f != "_entities") {
        return Err(NotEntities::OtherShape);
    }
    let doc = parse_query::<&str>(query).map_err(|_| NotEntities::Unreadable)?;
    Ok(Rc::new(OperationShape {
        fields: entities_fields(&doc, operation_name)?,
        defaults: defaults(&doc, operation_name)?,
    }))
}

/// The selected operation's variables that have a default, with it as canonical JSON.
fn defaults<'a>(
    doc: &Document<'a, &'a str>,
    operation_name: Option<&str>,
) -> Result<Vec<(String, String)>, NotEntities> {
    let definitions = doc.definitions.iter().find_map(|d| match d {
        Definition::Operation(OperationDefinition::Query(q))
            if operation_name.is_none() || q.name == operation_name =>
        {
            Some(&q.variable_definitions)
        }
        _ => None,
    });
    let mut out = Vec::new();
    for v in definitions.into_iter().flatten() {
        if let Some(value) = &v.default_value {
            let mut json = String::new();
            value_json(value, &mut json).ok_or(NotEntities::OtherShape)?;
            out.push((v.name.to_string(), json));
        }
    }
    Ok(out)
}

/// A GraphQL input value as canonical JSON (members sorted, strings as `json` prints them, enum
/// values as strings); `None` for a variable inside, which a default cannot hold.
fn value_json<'a>(value: &Value<'a, &'a str>, out: &mut String) -> Option<()> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Boolean(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(n) => out.push_str(&n.as_i64()?.to_string()),
        Value::Float(f) => out.push_str(&serde_json::Number::from_f64(*f)?.to_string()),
        Value::String(s) => write_string(out, s),
        Value::Enum(e) => write_string(out, e),
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                value_json(item, out)?;
            }
            out.push(']');
        }
        Value::Object(members) => {
            out.push('{');
            for (i, (name, item)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, name);
                out.push(':');
                value_json(item, out)?;
            }
            out.push('}');
        }
        Value::Variable(_) => return None,
    }
    Some(())
}

/// The shapes a worker has read, by query text and operation name (at most [`MAX_SHAPES`]; past
/// that the memory starts over).
#[derive(Debug, Default)]
pub struct Shapes(HashMap<(String, Option<String>), Result<Shape, NotEntities>>);

/// Query plans are few: a gateway sends a handful of distinct `_entities` queries per subgraph.
pub const MAX_SHAPES: usize = 256;

impl Shapes {
    pub fn shape(
        &mut self,
        query: &str,
        operation_name: Option<&str>,
        limits: Limits,
    ) -> Result<Shape, NotEntities> {
        let id = (query.to_string(), operation_name.map(str::to_string));
        if let Some(known) = self.0.get(&id) {
            return known.clone();
        }
        let shape = shape_of(query, operation_name, limits);
        if self.0.len() >= MAX_SHAPES {
            self.0.clear();
        }
        self.0.insert(id, shape.clone());
        shape
    }
}

impl EntitiesRequest {
    /// Reads `body` (a POST's); `Err` when it is not a request the filter splits.
    pub fn read(body: &[u8], limits: Limits) -> Result<EntitiesRequest, NotEntities> {
        EntitiesRequest::read_with(body, |q, o| shape_of(q, o, limits))
    }

    /// [`EntitiesRequest::read`], with the query's shape from `shape` (a worker's [`Shapes`]).
    pub fn read_with(
        body: &[u8],
        shape: impl FnOnce(&str, Option<&str>) -> Result<Shape, NotEntities>,
    ) -> Result<EntitiesRequest, NotEntities> {
        // Most requests on a subgraph hop that are not `_entities` (root fields) say so in their
        // bytes: they skip a second parse of their body here. One that spells the name with
        // escapes is read as any request (cached whole), which is correct, only less shared.
        if !body.windows(ENTITIES.len()).any(|w| w == ENTITIES) {
            return Err(NotEntities::OtherShape);
        }
        // One parse of the body: the variables stay parsed, and each representation's
        // canonical text is one write.
        let req = read_post_body(body).map_err(|_| NotEntities::Unreadable)?;
        if req.persisted.is_some() || req.extra.is_some() {
            return Err(NotEntities::OtherShape);
        }
        let shape = shape(&req.query, req.operation_name.as_deref())?;
        let variables = match &req.variables {
            Some(Json::Object(members)) => members.as_slice(),
            _ => &[],
        };
        let fields = shape
            .fields
            .iter()
            .map(|(key, variable, selection)| {
                split(variables, key.clone(), variable.clone(), selection.clone())
            })
            .collect::<Result<Vec<_>, _>>()?;
        let others: Vec<_> = variables
            .iter()
            .filter(|(name, _)| fields.iter().all(|f| f.variable != *name))
            .map(|(name, value)| (name.to_string(), value.to_canonical()))
            .collect();
        Ok(EntitiesRequest {
            other_variables: effective(&others, &shape.defaults),
            others,
            query: req.query,
            operation_name: req.operation_name,
            extensions: req.extensions,
            fields,
        })
    }

    /// What the entities of `field` (one of this request's) share in their keys.
    pub fn ask<'a>(&'a self, field: &'a EntitiesField) -> EntityAsk<'a> {
        EntityAsk {
            selection: &field.selection,
            other_variables: &self.other_variables,
            extensions: self.extensions.as_deref(),
        }
    }

    /// The body to send upstream asking, for each field, only the representations `sent[f]`
    /// (indices in that field's `distinct`, in the order they will come back).
    pub fn rewritten(&self, sent: &[Vec<usize>]) -> Vec<u8> {
        let lists: Vec<(&str, String)> = self
            .fields
            .iter()
            .enumerate()
            .map(|(f, field)| {
                let asked = sent.get(f).map(Vec::as_slice).unwrap_or_default();
                let reps: Vec<&str> = asked
                    .iter()
                    .filter_map(|i| field.distinct.get(*i).map(|r| r.canonical.as_str()))
                    .collect();
                (field.variable.as_str(), format!("[{}]", reps.join(",")))
            })
            .collect();
        let others = self.others.iter().map(|(n, v)| (n.as_str(), v.as_str()));
        let variables = object(others.chain(lists.iter().map(|(n, v)| (*n, v.as_str()))));
        let mut body = String::from("{\"query\":");
        write_string(&mut body, &self.query);
        if let Some(name) = &self.operation_name {
            body.push_str(",\"operationName\":");
            write_string(&mut body, name);
        }
        body.push_str(",\"variables\":");
        body.push_str(&variables);
        if let Some(ext) = &self.extensions {
            body.push_str(",\"extensions\":");
            body.push_str(ext);
        }
        body.push('}');
        body.into_bytes()
    }
}

/// The variables as the subgraph sees them, canonical: those sent, and the defaults of the others.
fn effective(sent: &[(String, String)], defaults: &[(String, String)]) -> String {
    let mut all: std::collections::BTreeMap<&str, &str> = defaults
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    all.extend(sent.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    object(all.into_iter())
}

/// A JSON object of members whose values are JSON texts already.
fn object<'a>(members: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut out = String::from("{");
    for (i, (name, value)) in members.enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(&mut out, name);
        out.push(':');
        out.push_str(value);
    }
    out.push('}');
    out
}

/// The `_entities` root fields of the selected operation: response key, variable, selection.
fn entities_fields<'a>(
    doc: &Document<'a, &'a str>,
    operation_name: Option<&str>,
) -> Result<Vec<(String, String, String)>, NotEntities> {
    let selection = selected(doc, operation_name).ok_or(NotEntities::OtherShape)?;
    let fragments: String = doc
        .definitions
        .iter()
        .filter_map(|d| match d {
            Definition::Fragment(f) => Some(format!("{f}")),
            Definition::Operation(_) => None,
        })
        .collect();
    let mut out = Vec::new();
    for item in &selection.items {
        let Selection::Field(field) = item else {
            return Err(NotEntities::OtherShape);
        };
        let variable = match field.arguments.as_slice() {
            [("representations", Value::Variable(v))] => v.to_string(),
            _ => return Err(NotEntities::OtherShape),
        };
        if field.name != "_entities" || !field.directives.is_empty() {
            return Err(NotEntities::OtherShape);
        }
        let key = field.alias.unwrap_or(field.name).to_string();
        if out
            .iter()
            .any(|(k, v, _): &(String, String, String)| *k == key || *v == variable)
        {
            return Err(NotEntities::OtherShape);
        }
        out.push((key, variable, format!("{}{fragments}", field.selection_set)));
    }
    if out.is_empty() {
        return Err(NotEntities::OtherShape);
    }
    Ok(out)
}

/// The root selection of the operation a request runs (the document is valid: `canonicalize`
/// read it first).
fn selected<'d, 'a>(
    doc: &'d Document<'a, &'a str>,
    name: Option<&str>,
) -> Option<&'d SelectionSet<'a, &'a str>> {
    doc.definitions.iter().find_map(|d| match d {
        Definition::Operation(OperationDefinition::Query(q))
            if name.is_none() || q.name == name =>
        {
            Some(&q.selection_set)
        }
        Definition::Operation(OperationDefinition::SelectionSet(s)) if name.is_none() => Some(s),
        _ => None,
    })
}

fn split(
    variables: &[(std::borrow::Cow<'_, str>, Json<'_>)],
    response_key: String,
    variable: String,
    selection: String,
) -> Result<EntitiesField, NotEntities> {
    let reps = match variables.iter().find(|(name, _)| *name == variable) {
        Some((_, Json::Array(reps))) => reps,
        _ => return Err(NotEntities::BadRepresentations),
    };
    let mut read = Vec::with_capacity(reps.len());
    for rep in reps {
        let Json::Object(members) = rep else {
            return Err(NotEntities::BadRepresentations);
        };
        let typename = match members.iter().find(|(name, _)| name == "__typename") {
            Some((_, Json::String(t))) => t,
            _ => return Err(NotEntities::BadRepresentations),
        };
        // The reader sorts members by name: printing is canonical.
        read.push((typename, rep.to_canonical()));
    }
    let (positions, first) = dedup(read.iter().map(|(_, canonical)| canonical.as_str()));
    let distinct = read
        .into_iter()
        .zip(first)
        .filter(|(_, first)| *first)
        .map(|((typename, canonical), _)| Representation {
            typename: typename.to_string(),
            canonical,
        })
        .collect();
    Ok(EntitiesField {
        response_key,
        variable,
        selection,
        distinct,
        positions,
    })
}

/// For each text, the index of its first equal among the distinct ones (in order of first
/// appearance), and whether it is that first one. Texts come from the client: the map is keyed
/// per worker and compares whole texts.
fn dedup<'t>(texts: impl ExactSizeIterator<Item = &'t str>) -> (Vec<usize>, Vec<bool>) {
    let mut seen: FastMap<&str, usize> = FastMap::default();
    seen.reserve(texts.len());
    let mut positions = Vec::with_capacity(texts.len());
    let mut first = Vec::with_capacity(texts.len());
    for text in texts {
        let next = seen.len();
        let at = *seen.entry(text).or_insert(next);
        first.push(at == next);
        positions.push(at);
    }
    (positions, first)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_depth: 32,
        max_fields: 2000,
    };

    #[test]
    fn dedup_points_each_text_at_its_first_equal() {
        let (positions, first) = dedup(["a", "b", "a", "c", "b"].into_iter());
        assert_eq!(positions, vec![0, 1, 0, 2, 1]);
        assert_eq!(first, vec![true, true, false, true, false]);
    }

    fn read(body: &serde_json::Value) -> Result<EntitiesRequest, NotEntities> {
        EntitiesRequest::read(body.to_string().as_bytes(), LIMITS)
    }

    #[test]
    fn apollo_gateway_s_request_is_split_and_duplicates_asked_once() {
        let r = read(&serde_json::json!({
            "query": "query Q__reviews__1($representations:[_Any!]!){_entities(representations:$representations){...on User{name}}}",
            "operationName": "Q__reviews__1",
            "variables": {"representations": [
                {"__typename": "User", "id": "2"},
                {"id": "1", "__typename": "User"},
                {"__typename": "User", "id": "2"}
            ]}
        }))
        .unwrap();
        assert_eq!(r.fields.len(), 1);
        let f = &r.fields[0];
        assert_eq!(
            (f.response_key.as_str(), f.variable.as_str()),
            ("_entities", "representations")
        );
        assert_eq!(f.distinct.len(), 2);
        assert_eq!(f.positions, vec![0, 1, 0]);
        assert_eq!(f.distinct[1].canonical, r#"{"__typename":"User","id":"1"}"#);
        assert!(f.selection.contains("on User"));
        assert_eq!(r.other_variables, "{}");
    }

    #[test]
    fn batched_aliased_fields_are_read_each_with_its_variable() {
        let r = read(&serde_json::json!({
            "query": "query($_v0_representations:[_Any!]!,$_v1_representations:[_Any!]!,$x:Int){_v0__entities:_entities(representations:$_v0_representations){...on Product{name}} _v1__entities:_entities(representations:$_v1_representations){...on User{name}}}",
            "variables": {
                "_v0_representations": [{"__typename": "Product", "id": "1"}],
                "_v1_representations": [{"__typename": "User", "id": "1"}],
                "x": 3
            }
        }))
        .unwrap();
        let keys: Vec<_> = r
            .fields
            .iter()
            .map(|f| (f.response_key.as_str(), f.variable.as_str()))
            .collect();
        assert_eq!(
            keys,
            [
                ("_v0__entities", "_v0_representations"),
                ("_v1__entities", "_v1_representations")
            ]
        );
        assert_eq!(r.other_variables, r#"{"x":3}"#);
        let body = r.rewritten(&[vec![], vec![0]]);
        let sent: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            sent["variables"]["_v0_representations"],
            serde_json::json!([])
        );
        assert_eq!(sent["variables"]["_v1_representations"][0]["id"], "1");
        assert_eq!(sent["variables"]["x"], 3);
        assert_eq!(sent["query"], r.query.as_str());
    }

    #[test]
    fn a_variable_s_default_is_part_of_the_key_as_if_it_had_been_sent() {
        let with = |default: &str, sent: serde_json::Value| {
            let query = format!(
                "query($r:[_Any!]!,$first:Int={default}){{_entities(representations:$r){{...on Product{{reviews(first:$first){{body}}}}}}}}"
            );
            let mut vars = serde_json::json!({"r": [{"__typename": "Product", "id": "1"}]});
            if let serde_json::Value::Object(extra) = sent {
                vars.as_object_mut().unwrap().extend(extra);
            }
            let r = read(&serde_json::json!({"query": query, "variables": vars})).unwrap();
            assert_eq!(
                r.others.len(),
                vars.as_object().unwrap().len() - 1,
                "sent as sent"
            );
            r.other_variables
        };
        let none = serde_json::json!({});
        assert_eq!(with("1", none.clone()), r#"{"first":1}"#);
        assert_ne!(with("1", none.clone()), with("3", none.clone()));
        assert_eq!(
            with("3", none.clone()),
            with("1", serde_json::json!({"first": 3})),
            "the value the subgraph sees decides"
        );
        assert_eq!(
            with(r#"{b: [RED, "x"], a: null}"#, none),
            r#"{"first":{"a":null,"b":["RED","x"]}}"#
        );
    }

    #[test]
    fn other_shapes_are_not_split() {
        let reps = serde_json::json!({"r": [{"__typename": "T", "id": 1}]});
        for (query, vars, why) in [
            ("{ products { id } }", serde_json::json!({}), NotEntities::OtherShape),
            ("query($r:[_Any!]!){_entities(representations:$r){...on T{id}} products{id}}", reps.clone(), NotEntities::OtherShape),
            ("query($r:[_Any!]!){_entities(representations:$r) @include(if:true){...on T{id}}}", reps.clone(), NotEntities::OtherShape),
            ("mutation($r:[_Any!]!){_entities(representations:$r){...on T{id}}}", reps.clone(), NotEntities::OtherShape),
            ("query($r:[_Any!]!){_entities(representations:$r){...on T{id}}}", serde_json::json!({"r": [{"id": 1}]}), NotEntities::BadRepresentations),
            ("query($r:[_Any!]!){_entities(representations:$r){...on T{id}}}", serde_json::json!({"r": {"__typename": "T"}}), NotEntities::BadRepresentations),
            ("query($r:[_Any!]!){a:_entities(representations:$r){...on T{id}} b:_entities(representations:$r){...on T{id}}}", reps.clone(), NotEntities::OtherShape),
            ("query($r:[_Any!]!){_entities(representations:$r){...on T{id}}", reps.clone(), NotEntities::Unreadable),
        ] {
            let body = serde_json::json!({"query": query, "variables": vars});
            assert_eq!(read(&body), Err(why), "{query}");
        }
    }
}
