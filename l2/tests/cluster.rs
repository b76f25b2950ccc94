//! The service against a 3-master Redis Cluster.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{key, lookup_store_wait, report, Cluster, StartL2, L2};

#[test]
fn cluster_lookup_store_wait_and_purges() {
    let mut cluster = Cluster::start();
    let urls = cluster.urls();
    let l2 = L2::start(&["--redis-cluster", &urls]);
    // One wake-up subscriber per master.
    l2.wait_subscribed_n(3);
    assert_eq!(l2.get("/health").status, 200);
    // 20 keys spread over the slots of all three masters.
    let samples = lookup_store_wait(&l2, 20);
    report("3-master cluster", &samples);
    println!("cluster rounds (wake ms, store ms): {samples:.2?}");
    let sizes: Vec<redis::Value> = cluster.nodes.iter().map(|n| n.cmd(&[b"DBSIZE"])).collect();
    let populated = sizes
        .iter()
        .filter(|v| !matches!(v, redis::Value::Int(0)))
        .count();
    assert!(populated >= 2, "keys all on one master: {sizes:?}");
    // Woken by pub/sub (the cluster bus broadcasts PUBLISH), not by polling.
    assert!(l2.metric("l2_lookup_wakeups_total{source=\"notify\"}") >= 20);

    // Version mismatch and release on the cluster too.
    let k = key("cluster-version");
    // Written straight to the master that owns the key's slot (the others answer MOVED).
    let written = cluster.nodes.iter().any(|n| {
        let client = redis::Client::open(n.url()).unwrap();
        let mut c = client.get_connection().unwrap();
        redis::cmd("SET")
            .arg(format!("gc:{{{k}}}:v"))
            .arg(b"\x07old".as_slice())
            .query::<()>(&mut c)
            .is_ok()
    });
    assert!(written, "no master owns the slot");
    assert_eq!(l2.lookup(&k, "a", 5000, 0).l2(), "lead");
    assert_eq!(
        l2.post(&format!("/v1/release?key={k}&owner=a"), b"").status,
        204
    );
    assert_eq!(l2.lookup(&k, "b", 5000, 0).l2(), "lead");

    let r = l2.post("/v1/purge", b"entity:User:1");
    assert_eq!(r.status, 200, "{}", r.text());
    let v: serde_json::Value = serde_json::from_slice(&l2.get("/v1/purges?after=0").body).unwrap();
    assert_eq!(v["entries"][0]["data"], "ZW50aXR5OlVzZXI6MQ==");
    // The log, its generation and its snapshot share one slot: the marks' scripts run there.
    let r = l2.post("/v1/marks", &common::one_mark_batch());
    assert_eq!(r.status, 200, "{}", r.text());
    let added = l2_proto::marks::MarksAdded::decode(&r.body).unwrap();
    assert_eq!(added.n, 2, "numbered after the old verb's record");
    let r = l2.get("/v1/marks?cursor=0");
    let page = l2_proto::marks::MarksPage::decode(&r.body).unwrap();
    assert_eq!((page.entries.len(), page.n), (1, 2));
    let r = l2.get(&format!("/v1/purges?after=0&gen={}&n=0", added.generation));
    let read = l2_proto::purges::PurgesAnswer::decode(&r.body).unwrap();
    assert_eq!((read.gap, read.entries.len(), read.n), (false, 2, Some(2)));

    // A master dies: no request hangs; keys on the surviving masters keep working, keys on the
    // dead one answer 424 (not 5xx: Envoy's outlier detection must not eject healthy replicas),
    // and /health stays 200 (some master answers).
    cluster.nodes[0].kill();
    let keys: Vec<String> = (0..30).map(|i| key(&format!("after-kill{i}"))).collect();
    let mut ok = Vec::new();
    let mut failed = Vec::new();
    for k in &keys {
        let t = std::time::Instant::now();
        let r = l2.lookup(k, "a", 5000, 0);
        let took = t.elapsed();
        assert!(took < std::time::Duration::from_millis(500), "{took:?}");
        match r.status {
            200 => ok.push(k.clone()),
            424 => failed.push(k.clone()),
            s => panic!("status {s}: {}", r.text()),
        }
    }
    println!(
        "one master killed: {} lookups served, {} answered 424",
        ok.len(),
        failed.len()
    );
    assert!(!ok.is_empty(), "the surviving masters stopped serving");
    assert!(!failed.is_empty(), "no key on the dead master among 30");
    // The same keys, again: per key, not per request.
    for k in ok.iter().take(5) {
        assert_eq!(l2.lookup(k, "a", 5000, 0).status, 200);
    }
    for k in failed.iter().take(3) {
        let r = l2.lookup(k, "a", 5000, 0);
        assert_eq!(r.status, 424, "{}", r.text());
    }
    // Across more than one health cache period.
    for _ in 0..6 {
        let r = l2.get("/health");
        assert_eq!((r.status, r.text().as_str()), (200, "ok"));
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    assert!(l2.metric("l2_requests_total{verb=\"lookup\",outcome=\"error\"}") >= 4);
}
