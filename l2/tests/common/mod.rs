//! The L2 service's test harness: testkit's Redis, client and service process (Cargo's build of
//! it, [`BIN`]), and what these tests share: keys, and the lookup / store / wait flow.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

#[allow(unused_imports)] // each test binary uses its own part
pub use testkit::l2::{http, http_raw, DEV_SECRET};
#[allow(unused_imports)]
pub use testkit::{free_port, scratch_dir, Cluster, Redis, Resp, L2};

/// Cargo's build of the service for this package's tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_graphql-cache-l2");

/// The service as [`BIN`] (testkit's [`L2::start_bin`] starts the binary it is given).
pub trait StartL2 {
    fn start(args: &[&str]) -> L2;
    fn single(redis: &Redis, extra: &[&str]) -> L2;
}

/// The Redis round-trip cap the tests give the service unless they set their own. The shipped
/// 200 ms is a latency choice; on a machine loaded past its cores (two suites, a CI build and two
/// busy loops beside each other) one Lua script of marks outlasted it, and the service answered
/// 424 where `marks::snapshot_pages_hold_every_field_with_the_tip_and_sequence_of_the_log`
/// asserts what it stores. Tests of the cap itself pass `--redis-timeout-ms`.
const TEST_REDIS_TIMEOUT_MS: &str = "2000";

impl StartL2 for L2 {
    fn start(args: &[&str]) -> L2 {
        let mut args = args.to_vec();
        if !args.contains(&"--redis-timeout-ms") {
            args.extend_from_slice(&["--redis-timeout-ms", TEST_REDIS_TIMEOUT_MS]);
        }
        L2::start_bin(Path::new(BIN), &args)
    }

    fn single(redis: &Redis, extra: &[&str]) -> L2 {
        let url = redis.url();
        let mut args = vec!["--redis", url.as_str()];
        args.extend_from_slice(extra);
        L2::start(&args)
    }
}

/// A mark as the filter sends it: a seal (bytes `seal`: the service reads marks, it does not
/// check seals) and a purge record of one target.
pub fn mark(at_us: u64, target: l2_proto::purge::Target, soft: bool, seal: u8) -> Vec<u8> {
    let record = l2_proto::purge::PurgeRecord {
        at_us,
        targets: vec![(target, soft)],
    };
    let mut sealed = vec![seal; l2_proto::marks::SEAL_HEADER_BYTES];
    sealed.extend_from_slice(&record.encode().unwrap());
    sealed
}

/// A `POST /v1/marks` body of one mark (of everything, at 1 µs).
pub fn one_mark_batch() -> Vec<u8> {
    let m = mark(1, l2_proto::purge::Target::All, false, 0);
    l2_proto::marks::MarksBatch::encode(60_000, &[m]).unwrap()
}

/// A fresh random-looking 64-hex key.
pub fn key(tag: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::new();
    let state = std::collections::hash_map::RandomState::new();
    for i in 0..4 {
        let mut h = state.build_hasher();
        h.write(tag.as_bytes());
        h.write_usize(i);
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

pub fn report(what: &str, samples: &[(f64, f64)]) {
    let wake: Vec<f64> = samples.iter().map(|s| s.0).collect();
    let store: Vec<f64> = samples.iter().map(|s| s.1).collect();
    let max = wake.iter().cloned().fold(0.0, f64::max);
    println!(
        "{what}: wake-up latency (store sent -> waiter answered) p50 {:.2} ms, max {:.2} ms over {} rounds; the store's own round trip p50 {:.2} ms",
        median(wake),
        max,
        samples.len(),
        median(store)
    );
}

/// The lookup / store / wait flow on any backend: empty key → lead, second owner → busy, a
/// waiter is woken by the leader's store and gets the value. Returns, per round, in ms: the wake-up
/// latency (store request sent → waiter's answer received) and the store's own round trip.
pub fn lookup_store_wait(l2: &L2, rounds: usize) -> Vec<(f64, f64)> {
    let mut latencies = Vec::new();
    for round in 0..rounds {
        let k = key(&format!("lsw{round}"));
        let r = l2.lookup(&k, "node-a", 5000, 0);
        assert_eq!((r.status, r.l2()), (200, "lead"), "{}", r.text());
        assert!(r.body.is_empty());
        let r = l2.lookup(&k, "node-b", 5000, 0);
        assert_eq!((r.status, r.l2()), (200, "busy"), "{}", r.text());

        let before = l2.metric("l2_long_polls_in_flight");
        let addr = l2.addr;
        let k2 = k.clone();
        let waiter = std::thread::spawn(move || {
            let r = http(
                addr,
                "POST",
                &format!("/v1/lookup?key={k2}&lease_ms=5000&owner=node-c&wait_ms=3000"),
                b"",
            );
            (r, Instant::now())
        });
        l2.wait_in_flight(before + 1);
        let value = format!("{{\"data\":{{\"round\":{round}}}}}");
        let started = Instant::now();
        let s = l2.store(&k, "node-a", 60_000, value.as_bytes());
        let stored = Instant::now();
        assert_eq!(s.status, 204, "{}", s.text());
        let (r, woke) = waiter.join().unwrap();
        assert_eq!((r.status, r.l2()), (200, "hit"), "{}", r.text());
        assert_eq!(r.body, value.as_bytes());
        assert!(woke.duration_since(started) < Duration::from_secs(1));
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        latencies.push((
            ms(woke.duration_since(started)),
            ms(stored.duration_since(started)),
        ));

        // The leader's lease went with its store: the value now hits for everyone.
        let r = l2.lookup(&k, "node-d", 5000, 0);
        assert_eq!((r.status, r.l2()), (200, "hit"));
        assert_eq!(r.body, value.as_bytes());
    }
    latencies
}
