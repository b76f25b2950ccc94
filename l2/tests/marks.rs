//! The durable purge state against real Redis: `POST /v1/marks` (each mark a numbered log entry,
//! the newest mark per target kept in the snapshot), `GET /v1/marks` (the snapshot a page at a
//! time, with the log's tip and sequence), and numbered reads of `GET /v1/purges` (`n`), which see
//! every way an entry can go missing and none where none did.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{http, Redis, Resp, StartL2, L2};
use l2_proto::marks::{
    Mark, MarksAdded, MarksBatch, MarksPage, MARKS_PER_PAGE, MAX_MARKS_PER_BATCH,
};
use l2_proto::purge::Target;
use l2_proto::purges::PurgesAnswer;
use redis::Value;

const MARKS: &[u8] = b"{gc:purges}:marks";
const STREAM: &[u8] = b"gc:purges";

/// A mark of one tag at `at_us`.
fn mark(at_us: u64, tag: u64, soft: bool, seal: u8) -> Vec<u8> {
    common::mark(at_us, Target::Tag(tag), soft, seal)
}

fn field(sealed: &[u8]) -> [u8; 9] {
    Mark::read(sealed).unwrap().field()
}

fn add(l2: &L2, keep_ms: u64, marks: &[Vec<u8>]) -> MarksAdded {
    let r = l2.post("/v1/marks", &MarksBatch::encode(keep_ms, marks).unwrap());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    MarksAdded::decode(&r.body).unwrap()
}

fn read(r: &Resp) -> PurgesAnswer {
    assert_eq!(r.status, 200, "{}", r.text());
    PurgesAnswer::decode(&r.body).unwrap()
}

/// A numbered read, at once.
fn purges(l2: &L2, after: &str, gen: &str, n: u64) -> PurgesAnswer {
    read(&l2.get(&format!("/v1/purges?after={after}&gen={gen}&n={n}")))
}

/// Every page of the snapshot, each checked as the filter checks it: the first page, and every
/// (id, mark) of all of them.
fn snapshot(l2: &L2) -> (MarksPage, Vec<(String, Vec<u8>)>) {
    let (first, all, _) = snapshot_pages(l2);
    (first, all)
}

fn snapshot_pages(l2: &L2) -> (MarksPage, Vec<(String, Vec<u8>)>, usize) {
    let mut cursor = "0".to_string();
    let mut first = None;
    let mut all = Vec::new();
    let mut pages = 0;
    loop {
        pages += 1;
        let r = l2.get(&format!("/v1/marks?cursor={cursor}"));
        assert_eq!(r.status, 200, "{}", r.text());
        let page = MarksPage::decode(&r.body).unwrap();
        assert!(
            page.entries.len() <= MARKS_PER_PAGE,
            "{}",
            page.entries.len()
        );
        for e in &page.entries {
            all.push((e.id.clone(), e.data().unwrap()));
        }
        cursor = page.cursor.clone();
        first.get_or_insert(page);
        if cursor == "0" {
            return (first.unwrap(), all, pages);
        }
    }
}

/// The log as Redis holds it: (id, d, n).
fn log(redis: &Redis) -> Vec<(String, Vec<u8>, Option<u64>)> {
    let v = redis.cmd(&[b"XRANGE", STREAM, b"-", b"+"]);
    let entries: Vec<(String, Vec<Vec<u8>>)> = redis::from_redis_value(&v).unwrap();
    entries
        .into_iter()
        .map(|(id, fields)| {
            let mut d = Vec::new();
            let mut n = None;
            for pair in fields.chunks(2) {
                match pair[0].as_slice() {
                    b"d" => d = pair[1].clone(),
                    b"n" => n = Some(String::from_utf8_lossy(&pair[1]).parse().unwrap()),
                    _ => {}
                }
            }
            (id, d, n)
        })
        .collect()
}

/// A snapshot field's value: (instant, log entry id, sealed mark).
fn stored(redis: &Redis, sealed: &[u8]) -> Option<(u64, String, Vec<u8>)> {
    let v = redis.cmd(&[b"HGET", MARKS, &field(sealed)]);
    let v: Option<Vec<u8>> = redis::from_redis_value(&v).unwrap();
    let v = v?;
    let at = u64::from_be_bytes(v[..8].try_into().unwrap());
    let space = 8 + v[8..].iter().position(|b| *b == b' ').unwrap();
    let id = String::from_utf8(v[8..space].to_vec()).unwrap();
    Some((at, id, v[space + 1..].to_vec()))
}

fn field_pttl(redis: &Redis, name: &[u8]) -> i64 {
    let v = redis.cmd(&[b"HPTTL", MARKS, b"FIELDS", b"1", name]);
    let v: Vec<i64> = redis::from_redis_value(&v).unwrap();
    v[0]
}

fn redis_time_ms(redis: &Redis) -> u64 {
    let v: Vec<String> = redis::from_redis_value(&redis.cmd(&[b"TIME"])).unwrap();
    v[0].parse::<u64>().unwrap() * 1000 + v[1].parse::<u64>().unwrap() / 1000
}

#[test]
fn a_batch_becomes_numbered_log_entries_and_the_snapshot_keeps_the_newest_mark() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &["--min-purge-keep-ms", "120000"]);
    // Dated ahead of the log's clock: ordered by their own instants (see below for behind).
    let base = (redis_time_ms(&redis) + 3_600_000) * 1000;
    let a = mark(base + 300, 1, false, 0xA1);
    let batch = vec![
        mark(base + 100, 1, false, 0xA0),
        mark(base + 200, 2, false, 0xB0),
        a.clone(),
        mark(base + 50, 1, true, 0xC0),
    ];
    let added = add(&l2, 60_000, &batch);
    assert_eq!(added.generation.len(), 16);
    assert_eq!(added.n, 4);
    let entries = log(&redis);
    assert_eq!(entries.len(), 4);
    for (i, (e, sealed)) in entries.iter().zip(&batch).enumerate() {
        assert_eq!((&e.1, e.2), (sealed, Some(i as u64 + 1)), "entry {i}");
    }
    assert_eq!(entries[3].0, added.last);
    // Tag 1 hard: the newer of two marks in one batch, with the entry that wrote it.
    assert_eq!(
        stored(&redis, &a),
        Some((base + 300, entries[2].0.clone(), a.clone()))
    );
    // Soft and hard marks of one tag are fields of their own.
    assert_eq!(stored(&redis, &batch[3]).unwrap().0, base + 50);
    // The batch asked 60 s, the operator's floor is 120 s.
    let ttl = field_pttl(&redis, &field(&a));
    assert!((110_000..=120_000).contains(&ttl), "{ttl}");

    // An older mark sent later is logged but does not replace the newer; an equal one does (the
    // later write: a reader dates it no earlier); a newer one does, for as long as its own batch
    // asks, or longer where the field already lived longer.
    let older = mark(base + 250, 1, false, 0xA2);
    let equal = mark(base + 300, 1, false, 0xA3);
    let newer = mark(base + 201, 2, false, 0xB1);
    let later = add(&l2, 600_000, &[older.clone(), equal.clone(), newer.clone()]);
    assert_eq!(
        (later.generation.as_str(), later.n),
        (added.generation.as_str(), 7)
    );
    let entries = log(&redis);
    assert_eq!(entries.len(), 7);
    assert_eq!((&entries[4].1, entries[4].2), (&older, Some(5)));
    assert_eq!(
        stored(&redis, &a),
        Some((base + 300, entries[5].0.clone(), equal.clone()))
    );
    assert_eq!(
        stored(&redis, &newer),
        Some((base + 201, later.last.clone(), newer.clone()))
    );
    let ttl = field_pttl(&redis, &field(&newer));
    assert!((590_000..=600_000).contains(&ttl), "{ttl}");
    // The hash's own fields, the hash and the log never expire.
    assert_eq!(field_pttl(&redis, b"gen"), -1);
    assert_eq!(field_pttl(&redis, b"seq"), -1);
    for name in [MARKS, STREAM, &b"{gc:purges}:gen"[..]] {
        assert_eq!(redis.cmd(&[b"PTTL", name]), Value::Int(-1));
    }

    // Refused: not a batch (400, naming the body), too large (413); nothing logged.
    let r = l2.post("/v1/marks", b"\x01nope");
    assert_eq!(r.status, 400);
    assert!(r.text().contains("marks body"), "{}", r.text());
    let r = l2.post(
        "/v1/marks",
        &vec![0; l2_proto::marks::MAX_MARKS_BODY_BYTES + 1],
    );
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(log(&redis).len(), 7);
    for (outcome, n) in [
        ("added", 2),
        ("bad_request", 1),
        ("too_large", 1),
        ("error", 0),
    ] {
        let series = format!("l2_requests_total{{verb=\"marks\",outcome=\"{outcome}\"}}");
        assert_eq!(l2.metric(&series), n, "{series}");
    }
}

#[test]
fn snapshot_pages_hold_every_field_with_the_tip_and_sequence_of_the_log() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &[]);
    // Empty: one page, no entries, where a reader starts.
    let (first, all) = snapshot(&l2);
    assert_eq!((first.tip.as_str(), first.n, all.len()), ("0", 0, 0));
    let mut sent = BTreeSet::new();
    let mut last = None;
    let total = 2 * MAX_MARKS_PER_BATCH + 500;
    let tags: Vec<u64> = (0..total as u64).collect();
    for chunk in tags.chunks(MAX_MARKS_PER_BATCH) {
        let marks: Vec<Vec<u8>> = chunk
            .iter()
            .map(|t| mark(1_000 + t, *t, false, 7))
            .collect();
        sent.extend(marks.iter().cloned());
        let t = Instant::now();
        last = Some(add(&l2, 60_000, &marks));
        println!("a batch of {} marks: {:?}", marks.len(), t.elapsed());
    }
    let last = last.unwrap();
    assert_eq!(last.n, total as u64);
    let (first, all, pages) = snapshot_pages(&l2);
    assert!(pages > 1, "one page of {}", all.len());
    assert_eq!(first.generation, last.generation);
    assert_eq!((first.tip.as_str(), first.n), (last.last.as_str(), last.n));
    // Every field once (a scan may repeat one: the set says which were seen), each with the id of
    // the log entry that wrote it.
    let got: BTreeSet<Vec<u8>> = all.iter().map(|(_, m)| m.clone()).collect();
    assert_eq!(got, sent);
    let ids: BTreeSet<String> = log(&redis).into_iter().map(|e| e.0).collect();
    assert!(all.iter().all(|(id, _)| ids.contains(id)));
    println!("{} marks read in {pages} pages", all.len());
    // The tip of an emptied log is still the newest id it gave.
    redis.cmd(&[b"XTRIM", STREAM, b"MAXLEN", b"0"]);
    let (first, _) = snapshot(&l2);
    assert_eq!((first.tip.as_str(), first.n), (last.last.as_str(), last.n));

    for bad in ["x", "-1", "1.5", "99999999999999999999", ""] {
        let r = l2.get(&format!("/v1/marks?cursor={bad}"));
        assert_eq!(r.status, 400, "{bad}");
        assert!(r.text().contains("`cursor`"), "{}", r.text());
    }
    assert_eq!(
        l2.metric("l2_requests_total{verb=\"snapshot\",outcome=\"bad_request\"}"),
        5
    );
    assert!(l2.metric("l2_requests_total{verb=\"snapshot\",outcome=\"page\"}") >= 3);
}

#[test]
fn a_numbered_reader_sees_an_entry_deleted_from_the_middle_or_the_end() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &[]);
    let marks: Vec<Vec<u8>> = (0..3).map(|i| mark(10 + i, i, false, 1)).collect();
    let added = add(&l2, 60_000, &marks);
    let gen = added.generation.as_str();
    let ids: Vec<String> = log(&redis).into_iter().map(|e| e.0).collect();
    let all = purges(&l2, "0", gen, 0);
    assert!(!all.gap);
    assert_eq!((all.n, all.last.as_str()), (Some(3), ids[2].as_str()));
    let numbers: Vec<Option<u64>> = all.entries.iter().map(|e| e.n).collect();
    assert_eq!(numbers, [Some(1), Some(2), Some(3)]);
    assert_eq!(all.entries[1].data().unwrap(), marks[1]);

    redis.cmd(&[b"XDEL", STREAM, ids[1].as_bytes()]);
    for (after, n) in [("0", 0), (ids[0].as_str(), 1)] {
        let p = purges(&l2, after, gen, n);
        assert!(p.gap, "after {after}");
        assert_eq!((p.last.as_str(), p.entries.len(), p.n), (after, 0, Some(3)));
    }
    // Past the hole: nothing missing.
    let p = purges(&l2, &ids[1], gen, 2);
    assert!(!p.gap);
    assert_eq!((p.entries.len(), p.last.as_str()), (1, ids[2].as_str()));
    assert!(!purges(&l2, &ids[2], gen, 3).gap);
    // A reader that does not count reads around the hole, as it always did.
    let old = read(&l2.get("/v1/purges?after=0"));
    assert!(!old.gap);
    assert_eq!(old.n, None);
    assert!(old.entries.iter().all(|e| e.n.is_none()));
    assert_eq!(old.entries.len(), 2);

    // The newest entry deleted: the sequence is ahead of what is left.
    redis.cmd(&[b"XDEL", STREAM, ids[2].as_bytes()]);
    assert!(purges(&l2, &ids[1], gen, 2).gap);
    // A number the log never reached, and a wrong generation.
    assert!(purges(&l2, &ids[1], gen, 7).gap);
    assert!(purges(&l2, &ids[1], "0123456789abcdef", 3).gap);
    let r = l2.get("/v1/purges?after=0&n=x");
    assert_eq!(r.status, 400);
    assert!(r.text().contains("`n`"), "{}", r.text());
}

#[test]
fn an_emptied_log_is_no_gap_at_its_end_and_one_gap_behind_it() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &[]);
    let marks = vec![mark(1, 1, false, 1), mark(2, 2, false, 1)];
    let added = add(&l2, 60_000, &marks);
    let gen = added.generation.clone();
    let first = log(&redis)[0].0.clone();
    redis.cmd(&[b"XTRIM", STREAM, b"MAXLEN", b"0"]);
    assert_eq!(redis.cmd(&[b"XLEN", STREAM]), Value::Int(0));
    // At the end: nothing was missed, read after read.
    for _ in 0..3 {
        let p = purges(&l2, &added.last, &gen, added.n);
        assert!(!p.gap);
        assert_eq!((p.last.as_str(), p.n), (added.last.as_str(), Some(2)));
    }
    // Behind: one gap; the snapshot gives every mark and where to go on; from there, none.
    let p = purges(&l2, &first, &gen, 1);
    assert!(p.gap);
    let (page, all) = snapshot(&l2);
    assert_eq!((page.tip.as_str(), page.n), (added.last.as_str(), 2));
    assert_eq!(all.len(), 2);
    let again = purges(&l2, &page.tip, &page.generation, page.n);
    assert!(!again.gap);
    let next = add(&l2, 60_000, &[mark(3, 3, false, 1)]);
    let p = purges(&l2, &page.tip, &page.generation, page.n);
    assert!(!p.gap);
    assert_eq!(
        (p.entries.len(), p.last.as_str(), p.n),
        (1, next.last.as_str(), Some(3))
    );
    assert_eq!(p.entries[0].n, Some(3));
}

#[test]
fn the_log_keeps_what_is_younger_than_purge_log_ms_and_about_purge_log_max() {
    // One entry per stream node: `~` trims whole nodes, so the trims are exact here.
    let redis = Redis::start_on(
        common::free_port(),
        &["--stream-node-max-entries".into(), "1".into()],
    );
    let now = redis_time_ms(&redis);
    for (ago, d) in [
        (120_000, &b"two minutes ago"[..]),
        (30_000, b"thirty seconds ago"),
    ] {
        let id = format!("{}-0", now - ago);
        redis.cmd(&[b"XADD", STREAM, id.as_bytes(), b"d", d, b"n", b"1"]);
    }
    let l2 = L2::single(&redis, &["--purge-log-ms", "60000", "--purge-log-max", "5"]);
    add(&l2, 60_000, &[mark(1, 1, false, 1)]);
    let data: Vec<Vec<u8>> = log(&redis).into_iter().map(|e| e.1).collect();
    assert_eq!(data, [b"thirty seconds ago".to_vec(), mark(1, 1, false, 1)]);
    // Past the count, the oldest go.
    let ten: Vec<Vec<u8>> = (0..10).map(|i| mark(i, i, false, 2)).collect();
    add(&l2, 60_000, &ten);
    let left = log(&redis);
    let numbers: Vec<Option<u64>> = left.iter().map(|e| e.2).collect();
    assert_eq!(numbers, [Some(7), Some(8), Some(9), Some(10), Some(11)]);
    // The old single-record verb trims the same way.
    assert_eq!(l2.post("/v1/purge", b"type:User").status, 200);
    let numbers: Vec<Option<u64>> = log(&redis).iter().map(|e| e.2).collect();
    assert_eq!(numbers, [Some(8), Some(9), Some(10), Some(11), Some(12)]);
}

#[test]
fn losing_the_snapshot_begins_a_new_generation() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &[]);
    let added = add(&l2, 60_000, &[mark(1, 1, false, 1)]);
    redis.cmd(&[b"DEL", MARKS]);
    let p = purges(&l2, &added.last, &added.generation, added.n);
    assert!(p.gap);
    let gen2 = p.generation.unwrap();
    assert_ne!(gen2, added.generation);
    // The log is kept: the new generation starts at its tip, numbered from 0.
    let (page, all) = snapshot(&l2);
    assert_eq!(
        (page.generation.as_str(), page.tip.as_str()),
        (gen2.as_str(), added.last.as_str())
    );
    assert_eq!((page.n, all.len()), (0, 0));
    assert!(!purges(&l2, &page.tip, &gen2, 0).gap);
    let next = add(&l2, 60_000, &[mark(2, 1, false, 1)]);
    assert_eq!((next.generation.as_str(), next.n), (gen2.as_str(), 1));
    let p = purges(&l2, &page.tip, &gen2, 0);
    assert!(!p.gap);
    assert_eq!(p.entries.len(), 1);
    // A reader starting from the log's beginning meets the old generation's entry, then the new
    // one's, both numbered 1: a gap (old entries are left in the log, out of the numbering).
    assert!(purges(&l2, "0", &gen2, 0).gap);
    // The snapshot's gen field rewritten, or the gen key lost: a new generation each time.
    redis.cmd(&[b"HSET", MARKS, b"gen", b"other"]);
    let gen3 = add(&l2, 60_000, &[mark(3, 1, false, 1)]).generation;
    assert_ne!(gen3, gen2);
    redis.cmd(&[b"DEL", b"{gc:purges}:gen"]);
    let gen4 = snapshot(&l2).0.generation;
    assert_ne!(gen4, gen3);
}

#[test]
fn the_old_purge_verb_numbers_its_entry_and_old_readers_read_marks() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &[]);
    let r = l2.post("/v1/purge", b"type:User");
    assert_eq!(r.status, 200, "{}", r.text());
    let added = add(&l2, 60_000, &[mark(5, 9, false, 3)]);
    assert_eq!(added.n, 2);
    let numbers: Vec<Option<u64>> = log(&redis).iter().map(|e| e.2).collect();
    assert_eq!(numbers, [Some(1), Some(2)]);
    // The old verb's record names no one target: the snapshot holds only the mark.
    assert_eq!(redis.cmd(&[b"HLEN", MARKS]), Value::Int(3));
    let p = purges(&l2, "0", &added.generation, 0);
    assert!(!p.gap);
    assert_eq!(p.entries[0].data().unwrap(), b"type:User");
    assert_eq!(p.entries[1].data().unwrap(), mark(5, 9, false, 3));
    // An old reader gets the answer it always got: no numbers anywhere.
    let r = l2.get("/v1/purges?after=0");
    let old = read(&r);
    assert!(!old.gap);
    assert_eq!(old.entries.len(), 2);
    assert_eq!(old.entries[1].data().unwrap(), mark(5, 9, false, 3));
    assert!(!r.text().contains("\"n\""), "{}", r.text());
}

#[test]
fn a_numbered_long_poll_is_woken_by_a_batch_of_marks() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &[]);
    let added = add(&l2, 60_000, &[mark(1, 1, false, 1)]);
    let path = format!(
        "/v1/purges?after={}&gen={}&n=1&wait_ms=3000",
        added.last, added.generation
    );
    let addr = l2.addr;
    let poller = std::thread::spawn(move || (http(addr, "GET", &path, b""), Instant::now()));
    l2.wait_in_flight(1);
    let sent = Instant::now();
    let next = add(&l2, 60_000, &[mark(2, 2, false, 1), mark(3, 3, false, 1)]);
    let (r, got) = poller.join().unwrap();
    let p = read(&r);
    assert!(!p.gap);
    assert_eq!(
        (p.entries.len(), p.last.as_str(), p.n),
        (2, next.last.as_str(), Some(3))
    );
    assert!(got.duration_since(sent) < Duration::from_millis(500));
}

/// An Envoy whose clock runs behind purges a target after another purged it: the snapshot keeps
/// the later purge, dated no earlier than the log's time less the skew, so a reader of the
/// snapshot dates the target as late as a reader of the log.
#[test]
fn a_later_purge_from_a_clock_behind_wins_the_snapshot() {
    let redis = Redis::start();
    let l2 = L2::single(&redis, &[]);
    let now_us = redis_time_ms(&redis) * 1000;
    let earlier = mark(now_us - 30_000_000, 4, false, 0xD0);
    add(&l2, 60_000, std::slice::from_ref(&earlier));
    let (dated, _, _) = stored(&redis, &earlier).unwrap();
    assert!(
        dated >= now_us - 1_000_000,
        "no earlier than the log's time less the skew"
    );
    let behind = mark(now_us - 60_000_000, 4, false, 0xD1);
    let written = add(&l2, 60_000, std::slice::from_ref(&behind));
    assert_eq!(
        stored(&redis, &behind).map(|(_, id, sealed)| (id, sealed)),
        Some((written.last.clone(), behind.clone())),
        "the later purge, though its Envoy dated it a minute early"
    );
    // A field keeps the longest expiry a batch asked for.
    add(&l2, 600_000, &[mark(now_us + 5_000_000, 4, false, 0xD2)]);
    add(&l2, 60_000, &[mark(now_us + 6_000_000, 4, false, 0xD3)]);
    let ttl = field_pttl(&redis, &field(&behind));
    assert!(ttl > 500_000, "{ttl}");
}
