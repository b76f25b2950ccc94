//! The service against one Redis node: every verb, long-polls, limits, HTTP/2, metrics, flags.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::{http, key, lookup_store_wait, report, Redis, StartL2, L2};

#[test]
fn lookup_lead_busy_then_waiter_woken_by_store() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &[]);
    l2.wait_subscribed();
    let samples = lookup_store_wait(&l2, 20);
    report("single node", &samples);
    assert_eq!(
        l2.metric("l2_requests_total{verb=\"lookup\",outcome=\"lead\"}"),
        20
    );
    assert_eq!(l2.metric("l2_long_polls_total{verb=\"lookup\"}"), 20);
    assert_eq!(l2.metric("l2_long_polls_in_flight"), 0);
    assert!(l2.metric("l2_lookup_wakeups_total{source=\"notify\"}") >= 20);
    // Stored with the format version byte in front, under the hash-tagged name.
    let k = key("raw");
    assert_eq!(l2.lookup(&k, "a", 1000, 0).l2(), "lead");
    assert_eq!(l2.store(&k, "a", 10_000, b"xyz").status, 204);
    let raw = redis.cmd(&[b"GET", format!("gc:{{{k}}}:v").as_bytes()]);
    assert_eq!(raw, redis::Value::BulkString(b"\x01xyz".to_vec()));
    assert_eq!(
        redis.cmd(&[b"EXISTS", format!("gc:{{{k}}}:l").as_bytes()]),
        redis::Value::Int(0)
    );
    let ttl = l2.lookup(&k, "b", 1000, 0);
    let ttl: i64 = ttl.header("x-l2-ttl-ms").unwrap().parse().unwrap();
    assert!(ttl > 0 && ttl <= 10_000, "{ttl}");
}

#[test]
fn store_over_the_cap_is_413_and_writes_nothing() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &["--max-value-bytes", "1000"]);
    let k = key("cap");
    assert_eq!(l2.lookup(&k, "a", 5000, 0).l2(), "lead");
    let r = l2.store(&k, "a", 60_000, &[b'x'; 1001]);
    assert_eq!(r.status, 413, "{}", r.text());
    // Nothing written, and the lease is still a's.
    assert_eq!(l2.lookup(&k, "b", 5000, 0).l2(), "busy");
    assert_eq!(
        redis.cmd(&[b"EXISTS", format!("gc:{{{k}}}:v").as_bytes()]),
        redis::Value::Int(0)
    );
    // Exactly the cap is fine.
    assert_eq!(l2.store(&k, "a", 60_000, &[b'x'; 1000]).status, 204);
    let r = l2.lookup(&k, "b", 5000, 0);
    assert_eq!((r.l2(), r.body.len()), ("hit", 1000));
    assert_eq!(
        l2.metric("l2_requests_total{verb=\"store\",outcome=\"too_large\"}"),
        1
    );
}

#[test]
fn a_value_of_another_version_reads_as_absent() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &[]);
    let k = key("version");
    let name = format!("gc:{{{k}}}:v");
    redis.cmd(&[b"SET", name.as_bytes(), b"\x02{\"future\":true}"]);
    let r = l2.lookup(&k, "a", 5000, 0);
    assert_eq!((r.status, r.l2()), (200, "lead"));
    // An empty value has no version byte at all: absent too.
    let k2 = key("empty");
    redis.cmd(&[b"SET", format!("gc:{{{k2}}}:v").as_bytes(), b""]);
    assert_eq!(l2.lookup(&k2, "a", 5000, 0).l2(), "lead");
    // Storing replaces it with a current-version value.
    assert_eq!(l2.store(&k, "a", 60_000, b"now").status, 204);
    let r = l2.lookup(&k, "b", 5000, 0);
    assert_eq!((r.l2(), r.body.as_slice()), ("hit", &b"now"[..]));
}

#[test]
fn release_lets_the_next_lookup_lead_and_wakes_waiters() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &[]);
    l2.wait_subscribed();
    let k = key("release");
    assert_eq!(l2.lookup(&k, "a", 30_000, 0).l2(), "lead");
    // Someone else's release does nothing.
    let r = l2.post(&format!("/v1/release?key={k}&owner=b"), b"");
    assert_eq!(r.status, 204);
    assert_eq!(l2.lookup(&k, "b", 30_000, 0).l2(), "busy");
    // The leader's release: the next lookup leads.
    assert_eq!(
        l2.post(&format!("/v1/release?key={k}&owner=a"), b"").status,
        204
    );
    assert_eq!(l2.lookup(&k, "b", 30_000, 0).l2(), "lead");

    // A waiter is woken by the leader's release and takes the lease in the same script.
    let addr = l2.addr;
    let k2 = k.clone();
    let waiter = std::thread::spawn(move || {
        let t = Instant::now();
        let r = http(
            addr,
            "POST",
            &format!("/v1/lookup?key={k2}&lease_ms=30000&owner=c&wait_ms=3000"),
            b"",
        );
        (r, t.elapsed())
    });
    l2.wait_in_flight(1);
    let released = Instant::now();
    assert_eq!(
        l2.post(&format!("/v1/release?key={k}&owner=b"), b"").status,
        204
    );
    let (r, _) = waiter.join().unwrap();
    assert_eq!((r.status, r.l2()), (200, "lead"));
    let woke = released.elapsed();
    println!(
        "release -> waiter leads: {:.2} ms",
        woke.as_secs_f64() * 1000.0
    );
    assert!(woke < Duration::from_millis(200), "{woke:?}");
    assert_eq!(l2.lookup(&k, "d", 30_000, 0).l2(), "busy");
    assert_eq!(
        l2.metric("l2_requests_total{verb=\"release\",outcome=\"released\"}"),
        2
    );
    assert_eq!(
        l2.metric("l2_requests_total{verb=\"release\",outcome=\"not_owner\"}"),
        1
    );
}

#[test]
fn a_lease_that_expires_hands_the_waiter_the_lead() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &[]);
    l2.wait_subscribed();
    let k = key("expiry");
    assert_eq!(l2.lookup(&k, "a", 300, 0).l2(), "lead");
    let t = Instant::now();
    let r = l2.lookup(&k, "b", 5000, 3000);
    let took = t.elapsed();
    assert_eq!((r.status, r.l2()), (200, "lead"));
    println!("expired lease -> waiter leads after {took:?}");
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_millis(1000),
        "{took:?}"
    );
}

#[test]
fn a_wait_ends_busy_at_its_deadline_capped_by_max_wait() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &["--max-wait-ms", "400"]);
    let k = key("deadline");
    assert_eq!(l2.lookup(&k, "a", 60_000, 0).l2(), "lead");
    let t = Instant::now();
    let r = l2.lookup(&k, "b", 60_000, 150);
    let took = t.elapsed();
    assert_eq!(r.l2(), "busy");
    assert!(
        took >= Duration::from_millis(150) && took < Duration::from_millis(600),
        "{took:?}"
    );
    let t = Instant::now();
    let r = l2.lookup(&k, "b", 60_000, 60_000);
    let took = t.elapsed();
    assert_eq!(r.l2(), "busy");
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_millis(900),
        "{took:?}"
    );
}

#[test]
fn a_waiter_survives_the_loss_of_the_subscriber_connection() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &[]);
    l2.wait_subscribed();
    let k = key("subloss");
    assert_eq!(l2.lookup(&k, "a", 30_000, 0).l2(), "lead");
    let addr = l2.addr;
    let k2 = k.clone();
    let waiter = std::thread::spawn(move || {
        http(
            addr,
            "POST",
            &format!("/v1/lookup?key={k2}&lease_ms=30000&owner=b&wait_ms=3000"),
            b"",
        )
    });
    l2.wait_in_flight(1);
    redis.cmd(&[b"CLIENT", b"KILL", b"TYPE", b"pubsub"]);
    assert_eq!(l2.store(&k, "a", 60_000, b"v").status, 204);
    let r = waiter.join().unwrap();
    assert_eq!((r.l2(), r.body.as_slice()), ("hit", &b"v"[..]));
    l2.wait_subscribed();
    assert!(l2.metric("l2_pubsub_subscriptions_total") >= 2);
}

#[test]
fn purge_and_purges_round_trip_with_cursor_and_long_poll() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &[]);
    let empty: serde_json::Value =
        serde_json::from_slice(&l2.get("/v1/purges?after=0").body).unwrap();
    assert_eq!(empty["last"], "0");
    assert_eq!(empty["entries"].as_array().unwrap().len(), 0);

    let mut ids = Vec::new();
    for body in [&b"type:User"[..], b"\x00\xffbinary"] {
        let r = l2.post("/v1/purge", body);
        assert_eq!(r.status, 200, "{}", r.text());
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        ids.push(v["id"].as_str().unwrap().to_string());
    }
    let all: serde_json::Value =
        serde_json::from_slice(&l2.get("/v1/purges?after=0").body).unwrap();
    let entries = all["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0]["id"], ids[0].as_str());
    assert_eq!(entries[0]["data"], "dHlwZTpVc2Vy");
    assert_eq!(entries[1]["data"], "AP9iaW5hcnk=");
    assert_eq!(all["last"], ids[1].as_str());
    assert_eq!(all["gap"], false);
    let after_first: serde_json::Value =
        serde_json::from_slice(&l2.get(&format!("/v1/purges?after={}", ids[0])).body).unwrap();
    assert_eq!(after_first["entries"].as_array().unwrap().len(), 1);
    assert_eq!(after_first["entries"][0]["id"], ids[1].as_str());
    // `$`: the cursor of "now", no entries.
    let now: serde_json::Value =
        serde_json::from_slice(&l2.get("/v1/purges?after=$").body).unwrap();
    assert_eq!(now["last"], ids[1].as_str());
    assert_eq!(now["entries"].as_array().unwrap().len(), 0);

    // Nothing new: an empty answer at the end of the wait.
    let t = Instant::now();
    let r = l2.get(&format!("/v1/purges?after={}&wait_ms=150", ids[1]));
    assert!(t.elapsed() >= Duration::from_millis(150));
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["last"], ids[1].as_str());
    assert_eq!(v["entries"].as_array().unwrap().len(), 0);

    // A long-poll woken by a new purge.
    let addr = l2.addr;
    let cursor = ids[1].clone();
    let poller = std::thread::spawn(move || {
        let r = http(
            addr,
            "GET",
            &format!("/v1/purges?after={cursor}&wait_ms=3000"),
            b"",
        );
        (r, Instant::now())
    });
    l2.wait_in_flight(1);
    let sent = Instant::now();
    let r = l2.post("/v1/purge", b"field:Query.me");
    let id: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let (r, got) = poller.join().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["entries"].as_array().unwrap().len(), 1);
    assert_eq!(v["entries"][0]["id"], id["id"]);
    assert_eq!(v["last"], id["id"]);
    let took = got.duration_since(sent);
    println!("purge -> purges long-poll answered: {took:?}");
    assert!(took < Duration::from_millis(500), "{took:?}");

    // Too large, and trimming reported as a gap.
    assert_eq!(l2.post("/v1/purge", &vec![b'p'; 64 * 1024 + 1]).status, 413);
    assert_eq!(l2.post("/v1/purge", &vec![b'p'; 64 * 1024]).status, 200);
    for _ in 0..3 {
        redis.cmd(&[b"XADD", b"gc:purges", b"MAXLEN", b"1", b"*", b"d", b"x"]);
    }
    let v: serde_json::Value =
        serde_json::from_slice(&l2.get(&format!("/v1/purges?after={}", ids[1])).body).unwrap();
    assert_eq!(v["gap"], true);
    let r = l2.get("/v1/purges?after=nope");
    assert_eq!(r.status, 400);
    assert!(r.text().contains("`after`"), "{}", r.text());
}

#[test]
fn bad_or_missing_parameters_are_400_naming_them() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &[]);
    let k = key("params");
    let cases = [
        ("/v1/lookup?lease_ms=1&owner=a".to_string(), "`key`"),
        (
            format!("/v1/lookup?key={}&lease_ms=1&owner=a", k.to_uppercase()),
            "`key`",
        ),
        (format!("/v1/lookup?key={k}&owner=a"), "`lease_ms`"),
        (
            format!("/v1/lookup?key={k}&lease_ms=0&owner=a"),
            "`lease_ms`",
        ),
        (format!("/v1/lookup?key={k}&lease_ms=10"), "`owner`"),
        (
            format!("/v1/lookup?key={k}&lease_ms=10&owner=a&wait_ms=-1"),
            "`wait_ms`",
        ),
        (
            format!("/v1/lookup?key={k}&key={k}&lease_ms=10&owner=a"),
            "`key`",
        ),
        (format!("/v1/release?key={k}"), "`owner`"),
    ];
    for (path, name) in cases {
        let r = l2.post(&path, b"");
        assert_eq!(r.status, 400, "{path}");
        assert!(r.text().contains(name), "{path}: {}", r.text());
    }
    let r = l2.put(&format!("/v1/store?key={k}&owner=a"), b"v");
    assert_eq!(r.status, 400);
    assert!(r.text().contains("`ttl_ms`"), "{}", r.text());
    assert_eq!(l2.get("/v1/lookup").status, 405);
    assert_eq!(l2.get("/nope").status, 404);
}

#[test]
fn http2_prior_knowledge_on_the_same_port() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &[]);
    l2.wait_subscribed();
    let addr = l2.addr;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        use http_body_util::{BodyExt, Full};
        use hyper::body::Bytes;
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (sender, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(tcp),
        )
        .await
        .unwrap();
        tokio::spawn(conn);
        let send = |method: &str, path: String, body: &'static [u8]| {
            let mut sender = sender.clone();
            let req = hyper::Request::builder()
                .method(method)
                .uri(format!("http://{addr}{path}"))
                .header("authorization", format!("Bearer {}", common::DEV_SECRET))
                .body(Full::new(Bytes::from_static(body)))
                .unwrap();
            async move {
                let resp = sender.send_request(req).await.unwrap();
                assert_eq!(resp.version(), hyper::Version::HTTP_2);
                let status = resp.status().as_u16();
                let tag = resp
                    .headers()
                    .get("x-l2")
                    .map(|v| v.to_str().unwrap().to_string());
                let body = resp.into_body().collect().await.unwrap().to_bytes();
                (status, tag, body)
            }
        };
        let (status, _, body) = send("GET", "/health".into(), b"").await;
        assert_eq!((status, &body[..]), (200, &b"ok"[..]));
        let k = key("h2");
        let (_, tag, _) = send(
            "POST",
            format!("/v1/lookup?key={k}&lease_ms=5000&owner=a"),
            b"",
        )
        .await;
        assert_eq!(tag.as_deref(), Some("lead"));
        // A long-poll and the store that wakes it, multiplexed on the one connection.
        let waiter = tokio::spawn(send(
            "POST",
            format!("/v1/lookup?key={k}&lease_ms=5000&owner=b&wait_ms=3000"),
            b"",
        ));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (status, _, _) = send(
            "PUT",
            format!("/v1/store?key={k}&ttl_ms=60000&owner=a"),
            b"over h2",
        )
        .await;
        assert_eq!(status, 204);
        let (status, tag, body) = waiter.await.unwrap();
        assert_eq!(
            (status, tag.as_deref(), &body[..]),
            (200, Some("hit"), &b"over h2"[..])
        );
    });
}

#[test]
fn metrics_are_prometheus_text() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &[]);
    let k = key("metrics");
    l2.lookup(&k, "a", 1000, 0);
    l2.lookup(&k, "b", 1000, 0);
    l2.store(&k, "a", 1000, b"v");
    l2.lookup(&k, "b", 1000, 0);
    l2.get("/health");
    let r = l2.get("/metrics");
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    for (series, n) in [
        ("l2_requests_total{verb=\"lookup\",outcome=\"lead\"}", 1),
        ("l2_requests_total{verb=\"lookup\",outcome=\"busy\"}", 1),
        ("l2_requests_total{verb=\"lookup\",outcome=\"hit\"}", 1),
        ("l2_requests_total{verb=\"store\",outcome=\"stored\"}", 1),
        ("l2_requests_total{verb=\"health\",outcome=\"ok\"}", 1),
        ("l2_redis_errors_total", 0),
        ("l2_long_polls_in_flight", 0),
    ] {
        assert_eq!(l2.metric(series), n, "{series}");
    }
    let text = r.text();
    assert!(text.contains("# TYPE l2_long_polls_in_flight gauge"));
    assert!(text.contains("# TYPE l2_requests_total counter"));
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let cases: [(&[&str], &str); 6] = [
        (&[], "--redis"),
        (
            &[
                "--redis",
                "redis://127.0.0.1:1",
                "--redis-cluster",
                "redis://127.0.0.1:2",
            ],
            "--redis-cluster",
        ),
        (&["--redis", "http://x"], "--redis"),
        (
            &[
                "--redis",
                "redis://127.0.0.1:1",
                "--max-value-bytes",
                "lots",
            ],
            "--max-value-bytes",
        ),
        (
            &["--redis", "redis://127.0.0.1:1", "--listen", "here"],
            "--listen",
        ),
        (
            &["--redis", "redis://127.0.0.1:1", "--frobnicate"],
            "--frobnicate",
        ),
    ];
    for (args, flag) in cases {
        let out = std::process::Command::new(common::BIN)
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}
