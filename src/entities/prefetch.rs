//! Prefetch along the gateway's plan (`entities.types.<T>.prefetch`). A gateway resolves a
//! client query hop by hop: it reads one subgraph's answer, then asks the next subgraph for the
//! entities that answer names (the products of a search page, then their reviews' authors).
//! When an answer passing this hop names entities of a type the gateway asked for before, the
//! filter can ask for the ones not cached while the gateway is still reading the answer, and the
//! gateway's batch, when it comes, waits for that fetch instead of sending its own.
//!
//! The pure part: what a gateway's batch teaches about asking for a type (a [`Template`]: its
//! query, its variables, the members of its representations), which representations of that
//! type an answer names, and the batch that asks for them.

use crate::entities::batch::EntityBatch;
use crate::entities::request::{EntitiesRequest, Representation};
use crate::fast_hash::FastMap;
use crate::json::{self, Json};
use crate::request::classify::RequestHead;
use crate::request::key::CacheKey;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::rc::Rc;

/// At most this many entities of one type are prefetched for one answer.
pub const MAX_PREFETCH: usize = 100;

/// What a gateway's `_entities` batch teaches about asking for entities of one type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub typename: String,
    /// The batch with every list of representations emptied; its field `field` asked for
    /// `typename`.
    req: EntitiesRequest,
    field: usize,
    /// The members of its representations of `typename`, sorted (`__typename` included).
    members: Vec<String>,
}

impl Template {
    /// What `req` teaches about asking for `typename`; `None` if it asks for none, or its
    /// representations are not objects.
    pub fn learn(req: &EntitiesRequest, typename: &str) -> Option<Template> {
        let (field, rep) = req.fields.iter().enumerate().find_map(|(f, field)| {
            let rep = field.distinct.iter().find(|r| r.typename == typename)?;
            Some((f, rep))
        })?;
        let Ok(Json::Object(members)) = json::parse(&rep.canonical) else {
            return None;
        };
        let members = members.iter().map(|(n, _)| n.to_string()).collect();
        let mut req = req.clone();
        for f in &mut req.fields {
            f.distinct.clear();
            f.positions.clear();
        }
        Some(Template {
            typename: typename.to_string(),
            req,
            field,
            members,
        })
    }

    /// The batch asking for `reps` alone (any other field of the template for none), and what
    /// it sends (see `EntityBatch::sent`).
    pub fn batch(&self, reps: Vec<Representation>) -> (EntitiesRequest, Vec<Vec<usize>>) {
        let mut req = self.req.clone();
        let mut sent = vec![Vec::new(); req.fields.len()];
        if let (Some(field), Some(s)) = (req.fields.get_mut(self.field), sent.get_mut(self.field)) {
            field.positions = (0..reps.len()).collect();
            s.clone_from(&field.positions);
            field.distinct = reps;
        }
        (req, sent)
    }

    /// The representation the gateway would send for `object`: its members the template's
    /// representations have, when it has every one of them.
    fn representation(&self, object: &[(Cow<'_, str>, Json<'_>)]) -> Option<Representation> {
        let mut picked = Vec::with_capacity(self.members.len());
        for name in &self.members {
            let at = object
                .binary_search_by(|(n, _)| n.as_ref().cmp(name))
                .ok()?;
            picked.push(object.get(at)?.clone());
        }
        Some(Representation {
            typename: self.typename.clone(),
            canonical: Json::Object(picked).to_canonical(),
        })
    }
}

/// Whether `answer` may name an entity of a template's type: its name appears in the text (a
/// cheap test before parsing an answer).
pub fn may_name(answer: &[u8], templates: &[&Template]) -> bool {
    templates.iter().any(|t| {
        let needle = t.typename.as_bytes();
        answer.windows(needle.len() + 2).any(|w| {
            w.first() == Some(&b'"')
                && w.last() == Some(&b'"')
                && w.get(1..=needle.len()) == Some(needle)
        })
    })
}

/// For each template, the distinct representations of its type that `answer`'s `data` names
/// (objects with that `__typename` and every member of the template's representations), in
/// the order met, at most [`MAX_PREFETCH`].
pub fn named(answer: &Json<'_>, templates: &[&Template]) -> Vec<Vec<Representation>> {
    let mut found = vec![Vec::new(); templates.len()];
    let mut seen: Vec<HashSet<String>> = vec![HashSet::new(); templates.len()];
    let Json::Object(top) = answer else {
        return found;
    };
    let Some((_, data)) = top.iter().find(|(n, _)| n == "data") else {
        return found;
    };
    let mut stack = vec![data];
    while let Some(value) = stack.pop() {
        match value {
            Json::Array(items) => stack.extend(items.iter().rev()),
            Json::Object(members) => {
                pick(members, templates, &mut found, &mut seen);
                stack.extend(members.iter().rev().map(|(_, v)| v));
            }
            _ => {}
        }
    }
    found
}

fn pick(
    object: &[(Cow<'_, str>, Json<'_>)],
    templates: &[&Template],
    found: &mut [Vec<Representation>],
    seen: &mut [HashSet<String>],
) {
    let typename = object
        .binary_search_by(|(n, _)| n.as_ref().cmp("__typename"))
        .ok()
        .and_then(|at| object.get(at));
    let Some((_, Json::String(typename))) = typename else {
        return;
    };
    for (i, t) in templates.iter().enumerate() {
        if t.typename != *typename {
            continue;
        }
        let (Some(list), Some(seen)) = (found.get_mut(i), seen.get_mut(i)) else {
            continue;
        };
        if list.len() >= MAX_PREFETCH {
            continue;
        }
        if let Some(rep) = t.representation(object) {
            if seen.insert(rep.canonical.clone()) {
                list.push(rep);
            }
        }
    }
}

/// A template and where its batch went: the method, path, authority, cluster and route of the
/// gateway's request (its headers are not kept: a prefetch carries those of the request whose
/// answer named the entities, never another caller's).
#[derive(Debug, Clone)]
pub struct Learned {
    pub template: Template,
    head: RequestHead,
    /// The cluster the batch went to (a prefetch goes there too).
    pub cluster: String,
}

impl Learned {
    pub fn new(template: Template, head: &RequestHead, cluster: String) -> Learned {
        let head = RequestHead {
            method: head.method.clone(),
            path: head.path.clone(),
            authority: head.authority.clone(),
            cluster: head.cluster.clone(),
            route: head.route,
            ..RequestHead::default()
        };
        Learned {
            template,
            head,
            cluster,
        }
    }

    /// Whether this was learned from a batch asking as `req` does, sent where `head` went.
    pub fn asks_like(&self, req: &EntitiesRequest, head: &RequestHead) -> bool {
        let t = &self.template.req;
        t.query == req.query
            && t.operation_name == req.operation_name
            && t.others == req.others
            && t.extensions == req.extensions
            && self.head.path == head.path
            && self.head.authority == head.authority
            && self.head.cluster == head.cluster
    }

    /// The head of the prefetch for entities `trigger`'s answer named: sent where the
    /// template's batch went, with `trigger`'s headers (the key's headers are then the ones the
    /// gateway sends on this caller's behalf).
    pub fn head_for(&self, trigger: &RequestHead) -> RequestHead {
        RequestHead {
            content_type: trigger.content_type.clone(),
            accept: trigger.accept.clone(),
            vary: trigger.vary.clone(),
            headers: trigger.headers.clone(),
            ..self.head.clone()
        }
    }
}

/// Why an answer may start a prefetch: the request it answers (whose headers a prefetch carries),
/// and how many prefetches led to it (a prefetch's own answer may start one more, no further).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    pub head: RequestHead,
    pub depth: u8,
}

/// How many prefetches may follow one another from one request's answer: the entities it names,
/// then those theirs name (a search page's products' reviews, then their authors).
pub const MAX_CHAIN: u8 = 2;

impl Trigger {
    /// The trigger of a prefetch started by this one's answer, if the chain may go on.
    pub fn next(&self) -> Option<Trigger> {
        let depth = self.depth + 1;
        (depth < MAX_CHAIN).then(|| Trigger {
            head: self.head.clone(),
            depth,
        })
    }
}

/// At most this many requests of one worker wait for prefetches at once (others fetch what
/// they miss themselves).
pub const MAX_WAITING: usize = 1024;

/// At most this many ways of asking for one type are remembered (the subgraphs that resolve
/// it, the selections asked of them).
pub const TEMPLATES_PER_TYPE: usize = 4;

/// A way of asking for a type, and how many batches asked so lately.
#[derive(Debug, Clone)]
struct AskedFor {
    learned: Rc<Learned>,
    batches: u32,
}

/// One worker's prefetching: the ways the gateway asked for each prefetched type (bounded by the
/// configured types), the batches waiting for a prefetch, and what the fetch being finished made.
#[derive(Debug, Default)]
pub struct Prefetches {
    learned: BTreeMap<String, Vec<AskedFor>>,
    waiting: FastMap<u32, Rc<EntityBatch>>,
    /// The entries the fetch being finished made (admitted to the store or not), by key: what
    /// the batches that waited for it are answered from. Emptied once they are.
    fetched: FastMap<CacheKey, Vec<u8>>,
}

impl Prefetches {
    /// Counts a batch asking for `typename` as `req` does, sent as `head`; `false` when no way
    /// of asking is known like it (then [`Prefetches::learn`] it).
    pub fn asked(&mut self, typename: &str, req: &EntitiesRequest, head: &RequestHead) -> bool {
        let Some(known) = self.learned.get_mut(typename) else {
            return false;
        };
        let Some(k) = known.iter_mut().find(|k| k.learned.asks_like(req, head)) else {
            return false;
        };
        k.batches = k.batches.saturating_add(1);
        // Halved now and then: what the gateway asks lately counts.
        if k.batches >= 1024 {
            known.iter_mut().for_each(|k| k.batches /= 2);
        }
        true
    }

    /// A new way of asking for its type, in place of the one asked least if there are too many.
    pub fn learn(&mut self, learned: Learned) {
        let known = self
            .learned
            .entry(learned.template.typename.clone())
            .or_default();
        if known.len() >= TEMPLATES_PER_TYPE {
            if let Some(least) = (0..known.len()).min_by_key(|&i| known.get(i).map(|k| k.batches)) {
                known.swap_remove(least);
            }
        }
        known.push(AskedFor {
            learned: Rc::new(learned),
            batches: 1,
        });
    }

    /// For each type, the way the gateway asked for it most lately: where a prefetch goes (a
    /// type several subgraphs resolve is fetched ahead from the one its batches mostly go to).
    pub fn templates(&self) -> Vec<Rc<Learned>> {
        self.learned
            .values()
            .filter_map(|known| known.iter().max_by_key(|k| k.batches))
            .map(|k| Rc::clone(&k.learned))
            .collect()
    }

    /// Request `context` waits with `batch`; `false` when too many wait already.
    pub fn wait(&mut self, context: u32, batch: Rc<EntityBatch>) -> bool {
        if self.waiting.len() >= MAX_WAITING {
            return false;
        }
        self.waiting.insert(context, batch);
        true
    }

    /// The batch request `context` waited with, forgotten.
    pub fn is_waiting(&self, context: u32) -> bool {
        self.waiting.contains_key(&context)
    }

    pub fn take_waiting(&mut self, context: u32) -> Option<Rc<EntityBatch>> {
        self.waiting.remove(&context)
    }

    pub fn hold_fetched(&mut self, entries: Vec<(CacheKey, Vec<u8>)>) {
        self.fetched.extend(entries);
    }

    /// The entry the fetch being finished made for `key`.
    pub fn fetched(&self, key: &CacheKey) -> Option<Vec<u8>> {
        self.fetched.get(key).cloned()
    }

    pub fn drop_fetched(&mut self) {
        self.fetched.clear();
    }

    /// A new configuration: the templates were learned under the old one.
    pub fn forget_templates(&mut self) {
        self.learned.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::canonical::Limits;

    const LIMITS: Limits = Limits {
        max_depth: 16,
        max_fields: 200,
    };

    const QUERY: &str = "query($representations:[_Any!]!){_entities(representations:$representations){...on Product{reviews{id author{__typename id}}}}}";

    fn gateway_batch(reps: &str) -> EntitiesRequest {
        let body = format!(r#"{{"query":"{QUERY}","variables":{{"representations":{reps}}}}}"#);
        EntitiesRequest::read(body.as_bytes(), LIMITS).unwrap()
    }

    fn template() -> Template {
        let req = gateway_batch(r#"[{"id":"7","__typename":"Product"}]"#);
        Template::learn(&req, "Product").unwrap()
    }

    #[test]
    fn an_answer_s_entities_become_the_representations_the_gateway_would_send() {
        let t = template();
        let answer = r#"{"data":{"search":[
            {"__typename":"Product","id":"1","name":"a","price":3},
            {"__typename":"Product","name":"no id"},
            {"__typename":"User","id":"1"},
            {"__typename":"Product","id":"2","nested":{"__typename":"Product","id":"3"}},
            {"id":"1","__typename":"Product"}]},
            "errors":[{"message":"x","extensions":{"__typename":"Product","id":"9"}}]}"#;
        let parsed = json::parse(answer).unwrap();
        let reps = named(&parsed, &[&t]);
        let texts: Vec<&str> = reps[0].iter().map(|r| r.canonical.as_str()).collect();
        assert_eq!(
            texts,
            [
                r#"{"__typename":"Product","id":"1"}"#,
                r#"{"__typename":"Product","id":"2"}"#,
                r#"{"__typename":"Product","id":"3"}"#,
            ],
            "in order met, once each, from data alone, with the members the gateway sends"
        );
    }

    #[test]
    fn the_batch_asks_for_the_named_entities_as_the_gateway_would() {
        let t = template();
        let parsed =
            json::parse(r#"{"data":{"p":[{"__typename":"Product","id":"4","name":"x"},{"__typename":"Product","id":"5"}]}}"#)
                .unwrap();
        let reps = named(&parsed, &[&t]).remove(0);
        let (req, sent) = t.batch(reps);
        assert_eq!(sent, vec![vec![0, 1]]);
        let body = req.rewritten(&sent);
        // What the gateway sends for the same entities reads the same: same selection, same
        // representations, so the same keys.
        let gateway = gateway_batch(
            r#"[{"__typename":"Product","id":"4"},{"id":"5","__typename":"Product"}]"#,
        );
        let again = EntitiesRequest::read(&body, LIMITS).unwrap();
        assert_eq!(again.fields[0].selection, gateway.fields[0].selection);
        assert_eq!(again.fields[0].distinct, gateway.fields[0].distinct);
        assert_eq!(again.other_variables, gateway.other_variables);
    }

    #[test]
    fn composite_keys_need_every_member_and_take_it_whole() {
        let req = gateway_batch(r#"[{"__typename":"Product","sku":"a","vendor":{"id":"v"}}]"#);
        let t = Template::learn(&req, "Product").unwrap();
        assert!(Template::learn(&req, "User").is_none());
        let parsed = json::parse(
            r#"{"data":{"x":[{"__typename":"Product","sku":"a","vendor":{"id":"v"}},{"__typename":"Product","sku":"b"}]}}"#,
        )
        .unwrap();
        let reps = named(&parsed, &[&t]).remove(0);
        assert_eq!(reps.len(), 1);
        assert_eq!(
            reps[0].canonical,
            r#"{"__typename":"Product","sku":"a","vendor":{"id":"v"}}"#
        );
    }

    #[test]
    fn a_type_is_prefetched_the_way_its_batches_mostly_ask_for_it() {
        let head = |path: &str| RequestHead {
            path: path.as_bytes().to_vec(),
            ..RequestHead::default()
        };
        let req = gateway_batch(r#"[{"__typename":"Product","id":"1"}]"#);
        let mut p = Prefetches::default();
        assert!(!p.asked("Product", &req, &head("/reviews")));
        p.learn(Learned::new(
            template(),
            &head("/reviews"),
            "reviews".into(),
        ));
        for _ in 0..3 {
            assert!(p.asked("Product", &req, &head("/reviews")));
        }
        // Another subgraph resolves Product too, asked once.
        assert!(!p.asked("Product", &req, &head("/products")));
        p.learn(Learned::new(
            template(),
            &head("/products"),
            "products".into(),
        ));
        assert_eq!(p.templates()[0].cluster, "reviews");
        for i in 0..TEMPLATES_PER_TYPE + 2 {
            let path = format!("/other{i}");
            p.learn(Learned::new(template(), &head(&path), "x".into()));
        }
        assert_eq!(p.learned["Product"].len(), TEMPLATES_PER_TYPE, "bounded");
        assert_eq!(
            p.templates()[0].cluster,
            "reviews",
            "the one asked most stays"
        );
    }

    #[test]
    fn at_most_max_prefetch_per_answer_and_a_cheap_test_first() {
        let t = template();
        let items: Vec<String> = (0..MAX_PREFETCH + 5)
            .map(|i| format!(r#"{{"__typename":"Product","id":"{i}"}}"#))
            .collect();
        let answer = format!(r#"{{"data":{{"x":[{}]}}}}"#, items.join(","));
        assert!(may_name(answer.as_bytes(), &[&t]));
        assert!(!may_name(
            br#"{"data":{"x":[{"__typename":"Products"}]}}"#,
            &[&t]
        ));
        let parsed = json::parse(&answer).unwrap();
        assert_eq!(named(&parsed, &[&t])[0].len(), MAX_PREFETCH);
        assert!(named(&json::parse("[1]").unwrap(), &[&t])[0].is_empty());
    }
}
