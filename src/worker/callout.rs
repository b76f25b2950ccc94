//! What came back for a callout, read once by the root (`root::callouts`) whoever sent it: the
//! origin fetch (`flights::shared_fetch`) and the L2 calls (`fleet`) read it the same way.

use crate::effects::host::{status, RequestHost, RootHost};

/// A callout's answer: its headers, and the size of its body (read, if at all, by whoever the
/// callout was for, which knows how much it will take).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Returned {
    /// `None`: the callout was reset; nothing may be read then (it would trap the VM).
    pub headers: Option<Vec<(String, Vec<u8>)>>,
    pub body_size: usize,
}

impl Returned {
    /// Reads the headers of the root's callout being delivered, unless it has none (a reset).
    pub fn read(host: &impl RootHost, num_headers: usize, body_size: usize) -> Returned {
        Returned::read_with(num_headers, body_size, || host.callout_headers())
    }

    /// The same for a request's own callout.
    pub fn read_own(host: &impl RequestHost, num_headers: usize, body_size: usize) -> Returned {
        Returned::read_with(num_headers, body_size, || host.own_callout_headers())
    }

    fn read_with(
        num_headers: usize,
        body_size: usize,
        headers: impl FnOnce() -> Vec<(String, Vec<u8>)>,
    ) -> Returned {
        Returned {
            headers: (num_headers > 0).then(headers),
            body_size,
        }
    }

    /// Its `:status`, if it has a readable one.
    pub fn status(&self) -> Option<u16> {
        self.headers.as_deref().and_then(status)
    }
}
