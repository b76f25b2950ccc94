//! Bad input never breaks traffic: every odd request reaches the origin exactly as it was sent,
//! is answered with `x-cache: BYPASS`, is counted, and leaves Envoy and the cache working.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use support::*;

fn last_body(origin: &Origin) -> Vec<u8> {
    http(origin.port, Req::get("/_origin/last-body")).body
}

#[test]
fn bad_inputs_pass_through_untouched_and_are_counted() {
    let (origin, mut envoy) = stack(r#"{"debug_headers": true}"#);
    let deep = format!(
        r#"{{"query":"{}{}"}}"#,
        "{ users ".repeat(40),
        "}".repeat(40)
    );
    let wide = format!(
        r#"{{"query":"{{ {} }}"}}"#,
        (0..2500)
            .map(|i| format!("f{i}: requestCount"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let oversized = format!(
        r#"{{"query":"{{ users {{ id }} }}","pad":"{}"}}"#,
        "x".repeat(100_000)
    );
    let json = "application/json";
    let cases: Vec<(&str, Req, &str, bool)> = vec![
        (
            "malformed JSON",
            Req::post_raw(json, br#"{"query": "{ users { id } }""#),
            "malformed-json",
            true,
        ),
        (
            "missing query",
            Req::post_raw(json, br#"{"variables": {}}"#),
            "missing-query",
            true,
        ),
        (
            "non-string query",
            Req::post_raw(json, br#"{"query": 42}"#),
            "missing-query",
            true,
        ),
        (
            "invalid GraphQL",
            Req::post_raw(json, br#"{"query": "{ users { id "}"#),
            "invalid-graphql",
            true,
        ),
        (
            "deep query",
            Req::post_raw(json, deep.as_bytes()),
            "too-deep",
            true,
        ),
        (
            "wide query",
            Req::post_raw(json, wide.as_bytes()),
            "too-wide",
            true,
        ),
        (
            "non-UTF-8 bytes",
            Req::post_raw(json, b"{\"query\": \"{ users { id\xff\xfe } }\"}"),
            "malformed-json",
            true,
        ),
        (
            "batched array",
            Req::post_raw(
                json,
                br#"[{"query":"{ users { id } }"},{"query":"{ requestCount }"}]"#,
            ),
            "batched",
            true,
        ),
        ("empty body", Req::post_raw(json, b""), "empty-body", true),
        (
            "body over the limit",
            Req::post_raw(json, oversized.as_bytes()),
            "body-too-large",
            true,
        ),
        (
            "JSON that is not an object",
            Req::post_raw(json, b"\"{ users { id } }\""),
            "not-an-object",
            true,
        ),
        (
            "bad variables",
            Req::post_raw(json, br#"{"query":"{ requestCount }","variables":[1]}"#),
            "bad-variables",
            true,
        ),
        (
            "unknown operation",
            Req::post_raw(
                json,
                br#"{"query":"query A { requestCount }","operationName":"B"}"#,
            ),
            "unknown-operation",
            true,
        ),
        (
            "JSON in another charset",
            Req::post_raw(
                "application/json; charset=iso-8859-1",
                br#"{"query":"{ users { id } }"}"#,
            ),
            "content-type",
            false,
        ),
        (
            "JSON with an unknown media-type parameter",
            Req::post_raw("application/json; foo=bar", br#"{"query":"{ users { id } }"}"#),
            "content-type",
            false,
        ),
        (
            "duplicate top-level member",
            Req::post_raw(
                json,
                br#"{"query":"{ users { id } }","query":"{ requestCount }"}"#,
            ),
            "duplicate-member",
            true,
        ),
        (
            "duplicate variable",
            Req::post_raw(
                json,
                br#"{"query":"query($v: String) { echo(value: $v) }","variables":{"v":"a","v":"b"}}"#,
            ),
            "duplicate-member",
            true,
        ),
        (
            "duplicate member deep in variables",
            Req::post_raw(
                json,
                br#"{"query":"query($i: EchoInput) { echoInput(input: $i) }","variables":{"i":{"nested":{"a":"x","a":"y"}}}}"#,
            ),
            "duplicate-member",
            true,
        ),
        (
            "duplicate member in extensions",
            Req::post_raw(
                json,
                br#"{"query":"{ requestCount }","extensions":{"e":1,"e":2}}"#,
            ),
            "duplicate-member",
            true,
        ),
        (
            "unknown content type",
            Req::post_raw("text/plain", b"{ users { id } }"),
            "content-type",
            false,
        ),
        (
            "application/graphql",
            Req::post_raw("application/graphql", b"{ users { id } }"),
            "content-type",
            false,
        ),
        (
            "PUT",
            Req {
                method: "PUT".into(),
                ..Req::post_json(r#"{"query":"{ requestCount }"}"#)
            },
            "method",
            false,
        ),
        (
            "GET with a body",
            Req {
                method: "GET".into(),
                path: "/graphql?query=%7B%20requestCount%20%7D".into(),
                headers: vec![("content-type".into(), "application/json".into())],
                body: br#"{"variables":{"a":1}}"#.to_vec(),
            },
            "get-with-body",
            false,
        ),
        (
            // graphql-parser would slice this block string mid-character and panic.
            "multi-line block string with wide whitespace",
            Req::post_raw(
                json,
                br#"{"query":"{ echo(value: \"\"\"x\n  a\n\u3000\n  b\"\"\") }"}"#,
            ),
            "unsupported-string",
            false,
        ),
        (
            "bad query string",
            Req::get("/graphql?query=%zz%7B"),
            "bad-query-string",
            true,
        ),
        (
            "non-UTF-8 query string",
            Req::get("/graphql?query=%ff%fe"),
            "bad-query-string",
            true,
        ),
    ];
    let mut rejected = 0;
    for (name, req, reason, is_rejected) in cases {
        let before = origin.count();
        let sent = req.body.clone();
        let r = envoy.send(req);
        assert_eq!(r.cache(), "BYPASS", "{name}: {}", r.text());
        assert_eq!(r.header("x-cache-reason"), Some(reason), "{name}");
        assert_ne!(
            r.status, 503,
            "{name}: the filter must not fail the request"
        );
        assert_eq!(
            origin.count(),
            before + 1,
            "{name}: reached the origin once"
        );
        if !sent.is_empty() {
            assert_eq!(
                last_body(&origin),
                sent,
                "{name}: the origin got the bytes as sent"
            );
        }
        rejected += u64::from(is_rejected);
        assert!(envoy.is_alive(), "{name}: Envoy died");
    }
    assert_eq!(envoy.counter("rejected_inputs"), rejected);
    assert_eq!(envoy.counter("bypasses"), 26);
    assert_eq!(envoy.counter("hits") + envoy.counter("misses"), 0);

    // The filter still works afterwards, on every worker.
    for _ in 0..3 {
        envoy.send(Req::query("{ users { id } }"));
    }
    assert_eq!(envoy.send(Req::query("{ users { id } }")).cache(), "HIT");
    assert!(!envoy.log().contains("panicked"), "{}", envoy.log());
}

#[test]
fn json_with_other_media_type_parameters_is_not_answered_from_the_plain_entry() {
    let (origin, envoy) = stack(r#"{"debug_headers": true}"#);
    let body = br#"{"query":"{ users { id } requestCount }"}"#;
    let plain = envoy.send(Req::post_raw("application/json", body));
    assert_eq!(plain.cache(), "MISS", "{}", plain.text());
    assert_eq!(
        envoy
            .send(Req::post_raw("application/json; charset=UTF-8", body))
            .cache(),
        "HIT",
        "charset=utf-8 is what JSON is anyway"
    );
    for content_type in [
        "application/json; charset=iso-8859-1",
        "application/json; foo=bar",
    ] {
        let before = origin.count();
        let r = envoy.send(Req::post_raw(content_type, body));
        assert_eq!(r.cache(), "BYPASS", "{content_type}");
        assert_eq!(r.header("x-cache-reason"), Some("content-type"));
        assert_eq!(
            origin.count(),
            before + 1,
            "{content_type}: the origin answers it"
        );
        assert_ne!(
            r.body, plain.body,
            "{content_type}: not the plain request's entry"
        );
    }
}

#[test]
fn the_deepest_allowed_query_is_handled_in_wasm() {
    // 48 levels: just inside graphql-parser's own limit of 50.
    let (origin, envoy) = stack(r#"{"max_query_depth": 50}"#);
    let q = format!(
        "{{ echoInput(input: {}{{a: \"x\"}}{}) requestCount }}",
        "{nested: ".repeat(45),
        "}".repeat(45)
    );
    let body = serde_json::json!({ "query": q }).to_string();
    let r = envoy.send(Req::post_json(&body));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.cache(), "MISS");
    assert!(r.json()["data"]["echoInput"].is_string(), "{}", r.text());
    let again = envoy.send(Req::post_json(&body));
    assert_eq!(again.cache(), "HIT");
    assert_eq!(again.body, r.body);
    assert_eq!(origin.count(), 1);
    assert!(!envoy.log().contains("panicked"));
}

#[test]
fn a_request_body_over_envoys_buffer_limit_is_answered_by_envoy() {
    // Larger than Envoy's 1 MiB buffer and than max_body_bytes: content-length decides at the
    // headers, so the body streams through untouched.
    let (origin, envoy) = stack("{}");
    let body = format!(
        r#"{{"query":"{{ requestCount }}","pad":"{}"}}"#,
        "y".repeat(2_000_000)
    );
    let r = envoy.send(Req::post_json(&body));
    assert_eq!(r.cache(), "BYPASS");
    assert_eq!(r.status, 200);
    assert_eq!(last_body(&origin).len(), body.len());
}
