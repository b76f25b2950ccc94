//! Native micro-benchmarks of the filter's pure core: the request key path (parse, canonicalize,
//! hash, and the whole `classify_body`) and the stored entry format (encode, decode, peek, and the
//! response-body check done before storing).
//!
//! Run with `cargo bench --bench key_path`. Benchmark ids read `key_path/<size>/<stage>` and
//! `entry/<size>/<op>`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use criterion::{
    black_box, criterion_group, criterion_main, measurement::WallTime, BenchmarkGroup, Criterion,
    Throughput,
};
use graphql_cache::cache::entry::Entry;
use graphql_cache::cache::ghosts::would_hit;
use graphql_cache::cache::storable::{body_storable, storable_entry, Answer, Stamp};
use graphql_cache::config::Config;
use graphql_cache::invalidate::tags::OperationTags;
use graphql_cache::request::canonical::canonicalize;
use graphql_cache::request::classify::{classify_body, key_context, RequestHead};
use graphql_cache::request::http::parse_post_body;
use graphql_cache::request::key::{build_key, CacheKey};
use graphql_cache::whatif::candidate::{candidate as whatif_candidate, Settings};
use graphql_cache::whatif::report;
use graphql_cache::whatif::ring::{Kind, Record, Ring};
use std::fmt::Write;
use std::time::Duration;

/// Same settings for every group so that `cargo bench --bench key_path` stays well under 90 s on
/// two cores: 22 benchmarks x (warm-up + 2 s measurement + ~0.2 s analysis). Criterion's warm-up
/// doubles its iteration count until the time is reached, so it can run up to twice as long as set:
/// 0.5 s keeps it near 1 s. 50 samples fit the slowest benchmark (~0.5 ms per iteration) into 2 s.
fn configure(group: &mut BenchmarkGroup<'_, WallTime>) {
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50);
}

// --- request bodies -----------------------------------------------------------------------------

fn small_body() -> Vec<u8> {
    br#"{"query":"{ users { id name } }"}"#.to_vec()
}

/// A POST body as a client library sends it: named operation, four variables (one an input
/// object), two fragments, nested selections, an input-object literal argument, aliases and
/// directives.
fn typical_body() -> Vec<u8> {
    let query = r#"query ProductPage($id: ID!, $first: Int = 10, $filter: ReviewFilter, $withRelated: Boolean!) {
  product(id: $id) {
    ...ProductCore
    title: name(locale: "en-US")
    price { amount currency formatted }
    reviews(first: $first, filter: $filter, orderBy: {field: CREATED_AT, direction: DESC}) {
      totalCount
      edges {
        cursor
        node {
          ...ReviewFields
          author { id displayName: name avatar(size: 64) { url } }
        }
      }
      pageInfo { hasNextPage endCursor }
    }
    related: recommendations(limit: 4) @include(if: $withRelated) {
      ...ProductCore
      thumbnail: image(width: 120, height: 120) { url }
    }
  }
}

fragment ProductCore on Product {
  id
  sku
  slug
  images(first: 3) { url alt width height }
}

fragment ReviewFields on Review {
  id
  rating
  title
  body
  createdAt
}
"#;
    let variables = r#"{"id":"prod-8f3a2c","first":10,"filter":{"minRating":4,"verifiedOnly":true,"languages":["en","de"]},"withRelated":true}"#;
    let query = serde_json::to_string(query).expect("query as a JSON string");
    format!(r#"{{"operationName":"ProductPage","variables":{variables},"query":{query}}}"#)
        .into_bytes()
}

/// A generated dashboard-style query of about 16 KB: many aliased root fields with input-object
/// arguments, one fragment per entity type (each with nested selections and an inline fragment),
/// and a few shared fragments. Nesting stays at most 7 deep and the field count far below the
/// default `max_query_fields`.
fn large_body() -> Vec<u8> {
    const TYPES: usize = 26;
    let mut q = String::with_capacity(20 * 1024);
    q.push_str(
        "query Dashboard($region: Region!, $first: Int = 20, $after: String, $since: DateTime, \
         $withAudit: Boolean = false) {\n",
    );
    for i in 0..TYPES {
        let _ = write!(
            q,
            "  panel{i}: entities{i}(first: $first, after: $after, \
             where: {{region: $region, updatedSince: $since, status: [ACTIVE, PENDING], rank: {i}}}) {{\n\
             \x20   totalCount\n\
             \x20   pageInfo {{ ...PageInfoFields }}\n\
             \x20   edges {{ cursor node {{ ...Entity{i}Fields audit @include(if: $withAudit) {{ ...AuditFields }} }} }}\n\
             \x20 }}\n"
        );
    }
    q.push_str("}\n\n");
    for i in 0..TYPES {
        let _ = write!(
            q,
            "fragment Entity{i}Fields on Entity{i} {{\n\
             \x20 id\n\
             \x20 key: slug\n\
             \x20 displayName: name(locale: \"en-US\")\n\
             \x20 createdAt\n\
             \x20 updatedAt\n\
             \x20 owner {{ ...UserFields }}\n\
             \x20 metrics(window: {{days: 7, granularity: HOUR}}) {{ count sum p50 p99 }}\n\
             \x20 tags(first: 5) {{ name color }}\n\
             \x20 ... on Entity{i}Extended {{ extra{i} details {{ label value unit }} }}\n\
             }}\n\n"
        );
    }
    q.push_str(
        "fragment UserFields on User {\n  id\n  login\n  name\n  avatar(size: 32) { url }\n}\n\n\
         fragment PageInfoFields on PageInfo {\n  hasNextPage\n  endCursor\n}\n\n\
         fragment AuditFields on Audit {\n  actor { ...UserFields }\n  action\n  at\n}\n",
    );
    let variables = r#"{"region":"EU_WEST","first":20,"after":null,"since":"2024-01-01T00:00:00Z","withAudit":true}"#;
    let query = serde_json::to_string(&q).expect("query as a JSON string");
    format!(r#"{{"operationName":"Dashboard","variables":{variables},"query":{query}}}"#)
        .into_bytes()
}

/// POST /graphql, JSON, with values for both default vary headers (authorization, cookie).
fn request_head() -> RequestHead {
    RequestHead {
        method: b"POST".to_vec(),
        path: b"/graphql".to_vec(),
        authority: b"api.example.com".to_vec(),
        content_type: Some(b"application/json".to_vec()),
        accept: Some(b"application/json".to_vec()),
        vary: vec![
            Some(b"Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl".to_vec()),
            Some(b"session=4f1c9e2a7b; theme=dark".to_vec()),
        ],
        ..Default::default()
    }
}

fn bench_key_path(c: &mut Criterion) {
    let config = Config::default();
    let head = request_head();
    let ctx = key_context(&config, &head, "/graphql");

    let bodies = [
        ("small", small_body()),
        ("typical", typical_body()),
        ("large", large_body()),
    ];
    eprintln!(
        "request body sizes: {}",
        bodies
            .iter()
            .map(|(n, b)| format!("{n}={} B", b.len()))
            .collect::<Vec<_>>()
            .join(", ")
    );

    for (size, body) in &bodies {
        // Everything must take the cacheable path; a bypass would benchmark an early return.
        let req = parse_post_body(body).expect("body parses");
        let op = canonicalize(&req.query, req.operation_name.as_deref(), config.limits())
            .expect("query canonicalizes");
        let key: CacheKey = build_key(&ctx, &req, &op);
        let classified = classify_body(&config, &head, body).expect("request is cacheable");
        assert_eq!(classified.key, key, "{size}: benchmark context differs");

        let mut group = c.benchmark_group(format!("key_path/{size}"));
        configure(&mut group);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function("parse_post_body", |b| {
            b.iter(|| parse_post_body(black_box(body)))
        });
        group.bench_function("canonicalize", |b| {
            b.iter(|| {
                canonicalize(
                    black_box(&req.query),
                    black_box(req.operation_name.as_deref()),
                    config.limits(),
                )
            })
        });
        group.bench_function("build_key", |b| {
            b.iter(|| build_key(black_box(&ctx), black_box(&req), black_box(&op)))
        });
        group.bench_function("classify_body", |b| {
            b.iter(|| classify_body(black_box(&config), black_box(&head), black_box(body)))
        });
        group.finish();
    }
}

// --- stored entries -----------------------------------------------------------------------------

/// A GraphQL JSON response `{"data":{"users":[...]}}` of at least `target` bytes.
fn response_body(target: usize) -> Vec<u8> {
    let mut s = String::from(r#"{"data":{"users":["#);
    let mut i = 0;
    // Leave room for the closing `]}}`.
    while s.len() + 3 < target {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(
            s,
            r#"{{"id":"u{i}","name":"User {i}","email":"user{i}@example.com","active":{},"score":{}.5}}"#,
            i % 3 != 0,
            i * 7 % 100
        );
        i += 1;
    }
    s.push_str("]}}");
    s.into_bytes()
}

fn bench_entry(c: &mut Criterion) {
    let config = Config::default();
    let key = CacheKey { digest: [0xab; 32] };
    let stored_headers = [
        ("content-type", "application/json; charset=utf-8"),
        ("cache-control", "public, max-age=30"),
        ("etag", "\"5d8c72a5edda8d6a\""),
        // End-to-end, so kept (cache/headers.rs keeps every end-to-end header but a few).
        ("x-request-id", "9f2d1c7e-5b4a"),
    ];
    // What the origin sent: the stored headers plus one that is not kept.
    let response_headers: Vec<(String, Vec<u8>)> = stored_headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
        .chain([(
            "date".to_string(),
            b"Tue, 01 Apr 2025 12:00:00 GMT".to_vec(),
        )])
        .collect();

    let bodies = [
        ("small", response_body(500)),
        ("large", response_body(64 * 1024)),
    ];
    eprintln!(
        "response body sizes: {}",
        bodies
            .iter()
            .map(|(n, b)| format!("{n}={} B", b.len()))
            .collect::<Vec<_>>()
            .join(", ")
    );

    for (size, body) in &bodies {
        let entry = Entry {
            digest: key.digest,
            stored_at_ms: 1_700_000_000_000,
            expires_at_ms: 1_700_000_030_000,
            stale_ms: 0,
            error_ms: 0,
            upstream_age_s: 0,
            born_us: 1_700_000_000_000,
            status: 200,
            headers: stored_headers.to_vec(),
            tag_hashes: vec![],
            tags: "",
            body,
        };
        let encoded = entry.encode();
        assert_eq!(Entry::decode(&encoded).expect("entry decodes"), entry);
        body_storable(body).expect("body is storable");
        let operation = OperationTags::default();
        let stamp = Stamp {
            born_us: 1_700_000_000_000,
            now_ms: 1_700_000_000_000,
            operation: &operation,
        };
        let answer = Answer {
            status: 200,
            headers: &response_headers,
            body,
        };
        let stored = storable_entry(&key, &answer, &config, &config.lifetimes(), &stamp)
            .expect("response is storable");
        assert_eq!(stored, encoded, "{size}: benchmark entry differs");

        let mut group = c.benchmark_group(format!("entry/{size}"));
        configure(&mut group);
        // Decode borrows the body and peek reads a fixed header, so neither is reported per byte;
        // criterion cannot clear a group's throughput, so they run before it is set.
        group.bench_function("peek", |b| b.iter(|| Entry::peek(black_box(&encoded))));
        group.bench_function("decode", |b| b.iter(|| Entry::decode(black_box(&encoded))));
        group.throughput(Throughput::Bytes(encoded.len() as u64));
        group.bench_function("encode", |b| b.iter(|| black_box(&entry).encode()));
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function("body_storable", |b| {
            b.iter(|| body_storable(black_box(body)))
        });
        group.bench_function("storable_entry", |b| {
            b.iter(|| {
                storable_entry(
                    black_box(&key),
                    black_box(&answer),
                    &config,
                    &config.lifetimes(),
                    &stamp,
                )
            })
        });
        group.finish();
    }
}

/// What knowing the ceiling costs: a record kept per lookup (`whatif::ring`), a ghost's verdict
/// on a miss (`cache::ghosts`), and one what-if call over a full ring of two workers.
fn bench_insight(c: &mut Criterion) {
    let mut group = c.benchmark_group("insight");
    configure(&mut group);
    let record = |i: u64| Record {
        at_ms: 1_000_000 + i * 7,
        hash: i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % 4096,
        op: 3 + (i % 4) as u16,
        kind: if i.is_multiple_of(3) {
            Kind::Miss
        } else {
            Kind::Hit
        },
        why: 0,
        size: 1200,
        lifetime_s: 10,
        entity: false,
        variant: Default::default(),
        answer: 0,
    };
    let mut ring = Ring::new(8192);
    let mut i = 0u64;
    group.bench_function("ring_push", |b| {
        b.iter(|| {
            i += 1;
            ring.push(black_box(record(i)));
        })
    });
    group.bench_function("ghost_verdict", |b| {
        b.iter(|| would_hit(black_box(5_000), 0, black_box(5_900), 10, black_box(1_000)))
    });
    let now = Settings::of(&Config::parse(br#"{"ttl_seconds": 10}"#).unwrap());
    let candidate = whatif_candidate(&now, br#"{"ttl_seconds": 60}"#).unwrap();
    let names: Vec<Option<String>> = (0..8).map(|n| Some(format!("Op{n}"))).collect();
    let records: Vec<Record> = (0..16_384).map(record).collect();
    group.throughput(Throughput::Elements(records.len() as u64));
    group.bench_function("what_if_16384_records", |b| {
        b.iter(|| report(&mut records.clone(), &now, &candidate, &names))
    });
    group.finish();
}

criterion_group!(benches, bench_key_path, bench_entry, bench_insight);
criterion_main!(benches);
