//! Redis dies and comes back: 424s fast while it is down (503 on /health), service again once it
//! is back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::{key, Redis, StartL2, L2};

#[test]
fn redis_down_is_424_fast_and_reconnects_when_it_is_back() {
    let mut redis = Redis::start();
    let l2 = L2::single(&redis, &[]);
    l2.wait_subscribed();
    let r = l2.get("/health");
    assert_eq!((r.status, r.text().as_str()), (200, "ok"));
    let k = key("failover");
    assert_eq!(l2.lookup(&k, "a", 5000, 0).l2(), "lead");

    redis.kill();
    let killed = Instant::now();
    let t = Instant::now();
    let r = l2.lookup(&k, "b", 5000, 0);
    let lookup_took = t.elapsed();
    assert_eq!(r.status, 424, "{}", r.text());
    // Health shares one PING a second: it turns 503 within that second (plus the PING's timeout).
    loop {
        let t = Instant::now();
        let r = l2.get("/health");
        assert!(
            t.elapsed() < Duration::from_millis(200),
            "{:?}",
            t.elapsed()
        );
        if r.status == 503 {
            break;
        }
        assert_eq!(r.status, 200);
        assert!(
            killed.elapsed() < Duration::from_millis(1500),
            "health stayed 200"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "redis killed: lookup 424 in {lookup_took:?}, health 503 after {:?}",
        killed.elapsed()
    );
    assert!(lookup_took < Duration::from_millis(200), "{lookup_took:?}");
    let marks = common::one_mark_batch();
    // Every verb, and a long-poll too, fails fast rather than hanging.
    for _ in 0..5 {
        let t = Instant::now();
        assert_eq!(l2.lookup(&k, "b", 5000, 2000).status, 424);
        assert_eq!(l2.store(&k, "a", 5000, b"v").status, 424);
        assert_eq!(l2.post("/v1/purge", b"p").status, 424);
        assert_eq!(l2.get("/v1/purges?after=0&wait_ms=1000").status, 424);
        assert_eq!(l2.get("/v1/purges?after=0&n=0&wait_ms=1000").status, 424);
        assert_eq!(l2.post("/v1/marks", &marks).status, 424);
        assert_eq!(l2.get("/v1/marks?cursor=0").status, 424);
        assert_eq!(l2.get("/health").status, 503);
        assert!(
            t.elapsed() < Duration::from_millis(1000),
            "{:?}",
            t.elapsed()
        );
    }
    assert!(l2.metric("l2_redis_errors_total") >= 20);
    assert!(l2.metric("l2_requests_total{verb=\"lookup\",outcome=\"error\"}") >= 6);
    assert_eq!(
        l2.metric("l2_requests_total{verb=\"marks\",outcome=\"error\"}"),
        5
    );
    assert_eq!(
        l2.metric("l2_requests_total{verb=\"snapshot\",outcome=\"error\"}"),
        5
    );

    redis.restart();
    let back = Instant::now();
    let recovered = loop {
        let r = l2.lookup(&k, "c", 5000, 0);
        if r.status == 200 {
            // The old lease died with the old Redis (no persistence): c leads.
            assert_eq!(r.l2(), "lead");
            break back.elapsed();
        }
        assert!(
            back.elapsed() < Duration::from_secs(5),
            "no recovery: {} {}",
            r.status,
            r.text()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    println!("redis restarted: lookups work again after {recovered:?}");
    let deadline = Instant::now() + Duration::from_secs(3);
    while l2.get("/health").status != 200 {
        assert!(Instant::now() < deadline, "health never came back");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The wake-up subscriber came back too: a waiter is woken by a store again.
    l2.wait_subscribed();
    let samples = common::lookup_store_wait(&l2, 3);
    common::report("after the restart", &samples);
}

#[test]
fn the_service_starts_before_redis_and_serves_once_it_is_up() {
    let port = common::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let l2 = L2::start(&["--redis", &url]);
    let t = Instant::now();
    assert_eq!(l2.get("/health").status, 503);
    assert_eq!(l2.lookup(&key("early"), "a", 1000, 0).status, 424);
    assert!(t.elapsed() < Duration::from_millis(400));
    let _redis = Redis::start_on(port, &[]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while l2.get("/health").status != 200 {
        assert!(Instant::now() < deadline, "never connected");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(l2.lookup(&key("late"), "a", 1000, 0).l2(), "lead");
}

#[test]
fn a_hung_redis_costs_the_redis_timeout_not_a_hang() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &["--redis-timeout-ms", "150"]);
    let k = key("hung");
    assert_eq!(l2.lookup(&k, "a", 5000, 0).l2(), "lead");
    // Redis accepts the commands and answers nothing for 1.5 s.
    redis.cmd(&[b"CLIENT", b"PAUSE", b"1500", b"ALL"]);
    let t = Instant::now();
    let r = l2.lookup(&k, "b", 5000, 0);
    let took = t.elapsed();
    assert_eq!(r.status, 424, "{}", r.text());
    assert!(
        took >= Duration::from_millis(140) && took < Duration::from_millis(400),
        "{took:?}"
    );
    // No health check before: its PING is fresh, and times out in 100 ms.
    let t = Instant::now();
    assert_eq!(l2.get("/health").status, 503);
    assert!(
        t.elapsed() < Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    println!("paused redis: lookup 424 in {took:?}");
    // Once Redis answers again, the late replies are discarded and the connection is in step.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = l2.lookup(&k, "b", 5000, 0);
        if r.status == 200 {
            assert_eq!(r.l2(), "busy");
            break;
        }
        assert!(Instant::now() < deadline, "never answered again");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(l2.store(&k, "a", 5000, b"after").status, 204);
    let r = l2.lookup(&k, "b", 5000, 0);
    assert_eq!((r.l2(), r.body.as_slice()), ("hit", &b"after"[..]));
}
