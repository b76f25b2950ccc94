//! The messages on a worker's wake-up queue: a wire format between VMs of one Envoy (and, during
//! a reload, between builds of the filter), so everything read is checked.

use crate::request::key::CacheKey;

const DISPATCH: u8 = b'D';
const WAKE: u8 = b'W';
const DIGEST: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message<'a> {
    /// An HTTP context of this worker claimed a flight: the root must dispatch its fetch (a
    /// callout made by a request would die with that request).
    Dispatch,
    /// The flight for `key` ended. `answer` is the shareable answer as a flight-encoded entry
    /// (see `relay::Response::encode_for_flight`), or `None`: look at the flight record.
    Wake {
        key: CacheKey,
        answer: Option<&'a [u8]>,
    },
}

impl Message<'_> {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Message::Dispatch => vec![DISPATCH],
            Message::Wake { key, answer } => {
                let answer = answer.unwrap_or_default();
                let mut out = Vec::with_capacity(1 + DIGEST + answer.len());
                out.push(WAKE);
                out.extend_from_slice(&key.digest);
                out.extend_from_slice(answer);
                out
            }
        }
    }

    /// `None` for anything this build did not write (unknown tag, truncated digest).
    pub fn decode(bytes: &[u8]) -> Option<Message<'_>> {
        match bytes.split_first()? {
            (&DISPATCH, []) => Some(Message::Dispatch),
            (&WAKE, rest) => {
                let digest = rest.get(..DIGEST)?;
                let mut key = CacheKey { digest: [0; 32] };
                key.digest.copy_from_slice(digest);
                let answer = rest.get(DIGEST..).filter(|a| !a.is_empty());
                Some(Message::Wake { key, answer })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> CacheKey {
        CacheKey { digest: [9; 32] }
    }

    #[test]
    fn round_trip() {
        for m in [
            Message::Dispatch,
            Message::Wake {
                key: key(),
                answer: None,
            },
            Message::Wake {
                key: key(),
                answer: Some(b"entry bytes"),
            },
        ] {
            assert_eq!(Message::decode(&m.encode()), Some(m.clone()));
        }
    }

    #[test]
    fn every_truncated_prefix_is_refused_or_answerless() {
        let bytes = Message::Wake {
            key: key(),
            answer: Some(b"entry"),
        }
        .encode();
        for len in 0..=DIGEST {
            assert_eq!(Message::decode(&bytes[..len]), None, "len {len}");
        }
        assert_eq!(
            Message::decode(&bytes[..1 + DIGEST]),
            Some(Message::Wake {
                key: key(),
                answer: None
            })
        );
    }

    #[test]
    fn unknown_tags_and_trailing_bytes_are_refused() {
        assert_eq!(Message::decode(b""), None);
        assert_eq!(Message::decode(b"X"), None);
        assert_eq!(Message::decode(b"DD"), None);
    }
}
