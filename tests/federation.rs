//! Entity caching on the gateway-to-subgraph hop, with real gateways: three Node subgraphs
//! (`tests/federation/`), Apollo Gateway and Hive Gateway, each once straight to the subgraphs and
//! once through Envoy with the filter in entity mode. Every client answer through the filter must
//! equal the answer without it, and the subgraphs must resolve fewer representations. And
//! `_entities` batches sent straight to Envoy, as a gateway sends them: identical ones at once
//! (one upstream resolution), stale entities (refreshed in the background, or instead of a
//! subgraph that is gone).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use support::*;

/// A Node process of `tests/federation/`, stopped on drop.
struct NodeProcess {
    child: Child,
    /// What its ready line says (URLs).
    ready: String,
}

impl NodeProcess {
    fn start(script: &str, args: &[&str], env: &[(&str, String)]) -> NodeProcess {
        let dir = repo_root().join("tests/federation");
        assert!(
            dir.join("node_modules").exists(),
            "run `make tests/federation/node_modules` first"
        );
        let mut child = Command::new("node")
            .arg(dir.join(script))
            .args(args)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("APOLLO_TELEMETRY_DISABLED", "1")
            .env_remove("APOLLO_KEY")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = loop {
            match lines.next() {
                Some(Ok(line)) if line.contains(" ready ") => break line,
                Some(Ok(_)) => continue,
                _ => panic!("{script} stopped before it was ready"),
            }
        };
        NodeProcess { child, ready }
    }

    /// The URL its ready line ends with.
    fn url(&self) -> String {
        self.ready.rsplit(' ').next().unwrap().to_string()
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Subgraphs {
    process: NodeProcess,
    ports: [u16; 3],
}

impl Subgraphs {
    fn start() -> Subgraphs {
        Subgraphs::start_with(&[])
    }

    fn start_with(env: &[(&str, String)]) -> Subgraphs {
        let process = NodeProcess::start(
            "subgraphs.mjs",
            &[
                "--port-products",
                "0",
                "--port-reviews",
                "0",
                "--port-users",
                "0",
            ],
            env,
        );
        let urls: Value =
            serde_json::from_str(process.ready.split_once(" ready ").unwrap().1).unwrap();
        let port = |name: &str| -> u16 {
            let url = urls[name].as_str().unwrap();
            url.split(':')
                .nth(2)
                .unwrap()
                .split('/')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        let ports = [port("products"), port("reviews"), port("users")];
        Subgraphs { process, ports }
    }

    fn representations(&self) -> u64 {
        self.ports
            .iter()
            .map(|p| {
                http(*p, Req::get("/counts")).json()["representations"]
                    .as_u64()
                    .unwrap()
            })
            .sum()
    }

    fn reset(&self) {
        for p in self.ports {
            http(p, Req::new("POST", "/counts/reset"));
        }
    }
}

/// Envoy in front of the three subgraphs: `/graphql` to products, `/reviews/graphql` and
/// `/users/graphql` to the others (the subgraphs answer any `<prefix>/graphql`: the filter's
/// callouts send the request's own path, so a route must not rewrite it), the filter in entity
/// mode.
fn envoy_for(subgraphs: &Subgraphs) -> Envoy {
    let entities = json!({"ttl_seconds": 60, "types": {"User": {"scope": "private"}}});
    envoy_with(subgraphs, entities)
}

/// [`envoy_for`] with the filter's `entities` configuration `entities`.
fn envoy_with(subgraphs: &Subgraphs, entities: Value) -> Envoy {
    let [products, reviews, users] = subgraphs.ports;
    let route = |name: &str| {
        format!(
            "              - match: {{ prefix: \"/{name}/\" }}\n                route: {{ cluster: {name}, timeout: 15s }}\n"
        )
    };
    let opts = EnvoyOptions {
        plugin_config: json!({
            "debug_headers": true,
            "vary_headers": [],
            "default_scope": "public",
            "identity": {"source": "header", "header": "authorization"},
            "entities": entities,
        })
        .to_string(),
        extra_routes: route("reviews") + &route("users"),
        extra_clusters: cluster_yaml("reviews", reviews) + &cluster_yaml("users", users),
        ..Default::default()
    };
    Envoy::try_start(&opts, products).unwrap_or_else(|log| panic!("Envoy failed:\n{log}"))
}

fn gateway(script: &str, urls: [String; 3]) -> NodeProcess {
    let [p, r, u] = urls;
    NodeProcess::start(
        script,
        &[],
        &[
            ("PRODUCTS_URL", p),
            ("REVIEWS_URL", r),
            ("USERS_URL", u),
            ("PORT", "0".into()),
        ],
    )
}

/// A client query through a gateway, parsed.
fn ask(gateway_url: &str, query: &str, user: Option<&str>) -> Value {
    let (port, path) = {
        let rest = gateway_url.strip_prefix("http://127.0.0.1:").unwrap();
        let (port, path) = rest.split_once('/').unwrap_or((rest, ""));
        (port.parse::<u16>().unwrap(), format!("/{path}"))
    };
    let mut req = Req::post_json(&json!({"query": query}).to_string()).path(&path);
    if let Some(u) = user {
        req = req.header("authorization", &format!("Bearer {u}"));
    }
    let r = http(port, req);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

const PAGE: &str = "query Page { products(first: 8, offset: OFFSET) { id name price reviews { id rating author { id name } } } }";

/// Pages of products whose entity sets overlap, an error on one entity, and a private field.
fn workload() -> Vec<(String, Option<&'static str>)> {
    let mut w: Vec<(String, Option<&str>)> = [0, 4, 8, 2, 6, 0]
        .iter()
        .map(|o| (PAGE.replace("OFFSET", &o.to_string()), None))
        .collect();
    w.push((r#"{ a: review(id: "13-0") { id product { id name } } b: review(id: "14-1") { id product { id name } } }"#.into(), None));
    let private = "{ products(first: 6) { id reviews { author { id name email } } } }";
    for user in [Some("7"), Some("8"), None, Some("7")] {
        w.push((private.into(), user));
    }
    w
}

fn federation_through_envoy(script: &str) {
    let subgraphs = Subgraphs::start();
    let envoy = envoy_for(&subgraphs);
    let direct_urls = subgraphs
        .ports
        .map(|p| format!("http://127.0.0.1:{p}/graphql"));
    let e = envoy.port;
    let cached_urls = [
        format!("http://127.0.0.1:{e}/graphql"),
        format!("http://127.0.0.1:{e}/reviews/graphql"),
        format!("http://127.0.0.1:{e}/users/graphql"),
    ];
    let direct = gateway(script, direct_urls);
    let cached = gateway(script, cached_urls);
    let work = workload();

    subgraphs.reset();
    let want: Vec<Value> = work
        .iter()
        .map(|(q, u)| ask(&direct.url(), q, *u))
        .collect();
    let without = subgraphs.representations();
    subgraphs.reset();
    let got: Vec<Value> = work
        .iter()
        .map(|(q, u)| ask(&cached.url(), q, *u))
        .collect();
    let with = subgraphs.representations();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            g, w,
            "{script}: answer {i} ({}) differs through the filter",
            work[i].0
        );
    }
    assert!(
        want[6]["errors"].is_array() && want[6]["data"]["a"]["product"].is_null(),
        "the failing entity: {}",
        want[6]
    );
    assert_ne!(want[7], want[8], "a private field differs per user");
    assert!(
        with < without,
        "{script}: {with} representations resolved through the filter, {without} without"
    );
    eprintln!("{script}: representations resolved {without} without the filter, {with} with it");
    // Again, every answer the same, from entries this time.
    subgraphs.reset();
    for ((q, u), w) in work.iter().zip(&want) {
        assert_eq!(&ask(&cached.url(), q, *u), w, "{script}: {q} from entries");
    }
    assert!(envoy.counter("hits") > 0);
    drop(subgraphs.process);
}

#[test]
fn apollo_gateway_answers_the_same_through_entity_caching() {
    federation_through_envoy("apollo-gateway.mjs");
}

#[test]
fn hive_gateway_answers_the_same_through_entity_caching() {
    federation_through_envoy("hive-gateway.mjs");
}

/// An `_entities` batch of products, as a gateway sends it to the products subgraph.
fn products_batch(ids: &[u32]) -> String {
    let reps: Vec<Value> = ids
        .iter()
        .map(|i| json!({"__typename": "Product", "id": i.to_string()}))
        .collect();
    let query = "query($representations:[_Any!]!){_entities(representations:$representations){...on Product{id name price}}}";
    json!({"query": query, "variables": {"representations": reps}}).to_string()
}

fn products_resolved(subgraphs: &Subgraphs) -> u64 {
    let counts = http(subgraphs.ports[0], Req::get("/counts")).json();
    counts["resolved"]["Product"].as_u64().unwrap_or(0)
}

/// Waits (at most 5 s) until the products subgraph has resolved `n` representations.
fn wait_resolved(subgraphs: &Subgraphs, n: u64) {
    for _ in 0..100 {
        if products_resolved(subgraphs) >= n {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!(
        "the subgraph resolved {} of {n}",
        products_resolved(subgraphs)
    );
}

/// Batches sent straight to Envoy in entity mode, as a gateway would: identical batches sent at
/// once (the subgraph holds its answers 300 ms, so they are all in flight together) are resolved
/// once upstream, their answer split into entities; with a 1-second TTL and a stale window, an
/// expired entity is served `STALE` while one refresh asks for the stale ones alone.
#[test]
fn identical_batches_resolve_once_and_stale_entities_refresh_in_the_background() {
    let subgraphs = Subgraphs::start_with(&[("SUBGRAPHS_DELAY_MS", "300".into())]);
    let entities = json!({"ttl_seconds": 1, "stale_while_revalidate_seconds": 30});
    let envoy = envoy_with(&subgraphs, entities);
    let port = envoy.port;
    subgraphs.reset();
    let body = products_batch(&[1, 2, 3, 2]);
    let answers = concurrently(8, move |_| {
        http(port, Req::post_json(&body).path("/graphql"))
    });
    let first = answers[0].json();
    assert_eq!(first["data"]["_entities"][3]["name"], "Product 2");
    for a in &answers {
        assert_eq!(a.status, 200, "{}", a.text());
        assert_eq!(a.json(), first);
    }
    let mut labels: Vec<&str> = answers.iter().map(|a| a.cache()).collect();
    labels.sort_unstable();
    assert_eq!(labels, [["COALESCED"; 7].as_slice(), &["MISS"]].concat());
    // The batch's four representations (2 twice, as the gateway sent it), resolved once.
    assert_eq!(products_resolved(&subgraphs), 4, "one upstream resolution");
    // Split into entities: another batch naming them is answered by Envoy.
    let hit = http(
        port,
        Req::post_json(&products_batch(&[3, 1])).path("/graphql"),
    );
    assert_eq!(hit.cache(), "HIT", "{}", hit.text());
    assert_eq!(hit.json()["data"]["_entities"][0]["name"], "Product 3");

    // 1, 2 and 3 expire; 4 is fetched fresh.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let fresh = http(port, Req::post_json(&products_batch(&[4])).path("/graphql"));
    assert_eq!(fresh.cache(), "MISS");
    assert_eq!(products_resolved(&subgraphs), 5);
    let stale = http(
        port,
        Req::post_json(&products_batch(&[4, 1, 2, 3])).path("/graphql"),
    );
    assert_eq!(stale.cache(), "STALE", "{}", stale.text());
    assert_eq!(stale.json()["data"]["_entities"][1]["name"], "Product 1");
    // While the refresh runs (300 ms), the stale entities are served, and not refreshed again.
    let again = http(port, Req::post_json(&products_batch(&[2])).path("/graphql"));
    assert_eq!(again.cache(), "STALE");
    wait_resolved(&subgraphs, 8);
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert_eq!(
        products_resolved(&subgraphs),
        8,
        "one refresh of the 3 stale ones"
    );
    let refreshed = http(
        port,
        Req::post_json(&products_batch(&[1, 2, 3])).path("/graphql"),
    );
    assert_eq!(refreshed.cache(), "HIT", "{}", refreshed.text());
    assert_eq!(products_resolved(&subgraphs), 8);
    assert!(envoy.counter("refreshes") >= 1);
    drop(subgraphs.process);
}

/// With a 1-second TTL and a stale-if-error window, a subgraph that is gone: a batch whose
/// partial fetch fails, and identical all-miss batches whose shared fetch fails, are answered
/// from the expired entities (`STALE`), the same data the subgraph gave.
#[test]
fn a_subgraph_that_is_gone_is_replaced_by_entities_within_stale_if_error() {
    let subgraphs = Subgraphs::start();
    let entities = json!({"ttl_seconds": 1, "stale_if_error_seconds": 60});
    let envoy = envoy_with(&subgraphs, entities);
    let port = envoy.port;
    let ask = move |ids: &[u32]| http(port, Req::post_json(&products_batch(ids)).path("/graphql"));
    let stored = ask(&[1, 2]);
    assert_eq!(stored.status, 200);
    std::thread::sleep(std::time::Duration::from_millis(1200));
    assert_eq!(ask(&[3]).cache(), "MISS", "3 fresh, 1 and 2 expired");
    drop(subgraphs.process);

    let partial = ask(&[3, 1]);
    assert_eq!(partial.status, 200, "{}", partial.text());
    assert_eq!(partial.cache(), "STALE");
    assert_eq!(partial.json()["data"]["_entities"][1]["name"], "Product 1");
    let body = products_batch(&[2, 1]);
    let all_missing = concurrently(3, move |_| {
        http(port, Req::post_json(&body).path("/graphql"))
    });
    for a in &all_missing {
        assert_eq!(a.status, 200, "{}", a.text());
        assert_eq!(a.cache(), "STALE");
        assert_eq!(a.json()["data"]["_entities"][0]["name"], "Product 2");
    }
    // Never stored: an entity with no entry gets the subgraph's failure, as without the filter.
    let unknown = ask(&[5]);
    assert_eq!(unknown.status, 503, "{}", unknown.text());
}
