//! In-memory hosts for native tests: [`MapStore`] is Envoy's shared data as ENVOY-FACTS.md
//! describes it; [`FakeHost`] records every other effect so tests can assert on it. Several
//! `FakeHost`s sharing one `MapStore` and one [`Queues`] are several workers of one Envoy.

use crate::effects::counters::Counter;
use crate::effects::header_block::HeaderBlock;
use crate::effects::host::{
    Callout, Declined, Host, LogLevel, RequestHost, RootHost, Unserializable,
};
use crate::effects::store::{SharedStore, StoreError};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// Envoy's shared data, as ENVOY-FACTS.md describes it: a CAS token per key that changes on
/// every write, CAS checked only for keys that exist, emptied values still present.
#[derive(Default)]
pub struct MapStore(pub RefCell<HashMap<String, (Vec<u8>, u32)>>);

impl SharedStore for MapStore {
    fn get_cas(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        match self.0.borrow().get(key) {
            None => (None, None),
            Some((v, cas)) if v.is_empty() => (None, Some(*cas)),
            Some((v, cas)) => (Some(v.clone()), Some(*cas)),
        }
    }

    fn set_cas(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), StoreError> {
        let mut map = self.0.borrow_mut();
        let next = match map.get(key) {
            Some((_, current)) => {
                if cas.is_some_and(|c| c != *current) {
                    return Err(StoreError::CasMismatch);
                }
                current + 1
            }
            None => 1,
        };
        map.insert(key.to_string(), (value.to_vec(), next));
        Ok(())
    }
}

/// Envoy's shared queues: queue token to the messages not yet dequeued.
#[derive(Default)]
pub struct Queues(pub RefCell<HashMap<u32, Vec<Vec<u8>>>>);

impl Queues {
    /// Takes every message waiting on `queue`, as `on_queue_ready` would dequeue them.
    pub fn drain(&self, queue: u32) -> Vec<Vec<u8>> {
        self.0.borrow_mut().remove(&queue).unwrap_or_default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub context: u32,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A callout response: its headers and body.
pub type CalloutAnswer = (Vec<(String, Vec<u8>)>, Vec<u8>);

/// One worker's host. `context` is the request whose callback is running (for `RequestHost`).
pub struct FakeHost {
    pub store: Rc<MapStore>,
    /// The purge signal, one per Envoy like its counters; `signal_off`: a host without one.
    pub signal: Rc<Cell<u64>>,
    pub signal_off: Cell<bool>,
    pub queues: Rc<Queues>,
    pub clock: Rc<Cell<u64>>,
    /// Every shared-data write fails (`StoreError::Failed`).
    pub fail_writes: Cell<bool>,
    pub counters: RefCell<HashMap<Counter, u64>>,
    /// Counters defined by name, one per Envoy like Envoy's (an id is an index).
    pub named: Rc<RefCell<Vec<(String, u64)>>>,
    pub logs: RefCell<Vec<(LogLevel, String)>>,
    pub dispatched: RefCell<Vec<(u32, Callout)>>,
    next_token: Cell<u32>,
    /// Envoy refuses to register a wake-up queue.
    pub refuse_queue: Cell<bool>,
    /// The root timer's period as last set (0: never set here).
    pub tick_ms: Cell<u64>,
    /// Envoy refuses callouts (breaker open, no healthy host).
    pub refuse_dispatch: Cell<bool>,
    /// Clusters whose callouts Envoy refuses (circuit breaker open, every host ejected).
    pub refuse_clusters: RefCell<Vec<String>>,
    /// Answers and resumes of paused requests, in order.
    pub answered: RefCell<Vec<Reply>>,
    /// The last access-log record set.
    pub log_record: RefCell<Option<String>>,
    pub resumed: RefCell<Vec<u32>>,
    /// Requests whose client went away: answering or resuming them fails.
    pub gone: RefCell<HashSet<u32>>,
    /// Checked inside `answer` and `resume`, where Envoy runs the paused request's own callbacks:
    /// it must find the worker state free (no borrow held across the call).
    pub reentry_check: RefCell<Option<Box<dyn Fn() -> bool>>>,
    pub reentry_violations: Cell<u32>,
    /// Set by `dispatch` when a paused request was answered or resumed earlier in the same
    /// callback (see [`FakeHost::begin_callback`]).
    pub answered_before_dispatch: Cell<bool>,
    in_callback: Cell<u32>,
    // The running request.
    pub context: Cell<u32>,
    pub request_headers: RefCell<Vec<(String, Vec<u8>)>>,
    pub request_body: RefCell<Vec<u8>>,
    /// Leaf values by dotted path; a path above them reads as their map (Envoy's pairs).
    pub properties: RefCell<HashMap<String, Vec<u8>>>,
    pub property_reads: Cell<u32>,
    /// Paths Envoy cannot serialize (a map holding a null).
    pub unserializable: RefCell<HashSet<String>>,
    pub response_headers: RefCell<Vec<(String, Vec<u8>)>>,
    pub response_chunk: RefCell<Vec<u8>>,
    pub headers_set: RefCell<Vec<(String, String)>>,
    /// The callout response being delivered: headers, body.
    pub callout: RefCell<CalloutAnswer>,
    pub callout_body_reads: Cell<u32>,
    /// The VM's environment (see [`Host::env`]).
    pub env: RefCell<HashMap<String, String>>,
}

impl FakeHost {
    /// A worker of its own Envoy.
    pub fn new() -> FakeHost {
        FakeHost::sharing(
            Rc::default(),
            Rc::default(),
            Rc::new(Cell::new(1_000_000)),
            Rc::default(),
        )
    }

    /// A worker of the same Envoy as `other`: same shared data, queues, clock and counters.
    pub fn sibling(other: &FakeHost) -> FakeHost {
        let mut host = FakeHost::sharing(
            Rc::clone(&other.store),
            Rc::clone(&other.queues),
            Rc::clone(&other.clock),
            Rc::clone(&other.signal),
        );
        host.named = Rc::clone(&other.named);
        host
    }

    /// The value of the counter defined as `name` (0 if never defined).
    pub fn named_counter(&self, name: &str) -> u64 {
        self.named
            .borrow()
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| *v)
    }

    fn sharing(
        store: Rc<MapStore>,
        queues: Rc<Queues>,
        clock: Rc<Cell<u64>>,
        signal: Rc<Cell<u64>>,
    ) -> FakeHost {
        FakeHost {
            store,
            signal,
            signal_off: Cell::new(false),
            queues,
            clock,
            fail_writes: Cell::new(false),
            counters: RefCell::default(),
            named: Rc::default(),
            logs: RefCell::default(),
            dispatched: RefCell::default(),
            next_token: Cell::new(1),
            refuse_queue: Cell::new(false),
            tick_ms: Cell::new(0),
            refuse_dispatch: Cell::new(false),
            refuse_clusters: RefCell::default(),
            answered: RefCell::default(),
            log_record: RefCell::default(),
            resumed: RefCell::default(),
            gone: RefCell::default(),
            reentry_check: RefCell::new(None),
            reentry_violations: Cell::new(0),
            answered_before_dispatch: Cell::new(false),
            in_callback: Cell::new(0),
            context: Cell::new(0),
            request_headers: RefCell::default(),
            request_body: RefCell::default(),
            properties: RefCell::default(),
            property_reads: Cell::new(0),
            unserializable: RefCell::default(),
            response_headers: RefCell::default(),
            response_chunk: RefCell::default(),
            headers_set: RefCell::default(),
            callout: RefCell::default(),
            callout_body_reads: Cell::new(0),
            env: RefCell::default(),
        }
    }

    pub fn advance(&self, ms: u64) {
        self.clock.set(self.clock.get() + ms);
    }

    pub fn counted(&self, counter: Counter) -> u64 {
        self.counters.borrow().get(&counter).copied().unwrap_or(0)
    }

    pub fn reply_to(&self, context: u32) -> Option<Reply> {
        self.answered
            .borrow()
            .iter()
            .find(|r| r.context == context)
            .cloned()
    }

    /// The header the filter set on the running request's response.
    pub fn header_set(&self, name: &str) -> Option<String> {
        self.headers_set
            .borrow()
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    /// A new host callback starts: answers before it do not count against its dispatches.
    pub fn begin_callback(&self) {
        self.in_callback.set(0);
    }

    fn check_reentry(&self) {
        self.in_callback.set(self.in_callback.get() + 1);
        if let Some(check) = self.reentry_check.borrow().as_ref() {
            if !check() {
                self.reentry_violations
                    .set(self.reentry_violations.get() + 1);
            }
        }
    }
}

impl Default for FakeHost {
    fn default() -> Self {
        FakeHost::new()
    }
}

impl SharedStore for FakeHost {
    fn get_cas(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        self.store.get_cas(key)
    }

    fn set_cas(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), StoreError> {
        if self.fail_writes.get() {
            return Err(StoreError::Failed);
        }
        self.store.set_cas(key, value, cas)
    }
}

fn owned(headers: Vec<(&str, &str)>) -> Vec<(String, String)> {
    headers
        .into_iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

impl Host for FakeHost {
    fn now_us(&self) -> u64 {
        self.clock.get() * 1000
    }

    fn env(&self, name: &str) -> Option<String> {
        self.env.borrow().get(name).cloned()
    }

    fn random_u64(&self) -> u64 {
        // Different per host, different per call: enough to tell secrets apart in tests.
        let n = self.next_token.get();
        self.next_token.set(n + 1);
        let seed = (Rc::as_ptr(&self.store) as u64) ^ (u64::from(n) << 32);
        seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1
    }

    fn count(&self, counter: Counter) {
        *self.counters.borrow_mut().entry(counter).or_default() += 1;
    }

    fn define_counter(&self, name: &str) -> Option<u32> {
        let mut named = self.named.borrow_mut();
        let at = match named.iter().position(|(n, _)| n == name) {
            Some(at) => at,
            None => {
                named.push((name.to_string(), 0));
                named.len() - 1
            }
        };
        u32::try_from(at).ok()
    }

    fn add_to_counter(&self, id: u32, n: u64) {
        if let Some((_, v)) = self.named.borrow_mut().get_mut(id as usize) {
            *v += n;
        }
    }

    fn purge_signal(&self) -> Option<u64> {
        (!self.signal_off.get()).then(|| self.signal.get())
    }

    fn raise_purge_signal(&self) {
        if !self.signal_off.get() {
            self.signal.set(self.signal.get() + 1);
        }
    }

    fn log(&self, level: LogLevel, message: &str) {
        self.logs.borrow_mut().push((level, message.to_string()));
    }

    fn register_queue(&self, _name: &str) -> Option<u32> {
        if self.refuse_queue.get() {
            return None;
        }
        let token = self.next_token.get();
        self.next_token.set(token + 1);
        Some(token)
    }

    fn set_tick_ms(&self, period_ms: u64) -> bool {
        self.tick_ms.set(period_ms);
        true
    }

    fn enqueue(&self, queue: u32, message: &[u8]) -> bool {
        self.queues
            .0
            .borrow_mut()
            .entry(queue)
            .or_default()
            .push(message.to_vec());
        true
    }
}

impl RootHost for FakeHost {
    fn dispatch(&self, request: &Callout, _timeout_ms: u64) -> Result<u32, Declined> {
        if self.in_callback.get() > 0 {
            self.answered_before_dispatch.set(true);
        }
        if self.refuse_dispatch.get() || self.refuse_clusters.borrow().contains(&request.cluster) {
            return Err(Declined);
        }
        let token = self.next_token.get();
        self.next_token.set(token + 1);
        self.dispatched.borrow_mut().push((token, request.clone()));
        Ok(token)
    }

    fn callout_headers(&self) -> Vec<(String, Vec<u8>)> {
        self.callout.borrow().0.clone()
    }

    fn callout_body(&self, size: usize) -> Option<Vec<u8>> {
        self.callout_body_reads
            .set(self.callout_body_reads.get() + 1);
        let callout = self.callout.borrow();
        Some(callout.1[..size.min(callout.1.len())].to_vec())
    }

    fn answer(&self, context: u32, status: u16, headers: Vec<(&str, &str)>, body: &[u8]) -> bool {
        self.check_reentry();
        if self.gone.borrow().contains(&context) {
            return false;
        }
        self.answered.borrow_mut().push(Reply {
            context,
            status,
            headers: owned(headers),
            body: body.to_vec(),
        });
        true
    }

    fn resume(&self, context: u32) -> bool {
        self.check_reentry();
        if self.gone.borrow().contains(&context) {
            return false;
        }
        self.resumed.borrow_mut().push(context);
        true
    }
}

impl RequestHost for FakeHost {
    fn dispatch_own(&self, request: &Callout, timeout_ms: u64) -> Result<u32, Declined> {
        self.dispatch(request, timeout_ms)
    }

    fn own_callout_body(&self, size: usize) -> Option<Vec<u8>> {
        self.callout_body(size)
    }

    fn own_callout_headers(&self) -> Vec<(String, Vec<u8>)> {
        self.callout_headers()
    }

    fn resume_self(&self, me: u32) {
        self.resume(me);
    }

    fn request_header(&self, name: &str) -> Option<Vec<u8>> {
        self.request_headers
            .borrow()
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    fn request_headers(&self) -> HeaderBlock {
        HeaderBlock::from_pairs(
            self.request_headers
                .borrow()
                .iter()
                .map(|(n, v)| (n.as_bytes(), v.as_slice())),
        )
    }

    fn request_body(&self, size: usize) -> Option<Vec<u8>> {
        let body = self.request_body.borrow();
        Some(body[..size.min(body.len())].to_vec())
    }

    fn property(&self, path: &[&str]) -> Option<Vec<u8>> {
        self.property_or_error(path).ok().flatten()
    }

    fn property_or_error(&self, path: &[&str]) -> Result<Option<Vec<u8>>, Unserializable> {
        self.property_reads.set(self.property_reads.get() + 1);
        let path = path.join(".");
        if self.unserializable.borrow().contains(&path) {
            return Err(Unserializable);
        }
        let properties = self.properties.borrow();
        if let Some(v) = properties.get(&path) {
            return Ok(Some(v.clone()));
        }
        let prefix = format!("{path}.");
        let mut fields: Vec<(&str, &Vec<u8>)> = properties
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?, v)))
            .filter(|(k, _)| !k.contains('.'))
            .collect();
        if fields.is_empty() {
            return Ok(None);
        }
        fields.sort();
        let mut out = (fields.len() as u32).to_le_bytes().to_vec();
        for (k, v) in &fields {
            out.extend_from_slice(&(k.len() as u32).to_le_bytes());
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        }
        for (k, v) in &fields {
            out.extend_from_slice(k.as_bytes());
            out.push(0);
            out.extend_from_slice(v);
            out.push(0);
        }
        Ok(Some(out))
    }

    fn set_request_header(&self, name: &str, value: &str) {
        let mut headers = self.request_headers.borrow_mut();
        headers.retain(|(n, _)| n != name);
        headers.push((name.to_string(), value.as_bytes().to_vec()));
    }

    fn respond(&self, status: u16, headers: Vec<(&str, &str)>, body: &[u8]) {
        self.answered.borrow_mut().push(Reply {
            context: self.context.get(),
            status,
            headers: owned(headers),
            body: body.to_vec(),
        });
    }

    fn set_log_record(&self, record: &str) {
        *self.log_record.borrow_mut() = Some(record.to_string());
    }

    fn set_response_header(&self, name: &str, value: &str) {
        self.headers_set
            .borrow_mut()
            .push((name.to_string(), value.to_string()));
    }

    fn response_headers(&self) -> Vec<(String, Vec<u8>)> {
        self.response_headers.borrow().clone()
    }

    fn response_body(&self, size: usize) -> Option<Vec<u8>> {
        let chunk = self.response_chunk.borrow();
        Some(chunk[..size.min(chunk.len())].to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_store_behaves_like_envoy() {
        let s = MapStore::default();
        assert_eq!(s.get_cas("k"), (None, None));
        s.set_cas("k", b"a", Some(42)).unwrap();
        let (v, cas) = s.get_cas("k");
        assert_eq!(v.as_deref(), Some(&b"a"[..]));
        assert_eq!(
            s.set_cas("k", b"b", Some(cas.unwrap() + 1)),
            Err(StoreError::CasMismatch)
        );
        s.set_cas("k", b"", cas).unwrap();
        assert!(matches!(s.get_cas("k"), (None, Some(_))));
    }
}
