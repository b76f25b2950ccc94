//! Property-based tests of the cache key.
//!
//! A generator builds random, valid GraphQL documents as a small AST ([`Doc`]) and prints them
//! itself ([`print_doc`]), so each property controls exactly what differs between two requests:
//!
//! 1. the canonical text is a fixed point of `canonicalize`;
//! 2. rewrites the GraphQL spec calls insignificant keep the key;
//! 3. significant changes change the key;
//! 4. no input makes the request side panic.
//!
//! The last properties pin how the filter handles what graphql-parser 0.4 gets wrong (found by
//! these tests): it refuses such documents instead of keying them wrongly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use graphql_cache::config::Config;
use graphql_cache::request::canonical::{canonicalize, CanonicalError, Limits};
use graphql_cache::request::classify::{classify_body, RequestHead};
use graphql_cache::request::http::{parse_get_query, parse_post_body};
use graphql_cache::request::key::CacheKey;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::strategy::Union;
use std::collections::BTreeSet;

/// Cases per property: enough to find the bugs below within a few runs, small enough that the
/// whole file runs in seconds.
const CASES: u32 = 128;

fn proptest_config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(CASES),
        // Regression files would be written next to this file; counterexamples are printed instead.
        failure_persistence: None,
        max_shrink_iters: 4096,
        // Seeding is most of the cost of generation in a debug build; XorShift seeds cheaply.
        rng_algorithm: proptest::test_runner::RngAlgorithm::XorShift,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------------
// The AST the generator builds.

#[derive(Clone, Debug, PartialEq)]
enum Val {
    Int(i64),
    Float(f64),
    Str(String),
    Bool(bool),
    Null,
    Enum(String),
    Var(String),
    List(Vec<Val>),
    Obj(Vec<(String, Val)>),
}

/// `@include(if: …)` / `@skip(if: …)` (or any other name, for the "added directive" property).
#[derive(Clone, Debug)]
struct Dir {
    name: String,
    cond: Val,
}

#[derive(Clone, Debug)]
struct Field {
    alias: Option<String>,
    name: String,
    args: Vec<(String, Val)>,
    dirs: Vec<Dir>,
    sub: Vec<Sel>,
}

#[derive(Clone, Debug)]
enum Sel {
    Field(Field),
    Spread(String, Vec<Dir>),
    Inline(Option<String>, Vec<Dir>, Vec<Sel>),
}

#[derive(Clone, Debug)]
struct VarDef {
    name: String,
    ty: String,
    default: Option<Val>,
}

#[derive(Clone, Debug)]
struct Op {
    name: Option<String>,
    /// Print `query` even when the shorthand `{ … }` would do.
    keyword: bool,
    vars: Vec<VarDef>,
    sels: Vec<Sel>,
}

#[derive(Clone, Debug)]
struct Frag {
    name: String,
    on: String,
    sels: Vec<Sel>,
}

/// One operation, the fragments it uses (`F0`, `F1`), and maybe one it does not (`Unused`).
#[derive(Clone, Debug)]
struct Doc {
    op: Op,
    frags: Vec<Frag>,
    unused: Option<Frag>,
}

/// A JSON value, printed by hand so that key order and escapes are under the test's control.
#[derive(Clone, Debug, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

// ---------------------------------------------------------------------------------------------
// Strategies.

// Field names and aliases are disjoint, so an alias never equals its field's name. Spec keywords
// are valid names and are mixed in on purpose.
const FIELD_NAMES: &[&str] = &[
    "id", "name", "user", "items", "node", "edges", "count", "on", "query", "fragment", "true",
];
const ALIASES: &[&str] = &["a1", "b2", "primary", "other", "x", "renamed"];
const ARG_NAMES: &[&str] = &[
    "id", "first", "after", "filter", "orderBy", "input", "on", "if",
];
const OBJECT_FIELDS: &[&str] = &["a", "b", "eq", "in", "on", "not", "and_"];
const ENUMS: &[&str] = &["RED", "ASC", "DESC", "on", "query", "inf", "NaN", "Foo_1"];
const VAR_NAMES: &[&str] = &["id", "first", "flag", "input", "v_2", "after", "on"];
const VAR_TYPES: &[&str] = &[
    "Int",
    "String",
    "Boolean",
    "Float",
    "ID",
    "UserFilter",
    "[String!]!",
    "[Int]",
    "Int!",
    "[[ID!]]!",
];
const TYPE_CONDITIONS: &[&str] = &["User", "Query", "Node"];
const OP_NAMES: &[&str] = &["Q", "GetUser", "Main", "feed_2"];
/// Name of the extra operation added next to the generated one (not in `OP_NAMES`).
const OTHER_OP: &str = "ZzOther";

fn pick(pool: &'static [&'static str]) -> BoxedStrategy<String> {
    select(pool).prop_map(str::to_string).boxed()
}

/// Characters for string values: plain letters, everything that needs escaping, brackets that
/// must not count as nesting, non-ASCII (also outside the BMP) and Unicode whitespace.
fn string_char() -> impl Strategy<Value = char> {
    const SPECIAL: &[char] = &[
        '"', '\\', ' ', '/', '{', '}', '[', ']', '(', ')', '#', '$', ',', 'é', '中', '😀',
        '\u{2028}', '\u{7f}', '\u{feff}', '\n', '\t', '\r', '\u{0}', '\u{c}', '\u{1f}', '\u{10}',
    ];
    prop_oneof![
        6 => prop::char::range('a', 'z'),
        4 => select(SPECIAL),
        1 => any::<char>(),
    ]
}

fn string() -> impl Strategy<Value = String> {
    vec(string_char(), 0..8).prop_map(String::from_iter)
}

fn int() -> impl Strategy<Value = i64> {
    prop_oneof![-100i64..100, any::<i64>()]
}

/// Whether graphql-parser can read `{f:?}` back. It rejects exponents that start with `9` (and
/// `0`), so floats in [1e90, 1e100) cannot round-trip (see `float_literals_round_trip`); the
/// generator leaves them out so the other properties can look past that bug.
fn parser_reads_back(f: f64) -> bool {
    f.is_finite() && !format!("{f:?}").contains("e9")
}

fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        (any::<i32>(), 0i32..6).prop_map(|(m, k)| f64::from(m) / 10f64.powi(k)),
        prop::num::f64::NORMAL | prop::num::f64::SUBNORMAL | prop::num::f64::ZERO,
    ]
    .prop_filter("float that graphql-parser cannot read back", |f| {
        parser_reads_back(*f)
    })
}

/// Keeps the first of each name: field names in an input object (and arguments, variables)
/// must be unique.
fn unique_names<T>(items: Vec<(String, T)>) -> Vec<(String, T)> {
    let mut seen = BTreeSet::new();
    items
        .into_iter()
        .filter(|(n, _)| seen.insert(n.clone()))
        .collect()
}

/// `true`, `false`, `null` and enum values: names, in one `select` (cheaper than a union).
fn word() -> BoxedStrategy<Val> {
    let mut words = vec![Val::Bool(true), Val::Bool(false), Val::Null];
    words.extend(ENUMS.iter().map(|e| Val::Enum(e.to_string())));
    select(words).boxed()
}

/// A scalar or variable. proptest's unions pay for every arm before the chosen one, so the
/// likelier arms come first.
fn scalar(vars: &[String]) -> BoxedStrategy<Val> {
    let mut arms: Vec<(u32, BoxedStrategy<Val>)> = vec![
        (3, int().prop_map(Val::Int).boxed()),
        (3, string().prop_map(Val::Str).boxed()),
        (3, word()),
        (2, float().prop_map(Val::Float).boxed()),
    ];
    if !vars.is_empty() {
        arms.push((2, select(vars.to_vec()).prop_map(Val::Var).boxed()));
    }
    Union::new_weighted(arms).boxed()
}

/// A value; lists and input objects nest at most 3 deep. Variables only from `vars`.
fn value(vars: &[String]) -> BoxedStrategy<Val> {
    scalar(vars)
        .prop_recursive(3, 8, 2, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..=3).prop_map(Val::List),
                vec((pick(OBJECT_FIELDS), inner), 0..=3)
                    .prop_map(|fields| Val::Obj(unique_names(fields))),
            ]
        })
        .boxed()
}

fn arguments(vars: &[String]) -> BoxedStrategy<Vec<(String, Val)>> {
    prop_oneof![
        Just(Vec::new()),
        vec((pick(ARG_NAMES), value(vars)), 1..=3).prop_map(unique_names),
    ]
    .boxed()
}

fn condition(vars: &[String]) -> BoxedStrategy<Val> {
    let boolean = any::<bool>().prop_map(Val::Bool);
    if vars.is_empty() {
        boolean.boxed()
    } else {
        prop_oneof![boolean, select(vars.to_vec()).prop_map(Val::Var)].boxed()
    }
}

fn dir(name: &str, cond: Val) -> Dir {
    Dir {
        name: name.to_string(),
        cond,
    }
}

/// None, `@include`, `@skip`, or both in either order.
fn directives(vars: &[String]) -> BoxedStrategy<Vec<Dir>> {
    (0..6u8, condition(vars), condition(vars))
        .prop_map(|(shape, a, b)| match shape {
            0 | 1 => vec![],
            2 => vec![dir("include", a)],
            3 => vec![dir("skip", a)],
            4 => vec![dir("include", a), dir("skip", b)],
            _ => vec![dir("skip", a), dir("include", b)],
        })
        .boxed()
}

fn field(vars: &[String], depth: u32) -> BoxedStrategy<Field> {
    let sub = if depth == 0 {
        Just(Vec::new()).boxed()
    } else {
        prop_oneof![2 => Just(Vec::new()), 1 => selection_set(vars, depth - 1)].boxed()
    };
    (
        option::weighted(0.25, pick(ALIASES)),
        pick(FIELD_NAMES),
        arguments(vars),
        directives(vars),
        sub,
    )
        .prop_map(|(alias, name, args, dirs, sub)| Field {
            alias,
            name,
            args,
            dirs,
            sub,
        })
        .boxed()
}

fn selection(vars: &[String], depth: u32) -> BoxedStrategy<Sel> {
    let field = field(vars, depth).prop_map(Sel::Field);
    if depth == 0 {
        return field.boxed();
    }
    let inline = (
        option::of(pick(TYPE_CONDITIONS)),
        directives(vars),
        selection_set(vars, depth - 1),
    )
        .prop_map(|(on, dirs, sels)| Sel::Inline(on, dirs, sels));
    prop_oneof![6 => field, 1 => inline].boxed()
}

/// 1 to 4 selections; `depth` more levels of selection sets below this one. Response keys are
/// made unique afterwards ([`make_keys_unique`]).
fn selection_set(vars: &[String], depth: u32) -> BoxedStrategy<Vec<Sel>> {
    vec(selection(vars, depth), 1..=4).boxed()
}

fn variable_definitions() -> BoxedStrategy<Vec<VarDef>> {
    vec(
        (
            pick(VAR_NAMES),
            (pick(VAR_TYPES), option::weighted(0.3, value(&[]))),
        ),
        0..=3,
    )
    .prop_map(|defs| {
        unique_names(defs)
            .into_iter()
            .map(|(name, (ty, default))| VarDef { name, ty, default })
            .collect()
    })
    .boxed()
}

fn response_key(f: &Field) -> &str {
    f.alias.as_deref().unwrap_or(&f.name)
}

/// Renames (by alias) every field whose response key is already taken in its selection set.
/// Inline fragments share their parent's response object, so they share `taken`.
fn make_keys_unique(sels: &mut [Sel], taken: &mut BTreeSet<String>) {
    for sel in sels {
        match sel {
            Sel::Field(f) => {
                let base = response_key(f).to_string();
                let mut key = base.clone();
                let mut n = 0;
                while taken.contains(&key) {
                    n += 1;
                    key = format!("{base}_{n}");
                }
                if key != base {
                    f.alias = Some(key.clone());
                }
                taken.insert(key);
                make_keys_unique(&mut f.sub, &mut BTreeSet::new());
            }
            Sel::Inline(_, _, inner) => make_keys_unique(inner, taken),
            Sel::Spread(..) => {}
        }
    }
}

/// Gives a fragment's top-level fields keys no other selection uses, so it can be spread anywhere.
fn prefix_keys(sels: &mut [Sel], prefix: &str) {
    for sel in sels {
        match sel {
            Sel::Field(f) => f.alias = Some(format!("{prefix}{}", response_key(f))),
            Sel::Inline(_, _, inner) => prefix_keys(inner, prefix),
            Sel::Spread(..) => {}
        }
    }
}

fn fragment_definition(name: &'static str) -> BoxedStrategy<Frag> {
    (pick(TYPE_CONDITIONS), selection_set(&[], 2))
        .prop_map(move |(on, mut sels)| {
            make_keys_unique(&mut sels, &mut BTreeSet::new());
            Frag {
                name: name.to_string(),
                on,
                sels,
            }
        })
        .boxed()
}

/// A used fragment: its type condition, body, the directives of its spread, and where the spread
/// goes (which selection set, which position).
type FragmentPlan = (String, Vec<Sel>, Vec<Dir>, Index, Index);

fn assemble(op: Op, plans: Vec<FragmentPlan>, unused: Option<Frag>) -> Doc {
    let mut doc = Doc {
        op,
        frags: Vec::new(),
        unused,
    };
    make_keys_unique(&mut doc.op.sels, &mut BTreeSet::new());
    for (i, (on, mut sels, dirs, set_at, position)) in plans.into_iter().enumerate() {
        let name = format!("F{i}");
        make_keys_unique(&mut sels, &mut BTreeSet::new());
        prefix_keys(&mut sels, &format!("f{i}_"));
        // The spread may land in an earlier fragment's body: nested spreads, never a cycle.
        let spread = Sel::Spread(name.clone(), dirs);
        change_one(
            &mut doc,
            visit_sets,
            set_at,
            |_| true,
            |set| set.insert(position.index(set.len() + 1), spread),
        );
        doc.frags.push(Frag { name, on, sels });
    }
    doc
}

/// A document whose operation name and variable definitions come from the given strategies.
fn document(
    name: BoxedStrategy<Option<String>>,
    vars: BoxedStrategy<Vec<VarDef>>,
) -> BoxedStrategy<Doc> {
    (name, any::<bool>(), vars)
        .prop_flat_map(|(name, keyword, vars)| {
            let names: Vec<String> = vars.iter().map(|v| v.name.clone()).collect();
            let plan = (
                pick(TYPE_CONDITIONS),
                selection_set(&names, 2),
                directives(&names),
                any::<Index>(),
                any::<Index>(),
            );
            let op = Op {
                keyword: keyword || name.is_some() || !vars.is_empty(),
                name,
                vars,
                sels: Vec::new(),
            };
            (
                Just(op),
                selection_set(&names, 3),
                vec(plan, 0..=2),
                option::weighted(0.3, fragment_definition("Unused")),
            )
        })
        .prop_map(|(mut op, sels, plans, unused)| {
            op.sels = sels;
            assemble(op, plans, unused)
        })
        .boxed()
}

/// Any operation: shorthand, anonymous `query`, or named, with 0-3 variables.
fn doc() -> BoxedStrategy<Doc> {
    document(option::of(pick(OP_NAMES)).boxed(), variable_definitions())
}

fn named_doc() -> BoxedStrategy<Doc> {
    document(
        pick(OP_NAMES).prop_map(Some).boxed(),
        variable_definitions(),
    )
}

/// `{ … }` with no name and no variables (so `query { … }` means the same).
fn shorthand_doc() -> BoxedStrategy<Doc> {
    document(Just(None).boxed(), Just(Vec::new()).boxed())
        .prop_map(|mut d| {
            d.op.keyword = false;
            d
        })
        .boxed()
}

/// A second, named operation (using no fragments) to put next to the generated one.
fn other_operation() -> BoxedStrategy<Op> {
    variable_definitions()
        .prop_flat_map(|vars| {
            let names: Vec<String> = vars.iter().map(|v| v.name.clone()).collect();
            (Just(vars), selection_set(&names, 2))
        })
        .prop_map(|(vars, mut sels)| {
            make_keys_unique(&mut sels, &mut BTreeSet::new());
            Op {
                name: Some(OTHER_OP.to_string()),
                keyword: true,
                vars,
                sels,
            }
        })
        .boxed()
}

fn json_float() -> impl Strategy<Value = f64> {
    prop_oneof![
        (any::<i32>(), 0i32..6).prop_map(|(m, k)| f64::from(m) / 10f64.powi(k)),
        prop::num::f64::NORMAL | prop::num::f64::SUBNORMAL | prop::num::f64::ZERO,
    ]
}

fn json_key() -> BoxedStrategy<String> {
    prop_oneof![pick(VAR_NAMES), string()].boxed()
}

fn json() -> BoxedStrategy<Json> {
    prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        int().prop_map(Json::Int),
        json_float().prop_map(Json::Float),
        string().prop_map(Json::Str),
    ]
    .prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Json::Arr),
            vec((json_key(), inner), 0..4).prop_map(|m| Json::Obj(unique_names(m))),
        ]
    })
    .boxed()
}

/// The members of a `variables` object.
fn variables() -> BoxedStrategy<Vec<(String, Json)>> {
    vec((json_key(), json()), 0..4)
        .prop_map(unique_names)
        .boxed()
}

/// A cyclic stream of choices drawn by proptest. Shrinking drives them to 0 ("first option").
#[derive(Clone, Debug)]
struct Choices {
    seq: Vec<u32>,
    next: usize,
}

impl Choices {
    fn pick(&mut self, n: usize) -> usize {
        let v = self.seq[self.next % self.seq.len()] as usize;
        self.next += 1;
        v % n.max(1)
    }

    fn shuffled<T: Clone>(&mut self, items: &[T]) -> Vec<T> {
        let mut out = items.to_vec();
        for i in (1..out.len()).rev() {
            let j = self.pick(i + 1);
            out.swap(i, j);
        }
        out
    }
}

fn choices() -> BoxedStrategy<Choices> {
    vec(any::<u32>(), 1..64)
        .prop_map(|seq| Choices { seq, next: 0 })
        .boxed()
}

fn reorder<T: Clone>(choices: &mut Option<Choices>, items: &[T]) -> Vec<T> {
    match choices {
        Some(c) => c.shuffled(items),
        None => items.to_vec(),
    }
}

// ---------------------------------------------------------------------------------------------
// Printing GraphQL.

/// The insignificant rewrites the printer can apply; `None` prints plainly.
#[derive(Clone, Debug, Default)]
struct Rewrites {
    /// Whitespace, commas and comments between tokens.
    layout: Option<Choices>,
    args: Option<Choices>,
    object_fields: Option<Choices>,
    var_defs: Option<Choices>,
    /// Order of operation and fragment definitions.
    definitions: Option<Choices>,
    /// Escape forms of string literals (and block strings where possible).
    strings: Option<Choices>,
    /// `query { … }` for a shorthand operation.
    keyword: bool,
}

#[derive(Clone, Copy)]
enum Def<'a> {
    Op(&'a Op),
    Frag(&'a Frag),
}

struct Printer {
    rw: Rewrites,
    toks: Vec<String>,
}

fn print_doc(doc: &Doc, extra_ops: &[Op], rw: Rewrites) -> String {
    let mut p = Printer {
        rw,
        toks: Vec::new(),
    };
    let mut defs = vec![Def::Op(&doc.op)];
    defs.extend(extra_ops.iter().map(Def::Op));
    defs.extend(doc.frags.iter().map(Def::Frag));
    defs.extend(doc.unused.iter().map(Def::Frag));
    for def in reorder(&mut p.rw.definitions, &defs) {
        match def {
            Def::Op(op) => p.op(op),
            Def::Frag(f) => p.frag(f),
        }
    }
    layout(&p.toks, p.rw.layout.as_mut())
}

impl Printer {
    fn t(&mut self, tok: impl Into<String>) {
        self.toks.push(tok.into());
    }

    fn op(&mut self, op: &Op) {
        if op.keyword || self.rw.keyword || op.name.is_some() || !op.vars.is_empty() {
            self.t("query");
        }
        if let Some(name) = &op.name {
            self.t(name.clone());
        }
        if !op.vars.is_empty() {
            self.t("(");
            for v in reorder(&mut self.rw.var_defs, &op.vars) {
                self.t(format!("${}", v.name));
                self.t(":");
                self.type_ref(&v.ty);
                if let Some(d) = &v.default {
                    self.t("=");
                    self.value(d);
                }
            }
            self.t(")");
        }
        self.selection_set(&op.sels);
    }

    fn frag(&mut self, f: &Frag) {
        self.t("fragment");
        self.t(f.name.clone());
        self.t("on");
        self.t(f.on.clone());
        self.selection_set(&f.sels);
    }

    fn type_ref(&mut self, ty: &str) {
        let mut name = String::new();
        for c in ty.chars() {
            if matches!(c, '[' | ']' | '!') {
                if !name.is_empty() {
                    self.t(std::mem::take(&mut name));
                }
                self.t(c.to_string());
            } else {
                name.push(c);
            }
        }
        if !name.is_empty() {
            self.t(name);
        }
    }

    fn selection_set(&mut self, sels: &[Sel]) {
        self.t("{");
        for sel in sels {
            match sel {
                Sel::Field(f) => {
                    if let Some(alias) = &f.alias {
                        self.t(alias.clone());
                        self.t(":");
                    }
                    self.t(f.name.clone());
                    self.arguments(&f.args);
                    self.directives(&f.dirs);
                    if !f.sub.is_empty() {
                        self.selection_set(&f.sub);
                    }
                }
                Sel::Spread(name, dirs) => {
                    self.t("...");
                    self.t(name.clone());
                    self.directives(dirs);
                }
                Sel::Inline(on, dirs, inner) => {
                    self.t("...");
                    if let Some(on) = on {
                        self.t("on");
                        self.t(on.clone());
                    }
                    self.directives(dirs);
                    self.selection_set(inner);
                }
            }
        }
        self.t("}");
    }

    fn arguments(&mut self, args: &[(String, Val)]) {
        if args.is_empty() {
            return;
        }
        self.t("(");
        for (name, v) in reorder(&mut self.rw.args, args) {
            self.t(name);
            self.t(":");
            self.value(&v);
        }
        self.t(")");
    }

    fn directives(&mut self, dirs: &[Dir]) {
        for d in dirs {
            self.t(format!("@{}", d.name));
            self.t("(");
            self.t("if");
            self.t(":");
            self.value(&d.cond);
            self.t(")");
        }
    }

    fn value(&mut self, v: &Val) {
        match v {
            Val::Int(n) => self.t(n.to_string()),
            Val::Float(f) => self.t(format!("{f:?}")),
            Val::Str(s) => {
                let tok = match &mut self.rw.strings {
                    Some(c) => graphql_string_any_form(s, c),
                    None => graphql_string(s),
                };
                self.t(tok)
            }
            Val::Bool(b) => self.t(b.to_string()),
            Val::Null => self.t("null"),
            Val::Enum(e) => self.t(e.clone()),
            Val::Var(name) => self.t(format!("${name}")),
            Val::List(items) => {
                self.t("[");
                for item in items {
                    self.value(item);
                }
                self.t("]");
            }
            Val::Obj(fields) => {
                self.t("{");
                for (name, v) in reorder(&mut self.rw.object_fields, fields) {
                    self.t(name);
                    self.t(":");
                    self.value(&v);
                }
                self.t("}");
            }
        }
    }
}

/// Separators between tokens: whitespace, commas, the BOM and comments (holding brackets and
/// quotes that must not count).
const SEPARATORS: &[&str] = &[
    " ",
    "",
    "\n",
    "\t",
    ",",
    " , ",
    "\r\n",
    ",,",
    "\u{feff}",
    "# comment {{[(\"\"\" \\\n",
    "#\r",
    "  #,\n\t",
];

fn is_punctuator(tok: &str) -> bool {
    matches!(
        tok,
        "{" | "}" | "(" | ")" | "[" | "]" | ":" | "=" | "!" | "..."
    )
}

/// Joins tokens with one space, or with separators drawn from `layout` (no separator at all only
/// next to a punctuator).
fn layout(toks: &[String], mut layout: Option<&mut Choices>) -> String {
    let mut out = String::new();
    for (i, tok) in toks.iter().enumerate() {
        if i > 0 {
            let sep = match layout.as_deref_mut() {
                None => " ",
                Some(c) => SEPARATORS[c.pick(SEPARATORS.len())],
            };
            let prev = &toks[i - 1];
            let glued = sep.is_empty() && !is_punctuator(prev) && !is_punctuator(tok);
            // graphql-parser reads a BOM right after a number as part of the number (the spec
            // calls the BOM ignored): a bypass, not a wrong key, so the generator avoids it.
            let after_number = prev.starts_with(|c: char| c.is_ascii_digit() || c == '-');
            if glued || (after_number && sep.starts_with('\u{feff}')) {
                out.push(' ');
            }
            out.push_str(sep);
        }
        out.push_str(tok);
    }
    out
}

/// The plain form of a string literal.
fn graphql_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The escapes that are spec-valid for `c` in a GraphQL string (and in JSON, bar `\u` for
/// characters outside the BMP, which JSON writes as a surrogate pair).
fn short_escape(c: char) -> Option<&'static str> {
    Some(match c {
        '"' => "\\\"",
        '\\' => "\\\\",
        '/' => "\\/",
        '\u{8}' => "\\b",
        '\u{c}' => "\\f",
        '\n' => "\\n",
        '\r' => "\\r",
        '\t' => "\\t",
        _ => return None,
    })
}

/// Every way of writing `c` in a quoted GraphQL string (spec, October 2021), except `\b`, which
/// graphql-parser decodes wrongly (see `backspace_escape_is_u0008`).
fn graphql_char_forms(c: char) -> Vec<String> {
    let mut forms = Vec::new();
    if !matches!(c, '"' | '\\' | '\n' | '\r') && (c >= ' ' || c == '\t') {
        forms.push(c.to_string());
    }
    if let Some(e) = short_escape(c).filter(|&e| e != "\\b") {
        forms.push(e.to_string());
    }
    if (c as u32) <= 0xFFFF {
        forms.push(format!("\\u{:04x}", c as u32));
        forms.push(format!("\\u{:04X}", c as u32));
    }
    forms
}

/// Whether `s` can be written as a one-line block string: spec `BlockStringValue` of
/// `"""s"""` is `s` when it has no line terminator, is not only spaces and tabs, and has no `"`
/// (nor a trailing `\`) that would end or escape the closing quotes. The filter keys only block
/// strings of printable ASCII (see `block_strings_follow_the_spec_or_are_refused`), so `s` must be
/// that, with a character that is not a space.
fn block_string_ok(s: &str) -> bool {
    s.chars().any(|c| c != ' ')
        && !s.ends_with('\\')
        && s.chars().all(|c| c != '"' && (' '..='~').contains(&c))
}

/// `s` as a quoted string with each character in a form drawn from `c`, or as a block string.
fn graphql_string_any_form(s: &str, c: &mut Choices) -> String {
    if block_string_ok(s) && c.pick(4) == 0 {
        return format!("\"\"\"{s}\"\"\"");
    }
    let mut out = String::from("\"");
    for ch in s.chars() {
        let forms = graphql_char_forms(ch);
        out.push_str(&forms[c.pick(forms.len())]);
    }
    out.push('"');
    out
}

// ---------------------------------------------------------------------------------------------
// Printing JSON.

#[derive(Clone, Debug, Default)]
struct JsonStyle {
    /// Order of object members (the body's own members included).
    order: Option<Choices>,
    /// Escape forms of strings (the query text included).
    escapes: Option<Choices>,
    /// Whitespace between tokens.
    space: Option<Choices>,
}

impl JsonStyle {
    fn space(&mut self, out: &mut String) {
        if let Some(c) = &mut self.space {
            out.push_str(["", " ", "\n", "\t", "\r\n  "][c.pick(5)]);
        }
    }
}

fn json_string(s: &str, escapes: &mut Option<Choices>) -> String {
    let Some(c) = escapes else {
        return serde_json::to_string(s).unwrap();
    };
    let mut out = String::from("\"");
    for ch in s.chars() {
        let mut forms = Vec::new();
        if ch != '"' && ch != '\\' && ch >= ' ' {
            forms.push(ch.to_string());
        }
        if let Some(e) = short_escape(ch) {
            forms.push(e.to_string());
        }
        let mut units = [0u16; 2];
        let units: String = ch
            .encode_utf16(&mut units)
            .iter()
            .map(|u| format!("\\u{u:04x}"))
            .collect();
        forms.push(units.to_uppercase().replace("\\U", "\\u"));
        forms.push(units);
        out.push_str(&forms[c.pick(forms.len())]);
    }
    out.push('"');
    out
}

fn write_json(j: &Json, st: &mut JsonStyle, out: &mut String) {
    match j {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(&b.to_string()),
        Json::Int(n) => out.push_str(&n.to_string()),
        Json::Float(f) => out.push_str(&format!("{f:?}")),
        Json::Str(s) => out.push_str(&json_string(s, &mut st.escapes)),
        Json::Arr(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                st.space(out);
                write_json(item, st, out);
                st.space(out);
            }
            out.push(']');
        }
        Json::Obj(members) => {
            out.push('{');
            for (i, (k, v)) in reorder(&mut st.order, members).iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                st.space(out);
                out.push_str(&json_string(k, &mut st.escapes));
                st.space(out);
                out.push(':');
                st.space(out);
                write_json(v, st, out);
                st.space(out);
            }
            out.push('}');
        }
    }
}

/// A POST body.
fn post_styled(
    query: &str,
    operation_name: Option<&str>,
    variables: Option<Json>,
    mut st: JsonStyle,
) -> Vec<u8> {
    let mut members = vec![("query".to_string(), Json::Str(query.to_string()))];
    if let Some(name) = operation_name {
        members.push(("operationName".to_string(), Json::Str(name.to_string())));
    }
    if let Some(v) = variables {
        members.push(("variables".to_string(), v));
    }
    let mut out = String::new();
    write_json(&Json::Obj(members), &mut st, &mut out);
    out.into_bytes()
}

fn post(query: &str, operation_name: Option<&str>, variables: Option<Json>) -> Vec<u8> {
    post_styled(query, operation_name, variables, JsonStyle::default())
}

// ---------------------------------------------------------------------------------------------
// Classification and assertions.

fn config() -> Config {
    Config {
        // Heavily rewritten documents (a comment between every two tokens) may be long.
        max_body_bytes: 4 << 20,
        ..Config::default()
    }
}

fn limits() -> Limits {
    config().limits()
}

fn head() -> RequestHead {
    RequestHead {
        method: b"POST".to_vec(),
        path: b"/graphql".to_vec(),
        authority: b"example.com".to_vec(),
        content_type: Some(b"application/json".to_vec()),
        vary: vec![None, None],
        ..Default::default()
    }
}

fn show(body: &[u8]) -> String {
    String::from_utf8_lossy(body).into_owned()
}

/// The canonical text and key of a POST body, or why it was not cacheable.
fn classify(body: &[u8]) -> Result<(String, CacheKey), TestCaseError> {
    classify_body(&config(), &head(), body)
        .map(|c| (c.operation.text.clone(), c.key))
        .map_err(|e| TestCaseError::fail(format!("{:?} for body\n  {}", e.reason, show(body))))
}

fn assert_same_key(a: &[u8], b: &[u8]) -> Result<(), TestCaseError> {
    let (text_a, key_a) = classify(a)?;
    let (text_b, key_b) = classify(b)?;
    prop_assert_eq!(
        &text_a,
        &text_b,
        "canonical texts differ for bodies\n  A: {}\n  B: {}",
        show(a),
        show(b)
    );
    prop_assert_eq!(
        key_a,
        key_b,
        "keys differ for bodies\n  A: {}\n  B: {}\n(canonical text {})",
        show(a),
        show(b),
        text_a
    );
    Ok(())
}

fn assert_different_key(a: &[u8], b: &[u8]) -> Result<(), TestCaseError> {
    let (text_a, key_a) = classify(a)?;
    let (text_b, key_b) = classify(b)?;
    prop_assert_ne!(
        key_a,
        key_b,
        "same key for bodies\n  A: {}\n  B: {}\ncanonical texts\n  A: {}\n  B: {}",
        show(a),
        show(b),
        text_a,
        text_b
    );
    Ok(())
}

fn plain(doc: &Doc) -> String {
    print_doc(doc, &[], Rewrites::default())
}

fn assert_rewrite_keeps_key(doc: &Doc, rw: Rewrites) -> Result<(), TestCaseError> {
    assert_same_key(
        &post(&plain(doc), None, None),
        &post(&print_doc(doc, &[], rw), None, None),
    )
}

fn assert_change_changes_key(doc: &Doc, changed: &Doc) -> Result<(), TestCaseError> {
    assert_different_key(
        &post(&plain(doc), None, None),
        &post(&plain(changed), None, None),
    )
}

// ---------------------------------------------------------------------------------------------
// Visiting the parts of a document that the operation uses (the operation and the used
// fragments, never `unused`), to change one of them.

fn visit_sets(doc: &mut Doc, f: &mut dyn FnMut(&mut Vec<Sel>)) {
    fn walk(sels: &mut Vec<Sel>, f: &mut dyn FnMut(&mut Vec<Sel>)) {
        f(sels);
        for sel in sels.iter_mut() {
            match sel {
                Sel::Field(field) if !field.sub.is_empty() => walk(&mut field.sub, f),
                Sel::Inline(_, _, inner) => walk(inner, f),
                _ => {}
            }
        }
    }
    walk(&mut doc.op.sels, f);
    for frag in &mut doc.frags {
        walk(&mut frag.sels, f);
    }
}

fn visit_fields(doc: &mut Doc, f: &mut dyn FnMut(&mut Field)) {
    visit_sets(doc, &mut |set| {
        for sel in set.iter_mut() {
            if let Sel::Field(field) = sel {
                f(field);
            }
        }
    });
}

/// Every value node (containers and their items) in arguments, directives and defaults.
fn visit_values(doc: &mut Doc, f: &mut dyn FnMut(&mut Val)) {
    fn walk(v: &mut Val, f: &mut dyn FnMut(&mut Val)) {
        f(v);
        match v {
            Val::List(items) => items.iter_mut().for_each(|i| walk(i, f)),
            Val::Obj(fields) => fields.iter_mut().for_each(|(_, v)| walk(v, f)),
            _ => {}
        }
    }
    for var in &mut doc.op.vars {
        if let Some(d) = &mut var.default {
            walk(d, f);
        }
    }
    visit_sets(doc, &mut |set| {
        for sel in set.iter_mut() {
            let (args, dirs): (&mut [(String, Val)], &mut [Dir]) = match sel {
                Sel::Field(field) => (&mut field.args, &mut field.dirs),
                Sel::Spread(_, dirs) | Sel::Inline(_, dirs, _) => (&mut [], dirs),
            };
            args.iter_mut().for_each(|(_, v)| walk(v, f));
            dirs.iter_mut().for_each(|d| walk(&mut d.cond, f));
        }
    });
}

/// One of `visit_sets`, `visit_fields`, `visit_values`.
type Visitor<X> = fn(&mut Doc, &mut dyn FnMut(&mut X));

/// Applies `change` to the `at`-th of the items `visit` reaches that are `eligible`; false if
/// there is none.
fn change_one<X>(
    doc: &mut Doc,
    visit: Visitor<X>,
    at: Index,
    eligible: impl Fn(&X) -> bool,
    change: impl FnOnce(&mut X),
) -> bool {
    let mut count = 0;
    visit(doc, &mut |x| count += usize::from(eligible(x)));
    if count == 0 {
        return false;
    }
    let target = at.index(count);
    let mut seen = 0;
    let mut change = Some(change);
    visit(doc, &mut |x| {
        if eligible(x) {
            if seen == target {
                if let Some(c) = change.take() {
                    c(x);
                }
            }
            seen += 1;
        }
    });
    true
}

/// A different float that still prints in a form graphql-parser reads back.
fn nudge(f: f64) -> f64 {
    [f.next_up(), f.next_down(), -f, f + 1.0]
        .into_iter()
        .find(|&g| parser_reads_back(g) && format!("{g:?}") != format!("{f:?}"))
        .unwrap_or(0.5)
}

/// A different value of the same kind where there is one (an enum becomes a string).
fn change_value(v: &mut Val) {
    *v = match std::mem::replace(v, Val::Null) {
        Val::Int(n) => Val::Int(n.wrapping_add(1)),
        Val::Float(f) => Val::Float(nudge(f)),
        Val::Str(s) => Val::Str(s + "x"),
        Val::Bool(b) => Val::Bool(!b),
        Val::Null => Val::Int(0),
        Val::Enum(e) => Val::Str(e),
        Val::Var(_) => Val::Null,
        Val::List(mut items) => {
            items.push(Val::Null);
            Val::List(items)
        }
        Val::Obj(mut fields) => {
            fields.push(("zz".to_string(), Val::Null));
            Val::Obj(fields)
        }
    }
}

fn change_json(j: &mut Json) {
    *j = match std::mem::replace(j, Json::Null) {
        Json::Null => Json::Int(0),
        Json::Bool(b) => Json::Bool(!b),
        Json::Int(n) => Json::Int(n.wrapping_add(1)),
        // Not the adjacent float: serde_json may read adjacent floats as one value (see
        // `adjacent_float_variables_differ`).
        Json::Float(f) => Json::Float(if f == 0.0 {
            1.0
        } else if (f * 2.0).is_finite() {
            f * 2.0
        } else {
            f / 2.0
        }),
        Json::Str(s) => Json::Str(s + "x"),
        Json::Arr(mut items) => {
            items.push(Json::Null);
            Json::Arr(items)
        }
        Json::Obj(mut members) => {
            match members.iter().position(|(k, _)| k == "zz_new") {
                Some(i) => drop(members.remove(i)),
                None => members.push(("zz_new".to_string(), Json::Null)),
            }
            Json::Obj(members)
        }
    }
}

/// Applies `change_json` to the `at`-th node (pre-order) of a JSON tree.
fn change_json_node(root: &mut Json, at: Index) {
    fn count(j: &Json) -> usize {
        1 + match j {
            Json::Arr(items) => items.iter().map(count).sum(),
            Json::Obj(members) => members.iter().map(|(_, v)| count(v)).sum(),
            _ => 0,
        }
    }
    fn walk(j: &mut Json, target: usize, seen: &mut usize) {
        if *seen == target {
            change_json(j);
        }
        *seen += 1;
        match j {
            Json::Arr(items) => items.iter_mut().for_each(|i| walk(i, target, seen)),
            Json::Obj(members) => members.iter_mut().for_each(|(_, v)| walk(v, target, seen)),
            _ => {}
        }
    }
    let target = at.index(count(root));
    walk(root, target, &mut 0);
}

// ---------------------------------------------------------------------------------------------
// 1. The canonical text is a fixed point.

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn canonical_text_is_a_fixed_point(doc in doc()) {
        let text = plain(&doc);
        let once = canonicalize(&text, None, limits()).map_err(|e| {
            TestCaseError::fail(format!("{e:?} for generated document\n  {text}"))
        })?;
        let twice = canonicalize(&once.text, None, limits()).map_err(|e| {
            TestCaseError::fail(format!(
                "canonical text does not parse ({e:?})\n  {}\nfrom\n  {text}",
                once.text
            ))
        })?;
        prop_assert_eq!(&twice.text, &once.text, "from\n  {}", text);
        prop_assert_eq!(twice.kind, once.kind);
        prop_assert_eq!(&twice.name, &once.name);
        prop_assert_eq!(&twice.root_fields, &once.root_fields);
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Insignificant rewrites keep the key.

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn whitespace_comments_and_commas_are_insignificant(doc in doc(), c in choices()) {
        assert_rewrite_keeps_key(&doc, Rewrites { layout: Some(c), ..Rewrites::default() })?;
    }

    #[test]
    fn argument_order_is_insignificant(doc in doc(), c in choices()) {
        assert_rewrite_keeps_key(&doc, Rewrites { args: Some(c), ..Rewrites::default() })?;
    }

    #[test]
    fn input_object_field_order_is_insignificant(doc in doc(), c in choices()) {
        let rw = Rewrites { object_fields: Some(c), ..Rewrites::default() };
        assert_rewrite_keeps_key(&doc, rw)?;
    }

    #[test]
    fn variable_definition_order_is_insignificant(doc in doc(), c in choices()) {
        assert_rewrite_keeps_key(&doc, Rewrites { var_defs: Some(c), ..Rewrites::default() })?;
    }

    #[test]
    fn definition_order_is_insignificant(doc in doc(), c in choices()) {
        let rw = Rewrites { definitions: Some(c), ..Rewrites::default() };
        assert_rewrite_keeps_key(&doc, rw)?;
    }

    #[test]
    fn query_keyword_of_the_shorthand_is_insignificant(doc in shorthand_doc()) {
        assert_rewrite_keeps_key(&doc, Rewrites { keyword: true, ..Rewrites::default() })?;
    }

    #[test]
    fn string_escape_forms_are_insignificant(doc in doc(), c in choices()) {
        assert_rewrite_keeps_key(&doc, Rewrites { strings: Some(c), ..Rewrites::default() })?;
    }

    #[test]
    fn unused_fragments_are_insignificant(
        doc in doc(),
        unused in fragment_definition("Unused"),
        c in choices(),
    ) {
        let without = Doc { unused: None, ..doc.clone() };
        let with = Doc { unused: Some(unused), ..doc };
        let rw = Rewrites { definitions: Some(c), ..Rewrites::default() };
        assert_same_key(
            &post(&plain(&without), None, None),
            &post(&print_doc(&with, &[], rw), None, None),
        )?;
    }

    #[test]
    fn unselected_operations_are_insignificant(
        doc in named_doc(),
        other in other_operation(),
        c in choices(),
    ) {
        let name = doc.op.name.clone();
        let alone = plain(&doc);
        let rw = Rewrites { definitions: Some(c), ..Rewrites::default() };
        let both = print_doc(&doc, &[other], rw);
        let reference = post(&alone, None, None);
        assert_same_key(&reference, &post(&alone, name.as_deref(), None))?;
        assert_same_key(&reference, &post(&both, name.as_deref(), None))?;
    }

    #[test]
    fn variables_key_order_is_insignificant(doc in doc(), vars in variables(), c in choices()) {
        let text = plain(&doc);
        let st = JsonStyle { order: Some(c), ..JsonStyle::default() };
        let name = doc.op.name.as_deref();
        assert_same_key(
            &post(&text, name, Some(Json::Obj(vars.clone()))),
            &post_styled(&text, name, Some(Json::Obj(vars)), st),
        )?;
    }

    #[test]
    fn json_escapes_and_whitespace_are_insignificant(
        doc in doc(),
        vars in variables(),
        escapes in choices(),
        space in choices(),
    ) {
        let text = plain(&doc);
        let st = JsonStyle { escapes: Some(escapes), space: Some(space), ..JsonStyle::default() };
        assert_same_key(
            &post(&text, None, Some(Json::Obj(vars.clone()))),
            &post_styled(&text, None, Some(Json::Obj(vars)), st),
        )?;
    }

    #[test]
    fn absent_null_and_empty_variables_are_the_same(doc in doc()) {
        let text = plain(&doc);
        let absent = post(&text, None, None);
        assert_same_key(&absent, &post(&text, None, Some(Json::Obj(Vec::new()))))?;
        assert_same_key(&absent, &post(&text, None, Some(Json::Null)))?;
    }

    #[test]
    fn all_insignificant_rewrites_at_once(
        doc in doc(),
        vars in variables(),
        unused in fragment_definition("Unused"),
        c in vec(choices(), 9),
    ) {
        let mut c = c.into_iter().map(Some);
        let mut next = || c.next().flatten();
        let rw = Rewrites {
            layout: next(),
            args: next(),
            object_fields: next(),
            var_defs: next(),
            definitions: next(),
            strings: next(),
            keyword: true,
        };
        let st = JsonStyle { order: next(), escapes: next(), space: next() };
        let without_unused = plain(&Doc { unused: None, ..doc.clone() });
        let original = post(&without_unused, None, Some(Json::Obj(vars.clone())));
        let rewritten = print_doc(&Doc { unused: Some(unused), ..doc }, &[], rw);
        assert_same_key(&original, &post_styled(&rewritten, None, Some(Json::Obj(vars)), st))?;
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Significant changes change the key.

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn swapping_sibling_selections_changes_the_key(
        doc in doc(),
        at in any::<Index>(),
        i in any::<Index>(),
        j in any::<Index>(),
    ) {
        let mut changed = doc.clone();
        let found = change_one(&mut changed, visit_sets, at, |set| set.len() >= 2, |set| {
            let a = i.index(set.len());
            let b = (a + 1 + j.index(set.len() - 1)) % set.len();
            set.swap(a, b);
        });
        prop_assume!(found);
        assert_change_changes_key(&doc, &changed)?;
    }

    #[test]
    fn adding_or_changing_an_alias_changes_the_key(doc in doc(), at in any::<Index>()) {
        let mut changed = doc.clone();
        change_one(&mut changed, visit_fields, at, |_| true, |f| {
            f.alias = Some(match &f.alias {
                None => "newAlias".to_string(),
                Some(a) => format!("{a}_changed"),
            })
        });
        assert_change_changes_key(&doc, &changed)?;
    }

    #[test]
    fn changing_a_literal_changes_the_key(doc in doc(), at in any::<Index>()) {
        let mut changed = doc.clone();
        prop_assume!(change_one(&mut changed, visit_values, at, |_| true, change_value));
        assert_change_changes_key(&doc, &changed)?;
    }

    #[test]
    fn adding_a_directive_changes_the_key(doc in doc(), at in any::<Index>(), cond: bool) {
        let mut changed = doc.clone();
        change_one(&mut changed, visit_fields, at, |_| true, |f| {
            let has = |name: &str| f.dirs.iter().any(|d| d.name == name);
            let name = ["include", "skip"].into_iter().find(|n| !has(n)).unwrap_or("custom");
            f.dirs.push(dir(name, Val::Bool(cond)));
        });
        assert_change_changes_key(&doc, &changed)?;
    }

    #[test]
    fn changing_a_variable_value_changes_the_key(
        doc in doc(),
        vars in variables(),
        at in any::<Index>(),
    ) {
        let text = plain(&doc);
        let before = Json::Obj(vars);
        let mut after = before.clone();
        change_json_node(&mut after, at);
        let before = if before == Json::Obj(Vec::new()) { None } else { Some(before) };
        assert_different_key(&post(&text, None, before), &post(&text, None, Some(after)))?;
    }

    #[test]
    fn null_and_absent_variables_differ(doc in doc(), vars in variables(), at in any::<Index>()) {
        let (with_null, without) = if vars.is_empty() {
            (vec![("v".to_string(), Json::Null)], Vec::new())
        } else {
            let i = at.index(vars.len());
            let mut with_null = vars.clone();
            with_null[i].1 = Json::Null;
            let mut without = vars;
            without.remove(i);
            (with_null, without)
        };
        let text = plain(&doc);
        assert_different_key(
            &post(&text, None, Some(Json::Obj(with_null))),
            &post(&text, None, Some(Json::Obj(without))),
        )?;
    }

    #[test]
    fn the_selected_operation_changes_the_key(
        doc in named_doc(),
        other in other_operation(),
        same_body: bool,
    ) {
        let other = if same_body {
            Op { name: Some(OTHER_OP.to_string()), ..doc.op.clone() }
        } else {
            other
        };
        let text = print_doc(&doc, &[other], Rewrites::default());
        assert_different_key(
            &post(&text, doc.op.name.as_deref(), None),
            &post(&text, Some(OTHER_OP), None),
        )?;
    }
}

// ---------------------------------------------------------------------------------------------
// 4. No input makes the request side panic.

fn tight_config() -> Config {
    Config {
        max_query_depth: 3,
        max_query_fields: 4,
        ..Config::default()
    }
}

/// Runs everything that reads a POST body; only panics matter.
fn exercise(body: &[u8]) {
    if let Ok(req) = parse_post_body(body) {
        for limits in [limits(), tight_config().limits()] {
            let _ = canonicalize(&req.query, req.operation_name.as_deref(), limits);
        }
    }
    let _ = classify_body(&config(), &head(), body);
    let _ = classify_body(&tight_config(), &head(), body);
    let _ = parse_get_query(&String::from_utf8_lossy(body));
}

/// Pieces of GraphQL and JSON syntax, for random queries and insertions.
const DICTIONARY: &[&str] = &[
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    "\"",
    "\"\"\"",
    "\\",
    "\\u",
    "\\u00",
    "\\\"\"\"",
    "#",
    "\n",
    "\r",
    " ",
    "...",
    "$",
    "@",
    ":",
    "=",
    "!",
    "on ",
    "query ",
    "fragment ",
    "a",
    "1",
    "-0",
    "1.5",
    "1e999",
    "1e9",
    "99999999999999999999",
    "\u{3000}",
    "\u{a0}",
    "é",
    "\u{0}",
    ",",
    "null",
    "true",
    "\"query\"",
    "\"variables\"",
    "{\"a\":",
    "\\ud800",
    "\u{feff}",
];

fn syntax_soup() -> impl Strategy<Value = String> {
    vec(
        prop_oneof![
            4 => select(DICTIONARY).prop_map(str::to_string),
            1 => any::<char>().prop_map(String::from),
        ],
        0..64,
    )
    .prop_map(|parts| parts.concat())
}

#[derive(Clone, Debug)]
enum Mutation {
    Flip(Index, u8),
    Truncate(Index),
    Insert(Index, &'static str),
    Delete(Index, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<Index>(), 1u8..=255).prop_map(|(i, m)| Mutation::Flip(i, m)),
        any::<Index>().prop_map(Mutation::Truncate),
        (any::<Index>(), select(DICTIONARY)).prop_map(|(i, s)| Mutation::Insert(i, s)),
        (any::<Index>(), 1usize..16).prop_map(|(i, n)| Mutation::Delete(i, n)),
    ]
}

fn mutate(bytes: &mut Vec<u8>, m: &Mutation) {
    let len = bytes.len();
    let at = |i: &Index| i.index(len + 1);
    match m {
        Mutation::Flip(i, mask) if !bytes.is_empty() => {
            let i = i.index(bytes.len());
            bytes[i] ^= mask;
        }
        Mutation::Flip(..) => {}
        Mutation::Truncate(i) => bytes.truncate(at(i)),
        Mutation::Insert(i, s) => {
            let i = at(i);
            bytes.splice(i..i, s.bytes());
        }
        Mutation::Delete(i, n) => {
            let i = at(i);
            bytes.drain(i..(i + n).min(bytes.len()));
        }
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..512)) {
        exercise(&bytes);
    }

    #[test]
    fn arbitrary_queries_never_panic(query in syntax_soup(), name in option::of(string())) {
        exercise(&post(&query, name.as_deref(), None));
        let _ = canonicalize(&query, name.as_deref(), tight_config().limits());
    }

    #[test]
    fn mutated_bodies_never_panic(
        doc in doc(),
        vars in variables(),
        mutations in vec(mutation(), 1..4),
        in_query: bool,
    ) {
        let text = plain(&doc);
        let body = if in_query {
            let mut q = text.into_bytes();
            mutations.iter().for_each(|m| mutate(&mut q, m));
            post(&String::from_utf8_lossy(&q), None, Some(Json::Obj(vars)))
        } else {
            let mut b = post(&text, None, Some(Json::Obj(vars)));
            mutations.iter().for_each(|m| mutate(&mut b, m));
            b
        };
        exercise(&body);
    }
}

// ---------------------------------------------------------------------------------------------
// Known bugs. Each property fails today; its comment gives a minimal counterexample proptest
// found (runs are seeded randomly, so another run may shrink to a different one). They are
// ignored so the suite stays green, and the generator above steers around them.

/// The value of a block string per the spec (October 2021, `BlockStringValue`), where only
/// space and tab are whitespace and `\r\n`, `\n` and `\r` end lines.
fn spec_block_string_value(raw: &str) -> String {
    let raw = raw.replace("\r\n", "\n").replace('\r', "\n");
    let is_ws = |c: char| c == ' ' || c == '\t';
    let indent = |l: &str| l.chars().take_while(|&c| is_ws(c)).count();
    let lines: Vec<&str> = raw.split('\n').collect();
    let common = lines
        .iter()
        .skip(1)
        .filter(|l| indent(l) < l.chars().count())
        .map(|l| indent(l))
        .min();
    let mut lines: Vec<String> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| match common {
            Some(n) if i > 0 => l.chars().skip(n).collect(),
            _ => l.to_string(),
        })
        .collect();
    while lines.first().is_some_and(|l| l.chars().all(is_ws)) {
        lines.remove(0);
    }
    while lines.last().is_some_and(|l| l.chars().all(is_ws)) {
        lines.pop();
    }
    lines.join("\n")
}

/// Raw block-string contents: a few lines of spaces, tabs, letters, backslashes and Unicode
/// whitespace, with any line terminator.
fn block_string_contents() -> impl Strategy<Value = String> {
    let line = vec(
        select(vec![
            ' ', ' ', '\t', 'a', 'b', 'é', '\\', '\u{a0}', '\u{3000}', '\u{2028}',
        ]),
        0..6,
    )
    .prop_map(String::from_iter);
    (vec(line, 1..6), vec(select(vec!["\n", "\r\n", "\r"]), 5))
        .prop_map(|(lines, ends)| {
            let mut raw = String::new();
            for (i, l) in lines.iter().enumerate() {
                if i > 0 {
                    raw.push_str(ends[i % ends.len()]);
                }
                raw.push_str(l);
            }
            raw
        })
        .prop_filter("a trailing backslash escapes the closing quotes", |raw| {
            !raw.ends_with('\\')
        })
}

fn canonical(query: &str) -> Result<String, TestCaseError> {
    canonicalize(query, None, limits())
        .map(|c| c.text)
        .map_err(|e| TestCaseError::fail(format!("{e:?} for\n  {query}")))
}

/// The float literal `f` as graphql-parser reads it: `1e+95`, not `1e95` (it rejects exponents
/// that start with `0` or `9`).
fn float_literal(f: f64) -> String {
    let text = format!("{f:?}");
    match text.split_once('e') {
        Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e}"),
        _ => text,
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    /// Float literals print with a signed exponent (`1e+95`), which graphql-parser reads back
    /// (it rejects `1e95`): the canonical text is a fixed point for every finite float.
    #[test]
    fn float_literals_round_trip(f in prop::num::f64::NORMAL) {
        let once = canonical(&format!("{{ f(a: {}) }}", float_literal(f)))?;
        prop_assert_eq!(canonical(&once)?, once);
    }

    /// A Float literal beyond f64 (`1.0e+309`) parses as infinity: the document is refused, so it
    /// can never share the key of the enum value `inf`.
    #[test]
    fn out_of_range_float_literals_are_refused(mantissa in 1u32..100, exponent in 309u32..999, negative: bool) {
        let sign = if negative { "-" } else { "" };
        let query = format!("{{ f(a: {sign}{mantissa}.0e+{exponent}) }}");
        prop_assert_eq!(canonicalize(&query, None, limits()).map(|c| c.text), Err(CanonicalError::Invalid));
    }

    /// serde_json with `float_roundtrip`: neighbouring doubles in `variables` never share a key.
    #[test]
    fn adjacent_float_variables_differ(doc in doc(), f in json_float()) {
        let text = plain(&doc);
        let up = if f.next_up().is_finite() { f.next_up() } else { f.next_down() };
        let var = |x: f64| Some(Json::Obj(vec![("x".to_string(), Json::Float(x))]));
        assert_different_key(&post(&text, None, var(f)), &post(&text, None, var(up)))?;
    }

    /// graphql-parser decodes `\b` as U+0010: a string using the `\b` escape is refused (not
    /// cached) rather than sharing the key of `"\u0010"`.
    #[test]
    fn backspace_escape_is_refused(s in vec(prop_oneof![string_char(), Just('\u{8}')], 0..6)) {
        let s = String::from_iter(s);
        let escaped = graphql_string(&s).replace("\\u0008", "\\b");
        let result = canonicalize(&format!("{{ f(a: {escaped}) }}"), None, limits()).map(|c| c.text);
        // Whether the literal uses the escape, not whether its text holds `\b`: a backslash
        // followed by `b` is written `\\b`, which holds it too.
        if s.contains('\u{8}') {
            prop_assert_eq!(result, Err(CanonicalError::Unsupported));
        } else {
            prop_assert_eq!(result.ok(), Some(canonical(&format!("{{ f(a: {}) }}", graphql_string(&s)))?));
        }
    }

    /// graphql-parser's block-string decoding departs from the spec (Unicode whitespace, lone
    /// `\r`, short blank lines) and can panic; so a block string is only keyed when it is one
    /// line of printable ASCII, where it matches the spec, and refused otherwise.
    #[test]
    fn block_strings_follow_the_spec_or_are_refused(raw in block_string_contents()) {
        let query = format!("{{ f(a: \"\"\"{raw}\"\"\") }}");
        let block = std::panic::catch_unwind(|| canonicalize(&query, None, limits()).map(|c| c.text))
            .map_err(|_| TestCaseError::fail(format!("panic on block string {raw:?}")))?;
        match block {
            Ok(text) => {
                let expected = graphql_string(&spec_block_string_value(&raw));
                prop_assert_eq!(text, canonical(&format!("{{ f(a: {expected}) }}"))?, "block string {:?}", raw);
            }
            Err(e) => prop_assert_eq!(e, CanonicalError::Unsupported, "block string {:?}", raw),
        }
    }

    /// Multi-byte whitespace in a block string's indentation made graphql-parser slice inside a
    /// character and panic (in wasm, `panic = "abort"` would kill the VM): the prescan refuses
    /// such block strings before the parser sees them. Former counterexample:
    /// `{"query":"{ f(a: \"\"\"x\n  a\n\u3000\n  b\"\"\") }"}`.
    #[test]
    fn block_strings_never_panic(raw in block_string_contents()) {
        exercise(&post(&format!("{{ f(a: \"\"\"{raw}\"\"\") }}"), None, None));
    }
}

/// The counterexample that once made `backspace_escape_is_refused` expect a refusal: a backslash
/// followed by `b` is two characters, not the `\b` escape, and is keyed like any other text.
#[test]
fn an_escaped_backslash_before_b_is_not_the_backspace_escape() {
    let text = canonicalize(r#"{ f(a: "\\b") }"#, None, limits()).map(|c| c.text);
    assert_eq!(text, Ok(r#"query{f(a:"\\b")}"#.to_string()));
}
