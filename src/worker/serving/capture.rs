//! A plain miss (the request went upstream itself) copied for the cache as it streams to its
//! client: decided at the response headers, bounded by `max_entry_bytes`, stored at the end.

use crate::cache::freshness::freshness;
use crate::cache::not_stored::NotStored;
use crate::cache::storable::admissible;
use crate::cache::storable::{Answer, Asked};
use crate::config::Lifetimes;
use crate::effects::counters::Counter;
use crate::effects::host::{status, RequestHost};
use crate::request::key::CacheKey;
use crate::worker::ctx::Ctx;
use crate::worker::serving::store::{store_answer, Stored};
use crate::worker::state::Plugin;

#[derive(Debug)]
pub struct Capture {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

/// What a body chunk did to a capture.
#[derive(Debug, PartialEq, Eq)]
pub enum Chunk {
    /// Keep copying.
    More,
    /// Over `max_entry_bytes`: the capture is dropped (counted).
    TooLarge,
}

impl Capture {
    /// Decides from the response headers whether the answer may be stored, and starts copying.
    pub fn start(
        plugin: &Plugin,
        host: &impl RequestHost,
        lifetimes: &Lifetimes,
        end_of_stream: bool,
    ) -> Result<Capture, NotStored> {
        let headers = host.response_headers();
        // No readable status: nothing to store.
        let status = status(&headers).unwrap_or(0);
        let pairs = || headers.iter().map(|(n, v)| (n.as_str(), v.as_slice()));
        admissible(u32::from(status), pairs(), &plugin.config.vary_headers)?;
        freshness(pairs(), lifetimes, host.now_ms())?;
        if end_of_stream {
            return Err(NotStored::NotJson);
        }
        Ok(Capture {
            status,
            headers,
            body: Vec::new(),
        })
    }

    /// Copies a chunk of `size` bytes, unless that would exceed `max_entry_bytes`.
    pub fn chunk(&mut self, plugin: &Plugin, host: &impl RequestHost, size: usize) -> Chunk {
        if self.body.len().saturating_add(size) > plugin.config.max_entry_bytes {
            host.count(Counter::StoreSkipped);
            return Chunk::TooLarge;
        }
        if size > 0 {
            if let Some(bytes) = host.response_body(size) {
                self.body.extend_from_slice(&bytes);
            }
        }
        Chunk::More
    }

    /// Copies a chunk already read, unless that would exceed `max_entry_bytes`.
    pub fn push(&mut self, plugin: &Plugin, host: &impl RequestHost, bytes: &[u8]) -> Chunk {
        if self.body.len().saturating_add(bytes.len()) > plugin.config.max_entry_bytes {
            host.count(Counter::StoreSkipped);
            return Chunk::TooLarge;
        }
        self.body.extend_from_slice(bytes);
        Chunk::More
    }

    /// The answer is complete: store it if it may be; what storing did.
    /// The answer's body, if it is a `200`.
    pub fn answer(&self) -> Option<&[u8]> {
        (self.status == 200).then_some(self.body.as_slice())
    }

    pub fn finish(
        self,
        cx: &mut Ctx<'_, impl RequestHost>,
        key: &CacheKey,
        asked: &Asked,
    ) -> Stored {
        let answer = Answer {
            status: self.status,
            headers: &self.headers,
            body: &self.body,
        };
        store_answer(cx, key, answer, asked)
    }
}
