//! What a mutation's answer purges, before it is applied: the tags the origin declares (response
//! headers such as `Surrogate-Key` or `Cache-Tag`, or a member of `extensions`), the budget that
//! keeps mutation purges from flooding the purge marks, and the coarser purge the excess becomes.

use crate::config::{MutationPurges, TagSource};
use crate::invalidate::tags::{entity_purge_tags, field_tag, operation_tag, type_purge_tags};
use serde_json::Value;

/// Longest declared tag read; longer ones are ignored (they name nothing a cache entry carries).
const MAX_TAG_BYTES: usize = 512;
/// Declared tags read from one answer: the rest is ignored (the origin is bounded too).
const MAX_DECLARED: usize = 256;
/// Purge tags one mutation may mark one by one; a purge of more collapses (see [`PurgePlan`]).
/// An entity purge is three tags, shared by entities of one type: room for some 120 entities.
pub const MAX_PURGE_TAGS: usize = 128;

/// The tags the configured headers declare, as sent (not yet understood).
pub fn header_tags(sources: &[TagSource], headers: &[(String, Vec<u8>)]) -> Vec<String> {
    let mut out = Vec::new();
    for source in sources {
        let TagSource::Header(name) = source else {
            continue;
        };
        let values = headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name));
        for (_, value) in values {
            let Ok(text) = std::str::from_utf8(value) else {
                continue;
            };
            let tags = text
                .split(|c: char| c == ',' || c.is_ascii_whitespace())
                .filter(|t| !t.is_empty());
            out.extend(tags.take(MAX_DECLARED).map(str::to_string));
        }
    }
    out.truncate(MAX_DECLARED);
    out
}

/// The tags the configured `extensions` members declare; a member that is not an array of
/// strings declares nothing.
pub fn extension_tags(sources: &[TagSource], answer: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for source in sources {
        let TagSource::Extensions(member) = source else {
            continue;
        };
        let Some(Value::Array(items)) = answer.get("extensions").and_then(|e| e.get(member)) else {
            continue;
        };
        let tags = items.iter().filter_map(Value::as_str);
        out.extend(tags.take(MAX_DECLARED).map(str::to_string));
    }
    out.truncate(MAX_DECLARED);
    out
}

/// A mutation's purge, before the budget is asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PurgePlan {
    /// Sorted, each once.
    pub tags: Vec<String>,
    /// The types it is about: what it collapses to.
    pub types: Vec<String>,
}

/// What a purge marks once collapsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coarse {
    /// Each type's purge tags (sorted, each once).
    Tags(Vec<String>),
    /// No type is known: everything.
    All,
}

impl PurgePlan {
    /// The purge of these types and entities (`entities` is `(type, id)`); `by_type` purges each
    /// entity's whole type instead.
    pub fn of(types: &[String], entities: &[(String, String)], by_type: bool) -> PurgePlan {
        let mut plan = PurgePlan::default();
        for t in types {
            plan.add_type(t, by_type);
        }
        for (t, id) in entities {
            plan.add_entity(t, id, by_type);
        }
        plan.finish()
    }

    /// The purge of the tags an origin declared. Only tags this cache puts on entries are
    /// understood (`entity:T:id`, `type:T`, `operation:N`, `field:N`); others (the origin's own
    /// CDN vocabulary, say) purge nothing here. `None` when none is understood, so that an origin
    /// whose CDN tags mean nothing to this cache does not turn mutation purges off.
    pub fn declared(tags: &[String], by_type: bool) -> Option<PurgePlan> {
        let mut plan = PurgePlan::default();
        for tag in tags.iter().filter(|t| t.len() <= MAX_TAG_BYTES) {
            match tag.split_once(':') {
                Some(("entity", rest)) => match rest.split_once(':') {
                    Some((t, id)) if !t.is_empty() && !id.is_empty() => {
                        plan.add_entity(t, id, by_type)
                    }
                    _ => {}
                },
                // Declared, a type is a purge in either mode.
                Some(("type", t)) if !t.is_empty() => plan.add_type(t, true),
                Some(("operation", n)) if !n.is_empty() => plan.tags.push(operation_tag(n)),
                Some(("field", n)) if !n.is_empty() => plan.tags.push(field_tag(n)),
                _ => {}
            }
        }
        let plan = plan.finish();
        (!plan.tags.is_empty()).then_some(plan)
    }

    /// In entity mode a type alone is no purge (its entities say what changed), but it is what
    /// the purge collapses to.
    fn add_type(&mut self, typename: &str, by_type: bool) {
        self.types.push(typename.to_string());
        if by_type {
            self.tags.extend(type_purge_tags(typename));
        }
    }

    fn add_entity(&mut self, typename: &str, id: &str, by_type: bool) {
        self.types.push(typename.to_string());
        if by_type {
            self.tags.extend(type_purge_tags(typename));
        } else {
            self.tags.extend(entity_purge_tags(typename, id));
        }
    }

    fn finish(mut self) -> PurgePlan {
        for list in [&mut self.tags, &mut self.types] {
            list.sort_unstable();
            list.dedup();
        }
        self
    }

    /// Whether it is too large to mark tag by tag.
    pub fn too_large(&self) -> bool {
        self.tags.len() > MAX_PURGE_TAGS
    }

    /// The coarser purge it becomes: its types, whole (too much, never too little), or
    /// everything when it names no type or too many.
    pub fn collapse(&self) -> Coarse {
        let mut tags: Vec<String> = self.types.iter().flat_map(|t| type_purge_tags(t)).collect();
        tags.sort_unstable();
        tags.dedup();
        if tags.is_empty() || tags.len() > MAX_PURGE_TAGS {
            Coarse::All
        } else {
            Coarse::Tags(tags)
        }
    }
}

const MICROS: u64 = 1_000_000;

/// A token bucket of mutation purges: `burst` at once, `per_second` after that. Per worker (the
/// workers do not share it), so an Envoy allows its worker count times the rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeBudget {
    per_second: u64,
    /// Capacity in millionths of a purge.
    capacity: u64,
    /// Millionths of a purge left.
    left: u64,
    /// When it was last refilled (µs); never moves back, so a clock step back refills nothing.
    at_us: u64,
}

impl PurgeBudget {
    pub fn new(limits: &MutationPurges) -> PurgeBudget {
        let capacity = u64::from(limits.burst).saturating_mul(MICROS);
        PurgeBudget {
            per_second: u64::from(limits.per_second),
            capacity,
            left: capacity,
            at_us: 0,
        }
    }

    /// Takes one purge from the budget; `false` when none is left.
    pub fn take(&mut self, now_us: u64) -> bool {
        if self.at_us != 0 {
            let elapsed = now_us.saturating_sub(self.at_us);
            let earned = elapsed.saturating_mul(self.per_second);
            self.left = self.left.saturating_add(earned).min(self.capacity);
        }
        self.at_us = self.at_us.max(now_us);
        match self.left.checked_sub(MICROS) {
            Some(left) => {
                self.left = left;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn headers_split_on_commas_and_spaces() {
        let sources = MutationPurges::default().tags_from;
        let headers = vec![
            (
                "Surrogate-Key".to_string(),
                b"entity:User:1  type:Post".to_vec(),
            ),
            ("cache-tag".to_string(), b"field:a, field:b".to_vec()),
            ("cache-tag".to_string(), b"operation:X".to_vec()),
            ("x-other".to_string(), b"entity:User:2".to_vec()),
            ("surrogate-key".to_string(), vec![0xff]),
        ];
        assert_eq!(
            header_tags(&sources, &headers),
            strings(&[
                "entity:User:1",
                "type:Post",
                "field:a",
                "field:b",
                "operation:X"
            ])
        );
        let many = vec![("cache-tag".to_string(), "t,".repeat(1000).into_bytes())];
        assert_eq!(header_tags(&sources, &many).len(), MAX_DECLARED);
    }

    #[test]
    fn extensions_must_be_an_array_of_strings() {
        let sources = MutationPurges::default().tags_from;
        let answer: Value = serde_json::from_str(
            r#"{"data":{},"extensions":{"cacheTags":["entity:User:1",2,"type:Post"]}}"#,
        )
        .unwrap();
        assert_eq!(
            extension_tags(&sources, &answer),
            strings(&["entity:User:1", "type:Post"])
        );
        let not_array: Value =
            serde_json::from_str(r#"{"extensions":{"cacheTags":"entity:User:1"}}"#).unwrap();
        assert!(extension_tags(&sources, &not_array).is_empty());
    }

    #[test]
    fn declared_tags_are_understood_or_ignored() {
        let tags = strings(&[
            "entity:User:1:2",
            "type:Post",
            "operation:GetUser",
            "field:me",
            "product-42",
            "entity:User:",
            "entities:User",
            "overflow",
        ]);
        let plan = PurgePlan::declared(&tags, false).unwrap();
        assert_eq!(
            plan.tags,
            strings(&[
                "entities:User",
                "entity:User:1:2",
                "field:me",
                "operation:GetUser",
                "overflow",
                "type:Post",
            ])
        );
        assert_eq!(plan.types, strings(&["Post", "User"]));
        let by_type = PurgePlan::declared(&tags, true).unwrap();
        assert!(by_type.tags.contains(&"type:User".to_string()));
        assert!(!by_type.tags.iter().any(|t| t.starts_with("entity:")));
        assert_eq!(
            PurgePlan::declared(&strings(&["product-42", "sku 1"]), false),
            None,
            "a CDN's own tags leave the answer's objects to say what changed"
        );
    }

    #[test]
    fn plans_collapse_to_their_types_or_everything() {
        let entities: Vec<(String, String)> =
            (0..200).map(|i| ("User".into(), i.to_string())).collect();
        let plan = PurgePlan::of(&strings(&["User"]), &entities, false);
        assert!(plan.too_large());
        assert_eq!(
            plan.collapse(),
            Coarse::Tags(strings(&["overflow", "type:User"]))
        );
        let small = PurgePlan::of(&strings(&["User"]), &entities[..2], false);
        assert!(!small.too_large());
        assert_eq!(small.tags.len(), 4, "two entities, entities:User, overflow");
        let fields = PurgePlan::declared(&strings(&["field:me"]), false).unwrap();
        assert_eq!(fields.collapse(), Coarse::All);
    }

    #[test]
    fn the_budget_refills_at_its_rate_up_to_its_burst() {
        let limits = MutationPurges {
            per_second: 10,
            burst: 3,
            ..MutationPurges::default()
        };
        let mut b = PurgeBudget::new(&limits);
        let t0 = 1_000_000_000;
        assert!((0..3).all(|_| b.take(t0)));
        assert!(!b.take(t0), "the burst is spent");
        assert!(!b.take(t0 + 99_000), "a tenth of a second earns one");
        assert!(b.take(t0 + 100_000));
        assert!(!b.take(t0 - 5_000_000), "a clock step back earns nothing");
        assert!(b.take(t0 + 10_000_000));
        assert!((0..2).all(|_| b.take(t0 + 10_000_000)));
        assert!(!b.take(t0 + 10_000_000), "never more than the burst");
    }
}
