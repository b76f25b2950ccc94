//! Whole requests through one or two workers of one Envoy, natively: every callback the host
//! adapter would make, against fake hosts that share shared data, queues and a clock. The races
//! Envoy can produce (lost wake-ups, resets, refused callouts, leaders that vanish, leftovers of a
//! reloaded VM, clients that leave) are played here step by step.

use crate::coalesce::flights::FlightRecord;
use crate::effects::counters::Counter;
use crate::effects::fake::{FakeHost, Reply};
use crate::effects::host::LogLevel;
use crate::effects::store::SharedStore;
use crate::worker::ctx::Ctx;
use crate::worker::entities::plug::Entities;
use crate::worker::exchange::{Exchange, Flow};
use crate::worker::flights::shared_fetch::{on_fetch_response, FetchResult};
use crate::worker::root::configure::configure;
use crate::worker::root::queue::on_messages;
use crate::worker::root::tick::{on_tick, LOST_WAKEUP_MS};
use crate::worker::state::{Plugin, Worker};
use std::cell::RefCell;
use std::rc::Rc;

pub(super) const QUERY: &str = r#"{"query":"{ users { id } }"}"#;
pub(super) const ANSWER: &str = r#"{"data":{"users":[{"id":"1"}]}}"#;

/// One worker: its state, as the root and HTTP contexts share it, and its host.
pub(super) struct Node {
    pub(super) plugin: Plugin,
    pub(super) worker: Rc<RefCell<Worker>>,
    pub(super) host: FakeHost,
}

/// The purge snapshot of a fleet that purged nothing yet.
pub(super) const EMPTY_SNAPSHOT: &str = r#"{"gen":"g0","cursor":"0","tip":"0","n":0,"entries":[]}"#;

impl Node {
    pub(super) fn new(id: u64, config: &str, host: FakeHost) -> Node {
        let worker = Rc::new(RefCell::new(Worker::new(id, &Plugin::default().config)));
        let plugin = configure(config.as_bytes(), &worker, &host).unwrap();
        let probe = Rc::clone(&worker);
        *host.reentry_check.borrow_mut() = Some(Box::new(move || probe.try_borrow_mut().is_ok()));
        host.properties
            .borrow_mut()
            .insert("xds.cluster_name".into(), b"origin".to_vec());
        Node {
            plugin,
            worker,
            host,
        }
    }

    pub(super) fn cx(&self) -> Ctx<'_, FakeHost> {
        Ctx::new(&self.plugin, &self.worker, &self.host)
    }

    /// A POST of `body` as request `context`, through its header and body callbacks.
    pub(super) fn post(
        &self,
        context: u32,
        body: &str,
        extra: &[(&str, &str)],
    ) -> (Exchange, Flow) {
        self.host.context.set(context);
        let mut headers = vec![
            (":method", "POST"),
            (":path", "/graphql"),
            (":authority", "api.test"),
            ("content-type", "application/json"),
        ];
        headers.extend_from_slice(extra);
        *self.host.request_headers.borrow_mut() = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
            .collect();
        *self.host.request_body.borrow_mut() = body.as_bytes().to_vec();
        let mut x = Exchange::new(context);
        assert_eq!(x.on_request_headers(&mut self.cx(), false), Flow::Pause);
        let flow = x.on_request_body(&mut self.cx(), body.len(), true);
        (x, flow)
    }

    /// The root's `on_queue_ready`: everything on this worker's queue.
    pub(super) fn deliver_queue(&self) {
        let queue = self.worker.borrow().queue.unwrap();
        let messages = self.host.queues.drain(queue);
        self.host.begin_callback();
        on_messages(&mut self.cx(), &messages);
    }

    pub(super) fn drop_queue(&self) {
        let queue = self.worker.borrow().queue.unwrap();
        self.host.queues.drain(queue);
    }

    pub(super) fn callout_answers(&self, token: u32, result: FetchResult) {
        self.host.begin_callback();
        on_fetch_response(&mut self.cx(), &Entities, token, result);
    }

    pub(super) fn tick(&self) {
        self.host.begin_callback();
        on_tick(&mut self.cx());
    }

    /// The L2 service answers call `token` with `200` and a JSON `body`.
    pub(super) fn l2_json(&self, token: u32, body: &str) {
        let h = vec![
            (":status".to_string(), b"200".to_vec()),
            ("content-type".to_string(), b"application/json".to_vec()),
        ];
        *self.host.callout.borrow_mut() = (h.clone(), body.as_bytes().to_vec());
        self.host.begin_callback();
        crate::worker::root::callouts::on_callout(&mut self.cx(), token, h.len(), body.len());
    }

    /// The follower's next read of the purge log, after a tick; a new follower first learns the
    /// purge snapshot, here an empty one.
    pub(super) fn feed_read(&self) -> (u32, crate::effects::host::Callout) {
        self.tick();
        let last = || self.host.dispatched.borrow().last().cloned().unwrap();
        let (token, call) = last();
        if call.headers[1].1.starts_with("/v1/marks?") {
            self.l2_json(token, EMPTY_SNAPSHOT);
        }
        last()
    }

    pub(super) fn tokens(&self) -> Vec<u32> {
        self.host
            .dispatched
            .borrow()
            .iter()
            .map(|(t, _)| *t)
            .collect()
    }

    pub(super) fn reply(&self, context: u32) -> Reply {
        self.host
            .reply_to(context)
            .unwrap_or_else(|| panic!("request {context} was not answered"))
    }

    /// The host rules (see `effects::host`) held for everything this worker did.
    pub(super) fn assert_host_rules_kept(&self) {
        assert_eq!(
            self.host.reentry_violations.get(),
            0,
            "borrow held across a host call"
        );
        assert!(
            !self.host.answered_before_dispatch.get(),
            "a callout was dispatched after an answer in the same callback"
        );
    }
}

/// Two workers of one Envoy.
pub(super) fn envoy(config: &str) -> (Node, Node) {
    let a = FakeHost::new();
    let b = FakeHost::sibling(&a);
    (Node::new(1, config, a), Node::new(2, config, b))
}

pub(super) fn ok(body: &str) -> FetchResult {
    answer(200, &[("content-type", "application/json")], body)
}

pub(super) fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> FetchResult {
    let status = status.to_string();
    let mut all = vec![(":status".to_string(), status.into_bytes())];
    all.extend(
        headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())),
    );
    FetchResult::Answer {
        headers: all,
        body: body.as_bytes().to_vec(),
    }
}

/// Worker A leads request 1 with followers 2 and 3; worker B follows with 11 and 12.
fn one_flight_on_two_workers(a: &Node, b: &Node) -> u32 {
    assert_eq!(a.post(1, QUERY, &[]).1, Flow::Pause);
    assert_eq!(a.post(2, QUERY, &[]).1, Flow::Pause);
    assert_eq!(b.post(11, QUERY, &[]).1, Flow::Pause);
    assert_eq!(a.post(3, QUERY, &[]).1, Flow::Pause);
    assert_eq!(b.post(12, QUERY, &[]).1, Flow::Pause);
    a.deliver_queue();
    let tokens = a.tokens();
    assert_eq!(tokens.len(), 1, "one fetch for the whole Envoy");
    assert!(b.tokens().is_empty());
    tokens[0]
}

#[test]
fn an_operation_asked_with_new_variables_is_read_once_and_keyed_by_them() {
    let (a, _b) = envoy("{}");
    let query = "query Q($id: ID!) { user(id: $id) { name } }";
    for (context, id) in [(1, "1"), (2, "2"), (3, "1")] {
        let body = serde_json::json!({"query": query, "variables": {"id": id}}).to_string();
        assert_eq!(a.post(context, &body, &[]).1, Flow::Pause);
    }
    a.deliver_queue();
    assert_eq!(
        a.tokens().len(),
        2,
        "one fetch for each variable, the third joined the first"
    );
    assert_eq!(a.worker.borrow().operations_read.len(), 1);
    let other = r#"{"query":"query Q($id: ID!) { user(id: $id) { id } }","variables":{"id":"1"}}"#;
    a.post(9, other, &[]);
    assert_eq!(a.worker.borrow().operations_read.len(), 2);
}

#[test]
fn one_fetch_answers_every_waiter_on_both_workers_then_hits() {
    let (a, b) = envoy(r#"{"debug_headers":true}"#);
    let token = one_flight_on_two_workers(&a, &b);
    assert_eq!(a.host.counted(Counter::Leaders), 1);
    a.callout_answers(token, ok(ANSWER));
    assert_eq!(a.reply(1).header("x-cache"), Some("MISS"));
    for ctx in [2, 3] {
        assert_eq!(a.reply(ctx).header("x-cache"), Some("COALESCED"));
        assert_eq!(a.reply(ctx).body, ANSWER.as_bytes());
    }
    assert!(
        b.host.answered.borrow().is_empty(),
        "B hears of it by queue"
    );
    b.deliver_queue();
    for ctx in [11, 12] {
        assert_eq!(b.reply(ctx).header("x-cache"), Some("COALESCED"));
        assert_eq!(b.reply(ctx).body, ANSWER.as_bytes());
    }
    assert_eq!(b.host.counted(Counter::LateWakeups), 0);
    assert_eq!(a.host.counted(Counter::Stores), 1);
    // The next identical request, on the other worker, is a hit from shared data.
    let (_, flow) = b.post(13, QUERY, &[]);
    assert_eq!(flow, Flow::Pause);
    assert_eq!(b.reply(13).header("x-cache"), Some("HIT"));
    assert_eq!(b.reply(13).header("age"), Some("0"));
    assert_eq!(b.host.counted(Counter::Hits), 1);
    a.assert_host_rules_kept();
    b.assert_host_rules_kept();
}

#[test]
fn answered_waiters_keep_their_local_reply_and_released_ones_are_labelled() {
    let (a, _b) = envoy(r#"{"debug_headers":true}"#);
    let (mut leader, _) = a.post(1, QUERY, &[]);
    let (mut follower, _) = a.post(2, QUERY, &[]);
    a.deliver_queue();
    let token = a.tokens()[0];
    let no_store = [
        ("content-type", "application/json"),
        ("cache-control", "no-store"),
    ];
    a.callout_answers(token, answer(200, &no_store, ANSWER));
    // Envoy now runs each answered request's response callbacks.
    a.host.headers_set.borrow_mut().clear();
    assert_eq!(
        leader.on_response_headers(&mut a.cx(), false),
        Flow::Continue
    );
    assert_eq!(
        follower.on_response_headers(&mut a.cx(), false),
        Flow::Continue
    );
    assert!(
        a.host.headers_set.borrow().is_empty(),
        "a local reply is not labelled twice"
    );
    assert_eq!(
        a.reply(1).header("x-cache-reason"),
        Some("no-store"),
        "the leader is told why nothing was stored"
    );
}

#[test]
fn a_lost_wake_up_is_caught_by_the_timer() {
    let (a, b) = envoy("{}");
    let token = one_flight_on_two_workers(&a, &b);
    a.callout_answers(token, ok(ANSWER));
    b.drop_queue();
    b.tick();
    assert!(
        b.host.answered.borrow().is_empty(),
        "too early to suspect a loss"
    );
    b.host.advance(LOST_WAKEUP_MS);
    b.tick();
    assert_eq!(b.reply(11).header("x-cache"), Some("COALESCED"));
    assert_eq!(b.reply(12).body, ANSWER.as_bytes());
    assert_eq!(b.host.counted(Counter::LateWakeups), 1);
    // After the grace period the leader empties the record: nothing is kept as a cache.
    a.host.advance(1000);
    a.tick();
    let slot = a.plugin.flights.slot_name_at(0);
    assert_eq!(a.host.store.get(&slot), None);
    b.assert_host_rules_kept();
}

#[test]
fn a_reset_answers_every_waiter_as_envoy_would_and_stores_nothing() {
    let (a, b) = envoy(r#"{"debug_headers":true}"#);
    let token = one_flight_on_two_workers(&a, &b);
    a.callout_answers(token, FetchResult::Reset);
    let leader = a.reply(1);
    assert_eq!(
        (leader.status, leader.header("x-cache")),
        (503, Some("MISS"))
    );
    assert_eq!(leader.header("x-cache-reason"), Some("fetch-failed"));
    assert_eq!(
        a.reply(2).status,
        503,
        "a gateway failure reaches every waiter"
    );
    b.deliver_queue();
    assert_eq!(b.reply(11).status, 503);
    assert_eq!(a.host.counted(Counter::FetchFailures), 1);
    assert_eq!(a.host.counted(Counter::Stores), 0);
    // The next request fetches again.
    a.post(4, QUERY, &[]);
    a.deliver_queue();
    assert_eq!(a.tokens().len(), 2);
    a.assert_host_rules_kept();
}

#[test]
fn a_reset_at_the_fetch_timeout_is_a_timeout() {
    let (a, _b) = envoy(r#"{"fetch_timeout_ms":1000}"#);
    a.post(1, QUERY, &[]);
    a.deliver_queue();
    let token = a.tokens()[0];
    // Envoy's timer may fire a few ms before the wall clock says the deadline is due.
    a.host.advance(997);
    a.callout_answers(token, FetchResult::Reset);
    assert_eq!(a.reply(1).status, 504);
    // A reset well before the deadline is a reset.
    a.post(2, QUERY, &[]);
    a.deliver_queue();
    let token = *a.tokens().last().unwrap();
    a.host.advance(500);
    a.callout_answers(token, FetchResult::Reset);
    assert_eq!(a.reply(2).status, 503);
}

#[test]
fn a_refused_callout_is_a_failed_fetch_answered_after_every_dispatch() {
    let (a, _b) = envoy("{}");
    a.host.refuse_dispatch.set(true);
    a.post(1, QUERY, &[]);
    a.post(2, QUERY, &[]);
    a.deliver_queue();
    assert_eq!(a.reply(1).status, 503);
    assert_eq!(a.reply(2).status, 503);
    assert_eq!(a.host.counted(Counter::FetchFailures), 1);
    a.assert_host_rules_kept();
}

#[test]
fn no_answer_without_a_readable_status_is_a_bad_gateway() {
    let (a, _b) = envoy("{}");
    a.post(1, QUERY, &[]);
    a.deliver_queue();
    let token = a.tokens()[0];
    a.callout_answers(
        token,
        FetchResult::Answer {
            headers: vec![(":status".into(), b"2xx".to_vec())],
            body: vec![],
        },
    );
    assert_eq!(a.reply(1).status, 502);
    assert_eq!(a.host.counted(Counter::FetchFailures), 1);
}

#[test]
fn followers_of_a_leader_that_vanished_go_upstream() {
    let (a, b) = envoy(r#"{"fetch_timeout_ms":1000}"#);
    a.post(1, QUERY, &[]);
    b.post(11, QUERY, &[]);
    // A's VM dies with the fetch: no answer, no wake-up ever comes.
    b.host.advance(LOST_WAKEUP_MS);
    b.tick();
    assert!(
        b.host.resumed.borrow().is_empty(),
        "the leader's lease still runs"
    );
    b.host.advance(a.plugin.lease_ms());
    b.tick();
    assert_eq!(*b.host.resumed.borrow(), vec![11]);
    // The next request on B leads a new flight.
    b.post(12, QUERY, &[]);
    b.deliver_queue();
    assert_eq!(b.tokens().len(), 1);
    b.assert_host_rules_kept();
}

#[test]
fn a_fetch_whose_answer_never_comes_lets_everyone_go() {
    let (a, b) = envoy(r#"{"fetch_timeout_ms":1000}"#);
    let _ = one_flight_on_two_workers(&a, &b);
    a.host.advance(a.plugin.lease_ms());
    a.tick();
    let mut resumed = a.host.resumed.borrow().clone();
    resumed.sort_unstable();
    assert_eq!(resumed, vec![1, 2, 3]);
    assert_eq!(
        a.worker.borrow().flights.outcomes_kept(),
        3,
        "each knows why"
    );
    b.deliver_queue();
    let mut resumed = b.host.resumed.borrow().clone();
    resumed.sort_unstable();
    assert_eq!(
        resumed,
        vec![11, 12],
        "watchers are told, not left to time out"
    );
    // The callout the root forgot about is counted once it is given up.
    a.host.advance(a.plugin.lease_ms() * 2);
    a.tick();
    assert_eq!(a.host.counted(Counter::FetchFailures), 1);
}

#[test]
fn leftovers_of_a_reloaded_vm_are_never_served() {
    let config = r#"{"flight_slots":1,"cache_slots":1}"#;
    let (a, _b) = envoy(config);
    // A dead VM left a finished flight with an answer, and a cache entry of another format.
    let mut digest = [0u8; 32];
    a.post(1, QUERY, &[]);
    if let Some(f) = a.worker.borrow().flights.first_queued() {
        digest = f.key.digest;
    }
    let slot = a.plugin.flights.slot_name_at(0);
    let left = FlightRecord::Done {
        digest,
        owner: 99,
        finished_ms: a.host.clock.get(),
        result: Some(b"old answer".to_vec()),
    };
    // The new VM starts over: the old record's answer is not a cache.
    let (c, _) = envoy(config);
    c.host.store.set(&slot, &left.encode()).unwrap();
    c.host
        .store
        .set("gc2/0", b"an index of another version")
        .unwrap();
    c.host
        .store
        .set("gc2/0/0", b"GQLC\x00 an entry of format 0")
        .unwrap();
    c.post(1, QUERY, &[]);
    assert!(
        c.host.answered.borrow().is_empty(),
        "no hit from a foreign entry"
    );
    c.deliver_queue();
    assert_eq!(c.tokens().len(), 1, "it leads a fresh fetch");
    // A flight record of another format version is a free slot too.
    let (d, _) = envoy(config);
    d.host.store.set(&slot, b"GQLF\x09future").unwrap();
    d.post(1, QUERY, &[]);
    d.deliver_queue();
    assert_eq!(d.tokens().len(), 1);
}

#[test]
fn a_client_that_left_is_not_answered_and_the_fetch_still_completes() {
    let (a, b) = envoy("{}");
    a.post(1, QUERY, &[]);
    let (left, _) = a.post(2, QUERY, &[]);
    a.post(3, QUERY, &[]);
    b.post(11, QUERY, &[]);
    a.deliver_queue();
    let token = a.tokens()[0];
    // Request 2 ends (its client left) before the answer; request 3's client is gone too, but
    // Envoy has not told the filter yet.
    left.on_done(&mut a.cx());
    a.host.gone.borrow_mut().insert(3);
    a.callout_answers(token, ok(ANSWER));
    assert!(a.host.reply_to(2).is_none());
    assert!(a.host.reply_to(3).is_none());
    assert!(
        a.worker.borrow().flights.outcome_of(3).is_none(),
        "no outcome kept for a request that is gone"
    );
    assert_eq!(
        a.host.counted(Counter::Coalesced),
        0,
        "only real answers count"
    );
    b.deliver_queue();
    assert_eq!(b.reply(11).header("x-cache"), Some("COALESCED"));
}

#[test]
fn the_leader_s_client_leaving_does_not_cancel_the_shared_fetch() {
    let (a, _b) = envoy("{}");
    let (leader, _) = a.post(1, QUERY, &[]);
    a.post(2, QUERY, &[]);
    leader.on_done(&mut a.cx());
    a.deliver_queue();
    let token = a.tokens()[0];
    a.callout_answers(token, ok(ANSWER));
    assert_eq!(a.reply(2).header("x-cache"), Some("COALESCED"));
}

#[test]
fn waiters_past_max_wait_go_upstream_on_their_own() {
    let (a, _b) = envoy(r#"{"max_wait_ms":200,"fetch_timeout_ms":100}"#);
    a.post(1, QUERY, &[]);
    a.post(2, QUERY, &[]);
    a.deliver_queue();
    a.host.advance(199);
    a.tick();
    assert!(a.host.resumed.borrow().is_empty());
    a.host.advance(1);
    a.tick();
    assert_eq!(a.host.resumed.borrow().len(), 2);
    assert_eq!(a.host.counted(Counter::WaitTimeouts), 2);
}

#[test]
fn answers_that_may_be_about_the_caller_reach_only_the_caller_unless_keyed_by_it() {
    let denied = answer(
        401,
        &[("content-type", "application/json")],
        r#"{"errors":[]}"#,
    );
    // No credentials in the key: the followers go upstream themselves.
    let (a, b) = envoy(r#"{"vary_headers":[]}"#);
    let token = one_flight_on_two_workers(&a, &b);
    a.callout_answers(token, denied.clone());
    assert_eq!(a.reply(1).status, 401);
    assert_eq!(*a.host.resumed.borrow(), vec![2, 3]);
    b.deliver_queue();
    assert_eq!(*b.host.resumed.borrow(), vec![11, 12]);
    assert_eq!(
        b.worker.borrow().flights.outcome_of(11),
        Some(&crate::worker::flights::Outcome::Released(
            crate::coalesce::release::Release::NotShareable
        ))
    );
    // With the credentials in the key (the default), followers are the same caller.
    let (a, _b) = envoy("{}");
    a.post(1, QUERY, &[("authorization", "Bearer x")]);
    a.post(2, QUERY, &[("authorization", "Bearer x")]);
    a.deliver_queue();
    let token = a.tokens()[0];
    a.callout_answers(token, denied);
    assert_eq!(a.reply(2).status, 401);
}

#[test]
fn held_bodies_that_never_come_are_let_go_and_posts_stop_being_held() {
    let (a, _b) = envoy("{}");
    let mut held = Vec::new();
    for ctx in 1..=3 {
        a.host.context.set(ctx);
        *a.host.request_headers.borrow_mut() = vec![
            (":method".into(), b"POST".to_vec()),
            (":path".into(), b"/graphql".to_vec()),
            ("content-type".into(), b"application/json".to_vec()),
        ];
        *a.host.request_body.borrow_mut() = QUERY.as_bytes().to_vec();
        let mut x = Exchange::new(ctx);
        assert_eq!(x.on_request_headers(&mut a.cx(), false), Flow::Pause);
        held.push(x);
    }
    a.host.advance(1000);
    a.tick();
    assert_eq!(*a.host.resumed.borrow(), vec![1, 2, 3]);
    // Envoy had their bodies all along: once let go, each arrives at once.
    for (i, x) in held.iter_mut().enumerate() {
        a.host.context.set(i as u32 + 1);
        assert_eq!(
            x.on_request_body(&mut a.cx(), QUERY.len(), true),
            Flow::Continue
        );
    }
    let errors: Vec<_> = a
        .host
        .logs
        .borrow()
        .iter()
        .filter(|(l, m)| *l == LogLevel::Error && m.contains("allow_on_headers_stop_iteration"))
        .cloned()
        .collect();
    assert_eq!(errors.len(), 1, "said once, loudly");
    a.host.context.set(4);
    let mut x = Exchange::new(4);
    assert_eq!(x.on_request_headers(&mut a.cx(), false), Flow::Continue);
    assert_eq!(a.host.counted(Counter::Bypasses), 4);
}

#[test]
fn slow_uploads_at_startup_do_not_turn_post_caching_off() {
    let (a, _b) = envoy("{}");
    for ctx in 1..=5 {
        a.host.context.set(ctx);
        *a.host.request_headers.borrow_mut() = vec![
            (":method".into(), b"POST".to_vec()),
            (":path".into(), b"/graphql".to_vec()),
            ("content-type".into(), b"application/json".to_vec()),
        ];
        let mut x = Exchange::new(ctx);
        x.on_request_headers(&mut a.cx(), false);
        std::mem::forget(x);
    }
    a.host.advance(1000);
    a.tick();
    assert_eq!(a.host.resumed.borrow().len(), 5, "let go, never hung");
    // Their bodies never come (or come late): POSTs are still held and cached.
    let (_, flow) = a.post(6, QUERY, &[]);
    assert_eq!(flow, Flow::Pause);
}

#[test]
fn a_late_body_of_a_released_request_passes_through() {
    let (a, _b) = envoy("{}");
    a.host.context.set(1);
    *a.host.request_headers.borrow_mut() = vec![
        (":method".into(), b"POST".to_vec()),
        (":path".into(), b"/graphql".to_vec()),
        ("content-type".into(), b"application/json".to_vec()),
    ];
    *a.host.request_body.borrow_mut() = QUERY.as_bytes().to_vec();
    let mut x = Exchange::new(1);
    x.on_request_headers(&mut a.cx(), false);
    a.host.advance(1000);
    a.tick();
    assert_eq!(
        x.on_request_body(&mut a.cx(), QUERY.len(), true),
        Flow::Continue
    );
    assert_eq!(a.host.counted(Counter::Bypasses), 1);
    // A body that arrives in time proves the option is on: later holds are not watched.
    let (_, flow) = a.post(2, QUERY, &[]);
    assert_eq!(flow, Flow::Pause);
    assert!(!a.worker.borrow().watchdog.watching());
}

#[test]
fn a_plain_miss_is_captured_as_it_streams_and_bounded() {
    let (a, _b) = envoy(r#"{"coalesce":false,"max_entry_bytes":1024}"#);
    let (mut x, flow) = a.post(1, QUERY, &[]);
    assert_eq!(flow, Flow::Continue, "goes upstream itself");
    *a.host.response_headers.borrow_mut() = vec![
        (":status".into(), b"200".to_vec()),
        ("content-type".into(), b"application/json".to_vec()),
    ];
    x.on_response_headers(&mut a.cx(), false);
    assert_eq!(a.host.header_set("x-cache").as_deref(), Some("MISS"));
    let (first, rest) = ANSWER.split_at(10);
    for (chunk, end) in [(first, false), (rest, true)] {
        *a.host.response_chunk.borrow_mut() = chunk.as_bytes().to_vec();
        x.on_response_body(&mut a.cx(), chunk.len(), end);
    }
    assert_eq!(a.host.counted(Counter::Stores), 1);
    let (_, flow) = a.post(2, QUERY, &[]);
    assert_eq!(flow, Flow::Pause);
    assert_eq!(a.reply(2).body, ANSWER.as_bytes());
    // Over max_entry_bytes, the copy is dropped at once and nothing is stored.
    let (mut y, _) = a.post(3, r#"{"query":"{ posts { id } }"}"#, &[]);
    y.on_response_headers(&mut a.cx(), false);
    let big = "x".repeat(1500);
    *a.host.response_chunk.borrow_mut() = big.clone().into_bytes();
    y.on_response_body(&mut a.cx(), big.len(), true);
    assert_eq!(a.host.counted(Counter::Stores), 1);
    assert_eq!(a.host.counted(Counter::StoreSkipped), 1);
}

#[test]
fn a_reply_from_envoy_while_waiting_is_labelled_and_the_waiter_forgotten() {
    let (a, _b) = envoy(r#"{"debug_headers":true}"#);
    a.post(1, QUERY, &[]);
    let (mut follower, _) = a.post(2, QUERY, &[]);
    // Envoy answers request 2 itself (a stream timeout, say) while it waits.
    follower.on_response_headers(&mut a.cx(), false);
    assert_eq!(
        a.host.header_set("x-cache-reason").as_deref(),
        Some("envoy-reply")
    );
    a.deliver_queue();
    let token = a.tokens()[0];
    a.callout_answers(token, ok(ANSWER));
    assert!(a.host.reply_to(2).is_none());
}

#[test]
fn without_a_wake_up_queue_nothing_coalesces() {
    let host = FakeHost::new();
    host.refuse_queue.set(true);
    let a = Node::new(1, "{}", host);
    assert!(a
        .host
        .logs
        .borrow()
        .iter()
        .any(|(l, _)| *l == LogLevel::Warn));
    let (_, flow) = a.post(1, QUERY, &[]);
    assert_eq!(flow, Flow::Continue, "goes upstream alone");
}

#[test]
fn a_bad_configuration_is_refused_with_the_field_named() {
    let host = FakeHost::new();
    let worker = RefCell::new(Worker::new(1, &Plugin::default().config));
    let err = configure(br#"{"ttl_seconds":"x"}"#, &worker, &host).unwrap_err();
    assert_eq!(err.field, "ttl_seconds");
    let logs = host.logs.borrow();
    assert!(logs[0].1.contains("ttl_seconds"), "{logs:?}");
}

pub(super) const PURGING: &str =
    r#"{"debug_headers":true,"purge_path":"/purge","purge_token":"0123456789abcdef"}"#;
pub(super) const USER: &str = r#"{"query":"query GetUser { user(id: 1) { __typename id name } }"}"#;
pub(super) const USER_ANSWER: &str =
    r#"{"data":{"user":{"__typename":"User","id":"1","name":"Alice"}}}"#;

impl Node {
    /// A purge request with `token` and `body`, answered by the filter.
    pub(super) fn purge(&self, context: u32, token: &str, body: &str) -> Reply {
        self.purge_at("/purge", context, token, body);
        self.reply(context)
    }

    /// A purge sent to `path` (the purge API's, with a query string); answered or not.
    pub(super) fn purge_at(&self, path: &str, context: u32, token: &str, body: &str) {
        self.host.context.set(context);
        let auth = format!("Bearer {token}");
        *self.host.request_headers.borrow_mut() = [
            (":method", "POST"),
            (":path", path),
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ]
        .iter()
        .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
        .collect();
        *self.host.request_body.borrow_mut() = body.as_bytes().to_vec();
        let mut x = Exchange::new(context);
        if x.on_request_headers(&mut self.cx(), false) == Flow::Pause
            && self.host.reply_to(context).is_none()
        {
            assert_eq!(
                x.on_request_body(&mut self.cx(), body.len(), true),
                Flow::Pause
            );
        }
    }

    /// Stores `answer` for `body` through a led fetch; returns the MISS reply.
    pub(super) fn fill(&self, context: u32, body: &str, answer: &str) -> Reply {
        assert_eq!(self.post(context, body, &[]).1, Flow::Pause);
        self.deliver_queue();
        let token = *self.tokens().last().unwrap();
        self.callout_answers(token, ok(answer));
        self.reply(context)
    }

    pub(super) fn hits(&self, context: u32, body: &str) -> bool {
        self.post(context, body, &[]);
        self.host
            .reply_to(context)
            .is_some_and(|r| r.header("x-cache") == Some("HIT"))
    }
}

#[test]
fn entries_are_tagged_from_their_answer() {
    let (a, b) = envoy(PURGING);
    let miss = a.fill(1, USER, USER_ANSWER);
    let tags = "operation:GetUser,field:user,type:User,entity:User:1";
    assert_eq!(miss.header("x-cache-tags"), Some(tags));
    assert!(b.hits(2, USER));
    assert_eq!(b.reply(2).header("x-cache-tags"), Some(tags));
}

#[test]
fn a_purge_is_seen_by_every_worker_hot_copies_included() {
    for selector in [
        r#"[{"kind":"entity","type":"User","id":1}]"#,
        r#"[{"kind":"type","type":"User"}]"#,
        r#"[{"kind":"operation","name":"GetUser"}]"#,
        r#"[{"kind":"field","name":"user"}]"#,
        r#"[{"kind":"all"}]"#,
    ] {
        let (a, b) = envoy(PURGING);
        a.fill(1, USER, USER_ANSWER);
        a.fill(2, QUERY, ANSWER);
        // Both workers hold hot copies of both entries.
        assert!(a.hits(3, USER) && b.hits(4, USER) && b.hits(5, QUERY));
        let reply = a.purge(6, "0123456789abcdef", selector);
        assert_eq!(
            (reply.status, reply.body.as_slice()),
            (200, &br#"{"purged":1}"#[..])
        );
        a.host.advance(1);
        assert!(!b.hits(7, USER), "{selector}: purged on the other worker");
        assert!(!a.hits(8, USER), "{selector}: and on this one");
        let other_kept = b.hits(9, QUERY);
        assert_eq!(other_kept, !selector.contains("all"), "{selector}");
        assert!(b.host.counted(Counter::PurgedMisses) >= 1);
    }
}

#[test]
fn without_a_purge_signal_the_shared_epoch_carries_the_purge() {
    // An Envoy whose counters are filtered out (a stats matcher): no signal to read.
    let (a, b) = envoy(PURGING);
    for n in [&a, &b] {
        n.host.signal_off.set(true);
    }
    a.fill(1, USER, USER_ANSWER);
    assert!(a.hits(2, USER) && b.hits(3, USER));
    let reply = a.purge(4, "0123456789abcdef", r#"[{"kind":"type","type":"User"}]"#);
    assert_eq!(reply.status, 200);
    a.host.advance(1);
    assert!(!b.hits(5, USER), "purged on the other worker");
    assert_eq!(
        a.host.signal.get(),
        0,
        "nothing raised a signal that is off"
    );
}

#[test]
fn a_signal_that_fails_for_a_moment_never_hides_a_purge() {
    let (a, b) = envoy(PURGING);
    a.fill(1, USER, USER_ANSWER);
    assert!(b.hits(2, USER));
    // B read its marks at signal value 0; now its signal fails while A purges through the
    // shared epoch alone (whose first value, 1, must not pass for anything B read before).
    b.host.signal_off.set(true);
    a.host.signal_off.set(true);
    a.purge(3, "0123456789abcdef", r#"[{"kind":"all"}]"#);
    a.host.advance(1);
    assert!(!b.hits(4, USER));
    b.host.signal_off.set(false);
    assert!(
        !b.hits(5, USER),
        "back on the signal, the purge still holds"
    );
}

#[test]
fn bad_purges_change_nothing() {
    let (a, b) = envoy(PURGING);
    a.fill(1, USER, USER_ANSWER);
    let wrong = a.purge(2, "0123456789abcdeX", r#"[{"kind":"all"}]"#);
    assert_eq!(wrong.status, 401);
    assert_eq!(wrong.header("www-authenticate"), Some("Bearer"));
    let bad = a.purge(3, "0123456789abcdef", r#"[{"kind":"all"},{"kind":"nope"}]"#);
    assert_eq!(bad.status, 400);
    assert!(String::from_utf8_lossy(&bad.body).contains("selector 1"));
    assert!(b.hits(4, USER), "nothing purged");
    assert_eq!(a.host.counted(Counter::PurgeRejected), 2);
    assert_eq!(a.host.counted(Counter::Purges), 0);
    assert!(
        a.host.dispatched.borrow().len() == 1,
        "purges never go upstream"
    );
}

#[test]
fn a_fetch_in_flight_during_a_purge_is_not_stored_as_fresh() {
    let (a, b) = envoy(PURGING);
    a.post(1, USER, &[]);
    a.deliver_queue();
    let token = a.tokens()[0];
    // The origin read the old data; the purge lands before its answer does.
    a.host.advance(5);
    assert_eq!(
        b.purge(
            2,
            "0123456789abcdef",
            r#"[{"kind":"entity","type":"User","id":"1"}]"#
        )
        .status,
        200
    );
    a.host.advance(5);
    a.callout_answers(token, ok(USER_ANSWER));
    assert_eq!(a.reply(1).header("x-cache"), Some("MISS"));
    assert!(
        !b.hits(3, USER),
        "the old answer is not served after the purge"
    );
    assert!(!a.hits(4, USER));
}

#[test]
fn a_request_that_joins_a_fetch_after_a_purge_is_not_answered_by_it() {
    let (a, b) = envoy(PURGING);
    a.post(1, USER, &[]);
    a.deliver_queue();
    let token = a.tokens()[0];
    a.host.advance(5);
    let purge = r#"[{"kind":"entity","type":"User","id":"1"}]"#;
    assert_eq!(b.purge(2, "0123456789abcdef", purge).status, 200);
    a.host.advance(5);
    // Both join the fetch that began before the purge: one here, one on another worker.
    a.post(3, USER, &[]);
    b.post(11, USER, &[]);
    a.callout_answers(token, ok(USER_ANSWER));
    assert_eq!(
        a.reply(1).header("x-cache"),
        Some("MISS"),
        "the leader asked before the purge"
    );
    assert_eq!(*a.host.resumed.borrow(), vec![3], "goes upstream itself");
    assert_eq!(
        a.worker.borrow().flights.outcome_of(3),
        Some(&crate::worker::flights::Outcome::Released(
            crate::coalesce::release::Release::Overtaken
        ))
    );
    b.deliver_queue();
    assert_eq!(*b.host.resumed.borrow(), vec![11]);
    assert!(b.host.reply_to(11).is_none());
}

#[test]
fn a_soft_purge_leaves_a_stale_entry() {
    let (a, b) = envoy(PURGING);
    a.fill(1, USER, USER_ANSWER);
    let reply = a.purge(
        2,
        "0123456789abcdef",
        r#"[{"kind":"entity","type":"User","id":"1","soft":true}]"#,
    );
    assert_eq!(reply.status, 200);
    a.host.advance(1);
    assert!(!b.hits(3, USER));
    assert_eq!(b.host.counted(Counter::StaleMisses), 1);
    assert_eq!(b.host.counted(Counter::PurgedMisses), 0);
}

#[test]
fn a_mutation_purges_the_entities_it_returns() {
    let (a, b) = envoy(PURGING);
    a.fill(1, USER, USER_ANSWER);
    let other = r#"{"query":"{ user(id: 2) { __typename id name } }"}"#;
    a.fill(
        2,
        other,
        r#"{"data":{"user":{"__typename":"User","id":"2","name":"Bob"}}}"#,
    );
    let mutation =
        r#"{"query":"mutation { updateUser(id: 1, name: \"A\") { __typename id name } }"}"#;
    let (mut x, flow) = b.post(3, mutation, &[]);
    assert_eq!(flow, Flow::Continue, "the mutation goes upstream");
    let asked_for = crate::effects::host::RequestHost::request_header(&b.host, "accept-encoding");
    assert_eq!(
        asked_for.as_deref(),
        Some(&b"identity"[..]),
        "its answer is read uncompressed"
    );
    *b.host.response_headers.borrow_mut() = vec![
        (":status".into(), b"200".to_vec()),
        ("content-type".into(), b"application/json".to_vec()),
    ];
    x.on_response_headers(&mut b.cx(), false);
    let answer = r#"{"data":{"updateUser":{"__typename":"User","id":"1","name":"A"}}}"#;
    *b.host.response_chunk.borrow_mut() = answer.as_bytes().to_vec();
    x.on_response_body(&mut b.cx(), answer.len(), true);
    assert_eq!(b.host.counted(Counter::MutationPurges), 1);
    a.host.advance(1);
    assert!(!a.hits(4, USER), "the changed entity is purged");
    assert!(a.hits(5, other), "other entities stay");
}

#[test]
fn a_mutation_purge_shared_data_refused_is_applied_on_the_next_tick() {
    let (a, b) = envoy(PURGING);
    a.fill(1, USER, USER_ANSWER);
    let mutation =
        r#"{"query":"mutation { updateUser(id: 1, name: \"A\") { __typename id name } }"}"#;
    let answer = r#"{"data":{"updateUser":{"__typename":"User","id":"1","name":"A"}}}"#;
    b.host.fail_writes.set(true);
    mutate(&b, 3, mutation, answer);
    assert_eq!(b.host.counted(Counter::MutationPurgesOwed), 1);
    assert_eq!(b.host.counted(Counter::MutationPurges), 0);
    b.tick();
    assert_eq!(
        b.worker.borrow().owed_purges.len(),
        1,
        "still refused: still owed"
    );
    b.host.fail_writes.set(false);
    b.tick();
    assert_eq!(b.host.counted(Counter::MutationPurges), 1);
    assert!(b.worker.borrow().owed_purges.is_empty());
    a.host.advance(1);
    assert!(!a.hits(4, USER), "the changed entity is purged");
}

/// Sends `mutation` (a POST body) through `node` as context `context`, answered `answer`.
pub(super) fn mutate(node: &Node, context: u32, mutation: &str, answer: &str) {
    let (mut x, flow) = node.post(context, mutation, &[]);
    assert_eq!(flow, Flow::Continue);
    *node.host.response_headers.borrow_mut() = vec![
        (":status".into(), b"200".to_vec()),
        ("content-type".into(), b"application/json".to_vec()),
    ];
    x.on_response_headers(&mut node.cx(), false);
    *node.host.response_chunk.borrow_mut() = answer.as_bytes().to_vec();
    x.on_response_body(&mut node.cx(), answer.len(), true);
}

#[test]
fn a_mutation_s_aliases_purge_nothing_and_its_budget_collapses_the_excess() {
    let config = r#"{"purge_path":"/purge","purge_token":"0123456789abcdef","tag_slots":16384,
        "mutation_purges_per_second":1,"mutation_purge_burst":1}"#;
    let (a, b) = envoy(config);
    a.fill(1, USER, USER_ANSWER);
    let other = r#"{"query":"{ user(id: 2) { __typename id name } }"}"#;
    let other_answer = r#"{"data":{"user":{"__typename":"User","id":"2","name":"Bob"}}}"#;
    a.fill(2, other, other_answer);
    let aliased = r#"{"query":"mutation { updateUser(id: 2, name: \"User\") { __typename: name id: name } }"}"#;
    let reads_like_user_1 = r#"{"data":{"updateUser":{"__typename":"User","id":"1"}}}"#;
    mutate(&b, 3, aliased, reads_like_user_1);
    assert_eq!(b.host.counted(Counter::MutationPurges), 0);
    a.host.advance(1);
    assert!(a.hits(4, USER), "no alias steers a purge");
    let genuine = r#"{"query":"mutation { updateUser(id: 1, name: \"A\") { __typename id } }"}"#;
    let answer = r#"{"data":{"updateUser":{"__typename":"User","id":"1"}}}"#;
    mutate(&b, 5, genuine, answer);
    assert_eq!(b.host.counted(Counter::MutationPurgesCollapsed), 0);
    a.host.advance(1);
    assert!(!a.hits(6, USER), "the entity it returned is purged");
    assert!(a.hits(7, other), "and only that one");
    // The budget of `b` is spent: the next purges all of `User`.
    a.fill(8, USER, USER_ANSWER);
    mutate(&b, 9, genuine, answer);
    assert_eq!(b.host.counted(Counter::MutationPurgesCollapsed), 1);
    assert_eq!(b.host.counted(Counter::MutationPurges), 2);
    a.host.advance(1);
    assert!(!a.hits(10, other), "collapsed into a purge of its type");
}

#[test]
fn a_held_purge_whose_body_never_comes_is_refused_not_sent_upstream() {
    let (a, _b) = envoy(PURGING);
    a.host.context.set(1);
    *a.host.request_headers.borrow_mut() = vec![
        (":method".into(), b"POST".to_vec()),
        (":path".into(), b"/purge".to_vec()),
        ("authorization".into(), b"Bearer 0123456789abcdef".to_vec()),
    ];
    let mut x = Exchange::new(1);
    assert_eq!(x.on_request_headers(&mut a.cx(), false), Flow::Pause);
    a.host.advance(1000);
    a.tick();
    assert!(a.host.resumed.borrow().is_empty());
    assert_eq!(a.reply(1).status, 503);
}

#[test]
fn stale_while_revalidate_serves_at_once_and_refreshes_once_across_workers() {
    let (a, b) = envoy(r#"{"ttl_seconds":1,"stale_while_revalidate_seconds":10}"#);
    a.fill(1, QUERY, ANSWER);
    a.host.advance(1001);
    a.post(2, QUERY, &[]);
    assert_eq!(a.reply(2).header("x-cache"), Some("STALE"));
    assert_eq!(a.reply(2).body, ANSWER.as_bytes());
    b.post(3, QUERY, &[]);
    assert_eq!(
        b.reply(3).header("x-cache"),
        Some("STALE"),
        "no wait on B either"
    );
    a.deliver_queue();
    b.deliver_queue();
    assert_eq!(a.tokens().len(), 2, "the fill and one refresh");
    assert!(b.tokens().is_empty(), "B left it to A");
    assert_eq!(a.host.counted(Counter::Refreshes), 1);
    let refresh = a.tokens()[1];
    a.callout_answers(refresh, ok(r#"{"data":{"users":[{"id":"2"}]}}"#));
    assert!(b.hits(4, QUERY));
    assert_eq!(b.reply(4).body, br#"{"data":{"users":[{"id":"2"}]}}"#);
    a.assert_host_rules_kept();
}

#[test]
fn stale_if_error_answers_every_waiter_when_the_cluster_refuses() {
    let (a, b) = envoy(r#"{"ttl_seconds":1,"stale_if_error_seconds":30}"#);
    a.fill(1, QUERY, ANSWER);
    a.host.advance(1001);
    a.host.refuse_dispatch.set(true);
    a.post(2, QUERY, &[]);
    b.post(3, QUERY, &[]);
    a.deliver_queue();
    assert_eq!(a.reply(2).header("x-cache"), Some("STALE"));
    assert_eq!(a.reply(2).body, ANSWER.as_bytes());
    b.deliver_queue();
    assert_eq!(
        b.reply(3).header("x-cache"),
        Some("STALE"),
        "followers elsewhere too"
    );
    // Past the window the failure reaches the client.
    a.host.advance(30_000);
    a.post(4, QUERY, &[]);
    a.deliver_queue();
    assert_eq!(a.reply(4).status, 503);
    a.assert_host_rules_kept();
}

#[test]
fn a_hash_only_request_is_keyed_as_its_full_text_twin() {
    let (a, b) = envoy("{}");
    let q = "{ users { id } }";
    let hash = crate::request::apq::sha256_hex(q);
    let ext = format!(r#"{{"persistedQuery":{{"version":1,"sha256Hash":"{hash}"}}}}"#);
    let hash_only = format!(r#"{{"extensions":{ext}}}"#);
    let (_, flow) = b.post(1, &hash_only, &[]);
    assert_eq!(flow, Flow::Continue, "unknown: passes through");
    assert_eq!(b.host.counted(Counter::RejectedInputs), 0);
    let full = format!(r#"{{"query":"{q}","extensions":{ext}}}"#);
    a.fill(2, &full, ANSWER);
    assert!(b.hits(3, &hash_only), "taught once, known on every worker");
    let forged = format!(r#"{{"query":"{{ posts {{ id }} }}","extensions":{ext}}}"#);
    a.post(4, &forged, &[]);
    assert!(
        !a.hits(5, &forged),
        "a forged hash is keyed as itself, not as the twin"
    );
}

#[test]
fn an_answer_over_max_entry_bytes_never_enters_the_vm_and_everyone_goes_upstream() {
    let (a, b) = envoy(r#"{"max_entry_bytes":1024}"#);
    let token = one_flight_on_two_workers(&a, &b);
    *a.host.callout.borrow_mut() = (vec![(":status".into(), b"200".to_vec())], Vec::new());
    let key = a.worker.borrow().flights.sent_fetch(token).unwrap().key;
    a.host.begin_callback();
    crate::worker::root::callouts::on_callout(&mut a.cx(), token, 3, 1_000_000);
    assert!(
        a.worker.borrow().too_large.contains(&key),
        "a 200 that large: remembered"
    );
    assert_eq!(
        a.host.callout_body_reads.get(),
        0,
        "the body stayed in Envoy"
    );
    let mut resumed = a.host.resumed.borrow().clone();
    resumed.sort_unstable();
    assert_eq!(
        resumed,
        vec![1, 2, 3],
        "the leader too: the router streams it"
    );
    assert_eq!(
        a.worker.borrow().flights.outcome_of(1),
        Some(&crate::worker::flights::Outcome::Released(
            crate::coalesce::release::Release::TooLarge
        ))
    );
    b.deliver_queue();
    assert_eq!(
        b.host.resumed.borrow().len(),
        2,
        "watchers are told to go themselves"
    );
}

#[test]
fn requests_without_credentials_never_share_a_caller_dependent_answer() {
    // vary_headers is the default (authorization, cookie), but nobody sends them.
    let (a, _b) = envoy("{}");
    a.post(1, QUERY, &[]);
    a.post(2, QUERY, &[]);
    a.deliver_queue();
    let token = a.tokens()[0];
    a.callout_answers(
        token,
        answer(401, &[("content-type", "application/json")], "{}"),
    );
    assert_eq!(a.reply(1).status, 401);
    assert_eq!(
        *a.host.resumed.borrow(),
        vec![2],
        "the follower asks for itself"
    );
    // The same credentials share a 401, but not a per-connection 429.
    let (a, _b) = envoy("{}");
    let auth = [("authorization", "Bearer x")];
    a.post(1, QUERY, &auth);
    a.post(2, QUERY, &auth);
    a.deliver_queue();
    let token = a.tokens()[0];
    a.callout_answers(
        token,
        answer(429, &[("content-type", "application/json")], "{}"),
    );
    assert_eq!(*a.host.resumed.borrow(), vec![2]);
}

#[test]
fn no_stale_answer_without_a_refresh_to_replace_it() {
    // Without coalescing there is no shared fetch to refresh with: expired is a miss.
    let (a, _b) =
        envoy(r#"{"ttl_seconds":1,"stale_while_revalidate_seconds":10,"coalesce":false}"#);
    let (mut x, _) = a.post(1, QUERY, &[]);
    *a.host.response_headers.borrow_mut() = vec![
        (":status".into(), b"200".to_vec()),
        ("content-type".into(), b"application/json".to_vec()),
    ];
    x.on_response_headers(&mut a.cx(), false);
    *a.host.response_chunk.borrow_mut() = ANSWER.as_bytes().to_vec();
    x.on_response_body(&mut a.cx(), ANSWER.len(), true);
    a.host.advance(1001);
    let (_, flow) = a.post(2, QUERY, &[]);
    assert_eq!(flow, Flow::Continue, "a miss, not STALE");
    assert!(a.host.reply_to(2).is_none());
}

#[test]
fn a_soft_purge_does_not_revive_an_entry_past_its_window() {
    let config = r#"{"ttl_seconds":1,"stale_while_revalidate_seconds":2,"stale_if_error_seconds":300,
        "purge_path":"/purge","purge_token":"0123456789abcdef"}"#;
    let (a, _b) = envoy(config);
    a.fill(1, USER, USER_ANSWER);
    a.host.advance(10_000);
    a.purge(
        2,
        "0123456789abcdef",
        r#"[{"kind":"type","type":"User","soft":true}]"#,
    );
    a.host.advance(1);
    assert!(!a.hits(3, USER));
    assert_ne!(
        a.host
            .reply_to(3)
            .and_then(|r| r.header("x-cache").map(String::from)),
        Some("STALE".into())
    );
}

#[test]
fn a_released_request_s_body_after_the_watch_ended_still_passes_through() {
    let (a, _b) = envoy("{}");
    let held = |ctx: u32| {
        a.host.context.set(ctx);
        *a.host.request_headers.borrow_mut() = vec![
            (":method".into(), b"POST".to_vec()),
            (":path".into(), b"/graphql".to_vec()),
            ("content-type".into(), b"application/json".to_vec()),
        ];
        *a.host.request_body.borrow_mut() = QUERY.as_bytes().to_vec();
        let mut x = Exchange::new(ctx);
        x.on_request_headers(&mut a.cx(), false);
        x
    };
    let mut slow = held(1);
    a.host.advance(1000);
    a.tick();
    // Another request's body arrives during its hold: the watch ends.
    let (_, _) = a.post(2, QUERY, &[]);
    assert!(!a.worker.borrow().watchdog.watching());
    // The released request's body comes at last: it is upstream already, never looked up.
    a.host.context.set(1);
    assert_eq!(
        slow.on_request_body(&mut a.cx(), QUERY.len(), true),
        Flow::Continue
    );
    assert!(a.host.reply_to(1).is_none());
    assert_eq!(a.host.counted(Counter::Bypasses), 1);
}

#[test]
fn the_access_log_record_says_what_the_answer_was() {
    let (a, b) = envoy(r#"{"access_log":true}"#);
    let query = r#"{"query":"query GetUsers { users { id } }"}"#;
    a.fill(1, query, ANSWER);
    let (mut hit, flow) = b.post(2, query, &[]);
    assert_eq!(flow, Flow::Pause);
    hit.on_response_headers(&mut b.cx(), false);
    let record = b.host.log_record.borrow().clone().unwrap();
    assert!(
        record.starts_with("status=HIT reason=- operation=GetUsers key="),
        "{record}"
    );
    assert!(record.contains(" age=0 bytes="), "{record}");
    let bytes: usize = record.rsplit("bytes=").next().unwrap().parse().unwrap();
    assert!(bytes > ANSWER.len(), "the entry as stored: {record}");

    let (mut mutation, flow) = b.post(3, r#"{"query":"mutation M { a }"}"#, &[]);
    assert_eq!(flow, Flow::Continue);
    mutation.on_response_headers(&mut b.cx(), false);
    let record = b.host.log_record.borrow().clone().unwrap();
    assert_eq!(
        record,
        "status=BYPASS reason=mutation operation=M key=- age=- bytes=-"
    );

    // Off by default: no record, no host call.
    let (c, _) = envoy("{}");
    c.fill(1, query, ANSWER);
    let (mut hit, _) = c.post(2, query, &[]);
    hit.on_response_headers(&mut c.cx(), false);
    assert_eq!(*c.host.log_record.borrow(), None);
}

#[test]
fn every_waiter_of_a_fetch_tells_a_cdn_the_entry_s_tags() {
    let (a, b) = envoy(r#"{"cdn_tags":{"headers":["surrogate-key","cache-tag"]}}"#);
    let token = one_flight_on_two_workers(&a, &b);
    a.callout_answers(token, ok(ANSWER));
    b.deliver_queue();
    for (node, ctx) in [(&a, 1), (&a, 2), (&a, 3), (&b, 11), (&b, 12)] {
        let reply = node.reply(ctx);
        assert_eq!(reply.header("surrogate-key"), Some("field:users"), "{ctx}");
        assert_eq!(reply.header("cache-tag"), Some("field:users"), "{ctx}");
        assert_eq!(reply.header("x-cache-tags"), None, "{ctx}");
    }
    assert!(b.hits(13, QUERY));
    assert_eq!(b.reply(13).header("surrogate-key"), Some("field:users"));
}

#[test]
fn each_operation_is_counted_by_what_happened_to_it_and_names_past_k_are_other() {
    let (a, b) = envoy(r#"{"operation_stats":{"top_k":2,"min_requests":1}}"#);
    // Each worker adds its counts to Envoy's stats on its timer.
    let stat = |counter: &str, op: &str, reason: Option<&str>| {
        a.tick();
        b.tick();
        let reason = reason.map_or(String::new(), |r| format!("graphql_cache_reason=.={r};.;"));
        a.host.named_counter(&format!(
            "graphql_cache.op.{counter}.graphql_operation=.={op};.;{reason}"
        ))
    };
    let users = r#"{"query":"query GetUsers { users { id } }"}"#;
    // A miss that leads the fetch, answered 40 ms later; the leader's own callbacks then run.
    let (mut leader, _) = a.post(1, users, &[]);
    a.deliver_queue();
    a.host.advance(40);
    a.callout_answers(a.tokens()[0], ok(ANSWER));
    leader.on_response_headers(&mut a.cx(), false);
    assert_eq!(stat("misses", "GetUsers", Some("cold")), 1);
    assert_eq!(stat("stores", "GetUsers", None), 1);
    // Two hits on the other worker: each saved the origin's 40 ms.
    for ctx in [2, 3] {
        let (mut hit, _) = b.post(ctx, users, &[]);
        hit.on_response_headers(&mut b.cx(), false);
    }
    assert_eq!(stat("hits", "GetUsers", None), 2);
    assert_eq!(stat("origin_ms_saved", "GetUsers", None), 80);
    // A mutation takes the second place; a third name is `other`.
    let (mut save, _) = a.post(4, r#"{"query":"mutation Save { a }"}"#, &[]);
    save.on_response_headers(&mut a.cx(), false);
    assert_eq!(stat("bypasses", "Save", Some("mutation")), 1);
    let (mut third, flow) = b.post(5, r#"{"query":"query Third { b }"}"#, &[]);
    assert_eq!(flow, Flow::Pause, "leads its fetch");
    b.deliver_queue();
    let no_store = [
        ("content-type", "application/json"),
        ("cache-control", "no-store"),
    ];
    b.callout_answers(b.tokens()[0], answer(200, &no_store, ANSWER));
    third.on_response_headers(&mut b.cx(), false);
    assert_eq!(stat("misses", "other", Some("cold")), 1);
    assert_eq!(stat("not_stored", "other", Some("no-store")), 1);
    assert_eq!(stat("misses", "Third", Some("cold")), 0);
    // Asked again after an answer that was not stored: said so, on any worker (not `evicted`,
    // which a user reads as "the cache is too small").
    let (mut again, _) = a.post(6, r#"{"query":"query Third { b }"}"#, &[]);
    a.deliver_queue();
    a.callout_answers(*a.tokens().last().unwrap(), ok(ANSWER));
    again.on_response_headers(&mut a.cx(), false);
    assert_eq!(stat("misses", "other", Some("not-stored")), 1);
    assert_eq!(stat("misses", "other", Some("evicted")), 0);
    // Without a name, and before the name could be read.
    let (mut anon, _) = a.post(7, r#"{"query":"{ c }"}"#, &[]);
    a.deliver_queue();
    a.callout_answers(
        *a.tokens().last().unwrap(),
        ok(r#"{"errors":[{"message":"no"}]}"#),
    );
    anon.on_response_headers(&mut a.cx(), false);
    assert_eq!(stat("misses", "anonymous", Some("cold")), 1);
    assert_eq!(stat("not_stored", "anonymous", Some("graphql-errors")), 1);
    let (mut bad, _) = a.post(8, "{nope", &[]);
    bad.on_response_headers(&mut a.cx(), false);
    assert_eq!(stat("bypasses", "unknown", Some("malformed-json")), 1);
    a.assert_host_rules_kept();
    b.assert_host_rules_kept();

    // `top_k: 0` turns them off: no stat is defined.
    let (c, _) = envoy(r#"{"operation_stats":{"top_k":0}}"#);
    let (mut hit, _) = c.post(1, users, &[]);
    hit.on_response_headers(&mut c.cx(), false);
    c.tick();
    assert!(c.host.named.borrow().is_empty());
}
