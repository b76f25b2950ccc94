//! The request the shared fetch sends upstream on behalf of every waiter of a key.

use crate::cache::headers::is_end_to_end;
use crate::cache::storable::Asked;
use crate::effects::host::Callout;
use crate::request::classify::RequestHead;
use crate::request::key::CacheKey;

pub const IDENTITY: &str = "identity";

/// Request headers that shape the answer for one client only (conditional and range requests).
fn one_client(name: &str) -> bool {
    matches!(
        name,
        "if-none-match"
            | "if-modified-since"
            | "if-match"
            | "if-unmodified-since"
            | "if-range"
            | "range"
    )
}

/// The callout for a request: the original method, path, authority, end-to-end headers and
/// body. `None` when a header is not text (the callout API takes text only): such a request is
/// not coalesced and goes upstream itself.
pub fn upstream_request(
    cluster: String,
    head: &RequestHead,
    body: Option<Vec<u8>>,
) -> Option<Callout> {
    let text = |v: &[u8]| std::str::from_utf8(v).ok().map(str::to_string);
    let mut headers = vec![
        (":method".to_string(), text(&head.method)?),
        (":path".to_string(), text(&head.path)?),
        (":authority".to_string(), text(&head.authority)?),
    ];
    for (name, value) in &head.headers {
        // `expect: 100-continue` is about the client's upload, which is already complete;
        // `accept-encoding` is the filter's choice (see below); validators and ranges belong to
        // one client's request, and the shared answer must be the whole one.
        if !is_end_to_end(name) || name == "expect" || name == "accept-encoding" || one_client(name)
        {
            continue;
        }
        headers.push((name.clone(), text(value)?));
    }
    // An answer shared by many clients is fetched uncompressed: Envoy's compressor encodes it for
    // each client as it accepts.
    headers.push(("accept-encoding".to_string(), IDENTITY.to_string()));
    Some(Callout {
        cluster,
        headers,
        body: body.filter(|b| !b.is_empty()),
    })
}

/// A fetch a leader's worker makes for a key: queued by the request that claimed the flight,
/// dispatched by the root context, finished when its answer (or failure) comes back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedFetch {
    pub key: CacheKey,
    pub request: Callout,
    /// What the leader asked, for storing the answer.
    pub asked: Asked,
    /// When the root sent it (0 until then).
    pub dispatched_ms: u64,
    /// See `sharing::key_names_caller`.
    pub key_names_caller: bool,
    /// What this fetch does with the fleet's L2.
    pub l2: L2Role,
}

/// A shared fetch's part in the fleet's L2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L2Role {
    /// No L2 for this fetch (none configured, or it failed: L1 only).
    Off,
    /// Ask L2 before the origin.
    Ask,
    /// This worker holds the key's L2 lease: store the answer there, or release the lease.
    Lead,
    /// Store a storable answer in L2; no lease to release.
    Store,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head() -> RequestHead {
        RequestHead {
            method: b"POST".to_vec(),
            path: b"/graphql?x=1".to_vec(),
            authority: b"api.example".to_vec(),
            headers: vec![
                (":method".into(), b"POST".to_vec()),
                ("content-type".into(), b"application/json".to_vec()),
                ("content-length".into(), b"12".to_vec()),
                ("connection".into(), b"keep-alive".to_vec()),
                ("authorization".into(), b"Bearer a".to_vec()),
                ("accept-encoding".into(), b"gzip, br".to_vec()),
                ("if-none-match".into(), b"\"v1\"".to_vec()),
                ("range".into(), b"bytes=0-10".to_vec()),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn carries_the_request_minus_connection_headers() {
        let f = upstream_request("origin".into(), &head(), Some(b"{}".to_vec())).unwrap();
        let names: Vec<&str> = f.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            vec![
                ":method",
                ":path",
                ":authority",
                "content-type",
                "authorization",
                "accept-encoding"
            ]
        );
        assert_eq!(
            f.headers[5].1, "identity",
            "shared answers are fetched uncompressed"
        );
        assert_eq!(f.headers[1].1, "/graphql?x=1");
        assert_eq!(f.body.as_deref(), Some(&b"{}"[..]));
    }

    #[test]
    fn binary_headers_are_not_fetched_on_anyone_s_behalf() {
        let mut h = head();
        h.headers.push(("x-bin".into(), b"\xff".to_vec()));
        assert_eq!(upstream_request("origin".into(), &h, None), None);
    }
}
