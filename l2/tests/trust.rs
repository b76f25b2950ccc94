//! "A fleet you can trust": authentication, capped leases, the purge log's generations and gaps,
//! what an idle long-poll costs Redis, and the limits on waiting and buffered bytes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{http, http_raw, key, Redis, StartL2, DEV_SECRET, L2};

fn json(r: &common::Resp) -> serde_json::Value {
    assert_eq!(r.status, 200, "{}", r.text());
    serde_json::from_slice(&r.body).unwrap()
}

#[test]
fn every_route_but_health_needs_an_accepted_secret() {
    let redis = Redis::start();
    let dir = common::scratch_dir("secrets");
    let file = dir.join("secrets");
    // Rotation: the old and the new secret are both accepted.
    std::fs::write(&file, format!("old-secret-0123456789\n{DEV_SECRET}\n")).unwrap();
    let url = redis.url();
    let l2 = L2::start(&[
        "--redis",
        &url,
        "--auth-secret-file",
        file.to_str().unwrap(),
    ]);
    let k = key("auth");
    let lookup = format!("/v1/lookup?key={k}&lease_ms=1000&owner=a");
    for (path, method) in [
        (lookup.as_str(), "POST"),
        ("/v1/purge", "POST"),
        ("/v1/purges?after=0", "GET"),
        ("/v1/marks", "POST"),
        ("/v1/marks?cursor=0", "GET"),
        ("/metrics", "GET"),
    ] {
        let r = http_raw(l2.addr, method, path, b"", "");
        assert_eq!(r.status, 401, "{path}");
        assert!(r.text().contains("authorization"), "{}", r.text());
        let r = http_raw(
            l2.addr,
            method,
            path,
            b"",
            "authorization: Bearer wrong-secret-0123456789\r\n",
        );
        assert_eq!(
            (r.status, r.text().as_str()),
            (401, "wrong secret"),
            "{path}"
        );
    }
    let r = http_raw(l2.addr, "GET", "/health", b"", "");
    assert_eq!(r.status, 200);
    let r = http_raw(
        l2.addr,
        "POST",
        &lookup,
        b"",
        "authorization: Bearer old-secret-0123456789\r\n",
    );
    assert_eq!((r.status, r.l2()), (200, "lead"));
    // Nothing was done for the refused requests.
    assert_eq!(l2.lookup(&k, "b", 1000, 0).l2(), "busy");
    assert_eq!(l2.metric("l2_auth_failures_total{reason=\"missing\"}"), 6);
    assert_eq!(l2.metric("l2_auth_failures_total{reason=\"wrong\"}"), 6);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_service_refuses_to_start_without_a_secret_unless_told_to() {
    let out = Command::new(common::BIN)
        .args(["--redis", "redis://127.0.0.1:1"])
        .env_remove("GRAPHQL_CACHE_L2_SECRET")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--insecure-no-auth"), "{err}");
    let out = Command::new(common::BIN)
        .args(["--redis", "redis://127.0.0.1:1"])
        .env("GRAPHQL_CACHE_L2_SECRET", "too-short")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("16 bytes") && !err.contains("too-short"),
        "{err}"
    );

    let redis = Redis::start();
    let mut child = Command::new(common::BIN)
        .args([
            "--redis",
            &redis.url(),
            "--insecure-no-auth",
            "--listen",
            "127.0.0.1:0",
        ])
        .env_remove("GRAPHQL_CACHE_L2_SECRET")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        line.contains("WARNING") && line.contains("--insecure-no-auth"),
        "{line}"
    );
}

#[test]
fn a_lease_above_the_cap_is_clamped_not_refused() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &["--max-lease-ms", "400"]);
    let k = key("clamp");
    // A day and far beyond: both lead, with a lease of at most 400 ms.
    let r = l2.lookup(&k, "a", 86_400_000, 0);
    assert_eq!((r.status, r.l2()), (200, "lead"), "{}", r.text());
    let pttl = redis.cmd(&[b"PTTL", format!("gc:{{{k}}}:l").as_bytes()]);
    let redis::Value::Int(pttl) = pttl else {
        panic!("{pttl:?}")
    };
    assert!(pttl > 0 && pttl <= 400, "{pttl}");
    let k2 = key("clamp-huge");
    assert_eq!(l2.lookup(&k2, "a", 1 << 50, 0).l2(), "lead");
    // Below the cap: as asked.
    let k3 = key("clamp-small");
    assert_eq!(l2.lookup(&k3, "a", 200, 0).l2(), "lead");
    assert_eq!(l2.metric("l2_leases_clamped_total"), 2);
    // The squatter's lease is gone after the cap: another owner leads.
    std::thread::sleep(Duration::from_millis(450));
    assert_eq!(l2.lookup(&k, "b", 1000, 0).l2(), "lead");
}

#[test]
fn the_purge_log_reports_every_way_records_can_be_lost() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &[]);
    // A first reader: no gen, from 0. No gap, and the generation to hold from now on.
    let first = json(&l2.get("/v1/purges?after=0"));
    let gen = first["gen"].as_str().unwrap().to_string();
    assert_eq!(gen.len(), 16, "{first}");
    assert_eq!(
        (first["gap"].as_bool(), first["last"].as_str()),
        (Some(false), Some("0"))
    );
    // An empty log keeps its generation.
    let again = json(&l2.get(&format!("/v1/purges?after=0&gen={gen}")));
    assert_eq!(
        (again["gen"].as_str(), again["gap"].as_bool()),
        (Some(gen.as_str()), Some(false))
    );
    let added = json(&l2.post("/v1/purge", b"type:User"));
    assert_eq!(added["gen"].as_str(), Some(gen.as_str()));
    let id = added["id"].as_str().unwrap().to_string();
    let page = json(&l2.get(&format!("/v1/purges?after=0&gen={gen}")));
    assert_eq!(
        (page["gap"].as_bool(), page["last"].as_str()),
        (Some(false), Some(id.as_str()))
    );

    // Another generation: a gap, answered from the start of the current log.
    let other = json(&l2.get(&format!("/v1/purges?after={id}&gen=0123456789abcdef")));
    assert_eq!(other["gap"], true);
    assert_eq!(other["entries"][0]["id"].as_str(), Some(id.as_str()));
    assert_eq!(other["last"].as_str(), Some(id.as_str()));
    // A cursor ahead of everything the log ever held (a new Redis whose clock is behind).
    let ahead = json(&l2.get(&format!("/v1/purges?after=99999999999999-0&gen={gen}")));
    assert_eq!(
        (
            ahead["gap"].as_bool(),
            ahead["entries"].as_array().unwrap().len()
        ),
        (Some(true), 1)
    );

    // Trimmed past the cursor: a gap for a reader holding gen, none for a first reader at 0.
    for _ in 0..3 {
        redis.cmd(&[b"XADD", b"gc:purges", b"MAXLEN", b"1", b"*", b"d", b"x"]);
    }
    let trimmed = json(&l2.get(&format!("/v1/purges?after={id}&gen={gen}")));
    assert_eq!(trimmed["gap"], true);
    assert_eq!(trimmed["entries"].as_array().unwrap().len(), 1);
    let fresh = json(&l2.get("/v1/purges?after=0"));
    assert_eq!(fresh["gap"], false);
    // Neither the log nor its generation can expire (or be evicted under volatile-lru).
    for name in [&b"gc:purges"[..], b"{gc:purges}:gen"] {
        assert_eq!(redis.cmd(&[b"PTTL", name]), redis::Value::Int(-1));
    }
    let last = trimmed["last"].as_str().unwrap().to_string();

    // Redis lost everything (restart without persistence, flush): a new generation, a gap.
    redis.cmd(&[b"FLUSHALL"]);
    let lost = json(&l2.get(&format!("/v1/purges?after={last}&gen={gen}")));
    let gen2 = lost["gen"].as_str().unwrap().to_string();
    assert_ne!(gen2, gen);
    assert_eq!(
        (lost["gap"].as_bool(), lost["last"].as_str()),
        (Some(true), Some("0"))
    );
    // Only the stream lost, its gen key kept: a new generation too.
    l2.post("/v1/purge", b"x");
    redis.cmd(&[b"DEL", b"gc:purges"]);
    let added = json(&l2.post("/v1/purge", b"after-del"));
    let gen3 = added["gen"].as_str().unwrap();
    assert_ne!(gen3, gen2);
    let page = json(&l2.get(&format!("/v1/purges?after=0&gen={gen2}")));
    assert_eq!(page["gap"], true);
    assert_eq!(page["entries"][0]["data"], "YWZ0ZXItZGVs");
    let r = l2.get("/v1/purges?after=0&gen=not%20hex");
    assert_eq!(r.status, 400);
    assert!(r.text().contains("`gen`"), "{}", r.text());
}

/// Commands Redis ran since the last CONFIG RESETSTAT, by command (calls).
fn commandstats(redis: &Redis) -> Vec<(String, u64)> {
    let text = redis.info(&["INFO", "commandstats"]);
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .collect()
}

#[test]
fn waiting_purges_long_polls_cost_redis_nothing_until_a_record_comes() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &[]);
    let id = json(&l2.post("/v1/purge", b"first"))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(5);
    while l2.metric("l2_purge_follower_connected") != 1 {
        assert!(Instant::now() < deadline, "the follower never connected");
        std::thread::sleep(Duration::from_millis(10));
    }
    let waiters: Vec<_> = (0..20)
        .map(|_| {
            let (addr, id) = (l2.addr, id.clone());
            std::thread::spawn(move || {
                let r = http(
                    addr,
                    "GET",
                    &format!("/v1/purges?after={id}&wait_ms=4000"),
                    b"",
                );
                (json(&r), Instant::now())
            })
        })
        .collect();
    l2.wait_in_flight(20);
    redis.cmd(&[b"CONFIG", b"RESETSTAT"]);
    std::thread::sleep(Duration::from_millis(1000));
    let idle = commandstats(&redis);
    println!("20 long-polls waiting for 1 s cost Redis: {idle:?}");
    let busy: u64 = idle
        .iter()
        .filter(|(c, _)| {
            // `client|setinfo`: the handshake redis-rs sends on a new connection (Redis 7.2
            // and later count it; 7.0 refuses it uncounted), not work for a waiting poll.
            !matches!(
                c.as_str(),
                "config|resetstat" | "info" | "ping" | "xread" | "xrevrange" | "client|setinfo"
            )
        })
        .map(|(_, n)| n)
        .sum();
    assert_eq!(busy, 0, "{idle:?}");
    // The follower's own XREAD BLOCK and tip check: at most one round per 5 s, plus the
    // subscriber's 1 s keep-alive PING.
    let own: u64 = idle
        .iter()
        .filter(|(c, _)| c != "info" && c != "client|setinfo")
        .map(|(_, n)| n)
        .sum();
    assert!(own <= 5, "{idle:?}");

    let sent = Instant::now();
    let new = json(&l2.post("/v1/purge", b"second"))["id"]
        .as_str()
        .unwrap()
        .to_string();
    for w in waiters {
        let (page, got) = w.join().unwrap();
        assert_eq!(page["entries"][0]["id"].as_str(), Some(new.as_str()));
        assert!(got.duration_since(sent) < Duration::from_millis(500));
    }
    let woken = commandstats(&redis);
    let evals: u64 = woken
        .iter()
        .filter(|(c, _)| c == "evalsha")
        .map(|(_, n)| n)
        .sum();
    println!("woken by one purge: {woken:?}");
    // One read per waiter when woken, and the purge itself.
    assert!(evals <= 21 + 2, "{woken:?}");
}

#[test]
fn past_the_long_poll_cap_nobody_waits() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &["--max-long-polls", "2"]);
    let now = json(&l2.get("/v1/purges?after=$"));
    let cursor = now["last"].as_str().unwrap().to_string();
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let (addr, c) = (l2.addr, cursor.clone());
            std::thread::spawn(move || {
                http(
                    addr,
                    "GET",
                    &format!("/v1/purges?after={c}&wait_ms=3000"),
                    b"",
                )
            })
        })
        .collect();
    l2.wait_in_flight(2);
    let t = Instant::now();
    let r = l2.get(&format!("/v1/purges?after={cursor}&wait_ms=3000"));
    assert_eq!(r.status, 429, "{}", r.text());
    // A lookup that would wait answers busy at once instead.
    let k = key("cap");
    assert_eq!(l2.lookup(&k, "a", 5000, 0).l2(), "lead");
    assert_eq!(l2.lookup(&k, "b", 5000, 3000).l2(), "busy");
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(l2.metric("l2_shed_total{what=\"purges_wait\"}"), 1);
    assert_eq!(l2.metric("l2_shed_total{what=\"lookup_wait\"}"), 1);
    l2.post("/v1/purge", b"wake");
    for w in waiters {
        assert_eq!(w.join().unwrap().status, 200);
    }
}

#[test]
fn store_bodies_in_flight_are_bounded() {
    let redis = Redis::start();
    let l2 = L2::single(
        &redis,
        &["--max-value-bytes", "1000", "--max-inflight-bytes", "1500"],
    );
    let k = key("inflight");
    // A slow client: declares 1000 bytes and sends 10.
    let mut slow = TcpStream::connect(l2.addr).unwrap();
    write!(
        slow,
        "PUT /v1/store?key={k}&ttl_ms=60000&owner=a HTTP/1.1\r\nhost: l2\r\n\
         authorization: Bearer {DEV_SECRET}\r\nconnection: close\r\ncontent-length: 1000\r\n\r\n"
    )
    .unwrap();
    slow.write_all(&[b'x'; 10]).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let r = l2.store(&key("second"), "a", 60_000, &[b'y'; 1000]);
    assert_eq!(r.status, 429, "{}", r.text());
    // Small enough to fit beside it.
    assert_eq!(
        l2.store(&key("small"), "a", 60_000, &[b'y'; 400]).status,
        204
    );
    slow.write_all(&[b'x'; 990]).unwrap();
    let mut rest = Vec::new();
    let _ = std::io::Read::read_to_end(&mut slow, &mut rest);
    assert!(String::from_utf8_lossy(&rest).starts_with("HTTP/1.1 204"));
    assert_eq!(
        l2.store(&key("second"), "a", 60_000, &[b'y'; 1000]).status,
        204
    );
    assert_eq!(l2.metric("l2_shed_total{what=\"store_bytes\"}"), 1);
}
