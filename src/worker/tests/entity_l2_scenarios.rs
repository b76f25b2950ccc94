//! Entity mode with the fleet's L2, two Envoys natively (fake hosts that share nothing; the L2
//! service played by the test): what one Envoy fetched goes to L2 in one mstore, another Envoy
//! asks all it lacks in one mget, and only what L2 vouches for is served; any failure is "L2 had
//! nothing".

use super::entity_scenarios::batch as batch_of;
use super::scenarios::Node;
use crate::effects::counters::Counter;
use crate::effects::fake::FakeHost;
use crate::effects::host::Callout;
use crate::worker::callout::Returned;
use crate::worker::exchange::{Exchange, Flow};
use l2_proto::batch::{self, decode_mget, decode_mstore, encode_mget_answer, Key};
use serde_json::json;
use std::collections::HashMap;

const FLEET: &str = r#"{"debug_headers":true,"entities":{"ttl_seconds":60},
    "l2":{"cluster":"l2","wait_cluster":"l2_wait","fleet_key":"fleet-key-for-tests-0123456789abcdef"}}"#;
const OTHER_FLEET: &str = r#"{"debug_headers":true,"entities":{"ttl_seconds":60},
    "l2":{"cluster":"l2","wait_cluster":"l2_wait","fleet_key":"another-fleet-key-0123456789abcdef"}}"#;
const EMPTY_LOG: &str = r#"{"last":"0","gap":false,"entries":[]}"#;

fn subgraph_answer(ids: &[u32]) -> String {
    let list: Vec<String> = ids
        .iter()
        .map(|i| format!(r#"{{"name":"P{i}"}}"#))
        .collect();
    format!(r#"{{"data":{{"_entities":[{}]}}}}"#, list.join(","))
}

fn headers(status: u16, extra: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
    let mut h = vec![(":status".to_string(), status.to_string().into_bytes())];
    h.extend(
        extra
            .iter()
            .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())),
    );
    h
}

fn json_200() -> Vec<(String, Vec<u8>)> {
    headers(
        200,
        &[
            ("content-type", "application/json"),
            ("cache-control", "max-age=120"),
        ],
    )
}

fn path(c: &Callout) -> &str {
    &c.headers[1].1
}

/// A sealed value per L2 name, as the service would keep them.
type L2Values = HashMap<Key, Vec<u8>>;

impl Node {
    /// A member of the fleet that has read the purge log to its end (L2 values are trusted).
    fn member(id: u64, config: &str) -> Node {
        let n = Node::new(id, config, FakeHost::new());
        let (token, call) = n.feed_read();
        assert!(path(&call).starts_with("/v1/purges?"), "{call:?}");
        n.l2_json(token, EMPTY_LOG);
        n
    }

    fn calls_to(&self, prefix: &str) -> Vec<(u32, Callout)> {
        self.host
            .dispatched
            .borrow()
            .iter()
            .filter(|(_, c)| path(c).starts_with(prefix))
            .cloned()
            .collect()
    }

    /// The request's own callout `token` comes back with `status` and `body` (`None`: reset).
    fn request_callout(&self, x: &mut Exchange, token: u32, answer: Option<(u16, &[u8])>) {
        let returned = match answer {
            Some((status, body)) => {
                let h = match status {
                    200 => headers(200, &[("content-type", "application/octet-stream")]),
                    s => headers(s, &[]),
                };
                *self.host.callout.borrow_mut() = (h.clone(), body.to_vec());
                Returned {
                    headers: Some(h),
                    body_size: body.len(),
                }
            }
            None => Returned {
                headers: None,
                body_size: 0,
            },
        };
        self.host.begin_callback();
        x.on_callout(&mut self.cx(), token, &returned);
    }

    /// A batch forwarded to the subgraph and answered; its entities are stored, and what went to
    /// L2 (one mstore) is returned.
    fn fetches(&self, context: u32, ids: &[u32]) -> L2Values {
        let (mut x, flow) = self.post(context, &batch_of(ids), &[]);
        if flow == Flow::Pause {
            // Asked L2 first: nothing there.
            let (token, call) = self.calls_to("/v1/mget").last().cloned().unwrap();
            let asked = decode_mget(call.body.as_ref().unwrap()).unwrap();
            let none: Vec<Option<&[u8]>> = asked.iter().map(|_| None).collect();
            let answer = encode_mget_answer(&none).unwrap();
            self.request_callout(&mut x, token, Some((200, &answer)));
        }
        *self.host.response_headers.borrow_mut() = json_200();
        x.on_response_headers(&mut self.cx(), false);
        let body = subgraph_answer(ids);
        *self.host.response_chunk.borrow_mut() = body.as_bytes().to_vec();
        x.on_response_body(&mut self.cx(), body.len(), true);
        let before = self.calls_to("/v1/mstore").len();
        self.deliver_queue();
        let puts = self.calls_to("/v1/mstore");
        assert_eq!(puts.len(), before + 1, "one mstore for the batch");
        let (_, put) = puts.last().cloned().unwrap();
        assert_eq!(put.headers[0].1, "PUT");
        decode_mstore(put.body.as_ref().unwrap())
            .unwrap()
            .into_iter()
            .map(|i| (i.key, i.value.to_vec()))
            .collect()
    }

    /// A batch that asks L2 (one mget), answered from `stored`; its exchange and the mget's keys.
    fn asks_l2(&self, context: u32, ids: &[u32], stored: &L2Values) -> (Exchange, usize) {
        let mgets = self.calls_to("/v1/mget").len();
        let (mut x, flow) = self.post(context, &batch_of(ids), &[]);
        assert_eq!(flow, Flow::Pause, "held for L2");
        let calls = self.calls_to("/v1/mget");
        assert_eq!(calls.len(), mgets + 1, "one mget for the whole batch");
        let (token, call) = calls.last().cloned().unwrap();
        assert_eq!(
            (call.cluster.as_str(), call.headers[0].1.as_str()),
            ("l2", "POST")
        );
        let asked = decode_mget(call.body.as_ref().unwrap()).unwrap();
        let values: Vec<Option<&[u8]>> = asked
            .iter()
            .map(|k| stored.get(k).map(|v| &v[..]))
            .collect();
        let answer = encode_mget_answer(&values).unwrap();
        self.request_callout(&mut x, token, Some((200, &answer)));
        (x, asked.len())
    }
}

#[test]
fn what_one_envoy_fetched_is_answered_by_another_from_one_l2_call() {
    let (a, b) = (Node::member(1, FLEET), Node::member(2, FLEET));
    let ids: Vec<u32> = (1..=20).collect();
    let stored = a.fetches(1, &ids);
    assert_eq!(stored.len(), 20, "every entity in the one mstore");
    assert_eq!(a.host.counted(Counter::L2Stores), 20);

    let (_, asked) = b.asks_l2(1, &ids, &stored);
    assert_eq!(asked, 20);
    let hit = b.reply(1);
    assert_eq!(hit.header("x-cache"), Some("HIT"));
    assert_eq!(hit.header("x-cache-entities"), Some("hit=20 fetched=0"));
    assert_eq!(String::from_utf8(hit.body).unwrap(), subgraph_answer(&ids));
    assert_eq!(b.host.counted(Counter::L2Hits), 20);
    assert!(
        b.calls_to("/")
            .iter()
            .all(|(_, c)| c.cluster.starts_with("l2")),
        "no subgraph call"
    );

    // Now in B's L1: no L2 call at all.
    let (_, flow) = b.post(2, &batch_of(&[3, 1]), &[]);
    assert_eq!(flow, Flow::Pause);
    assert_eq!(b.reply(2).header("x-cache"), Some("HIT"));
    assert_eq!(b.calls_to("/v1/mget").len(), 1);
    b.assert_host_rules_kept();
}

#[test]
fn l2_fills_part_of_a_batch_and_only_the_rest_is_fetched_then_stored() {
    let (a, b) = (Node::member(1, FLEET), Node::member(2, FLEET));
    let stored = a.fetches(1, &[1, 2]);
    let (mut x, asked) = b.asks_l2(1, &[1, 21, 2, 21], &stored);
    assert_eq!(asked, 3, "each entity once");
    let (token, fetch) = b.calls_to("/graphql").last().cloned().unwrap();
    let sent: serde_json::Value = serde_json::from_slice(fetch.body.as_ref().unwrap()).unwrap();
    assert_eq!(
        sent["variables"]["representations"],
        json!([{"__typename": "Product", "id": "21"}])
    );
    let answer = subgraph_answer(&[21]);
    *b.host.callout.borrow_mut() = (json_200(), answer.as_bytes().to_vec());
    let returned = Returned {
        headers: Some(json_200()),
        body_size: answer.len(),
    };
    b.host.begin_callback();
    x.on_callout(&mut b.cx(), token, &returned);
    let partial = b.reply(1);
    assert_eq!(partial.header("x-cache"), Some("PARTIAL"));
    assert_eq!(partial.header("x-cache-entities"), Some("hit=2 fetched=1"));
    assert_eq!(
        String::from_utf8(partial.body).unwrap(),
        subgraph_answer(&[1, 21, 2, 21])
    );
    b.deliver_queue();
    let puts = b.calls_to("/v1/mstore");
    assert_eq!(puts.len(), 1, "the fetched entity goes to L2");
    let items = batch::decode_mstore(puts[0].1.body.as_ref().unwrap()).unwrap();
    assert_eq!(items.len(), 1);
    b.assert_host_rules_kept();
}

#[test]
fn an_l2_that_fails_is_an_l2_that_had_nothing() {
    let b = Node::member(2, FLEET);
    let answers: [Option<(u16, &[u8])>; 4] = [
        None,
        Some((424, b"redis timeout")),
        Some((200, b"\x01\x05\x00")),
        Some((200, b"not the contract")),
    ];
    for (i, answer) in answers.into_iter().enumerate() {
        let context = 10 + i as u32;
        let first = 1 + 2 * i as u32;
        let (mut x, flow) = b.post(context, &batch_of(&[first, first + 1]), &[]);
        assert_eq!(flow, Flow::Pause);
        let (token, _) = b.calls_to("/v1/mget").last().cloned().unwrap();
        b.request_callout(&mut x, token, answer);
        assert!(
            b.host.reply_to(context).is_none(),
            "{answer:?}: not answered"
        );
        // None found: the batch's own flight, fetched by the root as if there were no L2.
        b.deliver_queue();
        assert_eq!(
            b.calls_to("/graphql").len(),
            i + 1,
            "{answer:?}: goes upstream"
        );
    }
    assert_eq!(b.host.counted(Counter::L2Failures), 4);
    assert_eq!(b.host.counted(Counter::L2Hits), 0);
}

#[test]
fn a_value_l2_cannot_vouch_for_is_not_served() {
    let (a, b) = (Node::member(1, FLEET), Node::member(2, FLEET));
    let stranger = Node::member(3, OTHER_FLEET);
    let genuine = a.fetches(1, &[1]);
    let entry_1 = genuine.values().next().unwrap().clone();
    // Sealed with another fleet's key.
    let forged_2 = stranger.fetches(1, &[2]).into_values().next().unwrap();
    let (mut x, flow) = b.post(1, &batch_of(&[1, 2, 3]), &[]);
    assert_eq!(flow, Flow::Pause);
    let (token, call) = b.calls_to("/v1/mget").last().cloned().unwrap();
    let asked = decode_mget(call.body.as_ref().unwrap()).unwrap().len();
    // 1: genuine; 2: another fleet's seal; 3: entity 1's genuine value under 3's name.
    let answer = [Some(&entry_1[..]), Some(&forged_2[..]), Some(&entry_1[..])];
    let body = encode_mget_answer(&answer).unwrap();
    b.request_callout(&mut x, token, Some((200, &body)));
    assert_eq!(asked, 3);
    assert_eq!(b.host.counted(Counter::L2Hits), 1);
    assert_eq!(b.host.counted(Counter::L2Rejected), 2);
    // 1 found, 2 and 3 fetched by a partial fetch of their own.
    let (_, fetch) = b.calls_to("/graphql").last().cloned().unwrap();
    let sent: serde_json::Value = serde_json::from_slice(fetch.body.as_ref().unwrap()).unwrap();
    assert_eq!(
        sent["variables"]["representations"],
        json!([{"__typename": "Product", "id": "2"}, {"__typename": "Product", "id": "3"}])
    );
}

#[test]
fn without_the_purge_log_read_l2_is_not_asked() {
    let b = Node::new(2, FLEET, FakeHost::new());
    b.post(1, &batch_of(&[1, 2]), &[]);
    b.deliver_queue();
    assert!(b.calls_to("/v1/mget").is_empty());
    assert_eq!(b.calls_to("/graphql").len(), 1, "fetched at once");
}

#[test]
fn an_entity_purged_here_is_not_taken_from_l2() {
    let purging = r#"{"debug_headers":true,"entities":{"ttl_seconds":60},
        "purge_path":"/purge","purge_token":"0123456789abcdef",
        "l2":{"cluster":"l2","wait_cluster":"l2_wait","fleet_key":"fleet-key-for-tests-0123456789abcdef"}}"#;
    let (a, b) = (Node::member(1, FLEET), Node::member(2, purging));
    let stored = a.fetches(1, &[1, 2]);
    b.host.advance(5);
    let purged = b.purge(
        1,
        "0123456789abcdef",
        r#"[{"kind":"entity","type":"Product","id":"1"}]"#,
    );
    assert_eq!(purged.status, 202, "owed to the fleet");
    b.host.advance(5);
    let (_, asked) = b.asks_l2(2, &[1, 2], &stored);
    assert_eq!(asked, 2);
    assert_eq!(
        b.host.counted(Counter::L2Hits),
        1,
        "2 only: 1 was purged after it was born"
    );
    let (_, fetch) = b.calls_to("/graphql").last().cloned().unwrap();
    let sent: serde_json::Value = serde_json::from_slice(fetch.body.as_ref().unwrap()).unwrap();
    assert_eq!(
        sent["variables"]["representations"],
        json!([{"__typename": "Product", "id": "1"}])
    );
}

/// Coalescing on (the default): a batch L2 has none of joins the flight of identical batches
/// after the mget; the root's fetch is split into entities, which go to L2 in one mstore.
#[test]
fn a_batch_l2_lacks_joins_the_flight_and_the_root_s_fetch_goes_to_l2() {
    let b = Node::member(2, FLEET);
    let (mut x, flow) = b.post(1, &batch_of(&[1, 2]), &[]);
    assert_eq!(flow, Flow::Pause);
    let (token, call) = b.calls_to("/v1/mget").last().cloned().unwrap();
    assert_eq!(decode_mget(call.body.as_ref().unwrap()).unwrap().len(), 2);
    let none = encode_mget_answer(&[None, None]).unwrap();
    b.request_callout(&mut x, token, Some((200, &none)));
    assert!(
        b.host.resumed.borrow().is_empty(),
        "waits for the shared fetch"
    );
    b.deliver_queue();
    let (fetch, _) = b.calls_to("/graphql").last().cloned().unwrap();
    let answer = subgraph_answer(&[1, 2]);
    let h = [
        ("content-type", "application/json"),
        ("cache-control", "max-age=120"),
    ];
    b.callout_answers(fetch, super::scenarios::answer(200, &h, &answer));
    b.host.begin_callback();
    let reply = b.host.reply_to(1).unwrap();
    assert_eq!(reply.body, answer.as_bytes());
    b.tick();
    let puts = b.calls_to("/v1/mstore");
    assert_eq!(puts.len(), 1, "one mstore, sent by the root");
    let items = decode_mstore(puts[0].1.body.as_ref().unwrap()).unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(b.host.counted(Counter::L2Stores), 2);
}

#[test]
fn an_entity_from_l2_keeps_its_type_s_stale_window() {
    let config = r#"{"debug_headers":true,
        "entities":{"ttl_seconds":60,"stale_while_revalidate_seconds":30},
        "l2":{"cluster":"l2","wait_cluster":"l2_wait","fleet_key":"fleet-key-for-tests-0123456789abcdef"}}"#;
    let (a, b) = (Node::member(1, config), Node::member(2, config));
    let stored = a.fetches(1, &[1, 2]);
    b.asks_l2(1, &[1, 2], &stored);
    assert_eq!(b.reply(1).header("x-cache"), Some("HIT"));
    // Past its TTL (the subgraph said max-age=120; the type says 60), within its window: served
    // at once from B's L1 while one refresh runs, as on the Envoy that fetched it.
    b.host.advance(61_000);
    let (_, flow) = b.post(2, &batch_of(&[1, 2]), &[]);
    assert_eq!(flow, Flow::Pause);
    let stale = b.reply(2);
    assert_eq!(stale.header("x-cache"), Some("STALE"));
    assert_eq!(
        String::from_utf8(stale.body).unwrap(),
        subgraph_answer(&[1, 2])
    );
}
