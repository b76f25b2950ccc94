//! Faults through a real Envoy (2 workers) with the filter: an origin that breaks its answers on
//! the wire (`x-origin-fault`), and clients that upload slowly or leave mid-request.
//!
//! Every broken answer must end in an error the client can see (a 5xx or a connection error,
//! within a bound), never in a 200 whose body is not the whole answer, never in a stored entry
//! made of it; Envoy must stay up and serve the next request normally (MISS, then HIT).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use support::*;

/// The default configuration, plus the debug headers (coalescing is on by default).
const CONFIG: &str = r#"{"debug_headers": true}"#;
const Q: &str = "{ users { id name } }";
/// The origin's whole answer to `Q` (it never changes).
const DATA: &str = r#"{"data":{"users":[{"id":"1","name":"Alice"},{"id":"2","name":"Bob"},{"id":"3","name":"Carol"}]}}"#;
/// What the origin's `overlong` sends past `content-length` (origin/src/fault.rs).
const OVERLONG_TAIL: &str = "<x-origin-fault: overlong: bytes past content-length>";
/// Stall of the concurrent `stall-after-headers` test (the single one uses the origin's 5 s).
const STALL_MS: u64 = 2000;
/// Bound on every faulty exchange, past the origin's own delay or stall.
const SLACK: Duration = Duration::from_secs(4);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    ResetMidBody,
    Truncated,
    Overlong,
    StallAfterHeaders,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::ResetMidBody => "reset-mid-body",
            Fault::Truncated => "truncated",
            Fault::Overlong => "overlong",
            Fault::StallAfterHeaders => "stall-after-headers",
        }
    }
}

/// A response, or the connection error the client saw instead.
type Outcome = Result<Resp, String>;

/// `Q` with the origin told to break its answer; `wait_ms` delays the answer (for a stall: how
/// long it stalls; `None` is the origin's default of 5 s).
fn faulty(fault: Fault, wait_ms: Option<u64>) -> Req {
    let req = Req::query(Q).header("x-origin-fault", fault.name());
    match wait_ms {
        Some(ms) => req.header("x-origin-delay-ms", &ms.to_string()),
        None => req,
    }
}

/// Sends `req` and waits at most `limit` for the outcome: a hang fails the test.
fn timed(port: u16, req: Req, limit: Duration) -> (Outcome, Duration) {
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();
    std::thread::spawn(move || {
        let _ = tx.send(try_http(port, req).map_err(|e| e.to_string()));
    });
    match rx.recv_timeout(limit) {
        Ok(outcome) => (outcome, start.elapsed()),
        Err(_) => panic!("no response nor connection error within {limit:?}: the request hangs"),
    }
}

fn describe(o: &Outcome) -> String {
    match o {
        Ok(r) => format!(
            "{} x-cache={} reason={:?} body={:?}",
            r.status,
            r.cache(),
            r.header("x-cache-reason"),
            r.text()
        ),
        Err(e) => format!("connection error: {e}"),
    }
}

/// What a client may get for a broken answer: a connection error, a gateway error, or (only)
/// the whole answer; never a 200 whose body is cut, padded or not JSON.
fn assert_acceptable(fault: Fault, o: &Outcome) {
    let Ok(r) = o else { return };
    if r.status == 200 {
        let parsed: Result<serde_json::Value, _> = serde_json::from_slice(&r.body);
        assert!(
            parsed.is_ok(),
            "{}: a 200 whose body is not JSON: {}",
            fault.name(),
            describe(o)
        );
        assert_eq!(
            r.text(),
            DATA,
            "{}: a 200 that is not the whole answer",
            fault.name()
        );
    } else {
        assert!(
            matches!(r.status, 502..=504),
            "{}: not a gateway error: {}",
            fault.name(),
            describe(o)
        );
    }
    assert!(!r.text().contains(OVERLONG_TAIL), "{}", describe(o));
}

/// No panic and no error from the filter in Envoy's log.
fn assert_log_clean(envoy: &Envoy) {
    let log = envoy.log();
    let bad: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains("panicked")
                || l.contains("Uncaught")
                || (l.contains("wasm log") && (l.contains("[error]") || l.contains("[critical]")))
                || l.contains("[critical]")
        })
        .collect();
    assert!(bad.is_empty(), "Envoy's log:\n{}", bad.join("\n"));
}

/// After the fault: Envoy is up, nothing broken was stored, the same query (without the fault)
/// is a MISS served in full and then a HIT.
fn assert_recovers(envoy: &mut Envoy, fault: Fault, stores_before: u64) {
    assert!(envoy.is_alive(), "{}: Envoy died", fault.name());
    let stores = envoy.counter("stores");
    let next = envoy.send(Req::query(Q));
    assert_eq!(next.status, 200, "{}: {}", fault.name(), next.text());
    assert_eq!(next.text(), DATA, "{}", fault.name());
    if fault == Fault::Overlong && stores > stores_before {
        // The answer as framed by its content-length is whole (Envoy relays it as complete
        // without the filter too): storing it is right, as long as no byte past it is kept.
        assert_eq!(stores, stores_before + 1);
        assert_eq!(next.cache(), "HIT", "overlong: stored, so a hit");
    } else {
        assert_eq!(
            stores,
            stores_before,
            "{}: a broken answer was stored",
            fault.name()
        );
        assert_eq!(
            next.cache(),
            "MISS",
            "{}: the next request is not a hit of the broken answer",
            fault.name()
        );
        assert_eq!(envoy.counter("stores"), stores_before + 1);
        let again = envoy.send(Req::query(Q));
        assert_eq!(again.cache(), "HIT", "{}", fault.name());
        assert_eq!(again.text(), DATA);
    }
    assert!(envoy.is_alive());
    assert_log_clean(envoy);
}

/// The limit on one exchange of `fault` with `wait_ms`.
fn limit(fault: Fault, wait_ms: Option<u64>) -> Duration {
    let wait = match (fault, wait_ms) {
        (Fault::StallAfterHeaders, None) => 5000,
        (_, ms) => ms.unwrap_or(0),
    };
    Duration::from_millis(wait) + SLACK
}

fn single(fault: Fault, wait_ms: Option<u64>) {
    let (_origin, mut envoy) = stack(CONFIG);
    let stores_before = envoy.counter("stores");
    let bound = limit(fault, wait_ms);
    let (outcome, took) = timed(envoy.port, faulty(fault, wait_ms), bound);
    eprintln!("{}: {} in {took:?}", fault.name(), describe(&outcome));
    assert_acceptable(fault, &outcome);
    if fault == Fault::StallAfterHeaders {
        let stall = Duration::from_millis(wait_ms.unwrap_or(5000));
        assert!(took >= stall - Duration::from_millis(200), "{took:?}");
    }
    if fault != Fault::Overlong {
        // Coalescing on: the fetch is the filter's own, and it failed.
        assert!(envoy.counter("fetch_failures") >= 1);
    }
    assert_recovers(&mut envoy, fault, stores_before);
}

fn ten_concurrent(fault: Fault, wait_ms: Option<u64>) {
    let origin = Origin::start();
    let mut envoy = Envoy::start(&EnvoyOptions::config(CONFIG), &origin);
    let stores_before = envoy.counter("stores");
    let port = envoy.port;
    let bound = limit(fault, wait_ms);
    let outcomes = concurrently(10, move |_| timed(port, faulty(fault, wait_ms), bound));
    for (i, (o, took)) in outcomes.iter().enumerate() {
        eprintln!("{} #{i}: {} in {took:?}", fault.name(), describe(o));
        assert_acceptable(fault, o);
    }
    let labels: Vec<&str> = outcomes
        .iter()
        .filter_map(|(o, _)| o.as_ref().ok().map(|r| r.cache()))
        .collect();
    eprintln!(
        "{}: origin requests {}, leaders {}, coalesced {}, labels {labels:?}",
        fault.name(),
        origin.count(),
        envoy.counter("leaders"),
        envoy.counter("coalesced")
    );
    // One fetch for all ten: every follower got the leader's outcome, on both workers.
    assert_eq!(origin.count(), 1, "identical requests were coalesced");
    assert_eq!(envoy.counter("leaders"), 1);
    assert_eq!(envoy.counter("coalesced"), 9);
    assert_recovers(&mut envoy, fault, stores_before);
}

#[test]
fn without_the_cache_envoy_cuts_the_connection_or_relays_the_framed_answer() {
    // The baseline: the filter handles no path here, so this is Envoy's router alone.
    let (_origin, envoy) = stack(r#"{"paths": ["/elsewhere"]}"#);
    for fault in [
        Fault::ResetMidBody,
        Fault::Truncated,
        Fault::Overlong,
        Fault::StallAfterHeaders,
    ] {
        let wait = (fault == Fault::StallAfterHeaders).then_some(1000);
        let (o, took) = timed(envoy.port, faulty(fault, wait), limit(fault, wait));
        eprintln!("no cache, {}: {} in {took:?}", fault.name(), describe(&o));
        assert_acceptable(fault, &o);
        match fault {
            // What content-length frames is whole; the bytes past it are dropped.
            Fault::Overlong => assert_eq!(o.unwrap().text(), DATA),
            // The headers were relayed already: the client's connection is cut.
            _ => assert!(o.is_err(), "{}: {}", fault.name(), describe(&o)),
        }
    }
    assert_eq!(envoy.counter("stores"), 0);
}

#[test]
fn reset_mid_body_single() {
    single(Fault::ResetMidBody, None);
}

#[test]
fn reset_mid_body_ten_concurrent() {
    ten_concurrent(Fault::ResetMidBody, Some(300));
}

#[test]
fn truncated_single() {
    single(Fault::Truncated, None);
}

#[test]
fn truncated_ten_concurrent() {
    ten_concurrent(Fault::Truncated, Some(300));
}

#[test]
fn overlong_single() {
    single(Fault::Overlong, None);
}

#[test]
fn overlong_ten_concurrent() {
    ten_concurrent(Fault::Overlong, Some(300));
}

#[test]
fn stall_after_headers_single() {
    // The origin's default stall (5 s), inside the fetch timeout (10 s).
    single(Fault::StallAfterHeaders, None);
}

#[test]
fn stall_after_headers_ten_concurrent() {
    ten_concurrent(Fault::StallAfterHeaders, Some(STALL_MS));
}

const SHORT_FETCH: &str = r#"{"debug_headers": true, "fetch_timeout_ms": 1000}"#;

/// Ten identical requests at once, each answered (or not) within `bound`.
fn burst(port: u16, req: Req, bound: Duration) -> Vec<(Outcome, Duration)> {
    concurrently(10, move |_| timed(port, req.clone(), bound))
}

#[test]
fn a_stall_longer_than_the_fetch_timeout_fails_fast_for_everyone() {
    let (origin, mut envoy) = stack(SHORT_FETCH);
    let fault = Fault::StallAfterHeaders;
    // The origin would stall 5 s; the shared fetch gives up after 1 s, for all ten.
    let outcomes = burst(
        envoy.port,
        faulty(fault, None),
        Duration::from_secs(1) + SLACK,
    );
    for (o, took) in &outcomes {
        assert_acceptable(fault, o);
        assert!(
            *took < Duration::from_secs(3),
            "{} in {took:?}",
            describe(o)
        );
    }
    assert_eq!(origin.count(), 1);
    assert_recovers(&mut envoy, fault, 0);
}

#[test]
fn a_fetch_timeout_is_a_504_whether_or_not_headers_arrived() {
    let (_origin, envoy) = stack(SHORT_FETCH);
    let bound = Duration::from_secs(1) + SLACK;
    // Before the headers (the origin delays its whole answer 5 s): Envoy's 504.
    let before = Req::query("{ a: users { id } }").header("x-origin-delay-ms", "5000");
    for (o, took) in burst(envoy.port, before, bound) {
        let r = o.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            r.status,
            504,
            "before headers: {} in {took:?}",
            describe(&Ok(r.clone()))
        );
    }
    // After the headers (200 and content-length sent, then a 5 s stall): the same timeout.
    for (o, took) in burst(envoy.port, faulty(Fault::StallAfterHeaders, None), bound) {
        let r = o.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            r.status,
            504,
            "after headers: {} in {took:?}",
            describe(&Ok(r.clone()))
        );
    }
}

#[test]
fn without_coalescing_broken_answers_stream_through_and_are_not_stored() {
    // The router streams the answer and the filter watches it go by: a cut one must not become
    // an entry (only a whole one reaching its end is stored).
    for fault in [
        Fault::ResetMidBody,
        Fault::Truncated,
        Fault::StallAfterHeaders,
    ] {
        let (_origin, mut envoy) = stack(r#"{"debug_headers": true, "coalesce": false}"#);
        let port = envoy.port;
        let wait = Some(if fault == Fault::StallAfterHeaders {
            1000
        } else {
            0
        });
        let bound = limit(fault, wait);
        let mut outcomes = vec![timed(port, faulty(fault, wait), bound)];
        outcomes.extend(concurrently(10, move |_| {
            timed(port, faulty(fault, wait), bound)
        }));
        for (o, took) in &outcomes {
            assert_acceptable(fault, o);
            // The router already sent the headers: the client sees the connection cut.
            assert!(o.is_err(), "{}: {} in {took:?}", fault.name(), describe(o));
        }
        assert_eq!(envoy.counter("misses"), 11, "{}", fault.name());
        assert_recovers(&mut envoy, fault, 0);
    }
}

// ---- Clients that misbehave. ----

/// Reads one HTTP/1.1 response (content-length, chunked or to the end) from `s`.
fn read_response(s: &mut TcpStream) -> std::io::Result<Resp> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        if let Some(resp) = complete_response(&raw) {
            return Ok(resp);
        }
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("incomplete response: {:?}", String::from_utf8_lossy(&raw)),
            ));
        }
        raw.extend_from_slice(&buf[..n]);
    }
}

fn complete_response(raw: &[u8]) -> Option<Resp> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let get = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v);
    let rest = &raw[end + 4..];
    let body = if let Some(len) = get("content-length") {
        rest.get(..len.parse::<usize>().ok()?)?.to_vec()
    } else if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let mut data = rest;
        let mut out = Vec::new();
        loop {
            let line_end = data.windows(2).position(|w| w == b"\r\n")?;
            let size =
                usize::from_str_radix(std::str::from_utf8(&data[..line_end]).ok()?, 16).ok()?;
            data = &data[line_end + 2..];
            if size == 0 {
                break out;
            }
            out.extend_from_slice(data.get(..size)?);
            data = data.get(size + 2..)?;
        }
    } else {
        return None;
    };
    Some(Resp {
        status,
        headers,
        body,
    })
}

/// `req` as bytes, split into its head (through the blank line) and its body.
fn head_and_body(req: &Req) -> (Vec<u8>, Vec<u8>) {
    let bytes = req.to_bytes();
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    (bytes[..end].to_vec(), bytes[end..].to_vec())
}

/// Sends `req` with its body in three pieces, `gap` apart.
fn slow_upload(port: u16, req: &Req, gap: Duration) -> Resp {
    let (head, body) = head_and_body(req);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&head).unwrap();
    let third = body.len() / 3;
    for piece in [&body[..third], &body[third..2 * third], &body[2 * third..]] {
        std::thread::sleep(gap);
        s.write_all(piece).unwrap();
        s.flush().unwrap();
    }
    read_response(&mut s).unwrap()
}

#[test]
fn a_slow_upload_gets_its_normal_answer() {
    let (origin, mut envoy) = stack(CONFIG);
    let gap = Duration::from_millis(300);
    let start = Instant::now();
    let first = slow_upload(envoy.port, &Req::query(Q), gap);
    let took = start.elapsed();
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.cache(), "MISS");
    assert_eq!(first.text(), DATA);
    assert!(took >= 3 * gap && took < 3 * gap + SLACK, "{took:?}");

    // Read whole across three body callbacks, the key is the same as a fast request's.
    let again = slow_upload(envoy.port, &Req::query(Q), gap);
    assert_eq!(again.cache(), "HIT", "{}", again.text());
    assert_eq!(again.text(), DATA);
    assert_eq!(envoy.send(Req::query(Q)).cache(), "HIT");
    assert_eq!(origin.count(), 1);
    assert_eq!(envoy.counter("misses"), 1);
    assert_eq!(envoy.counter("hits"), 2);
    assert!(envoy.is_alive());
    assert_log_clean(&envoy);
}

#[test]
fn a_client_leaving_mid_body_leaves_envoy_healthy() {
    let (origin, mut envoy) = stack(CONFIG);
    let (head, body) = head_and_body(&Req::query(Q));
    // Several times, so both workers see it (connections are spread evenly over them).
    for _ in 0..4 {
        let mut s = TcpStream::connect(("127.0.0.1", envoy.port)).unwrap();
        s.write_all(&head).unwrap();
        s.write_all(&body[..body.len() / 2]).unwrap();
        s.flush().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        drop(s);
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(envoy.is_alive());
    // The filter holds a request until its body is whole: none of them reached the origin.
    assert_eq!(origin.count(), 0);
    let (misses, hits) = (envoy.counter("misses"), envoy.counter("hits"));

    let next = envoy.send(Req::query(Q));
    assert_eq!(
        (next.status, next.cache()),
        (200, "MISS"),
        "{}",
        next.text()
    );
    assert_eq!(next.text(), DATA);
    let again = envoy.send(Req::query(Q));
    assert_eq!(again.cache(), "HIT");
    // The counters still move.
    assert_eq!(envoy.counter("misses"), misses + 1);
    assert_eq!(envoy.counter("hits"), hits + 1);
    assert_eq!(envoy.counter("stores"), 1);
    assert!(envoy.is_alive());
    assert_log_clean(&envoy);
}

#[test]
fn a_leader_leaving_while_its_fetch_runs_does_not_break_the_flight() {
    // The shared fetch belongs to the worker, not to the client that started it: a follower
    // that arrives after the leader hung up still gets the answer, and it is stored.
    let (origin, mut envoy) = stack(CONFIG);
    let slow = || Req::query(Q).header("x-origin-delay-ms", "800");
    let mut leader = TcpStream::connect(("127.0.0.1", envoy.port)).unwrap();
    leader.write_all(&slow().to_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    drop(leader);
    let (follower, took) = timed(envoy.port, slow(), Duration::from_millis(800) + SLACK);
    let follower = follower.unwrap();
    eprintln!("follower: {} in {took:?}", describe(&Ok(follower.clone())));
    assert_eq!(follower.status, 200, "{}", follower.text());
    assert_eq!(follower.text(), DATA);
    assert_eq!(follower.cache(), "COALESCED");
    assert_eq!(origin.count(), 1);
    assert_eq!(envoy.send(Req::query(Q)).cache(), "HIT");
    assert!(envoy.is_alive());
    assert_log_clean(&envoy);
}
