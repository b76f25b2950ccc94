//! What came back for a callout, read once by the root (`root::callouts`) whoever sent it: the
//! origin fetch (`root::shared_fetch`) and the L2 calls (`l2`) read it the same way.

use crate::effects::host::{status, Host};

/// A callout's answer: its headers, and the size of its body (read, if at all, by whoever the
/// callout was for, which knows how much it will take).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Returned {
    /// `None`: the callout was reset; nothing may be read then (it would trap the VM).
    pub headers: Option<Vec<(String, Vec<u8>)>>,
    pub body_size: usize,
}

impl Returned {
    /// Reads the headers of the callout being delivered, unless it has none (a reset).
    pub fn read(host: &impl Host, num_headers: usize, body_size: usize) -> Returned {
        Returned {
            headers: (num_headers > 0).then(|| host.callout_headers()),
            body_size,
        }
    }

    /// Its `:status`, if it has a readable one.
    pub fn status(&self) -> Option<u16> {
        self.headers.as_deref().and_then(status)
    }
}
