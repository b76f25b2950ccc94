//! Which client request headers may ever be sent again on a client's behalf (the shared fetch):
//! the rule both the configuration (`forward_headers`) and the fetch itself apply.

/// Headers that belong to one connection, not to the message (RFC 9110 7.6.1), plus
/// `content-length`, which Envoy sets for the body it sends: in requests as in answers.
pub const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
];

/// Validators and ranges shape one client's answer; the shared answer must be the whole one.
const ONE_CLIENT: &[&str] = &[
    "if-none-match",
    "if-modified-since",
    "if-match",
    "if-unmodified-since",
    "if-range",
    "range",
];

/// Whether a client header may be carried by a fetch made for others, whatever the
/// configuration lists. Never pseudo-headers, connection headers, one client's validators or
/// ranges, nor `accept-encoding`: the filter asks for `identity` itself.
pub fn carriable(name: &str) -> bool {
    !name.starts_with(':')
        && name != "accept-encoding"
        && !HOP_BY_HOP.contains(&name)
        // `expect: 100-continue` is about the client's upload, which is complete.
        && name != "expect"
        && !ONE_CLIENT.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_fetch_for_others_never_carries() {
        for never in [
            ":path",
            "connection",
            "content-length",
            "expect",
            "accept-encoding",
            "if-none-match",
            "range",
        ] {
            assert!(!carriable(never), "{never}");
        }
        for may in ["authorization", "user-agent", "content-type", "x-anything"] {
            assert!(carriable(may), "{may}");
        }
    }
}
