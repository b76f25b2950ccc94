//! A fleet that shares one L2: Redis (one node or a 3-master Cluster), the `graphql-cache-l2`
//! service, one origin and N Envoys on the shipped `envoy/fleet.yaml`. Dropping a [`Fleet`] kills
//! every process it started.

use std::time::{Duration, Instant};

use testkit::{
    http, l2_bin, shipped_config, Backend, Envoy, Origin, Redis, RedisBackend, Req, Resp, L2,
};

/// The purge API as `envoy/fleet.yaml` configures it.
pub const PURGE_PATH: &str = "/graphql-cache/purge";
pub const PURGE_TOKEN: &str = "demo-purge-token-change-me";

/// Followers of the purge log in one Envoy, once caught up: one, whatever its workers.
const PURGE_LOG_READERS: u64 = 1;

/// The line of fleet.yaml's filter configuration after which a test adds its own settings.
const CONFIG_ANCHOR: &str = r#""debug_headers": true,"#;

/// The names of the L2 values a Redis node holds (`gc:{<name>}:v`); none when it does not answer.
pub fn l2_value_names(node: &Redis) -> std::collections::HashSet<Vec<u8>> {
    node.try_cmd(&["KEYS", "gc:{*}:v"])
        .ok()
        .and_then(|v| redis::from_redis_value::<Vec<Vec<u8>>>(&v).ok())
        .unwrap_or_default()
        .into_iter()
        .collect()
}

#[derive(Clone)]
pub struct FleetOptions {
    pub backend: Backend,
    pub envoys: usize,
    pub origin_args: Vec<String>,
    /// JSON members (each followed by a comma) added to fleet.yaml's filter configuration.
    pub extra_config: String,
}

impl FleetOptions {
    pub fn new(backend: Backend, envoys: usize) -> FleetOptions {
        FleetOptions {
            backend,
            envoys,
            origin_args: Vec::new(),
            extra_config: String::new(),
        }
    }
}

/// Fields drop in order: the Envoys stop before the service they call, the service before Redis.
pub struct Fleet {
    pub envoys: Vec<Envoy>,
    pub l2: L2,
    pub redis: RedisBackend,
    pub origin: Origin,
    bootstrap: String,
}

impl Fleet {
    pub fn start(opts: &FleetOptions) -> Fleet {
        let redis = RedisBackend::start(opts.backend);
        let args: Vec<&str> = opts.origin_args.iter().map(String::as_str).collect();
        let origin = Origin::start_with(&args);
        let [flag, url] = redis.l2_args();
        let l2 = L2::start_bin(&l2_bin(), &[flag.as_str(), url.as_str()]);
        // Envoys started before the service reaches Redis would fail their first health check
        // and go without the L2 for a second.
        wait_l2_service_healthy(&l2);
        let bootstrap = fleet_config(origin.port, l2.addr.port(), &opts.extra_config);
        let mut fleet = Fleet {
            envoys: Vec::new(),
            l2,
            redis,
            origin,
            bootstrap,
        };
        for _ in 0..opts.envoys {
            fleet.add_envoy();
        }
        fleet
    }

    /// Starts one more Envoy of the fleet (a node joining late) and returns it.
    pub fn add_envoy(&mut self) -> &Envoy {
        self.add_envoy_timed().0
    }

    /// [`Fleet::add_envoy`], and how long it took from Envoy being ready (its listeners up) to
    /// using its L2 (the purge state learnt, the log followed to its end).
    pub fn add_envoy_timed(&mut self) -> (&Envoy, Duration) {
        let envoy = Envoy::start_bootstrap(&self.bootstrap, 2);
        let ready = Instant::now();
        envoy.wait_l2_ready();
        let took = ready.elapsed();
        self.envoys.push(envoy);
        (self.envoys.last().unwrap(), took)
    }

    /// Waits until the L2 service has answered `n` stores in all (the filter writes to the L2
    /// after it answers the client, so a test that reads through another Envoy waits for this).
    pub fn wait_l2_stores(&self, n: i64) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.l2_stores() < n {
            assert!(
                Instant::now() < deadline,
                "the L2 service stored {} answers, not {n}: the filter did not write to it",
                self.l2_stores()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stores the L2 service has answered.
    pub fn l2_stores(&self) -> i64 {
        self.l2
            .metric(r#"l2_requests_total{verb="store",outcome="stored"}"#)
    }

    /// Lookups the L2 service answered with a value.
    pub fn l2_lookup_hits(&self) -> i64 {
        self.l2
            .metric(r#"l2_requests_total{verb="lookup",outcome="hit"}"#)
    }

    /// A filter counter summed over the fleet.
    pub fn counter(&self, name: &str) -> u64 {
        self.envoys.iter().map(|e| e.counter(name)).sum()
    }
}

/// Waits until the L2 service answers `/health` (it reaches Redis), at most 30 s: this asserts
/// that it reconnects on its own, not how fast. A Cluster whose three masters all restarted took
/// longer than 10 s on a 2-core machine running two builds besides the suite.
pub fn wait_l2_service_healthy(l2: &L2) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while l2.get("/health").status != 200 {
        assert!(
            Instant::now() < deadline,
            "the L2 service never reached Redis"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The L2 lookup budget the tests' fleets use. The shipped 50 ms is a latency choice for
/// production; on a machine loaded past its cores (the suite beside builds and busy loops), one
/// round trip through Envoy, the L2 service and Redis took longer, and a lookup dropped by its
/// budget goes to the origin by design: a `MISS` where a test asserts what the fleet shares (seen
/// in `private_entries_stay_with_their_user_across_envoys::cluster`, run 1 of the loaded loop).
/// Tests of the budget itself set their own.
const TEST_L2_TIMEOUT: &str = r#""timeout_ms": 1000,"#;

/// envoy/fleet.yaml as shipped but for ports, the filter's path, the L2 lookup budget
/// ([`TEST_L2_TIMEOUT`]) and `extra_config`.
pub fn fleet_config(origin_port: u16, l2_port: u16, extra_config: &str) -> String {
    let text = shipped_config("fleet.yaml", origin_port);
    let substitutions = [
        ("port_value: 8090", format!("port_value: {l2_port}")),
        (r#""timeout_ms": 50,"#, TEST_L2_TIMEOUT.to_string()),
        (CONFIG_ANCHOR, format!("{CONFIG_ANCHOR} {extra_config}")),
    ];
    substitutions.iter().fold(text, |t, (from, to)| {
        assert!(t.contains(from), "fleet.yaml no longer contains {from:?}");
        t.replace(from, to)
    })
}

fn purge_at(envoy: &Envoy, path: &str, selectors: &str) -> Resp {
    http(
        envoy.listener_port("graphql_internal"),
        Req::post_json(selectors)
            .path(path)
            .header("authorization", &format!("Bearer {PURGE_TOKEN}")),
    )
}

/// What a test sees of one Envoy of the fleet beyond [`Envoy`]'s own helpers.
pub trait FleetEnvoy {
    /// Health flags of every L2 host, from `/clusters`.
    fn l2_health_flags(&self) -> Vec<String>;

    /// Waits until this Envoy uses its L2: both L2 clusters have a healthy host (the filter sends
    /// nothing to an unhealthy one), and every follower of the purge log has read it to its end
    /// and waits on it with a long-poll (until then a node must not trust values from the L2).
    fn wait_l2_ready(&self);

    /// A purge through this Envoy's internal listener, as an operator sends it.
    fn purge(&self, selectors: &str) -> Resp;

    /// [`FleetEnvoy::purge`], answered once the fleet's purge log holds it (`?wait_ms=`).
    fn purge_committed(&self, selectors: &str) -> Resp;

    /// Connections each worker accepted on the public listener (the internal one not counted).
    fn public_worker_connections(&self) -> Vec<u64>;
}

impl FleetEnvoy for Envoy {
    fn l2_health_flags(&self) -> Vec<String> {
        let r = http(self.admin_port, Req::get("/clusters"));
        r.text()
            .lines()
            .filter(|l| l.starts_with("graphql_cache_l2"))
            .filter_map(|l| l.split_once("::health_flags::").map(|(_, f)| f.to_string()))
            .collect()
    }

    fn wait_l2_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let active = "cluster.graphql_cache_l2_wait.upstream_rq_active";
        let reads = "cluster.graphql_cache_l2_wait.upstream_rq_total";
        loop {
            let flags = self.l2_health_flags();
            let healthy = flags.len() == 2 && flags.iter().all(|f| f == "healthy");
            let polls = self.stat(active);
            // The first read of the log after the snapshot does not wait (the Envoy is not caught
            // up, and trusts no L2 hit yet); only once it came back is the read in flight the
            // long-poll of an Envoy that uses its L2. Under load that first read was seen in
            // flight, and the test's next request was a MISS.
            if healthy && polls >= PURGE_LOG_READERS && self.stat(reads) >= 2 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "Envoy not using its L2: hosts {flags:?}, {polls} purge-log long-polls \
                 (expected {PURGE_LOG_READERS})"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn purge(&self, selectors: &str) -> Resp {
        purge_at(self, PURGE_PATH, selectors)
    }

    fn purge_committed(&self, selectors: &str) -> Resp {
        purge_at(self, &format!("{PURGE_PATH}?wait_ms=5000"), selectors)
    }

    fn public_worker_connections(&self) -> Vec<u64> {
        let r = http(
            self.admin_port,
            Req::get("/stats?filter=^listener[.]graphql[.]worker_.*downstream_cx_total$"),
        );
        r.text()
            .lines()
            .filter_map(|l| l.rsplit(": ").next()?.trim().parse().ok())
            .collect()
    }
}
