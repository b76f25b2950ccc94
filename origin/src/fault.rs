//! `x-origin-fault`: answers broken on the wire, for testing what sits in front of the origin.
//!
//! The GraphQL answer is computed as usual (status, headers, body; gzip applied when on), then
//! sent broken, over HTTP/1.1:
//!
//! - `reset-mid-body`: status and headers (chunked, no `content-length`), the first half of the
//!   body, then the connection is closed without the final chunk.
//! - `truncated`: `content-length` of the whole body, only its first half, then the connection is
//!   closed.
//! - `overlong`: `content-length` of the whole body, the whole body followed by
//!   [`OVERLONG_TAIL`], then the connection is closed. Written by the connection itself
//!   ([`crate::conn`]), as hyper never sends more than `content-length` declares.
//! - `stall-after-headers`: status and headers with `content-length` of the whole body, then
//!   nothing for the stall (`x-origin-delay-ms`, 5 s without it), then the connection is closed.
//!
//! "Closed" is a TCP FIN after everything before it was flushed.

use std::time::Duration;

use async_graphql::futures_util::stream;
use axum::body::{Body, Bytes};
use axum::http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;

use crate::conn::ConnTap;

pub const HDR_FAULT: &str = "x-origin-fault";

/// How long `stall-after-headers` stalls without `x-origin-delay-ms`.
pub const DEFAULT_STALL: Duration = Duration::from_secs(5);

/// Pause between the last bytes sent and the close, so hyper flushes them first (it drops what
/// it has buffered when a body fails).
const FLUSH_PAUSE: Duration = Duration::from_millis(50);

/// Bytes an `overlong` answer sends past its `content-length` (not JSON, so anyone who keeps
/// them gets a body that no longer parses).
pub const OVERLONG_TAIL: &[u8] = b"<x-origin-fault: overlong: bytes past content-length>";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    ResetMidBody,
    Truncated,
    Overlong,
    StallAfterHeaders,
}

impl Fault {
    pub fn parse(raw: &[u8]) -> Result<Fault, String> {
        match raw.trim_ascii() {
            b"reset-mid-body" => Ok(Fault::ResetMidBody),
            b"truncated" => Ok(Fault::Truncated),
            b"overlong" => Ok(Fault::Overlong),
            b"stall-after-headers" => Ok(Fault::StallAfterHeaders),
            _ => Err(format!(
                "invalid {HDR_FAULT} header (expected reset-mid-body, truncated, overlong or \
                 stall-after-headers)"
            )),
        }
    }
}

/// A fault to apply to one answer, carried in the response's extensions from the handler to
/// [`apply`] (which runs outside the compression layer, on the bytes that go on the wire).
#[derive(Debug, Clone)]
pub struct Plan {
    pub fault: Fault,
    pub stall: Duration,
    /// The connection's tap; `None` when the request did not come through the origin's own
    /// listener (or not over HTTP/1.x), where `overlong` cannot be sent.
    pub tap: Option<ConnTap>,
}

/// Middleware (`map_response`): sends the answer broken as its [`Plan`] says.
pub async fn apply(mut resp: Response) -> Response {
    let Some(plan) = resp.extensions_mut().remove::<Plan>() else {
        return resp;
    };
    let (mut parts, body) = resp.into_parts();
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(_) => {
            return plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "failed to build the answer",
            )
        }
    };
    let half = body.slice(..body.len() / 2);
    parts.headers.remove(TRANSFER_ENCODING);
    match plan.fault {
        Fault::ResetMidBody => {
            parts.headers.remove(CONTENT_LENGTH);
            Response::from_parts(parts, part_then(half, FLUSH_PAUSE, End::Error))
        }
        Fault::Truncated => {
            // Never 0: an empty answer still declares more than it sends.
            parts
                .headers
                .insert(CONTENT_LENGTH, HeaderValue::from(body.len().max(1)));
            Response::from_parts(parts, part_then(half, FLUSH_PAUSE, End::Close))
        }
        Fault::StallAfterHeaders => {
            parts
                .headers
                .insert(CONTENT_LENGTH, HeaderValue::from(body.len().max(1)));
            Response::from_parts(parts, part_then(Bytes::new(), plan.stall, End::Close))
        }
        Fault::Overlong => {
            let Some(tap) = plan.tap else {
                return plain(
                    StatusCode::BAD_REQUEST,
                    "x-origin-fault: overlong needs an HTTP/1.1 connection to the origin's listener",
                );
            };
            tap.replace_next_response(overlong_bytes(&parts, &body));
            // Written into the void by hyper; `connection: close` makes hyper end the connection.
            let mut placeholder = Response::new(Body::empty());
            placeholder
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
            placeholder
        }
    }
}

/// The raw HTTP/1.1 answer of `overlong`: the status line, the answer's headers (less framing
/// and `connection`), `content-length` of `body`, then `body` and [`OVERLONG_TAIL`].
pub fn overlong_bytes(parts: &axum::http::response::Parts, body: &[u8]) -> Bytes {
    let status = parts.status;
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    )
    .into_bytes();
    for (name, value) in &parts.headers {
        if name == CONTENT_LENGTH || name == TRANSFER_ENCODING || name == CONNECTION {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(OVERLONG_TAIL);
    Bytes::from(out)
}

#[derive(Clone, Copy)]
enum End {
    /// The body fails: hyper closes the connection (a chunked body gets no final chunk).
    Error,
    /// The body ends: short of its `content-length`, hyper closes the connection.
    Close,
}

/// A body that yields `first` at once, waits `pause`, then ends as `end` says.
fn part_then(first: Bytes, pause: Duration, end: End) -> Body {
    let steps = stream::unfold(Some(first), move |first| async move {
        match first {
            Some(bytes) if !bytes.is_empty() => Some((Ok(bytes), None)),
            _ => {
                tokio::time::sleep(pause).await;
                match end {
                    End::Error => Some((Err(std::io::Error::other(HDR_FAULT)), None)),
                    End::Close => None,
                }
            }
        }
    });
    // After an error the stream is not polled again.
    Body::from_stream(steps)
}

fn plain(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "errors": [{ "message": message }] }).to_string();
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_four_faults_only() {
        assert_eq!(Fault::parse(b"reset-mid-body"), Ok(Fault::ResetMidBody));
        assert_eq!(Fault::parse(b" truncated "), Ok(Fault::Truncated));
        assert_eq!(Fault::parse(b"overlong"), Ok(Fault::Overlong));
        assert_eq!(
            Fault::parse(b"stall-after-headers"),
            Ok(Fault::StallAfterHeaders)
        );
        for bad in [&b""[..], b"reset", b"Truncated", b"overlong,truncated"] {
            assert!(Fault::parse(bad).is_err(), "{bad:?}");
        }
    }

    // ---- On the wire: the real listener and router, a raw client. ----

    use std::io::{Read, Write};
    use std::sync::Arc;
    use std::time::Instant;

    const QUERY: &str = r#"{"query":"{ users { id name } }"}"#;
    const DATA: &str = r#"{"data":{"users":[{"id":"1","name":"Alice"},{"id":"2","name":"Bob"},{"id":"3","name":"Carol"}]}}"#;

    /// Serves the whole origin on an ephemeral port.
    async fn start(gzip: bool) -> u16 {
        let state = Arc::new(crate::server::AppState::new(
            crate::schema::build_schema(),
            0,
            0,
            false,
            true,
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let app = crate::server::router(state, gzip);
        tokio::spawn(async move { crate::conn::serve(listener, app).await });
        port
    }

    struct Wire {
        head: String,
        body: Vec<u8>,
        /// When the connection closed, from the request's end.
        closed_after: Duration,
    }

    impl Wire {
        fn header(&self, name: &str) -> Option<&str> {
            self.head.split("\r\n").skip(1).find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim())
            })
        }
    }

    /// Sends a POST with `extra` header lines and reads until the origin closes.
    async fn exchange(port: u16, extra: &'static str) -> Wire {
        tokio::task::spawn_blocking(move || {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
            let req = format!(
                "POST /graphql HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n\
                 content-length: {}\r\n{extra}\r\n{QUERY}",
                QUERY.len()
            );
            s.write_all(req.as_bytes()).unwrap();
            let sent = Instant::now();
            let mut raw = Vec::new();
            s.read_to_end(&mut raw).unwrap();
            let closed_after = sent.elapsed();
            let end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
            Wire {
                head: String::from_utf8(raw[..end].to_vec()).unwrap(),
                body: raw[end + 4..].to_vec(),
                closed_after,
            }
        })
        .await
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_fault_on_the_wire() {
        let port = start(false).await;
        let half = &DATA.as_bytes()[..DATA.len() / 2];

        let w = exchange(port, "x-origin-fault: reset-mid-body\r\n").await;
        assert!(w.head.starts_with("HTTP/1.1 200 OK"), "{}", w.head);
        assert_eq!(w.header("transfer-encoding"), Some("chunked"));
        assert_eq!(w.header("content-length"), None);
        let chunk = format!("{:x}\r\n", half.len()).into_bytes();
        assert_eq!(
            w.body,
            [&chunk[..], half, b"\r\n"].concat(),
            "no final chunk"
        );

        let w = exchange(port, "x-origin-fault: truncated\r\n").await;
        assert!(w.head.starts_with("HTTP/1.1 200 OK"), "{}", w.head);
        assert_eq!(w.header("content-length"), Some(&*DATA.len().to_string()));
        assert_eq!(w.body, half);

        let w = exchange(port, "x-origin-fault: overlong\r\n").await;
        assert!(w.head.starts_with("HTTP/1.1 200 OK"), "{}", w.head);
        assert_eq!(w.header("content-type"), Some("application/json"));
        assert_eq!(w.header("content-length"), Some(&*DATA.len().to_string()));
        assert_eq!(w.body, [DATA.as_bytes(), OVERLONG_TAIL].concat());

        let w = exchange(
            port,
            "x-origin-fault: stall-after-headers\r\nx-origin-delay-ms: 600\r\n",
        )
        .await;
        assert!(w.head.starts_with("HTTP/1.1 200 OK"), "{}", w.head);
        assert_eq!(w.header("content-length"), Some(&*DATA.len().to_string()));
        assert!(w.body.is_empty());
        assert!(
            w.closed_after >= Duration::from_millis(550) && w.closed_after < Duration::from_secs(3),
            "{:?}",
            w.closed_after
        );

        // Without the header the connection answers normally (and stays open: read a second
        // answer on a fresh connection with `connection: close`).
        let w = exchange(port, "connection: close\r\n").await;
        assert_eq!(w.body, DATA.as_bytes());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn faults_apply_to_what_goes_on_the_wire_with_gzip_and_forced_status() {
        let port = start(true).await;
        // The gzip layer runs first: the declared length is the compressed body's.
        let w = exchange(
            port,
            "accept-encoding: gzip\r\nx-origin-fault: overlong\r\n",
        )
        .await;
        assert_eq!(w.header("content-encoding"), Some("gzip"));
        let declared: usize = w.header("content-length").unwrap().parse().unwrap();
        assert_eq!(&w.body[declared..], OVERLONG_TAIL);
        let mut text = String::new();
        flate2::read::GzDecoder::new(&w.body[..declared])
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, DATA);

        let w = exchange(
            port,
            "accept-encoding: gzip\r\nx-origin-fault: truncated\r\n",
        )
        .await;
        assert_eq!(w.header("content-encoding"), Some("gzip"));
        let declared: usize = w.header("content-length").unwrap().parse().unwrap();
        assert_eq!(w.body.len(), declared / 2);

        // A forced status is sent broken too; extra headers are kept.
        let w = exchange(
            port,
            "x-origin-status: 503\r\nx-origin-header: x-extra: 1\r\nx-origin-fault: overlong\r\n",
        )
        .await;
        assert!(
            w.head.starts_with("HTTP/1.1 503 Service Unavailable"),
            "{}",
            w.head
        );
        assert_eq!(w.header("x-extra"), Some("1"));
        assert!(w.body.ends_with(OVERLONG_TAIL));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_bad_fault_is_a_bad_request() {
        let port = start(false).await;
        let w = exchange(port, "connection: close\r\nx-origin-fault: explode\r\n").await;
        assert!(w.head.starts_with("HTTP/1.1 400"), "{}", w.head);
        assert!(String::from_utf8_lossy(&w.body).contains("invalid x-origin-fault header"));
    }

    #[test]
    fn overlong_bytes_declare_the_body_and_send_more() {
        let mut resp = Response::new(());
        resp.headers_mut()
            .insert("content-type", HeaderValue::from_static("application/json"));
        resp.headers_mut()
            .insert(CONTENT_LENGTH, HeaderValue::from_static("999"));
        resp.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("keep-alive"));
        let (parts, ()) = resp.into_parts();
        let raw = overlong_bytes(&parts, b"{\"data\":1}");
        let text = String::from_utf8(raw.to_vec()).unwrap();
        let expected = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 10\r\n\r\n\
             {{\"data\":1}}{}",
            String::from_utf8_lossy(OVERLONG_TAIL)
        );
        assert_eq!(text, expected);
    }
}
