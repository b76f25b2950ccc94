//! Purges that must not get lost on their way through the fleet. The invariant: once the fleet has
//! a purge (an Envoy accepted it), no Envoy, including one started later, serves an entry of a
//! purged target born before the purge; and a purge of one target never costs the fleet entries of
//! other targets beyond what it asked (no purge of everything in their place, over and over).
//!
//! Each case reproduces a way the purge log loses a purge or turns it into something else:
//! - purges owed while an Envoy's L2 is down fold into one purge of everything dated at the
//!   earliest owed instant, which spares what another Envoy fetched after that instant;
//! - a storm of purges on one Envoy overflows its outbox and folds into a purge of everything;
//! - a record trimmed from the log, or deleted from its middle, is never learnt by an Envoy that
//!   starts afterwards, while the L2 still holds the value it purged;
//! - a log emptied under its readers makes a reader see a gap on every read.
//!
//! Two or three Envoys on the shipped `envoy/fleet.yaml` with one Redis node, the origin's users
//! (`user(id: N)`, tagged `entity:User:<N>`) and entity purges. Every answer carries the origin's
//! request count, so an answer fetched after a purge differs from the one fetched before, and lives
//! 600 s: an answer that stops being served was purged, not expired.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use support::*;

/// The filter configuration the tests add to fleet.yaml's: answers live 600 s (its default is 30).
const LONG_TTL: &str = r#""rules": [{"field": "requestCount", "ttl_seconds": 600}],"#;
/// The fleet's purge log, a Redis stream.
const LOG: &str = "gc:purges";
/// How long a purge the log holds may take to hold on every Envoy (fleet.rs measures ~20 ms).
const SPREAD: Duration = Duration::from_secs(5);
/// Users nobody asked for start here: purging one purges nothing cached.
const NOBODY: u32 = 1000;

fn fleet(envoys: usize) -> Fleet {
    Fleet::start(&FleetOptions {
        extra_config: LONG_TTL.into(),
        ..FleetOptions::new(Backend::Single, envoys)
    })
}

/// The origin's user `id` (1, 2 or 3), tagged `entity:User:<id>`.
fn user_query(id: u32) -> String {
    format!("query User{id} {{ user(id: {id}) {{ __typename id name }} requestCount }}")
}

/// An answer no purge here is about: tagged by its operation and fields, no entity.
fn echo_query(n: u32) -> String {
    format!(r#"query Echo{n} {{ echo(value: "e{n}") requestCount }}"#)
}

/// The purge API's selector of user `id` (`entity:User:<id>`).
fn purge_user(id: u32) -> String {
    format!(r#"[{{"kind":"entity","type":"User","id":"{id}"}}]"#)
}

// --- Redis and the log --------------------------------------------------------------------------

fn redis(fleet: &Fleet) -> &Redis {
    match &fleet.redis {
        RedisBackend::Single(r) => r,
        RedisBackend::Cluster(_) => panic!("these tests run on one node"),
    }
}

fn redis_cmd<T: redis::FromRedisValue>(fleet: &Fleet, args: &[&str]) -> T {
    let value = redis(fleet)
        .try_cmd(args)
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    redis::from_redis_value(&value).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// The id of the log's newest entry (`None`: the log is empty or absent).
fn newest_entry(fleet: &Fleet) -> Option<String> {
    let newest: Vec<(String, redis::Value)> =
        redis_cmd(fleet, &["XREVRANGE", LOG, "+", "-", "COUNT", "1"]);
    newest.into_iter().next().map(|(id, _)| id)
}

fn log_len(fleet: &Fleet) -> u64 {
    redis_cmd(fleet, &["XLEN", LOG])
}

/// Keeps only the log's newest `keep` entries, as the L2 does past its 10,000.
fn trim_log(fleet: &Fleet, keep: u64) {
    let _: u64 = redis_cmd(fleet, &["XTRIM", LOG, "MAXLEN", &keep.to_string()]);
    assert_eq!(log_len(fleet), keep);
}

/// Commands Redis has run since it started (`INFO commandstats`, scripts' own calls included).
fn redis_commands(fleet: &Fleet) -> u64 {
    redis(fleet)
        .info(&["INFO", "commandstats"])
        .lines()
        .filter_map(|l| {
            l.split_once(":calls=")?
                .1
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

// --- waiting, purging, asking -------------------------------------------------------------------

/// Calls `probe` every 20 ms until it gives something, for at most `limit`.
fn poll<T>(limit: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = probe() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A purge through `envoy`, accepted: 200, or 202 while the fleet is still owed it.
fn purge(envoy: &Envoy, selectors: &str) {
    assert!(try_purge(envoy, selectors), "purge {selectors}: refused");
}

/// A purge through `envoy`: whether it was accepted (`false`: refused as too many, 429 or 503,
/// so not owed to anyone; anything else fails the test).
fn try_purge(envoy: &Envoy, selectors: &str) -> bool {
    let r = envoy.purge(selectors);
    assert!(
        matches!(r.status, 200 | 202 | 429 | 503),
        "purge {selectors}: {} {}",
        r.status,
        r.text()
    );
    matches!(r.status, 200 | 202)
}

/// A purge through `envoy` that the log then holds: the id of its entry.
fn purge_logged(fleet: &Fleet, envoy: &Envoy, selectors: &str) -> String {
    let before = newest_entry(fleet);
    purge(envoy, selectors);
    poll(Duration::from_secs(10), || {
        newest_entry(fleet).filter(|id| Some(id) != before.as_ref())
    })
    .unwrap_or_else(|| panic!("the purge {selectors} never reached the log"))
}

/// Waits until nothing has been added to the log for a second (every purge owed has been sent,
/// and every follower, a long-poll behind, has read it).
fn wait_log_settled(fleet: &Fleet) {
    let mut seen = (newest_entry(fleet), Instant::now());
    let settled = poll(Duration::from_secs(30), || {
        let now = newest_entry(fleet);
        if now != seen.0 {
            seen = (now, Instant::now());
        }
        (seen.1.elapsed() >= Duration::from_secs(1)).then_some(())
    });
    assert!(settled.is_some(), "the log kept growing for 30 s");
}

/// Asks `envoy` for each query, each a MISS (fetched from the origin, so born now), and waits
/// until the L2 holds them all. The bodies.
fn fetch_on(fleet: &Fleet, envoy: &Envoy, queries: &[String]) -> Vec<Vec<u8>> {
    let stores = fleet.l2_stores();
    let bodies: Vec<Vec<u8>> = queries
        .iter()
        .map(|q| {
            let r = envoy.send(Req::query(q));
            assert_eq!((r.status, r.cache()), (200, "MISS"), "{q}: {}", r.text());
            r.body
        })
        .collect();
    fleet.wait_l2_stores(stores + queries.len() as i64);
    bodies
}

/// [`fetch_on`], and then each is a HIT there.
fn cache_on(fleet: &Fleet, envoy: &Envoy, queries: &[String]) -> Vec<Vec<u8>> {
    let bodies = fetch_on(fleet, envoy, queries);
    let missed = not_hits(envoy, queries, &bodies);
    assert!(missed.is_empty(), "not cached: {missed:?}");
    bodies
}

/// The queries `envoy` does not answer with a HIT of the body it cached: each with its x-cache.
fn not_hits(envoy: &Envoy, queries: &[String], bodies: &[Vec<u8>]) -> Vec<String> {
    queries
        .iter()
        .zip(bodies)
        .filter_map(|(q, body)| {
            let r = envoy.send(Req::query(q));
            assert_eq!(r.status, 200, "{q}: {}", r.text());
            let name = q.split_whitespace().nth(1).unwrap_or(q);
            (r.cache() != "HIT" || r.body != *body).then(|| format!("{name} {}", r.cache()))
        })
        .collect()
}

/// What [`not_hits`] found, short: how many and the first few.
fn summary(missed: &[String]) -> String {
    let first: Vec<&str> = missed.iter().take(3).map(String::as_str).collect();
    let more = if missed.len() > first.len() {
        ", ..."
    } else {
        ""
    };
    format!("{} not HITs ({}{more})", missed.len(), first.join(", "))
}

/// Asks `envoy` for `query` until it no longer answers `old` (fetched before a purge of it), for
/// at most `limit`: past that, the test fails.
fn stops_serving(envoy: &Envoy, query: &str, old: &[u8], limit: Duration, what: &str) {
    let started = Instant::now();
    let mut last = String::new();
    let stopped = poll(limit, || {
        let r = envoy.send(Req::query(query));
        assert_eq!(r.status, 200, "{what}: {}", r.text());
        last = format!("x-cache {} {:?}", r.cache(), r.reason());
        (r.body != old).then_some(())
    });
    assert!(
        stopped.is_some(),
        "{what}: still served the answer from before its purge {:?} later ({last})",
        started.elapsed()
    );
    println!("{what}: purged after {:?}", started.elapsed());
}

/// Asks `envoy` for `query` `times` times: it never answers `old` (fetched before a purge of it).
fn never_serves(envoy: &Envoy, query: &str, old: &[u8], times: usize, what: &str) {
    for i in 1..=times {
        let r = envoy.send(Req::query(query));
        assert_eq!(r.status, 200, "{what}: {}", r.text());
        assert!(
            r.body != old,
            "{what}: request {i} served the answer from before its purge (x-cache {} {:?}): {}",
            r.cache(),
            r.reason(),
            r.text()
        );
    }
}

/// `count` users nobody asked for whose tag shares no purge slot with the tags of the answers
/// `envoy` holds for `queries` (the marks are kept per slot, `tag_slots` of them: a purge of a
/// tag in an answer's slot purges that answer too, by design, more and never less).
fn users_in_other_slots(envoy: &Envoy, queries: &[String], count: usize) -> Vec<u32> {
    const TAG_SLOTS: u64 = 4096;
    let slot = |tag: &str| graphql_cache::invalidate::marks::tag_hash(tag) % TAG_SLOTS;
    let taken: std::collections::HashSet<u64> = queries
        .iter()
        .flat_map(|q| {
            let r = envoy.send(Req::query(q));
            let tags = r.header("x-cache-tags").unwrap_or_default().to_string();
            assert!(!tags.is_empty(), "{q}: no x-cache-tags");
            tags.split(',').map(|t| slot(t.trim())).collect::<Vec<_>>()
        })
        .collect();
    (NOBODY..)
        .filter(|id| !taken.contains(&slot(&format!("entity:User:{id}"))))
        .take(count)
        .collect()
}

// --- an L2 service of one Envoy's own -----------------------------------------------------------

/// A second L2 service for one Envoy, on a port of its own and on the fleet's Redis (the service is
/// stateless), that the test stops and starts again on that port: one Envoy's L2 going down while
/// the others keep theirs.
struct OwnL2 {
    addr: SocketAddr,
    redis: [String; 2],
    child: Option<Child>,
}

impl OwnL2 {
    fn start(fleet: &Fleet) -> OwnL2 {
        let mut l2 = OwnL2 {
            addr: SocketAddr::from(([127, 0, 0, 1], free_port())),
            redis: fleet.redis.l2_args(),
            child: None,
        };
        l2.restart();
        l2
    }

    /// Starts the service (again) and waits until it answers `/health`.
    fn restart(&mut self) {
        self.stop();
        let child = Command::new(l2_bin())
            .env("GRAPHQL_CACHE_L2_SECRET", testkit::l2::DEV_SECRET)
            .arg("--listen")
            .arg(self.addr.to_string())
            .args(&self.redis)
            .stdout(Stdio::null())
            .spawn()
            .expect("start the L2 service");
        self.child = Some(child);
        let health = Req::get("/health").header("host", "l2");
        let up = poll(Duration::from_secs(30), || {
            let r = testkit::send(self.addr, &health, Duration::from_secs(5)).ok()?;
            (r.status == 200).then_some(())
        });
        assert!(
            up.is_some(),
            "the L2 service on {} never came up",
            self.addr
        );
    }

    /// SIGKILL, as a crash.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for OwnL2 {
    fn drop(&mut self) {
        self.stop();
    }
}

// --- the cases ----------------------------------------------------------------------------------

/// Envoy A's L2 goes down; one purge on A (the earliest owed); B fetches user 1 (a MISS, after that
/// purge); user 1 purged on A; 70 more purges on A (more than A's outbox holds); A's L2 back. Once
/// A's purges reached the log, B must stop serving user 1's answer from before its purge.
#[test]
fn owed_purges_folded_while_the_l2_is_down_still_purge_what_another_envoy_fetched_later() {
    let fleet = fleet(1);
    let b = &fleet.envoys[0];
    let mut a_l2 = OwnL2::start(&fleet);
    let a = Envoy::start_bootstrap(
        &fleet_config(fleet.origin.port, a_l2.addr.port(), LONG_TTL),
        2,
    );
    a.wait_l2_ready();

    a_l2.stop();
    purge(&a, &purge_user(NOBODY));
    let x = user_query(1);
    let old = cache_on(&fleet, b, std::slice::from_ref(&x)).remove(0);
    purge(&a, &purge_user(1));
    for i in 1..=70 {
        purge(&a, &purge_user(NOBODY + i));
    }
    println!(
        "A's L2 down: 72 purges on A, l2_purges_folded {}",
        a.counter("l2_purges_folded")
    );
    let logged = log_len(&fleet);
    a_l2.restart();
    let back = Instant::now();
    let delivered = poll(Duration::from_secs(15), || {
        (log_len(&fleet) > logged).then(|| back.elapsed())
    });
    println!(
        "A's L2 back; A's purges in the log after {delivered:?} ({} entries)",
        log_len(&fleet)
    );
    stops_serving(
        b,
        &x,
        &old,
        SPREAD,
        "B, user 1 fetched after A's first owed purge and before A's purge of it",
    );
}

/// B holds 20 answers no purge is about; 8 clients purge 64 users nobody cached through A as
/// fast as A answers (for 10 s, at most 40,000 purges). A folds none of them into a purge of
/// everything, and B serves its 20 answers as HITs during the storm and after it.
#[test]
fn a_purge_storm_on_one_envoy_leaves_unrelated_entries_served_on_the_others() {
    const CLIENTS: usize = 8;
    const STORM: Duration = Duration::from_secs(10);
    const MOST: u32 = 40_000;
    let fleet = fleet(2);
    let (a, b) = (&fleet.envoys[0], &fleet.envoys[1]);
    let queries: Vec<String> = (1..=20).map(echo_query).collect();
    let bodies = cache_on(&fleet, b, &queries);
    let purged = users_in_other_slots(b, &queries, 64);

    let started = Instant::now();
    let (sent, refused) = (AtomicU32::new(0), AtomicU32::new(0));
    let mut lost = Vec::new();
    std::thread::scope(|s| {
        for _ in 0..CLIENTS {
            s.spawn(|| {
                while started.elapsed() < STORM {
                    let n = sent.fetch_add(1, Ordering::Relaxed);
                    if n >= MOST {
                        break;
                    }
                    if !try_purge(a, &purge_user(purged[n as usize % purged.len()])) {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        // B, sampled every half second while the storm lasts.
        while started.elapsed() < STORM && sent.load(Ordering::Relaxed) < MOST {
            let missed = not_hits(b, &queries, &bodies);
            if !missed.is_empty() {
                lost.push(format!("{:?} in: {}", started.elapsed(), summary(&missed)));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    let elapsed = started.elapsed();
    let purges = sent.load(Ordering::Relaxed).min(MOST);
    println!(
        "storm: {purges} purges on A in {elapsed:?} ({:.0}/s, {} refused), A's \
         l2_purges_folded {}",
        f64::from(purges) / elapsed.as_secs_f64(),
        refused.load(Ordering::Relaxed),
        a.counter("l2_purges_folded")
    );
    wait_log_settled(&fleet);
    assert_eq!(
        a.counter("l2_purges_folded"),
        0,
        "A folded purges into everything"
    );
    let after = not_hits(b, &queries, &bodies);
    assert!(
        lost.is_empty() && after.is_empty(),
        "B lost answers no purge was about: during the storm {lost:?}; after it {} \
         (A's l2_purges_folded {}, B's l2_purge_gaps {})",
        summary(&after),
        a.counter("l2_purges_folded"),
        b.counter("l2_purge_gaps")
    );
}

/// A caches users 1 and 2 (the L2 holds them), purges user 2, then 3 other users; the log then
/// loses its oldest records, user 2's purge among them (as the L2 trims its log). An Envoy
/// started afterwards serves the L2's entries once it is ready to (no cold start), and never user
/// 2's answer from before the purge.
#[test]
fn a_new_envoy_does_not_serve_an_entry_whose_purge_was_trimmed_from_the_log() {
    const LATER: u32 = 3;
    let mut fleet = fleet(1);
    let a = &fleet.envoys[0];
    let (kept, y) = (user_query(1), user_query(2));
    let old = cache_on(&fleet, a, &[kept.clone(), y.clone()]);
    purge_logged(&fleet, a, &purge_user(2));
    for i in 1..=LATER {
        purge_logged(&fleet, a, &purge_user(NOBODY + i));
    }
    trim_log(&fleet, u64::from(LATER));
    // How soon is a measure (`make bench-purges` reports it), not a timed assertion.
    let (c, took) = fleet.add_envoy_timed();
    println!("the new Envoy used its L2 {took:?} after it was ready");
    let r = c.send(Req::query(&kept));
    assert_eq!(
        (r.cache(), r.reason(), &r.body),
        ("HIT", Some("l2"), &old[0]),
        "an entry no purge was about, from the L2"
    );
    never_serves(
        c,
        &y,
        &old[1],
        3,
        "an Envoy started after user 2's purge was trimmed from the log",
    );
}

/// B holds 10 answers; one purge of a user nobody cached through A, read by B; then the log is
/// emptied (XTRIM MAXLEN 0) and Envoy C joins and caches 10 answers of its own. For 2 s after,
/// no Envoy sees the log as missing records more than twice, B and C serve their answers as HITs
/// and Redis runs a sane number of commands.
#[test]
fn an_emptied_log_does_not_make_envoys_purge_everything_in_a_loop() {
    const WINDOW: Duration = Duration::from_secs(2);
    let mut fleet = fleet(2);
    let on_b: Vec<String> = (1..=10).map(echo_query).collect();
    let on_c: Vec<String> = (11..=20).map(echo_query).collect();
    let b_bodies = cache_on(&fleet, &fleet.envoys[1], &on_b);
    let applied = fleet.envoys[1].counter("l2_purges_applied");
    purge_logged(&fleet, &fleet.envoys[0], &purge_user(NOBODY));
    let read = poll(SPREAD, || {
        (fleet.envoys[1].counter("l2_purges_applied") > applied).then_some(())
    });
    assert!(read.is_some(), "B never applied the purge");
    let gaps_before: Vec<u64> = fleet
        .envoys
        .iter()
        .map(|e| e.counter("l2_purge_gaps"))
        .collect();
    trim_log(&fleet, 0);
    fleet.add_envoy();
    let c_bodies = fetch_on(&fleet, &fleet.envoys[2], &on_c);

    let (commands, started) = (redis_commands(&fleet), Instant::now());
    let mut lost = Vec::new();
    while started.elapsed() < WINDOW {
        for (e, queries, bodies) in [(1, &on_b, &b_bodies), (2, &on_c, &c_bodies)] {
            let missed = not_hits(&fleet.envoys[e], queries, bodies);
            if !missed.is_empty() {
                let who = ["A", "B", "C"][e];
                lost.push(format!(
                    "{who} at {:?}: {}",
                    started.elapsed(),
                    summary(&missed)
                ));
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let rate = (redis_commands(&fleet) - commands) as f64 / started.elapsed().as_secs_f64();
    let gaps: Vec<u64> = fleet
        .envoys
        .iter()
        .enumerate()
        .map(|(i, e)| e.counter("l2_purge_gaps") - gaps_before.get(i).copied().unwrap_or(0))
        .collect();
    println!("after the log was emptied: gaps on A, B, C {gaps:?}; Redis {rate:.0} commands/s");
    assert!(
        gaps.iter().all(|&g| g <= 2) && lost.is_empty() && rate < 300.0,
        "since the log was emptied: gaps on A, B, C {gaps:?} (at most 2 each); Redis ran \
         {rate:.0} commands/s (an idle fleet of 3: tens); answers no purge was about, lost: \
         {lost:?}"
    );
}

/// B caches user 3 (the L2 holds it); A purges P1 (a user nobody cached), P2 (user 3) and P3
/// (another one nobody cached), each written to the log; then P2's entry is deleted from the log
/// (XDEL). An Envoy started afterwards reads P1 and P3: it never serves user 3's answer from
/// before P2.
#[test]
fn a_record_deleted_from_the_middle_of_the_log_is_noticed() {
    let mut fleet = fleet(2);
    let z = user_query(3);
    let old = cache_on(&fleet, &fleet.envoys[1], std::slice::from_ref(&z)).remove(0);
    let a = &fleet.envoys[0];
    purge_logged(&fleet, a, &purge_user(NOBODY + 1));
    let p2 = purge_logged(&fleet, a, &purge_user(3));
    purge_logged(&fleet, a, &purge_user(NOBODY + 2));
    let deleted: u64 = redis_cmd(&fleet, &["XDEL", LOG, &p2]);
    assert_eq!(deleted, 1, "P2 deleted from the log");
    let c = fleet.add_envoy();
    never_serves(
        c,
        &z,
        &old,
        3,
        "an Envoy started after P2 was deleted from the log",
    );
}

// --- review findings ----------------------------------------------------------------------------

/// fleet.yaml's filter configuration line that names the fleet key: where a test changes the key
/// or adds `l2` settings.
const FLEET_KEY_LINE: &str = r#""fleet_key_env": "GRAPHQL_CACHE_FLEET_KEY""#;

/// An Envoy of `fleet` whose `l2` configuration has `l2_extra` in place of the fleet key's line.
fn envoy_with_l2(fleet: &Fleet, l2_port: u16, l2_extra: &str) -> Envoy {
    let config = fleet_config(fleet.origin.port, l2_port, LONG_TTL);
    assert!(config.contains(FLEET_KEY_LINE), "fleet.yaml changed");
    let envoy = Envoy::start_bootstrap(&config.replace(FLEET_KEY_LINE, l2_extra), 2);
    envoy.wait_l2_ready();
    envoy
}

/// The leader's fetch of user 1 is at the origin (slowed down) when user 1 is purged; a request
/// that arrives after the purge must not be answered with what that fetch brings (its data may
/// predate the purge), but by a fetch that began after it.
#[test]
fn a_request_after_a_purge_does_not_join_a_fetch_that_began_before_it() {
    let fleet = Fleet::start(&FleetOptions {
        extra_config: LONG_TTL.into(),
        origin_args: vec!["--delay-ms".into(), "800".into()],
        ..FleetOptions::new(Backend::Single, 1)
    });
    let a = &fleet.envoys[0];
    let q = user_query(1);
    let at_origin = fleet.origin.count();
    std::thread::scope(|s| {
        let leader = s.spawn(|| a.send(Req::query(&q)));
        let started = poll(Duration::from_secs(5), || {
            (fleet.origin.count() > at_origin).then_some(())
        });
        assert!(
            started.is_some(),
            "the leader's fetch never reached the origin"
        );
        purge(a, &purge_user(1));
        let after = a.send(Req::query(&q));
        let before = leader.join().unwrap();
        assert_eq!((before.status, after.status), (200, 200));
        assert_ne!(
            after.body,
            before.body,
            "a request made after the purge got the fetch from before it ({} {:?})",
            after.cache(),
            after.reason()
        );
    });
}

/// Envoy A's L2 is gone for longer than `feed_failsafe_ms` (1 s here): an answer A fetched during
/// the outage, after the fail-safe first fired, is not served longer than the bound after it was
/// fetched (a purge made elsewhere meanwhile would be unseen).
#[test]
fn in_a_long_l2_outage_nothing_is_served_longer_than_the_failsafe_bound() {
    let fleet = fleet(0);
    let mut own = OwnL2::start(&fleet);
    let a = envoy_with_l2(
        &fleet,
        own.addr.port(),
        &format!(r#"{FLEET_KEY_LINE}, "feed_failsafe_ms": 1000"#),
    );
    own.stop();
    let fired = poll(Duration::from_secs(10), || {
        (a.counter("l2_feed_failsafe") > 0).then_some(())
    });
    assert!(fired.is_some(), "the fail-safe never fired");
    let q = user_query(2);
    let first = a.send(Req::query(&q));
    let fetched = Instant::now();
    assert_eq!(
        (first.status, first.cache()),
        (200, "MISS"),
        "{}",
        first.text()
    );
    let again = a.send(Req::query(&q));
    assert_eq!(again.cache(), "HIT", "kept while younger than the bound");
    stops_serving(
        &a,
        &q,
        &first.body,
        Duration::from_secs(5),
        "A, user 2 fetched during the outage",
    );
    assert!(
        fetched.elapsed() >= Duration::from_millis(900),
        "purged before the bound: {:?}",
        fetched.elapsed()
    );
}

/// An Envoy whose clock runs a minute behind purges user 1 (its mark, signed with the fleet key,
/// is written to the L2 as that Envoy writes it, dated by its clock): B, which fetched user 1
/// just before, must stop serving it. The log's own time for the mark (less `purge_skew_ms`, 0
/// here: B's clock and Redis's are this machine's) is what dates it.
#[test]
fn a_purge_from_an_envoy_whose_clock_runs_behind_still_purges_the_fleet() {
    use graphql_cache::config::FleetKey;
    use graphql_cache::invalidate::marks::{tag_hash, Target};
    let fleet = fleet(0);
    let b = &envoy_with_l2(
        &fleet,
        fleet.l2.addr.port(),
        &format!(r#"{FLEET_KEY_LINE}, "purge_skew_ms": 0"#),
    );
    let q = user_query(1);
    let old = cache_on(&fleet, b, std::slice::from_ref(&q)).remove(0);
    let fleet_key = testkit::FLEET_SECRETS
        .iter()
        .find(|(name, _)| *name == "GRAPHQL_CACHE_FLEET_KEY")
        .unwrap()
        .1;
    let key = FleetKey::new(fleet_key.as_bytes()).unwrap();
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    let behind_us = now_us - 60_000_000;
    let mark = key.seal_mark(behind_us, Target::Tag(tag_hash("entity:User:1")), false);
    let body = l2_proto::marks::MarksBatch::encode(600_000, &[mark]).unwrap();
    let r = fleet.l2.post(l2_proto::route::MARKS, &body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    stops_serving(
        b,
        &q,
        &old,
        SPREAD,
        "B, user 1 purged by an Envoy a minute behind",
    );
}

/// The fleet key is rotated: A signs with the new key and accepts the old, B signs with the old
/// and accepts the new (step 2 of docs/fleet.md's rotation). Purges on either reach the other, and
/// neither purges everything (its unrelated answers stay served, no gap counted).
#[test]
fn while_the_fleet_key_rotates_purges_travel_both_ways_and_nothing_else_is_purged() {
    const OLD: &str = "dev-fleet-key-change-me-0123456789abcdef";
    const NEW: &str = "rotated-fleet-key-0123456789abcdef-0001";
    let fleet = fleet(0);
    let keys = |first: &str, second: &str| format!(r#""fleet_keys": ["{first}", "{second}"]"#);
    let port = fleet.l2.addr.port();
    let a = envoy_with_l2(&fleet, port, &keys(NEW, OLD));
    let b = envoy_with_l2(&fleet, port, &keys(OLD, NEW));
    let unrelated: Vec<String> = (1..=5).map(echo_query).collect();
    let kept = [
        cache_on(&fleet, &a, &unrelated),
        cache_on(&fleet, &b, &unrelated),
    ];
    for (from, to, user, what) in [(&a, &b, 1, "A's purge on B"), (&b, &a, 2, "B's purge on A")] {
        let q = user_query(user);
        let old = cache_on(&fleet, to, std::slice::from_ref(&q)).remove(0);
        purge(from, &purge_user(user));
        stops_serving(to, &q, &old, SPREAD, what);
    }
    for (envoy, bodies, name) in [(&a, &kept[0], "A"), (&b, &kept[1], "B")] {
        let missed = not_hits(envoy, &unrelated, bodies);
        assert!(missed.is_empty(), "{name} lost {}", summary(&missed));
        assert_eq!(envoy.counter("l2_purge_gaps"), 0, "{name} saw a gap");
    }
}
