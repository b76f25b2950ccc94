//! Two Envoys of a fleet, natively: each its own shared data (fake hosts that share nothing),
//! the L2 service played by the test, answer by answer. Checks who asks L2, what a hit, a lease,
//! a wait and every kind of failure lead to, and that purges travel through the purge log.

use super::scenarios::{answer, ok, Node, ANSWER, QUERY, USER, USER_ANSWER};
use crate::effects::counters::Counter;
use crate::effects::fake::{FakeHost, Reply};
use crate::effects::host::{Callout, Host};
use crate::worker::root::callouts::on_callout;
use base64::Engine;

const FLEET: &str = r#"{"debug_headers":true,"purge_path":"/purge","purge_token":"0123456789abcdef",
    "l2":{"cluster":"l2","wait_cluster":"l2_wait","wait_ms":1500,"fleet_key":"fleet-key-for-tests-0123456789abcdef"}}"#;
const EMPTY_LOG: &str = r#"{"last":"0","gap":false,"entries":[]}"#;

fn path(c: &Callout) -> &str {
    &c.headers[1].1
}

impl Node {
    fn last_call(&self) -> (u32, Callout) {
        self.host.dispatched.borrow().last().cloned().unwrap()
    }

    /// The L2 service answers call `token`.
    fn l2_answers(&self, token: u32, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        let mut all = vec![(":status".to_string(), status.to_string().into_bytes())];
        all.extend(
            headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())),
        );
        let n = all.len();
        *self.host.callout.borrow_mut() = (all, body.to_vec());
        self.host.begin_callback();
        on_callout(&mut self.cx(), token, n, body.len());
    }

    fn l2_resets(&self, token: u32) {
        self.host.begin_callback();
        on_callout(&mut self.cx(), token, 0, 0);
    }

    /// The timer's read of the purge log, answered with `page`.
    fn reads_log(&self, page: &str) {
        let (token, call) = self.feed_read();
        assert!(path(&call).starts_with("/v1/purges?after="), "{call:?}");
        assert_eq!(call.cluster, "l2_wait");
        self.l2_answers(
            token,
            200,
            &[("content-type", "application/json")],
            page.as_bytes(),
        );
    }

    /// A request's miss up to its L2 lookup; the lookup's token.
    fn asks(&self, context: u32, body: &str) -> u32 {
        self.post(context, body, &[]);
        self.deliver_queue();
        let (token, call) = self.last_call();
        assert_eq!(call.cluster, "l2");
        assert!(path(&call).starts_with("/v1/lookup?key="), "{call:?}");
        token
    }

    /// The origin fetch just sent, answered with `answer`; the reply of request `context`.
    fn origin_answers(&self, context: u32, answer: &str) -> Reply {
        let (token, call) = self.last_call();
        assert_eq!(call.cluster, "origin", "{call:?}");
        self.callout_answers(token, ok(answer));
        self.reply(context)
    }

    /// The tokens of the calls made to `to` (a path), oldest first.
    fn tokens_of(&self, to: &str) -> Vec<u32> {
        self.host
            .dispatched
            .borrow()
            .iter()
            .filter(|(_, c)| path(c) == to)
            .map(|(t, _)| *t)
            .collect()
    }

    fn l2_calls(&self) -> Vec<Callout> {
        self.host
            .dispatched
            .borrow()
            .iter()
            .map(|(_, c)| c.clone())
            .filter(|c| c.cluster.starts_with("l2"))
            .collect()
    }
}

fn node(id: u64) -> Node {
    let n = Node::new(id, FLEET, FakeHost::new());
    n.reads_log(EMPTY_LOG);
    n
}

/// Envoy `x` leads `body`'s key in L2 and stores the origin's answer there: the stored bytes.
fn led_and_stored(x: &Node, context: u32, body: &str, answer: &str) -> Vec<u8> {
    let lookup = x.asks(context, body);
    x.l2_answers(lookup, 200, &[("x-l2", "lead")], b"");
    let reply = x.origin_answers(context, answer);
    assert_eq!(reply.header("x-cache"), Some("MISS"));
    let (_, put) = x.last_call();
    assert_eq!(
        (put.cluster.as_str(), put.headers[0].1.as_str()),
        ("l2", "PUT")
    );
    assert!(path(&put).starts_with("/v1/store?key="));
    put.body.unwrap()
}

#[test]
fn what_one_envoy_fetched_is_a_hit_on_a_cold_one() {
    let (x, y) = (node(1), node(2));
    let stored = led_and_stored(&x, 1, QUERY, ANSWER);
    assert_eq!(x.host.counted(Counter::L2Leads), 1);
    assert_eq!(x.host.counted(Counter::L2Stores), 1);
    let lookup = y.asks(1, QUERY);
    let key = |n: &Node| {
        let calls = n.l2_calls();
        let lookup = calls
            .iter()
            .find(|c| path(c).starts_with("/v1/lookup?"))
            .unwrap();
        path(lookup)[..82].to_string()
    };
    assert_eq!(key(&x), key(&y), "one key for the fleet");
    y.l2_answers(
        lookup,
        200,
        &[("x-l2", "hit"), ("x-l2-ttl-ms", "59000")],
        &stored,
    );
    let hit = y.reply(1);
    assert_eq!(
        (hit.header("x-cache"), hit.header("x-cache-reason")),
        (Some("HIT"), Some("l2"))
    );
    assert_eq!(hit.body, ANSWER.as_bytes());
    assert_eq!(hit.header("age"), Some("0"));
    assert!(
        y.l2_calls().len() == y.host.dispatched.borrow().len(),
        "no origin fetch on y"
    );
    assert!(y.hits(2, QUERY), "and now it is in y's own L1");
    assert_eq!(y.host.counted(Counter::L2Hits), 1);
    x.assert_host_rules_kept();
    y.assert_host_rules_kept();
}

#[test]
fn another_envoy_s_fetch_is_waited_for_then_fetched_if_it_never_stores() {
    let (x, y) = (node(1), node(2));
    let stored = led_and_stored(&x, 1, QUERY, ANSWER);
    let lookup = y.asks(1, QUERY);
    y.l2_answers(lookup, 200, &[("x-l2", "busy")], b"");
    let (wait, call) = y.last_call();
    assert_eq!(
        call.cluster, "l2_wait",
        "waiting does not hold the lookups' connections"
    );
    assert!(path(&call).ends_with("&wait_ms=1500"));
    y.l2_answers(wait, 200, &[("x-l2", "hit")], &stored);
    let r = y.reply(1);
    assert_eq!(
        (r.header("x-cache"), r.header("x-cache-reason")),
        (Some("COALESCED"), Some("l2"))
    );
    assert_eq!(r.body, ANSWER.as_bytes());
    assert_eq!(y.host.counted(Counter::L2Waits), 1);
    // The leader elsewhere never stores: after the wait, this Envoy fetches and stores itself.
    let z = node(3);
    let lookup = z.asks(1, QUERY);
    z.l2_answers(lookup, 200, &[("x-l2", "busy")], b"");
    let (wait, _) = z.last_call();
    z.l2_answers(wait, 200, &[("x-l2", "busy")], b"");
    assert_eq!(z.origin_answers(1, ANSWER).header("x-cache"), Some("MISS"));
    let (_, put) = z.last_call();
    assert_eq!(
        put.headers[0].1, "PUT",
        "stored for the fleet, though not leased"
    );
    z.assert_host_rules_kept();
}

/// How the L2 service fails call `token` of a node.
type Failure = dyn Fn(&Node, u32);

#[test]
fn every_l2_failure_is_the_origin_s_answer_alone() {
    let failures: [(&str, &Failure); 5] = [
        ("redis down", &|n, t| {
            n.l2_answers(t, 503, &[], b"redis not connected")
        }),
        ("timeout", &|n, t| {
            n.l2_answers(t, 504, &[], b"upstream request timeout")
        }),
        ("reset", &|n, t| n.l2_resets(t)),
        ("not the service", &|n, t| {
            n.l2_answers(t, 200, &[], b"<html>")
        }),
        ("hit without a value", &|n, t| {
            n.l2_answers(t, 200, &[("x-l2", "hit")], b"")
        }),
    ];
    for (what, fail) in failures {
        let n = node(1);
        let lookup = n.asks(1, QUERY);
        fail(&n, lookup);
        let r = n.origin_answers(1, ANSWER);
        assert_eq!(
            (r.status, r.header("x-cache")),
            (200, Some("MISS")),
            "{what}"
        );
        assert_eq!(
            n.l2_calls().len(),
            4,
            "{what}: snapshot, feed, feed, lookup; nothing stored in L2"
        );
        assert_eq!(n.host.counted(Counter::L2Failures), 1, "{what}");
        n.assert_host_rules_kept();
    }
    // Envoy refuses the call at once (every L2 host ejected): straight to the origin.
    let n = node(1);
    n.host.refuse_clusters.borrow_mut().push("l2".into());
    n.post(1, QUERY, &[]);
    n.deliver_queue();
    assert_eq!(n.origin_answers(1, ANSWER).header("x-cache"), Some("MISS"));
    assert_eq!(n.host.counted(Counter::L2Failures), 1);
}

#[test]
fn an_oversized_value_never_enters_the_vm() {
    let n = Node::new(
        1,
        &FLEET.replacen("\"l2\":{", "\"max_entry_bytes\":1024,\"l2\":{", 1),
        FakeHost::new(),
    );
    n.reads_log(EMPTY_LOG);
    let lookup = n.asks(1, QUERY);
    let before = n.host.callout_body_reads.get();
    n.l2_answers(lookup, 200, &[("x-l2", "hit")], &[b'x'; 4096]);
    assert_eq!(n.host.callout_body_reads.get(), before);
    assert_eq!(n.origin_answers(1, ANSWER).header("x-cache"), Some("MISS"));
}

#[test]
fn a_lease_for_an_answer_that_is_not_stored_is_released() {
    let n = node(1);
    let lookup = n.asks(1, QUERY);
    n.l2_answers(lookup, 200, &[("x-l2", "lead")], b"");
    let (token, _) = n.last_call();
    n.callout_answers(token, answer(200, &[("cache-control", "no-store")], ANSWER));
    let (_, release) = n.last_call();
    assert!(
        path(&release).starts_with("/v1/release?key="),
        "{release:?}"
    );
    // Envoy refused the origin fetch: the lease goes on the next tick.
    let m = node(2);
    let lookup = m.asks(1, QUERY);
    m.host.refuse_clusters.borrow_mut().push("origin".into());
    m.l2_answers(lookup, 200, &[("x-l2", "lead")], b"");
    assert_eq!(m.reply(1).status, 503);
    m.tick();
    assert!(m
        .l2_calls()
        .iter()
        .any(|c| path(c).starts_with("/v1/release?")));
    m.assert_host_rules_kept();
}

#[test]
fn purges_travel_through_the_log_and_hits_wait_until_it_is_read() {
    let x = node(1);
    let entry = led_and_stored(&x, 1, USER, USER_ANSWER);
    // y has not read the log yet: L2's value could be purged already, so it is not served.
    let y = Node::new(2, FLEET, FakeHost::new());
    let lookup = y.asks(1, USER);
    y.l2_answers(lookup, 200, &[("x-l2", "hit")], &entry);
    assert_eq!(
        y.origin_answers(1, USER_ANSWER).header("x-cache"),
        Some("MISS")
    );
    // A purge on x goes to the log, sent by x's root.
    x.host.advance(5);
    let purged = x.purge(2, "0123456789abcdef", r#"[{"kind":"type","type":"User"}]"#);
    assert_eq!(purged.status, 202, "owed to the fleet");
    x.deliver_queue();
    let (_, publish) = x.last_call();
    assert_eq!(path(&publish), "/v1/marks");
    assert_eq!(x.host.counted(Counter::L2PurgesSent), 1);
    let batch = l2_proto::marks::MarksBatch::decode(&publish.body.unwrap()).unwrap();
    let data = base64::engine::general_purpose::STANDARD.encode(&batch.marks[0].sealed);
    let logged =
        format!(r#"{{"last":"7-0","gap":false,"entries":[{{"id":"7-0","data":"{data}","n":1}}]}}"#);
    // A cold z reads it, and no longer serves the entry stored before it.
    let z = Node::new(3, FLEET, FakeHost::new());
    z.reads_log(&logged);
    assert_eq!(z.host.counted(Counter::L2PurgesApplied), 1);
    let lookup = z.asks(1, USER);
    z.l2_answers(lookup, 200, &[("x-l2", "hit")], &entry);
    assert_eq!(
        z.origin_answers(1, USER_ANSWER).header("x-cache"),
        Some("MISS")
    );
    // What was fetched after the purge is served.
    x.host.advance(5);
    assert!(
        z.l2_calls()
            .iter()
            .any(|c| path(c).starts_with("/v1/purges?after=7-0&wait_ms=1000&gen=g0&n=1")),
        "the next read starts after the record, waiting"
    );
    let fresh = led_and_stored(&x, 3, USER, USER_ANSWER);
    let z2 = Node::new(4, FLEET, FakeHost::new());
    // Clocks agree (one running behind would take the entry as born before the purge).
    z2.host.advance(x.host.now_ms() - z2.host.now_ms());
    z2.reads_log(&logged);
    let lookup = z2.asks(1, USER);
    z2.l2_answers(lookup, 200, &[("x-l2", "hit")], &fresh);
    assert_eq!(z2.reply(1).header("x-cache"), Some("HIT"));
    // The log was trimmed past z3's place: z3 learns the purge from the snapshot instead, and
    // purges nothing else (what was fetched after it is still served).
    let z3 = Node::new(5, FLEET, FakeHost::new());
    z3.host.advance(x.host.now_ms() - z3.host.now_ms());
    z3.reads_log(r#"{"last":"0","gap":true,"entries":[]}"#);
    let (snapshot, call) = z3.last_call();
    assert_eq!(
        path(&call),
        "/v1/marks?cursor=0",
        "a gap is a snapshot read"
    );
    z3.l2_json(
        snapshot,
        &format!(
            r#"{{"gen":"g0","cursor":"0","tip":"7-0","n":1,"entries":[{{"id":"7-0","data":"{data}"}}]}}"#
        ),
    );
    let (tail, call) = z3.last_call();
    assert!(
        path(&call).starts_with("/v1/purges?after=7-0&wait_ms=0&gen=g0&n=1"),
        "{call:?}"
    );
    z3.l2_json(tail, EMPTY_LOG);
    let lookup = z3.asks(1, USER);
    z3.l2_answers(lookup, 200, &[("x-l2", "hit")], &entry);
    assert_eq!(
        z3.origin_answers(1, USER_ANSWER).header("x-cache"),
        Some("MISS"),
        "purged by the snapshot's mark"
    );
    assert_eq!(
        z3.worker.borrow().purges.all,
        crate::invalidate::marks::Marks::default(),
        "and nothing else"
    );
    assert_eq!(z3.host.counted(Counter::L2PurgeGaps), 1);
    for n in [&x, &y, &z, &z2, &z3] {
        n.assert_host_rules_kept();
    }
}

#[test]
fn a_failed_read_of_the_log_stops_l2_hits_until_the_next_one() {
    let x = node(1);
    let entry = led_and_stored(&x, 1, QUERY, ANSWER);
    let y = node(2);
    let (feed, _) = y.last_call();
    y.l2_answers(feed, 503, &[], b"redis not connected");
    let lookup = y.asks(1, QUERY);
    y.l2_answers(lookup, 200, &[("x-l2", "hit")], &entry);
    assert_eq!(y.origin_answers(1, ANSWER).header("x-cache"), Some("MISS"));
    y.tick();
    assert_eq!(
        y.l2_calls()
            .iter()
            .filter(|c| path(c).starts_with("/v1/purges"))
            .count(),
        2,
        "retried later, not at once"
    );
    y.host.advance(crate::worker::fleet::feed::RETRY_MS);
    y.reads_log(EMPTY_LOG);
    let lookup = y.asks(2, r#"{"query":"{ users { id name } }"}"#);
    y.l2_answers(lookup, 503, &[], b"");
    assert_eq!(y.origin_answers(2, ANSWER).header("x-cache"), Some("MISS"));
}

#[test]
fn another_envoy_s_purge_reaches_l1_even_where_nothing_else_purges() {
    let quiet = r#"{"mutation_invalidation":"off","l2":{"cluster":"l2","wait_cluster":"l2_wait","fleet_key":"fleet-key-for-tests-0123456789abcdef"}}"#;
    let n = Node::new(1, quiet, FakeHost::new());
    n.reads_log(EMPTY_LOG);
    led_and_stored(&n, 1, USER, USER_ANSWER);
    assert!(n.hits(2, USER));
    n.host.advance(5);
    let key = crate::config::FleetKey::new(b"fleet-key-for-tests-0123456789abcdef").unwrap();
    let mark = key.seal_mark(
        n.host.clock.get() * 1000,
        crate::invalidate::marks::Target::Tag(crate::invalidate::marks::tag_hash("type:User")),
        false,
    );
    let data = base64::engine::general_purpose::STANDARD.encode(&mark);
    let feed = n
        .host
        .dispatched
        .borrow()
        .iter()
        .rev()
        .find(|(_, c)| path(c).starts_with("/v1/purges?"))
        .map(|(t, _)| *t)
        .unwrap();
    n.l2_answers(
        feed,
        200,
        &[],
        format!(r#"{{"last":"9-0","gap":false,"entries":[{{"id":"9-0","data":"{data}"}}]}}"#)
            .as_bytes(),
    );
    assert!(!n.hits(3, USER), "purged by the log, hot copy included");
}

#[test]
fn a_key_whose_flight_slot_is_taken_still_asks_l2() {
    let one_slot = FLEET.replacen("\"l2\":{", "\"flight_slots\":1,\"l2\":{", 1);
    let x = Node::new(1, &one_slot, FakeHost::new());
    x.reads_log(EMPTY_LOG);
    let stored = led_and_stored(&x, 9, USER, USER_ANSWER);
    let y = Node::new(2, &one_slot, FakeHost::new());
    y.reads_log(EMPTY_LOG);
    // QUERY holds the only slot; USER's miss cannot take it, and asks L2 anyway.
    y.asks(1, QUERY);
    let lookup = y.asks(2, USER);
    y.post(3, USER, &[]);
    y.l2_answers(lookup, 200, &[("x-l2", "hit")], &stored);
    for ctx in [2, 3] {
        let r = y.reply(ctx);
        assert_eq!(
            (r.header("x-cache"), r.header("x-cache-reason")),
            (Some("HIT"), Some("l2"))
        );
        assert_eq!(r.body, USER_ANSWER.as_bytes());
    }
    let slot = y.plugin.flights.slot_name_at(0);
    let record = crate::effects::store::SharedStore::get(&y.host, &slot).unwrap();
    assert!(
        matches!(
            crate::coalesce::flights::FlightRecord::decode(&record),
            Some(crate::coalesce::flights::FlightRecord::InFlight { .. })
        ),
        "the other key's flight is untouched"
    );
    y.assert_host_rules_kept();
}

#[test]
fn a_purge_stays_owed_until_the_log_has_it() {
    let x = node(1);
    let answered = x.purge(1, "0123456789abcdef", r#"[{"kind":"all"}]"#);
    assert_eq!(
        (answered.status, answered.body),
        (202, br#"{"purged":1,"fleet":"owed","owed":1}"#.to_vec()),
        "the API says the fleet does not have it yet"
    );
    x.deliver_queue();
    let publishes = |n: &Node| n.tokens_of("/v1/marks");
    for sent in 1..=5 {
        let tokens = publishes(&x);
        assert_eq!(
            tokens.len(),
            sent,
            "one at a time, again after each failure"
        );
        x.l2_answers(*tokens.last().unwrap(), 424, &[], b"redis not connected");
        x.tick();
    }
    assert_eq!(crate::fleet::outbox::pending(&x.host), 1);
    let last = *publishes(&x).last().unwrap();
    x.l2_answers(
        last,
        200,
        &[("content-type", "application/json")],
        br#"{"gen":"g0","last":"1-0","n":1}"#,
    );
    assert_eq!(crate::fleet::outbox::pending(&x.host), 0, "the log has it");
    x.tick();
    assert_eq!(publishes(&x).len(), 6, "nothing is sent again");
    assert_eq!(x.host.counted(Counter::L2Failures), 5);
    x.assert_host_rules_kept();
}

#[test]
fn a_purge_that_waits_is_answered_once_the_log_holds_it_or_its_wait_is_over() {
    let x = node(1);
    let token = "0123456789abcdef";
    let purge = r#"[{"kind":"type","type":"User"}]"#;
    x.purge_at("/purge?wait_ms=2000", 1, token, purge);
    assert!(x.host.reply_to(1).is_none(), "held until the log has it");
    x.deliver_queue();
    let (sent, call) = x.last_call();
    assert_eq!(path(&call), "/v1/marks");
    x.l2_answers(sent, 200, &[], br#"{"gen":"g0","last":"1-0","n":1}"#);
    x.tick();
    let committed = x.reply(1);
    assert_eq!(
        (committed.status, committed.body),
        (200, br#"{"purged":1,"fleet":"committed"}"#.to_vec())
    );
    // The log cannot take it: answered `202` when the wait is over, still owed.
    x.purge_at("/purge?wait_ms=300", 2, token, purge);
    x.deliver_queue();
    let (sent, _) = x.last_call();
    x.l2_answers(sent, 424, &[], b"redis not connected");
    x.host.advance(200);
    x.tick();
    assert!(x.host.reply_to(2).is_none());
    x.host.advance(100);
    x.tick();
    let owed = x.reply(2);
    assert_eq!(
        (owed.status, owed.body),
        (202, br#"{"purged":1,"fleet":"owed","owed":1}"#.to_vec())
    );
    for bad in ["/purge?wait_ms=x", "/purge?wait_ms=10001"] {
        x.purge_at(bad, 3, token, purge);
        assert_eq!(x.reply(3).status, 400, "{bad}");
    }
    assert_eq!(
        crate::fleet::outbox::pending(&x.host),
        1,
        "a refused purge purges nothing"
    );
    x.assert_host_rules_kept();
}

#[test]
fn one_worker_follows_the_log_and_the_one_that_took_a_purge_sends_it() {
    let host = FakeHost::new();
    let x = Node::new(1, FLEET, host);
    x.reads_log(EMPTY_LOG);
    let sibling = Node::new(2, FLEET, FakeHost::sibling(&x.host));
    sibling.tick();
    let feeds = |n: &Node| {
        n.host
            .dispatched
            .borrow()
            .iter()
            .filter(|(_, c)| path(c).starts_with("/v1/purges"))
            .count()
    };
    assert_eq!(feeds(&sibling), 0, "x follows the log for both");
    let sends = |n: &Node| n.tokens_of("/v1/marks");
    // A purge through the sibling is sent by the sibling, at once; x sends nothing while that
    // call is out, nor after it came back.
    sibling.purge(1, "0123456789abcdef", r#"[{"kind":"all"}]"#);
    sibling.deliver_queue();
    assert_eq!(sends(&sibling).len(), 1);
    x.tick();
    assert!(sends(&x).is_empty(), "one call at a time for the Envoy");
    let token = sends(&sibling)[0];
    sibling.l2_json(token, r#"{"gen":"g0","last":"1-0","n":1}"#);
    x.tick();
    assert!(sends(&x).is_empty(), "nothing is owed any more");
    // x stops following (its VM is gone): the sibling takes over where it was, once the lease
    // has run out.
    x.host.advance(10_000);
    sibling.tick();
    assert_eq!(feeds(&sibling), 1, "the sibling follows now");
    let state = crate::fleet::follower::read(&x.host);
    assert_eq!(state.owner, sibling.worker.borrow().id);
}

/// Every read of the log fails for `ms` (the timer's retries answered `503`).
fn feed_fails_for(x: &Node, ms: u64) {
    for _ in 0..ms / 250 {
        x.host.advance(250);
        x.tick();
        let reading = x
            .worker
            .borrow()
            .l2
            .calls
            .iter()
            .find_map(|(t, (c, _))| matches!(c, crate::fleet::calls::Call::Feed).then_some(*t));
        if let Some(token) = reading {
            x.l2_answers(token, 503, &[], b"down");
        }
    }
}

#[test]
fn a_feed_failing_past_the_bound_purges_what_was_born_before_it_failed() {
    let x = node(1);
    led_and_stored(&x, 1, QUERY, ANSWER);
    x.post(2, QUERY, &[]);
    assert_eq!(x.reply(2).header("x-cache"), Some("HIT"));
    feed_fails_for(&x, 7_500);
    assert_eq!(
        x.host.counted(Counter::FeedFailSafe),
        1,
        "counted once per failure"
    );
    x.post(3, QUERY, &[]);
    assert!(
        x.host.reply_to(3).is_none(),
        "not answered from L1: it went on to L2 and the origin"
    );
    x.assert_host_rules_kept();
}

#[test]
fn in_a_long_outage_nothing_is_served_longer_than_the_bound_after_it_was_fetched() {
    let x = node(1);
    feed_fails_for(&x, 6_000);
    // Fetched during the outage, after the fail-safe first fired.
    led_and_stored(&x, 1, USER, USER_ANSWER);
    assert!(x.hits(2, USER));
    feed_fails_for(&x, 4_000);
    assert!(x.hits(3, USER), "younger than the bound");
    feed_fails_for(&x, 1_500);
    assert!(
        !x.hits(4, USER),
        "a purge elsewhere may have been missed since it was fetched"
    );
    assert_eq!(x.host.counted(Counter::FeedFailSafe), 1);
}

#[test]
fn a_plain_miss_stored_in_l1_goes_to_l2_too() {
    let one_waiter = FLEET.replacen("\"l2\":{", "\"max_waiters\":1,\"l2\":{", 1);
    let x = Node::new(1, &one_waiter, FakeHost::new());
    x.reads_log(EMPTY_LOG);
    x.asks(1, QUERY);
    // The flight has its one waiter: the next request goes upstream itself.
    let (mut plain, flow) = x.post(2, QUERY, &[]);
    assert_eq!(flow, crate::worker::exchange::Flow::Continue);
    *x.host.response_headers.borrow_mut() = vec![
        (":status".into(), b"200".to_vec()),
        ("content-type".into(), b"application/json".to_vec()),
    ];
    plain.on_response_headers(&mut x.cx(), false);
    *x.host.response_chunk.borrow_mut() = ANSWER.as_bytes().to_vec();
    plain.on_response_body(&mut x.cx(), ANSWER.len(), true);
    assert_eq!(x.host.counted(Counter::Stores), 1);
    x.deliver_queue();
    let (_, put) = x.last_call();
    assert_eq!(
        (put.cluster.as_str(), put.headers[0].1.as_str()),
        ("l2", "PUT")
    );
    assert!(path(&put).contains("&owner="), "{put:?}");
    assert_eq!(x.host.counted(Counter::L2Stores), 1);
    x.assert_host_rules_kept();
}
