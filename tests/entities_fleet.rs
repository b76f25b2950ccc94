//! Entity mode with the fleet's L2, all real: two Envoys on the shipped `envoy/fleet.yaml` in
//! entity mode in front of the Node products subgraph (`tests/federation/subgraphs.mjs`, which
//! counts the representations it resolves), one `graphql-cache-l2` service, one Redis. What one
//! Envoy fetched is answered by the other without asking the subgraph, each request asking the
//! L2 once (one mget, one Redis `MGET`) whatever its batch; with Redis stopped every answer is
//! still the subgraph's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::*;

const QUERY: &str = "query($representations:[_Any!]!){_entities(representations:$representations){...on Product{id name price}}}";

/// Fields drop in order: the Envoys before the service, the service before Redis.
struct EntityFleet {
    envoys: Vec<Envoy>,
    /// Per Redis node, the reads that asking for its stats costs alone.
    idle_reads: std::cell::RefCell<Vec<u64>>,
    l2: L2,
    redis: RedisBackend,
    subgraphs: Subgraphs,
}

impl EntityFleet {
    fn start(backend: Backend) -> EntityFleet {
        let subgraphs = Subgraphs::start();
        let redis = RedisBackend::start(backend);
        let [flag, url] = redis.l2_args();
        let l2 = L2::start_bin(&l2_bin(), &[flag.as_str(), url.as_str()]);
        wait_l2_service_healthy(&l2);
        // fleet.yaml routes /graphql to its "origin": here, the products subgraph.
        let entities = r#""vary_headers": [], "entities": {"ttl_seconds": 60},"#;
        let bootstrap = fleet_config(subgraphs.ports[0], l2.addr.port(), entities);
        let envoys: Vec<Envoy> = (0..2)
            .map(|_| {
                let envoy = Envoy::start_bootstrap(&bootstrap, 2);
                envoy.wait_l2_ready();
                envoy
            })
            .collect();
        EntityFleet {
            envoys,
            idle_reads: Default::default(),
            l2,
            redis,
            subgraphs,
        }
    }

    fn mgets(&self) -> i64 {
        self.l2
            .metric(r#"l2_requests_total{verb="mget",outcome="answered"}"#)
    }

    fn nodes(&self) -> Vec<&Redis> {
        match &self.redis {
            RedisBackend::Single(r) => vec![r],
            RedisBackend::Cluster(c) => c.nodes.iter().collect(),
        }
    }

    /// Zeroes every node's stats; what asking for them costs alone (a connection, its
    /// handshake, the `INFO`) is measured first, to be told apart.
    fn reset_stats(&self) {
        let reset = || {
            for n in self.nodes() {
                n.info(&["CONFIG", "RESETSTAT"]);
            }
        };
        reset();
        let idle = self.redis_mgets().into_iter().map(|(_, r)| r).collect();
        self.idle_reads.replace(idle);
        reset();
    }

    /// Per Redis node since [`EntityFleet::reset_stats`]: the `MGET`s it ran, and the reads of
    /// client sockets it processed (`total_reads_processed`, this `INFO` included: one read
    /// carries every command a client wrote at once, so it counts round trips).
    fn redis_mgets(&self) -> Vec<(u64, u64)> {
        let stat = |text: &str, prefix: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(prefix))
                .map_or(0, |rest| {
                    rest.split(',').next().unwrap().trim().parse().unwrap()
                })
        };
        let read = |n: &Redis| {
            let text = n.info(&["INFO", "all"]);
            (
                stat(&text, "cmdstat_mget:calls="),
                stat(&text, "total_reads_processed:"),
            )
        };
        self.nodes().into_iter().map(read).collect()
    }

    /// What one mget of `keys` costs Redis: on one node, one `MGET`; on a Cluster, redis-rs
    /// splits it by slot (every key has its own), the parts sent to every master at once.
    fn assert_one_round_trip(&self, keys: u64) {
        let (per_node, reads): (Vec<u64>, Vec<u64>) = self.redis_mgets().into_iter().unzip();
        let idle = self.idle_reads.borrow();
        let reads: Vec<u64> = reads
            .iter()
            .zip(idle.iter())
            .map(|(r, i)| r.saturating_sub(*i))
            .collect();
        // Not asserted: Envoy's health checks and the purge-log readers add reads of their own.
        println!(
            "one request's {keys} missing entities: MGETs per Redis node {per_node:?}, \
             socket reads per node {reads:?} (the request's, the mstore after it, and background)"
        );
        match &self.redis {
            RedisBackend::Single(_) => assert_eq!(per_node, vec![1]),
            RedisBackend::Cluster(_) => {
                // One per slot: two of the keys may share one.
                let parts = per_node.iter().sum::<u64>();
                assert!(parts <= keys && parts + 3 > keys, "{parts} parts");
                assert!(per_node.iter().all(|&n| n > 0), "every master at once");
            }
        }
    }

    /// Waits until the L2 service has stored `n` entities (sent after the answer, by the root).
    fn wait_stored(&self, n: i64) {
        let deadline = Instant::now() + Duration::from_secs(5);
        let stored = || self.l2.metric(r#"l2_batch_keys_total{result="stored"}"#);
        while stored() < n {
            assert!(
                Instant::now() < deadline,
                "the L2 stored {} entities, not {n}",
                stored()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn batch(ids: impl IntoIterator<Item = u32>) -> String {
    let reps: Vec<Value> = ids
        .into_iter()
        .map(|i| json!({"__typename": "Product", "id": i.to_string()}))
        .collect();
    json!({"query": QUERY, "variables": {"representations": reps}}).to_string()
}

/// The entity the products subgraph answers for `id`.
fn product(id: u32) -> Value {
    json!({"id": id.to_string(), "name": format!("Product {id}"), "price": (id * 37) % 997 + 1})
}

fn expected(ids: impl IntoIterator<Item = u32>) -> Value {
    json!({"data": {"_entities": ids.into_iter().map(product).collect::<Vec<_>>()}})
}

fn ask(envoy: &Envoy, ids: &[u32]) -> Resp {
    let r = http(envoy.port, Req::post_json(&batch(ids.iter().copied())));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), expected(ids.iter().copied()), "{}", r.text());
    r
}

#[test]
fn entities_one_envoy_fetched_are_answered_by_another_with_one_l2_call_per_request() {
    one_l2_call_per_request(Backend::Single);
}

#[test]
fn on_a_cluster_too() {
    one_l2_call_per_request(Backend::Cluster);
}

fn one_l2_call_per_request(backend: Backend) {
    let mut fleet = EntityFleet::start(backend);
    let (a, b) = (&fleet.envoys[0], &fleet.envoys[1]);
    let twenty: Vec<u32> = (21..=40).collect();

    // A: nothing anywhere; the subgraph resolves all 20, and A stores them in the L2.
    assert_eq!(ask(a, &twenty).cache(), "MISS");
    assert_eq!(fleet.subgraphs.representations(), 20);
    fleet.wait_stored(20);
    assert_eq!(fleet.mgets(), 1, "A asked the L2 once");

    // B: all 20 from the L2, in one call and one Redis command; the subgraph not asked.
    fleet.reset_stats();
    let hit = ask(b, &twenty);
    assert_eq!(hit.cache(), "HIT", "{:?}", hit.headers);
    assert_eq!(hit.header("x-cache-entities"), Some("hit=20 fetched=0"));
    assert_eq!(
        fleet.subgraphs.representations(),
        20,
        "the subgraph was not asked"
    );
    assert_eq!(fleet.mgets(), 2, "one mget for B's request of 20");
    fleet.assert_one_round_trip(20);
    assert_eq!(b.counter("l2_hits"), 20);

    // B again: its own L1 now, the L2 not asked.
    assert_eq!(ask(b, &twenty[..5]).cache(), "HIT");
    assert_eq!(fleet.mgets(), 2);

    // B, half known: one mget for the 10 it lacks, then only the 10 unknown to anyone fetched.
    let mixed: Vec<u32> = (31..=50).collect();
    fleet.reset_stats();
    let partial = ask(b, &mixed);
    assert_eq!(partial.cache(), "PARTIAL");
    assert_eq!(
        partial.header("x-cache-entities"),
        Some("hit=10 fetched=10")
    );
    assert_eq!(fleet.subgraphs.representations(), 30);
    assert_eq!(fleet.mgets(), 3);
    fleet.assert_one_round_trip(10);
    fleet.wait_stored(30);

    // Redis stopped: every answer is still the subgraph's (L1 hits, and misses fetched).
    fleet.redis.kill();
    let failures = a.counter("l2_failures");
    assert_eq!(ask(a, &[45, 46]).cache(), "MISS", "L2 down: fetched");
    assert_eq!(
        ask(a, &twenty).cache(),
        "HIT",
        "A's own entries still served"
    );
    assert_eq!(ask(b, &[60, 61, 31]).cache(), "PARTIAL");
    assert_eq!(fleet.subgraphs.representations(), 34);
    assert!(
        a.counter("l2_failures") > failures,
        "the L2's failure was counted"
    );
}
