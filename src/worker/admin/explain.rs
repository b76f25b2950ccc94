//! The explain endpoint (`explain_path`, the purge API's token): what the filter would do with a
//! request an operator describes, and why, read from the cache without changing it. Nothing is
//! forwarded, no lookup is counted, no frequency recorded, no statistic moved.

use crate::cache::entry::Entry;
use crate::cache::fates::seconds;
use crate::cache::status::CacheStatus;
use crate::cache::table::MissKind;
use crate::config::Matcher;
use crate::config::{Config, IdentitySource, Rule, Scope};
use crate::effects::host::RequestHost;
use crate::invalidate::marks::Verdict;
use crate::invalidate::purge_request::Refusal;
use crate::request::bypass::Bypass;
use crate::request::classify::{
    classify_get, classify_headers, classify_post, handles, head_of, scope_key, Bypassed, Decided,
    HeadersVerdict, Known, RequestHead,
};
use crate::request::explain::{fingerprint, key_parts, Described};
use crate::request::http::split_path;
use crate::request::key::CacheKey;
use crate::request::rules::rule_matches;
use crate::worker::admin::purge::{json_headers, refuse};
use crate::worker::ctx::Ctx;
use crate::worker::read::{header_identity, issued_identity};
use crate::worker::serving::lookup::MissReason;
use crate::worker::serving::marks::{refresh_marks, verdict};
use serde_json::{json, Map, Value};
use std::rc::Rc;

/// Answers an authorized explain request whose whole body is `body`.
pub fn explain(cx: &mut Ctx<'_, impl RequestHost>, body: &[u8]) {
    let answer = Described::parse(body).and_then(|d| describe(cx, &d));
    match answer {
        Ok(v) => cx
            .host()
            .respond(200, json_headers(), v.to_string().as_bytes()),
        Err(message) => refuse(
            cx.host(),
            &Refusal {
                status: 400,
                message,
            },
        ),
    }
}

fn describe(cx: &mut Ctx<'_, impl RequestHost>, d: &Described) -> Result<Value, String> {
    let config = cx.config();
    let mut head = head_of(config, d.header_block());
    if config.key_by_cluster {
        let cluster = d.cluster.clone().or_else(|| config.upstream_cluster.clone()).ok_or(
            "cluster: the upstream cluster the request's route picks is part of the key (key_by_cluster)",
        )?;
        head.cluster = Some(cluster.into_bytes());
    }
    if !handles(config, &head.path) {
        return Ok(json!({
            "handled": false,
            "why": "the path is not one of `paths`: passed through, untouched and uncounted",
        }));
    }
    let mut out = Map::new();
    out.insert("handled".into(), true.into());
    out.insert("key".into(), key_parts(config, &head, &d.body));
    let decided = classify_described(cx, &head, &d.body).and_then(|x| scoped(config, &head, d, x));
    match decided {
        Err(b) => {
            out.insert("decision".into(), "bypass".into());
            out.insert("x_cache".into(), CacheStatus::Bypass.as_str().into());
            out.insert("reason".into(), b.reason.as_str().into());
            let name = b.operation.as_ref().and_then(|o| o.name.clone());
            out.insert("operation".into(), json!({ "name": name }));
        }
        Ok((decided, identity)) => looked_up(cx, &mut out, &decided, identity.as_deref()),
    }
    out.insert("notes".into(), notes(config, &head).into());
    Ok(Value::Object(out))
}

/// What the filter decides for the request, as it would on its headers and body.
fn classify_described(
    cx: &mut Ctx<'_, impl RequestHost>,
    head: &RequestHead,
    body: &[u8],
) -> Result<Decided, Bypassed> {
    let (config, apq, host) = (cx.config(), &cx.plugin().apq, cx.host());
    let persisted = |h: &str| apq.lookup(host, h);
    if head.method == b"GET" {
        if !body.is_empty() {
            return Err(Bypass::GetWithBody.into());
        }
        let full = std::str::from_utf8(&head.path).map_err(|_| Bypass::BadQueryString)?;
        let (path, query) = split_path(full);
        return classify_get(config, head, path, query, Known::persisted(&persisted))
            .map(Decided::from);
    }
    match classify_headers(config, head, body.is_empty()) {
        HeadersVerdict::Ready(c) => Ok(c.into()),
        HeadersVerdict::Bypass(b) => Err(b.into()),
        HeadersVerdict::NotHandled => Err(Bypass::Method.into()),
        HeadersVerdict::NeedBody => {
            classify_post(config, head, body, Known::persisted(&persisted)).map(Decided::from)
        }
    }
}

/// A private decision scoped to the caller, as `identity` would read it; the identity used.
fn scoped(
    config: &Config,
    head: &RequestHead,
    d: &Described,
    decided: Decided,
) -> Result<(Decided, Option<Vec<u8>>), Bypassed> {
    if decided.policy.scope == Scope::Public {
        return Ok((decided, None));
    }
    let identity = match &config.identity {
        None => None,
        Some(IdentitySource::Header(name)) => header_identity(name, head),
        Some(IdentitySource::JwtClaim { .. }) => d
            .identity
            .as_ref()
            .map(|(issuer, claim)| issued_identity(issuer.as_bytes(), claim.as_bytes())),
    };
    let operation = Some(Rc::clone(&decided.operation));
    let scoped =
        scope_key(decided, identity.as_deref()).map_err(|reason| Bypassed { reason, operation })?;
    Ok((scoped, identity))
}

/// A request the cache looks up: its operation, policy, key, entry, and what it would get.
fn looked_up(
    cx: &mut Ctx<'_, impl RequestHost>,
    out: &mut Map<String, Value>,
    decided: &Decided,
    identity: Option<&[u8]>,
) {
    let config = cx.config();
    let op = &decided.operation;
    let p = &decided.policy;
    out.insert("decision".into(), "lookup".into());
    out.insert(
        "operation".into(),
        json!({ "name": op.name, "root_fields": op.root_fields }),
    );
    let scope = match p.scope {
        Scope::Public => "public",
        Scope::Private => "private",
    };
    out.insert(
        "policy".into(),
        json!({
            "scope": scope,
            "ttl_seconds": p.ttl_seconds,
            "stale_while_revalidate_seconds": p.stale_while_revalidate_seconds,
            "stale_if_error_seconds": p.stale_if_error_seconds,
        }),
    );
    let rules: Vec<Value> = config
        .rules
        .iter()
        .enumerate()
        .filter(|(_, r)| rule_matches(r, op.name.as_deref(), &op.root_fields))
        .map(|(i, r)| rule_json(i, r))
        .collect();
    out.insert("rules".into(), rules.into());
    if let Some(Value::Object(key)) = out.get_mut("key") {
        key.insert("digest".into(), decided.key.hex().into());
        key.insert("scope".into(), scope.into());
        key.insert("identity".into(), identity.map(fingerprint).into());
    }
    let now_ms = cx.host().now_ms();
    let found = entry_state(cx, &decided.key, now_ms);
    out.insert("x_cache".into(), found.x_cache.as_str().into());
    out.insert("miss_reason".into(), found.miss_reason.into());
    out.insert("entry".into(), found.entry);
    out.insert(
        "last_not_stored".into(),
        last_not_stored(cx, &decided.key, now_ms).into(),
    );
}

fn rule_json(index: usize, r: &Rule) -> Value {
    let (kind, name) = match &r.matcher {
        Matcher::Operation(n) => ("operation", n),
        Matcher::Field(f) => ("field", f),
    };
    let scope = r.scope.map(|s| match s {
        Scope::Public => "public",
        Scope::Private => "private",
    });
    json!({
        "index": index,
        kind: name,
        "cache": r.cache,
        "scope": scope,
        "ttl_seconds": r.ttl_seconds,
        "stale_while_revalidate_seconds": r.stale_while_revalidate_seconds,
        "stale_if_error_seconds": r.stale_if_error_seconds,
    })
}

/// What the cache holds for a key, and what a request for it would get now.
struct Held {
    entry: Value,
    x_cache: CacheStatus,
    miss_reason: Option<&'static str>,
}

fn entry_state(cx: &mut Ctx<'_, impl RequestHost>, key: &CacheKey, now_ms: u64) -> Held {
    let table = &cx.plugin().table;
    let hash = table.hash(key);
    let peeked = cx.worker_and_shared(|_, shared| table.peek(shared, key, hash));
    let miss = |why| Held {
        entry: Value::Null,
        x_cache: CacheStatus::Miss,
        miss_reason: Some(why),
    };
    let bytes = match peeked {
        Ok(bytes) => bytes,
        Err(MissKind::Empty) => return miss(absent_because(cx, key, now_ms)),
        Err(MissKind::Expired) => return miss("expired"),
        Err(_) => return miss("collision"),
    };
    if cx.config().invalidation_on() {
        refresh_marks(cx);
    }
    let marks = cx.worker(|w| verdict(w, &bytes));
    let Ok(e) = Entry::decode(&bytes) else {
        return miss("collision");
    };
    let coalesce = cx.config().coalesce;
    let (state, x_cache, miss_reason) = freshness(&e, marks, now_ms, coalesce);
    let left = |until: u64| until.saturating_sub(now_ms) / 1000;
    let tags: Option<Vec<&str>> = (!e.tags.is_empty()).then(|| e.tags.split(',').collect());
    let entry = json!({
        "state": state,
        "status": e.status,
        "bytes": bytes.len(),
        "age_seconds": e.age_s(now_ms),
        "ttl_remaining_seconds": left(e.expires_at_ms),
        "stale_while_revalidate_remaining_seconds": left(e.stale_until_ms()),
        "stale_if_error_remaining_seconds": left(e.error_until_ms()),
        "stored_seconds_ago": now_ms.saturating_sub(e.stored_at_ms) / 1000,
        "tag_count": e.tag_hashes.len(),
        "tags": tags,
    });
    Held {
        entry,
        x_cache,
        miss_reason,
    }
}

/// Why a key the table does not hold would miss, in the words the counters use: what became of
/// its last answer, if remembered (else `cold`: this endpoint does not know what a worker saw).
fn absent_because(cx: &mut Ctx<'_, impl RequestHost>, key: &CacheKey, now_ms: u64) -> &'static str {
    let plugin = cx.plugin();
    let fate = plugin
        .fates
        .recall(cx.host(), plugin.table.hash(key))
        .map(|r| r.fate);
    MissReason::of(MissKind::Empty, fate, false, seconds(now_ms)).as_str()
}

/// Why the key's last answer was not stored, and how long ago, if that is the newest thing known
/// of it (a later store would have replaced that fate).
fn last_not_stored(
    cx: &mut Ctx<'_, impl RequestHost>,
    key: &CacheKey,
    now_ms: u64,
) -> Option<Value> {
    let plugin = cx.plugin();
    let recalled = plugin.fates.recall(cx.host(), plugin.table.hash(key))?;
    let why = recalled.fate.not_stored()?;
    let ago = seconds(now_ms).saturating_sub(recalled.at_s);
    Some(json!({ "reason": why.as_str(), "seconds_ago": ago }))
}

/// An entry's state, what a request would be answered with, and why not from the entry.
fn freshness(
    e: &Entry<'_>,
    marks: Verdict,
    now_ms: u64,
    coalesce: bool,
) -> (&'static str, CacheStatus, Option<&'static str>) {
    let in_stale_window = e.within_stale_window(now_ms);
    let stale = |state| match (in_stale_window, coalesce) {
        (true, true) => (state, CacheStatus::Stale, None),
        _ => (
            state,
            CacheStatus::Miss,
            Some(if state == "expired" {
                "expired"
            } else {
                "purged"
            }),
        ),
    };
    match marks {
        Verdict::Purged => ("purged", CacheStatus::Miss, Some("purged")),
        Verdict::Stale => stale("soft-purged"),
        Verdict::Fresh if now_ms < e.expires_at_ms => ("fresh", CacheStatus::Hit, None),
        Verdict::Fresh => stale("expired"),
    }
}

/// What the answer cannot say, or what applies beyond it.
fn notes(config: &Config, head: &RequestHead) -> Vec<&'static str> {
    let mut notes = Vec::new();
    if let Some(_ns) = &config.route_metadata {
        notes.push("route metadata overrides are not applied: a described request has no route");
    }
    if head.conditional() {
        notes.push("a conditional request (if-none-match, if-modified-since) goes upstream alone on a miss");
    }
    if !config.coalesce {
        notes.push("coalesce is off: misses go upstream one by one, and stale entries are never served while refreshing");
    }
    notes
}
