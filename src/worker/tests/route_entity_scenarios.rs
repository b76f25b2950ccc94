//! Entity mode by route metadata (`entities::mode`): a route's `entities: true` turns it on on a
//! listener without `entities`, and `entities: false` off on one with it (its batches are then
//! cached as whole answers: a batch that shares entities with a stored one is not a partial hit).

use super::entity_scenarios::batch;
use super::scenarios::Node;
use crate::effects::fake::FakeHost;
use crate::worker::exchange::Flow;

const ROUTE: &str = "xds.route_metadata.filter_metadata.gc.entities";

/// A node whose route says `entities: <on>`.
fn node(config: &str, on: bool) -> Node {
    let node = Node::new(1, config, FakeHost::new());
    node.host
        .properties
        .borrow_mut()
        .insert(ROUTE.into(), vec![u8::from(on)]);
    node
}

/// A batch sent upstream as the gateway sent it, answered by the subgraph.
fn forwarded(node: &Node, context: u32, ids: &[u32]) {
    let (mut x, flow) = node.post(context, &batch(ids), &[]);
    assert_eq!(flow, Flow::Continue, "sent upstream");
    *node.host.response_headers.borrow_mut() = vec![
        (":status".into(), b"200".to_vec()),
        ("content-type".into(), b"application/json".to_vec()),
    ];
    x.on_response_headers(&mut node.cx(), false);
    let list: Vec<String> = ids
        .iter()
        .map(|i| format!(r#"{{"name":"P{i}"}}"#))
        .collect();
    let body = format!(r#"{{"data":{{"_entities":[{}]}}}}"#, list.join(","));
    *node.host.response_chunk.borrow_mut() = body.as_bytes().to_vec();
    x.on_response_body(&mut node.cx(), body.len(), true);
}

#[test]
fn a_route_turns_entity_mode_on_where_the_listener_has_none() {
    let a = node(
        r#"{"route_metadata":"gc","coalesce":false,"debug_headers":true}"#,
        true,
    );
    forwarded(&a, 1, &[1, 2]);
    let (_, flow) = a.post(2, &batch(&[2, 1]), &[]);
    assert_eq!(flow, Flow::Pause);
    let hit = a.reply(2);
    assert_eq!(hit.header("x-cache"), Some("HIT"));
    assert_eq!(hit.header("x-cache-entities"), Some("hit=2 fetched=0"));
    let (_, flow) = a.post(3, &batch(&[3, 1]), &[]);
    assert_eq!(flow, Flow::Pause, "1 from its entry, 3 fetched alone");
    assert_eq!(a.host.dispatched.borrow().len(), 1);
    a.assert_host_rules_kept();
}

#[test]
fn a_route_turns_entity_mode_off_on_a_listener_with_entities() {
    let config = r#"{"route_metadata":"gc","coalesce":false,"entities":{"ttl_seconds":60}}"#;
    let a = node(config, false);
    forwarded(&a, 1, &[1, 2]);
    let (_, flow) = a.post(2, &batch(&[1, 2]), &[]);
    assert_eq!(flow, Flow::Pause, "the same batch: a whole answer's hit");
    assert_eq!(a.reply(2).header("x-cache"), Some("HIT"));
    let (_, flow) = a.post(3, &batch(&[3, 1]), &[]);
    assert_eq!(
        flow,
        Flow::Continue,
        "another batch is another whole answer"
    );
    assert!(a.host.dispatched.borrow().is_empty(), "no partial fetch");
    // The same listener, the route saying nothing: entity mode.
    a.host.properties.borrow_mut().remove(ROUTE);
    forwarded(&a, 4, &[5, 6]);
    let (_, flow) = a.post(5, &batch(&[6, 7]), &[]);
    assert_eq!(flow, Flow::Pause, "6 from its entry, 7 fetched alone");
    assert_eq!(a.host.dispatched.borrow().len(), 1);
}
