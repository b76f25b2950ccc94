//! Which response headers belong to the message and which to one exchange: relayed to followers,
//! replayed on hits, or neither.

/// Never relayed nor replayed.
pub use crate::config::HOP_BY_HOP;

/// Whether a header belongs to the message rather than to the connection or to HTTP/2 framing.
pub fn is_end_to_end(name: &str) -> bool {
    !name.starts_with(':') && !HOP_BY_HOP.contains(&name)
}

/// Whether a response header is replayed on a hit: every end-to-end header of the origin's answer
/// (CORS headers included, which browsers need), except what belongs to one exchange: `date`,
/// `age` (recomputed), `set-cookie` (never stored anyway), Envoy's own `x-envoy-*`, and the
/// filter's `x-cache*`.
pub fn replayed(name: &str) -> bool {
    is_end_to_end(name)
        && !matches!(name, "date" | "age" | "set-cookie")
        && !name.starts_with("x-envoy-")
        && !name.starts_with("x-cache")
}
