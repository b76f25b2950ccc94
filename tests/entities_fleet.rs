//! Entity mode with the fleet's L2, all real: two Envoys on the shipped `envoy/fleet.yaml` in
//! entity mode in front of the Node products subgraph (`tests/federation/subgraphs.mjs`, which
//! counts the representations it resolves), one `graphql-cache-l2` service, one Redis. What one
//! Envoy fetched is answered by the other without asking the subgraph, each request asking the
//! L2 once (one mget, one Redis `MGET`) whatever its batch; with Redis stopped every answer is
//! still the subgraph's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

const QUERY: &str = "query($representations:[_Any!]!){_entities(representations:$representations){...on Product{id name price}}}";

/// The three Node subgraphs; only products is used here.
struct Subgraphs {
    child: Child,
    products: u16,
}

impl Subgraphs {
    fn start() -> Subgraphs {
        let dir = repo_root().join("tests/federation");
        assert!(
            dir.join("node_modules").exists(),
            "run `make tests/federation/node_modules` first"
        );
        let mut child = Command::new("node")
            .arg(dir.join("subgraphs.mjs"))
            .args([
                "--port-products",
                "0",
                "--port-reviews",
                "0",
                "--port-users",
                "0",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = loop {
            match lines.next() {
                Some(Ok(line)) if line.contains(" ready ") => break line,
                Some(Ok(_)) => continue,
                _ => panic!("subgraphs.mjs stopped before it was ready"),
            }
        };
        let urls: Value = serde_json::from_str(ready.split_once(" ready ").unwrap().1).unwrap();
        let url = urls["products"].as_str().unwrap();
        let products = url.split(':').nth(2).unwrap().split('/').next().unwrap();
        Subgraphs {
            child,
            products: products.parse().unwrap(),
        }
    }

    /// Representations the products subgraph has resolved so far.
    fn representations(&self) -> u64 {
        http(self.products, Req::get("/counts")).json()["representations"]
            .as_u64()
            .unwrap()
    }
}

impl Drop for Subgraphs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Fields drop in order: the Envoys before the service, the service before Redis.
struct EntityFleet {
    envoys: Vec<Envoy>,
    l2: L2,
    redis: Redis,
    subgraphs: Subgraphs,
}

impl EntityFleet {
    fn start() -> EntityFleet {
        let subgraphs = Subgraphs::start();
        let redis = Redis::start();
        let l2 = L2::start_bin(&l2_bin(), &["--redis", &redis.url()]);
        wait_l2_service_healthy(&l2);
        // fleet.yaml routes /graphql to its "origin": here, the products subgraph.
        let entities = r#""vary_headers": [], "entities": {"ttl_seconds": 60},"#;
        let bootstrap = fleet_config(subgraphs.products, l2.addr.port(), entities);
        let envoys: Vec<Envoy> = (0..2)
            .map(|_| {
                let envoy = Envoy::start_bootstrap(&bootstrap, 2);
                envoy.wait_l2_ready();
                envoy
            })
            .collect();
        EntityFleet {
            envoys,
            l2,
            redis,
            subgraphs,
        }
    }

    fn mgets(&self) -> i64 {
        self.l2
            .metric(r#"l2_requests_total{verb="mget",outcome="answered"}"#)
    }

    /// `MGET`s Redis ran since the last `CONFIG RESETSTAT`.
    fn redis_mgets(&self) -> u64 {
        let stats = self.redis.info(&["INFO", "commandstats"]);
        stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_mget:calls="))
            .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
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
    let mut fleet = EntityFleet::start();
    let (a, b) = (&fleet.envoys[0], &fleet.envoys[1]);
    let twenty: Vec<u32> = (21..=40).collect();

    // A: nothing anywhere; the subgraph resolves all 20, and A stores them in the L2.
    assert_eq!(ask(a, &twenty).cache(), "MISS");
    assert_eq!(fleet.subgraphs.representations(), 20);
    fleet.wait_stored(20);
    assert_eq!(fleet.mgets(), 1, "A asked the L2 once");

    // B: all 20 from the L2, in one call and one Redis command; the subgraph not asked.
    fleet.redis.info(&["CONFIG", "RESETSTAT"]);
    let hit = ask(b, &twenty);
    assert_eq!(hit.cache(), "HIT", "{:?}", hit.headers);
    assert_eq!(hit.header("x-cache-entities"), Some("hit=20 fetched=0"));
    assert_eq!(
        fleet.subgraphs.representations(),
        20,
        "the subgraph was not asked"
    );
    assert_eq!(fleet.mgets(), 2, "one mget for B's request of 20");
    let round_trips = fleet.redis_mgets();
    println!("Redis round trips for B's batch of 20 entities: {round_trips} MGET");
    assert_eq!(round_trips, 1);
    assert_eq!(b.counter("l2_hits"), 20);

    // B again: its own L1 now, the L2 not asked.
    assert_eq!(ask(b, &twenty[..5]).cache(), "HIT");
    assert_eq!(fleet.mgets(), 2);

    // B, half known: one mget for the 10 it lacks, then only the 10 unknown to anyone fetched.
    let mixed: Vec<u32> = (31..=50).collect();
    fleet.redis.info(&["CONFIG", "RESETSTAT"]);
    let partial = ask(b, &mixed);
    assert_eq!(partial.cache(), "PARTIAL");
    assert_eq!(
        partial.header("x-cache-entities"),
        Some("hit=10 fetched=10")
    );
    assert_eq!(fleet.subgraphs.representations(), 30);
    assert_eq!((fleet.mgets(), fleet.redis_mgets()), (3, 1));
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
