//! Redis with credentials (requirepass and an ACL user) and with TLS only.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_port, key, scratch_dir, Redis, StartL2, L2};

/// What the service needs and nothing more: its keys, its channels, no admin commands.
const ACL_USER: &str =
    "cache on >cache-pw-0123 ~gc:* ~{gc:purges}:* &gc:* +@all -@admin -@dangerous +cluster|nodes";

fn acl_redis() -> Redis {
    // One argv entry per word: redis-server joins a directive's words itself.
    let mut extra = vec!["--requirepass".to_string(), "admin-pw-0123".to_string()];
    extra.push("--user".to_string());
    extra.extend(ACL_USER.split(' ').map(str::to_string));
    Redis::start_as(free_port(), &extra, Some("default:admin-pw-0123"))
}

fn wait_health(l2: &L2, status: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = l2.get("/health");
        if r.status == status {
            return r.text();
        }
        assert!(
            Instant::now() < deadline,
            "health {} {}",
            r.status,
            r.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_acl_user_works_and_no_credentials_fail_clearly() {
    let redis = acl_redis();
    // A client without credentials is refused by Redis itself.
    let anon = redis::Client::open(redis.url()).unwrap();
    let mut c = anon.get_connection().unwrap();
    let e = redis::cmd("GET")
        .arg("gc:x")
        .query::<Option<String>>(&mut c)
        .unwrap_err();
    assert!(e.to_string().contains("NOAUTH"), "{e}");

    // The ACL user in the URL: every verb, the wake-ups and the purge-log follower.
    let url = format!("redis://cache:cache-pw-0123@127.0.0.1:{}", redis.port);
    let l2 = L2::start(&["--redis", &url]);
    wait_health(&l2, 200);
    l2.wait_subscribed();
    common::lookup_store_wait(&l2, 2);
    let r = l2.post("/v1/purge", b"p");
    assert_eq!(r.status, 200, "{}", r.text());
    // The snapshot's commands too (HPEXPIRE, HSCAN, TIME in a script).
    let r = l2.post("/v1/marks", &common::one_mark_batch());
    assert_eq!(r.status, 200, "{}", r.text());
    let r = l2.get("/v1/marks?cursor=0");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(l2.metric("l2_purge_follower_connected"), 1);
    drop(l2);

    // The same from --redis-username / --redis-password-file.
    let dir = scratch_dir("redis-pw");
    let pw = dir.join("pw");
    std::fs::write(&pw, "cache-pw-0123\n").unwrap();
    let l2 = L2::start(&[
        "--redis",
        &redis.url(),
        "--redis-username",
        "cache",
        "--redis-password-file",
        pw.to_str().unwrap(),
    ]);
    wait_health(&l2, 200);
    assert_eq!(l2.lookup(&key("acl-file"), "a", 1000, 0).l2(), "lead");
    drop(l2);

    // No credentials, or a wrong password: up, never a panic, health 503 and verbs 424 saying why.
    let wrong = format!("redis://cache:nope@127.0.0.1:{}", redis.port);
    for url in [redis.url(), wrong] {
        let l2 = L2::start(&["--redis", &url]);
        let why = wait_health(&l2, 503);
        let r = l2.lookup(&key("noauth"), "a", 1000, 0);
        assert_eq!(r.status, 424, "{}", r.text());
        println!(
            "without the right credentials: health `{why}`, lookup `{}`",
            r.text()
        );
        assert!(!why.contains("cache-pw") && !r.text().contains("nope"));
        // The cause is named.
        assert!(why.to_lowercase().contains("auth"), "{why}");
        assert_eq!(l2.get("/health").status, 503);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl on PATH");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and a server certificate for 127.0.0.1 signed by it.
fn certificates(dir: &std::path::Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=l2-test-ca",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
    );
    std::fs::write(dir.join("ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "ext",
            "-out",
            "server.pem",
        ],
    );
}

#[test]
fn rediss_with_a_private_ca() {
    let dir = scratch_dir("tls");
    certificates(&dir);
    let d = |f: &str| dir.join(f).to_str().unwrap().to_string();
    let tls_port = free_port();
    // The plain port serves the harness's readiness checks; the service uses the TLS one only.
    let extra = [
        "--tls-port".to_string(),
        tls_port.to_string(),
        "--tls-cert-file".to_string(),
        d("server.pem"),
        "--tls-key-file".to_string(),
        d("server.key"),
        "--tls-ca-cert-file".to_string(),
        d("ca.pem"),
        "--tls-auth-clients".to_string(),
        "no".to_string(),
    ];
    let _redis = Redis::start_as(free_port(), &extra, None);
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let l2 = L2::start(&["--redis", &url, "--redis-ca-file", &d("ca.pem")]);
    wait_health(&l2, 200);
    l2.wait_subscribed();
    common::lookup_store_wait(&l2, 2);
    assert_eq!(l2.post("/v1/purge", b"p").status, 200);
    assert_eq!(l2.metric("l2_purge_follower_connected"), 1);
    drop(l2);
    // Without the CA the server is not trusted: health 503, verbs 424, no panic.
    let l2 = L2::start(&["--redis", &url]);
    let why = wait_health(&l2, 503);
    println!("rediss:// without the CA: `{why}`");
    assert_eq!(l2.lookup(&key("tls"), "a", 1000, 0).status, 424);
    let _ = std::fs::remove_dir_all(&dir);
}
