//! Canonical text of the GraphQL operation that will actually execute.
//!
//! The rule: two documents print the same only if every GraphQL server must answer them the same.
//! So what the spec says is insignificant is normalized away (whitespace, commas, comments, argument
//! order, input-object field order, variable-definition order, the `query` keyword of an anonymous
//! query, unused fragments, operations not selected), and everything else is kept exactly
//! (selection order and aliases shape the response; values and directives change it).

use crate::invalidate::shape::{shape_of, Fragments, ResponseShape, Txt};
use graphql_parser::query::{
    parse_query, Definition, Directive, Document, FragmentDefinition, OperationDefinition,
    Selection, SelectionSet, Type, TypeCondition, Value, VariableDefinition,
};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Printed for a Float that is not finite. Canonical text never holds a raw NUL otherwise
/// (strings are escaped), so its presence means "refuse this document".
const NOT_FINITE: char = '\0';

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationKind {
    Query,
    Mutation,
    Subscription,
}

/// The selected operation, printed canonically with the fragments it uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalOperation {
    pub kind: OperationKind,
    pub name: Option<String>,
    /// Names of the top-level fields of the operation's selection (for per-field policy).
    pub root_fields: Vec<String>,
    pub text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CanonicalError {
    /// Nesting beyond the configured depth; the parser was never run.
    TooDeep,
    /// More field selections than the configured width.
    TooWide,
    /// Not a valid executable GraphQL document.
    Invalid,
    /// No operation matches `operationName`, or none was named and there are several.
    UnknownOperation,
    /// A spread names a fragment the document does not define.
    UnknownFragment,
    /// Valid GraphQL that the parser would decode wrongly (see [`prescan`]): not cached.
    Unsupported,
}

/// How much of a query the filter is willing to look at (configured: `config::Limits`).
pub use crate::config::Limits;

/// Parses `query`, selects the operation named `operation_name`, and prints it canonically.
pub fn canonicalize(
    query: &str,
    operation_name: Option<&str>,
    limits: Limits,
) -> Result<CanonicalOperation, CanonicalError> {
    prescan(query, limits.max_depth)?;
    let doc: Document<Txt> = parse_query(query).map_err(|_| CanonicalError::Invalid)?;
    let fragments = index_fragments(&doc)?;
    let op = select_operation(&doc, operation_name)?;
    let (kind, name, vars, directives, selection) = operation_parts(op);
    let used = used_fragments(selection, &fragments)?;
    let fields = count_fields(selection)
        + used
            .iter()
            .map(|f| count_fields(&f.selection_set))
            .sum::<usize>();
    if fields > limits.max_fields {
        return Err(CanonicalError::TooWide);
    }

    let mut out = String::with_capacity(query.len());
    out.push_str(match kind {
        OperationKind::Query => "query",
        OperationKind::Mutation => "mutation",
        OperationKind::Subscription => "subscription",
    });
    if let Some(n) = name {
        out.push(' ');
        out.push_str(n);
    }
    print_variable_definitions(&mut out, vars);
    print_directives(&mut out, directives);
    print_selection_set(&mut out, selection);

    for fragment in used {
        out.push_str(" fragment ");
        out.push_str(fragment.name);
        let TypeCondition::On(on) = &fragment.type_condition;
        out.push_str(" on ");
        out.push_str(on);
        print_directives(&mut out, &fragment.directives);
        print_selection_set(&mut out, &fragment.selection_set);
    }

    let mut root_fields = Vec::new();
    collect_root_fields(selection, &fragments, &mut Vec::new(), &mut root_fields);
    if out.contains(NOT_FINITE) {
        return Err(CanonicalError::Invalid);
    }
    Ok(CanonicalOperation {
        kind,
        name: name.map(str::to_string),
        root_fields,
        text: out,
    })
}

/// The shape of a mutation's answer (see `invalidate::shape`), read from the document the origin
/// will execute, with the same refusals as [`canonicalize`]. `None` when the document is not one
/// mutation this filter can map: then its answer's objects purge nothing.
pub fn mutation_shape(
    query: &str,
    operation_name: Option<&str>,
    limits: Limits,
) -> Option<ResponseShape> {
    prescan(query, limits.max_depth).ok()?;
    let doc: Document<Txt> = parse_query(query).ok()?;
    let fragments = index_fragments(&doc).ok()?;
    let op = select_operation(&doc, operation_name).ok()?;
    let (kind, _, _, _, selection) = operation_parts(op);
    if kind != OperationKind::Mutation {
        return None;
    }
    shape_of(selection, &fragments).ok()
}

type OperationParts<'d, 'a> = (
    OperationKind,
    Option<&'a str>,
    &'d [VariableDefinition<'a, Txt<'a>>],
    &'d [Directive<'a, Txt<'a>>],
    &'d SelectionSet<'a, Txt<'a>>,
);

fn operation_parts<'d, 'a>(op: &'d OperationDefinition<'a, Txt<'a>>) -> OperationParts<'d, 'a> {
    match op {
        OperationDefinition::SelectionSet(s) => (OperationKind::Query, None, &[], &[], s),
        OperationDefinition::Query(q) => (
            OperationKind::Query,
            q.name,
            &q.variable_definitions,
            &q.directives,
            &q.selection_set,
        ),
        OperationDefinition::Mutation(m) => (
            OperationKind::Mutation,
            m.name,
            &m.variable_definitions,
            &m.directives,
            &m.selection_set,
        ),
        OperationDefinition::Subscription(s) => (
            OperationKind::Subscription,
            s.name,
            &s.variable_definitions,
            &s.directives,
            &s.selection_set,
        ),
    }
}

fn operation_name<'a>(op: &OperationDefinition<'a, Txt<'a>>) -> Option<&'a str> {
    operation_parts(op).1
}

fn select_operation<'d, 'a>(
    doc: &'d Document<'a, Txt<'a>>,
    wanted: Option<&str>,
) -> Result<&'d OperationDefinition<'a, Txt<'a>>, CanonicalError> {
    let ops: Vec<&OperationDefinition<'a, Txt<'a>>> = doc
        .definitions
        .iter()
        .filter_map(|d| match d {
            Definition::Operation(op) => Some(op),
            Definition::Fragment(_) => None,
        })
        .collect();
    // Duplicate operation names, or an anonymous operation beside others, make the document invalid.
    if ops.len() > 1 {
        let mut names: Vec<Option<&str>> = ops.iter().map(|op| operation_name(op)).collect();
        if names.contains(&None) {
            return Err(CanonicalError::Invalid);
        }
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return Err(CanonicalError::Invalid);
        }
    }
    match wanted {
        Some(name) => ops
            .into_iter()
            .find(|op| operation_name(op) == Some(name))
            .ok_or(CanonicalError::UnknownOperation),
        None if ops.len() == 1 => Ok(ops[0]),
        None => Err(CanonicalError::UnknownOperation),
    }
}

fn index_fragments<'d, 'a>(
    doc: &'d Document<'a, Txt<'a>>,
) -> Result<Fragments<'d, 'a>, CanonicalError> {
    let mut map = BTreeMap::new();
    for def in &doc.definitions {
        if let Definition::Fragment(f) = def {
            if map.insert(f.name, f).is_some() {
                return Err(CanonicalError::Invalid);
            }
        }
    }
    Ok(map)
}

/// The fragments reachable from the operation, sorted by name. A worklist with a visited set, so
/// fragment cycles (invalid, but parseable) cannot loop.
fn used_fragments<'d, 'a>(
    root: &'d SelectionSet<'a, Txt<'a>>,
    fragments: &Fragments<'d, 'a>,
) -> Result<Vec<&'d FragmentDefinition<'a, Txt<'a>>>, CanonicalError> {
    let mut used: BTreeMap<&'a str, &'d FragmentDefinition<'a, Txt<'a>>> = BTreeMap::new();
    let mut pending: Vec<&'a str> = Vec::new();
    collect_spreads(root, &mut pending);
    while let Some(name) = pending.pop() {
        if used.contains_key(name) {
            continue;
        }
        let def = fragments.get(name).ok_or(CanonicalError::UnknownFragment)?;
        used.insert(name, def);
        collect_spreads(&def.selection_set, &mut pending);
    }
    Ok(used.into_values().collect())
}

/// Top-level field names, including those selected through fragments at the top level (each
/// fragment visited once), for per-field policy.
fn collect_root_fields<'a>(
    set: &SelectionSet<'a, Txt<'a>>,
    fragments: &Fragments<'_, 'a>,
    visited: &mut Vec<&'a str>,
    out: &mut Vec<String>,
) {
    for item in &set.items {
        match item {
            Selection::Field(f) => {
                if !out.iter().any(|o| o == f.name) {
                    out.push(f.name.to_string());
                }
            }
            Selection::InlineFragment(i) => {
                collect_root_fields(&i.selection_set, fragments, visited, out)
            }
            Selection::FragmentSpread(s) => {
                if !visited.contains(&s.fragment_name) {
                    visited.push(s.fragment_name);
                    if let Some(def) = fragments.get(s.fragment_name) {
                        collect_root_fields(&def.selection_set, fragments, visited, out);
                    }
                }
            }
        }
    }
}

fn count_fields<'a>(set: &SelectionSet<'a, Txt<'a>>) -> usize {
    set.items
        .iter()
        .map(|item| match item {
            Selection::Field(f) => 1 + count_fields(&f.selection_set),
            Selection::FragmentSpread(_) => 0,
            Selection::InlineFragment(i) => count_fields(&i.selection_set),
        })
        .sum()
}

fn collect_spreads<'a>(set: &SelectionSet<'a, Txt<'a>>, out: &mut Vec<&'a str>) {
    for item in &set.items {
        match item {
            Selection::Field(f) => collect_spreads(&f.selection_set, out),
            Selection::FragmentSpread(s) => out.push(s.fragment_name),
            Selection::InlineFragment(i) => collect_spreads(&i.selection_set, out),
        }
    }
}

fn print_variable_definitions<'a>(out: &mut String, vars: &[VariableDefinition<'a, Txt<'a>>]) {
    if vars.is_empty() {
        return;
    }
    let mut sorted: Vec<&VariableDefinition<'a, Txt<'a>>> = vars.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(b.name));
    out.push('(');
    for (i, v) in sorted.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('$');
        out.push_str(v.name);
        out.push(':');
        print_type(out, &v.var_type);
        if let Some(default) = &v.default_value {
            out.push('=');
            print_value(out, default);
        }
    }
    out.push(')');
}

fn print_type<'a>(out: &mut String, t: &Type<'a, Txt<'a>>) {
    match t {
        Type::NamedType(n) => out.push_str(n),
        Type::ListType(inner) => {
            out.push('[');
            print_type(out, inner);
            out.push(']');
        }
        Type::NonNullType(inner) => {
            print_type(out, inner);
            out.push('!');
        }
    }
}

fn print_selection_set<'a>(out: &mut String, set: &SelectionSet<'a, Txt<'a>>) {
    out.push('{');
    for (i, item) in set.items.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        match item {
            Selection::Field(f) => {
                if let Some(alias) = f.alias {
                    out.push_str(alias);
                    out.push(':');
                }
                out.push_str(f.name);
                print_arguments(out, &f.arguments);
                print_directives(out, &f.directives);
                if !f.selection_set.items.is_empty() {
                    print_selection_set(out, &f.selection_set);
                }
            }
            Selection::FragmentSpread(s) => {
                out.push_str("...");
                out.push_str(s.fragment_name);
                print_directives(out, &s.directives);
            }
            Selection::InlineFragment(inline) => {
                out.push_str("...");
                if let Some(TypeCondition::On(on)) = &inline.type_condition {
                    out.push_str("on ");
                    out.push_str(on);
                }
                print_directives(out, &inline.directives);
                print_selection_set(out, &inline.selection_set);
            }
        }
    }
    out.push('}');
}

/// Argument order is insignificant in GraphQL; duplicates (invalid) keep their relative order.
fn print_arguments<'a>(out: &mut String, args: &[(Txt<'a>, Value<'a, Txt<'a>>)]) {
    if args.is_empty() {
        return;
    }
    let mut sorted: Vec<&(Txt<'a>, Value<'a, Txt<'a>>)> = args.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    out.push('(');
    for (i, (name, value)) in sorted.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(name);
        out.push(':');
        print_value(out, value);
    }
    out.push(')');
}

/// Directive order is kept: it is significant for some directives and costs nothing to keep.
fn print_directives<'a>(out: &mut String, directives: &[Directive<'a, Txt<'a>>]) {
    for d in directives {
        out.push('@');
        out.push_str(d.name);
        print_arguments(out, &d.arguments);
    }
}

fn print_value<'a>(out: &mut String, value: &Value<'a, Txt<'a>>) {
    match value {
        Value::Variable(v) => {
            out.push('$');
            out.push_str(v);
        }
        Value::Int(n) => {
            // graphql-parser only builds Int for values that fit an i64.
            let _ = write!(out, "{}", n.as_i64().unwrap_or_default());
        }
        // Always an exponent with a sign (`1.5e+0`): never like an Int, and re-parsable.
        // A literal too large for f64 parses as infinity: marked so that it is refused below.
        Value::Float(f) if !f.is_finite() => out.push(NOT_FINITE),
        Value::Float(f) => {
            let text = format!("{f:e}");
            match text.split_once('e') {
                Some((mantissa, exp)) if !exp.starts_with('-') => {
                    let _ = write!(out, "{mantissa}e+{exp}");
                }
                _ => out.push_str(&text),
            }
        }
        Value::String(s) => print_string(out, s),
        Value::Boolean(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Null => out.push_str("null"),
        Value::Enum(e) => out.push_str(e),
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                print_value(out, item);
            }
            out.push(']');
        }
        // A BTreeMap: fields come out sorted by name, which is what makes literal order irrelevant.
        Value::Object(fields) => {
            out.push('{');
            for (i, (name, v)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(name);
                out.push(':');
                print_value(out, v);
            }
            out.push('}');
        }
    }
}

/// Strings are printed JSON-escaped, so block strings and escaped forms of the same value agree
/// and different values never do.
fn print_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A lexical pass before the recursive-descent parser: bounds the nesting (so a hostile query
/// cannot exhaust the wasm stack) and refuses what graphql-parser 0.4 gets wrong, which would
/// otherwise let two different values share a key or even panic:
/// - block strings other than one line of printable ASCII (its dedent slices multi-byte
///   whitespace mid-character, and departs from the spec on `\r`, Unicode whitespace and short
///   blank lines);
/// - the `\b` escape (decoded as U+0010) and `\u` not followed by four hex digits (accepted).
fn prescan(query: &str, max: usize) -> Result<(), CanonicalError> {
    let b = query.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'#' => {
                while i < b.len() && b[i] != b'\n' && b[i] != b'\r' {
                    i += 1;
                }
            }
            b'"' if b[i..].starts_with(b"\"\"\"") => {
                i += 3;
                while i < b.len() && !b[i..].starts_with(b"\"\"\"") {
                    if !(0x20..0x7f).contains(&b[i]) {
                        return Err(CanonicalError::Unsupported);
                    }
                    i += if b[i..].starts_with(b"\\\"\"\"") {
                        4
                    } else {
                        1
                    };
                }
                i += 2;
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' && b[i] != b'\n' {
                    if b[i] == b'\\' {
                        match b.get(i + 1) {
                            Some(b'b') => return Err(CanonicalError::Unsupported),
                            Some(b'u') => {
                                let hex = b.get(i + 2..i + 6).unwrap_or_default();
                                if hex.len() != 4 || !hex.iter().all(u8::is_ascii_hexdigit) {
                                    return Err(CanonicalError::Invalid);
                                }
                            }
                            _ => {}
                        }
                        i += 2;
                    } else {
                        i += 1;
                    }
                }
            }
            b'{' | b'(' | b'[' => {
                depth += 1;
                if depth > max {
                    return Err(CanonicalError::TooDeep);
                }
            }
            b'}' | b')' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim(max_depth: usize) -> Limits {
        Limits {
            max_depth,
            max_fields: 10_000,
        }
    }

    fn canon(q: &str) -> String {
        canonicalize(q, None, lim(50)).unwrap().text
    }

    fn canon_op(q: &str, op: &str) -> String {
        canonicalize(q, Some(op), lim(50)).unwrap().text
    }

    #[test]
    fn insignificant_differences_share_text() {
        let base = canon("{ user(id: 1, name: \"x\") { id name } }");
        for same in [
            "{user(id:1,name:\"x\"){id,name}}",
            "query { user(name: \"x\", id: 1) { id name } }",
            "# comment\n{\n  user(id: 1, name: \"x\") {\n id\n name # trailing\n }\n}",
            "{ user(id: 1, name: \"\"\"x\"\"\") { id name } }",
            "{ user(id: 1, name: \"\\u0078\") { id name } }",
            "{ user(id: 1, name: \"x\") { id name } } fragment Unused on User { id }",
        ] {
            assert_eq!(canon(same), base, "{same}");
        }
    }

    #[test]
    fn input_object_field_order_is_insignificant() {
        assert_eq!(
            canon("{ f(in: {a: 1, b: {c: 2, d: 3}}) }"),
            canon("{ f(in: {b: {d: 3, c: 2}, a: 1}) }")
        );
    }

    #[test]
    fn variable_definition_order_is_insignificant() {
        assert_eq!(
            canon("query Q($a: Int, $b: [String!]! = [\"x\"]) { f(a: $a, b: $b) }"),
            canon("query Q($b: [String!]! = [\"x\"], $a: Int) { f(b: $b, a: $a) }")
        );
    }

    #[test]
    fn unselected_operations_are_dropped() {
        let doc = "query A { a } query B { b } fragment F on T { x }";
        assert_eq!(canon_op(doc, "A"), canon("query A { a }"));
        assert_eq!(canon_op(doc, "B"), canon("query B { b }"));
        assert_ne!(canon_op(doc, "A"), canon_op(doc, "B"));
    }

    #[test]
    fn significant_differences_change_text() {
        let base = canon("{ a b }");
        for different in [
            "{ b a }",
            "{ x: a b }",
            "{ a b c }",
            "{ a @include(if: true) b }",
            "{ a @skip(if: true) b }",
            "{ a { x } b }",
            "query Named { a b }",
            "mutation { a b }",
        ] {
            assert_ne!(canon(different), base, "{different}");
        }
    }

    #[test]
    fn values_are_exact() {
        let pairs = [
            ("{ f(a: \"x\") }", "{ f(a: \"X\") }"),
            ("{ f(a: \"x\") }", "{ f(a: \"x \") }"),
            ("{ f(a: RED) }", "{ f(a: \"RED\") }"),
            ("{ f(a: 1) }", "{ f(a: 1.0) }"),
            ("{ f(a: 1) }", "{ f(a: \"1\") }"),
            ("{ f(a: null) }", "{ f }"),
            ("{ f(a: [1, 2]) }", "{ f(a: [2, 1]) }"),
            ("{ f(a: $x) }", "{ f(a: $y) }"),
            ("{ f(a: true) }", "{ f(a: false) }"),
            ("{ f @d(a: 1) }", "{ f @d(a: 2) }"),
            ("{ f @a @b }", "{ f @b @a }"),
        ];
        for (a, b) in pairs {
            assert_ne!(canon(a), canon(b), "{a} vs {b}");
        }
    }

    #[test]
    fn fragments_are_printed_once_sorted_and_cycle_safe() {
        let q =
            "{ ...B ...A } fragment A on Q { a ...B } fragment B on Q { b } fragment Z on Q { z }";
        let text = canon(q);
        assert_eq!(
            text,
            "query{...B ...A} fragment A on Q{a ...B} fragment B on Q{b}"
        );
        let reordered = "fragment B on Q { b } { ...B ...A } fragment A on Q { a, ...B }";
        assert_eq!(canon(reordered), text);
        let cyclic = "{ ...A } fragment A on Q { ...B } fragment B on Q { ...A }";
        assert!(canonicalize(cyclic, None, lim(64)).is_ok());
    }

    #[test]
    fn kinds_names_and_root_fields() {
        let c = canonicalize(
            "query Q { me { id } users { id } ...F } fragment F on Query { x }",
            None,
            lim(64),
        )
        .unwrap();
        assert_eq!(c.kind, OperationKind::Query);
        assert_eq!(c.name.as_deref(), Some("Q"));
        assert_eq!(c.root_fields, vec!["me", "users", "x"]);
        let nested = canonicalize(
            "{ a ... on Query { b ...F } } fragment F on Query { c ...F }",
            None,
            lim(64),
        )
        .unwrap();
        assert_eq!(nested.root_fields, vec!["a", "b", "c"]);
        assert_eq!(
            canonicalize("mutation { a }", None, lim(64)).unwrap().kind,
            OperationKind::Mutation
        );
        assert_eq!(
            canonicalize("subscription S { a }", None, lim(64))
                .unwrap()
                .kind,
            OperationKind::Subscription
        );
    }

    #[test]
    fn invalid_documents() {
        assert_eq!(
            canonicalize("{", None, lim(64)),
            Err(CanonicalError::Invalid)
        );
        assert_eq!(
            canonicalize("", None, lim(64)),
            Err(CanonicalError::Invalid)
        );
        assert_eq!(
            canonicalize("type T { a: Int }", None, lim(64)),
            Err(CanonicalError::Invalid)
        );
        assert_eq!(
            canonicalize("{ a } { b }", None, lim(64)),
            Err(CanonicalError::Invalid)
        );
        assert_eq!(
            canonicalize("query A { a } query A { b }", Some("A"), lim(64)),
            Err(CanonicalError::Invalid)
        );
        assert_eq!(
            canonicalize(
                "fragment F on Q { a } fragment F on Q { b } { ...F }",
                None,
                lim(64)
            ),
            Err(CanonicalError::Invalid)
        );
        assert_eq!(
            canonicalize("query A { a } query B { b }", None, lim(64)),
            Err(CanonicalError::UnknownOperation)
        );
        assert_eq!(
            canonicalize("query A { a }", Some("B"), lim(64)),
            Err(CanonicalError::UnknownOperation)
        );
        assert_eq!(
            canonicalize("{ a }", Some("A"), lim(64)),
            Err(CanonicalError::UnknownOperation)
        );
        assert_eq!(
            canonicalize("{ ...Missing }", None, lim(64)),
            Err(CanonicalError::UnknownFragment)
        );
        assert_eq!(
            canonicalize("{ f(a: 99999999999999999999) }", None, lim(64)),
            Err(CanonicalError::Invalid)
        );
    }

    #[test]
    fn depth_is_bounded_before_parsing() {
        let deep = format!("{}{}", "{a".repeat(100), "}".repeat(100));
        assert_eq!(
            canonicalize(&deep, None, lim(64)),
            Err(CanonicalError::TooDeep)
        );
        assert_eq!(
            canonicalize(&deep, None, lim(128)),
            Err(CanonicalError::Invalid)
        );
        let list = format!("{{ f(a: {}1{}) }}", "[".repeat(70), "]".repeat(70));
        assert_eq!(
            canonicalize(&list, None, lim(64)),
            Err(CanonicalError::TooDeep)
        );
        // Brackets inside strings and comments do not count.
        let quoted = format!("{{ f(a: \"{}\") }} # {}", "{".repeat(500), "[".repeat(500));
        assert!(canonicalize(&quoted, None, lim(8)).is_ok());
        let block = format!("{{ f(a: \"\"\"{}\\\"\"\"\"\"\") }}", "(".repeat(500));
        assert!(canonicalize(&block, None, lim(8)).is_ok());
        // A huge input that never closes anything fails fast instead of recursing.
        let hostile = "{".repeat(1_000_000);
        assert_eq!(
            canonicalize(&hostile, None, lim(50)),
            Err(CanonicalError::TooDeep)
        );
    }

    #[test]
    fn strings_the_parser_gets_wrong_are_refused() {
        let refused = |q: &str| canonicalize(q, None, lim(50)).map(|c| c.text);
        // Would panic inside graphql-parser (multi-byte whitespace in the dedent).
        assert_eq!(
            refused("{ f(a: \"\"\"x\n  a\n\u{3000}\n  b\"\"\") }"),
            Err(CanonicalError::Unsupported)
        );
        assert_eq!(
            refused("{ f(a: \"\"\"a\rb\"\"\") }"),
            Err(CanonicalError::Unsupported)
        );
        assert_eq!(
            refused("{ f(a: \"\"\"\u{a0}\"\"\") }"),
            Err(CanonicalError::Unsupported)
        );
        assert_eq!(
            refused(r#"{ f(a: "\b") }"#),
            Err(CanonicalError::Unsupported)
        );
        assert_eq!(
            refused(r#"{ f(a: "\u+041") }"#),
            Err(CanonicalError::Invalid)
        );
        assert_eq!(refused(r#"{ f(a: "\u00") }"#), Err(CanonicalError::Invalid));
        assert_eq!(refused("{ f(a: 1.0e+309) }"), Err(CanonicalError::Invalid));
        assert_eq!(refused("{ f(a: -1.0e+309) }"), Err(CanonicalError::Invalid));
        // What stays keyed: one-line ASCII block strings, the other escapes, finite floats.
        assert!(refused("{ f(a: \"\"\"plain text\"\"\") }").is_ok());
        assert!(refused(r#"{ f(a: "\n\t\u00e9\\ \/") }"#).is_ok());
        assert_eq!(refused("{ f(a: 1.5e+95) }").unwrap(), "query{f(a:1.5e+95)}");
        assert_eq!(refused("{ f(a: 2.5) }").unwrap(), "query{f(a:2.5e+0)}");
        assert_eq!(
            refused("{ f(a: 0.000125) }").unwrap(),
            "query{f(a:1.25e-4)}"
        );
        // A comment may hold anything.
        assert!(refused("{ f # \"\"\"\u{3000}\n }").is_ok());
    }

    #[test]
    fn width_is_bounded() {
        let wide = format!(
            "{{ {} }}",
            (0..100)
                .map(|i| format!("f{i}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        let l = Limits {
            max_depth: 8,
            max_fields: 99,
        };
        assert_eq!(canonicalize(&wide, None, l), Err(CanonicalError::TooWide));
        let l = Limits {
            max_depth: 8,
            max_fields: 100,
        };
        assert!(canonicalize(&wide, None, l).is_ok());
        let via_fragment = "{ a ...F } fragment F on Q { b c { d } }";
        let l = Limits {
            max_depth: 8,
            max_fields: 3,
        };
        assert_eq!(
            canonicalize(via_fragment, None, l),
            Err(CanonicalError::TooWide)
        );
    }

    #[test]
    fn max_depth_parses_within_a_small_stack() {
        // The wasm stack is 1 MiB. Optimized code needs under 256 KiB for the deepest query the
        // parser accepts (50); unoptimized test builds get more room.
        let stack = if cfg!(debug_assertions) {
            8 << 20
        } else {
            1 << 20
        };
        let handle = std::thread::Builder::new()
            .stack_size(stack)
            .spawn(|| {
                let q = |n: usize| format!("{}{}", "{a".repeat(n), "}".repeat(n));
                (
                    canonicalize(&q(49), None, lim(50)).is_ok(),
                    canonicalize(&q(51), None, lim(60)),
                )
            })
            .unwrap();
        assert_eq!(handle.join().unwrap(), (true, Err(CanonicalError::Invalid)));
    }

    #[test]
    fn canonical_text_is_a_fixed_point() {
        for q in [
            "query Q($b: Int = 2, $a: [X!]) @d(z: 1, a: 2) { x: f(b: $b, a: {z: 1, a: [1, 2.5, \"s\"]}) { ...F ... on T @i { y } } } fragment F on T { z }",
            "{ a }",
        ] {
            let once = canon(q);
            assert_eq!(canon(&once), once);
        }
    }
}
