//! The host as the core sees it, by side. [`Host`] is what either side of a worker may do (the
//! clock, counters, shared data, the wake-up queues); [`RootHost`] adds the root context's own
//! powers (the callouts a flight shares, letting paused requests go); [`RequestHost`] adds the
//! request whose callback is running (its headers and body, its own callout, resuming itself).
//! Code that runs on a request's side is written against `RequestHost`, so a call only the
//! root may make does not compile there.
//!
//! Rules the core keeps, because Envoy runs another callback of the same VM inside some of these
//! calls: no `RefCell` borrow of worker state is held across [`RootHost::answer`] or
//! [`RootHost::resume`] (`worker::ctx::Ctx` makes that a compile error: no host call while the
//! worker is borrowed); every callout of a root callback is dispatched before its first answer
//! (answering switches the effective context).

use crate::effects::counters::Counter;
use crate::effects::header_block::HeaderBlock;
use crate::effects::store::SharedStore;

/// An HTTP request the root context sends upstream (`:method`, `:path`, `:authority` first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Callout {
    pub cluster: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
}

/// The `:status` of a response's headers (an upstream answer, or a callout's), if readable.
pub fn status(headers: &[(String, Vec<u8>)]) -> Option<u16> {
    headers
        .iter()
        .find(|(n, _)| n == ":status")
        .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse().ok())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Warn,
    Error,
}

/// Envoy could not serialize a property's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unserializable;

/// Envoy refused a callout at once: unknown cluster, circuit breaker open, no healthy host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Declined;

pub trait Host: SharedStore {
    /// Wall-clock microseconds since the Unix epoch (0 if the host cannot tell).
    fn now_us(&self) -> u64;

    /// Wall-clock milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64 {
        self.now_us() / 1000
    }

    /// Random bits (WASI's `random_get` in Envoy), for secrets and ids.
    fn random_u64(&self) -> u64;

    /// Counting never fails a request: a host that cannot count ignores it.
    fn count(&self, counter: Counter);

    /// Counts `n` at once.
    fn count_n(&self, counter: Counter, n: u64) {
        (0..n).for_each(|_| self.count(counter));
    }

    /// Defines the counter `name`, or finds the one defined already: its id, `None` if refused.
    /// Envoy's counters are process-wide: every worker defining a name counts into one stat.
    fn define_counter(&self, name: &str) -> Option<u32>;

    /// Adds `n` to a counter of [`Host::define_counter`].
    fn add_to_counter(&self, id: u32, n: u64);

    fn log(&self, level: LogLevel, message: &str);

    /// Registers this worker's wake-up queue under `name`; its token, or `None` if refused.
    fn register_queue(&self, name: &str) -> Option<u32>;

    /// Puts `message` on the wake-up queue `queue` (any worker's). `false` if refused.
    fn enqueue(&self, queue: u32, message: &[u8]) -> bool;

    /// From the root context: its timer fires every `period_ms` from now on. `false` if refused.
    fn set_tick_ms(&self, period_ms: u64) -> bool;

    /// A number shared by every worker of this Envoy that moves after each purge (an Envoy
    /// counter, read without a copy): a lookup learns whether the marks moved for far less than
    /// a shared-data read. `None` when the host has none that works; then the purge epoch in
    /// shared data is read instead.
    fn purge_signal(&self) -> Option<u64> {
        None
    }

    /// Moves the purge signal, after the marks were written.
    fn raise_purge_signal(&self) {}

    /// An environment variable of Envoy's that the VM was given (WASI's environment: Envoy
    /// passes those listed in `vm_config.environment_variables`). Where secrets come from, so
    /// that they stay out of Envoy's `/config_dump`.
    fn env(&self, _name: &str) -> Option<String> {
        None
    }
}

/// The root context's own powers: only the root sends the callouts a flight shares and lets
/// paused requests go (answers or resumes them). A request's callbacks get a [`RequestHost`]
/// instead, so code that runs there cannot do either (a callout a request sends dies with it,
/// and answering another request from inside one runs that request's callbacks in the middle
/// of this one's):
///
/// ```compile_fail,E0599
/// use graphql_cache::effects::host::RequestHost;
/// use graphql_cache::worker::ctx::Ctx;
///
/// fn wake_a_waiter_from_a_request(cx: &mut Ctx<'_, impl RequestHost>, waiter: u32) {
///     cx.host().resume(waiter);
/// }
/// ```
///
/// ```compile_fail,E0599
/// use graphql_cache::effects::host::{Callout, RequestHost};
/// use graphql_cache::worker::ctx::Ctx;
///
/// fn share_a_fetch_from_a_request(cx: &mut Ctx<'_, impl RequestHost>, fetch: &Callout) {
///     let _ = cx.host().dispatch(fetch, 1000);
/// }
/// ```
pub trait RootHost: Host {
    /// Sends `request` upstream from this worker's root context; the answer arrives as a callout
    /// response with the returned token.
    fn dispatch(&self, request: &Callout, timeout_ms: u64) -> Result<u32, Declined>;

    /// The headers of the callout response being delivered (root context, after an answer with
    /// headers only).
    fn callout_headers(&self) -> Vec<(String, Vec<u8>)>;

    /// The body of the callout response being delivered, `size` bytes.
    fn callout_body(&self, size: usize) -> Option<Vec<u8>>;

    /// Answers the paused request `context` of this worker with a local reply. `false` when that
    /// request is gone (its client left).
    fn answer(&self, context: u32, status: u16, headers: Vec<(&str, &str)>, body: &[u8]) -> bool;

    /// Lets the paused request `context` of this worker continue upstream. `false` when gone.
    fn resume(&self, context: u32) -> bool;
}

/// The request whose callback is running.
pub trait RequestHost: Host {
    /// Sends this request's own callout (it dies with the request; its answer comes to this
    /// request's callbacks).
    fn dispatch_own(&self, request: &Callout, timeout_ms: u64) -> Result<u32, Declined>;

    /// The body of this request's own callout response being delivered, `size` bytes.
    fn own_callout_body(&self, size: usize) -> Option<Vec<u8>>;

    /// The headers of this request's own callout response being delivered.
    fn own_callout_headers(&self) -> Vec<(String, Vec<u8>)>;

    /// Lets this request (`me`, its own context: the only one it may resume) continue upstream.
    fn resume_self(&self, me: u32);

    fn request_header(&self, name: &str) -> Option<Vec<u8>>;

    /// Every request header, in one read.
    fn request_headers(&self) -> HeaderBlock;

    /// The buffered request body, `size` bytes from the start.
    fn request_body(&self, size: usize) -> Option<Vec<u8>>;

    /// An Envoy property (`xds.cluster_name`, route metadata, dynamic metadata), raw.
    fn property(&self, path: &[&str]) -> Option<Vec<u8>>;

    /// The same, telling a value Envoy cannot hand over (a map holding a null, say) apart from
    /// an absent one.
    fn property_or_error(&self, path: &[&str]) -> Result<Option<Vec<u8>>, Unserializable> {
        Ok(self.property(path))
    }

    /// Replaces a header of the request before it goes upstream.
    fn set_request_header(&self, name: &str, value: &str);

    /// Answers this request with a local reply.
    fn respond(&self, status: u16, headers: Vec<(&str, &str)>, body: &[u8]);

    fn set_response_header(&self, name: &str, value: &str);

    /// The request's access-log record (Envoy's filter state `wasm.graphql_cache`).
    fn set_log_record(&self, record: &str);

    fn response_headers(&self) -> Vec<(String, Vec<u8>)>;

    /// The response body chunk being delivered, `size` bytes.
    fn response_body(&self, size: usize) -> Option<Vec<u8>>;
}
