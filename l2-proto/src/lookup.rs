//! The answer of `POST /v1/lookup`: `200` with header `x-l2` saying which of three it is; a hit's
//! body is the stored value (`content-type: application/octet-stream`, header `x-l2-ttl-ms`).

use crate::error::DecodeError;

/// The values of the `x-l2` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupTag {
    /// The value exists: it is the body.
    Hit,
    /// No value, and the asking owner now holds the key's lease: fetch, then store or release.
    Lead,
    /// No value, and another owner holds the lease (after waiting, if the lookup waited).
    Busy,
}

impl LookupTag {
    pub const fn as_str(self) -> &'static str {
        match self {
            LookupTag::Hit => "hit",
            LookupTag::Lead => "lead",
            LookupTag::Busy => "busy",
        }
    }

    /// Exactly one of the three values, byte for byte.
    pub fn parse(value: &[u8]) -> Result<LookupTag, DecodeError> {
        match value {
            b"hit" => Ok(LookupTag::Hit),
            b"lead" => Ok(LookupTag::Lead),
            b"busy" => Ok(LookupTag::Busy),
            _ => Err(DecodeError::Malformed("x-l2")),
        }
    }
}

/// A `200` lookup answer as the caller uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Looked {
    /// The stored value (as the storing node wrote it).
    Hit(Vec<u8>),
    /// This owner holds the key's lease.
    Lead,
    /// Another owner holds the lease.
    Busy,
}

impl Looked {
    /// Reads a `200` answer from its `x-l2` value (`None`: absent) and its body, which is asked
    /// for only on a hit (a caller may have to copy it in). A hit is never empty: nothing stores
    /// an empty value.
    pub fn read(
        tag: Option<&[u8]>,
        body: impl FnOnce() -> Option<Vec<u8>>,
    ) -> Result<Looked, DecodeError> {
        let tag = tag.ok_or(DecodeError::Malformed("x-l2"))?;
        match LookupTag::parse(tag)? {
            LookupTag::Hit => body()
                .filter(|b| !b.is_empty())
                .map(Looked::Hit)
                .ok_or(DecodeError::Malformed("hit body")),
            LookupTag::Lead => Ok(Looked::Lead),
            LookupTag::Busy => Ok(Looked::Busy),
        }
    }

    /// What the service puts in `x-l2` for this answer.
    pub fn tag(&self) -> LookupTag {
        match self {
            Looked::Hit(_) => LookupTag::Hit,
            Looked::Lead => LookupTag::Lead,
            Looked::Busy => LookupTag::Busy,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip_and_nothing_else_parses() {
        for tag in [LookupTag::Hit, LookupTag::Lead, LookupTag::Busy] {
            assert_eq!(LookupTag::parse(tag.as_str().as_bytes()), Ok(tag));
        }
        for bad in [&b""[..], b"HIT", b"hit ", b"maybe", b"lea", b"busy\0"] {
            assert_eq!(
                LookupTag::parse(bad),
                Err(DecodeError::Malformed("x-l2")),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn answers_round_trip() {
        for looked in [Looked::Hit(b"entry".to_vec()), Looked::Lead, Looked::Busy] {
            let body = match &looked {
                Looked::Hit(v) => v.clone(),
                _ => Vec::new(),
            };
            let tag = looked.tag().as_str().as_bytes();
            assert_eq!(Looked::read(Some(tag), || Some(body)), Ok(looked));
        }
    }

    #[test]
    fn answers_are_read_strictly() {
        let body = || Some(b"entry".to_vec());
        assert_eq!(
            Looked::read(None, body),
            Err(DecodeError::Malformed("x-l2"))
        );
        assert_eq!(
            Looked::read(Some(b"maybe"), body),
            Err(DecodeError::Malformed("x-l2"))
        );
        assert_eq!(
            Looked::read(Some(b"hit"), || None),
            Err(DecodeError::Malformed("hit body"))
        );
        assert_eq!(
            Looked::read(Some(b"hit"), || Some(Vec::new())),
            Err(DecodeError::Malformed("hit body"))
        );
        let mut asked = false;
        assert_eq!(
            Looked::read(Some(b"lead"), || {
                asked = true;
                None
            }),
            Ok(Looked::Lead)
        );
        assert!(!asked, "a lead's body is not read");
    }
}
