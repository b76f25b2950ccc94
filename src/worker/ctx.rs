//! What every decision of a worker runs with: the [`Plugin`] (fixed at configuration), the
//! [`Worker`] (mutable, in a `RefCell` shared by the root and HTTP contexts) and the host.
//!
//! The rule it keeps: no borrow of the worker is held across a host call. Envoy runs a paused
//! request's own callbacks inside [`RootHost::answer`] and [`RootHost::resume`] (and a request's response
//! callbacks inside its local reply), and those callbacks borrow the worker: a borrow held across
//! the call would panic. [`Ctx`] makes such code impossible to write rather than asking each
//! function to avoid it: the worker is reached only inside the closure given to [`Ctx::worker`],
//! which takes the context by `&mut`, while the host is lent by `&self`. So the closure can reach
//! neither the context nor a host reference taken from it, and the borrow checker refuses code
//! that calls the host while it holds the worker:
//!
//! ```compile_fail,E0502
//! use graphql_cache::effects::host::RootHost;
//! use graphql_cache::worker::ctx::Ctx;
//!
//! fn resume_while_holding_the_worker(cx: &mut Ctx<'_, impl RootHost>, context: u32) {
//!     let host = cx.host();
//!     cx.worker(|w| {
//!         w.flights.forget(context);
//!         host.resume(context);
//!     });
//! }
//! ```
//!
//! ```compile_fail,E0502
//! use graphql_cache::effects::host::RootHost;
//! use graphql_cache::worker::ctx::Ctx;
//!
//! fn resume_while_holding_the_worker(cx: &mut Ctx<'_, impl RootHost>, context: u32) {
//!     cx.worker(|w| {
//!         w.flights.forget(context);
//!         cx.host().resume(context);
//!     });
//! }
//! ```
//!
//! Nor can the worker be reached around the closure:
//!
//! ```compile_fail,E0616
//! use graphql_cache::effects::host::RootHost;
//! use graphql_cache::worker::ctx::Ctx;
//!
//! fn resume_while_holding_the_worker(cx: &mut Ctx<'_, impl RootHost>, context: u32) {
//!     let mut worker = cx.worker.borrow_mut();
//!     worker.outcomes.remove(&context);
//!     cx.host().resume(context);
//! }
//! ```
//!
//! What is read from the host is read before, and what the worker says is taken out of the
//! closure before the host is called:
//!
//! ```
//! use graphql_cache::effects::host::RootHost;
//! use graphql_cache::worker::ctx::Ctx;
//!
//! fn resume(cx: &mut Ctx<'_, impl RootHost>, context: u32) {
//!     let now_ms = cx.host().now_ms();
//!     let id = cx.worker(|w| {
//!         w.last_beat_ms = now_ms;
//!         w.id
//!     });
//!     if id != 0 {
//!         cx.host().resume(context);
//!     }
//! }
//! ```
//!
//! [`RootHost::answer`]: crate::effects::host::RootHost::answer
//! [`RootHost::resume`]: crate::effects::host::RootHost::resume

use crate::config::Config;
use crate::effects::host::Host;
use crate::effects::store::{SharedStore, StoreError};
use crate::worker::state::{Plugin, Worker};
use std::cell::RefCell;

/// A worker's plugin, state and host, for one callback (see the module's documentation for the
/// rule it keeps).
pub struct Ctx<'a, H: ?Sized> {
    plugin: &'a Plugin,
    worker: &'a RefCell<Worker>,
    host: &'a H,
}

impl<'a, H: ?Sized> Ctx<'a, H> {
    pub fn new(plugin: &'a Plugin, worker: &'a RefCell<Worker>, host: &'a H) -> Self {
        Ctx {
            plugin,
            worker,
            host,
        }
    }

    /// Fixed while the callback runs: may be held across anything.
    pub fn plugin(&self) -> &'a Plugin {
        self.plugin
    }

    pub fn config(&self) -> &'a Config {
        &self.plugin.config
    }

    /// The host, lent for as long as the context is not lent to [`Ctx::worker`].
    pub fn host(&self) -> &H {
        self.host
    }

    /// Runs `f` on the worker's state: the only way to it. The context is taken for the time of
    /// the call, so `f` cannot call the host.
    pub fn worker<R>(&mut self, f: impl FnOnce(&mut Worker) -> R) -> R {
        f(&mut self.worker.borrow_mut())
    }

    /// [`Ctx::worker`] with shared data beside it: a shared-data call runs no other context's
    /// callbacks, so it may be made while the worker is held. `f` sees only that part of the
    /// host ([`SharedOnly`]): nothing in it can answer or resume a request.
    pub fn worker_and_shared<R>(
        &mut self,
        f: impl FnOnce(&mut Worker, &SharedOnly<'_, H>) -> R,
    ) -> R
    where
        H: SharedStore,
    {
        f(&mut self.worker.borrow_mut(), &SharedOnly(self.host))
    }

    /// The part of the host that runs no other context's callbacks, for a guard that acts when
    /// dropped (a lead permit, see `flights::permit`): it may outlive the other calls of the
    /// callback, even a borrow of the worker, because nothing in it can answer or resume.
    pub fn quiet(&self) -> SharedOnly<'a, H> {
        SharedOnly(self.host)
    }

    /// [`Ctx::worker`], or `None` if the worker is borrowed already. For callbacks that Envoy may
    /// run from another context's host call (a request's response callbacks and its end).
    pub fn try_worker<R>(&mut self, f: impl FnOnce(&mut Worker) -> R) -> Option<R> {
        let mut worker = self.worker.try_borrow_mut().ok()?;
        Some(f(&mut worker))
    }
}

/// The shared-data part of a host, the wake-up queues and the clock, and nothing else (see
/// [`Ctx::worker_and_shared`] and [`Ctx::quiet`]): none of it runs another context's callbacks.
pub struct SharedOnly<'a, H: ?Sized>(&'a H);

impl<H: Host + ?Sized> SharedOnly<'_, H> {
    pub fn now_ms(&self) -> u64 {
        self.0.now_ms()
    }

    /// Puts `message` on a worker's wake-up queue (see [`Host::enqueue`]).
    pub fn enqueue(&self, queue: u32, message: &[u8]) -> bool {
        self.0.enqueue(queue, message)
    }
}

impl<H: SharedStore + ?Sized> SharedStore for SharedOnly<'_, H> {
    fn get_cas(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        self.0.get_cas(key)
    }

    fn set_cas(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), StoreError> {
        self.0.set_cas(key, value, cas)
    }
}
