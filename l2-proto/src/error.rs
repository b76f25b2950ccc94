//! Why bytes from the other side are refused.

use std::fmt;

/// What is wrong with an envelope read from the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Larger than the contract allows (`limit` bytes): not read any further.
    TooLarge { limit: usize },
    /// A format version this side does not know.
    Version(u8),
    /// Not the shape the contract describes; names the part that is wrong.
    Malformed(&'static str),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::TooLarge { limit } => write!(f, "larger than {limit} bytes"),
            DecodeError::Version(v) => write!(f, "unknown format version {v}"),
            DecodeError::Malformed(what) => write!(f, "malformed {what}"),
        }
    }
}

impl std::error::Error for DecodeError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_what_is_wrong() {
        assert_eq!(
            DecodeError::TooLarge { limit: 5 }.to_string(),
            "larger than 5 bytes"
        );
        assert_eq!(
            DecodeError::Version(9).to_string(),
            "unknown format version 9"
        );
        assert_eq!(DecodeError::Malformed("x-l2").to_string(), "malformed x-l2");
    }
}
