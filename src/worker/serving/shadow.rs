//! Shadow mode: the filter keys, looks up, stores and counts, but every request goes to the
//! origin and every answer reaches its client unchanged. A fresh entry's body is compared with the
//! origin's answer, so a team can measure hit rate and correctness on real traffic before it
//! lets the cache answer.

use crate::effects::counters::Counter;
use crate::effects::host::RequestHost;
use crate::worker::serving::capture::{Capture, Chunk};
use crate::worker::state::Plugin;
use sha2::{Digest, Sha256};

/// One shadowed request's answer on its way to the client.
#[derive(Debug)]
pub struct Shadowed {
    /// The digest of the fresh entry's body, for a would-be hit.
    expected: Option<[u8; 32]>,
    seen: Sha256,
    seen_len: usize,
    /// The answer, copied to be stored as a normal miss would be.
    pub capture: Option<Capture>,
}

impl Shadowed {
    pub fn new(expected_body: Option<&[u8]>) -> Shadowed {
        Shadowed {
            expected: expected_body.map(|b| Sha256::digest(b).into()),
            seen: Sha256::new(),
            seen_len: 0,
            capture: None,
        }
    }

    pub fn would_hit(&self) -> bool {
        self.expected.is_some()
    }

    /// A chunk of the origin's answer.
    pub fn chunk(&mut self, plugin: &Plugin, host: &impl RequestHost, size: usize) {
        if size == 0 || (self.expected.is_none() && self.capture.is_none()) {
            return;
        }
        let Some(bytes) = host.response_body(size) else {
            return;
        };
        if self.expected.is_some() {
            self.seen.update(&bytes);
            self.seen_len = self.seen_len.saturating_add(bytes.len());
        }
        if let Some(c) = &mut self.capture {
            if c.push(plugin, host, &bytes) == Chunk::TooLarge {
                self.capture = None;
            }
        }
    }

    /// The answer is complete: a would-be hit whose body differs is counted.
    pub fn finish(self, host: &impl RequestHost) -> Option<Capture> {
        if let Some(expected) = self.expected {
            let seen: [u8; 32] = self.seen.finalize().into();
            if seen != expected {
                host.count(Counter::ShadowMismatches);
            }
        }
        self.capture
    }
}
