//! Entity mode through one worker's fake host: an `_entities` batch forwarded whole and split
//! into entries, then one answered from entries and a fetch of only what is missing, then one
//! answered from entries alone. The first scenarios turn `coalesce` off: an all-miss batch is then
//! forwarded (with coalescing it shares a root fetch, the scenarios at the end).

use super::scenarios::{envoy, Node};
use crate::effects::fake::Reply;
use crate::worker::callout::Returned;
use crate::worker::request::exchange::Flow;
use serde_json::json;

const QUERY: &str = "query($representations:[_Any!]!){_entities(representations:$representations){...on Product{name}}}";

fn batch(ids: &[u32]) -> String {
    let reps: Vec<_> = ids
        .iter()
        .map(|i| json!({"__typename": "Product", "id": i.to_string()}))
        .collect();
    json!({"query": QUERY, "variables": {"representations": reps}}).to_string()
}

fn entity(id: u32) -> String {
    format!(r#"{{"name":"P{id}"}}"#)
}

/// What the subgraph answers for `ids`, in order.
fn subgraph_answer(ids: &[u32]) -> String {
    let list: Vec<String> = ids.iter().map(|i| entity(*i)).collect();
    format!(r#"{{"data":{{"_entities":[{}]}}}}"#, list.join(","))
}

fn json_headers(extra: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
    let mut h = vec![
        (":status".to_string(), b"200".to_vec()),
        ("content-type".to_string(), b"application/json".to_vec()),
    ];
    h.extend(
        extra
            .iter()
            .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())),
    );
    h
}

/// A batch the subgraph answers itself (forwarded), streamed back in one chunk.
fn forwarded(node: &Node, context: u32, ids: &[u32]) {
    let (mut x, flow) = node.post(context, &batch(ids), &[]);
    assert_eq!(flow, Flow::Continue, "sent upstream whole");
    *node.host.response_headers.borrow_mut() = json_headers(&[("cache-control", "max-age=120")]);
    x.on_response_headers(&mut node.cx(), false);
    assert_eq!(node.host.header_set("x-cache").as_deref(), Some("MISS"));
    let body = subgraph_answer(ids);
    *node.host.response_chunk.borrow_mut() = body.as_bytes().to_vec();
    x.on_response_body(&mut node.cx(), body.len(), true);
}

fn reply(node: &Node, context: u32) -> Reply {
    node.reply(context)
}

#[test]
fn a_batch_is_answered_from_entries_and_only_what_is_missing_is_fetched() {
    let (a, _b) = envoy(r#"{"debug_headers":true,"coalesce":false,"entities":{"ttl_seconds":60}}"#);
    forwarded(&a, 1, &[1, 2, 1]);

    // 1 and 2 stored; 3 is fetched alone, and the answer merged in the gateway's order.
    let (mut x, flow) = a.post(2, &batch(&[3, 1, 2, 3]), &[]);
    assert_eq!(flow, Flow::Pause);
    let (token, callout) = a.host.dispatched.borrow().last().cloned().unwrap();
    let sent: serde_json::Value = serde_json::from_slice(callout.body.as_ref().unwrap()).unwrap();
    assert_eq!(
        sent["variables"]["representations"],
        json!([{"__typename": "Product", "id": "3"}])
    );
    assert!(!callout.headers.iter().any(|(n, _)| n == "content-length"));
    let answer = subgraph_answer(&[3]);
    *a.host.callout.borrow_mut() = (
        json_headers(&[("cache-control", "max-age=30")]),
        answer.as_bytes().to_vec(),
    );
    let returned = Returned {
        headers: Some(json_headers(&[("cache-control", "max-age=30")])),
        body_size: answer.len(),
    };
    x.on_callout(&mut a.cx(), token, &returned);
    let partial = reply(&a, 2);
    assert_eq!(partial.header("x-cache"), Some("PARTIAL"));
    assert_eq!(partial.header("x-cache-entities"), Some("hit=2 fetched=1"));
    assert_eq!(
        String::from_utf8(partial.body.clone()).unwrap(),
        subgraph_answer(&[3, 1, 2, 3])
    );
    assert_eq!(partial.header("cache-control"), Some("max-age=30"));

    // Everything stored now: answered here, byte for byte what the subgraph would send.
    let (_, flow) = a.post(3, &batch(&[2, 3, 1]), &[]);
    assert_eq!(flow, Flow::Pause);
    let hit = reply(&a, 3);
    assert_eq!(hit.header("x-cache"), Some("HIT"));
    assert_eq!(
        String::from_utf8(hit.body.clone()).unwrap(),
        subgraph_answer(&[2, 3, 1])
    );
    assert_eq!(hit.header("age"), Some("0"));
    assert!(hit.header("cache-control").unwrap().starts_with("max-age="));
    use crate::effects::counters::Counter;
    let counted = |c| a.host.counted(c);
    // Served: 2 in the partial batch, 3 in the last; fetched: 2 forwarded, 1 partial.
    assert_eq!(counted(Counter::EntitiesServed), 5);
    assert_eq!(counted(Counter::EntitiesFetched), 3);
    assert_eq!(counted(Counter::EntityPartials), 1);
    a.assert_host_rules_kept();
}

#[test]
fn a_partial_fetch_that_fails_lets_the_gateway_s_request_go_upstream_whole() {
    let (a, _b) = envoy(r#"{"coalesce":false,"entities":{"ttl_seconds":60}}"#);
    forwarded(&a, 1, &[1]);
    let (mut x, flow) = a.post(2, &batch(&[1, 2]), &[]);
    assert_eq!(flow, Flow::Pause);
    let (token, _) = a.host.dispatched.borrow().last().cloned().unwrap();
    // The subgraph answers the rewritten request with a list of the wrong length.
    let odd = subgraph_answer(&[2, 2]);
    *a.host.callout.borrow_mut() = (json_headers(&[]), odd.as_bytes().to_vec());
    let returned = Returned {
        headers: Some(json_headers(&[])),
        body_size: odd.len(),
    };
    x.on_callout(&mut a.cx(), token, &returned);
    assert!(a.host.reply_to(2).is_none(), "not answered from a misfit");
    assert_eq!(
        *a.host.resumed.borrow(),
        vec![2],
        "the original request goes upstream"
    );
    // Its own answer is then split into entries as usual.
    *a.host.response_headers.borrow_mut() = json_headers(&[]);
    x.on_response_headers(&mut a.cx(), false);
    let body = subgraph_answer(&[1, 2]);
    *a.host.response_chunk.borrow_mut() = body.as_bytes().to_vec();
    x.on_response_body(&mut a.cx(), body.len(), true);
    let (_, flow) = a.post(3, &batch(&[2]), &[]);
    assert_eq!(flow, Flow::Pause);
    assert_eq!(reply(&a, 3).header("x-cache"), Some("HIT"));
}

#[test]
fn entities_with_errors_or_null_are_not_stored_and_other_requests_are_cached_whole() {
    let (a, _b) = envoy(r#"{"coalesce":false,"entities":{"ttl_seconds":60}}"#);
    let (mut x, _) = a.post(1, &batch(&[1, 2]), &[]);
    *a.host.response_headers.borrow_mut() = json_headers(&[]);
    x.on_response_headers(&mut a.cx(), false);
    let body = r#"{"data":{"_entities":[{"name":"P1"},null]},"errors":[{"message":"no","path":["_entities",1]}]}"#;
    *a.host.response_chunk.borrow_mut() = body.as_bytes().to_vec();
    x.on_response_body(&mut a.cx(), body.len(), true);
    // 1 stored, 2 not: a batch of 2 alone is forwarded.
    let (_, flow) = a.post(2, &batch(&[2]), &[]);
    assert_eq!(flow, Flow::Continue);
    let (_, flow) = a.post(3, &batch(&[1]), &[]);
    assert_eq!(flow, Flow::Pause);
    assert_eq!(reply(&a, 3).header("x-cache"), Some("HIT"));
    // A root field at the subgraph hop: the whole-response cache, as without entity mode.
    let products = r#"{"query":"{ products { id } }"}"#;
    let (mut x, flow) = a.post(4, products, &[]);
    assert_eq!(flow, Flow::Continue);
    *a.host.response_headers.borrow_mut() = json_headers(&[]);
    x.on_response_headers(&mut a.cx(), false);
    assert_eq!(a.host.header_set("x-cache").as_deref(), Some("MISS"));
    let body = r#"{"data":{"products":[]}}"#;
    *a.host.response_chunk.borrow_mut() = body.as_bytes().to_vec();
    x.on_response_body(&mut a.cx(), body.len(), true);
    assert!(a.hits(5, products));
}

#[test]
fn a_purge_by_entity_or_type_reaches_entity_entries() {
    let (a, _b) = envoy(
        r#"{"purge_path":"/purge","purge_token":"0123456789abcdef","coalesce":false,"entities":{"ttl_seconds":60}}"#,
    );
    forwarded(&a, 1, &[1, 2]);
    let purged = a.purge(
        2,
        "0123456789abcdef",
        r#"[{"kind":"entity","type":"Product","id":"1"}]"#,
    );
    assert_eq!(purged.status, 200);
    // 2 still an entry; 1 fetched again, alone.
    let (_, flow) = a.post(3, &batch(&[1, 2]), &[]);
    assert_eq!(flow, Flow::Pause);
    let (_, callout) = a.host.dispatched.borrow().last().cloned().unwrap();
    let sent: serde_json::Value = serde_json::from_slice(callout.body.as_ref().unwrap()).unwrap();
    assert_eq!(
        sent["variables"]["representations"],
        json!([{"__typename": "Product", "id": "1"}])
    );
    // A type purge: nothing of the type is served any more.
    a.purge(
        4,
        "0123456789abcdef",
        r#"[{"kind":"type","type":"Product"}]"#,
    );
    let (_, flow) = a.post(5, &batch(&[2]), &[]);
    assert_eq!(flow, Flow::Continue, "forwarded: nothing left");
}

/// Not a test: a loop to profile a partial batch natively (`valgrind --tool=callgrind`).
#[test]
#[ignore]
fn profile_partial_batches() {
    let (a, _b) = envoy(r#"{"coalesce":false,"entities":{"ttl_seconds":600}}"#);
    let ids: Vec<u32> = (1..=24).collect();
    forwarded(&a, 1, &ids);
    for round in 0..300u32 {
        let context = 10 + round;
        let mut asked = ids.clone();
        asked.push(1000 + round);
        asked.push(2000 + round);
        let (mut x, _) = a.post(context, &batch(&asked), &[]);
        let (token, _) = a.host.dispatched.borrow().last().cloned().unwrap();
        let answer = subgraph_answer(&[1000 + round, 2000 + round]);
        *a.host.callout.borrow_mut() = (json_headers(&[]), answer.as_bytes().to_vec());
        let returned = Returned {
            headers: Some(json_headers(&[])),
            body_size: answer.len(),
        };
        x.on_callout(&mut a.cx(), token, &returned);
        a.host.answered.borrow_mut().clear();
        a.host.dispatched.borrow_mut().clear();
    }
}

/// Both hops in one VM (envoy/federation.yaml): the gateway side's filter and the entity side's
/// share shared data, so a mutation's purge at the gateway side reaches the entity entries of
/// the objects it returned.
#[test]
fn a_mutation_at_the_gateway_side_purges_the_entities_it_returns() {
    use crate::effects::counters::Counter;
    use crate::effects::fake::FakeHost;
    let gateway_side = Node::new(1, "{}", FakeHost::new());
    let entity_side = Node::new(
        2,
        r#"{"coalesce":false,"entities":{"ttl_seconds":60}}"#,
        FakeHost::sibling(&gateway_side.host),
    );
    let users = |ids: &[u32]| {
        let reps: Vec<_> = ids
            .iter()
            .map(|i| json!({"__typename": "User", "id": i.to_string()}))
            .collect();
        let q = "query($representations:[_Any!]!){_entities(representations:$representations){...on User{name}}}";
        json!({"query": q, "variables": {"representations": reps}}).to_string()
    };
    let (mut x, flow) = entity_side.post(1, &users(&[1, 2]), &[]);
    assert_eq!(flow, Flow::Continue);
    *entity_side.host.response_headers.borrow_mut() = json_headers(&[]);
    x.on_response_headers(&mut entity_side.cx(), false);
    let body = r#"{"data":{"_entities":[{"name":"Ann"},{"name":"Bo"}]}}"#;
    *entity_side.host.response_chunk.borrow_mut() = body.as_bytes().to_vec();
    x.on_response_body(&mut entity_side.cx(), body.len(), true);

    let mutation =
        r#"{"query":"mutation { renameUser(id: 1, name: \"A\") { __typename id name } }"}"#;
    let answer = r#"{"data":{"renameUser":{"__typename":"User","id":"1","name":"A"}}}"#;
    super::scenarios::mutate(&gateway_side, 2, mutation, answer);
    assert_eq!(gateway_side.host.counted(Counter::MutationPurges), 1);
    gateway_side.host.advance(1);

    let (_, flow) = entity_side.post(3, &users(&[1, 2]), &[]);
    assert_eq!(flow, Flow::Pause, "2 is still an entry");
    let (_, callout) = entity_side
        .host
        .dispatched
        .borrow()
        .last()
        .cloned()
        .unwrap();
    let sent: serde_json::Value = serde_json::from_slice(callout.body.as_ref().unwrap()).unwrap();
    assert_eq!(
        sent["variables"]["representations"],
        json!([{"__typename": "User", "id": "1"}]),
        "the renamed user is fetched again"
    );
}
